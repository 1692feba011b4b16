//! TARDIS's write path (000 ch. 4): which writes are teleported and which go to the data store,
//! and how a write that goes to the data store in recovery first applies the buffered writes of
//! its documents (Algorithm 5) — in order, with its leases checked again afterwards, and with a
//! data-store failure meanwhile made a session to run again.

mod common;

use std::sync::Arc;

use cads::documents::Collection;
use cads::tardis::{AppNodes, Recovery};
use cads::{Cads, Config, Error, Mode, Policy, TardisConfig, Technique};
use cads_store::{DocOp, FaultMode};
use common::tardis::{deployment, inc, wait_for};
use common::{changes, counter_key, doc, marked, Counters, Deployment};
use serde_json::json;

/// TARDIS with no AR workers: once the data store is back, buffered writes are applied only by
/// the requests that touch their documents, and by at most one probe of the monitor (`p` = 1).
fn config(technique: Technique, appnodes: AppNodes) -> Config {
    Config {
        tardis: Some(TardisConfig {
            technique,
            ar_workers: 0,
            alpha: 4,
            telew: 4,
            recover_after: 1,
            appnodes,
        }),
        ..Config::default()
    }
}

/// Documents `ids` with `n: 0` and an empty log, stored around the cache and read once, so that
/// the cache holds them.
fn documents(cads: &Cads, ids: &[&str]) -> Collection {
    let docs = Collection::create(cads, "docs").unwrap();
    for id in ids {
        cads.store()
            .put("docs", id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
        docs.read(cads, id).unwrap().unwrap();
    }
    docs
}

/// The data store goes down (found by a write of `lost`, which fails), `inc(1)` of each of `ids`
/// is teleported, and the data store comes back. The monitor (started before, which loads the key
/// of buffered writes) moves the AppNode to recovery and is stopped there: with buffered writes
/// left and no AR workers, the AppNode stays in recovery.
fn outage_then_recovery(
    d: &Deployment,
    cads: &Arc<Cads>,
    docs: &Collection,
    lost: &str,
    ids: &[&str],
) {
    let recovery = Recovery::start(cads.clone()).unwrap();
    d.faults.set(FaultMode::FailAll);
    let failed = cads.run(|s| docs.update(s, lost, inc(1000))).unwrap_err();
    assert!(matches!(failed, Error::Store(_)), "{failed}");
    assert_eq!(cads.mode(), Some(Mode::Failed));
    for id in ids {
        cads.run(|s| docs.update(s, id, inc(1))).unwrap();
    }
    assert_eq!(
        cads.tardis_counts().unwrap().writes_teleported,
        ids.len() as u64
    );
    d.faults.set(FaultMode::Healthy);
    wait_for(cads, Mode::Recovery);
    drop(recovery);
    assert_eq!(
        cads.mode(),
        Some(Mode::Recovery),
        "buffered writes are left"
    );
}

/// One of `ids` whose buffered write is still pending: the monitor's one probe may have applied
/// one of them.
fn still_buffered(d: &Deployment, ids: &[&str]) -> String {
    ids.iter()
        .find(|id| d.store.get("docs", id).unwrap().unwrap()["n"] == json!(0))
        .expect("a probe applies at most one buffered write")
        .to_string()
}

/// A session that began in normal mode and writes a document after the AppNode entered recovery
/// (TAR: recovery itself does not make writes apply buffered writes) applies the document's
/// buffered write first, since one may have been made since it began: its own write lands
/// after it, and both land once.
#[test]
fn a_write_in_a_session_older_than_the_outage_lands_after_the_buffered_write() {
    let d = deployment(Policy::WriteThrough);
    let cads = Arc::new(d.cads(config(Technique::Tar, AppNodes::One)));
    let ids = ["d0", "d1"];
    let docs = documents(&cads, &["d0", "d1", "lost"]);
    let mut session = cads.session();
    outage_then_recovery(&d, &cads, &docs, "lost", &ids);
    let id = still_buffered(&d, &ids);

    docs.update(&mut session, &id, inc(10)).unwrap();
    session.commit().unwrap();
    let stored = d.store.get("docs", &id).unwrap().unwrap();
    assert_eq!(stored["log"], json!([1, 10]), "the buffered write first");
    assert_eq!(stored["n"], json!(11));
    assert_eq!(docs.read(&cads, &id).unwrap().unwrap(), stored);
    assert_eq!(cads.tardis_counts().unwrap().applied_on_demand, 1);
}

/// The AppNode in recovery under TARDIS: a write applies its document's buffered write before
/// its own write goes to the data store. If the data store fails meanwhile, nothing of the
/// session reached it: the session is aborted to run again (retryable), the AppNode is in
/// failed mode, and the write's next run is teleported.
#[test]
fn a_store_failure_while_applying_before_a_write_aborts_it_to_run_again() {
    let d = deployment(Policy::WriteThrough);
    let cads = Arc::new(d.cads(config(Technique::Tardis, AppNodes::One)));
    let ids = ["d0", "d1"];
    let docs = documents(&cads, &["d0", "d1", "lost"]);
    outage_then_recovery(&d, &cads, &docs, "lost", &ids);
    let id = still_buffered(&d, &ids);

    let mut session = cads.session();
    docs.update(&mut session, &id, inc(10)).unwrap();
    d.faults.set(FaultMode::FailAll);
    let err = session.commit().unwrap_err();
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    assert_eq!(cads.mode(), Some(Mode::Failed));

    let before = cads.tardis_counts().unwrap();
    cads.run(|s| docs.update(s, &id, inc(10))).unwrap();
    let after = cads.tardis_counts().unwrap().since(&before);
    assert_eq!(after.writes_teleported, 1, "run again, teleported");
    d.faults.set(FaultMode::Healthy);
    let stored = d.store.get("docs", &id).unwrap().unwrap();
    assert_eq!(stored["log"], json!([]), "nothing reached the data store");
}

/// A buffered write the data store refuses when it is applied (here an `$inc` of a field that is
/// a string in the data store, teleported while the data store was down) is not a failure of
/// the data store: a write that applies it first gets the data store's refusal as it is, not an
/// abort that would run it again and again.
#[test]
fn a_refused_buffered_write_fails_the_write_that_applies_it() {
    let d = deployment(Policy::WriteThrough);
    let cads = Arc::new(d.cads(config(Technique::Tardis, AppNodes::One)));
    let docs = documents(&cads, &["d0", "lost"]);
    let text = doc(json!({"n": "text", "log": []}));
    cads.run(|s| docs.put(s, "d0", text.clone())).unwrap();
    // A probe of the monitor cannot apply it either: it stays buffered.
    outage_then_recovery(&d, &cads, &docs, "lost", &["d0"]);
    let mut session = cads.session();
    docs.update(&mut session, "d0", changes(json!({"$set": {"m": 1}})))
        .unwrap();
    let err = session.commit().unwrap_err();
    match &err {
        Error::Store(e) => assert!(!e.is_transient(), "{e}"),
        other => panic!("the data store's refusal, not {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(cads.mode(), Some(Mode::Recovery));
    let stored = d.store.get("docs", "d0").unwrap().unwrap();
    assert_eq!(stored["n"], json!("text"));
    assert!(stored.get("m").is_none(), "the write did not land");
}

/// A buffered write the data store refuses does not hold up the others: the AR workers' batch
/// that holds it is split until it stands alone, and every other buffered write in it is applied.
#[test]
fn a_refused_buffered_write_does_not_hold_up_the_rest_of_its_batch() {
    let d = deployment(Policy::WriteThrough);
    let mut config = config(Technique::Tardis, AppNodes::One);
    let tardis = config.tardis.as_mut().unwrap();
    // One TeleW key: one batch.
    (tardis.ar_workers, tardis.telew) = (1, 1);
    let cads = Arc::new(d.cads(config));
    let good = ["g1", "g2", "g3", "g4"];
    let docs = documents(&cads, &["g1", "g2", "g3", "g4", "refused", "lost"]);
    let text = doc(json!({"n": "text", "log": []}));
    cads.run(|s| docs.put(s, "refused", text.clone())).unwrap();
    let recovery = Recovery::start(cads.clone()).unwrap();
    d.faults.set(FaultMode::FailAll);
    cads.run(|s| docs.update(s, "lost", inc(1000))).unwrap_err();
    // `g1` is listed first, so the monitor's probe (which takes the first) applies it and moves
    // the AppNode to recovery, where the AR worker takes the rest.
    for id in ["g1", "refused", "g2", "g3", "g4"] {
        cads.run(|s| docs.update(s, id, inc(1))).unwrap();
    }
    d.faults.set(FaultMode::Healthy);
    let applied = || {
        good.iter()
            .all(|id| d.store.get("docs", id).unwrap().unwrap()["n"] == json!(1))
    };
    let what = || {
        format!(
            "the good buffered writes are not all applied: {:?}",
            cads.tardis_counts()
        )
    };
    common::wait_until(std::time::Duration::from_secs(120), what, applied);
    drop(recovery);
    assert_eq!(d.store.get("docs", "refused").unwrap().unwrap(), text);
    assert_eq!(cads.mode(), Some(Mode::Recovery), "one is left");
}

/// In recovery under TARDIS, a session that read a document and then finds the CMI holding it
/// unreachable when it stages its write goes on with the data store alone: the document's
/// buffered write (on a replica it reaches) is applied, then its write lands after it, and the
/// session is acknowledged without checking leases with the cache it could not reach.
#[test]
fn a_write_that_lost_its_cmi_applies_buffered_writes_and_goes_on_without_the_cache() {
    let d = deployment(Policy::WriteThrough);
    let (client, relays) = d.relayed_client();
    let cads = Arc::new(Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        config(Technique::Tardis, AppNodes::One),
    ));
    // Two documents whose keys live on CMI 0 (a probe may apply one of their buffered writes).
    let named = Collection::named("docs").unwrap();
    let on_0: Vec<String> = (0..64)
        .map(|i| format!("d{i}"))
        .filter(|id| cads.cache().unwrap().route(&named.key(id)) == 0)
        .take(2)
        .collect();
    let ids: Vec<&str> = on_0.iter().map(String::as_str).collect();
    let docs = documents(&cads, &[ids[0], ids[1], "lost"]);
    outage_then_recovery(&d, &cads, &docs, "lost", &ids);
    let id = still_buffered(&d, &ids);

    let mut session = cads.session();
    docs.get(&mut session, &id).unwrap().unwrap();
    relays[0].set_cut(true);
    docs.update(&mut session, &id, inc(10)).unwrap();
    let committed = session.commit();
    relays[0].set_cut(false);
    committed.unwrap();
    let stored = d.store.get("docs", &id).unwrap().unwrap();
    assert_eq!(stored["log"], json!([1, 10]), "the buffered write first");
}

/// In recovery under TAR (which teleports document writes), a session whose writes give no
/// document operations (SQL counters) cannot teleport them and writes them through: nothing is
/// buffered for it, and under Contextual leases it marks none of its keys.
#[test]
fn a_write_without_document_operations_in_recovery_writes_through_unmarked() {
    let d = deployment(Policy::WriteThrough);
    d.counters(1);
    let cads = Arc::new(d.cads(config(Technique::Tar, AppNodes::Contextual)));
    let docs = documents(&cads, &["d0", "d1", "lost"]);
    assert_eq!(cads.read(&Counters, &"c0".to_string()).unwrap(), 0);
    outage_then_recovery(&d, &cads, &docs, "lost", &["d0", "d1"]);
    let dirty = cads.dirty_documents().unwrap();

    cads.run(|s| s.write(&Counters, &"c0".to_string())).unwrap();
    assert_eq!(d.stored("c0"), 1);
    assert!(
        !marked(&cads, &counter_key("c0")),
        "nothing buffered to announce"
    );
    assert_eq!(cads.read(&Counters, &"c0".to_string()).unwrap(), 1);
    assert_eq!(cads.dirty_documents().unwrap(), dirty);
}

/// Without TARDIS, write-through leaves a document write to the data store, which refuses one
/// past its bounds at commit: the write itself is taken, and nothing reaches either the cache or
/// the data store. (Write-back, which the data store sees only later, checks when the write is
/// made.)
#[test]
fn without_tardis_the_data_store_refuses_a_document_past_its_bounds_at_commit() {
    let d = Deployment::start(Policy::WriteThrough);
    let cads = d.cads(Config::default());
    let docs = documents(&cads, &["d0"]);
    let mut deep = json!(0);
    for _ in 0..cads_store::limits::MAX_DEPTH + 1 {
        deep = json!([deep]);
    }
    let mut session = cads.session();
    let write = ("d0".to_string(), DocOp::Put(doc(json!({"deep": deep}))));
    session.write(&docs, &write).unwrap();
    let err = session.commit().unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
    let stored = d.store.get("docs", "d0").unwrap().unwrap();
    assert_eq!(stored["n"], json!(0));
    assert_eq!(docs.read(&cads, "d0").unwrap().unwrap(), stored);
}

/// With one AppNode writing the data (`AppNodes::One`), normal mode does nothing extra: a write
/// in a session that began and ends in normal mode does not look for buffered writes of its
/// documents. (Here a second AppNode configured so, wrongly, has one left by the first, in
/// failed mode: it stays buffered, for the first AppNode's recovery.)
#[test]
fn with_one_appnode_a_write_in_normal_mode_applies_nothing() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(Technique::Tardis, AppNodes::One)));
    let b = d.cads(config(Technique::Tardis, AppNodes::One));
    let docs = documents(&a, &["d0", "lost"]);
    // Started (loading the key of buffered writes) and stopped: A stays failed.
    drop(Recovery::start(a.clone()).unwrap());
    d.faults.set(FaultMode::FailAll);
    a.run(|s| docs.update(s, "lost", inc(1000))).unwrap_err();
    a.run(|s| docs.update(s, "d0", inc(1))).unwrap();
    d.faults.set(FaultMode::Healthy);
    assert_eq!(a.mode(), Some(Mode::Failed));

    b.run(|s| docs.update(s, "d0", inc(10))).unwrap();
    assert_eq!(b.mode(), Some(Mode::Normal));
    assert_eq!(b.tardis_counts().unwrap().applied_on_demand, 0);
    assert_eq!(b.dirty_documents().unwrap(), 1, "still buffered");
    let stored = d.store.get("docs", "d0").unwrap().unwrap();
    assert_eq!(stored["log"], json!([10]));
}
