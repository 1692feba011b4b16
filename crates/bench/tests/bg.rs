//! Short BG runs on SQLite with embedded CMIs and a small graph: under every policy the validator
//! finds no stale read, the data store no lost write and the cache no key that differs from the
//! data store.

mod support;

use cads::Policy;
use cads_bench::bg::{BenchmarkOptions, BgRecord, LayoutKind, Progress};
use support::{assert_nothing_stale_or_lost, bg_short, InProcess};

fn quiet(_: Progress) {}

fn check_clean(records: &[BgRecord]) {
    for r in records {
        let what = format!("{} {}", r.detail.layout, r.policy);
        assert_nothing_stale_or_lost(&what, r.stale_reads, &r.detail.validated);
        assert_eq!(r.failed, 0, "{what}: {:?}", r.errors);
        assert!(
            r.detail.actions > 20,
            "{what}: {} actions",
            r.detail.actions
        );
        assert!(r.detail.validated.reads > 0, "{what}: no count read");
        assert!(
            r.latency_us.values().map(|l| l.count).sum::<u64>() == r.detail.actions,
            "{what}"
        );
        match (r.policy.as_str(), &r.detail.cache_check) {
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
    let records = bg_short(
        &[
            Policy::DataStoreOnly,
            Policy::WriteAround,
            Policy::WriteThrough,
            Policy::WriteBack,
        ],
        LayoutKind::Documents,
    )
    .run(&InProcess, &quiet)
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
    check_clean(
        &bg_short(&policies, LayoutKind::Sql)
            .run(&InProcess, &quiet)
            .unwrap(),
    );
}
