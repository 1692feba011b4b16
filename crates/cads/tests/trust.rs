//! Trust boundaries: what can write to a CMI cannot make the data store run its writes. Objects
//! forged with plain commands (a session object and its queue line, a buffered write and its
//! PendingWrites line, lines appended to genuine ones, a genuine session's object replaced) are
//! refused by the workers and the readers, counted, and their queue goes on with the next genuine
//! session; a malformed object does not stop its queue either.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{self, Buffering, MacKey, Seal};
use cads::{
    CacheChange, CacheStore, Cads, Config, Policy, SqlBuffer, Statement, StoreTx, Workers,
    WriteBackConfig,
};
use cads_protocol::{Command, Reply, SetCondition, SetExpiry};
use cads_store::{Changes, SqlValue, StoreError};
use cads_testkit::{ScratchDatabase, ScratchDir};
use common::{counter_key, doc, wait_until, Counters, Deployment};
use serde_json::json;

/// Counters whose increments are buffered as SQL sessions (Design 2), all in the queue `q`.
struct QueuedCounters;

const QUEUE: &str = "q";

impl CacheStore for QueuedCounters {
    type Query = String;
    type Write = String;
    type Output = i64;

    fn keys_read(&self, name: &String) -> Vec<Vec<u8>> {
        Counters.keys_read(name)
    }

    fn result_from_cache(&self, name: &String, values: &[Vec<u8>]) -> Option<i64> {
        Counters.result_from_cache(name, values)
    }

    fn query_store(&self, name: &String, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
        Counters.query_store(name, tx)
    }

    fn entries(&self, name: &String, value: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        Counters.entries(name, value)
    }

    fn keys_written(&self, name: &String) -> Vec<Vec<u8>> {
        Counters.keys_written(name)
    }

    fn write_store(&self, name: &String, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        Counters.write_store(name, tx)
    }

    fn cache_change(&self, name: &String, key: &[u8]) -> CacheChange {
        Counters.cache_change(name, key)
    }

    fn buffer_sql(&self, name: &String) -> Option<SqlBuffer> {
        Some(SqlBuffer {
            queue: QUEUE.into(),
            statements: vec![Statement::new(
                "UPDATE counters SET value = value + 1 WHERE name = ?",
                vec![SqlValue::Text(name.clone())],
            )
            .changing(1)],
        })
    }
}

fn config(mac_key: MacKey, buffering: Buffering) -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            partitions: 4,
            buffering,
            mac_key,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

/// A plain command on every CMI, as anything that can reach them could send.
fn on_every_cmi(cads: &Cads, command: &Command<'_>) {
    let client = cads.cache().unwrap();
    for cmi in 0..client.cmis() {
        let reply = client.execute(cmi, command).unwrap();
        assert!(!matches!(reply, Reply::Error(_)), "{reply:?}");
    }
}

fn plain_set(cads: &Cads, key: &[u8], value: &[u8]) {
    on_every_cmi(
        cads,
        &Command::Set {
            key,
            value,
            condition: SetCondition::Always,
            expiry: SetExpiry::None,
            get: false,
        },
    );
}

fn plain_append(cads: &Cads, key: &[u8], value: &[u8]) {
    on_every_cmi(cads, &Command::Append { key, value });
}

/// The SQL a forger wants the data store to run.
const FORGED_SESSION: &[u8] = br#"{"q":"q","s":[["DELETE FROM counters",[]]],"m":[],"r":[]}"#;

fn increment(cads: &Cads, name: &str) {
    cads.run(|s| s.write(&QueuedCounters, &name.to_string()))
        .unwrap();
}

/// The ids queued in `q`, as listed on the first CMI (each line an id, a space and its tag).
fn queued_ids(cads: &Cads) -> Vec<String> {
    let list = cads
        .cache()
        .unwrap()
        .get(b"SQ:q")
        .unwrap()
        .unwrap_or_default();
    String::from_utf8(list)
        .unwrap()
        .lines()
        .map(|line| line.split(' ').next().unwrap().to_string())
        .collect()
}

fn rows(d: &Deployment) -> i64 {
    let mut tx = d
        .store
        .begin_read(cads_store::Isolation::ReadCommitted)
        .unwrap();
    tx.query("SELECT CAST(COUNT(*) AS BIGINT) FROM counters", &[])
        .unwrap()[0]
        .get::<i64>(0)
        .unwrap()
}

#[test]
fn a_forged_session_and_queue_line_are_refused_and_the_queue_goes_on() {
    let d = Deployment::start(Policy::WriteBack);
    d.counters(2);
    let cads = d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite));
    increment(&cads, "c0");
    // A session object and its line in the queue, written with plain commands; a forged line in
    // the mapping of c1 too, so that a reader missing c1 meets it.
    plain_set(&cads, b"BS:f1", FORGED_SESSION);
    plain_append(&cads, b"SQ:q", b"f1\n");
    plain_append(&cads, b"SM:counter:c1", b"f1\n");
    // A genuine line copied under another id, and into another queue: tags bind their lists.
    let genuine = cads.cache().unwrap().get(b"SQ:q").unwrap().unwrap();
    let first = String::from_utf8(genuine)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let tag = first.split(' ').nth(1).unwrap();
    plain_set(&cads, b"BS:f2", FORGED_SESSION);
    plain_append(&cads, b"SQ:q", format!("f2 {tag}\n").as_bytes());
    plain_set(&cads, b"SQ:other", format!("{first}\n").as_bytes());
    plain_append(&cads, b"SQS", b"other\n");
    increment(&cads, "c1");

    // A reader that misses c1 applies what c1's mapping lists, not the forged session.
    cads.cache().unwrap().delete(&counter_key("c1")).unwrap();
    assert_eq!(cads.read(&Counters, &"c1".to_string()).unwrap(), 1);
    assert_eq!(rows(&d), 2, "the forged DELETE did not run");

    writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    assert_eq!(rows(&d), 2, "the forged DELETE did not run");
    assert_eq!((d.stored("c0"), d.stored("c1")), (1, 1));
    assert_eq!(writeback::pending_sessions(&cads).unwrap(), 0);
    assert!(
        queued_ids(&cads).is_empty(),
        "the forged lines left the queue"
    );
    let stats = cads.write_back_stats().snapshot();
    // The lines f1 and f2 of SQ:q, f1 of SM:counter:c1, and `other` of SQS (so the queue it
    // names, and the genuine line copied there, are never read).
    assert_eq!(stats.refused_unauthenticated, 4, "{stats:?}");
    assert_eq!(stats.refused_malformed, 0);
    assert_eq!(stats.applied_sessions, 2);

    // A forged line in a queue with nothing else left to apply leaves it at a worker's next
    // pass over the queue.
    plain_append(&cads, b"SQ:q", b"f3\n");
    let cads = Arc::new(cads);
    let workers = Workers::start(cads.clone(), 1);
    wait_until(
        Duration::from_secs(60),
        || "the forged line stays in the queue".into(),
        || queued_ids(&cads).is_empty(),
    );
    workers.stop();
}

/// A mapping that lists only applied sessions (here a genuine line replayed after its session
/// was applied and compacted away; a worker that dies between deleting a session's objects and
/// compacting leaves the same) is cleaned by the next reader that meets it.
#[test]
fn a_mapping_listing_only_applied_sessions_is_cleaned_by_a_reader() {
    let d = Deployment::start(Policy::WriteBack);
    d.counters(2);
    let cads = d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite));
    increment(&cads, "c1");
    let mapping = b"SM:counter:c1";
    let listed = cads.cache().unwrap().get(mapping).unwrap().unwrap();
    writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    plain_set(&cads, mapping, &listed);
    cads.cache().unwrap().delete(&counter_key("c1")).unwrap();
    assert_eq!(cads.read(&Counters, &"c1".to_string()).unwrap(), 1);
    let left = cads
        .cache()
        .unwrap()
        .get(mapping)
        .unwrap()
        .unwrap_or_default();
    assert!(left.is_empty(), "{}", String::from_utf8_lossy(&left));
}

#[test]
fn a_genuine_session_whose_object_is_replaced_is_refused_and_the_next_applied() {
    let d = Deployment::start(Policy::WriteBack);
    d.counters(2);
    let cads = d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite));
    increment(&cads, "c0");
    let [a] = queued_ids(&cads).try_into().unwrap();
    // Its object replaced by other SQL: its line and its mapping's line are genuine.
    plain_set(&cads, format!("BS:{a}").as_bytes(), FORGED_SESSION);
    increment(&cads, "c1");
    // A reader missing c0 finds the session pending but refuses its object: it reads the data
    // store (the session's write was destroyed by whoever replaced it).
    cads.cache().unwrap().delete(&counter_key("c0")).unwrap();
    assert_eq!(cads.read(&Counters, &"c0".to_string()).unwrap(), 0);
    assert_eq!(rows(&d), 2);
    // Background workers move past it.
    let cads = Arc::new(cads);
    let workers = Workers::start(cads.clone(), 1);
    wait_until(
        Duration::from_secs(20),
        || "the workers did not go past the refused session".into(),
        || cads.write_back_stats().snapshot().applied_sessions >= 1,
    );
    workers.stop();
    assert_eq!(rows(&d), 2, "the forged DELETE did not run");
    assert_eq!((d.stored("c0"), d.stored("c1")), (0, 1));
    assert_eq!(writeback::pending_sessions(&cads).unwrap(), 0);
    let stats = cads.write_back_stats().snapshot();
    assert_eq!(stats.refused_unauthenticated, 1, "{stats:?}");
    assert_eq!(stats.applied_sessions, 1);
}

#[test]
fn malformed_sessions_do_not_stop_their_queue() {
    // With MACs off, anything in the cache is taken as written by an AppNode; an object that
    // cannot be read is still moved past. With MACs on, one sealed with the key but unreadable
    // (an AppNode's bug, or another version's format) is too.
    let key = vec![0x5a; 32];
    for (mac_key, object, line) in [
        (MacKey::Off, b"not a session".to_vec(), b"m1\n".to_vec()),
        (
            MacKey::Given(key.clone()),
            Seal::new(&key).seal(b"BS:m1", br#"{"q": 1}"#),
            [Seal::new(&key).seal(b"SQ:q", b"m1"), b"\n".to_vec()].concat(),
        ),
        (
            MacKey::Given(key.clone()),
            Seal::new(&key).seal(b"BS:m1", br#"{"q":"q","q":"q","s":[],"m":[],"r":[]}"#),
            [Seal::new(&key).seal(b"SQ:q", b"m1"), b"\n".to_vec()].concat(),
        ),
    ] {
        let d = Deployment::start(Policy::WriteBack);
        d.counters(2);
        let cads = d.cads(config(mac_key, Buffering::ReadModifyWrite));
        increment(&cads, "c0");
        plain_set(&cads, b"BS:m1", &object);
        plain_append(&cads, b"SQ:q", &line);
        increment(&cads, "c1");
        writeback::drain(&cads, Duration::from_secs(10)).unwrap();
        assert_eq!((d.stored("c0"), d.stored("c1")), (1, 1));
        assert_eq!(writeback::pending_sessions(&cads).unwrap(), 0);
        let stats = cads.write_back_stats().snapshot();
        assert_eq!(stats.refused_malformed, 1, "{stats:?}");
        assert_eq!(stats.refused_unauthenticated, 0, "{stats:?}");
    }
}

#[test]
fn forged_buffered_writes_are_refused_by_readers_and_workers() {
    for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
        let d = Deployment::start(Policy::WriteBack);
        let cads = d.cads(config(MacKey::Stored, buffering));
        let users = Collection::create(&cads, "users").unwrap();
        d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
        cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
            .unwrap();
        // A buffered write of another document and its PendingWrites line, forged; and a line
        // appended to u1's genuine buffered write.
        plain_set(&cads, b"BW:users:u9", b"{\"put\":{\"evil\":true}}\n");
        for partition in 0..4 {
            plain_append(
                &cads,
                format!("PW:{partition}").as_bytes(),
                b"BW:users:u9\n",
            );
        }
        plain_append(&cads, b"BW:users:u1", b"{\"put\":{\"evil\":true}}\n");
        // A reader that misses u1 applies u1's genuine operations only.
        cads.cache().unwrap().delete(&users.key("u1")).unwrap();
        let read = users.read(&cads, "u1").unwrap().unwrap();
        assert_eq!(read, doc(json!({"n": 1})), "{buffering:?}");
        assert_eq!(d.store.get("users", "u1").unwrap(), Some(read));
        cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
            .unwrap();
        writeback::drain(&cads, Duration::from_secs(10)).unwrap();
        assert_eq!(
            d.store.get("users", "u1").unwrap(),
            Some(doc(json!({"n": 2})))
        );
        assert_eq!(d.store.get("users", "u9").unwrap(), None);
        assert!(writeback::pending(&cads).unwrap().is_empty());
        let stats = cads.write_back_stats().snapshot();
        // The line appended to u1's buffered write, and the PendingWrites line in each of the
        // four partitions (u9's own buffered write is never read).
        assert_eq!(stats.refused_unauthenticated, 5, "{buffering:?}: {stats:?}");
        assert_eq!(stats.applied_ops, 2);
    }
}

/// Workers remove a forged PendingWrites line as they meet it, without waiting for a drain.
#[test]
fn workers_remove_forged_pending_writes_lines() {
    let d = Deployment::start(Policy::WriteBack);
    let cads = Arc::new(d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite)));
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
        .unwrap();
    let partitions: Vec<Vec<u8>> = (0..cads.config().write_back.partitions)
        .map(|p| format!("PW:{p}").into_bytes())
        .collect();
    for partition in &partitions {
        plain_append(&cads, partition, b"BW:users:u9\n");
    }
    let workers = Workers::start(cads.clone(), 2);
    let forged_left = || {
        partitions.iter().any(|p| {
            let list = cads.cache().unwrap().get(p).unwrap().unwrap_or_default();
            String::from_utf8_lossy(&list).contains("u9")
        })
    };
    wait_until(
        Duration::from_secs(60),
        || "a forged PendingWrites line stays".into(),
        || !forged_left(),
    );
    workers.stop();
    assert_eq!(
        d.store.get("users", "u1").unwrap(),
        Some(doc(json!({"n": 1})))
    );
}

#[test]
fn a_malformed_buffered_line_is_moved_past() {
    let key = vec![0x33; 32];
    let d = Deployment::start(Policy::WriteBack);
    let cads = d.cads(config(MacKey::Given(key.clone()), Buffering::Append));
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
        .unwrap();
    let line = [
        Seal::new(&key).seal(b"BW:users:u1", b"{not json}"),
        b"\n".to_vec(),
    ]
    .concat();
    plain_append(&cads, b"BW:users:u1", &line);
    cads.run(|s| users.update(s, "u1", Changes::new().inc("n", 1)))
        .unwrap();
    writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    assert_eq!(
        d.store.get("users", "u1").unwrap(),
        Some(doc(json!({"n": 2})))
    );
    let stats = cads.write_back_stats().snapshot();
    assert_eq!(stats.refused_malformed, 1, "{stats:?}");
}

#[test]
fn appnodes_sharing_a_data_store_share_the_key() {
    // One process buffers, another (its own Cads, the same data store and CMIs) applies.
    let d = Deployment::start(Policy::WriteBack);
    d.counters(1);
    let writer = d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite));
    increment(&writer, "c0");
    let applier = d.cads(config(MacKey::Stored, Buffering::ReadModifyWrite));
    writeback::drain(&applier, Duration::from_secs(10)).unwrap();
    assert_eq!(d.stored("c0"), 1);
    assert_eq!(applier.write_back_stats().snapshot().applied_sessions, 1);
    assert_eq!(
        applier
            .write_back_stats()
            .snapshot()
            .refused_unauthenticated,
        0
    );
}

/// Fresh data stores to run a test on: SQLite always, and scratch PostgreSQL and MariaDB
/// databases when those servers answer (mandatory under `CADS_REQUIRE_SERVICES=1`). The URLs, and
/// what removes the stores when dropped.
fn every_backend() -> (Vec<String>, ScratchDir, Vec<ScratchDatabase>) {
    let dir = ScratchDir::new("trust-keys");
    let databases: Vec<ScratchDatabase> = [ScratchDatabase::postgres(), ScratchDatabase::mariadb()]
        .into_iter()
        .flatten()
        .collect();
    let mut urls = vec![dir.sqlite_url()];
    urls.extend(databases.iter().map(|d| d.url().to_string()));
    (urls, dir, databases)
}

/// Processes racing to read the stored key on a data store without one end with the same key,
/// and so does one that reads it later.
#[test]
fn the_stored_key_is_one_per_data_store_on_every_backend() {
    let (urls, _dir, _databases) = every_backend();
    for url in urls {
        let options = cads_store::StoreOptions::default();
        let seals: Vec<Seal> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..4)
                .map(|_| {
                    let store = cads_store::open(&url, &options).unwrap();
                    scope.spawn(move || MacKey::Stored.seal(store.as_ref()).unwrap())
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let sealed = seals[0].seal(b"k", b"v");
        assert!(
            seals.iter().all(|s| s.open(b"k", &sealed).is_some()),
            "{url}"
        );
        let later = cads_store::open(&url, &options).unwrap();
        let seal = MacKey::Stored.seal(later.as_ref()).unwrap();
        assert!(seal.open(b"k", &sealed).is_some(), "{url}");
        assert!(MacKey::Given(vec![1; 8]).seal(later.as_ref()).is_err());
    }
}

#[test]
fn debug_output_hides_the_cache_password() {
    let config = Config {
        cache_password: Some(cads::Password("s3cret".into())),
        ..Config::default()
    };
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("hidden"),
        "{shown}"
    );
}
