//! A CMI process killed (SIGKILL) mid-run under write-around and write-through, with four CMI
//! processes, writers appending tokens to documents and readers reading them: no read misses a
//! write acknowledged before the read began, and every acknowledged write is in the data store
//! exactly once. (Write-back's case is `writeback_durability.rs`.) And a persistent CMI killed
//! and restarted from its log serves nothing overwritten while it was down, even to an
//! application process that never saw it go.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::store::{Changes, StoreOptions};
use cads::{Cads, Client, ClientConfig, Config, Coordinator, Policy};
use cads_testkit::cmis::Program;
use cads_testkit::documents::{counter_on_cmi, logged};
use cads_testkit::resp::RespConn;
use cads_testkit::tokens::{self, assert_fresh, assert_stored_once};
use cads_testkit::{ScratchDir, ServerProcess};
use serde_json::json;

const DOCS: usize = 12;
const WRITERS: usize = 3;
/// Updates per writer; the CMI dies once a third of them all are acknowledged.
const WRITES: usize = 150;

type Ack = tokens::Ack<Duration>;
type Read = tokens::Read<Duration>;

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
                        reads.lock().unwrap().push((d, start, logged(&doc)));
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
    assert_fresh(&format!("{policy:?}"), &acks, &reads);
    for (d, id) in ids.iter().enumerate() {
        let stored = logged(&store.get("tallies", id).unwrap().unwrap());
        assert_stored_once(&format!("{policy:?}"), d, &stored, &acks);
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

/// An application process of its own: a client with its own connections, and no memory of what
/// another process's client saw.
fn appnode(
    store: &Arc<dyn cads::store::DataStore>,
    cmis: &[&ServerProcess],
    policy: Policy,
) -> Cads {
    let mut config = ClientConfig::new(cmis.iter().map(|c| c.addr(0)).collect());
    config.connect_timeout = Duration::from_millis(200);
    config.io_timeout = Duration::from_millis(500);
    let client = Client::new(config, Coordinator::process());
    Cads::new(store.clone(), Some(client), policy, Config::default())
}

/// Process A writes while the persistent CMI is down (it skips the CMI and would flush it on its
/// own next visit); process B, which cached the old value there and was idle meanwhile, must not
/// read it back once the CMI is restored from its log. The restored value is still in the CMI
/// for plain Redis clients, so the test sees the hazard it guards against.
fn restored_cmi_serves_nothing_overwritten(policy: Policy) {
    let dir = ScratchDir::new("cads-cmi-restore");
    let store = dir.sqlite(&StoreOptions::default());
    let program = Program::cads(env!("CARGO_BIN_EXE_cads"));
    let aof = dir.path().join("aof").display().to_string();
    let flags = [
        "--mode",
        policy.cmi_mode(),
        "--appendonly",
        "true",
        "--appendfsync",
        "always",
        "--dir",
        &aof,
    ];
    let mut cmis = vec![
        ServerProcess::start_cmis(&program, 1, &["--mode", policy.cmi_mode()]),
        ServerProcess::start_cmis(&program, 1, &flags),
    ];
    let writer = appnode(&store, &[&cmis[0], &cmis[1]], policy);
    let reader = appnode(&store, &[&cmis[0], &cmis[1]], policy);
    let docs = Collection::create(&writer, "tallies").unwrap();
    let id = counter_on_cmi(&writer, store.as_ref(), &docs, 1);
    let n = |cads: &Cads| loop {
        // A process's first operation after the kill may find its old connection broken.
        if let Ok(Some(doc)) = docs.read(cads, &id) {
            break doc["n"].as_i64().unwrap();
        }
    };
    assert_eq!(n(&reader), 0, "the reader caches n = 0 on CMI 1");
    let port = cmis[1].port;
    cmis[1].kill();
    let set = Changes::from_json(&json!({"$set": {"n": 1}})).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while writer.run(|s| docs.update(s, &id, set.clone())).is_err() {
        assert!(
            Instant::now() < deadline,
            "no write succeeded without CMI 1"
        );
    }
    cmis[1] = ServerProcess::start_cmis_on(&program, port, 1, &flags)
        .expect("the CMI restarts on its port with its log");
    // A plain Redis client's GET, without the handshake of a cads client: RESP's nil is `$-1`.
    let mut plain = RespConn::connect(port);
    let mut plain_get = || plain.raw(&[b"GET".as_slice(), &docs.key(&id)]).unwrap();
    let restored = plain_get();
    assert!(
        !restored.starts_with(b"$-1"),
        "{policy:?}: the CMI restored the old cached value"
    );
    // The first read may find its connection broken and read around the cache; the next ones
    // open a new connection and read the CMI.
    for _ in 0..3 {
        assert_eq!(
            n(&reader),
            1,
            "{policy:?}: the restored CMI served an overwritten value"
        );
    }
    assert_ne!(
        plain_get(),
        restored,
        "{policy:?}: the old value is gone (the reader cached the new one, or nothing)"
    );
    drop(cmis);
}

#[test]
fn a_cmi_restored_from_its_log_under_write_around_serves_nothing_overwritten() {
    restored_cmi_serves_nothing_overwritten(Policy::WriteAround);
}

#[test]
fn a_cmi_restored_from_its_log_under_write_through_serves_nothing_overwritten() {
    restored_cmi_serves_nothing_overwritten(Policy::WriteThrough);
}
