//! A Dendrite's *process* killed (SIGKILL) mid-run, under write-around, write-through and
//! write-back: it has cached ranges, written documents, and holds the leases of a write that
//! stopped between its data-store commit and its cache commit. A Dendrite made for the same
//! attribute in another process takes over from the log records (002 §3.1): it finds the
//! ranges the dead one cached, serves none stale, loses no acknowledged write, and its own
//! writes keep the ranges it inherited right.
//!
//! The killed process is this test program run again (`harness = false`): with
//! `CADS_CPR_CHILD` set, `main` plays it instead of running the test.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use cads::cpr::{Dendrite, DendriteConfig, Point};
use cads::documents::Collection;
use cads::{Cads, Config, Policy};
use cads_store::{Document, StoreOptions};
use common::{changes, doc, Deployment, PAST_A_LONG_LEASE};
use serde_json::json;

const USERS: usize = 40;
/// Writes the dead process has acknowledged before it stops.
const ACKNOWLEDGED: usize = 150;
const SPAN: usize = 5;

fn user(k: usize) -> String {
    format!("u{k:02}")
}

/// The range of `SPAN + 1` users from `lo`.
fn range(lo: usize) -> (Point, Point) {
    (Point::Text(user(lo)), Point::Text(user(lo + SPAN)))
}

fn dendrite(cads: &Cads) -> Dendrite {
    Dendrite::new(
        cads,
        &Collection::named("users").unwrap(),
        DendriteConfig::by_id(),
    )
    .unwrap()
}

/// The process to be killed: gets and updates through its Dendrite, each acknowledged update
/// printed as `ack <id> <value>`; then one more update that stops for good before its cache
/// commit, printed as `holding`.
fn child() {
    let url = std::env::var("CADS_CPR_STORE").unwrap();
    let cmis: Vec<std::net::SocketAddr> = std::env::var("CADS_CPR_CMIS")
        .unwrap()
        .split(',')
        .map(|a| a.parse().unwrap())
        .collect();
    let policy = Policy::parse(&std::env::var("CADS_CPR_POLICY").unwrap()).unwrap();
    let store = cads_store::open(&url, &StoreOptions::default()).unwrap();
    let cads = Cads::connect(store, &cmis, policy, Config::default());
    let ranges = dendrite(&cads);
    let mut out = std::io::stdout();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut acknowledged = 0;
    let mut value = 0;
    while acknowledged < ACKNOWLEDGED {
        let (lo, hi) = range(next(USERS - SPAN));
        cads.run(|s| ranges.get(s, &lo, &hi)).unwrap();
        let id = user(next(USERS));
        value += 1;
        cads.run(|s| ranges.update(s, &id, changes(json!({"$set": {"v": value}}))))
            .unwrap();
        writeln!(out, "ack {id} {value}").unwrap();
        acknowledged += 1;
    }
    let _holding = common::stop_for_good_before_the_cache_commit();
    // Above every acknowledged value: under write-around and write-through its data-store
    // commit happens, and the test's check that nothing acknowledged was lost still holds.
    let _ = cads.run(|s| ranges.update(s, &user(SPAN), changes(json!({"$set": {"v": 1_000_000}}))));
    unreachable!("the cache commit never happens");
}

/// The documents of `[lo, hi]` as the data store has them.
fn stored(d: &Deployment, lo: &Point, hi: &Point) -> Vec<(String, Document)> {
    let json = |p: &Point| match p {
        Point::Text(s) => json!(s),
        _ => unreachable!(),
    };
    d.store
        .scan(
            "users",
            None,
            std::ops::Bound::Included(&json(lo)),
            std::ops::Bound::Included(&json(hi)),
            1000,
        )
        .unwrap()
}

fn survive_a_kill(policy: Policy) {
    let d = Deployment::start(policy);
    d.store.create_collection("users", &[]).unwrap();
    let docs: Vec<(String, Document)> = (0..USERS)
        .map(|k| (user(k), doc(json!({"v": 0}))))
        .collect();
    d.store.insert_many("users", &docs).unwrap();
    let addrs: Vec<String> = d.cmis.addrs().iter().map(|a| a.to_string()).collect();
    let mut dying = Command::new(std::env::current_exe().unwrap())
        .env("CADS_CPR_CHILD", "1")
        .env("CADS_CPR_STORE", d.dir.sqlite_url())
        .env("CADS_CPR_CMIS", addrs.join(","))
        .env("CADS_CPR_POLICY", policy.name())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acknowledged: HashMap<String, i64> = HashMap::new();
    for line in BufReader::new(dying.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "holding" {
            break;
        }
        let mut words = line.split(' ').skip(1);
        let (id, value) = (words.next().unwrap(), words.next().unwrap());
        acknowledged.insert(id.to_string(), value.parse().unwrap());
    }
    assert_eq!(
        acknowledged.values().max().copied(),
        Some(ACKNOWLEDGED as i64),
        "{policy:?}: the process ran to its last write"
    );
    dying.kill().unwrap();
    dying.wait().unwrap();
    // The dead session's leases run out.
    d.cmis.advance_clock(PAST_A_LONG_LEASE);

    let cads = d.cads(Config::default());
    let ranges = dendrite(&cads);
    let inherited = ranges.stats().cached_intervals;
    assert!(inherited > 0, "{policy:?}: PrInT rebuilt from the logs");
    let get = |lo: usize| {
        let (lo, hi) = range(lo);
        cads.run(|s| ranges.get(s, &lo, &hi)).unwrap()
    };
    let read: Vec<_> = (0..USERS - SPAN).map(get).collect();
    let stats = ranges.stats();
    assert!(
        stats.misses < stats.gets,
        "{policy:?}: the dead process's results are hits ({stats:?})"
    );
    if policy == Policy::WriteBack {
        cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    }
    for (lo, seen) in read.iter().enumerate() {
        let (l, h) = range(lo);
        assert_eq!(*seen, stored(&d, &l, &h), "{policy:?}: range from {lo}");
    }
    for (id, value) in &acknowledged {
        let now = d.store.get("users", id).unwrap().unwrap()["v"]
            .as_i64()
            .unwrap();
        assert!(now >= *value, "{policy:?}: {id} lost {value} (has {now})");
    }
    // The new Dendrite's writes change the ranges it inherited.
    for k in (0..USERS).step_by(3) {
        cads.run(|s| ranges.update(s, &user(k), changes(json!({"$set": {"v": 1000 + k}}))))
            .unwrap();
    }
    let read: Vec<_> = (0..USERS - SPAN).map(get).collect();
    if policy == Policy::WriteBack {
        cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    }
    for (lo, seen) in read.iter().enumerate() {
        let (l, h) = range(lo);
        assert_eq!(
            *seen,
            stored(&d, &l, &h),
            "{policy:?}: range from {lo}, later"
        );
    }
    println!("{policy:?}: {inherited} ranges taken over, none stale, nothing lost");
}

fn main() {
    if std::env::var_os("CADS_CPR_CHILD").is_some() {
        child();
        return;
    }
    for policy in [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack] {
        survive_a_kill(policy);
    }
    println!("a Dendrite's process killed mid-run, its ranges taken over: ok");
}
