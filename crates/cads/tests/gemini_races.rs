//! Gemini's races in recovery mode (004 Algorithms 1 and 2), made to happen with cads'
//! failpoints and the test playing the coordinator: a writer's delete on the secondary is done
//! before its data-store commit, and a reader copying a key from the secondary while a writer
//! changes it copies nothing stale.
//!
//! Failpoints are process-wide, so every test here holds the failpoint scenario (they run one at
//! a time) and no test of another file sees them.

mod common;

use std::sync::{Arc, Mutex};

use cads::{Cads, Config, Policy};
use cads_client::{Client, ClientConfig};
use cads_testkit::failpoints::{Scenario, STORE_COMMIT};
use common::gemini::{ranges, PlayedCoordinator};
use common::{counter_key, hold_first_fill, Counters, Deployment};

const FRAGMENTS: u32 = 8;

fn gemini_appnode(d: &Deployment) -> Cads {
    let config = Config {
        gemini: true,
        ..Config::default()
    };
    Cads::connect(d.store.clone(), d.cmis.addrs(), Policy::WriteAround, config)
}

/// A counter of a fragment whose primary is instance 1, written once and read while instance 1
/// was away, so that the secondary (instance 0) holds it at 1, and instance 1 back in recovery
/// (with working-set transfer if `transfer`). Returns the coordinator and the counter's name.
fn recovering(d: &Deployment, a: &Cads, transfer: bool) -> (PlayedCoordinator, String) {
    let mut coord = PlayedCoordinator::start(d.cmis.addrs(), FRAGMENTS);
    let names = d.counters(20);
    let name = names
        .into_iter()
        .find(|n| {
            let j = cads_client::fragment_of(&counter_key(n), FRAGMENTS);
            coord.configuration.fragments()[j as usize].primary.instance == 1
        })
        .expect("a counter on instance 1");
    coord.fail(1);
    a.gemini().unwrap().refresh(a.cache().unwrap());
    a.run(|s| s.write(&Counters, &name)).unwrap();
    assert_eq!(a.read(&Counters, &name).unwrap(), 1);
    coord.recover(1, transfer.then_some(900));
    a.gemini().unwrap().refresh(a.cache().unwrap());
    assert_eq!(coord.held(0, &counter_key(&name)), Some(b"1".to_vec()));
    (coord, name)
}

/// 004 Algorithm 2: a write in recovery mode deletes its key on the secondary before it updates
/// the data store. Deleted only at the cache commit, beside the primary's delete, the secondary's
/// old value could outlive the primary's Q lease, and a recovery worker or a transfer filling
/// the primary then would copy it there.
#[test]
fn a_recovery_write_deletes_on_the_secondary_before_the_data_store() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let a = gemini_appnode(&d);
    let (coord, name) = recovering(&d, &a, false);
    let seen = Arc::new(Mutex::new(Vec::new()));
    {
        let seen = seen.clone();
        let admin = Client::new(ClientConfig::new(coord.addrs.clone()), ranges());
        let key = counter_key(&name);
        scenario.on(STORE_COMMIT, move || {
            seen.lock().unwrap().push(admin.get_from(0, &key).unwrap());
        });
    }
    a.run(|s| s.write(&Counters, &name)).unwrap();
    assert_eq!(*seen.lock().unwrap(), [None], "the secondary held it then");
    assert_eq!(a.read(&Counters, &name).unwrap(), 2);
}

/// 004 Algorithm 1 with working-set transfer: a reader misses on the primary and finds the key on
/// the secondary; before it fills the primary, a writer changes the key. The writer's Q lease on
/// the primary voids the reader's I lease, so the copy is refused and the reader runs again,
/// finding the secondary's copy gone: it reads the new value, and the primary never holds the old.
#[test]
fn a_transfer_racing_a_write_copies_nothing_stale() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let reader = gemini_appnode(&d);
    let (coord, name) = recovering(&d, &reader, true);
    let writer = gemini_appnode(&d);
    let (copied, go) = hold_first_fill(&scenario);
    let read = std::thread::scope(|scope| {
        let read = scope.spawn(|| reader.run(|s| s.read(&Counters, &name)).unwrap());
        copied.recv().unwrap();
        writer.run(|s| s.write(&Counters, &name)).unwrap();
        go.send(()).unwrap();
        read.join().unwrap()
    });
    assert_eq!(read, 2, "the reader ran again after the write");
    let key = counter_key(&name);
    assert_ne!(coord.held(1, &key), Some(b"1".to_vec()), "a stale copy");
    assert_eq!(
        coord.held(0, &key),
        None,
        "the writer deleted the secondary's"
    );
    assert_eq!(reader.read(&Counters, &name).unwrap(), 2);
}
