//! YCSB on the framework (`cads bench ycsb`): records are documents of a `usertable`
//! [`Collection`](cads::documents::Collection), read with `Collection::get` and updated with
//! `$set` of their fields in sessions ([`Cads::run`](cads::Cads::run)); see
//! `docs/BENCHMARKS.md` for what is measured and how.
//!
//! For every policy given, in turn (and `--repeat` times, interleaved):
//!
//! 1. **Deploy**: fresh CMIs in the policy's lease mode (embedded), or the external ones emptied;
//!    the data store behind a call-counting `FaultyStore`.
//! 2. **Load**: the table is dropped and recreated, and `records` records are inserted straight
//!    into the data store, each at a version derived from its key number, so every policy starts
//!    from the same data.
//! 3. **Warm**: every record is read once through the cache (000 §3.3).
//! 4. **Run**: `threads` threads issue the workload's operations for the duration or operation
//!    count; write-back runs `workers` background workers and pinned memory is sampled every
//!    second.
//! 5. **Drain** (write-back): the workers are stopped, the buffered writes still waiting are
//!    counted, then all are applied.
//! 6. **Verify**: every read is validated against the logged writes (stale reads), and every
//!    record in the data store is compared with its last acknowledged write (lost writes).

mod options;
mod record;
mod run;
pub mod validate;
pub mod workload;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cads::store::StoreOptions;
use cads::{Config, Policy};

pub use options::{parse_duration, parse_policies, ConfigRecord, YcsbOptions, DEFAULT_DURATION};
pub use record::{
    human_bytes, render_summary, summarize, Keyspace, LatencySummary, PinnedBytes, PolicySummary,
    RunRecord, StoreCalls, WriteBackRecord, SCAN_NOTE,
};
pub use workload::{Distribution, Fields, Operation, ScanLength, Workload};

use crate::deploy::{check_one_lease_mode, store_url, Deployment, Launcher};
use run::RunContext;

/// A phase of a policy's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Inserting the records (`done` of `total` records).
    Load,
    /// Reading every record through the cache (`done` of `total`).
    Warm,
    /// The measured phase (`done` operations; `total` with `--operations`).
    Run,
    /// Write-back: applying what is still buffered.
    Drain,
    /// Validating reads and reading the data store back.
    Verify,
}

impl Phase {
    /// Its name in progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Warm => "warm",
            Phase::Run => "run",
            Phase::Drain => "drain",
            Phase::Verify => "verify",
        }
    }
}

/// A progress report, sent about once a second during long phases and at their end.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The workload.
    pub workload: String,
    /// The policy running.
    pub policy: Policy,
    /// Which run of it (0-based).
    pub run: usize,
    /// The phase.
    pub phase: Phase,
    /// Units done so far (records or operations).
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// Time since the phase began.
    pub elapsed: Duration,
    /// Details: current rate, pinned memory, ... (`"done"` at a phase's end).
    pub note: String,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[ycsb {} {} #{}] {} {:>6.1}s {}",
            self.workload,
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

/// Runs YCSB for every policy of `opts` in turn (`repeat` times, interleaved), reporting
/// progress through `progress`, and returns one record per run. Writes `--json` and `--out`
/// when given. This is what `cads bench ycsb` calls.
///
/// Errors: bad options, a data store or CMIs that cannot be reached, or a phase that fails
/// (loading, warming, draining). Stale reads and lost writes are not errors: they are in the
/// records.
pub fn run_ycsb(
    opts: &YcsbOptions,
    launcher: &dyn Launcher,
    progress: &dyn Fn(Progress),
) -> Result<Vec<RunRecord>> {
    opts.check()?;
    let workload = opts.resolved_workload()?;
    check_one_lease_mode(&opts.cache, &opts.policies)?;
    let (url, _scratch) = store_url(&opts.store, "ycsb")?;
    let store_options = StoreOptions::default()
        .with_pool_size(opts.threads + opts.workers + 4)
        .with_timeout(opts.store_timeout);
    let store = cads::store::open(&url, &store_options)
        .with_context(|| format!("cannot open the data store {}", crate::deploy::redact(&url)))?;
    let mut records = Vec::new();
    for run in 0..opts.repeat {
        for &policy in &opts.policies {
            let ctx = RunContext {
                opts,
                workload: &workload,
                policy,
                store_url: &url,
                run,
                progress,
            };
            let record = run_policy(&ctx, store.clone(), launcher)?;
            records.push(record);
            if let Some(path) = &opts.json {
                // Rewritten after every run, so an interrupted benchmark keeps what it measured.
                write_json(path, &records)?;
            }
        }
    }
    if let Some(dir) = &opts.out {
        write_out(dir, &records)?;
    }
    Ok(records)
}

/// One policy's run: deploy, load, warm, run, drain, verify.
fn run_policy(
    ctx: &RunContext<'_>,
    store: Arc<dyn cads::store::DataStore>,
    launcher: &dyn Launcher,
) -> Result<RunRecord> {
    let opts = ctx.opts;
    let mut config = Config::default();
    config.write_back.worker_pause = opts.worker_pause;
    let dep = Deployment::start(
        ctx.policy,
        store.clone(),
        &opts.table,
        &opts.cache,
        &opts.cmi,
        launcher,
        config,
    )?;
    let load_s = run::load(ctx, &store)?.as_secs_f64();
    let warm_s = if opts.warm && dep.cads.cache().is_some() {
        Some(run::warm(ctx, &dep.cads)?.as_secs_f64())
    } else {
        None
    };
    let mut record = run::run_phase(ctx, &dep)?;
    record.load_s = load_s;
    record.warm_s = warm_s;
    dep.stop()?;
    Ok(record)
}

fn write_json(path: &Path, records: &[RunRecord]) -> Result<()> {
    let text = serde_json::to_string_pretty(records).expect("records serialize");
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// `--out DIR`: `ycsb-<workload>-<policy>-<run>.json` per run, `summary.md` and `summary.json`.
fn write_out(dir: &Path, records: &[RunRecord]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for r in records {
        let name = format!("ycsb-{}-{}-{}.json", r.workload, r.policy, r.run);
        write_json(&dir.join(name), std::slice::from_ref(r))?;
    }
    let summary = summarize(records);
    let path = dir.join("summary.md");
    std::fs::write(&path, render_summary(&summary))
        .with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("summary.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&summary).expect("summaries serialize") + "\n",
    )
    .with_context(|| format!("writing {}", path.display()))
}
