//! IQ leases as a one-key session, markers reported with every I and Q grant (000 §4.4.2.2),
//! Gemini's ISET and IDELETE (004 Algorithms 1 and 3), and configuration ids (004 §3.2.4).

mod common;

use cads_engine::{EngineConfig, ENTRY_OVERHEAD};
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

#[test]
fn read_modify_write_under_q() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    assert_eq!(
        cmi.run("QAREAD 1 k"),
        Reply::Array(vec![Reply::owned_bulk(b"1".to_vec()), Reply::Int(0)])
    );
    cmi.ok("SAR 1 k 2");
    assert_eq!(cmi.cached("k").as_deref(), Some("2"));
    assert_eq!(
        cmi.engine.session_counts(),
        (0, 0),
        "the last release ends the session"
    );
    assert_eq!(
        cmi.err("SAR 1 k 3"),
        ErrorKind::Abort,
        "no Q lease any more"
    );
}

#[test]
fn markers_are_reported_with_i_and_q_grants() {
    let mut cmi = Cmi::wt();
    cmi.int("QAREG 1 k");
    cmi.ok("SAR 1 k v MARK");
    assert_eq!(cmi.inspect("k", "marker"), Reply::Int(1));
    // A hit needs no lease; the marker matters to whoever must go to the data store.
    assert_eq!(cmi.value("IQGET 2 k"), "v");
    assert_eq!(cmi.int("DEL k"), 1);
    assert_eq!(cmi.int("IQGET 2 k"), 1, "the I lease reports the marker");
    assert_eq!(
        cmi.inspect("k", "marker"),
        Reply::Int(1),
        "a deleted value keeps its marker"
    );
    cmi.ok("LUNMARK 2 k");
    assert_eq!(cmi.int("IQSET 2 k fresh"), 1);
    assert_eq!(
        cmi.inspect("k", "marker"),
        Reply::Int(0),
        "cleared by the committing reader"
    );
    assert_eq!(cmi.int("QAREG 3 k"), 0);
    cmi.ok("DAR 3 k MARK");
    assert_eq!(cmi.int("QAREG 4 k"), 1);
    cmi.ok("DAR 4 k UNMARK");
    assert_eq!(cmi.engine.marker_count(), 0);
    assert_eq!(cmi.engine.memory().used, 0);
}

#[test]
fn session_reads_report_markers_with_lmgetmark() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET hit v");
    cmi.run("LMGET 1 RMW hit miss");
    cmi.ok("LMARK 1 hit");
    cmi.ok("LMARK 1 miss");
    assert_eq!(cmi.err("LMARK 1 plain"), ErrorKind::Err, "no lease on it");
    cmi.ok("LCOMMIT 1");
    let marked = |value: Reply<'static>, marker| Reply::Array(vec![value, Reply::Int(marker)]);
    assert_eq!(
        cmi.run("LMGETMARK 2 RO hit miss other"),
        Reply::Array(vec![
            marked(Reply::owned_bulk(b"v".to_vec()), 1),
            marked(Reply::Nil, 1),
            marked(Reply::Nil, 0),
        ]),
        "hits and misses report their markers; LMGET's items stay plain values"
    );
    assert_eq!(
        cmi.run("LMGET 3 RO hit"),
        Reply::Array(vec![Reply::owned_bulk(b"v".to_vec())])
    );
    cmi.ok("LCOMMIT 3");
    cmi.ok("LUNMARK 2 miss");
    assert_eq!(cmi.inspect("miss", "marker"), Reply::Int(1), "staged");
    cmi.ok("LCOMMIT 2");
    assert_eq!(
        cmi.inspect("miss", "marker"),
        Reply::Int(0),
        "cleared by the reader's commit"
    );
    assert_eq!(cmi.inspect("hit", "marker"), Reply::Int(1));
}

/// 004 Algorithm 3: a dirty key is deleted with the I lease taken (ISET), then overwritten from the
/// secondary (IQSET) or left missing (IDELETE); a writer's Q lease in between voids the fill.
#[test]
fn iset_deletes_under_an_i_lease_and_idelete_releases_it() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k stale");
    assert_eq!(cmi.int("ISET 1 k"), 0, "granted; no marker");
    assert_eq!(cmi.cached("k"), None, "deleted at once");
    assert_eq!(
        cmi.err("IQGET 2 k"),
        ErrorKind::Retry,
        "one filler at a time"
    );
    cmi.ok("LABORT 2");
    assert_eq!(cmi.int("IQSET 1 k fresh"), 1);
    assert_eq!(cmi.cached("k").as_deref(), Some("fresh"));
    assert_eq!(
        cmi.engine.session_counts(),
        (0, 0),
        "the fill ended the session"
    );

    assert_eq!(cmi.int("ISET 3 k"), 0);
    assert_eq!(cmi.int("IDELETE 3 k"), 1, "released without a value");
    assert_eq!(cmi.cached("k"), None);
    assert_eq!(cmi.int("IDELETE 3 k"), 0, "nothing left to release");
    assert_eq!(cmi.int("IQGET 4 k"), 0, "the lease is free again");
    cmi.ok("LABORT 4");

    // A writer between ISET and IQSET: the fill is refused, the writer's value stays.
    assert_eq!(cmi.int("ISET 5 k"), 0);
    assert_eq!(cmi.int("QAREG 6 k"), 0);
    cmi.ok("SAR 6 k written");
    assert_eq!(cmi.int("IQSET 5 k old"), 0);
    assert_eq!(cmi.cached("k").as_deref(), Some("written"));

    // A buffered write is never dropped by a repair.
    cmi.run("LMGET 7 RMW p");
    cmi.ok("LSET 7 p buffered PIN");
    cmi.ok("LCOMMIT 7");
    assert_eq!(cmi.err("ISET 8 p"), ErrorKind::Err);
    assert_eq!(cmi.cached("p").as_deref(), Some("buffered"));
}

#[test]
fn an_expired_i_lease_ignores_the_late_fill() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 50,
        ..EngineConfig::default()
    });
    assert_eq!(cmi.int("IQGET 1 k"), 0);
    cmi.advance(50);
    assert_eq!(cmi.int("IQGET 2 k"), 0, "the lease is free again");
    assert_eq!(cmi.int("IQSET 1 k late"), 0);
    assert_eq!(cmi.int("IQSET 2 k v"), 1);
    assert_eq!(cmi.cached("k").as_deref(), Some("v"));
}

#[test]
fn an_expired_q_lease_deletes_the_key() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 50,
        ..EngineConfig::default()
    });
    cmi.ok("SET k old");
    cmi.int("QAREG 1 k");
    cmi.advance(50);
    assert_eq!(
        cmi.cached("k"),
        None,
        "004 §2.3: when a Q lease times out, the entry is deleted"
    );
    assert_eq!(cmi.err("DAR 1 k"), ErrorKind::Abort);
}

#[test]
fn entries_older_than_their_fragment_read_as_misses() {
    let mut cmi = Cmi::wt();
    cmi.ok("CONFIGID 100");
    cmi.ok("FRAGMENTS 4");
    // A CMI of a Gemini configuration serves keys under a lease from the coordinator.
    cmi.ok("INSTANCELEASE 999999999999");
    cmi.ok("SET a 1");
    cmi.ok("SET b 1");
    assert_eq!(cmi.inspect("a", "config-id"), Reply::Int(100));
    let fa = cads_protocol::fragment::fragment_of(b"a", 4);
    let fb = cads_protocol::fragment::fragment_of(b"b", 4);
    assert_ne!(fa, fb, "the test needs the keys in different fragments");
    cmi.ok(&format!("FRAGMENTID {fa} 101"));
    assert_eq!(cmi.int(&format!("FRAGMENTID {fa}")), 101);
    assert_eq!(cmi.cached("a"), None);
    assert_eq!(cmi.cached("b").as_deref(), Some("1"));
    assert_eq!(
        cmi.int("IQGET 1 a"),
        0,
        "an obsolete entry is a miss for IQ reads too"
    );
    cmi.ok("CONFIGID 101");
    assert_eq!(cmi.int("IQSET 1 a 2"), 1);
    assert_eq!(
        cmi.cached("a").as_deref(),
        Some("2"),
        "rewritten under the new id"
    );
    assert_eq!(cmi.engine.store_stats().discarded, 1);
    // A session's read of an obsolete entry reclaims it too, and counts it.
    let keys_before = cmi.engine.key_count();
    cmi.ok(&format!("FRAGMENTID {fb} 101"));
    assert_eq!(cmi.run("LMGET 3 RO b"), Reply::Array(vec![Reply::Nil]));
    assert_eq!(cmi.engine.store_stats().discarded, 2);
    assert_eq!(cmi.engine.key_count(), keys_before - 1);
    cmi.ok("LABORT 3");
    assert_eq!(
        cmi.err_text("CONFIGID 7"),
        "ERR configuration id must not decrease"
    );
    assert_eq!(cmi.err_text("FRAGMENTID 4 1"), "ERR fragment out of range");

    // A pinned entry (a buffered write) is never discarded with its fragment.
    let pinned = (0..)
        .map(|i| format!("p{i}"))
        .find(|k| cads_protocol::fragment::fragment_of(k.as_bytes(), 4) == fa)
        .unwrap();
    cmi.run(&format!("LMGET 2 RMW {pinned}"));
    cmi.ok(&format!("LSET 2 {pinned} buffered PIN"));
    cmi.ok("LCOMMIT 2");
    cmi.ok(&format!("FRAGMENTID {fa} 200"));
    assert_eq!(cmi.cached("a"), None, "the cached value goes");
    assert_eq!(
        cmi.cached(&pinned).as_deref(),
        Some("buffered"),
        "the buffered write stays"
    );
    assert_eq!(cmi.int("CONFIGID"), 101);
    assert_eq!(cmi.int("FRAGMENTS"), 4);
}

/// Pins are sticky: a fill over a pinned value (a session can hold a shared lease on one) keeps
/// it pinned. IQSET used to store its value unpinned, so the buffered write it replaced could be
/// evicted.
#[test]
fn a_fill_over_a_pinned_value_keeps_the_pin() {
    let mut cmi = Cmi::wt();
    cmi.ok("LSET 1 k buffered PIN");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.value("LGET 2 k"), "buffered");
    assert_eq!(cmi.int("IQSET 2 k filled"), 1);
    assert_eq!(cmi.cached("k").as_deref(), Some("filled"));
    assert_eq!(cmi.inspect("k", "pinned"), Reply::Int(1));
}

/// A value filled by IQSET while another session still holds a shared lease on the key stays
/// under that lease: it is no eviction candidate until the lease ends, when it becomes the most
/// recently used entry.
#[test]
fn a_fill_stays_out_of_eviction_while_another_session_holds_the_key() {
    // Room for two entries of a 2-byte key and a 10-byte value.
    let mut cmi = Cmi::with(EngineConfig {
        maxmemory: 2 * (2 + 10 + ENTRY_OVERHEAD),
        ..EngineConfig::default()
    });
    // A repair (ISET, then IQSET) of a key a reading session holds.
    cmi.ok("SET k0 stale");
    assert_eq!(cmi.value("LGET 2 k0"), "stale");
    assert_eq!(cmi.int("ISET 1 k0"), 0);
    assert_eq!(cmi.int("IQSET 1 k0 0123456789"), 1);
    cmi.ok("SET k1 0123456789");
    cmi.ok("SET k2 0123456789");
    assert_eq!(cmi.cached("k0").as_deref(), Some("0123456789"));
    assert_eq!(
        cmi.cached("k1"),
        None,
        "evicted in place of the leased fill"
    );
    cmi.ok("LCOMMIT 2");
    cmi.ok("SET k3 0123456789");
    assert_eq!(cmi.cached("k2"), None, "older than the released fill");
    assert_eq!(cmi.cached("k0").as_deref(), Some("0123456789"));
}

/// IDELETE releases only an I lease the session holds on that very key: a live session asking
/// for another key, or for a key it holds under a Q lease, gets 0 and its leases stay.
#[test]
fn idelete_releases_nothing_but_the_sessions_i_lease_on_the_key() {
    let mut cmi = Cmi::wt();
    assert_eq!(cmi.int("IQGET 1 a"), 0);
    assert_eq!(cmi.int("IDELETE 1 b"), 0, "session 1 holds no lease on b");
    assert_eq!(cmi.int("QAREG 2 q"), 0);
    assert_eq!(cmi.int("IDELETE 2 q"), 0, "a Q lease is no I lease");
    assert_eq!(cmi.engine.lease_count(), 2, "both leases stay");
    assert_eq!(cmi.int("IDELETE 1 a"), 1);
    assert_eq!(cmi.engine.lease_count(), 1);
}
