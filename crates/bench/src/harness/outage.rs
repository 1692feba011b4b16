//! `--outage AT+FOR` and what a run did about a data store that went away: the cut itself (a
//! relay in front of a networked data store, the fault-injecting wrapper for SQLite), a
//! per-second timeline of throughput and dirty documents (000 Fig. 4.6), and after the run the
//! wait for recovery: until no document is listed with a buffered write (`recovery_s`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cads::store::{FaultMode, Faults, Relay};
use cads::{Cads, TardisCounts};
use serde::Serialize;

use super::drive::{Clock, Nanos};
use super::options::{CommonOptions, Outage};

/// What a record says about an outage: the run had `--outage`, or TARDIS saw the data store fail.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OutageRecord {
    /// When the cut began, seconds into the run phase (None: no `--outage`).
    pub at_s: Option<f64>,
    /// How long the data store was cut off.
    pub for_s: Option<f64>,
    /// The TARDIS technique (None: TARDIS off).
    pub tardis: Option<String>,
    /// How the AppNodes stay consistent (TARDIS: `one`, `recon` or `contextual`).
    pub appnodes: Option<String>,
    /// TARDIS's AR workers per AppNode.
    pub ar_workers: Option<usize>,
    /// Document writes accepted while teleporting (buffered in the cache).
    pub writes_accepted_failed_mode: u64,
    /// Writes refused while teleporting: pinned memory full, or a write that cannot be buffered.
    pub writes_refused: u64,
    /// Writes whose data-store commit failed as the data store went away (outcome unknown, so
    /// reported to the application).
    pub writes_failed: u64,
    /// Reads refused because they missed while buffered writes could be pending.
    pub read_errors: u64,
    /// Operations of the run that failed, whatever the reason.
    pub failed_operations: u64,
    /// Buffered writes applied by requests that touched their documents (Algorithm 5).
    pub applied_on_demand: u64,
    /// Buffered writes applied by AR workers (Algorithm 6) and the monitor's probes.
    pub applied_by_workers: u64,
    /// Most documents listed with buffered writes at once (sampled every second).
    pub dirty_peak: u64,
    /// From the data store's return to the AppNode's (the last AppNode's) return to normal mode,
    /// when no document is listed with a buffered write (None: it did not come back, or recovery
    /// stalled or did not end within `--drain-timeout`).
    pub recovery_s: Option<f64>,
    /// Documents still listed dirty when recovery stalled after the run (TAR and TARD without AR
    /// workers apply nothing once the load stops) or ran out of time: the benchmark applied them
    /// (write-back's drain) before it validated.
    pub left_after_run: u64,
    /// Every second of the run phase and of the recovery after it.
    pub timeline: Vec<OutageSample>,
}

/// One second of an outage's timeline.
#[derive(Clone, Debug, Serialize)]
pub struct OutageSample {
    /// Seconds since the run phase began.
    pub t_s: f64,
    /// Operations completed per second since the previous sample.
    pub ops_per_s: f64,
    /// Documents listed with buffered writes.
    pub dirty: u64,
    /// The TARDIS mode of the process that deployed (None with several AppNodes or no TARDIS).
    pub mode: Option<&'static str>,
}

impl OutageRecord {
    /// An empty record of a run with `opts` that saw `failed_operations`.
    pub(crate) fn of_run(opts: &CommonOptions, failed_operations: u64) -> OutageRecord {
        OutageRecord {
            tardis: opts.tardis.as_ref().map(|t| t.technique.name().to_string()),
            appnodes: opts.tardis_config().map(|t| t.appnodes.name().to_string()),
            ar_workers: opts.tardis.as_ref().map(|t| t.ar_workers),
            failed_operations,
            ..OutageRecord::default()
        }
    }

    /// Adds TARDIS's counters of the run.
    pub fn count(&mut self, counts: &TardisCounts) {
        self.writes_accepted_failed_mode = counts.writes_teleported;
        self.writes_refused = counts.writes_refused;
        self.writes_failed = counts.writes_failed;
        self.read_errors = counts.misses_refused;
        self.applied_on_demand = counts.applied_on_demand;
        self.applied_by_workers = counts.applied_by_workers;
    }
}

/// How a run cuts the data store off.
pub(crate) enum Cut<'a> {
    /// A relay in front of PostgreSQL or MariaDB: every connection is cut, new ones refused.
    Relay(&'a Relay),
    /// SQLite: every call fails at once with "unavailable".
    Faults(&'a Faults),
}

impl Cut<'_> {
    fn set(&self, down: bool) {
        match self {
            Cut::Relay(relay) => relay.set_cut(down),
            Cut::Faults(faults) => faults.set(if down {
                FaultMode::FailAll
            } else {
                FaultMode::Healthy
            }),
        }
    }
}

/// When the cut actually began and ended: in seconds since the run phase began, and the end on
/// the run's clock.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Happened {
    pub at_s: Option<f64>,
    pub back_s: Option<f64>,
    pub back: Option<Nanos>,
}

/// Runs `outage` on the calling thread against `cut`, from `started`. If `stop` is set before
/// the outage began (the run ended first), there is none; one that began lasts its whole length
/// (the AppNodes of a run may be waiting for the data store to recover before they end).
pub(crate) fn cut_off(
    cut: &Cut<'_>,
    outage: Outage,
    started: Instant,
    clock: Clock,
    stop: &AtomicBool,
) -> Happened {
    let mut happened = Happened::default();
    if !sleep_until(started + outage.at, stop) {
        return happened;
    }
    cut.set(true);
    happened.at_s = Some(started.elapsed().as_secs_f64());
    sleep_until(started + outage.at + outage.length, &AtomicBool::new(false));
    cut.set(false);
    happened.back = Some(clock.now());
    happened.back_s = Some(started.elapsed().as_secs_f64());
    happened
}

/// Sleeps until `deadline` in short steps; false if `stop` was set first.
fn sleep_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

/// How several AppNodes ended their recovery, each as it reported.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AppNodesRecovered {
    /// When the last of them entered normal mode, on the run's clock.
    pub normal_since: Option<Nanos>,
    /// The longest of their last recovery modes, in seconds.
    pub longest_recovery_s: Option<f64>,
}

/// The per-second timeline of a run phase.
pub(crate) struct Timeline {
    started: Instant,
    last: (u64, Instant),
    samples: Vec<OutageSample>,
    /// Whether the deploying process's mode means anything (one AppNode).
    own_mode: bool,
}

impl Timeline {
    pub(crate) fn new(started: Instant, own_mode: bool) -> Timeline {
        Timeline {
            started,
            last: (0, started),
            samples: Vec::new(),
            own_mode,
        }
    }

    /// A sample: `done` operations so far.
    pub(crate) fn sample(&mut self, cads: &Cads, done: u64) {
        let now = Instant::now();
        let rate =
            done.saturating_sub(self.last.0) as f64 / (now - self.last.1).as_secs_f64().max(1e-9);
        self.last = (done, now);
        self.samples.push(OutageSample {
            t_s: (now - self.started).as_secs_f64(),
            ops_per_s: rate,
            dirty: dirty(cads),
            mode: self
                .own_mode
                .then(|| cads.mode().map(|m| m.name()))
                .flatten(),
        });
    }

    /// The latest sample.
    pub(crate) fn last(&self) -> Option<&OutageSample> {
        self.samples.last()
    }

    /// Fills in the record's times and timeline.
    pub(crate) fn finish(self, happened: Happened, record: &mut OutageRecord) {
        record.at_s = happened.at_s;
        record.for_s = happened.at_s.zip(happened.back_s).map(|(a, b)| b - a);
        record.dirty_peak = self.samples.iter().map(|s| s.dirty).max().unwrap_or(0);
        record.timeline = self.samples;
    }

    /// TARDIS, after the run phase: samples every second until recovery ends (no document
    /// listed dirty and, with one AppNode, normal mode), stalls ([`Stall`]) or `timeout` passes;
    /// then [`finish`](Self::finish), with `recovery_s`: from the data store's return to the
    /// moment the AppNode entered normal mode (`appnodes`: how several AppNodes did). Without
    /// `--outage` the harness does not know when the data store came back, and `recovery_s` is
    /// how long the AppNode (the slowest AppNode) stayed in recovery mode. Returns how many
    /// documents were left dirty.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn recover(
        mut self,
        cads: &Cads,
        clock: Clock,
        happened: Happened,
        done: u64,
        timeout: Duration,
        appnodes: Option<AppNodesRecovered>,
        record: &mut OutageRecord,
    ) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut stall = Stall::default();
        let mut next = Instant::now();
        let left = loop {
            // One AppNode: its mode says it all (normal mode means the monitor found no document
            // listed). Several: the lists, read less often (they may be long).
            let clean = if self.own_mode {
                cads.mode().is_none_or(|m| m == cads::Mode::Normal)
            } else {
                dirty(cads) == 0
            };
            if clean {
                let appnodes = appnodes.unwrap_or_default();
                let (normal_since, in_recovery_s) = match (self.own_mode, cads.in_mode_for()) {
                    (true, Some(d)) => (
                        clock.now().saturating_sub(d.as_nanos() as Nanos),
                        cads.last_recovery().map(|d| d.as_secs_f64()),
                    ),
                    _ => (
                        appnodes.normal_since.unwrap_or_else(|| clock.now()),
                        appnodes.longest_recovery_s,
                    ),
                };
                record.recovery_s = match happened.back {
                    Some(back) => Some(normal_since.saturating_sub(back) as f64 / 1e9),
                    None => in_recovery_s,
                };
                self.sample(cads, done);
                break 0;
            }
            let now = Instant::now();
            if now >= next {
                self.sample(cads, done);
                next += Duration::from_secs(1);
                let last = self.samples.last().map_or(0, |s| s.dirty);
                if now >= deadline || stall.stalled(last, cads) {
                    break last;
                }
            }
            std::thread::sleep(Duration::from_millis(if self.own_mode { 20 } else { 250 }));
        };
        self.finish(happened, record);
        left
    }
}

/// Whether recovery stopped making progress: the dirty documents have not gone down for
/// [`Stall::AFTER`] while the data store is back (TAR and TARD with no AR workers never end once
/// the load stops: nothing applies their buffered writes).
#[derive(Default)]
pub(crate) struct Stall {
    fewest: Option<(u64, Instant)>,
}

impl Stall {
    const AFTER: Duration = Duration::from_secs(10);

    /// Notes `dirty` documents now; true once they have not gone down for [`Stall::AFTER`].
    pub(crate) fn stalled(&mut self, dirty: u64, cads: &Cads) -> bool {
        let now = Instant::now();
        match self.fewest {
            Some((fewest, _)) if dirty >= fewest && cads.mode() != Some(cads::Mode::Failed) => {}
            _ => {
                self.fewest = Some((dirty, now));
                return false;
            }
        }
        self.fewest
            .is_some_and(|(_, since)| now.duration_since(since) >= Stall::AFTER)
    }
}

/// Documents listed with buffered writes now (0 if the lists cannot be read).
pub(crate) fn dirty(cads: &Cads) -> u64 {
    if cads.cache().is_none() {
        return 0;
    }
    cads.dirty_documents().map_or(0, |n| n as u64)
}
