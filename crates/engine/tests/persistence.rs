//! The append-only log: a replayed log restores entries, pins, expiry, markers and configuration
//! ids; an incremental rewrite running under load produces a log equal to the state.

mod common;

use cads_engine::{Engine, EngineConfig};
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

fn logged() -> Cmi {
    let mut c = Cmi::wt();
    c.engine.enable_log();
    c
}

fn restart(log: &[u8], now: u64) -> Cmi {
    let mut engine = Engine::new(EngineConfig::default());
    let replayed = engine.replay(log).expect("log replays");
    assert!(!replayed.truncated);
    engine.check_invariants();
    Cmi { engine, now }
}

/// Everything observable about the keys, for comparing two CMIs, one line per key.
fn state(c: &mut Cmi, keys: &[&str]) -> Vec<String> {
    let mut out = vec![format!(
        "{:?} {:?} {:?}",
        c.run("CONFIGID"),
        c.run("FRAGMENTS"),
        c.run("DBSIZE")
    )];
    for key in keys {
        let inspect = c.run(&format!("INSPECT {key}"));
        let get = c.run(&format!("GET {key}"));
        out.push(format!("{key}: {get:?} {inspect:?}"));
    }
    out
}

fn assert_same(a: Vec<String>, b: Vec<String>) {
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y);
    }
    assert_eq!(a.len(), b.len());
}

fn workload(c: &mut Cmi) {
    c.ok("CONFIGID 7");
    c.ok("FRAGMENTS 2");
    c.ok("FRAGMENTID 1 3");
    c.ok("INSTANCELEASE 999999999999");
    c.ok("SET plain v");
    c.ok("SET ttl v EX 100");
    c.int("APPEND plain 123");
    c.int("INCR counter");
    c.ok("LSET 1 pinned bw1 PIN");
    c.int("QAREG 1 marked");
    c.ok("LMARK 1 marked");
    c.ok("LCOMMIT 1");
    c.int("APPEND pinned ,bw2");
    c.ok("SET gone v");
    c.int("DEL gone");
    c.ok("SET expiring v");
    c.int("PEXPIRE expiring 10");
}

const KEYS: &[&str] = &[
    "plain", "ttl", "counter", "pinned", "marked", "gone", "expiring",
];

#[test]
fn replay_restores_entries_pins_markers_and_ids() {
    let mut c = logged();
    workload(&mut c);
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let mut back = restart(&log, c.now);
    assert_eq!(
        back.err("GET plain"),
        ErrorKind::Fenced,
        "a restarted CMI of a Gemini configuration waits for the coordinator's lease"
    );
    back.ok("INSTANCELEASE 999999999999");
    assert_same(state(&mut back, KEYS), state(&mut c, KEYS));
    assert_eq!(back.inspect("pinned", "pinned"), Reply::Int(1));
    assert_eq!(back.inspect("marked", "marker"), Reply::Int(1));
    assert_eq!(back.inspect("plain", "config-id"), Reply::Int(7));
    assert_eq!(back.int("FRAGMENTID 1"), 3);
    // Expiry survives as absolute time.
    back.advance(11);
    assert_eq!(back.cached("expiring"), None);
}

#[test]
fn the_string_commands_writes_are_replayed() {
    let mut c = logged();
    c.ok("SETEX setex 100 a");
    c.ok("PSETEX psetex 100000 b");
    c.int("SETNX setnx c");
    c.ok("SET getset old EX 100");
    c.value("GETSET getset new");
    c.ok("SET getdel v");
    c.value("GETDEL getdel");
    c.ok("SET getex v");
    c.value("GETEX getex EX 200");
    c.ok("SET persisted v EX 100");
    c.value("GETEX persisted PERSIST");
    c.ok("SET past v");
    c.value(&format!("GETEX past PXAT {}", c.now - 1));
    c.ok("SET setrange hello EX 300");
    c.int("SETRANGE setrange 7 world");
    c.int("SETRANGE fresh 3 x");
    c.int("MSETNX m1 1 m2 2");
    c.value("INCRBYFLOAT float 10.5");
    c.value("INCRBYFLOAT float 0.1");
    c.ok("LSET 1 pinned 1 PIN");
    c.ok("LCOMMIT 1");
    c.value("INCRBYFLOAT pinned 0.5");
    let keys = [
        "setex",
        "psetex",
        "setnx",
        "getset",
        "getdel",
        "getex",
        "persisted",
        "past",
        "setrange",
        "fresh",
        "m1",
        "m2",
        "float",
        "pinned",
    ];
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let mut back = restart(&log, c.now);
    assert_same(state(&mut back, &keys), state(&mut c, &keys));
    assert_eq!(back.value("GET float"), "10.6");
    assert_eq!(back.bulk("GET setrange").unwrap(), b"hello\0\0world");
    assert_eq!(back.int("TTL getex"), 200);
    assert_eq!(back.int("TTL getset"), -1);
    assert_eq!(back.inspect("pinned", "pinned"), Reply::Int(1));
    assert_eq!(back.int("EXISTS getdel past"), 0);
}

#[test]
fn a_restart_forgets_values_under_a_writers_lease() {
    let mut c = logged();
    c.ok("SET k old");
    c.ok("LSET 9 pin x PIN");
    c.ok("LCOMMIT 9");
    assert_eq!(c.value("LGET 1 k RMW"), "old");
    c.value("LGET 1 pin RMW");
    // The CMI dies here, before session 1 commits: it may have updated the data store already.
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let mut back = restart(&log, c.now);
    assert_eq!(back.cached("k"), None);
    assert_eq!(
        back.cached("pin").as_deref(),
        Some("x"),
        "pinned data is kept"
    );
}

#[test]
fn a_torn_last_record_is_reported_not_fatal() {
    let mut c = logged();
    c.ok("SET a 1");
    c.ok("SET b 2");
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let cut = log.len() - 3;
    let mut engine = Engine::new(EngineConfig::default());
    let replayed = engine.replay(&log[..cut]).unwrap();
    assert!(replayed.truncated);
    assert_eq!(replayed.records, 1);
    assert!(replayed.valid_bytes < cut);
    let mut bad = log.clone();
    bad[0] = b'x';
    assert!(Engine::new(EngineConfig::default()).replay(&bad).is_err());
}

#[test]
fn incremental_rewrite_under_load_equals_the_state() {
    let mut c = logged();
    let keys: Vec<String> = (0..60).map(|i| format!("k{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        c.ok(&format!("SET {k} v{i}"));
    }
    let mut discard = Vec::new();
    c.engine.drain_log(&mut discard);
    c.engine.begin_rewrite();
    let mut new_log = Vec::new();
    let mut round = 0;
    loop {
        let done = c.engine.rewrite_step(7);
        // Changes on both sides of the cursor, deletes, reinserts and appends between steps.
        round += 1;
        c.int(&format!("DEL k{}", (round * 13) % 60));
        c.ok(&format!("SET k{} r{round}", (round * 7) % 60));
        c.int(&format!("APPEND k{} +", (round * 11) % 60));
        c.ok(&format!("SET new{round} n"));
        c.int("INCR counter");
        c.engine.drain_rewrite(&mut new_log);
        if done {
            break;
        }
    }
    // After the walk, the new log keeps receiving changes.
    c.ok("SET after 1");
    c.engine.drain_rewrite(&mut new_log);
    c.engine.end_rewrite();
    let mut all: Vec<String> = keys.clone();
    all.extend((0..=round).map(|r| format!("new{r}")));
    all.push("counter".into());
    all.push("after".into());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut back = restart(&new_log, c.now);
    assert_same(state(&mut back, &refs), state(&mut c, &refs));
}

#[test]
fn a_value_the_log_forgot_under_a_lease_is_logged_again_when_the_lease_ends() {
    let mut c = logged();
    c.ok("SET k abc");
    assert_eq!(c.value("LGET 1 k RMW"), "abc");
    // The writer changes nothing and lets go: the value stays cached, so the log must hold it.
    c.ok("LABORT 1");
    assert_eq!(c.int("APPEND k def"), 6);
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let mut back = restart(&log, c.now);
    assert_eq!(back.cached("k").as_deref(), Some("abcdef"));
}

/// A session's append is logged as an append where the log holds the value (pinned), and as the
/// whole value where the log forgot it under the writer's lease (unpinned).
#[test]
fn a_session_append_replays_to_the_whole_value() {
    let mut c = logged();
    c.ok("SET plain abc");
    c.ok("LSET 9 pinned abc PIN");
    c.ok("LCOMMIT 9");
    assert_eq!(c.int("LAPPEND 1 plain def"), 6);
    assert_eq!(c.int("LAPPEND 1 pinned def"), 6);
    c.ok("LCOMMIT 1");
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    let mut back = restart(&log, c.now);
    assert_eq!(back.cached("plain").as_deref(), Some("abcdef"));
    assert_eq!(back.cached("pinned").as_deref(), Some("abcdef"));
    assert_eq!(back.inspect("pinned", "pinned"), Reply::Int(1));
}

#[test]
fn a_rewrite_begun_on_an_empty_cmi_receives_every_later_change() {
    let mut c = logged();
    c.engine.begin_rewrite();
    assert!(c.engine.rewrite_step(10));
    c.ok("SET a 1");
    c.ok("FLUSHALL");
    c.ok("SET b 2");
    let mut new_log = Vec::new();
    c.engine.drain_rewrite(&mut new_log);
    c.engine.end_rewrite();
    let mut back = restart(&new_log, c.now);
    assert_eq!(back.cached("a"), None);
    assert_eq!(back.cached("b").as_deref(), Some("2"));
}

#[test]
fn flushall_unpinned_keeps_pinned_entries_and_markers_in_the_cmi_and_its_logs() {
    let mut c = logged();
    for i in 0..20 {
        c.ok(&format!("SET v{i} x"));
        c.ok(&format!("LSET 1 p{i} bw{i} PIN"));
    }
    c.int("QAREG 1 marked");
    c.ok("LMARK 1 marked");
    c.ok("LCOMMIT 1");
    assert_eq!(c.value("LGET 2 v0 RMW"), "x");
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    // A rewrite half-way through its walk when the flush comes.
    c.engine.begin_rewrite();
    assert!(!c.engine.rewrite_step(15));
    c.ok("FLUSHALL UNPINNED");
    assert_eq!(c.err("LCOMMIT 2"), ErrorKind::Abort, "sessions end");
    assert_eq!(c.int("DBSIZE"), 20);
    assert_eq!(c.cached("v3"), None);
    assert_eq!(c.cached("p3").as_deref(), Some("bw3"));
    assert_eq!(c.inspect("marked", "marker"), Reply::Int(1));
    c.engine.check_invariants();
    c.engine.drain_log(&mut log);
    let mut rewritten = Vec::new();
    while !c.engine.rewrite_step(15) {}
    c.engine.drain_rewrite(&mut rewritten);
    c.engine.end_rewrite();
    let keys: Vec<String> = (0..20)
        .flat_map(|i| [format!("v{i}"), format!("p{i}")])
        .chain(["marked".to_string()])
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    for from in [&log, &rewritten] {
        let mut back = restart(from, c.now);
        assert_same(state(&mut back, &keys), state(&mut c, &keys));
        assert_eq!(back.inspect("marked", "marker"), Reply::Int(1));
    }
}

/// A CMI restarted from its log holds the cached values it restored until the first `FLUSHALL
/// RESTORED`, which drops them and keeps the buffered writes; later ones, and any on a CMI that
/// restored nothing, drop nothing.
#[test]
fn flushall_restored_drops_restored_cached_values_once() {
    let mut c = logged();
    c.ok("SET cached x");
    c.ok("LSET 1 buffered bw PIN");
    c.ok("LCOMMIT 1");
    let mut log = Vec::new();
    c.engine.drain_log(&mut log);
    c.ok("FLUSHALL RESTORED");
    assert_eq!(c.cached("cached").as_deref(), Some("x"), "nothing restored");

    let mut back = restart(&log, c.now);
    back.engine.hold_restored_values();
    assert!(back.engine.holds_restored_values());
    back.ok("FLUSHALL RESTORED");
    assert!(!back.engine.holds_restored_values());
    assert_eq!(back.cached("cached"), None);
    assert_eq!(back.cached("buffered").as_deref(), Some("bw"));
    back.ok("SET cached y");
    back.ok("FLUSHALL RESTORED");
    assert_eq!(back.cached("cached").as_deref(), Some("y"), "dropped once");
}
