//! A broken SAS (cads' `SAS_INVALIDATIONS_DROPPED` failpoint: an AppNode acknowledges what the
//! core tells it, and finishes its own commits, without changing its copies) is caught by BG's
//! validator and its cache check; the same runs without the failpoint are clean.
//!
//! Failpoints are process-wide: the test holds the failpoint scenario (see
//! `cads_testkit::failpoints`), and no test of another file sees it.

mod support;

use cads::Policy;
use cads_bench::bg::{BenchmarkOptions, LayoutKind, Progress};
use cads_bench::CacheSpec;
use cads_testkit::failpoints::{Scenario, SAS_INVALIDATIONS_DROPPED};
use support::{assert_nothing_stale_or_lost, bg_short, InProcess};

fn quiet(_: Progress) {}

#[test]
fn bg_catches_an_appnode_that_drops_its_invalidations() {
    let scenario = Scenario::setup();
    let mut opts = bg_short(
        &[Policy::WriteAround, Policy::WriteThrough],
        LayoutKind::Documents,
    );
    opts.common.cache = CacheSpec::Sas { ingest: false };
    scenario.set(SAS_INVALIDATIONS_DROPPED, "return");
    let records = opts.run(&InProcess, &quiet).unwrap();
    scenario.clear(SAS_INVALIDATIONS_DROPPED);
    for r in &records {
        assert!(
            r.stale_reads > 0,
            "{}: the validator missed the broken SAS",
            r.policy
        );
        let check = r.detail.cache_check.as_ref().unwrap();
        assert!(check.mismatches > 0, "{}: {check:?}", r.policy);
    }
    for r in opts.run(&InProcess, &quiet).unwrap() {
        assert_nothing_stale_or_lost(&r.policy, r.stale_reads, &r.detail.validated);
    }
}
