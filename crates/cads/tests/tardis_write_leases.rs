//! TARDIS, a write in recovery that applies its documents' buffered writes before it goes to the
//! data store (000 Algorithm 5): its leases are checked again once the buffered writes are
//! applied, made to run out there with a failpoint in the applier.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cads::documents::Collection;
use cads::tardis::{AppNodes, Recovery};
use cads::{Config, Error, Mode, Policy, TardisConfig, Technique};
use cads_store::FaultMode;
use cads_testkit::failpoints::{Scenario, UNLIST};
use common::tardis::{deployment, inc, wait_for};
use common::{doc, PAST_A_LONG_LEASE};
use serde_json::json;

/// A session in recovery (TARDIS, no AR workers) writes a document with a buffered write: it
/// takes its leases, applies the buffered write, and the CMIs' clocks move past its leases just
/// after the applier commits. The session must find its leases gone before its write reaches the
/// data store: it is aborted (retryable) with nothing of it written, and its next run lands once,
/// after the buffered write.
#[test]
fn a_write_whose_leases_ran_out_while_applying_buffered_writes_is_not_acknowledged() {
    let scenario = Scenario::setup();
    let d = Arc::new(deployment(Policy::WriteThrough));
    let config = Config {
        tardis: Some(TardisConfig {
            technique: Technique::Tardis,
            ar_workers: 0,
            alpha: 4,
            telew: 4,
            recover_after: 1,
            appnodes: AppNodes::One,
        }),
        ..Config::default()
    };
    let cads = Arc::new(d.cads(config));
    let docs = Collection::create(&cads, "docs").unwrap();
    let ids = ["d0", "d1"];
    for id in ["d0", "d1", "lost"] {
        d.store
            .put("docs", id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
        docs.read(&cads, id).unwrap().unwrap();
    }
    // An outage: `inc(1)` of each document buffered; then recovery, in which the AppNode stays
    // (buffered writes are left, and the monitor is stopped).
    let recovery = Recovery::start(cads.clone()).unwrap();
    d.faults.set(FaultMode::FailAll);
    cads.run(|s| docs.update(s, "lost", inc(1000))).unwrap_err();
    for id in ids {
        cads.run(|s| docs.update(s, id, inc(1))).unwrap();
    }
    d.faults.set(FaultMode::Healthy);
    wait_for(&cads, Mode::Recovery);
    drop(recovery);
    // The monitor's one probe may have applied one of them.
    let id = ids
        .into_iter()
        .find(|id| d.store.get("docs", id).unwrap().unwrap()["n"] == json!(0))
        .unwrap();

    let expired = Arc::new(AtomicBool::new(false));
    {
        let (d, expired) = (d.clone(), expired.clone());
        scenario.on(UNLIST, move || {
            if !expired.swap(true, Ordering::SeqCst) {
                d.cmis.advance_clock(PAST_A_LONG_LEASE);
            }
        });
    }
    let mut session = cads.session();
    docs.update(&mut session, id, inc(10)).unwrap();
    let err = session.commit().unwrap_err();
    scenario.clear(UNLIST);
    assert!(
        expired.load(Ordering::SeqCst),
        "the buffered write was applied"
    );
    assert!(err.is_retryable(), "{err}");
    assert!(matches!(err, Error::Aborted { .. }), "{err}");
    let stored = d.store.get("docs", id).unwrap().unwrap();
    assert_eq!(
        stored["log"],
        json!([1]),
        "applied, and nothing of the session"
    );

    cads.run(|s| docs.update(s, id, inc(10))).unwrap();
    let stored = d.store.get("docs", id).unwrap().unwrap();
    assert_eq!(stored["log"], json!([1, 10]));
    assert_eq!(docs.read(&cads, id).unwrap().unwrap(), stored);
}
