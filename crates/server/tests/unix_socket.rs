//! `--unixsocket-dir`: every CMI also serves a Unix socket named after its TCP port, with the
//! same commands and state as the port; a socket file an earlier run left is replaced, any other
//! file at that path is refused, and the sockets are removed when the server stops.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use cads_protocol::resp::{parse_reply, write_request};
use cads_protocol::{unix_socket_path, Reply};
use cads_server::{Config, Options, Server};

fn call(stream: &mut impl ReadWrite, args: &[&str]) -> Reply<'static> {
    let mut out = Vec::new();
    write_request(&mut out, args);
    stream.write_all(&out).unwrap();
    let mut buf = Vec::new();
    loop {
        if let Some((reply, _)) = parse_reply(&buf).expect("a well-formed reply") {
            return reply;
        }
        let mut chunk = [0; 4096];
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before replying");
        buf.extend_from_slice(&chunk[..n]);
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn start(dir: &Path) -> anyhow::Result<Server> {
    Server::start(Config::resolve(Options {
        port: Some(0),
        cmis: Some(2),
        unixsocket_dir: Some(dir.to_path_buf()),
        ..Options::default()
    })?)
}

#[test]
fn each_cmi_serves_its_unix_socket_beside_its_port() {
    let dir = cads_testkit::ScratchDir::new("unix-sockets");
    let server = start(dir.path()).unwrap();
    let addrs = server.addrs().to_vec();
    for (i, addr) in addrs.iter().enumerate() {
        let path = unix_socket_path(dir.path(), addr.port());
        let mut unix = UnixStream::connect(&path).expect("the CMI's Unix socket");
        let key = format!("k{i}");
        assert_eq!(call(&mut unix, &["SET", &key, "over-unix"]), Reply::OK);
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(
            call(&mut tcp, &["GET", &key]),
            Reply::owned_bulk(b"over-unix".to_vec()),
            "one CMI behind both"
        );
        assert_eq!(call(&mut unix, &["PING"]), Reply::Status("PONG".into()));
    }
    server.stop();
    server.join().unwrap();
    for addr in &addrs {
        assert!(
            !unix_socket_path(dir.path(), addr.port()).exists(),
            "removed when the server stops"
        );
    }
}

#[test]
fn a_stale_socket_is_replaced_and_any_other_file_refused() {
    let dir = cads_testkit::ScratchDir::new("unix-stale");
    let port = cads_testkit::free_port();
    let path = unix_socket_path(dir.path(), port);
    let options = |dir: &Path| Options {
        port: Some(port),
        cmis: Some(1),
        unixsocket_dir: Some(dir.to_path_buf()),
        ..Options::default()
    };
    // A socket nobody serves any more, as a killed server leaves it.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let server = Server::start(Config::resolve(options(dir.path())).unwrap()).unwrap();
    let mut unix = UnixStream::connect(&path).unwrap();
    assert_eq!(call(&mut unix, &["PING"]), Reply::Status("PONG".into()));
    server.stop();
    server.join().unwrap();

    std::fs::write(&path, b"not a socket").unwrap();
    let error = Server::start(Config::resolve(options(dir.path())).unwrap())
        .err()
        .expect("a file that is not a socket is left alone");
    assert!(format!("{error:#}").contains("not a socket"), "{error:#}");
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
}

/// Another server's live socket is not taken over: a second server on the same port (another
/// loopback address) and directory fails to start, leaves nothing behind, and the first still
/// serves its socket. Unix sockets are for plaintext clients: not with TLS.
#[test]
fn a_served_socket_is_refused_and_tls_is_not_combined() {
    let dir = cads_testkit::ScratchDir::new("unix-served");
    let port = cads_testkit::free_port();
    let on = |bind: [u8; 4]| Options {
        port: Some(port),
        cmis: Some(1),
        bind: Some(std::net::IpAddr::from(bind)),
        unixsocket_dir: Some(dir.path().to_path_buf()),
        ..Options::default()
    };
    let first = Server::start(Config::resolve(on([127, 0, 0, 1])).unwrap()).unwrap();
    let error = Server::start(Config::resolve(on([127, 0, 0, 2])).unwrap())
        .err()
        .expect("the socket is served");
    assert!(
        format!("{error:#}").contains("another server serves"),
        "{error:#}"
    );
    let path = unix_socket_path(dir.path(), port);
    let mut unix = UnixStream::connect(&path).unwrap();
    assert_eq!(call(&mut unix, &["PING"]), Reply::Status("PONG".into()));
    first.stop();
    first.join().unwrap();

    let tls = Options {
        tls_cert: Some("cert.pem".into()),
        tls_key: Some("key.pem".into()),
        ..on([127, 0, 0, 1])
    };
    let error = Config::resolve(tls).unwrap_err();
    assert!(
        format!("{error:#}").contains("--unixsocket-dir"),
        "{error:#}"
    );
}
