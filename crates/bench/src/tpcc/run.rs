//! The phases of one policy's run: load, warm-up, the measured interval, then (write-back) the
//! drain, and the checks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cads::store::DataStore;
use cads::{Cads, Config, Policy, Workers, WriteBackCounts};
use hdrhistogram::Histogram;

use super::cache::Db;
use super::check::{compare_cache, consistency};
use super::keyspace::{batches, next_order_ids, Batch};
use super::load::load_database;
use super::options::{ConfigRecord, TpccOptions};
use super::random::{C_ID, C_LAST_LOAD, C_LAST_RUN, OL_I_ID};
use super::record::{TpccRecord, TpccWriteBack, TxnCounts};
use super::schema::Tables;
use super::txn::{is_rollback, Attempts, Context as TxnContext, Kind, Terminal};
use super::{Phase, Progress};
use crate::deploy::{redact, Deployment};
use crate::generator::{Discrete, Rng};
use crate::ycsb::{human_bytes, LatencySummary, PinnedBytes, StoreCalls};

/// How often progress is reported.
const TICK: Duration = Duration::from_secs(1);
/// How many errors a record describes.
const ERRORS_SHOWN: usize = 10;

/// What stays fixed for one policy's run.
pub(crate) struct RunContext<'a> {
    pub opts: &'a TpccOptions,
    pub policy: Policy,
    pub store_url: &'a str,
    pub run: usize,
    pub progress: &'a (dyn Fn(Progress) + Sync),
}

impl RunContext<'_> {
    fn report(&self, phase: Phase, done: u64, total: Option<u64>, started: Instant, note: String) {
        (self.progress)(Progress {
            policy: self.policy,
            run: self.run,
            phase,
            done,
            total,
            elapsed: started.elapsed(),
            note,
        });
    }
}

/// Calls `tick` every second on the calling thread while `threads` threads run `work`.
fn with_ticks<T: Send>(
    threads: usize,
    mut tick: impl FnMut(),
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let work = &work;
                scope.spawn(move || work(t))
            })
            .collect();
        let mut next_tick = Instant::now() + TICK;
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if Instant::now() >= next_tick {
                tick();
                next_tick += TICK;
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread panicked"))
            .collect()
    })
}

/// Loads the database (dropping old tables); returns the seconds it took.
pub(crate) fn load(ctx: &RunContext<'_>, store: &dyn DataStore, tables: &Tables) -> Result<f64> {
    let opts = ctx.opts;
    let started = Instant::now();
    let last = std::sync::Mutex::new(Instant::now());
    load_database(
        store,
        tables,
        opts.warehouses,
        opts.scale,
        opts.seed,
        opts.load_threads,
        &|done, total| {
            let mut last = last.lock().expect("not poisoned");
            if last.elapsed() >= TICK || done == total {
                *last = Instant::now();
                ctx.report(Phase::Load, done, Some(total), started, "rows".into());
            }
        },
    )?;
    Ok(started.elapsed().as_secs_f64())
}

/// Reads every entry through the cache, so the run starts at a 100% hit rate (003 §4.3).
pub(crate) fn warm(ctx: &RunContext<'_>, cads: &Cads, db: &Db) -> Result<f64> {
    let started = Instant::now();
    let next = next_order_ids(cads.store().as_ref(), db, ctx.opts.warehouses)?;
    let work = batches(db, ctx.opts.warehouses, &next);
    let total: u64 = work.iter().map(|b| b.len() as u64).sum();
    let index = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let results = with_ticks(
        ctx.opts.threads.min(8),
        || {
            let done = done.load(Ordering::Relaxed);
            ctx.report(Phase::Warm, done, Some(total), started, "entries".into());
        },
        |_| -> Result<()> {
            while let Some(batch) = work.get(index.fetch_add(1, Ordering::Relaxed)) {
                cads.run(|s| batch.read(s, db))
                    .with_context(|| format!("warming {batch:?}"))?;
                done.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Ok(())
        },
    );
    results.into_iter().collect::<Result<()>>()?;
    ctx.report(Phase::Warm, total, Some(total), started, "done".into());
    Ok(started.elapsed().as_secs_f64())
}

/// One terminal's results.
struct TerminalResult {
    histograms: Vec<Histogram<u64>>,
    counts: [TxnCounts; 5],
    reads: u64,
    errors: Vec<String>,
    finished: Instant,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// What the terminals share.
struct Shared<'a> {
    txn: TxnContext<'a>,
    opts: &'a TpccOptions,
    deadline: Instant,
    done: AtomicU64,
    new_orders: AtomicU64,
    stop: AtomicBool,
}

fn run_terminal(shared: &Shared<'_>, terminal: &Terminal, index: usize) -> TerminalResult {
    let opts = shared.opts;
    let mut rng = Rng::new(
        opts.seed
            .wrapping_add((index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    );
    let mix = Discrete::new(
        Kind::ALL
            .into_iter()
            .zip(opts.mix.weights())
            .map(|(kind, weight)| (f64::from(weight), kind)),
    );
    let mut out = TerminalResult {
        histograms: (0..5).map(|_| histogram()).collect(),
        counts: [TxnCounts::default(); 5],
        reads: 0,
        errors: Vec::new(),
        finished: Instant::now(),
    };
    while Instant::now() < shared.deadline && !shared.stop.load(Ordering::Relaxed) {
        let kind = mix.next(&mut rng);
        let input = terminal.draw(kind, &mut rng, opts.scale, opts.warehouses);
        let started = Instant::now();
        let mut attempts = Attempts::default();
        let result = shared.txn.execute(&input, &mut attempts);
        let counts = &mut out.counts[kind.index()];
        counts.sessions += attempts.sessions;
        out.reads += attempts.reads;
        match result {
            Ok(()) => {
                let micros = started.elapsed().as_micros().max(1) as u64;
                let _ = out.histograms[kind.index()].record(micros);
                counts.completed += 1;
                if kind == Kind::NewOrder {
                    shared.new_orders.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) if is_rollback(&e) => counts.rolled_back += 1,
            Err(e) => {
                counts.failed += 1;
                if out.errors.len() < ERRORS_SHOWN {
                    out.errors.push(format!("{kind}: {e}"));
                }
            }
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    out.finished = Instant::now();
    out
}

/// The measured interval; returns the run record without the checks, the load and the warm-up,
/// which the caller fills in.
pub(crate) fn run_phase(ctx: &RunContext<'_>, dep: &Deployment, db: &Db) -> Result<TpccRecord> {
    let opts = ctx.opts;
    let cads = &dep.cads;
    dep.faults.reset_counts();
    let trips_before = dep.cache_round_trips();
    let queries_before = db.store_queries();

    let write_back = ctx.policy == Policy::WriteBack;
    let wb_before = cads.write_back_stats().snapshot();
    let workers = write_back.then(|| Workers::start(cads.clone(), opts.workers));
    let mut pinned = PinnedBytes::default();

    let terminals = Terminal::assign(opts.threads, opts.warehouses);
    let started = Instant::now();
    let shared = Shared {
        txn: TxnContext {
            cads,
            db,
            sabotage: opts.sabotage,
        },
        opts,
        deadline: started + opts.duration,
        done: AtomicU64::new(0),
        new_orders: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let mut last = (0u64, started);
    let results = with_ticks(
        opts.threads,
        || {
            let now = Instant::now();
            let done = shared.done.load(Ordering::Relaxed);
            let rate = (done - last.0) as f64 / (now - last.1).as_secs_f64();
            last = (done, now);
            let tpmc = shared.new_orders.load(Ordering::Relaxed) as f64 * 60.0
                / started.elapsed().as_secs_f64();
            let mut note = format!("{rate:.0} txn/s, {tpmc:.0} tpmC");
            if write_back {
                let bytes = cads.pinned_bytes();
                pinned
                    .samples
                    .push((started.elapsed().as_secs_f64(), bytes));
                let wb = cads.write_back_stats().snapshot().since(&wb_before);
                note.push_str(&format!(
                    ", pinned {}, {} sessions buffered, {} applied",
                    human_bytes(bytes),
                    wb.buffered_sessions,
                    wb.applied_sessions
                ));
            }
            ctx.report(Phase::Run, done, None, started, note);
        },
        |t| run_terminal(&shared, &terminals[t], t),
    );
    let finished = results
        .iter()
        .map(|r| r.finished)
        .max()
        .unwrap_or_else(Instant::now);
    let elapsed = finished.duration_since(started).as_secs_f64();
    let calls = dep.faults.counts();
    let cache_round_trips = dep.cache_round_trips() - trips_before;
    let store_queries = db.store_queries() - queries_before;
    let wb_end = cads.write_back_stats().snapshot().since(&wb_before);
    let write_back = match workers {
        Some(workers) => {
            pinned.end = cads.pinned_bytes();
            Some(drain(ctx, workers, wb_end, pinned)?)
        }
        None => None,
    };

    let mut histograms: Vec<Histogram<u64>> = (0..5).map(|_| histogram()).collect();
    let mut counts = [TxnCounts::default(); 5];
    let mut errors = Vec::new();
    let mut reads = 0;
    for r in results {
        for (total, h) in histograms.iter_mut().zip(&r.histograms) {
            total.add(h).expect("histograms of the same bounds");
        }
        for (total, c) in counts.iter_mut().zip(r.counts) {
            total.completed += c.completed;
            total.rolled_back += c.rolled_back;
            total.failed += c.failed;
            total.sessions += c.sessions;
        }
        errors.extend(r.errors);
        reads += r.reads;
    }
    errors.truncate(ERRORS_SHOWN);

    let transactions: u64 = counts.iter().map(|c| c.completed).sum();
    let new_orders = counts[Kind::NewOrder.index()].completed;
    let mut latency_us = BTreeMap::new();
    let mut by_kind = BTreeMap::new();
    for kind in Kind::ALL {
        latency_us.insert(
            kind.name().to_string(),
            LatencySummary::of(&histograms[kind.index()]),
        );
        by_kind.insert(kind.name().to_string(), counts[kind.index()]);
    }
    let has_cache = cads.cache().is_some();
    let operations = counts.iter().map(|c| c.sessions).sum::<u64>().max(1);
    let record = TpccRecord {
        benchmark: "tpcc",
        workload: format!("tpcc-{}-{}w", opts.scale.name(), opts.warehouses),
        policy: ctx.policy.name().to_string(),
        store: redact(ctx.store_url),
        run: ctx.run,
        elapsed_s: elapsed,
        transactions,
        throughput: transactions as f64 / elapsed.max(1e-9),
        tpmc: new_orders as f64 * 60.0 / elapsed.max(1e-9),
        latency_us,
        counts: by_kind,
        errors,
        hit_ratio: (has_cache && reads > 0)
            .then(|| 1.0 - store_queries.min(reads) as f64 / reads as f64),
        reads,
        store_queries,
        stale_reads: 0,
        cache_check: None,
        consistency: Vec::new(),
        consistent: false,
        store_calls: StoreCalls {
            reads: calls.reads,
            writes: calls.writes,
            transactions: calls.transactions,
            per_operation: (calls.reads + calls.writes + calls.transactions) as f64
                / operations as f64,
        },
        cache_round_trips,
        load_s: 0.0,
        warm_s: None,
        check_s: 0.0,
        write_back,
        config: ConfigRecord {
            warehouses: opts.warehouses,
            scale: opts.scale,
            scale_name: opts.scale.name(),
            threads: opts.threads,
            duration_s: opts.duration.as_secs_f64(),
            mix: opts.mix,
            warm: opts.warm && has_cache,
            workers: opts.workers,
            cache: if has_cache {
                opts.cache.describe()
            } else {
                "none".into()
            },
            cmi_maxmemory: opts.cmi.maxmemory.clone(),
            cmi_max_pinned_memory: opts.cmi.max_pinned_memory.clone(),
            prefix: opts.prefix.clone(),
            keep_data: opts.keep_data,
            seed: opts.seed,
            isolation: "READ COMMITTED",
            nurand_c: [C_ID, OL_I_ID, C_LAST_LOAD, C_LAST_RUN],
        },
    };
    Ok(record)
}

/// Write-back after the measured interval: the workers, still running, and this thread apply
/// every buffered session, so that the checks see the data store the run acknowledged. Returns
/// the record of write-back's activity (`counts`: during the interval).
fn drain(
    ctx: &RunContext<'_>,
    workers: Workers,
    counts: WriteBackCounts,
    mut pinned: PinnedBytes,
) -> Result<TpccWriteBack> {
    let pending = counts
        .buffered_sessions
        .saturating_sub(counts.applied_sessions);
    let started = Instant::now();
    ctx.report(
        Phase::Drain,
        0,
        Some(pending),
        started,
        format!("{pending} buffered sessions"),
    );
    let drained = workers
        .drain(ctx.opts.drain_timeout)
        .context("draining write-back's buffered sessions");
    let workers_used = workers.count();
    workers.stop();
    drained?;
    let drain_s = started.elapsed().as_secs_f64();
    ctx.report(Phase::Drain, pending, Some(pending), started, "done".into());
    pinned.max = pinned
        .samples
        .iter()
        .map(|s| s.1)
        .max()
        .unwrap_or(pinned.end);
    pinned.mean = if pinned.samples.is_empty() {
        pinned.end as f64
    } else {
        pinned.samples.iter().map(|s| s.1 as f64).sum::<f64>() / pinned.samples.len() as f64
    };
    Ok(TpccWriteBack {
        workers: workers_used,
        buffered_sessions: counts.buffered_sessions,
        applied_sessions: counts.applied_sessions,
        pending_sessions: pending,
        applied_share: counts.applied_share(),
        fallbacks: counts.fallbacks,
        pinned_bytes: pinned,
        drain_s,
    })
}

/// The checks after the run: the consistency conditions, and the cache against the data store.
pub(crate) fn check(
    ctx: &RunContext<'_>,
    dep: &Deployment,
    db: &Db,
    record: &mut TpccRecord,
) -> Result<()> {
    let started = Instant::now();
    ctx.report(
        Phase::Check,
        0,
        None,
        started,
        "consistency conditions".into(),
    );
    let store = dep.cads.store().clone();
    record.consistency = consistency(store.as_ref(), db)?;
    let violations: u64 = record.consistency.iter().map(|c| c.violations).sum();
    if dep.cads.cache().is_some() {
        let plain = Cads::new(
            store.clone(),
            None,
            Policy::DataStoreOnly,
            Config::default(),
        );
        let next = next_order_ids(store.as_ref(), db, ctx.opts.warehouses)?;
        let work: Vec<Batch> = batches(db, ctx.opts.warehouses, &next);
        let comparison = compare_cache(&dep.cads, &plain, db, &work)?;
        record.stale_reads = comparison.stale;
        record.cache_check = Some(comparison);
    }
    record.consistent = violations == 0 && record.stale_reads == 0;
    record.check_s = started.elapsed().as_secs_f64();
    ctx.report(
        Phase::Check,
        record.consistency.len() as u64,
        None,
        started,
        format!(
            "{violations} consistency violations, {} stale cached entries",
            record.stale_reads
        ),
    );
    Ok(())
}

/// The framework's settings for TPC-C: READ COMMITTED (the data store alone locks what it
/// changes with `FOR UPDATE`; with a cache, leases order the sessions), and write-back's defaults
/// (sessions applied 8 per transaction, compacted every 64).
pub(crate) fn config(opts: &TpccOptions) -> Config {
    let mut config = Config::default();
    config.write_back.crash = opts.crash.clone();
    config
}
