//! Every cell of the two lease compatibility tables of DESIGN.md §3, in both modes where the mode
//! matters (000 Table 3.1 and Table 5.1; 000 §4.4.2.2 and 004 Table 2).

mod common;

use cads_protocol::ErrorKind;
use common::Cmi;

// ----- S/X session leases -----

#[test]
fn shared_on_shared_with_value_is_granted_in_both_modes() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        assert_eq!(cmi.value("LGET 2 k"), "v");
        assert_eq!(cmi.inspect("k", "holders"), cads_protocol::Reply::Int(2));
        cmi.ok("LCOMMIT 1");
        cmi.ok("LCOMMIT 2");
        assert_eq!(
            cmi.inspect("k", "lease"),
            cads_protocol::Reply::status("none")
        );
    }
}

#[test]
fn shared_on_shared_without_value_retries_while_the_holder_fills() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        assert_eq!(cmi.bulk("LGET 1 k"), None, "session 1 misses and fills");
        assert_eq!(cmi.err("LGET 2 k"), ErrorKind::Retry);
        assert_eq!(cmi.engine.stats().retries, 1);
        // RETRY does not end session 2.
        cmi.ok("LVALIDATE 2");
        cmi.ok("LSET 1 k v");
        cmi.ok("LCOMMIT 1");
        assert_eq!(cmi.value("LGET 2 k"), "v", "the retry now hits");
        cmi.ok("LCOMMIT 2");
    }
}

#[test]
fn shared_on_exclusive_aborts_the_requester_in_both_modes() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        cmi.int("LDEL 1 k");
        assert_eq!(cmi.err("LGET 2 k"), ErrorKind::Abort);
        // The requester is aborted as a whole: its next call is told so too.
        assert_eq!(cmi.err("LGET 2 other"), ErrorKind::Abort);
        cmi.ok("LABORT 2");
        // The holder is untouched.
        cmi.ok("LCOMMIT 1");
        assert_eq!(cmi.cached("k"), None);
    }
}

#[test]
fn exclusive_on_shared_voids_the_holders_and_is_granted() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        assert_eq!(cmi.value("LGET 2 k"), "v");
        assert_eq!(cmi.int("LDEL 3 k"), 1);
        assert_eq!(cmi.engine.stats().leases_voided, 2);
        assert_eq!(cmi.engine.stats().sessions_wounded, 2);
        // The wounded learn it at their next call.
        assert_eq!(cmi.err("LVALIDATE 1"), ErrorKind::Abort);
        assert_eq!(cmi.err("LCOMMIT 2"), ErrorKind::Abort);
        cmi.ok("LCOMMIT 3");
        assert_eq!(cmi.cached("k"), None);
    }
}

#[test]
fn exclusive_on_golden_shared_aborts_the_requester() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        cmi.ok("LVALIDATE 1");
        assert_eq!(cmi.err("LDEL 2 k"), ErrorKind::Abort);
        cmi.ok("LCOMMIT 1");
        assert_eq!(cmi.cached("k").as_deref(), Some("v"));
        assert_eq!(
            cmi.err("LDEL 2 k"),
            ErrorKind::Abort,
            "2 is a tombstone now"
        );
        cmi.ok("LABORT 2");
        assert_eq!(cmi.int("LDEL 2 k"), 1, "after LABORT the id starts afresh");
    }
}

#[test]
fn exclusive_on_exclusive_is_shared_in_write_around() {
    let mut cmi = Cmi::wa();
    cmi.ok("SET k v");
    assert_eq!(cmi.int("LDEL 1 k"), 1);
    assert_eq!(cmi.int("LDEL 2 k"), 1);
    assert_eq!(cmi.inspect("k", "holders"), cads_protocol::Reply::Int(2));
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k"), None);
    assert_eq!(
        cmi.inspect("k", "lease"),
        cads_protocol::Reply::status("exclusive")
    );
    cmi.ok("LCOMMIT 2");
    assert_eq!(
        cmi.inspect("k", "lease"),
        cads_protocol::Reply::status("none")
    );
}

#[test]
fn exclusive_on_exclusive_aborts_the_requester_in_write_through() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    assert_eq!(cmi.value("LGET 1 k RMW"), "1");
    assert_eq!(cmi.err("LGET 2 k RMW"), ErrorKind::Abort);
    assert_eq!(cmi.err("LSET 3 k x"), ErrorKind::Abort);
    cmi.ok("LSET 1 k 2");
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k").as_deref(), Some("2"));
}

#[test]
fn a_sessions_own_shared_lease_upgrades_to_exclusive() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    assert_eq!(cmi.value("LGET 1 k"), "1");
    assert_eq!(cmi.value("LGET 2 k"), "1");
    assert_eq!(cmi.value("LGET 1 k RMW"), "1");
    assert_eq!(
        cmi.err("LCOMMIT 2"),
        ErrorKind::Abort,
        "the other reader was voided"
    );
    assert_eq!(
        cmi.inspect("k", "lease"),
        cads_protocol::Reply::status("exclusive")
    );
    cmi.ok("LCOMMIT 1");
}

// ----- I/Q leases -----

#[test]
fn i_on_i_backs_off() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        assert_eq!(cmi.int("IQGET 1 k"), 0, "miss: I lease granted, no marker");
        assert_eq!(cmi.err("IQGET 2 k"), ErrorKind::Retry);
        assert_eq!(cmi.int("IQSET 1 k v"), 1);
        assert_eq!(cmi.value("IQGET 2 k"), "v", "after backing off, a hit");
        assert_eq!(cmi.engine.lease_count(), 0);
    }
}

#[test]
fn i_on_q_backs_off() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        assert_eq!(cmi.int("QAREG 1 k"), 0);
        assert_eq!(cmi.err("IQGET 2 k"), ErrorKind::Retry);
        cmi.ok("DAR 1 k");
        assert_eq!(cmi.int("IQGET 2 k"), 0);
    }
}

#[test]
fn q_on_i_voids_the_i_lease_and_is_granted() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        assert_eq!(cmi.int("IQGET 1 k"), 0);
        assert_eq!(cmi.int("QAREG 2 k"), 0);
        // The reader computed its value before the write: inserting it now would be stale.
        assert_eq!(cmi.int("IQSET 1 k stale"), 0);
        assert_eq!(cmi.cached("k"), None);
        cmi.ok("DAR 2 k");
        assert_eq!(cmi.cached("k"), None);
    }
}

#[test]
fn q_on_q_is_granted_in_write_around() {
    let mut cmi = Cmi::wa();
    cmi.ok("SET k v");
    assert_eq!(cmi.int("QAREG 1 k"), 0);
    assert_eq!(cmi.int("QAREG 2 k"), 0);
    cmi.ok("DAR 1 k");
    cmi.ok("DAR 2 k");
    assert_eq!(cmi.cached("k"), None);
    assert_eq!(cmi.engine.lease_count(), 0);
}

#[test]
fn q_on_q_aborts_the_requester_in_write_through() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k 1");
    assert_eq!(cmi.int("QAREG 1 k"), 0);
    assert_eq!(cmi.err("QAREG 2 k"), ErrorKind::Abort);
    cmi.ok("SAR 1 k 2");
    assert_eq!(cmi.cached("k").as_deref(), Some("2"));
}

#[test]
fn write_around_commit_deletes_under_q() {
    let mut cmi = Cmi::wa();
    cmi.ok("SET k v");
    cmi.int("QAREG 1 k");
    assert_eq!(
        cmi.cached("k").as_deref(),
        Some("v"),
        "readers still see the old value"
    );
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.cached("k"), None);
}
