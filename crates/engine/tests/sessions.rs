//! Session states (000 Figure 5.1), pending versions, wounding, golden leases, lease expiry and the
//! multi-key commands.

mod common;

use cads_engine::{EngineConfig, Mode};
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

#[test]
fn active_validated_committed() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    assert_eq!(cmi.value("LGET 1 k RMW"), "1");
    cmi.ok("LSET 1 k 2");
    cmi.ok("LVALIDATE 1");
    cmi.ok("LVALIDATE 1");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k").as_deref(), Some("2"));
    assert_eq!(
        cmi.engine.session_counts(),
        (0, 0),
        "a committed session is forgotten"
    );
    assert_eq!(
        cmi.err("LCOMMIT 1"),
        ErrorKind::Abort,
        "nothing to commit any more"
    );
}

#[test]
fn commit_without_validate_is_allowed() {
    let mut cmi = Cmi::wa();
    cmi.ok("SET k v");
    cmi.int("LDEL 1 k");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k"), None);
}

#[test]
fn client_abort_drops_pending_versions_and_leaves_no_trace() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    cmi.ok("LSET 1 k 2");
    cmi.ok("LSET 1 fresh x PIN");
    cmi.ok("LABORT 1");
    assert_eq!(cmi.cached("k").as_deref(), Some("1"));
    assert_eq!(cmi.cached("fresh"), None);
    assert_eq!(cmi.engine.session_counts(), (0, 0));
    assert_eq!(cmi.engine.lease_count(), 0);
    assert_eq!(cmi.engine.memory().pinned, 0);
    cmi.ok("LABORT 1");
}

#[test]
fn pending_versions_are_private_until_commit() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k a");
    cmi.ok("LSET 1 k b");
    assert_eq!(
        cmi.cached("k").as_deref(),
        Some("a"),
        "others see the committed value"
    );
    assert_eq!(
        cmi.value("LGET 1 k"),
        "b",
        "the session reads its own write"
    );
    assert_eq!(cmi.int("LAPPEND 1 k c"), 2);
    assert_eq!(cmi.int("LPREPEND 1 k z"), 3);
    assert_eq!(cmi.value("LGET 1 k RMW"), "zbc");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k").as_deref(), Some("zbc"));
}

/// An append to the cached value is kept apart from it until commit; whatever the session does
/// next with the key sees the two together.
#[test]
fn appends_to_the_cached_value_read_and_commit_as_one_value() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET n 1");
    assert_eq!(cmi.int("LAPPEND 1 n 2"), 2);
    assert_eq!(cmi.int("LAPPEND 1 n 3"), 3);
    assert_eq!(cmi.value("LGET 1 n"), "123");
    assert_eq!(
        cmi.cached("n").as_deref(),
        Some("1"),
        "others see the old value"
    );
    assert_eq!(cmi.int("LINCR 1 n 1"), 124);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("n").as_deref(), Some("124"));

    cmi.ok(r#"SET d {"n":1}"#);
    assert_eq!(cmi.int("LAPPEND 2 d ,"), 8);
    assert_eq!(
        cmi.int(r#"LUPDATE 2 d {"$set":{"n":2}}"#),
        0,
        "not a document now"
    );
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.cached("d"), None);

    cmi.ok("SET q a");
    assert_eq!(cmi.int("LAPPEND 3 q b"), 2);
    assert_eq!(cmi.int("LPREPEND 3 q z"), 3);
    assert_eq!(cmi.int("LAPPEND 3 q c"), 4);
    assert_eq!(cmi.value("LGET 3 q"), "zabc");
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.cached("q").as_deref(), Some("zabc"));

    assert_eq!(cmi.int("LAPPEND 4 q d"), 5);
    cmi.ok("LABORT 4");
    assert_eq!(
        cmi.cached("q").as_deref(),
        Some("zabc"),
        "an abort appends nothing"
    );
    assert_eq!(cmi.int("LAPPEND 5 q d"), 5);
    cmi.ok("LSET 5 q new");
    cmi.ok("LCOMMIT 5");
    assert_eq!(
        cmi.cached("q").as_deref(),
        Some("new"),
        "a later set replaces the append"
    );
}

#[test]
fn an_empty_pending_version_deletes_at_commit() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k a");
    assert_eq!(cmi.int("LDEL 1 k"), 1);
    assert_eq!(cmi.bulk("LGET 1 k"), None, "deleted for the session");
    assert_eq!(cmi.run("LAPPEND 1 k x"), Reply::Nil, "nothing to append to");
    assert_eq!(cmi.int("LDEL 1 k"), 0);
    assert_eq!(cmi.cached("k").as_deref(), Some("a"));
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k"), None);
}

#[test]
fn a_document_update_applies_change_operators_to_the_session_s_copy() {
    let mut cmi = Cmi::wt();
    cmi.ok(r#"SET d {"n":1,"s":"a"}"#);
    assert_eq!(
        cmi.run(r#"LUPDATE 1 missing {"$inc":{"n":1}}"#),
        Reply::Nil,
        "nothing cached, nothing to change"
    );
    assert_eq!(cmi.int(r#"LUPDATE 1 d {"$inc":{"n":1}}"#), 15);
    assert_eq!(
        cmi.cached("d").as_deref(),
        Some(r#"{"n":1,"s":"a"}"#),
        "others see the committed copy"
    );
    assert_eq!(cmi.err("LGET 2 d"), ErrorKind::Abort, "under an X lease");
    // The second change applies to the session's own version.
    assert_eq!(
        cmi.int(r#"LUPDATE 1 d [{"$set":{"t":true}},{"$unset":{"s":""}}]"#),
        16
    );
    assert_eq!(cmi.value("LGET 1 d"), r#"{"n":2,"t":true}"#);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("d").as_deref(), Some(r#"{"n":2,"t":true}"#));
    assert_eq!(cmi.cached("missing"), None);
}

#[test]
fn a_copy_that_cannot_take_a_document_update_goes_at_commit() {
    let mut cmi = Cmi::wt();
    cmi.ok(r#"SET d {"n":1}"#);
    cmi.ok("SET s abc");
    assert_eq!(
        cmi.int(r#"LUPDATE 1 d {"$push":{"n":2}}"#),
        0,
        "not an array"
    );
    assert_eq!(
        cmi.int(r#"LUPDATE 1 s {"$inc":{"n":1}}"#),
        0,
        "not a document"
    );
    assert_eq!(cmi.cached("d").as_deref(), Some(r#"{"n":1}"#));
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("d"), None);
    assert_eq!(cmi.cached("s"), None);
}

#[test]
fn a_malformed_document_update_is_refused_before_any_lease() {
    let mut cmi = Cmi::wt();
    cmi.ok(r#"SET d {"n":1}"#);
    for changes in [
        "nonsense",
        r#"{"$rename":{"n":"m"}}"#,
        r#"{"$set":{"a":1},"$set":{"b":2}}"#,
    ] {
        assert_eq!(
            cmi.err(&format!("LUPDATE 1 d {changes}")),
            ErrorKind::Err,
            "{changes}"
        );
    }
    assert_eq!(cmi.engine.lease_count(), 0);
    assert_eq!(cmi.cached("d").as_deref(), Some(r#"{"n":1}"#));
}

#[test]
fn incremental_updates_need_an_existing_value() {
    let mut cmi = Cmi::wt();
    assert_eq!(cmi.run("LINCR 1 n 5"), Reply::Nil);
    assert_eq!(cmi.run("LAPPEND 1 l x"), Reply::Nil);
    cmi.ok("LCOMMIT 1");
    cmi.ok("SET n 10");
    cmi.ok("SET s abc");
    assert_eq!(cmi.int("LINCR 2 n 5"), 15);
    assert_eq!(cmi.int("LDECR 2 n 20"), -5);
    assert_eq!(cmi.err("LINCR 2 s 1"), ErrorKind::Err, "not an integer");
    cmi.ok("SET big 9223372036854775807");
    assert_eq!(
        cmi.err_text("LINCR 2 big 1"),
        "ERR increment or decrement would overflow"
    );
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.cached("n").as_deref(), Some("-5"));
}

#[test]
fn ladd_only_adds() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k a");
    assert_eq!(cmi.int("LADD 1 k b"), 0);
    assert_eq!(cmi.int("LADD 1 j b"), 1);
    assert_eq!(cmi.int("LADD 1 j c"), 0);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k").as_deref(), Some("a"));
    assert_eq!(cmi.cached("j").as_deref(), Some("b"));
}

#[test]
fn wounded_session_loses_its_pending_versions_and_keeps_what_it_held() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET r 1");
    cmi.ok("SET w 1");
    assert_eq!(cmi.value("LGET 1 r"), "1");
    cmi.ok("LSET 1 w 2");
    cmi.int("LDEL 2 r");
    assert_eq!(cmi.err("LGET 1 x"), ErrorKind::Abort);
    // Session 1 had not validated, so it had not written the data store: w still holds what the
    // store holds, and readers keep hitting it.
    assert_eq!(cmi.cached("w").as_deref(), Some("1"));
    assert_eq!(cmi.engine.session_counts(), (1, 1));
    cmi.ok("LABORT 1");
    assert_eq!(cmi.engine.session_counts(), (1, 0));
    assert_eq!(cmi.value("LGET 3 w"), "1");
}

/// An IQ writer changes the data store under its Q leases without validating: wounded, it may
/// have written already, so the unpinned keys it held exclusively go, whichever command took them.
#[test]
fn a_wounded_iq_writer_loses_its_exclusive_keys() {
    for q_command in ["QAREG 1 q", "QAREAD 1 q"] {
        let mut cmi = Cmi::wt();
        for key in ["r", "q", "w", "p"] {
            cmi.ok(&format!("SET {key} 1"));
        }
        cmi.ok("LSET 9 pinned x PIN");
        cmi.ok("LCOMMIT 9");
        assert_eq!(cmi.value("LGET 1 r"), "1");
        cmi.ok("LSET 1 w 2");
        cmi.value("LGET 1 pinned RMW");
        granted(&mut cmi, q_command);
        cmi.int("LDEL 2 r");
        assert_eq!(cmi.err("LGET 1 x"), ErrorKind::Abort, "{q_command}");
        assert_eq!(cmi.cached("q"), None, "{q_command}");
        assert_eq!(cmi.cached("w"), None, "{q_command}");
        assert_eq!(cmi.cached("pinned").as_deref(), Some("x"), "{q_command}");
        assert_eq!(cmi.cached("p").as_deref(), Some("1"), "{q_command}");
    }
}

/// A Q lease granted by voiding other sessions' S leases (write-through), or shared with another
/// IQ writer's (write-around), makes an IQ writer too.
#[test]
fn a_q_lease_taken_by_voiding_or_joining_makes_an_iq_writer() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        for key in ["r", "q", "w"] {
            cmi.ok(&format!("SET {key} 1"));
        }
        if cmi.engine.mode() == Mode::WriteThrough {
            cmi.ok("LSET 1 w 2");
            assert_eq!(cmi.value("LGET 4 q"), "1");
        } else {
            granted(&mut cmi, "QAREG 4 q");
            cmi.int("LDEL 1 w");
        }
        assert_eq!(cmi.value("LGET 1 r"), "1");
        granted(&mut cmi, "QAREG 1 q");
        cmi.int("LDEL 2 r");
        assert_eq!(cmi.err("LGET 1 x"), ErrorKind::Abort);
        assert_eq!(cmi.cached("w"), None, "{:?}", cmi.engine.mode());
    }
}

/// A session already holding X that takes the same key's Q lease with QAREG is an IQ writer too;
/// one whose Q request was refused (RETRY: the key is reserved for an older writer) is not.
#[test]
fn only_a_granted_q_lease_makes_an_iq_writer() {
    let mut cmi = Cmi::wt();
    for key in ["r", "w"] {
        cmi.ok(&format!("SET {key} 1"));
    }
    assert_eq!(cmi.value("LGET 1 r"), "1");
    cmi.ok("LSET 1 w 2");
    granted(&mut cmi, "QAREG 1 w");
    cmi.int("LDEL 2 r");
    assert_eq!(
        cmi.cached("w"),
        None,
        "X held, then Q granted: an IQ writer"
    );

    let mut cmi = Cmi::wt();
    for key in ["r", "w", "k"] {
        cmi.ok(&format!("SET {key} 1"));
    }
    cmi.ok("LSET 1 k 2");
    cmi.ok("LPRIORITY 2 100");
    assert_eq!(cmi.err("LSET 2 k 3"), ErrorKind::Retry);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.value("LGET 5 r"), "1");
    cmi.ok("LSET 5 w 2");
    assert_eq!(cmi.err("QAREG 5 k"), ErrorKind::Retry);
    cmi.int("LDEL 6 r");
    assert_eq!(cmi.err("LGET 5 x"), ErrorKind::Abort);
    assert_eq!(
        cmi.cached("w").as_deref(),
        Some("1"),
        "no Q lease was granted"
    );
}

/// Runs an IQ command that must be granted (any reply but an error).
fn granted(cmi: &mut Cmi, line: &str) {
    let reply = cmi.run(line);
    assert!(!matches!(reply, Reply::Error(_)), "{line}: {reply:?}");
}

#[test]
fn writers_cannot_void_a_validated_reader() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    cmi.value("LGET 1 k");
    cmi.ok("LVALIDATE 1");
    assert_eq!(cmi.err("LGET 2 k RMW"), ErrorKind::Abort);
    assert_eq!(cmi.err("QAREG 3 k"), ErrorKind::Abort);
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.value("LGET 4 k RMW"), "1");
}

#[test]
fn lease_expiry_aborts_and_deletes_unpinned_exclusive_keys() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 100,
        ..EngineConfig::default()
    });
    cmi.ok("SET plain 1");
    cmi.ok("SET read 1");
    cmi.ok("LSET 9 pinned x PIN");
    cmi.ok("LCOMMIT 9");
    cmi.value("LGET 1 plain RMW");
    cmi.ok("LSET 1 plain 2");
    cmi.value("LGET 1 pinned RMW");
    cmi.value("LGET 1 read");
    cmi.ok("LVALIDATE 1");
    cmi.advance(99);
    assert_eq!(cmi.engine.session_counts(), (1, 0));
    cmi.advance(1);
    assert_eq!(cmi.engine.stats().sessions_expired, 1);
    assert_eq!(cmi.engine.stats().leases_expired, 3);
    assert_eq!(
        cmi.cached("plain"),
        None,
        "an expired X lease deletes an unpinned key"
    );
    assert_eq!(
        cmi.cached("pinned").as_deref(),
        Some("x"),
        "a pinned key is kept"
    );
    assert_eq!(
        cmi.cached("read").as_deref(),
        Some("1"),
        "an S lease changes nothing"
    );
    assert_eq!(
        cmi.err("LCOMMIT 1"),
        ErrorKind::Abort,
        "even a validated session"
    );
    assert_eq!(cmi.engine.lease_count(), 0);
}

#[test]
fn expiry_is_checked_at_each_command_too() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 100,
        ..EngineConfig::default()
    });
    cmi.value_or_nil("LGET 1 k");
    cmi.now += 100;
    // No tick ran, yet the next command sees the lease is gone.
    assert_eq!(cmi.int("IQGET 2 k"), 0);
    assert_eq!(cmi.err("LVALIDATE 1"), ErrorKind::Abort);
}

#[test]
fn tombstones_are_forgotten_after_their_time() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 100,
        tombstone_ms: 1000,
        ..EngineConfig::default()
    });
    cmi.value_or_nil("LGET 1 k");
    cmi.advance(100);
    assert_eq!(cmi.engine.session_counts(), (0, 1));
    cmi.advance(999);
    assert_eq!(cmi.engine.session_counts(), (0, 1));
    cmi.advance(1);
    assert_eq!(cmi.engine.session_counts(), (0, 0));
}

#[test]
fn multi_key_commands() {
    let mut cmi = Cmi::wt();
    cmi.ok("MSET a 1 b 2");
    assert_eq!(
        cmi.run("LMGET 1 RMW a b c"),
        Reply::Array(vec![
            Reply::owned_bulk(b"1".to_vec()),
            Reply::owned_bulk(b"2".to_vec()),
            Reply::Nil
        ])
    );
    assert_eq!(
        cmi.run("LMSET 1 NOPIN a 10 c 30"),
        Reply::Array(vec![Reply::OK, Reply::OK])
    );
    assert_eq!(
        cmi.run("LMAPPEND 1 a x b y d z"),
        Reply::Array(vec![Reply::Int(3), Reply::Int(2), Reply::Nil])
    );
    assert_eq!(
        cmi.run("LMDEL 1 b d"),
        Reply::Array(vec![Reply::Int(1), Reply::Int(0)])
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.run("MGET a b c"),
        Reply::Array(vec![
            Reply::owned_bulk(b"10x".to_vec()),
            Reply::Nil,
            Reply::owned_bulk(b"30".to_vec())
        ])
    );
}

#[test]
fn multi_get_reports_retry_per_key_and_abort_for_the_session() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET a 1");
    cmi.value_or_nil("LGET 9 filling");
    let reply = cmi.run("LMGET 1 RO a filling");
    let Reply::Array(items) = reply else {
        panic!("array expected")
    };
    assert_eq!(items[0], Reply::owned_bulk(b"1".to_vec()));
    assert!(matches!(&items[1], Reply::Error(e) if e.kind == ErrorKind::Retry));
    cmi.value("LGET 8 a RMW");
    assert_eq!(cmi.err("LMGET 2 RO b a"), ErrorKind::Abort);
    assert_eq!(
        cmi.inspect("b", "lease"),
        Reply::status("none"),
        "the abort released b"
    );
}

#[test]
fn write_around_sets_only_fill_under_the_sessions_shared_lease() {
    let mut cmi = Cmi::wa();
    assert_eq!(cmi.bulk("LGET 1 k"), None);
    cmi.ok("LSET 1 k v");
    assert_eq!(cmi.cached("k").as_deref(), Some("v"), "stored at once");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.err("LSET 2 j v"), ErrorKind::Abort, "no lease on j");
}

#[test]
fn write_through_commands_are_not_available_in_write_around() {
    let mut cmi = Cmi::wa();
    for line in [
        "LGET 1 k RMW",
        "LMGET 1 RMW k",
        "LSET 1 k v PIN",
        "LADD 1 k v",
        "LAPPEND 1 k v",
        "LPREPEND 1 k v",
        "LUPDATE 1 k {}",
        "LMAPPEND 1 k v",
        "LINCR 1 k 1",
        "LDECR 1 k 1",
        "LUNPIN 1 k",
        "QAREAD 1 k",
        "SAR 1 k v",
    ] {
        assert_eq!(cmi.err(line), ErrorKind::NotAvailable, "{line}");
    }
    assert_eq!(cmi.engine.lease_count(), 0);
}

#[test]
fn markers_are_staged_and_applied_at_commit() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k v");
    cmi.value("LGET 1 k");
    assert_eq!(
        cmi.err("LMARK 1 k"),
        ErrorKind::Err,
        "S is not enough to set"
    );
    assert_eq!(cmi.err("LMARK 1 other"), ErrorKind::Err, "no lease at all");
    cmi.value("LGET 1 k RMW");
    cmi.ok("LMARK 1 k");
    assert_eq!(
        cmi.inspect("k", "marker"),
        Reply::Int(0),
        "not before commit"
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.inspect("k", "marker"), Reply::Int(1));
    cmi.value("LGET 2 k");
    cmi.ok("LUNMARK 2 k");
    cmi.ok("LABORT 2");
    assert_eq!(
        cmi.inspect("k", "marker"),
        Reply::Int(1),
        "abort drops the change"
    );
    cmi.value("LGET 3 k");
    cmi.ok("LUNMARK 3 k");
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.inspect("k", "marker"), Reply::Int(0));
}

#[test]
fn unknown_sessions_cannot_validate_or_commit() {
    let mut cmi = Cmi::wt();
    assert_eq!(cmi.err("LVALIDATE 5"), ErrorKind::Abort);
    assert_eq!(cmi.err("LCOMMIT 5"), ErrorKind::Abort);
    cmi.ok("LABORT 5");
}

#[test]
fn plain_writes_refuse_leased_keys() {
    let mut cmi = Cmi::new(Mode::WriteThrough);
    cmi.ok("SET k v");
    cmi.value("LGET 1 k");
    for line in [
        "SET k x",
        "DEL k",
        "INCR k",
        "APPEND k x",
        "EXPIRE k 10",
        "PERSIST k",
        "MSET a 1 k 2",
    ] {
        assert_eq!(cmi.err(line), ErrorKind::Leased, "{line}");
    }
    assert_eq!(cmi.cached("a"), None, "MSET is all or nothing");
    assert_eq!(cmi.cached("k").as_deref(), Some("v"), "reads are fine");
    cmi.ok("LCOMMIT 1");
    cmi.ok("SET k x");
}

#[test]
fn validation_renews_the_leases() {
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 100,
        ..EngineConfig::default()
    });
    cmi.ok("SET k 1");
    cmi.value("LGET 1 k RMW");
    cmi.advance(90);
    cmi.ok("LVALIDATE 1");
    cmi.advance(90);
    cmi.ok("LSET 1 k 2");
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.cached("k").as_deref(),
        Some("2"),
        "180 ms after the first grant, still held"
    );
    cmi.value("LGET 2 k RMW");
    cmi.ok("LVALIDATE 2");
    cmi.advance(100);
    assert_eq!(
        cmi.err("LCOMMIT 2"),
        ErrorKind::Abort,
        "a renewed lease still expires"
    );
}

/// Golden leases are counted per key rather than found by visiting the holders; the count must
/// follow every way a shared lease becomes or stops being golden (each step also runs
/// `check_invariants`, which recounts them).
#[test]
fn golden_leases_are_counted_through_every_change() {
    let mut cmi = Cmi::wt();
    cmi.ok("MSET a 1 b 2 c 3");
    for sid in 1..=50 {
        cmi.value(&format!("LGET {sid} a"));
    }
    cmi.ok("LVALIDATE 7");
    cmi.ok("LVALIDATE 7");
    assert_eq!(cmi.err("LDEL 100 a"), ErrorKind::Abort, "7 is golden");
    // A lease taken after validation is golden at once.
    cmi.value("LGET 7 b");
    assert_eq!(cmi.err("LDEL 101 b"), ErrorKind::Abort, "b is golden too");
    // The golden holder upgrading its own lease is not stopped by itself; it wounds the others.
    assert_eq!(cmi.value("LGET 7 a RMW"), "1");
    assert_eq!(cmi.engine.stats().sessions_wounded, 49);
    assert_eq!(cmi.err("LGET 8 a"), ErrorKind::Abort);
    cmi.ok("LCOMMIT 7");
    // Committed, its leases are gone: writers get through.
    assert_eq!(cmi.int("LDEL 102 b"), 1);
    cmi.ok("LCOMMIT 102");
    // A golden holder that aborts releases its lease as well.
    cmi.value("LGET 200 c");
    cmi.value("LGET 201 c");
    cmi.ok("LVALIDATE 200");
    assert_eq!(cmi.err("LDEL 103 c"), ErrorKind::Abort);
    cmi.ok("LABORT 200");
    assert_eq!(cmi.int("LDEL 104 c"), 1, "only 201, not golden, is left");
    assert_eq!(cmi.err("LCOMMIT 201"), ErrorKind::Abort, "201 was wounded");
}

/// FLUSHALL aborts the live sessions and keeps the tombstones it finds: it used to forget them,
/// so a late call of a session the CMI had aborted started a new session under its id.
#[test]
fn flushall_keeps_the_tombstones_it_finds() {
    for unpinned in ["", " UNPINNED"] {
        let mut cmi = Cmi::wt();
        cmi.int("LDEL 1 k");
        assert_eq!(
            cmi.err("DAR 1 other"),
            ErrorKind::Abort,
            "no Q lease: aborted"
        );
        cmi.value_or_nil("LGET 2 k2");
        cmi.ok(&format!("FLUSHALL{unpinned}"));
        assert_eq!(cmi.engine.session_counts(), (0, 2));
        assert_eq!(cmi.err("LGET 1 k"), ErrorKind::Abort, "still a tombstone");
        assert_eq!(
            cmi.err("LGET 2 k"),
            ErrorKind::Abort,
            "flushed: a tombstone"
        );
    }
}
