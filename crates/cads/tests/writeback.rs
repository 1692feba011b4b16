//! Write-back, Design 1: read-after-write on misses while writes are buffered, the pinned-memory
//! fallback, and a clean drain. Appliers that die or stall are in `dying_appliers.rs`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, Buffering};
use cads::{Cads, Error, Policy, Workers};
use cads_testkit::failpoints::{Scenario, CACHE_COMMIT};
use common::{changes, doc, documents_config, Deployment};
use serde_json::json;

#[test]
fn a_miss_applies_the_buffered_writes_it_depends_on() {
    for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
        let d = Deployment::start(Policy::WriteBack);
        let cads = d.cads(documents_config(buffering));
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
    let cads = Arc::new(d.cads(documents_config(Buffering::ReadModifyWrite)));
    let items = Collection::create(&cads, "items").unwrap();
    for i in 0..20 {
        cads.run(|s| items.put(s, &format!("i{i}"), doc(json!({"v": i}))))
            .unwrap();
    }
    assert_eq!(cads.dirty_documents().unwrap(), 20, "each listed once");
    let workers = Workers::start(cads.clone(), 2);
    assert_eq!(workers.count(), 2);
    workers.drain(Duration::from_secs(20)).unwrap();
    workers.stop();
    assert_eq!(Workers::start(cads.clone(), 0).count(), 1, "at least one");
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

/// With a single PendingWrites partition (0), every buffered write is listed there and applied.
#[test]
fn one_pending_writes_partition_holds_every_buffered_write() {
    let d = Deployment::start(Policy::WriteBack);
    let mut config = documents_config(Buffering::ReadModifyWrite);
    config.write_back.partitions = 1;
    let cads = d.cads(config);
    let items = Collection::create(&cads, "items").unwrap();
    for i in 0..5 {
        cads.run(|s| items.put(s, &format!("i{i}"), doc(json!({"v": i}))))
            .unwrap();
    }
    assert_eq!(cads.dirty_documents().unwrap(), 5);
    writeback::drain(&cads, Duration::from_secs(20)).unwrap();
    for i in 0..5 {
        assert_eq!(
            d.store.get("items", &format!("i{i}")).unwrap().unwrap()["v"],
            json!(i)
        );
    }
    assert_eq!(cads.pinned_bytes(), 0);
}

#[test]
fn full_pinned_memory_falls_back_to_write_through_and_loses_nothing() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.max_pinned_memory = Some("2kb".into());
    });
    let cads: Cads = d.cads(documents_config(Buffering::ReadModifyWrite));
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
        Arc::new(d.cads(documents_config(Buffering::ReadModifyWrite))),
        1,
    )
    .drain(Duration::from_secs(30))
    .unwrap();
    for i in 0..40 {
        let stored = d.store.get("notes", &format!("n{i}")).unwrap().unwrap();
        assert_eq!(stored["i"], json!(i));
    }
}

/// Write-back takes writes while the data store is down by design (000 §4.2); a miss that would
/// have to apply buffered writes, or query, is refused with the error TARDIS gives, and nothing
/// is lost once the data store is back.
#[test]
fn an_outage_refuses_misses_and_loses_no_write() {
    let d = Deployment::start(Policy::WriteBack);
    let cads = Arc::new(d.cads(documents_config(Buffering::ReadModifyWrite)));
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    d.store.put("users", "u2", &doc(json!({"n": 0}))).unwrap();
    // A buffered write needs the MAC key, which comes from the data store.
    cads.run(|s| users.update(s, "u2", changes(json!({"$inc": {"n": 1}}))))
        .unwrap();
    d.faults.set(cads_store::FaultMode::FailAll);
    let workers = Workers::start(cads.clone(), 1);
    for _ in 0..3 {
        cads.run(|s| users.update(s, "u1", changes(json!({"$inc": {"n": 1}}))))
            .unwrap();
    }
    cads.cache().unwrap().delete(&users.key("u1")).unwrap();
    cads.cache().unwrap().delete(&users.key("u2")).unwrap();
    for id in ["u1", "u2"] {
        let err = users.read(&cads, id).unwrap_err();
        assert!(
            matches!(err, cads::Error::StoreUnavailable { .. }),
            "{id}: {err}"
        );
    }
    d.faults.set(cads_store::FaultMode::Healthy);
    workers.drain(Duration::from_secs(30)).unwrap();
    workers.stop();
    assert_eq!(d.store.get("users", "u1").unwrap().unwrap()["n"], json!(3));
    assert_eq!(users.read(&cads, "u2").unwrap().unwrap()["n"], json!(1));
}

/// A process's first write-back session that writes to the data store before reading anything
/// (a write no document operation expresses) loads the MAC key in a transaction of its own
/// first: on SQLite, loading it inside would wait for the session's own writer and fail.
#[test]
fn a_first_session_writing_straight_to_the_store_commits() {
    let d = Deployment::start(Policy::WriteBack);
    let names = d.counters(1);
    let cads = d.cads(cads::Config::default());
    cads.run(|s| s.write(&common::Counters, &names[0])).unwrap();
    assert_eq!(d.stored(&names[0]), 1);
}

/// A write-back write is acknowledged by its cache commit: one that fails (here the session's
/// leases run out between pre-commit and commit, taking its staged buffered write with them)
/// returns the error, and nothing of the write is ever applied.
#[test]
fn a_buffered_write_whose_cache_commit_fails_is_not_acknowledged() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.lease_ms = Some(common::LONG_LEASE_MS)
    });
    let cads = d.cads(documents_config(Buffering::ReadModifyWrite));
    let users = Collection::create(&cads, "users").unwrap();
    cads.run(|s| users.insert(s, "alice", doc(json!({"n": 0}))))
        .unwrap();
    let mut session = cads.session();
    users
        .update(&mut session, "alice", changes(json!({"$inc": {"n": 1}})))
        .unwrap();
    session.pre_commit().unwrap();
    d.cmis.advance_clock(common::PAST_A_LONG_LEASE);
    let outcome = session.commit();
    assert!(outcome.is_err(), "acknowledged: {outcome:?}");
    writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    assert_eq!(
        d.store.get("users", "alice").unwrap().unwrap()["n"],
        json!(0)
    );
    assert_eq!(users.read(&cads, "alice").unwrap().unwrap()["n"], json!(0));
}

/// A session that falls back to write-through (pinned memory full) writes a document whose
/// earlier write is still buffered: that write reaches the data store first, then the session's.
#[test]
fn a_fallback_session_applies_its_documents_buffered_writes_first() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.max_pinned_memory = Some("2kb".into());
    });
    let cads: Cads = d.cads(documents_config(Buffering::ReadModifyWrite));
    let notes = Collection::create(&cads, "notes").unwrap();
    cads.run(|s| notes.put(s, "first", doc(json!({"log": []}))))
        .unwrap();
    let push = |entry: &str| changes(json!({"$push": {"log": entry}}));
    cads.run(|s| notes.update(s, "first", push("buffered")))
        .unwrap();
    let body = "x".repeat(300);
    let mut others = 0;
    while cads.write_back_stats().snapshot().fallbacks == 0 {
        cads.run(|s| notes.put(s, &format!("other{others}"), doc(json!({"body": body}))))
            .unwrap();
        others += 1;
        assert!(others < 1000, "pinned memory never filled");
    }
    assert_eq!(
        d.store.get("notes", "first").unwrap(),
        None,
        "still buffered"
    );
    // Too large to buffer now.
    let through = "y".repeat(1000);
    cads.run(|s| notes.update(s, "first", push(&through)))
        .unwrap();
    assert_eq!(cads.write_back_stats().snapshot().fallbacks, 2);
    assert_eq!(
        d.store.get("notes", "first").unwrap().unwrap()["log"],
        json!(["buffered", through])
    );
}

/// Where a document's parts live among three CMIs: its cached value, the replicas of its
/// buffered write, the replicas of the PendingWrites partition that lists it.
struct Placement {
    value: usize,
    buffered: Vec<usize>,
    listing: Vec<usize>,
}

/// A write-back update of a document placed as `wanted` asks, whose cache commit CMIs 1 and 2
/// miss (flushed when it starts) while CMI 0 takes it: refused, its outcome unknown. Returns
/// the deployment, the AppNode, the collection and the document's id.
fn update_missed_by_cmis_1_and_2(
    wanted: impl Fn(&Placement) -> bool,
) -> (Deployment, Cads, Collection, String) {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteBack, 3, |_| {});
    let mut config = documents_config(Buffering::Append);
    // The CMIs' ports, hence the partitions' places, change from run to run: with 8 partitions
    // none was on the two CMIs a test wants in 3 runs of 30, with 64 almost never.
    config.write_back.partitions = 64;
    let partitions = config.write_back.partitions as u64;
    let cads = d.cads(config);
    let client = cads.cache().unwrap();
    let notes = Collection::create(&cads, "notes").unwrap();
    let sorted = |mut cmis: Vec<usize>| {
        cmis.sort();
        cmis
    };
    let id = (0..256)
        .map(|i| format!("n{i}"))
        .find(|id| {
            let bw = writeback::bw_key(&notes.doc_ref(id));
            let partition = cads_client::stable_hash(&bw) % partitions;
            wanted(&Placement {
                value: client.route(&notes.key(id)),
                buffered: sorted(client.replicas(&bw, 2)),
                listing: sorted(client.replicas(format!("PW:{partition}").as_bytes(), 2)),
            })
        })
        .expect("a document placed so");
    // Stored around the cache, so that the update below starts the document's buffered write,
    // and read, so that it changes the cached value too.
    d.store
        .insert("notes", &id, &doc(json!({"log": []})))
        .unwrap();
    notes.read(&cads, &id).unwrap().unwrap();
    // Only this test's session: the other tests of this file commit beside it.
    let writer = std::thread::current().id();
    let flushed = AtomicBool::new(false);
    let flusher = d.cads(documents_config(Buffering::Append));
    scenario.on(CACHE_COMMIT, move || {
        if std::thread::current().id() == writer && !flushed.swap(true, Ordering::SeqCst) {
            let flush = cads_protocol::Command::FlushAll(cads_protocol::FlushScope::Unpinned);
            for cmi in [1, 2] {
                flusher.cache().unwrap().execute(cmi, &flush).unwrap();
            }
        }
    });
    let push = changes(json!({"$push": {"log": "w"}}));
    let err = cads
        .run(|s| notes.update(s, &id, push.clone()))
        .unwrap_err();
    assert!(matches!(err, Error::Cache(_)), "a partial commit: {err}");
    scenario.clear(CACHE_COMMIT);
    (d, cads, notes, id)
}

/// The commit reached the document's CMI and a replica of its buffered write (CMI 0), but not
/// the two CMIs of the partition that lists it: the buffered write was visible while no
/// partition listed it, and no worker would ever apply it. Its document is listed again, so the
/// drain applies it.
#[test]
fn a_buffered_write_whose_listing_missed_its_commit_is_listed_again() {
    let (d, cads, notes, id) = update_missed_by_cmis_1_and_2(|p| {
        p.value == 0 && p.buffered.contains(&0) && p.listing == [1, 2]
    });
    assert_eq!(cads.dirty_documents().unwrap(), 1, "listed again");
    writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    let stored = d.store.get("notes", &id).unwrap().unwrap();
    assert_eq!(stored["log"], json!(["w"]), "visible, so applied");
    assert_eq!(notes.read(&cads, &id).unwrap().unwrap(), stored);
}

/// The commit reached the document's cached value (CMI 0) but neither replica of its buffered
/// write: the new value was visible with nothing to apply. The value is deleted after the
/// failed commit, so reads go back to the data store's, and stay there.
#[test]
fn a_cached_value_whose_buffered_write_missed_its_commit_is_deleted() {
    let (d, cads, notes, id) =
        update_missed_by_cmis_1_and_2(|p| p.value == 0 && p.buffered == [1, 2]);
    let stored = d.store.get("notes", &id).unwrap().unwrap();
    assert_eq!(stored["log"], json!([]));
    assert_eq!(
        notes.read(&cads, &id).unwrap().unwrap(),
        stored,
        "not the refused write"
    );
    writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    assert_eq!(notes.read(&cads, &id).unwrap().unwrap(), stored);
    assert_eq!(d.store.get("notes", &id).unwrap().unwrap(), stored);
}
