//! What an application tells the framework about its data (000 §5.2, Table 5.2): which cache keys a
//! query reads and a write changes, how to run both against the data store, and how cached values
//! relate to query results.

use crate::tx::StoreTx;
use crate::writeback::SqlBuffer;
use cads_store::{Changes, DocOp, StoreError};

/// A document, the unit of write-back's Design 1: writes are buffered per document (000 §3.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocRef {
    pub collection: String,
    pub id: String,
}

impl DocRef {
    /// Checks the collection name and the id as the data store will (write-back's keys and lists
    /// are built from them), and `op` against the bounds of [`cads_store::limits`]: a write-back
    /// write the data store would refuse must fail when it is made, not when a worker applies it.
    pub(crate) fn check(&self, op: &DocOp) -> Result<(), StoreError> {
        cads_store::validate_collection_name(&self.collection)?;
        cads_store::validate_id(&self.id)?;
        op.check()
    }
}

/// The write methods of a [`CacheStore`] that only reads (`type Write = Infallible`): there is
/// no write to run, so none of them can be called. Put `cads::read_only!();` in its `impl`.
#[macro_export]
macro_rules! read_only {
    () => {
        fn keys_written(&self, w: &::std::convert::Infallible) -> Vec<Vec<u8>> {
            match *w {}
        }
        fn write_store(
            &self,
            w: &::std::convert::Infallible,
            _: &mut $crate::StoreTx<'_>,
        ) -> Result<(), $crate::store::StoreError> {
            match *w {}
        }
        fn cache_change(&self, w: &::std::convert::Infallible, _: &[u8]) -> $crate::CacheChange {
            match *w {}
        }
    };
}

/// The application's description of one kind of query and write. A session may use several.
pub trait CacheStore: Send + Sync {
    /// A read: what the application asks for.
    type Query;
    /// A write: what the application changes.
    type Write;
    /// A query's result.
    type Output;

    /// The cache keys a query's result is built from (`getReferencedKeysFromQuery`).
    fn keys_read(&self, query: &Self::Query) -> Vec<Vec<u8>>;

    /// The result, from the cached values of `keys_read` in order (`computeQueryResult`). `None`
    /// if they do not make a result; the query then goes to the data store.
    fn result_from_cache(&self, query: &Self::Query, values: &[Vec<u8>]) -> Option<Self::Output>;

    /// Runs the query against the data store, inside the session's transaction.
    fn query_store(
        &self,
        query: &Self::Query,
        tx: &mut StoreTx<'_>,
    ) -> Result<Self::Output, StoreError>;

    /// The cache entries a result yields (`computeCacheEntries`): normally one per `keys_read`.
    /// Only the keys the read missed are filled.
    fn entries(&self, query: &Self::Query, output: &Self::Output) -> Vec<(Vec<u8>, Vec<u8>)>;

    /// The cache keys whose values a write changes (`getImpactedKeysFromDml`).
    fn keys_written(&self, write: &Self::Write) -> Vec<Vec<u8>>;

    /// Runs the write against the data store, inside the session's transaction (`dmlDataStore`).
    fn write_store(&self, write: &Self::Write, tx: &mut StoreTx<'_>) -> Result<(), StoreError>;

    /// How the write changes the cached value of `key`, one of its `keys_written`
    /// (`modifyCacheEntries`; write-through and write-back: write-around deletes every written key).
    fn cache_change(&self, write: &Self::Write, key: &[u8]) -> CacheChange;

    /// The [`cache_change`](Self::cache_change) of each of `keys` (the write's `keys_written`),
    /// in their order. The default asks for each key's change apart; an application that works
    /// out a write's changes together gives them all at once here, so that a write of many keys
    /// does not work them out once per key.
    fn cache_changes(&self, write: &Self::Write, keys: &[Vec<u8>]) -> Vec<CacheChange> {
        keys.iter()
            .map(|key| self.cache_change(write, key))
            .collect()
    }

    /// Write-back, Design 1: the document operations this write buffers in the cache instead of
    /// running `write_store` (`rationalizeWrite`, 000 Table 5.3). Empty, the default: the write
    /// cannot be buffered and runs as write-through.
    fn buffer(&self, _write: &Self::Write) -> Vec<(DocRef, DocOp)> {
        Vec::new()
    }

    /// Write-back: the documents whose buffered writes a query's result depends on
    /// (`rationalizeRead`; the mapping of 000 §3.2). A read that misses applies their buffered
    /// writes to the data store before querying it.
    fn buffered_reads(&self, _query: &Self::Query) -> Vec<DocRef> {
        Vec::new()
    }

    /// Write-back, Design 2: the SQL statements this write buffers in the cache instead of
    /// running `write_store`, and the queue its session joins (000 §3.2, Definition 3.2). `None`,
    /// the default: the write is not buffered this way.
    ///
    /// The statements run later, in commit order within the queue, so they must not depend on
    /// reading the data store now (compute them from cached values), and rows that sessions of
    /// different queues both change must be changed commutatively (`x = x + ?`). Every cache key
    /// whose value depends on the rows they change must be among `keys_written` (or
    /// `result_changes`): a read that misses such a key applies the pending sessions it maps to.
    fn buffer_sql(&self, _write: &Self::Write) -> Option<SqlBuffer> {
        None
    }

    /// Write-back, Design 2: query result changes (QRC, 000 Algorithm 3) this write leaves for
    /// cached query results it affects, as `(cache key of the result, change)`. A read that
    /// misses such a key while the session is pending queries the data store and folds the
    /// changes in with [`fold_result_changes`](CacheStore::fold_result_changes), instead of
    /// applying the session first.
    fn result_changes(&self, _write: &Self::Write) -> Vec<(Vec<u8>, Vec<u8>)> {
        Vec::new()
    }

    /// Folds the query result changes of sessions not yet applied into a result the data store
    /// computed without them (`changes` in the order the sessions will be applied), and returns
    /// true. The default returns false, which fails the read with an error: a `CacheStore` that
    /// returns `result_changes` must implement this.
    fn fold_result_changes(
        &self,
        _query: &Self::Query,
        _output: &mut Self::Output,
        _changes: &[Vec<u8>],
    ) -> bool {
        false
    }
}

/// A read-modify-write step: from the cached value to the new one (`None` deletes the entry).
pub type Modifier = Box<dyn FnOnce(&[u8]) -> Option<Vec<u8>> + Send>;

/// A change to one cached value, applied under an exclusive lease at pre-commit and made visible
/// at commit. The incremental forms and `Update` take one round trip; `Modify` reads the value
/// first, unless the session read it already (the write then checks that the value is unchanged).
pub enum CacheChange {
    /// Delete the entry: the next read refills it from the data store.
    Delete,
    /// Replace the value.
    Set(Vec<u8>),
    /// Append bytes to the value (if it is cached).
    Append(Vec<u8>),
    /// Add to an integer value (if it is cached).
    Incr(i64),
    /// Apply document change operators to a cached JSON document (if it is cached), on the CMI
    /// (`LUPDATE`) as the data store applies them. A cached value that is not a document, or
    /// cannot take the changes, is deleted.
    Update(Changes),
    /// Read-modify-write: from the cached value to the new one (`None` deletes the entry).
    Modify(Modifier),
}

impl CacheChange {
    /// Applies the change to a cached value, as the CMI would. `None` means no entry.
    pub fn apply(self, value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match self {
            CacheChange::Delete => None,
            CacheChange::Set(v) => Some(v),
            CacheChange::Append(bytes) => value.map(|mut v| {
                v.extend_from_slice(&bytes);
                v
            }),
            CacheChange::Incr(delta) => value.and_then(|v| {
                let n: i64 = std::str::from_utf8(&v).ok()?.parse().ok()?;
                Some(n.checked_add(delta)?.to_string().into_bytes())
            }),
            CacheChange::Update(changes) => {
                value.and_then(|v| cads_doc::apply_to_text(&v, &changes))
            }
            CacheChange::Modify(f) => value.and_then(|v| f(&v)),
        }
    }
}

impl std::fmt::Debug for CacheChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheChange::Delete => write!(f, "Delete"),
            CacheChange::Set(v) => write!(f, "Set({} bytes)", v.len()),
            CacheChange::Append(v) => write!(f, "Append({} bytes)", v.len()),
            CacheChange::Incr(n) => write!(f, "Incr({n})"),
            CacheChange::Update(changes) => write!(f, "Update({} changes)", changes.0.len()),
            CacheChange::Modify(_) => write!(f, "Modify(..)"),
        }
    }
}
