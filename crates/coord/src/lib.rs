//! cads-coord: the coordinator.
//!
//! It hands out disjoint ranges of session ids to clients (000 §5.1). It runs embedded in the
//! application process for now, behind `cads_client::RangeSource`; configurations, fragment leases
//! and range leases (Gemini, CPR) join it with those issues.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use cads_client::RangeSource;
use cads_protocol::SessionId;

/// Session ids per range: a client asks again after this many sessions.
pub const DEFAULT_RANGE: u64 = 1 << 16;

/// An in-process coordinator. Ids start at 1 and never repeat within the process.
pub struct Coordinator {
    next: AtomicU64,
    range: u64,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator::embedded()
    }
}

impl Coordinator {
    /// A coordinator whose id space starts fresh. Processes that share CMIs must share one
    /// coordinator (or be given disjoint id spaces with [`Coordinator::starting_at`]).
    pub fn embedded() -> Coordinator {
        Coordinator::starting_at(1, DEFAULT_RANGE)
    }

    /// A coordinator handing out ranges of `range` ids from `first` on.
    pub fn starting_at(first: SessionId, range: u64) -> Coordinator {
        assert!(range > 0, "ranges hold at least one id");
        Coordinator {
            next: AtomicU64::new(first),
            range,
        }
    }
}

impl RangeSource for Coordinator {
    fn next_range(&self) -> Range<SessionId> {
        let start = self.next.fetch_add(self.range, Ordering::Relaxed);
        start
            ..start
                .checked_add(self.range)
                .expect("session ids exhausted")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn ranges_are_disjoint_across_threads() {
        let coord = Arc::new(Coordinator::starting_at(1, 10));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = coord.clone();
                std::thread::spawn(move || (0..100).map(|_| c.next_range()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for h in handles {
            for range in h.join().unwrap() {
                for id in range {
                    assert!(seen.insert(id), "id {id} handed out twice");
                }
            }
        }
        assert_eq!(seen.len(), 4000);
    }
}
