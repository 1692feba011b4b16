//! A deployment for one policy: the data store (behind a call-counting [`FaultyStore`] and a
//! wrapper that counts the benchmark's cache misses), the CMIs (started by the caller's
//! [`Launcher`] in the policy's lease mode, or running elsewhere) and the framework.

use std::cell::Cell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cads::sas::{Core as SasCore, CoreSettings as SasCoreSettings};
use cads::store::{
    Changes, DataStore, Dialect, DocWrite, Document, DocumentStore, DocumentText, Faults,
    FaultyStore, IndexedField, Isolation, SqlStore, SqlTransaction,
};
use cads::writeback::{Buffering, MacKey};
use cads::{Cads, Client, Config, Password, Policy, SasConfig, TlsConfig};

use crate::gemini::{GeminiDeployment, GeminiOptions, GeminiRecord};
use crate::harness::{Contention, CONTENDED_KEYS_KEPT};
use serde_json::Value;

/// Where the cache is (`--cache`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheSpec {
    /// `embedded:N`: N CMIs started in this process on loopback, on free ports, in the lease mode
    /// of each policy (fresh ones for every policy run).
    Embedded {
        /// How many.
        cmis: usize,
    },
    /// `host:port,host:port,...`: CMIs already running. They must run in the lease mode of every
    /// policy given, and are emptied (FLUSHALL) before each run.
    External(Vec<SocketAddr>),
    /// `sas` (or `sas:greedy`): no CMI; each AppNode caches in its own memory, kept consistent
    /// by a SAS core started in this process on loopback (001; `cads::sas`), and computes every
    /// miss from the data store. `sas:ingest`: an AppNode fetches a key another AppNode holds
    /// instead (001 §4). Write-around and write-through.
    Sas {
        /// Ingest rather than Greedy.
        ingest: bool,
    },
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec::Embedded { cmis: 2 }
    }
}

impl CacheSpec {
    /// Parses `embedded:N`, `sas` or a comma-separated list of `host:port`.
    pub fn parse(text: &str) -> Result<CacheSpec> {
        if let Some(n) = text.strip_prefix("embedded:") {
            let cmis: usize = n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| anyhow!("--cache embedded:N needs a positive N, not {n:?}"))?;
            return Ok(CacheSpec::Embedded { cmis });
        }
        if text == "embedded" {
            return Ok(CacheSpec::default());
        }
        match text {
            "sas" | "sas:greedy" => return Ok(CacheSpec::Sas { ingest: false }),
            "sas:ingest" => return Ok(CacheSpec::Sas { ingest: true }),
            _ => {}
        }
        let mut addrs = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let addr = item
                .to_socket_addrs()
                .with_context(|| format!("--cache: cannot resolve {item:?} (use host:port)"))?
                .next()
                .ok_or_else(|| anyhow!("--cache: {item:?} resolves to no address"))?;
            addrs.push(addr);
        }
        if addrs.is_empty() {
            bail!("--cache: give embedded:N, sas, or host:port,host:port,...");
        }
        Ok(CacheSpec::External(addrs))
    }

    /// The spelling [`parse`](Self::parse) reads.
    pub fn describe(&self) -> String {
        match self {
            CacheSpec::Embedded { cmis } => format!("embedded:{cmis}"),
            CacheSpec::Sas { ingest: false } => "sas".to_string(),
            CacheSpec::Sas { ingest: true } => "sas:ingest".to_string(),
            CacheSpec::External(addrs) => addrs
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// The SAS core's I and Q leases under `--cache sas`: a writer's session must commit within it,
/// or the core deletes the copies of its keys.
const SAS_LEASE: Duration = Duration::from_secs(2);

/// An AppNode's lease with the SAS core: how long a writer waits for an AppNode it cannot
/// reach; the AppNode renews it four times per lease.
const SAS_NODE_LEASE: Duration = Duration::from_secs(2);

/// How long an AppNode of a run may take to register with the SAS core.
const SAS_REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of embedded CMIs, and how the framework reaches, trusts and uses any CMIs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmiSettings {
    /// `--maxmemory` of each CMI (the server's default when None).
    pub maxmemory: Option<String>,
    /// `--max-pinned-memory` of each CMI (the server's default when None).
    pub max_pinned_memory: Option<String>,
    /// The CMIs' password: embedded CMIs are started requiring it, and the framework logs in
    /// with it (`Config::cache_password`).
    pub password: Option<Password>,
    /// TLS to CMIs that serve it (`Config::cache_tls`); for CMIs running apart only
    /// ([`CacheSpec::External`]): embedded CMIs serve plaintext.
    pub tls: Option<TlsConfig>,
    /// Where write-back's MAC key comes from (`WriteBackConfig::mac_key`).
    pub write_back_key: MacKey,
    /// Write-back's replicas of each buffered write (`WriteBackConfig::replicas`; the
    /// framework's default when None).
    pub write_back_replicas: Option<usize>,
    /// How write-back adds a write to a buffered write (`WriteBackConfig::buffering`; the
    /// framework's default when None).
    pub write_back_buffering: Option<Buffering>,
    /// How long write-back's workers pause after a pass without a full batch
    /// (`WriteBackConfig::worker_pause`; the framework's default when None).
    pub worker_pause: Option<Duration>,
    /// Embedded CMIs also serve Unix sockets, which the framework uses instead of TCP
    /// (`--cmi-transport unix`; CMIs started as processes to kill, and Gemini's behind their
    /// relays, keep TCP).
    pub unix_sockets: bool,
}

impl CmiSettings {
    /// `config` with these settings' password, TLS and MAC key.
    pub fn framework_config(&self, mut config: Config) -> Config {
        config.cache_password = self.password.clone();
        config.cache_tls = self.tls.clone();
        config.write_back.mac_key = self.write_back_key.clone();
        if let Some(replicas) = self.write_back_replicas {
            config.write_back.replicas = replicas;
        }
        if let Some(buffering) = self.write_back_buffering {
            config.write_back.buffering = buffering;
        }
        if let Some(pause) = self.worker_pause {
            config.write_back.worker_pause = pause;
        }
        config
    }
}

/// What the caller of a benchmark provides that the benchmarks cannot do through the framework:
/// starting CMIs for `--cache embedded:N` (the `cads` command starts them in its own process, on
/// loopback; tests do the same), and starting the application processes of `--appnodes N`.
pub trait Launcher: Sync {
    /// Starts `count` empty CMIs on loopback in lease `mode` (`write-around` or
    /// `write-through`, as [`Policy::cmi_mode`] names them) with `settings`.
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>>;

    /// Starts `count` empty CMIs like [`start_cmis`](Self::start_cmis), each a process of its
    /// own keeping an append-only file, so that a run can kill one and start it again from its
    /// file ([`RunningCmis::kill`], [`RunningCmis::restart`]).
    fn start_cmi_processes(
        &self,
        _count: usize,
        _mode: &str,
        _settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        bail!("this program cannot start CMI processes to kill")
    }

    /// The command that starts one AppNode of a run: this program, run with the same benchmark
    /// options, to which the harness appends `--appnode JOB` (see
    /// [`crate::harness::serve_appnode`]).
    fn appnode_command(&self) -> Result<std::process::Command> {
        bail!("this program cannot start application processes: run with --appnodes 1")
    }
}

/// The launcher of a caller that only uses CMIs already running (`--cache host:port,...`): it
/// starts none.
pub struct NoLauncher;

impl Launcher for NoLauncher {
    fn start_cmis(&self, _: usize, _: &str, _: &CmiSettings) -> Result<Box<dyn RunningCmis>> {
        bail!("this program cannot start CMIs: give the addresses of running ones (host:port,...)")
    }
}

/// CMIs a [`Launcher`] started, until [`RunningCmis::stop`].
pub trait RunningCmis: Send + Sync {
    /// Their addresses.
    fn addrs(&self) -> Vec<SocketAddr>;
    /// Where they serve Unix sockets too, if they do (see [`CmiSettings::unix_sockets`]).
    fn unix_dir(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// Stops them; an error says one stopped with an error.
    fn stop(self: Box<Self>) -> Result<()>;

    /// Kills CMI `index` (SIGKILL), if it is a process of its own
    /// ([`Launcher::start_cmi_processes`]).
    fn kill(&self, index: usize) -> Result<()> {
        bail!("CMI {index} runs in this process and cannot be killed")
    }

    /// Starts the killed CMI `index` again where it was, from its append-only file, and returns
    /// once it answers.
    fn restart(&self, index: usize) -> Result<()> {
        bail!("CMI {index} runs in this process and cannot be restarted")
    }
}

thread_local! {
    /// Set on the benchmark's own threads, so that their data-store reads can be told apart from
    /// the write-back workers'.
    static DRIVER: Cell<bool> = const { Cell::new(false) };
    /// Data-store calls a benchmark thread has made.
    static DRIVER_CALLS: Cell<u64> = const { Cell::new(0) };
    /// `get`s of the benchmark's collection a benchmark thread has made.
    static DRIVER_MISSES: Cell<u64> = const { Cell::new(0) };
}

/// Marks the calling thread as a benchmark thread (its `get`s on the table are misses).
pub(crate) fn mark_driver_thread() {
    DRIVER.with(|d| d.set(true));
}

/// Data-store calls the calling benchmark thread has made so far (every call, of any
/// collection or SQL table): unchanged across an operation means the cache answered it alone.
pub fn driver_store_calls() -> u64 {
    DRIVER_CALLS.with(Cell::get)
}

/// Data-store `get`s of the benchmark's collection the calling benchmark thread has made so far:
/// its cache misses on the document layer (the deployment wraps the data store to count them).
pub fn driver_misses() -> u64 {
    DRIVER_MISSES.with(Cell::get)
}

/// Counts a data-store call if a benchmark thread makes it.
fn count_call() {
    if DRIVER.with(Cell::get) {
        DRIVER_CALLS.with(|c| c.set(c.get() + 1));
    }
}

/// A data store that counts the `get` calls benchmark threads make on one collection. The
/// document layer queries the data store for a single record exactly when its read missed the
/// cache (or the policy has no cache), so these are the driver's cache misses; write-back's
/// workers and INFO-visible bookkeeping reads (PendingWrites, buffered writes) do not count.
/// Each thread counts its own ([`driver_misses`]). It also counts every call of each benchmark
/// thread ([`driver_store_calls`]), for benchmarks whose reads miss through other calls
/// (`get_many`, SQL).
pub(crate) struct MissCountingStore {
    inner: Arc<dyn DataStore>,
    collection: String,
}

impl MissCountingStore {
    pub(crate) fn new(inner: Arc<dyn DataStore>, collection: &str) -> MissCountingStore {
        MissCountingStore {
            inner,
            collection: collection.to_string(),
        }
    }

    /// Counts a call, and a miss of the driver's collection on the driver's thread.
    fn count_get(&self, coll: &str) {
        count_call();
        if coll == self.collection && DRIVER.with(Cell::get) {
            DRIVER_MISSES.with(|c| c.set(c.get() + 1));
        }
    }
}

impl DocumentStore for MissCountingStore {
    fn create_collection(&self, name: &str, indexed: &[IndexedField]) -> cads::store::Result<()> {
        count_call();
        self.inner.create_collection(name, indexed)
    }
    fn drop_collection(&self, name: &str) -> cads::store::Result<()> {
        count_call();
        self.inner.drop_collection(name)
    }
    fn get(&self, coll: &str, id: &str) -> cads::store::Result<Option<Document>> {
        self.count_get(coll);
        self.inner.get(coll, id)
    }
    fn get_many(&self, coll: &str, ids: &[&str]) -> cads::store::Result<Vec<Option<Document>>> {
        count_call();
        self.inner.get_many(coll, ids)
    }
    fn get_text(&self, coll: &str, id: &str) -> cads::store::Result<Option<DocumentText>> {
        self.count_get(coll);
        self.inner.get_text(coll, id)
    }
    fn get_many_text(
        &self,
        coll: &str,
        ids: &[&str],
    ) -> cads::store::Result<Vec<Option<DocumentText>>> {
        count_call();
        self.inner.get_many_text(coll, ids)
    }
    fn insert(&self, coll: &str, id: &str, doc: &Document) -> cads::store::Result<()> {
        count_call();
        self.inner.insert(coll, id, doc)
    }
    fn put(&self, coll: &str, id: &str, doc: &Document) -> cads::store::Result<()> {
        count_call();
        self.inner.put(coll, id, doc)
    }
    fn update(
        &self,
        coll: &str,
        id: &str,
        changes: &Changes,
    ) -> cads::store::Result<Option<Document>> {
        count_call();
        self.inner.update(coll, id, changes)
    }
    fn delete(&self, coll: &str, id: &str) -> cads::store::Result<bool> {
        count_call();
        self.inner.delete(coll, id)
    }
    fn scan(
        &self,
        coll: &str,
        field: Option<&str>,
        from: Bound<&Value>,
        to: Bound<&Value>,
        limit: usize,
    ) -> cads::store::Result<Vec<(String, Document)>> {
        count_call();
        self.inner.scan(coll, field, from, to, limit)
    }
    fn count(&self, coll: &str) -> cads::store::Result<u64> {
        count_call();
        self.inner.count(coll)
    }
    fn insert_many(&self, coll: &str, docs: &[(String, Document)]) -> cads::store::Result<()> {
        count_call();
        self.inner.insert_many(coll, docs)
    }
    fn write_batch_fenced(
        &self,
        writes: &[DocWrite],
        fence: &mut dyn FnMut() -> cads::store::Result<()>,
    ) -> cads::store::Result<()> {
        count_call();
        self.inner.write_batch_fenced(writes, fence)
    }
}

impl SqlStore for MissCountingStore {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }
    fn begin(&self, isolation: Isolation) -> cads::store::Result<Box<dyn SqlTransaction + '_>> {
        count_call();
        self.inner.begin(isolation)
    }
    fn begin_read(
        &self,
        isolation: Isolation,
    ) -> cads::store::Result<Box<dyn SqlTransaction + '_>> {
        count_call();
        self.inner.begin_read(isolation)
    }
    fn execute_batch(&self, sql: &str) -> cads::store::Result<()> {
        count_call();
        self.inner.execute_batch(sql)
    }
}

impl DataStore for MissCountingStore {
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    fn settle(&self) -> cads::store::Result<()> {
        self.inner.settle()
    }
}

/// The data store, the cache and the framework for one policy.
pub struct Deployment {
    /// The framework (in an `Arc` for write-back's workers).
    pub cads: Arc<Cads>,
    /// Counts every call the data store receives (benchmark threads and workers).
    pub faults: Faults,
    cmis: Option<Box<dyn RunningCmis>>,
    /// Gemini's coordinator and the relays in front of the CMIs (`--recovery`).
    gemini: Option<GeminiDeployment>,
    /// The SAS core of `--cache sas`.
    sas_core: Option<SasCore>,
}

impl Deployment {
    /// Wraps `store`, starts (with `launcher`) or reaches the CMIs (none for `DataStoreOnly`)
    /// and builds the framework; external CMIs are checked to run in the policy's lease mode and
    /// emptied.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        policy: Policy,
        store: Arc<dyn DataStore>,
        collection: &str,
        cache: &CacheSpec,
        cmi: &CmiSettings,
        launcher: &dyn Launcher,
        config: Config,
        gemini: Option<&GeminiOptions>,
    ) -> Result<Deployment> {
        let mode = config.cmi_mode(policy);
        let (cmis, addrs) = match (policy, cache) {
            (Policy::DataStoreOnly, _) => (None, Vec::new()),
            (_, CacheSpec::Embedded { .. }) if cmi.tls.is_some() => bail!(
                "TLS is for CMIs running apart (cads server --tls-cert ...), given with --cache \
                 host:port; embedded CMIs serve plaintext"
            ),
            (_, CacheSpec::External(_)) if cmi.unix_sockets => bail!(
                "--cmi-transport unix is for embedded CMIs (--cache embedded:N); CMIs running \
                 apart are reached over TCP"
            ),
            (_, CacheSpec::Embedded { cmis }) => {
                let started = match gemini {
                    Some(g) if g.kills() && policy == Policy::WriteAround => launcher
                        .start_cmi_processes(*cmis, mode, cmi)
                        .context("starting the CMI processes to kill")?,
                    _ => launcher
                        .start_cmis(*cmis, mode, cmi)
                        .context("starting the embedded CMIs")?,
                };
                let addrs = started.addrs();
                (Some(started), addrs)
            }
            (_, CacheSpec::External(addrs)) => (None, addrs.clone()),
            (_, CacheSpec::Sas { .. }) => (None, Vec::new()),
        };
        let mut config = cmi.framework_config(config);
        let sas_core = match (policy, cache) {
            (Policy::DataStoreOnly, _) => None,
            (_, CacheSpec::Sas { ingest }) => {
                let core = SasCore::start(
                    "127.0.0.1:0".parse().expect("an address"),
                    SasCoreSettings {
                        lease_ms: SAS_LEASE.as_millis() as u64,
                        node_lease_ms: SAS_NODE_LEASE.as_millis() as u64,
                        exclusive_q: policy == Policy::WriteThrough,
                        max_replicas: 0,
                        password: cmi.password.as_ref().map(|p| p.0.clone()),
                    },
                )
                .context("starting the SAS core")?;
                let mut sas = sas_config(core.addr(), *ingest);
                sas.password = cmi.password.clone();
                config.sas = Some(sas);
                Some(core)
            }
            _ => None,
        };
        let gemini = match gemini {
            Some(g) if policy == Policy::WriteAround => Some(GeminiDeployment::start(
                &addrs,
                g,
                cmi.password.as_ref().map(|p| p.0.clone()),
            )?),
            _ => None,
        };
        config.gemini = gemini.is_some();
        // Gemini's clients reach the CMIs through the relays' TCP ports.
        if gemini.is_none() {
            config.cache_unix_dir = cmis.as_ref().and_then(|c| c.unix_dir());
        }
        let addrs = gemini.as_ref().map_or(addrs, GeminiDeployment::addrs);
        let mut dep = Deployment::attach(policy, store, collection, &addrs, config);
        dep.cmis = cmis;
        dep.gemini = gemini;
        dep.sas_core = sas_core;
        if let (CacheSpec::External(addrs), true) = (cache, policy != Policy::DataStoreOnly) {
            let stats = dep
                .cads
                .cmi_stats()
                .with_context(|| format!("cannot reach the CMIs at {}", cache.describe()))?;
            for (addr, stats) in addrs.iter().zip(stats) {
                if stats.mode != mode {
                    bail!(
                        "the CMI at {addr} runs in {:?} mode, but policy {} needs {mode} mode \
                         (cads server --mode {mode})",
                        stats.mode,
                        policy.name(),
                    );
                }
            }
            dep.cads
                .flush_cache()
                .context("cannot empty the external CMIs (FLUSHALL)")?;
        }
        Ok(dep)
    }

    /// The framework of an AppNode of a run: over the CMIs at `addrs`, which the process that
    /// deployed started or checked, and emptied (or over the SAS core of `config.sas`); `store`
    /// wrapped as [`Deployment::start`] wraps it. Under SAS it returns once the AppNode has
    /// registered with the core.
    pub fn attach(
        policy: Policy,
        store: Arc<dyn DataStore>,
        collection: &str,
        addrs: &[SocketAddr],
        config: Config,
    ) -> Deployment {
        let faulty = FaultyStore::new(store);
        let faults = faulty.faults();
        let misses = Arc::new(MissCountingStore::new(Arc::new(faulty), collection));
        let cads = Cads::connect(misses, addrs, policy, config);
        if cads.sas_stats().is_some() && !cads.sas_ready(SAS_REGISTER_TIMEOUT) {
            eprintln!(
                "warning: the AppNode has not registered with the SAS core yet; it reads the \
                 data store until it does"
            );
        }
        Deployment {
            cads: Arc::new(cads),
            faults,
            cmis: None,
            gemini: None,
            sas_core: None,
        }
    }

    /// The counters of the SAS core this deployment started (`--cache sas`).
    pub fn sas_core_stats(&self) -> Option<Vec<(&'static str, u64)>> {
        self.sas_core.as_ref().map(SasCore::stats)
    }

    /// The SAS core's address, and whether AppNodes fetch from each other (Ingest), under
    /// `--cache sas`.
    pub fn sas_core(&self) -> Option<(SocketAddr, bool)> {
        self.cads
            .config()
            .sas
            .as_ref()
            .map(|s| (s.core, s.ingest.is_some()))
    }

    /// The addresses of its CMIs (none without a cache).
    pub fn cmi_addrs(&self) -> Vec<SocketAddr> {
        self.cads.cache().map_or_else(Vec::new, |client| {
            (0..client.cmis()).map(|i| client.cmi_addr(i)).collect()
        })
    }

    /// Cache round trips so far ([`Client::round_trips`], or the requests to the SAS core), all
    /// threads.
    pub fn cache_round_trips(&self) -> u64 {
        if let Some(sas) = self.cads.sas_stats() {
            return sas.round_trips;
        }
        self.cads.cache().map_or(0, Client::round_trips)
    }

    /// `keyspace_hits` and `keyspace_misses` summed over the CMIs (None without a cache). These
    /// count every read command, write-back's bookkeeping included.
    pub fn keyspace(&self) -> Option<(u64, u64)> {
        if let Some(sas) = self.cads.sas_stats() {
            return Some((sas.local.hits, sas.local.misses));
        }
        self.cads.cache()?;
        let stats = self.cads.cmi_stats().ok()?;
        Some(stats.iter().fold((0, 0), |(hits, misses), s| {
            (hits + s.keyspace_hits, misses + s.keyspace_misses)
        }))
    }

    /// The CMIs' contention counters, summed, and their most contended keys, merged (None
    /// without a cache).
    pub fn contention(&self) -> Option<Contention> {
        self.cads.cache()?;
        let stats = self.cads.cmi_stats().ok()?;
        let (combined_sessions, combined_writes) = self.cads.combined_writes();
        let mut sum = Contention {
            combined_sessions,
            combined_writes,
            ..Contention::default()
        };
        let mut keys: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &stats {
            sum.lease_conflicts += s.lease_conflicts;
            sum.lease_waits += s.lease_waits;
            sum.sessions_conflicted += s.sessions_conflicted;
            sum.sessions_wounded += s.sessions_wounded;
            sum.sessions_expired += s.sessions_expired;
            for (key, n) in &s.contended_keys {
                *keys.entry(key.clone()).or_default() += n;
            }
        }
        let mut keys: Vec<(String, u64)> = keys.into_iter().collect();
        keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        keys.truncate(CONTENDED_KEYS_KEPT);
        sum.contended_keys = keys;
        Some(sum)
    }

    /// Gemini's coordinator and relays, when the run has `--recovery`.
    pub fn gemini(&self) -> Option<&GeminiDeployment> {
        self.gemini.as_ref()
    }

    /// Fails CMIs as `--fail-cmis` says, sampling their hit ratio, until `stop` is set: None
    /// when the run has no such failure.
    pub(crate) fn fail_cmis(
        &self,
        started: Instant,
        stop: &AtomicBool,
    ) -> Option<Result<GeminiRecord>> {
        let gemini = self.gemini.as_ref()?;
        let failure = gemini.options().failure()?;
        Some(crate::gemini::fail_and_watch(
            gemini,
            self.cmis.as_deref(),
            failure,
            started,
            stop,
        ))
    }

    /// Stops embedded CMIs (also done on drop), after Gemini's coordinator.
    pub fn stop(mut self) -> Result<()> {
        self.gemini = None;
        self.sas_core = None;
        match self.cmis.take() {
            Some(cmis) => cmis.stop().context("an embedded CMI stopped with an error"),
            None => Ok(()),
        }
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.gemini = None;
        if let Some(cmis) = self.cmis.take() {
            if let Err(e) = cmis.stop() {
                eprintln!("warning: an embedded CMI stopped with an error: {e:#}");
            }
        }
    }
}

/// A new temporary directory named `prefix...` that only this user can enter, for files that hold
/// secrets; removed when dropped.
pub fn private_dir(prefix: &str) -> Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("creating a temporary directory")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.path().display()))?;
    Ok(dir)
}

/// A store URL with its password hidden, for messages and run records.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    match (rest.find('@'), rest.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &rest[..colon],
            &rest[at..]
        ),
        _ => url.to_string(),
    }
}

/// What an AppNode of `--cache sas` runs with: the core at `core`, and with `ingest`, its copies
/// served to the other AppNodes on a free loopback port.
pub fn sas_config(core: SocketAddr, ingest: bool) -> SasConfig {
    let mut config = SasConfig::new(core);
    config.ingest = ingest.then(|| "127.0.0.1:0".parse().expect("an address"));
    config
}

/// `--cache sas` is built for write-around and write-through (and the data store alone), without
/// TARDIS.
pub fn check_sas(cache: &CacheSpec, policies: &[Policy], config: &Config) -> Result<()> {
    if !matches!(cache, CacheSpec::Sas { .. }) {
        return Ok(());
    }
    if let Some(p) = policies.iter().find(|p| {
        !matches!(
            p,
            Policy::DataStoreOnly | Policy::WriteAround | Policy::WriteThrough
        )
    }) {
        bail!(
            "--cache sas runs write-around and write-through (and none), not {}",
            p.name()
        );
    }
    if config.tardis.is_some() || config.gemini {
        bail!("--cache sas runs without TARDIS (--outage, --tardis) and Gemini (--recovery)");
    }
    Ok(())
}

/// External CMIs run in one lease mode, so a policy list that needs both (write-around beside
/// write-through or write-back) cannot run on them.
pub fn check_one_lease_mode(cache: &CacheSpec, policies: &[Policy], config: &Config) -> Result<()> {
    if let CacheSpec::External(_) = cache {
        let mut modes: Vec<&str> = policies
            .iter()
            .filter(|p| **p != Policy::DataStoreOnly)
            .map(|p| config.cmi_mode(*p))
            .collect();
        modes.sort_unstable();
        modes.dedup();
        if modes.len() > 1 {
            bail!(
                "--cache: external CMIs run in one lease mode, but these policies need both \
                 write-around and write-through mode; run them separately or use embedded:N"
            );
        }
    }
    Ok(())
}

/// A relay in front of the data store at `url` (PostgreSQL or MariaDB), and the URL that reaches
/// the data store through it: what `--outage` cuts.
pub fn relayed(url: &str) -> Result<(cads::store::Relay, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| anyhow!("--outage: cannot find the server in {}", redact(url)))?;
    let default_port = match scheme {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        _ => bail!("--outage: no relay for {scheme}:// data stores"),
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host_port = &authority[host_start..];
    let server = if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!("{host_port}:{default_port}")
    };
    let target = server
        .to_socket_addrs()
        .with_context(|| format!("--outage: cannot resolve the data store at {server}"))?
        .next()
        .ok_or_else(|| anyhow!("--outage: {server} resolves to no address"))?;
    let relay = cads::store::Relay::start(target).context("--outage: starting the relay")?;
    let through = format!(
        "{scheme}://{}{}{}",
        &authority[..host_start],
        relay.addr(),
        &rest[authority_end..]
    );
    Ok((relay, through))
}

/// The data store's URL: `store`, or by default a SQLite file `<name>.db` in a fresh temporary
/// directory, which is removed (with the database and its WAL files) when the returned guard
/// drops.
pub fn store_url(
    store: &Option<String>,
    name: &str,
) -> Result<(String, Option<tempfile::TempDir>)> {
    match store {
        Some(url) => Ok((url.clone(), None)),
        None => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("cads-{name}-"))
                .tempdir()
                .context("creating a temporary directory for the SQLite database")?;
            let url = format!("sqlite:{}", dir.path().join(format!("{name}.db")).display());
            Ok((url, Some(dir)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_specs_parse() {
        assert_eq!(
            CacheSpec::parse("embedded:3").unwrap(),
            CacheSpec::Embedded { cmis: 3 }
        );
        assert!(CacheSpec::parse("embedded:0").is_err());
        assert_eq!(
            CacheSpec::parse("127.0.0.1:7379,127.0.0.1:7380").unwrap(),
            CacheSpec::External(vec![
                "127.0.0.1:7379".parse().unwrap(),
                "127.0.0.1:7380".parse().unwrap()
            ])
        );
        assert!(CacheSpec::parse("").is_err());
        assert_eq!(CacheSpec::default().describe(), "embedded:2");
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://cads:secret@127.0.0.1:5432/cads"),
            "postgres://cads:***@127.0.0.1:5432/cads"
        );
        assert_eq!(redact("sqlite:/tmp/x.db"), "sqlite:/tmp/x.db");
    }
}
