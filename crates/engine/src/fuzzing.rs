//! Checks of the engine driven by arbitrary bytes, shared by the cargo-fuzz targets in `fuzz/` and
//! by the corpus replay test (`tests/fuzz_corpus.rs`), so that CI replays every committed fuzz
//! input on stable Rust without cargo-fuzz. Compiled only with the `fuzzing` feature, which the
//! fuzz crate and this crate's own tests turn on: a server build contains none of it. (The request
//! parser's checks live beside the parser, in `cads_protocol::fuzzing`.)
//!
//! Every function panics when it finds a bug and returns normally otherwise:
//!
//! - [`check_engine_ops`]: the bytes are decoded (by a small byte-driven decoder, see [`Op`]) into
//!   a sequence of commands over a handful of keys and session ids, clock advances, `tick`s,
//!   `maxmemory` changes, log rewrites and restarts, run on one engine with small memory limits.
//!   After every step: `check_invariants`, memory within `maxmemory`, the command round trip. At
//!   restarts and at the end: the log replays into a fresh engine holding the same state (see
//!   `compare_replay` for what "the same" allows).
//! - [`check_log_replay`]: the bytes are an append-only log file. Replay must not panic, must
//!   report a consistent result, and a replayed state must survive a full rewrite unchanged.
//!
//! [`check_input`] picks the check by the corpus directory (fuzz target) name.

use std::collections::{HashMap, HashSet};

use cads_protocol::fuzzing::{check_command_round_trip, check_reply_round_trip};
use cads_protocol::{Command, Reply};

use crate::store::Entry;
use crate::{Engine, EngineConfig, Mode, Now, MARKER_OVERHEAD};

/// The fuzz targets of the engine, by name; each has a corpus directory `fuzz/corpus/<name>/`.
pub const TARGETS: &[&str] = &["engine_commands", "log_replay"];

/// Runs the check of `target` on `data`. Returns false for an unknown target name.
pub fn check_input(target: &str, data: &[u8]) -> bool {
    match target {
        "engine_commands" => check_engine_ops(data),
        "log_replay" => check_log_replay(data),
        _ => return false,
    }
    true
}

/// The keys commands use: a few short ones, the empty key and a longer one.
const KEYS: [&[u8]; 6] = [
    b"k0",
    b"k1",
    b"k2",
    b"k3",
    b"",
    b"a-longer-key-for-memory-accounting",
];

/// Session ids, including 0 and the largest one.
const SIDS: [u64; 5] = [1, 2, 3, 0, u64::MAX];

/// LUPDATE's changes (other values are mostly not changes at all, which LUPDATE refuses).
const CHANGES: [&str; 3] = [
    r#"{"$inc":{"n":1}}"#,
    r#"{"$set":{"a":"b"}}"#,
    r#"[{"$set":{"n":"s"}},{"$inc":{"n":1}}]"#,
];

/// Integer arguments: ordinary, limits, and ones that are not integers at all.
const NUMBERS: [&str; 12] = [
    "0",
    "1",
    "-1",
    "3",
    "100",
    "1000",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "abc",
    "01",
    "",
];

/// Clock advances, around the lease time (500) and the tombstone time (2000) of most runs.
const ADVANCES: [u64; 10] = [1, 50, 250, 499, 500, 501, 1_000, 2_001, 60_000, 3_600_000];

/// Words for the raw-argument operation: command names, options and keys.
const WORDS: [&str; 30] = [
    "SET", "GET", "NX", "XX", "EX", "PX", "EXAT", "PXAT", "KEEPTTL", "PIN", "NOPIN", "RMW", "RO",
    "MARK", "UNMARK", "GT", "LT", "k0", "k1", "", "1", "2", "0", "-1", "LSET", "LGET", "IQGET",
    "QAREG", "SAR", "APPEND",
];

/// Reads operation codes and operands from the input; past its end every byte reads as 0.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.byte() as usize % items.len()]
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn key(&mut self) -> Vec<u8> {
        self.pick(&KEYS).to_vec()
    }

    fn sid(&mut self) -> Vec<u8> {
        self.pick(&SIDS).to_string().into_bytes()
    }

    fn number(&mut self) -> Vec<u8> {
        self.pick(&NUMBERS).as_bytes().to_vec()
    }

    /// A value: one of a few fixed ones (numbers and sizes that matter for memory), or up to 63
    /// bytes taken from the input.
    fn value(&mut self) -> Vec<u8> {
        let b = self.byte();
        match b {
            0..=63 => {
                let start = self.pos.min(self.data.len());
                let len = (b as usize).min(self.data.len() - start);
                self.pos = start + len;
                self.data[start..start + len].to_vec()
            }
            64..=127 => self.pick(&NUMBERS).as_bytes().to_vec(),
            128..=191 => vec![b'v'; (b as usize - 128) * 4],
            192..=223 => vec![b'w'; 300],
            _ => vec![b'x'; 1500],
        }
    }

    fn word(&mut self) -> Vec<u8> {
        if self.byte() < 200 {
            self.pick(&WORDS).as_bytes().to_vec()
        } else {
            self.value()
        }
    }
}

/// What the decoder produces: a command's arguments, or an action on the engine itself.
#[derive(Debug)]
pub enum Op {
    Command(Vec<Vec<u8>>),
    Advance(u64),
    Tick,
    SetMaxMemory(usize),
    /// BGREWRITEAOF: start an incremental rewrite (if none runs).
    RewriteBegin,
    /// One flush of the server's loop during a rewrite: copy this many slots.
    RewriteStep(u32),
    /// Switch to the rewritten log, if its walk is over.
    RewriteSwitch,
    /// Give up a rewrite in progress.
    RewriteAbandon,
    /// The CMI restarts: its log replays into a fresh engine, which goes on serving.
    Restart,
}

fn args(words: &[&[u8]]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.to_vec()).collect()
}

/// Decodes one operation. `now` lets absolute expiry times fall near the current time.
fn decode_op(b: &mut Bytes<'_>, now: u64) -> Op {
    let code = b.byte() % 56;
    let cmd = |words: Vec<Vec<u8>>| Op::Command(words);
    match code {
        0..=2 => cmd(vec![b"GET".to_vec(), b.key()]),
        3..=5 => {
            let mut a = vec![b"SET".to_vec(), b.key(), b.value()];
            let opts = b.byte();
            match opts & 3 {
                1 => a.push(b"NX".to_vec()),
                2 => a.push(b"XX".to_vec()),
                _ => {}
            }
            if opts & 4 != 0 {
                a.push(b"GET".to_vec());
            }
            match (opts >> 3) & 7 {
                1 => a.extend([b"PX".to_vec(), b.pick(&ADVANCES).to_string().into_bytes()]),
                2 => a.extend([b"EX".to_vec(), b.number()]),
                3 => a.extend([
                    b"PXAT".to_vec(),
                    (now + b.pick(&ADVANCES)).to_string().into_bytes(),
                ]),
                4 => a.push(b"KEEPTTL".to_vec()),
                5 => a.extend([b"PXAT".to_vec(), b.number()]),
                _ => {}
            }
            cmd(a)
        }
        6 => {
            let mut a = vec![b"DEL".to_vec(), b.key()];
            if b.flag() {
                a.push(b.key());
            }
            cmd(a)
        }
        7 => cmd(vec![b"EXISTS".to_vec(), b.key(), b.key()]),
        8 => cmd(vec![b"MGET".to_vec(), b.key(), b.key(), b.key()]),
        9 => {
            let mut a = vec![b"MSET".to_vec(), b.key(), b.value()];
            if b.flag() {
                a.extend([b.key(), b.value()]);
            }
            cmd(a)
        }
        10 => {
            let name: &[u8] = match b.byte() % 4 {
                0 => b"INCR",
                1 => b"DECR",
                2 => b"INCRBY",
                _ => b"DECRBY",
            };
            let mut a = vec![name.to_vec(), b.key()];
            if name.ends_with(b"BY") {
                a.push(b.number());
            }
            cmd(a)
        }
        11 => cmd(vec![b"APPEND".to_vec(), b.key(), b.value()]),
        12 => cmd(vec![b"STRLEN".to_vec(), b.key()]),
        13 => {
            let which = b.byte();
            let name: &[u8] = match which % 4 {
                0 => b"EXPIRE",
                1 => b"PEXPIRE",
                2 => b"EXPIREAT",
                _ => b"PEXPIREAT",
            };
            let amount = match (which % 4, (which >> 2) & 1) {
                (1, 0) => b.pick(&ADVANCES).to_string(),
                (3, 0) => (now + b.pick(&ADVANCES)).to_string(),
                (2, 0) => ((now + b.pick(&ADVANCES)) / 1000).to_string(),
                _ => String::from_utf8_lossy(&b.number()).into_owned(),
            };
            let mut a = vec![name.to_vec(), b.key(), amount.into_bytes()];
            let cond = b.byte();
            for (bit, word) in [(1, "NX"), (2, "XX"), (4, "GT"), (8, "LT")] {
                if cond & bit != 0 && cond & 0xf0 == 0 {
                    a.push(word.as_bytes().to_vec());
                }
            }
            cmd(a)
        }
        14 => {
            let name: &[u8] = if b.flag() { b"TTL" } else { b"PTTL" };
            cmd(vec![name.to_vec(), b.key()])
        }
        15 => cmd(vec![b"PERSIST".to_vec(), b.key()]),
        16 => match b.flag() {
            true => cmd(vec![b"INSPECT".to_vec(), b.key()]),
            false => cmd(vec![b"PINSET".to_vec(), b.key(), b.value()]),
        },
        17 => {
            let mut a = vec![b"CONFIGID".to_vec()];
            if b.flag() {
                a.push((b.byte() % 8).to_string().into_bytes());
            }
            cmd(a)
        }
        18 => {
            let mut a = vec![b"FRAGMENTS".to_vec()];
            if b.flag() {
                a.push((b.byte() % 5).to_string().into_bytes());
            }
            cmd(a)
        }
        19 => {
            let mut a = vec![
                b"FRAGMENTID".to_vec(),
                (b.byte() % 5).to_string().into_bytes(),
            ];
            if b.flag() {
                a.push((b.byte() % 8).to_string().into_bytes());
            }
            cmd(a)
        }
        20 => match b.byte() % 4 {
            0 => cmd(args(&[b"INSTANCELEASE"])),
            1 => cmd(args(&[b"INSTANCELEASE", b"0"])),
            2 => cmd(args(&[b"INSTANCELEASE", b"9223372036854775807"])),
            _ => cmd(args(&[b"DBSIZE"])),
        },
        21 => match b.byte() % 3 {
            0 => cmd(args(&[b"FLUSHALL"])),
            1 => cmd(args(&[b"FLUSHALL", b"UNPINNED"])),
            _ => cmd(args(&[b"FLUSHDB"])),
        },
        22..=23 => {
            let mut a = vec![b"LGET".to_vec(), b.sid(), b.key()];
            match b.byte() % 3 {
                0 => a.push(b"RMW".to_vec()),
                1 => a.push(b"RO".to_vec()),
                _ => {}
            }
            cmd(a)
        }
        24 => {
            let rmw: &[u8] = if b.flag() { b"RMW" } else { b"RO" };
            cmd(vec![
                b"LMGET".to_vec(),
                b.sid(),
                rmw.to_vec(),
                b.key(),
                b.key(),
            ])
        }
        25..=26 => {
            let name: &[u8] = if b.flag() { b"LADD" } else { b"LSET" };
            let mut a = vec![name.to_vec(), b.sid(), b.key(), b.value()];
            if b.flag() {
                a.push(b"PIN".to_vec());
            }
            cmd(a)
        }
        27 => {
            let pin: &[u8] = if b.flag() { b"PIN" } else { b"NOPIN" };
            let mut a = vec![b"LMSET".to_vec(), b.sid(), pin.to_vec(), b.key(), b.value()];
            if b.flag() {
                a.extend([b.key(), b.value()]);
            }
            cmd(a)
        }
        28 => cmd(vec![b"LDEL".to_vec(), b.sid(), b.key()]),
        29 => cmd(vec![b"LMDEL".to_vec(), b.sid(), b.key(), b.key()]),
        30 => {
            if b.flag() {
                let changes = if b.flag() {
                    b.pick(&CHANGES).as_bytes().to_vec()
                } else {
                    b.value()
                };
                return cmd(vec![b"LUPDATE".to_vec(), b.sid(), b.key(), changes]);
            }
            let name: &[u8] = if b.flag() { b"LPREPEND" } else { b"LAPPEND" };
            cmd(vec![name.to_vec(), b.sid(), b.key(), b.value()])
        }
        31 => {
            let mut a = vec![b"LMAPPEND".to_vec(), b.sid(), b.key(), b.value()];
            if b.flag() {
                a.extend([b.key(), b.value()]);
            }
            cmd(a)
        }
        32 => {
            let name: &[u8] = if b.flag() { b"LDECR" } else { b"LINCR" };
            cmd(vec![name.to_vec(), b.sid(), b.key(), b.number()])
        }
        33 => cmd(vec![b"LUNPIN".to_vec(), b.sid(), b.key()]),
        34 => {
            let name: &[u8] = if b.flag() { b"LUNMARK" } else { b"LMARK" };
            cmd(vec![name.to_vec(), b.sid(), b.key()])
        }
        35 => cmd(vec![b"LVALIDATE".to_vec(), b.sid()]),
        36..=37 => cmd(vec![b"LCOMMIT".to_vec(), b.sid()]),
        38 => cmd(vec![b"LABORT".to_vec(), b.sid()]),
        39 => cmd(vec![b"IQGET".to_vec(), b.sid(), b.key()]),
        40 => cmd(vec![b"IQSET".to_vec(), b.sid(), b.key(), b.value()]),
        41 => cmd(vec![b"QAREG".to_vec(), b.sid(), b.key()]),
        42 => cmd(vec![b"QAREAD".to_vec(), b.sid(), b.key()]),
        43 => {
            let mut a = vec![b"SAR".to_vec(), b.sid(), b.key(), b.value()];
            match b.byte() % 3 {
                0 => a.push(b"MARK".to_vec()),
                1 => a.push(b"UNMARK".to_vec()),
                _ => {}
            }
            cmd(a)
        }
        44 => {
            let mut a = vec![b"DAR".to_vec(), b.sid(), b.key()];
            match b.byte() % 3 {
                0 => a.push(b"MARK".to_vec()),
                1 => a.push(b"UNMARK".to_vec()),
                _ => {}
            }
            cmd(a)
        }
        45..=46 => Op::Advance(b.pick(&ADVANCES)),
        47 => Op::Tick,
        48 => Op::SetMaxMemory(b.pick(&[0, 150, 400, 1_000, 3_000])),
        49 => Op::RewriteBegin,
        50 => Op::RewriteStep(u32::from(b.byte() % 4)),
        51 => Op::RewriteSwitch,
        52 => Op::RewriteAbandon,
        53 => Op::Restart,
        _ => {
            // Raw arguments: any command name, options and values in any order.
            let n = 1 + b.byte() as usize % 6;
            let mut a = Vec::with_capacity(n);
            let name_byte = b.byte() as usize;
            a.push(
                command_names()[name_byte % command_names().len()]
                    .as_bytes()
                    .to_vec(),
            );
            for _ in 1..n {
                a.push(b.word());
            }
            cmd(a)
        }
    }
}

fn command_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        cads_protocol::spec::COMMANDS
            .iter()
            .map(|s| s.name)
            .collect()
    })
}

/// Decodes the whole input into a configuration and operations (for reading a crash input).
pub fn decode_engine_ops(data: &[u8]) -> (EngineConfig, Vec<Op>) {
    let mut b = Bytes { data, pos: 0 };
    let config = decode_config(&mut b);
    let mut ops = Vec::new();
    let mut now = START;
    while !b.done() && ops.len() < MAX_OPS {
        let op = decode_op(&mut b, now);
        if let Op::Advance(ms) = op {
            now += ms;
        }
        ops.push(op);
    }
    (config, ops)
}

const START: u64 = 1_700_000_000_000;
const MAX_OPS: usize = 4096;

fn decode_config(b: &mut Bytes<'_>) -> EngineConfig {
    let c = b.byte();
    let mode = if c & 1 == 0 {
        Mode::WriteThrough
    } else {
        Mode::WriteAround
    };
    let maxmemory = [0, 400, 1_000, 3_000][((c >> 1) & 3) as usize];
    let lease = (c >> 5) & 3;
    EngineConfig {
        mode,
        maxmemory,
        max_pinned_memory: [0, 250, 700, 1_500][((c >> 3) & 3) as usize],
        lease_ms: [500, 50, 2_000, 500][lease as usize],
        // The last lease setting also cuts sessions short, whatever they validate.
        max_session_ms: if lease == 3 { 800 } else { 5 * 2_000 },
        // Session state gets the same small budget as entries: a handful of sessions.
        max_session_memory: maxmemory,
        tombstone_ms: 2_000,
        max_value_bytes: if c & 0x80 != 0 { 2_000 } else { 64 << 20 },
        ..EngineConfig::default()
    }
}

/// Where the log of the engine under test goes, as the server's `Aof` writes it.
#[derive(Default)]
struct LogFiles {
    /// The current log file.
    file: Vec<u8>,
    /// The rewritten log while a rewrite runs.
    rewrite: Option<RewriteFile>,
}

struct RewriteFile {
    bytes: Vec<u8>,
    /// Whether the walk over the slots is over.
    walked: bool,
}

struct Harness {
    engine: Engine,
    now: u64,
    log: LogFiles,
    /// Print every operation and the memory after it (`CADS_FUZZ_TRACE=1`), to read a crash.
    trace: bool,
}

/// Runs the engine on operations decoded from `data`; panics on a bug.
pub fn check_engine_ops(data: &[u8]) {
    let mut b = Bytes { data, pos: 0 };
    let config = decode_config(&mut b);
    let mut engine = Engine::new(config);
    engine.enable_log();
    let mut h = Harness {
        engine,
        now: START,
        log: LogFiles::default(),
        trace: std::env::var_os("CADS_FUZZ_TRACE").is_some_and(|v| v == "1"),
    };
    let mut ops = 0;
    while !b.done() && ops < MAX_OPS {
        let op = decode_op(&mut b, h.now);
        h.step(op);
        ops += 1;
    }
    h.finish();
}

impl Harness {
    fn step(&mut self, op: Op) {
        // Memory other than markers (which are never refused, so they may exceed the limit).
        let used_before = self.engine.memory().used - marker_bytes(&self.engine);
        if self.trace {
            eprintln!("{op:?}");
        }
        match op {
            Op::Command(words) => self.command(&words),
            Op::Advance(ms) => {
                self.now += ms;
                self.engine.tick(Now::at(self.now));
            }
            Op::Tick => self.engine.tick(Now::at(self.now)),
            Op::SetMaxMemory(bytes) => self.engine.set_maxmemory(bytes),
            Op::RewriteBegin => {
                if self.log.rewrite.is_none() {
                    self.flush();
                    self.engine.begin_rewrite();
                    self.log.rewrite = Some(RewriteFile {
                        bytes: Vec::new(),
                        walked: false,
                    });
                }
            }
            Op::RewriteStep(slots) => self.flush_with_step(slots),
            Op::RewriteSwitch => {
                self.flush_with_step(0);
                if self.log.rewrite.as_ref().is_some_and(|rw| rw.walked) {
                    let rw = self.log.rewrite.take().expect("checked");
                    self.engine.end_rewrite();
                    self.log.file = rw.bytes;
                }
            }
            Op::RewriteAbandon => {
                if self.log.rewrite.take().is_some() {
                    self.flush();
                    self.engine.end_rewrite();
                }
            }
            Op::Restart => {
                self.flush();
                self.log.rewrite = None;
                let mut back = Engine::new(self.engine.config().clone());
                let replayed = back.replay(&self.log.file).expect("the log replays");
                assert!(!replayed.truncated, "the log is whole");
                // As the server does: log from here on, then serve (the comparison reads keys,
                // which may reclaim expired entries and log that).
                back.enable_log();
                compare_replay("a restart", &mut self.engine, &mut back, self.now);
                self.engine = back;
            }
        }
        self.after_step(used_before);
    }

    fn command(&mut self, words: &[Vec<u8>]) {
        let slices: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        if let Ok(cmd) = Command::parse(&slices) {
            check_command_round_trip(&cmd);
            let reply = self.engine.execute(&cmd, Now::at(self.now));
            check_reply_round_trip(&reply);
        }
    }

    /// What the server's `Aof::flush` does: the engine's records go to the current log file.
    fn flush(&mut self) {
        let mut records = Vec::new();
        self.engine.drain_log(&mut records);
        self.log.file.extend_from_slice(&records);
    }

    /// A flush during a rewrite also advances it and writes the new log's bytes.
    fn flush_with_step(&mut self, slots: u32) {
        self.flush();
        let Some(rw) = &mut self.log.rewrite else {
            return;
        };
        if !rw.walked {
            rw.walked = self.engine.rewrite_step(slots);
        }
        self.engine.drain_rewrite(&mut rw.bytes);
    }

    fn after_step(&mut self, used_before: usize) {
        self.flush_with_step(0);
        let e = &self.engine;
        if self.trace {
            eprintln!("    {:?} leases {:?}", e.memory(), e.leases);
        }
        e.check_invariants();
        let cap = e.config().max_session_memory;
        assert!(
            cap == 0 || e.session_memory() <= cap,
            "session state {} beyond its cap {cap}",
            e.session_memory()
        );
        let m = e.memory();
        if m.maxmemory != 0 {
            // Within the limit, or (after the limit was lowered below what is held) not growing.
            let markers = marker_bytes(e);
            assert!(
                m.used - markers <= m.maxmemory.max(used_before),
                "used {} ({markers} of them markers) beyond maxmemory {}, was {used_before}",
                m.used,
                m.maxmemory
            );
        }
    }

    fn finish(&mut self) {
        self.flush_with_step(0);
        let mut back = Engine::new(self.engine.config().clone());
        let replayed = back.replay(&self.log.file).expect("the log replays");
        assert!(!replayed.truncated, "the log is whole");
        assert_eq!(replayed.valid_bytes, self.log.file.len());
        compare_replay("the log", &mut self.engine, &mut back, self.now);
        // A finished rewrite's log replays to the same state too.
        if let Some(RewriteFile {
            bytes: mut new,
            walked: true,
            ..
        }) = self.log.rewrite.take()
        {
            self.engine.drain_rewrite(&mut new);
            let mut from_new = Engine::new(self.engine.config().clone());
            from_new.replay(&new).expect("the rewritten log replays");
            compare_replay(
                "the rewritten log",
                &mut self.engine,
                &mut from_new,
                self.now,
            );
        }
        // Ending every session leaves no lease, session or pending byte behind.
        for sid in SIDS {
            let cmd = Command::LAbort(sid);
            self.engine.execute(&cmd, Now::at(self.now));
        }
        // Raw commands may have used other session ids: their leases run out, then their
        // tombstones go.
        for _ in 0..2 {
            self.now += 10_000_000;
            self.engine.tick(Now::at(self.now));
            self.engine.check_invariants();
        }
        assert_eq!(
            self.engine.lease_count(),
            0,
            "no lease outlives its session"
        );
        assert_eq!(
            self.engine.session_counts(),
            (0, 0),
            "sessions are forgotten"
        );
    }
}

fn marker_bytes(e: &Engine) -> usize {
    e.markers.iter().map(|k| k.len() + MARKER_OVERHEAD).sum()
}

/// Compares a live engine with one restored from its log. The restored one must hold:
///
/// - the same configuration ids, fragment ids and markers;
/// - no entry the live one lacks, and each entry equal to the live one's (value, expiry,
///   configuration id, pin): a restart must never serve a value the live CMI would not;
/// - every live entry, except unpinned ones a writer holds an exclusive lease on: the log forgets
///   such a value while the lease lasts (the writer may change the data store before it commits,
///   see `Store::log_exclusive_lease`), and learns it again when the lease ends.
///
/// Then DBSIZE agrees, and GET and INSPECT agree on every key both hold (INSPECT where no lease
/// is held: a restart ends leases).
fn compare_replay(what: &str, live: &mut Engine, back: &mut Engine, now: u64) {
    back.check_invariants();
    assert_eq!(
        back.store.config.latest, live.store.config.latest,
        "configuration id restored by {what}"
    );
    assert_eq!(
        back.store.config.all_fragment_ids(),
        live.store.config.all_fragment_ids(),
        "fragment ids restored by {what}"
    );
    assert_eq!(back.markers, live.markers, "markers restored by {what}");
    let live_entries: HashMap<&[u8], &Entry> = live.store.entries().map(|e| (&*e.key, e)).collect();
    for entry in back.store.entries() {
        let key = &*entry.key;
        let Some(original) = live_entries.get(key) else {
            panic!("{what} restores {key:?}, which the live CMI does not have");
        };
        let same = entry.value == original.value
            && entry.expire_at == original.expire_at
            && entry.config_id == original.config_id
            && entry.pinned == original.pinned;
        assert!(
            same,
            "{what} restores {key:?} as {entry:?}, but the live CMI has {original:?}"
        );
    }
    let back_keys: HashSet<&[u8]> = back.store.entries().map(|e| &*e.key).collect();
    let mut missing = 0;
    for (key, original) in &live_entries {
        if !back_keys.contains(key) {
            assert!(
                !original.pinned,
                "{what} loses pinned {key:?} ({original:?})"
            );
            assert!(
                live.exclusively_leased(key),
                "{what} loses {key:?} ({original:?}), which no writer holds"
            );
            missing += 1;
        }
    }
    let skip: HashSet<Vec<u8>> = live_entries
        .keys()
        .filter(|k| !back_keys.contains(*k))
        .map(|k| k.to_vec())
        .collect();
    assert_eq!(
        back.key_count() + missing,
        live.key_count(),
        "key counts after {what}"
    );

    // The same through commands, as a client would see it. The coordinator's lease is never
    // logged (a restarted CMI waits for a new one): the restored CMI is granted the live one's.
    back.instance_lease_until = live.instance_lease_until;
    let dbsize = |e: &mut Engine| match e.execute(&Command::DbSize, Now::at(now)) {
        Reply::Int(n) => n,
        other => panic!("DBSIZE answered {other:?}"),
    };
    assert_eq!(
        dbsize(back) + missing as i64,
        dbsize(live),
        "DBSIZE after {what}"
    );
    for key in KEYS {
        if skip.contains(key) {
            continue;
        }
        let get = |e: &mut Engine| e.execute(&Command::Get(key), Now::at(now)).into_owned();
        assert_eq!(get(back), get(live), "GET {key:?} after {what}");
        // A restart ends leases: INSPECT agrees whole where the live CMI holds no lease.
        if !live.leases.contains_key(key) {
            let inspect =
                |e: &mut Engine| e.execute(&Command::Inspect(key), Now::at(now)).into_owned();
            assert_eq!(inspect(back), inspect(live), "INSPECT {key:?} after {what}");
        }
    }
}

// =============================================================================================
// Log replay

/// Replays `data` as an append-only log; panics on a bug.
pub fn check_log_replay(data: &[u8]) {
    let mut engine = Engine::new(EngineConfig::default());
    let result = engine.replay(data);
    engine.check_invariants();
    // The command refuses more fragments; a log asking for more is damaged (a large count once
    // exhausted memory here).
    assert!(
        engine.fragments() <= crate::config_ids::MAX_FRAGMENTS,
        "replay set {} fragments, beyond MAX_FRAGMENTS",
        engine.fragments()
    );
    match result {
        Ok(replayed) => {
            assert!(replayed.valid_bytes <= data.len());
            assert_eq!(
                replayed.truncated,
                replayed.valid_bytes < data.len(),
                "truncated exactly when bytes are left over"
            );
            // The valid part alone replays whole, to the same state.
            let mut again = Engine::new(EngineConfig::default());
            let r = again
                .replay(&data[..replayed.valid_bytes])
                .expect("the valid part replays");
            assert!(!r.truncated && r.records == replayed.records);
            assert_same_state(&engine, &again);
            // A rewrite of the restored state restores the same state.
            engine.enable_log();
            engine.begin_rewrite();
            assert!(engine.rewrite_step(u32::MAX), "one step walks every slot");
            let mut rewritten = Vec::new();
            engine.drain_rewrite(&mut rewritten);
            engine.end_rewrite();
            let mut from_rewrite = Engine::new(EngineConfig::default());
            let r = from_rewrite
                .replay(&rewritten)
                .expect("a rewritten log replays");
            assert!(!r.truncated);
            assert_same_state(&engine, &from_rewrite);
            // The restored CMI serves: touch every key, then shrink memory to force evictions.
            let keys: Vec<Box<[u8]>> = engine.store.entries().map(|e| e.key.clone()).collect();
            for key in keys.iter().take(64) {
                engine.execute(&Command::Get(key), Now::at(START));
                engine.execute(&Command::Inspect(key), Now::at(START));
                engine.check_invariants();
            }
            engine.set_maxmemory(200);
            engine.check_invariants();
            engine.tick(Now::at(START));
            engine.check_invariants();
        }
        Err(e) => assert!(
            e.offset < data.len(),
            "error offset {} within the log",
            e.offset
        ),
    }
}

fn assert_same_state(a: &Engine, b: &Engine) {
    assert_eq!(
        a.store.config.latest, b.store.config.latest,
        "configuration id"
    );
    assert_eq!(
        a.store.config.all_fragment_ids(),
        b.store.config.all_fragment_ids(),
        "fragment ids"
    );
    assert_eq!(a.markers, b.markers, "markers");
    let entries = |e: &Engine| {
        let mut v: Vec<Entry> = e.store.entries().cloned().collect();
        v.sort_by(|x, y| x.key.cmp(&y.key));
        v
    };
    assert_eq!(entries(a), entries(b), "entries");
    assert_eq!(a.memory().used, b.memory().used, "used bytes");
}
