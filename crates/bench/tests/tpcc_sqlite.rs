//! TPC-C on SQLite at a hundredth of the specification's scale: every policy keeps the
//! consistency conditions and leaves no stale entry in the cache; the checks catch a write made
//! behind the framework's back.

mod support;
mod tpcc_support;

use cads::Policy;
use cads_bench::tpcc::BenchmarkOptions;
use support::InProcess;
use tpcc_support::{assert_consistent, every_policy, options, sqlite_url};

#[test]
fn every_policy_keeps_the_database_consistent() {
    let (url, _dir) = sqlite_url("every-policy");
    let mut opts = options(Some(url), "tpcc_");
    opts.common.policies = every_policy();
    let records = opts.run(&InProcess, &|_| {}).expect("the runs complete");
    assert_eq!(records.len(), opts.common.policies.len());
    for record in &records {
        assert_consistent(record);
    }
}

#[test]
fn the_checks_catch_a_write_behind_the_cache() {
    let (url, _dir) = sqlite_url("sabotage");
    let mut opts = options(Some(url), "tpcc_");
    opts.common.policies = vec![Policy::WriteThrough];
    opts.sabotage = true;
    let records = opts.run(&InProcess, &|_| {}).expect("the run completes");
    let r = &records[0];
    assert!(!r.detail.consistent, "sabotage went unnoticed");
    assert!(r.stale_reads > 0, "the cached warehouses should be stale");
    let broken: Vec<&str> = r
        .detail
        .consistency
        .iter()
        .filter(|c| c.violations > 0)
        .map(|c| c.id)
        .collect();
    assert_eq!(broken, ["1", "8"], "{:#?}", r.detail.consistency);
}
