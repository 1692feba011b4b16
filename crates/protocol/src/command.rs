//! The typed command set. `Command::parse` turns request arguments into a command (or the error a
//! Redis client expects); `Command::to_args` turns a command back into arguments for sending.
//! Commands borrow their keys and values from the request buffer.

use std::borrow::Cow;

use crate::reply::ErrorReply;
use crate::spec::{self, CommandSpec};

/// A session identifier. Ranges of them are handed out by the coordinator (000 §5.1).
pub type SessionId = u64;

/// A list of keys, or of alternating keys and values, borrowed from the request.
pub type Args<'a> = &'a [&'a [u8]];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCondition {
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if the key exists.
    IfPresent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetExpiry {
    /// No option: the key loses any time to live it had.
    None,
    /// KEEPTTL
    Keep,
    /// EX / PX: relative, in milliseconds.
    In(i64),
    /// EXAT / PXAT: absolute Unix time in milliseconds.
    At(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpireCondition {
    Always,
    /// NX: only if the key has no time to live.
    IfNone,
    /// XX: only if the key has a time to live.
    IfSome,
    /// GT: only if the new expiry is later.
    IfGreater,
    /// LT: only if the new expiry is earlier.
    IfLess,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Millis,
}

/// What `FLUSHALL` drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushScope {
    /// Every entry, marker, lease and session (Redis's FLUSHALL).
    Everything,
    /// `UNPINNED`: cached values, leases and sessions; pinned entries (buffered writes and what
    /// lists them) and markers stay.
    Unpinned,
    /// `RESTORED`: what `UNPINNED` drops, but only if the CMI still holds cached values it
    /// restored from its append-only log outside a Gemini configuration. Such values may have
    /// been overwritten in the data store while the CMI was down, so a cads client sends this
    /// on every connection it opens, before anything else.
    Restored,
}

/// What a committing write does to the key's TARDIS marker (000 §4.4.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MarkOp {
    #[default]
    Keep,
    Set,
    Clear,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandSub<'a> {
    /// `COMMAND`: every command's info.
    All,
    Count,
    /// `COMMAND INFO [name ...]`: the named commands' info, or every command's.
    Info(Args<'a>),
    /// `COMMAND DOCS [name ...]`: the named commands' docs, or every command's.
    Docs(Args<'a>),
    /// `COMMAND LIST [FILTERBY PATTERN pattern]`.
    List(Option<&'a [u8]>),
    Help,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSub<'a> {
    Get(Args<'a>),
    /// Alternating parameter names and values.
    Set(Args<'a>),
    ResetStat,
    Help,
}

/// What `CLIENT SETINFO` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAttr {
    LibName,
    LibVer,
}

/// The kinds of connection Redis tells apart in `CLIENT LIST TYPE`. A CMI's clients are all
/// normal: it has no replication and no pub/sub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientType {
    Normal,
    Master,
    Replica,
    PubSub,
}

/// Which connections `CLIENT LIST` describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFilter {
    All,
    Type(ClientType),
    /// In the order given; an id may repeat, an unknown one is left out.
    Ids(Vec<i64>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientSub<'a> {
    Id,
    GetName,
    SetName(&'a [u8]),
    /// `CLIENT INFO`: this connection's line of `CLIENT LIST`.
    Info,
    /// `CLIENT SETINFO LIB-NAME|LIB-VER value` (redis-py sends it on connect).
    SetInfo {
        attr: ClientAttr,
        value: &'a [u8],
    },
    List(ClientFilter),
    /// `CLIENT NO-EVICT ON|OFF`: a CMI never evicts clients, so either is accepted and changes
    /// nothing.
    NoEvict(bool),
    /// `CLIENT NO-TOUCH ON|OFF`: whether this connection's reads leave the LRU order alone.
    NoTouch(bool),
    Help,
}

/// What `GETEX` does to the key's time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetExExpiry<'a> {
    /// No option: the time to live stays.
    Keep,
    /// PERSIST: the key loses its time to live.
    Persist,
    /// EX / PX / EXAT / PXAT with their argument, which is checked only once the key is found
    /// (as Redis does: `GETEX missing EX abc` answers nil).
    Set {
        amount: &'a [u8],
        unit: TimeUnit,
        absolute: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    // --- connection and server ---
    Ping(Option<&'a [u8]>),
    Echo(&'a [u8]),
    Auth {
        username: Option<&'a [u8]>,
        password: &'a [u8],
    },
    Hello {
        version: Option<i64>,
        auth: Option<(&'a [u8], &'a [u8])>,
        client_name: Option<&'a [u8]>,
    },
    Select(i64),
    Quit,
    Commands(CommandSub<'a>),
    Config(ConfigSub<'a>),
    Client(ClientSub<'a>),
    Info(Args<'a>),
    DbSize,
    /// `FLUSHALL [ASYNC|SYNC] [UNPINNED|RESTORED]`: what goes is the scope's.
    FlushAll(FlushScope),
    FlushDb,
    BgRewriteAof,

    // --- the Redis string subset ---
    Get(&'a [u8]),
    Set {
        key: &'a [u8],
        value: &'a [u8],
        condition: SetCondition,
        expiry: SetExpiry,
        get: bool,
    },
    /// SETEX (`unit` seconds) and PSETEX (milliseconds): the time to live, positive, in
    /// milliseconds.
    SetEx {
        key: &'a [u8],
        ms: i64,
        unit: TimeUnit,
        value: &'a [u8],
    },
    SetNx {
        key: &'a [u8],
        value: &'a [u8],
    },
    GetSet {
        key: &'a [u8],
        value: &'a [u8],
    },
    GetDel(&'a [u8]),
    GetEx {
        key: &'a [u8],
        expiry: GetExExpiry<'a>,
    },
    GetRange {
        key: &'a [u8],
        start: i64,
        end: i64,
    },
    /// `offset` is not negative.
    SetRange {
        key: &'a [u8],
        offset: i64,
        value: &'a [u8],
    },
    Del(Args<'a>),
    Exists(Args<'a>),
    MGet(Args<'a>),
    /// Alternating keys and values.
    MSet(Args<'a>),
    /// Alternating keys and values.
    MSetNx(Args<'a>),
    /// INCR, INCRBY, DECR, DECRBY.
    IncrBy {
        key: &'a [u8],
        delta: i64,
    },
    /// The increment as sent: it is a number in Redis's `long double` syntax, which the engine
    /// reads (`cads_engine::long_double`).
    IncrByFloat {
        key: &'a [u8],
        increment: &'a [u8],
    },
    Append {
        key: &'a [u8],
        value: &'a [u8],
    },
    StrLen(&'a [u8]),
    /// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT.
    Expire {
        key: &'a [u8],
        amount: i64,
        unit: TimeUnit,
        absolute: bool,
        condition: ExpireCondition,
    },
    Ttl(&'a [u8]),
    PTtl(&'a [u8]),
    Persist(&'a [u8]),
    Time,

    // --- cads metadata ---
    /// Entry metadata: value length, pinned, expiry, configuration id, marker, lease.
    Inspect(&'a [u8]),
    /// Reads, or with an id publishes, the CMI's latest configuration id (004 §3.2.4).
    ConfigId(Option<u64>),
    /// Reads or sets how many fragments the key space is hashed into (0: no fragments).
    Fragments(Option<u32>),
    /// Reads or sets a fragment's configuration id.
    FragmentId {
        fragment: u32,
        id: Option<u64>,
    },
    /// INSTANCELEASE: reads the CMI's monotonic clock, the end of its lease from the coordinator
    /// and its incarnation, or (`until`, on that clock) sets the end, for the incarnation `boot`
    /// if named. A CMI of a Gemini configuration serves keys only while the lease runs.
    InstanceLease {
        until: Option<u64>,
        boot: Option<u64>,
    },
    /// PINSET: stores a pinned value outside of any session, whatever the lease mode (the
    /// coordinator's entries: Gemini's configuration and dirty lists).
    PinSet {
        key: &'a [u8],
        value: &'a [u8],
    },

    // --- sessions with S/X leases (000 §5.1.1) ---
    LGet {
        sid: SessionId,
        key: &'a [u8],
        rmw: bool,
    },
    /// LMGET, or LMGETMARK (`markers`): each key's reply is then `[value, marker]`, so a reader
    /// learns of a TARDIS marker from the lease it takes anyway (000 §4.4.2.2).
    LMGet {
        sid: SessionId,
        rmw: bool,
        markers: bool,
        keys: Args<'a>,
    },
    LSet {
        sid: SessionId,
        key: &'a [u8],
        value: &'a [u8],
        pin: bool,
        /// `PINRESERVE`: pinned, and charged to the pinned memory kept back for replacing a
        /// buffered write by its idempotent form before it is applied (implies `pin`).
        reserve: bool,
    },
    LMSet {
        sid: SessionId,
        pin: bool,
        pairs: Args<'a>,
    },
    LAdd {
        sid: SessionId,
        key: &'a [u8],
        value: &'a [u8],
        pin: bool,
    },
    LDel {
        sid: SessionId,
        key: &'a [u8],
    },
    LMDel {
        sid: SessionId,
        keys: Args<'a>,
    },
    LAppend {
        sid: SessionId,
        key: &'a [u8],
        delta: &'a [u8],
    },
    LMAppend {
        sid: SessionId,
        pairs: Args<'a>,
    },
    LPrepend {
        sid: SessionId,
        key: &'a [u8],
        delta: &'a [u8],
    },
    /// LUPDATE: change operators (`{"$set": ...}`, JSON text) applied to a cached JSON document.
    LUpdate {
        sid: SessionId,
        key: &'a [u8],
        changes: &'a [u8],
    },
    /// LINCR and LDECR (a decrement is a negative delta).
    LIncr {
        sid: SessionId,
        key: &'a [u8],
        delta: i64,
    },
    LUnpin {
        sid: SessionId,
        key: &'a [u8],
    },
    LMark {
        sid: SessionId,
        key: &'a [u8],
        op: MarkOp,
    },
    LValidate(SessionId),
    LCommit(SessionId),
    /// LPRIORITY: the session's ticket (the time its work first started; smaller is older), for
    /// waiting on hot keys instead of giving way.
    LPriority {
        sid: SessionId,
        ticket: u64,
    },
    /// LCONFIG: the configuration id the session routes its keys by (Gemini); the CMI refuses
    /// the session's commands once it knows a newer one.
    LConfig {
        sid: SessionId,
        id: u64,
    },
    LAbort(SessionId),

    // --- IQ leases (000 §4.4.2.2, 004 §2.3) ---
    IqGet {
        sid: SessionId,
        key: &'a [u8],
    },
    IqSet {
        sid: SessionId,
        key: &'a [u8],
        value: &'a [u8],
    },
    /// ISET (004 Algorithms 1 and 3): deletes a key and grants the I lease to fill it.
    ISet {
        sid: SessionId,
        key: &'a [u8],
    },
    /// IDELETE (004 Algorithm 3): releases the I lease on a key without filling it.
    IDelete {
        sid: SessionId,
        key: &'a [u8],
    },
    QaReg {
        sid: SessionId,
        key: &'a [u8],
    },
    QaRead {
        sid: SessionId,
        key: &'a [u8],
    },
    Sar {
        sid: SessionId,
        key: &'a [u8],
        value: &'a [u8],
        mark: MarkOp,
    },
    Dar {
        sid: SessionId,
        key: &'a [u8],
        mark: MarkOp,
    },
}

/// Parses a decimal integer the way Redis does (`string2ll`): an optional minus sign, no plus sign,
/// no blanks, no leading zeros, within i64.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return if negative { None } else { Some(0) },
        [b'0', ..] => return None,
        _ => {}
    }
    let mut magnitude: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    if negative {
        if magnitude == i64::MIN.unsigned_abs() {
            Some(i64::MIN)
        } else {
            i64::try_from(magnitude).ok().map(|m| -m)
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn parse_u64(bytes: &[u8]) -> Option<u64> {
    parse_i64(bytes).and_then(|n| u64::try_from(n).ok())
}

fn int(bytes: &[u8]) -> Result<i64, ErrorReply> {
    parse_i64(bytes).ok_or_else(ErrorReply::not_integer)
}

/// A session id: any u64, written in decimal as `parse_i64` wants its digits (no sign, no blanks,
/// no leading zeros), so ids from 2^63 to 2^64-1 work too.
fn session_id(bytes: &[u8]) -> Result<SessionId, ErrorReply> {
    let invalid = || ErrorReply::err("invalid session id");
    match bytes {
        [] => return Err(invalid()),
        [b'0'] => return Ok(0),
        [b'0', ..] => return Err(invalid()),
        _ => {}
    }
    bytes.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return Err(invalid());
        }
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(invalid)
    })
}

fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn mark_op(arg: Option<&&[u8]>) -> Result<MarkOp, ErrorReply> {
    match arg {
        None => Ok(MarkOp::Keep),
        Some(a) if eq(a, "MARK") => Ok(MarkOp::Set),
        Some(a) if eq(a, "UNMARK") => Ok(MarkOp::Clear),
        Some(_) => Err(ErrorReply::syntax()),
    }
}

fn pin_flag(arg: &[u8]) -> Result<bool, ErrorReply> {
    if eq(arg, "PIN") {
        Ok(true)
    } else if eq(arg, "NOPIN") {
        Ok(false)
    } else {
        Err(ErrorReply::syntax())
    }
}

fn access_flag(arg: &[u8]) -> Result<bool, ErrorReply> {
    if eq(arg, "RMW") {
        Ok(true)
    } else if eq(arg, "RO") {
        Ok(false)
    } else {
        Err(ErrorReply::syntax())
    }
}

fn optional_pin(args: &[&[u8]], index: usize) -> Result<bool, ErrorReply> {
    match args.get(index) {
        None => Ok(false),
        Some(a) if eq(a, "PIN") => Ok(true),
        Some(_) => Err(ErrorReply::syntax()),
    }
}

/// Text of an argument quoted in an error: up to a NUL byte, as Redis's `%s` prints it; bytes that
/// are not UTF-8 show as U+FFFD (Redis echoes them raw).
fn quoted(arg: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
    String::from_utf8_lossy(&arg[..end])
}

fn unknown_command(args: &[&[u8]]) -> ErrorReply {
    let mut rest = String::new();
    for arg in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        let text = quoted(arg);
        let shown: String = text.chars().take(room).collect();
        rest.push_str(&format!("'{shown}' "));
    }
    let name: String = quoted(args[0]).chars().take(128).collect();
    ErrorReply::err(format!(
        "unknown command '{name}', with args beginning with: {rest}"
    ))
}

fn unknown_subcommand(command: &str, sub: &[u8]) -> ErrorReply {
    let sub: String = quoted(sub).chars().take(128).collect();
    ErrorReply::err(format!(
        "unknown subcommand '{sub}'. Try {} HELP.",
        command.to_ascii_uppercase()
    ))
}

/// The subcommand of a container command (CLIENT, CONFIG, COMMAND) named by `args[1]`, with its
/// arity checked; the errors are Redis's.
fn subcommand(
    spec: &'static CommandSpec,
    args: &[&[u8]],
) -> Result<&'static spec::Subcommand, ErrorReply> {
    let sub = spec
        .subcommand(args[1])
        .ok_or_else(|| unknown_subcommand(spec.name, args[1]))?;
    if !sub.arity_ok(args.len()) {
        return Err(ErrorReply::wrong_arity(&format!(
            "{}|{}",
            spec.name, sub.name
        )));
    }
    Ok(sub)
}

/// An expiry argument of SET, SETEX, PSETEX or GETEX, in milliseconds, checked as Redis checks
/// it: an integer, positive, and (in seconds) no more than i64 milliseconds.
pub fn expire_ms(arg: &[u8], unit: TimeUnit, command: &str) -> Result<i64, ErrorReply> {
    let n = int(arg)?;
    let seconds = unit == TimeUnit::Seconds;
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(ErrorReply::invalid_expire_time(command));
    }
    Ok(if seconds { n * 1000 } else { n })
}

fn on_off(arg: &[u8]) -> Result<bool, ErrorReply> {
    if eq(arg, "ON") {
        Ok(true)
    } else if eq(arg, "OFF") {
        Ok(false)
    } else {
        Err(ErrorReply::syntax())
    }
}

impl<'a> Command<'a> {
    /// Parses request arguments (the command name first).
    pub fn parse(args: &'a [&'a [u8]]) -> Result<Command<'a>, ErrorReply> {
        let Some(name) = args.first() else {
            return Err(ErrorReply::err("empty command"));
        };
        let spec = spec::lookup(name).ok_or_else(|| unknown_command(args))?;
        if !spec.arity_ok(args.len()) {
            return Err(ErrorReply::wrong_arity(spec.name));
        }
        parse_with(spec, args)
    }

    /// The session a session or IQ command belongs to.
    pub fn session_id(&self) -> Option<SessionId> {
        use Command::*;
        match self {
            LGet { sid, .. }
            | LMGet { sid, .. }
            | LSet { sid, .. }
            | LMSet { sid, .. }
            | LAdd { sid, .. }
            | LDel { sid, .. }
            | LMDel { sid, .. }
            | LAppend { sid, .. }
            | LMAppend { sid, .. }
            | LPrepend { sid, .. }
            | LUpdate { sid, .. }
            | LIncr { sid, .. }
            | LUnpin { sid, .. }
            | LMark { sid, .. }
            | LValidate(sid)
            | LCommit(sid)
            | LPriority { sid, .. }
            | LConfig { sid, .. }
            | LAbort(sid)
            | IqGet { sid, .. }
            | IqSet { sid, .. }
            | ISet { sid, .. }
            | IDelete { sid, .. }
            | QaReg { sid, .. }
            | QaRead { sid, .. }
            | Sar { sid, .. }
            | Dar { sid, .. } => Some(*sid),
            _ => None,
        }
    }

    /// The command's table row.
    pub fn spec(&self) -> &'static CommandSpec {
        spec::lookup(self.name().as_bytes()).expect("every command has a table row")
    }

    /// The wire name of the command, lowercase.
    pub fn name(&self) -> &'static str {
        use Command::*;
        match self {
            Ping(_) => "ping",
            Echo(_) => "echo",
            Auth { .. } => "auth",
            Hello { .. } => "hello",
            Select(_) => "select",
            Quit => "quit",
            Commands(_) => "command",
            Config(_) => "config",
            Client(_) => "client",
            Info(_) => "info",
            DbSize => "dbsize",
            FlushAll { .. } => "flushall",
            FlushDb => "flushdb",
            BgRewriteAof => "bgrewriteaof",
            Get(_) => "get",
            Set { .. } => "set",
            SetEx { unit, .. } => match unit {
                TimeUnit::Seconds => "setex",
                TimeUnit::Millis => "psetex",
            },
            SetNx { .. } => "setnx",
            GetSet { .. } => "getset",
            GetDel(_) => "getdel",
            GetEx { .. } => "getex",
            GetRange { .. } => "getrange",
            SetRange { .. } => "setrange",
            Del(_) => "del",
            Exists(_) => "exists",
            MGet(_) => "mget",
            MSet(_) => "mset",
            MSetNx(_) => "msetnx",
            IncrBy { .. } => "incrby",
            IncrByFloat { .. } => "incrbyfloat",
            Append { .. } => "append",
            StrLen(_) => "strlen",
            Expire { unit, absolute, .. } => match (unit, absolute) {
                (TimeUnit::Seconds, false) => "expire",
                (TimeUnit::Millis, false) => "pexpire",
                (TimeUnit::Seconds, true) => "expireat",
                (TimeUnit::Millis, true) => "pexpireat",
            },
            Ttl(_) => "ttl",
            PTtl(_) => "pttl",
            Persist(_) => "persist",
            Time => "time",
            Inspect(_) => "inspect",
            ConfigId(_) => "configid",
            Fragments(_) => "fragments",
            FragmentId { .. } => "fragmentid",
            InstanceLease { .. } => "instancelease",
            PinSet { .. } => "pinset",
            LGet { .. } => "lget",
            LMGet { markers: false, .. } => "lmget",
            LMGet { markers: true, .. } => "lmgetmark",
            LSet { .. } => "lset",
            LMSet { .. } => "lmset",
            LAdd { .. } => "ladd",
            LDel { .. } => "ldel",
            LMDel { .. } => "lmdel",
            LAppend { .. } => "lappend",
            LMAppend { .. } => "lmappend",
            LPrepend { .. } => "lprepend",
            LUpdate { .. } => "lupdate",
            LIncr { delta, .. } => {
                if *delta < 0 {
                    "ldecr"
                } else {
                    "lincr"
                }
            }
            LUnpin { .. } => "lunpin",
            LMark { op, .. } => match op {
                MarkOp::Clear => "lunmark",
                _ => "lmark",
            },
            LValidate(_) => "lvalidate",
            LCommit(_) => "lcommit",
            LPriority { .. } => "lpriority",
            LConfig { .. } => "lconfig",
            LAbort(_) => "labort",
            IqGet { .. } => "iqget",
            ISet { .. } => "iset",
            IDelete { .. } => "idelete",
            IqSet { .. } => "iqset",
            QaReg { .. } => "qareg",
            QaRead { .. } => "qaread",
            Sar { .. } => "sar",
            Dar { .. } => "dar",
        }
    }

    /// Appends the command as a RESP request, as a client sends it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        crate::resp::write_request(out, &self.to_args());
    }

    /// The command as request arguments, ready for `resp::write_request`.
    pub fn to_args(&self) -> Vec<Cow<'a, [u8]>> {
        use Command::*;
        let mut out: Vec<Cow<'a, [u8]>> = vec![Cow::Borrowed(self.name().as_bytes())];
        let b = |s: &'a [u8]| Cow::Borrowed(s);
        let w = |s: &'static str| Cow::Borrowed(s.as_bytes());
        let n = |v: i64| Cow::Owned(v.to_string().into_bytes());
        let u = |v: u64| Cow::Owned(v.to_string().into_bytes());
        let mark = |op: &MarkOp| match op {
            MarkOp::Keep => None,
            MarkOp::Set => Some(Cow::Borrowed(&b"MARK"[..])),
            MarkOp::Clear => Some(Cow::Borrowed(&b"UNMARK"[..])),
        };
        match self {
            Ping(msg) => out.extend(msg.map(b)),
            Echo(msg) => out.push(b(msg)),
            Auth { username, password } => {
                out.extend(username.map(b));
                out.push(b(password));
            }
            Hello {
                version,
                auth,
                client_name,
            } => {
                out.extend(version.map(n));
                if let Some((user, pass)) = auth {
                    out.extend([w("AUTH"), b(user), b(pass)]);
                }
                if let Some(name) = client_name {
                    out.extend([w("SETNAME"), b(name)]);
                }
            }
            Select(db) => out.push(n(*db)),
            FlushAll(scope) => match scope {
                FlushScope::Everything => {}
                FlushScope::Unpinned => out.push(w("UNPINNED")),
                FlushScope::Restored => out.push(w("RESTORED")),
            },
            Quit | DbSize | FlushDb | BgRewriteAof | Time => {}
            Commands(sub) => match sub {
                CommandSub::All => {}
                CommandSub::Count => out.push(w("COUNT")),
                CommandSub::Help => out.push(w("HELP")),
                CommandSub::List(pattern) => {
                    out.push(w("LIST"));
                    if let Some(pattern) = pattern {
                        out.extend([w("FILTERBY"), w("PATTERN"), b(pattern)]);
                    }
                }
                CommandSub::Info(names) => {
                    out.push(w("INFO"));
                    out.extend(names.iter().map(|s| b(s)));
                }
                CommandSub::Docs(names) => {
                    out.push(w("DOCS"));
                    out.extend(names.iter().map(|s| b(s)));
                }
            },
            Config(sub) => match sub {
                ConfigSub::Get(names) => {
                    out.push(w("GET"));
                    out.extend(names.iter().map(|s| b(s)));
                }
                ConfigSub::Set(pairs) => {
                    out.push(w("SET"));
                    out.extend(pairs.iter().map(|s| b(s)));
                }
                ConfigSub::ResetStat => out.push(w("RESETSTAT")),
                ConfigSub::Help => out.push(w("HELP")),
            },
            Client(sub) => match sub {
                ClientSub::Id => out.push(w("ID")),
                ClientSub::GetName => out.push(w("GETNAME")),
                ClientSub::SetName(name) => out.extend([w("SETNAME"), b(name)]),
                ClientSub::Info => out.push(w("INFO")),
                ClientSub::SetInfo { attr, value } => out.extend([
                    w("SETINFO"),
                    w(match attr {
                        ClientAttr::LibName => "LIB-NAME",
                        ClientAttr::LibVer => "LIB-VER",
                    }),
                    b(value),
                ]),
                ClientSub::List(filter) => {
                    out.push(w("LIST"));
                    match filter {
                        ClientFilter::All => {}
                        ClientFilter::Type(t) => out.extend([w("TYPE"), w(client_type_name(*t))]),
                        ClientFilter::Ids(ids) => {
                            out.push(w("ID"));
                            out.extend(ids.iter().map(|id| n(*id)));
                        }
                    }
                }
                ClientSub::NoEvict(on) => out.extend([w("NO-EVICT"), w(on_off_word(*on))]),
                ClientSub::NoTouch(on) => out.extend([w("NO-TOUCH"), w(on_off_word(*on))]),
                ClientSub::Help => out.push(w("HELP")),
            },
            Info(sections) | Del(sections) | Exists(sections) | MGet(sections) | MSet(sections)
            | MSetNx(sections) => out.extend(sections.iter().map(|s| b(s))),
            Get(key) | StrLen(key) | Ttl(key) | PTtl(key) | Persist(key) | Inspect(key)
            | GetDel(key) => out.push(b(key)),
            SetEx {
                key,
                ms,
                unit,
                value,
            } => {
                let amount = match unit {
                    TimeUnit::Seconds => ms / 1000,
                    TimeUnit::Millis => *ms,
                };
                out.extend([b(key), n(amount), b(value)]);
            }
            SetNx { key, value } | GetSet { key, value } => out.extend([b(key), b(value)]),
            GetEx { key, expiry } => {
                out.push(b(key));
                match expiry {
                    GetExExpiry::Keep => {}
                    GetExExpiry::Persist => out.push(w("PERSIST")),
                    GetExExpiry::Set {
                        amount,
                        unit,
                        absolute,
                    } => out.extend([
                        w(match (unit, absolute) {
                            (TimeUnit::Seconds, false) => "EX",
                            (TimeUnit::Millis, false) => "PX",
                            (TimeUnit::Seconds, true) => "EXAT",
                            (TimeUnit::Millis, true) => "PXAT",
                        }),
                        b(amount),
                    ]),
                }
            }
            GetRange { key, start, end } => out.extend([b(key), n(*start), n(*end)]),
            SetRange { key, offset, value } => out.extend([b(key), n(*offset), b(value)]),
            IncrByFloat { key, increment } => out.extend([b(key), b(increment)]),
            Set {
                key,
                value,
                condition,
                expiry,
                get,
            } => {
                out.extend([b(key), b(value)]);
                match condition {
                    SetCondition::Always => {}
                    SetCondition::IfAbsent => out.push(w("NX")),
                    SetCondition::IfPresent => out.push(w("XX")),
                }
                if *get {
                    out.push(w("GET"));
                }
                match expiry {
                    SetExpiry::None => {}
                    SetExpiry::Keep => out.push(w("KEEPTTL")),
                    SetExpiry::In(ms) => out.extend([w("PX"), n(*ms)]),
                    SetExpiry::At(ms) => out.extend([w("PXAT"), n(*ms)]),
                }
            }
            IncrBy { key, delta } => out.extend([b(key), n(*delta)]),
            Append { key, value } => out.extend([b(key), b(value)]),
            Expire {
                key,
                amount,
                condition,
                ..
            } => {
                out.extend([b(key), n(*amount)]);
                match condition {
                    ExpireCondition::Always => {}
                    ExpireCondition::IfNone => out.push(w("NX")),
                    ExpireCondition::IfSome => out.push(w("XX")),
                    ExpireCondition::IfGreater => out.push(w("GT")),
                    ExpireCondition::IfLess => out.push(w("LT")),
                }
            }
            ConfigId(id) => out.extend(id.map(u)),
            Fragments(count) => out.extend(count.map(|c| u(c as u64))),
            FragmentId { fragment, id } => {
                out.push(u(*fragment as u64));
                out.extend(id.map(u));
            }
            InstanceLease { until, boot } => out.extend(until.iter().chain(boot).map(|n| u(*n))),
            PinSet { key, value } => out.extend([b(key), b(value)]),
            LGet { sid, key, rmw } => {
                out.extend([u(*sid), b(key)]);
                if *rmw {
                    out.push(w("RMW"));
                }
            }
            LMGet { sid, rmw, keys, .. } => {
                out.extend([u(*sid), w(if *rmw { "RMW" } else { "RO" })]);
                out.extend(keys.iter().map(|s| b(s)));
            }
            LSet {
                sid,
                key,
                value,
                reserve: true,
                ..
            } => {
                out.extend([u(*sid), b(key), b(value), w("PINRESERVE")]);
            }
            LSet {
                sid,
                key,
                value,
                pin,
                ..
            }
            | LAdd {
                sid,
                key,
                value,
                pin,
            } => {
                out.extend([u(*sid), b(key), b(value)]);
                if *pin {
                    out.push(w("PIN"));
                }
            }
            LMSet { sid, pin, pairs } => {
                out.extend([u(*sid), w(if *pin { "PIN" } else { "NOPIN" })]);
                out.extend(pairs.iter().map(|s| b(s)));
            }
            LDel { sid, key }
            | LUnpin { sid, key }
            | LMark { sid, key, .. }
            | IqGet { sid, key }
            | ISet { sid, key }
            | IDelete { sid, key }
            | QaReg { sid, key }
            | QaRead { sid, key } => out.extend([u(*sid), b(key)]),
            LMDel { sid, keys: items } | LMAppend { sid, pairs: items } => {
                out.push(u(*sid));
                out.extend(items.iter().map(|s| b(s)));
            }
            LAppend { sid, key, delta }
            | LPrepend { sid, key, delta }
            | LUpdate {
                sid,
                key,
                changes: delta,
            } => out.extend([u(*sid), b(key), b(delta)]),
            LIncr { sid, key, delta } => out.extend([u(*sid), b(key), u(delta.unsigned_abs())]),
            LValidate(sid) | LCommit(sid) | LAbort(sid) => out.push(u(*sid)),
            LPriority { sid, ticket } => out.extend([u(*sid), u(*ticket)]),
            LConfig { sid, id } => out.extend([u(*sid), u(*id)]),
            IqSet { sid, key, value } => out.extend([u(*sid), b(key), b(value)]),
            Sar {
                sid,
                key,
                value,
                mark: op,
            } => {
                out.extend([u(*sid), b(key), b(value)]);
                out.extend(mark(op));
            }
            Dar { sid, key, mark: op } => {
                out.extend([u(*sid), b(key)]);
                out.extend(mark(op));
            }
        }
        out
    }
}

fn parse_with<'a>(
    spec: &'static CommandSpec,
    args: &'a [&'a [u8]],
) -> Result<Command<'a>, ErrorReply> {
    use Command as C;
    let arity = || ErrorReply::wrong_arity(spec.name);
    let a = args;
    Ok(match spec.name {
        "ping" => match a.len() {
            1 => C::Ping(None),
            2 => C::Ping(Some(a[1])),
            _ => return Err(arity()),
        },
        "echo" => C::Echo(a[1]),
        "auth" => match a.len() {
            2 => C::Auth {
                username: None,
                password: a[1],
            },
            3 => C::Auth {
                username: Some(a[1]),
                password: a[2],
            },
            _ => return Err(ErrorReply::syntax()),
        },
        "hello" => parse_hello(a)?,
        "select" => C::Select(parse_i64(a[1]).ok_or_else(ErrorReply::not_integer)?),
        "quit" => C::Quit,
        "command" => {
            if a.len() == 1 {
                return Ok(C::Commands(CommandSub::All));
            }
            C::Commands(match subcommand(spec, a)?.name {
                "count" => CommandSub::Count,
                "info" => CommandSub::Info(&a[2..]),
                "docs" => CommandSub::Docs(&a[2..]),
                "list" => match &a[2..] {
                    [] => CommandSub::List(None),
                    [by, what, pattern] if eq(by, "FILTERBY") && eq(what, "PATTERN") => {
                        CommandSub::List(Some(pattern))
                    }
                    _ => return Err(ErrorReply::syntax()),
                },
                _ => CommandSub::Help,
            })
        }
        "config" => C::Config(match subcommand(spec, a)?.name {
            "get" => ConfigSub::Get(&a[2..]),
            "set" => {
                if a.len() % 2 != 0 {
                    return Err(ErrorReply::wrong_arity("config|set"));
                }
                ConfigSub::Set(&a[2..])
            }
            "resetstat" => ConfigSub::ResetStat,
            _ => ConfigSub::Help,
        }),
        "client" => C::Client(match subcommand(spec, a)?.name {
            "id" => ClientSub::Id,
            "getname" => ClientSub::GetName,
            "setname" => ClientSub::SetName(a[2]),
            "info" => ClientSub::Info,
            "setinfo" => ClientSub::SetInfo {
                attr: if eq(a[2], "LIB-NAME") {
                    ClientAttr::LibName
                } else if eq(a[2], "LIB-VER") {
                    ClientAttr::LibVer
                } else {
                    return Err(ErrorReply::err(format!(
                        "Unrecognized option '{}'",
                        quoted(a[2])
                    )));
                },
                value: a[3],
            },
            "list" => ClientSub::List(parse_client_filter(a)?),
            "no-evict" => ClientSub::NoEvict(on_off(a[2])?),
            "no-touch" => ClientSub::NoTouch(on_off(a[2])?),
            _ => ClientSub::Help,
        }),
        "info" => C::Info(&a[1..]),
        "dbsize" => C::DbSize,
        "flushall" | "flushdb" => {
            // At most one ASYNC or SYNC, as Redis (both flush at once), and for FLUSHALL one of
            // cads's UNPINNED or RESTORED.
            let (mut mode, mut scope) = (false, FlushScope::Everything);
            for opt in &a[1..] {
                let cads_scope = if eq(opt, "UNPINNED") {
                    Some(FlushScope::Unpinned)
                } else if eq(opt, "RESTORED") {
                    Some(FlushScope::Restored)
                } else {
                    None
                };
                if !mode && (eq(opt, "ASYNC") || eq(opt, "SYNC")) {
                    mode = true;
                } else if let (Some(s), FlushScope::Everything, "flushall") =
                    (cads_scope, scope, spec.name)
                {
                    scope = s;
                } else {
                    return Err(ErrorReply::syntax());
                }
            }
            if spec.name == "flushall" {
                C::FlushAll(scope)
            } else {
                C::FlushDb
            }
        }
        "bgrewriteaof" => C::BgRewriteAof,
        "get" => C::Get(a[1]),
        "set" => parse_set(a)?,
        "setex" | "psetex" => {
            let unit = if spec.name == "setex" {
                TimeUnit::Seconds
            } else {
                TimeUnit::Millis
            };
            C::SetEx {
                key: a[1],
                ms: expire_ms(a[2], unit, spec.name)?,
                unit,
                value: a[3],
            }
        }
        "setnx" => C::SetNx {
            key: a[1],
            value: a[2],
        },
        "getset" => C::GetSet {
            key: a[1],
            value: a[2],
        },
        "getdel" => C::GetDel(a[1]),
        "getex" => parse_getex(a)?,
        "getrange" => C::GetRange {
            key: a[1],
            start: int(a[2])?,
            end: int(a[3])?,
        },
        "setrange" => {
            let offset = int(a[2])?;
            if offset < 0 {
                return Err(ErrorReply::err("offset is out of range"));
            }
            C::SetRange {
                key: a[1],
                offset,
                value: a[3],
            }
        }
        "del" => C::Del(&a[1..]),
        "exists" => C::Exists(&a[1..]),
        "mget" => C::MGet(&a[1..]),
        "mset" => {
            if a.len() % 2 == 0 {
                return Err(arity());
            }
            C::MSet(&a[1..])
        }
        "msetnx" => {
            if a.len() % 2 == 0 {
                return Err(arity());
            }
            C::MSetNx(&a[1..])
        }
        "incrbyfloat" => C::IncrByFloat {
            key: a[1],
            increment: a[2],
        },
        "incr" => C::IncrBy {
            key: a[1],
            delta: 1,
        },
        "decr" => C::IncrBy {
            key: a[1],
            delta: -1,
        },
        "incrby" => C::IncrBy {
            key: a[1],
            delta: int(a[2])?,
        },
        "decrby" => {
            let delta = int(a[2])?;
            if delta == i64::MIN {
                return Err(ErrorReply::err("decrement would overflow"));
            }
            C::IncrBy {
                key: a[1],
                delta: -delta,
            }
        }
        "append" => C::Append {
            key: a[1],
            value: a[2],
        },
        "strlen" => C::StrLen(a[1]),
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            let unit = if spec.name.starts_with('p') {
                TimeUnit::Millis
            } else {
                TimeUnit::Seconds
            };
            C::Expire {
                key: a[1],
                amount: int(a[2])?,
                unit,
                absolute: spec.name.ends_with("at"),
                condition: parse_expire_condition(&a[3..])?,
            }
        }
        "ttl" => C::Ttl(a[1]),
        "pttl" => C::PTtl(a[1]),
        "persist" => C::Persist(a[1]),
        "time" => C::Time,
        "inspect" => C::Inspect(a[1]),
        "configid" => match a.len() {
            1 => C::ConfigId(None),
            2 => C::ConfigId(Some(
                parse_u64(a[1]).ok_or_else(|| ErrorReply::err("invalid configuration id"))?,
            )),
            _ => return Err(arity()),
        },
        "fragments" => match a.len() {
            1 => C::Fragments(None),
            2 => C::Fragments(Some(fragment_number(a[1])?)),
            _ => return Err(arity()),
        },
        "fragmentid" => match a.len() {
            2 => C::FragmentId {
                fragment: fragment_number(a[1])?,
                id: None,
            },
            3 => C::FragmentId {
                fragment: fragment_number(a[1])?,
                id: Some(
                    parse_u64(a[2]).ok_or_else(|| ErrorReply::err("invalid configuration id"))?,
                ),
            },
            _ => return Err(arity()),
        },
        "instancelease" => {
            let number = |arg: &[u8], what: &str| {
                parse_u64(arg).ok_or_else(|| ErrorReply::err(format!("invalid {what}")))
            };
            match a.len() {
                1..=3 => C::InstanceLease {
                    until: a.get(1).map(|n| number(n, "lease end")).transpose()?,
                    boot: a.get(2).map(|n| number(n, "incarnation")).transpose()?,
                },
                _ => return Err(arity()),
            }
        }
        "pinset" => C::PinSet {
            key: a[1],
            value: a[2],
        },
        "lget" => {
            let rmw = match a.len() {
                3 => false,
                4 => access_flag(a[3])?,
                _ => return Err(arity()),
            };
            C::LGet {
                sid: session_id(a[1])?,
                key: a[2],
                rmw,
            }
        }
        "lmget" | "lmgetmark" => C::LMGet {
            sid: session_id(a[1])?,
            rmw: access_flag(a[2])?,
            markers: spec.name == "lmgetmark",
            keys: &a[3..],
        },
        "lset" | "ladd" => {
            if a.len() > 5 {
                return Err(arity());
            }
            let (sid, key, value) = (session_id(a[1])?, a[2], a[3]);
            let reserve = spec.name == "lset" && a.get(4).is_some_and(|a| eq(a, "PINRESERVE"));
            let pin = reserve || optional_pin(a, 4)?;
            if spec.name == "lset" {
                C::LSet {
                    sid,
                    key,
                    value,
                    pin,
                    reserve,
                }
            } else {
                C::LAdd {
                    sid,
                    key,
                    value,
                    pin,
                }
            }
        }
        "lmset" => {
            if a.len() % 2 == 0 {
                return Err(arity());
            }
            C::LMSet {
                sid: session_id(a[1])?,
                pin: pin_flag(a[2])?,
                pairs: &a[3..],
            }
        }
        "ldel" => C::LDel {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "lmdel" => C::LMDel {
            sid: session_id(a[1])?,
            keys: &a[2..],
        },
        "lappend" => C::LAppend {
            sid: session_id(a[1])?,
            key: a[2],
            delta: a[3],
        },
        "lprepend" => C::LPrepend {
            sid: session_id(a[1])?,
            key: a[2],
            delta: a[3],
        },
        "lupdate" => C::LUpdate {
            sid: session_id(a[1])?,
            key: a[2],
            changes: a[3],
        },
        "lmappend" => {
            if a.len() % 2 != 0 {
                return Err(arity());
            }
            C::LMAppend {
                sid: session_id(a[1])?,
                pairs: &a[2..],
            }
        }
        "lincr" | "ldecr" => {
            let delta = int(a[3])?;
            if delta < 0 {
                return Err(ErrorReply::err("delta must not be negative"));
            }
            C::LIncr {
                sid: session_id(a[1])?,
                key: a[2],
                delta: if spec.name == "ldecr" { -delta } else { delta },
            }
        }
        "lunpin" => C::LUnpin {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "lmark" | "lunmark" => C::LMark {
            sid: session_id(a[1])?,
            key: a[2],
            op: if spec.name == "lmark" {
                MarkOp::Set
            } else {
                MarkOp::Clear
            },
        },
        "lvalidate" => C::LValidate(session_id(a[1])?),
        "lcommit" => C::LCommit(session_id(a[1])?),
        "lpriority" => C::LPriority {
            sid: session_id(a[1])?,
            ticket: session_id(a[2]).map_err(|_| ErrorReply::err("invalid ticket"))?,
        },
        "lconfig" => C::LConfig {
            sid: session_id(a[1])?,
            id: parse_u64(a[2]).ok_or_else(|| ErrorReply::err("invalid configuration id"))?,
        },
        "labort" => C::LAbort(session_id(a[1])?),
        "iqget" => C::IqGet {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "iset" => C::ISet {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "idelete" => C::IDelete {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "iqset" => C::IqSet {
            sid: session_id(a[1])?,
            key: a[2],
            value: a[3],
        },
        "qareg" => C::QaReg {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "qaread" => C::QaRead {
            sid: session_id(a[1])?,
            key: a[2],
        },
        "sar" => {
            if a.len() > 5 {
                return Err(arity());
            }
            C::Sar {
                sid: session_id(a[1])?,
                key: a[2],
                value: a[3],
                mark: mark_op(a.get(4))?,
            }
        }
        "dar" => {
            if a.len() > 4 {
                return Err(arity());
            }
            C::Dar {
                sid: session_id(a[1])?,
                key: a[2],
                mark: mark_op(a.get(3))?,
            }
        }
        other => unreachable!("command table row without a parser: {other}"),
    })
}

fn fragment_number(arg: &[u8]) -> Result<u32, ErrorReply> {
    parse_u64(arg)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ErrorReply::err("invalid fragment number"))
}

fn parse_hello<'a>(a: &'a [&'a [u8]]) -> Result<Command<'a>, ErrorReply> {
    let mut version = None;
    let mut auth = None;
    let mut client_name = None;
    let mut i = 1;
    if let Some(v) = a.get(1) {
        version = Some(parse_i64(v).ok_or_else(|| {
            ErrorReply::err("Protocol version is not an integer or out of range")
        })?);
        i = 2;
    }
    while i < a.len() {
        if eq(a[i], "AUTH") && i + 2 < a.len() {
            auth = Some((a[i + 1], a[i + 2]));
            i += 3;
        } else if eq(a[i], "SETNAME") && i + 1 < a.len() {
            client_name = Some(a[i + 1]);
            i += 2;
        } else {
            return Err(ErrorReply::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(a[i])
            )));
        }
    }
    Ok(Command::Hello {
        version,
        auth,
        client_name,
    })
}

fn client_type_name(t: ClientType) -> &'static str {
    match t {
        ClientType::Normal => "normal",
        ClientType::Master => "master",
        ClientType::Replica => "replica",
        ClientType::PubSub => "pubsub",
    }
}

fn on_off_word(on: bool) -> &'static str {
    if on {
        "ON"
    } else {
        "OFF"
    }
}

/// `CLIENT LIST [TYPE type | ID id ...]`, with Redis's errors.
fn parse_client_filter(a: &[&[u8]]) -> Result<ClientFilter, ErrorReply> {
    match &a[2..] {
        [] => Ok(ClientFilter::All),
        [word, name] if eq(word, "TYPE") => {
            let t = match name.to_ascii_lowercase().as_slice() {
                b"normal" => ClientType::Normal,
                b"master" => ClientType::Master,
                b"replica" | b"slave" => ClientType::Replica,
                b"pubsub" => ClientType::PubSub,
                _ => {
                    return Err(ErrorReply::err(format!(
                        "Unknown client type '{}'",
                        quoted(name)
                    )))
                }
            };
            Ok(ClientFilter::Type(t))
        }
        [word, ids @ ..] if eq(word, "ID") && !ids.is_empty() => ids
            .iter()
            .map(|id| parse_i64(id).ok_or_else(|| ErrorReply::err("Invalid client ID")))
            .collect::<Result<_, _>>()
            .map(ClientFilter::Ids),
        _ => Err(ErrorReply::syntax()),
    }
}

/// GETEX's options as Redis's `parseExtendedStringArgumentsOrReply` takes them: one of EX, PX,
/// EXAT, PXAT (which may repeat; the last wins) or PERSIST. The expiry's value is checked later,
/// and only if the key exists.
fn parse_getex<'a>(a: &'a [&'a [u8]]) -> Result<Command<'a>, ErrorReply> {
    let mut expiry = GetExExpiry::Keep;
    let mut i = 2;
    while i < a.len() {
        let opt = a[i];
        let free = |word: &str| match expiry {
            GetExExpiry::Keep => true,
            GetExExpiry::Persist => word == "PERSIST",
            GetExExpiry::Set { unit, absolute, .. } => {
                word == match (unit, absolute) {
                    (TimeUnit::Seconds, false) => "EX",
                    (TimeUnit::Millis, false) => "PX",
                    (TimeUnit::Seconds, true) => "EXAT",
                    (TimeUnit::Millis, true) => "PXAT",
                }
            }
        };
        if eq(opt, "PERSIST") && free("PERSIST") {
            expiry = GetExExpiry::Persist;
        } else if let (Some(amount), Some(word)) = (
            a.get(i + 1),
            ["EX", "PX", "EXAT", "PXAT"]
                .into_iter()
                .find(|w| eq(opt, w) && free(w)),
        ) {
            expiry = GetExExpiry::Set {
                amount,
                unit: if word.starts_with('E') {
                    TimeUnit::Seconds
                } else {
                    TimeUnit::Millis
                },
                absolute: word.ends_with("AT"),
            };
            i += 1;
        } else {
            return Err(ErrorReply::syntax());
        }
        i += 1;
    }
    Ok(Command::GetEx { key: a[1], expiry })
}

fn parse_set<'a>(a: &'a [&'a [u8]]) -> Result<Command<'a>, ErrorReply> {
    // As Redis's parseExtendedStringArgumentsOrReply: an option may repeat (the last value wins),
    // but NX excludes XX, and KEEPTTL and the four expiry options exclude one another.
    let mut condition = SetCondition::Always;
    let mut expiry = SetExpiry::None;
    let mut expiry_word: Option<&[u8]> = None;
    let mut get = false;
    let mut i = 3;
    while i < a.len() {
        let opt = a[i];
        let next = a.get(i + 1);
        let expiry_free = |word: &str| expiry_word.is_none_or(|w| eq(w, word));
        if eq(opt, "NX") && condition != SetCondition::IfPresent {
            condition = SetCondition::IfAbsent;
        } else if eq(opt, "XX") && condition != SetCondition::IfAbsent {
            condition = SetCondition::IfPresent;
        } else if eq(opt, "GET") {
            get = true;
        } else if eq(opt, "KEEPTTL") && expiry_free("KEEPTTL") {
            expiry = SetExpiry::Keep;
            expiry_word = Some(opt);
        } else if let (Some(next), Some(word)) = (
            next,
            ["EX", "PX", "EXAT", "PXAT"]
                .into_iter()
                .find(|w| eq(opt, w) && expiry_free(w)),
        ) {
            let seconds = word == "EX" || word == "EXAT";
            let unit = if seconds {
                TimeUnit::Seconds
            } else {
                TimeUnit::Millis
            };
            let ms = expire_ms(next, unit, "set")?;
            expiry = if word == "EX" || word == "PX" {
                SetExpiry::In(ms)
            } else {
                SetExpiry::At(ms)
            };
            expiry_word = Some(opt);
            i += 1;
        } else {
            return Err(ErrorReply::syntax());
        }
        i += 1;
    }
    Ok(Command::Set {
        key: a[1],
        value: a[2],
        condition,
        expiry,
        get,
    })
}

fn parse_expire_condition(opts: &[&[u8]]) -> Result<ExpireCondition, ErrorReply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in opts {
        if eq(opt, "NX") {
            nx = true;
        } else if eq(opt, "XX") {
            xx = true;
        } else if eq(opt, "GT") {
            gt = true;
        } else if eq(opt, "LT") {
            lt = true;
        } else {
            return Err(ErrorReply::err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(ErrorReply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(ErrorReply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(match (nx, xx, gt, lt) {
        (true, ..) => ExpireCondition::IfNone,
        (_, _, true, _) => ExpireCondition::IfGreater,
        (_, _, _, true) => ExpireCondition::IfLess,
        (_, true, ..) => ExpireCondition::IfSome,
        _ => ExpireCondition::Always,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command<'static>, ErrorReply> {
        let args: Vec<&'static [u8]> = line
            .split(' ')
            .map(|s| &*Box::leak(s.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        Command::parse(Box::leak(args.into_boxed_slice()))
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in ["", "-", "+1", " 1", "01", "-0", "9223372036854775808", "1a"] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn set_options() {
        assert_eq!(
            parse("SET k v NX PX 100 GET").unwrap(),
            Command::Set {
                key: b"k",
                value: b"v",
                condition: SetCondition::IfAbsent,
                expiry: SetExpiry::In(100),
                get: true
            }
        );
        assert_eq!(
            parse("set k v ex 0").unwrap_err().message,
            "invalid expire time in 'set' command"
        );
        assert_eq!(parse("set k v nx xx").unwrap_err().message, "syntax error");
        assert_eq!(
            parse("set k v ex 1 px 1").unwrap_err().message,
            "syntax error"
        );
        assert_eq!(
            parse("set k v ex x").unwrap_err().message,
            "value is not an integer or out of range"
        );
    }

    #[test]
    fn errors_read_like_redis() {
        assert_eq!(
            parse("GET").unwrap_err().message,
            "wrong number of arguments for 'get' command"
        );
        assert_eq!(
            parse("FOO a b").unwrap_err().to_string(),
            "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            parse("mset a").unwrap_err().message,
            "wrong number of arguments for 'mset' command"
        );
        assert_eq!(
            parse("decrby k -9223372036854775808").unwrap_err().message,
            "decrement would overflow"
        );
    }

    #[test]
    fn string_commands_check_their_arguments_as_redis_does() {
        assert_eq!(
            parse("SETEX k 10 v").unwrap(),
            Command::SetEx {
                key: b"k",
                ms: 10_000,
                unit: TimeUnit::Seconds,
                value: b"v"
            }
        );
        for (line, error) in [
            ("SETEX k 0 v", "invalid expire time in 'setex' command"),
            ("PSETEX k -1 v", "invalid expire time in 'psetex' command"),
            (
                "SETEX k 9223372036854776 v",
                "invalid expire time in 'setex' command",
            ),
            ("SETEX k x v", "value is not an integer or out of range"),
            ("SETRANGE k -1 v", "offset is out of range"),
            (
                "SETRANGE k 9223372036854775808 v",
                "value is not an integer or out of range",
            ),
            ("GETRANGE k 0 x", "value is not an integer or out of range"),
            ("GETEX k EX", "syntax error"),
            ("GETEX k PERSIST EX 1", "syntax error"),
            ("GETEX k EX 1 PX 1", "syntax error"),
            ("GETEX k KEEPTTL", "syntax error"),
            (
                "MSETNX a 1 b",
                "wrong number of arguments for 'msetnx' command",
            ),
            ("TIME x", "wrong number of arguments for 'time' command"),
        ] {
            assert_eq!(parse(line).unwrap_err().message, error, "{line}");
        }
        // As in Redis, the same expiry option may repeat and the last one counts; its value is
        // not looked at yet.
        assert_eq!(
            parse("GETEX k EX 1 ex abc").unwrap(),
            Command::GetEx {
                key: b"k",
                expiry: GetExExpiry::Set {
                    amount: b"abc",
                    unit: TimeUnit::Seconds,
                    absolute: false
                }
            }
        );
    }

    #[test]
    fn container_commands_check_their_subcommands_as_redis_does() {
        for (line, error) in [
            ("CLIENT FOO", "unknown subcommand 'FOO'. Try CLIENT HELP."),
            ("CONFIG FOO", "unknown subcommand 'FOO'. Try CONFIG HELP."),
            ("COMMAND FOO", "unknown subcommand 'FOO'. Try COMMAND HELP."),
            (
                "CLIENT SETNAME",
                "wrong number of arguments for 'client|setname' command",
            ),
            (
                "CLIENT GETNAME x",
                "wrong number of arguments for 'client|getname' command",
            ),
            (
                "CLIENT NO-EVICT",
                "wrong number of arguments for 'client|no-evict' command",
            ),
            (
                "COMMAND COUNT x",
                "wrong number of arguments for 'command|count' command",
            ),
            (
                "CONFIG SET a b c",
                "wrong number of arguments for 'config|set' command",
            ),
            ("CLIENT NO-EVICT maybe", "syntax error"),
            ("CLIENT LIST foo", "syntax error"),
            ("CLIENT LIST TYPE normal extra", "syntax error"),
            ("CLIENT LIST TYPE foo", "Unknown client type 'foo'"),
            ("CLIENT LIST ID 1 abc", "Invalid client ID"),
            ("CLIENT SETINFO foo bar", "Unrecognized option 'foo'"),
            ("COMMAND LIST FILTERBY MODULE x", "syntax error"),
        ] {
            assert_eq!(parse(line).unwrap_err().message, error, "{line}");
        }
        assert_eq!(
            parse("client list type SLAVE").unwrap(),
            Command::Client(ClientSub::List(ClientFilter::Type(ClientType::Replica)))
        );
        assert_eq!(
            parse("CLIENT LIST ID 5 -1 5").unwrap(),
            Command::Client(ClientSub::List(ClientFilter::Ids(vec![5, -1, 5])))
        );
    }

    #[test]
    fn session_commands() {
        assert_eq!(
            parse("LGET 7 k RMW").unwrap(),
            Command::LGet {
                sid: 7,
                key: b"k",
                rmw: true
            }
        );
        assert_eq!(parse("LGET x k").unwrap_err().message, "invalid session id");
        // Session ids are u64s: the upper half works, one past it or a sign does not.
        for sid in [0, 1, 1 << 63, u64::MAX] {
            let cmd = parse(&format!("LVALIDATE {sid}")).unwrap();
            assert_eq!(cmd, Command::LValidate(sid));
            let args: Vec<Vec<u8>> = cmd.to_args().into_iter().map(|a| a.into_owned()).collect();
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            assert_eq!(Command::parse(&args).unwrap(), cmd, "{sid} round-trips");
        }
        for bad in ["18446744073709551616", "-1", "+1", "01", "", "1x"] {
            assert_eq!(
                parse(&format!("LABORT {bad}"))
                    .map_err(|e| e.message)
                    .unwrap_err(),
                "invalid session id",
                "{bad:?}"
            );
        }
        assert_eq!(
            parse("LSET 1 k v PINNED").unwrap_err().message,
            "syntax error"
        );
        assert_eq!(
            parse("LDECR 1 k 5").unwrap(),
            Command::LIncr {
                sid: 1,
                key: b"k",
                delta: -5
            }
        );
        assert_eq!(
            parse("DAR 3 k UNMARK").unwrap(),
            Command::Dar {
                sid: 3,
                key: b"k",
                mark: MarkOp::Clear
            }
        );
        assert!(parse("LMSET 1 PIN a 1 b").is_err());
        assert_eq!(
            parse("FLUSHALL ASYNC UNPINNED").unwrap(),
            Command::FlushAll(FlushScope::Unpinned)
        );
        assert_eq!(
            parse("FLUSHALL RESTORED").unwrap(),
            Command::FlushAll(FlushScope::Restored)
        );
        assert!(parse("FLUSHALL UNPINNED UNPINNED").is_err());
        assert!(parse("FLUSHALL UNPINNED RESTORED").is_err());
        assert!(parse("FLUSHALL SYNC ASYNC").is_err());
        assert!(parse("FLUSHDB UNPINNED").is_err());
    }

    #[test]
    fn every_command_round_trips_through_args() {
        let lines = [
            "PING",
            "PING hi",
            "ECHO x",
            "AUTH u p",
            "AUTH p",
            "HELLO 2 AUTH u p SETNAME n",
            "SELECT 0",
            "QUIT",
            "COMMAND",
            "COMMAND COUNT",
            "COMMAND DOCS get",
            "COMMAND INFO",
            "COMMAND LIST",
            "COMMAND LIST FILTERBY PATTERN l*",
            "COMMAND HELP",
            "CONFIG GET maxmemory",
            "CONFIG SET maxmemory 10",
            "CONFIG RESETSTAT",
            "CONFIG HELP",
            "CLIENT SETNAME x",
            "CLIENT ID",
            "CLIENT GETNAME",
            "CLIENT INFO",
            "CLIENT SETINFO LIB-VER 1.0",
            "CLIENT SETINFO lib-name redis-py",
            "CLIENT LIST",
            "CLIENT LIST TYPE replica",
            "CLIENT LIST ID 3 1 3",
            "CLIENT NO-EVICT on",
            "CLIENT NO-TOUCH OFF",
            "CLIENT HELP",
            "INFO memory",
            "DBSIZE",
            "FLUSHALL",
            "FLUSHALL UNPINNED",
            "FLUSHALL RESTORED",
            "FLUSHDB",
            "BGREWRITEAOF",
            "GET k",
            "SET k v XX GET KEEPTTL",
            "SET k v PXAT 5",
            "SETEX k 10 v",
            "PSETEX k 10 v",
            "SETNX k v",
            "GETSET k v",
            "GETDEL k",
            "GETEX k",
            "GETEX k PERSIST",
            "GETEX k EX abc",
            "GETEX k pxat 5",
            "GETRANGE k -1 9223372036854775807",
            "SETRANGE k 0 v",
            "MSETNX a 1 b 2",
            "INCRBYFLOAT k 1.5e3",
            "TIME",
            "DEL a b",
            "EXISTS a",
            "MGET a b",
            "MSET a 1 b 2",
            "INCR k",
            "INCRBY k 2",
            "DECR k",
            "EXPIREAT k 1",
            "PEXPIRE k 1",
            "DECRBY k 3",
            "APPEND k v",
            "STRLEN k",
            "PEXPIREAT k 5 GT",
            "EXPIRE k 5 NX",
            "TTL k",
            "PTTL k",
            "PERSIST k",
            "INSPECT k",
            "CONFIGID",
            "CONFIGID 9",
            "FRAGMENTS 16",
            "FRAGMENTID 3 7",
            "INSTANCELEASE",
            "INSTANCELEASE 1500",
            "INSTANCELEASE 1500 77",
            "PINSET k v",
            "LGET 1 k",
            "LMGET 1 RMW a b",
            "LMGETMARK 1 RO a b",
            "ISET 1 k",
            "IDELETE 1 k",
            "LSET 1 k v PIN",
            "LSET 1 k v PINRESERVE",
            "LMSET 1 NOPIN a 1",
            "LADD 1 k v",
            "LDEL 1 k",
            "LMDEL 1 a b",
            "LAPPEND 1 k d",
            "LMAPPEND 1 a x b y",
            "LPREPEND 1 k d",
            "LUPDATE 1 k {}",
            "LINCR 1 k 2",
            "LDECR 1 k 2",
            "LUNPIN 1 k",
            "LMARK 1 k",
            "LUNMARK 1 k",
            "LVALIDATE 1",
            "LPRIORITY 1 1732480000000000",
            "LCONFIG 1 7",
            "LCOMMIT 1",
            "LABORT 1",
            "IQGET 1 k",
            "IQSET 1 k v",
            "QAREG 1 k",
            "QAREAD 1 k",
            "SAR 1 k v MARK",
            "DAR 1 k",
        ];
        for line in lines {
            let cmd = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let args: Vec<Vec<u8>> = cmd.to_args().into_iter().map(|c| c.into_owned()).collect();
            let slices: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
            let again = Command::parse(&slices).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(format!("{again:?}"), format!("{cmd:?}"), "{line}");
        }
        // Every table row has a parser reachable from the lines above or the tests of the module.
        for spec in crate::spec::COMMANDS {
            let covered = lines
                .iter()
                .any(|l| l.split(' ').next().unwrap().eq_ignore_ascii_case(spec.name));
            assert!(covered, "no round-trip line for {}", spec.name);
        }
    }
}
