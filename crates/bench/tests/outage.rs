//! YCSB with the data store cut off in the middle of the run phase (`--outage`), on SQLite with
//! embedded CMIs: with TARDIS every acknowledged write is in the data store afterwards and no read
//! is stale; without it writes fail during the outage and still nothing is stale; write-back
//! loses nothing either. Every failed operation is one the outage explains.

mod support;

use std::time::Duration;

use cads::{Policy, TardisConfig, Technique};
use cads_bench::harness::{CommonOptions, Outage};
use cads_bench::ycsb::{BenchmarkOptions, Progress, RunRecord, YcsbOptions};
use support::{assert_nothing_stale_or_lost, InProcess};

fn quiet(_: Progress) {}

/// Workload A on 200 records, 4 threads for 2.5 s, the data store away from 0.5 s for 1 s.
fn with_outage(policies: &[Policy], tardis: Option<Technique>) -> YcsbOptions {
    YcsbOptions {
        workload: "A".into(),
        records: 200,
        operations: None,
        duration: Some(Duration::from_millis(2500)),
        common: CommonOptions {
            policies: policies.to_vec(),
            threads: 4,
            workers: 2,
            tardis: tardis.map(|technique| TardisConfig {
                technique,
                ar_workers: 2,
                ..TardisConfig::default()
            }),
            outage: Some(Outage {
                at: Duration::from_millis(500),
                length: Duration::from_secs(1),
            }),
            ..YcsbOptions::default().common
        },
        ..YcsbOptions::default()
    }
}

/// Whether `error` is what a data store that went away explains: a read refused or failed, or a
/// write whose commit failed with the data store (outcome unknown).
fn explained_by_the_outage(error: &str) -> bool {
    error.contains("data store unavailable") || error.contains("data store: ")
}

fn check(r: &RunRecord) {
    let what = format!("policy {}", r.policy);
    assert_nothing_stale_or_lost(&what, r.stale_reads, &r.detail.validated);
    assert!(
        r.errors.iter().all(|e| explained_by_the_outage(e)),
        "{what}: {:?}",
        r.errors
    );
    let outage = r.outage.as_ref().expect("an outage object");
    assert!(outage.at_s.is_some(), "{what}: the outage happened");
    assert!(
        outage.for_s.is_some_and(|s| s > 0.9),
        "{what}: {:?}",
        outage.for_s
    );
    assert!(!outage.timeline.is_empty(), "{what}");
}

#[test]
fn tardis_takes_writes_during_an_outage_and_loses_none() {
    for (policy, technique) in [
        (Policy::WriteThrough, Technique::Tardis),
        (Policy::WriteAround, Technique::Tar),
    ] {
        let records = with_outage(&[policy], Some(technique))
            .run(&InProcess, &quiet)
            .unwrap();
        let r = &records[0];
        check(r);
        let outage = r.outage.as_ref().unwrap();
        assert_eq!(outage.tardis.as_deref(), Some(technique.name()));
        assert_eq!(outage.writes_refused, 0, "pinned memory is ample");
        assert!(outage.recovery_s.is_some(), "{technique:?}: recovery ended");
        assert_eq!(
            outage.timeline.last().map(|s| s.dirty),
            Some(0),
            "nothing left dirty"
        );
    }
}

#[test]
fn without_tardis_writes_fail_during_an_outage_and_nothing_is_stale() {
    let records = with_outage(&[Policy::WriteThrough, Policy::WriteBack], None)
        .run(&InProcess, &quiet)
        .unwrap();
    for r in &records {
        check(r);
        let outage = r.outage.as_ref().unwrap();
        assert_eq!(outage.tardis, None);
        assert_eq!(outage.writes_accepted_failed_mode, 0);
    }
}
