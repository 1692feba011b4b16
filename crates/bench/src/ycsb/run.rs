//! The phases of one policy's run: load, warm-up, run, then (write-back) drain, and the checks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cads::documents::Collection;
use cads::store::{Changes, DataStore, Document};
use cads::{Cads, Policy, Workers};
use hdrhistogram::Histogram;
use serde_json::Value;

use super::options::{ConfigRecord, YcsbOptions};
use super::record::{
    Keyspace, LatencySummary, PinnedBytes, RunRecord, StoreCalls, WriteBackRecord, SCAN_NOTE,
};
use super::validate::{
    check_final, check_reads, field_name, field_value, id_hash, inspect, load_token, record,
    writer_token, Log, Nanos, ReadRecord, Seen, WriteRecord, UNKNOWN_END,
};
use super::workload::{Fields, KeyChooser, Operation, Workload};
use super::{Phase, Progress};
use crate::cpu::CpuSample;
use crate::deploy::{mark_driver_thread, redact, Deployment};
use crate::generator::{key_name, AcknowledgedCounter, Rng};

/// Records per `insert_many` call in the load phase.
const LOAD_BATCH: u64 = 500;
/// Records per page when the data store is read back after the run.
const CHECK_PAGE: usize = 1000;
/// How often progress is reported and pinned memory sampled.
const TICK: Duration = Duration::from_secs(1);
/// How many errors a record describes.
const ERRORS_SHOWN: usize = 10;

/// What stays fixed for one policy's run.
pub(crate) struct RunContext<'a> {
    pub opts: &'a YcsbOptions,
    pub workload: &'a Workload,
    pub policy: Policy,
    pub store_url: &'a str,
    pub run: usize,
    pub progress: &'a dyn Fn(Progress),
}

impl RunContext<'_> {
    fn report(&self, phase: Phase, done: u64, total: Option<u64>, started: Instant, note: String) {
        (self.progress)(Progress {
            workload: self.workload.name.clone(),
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

/// Runs `work` on `threads` threads while the calling thread reports progress every second since
/// `started` (`done` counts units of work); returns the threads' results.
fn with_progress<T: Send>(
    threads: usize,
    done: &AtomicU64,
    started: Instant,
    mut tick: impl FnMut(u64),
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<ScopedJoinHandle<'_, T>> = (0..threads)
            .map(|t| {
                let work = &work;
                scope.spawn(move || work(t))
            })
            .collect();
        let mut next_tick = started + TICK;
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if Instant::now() >= next_tick {
                tick(done.load(Ordering::Relaxed));
                next_tick += TICK;
            }
        }
        // On a loaded machine this thread may wake only after the workers finished: a phase
        // that lasted a second or more still gets its tick (write-back's memory samples).
        if next_tick == started + TICK && Instant::now() >= next_tick {
            tick(done.load(Ordering::Relaxed));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread panicked"))
            .collect()
    })
}

/// The load phase: drops and recreates the table and inserts `records` records (key numbers
/// split across the threads in batches), each at its load version.
pub(crate) fn load(ctx: &RunContext<'_>, store: &Arc<dyn DataStore>) -> Result<Duration> {
    let opts = ctx.opts;
    let started = Instant::now();
    store
        .drop_collection(&opts.table)
        .with_context(|| format!("dropping the table {}", opts.table))?;
    store
        .create_collection(&opts.table, &[])
        .with_context(|| format!("creating the table {}", opts.table))?;
    let next = AtomicU64::new(0);
    let loaded = AtomicU64::new(0);
    let total = opts.records;
    let results = with_progress(
        opts.threads.min(8),
        &loaded,
        started,
        |done| ctx.report(Phase::Load, done, Some(total), started, String::new()),
        |_| -> Result<()> {
            loop {
                let first = next.fetch_add(LOAD_BATCH, Ordering::Relaxed);
                if first >= total {
                    return Ok(());
                }
                let last = (first + LOAD_BATCH).min(total);
                let docs: Vec<(String, Document)> = (first..last)
                    .map(|k| {
                        let k = k as i64;
                        (
                            key_name(k, true, 1),
                            record(load_token(k), opts.field_count, opts.field_length),
                        )
                    })
                    .collect();
                store
                    .insert_many(&opts.table, &docs)
                    .with_context(|| format!("loading records {first}..{last}"))?;
                loaded.fetch_add(last - first, Ordering::Relaxed);
            }
        },
    );
    results.into_iter().collect::<Result<()>>()?;
    let elapsed = started.elapsed();
    ctx.report(Phase::Load, total, Some(total), started, "done".into());
    Ok(elapsed)
}

/// The warm-up: every record read once through the cache, so the run starts at a 100% hit rate
/// (000 §3.3).
pub(crate) fn warm(ctx: &RunContext<'_>, cads: &Cads) -> Result<Duration> {
    let opts = ctx.opts;
    let started = Instant::now();
    let table = Collection::named(&opts.table);
    let next = AtomicU64::new(0);
    let warmed = AtomicU64::new(0);
    let total = opts.records;
    let results = with_progress(
        opts.threads,
        &warmed,
        started,
        |done| ctx.report(Phase::Warm, done, Some(total), started, String::new()),
        |_| -> Result<()> {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= total {
                    return Ok(());
                }
                let id = key_name(k as i64, true, 1);
                cads.run(|s| table.get(s, &id))
                    .with_context(|| format!("warming record {id}"))?
                    .ok_or_else(|| anyhow!("record {id} is missing after the load"))?;
                warmed.fetch_add(1, Ordering::Relaxed);
            }
        },
    );
    results.into_iter().collect::<Result<()>>()?;
    let elapsed = started.elapsed();
    ctx.report(Phase::Warm, total, Some(total), started, "done".into());
    Ok(elapsed)
}

/// What the run threads share.
struct Shared<'a> {
    cads: &'a Cads,
    table: Collection,
    workload: &'a Workload,
    opts: &'a YcsbOptions,
    inserts: AcknowledgedCounter,
    expected_new_keys: i64,
    epoch: Instant,
    deadline: Option<Instant>,
    /// Operations handed out, against `--operations`.
    issued: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
}

impl Shared<'_> {
    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }
}

/// One thread's results.
struct ThreadResult {
    histograms: Vec<Histogram<u64>>,
    failed: [u64; 5],
    errors: Vec<String>,
    log: Log,
    cache_reads: u64,
    finished: Instant,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// The changes of an update with version `token`: `$set` of the fields and of `v`.
fn update_changes(token: u64, fields: Fields, opts: &YcsbOptions, rng: &mut Rng) -> Changes {
    let mut set = serde_json::Map::new();
    match fields {
        Fields::All => {
            for i in 0..opts.field_count {
                set.insert(
                    field_name(i),
                    field_value(token, i, opts.field_length).into(),
                );
            }
        }
        Fields::One => {
            let i = rng.below(opts.field_count as u64) as usize;
            set.insert(
                field_name(i),
                field_value(token, i, opts.field_length).into(),
            );
        }
    }
    set.insert("v".into(), token.into());
    Changes::from_json(&serde_json::json!({ "$set": set })).expect("$set of strings is valid")
}

fn run_thread(shared: &Shared<'_>, t: usize) -> ThreadResult {
    mark_driver_thread();
    let opts = shared.opts;
    let workload = shared.workload;
    let mut rng = Rng::new(
        opts.seed
            .wrapping_add((t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    );
    let chooser = workload.chooser().expect("checked with the options");
    let mut keys = KeyChooser::new(
        workload.distribution,
        opts.records as i64,
        shared.expected_new_keys,
        opts.zipfian_constant,
        &shared.inserts,
    );
    let mut out = ThreadResult {
        histograms: (0..5).map(|_| histogram()).collect(),
        failed: [0; 5],
        errors: Vec::new(),
        log: Log::default(),
        cache_reads: 0,
        finished: Instant::now(),
    };
    let all_fields = workload.update_fields == Fields::All;
    let inspect_doc =
        |doc: Option<&Document>| inspect(doc, opts.field_count, opts.field_length, all_fields);
    let mut seq = 0u64;
    loop {
        if shared.stop.load(Ordering::Relaxed)
            || shared.deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        if let Some(budget) = opts.operations {
            if shared.issued.fetch_add(1, Ordering::Relaxed) >= budget {
                break;
            }
        }
        let op = chooser.next(&mut rng);
        let start_instant = Instant::now();
        let start = shared.now();
        let mut reads_here = 0u64;
        let outcome: Result<(), cads::Error> = match op {
            Operation::Read => {
                let keynum = keys.next(&mut rng, &shared.inserts);
                let id = key_name(keynum, true, 1);
                reads_here += 1;
                let result = shared.table.read(shared.cads, &id);
                result.map(|doc| {
                    let end = shared.now();
                    out.log.reads.push(ReadRecord {
                        key: id_hash(&id),
                        seen: inspect_doc(doc.as_ref()),
                        start,
                        end,
                    });
                })
            }
            Operation::Update => {
                let keynum = keys.next(&mut rng, &shared.inserts);
                let id = key_name(keynum, true, 1);
                seq += 1;
                let token = writer_token(t, seq);
                let changes = update_changes(token, workload.update_fields, opts, &mut rng);
                let result = if opts.sabotage {
                    // Behind the framework's back: the cache keeps the old version.
                    shared
                        .cads
                        .store()
                        .update(&opts.table, &id, &changes)
                        .map(|_| ())
                        .map_err(cads::Error::from)
                } else {
                    shared
                        .cads
                        .run(|s| shared.table.update(s, &id, changes.clone()))
                };
                log_write(&mut out.log, &id, token, start, shared.now(), &result);
                result
            }
            Operation::Insert => {
                let keynum = shared.inserts.next();
                let id = key_name(keynum, true, 1);
                seq += 1;
                let token = writer_token(t, seq);
                let doc = record(token, opts.field_count, opts.field_length);
                let result = shared
                    .cads
                    .run(|s| shared.table.insert(s, &id, doc.clone()));
                log_write(&mut out.log, &id, token, start, shared.now(), &result);
                // Acknowledged whatever the outcome, as YCSB does.
                shared.inserts.acknowledge(keynum);
                result
            }
            Operation::Scan => {
                let keynum = keys.next(&mut rng, &shared.inserts);
                let from = Value::String(key_name(keynum, true, 1));
                let len = workload.scan_length.next(&mut rng) as usize;
                let projected = match workload.scan_fields {
                    Fields::All => None,
                    Fields::One => Some(field_name(rng.below(opts.field_count as u64) as usize)),
                };
                // No scan caching in the framework yet: the ids come from the data store, the
                // records through the cache, in the same session.
                let result = shared.cads.run(|s| {
                    let rows = s.tx().documents().scan(
                        &opts.table,
                        None,
                        Bound::Included(&from),
                        Bound::Unbounded,
                        len,
                    )?;
                    let mut records = Vec::with_capacity(rows.len());
                    for (id, _) in rows {
                        reads_here += 1;
                        let doc = shared.table.get(s, &id)?;
                        records.push((id, doc));
                    }
                    Ok(records)
                });
                result.map(|records| {
                    let end = shared.now();
                    for (id, doc) in &records {
                        out.log.reads.push(ReadRecord {
                            key: id_hash(id),
                            seen: inspect_doc(doc.as_ref()),
                            start,
                            end,
                        });
                        if let (Some(field), Some(doc)) = (&projected, doc) {
                            // The projection (YCSB^1) happens here: the document layer caches
                            // and returns whole documents.
                            std::hint::black_box(doc.get(field));
                        }
                    }
                })
            }
            Operation::ReadModifyWrite => {
                let keynum = keys.next(&mut rng, &shared.inserts);
                let id = key_name(keynum, true, 1);
                seq += 1;
                let token = writer_token(t, seq);
                let changes = update_changes(token, workload.update_fields, opts, &mut rng);
                let result = shared.cads.run(|s| {
                    reads_here += 1;
                    let doc = shared.table.get(s, &id)?;
                    shared.table.update(s, &id, changes.clone())?;
                    Ok(doc)
                });
                let end = shared.now();
                log_write(&mut out.log, &id, token, start, end, &result);
                result.map(|doc| {
                    out.log.reads.push(ReadRecord {
                        key: id_hash(&id),
                        seen: inspect_doc(doc.as_ref()),
                        start,
                        end,
                    });
                })
            }
        };
        out.cache_reads += reads_here;
        match outcome {
            Ok(()) => {
                let micros = start_instant.elapsed().as_micros().max(1) as u64;
                let _ = out.histograms[op.index()].record(micros);
            }
            Err(e) => {
                out.failed[op.index()] += 1;
                if out.errors.len() < ERRORS_SHOWN {
                    out.errors.push(format!("{op}: {e}"));
                }
            }
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    out.finished = Instant::now();
    out
}

/// Logs a write: committed (known end), aborted (nothing written: not logged), or failed
/// otherwise (it may have committed: unknown end).
fn log_write<T>(
    log: &mut Log,
    id: &str,
    token: u64,
    start: Nanos,
    end: Nanos,
    result: &Result<T, cads::Error>,
) {
    let end = match result {
        Ok(_) => end,
        Err(cads::Error::Aborted) => return,
        Err(_) => UNKNOWN_END,
    };
    log.writes.push(WriteRecord {
        key: id_hash(id),
        token,
        start,
        end,
    });
}

/// The run phase, the drain and the checks; returns the run record (without the load and
/// warm-up times, which the caller fills in).
pub(crate) fn run_phase(ctx: &RunContext<'_>, dep: &Deployment) -> Result<RunRecord> {
    let opts = ctx.opts;
    let workload = ctx.workload;
    let cads = &dep.cads;
    let policy = ctx.policy;
    let write_back = policy == Policy::WriteBack;

    dep.faults.reset_counts();
    let misses_before = dep.driver_misses();
    let trips_before = dep.cache_round_trips();
    let keyspace_before = dep.keyspace();
    let wb_before = cads.write_back_stats().snapshot();
    let workers = write_back.then(|| Workers::start(cads.clone(), opts.workers));

    let expected_ops = opts.operations.unwrap_or(opts.records) as f64;
    let cpu_before = CpuSample::now();
    let started = Instant::now();
    let shared = Shared {
        cads,
        table: Collection::named(&opts.table),
        workload,
        opts,
        inserts: AcknowledgedCounter::new(opts.records as i64),
        expected_new_keys: (expected_ops * workload.insert * 2.0) as i64,
        epoch: started,
        deadline: opts.run_duration().map(|d| started + d),
        issued: AtomicU64::new(0),
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    };
    let mut pinned = PinnedBytes::default();
    let mut applied_share = Vec::new();
    let mut last_done = 0;
    let mut last_tick = started;
    let results = with_progress(
        opts.threads,
        &shared.done,
        started,
        |done| {
            let now = Instant::now();
            let rate = (done - last_done) as f64 / (now - last_tick).as_secs_f64();
            (last_done, last_tick) = (done, now);
            let mut note = format!("{rate:.0} ops/s");
            if write_back {
                let bytes = cads.pinned_bytes();
                let seconds = started.elapsed().as_secs_f64();
                pinned.samples.push((seconds, bytes));
                let wb = cads.write_back_stats().snapshot();
                applied_share.push((seconds, wb.since(&wb_before).applied_share()));
                note.push_str(&format!(
                    ", pinned {}, buffered {} ops, applied {} ops",
                    super::record::human_bytes(bytes),
                    wb.buffered - wb_before.buffered,
                    wb.applied_ops - wb_before.applied_ops
                ));
            }
            ctx.report(Phase::Run, done, opts.operations, started, note);
        },
        |t| run_thread(&shared, t),
    );
    let finished = results
        .iter()
        .map(|r| r.finished)
        .max()
        .unwrap_or_else(Instant::now);
    let elapsed = finished.duration_since(started).as_secs_f64();

    // Counters at the end of the run, before the drain.
    let cpu = cpu_before
        .zip(CpuSample::now())
        .map(|(a, b)| a.until(&b, started.elapsed().as_secs_f64()));
    let calls = dep.faults.counts();
    let cache_misses = dep.driver_misses() - misses_before;
    let cache_round_trips = dep.cache_round_trips() - trips_before;
    let keyspace = match (keyspace_before, dep.keyspace()) {
        (Some(a), Some(b)) => Some(Keyspace {
            hits: b.0 - a.0,
            misses: b.1 - a.1,
        }),
        _ => None,
    };
    let wb_end = cads.write_back_stats().snapshot();

    let mut log = Log::default();
    let mut histograms: Vec<Histogram<u64>> = (0..5).map(|_| histogram()).collect();
    let mut failed = [0u64; 5];
    let mut errors = Vec::new();
    let mut cache_reads = 0;
    for r in results {
        for (total, h) in histograms.iter_mut().zip(&r.histograms) {
            total.add(h).expect("histograms of the same bounds");
        }
        for (total, f) in failed.iter_mut().zip(r.failed) {
            *total += f;
        }
        errors.extend(r.errors);
        cache_reads += r.cache_reads;
        log.merge(r.log);
    }
    errors.truncate(ERRORS_SHOWN);

    let write_back_record = match workers {
        Some(workers) => {
            pinned.end = cads.pinned_bytes();
            workers.stop();
            let pending = cads::writeback::pending(cads)
                .context("listing the buffered writes left after the run")?;
            let pending_docs: HashSet<_> = pending.into_iter().collect();
            let drain_started = Instant::now();
            ctx.report(
                Phase::Drain,
                0,
                Some(pending_docs.len() as u64),
                drain_started,
                format!("{} records with buffered writes", pending_docs.len()),
            );
            let drainer = Workers::start(cads.clone(), opts.workers);
            drainer
                .drain(opts.drain_timeout)
                .context("draining write-back's buffered writes")?;
            drainer.stop();
            let drain_s = drain_started.elapsed().as_secs_f64();
            ctx.report(
                Phase::Drain,
                pending_docs.len() as u64,
                Some(pending_docs.len() as u64),
                drain_started,
                "done".into(),
            );
            let written: HashSet<u64> = log.writes.iter().map(|w| w.key).collect();
            let buffered = wb_end.buffered - wb_before.buffered;
            let applied = wb_end.applied_ops - wb_before.applied_ops;
            pinned.max = pinned.samples.iter().map(|s| s.1).max().unwrap_or(0);
            pinned.mean = if pinned.samples.is_empty() {
                0.0
            } else {
                pinned.samples.iter().map(|s| s.1 as f64).sum::<f64>() / pinned.samples.len() as f64
            };
            Some(WriteBackRecord {
                workers: opts.workers,
                buffered_ops: buffered,
                applied_ops: applied,
                applied_writes: wb_end.applied_writes - wb_before.applied_writes,
                applied_share: if buffered == 0 {
                    1.0
                } else {
                    (applied as f64 / buffered as f64).min(1.0)
                },
                written_documents: written.len() as u64,
                pending_documents: pending_docs.len() as u64,
                documents_applied_share: if written.is_empty() {
                    1.0
                } else {
                    1.0 - pending_docs.len() as f64 / written.len() as f64
                },
                fallbacks: wb_end.fallbacks - wb_before.fallbacks,
                conversions: wb_end.conversions - wb_before.conversions,
                pinned_bytes: pinned,
                applied_share_samples: applied_share,
                drain_s,
            })
        }
        None => None,
    };

    // Checks: every read, then the data store's final state.
    let verify_started = Instant::now();
    ctx.report(
        Phase::Verify,
        0,
        None,
        verify_started,
        format!("{} reads, {} writes", log.reads.len(), log.writes.len()),
    );
    let reads = check_reads(&log);
    let stored = read_back(
        cads.store().as_ref(),
        opts,
        workload.update_fields == Fields::All,
    )?;
    let mut loaded: Vec<u64> = (0..opts.records as i64)
        .map(|k| id_hash(&key_name(k, true, 1)))
        .collect();
    loaded.sort_unstable();
    let lost = check_final(&log, &loaded, &stored);
    ctx.report(
        Phase::Verify,
        stored.len() as u64,
        None,
        verify_started,
        format!("{} stale reads, {} lost writes", reads.stale, lost.lost),
    );

    let operations: u64 = histograms.iter().map(Histogram::len).sum();
    let mut latency_us = BTreeMap::new();
    let mut failed_by_operation = BTreeMap::new();
    for op in Operation::ALL {
        let h = &histograms[op.index()];
        if workload.proportion(op) > 0.0 || !h.is_empty() {
            latency_us.insert(op.name().to_string(), LatencySummary::of(h));
            failed_by_operation.insert(op.name().to_string(), failed[op.index()]);
        }
    }
    let has_cache = cads.cache().is_some();
    let replicas = cads
        .config()
        .write_back
        .replicas
        .min(cads.cache().map_or(0, |c| c.cmis()));
    Ok(RunRecord {
        benchmark: "ycsb",
        workload: workload.name.clone(),
        policy: policy.name().to_string(),
        store: redact(ctx.store_url),
        run: ctx.run,
        elapsed_s: elapsed,
        operations,
        failed: failed.iter().sum(),
        throughput: operations as f64 / elapsed.max(1e-9),
        latency_us,
        failed_by_operation,
        errors,
        hit_ratio: (has_cache && cache_reads > 0)
            .then(|| 1.0 - cache_misses.min(cache_reads) as f64 / cache_reads as f64),
        cache_reads,
        cache_misses,
        keyspace,
        reads: reads.reads,
        stale_reads: reads.stale,
        stale_examples: reads.examples,
        lost_writes: lost.lost,
        lost_examples: lost.examples,
        store_calls: StoreCalls {
            reads: calls.reads,
            writes: calls.writes,
            transactions: calls.transactions,
            per_operation: (calls.reads + calls.writes + calls.transactions) as f64
                / operations.max(1) as f64,
        },
        cache_round_trips,
        cpu,
        scan: (workload.scan > 0.0).then_some(SCAN_NOTE),
        load_s: 0.0,
        warm_s: None,
        write_back: write_back_record,
        config: ConfigRecord {
            workload: workload.clone(),
            records: opts.records,
            threads: opts.threads,
            duration_s: opts.run_duration().map(|d| d.as_secs_f64()),
            operations: opts.operations,
            zipfian_constant: opts.zipfian_constant,
            field_count: opts.field_count,
            field_length: opts.field_length,
            insert_order: "hashed",
            workers: opts.workers,
            worker_pause_ms: cads.config().write_back.worker_pause.as_secs_f64() * 1000.0,
            write_back_replicas: replicas,
            write_back_partitions: cads.config().write_back.partitions,
            warm: opts.warm && has_cache,
            cache: if has_cache {
                opts.cache.describe()
            } else {
                "none".into()
            },
            cmi_maxmemory: opts.cmi.maxmemory.clone(),
            cmi_max_pinned_memory: opts.cmi.max_pinned_memory.clone(),
            table: opts.table.clone(),
            seed: opts.seed,
            store_timeout_s: opts.store_timeout.as_secs_f64(),
        },
    })
}

/// Every record of the table as the data store holds it.
fn read_back(
    store: &dyn DataStore,
    opts: &YcsbOptions,
    all_fields: bool,
) -> Result<HashMap<u64, Seen>> {
    let mut stored = HashMap::with_capacity(opts.records as usize);
    let mut after: Option<Value> = None;
    loop {
        let from = match &after {
            Some(id) => Bound::Excluded(id),
            None => Bound::Unbounded,
        };
        let page = store
            .scan(&opts.table, None, from, Bound::Unbounded, CHECK_PAGE)
            .context("reading the table back")?;
        let Some((last, _)) = page.last() else {
            return Ok(stored);
        };
        after = Some(Value::String(last.clone()));
        let full = page.len() == CHECK_PAGE;
        for (id, doc) in &page {
            stored.insert(
                id_hash(id),
                inspect(Some(doc), opts.field_count, opts.field_length, all_fields),
            );
        }
        if !full {
            return Ok(stored);
        }
    }
}
