//! A small deployment for framework tests: CMIs started in-process, a SQLite data store in a
//! temporary directory behind a fault-injecting wrapper, and a counter workload whose every read
//! can be checked.
#![allow(dead_code)]

pub mod bank;
pub mod gemini;
pub mod tardis;

use std::sync::Arc;
use std::time::Instant;

use cads::writeback::Buffering;
use cads::{CacheChange, CacheStore, Cads, Config, Policy, StoreTx, WriteBackConfig};
use cads_client::{Client, ClientConfig, ConsistentHash};
use cads_coord::Coordinator;
use cads_server::Options;
use cads_store::{
    Changes, DataStore, Document, Faults, FaultyStore, SqlValue, StoreError, StoreOptions,
};
use cads_testkit::{Cmis, Relay, ScratchDir};

pub struct Deployment {
    pub cmis: Cmis,
    pub faults: Faults,
    pub store: Arc<dyn DataStore>,
    pub dir: ScratchDir,
    pub policy: Policy,
}

/// A lease no step of a test outlives by accident, however loaded the machine: tests that need
/// one to run out move the CMIs' clocks past it ([`PAST_A_LONG_LEASE`]) instead of sleeping.
pub const LONG_LEASE_MS: u64 = 30_000;

/// Further than [`LONG_LEASE_MS`], for `Cmis::advance_clock`.
pub const PAST_A_LONG_LEASE: std::time::Duration =
    std::time::Duration::from_millis(LONG_LEASE_MS + 1_000);

/// Sessions the CMIs ended because their leases ran out, summed.
pub fn sessions_expired(cads: &Cads) -> u64 {
    cads.cmi_stats()
        .unwrap()
        .iter()
        .map(|s| s.sessions_expired)
        .sum()
}

/// Waits until `done` holds, looking every 10 ms. Nothing is asserted about how long that takes
/// (a busy machine is slow, not wrong): once `report_after` has passed, `what` is printed, once,
/// so that a test that hangs says what it is waiting for.
pub fn wait_until(
    report_after: std::time::Duration,
    what: impl Fn() -> String,
    mut done: impl FnMut() -> bool,
) {
    let report_at = Instant::now() + report_after;
    let mut reported = false;
    while !done() {
        if !reported && Instant::now() >= report_at {
            eprintln!("still waiting after {report_after:?}: {}", what());
            reported = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

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
        let dir = ScratchDir::new("framework");
        let cmis = Cmis::start_with(cmis, |options| {
            options.mode = Some(policy.cmi_mode().into());
            configure(options);
        });
        let inner = dir.sqlite(&StoreOptions::default().with_timeout(STORE_TIMEOUT));
        let faulty = FaultyStore::new(inner);
        let faults = faulty.faults();
        let store: Arc<dyn DataStore> = Arc::new(faulty);
        store
            .execute_batch("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            .unwrap();
        Deployment {
            cmis,
            faults,
            store,
            dir,
            policy,
        }
    }

    pub fn cads(&self, config: Config) -> Cads {
        Cads::connect(self.store.clone(), self.cmis.addrs(), self.policy, config)
    }

    /// A client of the CMIs through relays, one per CMI so that a test can cut any, and the
    /// relays, in CMI order. It places keys by the CMIs' own addresses, as a direct client does,
    /// so that it shares the cache with the deployment's other AppNodes. Its timeouts are long: a
    /// cut relay fails requests at once, and a busy machine must not.
    pub fn relayed_client(&self) -> (Client, Vec<Relay>) {
        let addrs = self.cmis.addrs();
        let relays: Vec<Relay> = addrs.iter().map(|a| Relay::new(*a)).collect();
        let mut config = ClientConfig::new(relays.iter().map(Relay::addr).collect());
        config.connect_timeout = std::time::Duration::from_secs(10);
        config.io_timeout = std::time::Duration::from_secs(10);
        let names: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let router = Arc::new(ConsistentHash::new(&names));
        (
            Client::with_router(config, router, Coordinator::process()),
            relays,
        )
    }

    pub fn stop_cache(&mut self) {
        self.cmis.stop();
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

/// The first of `names` whose key (`key` of the name) `cads` routes to CMI `cmi`.
pub fn on_cmi(cads: &Cads, names: &[String], key: impl Fn(&str) -> Vec<u8>, cmi: usize) -> String {
    let client = cads.cache().unwrap();
    names
        .iter()
        .find(|n| client.route(&key(n)) == cmi)
        .expect("a name on every CMI")
        .clone()
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

/// A document from JSON.
pub fn doc(v: serde_json::Value) -> Document {
    v.as_object().unwrap().clone()
}

/// Change operators from JSON.
pub fn changes(v: serde_json::Value) -> Changes {
    Changes::from_json(&v).unwrap()
}

/// Write-back Design 1 with two replicas and eight PendingWrites partitions.
pub fn documents_config(buffering: Buffering) -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            partitions: 8,
            buffering,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

/// Whether `key` carries a TARDIS marker on its CMI.
pub fn marked(cads: &Cads, key: &[u8]) -> bool {
    let client = cads.cache().unwrap();
    let reply = client
        .execute(client.route(key), &cads_protocol::Command::Inspect(key))
        .unwrap();
    // A map, sent as a flat array of names and values.
    let cads_protocol::Reply::Array(fields) = reply else {
        panic!("INSPECT replied {reply:?}");
    };
    fields
        .chunks(2)
        .find(|pair| pair[0] == cads_protocol::Reply::status("marker"))
        .map(|pair| pair[1] == cads_protocol::Reply::Int(1))
        .expect("INSPECT reports the marker")
}

/// For a process that a test kills (SIGKILL) with what it holds at its cache commit: the first
/// session to reach the point between its data-store commit and its cache commit says
/// `holding` on standard output and stops there for good. The scenario must live as long as
/// the process runs.
pub fn stop_for_good_before_the_cache_commit() -> cads_testkit::failpoints::Scenario {
    use std::io::Write;
    let scenario = cads_testkit::failpoints::Scenario::setup();
    scenario.on(cads_testkit::failpoints::CACHE_COMMIT, || {
        println!("holding");
        std::io::stdout().flush().unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    });
    scenario
}

/// Holds the first reader to reach the fill: it tells the test it has queried the data store,
/// then waits until the test says the writer is done.
pub fn hold_first_fill(
    scenario: &cads_testkit::failpoints::Scenario,
) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
    let (queried_tx, queried_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let state = std::sync::Mutex::new(Some((queried_tx, go_rx)));
    scenario.on(cads_testkit::failpoints::FILL, move || {
        if let Some((queried, go)) = state.lock().unwrap().take() {
            queried.send(()).unwrap();
            go.recv().unwrap();
        }
    });
    (queried_rx, go_tx)
}
