//! Running work again after it lost a conflict: a backoff between attempts, a ticket that makes
//! the work older than work started after it (so that on a hot key it waits instead of losing
//! again, engine `contention`), and the time bound the application chose
//! ([`Config::give_up_after`](crate::Config::give_up_after)).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cads_client::Backoff;

use crate::error::Error;
use crate::Config;

/// The attempts of one unit of work.
pub(crate) struct Attempts<'c> {
    started: Instant,
    /// When the work started, in microseconds since the Unix epoch: a clock every AppNode
    /// shares, so that tickets compare across processes.
    ticket: u64,
    /// Attempts made so far.
    made: usize,
    backoff: Backoff<'c>,
    give_up_after: Duration,
}

impl<'c> Attempts<'c> {
    pub(crate) fn new(config: &'c Config) -> Attempts<'c> {
        let ticket = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Attempts {
            started: Instant::now(),
            ticket,
            made: 0,
            backoff: Backoff::new(&config.retry),
            give_up_after: config.give_up_after,
        }
    }

    /// Starts the next attempt and returns its ticket: none for the first, which competes for
    /// leases as the tables say and costs nothing extra; the work's start time for a retry.
    pub(crate) fn start(&mut self) -> Option<u64> {
        self.made += 1;
        (self.made > 1).then_some(self.ticket)
    }

    /// After an attempt lost a conflict: waits a backoff that grows with every loss and returns
    /// true, or returns false once the time bound is spent.
    pub(crate) fn again(&mut self) -> bool {
        if self.started.elapsed() >= self.give_up_after {
            return false;
        }
        self.backoff.pause();
        true
    }

    /// The error to report when the work gives up: the last attempt's, saying how long it tried.
    pub(crate) fn gave_up(&self, last: Error) -> Error {
        match last {
            Error::Aborted { reason } => Error::Aborted {
                reason: format!(
                    "{reason} (gave up after {} attempts in {:.1} s)",
                    self.made,
                    self.started.elapsed().as_secs_f64()
                ),
            },
            other => other,
        }
    }
}
