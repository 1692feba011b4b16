//! `--recovery VARIANT` and `--fail-cmis K --fail-at T --fail-for D` (004 §5): Gemini's
//! coordinator over the embedded CMIs, and K of them taken away from everyone for a while: a
//! relay in front of each CMI cuts every connection to it, the coordinator's too, and the
//! instance keeps its content, as 004 emulates failures. The record gains a timeline of the
//! failed instances' hit ratio, the time they take to get it back, and the keys discarded.
//!
//! The variants ([`Recovery`]) differ in what becomes of a returning instance's content
//! ([`Repair`]): `gemini-i` and `gemini-o` repair its dirty keys, `volatile` discards it all, and
//! `stale` keeps it unrepaired, a baseline that serves overwritten values (the validator counts
//! them); `gemini-i+w` and `gemini-o+w` add working-set transfer.

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

use crate::RunningCmis;

/// The coordinator's lease on an instance in these runs (an instance serves a tenth less).
pub const LEASE: Duration = Duration::from_millis(1_000);
/// Time between the coordinator's probes.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Time between samples of the failed instances' hit ratio.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The share of its hit ratio before the failure a returned instance must reach to count as
/// restored.
pub const RESTORED_SHARE: f64 = 0.95;

/// The longest a working-set transfer runs in these runs (it ends sooner once the returned
/// instances' hit ratio is back).
pub const TRANSFER_AT_MOST: Duration = Duration::from_secs(30);

/// `--recovery`: a variant of 004 §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// What becomes of a returning instance's content.
    pub repair: Repair,
    /// With working-set transfer (+W, Gemini-I and Gemini-O only).
    pub transfer: bool,
}

impl Recovery {
    const ALL: [Recovery; 6] = [
        Recovery::of(Repair::Invalidate, false),
        Recovery::of(Repair::Overwrite, false),
        Recovery::of(Repair::Invalidate, true),
        Recovery::of(Repair::Overwrite, true),
        Recovery::of(Repair::Discard, false),
        Recovery::of(Repair::Keep, false),
    ];

    const fn of(repair: Repair, transfer: bool) -> Recovery {
        Recovery { repair, transfer }
    }

    /// The name `--recovery` takes and the record gives.
    pub fn name(self) -> &'static str {
        match (self.repair, self.transfer) {
            (Repair::Invalidate, true) => "gemini-i+w",
            (Repair::Overwrite, true) => "gemini-o+w",
            (repair, _) => repair.name(),
        }
    }

    /// The variant `--recovery` names.
    pub fn parse(name: &str) -> Option<Recovery> {
        Recovery::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Every name, for help and errors.
    pub fn names() -> Vec<&'static str> {
        Recovery::ALL.into_iter().map(Recovery::name).collect()
    }
}

/// Gemini's settings of a run.
#[derive(Clone, Debug)]
pub struct GeminiOptions {
    /// What becomes of a returning instance's content.
    pub recovery: Recovery,
    /// Fragments the key space is split into.
    pub fragments: u32,
    /// The failure to inject, if any.
    pub fail: Option<CmiFailure>,
}

/// `--fail-cmis K --fail-at T --fail-for D --fail-kind KIND`: the first K CMIs fail from T into
/// the run phase, for D.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmiFailure {
    /// How many CMIs fail (the first ones).
    pub cmis: usize,
    /// When, from the start of the run phase.
    pub at: Duration,
    /// For how long.
    pub length: Duration,
    /// How they fail.
    pub kind: FailKind,
}

/// How a CMI fails (`--fail-kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailKind {
    /// Cut off from everyone by the relay in front of it, its content kept in memory (004's
    /// own method).
    #[default]
    Cut,
    /// Its `cads server` process killed with SIGKILL, and started again from its append-only
    /// file: the CMIs of such a run are processes of their own.
    Kill,
}

impl FailKind {
    /// The name `--fail-kind` takes.
    pub fn name(self) -> &'static str {
        match self {
            FailKind::Cut => "cut",
            FailKind::Kill => "kill",
        }
    }

    /// The kind `--fail-kind` names.
    pub fn parse(name: &str) -> Option<FailKind> {
        [FailKind::Cut, FailKind::Kill]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

impl GeminiOptions {
    /// The failure to inject and the variant it is run with.
    pub(crate) fn failure(&self) -> Option<(Recovery, CmiFailure)> {
        Some((self.recovery, self.fail?))
    }

    /// Whether the run's CMIs must be processes of their own (to be killed).
    pub fn kills(&self) -> bool {
        self.fail.is_some_and(|f| f.kind == FailKind::Kill)
    }
}

/// The coordinator and the relays of one policy's deployment.
pub struct GeminiDeployment {
    options: GeminiOptions,
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
            repair: opts.recovery.repair,
            transfer: opts.recovery.transfer.then_some(TRANSFER_AT_MOST),
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
            options: opts.clone(),
            relays,
            direct: client(addrs.to_vec()),
            stop,
            coordinator: Some(coordinator),
        };
        dep.wait_until_served()?;
        Ok(dep)
    }

    /// The run's settings.
    pub fn options(&self) -> &GeminiOptions {
        &self.options
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
    fn set_cut(&self, count: usize, cut: bool) {
        for relay in &self.relays[..count.min(self.relays.len())] {
            relay.set_cut(cut);
        }
    }

    /// Hits, misses and discarded keys of each of the first `count` CMIs (those a run fails);
    /// None for one that cannot be asked.
    fn counters(&self, count: usize) -> Vec<Option<CmiCounters>> {
        (0..count.min(self.direct.cmis()))
            .map(|cmi| {
                let stats = self.direct.info(cmi).ok()?;
                Some(CmiCounters {
                    hits: stats.keyspace_hits,
                    misses: stats.keyspace_misses,
                    discarded: stats.discarded_keys,
                })
            })
            .collect()
    }
}

/// A CMI's counters that a run with failures follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CmiCounters {
    hits: u64,
    misses: u64,
    discarded: u64,
}

impl CmiCounters {
    /// What was counted from `earlier` to `self`. A CMI restarted in between counts from zero
    /// again: a counter lower than before is all new.
    fn since(self, earlier: CmiCounters) -> CmiCounters {
        let since = |now: u64, then: u64| if now >= then { now - then } else { now };
        CmiCounters {
            hits: since(self.hits, earlier.hits),
            misses: since(self.misses, earlier.misses),
            discarded: since(self.discarded, earlier.discarded),
        }
    }
}

/// Adds up what the failed CMIs counted between two samples, over those asked both times.
fn counted(last: &[Option<CmiCounters>], now: &[Option<CmiCounters>]) -> Option<CmiCounters> {
    let mut sum: Option<CmiCounters> = None;
    for (then, now) in last.iter().zip(now) {
        if let (Some(then), Some(now)) = (then, now) {
            let delta = now.since(*then);
            let total = sum.get_or_insert_with(CmiCounters::default);
            total.hits += delta.hits;
            total.misses += delta.misses;
            total.discarded += delta.discarded;
        }
    }
    sum
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
    /// The variant (`gemini-i`, `gemini-o`, either with `+w`, `volatile`, `stale`).
    pub recovery: &'static str,
    /// How they failed (`cut`, `kill`).
    pub fail_kind: &'static str,
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
    /// Every AppNode's operations together, every second (004 Fig. 7's throughput and
    /// latency).
    pub load: Vec<LoadSample>,
}

/// One second of the whole run's operations.
#[derive(Clone, Debug, Serialize)]
pub struct LoadSample {
    /// Seconds since the run phase began.
    pub t_s: f64,
    /// Operations completed per second since the previous sample.
    pub ops_per_s: f64,
    /// The 90th percentile latency of those operations, in milliseconds (None: none completed).
    pub p90_ms: Option<f64>,
}

impl LoadSample {
    /// A sample at `t_s` of `ops_per_s`, with the latencies (µs) of its operations.
    pub(crate) fn of(t_s: f64, ops_per_s: f64, latencies: &hdrhistogram::Histogram<u64>) -> Self {
        LoadSample {
            t_s,
            ops_per_s,
            p90_ms: (!latencies.is_empty()).then(|| latencies.value_at_quantile(0.9) as f64 / 1e3),
        }
    }
}

impl GeminiRecord {
    /// The record with the run's per-second `load`, if it was sampled.
    pub(crate) fn with_load(self, load: Option<Vec<LoadSample>>) -> GeminiRecord {
        GeminiRecord {
            load: load.unwrap_or_default(),
            ..self
        }
    }
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
/// its whole length), sampling the failed CMIs' hit ratio throughout. `cmis` are the run's CMIs,
/// which a failure of kind [`FailKind::Kill`] kills and restarts.
pub(crate) fn fail_and_watch(
    dep: &GeminiDeployment,
    cmis: Option<&dyn RunningCmis>,
    (recovery, failure): (Recovery, CmiFailure),
    started: Instant,
    stop: &AtomicBool,
) -> Result<GeminiRecord> {
    let k = failure.cmis;
    let killed = || cmis.context("--fail-kind kill needs CMIs the run started");
    let mut record = GeminiRecord {
        recovery: recovery.name(),
        fail_kind: failure.kind.name(),
        failed_cmis: k,
        fail_at_s: None,
        back_s: None,
        hit_ratio_before: None,
        restore_s: None,
        discarded_keys: 0,
        timeline: Vec::new(),
        load: Vec::new(),
    };
    let mut last = dep.counters(k);
    let mut next_sample = started + SAMPLE_EVERY;
    loop {
        let now = Instant::now();
        let t = now - started;
        if record.fail_at_s.is_none() && t >= failure.at && !stop.load(Ordering::Acquire) {
            match failure.kind {
                FailKind::Cut => dep.set_cut(k, true),
                FailKind::Kill => {
                    for index in 0..k {
                        killed()?.kill(index)?;
                    }
                }
            }
            record.fail_at_s = Some(t.as_secs_f64());
        }
        if record.fail_at_s.is_some() && record.back_s.is_none() && t >= failure.at + failure.length
        {
            match failure.kind {
                FailKind::Cut => dep.set_cut(k, false),
                FailKind::Kill => {
                    for index in 0..k {
                        killed()?.restart(index)?;
                    }
                }
            }
            record.back_s = Some(started.elapsed().as_secs_f64());
        }
        let failing = record.fail_at_s.is_some() && record.back_s.is_none();
        if stop.load(Ordering::Acquire) && !failing {
            break;
        }
        if Instant::now() >= next_sample {
            next_sample += SAMPLE_EVERY;
            let counters = dep.counters(k);
            let delta = counted(&last, &counters);
            if let Some(delta) = delta {
                record.discarded_keys += delta.discarded;
            }
            let hit_ratio = delta
                .filter(|d| d.hits + d.misses > 0)
                .map(|d| d.hits as f64 / (d.hits + d.misses) as f64);
            for (kept, now) in last.iter_mut().zip(counters) {
                if now.is_some() {
                    *kept = now;
                }
            }
            record.timeline.push(HitSample {
                t_s: t.as_secs_f64(),
                hit_ratio,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(delta) = counted(&last, &dep.counters(k)) {
        record.discarded_keys += delta.discarded;
    }
    restored(&mut record);
    Ok(record)
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

    fn counters(hits: u64, misses: u64, discarded: u64) -> Option<CmiCounters> {
        Some(CmiCounters {
            hits,
            misses,
            discarded,
        })
    }

    /// A CMI restarted between two samples counts from zero: what it counts then is all new.
    #[test]
    fn counts_between_samples_add_up_over_cmis_and_restarts() {
        let last = [counters(10, 5, 2), counters(100, 50, 0), counters(7, 7, 7)];
        let now = [counters(13, 6, 2), counters(4, 1, 3), None];
        assert_eq!(counted(&last, &now), counters(3 + 4, 1 + 1, 3));
        assert_eq!(counted(&[None], &[counters(1, 1, 1)]), None);
    }

    #[test]
    fn every_variant_is_named_as_it_is_parsed() {
        for name in Recovery::names() {
            assert_eq!(Recovery::parse(name).unwrap().name(), name);
        }
        assert_eq!(
            Recovery::parse("gemini-o+w"),
            Some(Recovery::of(Repair::Overwrite, true))
        );
        assert_eq!(Recovery::parse("volatile+w"), None);
        assert_eq!(Recovery::names().len(), 6);
    }

    #[test]
    fn restore_is_the_first_sample_back_at_the_level_before() {
        let mut record = GeminiRecord {
            recovery: "gemini-i",
            fail_kind: "cut",
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
            load: Vec::new(),
        };
        restored(&mut record);
        assert_eq!(record.hit_ratio_before, Some(0.9));
        let restore = record.restore_s.unwrap();
        assert!((restore - 1.5).abs() < 1e-9, "{restore}");
    }
}
