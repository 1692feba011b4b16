//! SAS (001): AppNodes with the cache in their own memory, kept consistent by the SAS core. Each
//! test runs the core in-process and two or three AppNodes (frameworks with their own caches)
//! over one SQLite database; `crates/cli/tests` runs them as processes.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cads::{CacheStore, Cads, Config, Policy, SasConfig, StoreTx};
use cads_coord::sas::leases::Settings;
use cads_coord::sas::Core;
use cads_coord::wire::Framed;
use cads_store::{Relay, StoreError};
use common::{counter_key, Counters, Deployment, History, LONG_LEASE_MS};

/// An AppNode lease no step of a test outlives by accident; tests that need one to run out move
/// the core's clock.
const NODE_LEASE_MS: u64 = 30_000;

fn core(policy: Policy) -> Core {
    core_with(policy, |_| {})
}

/// A core for `policy` with the test's long leases, and what `change` sets.
fn core_with(policy: Policy, change: impl FnOnce(&mut Settings)) -> Core {
    let mut settings = Settings {
        lease_ms: LONG_LEASE_MS,
        node_lease_ms: NODE_LEASE_MS,
        exclusive_q: policy == Policy::WriteThrough,
        max_replicas: 0,
        password: None,
    };
    change(&mut settings);
    Core::start("127.0.0.1:0".parse().unwrap(), settings).unwrap()
}

/// Runs `write` while moving the core's clock a quarter of an AppNode lease every 20 ms: a
/// write waiting out an AppNode the core cannot reach finishes once that lease has run out
/// (a write that never does hangs the test, which the test run's own limit then reports).
fn write_waiting_out_a_lease(core: &Core, write: impl FnOnce() + Send) {
    std::thread::scope(|scope| {
        let write = scope.spawn(write);
        while !write.is_finished() {
            core.advance_clock(Duration::from_millis(NODE_LEASE_MS / 4));
            std::thread::sleep(Duration::from_millis(20));
        }
        write.join().unwrap();
    });
}

/// Waits until `done` holds: for what the test has made happen, on the core's clock or the
/// AppNode's lease, and which arrives on another thread.
fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An AppNode over `d`'s data store with the core at `core`, registered.
fn appnode(d: &Deployment, core: SocketAddr) -> Cads {
    appnode_with(d, core, |_| {})
}

/// [`appnode`], with what `change` sets in its configuration.
fn appnode_with(d: &Deployment, core: SocketAddr, change: impl FnOnce(&mut Config)) -> Cads {
    let mut config = Config {
        sas: Some(SasConfig::new(core)),
        ..Config::default()
    };
    change(&mut config);
    let cads = Cads::connect(d.store.clone(), &[], d.policy, config);
    assert!(
        cads.sas_ready(Duration::from_secs(30)),
        "the AppNode registers"
    );
    cads
}

/// An AppNode whose reads wait for another session's fill for as long as a test takes.
fn patient_appnode(d: &Deployment, core: SocketAddr) -> Cads {
    appnode_with(d, core, |c| c.retry.budget = Duration::from_secs(600))
}

fn increment(cads: &Cads, name: &str) {
    cads.run(|s| s.write(&Counters, &name.to_string())).unwrap();
}

fn read(cads: &Cads, name: &str) -> i64 {
    cads.read(&Counters, &name.to_string()).unwrap()
}

const POLICIES: [Policy; 2] = [Policy::WriteAround, Policy::WriteThrough];

/// `threads` threads on each AppNode, each making `ops` reads and increments of `names` (an
/// increment when `writes(appnode, thread, op)`): what they read and wrote, and when.
fn mixed_load(
    nodes: &[Cads],
    names: &[String],
    threads: usize,
    ops: usize,
    writes: impl Fn(usize, usize, usize) -> bool + Sync,
) -> History {
    let history = Mutex::new(History::default());
    std::thread::scope(|scope| {
        for (n, node) in nodes.iter().enumerate() {
            for t in 0..threads {
                let (history, writes) = (&history, &writes);
                scope.spawn(move || {
                    for i in 0..ops {
                        let name = &names[(n + t + i) % names.len()];
                        let start = Instant::now();
                        if writes(n, t, i) {
                            increment(node, name);
                            let entry = (name.clone(), start, Instant::now());
                            history.lock().unwrap().writes.push(entry);
                        } else {
                            let value = read(node, name);
                            let entry = (name.clone(), start, Instant::now(), value);
                            history.lock().unwrap().reads.push(entry);
                        }
                    }
                });
            }
        }
    });
    history.into_inner().unwrap()
}

#[test]
fn a_write_on_one_appnode_is_read_at_once_on_the_others() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let nodes: Vec<Cads> = (0..3).map(|_| appnode(&d, core.addr())).collect();
        let name = d.counters(1).remove(0);
        for round in 1..=5 {
            for node in &nodes {
                // Twice: the second read is a hit in the node's own memory.
                assert_eq!(read(node, &name), round - 1, "{policy:?}");
                assert_eq!(read(node, &name), round - 1, "{policy:?}");
            }
            increment(&nodes[(round as usize) % 3], &name);
            for node in &nodes {
                assert_eq!(read(node, &name), round, "{policy:?}: read after the write");
            }
        }
        let stats: Vec<_> = nodes.iter().map(|n| n.sas_stats().unwrap()).collect();
        for s in &stats {
            assert!(
                s.local.hits >= 5,
                "{policy:?}: reads were served in-process: {s:?}"
            );
            assert!(
                s.local.delivered > 0,
                "{policy:?}: the core told every holder: {s:?}"
            );
        }
        if policy == Policy::WriteThrough {
            // Refreshed, not deleted: only each AppNode's first read missed (counted once).
            let misses: u64 = stats.iter().map(|s| s.local.misses).sum();
            assert_eq!(misses, 3, "{policy:?}: {stats:?}");
        }
    }
}

#[test]
fn three_appnodes_reading_and_writing_read_nothing_stale_and_lose_nothing() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let nodes: Vec<Cads> = (0..3).map(|_| appnode(&d, core.addr())).collect();
        let names = d.counters(3);
        let history = mixed_load(&nodes, &names, 3, 60, |_, t, i| (i + t) % 4 == 0);
        assert_eq!(history.stale_reads(), Vec::<String>::new(), "{policy:?}");
        for name in &names {
            let written = history.writes.iter().filter(|(n, _, _)| n == name).count() as i64;
            assert_eq!(d.stored(name), written, "{policy:?}: no increment lost");
            for node in &nodes {
                assert_eq!(read(node, name), written, "{policy:?}: every copy agrees");
            }
        }
    }
}

#[test]
fn a_session_of_several_reads_sees_one_moment() {
    // Two counters incremented together: a session reading both never sees them differ.
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let (a, b) = (appnode(&d, core.addr()), appnode(&d, core.addr()));
        let names = d.counters(2);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..60 {
                    a.run(|s| {
                        s.write(&Counters, &names[0])?;
                        s.write(&Counters, &names[1])
                    })
                    .unwrap();
                }
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let (x, y) = b
                        .run(|s| Ok((s.read(&Counters, &names[0])?, s.read(&Counters, &names[1])?)))
                        .unwrap();
                    assert_eq!(x, y, "{policy:?}: a session's reads fit together");
                }
            });
        });
    }
}

#[test]
fn write_through_writers_on_two_appnodes_exclude_each_other_and_every_increment_lands() {
    let policy = Policy::WriteThrough;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let (a, b) = (appnode(&d, core.addr()), appnode(&d, core.addr()));
    let name = d.counters(1).remove(0);
    // Both hold the counter, so each computes its new value from its own copy.
    assert_eq!(read(&a, &name), 0);
    assert_eq!(read(&b, &name), 0);
    std::thread::scope(|scope| {
        for node in [&a, &b] {
            for _ in 0..3 {
                let name = &name;
                scope.spawn(move || {
                    for _ in 0..25 {
                        node.run(|s| {
                            s.read(&Counters, name)?;
                            s.write(&Counters, name)
                        })
                        .unwrap();
                    }
                });
            }
        }
    });
    assert_eq!(d.stored(&name), 150);
    assert_eq!(read(&a, &name), 150);
    assert_eq!(read(&b, &name), 150);
}

/// A raw connection to the core, as a process that is not an AppNode.
fn raw(core: &Core) -> Framed<std::net::TcpStream> {
    Framed::connect(core.addr(), Duration::from_secs(30)).unwrap()
}

#[test]
fn a_writer_that_dies_after_its_data_store_commit_leaves_no_copy_behind() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let a = appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    assert_eq!(read(&a, &name), 0);
    assert_eq!(read(&a, &name), 0, "a's copy is served");
    // A writer takes its Q lease, commits to the data store, and dies before its cache commit.
    let key = counter_key(&name);
    let reply = raw(&core)
        .call(&[b"QAREG".to_vec(), b"0".to_vec(), b"77".to_vec(), key])
        .unwrap();
    assert_eq!(reply, vec![b"OK".to_vec(), b"1".to_vec()]);
    d.store
        .execute_batch(&format!(
            "UPDATE counters SET value = 1 WHERE name = '{name}'"
        ))
        .unwrap();
    // Its Q lease runs out: the core tells every holder to delete the key.
    core.advance_clock(Duration::from_millis(LONG_LEASE_MS + 1_000));
    until(|| read(&a, &name) == 1);
}

#[test]
fn an_appnode_cut_from_the_core_stops_serving_and_the_writer_waits_out_its_lease() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let relay = Relay::new(core.addr());
        let cut_off = appnode(&d, relay.addr());
        let writer = appnode(&d, core.addr());
        let name = d.counters(1).remove(0);
        assert_eq!(read(&cut_off, &name), 0);
        assert_eq!(read(&writer, &name), 0);
        relay.set_cut(true);
        // The cut AppNode drops its copies and reads the data store; its fills are refused.
        // The writer's commit cannot reach the cut AppNode: it waits for its lease to run out.
        write_waiting_out_a_lease(&core, || increment(&writer, &name));
        assert_eq!(read(&cut_off, &name), 1, "{policy:?}: no stale copy served");
        assert_eq!(read(&writer, &name), 1);
        relay.set_cut(false);
        assert!(
            cut_off.sas_ready(Duration::from_secs(30)),
            "{policy:?}: it registers again"
        );
        assert_eq!(read(&cut_off, &name), 1, "{policy:?}");
        increment(&writer, &name);
        assert_eq!(
            read(&cut_off, &name),
            2,
            "{policy:?}: it hears of writes again"
        );
        assert!(cut_off.sas_stats().unwrap().registrations >= 2);
    }
}

#[test]
fn an_appnode_that_goes_away_holding_copies_blocks_no_writer_past_its_lease() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let writer = appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    {
        let gone = appnode(&d, core.addr());
        assert_eq!(read(&gone, &name), 0);
    }
    write_waiting_out_a_lease(&core, || increment(&writer, &name));
    assert_eq!(read(&writer, &name), 1);
}

#[test]
fn without_the_core_reads_go_to_the_data_store_and_writes_fail_cleanly() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core_with(Policy::WriteAround, |s| {
        // Short: the AppNode stops serving on its own clock once it cannot renew.
        s.node_lease_ms = 300;
    });
    let a = appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    assert_eq!(read(&a, &name), 0);
    core.stop();
    // Changed behind the cache's back: a node that served its copy now would read 0.
    d.store
        .execute_batch(&format!(
            "UPDATE counters SET value = 5 WHERE name = '{name}'"
        ))
        .unwrap();
    // The AppNode stops serving its copy once its lease runs out on its own clock.
    until(|| read(&a, &name) == 5);
    let e = a.run(|s| s.write(&Counters, &name)).unwrap_err();
    assert!(e.to_string().contains("SAS core"), "{e}");
    assert_eq!(d.stored(&name), 5, "nothing written");
}

/// An AppNode that serves its copies to the others (Ingest).
fn ingest_appnode(d: &Deployment, core: SocketAddr) -> Cads {
    appnode_with(d, core, |c| {
        c.sas.as_mut().expect("SAS").ingest = Some("127.0.0.1:0".parse().unwrap());
    })
}

#[test]
fn ingest_fetches_a_copy_another_appnode_holds_instead_of_querying_the_data_store() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let (a, b) = (
            ingest_appnode(&d, core.addr()),
            ingest_appnode(&d, core.addr()),
        );
        let name = d.counters(1).remove(0);
        assert_eq!(read(&a, &name), 0);
        let reads = d.faults.counts().reads;
        assert_eq!(read(&b, &name), 0);
        assert_eq!(
            d.faults.counts().reads,
            reads,
            "{policy:?}: b asked a, not the data store"
        );
        let stats = b.sas_stats().unwrap();
        assert_eq!(
            (stats.peer_fetches, stats.peer_fetched),
            (1, 1),
            "{policy:?}"
        );
        // b now holds a copy of its own, which a write on a reaches.
        assert_eq!(read(&b, &name), 0);
        assert_eq!(b.sas_stats().unwrap().local.hits, 1, "{policy:?}");
        increment(&a, &name);
        assert_eq!(read(&b, &name), 1, "{policy:?}");
        increment(&b, &name);
        assert_eq!(read(&a, &name), 2, "{policy:?}");
    }
}

#[test]
fn ingest_bounds_the_replicas_of_a_key_and_still_serves_the_rest() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core_with(Policy::WriteAround, |s| {
        s.max_replicas = 1;
    });
    let (a, b) = (
        ingest_appnode(&d, core.addr()),
        ingest_appnode(&d, core.addr()),
    );
    let name = d.counters(1).remove(0);
    assert_eq!(read(&a, &name), 0);
    for _ in 0..3 {
        assert_eq!(read(&b, &name), 0);
    }
    let stats = b.sas_stats().unwrap();
    assert_eq!(
        stats.peer_fetched, 3,
        "b may not keep a second replica: {stats:?}"
    );
    assert_eq!(stats.local.keys, 0);
    increment(&b, &name);
    assert_eq!(read(&a, &name), 1);
    assert_eq!(read(&b, &name), 1);
}

#[test]
fn three_ingest_appnodes_reading_and_writing_read_nothing_stale() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let nodes: Vec<Cads> = (0..3).map(|_| ingest_appnode(&d, core.addr())).collect();
        let names = d.counters(2);
        let history = mixed_load(&nodes, &names, 2, 60, |n, _, i| (i + n) % 5 == 0);
        assert_eq!(history.stale_reads(), Vec::<String>::new(), "{policy:?}");
        let fetched: u64 = nodes
            .iter()
            .map(|n| n.sas_stats().unwrap().peer_fetched)
            .sum();
        assert!(fetched > 0, "{policy:?}: the AppNodes shared copies");
    }
}

/// Two counters read together: their sum, cached one entry per counter.
struct Pair;

impl cads::CacheStore for Pair {
    type Query = (String, String);
    type Write = std::convert::Infallible;
    type Output = i64;

    fn keys_read(&self, q: &(String, String)) -> Vec<Vec<u8>> {
        vec![counter_key(&q.0), counter_key(&q.1)]
    }

    fn result_from_cache(&self, q: &(String, String), values: &[Vec<u8>]) -> Option<i64> {
        let a = Counters.result_from_cache(&q.0, &values[..1])?;
        Some(a + Counters.result_from_cache(&q.1, &values[1..])?)
    }

    fn query_store(
        &self,
        q: &(String, String),
        tx: &mut cads::StoreTx<'_>,
    ) -> Result<i64, cads_store::StoreError> {
        Ok(Counters.query_store(&q.0, tx)? + Counters.query_store(&q.1, tx)?)
    }

    fn entries(&self, q: &(String, String), _: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        // The sum does not give each counter's value: nothing is filled.
        let _ = q;
        Vec::new()
    }

    cads::read_only!();
}

#[test]
fn a_reader_waiting_for_one_key_holds_no_lease_on_the_others() {
    // Two readers each holding one key's I lease and waiting for the other's would wait out
    // their whole backoff: a reader gives its leases back before it waits.
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let a = patient_appnode(&d, core.addr());
    let names = d.counters(2);
    let (k0, k1) = (counter_key(&names[0]), counter_key(&names[1]));
    // Another AppNode's session computes k1.
    let mut other = raw(&core);
    let iget = |conn: &mut Framed<std::net::TcpStream>, session: &str, key: &[u8]| {
        conn.call(&[b"IGET".as_slice(), b"0", session.as_bytes(), key])
            .unwrap()
    };
    assert_eq!(iget(&mut other, "1", &k1), vec![b"G".to_vec()]);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            a.read(&Pair, &(names[0].clone(), names[1].clone()))
                .unwrap()
        });
        // The reader takes k0 and finds k1 busy; while it waits, k0 is free.
        let mut observer = raw(&core);
        until(|| iget(&mut observer, "2", &k0) == vec![b"G".to_vec()]);
        assert!(
            !reader.is_finished(),
            "k0 was free while the reader still waited for k1"
        );
        let release = |conn: &mut Framed<std::net::TcpStream>, session: &str, key: &[u8]| {
            conn.call(&[b"RELEASE".as_slice(), b"0", session.as_bytes(), key])
                .unwrap()
        };
        release(&mut observer, "2", &k0);
        release(&mut other, "1", &k1);
        assert_eq!(reader.join().unwrap(), 0);
    });
}

#[test]
fn the_core_answers_bad_requests_with_errors_and_keeps_serving() {
    use std::io::{Read, Write};
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let a = appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    // Unknown commands and wrong arguments: an error, and the connection stays usable.
    let mut conn = raw(&core);
    let reply = conn.call(&["FLY"]).unwrap();
    assert!(reply[0].starts_with(b"ERR unknown command"), "{reply:?}");
    let reply = conn.call(&["IGET", "x", "y", "k"]).unwrap();
    assert!(
        reply[0].starts_with(b"ERR expected an AppNode id"),
        "{reply:?}"
    );
    let reply = conn.call(&["COMMIT", "1", "1", "k", "?", ""]).unwrap();
    assert!(reply[0].starts_with(b"ERR COMMIT expects"), "{reply:?}");
    assert_eq!(conn.call(&["PING"]).unwrap(), vec![b"PONG".to_vec()]);
    // A malformed frame: an error, then the connection is closed.
    let mut stream = std::net::TcpStream::connect(core.addr()).unwrap();
    stream.write_all(b"*2\r\n$x\r\n").unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert!(
        answer.windows(3).any(|w| w == b"ERR"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    // Nothing else was disturbed.
    assert_eq!(read(&a, &name), 0);
    increment(&a, &name);
    assert_eq!(read(&a, &name), 1);
}

#[test]
fn a_core_with_a_password_serves_only_appnodes_that_give_it() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core_with(Policy::WriteAround, |s| {
        s.password = Some("s3cret".into());
    });
    let with = |password: &str| {
        let mut sas = SasConfig::new(core.addr());
        sas.password = Some(cads::Password(password.into()));
        sas.ingest = Some("127.0.0.1:0".parse().unwrap());
        let config = Config {
            sas: Some(sas),
            ..Config::default()
        };
        Cads::connect(d.store.clone(), &[], policy, config)
    };
    let (a, b) = (with("s3cret"), with("s3cret"));
    assert!(a.sas_ready(Duration::from_secs(30)) && b.sas_ready(Duration::from_secs(30)));
    let name = d.counters(1).remove(0);
    assert_eq!(read(&a, &name), 0);
    assert_eq!(read(&b, &name), 0);
    assert_eq!(
        b.sas_stats().unwrap().peer_fetched,
        1,
        "peers log in to each other too"
    );
    increment(&a, &name);
    assert_eq!(read(&b, &name), 1);
    // Without the password, nothing but an error.
    let mut conn = raw(&core);
    let reply = conn.call(&["HELLO"]).unwrap();
    assert!(reply[0].starts_with(b"ERR NOAUTH"), "{reply:?}");
    let wrong = with("guess");
    assert!(
        !wrong.sas_ready(Duration::from_millis(500)),
        "a wrong password never registers"
    );
    assert_eq!(read(&wrong, &name), 1, "it reads the data store");
    let e = wrong.run(|s| s.write(&Counters, &name)).unwrap_err();
    assert!(e.to_string().contains("SAS core"), "{e}");
}

#[test]
fn a_write_through_writer_never_computes_from_a_copy_older_than_a_dead_writers_write() {
    // A writer takes k's Q lease, commits to the data store and dies. Until the core has
    // deleted k's copies, the next writer is kept out: let in, it would compute its value from
    // its copy, which predates the dead writer's write.
    let policy = Policy::WriteThrough;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let a = appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    assert_eq!(read(&a, &name), 0);
    let reply = raw(&core)
        .call(&[
            b"QAREG".to_vec(),
            b"0".to_vec(),
            b"77".to_vec(),
            counter_key(&name),
        ])
        .unwrap();
    assert_eq!(reply, vec![b"OK".to_vec(), b"1".to_vec()]);
    d.store
        .execute_batch(&format!(
            "UPDATE counters SET value = 10 WHERE name = '{name}'"
        ))
        .unwrap();
    core.advance_clock(Duration::from_millis(LONG_LEASE_MS + 1_000));
    increment(&a, &name);
    assert_eq!(d.stored(&name), 11);
    assert_eq!(read(&a, &name), 11);
}

/// The sum of two counters, read as one query of both keys.
struct SumOfTwo;

impl CacheStore for SumOfTwo {
    type Query = (String, String);
    type Write = Infallible;
    type Output = i64;

    fn keys_read(&self, (a, b): &(String, String)) -> Vec<Vec<u8>> {
        vec![counter_key(a), counter_key(b)]
    }

    fn result_from_cache(&self, _: &(String, String), values: &[Vec<u8>]) -> Option<i64> {
        values
            .iter()
            .map(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
            .sum()
    }

    fn query_store(
        &self,
        (a, b): &(String, String),
        tx: &mut StoreTx<'_>,
    ) -> Result<i64, StoreError> {
        Ok(Counters.query_store(a, tx)? + Counters.query_store(b, tx)?)
    }

    fn entries(&self, _: &(String, String), _: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        // The sum tells neither counter: nothing to cache.
        Vec::new()
    }

    cads::read_only!();
}

/// An ingest AppNode asks its peers only when every key it missed is held by one: a read of two
/// keys, one of which no AppNode holds, goes to the data store without fetching the other.
#[test]
fn ingest_asks_peers_only_when_they_hold_every_missed_key() {
    let d = Deployment::start_with(Policy::WriteAround, 1, |_| {});
    let core = core(Policy::WriteAround);
    let (a, b) = (
        ingest_appnode(&d, core.addr()),
        ingest_appnode(&d, core.addr()),
    );
    let names = d.counters(2);
    assert_eq!(read(&a, &names[0]), 0, "a holds the first counter");
    let reads = d.faults.counts().reads;
    let pair = (names[0].clone(), names[1].clone());
    assert_eq!(b.read(&SumOfTwo, &pair).unwrap(), 0);
    assert!(d.faults.counts().reads > reads, "b queried the data store");
    assert_eq!(b.sas_stats().unwrap().peer_fetches, 0, "and asked no peer");
}

/// A session that read one copy and writes another key aborts if a writer on another AppNode
/// changed what it read before it commits: its read and its write must fit together, as CS's
/// shared leases make them.
#[test]
fn a_session_whose_only_read_was_overwritten_writes_nothing() {
    for policy in POLICIES {
        let d = Deployment::start_with(policy, 1, |_| {});
        let core = core(policy);
        let (a, b) = (appnode(&d, core.addr()), appnode(&d, core.addr()));
        let names = d.counters(2);
        assert_eq!(read(&a, &names[0]), 0);
        let mut session = a.session();
        assert_eq!(session.read(&Counters, &names[0]).unwrap(), 0);
        increment(&b, &names[0]);
        session.write(&Counters, &names[1]).unwrap();
        let outcome = session.commit();
        assert!(
            matches!(outcome, Err(cads::Error::Aborted { .. })),
            "{policy:?}: {outcome:?}"
        );
        assert_eq!(d.stored(&names[1]), 0, "{policy:?}");
    }
}

/// A miss on a key another session is filling waits for that fill for as long as the retry
/// budget allows, asking again after each backoff, and then fills its own copy.
#[test]
fn a_miss_on_a_key_being_filled_waits_for_it() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core(policy);
    let a = patient_appnode(&d, core.addr());
    let name = d.counters(1).remove(0);
    let key = counter_key(&name);
    // Another AppNode's session computes the key.
    let mut other = raw(&core);
    let reply = other.call(&[b"IGET".as_slice(), b"0", b"1", &key]).unwrap();
    assert_eq!(reply, vec![b"G".to_vec()]);
    let busy = || {
        core.stats()
            .into_iter()
            .find(|(n, _)| *n == "i_busy")
            .unwrap()
            .1
    };
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| read(&a, &name));
        until(|| busy() >= 2 || reader.is_finished());
        other
            .call(&[b"RELEASE".as_slice(), b"0", b"1", &key])
            .unwrap();
        assert_eq!(reader.join().unwrap(), 0);
    });
    assert_eq!(
        a.sas_stats().unwrap().local.keys,
        1,
        "the reader filled a copy"
    );
}

/// Ingest with one replica a key: a copy fetched from a peer that this AppNode may not keep is
/// read under its I lease alone, which the session checks at commit: it commits when nothing
/// changed the key, and aborts when a writer did.
#[test]
fn a_copy_fetched_but_not_kept_is_checked_at_commit() {
    let policy = Policy::WriteAround;
    let d = Deployment::start_with(policy, 1, |_| {});
    let core = core_with(policy, |s| s.max_replicas = 1);
    let (a, b) = (
        ingest_appnode(&d, core.addr()),
        ingest_appnode(&d, core.addr()),
    );
    let names = d.counters(2);
    assert_eq!(read(&a, &names[0]), 0);
    for overwritten in [false, true] {
        let mut session = b.session();
        let seen = session.read(&Counters, &names[0]).unwrap();
        if overwritten {
            increment(&a, &names[0]);
        }
        session.write(&Counters, &names[1]).unwrap();
        let outcome = session.commit();
        assert_eq!(
            outcome.is_ok(),
            !overwritten,
            "overwritten {overwritten}: {outcome:?}"
        );
        assert_eq!(seen, 0);
    }
    assert_eq!(b.sas_stats().unwrap().local.keys, 0, "b kept no replica");
    assert_eq!(d.stored(&names[1]), 1, "only the first session wrote");
}
