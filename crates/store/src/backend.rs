//! What the three backends share: documents as rows of tables, transactions over pooled connections.
//! A backend supplies only a connection type ([`Conn`]) that runs statements; everything else (the
//! document layout, atomic updates, scans, the catalog of collections, the transaction objects) is
//! written once here, so that every backend behaves the same.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::document::{
    column_name, indexed_from_json, indexed_to_json, indexed_value, key_of,
    validate_collection_name, validate_id, validate_indexed, DocOp, DocWrite, DocumentStore,
    FieldKind, IndexKey, IndexedField, CATALOG_TABLE,
};
use crate::error::{Result, StoreError};
use crate::limits::check_document;
use crate::pool::{Pool, Pooled, ServerSession, ServerSide, TimedGuard, TimedLock};
use crate::sql::{
    execute_each, Dialect, Failed, Isolation, Row, SqlStore, SqlTransaction, SqlValue,
};
use crate::DataStore;
use cads_doc::{Changes, Document, DocumentText};

/// One connection of a backend.
pub(crate) trait Conn: Send + ServerSide {
    /// Runs a statement with `?` parameters that returns rows.
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>>;
    /// Runs a statement with `?` parameters; the number of rows it changed (matched, for updates).
    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64>;
    /// [`SqlTransaction::execute_all`]: one by one unless the backend can pipeline them.
    fn execute_all(&mut self, statements: &[(&str, &[SqlValue])]) -> Result<Vec<u64>, Failed> {
        execute_each(statements, |sql, params| self.execute(sql, params))
    }
    /// Runs statements separated by `;`, without parameters.
    fn batch(&mut self, sql: &str) -> Result<()>;
    /// Begins a transaction.
    fn begin(&mut self, isolation: Isolation) -> Result<()>;
    /// Begins a read-only transaction.
    fn begin_read(&mut self, isolation: Isolation) -> Result<()>;
    /// Commits the transaction.
    fn commit(&mut self) -> Result<()> {
        self.batch("COMMIT")
    }
    /// Rolls the transaction back.
    fn rollback(&mut self) -> Result<()> {
        self.batch("ROLLBACK")
    }
}

/// A backend: how to open connections, in which dialect.
pub(crate) trait Engine: Send + Sync + 'static {
    type Conn: Conn;
    const DIALECT: Dialect;
    fn connect(&self) -> Result<Self::Conn>;
    /// Ends `session` on the server, from `conn`; true once it is gone (ended now or before).
    fn end_session(_conn: &mut Self::Conn, _session: &ServerSession) -> Result<bool> {
        Ok(true)
    }
}

/// Waits, up to `timeout`, until `running` (a count of the server sessions still there) says 0;
/// whether it did. For [`Engine::end_session`].
pub(crate) fn wait_until_gone(
    timeout: Duration,
    mut running: impl FnMut() -> Result<i64>,
) -> Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if running()? == 0 {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A collection's table and its prepared statements.
struct Collection {
    fields: Vec<IndexedField>,
    catalog_entry: String,
    table: String,
    get: String,
    /// `INSERT INTO table (columns) VALUES`, and one row's `(?, ...)`.
    insert_head: String,
    row: String,
    insert: String,
    /// What turns an insert into a put: the upsert clause after the rows.
    put_tail: String,
    put: String,
    lock: String,
    update: String,
    delete: String,
    count: String,
}

fn quote(d: Dialect, ident: &str) -> String {
    match d {
        Dialect::MySql => format!("`{ident}`"),
        _ => format!("\"{ident}\""),
    }
}

impl Collection {
    fn new(d: Dialect, name: &str, mut fields: Vec<IndexedField>) -> Collection {
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        let table = quote(d, name);
        let cols: Vec<String> = fields
            .iter()
            .map(|f| quote(d, &column_name(&f.name)))
            .collect();
        let mut insert_cols = String::from("id, doc");
        let mut marks = String::from("?, ?");
        let mut set_cols = String::from("doc = ?");
        for c in &cols {
            insert_cols.push_str(&format!(", {c}"));
            marks.push_str(", ?");
            set_cols.push_str(&format!(", {c} = ?"));
        }
        let insert_head = format!("INSERT INTO {table} ({insert_cols}) VALUES");
        let row = format!("({marks})");
        let insert = format!("{insert_head} {row}");
        let put_tail = match d {
            Dialect::MySql => {
                let updates: Vec<String> = std::iter::once("doc".to_owned())
                    .chain(cols.iter().cloned())
                    .map(|c| format!("{c} = VALUES({c})"))
                    .collect();
                format!(" ON DUPLICATE KEY UPDATE {}", updates.join(", "))
            }
            _ => {
                let updates: Vec<String> = std::iter::once("doc".to_owned())
                    .chain(cols.iter().cloned())
                    .map(|c| format!("{c} = excluded.{c}"))
                    .collect();
                format!(" ON CONFLICT (id) DO UPDATE SET {}", updates.join(", "))
            }
        };
        let put = format!("{insert}{put_tail}");
        let lock = match d {
            Dialect::Sqlite => format!("SELECT doc FROM {table} WHERE id = ?"),
            _ => format!("SELECT doc FROM {table} WHERE id = ? FOR UPDATE"),
        };
        Collection {
            catalog_entry: indexed_to_json(&fields),
            fields,
            get: format!("SELECT doc FROM {table} WHERE id = ?"),
            insert_head,
            row,
            insert,
            put_tail,
            put,
            lock,
            update: format!("UPDATE {table} SET {set_cols} WHERE id = ?"),
            delete: format!("DELETE FROM {table} WHERE id = ?"),
            count: format!("SELECT COUNT(*) FROM {table}"),
            table,
        }
    }

    fn create_sql(&self, d: Dialect, name: &str) -> String {
        let table = &self.table;
        let mut columns = Vec::new();
        let mut indexes = Vec::new();
        for (i, f) in self.fields.iter().enumerate() {
            let col = quote(d, &column_name(&f.name));
            let ty = match (d, f.kind) {
                (Dialect::Sqlite, FieldKind::Int) => "INTEGER",
                (Dialect::Sqlite, FieldKind::Text) => "TEXT",
                (Dialect::Postgres, FieldKind::Int) => "BIGINT",
                (Dialect::Postgres, FieldKind::Text) => "TEXT COLLATE \"C\"",
                (Dialect::MySql, FieldKind::Int) => "BIGINT NULL",
                (Dialect::MySql, FieldKind::Text) => "VARBINARY(512) NULL",
            };
            columns.push(format!(", {col} {ty}"));
            match d {
                Dialect::MySql => columns.push(format!(", INDEX `ix{i}` ({col}, id)")),
                _ => indexes.push(format!(
                    "; CREATE INDEX IF NOT EXISTS {} ON {table} ({col}, id)",
                    quote(d, &format!("{name}__ix{i}"))
                )),
            }
        }
        let columns = columns.concat();
        let indexes = indexes.concat();
        match d {
            Dialect::Sqlite => {
                format!("CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY NOT NULL, doc TEXT NOT NULL{columns}) WITHOUT ROWID{indexes}")
            }
            Dialect::Postgres => {
                format!("CREATE TABLE IF NOT EXISTS {table} (id TEXT COLLATE \"C\" PRIMARY KEY, doc TEXT NOT NULL{columns}){indexes}")
            }
            Dialect::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {table} (id VARBINARY(512) NOT NULL PRIMARY KEY, \
                 doc LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL{columns}) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
        }
    }

    /// `n` rows of [`Self::row`] after the insert's head, then `tail`.
    fn rows(&self, n: usize, tail: &str) -> String {
        let rows = vec![self.row.as_str(); n].join(", ");
        format!("{} {rows}{tail}", self.insert_head)
    }

    /// A put of `n` rows.
    fn put_rows(&self, n: usize) -> String {
        self.rows(n, &self.put_tail)
    }

    /// The row values after id and doc: the indexed columns of `doc`.
    fn row_params(&self, id: &str, doc: &Document) -> Result<Vec<SqlValue>> {
        let mut params = Vec::with_capacity(2 + self.fields.len());
        params.push(SqlValue::Text(id.to_owned()));
        params.push(SqlValue::Text(check_document(doc)?));
        for f in &self.fields {
            params.push(index_param(indexed_value(doc, f)?));
        }
        Ok(params)
    }

    fn field(&self, name: &str) -> Result<&IndexedField> {
        self.fields.iter().find(|f| f.name == name).ok_or_else(|| {
            StoreError::Invalid(format!("field {name:?} is not indexed in this collection"))
        })
    }
}

fn index_param(k: Option<IndexKey>) -> SqlValue {
    match k {
        None => SqlValue::Null,
        Some(IndexKey::Int(i)) => SqlValue::Int(i),
        Some(IndexKey::Text(s)) => SqlValue::Text(s),
    }
}

fn parse_doc(v: &SqlValue) -> Result<Document> {
    let parsed = match v {
        SqlValue::Text(s) => serde_json::from_str(s),
        SqlValue::Bytes(b) => serde_json::from_slice(b),
        other => return Err(not_text(other)),
    };
    parsed.map_err(|e| StoreError::Backend(format!("stored document is not a JSON object: {e}")))
}

/// A stored document's text, as it is stored.
fn doc_text(v: SqlValue) -> Result<DocumentText> {
    let text = match v {
        SqlValue::Text(s) => s.into_bytes(),
        SqlValue::Bytes(b) => b,
        other => return Err(not_text(&other)),
    };
    DocumentText::new(text).map_err(|e| StoreError::Backend(format!("stored document: {e}")))
}

fn not_text(v: &SqlValue) -> StoreError {
    StoreError::Backend(format!("stored document is {v:?}, not JSON text"))
}

/// Locks a document, applies changes to it and writes it back, inside the caller's transaction.
fn update_in<C: Conn>(
    conn: &mut C,
    c: &Collection,
    id: &str,
    changes: &Changes,
) -> Result<Option<Document>> {
    let rows = conn.query(&c.lock, &[SqlValue::Text(id.to_owned())])?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let mut doc = parse_doc(&row.values()[0])?;
    changes.apply(&mut doc)?;
    let mut params = c.row_params(id, &doc)?;
    params.rotate_left(1); // the id goes last, in the WHERE clause
    conn.execute(&c.update, &params)?;
    Ok(Some(doc))
}

/// Rows per multi-row statement: a few thousand parameters at most (SQLite's old limit is 999 per
/// statement, and large statements gain nothing).
fn rows_per_statement(params_per_row: usize) -> usize {
    (2000 / params_per_row).clamp(1, 250)
}

/// Per table, its collection and what a batch does to it.
type ByTable<'c, T> = BTreeMap<&'c str, (&'c Collection, Vec<T>)>;

/// `writes` applied in order inside the caller's transaction, in a few statements per collection
/// instead of one or two per write: each document's operations are folded in memory (from its
/// current version, read and locked in one statement per collection, where its first operation
/// is an update), and the resulting documents written back in multi-row upserts and deletes, in
/// id order so that concurrent batches lock rows alike. The same result as applying the writes one
/// by one. Inserts are not folded: the caller applies those one by one, where the data store
/// itself reports a document that exists.
fn write_folded<C: Conn>(
    conn: &mut C,
    d: Dialect,
    planned: &[(Arc<Collection>, &DocWrite)],
) -> Result<()> {
    struct Folded<'w> {
        collection: &'w Collection,
        id: &'w str,
        ops: Vec<&'w DocOp>,
    }
    let mut docs: Vec<Folded<'_>> = Vec::new();
    let mut position: HashMap<(&str, &str), usize> = HashMap::new();
    for (c, w) in planned {
        let at = *position
            .entry((c.table.as_str(), w.id.as_str()))
            .or_insert_with(|| {
                docs.push(Folded {
                    collection: c,
                    id: &w.id,
                    ops: Vec::new(),
                });
                docs.len() - 1
            });
        docs[at].ops.push(&w.op);
    }
    // The current versions that updates apply to, locked.
    let mut to_read: ByTable<'_, &str> = BTreeMap::new();
    for doc in &docs {
        if matches!(doc.ops[0], DocOp::Update(_)) {
            let entry = to_read
                .entry(doc.collection.table.as_str())
                .or_insert_with(|| (doc.collection, Vec::new()));
            entry.1.push(doc.id);
        }
    }
    let mut current: HashMap<(&str, String), Document> = HashMap::new();
    for (table, (c, mut ids)) in to_read {
        ids.sort_unstable();
        for chunk in ids.chunks(rows_per_statement(1)) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let lock = match d {
                Dialect::Sqlite => "",
                _ => " FOR UPDATE",
            };
            let sql = format!(
                "SELECT id, doc FROM {} WHERE id IN ({marks}) ORDER BY id{lock}",
                c.table
            );
            let params: Vec<SqlValue> = chunk
                .iter()
                .map(|id| SqlValue::Text(id.to_string()))
                .collect();
            for row in conn.query(&sql, &params)? {
                current.insert((table, row.get::<String>(0)?), parse_doc(&row.values()[1])?);
            }
        }
    }
    // Each document's operations in order; what is left to write.
    let mut puts: ByTable<'_, (&str, Document)> = BTreeMap::new();
    let mut deletes: ByTable<'_, &str> = BTreeMap::new();
    for doc in docs {
        let table = doc.collection.table.as_str();
        let mut state = current.remove(&(table, doc.id.to_string()));
        let (mut changed, mut deleted) = (false, false);
        for op in doc.ops {
            match op {
                DocOp::Put(new) => {
                    state = Some(new.clone());
                    changed = true;
                }
                DocOp::Delete => {
                    state = None;
                    deleted = true;
                }
                DocOp::Update(changes) => {
                    // An update of a missing document changes nothing, as `update_in` does.
                    if let Some(document) = state.as_mut() {
                        changes.apply(document)?;
                        changed = true;
                    }
                }
                DocOp::Insert(_) => unreachable!("inserts are not folded"),
            }
        }
        match state {
            Some(document) if changed => {
                let entry = puts
                    .entry(table)
                    .or_insert_with(|| (doc.collection, Vec::new()));
                entry.1.push((doc.id, document));
            }
            None if deleted => {
                let entry = deletes
                    .entry(table)
                    .or_insert_with(|| (doc.collection, Vec::new()));
                entry.1.push(doc.id);
            }
            _ => {}
        }
    }
    for (_, (c, mut rows)) in puts {
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let per_row = 2 + c.fields.len();
        for chunk in rows.chunks(rows_per_statement(per_row)) {
            let mut params = Vec::with_capacity(chunk.len() * per_row);
            for (id, document) in chunk {
                params.extend(c.row_params(id, document)?);
            }
            conn.execute(&c.put_rows(chunk.len()), &params)?;
        }
    }
    for (_, (c, mut ids)) in deletes {
        ids.sort_unstable();
        for chunk in ids.chunks(rows_per_statement(1)) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!("DELETE FROM {} WHERE id IN ({marks})", c.table);
            let params: Vec<SqlValue> = chunk
                .iter()
                .map(|id| SqlValue::Text(id.to_string()))
                .collect();
            conn.execute(&sql, &params)?;
        }
    }
    Ok(())
}

/// A data store over a SQL backend: the documents and SQL faces for every [`Engine`].
pub(crate) struct SqlBacked<E: Engine> {
    engine: E,
    pool: Pool<E::Conn>,
    /// Serializes writes in the process where the backend has a single writer (SQLite: waiting for
    /// an in-process lock is fairer and quicker than SQLite's sleeping busy handler).
    writer: Option<Arc<TimedLock>>,
    timeout: Duration,
    collections: RwLock<HashMap<String, Arc<Collection>>>,
    catalog_ready: AtomicBool,
}

/// A connection for a write, with the writer lock where the backend has one.
struct WriteConn<'s, C: ServerSide> {
    conn: Pooled<'s, C>,
    _writer: Option<TimedGuard<'s>>,
}

impl<E: Engine> SqlBacked<E> {
    pub(crate) fn new(
        engine: E,
        pool_size: usize,
        timeout: Duration,
        writer: Option<Arc<TimedLock>>,
    ) -> SqlBacked<E> {
        SqlBacked {
            engine,
            pool: Pool::new(pool_size, timeout),
            writer,
            timeout,
            collections: RwLock::new(HashMap::new()),
            catalog_ready: AtomicBool::new(false),
        }
    }

    /// Opens one connection to check that the store is reachable, and keeps it in the pool.
    pub(crate) fn check_reachable(&self) -> Result<()> {
        self.read_conn().map(drop)
    }

    fn read_conn(&self) -> Result<Pooled<'_, E::Conn>> {
        self.pool.get(|| self.engine.connect())
    }

    /// A connection on which `first` succeeded: a statement without effect if it fails (a
    /// read, or BEGIN). A connection that sat idle may have died with its server (a restart
    /// closes every session): `first` then runs once more on a new connection, which fails the
    /// same way only if the server is really away, so a restart does not cost a request per
    /// pooled connection an error.
    fn conn_where<T>(
        &self,
        first: impl Fn(&mut E::Conn) -> Result<T>,
    ) -> Result<(Pooled<'_, E::Conn>, T)> {
        let mut conn = self.read_conn()?;
        let r = first(&mut conn);
        match conn.check(r) {
            Err(StoreError::Unavailable(_)) if conn.reused() => {
                drop(conn);
                let mut conn = self.read_conn()?;
                let r = first(&mut conn);
                let value = conn.check(r)?;
                Ok((conn, value))
            }
            r => r.map(|value| (conn, value)),
        }
    }

    /// [`conn_where`](Self::conn_where) for a read that stands alone.
    fn read<T>(&self, read: impl Fn(&mut E::Conn) -> Result<T>) -> Result<T> {
        self.conn_where(read).map(|(_, value)| value)
    }

    fn write_conn(&self) -> Result<WriteConn<'_, E::Conn>> {
        let writer = self.writer()?;
        Ok(WriteConn {
            conn: self.read_conn()?,
            _writer: writer,
        })
    }

    /// The single writer's turn, on a data store that has one (SQLite).
    fn writer(&self) -> Result<Option<TimedGuard<'_>>> {
        self.writer
            .as_ref()
            .map(|lock| lock.acquire(self.timeout))
            .transpose()
    }

    /// Runs `body` in a transaction on a write connection: commit on Ok, rollback on Err.
    fn in_transaction<T>(&self, body: impl FnOnce(&mut E::Conn) -> Result<T>) -> Result<T> {
        let mut w = self.write_conn()?;
        let conn = &mut w.conn;
        let begun = conn.begin(Isolation::ReadCommitted);
        conn.check(begun)?;
        let r = body(conn);
        let r = conn.check(r);
        match r {
            Ok(v) => {
                let committed = conn.commit();
                let committed = conn.check(committed);
                if committed.is_err() && !conn.is_broken() && conn.rollback().is_err() {
                    conn.mark_broken();
                }
                committed.map(|()| v)
            }
            Err(e) => {
                if !conn.is_broken() && conn.rollback().is_err() {
                    conn.mark_broken();
                }
                Err(e)
            }
        }
    }

    fn ensure_catalog(&self) -> Result<()> {
        if self.catalog_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let sql = match E::DIALECT {
            Dialect::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {CATALOG_TABLE} (name VARCHAR(64) NOT NULL PRIMARY KEY, indexed TEXT NOT NULL) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            ),
            _ => format!("CREATE TABLE IF NOT EXISTS {CATALOG_TABLE} (name TEXT PRIMARY KEY, indexed TEXT NOT NULL)"),
        };
        self.ddl(&sql)?;
        self.catalog_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Runs DDL on a write connection. PostgreSQL may report a unique violation when two sessions
    /// create the same table at once (`IF NOT EXISTS` is not atomic there): try again.
    fn ddl(&self, sql: &str) -> Result<()> {
        let mut attempt = 0;
        loop {
            let mut w = self.write_conn()?;
            let r = w.conn.batch(sql);
            match w.conn.check(r) {
                Err(StoreError::Constraint(_) | StoreError::Conflict(_)) if attempt < 3 => {
                    attempt += 1
                }
                r => return r,
            }
        }
    }

    fn catalog_lookup(&self, name: &str) -> Result<Option<String>> {
        self.ensure_catalog()?;
        let sql = format!("SELECT indexed FROM {CATALOG_TABLE} WHERE name = ?");
        let rows = self.read(|conn| conn.query(&sql, &[SqlValue::Text(name.to_owned())]))?;
        rows.first().map(|r| r.get::<String>(0)).transpose()
    }

    fn collection(&self, name: &str) -> Result<Arc<Collection>> {
        if let Some(c) = self
            .collections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Ok(c.clone());
        }
        validate_collection_name(name)?;
        let Some(entry) = self.catalog_lookup(name)? else {
            return Err(StoreError::Invalid(format!(
                "no collection named {name:?}; create it first"
            )));
        };
        let c = Arc::new(Collection::new(
            E::DIALECT,
            name,
            indexed_from_json(&entry)?,
        ));
        self.collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), c.clone());
        Ok(c)
    }

    fn scan_sql(
        &self,
        c: &Collection,
        field: Option<&str>,
        from: Bound<&Value>,
        to: Bound<&Value>,
        limit: usize,
    ) -> Result<(String, Vec<SqlValue>)> {
        let indexed = field.map(|name| c.field(name)).transpose()?;
        let col = match indexed {
            None => "id".to_owned(),
            Some(f) => quote(E::DIALECT, &column_name(&f.name)),
        };
        let to_param = |v: &Value| -> Result<SqlValue> {
            match (indexed, v) {
                (None, Value::String(s)) => Ok(SqlValue::Text(s.clone())),
                (None, other) => Err(StoreError::Invalid(format!(
                    "a bound on the id must be a string, not {other}"
                ))),
                (Some(f), v) => Ok(index_param(Some(key_of(v, f)?))),
            }
        };
        let mut conds = vec![format!("{col} IS NOT NULL")];
        let mut params = Vec::new();
        for (bound, incl, excl) in [(from, ">=", ">"), (to, "<=", "<")] {
            match bound {
                Bound::Included(v) => {
                    conds.push(format!("{col} {incl} ?"));
                    params.push(to_param(v)?);
                }
                Bound::Excluded(v) => {
                    conds.push(format!("{col} {excl} ?"));
                    params.push(to_param(v)?);
                }
                Bound::Unbounded => {}
            }
        }
        let order = if field.is_some() {
            format!("{col}, id")
        } else {
            "id".to_owned()
        };
        let limit = limit.min(i64::MAX as usize);
        let sql = format!(
            "SELECT id, doc FROM {} WHERE {} ORDER BY {order} LIMIT {limit}",
            c.table,
            conds.join(" AND ")
        );
        Ok((sql, params))
    }

    /// A document by id, read from its column with `parse`.
    fn get_parsed<T>(
        &self,
        coll: &str,
        id: &str,
        parse: fn(SqlValue) -> Result<T>,
    ) -> Result<Option<T>> {
        let c = self.collection(coll)?;
        validate_id(id)?;
        let rows = self.read(|conn| conn.query(&c.get, &[SqlValue::Text(id.to_owned())]))?;
        rows.into_iter()
            .next()
            .and_then(|row| row.into_values().into_iter().next())
            .map(parse)
            .transpose()
    }

    /// Documents by id, in the order of `ids`, read from their column with `parse`.
    fn get_many_parsed<T: Clone>(
        &self,
        coll: &str,
        ids: &[&str],
        parse: fn(SqlValue) -> Result<T>,
    ) -> Result<Vec<Option<T>>> {
        let c = self.collection(coll)?;
        for id in ids {
            validate_id(id)?;
        }
        let mut found: HashMap<String, T> = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!("SELECT id, doc FROM {} WHERE id IN ({marks})", c.table);
            let params: Vec<SqlValue> = chunk
                .iter()
                .map(|id| SqlValue::Text((*id).to_owned()))
                .collect();
            for row in self.read(|conn| conn.query(&sql, &params))? {
                let id = row.get::<String>(0)?;
                let doc = row.into_values().swap_remove(1);
                found.insert(id, parse(doc)?);
            }
        }
        Ok(ids.iter().map(|id| found.get(*id).cloned()).collect())
    }
}

impl<E: Engine> DocumentStore for SqlBacked<E> {
    fn create_collection(&self, name: &str, indexed: &[IndexedField]) -> Result<()> {
        validate_collection_name(name)?;
        validate_indexed(indexed)?;
        let wanted = Collection::new(E::DIALECT, name, indexed.to_vec());
        let differs = |existing: &str| {
            StoreError::Invalid(format!(
                "collection {name:?} exists with indexed fields {existing}, not {}",
                wanted.catalog_entry
            ))
        };
        if let Some(c) = self
            .collections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return if c.catalog_entry == wanted.catalog_entry {
                Ok(())
            } else {
                Err(differs(&c.catalog_entry))
            };
        }
        let existing = match self.catalog_lookup(name)? {
            Some(existing) => existing,
            None => {
                self.ddl(&wanted.create_sql(E::DIALECT, name))?;
                let ignore = match E::DIALECT {
                    Dialect::Sqlite => "INSERT OR IGNORE INTO",
                    Dialect::Postgres => "INSERT INTO",
                    Dialect::MySql => "INSERT IGNORE INTO",
                };
                let conflict = if E::DIALECT == Dialect::Postgres {
                    " ON CONFLICT DO NOTHING"
                } else {
                    ""
                };
                let sql =
                    format!("{ignore} {CATALOG_TABLE} (name, indexed) VALUES (?, ?){conflict}");
                let mut w = self.write_conn()?;
                let r = w.conn.execute(
                    &sql,
                    &[
                        SqlValue::Text(name.to_owned()),
                        SqlValue::Text(wanted.catalog_entry.clone()),
                    ],
                );
                w.conn.check(r)?;
                drop(w);
                self.catalog_lookup(name)?.unwrap_or_default()
            }
        };
        if existing != wanted.catalog_entry {
            return Err(differs(&existing));
        }
        self.collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), Arc::new(wanted));
        Ok(())
    }

    fn drop_collection(&self, name: &str) -> Result<()> {
        validate_collection_name(name)?;
        self.ensure_catalog()?;
        self.ddl(&format!("DROP TABLE IF EXISTS {}", quote(E::DIALECT, name)))?;
        let mut w = self.write_conn()?;
        let r = w.conn.execute(
            &format!("DELETE FROM {CATALOG_TABLE} WHERE name = ?"),
            &[SqlValue::Text(name.to_owned())],
        );
        w.conn.check(r)?;
        self.collections
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(())
    }

    fn get(&self, coll: &str, id: &str) -> Result<Option<Document>> {
        self.get_parsed(coll, id, |v| parse_doc(&v))
    }

    fn get_many(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<Document>>> {
        self.get_many_parsed(coll, ids, |v| parse_doc(&v))
    }

    fn get_text(&self, coll: &str, id: &str) -> Result<Option<DocumentText>> {
        self.get_parsed(coll, id, doc_text)
    }

    fn get_many_text(&self, coll: &str, ids: &[&str]) -> Result<Vec<Option<DocumentText>>> {
        self.get_many_parsed(coll, ids, doc_text)
    }

    fn insert(&self, coll: &str, id: &str, doc: &Document) -> Result<()> {
        let c = self.collection(coll)?;
        validate_id(id)?;
        let params = c.row_params(id, doc)?;
        let mut w = self.write_conn()?;
        let r = w.conn.execute(&c.insert, &params);
        w.conn.check(r).map(drop)
    }

    fn put(&self, coll: &str, id: &str, doc: &Document) -> Result<()> {
        let c = self.collection(coll)?;
        validate_id(id)?;
        let params = c.row_params(id, doc)?;
        let mut w = self.write_conn()?;
        let r = w.conn.execute(&c.put, &params);
        w.conn.check(r).map(drop)
    }

    fn update(&self, coll: &str, id: &str, changes: &Changes) -> Result<Option<Document>> {
        let c = self.collection(coll)?;
        validate_id(id)?;
        self.in_transaction(|conn| update_in(conn, &c, id, changes))
    }

    fn delete(&self, coll: &str, id: &str) -> Result<bool> {
        let c = self.collection(coll)?;
        validate_id(id)?;
        let mut w = self.write_conn()?;
        let r = w.conn.execute(&c.delete, &[SqlValue::Text(id.to_owned())]);
        Ok(w.conn.check(r)? > 0)
    }

    fn scan(
        &self,
        coll: &str,
        field: Option<&str>,
        from: Bound<&Value>,
        to: Bound<&Value>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>> {
        let c = self.collection(coll)?;
        let (sql, params) = self.scan_sql(&c, field, from, to, limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|conn| conn.query(&sql, &params))?
            .into_iter()
            .map(|row| Ok((row.get::<String>(0)?, parse_doc(&row.values()[1])?)))
            .collect()
    }

    fn count(&self, coll: &str) -> Result<u64> {
        let c = self.collection(coll)?;
        let rows = self.read(|conn| conn.query(&c.count, &[]))?;
        rows.first()
            .ok_or_else(|| StoreError::Backend("COUNT(*) returned no row".into()))?
            .get::<u64>(0)
    }

    fn write_batch_fenced(
        &self,
        writes: &[DocWrite],
        fence: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        if writes.is_empty() {
            return fence();
        }
        let mut planned = Vec::with_capacity(writes.len());
        for w in writes {
            validate_id(&w.id)?;
            planned.push((self.collection(&w.collection)?, w));
        }
        let foldable = planned
            .iter()
            .all(|(_, w)| !matches!(w.op, DocOp::Insert(_)));
        self.in_transaction(|conn| {
            if foldable {
                write_folded(conn, E::DIALECT, &planned)?;
                return fence();
            }
            for (c, w) in &planned {
                let id = SqlValue::Text(w.id.clone());
                match &w.op {
                    DocOp::Insert(doc) => {
                        conn.execute(&c.insert, &c.row_params(&w.id, doc)?)?;
                    }
                    DocOp::Put(doc) => {
                        conn.execute(&c.put, &c.row_params(&w.id, doc)?)?;
                    }
                    DocOp::Update(changes) => {
                        update_in(conn, c, &w.id, changes)?;
                    }
                    DocOp::Delete => {
                        conn.execute(&c.delete, &[id])?;
                    }
                }
            }
            fence()
        })
    }

    fn insert_many(&self, coll: &str, docs: &[(String, Document)]) -> Result<()> {
        let c = self.collection(coll)?;
        let mut rows = Vec::with_capacity(docs.len());
        for (id, doc) in docs {
            validate_id(id)?;
            rows.push(c.row_params(id, doc)?);
        }
        if rows.is_empty() {
            return Ok(());
        }
        let per_row = 2 + c.fields.len();
        self.in_transaction(|conn| {
            for chunk in rows.chunks(rows_per_statement(per_row)) {
                let params: Vec<SqlValue> = chunk.iter().flat_map(|r| r.iter().cloned()).collect();
                conn.execute(&c.rows(chunk.len(), ""), &params)?;
            }
            Ok(())
        })
    }
}

/// A write in a transaction begun with `begin_read`.
fn read_only_write() -> StoreError {
    StoreError::Invalid(
        "execute in a read-only transaction (begin one with begin, not begin_read)".into(),
    )
}

/// A SQL transaction on a pooled connection (and SQLite's writer lock).
struct Tx<'s, C: Conn> {
    conn: Pooled<'s, C>,
    _writer: Option<TimedGuard<'s>>,
    open: bool,
    read_only: bool,
    /// The first error of a statement: it spoils the transaction on every backend, as on
    /// PostgreSQL (MySQL and SQLite would let it go on and commit the rest).
    failed: Option<StoreError>,
}

impl<C: Conn> Tx<'_, C> {
    fn run<T>(&mut self, f: impl FnOnce(&mut C) -> Result<T>) -> Result<T> {
        if let Some(first) = &self.failed {
            return Err(StoreError::Invalid(format!(
                "the transaction already failed ({first}); roll it back"
            )));
        }
        let r = f(&mut self.conn);
        let r = self.conn.check(r);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Rolls back unless the connection is lost or in doubt (it is closed then, which rolls back).
    fn end(&mut self) -> Result<()> {
        self.open = false;
        if self.conn.is_broken() {
            return Ok(());
        }
        let r = self.conn.rollback();
        if r.is_err() {
            self.conn.mark_broken();
        }
        r
    }
}

impl<C: Conn> SqlTransaction for Tx<'_, C> {
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>> {
        self.run(|c| c.query(sql, params))
    }

    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64> {
        if self.read_only {
            return Err(read_only_write());
        }
        self.run(|c| c.execute(sql, params))
    }

    fn execute_all(&mut self, statements: &[(&str, &[SqlValue])]) -> Result<Vec<u64>, Failed> {
        if self.read_only {
            return Err(Failed::first(read_only_write()));
        }
        // An error before any statement ran (the transaction failed already) is the first's.
        let (mut index, mut changed) = (0, Vec::new());
        self.run(|c| {
            c.execute_all(statements).map_err(|failed| {
                (index, changed) = (failed.index, failed.changed);
                failed.error
            })
        })
        .map_err(|error| Failed {
            index,
            error,
            changed,
        })
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        if let Some(first) = self.failed.take() {
            let _ = self.end();
            return Err(first);
        }
        self.open = false;
        let r = self.conn.commit();
        let r = self.conn.check(r);
        if r.is_err() && !self.conn.is_broken() && self.conn.rollback().is_err() {
            self.conn.mark_broken();
        }
        r
    }

    fn rollback(mut self: Box<Self>) -> Result<()> {
        let r = self.end();
        self.conn.check(r)
    }
}

impl<C: Conn> Drop for Tx<'_, C> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.end();
        }
    }
}

impl<E: Engine> SqlStore for SqlBacked<E> {
    fn dialect(&self) -> Dialect {
        E::DIALECT
    }

    fn begin(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>> {
        let _writer = self.writer()?;
        let (conn, ()) = self.conn_where(|conn| conn.begin(isolation))?;
        Ok(Box::new(Tx {
            conn,
            _writer,
            open: true,
            read_only: false,
            failed: None,
        }))
    }

    fn begin_read(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>> {
        let (conn, ()) = self.conn_where(|conn| conn.begin_read(isolation))?;
        Ok(Box::new(Tx {
            conn,
            _writer: None,
            open: true,
            read_only: true,
            failed: None,
        }))
    }

    fn execute_batch(&self, sql: &str) -> Result<()> {
        let mut w = self.write_conn()?;
        let r = w.conn.batch(sql);
        w.conn.check(r)
    }
}

impl<E: Engine> DataStore for SqlBacked<E> {
    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn settle(&self) -> Result<()> {
        let sessions = self.pool.take_in_doubt();
        if sessions.is_empty() {
            return Ok(());
        }
        let mut conn = match self.read_conn() {
            Ok(conn) => conn,
            Err(e) => {
                self.pool.keep_in_doubt(sessions);
                return Err(e);
            }
        };
        let mut left = Vec::new();
        let mut failure = None;
        for session in sessions {
            if failure.is_some() {
                left.push(session);
                continue;
            }
            let ended = E::end_session(&mut conn, &session);
            match conn.check(ended) {
                Ok(true) => {}
                Ok(false) => left.push(session),
                Err(e) => {
                    failure = Some(e);
                    left.push(session);
                }
            }
        }
        let still = left.len();
        self.pool.keep_in_doubt(left);
        match failure {
            Some(e) => Err(e),
            None if still > 0 => Err(StoreError::Unavailable(format!(
                "{still} server sessions of connections given up on are still ending"
            ))),
            None => Ok(()),
        }
    }
}
