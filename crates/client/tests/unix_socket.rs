//! A client given the CMIs' `--unixsocket-dir` reaches them through their Unix sockets (the
//! CMI knows such a client by the port-less loopback address), sessions included; a CMI whose
//! socket is not there, or is not served, is reached over TCP.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cads_client::{Client, ClientConfig, RangeSource};
use cads_protocol::{ClientSub, Command, Reply};
use cads_testkit::{Cmis, ScratchDir};

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

/// The address CMI `cmi` lists for the connection a call through `client` uses.
fn own_addr(client: &Client, cmi: usize) -> String {
    let Reply::Bulk(line) = client
        .execute(cmi, &Command::Client(ClientSub::Info))
        .unwrap()
    else {
        panic!("CLIENT INFO");
    };
    let line = String::from_utf8(line.into_owned()).unwrap();
    line.split(' ')
        .find_map(|field| field.strip_prefix("addr="))
        .expect("an addr field")
        .to_string()
}

#[test]
fn a_client_reaches_local_cmis_through_their_unix_sockets() {
    let dir = ScratchDir::new("client-unix");
    let path = dir.path().to_path_buf();
    let cmis = Cmis::start_with(2, |o| {
        o.mode = Some("write-through".into());
        o.unixsocket_dir = Some(path);
    });
    let mut config = ClientConfig::new(cmis.addrs().to_vec());
    config.unix_dir = Some(dir.path().to_path_buf());
    let client = Client::new(config, ranges());
    client.set(b"k", b"v").unwrap();
    assert_eq!(client.get(b"k").unwrap(), Some(b"v".to_vec()));
    let mut session = client.session();
    session.set(b"k", b"w", false).unwrap();
    session.validate().unwrap();
    session.commit().unwrap();
    assert_eq!(client.get(b"k").unwrap(), Some(b"w".to_vec()));
    for cmi in 0..2 {
        assert_eq!(
            own_addr(&client, cmi),
            "127.0.0.1:0",
            "CMI {cmi} over its socket"
        );
    }

    // Without the directory, or with a socket missing, TCP.
    let tcp = Client::new(ClientConfig::new(cmis.addrs().to_vec()), ranges());
    assert_ne!(own_addr(&tcp, 0), "127.0.0.1:0");
    std::fs::remove_file(cads_protocol::unix_socket_path(
        dir.path(),
        cmis.addrs()[1].port(),
    ))
    .unwrap();
    let mut config = ClientConfig::new(cmis.addrs().to_vec());
    config.unix_dir = Some(dir.path().to_path_buf());
    let partly = Client::new(config, ranges());
    assert_eq!(own_addr(&partly, 0), "127.0.0.1:0");
    assert_ne!(own_addr(&partly, 1), "127.0.0.1:0");
    assert_eq!(partly.get(b"k").unwrap(), Some(b"w".to_vec()));

    // A socket file nobody listens on (its server killed) is passed over for the port.
    drop(std::os::unix::net::UnixListener::bind(
        cads_protocol::unix_socket_path(dir.path(), cmis.addrs()[1].port()),
    ));
    let mut config = ClientConfig::new(cmis.addrs().to_vec());
    config.unix_dir = Some(dir.path().to_path_buf());
    let stale = Client::new(config, ranges());
    assert_ne!(own_addr(&stale, 1), "127.0.0.1:0");
}
