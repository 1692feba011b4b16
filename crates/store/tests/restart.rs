//! A PostgreSQL restart closes every pooled connection. The next read or transaction runs on a new
//! connection instead of failing once per pooled connection; a server that is really away still
//! fails the call. The server is the test's own.

use std::ops::Bound::Unbounded;
use std::time::Duration;

use cads_store::{open, Document, Isolation, StoreError, StoreOptions};
use cads_testkit::PrivatePostgres;
use serde_json::json;

#[test]
fn a_restarted_server_costs_no_call_an_error() {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let store = open(
        &pg.url(),
        &StoreOptions::default().with_timeout(Duration::from_secs(5)),
    )
    .unwrap();
    store.create_collection("docs", &[]).unwrap();
    let doc: Document = json!({"n": 1}).as_object().unwrap().clone();
    store.put("docs", "a", &doc).unwrap();
    // Several connections in the pool, all idle now.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut tx = store.begin_read(Isolation::ReadCommitted).unwrap();
                tx.query("SELECT pg_sleep(0.05)::text", &[]).unwrap();
            });
        }
    });

    pg.stop();
    let err = store.get("docs", "a").unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    pg.start_again();
    assert_eq!(store.get("docs", "a").unwrap(), Some(doc.clone()));

    pg.stop();
    pg.start_again();
    for _ in 0..4 {
        assert_eq!(store.get("docs", "a").unwrap(), Some(doc.clone()));
        assert_eq!(
            store
                .scan("docs", None, Unbounded, Unbounded, 10)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(store.count("docs").unwrap(), 1);
        store.begin_read(Isolation::ReadCommitted).unwrap();
        store
            .begin(Isolation::ReadCommitted)
            .unwrap()
            .commit()
            .unwrap();
    }
}
