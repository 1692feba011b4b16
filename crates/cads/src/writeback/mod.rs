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
//!
//! Every object the workers and readers act on (buffered writes, session objects, and the lines
//! of PendingWrites, queues and mappings) carries a MAC under the deployment's key ([`mac`]); one
//! whose MAC does not verify, or that cannot be read, is refused, counted in
//! [`WriteBackStats`] and moved past.

pub mod buffer;
pub(crate) mod design1;
pub(crate) mod design2;
pub mod mac;
pub(crate) mod recent;
pub(crate) mod replicated;
mod workers;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use design1::{apply_buffered, bw_key, pending};
pub use design2::{pending_sessions, SqlBuffer, Statement, APPLIED_SESSIONS};
pub use mac::{MacKey, Seal};
pub use workers::{drain, Workers};

/// How a write adds its changes to a buffered write (000 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// Append the new operations without reading the buffered write (compacted when applied): a
    /// write takes two round trips, its writes with the validation and the commit (three when
    /// its guess that the document is listed in PendingWrites already was wrong).
    Append,
    /// Read the buffered write under an exclusive lease, add the operations, compact, write back:
    /// a round trip more, for buffered writes kept compact.
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

    /// The name [`parse`](Buffering::parse) takes (its short one).
    pub fn name(self) -> &'static str {
        match self {
            Buffering::Append => "append",
            Buffering::ReadModifyWrite => "rmw",
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
    /// Design 2: sessions applied per data-store transaction (alpha of 003 Algorithm 4). Small:
    /// a batch holds the row locks of all its sessions until it commits, and appliers of queues
    /// whose sessions touch each other's rows deadlock more the more each batch holds (TPC-C
    /// on PostgreSQL, docs/RESULTS.md: 2 applied 28% more sessions than 8 and deadlocked a
    /// third as often).
    pub batch: usize,
    /// Design 2: applied sessions removed from their queue, mappings and
    /// `cads_applied_sessions` together, once this many have accumulated (beta of Algorithm 4),
    /// or an eighth of the queue as the applier read it if that is more: each compaction
    /// rewrites the whole queue, so behind a backlog a fixed beta would cost time quadratic in it.
    pub compact_every: usize,
    /// How long a worker waits after a pass that applied something but found no full batch, so
    /// that writes accumulate into larger batches: fewer cache round trips and data-store
    /// transactions per write, for writes pending this much longer. Zero applies each write as
    /// soon as a worker finds it.
    pub worker_pause: Duration,
    /// The key of the MACs on everything write-back keeps in the cache ([`mac`]): by default
    /// generated on first use and kept in the data store, so that every AppNode of a deployment
    /// has it.
    pub mac_key: MacKey,
}

impl Default for WriteBackConfig {
    fn default() -> Self {
        WriteBackConfig {
            replicas: 3,
            partitions: 64,
            buffering: Buffering::Append,
            documents_per_transaction: 32,
            batch: 2,
            compact_every: 64,
            worker_pause: Duration::from_millis(250),
            mac_key: MacKey::default(),
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
    /// Objects and list lines refused because their MAC did not verify (written by something
    /// other than an AppNode of this deployment, or under another key), each counted by the
    /// process that discarded it.
    pub refused_unauthenticated: AtomicU64,
    /// Objects and list lines refused because they could not be read although their MAC
    /// verified (or MACs are off).
    pub refused_malformed: AtomicU64,
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
    pub refused_unauthenticated: u64,
    pub refused_malformed: u64,
}

/// The counts of several processes together (the AppNodes of one run).
impl std::ops::Add for WriteBackCounts {
    type Output = WriteBackCounts;

    fn add(self, b: WriteBackCounts) -> WriteBackCounts {
        WriteBackCounts {
            buffered: self.buffered + b.buffered,
            applied_writes: self.applied_writes + b.applied_writes,
            applied_ops: self.applied_ops + b.applied_ops,
            conversions: self.conversions + b.conversions,
            buffered_sessions: self.buffered_sessions + b.buffered_sessions,
            applied_sessions: self.applied_sessions + b.applied_sessions,
            fallbacks: self.fallbacks + b.fallbacks,
            refused_unauthenticated: self.refused_unauthenticated + b.refused_unauthenticated,
            refused_malformed: self.refused_malformed + b.refused_malformed,
        }
    }
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
            refused_unauthenticated: get(&self.refused_unauthenticated),
            refused_malformed: get(&self.refused_malformed),
        }
    }

    /// Records that an object (or a line of a list) was refused and discarded.
    fn refuse(&self, key: &[u8], refusal: &Refusal) {
        let key = String::from_utf8_lossy(key);
        match refusal {
            Refusal::Unauthenticated => {
                self.refused_unauthenticated.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    key = %key,
                    "write-back refused an object whose MAC does not verify: written by \
                     something other than an AppNode of this deployment, or under another key"
                );
            }
            Refusal::Malformed(why) => {
                self.refused_malformed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(key = %key, why = %why, "write-back refused an object it cannot read");
            }
        }
    }
}

/// Why write-back refused an object or a line of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its MAC does not verify.
    Unauthenticated,
    /// It cannot be read (its MAC verified, or MACs are off).
    Malformed(String),
}

/// Objects and lines refused by a piece of write-back's work: counted and logged, each once,
/// when the work that discards them has committed ([`Refused::discarded`]).
#[derive(Debug, Default)]
pub(crate) struct Refused(BTreeMap<(Vec<u8>, Vec<u8>), Refusal>);

impl Refused {
    /// `item` (an object, or a line of a list) found under the cache key `key`. The same bytes
    /// under the same key (copies on several replicas) count once.
    pub(crate) fn add(&mut self, key: &[u8], item: &[u8], why: Refusal) {
        self.0.insert((key.to_vec(), item.to_vec()), why);
    }

    pub(crate) fn extend(&mut self, other: Refused) {
        self.0.extend(other.0);
    }

    /// The refused items are gone from the cache: count and log them.
    pub(crate) fn discarded(self, stats: &WriteBackStats) {
        for ((key, _), why) in self.0 {
            stats.refuse(&key, &why);
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
            refused_unauthenticated: self.refused_unauthenticated - earlier.refused_unauthenticated,
            refused_malformed: self.refused_malformed - earlier.refused_malformed,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffering_is_named_as_the_command_line_names_it() {
        assert_eq!(Buffering::parse("append"), Some(Buffering::Append));
        for name in ["rmw", "read-modify-write"] {
            assert_eq!(Buffering::parse(name), Some(Buffering::ReadModifyWrite));
        }
        assert_eq!(Buffering::parse("Append"), None);
        for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
            assert_eq!(Buffering::parse(buffering.name()), Some(buffering));
        }
    }

    /// Each count of several AppNodes is the sum of theirs, and a count since a snapshot the
    /// difference, field by field.
    #[test]
    fn counts_of_processes_add_up_field_by_field() {
        let counts = |n: u64| WriteBackCounts {
            buffered: n,
            applied_writes: 2 * n,
            applied_ops: 3 * n,
            conversions: 4 * n,
            buffered_sessions: 5 * n,
            applied_sessions: 6 * n,
            fallbacks: 7 * n,
            refused_unauthenticated: 8 * n,
            refused_malformed: 9 * n,
        };
        assert_eq!(counts(3) + counts(4), counts(7));
        assert_eq!(counts(7).since(&counts(3)), counts(4));
    }

    /// The share of buffered writes applied: Design 1's operations and Design 2's sessions
    /// together, all of them when nothing was buffered, and never more than all.
    #[test]
    fn the_applied_share_counts_both_designs() {
        let counts = |buffered, buffered_sessions, applied_ops, applied_sessions| WriteBackCounts {
            buffered,
            buffered_sessions,
            applied_ops,
            applied_sessions,
            ..WriteBackCounts::default()
        };
        assert_eq!(counts(0, 0, 0, 0).applied_share(), 1.0);
        assert_eq!(counts(4, 6, 2, 3).applied_share(), 0.5);
        assert_eq!(counts(4, 0, 5, 0).applied_share(), 1.0);
    }

    /// Refusals gathered by several pieces of work count once per key and item when discarded.
    #[test]
    fn refusals_count_once_per_key_and_item() {
        let mut first = Refused::default();
        first.add(b"k", b"line", Refusal::Unauthenticated);
        let mut second = Refused::default();
        second.add(b"k", b"line", Refusal::Unauthenticated);
        second.add(b"k", b"other", Refusal::Malformed("truncated".into()));
        first.extend(second);
        let stats = WriteBackStats::default();
        first.discarded(&stats);
        let counts = stats.snapshot();
        assert_eq!(
            (counts.refused_unauthenticated, counts.refused_malformed),
            (1, 1)
        );
    }
}
