//! TLS on a CMI (`--tls-cert`, `--tls-key`, `--tls-ca`): the settings are checked when the
//! server starts, with errors naming the file; redis-cli connects with `--tls --cacert` as
//! docs/PROTOCOL.md says; a plaintext client is told the port wants TLS and closed.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use cads_server::{Config, Options, Server};
use cads_testkit::TestCa;
use support::{require_redis_tool, start_cads_with, RespConn};

/// Starting in-process CMIs with these TLS files: the error, if any, with its causes.
fn start_error(cert: Option<&Path>, key: Option<&Path>, ca: Option<&Path>) -> Option<String> {
    let options = Options {
        port: Some(0),
        cmis: Some(1),
        tls_cert: cert.map(Path::to_path_buf),
        tls_key: key.map(Path::to_path_buf),
        tls_ca: ca.map(Path::to_path_buf),
        ..Options::default()
    };
    let started = Config::resolve(options).and_then(Server::start);
    match started {
        Ok(server) => {
            server.stop();
            server.join().unwrap();
            None
        }
        Err(e) => Some(format!("{e:#}")),
    }
}

#[test]
fn tls_settings_are_checked_at_start_with_errors_naming_the_file() {
    let ca = TestCa::new();
    let other = TestCa::new();
    let (cert, key) = (ca.cmi_cert_file(), ca.cmi_key_file());
    let missing = ca.ca_file().with_file_name("absent.pem");
    let other_key = other.cmi_key_file();
    assert_eq!(start_error(Some(&cert), Some(&key), None), None);
    assert_eq!(
        start_error(Some(&cert), Some(&key), Some(&ca.ca_file())),
        None
    );

    let none: Option<&Path> = None;
    let cases = [
        (
            Some(&*cert),
            none,
            none,
            &["--tls-cert and --tls-key go together"][..],
        ),
        (
            none,
            Some(&*key),
            none,
            &["--tls-cert and --tls-key go together"],
        ),
        (none, none, Some(&*cert), &["--tls-ca needs --tls-cert"]),
        (
            Some(&*missing),
            Some(&*key),
            none,
            &["--tls-cert", "absent.pem", "cannot read"],
        ),
        (
            Some(&*key),
            Some(&*key),
            none,
            &["--tls-cert", "no PEM certificate"],
        ),
        (
            Some(&*cert),
            Some(&*cert),
            none,
            &["--tls-key", "no private key"],
        ),
        (
            Some(&*cert),
            Some(&*other_key),
            none,
            &["does not go with --tls-cert"],
        ),
    ];
    for (cert, key, ca, expected) in cases {
        let error =
            start_error(cert, key, ca).unwrap_or_else(|| panic!("{cert:?} {key:?} {ca:?} started"));
        for part in expected {
            assert!(error.contains(part), "{part:?} not in: {error}");
        }
    }
}

/// Whether this redis-cli was built with TLS.
fn supports_tls(redis_cli: &Path) -> bool {
    let help = Command::new(redis_cli).arg("--help").output().unwrap();
    String::from_utf8_lossy(&help.stdout).contains("--tls")
        || String::from_utf8_lossy(&help.stderr).contains("--tls")
}

fn redis_cli(path: &Path, port: u16, args: &[&str]) -> Output {
    Command::new(path)
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli")
}

#[test]
fn redis_cli_connects_with_tls_and_a_plaintext_client_is_refused() {
    let ca = TestCa::new();
    let flags = ca.server_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = start_cads_with(1, &flags);

    // A plaintext client gets one error reply saying why, then the connection closes.
    let mut plain = RespConn::connect(server.port);
    let reply = plain.raw(&[b"PING".as_slice()]).unwrap();
    assert_eq!(reply, cads_server::tls::PLAINTEXT_REFUSAL);
    assert_eq!(plain.expect_closed(), Ok(()));

    let Some(path) = require_redis_tool("redis-cli") else {
        return;
    };
    if !supports_tls(&path) {
        support::skip_or_fail(
            "redis-cli was built without TLS",
            "install a redis-tools package built with TLS",
        );
        return;
    }
    let cacert = ca.ca_file().display().to_string();
    let tls = ["--tls", "--cacert", cacert.as_str()];
    let run = |args: &[&str]| {
        let out = redis_cli(&path, server.port, &[&tls[..], args].concat());
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run(&["PING"]), "PONG");
    assert_eq!(run(&["SET", "greeting", "hello"]), "OK");
    assert_eq!(run(&["GET", "greeting"]), "hello");

    let out = redis_cli(&path, server.port, &["GET", "greeting"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("accepts TLS connections only"), "{shown}");

    // With --tls-ca, redis-cli presents a client certificate (ours holds the key too).
    let mut flags = ca.server_flags();
    flags.extend(["--tls-ca".into(), ca.ca_file().display().to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let requiring = start_cads_with(1, &flags);
    let client = ca.client_file().display().to_string();
    let with_cert = [&tls[..], &["--cert", &client, "--key", &client, "PING"]].concat();
    let out = redis_cli(&path, requiring.port, &with_cert);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
    let out = redis_cli(&path, requiring.port, &[&tls[..], &["PING"]].concat());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PONG"));

    let other = TestCa::new();
    let wrong = other.ca_file().display().to_string();
    let out = redis_cli(
        &path,
        server.port,
        &["--tls", "--cacert", &wrong, "GET", "greeting"],
    );
    let shown = String::from_utf8_lossy(&out.stderr);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("hello") && shown.contains("verify"),
        "{shown}"
    );
}
