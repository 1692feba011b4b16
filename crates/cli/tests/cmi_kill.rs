//! A CMI process killed (SIGKILL) mid-run under write-around and write-through, with four CMI
//! processes, writers appending tokens to documents and readers reading them: no read misses a
//! write acknowledged before the read began, and every acknowledged write is in the data store
//! exactly once. (Write-back's case is `writeback_durability.rs`.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::store::{Changes, StoreOptions};
use cads::{Cads, Client, ClientConfig, Config, Coordinator, Policy};
use cads_testkit::cmis::Program;
use cads_testkit::{ScratchDir, ServerProcess};
use serde_json::{json, Value};

const DOCS: usize = 12;
const WRITERS: usize = 3;
/// Updates per writer; the CMI dies once a third of them all are acknowledged.
const WRITES: usize = 150;

/// A write acknowledged: document, token, when it returned.
type Ack = (usize, String, Duration);
/// A read: document, when it began, the tokens it saw.
type Read = (usize, Duration, Vec<String>);

fn tokens(doc: &Value) -> Vec<String> {
    doc["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn survive_a_killed_cmi(policy: Policy) {
    let dir = ScratchDir::new("cads-cmi-kill");
    let store = dir.sqlite(&StoreOptions::default());
    let program = Program::cads(env!("CARGO_BIN_EXE_cads"));
    let mut cmis: Vec<ServerProcess> = (0..4)
        .map(|_| ServerProcess::start_cmis(&program, 1, &["--mode", policy.cmi_mode()]))
        .collect();
    let mut config = ClientConfig::new(cmis.iter().map(|c| c.addr(0)).collect());
    config.connect_timeout = Duration::from_millis(200);
    config.io_timeout = Duration::from_millis(500);
    let client = Client::new(config, Coordinator::process());
    let cads = Arc::new(Cads::new(
        store.clone(),
        Some(client),
        policy,
        Config::default(),
    ));
    let docs = Collection::create(&cads, "tallies").unwrap();
    let ids: Vec<String> = (0..DOCS).map(|i| format!("d{i}")).collect();
    for id in &ids {
        store
            .put("tallies", id, json!({"log": []}).as_object().unwrap())
            .unwrap();
    }
    let clock = Instant::now();
    let acks: Mutex<Vec<Ack>> = Mutex::default();
    let reads: Mutex<Vec<Read>> = Mutex::default();
    let acknowledged = AtomicUsize::new(0);
    let writers_done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (cads, docs, ids) = (&cads, &docs, &ids);
            let (acks, acknowledged, writers_done) = (&acks, &acknowledged, &writers_done);
            scope.spawn(move || {
                for i in 0..WRITES {
                    let d = (w * 5 + i * 7) % DOCS;
                    let token = format!("{w}-{i}");
                    let push =
                        Changes::from_json(&json!({"$push": {"log": token.clone()}})).unwrap();
                    if cads.run(|s| docs.update(s, &ids[d], push.clone())).is_ok() {
                        acks.lock().unwrap().push((d, token, clock.elapsed()));
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                    }
                }
                writers_done.fetch_add(1, Ordering::SeqCst);
            });
        }
        for r in 0..2 {
            let (cads, docs, ids, reads, stop) = (&cads, &docs, &ids, &reads, &stop);
            scope.spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::SeqCst) {
                    let d = i % DOCS;
                    let start = clock.elapsed();
                    if let Ok(Some(doc)) = docs.read(cads, &ids[d]) {
                        reads
                            .lock()
                            .unwrap()
                            .push((d, start, tokens(&Value::Object(doc))));
                    }
                    i += 1;
                }
            });
        }
        while acknowledged.load(Ordering::SeqCst) < WRITERS * WRITES / 3
            && writers_done.load(Ordering::SeqCst) < WRITERS
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SIGKILL: the process gets no chance to answer anything.
        cmis[1].kill();
        while writers_done.load(Ordering::SeqCst) < WRITERS {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let acks = acks.into_inner().unwrap();
    let reads = reads.into_inner().unwrap();
    let mut stale = 0;
    for (d, start, seen) in &reads {
        for (_, token, _) in acks.iter().filter(|(ad, _, end)| ad == d && end < start) {
            if !seen.contains(token) {
                stale += 1;
                eprintln!("{policy:?}: a read of d{d} at {start:?} misses {token}");
            }
        }
    }
    assert_eq!(stale, 0, "{policy:?}: stale reads");
    for (d, id) in ids.iter().enumerate() {
        let stored = tokens(&Value::Object(store.get("tallies", id).unwrap().unwrap()));
        let mut unique = stored.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            stored.len(),
            "{policy:?} {id}: a write applied twice"
        );
        for (_, token, _) in acks.iter().filter(|(ad, ..)| *ad == d) {
            assert!(stored.contains(token), "{policy:?} {id}: {token} lost");
        }
    }
    eprintln!(
        "{policy:?}: {} writes acknowledged, {} reads, a CMI killed: nothing stale or lost",
        acks.len(),
        reads.len()
    );
    drop(cmis);
}

#[test]
fn a_cmi_killed_under_write_around_loses_nothing_and_serves_nothing_stale() {
    survive_a_killed_cmi(Policy::WriteAround);
}

#[test]
fn a_cmi_killed_under_write_through_loses_nothing_and_serves_nothing_stale() {
    survive_a_killed_cmi(Policy::WriteThrough);
}
