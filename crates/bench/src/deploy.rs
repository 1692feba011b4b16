//! A deployment for one policy: the data store (behind a call-counting [`FaultyStore`] and a
//! wrapper that counts the benchmark's cache misses), the CMIs (started in this process in the
//! policy's lease mode, or running elsewhere) and the framework.

use std::cell::Cell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use cads::writeback::MacKey;
use cads::{Cads, Config, Password, Policy};
use cads_client::{Client, TlsConfig};
use cads_protocol::{Command, Reply};
use cads_server::{Options, Server};
use cads_store::{
    Changes, DataStore, Dialect, DocWrite, Document, DocumentStore, Faults, FaultyStore,
    IndexedField, Isolation, SqlStore, SqlTransaction,
};
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
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec::Embedded { cmis: 2 }
    }
}

impl CacheSpec {
    /// Parses `embedded:N` or a comma-separated list of `host:port`.
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
            bail!("--cache: give embedded:N or host:port,host:port,...");
        }
        Ok(CacheSpec::External(addrs))
    }

    /// The spelling [`parse`](Self::parse) reads.
    pub fn describe(&self) -> String {
        match self {
            CacheSpec::Embedded { cmis } => format!("embedded:{cmis}"),
            CacheSpec::External(addrs) => addrs
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Settings of embedded CMIs, and how the framework reaches and trusts any CMIs.
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
}

thread_local! {
    /// Set on the benchmark's own threads, so that their data-store reads can be told apart from
    /// the write-back workers'.
    static DRIVER: Cell<bool> = const { Cell::new(false) };
    /// Data-store calls a benchmark thread has made.
    static DRIVER_CALLS: Cell<u64> = const { Cell::new(0) };
}

/// Marks the calling thread as a benchmark thread (its `get`s on the table are misses).
pub(crate) fn mark_driver_thread() {
    DRIVER.with(|d| d.set(true));
}

/// Data-store calls the calling benchmark thread has made so far (every call, of any
/// collection or SQL table): unchanged across an operation means the cache answered it alone.
pub(crate) fn driver_store_calls() -> u64 {
    DRIVER_CALLS.with(Cell::get)
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
/// It also counts every call of each benchmark thread ([`driver_store_calls`]), for benchmarks
/// whose reads miss through other calls (`get_many`, SQL).
pub(crate) struct MissCountingStore {
    inner: Arc<dyn DataStore>,
    collection: String,
    misses: AtomicU64,
}

impl MissCountingStore {
    pub(crate) fn new(inner: Arc<dyn DataStore>, collection: &str) -> MissCountingStore {
        MissCountingStore {
            inner,
            collection: collection.to_string(),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

impl DocumentStore for MissCountingStore {
    fn create_collection(&self, name: &str, indexed: &[IndexedField]) -> cads_store::Result<()> {
        count_call();
        self.inner.create_collection(name, indexed)
    }
    fn drop_collection(&self, name: &str) -> cads_store::Result<()> {
        count_call();
        self.inner.drop_collection(name)
    }
    fn get(&self, coll: &str, id: &str) -> cads_store::Result<Option<Document>> {
        count_call();
        if coll == self.collection && DRIVER.with(Cell::get) {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.get(coll, id)
    }
    fn get_many(&self, coll: &str, ids: &[&str]) -> cads_store::Result<Vec<Option<Document>>> {
        count_call();
        self.inner.get_many(coll, ids)
    }
    fn insert(&self, coll: &str, id: &str, doc: &Document) -> cads_store::Result<()> {
        count_call();
        self.inner.insert(coll, id, doc)
    }
    fn put(&self, coll: &str, id: &str, doc: &Document) -> cads_store::Result<()> {
        count_call();
        self.inner.put(coll, id, doc)
    }
    fn update(
        &self,
        coll: &str,
        id: &str,
        changes: &Changes,
    ) -> cads_store::Result<Option<Document>> {
        count_call();
        self.inner.update(coll, id, changes)
    }
    fn delete(&self, coll: &str, id: &str) -> cads_store::Result<bool> {
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
    ) -> cads_store::Result<Vec<(String, Document)>> {
        count_call();
        self.inner.scan(coll, field, from, to, limit)
    }
    fn count(&self, coll: &str) -> cads_store::Result<u64> {
        count_call();
        self.inner.count(coll)
    }
    fn insert_many(&self, coll: &str, docs: &[(String, Document)]) -> cads_store::Result<()> {
        count_call();
        self.inner.insert_many(coll, docs)
    }
    fn write_batch_fenced(
        &self,
        writes: &[DocWrite],
        fence: &mut dyn FnMut() -> cads_store::Result<()>,
    ) -> cads_store::Result<()> {
        count_call();
        self.inner.write_batch_fenced(writes, fence)
    }
}

impl SqlStore for MissCountingStore {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }
    fn begin(&self, isolation: Isolation) -> cads_store::Result<Box<dyn SqlTransaction + '_>> {
        count_call();
        self.inner.begin(isolation)
    }
    fn begin_read(&self, isolation: Isolation) -> cads_store::Result<Box<dyn SqlTransaction + '_>> {
        count_call();
        self.inner.begin_read(isolation)
    }
    fn execute_batch(&self, sql: &str) -> cads_store::Result<()> {
        count_call();
        self.inner.execute_batch(sql)
    }
}

impl DataStore for MissCountingStore {
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
}

/// The data store, the cache and the framework for one policy.
pub struct Deployment {
    /// The framework (in an `Arc` for write-back's workers).
    pub cads: Arc<Cads>,
    /// Counts every call the data store receives (benchmark threads and workers).
    pub faults: Faults,
    misses: Arc<MissCountingStore>,
    server: Option<Server>,
}

impl Deployment {
    /// Wraps `store`, starts or reaches the CMIs (none for `DataStoreOnly`) and builds the
    /// framework; external CMIs are checked to run in the policy's lease mode.
    pub fn start(
        policy: Policy,
        store: Arc<dyn DataStore>,
        collection: &str,
        cache: &CacheSpec,
        cmi: &CmiSettings,
        config: Config,
    ) -> Result<Deployment> {
        let faulty = FaultyStore::new(store);
        let faults = faulty.faults();
        let misses = Arc::new(MissCountingStore::new(Arc::new(faulty), collection));
        let (server, addrs) = match (policy, cache) {
            (Policy::DataStoreOnly, _) => (None, Vec::new()),
            (_, CacheSpec::Embedded { .. }) if cmi.tls.is_some() => bail!(
                "TLS is for CMIs running apart (cads server --tls-cert ...), given with --cache \
                 host:port; embedded CMIs serve plaintext"
            ),
            (_, CacheSpec::Embedded { cmis }) => {
                let config = cads_server::Config::resolve(Options {
                    port: Some(0),
                    cmis: Some(*cmis),
                    mode: Some(policy.cmi_mode().into()),
                    maxmemory: cmi.maxmemory.clone(),
                    max_pinned_memory: cmi.max_pinned_memory.clone(),
                    requirepass: cmi.password.as_ref().map(|p| p.0.clone()),
                    ..Options::default()
                })
                .context("configuring the embedded CMIs")?;
                let server = Server::start(config).context("starting the embedded CMIs")?;
                let addrs = server.addrs().to_vec();
                (Some(server), addrs)
            }
            (_, CacheSpec::External(addrs)) => (None, addrs.clone()),
        };
        let mut config = config;
        config.cache_password = cmi.password.clone();
        config.cache_tls = cmi.tls.clone();
        config.write_back.mac_key = cmi.write_back_key.clone();
        let cads = Cads::connect(misses.clone(), &addrs, policy, config);
        if let (Some(client), CacheSpec::External(_)) = (cads.cache(), cache) {
            for index in 0..client.cmis() {
                let addr = client.cmi_addr(index);
                let text = info(client, index)
                    .with_context(|| format!("cannot reach the CMI at {addr}"))?;
                let mode = info_field(&text, "mode").unwrap_or_default();
                if mode != policy.cmi_mode() {
                    bail!(
                        "the CMI at {addr} runs in {mode:?} mode, but policy {} needs {} mode \
                         (cads server --mode {})",
                        policy.name(),
                        policy.cmi_mode(),
                        policy.cmi_mode()
                    );
                }
            }
            client
                .flush_all()
                .context("cannot empty the external CMIs (FLUSHALL)")?;
        }
        Ok(Deployment {
            cads: Arc::new(cads),
            faults,
            misses,
            server,
        })
    }

    /// Data-store `get`s of the benchmark's collection made by benchmark threads so far.
    pub fn driver_misses(&self) -> u64 {
        self.misses.misses()
    }

    /// Cache round trips so far ([`Client::round_trips`]), all threads.
    pub fn cache_round_trips(&self) -> u64 {
        self.cads.cache().map_or(0, Client::round_trips)
    }

    /// `keyspace_hits` and `keyspace_misses` summed over the CMIs (None without a cache). These
    /// count every read command, write-back's bookkeeping included.
    pub fn keyspace(&self) -> Option<(u64, u64)> {
        let client = self.cads.cache()?;
        let (mut hits, mut misses) = (0, 0);
        for index in 0..client.cmis() {
            let text = info(client, index).ok()?;
            hits += info_field(&text, "keyspace_hits")?.parse::<u64>().ok()?;
            misses += info_field(&text, "keyspace_misses")?.parse::<u64>().ok()?;
        }
        Some((hits, misses))
    }

    /// Stops embedded CMIs (also done on drop).
    pub fn stop(mut self) -> Result<()> {
        match self.server.take() {
            Some(server) => {
                server.stop();
                server
                    .join()
                    .context("an embedded CMI stopped with an error")
            }
            None => Ok(()),
        }
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            if let Err(e) = server.join() {
                eprintln!("warning: an embedded CMI stopped with an error: {e:#}");
            }
        }
    }
}

/// The INFO text of one CMI.
fn info(client: &Client, cmi: usize) -> Result<String> {
    match client.execute(cmi, &Command::Info(&[]))? {
        Reply::Bulk(text) => Ok(String::from_utf8_lossy(&text).into_owned()),
        other => bail!("unexpected INFO reply {other:?}"),
    }
}

/// The value of `name` in an INFO text (`name:value` lines).
fn info_field<'t>(info: &'t str, name: &str) -> Option<&'t str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
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

/// External CMIs run in one lease mode, so a policy list that needs both (write-around beside
/// write-through or write-back) cannot run on them.
pub(crate) fn check_one_lease_mode(cache: &CacheSpec, policies: &[Policy]) -> Result<()> {
    if let CacheSpec::External(_) = cache {
        let mut modes: Vec<&str> = policies
            .iter()
            .filter(|p| **p != Policy::DataStoreOnly)
            .map(|p| p.cmi_mode())
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

/// The data store's URL: `store`, or by default a SQLite file `<name>.db` in a fresh temporary
/// directory, which is removed (with the database and its WAL files) when the returned guard
/// drops.
pub(crate) fn store_url(
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
