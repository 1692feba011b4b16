//! The document face: collections of JSON documents keyed by id (DESIGN.md §6).

use std::ops::Bound;

use serde_json::Value;

use crate::error::{Result, StoreError};
use cads_doc::{get_path, split_path, Changes, Document, DocumentText};

/// The longest document id, in bytes.
pub const MAX_ID_LEN: usize = 512;
/// The longest value of a [`FieldKind::Text`] indexed field, in bytes.
pub const MAX_INDEXED_TEXT_LEN: usize = 512;
/// The longest collection name, in bytes (collection names become table names, which PostgreSQL and
/// MySQL limit to 63 and 64 bytes).
pub const MAX_COLLECTION_NAME_LEN: usize = 48;
/// The table that records each collection's indexed fields; no collection may have this name.
pub const CATALOG_TABLE: &str = "cads_collections";
/// Names that start with this are the tables of cads itself (the catalog, write-back's
/// `cads_applied_sessions`, ...): no collection may have one, so that neither
/// [`DocumentStore::create_collection`] nor [`DocumentStore::drop_collection`] can reach them.
pub const RESERVED_PREFIX: &str = "cads_";

/// The type of an indexed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// A JSON integer that fits in an `i64`.
    Int,
    /// A JSON string of at most [`MAX_INDEXED_TEXT_LEN`] bytes, ordered by its UTF-8 bytes.
    Text,
}

impl FieldKind {
    fn name(self) -> &'static str {
        match self {
            FieldKind::Int => "int",
            FieldKind::Text => "text",
        }
    }
}

/// A field of a collection's documents that the store keeps in an indexed column, so that
/// [`DocumentStore::scan`] can walk the documents in the order of that field.
///
/// In a document, an indexed field is either missing (or null), and the document is left out of
/// scans by that field, or of its kind; a value of another kind makes the write
/// [`StoreError::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexedField {
    /// The field, a dotted path (`"profile.age"`) of ASCII letters, digits and underscores.
    pub name: String,
    /// Its type.
    pub kind: FieldKind,
}

impl IndexedField {
    /// An indexed integer field.
    pub fn int(name: impl Into<String>) -> IndexedField {
        IndexedField {
            name: name.into(),
            kind: FieldKind::Int,
        }
    }

    /// An indexed text field.
    pub fn text(name: impl Into<String>) -> IndexedField {
        IndexedField {
            name: name.into(),
            kind: FieldKind::Text,
        }
    }
}

/// Collections of JSON documents keyed by string ids, with change operators applied atomically per
/// document (the document face of DESIGN.md §6).
///
/// Every backend passes the same conformance suite (`tests/conformance.rs`), so callers see the same
/// behaviour on each. Ids are non-empty strings of at most [`MAX_ID_LEN`] bytes without control
/// characters, ordered by their UTF-8 bytes. Using a collection that was not created is
/// [`StoreError::Invalid`]. Documents are bounded in depth and size
/// ([`limits`](crate::limits)); a write past a bound is [`StoreError::Limit`] and changes
/// nothing.
pub trait DocumentStore: Send + Sync {
    /// Creates a collection with the given indexed fields, unless it exists. Creating an existing
    /// collection with the same indexed fields (in any order) does nothing; with different ones it is
    /// [`StoreError::Invalid`]. Names are 1 to [`MAX_COLLECTION_NAME_LEN`] characters of `[a-z0-9_]`,
    /// not starting with [`RESERVED_PREFIX`]; a collection is a table of that name, visible to the
    /// SQL face.
    fn create_collection(&self, name: &str, indexed: &[IndexedField]) -> Result<()>;

    /// Drops a collection and its documents; dropping a missing collection does nothing. A name
    /// that no collection may have (see `create_collection`) is [`StoreError::Invalid`].
    fn drop_collection(&self, name: &str) -> Result<()>;

    /// The document with this id, if any.
    fn get(&self, coll: &str, id: &str) -> Result<Option<Document>>;

    /// The documents with these ids, in the order of `ids` (None where missing), in one round trip
    /// for up to 500 ids.
    fn get_many(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<Document>>>;

    /// The document with this id as its JSON text, for a reader that decodes only what it uses
    /// (see [`DocumentText`]). The default reads it with [`get`](Self::get) and encodes it; a
    /// store that keeps documents as text returns the text.
    fn get_text(&self, coll: &str, id: &str) -> Result<Option<DocumentText>> {
        Ok(self.get(coll, id)?.map(|doc| DocumentText::of(&doc)))
    }

    /// [`get_many`](Self::get_many), as text (see [`get_text`](Self::get_text)).
    fn get_many_text(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<DocumentText>>> {
        let docs = self.get_many(coll, ids)?;
        Ok(docs
            .into_iter()
            .map(|doc| doc.map(|doc| DocumentText::of(&doc)))
            .collect())
    }

    /// Inserts a new document; [`StoreError::Constraint`] if the id exists.
    fn insert(&self, coll: &str, id: &str, doc: &Document) -> Result<()>;

    /// Inserts the document or replaces the one with this id.
    fn put(&self, coll: &str, id: &str, doc: &Document) -> Result<()>;

    /// Applies `changes` to the document atomically (no concurrent update of the same document
    /// interleaves) and returns the new document, or None (and changes nothing) if there is no
    /// document with this id. If a change does not apply (a type mismatch), nothing is changed and
    /// the error is [`StoreError::Invalid`].
    fn update(&self, coll: &str, id: &str, changes: &Changes) -> Result<Option<Document>>;

    /// Deletes the document; whether it existed.
    fn delete(&self, coll: &str, id: &str) -> Result<bool>;

    /// Documents in order of `field` (an indexed field; None: the id), then of id, whose field lies
    /// within `from`..`to`, at most `limit` of them. Bounds on the id are JSON strings; bounds on an
    /// indexed field are values of its kind. Documents without the field are not in the scan.
    fn scan(
        &self,
        coll: &str,
        field: Option<&str>,
        from: Bound<&Value>,
        to: Bound<&Value>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>>;

    /// The number of documents in the collection.
    fn count(&self, coll: &str) -> Result<u64>;

    /// Inserts many documents in one transaction (the bulk load of benchmarks); if any id exists, or
    /// appears twice, nothing is inserted and the error is [`StoreError::Constraint`].
    fn insert_many(&self, coll: &str, docs: &[(String, Document)]) -> Result<()>;

    /// Applies writes to several documents, in order, in one transaction: all of them or none.
    /// An update of a missing document changes nothing; an insert of an existing one fails the
    /// batch with [`StoreError::Constraint`].
    fn write_batch(&self, writes: &[DocWrite]) -> Result<()> {
        self.write_batch_fenced(writes, &mut || Ok(()))
    }

    /// [`DocumentStore::write_batch`], calling `fence` once the writes are made and before the
    /// commit: an error from it rolls the transaction back and is returned. The transaction holds
    /// the written rows' locks while `fence` runs, so a writer that checks there that it still
    /// owns the documents (a worker's cache leases) commits before any writer that took them over.
    fn write_batch_fenced(
        &self,
        writes: &[DocWrite],
        fence: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()>;
}

/// A write to one document.
#[derive(Clone, Debug, PartialEq)]
pub enum DocOp {
    /// Insert a new document ([`StoreError::Constraint`] if it exists).
    Insert(Document),
    /// Insert or replace the document.
    Put(Document),
    /// Apply change operators to the document (nothing if it is missing).
    Update(Changes),
    /// Delete the document (nothing if it is missing).
    Delete,
}

/// A write to the document `id` of `collection`.
#[derive(Clone, Debug, PartialEq)]
pub struct DocWrite {
    /// The collection.
    pub collection: String,
    /// The document's id.
    pub id: String,
    /// What happens to it.
    pub op: DocOp,
}

impl DocOp {
    /// Whether applying the operation twice leaves the document as applying it once. An insert
    /// counts as idempotent: replayed, it is applied as a put.
    pub fn is_idempotent(&self) -> bool {
        match self {
            DocOp::Put(_) | DocOp::Delete | DocOp::Insert(_) => true,
            DocOp::Update(changes) => changes.is_idempotent(),
        }
    }

    /// Checks the operation against the bounds of [`limits`](crate::limits): a whole document's
    /// depth and size, or each change's ([`Changes::check`]).
    pub fn check(&self) -> Result<()> {
        match self {
            DocOp::Insert(d) | DocOp::Put(d) => {
                crate::limits::check_document(d)?;
                Ok(())
            }
            DocOp::Update(changes) => Ok(changes.check()?),
            DocOp::Delete => Ok(()),
        }
    }

    /// The operation applied to a document (`None`: no document).
    pub fn apply(&self, document: Option<Document>) -> Result<Option<Document>> {
        match self {
            DocOp::Insert(d) | DocOp::Put(d) => Ok(Some(d.clone())),
            DocOp::Delete => Ok(None),
            DocOp::Update(changes) => match document {
                Some(mut d) => {
                    changes.apply(&mut d)?;
                    Ok(Some(d))
                }
                None => Ok(None),
            },
        }
    }

    /// The operation as JSON: `{"insert": doc}`, `{"put": doc}`, `{"update": changes}`,
    /// `{"delete": true}`.
    pub fn to_json(&self) -> Value {
        match self {
            DocOp::Insert(d) => serde_json::json!({ "insert": d }),
            DocOp::Put(d) => serde_json::json!({ "put": d }),
            DocOp::Update(changes) => serde_json::json!({ "update": changes.to_json() }),
            DocOp::Delete => serde_json::json!({ "delete": true }),
        }
    }

    /// Reads what [`DocOp::to_json`] wrote.
    pub fn from_json(value: &Value) -> Result<DocOp> {
        let bad = || StoreError::Invalid(format!("not a document operation: {value}"));
        let object = value.as_object().ok_or_else(bad)?;
        let (name, arg) = object
            .iter()
            .next()
            .filter(|_| object.len() == 1)
            .ok_or_else(bad)?;
        let document = || arg.as_object().cloned().ok_or_else(bad);
        match name.as_str() {
            "insert" => Ok(DocOp::Insert(document()?)),
            "put" => Ok(DocOp::Put(document()?)),
            "update" => Ok(DocOp::Update(Changes::from_json(arg)?)),
            "delete" => Ok(DocOp::Delete),
            _ => Err(bad()),
        }
    }
}

/// Checks a collection name: `[a-z0-9_]+`, at most [`MAX_COLLECTION_NAME_LEN`] bytes, not starting
/// with [`RESERVED_PREFIX`].
pub fn validate_collection_name(name: &str) -> Result<()> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if name.is_empty() || name.len() > MAX_COLLECTION_NAME_LEN || !ok_chars {
        return Err(StoreError::Invalid(format!(
            "bad collection name {name:?}: use 1 to {MAX_COLLECTION_NAME_LEN} characters of [a-z0-9_]"
        )));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(StoreError::Invalid(format!(
            "bad collection name {name:?}: names starting with {RESERVED_PREFIX} are reserved for \
             the tables of cads"
        )));
    }
    Ok(())
}

/// Checks a document id: 1 to [`MAX_ID_LEN`] bytes, no control characters (a line break would
/// split the lines in which write-back lists documents).
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(char::is_control) {
        return Err(StoreError::Invalid(format!(
            "bad document id {:?}: ids are 1 to {MAX_ID_LEN} bytes without control characters",
            id.chars().take(40).collect::<String>()
        )));
    }
    Ok(())
}

/// Checks indexed fields: valid paths of `[A-Za-z0-9_]` names, no two the same (ignoring case, as
/// MySQL column names do).
pub(crate) fn validate_indexed(indexed: &[IndexedField]) -> Result<()> {
    for (i, f) in indexed.iter().enumerate() {
        split_path(&f.name)?;
        let ok = column_name(&f.name).len() <= 60
            && f.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
        if !ok {
            return Err(StoreError::Invalid(format!(
                "bad indexed field {:?}: use up to 57 characters of [A-Za-z0-9_.], each '.' counting twice",
                f.name
            )));
        }
        if indexed[..i]
            .iter()
            .any(|g| column_name(&g.name).eq_ignore_ascii_case(&column_name(&f.name)))
        {
            return Err(StoreError::Invalid(format!(
                "indexed field {:?} given twice",
                f.name
            )));
        }
    }
    Ok(())
}

/// The column that holds an indexed field: `ix_` and the path with `.` spelled `__`.
pub(crate) fn column_name(field: &str) -> String {
    format!("ix_{}", field.replace('.', "__"))
}

/// The indexed fields as JSON for the catalog, sorted by name so that the order they were given in
/// does not matter.
pub(crate) fn indexed_to_json(indexed: &[IndexedField]) -> String {
    let mut fields: Vec<&IndexedField> = indexed.iter().collect();
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    let list: Vec<Value> = fields
        .iter()
        .map(|f| serde_json::json!({"name": f.name, "kind": f.kind.name()}))
        .collect();
    Value::Array(list).to_string()
}

/// Reads the catalog's JSON back. Its fields are checked as `create_collection` checks them: a
/// row written to the catalog by other means must not put arbitrary text into SQL statements.
pub(crate) fn indexed_from_json(text: &str) -> Result<Vec<IndexedField>> {
    let bad = || StoreError::Backend(format!("bad catalog entry {text:?}"));
    let v: Value = serde_json::from_str(text).map_err(|_| bad())?;
    let mut out = Vec::new();
    for item in v.as_array().ok_or_else(bad)? {
        let name = item.get("name").and_then(Value::as_str).ok_or_else(bad)?;
        let kind = match item.get("kind").and_then(Value::as_str) {
            Some("int") => FieldKind::Int,
            Some("text") => FieldKind::Text,
            _ => return Err(bad()),
        };
        out.push(IndexedField {
            name: name.to_owned(),
            kind,
        });
    }
    validate_indexed(&out).map_err(|e| StoreError::Backend(format!("bad catalog entry: {e}")))?;
    Ok(out)
}

/// The column value of an indexed field of `doc`: None if missing or null, an error if of the
/// wrong kind.
pub(crate) fn indexed_value(doc: &Document, field: &IndexedField) -> Result<Option<IndexKey>> {
    match get_path(doc, &field.name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => key_of(v, field).map(Some),
    }
}

/// A value of an indexed column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum IndexKey {
    Int(i64),
    Text(String),
}

/// Converts a JSON value to a key of the field's kind (used for documents and for scan bounds).
pub(crate) fn key_of(v: &Value, field: &IndexedField) -> Result<IndexKey> {
    match (field.kind, v) {
        (FieldKind::Int, Value::Number(n)) if n.as_i64().is_some() => {
            Ok(IndexKey::Int(n.as_i64().expect("checked")))
        }
        (FieldKind::Text, Value::String(s)) if s.len() <= MAX_INDEXED_TEXT_LEN => {
            Ok(IndexKey::Text(s.clone()))
        }
        (FieldKind::Text, Value::String(_)) => Err(StoreError::Invalid(format!(
            "indexed field {:?} holds more than {MAX_INDEXED_TEXT_LEN} bytes",
            field.name
        ))),
        (kind, v) => Err(StoreError::Invalid(format!(
            "indexed field {:?} is of kind {}, not {v}",
            field.name,
            kind.name()
        ))),
    }
}
