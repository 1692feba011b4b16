//! TPC-C on the framework (`cads bench tpcc`; benchmarks.md Part A "TPC-C" and Part B §3): the
//! nine tables on any SQL store, the five transactions as sessions over CacheStores of rows and
//! per-district entries ([`cache`]), BenchBase's simplifications, tpmC and per-transaction
//! latency, and after every run the consistency conditions of clause 3.3.2 and a comparison of
//! every cached entry with the data store. See `docs/BENCHMARKS.md` for how it maps onto the
//! specification and the papers (003 §4.3, 000 §3.3.3).
//!
//! In the harness's phases ([`crate::harness`]):
//!
//! - **Load**: the tables are dropped and recreated and the initial database is generated from
//!   the seed ([`load`]), so every policy starts from the same data (unless `--keep-data`).
//! - **Warm**: every row and per-district entry read once through the cache.
//! - **Run**: terminals, spread over the warehouses, each owning a range of districts, run the
//!   mix back to back (no keying or think time) for the duration.
//! - **Verify**: the consistency conditions on the data store, then every entry the cache holds
//!   compared with the data store.

pub mod check;
pub mod keyspace;
pub mod load;
mod options;
pub mod random;
mod record;
mod run;
pub mod txn;

pub use cads_apps::tpcc::{cache, rows, schema, Scale, DISTRICTS};
pub use options::{ConfigRecord, Mix, TpccOptions};
pub use record::{
    render_summary, summarize, weighted_latency_ms, TpccRecord, TpccRun, TpccSummary, TxnCounts,
};

pub use run::{Tpcc, TpccLog};

pub use crate::harness::{print_progress, BenchmarkOptions, Phase, Progress};

impl BenchmarkOptions for TpccOptions {
    type Benchmark = Tpcc;

    fn benchmark(&self) -> anyhow::Result<Tpcc> {
        self.check()?;
        Ok(Tpcc { opts: self.clone() })
    }
}
