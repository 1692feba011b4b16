//! Which documents this process buffered a write of a moment ago: append buffering's guess at
//! whether a document still has a buffered write, and so is still listed in PendingWrites.
//!
//! A write that guesses it has one skips the registration, whose exclusive lease on the
//! PendingWrites partition every writer of the partition's documents would otherwise contend for
//! (a hot document's writers hold it nearly all the time). A wrong guess costs a round trip,
//! never a write: the replicas' replies say whether the buffered write was new, and a new one
//! is registered before the session validates. A document is noted when a session that
//! buffered a write of it commits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Slots of the table: a document that shares its slot with a more recent one is forgotten,
/// which makes the guess wrong, not the result.
const SLOTS: usize = 4096;

/// A direct-mapped table of (key hash, when), lock-free so that writer threads do not queue.
pub(crate) struct RecentBuffers {
    started: Instant,
    /// Per slot: the key hash's upper 32 bits, then the time in ms since `started` (wrapping).
    slots: Box<[AtomicU64]>,
}

impl Default for RecentBuffers {
    fn default() -> Self {
        RecentBuffers {
            started: Instant::now(),
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl RecentBuffers {
    fn now_ms(&self) -> u32 {
        self.started.elapsed().as_millis() as u32
    }

    fn slot(&self, key: &[u8]) -> (&AtomicU64, u64) {
        let hash = cads_client::stable_hash(key);
        (&self.slots[hash as usize % SLOTS], hash >> 32)
    }

    /// `key`'s buffered write was written just now.
    pub(crate) fn note(&self, key: &[u8]) {
        let (slot, tag) = self.slot(key);
        slot.store(tag << 32 | u64::from(self.now_ms()), Ordering::Relaxed);
    }

    /// Whether `key`'s buffered write was written within `window`.
    pub(crate) fn within(&self, key: &[u8], window: Duration) -> bool {
        let (slot, tag) = self.slot(key);
        let held = slot.load(Ordering::Relaxed);
        if held == 0 || held >> 32 != tag {
            return false;
        }
        let age = self.now_ms().wrapping_sub(held as u32);
        u128::from(age) < window.as_millis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noted_key_is_recent_for_the_window_only() {
        let recent = RecentBuffers::default();
        let hour = Duration::from_secs(3600);
        assert!(!recent.within(b"BW:users:alice", hour));
        recent.note(b"BW:users:alice");
        assert!(recent.within(b"BW:users:alice", hour));
        assert!(!recent.within(b"BW:users:alice", Duration::ZERO));
        assert!(!recent.within(b"BW:users:bob", hour));
    }
}
