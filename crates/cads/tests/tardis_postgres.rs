//! TARDIS against a real PostgreSQL that is stopped (fast shutdown, then started again) or frozen
//! (SIGSTOP of the postmaster and its backends, then SIGCONT) in the middle of a write-through and
//! a write-around workload. Writers own their documents and check every read of them after each
//! write (read-after-write); afterwards every acknowledged `$push` is in the data store exactly
//! once, a write that failed with the data store is there at most once, and the AppNode is back in
//! normal mode. The server is the test's own, never the shared one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::store::{open, Changes, DataStore, StoreOptions};
use cads::tardis::{AppNodes, Recovery};
use cads::{Cads, Config, Error, Mode, Policy, TardisConfig, Technique};
use cads_testkit::{Cmis, PrivatePostgres};
use serde_json::json;

const WRITERS: usize = 4;
const DOCS_EACH: usize = 5;

#[derive(Default)]
struct Outcomes {
    /// Per document, the entries of acknowledged writes.
    acked: BTreeMap<String, Vec<String>>,
    /// Entries of writes that failed with the data store (they may have happened).
    unknown: Vec<String>,
    /// Writes refused, and reads refused, while the data store was away.
    refused: u64,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Stop,
    Freeze,
}

fn run(policy: Policy, fault: Fault) {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let store: Arc<dyn DataStore> = open(
        &pg.url(),
        &StoreOptions::default().with_timeout(Duration::from_millis(800)),
    )
    .unwrap();
    let config = Config {
        tardis: Some(TardisConfig {
            technique: Technique::Tardis,
            ar_workers: 2,
            alpha: 8,
            telew: 16,
            recover_after: 2,
            appnodes: AppNodes::One,
        }),
        ..Config::default()
    };
    let cmis = Cmis::start(2, config.cmi_mode(policy));
    let cads = Arc::new(Cads::connect(store.clone(), cmis.addrs(), policy, config));
    let docs = Collection::create(&cads, "docs").unwrap();
    for w in 0..WRITERS {
        for d in 0..DOCS_EACH {
            store
                .put(
                    "docs",
                    &format!("w{w}d{d}"),
                    &json!({"n": 0, "log": []}).as_object().unwrap().clone(),
                )
                .unwrap();
        }
    }
    let recovery = Recovery::start(cads.clone()).unwrap();
    let stop = AtomicBool::new(false);
    let outcomes = Mutex::new(Outcomes::default());
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (cads, docs, stop, outcomes) = (&cads, &docs, &stop, &outcomes);
            scope.spawn(move || writer(w, cads, docs, stop, outcomes));
        }
        std::thread::sleep(Duration::from_millis(700));
        match fault {
            Fault::Stop => pg.stop(),
            Fault::Freeze => pg.freeze(),
        }
        std::thread::sleep(Duration::from_secs(2));
        match fault {
            Fault::Stop => pg.start_again(),
            Fault::Freeze => pg.thaw(),
        }
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Release);
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while cads.mode() != Some(Mode::Normal) {
        assert!(
            Instant::now() < deadline,
            "{policy:?} {fault:?}: still {:?}",
            cads.mode()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(recovery);
    let counts = cads.tardis_counts().unwrap();
    assert!(
        counts.failures >= 1,
        "{policy:?} {fault:?}: the outage was seen: {counts:?}"
    );
    let outcomes = outcomes.into_inner().unwrap();
    for (id, acked) in &outcomes.acked {
        let stored = store.get("docs", id).unwrap().unwrap();
        let log: Vec<String> = stored["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect();
        assert_eq!(stored["n"].as_u64().unwrap() as usize, log.len(), "{id}");
        for entry in acked {
            let times = log.iter().filter(|e| *e == entry).count();
            assert_eq!(
                times, 1,
                "{policy:?} {fault:?}: acknowledged {entry} in {id} {times} times"
            );
        }
        for entry in &log {
            assert!(
                acked.contains(entry) || outcomes.unknown.contains(entry),
                "{policy:?} {fault:?}: {entry} in {id} was never written"
            );
            assert_eq!(
                log.iter().filter(|e| *e == entry).count(),
                1,
                "{entry} twice"
            );
        }
        let cached = docs.read(&cads, id).unwrap().unwrap();
        assert_eq!(
            cached, stored,
            "{policy:?} {fault:?}: cache and store agree on {id}"
        );
    }
}

/// Writer `w`: writes its own documents in turn, and reads each back after writing it.
fn writer(w: usize, cads: &Cads, docs: &Collection, stop: &AtomicBool, outcomes: &Mutex<Outcomes>) {
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut i = 0;
    while !stop.load(Ordering::Acquire) {
        let id = format!("w{w}d{}", i % DOCS_EACH);
        let entry = format!("w{w}-{i}");
        i += 1;
        let changes =
            Changes::from_json(&json!({"$inc": {"n": 1}, "$push": {"log": entry}})).unwrap();
        match cads.run(|s| docs.update(s, &id, changes.clone())) {
            Ok(()) => acked.entry(id.clone()).or_default().push(entry),
            Err(Error::Store(_)) => outcomes.lock().unwrap().unknown.push(entry),
            Err(Error::StoreUnavailable { .. } | Error::BufferFull) => {
                outcomes.lock().unwrap().refused += 1
            }
            Err(e) => panic!("writer {w}: {e}"),
        }
        match docs.read(cads, &id) {
            Ok(Some(found)) => {
                let log = found["log"].as_array().unwrap();
                for entry in acked.get(&id).into_iter().flatten() {
                    assert!(
                        log.iter().any(|e| e == entry),
                        "stale read of {id}: {entry} acknowledged but not read"
                    );
                }
            }
            Ok(None) => panic!("{id} vanished"),
            Err(Error::StoreUnavailable { .. }) => outcomes.lock().unwrap().refused += 1,
            Err(e) => panic!("reading {id}: {e}"),
        }
    }
    outcomes.lock().unwrap().acked.extend(acked);
}

#[test]
fn stopped_postgres_under_write_through() {
    run(Policy::WriteThrough, Fault::Stop);
}

#[test]
fn stopped_postgres_under_write_around() {
    run(Policy::WriteAround, Fault::Stop);
}

#[test]
fn frozen_postgres_under_write_through() {
    run(Policy::WriteThrough, Fault::Freeze);
}

#[test]
fn frozen_postgres_under_write_around() {
    run(Policy::WriteAround, Fault::Freeze);
}
