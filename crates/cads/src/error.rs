//! The framework's errors.

use cads_client::ClientError;
use cads_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session was aborted by a lease conflict (or the data store reported a serialization
    /// conflict) and the retries allowed ran out. Nothing it wrote is visible.
    #[error("session aborted")]
    Aborted,
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
    /// The application's own code in a session failed.
    #[error("{0}")]
    App(String),
}

impl Error {
    /// Whether running the session again may succeed (a conflict, not a failure).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Aborted => true,
            Error::Store(e) => e.is_retryable(),
            _ => false,
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Aborted => Error::Aborted,
            other => Error::Cache(other),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
