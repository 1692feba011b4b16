//! The document layer (DESIGN.md §5): a collection of JSON documents keyed by id, cached one
//! entry per document, written with change operators (`$set`, `$inc`, ...; 000 Table 3.2). An
//! application gets consistent caching of its documents without writing key logic: the cache key
//! of a document is `<collection>:<id>`, and a write-through update applies the same change
//! operators to the cached document as to the stored one.
//!
//! Names and ids are checked when they enter, before anything reaches the cache: collection
//! names as the data store wants them, ids without control characters. Documents and changes
//! past the bounds of [`cads_store::limits`] are refused by the data store, or, under write-back,
//! which the data store sees only later, when the write is made (`Session::write`).

use cads_store::{
    validate_collection_name, validate_id, Changes, DocWrite, Document, DocumentText, FieldKind,
    IndexedField, StoreError,
};

use crate::cache_store::{CacheChange, CacheStore, DocRef};
use crate::error::Result;
use crate::tx::StoreTx;
use crate::{Cads, Session};

/// A collection of documents, cached per document.
#[derive(Clone, Debug)]
pub struct Collection {
    name: String,
}

pub use cads_store::DocOp;

impl Collection {
    /// Creates the collection in the data store if needed.
    pub fn create(cads: &Cads, name: &str) -> Result<Collection> {
        Collection::create_indexed(cads, name, &[])
    }

    /// Creates the collection with fields indexed for range scans.
    pub fn create_indexed(
        cads: &Cads,
        name: &str,
        indexed: &[(&str, FieldKind)],
    ) -> Result<Collection> {
        let fields: Vec<IndexedField> = indexed
            .iter()
            .map(|(n, kind)| IndexedField {
                name: n.to_string(),
                kind: *kind,
            })
            .collect();
        cads.store().create_collection(name, &fields)?;
        Collection::named(name)
    }

    /// A handle to a collection that exists. A name no collection can have is an error
    /// (`[a-z0-9_]`, not a name reserved for the framework's tables; see
    /// [`validate_collection_name`]): it is part of cache keys, and a `:` in it would make
    /// write-back apply a buffered write to another collection.
    pub fn named(name: &str) -> Result<Collection> {
        validate_collection_name(name)?;
        Ok(Collection {
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache key of a document.
    pub fn key(&self, id: &str) -> Vec<u8> {
        format!("{}:{id}", self.name).into_bytes()
    }

    pub fn doc_ref(&self, id: &str) -> DocRef {
        DocRef {
            collection: self.name.clone(),
            id: id.to_string(),
        }
    }

    /// Reads a document, from the cache when it holds it.
    pub fn get(&self, s: &mut Session<'_>, id: &str) -> Result<Option<Document>> {
        s.read(self, &checked(id)?)
    }

    /// Reads a document in a session of its own ([`Cads::read`]): one cache round trip on a hit.
    pub fn read(&self, cads: &Cads, id: &str) -> Result<Option<Document>> {
        cads.read(self, &checked(id)?)
    }

    /// Reads a document as its JSON text, from the cache when it holds it, for a reader that
    /// decodes only what it uses ([`DocumentText::parse`]): no tree of the whole document is built.
    pub fn get_text(&self, s: &mut Session<'_>, id: &str) -> Result<Option<DocumentText>> {
        Ok(s.read(&AsText(self), &vec![checked(id)?])?.pop().flatten())
    }

    /// [`get_text`](Self::get_text) in a session of its own ([`Cads::read`]).
    pub fn read_text(&self, cads: &Cads, id: &str) -> Result<Option<DocumentText>> {
        Ok(cads
            .read(&AsText(self), &vec![checked(id)?])?
            .pop()
            .flatten())
    }

    /// Several documents as their text, in the order of `ids`, as they are at one moment: one
    /// cache round trip when they are cached (every CMI asked at once), one data-store call
    /// when one is not.
    pub fn get_many_text(
        &self,
        s: &mut Session<'_>,
        ids: &[&str],
    ) -> Result<Vec<Option<DocumentText>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        s.read(&AsText(self), &checked_all(ids)?)
    }

    /// Several documents as their text, each read on its own, all at once: each is at least as
    /// new as every write acknowledged before the call, but they need not be of one moment (a
    /// session that wrote two of them may show in one and not yet in the other). Cached, they
    /// take one round trip and no lease; otherwise, after that round trip, they are read as
    /// [`get_many_text`](Self::get_many_text) reads them, in a session of their own.
    pub fn read_each_text(&self, cads: &Cads, ids: &[&str]) -> Result<Vec<Option<DocumentText>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        cads.read_each(&AsText(self), &checked_all(ids)?)
    }

    /// Applies change operators to a document (atomically in the data store; to the cached copy
    /// under write-through). Changes past the bounds of [`cads_store::limits`] are an error.
    pub fn update(&self, s: &mut Session<'_>, id: &str, changes: Changes) -> Result<()> {
        s.write(self, &(checked(id)?, DocOp::Update(changes)))
    }

    /// Applies change operators to a document in a session of its own ([`Cads::write`]): under
    /// write-back and write-through, concurrent updates of the same document from this process
    /// are committed together, in the order they arrived, so that a hot document takes many
    /// updates per session.
    pub fn apply(&self, cads: &Cads, id: &str, changes: Changes) -> Result<()> {
        cads.write(self, (checked(id)?, DocOp::Update(changes)))
    }

    /// Inserts a new document (the commit fails with a constraint error if it exists).
    pub fn insert(&self, s: &mut Session<'_>, id: &str, document: Document) -> Result<()> {
        s.write(self, &(checked(id)?, DocOp::Insert(document)))
    }

    /// Inserts or replaces a document.
    pub fn put(&self, s: &mut Session<'_>, id: &str, document: Document) -> Result<()> {
        s.write(self, &(checked(id)?, DocOp::Put(document)))
    }

    pub fn delete(&self, s: &mut Session<'_>, id: &str) -> Result<()> {
        s.write(self, &(checked(id)?, DocOp::Delete))
    }
}

/// A document id as the data store takes it (see [`validate_id`]).
fn checked(id: &str) -> Result<String> {
    validate_id(id)?;
    Ok(id.to_string())
}

fn checked_all(ids: &[&str]) -> Result<Vec<String>> {
    ids.iter().map(|id| checked(id)).collect()
}

pub(crate) use cads_doc::encode;

/// A cached document, read as serde_json reads it, on a hit's path. Copies this framework writes
/// never name a key twice; one that does (written by someone else) is taken with its last value
/// here, and dropped by `LUPDATE`'s strict reading, which is only ever safe.
pub(crate) fn decode(bytes: &[u8]) -> Option<Document> {
    serde_json::from_slice(bytes).ok()
}

impl CacheStore for Collection {
    type Query = String;
    type Write = (String, DocOp);
    type Output = Option<Document>;

    fn keys_read(&self, id: &String) -> Vec<Vec<u8>> {
        vec![self.key(id)]
    }

    fn result_from_cache(&self, _id: &String, values: &[Vec<u8>]) -> Option<Option<Document>> {
        values.first().and_then(|v| decode(v)).map(Some)
    }

    fn query_store(
        &self,
        id: &String,
        tx: &mut StoreTx<'_>,
    ) -> Result<Option<Document>, StoreError> {
        tx.documents().get(&self.name, id)
    }

    fn entries(&self, id: &String, output: &Option<Document>) -> Vec<(Vec<u8>, Vec<u8>)> {
        // A missing document is not cached: its absence is cheap to confirm and rare in practice.
        output
            .iter()
            .map(|doc| (self.key(id), encode(doc)))
            .collect()
    }

    fn keys_written(&self, (id, _): &(String, DocOp)) -> Vec<Vec<u8>> {
        vec![self.key(id)]
    }

    fn write_store(
        &self,
        (id, op): &(String, DocOp),
        tx: &mut StoreTx<'_>,
    ) -> Result<(), StoreError> {
        tx.write_document(DocWrite {
            collection: self.name.clone(),
            id: id.clone(),
            op: op.clone(),
        });
        Ok(())
    }

    fn buffer(&self, (id, op): &(String, DocOp)) -> Vec<(DocRef, DocOp)> {
        vec![(self.doc_ref(id), op.clone())]
    }

    fn buffered_reads(&self, id: &String) -> Vec<DocRef> {
        vec![self.doc_ref(id)]
    }

    fn cache_change(&self, (_, op): &(String, DocOp), _key: &[u8]) -> CacheChange {
        match op {
            DocOp::Insert(document) | DocOp::Put(document) => CacheChange::Set(encode(document)),
            DocOp::Delete => CacheChange::Delete,
            DocOp::Update(changes) => CacheChange::Update(changes.clone()),
        }
    }
}

/// A collection's documents read as their JSON text ([`Collection::get_text`] and its
/// siblings): the same keys, entries and buffered writes as [`Collection`]'s reads, without the
/// tree. Several ids are read in one round trip, and from the data store in one call.
struct AsText<'a>(&'a Collection);

impl CacheStore for AsText<'_> {
    type Query = Vec<String>;
    type Write = std::convert::Infallible;
    type Output = Vec<Option<DocumentText>>;

    fn keys_read(&self, ids: &Vec<String>) -> Vec<Vec<u8>> {
        ids.iter().map(|id| self.0.key(id)).collect()
    }

    /// A cached value that is not one JSON object is not used (the read goes to the data store),
    /// as [`Collection`]'s reads do with a value that does not decode.
    fn result_from_cache(
        &self,
        _ids: &Vec<String>,
        values: &[Vec<u8>],
    ) -> Option<Vec<Option<DocumentText>>> {
        values
            .iter()
            .map(|value| DocumentText::new(value.clone()).ok().map(Some))
            .collect()
    }

    fn query_store(
        &self,
        ids: &Vec<String>,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Option<DocumentText>>, StoreError> {
        let store = tx.documents();
        // One id is a point read, the statement `get_text` makes, not a list's.
        match ids.as_slice() {
            [id] => Ok(vec![store.get_text(&self.0.name, id)?]),
            _ => {
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                store.get_many_text(&self.0.name, &refs)
            }
        }
    }

    fn entries(
        &self,
        ids: &Vec<String>,
        texts: &Vec<Option<DocumentText>>,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        // A missing document is not cached, as with `Collection`'s reads.
        ids.iter()
            .zip(texts)
            .filter_map(|(id, text)| Some((self.0.key(id), text.as_ref()?.as_bytes().to_vec())))
            .collect()
    }

    fn buffered_reads(&self, ids: &Vec<String>) -> Vec<DocRef> {
        ids.iter().map(|id| self.0.doc_ref(id)).collect()
    }

    crate::read_only!();
}
