//! cads-protocol: the language a CMI and its clients share.
//!
//! - [`resp`]: RESP2 framing with hard limits (requests, replies, both directions).
//! - [`Command`]: the typed command set, parsed from and turned back into request arguments.
//! - [`Reply`] and [`ErrorReply`]: typed replies with stable error words.
//! - [`spec`]: the command table (arity, flags, key positions).
//! - [`fragment`]: the key-to-fragment function Gemini configurations are built on.
//! - [`unix_socket_path`]: where a CMI serves a Unix socket beside its TCP port.
//! - `fuzzing` (with the `fuzzing` feature): the parsers' checks for the fuzz targets.
//!
//! The crate does no I/O. `docs/PROTOCOL.md` is the reference for the lease and session commands.

pub mod command;
pub mod fragment;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod reply;
pub mod resp;
pub mod spec;

pub use command::{
    expire_ms, parse_i64, Args, ClientAttr, ClientFilter, ClientSub, ClientType, Command,
    CommandSub, ConfigSub, ExpireCondition, FlushScope, GetExExpiry, MarkOp, SessionId,
    SetCondition, SetExpiry, TimeUnit,
};
pub use reply::{printable_key, ErrorKind, ErrorReply, Reply};
pub use resp::{Limits, Parsed, Protocol, ProtocolError};

/// The Unix socket a CMI listening on TCP port `port` also serves in `dir` (`cads server
/// --unixsocket-dir DIR`), where a client on the same machine finds it.
pub fn unix_socket_path(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    dir.join(format!("cads-{port}.sock"))
}
