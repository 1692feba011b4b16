//! The Redis baseline of CPR's evaluation (002 §4.5, `--policy redis-zindex`): range queries as a
//! Redis user builds them, on a real `redis-server` this benchmark starts. Every record is a
//! string key holding its JSON document; a sorted set (the "zindex") holds every id with score 0,
//! so `ZRANGEBYLEX` lists the ids of a range in order. A scan is `ZRANGEBYLEX` then `MGET` (two
//! round trips, 002's implementation); a read is `GET`. Reads that miss fill the record from the
//! data store with a plain `SET`. Writes are cache-aside's, as the framework's cache-aside policy
//! does them: an update commits to the data store, then deletes the record's key (the indexed
//! attribute, the id, never changes); an insert commits, then `ZADD`s its id. 002 §4.5 `SET` the
//! new values instead, with the data store out of the picture (an in-memory table); with one in
//! it, an application has the new record only by reading it back, and deleting is what
//! cache-aside deployments do. Nothing takes a lease: a fill computed before a write and stored
//! after its delete stays cached, which is what the validator counts.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cads::store::{Changes, DataStore, Document};
use cads_protocol::resp::{parse_reply, write_request};
use cads_protocol::Reply;

/// How long `redis-server` may take to answer its first PING.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a reply may take before the baseline gives up on the connection.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Ids per `ZADD` when the load indexes the loaded records.
const INDEX_BATCH: usize = 1000;

/// A `redis-server` process on loopback without persistence, killed when dropped.
pub struct RedisServer {
    child: Child,
    addr: SocketAddr,
}

impl RedisServer {
    /// Starts `redis-server` (from PATH) on a free port and waits until it answers PING.
    pub fn start() -> Result<RedisServer> {
        let binary = find_on_path("redis-server").ok_or_else(|| {
            anyhow!(
                "--policy redis-zindex runs against a real redis-server, which is not on PATH \
                 (install Debian's redis-server: scripts/provision does)"
            )
        })?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .context("finding a free port for redis-server")?
            .port();
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut server = RedisServer {
            child,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        };
        let started = Instant::now();
        loop {
            if let Ok(mut conn) = RedisConn::connect(server.addr) {
                if conn.call(&[b"PING".as_slice()]).is_ok() {
                    return Ok(server);
                }
            }
            if let Some(status) = server.child.try_wait()? {
                bail!("redis-server on port {port} exited at startup ({status})");
            }
            if started.elapsed() > STARTUP_TIMEOUT {
                bail!("redis-server on port {port} did not answer within {STARTUP_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// One blocking RESP connection to Redis.
struct RedisConn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl RedisConn {
    fn connect(addr: SocketAddr) -> Result<RedisConn> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .with_context(|| format!("connecting to redis-server at {addr}"))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(RedisConn {
            stream,
            input: Vec::new(),
            output: Vec::new(),
        })
    }

    /// Sends one command and reads its reply; an error reply is an error.
    fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply<'static>> {
        self.output.clear();
        write_request(&mut self.output, args);
        self.stream.write_all(&self.output)?;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some((reply, used)) = parse_reply(&self.input)? {
                self.input.drain(..used);
                if let Reply::Error(e) = &reply {
                    bail!("redis-server: {e:?}");
                }
                return Ok(reply);
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                bail!("redis-server closed the connection");
            }
            self.input.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The baseline over one table, shared by the benchmark's threads.
pub struct Zindex {
    addr: SocketAddr,
    table: String,
    /// The sorted set of the table's ids.
    index_key: String,
    /// Idle connections; a thread takes one per operation.
    idle: Mutex<Vec<RedisConn>>,
    scans: AtomicU64,
    scan_misses: AtomicU64,
    round_trips: AtomicU64,
}

impl Zindex {
    /// The baseline for `table` on the Redis at `addr`, whose content it replaces (FLUSHALL).
    pub fn new(addr: SocketAddr, table: &str) -> Result<Zindex> {
        let zindex = Zindex {
            addr,
            table: table.to_string(),
            index_key: format!("zindex:{table}"),
            idle: Mutex::default(),
            scans: AtomicU64::new(0),
            scan_misses: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
        };
        zindex.with_conn(|c| c.call(&[b"FLUSHALL".as_slice()]).map(drop))?;
        Ok(zindex)
    }

    fn record_key(&self, id: &str) -> String {
        format!("rec:{}:{id}", self.table)
    }

    fn with_conn<T>(&self, f: impl FnOnce(&mut RedisConn) -> Result<T>) -> Result<T> {
        let idle = self.idle.lock().expect("not poisoned").pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => RedisConn::connect(self.addr)?,
        };
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let result = f(&mut conn);
        // A connection that failed may hold half a reply: it is dropped.
        if result.is_ok() {
            self.idle.lock().expect("not poisoned").push(conn);
        }
        result
    }

    /// Adds loaded records' ids to the index (what their inserts would have done).
    pub fn index(&self, ids: &[String]) -> Result<()> {
        for batch in ids.chunks(INDEX_BATCH) {
            let mut args: Vec<&[u8]> = vec![b"ZADD", self.index_key.as_bytes()];
            for id in batch {
                args.extend([b"0".as_slice(), id.as_bytes()]);
            }
            self.with_conn(|c| c.call(&args).map(drop))?;
        }
        Ok(())
    }

    /// The record `id`: cached, or read from the data store and cached.
    pub fn read(&self, store: &dyn DataStore, id: &str) -> Result<Option<Document>> {
        let key = self.record_key(id);
        let cached = self.with_conn(|c| c.call(&[b"GET".as_slice(), key.as_bytes()]))?;
        if let Some(doc) = decoded(cached)? {
            return Ok(Some(doc));
        }
        let doc = store.get(&self.table, id)?;
        if let Some(doc) = &doc {
            self.set(&key, doc)?;
        }
        Ok(doc)
    }

    /// Updates the record in the data store, then deletes its cached copy.
    pub fn update(&self, store: &dyn DataStore, id: &str, changes: &Changes) -> Result<()> {
        store.update(&self.table, id, changes)?;
        let key = self.record_key(id);
        self.with_conn(|c| c.call(&[b"DEL".as_slice(), key.as_bytes()]).map(drop))
    }

    /// Inserts the record into the data store, then indexes its id (the first read caches it).
    pub fn insert(&self, store: &dyn DataStore, id: &str, doc: &Document) -> Result<()> {
        store.insert(&self.table, id, doc)?;
        self.with_conn(|c| {
            c.call(&[
                b"ZADD".as_slice(),
                self.index_key.as_bytes(),
                b"0",
                id.as_bytes(),
            ])
            .map(drop)
        })
    }

    /// The records whose ids lie in `[lo, hi]`, in order: the ids from the index, the records
    /// with one MGET; records that missed are read from the data store and cached. Also how many
    /// missed.
    pub fn scan(
        &self,
        store: &dyn DataStore,
        lo: &str,
        hi: &str,
    ) -> Result<(Vec<(String, Document)>, u64)> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        let (lo, hi) = (format!("[{lo}"), format!("[{hi}"));
        let listed = self.with_conn(|c| {
            let index = self.index_key.as_bytes();
            c.call(&[
                b"ZRANGEBYLEX".as_slice(),
                index,
                lo.as_bytes(),
                hi.as_bytes(),
            ])
        })?;
        let ids = strings(listed)?;
        if ids.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let keys: Vec<String> = ids.iter().map(|id| self.record_key(id)).collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        let values = match self.with_conn(|c| c.call(&args))? {
            Reply::Array(values) if values.len() == ids.len() => values,
            other => bail!("MGET of {} keys answered {other:?}", ids.len()),
        };
        let mut found: Vec<Option<Document>> = Vec::with_capacity(ids.len());
        for value in values {
            found.push(decoded(value)?);
        }
        let missed: Vec<usize> = (0..ids.len()).filter(|&i| found[i].is_none()).collect();
        if !missed.is_empty() {
            self.scan_misses.fetch_add(1, Ordering::Relaxed);
            let missed_ids: Vec<&str> = missed.iter().map(|&i| ids[i].as_str()).collect();
            let stored = store.get_many(&self.table, &missed_ids)?;
            for (&i, doc) in missed.iter().zip(stored) {
                if let Some(doc) = &doc {
                    self.set(&keys[i], doc)?;
                }
                found[i] = doc;
            }
        }
        let records = ids
            .into_iter()
            .zip(found)
            .filter_map(|(id, doc)| Some((id, doc?)))
            .collect();
        Ok((records, missed.len() as u64))
    }

    /// Scans so far, those of them that read some record from the data store, and round trips
    /// to Redis.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.scans.load(Ordering::Relaxed),
            self.scan_misses.load(Ordering::Relaxed),
            self.round_trips.load(Ordering::Relaxed),
        )
    }

    fn set(&self, key: &str, doc: &Document) -> Result<()> {
        let value = serde_json::to_vec(doc)?;
        self.with_conn(|c| {
            c.call(&[b"SET".as_slice(), key.as_bytes(), &value])
                .map(drop)
        })
    }
}

/// A cached record's document (None: not cached).
fn decoded(reply: Reply<'static>) -> Result<Option<Document>> {
    match reply {
        Reply::Nil => Ok(None),
        Reply::Bulk(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).context("a cached record is not a JSON document")?,
        )),
        other => bail!("a record read answered {other:?}"),
    }
}

/// The strings of an array reply.
fn strings(reply: Reply<'static>) -> Result<Vec<String>> {
    let Reply::Array(items) = reply else {
        bail!("expected an array of ids, got {reply:?}");
    };
    items
        .into_iter()
        .map(|item| match item {
            Reply::Bulk(bytes) => String::from_utf8(bytes.into_owned())
                .map_err(|_| anyhow!("an indexed id is not UTF-8")),
            other => Err(anyhow!("expected an id, got {other:?}")),
        })
        .collect()
}
