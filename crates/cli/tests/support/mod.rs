//! What the command's tests share (each test binary uses a part of it).
#![allow(dead_code)]

use std::process::Output;

/// Standard error of a finished command.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that a `cads bench` command failed (status 1) because run `run` (`bg 90 write-around
/// #0`) read stale values, and said so; returns its standard error.
pub fn assert_failed_on_stale_reads(out: &Output, run: &str) -> String {
    let log = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains(&format!("inconsistent: {run}:")), "{log}");
    assert!(log.contains("stale reads"), "{log}");
    log
}
