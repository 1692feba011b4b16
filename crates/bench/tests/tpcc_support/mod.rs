//! What the TPC-C tests share: short runs at a hundredth of the scale, the checks every run must
//! pass, and runs on scratch PostgreSQL and MariaDB databases (skipped loudly when a server is
//! absent, mandatory with `CADS_REQUIRE_SERVICES=1`).

#![allow(dead_code)]

use std::time::Duration;

use cads::Policy;
use cads_bench::harness::CommonOptions;
use cads_bench::tpcc::{BenchmarkOptions, Scale, TpccOptions, TpccRecord};
use cads_bench::CacheSpec;
use cads_testkit::scratch::StoreServer;
use cads_testkit::{ScratchDatabase, ScratchDir};

use super::support::InProcess;

/// Two warehouses (so remote stock and remote payments happen) of a hundredth of the scale, four
/// terminals, short runs, one load for all the policies of a test.
pub fn options(store: Option<String>, prefix: &str) -> TpccOptions {
    TpccOptions {
        common: CommonOptions {
            store,
            cache: CacheSpec::Embedded { cmis: 2 },
            threads: 4,
            workers: 2,
            drain_timeout: Duration::from_secs(60),
            ..TpccOptions::default().common
        },
        warehouses: 2,
        scale: Scale::HUNDREDTH,
        duration: Duration::from_millis(1500),
        load_threads: 2,
        prefix: prefix.to_string(),
        keep_data: true,
        ..TpccOptions::default()
    }
}

/// A SQLite URL in a fresh directory, removed when the guard drops.
pub fn sqlite_url(tag: &str) -> (String, ScratchDir) {
    let dir = ScratchDir::new(&format!("tpcc-{tag}"));
    (dir.sqlite_url(), dir)
}

/// The checks every run must pass: New-Order and Payment committed, and every other type the run
/// drew, none failed, every consistency condition held, no cached entry stale.
pub fn assert_consistent(r: &TpccRecord) {
    let broken: Vec<_> = r
        .detail
        .consistency
        .iter()
        .filter(|c| c.violations > 0)
        .collect();
    assert!(
        broken.is_empty(),
        "{}: conditions broken: {broken:#?}",
        r.policy
    );
    assert_eq!(
        r.detail.consistency.len(),
        12,
        "{}: every condition checked",
        r.policy
    );
    assert_eq!(
        r.stale_reads, 0,
        "{}: stale entries {:#?}",
        r.policy, r.detail.cache_check
    );
    assert!(r.detail.consistent, "{}", r.policy);
    for (name, counts) in &r.detail.counts {
        // A short run may draw none of a rare type (4% of the mix each; a run of 77 transactions
        // draws no ORDER_STATUS one time in 23), but every type drawn must commit.
        assert!(
            counts.sessions == 0 || counts.completed > 0,
            "{}: no {name} committed: {:?}",
            r.policy,
            r.detail.counts
        );
        assert_eq!(
            counts.failed, 0,
            "{}: {name} failed: {:?}",
            r.policy, r.errors
        );
    }
    for name in ["NEW_ORDER", "PAYMENT"] {
        assert!(
            r.detail.counts.get(name).is_some_and(|c| c.completed > 0),
            "{}: no {name} committed: {:?}",
            r.policy,
            r.detail.counts
        );
    }
    assert!(r.detail.tpmc > 0.0);
    if r.policy != "none" {
        let check = r.detail.cache_check.as_ref().expect("a cache to check");
        assert!(check.cached > 0, "{}: nothing was cached", r.policy);
        assert!(r.hit_ratio.is_some());
    }
    if r.policy == "write-back" {
        let wb = r.write_back.as_ref().expect("write-back's record");
        assert!(wb.buffered_sessions > 0, "nothing was buffered: {wb:?}");
        assert_eq!(wb.fallbacks, 0, "pinned memory is not capped here");
    } else {
        assert!(r.write_back.is_none());
    }
}

/// Every policy on a scratch database of `server`, if it answers (else a loud skip, or a
/// failure under `CADS_REQUIRE_SERVICES=1`): each keeps the consistency conditions and leaves no
/// stale entry in the cache.
pub fn every_policy_on(server: StoreServer) {
    let Some(database) = ScratchDatabase::create(server) else {
        return;
    };
    let mut opts = options(Some(database.url().to_string()), "tpcc_");
    opts.common.policies = every_policy();
    let records = opts.run(&InProcess, &|_| {}).expect("the runs complete");
    assert_eq!(records.len(), opts.common.policies.len());
    for record in &records {
        assert_consistent(record);
    }
}

/// The policies the tests run, each in turn.
pub fn every_policy() -> Vec<Policy> {
    vec![
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
        Policy::WriteBack,
    ]
}
