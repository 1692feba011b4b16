//! Replies: what a CMI answers, typed, shared by the server (which encodes them) and the client
//! (which decodes them).

use std::borrow::Cow;
use std::fmt;

/// The first word of an error reply. It is stable: clients match on it, so a kind, once published
/// in `docs/PROTOCOL.md`, keeps its spelling.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Generic error, as Redis uses it (bad arguments, unknown command, protocol errors).
    Err,
    /// The session was aborted (wounded, expired, or it asked for a conflicting lease); roll back and
    /// retry the whole session.
    Abort,
    /// Back off and retry the same command: another session holds a lease that blocks this one.
    Retry,
    /// The value does not fit: memory or the pinned-memory cap is full of entries that cannot be evicted.
    NotStored,
    /// The command belongs to another policy mode than the one this CMI was started in.
    NotAvailable,
    /// A plain (lease-unaware) write touched a key that a session holds a lease on.
    Leased,
    /// Authentication is required.
    NoAuth,
    /// AUTH failed.
    WrongPass,
    /// HELLO asked for a protocol version the server does not speak.
    NoProto,
    /// Gemini: the CMI's lease from the coordinator has run out (or was not granted since it
    /// started), so it serves no key; ask the coordinator's configuration where to go.
    Fenced,
    /// Gemini: the session routes by an older configuration than the CMI knows; the message
    /// starts with the newer id. Fetch the configuration and run the session again.
    StaleConfig,
    /// Any other first word, kept as received.
    Other(Box<str>),
}

impl ErrorKind {
    pub fn as_str(&self) -> &str {
        match self {
            ErrorKind::Err => "ERR",
            ErrorKind::Abort => "ABORT",
            ErrorKind::Retry => "RETRY",
            ErrorKind::NotStored => "NOTSTORED",
            ErrorKind::NotAvailable => "NOTAVAILABLE",
            ErrorKind::Leased => "LEASED",
            ErrorKind::NoAuth => "NOAUTH",
            ErrorKind::WrongPass => "WRONGPASS",
            ErrorKind::NoProto => "NOPROTO",
            ErrorKind::Fenced => "FENCED",
            ErrorKind::StaleConfig => "STALECONFIG",
            ErrorKind::Other(s) => s,
        }
    }

    pub fn from_word(word: &str) -> ErrorKind {
        match word {
            "ERR" => ErrorKind::Err,
            "ABORT" => ErrorKind::Abort,
            "RETRY" => ErrorKind::Retry,
            "NOTSTORED" => ErrorKind::NotStored,
            "NOTAVAILABLE" => ErrorKind::NotAvailable,
            "LEASED" => ErrorKind::Leased,
            "NOAUTH" => ErrorKind::NoAuth,
            "WRONGPASS" => ErrorKind::WrongPass,
            "NOPROTO" => ErrorKind::NoProto,
            "FENCED" => ErrorKind::Fenced,
            "STALECONFIG" => ErrorKind::StaleConfig,
            other => ErrorKind::Other(other.into()),
        }
    }
}

/// An error reply: `-<KIND> <message>\r\n` on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    pub kind: ErrorKind,
    pub message: Cow<'static, str>,
}

/// Keys in error messages and INFO are shown by their first this many bytes.
pub const KEY_SHOWN_BYTES: usize = 64;

/// A key as error messages and INFO show it: printable ASCII as is, every other byte (and the
/// characters INFO lines use as separators) as `\xNN`, at most [`KEY_SHOWN_BYTES`] bytes.
pub fn printable_key(key: &[u8]) -> String {
    let mut out = String::new();
    for &b in &key[..key.len().min(KEY_SHOWN_BYTES)] {
        match b {
            b'!'..=b'~' if !matches!(b, b',' | b'=' | b'\\' | b'"') => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if key.len() > KEY_SHOWN_BYTES {
        out.push_str("...");
    }
    out
}

/// What an ABORT reply's message starts with.
const ABORTED: &str = "session aborted";

impl ErrorReply {
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        ErrorReply {
            kind,
            message: message.into(),
        }
    }

    pub fn err(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Err, message)
    }

    pub fn syntax() -> Self {
        Self::err("syntax error")
    }

    pub fn not_integer() -> Self {
        Self::err("value is not an integer or out of range")
    }

    /// An expiry that is not positive, or whose deadline would pass i64 milliseconds.
    pub fn invalid_expire_time(command: &str) -> Self {
        Self::err(format!("invalid expire time in '{command}' command"))
    }

    pub fn wrong_arity(command: &str) -> Self {
        Self::err(format!("wrong number of arguments for '{command}' command"))
    }

    pub fn abort() -> Self {
        Self::new(ErrorKind::Abort, ABORTED)
    }

    /// The ABORT of a session that asked for a lease on `key` it could not have.
    pub fn lease_conflict(key: &[u8]) -> Self {
        Self::new(
            ErrorKind::Abort,
            format!("{ABORTED}: lease conflict on key {}", printable_key(key)),
        )
    }

    /// Why an ABORT reply says the session ended, when it says (a lease conflict on a key).
    pub fn abort_reason(&self) -> Option<&str> {
        self.message.strip_prefix(ABORTED)?.strip_prefix(": ")
    }

    pub fn retry() -> Self {
        Self::new(
            ErrorKind::Retry,
            "key is leased by another session, back off and retry",
        )
    }

    pub fn not_stored() -> Self {
        Self::new(ErrorKind::NotStored, "out of memory for this value")
    }

    pub fn not_available(mode: &str) -> Self {
        Self::new(
            ErrorKind::NotAvailable,
            format!("command not available in {mode} mode"),
        )
    }

    pub fn leased() -> Self {
        Self::new(ErrorKind::Leased, "key is leased by a session")
    }

    pub fn fenced() -> Self {
        Self::new(
            ErrorKind::Fenced,
            "this instance holds no lease from the coordinator, so it serves no key",
        )
    }

    /// The refusal of a session routed by configuration `session`, older than `latest`.
    pub fn stale_config(latest: u64, session: u64) -> Self {
        Self::new(
            ErrorKind::StaleConfig,
            format!("{latest} is the latest configuration; the session routes by {session}"),
        )
    }

    /// The refusal of a session routed by configuration `session`, newer than the `latest` this
    /// CMI was told.
    pub fn behind_config(latest: u64, session: u64) -> Self {
        Self::new(
            ErrorKind::Fenced,
            format!(
                "this instance knows configuration {latest}, older than the session's {session}: \
                 the coordinator has not told it the newer one (it restarted, or was not reached)"
            ),
        )
    }

    /// The newer configuration id a STALECONFIG reply names.
    pub fn latest_config(&self) -> Option<u64> {
        if self.kind != ErrorKind::StaleConfig {
            return None;
        }
        self.message.split(' ').next()?.parse().ok()
    }
}

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(self.kind.as_str())
        } else {
            write!(f, "{} {}", self.kind.as_str(), self.message)
        }
    }
}

impl std::error::Error for ErrorReply {}

/// A RESP2 reply. Borrowed variants let the server answer a GET straight from the stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+text`
    Status(Cow<'a, str>),
    /// `-KIND message`
    Error(ErrorReply),
    /// `:n`
    Int(i64),
    /// `$len bytes`
    Bulk(Cow<'a, [u8]>),
    /// `$-1` (`_` in RESP3)
    Nil,
    /// `*n ...`
    Array(Vec<Reply<'a>>),
    /// Field and value pairs: `%n ...` in RESP3, a flat array of 2n elements in RESP2.
    Map(Vec<(Reply<'a>, Reply<'a>)>),
}

impl<'a> Reply<'a> {
    pub const OK: Reply<'static> = Reply::Status(Cow::Borrowed("OK"));

    pub fn status(s: &'static str) -> Reply<'static> {
        Reply::Status(Cow::Borrowed(s))
    }

    pub fn bulk(bytes: &'a [u8]) -> Reply<'a> {
        Reply::Bulk(Cow::Borrowed(bytes))
    }

    pub fn owned_bulk(bytes: Vec<u8>) -> Reply<'static> {
        Reply::Bulk(Cow::Owned(bytes))
    }

    pub fn bulk_or_nil(bytes: Option<&'a [u8]>) -> Reply<'a> {
        bytes.map_or(Reply::Nil, Reply::bulk)
    }

    /// The value of `field` in a map reply (or in a RESP2 flat array of pairs).
    pub fn field(&self, field: &str) -> Option<&Reply<'a>> {
        let matches = |k: &Reply<'_>| match k {
            Reply::Status(s) => s == field,
            Reply::Bulk(b) => b.as_ref() == field.as_bytes(),
            _ => false,
        };
        match self {
            Reply::Map(pairs) => pairs.iter().find(|(k, _)| matches(k)).map(|(_, v)| v),
            Reply::Array(items) => items
                .chunks_exact(2)
                .find(|pair| matches(&pair[0]))
                .map(|pair| &pair[1]),
            _ => None,
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Detaches the reply from whatever it borrowed.
    pub fn into_owned(self) -> Reply<'static> {
        match self {
            Reply::Status(s) => Reply::Status(Cow::Owned(s.into_owned())),
            Reply::Error(e) => Reply::Error(e),
            Reply::Int(n) => Reply::Int(n),
            Reply::Bulk(b) => Reply::Bulk(Cow::Owned(b.into_owned())),
            Reply::Nil => Reply::Nil,
            Reply::Array(items) => Reply::Array(items.into_iter().map(Reply::into_owned).collect()),
            Reply::Map(pairs) => Reply::Map(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect(),
            ),
        }
    }
}

impl From<ErrorReply> for Reply<'_> {
    fn from(e: ErrorReply) -> Self {
        Reply::Error(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_shown_without_separators_or_control_bytes() {
        assert_eq!(printable_key(b"user:7"), "user:7");
        assert_eq!(printable_key(b"a b\r\n,="), "a\\x20b\\x0d\\x0a\\x2c\\x3d");
        let long = vec![b'k'; KEY_SHOWN_BYTES + 1];
        assert_eq!(
            printable_key(&long),
            format!("{}...", "k".repeat(KEY_SHOWN_BYTES))
        );
    }

    #[test]
    fn an_abort_says_why_when_it_was_a_lease_conflict() {
        let conflict = ErrorReply::lease_conflict(b"hot key");
        assert_eq!(conflict.kind, ErrorKind::Abort);
        assert_eq!(
            conflict.abort_reason(),
            Some("lease conflict on key hot\\x20key")
        );
        assert_eq!(ErrorReply::abort().abort_reason(), None);
    }
}
