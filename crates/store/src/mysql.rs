//! MySQL and MariaDB, through the pure-Rust `mysql` crate without TLS.
//!
//! Statements run as server-side prepared statements (cached per connection). Each connection sets
//! `innodb_lock_wait_timeout` (whole seconds, at least 1: [`StoreError::Conflict`]) and the
//! statement limit (`max_statement_time` on MariaDB, `max_execution_time` for SELECTs on MySQL:
//! [`StoreError::Timeout`]) from the timeout, and its socket gives up reading or writing 250 ms after
//! the timeout, so a server that stops answering gives [`StoreError::Timeout`]. Connections report
//! rows matched, not rows changed (`CLIENT_FOUND_ROWS`), like the other backends.

use std::sync::Arc;
use std::time::Duration;

use mysql::consts::{CapabilityFlags, ColumnType};
use mysql::prelude::Queryable;
use mysql::{Opts, OptsBuilder, Params, Value};

use crate::backend::{wait_until_gone, Conn, Engine};
use crate::error::{Result, StoreError};
use crate::pool::{ServerSession, ServerSide};
use crate::sql::{Dialect, Isolation, Row, SqlValue};

const SOCKET_SLACK: Duration = Duration::from_millis(250);
/// The character set number of binary strings.
const BINARY_CHARSET: u16 = 63;

pub(crate) struct MySql {
    opts: Opts,
    timeout: Duration,
}

impl MySql {
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<MySql> {
        let url = match url.strip_prefix("mariadb://") {
            Some(rest) => format!("mysql://{rest}"),
            None => url.to_owned(),
        };
        let opts =
            Opts::from_url(&url).map_err(|e| StoreError::Invalid(format!("bad MySQL URL: {e}")))?;
        let mut builder = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(timeout))
            .read_timeout(Some(timeout + SOCKET_SLACK))
            .write_timeout(Some(timeout + SOCKET_SLACK))
            .tcp_nodelay(true)
            .stmt_cache_size(128)
            .additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS);
        if !url.contains("prefer_socket=") {
            builder = builder.prefer_socket(false);
        }
        Ok(MySql {
            opts: builder.into(),
            timeout,
        })
    }
}

impl Engine for MySql {
    type Conn = MyConn;
    const DIALECT: Dialect = Dialect::MySql;

    fn connect(&self) -> Result<MyConn> {
        let t = self.timeout;
        let mut conn = mysql::Conn::new(self.opts.clone()).map_err(|e| match map_error(e, t) {
            StoreError::Timeout(_) => {
                StoreError::Unavailable(format!("MySQL: no connection within {t:?}"))
            }
            StoreError::Backend(m) => StoreError::Unavailable(m),
            e => e,
        })?;
        let version: String = conn
            .query_first("SELECT VERSION()")
            .map_err(|e| map_error(e, t))?
            .unwrap_or_default();
        let lock_wait = t.as_secs_f64().ceil().max(1.0) as u64;
        let setup = if version.contains("MariaDB") {
            format!(
                "SET SESSION innodb_lock_wait_timeout = {lock_wait}, max_statement_time = {:.3}",
                t.as_secs_f64() + 0.05
            )
        } else {
            format!(
                "SET SESSION innodb_lock_wait_timeout = {lock_wait}, max_execution_time = {}",
                t.as_millis() + 50
            )
        };
        conn.query_drop(setup).map_err(|e| map_error(e, t))?;
        let session = conn
            .query_first::<i64, _>("SELECT CONNECTION_ID()")
            .map_err(|e| map_error(e, t))?
            .map(|id| ServerSession {
                id,
                started: String::new(),
            });
        Ok(MyConn {
            conn,
            timeout: t,
            session,
        })
    }

    /// Kills the connection's thread (ids are not reused while the server runs) and waits, up to
    /// the timeout, until it is gone.
    fn end_session(conn: &mut MyConn, session: &ServerSession) -> Result<bool> {
        match conn.batch(&format!("KILL {}", session.id)) {
            Ok(()) => {}
            // Unknown thread id: it has ended already.
            Err(StoreError::Backend(text)) if text.contains("1094") => return Ok(true),
            Err(e) => return Err(e),
        }
        wait_until_gone(conn.timeout, || {
            let rows = conn.query(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                &[SqlValue::Int(session.id)],
            )?;
            rows.first().map_or(Ok(0), |row| row.get(0))
        })
    }
}

pub(crate) struct MyConn {
    conn: mysql::Conn,
    timeout: Duration,
    /// The server thread serving this connection.
    session: Option<ServerSession>,
}

impl ServerSide for MyConn {
    fn server_session(&self) -> Option<ServerSession> {
        self.session.clone()
    }
}

fn param(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::NULL,
        SqlValue::Int(i) => Value::Int(*i),
        SqlValue::Float(f) => Value::Double(*f),
        SqlValue::Text(s) => Value::Bytes(s.as_bytes().to_vec()),
        SqlValue::Bytes(b) => Value::Bytes(b.clone()),
    }
}

fn params(values: &[SqlValue]) -> Params {
    if values.is_empty() {
        Params::Empty
    } else {
        Params::Positional(values.iter().map(param).collect())
    }
}

fn decode(v: Value, column: &mysql::Column) -> SqlValue {
    match v {
        Value::NULL => SqlValue::Null,
        Value::Int(i) => SqlValue::Int(i),
        Value::UInt(u) => match i64::try_from(u) {
            Ok(i) => SqlValue::Int(i),
            Err(_) => SqlValue::Text(u.to_string()),
        },
        Value::Float(f) => SqlValue::Float(f.into()),
        Value::Double(f) => SqlValue::Float(f),
        Value::Bytes(b) => {
            let textual = column.character_set() != BINARY_CHARSET
                || matches!(
                    column.column_type(),
                    ColumnType::MYSQL_TYPE_DECIMAL
                        | ColumnType::MYSQL_TYPE_NEWDECIMAL
                        | ColumnType::MYSQL_TYPE_JSON
                );
            if textual {
                match String::from_utf8(b) {
                    Ok(s) => SqlValue::Text(s),
                    Err(e) => SqlValue::Bytes(e.into_bytes()),
                }
            } else {
                SqlValue::Bytes(b)
            }
        }
        Value::Date(y, mo, d, h, mi, s, us) => {
            let mut text = format!("{y:04}-{mo:02}-{d:02}");
            if column.column_type() != ColumnType::MYSQL_TYPE_DATE {
                text.push_str(&format!(" {h:02}:{mi:02}:{s:02}"));
                if us > 0 {
                    text.push_str(&format!(".{us:06}"));
                }
            }
            SqlValue::Text(text)
        }
        Value::Time(neg, days, h, mi, s, us) => {
            let hours = days * 24 + u32::from(h);
            let mut text = format!("{}{hours:02}:{mi:02}:{s:02}", if neg { "-" } else { "" });
            if us > 0 {
                text.push_str(&format!(".{us:06}"));
            }
            SqlValue::Text(text)
        }
    }
}

impl Conn for MyConn {
    fn query(&mut self, sql: &str, values: &[SqlValue]) -> Result<Vec<Row>> {
        let t = self.timeout;
        let mut result = self
            .conn
            .exec_iter(sql, params(values))
            .map_err(|e| map_error(e, t))?;
        let columns: Vec<mysql::Column> = result.columns().as_ref().to_vec();
        let names: Arc<[String]> = columns.iter().map(|c| c.name_str().into_owned()).collect();
        let mut rows = Vec::new();
        for row in result.by_ref() {
            let row = row.map_err(|e| map_error(e, t))?;
            let values = row
                .unwrap()
                .into_iter()
                .zip(&columns)
                .map(|(v, c)| decode(v, c))
                .collect();
            rows.push(Row::new(names.clone(), values));
        }
        Ok(rows)
    }

    fn execute(&mut self, sql: &str, values: &[SqlValue]) -> Result<u64> {
        self.conn
            .exec_drop(sql, params(values))
            .map_err(|e| map_error(e, self.timeout))?;
        Ok(self.conn.affected_rows())
    }

    fn batch(&mut self, sql: &str) -> Result<()> {
        self.conn
            .query_drop(sql)
            .map_err(|e| map_error(e, self.timeout))
    }

    fn begin(&mut self, isolation: Isolation) -> Result<()> {
        self.batch(&format!(
            "SET TRANSACTION ISOLATION LEVEL {}; START TRANSACTION",
            isolation.sql()
        ))
    }

    fn begin_read(&mut self, isolation: Isolation) -> Result<()> {
        self.batch(&format!(
            "SET TRANSACTION ISOLATION LEVEL {}; START TRANSACTION READ ONLY",
            isolation.sql()
        ))
    }
}

/// Maps a MySQL error (by server error number where there is one) to a [`StoreError`].
fn map_error(e: mysql::Error, timeout: Duration) -> StoreError {
    use mysql::{DriverError, Error as E};
    let text = e.to_string();
    match e {
        E::MySqlError(ref m) => match m.code {
            1205 | 1213 => StoreError::Conflict(text),
            1062 | 1451 | 1452 | 1216 | 1217 | 1557 | 1586 | 1048 | 1364 | 3819 | 4025 => {
                StoreError::Constraint(text)
            }
            1969 | 3024 | 1317 | 1907 => StoreError::Timeout(timeout),
            1290 | 1792 | 1021 | 1036 => StoreError::WriteRefused,
            1040 | 1044 | 1045 | 1049 | 1053 | 1152 | 1153 | 1158..=1161 | 1927 | 4031 => {
                StoreError::Unavailable(text)
            }
            1054 | 1064 | 1146 | 1149 | 1050 | 1051 | 1091 | 1110 | 1136 | 1138 | 1171 | 1210
            | 1264 | 1265 | 1292 | 1366 | 1406 => StoreError::Invalid(text),
            _ => StoreError::Backend(text),
        },
        E::IoError(ref io) => match io.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                StoreError::Timeout(timeout)
            }
            _ => StoreError::Unavailable(text),
        },
        E::CodecError(ref c) => {
            let io = std::error::Error::source(c).and_then(|s| s.downcast_ref::<std::io::Error>());
            match io.map(std::io::Error::kind) {
                Some(std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
                    StoreError::Timeout(timeout)
                }
                _ => StoreError::Unavailable(text),
            }
        }
        E::DriverError(ref d) => match d {
            DriverError::ConnectTimeout
            | DriverError::CouldNotConnect(_)
            | DriverError::PacketOutOfSync
            | DriverError::UnexpectedPacket => StoreError::Unavailable(text),
            DriverError::Timeout => StoreError::Timeout(timeout),
            DriverError::MismatchedStmtParams(..)
            | DriverError::Params(_)
            | DriverError::MixedParams => StoreError::Invalid(text),
            _ => StoreError::Backend(text),
        },
        E::UrlError(_) => StoreError::Invalid(text),
        _ => StoreError::Backend(text),
    }
}
