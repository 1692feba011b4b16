//! Short BG runs on SQLite with embedded CMIs and a small graph: under a deliberately broken
//! policy (writes that skip the cache) the validator finds stale reads and the cache differs from
//! the data store; and the SoAR search's record.

mod support;

use std::time::Duration;

use cads::Policy;
use cads_bench::bg::{BenchmarkOptions, BgOptions, LayoutKind, Progress, Sla};
use support::{assert_record_keys, bg_short, InProcess};

fn quiet(_: Progress) {}

#[test]
fn writes_that_skip_the_cache_are_caught() {
    let broken = |policies: &[Policy], layout| BgOptions {
        broken: true,
        ..bg_short(policies, layout)
    };
    let mut records = broken(
        &[Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack],
        LayoutKind::Documents,
    )
    .run(&InProcess, &quiet)
    .unwrap();
    records.extend(
        broken(&[Policy::WriteAround], LayoutKind::Sql)
            .run(&InProcess, &quiet)
            .unwrap(),
    );
    for r in &records {
        let what = format!("{} {}", r.detail.layout, r.policy);
        assert!(
            r.stale_reads > 0,
            "{what}: the validator missed the broken writes"
        );
        assert!(!r.detail.meets_sla, "{what}: stale reads must fail the SLA");
        let check = r.detail.cache_check.as_ref().unwrap();
        assert!(check.mismatches > 0, "{what}: {check:?}");
        // The writes did reach the data store.
        assert_eq!(
            r.detail.validated.lost_writes, 0,
            "{what}: {:?}",
            r.detail.validated.lost_examples
        );
    }
}

#[test]
fn the_soar_search_records_its_probes() {
    // A latency no run misses, so that only stale reads could fail the SLA: none do, and the
    // search doubles up to its maximum.
    let opts = BgOptions {
        soar: true,
        max_threads: 4,
        duration: Duration::from_millis(300),
        sla: Sla {
            latency: Duration::from_secs(3600),
            ..Sla::default()
        },
        ..bg_short(&[Policy::WriteThrough], LayoutKind::Documents)
    };
    let records = opts.run(&InProcess, &quiet).unwrap();
    let r = &records[0];
    let soar = r.detail.soar.as_ref().expect("a search");
    let threads: Vec<usize> = soar.probes.iter().map(|p| p.threads).collect();
    assert_eq!(threads, [1, 2, 4]);
    assert!(soar
        .probes
        .iter()
        .all(|p| p.meets_sla && p.stale_reads == 0 && p.reads > 0));
    assert!(!soar.bounded);
    // The record is the run at the highest thread count that met the SLA.
    assert_eq!((soar.socialites, r.threads), (4, 4));
    assert_eq!(r.throughput, soar.soar);
    assert!(soar.best_throughput >= soar.soar);
    // The summary's SoAR is the best probe's throughput, not the run at the most threads.
    let summary = &cads_bench::bg::summarize(&records)[0];
    assert_eq!(
        (summary.throughput, summary.threads),
        (soar.best_throughput, soar.best_threads as f64)
    );
    let json = serde_json::to_value(r).unwrap();
    assert_record_keys(&json, "bg", &["soar"]);
}
