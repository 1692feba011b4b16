//! The main paths over TCP against CMIs started in-process: plain and session commands, lease
//! conflicts between connections, pipelining, bad input, limits, AUTH, persistence and restart,
//! graceful shutdown.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use cads_protocol::resp::{parse_reply, write_request};
use cads_protocol::{ErrorKind, Reply};
use cads_server::{Config, Options, Server};

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, args: &[&str]) {
        let mut out = Vec::new();
        write_request(&mut out, args);
        self.stream.write_all(&out).unwrap();
    }

    fn read(&mut self) -> Option<Reply<'static>> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf).expect("well-formed reply") {
                self.buf.drain(..used);
                return Some(reply);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn cmd(&mut self, line: &str) -> Reply<'static> {
        let args: Vec<&str> = line.split(' ').collect();
        self.send(&args);
        self.read().expect("a reply")
    }

    fn error_kind(&mut self, line: &str) -> ErrorKind {
        match self.cmd(line) {
            Reply::Error(e) => e.kind,
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    /// Whether the server closed the connection.
    fn closed(&mut self) -> bool {
        self.read().is_none()
    }
}

fn bulk(s: &str) -> Reply<'static> {
    Reply::owned_bulk(s.as_bytes().to_vec())
}

fn start(options: Options) -> Server {
    let options = Options {
        port: Some(0),
        cmis: options.cmis.or(Some(2)),
        ..options
    };
    Server::start(Config::resolve(options).unwrap()).unwrap()
}

fn info_field(conn: &mut Conn, field: &str) -> String {
    let Reply::Bulk(text) = conn.cmd("INFO") else {
        panic!("INFO is a bulk string")
    };
    let text = String::from_utf8(text.into_owned()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_owned))
        .unwrap_or_else(|| panic!("INFO has no {field}"))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cads-tcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn plain_and_session_commands_round_trip() {
    let server = start(Options::default());
    let mut a = Conn::open(server.addrs()[0]);
    let mut b = Conn::open(server.addrs()[0]);
    assert_eq!(a.cmd("PING"), Reply::status("PONG"));
    assert_eq!(a.cmd("SET k 1"), Reply::OK);
    assert_eq!(a.cmd("LGET 7 k RMW"), bulk("1"));
    assert_eq!(a.cmd("LSET 7 k 2"), Reply::OK);
    assert_eq!(b.cmd("GET k"), bulk("1"), "the pending version is private");
    assert_eq!(a.cmd("LVALIDATE 7"), Reply::OK);
    assert_eq!(a.cmd("LCOMMIT 7"), Reply::OK);
    assert_eq!(b.cmd("GET k"), bulk("2"));
    // CMIs are separate: the second one does not have the key.
    let mut other = Conn::open(server.addrs()[1]);
    assert_eq!(other.cmd("GET k"), Reply::Nil);
    server.stop();
    server.join().unwrap();
}

#[test]
fn leases_conflict_across_connections() {
    let server = start(Options::default());
    let mut a = Conn::open(server.addrs()[0]);
    let mut b = Conn::open(server.addrs()[0]);
    a.cmd("SET k v");
    assert_eq!(a.cmd("LGET 1 k"), bulk("v"));
    assert_eq!(
        b.cmd("LDEL 2 k"),
        Reply::Int(1),
        "X voids the reader's S lease"
    );
    assert_eq!(a.error_kind("LCOMMIT 1"), ErrorKind::Abort);
    assert_eq!(b.cmd("LCOMMIT 2"), Reply::OK);
    assert_eq!(a.cmd("IQGET 3 k"), Reply::Int(0), "miss, I lease granted");
    assert_eq!(b.error_kind("IQGET 4 k"), ErrorKind::Retry);
    assert_eq!(b.error_kind("SET k x"), ErrorKind::Leased);
    assert_eq!(a.cmd("IQSET 3 k fresh"), Reply::Int(1));
    assert_eq!(b.cmd("IQGET 4 k"), bulk("fresh"));
    server.stop();
    server.join().unwrap();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = start(Options::default());
    let mut c = Conn::open(server.addrs()[0]);
    let mut out = Vec::new();
    for i in 0..5000 {
        write_request(&mut out, &["INCR", "n"]);
        if i % 1000 == 0 {
            write_request(&mut out, &["GET", "n"]);
        }
    }
    c.stream.write_all(&out).unwrap();
    let mut expected = 0;
    for i in 0..5000 {
        expected += 1;
        assert_eq!(c.read().unwrap(), Reply::Int(expected));
        if i % 1000 == 0 {
            assert_eq!(c.read().unwrap(), bulk(&expected.to_string()));
        }
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn bad_input_gets_errors_and_never_takes_the_server_down() {
    let server = start(Options {
        max_bulk: Some("1kb".into()),
        max_args: Some(8),
        ..Options::default()
    });
    let addr = server.addrs()[0];
    let mut c = Conn::open(addr);
    assert_eq!(c.error_kind("NOSUCH a"), ErrorKind::Err);
    assert_eq!(c.error_kind("GET"), ErrorKind::Err);
    assert_eq!(c.error_kind("LGET notanumber k"), ErrorKind::Err);
    assert_eq!(
        c.cmd("PING"),
        Reply::status("PONG"),
        "those errors keep the connection"
    );

    let check_closed = |bytes: &[u8], expect: &str| {
        let mut c = Conn::open(addr);
        c.stream.write_all(bytes).unwrap();
        match c.read() {
            Some(Reply::Error(e)) => assert!(e.to_string().contains(expect), "{e}"),
            other => panic!("expected a protocol error, got {other:?}"),
        }
        assert!(c.closed(), "a protocol error closes the connection");
    };
    check_closed(b"*1\r\n$2000\r\n", "invalid bulk length");
    check_closed(b"*100\r\n", "invalid multibulk length");
    check_closed(b"*2\r\n+GET\r\n", "expected '$'");
    check_closed(b"*x\r\n", "invalid multibulk length");

    let mut c = Conn::open(addr);
    let big = "x".repeat(2000);
    c.send(&["SET", "k", &big]);
    assert!(matches!(c.read(), Some(Reply::Error(_))));
    let mut d = Conn::open(addr);
    assert_eq!(d.cmd("PING"), Reply::status("PONG"), "the server is fine");
    server.stop();
    server.join().unwrap();
}

#[test]
fn max_clients_and_auth() {
    let server = start(Options {
        max_clients: Some(2),
        requirepass: Some("s3cret".into()),
        cmis: Some(1),
        ..Options::default()
    });
    let addr = server.addrs()[0];
    let mut a = Conn::open(addr);
    assert_eq!(a.error_kind("GET k"), ErrorKind::NoAuth);
    assert_eq!(a.error_kind("AUTH wrong"), ErrorKind::WrongPass);
    assert_eq!(a.cmd("AUTH s3cret"), Reply::OK);
    assert_eq!(a.cmd("GET k"), Reply::Nil);
    let mut b = Conn::open(addr);
    assert!(matches!(
        b.cmd("HELLO 2 AUTH default s3cret"),
        Reply::Array(_)
    ));
    let mut c = Conn::open(addr);
    match c.read() {
        Some(Reply::Error(e)) => assert!(e.message.contains("max number of clients")),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(c.closed());
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_full_cmi_answers_notstored() {
    let server = start(Options {
        maxmemory: Some("4kb".into()),
        max_pinned_memory: Some("0".into()),
        cmis: Some(1),
        ..Options::default()
    });
    let mut c = Conn::open(server.addrs()[0]);
    let value = "v".repeat(1000);
    let mut i = 0;
    loop {
        c.send(&["LSET", "1", &format!("bw{i}"), &value, "PIN"]);
        match c.read().unwrap() {
            Reply::Status(_) => i += 1,
            Reply::Error(e) => {
                assert_eq!(e.kind, ErrorKind::NotStored);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(i >= 2);
    assert_eq!(c.cmd("LCOMMIT 1"), Reply::OK);
    for j in 0..i {
        assert!(
            matches!(c.cmd(&format!("GET bw{j}")), Reply::Bulk(_)),
            "pinned bw{j} kept"
        );
    }
    assert_eq!(info_field(&mut c, "notstored"), "1");
    server.stop();
    server.join().unwrap();
}

#[test]
fn lease_expiry_over_tcp() {
    // A lease no load outlasts; the server's clocks are moved past it rather than waited out.
    let server = start(Options {
        lease_ms: Some(30_000),
        cmis: Some(1),
        ..Options::default()
    });
    let mut c = Conn::open(server.addrs()[0]);
    c.cmd("SET k v");
    assert_eq!(c.cmd("QAREG 1 k"), Reply::Int(0));
    assert_eq!(info_field(&mut c, "sessions_expired"), "0");
    server.advance_clock(Duration::from_secs(31));
    // The next command (or the next tick) finds the lease expired.
    assert_eq!(
        c.cmd("GET k"),
        Reply::Nil,
        "an expired Q lease deletes the key"
    );
    assert_eq!(info_field(&mut c, "sessions_expired"), "1");
    assert_eq!(c.error_kind("DAR 1 k"), ErrorKind::Abort);
    server.stop();
    server.join().unwrap();
}

fn persistent(dir: &std::path::Path) -> Options {
    Options {
        appendonly: Some(true),
        appendfsync: Some("always".into()),
        dir: Some(dir.to_path_buf()),
        cmis: Some(1),
        ..Options::default()
    }
}

#[test]
fn a_restarted_cmi_comes_back_with_entries_pins_markers_and_ids() {
    let dir = temp_dir("restart");
    let server = start(persistent(&dir));
    let mut c = Conn::open(server.addrs()[0]);
    c.cmd("CONFIGID 42");
    c.cmd("SET plain v");
    c.cmd("LSET 1 pinned bw PIN");
    c.cmd("QAREG 1 marked");
    c.cmd("LMARK 1 marked");
    c.cmd("LCOMMIT 1");
    for i in 0..500 {
        c.cmd(&format!("SET k{i} {i}"));
    }
    assert!(matches!(c.cmd("BGREWRITEAOF"), Reply::Status(_)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut c, "aof_rewrites") != "1" {
        assert!(Instant::now() < deadline, "the rewrite never finished");
        c.cmd("INCR during");
    }
    c.cmd("SET after rewrite");
    server.stop();
    server.join().unwrap();

    let server = start(persistent(&dir));
    let mut c = Conn::open(server.addrs()[0]);
    assert_eq!(c.cmd("GET plain"), bulk("v"));
    assert_eq!(c.cmd("GET after"), bulk("rewrite"));
    assert_eq!(c.cmd("GET k499"), bulk("499"));
    assert!(matches!(c.cmd("GET during"), Reply::Bulk(_)));
    assert_eq!(c.cmd("CONFIGID"), Reply::Int(42));
    assert_eq!(
        c.cmd("INSPECT pinned").field("pinned"),
        Some(&Reply::Int(1)),
        "pinned survives"
    );
    assert_eq!(
        c.cmd("INSPECT marked").field("marker"),
        Some(&Reply::Int(1)),
        "the marker survives"
    );
    server.stop();
    server.join().unwrap();
    std::fs::remove_dir_all(dir).ok();
}

/// Cached values restored outside a Gemini configuration wait for a cads client's
/// `FLUSHALL RESTORED`, which drops them once and keeps pinned entries; values cached after it
/// stay, and a CMI restored under a configuration with fragments keeps its values (its
/// coordinator decides).
#[test]
fn flushall_restored_drops_restored_values_once() {
    let dir = temp_dir("restored");
    let server = start(persistent(&dir));
    let mut c = Conn::open(server.addrs()[0]);
    assert_eq!(info_field(&mut c, "restored_values_held"), "0");
    c.cmd("SET old v");
    c.cmd("LSET 1 pinned bw PIN");
    c.cmd("LCOMMIT 1");
    server.stop();
    server.join().unwrap();

    let server = start(persistent(&dir));
    let mut c = Conn::open(server.addrs()[0]);
    assert_eq!(info_field(&mut c, "restored_values_held"), "1");
    assert_eq!(c.cmd("GET old"), bulk("v"), "plain clients still read it");
    assert_eq!(c.cmd("FLUSHALL RESTORED"), Reply::OK);
    assert_eq!(info_field(&mut c, "restored_values_held"), "0");
    assert_eq!(c.cmd("GET old"), Reply::Nil);
    assert_eq!(c.cmd("GET pinned"), bulk("bw"), "pinned entries stay");
    c.cmd("SET new v");
    assert_eq!(c.cmd("FLUSHALL RESTORED"), Reply::OK);
    assert_eq!(c.cmd("GET new"), bulk("v"), "a second one drops nothing");
    c.cmd("FRAGMENTS 4");
    server.stop();
    server.join().unwrap();

    let server = start(persistent(&dir));
    let mut c = Conn::open(server.addrs()[0]);
    assert_eq!(info_field(&mut c, "restored_values_held"), "0");
    server.stop();
    server.join().unwrap();
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn sigterm_stops_gracefully_and_keeps_acknowledged_writes() {
    let dir = temp_dir("sigterm");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let spawn = || {
        Process::new(env!("CARGO_BIN_EXE_cads-server"))
            .args(["--port", &port.to_string(), "--cmis", "1", "--appendonly"])
            .args(["--appendfsync", "everysec", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let connect = || {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = TcpStream::connect(addr) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return Conn {
                    stream: s,
                    buf: Vec::new(),
                };
            }
            assert!(Instant::now() < deadline, "cads-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut child = spawn();
    let mut c = connect();
    for i in 0..100 {
        assert_eq!(c.cmd(&format!("SET k{i} {i}")), Reply::OK);
    }
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "graceful exit, got {status}");
    let mut child = spawn();
    let mut c = connect();
    assert_eq!(c.cmd("GET k99"), bulk("99"));
    assert_eq!(c.cmd("DBSIZE"), Reply::Int(100));
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(dir).ok();
}
