//! The command table: one row per command, used for arity checks, for `COMMAND` replies and for the
//! protocol reference. Arity follows Redis: positive means exactly that many arguments (name
//! included), negative means at least that many.

/// Which commands a command belongs to, for `COMMAND DOCS`-style grouping and for the docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Connection and server management.
    Server,
    /// The Redis-compatible string subset.
    Plain,
    /// cads metadata (configuration ids, inspection).
    Meta,
    /// LeCaF session commands with S/X leases (000 §5.1).
    Session,
    /// Single-key IQ lease commands (000 §4.4.2.2, 004 §2.3).
    Iq,
}

#[derive(Clone, Copy, Debug)]
pub struct CommandSpec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub group: Group,
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: Group,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
    }
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write"];
const A: &[&str] = &["admin"];
const C: &[&str] = &["fast", "no-auth"];
const S: &[&str] = &["write", "fast"];
const NONE: (i32, i32, i32) = (0, 0, 0);
const K1: (i32, i32, i32) = (1, 1, 1);
const KALL: (i32, i32, i32) = (1, -1, 1);
const KPAIRS: (i32, i32, i32) = (1, -1, 2);
const SK: (i32, i32, i32) = (2, 2, 1);

use Group::*;

/// Every command a CMI understands.
pub static COMMANDS: &[CommandSpec] = &[
    spec("ping", -1, C, NONE, Server),
    spec("echo", 2, &["fast"], NONE, Server),
    spec("auth", -2, C, NONE, Server),
    spec("hello", -1, C, NONE, Server),
    spec("select", 2, &["fast"], NONE, Server),
    spec("quit", -1, C, NONE, Server),
    spec("command", -1, &["loading"], NONE, Server),
    spec("config", -2, A, NONE, Server),
    spec("client", -2, &["admin"], NONE, Server),
    spec("info", -1, &["loading"], NONE, Server),
    spec("dbsize", 1, R, NONE, Server),
    spec("flushall", -1, WS, NONE, Server),
    spec("flushdb", -1, WS, NONE, Server),
    spec("bgrewriteaof", 1, A, NONE, Server),
    spec("get", 2, R, K1, Plain),
    spec("set", -3, W, K1, Plain),
    spec("del", -2, &["write"], KALL, Plain),
    spec("exists", -2, R, KALL, Plain),
    spec("mget", -2, R, KALL, Plain),
    spec("mset", -3, W, KPAIRS, Plain),
    spec("incr", 2, W, K1, Plain),
    spec("incrby", 3, W, K1, Plain),
    spec("decr", 2, W, K1, Plain),
    spec("decrby", 3, W, K1, Plain),
    spec("append", 3, W, K1, Plain),
    spec("strlen", 2, R, K1, Plain),
    spec("expire", -3, S, K1, Plain),
    spec("pexpire", -3, S, K1, Plain),
    spec("expireat", -3, S, K1, Plain),
    spec("pexpireat", -3, S, K1, Plain),
    spec("ttl", 2, R, K1, Plain),
    spec("pttl", 2, R, K1, Plain),
    spec("persist", 2, S, K1, Plain),
    spec("inspect", 2, R, K1, Meta),
    spec("configid", -1, S, NONE, Meta),
    spec("fragments", -1, S, NONE, Meta),
    spec("fragmentid", -2, S, NONE, Meta),
    spec("lget", -3, S, SK, Session),
    spec("lmget", -4, S, (3, -1, 1), Session),
    spec("lset", -4, W, SK, Session),
    spec("lmset", -5, W, (3, -1, 2), Session),
    spec("ladd", -4, W, SK, Session),
    spec("ldel", 3, S, SK, Session),
    spec("lmdel", -3, S, (2, -1, 1), Session),
    spec("lappend", 4, W, SK, Session),
    spec("lmappend", -4, W, (2, -1, 2), Session),
    spec("lprepend", 4, W, SK, Session),
    spec("lincr", 4, W, SK, Session),
    spec("ldecr", 4, W, SK, Session),
    spec("lunpin", 3, S, SK, Session),
    spec("lmark", 3, S, SK, Session),
    spec("lunmark", 3, S, SK, Session),
    spec("lvalidate", 2, S, NONE, Session),
    spec("lcommit", 2, S, NONE, Session),
    spec("labort", 2, S, NONE, Session),
    spec("iqget", 3, S, SK, Iq),
    spec("iqset", 4, W, SK, Iq),
    spec("qareg", 3, S, SK, Iq),
    spec("qaread", 3, S, SK, Iq),
    spec("sar", -4, W, SK, Iq),
    spec("dar", -3, S, SK, Iq),
];

/// Looks a command up by name, ignoring ASCII case.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    if name.len() > 16 {
        return None;
    }
    let mut lower = [0u8; 16];
    for (dst, src) in lower.iter_mut().zip(name) {
        *dst = src.to_ascii_lowercase();
    }
    let lower = &lower[..name.len()];
    COMMANDS.iter().find(|spec| spec.name.as_bytes() == lower)
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= self.arity.unsigned_abs() as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_lowercase_and_fit_the_lookup_buffer() {
        for (i, a) in COMMANDS.iter().enumerate() {
            assert!(a.name.len() <= 16);
            assert_eq!(a.name, a.name.to_ascii_lowercase());
            assert!(
                COMMANDS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
            assert_eq!(
                lookup(a.name.to_ascii_uppercase().as_bytes()).unwrap().name,
                a.name
            );
        }
        assert!(lookup(b"nosuchcommand").is_none());
    }
}
