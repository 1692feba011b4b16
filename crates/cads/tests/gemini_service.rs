//! The coordinator's service against real CMIs (004 §2.1, §3.1-3.2): an instance that stops
//! answering (the relay in front of it is cut) is taken as failed once its lease has run out,
//! never before; its fragments move to secondaries, each with a fresh dirty list, and every
//! instance that is up learns the new ids and the configuration entry. A coordinator restarted
//! from its state file goes on from the same configuration. When the instance answers again, a
//! fragment whose dirty list survived enters recovery and one whose list was lost is discarded.
//! Time is handed to the service, so no assertion depends on the machine's speed.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads_client::{Client, ClientConfig, RangeSource};
use cads_coord::configuration::{Configuration, Mode};
use cads_coord::dirty_list;
use cads_coord::repair::Repair;
use cads_coord::service::{Change, Service, ServiceOptions, CONFIGURATION_KEY};
use cads_protocol::Reply;
use cads_store::Relay;
use cads_testkit::resp::RespConn;
use cads_testkit::{Cmis, ScratchDir};

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

fn call(addr: SocketAddr, args: &[&str]) -> Reply<'static> {
    RespConn::connect(addr.port()).call(args)
}

fn get(addr: SocketAddr, key: &[u8]) -> Option<Vec<u8>> {
    match call(addr, &["GET", std::str::from_utf8(key).unwrap()]) {
        Reply::Bulk(b) => Some(b.into_owned()),
        Reply::Nil => None,
        other => panic!("GET: {other:?}"),
    }
}

/// The configuration id the instance stamps new entries with.
fn config_id(addr: SocketAddr) -> i64 {
    match call(addr, &["CONFIGID"]) {
        Reply::Int(id) => id,
        other => panic!("CONFIGID: {other:?}"),
    }
}

/// The configuration entry the instance holds.
fn stored_configuration(addr: SocketAddr) -> Configuration {
    let text = get(addr, CONFIGURATION_KEY).expect("the configuration entry");
    serde_json::from_slice(&text).unwrap()
}

/// Long enough that no lease granted in a test runs out on the CMIs' own clocks by accident (the
/// service's time is handed to it; the CMIs' is real).
const LEASE: Duration = Duration::from_secs(60);

/// A coordinator of two fragments, probing every 100 ms, its state in memory.
fn two_fragments(repair: Repair, transfer: Option<Duration>) -> ServiceOptions {
    ServiceOptions {
        fragments: 2,
        lease: LEASE,
        probe_every: Duration::from_millis(100),
        state_file: None,
        repair,
        transfer,
    }
}

#[test]
fn a_silent_instance_fails_over_and_returns_as_its_dirty_lists_allow() {
    // Write-around, the policy Gemini is for: the coordinator's pinned entries are stored with
    // PINSET, which every lease mode takes.
    let cmis = Cmis::start(3, "write-around");
    let relay = Relay::new(cmis.addrs()[1]);
    let addrs = vec![cmis.addrs()[0], relay.addr(), cmis.addrs()[2]];
    let dir = ScratchDir::new("coord");
    let options = ServiceOptions {
        fragments: 6,
        lease: LEASE,
        probe_every: Duration::from_millis(100),
        state_file: Some(dir.path().join("coord.json")),
        repair: Repair::Invalidate,
        transfer: None,
    };
    let client = || Client::new(ClientConfig::new(addrs.clone()), ranges());
    let mut service = Service::start(client(), options.clone(), 0).unwrap();
    let first = service.configuration().clone();
    assert_eq!(first.id(), 1);
    for &addr in cmis.addrs() {
        assert_eq!(config_id(addr), 1);
        assert_eq!(
            call(addr, &["GET", "k"]),
            Reply::Error(cads_protocol::ErrorReply::fenced()),
            "no key is served before the coordinator grants a lease"
        );
    }
    // The first probe reads the instances' clocks, the second grants leases from them.
    assert_eq!(service.step(500).unwrap(), vec![]);
    assert_eq!(service.step(1_000).unwrap(), vec![]);
    for &addr in cmis.addrs() {
        assert_eq!(stored_configuration(addr), first);
    }

    // Instance 1 falls silent. The probe at 1.5 s still sends it a grant (from the clock read at
    // 1 s), which may have arrived: its lease runs until 61.5 s.
    relay.set_cut(true);
    assert_eq!(service.step(1_500).unwrap(), vec![]);
    assert_eq!(
        service.step(61_499).unwrap(),
        vec![],
        "its lease still runs"
    );
    assert_eq!(service.step(61_500).unwrap(), vec![Change::Failed(1)]);
    let failed = service.configuration().clone();
    assert_eq!(failed.id(), 2);
    let away: Vec<u32> = (0..6)
        .filter(|&j| first.fragments()[j as usize].primary.instance == 1)
        .collect();
    assert_eq!(away.len(), 2);
    for &j in &away {
        let f = failed.fragments()[j as usize];
        assert_eq!(f.mode, Mode::Transient, "fragment {j}");
        let secondary = f.secondary.expect("another instance is up").instance;
        assert_ne!(secondary, 1);
        let list = get(addrs[secondary], &dirty_list::key(j)).expect("a dirty list");
        assert_eq!(
            list,
            dirty_list::START,
            "fragment {j}: made empty, with its start"
        );
    }
    for i in [0, 2] {
        assert_eq!(config_id(addrs[i]), 2, "instance {i} was told");
        assert_eq!(stored_configuration(addrs[i]), failed);
    }
    assert_eq!(
        config_id(cmis.addrs()[1]),
        1,
        "the silent instance was not reachable"
    );

    // The coordinator restarts from its state file.
    drop(service);
    let mut service = Service::start(client(), options.clone(), 80_000).unwrap();
    assert_eq!(service.configuration(), &failed);

    // One fragment's dirty list is lost on its secondary (evicted, say); the instance returns.
    let (kept, lost) = (away[0], away[1]);
    let lost_at = failed.fragments()[lost as usize]
        .secondary
        .unwrap()
        .instance;
    let key = String::from_utf8(dirty_list::key(lost)).unwrap();
    assert_eq!(call(addrs[lost_at], &["DEL", &key]), Reply::Int(1));
    // A list instance 1 kept from an earlier stint as a secondary goes when it returns.
    let old_list = String::from_utf8(dirty_list::key(kept)).unwrap();
    let start = std::str::from_utf8(dirty_list::START).unwrap();
    assert_eq!(
        call(cmis.addrs()[1], &["PINSET", &old_list, start]),
        Reply::OK
    );
    relay.set_cut(false);
    assert_eq!(service.step(81_000).unwrap(), vec![Change::Returned(1)]);
    assert_eq!(
        call(cmis.addrs()[1], &["INSPECT", &old_list]).field("exists"),
        Some(&Reply::Int(0)),
        "the returned instance's old dirty list is deleted"
    );
    let back = service.configuration().clone();
    assert_eq!(back.id(), 3);
    let f = back.fragments()[kept as usize];
    assert_eq!(f.mode, Mode::Recovery, "its dirty list survived");
    assert_eq!(f.primary.instance, 1);
    assert_eq!(f.primary.id, 1, "what the primary holds of it stays valid");
    let f = back.fragments()[lost as usize];
    assert_eq!(f.mode, Mode::Normal, "discarded");
    assert_eq!(f.primary.instance, 1);
    assert_eq!(f.primary.id, 3, "what the primary held of it is obsolete");
    for &addr in cmis.addrs() {
        assert_eq!(config_id(addr), 3);
    }
    // The returned instance is granted a lease at the next probe, now that it knows the ids,
    // and a recovery worker finds the kept fragment's dirty list empty: back to normal.
    assert_eq!(
        service.step(81_500).unwrap(),
        vec![Change::FragmentRecovered(kept)]
    );
    let normal = service.configuration().clone();
    assert_eq!(normal.id(), 4);
    assert_eq!(normal.fragments()[kept as usize].mode, Mode::Normal);
    assert_eq!(normal.fragments()[kept as usize].primary.id, 1);
    for &addr in cmis.addrs() {
        assert_eq!(stored_configuration(addr), normal);
    }
    assert_eq!(
        get(
            addrs[failed.fragments()[kept as usize]
                .secondary
                .unwrap()
                .instance],
            &dirty_list::key(kept)
        ),
        None,
        "the used dirty list is deleted"
    );
    match call(cmis.addrs()[1], &["FRAGMENTID", &lost.to_string()]) {
        Reply::Int(id) => assert_eq!(id, 3, "the returning instance discards the fragment"),
        other => panic!("FRAGMENTID: {other:?}"),
    }
}

/// The fence that makes a failover safe, on real clocks: an instance the coordinator cannot
/// reach, while clients still can, has stopped serving keys by the time the coordinator hands its
/// fragments to others. Nothing here waits for a fixed time: the test waits for the coordinator
/// to act, and the property holds however late that is.
#[test]
fn an_instance_cut_off_from_the_coordinator_stops_serving_before_its_fragments_move() {
    let cmis = Cmis::start(2, "write-around");
    let relay = Relay::new(cmis.addrs()[1]);
    let addrs = vec![cmis.addrs()[0], relay.addr()];
    let options = ServiceOptions {
        fragments: 4,
        lease: Duration::from_millis(1_000),
        probe_every: Duration::from_millis(50),
        state_file: None,
        repair: Repair::Invalidate,
        transfer: None,
    };
    let client = Client::new(ClientConfig::new(addrs), ranges());
    let service = Service::start(client, options, 0).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || service.run(&stop))
    };
    // A client that reaches instance 1 directly.
    let direct = cmis.addrs()[1];
    let served = || !matches!(call(direct, &["GET", "k"]), Reply::Error(ref e) if e.kind == cads_protocol::ErrorKind::Fenced);
    while !served() {
        std::thread::sleep(Duration::from_millis(10));
    }

    relay.set_cut(true);
    while config_id(cmis.addrs()[0]) < 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !served(),
        "instance 1 must be fenced once the coordinator has moved its fragments"
    );
    stop.store(true, Ordering::Release);
    running.join().unwrap();
}

/// Recovery workers (004 Algorithm 3): each dirty key is deleted on the recovering primary
/// (Gemini-I) or overwritten with the secondary's value (Gemini-O, deleted when the secondary has
/// none); keys not on the list keep their values; a key a client is filling is left for the
/// next pass; a list without its start is lost.
#[test]
fn recovery_workers_repair_the_dirty_keys_and_nothing_else() {
    use cads_coord::repair::{repair_fragment, Pass};
    for how in [Repair::Invalidate, Repair::Overwrite] {
        let cmis = Cmis::start(2, "write-around");
        let (primary, secondary) = (cmis.addrs()[0], cmis.addrs()[1]);
        let client = Client::new(ClientConfig::new(cmis.addrs().to_vec()), ranges());
        for key in ["copied", "gone", "clean", "filling"] {
            call(primary, &["SET", key, "old"]);
        }
        call(secondary, &["SET", "copied", "new"]);
        let mut list = dirty_list::START.to_vec();
        for key in ["copied", "gone", "filling"] {
            list.extend(dirty_list::line(key.as_bytes()));
        }
        let list_key = String::from_utf8(dirty_list::key(3)).unwrap();
        let list = String::from_utf8(list).unwrap();
        assert_eq!(call(secondary, &["PINSET", &list_key, &list]), Reply::OK);
        // A client is repairing "filling" itself (Algorithm 1): it holds the I lease.
        let mut filler = RespConn::connect(primary.port());
        assert_eq!(filler.call(&["ISET", "999999", "filling"]), Reply::Int(0));

        let pass = repair_fragment(&client, 3, 0, 1, how).unwrap();
        assert_eq!(
            pass,
            Pass::Partly {
                repaired: 2,
                left: 1
            },
            "{how:?}"
        );
        let expected = match how {
            Repair::Overwrite => Some(b"new".to_vec()),
            _ => None,
        };
        assert_eq!(get(primary, b"copied"), expected, "{how:?}");
        assert_eq!(
            get(primary, b"gone"),
            None,
            "{how:?}: the secondary had none"
        );
        assert_eq!(
            get(primary, b"clean"),
            Some(b"old".to_vec()),
            "{how:?}: not dirty"
        );

        assert_eq!(
            filler.call(&["IQSET", "999999", "filling", "fresh"]),
            Reply::Int(1)
        );
        let pass = repair_fragment(&client, 3, 0, 1, how).unwrap();
        assert_eq!(pass, Pass::Done { repaired: 3 }, "{how:?}");
        assert_eq!(
            get(primary, b"filling"),
            None,
            "{how:?}: repaired again, harmlessly"
        );

        assert_eq!(call(secondary, &["DEL", &list_key]), Reply::Int(1));
        call(secondary, &["APPEND", &list_key, "1 k\n"]);
        assert_eq!(
            repair_fragment(&client, 3, 0, 1, how).unwrap(),
            Pass::ListLost
        );
    }
}

/// An instance that restarts between two probes, never missing its lease, comes back as a new
/// incarnation (a volatile one without fragments or ids): the coordinator notices and tells it
/// the configuration again before it is granted a lease, and until then it refuses the
/// sessions of clients that route by that configuration.
#[test]
fn an_instance_restarted_between_probes_is_told_the_configuration_again() {
    let stable = Cmis::start(1, "write-around");
    let mut restarting = Cmis::start(1, "write-around");
    let port = restarting.addrs()[0].port();
    let addrs = vec![stable.addrs()[0], restarting.addrs()[0]];
    let options = ServiceOptions {
        fragments: 4,
        lease: LEASE,
        probe_every: Duration::from_millis(100),
        state_file: None,
        repair: Repair::Invalidate,
        transfer: None,
    };
    let client = Client::new(ClientConfig::new(addrs.clone()), ranges());
    let mut service = Service::start(client, options, 0).unwrap();
    service.step(100).unwrap();
    service.step(200).unwrap();
    let id = service.configuration().id() as i64;
    assert_eq!(config_id(addrs[1]), id);

    restarting.stop();
    let _restarted = Cmis::start_on(port, 1, |o| o.mode = Some("write-around".into()));
    assert_eq!(
        config_id(addrs[1]),
        0,
        "a volatile instance comes back knowing nothing"
    );
    match call(addrs[1], &["LCONFIG", "7", &id.to_string()]) {
        Reply::Error(e) => assert_eq!(e.kind, cads_protocol::ErrorKind::Fenced, "{e}"),
        other => panic!("LCONFIG: {other:?}"),
    }
    // No lease ran out (the service's time barely moves): only the new incarnation tells. The
    // first probe may meet a connection to the old process and fail; the next reads the new one.
    let mut now = 300;
    while config_id(addrs[1]) != id {
        assert!(
            now < 1_000,
            "told the configuration again within a few probes"
        );
        assert_eq!(service.step(now).unwrap(), vec![]);
        now += 100;
    }
    assert_eq!(service.step(now).unwrap(), vec![], "granted a lease");
    assert_eq!(
        call(addrs[1], &["LCONFIG", "8", &id.to_string()]),
        Reply::OK
    );
    assert_eq!(stored_configuration(addrs[1]), *service.configuration());
}

/// `n` plain GETs of `key` on the instance at `addr` (hits if it holds the key).
fn read_times(addr: SocketAddr, key: &str, n: usize) {
    let mut conn = RespConn::connect(addr.port());
    for _ in 0..n {
        conn.call(&["GET", key]);
    }
}

/// Working-set transfer (004 §3.2.2) as the coordinator runs it: a returning instance's
/// fragments recover with the hit ratio it had before it failed as their transfer's goal, and
/// stay in recovery after their dirty keys are repaired until its hit ratio is back near the
/// goal; a transfer that runs as long as it may ends, and the fragment goes on recovering
/// without it until its last dirty key is repaired.
#[test]
fn a_transfer_lasts_until_the_returned_instance_hits_as_before() {
    let cmis = Cmis::start(2, "write-around");
    let relay = Relay::new(cmis.addrs()[1]);
    let addrs = vec![cmis.addrs()[0], relay.addr()];
    let direct = cmis.addrs()[1];
    let options = two_fragments(Repair::Invalidate, Some(Duration::from_secs(30)));
    let client = Client::new(ClientConfig::new(addrs.clone()), ranges());
    let mut service = Service::start(client, options, 0).unwrap();
    // Fragment 1's primary is instance 1; keys of it that instance 1 holds, and one it lacks.
    let of_1: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| cads_client::fragment_of(k.as_bytes(), 2) == 1)
        .take(3)
        .collect();
    let (held, dirty, missing) = (&of_1[0], &of_1[1], &of_1[2]);
    assert_eq!(service.step(500).unwrap(), vec![]);
    assert_eq!(service.step(1_000).unwrap(), vec![]);
    for key in [held, dirty] {
        assert_eq!(call(direct, &["SET", key, "v"]), Reply::OK);
    }
    // 90 hits in 100 reads before it fails.
    read_times(direct, held, 90);
    read_times(direct, missing, 10);
    assert_eq!(service.step(1_500).unwrap(), vec![]);

    relay.set_cut(true);
    assert_eq!(service.step(1_600).unwrap(), vec![]);
    assert_eq!(service.step(62_000).unwrap(), vec![Change::Failed(1)]);
    // A write listed `dirty` meanwhile; a client holds its I lease on the returned primary, so
    // the worker cannot repair it yet.
    let list_key = String::from_utf8(dirty_list::key(1)).unwrap();
    let line = String::from_utf8(dirty_list::line(dirty.as_bytes())).unwrap();
    assert!(matches!(
        call(addrs[0], &["APPEND", &list_key, &line]),
        Reply::Int(_)
    ));
    let mut filler = RespConn::connect(direct.port());
    assert_eq!(
        filler.call(&["ISET", "999999", dirty]),
        Reply::Int(0),
        "no marker"
    );
    relay.set_cut(false);
    assert_eq!(service.step(62_500).unwrap(), vec![Change::Returned(1)]);
    let f = service.configuration().fragments()[1];
    assert_eq!((f.mode, f.transfer), (Mode::Recovery, Some(900)));
    assert_eq!(
        stored_configuration(addrs[0]).fragments()[1].transfer,
        Some(900)
    );
    assert_eq!(
        service.step(63_000).unwrap(),
        vec![],
        "the dirty key is held"
    );
    // The transfer runs as long as it may, its goal unmet: it ends, the recovery goes on.
    assert_eq!(service.step(92_499).unwrap(), vec![]);
    assert_eq!(
        service.step(92_500).unwrap(),
        vec![Change::TransferEnded(1)]
    );
    let f = service.configuration().fragments()[1];
    assert_eq!((f.mode, f.transfer), (Mode::Recovery, None));
    assert_eq!(filler.call(&["IDELETE", "999999", dirty]), Reply::Int(1));
    assert_eq!(
        service.step(93_000).unwrap(),
        vec![Change::FragmentRecovered(1)]
    );

    // It fails again before a ratio of its return was measured: the old goal stands. Back, its
    // dirty list is empty at once, and the fragment stays in recovery for the transfer.
    relay.set_cut(true);
    assert_eq!(service.step(93_100).unwrap(), vec![]);
    assert_eq!(service.step(154_000).unwrap(), vec![Change::Failed(1)]);
    relay.set_cut(false);
    assert_eq!(service.step(154_500).unwrap(), vec![Change::Returned(1)]);
    assert_eq!(
        service.step(155_000).unwrap(),
        vec![],
        "repaired, transferring"
    );
    let f = service.configuration().fragments()[1];
    assert_eq!((f.mode, f.transfer), (Mode::Recovery, Some(900)));
    // 80 hits in 100: below the goal less its margin.
    read_times(direct, held, 80);
    read_times(direct, missing, 20);
    assert_eq!(service.step(156_000).unwrap(), vec![]);
    // 95 in 100: the goal is met.
    read_times(direct, held, 95);
    read_times(direct, missing, 5);
    assert_eq!(
        service.step(157_000).unwrap(),
        vec![Change::FragmentRecovered(1)]
    );
    assert_eq!(service.configuration().fragments()[1].mode, Mode::Normal);
}

/// The baselines repair nothing, so they keep no dirty lists (004 §5.3 compares Gemini against
/// alternatives that "generate no dirty lists"): no list is started on a secondary, and on the
/// instance's return StaleCache keeps what the primary held while VolatileCache discards it.
#[test]
fn the_baselines_keep_no_dirty_lists_and_keep_or_discard_on_return() {
    for repair in [Repair::Keep, Repair::Discard] {
        let cmis = Cmis::start(2, "write-around");
        let relay = Relay::new(cmis.addrs()[1]);
        let addrs = vec![cmis.addrs()[0], relay.addr()];
        let options = two_fragments(repair, None);
        let client = Client::new(ClientConfig::new(addrs.clone()), ranges());
        let mut service = Service::start(client, options, 0).unwrap();
        assert!(!service.configuration().dirty_lists(), "{repair:?}");
        assert_eq!(service.step(500).unwrap(), vec![]);
        assert_eq!(service.step(1_000).unwrap(), vec![]);
        relay.set_cut(true);
        assert_eq!(service.step(1_500).unwrap(), vec![]);
        assert_eq!(service.step(61_500).unwrap(), vec![Change::Failed(1)]);
        let away = 1;
        let f = service.configuration().fragments()[away as usize];
        assert_eq!(
            (f.mode, f.secondary.unwrap().instance),
            (Mode::Transient, 0)
        );
        assert_eq!(
            get(addrs[0], &dirty_list::key(away)),
            None,
            "{repair:?}: no list started"
        );
        assert_eq!(
            &stored_configuration(addrs[0]),
            service.configuration(),
            "{repair:?}: clients learn the new configuration"
        );

        relay.set_cut(false);
        assert_eq!(service.step(62_000).unwrap(), vec![Change::Returned(1)]);
        let f = service.configuration().fragments()[away as usize];
        assert_eq!(
            (f.mode, f.primary.instance),
            (Mode::Normal, 1),
            "{repair:?}"
        );
        let kept = repair == Repair::Keep;
        assert_eq!(f.primary.id == 1, kept, "{repair:?}: {f:?}");
    }
}

/// A fragment whose dirty keys are all repaired stays in recovery only for the working-set
/// transfer; when its secondary fails then, the transfer ends and the primary keeps what it holds
/// (its id unchanged), where a fragment still being repaired would be discarded.
#[test]
fn a_repaired_fragment_keeps_its_primary_when_its_secondary_fails_during_the_transfer() {
    let cmis = Cmis::start(2, "write-around");
    let relays = [Relay::new(cmis.addrs()[0]), Relay::new(cmis.addrs()[1])];
    let addrs = vec![relays[0].addr(), relays[1].addr()];
    let options = two_fragments(Repair::Invalidate, Some(Duration::from_secs(600)));
    let client = Client::new(ClientConfig::new(addrs.clone()), ranges());
    let mut service = Service::start(client, options, 0).unwrap();
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| cads_client::fragment_of(k.as_bytes(), 2) == 1)
        .unwrap();
    assert_eq!(service.step(500).unwrap(), vec![]);
    assert_eq!(service.step(1_000).unwrap(), vec![]);
    assert_eq!(call(cmis.addrs()[1], &["SET", &key, "v"]), Reply::OK);
    read_times(cmis.addrs()[1], &key, 100);
    assert_eq!(service.step(1_500).unwrap(), vec![]);

    relays[1].set_cut(true);
    assert_eq!(service.step(1_600).unwrap(), vec![]);
    assert_eq!(service.step(62_000).unwrap(), vec![Change::Failed(1)]);
    relays[1].set_cut(false);
    assert_eq!(service.step(62_500).unwrap(), vec![Change::Returned(1)]);
    assert_eq!(
        service.step(63_000).unwrap(),
        vec![],
        "repaired at once (nothing was written), transferring"
    );
    let before = service.configuration().fragments()[1];
    assert_eq!((before.mode, before.transfer), (Mode::Recovery, Some(1000)));

    relays[0].set_cut(true);
    assert_eq!(service.step(63_100).unwrap(), vec![]);
    assert_eq!(service.step(124_000).unwrap(), vec![Change::Failed(0)]);
    let f = service.configuration().fragments()[1];
    assert_eq!(
        (f.mode, f.primary, f.secondary),
        (Mode::Normal, before.primary, None),
        "kept, not discarded"
    );
    assert_eq!(get(cmis.addrs()[1], key.as_bytes()), Some(b"v".to_vec()));
}
