//! A buffered write whose replicas disagree: a write reached one replica only (the `UNREPLICATED`
//! failpoint makes a writer write the lowest-numbered one), so the other keeps an older version.
//! The next write and the applier both take the newest copy, wherever it is among the replicas,
//! and nothing written is lost.
//!
//! Failpoints are process-wide: every test here holds the scenario from its first line.

mod common;

use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, Buffering};
use cads::{Cads, DocRef, Policy};
use cads_testkit::failpoints::{Scenario, UNREPLICATED};
use common::{changes, doc, documents_config, Deployment};
use serde_json::json;

/// A document of `collection` whose buffered write's first replica is CMI 1: the lagging copy
/// (on CMI 1) is the first an applier or a writer reads, the newest (on CMI 0) the second.
fn document_first_on_cmi_1(cads: &Cads, collection: &str) -> String {
    let client = cads.cache().unwrap();
    (0..)
        .map(|i| format!("d{i}"))
        .find(|id| {
            let key = writeback::bw_key(&DocRef {
                collection: collection.into(),
                id: id.clone(),
            });
            client.replicas(&key, 2) == [1, 0]
        })
        .unwrap()
}

fn push(cads: &Cads, docs: &Collection, id: &str, entry: &str) {
    cads.run(|s| docs.update(s, id, changes(json!({"$push": {"log": entry}}))))
        .unwrap();
}

fn drain(cads: &Cads) {
    writeback::drain(cads, Duration::from_secs(60)).unwrap();
}

#[test]
fn the_newest_copy_of_a_buffered_write_is_the_one_written_and_applied() {
    let scenario = Scenario::setup();
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(documents_config(Buffering::ReadModifyWrite));
    let docs = Collection::create(&cads, "logs").unwrap();
    let id = document_first_on_cmi_1(&cads, "logs");
    let log = |entries: &[&str]| doc(json!({ "log": entries }));

    // Applied while CMI 1 lags one write behind.
    d.store.put("logs", &id, &log(&[])).unwrap();
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
    // Two buffered writes applied, which held every write once: the last counts the lagging one.
    let counts = cads.write_back_stats().snapshot();
    assert_eq!((counts.applied_writes, counts.applied_ops), (2, 5));
}
