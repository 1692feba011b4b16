//! Write-back (000 ch. 3): writes update the cache and leave their changes there as buffered
//! writes, pinned and replicated on several CMIs; background workers apply them to the data store
//! later. A read that misses applies the buffered writes its value depends on first (the mapping,
//! 000 Algorithm 1), so it never reads a data store that lags behind an acknowledged write.
//!
//! Two designs (000 §3.2), chosen per write by the [`CacheStore`](crate::CacheStore):
//!
//! **Design 1, per document**, for writes expressed as document operations (the document layer,
//! or a `CacheStore` that implements `buffer`):
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
//!
//! **Design 2, per session**, for writes expressed as SQL statements (a `CacheStore` that
//! implements `buffer_sql`): a session's statements are one session object, queued in commit
//! order and applied in batches, exactly once through the `cads_applied_sessions` table (003
//! Algorithm 4); reads that miss apply what they depend on or fold in query result changes
//! (Algorithms 1 and 3). See the `design2` module's source for the layout of its entries.

pub mod buffer;
pub(crate) mod design1;
pub(crate) mod design2;
mod replicated;
mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use design1::{apply_buffered, bw_key, pending};
pub use design2::{pending_sessions, SqlBuffer, Statement, APPLIED_SESSIONS};
pub use workers::{drain, Workers};

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
    /// Design 1: buffered writes (one per document) that a worker applies in one data-store
    /// transaction, and deletes in one cache session.
    pub documents_per_transaction: usize,
    /// Design 2: sessions applied per data-store transaction (alpha of 003 Algorithm 4).
    pub batch: usize,
    /// Design 2: applied sessions removed from their queue, mappings and
    /// `cads_applied_sessions` together, once this many have accumulated (beta of Algorithm 4).
    pub compact_every: usize,
    /// How long a worker waits after a pass that applied something but found no full batch, so
    /// that writes accumulate into larger batches: fewer cache round trips and data-store
    /// transactions per write, for writes pending this much longer. Zero applies each write as
    /// soon as a worker finds it.
    pub worker_pause: Duration,
}

impl Default for WriteBackConfig {
    fn default() -> Self {
        WriteBackConfig {
            replicas: 3,
            partitions: 64,
            buffering: Buffering::ReadModifyWrite,
            documents_per_transaction: 32,
            batch: 8,
            compact_every: 64,
            worker_pause: Duration::from_millis(10),
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
    /// Design 2: sessions whose statements committed sessions buffered.
    pub buffered_sessions: AtomicU64,
    /// Design 2: buffered sessions applied to the data store.
    pub applied_sessions: AtomicU64,
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
    pub buffered_sessions: u64,
    pub applied_sessions: u64,
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
            buffered_sessions: get(&self.buffered_sessions),
            applied_sessions: get(&self.applied_sessions),
            fallbacks: get(&self.fallbacks),
        }
    }
}

impl WriteBackCounts {
    /// What happened between an earlier snapshot and this one.
    pub fn since(&self, earlier: &WriteBackCounts) -> WriteBackCounts {
        WriteBackCounts {
            buffered: self.buffered - earlier.buffered,
            applied_writes: self.applied_writes - earlier.applied_writes,
            applied_ops: self.applied_ops - earlier.applied_ops,
            conversions: self.conversions - earlier.conversions,
            buffered_sessions: self.buffered_sessions - earlier.buffered_sessions,
            applied_sessions: self.applied_sessions - earlier.applied_sessions,
            fallbacks: self.fallbacks - earlier.fallbacks,
        }
    }

    /// The share of buffered writes already in the data store: Design 1's operations and
    /// Design 2's sessions.
    pub fn applied_share(&self) -> f64 {
        let buffered = self.buffered + self.buffered_sessions;
        if buffered == 0 {
            1.0
        } else {
            ((self.applied_ops + self.applied_sessions) as f64 / buffered as f64).min(1.0)
        }
    }
}
