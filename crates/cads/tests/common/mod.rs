//! A small deployment for framework tests: CMIs started in-process, a SQLite data store in a
//! temporary directory behind a fault-injecting wrapper, and a counter workload whose every read
//! can be checked.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cads::writeback::{ApplyStep, CrashHook};
use cads::{CacheChange, CacheStore, Cads, Config, Policy, StoreTx};
use cads_server::{Options, Server};
use cads_store::{open, DataStore, Faults, FaultyStore, SqlValue, StoreError, StoreOptions};

pub struct Deployment {
    pub server: Option<Server>,
    pub faults: Faults,
    pub store: Arc<dyn DataStore>,
    pub dir: PathBuf,
    pub policy: Policy,
}

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// The data store's timeout in these tests: short, so that hang tests are quick.
pub const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

impl Deployment {
    /// Two CMIs in the policy's lease mode and a SQLite database with a `counters` table.
    pub fn start(policy: Policy) -> Deployment {
        Deployment::start_with(policy, 2, |_| {})
    }

    /// `cmis` CMIs configured by `configure`, and the SQLite database.
    pub fn start_with(
        policy: Policy,
        cmis: usize,
        configure: impl FnOnce(&mut Options),
    ) -> Deployment {
        let dir = std::env::temp_dir().join(format!(
            "cads-framework-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut options = Options {
            port: Some(0),
            cmis: Some(cmis),
            mode: Some(policy.cmi_mode().into()),
            ..Options::default()
        };
        configure(&mut options);
        let server = Server::start(cads_server::Config::resolve(options).unwrap()).unwrap();
        let url = format!("sqlite:{}", dir.join("data.db").display());
        let inner = open(&url, &StoreOptions::default().with_timeout(STORE_TIMEOUT)).unwrap();
        let faulty = FaultyStore::new(inner);
        let faults = faulty.faults();
        let store: Arc<dyn DataStore> = Arc::new(faulty);
        store
            .execute_batch("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            .unwrap();
        Deployment {
            server: Some(server),
            faults,
            store,
            dir,
            policy,
        }
    }

    pub fn cads(&self, config: Config) -> Cads {
        let addrs = self.server.as_ref().unwrap().addrs().to_vec();
        Cads::connect(self.store.clone(), &addrs, self.policy, config)
    }

    pub fn stop_cache(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            server.join().unwrap();
        }
    }

    /// Creates counters `c0..c<n>` at 0.
    pub fn counters(&self, n: usize) -> Vec<String> {
        let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let mut tx = self
            .store
            .begin(cads_store::Isolation::ReadCommitted)
            .unwrap();
        for name in &names {
            tx.execute(
                "INSERT INTO counters (name, value) VALUES (?, 0)",
                &[SqlValue::Text(name.clone())],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        names
    }

    /// A counter's value in the data store.
    pub fn stored(&self, name: &str) -> i64 {
        let mut tx = self
            .store
            .begin(cads_store::Isolation::ReadCommitted)
            .unwrap();
        let rows = tx
            .query(
                "SELECT value FROM counters WHERE name = ?",
                &[SqlValue::Text(name.into())],
            )
            .unwrap();
        rows[0].get::<i64>(0).unwrap()
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.stop_cache();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Counters in SQL, cached one entry per counter (`counter:<name>` holding the decimal value).
pub struct Counters;

pub fn counter_key(name: &str) -> Vec<u8> {
    format!("counter:{name}").into_bytes()
}

impl CacheStore for Counters {
    type Query = String;
    type Write = String;
    type Output = i64;

    fn keys_read(&self, name: &String) -> Vec<Vec<u8>> {
        vec![counter_key(name)]
    }

    fn result_from_cache(&self, _: &String, values: &[Vec<u8>]) -> Option<i64> {
        std::str::from_utf8(&values[0]).ok()?.parse().ok()
    }

    fn query_store(&self, name: &String, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
        let rows = tx.read_sql()?.query(
            "SELECT value FROM counters WHERE name = ?",
            &[SqlValue::Text(name.clone())],
        )?;
        rows.first()
            .ok_or_else(|| StoreError::Invalid(format!("no counter {name}")))?
            .get::<i64>(0)
    }

    fn entries(&self, name: &String, value: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(counter_key(name), value.to_string().into_bytes())]
    }

    fn keys_written(&self, name: &String) -> Vec<Vec<u8>> {
        vec![counter_key(name)]
    }

    fn write_store(&self, name: &String, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        tx.sql()?.execute(
            "UPDATE counters SET value = value + 1 WHERE name = ?",
            &[SqlValue::Text(name.clone())],
        )?;
        Ok(())
    }

    fn cache_change(&self, _: &String, _key: &[u8]) -> CacheChange {
        CacheChange::Incr(1)
    }
}

/// Reads and increments with their time windows, to check every read afterwards.
#[derive(Default)]
pub struct History {
    pub reads: Vec<(String, Instant, Instant, i64)>,
    pub writes: Vec<(String, Instant, Instant)>,
}

impl History {
    /// Reads that saw a value no serial order allows: below the increments finished before the
    /// read began, or above those begun before it ended.
    pub fn stale_reads(&self) -> Vec<String> {
        let mut stale = Vec::new();
        for (name, start, end, value) in &self.reads {
            let done = self
                .writes
                .iter()
                .filter(|(n, _, w_end)| n == name && w_end < start)
                .count() as i64;
            let begun = self
                .writes
                .iter()
                .filter(|(n, w_start, _)| n == name && w_start < end)
                .count() as i64;
            if *value < done || *value > begun {
                stale.push(format!("{name} read {value}, allowed {done}..={begun}"));
            }
        }
        stale
    }
}

/// A write-back applier held up at one step of Algorithm 2 or 4, as a descheduled thread or a
/// slow data store would hold it, until the test lets it go on (or 20 s pass).
#[derive(Clone, Default)]
pub struct Stall {
    /// 0: the first applier to reach the step is to stall; 1: it is stalled; 2: it may go on.
    state: Arc<std::sync::atomic::AtomicU8>,
}

impl Stall {
    /// The crash hook that never crashes but stalls the first applier reaching `step`.
    pub fn hook(&self, step: ApplyStep) -> CrashHook {
        let state = self.state.clone();
        CrashHook(Arc::new(move |at: ApplyStep| {
            let first = || state.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
            if at == step && first().is_ok() {
                let deadline = Instant::now() + Duration::from_secs(20);
                while state.load(Ordering::Acquire) != 2 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            false
        }))
    }

    /// Waits (up to 5 s) until an applier is stalled.
    pub fn wait_stalled(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.state.load(Ordering::Acquire) == 0 {
            assert!(Instant::now() < deadline, "no applier reached the stall");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn release(&self) {
        self.state.store(2, Ordering::Release);
    }
}
