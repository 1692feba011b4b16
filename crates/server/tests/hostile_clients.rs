//! The server against hostile and careless clients (issue 19): every request, before and after
//! AUTH, leaves the CMI's memory bounded and the CMI answering. CMIs run in-process on free ports,
//! except where a test needs the process's own memory or file-descriptor limit.

mod support;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command as Process;
use std::time::{Duration, Instant};

use cads_protocol::{ErrorKind, Reply};
use cads_server::{Config, Options, Server};
use support::RespConn;

/// A safety net for loops that wait on the server: never what decides a pass.
const PATIENCE: Duration = Duration::from_secs(20);

fn start(options: Options) -> Server {
    let options = Options {
        port: Some(0),
        cmis: Some(1),
        log_level: Some("warn".into()),
        ..options
    };
    Server::start(Config::resolve(options).unwrap()).unwrap()
}

fn connect(server: &Server) -> RespConn {
    RespConn::connect(server.addrs()[0].port())
}

fn call(conn: &mut RespConn, line: &str) -> Reply<'static> {
    let args: Vec<&str> = line.split(' ').collect();
    conn.call(&args)
}

fn error_kind(reply: &Reply) -> Option<ErrorKind> {
    match reply {
        Reply::Error(e) => Some(e.kind.clone()),
        _ => None,
    }
}

fn info_field(conn: &mut RespConn, field: &str) -> String {
    let Reply::Bulk(text) = call(conn, "INFO") else {
        panic!("INFO is a bulk string")
    };
    let text = String::from_utf8(text.into_owned()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_owned))
        .unwrap_or_else(|| panic!("INFO has no {field}"))
}

fn info_number(conn: &mut RespConn, field: &str) -> u64 {
    info_field(conn, field).parse().unwrap()
}

fn stop(server: Server) {
    server.stop();
    server.join().unwrap();
}

#[test]
fn sessions_beyond_max_session_memory_are_refused_and_counted() {
    let server = start(Options {
        max_session_memory: Some("4kb".into()),
        ..Options::default()
    });
    let mut c = connect(&server);
    let mut opened = 0;
    let refusal = loop {
        let reply = call(&mut c, &format!("IQGET {} key{opened}", opened + 1));
        if reply != Reply::Int(0) {
            break reply;
        }
        opened += 1;
        assert!(opened < 1000, "4 KB of session state never ran out");
    };
    assert_eq!(
        error_kind(&refusal),
        Some(ErrorKind::NotStored),
        "{refusal:?}"
    );
    assert!(opened >= 2, "a few sessions fit: {opened}");
    assert_eq!(info_number(&mut c, "sessions_refused"), 1);
    assert_eq!(info_number(&mut c, "sessions_active"), opened);
    assert!(info_number(&mut c, "used_memory_sessions") <= 4096);
    assert_eq!(info_number(&mut c, "max_session_memory"), 4096);
    // Nothing acknowledged is lost: every session let in completes.
    for sid in 1..=opened {
        let key = format!("key{}", sid - 1);
        assert_eq!(call(&mut c, &format!("IQSET {sid} {key} v")), Reply::Int(1));
    }
    assert_eq!(info_number(&mut c, "used_memory_sessions"), 0);
    assert_eq!(
        call(&mut c, "IQGET 5000 fresh"),
        Reply::Int(0),
        "room again"
    );
    stop(server);
}

#[test]
fn a_revalidating_session_is_aborted_at_max_session_ms_and_a_writer_proceeds() {
    let server = start(Options {
        // Leases long enough never to lapse between two validations, however loaded the machine:
        // only the maximum lifetime can end the session.
        lease_ms: Some(1_500),
        max_session_ms: Some(1_600),
        ..Options::default()
    });
    let mut reader = connect(&server);
    let mut writer = connect(&server);
    assert_eq!(call(&mut reader, "SET k v"), Reply::OK);
    assert_eq!(
        call(&mut reader, "LGET 1 k"),
        Reply::owned_bulk(b"v".to_vec())
    );
    assert_eq!(call(&mut reader, "LVALIDATE 1"), Reply::OK);
    let deadline = Instant::now() + PATIENCE;
    while call(&mut reader, "LVALIDATE 1") == Reply::OK {
        assert!(
            Instant::now() < deadline,
            "the session outlived max-session-ms"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_number(&mut reader, "sessions_outlived"), 1);
    assert_eq!(call(&mut writer, "LDEL 2 k"), Reply::Int(1));
    assert_eq!(call(&mut writer, "LCOMMIT 2"), Reply::OK);
    assert_eq!(call(&mut writer, "GET k"), Reply::Nil);
    stop(server);
}

#[test]
fn session_limits_are_shown_and_set_by_config() {
    let server = start(Options {
        lease_ms: Some(400),
        maxmemory: Some("64mb".into()),
        ..Options::default()
    });
    let mut c = connect(&server);
    let get = |c: &mut RespConn, name: &str| match call(c, &format!("CONFIG GET {name}")) {
        Reply::Array(pair) => pair[1].clone(),
        other => panic!("CONFIG GET {name}: {other:?}"),
    };
    assert_eq!(
        get(&mut c, "max-session-ms"),
        Reply::owned_bulk(b"2000".to_vec())
    );
    assert_eq!(
        get(&mut c, "max-session-memory"),
        Reply::owned_bulk((16u64 << 20).to_string().into_bytes())
    );
    assert_eq!(call(&mut c, "CONFIG SET max-session-ms 900"), Reply::OK);
    assert_eq!(call(&mut c, "CONFIG SET max-session-memory 1mb"), Reply::OK);
    assert_eq!(info_number(&mut c, "max_session_ms"), 900);
    assert_eq!(info_number(&mut c, "max_session_memory"), 1 << 20);
    // lease-ms <= max-session-ms <= tombstone-ms (60000 here), as on the command line; a
    // refusal names the bound and changes nothing.
    for (refused, bound) in [
        ("max-session-ms 0", "positive"),
        ("max-session-ms 300", "below lease-ms (400)"),
        ("max-session-ms 60001", "above tombstone-ms (60000)"),
        ("lease-ms 901", "above max-session-ms (900)"),
    ] {
        match call(&mut c, &format!("CONFIG SET {refused}")) {
            Reply::Error(e) => assert!(e.message.contains(bound), "{refused}: {}", e.message),
            other => panic!("{refused}: {other:?}"),
        }
    }
    assert_eq!(info_number(&mut c, "max_session_ms"), 900);
    assert_eq!(info_number(&mut c, "lease_ms"), 400);
    assert_eq!(call(&mut c, "CONFIG SET lease-ms 900"), Reply::OK);
    assert_eq!(call(&mut c, "CONFIG SET max-session-ms 60000"), Reply::OK);
    stop(server);
}

/// One request naming a 2 MB value 200 times asks for 400 MB of replies. They are counted against
/// `--max-output` as they are produced, so the client is closed at the limit having made the CMI
/// hold about that much, and everyone else is served on.
#[test]
fn amplified_mget_and_lmget_leave_memory_bounded_and_the_server_answering() {
    let server = support::start_cads_with(1, &["--log-level", "warn", "--max-output", "8mb"]);
    let mut c = server.connect();
    let value = vec![b'x'; 2 << 20];
    assert_eq!(c.call(&[&b"SET"[..], b"big", &value]), Reply::OK);
    let amplified: [&[&str]; 2] = [&["MGET"], &["LMGET", "1", "RO"]];
    for command in amplified {
        let mut args: Vec<&str> = command.to_vec();
        args.extend(std::iter::repeat_n("big", 200));
        let mut greedy = server.connect();
        greedy.send(&args).unwrap();
        assert_eq!(
            greedy.expect_closed(),
            Ok(()),
            "{} is cut off at --max-output without a reply",
            command[0]
        );
        let mut other = server.connect();
        assert_eq!(call(&mut other, "PING"), Reply::status("PONG"));
    }
    assert_eq!(
        info_number(&mut c, "client_output_buffer_limit_disconnections"),
        2
    );
    let peak = server.peak_rss();
    assert!(
        peak < 100 << 20,
        "the server's resident memory peaked at {} MB",
        peak >> 20
    );
}

#[test]
fn unauthenticated_oversize_requests_are_refused_and_closed() {
    let server = start(Options {
        requirepass: Some("s3cret".into()),
        ..Options::default()
    });
    let refused = |bytes: &[u8], error: &str| {
        let mut c = connect(&server);
        c.send_raw(bytes).unwrap();
        assert_eq!(
            c.read_raw().unwrap(),
            format!("-ERR Protocol error: {error}\r\n").as_bytes()
        );
        assert_eq!(c.expect_closed(), Ok(()), "{error} closes the connection");
    };
    refused(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n",
        "unauthenticated bulk length",
    );
    refused(b"*11\r\n", "unauthenticated multibulk length");
    // Small requests before AUTH get NOAUTH and keep the connection; after AUTH the full limits hold.
    let mut c = connect(&server);
    assert_eq!(error_kind(&call(&mut c, "GET k")), Some(ErrorKind::NoAuth));
    assert_eq!(call(&mut c, "AUTH s3cret"), Reply::OK);
    let big = vec![b'v'; 100_000];
    assert_eq!(c.call(&[&b"SET"[..], b"k", &big]), Reply::OK);
    let many: Vec<String> = std::iter::once("MSET".to_string())
        .chain((0..20).map(|i| format!("k{i}")))
        .collect();
    assert_eq!(c.call(&many), Reply::OK);
    stop(server);
}

#[test]
fn an_http_post_runs_nothing_and_closes_the_connection() {
    let server = start(Options::default());
    let mut c = connect(&server);
    // What a web page can make a browser send to a server on localhost.
    c.send_raw(
        b"POST / HTTP/1.1\r\nHost: localhost:7379\r\nContent-Type: text/plain\r\n\
          Content-Length: 40\r\n\r\nSET pwned 1\r\nCONFIG SET maxmemory 1\r\n",
    )
    .unwrap();
    assert_eq!(c.expect_closed(), Ok(()), "closed with no reply");
    // A GET line is merely an unknown form of GET; the Host: line after it closes the connection.
    let mut c = connect(&server);
    c.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\nSET pwned 1\r\n")
        .unwrap();
    let reply = c.read_raw().unwrap();
    assert!(
        reply.starts_with(b"-ERR wrong number of arguments"),
        "{}",
        support::show(&reply, 80)
    );
    assert_eq!(c.expect_closed(), Ok(()));
    let mut c = connect(&server);
    assert_eq!(call(&mut c, "GET pwned"), Reply::Nil, "nothing ran");
    assert_eq!(
        call(&mut c, "CONFIG GET maxmemory"),
        Reply::Array(vec![
            Reply::owned_bulk(b"maxmemory".to_vec()),
            Reply::owned_bulk((1u64 << 30).to_string().into_bytes())
        ])
    );
    stop(server);
}

/// The address the protected-mode test connects from: a veth interface's, not loopback.
const OUTSIDE: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

/// Runs `f` on a thread of its own, in a new network namespace (the thread's alone) with loopback
/// up and [`OUTSIDE`] on a veth pair, so that a connection can come from an address that is not
/// loopback. Needs root and iproute2: without them the test is skipped, or fails under
/// CADS_REQUIRE_SERVICES=1.
fn in_network_namespace(f: impl FnOnce() + Send + 'static) {
    let setup = std::thread::spawn(move || {
        // SAFETY: unshare(2) takes no pointers; CLONE_NEWNET moves only this thread (and what it
        // starts) into a fresh network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!(
                "unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            ));
        }
        let outside = format!("{OUTSIDE}/24");
        for args in [
            &["link", "set", "lo", "up"][..],
            &[
                "link", "add", "cads-a", "type", "veth", "peer", "name", "cads-b",
            ],
            &["addr", "add", &outside, "dev", "cads-a"],
            &["link", "set", "cads-a", "up"],
            &["link", "set", "cads-b", "up"],
        ] {
            // A child started from this thread lives in its namespace.
            let status = Process::new("ip").args(args).status();
            if !status.as_ref().is_ok_and(|s| s.success()) {
                return Err(format!("ip {}: {status:?}", args.join(" ")));
            }
        }
        f();
        Ok(())
    });
    match setup.join() {
        Ok(Ok(())) => {}
        Ok(Err(why)) => support::skip_or_fail(
            &format!("a network namespace with a veth pair ({why})"),
            "run as root with iproute2 installed",
        ),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Connects from `from` to the CMI on `port` and reads everything it sends until it closes or
/// answers PING.
fn first_words(from: Ipv4Addr, port: u16) -> Vec<u8> {
    let stream = TcpStream::connect(SocketAddr::from((from, port))).expect("connect");
    let mut conn = RespConn::from_stream(stream);
    conn.set_read_timeout(PATIENCE);
    conn.raw(&["PING"])
        .unwrap_or_else(|e| format!("{e}").into_bytes())
}

#[test]
fn protected_mode_refuses_clients_from_outside_loopback_without_a_password() {
    in_network_namespace(|| {
        let bind_all = |extra: Options| {
            start(Options {
                bind: Some([0, 0, 0, 0].into()),
                ..extra
            })
        };
        // The default: protected, no password.
        let server = bind_all(Options::default());
        let port = server.addrs()[0].port();
        let refused = first_words(OUTSIDE, port);
        assert!(
            refused.starts_with(b"-DENIED cads is running in protected mode"),
            "{}",
            support::show(&refused, 120)
        );
        let refused = String::from_utf8_lossy(&refused).into_owned();
        assert!(refused.contains("--requirepass") && refused.contains("--protected-mode false"));
        assert_eq!(first_words(Ipv4Addr::LOCALHOST, port), b"+PONG\r\n");
        let mut c = RespConn::connect(port);
        assert_eq!(info_number(&mut c, "rejected_connections"), 1);
        stop(server);

        // With a password, anyone may try it.
        let server = bind_all(Options {
            requirepass: Some("s3cret".into()),
            ..Options::default()
        });
        let port = server.addrs()[0].port();
        let reply = first_words(OUTSIDE, port);
        assert!(
            reply.starts_with(b"-NOAUTH"),
            "{}",
            support::show(&reply, 80)
        );
        stop(server);

        // Protected mode off: served.
        let server = bind_all(Options {
            protected_mode: Some(false),
            ..Options::default()
        });
        assert_eq!(first_words(OUTSIDE, server.addrs()[0].port()), b"+PONG\r\n");
        stop(server);
    });
}

/// A cads-server held to 40 file descriptors: once they are used up, a new client is told
/// `max number of clients reached` and closed at once (not left waiting in the backlog while the
/// log repeats `accept failed`), the shortage is logged once, and the server serves again when
/// clients leave.
#[test]
fn out_of_file_descriptors_new_clients_are_refused_not_left_waiting() {
    let dir = std::env::temp_dir().join(format!("cads-fds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("stderr.log");
    let port = support::free_port();
    let mut server = Process::new("sh")
        .arg("-c")
        .arg("ulimit -n 40 && exec \"$@\"")
        .arg("sh")
        .arg(support::cads_server_binary())
        .args([
            "--port",
            &port.to_string(),
            "--cmis",
            "1",
            "--log-level",
            "info",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !support::answers_ping(port) {
        assert!(Instant::now() < deadline, "cads-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut served = Vec::new();
    let mut refused = 0;
    for i in 0..60 {
        let mut c = RespConn::connect(port);
        c.set_read_timeout(PATIENCE);
        match c.raw(&["PING"]) {
            Ok(reply) if reply == b"+PONG\r\n" => served.push(c),
            Ok(reply) => {
                assert_eq!(reply, b"-ERR max number of clients reached\r\n");
                refused += 1;
            }
            // Closed at once; the refusal may be lost to the reset our PING provokes.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                refused += 1
            }
            Err(e) => panic!("client {i} was left waiting: {e}"),
        }
    }
    assert!(
        !served.is_empty() && refused > 0,
        "{} served, {refused} refused",
        served.len()
    );
    drop(served);
    let deadline = Instant::now() + PATIENCE;
    while !support::answers_ping(port) {
        assert!(Instant::now() < deadline, "the server never served again");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = server.kill();
    let _ = server.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let count = |text: &str| log.lines().filter(|l| l.contains(text)).count();
    assert_eq!(
        count("out of file descriptors"),
        1,
        "one shortage, one line:\n{log}"
    );
    assert_eq!(count("accept failed"), 0, "{log}");
    assert_eq!(count("file descriptors available again"), 1, "{log}");
}
