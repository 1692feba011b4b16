//! Write-back loses no acknowledged write when a CMI process dies: with R = 3 replicas over four
//! CMI processes, one is killed with SIGKILL in the middle of a write-heavy run; after the
//! workers drain, every acknowledged `$push` is in the data store exactly once and every `$inc`
//! matches. A CMI that comes back with what it held before it died brings back no old buffered
//! write, and a session that cannot reach the cache writes nothing rather than losing its write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::store::{Changes, DataStore, StoreOptions};
use cads::writeback::Buffering;
use cads::{Cads, Config, Policy, Workers, WriteBackConfig};
use cads::{Client, ClientConfig, Coordinator};
use cads_testkit::cmis::Program;
use cads_testkit::documents::counter_on_cmi;
use cads_testkit::{ScratchDir, ServerProcess};
use serde_json::json;

/// A `cads server` process serving one write-through CMI with 300 ms leases, killed on drop.
fn start_cmi() -> ServerProcess {
    ServerProcess::start_cmis(&cads_server(), 1, CMI_FLAGS)
}

const CMI_FLAGS: &[&str] = &["--mode", "write-through", "--lease-ms", "300"];

fn cads_server() -> Program {
    Program::cads(env!("CARGO_BIN_EXE_cads"))
}

/// An empty directory for a test and a SQLite data store in it.
fn scratch_store(name: &str) -> (ScratchDir, Arc<dyn DataStore>) {
    let dir = ScratchDir::new(name);
    let store = dir.sqlite(&StoreOptions::default());
    (dir, store)
}

#[test]
fn killing_a_cmi_loses_no_acknowledged_write() {
    let (dir, store) = scratch_store("cads-durability");
    let mut cmis: Vec<ServerProcess> = (0..4).map(|_| start_cmi()).collect();
    let mut config = ClientConfig::new(cmis.iter().map(|c| c.addr(0)).collect());
    config.connect_timeout = Duration::from_millis(200);
    config.io_timeout = Duration::from_millis(500);
    let client = Client::new(config, Coordinator::process());
    let cads = Arc::new(Cads::new(
        store.clone(),
        Some(client),
        Policy::WriteBack,
        Config {
            write_back: WriteBackConfig {
                replicas: 3,
                partitions: 16,
                buffering: Buffering::ReadModifyWrite,
                ..WriteBackConfig::default()
            },
            ..Config::default()
        },
    ));
    let docs = Collection::create(&cads, "tallies").unwrap();
    let ids: Vec<String> = (0..12).map(|i| format!("d{i}")).collect();
    for id in &ids {
        store
            .put(
                "tallies",
                id,
                json!({"n": 0, "log": []}).as_object().unwrap(),
            )
            .unwrap();
    }
    let workers = Workers::start(cads.clone(), 2);
    let acknowledged: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let failed = Mutex::new(0usize);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (cads, docs, ids) = (&cads, &docs, &ids);
            let (acknowledged, failed, stop) = (&acknowledged, &failed, &stop);
            scope.spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Acquire) {
                    let id = &ids[(t * 7 + i) % ids.len()];
                    let token = format!("{t}-{i}");
                    let changes = Changes::from_json(
                        &json!({"$inc": {"n": 1}, "$push": {"log": token.clone()}}),
                    )
                    .unwrap();
                    match cads.run(|s| docs.update(s, id, changes.clone())) {
                        Ok(()) => acknowledged.lock().unwrap().push((id.clone(), token)),
                        Err(_) => *failed.lock().unwrap() += 1,
                    }
                    i += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1500));
        // SIGKILL: the process gets no chance to flush or to answer anything.
        cmis[1].kill();
        std::thread::sleep(Duration::from_millis(2500));
        stop.store(true, Ordering::Release);
    });
    workers.drain(Duration::from_secs(60)).unwrap();
    workers.stop();

    // Nothing may be left behind: a buffered write that PendingWrites no longer lists would never
    // be applied.
    let direct = cads.cache().unwrap();
    for id in &ids {
        let key = cads::writeback::bw_key(&docs.doc_ref(id));
        for cmi in 0..cmis.len() {
            if cmi == 1 {
                continue;
            }
            let left = direct.get_from(cmi, &key).unwrap();
            if let Some(bytes) = &left {
                let head: String = String::from_utf8_lossy(bytes).chars().take(120).collect();
                panic!("{id}: a buffered write is left on CMI {cmi}: {head}...");
            }
        }
    }
    let acknowledged = acknowledged.into_inner().unwrap();
    assert!(
        acknowledged.len() > 100,
        "a write-heavy run: {}",
        acknowledged.len()
    );
    let mut stored_total = 0;
    for id in &ids {
        let doc = store.get("tallies", id).unwrap().unwrap();
        let log: Vec<String> = doc["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let n = doc["n"].as_i64().unwrap() as usize;
        assert_eq!(n, log.len(), "{id}: as many increments as pushes");
        let mut unique = log.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), log.len(), "{id}: nothing applied twice");
        for (_, token) in acknowledged.iter().filter(|(d, _)| d == id) {
            assert!(log.contains(token), "{id}: acknowledged write {token} lost");
        }
        stored_total += n;
    }
    assert!(stored_total >= acknowledged.len());
    eprintln!(
        "acknowledged {}, failed {}, stored {stored_total}",
        acknowledged.len(),
        failed.into_inner().unwrap()
    );
    drop(cmis);
    drop(dir);
}

/// Write-back over `cmis` with R = 2, and a document `{"n": 0}` of "tallies" whose cached value
/// lives on CMI 0, so that CMI 1 holds only a replica of its buffered write.
fn write_back_over(
    store: &Arc<dyn DataStore>,
    cmis: &[ServerProcess],
) -> (Cads, Collection, String) {
    let mut config = ClientConfig::new(cmis.iter().map(|c| c.addr(0)).collect());
    config.connect_timeout = Duration::from_millis(200);
    config.io_timeout = Duration::from_millis(500);
    let client = Client::new(config, Coordinator::process());
    let cads = Cads::new(
        store.clone(),
        Some(client),
        Policy::WriteBack,
        Config {
            write_back: WriteBackConfig {
                replicas: 2,
                partitions: 4,
                ..WriteBackConfig::default()
            },
            ..Config::default()
        },
    );
    let docs = Collection::create(&cads, "tallies").unwrap();
    let id = counter_on_cmi(&cads, store.as_ref(), &docs, 0);
    (cads, docs, id)
}

/// A persistent CMI restored from its append-only log comes back with the replicas of buffered
/// writes it held when it died. Writes made while it was away skipped it, and their buffered
/// writes were applied and deleted elsewhere: its copies are old, and applying one again would
/// undo a later acknowledged write in the data store. The process that skipped the CMI flushes it
/// before reading from it again.
#[test]
fn a_cmi_restored_from_its_log_brings_back_no_old_buffered_write() {
    let (dir, store) = scratch_store("cads-restored");
    std::fs::create_dir_all(dir.path().join("aof")).unwrap();
    let aof = dir.path().join("aof").display().to_string();
    let persistent = [
        "--appendonly",
        "true",
        "--appendfsync",
        "always",
        "--dir",
        &aof,
    ];
    let flags = [CMI_FLAGS, &persistent].concat();
    let mut cmis = vec![
        start_cmi(),
        ServerProcess::start_cmis(&cads_server(), 1, &flags),
    ];
    let port = cmis[1].port;
    let (cads, docs, id) = write_back_over(&store, &cmis);
    let direct = cads.cache().unwrap();
    let set = |n: i64| {
        let changes = Changes::from_json(&json!({"$set": {"n": n}})).unwrap();
        cads.run(|s| docs.update(s, &id, changes.clone()))
    };
    let stored = || {
        store.get("tallies", &id).unwrap().unwrap()["n"]
            .as_i64()
            .unwrap()
    };

    set(1).unwrap(); // buffered on both CMIs, and in CMI 1's log
    cmis[1].kill();
    // The first write to find CMI 1 gone may fail; the next ones skip it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while set(2).is_err() {
        assert!(
            Instant::now() < deadline,
            "no write succeeded without CMI 1"
        );
    }
    cads::writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    assert_eq!(stored(), 2);

    // Back on its port with its log: it holds the old buffered write (n = 1) again.
    cmis[1] = ServerProcess::start_cmis_on(&cads_server(), port, 1, &flags)
        .expect("the CMI restarts on its port");
    let key = cads::writeback::bw_key(&docs.doc_ref(&id));
    let held = direct.get_from(1, &key).unwrap();
    assert!(
        held.is_some(),
        "the restored CMI has the old copy: {held:?}"
    );
    // Once the client stops skipping it (a second after it last refused a connection).
    std::thread::sleep(Duration::from_millis(1200));
    cads::writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    assert_eq!(stored(), 2, "an old buffered write undid a later one");
    let read = docs.read(&cads, &id).unwrap().unwrap();
    assert_eq!(read["n"], json!(2));
    drop(cmis);
    drop(dir);
}

/// A write-back session that found a CMI unreachable (and read around it, from the data store)
/// cannot write: its write would be acknowledged with nothing buffered, and lost. It fails, and
/// nothing is written.
#[test]
fn a_write_back_session_that_lost_the_cache_writes_nothing() {
    let (dir, store) = scratch_store("cads-degraded");
    let mut cmis = vec![start_cmi(), start_cmi()];
    let (cads, docs, id) = write_back_over(&store, &cmis);

    // The document's CMI is gone; the other replica of its buffered write is there.
    cmis[0].kill();
    let changes = Changes::from_json(&json!({"$set": {"n": 1}})).unwrap();
    let outcome = cads.run(|s| {
        let before = docs.get(s, &id)?; // from the data store: the session degrades
        assert_eq!(before.unwrap()["n"], json!(0));
        docs.update(s, &id, changes.clone())
    });
    let error = outcome.expect_err("a write-back write without the cache must not be acknowledged");
    assert!(
        error.to_string().contains("nothing was written"),
        "the error says what happened: {error}"
    );
    cads::writeback::drain(&cads, Duration::from_secs(5)).unwrap();
    assert_eq!(store.get("tallies", &id).unwrap().unwrap()["n"], json!(0));
    drop(cmis);
    drop(dir);
}
