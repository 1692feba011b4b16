//! The framework's errors.

use cads_client::ClientError;
use cads_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session was aborted by a lease conflict and the time allowed for retries
    /// ([`Config::give_up_after`](crate::Config::give_up_after)) ran out. Nothing it wrote is
    /// visible. `reason` says why, naming the contended key where it is known.
    #[error("session aborted: {reason}")]
    Aborted { reason: String },
    /// The data store failed: down, timed out, refused the write, a constraint failed. The session
    /// was rolled back and the cache left consistent.
    #[error("data store: {0}")]
    Store(#[from] StoreError),
    /// The cache failed in a way the policy cannot work around.
    #[error("cache: {0}")]
    Cache(ClientError),
    /// Write-back could not buffer the session's writes: the CMIs' pinned memory is full.
    /// [`Cads::run`](crate::Cads::run) re-runs such a session as write-through.
    #[error("no room to buffer the writes (pinned memory full)")]
    BufferFull,
    /// The data store is down or may lack buffered writes, and the cache cannot answer alone.
    /// Under TARDIS (000 ch. 4) a read that missed in failed mode (or, under TAR and DIS, in
    /// recovery mode) gets this instead of a value the data store might have stale (000
    /// Theorem 3); so does a write that cannot be buffered while the data store is down. Under
    /// write-back, a miss the data store cannot serve. Nothing was written; the same request
    /// succeeds once the data store is back (or the value is cached).
    #[error("data store unavailable: {reason}")]
    StoreUnavailable { reason: String },
    /// The application's own code in a session failed.
    #[error("{0}")]
    App(String),
}

impl From<cads_doc::DocError> for Error {
    /// A bad document or change is the data store's error, as if it had refused it.
    fn from(e: cads_doc::DocError) -> Error {
        Error::Store(e.into())
    }
}

impl Error {
    /// Whether running the session again may succeed (a conflict, not a failure).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Aborted { .. } => true,
            Error::Store(e) => e.is_retryable(),
            _ => false,
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Aborted { reason } => Error::Aborted { reason },
            // Gemini: run again by the newer configuration.
            ClientError::StaleConfiguration { .. } | ClientError::Fenced => Error::Aborted {
                reason: e.to_string(),
            },
            other => Error::Cache(other),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
