//! SQLite, bundled: the embedded default.
//!
//! A pool of connections to one file in WAL mode, so readers never wait for the writer. Writes
//! (document writes and every SQL transaction, which begins with `BEGIN IMMEDIATE`) are serialized by
//! an in-process lock shared by every store opened on the same file, waited for at most the timeout;
//! so threads of one process never see SQLite's "database is locked". Another process writing the
//! same file is waited for by SQLite's busy handler for up to the timeout, after which the call fails
//! with [`StoreError::Conflict`] (nothing was written; retry). A statement running longer than the
//! timeout is interrupted ([`StoreError::Timeout`]). `:memory:` databases have one connection, since
//! each SQLite connection would see a database of its own.
//!
//! A commit is synced as `PRAGMA synchronous` says, `NORMAL` unless the URL asks otherwise
//! (`sqlite:PATH?synchronous=full`): in WAL mode `NORMAL` syncs only at checkpoints, so the last
//! commits before a power failure can be lost; `FULL` syncs the log at every commit, as a server
//! data store does by default.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{ffi, OpenFlags};

use crate::backend::{Conn, Engine};
use crate::error::{Result, StoreError};
use crate::pool::{ServerSide, TimedLock};
use crate::sql::{Dialect, Isolation, Row, SqlValue};

pub(crate) struct Sqlite {
    path: String,
    synchronous: Synchronous,
    timeout: Duration,
}

/// When SQLite syncs the database to disk (`PRAGMA synchronous`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Synchronous {
    Off,
    Normal,
    Full,
    Extra,
}

impl Synchronous {
    fn parse(value: &str) -> Result<Synchronous> {
        match value.to_ascii_lowercase().as_str() {
            "off" => Ok(Synchronous::Off),
            "normal" => Ok(Synchronous::Normal),
            "full" => Ok(Synchronous::Full),
            "extra" => Ok(Synchronous::Extra),
            _ => Err(StoreError::Invalid(format!(
                "sqlite: synchronous={value:?} (use off, normal, full or extra)"
            ))),
        }
    }

    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
            Synchronous::Extra => "EXTRA",
        }
    }
}

/// Splits `PATH?synchronous=...` into the path and its settings. A `file:` URI is SQLite's own,
/// query and all.
fn parse_location(location: &str) -> Result<(&str, Synchronous)> {
    let mut synchronous = Synchronous::Normal;
    if location.starts_with("file:") {
        return Ok((location, synchronous));
    }
    let Some((path, query)) = location.split_once('?') else {
        return Ok((location, synchronous));
    };
    for parameter in query.split('&') {
        match parameter.split_once('=') {
            Some(("synchronous", value)) => synchronous = Synchronous::parse(value)?,
            _ => {
                return Err(StoreError::Invalid(format!(
                    "sqlite: unknown URL parameter {parameter:?} (the one known is \
                     synchronous=off|normal|full|extra)"
                )))
            }
        }
    }
    Ok((path, synchronous))
}

impl Sqlite {
    /// The engine for `location` (a path, `:memory:` for a private in-memory database, with
    /// `?synchronous=...` if given), and the pool size to use.
    pub(crate) fn new(
        location: &str,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<(Sqlite, usize, Option<Arc<TimedLock>>)> {
        let (path, synchronous) = parse_location(location)?;
        if path.is_empty() {
            return Err(StoreError::Invalid(
                "sqlite: URL without a path (use sqlite:FILE or sqlite::memory:)".into(),
            ));
        }
        let memory = path == ":memory:";
        let writer = if memory {
            Arc::new(TimedLock::new())
        } else {
            writer_lock_for(path)
        };
        Ok((
            Sqlite {
                path: path.to_owned(),
                synchronous,
                timeout,
            },
            if memory { 1 } else { pool_size },
            Some(writer),
        ))
    }
}

/// One writer lock per database file in the process, so that two stores opened on the same file
/// still take turns in the process instead of in SQLite's busy handler.
fn writer_lock_for(path: &str) -> Arc<TimedLock> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Weak<TimedLock>>>> = OnceLock::new();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| {
        let p = PathBuf::from(path);
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    });
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    locks.retain(|_, w| w.strong_count() > 0);
    if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
        return lock;
    }
    let lock = Arc::new(TimedLock::new());
    locks.insert(key, Arc::downgrade(&lock));
    lock
}

pub(crate) struct SqliteConn {
    conn: rusqlite::Connection,
    /// When the running statement must stop, in nanoseconds since `epoch`.
    deadline: Arc<AtomicU64>,
    epoch: Instant,
    timeout: Duration,
}

impl Engine for Sqlite {
    type Conn = SqliteConn;
    const DIALECT: Dialect = Dialect::Sqlite;

    fn connect(&self) -> Result<SqliteConn> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            rusqlite::Connection::open_with_flags(&self.path, flags).map_err(
                |e| match map_error(e, self.timeout) {
                    StoreError::Backend(m) | StoreError::Invalid(m) => {
                        StoreError::Unavailable(format!("sqlite: cannot open {}: {m}", self.path))
                    }
                    other => other,
                },
            )?;
        let t = self.timeout;
        let setup = || -> rusqlite::Result<()> {
            conn.busy_timeout(t)?;
            if self.path != ":memory:" {
                let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
                if !mode.eq_ignore_ascii_case("wal") {
                    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))?;
                }
            }
            conn.execute_batch(&format!(
                "PRAGMA synchronous = {}; PRAGMA foreign_keys = ON;",
                self.synchronous.pragma()
            ))?;
            conn.set_prepared_statement_cache_capacity(128);
            Ok(())
        };
        setup().map_err(|e| map_error(e, t))?;
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let epoch = Instant::now();
        let watch = deadline.clone();
        conn.progress_handler(
            20_000,
            Some(move || epoch.elapsed().as_nanos() as u64 > watch.load(Ordering::Relaxed)),
        )
        .map_err(|e| map_error(e, t))?;
        Ok(SqliteConn {
            conn,
            deadline,
            epoch,
            timeout: t,
        })
    }
}

struct Param<'a>(&'a SqlValue);

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self.0 {
            SqlValue::Null => ValueRef::Null,
            SqlValue::Int(i) => ValueRef::Integer(*i),
            SqlValue::Float(f) => ValueRef::Real(*f),
            SqlValue::Text(s) => ValueRef::Text(s.as_bytes()),
            SqlValue::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

fn value_of(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Integer(i) => SqlValue::Int(i),
        ValueRef::Real(f) => SqlValue::Float(f),
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) => SqlValue::Text(s.to_owned()),
            Err(_) => SqlValue::Bytes(t.to_vec()),
        },
        ValueRef::Blob(b) => SqlValue::Bytes(b.to_vec()),
    }
}

impl SqliteConn {
    fn arm(&self) {
        let until = self.epoch.elapsed() + self.timeout;
        self.deadline
            .store(until.as_nanos() as u64, Ordering::Relaxed);
    }

    fn run<T>(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        want_rows: bool,
        f: impl FnOnce(Vec<Row>, u64) -> T,
    ) -> Result<T> {
        self.arm();
        let r = (|| -> rusqlite::Result<T> {
            let mut stmt = self.conn.prepare_cached(sql)?;
            let names: Arc<[String]> = stmt
                .column_names()
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            let n = names.len();
            let readonly = stmt.readonly();
            let mut out = Vec::new();
            {
                let mut rows = stmt.query(rusqlite::params_from_iter(params.iter().map(Param)))?;
                while let Some(r) = rows.next()? {
                    if want_rows {
                        let mut values = Vec::with_capacity(n);
                        for i in 0..n {
                            values.push(value_of(r.get_ref(i)?));
                        }
                        out.push(Row::new(names.clone(), values));
                    }
                }
            }
            let changed = if readonly { 0 } else { self.conn.changes() };
            Ok(f(out, changed))
        })();
        r.map_err(|e| map_error(e, self.timeout))
    }
}

/// SQLite runs in this process: nothing outlives a connection closed here.
impl ServerSide for SqliteConn {}

impl Conn for SqliteConn {
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>> {
        self.run(sql, params, true, |rows, _| rows)
    }

    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64> {
        self.run(sql, params, false, |_, changed| changed)
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        self.arm();
        self.conn
            .execute_batch(sql)
            .map_err(|e| map_error(e, self.timeout))
    }

    fn begin(&mut self, _isolation: Isolation) -> Result<()> {
        // SQLite is serializable whatever is asked; IMMEDIATE takes the write lock now, so that the
        // transaction never fails later for want of it.
        self.batch("BEGIN IMMEDIATE")
    }

    fn begin_read(&mut self, _isolation: Isolation) -> Result<()> {
        // A deferred transaction reads from a WAL snapshot and never takes the write lock.
        self.batch("BEGIN DEFERRED")
    }

    fn rollback(&mut self) -> Result<()> {
        if self.conn.is_autocommit() {
            return Ok(()); // SQLite already rolled back (some errors end the transaction)
        }
        self.batch("ROLLBACK")
    }
}

/// Maps a SQLite error to a [`StoreError`].
pub(crate) fn map_error(e: rusqlite::Error, timeout: Duration) -> StoreError {
    use rusqlite::Error as E;
    use rusqlite::ErrorCode as C;
    let text = e.to_string();
    match e {
        E::SqliteFailure(ffi::Error { code, .. }, _) => match code {
            C::ConstraintViolation => StoreError::Constraint(text),
            C::DatabaseBusy | C::DatabaseLocked => StoreError::Conflict(text),
            C::OperationInterrupted => StoreError::Timeout(timeout),
            C::ReadOnly | C::DiskFull => StoreError::WriteRefused,
            C::CannotOpen | C::PermissionDenied | C::NotADatabase | C::SystemIoFailure => {
                StoreError::Unavailable(text)
            }
            C::Unknown | C::TypeMismatch | C::TooBig | C::ApiMisuse | C::ParameterOutOfRange => {
                StoreError::Invalid(text)
            }
            _ => StoreError::Backend(text),
        },
        E::SqlInputError { .. }
        | E::InvalidParameterCount(..)
        | E::InvalidParameterName(_)
        | E::InvalidColumnIndex(_)
        | E::InvalidColumnName(_)
        | E::InvalidColumnType(..)
        | E::ToSqlConversionFailure(_)
        | E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::Utf8Error(..)
        | E::NulError(_)
        | E::InvalidQuery
        | E::MultipleStatement
        | E::ExecuteReturnedResults
        | E::InvalidPath(_) => StoreError::Invalid(text),
        _ => StoreError::Backend(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!(
            parse_location("/tmp/a.db").unwrap(),
            ("/tmp/a.db", Synchronous::Normal)
        );
        assert_eq!(
            parse_location("/tmp/a.db?synchronous=FULL").unwrap(),
            ("/tmp/a.db", Synchronous::Full)
        );
        assert_eq!(
            parse_location(":memory:?synchronous=off").unwrap(),
            (":memory:", Synchronous::Off)
        );
        assert_eq!(
            parse_location("file:a.db?mode=ro").unwrap(),
            ("file:a.db?mode=ro", Synchronous::Normal)
        );
        for bad in [
            "a.db?synchronous=sometimes",
            "a.db?sync=full",
            "a.db?synchronous",
        ] {
            let e = parse_location(bad).unwrap_err();
            assert!(matches!(e, StoreError::Invalid(_)), "{bad}: {e}");
        }
    }
}
