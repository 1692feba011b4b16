//! An AppNode's side of the SAS core: its registration and lease, the connection the core
//! delivers invalidations and refreshes on, and the requests sessions make.
//!
//! The AppNode serves its copies only while its lease holds on its own clock: the lease counts
//! from the moment the AppNode *sent* its registration or renewal, less a tenth, so it ends
//! before the core's (which counts from the moment it received them). When the delivery
//! connection breaks or the core refuses a renewal, the AppNode drops every copy and registers
//! anew under a new id; copies filled under the old id are never installed (see
//! [`Node::registered_as`]).

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cads_coord::sas::core::{decode_items, encode_items};
use cads_coord::sas::leases::Item;
use cads_coord::wire::{login, number, Framed};

use super::local::LocalCache;
use super::peers::{self, Peers};
use super::SasConfig;

/// How long a connection attempt, or a request without a delivery to wait for, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct Node {
    pub(crate) config: SasConfig,
    pub(crate) local: LocalCache,
    /// The id the core gave this AppNode; 0 while it registers.
    id: AtomicU64,
    /// Until when (ms on `clock`) the AppNode may serve its copies.
    serving_until: AtomicU64,
    /// The core's lease on I and Q leases and on this AppNode, in ms (from HELLO).
    lease_ms: AtomicU64,
    node_lease_ms: AtomicU64,
    clock: Instant,
    next_session: AtomicU64,
    /// Connections to the core, with the read timeout each has.
    pool: Mutex<Vec<(Framed<TcpStream>, Duration)>>,
    /// The delivery connection, to shut it down when the core refuses a renewal.
    listening: Mutex<Option<TcpStream>>,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Registrations since start (the first included).
    pub(crate) registrations: AtomicU64,
    /// Commits that could not reach the core and waited its leases out.
    pub(crate) commits_waited_out: AtomicU64,
    /// Requests sent to the core.
    pub(crate) round_trips: AtomicU64,
    /// Ingest: connections to the other AppNodes.
    pub(crate) peers: Peers,
    /// Ingest: where this AppNode serves its copies, announced to the core.
    peer_addr: Mutex<Option<std::net::SocketAddr>>,
}

impl Node {
    /// Starts the AppNode's threads; it registers with the core in the background (until then
    /// it serves no copy, and its reads go to the data store).
    pub(crate) fn start(config: SasConfig) -> Arc<Node> {
        let node = Arc::new(Node {
            local: LocalCache::new(config.capacity_bytes),
            config,
            id: AtomicU64::new(0),
            serving_until: AtomicU64::new(0),
            lease_ms: AtomicU64::new(0),
            node_lease_ms: AtomicU64::new(0),
            clock: Instant::now(),
            // Sessions of AppNodes not yet registered (id 0) must not share numbers.
            next_session: AtomicU64::new(cads_coord::random_block() << 32 | 1),
            pool: Mutex::new(Vec::new()),
            listening: Mutex::new(None),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            registrations: AtomicU64::new(0),
            commits_waited_out: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
            peers: Peers::default(),
            peer_addr: Mutex::new(None),
        });
        if let Some(addr) = node.config.ingest {
            match peers::serve(addr, Arc::downgrade(&node)) {
                Ok(bound) => *node.peer_addr.lock().unwrap() = Some(bound),
                // Greedy then: the others never learn of this AppNode's copies.
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "SAS: cannot serve copies to other AppNodes")
                }
            }
        }
        // The threads hold a weak reference, so dropping the framework stops them.
        let weak = Arc::downgrade(&node);
        let listener = std::thread::Builder::new()
            .name("sas-listen".into())
            .spawn(move || listen_loop(weak))
            .expect("a thread for SAS deliveries");
        let weak = Arc::downgrade(&node);
        let renewer = std::thread::Builder::new()
            .name("sas-renew".into())
            .spawn(move || renew_loop(weak))
            .expect("a thread for SAS renewals");
        node.threads.lock().unwrap().extend([listener, renewer]);
        node
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// The password the core and the other AppNodes want.
    pub(crate) fn password(&self) -> Option<&str> {
        self.config.password.as_ref().map(|p| p.0.as_str())
    }

    /// The id sessions use now (0: not registered).
    pub(crate) fn id(&self) -> u64 {
        self.id.load(Ordering::SeqCst)
    }

    /// Whether the AppNode is registered as `id` still (a fill made under an older id is not
    /// installed: the core may not deliver that id's invalidations any more).
    pub(crate) fn registered_as(&self, id: u64) -> bool {
        id != 0 && self.id() == id
    }

    /// Whether the AppNode may serve its copies now.
    pub(crate) fn serving(&self) -> bool {
        self.now_ms() < self.serving_until.load(Ordering::SeqCst)
    }

    /// A new session number.
    pub(crate) fn session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// The core's I and Q lease, in ms (0 before the first registration).
    pub(crate) fn lease_ms(&self) -> u64 {
        self.lease_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn node_lease_ms(&self) -> u64 {
        self.node_lease_ms.load(Ordering::Relaxed)
    }

    /// The copy of `key` if the AppNode may serve it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<(u64, Vec<u8>)> {
        if !self.serving() {
            return None;
        }
        self.local.get(key)
    }

    /// How long an answer from the core may take: a commit waits for every holder's
    /// acknowledgement, or for an unreachable one's lease to run out (about two AppNode leases
    /// at most, deliveries running at once), before the core answers.
    fn answer_timeout(&self) -> Duration {
        let node_lease = Duration::from_millis(self.node_lease_ms().max(2_000));
        node_lease * 3 + CONNECT_TIMEOUT
    }

    /// Sends a request to the core and reads its answer, on a pooled connection.
    pub(crate) fn call(&self, parts: &[Vec<u8>]) -> io::Result<Vec<Vec<u8>>> {
        let timeout = self.answer_timeout();
        let pooled = self.pool.lock().unwrap().pop();
        let (mut conn, mut set) = match pooled {
            Some(pooled) => pooled,
            None => {
                let mut conn = Framed::connect(self.config.core, CONNECT_TIMEOUT)?;
                login(&mut conn, self.password())?;
                (conn, CONNECT_TIMEOUT)
            }
        };
        if set < timeout {
            conn.get_ref().set_read_timeout(Some(timeout))?;
            set = timeout;
        }
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let reply = conn.call(parts)?;
        if let Some(first) = reply.first() {
            if first.starts_with(b"ERR") {
                return Err(io::Error::other(
                    String::from_utf8_lossy(first).into_owned(),
                ));
            }
        }
        self.pool.lock().unwrap().push((conn, set));
        Ok(reply)
    }

    /// A session's commit: whether the writer may keep its new values, or None if the core
    /// answered BLOCKED (nothing was done; send it again).
    pub(crate) fn commit(
        &self,
        node: u64,
        session: u64,
        items: &[Item],
    ) -> io::Result<Option<bool>> {
        let head = vec![
            b"COMMIT".to_vec(),
            node.to_string().into_bytes(),
            session.to_string().into_bytes(),
        ];
        let reply = self.call(&encode_items(head, items))?;
        if reply.first().is_some_and(|r| r == b"BLOCKED") {
            return Ok(None);
        }
        Ok(Some(reply.get(1).is_some_and(|r| r == b"1")))
    }

    /// Registers with the core and opens the delivery connection; returns it.
    fn register(&self) -> io::Result<Framed<TcpStream>> {
        let mut hello = vec![b"HELLO".to_vec()];
        if let Some(peer) = *self.peer_addr.lock().unwrap() {
            hello.push(peer.to_string().into_bytes());
        }
        let sent = self.now_ms();
        let reply = self.call(&hello)?;
        let field = |i: usize| reply.get(i).and_then(|p| number(p));
        let (Some(id), Some(node_lease), Some(lease)) = (field(1), field(2), field(3)) else {
            return Err(io::Error::other("the core's HELLO answer is malformed"));
        };
        self.lease_ms.store(lease, Ordering::Relaxed);
        self.node_lease_ms.store(node_lease, Ordering::Relaxed);
        let mut conn = Framed::connect(self.config.core, CONNECT_TIMEOUT)?;
        login(&mut conn, self.password())?;
        let answer = conn.call(&[b"LISTEN".to_vec(), id.to_string().into_bytes()])?;
        if answer.first().map(Vec::as_slice) != Some(b"OK") {
            return Err(io::Error::other("the core refused the delivery connection"));
        }
        // Deliveries come when writers commit: the connection waits for them without limit.
        conn.get_ref().set_read_timeout(None)?;
        *self.listening.lock().unwrap() = Some(conn.get_ref().try_clone()?);
        self.id.store(id, Ordering::SeqCst);
        self.extend_lease(sent, node_lease);
        self.registrations.fetch_add(1, Ordering::Relaxed);
        tracing::info!(id, core = %self.config.core, "SAS AppNode registered");
        Ok(conn)
    }

    /// The lease from a registration or renewal sent at `sent` (ms), less a tenth.
    fn extend_lease(&self, sent: u64, node_lease: u64) {
        let until = sent + node_lease - node_lease / 10;
        self.serving_until.fetch_max(until, Ordering::SeqCst);
    }

    /// Stops serving copies and drops them all: the core may not reach this AppNode any more.
    fn drop_everything(&self) {
        self.id.store(0, Ordering::SeqCst);
        self.serving_until.store(0, Ordering::SeqCst);
        self.local.clear();
        if let Some(conn) = self.listening.lock().unwrap().take() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }

    /// Waits until the AppNode has registered (tests and benchmarks start with warm
    /// registrations); false if `timeout` passed first.
    pub(crate) fn wait_registered(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        while !self.serving() {
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(conn) = self.listening.lock().unwrap().take() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

/// Registers, applies deliveries until the connection breaks, and registers again.
fn listen_loop(node: std::sync::Weak<Node>) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let registered = match node.upgrade() {
            Some(n) if !n.stop.load(Ordering::SeqCst) => n.register(),
            _ => return,
        };
        let mut conn = match registered {
            Ok(conn) => {
                backoff = Duration::from_millis(10);
                conn
            }
            Err(e) => {
                tracing::debug!(error = %e, "SAS AppNode cannot register yet");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(250));
                continue;
            }
        };
        loop {
            let frame = conn.receive();
            let Some(n) = node.upgrade() else { return };
            match frame {
                Ok(Some(frame)) if frame.first().is_some_and(|f| f == b"PUSH") => {
                    match decode_items(&frame[1..]) {
                        Some(_) if crate::failpoints::sas_invalidations_dropped() => {}
                        Some(items) => n.local.apply(&items),
                        None => break,
                    }
                    if conn.send(&["ACK"]).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
        // The core may have deliveries this AppNode never got: nothing it holds is safe.
        let Some(n) = node.upgrade() else { return };
        if !n.stop.load(Ordering::SeqCst) {
            tracing::warn!(
                id = n.id(),
                "SAS AppNode lost its delivery connection; dropping its copies"
            );
        }
        n.drop_everything();
    }
}

/// Renews the lease a few times per lease; a refusal makes the AppNode start over.
fn renew_loop(node: std::sync::Weak<Node>) {
    loop {
        let pause = match node.upgrade() {
            Some(n) if !n.stop.load(Ordering::SeqCst) => {
                Duration::from_millis((n.node_lease_ms() / 4).clamp(5, 1_000))
            }
            _ => return,
        };
        std::thread::sleep(pause);
        let Some(n) = node.upgrade() else { return };
        let id = n.id();
        if id == 0 {
            continue;
        }
        let sent = n.now_ms();
        match n.call(&[b"RENEW".to_vec(), id.to_string().into_bytes()]) {
            Ok(reply) if reply.first().is_some_and(|r| r == b"OK") => {
                let lease = reply.get(1).and_then(|p| number(p)).unwrap_or(0);
                if n.id() == id {
                    n.extend_lease(sent, lease);
                }
            }
            Ok(_) => {
                tracing::warn!(
                    id,
                    "the SAS core refused to renew this AppNode's lease; registering anew"
                );
                if n.id() == id {
                    n.drop_everything();
                }
            }
            // The core cannot be reached: the lease runs out on its own.
            Err(_) => {}
        }
    }
}
