//! TARDIS misses that must first deal with buffered writes (000 §4.4), mostly at an AppNode in
//! normal mode reading what another AppNode, in failed mode, left in the cache: when a miss applies
//! them in place and when its session runs again, which failures refuse the read as the data
//! store's unavailability and which are reported as they are, what becomes of a Contextual marker
//! the read cannot clear, and what a session that gave up its data-store transaction may still do.

mod common;

use std::sync::{Arc, Mutex};

use cads::documents::Collection;
use cads::tardis::{AppNodes, Recovery};
use cads::{
    CacheChange, CacheStore, Cads, Client, ClientConfig, ClientError, Config, Coordinator, DocRef,
    Error, Mode, Policy, StoreTx, TardisConfig, Technique,
};
use cads_client::Write;
use cads_store::{DocOp, Document, FaultMode, StoreError};
use cads_testkit::Cmis;
use common::tardis::{deployment, inc};
use common::{doc, marked, on_cmi, Deployment};
use serde_json::json;

fn config(appnodes: AppNodes) -> Config {
    Config {
        tardis: Some(TardisConfig {
            technique: Technique::Tardis,
            ar_workers: 0,
            alpha: 4,
            telew: 8,
            recover_after: 2,
            appnodes,
        }),
        ..Config::default()
    }
}

/// Documents `d0..d2` (`n: 0`, an empty log) that AppNode `a` reads into the cache, then, in
/// failed mode (its monitor stopped, so it stays there), changes with `changes`; the data store
/// answers again. Each has a buffered write in the cache, and under Contextual a marked key; none
/// is cached, so that another AppNode's read of one misses. A fourth document, `spare`, has
/// neither: its write is the one that found the data store down.
fn buffered_by_a_failed_appnode(
    d: &Deployment,
    a: &Arc<Cads>,
    changes: impl Fn(&mut cads::Session<'_>, &Collection, &str) -> cads::Result<()>,
) -> Collection {
    let docs = Collection::create(a, "docs").unwrap();
    for id in ["d0", "d1", "d2", "spare"] {
        d.store
            .put("docs", id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
        docs.read(a, id).unwrap().unwrap();
    }
    // Started (loading what buffering needs) and stopped.
    drop(Recovery::start(a.clone()).unwrap());
    d.faults.set(FaultMode::FailAll);
    a.run(|s| docs.update(s, "spare", inc(1000))).unwrap_err();
    assert_eq!(a.mode(), Some(Mode::Failed));
    for id in ["d0", "d1", "d2"] {
        a.run(|s| changes(s, &docs, id)).unwrap();
    }
    d.faults.set(FaultMode::Healthy);
    for id in ["d0", "d1", "d2"] {
        a.cache().unwrap().delete(&docs.key(id)).unwrap();
    }
    docs
}

fn inc_one(s: &mut cads::Session<'_>, docs: &Collection, id: &str) -> cads::Result<()> {
    docs.update(s, id, inc(1))
}

/// A collection whose data-store query first runs a hook, once: it acts between a miss's check of
/// buffered writes (and its lease on the key) and what the read does after the data store
/// answered.
struct Hooked<'h> {
    docs: Collection,
    hook: Mutex<Option<Box<dyn FnOnce() + Send + 'h>>>,
}

impl<'h> Hooked<'h> {
    fn new(docs: &Collection, hook: impl FnOnce() + Send + 'h) -> Hooked<'h> {
        Hooked {
            docs: docs.clone(),
            hook: Mutex::new(Some(Box::new(hook))),
        }
    }
}

impl CacheStore for Hooked<'_> {
    type Query = String;
    type Write = (String, DocOp);
    type Output = Option<Document>;

    fn keys_read(&self, id: &String) -> Vec<Vec<u8>> {
        self.docs.keys_read(id)
    }

    fn result_from_cache(&self, id: &String, values: &[Vec<u8>]) -> Option<Option<Document>> {
        self.docs.result_from_cache(id, values)
    }

    fn query_store(
        &self,
        id: &String,
        tx: &mut StoreTx<'_>,
    ) -> Result<Option<Document>, StoreError> {
        if let Some(hook) = self.hook.lock().unwrap().take() {
            hook();
        }
        self.docs.query_store(id, tx)
    }

    fn entries(&self, id: &String, output: &Option<Document>) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.docs.entries(id, output)
    }

    fn keys_written(&self, write: &(String, DocOp)) -> Vec<Vec<u8>> {
        self.docs.keys_written(write)
    }

    fn write_store(&self, write: &(String, DocOp), tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        self.docs.write_store(write, tx)
    }

    fn cache_change(&self, write: &(String, DocOp), key: &[u8]) -> CacheChange {
        self.docs.cache_change(write, key)
    }

    fn buffer(&self, write: &(String, DocOp)) -> Vec<(DocRef, DocOp)> {
        self.docs.buffer(write)
    }

    fn buffered_reads(&self, id: &String) -> Vec<DocRef> {
        self.docs.buffered_reads(id)
    }
}

/// Recon: a miss in a session without a write transaction applies the buffered write it depends
/// on and reads in the same run; a miss in a session whose write transaction fixed its snapshot
/// (SQLite's) gives the transaction up, has the buffered write applied outside it (its write lock
/// would hold the applier up), and runs again. Either way the AppNode stays in normal mode.
#[test]
fn a_recon_miss_reruns_only_when_its_snapshot_is_fixed() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Recon)));
    let b = d.cads(config(AppNodes::Recon));
    let docs = buffered_by_a_failed_appnode(&d, &a, inc_one);

    let mut runs = 0;
    let read = b
        .run(|s| {
            runs += 1;
            docs.get(s, "d0")
        })
        .unwrap()
        .unwrap();
    assert_eq!(read["n"], json!(1));
    assert_eq!(runs, 1, "applied in place");

    let mut runs = 0;
    let read = b
        .run(|s| {
            runs += 1;
            s.tx().sql()?;
            docs.get(s, "d1")
        })
        .unwrap()
        .unwrap();
    assert_eq!(read["n"], json!(1));
    assert_eq!(runs, 2, "the first run gave up its snapshot");

    assert_eq!(b.mode(), Some(Mode::Normal));
    let counts = b.tardis_counts().unwrap();
    assert_eq!((counts.applied_on_demand, counts.misses_refused), (2, 0));
    for id in ["d0", "d1"] {
        assert_eq!(d.store.get("docs", id).unwrap().unwrap()["log"], json!([1]));
    }
}

/// A miss that must check whether the data store lacks buffered writes of its document, and whose
/// check fails for a reason other than an unreachable CMI (here a CMI that wants a password this
/// client lacks), reports that error: it is not the data store's unavailability, and retrying
/// later will not help. In normal mode with other AppNodes (Recon: apply first, also in a session
/// whose write transaction fixed its snapshot) and in failed mode (TARDIS: query if clean).
#[test]
fn a_miss_whose_check_of_buffered_writes_fails_reports_the_caches_error() {
    let cases = [
        (AppNodes::Recon, false, false),
        (AppNodes::Recon, false, true),
        (AppNodes::One, true, false),
    ];
    for (appnodes, fail, write_first) in cases {
        let what = format!("{appnodes:?}, failed mode {fail}, write transaction {write_first}");
        let d = Deployment::start_with(Policy::WriteThrough, 1, |o| {
            o.mode = Some("write-through".into())
        });
        // The second CMI, where buffered writes have replicas, refuses this client.
        let locked = Cmis::start_with(1, |o| {
            o.mode = Some("write-through".into());
            o.requirepass = Some("not this client's".into());
        });
        let addrs = vec![d.cmis.addrs()[0], locked.addrs()[0]];
        let client = Client::new(ClientConfig::new(addrs), Coordinator::process());
        let cads = Cads::new(
            d.store.clone(),
            Some(client),
            Policy::WriteThrough,
            config(appnodes),
        );
        let docs = Collection::create(&cads, "docs").unwrap();
        let ids: Vec<String> = (0..16).map(|i| format!("d{i}")).collect();
        // A document the read itself finds on the CMI that serves this client.
        let id = on_cmi(&cads, &ids, |id| docs.key(id), 0);
        d.store
            .put("docs", &id, &doc(json!({"n": 0, "log": []})))
            .unwrap();
        if fail {
            d.faults.set(FaultMode::FailAll);
            let refused = docs.read(&cads, &id);
            assert!(
                matches!(refused, Err(Error::StoreUnavailable { .. })),
                "{refused:?}"
            );
            d.faults.set(FaultMode::Healthy);
            assert_eq!(cads.mode(), Some(Mode::Failed), "no monitor brings it back");
        }
        let read = cads.run(|s| {
            if write_first {
                s.tx().sql()?;
            }
            docs.get(s, &id)
        });
        assert!(
            matches!(read, Err(Error::Cache(ClientError::Auth { cmi: 1, .. }))),
            "{what}: {read:?}"
        );
    }
}

/// Contextual: a miss on a marked key whose buffered write the data store rejects (an `$inc` of a
/// field that became a string meanwhile) reports the data store's error, whether it applies in
/// place or after giving up a write transaction whose snapshot is fixed: the data store is not
/// down, and the AppNode stays in normal mode.
#[test]
fn a_miss_whose_buffered_write_the_store_rejects_reports_the_stores_error() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Contextual)));
    let b = d.cads(config(AppNodes::Contextual));
    let docs = buffered_by_a_failed_appnode(&d, &a, inc_one);
    d.store
        .put("docs", "d0", &doc(json!({"n": "many", "log": []})))
        .unwrap();
    for write_first in [false, true] {
        let read = b.run(|s| {
            if write_first {
                s.tx().sql()?;
            }
            docs.get(s, "d0")
        });
        assert!(
            matches!(read, Err(Error::Store(StoreError::Invalid(_)))),
            "write transaction {write_first}: {read:?}"
        );
    }
    assert_eq!(b.mode(), Some(Mode::Normal));
    assert_eq!(b.tardis_counts().unwrap().misses_refused, 0);
    assert!(marked(&a, &docs.key("d0")), "nothing was applied");
}

/// Contextual: a miss on a marked key whose buffered write cannot be applied because the data
/// store is down is refused as the data store's unavailability, saying that the buffered writes
/// the read depends on cannot be applied; so is one whose session gives up a write transaction
/// with a fixed snapshot to apply them. Each refusal is counted once, and the AppNode is in failed
/// mode.
#[test]
fn a_miss_whose_buffered_writes_cannot_be_applied_is_refused() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Contextual)));
    let docs = buffered_by_a_failed_appnode(&d, &a, inc_one);
    for (id, write_first) in [("d0", false), ("d1", true)] {
        let b = d.cads(config(AppNodes::Contextual));
        let read = b.run(|s| {
            if write_first {
                s.tx().sql()?;
            }
            d.faults.set(FaultMode::FailAll);
            docs.get(s, id)
        });
        d.faults.set(FaultMode::Healthy);
        match read {
            Err(Error::StoreUnavailable { reason }) => assert!(
                reason.contains("buffered writes it depends on cannot be applied"),
                "write transaction {write_first}: {reason}"
            ),
            other => panic!("write transaction {write_first}: {other:?}"),
        }
        assert_eq!(b.tardis_counts().unwrap().misses_refused, 1);
        assert_eq!(b.mode(), Some(Mode::Failed));
        assert!(marked(&a, &docs.key(id)));
    }
}

/// Contextual: a miss on a marked key applies the buffered write, reads, and then clears the
/// marker; a CMI of the key lost just before the clearing degrades the session, which reads the
/// applied value all the same, and the marker stays (the next miss finds nothing to apply).
#[test]
fn a_miss_that_cannot_clear_its_marker_for_a_lost_cmi_still_reads() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Contextual)));
    let docs = buffered_by_a_failed_appnode(&d, &a, inc_one);
    let (client, relays) = d.relayed_client();
    let b = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        config(AppNodes::Contextual),
    );
    let key = docs.key("d0");
    let relay = &relays[a.cache().unwrap().route(&key)];
    let cut = Hooked::new(&docs, || relay.set_cut(true));
    let mut s = b.session();
    let read = s.read(&cut, &"d0".to_string());
    assert_eq!(read.unwrap().unwrap()["log"], json!([1]));
    assert!(s.degraded());
    s.commit().unwrap();
    relay.set_cut(false);
    assert!(marked(&a, &key), "the marker stays");
    assert_eq!(
        d.store.get("docs", "d0").unwrap().unwrap()["log"],
        json!([1])
    );
}

/// Contextual: a miss whose lease on its marked key a writer wounds before the marker is cleared
/// fails as an aborted session, to be run again, and leaves the marker: the session cannot clear
/// it, and going on without the cache would hide that another session is changing the key.
#[test]
fn a_miss_whose_lease_is_wounded_before_it_clears_its_marker_is_aborted() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Contextual)));
    // Deleted documents: the read has nothing to fill, so the clearing is its last cache request.
    let docs = buffered_by_a_failed_appnode(&d, &a, |s, docs, id| docs.delete(s, id));
    let b = d.cads(config(AppNodes::Contextual));
    let key = docs.key("d0");
    let wound = Hooked::new(&docs, || {
        let client = a.cache().unwrap();
        let mut writer = client.session();
        let delete = Write::Delete { key: key.clone() };
        writer
            .write_at(&[(client.route(&key), delete)], false)
            .unwrap();
        writer.abort();
    });
    let mut s = b.session();
    let read = s.read(&wound, &"d0".to_string());
    assert!(matches!(read, Err(Error::Aborted { .. })), "{read:?}");
    assert!(!s.degraded());
    s.abort();
    assert!(marked(&a, &key));
    assert_eq!(b.run(|s| docs.get(s, "d0")).unwrap(), None);
    assert!(!marked(&a, &key), "the next run cleared it");
}

/// A session whose read gave up its data-store transaction (a marked key read in a write
/// transaction whose snapshot is fixed: Contextual) can only be aborted: a later write and its
/// commit are refused, since what it wrote before was rolled back and only the rest would land.
#[test]
fn a_session_that_gave_up_its_transaction_refuses_every_later_call() {
    let d = deployment(Policy::WriteThrough);
    let a = Arc::new(d.cads(config(AppNodes::Contextual)));
    let docs = buffered_by_a_failed_appnode(&d, &a, inc_one);
    let b = d.cads(config(AppNodes::Contextual));
    let mut s = b.session();
    s.tx().sql().unwrap();
    docs.update(&mut s, "spare", inc(5)).unwrap();
    let read = docs.get(&mut s, "d0");
    assert!(matches!(read, Err(Error::Aborted { .. })), "{read:?}");
    let write = docs.update(&mut s, "spare", inc(7));
    assert!(matches!(write, Err(Error::Aborted { .. })), "{write:?}");
    let again = docs.get(&mut s, "d1");
    assert!(matches!(again, Err(Error::Aborted { .. })), "{again:?}");
    let commit = s.commit();
    assert!(matches!(commit, Err(Error::Aborted { .. })), "{commit:?}");
    let spare = d.store.get("docs", "spare").unwrap().unwrap();
    assert_eq!(spare["log"], json!([]), "nothing of the session landed");
    // The buffered write it read was applied meanwhile.
    assert_eq!(
        d.store.get("docs", "d0").unwrap().unwrap()["log"],
        json!([1])
    );
}
