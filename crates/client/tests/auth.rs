//! A client of CMIs started with `requirepass`: with the password it works, sessions included;
//! without it, or with a wrong one, every call fails with `ClientError::Auth`, which says what is
//! missing.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cads_client::{Client, ClientConfig, ClientError, RangeSource};
use cads_testkit::Cmis;

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

fn client(cmis: &Cmis, password: Option<&str>) -> Client {
    let mut config = ClientConfig::new(cmis.addrs().to_vec());
    config.password = password.map(str::to_string);
    Client::new(config, ranges())
}

#[test]
fn requirepass_needs_the_password_and_says_so() {
    let cmis = Cmis::start_with(2, |o| {
        o.mode = Some("write-through".into());
        o.requirepass = Some("s3cret".into());
    });

    let good = client(&cmis, Some("s3cret"));
    good.set(b"k", b"v").unwrap();
    assert_eq!(good.get(b"k").unwrap(), Some(b"v".to_vec()));
    let mut session = good.session();
    assert_eq!(session.get(b"k", true).unwrap(), Some(b"v".to_vec()));
    session.set(b"k", b"w", false).unwrap();
    session.validate().unwrap();
    session.commit().unwrap();
    assert_eq!(good.get(b"k").unwrap(), Some(b"w".to_vec()));

    for password in [None, Some("wrong")] {
        let bad = client(&cmis, password);
        let e = bad.get(b"k").unwrap_err();
        assert!(matches!(e, ClientError::Auth { .. }), "{password:?}: {e:?}");
        assert!(!e.is_unavailable(), "not a CMI that is down");
        let text = e.to_string();
        assert!(text.contains("password"), "{text}");
        let mut session = bad.session();
        assert!(matches!(
            session.get(b"k", false),
            Err(ClientError::Auth { .. })
        ));
    }
}

#[test]
fn debug_output_hides_the_password() {
    let mut config = ClientConfig::new(vec!["127.0.0.1:7379".parse().unwrap()]);
    config.password = Some("s3cret".into());
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("hidden"),
        "{shown}"
    );
}
