//! Benchmark runs with a CMI killed in the middle (its entries lost, every connection to it
//! broken) and started again, empty, on its port: under every caching policy, TPC-C's and BG's
//! checks find nothing stale, no condition broken and no write lost.

mod support;
mod tpcc_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cads::Policy;
use cads_bench::bg::LayoutKind;
use cads_bench::harness::Phase;
use cads_bench::ycsb::{BenchmarkOptions, Progress};
use support::Killable;

const POLICIES: [Policy; 3] = [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack];

/// A progress callback that kills CMI 0 of `cmis` at the run's first report of work done, once.
fn kill_at_the_first_report<'a>(
    cmis: &'a Killable,
    killed: &'a AtomicBool,
) -> impl Fn(Progress) + Sync + 'a {
    move |p: Progress| {
        if p.phase == Phase::Run && p.done > 0 && !killed.swap(true, Ordering::SeqCst) {
            cmis.kill_and_restart(0);
        }
    }
}

#[test]
fn tpcc_with_a_cmi_killed_breaks_no_condition_and_reads_nothing_stale() {
    for policy in POLICIES {
        let (url, _dir) = tpcc_support::sqlite_url(&format!("killed-{}", policy.name()));
        let mut opts = tpcc_support::options(Some(url), "tpcc_");
        opts.common.policies = vec![policy];
        // Long enough for a report of work done before the end (one a second).
        opts.duration = Duration::from_millis(2_500);
        let (cmis, killed) = (Killable::default(), AtomicBool::new(false));
        let records = opts
            .run(&cmis, &kill_at_the_first_report(&cmis, &killed))
            .unwrap_or_else(|e| panic!("{policy:?}: {e:#}"));
        assert!(killed.load(Ordering::SeqCst), "{policy:?}: no report");
        let r = &records[0];
        assert_eq!(r.stale_reads, 0, "{policy:?}: {:#?}", r.detail.cache_check);
        assert!(
            r.detail.consistent,
            "{policy:?}: {:#?}",
            r.detail.consistency
        );
    }
}

#[test]
fn bg_with_a_cmi_killed_reads_nothing_stale_and_loses_nothing() {
    for policy in POLICIES {
        let mut opts = support::bg_short(&[policy], LayoutKind::Documents);
        opts.duration = Duration::from_millis(2_500);
        let (cmis, killed) = (Killable::default(), AtomicBool::new(false));
        let r = opts
            .run(&cmis, &kill_at_the_first_report(&cmis, &killed))
            .unwrap_or_else(|e| panic!("{policy:?}: {e:#}"))
            .remove(0);
        assert!(killed.load(Ordering::SeqCst), "{policy:?}: no report");
        support::assert_nothing_stale_or_lost(
            &format!("{policy:?}"),
            r.stale_reads,
            &r.detail.validated,
        );
    }
}
