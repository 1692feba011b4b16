//! Ranges owned by one process, used from others (002 §3: an AppNode that does not own a range
//! forwards its misses and writes to the owner). The owner runs a [`RangeService`] over its
//! Dendrite; the other processes call it through a [`RemoteDendrite`], which offers the
//! Dendrite's gets and writes, each run on the owner as a session of its own. Every range of
//! the collection goes through the one Dendrite, so PrInT, LeMInT and BuWrInT see every write.
//!
//! The protocol is one JSON object per line over TCP. A connection opens with the service's
//! token (`{"token": "..."}`), which the owner hands to the processes it trusts; a connection
//! without it is closed. Then each request (`{"get": [lo, hi]}` or `{"write": {"id": ..., "op":
//! ...}}`) gets one answer (`{"ok": ...}` or `{"error": ..., "aborted": bool}`), in order.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cads_store::{DocOp, Document};
use serde_json::{json, Value};

use super::{Dendrite, Point};
use crate::error::{Error, Result};
use crate::hex::hex;
use crate::Cads;

/// The longest request or answer line, in bytes (a range's result is bounded by the Dendrite's
/// `max_results`; this bounds what a connection can make the other side hold).
const MAX_LINE: usize = 64 << 20;

/// The longest opening line: the token is read with this bound, before anything else is.
const MAX_OPENING: usize = 1024;

/// How long a new connection has to send its token.
const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections a service serves at once; one more is told so and closed.
const MAX_CONNECTIONS: usize = 1024;

/// How long the owner waits for a client to take an answer, and a client for an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// A Dendrite served to other processes.
pub struct RangeService {
    addr: SocketAddr,
    token: String,
    served: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl RangeService {
    /// Serves `dendrite` (over `cads`, the framework it was made with) on `bind` to clients that
    /// open with the service's [`token`](Self::token), drawn now. The protocol is plain text:
    /// bind to loopback, or to a network only the trusted processes reach.
    pub fn start(cads: Arc<Cads>, dendrite: Dendrite, bind: SocketAddr) -> Result<RangeService> {
        let mut drawn = [0u8; 16];
        getrandom::fill(&mut drawn).map_err(|e| Error::App(format!("no randomness: {e}")))?;
        let token = hex(&drawn);
        let listener = TcpListener::bind(bind)
            .map_err(|e| Error::App(format!("CPR: cannot serve ranges on {bind}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::App(format!("CPR: the range service's address: {e}")))?;
        let served = Arc::new(Shared {
            cads,
            dendrite,
            token: token.clone(),
            stopping: AtomicBool::new(false),
            open: Mutex::default(),
            next: AtomicUsize::new(0),
        });
        let shared = served.clone();
        let acceptor = std::thread::Builder::new()
            .name("cpr-service".into())
            .spawn(move || accept(listener, shared))
            .map_err(|e| Error::App(format!("CPR: cannot start the range service: {e}")))?;
        Ok(RangeService {
            addr,
            token,
            served,
            acceptor: Some(acceptor),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What a client opens a connection with: hand it only to processes trusted to write the
    /// collection (a forwarded write goes to the cache and the data store as the owner's own).
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for RangeService {
    /// Stops accepting and ends every connection (a request being served finishes first): no
    /// client writes through this Dendrite once the service is gone.
    fn drop(&mut self) {
        self.served.stopping.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which sees the flag.
        let _ = TcpStream::connect(self.addr);
        for stream in self.served.open.lock().expect("not poisoned").values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

struct Shared {
    cads: Arc<Cads>,
    dendrite: Dendrite,
    token: String,
    stopping: AtomicBool,
    /// The connections being served, to end them when the service goes.
    open: Mutex<HashMap<usize, TcpStream>>,
    next: AtomicUsize,
}

/// A connection's place in [`Shared::open`], given back when its thread ends, however it ends.
struct Slot<'a> {
    served: &'a Shared,
    id: usize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.served
            .open
            .lock()
            .expect("not poisoned")
            .remove(&self.id);
    }
}

fn accept(listener: TcpListener, served: Arc<Shared>) {
    for stream in listener.incoming() {
        if served.stopping.load(Ordering::SeqCst) {
            return;
        }
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors, say: wait instead of spinning on the same error.
                tracing::warn!(error = %e, "CPR: the range service cannot accept a connection");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let id = served.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut open = served.open.lock().expect("not poisoned");
            if open.len() >= MAX_CONNECTIONS {
                drop(open);
                let busy = json!({"error": "the ranges' owner serves too many connections", "aborted": false});
                let _ = answer(&mut stream, &busy);
                continue;
            }
            match stream.try_clone() {
                Ok(clone) => {
                    open.insert(id, clone);
                }
                Err(_) => continue,
            }
        }
        let shared = served.clone();
        let spawned = std::thread::Builder::new()
            .name("cpr-connection".into())
            .spawn(move || {
                let _slot = Slot {
                    served: &shared,
                    id,
                };
                serve(&shared, stream);
            });
        if let Err(e) = spawned {
            served.open.lock().expect("not poisoned").remove(&id);
            tracing::warn!(error = %e, "CPR: cannot serve a connection");
        }
    }
}

/// Whether two tokens are equal, in time that does not depend on where they differ.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |differ, (x, y)| differ | (x ^ y))
            == 0
}

/// One connection: the token (read with a small bound and a timeout), then requests until it
/// closes, sends something malformed, or the service stops.
fn serve(served: &Shared, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(ANSWER_TIMEOUT));
    let _ = stream.set_read_timeout(Some(OPENING_TIMEOUT));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let opened = read_line(&mut reader, &mut line, MAX_OPENING)
        .ok()
        .flatten()
        .and_then(|v| v.get("token").and_then(Value::as_str).map(str::to_owned));
    if !opened.is_some_and(|t| same_token(&t, &served.token)) {
        let _ = answer(
            &mut writer,
            &json!({"error": "no valid token", "aborted": false}),
        );
        return;
    }
    // An authenticated client keeps its connection between requests, for as long as it likes.
    let _ = reader.get_ref().set_read_timeout(None);
    if answer(&mut writer, &json!({"ok": null})).is_err() {
        return;
    }
    loop {
        let request = match read_line(&mut reader, &mut line, MAX_LINE) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(e) => {
                let _ = answer(&mut writer, &json!({"error": e, "aborted": false}));
                return;
            }
        };
        if served.stopping.load(Ordering::SeqCst) {
            return;
        }
        let reply = match handle(served, &request) {
            Ok(result) => json!({ "ok": result }),
            Err(e) => json!({
                "error": e.to_string(),
                "aborted": matches!(e, Error::Aborted { .. }),
            }),
        };
        if answer(&mut writer, &reply).is_err() {
            return;
        }
    }
}

fn handle(served: &Shared, request: &Value) -> Result<Value> {
    if let Some([lo, hi]) = request
        .get("get")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    {
        let (lo, hi) = (point_from(lo)?, point_from(hi)?);
        let found = served.dendrite.read(&served.cads, &lo, &hi)?;
        return Ok(Value::Array(
            found
                .into_iter()
                .map(|(id, doc)| json!([id, Value::Object(doc)]))
                .collect(),
        ));
    }
    if let Some(write) = request.get("write") {
        let id = write
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a write without an id"))?;
        let op = DocOp::from_json(write.get("op").unwrap_or(&Value::Null))?;
        served
            .cads
            .run(|s| served.dendrite.write(s, id, op.clone()))?;
        return Ok(Value::Null);
    }
    Err(bad(
        "a request is {\"get\": [lo, hi]} or {\"write\": {\"id\", \"op\"}}",
    ))
}

fn bad(what: &str) -> Error {
    Error::App(format!("CPR range service: {what}"))
}

fn point_json(point: &Point) -> Value {
    match point {
        Point::Int(n) => json!({ "int": n }),
        Point::Text(s) => json!({ "text": s }),
        // Not a range bound (a get refuses them before asking).
        Point::Absent | Point::Doc(_) => Value::Null,
    }
}

fn point_from(value: &Value) -> Result<Point> {
    if let Some(n) = value.get("int").and_then(Value::as_i64) {
        return Ok(Point::Int(n));
    }
    if let Some(s) = value.get("text").and_then(Value::as_str) {
        return Ok(Point::Text(s.to_string()));
    }
    Err(bad("a range bound is {\"int\": n} or {\"text\": s}"))
}

/// Reads one line as JSON; None at the end of the stream.
fn read_line(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::result::Result<Option<Value>, String> {
    line.clear();
    let read = reader
        .by_ref()
        .take(limit as u64 + 1)
        .read_until(b'\n', line)
        .map_err(|e| e.to_string())?;
    if read == 0 {
        return Ok(None);
    }
    if line.len() > limit {
        return Err(format!("a line longer than {limit} bytes"));
    }
    serde_json::from_slice(line)
        .map(Some)
        .map_err(|e| format!("not JSON: {e}"))
}

fn answer(writer: &mut TcpStream, value: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).expect("JSON serializes");
    bytes.push(b'\n');
    writer.write_all(&bytes)
}

/// The Dendrite of another process (its [`RangeService`]), called from this one.
pub struct RemoteDendrite {
    addr: SocketAddr,
    token: String,
    idle: Mutex<Vec<Connection>>,
}

struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: Vec<u8>,
}

impl RemoteDendrite {
    /// The service at `addr`, opened with `token`. Connections are made as calls need them.
    pub fn new(addr: SocketAddr, token: String) -> RemoteDendrite {
        RemoteDendrite {
            addr,
            token,
            idle: Mutex::default(),
        }
    }

    /// [`Dendrite::read`] on the owner.
    pub fn read(&self, lo: &Point, hi: &Point) -> Result<Vec<(String, Document)>> {
        let found = self.call(&json!({ "get": [point_json(lo), point_json(hi)] }))?;
        let Value::Array(rows) = found else {
            return Err(unexpected(&found));
        };
        rows.into_iter()
            .map(|row| match row {
                Value::Array(mut pair) if pair.len() == 2 => match (pair.pop(), pair.pop()) {
                    (Some(Value::Object(doc)), Some(Value::String(id))) => Ok((id, doc)),
                    _ => Err(bad("a result row is [id, document]")),
                },
                other => Err(unexpected(&other)),
            })
            .collect()
    }

    /// A write of document `id` through the owner's Dendrite, in a session of its own there.
    pub fn write(&self, id: &str, op: DocOp) -> Result<()> {
        self.call(&json!({ "write": { "id": id, "op": op.to_json() } }))
            .map(drop)
    }

    fn call(&self, request: &Value) -> Result<Value> {
        let idle = self.idle.lock().expect("not poisoned").pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let answer = conn.exchange(request)?;
        self.idle.lock().expect("not poisoned").push(conn);
        if let Some(ok) = answer.get("ok") {
            return Ok(ok.clone());
        }
        let message = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("an answer without ok or error")
            .to_string();
        Err(match answer.get("aborted").and_then(Value::as_bool) {
            Some(true) => Error::Aborted { reason: message },
            _ => Error::App(format!("the ranges' owner: {message}")),
        })
    }

    fn connect(&self) -> Result<Connection> {
        let failed = |e: std::io::Error| {
            Error::App(format!(
                "CPR: cannot reach the ranges' owner at {}: {e}",
                self.addr
            ))
        };
        let stream = TcpStream::connect_timeout(&self.addr, ANSWER_TIMEOUT).map_err(failed)?;
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(failed)?;
        stream
            .set_write_timeout(Some(ANSWER_TIMEOUT))
            .map_err(failed)?;
        let _ = stream.set_nodelay(true);
        let writer = stream.try_clone().map_err(failed)?;
        let mut conn = Connection {
            reader: BufReader::new(stream),
            writer,
            line: Vec::new(),
        };
        let opened = conn.exchange(&json!({ "token": self.token }))?;
        if opened.get("ok").is_none() {
            return Err(Error::App(format!(
                "CPR: the ranges' owner at {} refused this process ({opened})",
                self.addr
            )));
        }
        Ok(conn)
    }
}

impl Connection {
    /// Sends one request and reads its answer. A connection that fails here is dropped.
    fn exchange(&mut self, request: &Value) -> Result<Value> {
        let lost = |what: String| Error::App(format!("CPR: the ranges' owner: {what}"));
        let mut bytes = serde_json::to_vec(request).expect("JSON serializes");
        if bytes.len() > MAX_LINE {
            // Not sent: the owner would close the connection on it.
            return Err(bad(&format!("a request longer than {MAX_LINE} bytes")));
        }
        bytes.push(b'\n');
        self.writer
            .write_all(&bytes)
            .map_err(|e| lost(e.to_string()))?;
        read_line(&mut self.reader, &mut self.line, MAX_LINE)
            .map_err(lost)?
            .ok_or_else(|| lost("it closed the connection".into()))
    }
}

fn unexpected(value: &Value) -> Error {
    bad(&format!("an unexpected answer: {value}"))
}
