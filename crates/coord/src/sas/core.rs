//! The SAS core as a service (KOSAR's Core, 001 Fig. 1.b): a TCP listener whose connections
//! each get a thread, the [`Tables`] behind one lock, and the deliveries to AppNodes.
//!
//! Requests (frames of [`crate::wire`]; `N` is the AppNode's id, `S` a session number):
//!
//! | request | answer |
//! | --- | --- |
//! | `HELLO [peer-addr]` | `OK N node-lease-ms lease-ms` |
//! | `LISTEN N` | `OK`; the connection then carries deliveries to the AppNode |
//! | `RENEW N` | `OK node-lease-ms`, or `REFUSED` (start over with HELLO, copies dropped) |
//! | `IGET N S key...` | per key `G` (granted; the holders' peer addresses follow in a `HOLDERS` frame part), `B` (busy) or `W` (writing) |
//! | `ISET N S key...` | per key `1` (the AppNode holds it now) or `0` (do not cache it) |
//! | `QAREG N S key...` | `OK n`: the first n keys are leased; n short of all: a conflict at key n |
//! | `COMMIT N S (key op value)...` | `OK 1` once every other holder has it (`op` `=`: new value, `-`: delete), and the writer may keep its new values; `OK 0`: it may not (a Q lease was lost and all went as deletes, the writer's copies included, or it is not live); `BLOCKED`: a Q lease was lost and another writer holds the key, so nothing was done: send it again |
//! | `VALIDATE N S key...` | `1` if no writer took any of these keys since the session's IGET of it (its read leases stand), else `0`; the read leases end |
//! | `IRELEASE N S key...` | `OK`: the I leases of misses the session will not fill go; their read leases stay |
//! | `RELEASE N S key...` | `OK`: the session's I, Q and read leases on the keys go |
//! | `PING` | `PONG` |
//! | `STATS` | name, value, name, value ... |
//!
//! With a password set (`Settings::password`, `cads coord sas --requirepass`), every connection
//! starts with `AUTH password`, answered `OK`; anything else closes it.
//!
//! A delivery is `PUSH (key op value)...` on the AppNode's LISTEN connection; the AppNode
//! answers `ACK` once its copies are changed. A delivery that fails cuts the AppNode, and the
//! commit waits until that AppNode's lease has run out: by then it serves no copy (it stops on
//! its own clock, before the core's runs out).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::leases::{Delivery, IReply, Item, NodeId, Owner, Settings, Tables, REAPER};
use crate::wire::{accept_login, number, Framed};

/// How often the core looks for Q leases and AppNode leases that ran out.
const EXPIRE_EVERY: Duration = Duration::from_millis(20);

/// A running core.
pub struct Core {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// An AppNode's delivery connection, one delivery at a time.
type Channel = Arc<Mutex<Option<Framed<TcpStream>>>>;

struct Shared {
    tables: Mutex<Tables>,
    /// Each AppNode's LISTEN connection (None once a delivery to it failed).
    channels: Mutex<HashMap<NodeId, Channel>>,
    /// Each AppNode's address for peer fetches (Ingest).
    peers: Mutex<HashMap<NodeId, Vec<u8>>>,
    started: Instant,
    stop: AtomicBool,
    /// Keys told to AppNodes (deleted or refreshed), over all deliveries that reached them.
    delivered: std::sync::atomic::AtomicU64,
    /// Time added to the clock by [`Core::advance_clock`] (tests), in ms.
    skew_ms: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + self.skew_ms.load(Ordering::Relaxed)
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Core {
    /// Starts a core listening on `addr` (port 0: a free one).
    pub fn start(addr: SocketAddr, settings: Settings) -> io::Result<Core> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            tables: Mutex::new(Tables::new(settings)),
            channels: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            started: Instant::now(),
            stop: AtomicBool::new(false),
            delivered: Default::default(),
            skew_ms: Default::default(),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sas-core-accept".into())
                .spawn(move || accept_loop(listener, shared))?
        };
        let expire = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("sas-core-expire".into())
                .spawn(move || expire_loop(shared))?
        };
        tracing::info!(%addr, "SAS core listening");
        Ok(Core {
            addr,
            shared,
            threads: vec![accept, expire],
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The core's counters and sizes, as STATS answers them.
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        stats(&self.shared)
    }

    /// Moves the core's clock forward (tests: leases run out without waiting).
    pub fn advance_clock(&self, by: Duration) {
        self.shared
            .skew_ms
            .fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }

    /// Stops listening and drops every connection; AppNodes find their leases refused.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        for channel in self.shared.channels.lock().unwrap().values() {
            if let Some(framed) = channel.lock().unwrap().take() {
                let _ = framed.get_ref().shutdown(std::net::Shutdown::Both);
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shutdown();
        }
    }
}

fn stats(shared: &Shared) -> Vec<(&'static str, u64)> {
    let tables = shared.tables();
    let c = &tables.counts;
    let (keys, nodes) = tables.sizes();
    vec![
        ("keys", keys as u64),
        ("appnodes", nodes as u64),
        ("i_granted", c.i_granted),
        ("i_busy", c.i_busy),
        ("i_writing", c.i_writing),
        ("fills", c.fills),
        ("fills_refused", c.fills_refused),
        ("q_granted", c.q_granted),
        ("q_conflicts", c.q_conflicts),
        ("commits", c.commits),
        ("keys_written", c.keys_written),
        ("q_expired", c.q_expired),
        ("appnodes_forgotten", c.nodes_forgotten),
        ("delivered", shared.delivered.load(Ordering::Relaxed)),
    ]
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("sas-core-conn".into())
            .spawn(move || serve(Framed::new(stream), &shared));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "SAS core: no thread for a connection");
        }
    }
}

fn expire_loop(shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(EXPIRE_EVERY);
        let commit = shared.tables().expire(shared.now());
        if !commit.deliveries.is_empty() || !commit.deleted().is_empty() {
            deliver(&shared, commit.deliveries.clone());
            let keys = commit.deleted().to_vec();
            shared.tables().commit_end(REAPER, &commit, keys);
        }
        // Channels of forgotten AppNodes close.
        let known: Vec<NodeId> = {
            let channels = shared.channels.lock().unwrap();
            channels.keys().copied().collect()
        };
        let tables = shared.tables();
        let gone: Vec<NodeId> = known
            .into_iter()
            .filter(|&n| tables.node_expires_at(n).is_none())
            .collect();
        drop(tables);
        for node in gone {
            shared.channels.lock().unwrap().remove(&node);
            shared.peers.lock().unwrap().remove(&node);
        }
    }
}

/// One connection's requests, until it closes or becomes a LISTEN connection.
fn serve(mut conn: Framed<TcpStream>, shared: &Arc<Shared>) {
    let password = shared.tables().settings().password.clone();
    if !accept_login(&mut conn, password.as_deref()) {
        return;
    }
    loop {
        let request = match conn.receive() {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    let _ = conn.send(&[format!("ERR {e}")]);
                }
                return;
            }
        };
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let name = request
            .first()
            .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
            .unwrap_or_default();
        if name == "LISTEN" {
            listen(conn, &request, shared);
            return;
        }
        let reply = match answer(&name, &request, shared) {
            Ok(reply) => reply,
            Err(message) => vec![format!("ERR {message}").into_bytes()],
        };
        if conn.send(&reply).is_err() {
            return;
        }
    }
}

fn node_and_session(request: &[Vec<u8>]) -> Result<Owner, String> {
    let node = request.get(1).and_then(|p| number(p));
    let session = request.get(2).and_then(|p| number(p));
    match (node, session) {
        (Some(node), Some(session)) => Ok(Owner { node, session }),
        _ => Err("expected an AppNode id and a session number".into()),
    }
}

fn answer(name: &str, request: &[Vec<u8>], shared: &Arc<Shared>) -> Result<Vec<Vec<u8>>, String> {
    let now = shared.now();
    let ok = || b"OK".to_vec();
    Ok(match name {
        "PING" => vec![b"PONG".to_vec()],
        "HELLO" => {
            let mut tables = shared.tables();
            let id = tables.hello(now);
            let s = tables.settings().clone();
            drop(tables);
            if let Some(peer) = request.get(1) {
                shared.peers.lock().unwrap().insert(id, peer.clone());
            }
            vec![
                ok(),
                id.to_string().into_bytes(),
                s.node_lease_ms.to_string().into_bytes(),
                s.lease_ms.to_string().into_bytes(),
            ]
        }
        "RENEW" => {
            let node = request
                .get(1)
                .and_then(|p| number(p))
                .ok_or("expected an AppNode id")?;
            let mut tables = shared.tables();
            if tables.renew(node, now) {
                vec![
                    ok(),
                    tables.settings().node_lease_ms.to_string().into_bytes(),
                ]
            } else {
                vec![b"REFUSED".to_vec()]
            }
        }
        "IGET" => {
            let owner = node_and_session(request)?;
            let replies: Vec<IReply> = {
                let mut tables = shared.tables();
                request[3..]
                    .iter()
                    .map(|k| tables.iget(owner, k, now))
                    .collect()
            };
            let peers = shared.peers.lock().unwrap();
            let mut out = Vec::with_capacity(replies.len());
            for reply in replies {
                out.push(match reply {
                    IReply::Granted { holders } => {
                        // `G` and the peer addresses of the holders, space-separated.
                        let mut part = b"G".to_vec();
                        for addr in holders.iter().filter_map(|h| peers.get(h)) {
                            part.push(b' ');
                            part.extend_from_slice(addr);
                        }
                        part
                    }
                    IReply::Busy => b"B".to_vec(),
                    IReply::Writing => b"W".to_vec(),
                });
            }
            out
        }
        "ISET" => {
            let owner = node_and_session(request)?;
            let mut tables = shared.tables();
            request[3..]
                .iter()
                .map(|k| {
                    if tables.iset(owner, k, now) {
                        b"1".to_vec()
                    } else {
                        b"0".to_vec()
                    }
                })
                .collect()
        }
        "QAREG" => {
            let owner = node_and_session(request)?;
            let mut tables = shared.tables();
            let granted = request[3..]
                .iter()
                .take_while(|k| tables.qareg(owner, k, now))
                .count();
            vec![ok(), granted.to_string().into_bytes()]
        }
        "COMMIT" => {
            let owner = node_and_session(request)?;
            let items = commit_items(&request[3..])?;
            let Some(commit) = shared.tables().commit_begin(owner, &items, now) else {
                return Ok(vec![b"BLOCKED".to_vec()]);
            };
            deliver(shared, commit.deliveries.clone());
            shared
                .tables()
                .commit_end(owner, &commit, items.into_iter().map(|(k, _)| k));
            let keep = if commit.keep { b"1" } else { b"0" };
            vec![ok(), keep.to_vec()]
        }
        "VALIDATE" => {
            let owner = node_and_session(request)?;
            let stand = shared
                .tables()
                .validate(owner, request[3..].iter().cloned(), now);
            vec![if stand { b"1".to_vec() } else { b"0".to_vec() }]
        }
        "RELEASE" => {
            let owner = node_and_session(request)?;
            shared.tables().release(owner, request[3..].iter().cloned());
            vec![ok()]
        }
        "IRELEASE" => {
            let owner = node_and_session(request)?;
            shared
                .tables()
                .release_fills(owner, request[3..].iter().cloned());
            vec![ok()]
        }
        "STATS" => stats(shared)
            .into_iter()
            .flat_map(|(name, value)| [name.as_bytes().to_vec(), value.to_string().into_bytes()])
            .collect(),
        other => return Err(format!("unknown command '{other}'")),
    })
}

/// `(key op value)` triples.
fn commit_items(parts: &[Vec<u8>]) -> Result<Vec<Item>, String> {
    decode_items(parts).ok_or_else(|| "COMMIT expects key, op (= or -), value triples".into())
}

/// Decodes `(key op value)` triples (`=`: new value, `-`: delete); None if malformed.
pub fn decode_items(parts: &[Vec<u8>]) -> Option<Vec<Item>> {
    if parts.len() % 3 != 0 {
        return None;
    }
    parts
        .chunks(3)
        .map(|t| match t[1].as_slice() {
            b"=" => Some((t[0].clone(), Some(t[2].clone()))),
            b"-" => Some((t[0].clone(), None)),
            _ => None,
        })
        .collect()
}

/// Encodes items as `(key op value)` triples after `head`.
pub fn encode_items(head: Vec<Vec<u8>>, items: &[Item]) -> Vec<Vec<u8>> {
    let mut out = head;
    for (key, value) in items {
        out.push(key.clone());
        match value {
            Some(v) => {
                out.push(b"=".to_vec());
                out.push(v.clone());
            }
            None => {
                out.push(b"-".to_vec());
                out.push(Vec::new());
            }
        }
    }
    out
}

/// Makes `conn` the AppNode's delivery channel.
fn listen(mut conn: Framed<TcpStream>, request: &[Vec<u8>], shared: &Arc<Shared>) {
    let Some(node) = request.get(1).and_then(|p| number(p)) else {
        let _ = conn.send(&["ERR expected an AppNode id"]);
        return;
    };
    let node_lease = Duration::from_millis(shared.tables().settings().node_lease_ms);
    let _ = conn.get_ref().set_read_timeout(Some(node_lease));
    let _ = conn.get_ref().set_write_timeout(Some(node_lease));
    // The channel is in place before the AppNode counts as listening (and so may hold copies):
    // a commit that finds a holder without one would take it for unreachable.
    let channel: Channel = Arc::new(Mutex::new(Some(conn)));
    let mut guard = channel.lock().unwrap_or_else(|e| e.into_inner());
    {
        let mut channels = shared.channels.lock().unwrap();
        if channels.contains_key(&node) {
            drop(channels);
            if let Some(conn) = guard.as_mut() {
                let _ = conn.send(&["REFUSED"]);
            }
            return;
        }
        channels.insert(node, channel.clone());
    }
    let listening = shared.tables().listen(node);
    let answered = guard.as_mut().is_some_and(|conn| {
        conn.send(&[if listening { "OK" } else { "REFUSED" }])
            .is_ok()
    });
    if !listening {
        guard.take();
        shared.channels.lock().unwrap().remove(&node);
    } else if !answered {
        guard.take();
        shared.tables().cut(node);
    }
}

/// Tells each AppNode its items, all at once; one that cannot be told is cut and waited out.
/// A commit therefore waits at most about two AppNode leases (one for an acknowledgement, one
/// to wait an AppNode out), however many AppNodes do not answer.
fn deliver(shared: &Shared, deliveries: Vec<Delivery>) {
    match deliveries.len() {
        0 => {}
        1 => deliver_one(shared, &deliveries[0]),
        _ => std::thread::scope(|scope| {
            for delivery in &deliveries {
                scope.spawn(move || deliver_one(shared, delivery));
            }
        }),
    }
}

fn deliver_one(shared: &Shared, delivery: &Delivery) {
    let channel = shared.channels.lock().unwrap().get(&delivery.node).cloned();
    let delivered = channel.is_some_and(|channel| {
        let mut guard = channel.lock().unwrap_or_else(|e| e.into_inner());
        let Some(conn) = guard.as_mut() else {
            return false;
        };
        let frame = encode_items(vec![b"PUSH".to_vec()], &delivery.items);
        match conn.call(&frame) {
            Ok(reply) if reply.first().is_some_and(|r| r == b"ACK") => {
                let items = delivery.items.len() as u64;
                shared.delivered.fetch_add(items, Ordering::Relaxed);
                true
            }
            _ => {
                if let Some(conn) = guard.take() {
                    let _ = conn.get_ref().shutdown(std::net::Shutdown::Both);
                }
                false
            }
        }
    });
    if !delivered {
        wait_out(shared, delivery.node);
    }
}

/// Cuts `node` and waits until its lease has run out, then forgets it.
fn wait_out(shared: &Shared, node: NodeId) {
    shared.tables().cut(node);
    tracing::warn!(
        node,
        "SAS core: an AppNode missed a delivery; waiting out its lease"
    );
    loop {
        let mut tables = shared.tables();
        match tables.node_expires_at(node) {
            None => return,
            Some(until) if shared.now() >= until => {
                tables.forget(node);
                return;
            }
            Some(until) => {
                let left = until - shared.now().min(until);
                drop(tables);
                std::thread::sleep(Duration::from_millis(left.clamp(1, 20)));
            }
        }
    }
}
