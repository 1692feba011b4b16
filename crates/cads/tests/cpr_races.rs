//! CPR's races (002 §3.3), each made to happen with failpoints: a write into a range whose miss
//! has queried the data store and not yet cached its result, with LeMInT and without it (the
//! broken baseline, which must leave the stale result the test looks for); and two writes of
//! overlapping intervals.
//!
//! Failpoints are process-wide, so every test here holds the failpoint scenario.

mod common;

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use cads::cpr::{Dendrite, DendriteConfig, Point};
use cads::documents::Collection;
use cads::{Cads, Config, Policy};
use cads_store::{Document, FieldKind};
use cads_testkit::failpoints::{
    Scenario, CACHE_COMMIT, CPR_LEASES_OFF, CPR_LIST_READ, CPR_WRITE_LEASING, FILL,
};
use common::{changes, doc, Deployment};
use serde_json::json;

/// Long enough that no wait in these tests runs out on a busy machine: the test ends each wait
/// by releasing what it waits for.
const LONG_WAIT: Duration = Duration::from_secs(600);

/// The three policies, with β = 100% (whole results), 0% (documents cached once) and 50%.
const CASES: [(Policy, u8); 8] = [
    (Policy::WriteAround, 100),
    (Policy::WriteAround, 0),
    (Policy::WriteThrough, 100),
    (Policy::WriteThrough, 0),
    (Policy::WriteThrough, 50),
    (Policy::WriteBack, 100),
    (Policy::WriteBack, 0),
    (Policy::WriteBack, 50),
];

fn by_price(cads: &Cads, beta: u8) -> Dendrite {
    let items = Collection::create_indexed(cads, "items", &[("price", FieldKind::Int)]).unwrap();
    let config = DendriteConfig {
        lease_wait: LONG_WAIT,
        beta,
        ..DendriteConfig::by_field("price", FieldKind::Int)
    };
    let dendrite = Dendrite::new(cads, &items, config).unwrap();
    for i in 0..5 {
        cads.run(|s| dendrite.insert(s, &format!("i{i}"), doc(json!({"price": (i + 1) * 10}))))
            .unwrap();
    }
    dendrite
}

fn ids(result: &[(String, Document)]) -> Vec<String> {
    result.iter().map(|(id, _)| id.clone()).collect()
}

/// Holds the first session to reach `point`: it says so, then waits for the test's word.
fn hold_first(scenario: &Scenario, point: &str) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (reached_tx, reached_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let state = Mutex::new(Some((reached_tx, go_rx)));
    scenario.on(point, move || {
        // Taken in a statement of its own: the lock must not be held while this session waits,
        // or every other session reaching the point would wait for it.
        let first = state.lock().unwrap().take();
        if let Some((reached, go)) = first {
            reached.send(()).unwrap();
            go.recv().unwrap();
        }
    });
    (reached_rx, go_tx)
}

/// Waits (without a deadline: the test's own timeout is the bound) until `dendrite` has had
/// `n` lease requests wait.
fn until_waits(dendrite: &Dendrite, n: u64) {
    while dendrite.stats().lease_waits < n {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A get of [10, 50] misses and queries the data store; an insert of a document priced 35 comes
/// in before the get caches what it read. Returns the ids the next get of [10, 50] shows.
fn insert_during_a_miss(policy: Policy, beta: u8, lemint: bool) -> Vec<String> {
    let scenario = Scenario::setup();
    if !lemint {
        scenario.set(CPR_LEASES_OFF, "return");
    }
    let d = Deployment::start(policy);
    let cads = d.cads(Config::default());
    let items = by_price(&cads, beta);
    let (queried, go) = hold_first(&scenario, FILL);
    std::thread::scope(|scope| {
        let read = scope.spawn(|| {
            cads.run(|s| items.get(s, &Point::Int(10), &Point::Int(50)))
                .unwrap()
        });
        queried.recv().unwrap();
        let write = scope.spawn(|| {
            cads.run(|s| items.insert(s, "new", doc(json!({"price": 35}))))
                .unwrap()
        });
        if lemint {
            // The write waits for the get's Shared lease; the get goes on.
            until_waits(&items, 1);
        } else {
            write.join().unwrap();
        }
        go.send(()).unwrap();
        // Either what it read before the insert, or (run again because the write voided its
        // fill before it committed) after it.
        read.join().unwrap();
    });
    let next = cads
        .run(|s| items.get(s, &Point::Int(10), &Point::Int(50)))
        .unwrap();
    ids(&next)
}

#[test]
fn a_write_into_a_range_being_cached_waits_for_it() {
    for (policy, beta) in CASES {
        let next = insert_during_a_miss(policy, beta, true);
        assert!(
            next.contains(&"new".to_string()),
            "{policy:?} beta {beta}: {next:?}"
        );
    }
}

#[test]
fn without_lemint_the_range_is_cached_stale() {
    for (policy, beta) in CASES {
        let next = insert_during_a_miss(policy, beta, false);
        assert_eq!(
            next,
            ["i0", "i1", "i2", "i3", "i4"],
            "{policy:?} beta {beta}: the result read before the insert stays cached"
        );
    }
}

/// A write by field reads its document before it holds its leases; another write of the same
/// document that commits in between (changing another field) must not be lost from the cached
/// range the first write moves the document into.
#[test]
fn a_write_applies_to_the_document_as_it_is_once_leased() {
    for beta in [100, 0] {
        let scenario = Scenario::setup();
        let d = Deployment::start(Policy::WriteThrough);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        cads.run(|s| items.put(s, "d", doc(json!({"price": 200, "name": "a"}))))
            .unwrap();
        let range = || {
            cads.run(|s| items.get(s, &Point::Int(0), &Point::Int(100)))
                .unwrap()
        };
        range();
        let (leasing, go) = hold_first(&scenario, CPR_WRITE_LEASING);
        std::thread::scope(|scope| {
            let mover = scope.spawn(|| {
                cads.run(|s| items.update(s, "d", changes(json!({"$set": {"price": 5}}))))
                    .unwrap()
            });
            leasing.recv().unwrap();
            cads.run(|s| items.update(s, "d", changes(json!({"$set": {"name": "b"}}))))
                .unwrap();
            go.send(()).unwrap();
            mover.join().unwrap();
        });
        let now = range();
        assert_eq!(now[0].0, "d");
        assert_eq!(
            now[0].1["name"],
            json!("b"),
            "beta {beta}: the cached range lost the other write"
        );
        assert_eq!(Some(&now[0].1), d.store.get("items", "d").unwrap().as_ref());
    }
}

/// β = 0%: a get that hits reads a range's ids, then its documents. A write that moves a
/// document out of the range in between must not show in the result as a document outside the
/// range: the get sees that the list changed and reads the range again.
#[test]
fn a_list_read_before_a_write_is_checked_after_it() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let scenario = Scenario::setup();
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, 0);
        let range = || {
            cads.run(|s| items.get(s, &Point::Int(15), &Point::Int(55)))
                .unwrap()
        };
        range();
        let (listed, go) = hold_first(&scenario, CPR_LIST_READ);
        let seen = std::thread::scope(|scope| {
            let read = scope.spawn(range);
            listed.recv().unwrap();
            cads.run(|s| items.update(s, "i1", changes(json!({"$set": {"price": 500}}))))
                .unwrap();
            go.send(()).unwrap();
            read.join().unwrap()
        });
        for (id, doc) in &seen {
            let price = doc["price"].as_i64().unwrap();
            assert!((15..=55).contains(&price), "{policy:?}: {id} at {price}");
        }
        assert_eq!(ids(&seen), ["i2", "i3", "i4"], "{policy:?}");
    }
}

/// A write holds its leases until its session has committed to the cache too: a second write
/// that moves another document to the same price waits for it, and the cached result takes both
/// writes.
#[test]
fn overlapping_writes_take_turns() {
    for (policy, beta) in CASES {
        let scenario = Scenario::setup();
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        let range = || {
            cads.run(|s| items.get(s, &Point::Int(0), &Point::Int(100)))
                .unwrap()
        };
        range();
        let (committing, go) = hold_first(&scenario, CACHE_COMMIT);
        std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                cads.run(|s| items.update(s, "i1", changes(json!({"$set": {"price": 45}}))))
                    .unwrap()
            });
            committing.recv().unwrap();
            let second = scope.spawn(|| {
                cads.run(|s| items.update(s, "i3", changes(json!({"$set": {"price": 45}}))))
                    .unwrap()
            });
            until_waits(&items, 1);
            go.send(()).unwrap();
            first.join().unwrap();
            second.join().unwrap();
        });
        let now = range();
        let prices: Vec<i64> = now
            .iter()
            .map(|(_, d)| d["price"].as_i64().unwrap())
            .collect();
        assert_eq!(
            ids(&now),
            ["i0", "i2", "i1", "i3", "i4"],
            "{policy:?} beta {beta}"
        );
        assert_eq!(prices, [10, 30, 45, 45, 50], "{policy:?} beta {beta}");
    }
}
