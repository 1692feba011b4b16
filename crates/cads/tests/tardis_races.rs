//! TARDIS's races, made to happen with failpoints: a write between an AR worker's apply and its
//! removal of the document from TeleW (Step 6 of 000 Algorithm 6), and AR workers that die at
//! every step of an apply while documents take non-idempotent changes (000 §4.5).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cads::documents::Collection;
use cads::tardis::{AppNodes, Recovery};
use cads::writeback;
use cads::{Cads, Config, Error, Mode, Policy, TardisConfig, Technique};
use cads_store::{Changes, FaultMode};
use cads_testkit::failpoints::{DyingWorkers, Scenario, CACHE_COMMIT, UNLIST};
use common::tardis::wait_for;
use common::{doc, marked, Deployment};
use serde_json::json;

fn config(technique: Technique, ar_workers: usize) -> Config {
    Config {
        tardis: Some(TardisConfig {
            technique,
            ar_workers,
            alpha: 4,
            telew: 4,
            recover_after: 1,
            appnodes: AppNodes::One,
        }),
        ..Config::default()
    }
}

fn push(entry: &str) -> Changes {
    Changes::from_json(&json!({"$inc": {"n": 1}, "$push": {"log": entry}})).unwrap()
}

/// Documents stored around the cache, and an AppNode in failed mode.
fn outage(d: &Deployment, cads: &Cads, ids: &[&str]) -> Collection {
    let docs = Collection::create(cads, "docs").unwrap();
    for id in ids {
        d.store
            .put("docs", id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
    }
    d.faults.set(FaultMode::FailAll);
    cads.run(|s| docs.update(s, ids[0], push("lost")))
        .unwrap_err();
    assert_eq!(cads.mode(), Some(Mode::Failed));
    docs
}

/// Step 6 of Algorithm 6: between an AR worker's apply of a document and its removal from the
/// TeleW key, a write (TAR keeps teleporting in recovery mode) gives the document a new buffered
/// write. The document must stay listed: dropped, its new buffered write would be found by no
/// AR worker, the AppNode would return to normal mode with it pending, and the data store would
/// never get the write.
#[test]
fn a_write_between_apply_and_unlist_keeps_the_document_listed() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteThrough, 2, |_| {});
    let cads = Arc::new(d.cads(config(Technique::Tar, 1)));
    let recovery = Recovery::start(cads.clone()).unwrap();
    let docs = outage(&d, &cads, &["a"]);
    cads.run(|s| docs.update(s, "a", push("failed"))).unwrap();
    let raced = Arc::new(AtomicBool::new(false));
    {
        let (cads, docs, raced) = (cads.clone(), docs.clone(), raced.clone());
        scenario.on(UNLIST, move || {
            if !raced.swap(true, Ordering::SeqCst) {
                cads.run(|s| docs.update(s, "a", push("raced"))).unwrap();
            }
        });
    }
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    assert!(raced.load(Ordering::SeqCst), "the race happened");
    let stored = d.store.get("docs", "a").unwrap().unwrap();
    assert_eq!(stored["log"], json!(["failed", "raced"]));
    assert_eq!(stored["n"], json!(2));
    assert_eq!(cads.dirty_documents().unwrap(), 0);
}

/// AR workers and the monitor's probes die at random steps of their applies (their leases
/// expire, they carry on) while writers teleport `$inc` and `$push` changes: once the AppNode is
/// back in normal mode, every change is in the data store exactly once.
#[test]
fn non_idempotent_changes_land_exactly_once_despite_dying_ar_workers() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteThrough, 3, |o| o.lease_ms = Some(150));
    let dying = DyingWorkers::start(&scenario, 0x2545_F491_4F6C_DD1D, 4, u64::MAX);
    let cads = Arc::new(d.cads(config(Technique::Tar, 2)));
    let ids = ["a", "b", "c"];
    let recovery = Recovery::start(cads.clone()).unwrap();
    let docs = outage(&d, &cads, &ids);
    let (threads, each) = (3, 20);
    let write_all = |phase: &str| {
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (cads, docs) = (&cads, &docs);
                scope.spawn(move || {
                    for i in 0..each {
                        let id = ids[(t + i) % ids.len()];
                        let entry = format!("{phase}-{t}-{i}");
                        cads.run(|s| docs.update(s, id, push(&entry))).unwrap();
                    }
                });
            }
        });
    };
    write_all("failed");
    d.faults.set(FaultMode::Healthy);
    // TAR keeps teleporting during recovery: these race the dying AR workers.
    write_all("recovery");
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    scenario.clear_apply_steps();
    let mut entries = Vec::new();
    for id in ids {
        let stored = d.store.get("docs", id).unwrap().unwrap();
        let log = stored["log"].as_array().unwrap();
        assert_eq!(stored["n"].as_u64().unwrap() as usize, log.len(), "{id}");
        entries.extend(log.iter().map(|e| e.as_str().unwrap().to_string()));
    }
    entries.sort();
    let all = entries.len();
    entries.dedup();
    assert_eq!(entries.len(), all, "no $push applied twice");
    assert_eq!(all, 2 * threads * each, "no change lost");
    assert!(dying.deaths() > 0, "appliers did die");
}

/// A teleported write whose cache commit reaches one CMI and not the other (Contextual commits
/// the CMIs of marked keys first, and both hold one): the CMI that took it shows its buffered
/// writes, while the other dropped the session with its markers and new values. Unsettled, a
/// miss there at another AppNode would find no marker, fill the value the data store had before
/// the buffered writes are applied, and keep it after. The writing AppNode settles it (its keys
/// deleted and marked again), so that the other AppNode's miss applies the buffered writes first;
/// and that AppNode, reading a marked key in a transaction whose snapshot is fixed (SQLite's),
/// runs the session again after applying them rather than reading from a snapshot that may lack
/// them. Once every buffered write is applied, cache and data store agree.
#[test]
fn a_teleported_write_committed_on_some_cmis_only_leaves_no_stale_fill() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteThrough, 2, |o| {
        o.mode = Some("write-through".into())
    });
    let mut config = config(Technique::Tardis, 0);
    config.tardis.as_mut().unwrap().appnodes = AppNodes::Contextual;
    let a = Arc::new(d.cads(config.clone()));
    let b = d.cads(config);
    let client = a.cache().unwrap();
    let docs = Collection::create(&a, "docs").unwrap();
    // Two documents whose keys live on different CMIs.
    let first = "x0".to_string();
    let second = (1..)
        .map(|i| format!("x{i}"))
        .find(|id| client.route(&docs.key(id)) != client.route(&docs.key(&first)))
        .unwrap();
    for id in [&first, &second] {
        d.store
            .put("docs", id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
        docs.read(&b, id).unwrap().unwrap();
    }
    // Started (loading what buffering needs) and stopped: A stays failed until later.
    drop(Recovery::start(a.clone()).unwrap());
    d.faults.set(FaultMode::FailAll);
    a.run(|s| docs.update(s, &first, push("lost"))).unwrap_err();
    assert_eq!(a.mode(), Some(Mode::Failed));

    let dropped_at = client.route(&docs.key(&second));
    let flushed = Arc::new(AtomicBool::new(false));
    {
        let (a, flushed) = (a.clone(), flushed.clone());
        scenario.on(CACHE_COMMIT, move || {
            if !flushed.swap(true, Ordering::SeqCst) {
                let flush = cads_protocol::Command::FlushAll(cads_protocol::FlushScope::Unpinned);
                a.cache().unwrap().execute(dropped_at, &flush).unwrap();
            }
        });
    }
    let err = a
        .run(|s| {
            docs.update(s, &first, push("both"))?;
            docs.update(s, &second, push("both"))
        })
        .unwrap_err();
    assert!(flushed.load(Ordering::SeqCst));
    assert!(matches!(err, Error::Cache(_)), "a partial commit: {err}");
    scenario.clear(CACHE_COMMIT);
    d.faults.set(FaultMode::Healthy);
    for id in [&first, &second] {
        assert!(marked(&b, &docs.key(id)), "{id}: marked again");
    }

    // B misses on the key whose CMI dropped the session: it applies A's buffered writes first.
    let read = docs.read(&b, &second).unwrap().unwrap();
    assert_eq!(read["log"], json!(["both"]));
    assert!(!marked(&b, &docs.key(&second)));
    // B reads the other marked key after beginning its SQL transaction.
    let mut runs = 0;
    let read = b
        .run(|s| {
            runs += 1;
            s.tx().sql()?;
            docs.get(s, &first)
        })
        .unwrap()
        .unwrap();
    assert_eq!(read["log"], json!(["both"]));
    assert_eq!(runs, 2, "the first run gave up its snapshot");
    assert!(!marked(&b, &docs.key(&first)));

    let recovery = Recovery::start(a.clone()).unwrap();
    wait_for(&a, Mode::Normal);
    drop(recovery);
    for id in [&first, &second] {
        let stored = d.store.get("docs", id).unwrap().unwrap();
        assert_eq!(stored["log"], json!(["both"]), "{id}: applied once");
        assert_eq!(docs.read(&b, id).unwrap().unwrap(), stored, "{id}");
    }
}

/// A teleported write whose cache commit reached the CMI of its document (the marked one, which
/// commits first) but not the two that hold the TeleW key listing its new buffered write: the
/// buffered write is visible on CMI 0 while no TeleW key lists it. The AppNode lists it again
/// (`tardis::LostTeleport`), so recovery does not end before an AR worker has applied it.
#[test]
fn a_teleported_write_whose_listing_missed_its_commit_is_listed_again() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteThrough, 3, |o| {
        o.mode = Some("write-through".into())
    });
    let mut config = config(Technique::Tardis, 1);
    config.write_back.replicas = 2;
    // A document on CMI 0 whose buffered write has a replica there, listed in a TeleW key kept on
    // CMIs 1 and 2 only. Placement follows the CMIs' addresses, new each run: with up to 8 TeleW
    // keys, about one run in 25 had none kept on CMIs 1 and 2; with up to 64, practically none.
    let probe = d.cads(config.clone());
    let client = probe.cache().unwrap();
    let named = Collection::named("docs").unwrap();
    let (id, telew) = (1..=64)
        .flat_map(|telew| (0..64).map(move |i| (format!("x{i}"), telew)))
        .find(|(id, telew)| {
            let bw = writeback::bw_key(&named.doc_ref(id));
            let partition = cads_client::stable_hash(&bw) % *telew as u64;
            let mut listing = client.replicas(format!("PW:{partition}").as_bytes(), 2);
            listing.sort();
            client.route(&named.key(id)) == 0
                && client.replicas(&bw, 2).contains(&0)
                && listing == [1, 2]
        })
        .expect("a document placed so");
    config.tardis.as_mut().unwrap().telew = telew;
    let cads = Arc::new(d.cads(config));
    // Started (loading the key of buffered writes) and stopped: the AppNode stays failed.
    drop(Recovery::start(cads.clone()).unwrap());
    let docs = outage(&d, &cads, &["lost", &id]);
    {
        let cads = cads.clone();
        let flushed = AtomicBool::new(false);
        scenario.on(CACHE_COMMIT, move || {
            if !flushed.swap(true, Ordering::SeqCst) {
                let flush = cads_protocol::Command::FlushAll(cads_protocol::FlushScope::Unpinned);
                for cmi in [1, 2] {
                    cads.cache().unwrap().execute(cmi, &flush).unwrap();
                }
            }
        });
    }
    let err = cads.run(|s| docs.update(s, &id, push("w"))).unwrap_err();
    assert!(matches!(err, Error::Cache(_)), "a partial commit: {err}");
    scenario.clear(CACHE_COMMIT);
    d.faults.set(FaultMode::Healthy);
    let recovery = Recovery::start(cads.clone()).unwrap();
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    let stored = d.store.get("docs", &id).unwrap().unwrap();
    assert_eq!(
        stored["log"],
        json!(["w"]),
        "recovery ended with it unapplied"
    );
}
