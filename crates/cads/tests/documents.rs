//! The document layer under both policies: reads cached per document, change operators applied
//! to the stored and the cached copy alike, concurrent updates exact.

mod common;

use cads::documents::Collection;
use cads::{Config, Policy};
use cads_store::{Changes, Document};
use common::Deployment;
use serde_json::json;

fn doc(v: serde_json::Value) -> Document {
    v.as_object().unwrap().clone()
}

fn changes(v: serde_json::Value) -> Changes {
    Changes::from_json(&v).unwrap()
}

#[test]
fn documents_are_cached_and_kept_consistent() {
    for policy in [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
    ] {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let users = Collection::create(&cads, "users").unwrap();
        cads.run(|s| {
            users.insert(
                s,
                "alice",
                doc(json!({"name": "Alice", "visits": 0, "tags": []})),
            )
        })
        .unwrap();
        let get = || cads.run(|s| users.get(s, "alice")).unwrap().unwrap();
        assert_eq!(get()["visits"], json!(0));
        d.faults.reset_counts();
        assert_eq!(get()["name"], json!("Alice"));
        let store_reads = d.faults.counts().reads;
        if policy == Policy::DataStoreOnly {
            assert_eq!(store_reads, 1);
        } else {
            assert_eq!(store_reads, 0, "{policy:?}: the second read is a cache hit");
        }
        cads.run(|s| {
            users.update(
                s,
                "alice",
                changes(json!({"$inc": {"visits": 2}, "$push": {"tags": "x"}})),
            )
        })
        .unwrap();
        let after = get();
        assert_eq!(after["visits"], json!(2), "{policy:?}");
        assert_eq!(after["tags"], json!(["x"]));
        assert_eq!(
            d.store.get("users", "alice").unwrap().unwrap(),
            after,
            "{policy:?}: cache and store agree"
        );
        cads.run(|s| users.delete(s, "alice")).unwrap();
        assert!(cads.run(|s| users.get(s, "alice")).unwrap().is_none());
    }
}

#[test]
fn an_aborted_session_writes_nothing() {
    let d = Deployment::start(Policy::WriteThrough);
    let cads = d.cads(Config::default());
    let users = Collection::create(&cads, "users").unwrap();
    cads.run(|s| users.put(s, "bob", doc(json!({"n": 1}))))
        .unwrap();
    let mut s = cads.session();
    users
        .update(&mut s, "bob", changes(json!({"$inc": {"n": 1}})))
        .unwrap();
    s.abort();
    assert_eq!(d.store.get("users", "bob").unwrap().unwrap()["n"], json!(1));
    assert_eq!(
        cads.run(|s| users.get(s, "bob")).unwrap().unwrap()["n"],
        json!(1)
    );
}

#[test]
fn concurrent_increments_are_exact_in_store_and_cache() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let counters = Collection::create(&cads, "tallies").unwrap();
        cads.run(|s| counters.put(s, "hits", doc(json!({"n": 0, "log": []}))))
            .unwrap();
        let (threads, each) = (6, 40);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (cads, counters) = (&cads, &counters);
                scope.spawn(move || {
                    for i in 0..each {
                        cads.run(|s| {
                            // Read (and so cache) the document, then change it.
                            counters.get(s, "hits")?;
                            counters.update(
                                s,
                                "hits",
                                changes(
                                    json!({"$inc": {"n": 1}, "$push": {"log": format!("{t}-{i}")}}),
                                ),
                            )
                        })
                        .unwrap();
                    }
                });
            }
        });
        let stored = d.store.get("tallies", "hits").unwrap().unwrap();
        assert_eq!(stored["n"], json!(threads * each), "{policy:?}");
        assert_eq!(stored["log"].as_array().unwrap().len(), threads * each);
        let cached = cads.run(|s| counters.get(s, "hits")).unwrap().unwrap();
        assert_eq!(
            cached, stored,
            "{policy:?}: the cache agrees with the store"
        );
    }
}
