//! `scripts/fuzz-smoke`, which CI runs after the tests, must not pass quietly when cargo-fuzz cannot
//! run there: under `CADS_REQUIRE_SERVICES=1` it fails, elsewhere it skips with a message. Here
//! cargo-fuzz "cannot run" because the cargo the script is given (`FUZZ_CARGO=false`) fails.

use std::path::Path;
use std::process::{Command, Output};

fn smoke(require_services: Option<&str>) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fuzz-smoke");
    let mut command = Command::new("bash");
    command.arg(script).env("FUZZ_CARGO", "false");
    match require_services {
        Some(value) => command.env("CADS_REQUIRE_SERVICES", value),
        None => command.env_remove("CADS_REQUIRE_SERVICES"),
    };
    command.output().expect("bash runs scripts/fuzz-smoke")
}

#[test]
fn fuzz_smoke_fails_in_ci_when_cargo_fuzz_cannot_run() {
    let ci = smoke(Some("1"));
    assert!(!ci.status.success(), "CI must fail: {ci:?}");
    assert!(String::from_utf8_lossy(&ci.stderr).contains("cargo-fuzz cannot run"));
    for elsewhere in [None, Some("0")] {
        let out = smoke(elsewhere);
        assert!(out.status.success(), "a friendly skip: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("replayed corpora only"));
    }
}
