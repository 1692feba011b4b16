//! TARDIS (000 ch. 4) over a data store that fails and comes back (the fault-injecting wrapper):
//! writes acknowledged while it is down land in it exactly once, no read returns a stale value, a
//! miss that could be stale is refused, and the AppNode returns to normal mode. The four
//! techniques differ as 000 Table 4.3 says.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::tardis::{AppNodes, Recovery};
use cads::{Cads, Config, Error, Mode, Policy, TardisConfig, Technique};
use cads_store::{Document, FaultMode};
use common::tardis::{deployment, inc, wait_for};
use common::{marked, on_cmi, Deployment};
use serde_json::json;

fn doc(v: serde_json::Value) -> Document {
    v.as_object().unwrap().clone()
}

fn config(technique: Technique, ar_workers: usize) -> Config {
    Config {
        tardis: Some(TardisConfig {
            technique,
            ar_workers,
            alpha: 4,
            telew: 8,
            recover_after: 2,
            appnodes: AppNodes::One,
        }),
        ..Config::default()
    }
}

/// Documents `d0..d<n>` with `n: 0` and an empty log, stored around the cache, the first
/// `cached` of them read once so that the cache holds them.
fn documents(cads: &Cads, n: usize, cached: usize) -> Collection {
    let docs = Collection::create(cads, "docs").unwrap();
    for i in 0..n {
        let id = format!("d{i}");
        cads.store()
            .put("docs", &id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
    }
    for i in 0..cached {
        docs.read(cads, &format!("d{i}")).unwrap().unwrap();
    }
    docs
}

/// Puts the AppNode in failed mode the way a real outage does: a write of `id` finds the data
/// store down (it is reported to the application: its outcome is unknown; here it did not
/// happen).
fn fail_store(d: &Deployment, cads: &Cads, docs: &Collection, id: &str) {
    d.faults.set(FaultMode::FailAll);
    let err = cads.run(|s| docs.update(s, id, inc(1000))).unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
    assert_eq!(cads.mode(), Some(Mode::Failed));
}

#[test]
fn writes_during_an_outage_land_exactly_once_and_no_read_is_stale() {
    for policy in [Policy::WriteThrough, Policy::WriteAround] {
        for technique in Technique::ALL {
            let d = deployment(policy);
            let cads = Arc::new(d.cads(config(technique, 2)));
            let docs = documents(&cads, 6, 3);
            let recovery = Recovery::start(cads.clone()).unwrap();
            fail_store(&d, &cads, &docs, "d5");
            // Every document written twice while the data store is down.
            for round in 1..=2 {
                for i in 0..6 {
                    cads.run(|s| docs.update(s, &format!("d{i}"), inc(round)))
                        .unwrap();
                }
            }
            // Cached documents show the writes; the others are refused, never read stale.
            for i in 0..6 {
                match docs.read(&cads, &format!("d{i}")) {
                    Ok(Some(found)) => {
                        assert!(i < 3, "{policy:?} {technique:?}: d{i} was not cached");
                        assert_eq!(found["n"], json!(3), "{policy:?} {technique:?}");
                    }
                    Err(Error::StoreUnavailable { .. }) => assert!(i >= 3),
                    other => panic!("{policy:?} {technique:?} d{i}: {other:?}"),
                }
            }
            let counts = cads.tardis_counts().unwrap();
            assert_eq!(counts.writes_teleported, 12);
            assert_eq!(counts.writes_refused, 0);
            assert_eq!(counts.misses_refused, 3);
            assert_eq!(counts.writes_failed, 1);
            assert!(cads.dirty_documents().unwrap() >= 6);

            d.faults.set(FaultMode::Healthy);
            wait_for(&cads, Mode::Normal);
            drop(recovery);
            assert_eq!(cads.dirty_documents().unwrap(), 0);
            for i in 0..6 {
                let stored = d.store.get("docs", &format!("d{i}")).unwrap().unwrap();
                assert_eq!(stored["n"], json!(3), "{policy:?} {technique:?} d{i}");
                assert_eq!(stored["log"], json!([1, 2]), "each $push exactly once");
                let read = docs.read(&cads, &format!("d{i}")).unwrap().unwrap();
                assert_eq!(
                    read, stored,
                    "{policy:?} {technique:?}: cache and store agree"
                );
            }
            let counts = cads.tardis_counts().unwrap();
            assert_eq!(counts.failures, 1);
            assert_eq!(counts.recoveries, 1);
            assert_eq!(counts.applied_on_demand + counts.applied_by_workers, 6);
        }
    }
}

/// One TeleW key, so that the AR workers take the documents in one batch: three buffered writes
/// are idempotent (`$set`) and applied in the batch's first round, three (`$inc`) are turned into
/// their idempotent form first and applied in the second. (The monitor's probes apply at most
/// two on their own first, which leaves both kinds in the batch.) Each counts once.
#[test]
fn a_batch_of_idempotent_and_other_buffered_writes_counts_each_once() {
    let d = deployment(Policy::WriteThrough);
    let mut config = config(Technique::ALL[0], 1);
    config.tardis.as_mut().unwrap().telew = 1;
    let cads = Arc::new(d.cads(config));
    let docs = documents(&cads, 6, 0);
    let recovery = Recovery::start(cads.clone()).unwrap();
    fail_store(&d, &cads, &docs, "d5");
    for i in 0..6 {
        let change = if i < 3 {
            common::changes(json!({"$set": {"n": 7}}))
        } else {
            inc(1)
        };
        cads.run(|s| docs.update(s, &format!("d{i}"), change.clone()))
            .unwrap();
    }
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    for i in 0..6 {
        let stored = d.store.get("docs", &format!("d{i}")).unwrap().unwrap();
        assert_eq!(stored["n"], json!(if i < 3 { 7 } else { 1 }), "d{i}");
    }
    let counts = cads.tardis_counts().unwrap();
    assert_eq!(counts.applied_on_demand + counts.applied_by_workers, 6);
}

/// 000 Table 4.3, in recovery mode. Without AR workers nothing is applied unless a request
/// applies it (or the monitor's probes, which apply a buffered write each), so the AppNode stays
/// in recovery while the techniques show their switches.
#[test]
fn each_technique_treats_misses_and_writes_in_recovery_as_table_4_3_says() {
    for technique in Technique::ALL {
        let d = deployment(Policy::WriteThrough);
        let cads = Arc::new(d.cads(config(technique, 0)));
        let docs = documents(&cads, 3, 0);
        let recovery = Recovery::start(cads.clone()).unwrap();
        fail_store(&d, &cads, &docs, "d0");
        for i in 0..3 {
            cads.run(|s| docs.update(s, &format!("d{i}"), inc(1)))
                .unwrap();
        }
        d.faults.set(FaultMode::Healthy);
        wait_for(&cads, Mode::Recovery);

        // A miss on a dirty document: refused by TAR and DIS, applied first by TARD and TARDIS.
        let read = docs.read(&cads, "d1");
        if technique.applies_on_miss() {
            assert_eq!(read.unwrap().unwrap()["n"], json!(1), "{technique:?}");
            assert_eq!(d.store.get("docs", "d1").unwrap().unwrap()["n"], json!(1));
        } else {
            // Refused even if the monitor's probes applied d1's buffered write already: without
            // applying them, a miss cannot know.
            assert!(
                matches!(read, Err(Error::StoreUnavailable { .. })),
                "{technique:?}: {read:?}"
            );
        }

        // A write to a dirty document: DIS and TARDIS apply its buffered write and write
        // through; TAR and TARD buffer it too.
        let before = cads.tardis_counts().unwrap();
        cads.run(|s| docs.update(s, "d2", inc(10))).unwrap();
        let after = cads.tardis_counts().unwrap().since(&before);
        let stored = d.store.get("docs", "d2").unwrap().unwrap();
        if technique.applies_on_write() {
            assert_eq!(after.writes_teleported, 0, "{technique:?}");
            assert_eq!(stored["n"], json!(11), "{technique:?}");
            assert_eq!(stored["log"], json!([1, 10]));
        } else {
            assert_eq!(after.writes_teleported, 1, "{technique:?}");
            // 0, or 1 if a probe of the monitor applied the first buffered write.
            assert_ne!(stored["n"], json!(11), "{technique:?}");
        }
        // Recovery lasts while a buffered write is left. On a busy machine the monitor's probes
        // may have applied every one left (d0's alone under TARD and TARDIS); then recovery is
        // rightly over, and the data store must show it. (The mode first: what was applied
        // before recovery ended is in the data store by then.)
        let mode = cads.mode();
        if mode != Some(Mode::Recovery) {
            assert_eq!(mode, Some(Mode::Normal), "{technique:?}");
            for (i, expected) in [1, 1, 11].into_iter().enumerate() {
                let stored = d.store.get("docs", &format!("d{i}")).unwrap().unwrap();
                assert_eq!(stored["n"], json!(expected), "{technique:?}: d{i}");
            }
        }

        // Touching every dirty document ends recovery for TARD and TARDIS; TAR and DIS end it
        // once AR workers run, which is what `writes_during_an_outage...` shows.
        if technique == Technique::Tardis {
            docs.read(&cads, "d0").unwrap();
            wait_for(&cads, Mode::Normal);
            for i in 0..3 {
                let stored = d.store.get("docs", &format!("d{i}")).unwrap().unwrap();
                let expected = if i == 2 { 11 } else { 1 };
                assert_eq!(stored["n"], json!(expected), "d{i}");
            }
        }
        drop(recovery);
    }
}

#[test]
fn a_full_pinned_memory_refuses_the_write_and_keeps_what_was_buffered() {
    let d = Deployment::start_with(Policy::WriteThrough, 1, |o| {
        o.mode = Some("write-through".into());
        o.max_pinned_memory = Some("8kb".into());
    });
    let mut config = config(Technique::Tardis, 1);
    config.write_back.replicas = 1;
    // One TeleW key and batches as large as it: the AR worker converts every listed document in
    // one batch, which the reserve cannot hold all at once.
    let tardis = config.tardis.as_mut().unwrap();
    (tardis.telew, tardis.alpha) = (1, 256);
    let cads = Arc::new(d.cads(config));
    let docs = documents(&cads, 200, 0);
    // Documents far larger than their buffered changes: the idempotent form that replaces a
    // buffered `$inc`/`$push` before it is applied is the whole document, which must still find
    // room once pinned memory is full of buffered writes (the CMI's pinned reserve, 1 KiB here:
    // a few such forms fit in it at once, not a whole batch of them).
    for i in 0..200 {
        let padded = doc(json!({"n": 0, "log": [], "pad": "p".repeat(700)}));
        cads.store().put("docs", &format!("d{i}"), &padded).unwrap();
    }
    let recovery = Recovery::start(cads.clone()).unwrap();
    fail_store(&d, &cads, &docs, "d0");
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..200 {
        match cads.run(|s| docs.update(s, &format!("d{i}"), inc(1))) {
            Ok(()) => accepted.push(i),
            Err(Error::BufferFull) => refused += 1,
            Err(e) => panic!("d{i}: {e}"),
        }
    }
    assert!(
        refused > 0,
        "8 KiB of pinned memory holds fewer than 200 buffered writes"
    );
    assert!(!accepted.is_empty());
    assert_eq!(cads.tardis_counts().unwrap().writes_refused, refused);
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    for i in 0..200 {
        let stored = d.store.get("docs", &format!("d{i}")).unwrap().unwrap();
        let expected = if accepted.contains(&i) { 1 } else { 0 };
        assert_eq!(stored["n"], json!(expected), "d{i}");
    }
}

#[test]
fn a_write_that_cannot_be_buffered_is_refused_while_the_store_is_down() {
    let d = deployment(Policy::WriteThrough);
    d.counters(1);
    let cads = Arc::new(d.cads(config(Technique::Tardis, 1)));
    let docs = documents(&cads, 1, 1);
    let _recovery = Recovery::start(cads.clone()).unwrap();
    fail_store(&d, &cads, &docs, "d0");
    // Counters are SQL statements without document operations: nothing to buffer.
    let err = cads
        .run(|s| s.write(&common::Counters, &"c0".to_string()))
        .unwrap_err();
    assert!(matches!(err, Error::StoreUnavailable { .. }), "{err}");
    assert_eq!(cads.tardis_counts().unwrap().writes_refused, 1);
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Normal);
    assert_eq!(d.stored("c0"), 0);
}

/// The key that seals buffered writes is loaded when the recovery threads start; when the data
/// store fails just then, the monitor loads it once the data store answers, so that writes can be
/// buffered in the next outage.
#[test]
fn the_key_of_buffered_writes_is_loaded_once_the_store_answers() {
    let d = deployment(Policy::WriteThrough);
    let cads = Arc::new(d.cads(config(Technique::Tardis, 1)));
    let docs = documents(&cads, 1, 1);
    d.faults.set(FaultMode::FailAll);
    let recovery = Recovery::start(cads.clone()).unwrap();
    assert!(!cads.mac_key_loaded());
    d.faults.set(FaultMode::Healthy);
    // The monitor loads it; without that, this waits for good (and the test never passes).
    while !cads.mac_key_loaded() {
        std::thread::sleep(Duration::from_millis(10));
    }
    fail_store(&d, &cads, &docs, "d0");
    cads.run(|s| docs.update(s, "d0", inc(1))).unwrap();
    assert_eq!(cads.tardis_counts().unwrap().writes_teleported, 1);
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Normal);
    drop(recovery);
    assert_eq!(d.store.get("docs", "d0").unwrap().unwrap()["n"], json!(1));
}

/// 000 §4.4: AppNode A is in failed mode (its monitor not yet running) while AppNode B, which
/// reaches the data store, is in normal mode. B never reads a value older than A's acknowledged
/// writes and never writes under them (the read-write and write-write races of §4.4.1), with Recon
/// and with Contextual; with Contextual, A's writes mark their keys and B's miss clears the
/// marker it applied for, while a miss on an unmarked key goes straight to the data store.
#[test]
fn a_second_appnode_in_normal_mode_sees_every_write_buffered_by_a_failed_one() {
    for policy in [Policy::WriteThrough, Policy::WriteAround] {
        for appnodes in [AppNodes::Recon, AppNodes::Contextual] {
            let what = format!("{policy:?} {appnodes:?}");
            let d = deployment(policy);
            let mut config = config(Technique::Tardis, 0);
            config.tardis.as_mut().unwrap().appnodes = appnodes;
            let a = Arc::new(d.cads(config.clone()));
            let b = d.cads(config);
            let docs = documents(&a, 4, 4);
            // Started (loading what buffering needs) and stopped: A stays failed until later.
            drop(Recovery::start(a.clone()).unwrap());
            fail_store(&d, &a, &docs, "d3");
            for id in ["d0", "d1"] {
                a.run(|s| docs.update(s, id, inc(1))).unwrap();
            }
            d.faults.set(FaultMode::Healthy);
            assert_eq!(a.mode(), Some(Mode::Failed), "{what}: no monitor yet");
            let contextual = appnodes == AppNodes::Contextual;
            assert_eq!(marked(&b, &docs.key("d0")), contextual, "{what}");

            // The read-write race: B misses on d0 (evicted), whose write A buffered.
            b.cache().unwrap().delete(&docs.key("d0")).unwrap();
            let read = docs.read(&b, "d0").unwrap().unwrap();
            assert_eq!(
                read["n"],
                json!(1),
                "{what}: B's miss applied A's write first"
            );
            assert_eq!(d.store.get("docs", "d0").unwrap().unwrap()["n"], json!(1));
            assert!(
                !marked(&b, &docs.key("d0")),
                "{what}: the reader cleared it"
            );
            assert_eq!(b.tardis_counts().unwrap().applied_on_demand, 1, "{what}");

            // The write-write race: B writes d1, whose write A buffered.
            b.run(|s| docs.update(s, "d1", inc(10))).unwrap();
            let stored = d.store.get("docs", "d1").unwrap().unwrap();
            assert_eq!(stored["n"], json!(11), "{what}");
            assert_eq!(stored["log"], json!([1, 10]), "{what}: in order, once each");
            assert_eq!(b.tardis_counts().unwrap().applied_on_demand, 2, "{what}");

            // A miss on a document nobody buffered a write for applies nothing.
            b.cache().unwrap().delete(&docs.key("d2")).unwrap();
            assert_eq!(docs.read(&b, "d2").unwrap().unwrap()["n"], json!(0));
            assert_eq!(b.tardis_counts().unwrap().applied_on_demand, 2, "{what}");

            // A recovers; nothing was left to apply twice.
            let recovery = Recovery::start(a.clone()).unwrap();
            wait_for(&a, Mode::Normal);
            drop(recovery);
            for (id, n) in [("d0", 1), ("d1", 11), ("d2", 0), ("d3", 0)] {
                let stored = d.store.get("docs", id).unwrap().unwrap();
                assert_eq!(stored["n"], json!(n), "{what} {id}");
                assert_eq!(docs.read(&b, id).unwrap().unwrap(), stored, "{what} {id}");
            }
        }
    }
}

/// A miss that must know whether the data store lacks buffered writes of its document, with no
/// CMI reachable to tell, is refused as the data store's unavailability (what TARDIS reports for
/// a read it cannot serve), not returned as a cache error: in normal mode with other AppNodes
/// (Recon: apply first, also in a session whose write transaction fixed its snapshot) and in
/// failed mode (TARDIS: query if clean).
#[test]
fn a_miss_whose_buffered_writes_cannot_be_checked_is_refused() {
    let cases = [
        (AppNodes::Recon, false, false),
        (AppNodes::Recon, false, true),
        (AppNodes::One, true, false),
    ];
    for (appnodes, fail, write_first) in cases {
        let d = deployment(Policy::WriteThrough);
        let (client, relays) = d.relayed_client();
        let mut config = config(Technique::Tardis, 0);
        if let Some(t) = config.tardis.as_mut() {
            t.appnodes = appnodes;
        }
        let cads = Cads::new(d.store.clone(), Some(client), Policy::WriteThrough, config);
        let docs = documents(&cads, 2, 0);
        if fail {
            fail_store(&d, &cads, &docs, "d1");
        }
        for r in &relays {
            r.set_cut(true);
        }
        let refused = if write_first {
            cads.run(|s| {
                // The session's write transaction begins: its snapshot is fixed.
                s.tx().sql()?;
                docs.get(s, "d0")
            })
        } else {
            docs.read(&cads, "d0")
        };
        for r in &relays {
            r.set_cut(false);
        }
        match refused {
            Err(Error::StoreUnavailable { reason }) => {
                assert!(
                    reason.contains("cannot be checked"),
                    "{appnodes:?}: {reason}"
                )
            }
            other => panic!("{appnodes:?}: {other:?}"),
        }
    }
}

/// In failed mode, a session that found a CMI down (it read a document there) cannot teleport
/// its writes: only the cache could hold them, and it went on without the cache. It is refused,
/// counted as a refused write, and writes nothing; a read-only one reads.
#[test]
fn a_session_without_the_cache_cannot_teleport_its_writes() {
    let d = deployment(Policy::WriteThrough);
    let (client, relays) = d.relayed_client();
    let cads = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        // TARDIS itself: a miss in failed mode queries the data store when nothing is buffered.
        config(Technique::Tardis, 0),
    );
    // Keys are placed by the CMIs' addresses, which change from run to run: with 64 documents,
    // both CMIs hold some (8 left one of them none about once in 128 runs).
    let docs = documents(&cads, 64, 64);
    let ids: Vec<String> = (0..64).map(|i| format!("d{i}")).collect();
    let on = |cmi| on_cmi(&cads, &ids, |id| docs.key(id), cmi);
    let (down, up) = (on(0), on(1));
    fail_store(&d, &cads, &docs, &up);
    // The data store answers again, but no monitor runs: the AppNode stays in failed mode.
    d.faults.set(FaultMode::Healthy);
    relays[0].set_cut(true);
    let refused = cads.run(|s| {
        docs.get(s, &down)?;
        docs.update(s, &up, inc(1))
    });
    assert!(
        matches!(refused, Err(Error::StoreUnavailable { .. })),
        "{refused:?}"
    );
    assert_eq!(cads.tardis_counts().unwrap().writes_refused, 1);
    let read = cads.run(|s| docs.get(s, &down)).unwrap().unwrap();
    assert_eq!(read["n"], json!(0));
    relays[0].set_cut(false);
    assert_eq!(cads.mode(), Some(Mode::Failed));
    assert_eq!(d.store.get("docs", &up).unwrap().unwrap()["n"], json!(0));
    assert_eq!(cads.dirty_documents().unwrap(), 0, "nothing buffered");
}
