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
//! | [`APPLY_BROKEN`] | a write-back applier, once it knows what it will write to the data store | `return(drop)` or `return(twice)` makes it a broken applier ([`Broken`]), to show that the benchmarks' validation catches one |
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

/// How [`APPLY_BROKEN`] breaks an applier. Each loses or repeats acknowledged writes in the data
/// store while the cache goes on as if they were applied (the buffered writes are deleted).
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
}

impl Broken {
    pub fn parse(name: &str) -> Option<Broken> {
        match name {
            "drop" => Some(Broken::Drop),
            "twice" => Some(Broken::Twice),
            _ => None,
        }
    }
}

/// How [`APPLY_BROKEN`] says to break the applier that reached it, if it is set.
#[cfg(feature = "failpoints")]
fn broken_applier() -> Option<Broken> {
    fail::fail_point!(APPLY_BROKEN, |arg: Option<String>| arg
        .as_deref()
        .and_then(Broken::parse));
    None
}

/// Breaks the statements of the first session of a Design 2 applier's batch as [`APPLY_BROKEN`]
/// says, if it is set.
#[cfg(feature = "failpoints")]
pub(crate) fn break_session(statements: &mut Vec<crate::Statement>) {
    match broken_applier() {
        None => {}
        Some(Broken::Drop) => statements.clear(),
        Some(Broken::Twice) => {
            let updates: Vec<crate::Statement> = statements
                .iter()
                .filter(|s| {
                    s.sql
                        .trim_start()
                        .get(..6)
                        .is_some_and(|verb| verb.eq_ignore_ascii_case("update"))
                })
                .cloned()
                .collect();
            statements.extend(updates);
        }
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn break_session(_statements: &mut Vec<crate::Statement>) {}

/// Breaks a Design 1 applier's data-store writes as [`APPLY_BROKEN`] says, if it is set.
/// `doc_of` names a write's document.
#[cfg(feature = "failpoints")]
pub(crate) fn break_applier<W: Clone + Send + 'static>(
    writes: &mut Vec<W>,
    doc_of: impl Fn(&W) -> String,
) {
    use std::any::Any;
    use std::sync::Mutex;
    /// What a `twice` applier wrote so far.
    static LATER: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);

    let Some(broken) = broken_applier() else {
        // A run without the point forgets what a broken one wrote (it wrote to another store,
        // perhaps).
        LATER.lock().unwrap_or_else(|e| e.into_inner()).take();
        return;
    };
    if writes.is_empty() {
        // Nothing applied now: nothing to break (and a replay alone would put things right).
        return;
    }
    let mut later = LATER.lock().unwrap_or_else(|e| e.into_inner());
    let earlier: Vec<W> = later
        .take()
        .and_then(|b| b.downcast::<Vec<W>>().ok())
        .map_or_else(Vec::new, |b| *b);
    match broken {
        Broken::Drop => {
            if let Some(first) = writes.first().map(&doc_of) {
                writes.retain(|w| doc_of(w) != first);
            }
        }
        Broken::Twice => {
            let mut written = earlier.clone();
            written.extend(writes.iter().cloned());
            writes.extend(earlier);
            *later = Some(Box::new(written));
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
