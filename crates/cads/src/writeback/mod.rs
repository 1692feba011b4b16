//! Write-back (000 ch. 3): writes update the cache and leave their changes there as buffered
//! writes, pinned and replicated on several CMIs; background workers apply them to the data store
//! later. A read that misses applies the buffered writes its value depends on first (the mapping,
//! 000 Algorithm 1), so it never reads a data store that lags behind an acknowledged write.
//!
//! This module implements Design 1, per document (000 §3.2), for writes expressed as document
//! operations (the document layer, or any [`CacheStore`](crate::CacheStore) that implements
//! `buffer`):
//!
//! - the buffered write of a document `D` is the pinned entry `BW:<collection>:<id>`, its pending
//!   operations one JSON line each ([`buffer`]), appended to or rewritten (read-modify-write, with
//!   compaction) by each write;
//! - the mapping from a document's cache key to its buffered write is the identity;
//! - `PendingWrites` is split into `partitions` pinned sub-keys `PW:<p>`, listing the buffered
//!   writes workers must apply;
//! - buffered writes and PendingWrites live on `replicas` CMIs each, written in the same session as
//!   the cached values they accompany, so a write is acknowledged only when every replica holds it;
//! - a buffered write is applied by Algorithm 2: under exclusive leases on its replicas, a
//!   non-idempotent one is first replaced by its idempotent equivalent (the final document, computed
//!   from the data store's version), then applied, then deleted with its PendingWrites entry. A
//!   worker that dies anywhere in between leaves either the original or the idempotent form behind,
//!   never a half-applied one, so nothing is applied twice.

pub mod buffer;
pub(crate) mod design1;
mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use design1::{apply_buffered, bw_key, pending};
pub use workers::Workers;

/// How a write adds its changes to a buffered write (000 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// Append the new operations: one round trip, no compaction.
    Append,
    /// Read the buffered write under an exclusive lease, add the operations, compact, write back.
    ReadModifyWrite,
}

impl Buffering {
    pub fn parse(name: &str) -> Option<Buffering> {
        match name {
            "append" => Some(Buffering::Append),
            "rmw" | "read-modify-write" => Some(Buffering::ReadModifyWrite),
            _ => None,
        }
    }
}

/// A point inside Algorithm 2 where tests make a worker die.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyStep {
    /// The buffered write was rewritten in idempotent form, not yet committed.
    Converted,
    /// The idempotent form is committed; it was not applied yet.
    ConvertedCommitted,
    /// The data store has the changes; the buffered write is still in the cache.
    Applied,
}

/// A test hook deciding whether a worker dies at a step (no cleanup: its leases expire).
#[doc(hidden)]
#[derive(Clone)]
pub struct CrashHook(pub Arc<dyn Fn(ApplyStep) -> bool + Send + Sync>);

impl std::fmt::Debug for CrashHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CrashHook")
    }
}

/// Write-back settings.
#[derive(Clone, Debug)]
pub struct WriteBackConfig {
    /// CMIs holding each buffered write and PendingWrites partition (R); capped by the number of
    /// CMIs.
    pub replicas: usize,
    /// PendingWrites sub-keys (alpha): a multiple of the writer and worker threads keeps them from
    /// contending.
    pub partitions: usize,
    pub buffering: Buffering,
    #[doc(hidden)]
    pub crash: Option<CrashHook>,
}

impl Default for WriteBackConfig {
    fn default() -> Self {
        WriteBackConfig {
            replicas: 3,
            partitions: 64,
            buffering: Buffering::ReadModifyWrite,
            crash: None,
        }
    }
}

/// Counters of write-back activity in this process.
#[derive(Debug, Default)]
pub struct WriteBackStats {
    /// Document operations buffered by committed sessions.
    pub buffered: AtomicU64,
    /// Buffered writes applied to the data store (each holds one or more operations).
    pub applied_writes: AtomicU64,
    /// Operations those buffered writes held.
    pub applied_ops: AtomicU64,
    /// Non-idempotent buffered writes turned into their idempotent form.
    pub conversions: AtomicU64,
    /// Sessions that found pinned memory full and ran as write-through instead.
    pub fallbacks: AtomicU64,
}

/// A snapshot of [`WriteBackStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBackCounts {
    pub buffered: u64,
    pub applied_writes: u64,
    pub applied_ops: u64,
    pub conversions: u64,
    pub fallbacks: u64,
}

impl WriteBackStats {
    pub fn snapshot(&self) -> WriteBackCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WriteBackCounts {
            buffered: get(&self.buffered),
            applied_writes: get(&self.applied_writes),
            applied_ops: get(&self.applied_ops),
            conversions: get(&self.conversions),
            fallbacks: get(&self.fallbacks),
        }
    }
}

impl WriteBackCounts {
    /// The share of buffered operations already in the data store.
    pub fn applied_share(&self) -> f64 {
        if self.buffered == 0 {
            1.0
        } else {
            (self.applied_ops as f64 / self.buffered as f64).min(1.0)
        }
    }
}
