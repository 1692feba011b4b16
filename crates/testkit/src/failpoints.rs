//! Failpoints in tests: a [`Scenario`] holds the process-wide failpoint lock and clears every
//! point when it ends; a [`Stall`] holds up the first thread reaching a point until the test lets
//! it go on. The points themselves are `cads::failpoints`' and `cads_engine::failpoints`'
//! (re-exported here).
//!
//! Failpoints are process-wide, so a test that configures one affects every thread of its test
//! binary: such tests live in test files of their own, and each holds a scenario from its first
//! line (a test that is still setting up without it could reach a point another has configured:
//! its drain would be the thread a stall holds, for instance).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use cads::failpoints::*;
pub use cads_engine::failpoints::*;

/// The failpoint configuration of one test: taken in turn by the tests of a binary, and cleared
/// (every point off, stalled threads let go) when dropped.
pub struct Scenario {
    _guard: fail::FailScenario<'static>,
}

impl Scenario {
    /// Waits for the scenario lock, then starts with every point off.
    pub fn setup() -> Scenario {
        Scenario {
            _guard: fail::FailScenario::setup(),
        }
    }

    /// Configures `point` with `fail`'s action syntax (`return`, `25%return`, `pause`, `off`...).
    pub fn set(&self, point: &str, actions: &str) {
        if point == APPLY_BROKEN {
            forget_broken_applier();
        }
        fail::cfg(point, actions).unwrap_or_else(|e| panic!("failpoint {point}={actions}: {e}"));
    }

    /// Runs `callback` on every thread that reaches `point`.
    pub fn on(&self, point: &str, callback: impl Fn() + Send + Sync + 'static) {
        fail::cfg_callback(point, callback).expect("configure a failpoint callback");
    }

    /// Runs the same callback at every step of a write-back applier (`APPLY_STEPS`).
    pub fn on_apply_steps(&self, callback: impl Fn() + Send + Sync + 'static) {
        let callback = Arc::new(callback);
        for point in APPLY_STEPS {
            let callback = callback.clone();
            self.on(point, move || callback());
        }
    }

    /// Turns `point` off.
    pub fn clear(&self, point: &str) {
        if point == APPLY_BROKEN {
            forget_broken_applier();
        }
        fail::remove(point);
    }

    /// Turns every step of the appliers off.
    pub fn clear_apply_steps(&self) {
        for point in APPLY_STEPS {
            self.clear(point);
        }
    }
}

/// Whether the calling thread is one of the framework's background appliers: write-back's workers
/// (`cads-bgt-<n>`), TARDIS's AR workers (`cads-ar-<n>`) and its monitor, whose probes apply
/// buffered writes (`cads-tardis-monitor`). Appliers elsewhere (a read applying what it depends
/// on, a drain) return their death to the caller as an error, which a test would take for a
/// failure.
pub fn on_background_worker() -> bool {
    std::thread::current().name().is_some_and(|name| {
        ["cads-bgt-", "cads-ar-", "cads-tardis-"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
    })
}

/// Background workers that die at the steps of an apply, as workers of a process that crashes
/// and restarts would: at each step one in `one_in` dies (a seeded xorshift roll), at most
/// `limit` of them in all. A dead worker's leases expire, and the worker carries on with its
/// next pass, as a restarted one would.
pub struct DyingWorkers {
    deaths: Arc<AtomicU64>,
}

impl DyingWorkers {
    pub fn start(scenario: &Scenario, seed: u64, one_in: u64, limit: u64) -> DyingWorkers {
        let deaths = Arc::new(AtomicU64::new(0));
        let roll = AtomicU64::new(seed);
        let counted = deaths.clone();
        scenario.on_apply_steps(move || {
            let mut x = roll.load(Ordering::Relaxed);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            roll.store(x, Ordering::Relaxed);
            if on_background_worker()
                && x % one_in == 0
                && counted
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < limit).then_some(n + 1)
                    })
                    .is_ok()
            {
                die();
            }
        });
        DyingWorkers { deaths }
    }

    /// How many died.
    pub fn deaths(&self) -> u64 {
        self.deaths.load(Ordering::Relaxed)
    }
}

/// Holds up the first thread to reach a point, as a descheduled thread or a slow data store
/// would hold it, until the test calls [`release`](Stall::release) (or 60 s pass).
#[derive(Clone, Default)]
pub struct Stall {
    /// 0: the first thread to reach the point is to stall; 1: it is stalled; 2: it may go on.
    state: Arc<AtomicU8>,
}

impl Stall {
    /// A stall at `point`, configured in `scenario`.
    pub fn at(scenario: &Scenario, point: &str) -> Stall {
        let stall = Stall::default();
        let state = stall.state.clone();
        scenario.on(point, move || {
            let first = || state.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
            if first().is_ok() {
                let deadline = Instant::now() + Duration::from_secs(60);
                while state.load(Ordering::Acquire) != 2 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        stall
    }

    /// Waits (up to 30 s) until a thread is stalled.
    pub fn wait_stalled(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "no thread reached the stall");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets the stalled thread go on.
    pub fn release(&self) {
        self.state.store(2, Ordering::Release);
    }
}
