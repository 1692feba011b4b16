//! `--recovery VARIANT` and `--fail-cmis K --fail-at T --fail-for D` (004 §5): Gemini's
//! coordinator over the embedded CMIs, and K of them taken away from everyone for a while: a
//! relay in front of each CMI cuts every connection to it, the coordinator's too, and the
//! instance keeps its content, as 004 emulates failures. The record gains a timeline of the
//! failed instances' hit ratio, the time they take to get it back, and the keys discarded.
//!
//! The variants differ in what becomes of a returning instance's content ([`Repair`]):
//! `gemini-i` and `gemini-o` repair its dirty keys, `volatile` discards it all, and `stale` keeps
//! it unrepaired, a baseline that serves overwritten values (the validator counts them).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cads::gemini::{Repair, Service, ServiceOptions};
use cads::store::Relay;
use cads::{Client, ClientConfig, ClientError, Coordinator};
use serde::Serialize;

/// The coordinator's lease on an instance in these runs (an instance serves a tenth less).
pub const LEASE: Duration = Duration::from_millis(1_000);
/// Time between the coordinator's probes.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Time between samples of the failed instances' hit ratio.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The share of its hit ratio before the failure a returned instance must reach to count as
/// restored.
pub const RESTORED_SHARE: f64 = 0.95;

/// Gemini's settings of a run.
#[derive(Clone, Debug)]
pub struct GeminiOptions {
    /// What becomes of a returning instance's content.
    pub recovery: Repair,
    /// Fragments the key space is split into.
    pub fragments: u32,
    /// The failure to inject, if any.
    pub fail: Option<CmiFailure>,
}

/// `--fail-cmis K --fail-at T --fail-for D`: the first K CMIs cut off from everyone from T into
/// the run phase, for D.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmiFailure {
    /// How many CMIs fail (the first ones).
    pub cmis: usize,
    /// When, from the start of the run phase.
    pub at: Duration,
    /// For how long.
    pub length: Duration,
}

/// The coordinator and the relays of one policy's deployment.
pub struct GeminiDeployment {
    relays: Vec<Relay>,
    /// The CMIs themselves, for the hit-ratio samples (INFO is answered while fenced).
    direct: Client,
    stop: Arc<AtomicBool>,
    coordinator: Option<JoinHandle<()>>,
}

impl GeminiDeployment {
    /// Relays in front of the CMIs at `addrs`, and the coordinator over them; returns once every
    /// instance serves under its lease.
    pub fn start(
        addrs: &[SocketAddr],
        opts: &GeminiOptions,
        password: Option<String>,
    ) -> Result<GeminiDeployment> {
        let relays = addrs
            .iter()
            .map(|&a| Relay::start(a).context("starting a relay in front of a CMI"))
            .collect::<Result<Vec<_>>>()?;
        let client = |addrs: Vec<SocketAddr>| {
            let mut config = ClientConfig::new(addrs);
            config.password = password.clone();
            Client::new(config, Coordinator::process())
        };
        let relayed: Vec<SocketAddr> = relays.iter().map(Relay::addr).collect();
        let options = ServiceOptions {
            fragments: opts.fragments,
            lease: LEASE,
            probe_every: PROBE_EVERY,
            state_file: None,
            repair: opts.recovery,
        };
        let service =
            Service::start(client(relayed), options, 0).context("starting Gemini's coordinator")?;
        let stop = Arc::new(AtomicBool::new(false));
        let coordinator = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("coordinator".into())
                .spawn(move || service.run(&stop))
                .context("starting the coordinator's thread")?
        };
        let dep = GeminiDeployment {
            relays,
            direct: client(addrs.to_vec()),
            stop,
            coordinator: Some(coordinator),
        };
        dep.wait_until_served()?;
        Ok(dep)
    }

    /// The addresses the framework reaches the CMIs at (through the relays).
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.relays.iter().map(Relay::addr).collect()
    }

    fn wait_until_served(&self) -> Result<()> {
        let started = Instant::now();
        let probe: &[u8] = b"gemini:probe";
        loop {
            let places: Vec<(usize, &[u8])> = (0..self.direct.cmis()).map(|i| (i, probe)).collect();
            let fenced = self
                .direct
                .get_at(&places)
                .iter()
                .any(|r| matches!(r, Err(ClientError::Fenced)));
            if !fenced {
                return Ok(());
            }
            if started.elapsed() > 20 * LEASE {
                bail!("the CMIs were not granted leases by Gemini's coordinator");
            }
            std::thread::sleep(PROBE_EVERY);
        }
    }

    /// Cuts the first `count` CMIs off from everyone, or lets them back.
    fn set_failed(&self, count: usize, failed: bool) {
        for relay in &self.relays[..count.min(self.relays.len())] {
            relay.set_cut(failed);
        }
    }

    /// Hits, misses and discarded keys of the first `count` CMIs (those a run fails), summed.
    fn counters(&self, count: usize) -> Option<(u64, u64, u64)> {
        let mut sum = (0, 0, 0);
        for cmi in 0..count.min(self.direct.cmis()) {
            let stats = self.direct.info(cmi).ok()?;
            sum.0 += stats.keyspace_hits;
            sum.1 += stats.keyspace_misses;
            sum.2 += stats.discarded_keys;
        }
        Some(sum)
    }
}

impl Drop for GeminiDeployment {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(coordinator) = self.coordinator.take() {
            let _ = coordinator.join();
        }
    }
}

/// What a record says about a run's failure of CMIs.
#[derive(Clone, Debug, Serialize)]
pub struct GeminiRecord {
    /// The variant (`gemini-i`, `gemini-o`, `volatile`, `stale`).
    pub recovery: &'static str,
    /// How many CMIs failed.
    pub failed_cmis: usize,
    /// When they were cut off, seconds into the run phase (None: the run ended first).
    pub fail_at_s: Option<f64>,
    /// When they were let back.
    pub back_s: Option<f64>,
    /// Their hit ratio before the failure (over the samples before it).
    pub hit_ratio_before: Option<f64>,
    /// Seconds from their return until their hit ratio was back to
    /// [`RESTORED_SHARE`] of what it was before (None: not within the run).
    pub restore_s: Option<f64>,
    /// Entries they discarded as obsolete (of fragments whose copy was discarded).
    pub discarded_keys: u64,
    /// Their hit ratio every [`SAMPLE_EVERY`].
    pub timeline: Vec<HitSample>,
}

/// One sample of the failed CMIs' hit ratio.
#[derive(Clone, Debug, Serialize)]
pub struct HitSample {
    /// Seconds since the run phase began.
    pub t_s: f64,
    /// Hits over reads since the previous sample (None: no reads, or they could not be asked).
    pub hit_ratio: Option<f64>,
}

/// Runs `failure` against `dep` from `started` until `stop` is set (a failure that began lasts
/// its whole length), sampling the failed CMIs' hit ratio throughout.
pub(crate) fn fail_and_watch(
    dep: &GeminiDeployment,
    recovery: Repair,
    failure: CmiFailure,
    started: Instant,
    stop: &AtomicBool,
) -> GeminiRecord {
    let k = failure.cmis;
    let mut record = GeminiRecord {
        recovery: recovery.name(),
        failed_cmis: k,
        fail_at_s: None,
        back_s: None,
        hit_ratio_before: None,
        restore_s: None,
        discarded_keys: 0,
        timeline: Vec::new(),
    };
    let first = dep.counters(k);
    let mut last = first;
    let mut next_sample = started + SAMPLE_EVERY;
    loop {
        let now = Instant::now();
        let t = now - started;
        if record.fail_at_s.is_none() && t >= failure.at && !stop.load(Ordering::Acquire) {
            dep.set_failed(k, true);
            record.fail_at_s = Some(t.as_secs_f64());
        }
        if record.fail_at_s.is_some() && record.back_s.is_none() && t >= failure.at + failure.length
        {
            dep.set_failed(k, false);
            record.back_s = Some(t.as_secs_f64());
        }
        let failing = record.fail_at_s.is_some() && record.back_s.is_none();
        if stop.load(Ordering::Acquire) && !failing {
            break;
        }
        if now >= next_sample {
            next_sample += SAMPLE_EVERY;
            let counters = dep.counters(k);
            let hit_ratio = match (last, counters) {
                (Some(a), Some(b)) => {
                    let (hits, misses) = (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1));
                    (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
                }
                _ => None,
            };
            if counters.is_some() {
                last = counters;
            }
            record.timeline.push(HitSample {
                t_s: t.as_secs_f64(),
                hit_ratio,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let (Some(a), Some(b)) = (first, dep.counters(k)) {
        record.discarded_keys = b.2.saturating_sub(a.2);
    }
    restored(&mut record);
    record
}

/// Fills in the hit ratio before the failure and the time to get back to it.
fn restored(record: &mut GeminiRecord) {
    let Some(fail_at) = record.fail_at_s else {
        return;
    };
    let before: Vec<f64> = record
        .timeline
        .iter()
        .filter(|s| s.t_s <= fail_at)
        .filter_map(|s| s.hit_ratio)
        .collect();
    if before.is_empty() {
        return;
    }
    let level = before.iter().sum::<f64>() / before.len() as f64;
    record.hit_ratio_before = Some(level);
    let Some(back) = record.back_s else {
        return;
    };
    record.restore_s = record
        .timeline
        .iter()
        .filter(|s| s.t_s > back)
        .find(|s| s.hit_ratio.is_some_and(|h| h >= RESTORED_SHARE * level))
        .map(|s| s.t_s - back);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, hit_ratio: Option<f64>) -> HitSample {
        HitSample { t_s, hit_ratio }
    }

    #[test]
    fn restore_is_the_first_sample_back_at_the_level_before() {
        let mut record = GeminiRecord {
            recovery: "gemini-i",
            failed_cmis: 1,
            fail_at_s: Some(2.0),
            back_s: Some(4.0),
            hit_ratio_before: None,
            restore_s: None,
            discarded_keys: 0,
            timeline: vec![
                sample(1.0, Some(0.8)),
                sample(2.0, Some(1.0)),
                sample(3.0, None),
                sample(4.5, Some(0.5)),
                sample(5.0, Some(0.85)),
                sample(5.5, Some(0.9)),
            ],
        };
        restored(&mut record);
        assert_eq!(record.hit_ratio_before, Some(0.9));
        let restore = record.restore_s.unwrap();
        assert!((restore - 1.5).abs() < 1e-9, "{restore}");
    }
}
