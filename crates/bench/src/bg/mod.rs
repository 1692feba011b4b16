//! BG on the framework (`cads bench bg`; benchmarks.md Part A "BG" and Part B §2): the social
//! graph and its seven core actions are the application `cads_apps::bg` (the document layer, or
//! SQL tables with 001's key layouts); this module is the benchmark around it. See
//! `docs/BENCHMARKS.md` for what is measured and how.
//!
//! In the harness's phases ([`crate::harness`]):
//!
//! - **Load**: the graph's tables or collection are dropped and loaded straight into the data
//!   store: every policy starts from the same graph.
//! - **Warm**: every member's profile, friends and invitations are read through the cache.
//! - **Run** (or, with `--soar`, runs at doubling and then bisected thread counts): threads issue
//!   the mix's actions for `--duration`, on members chosen by BG's `dzipfian`, with BG's model of
//!   relationships keeping every write valid.
//! - **Verify**: every count read is validated against the writes; the data store's counts must
//!   be the counts before the run plus every acknowledged write. After the policy's last run,
//!   every cached key is compared with what a read would fill it with from the data store.

mod options;
mod record;
mod run;
pub mod soar;
pub mod validate;
pub mod workload;

pub use cads_apps::bg::{ActionKind, GraphParams, LayoutKind};
pub use options::{BgOptions, ConfigRecord, Sla};
pub use record::{
    render_summary, summarize, BgRecord, BgRun, BgSummary, CacheCheck, Probe, SoarRecord,
};
pub use workload::{Mix, Popularity};

pub use run::Bg;

pub use crate::harness::{print_progress, BenchmarkOptions, Phase, Progress};
pub(crate) use run::warm_cache;

/// The most connections the data store's pool opens: a SoAR search runs hundreds of threads,
/// and PostgreSQL allows 100 connections by default; threads beyond the pool wait for one.
const MAX_POOL: usize = 64;

impl BenchmarkOptions for BgOptions {
    type Benchmark = Bg;

    fn benchmark(&self) -> anyhow::Result<Bg> {
        self.check()?;
        Ok(Bg {
            opts: self.clone(),
            mix: self.mix()?,
        })
    }
}
