//! The Redis-compatible string subset, as Redis documents it.

mod common;

use cads_protocol::Reply;
use common::Cmi;

#[test]
fn set_options() {
    let mut c = Cmi::wt();
    c.ok("SET k v");
    assert_eq!(c.run("SET k w NX"), Reply::Nil);
    assert_eq!(c.run("SET j w XX"), Reply::Nil);
    assert_eq!(c.value("SET k w GET"), "v");
    assert_eq!(c.run("SET n x GET"), Reply::Nil);
    c.ok("SET k v EX 10");
    assert_eq!(c.int("TTL k"), 10);
    c.ok("SET k v2 KEEPTTL");
    assert_eq!(c.int("PTTL k"), 10_000);
    c.ok("SET k v3");
    assert_eq!(c.int("TTL k"), -1, "a plain SET clears the time to live");
    c.ok(&format!("SET k v PXAT {}", c.now - 1));
    assert_eq!(c.cached("k"), None, "an expiry in the past deletes");
    assert_eq!(
        c.err_text("SET k v PX 9223372036854000000"),
        "ERR invalid expire time in 'set' command",
        "the deadline would pass i64 milliseconds"
    );
}

#[test]
fn expiry_family() {
    let mut c = Cmi::wt();
    assert_eq!(c.int("EXPIRE nokey 10"), 0);
    assert_eq!(c.int("TTL nokey"), -2);
    c.ok("SET k v");
    assert_eq!(c.int("EXPIRE k 10 XX"), 0);
    assert_eq!(c.int("EXPIRE k 10 NX"), 1);
    assert_eq!(c.int("EXPIRE k 5 GT"), 0);
    assert_eq!(c.int("EXPIRE k 20 GT"), 1);
    assert_eq!(c.int("PEXPIRE k 100 LT"), 1);
    assert_eq!(c.int("PTTL k"), 100);
    c.advance(100);
    assert_eq!(c.cached("k"), None);
    c.ok("SET k v");
    assert_eq!(c.int("EXPIRE k -1"), 1);
    assert_eq!(c.int("EXISTS k"), 0);
    c.ok("SET k v");
    assert_eq!(c.int(&format!("PEXPIREAT k {}", c.now + 1500)), 1);
    assert_eq!(c.int("TTL k"), 2, "rounded like Redis");
    assert_eq!(c.int("PERSIST k"), 1);
    assert_eq!(c.int("PERSIST k"), 0);
    assert_eq!(
        c.err_text("EXPIRE k 9223372036854775807"),
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        c.err_text("EXPIRE k 1 NX XX"),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
}

#[test]
fn counters_and_strings() {
    let mut c = Cmi::wt();
    assert_eq!(c.int("INCR n"), 1);
    assert_eq!(c.int("INCRBY n 10"), 11);
    assert_eq!(c.int("DECR n"), 10);
    assert_eq!(c.int("DECRBY n 20"), -10);
    c.ok("SET s abc");
    assert_eq!(
        c.err_text("INCR s"),
        "ERR value is not an integer or out of range"
    );
    c.ok("SET m 9223372036854775807");
    assert_eq!(
        c.err_text("INCR m"),
        "ERR increment or decrement would overflow"
    );
    assert_eq!(c.int("APPEND s def"), 6);
    assert_eq!(c.int("APPEND t x"), 1);
    assert_eq!(c.int("STRLEN s"), 6);
    assert_eq!(c.int("STRLEN none"), 0);
    c.ok("SET e 5 EX 100");
    c.int("INCR e");
    assert_eq!(c.int("TTL e"), 100, "INCR keeps the time to live");
}

#[test]
fn multi_key() {
    let mut c = Cmi::wt();
    c.ok("MSET a 1 b 2");
    assert_eq!(c.int("EXISTS a b c a"), 3);
    assert_eq!(c.int("DEL a c"), 1);
    assert_eq!(c.int("DBSIZE"), 1);
    c.ok("FLUSHALL");
    assert_eq!(c.int("DBSIZE"), 0);
}

#[test]
fn server_commands_are_not_the_engines() {
    let mut c = Cmi::wt();
    assert!(c.err_text("PING").contains("server command"));
}
