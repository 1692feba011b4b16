//! TPC-C on the framework (`cads bench tpcc`; benchmarks.md Part A "TPC-C" and Part B §3): the
//! nine tables on any SQL store, the five transactions as sessions over CacheStores of rows and
//! per-district entries ([`cache`]), BenchBase's simplifications, tpmC and per-transaction
//! latency, and after every run the consistency conditions of clause 3.3.2 and a comparison of
//! every cached entry with the data store. See `docs/BENCHMARKS.md` for how it maps onto the
//! specification and the papers (003 §4.3, 000 §3.3.3).
//!
//! For every policy given, in turn (and `--repeat` times, interleaved):
//!
//! 1. **Load**: the tables are dropped and recreated and the initial database is generated from
//!    the seed ([`load`]), so every policy starts from the same data.
//! 2. **Deploy**: fresh CMIs in the policy's lease mode (embedded), or the external ones emptied.
//! 3. **Warm**: every row and per-district entry read once through the cache.
//! 4. **Run**: `threads` terminals, spread over the warehouses, each owning a range of districts,
//!    run the mix back to back (no keying or think time) for the duration.
//! 5. **Check**: the consistency conditions on the data store, then every entry the cache holds
//!    compared with the data store.

pub mod check;
pub mod keyspace;
pub mod load;
mod options;
pub mod random;
mod record;
mod run;
pub mod txn;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cads::store::{DataStore, StoreOptions};
use cads::Policy;

pub use cads_apps::tpcc::{cache, rows, schema, Scale, DISTRICTS};
pub use options::{ConfigRecord, Mix, TpccOptions};
pub use record::{
    render_summary, summarize, weighted_latency_ms, TpccRecord, TpccSummary, TpccWriteBack,
    TxnCounts,
};

use crate::deploy::{check_one_lease_mode, redact, store_url, Deployment, Launcher};
use cache::Db;
use run::RunContext;
use schema::Tables;

/// A phase of a policy's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Loading the initial database (`done` of `total` rows).
    Load,
    /// Reading every entry through the cache (`done` of `total` entries).
    Warm,
    /// The measured interval (`done` transactions).
    Run,
    /// Write-back: applying what is still buffered.
    Drain,
    /// The consistency conditions and the cache comparison.
    Check,
}

impl Phase {
    /// Its name in progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Warm => "warm",
            Phase::Run => "run",
            Phase::Drain => "drain",
            Phase::Check => "check",
        }
    }
}

/// A progress report, sent about once a second during long phases and at their end.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The policy running.
    pub policy: Policy,
    /// Which run of it (0-based).
    pub run: usize,
    /// The phase.
    pub phase: Phase,
    /// Units done so far (rows, entries, transactions).
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// Time since the phase began.
    pub elapsed: Duration,
    /// Details: the current rate and tpmC, what was found.
    pub note: String,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[tpcc {} #{}] {} {:>6.1}s {}",
            self.policy.name(),
            self.run,
            self.phase.name(),
            self.elapsed.as_secs_f64(),
            self.done
        )?;
        if let Some(total) = self.total {
            write!(f, "/{total}")?;
        }
        if !self.note.is_empty() {
            write!(f, " {}", self.note)?;
        }
        Ok(())
    }
}

/// A progress callback that prints each report as a line on standard error.
pub fn print_progress(p: Progress) {
    eprintln!("{p}");
}

/// Runs TPC-C for every policy of `opts` in turn (`repeat` times, interleaved), reporting
/// progress through `progress`, and returns one record per run. Writes `--json` after every run.
/// This is what `cads bench tpcc` calls.
///
/// Errors: bad options, a data store or CMIs that cannot be reached, a phase that fails (load,
/// warm-up, drain, the checks' queries). Violated consistency conditions and stale cached
/// entries are not errors: they are in the records (`consistent`).
pub fn run_tpcc(
    opts: &TpccOptions,
    launcher: &dyn Launcher,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<TpccRecord>> {
    opts.check()?;
    check_one_lease_mode(&opts.cache, &opts.policies)?;
    let (url, _scratch) = store_url(&opts.store, "tpcc")?;
    let store_options =
        StoreOptions::default().with_pool_size(opts.threads + opts.workers + opts.load_threads + 4);
    let store = cads::store::open(&url, &store_options)
        .with_context(|| format!("cannot open the data store {}", redact(&url)))?;
    let tables = Tables::new(&opts.prefix, store.dialect());
    let mut records = Vec::new();
    let outcome = (|| -> Result<()> {
        for run in 0..opts.repeat {
            for &policy in &opts.policies {
                let ctx = RunContext {
                    opts,
                    policy,
                    store_url: &url,
                    run,
                    progress,
                };
                let load = !opts.keep_data || records.is_empty();
                records.push(run_policy(&ctx, &store, &tables, load, launcher)?);
                if let Some(path) = &opts.json {
                    // Rewritten after every run, so an interrupted benchmark keeps what it measured.
                    write_json(path, &records)?;
                }
            }
        }
        Ok(())
    })();
    if opts.store.is_none() {
        // The scratch database goes with its tables; a named store keeps them for inspection.
        let _ = tables.drop_all(store.as_ref());
    }
    outcome.map(|()| records)
}

/// One policy's run: load (unless the data is kept from the previous run), deploy, warm, run,
/// check.
fn run_policy(
    ctx: &RunContext<'_>,
    store: &Arc<dyn DataStore>,
    tables: &Tables,
    load: bool,
    launcher: &dyn Launcher,
) -> Result<TpccRecord> {
    let opts = ctx.opts;
    let load_s = if load {
        run::load(ctx, store.as_ref(), tables)?
    } else {
        0.0
    };
    let dep = Deployment::start(
        ctx.policy,
        store.clone(),
        "",
        &opts.cache,
        &opts.cmi,
        launcher,
        run::config(opts),
    )?;
    let db = Db::new(tables.clone(), opts.scale);
    let warm_s = if opts.warm && dep.cads.cache().is_some() {
        Some(run::warm(ctx, &dep.cads, &db)?)
    } else {
        None
    };
    let mut record = run::run_phase(ctx, &dep, &db)?;
    run::check(ctx, &dep, &db, &mut record)?;
    record.load_s = load_s;
    record.warm_s = warm_s;
    dep.stop()?;
    Ok(record)
}

fn write_json(path: &Path, records: &[TpccRecord]) -> Result<()> {
    let text = serde_json::to_string_pretty(records).expect("records serialize");
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
