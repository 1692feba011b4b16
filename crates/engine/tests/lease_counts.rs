//! The lease table's bookkeeping at exact values: every statistic INFO reports counted once per
//! event, the session-memory cap reached exactly, a session cut short by its lifetime only when
//! the lifetime ends before its lease, and which lease requests count as conflicts on a key.
//! cargo-mutants found these untested (docs/MUTANTS.md): an off-by-one or a lost count here
//! changed no other test's outcome.

mod common;

use cads_engine::lease::{HOLD_OVERHEAD, LEASE_OVERHEAD, SESSION_OVERHEAD};
use cads_engine::EngineConfig;
use cads_protocol::ErrorKind;
use common::Cmi;

/// What a one-key session on a two-byte key costs: the session, its hold and the key's lease.
const ONE_KEY_SESSION: usize = SESSION_OVERHEAD + (2 + HOLD_OVERHEAD) + (2 + LEASE_OVERHEAD);

#[test]
fn every_grant_retry_abort_and_commit_is_counted_once() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k v");
    // An IQ miss takes an I lease; its IQSET commits the key and ends the session.
    assert_eq!(cmi.int("IQGET 1 m"), 0);
    assert_eq!(cmi.int("IQSET 1 m x"), 1);
    // A session's S lease, committed.
    assert_eq!(cmi.value("LGET 2 k"), "v");
    cmi.ok("LCOMMIT 2");
    // An older writer waits for a younger holder: one retry, one wait.
    cmi.ok("LSET 3 k v3");
    cmi.ok("LPRIORITY 4 100");
    assert_eq!(cmi.err("LSET 4 k v4"), ErrorKind::Retry);
    cmi.ok("LCOMMIT 3");
    // The key is reserved for the waiter: a newcomer without a ticket is aborted.
    assert_eq!(cmi.err("LSET 5 k v5"), ErrorKind::Abort);
    cmi.ok("LSET 4 k v4");
    cmi.ok("LCOMMIT 4");
    let stats = cmi.engine.stats();
    assert_eq!(
        stats.leases_granted, 4,
        "I, S, X of session 3, X of session 4"
    );
    assert_eq!(stats.retries, 1);
    assert_eq!(stats.lease_waits, 1);
    assert_eq!(stats.sessions_aborted, 1, "session 5");
    assert_eq!(stats.sessions_committed, 4, "an IQSET and three LCOMMITs");
    assert_eq!(cmi.cached("k").as_deref(), Some("v4"));
}

#[test]
fn the_session_memory_cap_admits_a_session_that_reaches_it_exactly() {
    let mut cmi = Cmi::with(EngineConfig {
        max_session_memory: 2 * ONE_KEY_SESSION,
        ..EngineConfig::default()
    });
    cmi.ok("SET k1 v");
    cmi.ok("SET k2 v");
    assert_eq!(cmi.value("LGET 1 k1"), "v");
    assert_eq!(cmi.value("LGET 2 k2"), "v", "exactly at the cap");
    assert_eq!(cmi.engine.session_memory(), 2 * ONE_KEY_SESSION);
    assert_eq!(cmi.engine.stats().sessions_refused, 0);
    // Lowered below what the sessions hold (CONFIG SET): requests that add nothing go on.
    cmi.engine.set_max_session_memory(1);
    assert_eq!(
        cmi.value("LGET 1 k1"),
        "v",
        "a lease the session holds already"
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.engine.stats().sessions_refused, 0);
}

/// An exclusive request over another session's S lease wounds it and adds a hold of its own:
/// that hold is charged before anything changes, so at the cap the request is refused and the
/// reader lives on.
#[test]
fn a_wounding_request_is_charged_for_its_hold() {
    let hold = 1 + HOLD_OVERHEAD;
    for (room, admitted) in [(hold - 1, false), (hold, true)] {
        let mut cmi = Cmi::with(EngineConfig {
            // The reader's session, hold and lease, then room for the writer's session and hold.
            max_session_memory: (SESSION_OVERHEAD + hold + 1 + LEASE_OVERHEAD)
                + SESSION_OVERHEAD
                + room,
            ..EngineConfig::default()
        });
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        if admitted {
            assert_eq!(cmi.int("LDEL 2 k"), 1);
            assert_eq!(
                cmi.err("LCOMMIT 1"),
                ErrorKind::Abort,
                "the reader was wounded"
            );
        } else {
            assert_eq!(cmi.err("LDEL 2 k"), ErrorKind::NotStored);
            assert_eq!(cmi.engine.stats().sessions_refused, 1);
            cmi.ok("LCOMMIT 1");
        }
    }
}

#[test]
fn a_session_is_cut_short_only_when_its_lifetime_ends_before_its_lease() {
    // (lease, lifetime, validated after, cut short): a lifetime equal to the lease is not cut
    // short; a shorter one is; a validation whose renewed lease ends exactly with the lifetime
    // is not.
    for (lease_ms, max_session_ms, validate_at, cut_short) in [
        (500, 500, None, false),
        (500, 400, None, true),
        (500, 700, Some(200), false),
    ] {
        let mut cmi = Cmi::with(EngineConfig {
            lease_ms,
            max_session_ms,
            ..EngineConfig::default()
        });
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        let mut elapsed = 0;
        if let Some(at) = validate_at {
            cmi.advance(at);
            cmi.ok("LVALIDATE 1");
            elapsed = at;
        }
        cmi.advance(max_session_ms.max(lease_ms) - elapsed);
        cmi.value("GET k");
        let stats = cmi.engine.stats();
        let case = (lease_ms, max_session_ms, validate_at);
        assert_eq!(stats.sessions_expired, 1, "{case:?}");
        assert_eq!(stats.sessions_outlived, u64::from(cut_short), "{case:?}");
    }
}

#[test]
fn wounding_a_holder_is_a_conflict_and_upgrading_ones_own_lease_is_not() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k v");
    assert_eq!(cmi.value("LGET 1 k"), "v");
    assert_eq!(cmi.int("LDEL 1 k"), 1, "S upgraded to X by its only holder");
    cmi.ok("LCOMMIT 1");
    assert!(cmi.engine.hot_keys().is_empty(), "no conflict");

    cmi.ok("SET k v");
    assert_eq!(cmi.value("LGET 2 k"), "v");
    assert_eq!(cmi.int("LDEL 3 k"), 1, "session 2 wounded");
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.engine.hot_keys(), vec![(&b"k"[..], 1)]);
}

/// INFO's command count counts every command the engine runs, refused ones included, and an IQ
/// read counts as a hit or a miss, as GET does.
#[test]
fn commands_hits_and_misses_are_counted_once_each() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k v");
    assert_eq!(cmi.value_or_nil("GET nothing"), None);
    assert_eq!(cmi.err("INCR k"), ErrorKind::Err);
    assert_eq!(cmi.int("IQGET 1 m"), 0, "a miss");
    assert_eq!(cmi.int("IQGET 2 n"), 0, "another miss");
    assert_eq!(cmi.value("IQGET 3 k"), "v", "a hit");
    let stats = cmi.engine.stats();
    assert_eq!(stats.commands, 6);
    assert_eq!(stats.misses, 3);
    assert_eq!(stats.hits, 1);
}
