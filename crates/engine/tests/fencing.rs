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
            [Reply::Int(now), Reply::Int(until), Reply::Int(_boot)] => (*now, *until),
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
        "a refused LCONFIG ends the session: the commands pipelined after it are refused too"
    );
    cmi.ok("LABORT 4");
    cmi.ok("SET held old");
    cmi.ok("LCONFIG 1 5");
    cmi.run("LGET 1 a");
    cmi.ok("LSET 1 a 1");
    cmi.ok("LSET 1 held new");
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
    assert_eq!(
        cmi.cached("held"),
        None,
        "a key it held exclusively goes, as on expiry: its data-store write may have happened"
    );
    assert_eq!(cmi.err("LCONFIG 3 5"), ErrorKind::StaleConfig);
    assert_eq!(
        cmi.err("LCONFIG 3 6"),
        ErrorKind::Abort,
        "a refused session is over"
    );
    cmi.ok("LCONFIG 7 6");
    cmi.run("LGET 7 a");
    cmi.ok("LSET 7 a 2");
    cmi.ok("LCOMMIT 7");
    assert_eq!(cmi.cached("a").as_deref(), Some("2"));
    cmi.ok("LSET 2 b 1");
    cmi.ok("LCOMMIT 2");
}

/// The coordinator tells every instance that may serve a configuration before any client can
/// learn it: a CMI that knows an older one was not told (it restarted, or was cut off).
#[test]
fn a_session_of_a_newer_configuration_than_the_cmi_knows_is_fenced() {
    let mut cmi = gemini_cmi();
    cmi.ok("INSTANCELEASE 999999999999");
    assert_eq!(cmi.err("LCONFIG 1 9"), ErrorKind::Fenced);
    assert_eq!(cmi.err("IQGET 1 k"), ErrorKind::Fenced);
    // A volatile CMI that restarted has no fragments and no ids at all.
    let mut restarted = Cmi::wt();
    assert_eq!(restarted.err("LCONFIG 2 5"), ErrorKind::Fenced);
    assert_eq!(restarted.err("LGET 2 k"), ErrorKind::Abort);
}

#[test]
fn a_grant_for_another_incarnation_is_refused() {
    let mut cmi = gemini_cmi();
    cmi.engine.set_boot_id(42);
    let Reply::Array(read) = cmi.run("INSTANCELEASE") else {
        panic!("INSTANCELEASE");
    };
    assert_eq!(read[2], Reply::Int(42));
    let end = cmi.now + 1_000;
    assert_eq!(cmi.err(&format!("INSTANCELEASE {end} 41")), ErrorKind::Err);
    assert_eq!(cmi.err("GET k"), ErrorKind::Fenced);
    cmi.ok(&format!("INSTANCELEASE {end} 42"));
    assert_eq!(cmi.value_or_nil("GET k"), None);
}

#[test]
fn a_session_refused_by_the_lease_fence_loses_its_exclusive_keys() {
    let mut cmi = gemini_cmi();
    let end = cmi.now + 1_000;
    cmi.ok(&format!("INSTANCELEASE {end}"));
    cmi.ok("SET k old");
    assert_eq!(cmi.int("QAREG 1 k"), 0);
    cmi.advance(1_000);
    assert_eq!(cmi.err("DAR 1 k"), ErrorKind::Fenced);
    let end = cmi.now + 1_000;
    cmi.ok(&format!("INSTANCELEASE {end}"));
    assert_eq!(
        cmi.value_or_nil("GET k"),
        None,
        "the writer's commit never came: the value it replaced is gone when the CMI serves again"
    );
}
