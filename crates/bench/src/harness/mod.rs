//! The harness every benchmark runs in. A benchmark ([`Benchmark`]) says how to load its data,
//! warm the cache, what one thread does per operation, and how to validate what was read; the
//! harness does the rest, the same way for all:
//!
//! For every policy given, in turn (and `--repeat` times, interleaved):
//!
//! 1. **Deploy**: CMIs in the policy's lease mode (started by the caller's [`Launcher`], or the
//!    external ones checked and emptied); the data store behind a call-counting `FaultyStore`.
//! 2. **Load** ([`Phase::Load`]): the benchmark's data, straight into the data store.
//! 3. **Warm**: the data read through the cache (000 §3.3), unless `--cold`.
//! 4. **Run**: `--threads` threads, in this process or split over `--appnodes` processes
//!    ([`appnode`]), issue the benchmark's operations until the duration or the operation
//!    budget; each operation is timed and counted; pinned memory is sampled every second;
//!    write-back runs `--workers` background workers (in each AppNode).
//! 5. **Drain** (write-back): the workers stop; what they left buffered is counted, then applied.
//! 6. **Verify**: the benchmark validates what its threads read and checks the data store.
//!
//! A benchmark may run several measured runs on one load (BG's SoAR search) and check things
//! after them (BG compares the cache with the data store). Each run gives one [`Record`]: the
//! common fields and the benchmark's own part.

pub mod appnode;
mod drive;
mod log;
mod options;
mod outage;
mod progress;
mod record;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use cads::store::{CallCounts, Relay, StoreOptions};
use cads::tardis::Recovery;
use cads::{Cads, Config, Policy, Workers, WriteBackCounts};
use hdrhistogram::Histogram;
use serde::Serialize;

pub use appnode::serve_appnode;
pub use drive::{
    run_threads, Clock, Env, Limit, Nanos, NodeResult, Outcome, RecentLatencies, Step,
    ThreadContext, TICK,
};
pub use log::{LoggedWrite, ReadWriteLog, RunLog};
pub use options::{parse_duration, parse_policies, CommonOptions, Outage, REDIS_ZINDEX};
pub use outage::{OutageRecord, OutageSample};
pub use progress::{print_progress, Phase, Progress, Reporter};
pub use record::{
    by_workload_and_policy, cell, human_bytes, median, median_or_nan, ratios_to, row_head,
    Contention, Keyspace, LatencySummary, PinnedBytes, Record, RunConfig, StoreCalls, Validated,
    WriteBackRecord, CONTENDED_KEYS_KEPT,
};

use crate::cpu::{CpuRecord, CpuSample};
use crate::deploy::{
    check_one_lease_mode, check_sas, redact, relayed, store_url, Deployment, Launcher,
};
use crate::gemini::{GeminiRecord, LoadSample};
use drive::{drive, ThreadSet};
use outage::{cut_off, Cut, Happened, Timeline};

/// A benchmark: its workload and its validation. Everything else is the harness's.
pub trait Benchmark: Sync + Sized {
    /// Its name in records and progress (`ycsb`).
    const NAME: &'static str;
    /// What an operation is called in progress lines (`ops`, `actions`, `txn`).
    const UNIT: &'static str;
    /// What a policy's runs keep between phases, built by the load.
    type Loaded: Sync;
    /// One benchmark thread's state.
    type Thread;
    /// What the threads log for validation, merged over threads and AppNodes.
    type Log: RunLog;
    /// The benchmark's own part of a run record.
    type Detail: Serialize;
    /// The benchmark's own part of a record's configuration.
    type Config: Serialize;

    /// The options every benchmark has.
    fn options(&self) -> &CommonOptions;
    /// The workload's name in records (`A`, `90`, `tpcc-spec-1w`).
    fn workload(&self) -> String;
    /// The name of `policy` in records and progress: its own, unless the benchmark runs it as a
    /// baseline of its own (YCSB's CPR workload runs cache-aside as `redis-zindex`).
    fn policy_name(&self, policy: Policy) -> &'static str {
        policy.name()
    }
    /// The operation kinds: their names, as the record's `latency_us` keys them, and how often
    /// the workload issues each (a record reports the kinds issued at all).
    fn kinds(&self) -> Vec<(&'static str, f64)>;
    /// When a run ends.
    fn limit(&self) -> Limit;
    /// How to open the data store.
    fn store_options(&self) -> StoreOptions;
    /// The framework's settings.
    fn framework_config(&self) -> Config {
        Config::default()
    }
    /// The collection whose `get`s by benchmark threads count as cache misses (see
    /// [`crate::deploy::driver_misses`]); empty for none.
    fn miss_collection(&self) -> &str {
        ""
    }

    /// Loads the data into the data store (the cache starts empty).
    fn load(&self, run: &PolicyRun<'_>, dep: &Deployment) -> Result<Self::Loaded>;
    /// In AppNode `appnode` of a run: what the load built, without loading (the process that
    /// deployed loaded, and verifies). What it builds must keep the AppNodes apart where a
    /// process assumes it is alone (which inserts and which members' writes are its own).
    /// `handoff` is what [`handoff`](Self::handoff) gave in the process that deployed.
    fn attach(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        appnode: AppNode,
        handoff: Option<&serde_json::Value>,
    ) -> Result<Self::Loaded>;
    /// What the process that deployed hands its AppNodes with their jobs, from what its load
    /// built (YCSB's CPR workload: where the ranges' owner serves them).
    fn handoff(&self, _loaded: &Self::Loaded) -> Option<serde_json::Value> {
        None
    }
    /// Reads the data through the cache.
    fn warm(&self, run: &PolicyRun<'_>, dep: &Deployment, loaded: &Self::Loaded) -> Result<()>;
    /// A benchmark thread's state.
    fn thread(&self, loaded: &Self::Loaded, ctx: &ThreadContext) -> Self::Thread;
    /// One operation; what it read and wrote goes to the thread's `log`.
    fn operate(
        &self,
        loaded: &Self::Loaded,
        thread: &mut Self::Thread,
        log: &mut Self::Log,
        env: &Env<'_>,
    ) -> Step;
    /// Validates a run (after write-back's drain): its reads, the data store, the cache.
    fn verify(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        loaded: &mut Self::Loaded,
        measured: &Measured<Self::Log>,
    ) -> Result<Verified<Self::Detail>>;
    /// The benchmark's part of the configuration of a run on `threads` threads.
    fn config(&self, loaded: &Self::Loaded, threads: usize) -> Self::Config;
    /// The measured runs on one load: one run on `--threads` threads; BG's SoAR search runs
    /// more. Returns the policy's record.
    fn runs(&self, runner: &mut Runner<'_, Self>) -> Result<BenchRecord<Self>> {
        runner.run(self.options().threads)
    }
    /// After the policy's runs, before its CMIs stop.
    fn after_runs(
        &self,
        _run: &PolicyRun<'_>,
        _dep: &Deployment,
        _loaded: &Self::Loaded,
        _record: &mut BenchRecord<Self>,
    ) -> Result<()> {
        Ok(())
    }
}

/// The record type of a benchmark.
pub type BenchRecord<B> = Record<<B as Benchmark>::Detail, <B as Benchmark>::Config>;

/// A benchmark's options: checked, they make the benchmark, which the harness runs.
pub trait BenchmarkOptions {
    /// The benchmark they configure.
    type Benchmark: Benchmark;

    /// Checks the options and resolves what they name (a workload, a mix).
    fn benchmark(&self) -> Result<Self::Benchmark>;

    /// Runs the benchmark for every policy in turn (`--repeat` times, interleaved), starting
    /// embedded CMIs (and AppNodes) with `launcher`, reporting progress through `progress`;
    /// returns one record per policy and repeat, and writes `--json` after each. This is what
    /// `cads bench` calls.
    ///
    /// Errors: bad options, a data store or CMIs that cannot be reached, or a phase that fails
    /// (load, warm-up, drain, the checks' queries). Stale reads, lost writes and broken
    /// conditions are not errors: they are in the records.
    fn run(
        &self,
        launcher: &dyn Launcher,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Vec<BenchRecord<Self::Benchmark>>> {
        run(&self.benchmark()?, launcher, progress)
    }
}

/// An AppNode of a run: which of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AppNode {
    /// 0-based.
    pub index: usize,
    /// AppNodes of the run.
    pub count: usize,
}

impl AppNode {
    /// The whole run in this process.
    pub const ALONE: AppNode = AppNode { index: 0, count: 1 };

    /// This AppNode's share of `total` things split as evenly as can be: the range of their
    /// indexes.
    pub fn share(&self, total: usize) -> std::ops::Range<usize> {
        let base = total / self.count;
        let extra = total % self.count;
        let start = self.index * base + self.index.min(extra);
        start..start + base + usize::from(self.index < extra)
    }
}

/// One policy's run, as its phases see it.
#[derive(Clone)]
pub struct PolicyRun<'a> {
    /// The policy.
    pub policy: Policy,
    /// Which run of it (`--repeat`, 0-based).
    pub run: usize,
    /// Whether it is the first policy run of the benchmark.
    pub first: bool,
    /// The data store's URL.
    pub store_url: &'a str,
    /// Where its progress goes.
    pub reporter: Reporter<'a>,
}

impl PolicyRun<'_> {
    /// Reports progress of `phase` (see [`Reporter::report`]).
    pub fn report(
        &self,
        phase: Phase,
        done: u64,
        total: Option<u64>,
        started: Instant,
        note: impl Into<String>,
    ) {
        self.reporter.report(phase, done, total, started, note);
    }
}

/// What a run phase measured, over all its threads and AppNodes.
pub struct Measured<L> {
    /// Threads over all AppNodes.
    pub threads: usize,
    /// Seconds from the first thread's start to the last one's end.
    pub elapsed_s: f64,
    /// The threads' results, merged.
    pub node: NodeResult<L>,
    /// Data-store calls of every process.
    pub calls: CallCounts,
    /// Cache round trips of every process.
    pub cache_round_trips: u64,
    /// The CMIs' keyspace counters over the run.
    pub keyspace: Option<Keyspace>,
    /// The CMIs' contention over the run.
    pub contention: Option<Contention>,
    /// The SAS core's counters over the run (`--cache sas`).
    pub sas_core: Option<BTreeMap<String, u64>>,
    /// Write-back's counters over the run, every process's.
    pub write_back: WriteBackCounts,
    /// CPU use over the run.
    pub cpu: Option<CpuRecord>,
    /// Pinned memory over the run.
    pub pinned: PinnedBytes,
    /// Write-back's applied share over the run.
    pub applied_share_samples: Vec<(f64, f64)>,
    /// What the run did about a data store that went away (`--outage`, or TARDIS saw it fail).
    pub outage: Option<OutageRecord>,
    /// The CMIs' failure and recovery under Gemini (`--fail-cmis`).
    pub gemini: Option<GeminiRecord>,
}

/// What a benchmark's validation of a run found.
pub struct Verified<D> {
    /// The benchmark's part of the record.
    pub detail: D,
    /// Reads (or cached entries) found stale.
    pub stale_reads: u64,
    /// What data-store calls are counted per (`StoreCalls::per_operation`): usually the
    /// completed operations.
    pub operations: u64,
}

/// The kinds a record reports: those the workload issues, or that completed anyway.
pub fn reported_kinds<B: Benchmark>(
    bench: &B,
    node: &NodeResult<B::Log>,
) -> Vec<(usize, &'static str)> {
    bench
        .kinds()
        .into_iter()
        .enumerate()
        .filter(|&(i, (_, weight))| weight > 0.0 || !node.latencies[i].is_empty())
        .map(|(i, (name, _))| (i, name))
        .collect()
}

/// Runs `bench` for every policy of its options in turn (`--repeat` times, interleaved),
/// reporting progress through `progress`; returns one record per policy and repeat. Writes
/// `--json` after every record, so an interrupted benchmark keeps what it measured.
///
/// Errors: a data store or CMIs that cannot be reached, or a phase that fails (load, warm-up,
/// drain, the checks' queries). Stale reads, lost writes and broken conditions are not errors:
/// they are in the records.
pub fn run<B: Benchmark>(
    bench: &B,
    launcher: &dyn Launcher,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<BenchRecord<B>>> {
    let opts = bench.options();
    let config = opts.with_tardis(bench.framework_config());
    check_one_lease_mode(&opts.cache, &opts.policies, &config)?;
    check_sas(&opts.cache, &opts.policies, &config)?;
    let (url, _scratch) = store_url(&opts.store, B::NAME)?;
    // `--outage` on a networked data store: every connection of the benchmark (AppNodes too)
    // goes through a relay that the run phase cuts.
    let (relay, url) = match opts.outage {
        Some(_) if opts.networked_store() => {
            let (relay, through) = relayed(&url)?;
            (Some(relay), through)
        }
        _ => (None, url),
    };
    let store = cads::store::open(&url, &bench.store_options())
        .with_context(|| format!("cannot open the data store {}", redact(&url)))?;
    let mut records = Vec::new();
    for run in 0..opts.repeat {
        for &policy in &opts.policies {
            let policy_run = PolicyRun {
                policy,
                run,
                first: records.is_empty(),
                store_url: &url,
                reporter: Reporter {
                    benchmark: B::NAME,
                    workload: bench.workload(),
                    policy,
                    policy_name: bench.policy_name(policy),
                    run,
                    threads: 0,
                    progress,
                },
            };
            let dep = Deployment::start(
                policy,
                store.clone(),
                bench.miss_collection(),
                &opts.cache,
                &opts.cmi,
                launcher,
                config.clone(),
                opts.gemini.as_ref(),
            )?;
            records.push(run_policy(
                bench,
                &policy_run,
                &dep,
                launcher,
                relay.as_ref(),
            )?);
            dep.stop()?;
            if let Some(path) = &opts.json {
                record::write_json(path, &records)?;
            }
        }
    }
    Ok(records)
}

/// One policy on its deployment: load, warm, the runs, and what comes after them.
fn run_policy<B: Benchmark>(
    bench: &B,
    run: &PolicyRun<'_>,
    dep: &Deployment,
    launcher: &dyn Launcher,
    relay: Option<&Relay>,
) -> Result<BenchRecord<B>> {
    let started = Instant::now();
    let mut loaded = bench.load(run, dep)?;
    let load_s = started.elapsed().as_secs_f64();
    let warm_s = if bench.options().warm && dep.cads.has_cache() {
        let started = Instant::now();
        bench.warm(run, dep, &loaded)?;
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };
    let mut runner = Runner {
        bench,
        run,
        dep,
        launcher,
        relay,
        loaded: &mut loaded,
        runs: 0,
    };
    let mut record = bench.runs(&mut runner)?;
    bench.after_runs(run, dep, &loaded, &mut record)?;
    record.load_s = load_s;
    record.warm_s = warm_s;
    Ok(record)
}

/// Runs measured runs on one policy's loaded deployment: each a run phase, write-back's drain
/// and the benchmark's validation.
pub struct Runner<'a, B: Benchmark> {
    bench: &'a B,
    run: &'a PolicyRun<'a>,
    dep: &'a Deployment,
    launcher: &'a dyn Launcher,
    /// The relay `--outage` cuts, for a networked data store.
    relay: Option<&'a Relay>,
    loaded: &'a mut B::Loaded,
    /// Runs so far on this load.
    runs: u64,
}

impl<B: Benchmark> Runner<'_, B> {
    /// One measured run on `threads` threads: the run phase, the drain and the validation;
    /// returns its record (without the load's and warm-up's seconds, which the harness adds).
    pub fn run(&mut self, threads: usize) -> Result<BenchRecord<B>> {
        let bench = self.bench;
        let opts = bench.options();
        let run = PolicyRun {
            reporter: self.run.reporter.with_threads(threads),
            ..self.run.clone()
        };
        let mut measured = if opts.appnodes > 1 {
            appnode::measure(
                bench,
                &run,
                self.dep,
                threads,
                self.runs,
                self.launcher,
                self.cut(),
                bench.handoff(self.loaded),
            )?
        } else {
            self.measure_here(&run, threads)?
        };
        let write_back = if run.policy == Policy::WriteBack {
            Some(self.drain(&run, &mut measured)?)
        } else {
            None
        };
        let verified = bench.verify(&run, self.dep, self.loaded, &measured)?;
        self.runs += 1;
        Ok(self.record(&run, measured, write_back, verified))
    }

    /// How `--outage` cuts the data store off.
    fn cut(&self) -> Cut<'_> {
        match self.relay {
            Some(relay) => Cut::Relay(relay),
            None => Cut::Faults(&self.dep.faults),
        }
    }

    /// The run phase in this process.
    fn measure_here(&self, run: &PolicyRun<'_>, threads: usize) -> Result<Measured<B::Log>> {
        let (bench, dep) = (self.bench, self.dep);
        let opts = bench.options();
        let cads = &dep.cads;
        let write_back = run.policy == Policy::WriteBack;
        dep.faults.reset_counts();
        let before = Counters::take(dep);
        let workers = write_back.then(|| Workers::start(cads.clone(), opts.workers));
        let recovery = match cads.mode() {
            Some(_) => {
                Some(Recovery::start(cads.clone()).context("starting TARDIS's recovery threads")?)
            }
            None => None,
        };
        let limit = bench.limit();
        let recent = opts.fails_cmis().then(|| RecentLatencies::new(threads));
        let env = Env {
            cads,
            clock: Clock::start(),
            recent: recent.as_ref(),
        };
        let set = ThreadSet {
            threads: 0..threads,
            total: threads,
            appnode: 0,
            appnodes: 1,
            run_on_load: self.runs,
        };
        let mut sampler = Sampler::new::<B>(run, cads, limit);
        sampler.load = recent.is_some().then(Vec::new);
        let tracked = opts.outage.is_some() || recovery.is_some();
        let started = Instant::now();
        sampler.timeline = tracked.then(|| Timeline::new(started, true));
        let stop = AtomicBool::new(false);
        let cut = self.cut();
        let (node, happened, failed_cmis) = std::thread::scope(|scope| {
            let cutter = opts.outage.map(|o| {
                let (cut, stop) = (&cut, &stop);
                scope.spawn(move || cut_off(cut, o, started, env.clock, stop))
            });
            let failer = scope.spawn(|| dep.fail_cmis(started, &stop));
            let node = drive(bench, self.loaded, &env, &set, limit, |done| {
                let wb = write_back.then(|| cads.write_back_stats().snapshot().since(&before.wb));
                sampler.tick(done, wb, env.recent.map(RecentLatencies::take));
            });
            stop.store(true, Ordering::Release);
            let happened = cutter.map_or(Happened::default(), |c| {
                c.join().expect("the outage thread does not panic")
            });
            let failed_cmis = failer
                .join()
                .expect("the CMI failure thread does not panic");
            (node, happened, failed_cmis)
        });
        let timeline = sampler.timeline.take();
        let load = sampler.load.take();
        let after = Counters::take(dep);
        let elapsed_s = node.finished.saturating_sub(node.started) as f64 / 1e9;
        let failed_operations = node.failed.iter().sum();
        let done = node.completed();
        let mut measured =
            sampler.finish(threads, elapsed_s, node, before.until(&after, elapsed_s));
        measured.calls = dep.faults.counts();
        measured.gemini = failed_cmis
            .transpose()
            .context("failing CMIs (--fail-cmis)")?
            .map(|g| g.with_load(load));
        if let Some(workers) = workers {
            measured.pinned.close(cads.pinned_bytes());
            workers.stop();
        }
        let tardis = cads.tardis_counts().zip(before.tardis);
        let failed = tardis.is_some_and(|(now, then)| now.failures > then.failures);
        if let Some(timeline) = timeline.filter(|_| opts.outage.is_some() || failed) {
            let mut record = OutageRecord::of_run(opts, failed_operations);
            if recovery.is_some() {
                let left = timeline.recover(
                    cads,
                    env.clock,
                    happened,
                    done,
                    opts.drain_timeout,
                    None,
                    &mut record,
                );
                drain_left(cads, left, opts, &mut record)?;
            } else {
                timeline.finish(happened, &mut record);
            }
            if let Some(then) = before.tardis {
                let now = cads.tardis_counts().expect("TARDIS is on");
                record.count(&now.since(&then));
            }
            measured.outage = Some(record);
        }
        drop(recovery);
        Ok(measured)
    }

    /// Write-back after a run: counts what the stopped workers left buffered, applies all of it
    /// (new workers and this thread), and describes the run's buffering.
    fn drain(
        &self,
        run: &PolicyRun<'_>,
        measured: &mut Measured<B::Log>,
    ) -> Result<WriteBackRecord> {
        let cads = &self.dep.cads;
        let opts = self.bench.options();
        let counts = measured.write_back;
        let pending_documents = cads::writeback::pending(cads)
            .context("listing the buffered writes left after the run")?
            .into_iter()
            .collect::<HashSet<_>>()
            .len() as u64;
        let pending_sessions = counts
            .buffered_sessions
            .saturating_sub(counts.applied_sessions);
        let pending = pending_documents + pending_sessions;
        let started = Instant::now();
        let note = format!(
            "{pending_documents} documents and {pending_sessions} sessions with buffered writes"
        );
        run.report(Phase::Drain, 0, Some(pending), started, note);
        let drainer = Workers::start(cads.clone(), opts.workers);
        let drained = drainer
            .drain(opts.drain_timeout)
            .context("draining write-back's buffered writes");
        let workers = drainer.count();
        drainer.stop();
        drained?;
        run.report(Phase::Drain, pending, Some(pending), started, "done");
        let written = measured.node.log.written_documents();
        Ok(WriteBackRecord {
            workers,
            buffered_ops: counts.buffered,
            applied_ops: counts.applied_ops,
            applied_writes: counts.applied_writes,
            written_documents: written,
            pending_documents,
            documents_applied_share: 1.0 - pending_documents as f64 / written.max(1) as f64,
            conversions: counts.conversions,
            buffered_sessions: counts.buffered_sessions,
            applied_sessions: counts.applied_sessions,
            pending_sessions,
            applied_share: counts.applied_share(),
            fallbacks: counts.fallbacks,
            pinned_bytes: std::mem::take(&mut measured.pinned),
            applied_share_samples: std::mem::take(&mut measured.applied_share_samples),
            drain_s: started.elapsed().as_secs_f64(),
        })
    }

    fn record(
        &self,
        run: &PolicyRun<'_>,
        measured: Measured<B::Log>,
        write_back: Option<WriteBackRecord>,
        verified: Verified<B::Detail>,
    ) -> BenchRecord<B> {
        let (bench, cads) = (self.bench, &self.dep.cads);
        let opts = bench.options();
        let node = &measured.node;
        let latency_us: BTreeMap<String, LatencySummary> = reported_kinds(bench, node)
            .into_iter()
            .map(|(i, name)| (name.to_string(), LatencySummary::of(&node.latencies[i])))
            .collect();
        let completed = node.completed();
        let has_cache = cads.has_cache();
        let calls = measured.calls;
        Record {
            benchmark: B::NAME,
            workload: bench.workload(),
            policy: bench.policy_name(run.policy).to_string(),
            store: redact(run.store_url),
            run: run.run,
            threads: measured.threads,
            appnodes: opts.appnodes,
            elapsed_s: measured.elapsed_s,
            throughput: completed as f64 / measured.elapsed_s.max(1e-9),
            latency_us,
            failed: node.failed.iter().sum(),
            errors: node.errors.clone(),
            hit_ratio: (has_cache && node.cache_reads > 0).then(|| {
                1.0 - node.cache_misses.min(node.cache_reads) as f64 / node.cache_reads as f64
            }),
            stale_reads: verified.stale_reads,
            keyspace: measured.keyspace,
            contention: measured.contention.clone(),
            sas_core: measured.sas_core.clone(),
            store_calls: StoreCalls {
                reads: calls.reads,
                writes: calls.writes,
                transactions: calls.transactions,
                per_operation: (calls.reads + calls.writes + calls.transactions) as f64
                    / verified.operations.max(1) as f64,
            },
            cache_round_trips: measured.cache_round_trips,
            cpu: measured.cpu,
            load_s: 0.0,
            warm_s: None,
            write_back,
            outage: measured.outage,
            gemini: measured.gemini,
            detail: verified.detail,
            config: RunConfig {
                threads: measured.threads,
                appnodes: opts.appnodes,
                workers: opts.workers,
                write_back_replicas: cads
                    .config()
                    .write_back
                    .replicas
                    .min(cads.cache().map_or(0, |c| c.cmis())),
                write_back_partitions: cads.config().write_back.partitions,
                write_back_buffering: cads.config().write_back.buffering.name(),
                worker_pause_ms: cads.config().write_back.worker_pause.as_secs_f64() * 1000.0,
                warm: opts.warm && has_cache,
                cache: if has_cache {
                    opts.cache.describe()
                } else {
                    "none".into()
                },
                cmi_maxmemory: opts.cmi.maxmemory.clone(),
                cmi_max_pinned_memory: opts.cmi.max_pinned_memory.clone(),
                cmi_transport: match cads.config().cache_unix_dir {
                    Some(_) => "unix",
                    None => "tcp",
                },
                seed: opts.seed,
                detail: bench.config(self.loaded, measured.threads),
            },
        }
    }
}

/// TARDIS, after a recovery that did not end: applies what is left (write-back's drain, over the
/// same buffered writes), so that validation sees every acknowledged write in the data store.
fn drain_left(
    cads: &Cads,
    left: u64,
    opts: &CommonOptions,
    record: &mut OutageRecord,
) -> Result<()> {
    if left > 0 {
        record.left_after_run = left;
        cads::writeback::drain(cads, opts.drain_timeout)
            .context("applying the buffered writes TARDIS's recovery left")?;
    }
    Ok(())
}

/// The counters a run phase is measured by, read before and after it in the process that
/// deployed (its own cache round trips, the CMIs' keyspace counters, write-back's counters, CPU).
/// Data-store calls are counted from a reset instead.
struct Counters {
    round_trips: u64,
    keyspace: Option<(u64, u64)>,
    contention: Option<Contention>,
    sas_core: Option<Vec<(&'static str, u64)>>,
    wb: WriteBackCounts,
    cpu: Option<CpuSample>,
    tardis: Option<cads::TardisCounts>,
}

/// What changed between two [`Counters`].
struct CountersDelta {
    round_trips: u64,
    keyspace: Option<Keyspace>,
    contention: Option<Contention>,
    sas_core: Option<BTreeMap<String, u64>>,
    wb: WriteBackCounts,
    cpu: Option<CpuRecord>,
}

impl Counters {
    fn take(dep: &Deployment) -> Counters {
        Counters {
            round_trips: dep.cache_round_trips(),
            keyspace: dep.keyspace(),
            contention: dep.contention(),
            sas_core: dep.sas_core_stats(),
            wb: dep.cads.write_back_stats().snapshot(),
            cpu: CpuSample::now(),
            tardis: dep.cads.tardis_counts(),
        }
    }

    fn until(&self, later: &Counters, wall_s: f64) -> CountersDelta {
        CountersDelta {
            round_trips: later.round_trips - self.round_trips,
            // A CMI restarted during the run counts from zero again (see `Contention::until`).
            keyspace: self.keyspace.zip(later.keyspace).map(|(a, b)| Keyspace {
                hits: b.0.saturating_sub(a.0),
                misses: b.1.saturating_sub(a.1),
            }),
            contention: self
                .contention
                .as_ref()
                .zip(later.contention.as_ref())
                .map(|(a, b)| a.until(b)),
            sas_core: self
                .sas_core
                .as_ref()
                .zip(later.sas_core.as_ref())
                .map(|(a, b)| {
                    a.iter()
                        .zip(b)
                        .map(|((name, a), (_, b))| (name.to_string(), b.saturating_sub(*a)))
                        .collect()
                }),
            wb: later.wb.since(&self.wb),
            cpu: self.cpu.zip(later.cpu).map(|(a, b)| a.until(&b, wall_s)),
        }
    }
}

/// The calling thread's ticks during a run phase: progress lines, and under write-back the
/// pinned-memory and applied-share samples.
struct Sampler<'a> {
    run: &'a PolicyRun<'a>,
    cads: &'a Cads,
    unit: &'static str,
    limit: Limit,
    started: Instant,
    last: (u64, Instant),
    pinned: PinnedBytes,
    applied_share: Vec<(f64, f64)>,
    /// Per second, for a run with an outage or TARDIS.
    timeline: Option<Timeline>,
    /// Per second, for a run that fails CMIs.
    load: Option<Vec<LoadSample>>,
}

impl<'a> Sampler<'a> {
    fn new<B: Benchmark>(run: &'a PolicyRun<'a>, cads: &'a Cads, limit: Limit) -> Sampler<'a> {
        let now = Instant::now();
        Sampler {
            run,
            cads,
            unit: B::UNIT,
            limit,
            started: now,
            last: (0, now),
            pinned: PinnedBytes::default(),
            applied_share: Vec::new(),
            timeline: None,
            load: None,
        }
    }

    /// A tick: `done` operations so far, (write-back) its counters since the run began, and the
    /// latencies of the operations since the last tick (if they are kept).
    fn tick(
        &mut self,
        done: u64,
        write_back: Option<WriteBackCounts>,
        recent: Option<Histogram<u64>>,
    ) {
        let now = Instant::now();
        let rate = done.saturating_sub(self.last.0) as f64 / (now - self.last.1).as_secs_f64();
        self.last = (done, now);
        if let (Some(load), Some(recent)) = (&mut self.load, recent) {
            let t_s = (now - self.started).as_secs_f64();
            load.push(LoadSample::of(t_s, rate, &recent));
        }
        let mut note = format!("{rate:.0} {}/s", self.unit);
        if let Some(timeline) = &mut self.timeline {
            timeline.sample(self.cads, done);
            if let Some(sample) = timeline.last() {
                if let Some(mode) = sample.mode {
                    note.push_str(&format!(", {mode} mode"));
                }
                if sample.dirty > 0 {
                    note.push_str(&format!(", {} dirty documents", sample.dirty));
                }
            }
        }
        if let Some(wb) = write_back {
            let bytes = self.cads.pinned_bytes();
            let seconds = self.started.elapsed().as_secs_f64();
            self.pinned.samples.push((seconds, bytes));
            self.applied_share.push((seconds, wb.applied_share()));
            note.push_str(&format!(
                ", pinned {}, buffered {}, applied {}",
                human_bytes(bytes),
                wb.buffered + wb.buffered_sessions,
                wb.applied_ops + wb.applied_sessions
            ));
        }
        self.run.reporter.report_run(
            done,
            self.limit.operations,
            self.started,
            self.limit.duration,
            note,
        );
    }

    fn finish<L>(
        self,
        threads: usize,
        elapsed_s: f64,
        node: NodeResult<L>,
        counters: CountersDelta,
    ) -> Measured<L> {
        Measured {
            threads,
            elapsed_s,
            node,
            calls: CallCounts::default(),
            cache_round_trips: counters.round_trips,
            keyspace: counters.keyspace,
            contention: counters.contention,
            sas_core: counters.sas_core,
            write_back: counters.wb,
            cpu: counters.cpu,
            pinned: self.pinned,
            applied_share_samples: self.applied_share,
            outage: None,
            gemini: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appnodes_share_things_evenly() {
        let shares: Vec<_> = (0..3)
            .map(|index| AppNode { index, count: 3 }.share(8))
            .collect();
        assert_eq!(shares, [0..3, 3..6, 6..8]);
        assert_eq!(AppNode::ALONE.share(5), 0..5);
    }
}
