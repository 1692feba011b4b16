//! Tests that need a server or a tool the machine may lack skip loudly without it, and fail
//! instead when `CADS_REQUIRE_SERVICES=1` (CI sets it after `scripts/provision`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// The Debian packages that provide the Redis tools, for skip messages.
pub const REDIS_PACKAGES: &str = "install redis-server redis-tools (Debian)";

/// True when `CADS_REQUIRE_SERVICES=1`: a missing service then fails the test instead of skipping
/// it.
pub fn services_required() -> bool {
    std::env::var("CADS_REQUIRE_SERVICES").is_ok_and(|v| v.trim() == "1")
}

/// Reports that a test cannot run because `what` is missing. Under `CADS_REQUIRE_SERVICES=1` this
/// panics (the test fails); otherwise it prints a loud `SKIPPED:` line and the caller returns.
pub fn skip_or_fail(what: &str, hint: &str) {
    say_skipped(&format!("{what} not found; {hint} to run this test"));
}

/// [`skip_or_fail`] with the whole message given.
pub fn say_skipped(message: &str) {
    if services_required() {
        panic!("CADS_REQUIRE_SERVICES=1 but {message}");
    }
    // Straight to the stderr handle rather than through eprintln!, which the test harness
    // captures: a skip must show up without --nocapture.
    let bar = "=".repeat(72);
    let _ = writeln!(std::io::stderr(), "\n{bar}\nSKIPPED: {message}\n{bar}");
}

/// Looks `name` up on PATH (no shell involved).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Finds a tool on PATH; when it is missing, skips loudly (None: the test should return) or fails
/// under `CADS_REQUIRE_SERVICES=1`.
pub fn require_tool(name: &str, hint: &str) -> Option<PathBuf> {
    let found = find_on_path(name);
    if found.is_none() {
        skip_or_fail(name, hint);
    }
    found
}

/// [`require_tool`] for the Redis tools (`redis-server`, `redis-cli`, `redis-benchmark`).
pub fn require_redis_tool(name: &str) -> Option<PathBuf> {
    require_tool(name, REDIS_PACKAGES)
}
