//! The data-store side of a session: at most one SQL transaction, begun when first needed, and the
//! session's document writes, which are applied together, in one data-store transaction, when the
//! session commits: an aborted session has written nothing, and a session re-run after a conflict
//! cannot have applied part of its writes before.

use cads_store::{
    DataStore, Dialect, DocWrite, DocumentStore, Isolation, SqlTransaction, StoreError,
};

pub struct StoreTx<'s> {
    store: &'s dyn DataStore,
    isolation: Isolation,
    /// The transaction the session writes in (and reads in, once it exists).
    sql: Option<Box<dyn SqlTransaction + 's>>,
    /// A read-only transaction for reads before the session writes: it never waits for writers.
    read: Option<Box<dyn SqlTransaction + 's>>,
    documents: Vec<DocWrite>,
    /// The session steps at which the two transactions began, when their isolation reads from a
    /// snapshot fixed at the start (see `Session::read`).
    sql_snapshot: Option<u64>,
    read_snapshot: Option<u64>,
    step: u64,
}

impl<'s> StoreTx<'s> {
    pub(crate) fn new(store: &'s dyn DataStore, isolation: Isolation) -> StoreTx<'s> {
        StoreTx {
            store,
            isolation,
            sql: None,
            read: None,
            documents: Vec::new(),
            sql_snapshot: None,
            read_snapshot: None,
            step: 0,
        }
    }

    /// Document reads, straight from the store (each is its own snapshot).
    pub fn documents(&self) -> &dyn DocumentStore {
        self.store
    }

    /// Queues a document write for commit.
    pub fn write_document(&mut self, write: DocWrite) {
        self.documents.push(write);
    }

    /// The session's SQL transaction, for writes (and reads that must see them), begun on first
    /// use. Statements that depend on one another (read a row, then update it) belong here.
    pub fn sql(&mut self) -> Result<&mut (dyn SqlTransaction + 's), StoreError> {
        if self.sql.is_none() {
            self.sql = Some(self.store.begin(self.isolation)?);
            if self.fixes_snapshot() {
                self.sql_snapshot = Some(self.step);
            }
        }
        Ok(self.sql.as_deref_mut().expect("just begun"))
    }

    /// A transaction for reads: the write transaction if the session has begun one, else a
    /// read-only transaction that never waits for writers (on SQLite, the single writer may be a
    /// session waiting for a lease this reader holds).
    pub fn read_sql(&mut self) -> Result<&mut (dyn SqlTransaction + 's), StoreError> {
        if self.sql.is_some() {
            return Ok(self.sql.as_deref_mut().expect("checked"));
        }
        if self.read.is_none() {
            self.read = Some(self.store.begin_read(self.isolation)?);
            if self.fixes_snapshot() {
                self.read_snapshot = Some(self.step);
            }
        }
        Ok(self.read.as_deref_mut().expect("just begun"))
    }

    /// Makes the next read see what is committed now: ends the read-only transaction, if any.
    /// False if the session's write transaction reads from a snapshot fixed earlier (it cannot
    /// be moved forward).
    pub(crate) fn refresh_reads(&mut self) -> bool {
        if self.sql.is_some() {
            return self.sql_snapshot.is_none();
        }
        if let Some(tx) = self.read.take() {
            let _ = tx.rollback();
        }
        self.read_snapshot = None;
        true
    }

    /// Ends the read-only transaction if it reads from a snapshot fixed before now, so that the
    /// next read sees what is committed now.
    pub(crate) fn renew_read_snapshot(&mut self) {
        if self.sql.is_none() && self.read_snapshot.is_some() {
            if let Some(tx) = self.read.take() {
                let _ = tx.rollback();
            }
            self.read_snapshot = None;
        }
    }

    /// Whether the session has begun its write transaction (on SQLite it then holds the data
    /// store's single writer until it ends).
    pub(crate) fn writing(&self) -> bool {
        self.sql.is_some()
    }

    /// Whether the session's write transaction reads from a snapshot fixed when it began, which
    /// cannot be moved forward.
    pub(crate) fn write_snapshot_fixed(&self) -> bool {
        self.sql.is_some() && self.sql_snapshot.is_some()
    }

    /// Whether the transaction reads from one snapshot for its whole life (SQLite always;
    /// the others above READ COMMITTED).
    fn fixes_snapshot(&self) -> bool {
        self.store.dialect() == Dialect::Sqlite || self.isolation != Isolation::ReadCommitted
    }

    /// Numbers the session's steps; leases and snapshots are compared by step.
    pub(crate) fn next_step(&mut self) -> u64 {
        self.step += 1;
        self.step
    }

    /// Whether the data reads see may predate `step` (a snapshot fixed before it).
    pub(crate) fn snapshot_before(&self, step: u64) -> bool {
        let snapshot = if self.sql.is_some() {
            self.sql_snapshot
        } else {
            self.read_snapshot
        };
        snapshot.is_some_and(|s| s < step)
    }

    /// Commits the SQL transaction, then applies the document writes, in order, atomically.
    pub(crate) fn commit(mut self) -> Result<(), StoreError> {
        if let Some(tx) = self.read.take() {
            let _ = tx.rollback();
        }
        if let Some(tx) = self.sql.take() {
            tx.commit()?;
        }
        if self.documents.is_empty() {
            return Ok(());
        }
        self.store.write_batch(&self.documents)
    }

    pub(crate) fn rollback(mut self) {
        if let Some(tx) = self.read.take() {
            let _ = tx.rollback();
        }
        if let Some(tx) = self.sql.take() {
            if let Err(e) = tx.rollback() {
                tracing::debug!(error = %e, "rollback failed (the transaction is gone anyway)");
            }
        }
        self.documents.clear();
    }
}
