//! A PostgreSQL server of a test's own, in a scratch directory on a free port: tests that stop
//! or freeze the data store must not do it to the shared server other tests use. Built with the
//! installed server's `initdb` and `pg_ctl` (run as the `postgres` user when the test runs as
//! root, since PostgreSQL refuses to run as root); stopped and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmis::free_port;
use crate::scratch::unique_name;
use crate::services::say_skipped;

/// A private PostgreSQL server: fsync off, trust authentication on loopback, superuser `cads`.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// The user the server runs as, when the test runs as root.
    run_as: Option<String>,
}

impl PrivatePostgres {
    /// Creates and starts a server; None (after a loud skip, or a failure under
    /// `CADS_REQUIRE_SERVICES=1`) when no PostgreSQL server is installed.
    pub fn start() -> Option<PrivatePostgres> {
        let Some(bin) = server_bin() else {
            say_skipped(
                "no PostgreSQL server binaries under /usr/lib/postgresql; install \
                 postgresql (Debian) to run this test",
            );
            return None;
        };
        let dir = std::env::temp_dir().join(unique_name("cads-pg-"));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let run_as = is_root().then(|| "postgres".to_string());
        if let Some(user) = &run_as {
            let status = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&dir)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown {} to {user}", dir.display());
        }
        let server = PrivatePostgres {
            bin,
            dir,
            port: free_port(),
            run_as,
        };
        let data = server.data().display().to_string();
        server.run(
            "initdb",
            &["-D", &data, "-U", "cads", "--auth=trust", "--no-sync"],
        );
        server.start_again();
        Some(server)
    }

    /// Its URL, to the `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://cads:cads@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (fast shutdown: sessions are ended, as `pg_ctlcluster stop` does).
    pub fn stop(&self) {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_again(&self) {
        let data = self.data().display().to_string();
        let log = self.dir.join("server.log").display().to_string();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100",
            self.port,
            self.dir.display()
        );
        self.run(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-o", &options, "-w", "start"],
        );
    }

    /// Freezes the postmaster and every backend (SIGSTOP): the server keeps its connections
    /// open and answers nothing, as a hung machine would.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let postmaster = self.postmaster();
        let status = Command::new("kill")
            .args([which, &postmaster.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {which} {postmaster}");
        // A backend may end between the scan and the signal: that one needs none.
        for child in children_of(postmaster) {
            let _ = Command::new("kill")
                .args([which, &child.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    fn postmaster(&self) -> u32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("the server is running");
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid in postmaster.pid")
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs one of the server's programs (as its user when the test runs as root).
    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let output = match &self.run_as {
            Some(user) => Command::new("runuser")
                .args(["-u", user, "--"])
                .arg(&path)
                .args(args)
                .output(),
            None => Command::new(&path).args(args).output(),
        }
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // A frozen server cannot stop: let it go on first.
        if self.data().join("postmaster.pid").exists() {
            let _ = std::panic::catch_unwind(|| self.thaw());
            let data = self.data().display().to_string();
            let _ = std::panic::catch_unwind(|| {
                self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"])
            });
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest installed server's binaries (`/usr/lib/postgresql/<version>/bin`).
fn server_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}

/// The processes whose parent is `pid` (the postmaster's backends and helpers).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| parent_of(Path::new(&format!("/proc/{child}/stat"))) == Some(pid))
        .collect()
}

/// The parent pid in a `/proc/<pid>/stat` file (the field after the command, which may hold
/// spaces and parentheses, so it is found from the last `)`).
fn parent_of(stat: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(stat).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}
