//! Write-back loses no acknowledged write when a CMI process dies: with R = 3 replicas over four
//! CMI processes, one is killed with SIGKILL in the middle of a write-heavy run; after the
//! workers drain, every acknowledged `$push` is in the data store exactly once and every `$inc`
//! matches.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::writeback::Buffering;
use cads::{Cads, Config, Policy, Workers, WriteBackConfig};
use cads_client::{Client, ClientConfig};
use cads_coord::Coordinator;
use cads_protocol::{Command as CacheCommand, Reply};
use cads_store::{open, Changes, StoreOptions};
use serde_json::json;

struct Cmi {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Cmi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_cmi() -> Cmi {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_cads"))
        .args(["server", "--port", &port.to_string(), "--cmis", "1"])
        .args(["--mode", "write-through", "--lease-ms", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cads server");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "a CMI did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Cmi { child, addr }
}

#[test]
fn killing_a_cmi_loses_no_acknowledged_write() {
    let dir = std::env::temp_dir().join(format!("cads-durability-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = open(
        &format!("sqlite:{}", dir.join("data.db").display()),
        &StoreOptions::default(),
    )
    .unwrap();
    let mut cmis: Vec<Cmi> = (0..4).map(|_| start_cmi()).collect();
    let mut config = ClientConfig::new(cmis.iter().map(|c| c.addr).collect());
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
                crash: None,
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
        unsafe {
            libc::kill(cmis[1].child.id() as i32, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2500));
        stop.store(true, Ordering::Release);
    });
    let _ = cmis[1].child.wait();
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
            let left = direct.execute(cmi, &CacheCommand::Get(&key)).unwrap();
            if let Reply::Bulk(bytes) = &left {
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
    let _ = std::fs::remove_dir_all(&dir);
}
