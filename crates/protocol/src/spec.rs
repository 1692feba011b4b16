//! The command table: one row per command, used for arity checks, for `COMMAND` (COUNT, INFO,
//! DOCS, LIST), for the `HELP` of container commands and for the protocol reference. Arity follows
//! Redis: positive means exactly that many arguments (name included), negative means at least
//! that many.

/// Which commands a command belongs to, for `COMMAND DOCS` and for the docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Connection and server management.
    Server,
    /// The Redis-compatible data commands (strings, keys, TIME).
    Plain,
    /// cads metadata (configuration ids, inspection).
    Meta,
    /// LeCaF session commands with S/X leases (000 §5.1).
    Session,
    /// Single-key IQ lease commands (000 §4.4.2.2, 004 §2.3).
    Iq,
}

impl Group {
    /// The group's name in `COMMAND DOCS`.
    pub fn name(self) -> &'static str {
        match self {
            Group::Server => "server",
            Group::Plain => "string",
            Group::Meta => "cads-meta",
            Group::Session => "cads-session",
            Group::Iq => "cads-iq",
        }
    }
}

/// A subcommand of a container command (`CLIENT LIST`, `CONFIG GET`, ...).
#[derive(Clone, Copy, Debug)]
pub struct Subcommand {
    /// Lowercase, as in `client|list`.
    pub name: &'static str,
    /// Counted as Redis does, the container's name and the subcommand's included.
    pub arity: i32,
    /// What follows the container's name, for `HELP`: `SETNAME <name>`.
    pub usage: &'static str,
    pub summary: &'static str,
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
    /// One line saying what the command does, for `COMMAND DOCS`.
    pub summary: &'static str,
    /// For container commands, their subcommands (the last one is `HELP`); empty otherwise.
    pub subcommands: &'static [Subcommand],
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: Group,
    summary: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
        subcommands: &[],
    }
}

/// A container command: its subcommands say what it does.
const fn container(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    summary: &'static str,
    subcommands: &'static [Subcommand],
) -> CommandSpec {
    CommandSpec {
        subcommands,
        ..spec(name, arity, flags, NONE, Group::Server, summary)
    }
}

const fn sub(
    name: &'static str,
    arity: i32,
    usage: &'static str,
    summary: &'static str,
) -> Subcommand {
    Subcommand {
        name,
        arity,
        usage,
        summary,
    }
}

const HELP: Subcommand = sub("help", 2, "HELP", "Prints this help.");

const R: &[&str] = &["readonly", "fast"];
const RS: &[&str] = &["readonly"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WD: &[&str] = &["write", "denyoom"];
const WS: &[&str] = &["write"];
const A: &[&str] = &["admin"];
const C: &[&str] = &["fast", "no-auth"];
const S: &[&str] = &["write", "fast"];
const F: &[&str] = &["fast"];
const NONE: (i32, i32, i32) = (0, 0, 0);
const K1: (i32, i32, i32) = (1, 1, 1);
const KALL: (i32, i32, i32) = (1, -1, 1);
const KPAIRS: (i32, i32, i32) = (1, -1, 2);
const SK: (i32, i32, i32) = (2, 2, 1);

use Group::*;

/// Every command a CMI understands.
pub static COMMANDS: &[CommandSpec] = &[
    spec("ping", -1, C, NONE, Server, "Answers PONG, or echoes its argument."),
    spec("echo", 2, F, NONE, Server, "Answers its argument."),
    spec("auth", -2, C, NONE, Server, "Authenticates the connection."),
    spec(
        "hello",
        -1,
        C,
        NONE,
        Server,
        "Chooses RESP2 or RESP3, optionally authenticates and names the connection.",
    ),
    spec(
        "select",
        2,
        F,
        NONE,
        Server,
        "Selects database 0, the only one a CMI has.",
    ),
    spec("quit", -1, C, NONE, Server, "Closes the connection."),
    // COMMAND alone lists every command.
    container(
        "command",
        -1,
        &["loading"],
        "Describes the commands of this table.",
        &[
            sub("count", 2, "COUNT", "Returns the number of commands."),
            sub(
                "info",
                -2,
                "INFO [<command-name> ...]",
                "Returns the name, arity, flags and key positions of the named commands, or of all.",
            ),
            sub(
                "docs",
                -2,
                "DOCS [<command-name> ...]",
                "Returns the summary and group of the named commands, or of all.",
            ),
            sub(
                "list",
                -2,
                "LIST [FILTERBY PATTERN <pattern>]",
                "Returns the names of the commands, optionally those matching a glob pattern.",
            ),
            HELP,
        ],
    ),
    container(
        "config",
        -2,
        A,
        "Reads and changes settings of the CMI.",
        &[
            sub(
                "get",
                -3,
                "GET <pattern> [<pattern> ...]",
                "Returns the settings whose names match the glob patterns.",
            ),
            sub(
                "set",
                -4,
                "SET <name> <value> [<name> <value> ...]",
                "Changes maxmemory, max-pinned-memory, lease-ms, max-session-ms or max-session-memory.",
            ),
            sub(
                "resetstat",
                2,
                "RESETSTAT",
                "Sets the counters INFO reports back to zero.",
            ),
            HELP,
        ],
    ),
    container(
        "client",
        -2,
        &["admin"],
        "Inspects and configures client connections.",
        &[
            sub("id", 2, "ID", "Returns the id of this connection."),
            sub("getname", 2, "GETNAME", "Returns the name of this connection."),
            sub(
                "info",
                2,
                "INFO",
                "Describes this connection, as a line of CLIENT LIST does.",
            ),
            sub("setname", 3, "SETNAME <name>", "Names this connection."),
            sub(
                "setinfo",
                4,
                "SETINFO (LIB-NAME|LIB-VER) <value>",
                "Records the client library's name or version, shown by CLIENT LIST.",
            ),
            sub(
                "list",
                -2,
                "LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
                "Describes the connections, all of them, those of a type, or those with the given ids.",
            ),
            sub(
                "no-evict",
                3,
                "NO-EVICT (ON|OFF)",
                "Accepted for compatibility: a CMI never evicts clients.",
            ),
            sub(
                "no-touch",
                3,
                "NO-TOUCH (ON|OFF)",
                "With ON, reads of this connection do not count as uses for LRU eviction.",
            ),
            HELP,
        ],
    ),
    spec(
        "info",
        -1,
        &["loading"],
        NONE,
        Server,
        "Reports the CMI's state and counters, by section.",
    ),
    spec("dbsize", 1, R, NONE, Server, "Returns the number of keys."),
    spec(
        "flushall",
        -1,
        WS,
        NONE,
        Server,
        "Deletes every key (with UNPINNED, every unpinned key; with RESTORED, the same if the CMI \
         still holds cached values restored from its log) and aborts every session.",
    ),
    spec(
        "flushdb",
        -1,
        WS,
        NONE,
        Server,
        "Deletes every key and aborts every session.",
    ),
    spec(
        "bgrewriteaof",
        1,
        A,
        NONE,
        Server,
        "Starts rewriting the append-only log.",
    ),
    spec("get", 2, R, K1, Plain, "Returns a key's value."),
    spec(
        "set",
        -3,
        W,
        K1,
        Plain,
        "Sets a key's value, with conditions, an expiry, or returning the old value.",
    ),
    spec(
        "setex",
        4,
        WD,
        K1,
        Plain,
        "Sets a key's value and its time to live in seconds.",
    ),
    spec(
        "psetex",
        4,
        WD,
        K1,
        Plain,
        "Sets a key's value and its time to live in milliseconds.",
    ),
    spec(
        "setnx",
        3,
        W,
        K1,
        Plain,
        "Sets a key's value only if the key does not exist.",
    ),
    spec(
        "getset",
        3,
        W,
        K1,
        Plain,
        "Sets a key's value and returns the old one.",
    ),
    spec(
        "getdel",
        2,
        S,
        K1,
        Plain,
        "Returns a key's value and deletes the key.",
    ),
    spec(
        "getex",
        -2,
        S,
        K1,
        Plain,
        "Returns a key's value and optionally changes or removes its time to live.",
    ),
    spec(
        "getrange",
        4,
        RS,
        K1,
        Plain,
        "Returns the bytes of a value between two offsets.",
    ),
    spec(
        "setrange",
        4,
        WD,
        K1,
        Plain,
        "Overwrites part of a value from an offset, padding with zero bytes.",
    ),
    spec("del", -2, WS, KALL, Plain, "Deletes keys."),
    spec("exists", -2, R, KALL, Plain, "Counts the given keys that exist."),
    spec("mget", -2, R, KALL, Plain, "Returns the values of keys."),
    spec("mset", -3, W, KPAIRS, Plain, "Sets the values of keys."),
    spec(
        "msetnx",
        -3,
        WD,
        KPAIRS,
        Plain,
        "Sets the values of keys only if none of them exists.",
    ),
    spec("incr", 2, W, K1, Plain, "Adds one to an integer value."),
    spec("incrby", 3, W, K1, Plain, "Adds an integer to an integer value."),
    spec(
        "incrbyfloat",
        3,
        W,
        K1,
        Plain,
        "Adds a number to a numeric value, in extended precision.",
    ),
    spec("decr", 2, W, K1, Plain, "Subtracts one from an integer value."),
    spec(
        "decrby",
        3,
        W,
        K1,
        Plain,
        "Subtracts an integer from an integer value.",
    ),
    spec("append", 3, W, K1, Plain, "Appends bytes to a value."),
    spec("strlen", 2, R, K1, Plain, "Returns the length of a value."),
    spec(
        "expire",
        -3,
        S,
        K1,
        Plain,
        "Sets a key's time to live in seconds.",
    ),
    spec(
        "pexpire",
        -3,
        S,
        K1,
        Plain,
        "Sets a key's time to live in milliseconds.",
    ),
    spec(
        "expireat",
        -3,
        S,
        K1,
        Plain,
        "Sets a key's expiry as a Unix time in seconds.",
    ),
    spec(
        "pexpireat",
        -3,
        S,
        K1,
        Plain,
        "Sets a key's expiry as a Unix time in milliseconds.",
    ),
    spec(
        "ttl",
        2,
        R,
        K1,
        Plain,
        "Returns a key's time to live in seconds.",
    ),
    spec(
        "pttl",
        2,
        R,
        K1,
        Plain,
        "Returns a key's time to live in milliseconds.",
    ),
    spec("persist", 2, S, K1, Plain, "Removes a key's time to live."),
    spec(
        "time",
        1,
        F,
        NONE,
        Plain,
        "Returns the CMI's clock: Unix seconds and microseconds, to the millisecond.",
    ),
    spec(
        "inspect",
        2,
        R,
        K1,
        Meta,
        "Returns a key's metadata: size, pin, expiry, configuration id, marker, lease.",
    ),
    spec(
        "configid",
        -1,
        S,
        NONE,
        Meta,
        "Reads or publishes the CMI's latest configuration id.",
    ),
    spec(
        "fragments",
        -1,
        S,
        NONE,
        Meta,
        "Reads or sets how many fragments the key space is split into.",
    ),
    spec(
        "fragmentid",
        -2,
        S,
        NONE,
        Meta,
        "Reads or sets a fragment's configuration id.",
    ),
    spec(
        "instancelease",
        -1,
        S,
        NONE,
        Meta,
        "Reads the CMI's clock, coordinator lease and incarnation, or sets when the lease ends.",
    ),
    spec(
        "pinset",
        3,
        W,
        K1,
        Meta,
        "Stores a pinned value outside of sessions (the coordinator's entries).",
    ),
    spec(
        "lget",
        -3,
        S,
        SK,
        Session,
        "Reads a key in a session, under a shared or exclusive lease.",
    ),
    spec(
        "lmget",
        -4,
        S,
        (3, -1, 1),
        Session,
        "Reads keys in a session, under shared or exclusive leases.",
    ),
    spec(
        "lmgetmark",
        -4,
        S,
        (3, -1, 1),
        Session,
        "Reads keys in a session like LMGET; each key's reply is [value, marker].",
    ),
    spec(
        "lset",
        -4,
        W,
        SK,
        Session,
        "Stages a key's value in a session.",
    ),
    spec(
        "lmset",
        -5,
        W,
        (3, -1, 2),
        Session,
        "Stages the values of keys in a session.",
    ),
    spec(
        "ladd",
        -4,
        W,
        SK,
        Session,
        "Stages a key's value in a session if the key has none.",
    ),
    spec(
        "ldel",
        3,
        S,
        SK,
        Session,
        "Stages a key's deletion in a session.",
    ),
    spec(
        "lmdel",
        -3,
        S,
        (2, -1, 1),
        Session,
        "Stages the deletion of keys in a session.",
    ),
    spec(
        "lappend",
        4,
        W,
        SK,
        Session,
        "Stages bytes appended to a value in a session.",
    ),
    spec(
        "lmappend",
        -4,
        W,
        (2, -1, 2),
        Session,
        "Stages bytes appended to values in a session.",
    ),
    spec(
        "lprepend",
        4,
        W,
        SK,
        Session,
        "Stages bytes prepended to a value in a session.",
    ),
    spec(
        "lupdate",
        4,
        W,
        SK,
        Session,
        "Stages change operators applied to a cached JSON document in a session.",
    ),
    spec(
        "lincr",
        4,
        W,
        SK,
        Session,
        "Stages an increment of an integer value in a session.",
    ),
    spec(
        "ldecr",
        4,
        W,
        SK,
        Session,
        "Stages a decrement of an integer value in a session.",
    ),
    spec(
        "lunpin",
        3,
        S,
        SK,
        Session,
        "Stages unpinning a value in a session.",
    ),
    spec(
        "lmark",
        3,
        S,
        SK,
        Session,
        "Stages setting a key's marker in a session.",
    ),
    spec(
        "lunmark",
        3,
        S,
        SK,
        Session,
        "Stages clearing a key's marker in a session.",
    ),
    spec(
        "lvalidate",
        2,
        S,
        NONE,
        Session,
        "Checks a session's leases and makes its shared ones golden.",
    ),
    spec(
        "lcommit",
        2,
        S,
        NONE,
        Session,
        "Applies a session's staged changes and releases its leases.",
    ),
    spec(
        "lpriority",
        3,
        S,
        NONE,
        Session,
        "Gives a session that lost a lease conflict before its ticket: older sessions wait.",
    ),
    spec(
        "lconfig",
        3,
        S,
        NONE,
        Session,
        "Names the configuration a session routes by; refused once the CMI knows a newer one.",
    ),
    spec(
        "labort",
        2,
        S,
        NONE,
        Session,
        "Drops a session's staged changes and releases its leases.",
    ),
    spec(
        "iqget",
        3,
        S,
        SK,
        Iq,
        "Reads a key; on a miss, grants the I lease to fill it.",
    ),
    spec(
        "iqset",
        4,
        W,
        SK,
        Iq,
        "Fills a key under its I lease and releases the lease.",
    ),
    spec(
        "iset",
        3,
        W,
        SK,
        Iq,
        "Deletes a key and grants the I lease to fill it (Gemini's repair of a dirty key).",
    ),
    spec(
        "idelete",
        3,
        S,
        SK,
        Iq,
        "Releases the I lease on a key without filling it.",
    ),
    spec(
        "qareg",
        3,
        S,
        SK,
        Iq,
        "Takes the Q lease on a key for a write.",
    ),
    spec(
        "qaread",
        3,
        S,
        SK,
        Iq,
        "Takes the Q lease on a key and reads it, for read-modify-write.",
    ),
    spec(
        "sar",
        -4,
        W,
        SK,
        Iq,
        "Stores a value under the Q lease and releases it.",
    ),
    spec(
        "dar",
        -3,
        S,
        SK,
        Iq,
        "Deletes a key under the Q lease and releases it.",
    ),
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

fn arity_ok(arity: i32, argc: usize) -> bool {
    if arity >= 0 {
        argc == arity as usize
    } else {
        argc >= arity.unsigned_abs() as usize
    }
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        arity_ok(self.arity, argc)
    }

    /// A subcommand of this container command by name, ignoring ASCII case.
    pub fn subcommand(&self, name: &[u8]) -> Option<&'static Subcommand> {
        self.subcommands
            .iter()
            .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The `HELP` text of a container command, one line per element, as Redis lays it out.
    pub fn help(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            self.name.to_ascii_uppercase()
        )];
        for s in self.subcommands {
            lines.push(s.usage.to_string());
            lines.push(format!("    {}", s.summary));
        }
        lines
    }
}

impl Subcommand {
    pub fn arity_ok(&self, argc: usize) -> bool {
        arity_ok(self.arity, argc)
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
            assert!(!a.summary.is_empty(), "{} has a summary", a.name);
        }
        assert!(lookup(b"nosuchcommand").is_none());
    }

    #[test]
    fn container_commands_end_with_help_and_their_usage_starts_with_the_name() {
        let containers: Vec<_> = COMMANDS
            .iter()
            .filter(|c| !c.subcommands.is_empty())
            .collect();
        assert_eq!(containers.len(), 3, "CLIENT, COMMAND, CONFIG");
        for c in containers {
            assert_eq!(c.subcommands.last().unwrap().name, "help", "{}", c.name);
            for s in c.subcommands {
                assert_eq!(s.name, s.name.to_ascii_lowercase());
                assert!(
                    s.usage
                        .to_ascii_lowercase()
                        .starts_with(&format!("{} ", s.name))
                        || s.usage.eq_ignore_ascii_case(s.name),
                    "{} {}",
                    c.name,
                    s.usage
                );
                assert!(s.arity.unsigned_abs() >= 2, "counts the container's name");
            }
            let help = c.help();
            assert_eq!(help.len(), 1 + 2 * c.subcommands.len());
            assert_eq!(help.last().unwrap(), "    Prints this help.");
        }
    }
}
