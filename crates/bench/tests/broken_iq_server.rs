//! A broken IQ server (the engine's `FILL_AFTER_VOID` failpoint): it stores a fill whose lease a
//! writer voided (here write-around's fill by a reader the writer wounded), so a reader that
//! queried the data store before the write leaves the old value cached after it. YCSB's
//! validation must find the stale reads that follow; with a correct server, the same run reads
//! nothing stale.
//!
//! Failpoints are process-wide: every test here holds the failpoint scenario.

mod support;

use cads::Policy;

use cads_bench::harness::CommonOptions;
use cads_bench::ycsb::{BenchmarkOptions, Progress, YcsbOptions};
use cads_testkit::failpoints::{Scenario, FILL, FILL_AFTER_VOID};
use support::InProcess;

fn quiet(_: Progress) {}

/// YCSB A under write-around on a handful of records: reads miss after every write, and
/// writers often void a miss's I lease while it queries the data store.
fn few_hot_records() -> YcsbOptions {
    YcsbOptions {
        workload: "A".into(),
        records: 4,
        operations: Some(3_000),
        duration: None,
        distribution: Some(cads_bench::ycsb::Distribution::Uniform),
        common: CommonOptions {
            policies: vec![Policy::WriteAround],
            threads: 4,
            ..YcsbOptions::default().common
        },
        ..YcsbOptions::default()
    }
}

#[test]
fn ycsb_finds_the_stale_values_a_broken_iq_server_keeps() {
    let scenario = Scenario::setup();
    // Every miss waits a millisecond between its query and its fill: the window a writer's Q
    // lease must close.
    scenario.set(FILL, "sleep(1)");
    scenario.set(FILL_AFTER_VOID, "return");
    let broken = few_hot_records().run(&InProcess, &quiet).unwrap().remove(0);
    scenario.clear(FILL_AFTER_VOID);
    assert!(
        broken.stale_reads > 0,
        "no stale read found ({} reads validated)",
        broken.detail.validated.reads
    );
    let correct = few_hot_records().run(&InProcess, &quiet).unwrap().remove(0);
    support::assert_nothing_stale_or_lost(
        "a correct IQ server",
        correct.stale_reads,
        &correct.detail.validated,
    );
}
