//! `bg run`: threads issue a mix of actions for a while; every count read is validated against
//! the logged writes, and at the end every cached key is compared with the data store.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cads::Policy;

use crate::deploy::{CacheStats, Deployment};
use crate::graph::{ActionKind, GraphParams, Mix, Model, Outcome, PerKind, Rng};
use crate::layout::{CacheCheck, Layout};
use crate::validate::{validate, Log, Validation};

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Threads issuing actions (BG's emulated sockets).
    pub threads: usize,
    /// How long.
    pub duration: Duration,
    /// The action mix.
    pub mix: Mix,
    /// Seed of the threads' generators.
    pub seed: u64,
}

/// Counters of one action kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct KindStats {
    /// Actions that completed.
    pub done: u64,
    /// Actions that failed (after the framework's retries).
    pub failed: u64,
    /// Time spent in completed actions.
    pub busy: Duration,
}

/// What a run did and found.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Wall-clock time of the run.
    pub elapsed: Duration,
    /// Per action kind.
    pub stats: PerKind<KindStats>,
    /// Write actions not issued because no valid, unlocked pair was found in a few tries.
    pub skipped: u64,
    /// The first few errors, described.
    pub errors: Vec<String>,
    /// The validation of every count read.
    pub validation: Validation,
    /// The final comparison of the cache with the data store (None without a cache).
    pub cache_check: Option<CacheCheck>,
    /// Cache hits and misses during the run.
    pub cache_stats: Option<CacheStats>,
}

impl RunReport {
    /// Actions completed.
    pub fn done(&self) -> u64 {
        self.stats.0.iter().map(|s| s.done).sum()
    }

    /// Actions failed.
    pub fn failed(&self) -> u64 {
        self.stats.0.iter().map(|s| s.failed).sum()
    }

    /// Stale reads plus cached keys that differ from the data store.
    pub fn anomalies(&self) -> usize {
        self.validation.stale + self.cache_check.as_ref().map_or(0, |c| c.mismatches.len())
    }

    /// The report as text: a per-action table, throughput, cache hits, validation, cache check.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| action | done | failed | mean ms |");
        let _ = writeln!(out, "| --- | ---: | ---: | ---: |");
        for kind in ActionKind::ALL {
            let s = self.stats.get(kind);
            let mean = if s.done == 0 {
                0.0
            } else {
                s.busy.as_secs_f64() * 1e3 / s.done as f64
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {mean:.3} |",
                kind.name(),
                s.done,
                s.failed
            );
        }
        let secs = self.elapsed.as_secs_f64();
        let _ = writeln!(
            out,
            "\nthroughput: {:.0} actions/s ({} actions in {secs:.1} s; {} writes skipped for \
             want of a free valid pair)",
            self.done() as f64 / secs,
            self.done(),
            self.skipped
        );
        if let Some(c) = self.cache_stats {
            let total = c.hits + c.misses;
            if total > 0 {
                let _ = writeln!(
                    out,
                    "cache: {:.1}% hits ({} hits, {} misses, reads and read-modify-writes)",
                    100.0 * c.hits as f64 / total as f64,
                    c.hits,
                    c.misses
                );
            }
        }
        for e in &self.errors {
            let _ = writeln!(out, "error: {e}");
        }
        let v = &self.validation;
        let _ = writeln!(
            out,
            "validation: {} count reads checked, {} stale",
            v.checked, v.stale
        );
        for e in &v.examples {
            let _ = writeln!(out, "  stale: {e}");
        }
        match &self.cache_check {
            None => {
                let _ = writeln!(out, "cache check: no cache");
            }
            Some(c) => {
                let _ = writeln!(
                    out,
                    "cache check: {} of {} keys cached, {} differ from the data store",
                    c.cached,
                    c.keys,
                    c.mismatches.len()
                );
                for m in c.mismatches.iter().take(10) {
                    let _ = writeln!(out, "  differs: {m}");
                }
            }
        }
        out
    }
}

/// Loads the graph into the data store and empties the cache; returns how long it took.
pub fn prepare(dep: &Deployment, layout: &dyn Layout, graph: &GraphParams) -> Result<Duration> {
    let start = Instant::now();
    layout
        .load(&dep.cads, graph)
        .context("loading the social graph")?;
    dep.flush_cache()?;
    Ok(start.elapsed())
}

/// How many errors a report describes.
const ERRORS_SHOWN: usize = 10;

/// Runs the mix on a prepared deployment, then validates.
pub fn run(
    dep: &Deployment,
    layout: &dyn Layout,
    graph: &GraphParams,
    options: &RunOptions,
) -> Result<RunReport> {
    let model = Model::new(graph);
    let stats_before = dep.cache_stats();
    let start = Instant::now();
    let deadline = start + options.duration;
    let results: Vec<Worker> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..options.threads.max(1))
            .map(|t| {
                let model = &model;
                let seed = options
                    .seed
                    .wrapping_add((t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                scope.spawn(move || worker(dep, layout, model, &options.mix, seed, deadline))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread panicked"))
            .collect()
    });
    let elapsed = start.elapsed();

    let mut log = Log::default();
    let mut stats = PerKind::<KindStats>::default();
    let mut skipped = 0;
    let mut errors = Vec::new();
    for w in results {
        log.merge(w.log);
        for kind in ActionKind::ALL {
            let (total, mine) = (stats.get_mut(kind), w.stats.get(kind));
            total.done += mine.done;
            total.failed += mine.failed;
            total.busy += mine.busy;
        }
        skipped += w.skipped;
        errors.extend(w.errors);
    }
    errors.truncate(ERRORS_SHOWN);
    let validation = validate(graph, &log);
    let cache_stats = match (stats_before, dep.cache_stats()) {
        (Some(a), Some(b)) => Some(CacheStats {
            hits: b.hits - a.hits,
            misses: b.misses - a.misses,
        }),
        _ => None,
    };
    let cache_check = if dep.policy() == Policy::DataStoreOnly {
        None
    } else {
        Some(
            layout
                .check_cache(&dep.cads, graph)
                .context("comparing the cache with the data store")?,
        )
    };
    Ok(RunReport {
        elapsed,
        stats,
        skipped,
        errors,
        validation,
        cache_check,
        cache_stats,
    })
}

struct Worker {
    log: Log,
    stats: PerKind<KindStats>,
    skipped: u64,
    errors: Vec<String>,
}

fn worker(
    dep: &Deployment,
    layout: &dyn Layout,
    model: &Model,
    mix: &Mix,
    seed: u64,
    deadline: Instant,
) -> Worker {
    let mut rng = Rng::new(seed);
    let mut w = Worker {
        log: Log::default(),
        stats: PerKind::default(),
        skipped: 0,
        errors: Vec::new(),
    };
    while Instant::now() < deadline {
        let kind = mix.pick(&mut rng);
        let Some(action) = model.pick(kind, &mut rng) else {
            w.skipped += 1;
            continue;
        };
        let start = Instant::now();
        let result = layout.perform(&dep.cads, &action);
        let end = Instant::now();
        let stats = w.stats.get_mut(kind);
        match result {
            Ok(reads) => {
                stats.done += 1;
                stats.busy += end - start;
                if kind.is_write() {
                    w.log.write(&action, start, Some(end));
                    model.finish(&action, Outcome::Committed);
                } else {
                    w.log.reads(&reads, start, end);
                }
            }
            Err(e) => {
                stats.failed += 1;
                if w.errors.len() < ERRORS_SHOWN {
                    w.errors.push(format!("{}: {e}", kind.name()));
                }
                if kind.is_write() {
                    // An aborted session wrote nothing anywhere; after any other failure the
                    // write may or may not have reached the data store.
                    let outcome = if matches!(e, cads::Error::Aborted) {
                        Outcome::RolledBack
                    } else {
                        w.log.write(&action, start, None);
                        Outcome::Unknown
                    };
                    model.finish(&action, outcome);
                }
            }
        }
    }
    w
}
