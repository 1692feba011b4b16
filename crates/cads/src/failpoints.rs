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
//! | [`CACHE_COMMIT`] | between a session's data-store commit and its cache commit | a callback can make a CMI drop the session (`FLUSHALL UNPINNED`), so that its commit reaches some CMIs only |
//! | [`LEASES_OFF`] | every session | `return` makes sessions use the cache without leases: the broken baseline of the race tests |
//! | [`UNLIST`] | in a Design 1 applier, after its data-store commit and before it removes the applied documents from PendingWrites (TeleW): Step 6 of 000 Algorithm 6 | a callback writes to a document there, the race Step 6 must survive |
//! | [`APPLY_STEPS`] | inside a write-back applier (000 Algorithms 2 and 4) | `return` makes the applier die there (it abandons its cache session without releasing anything; its leases expire); a callback may stall it, or call [`die`] to make it die conditionally |

/// Between querying the data store on a miss and filling the cache.
pub const FILL: &str = "cads::fill";

/// Design 1: the buffered writes are applied and deleted; their PendingWrites lines are not yet
/// removed.
pub const UNLIST: &str = "cads::apply::unlist";

/// A session's data-store transaction committed (under TARDIS's failed mode, one without
/// writes); its cache session is not committed yet.
pub const CACHE_COMMIT: &str = "cads::cache-commit";

/// Sessions run without leases.
pub const LEASES_OFF: &str = "cads::leases-off";

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

/// The window between a miss's query and its fill.
#[inline(always)]
pub(crate) fn before_fill() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(FILL);
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
