//! Real Redis tools against a CMI.
//!
//! - Reply equivalence: a real `redis-server` and a cads CMI get the same commands over raw RESP
//!   (and inline, telnet-style) and must send back byte-identical replies. Every mismatch is listed
//!   in the failure message; nothing is "fixed" here.
//! - `redis-cli` (with `--stat` and `--latency` too), `redis-benchmark` and redis-py
//!   (`tests/python`) work against a CMI.
//! - redis-py's own tests for the commands cads supports (`tests/python/redis_py_suite.txt`),
//!   from its PyPI source distribution, unmodified, pass against a CMI in RESP2 and RESP3.
//!
//! The Redis tools come from Debian's `redis-server` and `redis-tools`, redis-py's suite from
//! `scripts/redis-py-suite`. A missing tool skips its test with a loud `SKIPPED:` line on stderr,
//! or fails it when `CADS_REQUIRE_SERVICES=1`.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cads_protocol::resp::parse_reply;
use cads_protocol::Reply;
use support::{require_redis_tool, show, start_cads, start_redis, ServerProcess};

// ---------------------------------------------------------------------------------------------
// Reply equivalence

/// How two replies to the same command are compared.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// Byte for byte.
    Exact,
    /// Both integer replies, at most this far apart (remaining TTLs, which move with the clock).
    Near(i64),
    /// Sent to both, not compared (HELLO's reply names the server and its version).
    Unchecked,
}

struct Step {
    args: Vec<Vec<u8>>,
    check: Check,
}

/// Builds the steps of a sequence.
#[derive(Default)]
struct Script {
    steps: Vec<Step>,
}

impl Script {
    /// A command whose replies must be identical.
    fn cmd(&mut self, args: &[&str]) -> &mut Self {
        self.bin(args.iter().map(|a| a.as_bytes().to_vec()).collect())
    }

    /// A command with binary arguments whose replies must be identical.
    fn bin(&mut self, args: Vec<Vec<u8>>) -> &mut Self {
        self.steps.push(Step {
            args,
            check: Check::Exact,
        });
        self
    }

    /// A command sent to both whose replies are not compared.
    fn unchecked(&mut self, args: &[&str]) -> &mut Self {
        self.steps.push(Step {
            args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            check: Check::Unchecked,
        });
        self
    }

    /// A command answered with an integer that may differ by `tolerance` (TTL, PTTL).
    fn near(&mut self, args: &[&str], tolerance: i64) -> &mut Self {
        self.steps.push(Step {
            args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            check: Check::Near(tolerance),
        });
        self
    }
}

fn show_args(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| format!("\"{}\"", show(a, 60)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn int_of(reply: &[u8]) -> Option<i64> {
    match parse_reply(reply) {
        Ok(Some((Reply::Int(n), _))) => Some(n),
        _ => None,
    }
}

/// Runs `steps` against both servers, one command at a time on one connection each, and returns
/// one line per mismatch.
fn compare(redis: &ServerProcess, cads: &ServerProcess, steps: &[Step]) -> Vec<String> {
    let mut r = redis.connect();
    let mut c = cads.connect();
    let mut mismatches = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let expected = r.raw(&step.args).unwrap_or_else(|e| {
            panic!(
                "redis-server failed on step {i} {}: {e}",
                show_args(&step.args)
            )
        });
        let got = match c.raw(&step.args) {
            Ok(got) => got,
            Err(e) => {
                mismatches.push(format!(
                    "#{i} {}\n      redis: {}\n      cads:  <no reply: {e}>",
                    show_args(&step.args),
                    show(&expected, 300)
                ));
                c = cads.connect();
                continue;
            }
        };
        let same = match step.check {
            Check::Unchecked => true,
            Check::Exact => expected == got,
            Check::Near(tolerance) => match (int_of(&expected), int_of(&got)) {
                (Some(a), Some(b)) => (a - b).abs() <= tolerance,
                _ => false,
            },
        };
        if !same {
            mismatches.push(format!(
                "#{i} {}\n      redis: {}\n      cads:  {}",
                show_args(&step.args),
                show(&expected, 300),
                show(&got, 300)
            ));
        }
    }
    mismatches
}

fn assert_no_mismatches(what: &str, total: usize, mismatches: &[String]) {
    if !mismatches.is_empty() {
        panic!(
            "{} of {total} {what} differ between redis-server and cads:\n  {}",
            mismatches.len(),
            mismatches.join("\n  ")
        );
    }
    eprintln!("{what}: all {total} identical between redis-server and cads");
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The plain subset of DESIGN.md §3, normal and edge cases.
fn plain_script() -> Script {
    let mut s = Script::default();
    let later_s = (unix_secs() + 1000).to_string();
    let later_ms = ((unix_secs() + 1000) * 1000).to_string();
    let later2_s = (unix_secs() + 2000).to_string();
    let later2_ms = ((unix_secs() + 2000) * 1000).to_string();

    // --- connection ---
    s.cmd(&["FLUSHALL"])
        .cmd(&["PING"])
        .cmd(&["ping"])
        .cmd(&["PING", "hello"])
        .cmd(&["PING", ""])
        .cmd(&["PING", "a", "b"])
        .cmd(&["ECHO", "hello world"])
        .cmd(&["ECHO", ""])
        .cmd(&["ECHO"])
        .cmd(&["ECHO", "a", "b"])
        .bin(vec![b"ECHO".to_vec(), b"bin\r\n\0\xff".to_vec()])
        .cmd(&["SELECT", "0"])
        .cmd(&["SELECT", "16"])
        .cmd(&["SELECT", "-1"])
        .cmd(&["SELECT", "abc"])
        .cmd(&["SELECT"])
        .cmd(&["SELECT", "0", "1"])
        .cmd(&["AUTH", "secret"])
        .cmd(&["AUTH", "default", "secret"])
        .cmd(&["AUTH", "nosuchuser", "secret"])
        .cmd(&["AUTH", "a", "b", "c"])
        .cmd(&["AUTH"])
        .cmd(&["HELLO", "4"])
        .cmd(&["HELLO", "1"])
        .cmd(&["HELLO", "abc"])
        .cmd(&["HELLO", "2", "FOO"])
        .cmd(&["HELLO", "2", "AUTH"])
        .cmd(&["HELLO", "2", "AUTH", "default"])
        .cmd(&["HELLO", "2", "SETNAME"])
        .cmd(&["CLIENT", "GETNAME"])
        .cmd(&["CLIENT", "SETNAME", "tester"])
        .cmd(&["CLIENT", "GETNAME"])
        .cmd(&["CLIENT", "SETNAME", "has space"])
        .cmd(&["CLIENT", "SETNAME", ""])
        .cmd(&["CLIENT", "GETNAME"])
        .cmd(&["DBSIZE"]);

    // --- GET / SET ---
    s.cmd(&["GET", "missing"])
        .cmd(&["SET", "k", "v"])
        .cmd(&["GET", "k"])
        .cmd(&["get", "k"])
        .cmd(&["GeT", "k"])
        .cmd(&["SET", "k", "v2"])
        .cmd(&["GET", "k"])
        .cmd(&["SET", "k", "v3", "GET"])
        .cmd(&["SET", "nokey", "v", "GET"])
        .cmd(&["GET", "nokey"])
        .cmd(&["DEL", "nokey"])
        .cmd(&["SET", "k", "nx-ignored", "NX"])
        .cmd(&["GET", "k"])
        .cmd(&["SET", "nx1", "v", "NX"])
        .cmd(&["GET", "nx1"])
        .cmd(&["SET", "nx1", "v", "nx"])
        .cmd(&["SET", "xx-missing", "v", "XX"])
        .cmd(&["GET", "xx-missing"])
        .cmd(&["SET", "k", "xx-set", "XX"])
        .cmd(&["GET", "k"])
        .cmd(&["SET", "k", "v4", "XX", "GET"])
        .cmd(&["SET", "k", "v5", "NX", "GET"])
        .cmd(&["GET", "k"])
        .cmd(&["SET", "nxget", "v", "NX", "GET"])
        .cmd(&["GET", "nxget"])
        .cmd(&["SET", "xxget", "v", "XX", "GET"])
        .cmd(&["EXISTS", "xxget"])
        .cmd(&["SET", "k", "v", "NX", "NX"])
        .cmd(&["SET", "k", "v", "XX", "XX"])
        .cmd(&["SET", "k", "v", "GET", "GET"])
        .cmd(&["SET", "k", "v6"]);

    // expiry options
    s.cmd(&["SET", "ex", "v", "EX", "100"])
        .near(&["TTL", "ex"], 1)
        .near(&["PTTL", "ex"], 1500)
        .cmd(&["SET", "px", "v", "PX", "100000"])
        .near(&["TTL", "px"], 1)
        .near(&["PTTL", "px"], 1500)
        .cmd(&["SET", "exat", "v", "EXAT", &later_s])
        .near(&["TTL", "exat"], 2)
        .cmd(&["SET", "pxat", "v", "PXAT", &later_ms])
        .near(&["TTL", "pxat"], 2)
        .cmd(&["SET", "ex", "v", "ex", "200"])
        .near(&["TTL", "ex"], 1)
        .cmd(&["SET", "ex", "v", "Ex", "200", "nX"])
        .cmd(&["SET", "ex", "v", "pX", "200000", "Xx", "gEt"])
        .near(&["PTTL", "ex"], 1500)
        .cmd(&["SET", "ex", "v", "eXaT", &later_s, "PXAT"])
        .cmd(&["SET", "ex", "v", "ex", "200"])
        .near(&["TTL", "ex"], 1)
        .cmd(&["SET", "ex", "v2", "KEEPTTL"])
        .near(&["TTL", "ex"], 1)
        .cmd(&["GET", "ex"])
        .cmd(&["SET", "ex", "v3", "keepttl", "GET"])
        .near(&["TTL", "ex"], 1)
        .cmd(&["SET", "ex", "v4"])
        .cmd(&["TTL", "ex"])
        .cmd(&["SET", "exget", "old"])
        .cmd(&["SET", "exget", "new", "GET", "EX", "100"])
        .near(&["TTL", "exget"], 1)
        .cmd(&["SET", "exxx", "v", "XX", "EX", "100"])
        .cmd(&["EXISTS", "exxx"])
        .cmd(&["SET", "exnx", "v", "EX", "100", "NX"])
        .near(&["TTL", "exnx"], 1)
        .cmd(&["SET", "keepttl-missing", "v", "KEEPTTL"])
        .cmd(&["TTL", "keepttl-missing"])
        // expiry in the past: the key is gone at once
        .cmd(&["SET", "past", "v", "EXAT", "1"])
        .cmd(&["GET", "past"])
        .cmd(&["EXISTS", "past"])
        .cmd(&["SET", "past", "v", "PXAT", "1"])
        .cmd(&["GET", "past"])
        .cmd(&["SET", "past", "v"])
        .cmd(&["SET", "past", "v2", "EXAT", "1", "GET"])
        .cmd(&["GET", "past"])
        // invalid expire times
        .cmd(&["SET", "bad", "v", "EX", "0"])
        .cmd(&["SET", "bad", "v", "EX", "-1"])
        .cmd(&["SET", "bad", "v", "PX", "0"])
        .cmd(&["SET", "bad", "v", "PX", "-100"])
        .cmd(&["SET", "bad", "v", "EXAT", "0"])
        .cmd(&["SET", "bad", "v", "PXAT", "-5"])
        .cmd(&["SET", "bad", "v", "EX", "9223372036854775807"])
        .cmd(&["SET", "bad", "v", "EX", "9223372036854776"])
        .cmd(&["SET", "bad", "v", "PX", "9223372036854775807"])
        .cmd(&["SET", "bad", "v", "EXAT", "9223372036854775807"])
        .cmd(&["SET", "bad", "v", "PX", "9223372036854000000"])
        .cmd(&["SET", "bad", "v", "EX", "99999999999999999999"])
        .cmd(&["EXISTS", "bad"])
        .cmd(&["DEL", "bad"])
        // non-integer expire times
        .cmd(&["SET", "bad", "v", "EX", "abc"])
        .cmd(&["SET", "bad", "v", "EX", "1.5"])
        .cmd(&["SET", "bad", "v", "EX", ""])
        .cmd(&["SET", "bad", "v", "EX", " 10"])
        .cmd(&["SET", "bad", "v", "EX", "10 "])
        .cmd(&["SET", "bad", "v", "PX", "+10"])
        .cmd(&["SET", "bad", "v", "PX", "0x10"])
        .cmd(&["SET", "bad", "v", "EXAT", "1e3"])
        .cmd(&["EXISTS", "bad"])
        .cmd(&["DEL", "bad"])
        // leading zeros are not integers to Redis (string2ll), in expire times either
        .cmd(&["SET", "lz", "v", "EX", "0100"])
        .cmd(&["TTL", "lz"])
        // invalid combinations and syntax
        .cmd(&["SET", "bad", "v", "NX", "XX"])
        .cmd(&["SET", "bad", "v", "XX", "NX"])
        .cmd(&["SET", "bad", "v", "EX", "10", "PX", "100"])
        .cmd(&["SET", "bad", "v", "PX", "100", "EX", "10"])
        .cmd(&["SET", "bad", "v", "EX", "10", "EX", "10"])
        .cmd(&["DEL", "bad"])
        .cmd(&["SET", "bad", "v", "EX", "10", "EXAT", &later_s])
        .cmd(&["SET", "bad", "v", "PXAT", &later_ms, "PX", "10"])
        .cmd(&["SET", "bad", "v", "KEEPTTL", "EX", "10"])
        .cmd(&["SET", "bad", "v", "EX", "10", "KEEPTTL"])
        .cmd(&["SET", "bad", "v", "KEEPTTL", "PXAT", &later_ms])
        .cmd(&["SET", "bad", "v", "EX"])
        .cmd(&["SET", "bad", "v", "PX"])
        .cmd(&["SET", "bad", "v", "EXAT"])
        .cmd(&["SET", "bad", "v", "PXAT"])
        .cmd(&["SET", "bad", "v", "FOO"])
        .cmd(&["SET", "bad", "v", "EX", "10", "FOO"])
        .cmd(&["SET", "bad", "v", "10"])
        .cmd(&["SET", "bad", "v", ""])
        .cmd(&["EXISTS", "bad"])
        // arity
        .cmd(&["SET"])
        .cmd(&["SET", "k"])
        .cmd(&["GET"])
        .cmd(&["GET", "a", "b"]);

    // --- DEL / EXISTS / MGET / MSET / DBSIZE ---
    s.cmd(&["FLUSHALL"])
        .cmd(&["MSET", "a", "1", "b", "2", "c", "3"])
        .cmd(&["DBSIZE"])
        .cmd(&["MGET", "a", "b", "c", "missing", "a"])
        .cmd(&["MGET", "missing"])
        .cmd(&["MSET", "a", "10", "a", "11"])
        .cmd(&["GET", "a"])
        .cmd(&["MSET", "a"])
        .cmd(&["MSET", "a", "1", "b"])
        .cmd(&["MSET"])
        .cmd(&["MGET"])
        .cmd(&["EXISTS", "a"])
        .cmd(&["EXISTS", "a", "a", "a"])
        .cmd(&["EXISTS", "a", "b", "missing", "c"])
        .cmd(&["EXISTS", "missing"])
        .cmd(&["EXISTS"])
        .cmd(&["DEL", "missing"])
        .cmd(&["DEL", "a", "a"])
        .cmd(&["DEL", "b", "c", "missing"])
        .cmd(&["DEL"])
        .cmd(&["DBSIZE"])
        .cmd(&["DBSIZE", "x"])
        .cmd(&["MSET", "x", "1", "y", "2"])
        .cmd(&["SET", "x", "v", "EX", "100"])
        .cmd(&["MSET", "x", "3"])
        .cmd(&["TTL", "x"])
        .cmd(&["DBSIZE"]);

    // --- INCR family ---
    s.cmd(&["INCR", "n"])
        .cmd(&["INCR", "n"])
        .cmd(&["INCRBY", "n", "10"])
        .cmd(&["INCRBY", "n", "-20"])
        .cmd(&["DECR", "n"])
        .cmd(&["DECRBY", "n", "5"])
        .cmd(&["DECRBY", "n", "-5"])
        .cmd(&["GET", "n"])
        .cmd(&["DECR", "dn"])
        .cmd(&["DECRBY", "dbn", "7"])
        .cmd(&["INCRBY", "ibn", "0"])
        .cmd(&["INCRBY", "n", "abc"])
        .cmd(&["INCRBY", "n", "1.5"])
        .cmd(&["INCRBY", "n", ""])
        .cmd(&["INCRBY", "n", " 1"])
        .cmd(&["INCRBY", "n", "+1"])
        .cmd(&["INCRBY", "n", "01"])
        .cmd(&["INCRBY", "n", "-0"])
        .cmd(&["DECRBY", "n", "x"])
        .cmd(&["INCRBY", "n", "99999999999999999999"])
        .cmd(&["GET", "n"]);
    for value in [
        "abc",
        "1.5",
        "",
        " 1",
        "1 ",
        "+1",
        "01",
        "-0",
        "0",
        "-1",
        "00",
        "1e3",
        "0x10",
        "12345678901234567890",
        "9223372036854775808",
        "-9223372036854775809",
    ] {
        s.cmd(&["SET", "iv", value])
            .cmd(&["INCR", "iv"])
            .cmd(&["DECR", "iv"])
            .cmd(&["INCRBY", "iv", "5"])
            .cmd(&["GET", "iv"]);
    }
    s.cmd(&["SET", "max", "9223372036854775807"])
        .cmd(&["INCR", "max"])
        .cmd(&["INCRBY", "max", "1"])
        .cmd(&["INCRBY", "max", "0"])
        .cmd(&["DECRBY", "max", "-1"])
        .cmd(&["DECR", "max"])
        .cmd(&["GET", "max"])
        .cmd(&["SET", "min", "-9223372036854775808"])
        .cmd(&["DECR", "min"])
        .cmd(&["DECRBY", "min", "1"])
        .cmd(&["INCRBY", "min", "-1"])
        .cmd(&["INCR", "min"])
        .cmd(&["GET", "min"])
        .cmd(&["SET", "z", "0"])
        .cmd(&["INCRBY", "z", "9223372036854775807"])
        .cmd(&["INCRBY", "z", "9223372036854775807"])
        .cmd(&["SET", "z", "0"])
        .cmd(&["INCRBY", "z", "-9223372036854775808"])
        .cmd(&["DECRBY", "z", "1"])
        .cmd(&["SET", "z", "0"])
        .cmd(&["DECRBY", "z", "-9223372036854775808"])
        .cmd(&["DECRBY", "z", "9223372036854775807"])
        .cmd(&["GET", "z"])
        .cmd(&["SET", "big-int", &"7".repeat(1000)])
        .cmd(&["INCR", "big-int"])
        // INCR keeps the TTL
        .cmd(&["SET", "incttl", "5", "EX", "100"])
        .cmd(&["INCR", "incttl"])
        .near(&["TTL", "incttl"], 1)
        // arity
        .cmd(&["INCR"])
        .cmd(&["INCR", "a", "b"])
        .cmd(&["INCRBY", "n"])
        .cmd(&["INCRBY", "n", "1", "2"])
        .cmd(&["DECR"])
        .cmd(&["DECR", "a", "b"])
        .cmd(&["DECRBY", "n"])
        .cmd(&["DECRBY", "n", "1", "2"]);

    // --- APPEND / STRLEN ---
    s.cmd(&["APPEND", "ap", "hello"])
        .cmd(&["APPEND", "ap", " world"])
        .cmd(&["GET", "ap"])
        .cmd(&["APPEND", "ap", ""])
        .cmd(&["STRLEN", "ap"])
        .cmd(&["STRLEN", "missing"])
        .cmd(&["APPEND", "ap-empty", ""])
        .cmd(&["EXISTS", "ap-empty"])
        .cmd(&["GET", "ap-empty"])
        .cmd(&["STRLEN", "ap-empty"])
        .cmd(&["SET", "apn", "10"])
        .cmd(&["APPEND", "apn", "5"])
        .cmd(&["INCR", "apn"])
        .cmd(&["SET", "apttl", "a", "EX", "100"])
        .cmd(&["APPEND", "apttl", "b"])
        .near(&["TTL", "apttl"], 1)
        .cmd(&["APPEND"])
        .cmd(&["APPEND", "ap"])
        .cmd(&["APPEND", "ap", "a", "b"])
        .cmd(&["STRLEN"])
        .cmd(&["STRLEN", "a", "b"]);

    // --- the expire family ---
    s.cmd(&["SET", "e", "v"])
        .cmd(&["TTL", "e"])
        .cmd(&["PTTL", "e"])
        .cmd(&["TTL", "missing"])
        .cmd(&["PTTL", "missing"])
        .cmd(&["EXPIRE", "missing", "100"])
        .cmd(&["PEXPIRE", "missing", "100"])
        .cmd(&["EXPIREAT", "missing", &later_s])
        .cmd(&["PEXPIREAT", "missing", &later_ms])
        .cmd(&["EXPIRE", "e", "100"])
        .near(&["TTL", "e"], 1)
        .near(&["PTTL", "e"], 1500)
        .cmd(&["PEXPIRE", "e", "200000"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIREAT", "e", &later_s])
        .near(&["TTL", "e"], 2)
        .cmd(&["PEXPIREAT", "e", &later2_ms])
        .near(&["TTL", "e"], 2)
        .cmd(&["PERSIST", "e"])
        .cmd(&["PERSIST", "e"])
        .cmd(&["PERSIST", "missing"])
        .cmd(&["TTL", "e"])
        // NX / XX / GT / LT
        .cmd(&["EXPIRE", "e", "100", "XX"])
        .cmd(&["TTL", "e"])
        .cmd(&["EXPIRE", "e", "100", "GT"])
        .cmd(&["TTL", "e"])
        .cmd(&["EXPIRE", "e", "100", "NX"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "200", "NX"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "200", "XX"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "100", "GT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "300", "GT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "400", "LT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "50", "LT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "60", "xx", "gt"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "10", "XX", "LT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["EXPIRE", "e", "10", "NX", "NX"])
        .cmd(&["PEXPIRE", "e", "5000", "LT"])
        .near(&["PTTL", "e"], 1500)
        .cmd(&["PEXPIREAT", "e", &later_ms, "GT"])
        .near(&["TTL", "e"], 2)
        .cmd(&["EXPIREAT", "e", &later2_s, "LT"])
        .near(&["TTL", "e"], 2)
        .cmd(&["EXPIREAT", "e", &later2_s, "NX"])
        .cmd(&["PERSIST", "e"])
        .cmd(&["EXPIRE", "e", "100", "LT"])
        .near(&["TTL", "e"], 1)
        .cmd(&["PERSIST", "e"])
        .cmd(&["EXPIRE", "missing", "100", "NX"])
        .cmd(&["EXPIRE", "missing", "100", "LT"])
        // conflicts and bad options
        .cmd(&["EXPIRE", "e", "100", "NX", "XX"])
        .cmd(&["EXPIRE", "e", "100", "NX", "GT"])
        .cmd(&["EXPIRE", "e", "100", "NX", "LT"])
        .cmd(&["EXPIRE", "e", "100", "GT", "LT"])
        .cmd(&["EXPIRE", "e", "100", "XX", "GT", "LT"])
        .cmd(&["PEXPIRE", "e", "100", "NX", "XX"])
        .cmd(&["EXPIREAT", "e", &later_s, "GT", "LT"])
        .cmd(&["PEXPIREAT", "e", &later_ms, "XX", "NX"])
        .cmd(&["EXPIRE", "e", "100", "FOO"])
        .cmd(&["EXPIRE", "e", "100", ""])
        .cmd(&["PEXPIRE", "e", "100", "NX", "BAR"])
        .cmd(&["EXPIRE", "missing", "100", "FOO"])
        .cmd(&["EXPIRE", "e", "abc"])
        .cmd(&["EXPIRE", "e", "1.5"])
        .cmd(&["EXPIRE", "e", ""])
        .cmd(&["EXPIRE", "e", "+5"])
        .cmd(&["PEXPIRE", "e", "5 "])
        .cmd(&["EXPIREAT", "e", "x"])
        .cmd(&["PEXPIREAT", "e", "1.0"])
        .cmd(&["EXPIRE", "missing", "abc"])
        .cmd(&["EXPIRE", "e", "9223372036854775807"])
        .cmd(&["EXPIRE", "e", "-9223372036854775808"])
        .cmd(&["EXPIRE", "e", "9223372036854776"])
        .cmd(&["PEXPIRE", "e", "9223372036854775807"])
        .cmd(&["EXPIREAT", "e", "9223372036854775807"])
        .cmd(&["EXPIRE", "e", "99999999999999999999"])
        .cmd(&["TTL", "e"])
        .cmd(&["EXPIRE", "e", "0100"])
        .near(&["TTL", "e"], 1)
        .cmd(&["PERSIST", "e"])
        // zero, negative and past expiry delete the key
        .cmd(&["EXPIRE", "e", "-1"])
        .cmd(&["EXISTS", "e"])
        .cmd(&["TTL", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["EXPIRE", "e", "0"])
        .cmd(&["GET", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["PEXPIRE", "e", "-100"])
        .cmd(&["GET", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["EXPIREAT", "e", "1"])
        .cmd(&["GET", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["PEXPIREAT", "e", "1"])
        .cmd(&["GET", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["EXPIREAT", "e", "-5"])
        .cmd(&["GET", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["EXPIRE", "e", "-1", "GT"])
        .cmd(&["EXISTS", "e"])
        .cmd(&["EXPIRE", "e", "-1", "LT"])
        .cmd(&["EXISTS", "e"])
        .cmd(&["SET", "e", "v", "EX", "100"])
        .cmd(&["EXPIRE", "e", "-1", "XX"])
        .cmd(&["EXISTS", "e"])
        .cmd(&["SET", "e", "v"])
        .cmd(&["EXPIRE", "e", "-1", "NX"])
        .cmd(&["EXISTS", "e"])
        // arity
        .cmd(&["EXPIRE"])
        .cmd(&["EXPIRE", "e"])
        .cmd(&["PEXPIRE", "e"])
        .cmd(&["EXPIREAT", "e"])
        .cmd(&["PEXPIREAT"])
        .cmd(&["TTL"])
        .cmd(&["TTL", "a", "b"])
        .cmd(&["PTTL"])
        .cmd(&["PTTL", "a", "b"])
        .cmd(&["PERSIST"])
        .cmd(&["PERSIST", "a", "b"]);

    // --- empty keys and values, binary values, large values ---
    let binary = b"a\r\nb\0c\r\n$3\r\n*1\r\n\xff\xfe".to_vec();
    let mib: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    s.cmd(&["SET", "", ""])
        .cmd(&["GET", ""])
        .cmd(&["EXISTS", ""])
        .cmd(&["STRLEN", ""])
        .cmd(&["APPEND", "", "x"])
        .cmd(&["GET", ""])
        .cmd(&["INCR", ""])
        .cmd(&["SET", "", "5"])
        .cmd(&["INCR", ""])
        .cmd(&["MGET", "", "missing"])
        .cmd(&["EXPIRE", "", "100"])
        .near(&["TTL", ""], 1)
        .cmd(&["PERSIST", ""])
        .cmd(&["DEL", ""])
        .cmd(&["GET", ""])
        .cmd(&["SET", "empty-value", ""])
        .cmd(&["GET", "empty-value"])
        .cmd(&["STRLEN", "empty-value"])
        .cmd(&["EXISTS", "empty-value"])
        .cmd(&["INCR", "empty-value"])
        .bin(vec![b"SET".to_vec(), b"bin".to_vec(), binary.clone()])
        .bin(vec![b"GET".to_vec(), b"bin".to_vec()])
        .bin(vec![b"STRLEN".to_vec(), b"bin".to_vec()])
        .bin(vec![b"APPEND".to_vec(), b"bin".to_vec(), binary.clone()])
        .bin(vec![b"GET".to_vec(), b"bin".to_vec()])
        .bin(vec![
            b"SET".to_vec(),
            binary.clone(),
            b"binary key".to_vec(),
        ])
        .bin(vec![b"GET".to_vec(), binary.clone()])
        .bin(vec![b"EXISTS".to_vec(), binary.clone(), b"bin".to_vec()])
        .bin(vec![
            b"MSET".to_vec(),
            b"b1".to_vec(),
            binary.clone(),
            b"b2\r\n".to_vec(),
            b"\0".to_vec(),
        ])
        .bin(vec![b"MGET".to_vec(), b"b1".to_vec(), b"b2\r\n".to_vec()])
        .bin(vec![b"SET".to_vec(), b"big".to_vec(), mib.clone()])
        .bin(vec![b"GET".to_vec(), b"big".to_vec()])
        .bin(vec![b"STRLEN".to_vec(), b"big".to_vec()])
        .bin(vec![b"APPEND".to_vec(), b"big".to_vec(), mib.clone()])
        .bin(vec![b"STRLEN".to_vec(), b"big".to_vec()])
        .bin(vec![
            b"SET".to_vec(),
            b"big".to_vec(),
            mib.clone(),
            b"GET".to_vec(),
        ])
        .bin(vec![b"MGET".to_vec(), b"big".to_vec(), b"bin".to_vec()])
        .bin(vec![b"ECHO".to_vec(), mib.clone()])
        .bin(vec![b"PING".to_vec(), mib.clone()])
        .bin(vec![b"INCR".to_vec(), b"big".to_vec()])
        .bin(vec![b"SET".to_vec(), mib.clone(), b"v".to_vec()])
        .bin(vec![b"GET".to_vec(), mib.clone()])
        .bin(vec![b"DEL".to_vec(), mib.clone(), b"big".to_vec()])
        .cmd(&["DBSIZE"]);

    // --- unknown commands ---
    let long = "x".repeat(300);
    s.cmd(&["NOSUCHCOMMAND"])
        .cmd(&["nosuchcommand"])
        .cmd(&["NOSUCH", "a", "b"])
        .cmd(&["NOSUCH", ""])
        .cmd(&["NOSUCH", &long])
        .cmd(&["NOSUCH", "a", &long, "c"])
        .cmd(&[
            "NOSUCH",
            &"y".repeat(60),
            &"z".repeat(60),
            "third",
            "fourth",
        ])
        .cmd(&[&long])
        .cmd(&[&long, "arg"])
        .cmd(&[""])
        .cmd(&["", "arg"])
        .cmd(&["GETT", "k"])
        .cmd(&["SETX", "k", "v"])
        .cmd(&["NOSUCH", "100%", "%s%d"])
        .bin(vec![b"NO\r\nSUCH".to_vec(), b"a\r\nb".to_vec()])
        .bin(vec![b"NOSUCH".to_vec(), b"a\0b".to_vec()])
        // Not compared: arguments that are not UTF-8 quoted in an error, which Redis echoes raw
        // and cads shows as U+FFFD (docs/PROTOCOL.md).
        .cmd(&["PING"]);

    // --- FLUSHALL / FLUSHDB ---
    s.cmd(&["MSET", "f1", "1", "f2", "2"])
        .cmd(&["SET", "f3", "3", "EX", "100"])
        .cmd(&["DBSIZE"])
        .cmd(&["FLUSHDB"])
        .cmd(&["DBSIZE"])
        .cmd(&["GET", "f1"])
        .cmd(&["TTL", "f3"])
        .cmd(&["MSET", "f1", "1", "f2", "2"])
        .cmd(&["FLUSHALL", "SYNC"])
        .cmd(&["DBSIZE"])
        .cmd(&["SET", "f1", "1"])
        .cmd(&["FLUSHALL", "async"])
        .cmd(&["DBSIZE"])
        .cmd(&["SET", "f1", "1"])
        .cmd(&["FLUSHDB", "sync"])
        .cmd(&["SET", "f1", "1"])
        .cmd(&["FLUSHDB", "ASYNC"])
        .cmd(&["DBSIZE"])
        .cmd(&["SET", "f1", "1"])
        .cmd(&["FLUSHALL", "FOO"])
        .cmd(&["FLUSHALL", "SYNC", "ASYNC"])
        .cmd(&["DBSIZE"])
        .cmd(&["FLUSHDB", "FOO"])
        .cmd(&["SET", "f1", "1"])
        .cmd(&["FLUSHDB", "SYNC", "SYNC"])
        .cmd(&["DBSIZE"])
        .cmd(&["flushall"])
        .cmd(&["DBSIZE"]);

    // --- a few commands after all that: the connection is still sane ---
    s.cmd(&["SET", "end", "ok"])
        .cmd(&["GET", "end"])
        .cmd(&["PING"]);
    s
}

#[test]
fn replies_are_identical_to_redis_for_the_plain_subset() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let script = plain_script();
    let mismatches = compare(&redis, &cads, &script.steps);
    assert_no_mismatches("plain-subset replies", script.steps.len(), &mismatches);
}

/// The same sequence after `HELLO 3`: nulls and maps in RESP3 must match too.
#[test]
fn resp3_replies_are_identical_to_redis_for_the_plain_subset() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let mut script = Script::default();
    script.unchecked(&["HELLO", "3"]);
    script.steps.extend(plain_script().steps);
    script
        .cmd(&["MGET", "nothing", "nothing2"])
        .cmd(&["CONFIG", "GET", "no-such-parameter"])
        .cmd(&["HELLO", "2", "FOO"]);
    let mismatches = compare(&redis, &cads, &script.steps);
    assert_no_mismatches("RESP3 replies", script.steps.len(), &mismatches);
}

/// The string commands beyond the basics (SETEX, PSETEX, SETNX, GETSET, GETDEL, GETEX, GETRANGE,
/// SETRANGE, MSETNX, INCRBYFLOAT) and TIME's arity: normal use, missing keys, negative and huge
/// offsets, bad numbers, overflow, options that clash, arity.
fn string_script() -> Script {
    let mut s = Script::default();
    let later_s = (unix_secs() + 1000).to_string();
    let later_ms = ((unix_secs() + 1000) * 1000).to_string();

    // --- SETEX / PSETEX ---
    s.cmd(&["FLUSHALL"])
        .cmd(&["SETEX", "sx", "100", "v"])
        .near(&["TTL", "sx"], 1)
        .cmd(&["GET", "sx"])
        .cmd(&["PSETEX", "psx", "100000", "v"])
        .near(&["PTTL", "psx"], 1500)
        .cmd(&["SETEX", "sx", "200", "w"])
        .near(&["TTL", "sx"], 1)
        .cmd(&["GET", "sx"]);
    for bad in [
        "0",
        "-1",
        "abc",
        "1.5",
        "",
        " 1",
        "+1",
        "01",
        "9223372036854775807",
        "9223372036854776",
        "9223372036854775",
        "-9223372036854775808",
        "99999999999999999999",
    ] {
        s.cmd(&["SETEX", "bad", bad, "v"])
            .cmd(&["PSETEX", "bad", bad, "v"]);
    }
    s.cmd(&["PSETEX", "bad", "9223372036854775000", "v"])
        .cmd(&["EXISTS", "bad"])
        .cmd(&["SETEX"])
        .cmd(&["SETEX", "k", "10"])
        .cmd(&["SETEX", "k", "10", "v", "extra"])
        .cmd(&["PSETEX", "k"]);

    // --- SETNX / GETSET ---
    s.cmd(&["SETNX", "nx", "a"])
        .cmd(&["SETNX", "nx", "b"])
        .cmd(&["GET", "nx"])
        .cmd(&["SETNX", "", ""])
        .cmd(&["GET", ""])
        .cmd(&["SETNX", "nx"])
        .cmd(&["SETNX", "nx", "a", "b"])
        .cmd(&["GETSET", "gs", "one"])
        .cmd(&["GETSET", "gs", "two"])
        .cmd(&["GET", "gs"])
        .cmd(&["SET", "gs", "v", "EX", "100"])
        .cmd(&["GETSET", "gs", "w"])
        .cmd(&["TTL", "gs"])
        .cmd(&["GETSET", "gs"])
        .cmd(&["GETSET", "gs", "a", "b"]);

    // --- GETDEL ---
    s.cmd(&["SET", "gd", "v"])
        .cmd(&["GETDEL", "gd"])
        .cmd(&["GETDEL", "gd"])
        .cmd(&["EXISTS", "gd"])
        .cmd(&["GETDEL", "missing"])
        .cmd(&["SET", "gd", "v", "PX", "100000"])
        .cmd(&["GETDEL", "gd"])
        .cmd(&["TTL", "gd"])
        .cmd(&["GETDEL"])
        .cmd(&["GETDEL", "a", "b"]);

    // --- GETEX ---
    s.cmd(&["SET", "ge", "v"])
        .cmd(&["GETEX", "ge"])
        .cmd(&["TTL", "ge"])
        .cmd(&["GETEX", "ge", "EX", "100"])
        .near(&["TTL", "ge"], 1)
        .cmd(&["GETEX", "ge", "PX", "200000"])
        .near(&["PTTL", "ge"], 1500)
        .cmd(&["GETEX", "ge", "EXAT", &later_s])
        .near(&["TTL", "ge"], 2)
        .cmd(&["GETEX", "ge", "PXAT", &later_ms])
        .near(&["TTL", "ge"], 2)
        .cmd(&["GETEX", "ge", "PERSIST"])
        .cmd(&["TTL", "ge"])
        .cmd(&["GETEX", "ge", "persist"])
        .cmd(&["GETEX", "ge", "ex", "100", "EX", "200"])
        .near(&["TTL", "ge"], 1)
        .cmd(&["GETEX", "ge", "PERSIST", "PERSIST"])
        .cmd(&["TTL", "ge"])
        // conflicts and syntax
        .cmd(&["GETEX", "ge", "EX", "10", "PX", "100"])
        .cmd(&["GETEX", "ge", "PERSIST", "EX", "10"])
        .cmd(&["GETEX", "ge", "EX", "10", "PERSIST"])
        .cmd(&["GETEX", "ge", "EXAT", "10", "PXAT", "10"])
        .cmd(&["GETEX", "ge", "KEEPTTL"])
        .cmd(&["GETEX", "ge", "NX"])
        .cmd(&["GETEX", "ge", "GET"])
        .cmd(&["GETEX", "ge", "EX"])
        .cmd(&["GETEX", "ge", "FOO"])
        .cmd(&["GETEX", "missing", "EX"])
        .cmd(&["GETEX", "missing", "FOO"])
        // bad expiry values: refused for an existing key, unseen for a missing one
        .cmd(&["GETEX", "ge", "EX", "0"])
        .cmd(&["GETEX", "ge", "EX", "-1"])
        .cmd(&["GETEX", "ge", "PX", "0"])
        .cmd(&["GETEX", "ge", "EX", "abc"])
        .cmd(&["GETEX", "ge", "EX", "1.5"])
        .cmd(&["GETEX", "ge", "EX", "9223372036854775807"])
        .cmd(&["GETEX", "ge", "EX", "9223372036854775"])
        .cmd(&["GETEX", "ge", "PX", "9223372036854775807"])
        .cmd(&["GETEX", "ge", "EXAT", "9223372036854775807"])
        .cmd(&["GETEX", "ge", "PXAT", "-5"])
        .cmd(&["TTL", "ge"])
        .cmd(&["GETEX", "missing", "EX", "abc"])
        .cmd(&["GETEX", "missing", "EX", "0"])
        .cmd(&["GETEX", "missing", "PX", "9223372036854775807"])
        .cmd(&["GETEX", "missing", "PERSIST"])
        // an absolute time in the past deletes, after answering
        .cmd(&["GETEX", "ge", "EXAT", "1"])
        .cmd(&["EXISTS", "ge"])
        .cmd(&["SET", "ge", "v"])
        .cmd(&["GETEX", "ge", "PXAT", "1"])
        .cmd(&["GET", "ge"])
        .cmd(&["GETEX"]);

    // --- GETRANGE ---
    s.cmd(&["SET", "gr", "Hello, World"]);
    for (start, end) in [
        ("0", "4"),
        ("0", "-1"),
        ("-5", "-1"),
        ("-1", "-5"),
        ("-1", "-1"),
        ("5", "3"),
        ("0", "-100"),
        ("-100", "-100"),
        ("-100", "2"),
        ("100", "200"),
        ("11", "11"),
        ("12", "12"),
        ("0", "9223372036854775807"),
        ("-9223372036854775808", "-1"),
        ("-9223372036854775808", "9223372036854775807"),
        ("9223372036854775807", "-9223372036854775808"),
        ("0", "9223372036854775808"),
        ("a", "1"),
        ("0", ""),
        ("1.5", "2"),
        ("+1", "2"),
    ] {
        s.cmd(&["GETRANGE", "gr", start, end]);
    }
    s.cmd(&["GETRANGE", "missing", "0", "-1"])
        .cmd(&["GETRANGE", "missing", "5", "1"])
        .cmd(&["SET", "gr-int", "12345"])
        .cmd(&["GETRANGE", "gr-int", "1", "2"])
        .cmd(&["SET", "gr-empty", ""])
        .cmd(&["GETRANGE", "gr-empty", "0", "-1"])
        .cmd(&["GETRANGE", "gr-empty", "0", "0"])
        .cmd(&["GETRANGE", "gr"])
        .cmd(&["GETRANGE", "gr", "0"])
        .cmd(&["GETRANGE", "gr", "0", "1", "2"]);

    // --- SETRANGE ---
    s.cmd(&["SET", "sr", "Hello World"])
        .cmd(&["SETRANGE", "sr", "6", "Redis"])
        .cmd(&["GET", "sr"])
        .cmd(&["SETRANGE", "sr", "0", "J"])
        .cmd(&["SETRANGE", "sr", "11", "!"])
        .cmd(&["SETRANGE", "sr", "15", "?"])
        .cmd(&["GET", "sr"])
        .cmd(&["SETRANGE", "sr", "0", ""])
        .cmd(&["SETRANGE", "sr", "1000", ""])
        .cmd(&["SETRANGE", "sr-new", "3", "abc"])
        .cmd(&["GET", "sr-new"])
        .cmd(&["SETRANGE", "sr-none", "0", ""])
        .cmd(&["SETRANGE", "sr-none", "5", ""])
        .cmd(&["EXISTS", "sr-none"])
        .cmd(&["SET", "sr-int", "12345"])
        .cmd(&["SETRANGE", "sr-int", "2", "x"])
        .cmd(&["GET", "sr-int"])
        .cmd(&["INCR", "sr-int"])
        .cmd(&["SET", "sr-ttl", "abc", "EX", "100"])
        .cmd(&["SETRANGE", "sr-ttl", "1", "x"])
        .near(&["TTL", "sr-ttl"], 1);
    for offset in [
        "-1",
        "-9223372036854775808",
        "536870912",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "abc",
        "",
        "1.5",
        "01",
    ] {
        s.cmd(&["SETRANGE", "sr", offset, "x"])
            .cmd(&["SETRANGE", "sr-missing", offset, "x"]);
    }
    s.cmd(&["EXISTS", "sr-missing"])
        .cmd(&["STRLEN", "sr"])
        .cmd(&["SETRANGE", "sr"])
        .cmd(&["SETRANGE", "sr", "0"])
        .cmd(&["SETRANGE", "sr", "0", "a", "b"]);

    // --- MSETNX ---
    s.cmd(&["MSETNX", "mn1", "a", "mn2", "b"])
        .cmd(&["MGET", "mn1", "mn2"])
        .cmd(&["MSETNX", "mn3", "c", "mn1", "x"])
        .cmd(&["MGET", "mn1", "mn3"])
        .cmd(&["MSETNX", "mn4", "d", "mn4", "e"])
        .cmd(&["GET", "mn4"])
        .cmd(&["SET", "mn5", "v", "EX", "100"])
        .cmd(&["MSETNX", "mn5", "w"])
        .near(&["TTL", "mn5"], 1)
        .cmd(&["MSETNX"])
        .cmd(&["MSETNX", "a"])
        .cmd(&["MSETNX", "a", "1", "b"]);

    // --- INCRBYFLOAT ---
    s.cmd(&["INCRBYFLOAT", "f", "10.5"])
        .cmd(&["INCRBYFLOAT", "f", "0.1"])
        .cmd(&["INCRBYFLOAT", "f", "-5.0e3"])
        .cmd(&["INCRBYFLOAT", "f", "5.0e3"])
        .cmd(&["GET", "f"])
        .cmd(&["SET", "f-ttl", "1", "EX", "100"])
        .cmd(&["INCRBYFLOAT", "f-ttl", "1"])
        .near(&["TTL", "f-ttl"], 1);
    for value in [
        "0", "1", "-1", "3.0", "1.5", "abc", "", " 1", "1 ", "1e3", "0x10", "inf", "nan",
    ] {
        s.cmd(&["SET", "fv", value])
            .cmd(&["INCRBYFLOAT", "fv", "1"])
            .cmd(&["GET", "fv"]);
    }
    for incr in [
        "0.1",
        "-0.1",
        "1e-20",
        "-1e-20",
        "3.0e3",
        "1e308",
        "-1e308",
        "1e4000",
        "0.000003814697265625",
        "1e-4940",
        "0x1p-3",
        "+1.5",
        ".5",
        "5.",
        "-0",
        "9223372036854775807",
        "18446744073709551617",
        "1e5000",
        "1e-5000",
        "inf",
        "-inf",
        "nan",
        "abc",
        "",
        ".",
        "1.5e",
        "1e",
        "0x",
        " 1",
        "1 ",
    ] {
        s.cmd(&["SET", "fi", "1.25"])
            .cmd(&["INCRBYFLOAT", "fi", incr])
            .cmd(&["INCRBYFLOAT", "fi-missing", incr])
            .cmd(&["DEL", "fi-missing"]);
    }
    s.cmd(&["SET", "fmax", "1.18973149535723176502e4932"])
        .cmd(&["INCRBYFLOAT", "fmax", "1.18973149535723176502e4932"])
        .cmd(&["INCRBYFLOAT", "fmax", "-1e4932"])
        .cmd(&["INCRBYFLOAT"])
        .cmd(&["INCRBYFLOAT", "f"])
        .cmd(&["INCRBYFLOAT", "f", "1", "2"]);

    // --- TIME ---
    s.cmd(&["TIME", "now"]).cmd(&["DBSIZE"]);
    s
}

/// Container commands' subcommands, SELECT and the errors that name HELP: what a CMI shares with
/// Redis 7.0 (HELP texts and CLIENT LIST lines describe each server, and are tested in
/// server_commands.rs). In RESP3 Redis sends CLIENT LIST's text as a verbatim string and a CMI
/// as a bulk string (docs/PROTOCOL.md), so the lists, empty here, are compared in RESP2 only.
fn server_script(protocol: u8) -> Script {
    let mut s = Script::default();
    if protocol == 2 {
        for args in [
            &["CLIENT", "LIST", "ID", "0"][..],
            &["CLIENT", "LIST", "ID", "-5"],
            &["CLIENT", "LIST", "TYPE", "master"],
            &["CLIENT", "LIST", "TYPE", "REPLICA"],
            &["CLIENT", "LIST", "TYPE", "slave"],
            &["CLIENT", "LIST", "TYPE", "pubsub"],
        ] {
            s.cmd(args);
        }
    }
    for args in [
        &["CLIENT"][..],
        &["CLIENT", "FOO"],
        &["client", "foo", "bar"],
        &["CLIENT", "ID", "x"],
        &["CLIENT", "GETNAME", "x"],
        &["CLIENT", "INFO", "x"],
        &["CLIENT", "SETNAME"],
        &["CLIENT", "SETNAME", "a", "b"],
        &["CLIENT", "LIST", "foo"],
        &["CLIENT", "LIST", "TYPE"],
        &["CLIENT", "LIST", "TYPE", "foo"],
        &["CLIENT", "LIST", "TYPE", "normal", "extra"],
        &["CLIENT", "LIST", "ID"],
        &["CLIENT", "LIST", "ID", "abc"],
        &["CLIENT", "LIST", "ID", "1", "abc"],
        &["CLIENT", "NO-EVICT"],
        &["CLIENT", "NO-EVICT", "maybe"],
        &["CLIENT", "NO-EVICT", "on"],
        &["CLIENT", "NO-EVICT", "OFF"],
        &["CLIENT", "NO-EVICT", "on", "off"],
        &["CONFIG"],
        &["CONFIG", "FOO"],
        &["CONFIG", "GET"],
        &["CONFIG", "SET", "a"],
        &["CONFIG", "RESETSTAT", "x"],
        &["COMMAND", "FOO"],
        &["COMMAND", "COUNT", "x"],
        &["COMMAND", "HELP", "x"],
        &["COMMAND", "LIST", "x"],
        &["COMMAND", "LIST", "FILTERBY", "FOO", "x"],
        &["COMMAND", "LIST", "FILTERBY", "PATTERN", "xyz*"],
        &["COMMAND", "INFO", "nosuch"],
        &["COMMAND", "DOCS", "nosuch"],
        &["SELECT", "0"],
        &["SELECT", "16"],
        &["SELECT", "99999999999999999999"],
        &["TIME", "x"],
    ] {
        s.cmd(args);
    }
    s
}

#[test]
fn replies_are_identical_to_redis_for_the_string_commands() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let mut script = string_script();
    script.steps.extend(server_script(2).steps);
    let mismatches = compare(&redis, &cads, &script.steps);
    assert_no_mismatches("string-command replies", script.steps.len(), &mismatches);
}

#[test]
fn resp3_replies_are_identical_to_redis_for_the_string_commands() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let mut script = Script::default();
    script.unchecked(&["HELLO", "3"]);
    script.steps.extend(string_script().steps);
    script.steps.extend(server_script(3).steps);
    let mismatches = compare(&redis, &cads, &script.steps);
    assert_no_mismatches(
        "RESP3 string-command replies",
        script.steps.len(),
        &mismatches,
    );
}

/// INCRBYFLOAT on a few hundred operands of every shape (small and huge, many digits, exponents,
/// hexadecimal), chained: Redis's extended-precision sums and their printing, digit for digit.
#[test]
fn incrbyfloat_sums_are_identical_to_redis() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    // A fixed-seed xorshift: the same operands on every run, so a failure reproduces.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut number = move || {
        let r = next();
        let mut digits = |count: u64| -> String {
            (0..count)
                .map(|_| char::from(b'0' + (next() % 10) as u8))
                .collect()
        };
        let sign = if r & 1 == 0 { "" } else { "-" };
        let e = if r >> 40 & 1 == 0 { "e" } else { "E" };
        let mantissa = digits(1 + (r >> 1) % 20);
        match (r >> 8) % 7 {
            0 => format!("{sign}{mantissa}"),
            1 => format!("{sign}0.{mantissa}"),
            2 => format!("{sign}{mantissa}.{}", digits(1 + (r >> 16) % 19)),
            3 => format!("{sign}{mantissa}{e}{}", (r >> 16) % 61),
            4 => format!("{sign}{mantissa}{e}-{}", (r >> 16) % 61),
            5 => format!("{sign}{mantissa}{e}{}", (r >> 16) % 4900),
            _ => format!("{sign}0x{:x}p-{}", r >> 20, (r >> 8) % 90),
        }
    };
    let mut script = Script::default();
    script.cmd(&["DEL", "chain"]);
    for i in 0..300 {
        let (a, b) = (number(), number());
        script
            .cmd(&["SET", "pair", &a])
            .cmd(&["INCRBYFLOAT", "pair", &b]);
        // A running sum, reset now and then so that it does not stay huge.
        if i % 20 == 0 {
            script.cmd(&["DEL", "chain"]);
        }
        script.cmd(&["INCRBYFLOAT", "chain", &b]);
    }
    let mismatches = compare(&redis, &cads, &script.steps);
    assert_no_mismatches("INCRBYFLOAT replies", script.steps.len(), &mismatches);
}

/// The same commands sent as one pipelined write: replies must still match, in order.
#[test]
fn pipelined_replies_are_identical_to_redis() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let mut batch = Vec::new();
    let mut commands: Vec<Vec<&str>> = Vec::new();
    commands.push(vec!["FLUSHALL"]);
    for i in 0..200 {
        match i % 8 {
            0 => commands.push(vec!["SET", "p", "1"]),
            1 => commands.push(vec!["INCR", "p"]),
            2 => commands.push(vec!["APPEND", "p", "x"]),
            3 => commands.push(vec!["GET", "p"]),
            4 => commands.push(vec!["INCR", "p"]),
            5 => commands.push(vec!["MGET", "p", "q", "p"]),
            6 => commands.push(vec!["NOSUCH", "p"]),
            _ => commands.push(vec!["EXISTS", "p", "q", "p"]),
        }
    }
    commands.push(vec!["DBSIZE"]);
    for args in &commands {
        cads_protocol::resp::write_request(&mut batch, args);
    }
    let run = |server: &ServerProcess| {
        let mut conn = server.connect();
        conn.send_raw(&batch).unwrap();
        (0..commands.len())
            .map(|_| conn.read_raw().expect("reply"))
            .collect::<Vec<_>>()
    };
    let expected = run(&redis);
    let got = run(&cads);
    let mismatches: Vec<String> = commands
        .iter()
        .zip(expected.iter().zip(&got))
        .enumerate()
        .filter(|(_, (_, (e, g)))| e != g)
        .map(|(i, (args, (e, g)))| {
            format!(
                "#{i} {}\n      redis: {}\n      cads:  {}",
                args.join(" "),
                show(e, 200),
                show(g, 200)
            )
        })
        .collect();
    assert_no_mismatches("pipelined replies", commands.len(), &mismatches);
}

/// Sends `input` raw to both servers and reads `replies` replies (plus, if `closes`, checks that
/// both close the connection afterwards). Returns the mismatches.
fn compare_raw(
    redis: &ServerProcess,
    cads: &ServerProcess,
    label: &str,
    input: &[u8],
    replies: usize,
    closes: bool,
) -> Vec<String> {
    let run = |server: &ServerProcess| -> (Vec<u8>, String) {
        let mut conn = server.connect();
        conn.set_read_timeout(Duration::from_secs(5));
        if let Err(e) = conn.send_raw(input) {
            return (Vec::new(), format!("<write failed: {e}>"));
        }
        let mut out = Vec::new();
        for _ in 0..replies {
            match conn.read_raw() {
                Ok(reply) => out.extend(reply),
                Err(e) => return (out, format!("<{e}>")),
            }
        }
        let after = if closes {
            match conn.expect_closed() {
                Ok(()) => "closed".to_string(),
                Err(bytes) => format!("not closed: {}", show(&bytes, 100)),
            }
        } else {
            // Still usable?
            match conn.raw(&["PING"]) {
                Ok(r) if r == b"+PONG\r\n" => "open".to_string(),
                Ok(r) => format!("open, PING got {}", show(&r, 100)),
                // A reset (we wrote to a closed socket) and an EOF mean the same here.
                Err(_) => "closed".to_string(),
            }
        };
        (out, after)
    };
    let (expected, redis_after) = run(redis);
    let (got, cads_after) = run(cads);
    if expected == got && redis_after == cads_after {
        Vec::new()
    } else {
        vec![format!(
            "{label}: input {}\n      redis: {} [{redis_after}]\n      cads:  {} [{cads_after}]",
            show(input, 120),
            show(&expected, 300),
            show(&got, 300)
        )]
    }
}

#[test]
fn inline_commands_get_the_same_replies_as_redis() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    // (label, input, number of replies)
    let cases: &[(&str, &[u8], usize)] = &[
        ("set", b"SET a b\r\n", 1),
        ("get", b"GET a\r\n", 1),
        ("lf only", b"GET a\n", 1),
        ("lowercase", b"get a\r\n", 1),
        ("ping", b"PING\r\n", 1),
        ("ping arg", b"PING hello\r\n", 1),
        ("extra spaces", b"  SET   b   c  \r\n", 1),
        ("tabs", b"GET\tb\r\n", 1),
        ("blank lines", b"\r\n\r\n\nPING\r\n", 1),
        ("spaces only", b"   \r\nPING\r\n", 1),
        ("double quotes", b"SET \"a b\" \"c d\"\r\n", 1),
        ("get quoted", b"GET \"a b\"\r\n", 1),
        ("escapes", b"SET e \"x\\r\\ny\\t\\x41\\\\\\\"\"\r\n", 1),
        ("get escapes", b"GET e\r\n", 1),
        ("single quotes", b"SET 'q k' 'v w'\r\n", 1),
        ("get single quoted key", b"GET 'q k'\r\n", 1),
        ("single quote escape", b"SET sq 'a\\'b'\r\n", 1),
        ("get single", b"GET sq\r\n", 1),
        ("empty quoted", b"SET \"\" \"\"\r\n", 1),
        ("get empty", b"GET \"\"\r\n", 1),
        ("incr", b"INCR n\r\nINCR n\r\nINCRBY n 10\r\n", 3),
        ("mset mget", b"MSET x 1 y 2\r\nMGET x y z\r\n", 2),
        (
            "expire ttl",
            b"EXPIRE x 100\r\nTTL y\r\nPERSIST x\r\nTTL x\r\n",
            4,
        ),
        ("echo", b"ECHO hello\r\n", 1),
        ("unknown", b"NOSUCH a b\r\n", 1),
        ("wrong arity", b"GET\r\n", 1),
        ("wrong arity 2", b"GET a b\r\n", 1),
        ("set syntax", b"SET a b NX XX\r\n", 1),
        ("not integer", b"INCR a\r\n", 1),
        (
            "mixed inline and multibulk",
            b"SET m 1\r\n*2\r\n$4\r\nINCR\r\n$1\r\nm\r\nGET m\r\n",
            3,
        ),
        ("dbsize", b"DBSIZE\r\n", 1),
        ("select", b"SELECT 0\r\n", 1),
        ("del", b"DEL a \"a b\" x y\r\n", 1),
    ];
    let mut mismatches = Vec::new();
    for (label, input, replies) in cases {
        // Each case on a fresh connection; state carries over through the keyspace only, and the
        // cases run in the same order on both servers.
        mismatches.extend(compare_raw(&redis, &cads, label, input, *replies, false));
    }
    assert_no_mismatches("inline cases", cases.len(), &mismatches);
}

/// Malformed input gets the same error, and the connection is closed (or kept) the same way.
#[test]
fn protocol_errors_match_redis() {
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let cases: &[(&str, &[u8])] = &[
        ("unbalanced double quote", b"SET \"a b\r\n"),
        ("unbalanced single quote", b"SET 'a b\r\n"),
        ("quote then letter", b"SET \"a\"b c\r\n"),
        ("single quote then letter", b"SET 'it''s' v\r\n"),
        ("bad multibulk length", b"*abc\r\n"),
        ("bad bulk length", b"*1\r\n$abc\r\n"),
        ("negative bulk length", b"*1\r\n$-5\r\n"),
        ("expected $", b"*1\r\n:5\r\n"),
        ("huge multibulk", b"*99999999999\r\n"),
        ("huge bulk", b"*1\r\n$99999999999\r\n"),
    ];
    let mut mismatches = Vec::new();
    for (label, input) in cases {
        mismatches.extend(compare_raw(&redis, &cads, label, input, 1, true));
    }
    // Empty multibulks produce no reply and keep the connection.
    mismatches.extend(compare_raw(
        &redis,
        &cads,
        "empty multibulk",
        b"*0\r\n*-1\r\nPING\r\n",
        1,
        false,
    ));
    // QUIT answers +OK and closes.
    mismatches.extend(compare_raw(&redis, &cads, "quit", b"QUIT\r\n", 1, true));
    mismatches.extend(compare_raw(
        &redis,
        &cads,
        "quit multibulk",
        b"*1\r\n$4\r\nQUIT\r\n",
        1,
        true,
    ));
    assert_no_mismatches("protocol-error cases", cases.len() + 3, &mismatches);
}

// ---------------------------------------------------------------------------------------------
// redis-cli

struct Cli {
    path: PathBuf,
}

impl Cli {
    /// Runs `redis-cli -p port args...` with `stdin` as its input and a timeout-free wait (the
    /// commands are tiny). Returns the output.
    fn run(&self, port: u16, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut child = Command::new(&self.path)
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run redis-cli");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(input).unwrap();
        }
        child.wait_with_output().expect("redis-cli output")
    }

    fn stdout(&self, port: u16, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.run(port, args, stdin);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn redis_cli_works_against_a_cmi() {
    let Some(path) = require_redis_tool("redis-cli") else {
        return;
    };
    let Some(redis) = start_redis() else { return };
    let cads = start_cads(1);
    let cli = Cli { path };

    // Explicit expectations for the basics.
    let p = cads.port;
    assert_eq!(cli.stdout(p, &["PING"], None), "PONG\n");
    assert_eq!(cli.stdout(p, &["SET", "greeting", "hello"], None), "OK\n");
    assert_eq!(cli.stdout(p, &["GET", "greeting"], None), "hello\n");
    assert_eq!(
        cli.stdout(p, &["--raw", "GET", "greeting"], None),
        "hello\n"
    );
    assert_eq!(
        cli.stdout(p, &["--no-raw", "GET", "greeting"], None),
        "\"hello\"\n"
    );
    assert_eq!(cli.stdout(p, &["INCR", "counter"], None), "1\n");
    assert_eq!(
        cli.stdout(p, &["--no-raw", "INCR", "counter"], None),
        "(integer) 2\n"
    );
    assert_eq!(cli.stdout(p, &["--raw", "INCR", "counter"], None), "3\n");
    assert_eq!(
        cli.stdout(p, &[], Some(b"SET x 1\nGET x\n")),
        "OK\n1\n",
        "piped commands"
    );
    let unknown = cli.run(p, &["NOSUCHCOMMAND", "arg"], None);
    let unknown_text = format!(
        "{}{}",
        String::from_utf8_lossy(&unknown.stdout),
        String::from_utf8_lossy(&unknown.stderr)
    );
    assert!(
        unknown_text.contains("ERR unknown command"),
        "redis-cli did not print the error: {unknown_text:?}"
    );
    let info = cli.stdout(p, &["INFO"], None);
    assert!(info.contains("# Memory"), "INFO without # Memory: {info}");
    assert!(info.contains("# Server"), "INFO without # Server: {info}");
    let memory = cli.stdout(p, &["INFO", "memory"], None);
    assert!(memory.contains("used_memory:"), "INFO memory: {memory}");

    // Mass insertion with --pipe (raw protocol on stdin, ECHO-terminated by redis-cli).
    let mut mass = Vec::new();
    for i in 0..1000 {
        cads_protocol::resp::write_request(
            &mut mass,
            &["SET", &format!("mass:{i}"), &format!("value {i}")],
        );
    }
    let piped = cli.run(p, &["--pipe"], Some(&mass));
    let piped_text = String::from_utf8_lossy(&piped.stdout);
    assert!(
        piped.status.success() && piped_text.contains("errors: 0, replies: 1000"),
        "redis-cli --pipe: {piped_text} {}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(cli.stdout(p, &["GET", "mass:999"], None), "value 999\n");

    // The same invocations against redis-server and cads print the same thing.
    let invocations: Vec<(Vec<&str>, Option<&[u8]>)> = vec![
        (vec!["FLUSHALL"], None),
        (vec!["SET", "k", "v"], None),
        (vec!["GET", "k"], None),
        (vec!["--no-raw", "GET", "k"], None),
        (vec!["--no-raw", "GET", "missing"], None),
        (vec!["GET", "missing"], None),
        (vec!["--no-raw", "MGET", "k", "missing", "k"], None),
        (vec!["MGET", "k", "missing", "k"], None),
        (vec!["--no-raw", "INCR", "n"], None),
        (vec!["--no-raw", "INCR", "k"], None),
        (vec!["INCR", "k"], None),
        (vec!["--no-raw", "NOSUCH", "a"], None),
        (vec!["NOSUCH", "a"], None),
        (vec!["--no-raw", "GET"], None),
        (vec!["--no-raw", "SET", "k", "v", "NX", "XX"], None),
        (vec!["--no-raw", "EXISTS", "k", "n", "missing"], None),
        (vec!["--no-raw", "TTL", "k"], None),
        (vec!["--no-raw", "DBSIZE"], None),
        (vec!["-r", "3", "INCR", "rep"], None),
        (vec!["--no-raw", "APPEND", "k", " tail"], None),
        (vec!["--no-raw", "ECHO", "multi\nline"], None),
        (vec!["ECHO", "multi\nline"], None),
        (vec!["--no-raw", "SET", "bin", "a\r\nb"], None),
        (vec!["--no-raw", "GET", "bin"], None),
        (vec!["GET", "bin"], None),
        (
            vec!["-x", "SET", "fromstdin"],
            Some(b"stdin value".as_slice()),
        ),
        (vec!["GET", "fromstdin"], None),
        (
            vec![],
            Some(b"SET a 1\nINCR a\nGET a\nDEL a\nGET a\nNOSUCH\nPING\n".as_slice()),
        ),
        (
            vec!["--no-raw"],
            Some(b"MSET a 1 b 2\nMGET a b c\n".as_slice()),
        ),
        (vec!["--no-raw", "PING"], None),
        (vec!["--no-raw", "SELECT", "0"], None),
        (vec!["FLUSHDB"], None),
        (vec!["--no-raw", "DBSIZE"], None),
    ];
    let mut mismatches = Vec::new();
    for (args, stdin) in &invocations {
        let expected = cli.run(redis.port, args, *stdin);
        let got = cli.run(cads.port, args, *stdin);
        if expected.stdout != got.stdout || expected.status.code() != got.status.code() {
            mismatches.push(format!(
                "redis-cli {args:?} stdin={:?}\n      redis: {:?} ({})\n      cads:  {:?} ({})",
                stdin.map(String::from_utf8_lossy),
                String::from_utf8_lossy(&expected.stdout),
                expected.status,
                String::from_utf8_lossy(&got.stdout),
                got.status
            ));
        }
    }
    assert_no_mismatches("redis-cli outputs", invocations.len(), &mismatches);
}

// ---------------------------------------------------------------------------------------------
// redis-benchmark

fn run_benchmark(path: &Path, port: u16, extra: &[&str]) -> String {
    let mut args = vec![
        "-p".to_string(),
        port.to_string(),
        "-t".into(),
        "get,set".into(),
        "-n".into(),
        "20000".into(),
        "-c".into(),
        "20".into(),
        "-q".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = Command::new(path)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "redis-benchmark {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // -q rewrites a progress line with \r; the final lines are what counts.
    let lines: Vec<&str> = stdout.split(['\r', '\n']).collect();
    for test in ["SET", "GET"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
            "redis-benchmark {args:?} printed no final {test} line:\n{stdout}\n{stderr}"
        );
    }
    assert!(
        !stdout.contains("Error") && !stderr.contains("Error"),
        "redis-benchmark {args:?} reported errors:\n{stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn redis_benchmark_completes_against_a_cmi() {
    let Some(path) = require_redis_tool("redis-benchmark") else {
        return;
    };
    let mut cads = start_cads(1);
    for extra in [&[][..], &["-P", "16"][..]] {
        let out = run_benchmark(&path, cads.port, extra);
        eprintln!(
            "redis-benchmark {extra:?}: {}",
            out.split(['\r', '\n'])
                .filter(|l| l.contains("requests per second"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        assert!(cads.is_running(), "cads-server died during redis-benchmark");
        let mut conn = cads.connect();
        assert_eq!(conn.raw(&["PING"]).unwrap(), b"+PONG\r\n");
        // Without -r the benchmark's key is literally key:__rand_int__, with a 3-byte value (-d 3).
        let value = conn.raw(&["GET", "key:__rand_int__"]).unwrap();
        assert!(
            value.starts_with(b"$3\r\n") && value.len() == 9,
            "GET key:__rand_int__ after the benchmark: {}",
            show(&value, 100)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// redis-py

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn redis_py_works_against_a_cmi() {
    if support::require_tool("python3", "install python3").is_none() {
        return;
    }
    for module in ["redis", "pytest"] {
        if !python_has(module) {
            support::skip_or_fail(
                &format!("python module `{module}`"),
                &format!("`pip install {module}`"),
            );
            return;
        }
    }
    let cads = start_cads(1);
    let root = workspace_root();
    let out = Command::new("python3")
        .args([
            "-m",
            "pytest",
            "-q",
            "-rxs",
            "-p",
            "no:cacheprovider",
            "tests/python",
        ])
        .current_dir(&root)
        .env("CADS_PORT", cads.port.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("pytest tests/python:\n{stdout}{stderr}");
    assert!(
        out.status.success(),
        "pytest tests/python failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// The lines of `tests/python/redis_py_suite.txt` that name tests.
fn redis_py_suite_tests() -> Vec<String> {
    let list = workspace_root().join("tests/python/redis_py_suite.txt");
    std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("{}: {e}", list.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// redis-py's own tests for the commands cads supports (tests/python/redis_py_suite.txt), from
/// its source distribution on PyPI, unmodified, against a CMI, in RESP2 and in RESP3. Each must
/// pass: not fail, not error, not be skipped.
#[test]
fn redis_py_own_tests_pass_against_a_cmi() {
    if support::require_tool("python3", "install python3").is_none() {
        return;
    }
    if !python_has("pytest") {
        support::skip_or_fail("python module `pytest`", "`pip install pytest`");
        return;
    }
    let fetch = Command::new(workspace_root().join("scripts/redis-py-suite"))
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/redis-py-suite");
    if !fetch.status.success() {
        support::skip_or_fail(
            &format!(
                "redis-py's source distribution ({})",
                String::from_utf8_lossy(&fetch.stderr).trim()
            ),
            "run scripts/provision (it fetches it from PyPI)",
        );
        return;
    }
    let suite = PathBuf::from(String::from_utf8(fetch.stdout).unwrap().trim());
    let tests = redis_py_suite_tests();
    assert!(tests.len() > 100, "the list names the tests");
    let cads = start_cads(1);
    let url = format!("redis://127.0.0.1:{}", cads.port);
    for protocol in ["2", "3"] {
        let out = Command::new("python3")
            .args(["-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider"])
            .arg(format!("--redis-url={url}"))
            .arg(format!("--redis-mod-url={url}"))
            .arg(format!("--protocol={protocol}"))
            .args(&tests)
            .current_dir(&suite)
            // The suite's own `redis` package, not an installed one.
            .env("PYTHONPATH", &suite)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run pytest");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let summary = stdout
            .lines()
            .rev()
            .find(|l| l.contains(" in ") && l.contains("passed"))
            .unwrap_or("");
        eprintln!("redis-py's tests, RESP{protocol}: {summary}");
        let all_passed = summary.starts_with(&format!("{} passed", tests.len()))
            && !["failed", "error", "skipped", "deselected"]
                .iter()
                .any(|word| summary.contains(word));
        assert!(
            out.status.success() && all_passed,
            "redis-py's own tests in RESP{protocol} ({}):\n{stdout}\n{stderr}",
            out.status
        );
    }
}

// ---------------------------------------------------------------------------------------------
// redis-cli --stat and --latency

/// `redis-cli --stat` prints a line a second from INFO: keys, memory, clients, requests and
/// connections, with no field missing (a missing one prints as -9223372036854775808).
#[test]
fn redis_cli_stat_reads_a_cmi() {
    let Some(path) = require_redis_tool("redis-cli") else {
        return;
    };
    let cads = start_cads(1);
    let mut conn = cads.connect();
    for i in 0..42 {
        conn.raw(&["SET", &format!("k{i}"), "v"]).unwrap();
    }
    let mut child = Command::new(&path)
        .args(["-p", &cads.port.to_string(), "--stat", "-i", "0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-cli --stat");
    let stdout = child.stdout.take().unwrap();
    let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .take(4)
        .map(|l| l.expect("redis-cli output"))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines[0].contains("data") && lines[1].contains("keys"),
        "{lines:?}"
    );
    for line in &lines[2..] {
        assert!(
            !line.contains("-9223372036854775808"),
            "a field is missing: {line}"
        );
        let fields: Vec<&str> = line.split_whitespace().collect();
        // keys, memory, clients, blocked, requests, (+delta), connections
        assert_eq!(fields[0], "42", "{line}");
        assert!(
            fields[1].ends_with('K') || fields[1].ends_with('B'),
            "{line}"
        );
        assert_eq!(
            fields[2], "2",
            "this test's connection and redis-cli's: {line}"
        );
        assert_eq!(fields[3], "0", "{line}");
        fields[4].parse::<u64>().expect("requests");
        assert!(fields[5].starts_with("(+"), "{line}");
        fields[6].parse::<u64>().expect("connections");
    }
}

/// `redis-cli --latency` PINGs the CMI; with its output not a terminal it prints one line
/// (min, max, avg, samples) after a second and exits.
#[test]
fn redis_cli_latency_measures_a_cmi() {
    let Some(path) = require_redis_tool("redis-cli") else {
        return;
    };
    let cads = start_cads(1);
    let out = Command::new(&path)
        .args(["-p", &cads.port.to_string(), "--latency"])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli --latency");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "min max avg samples: {stdout:?}");
    for f in &fields[..3] {
        f.parse::<f64>()
            .unwrap_or_else(|e| panic!("{f}: {e} in {stdout:?}"));
    }
    assert!(fields[3].parse::<u64>().unwrap() > 0, "{stdout:?}");
}
