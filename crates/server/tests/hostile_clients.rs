//! The server against hostile and careless clients (issue 19): every request, before and after
//! AUTH, leaves the CMI's memory bounded and the CMI answering. CMIs run in-process on free ports,
//! except where a test needs the process's own memory or file-descriptor limit.

mod support;

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
