//! BG on the framework (`cads bench bg`; benchmarks.md Part A "BG" and Part B §2): the social
//! graph and its seven core actions are the application `cads_apps::bg` (the document
//! layer, or SQL tables with 001's key layouts); this module is the benchmark around it. See
//! `docs/BENCHMARKS.md` for what is measured and how.
//!
//! For every policy given, in turn (and `--repeat` times, interleaved):
//!
//! 1. **Deploy**: fresh CMIs in the policy's lease mode (embedded), or the external ones emptied;
//!    the data store behind a call-counting `FaultyStore`.
//! 2. **Load**: the graph's tables or collection are dropped and loaded straight into the data
//!    store: every policy starts from the same graph.
//! 3. **Warm**: every member's profile, friends and invitations are read through the cache.
//! 4. **Run** (or, with `--soar`, runs at doubling and then bisected thread counts): threads issue
//!    the mix's actions for `--duration`, on members chosen by BG's `dzipfian`, with BG's model of
//!    relationships keeping every write valid; write-back runs `--workers` background workers.
//! 5. **Drain** (write-back): the workers stop; what they left buffered is counted and applied.
//! 6. **Verify**: every count read is validated against the writes; the data store's counts
//!    must be the counts before the run plus every acknowledged write.
//! 7. **Cache check**, after the policy's last run: every cached key is compared with what a read
//!    would fill it with from the data store.

pub mod latency;
mod options;
mod record;
mod run;
pub mod soar;
pub mod validate;
pub mod workload;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cads::store::{DataStore, StoreOptions};
use cads::{Config, Policy};

pub use cads_apps::bg::{GraphParams, LayoutKind};
pub use options::{BgOptions, ConfigRecord, Sla};
pub use record::{render_summary, summarize, BgRecord, BgSummary, CacheCheck, Probe, SoarRecord};
pub use workload::{Mix, Popularity};

use crate::deploy::{check_one_lease_mode, redact, store_url, Deployment, Launcher};
pub use crate::ycsb::Phase;
use run::{Bench, RunContext};

/// The most connections the data store's pool opens: a SoAR search runs hundreds of threads,
/// and PostgreSQL allows 100 connections by default; threads beyond the pool wait for one.
const MAX_POOL: usize = 64;

/// A progress report, sent about once a second during a run and at the ends of the phases.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The mix.
    pub workload: String,
    /// The policy running.
    pub policy: Policy,
    /// Which run of it (0-based, `--repeat`).
    pub run: usize,
    /// Threads issuing actions (0 outside runs).
    pub threads: usize,
    /// The phase.
    pub phase: Phase,
    /// Units done so far: members loaded or warmed, actions run, reads verified.
    pub done: u64,
    /// Time since the phase began.
    pub elapsed: Duration,
    /// Details: current rate, pinned memory, ... (`"done"` at a phase's end).
    pub note: String,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[bg {} {} #{}",
            self.workload,
            self.policy.name(),
            self.run
        )?;
        if self.threads > 0 {
            write!(f, " T={}", self.threads)?;
        }
        write!(
            f,
            "] {} {:>6.1}s {}",
            self.phase.name(),
            self.elapsed.as_secs_f64(),
            self.done
        )?;
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

/// Runs BG for every policy of `opts` in turn (`repeat` times, interleaved), reporting progress
/// through `progress`, and returns one record per policy and repeat: of the run, or with
/// `--soar` of the search (its `soar` lists every probe). Writes `--json` after every record.
/// This is what `cads bench bg` calls.
///
/// Errors: bad options, a data store or CMIs that cannot be reached, or a phase that fails
/// (loading, warming, draining). Stale reads, lost writes and cached keys that differ from the
/// data store are not errors: they are in the records.
pub fn run_bg(
    opts: &BgOptions,
    launcher: &dyn Launcher,
    progress: &dyn Fn(Progress),
) -> Result<Vec<BgRecord>> {
    opts.check()?;
    let mix = opts.mix()?;
    check_one_lease_mode(&opts.cache, &opts.policies)?;
    let (url, _scratch) = store_url(&opts.store, "bg")?;
    let pool = (opts.peak_threads() + opts.workers + 4).min(MAX_POOL);
    let store = cads::store::open(&url, &StoreOptions::default().with_pool_size(pool))
        .with_context(|| format!("cannot open the data store {}", redact(&url)))?;
    let mut records = Vec::new();
    for run in 0..opts.repeat {
        for &policy in &opts.policies {
            let ctx = RunContext {
                opts,
                mix: &mix,
                graph: opts.graph(),
                policy,
                store_url: &url,
                store_pool: pool,
                run,
                progress,
            };
            records.push(run_policy(&ctx, store.clone(), launcher)?);
            if let Some(path) = &opts.json {
                // Rewritten after every record, so an interrupted benchmark keeps what it measured.
                write_json(path, &records)?;
            }
        }
    }
    Ok(records)
}

/// One policy: deploy, load, warm, the run or the search, and the cache check.
fn run_policy(
    ctx: &RunContext<'_>,
    store: Arc<dyn DataStore>,
    launcher: &dyn Launcher,
) -> Result<BgRecord> {
    let opts = ctx.opts;
    let dep = Deployment::start(
        ctx.policy,
        store,
        cads_apps::bg::layout::documents::COLLECTION,
        &opts.cache,
        &opts.cmi,
        launcher,
        Config::default(),
    )?;
    let layout = cads_apps::bg::layout(opts.layout, ctx.policy);
    let (mut bench, load_s) = Bench::load(ctx, &dep, layout)?;
    let warm_s = if opts.warm && dep.cads.cache().is_some() {
        Some(bench.warm()?)
    } else {
        None
    };
    let mut record = if opts.soar {
        let search = soar::search(
            opts.soar_start,
            opts.max_threads,
            |threads| bench.run(threads),
            |r| r.meets_sla,
        )?;
        let probes: Vec<Probe> = search.runs.iter().map(|(_, r)| r.probe()).collect();
        let best = probes
            .iter()
            .filter(|p| p.meets_sla)
            .max_by(|a, b| a.throughput.total_cmp(&b.throughput));
        let soar = SoarRecord {
            sla: opts.sla,
            soar: search.best.map_or(0.0, |i| probes[i].throughput),
            socialites: search.best.map_or(0, |i| probes[i].threads),
            best_throughput: best.map_or(0.0, |p| p.throughput),
            best_threads: best.map_or(0, |p| p.threads),
            bounded: search.bounded,
            probes,
        };
        // The record is the run at the SoAR's thread count (or the first, if none met the SLA).
        let mut runs = search.runs;
        let mut record = runs.swap_remove(search.best.unwrap_or(0)).1;
        record.soar = Some(soar);
        record
    } else {
        bench.run(opts.threads)?
    };
    record.cache_check = bench.check_cache()?;
    record.load_s = load_s;
    record.warm_s = warm_s;
    dep.stop()?;
    Ok(record)
}

fn write_json(path: &Path, records: &[BgRecord]) -> Result<()> {
    let text = serde_json::to_string_pretty(records).expect("records serialize");
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
