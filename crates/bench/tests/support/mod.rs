//! What the benchmark tests share: CMIs for their embedded deployments (started in the test's
//! process on loopback), short runs, and the keys every run record has.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cads::Policy;
use cads_bench::bg::{BgOptions, LayoutKind};
use cads_bench::harness::{CommonOptions, Validated};
use cads_bench::{CmiSettings, Launcher, RunningCmis};
use cads_testkit::{CmiOptions, Cmis};
use serde_json::Value;

/// Starts embedded CMIs in this process (the test kit's).
pub struct InProcess;

impl Launcher for InProcess {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> anyhow::Result<Box<dyn RunningCmis>> {
        InProcessWithLease(cads_testkit::cmis::TEST_LEASE_MS).start_cmis(count, mode, settings)
    }
}

/// Embedded CMIs with leases of this many milliseconds, for runs that count on leases running
/// out (a dead applier's, which stall its queue until they do) more often than the test kit's
/// long leases would let them.
pub struct InProcessWithLease(pub u64);

impl Launcher for InProcessWithLease {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> anyhow::Result<Box<dyn RunningCmis>> {
        Ok(Box::new(Running(Cmis::start_with(count, |o| {
            configure(o, mode, settings);
            o.lease_ms = Some(self.0);
        }))))
    }
}

/// A run's CMI options in the lease `mode` with `settings`.
fn configure(o: &mut CmiOptions, mode: &str, settings: &CmiSettings) {
    o.mode = Some(mode.to_string());
    o.maxmemory = settings.maxmemory.clone();
    o.max_pinned_memory = settings.max_pinned_memory.clone();
}

/// Embedded CMIs served one per server, so that a test can kill one during a run (its entries
/// are lost, every connection to it breaks) and start it again, empty, on its port.
#[derive(Clone, Default)]
pub struct Killable(Arc<Mutex<Option<KillableCmis>>>);

struct KillableCmis {
    cmis: Vec<Cmis>,
    mode: String,
    settings: CmiSettings,
}

impl Killable {
    /// Kills CMI `index` of the run's CMIs and starts it again, empty, where it was.
    pub fn kill_and_restart(&self, index: usize) {
        let mut started = self.0.lock().unwrap();
        let started = started.as_mut().expect("the run has started its CMIs");
        let port = started.cmis[index].addrs()[0].port();
        started.cmis[index].stop();
        started.cmis[index] =
            Cmis::start_on(port, 1, |o| configure(o, &started.mode, &started.settings));
    }
}

impl Launcher for Killable {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> anyhow::Result<Box<dyn RunningCmis>> {
        let cmis = (0..count)
            .map(|_| Cmis::start_with(1, |o| configure(o, mode, settings)))
            .collect();
        *self.0.lock().unwrap() = Some(KillableCmis {
            cmis,
            mode: mode.to_string(),
            settings: settings.clone(),
        });
        Ok(Box::new(self.clone()))
    }
}

impl RunningCmis for Killable {
    fn addrs(&self) -> Vec<SocketAddr> {
        let started = self.0.lock().unwrap();
        let started = started.as_ref().expect("the run has started its CMIs");
        started.cmis.iter().map(|c| c.addrs()[0]).collect()
    }

    fn stop(self: Box<Self>) -> anyhow::Result<()> {
        // Dropping them stops them.
        self.0.lock().unwrap().take();
        Ok(())
    }
}

struct Running(Cmis);

impl RunningCmis for Running {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.0.addrs().to_vec()
    }

    fn stop(mut self: Box<Self>) -> anyhow::Result<()> {
        self.0.stop();
        Ok(())
    }
}

/// A short BG run on SQLite with two embedded CMIs and a small graph: 200 members, 4 threads
/// for 0.7 s, 2 write-back workers.
pub fn bg_short(policies: &[Policy], layout: LayoutKind) -> BgOptions {
    BgOptions {
        common: CommonOptions {
            policies: policies.to_vec(),
            threads: 4,
            workers: 2,
            ..BgOptions::default().common
        },
        layout,
        members: 200,
        duration: Duration::from_millis(700),
        ..BgOptions::default()
    }
}

/// Asserts that a run read nothing stale and lost no write.
pub fn assert_nothing_stale_or_lost(what: &str, stale_reads: u64, validated: &Validated) {
    assert_eq!(stale_reads, 0, "{what}: {:?}", validated.stale_examples);
    assert_eq!(
        validated.lost_writes, 0,
        "{what}: {:?}",
        validated.lost_examples
    );
}

/// Asserts that a run record (as JSON) of `benchmark` has the keys every record has
/// (benchmarks.md Part A, and what `cads report` reads) and `more`, and p50 to p99.9 of READ
/// (YCSB) or VP (BG) latency.
pub fn assert_record_keys(json: &Value, benchmark: &str, more: &[&str]) {
    for key in [
        "benchmark",
        "workload",
        "policy",
        "store",
        "throughput",
        "latency_us",
        "hit_ratio",
        "reads",
        "stale_reads",
        "config",
    ]
    .iter()
    .chain(more)
    {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
    assert_eq!(json["benchmark"], benchmark);
    let read = if benchmark == "bg" { "VP" } else { "READ" };
    for q in ["p50", "p95", "p99", "p999"] {
        assert!(json["latency_us"][read][q].is_u64(), "{q}");
    }
}
