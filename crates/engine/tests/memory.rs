//! Pinning, the pinned cap, eviction of unpinned entries only, and NOTSTORED that loses nothing.

mod common;

use cads_engine::{EngineConfig, ENTRY_OVERHEAD};
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

fn sized(maxmemory: usize, max_pinned_memory: usize) -> Cmi {
    Cmi::with(EngineConfig {
        maxmemory,
        max_pinned_memory,
        ..EngineConfig::default()
    })
}

/// What an entry with a 2-byte key and a 10-byte value costs.
const EACH: usize = 2 + 10 + ENTRY_OVERHEAD;
const TEN: &str = "0123456789";

#[test]
fn session_pins_and_unpins() {
    let mut cmi = sized(0, 0);
    cmi.ok(&format!("LSET 1 p1 {TEN} PIN"));
    assert_eq!(
        cmi.engine.memory().pinned,
        EACH,
        "a pinned pending version counts as pinned"
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.inspect("p1", "pinned"), Reply::Int(1));
    // Changes keep the pin (000 §5.1.1.3).
    cmi.ok("SET x 1");
    assert_eq!(cmi.int("LAPPEND 2 p1 x"), 11);
    cmi.ok("LSET 2 p1 abc");
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.inspect("p1", "pinned"), Reply::Int(1));
    assert_eq!(cmi.int("LUNPIN 3 p1"), 1);
    assert_eq!(cmi.int("LUNPIN 3 nothing"), 0);
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.inspect("p1", "pinned"), Reply::Int(0));
    assert_eq!(cmi.engine.memory().pinned, 0);
}

/// A session's appends are charged as the whole value they make, pinned as the value is, as a
/// pending copy would be (room a later rewrite of the value needs), though only the appended
/// bytes are kept until commit grows the entry by them.
#[test]
fn a_session_append_is_charged_as_the_value_it_makes() {
    let mut cmi = sized(0, 0);
    cmi.ok(&format!("LSET 1 q {TEN} PIN"));
    cmi.ok("LCOMMIT 1");
    let before = cmi.engine.memory().clone();
    let whole = 1 + 15 + ENTRY_OVERHEAD;
    assert_eq!(cmi.int("LAPPEND 2 q abc"), 13);
    assert_eq!(cmi.int("LAPPEND 2 q de"), 15);
    assert_eq!(cmi.engine.memory().used, before.used + whole);
    assert_eq!(cmi.engine.memory().pinned, before.pinned + whole);
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.cached("q"), Some(format!("{TEN}abcde")));
    assert_eq!(cmi.inspect("q", "pinned"), Reply::Int(1));
    assert_eq!(cmi.engine.memory().used, before.used + 5);
    assert_eq!(cmi.engine.memory().pinned, before.pinned + 5);

    assert_eq!(cmi.int("LAPPEND 3 q fgh"), 18);
    cmi.ok("LABORT 3");
    assert_eq!(
        cmi.engine.memory().used,
        before.used + 5,
        "an abort frees it"
    );
}

/// A session's new pending version in place of its own needs room only for what it adds, and
/// adds all of itself when it turns pinned: markers, which are never refused, may fill the pinned
/// cap, and a pinned version that stays as large or shrinks is still taken, while an unpinned one
/// turning pinned is not.
#[test]
fn a_pending_version_needs_pinned_room_only_for_what_it_adds() {
    // The pinned cap less its reserved eighth takes one entry and a marker, not two markers more.
    let mut cmi = sized(0, EACH * 2);
    cmi.ok(&format!("LSET 1 p1 {TEN} PIN"));
    cmi.ok(&format!("LSET 2 u1 {TEN}"));
    for marker in ["m1", "m2"] {
        cmi.int(&format!("QAREG 9 {marker}"));
        cmi.ok(&format!("LMARK 9 {marker}"));
    }
    cmi.ok("LCOMMIT 9");
    assert!(
        cmi.engine.memory().pinned > EACH * 2 - EACH * 2 / 8,
        "the cap is full"
    );
    cmi.ok(&format!("LSET 1 p1 {TEN} PIN"));
    cmi.ok("LSET 1 p1 012 PIN");
    assert_eq!(
        cmi.err(&format!("LSET 2 u1 {TEN} PIN")),
        ErrorKind::NotStored,
        "pinned now: all of it is new to the pinned cap"
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("p1").as_deref(), Some("012"));
}

#[test]
fn eviction_never_takes_pinned_or_leased_entries() {
    let mut cmi = sized(EACH * 3, 0);
    cmi.ok(&format!("LSET 1 p1 {TEN} PIN"));
    cmi.ok("LCOMMIT 1");
    cmi.ok(&format!("SET u1 {TEN}"));
    cmi.ok(&format!("SET u2 {TEN}"));
    cmi.value("LGET 2 u1");
    // Room for one more means evicting an unpinned entry not under a lease: only u2 qualifies.
    cmi.ok(&format!("SET u3 {TEN}"));
    assert!(cmi.cached("p1").is_some());
    assert!(cmi.cached("u1").is_some());
    assert!(cmi.cached("u2").is_none());
    assert_eq!(cmi.engine.store_stats().evicted, 1);
}

#[test]
fn full_of_pinned_answers_notstored_and_loses_nothing() {
    let mut cmi = sized(EACH * 2, 0);
    cmi.run(&format!("LMSET 1 PIN p1 {TEN} p2 {TEN}"));
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.err(&format!("SET u1 {TEN}")), ErrorKind::NotStored);
    assert_eq!(cmi.err(&format!("LSET 2 u2 {TEN}")), ErrorKind::NotStored);
    // The session lives on after NOTSTORED; it can still abort or do smaller things.
    assert_eq!(cmi.int("LDEL 2 p1"), 1);
    cmi.ok("LABORT 2");
    assert_eq!(
        cmi.run(&format!("LMSET 3 PIN p1 {TEN}x")),
        Reply::Array(vec![Reply::Error(cads_protocol::ErrorReply::not_stored())])
    );
    cmi.ok("LABORT 3");
    assert_eq!(cmi.cached("p1").as_deref(), Some(TEN));
    assert_eq!(cmi.cached("p2").as_deref(), Some(TEN));
    assert!(cmi.engine.store_stats().refused >= 3);
}

#[test]
fn the_pinned_cap_leaves_room_for_plain_entries() {
    // Two pinned entries fit short of the cap's reserve (an eighth), a third does not.
    let mut cmi = sized(EACH * 4, EACH * 5 / 2);
    cmi.run(&format!("LMSET 1 PIN p1 {TEN} p2 {TEN}"));
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.err(&format!("LSET 2 p3 {TEN} PIN")),
        ErrorKind::NotStored
    );
    cmi.ok("LABORT 2");
    cmi.ok(&format!("SET u1 {TEN}"));
    cmi.ok(&format!("SET u2 {TEN}"));
    assert_eq!(cmi.engine.memory().pinned, EACH * 2);
}

/// A buffered write replaced by its idempotent form just before it is applied (PINRESERVE) may
/// use the reserve, so that a cache full of buffered writes can still apply and delete them.
#[test]
fn the_pinned_reserve_takes_replacements_that_ordinary_pinned_writes_cannot() {
    // A cap of eight entries keeps one back: seven fit.
    let mut cmi = sized(EACH * 10, EACH * 8);
    let pairs: Vec<String> = (0..7).map(|i| format!("p{i} {TEN}")).collect();
    cmi.run(&format!("LMSET 1 PIN {}", pairs.join(" ")));
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.err(&format!("LSET 2 p0 {TEN} PIN")),
        ErrorKind::NotStored,
        "the replacement's pending version would eat into the reserve"
    );
    cmi.ok("LABORT 2");
    let other = "b".repeat(10);
    cmi.ok(&format!("LSET 3 p0 {other} PINRESERVE"));
    assert_eq!(
        cmi.err(&format!("LSET 3 p1 {other} PINRESERVE")),
        ErrorKind::NotStored,
        "the whole cap still holds"
    );
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.cached("p0").as_deref(), Some(other.as_str()));
    assert_eq!(cmi.engine.memory().pinned, EACH * 7);
}

#[test]
fn pending_versions_count_against_memory() {
    let mut cmi = sized(EACH * 2, 0);
    cmi.ok(&format!("SET u1 {TEN}"));
    cmi.ok(&format!("LSET 1 u1 {TEN}"));
    assert_eq!(cmi.engine.memory().used, EACH * 2);
    // The original is leased and the pending version is not an entry: neither can be evicted.
    assert_eq!(cmi.err(&format!("SET u2 {TEN}")), ErrorKind::NotStored);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.engine.memory().used, EACH);
    cmi.ok(&format!("SET u2 {TEN}"));
}

#[test]
fn lowering_maxmemory_evicts_at_once() {
    let mut cmi = sized(0, 0);
    for i in 0..10 {
        cmi.ok(&format!("SET k{i} {TEN}"));
    }
    cmi.engine.set_maxmemory(EACH * 3);
    assert!(cmi.engine.memory().used <= EACH * 3);
    assert_eq!(cmi.engine.key_count(), 3);
    cmi.engine.check_invariants();
}

#[test]
fn mset_is_all_or_nothing_on_memory() {
    let mut cmi = sized(EACH * 2, 0);
    cmi.ok(&format!("LSET 1 p1 {TEN} PIN"));
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.err(&format!("MSET a1 {TEN} a2 {TEN}")),
        ErrorKind::NotStored
    );
    assert_eq!(cmi.cached("a1"), None);
}

/// A swap (SAR) replaces the cached value: a same-size swap in a full cache fits without
/// evicting anything. It used to be staged as a pending version beside the old value first, so it
/// evicted an entry for nothing, or was refused when nothing could be evicted.
#[test]
fn a_swap_needs_room_only_for_what_it_adds() {
    let mut cmi = sized(EACH * 3, 0);
    cmi.ok(&format!("SET k0 {TEN}"));
    cmi.ok(&format!("SET k1 {TEN}"));
    cmi.ok(&format!("SET k2 {TEN}"));
    cmi.int("QAREG 1 k0");
    cmi.ok("SAR 1 k0 9876543210");
    assert_eq!(cmi.engine.store_stats().evicted, 0, "nothing evicted");
    // With every other entry leased, nothing can be evicted, and the swap still fits.
    cmi.value("LGET 2 k1");
    cmi.value("LGET 2 k2");
    cmi.int("QAREG 1 k0");
    cmi.ok(&format!("SAR 1 k0 {TEN}"));
    assert_eq!(cmi.cached("k0").as_deref(), Some(TEN));
    // A swap that grows past what is left is refused and changes nothing.
    cmi.int("QAREG 1 k0");
    assert_eq!(cmi.err(&format!("SAR 1 k0 {TEN}x")), ErrorKind::NotStored);
    assert_eq!(cmi.cached("k0").as_deref(), Some(TEN));
    assert_eq!(cmi.inspect("k0", "lease"), Reply::status("exclusive"));
}
