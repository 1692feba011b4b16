//! Write-back, Design 1: read-after-write on misses while writes are buffered, exactly-once
//! application with workers dying mid-apply, the pinned-memory fallback, and a clean drain.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, ApplyStep, Buffering, CrashHook};
use cads::{Cads, Config, Policy, Workers, WriteBackConfig};
use cads_store::{Changes, Document};
use common::{Deployment, Stall};
use serde_json::json;

fn doc(v: serde_json::Value) -> Document {
    v.as_object().unwrap().clone()
}

fn changes(v: serde_json::Value) -> Changes {
    Changes::from_json(&v).unwrap()
}

fn config(buffering: Buffering, crash: Option<CrashHook>) -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            partitions: 8,
            buffering,
            crash,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

#[test]
fn a_miss_applies_the_buffered_writes_it_depends_on() {
    for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
        let d = Deployment::start(Policy::WriteBack);
        let cads = d.cads(config(buffering, None));
        let users = Collection::create(&cads, "users").unwrap();
        d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
        for _ in 0..5 {
            cads.run(|s| users.update(s, "u1", changes(json!({"$inc": {"n": 1}}))))
                .unwrap();
        }
        assert_eq!(
            d.store.get("users", "u1").unwrap().unwrap()["n"],
            json!(0),
            "not applied yet"
        );
        assert_eq!(cads.write_back_stats().snapshot().buffered, 5);
        // The cached entry goes away (deleted, or evicted): the next read must still see n = 5.
        cads.cache().unwrap().delete(&users.key("u1")).unwrap();
        let read = cads.run(|s| users.get(s, "u1")).unwrap().unwrap();
        assert_eq!(
            read["n"],
            json!(5),
            "{buffering:?}: read after write on a miss"
        );
        assert_eq!(d.store.get("users", "u1").unwrap().unwrap()["n"], json!(5));
        assert!(
            writeback::pending(&cads).unwrap().is_empty(),
            "applied and unlisted"
        );
        // A document never cached, written and read back.
        cads.run(|s| users.put(s, "u2", doc(json!({"tags": []}))))
            .unwrap();
        cads.run(|s| users.update(s, "u2", changes(json!({"$push": {"tags": "a"}}))))
            .unwrap();
        cads.cache().unwrap().delete(&users.key("u2")).unwrap();
        assert_eq!(
            cads.run(|s| users.get(s, "u2")).unwrap().unwrap()["tags"],
            json!(["a"])
        );
    }
}

#[test]
fn workers_apply_everything_and_drain_cleans_up() {
    let d = Deployment::start(Policy::WriteBack);
    let cads = Arc::new(d.cads(config(Buffering::ReadModifyWrite, None)));
    let items = Collection::create(&cads, "items").unwrap();
    for i in 0..20 {
        cads.run(|s| items.put(s, &format!("i{i}"), doc(json!({"v": i}))))
            .unwrap();
    }
    let workers = Workers::start(cads.clone(), 2);
    workers.drain(Duration::from_secs(20)).unwrap();
    workers.stop();
    for i in 0..20 {
        assert_eq!(
            d.store.get("items", &format!("i{i}")).unwrap().unwrap()["v"],
            json!(i)
        );
    }
    let stats = cads.write_back_stats().snapshot();
    assert_eq!(stats.buffered, 20);
    assert_eq!(stats.applied_share(), 1.0);
    assert!(writeback::pending(&cads).unwrap().is_empty());
    assert_eq!(
        cads.pinned_bytes(),
        0,
        "buffered writes and PendingWrites are all gone"
    );
}

/// Counters changed only with `$inc` and lists only with `$push` by concurrent sessions, while
/// workers die at random points of Algorithm 2 and carry on: once everything drains, every sum is
/// exact and every list holds each pushed element once.
#[test]
fn non_idempotent_writes_are_applied_exactly_once_despite_dying_workers() {
    for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
        let d = Deployment::start_with(Policy::WriteBack, 3, |o| o.lease_ms = Some(150));
        let writers = d.cads(config(buffering, None));
        let rolls = Arc::new(AtomicU64::new(0x2545_F491_4F6C_DD1D));
        let crashes = Arc::new(AtomicU64::new(0));
        let (r, c) = (rolls.clone(), crashes.clone());
        let hook = CrashHook(Arc::new(move |step: ApplyStep| {
            let mut x = r.load(Ordering::Relaxed);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r.store(x, Ordering::Relaxed);
            let die = x % 5 == 0;
            if die {
                c.fetch_add(1, Ordering::Relaxed);
                let _ = step;
            }
            die
        }));
        let dying = Arc::new(d.cads(config(buffering, Some(hook))));
        let docs = Collection::create(&writers, "tallies").unwrap();
        let ids = ["a", "b", "c"];
        for id in ids {
            d.store
                .put("tallies", id, &doc(json!({"n": 0, "log": []})))
                .unwrap();
        }
        let workers = Workers::start(dying.clone(), 2);
        let (threads, each) = (4, 25);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (writers, docs) = (&writers, &docs);
                scope.spawn(move || {
                    for i in 0..each {
                        let id = ids[(t + i) % ids.len()];
                        let entry = format!("{t}-{i}");
                        writers
                            .run(|s| {
                                docs.update(
                                    s,
                                    id,
                                    changes(
                                        json!({"$inc": {"n": 1}, "$push": {"log": entry.clone()}}),
                                    ),
                                )
                            })
                            .unwrap();
                    }
                });
            }
        });
        // Drain with a process whose workers do not die.
        workers.stop();
        cads::writeback::Workers::start(Arc::new(d.cads(config(buffering, None))), 1)
            .drain(Duration::from_secs(60))
            .unwrap();
        let mut total = 0;
        let mut entries = Vec::new();
        for id in ids {
            let stored = d.store.get("tallies", id).unwrap().unwrap();
            total += stored["n"].as_i64().unwrap();
            for e in stored["log"].as_array().unwrap() {
                entries.push(e.as_str().unwrap().to_string());
            }
            assert_eq!(
                stored["n"].as_i64().unwrap() as usize,
                stored["log"].as_array().unwrap().len(),
                "{buffering:?}: {id} got as many increments as pushes"
            );
        }
        assert_eq!(
            total,
            (threads * each) as i64,
            "{buffering:?}: every $inc exactly once"
        );
        entries.sort();
        let before = entries.len();
        entries.dedup();
        assert_eq!(
            entries.len(),
            before,
            "{buffering:?}: no $push applied twice"
        );
        assert_eq!(
            entries.len(),
            threads * each,
            "{buffering:?}: no $push lost"
        );
        assert!(crashes.load(Ordering::Relaxed) > 0, "workers did die");
        // The cache agrees with the store.
        for id in ids {
            let cached = writers.run(|s| docs.get(s, id)).unwrap().unwrap();
            assert_eq!(cached, d.store.get("tallies", id).unwrap().unwrap());
        }
    }
}

#[test]
fn full_pinned_memory_falls_back_to_write_through_and_loses_nothing() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.max_pinned_memory = Some("2kb".into());
    });
    let cads: Cads = d.cads(config(Buffering::ReadModifyWrite, None));
    let notes = Collection::create(&cads, "notes").unwrap();
    let body = "x".repeat(300);
    for i in 0..40 {
        cads.run(|s| notes.put(s, &format!("n{i}"), doc(json!({"body": body, "i": i}))))
            .unwrap();
    }
    let stats = cads.write_back_stats().snapshot();
    assert!(stats.fallbacks > 0, "the cap was reached: {stats:?}");
    assert!(stats.buffered > 0, "some writes were buffered: {stats:?}");
    Workers::start(
        Arc::new(d.cads(config(Buffering::ReadModifyWrite, None))),
        1,
    )
    .drain(Duration::from_secs(30))
    .unwrap();
    for i in 0..40 {
        let stored = d.store.get("notes", &format!("n{i}")).unwrap().unwrap();
        assert_eq!(stored["i"], json!(i));
    }
}

/// A worker that stalls past its leases between reading a buffered write and writing it to the
/// data store (a descheduled thread, a data store slow to answer) must not land it after a newer
/// buffered write of the document that another applier took over and applied meanwhile: that
/// would undo an acknowledged write in the data store.
#[test]
fn a_worker_stalled_past_its_leases_does_not_undo_a_later_write() {
    const LEASE_MS: u64 = 100;
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| o.lease_ms = Some(LEASE_MS));
    let stall = Stall::default();
    let hook = stall.hook(ApplyStep::Leased);
    let cads = d.cads(config(Buffering::ReadModifyWrite, Some(hook)));
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    let set = |n: i64| {
        cads.run(|s| users.update(s, "u1", changes(json!({"$set": {"n": n}}))))
            .unwrap()
    };
    let stored = || d.store.get("users", "u1").unwrap().unwrap()["n"].clone();
    set(1);
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| writeback::apply_buffered(&cads, &users.doc_ref("u1")));
        // The worker holds the buffered write (n = 1) and stalls; its leases run out.
        stall.wait_stalled();
        std::thread::sleep(Duration::from_millis(3 * LEASE_MS));
        set(2);
        assert!(writeback::apply_buffered(&cads, &users.doc_ref("u1")).unwrap());
        assert_eq!(stored(), json!(2));
        stall.release();
        let late = stalled.join().unwrap();
        assert!(
            !matches!(late, Ok(true)),
            "the stalled worker applied: {late:?}"
        );
    });
    assert_eq!(
        stored(),
        json!(2),
        "the stalled worker's older write landed last"
    );
    writeback::drain(&cads, Duration::from_secs(5)).unwrap();
    assert_eq!(stored(), json!(2));
    assert_eq!(users.read(&cads, "u1").unwrap().unwrap()["n"], json!(2));
}
