//! Gemini's fences (`fencing.rs`): a CMI of a Gemini configuration serves keys only under a lease
//! from the coordinator, set on its own monotonic clock; and it refuses the sessions of clients
//! that route by an older configuration than it knows.

mod common;

use cads_protocol::{ErrorKind, Reply};
use common::Cmi;

/// Every kind of command that reads or writes keys: plain, session and IQ.
const KEY_COMMANDS: [&str; 6] = [
    "GET k",
    "SET k v",
    "DEL k",
    "LGET 1 k",
    "IQGET 2 k",
    "QAREG 3 k",
];

fn gemini_cmi() -> Cmi {
    let mut cmi = Cmi::wt();
    cmi.ok("CONFIGID 5");
    cmi.ok("FRAGMENTS 4");
    cmi
}

/// `[now, until]` as INSTANCELEASE reports them.
fn lease(cmi: &mut Cmi) -> (i64, i64) {
    match cmi.run("INSTANCELEASE") {
        Reply::Array(a) => match a.as_slice() {
            [Reply::Int(now), Reply::Int(until)] => (*now, *until),
            other => panic!("INSTANCELEASE: {other:?}"),
        },
        other => panic!("INSTANCELEASE: {other:?}"),
    }
}

#[test]
fn without_fragments_there_is_no_fence() {
    let mut cmi = Cmi::wt();
    for line in KEY_COMMANDS {
        assert!(
            !matches!(cmi.run(line), Reply::Error(ref e) if e.kind == ErrorKind::Fenced),
            "{line}"
        );
    }
}

#[test]
fn keys_are_served_only_while_the_instance_lease_runs() {
    let mut cmi = gemini_cmi();
    // Never granted (a CMI that just started, or restarted from its log): fenced.
    assert_eq!(lease(&mut cmi), (cmi.now as i64, 0));
    for line in KEY_COMMANDS {
        assert_eq!(cmi.err(line), ErrorKind::Fenced, "{line}");
    }
    // The coordinator's commands and metadata are not fenced.
    assert_eq!(cmi.int("CONFIGID"), 5);
    cmi.ok("FRAGMENTID 1 5");
    cmi.ok("PINSET gemini:configuration {}");
    assert_eq!(cmi.inspect("gemini:configuration", "pinned"), Reply::Int(1));
    cmi.ok("LABORT 1");

    // A grant read from the clock: served until its end, not a millisecond longer.
    let (now, _) = lease(&mut cmi);
    cmi.ok(&format!("INSTANCELEASE {}", now + 1_000));
    assert_eq!(lease(&mut cmi), (now, now + 1_000));
    cmi.ok("SET k v");
    assert_eq!(cmi.value("GET k"), "v");
    cmi.advance(999);
    assert_eq!(cmi.value("GET k"), "v");
    cmi.advance(1);
    for line in KEY_COMMANDS {
        assert_eq!(cmi.err(line), ErrorKind::Fenced, "{line}");
    }

    // A grant that arrives after the end it names (the process was frozen, the network slow)
    // grants nothing.
    cmi.ok(&format!("INSTANCELEASE {}", now + 1_000));
    assert_eq!(cmi.err("GET k"), ErrorKind::Fenced);
    let (now, _) = lease(&mut cmi);
    cmi.ok(&format!("INSTANCELEASE {}", now + 10));
    assert_eq!(
        cmi.value("GET k"),
        "v",
        "renewed, the content is served again"
    );
}

#[test]
fn sessions_of_an_older_configuration_are_refused() {
    let mut cmi = gemini_cmi();
    cmi.ok("INSTANCELEASE 999999999999");
    assert_eq!(cmi.err("LCONFIG 4 4"), ErrorKind::StaleConfig);
    assert_eq!(
        cmi.err("LGET 4 a"),
        ErrorKind::StaleConfig,
        "the commands pipelined after a refused LCONFIG are refused too"
    );
    cmi.ok("LABORT 4");
    cmi.ok("LCONFIG 1 5");
    cmi.run("LGET 1 a");
    cmi.ok("LSET 1 a 1");
    // A session that names no configuration is not checked.
    cmi.run("LGET 2 b");

    // The coordinator publishes a new configuration.
    cmi.ok("CONFIGID 6");
    let refusal = match cmi.run("LSET 1 a 2") {
        Reply::Error(e) => e,
        other => panic!("LSET: {other:?}"),
    };
    assert_eq!(refusal.kind, ErrorKind::StaleConfig);
    assert_eq!(refusal.latest_config(), Some(6), "{refusal}");
    assert_eq!(
        cmi.err("LCOMMIT 1"),
        ErrorKind::StaleConfig,
        "nor committed"
    );
    cmi.ok("LABORT 1");
    assert_eq!(
        cmi.cached("a"),
        None,
        "what the session staged never landed"
    );
    assert_eq!(cmi.err("LCONFIG 3 5"), ErrorKind::StaleConfig);
    cmi.ok("LCONFIG 3 6");
    cmi.run("LGET 3 a");
    cmi.ok("LSET 3 a 2");
    cmi.ok("LCOMMIT 3");
    assert_eq!(cmi.cached("a").as_deref(), Some("2"));
    cmi.ok("LSET 2 b 1");
    cmi.ok("LCOMMIT 2");
}

#[test]
fn a_newer_configuration_than_the_cmi_knows_is_accepted() {
    // The client fetched a configuration the coordinator is still publishing.
    let mut cmi = gemini_cmi();
    cmi.ok("INSTANCELEASE 999999999999");
    cmi.ok("LCONFIG 1 9");
    assert_eq!(cmi.int("IQGET 1 k"), 0);
    assert_eq!(cmi.int("IQSET 1 k v"), 1);
}
