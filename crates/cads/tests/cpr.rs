//! CPR (002): range results cached through a Dendrite, and every write that changes a cached
//! range reflected in its next get, under write-around, write-through and write-back, by id and
//! by field.

mod common;

use cads::cpr::{Dendrite, DendriteConfig, Point};
use cads::documents::Collection;
use cads::{Cads, Config, Policy};
use cads_store::{Document, FieldKind};
use common::{changes, doc, Deployment};
use serde_json::json;
use std::time::Duration;

const POLICIES: [Policy; 4] = [
    Policy::DataStoreOnly,
    Policy::WriteAround,
    Policy::WriteThrough,
    Policy::WriteBack,
];
const CACHING: [Policy; 3] = [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack];

/// Each policy with β = 100% (whole results cached), 0% (each document cached once) and 50%
/// (ranges cached whole or as lists, by how much they share).
fn with_betas(policies: &[Policy]) -> Vec<(Policy, u8)> {
    policies
        .iter()
        .flat_map(|&p| [(p, 100), (p, 0), (p, 50)])
        .collect()
}

fn int(n: i64) -> Point {
    Point::Int(n)
}

fn text(s: &str) -> Point {
    Point::Text(s.to_string())
}

/// A collection `items` indexed on `price`, with items i0..i9 priced 10, 20, ..., 100.
fn by_price(cads: &Cads, beta: u8) -> Dendrite {
    let items = Collection::create_indexed(cads, "items", &[("price", FieldKind::Int)]).unwrap();
    let config = DendriteConfig {
        beta,
        ..DendriteConfig::by_field("price", FieldKind::Int)
    };
    let dendrite = Dendrite::new(cads, &items, config).unwrap();
    for i in 0..10 {
        cads.run(|s| {
            dendrite.insert(
                s,
                &format!("i{i}"),
                doc(json!({"price": (i + 1) * 10, "n": i})),
            )
        })
        .unwrap();
    }
    dendrite
}

fn ids(result: &[(String, Document)]) -> Vec<&str> {
    result.iter().map(|(id, _)| id.as_str()).collect()
}

fn get(cads: &Cads, d: &Dendrite, lo: Point, hi: Point) -> Vec<(String, Document)> {
    cads.run(|s| d.get(s, &lo, &hi)).unwrap()
}

/// What a scan of the data store returns for the same range (under write-back, once every
/// buffered write is applied).
fn stored(d: &Deployment, cads: &Cads, field: &str, lo: i64, hi: i64) -> Vec<(String, Document)> {
    if cads.policy() == Policy::WriteBack {
        cads::writeback::drain(cads, Duration::from_secs(60)).unwrap();
    }
    d.store
        .scan(
            "items",
            Some(field),
            std::ops::Bound::Included(&json!(lo)),
            std::ops::Bound::Included(&json!(hi)),
            1000,
        )
        .unwrap()
}

#[test]
fn a_cached_range_is_a_hit_until_a_write_changes_it() {
    for (policy, beta) in with_betas(&POLICIES) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        let first = get(&cads, &items, int(20), int(40));
        assert_eq!(ids(&first), ["i1", "i2", "i3"], "{policy:?} beta {beta}");
        d.faults.reset_counts();
        assert_eq!(get(&cads, &items, int(20), int(40)), first);
        // A get in a session of its own, the same hit in one round trip.
        assert_eq!(items.read(&cads, &int(20), &int(40)).unwrap(), first);
        let stats = items.stats();
        assert_eq!(
            (stats.gets, stats.misses),
            (
                3,
                if policy == Policy::DataStoreOnly {
                    3
                } else {
                    1
                }
            )
        );
        if policy != Policy::DataStoreOnly {
            assert_eq!(
                d.faults.counts().reads,
                0,
                "{policy:?} beta {beta}: the second get is a hit"
            );
            assert_eq!(stats.cached_intervals, 1);
        }
        // A write outside the range leaves its result cached.
        cads.run(|s| items.update(s, "i8", changes(json!({"$inc": {"n": 1}}))))
            .unwrap();
        d.faults.reset_counts();
        get(&cads, &items, int(20), int(40));
        if policy != Policy::DataStoreOnly {
            assert_eq!(
                d.faults.counts().reads,
                0,
                "{policy:?} beta {beta}: untouched by a write elsewhere"
            );
        }
    }
}

#[test]
fn inserts_updates_and_deletes_show_in_the_next_get() {
    for (policy, beta) in with_betas(&POLICIES) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        let range = || get(&cads, &items, int(15), int(55));
        assert_eq!(ids(&range()), ["i1", "i2", "i3", "i4"]);
        // An insert inside the cached range.
        cads.run(|s| items.insert(s, "new", doc(json!({"price": 33, "n": 0}))))
            .unwrap();
        assert_eq!(
            ids(&range()),
            ["i1", "i2", "new", "i3", "i4"],
            "{policy:?} beta {beta}"
        );
        // An update of a field the range does not order by.
        cads.run(|s| items.update(s, "i2", changes(json!({"$set": {"n": 42}}))))
            .unwrap();
        assert_eq!(range()[1].1["n"], json!(42), "{policy:?} beta {beta}");
        // An update that moves a document out of the range, and one that moves another in.
        cads.run(|s| items.update(s, "i1", changes(json!({"$set": {"price": 500}}))))
            .unwrap();
        cads.run(|s| items.update(s, "i9", changes(json!({"$set": {"price": 16}}))))
            .unwrap();
        assert_eq!(
            ids(&range()),
            ["i9", "i2", "new", "i3", "i4"],
            "{policy:?} beta {beta}"
        );
        // A put that replaces a document, and a delete.
        cads.run(|s| items.put(s, "i3", doc(json!({"price": 54, "n": 3}))))
            .unwrap();
        cads.run(|s| items.delete(s, "new")).unwrap();
        assert_eq!(
            ids(&range()),
            ["i9", "i2", "i4", "i3"],
            "{policy:?} beta {beta}"
        );
        // A document that loses the field leaves every range.
        cads.run(|s| items.update(s, "i4", changes(json!({"$unset": {"price": ""}}))))
            .unwrap();
        assert_eq!(ids(&range()), ["i9", "i2", "i3"], "{policy:?} beta {beta}");
        assert_eq!(
            range(),
            stored(&d, &cads, "price", 15, 55),
            "{policy:?} beta {beta}"
        );
    }
}

#[test]
fn overlapping_ranges_are_each_kept_right() {
    for (policy, beta) in with_betas(&CACHING) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        // (45, 55) lies between i3's old price and its new one: the move does not touch it.
        let ranges = [(10, 50), (30, 30), (40, 100), (0, 5), (60, 70), (45, 55)];
        for (lo, hi) in ranges {
            get(&cads, &items, int(lo), int(hi));
        }
        assert_eq!(items.stats().cached_intervals, ranges.len());
        cads.run(|s| items.update(s, "i3", changes(json!({"$set": {"price": 65}}))))
            .unwrap();
        cads.run(|s| items.insert(s, "cheap", doc(json!({"price": 1}))))
            .unwrap();
        for (lo, hi) in ranges {
            assert_eq!(
                get(&cads, &items, int(lo), int(hi)),
                stored(&d, &cads, "price", lo, hi),
                "{policy:?} beta {beta} [{lo}, {hi}]"
            );
        }
        let stats = items.stats();
        assert_eq!(
            stats.results_changed, 4,
            "{policy:?} beta {beta}: (10,50), (40,100), (60,70), (0,5)"
        );
        if policy == Policy::WriteAround {
            // Their intervals went with them, and came back when they were read again.
            assert_eq!(stats.cached_intervals, ranges.len());
        }
    }
}

#[test]
fn ranges_of_ids() {
    for (policy, beta) in with_betas(&POLICIES) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let users = Collection::create(&cads, "users").unwrap();
        let config = DendriteConfig {
            beta,
            ..DendriteConfig::by_id()
        };
        let by_id = Dendrite::new(&cads, &users, config).unwrap();
        for name in ["ann", "bob", "cat", "dan"] {
            cads.run(|s| by_id.insert(s, name, doc(json!({"visits": 0}))))
                .unwrap();
        }
        let range = || get(&cads, &by_id, text("b"), text("d"));
        assert_eq!(ids(&range()), ["bob", "cat"]);
        cads.run(|s| by_id.insert(s, "bea", doc(json!({"visits": 1}))))
            .unwrap();
        cads.run(|s| by_id.update(s, "cat", changes(json!({"$inc": {"visits": 5}}))))
            .unwrap();
        // An update of an id the range would hold but that does not exist changes nothing.
        cads.run(|s| by_id.update(s, "cow", changes(json!({"$inc": {"visits": 5}}))))
            .unwrap();
        let now = range();
        assert_eq!(ids(&now), ["bea", "bob", "cat"], "{policy:?} beta {beta}");
        assert_eq!(now[2].1["visits"], json!(5));
        cads.run(|s| by_id.delete(s, "bob")).unwrap();
        assert_eq!(ids(&range()), ["bea", "cat"], "{policy:?} beta {beta}");
        // The document layer's own entry of a document follows the writes too.
        assert_eq!(
            cads.run(|s| users.get(s, "cat")).unwrap().unwrap()["visits"],
            json!(5)
        );
    }
}

/// A session that writes into a range and then reads it gets the data store's result without
/// caching it: its writes reach the data store at commit, so that result would be stale once it
/// commits.
#[test]
fn a_range_read_by_its_own_writer_is_not_cached() {
    for (policy, beta) in with_betas(&[Policy::WriteAround, Policy::WriteThrough]) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        let seen = cads
            .run(|s| {
                items.insert(s, "mine", doc(json!({"price": 25})))?;
                items.get(s, &int(10), &int(29))
            })
            .unwrap();
        assert_eq!(
            ids(&seen),
            ["i0", "i1"],
            "{policy:?} beta {beta}: documents are written at commit"
        );
        assert_eq!(items.stats().cached_intervals, 0, "{policy:?} beta {beta}");
        assert_eq!(
            ids(&get(&cads, &items, int(10), int(29))),
            ["i0", "i1", "mine"],
            "{policy:?} beta {beta}"
        );
        // A session that gives up leaves nothing behind.
        let failed = cads.run(|s| {
            items.insert(s, "gone", doc(json!({"price": 12})))?;
            Err::<(), _>(cads::Error::App("changed my mind".into()))
        });
        assert!(failed.is_err());
        assert_eq!(
            ids(&get(&cads, &items, int(10), int(29))),
            ["i0", "i1", "mine"],
            "{policy:?} beta {beta}"
        );
    }
}

/// Two writes of one document in a session: the second starts where the first left it, which
/// the data store learns only at commit.
#[test]
fn a_document_written_twice_in_a_session() {
    for (policy, beta) in with_betas(&CACHING) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        for (lo, hi) in [(10, 50), (51, 60), (61, 100)] {
            get(&cads, &items, int(lo), int(hi));
        }
        cads.run(|s| {
            items.update(s, "i0", changes(json!({"$set": {"price": 50}})))?;
            items.update(s, "i0", changes(json!({"$inc": {"price": 5}})))
        })
        .unwrap();
        for (lo, hi) in [(10, 50), (51, 60), (61, 100)] {
            assert_eq!(
                get(&cads, &items, int(lo), int(hi)),
                stored(&d, &cads, "price", lo, hi),
                "{policy:?} beta {beta} [{lo}, {hi}]"
            );
        }
        assert_eq!(ids(&get(&cads, &items, int(51), int(60))), ["i0", "i5"]);
    }
}

#[test]
fn concurrent_writers_and_readers_leave_every_cached_range_right() {
    for (policy, beta) in with_betas(&CACHING) {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        std::thread::scope(|scope| {
            for t in 0..4i64 {
                let (cads, items) = (&cads, &items);
                scope.spawn(move || {
                    for i in 0..60i64 {
                        let lo = (t * 7 + i * 13) % 100;
                        if i % 3 == 0 {
                            let id = format!("i{}", (t + i) % 10);
                            let price = (t * 31 + i * 17) % 110;
                            cads.run(|s| {
                                items.update(s, &id, changes(json!({"$set": {"price": price}})))
                            })
                            .unwrap();
                        } else if i % 2 == 0 {
                            cads.run(|s| items.get(s, &int(lo), &int(lo + 25))).unwrap();
                        } else {
                            items.read(cads, &int(lo), &int(lo + 25)).unwrap();
                        }
                    }
                });
            }
        });
        // Every range read now (from the cache where it is cached) matches the data store.
        for lo in (0..100).step_by(7) {
            for hi in [lo, lo + 25] {
                assert_eq!(
                    get(&cads, &items, int(lo), int(hi)),
                    stored(&d, &cads, "price", lo, hi),
                    "{policy:?} beta {beta} [{lo}, {hi}]"
                );
            }
        }
        // With no write since, the same gets are all hits.
        let misses = items.stats().misses;
        for lo in (0..100).step_by(7) {
            get(&cads, &items, int(lo), int(lo + 25));
        }
        let stats = items.stats();
        assert_eq!(stats.misses, misses, "{policy:?} beta {beta}");
        assert_eq!(stats.leases_held, 0, "every session gave its leases back");
    }
}

#[test]
fn bad_ranges_and_settings_are_refused() {
    let d = Deployment::start(Policy::WriteAround);
    let cads = d.cads(Config::default());
    let items = by_price(&cads, 100);
    let err = |lo: Point, hi: Point| {
        cads.run(|s| items.get(s, &lo, &hi))
            .unwrap_err()
            .to_string()
    };
    assert!(err(int(5), int(4)).contains("empty range"));
    assert!(err(text("a"), text("b")).contains("wrong kind"));
    let coll = items.collection().clone();
    let bounded = DendriteConfig {
        min: Some(int(0)),
        max: Some(int(100)),
        max_results: 3,
        ..DendriteConfig::by_field("price", FieldKind::Int)
    };
    let small = Dendrite::new(&cads, &coll, bounded).unwrap();
    let err = |lo: i64, hi: i64| {
        cads.run(|s| small.get(s, &int(lo), &int(hi)))
            .unwrap_err()
            .to_string()
    };
    assert!(err(-1, 10).contains("outside the domain"));
    assert!(
        err(0, 100).contains("more than 3 documents"),
        "{}",
        err(0, 100)
    );
    assert_eq!(
        cads.run(|s| small.get(s, &int(10), &int(30)))
            .unwrap()
            .len(),
        3
    );
    let wrong = DendriteConfig {
        min: Some(text("a")),
        ..DendriteConfig::by_field("price", FieldKind::Int)
    };
    assert!(Dendrite::new(&cads, &coll, wrong).is_err());
    let by_int_id = DendriteConfig {
        kind: FieldKind::Int,
        ..DendriteConfig::by_id()
    };
    assert!(Dendrite::new(&cads, &coll, by_int_id).is_err());
    let dotted = DendriteConfig::by_field("price.amount", FieldKind::Int);
    let message = Dendrite::new(&cads, &coll, dotted)
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("is a path"), "{message}");
    let too_much = DendriteConfig {
        beta: 101,
        ..DendriteConfig::by_id()
    };
    let message = Dendrite::new(&cads, &coll, too_much)
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("between 0% and 100%"), "{message}");
    let aside = Deployment::start(Policy::CacheAside);
    let aside_cads = aside.cads(Config::default());
    let message = Dendrite::new(&aside_cads, &coll, DendriteConfig::by_id())
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("not cache-aside"), "{message}");
}

/// Under write-back a session's writes reach the data store after it commits, so it cannot
/// read a range it wrote into: refused, with nothing written.
#[test]
fn under_write_back_a_session_does_not_read_a_range_it_wrote() {
    for beta in [100, 0] {
        let d = Deployment::start(Policy::WriteBack);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        let refused = cads.run(|s| {
            items.insert(s, "mine", doc(json!({"price": 25})))?;
            items.get(s, &int(10), &int(29))
        });
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("before it commits"), "{message}");
        assert_eq!(ids(&get(&cads, &items, int(10), int(29))), ["i0", "i1"]);
        // A range elsewhere is read as usual in a session that wrote.
        let elsewhere = cads
            .run(|s| {
                items.insert(s, "mine", doc(json!({"price": 25})))?;
                items.get(s, &int(60), &int(70))
            })
            .unwrap();
        assert_eq!(ids(&elsewhere), ["i5", "i6"], "beta {beta}");
        assert_eq!(
            ids(&get(&cads, &items, int(10), int(29))),
            ["i0", "i1", "mine"]
        );
    }
}

/// Under write-back (no workers here) writes stay buffered in the cache; a get that misses
/// applies the buffered writes of the documents in its range before it queries the data store
/// (Fig. 3a), and only those.
#[test]
fn under_write_back_a_miss_applies_the_buffered_writes_of_its_range() {
    for beta in [100, 0] {
        let d = Deployment::start(Policy::WriteBack);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, beta);
        assert_eq!(
            d.store.count("items").unwrap(),
            0,
            "the inserts are buffered"
        );
        assert_eq!(items.stats().buffered_points, 10);
        assert_eq!(
            ids(&get(&cads, &items, int(20), int(40))),
            ["i1", "i2", "i3"],
            "beta {beta}"
        );
        assert_eq!(d.store.count("items").unwrap(), 3, "beta {beta}");
        assert_eq!(items.stats().buffered_points, 7, "beta {beta}");
        // Buffered again: an insert into the cached range, a document moved into it.
        cads.run(|s| items.insert(s, "new", doc(json!({"price": 33}))))
            .unwrap();
        cads.run(|s| items.update(s, "i9", changes(json!({"$set": {"price": 25}}))))
            .unwrap();
        let misses = items.stats().misses;
        assert_eq!(
            ids(&get(&cads, &items, int(20), int(40))),
            ["i1", "i9", "i2", "new", "i3"],
            "beta {beta}"
        );
        assert_eq!(items.stats().misses, misses, "beta {beta}: a hit");
        // A range not cached yet: its miss applies i9's and the new document's writes.
        assert_eq!(
            ids(&get(&cads, &items, int(24), int(34))),
            ["i9", "i2", "new"],
            "beta {beta}"
        );
        assert_eq!(d.store.count("items").unwrap(), 5, "beta {beta}");
        for (lo, hi) in [(0, 200), (20, 40), (24, 34)] {
            assert_eq!(
                get(&cads, &items, int(lo), int(hi)),
                stored(&d, &cads, "price", lo, hi),
                "beta {beta} [{lo}, {hi}]"
            );
        }
    }
}

/// The collection `items` of [`by_price`] as a second Dendrite sees it (β = 100%).
fn price_config(compact_bytes: usize) -> DendriteConfig {
    DendriteConfig {
        log_compact_bytes: compact_bytes,
        ..DendriteConfig::by_field("price", FieldKind::Int)
    }
}

/// A Dendrite that replaces one that is gone (002 §3.1) rebuilds PrInT from the log records:
/// the results the first one cached are hits for it, and its writes change them. Without the
/// logs it would either not find them (another generation) or, finding them, leave them stale.
#[test]
fn a_dendrite_that_takes_over_rebuilds_print_from_the_logs() {
    for policy in CACHING {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let first = by_price(&cads, 100);
        let ranges = [(10, 50), (30, 30), (40, 100), (60, 70)];
        for (lo, hi) in ranges {
            get(&cads, &first, int(lo), int(hi));
        }
        // i3 moves from 40 to 65: write-around deletes (10, 50), (40, 100) and (60, 70), whose
        // delete records may wait in a batch.
        cads.run(|s| first.update(s, "i3", changes(json!({"$set": {"price": 65}}))))
            .unwrap();
        let before = first.stats();
        assert!(before.log.appended > 0, "{policy:?}");
        let items = first.collection().clone();
        drop(first);
        let second = Dendrite::new(&cads, &items, price_config(256 * 1024)).unwrap();
        assert!(
            second.stats().cached_intervals >= before.cached_intervals,
            "{policy:?}: {:?} then {:?}",
            before,
            second.stats()
        );
        // (30, 30) is untouched by the write (write-through and write-back changed the others).
        d.faults.reset_counts();
        let hits: &[(i64, i64)] = match policy {
            Policy::WriteAround => &[(30, 30)],
            _ => &ranges,
        };
        for &(lo, hi) in hits {
            get(&cads, &second, int(lo), int(hi));
        }
        assert_eq!(
            d.faults.counts().reads,
            0,
            "{policy:?}: the first Dendrite's results are hits"
        );
        cads.run(|s| second.insert(s, "new", doc(json!({"price": 66}))))
            .unwrap();
        cads.run(|s| second.update(s, "i6", changes(json!({"$set": {"price": 30}}))))
            .unwrap();
        for (lo, hi) in ranges {
            assert_eq!(
                get(&cads, &second, int(lo), int(hi)),
                stored(&d, &cads, "price", lo, hi),
                "{policy:?} [{lo}, {hi}]"
            );
        }
    }
}

/// Logs that grow are compacted (an insert and a later delete of an interval cancel out), and
/// a Dendrite that takes over from compacted logs finds the same intervals.
#[test]
fn logs_are_compacted_and_still_rebuild_print() {
    let d = Deployment::start(Policy::WriteAround);
    let cads = d.cads(Config::default());
    let items = Collection::create_indexed(&cads, "items", &[("price", FieldKind::Int)]).unwrap();
    let config = DendriteConfig {
        log_alpha: 2,
        ..price_config(300)
    };
    let first = Dendrite::new(&cads, &items, config.clone()).unwrap();
    for i in 0..10 {
        cads.run(|s| first.insert(s, &format!("i{i}"), doc(json!({"price": i * 10}))))
            .unwrap();
    }
    // Each round caches the ranges, then a write deletes them: inserts and deletes pile up.
    for round in 0..20 {
        for lo in [0, 20, 40] {
            get(&cads, &first, int(lo), int(lo + 15));
        }
        cads.run(|s| first.update(s, "i2", changes(json!({"$set": {"n": round}}))))
            .unwrap();
    }
    get(&cads, &first, int(60), int(75));
    let stats = first.stats();
    assert!(stats.log.compactions > 0, "{stats:?}");
    assert!(
        stats.log.after_compaction < stats.log.before_compaction,
        "{stats:?}"
    );
    assert!(stats.log_bytes < stats.log.appended, "{stats:?}");
    drop(first);
    let second = Dendrite::new(&cads, &items, config).unwrap();
    // The last write deleted (20, 35); (0, 15), (40, 55) and (60, 75) are in PrInT, and maybe
    // (20, 35) if its delete record was still in a batch.
    let rebuilt = second.stats().cached_intervals;
    assert!((3..=4).contains(&rebuilt), "{rebuilt} intervals");
    cads.run(|s| second.update(s, "i6", changes(json!({"$set": {"price": 1}}))))
        .unwrap();
    for lo in [0, 20, 40, 60] {
        assert_eq!(
            get(&cads, &second, int(lo), int(lo + 15)),
            stored(&d, &cads, "price", lo, lo + 15),
            "[{lo}, {}]",
            lo + 15
        );
    }
}

/// Write-back: a Dendrite that takes over finds the writes still buffered in the cache. By id
/// they enter its BuWrInT (from write-back's PendingWrites lists), so a get that misses applies
/// those of its range; by field they are applied when it is made.
#[test]
fn a_dendrite_that_takes_over_under_write_back_finds_the_buffered_writes() {
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(Config::default());
    let users = Collection::create(&cads, "users").unwrap();
    let first = Dendrite::new(&cads, &users, DendriteConfig::by_id()).unwrap();
    for name in ["ann", "bob", "cat", "dan"] {
        cads.run(|s| first.insert(s, name, doc(json!({"visits": 0}))))
            .unwrap();
    }
    drop(first);
    assert_eq!(d.store.count("users").unwrap(), 0, "buffered");
    let second = Dendrite::new(&cads, &users, DendriteConfig::by_id()).unwrap();
    assert_eq!(second.stats().buffered_points, 4);
    assert_eq!(
        ids(&get(&cads, &second, text("b"), text("d"))),
        ["bob", "cat"]
    );
    assert_eq!(
        d.store.count("users").unwrap(),
        2,
        "the miss applied its range"
    );

    let items = by_price(&cads, 100);
    get(&cads, &items, int(10), int(30));
    let collection = items.collection().clone();
    drop(items);
    let by_field = Dendrite::new(&cads, &collection, price_config(256 * 1024)).unwrap();
    assert_eq!(
        d.store.count("items").unwrap(),
        10,
        "applied when it was made"
    );
    assert_eq!(
        get(&cads, &by_field, int(0), int(200)),
        stored(&d, &cads, "price", 0, 200)
    );
}

/// Write-back, β = 0%: a hit whose document entry is gone (evicted) reads the document from the
/// data store, after applying the buffered write the data store lacks.
#[test]
fn under_write_back_a_list_hit_applies_a_missing_documents_buffered_write() {
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(Config::default());
    let items = by_price(&cads, 0);
    get(&cads, &items, int(10), int(30));
    cads.run(|s| items.update(s, "i1", changes(json!({"$set": {"n": 77}}))))
        .unwrap();
    let key = items.collection().key("i1");
    cads.cache().unwrap().delete(&key).unwrap();
    let misses = items.stats().misses;
    let seen = get(&cads, &items, int(10), int(30));
    assert_eq!(items.stats().misses, misses, "the list is a hit");
    assert_eq!(seen[1].1["n"], json!(77));
    assert_eq!(
        get(&cads, &items, int(10), int(30)),
        stored(&d, &cads, "price", 10, 30)
    );
}

/// A β = 0% Dendrite logs nothing and discards the logs it finds: its writes do not keep
/// β = 100%'s results right, so a β = 100% Dendrite made after it must not take them over.
#[test]
fn a_beta_0_dendrite_discards_the_logs_of_results_it_will_not_keep() {
    for policy in CACHING {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let whole = by_price(&cads, 100);
        assert_eq!(
            ids(&get(&cads, &whole, int(10), int(50))),
            ["i0", "i1", "i2", "i3", "i4"]
        );
        let items = whole.collection().clone();
        drop(whole);
        let points = Dendrite::new(
            &cads,
            &items,
            DendriteConfig {
                beta: 0,
                ..price_config(256 * 1024)
            },
        )
        .unwrap();
        cads.run(|s| points.update(s, "i3", changes(json!({"$set": {"price": 65}}))))
            .unwrap();
        drop(points);
        let again = Dendrite::new(&cads, &items, price_config(256 * 1024)).unwrap();
        assert_eq!(again.stats().cached_intervals, 0, "{policy:?}");
        assert_eq!(
            get(&cads, &again, int(10), int(50)),
            stored(&d, &cads, "price", 10, 50),
            "{policy:?}"
        );
    }
}

/// Ranges owned by one process and used from another (002 §3): a `RemoteDendrite` forwards
/// gets and writes to the owner's `RangeService`, whose Dendrite keeps every range right; a
/// client without the service's token is refused.
#[test]
fn a_remote_dendrite_forwards_gets_and_writes_to_the_owner() {
    use cads::cpr::{RangeService, RemoteDendrite};
    use cads_store::DocOp;
    for policy in CACHING {
        let d = Deployment::start(policy);
        let cads = std::sync::Arc::new(d.cads(Config::default()));
        let owner = by_price(&cads, 100);
        let service =
            RangeService::start(cads.clone(), owner.clone(), "127.0.0.1:0".parse().unwrap())
                .unwrap();
        let remote = RemoteDendrite::new(service.addr(), service.token().to_string());
        assert_eq!(
            ids(&remote.read(&int(10), &int(50)).unwrap()),
            ["i0", "i1", "i2", "i3", "i4"]
        );
        remote
            .write("i3", DocOp::Update(changes(json!({"$set": {"price": 65}}))))
            .unwrap();
        remote
            .write("new", DocOp::Insert(doc(json!({"price": 12}))))
            .unwrap();
        // The owner's cached range took the remote writes.
        let misses = owner.stats().misses;
        let seen = remote.read(&int(10), &int(50)).unwrap();
        assert_eq!(ids(&seen), ["i0", "new", "i1", "i2", "i4"], "{policy:?}");
        if policy != Policy::WriteAround {
            assert_eq!(owner.stats().misses, misses, "{policy:?}: a hit");
        }
        assert_eq!(seen, stored(&d, &cads, "price", 10, 50), "{policy:?}");
        // A write the owner refuses comes back as its error.
        let refused = remote.write("new", DocOp::Insert(doc(json!({"price": 13}))));
        if policy != Policy::WriteBack {
            assert!(refused.is_err(), "{policy:?}: the id exists");
        }
        let wrong = RemoteDendrite::new(service.addr(), "guess".into());
        let message = wrong.read(&int(10), &int(50)).unwrap_err().to_string();
        assert!(message.contains("refused"), "{message}");
        // A connection that opens with a long line instead of its token is answered and closed
        // once the opening's bound is passed, without the owner reading the rest.
        let mut hostile = std::net::TcpStream::connect(service.addr()).unwrap();
        hostile
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        use std::io::{Read, Write};
        let _ = hostile.write_all(&[b'['; 4096]);
        let mut answer = String::new();
        // The answer, then the end of the stream; or, if the close found bytes unread, a reset.
        match hostile.read_to_string(&mut answer) {
            Ok(_) => assert!(answer.contains("no valid token"), "{answer:?}"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
        // The service still serves; once dropped, its open connections end with it.
        assert_eq!(remote.read(&int(10), &int(10)).unwrap().len(), 1);
        drop(service);
        assert!(remote.read(&int(10), &int(10)).is_err(), "{policy:?}");
    }
}

/// With no room left in the CMIs' pinned memory for log records, gets return their results
/// without caching them (002 §4.1: CPR stops caching results while pinned memory is full), and
/// writes go on.
#[test]
fn with_pinned_memory_full_results_are_not_cached() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start_with(policy, 2, |o| o.max_pinned_memory = Some("1".into()));
        let cads = d.cads(Config::default());
        let items = by_price(&cads, 100);
        for _ in 0..2 {
            assert_eq!(
                ids(&get(&cads, &items, int(10), int(30))),
                ["i0", "i1", "i2"],
                "{policy:?}"
            );
        }
        let stats = items.stats();
        assert_eq!((stats.gets, stats.misses), (2, 2), "{policy:?}");
        assert_eq!(stats.cached_intervals, 0, "{policy:?}");
        cads.run(|s| items.update(s, "i1", changes(json!({"$set": {"price": 99}}))))
            .unwrap();
        assert_eq!(
            get(&cads, &items, int(10), int(30)),
            stored(&d, &cads, "price", 10, 30),
            "{policy:?}"
        );
    }
}

/// 0% < β < 100%: a range is cached whole unless it would share more than β% of the smaller
/// result's documents with one cached whole, and then as a list of ids; writes keep both kinds
/// right, and both are hits.
#[test]
fn a_beta_between_caches_ranges_whole_or_as_lists() {
    for policy in CACHING {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let items = by_price(&cads, 50);
        // [10, 50] first: whole. [30, 70] shares 3 of its 5 documents with it (60% > 50%): a
        // list. [50, 60] shares 1 of 2 (50%, not more): whole.
        for (lo, hi) in [(10, 50), (30, 70), (50, 60)] {
            get(&cads, &items, int(lo), int(hi));
        }
        let stats = items.stats();
        assert_eq!(
            (stats.cached_intervals, stats.cached_lists),
            (3, 1),
            "{policy:?}"
        );
        for (lo, hi) in [(10, 50), (30, 70), (50, 60)] {
            get(&cads, &items, int(lo), int(hi));
        }
        assert_eq!(items.stats().misses, stats.misses, "{policy:?}: hits");
        cads.run(|s| items.update(s, "i3", changes(json!({"$set": {"price": 55}}))))
            .unwrap();
        cads.run(|s| items.insert(s, "new", doc(json!({"price": 35}))))
            .unwrap();
        for (lo, hi) in [(10, 50), (30, 70), (50, 60)] {
            assert_eq!(
                get(&cads, &items, int(lo), int(hi)),
                stored(&d, &cads, "price", lo, hi),
                "{policy:?} [{lo}, {hi}]"
            );
        }
        assert_eq!(
            items.stats().cached_lists,
            1,
            "{policy:?}: a range keeps its kind"
        );
    }
}
