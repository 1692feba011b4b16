//! Gemini's configuration ids against real CMIs (004 §3.2.4, Example 3.1): the coordinator's
//! configuration, published to the instances, keeps a recovering primary's entries of the
//! fragments whose dirty list survived and makes those of a discarded fragment read as missing,
//! while a secondary never serves what it held of a fragment from before it became secondary.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cads_client::{Client, ClientConfig, RangeSource};
use cads_coord::configuration::Configuration;
use cads_coord::publish::publish;
use cads_protocol::fragment::fragment_of;
use cads_testkit::resp::RespConn;
use cads_testkit::Cmis;

const FRAGMENTS: u32 = 4;

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

/// A key of `fragment` (the CMIs hash keys into fragments as the coordinator does).
fn key_in(fragment: u32, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .find(|k| fragment_of(k.as_bytes(), FRAGMENTS) == fragment)
        .unwrap()
}

fn conn(addr: SocketAddr) -> RespConn {
    RespConn::connect(addr.port())
}

fn get(addr: SocketAddr, key: &str) -> Option<String> {
    match conn(addr).call(&["GET", key]) {
        cads_protocol::Reply::Bulk(b) => Some(String::from_utf8(b.into_owned()).unwrap()),
        cads_protocol::Reply::Nil => None,
        other => panic!("GET {key}: {other:?}"),
    }
}

/// The test plays the coordinator: a lease that does not run out.
fn grant_lease(addr: SocketAddr) {
    assert_eq!(
        conn(addr).call(&["INSTANCELEASE", &i64::MAX.to_string()]),
        cads_protocol::Reply::OK
    );
}

fn set(addr: SocketAddr, key: &str, value: &str) {
    assert_eq!(
        conn(addr).call(&["SET", key, value]),
        cads_protocol::Reply::OK
    );
}

#[test]
fn a_recovering_primary_keeps_only_the_fragments_it_can_prove_fresh() {
    let cmis = Cmis::start(2, "write-around");
    let addrs = cmis.addrs().to_vec();
    let client = Client::new(ClientConfig::new(addrs.clone()), ranges());
    // Two instances, four fragments: 0 and 2 on instance 0, 1 and 3 on instance 1.
    let mut config = Configuration::new(2, FRAGMENTS);
    for (i, &addr) in addrs.iter().enumerate() {
        publish(&client, &config, i).unwrap();
        grant_lease(addr);
    }
    let (kept, lost) = (key_in(0, "kept"), key_in(2, "lost"));
    set(addrs[0], &kept, "v0");
    set(addrs[0], &lost, "v0");
    // Instance 1 once held fragment 0 (an earlier failure), and still has an entry of it.
    set(addrs[1], &kept, "from-an-earlier-secondary-stint");

    // Instance 0 fails (here: the coordinator stops using it; its content stays, as 004 §5
    // emulates failures). Instance 1 becomes the secondary of fragments 0 and 2.
    config.instance_failed(0).unwrap();
    publish(&client, &config, 1).unwrap();
    assert_eq!(
        get(addrs[1], &kept),
        None,
        "a secondary does not serve what it held of the fragment before"
    );
    set(addrs[1], &kept, "v1-written-while-0-was-away");
    assert_eq!(
        get(addrs[1], &kept).as_deref(),
        Some("v1-written-while-0-was-away")
    );

    // Instance 0 returns: fragment 0's dirty list survived, fragment 2's was lost.
    config.instance_recovered(0, |f| f == 0, None).unwrap();
    for i in 0..2 {
        publish(&client, &config, i).unwrap();
    }
    assert_eq!(
        get(addrs[0], &kept).as_deref(),
        Some("v0"),
        "kept: a dirty-list repair (004 Algorithms 1-3) fixes what changed"
    );
    assert_eq!(
        get(addrs[0], &lost),
        None,
        "discarded: every old entry reads as missing"
    );
    set(addrs[0], &lost, "v2");
    assert_eq!(
        get(addrs[0], &lost).as_deref(),
        Some("v2"),
        "entries written under the new configuration are current"
    );
    config.fragment_recovered(0).unwrap();
    publish(&client, &config, 0).unwrap();
    assert_eq!(get(addrs[0], &kept).as_deref(), Some("v0"));
}
