//! CMIs for tests: started in this process on free loopback ports ([`Cmis`]), or as server
//! processes that are killed when dropped ([`ServerProcess`]), so that no test leaves one behind,
//! failed or not.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cads_server::{Config, Options, Server};

use crate::resp::RespConn;
use crate::services::require_redis_tool;

/// The CMIs' lease in tests unless one sets its own: long enough that no step of a test outlives
/// one by accident, however loaded the machine (the server's default, 500 ms, is not). A test
/// that needs leases to run out moves the CMIs' clock ([`Cmis::advance_clock`]) or sets a lease
/// of its own.
pub const TEST_LEASE_MS: u64 = 10_000;

/// How long a started server gets to answer PING.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// CMIs served by this process on consecutive free loopback ports; stopped when dropped.
pub struct Cmis {
    server: Option<Server>,
    addrs: Vec<SocketAddr>,
}

impl Cmis {
    /// `count` CMIs in a lease mode (`write-around` or `write-through`).
    pub fn start(count: usize, mode: &str) -> Cmis {
        Cmis::start_with(count, |o| o.mode = Some(mode.to_string()))
    }

    /// `count` CMIs with the server's defaults changed by `configure` (port and count are set
    /// here).
    pub fn start_with(count: usize, configure: impl FnOnce(&mut Options)) -> Cmis {
        Cmis::start_on(0, count, configure)
    }

    /// [`Cmis::start_with`] on ports from `port` (0: free ones), for a test that starts CMIs
    /// again where they were.
    pub fn start_on(port: u16, count: usize, configure: impl FnOnce(&mut Options)) -> Cmis {
        let mut options = Options {
            log_level: Some("warn".into()),
            lease_ms: Some(TEST_LEASE_MS),
            ..Options::default()
        };
        configure(&mut options);
        options.port = Some(port);
        options.cmis = Some(count);
        let config = Config::resolve(options).expect("valid CMI options");
        let server = Server::start(config).expect("start in-process CMIs");
        let addrs = server.addrs().to_vec();
        Cmis {
            server: Some(server),
            addrs,
        }
    }

    /// Their addresses, in CMI order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Moves the CMIs' clocks `by` ahead ([`Server::advance_clock`]): leases and sessions run
    /// out without the test sleeping, however loaded the machine is.
    pub fn advance_clock(&self, by: Duration) {
        self.server
            .as_ref()
            .expect("the CMIs run")
            .advance_clock(by);
    }

    /// Whether they still run.
    pub fn running(&self) -> bool {
        self.server.is_some()
    }

    /// Stops them all (their entries are lost) and waits for their threads. Idempotent.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            server.join().expect("in-process CMIs stop cleanly");
        }
    }
}

impl Drop for Cmis {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            let _ = server.join();
        }
    }
}

/// `n` consecutive ports that were free a moment ago (bound to 127.0.0.1 and released). Another
/// process may take them in between; the process starters retry on a failed start.
pub fn free_ports(n: u16) -> u16 {
    assert!(n >= 1);
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = first.local_addr().unwrap().port();
        if port.checked_add(n - 1).is_none() {
            continue;
        }
        let rest: Vec<_> = (1..n)
            .map(|i| TcpListener::bind(("127.0.0.1", port + i)))
            .collect();
        if rest.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("found no {n} consecutive free ports");
}

/// One free port.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// Sends PING on a fresh connection and reports whether `+PONG` came back.
pub fn answers_ping(port: u16) -> bool {
    plaintext_ping(port).is_some_and(|reply| reply == b"+PONG\r\n")
}

/// Whether a CMI serves on `port`: it answers a plaintext PING with `+PONG`, or, serving TLS,
/// with its refusal of plaintext clients.
pub fn is_serving(port: u16) -> bool {
    plaintext_ping(port)
        .is_some_and(|reply| reply == b"+PONG\r\n" || reply == cads_server::tls::PLAINTEXT_REFUSAL)
}

/// The reply to PING on a fresh plaintext connection, if one came.
fn plaintext_ping(port: u16) -> Option<Vec<u8>> {
    let stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    RespConn::from_stream(stream)
        .raw(&[b"PING".as_slice()])
        .ok()
}

/// A program that serves CMIs: its path and the arguments before its flags.
#[derive(Clone, Debug)]
pub struct Program {
    path: PathBuf,
    leading: Vec<String>,
}

impl Program {
    /// The `cads-server` binary (in the server crate's tests, `env!("CARGO_BIN_EXE_cads-server")`).
    pub fn cads_server(path: impl Into<PathBuf>) -> Program {
        Program {
            path: path.into(),
            leading: Vec::new(),
        }
    }

    /// `cads server` (in the CLI's tests, `env!("CARGO_BIN_EXE_cads")`).
    pub fn cads(path: impl Into<PathBuf>) -> Program {
        Program {
            path: path.into(),
            leading: vec!["server".into()],
        }
    }
}

/// A server process that is killed (and reaped) when dropped.
pub struct ServerProcess {
    pub name: &'static str,
    /// Its first port (a process serving several CMIs listens on consecutive ports).
    pub port: u16,
    child: Child,
}

impl ServerProcess {
    /// Starts `count` CMIs of `program` on free ports with `extra` flags (all but `--port` and
    /// `--cmis`; `--log-level warn` unless given), and waits until each answers PING
    /// (see [`is_serving`]).
    pub fn start_cmis(program: &Program, count: u16, extra: &[&str]) -> ServerProcess {
        for _ in 0..5 {
            if let Some(server) =
                ServerProcess::start_cmis_on(program, free_ports(count), count, extra)
            {
                return server;
            }
        }
        panic!("{} failed to start five times", program.path.display());
    }

    /// Like [`start_cmis`](Self::start_cmis) on ports `port..port + count` (a CMI restarted where
    /// it was). None if the process exited at start (a port taken in between, say).
    pub fn start_cmis_on(
        program: &Program,
        port: u16,
        count: u16,
        extra: &[&str],
    ) -> Option<ServerProcess> {
        let mut args = program.leading.clone();
        args.extend(["--port".into(), port.to_string()]);
        args.extend(["--cmis".into(), count.to_string()]);
        if !extra.contains(&"--log-level") {
            args.extend(["--log-level".into(), "warn".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        ServerProcess::spawn("cads", &program.path, &args, port..port + count)
    }

    /// Starts `redis-server` on a free port, without persistence, and waits until it answers
    /// PING. None (after a loud skip, or a panic under `CADS_REQUIRE_SERVICES=1`) if it is not
    /// installed.
    pub fn start_redis() -> Option<ServerProcess> {
        let binary = require_redis_tool("redis-server")?;
        for _ in 0..5 {
            let port = free_port().to_string();
            let args: Vec<String> = [
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let port: u16 = port.parse().unwrap();
            if let Some(server) =
                ServerProcess::spawn("redis-server", &binary, &args, port..port + 1)
            {
                return Some(server);
            }
        }
        panic!("redis-server failed to start five times");
    }

    /// Starts `program` with `args` (which must make it listen on `ports`) and waits until every
    /// port answers PING (or, serving TLS, refuses a plaintext PING: see [`is_serving`]). None if the process exited first; panics if it neither exits nor
    /// answers within [`STARTUP_TIMEOUT`].
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        ports: Range<u16>,
    ) -> Option<ServerProcess> {
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let mut server = ServerProcess {
            name,
            port: ports.start,
            child,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut pending: Vec<u16> = ports.collect();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                eprintln!("{name} {args:?} exited at start ({status}); retrying on other ports");
                return None;
            }
            pending.retain(|&p| !is_serving(p));
            if pending.is_empty() {
                return Some(server);
            }
            if Instant::now() > deadline {
                panic!(
                    "{name} {args:?} did not answer PING on {pending:?} within {STARTUP_TIMEOUT:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address of its `i`-th CMI.
    pub fn addr(&self, i: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port + i))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The most memory the process has had resident so far (`VmHWM` of /proc/PID/status), in
    /// bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the server's /proc status is readable");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kb * 1024
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new raw connection to its first CMI.
    pub fn connect(&self) -> RespConn {
        RespConn::connect(self.port)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
