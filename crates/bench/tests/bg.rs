//! Short BG runs on SQLite with embedded CMIs and a small graph: under every policy the validator
//! finds no stale read, the data store no lost write and the cache no key that differs from the
//! data store.

use std::time::Duration;

mod support;

use cads::Policy;
use cads_bench::bg::{run_bg, BgOptions, BgRecord, LayoutKind, Progress};
use support::InProcess;

fn quiet(_: Progress) {}

fn short(policies: &[Policy], layout: LayoutKind) -> BgOptions {
    BgOptions {
        policies: policies.to_vec(),
        layout,
        members: 200,
        threads: 4,
        duration: Duration::from_millis(700),
        workers: 2,
        ..BgOptions::default()
    }
}

fn check_clean(records: &[BgRecord]) {
    for r in records {
        let what = format!("{} {}", r.layout, r.policy);
        assert_eq!(r.stale_reads, 0, "{what}: {:?}", r.stale_examples);
        assert_eq!(r.lost_writes, 0, "{what}: {:?}", r.lost_examples);
        assert_eq!(r.failed, 0, "{what}: {:?}", r.errors);
        assert!(r.actions > 20, "{what}: {} actions", r.actions);
        assert!(r.reads > 0, "{what}: no count read");
        assert!(
            r.latency_us.values().map(|l| l.count).sum::<u64>() == r.actions,
            "{what}"
        );
        match (r.policy.as_str(), &r.cache_check) {
            ("none", None) => assert_eq!(r.hit_ratio, None, "{what}"),
            (_, Some(check)) => {
                assert!(check.cached > 0, "{what}: nothing cached");
                assert_eq!(check.mismatches, 0, "{what}: {:?}", check.examples);
                // Warm, with a small graph: most reads hit.
                assert!(
                    r.hit_ratio.is_some_and(|h| h > 0.5),
                    "{what}: {:?}",
                    r.hit_ratio
                );
            }
            (_, None) => panic!("{what}: no cache check"),
        }
        assert_eq!(r.write_back.is_some(), r.policy == "write-back", "{what}");
    }
}

#[test]
fn documents_under_every_policy_read_nothing_stale() {
    let records = run_bg(
        &short(
            &[
                Policy::DataStoreOnly,
                Policy::WriteAround,
                Policy::WriteThrough,
                Policy::WriteBack,
            ],
            LayoutKind::Documents,
        ),
        &InProcess,
        &quiet,
    )
    .unwrap();
    assert_eq!(records.len(), 4);
    check_clean(&records);
    let wb = records[3].write_back.as_ref().unwrap();
    assert!(wb.buffered_ops > 0, "write-back buffered nothing: {wb:?}");
}

#[test]
fn sql_layouts_read_nothing_stale() {
    let policies = [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
    ];
    check_clean(&run_bg(&short(&policies, LayoutKind::Sql), &InProcess, &quiet).unwrap());
}
