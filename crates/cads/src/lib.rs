//! cads: a cache-augmented data store framework.
//!
//! An application describes its data with [`CacheStore`]s (or uses the document layer,
//! [`documents`]), and runs [`Session`]s: atomic units of work whose reads come from the cache when
//! they can and whose writes keep the cache consistent with the data store under the chosen
//! [`Policy`]. The papers' NgCache (000 §5.2) is the model: Algorithms 8-11 are
//! [`Session::read`], [`Session::write`], [`Session::pre_commit`] and [`Session::commit`];
//! [`Cads::run`] is the form most code wants, re-running a session that a lease conflict aborted.
//!
//! Consistency comes from the CMI's leases: a read that misses takes a shared (I) lease before it
//! queries the data store, a write takes exclusive (Q/X) leases on the keys it changes, and an
//! exclusive lease voids shared ones, so a value computed from data a writer is changing is never
//! cached (001 §3.3). Reads that cannot reach the cache are served by the data store.
//!
//! ```no_run
//! use std::sync::Arc;
//! use cads::{Cads, Config, Policy, documents::Collection};
//! use cads_store::{open, Changes, StoreOptions};
//!
//! let store = open("sqlite:/tmp/app.db", &StoreOptions::default())?;
//! let cmis = vec!["127.0.0.1:7379".parse().unwrap()];
//! let cads = Cads::connect(store, &cmis, Policy::WriteThrough, Config::default());
//! let users = Collection::create(&cads, "users")?;
//! let changes = Changes::from_json(&serde_json::json!({"$inc": {"visits": 1}}))?;
//! let visits = cads.run(|s| {
//!     users.update(s, "alice", changes.clone())?;
//!     Ok(users.get(s, "alice")?.and_then(|d| d["visits"].as_i64()))
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attempts;
mod background;
mod cache_store;
mod combining;
pub mod cpr;
pub mod documents;
mod error;
pub mod failpoints;
pub mod gemini;
mod hex;
mod missed;
pub mod sas;
mod session;
pub mod tardis;
mod tx;
pub mod writeback;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use attempts::Attempts;
use cads_client::{Backoff, Write};
use cads_store::{DataStore, Isolation};
use missed::{Missed, MissedWrites};

pub use cache_store::{CacheChange, CacheStore, DocRef, Modifier};
/// The cache client the framework talks to CMIs with ([`Cads::cache`]), and what a user needs of
/// it: its settings (for [`Cads::new`] with a client of one's own), errors, retry settings
/// ([`Config::retry`]) and what a CMI says about itself.
pub use cads_client::{
    Client, ClientConfig, ClientError, CmiStats, RetryPolicy, TlsConfig, TlsIdentity, TlsName,
};
/// Where a process's session ids come from: a client of one's own draws them from
/// `Coordinator::process()`, as [`Cads::connect`] does; the coordinator's id service hands
/// them to other processes (`Coordinator::use_service`).
pub use cads_coord::ids::{IdRanges, IdServer};
pub use cads_coord::Coordinator;
/// The data-store side: stores to open ([`store::open`]), documents and change operators, SQL
/// transactions, fault injection.
pub use cads_store as store;
pub use combining::MAX_COMBINED;
pub use error::{Error, Result};
pub use gemini::GeminiRouter;
pub use sas::{SasConfig, SasStats};
pub use session::Session;
pub use tardis::{AppNodes, Mode, TardisConfig, TardisCounts, Technique};
pub use tx::StoreTx;
pub use writeback::{
    SqlBuffer, Statement, Workers, WriteBackConfig, WriteBackCounts, WriteBackStats,
};

/// How writes keep the cache and the data store consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// No cache: every read and write goes to the data store (the baseline).
    DataStoreOnly,
    /// Writes delete the cached entries they make stale; the next read refills them.
    WriteAround,
    /// Writes update the cached entries they change, synchronously with the data store.
    WriteThrough,
    /// Writes update the cached entries and leave their changes in the cache as buffered writes,
    /// which background workers apply to the data store (000 ch. 3; see [`writeback`]).
    WriteBack,
    /// Cache-aside as applications write it over Redis or memcached, for comparison only: a
    /// read that misses fills the key with a plain SET, a write deletes its keys after the data
    /// store commits, and nothing takes a lease. A fill computed before a write and stored after
    /// its delete stays cached (001 §3.3): this policy serves stale values, which the benchmarks'
    /// validators count.
    CacheAside,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::DataStoreOnly => "none",
            Policy::WriteAround => "write-around",
            Policy::WriteThrough => "write-through",
            Policy::WriteBack => "write-back",
            Policy::CacheAside => "cache-aside",
        }
    }

    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "none" | "data-store" => Some(Policy::DataStoreOnly),
            "write-around" => Some(Policy::WriteAround),
            "write-through" => Some(Policy::WriteThrough),
            "write-back" => Some(Policy::WriteBack),
            "cache-aside" => Some(Policy::CacheAside),
            _ => None,
        }
    }

    /// The lease mode the CMIs must run for this policy.
    pub fn cmi_mode(self) -> &'static str {
        match self {
            Policy::WriteAround | Policy::CacheAside => "write-around",
            _ => "write-through",
        }
    }
}

/// Framework settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The CMIs' password (their `requirepass`), sent with AUTH on every connection
    /// [`Cads::connect`] opens. A CMI that wants one and does not get it (or gets a wrong one)
    /// fails every call with `ClientError::Auth`.
    pub cache_password: Option<Password>,
    /// TLS to the CMIs (those started with `--tls-cert`): the CAs to trust and the name their
    /// certificates carry. None speaks plaintext; a CMI that serves TLS then refuses the
    /// framework, and a CMI that does not fails every call with `ClientError::Tls`.
    pub cache_tls: Option<TlsConfig>,
    /// Where CMIs on this machine serve Unix sockets (`cads server --unixsocket-dir`): those at
    /// loopback addresses are reached through them, which skips TCP's work (see
    /// `ClientConfig::unix_dir`).
    pub cache_unix_dir: Option<std::path::PathBuf>,
    /// Isolation of the sessions' SQL transactions. READ COMMITTED lets every miss be cached; with
    /// a snapshot fixed for the whole transaction, misses read after the snapshot was taken are
    /// served but not cached (see `Session::read`).
    pub isolation: Isolation,
    /// How long [`Cads::run`] keeps running again a session that lost a lease conflict (or a
    /// data-store serialization conflict) before it reports the last abort; write-back's
    /// appliers retry as long. After its first loss a session carries a ticket, its work's
    /// start time, and its writes to a hot key then wait for younger sessions instead of losing
    /// again (docs/ARCHITECTURE.md, "Hot keys"), so giving up takes contention that lasts this
    /// long.
    pub give_up_after: Duration,
    /// Backoff between attempts.
    pub retry: RetryPolicy,
    /// Write-back's settings (used with [`Policy::WriteBack`]; TARDIS keeps its buffered writes
    /// on `write_back.replicas` CMIs too).
    pub write_back: WriteBackConfig,
    /// TARDIS (000 ch. 4): with write-around or write-through, writes are buffered in the cache
    /// while the data store is down and applied once it is back ([`tardis`]). Needs the CMIs in
    /// write-through lease mode ([`Config::cmi_mode`]) and [`tardis::Recovery`] running. Ignored
    /// by the other policies (write-back tolerates an outage by design).
    pub tardis: Option<TardisConfig>,
    /// Gemini (004): keys are routed by the configuration the coordinator (`cads_coord`'s service)
    /// stores on the CMIs, which survives an instance's failure and recovery without stale reads
    /// ([`gemini`]). Write-around only, with the client [`Cads::connect`] builds.
    pub gemini: bool,
    /// SAS (001): the cache lives in this process, kept consistent with the other AppNodes' by
    /// the SAS core at `SasConfig::core` ([`sas`]); [`Cads::connect`] then uses no CMI.
    /// Write-around and write-through, without TARDIS or Gemini.
    pub sas: Option<SasConfig>,
}

impl Config {
    /// The lease mode the CMIs must run for `policy` with these settings: TARDIS buffers pinned
    /// writes and updates cached values in failed mode, which write-around CMIs refuse.
    pub fn cmi_mode(&self, policy: Policy) -> &'static str {
        match policy {
            Policy::WriteAround if self.tardis.is_some() => Policy::WriteThrough.cmi_mode(),
            _ => policy.cmi_mode(),
        }
    }
}

/// A password, kept out of `Debug` output (and so out of logs and panics that print a
/// [`Config`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(hidden)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_password: None,
            cache_tls: None,
            cache_unix_dir: None,
            isolation: Isolation::ReadCommitted,
            give_up_after: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            write_back: WriteBackConfig::default(),
            tardis: None,
            gemini: false,
            sas: None,
        }
    }
}

/// The framework for one application process (an AppNode).
pub struct Cads {
    store: Arc<dyn DataStore>,
    cache: Option<Client>,
    policy: Policy,
    config: Config,
    /// The CMIs that missed writes of this process; see [`Cads::missed_cmi`].
    missed: MissedWrites,
    /// When a missed CMI was last tried, in ms since `started`.
    last_heal: AtomicU64,
    /// Lost cache commits whose keys could not be invalidated (see [`Cads::invalidate`]).
    invalidations_failed: AtomicU64,
    started: Instant,
    write_back: WriteBackStats,
    /// Append buffering: the documents this process buffered a write of lately.
    pub(crate) recent_buffers: writeback::recent::RecentBuffers,
    /// Write-back, Design 2: `cads_applied_sessions` exists.
    pub(crate) applied_sessions_ready: AtomicBool,
    /// Write-back's MACs, once the key is known.
    seal: OnceLock<writeback::Seal>,
    /// TARDIS's mode and counters, when it is on.
    tardis: Option<tardis::Tardis>,
    /// Gemini's routes, when it is on (the client routes by the same router).
    gemini: Option<Arc<GeminiRouter>>,
    /// The writes of [`Cads::write`] in flight, grouped by the keys they change.
    combiner: combining::Combiner,
    /// SAS: this AppNode's own cache and its link to the SAS core.
    sas: Option<Arc<sas::node::Node>>,
}

/// What the plain GETs of [`Cads::read`] and [`Cads::read_each`] found.
enum CachedRead<T> {
    Hit(T),
    /// A miss, or a query plain GETs cannot answer.
    SessionPath,
    /// A key's CMI did not answer: the session works on the data store alone.
    Unreachable(cads_client::ClientError),
}

/// How many keys a query read with plain GETs may have.
#[derive(Clone, Copy)]
enum Keys {
    /// One ([`Cads::read`]): the values of several keys are of one moment only in a session.
    One,
    /// Any number but none ([`Cads::read_each`]).
    Any,
}

impl Keys {
    fn fit(self, keys: &[Vec<u8>]) -> bool {
        match self {
            Keys::One => keys.len() == 1,
            Keys::Any => !keys.is_empty(),
        }
    }
}

/// How often a process tries to reach CMIs that missed its writes.
const HEAL_EVERY: Duration = Duration::from_millis(500);

impl Cads {
    /// The framework over a data store and, unless the policy is `DataStoreOnly`, a cache client.
    /// Gemini ([`Config::gemini`]) needs the client [`Cads::connect`] builds, and panics here.
    pub fn new(
        store: Arc<dyn DataStore>,
        cache: Option<Client>,
        policy: Policy,
        config: Config,
    ) -> Cads {
        assert!(
            !config.gemini || policy == Policy::DataStoreOnly,
            "Gemini routes keys with the client Cads::connect builds"
        );
        Cads::with_router(store, cache, policy, config, None)
    }

    fn with_router(
        store: Arc<dyn DataStore>,
        cache: Option<Client>,
        policy: Policy,
        config: Config,
        gemini: Option<Arc<GeminiRouter>>,
    ) -> Cads {
        let cache = if policy == Policy::DataStoreOnly {
            None
        } else {
            cache
        };
        let cmis = cache.as_ref().map_or(0, Client::cmis);
        let tardis = match policy {
            Policy::WriteAround | Policy::WriteThrough if cache.is_some() => {
                config.tardis.clone().map(tardis::Tardis::new)
            }
            _ => None,
        };
        let gemini = gemini.filter(|_| cache.is_some());
        let sas = match (&config.sas, policy) {
            (None, _) | (Some(_), Policy::DataStoreOnly) => None,
            (Some(sas), Policy::WriteAround | Policy::WriteThrough) => {
                assert!(
                    config.tardis.is_none() && !config.gemini,
                    "SAS is built without TARDIS and Gemini"
                );
                Some(sas::node::Node::start(sas.clone()))
            }
            (Some(_), other) => panic!(
                "SAS is built for write-around and write-through, not {}",
                other.name()
            ),
        };
        if let (Some(router), Some(client)) = (&gemini, &cache) {
            router.refresh(client);
        }
        Cads {
            store,
            cache,
            policy,
            config,
            missed: MissedWrites::new(cmis),
            last_heal: AtomicU64::new(0),
            invalidations_failed: AtomicU64::new(0),
            started: Instant::now(),
            write_back: WriteBackStats::default(),
            recent_buffers: Default::default(),
            applied_sessions_ready: AtomicBool::new(false),
            seal: OnceLock::new(),
            tardis,
            gemini,
            combiner: combining::Combiner::default(),
            sas,
        }
    }

    /// The framework over a data store and the CMIs at `cmis` (started in the policy's lease mode),
    /// with session ids from the process's coordinator, logging in with `config.cache_password`
    /// over TLS when `config.cache_tls` is given.
    pub fn connect(
        store: Arc<dyn DataStore>,
        cmis: &[SocketAddr],
        policy: Policy,
        config: Config,
    ) -> Cads {
        let gemini = (config.gemini && policy != Policy::DataStoreOnly).then(|| {
            assert!(
                policy == Policy::WriteAround && config.tardis.is_none(),
                "Gemini is built for write-around without TARDIS, not {}",
                policy.name()
            );
            Arc::new(GeminiRouter::new(cmis.len()))
        });
        let client = (policy != Policy::DataStoreOnly && config.sas.is_none()).then(|| {
            let mut client_config = ClientConfig::new(cmis.to_vec());
            client_config.password = config.cache_password.as_ref().map(|p| p.0.clone());
            client_config.tls = config.cache_tls.clone();
            client_config.unix_dir = config.cache_unix_dir.clone();
            match &gemini {
                Some(router) => {
                    Client::with_router(client_config, router.clone(), Coordinator::process())
                }
                None => Client::new(client_config, Coordinator::process()),
            }
        });
        Cads::with_router(store, client, policy, config, gemini)
    }

    pub fn store(&self) -> &Arc<dyn DataStore> {
        &self.store
    }

    /// The client of the CMIs (None without a cache, and under SAS, whose cache is in-process).
    pub fn cache(&self) -> Option<&Client> {
        self.cache.as_ref()
    }

    /// Whether reads may be served from a cache: CMIs, or this process's own under SAS.
    pub fn has_cache(&self) -> bool {
        self.cache.is_some() || self.sas.is_some()
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// TARDIS's mode in this process (None when TARDIS is off).
    pub fn mode(&self) -> Option<Mode> {
        self.tardis.as_ref().map(tardis::Tardis::mode)
    }

    /// How long this process has been in its current TARDIS mode.
    pub fn in_mode_for(&self) -> Option<Duration> {
        self.tardis.as_ref().map(tardis::Tardis::in_mode_for)
    }

    /// How long this process's last TARDIS recovery lasted, from the monitor finding the data
    /// store back to normal mode (None: TARDIS is off, or no recovery ended yet).
    pub fn last_recovery(&self) -> Option<Duration> {
        self.tardis.as_ref().and_then(tardis::Tardis::last_recovery)
    }

    /// TARDIS's counters in this process (None when TARDIS is off).
    pub fn tardis_counts(&self) -> Option<TardisCounts> {
        self.tardis.as_ref().map(tardis::Tardis::counts)
    }

    pub(crate) fn tardis(&self) -> Option<&tardis::Tardis> {
        self.tardis.as_ref()
    }

    /// SAS: this AppNode's node, when the cache is in-process.
    pub(crate) fn sas_node(&self) -> Option<&Arc<sas::node::Node>> {
        self.sas.as_ref()
    }

    /// SAS: what this AppNode's cache and its link to the core counted (None on CS).
    pub fn sas_stats(&self) -> Option<SasStats> {
        self.sas.as_deref().map(sas::stats)
    }

    /// SAS: this AppNode's own copy of `key`, without counting a hit (None without one, or on
    /// CS), for a caller that compares the cache with the data store while no session runs.
    pub fn sas_copy(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.sas.as_ref().and_then(|n| n.local.peek(key))
    }

    /// SAS: waits until this AppNode has registered with the core and serves its copies; false
    /// if `timeout` passed first (or the cache is not in-process). Until then reads go to the
    /// data store.
    pub fn sas_ready(&self, timeout: Duration) -> bool {
        self.sas
            .as_ref()
            .is_some_and(|n| n.wait_registered(timeout))
    }

    /// Gemini's router, when Gemini is on.
    pub fn gemini(&self) -> Option<&GeminiRouter> {
        self.gemini.as_deref()
    }

    /// Documents listed as having buffered writes (TARDIS's TeleW keys, write-back's
    /// PendingWrites); a line may outlive its buffered write until an applier or the TARDIS
    /// monitor removes it.
    pub fn dirty_documents(&self) -> Result<usize> {
        Ok(writeback::pending(self)?.len())
    }

    /// Design 1's PendingWrites partitions, which are TARDIS's TeleW keys when it is on.
    pub(crate) fn buffer_partitions(&self) -> usize {
        match &self.tardis {
            Some(t) => t.config.telew.max(1),
            None => self.config.write_back.partitions.max(1),
        }
    }

    /// Group commit in this process ([`Cads::write`]): the sessions that carried more than one
    /// write, and the writes they carried.
    pub fn combined_writes(&self) -> (u64, u64) {
        self.combiner.counts()
    }

    /// Write-back's counters in this process.
    pub fn write_back_stats(&self) -> &WriteBackStats {
        &self.write_back
    }

    /// Write-back's MACs under `WriteBackConfig::mac_key`; the stored key is read from the data
    /// store (created there if missing) on first use.
    /// Whether this process has the key that seals buffered writes ([`writeback::MacKey`]), which it loads
    /// the first time it needs it (TARDIS's recovery threads load it when they start, and again
    /// until they succeed): without it, no write can be buffered while the data store is down.
    pub fn mac_key_loaded(&self) -> bool {
        self.seal.get().is_some()
    }

    pub(crate) fn seal(&self) -> Result<&writeback::Seal> {
        if let Some(seal) = self.seal.get() {
            return Ok(seal);
        }
        let seal = self.config.write_back.mac_key.seal(self.store.as_ref())?;
        Ok(self.seal.get_or_init(|| seal))
    }

    /// Pinned bytes on every CMI (buffered writes, PendingWrites, markers), from their INFO; a
    /// CMI that does not answer counts 0.
    pub fn pinned_bytes(&self) -> u64 {
        let Some(client) = &self.cache else {
            return 0;
        };
        (0..client.cmis())
            .filter_map(|cmi| client.info(cmi).ok())
            .map(|stats| stats.used_memory_pinned)
            .sum()
    }

    /// What every CMI says about itself (INFO), in the order of the client's CMIs; empty without
    /// a cache. A caller can check, for instance, that each runs in the lease mode its policy
    /// needs ([`CmiStats::mode`] against [`Policy::cmi_mode`]).
    pub fn cmi_stats(&self) -> Result<Vec<CmiStats>> {
        let Some(client) = &self.cache else {
            return Ok(Vec::new());
        };
        (0..client.cmis())
            .map(|cmi| client.info(cmi).map_err(Error::from))
            .collect()
    }

    /// Empties every CMI (FLUSHALL): values, buffered writes, leases and sessions. For a caller
    /// that starts afresh on CMIs it shares with nothing else (a benchmark run, a test); never
    /// while write-back has buffered writes it means to keep.
    pub fn flush_cache(&self) -> Result<()> {
        match &self.cache {
            Some(client) => client.flush_all().map_err(Error::from),
            None => Ok(()),
        }
    }

    /// Starts a session (Algorithm 8, `startSession`).
    pub fn session(&self) -> Session<'_> {
        self.heal();
        Session::new(self, false, None)
    }

    /// Runs `work` in a session and commits it; a session aborted by a lease conflict or a
    /// data-store serialization conflict is rolled back and run again after a backoff that grows
    /// with every loss, for up to [`Config::give_up_after`]; from its second attempt it carries
    /// its ticket, so its writes to a hot key wait for younger sessions rather than lose to them.
    /// Other errors end it at once.
    pub fn run<T>(&self, mut work: impl FnMut(&mut Session<'_>) -> Result<T>) -> Result<T> {
        let mut attempts = Attempts::new(&self.config);
        let mut write_through = false;
        let mut queues_first = Vec::new();
        loop {
            let ticket = attempts.start();
            self.heal();
            let mut session = Session::new(self, write_through, ticket);
            let held = session.hold_first(std::mem::take(&mut queues_first));
            let outcome = match held.and_then(|()| work(&mut session)) {
                Ok(value) => session.commit().map(|()| value),
                Err(e) => {
                    queues_first = session.queues_to_hold_first();
                    session.abort();
                    Err(e)
                }
            };
            match outcome {
                // Write-back's pinned memory is full: the session runs again as write-through
                // (000 §3.3.4.1), applying the buffered writes of its documents first.
                Err(Error::BufferFull) if self.policy == Policy::WriteBack && !write_through => {
                    self.write_back.fallbacks.fetch_add(1, Ordering::Relaxed);
                    write_through = true;
                }
                Err(e) if e.is_retryable() => {
                    if !attempts.again() {
                        return Err(attempts.gave_up(e));
                    }
                }
                other => return other,
            }
        }
    }

    /// A session of one read statement: what [`Session::read`] in [`Cads::run`] returns, in one
    /// cache round trip when the query reads a single key and the cache holds it. A hit is then a
    /// plain GET without a lease: it returns the value the cache holds, which every policy
    /// changes (or deletes) before it acknowledges a write, and never a writer's staged value, so
    /// a read that starts after a write was acknowledged sees it. The shared lease of
    /// [`Session::read`] adds what only a session of several reads needs: that a writer voiding
    /// it aborts the session, so that its reads agree. Misses and multi-key queries take the
    /// session path; a CMI that cannot be reached sends the read to the data store.
    pub fn read<C: CacheStore>(&self, cs: &C, query: &C::Query) -> Result<C::Output> {
        let cached = self.plain_gets(cs, query, Keys::One);
        self.read_or_run(cached, cs, query)
    }

    /// A query whose keys are read each as [`Cads::read`] reads a single key, all at once: every
    /// value is at least as new as every write acknowledged before the call, and never a staged
    /// one, but the values need not be of one moment: a session that wrote two of the keys may
    /// show in one and not yet in the other, and of two writes to different keys the later may
    /// show without the earlier. When every key is cached that takes one round trip, the plain
    /// GETs of every CMI sent together, and no lease; otherwise, after that round trip, the query
    /// runs as [`Cads::read`] runs it, in a session whose values are of one moment. For queries
    /// whose result is each key's value on its own (`Collection::read_each_text`), for a reader
    /// that checks or shows each on its own (BG's list actions).
    pub(crate) fn read_each<C: CacheStore>(&self, cs: &C, query: &C::Query) -> Result<C::Output> {
        let cached = self.plain_gets(cs, query, Keys::Any);
        self.read_or_run(cached, cs, query)
    }

    fn read_or_run<C: CacheStore>(
        &self,
        cached: CachedRead<C::Output>,
        cs: &C,
        query: &C::Query,
    ) -> Result<C::Output> {
        match cached {
            CachedRead::Hit(output) => Ok(output),
            CachedRead::SessionPath => self.run(|s| s.read(cs, query)),
            CachedRead::Unreachable(e) => self.run(|s| {
                s.degrade(&e);
                s.read(cs, query)
            }),
        }
    }

    /// The cached result of `query` from plain GETs of its keys, if the cache holds them all and
    /// the query has as many keys as `allowed` lets it.
    fn plain_gets<C: CacheStore>(
        &self,
        cs: &C,
        query: &C::Query,
        allowed: Keys,
    ) -> CachedRead<C::Output> {
        if let Some(node) = &self.sas {
            // SAS: the AppNode's own copies, with no round trip.
            let keys = cs.keys_read(query);
            if !allowed.fit(&keys) {
                return CachedRead::SessionPath;
            }
            let values: Option<Vec<Vec<u8>>> = keys
                .iter()
                .map(|key| node.get(key).map(|(_, value)| value))
                .collect();
            let hit = values.and_then(|values| cs.result_from_cache(query, &values));
            // A miss is counted by the session that reads the keys next.
            if hit.is_some() {
                node.local.count(keys.len() as u64, 0);
            }
            return hit.map_or(CachedRead::SessionPath, CachedRead::Hit);
        }
        let Some(client) = &self.cache else {
            return CachedRead::SessionPath;
        };
        // Gemini: a plain GET names no configuration, and dirty keys need repairing first.
        if self.policy == Policy::DataStoreOnly || !self.leases() || self.gemini.is_some() {
            return CachedRead::SessionPath;
        }
        let keys = cs.keys_read(query);
        if !allowed.fit(&keys) {
            return CachedRead::SessionPath;
        }
        self.heal();
        if self.missed_among(&keys).is_some() {
            return CachedRead::SessionPath;
        }
        // A read alone's one key skips the batching of several CMIs' requests.
        let got = match keys.as_slice() {
            [key] => vec![client.get(key)],
            _ => {
                let places: Vec<(usize, &[u8])> = keys
                    .iter()
                    .map(|key| (client.route(key), key.as_slice()))
                    .collect();
                client.get_at(&places)
            }
        };
        let mut values = Vec::with_capacity(keys.len());
        for value in got {
            match value {
                Ok(Some(value)) => values.push(value),
                Err(e) if e.is_unavailable() => return CachedRead::Unreachable(e),
                Ok(None) | Err(_) => return CachedRead::SessionPath,
            }
        }
        match cs.result_from_cache(query, &values) {
            Some(output) => CachedRead::Hit(output),
            None => CachedRead::SessionPath,
        }
    }

    /// Deletes `keys` from the cache in a session of its own, under exclusive leases, after a
    /// write whose data-store commit succeeded but whose cache commit failed (its leases ran
    /// out). The CMI deleted the keys that session held when its leases expired, but a reader
    /// that missed meanwhile may have queried the data store before the commit: its fill would
    /// cache the old value for good. The exclusive leases taken here wound such a reader, so its
    /// fill is refused, and the delete removes a value filled before. Keys of a CMI this cannot
    /// reach, or that keeps refusing, are recorded as missed, so this process reads them from the
    /// data store until the CMI is flushed. Retries follow `Config::retry` (its budget bounds them).
    pub(crate) fn invalidate(&self, keys: &[Vec<u8>]) {
        let Some(client) = &self.cache else {
            return;
        };
        if let Some(router) = &self.gemini {
            router.invalidate(client, keys, &self.config);
            return;
        }
        if self.invalidate_with(keys, &[]).is_ok() {
            return;
        }
        tracing::warn!("could not invalidate the keys of a lost cache commit; reading them from the data store");
        self.invalidations_failed.fetch_add(1, Ordering::Relaxed);
        for key in keys {
            self.missed_cmi(client.route(key), Missed::Values);
        }
    }

    /// Deletes `keys` under exclusive leases and makes `writes` (which may need those leases, as
    /// markers do) in one cache session, running it again while other sessions' leases abort it,
    /// within `Config::retry`'s budget.
    pub(crate) fn invalidate_with(
        &self,
        keys: &[Vec<u8>],
        writes: &[(usize, Write)],
    ) -> Result<(), ClientError> {
        let Some(client) = &self.cache else {
            return Ok(());
        };
        let mut keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() && writes.is_empty() {
            return Ok(());
        }
        let mut backoff = Backoff::new(&self.config.retry);
        loop {
            let mut session = client.session();
            let deleted = match keys.is_empty() {
                true => Ok(()),
                false => session.mdelete(&keys),
            };
            let done = deleted
                .and_then(|()| match writes.is_empty() {
                    true => session.validate(),
                    false => session.write_at(writes, true).map(drop),
                })
                .and_then(|()| session.commit());
            match done {
                Ok(()) => return Ok(()),
                // Aborted by another session's lease: again, within the retry budget.
                Err(e) if !e.is_unavailable() && backoff.wait() => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Records that CMI `cmi` missed a write of this process (it was unreachable): until this
    /// process has flushed it, reads of its keys go to the data store, so that a CMI coming back
    /// with old entries never serves them to this process. Other processes rely on the CMI
    /// having lost its entries; a persistent CMI needs Gemini's recovery (004).
    pub(crate) fn missed_cmi(&self, cmi: usize, missed: Missed) {
        self.missed.record(cmi, missed);
    }

    /// Whether CMI `cmi` missed writes it has not been flushed for since.
    pub(crate) fn is_missed(&self, cmi: usize) -> bool {
        self.missed.is_missed(cmi)
    }

    /// The CMI that missed writes on which one of these keys lives, if any.
    pub(crate) fn missed_among(&self, keys: &[Vec<u8>]) -> Option<usize> {
        let client = self.cache.as_ref()?;
        if !self.missed.any() {
            return None;
        }
        keys.iter()
            .map(|k| client.route(k))
            .find(|&cmi| self.is_missed(cmi))
    }

    /// How many lost cache commits left keys this process could not invalidate: each made it
    /// mark the keys' CMIs missed, so that it flushes them (a consistency safeguard that costs the
    /// CMIs' contents; a benchmark reports it).
    pub fn invalidations_failed(&self) -> u64 {
        self.invalidations_failed.load(Ordering::Relaxed)
    }

    /// Flushes CMIs that missed writes once they answer again (at most every `HEAL_EVERY`).
    fn heal(&self) {
        if !self.missed.any() {
            return;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.last_heal.load(Ordering::Relaxed);
        if now < last + HEAL_EVERY.as_millis() as u64
            || self
                .last_heal
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.flush_missed_cmis();
    }

    /// Flushes, now, every CMI that missed writes of this process and answers again (only its
    /// unpinned entries when it missed no replica write; see the `missed` module); returns how
    /// many it flushed. Sessions do this on their own at most every 500 ms; a caller that is about
    /// to compare the cache with the data store while no session runs (a benchmark's final check)
    /// calls it first, so that it sees what the next read would.
    pub fn flush_missed_cmis(&self) -> usize {
        let Some(client) = &self.cache else {
            return 0;
        };
        let mut flushed = 0;
        for cmi in 0..client.cmis() {
            let Some(repair) = self.missed.repair(cmi) else {
                continue;
            };
            // An error reply (a CMI that does not know the option) is no flush.
            if client.flush_cmi(cmi, repair.unpinned).is_ok() {
                tracing::info!(
                    cmi,
                    unpinned_only = repair.unpinned,
                    "CMI reachable again; flushed the entries it may hold stale"
                );
                self.missed.repaired(cmi, repair);
                flushed += 1;
            }
        }
        flushed
    }

    /// Whether sessions take leases: always, but for the cache-aside baseline
    /// ([`Policy::CacheAside`]) and the broken baseline of the race tests
    /// ([`failpoints::LEASES_OFF`]).
    pub(crate) fn leases(&self) -> bool {
        self.policy != Policy::CacheAside && !failpoints::leases_off()
    }
}
