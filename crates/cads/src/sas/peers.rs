//! Ingest (001 §4): an AppNode that misses a key another AppNode holds fetches that copy instead
//! of computing it from the data store. Each AppNode with Ingest on serves its copies to the
//! others (`FETCH key` answered with `V value`, or `N` when it has none or may not serve), and
//! keeps a few connections to each peer it fetched from.
//!
//! A fetched value is as good as the holder's copy: the core told the holder of every
//! acknowledged write before acknowledging it. The fetching session still holds its I lease, so
//! a write after the grant voids the fill as for a value from the data store.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use cads_coord::wire::{accept_login, login, Framed};

use super::node::Node;

/// How long a fetch from a peer may take before the data store is asked instead.
const FETCH_TIMEOUT: Duration = Duration::from_millis(500);

/// Connections to other AppNodes, by the address they announced.
#[derive(Default)]
pub(crate) struct Peers {
    pool: Mutex<HashMap<Vec<u8>, Vec<Framed<TcpStream>>>>,
    pub(crate) fetches: AtomicU64,
    pub(crate) fetched: AtomicU64,
}

impl Peers {
    /// The copy of `key` at the peer announced as `addr`, if it has one; None on any failure
    /// (the caller then reads the data store).
    pub(crate) fn fetch(&self, addr: &[u8], key: &[u8], password: Option<&str>) -> Option<Vec<u8>> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let pooled = self.pool.lock().unwrap().get_mut(addr).and_then(Vec::pop);
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let target: SocketAddr = std::str::from_utf8(addr).ok()?.parse().ok()?;
                let mut conn = Framed::connect(target, FETCH_TIMEOUT).ok()?;
                login(&mut conn, password).ok()?;
                conn
            }
        };
        let reply = conn.call(&[b"FETCH".as_slice(), key]).ok()?;
        self.pool
            .lock()
            .unwrap()
            .entry(addr.to_vec())
            .or_default()
            .push(conn);
        match reply.as_slice() {
            [kind, value] if kind == b"V" => {
                self.fetched.fetch_add(1, Ordering::Relaxed);
                Some(value.clone())
            }
            _ => None,
        }
    }
}

/// Listens for other AppNodes' fetches on `addr`; returns the address bound.
pub(crate) fn serve(addr: SocketAddr, node: Weak<Node>) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("sas-peers".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if node.strong_count() == 0 {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let _ = stream.set_nodelay(true);
                let node = node.clone();
                let _ = std::thread::Builder::new()
                    .name("sas-peer".into())
                    .spawn(move || answer(Framed::new(stream), node));
            }
        })?;
    Ok(bound)
}

/// Answers one peer's fetches until it closes the connection.
fn answer(mut conn: Framed<TcpStream>, node: Weak<Node>) {
    let password = node
        .upgrade()
        .and_then(|n| n.password().map(str::to_string));
    if !accept_login(&mut conn, password.as_deref()) {
        return;
    }
    while let Ok(Some(request)) = conn.receive() {
        let Some(node) = node.upgrade() else { return };
        let reply: Vec<Vec<u8>> = match request.as_slice() {
            [name, key] if name.eq_ignore_ascii_case(b"FETCH") => {
                // Only a copy this AppNode may serve itself.
                match node.serving().then(|| node.local.peek(key)).flatten() {
                    Some(value) => vec![b"V".to_vec(), value],
                    None => vec![b"N".to_vec()],
                }
            }
            _ => vec![b"ERR expected FETCH key".to_vec()],
        };
        drop(node);
        if conn.send(&reply).is_err() {
            return;
        }
    }
}
