//! The threads of a phase: the run phase's loop (operations until the deadline or the budget,
//! each timed and counted), the clock every AppNode reads alike, and the per-second ticks of the
//! calling thread.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cads::Cads;
use hdrhistogram::Histogram;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Benchmark, RunLog};
use crate::deploy::mark_driver_thread;

/// How often the calling thread reports progress (and samples pinned memory in a run).
pub const TICK: Duration = Duration::from_secs(1);
/// How many errors a record describes.
pub(crate) const ERRORS_SHOWN: usize = 10;

/// Nanoseconds since a run's epoch.
pub type Nanos = u64;

/// The clock of a run: nanoseconds of the machine's monotonic clock since the run's epoch, the
/// same in every process of the run (AppNodes), so that their logs can be validated as one
/// history. Unlike the wall clock it never steps.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Clock {
    epoch: u64,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Clock {
        Clock {
            epoch: monotonic_ns(),
        }
    }

    /// Nanoseconds since the epoch.
    pub fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.epoch)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine (what
/// `std::time::Instant` reads, but as a number another process can compare).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on every Unix cads
    // runs on, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How a run phase ends: after `duration`, or `operations` over all threads, whichever first.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limit {
    /// How long the run lasts.
    pub duration: Option<Duration>,
    /// Operations over all threads (and AppNodes).
    pub operations: Option<u64>,
}

/// What a benchmark thread works with.
pub struct Env<'a> {
    /// The framework of this process.
    pub cads: &'a Cads,
    /// The run's clock: the timestamps of the logs.
    pub clock: Clock,
    /// Where the threads also record each latency, for a per-second timeline (runs that fail
    /// CMIs).
    pub recent: Option<&'a RecentLatencies>,
}

/// The latencies of the operations completed since the last [`take`](Self::take), one
/// histogram per thread so that threads do not contend for a lock.
pub struct RecentLatencies {
    threads: Vec<Mutex<Histogram<u64>>>,
}

impl RecentLatencies {
    /// For `threads` threads.
    pub fn new(threads: usize) -> RecentLatencies {
        RecentLatencies {
            threads: (0..threads).map(|_| Mutex::new(histogram())).collect(),
        }
    }

    fn record(&self, thread: usize, micros: u64) {
        let mut h = self.threads[thread].lock().expect("not poisoned");
        h.saturating_record(micros);
    }

    /// Every thread's latencies since the last take, merged; the threads start afresh.
    pub fn take(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in &self.threads {
            let mut h = h.lock().expect("not poisoned");
            all.add(&*h).expect("histograms of the same bounds");
            h.reset();
        }
        all
    }
}

/// Who a benchmark thread is.
#[derive(Clone, Copy, Debug)]
pub struct ThreadContext {
    /// Its index over all threads of the run (and AppNodes): `0..threads`.
    pub index: usize,
    /// Threads of the run, over all AppNodes.
    pub threads: usize,
    /// Its AppNode (0-based) and how many there are.
    pub appnode: usize,
    /// AppNodes of the run.
    pub appnodes: usize,
    /// Runs on this load before this one (BG's SoAR search runs several).
    pub run_on_load: u64,
    /// The options' seed.
    pub seed: u64,
    /// When this process's run phase began.
    pub started: Instant,
}

/// How one operation ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It completed: its latency is recorded.
    Done,
    /// It rolled back as the benchmark intends (TPC-C's New-Order rollbacks).
    RolledBack,
    /// It failed; the error, described.
    Failed(String),
    /// Nothing was issued (BG found no valid pair of free members).
    Skipped,
}

/// One operation of a benchmark thread.
#[derive(Clone, Debug)]
pub struct Step {
    /// Its kind: an index into [`Benchmark::kinds`].
    pub kind: usize,
    /// How it ended.
    pub outcome: Outcome,
    /// Reads it made through the cache.
    pub cache_reads: u64,
    /// Of those, the ones that queried the data store.
    pub cache_misses: u64,
}

/// What the threads of one process did in a run phase (merged over threads, then over AppNodes).
#[derive(Serialize, Deserialize)]
#[serde(bound = "L: Serialize + DeserializeOwned")]
pub struct NodeResult<L> {
    /// When its first thread started and its last one finished.
    pub started: Nanos,
    /// (See `started`.)
    pub finished: Nanos,
    /// Latency in µs of completed operations, per kind.
    #[serde(with = "histograms")]
    pub latencies: Vec<Histogram<u64>>,
    /// Failures per kind.
    pub failed: Vec<u64>,
    /// Intended rollbacks per kind.
    pub rolled_back: Vec<u64>,
    /// Operations not issued.
    pub skipped: u64,
    /// The first few errors.
    pub errors: Vec<String>,
    /// Reads through the cache.
    pub cache_reads: u64,
    /// Of those, the ones that queried the data store.
    pub cache_misses: u64,
    /// What the threads logged for validation.
    pub log: L,
}

impl<L: Default> NodeResult<L> {
    fn empty(kinds: usize, started: Nanos) -> NodeResult<L> {
        NodeResult {
            started,
            finished: started,
            latencies: (0..kinds).map(|_| histogram()).collect(),
            failed: vec![0; kinds],
            rolled_back: vec![0; kinds],
            skipped: 0,
            errors: Vec::new(),
            cache_reads: 0,
            cache_misses: 0,
            log: L::default(),
        }
    }
}

impl<L> NodeResult<L> {
    /// Adds another thread's or AppNode's results (`merge_logs` appends its log to ours).
    pub(crate) fn merge(&mut self, other: NodeResult<L>)
    where
        L: RunLog,
    {
        self.started = self.started.min(other.started);
        self.finished = self.finished.max(other.finished);
        for (total, h) in self.latencies.iter_mut().zip(&other.latencies) {
            total.add(h).expect("histograms of the same bounds");
        }
        for (total, n) in self.failed.iter_mut().zip(other.failed) {
            *total += n;
        }
        for (total, n) in self.rolled_back.iter_mut().zip(other.rolled_back) {
            *total += n;
        }
        self.skipped += other.skipped;
        self.errors.extend(other.errors);
        self.errors.truncate(ERRORS_SHOWN);
        self.cache_reads += other.cache_reads;
        self.cache_misses += other.cache_misses;
        self.log.merge(other.log);
    }

    /// Completed operations.
    pub fn completed(&self) -> u64 {
        self.latencies.iter().map(Histogram::len).sum()
    }

    /// Every completed operation's latency in one histogram.
    pub fn all_latencies(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in &self.latencies {
            all.add(h).expect("histograms of the same bounds");
        }
        all
    }
}

/// A histogram of latencies in µs, up to an hour, 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// A histogram as the (value, count) of its recorded buckets, for another process.
pub(crate) fn buckets(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// The histogram [`buckets`] describes.
pub(crate) fn from_buckets(buckets: &[(u64, u64)]) -> Histogram<u64> {
    let mut h = histogram();
    for &(value, count) in buckets {
        h.saturating_record_n(value, count);
    }
    h
}

/// Histograms as lists of (value, count) of their recorded buckets, for AppNodes' results.
mod histograms {
    use hdrhistogram::Histogram;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(hs: &[Histogram<u64>], s: S) -> Result<S::Ok, S::Error> {
        let buckets: Vec<Vec<(u64, u64)>> = hs.iter().map(super::buckets).collect();
        buckets.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Histogram<u64>>, D::Error> {
        let buckets = Vec::<Vec<(u64, u64)>>::deserialize(d)?;
        Ok(buckets.iter().map(|b| super::from_buckets(b)).collect())
    }
}

/// The threads of one process in a run phase: indexes `threads` of `total`.
pub(crate) struct ThreadSet {
    /// Their global indexes.
    pub threads: Range<usize>,
    /// Threads of the run over all AppNodes.
    pub total: usize,
    /// This process's AppNode and how many there are.
    pub appnode: usize,
    /// (See `appnode`.)
    pub appnodes: usize,
    /// Runs on this load before this one.
    pub run_on_load: u64,
}

/// Runs `set`'s threads of a run phase of `bench` until `limit` (`operations` is this process's
/// share), calling `tick` with the operations done every second; returns what they did.
pub(crate) fn drive<B: Benchmark>(
    bench: &B,
    loaded: &B::Loaded,
    env: &Env<'_>,
    set: &ThreadSet,
    limit: Limit,
    tick: impl FnMut(u64),
) -> NodeResult<B::Log> {
    let kinds = bench.kinds().len();
    let started = Instant::now();
    let deadline = limit.duration.map(|d| started + d);
    let issued = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let results = run_threads(set.threads.len(), &done, started, tick, |t| {
        mark_driver_thread();
        let ctx = ThreadContext {
            index: set.threads.start + t,
            threads: set.total,
            appnode: set.appnode,
            appnodes: set.appnodes,
            run_on_load: set.run_on_load,
            seed: bench.options().seed,
            started,
        };
        let mut out = NodeResult::<B::Log>::empty(kinds, env.clock.now());
        let mut state = bench.thread(loaded, &ctx);
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if let Some(budget) = limit.operations {
                if issued.fetch_add(1, Ordering::Relaxed) >= budget {
                    break;
                }
            }
            let began = Instant::now();
            let step = bench.operate(loaded, &mut state, &mut out.log, env);
            match step.outcome {
                Outcome::Skipped => {
                    out.skipped += 1;
                    continue;
                }
                Outcome::Done => {
                    let micros = began.elapsed().as_micros().max(1) as u64;
                    out.latencies[step.kind].saturating_record(micros);
                    if let Some(recent) = env.recent {
                        recent.record(t, micros);
                    }
                }
                Outcome::RolledBack => out.rolled_back[step.kind] += 1,
                Outcome::Failed(error) => {
                    out.failed[step.kind] += 1;
                    if out.errors.len() < ERRORS_SHOWN {
                        out.errors.push(error);
                    }
                }
            }
            out.cache_reads += step.cache_reads;
            out.cache_misses += step.cache_misses;
            done.fetch_add(1, Ordering::Relaxed);
        }
        out.finished = env.clock.now();
        out
    });
    let mut results = results.into_iter();
    let mut merged = results
        .next()
        .unwrap_or_else(|| NodeResult::empty(kinds, env.clock.now()));
    for r in results {
        merged.merge(r);
    }
    merged
}

/// Runs `work` on `threads` threads while the calling thread calls `tick` every second since
/// `started` with `done` (units of work so far); returns the threads' results in order. A phase
/// that lasted a second or more gets at least one tick, even if the calling thread woke only
/// after the workers finished (on a loaded machine).
pub fn run_threads<T: Send>(
    threads: usize,
    done: &AtomicU64,
    started: Instant,
    mut tick: impl FnMut(u64),
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
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
        if next_tick == started + TICK && Instant::now() >= next_tick {
            tick(done.load(Ordering::Relaxed));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_survive_the_trip_to_json() {
        let mut h = histogram();
        for v in [1, 7, 7, 150, 2_000_000] {
            h.record(v).unwrap();
        }
        let node: NodeResult<()> = NodeResult {
            latencies: vec![h.clone(), histogram()],
            ..NodeResult::empty(2, 5)
        };
        let text = serde_json::to_string(&node).unwrap();
        let back: NodeResult<()> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.latencies[0].len(), 5);
        for q in [0.1, 0.5, 0.9, 1.0] {
            assert_eq!(
                back.latencies[0].value_at_quantile(q),
                h.value_at_quantile(q),
                "{q}"
            );
        }
        assert!(back.latencies[1].is_empty());
        assert_eq!(back.started, 5);
    }

    #[test]
    fn the_clock_moves_forward() {
        let clock = Clock::start();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(clock.now() > a);
    }
}
