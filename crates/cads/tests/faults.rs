//! Failures: a data store that is down or hangs gives a typed error within its timeout and leaves
//! the cache consistent; a cache that cannot be reached degrades to the data store and never
//! serves a stale value, even when the CMI comes back with the entries it had.

mod common;

use std::time::Duration;

use cads::documents::Collection;
use cads::{Cads, Config, Error, Policy};
use cads_client::{Client, ClientConfig, ClientError};
use cads_coord::Coordinator;
use cads_store::{Changes, FaultMode, Isolation, SqlValue, StoreError};
use common::{counter_key, on_cmi, Counters, Deployment};
use serde_json::json;

#[test]
fn a_data_store_that_is_down_gives_a_typed_error_and_leaves_the_cache_consistent() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        d.counters(1);
        let cads = d.cads(Config::default());
        let c0 = "c0".to_string();
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
        d.faults.set(FaultMode::FailAll);
        let err = cads.run(|s| s.write(&Counters, &c0)).unwrap_err();
        assert!(
            matches!(err, Error::Store(StoreError::Unavailable(_))),
            "{err}"
        );
        // Reads still hit the cache, which was left as it was.
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
        d.faults.set(FaultMode::Healthy);
        cads.run(|s| s.write(&Counters, &c0)).unwrap();
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 1);
        assert_eq!(d.stored("c0"), 1);
    }
}

/// A commit whose reply is lost: the data store committed, the writer got a timeout and cannot
/// tell. The cached value must not stay as it was before the write.
#[test]
fn a_commit_with_an_unknown_outcome_leaves_no_old_value_cached() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        d.counters(1);
        let cads = d.cads(Config::default());
        let c0 = "c0".to_string();
        assert_eq!(cads.read(&Counters, &c0).unwrap(), 0);
        d.faults.set(FaultMode::LoseCommitReplies);
        let err = cads.run(|s| s.write(&Counters, &c0)).unwrap_err();
        assert!(matches!(err, Error::Store(StoreError::Timeout(_))), "{err}");
        d.faults.set(FaultMode::Healthy);
        assert_eq!(d.stored("c0"), 1, "{policy:?}: the write committed");
        assert_eq!(cads.read(&Counters, &c0).unwrap(), 1, "{policy:?}");
        assert_eq!(
            cads.run(|s| s.read(&Counters, &c0)).unwrap(),
            1,
            "{policy:?}"
        );
    }
}

#[test]
fn a_data_store_that_hangs_times_out_within_its_timeout() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(1);
    let cads = d.cads(Config::default());
    d.faults.set(FaultMode::Hang);
    let err = cads
        .run(|s| s.read(&Counters, &"c0".to_string()))
        .unwrap_err();
    assert!(
        matches!(err, Error::Store(StoreError::Timeout(t)) if t == common::STORE_TIMEOUT),
        "{err}"
    );
    d.faults.set(FaultMode::Healthy);
    assert_eq!(
        cads.run(|s| s.read(&Counters, &"c0".to_string())).unwrap(),
        0
    );
}

#[test]
fn an_unreachable_cache_degrades_to_the_data_store_and_never_serves_stale_values() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        d.counters(4);
        let addrs = d.cmis.addrs().to_vec();
        let (client, relays) = d.relayed_client();
        let cads = Cads::new(d.store.clone(), Some(client), policy, Config::default());
        let names: Vec<String> = (0..4).map(|i| format!("c{i}")).collect();
        for n in &names {
            assert_eq!(
                cads.run(|s| s.read(&Counters, n)).unwrap(),
                0,
                "cached at 0"
            );
        }
        for r in &relays {
            r.set_cut(true);
        }
        // Cut off: reads come from the data store, writes still succeed.
        for n in &names {
            cads.run(|s| s.write(&Counters, n)).unwrap();
            assert_eq!(cads.run(|s| s.read(&Counters, n)).unwrap(), 1);
        }
        // The CMIs still hold 0 for every counter. Once they are reachable again, no read of this
        // process may return it.
        for r in &relays {
            r.set_cut(false);
        }
        // A client straight to the CMIs (it places keys as the relayed one does).
        let direct = Client::new(ClientConfig::new(addrs.clone()), Coordinator::process());
        assert_eq!(
            direct.get(&counter_key("c0")).unwrap(),
            Some(b"0".to_vec()),
            "{policy:?}: the CMI still holds the old value"
        );
        for _ in 0..20 {
            for n in &names {
                assert_eq!(
                    cads.run(|s| s.read(&Counters, n)).unwrap(),
                    1,
                    "{policy:?} {n}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let after = direct.get(&counter_key("c0")).unwrap();
        assert!(
            after.is_none() || after.as_deref() == Some(&b"1"[..]),
            "{after:?}"
        );
    }
}

/// A session that finds a CMI down works on the data store alone for the rest of its run, for
/// the keys of every CMI: `degraded()` says so, and a key of a CMI it still reaches is read from
/// the data store (which holds a value the cache does not: set behind the cache's back here).
/// Under write-back such a session writes nothing, and its error names the CMI it could not
/// reach.
#[test]
fn a_session_that_found_a_cmi_down_uses_the_data_store_alone() {
    let d = Deployment::start(Policy::WriteThrough);
    // Keys are placed by the CMIs' addresses, which change from run to run: with 64 names, both
    // CMIs hold some (8 left one of them none about once in 128 runs).
    let names = d.counters(64);
    let (client, relays) = d.relayed_client();
    let cads = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        Config::default(),
    );
    let down = on_cmi(&cads, &names, counter_key, 0);
    let up = on_cmi(&cads, &names, counter_key, 1);
    for n in [&down, &up] {
        assert_eq!(cads.run(|s| s.read(&Counters, n)).unwrap(), 0, "cached");
    }
    let mut tx = d.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(
        "UPDATE counters SET value = 5 WHERE name = ?",
        &[SqlValue::Text(up.clone())],
    )
    .unwrap();
    tx.commit().unwrap();
    relays[0].set_cut(true);
    let read = cads
        .run(|s| {
            assert!(!s.degraded(), "nothing failed yet");
            let first = s.read(&Counters, &down)?;
            assert!(s.degraded(), "CMI 0 could not be reached");
            Ok((first, s.read(&Counters, &up)?))
        })
        .unwrap();
    assert_eq!(read, (0, 5), "both from the data store");
    relays[0].set_cut(false);

    let d = Deployment::start(Policy::WriteBack);
    let (client, relays) = d.relayed_client();
    let cads = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteBack,
        Config::default(),
    );
    let docs = Collection::create(&cads, "tallies").unwrap();
    let ids: Vec<String> = (0..64).map(|i| format!("t{i}")).collect();
    for id in &ids {
        d.store
            .put("tallies", id, json!({"n": 0}).as_object().unwrap())
            .unwrap();
    }
    let id = on_cmi(&cads, &ids, |i| docs.key(i), 1);
    relays[1].set_cut(true);
    let refused = cads.run(|s| {
        docs.get(s, &id)?;
        docs.update(
            s,
            &id,
            Changes::from_json(&json!({"$set": {"n": 1}})).unwrap(),
        )
    });
    match refused {
        Err(Error::Cache(ClientError::Unavailable { cmi, .. })) => assert_eq!(cmi, 1),
        other => panic!("{other:?}"),
    }
    relays[1].set_cut(false);
    assert_eq!(
        d.store.get("tallies", &id).unwrap().unwrap()["n"],
        json!(0),
        "nothing written"
    );
}
