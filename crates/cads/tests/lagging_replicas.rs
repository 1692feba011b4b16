//! Replicas of a buffered write that disagree: a write that reached one replica only (the
//! `UNREPLICATED` failpoint makes a writer write the lowest-numbered one), an applier's commit
//! that reached one only (CMI 1 in a server of its own, whose clock moves past the applier's
//! leases), a clean-up that gave up. Writers and appliers take the newest copy wherever it is,
//! no applied copy stays behind or wins over a newer buffered write, and no write is lost or
//! applied twice.
//!
//! Failpoints are process-wide: every test here holds the scenario from its first line.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, Buffering};
use cads::{Cads, Config, DocRef, Policy};
use cads_testkit::failpoints::{Scenario, Stall, APPLY_APPLIED, UNREPLICATED};
use cads_testkit::{CmiOptions, Cmis};
use common::{changes, doc, documents_config, Deployment, LONG_LEASE_MS, PAST_A_LONG_LEASE};
use serde_json::json;

/// The collection `logs` and a document of it stored with an empty log, whose buffered write's
/// first replica is CMI 1: a lagging copy there is the first an applier or a writer reads, the
/// newest (on CMI 0) the second.
fn an_empty_log(d: &Deployment, cads: &Cads) -> (Collection, DocRef) {
    let docs = Collection::create(cads, "logs").unwrap();
    let client = cads.cache().unwrap();
    let doc_ref = (0..)
        .map(|i| docs.doc_ref(&format!("d{i}")))
        .find(|doc_ref| client.replicas(&writeback::bw_key(doc_ref), 2) == [1, 0])
        .unwrap();
    d.store
        .put("logs", &doc_ref.id, &doc(json!({ "log": [] })))
        .unwrap();
    (docs, doc_ref)
}

/// CMI 0 in the deployment and CMI 1 in a server of its own, so that its clock moves alone (both
/// with long leases), and an AppNode over the two.
fn cmi_1_apart(config: Config) -> (Deployment, Arc<Cmis>, Cads) {
    let long_leases = |o: &mut CmiOptions| o.lease_ms = Some(LONG_LEASE_MS);
    let d = Deployment::start_with(Policy::WriteBack, 1, long_leases);
    let other = Arc::new(Cmis::start_with(1, |o| {
        o.mode = Some(Policy::WriteBack.cmi_mode().into());
        long_leases(o);
    }));
    let addrs = [d.cmis.addrs()[0], other.addrs()[0]];
    let cads = Cads::connect(d.store.clone(), &addrs, Policy::WriteBack, config);
    (d, other, cads)
}

fn push(cads: &Cads, docs: &Collection, id: &str, entry: &str) {
    cads.run(|s| docs.update(s, id, changes(json!({"$push": {"log": entry}}))))
        .unwrap();
}

fn drain(cads: &Cads) {
    writeback::drain(cads, Duration::from_secs(60)).unwrap();
}

/// Read-modify-write buffering with CMI 1 one write behind: the applier, and then the next write,
/// take CMI 0's newer copy although they read CMI 1's first.
#[test]
fn the_newest_copy_of_a_buffered_write_is_the_one_written_and_applied() {
    let scenario = Scenario::setup();
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(documents_config(Buffering::ReadModifyWrite));
    let (docs, doc_ref) = an_empty_log(&d, &cads);
    let id = doc_ref.id;
    let log = |entries: &[&str]| doc(json!({ "log": entries }));

    // Applied while CMI 1 lags one write behind.
    push(&cads, &docs, &id, "a");
    scenario.set(UNREPLICATED, "return");
    push(&cads, &docs, &id, "b");
    scenario.clear(UNREPLICATED);
    drain(&cads);
    assert_eq!(
        d.store.get("logs", &id).unwrap(),
        Some(log(&["a", "b"])),
        "the applier took CMI 1's older copy"
    );

    // Written again while CMI 1 lags, then applied.
    push(&cads, &docs, &id, "c");
    scenario.set(UNREPLICATED, "return");
    push(&cads, &docs, &id, "d");
    scenario.clear(UNREPLICATED);
    push(&cads, &docs, &id, "e");
    drain(&cads);
    assert_eq!(
        d.store.get("logs", &id).unwrap(),
        Some(log(&["a", "b", "c", "d", "e"])),
        "the last write added to CMI 1's older copy"
    );
    // Two buffered writes applied, which held every write once (the last counts the lagging
    // one), each turned into its idempotent form first (`$push` is not idempotent).
    let counts = cads.write_back_stats().snapshot();
    assert_eq!(
        (
            counts.applied_writes,
            counts.applied_ops,
            counts.conversions
        ),
        (2, 5, 2)
    );
}

/// Append buffering: a replica without a copy while another has one (here, the first write
/// reached CMI 0 only; a CMI that restarted empty is the same) gets the whole buffered write
/// from the one that has it at the next write, not a new one holding that write alone.
#[test]
fn a_replica_missing_an_appended_buffered_write_gets_all_of_it() {
    let scenario = Scenario::setup();
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(documents_config(Buffering::Append));
    let (docs, doc_ref) = an_empty_log(&d, &cads);
    let id = doc_ref.id;
    scenario.set(UNREPLICATED, "return");
    push(&cads, &docs, &id, "a");
    scenario.clear(UNREPLICATED);
    push(&cads, &docs, &id, "b");
    drain(&cads);
    assert_eq!(
        d.store.get("logs", &id).unwrap(),
        Some(doc(json!({ "log": ["a", "b"] }))),
        "CMI 1 got a buffered write of its own"
    );
}

/// An applier whose commit reaches one replica only (the other's leases ran out after the data
/// store took the write: its clock is moved past them) deletes the copy left on the other, and
/// the buffered write is applied once.
#[test]
fn an_applier_whose_commit_reaches_one_replica_deletes_the_other_copy() {
    let scenario = Scenario::setup();
    let (d, other, cads) = cmi_1_apart(documents_config(Buffering::ReadModifyWrite));
    let (docs, doc_ref) = an_empty_log(&d, &cads);
    let id = doc_ref.id.as_str();
    cads.run(|s| docs.put(s, id, doc(json!({"v": 1})))).unwrap();
    let moved = Arc::new(AtomicBool::new(false));
    {
        let (other, moved) = (other.clone(), moved.clone());
        scenario.on(APPLY_APPLIED, move || {
            if !moved.swap(true, Ordering::SeqCst) {
                other.advance_clock(PAST_A_LONG_LEASE);
            }
        });
    }
    drain(&cads);
    assert!(moved.load(Ordering::SeqCst), "the applier applied nothing");
    assert_eq!(d.store.get("logs", id).unwrap(), Some(doc(json!({"v": 1}))));
    // Left there, the copy would stay listed in PendingWrites (the applier keeps the line of a
    // buffered write it finds again) and be applied a second time.
    assert_eq!(cads.write_back_stats().snapshot().applied_writes, 1);
    assert_eq!(cads.pinned_bytes(), 0);
}

/// A new buffered write is newer than any copy of an applied one left behind. Here the applier's
/// commit reaches CMI 0 only (CMI 1's clock moves past its leases) and its clean-up of CMI 1
/// gives up (a session holds the copy's lease there), so CMI 1 keeps the applied copy; then a
/// write that reaches CMI 0 only (`UNREPLICATED`) finds no copy there and starts a new buffered
/// write. The next apply reads the applied copy first (CMI 1 comes first for this document) and
/// must take the new one: taking the old would apply `a` twice and lose `b`.
#[test]
fn a_new_buffered_write_is_newer_than_an_applied_copy_left_behind() {
    let scenario = Scenario::setup();
    let mut config = documents_config(Buffering::Append);
    config.give_up_after = Duration::from_millis(500);
    let (d, other, cads) = cmi_1_apart(config);
    let (docs, doc_ref) = an_empty_log(&d, &cads);
    let id = doc_ref.id.clone();
    let key = writeback::bw_key(&doc_ref);
    push(&cads, &docs, &id, "a");

    let stall = Stall::at(&scenario, APPLY_APPLIED);
    std::thread::scope(|scope| {
        let applier = scope.spawn(|| writeback::apply_buffered(&cads, &doc_ref));
        stall.wait_stalled();
        other.advance_clock(PAST_A_LONG_LEASE);
        let client = cads.cache().unwrap();
        let mut holder = client.session();
        holder.on(1, |s| s.get(&key, true)).unwrap().unwrap();
        stall.release();
        let gave_up = applier.join().unwrap();
        assert!(gave_up.is_err(), "the clean-up went through: {gave_up:?}");
        holder.abort();
    });
    scenario.clear(APPLY_APPLIED);
    assert_eq!(
        d.store.get("logs", &id).unwrap(),
        Some(doc(json!({ "log": ["a"] })))
    );

    scenario.set(UNREPLICATED, "return");
    push(&cads, &docs, &id, "b");
    scenario.clear(UNREPLICATED);
    assert!(writeback::apply_buffered(&cads, &doc_ref).unwrap());
    assert_eq!(
        d.store.get("logs", &id).unwrap(),
        Some(doc(json!({ "log": ["a", "b"] })))
    );
}
