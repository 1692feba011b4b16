//! SAS (001): the cache inside the application process. Each AppNode keeps its own copies in
//! the engine's store, linked in (`local.rs`); the SAS core (`cads_coord::sas`, `cads coord sas`)
//! grants the I and Q leases and knows which AppNodes hold each key, and tells them of every
//! write before the write is acknowledged (`node.rs`). The application is the same as on CS:
//! [`crate::Config::sas`] is the one setting that moves it.
//!
//! A read that hits is served from the process's memory with no round trip. A miss asks the
//! core for an I lease, reads the data store, and installs the value if the core registered the
//! fill (a writer's Q lease voids it, 001 §3.3). A write takes Q leases at pre-commit on sorted
//! keys, backing off on a conflict (write-through's Q leases exclude each other), and after its
//! data-store commit hands the core its keys: write-around deletes every other copy, and
//! write-through sends the new values to every other holder (computed from the writer's own
//! copy; a key it has no copy of is deleted everywhere instead, unless the write sets its whole
//! value). docs/ARCHITECTURE.md, "SAS",
//! states the failure protocol.

mod local;
pub(crate) mod node;
mod peers;

use std::net::SocketAddr;
use std::sync::Arc;

use cads_client::{Backoff, ClientError};
use cads_coord::sas::leases::Item;
use cads_coord::wire::number;

/// The SAS core, for a process that runs one (`cads coord sas`, a benchmark's `--cache sas`).
pub use cads_coord::sas::{Core, Settings as CoreSettings};
pub use local::LocalStats;
use node::Node;

use crate::error::{Error, Result};
use crate::Config;

/// Where an AppNode's SAS core is, and what its own cache may hold.
#[derive(Clone, Debug)]
pub struct SasConfig {
    /// The core's address (`cads coord sas --listen`).
    pub core: SocketAddr,
    /// Bytes the AppNode's copies may take (0: no limit); least recently used copies go first.
    pub capacity_bytes: usize,
    /// Ingest (001 §4): this AppNode serves its copies to the others on this address (port 0:
    /// any free one), and fetches a key another AppNode holds instead of computing it from the
    /// data store. None: Greedy, each AppNode computes every miss from the data store.
    pub ingest: Option<SocketAddr>,
    /// The core's password (`cads coord sas --requirepass`), which the AppNodes also ask of
    /// each other for Ingest's fetches.
    pub password: Option<crate::Password>,
}

impl SasConfig {
    /// A core at `core`, a 256 MiB cache.
    pub fn new(core: SocketAddr) -> SasConfig {
        SasConfig {
            core,
            capacity_bytes: 256 << 20,
            ingest: None,
            password: None,
        }
    }
}

/// What an AppNode's SAS side counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SasStats {
    pub local: LocalStats,
    /// Registrations with the core (more than one: the AppNode lost its delivery connection or
    /// its lease and started over, dropping its copies).
    pub registrations: u64,
    /// Commits that could not reach the core and waited its leases out before returning.
    pub commits_waited_out: u64,
    /// Requests to the core (registrations and renewals included).
    pub round_trips: u64,
    /// Ingest: fetches from other AppNodes, and those that brought a value back.
    pub peer_fetches: u64,
    pub peer_fetched: u64,
}

/// How a miss's I lease request came out for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Fill it; the holders' peer addresses (Ingest).
    Granted(Vec<Vec<u8>>),
    /// Another session computes it.
    Busy,
    /// A writer holds it: read the data store, cache nothing.
    Writing,
}

/// A framework session's SAS state.
pub(crate) struct SasSession {
    node: Arc<Node>,
    /// The AppNode's id when the session started (fills made under another are not installed).
    id: u64,
    session: u64,
    /// Copies this session read, with their versions.
    reads: Vec<(Vec<u8>, u64)>,
    /// Keys this session read, from copies or from the data store.
    read_keys: usize,
    /// Keys read from the data store whose copy was not installed (a writer held them, the fill
    /// was refused or dropped): no invalidation tells this session of a change to them, their
    /// read leases at the core do ([`SasSession::reads_fit`]).
    unguarded: Vec<Vec<u8>>,
    /// The core could not be reached for a read: the session read the data store with no
    /// lease, as a CS session that lost its CMI does, and cannot check its reads.
    degraded: bool,
    /// Keys under this session's Q leases.
    q_keys: Vec<Vec<u8>>,
    /// What the commit hands the core.
    items: Vec<Item>,
}

fn unavailable(reason: String) -> Error {
    Error::Cache(ClientError::Unavailable {
        cmi: 0,
        reason,
        refused: false,
    })
}

impl SasSession {
    pub(crate) fn new(node: &Arc<Node>) -> SasSession {
        SasSession {
            node: node.clone(),
            id: node.id(),
            session: node.session(),
            reads: Vec::new(),
            read_keys: 0,
            unguarded: Vec::new(),
            degraded: false,
            q_keys: Vec::new(),
            items: Vec::new(),
        }
    }

    fn head(&self, command: &str) -> Vec<Vec<u8>> {
        vec![
            command.as_bytes().to_vec(),
            self.id.to_string().into_bytes(),
            self.session.to_string().into_bytes(),
        ]
    }

    /// The AppNode's copies of `keys` (None where it has none); hits are remembered, so that
    /// `reads_fit` can check them at the end. `first`: the read's first look, which the
    /// AppNode's hit and miss counters count.
    pub(crate) fn lookup(&mut self, keys: &[Vec<u8>], first: bool) -> Vec<Option<Vec<u8>>> {
        let values: Vec<Option<Vec<u8>>> = keys
            .iter()
            .map(|key| {
                let (version, value) = self.node.get(key)?;
                self.reads.push((key.clone(), version));
                Some(value)
            })
            .collect();
        if first {
            let hits = values.iter().filter(|v| v.is_some()).count() as u64;
            self.node.local.count(hits, values.len() as u64 - hits);
        }
        values
    }

    /// I leases on `keys`, which missed.
    pub(crate) fn iget(&self, keys: &[Vec<u8>]) -> Result<Vec<Grant>> {
        let mut request = self.head("IGET");
        request.extend(keys.iter().cloned());
        let reply = self
            .node
            .call(&request)
            .map_err(|e| unavailable(format!("the SAS core at {}: {e}", self.node.config.core)))?;
        if reply.len() != keys.len() {
            return Err(unavailable(
                "the SAS core's IGET answer is malformed".into(),
            ));
        }
        Ok(reply
            .into_iter()
            .map(|part| match part.first() {
                Some(b'G') => Grant::Granted(
                    part[1..]
                        .split(|&b| b == b' ')
                        .filter(|p| !p.is_empty())
                        .map(<[u8]>::to_vec)
                        .collect(),
                ),
                Some(b'B') => Grant::Busy,
                _ => Grant::Writing,
            })
            .collect())
    }

    /// Fills keys whose I leases this session holds: each copy is installed if the core
    /// registers the fill and no delivery touched the key meanwhile. Returns the keys installed.
    pub(crate) fn fill(&mut self, fills: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
        let mut installed = Vec::new();
        if fills.is_empty() {
            return installed;
        }
        let tokens: Vec<u64> = fills
            .iter()
            .map(|(k, _)| self.node.local.begin_fill(k))
            .collect();
        let mut request = self.head("ISET");
        request.extend(fills.iter().map(|(k, _)| k.clone()));
        let reply = self.node.call(&request).unwrap_or_default();
        for (i, ((key, value), token)) in fills.iter().zip(tokens).enumerate() {
            let stored = reply.get(i).is_some_and(|r| r == b"1");
            if !stored {
                self.node.local.cancel_fill(key, token);
                continue;
            }
            let node = &self.node;
            let id = self.id;
            if let Some(version) = node
                .local
                .finish_fill(key, token, value, || node.registered_as(id))
            {
                self.reads.push((key.clone(), version));
                installed.push(key.clone());
            }
        }
        installed
    }

    /// Ingest: the copy of `key` from one of the AppNodes the core named as its holders (tried
    /// in an order that spreads fetches over them), if one has it.
    pub(crate) fn fetch(&self, key: &[u8], holders: &[Vec<u8>]) -> Option<Vec<u8>> {
        if holders.is_empty() || self.node.config.ingest.is_none() {
            return None;
        }
        let start = (self.session as usize) % holders.len();
        (0..holders.len())
            .map(|i| &holders[(start + i) % holders.len()])
            .find_map(|addr| self.node.peers.fetch(addr, key, self.node.password()))
    }

    /// Gives back the I leases of misses this session will not fill (a result it must not
    /// cache); their read leases stay.
    pub(crate) fn give_up_fills(&self, keys: &[Vec<u8>]) {
        self.send_keys("IRELEASE", keys);
    }

    /// Sends `command` for `keys`; a lease not given back runs out on its own.
    fn send_keys(&self, command: &str, keys: &[Vec<u8>]) {
        if keys.is_empty() {
            return;
        }
        let mut request = self.head(command);
        request.extend(keys.iter().cloned());
        let _ = self.node.call(&request);
    }

    /// Records a read of `keys` keys, of which `unguarded` came from the data store without a
    /// copy installed.
    pub(crate) fn note_reads(&mut self, keys: usize, unguarded: impl IntoIterator<Item = Vec<u8>>) {
        self.read_keys += keys;
        for key in unguarded {
            if !self.unguarded.contains(&key) {
                self.unguarded.push(key);
            }
        }
    }

    /// A read that could not reach the core.
    pub(crate) fn note_degraded(&mut self) {
        self.degraded = true;
    }

    /// Whether the session's reads fit together with each other and with its writes, as a CS
    /// session's shared leases make them (a writer voiding one aborts the session): a session
    /// that reads one key and writes nothing needs no check; otherwise every copy it read must
    /// still be the one it read, and the read leases of the keys it read from the data store
    /// must stand (one round trip to the core, only if there are such keys).
    pub(crate) fn reads_fit(&mut self, writes: bool) -> bool {
        if self.read_keys == 0 || (self.read_keys == 1 && !writes) || self.degraded {
            return true;
        }
        if !self.reads.iter().all(|(k, v)| self.node.local.still(k, *v)) {
            return false;
        }
        if self.unguarded.is_empty() {
            return true;
        }
        let mut request = self.head("VALIDATE");
        request.extend(std::mem::take(&mut self.unguarded));
        matches!(self.node.call(&request).as_deref(), Ok([stand]) if stand == b"1")
    }

    /// Q leases on `keys` in sorted order (001 §3.3): a conflict on a key (write-through) is
    /// waited out with a growing backoff, within `config.retry`'s budget; after that the session
    /// aborts, to run again.
    pub(crate) fn take_q(&mut self, keys: &[Vec<u8>], config: &Config) -> Result<()> {
        // Its leases' length is learnt at registration; a commit that cannot reach the core
        // waits it out (`commit`), so a write cannot start before.
        if self.node.lease_ms() == 0 {
            return Err(unavailable(format!(
                "this AppNode has not registered with the SAS core at {} yet",
                self.node.config.core
            )));
        }
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let mut backoff = Backoff::new(&config.retry);
        let mut at = 0;
        while at < keys.len() {
            let mut request = self.head("QAREG");
            request.extend(keys[at..].iter().cloned());
            let reply = self.node.call(&request).map_err(|e| {
                unavailable(format!("the SAS core at {}: {e}", self.node.config.core))
            })?;
            let granted = reply.get(1).and_then(|p| number(p)).unwrap_or(0) as usize;
            self.q_keys
                .extend(keys[at..at + granted.min(keys.len() - at)].iter().cloned());
            at += granted;
            if at < keys.len() && !backoff.wait() {
                return Err(Error::Aborted {
                    reason: format!(
                        "another session holds {} under write-through (SAS core)",
                        String::from_utf8_lossy(&keys[at])
                    ),
                });
            }
        }
        Ok(())
    }

    /// What the commit will hand the core: each written key with its new value (write-through)
    /// or None (delete).
    pub(crate) fn set_items(&mut self, items: Vec<Item>) {
        self.items = items;
    }

    /// The AppNode's copy of `key`, if it may serve it (write-through computes new values from
    /// it).
    pub(crate) fn own_copy(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.node
            .serving()
            .then(|| self.node.local.peek(key))
            .flatten()
    }

    /// After the data-store commit: the AppNode's own copies change, and the core tells every
    /// other holder before this returns. The own copies change first, while the session still
    /// holds its Q leases: the next writer of a key on this AppNode computes its value from this
    /// copy, so it must be in place before the core lets that writer in. If the core then says
    /// the session lost a Q lease (or this AppNode is not live), it has deleted those copies
    /// too, by a delivery; they are deleted here again.
    ///
    /// A core that answers BLOCKED (a lost Q lease, and another writer holds the key) is asked
    /// again until it takes the commit. One that cannot be reached, or does not answer in time,
    /// is not asked again (a second commit could overlap the first): this waits one Q lease and
    /// one AppNode lease before returning, by which time the core has deleted the keys' copies
    /// (the Q leases ran out) or every AppNode has stopped serving (the core is gone), so the
    /// write is never acknowledged while a stale copy may be served.
    pub(crate) fn commit(self, config: &Config) -> Result<()> {
        if self.items.is_empty() {
            return Ok(());
        }
        let (node, id) = (&self.node, self.id);
        let broken = crate::failpoints::sas_invalidations_dropped();
        for (key, value) in self.items.iter().filter(|_| !broken) {
            match value {
                Some(value) => {
                    let token = node.local.begin_fill(key);
                    let installed = node
                        .local
                        .finish_fill(key, token, value, || node.registered_as(id));
                    if installed.is_none() {
                        node.local.delete(key);
                    }
                }
                None => node.local.delete(key),
            }
        }
        let mut blocked = Backoff::new(&config.retry);
        let keep = loop {
            match node.commit(id, self.session, &self.items) {
                Ok(Some(keep)) => break Some(keep),
                Ok(None) => blocked.pause(),
                Err(e) => {
                    tracing::warn!(error = %e, "SAS commit: the core did not answer; waiting its leases out");
                    break None;
                }
            }
        };
        if keep != Some(true) && !broken {
            for (key, _) in self.items.iter().filter(|(_, v)| v.is_some()) {
                node.local.delete(key);
            }
        }
        if keep.is_none() {
            node.commits_waited_out
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let wait = node.lease_ms() + node.node_lease_ms();
            std::thread::sleep(std::time::Duration::from_millis(wait));
        }
        Ok(())
    }

    /// Gives back the session's Q and read leases (its data-store transaction rolled back).
    pub(crate) fn abort(self) {
        let mut keys = self.q_keys.clone();
        keys.extend(self.unguarded.iter().cloned());
        self.send_keys("RELEASE", &keys);
    }
}

/// The stats of an AppNode's SAS side.
pub(crate) fn stats(node: &Node) -> SasStats {
    SasStats {
        local: node.local.stats(),
        registrations: node
            .registrations
            .load(std::sync::atomic::Ordering::Relaxed),
        commits_waited_out: node
            .commits_waited_out
            .load(std::sync::atomic::Ordering::Relaxed),
        round_trips: node.round_trips.load(std::sync::atomic::Ordering::Relaxed),
        peer_fetches: node
            .peers
            .fetches
            .load(std::sync::atomic::Ordering::Relaxed),
        peer_fetched: node
            .peers
            .fetched
            .load(std::sync::atomic::Ordering::Relaxed),
    }
}
