//! Fault injection: a wrapper that makes any data store fail, hang past its timeout, or refuse writes
//! (DESIGN.md §6), switched at run time through a shared handle that also counts calls.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::document::{DocWrite, DocumentStore, IndexedField};
use crate::error::{Result, StoreError};
use crate::sql::{Dialect, Failed, Isolation, Row, SqlStore, SqlTransaction, SqlValue};
use crate::DataStore;
use cads_doc::{Changes, Document, DocumentText};

/// How a [`FaultyStore`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FaultMode {
    /// Every call goes to the wrapped store.
    #[default]
    Healthy,
    /// Every call fails at once with [`StoreError::Unavailable`], as if the store were down.
    FailAll,
    /// Every call blocks for the store's timeout and then fails with [`StoreError::Timeout`], as if
    /// the store had stopped answering (a call returns early, still with `Timeout`, when the mode is
    /// switched away from `Hang`).
    Hang,
    /// Writes fail at once with [`StoreError::WriteRefused`] (the store is out of write capacity);
    /// reads go through.
    RefuseWrites,
    /// Every call goes through, but a SQL transaction's commit, once the wrapped store has done
    /// it, reports [`StoreError::Timeout`], as if its reply were lost: the caller cannot tell
    /// that it committed.
    LoseCommitReplies,
}

impl FaultMode {
    fn from_u8(v: u8) -> FaultMode {
        match v {
            1 => FaultMode::FailAll,
            2 => FaultMode::Hang,
            3 => FaultMode::RefuseWrites,
            4 => FaultMode::LoseCommitReplies,
            _ => FaultMode::Healthy,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            FaultMode::Healthy => 0,
            FaultMode::FailAll => 1,
            FaultMode::Hang => 2,
            FaultMode::RefuseWrites => 3,
            FaultMode::LoseCommitReplies => 4,
        }
    }
}

/// The calls a [`FaultyStore`] received, whatever their outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallCounts {
    /// Reads: `get`, `get_many`, `scan`, `count`, and `query` in a SQL transaction.
    pub reads: u64,
    /// Writes: `create_collection`, `drop_collection`, `insert`, `put`, `update`, `delete`,
    /// `insert_many`, `execute_batch`, and `execute` in a SQL transaction.
    pub writes: u64,
    /// SQL transactions begun.
    pub transactions: u64,
}

#[derive(Default)]
struct Shared {
    mode: AtomicU8,
    /// Held while changing the mode, so that hanging calls wake up.
    changed_lock: Mutex<()>,
    changed: Condvar,
    reads: AtomicU64,
    writes: AtomicU64,
    transactions: AtomicU64,
}

/// A handle on the faults of one or more [`FaultyStore`]s: cheap to clone, usable from any thread.
#[derive(Clone, Default)]
pub struct Faults(Arc<Shared>);

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("mode", &self.mode())
            .field("counts", &self.counts())
            .finish()
    }
}

impl Faults {
    /// A healthy handle with zero counts.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// Switches the mode; it applies to every call that starts afterwards (and wakes hanging ones).
    pub fn set(&self, mode: FaultMode) {
        let _held = self
            .0
            .changed_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.0.mode.store(mode.as_u8(), Ordering::SeqCst);
        self.0.changed.notify_all();
    }

    /// The current mode.
    pub fn mode(&self) -> FaultMode {
        FaultMode::from_u8(self.0.mode.load(Ordering::SeqCst))
    }

    /// The calls received so far.
    pub fn counts(&self) -> CallCounts {
        CallCounts {
            reads: self.0.reads.load(Ordering::SeqCst),
            writes: self.0.writes.load(Ordering::SeqCst),
            transactions: self.0.transactions.load(Ordering::SeqCst),
        }
    }

    /// Read calls received so far.
    pub fn reads(&self) -> u64 {
        self.0.reads.load(Ordering::SeqCst)
    }

    /// Write calls received so far.
    pub fn writes(&self) -> u64 {
        self.0.writes.load(Ordering::SeqCst)
    }

    /// Sets every count back to zero.
    pub fn reset_counts(&self) {
        self.0.reads.store(0, Ordering::SeqCst);
        self.0.writes.store(0, Ordering::SeqCst);
        self.0.transactions.store(0, Ordering::SeqCst);
    }

    /// Counts a call and decides its fate under the current mode.
    fn enter(&self, kind: Kind, timeout: Duration) -> Result<()> {
        match kind {
            Kind::Read => self.0.reads.fetch_add(1, Ordering::SeqCst),
            Kind::Write => self.0.writes.fetch_add(1, Ordering::SeqCst),
            Kind::Begin => self.0.transactions.fetch_add(1, Ordering::SeqCst),
            Kind::Finish => 0,
        };
        match self.mode() {
            FaultMode::Healthy | FaultMode::LoseCommitReplies => Ok(()),
            FaultMode::FailAll => Err(StoreError::Unavailable(
                "data store down (fault injection)".into(),
            )),
            FaultMode::RefuseWrites if kind == Kind::Write => Err(StoreError::WriteRefused),
            FaultMode::RefuseWrites => Ok(()),
            FaultMode::Hang => {
                let deadline = Instant::now() + timeout;
                let mut held = self
                    .0
                    .changed_lock
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                while self.mode() == FaultMode::Hang {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    held = self
                        .0
                        .changed
                        .wait_timeout(held, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                Err(StoreError::Timeout(timeout))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Begin,
    Finish,
}

/// A data store that passes calls to another one unless its [`Faults`] say otherwise.
///
/// ```
/// use cads_store::{open, FaultMode, FaultyStore, StoreOptions, DocumentStore, StoreError};
/// let store = FaultyStore::new(open("sqlite::memory:", &StoreOptions::default()).unwrap());
/// let faults = store.faults();
/// store.create_collection("users", &[]).unwrap();
/// faults.set(FaultMode::RefuseWrites);
/// assert_eq!(store.insert("users", "1", &Default::default()), Err(StoreError::WriteRefused));
/// assert_eq!(store.get("users", "1"), Ok(None));
/// assert_eq!(faults.counts().reads, 1);
/// ```
pub struct FaultyStore {
    inner: Arc<dyn DataStore>,
    faults: Faults,
}

impl FaultyStore {
    /// Wraps `inner`, healthy, with a handle of its own.
    pub fn new(inner: Arc<dyn DataStore>) -> FaultyStore {
        FaultyStore::with_faults(inner, Faults::new())
    }

    /// Wraps `inner` under an existing handle (several stores can share one).
    pub fn with_faults(inner: Arc<dyn DataStore>, faults: Faults) -> FaultyStore {
        FaultyStore { inner, faults }
    }

    /// The handle that switches this store's mode and counts its calls.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn DataStore> {
        &self.inner
    }

    fn enter(&self, kind: Kind) -> Result<()> {
        self.faults.enter(kind, self.inner.timeout())
    }
}

impl DocumentStore for FaultyStore {
    fn create_collection(&self, name: &str, indexed: &[IndexedField]) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.create_collection(name, indexed)
    }

    fn drop_collection(&self, name: &str) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.drop_collection(name)
    }

    fn get(&self, coll: &str, id: &str) -> Result<Option<Document>> {
        self.enter(Kind::Read)?;
        self.inner.get(coll, id)
    }

    fn get_many(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<Document>>> {
        self.enter(Kind::Read)?;
        self.inner.get_many(coll, ids)
    }

    fn get_text(&self, coll: &str, id: &str) -> Result<Option<DocumentText>> {
        self.enter(Kind::Read)?;
        self.inner.get_text(coll, id)
    }

    fn get_many_text(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<DocumentText>>> {
        self.enter(Kind::Read)?;
        self.inner.get_many_text(coll, ids)
    }

    fn insert(&self, coll: &str, id: &str, doc: &Document) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.insert(coll, id, doc)
    }

    fn put(&self, coll: &str, id: &str, doc: &Document) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.put(coll, id, doc)
    }

    fn update(&self, coll: &str, id: &str, changes: &Changes) -> Result<Option<Document>> {
        self.enter(Kind::Write)?;
        self.inner.update(coll, id, changes)
    }

    fn delete(&self, coll: &str, id: &str) -> Result<bool> {
        self.enter(Kind::Write)?;
        self.inner.delete(coll, id)
    }

    fn scan(
        &self,
        coll: &str,
        field: Option<&str>,
        from: Bound<&Value>,
        to: Bound<&Value>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>> {
        self.enter(Kind::Read)?;
        self.inner.scan(coll, field, from, to, limit)
    }

    fn count(&self, coll: &str) -> Result<u64> {
        self.enter(Kind::Read)?;
        self.inner.count(coll)
    }

    fn insert_many(&self, coll: &str, docs: &[(String, Document)]) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.insert_many(coll, docs)
    }

    fn write_batch_fenced(
        &self,
        writes: &[DocWrite],
        fence: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.write_batch_fenced(writes, fence)
    }
}

/// A transaction of a [`FaultyStore`]: each statement is subject to the mode when it runs.
struct FaultyTx<'s> {
    inner: Box<dyn SqlTransaction + 's>,
    store: &'s FaultyStore,
}

impl SqlTransaction for FaultyTx<'_> {
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>> {
        self.store.enter(Kind::Read)?;
        self.inner.query(sql, params)
    }

    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64> {
        self.store.enter(Kind::Write)?;
        self.inner.execute(sql, params)
    }

    fn execute_all(&mut self, statements: &[(&str, &[SqlValue])]) -> Result<Vec<u64>, Failed> {
        for _ in statements {
            // Nothing has run when the store turns out to be down.
            self.store.enter(Kind::Write).map_err(Failed::first)?;
        }
        self.inner.execute_all(statements)
    }

    /// Fails (rolling back) when the store is down or hangs.
    fn commit(self: Box<Self>) -> Result<()> {
        self.store.enter(Kind::Finish)?;
        self.inner.commit()?;
        if self.store.faults.mode() == FaultMode::LoseCommitReplies {
            return Err(StoreError::Timeout(self.store.inner.timeout()));
        }
        Ok(())
    }

    /// Always rolls back the wrapped transaction.
    fn rollback(self: Box<Self>) -> Result<()> {
        self.inner.rollback()
    }
}

impl SqlStore for FaultyStore {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }

    fn begin(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>> {
        self.enter(Kind::Begin)?;
        let inner = self.inner.begin(isolation)?;
        Ok(Box::new(FaultyTx { inner, store: self }))
    }

    fn begin_read(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>> {
        self.enter(Kind::Begin)?;
        let inner = self.inner.begin_read(isolation)?;
        Ok(Box::new(FaultyTx { inner, store: self }))
    }

    fn execute_batch(&self, sql: &str) -> Result<()> {
        self.enter(Kind::Write)?;
        self.inner.execute_batch(sql)
    }
}

impl DataStore for FaultyStore {
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    fn settle(&self) -> Result<()> {
        self.enter(Kind::Finish)?;
        self.inner.settle()
    }
}
