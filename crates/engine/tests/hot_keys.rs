//! Hot keys (engine `contention`): ticketed sessions wait for younger holders instead of giving
//! way, reserve the key they wait for, and give way to older ones; no cycle of waits forms, and a
//! writer that keeps its ticket finishes in a bounded number of attempts.

mod common;

use cads_engine::EngineConfig;
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

#[test]
fn an_older_writer_waits_for_the_holder_and_then_wins() {
    let mut cmi = Cmi::wt();
    cmi.ok("LSET 1 k v1");
    cmi.ok("LPRIORITY 2 100");
    assert_eq!(
        cmi.err("LSET 2 k v2"),
        ErrorKind::Retry,
        "older than the holder: waits"
    );
    assert_eq!(cmi.engine.stats().lease_waits, 1);
    // Waiting does not end the session.
    cmi.ok("LVALIDATE 2");
    cmi.ok("LCOMMIT 1");
    cmi.ok("LSET 2 k v2");
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.cached("k").as_deref(), Some("v2"));
    assert_eq!(cmi.engine.stats().sessions_conflicted, 0);
}

#[test]
fn a_younger_ticketed_requester_gives_way() {
    let mut cmi = Cmi::wt();
    cmi.ok("LPRIORITY 1 100");
    cmi.ok("LSET 1 k v1");
    cmi.ok("LPRIORITY 2 200");
    let text = cmi.err_text("LSET 2 k v2");
    assert!(text.starts_with("ABORT"), "{text}");
    assert!(text.contains("lease conflict on key k"), "{text}");
    assert_eq!(cmi.engine.stats().sessions_conflicted, 1);
    cmi.ok("LCOMMIT 1");
}

#[test]
fn equal_tickets_are_ordered_by_session_id() {
    let mut cmi = Cmi::wt();
    cmi.ok("LPRIORITY 5 100");
    cmi.ok("LSET 5 k v");
    cmi.ok("LPRIORITY 4 100");
    assert_eq!(cmi.err("LSET 4 k w"), ErrorKind::Retry);
    cmi.ok("LPRIORITY 6 100");
    assert_eq!(cmi.err("LSET 6 k w"), ErrorKind::Abort);
}

/// Readers do not wait, ticket or not: the writer's commit changes or deletes the value anyway.
#[test]
fn a_reader_gives_way_to_a_writer_even_with_a_ticket() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k old");
        cmi.int("LDEL 1 k");
        cmi.ok("LPRIORITY 2 7");
        assert_eq!(cmi.err("LGET 2 k"), ErrorKind::Abort);
        assert_eq!(cmi.engine.stats().lease_waits, 0);
        cmi.ok("LCOMMIT 1");
    }
}

#[test]
fn an_older_writer_waits_for_golden_readers() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        cmi.ok("LVALIDATE 1");
        assert_eq!(cmi.value("LGET 3 k"), "v");
        cmi.ok("LPRIORITY 2 7");
        assert_eq!(cmi.err("LDEL 2 k"), ErrorKind::Retry);
        // Nobody is wounded while the writer waits.
        assert_eq!(cmi.engine.stats().sessions_wounded, 0);
        cmi.ok("LCOMMIT 1");
        assert_eq!(cmi.int("LDEL 2 k"), 1);
        assert_eq!(
            cmi.engine.stats().sessions_wounded,
            1,
            "the other reader is wounded now"
        );
        assert_eq!(cmi.err("LCOMMIT 3"), ErrorKind::Abort);
        cmi.ok("LCOMMIT 2");
        assert_eq!(cmi.cached("k"), None);
    }
}

#[test]
fn a_reserved_key_is_not_for_younger_sessions_even_when_free() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET k v");
    cmi.ok("LSET 1 k v1");
    cmi.ok("LPRIORITY 2 100");
    assert_eq!(cmi.err("LSET 2 k v2"), ErrorKind::Retry);
    cmi.ok("LCOMMIT 1");
    // The key is free, but session 2 waits for it: other writers give way, IQ writers back off.
    assert_eq!(cmi.err("LSET 3 k v3"), ErrorKind::Abort);
    assert_eq!(cmi.err("QAREG 5 k"), ErrorKind::Retry);
    // Readers are not kept off; the waiting writer wounds them when it takes the key.
    assert_eq!(cmi.value("LGET 4 k"), "v1");
    cmi.ok("LPRIORITY 6 300");
    assert_eq!(
        cmi.err("LSET 6 k v6"),
        ErrorKind::Abort,
        "a younger ticket too"
    );
    // Plain reads need no lease and are not held back.
    assert_eq!(cmi.cached("k").as_deref(), Some("v1"));
    cmi.ok("LSET 2 k v2");
    assert_eq!(cmi.err("LCOMMIT 4"), ErrorKind::Abort, "wounded");
    cmi.ok("LCOMMIT 2");
    // Taken and released: the reservation is gone.
    cmi.ok("LSET 7 k v7");
    cmi.ok("LCOMMIT 7");
    assert_eq!(cmi.cached("k").as_deref(), Some("v7"));
}

#[test]
fn a_reservation_ends_with_its_session() {
    let mut cmi = Cmi::wt();
    cmi.ok("LSET 1 k v1");
    cmi.ok("LPRIORITY 2 100");
    assert_eq!(cmi.err("LSET 2 k v2"), ErrorKind::Retry);
    let with_reservation = cmi.engine.session_memory();
    cmi.ok("LABORT 2");
    assert!(cmi.engine.session_memory() < with_reservation);
    cmi.ok("LCOMMIT 1");
    cmi.ok("LSET 3 k v3");
    cmi.ok("LCOMMIT 3");

    // Expiry ends a waiter too, and its reservation with it.
    cmi.ok("LSET 4 k v4");
    cmi.ok("LPRIORITY 5 100");
    assert_eq!(cmi.err("LSET 5 k v5"), ErrorKind::Retry);
    let lease_ms = cmi.engine.config().lease_ms;
    cmi.advance(lease_ms + 1);
    cmi.ok("LSET 6 k v6");
    cmi.ok("LCOMMIT 6");
    assert_eq!(cmi.engine.session_memory(), tombstones_only(&cmi));
}

/// The reservation waits for the exclusive lease: reading the key meanwhile (a shared lease the
/// waiter already holds) does not end it, so a younger writer cannot take the key from under it.
#[test]
fn a_waiting_writer_keeps_its_reservation_through_a_read() {
    for mut cmi in [Cmi::wt(), Cmi::wa()] {
        cmi.ok("SET k v");
        assert_eq!(cmi.value("LGET 1 k"), "v");
        cmi.ok("LVALIDATE 1");
        assert_eq!(cmi.value("LGET 2 k"), "v");
        cmi.ok("LPRIORITY 2 100");
        assert_eq!(cmi.err("LDEL 2 k"), ErrorKind::Retry);
        let reserved = cmi.engine.session_memory();
        assert_eq!(cmi.value("LGET 2 k"), "v");
        assert_eq!(cmi.engine.session_memory(), reserved, "still reserved");
        cmi.ok("LCOMMIT 1");
        assert_eq!(
            cmi.err("LDEL 3 k"),
            ErrorKind::Abort,
            "the key is session 2's"
        );
        assert_eq!(cmi.int("LDEL 2 k"), 1);
        cmi.ok("LCOMMIT 2");
        assert_eq!(cmi.cached("k"), None);
    }
}

/// The session memory of a CMI whose only sessions are tombstones.
fn tombstones_only(cmi: &Cmi) -> usize {
    let (active, tombstones) = cmi.engine.session_counts();
    assert_eq!(active, 0);
    tombstones * cads_engine::lease::SESSION_OVERHEAD
}

#[test]
fn an_older_waiter_takes_the_reservation_over() {
    let mut cmi = Cmi::wt();
    cmi.ok("LSET 1 k v1");
    cmi.ok("LPRIORITY 2 200");
    assert_eq!(cmi.err("LSET 2 k v2"), ErrorKind::Retry);
    cmi.ok("LPRIORITY 3 100");
    assert_eq!(cmi.err("LSET 3 k v3"), ErrorKind::Retry);
    cmi.ok("LCOMMIT 1");
    assert_eq!(
        cmi.err("LSET 2 k v2"),
        ErrorKind::Abort,
        "3 is older and waits for k"
    );
    cmi.ok("LSET 3 k v3");
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.cached("k").as_deref(), Some("v3"));
}

#[test]
fn a_holder_is_not_aborted_by_the_session_waiting_for_it() {
    let mut cmi = Cmi::wt();
    assert_eq!(cmi.value_or_nil("LGET 1 k RMW"), None);
    cmi.ok("LPRIORITY 2 100");
    assert_eq!(cmi.err("LGET 2 k RMW"), ErrorKind::Retry);
    // The holder asks for its own key again and writes it.
    assert_eq!(cmi.value_or_nil("LGET 1 k RMW"), None);
    cmi.ok("LSET 1 k v1");
    cmi.ok("LCOMMIT 1");
}

#[test]
fn ticketless_sessions_behave_as_the_tables_say() {
    let mut cmi = Cmi::wt();
    cmi.ok("LSET 2 k v");
    // A lower id is no claim to age without a ticket.
    assert_eq!(cmi.err("LSET 1 k w"), ErrorKind::Abort);
    assert_eq!(cmi.engine.stats().lease_waits, 0);
    // A ticketed holder makes no difference to a ticketless requester.
    cmi.ok("LPRIORITY 3 1");
    cmi.ok("LSET 3 j v");
    assert_eq!(cmi.err("LSET 4 j w"), ErrorKind::Abort);
}

#[test]
fn a_session_keeps_its_first_ticket_and_a_tombstone_gets_none() {
    let mut cmi = Cmi::wt();
    cmi.ok("LPRIORITY 1 100");
    cmi.ok("LPRIORITY 1 1");
    cmi.ok("LSET 1 k v");
    cmi.ok("LPRIORITY 2 50");
    assert_eq!(
        cmi.err("LSET 2 k w"),
        ErrorKind::Retry,
        "1 is still 100, younger than 50"
    );
    cmi.ok("LSET 3 j v");
    assert_eq!(cmi.err("LSET 4 j w"), ErrorKind::Abort);
    assert_eq!(cmi.err("LPRIORITY 4 1"), ErrorKind::Abort, "a tombstone");
    assert_eq!(cmi.err("LPRIORITY 7 x"), ErrorKind::Err);
}

#[test]
fn multi_key_writes_answer_retry_per_key_and_do_nothing_for_it() {
    let mut cmi = Cmi::wt();
    cmi.ok("SET b 10");
    cmi.ok("LSET 1 b 11");
    cmi.ok("LPRIORITY 2 100");
    let reply = cmi.run("LMSET 2 NOPIN a 1 b 2 c 3");
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items[0], Reply::OK);
    assert!(matches!(&items[1], Reply::Error(e) if e.kind == ErrorKind::Retry));
    assert_eq!(items[2], Reply::OK);
    let reply = cmi.run("LMDEL 2 c b");
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(
        items[0],
        Reply::Int(1),
        "c has the value this session staged"
    );
    assert!(matches!(&items[1], Reply::Error(e) if e.kind == ErrorKind::Retry));
    let reply = cmi.run("LMAPPEND 2 a x b y");
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items[0], Reply::Int(2));
    assert!(matches!(&items[1], Reply::Error(e) if e.kind == ErrorKind::Retry));
    let reply = cmi.run("LMGET 2 RMW a b");
    let Reply::Array(items) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items[0], Reply::bulk(&b"1x"[..]));
    assert!(matches!(&items[1], Reply::Error(e) if e.kind == ErrorKind::Retry));
    cmi.ok("LCOMMIT 1");
    assert_eq!(cmi.int("LAPPEND 2 b y"), 3);
    cmi.ok("LCOMMIT 2");
    assert_eq!(cmi.cached("a").as_deref(), Some("1x"));
    assert_eq!(cmi.cached("b").as_deref(), Some("11y"));
    assert_eq!(cmi.cached("c"), None);
}

/// Two CMIs, two sessions, each holding a key on one CMI and asking for the other's: with
/// tickets the older waits and the younger gives way, so no cycle of waits forms; without, both
/// give way, as the tables say.
#[test]
fn no_cycle_of_waits_forms_across_two_cmis() {
    let (mut one, mut two) = (Cmi::wt(), Cmi::wt());
    one.ok("LPRIORITY 1 10");
    one.ok("LSET 1 k1 a");
    two.ok("LPRIORITY 2 20");
    two.ok("LSET 2 k2 b");
    two.ok("LPRIORITY 1 10");
    one.ok("LPRIORITY 2 20");
    assert_eq!(two.err("LSET 1 k2 a"), ErrorKind::Retry, "the older waits");
    assert_eq!(
        one.err("LSET 2 k1 b"),
        ErrorKind::Abort,
        "the younger gives way"
    );
    two.ok("LABORT 2");
    one.ok("LABORT 2");
    two.ok("LSET 1 k2 a");
    one.ok("LVALIDATE 1");
    two.ok("LVALIDATE 1");
    one.ok("LCOMMIT 1");
    two.ok("LCOMMIT 1");
    assert_eq!(two.cached("k2").as_deref(), Some("a"));

    // The same in the other order of arrival gives the same winner.
    let (mut one, mut two) = (Cmi::wt(), Cmi::wt());
    one.ok("LPRIORITY 2 20");
    one.ok("LSET 2 k1 b");
    two.ok("LPRIORITY 1 10");
    two.ok("LSET 1 k2 a");
    one.ok("LPRIORITY 1 10");
    two.ok("LPRIORITY 2 20");
    assert_eq!(one.err("LSET 1 k1 a"), ErrorKind::Retry);
    assert_eq!(two.err("LSET 2 k2 b"), ErrorKind::Abort);

    let (mut one, mut two) = (Cmi::wt(), Cmi::wt());
    one.ok("LSET 1 k1 a");
    two.ok("LSET 2 k2 b");
    assert_eq!(two.err("LSET 1 k2 a"), ErrorKind::Abort);
    assert_eq!(one.err("LSET 2 k1 b"), ErrorKind::Abort);
}

/// Many writers of one key, each session a read-modify-write of three steps (exclusive read,
/// write, commit) interleaved with the others' steps round-robin, each retried with its ticket
/// after it gives way (as the framework does): every writer finishes, no increment is lost, and
/// a writer gives way a bounded number of times per writer older than it.
#[test]
fn every_writer_of_a_hot_key_finishes_in_a_bounded_number_of_attempts() {
    let writers = 24u64;
    let mut cmi = Cmi::with(EngineConfig {
        lease_ms: 3_600_000,
        max_session_ms: 3_600_000,
        ..EngineConfig::default()
    });
    cmi.ok("SET n 0");
    struct Writer {
        /// When its work started: writer w started at w + 1.
        ticket: u64,
        attempts: u64,
        sid: u64,
        /// 0: the exclusive read, 1: the write, 2: the commit.
        step: u8,
        read: i64,
        done: bool,
    }
    let mut next_sid = 1000;
    let mut ws: Vec<Writer> = (0..writers)
        .map(|w| Writer {
            ticket: w + 1,
            attempts: 1,
            sid: 1000 + w,
            step: 0,
            read: 0,
            done: false,
        })
        .collect();
    next_sid += writers;
    let mut turn = 0u64;
    while ws.iter().any(|w| !w.done) {
        turn += 1;
        assert!(turn < 100_000, "the writers stopped making progress");
        // Writer (turn * 7) mod n steps: every writer once per round, in a shuffled order.
        let w = &mut ws[((turn * 7) % writers) as usize];
        if w.done {
            continue;
        }
        let sid = w.sid;
        if w.attempts > 1 && w.step == 0 {
            cmi.ok(&format!("LPRIORITY {sid} {}", w.ticket));
        }
        let line = match w.step {
            0 => format!("LGET {sid} n RMW"),
            1 => format!("LSET {sid} n {}", w.read + 1),
            _ => format!("LCOMMIT {sid}"),
        };
        match cmi.run(&line) {
            Reply::Error(e) if e.kind == ErrorKind::Retry => {}
            Reply::Error(e) if e.kind == ErrorKind::Abort => {
                cmi.ok(&format!("LABORT {sid}"));
                w.attempts += 1;
                w.sid = next_sid;
                next_sid += 1;
                w.step = 0;
            }
            Reply::Bulk(v) if w.step == 0 => {
                w.read = std::str::from_utf8(&v).unwrap().parse().unwrap();
                w.step = 1;
            }
            Reply::Status(_) if w.step == 1 => w.step = 2,
            Reply::Status(_) => w.done = true,
            other => panic!("{line}: {other:?}"),
        }
    }
    assert_eq!(
        cmi.cached("n"),
        Some(writers.to_string()),
        "no lost increment"
    );
    for (w, writer) in ws.iter().enumerate() {
        // Every older writer is in the way for at most five of its turns (two while a younger
        // holder finishes, three of its own) and a younger one gives way at most once a turn.
        let bound = 5 * (w as u64 + 1);
        assert!(
            writer.attempts <= bound,
            "writer {w} took {} attempts (bound {bound})",
            writer.attempts
        );
    }
    assert!(cmi.engine.stats().lease_waits > 0);
    assert_eq!(cmi.engine.hot_keys()[0].0, b"n");
}
