//! A write that skips a CMI it takes for down records that the CMI missed it, and the process
//! flushes the CMI before reading from it again. The flush must come after the write's
//! data-store commit: one that comes between the skip and the commit lets a reader fill the CMI
//! with the value the commit then replaces, and the write holds no lease there to stop the fill.
//! (Found by `scripts/soak`: a BG member cached one friendship ahead of the data store after a
//! CMI was killed and restarted.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cads::documents::Collection;
use cads::writeback::Buffering;
use cads::{Cads, Config, Policy};
use cads_server::Options;
use cads_testkit::documents::counter_on_cmi;
use cads_testkit::failpoints::{Scenario, CACHE_COMMIT, STORE_COMMIT};
use cads_testkit::{free_port, Cmis};
use common::{changes, counter_key, documents_config, on_cmi, Counters, Deployment, LONG_LEASE_MS};
use serde_json::json;

fn write_through(o: &mut Options) {
    o.mode = Some("write-through".into());
    o.lease_ms = Some(LONG_LEASE_MS);
}

/// Stops CMI 1 until `cads` takes it for down, then starts it again on its port, empty.
fn bounce(cads: &Cads, cmi1: &mut Cmis, port: u16, read: impl Fn()) {
    cmi1.stop();
    while !cads.cache().unwrap().is_down(1) {
        read();
    }
    *cmi1 = Cmis::start_on(port, 1, write_through);
}

#[test]
fn a_flush_between_a_skip_and_the_commit_does_not_cover_the_write() {
    let d = Deployment::start_with(Policy::WriteThrough, 1, write_through);
    let port = free_port();
    let mut cmi1 = Cmis::start_on(port, 1, write_through);
    let cads = Arc::new(Cads::connect(
        d.store.clone(),
        &[d.cmis.addrs()[0], cmi1.addrs()[0]],
        Policy::WriteThrough,
        Config::default(),
    ));
    let name = on_cmi(&cads, &d.counters(50), counter_key, 1);
    let scenario = Scenario::setup();
    let mut acknowledged = 0;
    loop {
        // CMI 1 stops and starts again at once: the client, refused meanwhile, takes it for
        // down for a second, so the next write skips it.
        bounce(&cads, &mut cmi1, port, || {
            assert_eq!(cads.read(&Counters, &name).unwrap(), acknowledged);
        });
        // Before the write's data-store commit: the process flushes CMI 1 (the write recorded
        // the skip), and a reader fills CMI 1 with the value from before the write.
        let armed = Arc::new(AtomicBool::new(true));
        let raced = Arc::new(AtomicBool::new(false));
        scenario.on(STORE_COMMIT, {
            let (cads, name) = (cads.clone(), name.clone());
            let (armed, raced) = (armed.clone(), raced.clone());
            move || {
                if armed.swap(false, Ordering::SeqCst) && cads.flush_missed_cmis() == 1 {
                    assert_eq!(cads.read(&Counters, &name).unwrap(), acknowledged);
                    raced.store(true, Ordering::SeqCst);
                }
            }
        });
        cads.run(|s| s.write(&Counters, &name)).unwrap();
        acknowledged += 1;
        scenario.clear(STORE_COMMIT);
        // A slow machine may have let the second pass before the write: then it did not skip.
        if raced.load(Ordering::SeqCst) {
            break;
        }
    }
    assert_eq!(d.stored(&name), acknowledged);
    assert_eq!(
        cads.read(&Counters, &name).unwrap(),
        acknowledged,
        "a read after the acknowledged write returned the value it replaced"
    );
    drop(cmi1);
}

/// Under write-back the write takes effect at its cache commit (its buffered write becomes
/// visible there), after the data-store commit: a flush of the skipped CMI between the two, and
/// a reader filling the old value there, must not be taken for a repair either.
#[test]
fn under_write_back_a_flush_before_the_cache_commit_does_not_cover_the_write() {
    let d = Deployment::start_with(Policy::WriteBack, 1, write_through);
    let port = free_port();
    let mut cmi1 = Cmis::start_on(port, 1, write_through);
    let cads = Arc::new(Cads::connect(
        d.store.clone(),
        &[d.cmis.addrs()[0], cmi1.addrs()[0]],
        Policy::WriteBack,
        documents_config(Buffering::Append),
    ));
    let docs = Collection::create(&cads, "tallies").unwrap();
    let id = counter_on_cmi(&cads, d.store.as_ref(), &docs, 1);
    let n = |cads: &Cads| {
        docs.read(cads, &id).unwrap().unwrap()["n"]
            .as_i64()
            .unwrap()
    };
    let scenario = Scenario::setup();
    let mut acknowledged = 0;
    loop {
        bounce(&cads, &mut cmi1, port, || {
            assert_eq!(n(&cads), acknowledged)
        });
        // Between the write's data-store commit and its cache commit: the process flushes CMI 1
        // and a reader fills it from the data store, which the buffered write has not reached.
        let armed = Arc::new(AtomicBool::new(true));
        let raced = Arc::new(AtomicBool::new(false));
        scenario.on(CACHE_COMMIT, {
            let (cads, docs, id) = (cads.clone(), docs.clone(), id.clone());
            let (armed, raced) = (armed.clone(), raced.clone());
            move || {
                if !armed.swap(false, Ordering::SeqCst) {
                    return;
                }
                // Once CMI 1 no longer counts as down, the reader's own look for buffered
                // writes does not record it as missed again.
                while cads.cache().unwrap().is_down(1) {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                if cads.flush_missed_cmis() >= 1 {
                    let read = docs.read(&cads, &id).unwrap().unwrap();
                    assert_eq!(read["n"], json!(acknowledged));
                    raced.store(true, Ordering::SeqCst);
                }
            }
        });
        let set = changes(json!({"$set": {"n": acknowledged + 1}}));
        cads.run(|s| docs.update(s, &id, set.clone())).unwrap();
        acknowledged += 1;
        scenario.clear(CACHE_COMMIT);
        if raced.load(Ordering::SeqCst) {
            break;
        }
    }
    assert_eq!(
        n(&cads),
        acknowledged,
        "a read after the acknowledged write returned the value it replaced"
    );
    drop(cmi1);
}
