//! cads-engine: one cache manager instance (CMI) as a plain, single-threaded state machine.
//!
//! Commands go in ([`Engine::execute`]), replies come out, and the time is passed in ([`Now`]: the
//! wall clock for key expiry, a monotonic clock for leases), so every rule here is tested without
//! sockets or clocks. The server runtime only moves bytes; an application
//! can also link this crate and run a CMI in-process (SAS, 001).
//!
//! - [`store`]: entries, byte-accurate memory accounting, pinning, eviction candidates, expiry.
//! - [`eviction`]: the eviction-policy trait and LRU.
//! - [`lease`]: the lease engine: S/X session leases (000 Table 3.1, Table 5.1) and IQ leases
//!   (000 §4.4.2.2, 004 Table 2) in one table, sessions, pending versions, wounding, expiry.
//! - [`contention`]: hot keys: wait-die between ticketed sessions, reservations, the most
//!   contended keys.
//! - [`exec`]: the command entry, from typed commands to replies.
//! - [`config_ids`]: Gemini configuration ids (004 §3.2.4).
//! - [`fencing`]: Gemini's fences: the instance lease from the coordinator, sessions'
//!   configurations.
//! - [`persist`]: the append-only log's records, replay and incremental rewrite.
//! - [`long_double`]: Redis's `long double` numbers (x87 extended precision), for INCRBYFLOAT.

pub mod config_ids;
pub mod contention;
pub mod eviction;
pub mod exec;
pub mod failpoints;
pub mod fencing;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod lease;
pub mod long_double;
pub mod persist;
pub mod store;

use std::collections::BTreeSet;

use cads_protocol::SessionId;

/// Hash maps keyed by client-chosen bytes use a seeded hash, so keys cannot be crafted to collide.
type HashMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = hashbrown::HashSet<K, foldhash::fast::RandomState>;

pub use eviction::{EvictionKind, EvictionPolicy, Lru};
pub use lease::{Lease, LeaseKind, SessionState};
pub use persist::{ReplayError, Replayed};
pub use store::{Entry, Memory, NotStored, ENTRY_OVERHEAD};

/// The time a command or a tick runs at. The runtime reads both clocks once per loop turn and
/// passes them in; the engine reads no clock.
///
/// Two clocks because they answer different questions. Key expiry (EXPIRE, TTL, SET PXAT, ...) is
/// defined by Redis on the wall clock, and the append-only log persists it as a Unix time that
/// must mean the same after a restart. Lease, session and tombstone lifetimes are durations: on
/// the wall clock a step (NTP, an operator) would expire or stretch every lease at once, so they
/// run on a clock that never steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Unix time in milliseconds: key expiry and what the log persists.
    pub wall_ms: u64,
    /// Milliseconds on a monotonic clock (any origin, never going back): leases, sessions,
    /// tombstones.
    pub mono_ms: u64,
}

impl Now {
    /// Both clocks at `ms`: for simulations and tests that move one clock by hand.
    pub fn at(ms: u64) -> Now {
        Now {
            wall_ms: ms,
            mono_ms: ms,
        }
    }
}

/// Whether a command's reads count as uses of the keys they read, for eviction. Writes always do:
/// a written entry is as new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Recency {
    #[default]
    Touch,
    /// `CLIENT NO-TOUCH ON`: reads leave the eviction order as it was.
    NoTouch,
}

/// The policy family a CMI serves (000 §5.1.1). Write-through commands get NOTAVAILABLE from a
/// write-around CMI; write-around's commands are a subset of write-through's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Writes delete cached values; exclusive (Q/X) leases on a key are compatible.
    WriteAround,
    /// Writes update cached values under pending versions; exclusive leases exclude each other.
    /// Also serves write-back, whose buffered writes are pinned entries.
    #[default]
    WriteThrough,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::WriteAround => "write-around",
            Mode::WriteThrough => "write-through",
        }
    }

    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "write-around" => Some(Mode::WriteAround),
            "write-through" | "write-back" => Some(Mode::WriteThrough),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub mode: Mode,
    /// Bytes for entries, pending versions and markers; 0 for no limit.
    pub maxmemory: usize,
    /// Bytes for pinned entries, pinned pending versions and markers; 0 for no separate cap.
    pub max_pinned_memory: usize,
    /// How long a lease lives, in ms. A session is aborted when its first lease expires.
    pub lease_ms: u64,
    /// The longest a session may live, in ms, however often it validates; then it is aborted.
    pub max_session_ms: u64,
    /// Bytes for the state of sessions, leases and tombstones (see [`lease::SESSION_OVERHEAD`]);
    /// a request that would need more is refused with NOTSTORED. 0 for no limit.
    pub max_session_memory: usize,
    /// How long an aborted session is remembered so that its late calls still get ABORT, in ms.
    pub tombstone_ms: u64,
    /// Largest value APPEND and friends may build, in bytes.
    pub max_value_bytes: usize,
    pub eviction: EvictionKind,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            mode: Mode::WriteThrough,
            maxmemory: 0,
            max_pinned_memory: 0,
            lease_ms: 500,
            max_session_ms: 5 * 500,
            max_session_memory: 0,
            tombstone_ms: 60_000,
            max_value_bytes: 64 * 1024 * 1024,
            eviction: EvictionKind::Lru,
        }
    }
}

/// Counters shown by INFO.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub commands: u64,
    pub hits: u64,
    pub misses: u64,
    pub leases_granted: u64,
    /// Leases taken away from their holders by a conflicting exclusive request (wounding).
    pub leases_voided: u64,
    /// Leases lost because their session's lifetime ran out.
    pub leases_expired: u64,
    /// RETRY replies: a requester was told to back off.
    pub retries: u64,
    pub sessions_committed: u64,
    /// Sessions ended by ABORT for any reason (conflict, wound, expiry, client).
    pub sessions_aborted: u64,
    pub sessions_wounded: u64,
    pub sessions_expired: u64,
    /// Expired sessions whose end came from their maximum lifetime, before a full lease lifetime.
    pub sessions_outlived: u64,
    /// Requests refused because the sessions' state was at `max_session_memory`.
    pub sessions_refused: u64,
    /// Sessions aborted because they asked for a lease they could not have (they gave way).
    pub sessions_conflicted: u64,
    /// Lease requests that met another session's lease (given way, waited, backed off or
    /// wounding): the sum behind INFO's contended keys.
    pub lease_conflicts: u64,
    /// RETRY replies to ticketed sessions that wait for a key rather than give way
    /// (`contention`).
    pub lease_waits: u64,
}

/// One CMI.
pub struct Engine {
    config: EngineConfig,
    pub(crate) store: store::Store,
    pub(crate) leases: HashMap<Box<[u8]>, Lease>,
    pub(crate) sessions: HashMap<SessionId, lease::Session>,
    /// Keys reserved by the oldest session waiting for them (`contention`).
    pub(crate) reservations: HashMap<Box<[u8]>, SessionId>,
    pub(crate) hot_keys: contention::HotKeys,
    /// When each session's leases expire (or, for an aborted session, when it is forgotten), on the
    /// monotonic clock.
    pub(crate) deadlines: BTreeSet<(u64, SessionId)>,
    /// Bytes of sessions, holds, leases and tombstones, as charged in `lease.rs`.
    pub(crate) session_bytes: usize,
    /// Aborted sessions kept as tombstones.
    pub(crate) tombstones: usize,
    /// Keys carrying a TARDIS marker; kept apart from entries so that deleting or evicting a value
    /// never loses the marker, and charged as pinned memory.
    pub(crate) markers: HashSet<Box<[u8]>>,
    pub(crate) stats: Stats,
    /// Whether the command being run counts its reads as uses (set by `execute_with`).
    pub(crate) recency: Recency,
    /// When the lease from Gemini's coordinator ends, on the monotonic clock (`fencing`).
    pub(crate) instance_lease_until: u64,
    /// This process's incarnation of the CMI, named by the coordinator's grants (`fencing`).
    pub(crate) boot_id: u64,
    /// Whether the cached values include ones restored from the log that `FLUSHALL RESTORED`
    /// has not dropped yet (see [`Engine::hold_restored_values`]).
    pub(crate) holds_restored_values: bool,
}

/// Bytes charged per marker beyond its key.
pub const MARKER_OVERHEAD: usize = 48;

impl Engine {
    pub fn new(config: EngineConfig) -> Engine {
        let store = store::Store::new(
            config.eviction.build(),
            config.maxmemory,
            config.max_pinned_memory,
        );
        Engine {
            config,
            store,
            leases: HashMap::default(),
            sessions: HashMap::default(),
            reservations: HashMap::default(),
            hot_keys: contention::HotKeys::default(),
            deadlines: BTreeSet::new(),
            session_bytes: 0,
            tombstones: 0,
            markers: HashSet::default(),
            stats: Stats::default(),
            recency: Recency::Touch,
            instance_lease_until: 0,
            boot_id: 0,
            holds_restored_values: false,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn mode(&self) -> Mode {
        self.config.mode
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn store_stats(&self) -> &store::StoreStats {
        &self.store.stats
    }

    pub fn memory(&self) -> &Memory {
        &self.store.memory
    }

    pub fn eviction_policy(&self) -> &'static str {
        self.store.policy_name()
    }

    /// The live entry for `key`, without side effects: no use is counted for eviction and nothing
    /// is reclaimed. For tests and tools that observe a CMI without changing what it will do.
    pub fn peek(&self, key: &[u8], now: Now) -> Option<&Entry> {
        self.store.peek(key, now.wall_ms)
    }

    pub fn key_count(&self) -> usize {
        self.store.len()
    }

    pub fn keys_with_expiry(&self) -> usize {
        self.store.with_expiry()
    }

    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    pub fn marker_count(&self) -> usize {
        self.markers.len()
    }

    /// Sessions the CMI knows: active or validated, and aborted ones kept as tombstones.
    pub fn session_counts(&self) -> (usize, usize) {
        (self.sessions.len() - self.tombstones, self.tombstones)
    }

    /// Bytes the state of sessions, leases and tombstones takes, as charged against
    /// `max_session_memory`.
    pub fn session_memory(&self) -> usize {
        self.session_bytes
    }

    pub fn configuration_id(&self) -> u64 {
        self.store.config.latest
    }

    pub fn fragments(&self) -> u32 {
        self.store.config.fragments()
    }

    /// Called once the log is replayed at start. Cached values restored outside a Gemini
    /// configuration may have been overwritten in the data store while this CMI was down, by
    /// application processes that could not reach it, and nothing here says which: they are held
    /// until a cads client's `FLUSHALL RESTORED` drops them, which every cads client sends on
    /// every connection before anything else. Plain Redis clients keep reading them. Under a
    /// Gemini configuration the CMI is fenced until its coordinator has decided what to repair
    /// or discard (004), so its values are kept. Pinned entries (buffered writes) always stay:
    /// they may be the last copy of an acknowledged write.
    pub fn hold_restored_values(&mut self) {
        self.holds_restored_values = self.fragments() == 0 && !self.store.is_empty();
    }

    /// Whether cached values restored from the log wait for `FLUSHALL RESTORED`.
    pub fn holds_restored_values(&self) -> bool {
        self.holds_restored_values
    }

    /// Changes `maxmemory` (0: no limit), evicting at once if the new limit is below what is used.
    pub fn set_maxmemory(&mut self, bytes: usize) {
        self.config.maxmemory = bytes;
        self.store.memory.maxmemory = bytes;
        self.store.evict_to_limit();
    }

    pub fn set_max_pinned_memory(&mut self, bytes: usize) {
        self.config.max_pinned_memory = bytes;
        self.store.memory.max_pinned = bytes;
    }

    pub fn set_lease_ms(&mut self, ms: u64) {
        self.config.lease_ms = ms;
    }

    /// Changes the maximum session lifetime; sessions already open keep the one they started with.
    pub fn set_max_session_ms(&mut self, ms: u64) {
        self.config.max_session_ms = ms;
    }

    /// Changes the cap on session state (0: none). Lowering it below what is held refuses new
    /// sessions and leases until enough sessions end; it ends none.
    pub fn set_max_session_memory(&mut self, bytes: usize) {
        self.config.max_session_memory = bytes;
    }

    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
        self.hot_keys.clear();
        self.store.stats = Default::default();
    }

    /// Periodic work: expires sessions whose leases ran out and reclaims expired entries.
    pub fn tick(&mut self, now: Now) {
        self.expire_sessions(now);
        self.store.expire_due(now.wall_ms, 1000);
    }

    /// When the next session deadline falls, on the monotonic clock, if any (the runtime may sleep
    /// until then).
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Sets or clears a key's marker, keeping memory and the log in step.
    pub(crate) fn set_marker(&mut self, key: &[u8], on: bool) {
        let bytes = key.len() + MARKER_OVERHEAD;
        if on {
            if self.markers.insert(key.into()) {
                // Markers are few and small; they are never refused (losing one would lose the
                // knowledge that a document has buffered writes).
                let _ = self.store.charge(bytes, true, store::Budget::Forced);
                self.store.log.global_record(&[b"MARK", key]);
            }
        } else if self.markers.remove(key) {
            self.store.uncharge(bytes, true);
            self.store.log.global_record(&[b"UNMARK", key]);
        }
    }

    /// Drops every entry, marker, lease and session (`unpinned`: only the unpinned entries, that
    /// is cached values, with the leases and sessions; buffered writes, the lists that name them
    /// and markers stay). Sessions become tombstones: their next call gets ABORT. Tombstones
    /// already there stay for their time: forgetting one would let a late call of its session
    /// start a new session under the old id.
    pub fn flush_all(&mut self, now: Now, unpinned: bool) {
        self.holds_restored_values = false;
        let sids: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.state != SessionState::Aborted)
            .map(|(sid, _)| *sid)
            .collect();
        for sid in sids {
            self.end_session(sid, lease::EndCause::Flushed, now);
        }
        if unpinned {
            self.store.clear_unpinned();
            self.store.log.global_record(&[b"FLUSH", b"UNPINNED"]);
            return;
        }
        let markers: Vec<Box<[u8]>> = self.markers.iter().cloned().collect();
        for key in markers {
            self.set_marker(&key, false);
        }
        self.store.clear();
        self.store.log.global_record(&[b"FLUSH"]);
    }

    /// Checks every bookkeeping invariant against a recount. For tests and fuzzing; O(size).
    pub fn check_invariants(&self) {
        let (mut pending, mut pending_pinned) = (0, 0);
        let mut session_bytes = self.sessions.len() * lease::SESSION_OVERHEAD;
        let mut tombstones = 0;
        for (sid, session) in &self.sessions {
            assert!(
                self.deadlines.contains(&(session.deadline, *sid)),
                "deadline indexed"
            );
            if session.state == SessionState::Aborted {
                assert!(session.holds.is_empty(), "an aborted session holds nothing");
                tombstones += 1;
            } else {
                assert!(
                    session.deadline <= session.ends_by,
                    "no lease past the lifetime"
                );
            }
            for (key, hold) in &session.holds {
                session_bytes += key.len() + lease::HOLD_OVERHEAD;
                let lease = self.leases.get(key).expect("a hold has its lease");
                assert!(lease.holders.contains(sid), "a hold is listed in its lease");
                assert_eq!(lease.kind, hold.kind, "hold and lease agree on the kind");
                if let Some(lease::Pending::Append { base_len, .. }) = &hold.pending {
                    assert_eq!(hold.kind, LeaseKind::Exclusive, "appends need an X lease");
                    let cached = self.store.peek(key, u64::MAX).map(|e| e.value.len());
                    assert!(
                        cached.is_none_or(|len| len == *base_len),
                        "the lease keeps the value appended to"
                    );
                }
                if let Some((charge, pinned)) = hold.pending.as_ref().and_then(|p| p.charge(key)) {
                    pending += charge;
                    if pinned {
                        pending_pinned += charge;
                    }
                }
            }
        }
        assert_eq!(
            self.deadlines.len(),
            self.sessions.len(),
            "one deadline per session"
        );
        for (key, lease) in &self.leases {
            session_bytes += key.len() + lease::LEASE_OVERHEAD;
            assert!(!lease.holders.is_empty(), "no empty lease");
            if self.config.mode == Mode::WriteThrough && lease.kind == LeaseKind::Exclusive {
                assert_eq!(
                    lease.holders.len(),
                    1,
                    "one exclusive holder outside write-around"
                );
            }
            let mut golden = 0;
            for sid in &lease.holders {
                let session = self.sessions.get(sid).expect("a holder exists");
                assert!(session.holds.contains_key(key), "holder holds the key");
                if session.state == SessionState::Validated && lease.kind == LeaseKind::Shared {
                    golden += 1;
                }
            }
            assert_eq!(lease.golden, golden, "golden holders counted");
            if let Some(entry) = self.store.peek(key, 0) {
                assert!(entry.leased, "an entry under a lease is flagged leased");
            }
        }
        for (key, owner) in &self.reservations {
            session_bytes += key.len() + lease::LEASE_OVERHEAD;
            let session = self
                .sessions
                .get(owner)
                .expect("a reservation's owner exists");
            assert_ne!(
                session.state,
                SessionState::Aborted,
                "only live sessions reserve"
            );
            assert!(session.ticket.is_some(), "only ticketed sessions reserve");
            assert!(
                session.reserved.contains(key),
                "the owner lists its reservation"
            );
        }
        for (sid, session) in &self.sessions {
            for key in &session.reserved {
                assert_eq!(
                    self.reservations.get(key),
                    Some(sid),
                    "a listed reservation is held"
                );
            }
        }
        assert_eq!(self.session_bytes, session_bytes, "session bytes");
        assert_eq!(self.tombstones, tombstones, "tombstones counted");
        let markers: usize = self.markers.iter().map(|k| k.len() + MARKER_OVERHEAD).sum();
        self.store
            .check_invariants(pending + markers, pending_pinned + markers);
        let m = &self.store.memory;
        if m.max_pinned != 0 {
            assert!(
                m.pinned <= m.max_pinned + markers,
                "pinned bytes within their cap"
            );
        }
    }
}
