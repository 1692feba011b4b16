//! cads-store: the data-store side of cads (DESIGN.md §6).
//!
//! A data store has two faces, and every backend has both:
//!
//! - **Documents** ([`DocumentStore`]): collections of JSON documents keyed by id; get, insert, put,
//!   delete, bulk load, range scans on the id or an indexed field, and [`Changes`], MongoDB-style
//!   change operators (`$set`, `$unset`, `$inc`, `$addToSet`, `$push`, `$pull`, 000 Table 3.2)
//!   applied atomically per document. Each operator is known to be idempotent or not, and
//!   [`Changes::idempotent_equivalent`] turns non-idempotent changes into idempotent ones, as
//!   write-back needs (000 §3.2). Design 1 of write-back and the YCSB and BG benchmarks use this face.
//! - **SQL** ([`SqlStore`]): transactions of statements with `?` parameters in every dialect, at a
//!   chosen isolation level, with commit and rollback. Design 2 of write-back and TPC-C use this face.
//!
//! Backends ([`open`] by URL): SQLite (bundled, the embedded default: `sqlite:PATH`), PostgreSQL
//! (`postgres://user:pass@host:port/db`) and MySQL or MariaDB (`mysql://user:pass@host:port/db`).
//! Documents are rows of a table named after the collection: `id`, `doc` (the JSON text), and one
//! indexed column per indexed field. Every backend passes the same conformance suite
//! (`tests/conformance.rs`).
//!
//! The API is synchronous: callers are threads. Every call is bounded by the store's timeout
//! ([`StoreOptions::timeout`]): waiting for a pooled connection, connecting, a statement, a lock wait.
//! A store that is down or stops answering gives a typed error ([`StoreError::Unavailable`],
//! [`StoreError::Timeout`]) within about that time, never a hang.
//!
//! [`FaultyStore`] wraps any store to make it fail, hang or refuse writes on demand, and counts the
//! calls it receives.
//!
//! How each backend makes a document update atomic and bounds its waits:
//!
//! | backend | atomic update | bounds |
//! | --- | --- | --- |
//! | SQLite | `BEGIN IMMEDIATE`, read, apply, write, `COMMIT`, under an in-process writer lock per file (WAL: readers never wait) | writer lock and pool waits, `busy_timeout`, statements interrupted by a progress handler |
//! | PostgreSQL | `BEGIN`, `SELECT .. FOR UPDATE`, apply, `UPDATE`, `COMMIT` | `lock_timeout`, `statement_timeout`, connect timeout, and a client-side deadline per call |
//! | MySQL/MariaDB | `START TRANSACTION`, `SELECT .. FOR UPDATE`, apply, `UPDATE`, `COMMIT` | `innodb_lock_wait_timeout`, `max_statement_time` (`max_execution_time` on MySQL), socket read/write/connect timeouts |
//!
//! A thread that holds an open [`SqlTransaction`] on SQLite holds the database's only writer slot:
//! a write through the same store from that thread waits for itself and fails with
//! [`StoreError::Conflict`] (as any writer does that waited the whole timeout for the slot). Do the
//! writes in the transaction. Read-only transactions ([`SqlStore::begin_read`]) take no writer slot.
//!
//! Cargo features `postgres` and `mysql` (both on by default) compile those backends; SQLite is
//! always there.
//!
//! ```
//! use cads_store::{open, Changes, DocumentStore, IndexedField, StoreOptions};
//! use serde_json::json;
//!
//! let store = open("sqlite::memory:", &StoreOptions::default())?;
//! store.create_collection("users", &[IndexedField::int("age")])?;
//! let doc = json!({"name": "Alice", "age": 30, "friends": []});
//! store.insert("users", "alice", doc.as_object().unwrap())?;
//! let changes = Changes::from_json(&json!({"$inc": {"age": 1}, "$addToSet": {"friends": "Bob"}}))?;
//! assert!(!changes.is_idempotent()); // $inc is not
//! let after = store.update("users", "alice", &changes)?.unwrap();
//! assert_eq!(after["age"], 31);
//! # Ok::<(), cads_store::StoreError>(())
//! ```

#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

mod backend;
mod document;
mod error;
mod fault;
#[cfg(feature = "mysql")]
mod mysql;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
pub mod relay;
mod sql;
mod sqlite;

pub use cads_doc::{
    limits, parse_json, Change, Changes, Document, DocumentText, LimitExceeded, Op,
};
pub use document::{
    validate_collection_name, validate_id, DocOp, DocWrite, DocumentStore, FieldKind, IndexedField,
    CATALOG_TABLE, MAX_COLLECTION_NAME_LEN, MAX_ID_LEN, MAX_INDEXED_TEXT_LEN, RESERVED_PREFIX,
};
pub use error::{Result, StoreError};
pub use fault::{CallCounts, FaultMode, Faults, FaultyStore};
pub use relay::Relay;
pub use sql::{
    rewrite_placeholders, ColumnIndex, Dialect, Failed, FromSqlValue, Isolation, Row, SqlStore,
    SqlTransaction, SqlValue,
};

/// A data store: both faces, and the timeout that bounds each call. Every backend is one, and so is
/// [`FaultyStore`].
pub trait DataStore: DocumentStore + SqlStore {
    /// The store's timeout ([`StoreOptions::timeout`]).
    fn timeout(&self) -> Duration;

    /// Ends, on the server, the sessions of connections this store gave up on (a call timed out,
    /// or the connection broke), and returns once they are gone: a transaction whose commit timed
    /// out has then either committed or never will. A server that was frozen with a COMMIT in
    /// its socket buffer otherwise applies it whenever it runs again, after any cache refilled
    /// from the data store meanwhile. An error while the server cannot be reached or a session
    /// is still ending (the sessions are kept, to be ended by the next call). SQLite, in the
    /// process, has none: `Ok` at once.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// How to open a data store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// The most connections open at once (SQLite `:memory:` always uses one). Default 16.
    pub pool_size: usize,
    /// The bound on each wait of a call: connecting, waiting for a pooled connection or SQLite's
    /// writer lock, a statement, a lock wait. Default 5 s.
    pub timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 16,
            timeout: Duration::from_secs(5),
        }
    }
}

impl StoreOptions {
    /// These options with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> StoreOptions {
        self.timeout = timeout;
        self
    }

    /// These options with another pool size.
    pub fn with_pool_size(mut self, pool_size: usize) -> StoreOptions {
        self.pool_size = pool_size;
        self
    }
}

/// Opens a data store by URL, connecting once to check that it is reachable
/// ([`StoreError::Unavailable`] if not).
///
/// - `sqlite:PATH` (also `sqlite://PATH`): a database file, created if missing; `sqlite::memory:` a
///   private in-memory database (one connection). `?synchronous=off|normal|full|extra` sets how
///   commits are synced (`PRAGMA synchronous`; `normal` by default, `full` to sync every commit).
///   A path with a `?` in it, or a `file:` URI with SQLite's own parameters, goes as
///   `sqlite:file:PATH?...`, which SQLite reads as it is (no `synchronous` there).
/// - `postgres://user:password@host:port/database` (also `postgresql://`), without TLS.
/// - `mysql://user:password@host:port/database` (also `mariadb://`), without TLS, over TCP unless
///   `?prefer_socket=true` is added.
///
/// A bad or unknown URL is [`StoreError::Invalid`].
pub fn open(url: &str, options: &StoreOptions) -> Result<Arc<dyn DataStore>> {
    if options.timeout.is_zero() {
        return Err(StoreError::Invalid(
            "the store timeout must be positive".into(),
        ));
    }
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        let (engine, pool_size, writer) =
            sqlite::Sqlite::new(path, options.pool_size, options.timeout)?;
        let store = backend::SqlBacked::new(engine, pool_size, options.timeout, writer);
        store.check_reachable()?;
        return Ok(Arc::new(store));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let engine = postgres::Postgres::new(url, options.timeout)?;
            let store = backend::SqlBacked::new(engine, options.pool_size, options.timeout, None);
            store.check_reachable()?;
            return Ok(Arc::new(store));
        }
        #[cfg(not(feature = "postgres"))]
        return Err(StoreError::Invalid(
            "PostgreSQL support is not compiled in (feature \"postgres\")".into(),
        ));
    }
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        #[cfg(feature = "mysql")]
        {
            let engine = mysql::MySql::new(url, options.timeout)?;
            let store = backend::SqlBacked::new(engine, options.pool_size, options.timeout, None);
            store.check_reachable()?;
            return Ok(Arc::new(store));
        }
        #[cfg(not(feature = "mysql"))]
        return Err(StoreError::Invalid(
            "MySQL support is not compiled in (feature \"mysql\")".into(),
        ));
    }
    let scheme = url.split(':').next().unwrap_or_default();
    Err(StoreError::Invalid(format!(
        "unknown data store URL scheme {scheme:?} (use sqlite:, postgres:// or mysql://)"
    )))
}
