//! The SAS core's tables (001 §3.3, Fig. 1.b): I and Q leases per key, which AppNodes hold a
//! copy of each key, and each AppNode's own lease. Plain data, time passed in (ms on the core's
//! clock), so every rule is tested without sockets; [`super::core`] runs it.
//!
//! The rules:
//! - A miss asks for an I lease. One I lease per key: a second asker backs off (`Busy`). A key
//!   under a Q lease grants none (`Writing`): the asker reads the data store and caches nothing.
//! - A fill (`iset`) makes the AppNode a holder only if its I lease is still there: a Q lease
//!   voids it, so a value computed before a write is never cached (001 §3.3).
//! - Every miss also leaves the session a read lease on the key, which a Q lease voids (one
//!   asked for under a Q lease starts void): a session that read keys from the data store
//!   without caching them asks at its end whether they still stand ([`Tables::validate`]), as a
//!   CS session's shared leases let its commit know (000 §5.1). A fill that is stored ends it:
//!   the AppNode's copy then tells the session of later writes.
//! - Write-around's Q leases are shared; write-through's are exclusive (a second writer gets
//!   `Conflict` and backs off, 001 §3.3).
//! - A commit voids the keys' I leases and yields what each other holder must be told: delete
//!   (write-around, or a key whose Q lease was lost) or the new value (write-through). Its Q
//!   leases stay until the deliveries are done ([`Tables::commit_end`]), so no fill and no other
//!   writer's delivery overtakes them.
//! - A Q lease that runs out (its writer died, perhaps after its data-store commit) makes every
//!   holder delete the key.
//! - An AppNode serves its copies only while its own lease is valid; one whose invalidations
//!   cannot be delivered is `cut`: it renews no more, takes no new copies, and is forgotten
//!   when its lease has run out, which is when a commit waiting to reach it may go on.
//! - Holder lists may name AppNodes that evicted their copy since: a delivery they do not need
//!   costs a message, while a "dropped" notice racing with a new fill of the same key could take
//!   a real holder off the list. An AppNode's entries go when it is forgotten.

use std::collections::{HashMap, HashSet};

/// An AppNode, numbered by the core at `hello`.
pub type NodeId = u64;

/// Who holds a lease: a session of an AppNode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub node: NodeId,
    pub session: u64,
}

/// The owner of the Q leases the core takes itself while it deletes the copies of keys whose
/// writer's Q lease ran out.
pub const REAPER: Owner = Owner {
    node: u64::MAX,
    session: u64::MAX,
};

/// The core's settings.
#[derive(Clone)]
pub struct Settings {
    /// How long an I or Q lease lasts, in ms.
    pub lease_ms: u64,
    /// How long an AppNode's lease lasts from its renewal, in ms.
    pub node_lease_ms: u64,
    /// Write-through: Q leases exclude each other.
    pub exclusive_q: bool,
    /// Ingest: most AppNodes that may hold a copy of one key (0: no limit).
    pub max_replicas: usize,
    /// Every connection must log in with this first (`AUTH password`); None: none needed.
    pub password: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("lease_ms", &self.lease_ms)
            .field("node_lease_ms", &self.node_lease_ms)
            .field("exclusive_q", &self.exclusive_q)
            .field("max_replicas", &self.max_replicas)
            .field("password", &self.password.as_ref().map(|_| "hidden"))
            .finish()
    }
}

/// The answer to a miss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IReply {
    /// The I lease: compute the value (or fetch it from one of `holders`) and fill.
    Granted { holders: Vec<NodeId> },
    /// Another session computes the value: back off and look again.
    Busy,
    /// A writer holds the key: read the data store and cache nothing.
    Writing,
}

/// What a holder is told about one key: delete it, or its new value.
pub type Item = (Vec<u8>, Option<Vec<u8>>);

/// A commit under way: what to deliver, and what [`Tables::commit_end`] must finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    pub deliveries: Vec<Delivery>,
    /// The writer may keep its new values.
    pub keep: bool,
    /// Keys whose holders are unlisted at the end.
    deleted: Vec<Vec<u8>>,
}

impl Commit {
    pub fn deleted(&self) -> &[Vec<u8>] {
        &self.deleted
    }
}

/// What one AppNode must be told, in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub node: NodeId,
    pub items: Vec<Item>,
}

#[derive(Default)]
struct KeyState {
    /// The I lease and when it runs out.
    i: Option<(Owner, u64)>,
    /// The Q leases and when they run out (`u64::MAX` while their commit is delivered).
    q: Vec<(Owner, u64)>,
    /// Read leases: their owner, when they run out, and whether a writer voided them.
    r: Vec<(Owner, u64, bool)>,
    holders: Vec<NodeId>,
}

impl KeyState {
    fn is_idle(&self) -> bool {
        self.i.is_none() && self.q.is_empty() && self.r.is_empty() && self.holders.is_empty()
    }

    /// A writer takes the key: every other session's read lease is void.
    fn void_reads(&mut self, writer: Owner) {
        for lease in self.r.iter_mut().filter(|l| l.0 != writer) {
            lease.2 = true;
        }
    }
}

struct Node {
    expires_at: u64,
    /// Its connection for deliveries is open.
    listening: bool,
    /// A delivery to it failed: it renews no more.
    cut: bool,
    /// The keys it holds (for forgetting it).
    keys: HashSet<Vec<u8>>,
}

/// Counters since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub i_granted: u64,
    pub i_busy: u64,
    pub i_writing: u64,
    pub fills: u64,
    pub fills_refused: u64,
    pub q_granted: u64,
    pub q_conflicts: u64,
    pub commits: u64,
    /// Keys the commits wrote.
    pub keys_written: u64,
    pub q_expired: u64,
    pub nodes_forgotten: u64,
}

pub struct Tables {
    settings: Settings,
    keys: HashMap<Vec<u8>, KeyState>,
    /// Keys with a Q lease, for expiry.
    q_keys: HashSet<Vec<u8>>,
    /// Keys with read leases, for expiry.
    r_keys: HashSet<Vec<u8>>,
    nodes: HashMap<NodeId, Node>,
    next_node: NodeId,
    pub counts: Counts,
}

impl Tables {
    pub fn new(settings: Settings) -> Tables {
        Tables {
            settings,
            keys: HashMap::new(),
            q_keys: HashSet::new(),
            r_keys: HashSet::new(),
            nodes: HashMap::new(),
            // Not from 1: an AppNode that outlived a restart of the core must not find its old id
            // given to another AppNode (its renewal would then be taken for that one's).
            next_node: crate::random_block() << 32 | 1,
            counts: Counts::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A new AppNode, with a lease from `now`; it holds nothing until it listens.
    pub fn hello(&mut self, now: u64) -> NodeId {
        let id = self.next_node;
        self.next_node += 1;
        self.nodes.insert(
            id,
            Node {
                expires_at: now + self.settings.node_lease_ms,
                listening: false,
                cut: false,
                keys: HashSet::new(),
            },
        );
        id
    }

    /// The AppNode's connection for deliveries is open; false for a node unknown, cut, or
    /// listening already (a second connection must not take the first one's deliveries).
    pub fn listen(&mut self, node: NodeId) -> bool {
        match self.nodes.get_mut(&node) {
            Some(n) if !n.cut && !n.listening => {
                n.listening = true;
                true
            }
            _ => false,
        }
    }

    /// Extends the AppNode's lease from `now`; false (it must start over with `hello`, its
    /// copies dropped) if it is unknown, cut or not listening.
    pub fn renew(&mut self, node: NodeId, now: u64) -> bool {
        match self.nodes.get_mut(&node) {
            Some(n) if n.listening && !n.cut => {
                n.expires_at = n.expires_at.max(now + self.settings.node_lease_ms);
                true
            }
            _ => false,
        }
    }

    /// A delivery to the AppNode failed: it renews no more and takes no copies.
    pub fn cut(&mut self, node: NodeId) {
        if let Some(n) = self.nodes.get_mut(&node) {
            n.cut = true;
            n.listening = false;
        }
    }

    /// When the AppNode's lease runs out (None: forgotten, or never known).
    pub fn node_expires_at(&self, node: NodeId) -> Option<u64> {
        self.nodes.get(&node).map(|n| n.expires_at)
    }

    /// Whether the AppNode may take copies now.
    fn live(&self, node: NodeId, now: u64) -> bool {
        self.nodes
            .get(&node)
            .is_some_and(|n| n.listening && !n.cut && now < n.expires_at)
    }

    /// A miss on `key` (001 §3.3).
    pub fn iget(&mut self, owner: Owner, key: &[u8], now: u64) -> IReply {
        let lease_ms = self.settings.lease_ms;
        let state = self.keys.entry(key.to_vec()).or_default();
        // A Q lease that ran out still counts until the core has deleted its key's copies.
        let writing = !state.q.is_empty();
        match state.r.iter_mut().find(|l| l.0 == owner) {
            Some(lease) => {
                lease.1 = now + lease_ms;
                lease.2 |= writing;
            }
            None => state.r.push((owner, now + lease_ms, writing)),
        }
        self.r_keys.insert(key.to_vec());
        let reply = if writing {
            IReply::Writing
        } else {
            match state.i {
                Some((holder, until)) if holder != owner && now < until => IReply::Busy,
                _ => {
                    state.i = Some((owner, now + lease_ms));
                    let holders = state.holders.iter().copied();
                    IReply::Granted {
                        holders: holders.filter(|&n| n != owner.node).collect(),
                    }
                }
            }
        };
        match reply {
            IReply::Granted { .. } => self.counts.i_granted += 1,
            IReply::Busy => self.counts.i_busy += 1,
            IReply::Writing => self.counts.i_writing += 1,
        }
        reply
    }

    /// The fill of a miss: true if the AppNode now holds the key (its I lease was still valid,
    /// the AppNode is live and the key has room for another replica).
    pub fn iset(&mut self, owner: Owner, key: &[u8], now: u64) -> bool {
        let live = self.live(owner.node, now);
        let max_replicas = self.settings.max_replicas;
        let Some(state) = self.keys.get_mut(key) else {
            self.counts.fills_refused += 1;
            return false;
        };
        let held = matches!(state.i, Some((o, until)) if o == owner && now < until);
        if matches!(state.i, Some((o, _)) if o == owner) {
            state.i = None;
        }
        let room = max_replicas == 0
            || state.holders.len() < max_replicas
            || state.holders.contains(&owner.node);
        let stored = held && live && room;
        if stored {
            state.r.retain(|l| l.0 != owner);
            if !state.holders.contains(&owner.node) {
                state.holders.push(owner.node);
            }
            if let Some(node) = self.nodes.get_mut(&owner.node) {
                node.keys.insert(key.to_vec());
            }
            self.counts.fills += 1;
        } else {
            self.counts.fills_refused += 1;
            self.forget_if_idle(key);
        }
        stored
    }

    /// A Q lease on `key`; voids its I lease. False: another writer holds it exclusively.
    pub fn qareg(&mut self, owner: Owner, key: &[u8], now: u64) -> bool {
        let until = now + self.settings.lease_ms;
        let exclusive = self.settings.exclusive_q;
        let state = self.keys.entry(key.to_vec()).or_default();
        // Another writer's lease that ran out stays until the core has deleted the key's copies
        // ([`Tables::expire`]): a write-through writer let in before would compute its value
        // from a copy older than that writer's write.
        if exclusive && state.q.iter().any(|&(o, _)| o != owner) {
            self.counts.q_conflicts += 1;
            return false;
        }
        state.i = None;
        state.void_reads(owner);
        match state.q.iter_mut().find(|(o, _)| *o == owner) {
            Some(lease) => lease.1 = until,
            None => state.q.push((owner, until)),
        }
        self.q_keys.insert(key.to_vec());
        self.counts.q_granted += 1;
        true
    }

    /// A session's commit, after its data-store commit: `writes` are its keys with their new
    /// values (write-through, which the writer has installed in its own cache already) or None
    /// (delete). Voids their I leases and returns what each AppNode must be told, and whether
    /// the writer may keep its new values: it held every Q lease (if not, its changes go out as
    /// deletes, its own copies included) and is live, so the core will tell it of later writes.
    ///
    /// None, changing nothing, while another writer holds a key exclusively whose Q lease this
    /// session lost: the commit is to be sent again once that writer is done, so that its
    /// deliveries cannot overtake these deletes.
    ///
    /// Until [`Tables::commit_end`], the session holds a Q lease on every key, without expiry
    /// (one it had lost is taken again), so no fill and no other writer's delivery overtakes
    /// these deliveries; and the holders of deleted keys stay listed, so that a second
    /// write-around writer of a key, whose Q lease is shared, delivers its delete to them too
    /// instead of returning before they got the first.
    pub fn commit_begin(&mut self, owner: Owner, writes: &[Item], now: u64) -> Option<Commit> {
        let exclusive = self.settings.exclusive_q;
        let holds = |state: &KeyState| state.q.iter().any(|&(o, u)| o == owner && now < u);
        let blocked = writes.iter().any(|(key, _)| {
            self.keys.get(key).is_some_and(|state| {
                exclusive && !holds(state) && state.q.iter().any(|&(o, _)| o != owner)
            })
        });
        if blocked {
            return None;
        }
        self.counts.commits += 1;
        self.counts.keys_written += writes.len() as u64;
        let mut all_held = true;
        let mut deliveries: Vec<Delivery> = Vec::new();
        let mut deleted = Vec::new();
        let live = self.live(owner.node, now);
        for (key, value) in writes {
            let state = self.keys.entry(key.clone()).or_default();
            state.i = None;
            state.void_reads(owner);
            let held = holds(state);
            all_held &= held;
            state.q.retain(|&(o, _)| o != owner);
            state.q.push((owner, u64::MAX));
            self.q_keys.insert(key.clone());
            let item = match value {
                Some(v) if held => Some(v.clone()),
                _ => None,
            };
            let keep_writer = item.is_some() && live;
            // A value the writer installed and may not keep is deleted by a delivery like any
            // other copy, before the commit ends: deleted afterwards, it could outlive the next
            // writer's commit.
            let writer_too = value.is_some() && !keep_writer;
            let told = state
                .holders
                .iter()
                .copied()
                .filter(|&n| n != owner.node)
                .chain(writer_too.then_some(owner.node));
            for node in told {
                match deliveries.iter_mut().find(|d| d.node == node) {
                    Some(d) => d.items.push((key.clone(), item.clone())),
                    None => deliveries.push(Delivery {
                        node,
                        items: vec![(key.clone(), item.clone())],
                    }),
                }
            }
            if keep_writer {
                if !state.holders.contains(&owner.node) {
                    state.holders.push(owner.node);
                }
                if let Some(n) = self.nodes.get_mut(&owner.node) {
                    n.keys.insert(key.clone());
                }
            }
            if item.is_none() {
                deleted.push(key.clone());
            }
        }
        Some(Commit {
            deliveries,
            keep: all_held && live,
            deleted,
        })
    }

    /// The deliveries of a commit are done: the holders of its deleted keys are unlisted (no
    /// fill could add one meanwhile) and its Q leases go.
    pub fn commit_end(
        &mut self,
        owner: Owner,
        commit: &Commit,
        keys: impl IntoIterator<Item = Vec<u8>>,
    ) {
        for key in &commit.deleted {
            if let Some(state) = self.keys.get_mut(key) {
                for node in std::mem::take(&mut state.holders) {
                    if let Some(n) = self.nodes.get_mut(&node) {
                        n.keys.remove(key);
                    }
                }
            }
        }
        self.release(owner, keys);
    }

    /// Whether the session's read leases on `keys` all stand (no writer took one of the keys
    /// since the session asked), ending them.
    pub fn validate(
        &mut self,
        owner: Owner,
        keys: impl IntoIterator<Item = Vec<u8>>,
        now: u64,
    ) -> bool {
        let mut stand = true;
        for key in keys {
            let lease = self.keys.get_mut(&key).and_then(|state| {
                if matches!(state.i, Some((o, _)) if o == owner) {
                    state.i = None;
                }
                let at = state.r.iter().position(|l| l.0 == owner)?;
                Some(state.r.remove(at))
            });
            stand &= lease.is_some_and(|(_, until, voided)| !voided && now < until);
            self.forget_if_idle(&key);
        }
        stand
    }

    /// A session gives back the I leases of misses it will not fill; their read leases stay.
    pub fn release_fills(&mut self, owner: Owner, keys: impl IntoIterator<Item = Vec<u8>>) {
        for key in keys {
            if let Some(state) = self.keys.get_mut(&key) {
                if matches!(state.i, Some((o, _)) if o == owner) {
                    state.i = None;
                }
            }
            self.forget_if_idle(&key);
        }
    }

    /// A session gives its leases back: aborted (its data-store transaction rolled back), or
    /// ending without a validation.
    pub fn release(&mut self, owner: Owner, keys: impl IntoIterator<Item = Vec<u8>>) {
        for key in keys {
            if let Some(state) = self.keys.get_mut(&key) {
                state.q.retain(|&(o, _)| o != owner);
                state.r.retain(|l| l.0 != owner);
                if matches!(state.i, Some((o, _)) if o == owner) {
                    state.i = None;
                }
                if state.q.is_empty() {
                    self.q_keys.remove(&key);
                }
            }
            self.forget_if_idle(&key);
        }
    }

    /// Q leases that ran out (their writer is gone, maybe after its data-store commit): every
    /// holder of their keys deletes them, delivered as a commit of the core's own (finished by
    /// [`Tables::commit_end`] with [`REAPER`]), so that no fill or write overtakes it. AppNodes
    /// whose lease ran out are forgotten.
    pub fn expire(&mut self, now: u64) -> Commit {
        let mut deliveries: Vec<Delivery> = Vec::new();
        let mut deleted = Vec::new();
        let q_keys: Vec<Vec<u8>> = self.q_keys.iter().cloned().collect();
        for key in q_keys {
            let Some(state) = self.keys.get_mut(&key) else {
                self.q_keys.remove(&key);
                continue;
            };
            let before = state.q.len();
            state.q.retain(|&(_, u)| now < u);
            let expired = before - state.q.len();
            if expired == 0 {
                continue;
            }
            self.counts.q_expired += expired as u64;
            for &node in &state.holders {
                match deliveries.iter_mut().find(|d| d.node == node) {
                    Some(d) => d.items.push((key.clone(), None)),
                    None => deliveries.push(Delivery {
                        node,
                        items: vec![(key.clone(), None)],
                    }),
                }
            }
            // No writer can hold the key exclusively meanwhile: `qareg` refused them while the
            // expired lease was listed.
            state.q.push((REAPER, u64::MAX));
            deleted.push(key.clone());
        }
        let r_keys: Vec<Vec<u8>> = self.r_keys.iter().cloned().collect();
        for key in r_keys {
            if let Some(state) = self.keys.get_mut(&key) {
                state.r.retain(|l| now < l.1);
                // An I lease comes with a read lease: one whose session never filled nor gave
                // it back (it died) goes with it.
                if state.i.is_some_and(|(_, until)| now >= until) {
                    state.i = None;
                }
                if !state.r.is_empty() {
                    continue;
                }
            }
            self.r_keys.remove(&key);
            self.forget_if_idle(&key);
        }
        let gone: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| now >= n.expires_at)
            .map(|(&id, _)| id)
            .collect();
        for node in gone {
            self.forget(node);
        }
        Commit {
            deliveries,
            keep: false,
            deleted,
        }
    }

    /// Drops an AppNode whose lease has run out: it holds nothing any more.
    pub fn forget(&mut self, node: NodeId) {
        let Some(n) = self.nodes.remove(&node) else {
            return;
        };
        self.counts.nodes_forgotten += 1;
        for key in n.keys {
            if let Some(state) = self.keys.get_mut(&key) {
                state.holders.retain(|&h| h != node);
            }
            self.forget_if_idle(&key);
        }
    }

    fn forget_if_idle(&mut self, key: &[u8]) {
        if self.keys.get(key).is_some_and(KeyState::is_idle) {
            self.keys.remove(key);
        }
    }

    /// The AppNodes holding `key` (for tests and STATS).
    pub fn holders(&self, key: &[u8]) -> Vec<NodeId> {
        self.keys
            .get(key)
            .map_or_else(Vec::new, |s| s.holders.clone())
    }

    /// Keys the core tracks, and AppNodes it knows.
    pub fn sizes(&self) -> (usize, usize) {
        (self.keys.len(), self.nodes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: u64 = 1_000;
    const NODE_LEASE: u64 = 5_000;

    fn tables(exclusive_q: bool) -> Tables {
        Tables::new(Settings {
            lease_ms: LEASE,
            node_lease_ms: NODE_LEASE,
            exclusive_q,
            max_replicas: 0,
            password: None,
        })
    }

    /// A listening AppNode.
    fn node(t: &mut Tables, now: u64) -> NodeId {
        let id = t.hello(now);
        assert!(t.listen(id));
        id
    }

    fn session(node: NodeId, session: u64) -> Owner {
        Owner { node, session }
    }

    /// Makes `node` hold `key`.
    fn fill(t: &mut Tables, node: NodeId, key: &[u8], now: u64) {
        let owner = session(node, 999);
        assert!(matches!(t.iget(owner, key, now), IReply::Granted { .. }));
        assert!(t.iset(owner, key, now));
    }

    #[test]
    fn one_i_lease_per_key_and_none_under_a_q_lease() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        assert_eq!(
            t.iget(session(a, 1), b"k", 0),
            IReply::Granted { holders: vec![] }
        );
        assert_eq!(t.iget(session(b, 1), b"k", 1), IReply::Busy);
        // Its owner asking again keeps it; after it runs out, another may take it.
        assert!(matches!(
            t.iget(session(a, 1), b"k", 2),
            IReply::Granted { .. }
        ));
        assert!(matches!(
            t.iget(session(b, 1), b"k", 2 + LEASE),
            IReply::Granted { .. }
        ));
        assert!(t.qareg(session(a, 2), b"k", 2 + LEASE));
        assert_eq!(t.iget(session(a, 3), b"k", 3 + LEASE), IReply::Writing);
    }

    #[test]
    fn a_q_lease_voids_the_i_lease_so_the_fill_is_refused() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        assert!(matches!(
            t.iget(session(a, 1), b"k", 0),
            IReply::Granted { .. }
        ));
        assert!(t.qareg(session(b, 1), b"k", 1));
        assert!(!t.iset(session(a, 1), b"k", 2));
        assert!(t.holders(b"k").is_empty());
    }

    #[test]
    fn a_fill_after_its_i_lease_ran_out_is_refused() {
        let mut t = tables(false);
        let a = node(&mut t, 0);
        assert!(matches!(
            t.iget(session(a, 1), b"k", 0),
            IReply::Granted { .. }
        ));
        assert!(!t.iset(session(a, 1), b"k", LEASE));
    }

    #[test]
    fn q_leases_are_shared_under_write_around_and_exclusive_under_write_through() {
        let mut around = tables(false);
        assert!(around.qareg(session(1, 1), b"k", 0));
        assert!(around.qareg(session(2, 1), b"k", 0));
        let mut through = tables(true);
        assert!(through.qareg(session(1, 1), b"k", 0));
        assert!(!through.qareg(session(2, 1), b"k", 1));
        assert!(
            through.qareg(session(1, 1), b"k", 2),
            "its owner may ask again"
        );
        // Once released (or run out), another writer gets it.
        through.release(session(1, 1), [b"k".to_vec()]);
        assert!(through.qareg(session(2, 1), b"k", 3));
        assert!(through.qareg(session(3, 1), b"j", 3));
        // One that ran out keeps others out until the core has deleted the key's copies.
        assert!(!through.qareg(session(1, 2), b"j", 3 + LEASE));
        let reaped = through.expire(3 + LEASE);
        through.commit_end(REAPER, &reaped, reaped.deleted().to_vec());
        assert!(through.qareg(session(1, 2), b"j", 3 + LEASE));
        assert_eq!(through.counts.q_conflicts, 2);
    }

    #[test]
    fn a_write_around_commit_deletes_every_other_copy() {
        let mut t = tables(false);
        let (a, b, c) = (node(&mut t, 0), node(&mut t, 0), node(&mut t, 0));
        for n in [a, b, c] {
            fill(&mut t, n, b"k", 1);
        }
        fill(&mut t, b, b"j", 1);
        let w = session(a, 7);
        assert!(t.qareg(w, b"k", 2) && t.qareg(w, b"j", 2));
        let items = vec![(b"k".to_vec(), None), (b"j".to_vec(), None)];
        let commit = t.commit_begin(w, &items, 3).unwrap();
        assert!(commit.keep);
        assert_eq!(
            commit.deliveries,
            vec![
                Delivery {
                    node: b,
                    items: items.clone()
                },
                Delivery {
                    node: c,
                    items: vec![(b"k".to_vec(), None)]
                },
            ]
        );
        assert_eq!(
            t.holders(b"k"),
            vec![a, b, c],
            "listed until the deliveries are done (the writer deleted its own already)"
        );
        // Until the deliveries are done, no fill: the Q leases stay, past their lease.
        assert_eq!(t.iget(session(b, 1), b"k", 3 + 10 * LEASE), IReply::Writing);
        t.commit_end(w, &commit, [b"k".to_vec(), b"j".to_vec()]);
        assert!(t.holders(b"k").is_empty() && t.holders(b"j").is_empty());
        assert!(matches!(
            t.iget(session(b, 1), b"k", 4),
            IReply::Granted { .. }
        ));
    }

    #[test]
    fn a_second_write_around_writer_delivers_to_the_holders_the_first_is_still_telling() {
        // Q leases are shared: had the first commit unlisted the holders when it began, the
        // second would find none and return while they still served the old value.
        let mut t = tables(false);
        let (a, b, c) = (node(&mut t, 0), node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, c, b"k", 1);
        let (first, second) = (session(a, 1), session(b, 1));
        assert!(t.qareg(first, b"k", 2) && t.qareg(second, b"k", 2));
        let items = vec![(b"k".to_vec(), None)];
        let one = t.commit_begin(first, &items, 3).unwrap();
        let two = t.commit_begin(second, &items, 4).unwrap();
        assert_eq!(
            one.deliveries,
            vec![Delivery {
                node: c,
                items: items.clone()
            }]
        );
        assert_eq!(two.deliveries, one.deliveries);
        t.commit_end(second, &two, [b"k".to_vec()]);
        assert_eq!(
            t.iget(session(c, 2), b"k", 5),
            IReply::Writing,
            "the first still delivers"
        );
        t.commit_end(first, &one, [b"k".to_vec()]);
        assert!(t.holders(b"k").is_empty());
    }

    /// Write-through: b holds k, and a session of a holds k's Q lease (taken at 2).
    fn a_writes_what_b_holds() -> (Tables, NodeId, NodeId, Owner) {
        let mut t = tables(true);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, b, b"k", 1);
        let w = session(a, 7);
        assert!(t.qareg(w, b"k", 2));
        (t, a, b, w)
    }

    #[test]
    fn a_write_through_commit_refreshes_every_copy_and_the_writer_holds_the_value() {
        let (mut t, a, b, w) = a_writes_what_b_holds();
        let items = vec![(b"k".to_vec(), Some(b"v2".to_vec()))];
        let commit = t.commit_begin(w, &items, 3).unwrap();
        assert!(commit.keep);
        assert_eq!(commit.deliveries, vec![Delivery { node: b, items }]);
        t.commit_end(w, &commit, [b"k".to_vec()]);
        assert_eq!(t.holders(b"k"), vec![b, a]);
    }

    #[test]
    fn a_commit_whose_q_lease_ran_out_sends_deletes() {
        let (mut t, _, b, w) = a_writes_what_b_holds();
        let items = vec![(b"k".to_vec(), Some(b"v2".to_vec()))];
        let commit = t.commit_begin(w, &items, 2 + LEASE).unwrap();
        assert!(!commit.keep);
        // The writer's own copy, which it installed before committing, goes too.
        let delete = vec![(b"k".to_vec(), None)];
        assert_eq!(
            commit.deliveries,
            vec![
                Delivery {
                    node: b,
                    items: delete.clone()
                },
                Delivery {
                    node: w.node,
                    items: delete
                },
            ]
        );
        // The lost lease is taken again while the deletes go out.
        assert_eq!(t.iget(session(b, 1), b"k", 3 + LEASE), IReply::Writing);
        t.commit_end(w, &commit, [b"k".to_vec()]);
        assert!(t.holders(b"k").is_empty());
    }

    #[test]
    fn an_expired_lease_keeps_writers_and_fills_out_until_its_copies_are_deleted() {
        let mut t = tables(true);
        let (a, b, c) = (node(&mut t, 0), node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, c, b"k", 1);
        let (wa, wb) = (session(a, 1), session(b, 1));
        assert!(t.qareg(wa, b"k", 2));
        // a's lease runs out (a may have committed to the data store): until the core has
        // deleted k's copies, b would compute from one, and a fill could be older than a's write.
        assert!(!t.qareg(wb, b"k", 2 + LEASE));
        assert_eq!(t.iget(session(c, 2), b"k", 2 + LEASE), IReply::Writing);
        let reaped = t.expire(2 + LEASE);
        let delete = vec![(b"k".to_vec(), None)];
        assert_eq!(
            reaped.deliveries,
            vec![Delivery {
                node: c,
                items: delete.clone()
            }]
        );
        assert!(
            !t.qareg(wb, b"k", 2 + LEASE),
            "not until the deletes are delivered"
        );
        t.commit_end(REAPER, &reaped, reaped.deleted().to_vec());
        assert!(t.holders(b"k").is_empty());
        assert!(t.qareg(wb, b"k", 3 + LEASE));
        // a's commit comes late, while b holds k: it is blocked and changes nothing.
        let late = vec![(b"k".to_vec(), Some(b"from a".to_vec()))];
        assert_eq!(t.commit_begin(wa, &late, 4 + LEASE), None);
        let mine = vec![(b"k".to_vec(), Some(b"from b".to_vec()))];
        let commit = t.commit_begin(wb, &mine, 5 + LEASE).unwrap();
        assert!(commit.keep);
        t.commit_end(wb, &commit, [b"k".to_vec()]);
        // Then it goes through as deletes, of b's copy and of the one a installed itself.
        let commit = t.commit_begin(wa, &late, 6 + LEASE).unwrap();
        assert!(!commit.keep);
        assert_eq!(
            commit.deliveries,
            vec![
                Delivery {
                    node: b,
                    items: delete.clone()
                },
                Delivery {
                    node: a,
                    items: delete
                },
            ]
        );
        t.commit_end(wa, &commit, [b"k".to_vec()]);
        assert!(t.holders(b"k").is_empty());
    }

    #[test]
    fn a_commit_voids_a_miss_that_raced_it() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        // The reader's lease came after the writer's Q lease ran out and the core reaped it.
        let w = session(a, 7);
        assert!(t.qareg(w, b"k", 0));
        let reaped = t.expire(LEASE);
        t.commit_end(REAPER, &reaped, reaped.deleted().to_vec());
        assert!(matches!(
            t.iget(session(b, 1), b"k", LEASE),
            IReply::Granted { .. }
        ));
        let commit = t
            .commit_begin(w, &[(b"k".to_vec(), None)], LEASE + 1)
            .unwrap();
        assert!(!commit.keep);
        assert!(!t.iset(session(b, 1), b"k", LEASE + 2));
    }

    #[test]
    fn a_q_lease_that_runs_out_deletes_every_copy() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, b, b"k", 1);
        assert!(t.qareg(session(a, 7), b"k", 2));
        assert!(t.expire(1 + LEASE).deliveries.is_empty());
        let commit = t.expire(2 + LEASE);
        assert_eq!(
            commit.deliveries,
            vec![Delivery {
                node: b,
                items: vec![(b"k".to_vec(), None)]
            }]
        );
        assert_eq!(t.counts.q_expired, 1);
        // The core holds the key while it tells the holders.
        assert_eq!(t.iget(session(b, 1), b"k", 3 + LEASE), IReply::Writing);
        t.commit_end(REAPER, &commit, commit.deleted().to_vec());
        assert!(t.holders(b"k").is_empty());
        assert!(matches!(
            t.iget(session(b, 1), b"k", 3 + LEASE),
            IReply::Granted { .. }
        ));
    }

    #[test]
    fn a_cut_appnode_renews_no_more_holds_nothing_new_and_is_forgotten_at_expiry() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, a, b"k", 1);
        assert!(t.renew(a, 1_000));
        assert_eq!(t.node_expires_at(a), Some(1_000 + NODE_LEASE));
        t.cut(a);
        assert!(!t.renew(a, 1_001));
        assert!(!t.listen(a));
        assert!(matches!(
            t.iget(session(a, 1), b"j", 1_002),
            IReply::Granted { .. }
        ));
        assert!(
            !t.iset(session(a, 1), b"j", 1_003),
            "a cut AppNode takes no copy"
        );
        assert_eq!(
            t.holders(b"k"),
            vec![a],
            "until its lease runs out it may serve k"
        );
        t.expire(999 + NODE_LEASE);
        assert_eq!(t.node_expires_at(a), Some(1_000 + NODE_LEASE));
        t.expire(1_000 + NODE_LEASE);
        assert_eq!(t.node_expires_at(a), None);
        assert!(t.holders(b"k").is_empty());
        // b never renewed: its lease from hello ran out long ago.
        assert_eq!(t.node_expires_at(b), None);
        assert_eq!(t.counts.nodes_forgotten, 2);
    }

    #[test]
    fn an_appnode_not_listening_holds_nothing_and_cannot_renew() {
        let mut t = tables(false);
        let a = t.hello(0);
        assert!(!t.renew(a, 1));
        let b = node(&mut t, 0);
        assert!(!t.listen(b), "one delivery connection per AppNode");
        assert!(matches!(
            t.iget(session(a, 1), b"k", 1),
            IReply::Granted { .. }
        ));
        assert!(!t.iset(session(a, 1), b"k", 2));
        assert!(!t.renew(99, 1), "unknown AppNode");
    }

    #[test]
    fn a_writer_voids_the_read_leases_of_other_sessions() {
        let mut t = tables(false);
        let (a, b) = (node(&mut t, 0), node(&mut t, 0));
        let (reader, writer) = (session(a, 1), session(b, 1));
        for key in [b"k".as_slice(), b"j"] {
            assert!(matches!(t.iget(reader, key, 0), IReply::Granted { .. }));
        }
        t.release(reader, Vec::<Vec<u8>>::new());
        assert!(t.qareg(writer, b"k", 1));
        assert!(!t.validate(reader, [b"k".to_vec(), b"j".to_vec()], 2));
        // Ended by the validation: asking again starts a new one, void under the Q lease.
        assert_eq!(t.iget(reader, b"k", 3), IReply::Writing);
        assert!(!t.validate(reader, [b"k".to_vec()], 4));
        assert!(matches!(t.iget(reader, b"j", 5), IReply::Granted { .. }));
        assert!(t.validate(reader, [b"j".to_vec()], 6));
        // A session's own Q lease leaves its read lease standing.
        assert!(matches!(t.iget(writer, b"x", 7), IReply::Granted { .. }));
        assert!(t.qareg(writer, b"x", 8));
        assert!(t.validate(writer, [b"x".to_vec()], 9));
    }

    #[test]
    fn a_read_lease_ends_with_a_stored_fill_and_runs_out() {
        let mut t = tables(false);
        let a = node(&mut t, 0);
        let reader = session(a, 1);
        assert!(matches!(t.iget(reader, b"k", 0), IReply::Granted { .. }));
        assert!(t.iset(reader, b"k", 1));
        assert!(
            !t.validate(reader, [b"k".to_vec()], 2),
            "the copy guards the read now"
        );
        assert!(matches!(
            t.iget(session(a, 2), b"j", 10),
            IReply::Granted { .. }
        ));
        t.release(session(a, 2), Vec::<Vec<u8>>::new());
        t.expire(10 + LEASE);
        assert!(!t.validate(session(a, 2), [b"j".to_vec()], 10 + LEASE));
        assert_eq!(t.sizes().0, 1, "only k, which a holds, is left");
    }

    #[test]
    fn ingest_names_the_holders_and_bounds_the_replicas() {
        let mut t = Tables::new(Settings {
            lease_ms: LEASE,
            node_lease_ms: NODE_LEASE,
            exclusive_q: false,
            max_replicas: 2,
            password: None,
        });
        let (a, b, c) = (node(&mut t, 0), node(&mut t, 0), node(&mut t, 0));
        fill(&mut t, a, b"k", 1);
        assert_eq!(
            t.iget(session(b, 1), b"k", 2),
            IReply::Granted { holders: vec![a] }
        );
        assert!(t.iset(session(b, 1), b"k", 3));
        assert_eq!(
            t.iget(session(c, 1), b"k", 4),
            IReply::Granted {
                holders: vec![a, b]
            }
        );
        assert!(
            !t.iset(session(c, 1), b"k", 5),
            "a third replica is refused"
        );
        // A holder refilling keeps its place.
        assert!(matches!(
            t.iget(session(a, 2), b"k", 6),
            IReply::Granted { .. }
        ));
        assert!(t.iset(session(a, 2), b"k", 7));
    }
}
