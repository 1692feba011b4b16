//! The document layer refuses names, ids, documents and changes the data store could not take
//! when they enter, before anything reaches the cache: under write-back the data store sees a
//! write only when a worker applies it, too late to tell the writer, and a bad name or id would
//! corrupt write-back's keys and lists. A `CacheStore` that does not give a change for each key
//! a write changes is refused too.

mod common;

use std::time::Duration;

use cads::documents::Collection;
use cads::writeback;
use cads::{CacheChange, CacheStore, Config, Error, Policy, StoreTx, WriteBackConfig};
use cads_store::{Changes, Document, LimitExceeded, StoreError};
use common::Deployment;
use serde_json::json;

fn config() -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

/// The read side of a test `CacheStore` whose writes are all there is to it (`()` for each).
macro_rules! no_reads {
    () => {
        type Query = ();
        type Write = ();
        type Output = ();
        fn keys_read(&self, _: &()) -> Vec<Vec<u8>> {
            Vec::new()
        }
        fn result_from_cache(&self, _: &(), _: &[Vec<u8>]) -> Option<()> {
            Some(())
        }
        fn query_store(&self, _: &(), _: &mut StoreTx<'_>) -> Result<(), StoreError> {
            Ok(())
        }
        fn entries(&self, _: &(), _: &()) -> Vec<(Vec<u8>, Vec<u8>)> {
            Vec::new()
        }
    };
}

fn doc(v: serde_json::Value) -> Document {
    v.as_object().unwrap().clone()
}

#[test]
fn collection_names_are_checked_by_named() {
    for bad in [
        "a:b",
        "users:x",
        "",
        "Users",
        "cads_applied_sessions",
        "cads_collections",
    ] {
        assert!(
            matches!(
                Collection::named(bad),
                Err(Error::Store(StoreError::Invalid(_)))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(Collection::named("users").unwrap().name(), "users");
}

fn limit<T: std::fmt::Debug>(r: cads::Result<T>) -> bool {
    matches!(r, Err(Error::Store(StoreError::Limit(_))))
}

fn invalid<T: std::fmt::Debug>(r: cads::Result<T>) -> bool {
    matches!(r, Err(Error::Store(StoreError::Invalid(_))))
}

/// Under every policy (write-back buffering the write, the others writing the data store), a
/// bad id or a document or change past a bound is refused when the write is made, and nothing is
/// lost: what was written before stays, and the next good write goes through.
#[test]
fn bad_ids_and_documents_past_the_bounds_are_refused_and_lose_nothing() {
    use cads_store::limits::{MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_PATH_SEGMENTS};
    for policy in [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack] {
        let d = Deployment::start(policy);
        let cads = d.cads(config());
        let users = Collection::create(&cads, "users").unwrap();
        cads.run(|s| users.put(s, "u1", doc(json!({"n": 1}))))
            .unwrap();
        cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
            .unwrap();
        // Ids that would split write-back's lines.
        for id in ["a\nb", "a\rb", "\0"] {
            assert!(
                invalid(cads.run(|s| users.put(s, id, doc(json!({}))))),
                "{id:?}"
            );
            assert!(invalid(users.read(&cads, id)), "{id:?}");
        }
        // The 130 segments, too deep, too large.
        let path = vec!["a"; 130].join(".");
        let r = cads.run(|s| users.update(s, "u1", Changes::new().set(path.as_str(), 1)));
        assert!(
            matches!(
                r,
                Err(Error::Store(StoreError::Limit(
                    LimitExceeded::PathSegments { segments: 130, .. }
                )))
            ),
            "{policy:?}: {r:?}"
        );
        let segments = vec!["a"; MAX_PATH_SEGMENTS].join(".");
        let mut deep = json!(1);
        for _ in 0..MAX_DEPTH {
            deep = json!([deep]);
        }
        assert!(limit(cads.run(|s| users.update(
            s,
            "u1",
            Changes::new().set(segments.as_str(), deep.clone())
        ))));
        assert!(limit(cads.run(|s| users.put(
            s,
            "u2",
            doc(json!({ "d": deep.clone() }))
        ))));
        let big = doc(json!({ "s": "x".repeat(MAX_DOCUMENT_BYTES) }));
        assert!(limit(cads.run(|s| users.insert(s, "u2", big.clone()))));
        // Nothing was lost, nothing bad was buffered, and writing goes on.
        cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
            .unwrap();
        if policy == Policy::WriteBack {
            writeback::drain(&cads, Duration::from_secs(10)).unwrap();
        }
        assert_eq!(
            d.store.get("users", "u1").unwrap(),
            Some(doc(json!({"n": 3}))),
            "{policy:?}"
        );
        assert_eq!(d.store.get("users", "u2").unwrap(), None);
        assert_eq!(users.read(&cads, "u1").unwrap(), Some(doc(json!({"n": 3}))));
    }
}

/// A `CacheStore` buffering Design 1 writes of a document whose collection name the data store
/// would refuse (`:` would make a worker apply it to another collection) fails at the write.
#[test]
fn buffered_writes_of_bad_documents_fail_when_made() {
    struct Raw(cads::DocRef);
    impl CacheStore for Raw {
        no_reads!();
        fn keys_written(&self, _: &()) -> Vec<Vec<u8>> {
            vec![b"raw".to_vec()]
        }
        fn write_store(&self, _: &(), _: &mut StoreTx<'_>) -> Result<(), StoreError> {
            Ok(())
        }
        fn cache_change(&self, _: &(), _: &[u8]) -> CacheChange {
            CacheChange::Delete
        }
        fn buffer(&self, _: &()) -> Vec<(cads::DocRef, cads_store::DocOp)> {
            vec![(self.0.clone(), cads_store::DocOp::Delete)]
        }
    }
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(config());
    Collection::create(&cads, "users").unwrap();
    for (collection, id) in [
        ("users:admins", "x"),
        ("users", "a\nb"),
        ("cads_collections", "x"),
    ] {
        let raw = Raw(cads::DocRef {
            collection: collection.into(),
            id: id.into(),
        });
        assert!(
            invalid(cads.run(|s| s.write(&raw, &()))),
            "{collection} {id:?}"
        );
    }
    assert!(writeback::pending(&cads).unwrap().is_empty());
    assert_eq!(cads.write_back_stats().snapshot().buffered, 0);
}

/// A write whose `CacheStore` gives fewer cache changes than the keys it writes is an error, not
/// a write that leaves some of its keys' cached values as they were.
#[test]
fn a_write_without_a_change_for_each_key_is_refused() {
    struct Short;
    impl CacheStore for Short {
        no_reads!();
        fn keys_written(&self, _: &()) -> Vec<Vec<u8>> {
            vec![b"short:a".to_vec(), b"short:b".to_vec()]
        }
        fn write_store(&self, _: &(), _: &mut StoreTx<'_>) -> Result<(), StoreError> {
            Ok(())
        }
        fn cache_change(&self, _: &(), _: &[u8]) -> CacheChange {
            CacheChange::Set(b"new".to_vec())
        }
        fn cache_changes(&self, _: &(), _: &[Vec<u8>]) -> Vec<CacheChange> {
            vec![CacheChange::Set(b"new".to_vec())]
        }
    }
    let d = Deployment::start(Policy::WriteThrough);
    let cads = d.cads(config());
    let refused = cads.run(|s| s.write(&Short, &()));
    assert!(
        matches!(&refused, Err(Error::App(m)) if m.contains("1 cache changes for a write of 2 keys")),
        "{refused:?}"
    );
    let client = cads.cache().unwrap();
    assert_eq!(client.get(b"short:a").unwrap(), None, "nothing was set");
}
