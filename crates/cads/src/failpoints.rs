//! Failpoints: named places where a test makes the framework misbehave as a crash, a stall or a
//! broken build would, to show that consistency survives it (or, for [`LEASES_OFF`], that the
//! checks catch what leases prevent).
//!
//! They are compiled in only with the `failpoints` cargo feature, which release builds never
//! enable (the tests turn it on through the test kit); without it every point below is a no-op
//! that costs nothing. With it, a point is configured process-wide through the `fail` crate
//! (`fail::cfg`, `fail::cfg_callback`, or the `FAILPOINTS` environment variable read by
//! `fail::FailScenario::setup`), so tests that configure one hold the scenario lock and live in a
//! test binary of their own.
//!
//! | point | where | what a configured action does |
//! | --- | --- | --- |
//! | [`FILL`] | between a miss's data-store query and its cache fill | a callback or `pause`/`sleep` holds the reader in the window of the read-write race (001 §3.3) |
//! | [`STORE_COMMIT`] | between a session's pre-commit and its data-store commit | a callback can flush a CMI the session skipped, and read, before the write reaches the data store |
//! | [`CACHE_COMMIT`] | between a session's data-store commit and its cache commit | a callback can make a CMI drop the session (`FLUSHALL UNPINNED`), so that its commit reaches some CMIs only |
//! | [`LEASES_OFF`] | every session | `return` makes sessions use the cache without leases: the broken baseline of the race tests |
//! | [`UNLIST`] | in a Design 1 applier, after its data-store commit and before it removes the applied documents from PendingWrites (TeleW): Step 6 of 000 Algorithm 6 | a callback writes to a document there, the race Step 6 must survive |
//! | [`APPLY_STEPS`] | inside a write-back applier (000 Algorithms 2 and 4) | `return` makes the applier die there (it abandons its cache session without releasing anything; its leases expire); a callback may stall it, or call [`die`] to make it die conditionally |
//! | [`APPLY_BROKEN`] | a write-back applier, once it knows what it will write to the data store | `return(drop)`, `return(twice)` or `return(reorder)` makes it a broken applier ([`Broken`]), to show that the benchmarks' validation catches one |
//! | [`UNREPLICATED`] | a write-back session staging its buffered writes (Design 1) or its session object (Design 2) | `return` makes it write only the copy on its lowest-numbered replica and acknowledge: a writer that acknowledges before replicating, never replicating, to show that a CMI lost then loses acknowledged writes and the benchmarks' validation catches it |
//! | [`CPR_WRITE_LEASING`] | a write through a Dendrite by field, between reading the document and taking its leases | a callback lets another write change the document there |
//! | [`CPR_LIST_READ`] | a get through a β = 0% Dendrite, between reading a range's ids and reading its documents | a callback lets a write move a document there |
//! | [`CPR_LEASES_OFF`] | a Dendrite's LeMInT | `return` makes it grant every interval lease: CPR without its read-write exclusion, the broken baseline of the range race tests |
//! | [`SAS_INVALIDATIONS_DROPPED`] | an SAS AppNode receiving the core's deliveries, or changing its own copies at a commit | `return` makes it acknowledge the deliveries, and finish the commits, without changing its copies: a broken SAS, to show that the validators catch one |

/// Between querying the data store on a miss and filling the cache.
pub const FILL: &str = "cads::fill";

/// Design 1: the buffered writes are applied and deleted; their PendingWrites lines are not yet
/// removed.
pub const UNLIST: &str = "cads::apply::unlist";

/// A session's data-store transaction committed (under TARDIS's failed mode, one without
/// writes); its cache session is not committed yet.
pub const CACHE_COMMIT: &str = "cads::cache-commit";

/// A session's cache changes are staged (or its writes skipped CMIs it could not reach); its
/// data-store transaction is not committed yet.
pub const STORE_COMMIT: &str = "cads::store-commit";

/// Sessions run without leases.
pub const LEASES_OFF: &str = "cads::leases-off";

/// A write through a Dendrite by field has read the document and not yet leased its points.
pub const CPR_WRITE_LEASING: &str = "cads::cpr::write-leasing";

/// A β = 0% get has read a range's ids from PrInT and not yet its documents.
pub const CPR_LIST_READ: &str = "cads::cpr::list-read";

/// A Dendrite's LeMInT grants every lease (CPR, 002).
pub const CPR_LEASES_OFF: &str = "cads::cpr::leases-off";

/// An SAS AppNode receives a delivery from the core (deletes or new values of its copies), or
/// changes its own copies at a commit.
pub const SAS_INVALIDATIONS_DROPPED: &str = "cads::sas::invalidations-dropped";

/// Design 1: the buffered writes are rewritten in idempotent form, not yet committed.
pub const APPLY_CONVERTED: &str = "cads::apply::converted";
/// Design 1: the idempotent form is committed; it was not applied yet.
pub const APPLY_CONVERTED_COMMITTED: &str = "cads::apply::converted-committed";
/// The buffered writes (Design 1) or the batch's session objects (Design 2) are read under
/// exclusive leases; nothing was applied.
pub const APPLY_LEASED: &str = "cads::apply::leased";
/// Design 2: the batch's statements ran; its data-store transaction is not committed.
pub const APPLY_RUNNING: &str = "cads::apply::running";
/// The data store has the changes; the buffered write or session object is still in the cache.
pub const APPLY_APPLIED: &str = "cads::apply::applied";

/// The applier has built the data-store writes of the buffered writes (Design 1) or sessions
/// (Design 2) it applies.
pub const APPLY_BROKEN: &str = "cads::apply::broken";

/// A write-back session stages its buffered writes or session object on their replicas.
pub const UNREPLICATED: &str = "cads::write-back::unreplicated";

/// The replicas a write-back session writes a buffered write or session object to: all of
/// `replicas`, or with [`UNREPLICATED`] set only the one on the lowest-numbered CMI (`cmi`
/// names a replica's CMI).
#[cfg(feature = "failpoints")]
pub(crate) fn replicas_written<T>(replicas: &[T], cmi: impl Fn(&T) -> usize) -> &[T] {
    fail::fail_point!(UNREPLICATED, |_| {
        let lowest = (0..replicas.len()).min_by_key(|&i| cmi(&replicas[i]));
        lowest.map_or(replicas, |i| &replicas[i..=i])
    });
    replicas
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn replicas_written<T>(replicas: &[T], _cmi: impl Fn(&T) -> usize) -> &[T] {
    replicas
}

/// How [`APPLY_BROKEN`] breaks an applier. Each loses, repeats or reorders acknowledged writes in
/// the data store while the cache goes on as if they were applied (the buffered writes are
/// deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// Design 1: the first document's buffered write never reaches the data store. Design 2: the
    /// first session's statements are not run (its id is recorded as applied all the same).
    Drop,
    /// Design 1: every batch is written, and written again after each later batch, so an older
    /// write lands a second time after newer ones of its document (a document's own writes are
    /// idempotent). Design 2: the first session's UPDATE statements run twice (a second INSERT
    /// the data store's keys would refuse, a catch of its own).
    Twice,
    /// Two writes applied out of order, each once: the applier holds one write back and applies
    /// it last, when a drain finds nothing else to apply, after every newer write of its
    /// document. Design 1: the first document of the first batch. Design 2: the first session
    /// with a change guarded by what it read (New-Order's next order id), whose place in its
    /// queue matters; sessions whose changes commute with the others' (deltas, inserts) may run
    /// in any order, and delaying one is no bug. One write per run (until the point is cleared).
    Reorder,
}

impl Broken {
    pub fn parse(name: &str) -> Option<Broken> {
        match name {
            "drop" => Some(Broken::Drop),
            "twice" => Some(Broken::Twice),
            "reorder" => Some(Broken::Reorder),
            _ => None,
        }
    }
}

/// What a broken applier keeps between batches. Type-erased: Design 1 keeps document writes,
/// Design 2 statements.
#[cfg(feature = "failpoints")]
mod kept {
    use std::any::Any;
    use std::sync::{Mutex, MutexGuard};

    /// A write or session held back by a `reorder` applier.
    pub(super) enum Delayed {
        Held(Box<dyn Any + Send>),
        /// Applied: the run has had its reordered write.
        Released,
    }

    /// What a `twice` applier wrote so far.
    pub(super) static LATER: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
    /// A `reorder` applier's write, before and after it is applied.
    pub(super) static DELAYED: Mutex<Option<Delayed>> = Mutex::new(None);

    pub(super) fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn forget() {
        lock(&LATER).take();
        lock(&DELAYED).take();
    }
}

/// How [`APPLY_BROKEN`] says to break the applier that reached it, if it is set.
#[cfg(feature = "failpoints")]
fn broken_applier() -> Option<Broken> {
    fail::fail_point!(APPLY_BROKEN, |arg: Option<String>| arg
        .as_deref()
        .and_then(Broken::parse));
    forget_broken_applier();
    None
}

/// Forgets what a broken applier kept: set again (or cleared), [`APPLY_BROKEN`] starts another
/// run, perhaps on another data store, where a held write of the last one does not belong.
#[cfg(feature = "failpoints")]
pub fn forget_broken_applier() {
    kept::forget();
}

/// A `reorder` applier holds `writes` back, if it has not held a write in this run yet; gives
/// them back otherwise.
#[cfg(feature = "failpoints")]
fn delay<W: Send + 'static>(writes: Vec<W>) -> Result<(), Vec<W>> {
    let mut delayed = kept::lock(&kept::DELAYED);
    if delayed.is_some() {
        return Err(writes);
    }
    *delayed = Some(kept::Delayed::Held(Box::new(writes)));
    Ok(())
}

/// The writes a `reorder` applier held back, if they are of type `W` and not applied yet: the
/// caller applies them now.
#[cfg(feature = "failpoints")]
pub(crate) fn take_delayed<W: 'static>() -> Vec<W> {
    let mut delayed = kept::lock(&kept::DELAYED);
    match delayed.take() {
        Some(kept::Delayed::Held(held)) => match held.downcast::<Vec<W>>() {
            Ok(writes) => {
                *delayed = Some(kept::Delayed::Released);
                *writes
            }
            Err(other) => {
                *delayed = Some(kept::Delayed::Held(other));
                Vec::new()
            }
        },
        other => {
            *delayed = other;
            Vec::new()
        }
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn take_delayed<W>() -> Vec<W> {
    Vec::new()
}

/// Breaks the statements of a Design 2 applier's batch of sessions (in queue order) as
/// [`APPLY_BROKEN`] says, if it is set. `statements` gives a session's statements.
#[cfg(feature = "failpoints")]
pub(crate) fn break_sessions<S>(
    sessions: &mut [S],
    statements: impl Fn(&mut S) -> &mut Vec<crate::Statement>,
) {
    let Some(broken) = broken_applier() else {
        return;
    };
    let Some(first) = sessions.first_mut().map(&statements) else {
        return;
    };
    match broken {
        Broken::Drop => first.clear(),
        Broken::Twice => {
            let updates: Vec<crate::Statement> = first
                .iter()
                .filter(|s| {
                    s.sql
                        .trim_start()
                        .get(..6)
                        .is_some_and(|verb| verb.eq_ignore_ascii_case("update"))
                })
                .cloned()
                .collect();
            first.extend(updates);
        }
        Broken::Reorder => {
            let guarded = sessions
                .iter_mut()
                .map(statements)
                .find(|statements| statements.iter().any(|s| s.rows.is_some()));
            if let Some(guarded) = guarded {
                if let Err(back) = delay(std::mem::take(guarded)) {
                    *guarded = back;
                }
            }
        }
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn break_sessions<S>(
    _sessions: &mut [S],
    _statements: impl Fn(&mut S) -> &mut Vec<crate::Statement>,
) {
}

/// Breaks a Design 1 applier's data-store writes as [`APPLY_BROKEN`] says, if it is set.
/// `doc_of` names a write's document.
#[cfg(feature = "failpoints")]
pub(crate) fn break_applier<W: Clone + Send + 'static>(
    writes: &mut Vec<W>,
    doc_of: impl Fn(&W) -> String,
) {
    let Some(broken) = broken_applier() else {
        return;
    };
    let Some(first) = writes.first().map(&doc_of) else {
        // Nothing applied now: nothing to break (and a replay alone would put things right).
        return;
    };
    match broken {
        Broken::Drop => writes.retain(|w| doc_of(w) != first),
        Broken::Twice => {
            let mut later = kept::lock(&kept::LATER);
            let earlier: Vec<W> = later
                .take()
                .and_then(|b| b.downcast::<Vec<W>>().ok())
                .map_or_else(Vec::new, |b| *b);
            let mut written = earlier.clone();
            written.extend(writes.iter().cloned());
            writes.extend(earlier);
            *later = Some(Box::new(written));
        }
        Broken::Reorder => {
            let (held, rest): (Vec<W>, Vec<W>) = std::mem::take(writes)
                .into_iter()
                .partition(|w| doc_of(w) == first);
            *writes = rest;
            if let Err(back) = delay(held) {
                writes.extend(back);
            }
        }
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn break_applier<W>(_writes: &mut Vec<W>, _doc_of: impl Fn(&W) -> String) {}

/// Every step of an applier where it can be made to die, in the order an apply reaches them.
pub const APPLY_STEPS: [&str; 5] = [
    APPLY_LEASED,
    APPLY_RUNNING,
    APPLY_APPLIED,
    APPLY_CONVERTED,
    APPLY_CONVERTED_COMMITTED,
];

#[cfg(feature = "failpoints")]
thread_local! {
    /// Set by [`die`] from a callback; read and cleared by the applier that evaluated the point.
    static DYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From a callback configured on one of [`APPLY_STEPS`]: the applier that reached the point dies
/// there. Lets a test decide per call (a seeded roll, only background workers, at most so many).
#[cfg(feature = "failpoints")]
pub fn die() {
    DYING.with(|d| d.set(true));
}

/// Whether the applier reaching `point` is to die there.
#[cfg(feature = "failpoints")]
pub(crate) fn dies_at(point: &str) -> bool {
    fail::fail_point!(point, |_| true);
    DYING.with(|d| d.replace(false))
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn dies_at(_point: &str) -> bool {
    false
}

/// Whether sessions are to run without leases.
#[cfg(feature = "failpoints")]
pub(crate) fn leases_off() -> bool {
    fail::fail_point!(LEASES_OFF, |_| true);
    false
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn leases_off() -> bool {
    false
}

/// Whether an SAS AppNode leaves its copies as they were when it is told of a write
/// ([`SAS_INVALIDATIONS_DROPPED`]).
#[cfg(feature = "failpoints")]
pub(crate) fn sas_invalidations_dropped() -> bool {
    fail::fail_point!(SAS_INVALIDATIONS_DROPPED, |_| true);
    false
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn sas_invalidations_dropped() -> bool {
    false
}

/// Whether LeMInT grants every lease ([`CPR_LEASES_OFF`]).
#[cfg(feature = "failpoints")]
pub(crate) fn cpr_leases_off() -> bool {
    fail::fail_point!(CPR_LEASES_OFF, |_| true);
    false
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn cpr_leases_off() -> bool {
    false
}

/// Between a CPR write's read of its document and its leases.
#[inline(always)]
pub(crate) fn cpr_write_leasing() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(CPR_WRITE_LEASING);
}

/// Between a β = 0% get's read of a range's ids and of its documents.
#[inline(always)]
pub(crate) fn cpr_list_read() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(CPR_LIST_READ);
}

/// The window between a miss's query and its fill.
#[inline(always)]
pub(crate) fn before_fill() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(FILL);
}

/// Between a session's pre-commit and its data-store commit.
#[inline(always)]
pub(crate) fn before_store_commit() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(STORE_COMMIT);
}

/// Between a session's data-store commit and its cache commit.
#[inline(always)]
pub(crate) fn before_cache_commit() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(CACHE_COMMIT);
}

/// After an applier's commit, before it removes the applied documents' lines.
#[inline(always)]
pub(crate) fn before_unlist() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(UNLIST);
}
