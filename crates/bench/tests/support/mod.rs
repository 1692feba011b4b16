//! What the benchmark tests share: CMIs for their embedded deployments (started in the test's
//! process on loopback), short runs, and the keys every run record has.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use cads::Policy;
use cads_bench::bg::{BgOptions, LayoutKind};
use cads_bench::harness::{CommonOptions, Validated};
use cads_bench::{CmiSettings, Launcher, RunningCmis};
use cads_testkit::Cmis;
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
        Ok(Box::new(Running(Cmis::start_with(count, |o| {
            o.mode = Some(mode.to_string());
            o.maxmemory = settings.maxmemory.clone();
            o.max_pinned_memory = settings.max_pinned_memory.clone();
        }))))
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
