//! The client's errors, typed so that callers can tell what to do (DESIGN.md §4).

use cads_protocol::ErrorReply;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The session was aborted (wounded, expired, a conflicting lease, or RETRY for too long). Roll
    /// back the data-store transaction and run the session again. `reason` says why, naming the
    /// contended key where the CMI or the client knows it.
    #[error("session aborted: {reason}")]
    Aborted { reason: String },
    /// A CMI cannot be reached (connection refused, connect timeout).
    #[error("CMI {cmi} unavailable: {reason}")]
    Unavailable {
        cmi: usize,
        reason: String,
        /// The connection was refused: no process listens at the CMI's address.
        refused: bool,
    },
    /// The CMI has no room for the value (memory full of pinned, leased or pending data).
    #[error("not stored: the CMI is out of memory for this value")]
    NotStored,
    /// The CMI sent something that is not the reply expected.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connection to a CMI failed mid-way (reset, timeout).
    #[error("I/O error talking to CMI {cmi}: {source}")]
    Io {
        cmi: usize,
        #[source]
        source: std::io::Error,
    },
    /// The CMI wants a password this client does not have, or refused the one it sent
    /// (NOAUTH, WRONGPASS): give the client the CMIs' password (`ClientConfig::password`).
    #[error("CMI {cmi} refused this client: {reason} (the CMIs' password is missing or wrong)")]
    Auth { cmi: usize, reason: String },
    /// TLS with a CMI failed: it does not serve TLS (or serves it and the client does not ask
    /// for it), its certificate is not trusted, or it refused this client's certificate. The
    /// reason says which; fix the client's `TlsConfig`, or the CMI's.
    #[error("TLS with CMI {cmi} failed: {reason}")]
    Tls { cmi: usize, reason: String },
    /// TLS settings that cannot be used (a file that cannot be read, no certificate in it, a
    /// key that does not go with its certificate, a malformed server name).
    #[error("TLS settings: {0}")]
    TlsConfig(String),
    /// Gemini: a CMI knows configuration `latest`, newer than the one the session routes by
    /// ([`Session::set_configuration`](crate::Session::set_configuration)). Fetch the configuration
    /// and run the session again by its routes.
    #[error(
        "the cache's configuration changed (now {latest}): fetch it and run the session again"
    )]
    StaleConfiguration { latest: u64 },
    /// Gemini: the CMI serves no key, its lease from the coordinator having run out (or not
    /// granted since it started): the coordinator is moving its fragments, or has not taken it
    /// back yet. Fetch the configuration.
    #[error("the CMI holds no lease from the coordinator and serves no key")]
    Fenced,
    /// Any other error reply (bad arguments, NOTAVAILABLE, LEASED, ...).
    #[error("{0}")]
    Server(ErrorReply),
    /// A multi-CMI commit that failed on some CMIs after it succeeded on others. The failed CMIs
    /// drop the session's changes (its leases expire and unpinned keys are deleted), so reads stay
    /// consistent, but the session's cache changes did not all land. After
    /// `Session::write_and_commit`, a failed CMI may instead have committed without one of its
    /// writes, and `committed` is then possibly empty.
    #[error("commit failed on CMIs {failed:?} after succeeding on {committed:?}")]
    PartialCommit {
        committed: Vec<usize>,
        failed: Vec<usize>,
    },
}

impl ClientError {
    /// The same error, for the other commands that one failure also failed (an I/O error keeps
    /// its kind and message).
    pub(crate) fn duplicate(&self) -> ClientError {
        match self {
            ClientError::Aborted { reason } => ClientError::Aborted {
                reason: reason.clone(),
            },
            ClientError::Unavailable {
                cmi,
                reason,
                refused,
            } => ClientError::Unavailable {
                cmi: *cmi,
                reason: reason.clone(),
                refused: *refused,
            },
            ClientError::NotStored => ClientError::NotStored,
            ClientError::StaleConfiguration { latest } => {
                ClientError::StaleConfiguration { latest: *latest }
            }
            ClientError::Fenced => ClientError::Fenced,
            ClientError::Protocol(text) => ClientError::Protocol(text.clone()),
            ClientError::Io { cmi, source } => ClientError::Io {
                cmi: *cmi,
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            ClientError::Auth { cmi, reason } => ClientError::Auth {
                cmi: *cmi,
                reason: reason.clone(),
            },
            ClientError::Tls { cmi, reason } => ClientError::Tls {
                cmi: *cmi,
                reason: reason.clone(),
            },
            ClientError::TlsConfig(reason) => ClientError::TlsConfig(reason.clone()),
            ClientError::Server(reply) => ClientError::Server(reply.clone()),
            ClientError::PartialCommit { committed, failed } => ClientError::PartialCommit {
                committed: committed.clone(),
                failed: failed.clone(),
            },
        }
    }

    /// True when the cache cannot be used right now (the caller may fall back to the data store).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ClientError::Unavailable { .. } | ClientError::Io { .. }
        )
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
