//! A client of CMIs started with `--tls-cert`: with the CA that signed their certificate it
//! works, sessions over two CMIs included; every way of getting TLS wrong fails with
//! `ClientError::Tls` (or `TlsConfig`, for settings that cannot be used), saying what is wrong.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cads_client::{Client, ClientConfig, ClientError, RangeSource, TlsConfig, TlsIdentity};
use cads_testkit::{Cmis, TestCa};

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

fn client(cmis: &Cmis, tls: Option<TlsConfig>) -> Client {
    let mut config = ClientConfig::new(cmis.addrs().to_vec());
    config.tls = tls;
    Client::new(config, ranges())
}

/// Two keys that live on different CMIs.
fn keys_on_both(client: &Client) -> (Vec<u8>, Vec<u8>) {
    let first = b"k0".to_vec();
    let other = (1..)
        .map(|i| format!("k{i}").into_bytes())
        .find(|k| client.route(k) != client.route(&first))
        .unwrap();
    (first, other)
}

/// The reason of a `ClientError::Tls`, which must not read as a CMI that is down.
fn tls_reason(error: ClientError) -> String {
    assert!(!error.is_unavailable(), "not a CMI that is down: {error:?}");
    match error {
        ClientError::Tls { reason, .. } => reason,
        other => panic!("not a TLS error: {other:?}"),
    }
}

#[test]
fn a_tls_client_runs_sessions_over_two_tls_cmis() {
    let ca = TestCa::new();
    let cmis = Cmis::start_with(2, |o| {
        o.mode = Some("write-through".into());
        ca.serve_tls(o);
    });
    let client = client(&cmis, Some(ca.client_tls()));
    let (a, b) = keys_on_both(&client);
    client.set(&a, b"1").unwrap();
    client.set(&b, b"2").unwrap();
    let mut session = client.session();
    assert_eq!(session.get(&a, true).unwrap(), Some(b"1".to_vec()));
    assert_eq!(session.get(&b, true).unwrap(), Some(b"2".to_vec()));
    session.set(&a, b"10", false).unwrap();
    session.set(&b, b"20", false).unwrap();
    session.validate().unwrap();
    session.commit().unwrap();
    assert_eq!(client.get(&a).unwrap(), Some(b"10".to_vec()));
    assert_eq!(client.get(&b).unwrap(), Some(b"20".to_vec()));

    // Large values, and the name the certificate carries rather than the CMI's address.
    let named = ca
        .client_tls()
        .with_server_name("localhost".parse().unwrap());
    let client = self::client(&cmis, Some(named));
    let large = vec![b'x'; 3 << 20];
    client.set(&a, &large).unwrap();
    assert_eq!(client.get(&a).unwrap(), Some(large));
}

#[test]
fn a_plaintext_client_is_refused_by_a_tls_cmi() {
    let ca = TestCa::new();
    let cmis = Cmis::start_with(1, |o| ca.serve_tls(o));
    let reason = tls_reason(client(&cmis, None).get(b"k").unwrap_err());
    assert!(
        reason.contains("serves TLS only and this client speaks plaintext"),
        "{reason}"
    );
}

#[test]
fn a_tls_client_of_a_plaintext_cmi_fails_saying_so() {
    let ca = TestCa::new();
    let cmis = Cmis::start(1, "write-through");
    let reason = tls_reason(client(&cmis, Some(ca.client_tls())).get(b"k").unwrap_err());
    assert!(reason.contains("does not serve TLS"), "{reason}");
}

#[test]
fn an_untrusted_certificate_or_another_name_fails_saying_so() {
    let ca = TestCa::new();
    let cmis = Cmis::start_with(1, |o| ca.serve_tls(o));
    let other = TestCa::new();
    let reason = tls_reason(
        client(&cmis, Some(other.client_tls()))
            .get(b"k")
            .unwrap_err(),
    );
    assert!(reason.contains("certificate is not trusted"), "{reason}");

    let elsewhere = ca
        .client_tls()
        .with_server_name("cmi.elsewhere.example".parse().unwrap());
    let reason = tls_reason(client(&cmis, Some(elsewhere)).get(b"k").unwrap_err());
    assert!(
        reason.contains("not valid for \"cmi.elsewhere.example\""),
        "{reason}"
    );
}

#[test]
fn cmis_with_tls_ca_serve_only_clients_with_a_certificate_it_signed() {
    let ca = TestCa::new();
    let cmis = Cmis::start_with(1, |o| {
        ca.serve_tls(o);
        o.tls_ca = Some(ca.ca_file());
    });
    let with = ca.client_tls().with_identity(ca.client_identity());
    client(&cmis, Some(with)).set(b"k", b"v").unwrap();

    let reason = tls_reason(client(&cmis, Some(ca.client_tls())).get(b"k").unwrap_err());
    assert!(reason.contains("requires a client certificate"), "{reason}");

    let stranger = TestCa::new();
    let with_theirs = ca.client_tls().with_identity(stranger.client_identity());
    let reason = tls_reason(client(&cmis, Some(with_theirs)).get(b"k").unwrap_err());
    assert!(
        reason.contains("refused this client's certificate"),
        "{reason}"
    );
}

#[test]
fn unusable_tls_settings_are_errors_when_built() {
    let ca = TestCa::new();
    let other = TestCa::new();
    let setting_error = |result: Result<(), ClientError>| match result {
        Err(ClientError::TlsConfig(reason)) => reason,
        other => panic!("not a settings error: {other:?}"),
    };
    let read = |path: &Path| std::fs::read(path).unwrap();
    let cases: Vec<(Result<(), ClientError>, &str)> = vec![
        (
            TlsConfig::new(b"not PEM").map(drop),
            "no PEM CA certificate",
        ),
        (
            TlsConfig::from_ca_file(Path::new("/nonexistent/ca.pem")).map(drop),
            "cannot read the CA file /nonexistent/ca.pem",
        ),
        (
            TlsConfig::from_ca_file(&ca.cmi_key_file()).map(drop),
            "no PEM CA certificate",
        ),
        (
            TlsIdentity::from_pem(&read(&ca.cmi_cert_file())).map(drop),
            "no private key",
        ),
        (
            TlsIdentity::from_pem(
                &[read(&ca.cmi_cert_file()), read(&other.cmi_key_file())].concat(),
            )
            .map(drop),
            "do not go together",
        ),
        (
            "not a name!".parse::<cads_client::TlsName>().map(drop),
            "neither a DNS name",
        ),
    ];
    for (result, expected) in cases {
        let reason = setting_error(result);
        assert!(reason.contains(expected), "{expected:?} not in: {reason}");
    }
    assert!(
        TlsIdentity::from_pem(&[read(&ca.cmi_cert_file()), read(&ca.cmi_key_file())].concat())
            .is_ok()
    );
}
