//! The one error type of every data-store call.

use std::time::Duration;

/// What went wrong in a data-store call. Every backend maps its own errors onto these variants, so
/// callers decide what to do (retry, report the store down, fix their input) without knowing which
/// backend they talk to.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached: cannot connect, the connection was lost, the server is shutting
    /// down or down, authentication failed.
    #[error("data store unavailable: {0}")]
    Unavailable(String),
    /// The call did not finish within the store's timeout (a statement ran too long, no pooled
    /// connection became free, the server stopped answering). Whether a write that timed out took
    /// effect is unknown.
    #[error("data store call timed out after {0:?}")]
    Timeout(Duration),
    /// The store refuses writes (it is out of write capacity: read-only, disk full, or fault
    /// injection). Reads may still work.
    #[error("data store refuses writes")]
    WriteRefused,
    /// The transaction lost a race: serialization failure, deadlock, or a lock wait that ran out.
    /// Nothing of the transaction took effect; run it again.
    #[error("transaction conflict, retry: {0}")]
    Conflict(String),
    /// A unique or foreign-key (or not-null, check) constraint was violated, for example inserting a
    /// document whose id exists.
    #[error("constraint violated: {0}")]
    Constraint(String),
    /// Bad input: an operator applied to a field of the wrong type, a bad URL, a bad name, SQL the
    /// backend rejects, a parameter that does not fit its column.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A document or a change went past one of the bounds of [`limits`](crate::limits): too
    /// many path segments, too deep, too large. Nothing was changed.
    #[error("limit exceeded: {0}")]
    Limit(#[from] cads_doc::LimitExceeded),
    /// Anything else the backend reported.
    #[error("data store error: {0}")]
    Backend(String),
}

impl From<cads_doc::DocError> for StoreError {
    fn from(e: cads_doc::DocError) -> StoreError {
        match e {
            cads_doc::DocError::Invalid(m) => StoreError::Invalid(m),
            cads_doc::DocError::Limit(l) => StoreError::Limit(l),
        }
    }
}

impl StoreError {
    /// Whether running the same transaction again may succeed and is safe: true for
    /// [`StoreError::Conflict`] only, because a conflict guarantees that nothing took effect.
    ///
    /// [`StoreError::Timeout`] is deliberately not retryable: a write that timed out may have been
    /// applied (the server may commit after the client gave up), so retrying a non-idempotent change
    /// could apply it twice. Callers that know their call is idempotent (a read, a `$set`) may retry
    /// timeouts themselves; [`StoreError::is_transient`] tells them which errors are worth it.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Conflict(_))
    }

    /// Whether the error may go away by itself (the store is down, slow, overloaded or refusing
    /// writes for now), as opposed to errors caused by the input. Used by the framework to decide
    /// that the data store has failed (TARDIS's failed mode) rather than the request.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Timeout(_)
                | StoreError::WriteRefused
                | StoreError::Conflict(_)
        )
    }
}

/// The result of a data-store call.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
