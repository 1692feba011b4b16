//! What the server's integration tests share, on the test kit (`cads-testkit`): the kit's process
//! starters, raw RESP connection and service checks, plus starting this crate's own
//! `cads-server` binary.
//!
//! Use it from a test file with `mod support;`. Not every test file uses every helper.

#![allow(dead_code, unused_imports)]

use std::path::PathBuf;

use cads_testkit::cmis::Program;
pub use cads_testkit::cmis::{answers_ping, free_port, free_ports, ServerProcess, STARTUP_TIMEOUT};
pub use cads_testkit::resp::{show, RespConn, IO_TIMEOUT};
pub use cads_testkit::services::{
    find_on_path, require_redis_tool, require_tool, services_required, skip_or_fail, REDIS_PACKAGES,
};

/// Path of the cads-server binary that Cargo built for this test run.
pub fn cads_server_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cads-server"))
}

/// Starts `cads-server --port P --cmis N --log-level warn` on free ports, waits until every CMI
/// answers PING, and kills it on drop.
pub fn start_cads(cmis: u16) -> ServerProcess {
    start_cads_with(cmis, &["--log-level", "warn"])
}

/// Like [`start_cads`] with extra flags (everything but `--port` and `--cmis`).
pub fn start_cads_with(cmis: u16, extra: &[&str]) -> ServerProcess {
    ServerProcess::start_cmis(&Program::cads_server(cads_server_binary()), cmis, extra)
}

/// Starts `redis-server` on a free port without persistence; None (after a loud skip, or a panic
/// under `CADS_REQUIRE_SERVICES=1`) if it is not installed.
pub fn start_redis() -> Option<ServerProcess> {
    ServerProcess::start_redis()
}
