//! An application *process* killed (SIGKILL) while it holds leases and buffered writes, under
//! write-around, write-through and write-back: it appends tokens to documents, runs no
//! write-back workers (its acknowledged writes stay buffered in the cache), and stops for good
//! between a data-store commit and its cache commit, holding that write's leases. Then a
//! surviving process and a restarted one finish its work side by side: every read sees every
//! write acknowledged before it began, and after the drain every acknowledged token is in the
//! data store exactly once.
//!
//! The killed and the restarted processes are this test program run again (`harness = false`):
//! with `CADS_APPNODE_CHILD` set, `main` plays one of them instead of running the test.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::writeback::Buffering;
use cads::{Cads, Policy, Workers};
use cads_store::StoreOptions;
use cads_testkit::documents::logged;
use cads_testkit::tokens::{self, assert_fresh, assert_stored_once};
use common::{changes, doc, documents_config, Deployment, LONG_LEASE_MS, PAST_A_LONG_LEASE};
use serde_json::json;

const DOCS: usize = 8;
/// Writes the killed process has acknowledged before it stops; the restarted one makes as many.
const WRITES: usize = 60;

type Ack = tokens::Ack<Instant>;

fn id(d: usize) -> String {
    format!("d{d}")
}

fn push(token: &str) -> cads::store::Changes {
    changes(json!({"$push": {"log": token}}))
}

/// The killed (`dying`) or restarted process: appends `WRITES` tokens `<prefix><i>`, printing
/// `ack <doc> <token>` for each; the dying one then starts one more write and stops for good
/// before its cache commit, printing `holding`.
fn child(role: &str) {
    let url = std::env::var("CADS_APPNODE_STORE").unwrap();
    let cmis: Vec<std::net::SocketAddr> = std::env::var("CADS_APPNODE_CMIS")
        .unwrap()
        .split(',')
        .map(|a| a.parse().unwrap())
        .collect();
    let policy = Policy::parse(&std::env::var("CADS_APPNODE_POLICY").unwrap()).unwrap();
    let store = cads_store::open(&url, &StoreOptions::default()).unwrap();
    let cads = Cads::connect(store, &cmis, policy, documents_config(Buffering::Append));
    let docs = Collection::named("logs").unwrap();
    let prefix = if role == "dying" { "k" } else { "r" };
    let mut out = std::io::stdout();
    for i in 0..WRITES {
        let (d, token) = (i % DOCS, format!("{prefix}{i}"));
        cads.run(|s| docs.update(s, &id(d), push(&token))).unwrap();
        writeln!(out, "ack {d} {token}").unwrap();
    }
    if role == "dying" {
        let _holding = common::stop_for_good_before_the_cache_commit();
        let _ = cads.run(|s| docs.update(s, &id(0), push("held")));
        unreachable!("the cache commit never happens");
    }
    writeln!(out, "done").unwrap();
}

fn spawn(role: &str, d: &Deployment, policy: Policy) -> Child {
    let addrs: Vec<String> = d.cmis.addrs().iter().map(|a| a.to_string()).collect();
    Command::new(std::env::current_exe().unwrap())
        .env("CADS_APPNODE_CHILD", role)
        .env("CADS_APPNODE_STORE", d.dir.sqlite_url())
        .env("CADS_APPNODE_CMIS", addrs.join(","))
        .env("CADS_APPNODE_POLICY", policy.name())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads a child's acknowledgements into `acks` as they come, until `done` or `holding`.
fn collect_acks(child: &mut Child, acks: &Mutex<Vec<Ack>>) -> String {
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let mut words = line.split(' ');
        match words.next() {
            Some("ack") => {
                let d = words.next().unwrap().parse().unwrap();
                let token = words.next().unwrap().to_string();
                acks.lock().unwrap().push((d, token, Instant::now()));
            }
            _ => return line,
        }
    }
    panic!("the process ended without a word");
}

fn survive_a_killed_appnode(policy: Policy) {
    let d = Deployment::start_with(policy, 3, |o| o.lease_ms = Some(LONG_LEASE_MS));
    d.store.create_collection("logs", &[]).unwrap();
    for k in 0..DOCS {
        d.store
            .put("logs", &id(k), &doc(json!({"log": []})))
            .unwrap();
    }
    let acks: Mutex<Vec<Ack>> = Mutex::default();
    let mut dying = spawn("dying", &d, policy);
    assert_eq!(collect_acks(&mut dying, &acks), "holding", "{policy:?}");
    dying.kill().unwrap();
    dying.wait().unwrap();

    if policy == Policy::WriteBack {
        let unapplied = acks
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, token, _)| {
                let stored = d.store.get("logs", &id(*k)).unwrap().unwrap();
                !logged(&stored).contains(token)
            })
            .count();
        assert!(unapplied > 0, "the killed process left buffered writes");
    }
    let survivor = Arc::new(d.cads(documents_config(Buffering::Append)));
    let docs = Collection::named("logs").unwrap();
    let read = |k: usize| {
        let start = Instant::now();
        let doc = docs.read(&survivor, &id(k)).unwrap().unwrap();
        (k, start, logged(&doc))
    };
    // Before the dead session's leases run out, its buffered writes are read like any other.
    let reads: Vec<_> = (1..DOCS).map(read).collect();
    assert_fresh(
        &format!("{policy:?} after the kill"),
        &acks.lock().unwrap(),
        &reads,
    );
    d.cmis.advance_clock(PAST_A_LONG_LEASE);
    // The held write committed to the data store under write-around and write-through (under
    // write-back its buffered write was never made): once its leases have run out, no CMI
    // serves the value it replaced.
    let held = read(0).2.contains(&"held".to_string());
    assert_eq!(
        held,
        policy != Policy::WriteBack,
        "{policy:?}: the held write"
    );
    let _workers = (policy == Policy::WriteBack).then(|| Workers::start(survivor.clone(), 2));

    // The survivor and a restarted process finish the work; the survivor also reads.
    let reads = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    let mut restarted = spawn("restarted", &d, policy);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert_eq!(collect_acks(&mut restarted, &acks), "done", "{policy:?}");
            restarted.wait().unwrap();
        });
        scope.spawn(|| {
            let mut k = 0;
            while !stop.load(Ordering::SeqCst) {
                reads.lock().unwrap().push(read(k % DOCS));
                k += 1;
            }
        });
        for i in 0..WRITES {
            let (k, token) = (i % DOCS, format!("s{i}"));
            survivor
                .run(|s| docs.update(s, &id(k), push(&token)))
                .unwrap();
            acks.lock().unwrap().push((k, token, Instant::now()));
        }
        while acks.lock().unwrap().len() < 3 * WRITES {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let acks = acks.into_inner().unwrap();
    assert_fresh(
        &format!("{policy:?} finishing"),
        &acks,
        &reads.into_inner().unwrap(),
    );

    if policy == Policy::WriteBack {
        cads::writeback::drain(&survivor, Duration::from_secs(60)).unwrap();
    }
    for k in 0..DOCS {
        let stored = logged(&d.store.get("logs", &id(k)).unwrap().unwrap());
        assert_stored_once(&format!("{policy:?}"), k, &stored, &acks);
    }
    println!(
        "{policy:?}: {} writes acknowledged by three processes, one killed holding leases: \
         nothing stale or lost",
        acks.len()
    );
}

fn main() {
    if let Some(role) = std::env::var_os("CADS_APPNODE_CHILD") {
        child(role.to_str().unwrap());
        return;
    }
    for policy in [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack] {
        survive_a_killed_appnode(policy);
    }
    println!("an application process killed holding leases and buffered writes: ok");
}
