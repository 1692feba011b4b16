//! Gemini end to end (004): three write-around CMIs, the coordinator's service on real clocks,
//! and two AppNodes. One instance is cut off from everyone while AppNode A keeps writing (its
//! fragments wait, then move to secondaries that list the written keys), then comes back with
//! its old content: the dirty keys are repaired as they are read and by the recovery workers,
//! the clean ones are served from the old content at once. Every read is checked against the
//! values written, including those of AppNode B, which sat idle through the failure with the
//! configuration of before it. Nothing waits for a fixed time: the test waits for the
//! coordinator to act, and the checks hold however late that is.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads::{Cads, Config, Policy};
use cads_client::{Client, ClientConfig};
use cads_coord::configuration::Mode;
use cads_coord::repair::Repair;
use cads_coord::service::{Service, ServiceOptions};
use cads_protocol::{ErrorKind, Reply};
use cads_store::Relay;
use common::gemini::{call, ranges, PlayedCoordinator};
use common::{Counters, Deployment};

fn config_id(addr: SocketAddr) -> i64 {
    match call(addr, &["CONFIGID"]) {
        Reply::Int(id) => id,
        other => panic!("CONFIGID: {other:?}"),
    }
}

fn serves(addr: SocketAddr) -> bool {
    !matches!(call(addr, &["GET", "probe"]), Reply::Error(ref e) if e.kind == ErrorKind::Fenced)
}

/// Waits until `done` holds, saying after ten seconds what it still waits for.
fn wait_for(what: &str, done: impl FnMut() -> bool) {
    common::wait_until(Duration::from_secs(10), || what.to_string(), done);
}

/// The counters' values as written, checked by every read.
struct Model {
    names: Vec<String>,
    values: Vec<i64>,
}

/// An AppNode routing by Gemini's configuration over the CMIs at `addrs`.
fn gemini_appnode(d: &Deployment, addrs: &[SocketAddr]) -> Cads {
    let config = Config {
        gemini: true,
        ..Config::default()
    };
    Cads::connect(d.store.clone(), addrs, Policy::WriteAround, config)
}

impl Model {
    /// `n` counters, each incremented once through `cads`.
    fn incremented(d: &Deployment, n: usize, cads: &Cads) -> Model {
        let names = d.counters(n);
        let mut model = Model {
            values: vec![0; names.len()],
            names,
        };
        for i in 0..model.names.len() {
            model.increment(cads, i);
        }
        model
    }

    fn increment(&mut self, cads: &Cads, i: usize) {
        let name = self.names[i].clone();
        cads.run(|s| s.write(&Counters, &name)).unwrap();
        self.values[i] += 1;
    }

    fn check_all(&self, cads: &Cads, who: &str) {
        for (name, &expected) in self.names.iter().zip(&self.values) {
            let read = cads.read(&Counters, name).unwrap();
            assert_eq!(read, expected, "{who} read {name} stale");
        }
    }
}

#[test]
fn an_instance_back_with_its_content_serves_no_stale_value() {
    let d = Deployment::start_with(Policy::WriteAround, 3, |_| {});
    let relay = Relay::new(d.cmis.addrs()[2]);
    // Everyone reaches instance 2 through the relay: cutting it is a failure for all.
    let addrs = vec![d.cmis.addrs()[0], d.cmis.addrs()[1], relay.addr()];
    let options = service_options(12);
    let (stop, coordinator) = start_coordinator(addrs.clone(), options);
    wait_for("every instance serves", || {
        d.cmis.addrs().iter().all(|&a| serves(a))
    });

    let a = gemini_appnode(&d, &addrs);
    let b = gemini_appnode(&d, &addrs);
    let mut model = Model::incremented(&d, 60, &a);
    model.check_all(&a, "A");
    model.check_all(&b, "B");
    let before = a.gemini().unwrap().configuration_id();
    assert!(before > 0);
    let hits_before = hits(d.cmis.addrs()[2]);
    assert!(hits_before > 0, "instance 2 holds some counters");

    // Instance 2 is cut off. Writes to its fragments wait until the coordinator moves them.
    relay.set_cut(true);
    for round in 0..3 {
        for i in (round..model.names.len()).step_by(2) {
            model.increment(&a, i);
        }
        model.check_all(&a, "A (transient)");
    }
    let transient = config_id(d.cmis.addrs()[0]);
    assert!(
        transient > before as i64,
        "the coordinator moved instance 2's fragments"
    );

    // Instance 2 comes back with all it held, some of it overwritten meanwhile.
    relay.set_cut(false);
    wait_for("instance 2 serves again", || serves(d.cmis.addrs()[2]));
    // B routes by the configuration of before the failure; the fences send it to the new one.
    model.check_all(&b, "B (back)");
    model.check_all(&a, "A (back)");
    for i in (0..model.names.len()).step_by(3) {
        model.increment(&a, i);
    }
    model.check_all(&b, "B (recovery)");
    model.check_all(&a, "A (recovery)");
    assert!(
        hits(d.cmis.addrs()[2]) > hits_before,
        "the returned instance serves what it kept"
    );

    // The workers finish the dirty lists: every fragment is back to normal.
    wait_for("every fragment is normal", || {
        a.gemini().unwrap().refresh(a.cache().unwrap());
        stored_modes(&a).iter().all(|&m| m == Mode::Normal)
    });
    model.check_all(&a, "A (normal)");
    model.check_all(&b, "B (normal)");
    for (i, name) in model.names.iter().enumerate() {
        assert_eq!(d.stored(name), model.values[i], "{name} in the data store");
    }
    stop.store(true, Ordering::Release);
    coordinator.join().unwrap();
}

/// One AppNode (A) is cut off from one instance by the relay while the coordinator and the
/// other AppNode (B) still reach it: A must not write around the instance, since B keeps reading
/// it and would read what A's write replaced. A's writes to the instance's fragments wait and
/// are not acknowledged while the cut lasts (the coordinator sees the instance alive and moves
/// nothing); A's reads go to the data store; B reads nothing older than a write acknowledged
/// before its read began. Once the cut heals, A's writes go through and both read them.
#[test]
fn a_process_cut_from_an_instance_others_reach_reads_and_writes_nothing_stale() {
    let d = Deployment::start_with(Policy::WriteAround, 3, |_| {});
    let relay = Relay::new(d.cmis.addrs()[2]);
    let direct = d.cmis.addrs().to_vec();
    let options = service_options(12);
    let (stop, coordinator) = start_coordinator(direct.clone(), options);
    wait_for("every instance serves", || {
        direct.iter().all(|&a| serves(a))
    });
    let a = Cads::connect(
        d.store.clone(),
        &[direct[0], direct[1], relay.addr()],
        Policy::WriteAround,
        Config {
            gemini: true,
            // A write that cannot reach its instance gives up within this, unacknowledged.
            give_up_after: Duration::from_secs(2),
            ..Config::default()
        },
    );
    let b = gemini_appnode(&d, &direct);
    let mut model = Model::incremented(&d, 30, &a);
    model.check_all(&b, "B");
    let configuration = config_id(direct[0]);
    let on_cut: Vec<usize> = (0..model.names.len())
        .filter(|&i| {
            a.cache()
                .unwrap()
                .route(&common::counter_key(&model.names[i]))
                == 2
        })
        .collect();
    assert!(!on_cut.is_empty(), "instance 2 holds some counters");

    relay.set_cut(true);
    // Each write to instance 2 from A: acknowledged (counted in the model) or failed (in the
    // data store or not, if its outcome is unknown; `attempts` bounds the value from above).
    let mut attempts = model.values.clone();
    for &i in on_cut.iter().take(2) {
        attempts[i] += 1;
        let name = model.names[i].clone();
        if a.run(|s| s.write(&Counters, &name)).is_ok() {
            model.values[i] += 1;
        }
        for (j, name) in model.names.iter().enumerate() {
            for (who, cads) in [("A (cut)", &a), ("B (while A is cut)", &b)] {
                let read = cads.read(&Counters, name).unwrap();
                assert!(
                    (model.values[j]..=attempts[j]).contains(&read),
                    "{who} read {name} = {read}: acknowledged {}, attempted {}",
                    model.values[j],
                    attempts[j]
                );
            }
        }
    }
    assert_eq!(
        config_id(direct[0]),
        configuration,
        "the coordinator, which reaches instance 2, moved nothing"
    );

    relay.set_cut(false);
    for &i in &on_cut {
        model.increment(&a, i);
    }
    // What a failed write left in the data store is the truth from here.
    for (i, name) in model.names.iter().enumerate() {
        model.values[i] = d.stored(name);
        assert!(
            model.values[i] <= attempts[i] + 1,
            "{name} written more than asked"
        );
    }
    model.check_all(&a, "A (healed)");
    model.check_all(&b, "B (healed)");
    stop.store(true, Ordering::Release);
    coordinator.join().unwrap();
}

/// Cache hits an instance has served.
fn hits(addr: SocketAddr) -> u64 {
    let Reply::Bulk(info) = call(addr, &["INFO", "stats"]) else {
        panic!("INFO");
    };
    let text = String::from_utf8(info.into_owned()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("keyspace_hits:"))
        .expect("keyspace_hits")
        .trim()
        .parse()
        .unwrap()
}

/// The fragments' modes in the configuration entry instance 0 holds.
fn stored_modes(cads: &Cads) -> Vec<Mode> {
    let client = cads.cache().unwrap();
    let entry = client
        .get_from(0, cads_coord::service::CONFIGURATION_KEY)
        .unwrap()
        .unwrap();
    let c: cads_coord::configuration::Configuration = serde_json::from_slice(&entry).unwrap();
    c.fragments().iter().map(|f| f.mode).collect()
}

/// The AppNode's side of each mode, with the test as the coordinator (so that no recovery
/// worker repairs a key before the AppNode meets it): transient writes list their keys on the
/// secondary; in recovery a dirty key is repaired on the primary as it is read (004 Algorithm 1)
/// while a clean one is served from what the primary kept, and a write deletes on the primary and
/// on the secondary (Algorithm 2).
#[test]
fn each_mode_routes_and_repairs_as_gemini_says() {
    use cads_coord::dirty_list;

    const FRAGMENTS: u32 = 8;
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let mut coord = PlayedCoordinator::start(d.cmis.addrs(), FRAGMENTS);
    let addrs = coord.addrs.clone();

    let a = gemini_appnode(&d, &addrs);
    assert_eq!(a.gemini().unwrap().configuration_id(), 1);
    let names = d.counters(40);
    let key_of = |name: &str| common::counter_key(name);
    let fragment = |name: &str| cads_client::fragment_of(&key_of(name), FRAGMENTS);
    let on_1: Vec<&String> = names
        .iter()
        .filter(|n| {
            coord.configuration.fragments()[fragment(n) as usize]
                .primary
                .instance
                == 1
        })
        .collect();
    let (dirty, clean) = (on_1[0].clone(), on_1[1].clone());
    for name in [&dirty, &clean] {
        a.run(|s| s.write(&Counters, name)).unwrap();
        assert_eq!(a.read(&Counters, name).unwrap(), 1, "cached on instance 1");
    }

    // Instance 1 fails: its lease is withdrawn, its fragments move to instance 0.
    coord.fail(1);
    // A routes by the old configuration until instance 1's fence sends it to the new one.
    a.run(|s| s.write(&Counters, &dirty)).unwrap();
    assert_eq!(a.gemini().unwrap().configuration_id(), 2);
    assert_eq!(a.read(&Counters, &dirty).unwrap(), 2);
    assert_eq!(
        a.read(&Counters, &clean).unwrap(),
        1,
        "filled on the secondary"
    );
    let list_key = dirty_list::key(fragment(&dirty));
    let list = coord.held(0, &list_key).unwrap();
    assert!(
        dirty_list::parse(&list).unwrap().contains(&key_of(&dirty)),
        "the transient write listed its key"
    );

    // Instance 1 returns with what it held: the dirty counter at 1 (stale), the clean one at 1.
    coord.recover(1, None);
    assert_eq!(
        coord.held(1, &key_of(&dirty)),
        Some(b"1".to_vec()),
        "the primary came back with the overwritten value"
    );
    let hits_before = hits(addrs[1]);
    assert_eq!(
        a.read(&Counters, &dirty).unwrap(),
        2,
        "repaired as it is read"
    );
    assert_eq!(a.read(&Counters, &clean).unwrap(), 1);
    assert_eq!(a.gemini().unwrap().configuration_id(), 3);
    assert!(
        hits(addrs[1]) > hits_before,
        "the clean counter came from what instance 1 kept"
    );
    assert_eq!(
        coord.held(1, &key_of(&dirty)),
        Some(b"2".to_vec()),
        "refilled on the primary"
    );

    // A write in recovery deletes the key on both replicas.
    assert_eq!(coord.held(0, &key_of(&clean)), Some(b"1".to_vec()));
    a.run(|s| s.write(&Counters, &clean)).unwrap();
    assert_eq!(coord.held(0, &key_of(&clean)), None);
    assert_eq!(coord.held(1, &key_of(&clean)), None);
    assert_eq!(a.read(&Counters, &clean).unwrap(), 2);
}

/// A configuration without dirty lists (the baselines'): a write in transient mode deletes the
/// key on the secondary and appends nothing there.
#[test]
fn without_dirty_lists_a_transient_write_lists_nothing() {
    const FRAGMENTS: u32 = 4;
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let mut coord = PlayedCoordinator::start(d.cmis.addrs(), FRAGMENTS);
    coord.configuration.set_dirty_lists(false);
    coord.make_known(&[0, 1]);
    let addrs = coord.addrs.clone();
    let a = gemini_appnode(&d, &addrs);
    let name = d
        .counters(20)
        .into_iter()
        .find(|n| {
            let j = cads_client::fragment_of(&common::counter_key(n), FRAGMENTS);
            coord.configuration.fragments()[j as usize].primary.instance == 1
        })
        .unwrap();
    a.run(|s| s.write(&Counters, &name)).unwrap();
    coord.fail(1);
    a.run(|s| s.write(&Counters, &name)).unwrap();
    assert_eq!(a.gemini().unwrap().configuration_id(), 3);
    assert_eq!(a.read(&Counters, &name).unwrap(), 2);
    let j = cads_client::fragment_of(&common::counter_key(&name), FRAGMENTS);
    assert_eq!(
        coord.held(0, &cads_coord::dirty_list::key(j)),
        None,
        "an append would have made the list"
    );
}

/// Working-set transfer (004 Algorithm 1 lines 10-15), with the test as the coordinator: keys
/// the returning primary misses (a dirty one it had, and one first read while it was away) are
/// answered from the secondary without the data store, and copied onto the primary. Without
/// transfer the same miss goes to the data store.
#[test]
fn a_recovering_primary_is_filled_from_its_secondary_with_transfer() {
    const FRAGMENTS: u32 = 8;
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let mut coord = PlayedCoordinator::start(d.cmis.addrs(), FRAGMENTS);
    let a = gemini_appnode(&d, &coord.addrs);
    let names = d.counters(40);
    let key_of = |name: &str| common::counter_key(name);
    let on_1: Vec<String> = names
        .iter()
        .filter(|n| {
            let j = cads_client::fragment_of(&key_of(n), FRAGMENTS);
            coord.configuration.fragments()[j as usize].primary.instance == 1
        })
        .cloned()
        .collect();
    let (dirty, new, without) = (&on_1[0], &on_1[1], &on_1[2]);
    a.run(|s| s.write(&Counters, dirty)).unwrap();
    assert_eq!(a.read(&Counters, dirty).unwrap(), 1, "cached on instance 1");

    coord.fail(1);
    a.gemini().unwrap().refresh(a.cache().unwrap());
    a.run(|s| s.write(&Counters, dirty)).unwrap();
    for name in [dirty, new, without] {
        a.read(&Counters, name).unwrap();
        assert!(
            coord.held(0, &key_of(name)).is_some(),
            "filled on the secondary"
        );
    }

    coord.recover(1, Some(900));
    a.gemini().unwrap().refresh(a.cache().unwrap());
    assert_eq!(
        coord.held(1, &key_of(dirty)),
        Some(b"1".to_vec()),
        "stale on the primary"
    );
    let reads = d.faults.reads();
    assert_eq!(
        a.read(&Counters, dirty).unwrap(),
        2,
        "the secondary's value"
    );
    assert_eq!(a.read(&Counters, new).unwrap(), 0);
    assert_eq!(d.faults.reads(), reads, "the data store was not asked");
    for (name, value) in [(dirty, b"2"), (new, b"0")] {
        assert_eq!(coord.held(1, &key_of(name)), Some(value.to_vec()), "copied");
    }

    // The coordinator ends the transfer: a miss on the primary goes to the data store again.
    let j = cads_client::fragment_of(&key_of(without), FRAGMENTS);
    coord.configuration.end_transfer(j).unwrap();
    coord.make_known(&[0, 1]);
    a.gemini().unwrap().refresh(a.cache().unwrap());
    assert_eq!(a.read(&Counters, without).unwrap(), 0);
    assert!(d.faults.reads() > reads, "the data store answered");
}

/// The coordinator stops and a new one starts from its state file while an AppNode keeps
/// working: no configuration is lost (the new one goes on from the same id), and the AppNode's
/// operations all complete, every read checked. While no coordinator runs, the instances' leases
/// run out: reads go to the data store and writes wait for the new coordinator's grants.
#[test]
fn a_coordinator_restarted_from_its_state_file_loses_nothing_and_clients_go_on() {
    let d = Deployment::start_with(Policy::WriteAround, 2, |_| {});
    let addrs = d.cmis.addrs().to_vec();
    let state = cads_testkit::ScratchDir::new("coordinator");
    let options = ServiceOptions {
        state_file: Some(state.path().join("coord.json")),
        ..service_options(8)
    };
    let (stop, first) = start_coordinator(addrs.clone(), options.clone());
    wait_for("every instance serves", || addrs.iter().all(|&a| serves(a)));
    let a = gemini_appnode(&d, &addrs);
    let mut model = Model::incremented(&d, 20, &a);
    model.check_all(&a, "A");
    let id = config_id(addrs[0]);

    stop.store(true, Ordering::Release);
    first.join().unwrap();
    // The new coordinator comes once the leases have run out (the test waits for that, however
    // long the machine takes): meanwhile reads go around the cache and a write waits.
    wait_for("the instances are fenced", || {
        addrs.iter().all(|&a| !serves(a))
    });
    model.check_all(&a, "A (no coordinator)");
    let restarter = std::thread::spawn({
        let addrs = addrs.clone();
        move || start_coordinator(addrs, options)
    });
    for round in 0..3 {
        for i in (round..model.names.len()).step_by(3) {
            model.increment(&a, i);
        }
        model.check_all(&a, "A (new coordinator)");
    }
    let (stop, second) = restarter.join().unwrap();
    assert_eq!(config_id(addrs[0]), id, "the same configuration goes on");
    for (i, name) in model.names.iter().enumerate() {
        assert_eq!(d.stored(name), model.values[i], "{name} in the data store");
    }
    stop.store(true, Ordering::Release);
    second.join().unwrap();
}

/// The coordinator's settings in these tests: instance leases of a second, probed every 50 ms,
/// state in memory, dirty keys invalidated (Gemini-I).
fn service_options(fragments: u32) -> ServiceOptions {
    ServiceOptions {
        fragments,
        lease: Duration::from_millis(1_000),
        probe_every: Duration::from_millis(50),
        state_file: None,
        repair: Repair::Invalidate,
        transfer: None,
    }
}

/// The coordinator's service over `addrs`, running in a thread until its flag is set.
fn start_coordinator(
    addrs: Vec<SocketAddr>,
    options: ServiceOptions,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let client = Client::new(ClientConfig::new(addrs), ranges());
    let service = Service::start(client, options, 0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || service.run(&stop))
    };
    (stop, running)
}

/// A cache error that says nothing of the configuration — here the CMIs' cap on session memory
/// refuses the leases of a write's deletes (NOTSTORED) — ends the session with that error as it
/// is: not a retryable abort "to run again by the newest configuration", which would only meet
/// the same refusal again. Nothing is written.
#[test]
fn a_cache_error_unrelated_to_the_configuration_is_not_an_abort() {
    use cads::Error;
    use cads_client::ClientError;
    use cads_coord::configuration::Configuration;
    use cads_coord::publish::publish;
    use cads_coord::service::CONFIGURATION_KEY;

    let d = Deployment::start_with(Policy::WriteAround, 2, |o| {
        o.max_session_memory = Some("1".into())
    });
    let addrs = d.cmis.addrs().to_vec();
    let admin = Client::new(ClientConfig::new(addrs.clone()), ranges());
    let configuration = Configuration::new(2, 8);
    let entry = String::from_utf8(serde_json::to_vec(&configuration).unwrap()).unwrap();
    let key = std::str::from_utf8(CONFIGURATION_KEY).unwrap();
    for (i, &addr) in addrs.iter().enumerate() {
        publish(&admin, &configuration, i).unwrap();
        let lease = i64::MAX.to_string();
        assert_eq!(call(addr, &["INSTANCELEASE", &lease]), Reply::OK);
        assert_eq!(call(addr, &["PINSET", key, &entry]), Reply::OK);
    }
    let a = gemini_appnode(&d, &addrs);
    assert_eq!(a.gemini().unwrap().configuration_id(), 1);
    d.counters(1);

    let mut session = a.session();
    session.write(&Counters, &"c0".to_string()).unwrap();
    let err = session.commit().unwrap_err();
    assert!(matches!(err, Error::Cache(ClientError::NotStored)), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(d.stored("c0"), 0);
}
