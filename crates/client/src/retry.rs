//! Backing off after RETRY: jittered exponential delays within a time budget.

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How RETRY replies are retried.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// The first delay's upper bound.
    pub initial: Duration,
    /// No delay is longer than this.
    pub max: Duration,
    /// Total time spent retrying one request before the session gives up (and aborts).
    pub budget: Duration,
    /// No delay is longer than this for a session with a ticket: it waits for holders that will
    /// release within a few round trips, and younger sessions give way to it meanwhile, so a
    /// long sleep only leaves the key idle.
    pub ticketed_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_micros(500),
            max: Duration::from_millis(50),
            budget: Duration::from_secs(2),
            ticketed_max: Duration::from_millis(2),
        }
    }
}

/// One request's backoff state.
pub struct Backoff<'p> {
    policy: &'p RetryPolicy,
    started: Instant,
    ceiling: Duration,
    max: Duration,
}

impl<'p> Backoff<'p> {
    pub fn new(policy: &'p RetryPolicy) -> Backoff<'p> {
        Backoff {
            policy,
            started: Instant::now(),
            ceiling: policy.initial,
            max: policy.max,
        }
    }

    /// Keeps every later delay under `max` (for a session with a ticket, `ticketed_max`).
    pub fn cap(&mut self, max: Duration) {
        self.max = self.max.min(max);
        self.ceiling = self.ceiling.min(self.max);
    }

    /// Sleeps before the next attempt ("full jitter": a random delay up to a doubling ceiling, so
    /// that contenders spread out). Returns false, without sleeping, once the budget is spent.
    pub fn wait(&mut self) -> bool {
        if self.started.elapsed() >= self.policy.budget {
            return false;
        }
        self.pause();
        true
    }

    /// Sleeps as [`wait`](Self::wait) does, whatever the budget: for callers that bound their
    /// attempts themselves.
    pub fn pause(&mut self) {
        let nanos = self.ceiling.as_nanos() as u64;
        let delay = Duration::from_nanos(random() % nanos.max(1) + 1);
        std::thread::sleep(delay);
        self.ceiling = (self.ceiling * 2).min(self.max);
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let thread = std::thread::current().id();
    let mixed = nanos ^ cads_protocol::fragment::fnv1a64(format!("{thread:?}").as_bytes());
    mixed | 1
}

/// A per-thread xorshift generator: jitter needs spread, not cryptographic quality.
pub fn random() -> u64 {
    RNG.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_after_the_budget() {
        let policy = RetryPolicy {
            initial: Duration::from_micros(100),
            max: Duration::from_millis(2),
            budget: Duration::from_millis(20),
            ticketed_max: Duration::from_millis(2),
        };
        let started = Instant::now();
        let mut b = Backoff::new(&policy);
        let mut attempts = 0;
        while b.wait() {
            attempts += 1;
            assert!(attempts < 1000);
        }
        // How many sleeps fit in the budget depends on how late a loaded machine wakes the
        // thread; what must hold is that it gives up only once the budget is spent.
        assert!(attempts >= 1);
        assert!(started.elapsed() >= policy.budget);
    }

    #[test]
    fn a_cap_bounds_every_later_delay() {
        let policy = RetryPolicy::default();
        let mut b = Backoff::new(&policy);
        for _ in 0..4 {
            b.pause();
        }
        assert!(
            b.ceiling > policy.ticketed_max,
            "grown past the cap before it"
        );
        b.cap(policy.ticketed_max);
        assert_eq!(b.ceiling, policy.ticketed_max);
        b.pause();
        assert_eq!(b.ceiling, policy.ticketed_max, "never grows past it again");
    }
}
