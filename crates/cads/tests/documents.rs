//! The document layer under both policies: reads cached per document, change operators applied
//! to the stored and the cached copy alike, concurrent updates exact.

mod common;

use cads::documents::Collection;
use cads::{Cads, Config, Policy};
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

/// `Cads::read`: a hit is one plain GET (one round trip, no lease), a miss fills the cache as a
/// session does, every read returns the latest acknowledged write, and a write that has not
/// committed yet is never seen, under every caching policy.
#[test]
fn a_read_alone_hits_in_one_round_trip_and_is_never_stale() {
    for policy in [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack] {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let users = Collection::create(&cads, "users").unwrap();
        cads.run(|s| users.insert(s, "alice", doc(json!({"visits": 0}))))
            .unwrap();
        let visits = || users.read(&cads, "alice").unwrap().unwrap()["visits"].clone();
        assert_eq!(visits(), json!(0), "{policy:?}: the miss");
        let client = cads.cache().unwrap();
        let before = client.round_trips();
        d.faults.reset_counts();
        assert_eq!(visits(), json!(0));
        assert_eq!(client.round_trips() - before, 1, "{policy:?}: a hit");
        assert_eq!(d.faults.counts().reads, 0, "{policy:?}: a hit");

        let add = changes(json!({"$inc": {"visits": 1}}));
        cads.run(|s| users.update(s, "alice", add.clone())).unwrap();
        assert_eq!(visits(), json!(1), "{policy:?}: read after write");

        // A writer between pre-commit and commit holds its leases: a read alone sees the value
        // committed before it, not the writer's, and does not wait for it.
        let mut writer = cads.session();
        users.update(&mut writer, "alice", add.clone()).unwrap();
        writer.pre_commit().unwrap();
        assert_eq!(visits(), json!(1), "{policy:?}: an uncommitted write");
        writer.commit().unwrap();
        assert_eq!(visits(), json!(2), "{policy:?}: after its commit");

        // The entry gone (evicted) while write-back's buffered writes are pending: the miss
        // still reads the latest write.
        client.delete(&users.key("alice")).unwrap();
        assert_eq!(visits(), json!(2), "{policy:?}: a miss after eviction");
        assert_eq!(visits(), json!(2), "{policy:?}: the hit after the fill");
    }
}

/// Inserts `{"visits": 0}` under each id, in one session.
fn insert_unvisited(cads: &Cads, users: &Collection, ids: &[&str]) {
    cads.run(|s| {
        for id in ids {
            users.insert(s, id, doc(json!({"visits": 0})))?;
        }
        Ok(())
    })
    .unwrap();
}

/// The `visits` of each id's document, read each on its own (`None`: no document).
fn visits_each(cads: &Cads, users: &Collection, ids: &[&str]) -> Vec<Option<serde_json::Value>> {
    users
        .read_each_text(cads, ids)
        .unwrap()
        .into_iter()
        .map(|t| t.map(|t| t.to_document().unwrap()["visits"].clone()))
        .collect()
}

/// Documents each read on its own (`read_each_text`) are the documents, under every policy:
/// cached ones on both CMIs take one round trip and no data-store read, the others one
/// data-store call for the whole list; a write acknowledged before the read shows, a write not
/// committed yet does not (and is not waited for), a miss behind write-back's buffered write reads
/// the latest write, and a cached value that is not a JSON object is not served.
#[test]
fn documents_read_each_on_their_own_are_the_latest() {
    for policy in [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
        Policy::WriteBack,
    ] {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let users = Collection::create(&cads, "users").unwrap();
        // Four documents on each CMI (their ports, hence the placement, differ from run to run).
        let mut names: Vec<String> = (0..64).map(|i| format!("user{i}")).collect();
        if let Some(client) = cads.cache() {
            let on = |cmi: usize| -> Vec<String> {
                let on_cmi = names.iter().filter(|n| client.route(&users.key(n)) == cmi);
                on_cmi.take(4).cloned().collect()
            };
            names = [on(0), on(1)].concat();
        } else {
            names.truncate(8);
        }
        let ids: Vec<&str> = names.iter().map(String::as_str).collect();
        insert_unvisited(&cads, &users, &ids);
        let visits = |ids: &[&str]| visits_each(&cads, &users, ids);
        if let Some(client) = cads.cache() {
            for id in &ids {
                client.delete(&users.key(id)).unwrap();
            }
        }
        d.faults.reset_counts();
        assert_eq!(
            visits(&ids),
            vec![Some(json!(0)); 8],
            "{policy:?}: the misses"
        );
        assert_eq!(
            d.faults.counts().reads,
            1,
            "{policy:?}: one call for the list"
        );
        assert_eq!(visits(&[ids[1], "nobody"]), vec![Some(json!(0)), None]);
        assert!(users.read_each_text(&cads, &[]).unwrap().is_empty());

        let add = changes(json!({"$inc": {"visits": 1}}));
        cads.run(|s| users.update(s, ids[3], add.clone())).unwrap();
        let mut after = vec![Some(json!(0)); 8];
        after[3] = Some(json!(1));
        assert_eq!(visits(&ids), after, "{policy:?}: read after write");
        let in_session = cads.run(|s| users.get_many_text(s, &ids)).unwrap();
        assert_eq!(in_session, users.read_each_text(&cads, &ids).unwrap());

        let Some(client) = cads.cache() else {
            continue;
        };
        assert_eq!(ids.len(), 8, "four documents on each CMI");
        let before = client.round_trips();
        d.faults.reset_counts();
        assert_eq!(visits(&ids), after);
        assert_eq!(client.round_trips() - before, 1, "{policy:?}: the hits");
        assert_eq!(d.faults.counts().reads, 0, "{policy:?}: the hits");

        // A writer between pre-commit and commit holds its leases: the reads see the values
        // committed before it, and do not wait for it.
        let mut writer = cads.session();
        users.update(&mut writer, ids[5], add.clone()).unwrap();
        writer.pre_commit().unwrap();
        let before = client.round_trips();
        assert_eq!(visits(&ids), after, "{policy:?}: an uncommitted write");
        assert_eq!(
            client.round_trips() - before,
            1,
            "{policy:?}: not waited for"
        );
        writer.commit().unwrap();
        after[5] = Some(json!(1));
        assert_eq!(visits(&ids), after, "{policy:?}: after its commit");

        // Evicted while write-back's buffered write is pending: the miss applies it first.
        client.delete(&users.key(ids[5])).unwrap();
        assert_eq!(visits(&ids), after, "{policy:?}: a miss after eviction");
        // Not a JSON object (a value no framework session wrote): read from the data store.
        client.set(&users.key(ids[3]), b"[1, 2]").unwrap();
        assert_eq!(
            visits(&ids),
            after,
            "{policy:?}: a value that is no document"
        );
    }
}

/// Documents read each on their own while one of their CMIs is out of reach come from the data
/// store, those on the CMI still reached included: the read neither fails nor mixes the cache's
/// values with the store's (which differ here: the store changed behind the cache's back).
#[test]
fn documents_read_each_with_a_cmi_out_of_reach_come_from_the_data_store() {
    let d = Deployment::start(Policy::WriteThrough);
    let (client, relays) = d.relayed_client();
    let cads = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        Config::default(),
    );
    let users = Collection::create(&cads, "users").unwrap();
    let names: Vec<String> = (0..64).map(|i| format!("user{i}")).collect();
    let client = cads.cache().unwrap();
    let on = |cmi| {
        names
            .iter()
            .find(|n| client.route(&users.key(n)) == cmi)
            .expect("a name on each CMI")
            .as_str()
    };
    let ids = [on(0), on(1)];
    insert_unvisited(&cads, &users, &ids);
    let visits = || visits_each(&cads, &users, &ids);
    assert_eq!(visits(), [Some(json!(0)), Some(json!(0))], "cached");
    for id in ids {
        d.store
            .put("users", id, &doc(json!({"visits": 7})))
            .unwrap();
    }
    relays[0].set_cut(true);
    assert_eq!(
        visits(),
        [Some(json!(7)), Some(json!(7))],
        "both from the data store"
    );
    relays[0].set_cut(false);
}

/// A document read as its text is the document read as a tree, under every policy: the miss fills
/// the entry the tree's reads hit and the other way round, a hit takes one round trip, a miss
/// behind write-back's buffered writes reads the latest write, and a cached value that is not a
/// JSON object is not served.
#[test]
fn a_document_read_as_text_is_the_document() {
    for policy in [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
        Policy::WriteBack,
    ] {
        let d = Deployment::start(policy);
        let cads = d.cads(Config::default());
        let users = Collection::create(&cads, "users").unwrap();
        let alice = doc(json!({"name": "Al \"ice\"", "visits": 0, "tags": ["a"]}));
        cads.run(|s| users.insert(s, "alice", alice.clone()))
            .unwrap();
        let text = || users.read_text(&cads, "alice").unwrap().unwrap();
        assert_eq!(text().to_document().unwrap(), alice, "{policy:?}: the miss");
        let tree = || users.read(&cads, "alice").unwrap().unwrap();
        assert_eq!(tree(), alice, "{policy:?}: the text's fill");
        assert!(users.read_text(&cads, "bob").unwrap().is_none());
        let add = changes(json!({"$inc": {"visits": 1}}));
        cads.run(|s| users.update(s, "alice", add.clone())).unwrap();
        assert_eq!(tree(), text().to_document().unwrap(), "{policy:?}");
        assert_eq!(text().to_document().unwrap()["visits"], json!(1));
        let Some(client) = cads.cache() else {
            continue;
        };
        let before = client.round_trips();
        d.faults.reset_counts();
        text();
        assert_eq!(client.round_trips() - before, 1, "{policy:?}: a hit");
        assert_eq!(d.faults.counts().reads, 0, "{policy:?}: a hit");
        // Evicted while write-back's buffered write is pending: the miss applies it first.
        client.delete(&users.key("alice")).unwrap();
        assert_eq!(
            text().to_document().unwrap()["visits"],
            json!(1),
            "{policy:?}"
        );
        // Not a JSON object (a value no framework session wrote): read from the data store.
        client.set(&users.key("alice"), b"[1, 2]").unwrap();
        assert_eq!(
            text().to_document().unwrap()["visits"],
            json!(1),
            "{policy:?}"
        );
        let in_session = cads.run(|s| users.get_text(s, "alice")).unwrap().unwrap();
        assert_eq!(in_session.to_document().unwrap(), tree());
    }
}
