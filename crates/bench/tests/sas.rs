//! BG with the cache in the application process (`--cache sas`, 001): under write-around and
//! write-through, in BG's three read-heavy mixes and both key layouts, the validator finds no
//! stale read, the data store no lost write, and this AppNode's copies match the data store.
//! Several AppNode processes are run by `crates/cli/tests/appnodes.rs`.

mod support;

use cads::Policy;
use cads_bench::bg::{BenchmarkOptions, BgOptions, LayoutKind, Progress};
use cads_bench::CacheSpec;
use support::{assert_nothing_stale_or_lost, bg_short, InProcess};

fn quiet(_: Progress) {}

/// A short BG run under SAS.
fn bg_sas(policies: &[Policy], layout: LayoutKind, mix: &str) -> BgOptions {
    let mut opts = bg_short(policies, layout);
    opts.common.cache = CacheSpec::Sas { ingest: false };
    opts.workload = mix.into();
    opts
}

#[test]
fn bg_under_sas_reads_nothing_stale_in_every_mix_and_layout() {
    for layout in [LayoutKind::Documents, LayoutKind::Sql] {
        for mix in ["90", "99", "99.9"] {
            let records = bg_sas(&[Policy::WriteAround, Policy::WriteThrough], layout, mix)
                .run(&InProcess, &quiet)
                .unwrap();
            for r in &records {
                let what = format!("{} {} {mix}", r.detail.layout, r.policy);
                assert_nothing_stale_or_lost(&what, r.stale_reads, &r.detail.validated);
                assert_eq!(r.failed, 0, "{what}: {:?}", r.errors);
                let check = r.detail.cache_check.as_ref().expect("a cache check");
                assert!(check.cached > 0, "{what}: nothing cached");
                assert_eq!(check.mismatches, 0, "{what}: {:?}", check.examples);
                assert!(r.hit_ratio.is_some(), "{what}");
            }
        }
    }
}

#[test]
fn sas_refuses_the_policies_it_does_not_run() {
    for policy in [Policy::WriteBack, Policy::CacheAside] {
        let e = bg_sas(&[policy], LayoutKind::Documents, "90")
            .run(&InProcess, &quiet)
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("--cache sas runs write-around and write-through"),
            "{e:#}"
        );
    }
}
