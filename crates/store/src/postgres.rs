//! PostgreSQL, without TLS.
//!
//! Each connection is a `tokio-postgres` client with a private single-threaded tokio runtime that the
//! calling thread drives while it waits, as the synchronous `postgres` crate does; but every call is
//! bounded by a deadline (which the `postgres` crate cannot do), so a server that stops answering
//! gives [`StoreError::Timeout`] shortly after the timeout and the connection is closed. The server
//! bounds lock waits (`lock_timeout` = timeout: [`StoreError::Conflict`]) and statements
//! (`statement_timeout` = timeout + 50 ms: [`StoreError::Timeout`]); the client gives up 250 ms after
//! the timeout. Statements are prepared once per connection and cached. Calls made from inside an
//! async runtime (where blocking on another runtime is not allowed) are driven from a helper thread.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;
use tokio_postgres::types::{to_sql_checked, Format, FromSql, IsNull, Kind, ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use crate::backend::{wait_until_gone, Conn, Engine};
use crate::error::{Result, StoreError};
use crate::pool::{ServerSession, ServerSide};
use crate::sql::{rewrite_placeholders, Dialect, Failed, Isolation, Row, SqlValue};

/// How long after the timeout the client gives up on a call the server did not answer.
const CLIENT_SLACK: Duration = Duration::from_millis(250);
/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 256;

pub(crate) struct Postgres {
    config: tokio_postgres::Config,
    timeout: Duration,
}

impl Postgres {
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Postgres> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Invalid(format!("bad PostgreSQL URL: {e}")))?;
        let ms = timeout.as_millis().max(1);
        // Options given in the URL come after ours, so they win (`?options=-c%20statement_timeout%3D0`).
        let mut options = format!("-c statement_timeout={} -c lock_timeout={ms}", ms + 50);
        if let Some(given) = config.get_options() {
            options = format!("{options} {given}");
        }
        config.connect_timeout(timeout).options(options);
        if config.get_application_name().is_none() {
            config.application_name("cads");
        }
        Ok(Postgres { config, timeout })
    }
}

/// Drives `fut` on `rt` from the calling thread (from a helper thread when the caller is inside
/// a runtime already).
fn drive<F: Future + Send>(rt: &Runtime, fut: F) -> Result<F::Output>
where
    F::Output: Send,
{
    if Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(|| rt.block_on(fut)).join())
            .map_err(|_| StoreError::Backend("PostgreSQL call panicked".into()))
    } else {
        Ok(rt.block_on(fut))
    }
}

/// Drives `fut` on `rt` from the calling thread for at most `timeout + CLIENT_SLACK`.
fn call<T: Send, F>(rt: &Runtime, timeout: Duration, fut: F) -> Result<T>
where
    F: Future<Output = Result<T, tokio_postgres::Error>> + Send,
{
    let wait = timeout + CLIENT_SLACK;
    match drive(rt, async move { tokio::time::timeout(wait, fut).await })? {
        Ok(r) => r.map_err(|e| map_error(&e, timeout)),
        Err(_) => Err(StoreError::Timeout(timeout)),
    }
}

impl Engine for Postgres {
    type Conn = PgConn;
    const DIALECT: Dialect = Dialect::Postgres;

    fn connect(&self) -> Result<PgConn> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(format!("cannot start a PostgreSQL runtime: {e}")))?;
        let config = &self.config;
        let connected = call(&rt, self.timeout, async move {
            let (client, connection) = config.connect(NoTls).await?;
            let task = tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok((client, task))
        });
        let (client, task) = match connected {
            Ok(c) => c,
            Err(e) => {
                rt.shutdown_background();
                return Err(match e {
                    StoreError::Timeout(_) => StoreError::Unavailable(format!(
                        "PostgreSQL: no connection within {:?}",
                        self.timeout
                    )),
                    StoreError::Backend(m) | StoreError::Invalid(m) => StoreError::Unavailable(m),
                    e => e,
                });
            }
        };
        let mut conn = PgConn {
            client,
            task,
            rt: Some(rt),
            statements: HashMap::new(),
            timeout: self.timeout,
            session: None,
        };
        let me = conn.query(
            "SELECT pid::text, backend_start::text FROM pg_stat_activity \
             WHERE pid = pg_backend_pid()",
            &[],
        )?;
        conn.session = me.first().and_then(|row| {
            Some(ServerSession {
                id: row.get::<String>(0).ok()?.parse().ok()?,
                started: row.get::<String>(1).ok()?,
            })
        });
        Ok(conn)
    }

    /// Terminates the backend (pid and start time, since pids are reused) and waits, up to the
    /// timeout, until it is gone.
    fn end_session(conn: &mut PgConn, session: &ServerSession) -> Result<bool> {
        let params = [
            SqlValue::Text(session.id.to_string()),
            SqlValue::Text(session.started.clone()),
        ];
        let running = "FROM pg_stat_activity WHERE pid::text = ? AND backend_start::text = ?";
        conn.query(
            &format!("SELECT pg_terminate_backend(pid) {running}"),
            &params,
        )?;
        let count = format!("SELECT count(*) {running}");
        wait_until_gone(conn.timeout, || {
            let rows = conn.query(&count, &params)?;
            rows.first().map_or(Ok(0), |row| row.get(0))
        })
    }
}

pub(crate) struct PgConn {
    client: Client,
    /// Drives the connection while a call waits; aborted on drop, which closes the socket even if
    /// the server stopped answering.
    task: JoinHandle<()>,
    rt: Option<Runtime>,
    statements: HashMap<String, Statement>,
    timeout: Duration,
    /// The backend serving this connection.
    session: Option<ServerSession>,
}

impl ServerSide for PgConn {
    fn server_session(&self) -> Option<ServerSession> {
        self.session.clone()
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        self.task.abort();
        // Allowed anywhere, even inside another runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl PgConn {
    fn call<T: Send>(
        &self,
        fut: impl Future<Output = Result<T, tokio_postgres::Error>> + Send,
    ) -> Result<T> {
        call(
            self.rt.as_ref().expect("present until drop"),
            self.timeout,
            fut,
        )
    }

    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let (pg_sql, _) = rewrite_placeholders(sql);
        let st = self.call(self.client.prepare(&pg_sql))?;
        if self.statements.len() >= STATEMENT_CACHE {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), st.clone());
        Ok(st)
    }

    fn bound(&mut self, sql: &str, params: &[SqlValue]) -> Result<(Statement, Vec<PgParam>)> {
        let st = self.statement(sql)?;
        if st.params().len() != params.len() {
            return Err(StoreError::Invalid(format!(
                "the statement has {} parameters, {} given",
                st.params().len(),
                params.len()
            )));
        }
        Ok((st, params.iter().cloned().map(PgParam).collect()))
    }
}

impl Conn for PgConn {
    fn query(&mut self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>> {
        let (st, params) = self.bound(sql, params)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = self.call(self.client.query(&st, &refs))?;
        let names: Arc<[String]> = st.columns().iter().map(|c| c.name().to_owned()).collect();
        let types: Vec<&Type> = st.columns().iter().map(|c| c.type_()).collect();
        rows.iter()
            .map(|row| {
                let mut values = Vec::with_capacity(types.len());
                for (i, ty) in types.iter().enumerate() {
                    let raw: Raw<'_> = row.try_get(i).map_err(|e| map_error(&e, self.timeout))?;
                    values.push(decode(ty, raw.0)?);
                }
                Ok(Row::new(names.clone(), values))
            })
            .collect()
    }

    fn execute(&mut self, sql: &str, params: &[SqlValue]) -> Result<u64> {
        let (st, params) = self.bound(sql, params)?;
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        self.call(self.client.execute(&st, &refs))
    }

    /// One pipeline: every statement is sent before any reply is read. Each is prepared first
    /// (once per connection, as for `execute`). The client waits up to `timeout + CLIENT_SLACK`
    /// for each reply in turn, as it would for each statement run alone: the server bounds every
    /// statement's lock waits and running time, not the pipeline's.
    fn execute_all(&mut self, statements: &[(&str, &[SqlValue])]) -> Result<Vec<u64>, Failed> {
        let mut bound = Vec::with_capacity(statements.len());
        for (index, (sql, params)) in statements.iter().enumerate() {
            // Nothing has been sent yet: a statement that does not prepare fails alone.
            bound.push(self.bound(sql, params).map_err(|error| Failed {
                index,
                error,
                changed: Vec::new(),
            })?);
        }
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> = bound
            .iter()
            .map(|(_, params)| params.iter().map(|p| p as &(dyn ToSql + Sync)).collect())
            .collect();
        let client = &self.client;
        let replies = bound
            .iter()
            .zip(&refs)
            .map(|((st, _), params)| Box::pin(client.execute(st, params)))
            .collect();
        let rt = self.rt.as_ref().expect("present until drop");
        let outcomes =
            drive(rt, in_order(replies, self.timeout + CLIENT_SLACK)).map_err(Failed::first)?;
        let mut changed = Vec::with_capacity(outcomes.len());
        for (index, outcome) in outcomes.into_iter().enumerate() {
            let error = match outcome {
                Some(Ok(rows)) => {
                    changed.push(rows);
                    continue;
                }
                Some(Err(e)) => map_error(&e, self.timeout),
                None => StoreError::Timeout(self.timeout),
            };
            return Err(Failed {
                index,
                error,
                changed,
            });
        }
        Ok(changed)
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        let transaction_control = sql.eq_ignore_ascii_case("COMMIT")
            || sql.eq_ignore_ascii_case("ROLLBACK")
            || sql.starts_with("BEGIN");
        if !transaction_control {
            // Table definitions may change: prepare again.
            self.statements.clear();
        }
        self.call(self.client.batch_execute(sql))
    }

    fn begin(&mut self, isolation: Isolation) -> Result<()> {
        self.batch(&format!("BEGIN ISOLATION LEVEL {}", isolation.sql()))
    }

    fn begin_read(&mut self, isolation: Isolation) -> Result<()> {
        self.batch(&format!(
            "BEGIN ISOLATION LEVEL {} READ ONLY",
            isolation.sql()
        ))
    }
}

/// Awaits `futures`, polling each pending one in the order given every time: the first round of
/// polls sends tokio-postgres's requests in that order, which is the order the server runs them.
/// Gives up once `patience` passes with none of them finishing; `None` for those unfinished.
async fn in_order<F: Future + Unpin>(
    mut futures: Vec<F>,
    patience: Duration,
) -> Vec<Option<F::Output>> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    loop {
        // Ready(true) when some finished and others wait, Ready(false) when all are done.
        let progress = std::future::poll_fn(|cx| {
            let (mut finished, mut pending) = (false, false);
            for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
                if output.is_none() {
                    match Pin::new(future).poll(cx) {
                        Poll::Ready(value) => {
                            *output = Some(value);
                            finished = true;
                        }
                        Poll::Pending => pending = true,
                    }
                }
            }
            if pending && !finished {
                Poll::Pending
            } else {
                Poll::Ready(pending)
            }
        });
        match tokio::time::timeout(patience, progress).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return outputs,
        }
    }
}

/// A column value as the server sent it (binary format), or NULL.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Raw(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

fn decode(ty: &Type, raw: Option<&[u8]>) -> Result<SqlValue> {
    let Some(b) = raw else {
        return Ok(SqlValue::Null);
    };
    let short = || StoreError::Backend(format!("short {} value from PostgreSQL", ty.name()));
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec())
            .map(SqlValue::Text)
            .map_err(|_| StoreError::Backend("PostgreSQL sent text that is not UTF-8".into()))
    };
    Ok(match *ty {
        Type::BOOL => SqlValue::Int(i64::from(*b.first().ok_or_else(short)? != 0)),
        Type::INT2 => SqlValue::Int(i16::from_be_bytes(b.try_into().map_err(|_| short())?).into()),
        Type::INT4 => SqlValue::Int(i32::from_be_bytes(b.try_into().map_err(|_| short())?).into()),
        Type::INT8 => SqlValue::Int(i64::from_be_bytes(b.try_into().map_err(|_| short())?)),
        Type::OID => SqlValue::Int(u32::from_be_bytes(b.try_into().map_err(|_| short())?).into()),
        Type::FLOAT4 => {
            SqlValue::Float(f32::from_be_bytes(b.try_into().map_err(|_| short())?).into())
        }
        Type::FLOAT8 => SqlValue::Float(f64::from_be_bytes(b.try_into().map_err(|_| short())?)),
        Type::TEXT
        | Type::VARCHAR
        | Type::BPCHAR
        | Type::NAME
        | Type::UNKNOWN
        | Type::JSON
        | Type::CHAR
        | Type::XML => text(b)?,
        Type::JSONB => text(b.get(1..).ok_or_else(short)?)?,
        Type::BYTEA => SqlValue::Bytes(b.to_vec()),
        Type::NUMERIC => SqlValue::Text(numeric_text(b).ok_or_else(short)?),
        Type::DATE => SqlValue::Text(date_text(
            i32::from_be_bytes(b.try_into().map_err(|_| short())?).into(),
        )),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => SqlValue::Text(timestamp_text(i64::from_be_bytes(
            b.try_into().map_err(|_| short())?,
        ))),
        Type::TIME => SqlValue::Text(time_text(i64::from_be_bytes(
            b.try_into().map_err(|_| short())?,
        ))),
        Type::UUID => {
            let mut s = String::with_capacity(36);
            for (i, byte) in b.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    s.push('-');
                }
                let _ = write!(s, "{byte:02x}");
            }
            SqlValue::Text(s)
        }
        _ if matches!(ty.kind(), Kind::Enum(_)) || ty.name() == "citext" => text(b)?,
        _ => {
            return Err(StoreError::Invalid(format!(
            "PostgreSQL type {} is not supported as a column value: cast it to text in the query",
            ty.name()
        )))
        }
    })
}

/// Days from 2000-01-01 (PostgreSQL's epoch) as `YYYY-MM-DD`.
fn date_text(days: i64) -> String {
    match days {
        d if d == i64::from(i32::MAX) => "infinity".into(),
        d if d == i64::from(i32::MIN) => "-infinity".into(),
        d => {
            let (y, m, day) = civil_from_days(d + 10_957);
            format!("{y:04}-{m:02}-{day:02}")
        }
    }
}

/// Microseconds from 2000-01-01 00:00 as `YYYY-MM-DD hh:mm:ss[.ffffff]` (UTC for TIMESTAMPTZ), the
/// form MySQL's DATETIME comes back in.
fn timestamp_text(micros: i64) -> String {
    match micros {
        i64::MAX => "infinity".into(),
        i64::MIN => "-infinity".into(),
        m => {
            let day = m.div_euclid(86_400_000_000);
            format!(
                "{} {}",
                date_text(day),
                time_text(m.rem_euclid(86_400_000_000))
            )
        }
    }
}

/// Microseconds since midnight as `hh:mm:ss[.ffffff]`.
fn time_text(micros: i64) -> String {
    let (secs, frac) = (micros / 1_000_000, micros % 1_000_000);
    let mut s = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if frac > 0 {
        let _ = write!(s, ".{frac:06}");
    }
    s
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The decimal text of a binary NUMERIC.
fn numeric_text(b: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])) };
    let ndigits = word(0)? as usize;
    let weight = word(2)? as i16 as i32;
    let sign = word(4)?;
    let dscale = word(6)? as usize;
    if b.len() < 8 + 2 * ndigits {
        return None;
    }
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        _ => {}
    }
    let digit = |i: i32| -> u16 {
        if i >= 0 && (i as usize) < ndigits {
            word(8 + 2 * i as usize).unwrap_or(0)
        } else {
            0
        }
    };
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    if weight < 0 {
        s.push('0');
    } else {
        for i in 0..=weight {
            if i == 0 {
                let _ = write!(s, "{}", digit(0));
            } else {
                let _ = write!(s, "{:04}", digit(i));
            }
        }
    }
    if dscale > 0 {
        let mut frac = String::new();
        let mut i = weight + 1;
        while frac.len() < dscale {
            let _ = write!(frac, "{:04}", digit(i));
            i += 1;
        }
        frac.truncate(dscale);
        s.push('.');
        s.push_str(&frac);
    }
    Some(s)
}

/// A parameter, encoded in binary when its type matches the column's, otherwise as text for the
/// server to convert (an integer for a NUMERIC column, a string for a DATE).
#[derive(Debug)]
struct PgParam(SqlValue);

fn text_like(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN
    )
}

impl PgParam {
    fn binary(&self, ty: &Type) -> bool {
        match &self.0 {
            SqlValue::Null => true,
            SqlValue::Int(_) => matches!(
                *ty,
                Type::INT2
                    | Type::INT4
                    | Type::INT8
                    | Type::OID
                    | Type::FLOAT4
                    | Type::FLOAT8
                    | Type::BOOL
            ),
            SqlValue::Float(_) => matches!(*ty, Type::FLOAT4 | Type::FLOAT8),
            SqlValue::Text(_) => text_like(ty) || matches!(*ty, Type::JSON | Type::JSONB),
            SqlValue::Bytes(_) => true,
        }
    }
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        f.to_string()
    }
}

impl ToSql for PgParam {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        let out_of_range = || -> Box<dyn StdError + Sync + Send> {
            format!("{:?} does not fit a {} parameter", self.0, ty.name()).into()
        };
        if !self.binary(ty) {
            // Text format: the server parses the value as a literal of the parameter's type.
            match &self.0 {
                SqlValue::Int(i) => out.put_slice(i.to_string().as_bytes()),
                SqlValue::Float(f) => out.put_slice(float_text(*f).as_bytes()),
                SqlValue::Text(s) => out.put_slice(s.as_bytes()),
                SqlValue::Null | SqlValue::Bytes(_) => unreachable!("always binary"),
            }
            return Ok(IsNull::No);
        }
        match (&self.0, ty) {
            (SqlValue::Null, _) => return Ok(IsNull::Yes),
            (SqlValue::Int(i), &Type::INT8) => out.put_i64(*i),
            (SqlValue::Int(i), &Type::INT4) => {
                out.put_i32((*i).try_into().map_err(|_| out_of_range())?)
            }
            (SqlValue::Int(i), &Type::INT2) => {
                out.put_i16((*i).try_into().map_err(|_| out_of_range())?)
            }
            (SqlValue::Int(i), &Type::OID) => {
                out.put_u32((*i).try_into().map_err(|_| out_of_range())?)
            }
            (SqlValue::Int(i), &Type::BOOL) => out.put_u8(u8::from(*i != 0)),
            (SqlValue::Int(i), &Type::FLOAT8) => out.put_f64(*i as f64),
            (SqlValue::Int(i), &Type::FLOAT4) => out.put_f32(*i as f32),
            (SqlValue::Float(f), &Type::FLOAT8) => out.put_f64(*f),
            (SqlValue::Float(f), &Type::FLOAT4) => out.put_f32(*f as f32),
            (SqlValue::Text(s), &Type::JSONB) => {
                out.put_u8(1);
                out.put_slice(s.as_bytes());
            }
            (SqlValue::Text(s), _) => out.put_slice(s.as_bytes()),
            (SqlValue::Bytes(b), &Type::BYTEA) => out.put_slice(b),
            (SqlValue::Bytes(b), ty) if text_like(ty) => {
                let s = std::str::from_utf8(b).map_err(|_| out_of_range())?;
                out.put_slice(s.as_bytes());
            }
            _ => return Err(out_of_range()),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();

    fn encode_format(&self, ty: &Type) -> Format {
        if self.binary(ty) {
            Format::Binary
        } else {
            Format::Text
        }
    }
}

/// Maps a PostgreSQL error (by SQLSTATE where the server sent one) to a [`StoreError`].
fn map_error(e: &tokio_postgres::Error, timeout: Duration) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let text = format!("{} ({code})", db.message());
        return match code {
            "40001" | "40P01" | "55P03" => StoreError::Conflict(text),
            // A name already taken in the catalog: what concurrent `CREATE ... IF NOT EXISTS`
            // statements meet (each checks, then both create), a uniqueness violation that
            // `create_if_absent` retries, as it does a 23505 on the catalog.
            "42P07" | "42710" => StoreError::Constraint(text),
            "57014" => StoreError::Timeout(timeout),
            "25006" | "53100" => StoreError::WriteRefused,
            "53300" | "3D000" => StoreError::Unavailable(text),
            c if c.starts_with("23") => StoreError::Constraint(text),
            c if c.starts_with("08") || c.starts_with("57P") || c.starts_with("28") => {
                StoreError::Unavailable(text)
            }
            c if c.starts_with("42")
                || c.starts_with("22")
                || c.starts_with("0A")
                || c.starts_with("21")
                || c.starts_with("2B") =>
            {
                StoreError::Invalid(text)
            }
            _ => StoreError::Backend(text),
        };
    }
    let mut text = e.to_string();
    if let Some(source) = e.source() {
        let _ = write!(text, ": {source}");
    }
    if e.is_closed()
        || text.starts_with("error communicating")
        || text.starts_with("error connecting")
        || text.starts_with("timeout waiting")
        || text.starts_with("authentication")
        || text.starts_with("unexpected message")
        || text.starts_with("error parsing response")
    {
        StoreError::Unavailable(text)
    } else if text.starts_with("error serializing")
        || text.starts_with("error deserializing")
        || text.starts_with("expected")
        || text.starts_with("invalid")
    {
        StoreError::Invalid(text)
    } else {
        StoreError::Backend(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].iter().chain(digits) {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b
    }

    #[test]
    fn dates() {
        assert_eq!(date_text(0), "2000-01-01");
        assert_eq!(date_text(-1), "1999-12-31");
        assert_eq!(date_text(59), "2000-02-29");
        assert_eq!(date_text(8825), "2024-02-29");
        assert_eq!(
            timestamp_text(8825 * 86_400_000_000 + 49_501_250_000),
            "2024-02-29 13:45:01.250000"
        );
        assert_eq!(timestamp_text(-1), "1999-12-31 23:59:59.999999");
        assert_eq!(time_text(3_600_000_000), "01:00:00");
    }

    #[test]
    fn numerics() {
        assert_eq!(
            numeric_text(&numeric(2, 0, 0, 2, &[12, 3400])).unwrap(),
            "12.34"
        );
        assert_eq!(
            numeric_text(&numeric(2, 1, 0x4000, 0, &[1, 2])).unwrap(),
            "-10002"
        );
        assert_eq!(numeric_text(&numeric(1, -1, 0, 4, &[5])).unwrap(), "0.0005");
        assert_eq!(
            numeric_text(&numeric(1, -2, 0, 6, &[500])).unwrap(),
            "0.000005"
        );
        assert_eq!(numeric_text(&numeric(0, 0, 0, 0, &[])).unwrap(), "0");
        assert_eq!(
            numeric_text(&numeric(1, 2, 0, 0, &[7])).unwrap(),
            "700000000"
        );
    }
}
