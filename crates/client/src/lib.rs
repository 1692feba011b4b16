//! cads-client: talks to a set of CMIs.
//!
//! A [`Client`] owns a pool of connections per CMI and routes each key to its CMI with a
//! [`Router`] (consistent hashing by default). A [`Session`] runs the lease and session commands of
//! `docs/PROTOCOL.md` for one atomic unit of work: it splits multi-key calls by CMI and sends the
//! parts to all CMIs before reading any reply, turns RETRY into jittered exponential backoff within
//! a time budget, validates on every CMI it touched before committing on any (000 §5.1.3), and
//! aborts everywhere when any CMI aborts it. Session ids come from ranges handed out by the
//! coordinator ([`RangeSource`]). Connections speak plaintext, or TLS to CMIs that serve it
//! ([`TlsConfig`]), and log in when the CMIs want a password.
//!
//! The API is blocking: one session belongs to one thread; a `Client` is shared by many.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use cads_client::{Client, ClientConfig, RangeSource};
//!
//! // Applications get ranges from the coordinator (`cads-coord`); any source of disjoint ranges
//! // will do for a single process.
//! let counter = AtomicU64::new(1);
//! let ranges: Arc<dyn RangeSource> = Arc::new(move || {
//!     let start = counter.fetch_add(1000, Ordering::Relaxed);
//!     start..start + 1000
//! });
//! let config = ClientConfig::new(vec!["127.0.0.1:7379".parse().unwrap()]);
//! let client = Client::new(config, ranges);
//! let mut session = client.session();
//! let old = session.get(b"counter", true)?;          // X lease (read-modify-write)
//! let next = old.map_or(1, |v| String::from_utf8_lossy(&v).parse::<i64>().unwrap() + 1);
//! session.set(b"counter", next.to_string().as_bytes(), false)?;
//! session.validate()?;
//! // ... commit the data-store transaction here ...
//! session.commit()?;
//! # Ok::<(), cads_client::ClientError>(())
//! ```

mod conn;
mod error;
mod ids;
mod info;
mod pool;
mod retry;
mod router;
mod session;
mod tls;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads_protocol::{Command, FlushScope, Reply};

pub use cads_protocol::MarkOp;
pub use cads_protocol::SessionId;
pub use error::{ClientError, Result};
pub use ids::{RangeSource, SessionIds};
pub use info::CmiStats;
pub use retry::{random, Backoff, RetryPolicy};
pub use router::{ConsistentHash, Router};
pub use session::{IqRead, MarkedValue, Session, Write, Written};
pub use tls::{TlsConfig, TlsIdentity, TlsName};

/// The stable hash of keys that CMIs use for fragments (FNV-1a, 64 bits): the same in every
/// process and version, for anything several processes must place alike.
pub use cads_protocol::fragment::fnv1a64 as stable_hash;
/// The fragment of a key when the key space is split into `count` (Gemini), as the CMIs compute it.
pub use cads_protocol::fragment::fragment_of;

use pool::Pool;

/// How a client reaches its CMIs.
#[derive(Clone)]
pub struct ClientConfig {
    /// The CMIs, in a fixed order (their index is what routers return).
    pub cmis: Vec<SocketAddr>,
    /// The CMIs' password (their `requirepass`), sent with AUTH on every new connection; left
    /// out of `Debug` output.
    pub password: Option<String>,
    /// TLS to the CMIs (those started with `--tls-cert`); None speaks plaintext.
    pub tls: Option<TlsConfig>,
    /// Idle connections kept per CMI.
    pub max_idle: usize,
    pub connect_timeout: Duration,
    /// Longest wait for a reply before the CMI counts as failed.
    pub io_timeout: Duration,
    pub retry: RetryPolicy,
    /// Where CMIs on this machine serve Unix sockets (their `--unixsocket-dir`): a CMI at a
    /// loopback address whose socket is there and served is reached through it, which skips
    /// TCP's work; the others, and every CMI when TLS is on, over TCP.
    pub unix_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("cmis", &self.cmis)
            .field("password", &self.password.as_ref().map(|_| "(hidden)"))
            .field("tls", &self.tls)
            .field("max_idle", &self.max_idle)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("retry", &self.retry)
            .field("unix_dir", &self.unix_dir)
            .finish()
    }
}

impl ClientConfig {
    pub fn new(cmis: Vec<SocketAddr>) -> ClientConfig {
        ClientConfig {
            cmis,
            password: None,
            tls: None,
            max_idle: 64,
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(2),
            retry: RetryPolicy::default(),
            unix_dir: None,
        }
    }
}

/// A handle to a set of CMIs, shared by the threads of an application.
pub struct Client {
    pools: Vec<Pool>,
    router: Arc<dyn Router>,
    ids: SessionIds,
    retry: RetryPolicy,
    round_trips: AtomicU64,
}

impl Client {
    /// A client routing keys by consistent hashing over the CMIs' addresses. Connections are made
    /// when first needed, so CMIs that are down do not prevent it.
    pub fn new(config: ClientConfig, ranges: Arc<dyn RangeSource>) -> Client {
        let names: Vec<String> = config.cmis.iter().map(|a| a.to_string()).collect();
        let router = Arc::new(ConsistentHash::new(&names));
        Client::with_router(config, router, ranges)
    }

    /// A client with its own key-to-CMI mapping.
    pub fn with_router(
        config: ClientConfig,
        router: Arc<dyn Router>,
        ranges: Arc<dyn RangeSource>,
    ) -> Client {
        assert_eq!(
            router.cmis(),
            config.cmis.len(),
            "the router spreads keys over as many CMIs as the client has"
        );
        let pools = config
            .cmis
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let dial = conn::Dial {
                    connect_timeout: config.connect_timeout,
                    io_timeout: config.io_timeout,
                    password: config.password.clone(),
                    tls: config.tls.clone(),
                    unix_dir: config.unix_dir.clone(),
                };
                Pool::new(i, *addr, config.max_idle, dial)
            })
            .collect();
        Client {
            pools,
            router,
            ids: SessionIds::new(ranges),
            retry: config.retry,
            round_trips: AtomicU64::new(0),
        }
    }

    /// Network round trips made so far: one per request waited for, and one per batch of
    /// requests sent to several CMIs at once (they travel in parallel).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    pub(crate) fn count_round_trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cmis(&self) -> usize {
        self.pools.len()
    }

    pub fn cmi_addr(&self, cmi: usize) -> SocketAddr {
        self.pools[cmi].addr()
    }

    /// The CMI that owns `key`.
    pub fn route(&self, key: &[u8]) -> usize {
        self.router.route(key)
    }

    /// The CMIs that keep replicas of `key`, its own first (see [`Router::replicas`]).
    pub fn replicas(&self, key: &[u8], count: usize) -> Vec<usize> {
        self.router.replicas(key, count)
    }

    /// Whether CMI `cmi` refused a connection within the last second (no process listens there).
    /// Callers that keep replicas skip such CMIs.
    pub fn is_down(&self, cmi: usize) -> bool {
        self.pools[cmi].is_down()
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Runs one command on one CMI and returns its reply as sent (error replies included).
    pub fn execute(&self, cmi: usize, cmd: &Command<'_>) -> Result<Reply<'static>> {
        let pool = &self.pools[cmi];
        let mut conn = pool.take()?;
        self.count_round_trip();
        match conn.call(cmd) {
            Ok(reply) => {
                pool.put(conn);
                Ok(reply)
            }
            Err(e) => {
                pool.clear();
                Err(e)
            }
        }
    }

    /// Runs commands on several CMIs, all sent before any reply is read (one round trip): the
    /// commands for one CMI are pipelined on one connection, in order. Returns each command's
    /// reply or error, in the order given.
    pub fn execute_many(&self, commands: &[(usize, Command<'_>)]) -> Vec<Result<Reply<'static>>> {
        self.count_round_trip();
        let mut cmis: Vec<usize> = commands.iter().map(|(cmi, _)| *cmi).collect();
        cmis.sort_unstable();
        cmis.dedup();
        let mut conns: Vec<(usize, Result<conn::Connection>)> = cmis
            .into_iter()
            .map(|cmi| {
                let sent = self.pools[cmi].take().and_then(|mut conn| {
                    for (_, cmd) in commands.iter().filter(|(c, _)| *c == cmi) {
                        conn.queue(cmd);
                    }
                    conn.flush().map(|()| conn)
                });
                (cmi, sent)
            })
            .collect();
        // Replies come back per connection in the order its commands were queued, which is
        // the order of `commands`. After an error a connection's remaining replies are unknown:
        // the connection is dropped and the rest of its commands fail with the same error.
        let mut failed: Vec<(usize, ClientError)> = Vec::new();
        let replies = commands
            .iter()
            .map(|(cmi, _)| {
                if let Some((_, e)) = failed.iter().find(|(c, _)| c == cmi) {
                    return Err(e.duplicate());
                }
                let slot = conns
                    .iter_mut()
                    .find(|(c, _)| c == cmi)
                    .expect("one per CMI");
                let reply = match &mut slot.1 {
                    Ok(conn) => conn.read(),
                    Err(e) => Err(e.duplicate()),
                };
                if let Err(e) = &reply {
                    failed.push((*cmi, e.duplicate()));
                }
                reply
            })
            .collect();
        for (cmi, conn) in conns {
            match (conn, failed.iter().any(|(c, _)| *c == cmi)) {
                (Ok(conn), false) => self.pools[cmi].put(conn),
                _ => self.pools[cmi].clear(),
            }
        }
        replies
    }

    /// Runs one command on the CMI owning `key`, mapping error replies to errors.
    fn keyed(&self, key: &[u8], cmd: &Command<'_>) -> Result<Reply<'static>> {
        match self.execute(self.route(key), cmd)? {
            Reply::Error(e) => Err(session::error_from(e)),
            reply => Ok(reply),
        }
    }

    /// Plain GET, without leases.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        session::bulk(self.keyed(key, &Command::Get(key))?)
    }

    /// Plain GET on CMI `cmi`, whichever CMI owns `key`: what one replica of a replicated key
    /// holds (buffered writes live on several CMIs).
    pub fn get_from(&self, cmi: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        session::bulk(self.execute(cmi, &Command::Get(key))?)
    }

    /// Plain SET, without leases (LEASED while a session holds one on the key).
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.keyed(
            key,
            &Command::Set {
                key,
                value,
                condition: cads_protocol::SetCondition::Always,
                expiry: cads_protocol::SetExpiry::None,
                get: false,
            },
        )
        .map(drop)
    }

    /// Plain DEL of one key, without leases.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let keys = [key];
        match self.keyed(key, &Command::Del(&keys))? {
            Reply::Int(n) => Ok(n > 0),
            other => Err(session::unexpected(&other)),
        }
    }

    /// Plain DEL of one key on CMI `cmi`, whichever CMI owns it.
    pub fn delete_from(&self, cmi: usize, key: &[u8]) -> Result<bool> {
        let keys = [key];
        match self.execute(cmi, &Command::Del(&keys))? {
            Reply::Int(n) => Ok(n > 0),
            Reply::Error(e) => Err(session::error_from(e)),
            other => Err(session::unexpected(&other)),
        }
    }

    /// FLUSHALL on every CMI.
    pub fn flush_all(&self) -> Result<()> {
        (0..self.cmis()).try_for_each(|cmi| self.flush_cmi(cmi, false))
    }

    /// FLUSHALL on CMI `cmi`; with `unpinned_only`, `FLUSHALL UNPINNED`, which keeps pinned
    /// entries and markers. An error reply (a CMI that does not know the option) is an error.
    pub fn flush_cmi(&self, cmi: usize, unpinned_only: bool) -> Result<()> {
        match self.execute(
            cmi,
            &Command::FlushAll(if unpinned_only {
                FlushScope::Unpinned
            } else {
                FlushScope::Everything
            }),
        )? {
            Reply::Error(e) => Err(ClientError::Server(e)),
            _ => Ok(()),
        }
    }

    /// Plain GETs of keys on chosen CMIs (the replicas of replicated keys), sent to every CMI
    /// before any reply is read: one round trip. Each answer is the value or its own error.
    pub fn get_at(&self, places: &[(usize, &[u8])]) -> Vec<Result<Option<Vec<u8>>>> {
        let commands: Vec<(usize, Command<'_>)> = places
            .iter()
            .map(|&(cmi, key)| (cmi, Command::Get(key)))
            .collect();
        self.execute_many(&commands)
            .into_iter()
            .map(|reply| session::bulk(reply?))
            .collect()
    }

    /// Whether each key exists on its chosen CMI, in one round trip as [`Client::get_at`].
    pub fn exists_at(&self, places: &[(usize, &[u8])]) -> Vec<Result<bool>> {
        let keys: Vec<[&[u8]; 1]> = places.iter().map(|&(_, key)| [key]).collect();
        let commands: Vec<(usize, Command<'_>)> = places
            .iter()
            .zip(&keys)
            .map(|(&(cmi, _), key)| (cmi, Command::Exists(key)))
            .collect();
        self.execute_many(&commands)
            .into_iter()
            .map(|reply| match reply? {
                Reply::Int(n) => Ok(n > 0),
                // FENCED, STALECONFIG: the caller may retry, as after GET.
                Reply::Error(e) => Err(session::error_from(e)),
                other => Err(session::unexpected(&other)),
            })
            .collect()
    }

    /// The length of each key's value on its chosen CMI (0 when it has none), in one round trip
    /// as [`Client::get_at`].
    pub fn strlen_at(&self, places: &[(usize, &[u8])]) -> Vec<Result<usize>> {
        let commands: Vec<(usize, Command<'_>)> = places
            .iter()
            .map(|&(cmi, key)| (cmi, Command::StrLen(key)))
            .collect();
        self.execute_many(&commands)
            .into_iter()
            .map(|reply| match reply? {
                Reply::Int(n) => Ok(n.max(0) as usize),
                Reply::Error(e) => Err(session::error_from(e)),
                other => Err(session::unexpected(&other)),
            })
            .collect()
    }

    /// Plain APPENDs of bytes to keys on chosen CMIs, in one round trip as [`Client::get_at`]:
    /// each answer is the value's new length or its own error. An append keeps the entry's pin
    /// (Gemini's dirty lists).
    pub fn append_at(&self, places: &[(usize, &[u8], &[u8])]) -> Vec<Result<usize>> {
        let commands: Vec<(usize, Command<'_>)> = places
            .iter()
            .map(|&(cmi, key, value)| (cmi, Command::Append { key, value }))
            .collect();
        self.execute_many(&commands)
            .into_iter()
            .map(|reply| match reply? {
                Reply::Int(n) => Ok(n.max(0) as usize),
                Reply::Error(e) => Err(session::error_from(e)),
                other => Err(session::unexpected(&other)),
            })
            .collect()
    }

    /// PINSET on CMI `cmi`: `key` holds `value`, pinned (never evicted), whatever the lease mode.
    pub fn pin_set_at(&self, cmi: usize, key: &[u8], value: &[u8]) -> Result<()> {
        match self.execute(cmi, &Command::PinSet { key, value })? {
            Reply::Error(e) => Err(session::error_from(e)),
            _ => Ok(()),
        }
    }

    /// Starts a session with a fresh id.
    pub fn session(&self) -> Session<'_> {
        Session::new(self, self.ids.next())
    }

    /// Starts a session with an id of the caller's (000 §5.1.2 `StartSession`).
    pub fn session_with_id(&self, id: SessionId) -> Session<'_> {
        Session::new(self, id)
    }

    fn pool(&self, cmi: usize) -> &Pool {
        &self.pools[cmi]
    }
}
