//! TPC-C under write-back's Design 2 on SQLite while background workers die mid-apply (cads'
//! failpoints): sessions that insert rows (New-Order, Payment) are applied exactly once.
//!
//! Failpoints are process-wide: every test here holds the failpoint scenario.

mod support;
mod tpcc_support;

use cads::Policy;
use cads_bench::tpcc::BenchmarkOptions;
use cads_testkit::failpoints::{DyingWorkers, Scenario};
use support::InProcessWithLease;
use tpcc_support::{assert_consistent, options, sqlite_url};

/// Write-back runs with workers that die at every step of Algorithm 4 (and carry on, as a
/// restarted worker would): once drained, the consistency conditions hold (nothing lost) and
/// every cached entry equals the data store (nothing applied twice: a Payment applied twice
/// would add its amount to W_YTD again and insert its HISTORY row again, and the cached
/// warehouse, changed once, would differ).
#[test]
fn sessions_that_insert_rows_are_applied_exactly_once_despite_dying_workers() {
    let (url, _dir) = sqlite_url("crash");
    let mut opts = options(Some(url), "tpcc_");
    opts.common.policies = vec![Policy::WriteBack];
    let scenario = Scenario::setup();
    // Only the workers die (a terminal applying a queue for its read would fail its transaction
    // instead), at most a dozen: each stalls a queue until the dead worker's leases expire.
    let dying = DyingWorkers::start(&scenario, 0x2545_F491_4F6C_DD1D, 8, 12);
    // The server's default lease: a dead worker's stall lasts that long, a dozen of them in a
    // run, and a live one outrunning it applies nothing twice either.
    let records = opts
        .run(&InProcessWithLease(500), &|_| {})
        .expect("the run completes");
    let r = &records[0];
    assert!(dying.deaths() > 0, "no worker died");
    assert_consistent(r);
    let wb = r.write_back.as_ref().expect("write-back's record");
    assert!(wb.buffered_sessions > 0);
}
