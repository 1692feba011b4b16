//! YCSB on the framework (`cads bench ycsb`): records are documents of YCSB's usertable
//! ([`cads_apps::ycsb`]), read with `Collection::get` and updated with `$set` of their fields in
//! sessions ([`Cads::run`](cads::Cads::run)); see `docs/BENCHMARKS.md` for what is measured and
//! how.
//!
//! In the harness's phases ([`crate::harness`]):
//!
//! - **Load**: the table is dropped and recreated, and `records` records are inserted straight
//!   into the data store, each at a version derived from its key number, so every policy starts
//!   from the same data.
//! - **Warm**: every record is read once through the cache (000 §3.3).
//! - **Run**: threads issue the workload's operations for the duration or operation count.
//! - **Verify**: every read is validated against the logged writes (stale reads), and every
//!   record in the data store is compared with its last acknowledged write (lost writes).

mod options;
mod record;
mod run;
pub mod validate;
pub mod workload;
mod zindex;

pub use cads_apps::ycsb::FieldLength;
pub use options::{ConfigRecord, YcsbOptions, DEFAULT_DURATION};
pub use record::{
    render_summary, summarize, PolicySummary, RangeCounts, RunRecord, YcsbRun, RANGES_NOTE,
    SCAN_NOTE, ZINDEX_NOTE,
};
pub use run::Ycsb;
pub use workload::{Distribution, Fields, Operation, ScanLength, Workload};

pub use crate::harness::{print_progress, BenchmarkOptions, Phase, Progress};

impl BenchmarkOptions for YcsbOptions {
    type Benchmark = Ycsb;

    fn benchmark(&self) -> anyhow::Result<Ycsb> {
        self.check()?;
        Ok(Ycsb {
            opts: self.clone(),
            workload: self.resolved_workload()?,
        })
    }
}
