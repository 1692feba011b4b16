//! The framework over CMIs that serve TLS (`Config::cache_tls`): sessions over two CMIs and
//! write-back's buffered writes travel encrypted, and a framework configured without TLS, or
//! trusting another CA, fails with an error saying so rather than reading the data store alone.

mod common;

use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, Buffering};
use cads::{Config, Policy};
use cads_client::ClientError;
use cads_testkit::TestCa;
use common::{changes, counter_key, doc, documents_config, Counters, Deployment};
use serde_json::json;

fn tls_deployment(policy: Policy, ca: &TestCa) -> Deployment {
    Deployment::start_with(policy, 2, |o| ca.serve_tls(o))
}

/// Two counters whose keys live on different CMIs.
fn counters_on_both(d: &Deployment, cads: &cads::Cads) -> (String, String) {
    // Placement follows the CMIs' addresses, which change from run to run: 64 counters leave
    // no CMI without one, in practice.
    let names = d.counters(64);
    let client = cads.cache().unwrap();
    let first = names[0].clone();
    let other = names
        .iter()
        .find(|n| client.route(&counter_key(n)) != client.route(&counter_key(&first)))
        .unwrap()
        .clone();
    (first, other)
}

#[test]
fn a_session_over_two_tls_cmis_commits_on_both() {
    let ca = TestCa::new();
    let d = tls_deployment(Policy::WriteThrough, &ca);
    let cads = d.cads(Config {
        cache_tls: Some(ca.client_tls()),
        ..Config::default()
    });
    let (a, b) = counters_on_both(&d, &cads);
    // Cached first, so that the session updates both CMIs' entries.
    assert_eq!(cads.read(&Counters, &a).unwrap(), 0);
    assert_eq!(cads.read(&Counters, &b).unwrap(), 0);
    cads.run(|s| {
        s.write(&Counters, &a)?;
        s.write(&Counters, &b)
    })
    .unwrap();
    let client = cads.cache().unwrap();
    for name in [&a, &b] {
        assert_eq!(d.stored(name), 1);
        assert_eq!(client.get(&counter_key(name)).unwrap(), Some(b"1".to_vec()));
        assert_eq!(cads.read(&Counters, name).unwrap(), 1);
    }
}

#[test]
fn write_back_buffers_and_applies_over_tls() {
    let ca = TestCa::new();
    let d = tls_deployment(Policy::WriteBack, &ca);
    let cads = d.cads(Config {
        cache_tls: Some(ca.client_tls()),
        ..documents_config(Buffering::ReadModifyWrite)
    });
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    for _ in 0..3 {
        cads.run(|s| users.update(s, "u1", changes(json!({"$inc": {"n": 1}}))))
            .unwrap();
    }
    assert_eq!(cads.write_back_stats().snapshot().buffered, 3);
    assert_eq!(users.read(&cads, "u1").unwrap().unwrap()["n"], json!(3));
    writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    assert_eq!(d.store.get("users", "u1").unwrap().unwrap()["n"], json!(3));
    assert!(writeback::pending(&cads).unwrap().is_empty());
}

#[test]
fn a_framework_without_the_right_tls_settings_fails_saying_so() {
    let ca = TestCa::new();
    let d = tls_deployment(Policy::WriteThrough, &ca);
    let (a, _) = {
        let cads = d.cads(Config {
            cache_tls: Some(ca.client_tls()),
            ..Config::default()
        });
        counters_on_both(&d, &cads)
    };

    let other = TestCa::new();
    for (tls, expected) in [
        (None, "this client speaks plaintext"),
        (Some(other.client_tls()), "certificate is not trusted"),
    ] {
        let cads = d.cads(Config {
            cache_tls: tls,
            ..Config::default()
        });
        for error in [
            cads.run(|s| s.write(&Counters, &a)).unwrap_err(),
            cads.read(&Counters, &a).unwrap_err(),
        ] {
            let text = error.to_string();
            assert!(text.contains(expected), "{text}");
            assert!(
                matches!(error, cads::Error::Cache(ClientError::Tls { .. })),
                "{error:?}"
            );
        }
    }
    assert_eq!(d.stored(&a), 0, "nothing was written around the cache");
}
