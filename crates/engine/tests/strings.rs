//! The string commands beyond GET and SET (SETEX, PSETEX, SETNX, GETSET, GETDEL, GETEX, GETRANGE,
//! SETRANGE, MSETNX, INCRBYFLOAT) and TIME: Redis's semantics, and the engine's own rules for them
//! (leases, pins, memory, the log, CLIENT NO-TOUCH). The replies are compared byte for byte with
//! a real redis-server in `crates/server/tests/redis_compat.rs`.

mod common;

use cads_engine::{Engine, EngineConfig, Now, Recency, ENTRY_OVERHEAD};
use cads_protocol::{Command, ErrorKind, Reply};
use common::Cmi;

#[test]
fn set_variants() {
    let mut c = Cmi::wt();
    c.ok("SETEX k 10 v");
    assert_eq!(c.int("PTTL k"), 10_000);
    c.ok("PSETEX k 1500 w");
    assert_eq!(c.int("PTTL k"), 1_500);
    assert_eq!(c.value("GET k"), "w");
    assert_eq!(
        c.err_text("SETEX k 9223372036854775 v"),
        "ERR invalid expire time in 'setex' command",
        "the deadline would pass i64 milliseconds"
    );
    assert_eq!(c.int("SETNX k x"), 0);
    assert_eq!(c.value("GET k"), "w");
    assert_eq!(c.int("SETNX n x"), 1);
    assert_eq!(c.value("GETSET k y"), "w");
    assert_eq!(
        c.int("TTL k"),
        -1,
        "GETSET clears the time to live, as SET does"
    );
    assert_eq!(c.value_or_nil("GETSET missing z"), None);
    assert_eq!(c.value("GET missing"), "z");
    c.advance(1_500);
    assert_eq!(c.int("SETNX k again"), 0, "k never expired");
    c.ok("PSETEX gone 10 v");
    c.advance(10);
    assert_eq!(c.int("SETNX gone back"), 1, "an expired key is absent");
}

#[test]
fn getdel_and_getex() {
    let mut c = Cmi::wt();
    c.ok("SET k v EX 100");
    assert_eq!(c.value("GETDEL k"), "v");
    assert_eq!(c.value_or_nil("GETDEL k"), None);
    assert_eq!(c.int("EXISTS k"), 0);

    c.ok("SET k v");
    assert_eq!(c.value("GETEX k"), "v");
    assert_eq!(c.int("TTL k"), -1);
    assert_eq!(c.value("GETEX k EX 100"), "v");
    assert_eq!(c.int("TTL k"), 100);
    assert_eq!(c.value("GETEX k PX 5000"), "v");
    assert_eq!(c.int("PTTL k"), 5_000);
    assert_eq!(c.value(&format!("GETEX k PXAT {}", c.now + 700)), "v");
    assert_eq!(c.int("PTTL k"), 700);
    assert_eq!(c.value(&format!("GETEX k EXAT {}", c.now / 1000 + 50)), "v");
    assert_eq!(c.int("TTL k"), 50);
    assert_eq!(c.value("GETEX k PERSIST"), "v");
    assert_eq!(c.int("TTL k"), -1);
    // An absolute time already past deletes the key, after answering its value.
    assert_eq!(c.value(&format!("GETEX k PXAT {}", c.now)), "v");
    assert_eq!(c.int("EXISTS k"), 0);
    // The expiry is checked only for a key that exists, as Redis does.
    assert_eq!(c.value_or_nil("GETEX k EX abc"), None);
    assert_eq!(c.value_or_nil("GETEX k EX 0"), None);
    c.ok("SET k v");
    assert_eq!(
        c.err_text("GETEX k EX abc"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        c.err_text("GETEX k EX 0"),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(
        c.err_text("GETEX k PX 9223372036854775807"),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(c.int("TTL k"), -1, "a refused GETEX changes nothing");
}

#[test]
fn ranges() {
    let mut c = Cmi::wt();
    c.ok("SET s hello");
    for (line, expected) in [
        ("GETRANGE s 0 -1", "hello"),
        ("GETRANGE s 1 3", "ell"),
        ("GETRANGE s -3 -1", "llo"),
        ("GETRANGE s -1 -5", ""),
        ("GETRANGE s 0 -100", "h"),
        ("GETRANGE s 3 1", ""),
        ("GETRANGE s 10 20", ""),
        ("GETRANGE s 0 9223372036854775807", "hello"),
        ("GETRANGE s -9223372036854775808 -1", "hello"),
        ("GETRANGE missing 0 -1", ""),
    ] {
        assert_eq!(c.value(line), expected, "{line}");
    }
    assert_eq!(c.int("SETRANGE s 1 ipp"), 5);
    assert_eq!(c.value("GET s"), "hippo");
    assert_eq!(c.int("SETRANGE s 7 !"), 8);
    assert_eq!(c.bulk("GET s").unwrap(), b"hippo\0\0!");
    assert_eq!(c.int("SETRANGE new 2 x"), 3);
    assert_eq!(c.bulk("GET new").unwrap(), b"\0\0x");
    assert_eq!(c.int("SETRANGE none 5 \"\""), 0);
    assert_eq!(c.int("EXISTS none"), 0, "an empty write creates nothing");
    assert_eq!(c.int("SETRANGE s 100 \"\""), 8);
    c.ok("SET t abc EX 100");
    assert_eq!(c.int("SETRANGE t 0 x"), 3);
    assert_eq!(c.int("TTL t"), 100, "SETRANGE keeps the time to live");
}

/// GETRANGE with both offsets negative, as Redis computes it: a start after the end gives an empty
/// string even when both lie before the value's first byte (clamping them would give that byte);
/// otherwise offsets before the first byte are clamped to it, and equal offsets give one byte.
#[test]
fn getrange_with_negative_offsets() {
    let mut c = Cmi::wt();
    c.ok("SET s hello");
    for (line, expected) in [
        ("GETRANGE s -10 -20", ""),
        ("GETRANGE s -10 -10", "h"),
        ("GETRANGE s -1 -1", "o"),
        ("GETRANGE s -20 -4", "he"),
    ] {
        assert_eq!(c.value(line), expected, "{line}");
    }
}

#[test]
fn setrange_is_bounded_by_the_largest_value() {
    let mut c = Cmi::with(EngineConfig {
        max_value_bytes: 100,
        ..EngineConfig::default()
    });
    c.ok("SET s abc");
    assert_eq!(c.int("SETRANGE s 99 x"), 100);
    for line in [
        "SETRANGE s 100 x",
        "SETRANGE missing 100 x",
        "SETRANGE s 9223372036854775807 x",
    ] {
        assert_eq!(
            c.err_text(line),
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
            "{line}"
        );
    }
    assert_eq!(c.int("EXISTS missing"), 0);
}

/// A session's appends stop at the largest value too, counting what it appended before: up to
/// it they are taken, one byte past it is an error that stages nothing.
#[test]
fn session_appends_are_bounded_by_the_largest_value() {
    let mut c = Cmi::with(EngineConfig {
        max_value_bytes: 10,
        ..EngineConfig::default()
    });
    c.ok("SET s abc");
    assert_eq!(c.int("LAPPEND 1 s defg"), 7);
    assert_eq!(
        c.err_text("LAPPEND 1 s hijk"),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(c.int("LAPPEND 1 s hij"), 10);
    assert_eq!(c.err_text("LPREPEND 1 s z").split(' ').next(), Some("ERR"));
    c.ok("LCOMMIT 1");
    assert_eq!(c.value("GET s"), "abcdefghij");
}

#[test]
fn msetnx_sets_all_or_nothing() {
    let mut c = Cmi::wt();
    assert_eq!(c.int("MSETNX a 1 b 2"), 1);
    assert_eq!(c.int("MSETNX c 3 a 9"), 0);
    assert_eq!(c.value_or_nil("GET c"), None);
    assert_eq!(c.value("GET a"), "1");
    assert_eq!(
        c.int("MSETNX d 1 d 2"),
        1,
        "a key named twice: the last value"
    );
    assert_eq!(c.value("GET d"), "2");
}

#[test]
fn incrbyfloat() {
    let mut c = Cmi::wt();
    assert_eq!(c.value("INCRBYFLOAT f 0.1"), "0.1");
    assert_eq!(c.value("INCRBYFLOAT f 0.2"), "0.3");
    assert_eq!(c.value("INCRBYFLOAT f -0.3"), "0");
    assert_eq!(c.value("INCRBYFLOAT f 5.0e3"), "5000");
    assert_eq!(c.value("GET f"), "5000");
    c.ok("SET f 10.5 EX 100");
    assert_eq!(c.value("INCRBYFLOAT f 0.1"), "10.6");
    assert_eq!(c.int("TTL f"), 100, "INCRBYFLOAT keeps the time to live");
    for (line, error) in [
        ("INCRBYFLOAT f abc", "ERR value is not a valid float"),
        ("INCRBYFLOAT f nan", "ERR value is not a valid float"),
        ("INCRBYFLOAT f 1e5000", "ERR value is not a valid float"),
        (
            "INCRBYFLOAT f inf",
            "ERR increment would produce NaN or Infinity",
        ),
    ] {
        assert_eq!(c.err_text(line), error, "{line}");
    }
    c.ok("SET s text");
    assert_eq!(
        c.err_text("INCRBYFLOAT s 1"),
        "ERR value is not a valid float"
    );
    c.ok("SET big 1.18973149535723176502e4932");
    assert_eq!(
        c.err_text("INCRBYFLOAT big 1.18973149535723176502e4932"),
        "ERR increment would produce NaN or Infinity"
    );
    assert_eq!(
        c.value("GET f"),
        "10.6",
        "a refused increment changes nothing"
    );
}

#[test]
fn time_is_the_wall_clock_of_the_command() {
    let mut c = Cmi::wt();
    c.now = 1_700_000_123_456;
    assert_eq!(
        c.run("TIME"),
        Reply::Array(vec![
            Reply::owned_bulk(b"1700000123".to_vec()),
            Reply::owned_bulk(b"456000".to_vec()),
        ])
    );
}

#[test]
fn writes_to_a_leased_key_answer_leased_and_change_nothing() {
    let mut c = Cmi::wt();
    c.ok("SET k 5");
    c.ok("SET other 1");
    c.value("LGET 1 k");
    for line in [
        "SETEX k 10 x",
        "PSETEX k 10 x",
        "SETNX k x",
        "GETSET k x",
        "GETDEL k",
        "GETEX k EX 10",
        "GETEX k PERSIST",
        "SETRANGE k 0 x",
        "INCRBYFLOAT k 1",
        "MSETNX fresh 1 k 2",
    ] {
        assert_eq!(c.err(line), ErrorKind::Leased, "{line}");
    }
    assert_eq!(
        c.value_or_nil("GET fresh"),
        None,
        "MSETNX is all or nothing"
    );
    // Reads are never blocked.
    assert_eq!(c.value("GETEX k"), "5");
    assert_eq!(c.value("GETRANGE k 0 -1"), "5");
    assert_eq!(c.int("TTL k"), -1);
    // A miss being filled under an I lease is protected as well.
    assert_eq!(c.int("IQGET 2 filling"), 0);
    assert_eq!(c.err("SETNX filling x"), ErrorKind::Leased);
    assert_eq!(c.err("INCRBYFLOAT filling 1"), ErrorKind::Leased);
    c.ok("LCOMMIT 1");
    assert_eq!(c.value("GETSET k 6"), "5");
}

#[test]
fn in_place_changes_keep_the_pin_and_replacements_drop_it() {
    let mut c = Cmi::wt();
    for key in ["a", "b", "c", "d", "e"] {
        c.ok(&format!("LSET 1 {key} 1 PIN"));
    }
    c.ok("LCOMMIT 1");
    c.int("SETRANGE a 0 2");
    c.value("INCRBYFLOAT b 1.5");
    c.value("GETEX c EX 100");
    c.value("GETSET d 2");
    c.ok("SETEX e 100 2");
    for (key, pinned) in [("a", 1), ("b", 1), ("c", 1), ("d", 0), ("e", 0)] {
        assert_eq!(c.inspect(key, "pinned"), Reply::Int(pinned), "{key}");
    }
}

#[test]
fn writes_that_do_not_fit_answer_notstored_and_lose_nothing() {
    // Room for two small entries, both pinned: nothing can be evicted.
    let each = 1 + 3 + ENTRY_OVERHEAD;
    let mut c = Cmi::with(EngineConfig {
        maxmemory: 2 * each,
        ..EngineConfig::default()
    });
    c.ok("LSET 1 a abc PIN");
    c.ok("LSET 1 b 1.5 PIN");
    c.ok("LCOMMIT 1");
    assert_eq!(c.err("SETRANGE a 3 more"), ErrorKind::NotStored);
    assert_eq!(c.value("GET a"), "abc");
    assert_eq!(c.err("INCRBYFLOAT b 0.25"), ErrorKind::NotStored);
    assert_eq!(c.value("GET b"), "1.5");
    assert_eq!(c.err("MSETNX x 1 y 2"), ErrorKind::NotStored);
    assert_eq!(c.int("DBSIZE"), 2);
    // What fits in place is fine.
    assert_eq!(c.int("SETRANGE a 0 xyz"), 3);
    assert_eq!(c.value("INCRBYFLOAT b 1"), "2.5");
}

#[test]
fn reading_old_values_counts_hits_and_misses() {
    let mut c = Cmi::wt();
    c.ok("SET k v");
    for line in [
        "SET k v GET",
        "GETSET k v",
        "GETEX k",
        "GETRANGE k 0 0",
        "GETDEL k",
    ] {
        c.run(line);
    }
    for line in [
        "SET k v GET",
        "GETSET m v",
        "GETEX none",
        "GETRANGE none 0 0",
        "GETDEL none",
    ] {
        c.run(line);
    }
    // The first round hits (GETDEL deletes k at its end), the second misses.
    assert_eq!((c.engine.stats().hits, c.engine.stats().misses), (5, 5));
}

#[test]
fn no_touch_reads_leave_the_eviction_order_alone() {
    let each = 1 + 1 + ENTRY_OVERHEAD;
    let run = |recency: Recency| {
        let mut engine = Engine::new(EngineConfig {
            maxmemory: 2 * each,
            ..EngineConfig::default()
        });
        let now = Now::at(1_000);
        let mut exec = |args: &[&[u8]], recency| {
            let cmd = Command::parse(args).unwrap();
            engine.execute_with(&cmd, now, recency).into_owned()
        };
        exec(&[b"SET", b"a", b"1"], Recency::Touch);
        exec(&[b"SET", b"b", b"1"], Recency::Touch);
        // Reading a makes it the most recently used, unless the reader asked not to touch.
        exec(&[b"GET", b"a"], recency);
        exec(&[b"GETRANGE", b"a", b"0", b"0"], recency);
        exec(&[b"GETEX", b"a"], recency);
        exec(&[b"MGET", b"a"], recency);
        exec(&[b"SET", b"c", b"1"], Recency::Touch);
        let mut left = |key: &[u8]| exec(&[b"EXISTS", key], Recency::Touch) == Reply::Int(1);
        (left(b"a"), left(b"b"))
    };
    assert_eq!(
        run(Recency::Touch),
        (true, false),
        "b was least recently used"
    );
    assert_eq!(run(Recency::NoTouch), (false, true), "a still was");
}
