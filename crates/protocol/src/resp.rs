//! RESP2 framing: requests as the server parses them (multibulk and inline, with hard limits),
//! replies as the server writes them and the client reads them, and requests as the client writes them.
//!
//! The request parser never allocates for the common multibulk form: it reports argument ranges into
//! the caller's buffer, so a CMI can run a command straight out of its read buffer.

use std::borrow::Cow;
use std::ops::Range;

use crate::reply::{ErrorKind, ErrorReply, Reply};

/// Hard limits on what a request may contain. Anything beyond them is a protocol error: the server
/// answers it and closes the connection, as Redis does.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest bulk string (one argument), in bytes.
    pub max_bulk: usize,
    /// Most arguments in one request, command name included.
    pub max_args: usize,
    /// Longest inline (telnet-style) request line, in bytes.
    pub max_inline: usize,
    /// These are the limits of a client that has not authenticated: the errors for a bulk or an
    /// argument count beyond them say so, in Redis's words.
    pub unauthenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 64 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline: 64 * 1024,
            unauthenticated: false,
        }
    }
}

impl Limits {
    /// What a client may send before it authenticates, with Redis's figures: arguments of 16 KiB
    /// and ten arguments at most, so that a connection without the password cannot make a CMI
    /// hold more than about 160 KiB for it.
    pub fn unauthenticated() -> Limits {
        Limits {
            max_bulk: 16 * 1024,
            max_args: 10,
            unauthenticated: true,
            ..Limits::default()
        }
    }

    fn too_many_args(&self) -> ProtocolError {
        ProtocolError(if self.unauthenticated {
            "unauthenticated multibulk length".into()
        } else {
            "invalid multibulk length".into()
        })
    }

    fn too_long_bulk(&self) -> ProtocolError {
        ProtocolError(if self.unauthenticated {
            "unauthenticated bulk length".into()
        } else {
            "invalid bulk length".into()
        })
    }
}

/// A malformed request. The text follows Redis's so that tools that print it read the same.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub Cow<'static, str>);

impl ProtocolError {
    pub fn to_reply(&self) -> ErrorReply {
        ErrorReply::new(ErrorKind::Err, self.to_string())
    }
}

/// What `parse_request` found at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A multibulk request whose arguments are `args` (ranges into the buffer); `consumed` bytes.
    Request { consumed: usize },
    /// An inline request; its arguments are decoded (quotes and escapes) and owned.
    Inline { consumed: usize, args: Vec<Vec<u8>> },
    /// An empty request (`*0`, `*-1` or a blank line) that produces no reply.
    Empty { consumed: usize },
    /// More bytes are needed; parsing again is pointless before the buffer holds `needed` bytes.
    Incomplete { needed: usize },
}

/// Longest `*<n>` or `$<n>` header line we accept (Redis uses the same bound).
const MAX_HEADER_LINE: usize = 64 * 1024;

/// Parses one request from the front of `buf`. For a multibulk request the argument ranges are
/// written to `args` (cleared first). Stateless: a request that arrives in pieces is parsed from
/// its start each time; a server reading from sockets keeps a [`RequestParser`] instead.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Parsed, ProtocolError> {
    let mut parser = RequestParser {
        args: std::mem::take(args),
        ..RequestParser::default()
    };
    let parsed = parser.parse(buf, limits);
    *args = parser.args;
    parsed
}

/// Where a [`RequestParser`] is in the request it is reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    /// Nothing of the request is read yet: its first byte decides multibulk or inline.
    #[default]
    Start,
    /// An inline request: looking for the end of its line.
    Inline,
    /// A multibulk request: reading its `*<count>` line.
    Count,
    /// A multibulk request with `left` arguments still to read; the next `$` header is at `pos`.
    Args { left: usize },
    /// The data of an argument of `len` bytes starts at `pos`; `left` arguments remain after it.
    Bulk { left: usize, len: usize },
}

/// A request parser that keeps its progress across reads, so that a request costs the same to
/// parse however it is split (a client trickling a 7 MB request in 700-byte pieces made the
/// stateless parser start over on every read: seconds of CPU, and before AUTH).
///
/// Feed it the connection's unread bytes, which must start at the first byte of the request being
/// parsed and only grow between calls until it answers something other than
/// [`Parsed::Incomplete`]. After [`Parsed::Request`], [`RequestParser::args`] are the arguments'
/// ranges in that buffer until the next call, which starts the next request. After an error the
/// connection is to be closed; the parser starts afresh if it is called again.
#[derive(Debug, Default)]
pub struct RequestParser {
    stage: Stage,
    /// Bytes of the request already parsed: whole header lines and whole arguments.
    pos: usize,
    /// How far the search for the end of the current line (a header or an inline request) has
    /// looked, so that a line arriving byte by byte is scanned once.
    scanned: usize,
    args: Vec<Range<usize>>,
}

impl RequestParser {
    /// The arguments of the request the last call returned as [`Parsed::Request`], as ranges of
    /// the buffer it was given.
    pub fn args(&self) -> &[Range<usize>] {
        &self.args
    }

    /// Whether part of a request has been read (a request is under way).
    pub fn in_request(&self) -> bool {
        self.stage != Stage::Start
    }

    fn finish(&mut self, result: Result<Parsed, ProtocolError>) -> Result<Parsed, ProtocolError> {
        if !matches!(result, Ok(Parsed::Incomplete { .. })) {
            self.stage = Stage::Start;
            self.pos = 0;
            self.scanned = 0;
        }
        result
    }

    /// Parses on from where the last call stopped. See the type's documentation for what `buf`
    /// must hold.
    pub fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        if self.stage == Stage::Start {
            self.args.clear();
            self.stage = match buf.first() {
                None => return Ok(Parsed::Incomplete { needed: 1 }),
                Some(b'*') => Stage::Count,
                Some(_) => Stage::Inline,
            };
        }
        let result = match self.stage {
            Stage::Inline => self.inline(buf, limits),
            _ => self.multibulk(buf, limits),
        };
        self.finish(result)
    }

    /// Finds the end of the line starting at `start` (its `\r\n`), resuming the search where the
    /// last call left it. Returns the line and the position after it.
    fn line<'b>(
        &mut self,
        buf: &'b [u8],
        start: usize,
    ) -> Result<Option<(&'b [u8], usize)>, ProtocolError> {
        let from = self.scanned.max(start).min(buf.len());
        match memchr(b'\r', &buf[from..]) {
            None => {
                self.scanned = buf.len();
                Ok(None)
            }
            Some(i) => {
                let cr = from + i;
                if cr + 1 >= buf.len() {
                    self.scanned = cr;
                    return Ok(None);
                }
                if buf[cr + 1] != b'\n' {
                    return Err(ProtocolError(
                        "header line is not terminated by CRLF".into(),
                    ));
                }
                self.scanned = 0;
                Ok(Some((&buf[start..cr], cr + 2)))
            }
        }
    }

    fn multibulk(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        loop {
            match self.stage {
                Stage::Start | Stage::Inline => unreachable!("a multibulk request is under way"),
                Stage::Count => {
                    let Some((count, next)) = self.line(buf, 1)? else {
                        if buf.len() > MAX_HEADER_LINE {
                            return Err(ProtocolError("too big mbulk count string".into()));
                        }
                        return Ok(Parsed::Incomplete {
                            needed: buf.len() + 1,
                        });
                    };
                    let count = parse_header_int(count)
                        .ok_or(ProtocolError("invalid multibulk length".into()))?;
                    if count <= 0 {
                        return Ok(Parsed::Empty { consumed: next });
                    }
                    if count as u64 > limits.max_args as u64 {
                        return Err(limits.too_many_args());
                    }
                    self.pos = next;
                    self.stage = Stage::Args {
                        left: count as usize,
                    };
                }
                Stage::Args { left: 0 } => return Ok(Parsed::Request { consumed: self.pos }),
                Stage::Args { left } => {
                    let pos = self.pos;
                    match buf.get(pos) {
                        None => return Ok(Parsed::Incomplete { needed: pos + 1 }),
                        Some(b'$') => {}
                        Some(&other) => {
                            return Err(ProtocolError(
                                format!("expected '$', got '{}'", other as char).into(),
                            ))
                        }
                    }
                    let Some((len, next)) = self.line(buf, pos + 1)? else {
                        if buf.len() - pos > MAX_HEADER_LINE {
                            return Err(ProtocolError("too big bulk count string".into()));
                        }
                        return Ok(Parsed::Incomplete {
                            needed: buf.len() + 1,
                        });
                    };
                    let len =
                        parse_header_int(len).ok_or(ProtocolError("invalid bulk length".into()))?;
                    if len < 0 || len as u64 > limits.max_bulk as u64 {
                        return Err(limits.too_long_bulk());
                    }
                    self.pos = next;
                    self.stage = Stage::Bulk {
                        left,
                        len: len as usize,
                    };
                }
                Stage::Bulk { left, len } => {
                    let end = self.pos + len;
                    if buf.len() < end + 2 {
                        return Ok(Parsed::Incomplete { needed: end + 2 });
                    }
                    if &buf[end..end + 2] != b"\r\n" {
                        return Err(ProtocolError(
                            "bulk string is not terminated by CRLF".into(),
                        ));
                    }
                    self.args.push(self.pos..end);
                    self.pos = end + 2;
                    self.stage = Stage::Args { left: left - 1 };
                }
            }
        }
    }

    fn inline(&mut self, buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
        let from = self.scanned.min(buf.len());
        let Some(nl) = memchr(b'\n', &buf[from..]).map(|i| from + i) else {
            self.scanned = buf.len();
            if buf.len() > limits.max_inline {
                return Err(ProtocolError("too big inline request".into()));
            }
            return Ok(Parsed::Incomplete {
                needed: buf.len() + 1,
            });
        };
        if nl > limits.max_inline {
            return Err(ProtocolError("too big inline request".into()));
        }
        let mut line = &buf[..nl];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        let args =
            split_inline(line).ok_or(ProtocolError("unbalanced quotes in request".into()))?;
        if args.len() > limits.max_args {
            return Err(limits.too_many_args());
        }
        if args.is_empty() {
            return Ok(Parsed::Empty { consumed: nl + 1 });
        }
        Ok(Parsed::Inline {
            consumed: nl + 1,
            args,
        })
    }
}

/// Finds the `\r\n` ending a header line that starts at `start`; returns the line's digits and the
/// position after the line.
fn header_line(buf: &[u8], start: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = &buf[start.min(buf.len())..];
    match memchr(b'\r', rest) {
        None => Ok(None),
        Some(i) => {
            if i + 1 >= rest.len() {
                return Ok(None);
            }
            if rest[i + 1] != b'\n' {
                return Err(ProtocolError(
                    "header line is not terminated by CRLF".into(),
                ));
            }
            Ok(Some((&rest[..i], start + i + 2)))
        }
    }
}

fn parse_header_int(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let (neg, digits) = match digits[0] {
        b'-' => (true, &digits[1..]),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulate with the final sign so that i64::MIN, whose magnitude has no positive i64, parses.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = (d - b'0') as i64;
        n = n.checked_mul(10)?;
        n = if neg {
            n.checked_sub(digit)?
        } else {
            n.checked_add(digit)?
        };
    }
    Some(n)
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Splits an inline request line into arguments the way redis-cli users expect: blanks separate
/// arguments, double quotes allow C-style escapes (`\n`, `\xHH`, ...), single quotes only `\'`.
/// Returns None for unbalanced quotes.
pub fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            if in_double {
                let c = *line.get(i)?;
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        current.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    current.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                } else if c == b'"' {
                    // A closing quote must be followed by a blank or the end of the line.
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    current.push(c);
                    i += 1;
                }
            } else if in_single {
                let c = *line.get(i)?;
                if c == b'\\' && i + 1 < line.len() && line[i + 1] == b'\'' {
                    current.push(b'\'');
                    i += 2;
                } else if c == b'\'' {
                    if i + 1 < line.len() && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    current.push(c);
                    i += 1;
                }
            } else {
                match line.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(&c) => current.push(c),
                }
                i += 1;
            }
        }
        args.push(current);
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Appends the decimal form of `n`.
pub fn write_decimal(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let negative = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[i..]);
}

fn write_header(out: &mut Vec<u8>, prefix: u8, n: i64) {
    out.push(prefix);
    write_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string.
pub fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    write_header(out, b'$', bytes.len() as i64);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends an integer reply.
pub fn write_int(out: &mut Vec<u8>, n: i64) {
    write_header(out, b':', n);
}

/// Appends an array header.
pub fn write_array_header(out: &mut Vec<u8>, len: usize) {
    write_header(out, b'*', len as i64);
}

/// Appends an error reply. Newlines in the message would break framing, so they become spaces.
pub fn write_error(out: &mut Vec<u8>, error: &ErrorReply) {
    out.push(b'-');
    out.extend_from_slice(error.kind.as_str().as_bytes());
    if !error.message.is_empty() {
        out.push(b' ');
        out.extend(
            error
                .message
                .bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    }
    out.extend_from_slice(b"\r\n");
}

/// The reply dialect a connection speaks: RESP2 unless it said `HELLO 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// Appends a reply in RESP2.
pub fn write_reply(out: &mut Vec<u8>, reply: &Reply<'_>) {
    write_reply_as(out, reply, Protocol::Resp2);
}

/// Appends a reply in the given dialect. RESP3 differs for what cads sends only in nulls (`_`) and
/// maps (`%`).
pub fn write_reply_as(out: &mut Vec<u8>, reply: &Reply<'_>, protocol: Protocol) {
    let unbounded = write_bounded(out, reply, protocol, usize::MAX);
    debug_assert!(unbounded.is_ok());
}

/// A reply that would not fit in the room it was given (see [`write_reply_within`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTooLarge;

/// Appends a reply as [`write_reply_as`] does, unless `out` would grow past `max_len` bytes: then
/// `out` is left as it was and the reply is refused. The check is made as the reply is written,
/// before each value is copied, so a reply that repeats a large value many times (`MGET k k k ...`
/// of an 8 MB `k`) never takes more than `max_len`, however large it would have been.
pub fn write_reply_within(
    out: &mut Vec<u8>,
    reply: &Reply<'_>,
    protocol: Protocol,
    max_len: usize,
) -> Result<(), ReplyTooLarge> {
    let start = out.len();
    let written = write_bounded(out, reply, protocol, max_len);
    if written.is_err() {
        out.truncate(start);
    }
    written
}

/// Bytes a bulk string of `len` bytes takes with its header and trailer (`$<len>\r\n...\r\n`).
fn bulk_size(len: usize) -> usize {
    let digits = len.checked_ilog10().map_or(1, |d| d as usize + 1);
    len.saturating_add(digits + 5)
}

fn write_bounded(
    out: &mut Vec<u8>,
    reply: &Reply<'_>,
    protocol: Protocol,
    max_len: usize,
) -> Result<(), ReplyTooLarge> {
    match reply {
        Reply::Status(s) => {
            out.push(b'+');
            out.extend_from_slice(s.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Error(e) => write_error(out, e),
        Reply::Int(n) => write_int(out, *n),
        Reply::Bulk(b) => {
            // Checked before the copy: the point is never to make the bytes in the first place.
            if out.len().saturating_add(bulk_size(b.len())) > max_len {
                return Err(ReplyTooLarge);
            }
            write_bulk(out, b);
        }
        Reply::Nil => match protocol {
            Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
            Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
        },
        Reply::Array(items) => {
            write_array_header(out, items.len());
            for item in items {
                write_bounded(out, item, protocol, max_len)?;
            }
        }
        Reply::Map(pairs) => {
            match protocol {
                Protocol::Resp2 => write_array_header(out, pairs.len() * 2),
                Protocol::Resp3 => write_header(out, b'%', pairs.len() as i64),
            }
            for (field, value) in pairs {
                write_bounded(out, field, protocol, max_len)?;
                write_bounded(out, value, protocol, max_len)?;
            }
        }
    }
    if out.len() > max_len {
        return Err(ReplyTooLarge);
    }
    Ok(())
}

/// Appends a request (an array of bulk strings), as a client sends it.
pub fn write_request<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    write_array_header(out, args.len());
    for arg in args {
        write_bulk(out, arg.as_ref());
    }
}

// ---------------------------------------------------------------------------------------------
// Reading replies (client side)

/// Deepest array nesting accepted in a reply; cads replies nest at most three levels.
const MAX_REPLY_DEPTH: usize = 64;

/// Parses one reply from the front of `buf`: `Ok(None)` when more bytes are needed.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply<'static>, usize)>, ProtocolError> {
    match walk_reply(buf, 0, 0, true)? {
        Walked::Whole(reply, end) => Ok(Some((reply.expect("built when asked"), end))),
        Walked::Short { .. } => Ok(None),
    }
}

/// How much of `buf` the reply at its front takes, found without building the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyExtent {
    /// The reply is whole and ends here.
    Whole(usize),
    /// The reply is cut short: `buf` must grow to at least `needs` bytes before it can be whole.
    Short { needs: usize },
}

/// Where the reply at the front of `buf` ends. A client reading a long reply in many pieces asks
/// this after each piece rather than [`parse_reply`], which would build the items already there
/// each time only to drop them: the reply is then built once, when it is whole.
pub fn reply_extent(buf: &[u8]) -> Result<ReplyExtent, ProtocolError> {
    Ok(match walk_reply(buf, 0, 0, false)? {
        Walked::Whole(_, end) => ReplyExtent::Whole(end),
        Walked::Short { needs } => ReplyExtent::Short { needs },
    })
}

/// An error reply from its line: the error's word, then its message.
fn error_reply(line: &str) -> Reply<'static> {
    let (word, message) = match line.split_once(' ') {
        Some((w, m)) => (w, m.to_owned()),
        None => (line, String::new()),
    };
    Reply::Error(ErrorReply::new(ErrorKind::from_word(word), message))
}

/// A reply walked over: whole (built if asked), or cut short.
enum Walked {
    Whole(Option<Reply<'static>>, usize),
    Short { needs: usize },
}

/// Walks the reply at `start`, building it if `build`.
fn walk_reply(
    buf: &[u8],
    start: usize,
    depth: usize,
    build: bool,
) -> Result<Walked, ProtocolError> {
    if depth > MAX_REPLY_DEPTH {
        return Err(ProtocolError("reply nested too deeply".into()));
    }
    let Some(&prefix) = buf.get(start) else {
        return Ok(Walked::Short { needs: start + 1 });
    };
    let Some((line, next)) = header_line(buf, start + 1)? else {
        return Ok(Walked::Short {
            needs: buf.len() + 1,
        });
    };
    let int = || parse_header_int(line).ok_or(ProtocolError("invalid integer in reply".into()));
    let text =
        || std::str::from_utf8(line).map_err(|_| ProtocolError("reply line is not UTF-8".into()));
    match prefix {
        b'+' => {
            let status = text()?;
            Ok(Walked::Whole(
                build.then(|| Reply::Status(Cow::Owned(status.to_owned()))),
                next,
            ))
        }
        b'-' => {
            let text = text()?;
            Ok(Walked::Whole(build.then(|| error_reply(text)), next))
        }
        b':' => {
            let n = int()?;
            Ok(Walked::Whole(build.then_some(Reply::Int(n)), next))
        }
        b'_' => Ok(Walked::Whole(build.then_some(Reply::Nil), next)),
        b'$' | b'=' => {
            let len = int()?;
            if len < 0 {
                return Ok(Walked::Whole(build.then_some(Reply::Nil), next));
            }
            let end = next.saturating_add(len as usize);
            if buf.len() < end.saturating_add(2) {
                return Ok(Walked::Short {
                    needs: end.saturating_add(2),
                });
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk reply is not terminated by CRLF".into()));
            }
            Ok(Walked::Whole(
                build.then(|| Reply::Bulk(Cow::Owned(buf[next..end].to_vec()))),
                end + 2,
            ))
        }
        b'*' | b'~' | b'%' => {
            let len = int()?;
            if len < 0 {
                return Ok(Walked::Whole(build.then_some(Reply::Nil), next));
            }
            let count = if prefix == b'%' {
                len.saturating_mul(2)
            } else {
                len
            };
            let capacity = if build { (count as usize).min(4096) } else { 0 };
            let mut items = Vec::with_capacity(capacity);
            let mut pos = next;
            for _ in 0..count {
                match walk_reply(buf, pos, depth + 1, build)? {
                    Walked::Short { needs } => return Ok(Walked::Short { needs }),
                    Walked::Whole(item, after) => {
                        items.extend(item);
                        pos = after;
                    }
                }
            }
            if !build {
                return Ok(Walked::Whole(None, pos));
            }
            let reply = if prefix == b'%' {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            } else {
                Reply::Array(items)
            };
            Ok(Walked::Whole(Some(reply), pos))
        }
        other => Err(ProtocolError(
            format!("unexpected reply type byte '{}'", other as char).into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(buf: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let limits = Limits::default();
        let mut ranges = Vec::new();
        let mut pos = 0;
        let mut out = Vec::new();
        loop {
            match parse_request(&buf[pos..], &limits, &mut ranges).unwrap() {
                Parsed::Request { consumed } => {
                    out.push(
                        ranges
                            .iter()
                            .map(|r| buf[pos..][r.clone()].to_vec())
                            .collect(),
                    );
                    pos += consumed;
                }
                Parsed::Inline { consumed, args } => {
                    out.push(args);
                    pos += consumed;
                }
                Parsed::Empty { consumed } => pos += consumed,
                Parsed::Incomplete { .. } => return out,
            }
        }
    }

    #[test]
    fn multibulk_and_pipelining() {
        let reqs = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET");
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0], vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(reqs[1], vec![b"PING".to_vec()]);
    }

    #[test]
    fn incomplete_reports_needed_bytes() {
        let limits = Limits::default();
        let mut ranges = Vec::new();
        let buf = b"*1\r\n$10\r\nabc";
        let parsed = parse_request(buf, &limits, &mut ranges).unwrap();
        assert_eq!(parsed, Parsed::Incomplete { needed: 9 + 10 + 2 });
    }

    #[test]
    fn inline_with_quotes() {
        let reqs = parse_all(b"set k \"a b\\x41\\n\" 'it\\'s'\r\nPING\n\r\n");
        assert_eq!(
            reqs,
            vec![
                vec![
                    b"set".to_vec(),
                    b"k".to_vec(),
                    b"a bA\n".to_vec(),
                    b"it's".to_vec()
                ],
                vec![b"PING".to_vec()]
            ]
        );
    }

    #[test]
    fn protocol_errors_match_redis_wording() {
        let limits = Limits {
            max_bulk: 10,
            max_args: 3,
            max_inline: 16,
            unauthenticated: false,
        };
        let mut ranges = Vec::new();
        let err = |buf: &[u8]| {
            let mut r = Vec::new();
            parse_request(buf, &limits, &mut r).unwrap_err().to_string()
        };
        assert_eq!(err(b"*x\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(err(b"*4\r\n"), "Protocol error: invalid multibulk length");
        assert_eq!(
            err(b"*1\r\n+a\r\n"),
            "Protocol error: expected '$', got '+'"
        );
        assert_eq!(err(b"*1\r\n$11\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(err(b"*1\r\n$-3\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            err(b"aaaaaaaaaaaaaaaaaaaaaaa"),
            "Protocol error: too big inline request"
        );
        assert_eq!(
            err(b"set \"a\n"),
            "Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            err(b"*1\r\n$1\r\nab\r\n"),
            "Protocol error: bulk string is not terminated by CRLF"
        );
        assert!(parse_request(b"*0\r\n", &limits, &mut ranges).is_ok());
    }

    /// Feeds `bytes` to one parser as a connection would receive them, `piece` bytes per read,
    /// running every request as soon as it is complete; returns the requests and the error, if any.
    fn parse_delivered(
        bytes: &[u8],
        piece: usize,
        limits: &Limits,
    ) -> (Vec<Vec<Vec<u8>>>, Option<String>) {
        let mut parser = RequestParser::default();
        let mut requests = Vec::new();
        let (mut start, mut received) = (0, 0);
        while received < bytes.len() {
            received = (received + piece).min(bytes.len());
            loop {
                let held = &bytes[start..received];
                match parser.parse(held, limits) {
                    Ok(Parsed::Request { consumed }) => {
                        requests.push(
                            parser
                                .args()
                                .iter()
                                .map(|r| held[r.clone()].to_vec())
                                .collect(),
                        );
                        start += consumed;
                    }
                    Ok(Parsed::Inline { consumed, args }) => {
                        requests.push(args);
                        start += consumed;
                    }
                    Ok(Parsed::Empty { consumed }) => start += consumed,
                    Ok(Parsed::Incomplete { .. }) => break,
                    Err(e) => return (requests, Some(e.to_string())),
                }
                if start == received {
                    break;
                }
            }
        }
        (requests, None)
    }

    #[test]
    fn a_request_split_at_any_byte_parses_the_same() {
        let mut bytes = Vec::new();
        write_request(&mut bytes, &[&b"SET"[..], b"key", &[b'v'; 300]]);
        bytes.extend_from_slice(b"PING\r\n*0\r\n\r\nECHO \"a b\"\r\n");
        let many: Vec<Vec<u8>> = (0..50).map(|i| format!("arg{i}").into_bytes()).collect();
        write_request(&mut bytes, &many);
        let limits = Limits::default();
        let (whole, error) = parse_delivered(&bytes, bytes.len(), &limits);
        assert_eq!(whole.len(), 4);
        assert_eq!(error, None);
        for piece in [1, 2, 3, 7, 64, 500] {
            assert_eq!(
                parse_delivered(&bytes, piece, &limits),
                (whole.clone(), None),
                "{piece}-byte reads"
            );
        }
        // An error is found the same way, after the same requests.
        bytes.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$x\r\n");
        for piece in [1, 5, bytes.len()] {
            let (requests, error) = parse_delivered(&bytes, piece, &limits);
            assert_eq!(requests, whole);
            assert_eq!(
                error.as_deref(),
                Some("Protocol error: invalid bulk length")
            );
        }
    }

    /// The parser does not go back over what it has read: a header it accepted is not read again
    /// when the rest of the request arrives (here the accepted bytes are changed behind its back,
    /// which a parser starting over would refuse).
    #[test]
    fn the_parser_resumes_where_it_stopped() {
        let limits = Limits::default();
        let mut parser = RequestParser::default();
        let mut bytes = b"*2\r\n$3\r\nGET\r\n$5\r\nva".to_vec();
        assert_eq!(
            parser.parse(&bytes, &limits),
            Ok(Parsed::Incomplete {
                needed: bytes.len() + 3 + 2
            })
        );
        assert!(parser.in_request());
        bytes[0] = b'!';
        bytes.extend_from_slice(b"lue\r\n");
        assert_eq!(
            parser.parse(&bytes, &limits),
            Ok(Parsed::Request {
                consumed: bytes.len()
            })
        );
        assert_eq!(parser.args().len(), 2);
        assert!(!parser.in_request());
        // The next request starts afresh.
        assert_eq!(
            parser.parse(b"PING\r\n", &limits),
            Ok(Parsed::Inline {
                consumed: 6,
                args: vec![b"PING".to_vec()]
            })
        );
    }

    #[test]
    fn unauthenticated_limits_are_redis_s() {
        let limits = Limits::unauthenticated();
        let err = |buf: &[u8]| {
            parse_request(buf, &limits, &mut Vec::new())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(b"*11\r\n"),
            "Protocol error: unauthenticated multibulk length"
        );
        assert_eq!(
            err(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"),
            "Protocol error: unauthenticated bulk length"
        );
        let mut ok = Vec::new();
        write_request(&mut ok, &[&b"AUTH"[..], &[b'p'; 16384]]);
        assert!(matches!(
            parse_request(&ok, &limits, &mut Vec::new()),
            Ok(Parsed::Request { .. })
        ));
    }

    #[test]
    fn replies_are_bounded_as_they_are_written() {
        let value = vec![b'v'; 1000];
        let amplified = Reply::Array((0..100).map(|_| Reply::bulk(&value)).collect());
        let mut out = b"+earlier\r\n".to_vec();
        assert_eq!(
            write_reply_within(&mut out, &amplified, Protocol::Resp2, 10_000),
            Err(ReplyTooLarge)
        );
        assert_eq!(out, b"+earlier\r\n", "nothing of a refused reply is left");
        // Within the room, the same bytes as an unbounded write.
        let mut bounded = Vec::new();
        write_reply_within(&mut bounded, &amplified, Protocol::Resp3, 200_000).unwrap();
        let mut unbounded = Vec::new();
        write_reply_as(&mut unbounded, &amplified, Protocol::Resp3);
        assert_eq!(bounded, unbounded);
        assert!(
            write_reply_within(&mut Vec::new(), &amplified, Protocol::Resp2, bounded.len()).is_ok()
        );
        assert!(write_reply_within(
            &mut Vec::new(),
            &amplified,
            Protocol::Resp2,
            bounded.len() - 1
        )
        .is_err());
    }

    #[test]
    fn replies_round_trip() {
        let reply = Reply::Array(vec![
            Reply::OK,
            Reply::Int(-42),
            Reply::owned_bulk(b"hello\r\nworld".to_vec()),
            Reply::Nil,
            Reply::Error(ErrorReply::abort()),
            Reply::Array(vec![]),
            Reply::Map(vec![(Reply::status("a"), Reply::Int(1))]),
        ]);
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let mut buf = Vec::new();
            write_reply_as(&mut buf, &reply, protocol);
            let (parsed, used) = parse_reply(&buf).unwrap().unwrap();
            assert_eq!(used, buf.len());
            let expected = match (&reply, protocol) {
                // RESP2 has no maps: they travel as flat arrays.
                (Reply::Array(items), Protocol::Resp2) => {
                    let mut items = items.clone();
                    items[6] = Reply::Array(vec![Reply::status("a"), Reply::Int(1)]);
                    Reply::Array(items)
                }
                _ => reply.clone(),
            };
            assert_eq!(parsed, expected);
            assert_eq!(parsed.field("nothing"), None);
            assert_eq!(reply_extent(&buf), Ok(ReplyExtent::Whole(buf.len())));
            for cut in 0..buf.len() {
                assert_eq!(parse_reply(&buf[..cut]).unwrap(), None, "cut at {cut}");
                // What a short reply still needs is more than it has and no more than it takes.
                match reply_extent(&buf[..cut]) {
                    Ok(ReplyExtent::Short { needs }) => {
                        assert!(cut < needs && needs <= buf.len(), "cut at {cut}: {needs}")
                    }
                    other => panic!("cut at {cut}: {other:?}"),
                }
            }
        }
        let mut nil3 = Vec::new();
        write_reply_as(&mut nil3, &Reply::Nil, Protocol::Resp3);
        assert_eq!(nil3, b"_\r\n");
    }

    #[test]
    fn decimal_extremes() {
        for n in [0, 1, -1, 9, 10, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
            let mut reply = Vec::new();
            write_int(&mut reply, n);
            assert_eq!(parse_reply(&reply).unwrap().unwrap().0, Reply::Int(n));
        }
    }
}
