//! Helpers shared by the server's integration tests: finding external tools (with loud skipping),
//! picking free ports, starting `cads-server` and `redis-server` as child processes that are killed
//! on drop, and a raw RESP connection that hands back replies byte for byte.
//!
//! Use it from a test file with `mod support;`. Not every test file uses every helper.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cads_protocol::resp::{parse_reply, write_request};
use cads_protocol::Reply;

/// How long a started server gets to answer PING.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout on test connections: generous, only there so that a hung server fails a test
/// instead of hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The Debian packages that provide the Redis tools, for skip messages.
pub const REDIS_PACKAGES: &str = "install redis-server redis-tools (Debian)";

/// True when `CADS_REQUIRE_SERVICES=1`: a missing tool then fails the test instead of skipping it.
pub fn services_required() -> bool {
    std::env::var("CADS_REQUIRE_SERVICES").is_ok_and(|v| v.trim() == "1")
}

/// Reports that a test cannot run because `what` is missing. Under `CADS_REQUIRE_SERVICES=1` this
/// panics (the test fails); otherwise it prints a loud `SKIPPED:` line to stderr (uncaptured, so it
/// shows in a plain `cargo test` run) and the caller returns early.
pub fn skip_or_fail(what: &str, hint: &str) {
    let message = format!("{what} not found; {hint} to run this test");
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

/// Finds a tool on PATH. When it is missing: fails the test under `CADS_REQUIRE_SERVICES=1`,
/// otherwise prints `SKIPPED: <name> not found; <hint> to run this test` and returns None, and
/// the test should return.
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

/// `n` consecutive ports that were free a moment ago (bound to 127.0.0.1 and released). Another
/// process may take them in between; the server starters retry on a failed start.
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
    let Ok(stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut conn = RespConn::from_stream(stream);
    matches!(conn.raw(&[b"PING".as_slice()]), Ok(reply) if reply == b"+PONG\r\n")
}

/// A server process that is killed (and reaped) when dropped, so that no test leaves one behind,
/// failed or not.
pub struct ServerProcess {
    pub name: &'static str,
    pub port: u16,
    child: Child,
}

impl ServerProcess {
    /// Starts `program` with `args` (which must make it listen on `port`) and waits until every
    /// port in `ports` answers PING. Returns None if the process exited first (a port taken in
    /// between, say); panics if it neither exits nor answers within [`STARTUP_TIMEOUT`].
    fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        ports: std::ops::Range<u16>,
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
            pending.retain(|&p| !answers_ping(p));
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

    /// The process id.
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

    /// A new connection to the server.
    pub fn connect(&self) -> RespConn {
        RespConn::connect(self.port)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let binary = cads_server_binary();
    for _ in 0..5 {
        let port = free_ports(cmis);
        let mut args = vec![
            "--port".to_string(),
            port.to_string(),
            "--cmis".to_string(),
            cmis.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        if let Some(server) = ServerProcess::spawn("cads-server", &binary, &args, port..port + cmis)
        {
            return server;
        }
    }
    panic!("cads-server failed to start five times");
}

/// Starts `redis-server --port P --save "" --appendonly no --daemonize no` on a free port and waits
/// until it answers PING. None (after a loud skip, or a panic under `CADS_REQUIRE_SERVICES=1`) if
/// redis-server is not installed.
pub fn start_redis() -> Option<ServerProcess> {
    let binary = require_redis_tool("redis-server")?;
    for _ in 0..5 {
        let port = free_port();
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
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
        if let Some(server) = ServerProcess::spawn("redis-server", &binary, &args, port..port + 1) {
            return Some(server);
        }
    }
    panic!("redis-server failed to start five times");
}

/// A blocking RESP connection that returns each reply as the exact bytes the server sent.
pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RespConn {
    pub fn connect(port: u16) -> RespConn {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        RespConn::from_stream(stream)
    }

    pub fn from_stream(stream: TcpStream) -> RespConn {
        RespConn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes raw bytes (a pipelined batch, an inline command, malformed input, ...).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes one request as an array of bulk strings.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<()> {
        let mut out = Vec::new();
        write_request(&mut out, args);
        self.stream.write_all(&out)
    }

    /// Reads exactly one reply and returns its bytes, untouched.
    pub fn read_raw(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            match parse_reply(&self.buf) {
                Ok(Some((_, used))) => return Ok(self.buf.drain(..used).collect()),
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("unparsable reply {}: {e}", show(&self.buf, 200)),
                    ))
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a full reply (have {})",
                        show(&self.buf, 200)
                    ),
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one request and reads its reply's bytes.
    pub fn raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<Vec<u8>> {
        self.send(args)?;
        self.read_raw()
    }

    /// Sends one request and reads its reply, decoded.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply<'static> {
        let bytes = self.raw(args).expect("request failed");
        parse_reply(&bytes).unwrap().unwrap().0
    }

    /// True if the server closed the connection (reads EOF, or a reset) with no further bytes.
    /// Bytes that arrive instead are returned as the error.
    pub fn expect_closed(&mut self) -> Result<(), Vec<u8>> {
        if !self.buf.is_empty() {
            return Err(std::mem::take(&mut self.buf));
        }
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => return Err(chunk[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(b"<still open: read timed out>".to_vec())
                }
                Err(_) => return Ok(()),
            }
        }
    }

    pub fn set_read_timeout(&self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

/// Bytes shown for a message: printable ASCII as is, the rest escaped, cut after `max` bytes.
pub fn show(bytes: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        s.push_str(&format!("...({} bytes)", bytes.len()));
    }
    s
}
