//! What the TPC-C tests share: short runs at a hundredth of the scale, the checks every run must
//! pass, and the reachability of PostgreSQL and MariaDB (skipped loudly when absent, mandatory
//! with `CADS_REQUIRE_SERVICES=1`, as in cads-store's conformance suite).

#![allow(dead_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use cads::store::StoreOptions;
use cads::Policy;
use cads_bench::harness::CommonOptions;
use cads_bench::tpcc::schema::Tables;
use cads_bench::tpcc::{BenchmarkOptions, Scale, TpccOptions, TpccRecord};

use super::support::InProcess;
use cads_bench::CacheSpec;

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
pub fn sqlite_url(tag: &str) -> (String, TempDir) {
    let dir = std::env::temp_dir().join(format!("cads-tpcc-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    (format!("sqlite:{}/tpcc.db", dir.display()), TempDir(dir))
}

/// Removes a directory when dropped.
pub struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

fn services_required() -> bool {
    std::env::var("CADS_REQUIRE_SERVICES").is_ok_and(|v| v.trim() == "1")
}

/// The URL of a database server from `variable` (or `default`) if it answers; otherwise prints a
/// loud SKIPPED line, or fails when services are required.
pub fn server_url(variable: &str, default: &str, name: &str) -> Option<String> {
    let url = std::env::var(variable).unwrap_or_else(|_| default.to_string());
    let options = StoreOptions::default()
        // Generous: a loaded machine can take seconds to start a server's backend, and a
        // server that is down refuses at once anyway.
        .with_timeout(Duration::from_secs(20))
        .with_pool_size(1);
    match cads::store::open(&url, &options) {
        Ok(_) => Some(url),
        Err(e) => {
            let message = format!("{name} not reachable at {url} ({e}); run scripts/provision");
            if services_required() {
                panic!("CADS_REQUIRE_SERVICES=1 but {message}");
            }
            let bar = "=".repeat(72);
            let _ = writeln!(std::io::stderr(), "\n{bar}\nSKIPPED: {message}\n{bar}");
            None
        }
    }
}

/// Every policy on the database server that `variable` names (or `default`), if it answers:
/// each keeps the consistency conditions and leaves no stale entry in the cache. The test's
/// tables (prefixed `tag` and the process id) are dropped afterwards.
pub fn every_policy_on(variable: &str, default: &str, name: &str, tag: &str) {
    let Some(url) = server_url(variable, default, name) else {
        return;
    };
    let prefix = unique_prefix(tag);
    let mut opts = options(Some(url), &prefix);
    opts.common.policies = every_policy();
    let records = opts.run(&InProcess, &|_| {});
    let dropped = drop_tables(opts.common.store.as_deref().expect("a store"), &prefix);
    let records = records.expect("the runs complete");
    dropped.expect("drop the test's tables");
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

/// Drops the tables a test made on a shared server.
pub fn drop_tables(url: &str, prefix: &str) -> cads::store::Result<()> {
    let store = cads::store::open(url, &StoreOptions::default().with_pool_size(1))?;
    Tables::new(prefix, store.dialect()).drop_all(store.as_ref())
}

/// A table prefix no other test process uses at the same time: `t<pid>_<tag>_`.
pub fn unique_prefix(tag: &str) -> String {
    format!("t{}_{tag}_", std::process::id())
}
