//! The SQL face: transactions of statements with `?` parameters, the same in every dialect
//! (DESIGN.md §6).

use std::fmt;
use std::sync::Arc;

use crate::error::{Result, StoreError};

/// The SQL dialect of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// SQLite 3 (bundled).
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Sqlite => "SQLite",
            Dialect::Postgres => "PostgreSQL",
            Dialect::MySql => "MySQL",
        })
    }
}

/// A parameter or a column value.
///
/// Column values come back as: integer and boolean types as `Int`; floating types as `Float`;
/// character types, JSON and exact decimals (`NUMERIC`, `DECIMAL`, as their decimal text) as `Text`;
/// binary types as `Bytes`; dates and times as `Text` (`YYYY-MM-DD`, `YYYY-MM-DD hh:mm:ss[.ffffff]`,
/// `hh:mm:ss[.ffffff]`; PostgreSQL's `TIMESTAMPTZ` in UTC; SQLite keeps whatever was stored). Other
/// PostgreSQL types (arrays, intervals, ...) are [`StoreError::Invalid`]: cast them to text in the
/// query. Parameters convert to whatever type the column or expression needs where the backend can
/// (an `Int` parameter for a `NUMERIC` column, a `Text` one for a `DATE`).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A 64-bit integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// A string.
    Text(String),
    /// A byte string.
    Bytes(Vec<u8>),
}

impl SqlValue {
    /// Whether this is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, SqlValue::Null)
    }
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}
impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Int(v.into())
    }
}
impl From<u32> for SqlValue {
    fn from(v: u32) -> Self {
        SqlValue::Int(v.into())
    }
}
impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Int(v.into())
    }
}
impl From<f64> for SqlValue {
    fn from(v: f64) -> Self {
        SqlValue::Float(v)
    }
}
impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}
impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}
impl From<&[u8]> for SqlValue {
    fn from(v: &[u8]) -> Self {
        SqlValue::Bytes(v.to_vec())
    }
}
impl From<Vec<u8>> for SqlValue {
    fn from(v: Vec<u8>) -> Self {
        SqlValue::Bytes(v)
    }
}
impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// A Rust type that a [`SqlValue`] converts to, for [`Row::get`].
pub trait FromSqlValue: Sized {
    /// Converts, or explains why not ([`StoreError::Invalid`]).
    fn from_sql_value(v: &SqlValue) -> Result<Self>;
}

fn mismatch(v: &SqlValue, wanted: &str) -> StoreError {
    StoreError::Invalid(format!("column value {v:?} is not {wanted}"))
}

impl FromSqlValue for SqlValue {
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        Ok(v.clone())
    }
}
impl FromSqlValue for i64 {
    /// From `Int`, or from `Text` holding an integer (a `NUMERIC` or `DECIMAL` with no fraction).
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        match v {
            SqlValue::Int(i) => Ok(*i),
            SqlValue::Text(s) => s.parse().map_err(|_| mismatch(v, "an integer")),
            _ => Err(mismatch(v, "an integer")),
        }
    }
}
impl FromSqlValue for i32 {
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        i64::from_sql_value(v)?
            .try_into()
            .map_err(|_| mismatch(v, "a 32-bit integer"))
    }
}
impl FromSqlValue for u64 {
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        i64::from_sql_value(v)?
            .try_into()
            .map_err(|_| mismatch(v, "a non-negative integer"))
    }
}
impl FromSqlValue for bool {
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        Ok(i64::from_sql_value(v)? != 0)
    }
}
impl FromSqlValue for f64 {
    /// From `Float`, `Int`, or `Text` holding a number (`NUMERIC`, `DECIMAL`).
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        match v {
            SqlValue::Float(f) => Ok(*f),
            SqlValue::Int(i) => Ok(*i as f64),
            SqlValue::Text(s) => s.parse().map_err(|_| mismatch(v, "a number")),
            _ => Err(mismatch(v, "a number")),
        }
    }
}
impl FromSqlValue for String {
    /// From `Text`, or `Bytes` holding UTF-8.
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        match v {
            SqlValue::Text(s) => Ok(s.clone()),
            SqlValue::Bytes(b) => String::from_utf8(b.clone()).map_err(|_| mismatch(v, "text")),
            _ => Err(mismatch(v, "text")),
        }
    }
}
impl FromSqlValue for Vec<u8> {
    /// From `Bytes` or `Text`.
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        match v {
            SqlValue::Bytes(b) => Ok(b.clone()),
            SqlValue::Text(s) => Ok(s.clone().into_bytes()),
            _ => Err(mismatch(v, "bytes")),
        }
    }
}
impl<T: FromSqlValue> FromSqlValue for Option<T> {
    /// None for NULL.
    fn from_sql_value(v: &SqlValue) -> Result<Self> {
        match v {
            SqlValue::Null => Ok(None),
            v => T::from_sql_value(v).map(Some),
        }
    }
}

/// A column of a [`Row`]: its position or its name.
pub trait ColumnIndex: fmt::Debug {
    /// The position of the column in `row`, if any.
    fn position(&self, row: &Row) -> Option<usize>;
}
impl ColumnIndex for usize {
    fn position(&self, row: &Row) -> Option<usize> {
        (*self < row.values.len()).then_some(*self)
    }
}
impl ColumnIndex for &str {
    /// The first column with this name, compared ignoring ASCII case.
    fn position(&self, row: &Row) -> Option<usize> {
        row.columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(self))
    }
}

/// A result row: values by position, with the column names of the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<SqlValue>,
}

impl Row {
    /// A row of these values under these column names (shared by every row of a result).
    pub fn new(columns: Arc<[String]>, values: Vec<SqlValue>) -> Row {
        debug_assert_eq!(columns.len(), values.len());
        Row { columns, values }
    }

    /// The number of columns.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The column names, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The values, in order.
    pub fn values(&self) -> &[SqlValue] {
        &self.values
    }

    /// The values, owned.
    pub fn into_values(self) -> Vec<SqlValue> {
        self.values
    }

    /// The value of a column (by position or name), if the column exists.
    pub fn value(&self, column: impl ColumnIndex) -> Option<&SqlValue> {
        column.position(self).map(|i| &self.values[i])
    }

    /// The value of a column converted to `T`: `row.get::<i64>(0)?`, `row.get::<Option<String>>("name")?`.
    /// A missing column or a value that does not convert is [`StoreError::Invalid`].
    pub fn get<T: FromSqlValue>(&self, column: impl ColumnIndex) -> Result<T> {
        match column.position(self) {
            Some(i) => T::from_sql_value(&self.values[i]),
            None => Err(StoreError::Invalid(format!(
                "no column {column:?} in the row"
            ))),
        }
    }
}

/// The isolation level of a SQL transaction. SQLite transactions are always serializable (they hold
/// the database's write lock from `BEGIN IMMEDIATE`); MySQL's `RepeatableRead` is InnoDB's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Isolation {
    /// Each statement sees what was committed before it began.
    #[default]
    ReadCommitted,
    /// The transaction sees one snapshot.
    RepeatableRead,
    /// As if the transactions ran one after another; conflicts are [`StoreError::Conflict`].
    Serializable,
}

impl Isolation {
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "READ COMMITTED",
            Isolation::RepeatableRead => "REPEATABLE READ",
            Isolation::Serializable => "SERIALIZABLE",
        }
    }
}

/// The SQL face of a data store: transactions of statements with parameters.
///
/// Statements use `?` for parameters in every dialect (they become `$1`, `$2`, ... for PostgreSQL,
/// except inside quoted strings, quoted identifiers and comments, so PostgreSQL's `?` JSON operators
/// are not available: use `jsonb_exists` and friends).
pub trait SqlStore: Send + Sync {
    /// The dialect statements must be written in.
    fn dialect(&self) -> Dialect;

    /// Begins a transaction. Dropping it without commit rolls it back.
    fn begin(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>>;

    /// Begins a read-only transaction: its `execute` fails with [`StoreError::Invalid`], and it
    /// never waits for writers (on SQLite it takes no writer lock), so readers can run while a
    /// writer holds its transaction open.
    fn begin_read(&self, isolation: Isolation) -> Result<Box<dyn SqlTransaction + '_>>;

    /// Runs a script of statements separated by `;` outside any transaction, without parameters
    /// (DDL: creating tables and indexes).
    fn execute_batch(&self, sql: &str) -> Result<()>;

    /// [`execute_batch`](Self::execute_batch) for `CREATE ... IF NOT EXISTS` statements that other
    /// threads or processes may run at the same moment: PostgreSQL fails one of two transactions
    /// creating the same table at once with a unique violation in its catalog (`pg_type`) instead
    /// of making it wait, and running the statements again then finds the table.
    fn create_if_absent(&self, sql: &str) -> Result<()> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.execute_batch(sql) {
                Err(StoreError::Constraint(_) | StoreError::Conflict(_)) if attempts < 5 => {}
                other => return other,
            }
        }
    }
}

/// The statement of [`SqlTransaction::execute_all`] that failed first.
#[derive(Debug)]
pub struct Failed {
    /// Its index among the statements given.
    pub index: usize,
    /// Why it failed.
    pub error: StoreError,
    /// The rows each statement before it changed (fewer entries when not all of them ran: a
    /// statement that PostgreSQL cannot prepare fails before any is sent).
    pub changed: Vec<u64>,
}

impl Failed {
    /// A failure before any statement ran (the store is down, the transaction failed already).
    pub fn first(error: StoreError) -> Failed {
        Failed {
            index: 0,
            error,
            changed: Vec::new(),
        }
    }
}

/// [`SqlTransaction::execute_all`] one statement at a time, through `execute`.
pub(crate) fn execute_each(
    statements: &[(&str, &[SqlValue])],
    mut execute: impl FnMut(&str, &[SqlValue]) -> Result<u64>,
) -> Result<Vec<u64>, Failed> {
    let mut changed = Vec::with_capacity(statements.len());
    for (index, (sql, params)) in statements.iter().enumerate() {
        match execute(sql, params) {
            Ok(rows) => changed.push(rows),
            Err(error) => {
                return Err(Failed {
                    index,
                    error,
                    changed,
                })
            }
        }
    }
    Ok(changed)
}

impl From<Failed> for StoreError {
    fn from(failed: Failed) -> StoreError {
        failed.error
    }
}

/// An open SQL transaction; it holds a connection until committed, rolled back or dropped. It may
/// move between threads, though a statement runs on the calling thread.
///
/// A statement that fails spoils the transaction on every backend, as PostgreSQL does: later
/// statements fail with [`StoreError::Invalid`], and [`SqlTransaction::commit`] rolls back and
/// returns the first error (so a caller that retries on [`StoreError::is_retryable`] at commit
/// does the right thing).
pub trait SqlTransaction: Send {
    /// Runs a statement that returns rows.
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>>;

    /// Runs a statement and returns the number of rows it inserted, updated or deleted (rows matched,
    /// also on MySQL).
    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64>;

    /// Runs `statements` in order, as many [`execute`](Self::execute) calls would, and returns
    /// the rows each changed. The first that fails is reported and spoils the transaction, which
    /// then keeps nothing (on PostgreSQL, statements after it may have been sent already, and
    /// run or fail inside it). On PostgreSQL they go in one pipeline: all are sent before any
    /// reply is read, one round trip for the lot instead of one each (the others run them one by
    /// one). For statements that do not depend on one another's results, such as the writes a
    /// buffered session replays.
    fn execute_all(&mut self, statements: &[(&str, &[SqlValue])]) -> Result<Vec<u64>, Failed> {
        execute_each(statements, |sql, params| self.execute(sql, params))
    }

    /// Commits. A serialization failure at commit is [`StoreError::Conflict`].
    fn commit(self: Box<Self>) -> Result<()>;

    /// Rolls back (as dropping the transaction does, which ignores errors).
    fn rollback(self: Box<Self>) -> Result<()>;
}

/// Rewrites `?` placeholders to PostgreSQL's `$1`, `$2`, ..., leaving `?` inside single-quoted
/// strings (also `E'..'` escapes), double-quoted identifiers, dollar-quoted strings and comments
/// alone. Returns the statement and the number of placeholders.
pub fn rewrite_placeholders(sql: &str) -> (String, usize) {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            b'?' => {
                out.push_str(&sql[copied..i]);
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
                i += 1;
                copied = i;
            }
            b'\'' => {
                let escapes = i > 0
                    && (b[i - 1] == b'E' || b[i - 1] == b'e')
                    && (i < 2 || !is_ident_byte(b[i - 2]));
                i += 1;
                while i < b.len() {
                    if escapes && b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == b'\'' {
                        i += 1;
                        if i < b.len() && b[i] == b'\'' {
                            i += 1;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 1;
                i += 2;
                while i < b.len() && depth > 0 {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
            }
            b'$' if i == 0 || !is_ident_byte(b[i - 1]) => {
                // A dollar quote: $tag$ ... $tag$ with tag empty or an identifier.
                let start = i;
                let mut j = i + 1;
                if j < b.len() && (b[j].is_ascii_alphabetic() || b[j] == b'_' || b[j] >= 0x80) {
                    j += 1;
                    while j < b.len() && is_ident_byte(b[j]) {
                        j += 1;
                    }
                }
                if j < b.len() && b[j] == b'$' {
                    let tag = &sql[start..=j];
                    match sql[j + 1..].find(tag) {
                        Some(end) => i = j + 1 + end + tag.len(),
                        None => i = b.len(),
                    }
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    (out, n)
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders() {
        let cases = [
            ("select ?", "select $1"),
            ("select ?, '?', ?", "select $1, '?', $2"),
            ("select 'it''s ?', ?", "select 'it''s ?', $1"),
            ("select E'\\' ?', ?", "select E'\\' ?', $1"),
            (
                "select \"a?\" from t where x = ?",
                "select \"a?\" from t where x = $1",
            ),
            ("select ? -- what?\n, ?", "select $1 -- what?\n, $2"),
            ("select /* ? /* ? */ ? */ ?", "select /* ? /* ? */ ? */ $1"),
            ("select $$ ? $$, ?", "select $$ ? $$, $1"),
            ("select $tag$ ? $tag$, ?", "select $tag$ ? $tag$, $1"),
            ("select $1x, ?", "select $1x, $1"),
            ("select x::int + ?", "select x::int + $1"),
            ("select 'unterminated ?", "select 'unterminated ?"),
        ];
        for (input, want) in cases {
            assert_eq!(rewrite_placeholders(input).0, want, "{input}");
        }
        assert_eq!(rewrite_placeholders("? ? ?").1, 3);
    }
}
