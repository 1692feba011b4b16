//! Session state is bounded: sessions, leases and tombstones are charged in bytes and capped
//! (`max_session_memory`), and no session outlives `max_session_ms`, however often it validates.

mod common;

use cads_engine::lease::{HOLD_OVERHEAD, LEASE_OVERHEAD, SESSION_OVERHEAD};
use cads_engine::EngineConfig;
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

/// What a one-key session on a two-byte key costs: the session, its hold and the key's lease.
const ONE_KEY_SESSION: usize = SESSION_OVERHEAD + (2 + HOLD_OVERHEAD) + (2 + LEASE_OVERHEAD);

#[test]
fn session_state_is_charged_and_returned() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k0 v");
    assert_eq!(cmi.engine.session_memory(), 0);
    cmi.value("LGET 1 k0");
    assert_eq!(cmi.engine.session_memory(), ONE_KEY_SESSION);
    cmi.value("LGET 2 k0");
    assert_eq!(
        cmi.engine.session_memory(),
        ONE_KEY_SESSION + SESSION_OVERHEAD + 2 + HOLD_OVERHEAD,
        "a second holder adds a session and a hold, not a lease"
    );
    // An exclusive request wounds both: two tombstones, each charged as a session.
    assert_eq!(cmi.int("LDEL 3 k0"), 1);
    assert_eq!(cmi.engine.session_counts(), (1, 2));
    assert_eq!(
        cmi.engine.session_memory(),
        ONE_KEY_SESSION + 2 * SESSION_OVERHEAD
    );
    cmi.ok("LCOMMIT 3");
    cmi.ok("LABORT 1");
    cmi.ok("LABORT 2");
    assert_eq!(cmi.engine.session_memory(), 0);
}

#[test]
fn sessions_at_the_cap_are_refused_counted_and_lose_nothing() {
    let mut cmi = Cmi::with(EngineConfig {
        max_session_memory: 3 * ONE_KEY_SESSION,
        ..EngineConfig::default()
    });
    for sid in 1..=3 {
        assert_eq!(
            cmi.int(&format!("IQGET {sid} k{sid}")),
            0,
            "a miss: I lease"
        );
    }
    let refusal = cmi.run("IQGET 4 k4");
    let Reply::Error(e) = &refusal else {
        panic!("expected a refusal, got {refusal:?}")
    };
    assert_eq!(e.kind, ErrorKind::NotStored);
    assert!(e.message.contains("too many sessions"), "{e}");
    assert_eq!(cmi.engine.stats().sessions_refused, 1);
    assert_eq!(
        cmi.engine.session_counts(),
        (3, 0),
        "the refused session was not opened"
    );
    // A session already open may not grow past the cap either, and lives on.
    assert_eq!(cmi.err("LGET 1 k9"), ErrorKind::NotStored);
    assert_eq!(cmi.engine.stats().sessions_refused, 2);
    assert!(cmi.engine.session_memory() <= 3 * ONE_KEY_SESSION);
    // The sessions that were let in finish as if nothing happened.
    for sid in 1..=3 {
        assert_eq!(cmi.int(&format!("IQSET {sid} k{sid} v{sid}")), 1);
        assert_eq!(cmi.cached(&format!("k{sid}")), Some(format!("v{sid}")));
    }
    // With room again, the refused session gets in.
    assert_eq!(cmi.int("IQGET 4 k4"), 0);
}

#[test]
fn tombstones_count_against_the_cap_until_forgotten() {
    let mut cmi = Cmi::with(EngineConfig {
        max_session_memory: 2 * ONE_KEY_SESSION,
        lease_ms: 100,
        tombstone_ms: 1_000,
        ..EngineConfig::default()
    });
    cmi.value_or_nil("LGET 1 k1");
    cmi.value_or_nil("LGET 2 k2");
    cmi.advance(100);
    assert_eq!(cmi.engine.session_counts(), (0, 2), "expired: tombstones");
    // Each tombstone still takes a session's bytes, so there is room for one new session only.
    assert_eq!(cmi.int("IQGET 3 k3"), 0);
    assert_eq!(cmi.err("IQGET 4 k4"), ErrorKind::NotStored);
    // Sessions 1 and 2 are forgotten; session 3, expired at 200 ms, is a tombstone until 1,200.
    cmi.advance(1_000);
    assert_eq!(cmi.engine.session_counts(), (0, 1));
    assert_eq!(cmi.int("IQGET 4 k4"), 0);
}

#[test]
fn an_endlessly_revalidating_session_ends_at_its_maximum_lifetime() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 500,
        max_session_ms: 2_000,
        ..EngineConfig::default()
    });
    cmi.ok("SET k v");
    assert_eq!(cmi.value("LGET 1 k"), "v");
    let mut writer = 100;
    let mut elapsed = 0;
    // Validating every 300 ms would keep the golden S lease forever; writers are refused meanwhile.
    while elapsed + 300 < 2_000 {
        cmi.advance(300);
        elapsed += 300;
        cmi.ok("LVALIDATE 1");
        writer += 1;
        assert_eq!(cmi.err(&format!("LDEL {writer} k")), ErrorKind::Abort);
    }
    cmi.advance(2_000 - elapsed);
    assert_eq!(
        cmi.err("LVALIDATE 1"),
        ErrorKind::Abort,
        "its lifetime is over"
    );
    assert_eq!(cmi.engine.stats().sessions_outlived, 1);
    // The waiting writer proceeds.
    writer += 1;
    assert_eq!(cmi.int(&format!("LDEL {writer} k")), 1);
    cmi.ok(&format!("LCOMMIT {writer}"));
    assert_eq!(cmi.cached("k"), None);
}
