//! One policy's deployment with the graph loaded, and what runs on it: the warm-up, runs (a run,
//! or each probe of a SoAR search: the load generator, write-back's drain, the validation and the
//! check of the data store's counts), and the final comparison of the cache with the data store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use cads::{Cads, Config, Policy, Workers};
use cads_apps::bg::{Action, ActionKind, Counts, GraphParams, Layout};
use hdrhistogram::Histogram;

use super::options::{BgOptions, ConfigRecord};
use super::record::{BgRecord, CacheCheck};
use super::validate::{check_final, check_reads, Log, Nanos, UNKNOWN_END};
use super::workload::{MemberChooser, Mix, Model, Outcome};
use super::{Phase, Progress};
use crate::cpu::CpuSample;
use crate::deploy::{driver_store_calls, mark_driver_thread, redact, Deployment};
use crate::generator::{Discrete, Rng};
use crate::ycsb::{
    human_bytes, Keyspace, LatencySummary, PinnedBytes, StoreCalls, WriteBackRecord,
};

/// How often a run reports progress and samples pinned memory.
const TICK: Duration = Duration::from_secs(1);
/// How many errors a record describes.
const ERRORS_SHOWN: usize = 10;
/// How many mismatching cache keys a record describes.
const EXAMPLES: usize = 10;

/// What stays fixed for one policy's runs.
pub(crate) struct RunContext<'a> {
    pub opts: &'a BgOptions,
    pub mix: &'a Mix,
    pub graph: GraphParams,
    pub policy: Policy,
    pub store_url: &'a str,
    pub store_pool: usize,
    pub run: usize,
    pub progress: &'a dyn Fn(Progress),
}

impl RunContext<'_> {
    fn report(&self, threads: usize, phase: Phase, done: u64, started: Instant, note: String) {
        (self.progress)(Progress {
            workload: self.mix.name.clone(),
            policy: self.policy,
            run: self.run,
            threads,
            phase,
            done,
            elapsed: started.elapsed(),
            note,
        });
    }
}

/// A policy's deployment, its loaded graph and BG's model of it: what successive runs share.
pub(crate) struct Bench<'a> {
    ctx: &'a RunContext<'a>,
    world: World<'a>,
    /// Every member's counts in the data store when the next run begins.
    base: Vec<Counts>,
    /// Runs so far (each draws from its own seeds).
    runs: u64,
}

/// What the benchmark threads share: the bench without its progress callback.
struct World<'a> {
    opts: &'a BgOptions,
    dep: &'a Deployment,
    layout: Box<dyn Layout>,
    /// The framework without a cache over the same data store: the final checks read through it,
    /// and `--broken` writes with it.
    store_only: Cads,
    model: Model,
    chooser: MemberChooser,
    kinds: Discrete<ActionKind>,
}

/// One benchmark thread's results.
struct ThreadResult {
    /// Latency in µs of each completed action, by kind.
    latencies: Vec<(ActionKind, u64)>,
    failed: [u64; 7],
    skipped: u64,
    errors: Vec<String>,
    log: Log,
    cache_reads: u64,
    cache_misses: u64,
    finished: Instant,
}

impl World<'_> {
    /// One thread issuing actions until `stop` or the deadline.
    fn drive(
        &self,
        seed: u64,
        epoch: Instant,
        deadline: Instant,
        stop: &AtomicBool,
        done: &AtomicU64,
    ) -> ThreadResult {
        mark_driver_thread();
        let mut rng = Rng::new(seed);
        let writer = if self.opts.broken {
            &self.store_only
        } else {
            &*self.dep.cads
        };
        let now = || epoch.elapsed().as_nanos() as Nanos;
        let mut out = ThreadResult {
            latencies: Vec::new(),
            failed: [0; 7],
            skipped: 0,
            errors: Vec::new(),
            log: Log::default(),
            cache_reads: 0,
            cache_misses: 0,
            finished: Instant::now(),
        };
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let kind = self.kinds.next(&mut rng);
            let Some(action) = self.model.pick(kind, &self.chooser, &mut rng) else {
                out.skipped += 1;
                continue;
            };
            let write = kind.is_write();
            let calls = driver_store_calls();
            let started = Instant::now();
            let start = now();
            let result = self
                .layout
                .perform(if write { writer } else { &self.dep.cads }, &action);
            let end = now();
            let micros = started.elapsed().as_micros().max(1) as u64;
            match result {
                Ok(_) if write => {
                    out.latencies.push((kind, micros));
                    out.log.write(&action, start, end);
                    self.model.finish(&action, Outcome::Committed);
                }
                Ok(reads) => {
                    out.latencies.push((kind, micros));
                    out.log.reads(&reads, start, end);
                    out.cache_reads += 1;
                    out.cache_misses += u64::from(driver_store_calls() > calls);
                }
                Err(e) => {
                    out.failed[kind.index()] += 1;
                    if out.errors.len() < ERRORS_SHOWN {
                        out.errors.push(format!("{}: {e}", kind.name()));
                    }
                    if write {
                        // An aborted session wrote nothing anywhere; after any other failure the
                        // write may or may not have reached the data store.
                        let outcome = if matches!(e, cads::Error::Aborted) {
                            Outcome::RolledBack
                        } else {
                            out.log.write(&action, start, UNKNOWN_END);
                            Outcome::Unknown
                        };
                        self.model.finish(&action, outcome);
                    }
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
        out.finished = Instant::now();
        out
    }
}

/// Fills the cache with every member's read keys on `threads` threads: first each member's own
/// profile (View Profile of oneself), then its lists (List Friends, View Friend Requests), whose
/// profiles are then cached already. Each thread takes a block of members, so that in the first
/// pass no two threads miss on the same key and wait for each other's lease.
pub(crate) fn warm_cache(
    layout: &dyn Layout,
    cads: &Cads,
    members: u32,
    threads: u32,
) -> Result<()> {
    let block = members.div_ceil(threads.max(1));
    let passes: [&(dyn Fn(u32) -> Vec<Action> + Sync); 2] = [
        &|member| {
            vec![Action::ViewProfile {
                requester: member,
                owner: member,
            }]
        },
        &|member| {
            vec![
                Action::ListFriends { member },
                Action::ViewFriendRequests { member },
            ]
        },
    ];
    for actions in passes {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..members)
                .step_by(block.max(1) as usize)
                .map(|first| {
                    scope.spawn(move || -> Result<()> {
                        for member in first..(first + block).min(members) {
                            for action in actions(member) {
                                layout
                                    .perform(cads, &action)
                                    .with_context(|| format!("warming the cache: {action:?}"))?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().map_err(|_| anyhow!("a warm-up thread panicked"))?)
        })?;
    }
    Ok(())
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl<'a> Bench<'a> {
    /// Loads the graph into the data store (the cache starts empty: fresh embedded CMIs, or
    /// external ones emptied by the deployment); returns the bench and the load's seconds.
    pub(crate) fn load(
        ctx: &'a RunContext<'a>,
        dep: &'a Deployment,
        layout: Box<dyn Layout>,
    ) -> Result<(Bench<'a>, f64)> {
        let started = Instant::now();
        ctx.report(0, Phase::Load, 0, started, layout.describe());
        layout
            .load(&dep.cads, &ctx.graph)
            .context("loading the social graph")?;
        let load_s = started.elapsed().as_secs_f64();
        ctx.report(
            0,
            Phase::Load,
            u64::from(ctx.graph.members),
            started,
            "done".into(),
        );
        let store_only = Cads::new(
            dep.cads.store().clone(),
            None,
            Policy::DataStoreOnly,
            Config::default(),
        );
        let base = layout.stored_counts(store_only.store().as_ref(), &ctx.graph)?;
        let bench = Bench {
            ctx,
            world: World {
                opts: ctx.opts,
                dep,
                layout,
                store_only,
                model: Model::new(&ctx.graph),
                chooser: MemberChooser::new(ctx.opts.popularity, ctx.graph.members),
                kinds: ctx.mix.chooser(),
            },
            base,
            runs: 0,
        };
        Ok((bench, load_s))
    }

    /// Reads every member's profile, friends and invitations through the cache, so that runs
    /// start warm (000 §3.3); returns its seconds.
    pub(crate) fn warm(&self) -> Result<f64> {
        let started = Instant::now();
        let members = self.ctx.graph.members;
        self.ctx.report(0, Phase::Warm, 0, started, String::new());
        let threads = self.ctx.opts.threads.clamp(1, 8) as u32;
        warm_cache(&*self.world.layout, &self.world.dep.cads, members, threads)?;
        let warm_s = started.elapsed().as_secs_f64();
        self.ctx
            .report(0, Phase::Warm, u64::from(members), started, "done".into());
        Ok(warm_s)
    }

    /// A run on `threads` threads for the options' duration: the load generator, write-back's
    /// drain, the validation of every read and the check of the data store's counts, which
    /// become the next run's starting counts.
    pub(crate) fn run(&mut self, threads: usize) -> Result<BgRecord> {
        let ctx = self.ctx;
        let opts = ctx.opts;
        let dep = self.world.dep;
        let cads = &dep.cads;
        let write_back = ctx.policy == Policy::WriteBack;

        dep.faults.reset_counts();
        let trips_before = dep.cache_round_trips();
        let keyspace_before = dep.keyspace();
        let wb_before = cads.write_back_stats().snapshot();
        let cpu_before = CpuSample::now();
        let workers = write_back.then(|| Workers::start(cads.clone(), opts.workers));

        let started = Instant::now();
        let deadline = started + opts.duration;
        let stop = AtomicBool::new(false);
        let done = AtomicU64::new(0);
        let mut pinned = PinnedBytes::default();
        let mut applied_share = Vec::new();
        let world = &self.world;
        let results: Vec<ThreadResult> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (stop, done) = (&stop, &done);
                    let seed = opts.seed
                        ^ self.runs.wrapping_mul(0xD134_2543_DE82_EF95)
                        ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    scope.spawn(move || world.drive(seed, started, deadline, stop, done))
                })
                .collect();
            let (mut last_done, mut last_tick) = (0, started);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                std::thread::sleep(TICK.min(deadline - now));
                let (count, now) = (done.load(Ordering::Relaxed), Instant::now());
                let rate = (count - last_done) as f64 / (now - last_tick).as_secs_f64();
                (last_done, last_tick) = (count, now);
                let mut note = format!("{rate:.0} actions/s");
                if write_back {
                    let bytes = cads.pinned_bytes();
                    let seconds = started.elapsed().as_secs_f64();
                    pinned.samples.push((seconds, bytes));
                    let wb = cads.write_back_stats().snapshot().since(&wb_before);
                    applied_share.push((seconds, wb.applied_share()));
                    note.push_str(&format!(", pinned {}", human_bytes(bytes)));
                }
                ctx.report(threads, Phase::Run, count, started, note);
            }
            stop.store(true, Ordering::Relaxed);
            handles
                .into_iter()
                .map(|h| h.join().expect("a benchmark thread panicked"))
                .collect()
        });
        let finished = results
            .iter()
            .map(|r| r.finished)
            .max()
            .unwrap_or_else(Instant::now);
        let elapsed = finished.duration_since(started).as_secs_f64();

        // Counters at the end of the run, before the drain.
        let calls = dep.faults.counts();
        let cache_round_trips = dep.cache_round_trips() - trips_before;
        let keyspace = keyspace_before.zip(dep.keyspace()).map(|(a, b)| Keyspace {
            hits: b.0 - a.0,
            misses: b.1 - a.1,
        });
        let wb_end = cads.write_back_stats().snapshot();
        let cpu = cpu_before
            .zip(CpuSample::now())
            .map(|(a, b)| a.until(&b, elapsed));

        let mut log = Log::default();
        let mut histograms: Vec<Histogram<u64>> = (0..7).map(|_| histogram()).collect();
        let mut all = histogram();
        let mut failed = [0u64; 7];
        let (mut skipped, mut cache_reads, mut cache_misses) = (0, 0, 0);
        let mut errors = Vec::new();
        for r in results {
            for (kind, micros) in r.latencies {
                histograms[kind.index()]
                    .record(micros)
                    .expect("within the histogram's bounds");
                all.record(micros).expect("within the histogram's bounds");
            }
            for (total, f) in failed.iter_mut().zip(r.failed) {
                *total += f;
            }
            skipped += r.skipped;
            cache_reads += r.cache_reads;
            cache_misses += r.cache_misses;
            errors.extend(r.errors);
            log.merge(r.log);
        }
        errors.truncate(ERRORS_SHOWN);

        let write_back_record = match workers {
            Some(workers) => {
                pinned.end = cads.pinned_bytes();
                workers.stop();
                let mut record = self.drain(threads, &log, wb_before, wb_end, pinned)?;
                record.applied_share_samples = applied_share;
                Some(record)
            }
            None => None,
        };

        let verify_started = Instant::now();
        ctx.report(
            threads,
            Phase::Verify,
            0,
            verify_started,
            format!(
                "{} count reads, {} count changes",
                log.reads.len(),
                log.writes.len()
            ),
        );
        let reads = check_reads(&log, &self.base);
        let stored = self
            .world
            .layout
            .stored_counts(self.world.store_only.store().as_ref(), &ctx.graph)?;
        let lost = check_final(&log, &self.base, &stored);
        self.base = stored;
        self.runs += 1;
        ctx.report(
            threads,
            Phase::Verify,
            reads.reads,
            verify_started,
            format!(
                "{} stale reads, {} members with lost writes",
                reads.stale, lost.wrong
            ),
        );

        let actions = all.len();
        let failures: u64 = failed.iter().sum();
        let satisfied = all.count_between(0, opts.sla.latency.as_micros() as u64) as f64
            / (actions + failures).max(1) as f64;
        let stale_share = reads.stale as f64 / reads.reads.max(1) as f64;
        let mut latency_us = BTreeMap::new();
        let mut failed_by_action = BTreeMap::new();
        for kind in ActionKind::ALL {
            if ctx.mix.percent[kind.index()] > 0.0 {
                let name = kind.abbreviation().to_string();
                latency_us.insert(name.clone(), LatencySummary::of(&histograms[kind.index()]));
                failed_by_action.insert(name, failed[kind.index()]);
            }
        }
        let has_cache = cads.cache().is_some();
        Ok(BgRecord {
            benchmark: "bg",
            workload: ctx.mix.name.clone(),
            policy: ctx.policy.name().to_string(),
            store: redact(ctx.store_url),
            layout: opts.layout.name().to_string(),
            run: ctx.run,
            threads,
            elapsed_s: elapsed,
            actions,
            failed: failures,
            skipped,
            throughput: actions as f64 / elapsed.max(1e-9),
            latency_us,
            latency_all_us: LatencySummary::of(&all),
            failed_by_action,
            errors,
            satisfied,
            stale_share,
            meets_sla: opts.sla.met_by(satisfied, stale_share),
            hit_ratio: (has_cache && cache_reads > 0)
                .then(|| 1.0 - cache_misses as f64 / cache_reads as f64),
            cache_reads,
            cache_misses,
            keyspace,
            reads: reads.reads,
            stale_reads: reads.stale,
            stale_examples: reads.examples,
            lost_writes: lost.wrong,
            lost_examples: lost.examples,
            frozen_members: self.world.model.frozen(),
            cache_check: None,
            store_calls: StoreCalls {
                reads: calls.reads,
                writes: calls.writes,
                transactions: calls.transactions,
                per_operation: (calls.reads + calls.writes + calls.transactions) as f64
                    / actions.max(1) as f64,
            },
            cache_round_trips,
            cpu,
            load_s: 0.0,
            warm_s: None,
            write_back: write_back_record,
            soar: None,
            config: self.config_record(threads),
        })
    }

    /// Write-back after a run: counts what the stopped workers left buffered, applies all of it
    /// (new workers and this thread), and describes the run's buffering.
    fn drain(
        &self,
        threads: usize,
        log: &Log,
        before: cads::WriteBackCounts,
        end: cads::WriteBackCounts,
        mut pinned: PinnedBytes,
    ) -> Result<WriteBackRecord> {
        let cads = &self.world.dep.cads;
        let opts = self.ctx.opts;
        let left: HashSet<_> = cads::writeback::pending(cads)
            .context("listing the buffered writes left after the run")?
            .into_iter()
            .collect();
        let started = Instant::now();
        let note = format!("{} members with buffered writes", left.len());
        self.ctx.report(threads, Phase::Drain, 0, started, note);
        let drainer = Workers::start(cads.clone(), opts.workers);
        drainer
            .drain(opts.drain_timeout)
            .context("draining write-back's buffered writes")?;
        drainer.stop();
        let drain_s = started.elapsed().as_secs_f64();
        self.ctx.report(
            threads,
            Phase::Drain,
            left.len() as u64,
            started,
            "done".into(),
        );

        let written: HashSet<u32> = log.writes.iter().map(|w| w.member).collect();
        let run = end.since(&before);
        let samples: Vec<u64> = pinned.samples.iter().map(|s| s.1).collect();
        pinned.max = samples.iter().copied().max().unwrap_or(0);
        pinned.mean = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64;
        Ok(WriteBackRecord {
            workers: opts.workers,
            buffered_ops: run.buffered,
            applied_ops: run.applied_ops,
            applied_writes: run.applied_writes,
            applied_share: run.applied_share(),
            written_documents: written.len() as u64,
            pending_documents: left.len() as u64,
            documents_applied_share: 1.0 - left.len() as f64 / written.len().max(1) as f64,
            fallbacks: run.fallbacks,
            conversions: run.conversions,
            pinned_bytes: pinned,
            applied_share_samples: Vec::new(),
            drain_s,
        })
    }

    /// Compares every cache key of every member with what a read would fill it with from the
    /// data store now (run it when no action is in flight, after write-back's drain).
    pub(crate) fn check_cache(&self) -> Result<Option<CacheCheck>> {
        let cads = &self.world.dep.cads;
        let Some(client) = cads.cache() else {
            return Ok(None);
        };
        let started = Instant::now();
        let mut check = CacheCheck {
            invalidations_failed: cads.invalidations_failed(),
            flushed_cmis: cads.flush_missed_cmis(),
            ..CacheCheck::default()
        };
        for member in 0..self.ctx.graph.members {
            let mut cached = Vec::new();
            for key in self.world.layout.cache_keys(member) {
                check.keys += 1;
                if let Some(value) = client.get(&key).context("reading the cache back")? {
                    cached.push((key, value));
                }
            }
            if cached.is_empty() {
                continue;
            }
            check.cached += cached.len() as u64;
            let fresh: HashMap<Vec<u8>, Vec<u8>> = self
                .world
                .layout
                .fresh_entries(&self.world.store_only, member)
                .with_context(|| format!("reading member {member} from the data store"))?
                .into_iter()
                .collect();
            for (key, value) in cached {
                let want = fresh.get(&key);
                if want.is_some_and(|w| self.world.layout.same_value(&key, &value, w)) {
                    continue;
                }
                check.mismatches += 1;
                if check.examples.len() < EXAMPLES {
                    check.examples.push(format!(
                        "{}: cached {:?}, the data store gives {:?}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(&value),
                        want.map(|w| String::from_utf8_lossy(w).into_owned())
                    ));
                }
            }
        }
        self.ctx.report(
            0,
            Phase::Verify,
            check.keys,
            started,
            format!(
                "cache check: {} of {} keys cached, {} differ from the data store \
                 (since the start: {} invalidations given up; {} CMIs marked missed flushed now)",
                check.cached,
                check.keys,
                check.mismatches,
                check.invalidations_failed,
                check.flushed_cmis
            ),
        );
        Ok(Some(check))
    }

    fn config_record(&self, threads: usize) -> ConfigRecord {
        let opts = self.ctx.opts;
        let cads = &self.world.dep.cads;
        let has_cache = cads.cache().is_some();
        ConfigRecord {
            mix: self.ctx.mix.clone(),
            layout: opts.layout.name().to_string(),
            layout_description: self.world.layout.describe(),
            members: self.ctx.graph.members,
            friends: self.ctx.graph.friends,
            pending: self.ctx.graph.pending,
            popularity: opts.popularity,
            threads,
            duration_s: opts.duration.as_secs_f64(),
            sla: opts.soar.then_some(opts.sla),
            workers: opts.workers,
            write_back_replicas: cads
                .config()
                .write_back
                .replicas
                .min(cads.cache().map_or(0, |c| c.cmis())),
            write_back_partitions: cads.config().write_back.partitions,
            warm: opts.warm && has_cache,
            cache: if has_cache {
                opts.cache.describe()
            } else {
                "none".into()
            },
            cmi_maxmemory: opts.cmi.maxmemory.clone(),
            cmi_max_pinned_memory: opts.cmi.max_pinned_memory.clone(),
            store_pool: self.ctx.store_pool,
            seed: opts.seed,
            broken: opts.broken,
        }
    }
}
