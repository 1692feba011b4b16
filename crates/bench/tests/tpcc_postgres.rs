//! TPC-C on PostgreSQL (`CADS_POSTGRES_URL`, default `postgres://cads:cads@127.0.0.1:5432/cads`)
//! at a hundredth of the specification's scale: every policy keeps the consistency conditions
//! and leaves no stale entry in the cache. Skipped loudly when the server is unreachable; fails
//! then with `CADS_REQUIRE_SERVICES=1`. Tables are prefixed per test process.

mod support;
mod tpcc_support;

use support::InProcess;
use tpcc_support::{assert_consistent, every_policy, options, server_url, unique_prefix};

#[test]
fn every_policy_keeps_the_database_consistent() {
    let Some(url) = server_url(
        "CADS_POSTGRES_URL",
        "postgres://cads:cads@127.0.0.1:5432/cads",
        "PostgreSQL",
    ) else {
        return;
    };
    let prefix = unique_prefix("pg");
    let mut opts = options(Some(url), &prefix);
    opts.policies = every_policy();
    let records = cads_bench::tpcc::run_tpcc(&opts, &InProcess, &|_| {});
    let dropped = tpcc_support::drop_tables(opts.store.as_deref().expect("a store"), &prefix);
    let records = records.expect("the runs complete");
    dropped.expect("drop the test's tables");
    assert_eq!(records.len(), opts.policies.len());
    for record in &records {
        assert_consistent(record);
    }
}
