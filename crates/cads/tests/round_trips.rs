//! What a session costs in cache round trips, counted by the client: a write whose change needs
//! no cached value (a set, an append, an increment) is staged and validated in one round trip and
//! committed in another; a change computed from the cached value reads it first, unless the
//! session read it already; write-back validates once, after its last staged write. The counts
//! are the design's (see `Session::stage`), and each test also checks what the cache then holds.

mod common;

use cads::documents::Collection;
use cads::writeback::Buffering;
use cads::{CacheChange, CacheStore, Cads, Config, Policy, StoreTx};
use cads_store::{Isolation, SqlValue, StoreError};
use common::bank::{self, Bank, Queues};
use common::{changes, counter_key, doc, documents_config, Counters, Deployment};
use serde_json::json;
use std::time::Duration;

/// Notes in SQL, cached one entry per note (`note:<name>` holding its text): a write replaces a
/// note's text or appends to it, and the cache changes the same way without reading the value.
struct Notes;

enum Note {
    Replace(&'static str, &'static str),
    Append(&'static str, &'static str),
}

fn note_key(name: &str) -> Vec<u8> {
    format!("note:{name}").into_bytes()
}

impl Notes {
    fn create(d: &Deployment, names: &[&str]) {
        d.store
            .execute_batch("CREATE TABLE notes (name TEXT PRIMARY KEY, body TEXT NOT NULL)")
            .unwrap();
        let mut tx = d.store.begin(Isolation::ReadCommitted).unwrap();
        for name in names {
            tx.execute(
                "INSERT INTO notes (name, body) VALUES (?, '')",
                &[SqlValue::Text((*name).into())],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
}

impl CacheStore for Notes {
    type Query = &'static str;
    type Write = Note;
    type Output = String;

    fn keys_read(&self, name: &&'static str) -> Vec<Vec<u8>> {
        vec![note_key(name)]
    }

    fn result_from_cache(&self, _: &&'static str, values: &[Vec<u8>]) -> Option<String> {
        String::from_utf8(values[0].clone()).ok()
    }

    fn query_store(&self, name: &&'static str, tx: &mut StoreTx<'_>) -> Result<String, StoreError> {
        let rows = tx.read_sql()?.query(
            "SELECT body FROM notes WHERE name = ?",
            &[SqlValue::Text((*name).into())],
        )?;
        rows[0].get::<String>(0)
    }

    fn entries(&self, name: &&'static str, body: &String) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(note_key(name), body.clone().into_bytes())]
    }

    fn keys_written(&self, write: &Note) -> Vec<Vec<u8>> {
        match write {
            Note::Replace(name, _) | Note::Append(name, _) => vec![note_key(name)],
        }
    }

    fn write_store(&self, write: &Note, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        let (sql, name, text) = match write {
            Note::Replace(name, text) => ("UPDATE notes SET body = ? WHERE name = ?", name, text),
            Note::Append(name, text) => (
                "UPDATE notes SET body = body || ? WHERE name = ?",
                name,
                text,
            ),
        };
        tx.sql()?.execute(
            sql,
            &[
                SqlValue::Text((*text).into()),
                SqlValue::Text((*name).into()),
            ],
        )?;
        Ok(())
    }

    fn cache_change(&self, write: &Note, _key: &[u8]) -> CacheChange {
        match write {
            Note::Replace(_, text) => CacheChange::Set(text.as_bytes().to_vec()),
            Note::Append(_, text) => CacheChange::Append(text.as_bytes().to_vec()),
        }
    }
}

/// The cache round trips `work` takes in a session of its own, from start to commit.
fn round_trips(cads: &Cads, work: impl FnOnce(&mut cads::Session<'_>)) -> u64 {
    let client = cads.cache().unwrap();
    let before = client.round_trips();
    let mut session = cads.session();
    work(&mut session);
    session.commit().unwrap();
    client.round_trips() - before
}

/// Write-through: a write that sets, appends to or increments one cached value is staged (with
/// its validation) in one round trip and committed in a second, without reading the value; a set
/// installs the new value even where none was cached.
#[test]
fn a_write_through_change_of_one_key_takes_two_round_trips() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(1);
    Notes::create(&d, &["cached", "uncached"]);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let c0 = "c0".to_string();
    cads.run(|s| s.read(&Notes, &"cached")).unwrap();
    cads.run(|s| s.read(&Counters, &c0)).unwrap();

    let trips = round_trips(&cads, |s| {
        s.write(&Notes, &Note::Replace("uncached", "new")).unwrap()
    });
    assert_eq!(trips, 2, "a set of a value not cached");
    assert_eq!(
        client.get(&note_key("uncached")).unwrap(),
        Some(b"new".to_vec())
    );

    let trips = round_trips(&cads, |s| {
        s.write(&Notes, &Note::Replace("cached", "a")).unwrap()
    });
    assert_eq!(trips, 2, "a set of a cached value");
    let trips = round_trips(&cads, |s| {
        s.write(&Notes, &Note::Append("cached", "b")).unwrap()
    });
    assert_eq!(trips, 2, "an append");
    assert_eq!(
        client.get(&note_key("cached")).unwrap(),
        Some(b"ab".to_vec())
    );

    let trips = round_trips(&cads, |s| s.write(&Counters, &c0).unwrap());
    assert_eq!(trips, 2, "an increment");
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"1".to_vec()));
    assert_eq!(cads.run(|s| s.read(&Notes, &"cached")).unwrap(), "ab");
    assert_eq!(d.stored("c0"), 1);
}

/// Write-through: two changes of one key in a session are applied to the cached value, read
/// under the exclusive lease first (three round trips); with no value cached there is nothing to
/// change, and the session still validates before it commits (three as well).
#[test]
fn a_write_through_change_computed_from_the_cached_value_reads_it_first() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(2);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let (c0, c1) = ("c0".to_string(), "c1".to_string());
    cads.run(|s| s.read(&Counters, &c0)).unwrap();
    let twice = |name: &String| {
        round_trips(&cads, |s| {
            s.write(&Counters, name).unwrap();
            s.write(&Counters, name).unwrap();
        })
    };
    assert_eq!(twice(&c0), 3, "cached");
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"2".to_vec()));
    assert_eq!(twice(&c1), 3, "not cached");
    assert_eq!(client.get(&counter_key("c1")).unwrap(), None);
    assert_eq!((d.stored("c0"), d.stored("c1")), (2, 2));
}

/// Write-through: a change computed from a value the session read under its shared lease starts
/// from that value, its check (taking the exclusive lease) going with the write: the read, the
/// check with the write and the validation, and the commit, three round trips where reading the
/// value again took four.
#[test]
fn a_change_of_a_value_the_session_read_does_not_read_it_again() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(1);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let c0 = "c0".to_string();
    cads.run(|s| s.read(&Counters, &c0)).unwrap();
    let read_and_write_twice = round_trips(&cads, |s| {
        assert_eq!(s.read(&Counters, &c0).unwrap(), 0);
        s.write(&Counters, &c0).unwrap();
        s.write(&Counters, &c0).unwrap();
    });
    assert_eq!(read_and_write_twice, 3);
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"2".to_vec()));
    assert_eq!(d.stored("c0"), 2);
}

/// Write-through: a writer that changes a key after a session read it wounds that session, whose
/// change computed from the value it read is then refused (`ABORT`) rather than cached: the
/// session runs again from the new value, and the cache ends with both writes.
#[test]
fn a_change_computed_from_a_read_that_a_writer_overtook_runs_again() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(1);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let c0 = "c0".to_string();
    cads.run(|s| s.read(&Counters, &c0)).unwrap();
    let mut attempts = 0;
    cads.run(|s| {
        attempts += 1;
        let read = s.read(&Counters, &c0)?;
        if attempts == 1 {
            // Another session's write, between this session's read and its writes.
            cads.run(|other| other.write(&Counters, &c0)).unwrap();
        }
        assert_eq!(read, attempts - 1, "attempt {attempts} read");
        s.write(&Counters, &c0)?;
        s.write(&Counters, &c0)
    })
    .unwrap();
    assert_eq!(attempts, 2, "the overtaken session ran again");
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"3".to_vec()));
    assert_eq!(d.stored("c0"), 3);
}

/// Write-through: a session stalled until its CMI forgot it (its leases ran out, then its
/// tombstone) while another session changed the key it read: the CMI takes its write for a new
/// session's, but the check in front of it finds the value changed, and the session runs again
/// from the new value instead of caching one computed from the old.
#[test]
fn a_change_computed_from_a_read_the_cmi_forgot_runs_again() {
    let short = |o: &mut cads_testkit::CmiOptions| {
        o.lease_ms = Some(200);
        o.max_session_ms = Some(200);
        o.tombstone_ms = Some(200);
    };
    let d = Deployment::start_with(Policy::WriteThrough, 2, short);
    d.counters(1);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let c0 = "c0".to_string();
    cads.run(|s| s.read(&Counters, &c0)).unwrap();
    let mut attempts = 0;
    cads.run(|s| {
        attempts += 1;
        let read = s.read(&Counters, &c0)?;
        if attempts == 1 {
            // Well past the session's lease and its tombstone, on any machine.
            std::thread::sleep(Duration::from_secs(1));
            cads.run(|other| other.write(&Counters, &c0)).unwrap();
        }
        s.write(&Counters, &c0)?;
        s.write(&Counters, &c0)?;
        Ok(read)
    })
    .unwrap();
    assert!(attempts >= 2, "the forgotten session ran again");
    assert_eq!(d.stored("c0"), 3);
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"3".to_vec()));
}

/// Write-through: a key the session filled itself, then read again (its own pending fill), is
/// changed like any value it read: checked and written in one round trip, and the change lands.
#[test]
fn a_change_of_a_key_the_session_filled_starts_from_its_fill() {
    let d = Deployment::start(Policy::WriteThrough);
    d.counters(1);
    let cads = d.cads(Config::default());
    let client = cads.cache().unwrap();
    let c0 = "c0".to_string();
    let fill_read_and_write_twice = round_trips(&cads, |s| {
        assert_eq!(s.read(&Counters, &c0).unwrap(), 0, "a miss, filled");
        assert_eq!(s.read(&Counters, &c0).unwrap(), 0, "its own fill");
        s.write(&Counters, &c0).unwrap();
        s.write(&Counters, &c0).unwrap();
    });
    // The miss, the fill, the second read, the check with the writes, the commit.
    assert_eq!(fill_read_and_write_twice, 5);
    assert_eq!(client.get(&counter_key("c0")).unwrap(), Some(b"2".to_vec()));
    assert_eq!(d.stored("c0"), 2);
}

/// Write-through: a document update is staged on the CMI (`LUPDATE`) with its validation and
/// committed, two round trips, however many updates of the document the session makes (two of
/// one field travel as an array of change objects); the cached copy then matches the stored
/// document. Updated and then deleted, the document is not
/// cached after commit.
#[test]
fn a_write_through_document_update_takes_two_round_trips() {
    let d = Deployment::start(Policy::WriteThrough);
    let cads = d.cads(Config::default());
    let users = Collection::create(&cads, "users").unwrap();
    for id in ["alice", "bob"] {
        cads.run(|s| users.insert(s, id, doc(json!({"visits": 0, "name": id}))))
            .unwrap();
        users.read(&cads, id).unwrap();
    }
    let client = cads.cache().unwrap();
    let cached = |id: &str| {
        client
            .get(&users.key(id))
            .unwrap()
            .map(|v| serde_json::from_slice::<serde_json::Value>(&v).unwrap())
    };
    let visit = changes(json!({"$inc": {"visits": 1}}));
    let trips = round_trips(&cads, |s| users.update(s, "alice", visit.clone()).unwrap());
    assert_eq!(trips, 2, "one update");
    let trips = round_trips(&cads, |s| {
        users.update(s, "alice", visit.clone()).unwrap();
        users
            .update(s, "alice", changes(json!({"$set": {"name": "Alice"}})))
            .unwrap();
        users.update(s, "alice", visit.clone()).unwrap();
    });
    assert_eq!(trips, 2, "three updates of one document");
    assert_eq!(cached("alice"), Some(json!({"visits": 3, "name": "Alice"})));
    assert_eq!(
        Some(serde_json::Value::Object(
            d.store.get("users", "alice").unwrap().unwrap()
        )),
        cached("alice")
    );
    cads.run(|s| {
        users.update(s, "bob", visit.clone())?;
        users.delete(s, "bob")
    })
    .unwrap();
    assert_eq!(cached("bob"), None, "updated, then deleted");
    assert_eq!(users.read(&cads, "bob").unwrap(), None);
}

/// The collection `users` holding alice with no visits, in the data store: no buffered write
/// left.
fn users_with_alice(cads: &Cads) -> Collection {
    let users = Collection::create(cads, "users").unwrap();
    cads.run(|s| users.insert(s, "alice", doc(json!({"visits": 0}))))
        .unwrap();
    cads::writeback::drain(cads, Duration::from_secs(60)).unwrap();
    users
}

/// The round trips of a session incrementing alice's visits.
fn visit_alice(cads: &Cads, users: &Collection) -> u64 {
    round_trips(cads, |s| {
        users
            .update(s, "alice", changes(json!({"$inc": {"visits": 1}})))
            .unwrap()
    })
}

/// Write-back: a document's update stages the new document on the CMI (`LUPDATE`). Buffering by
/// read-modify-write, it reads the buffered write under an exclusive lease first, then stages the
/// document and the buffered write with the validation, and commits: three round trips. With
/// append buffering a write reads nothing: it adds the buffered write's header where there is
/// none, appends its operation and registers the document with the validation, then commits
/// (two), the first write of a document as a later one. (No pause, so no guess that the
/// document is listed already: see the next test.)
#[test]
fn a_write_back_session_validates_once_after_its_last_staged_write() {
    for (buffering, first, later) in [
        (Buffering::ReadModifyWrite, 3, 3),
        (Buffering::Append, 2, 2),
    ] {
        let d = Deployment::start(Policy::WriteBack);
        let mut config = documents_config(buffering);
        config.write_back.worker_pause = Duration::ZERO;
        let cads = d.cads(config);
        let users = users_with_alice(&cads);
        let visit = |cads: &Cads| visit_alice(cads, &users);
        assert_eq!(
            visit(&cads),
            first,
            "{buffering:?}: the first buffered write"
        );
        assert_eq!(visit(&cads), later, "{buffering:?}: a later one");
        assert_eq!(
            users.read(&cads, "alice").unwrap().unwrap()["visits"],
            json!(2)
        );
        cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
        assert_eq!(
            d.store.get("users", "alice").unwrap().unwrap()["visits"],
            json!(2),
            "{buffering:?}"
        );
    }
}

/// Append buffering skips the registration of a document this process buffered a write of less
/// than half a pause ago. When the guess is wrong (here, the buffered write was applied in
/// between), the replies show a new buffered write, which is registered before the session
/// validates (a round trip more): the workers still find it.
#[test]
fn an_append_that_wrongly_guesses_its_document_is_listed_registers_it() {
    let d = Deployment::start(Policy::WriteBack);
    let mut config = documents_config(Buffering::Append);
    // A guess that lasts the whole test, whatever the machine's speed.
    config.write_back.worker_pause = Duration::from_secs(3600);
    let cads = d.cads(config);
    let users = users_with_alice(&cads);
    let alice = cads::DocRef {
        collection: "users".into(),
        id: "alice".into(),
    };
    assert!(cads::writeback::pending(&cads).unwrap().is_empty());
    let visit = |cads: &Cads| visit_alice(cads, &users);
    assert_eq!(
        visit(&cads),
        3,
        "guessed listed, found new: registered after"
    );
    assert_eq!(cads::writeback::pending(&cads).unwrap(), vec![alice]);
    assert_eq!(visit(&cads), 2, "guessed listed, and it was");
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    assert_eq!(
        d.store.get("users", "alice").unwrap().unwrap()["visits"],
        json!(2)
    );
    assert!(cads::writeback::pending(&cads).unwrap().is_empty());
}

/// Write-back's Design 2: a session's SQL goes as one session object, its id appended to the
/// mapping of every key it changes and to its queue, in the pipeline of its cached changes and
/// its validation, so a session takes two round trips as under write-through. The first session
/// of a queue finds the queue new and adds it to the list of queues, validated again: a round
/// trip more. The workers then apply every session.
#[test]
fn a_write_back_sql_session_takes_two_round_trips() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("trips", Queues::Single);
    bank.create(d.store.as_ref());
    let cads = d.cads(bank::config(8));
    let open = round_trips(&cads, |s| {
        s.write(&bank, &bank::Write::Open("a".into())).unwrap()
    });
    assert_eq!(open, 3, "the queue's first session");
    for entry in [1, 2] {
        let deposit = bank::Write::Deposit {
            account: "a".into(),
            amount: 10,
            entry,
        };
        let trips = round_trips(&cads, |s| s.write(&bank, &deposit).unwrap());
        assert_eq!(trips, 2, "deposit {entry}");
    }
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    let balance = bank::Query::Balance("a".into());
    assert_eq!(bank.stored(d.store.as_ref(), &balance), 20);
    bank::assert_nothing_left(&cads, &["a"]);
}

/// One session buffering a document's update (Design 1) and SQL (Design 2): both go in one
/// pipeline and each staging reads its own replies. The first such session finds its queue new
/// (and the document's buffered write too) and registers the queue, a round trip more; the
/// second, after the workers applied both, finds a new buffered write again but the queue
/// there, and takes two. The workers apply everything.
#[test]
fn a_session_of_a_document_and_sql_stages_both_in_one_pipeline() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("mixed", Queues::Single);
    bank.create(d.store.as_ref());
    let mut config = bank::config(8);
    config.write_back.buffering = Buffering::Append;
    config.write_back.worker_pause = Duration::ZERO;
    let cads = d.cads(config);
    let users = users_with_alice(&cads);
    let visit_and = |write: bank::Write| {
        round_trips(&cads, |s| {
            users
                .update(s, "alice", changes(json!({"$inc": {"visits": 1}})))
                .unwrap();
            s.write(&bank, &write).unwrap();
        })
    };
    assert_eq!(visit_and(bank::Write::Open("a".into())), 3, "a new queue");
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    let deposit = bank::Write::Deposit {
        account: "a".into(),
        amount: 10,
        entry: 1,
    };
    assert_eq!(visit_and(deposit), 2, "the queue known");
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    assert_eq!(
        d.store.get("users", "alice").unwrap().unwrap()["visits"],
        json!(2)
    );
    let balance = bank::Query::Balance("a".into());
    assert_eq!(bank.stored(d.store.as_ref(), &balance), 10);
    bank::assert_nothing_left(&cads, &["a"]);
}

/// Two counters read as one query.
struct BothCounters;

impl CacheStore for BothCounters {
    type Query = (String, String);
    type Write = std::convert::Infallible;
    type Output = (i64, i64);

    fn keys_read(&self, (a, b): &(String, String)) -> Vec<Vec<u8>> {
        vec![counter_key(a), counter_key(b)]
    }

    fn result_from_cache(&self, _: &(String, String), values: &[Vec<u8>]) -> Option<(i64, i64)> {
        let parse = |v: &Vec<u8>| std::str::from_utf8(v).ok()?.parse::<i64>().ok();
        Some((parse(values.first()?)?, parse(values.get(1)?)?))
    }

    fn query_store(
        &self,
        (a, b): &(String, String),
        tx: &mut StoreTx<'_>,
    ) -> Result<(i64, i64), StoreError> {
        Ok((Counters.query_store(a, tx)?, Counters.query_store(b, tx)?))
    }

    fn entries(&self, (a, b): &(String, String), (x, y): &(i64, i64)) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![
            (counter_key(a), x.to_string().into_bytes()),
            (counter_key(b), y.to_string().into_bytes()),
        ]
    }

    cads::read_only!();
}

/// A read alone of a query of two keys keeps its values of one moment: on a hit it is a session
/// (`LMGET`, then the read-only `LCOMMIT` that learns whether a writer came between), not the
/// plain GETs a read of one key takes.
#[test]
fn a_read_alone_of_two_keys_is_a_session() {
    let d = Deployment::start(Policy::WriteThrough);
    let cads = d.cads(Config::default());
    let names = d.counters(2);
    let pair = (names[0].clone(), names[1].clone());
    assert_eq!(cads.read(&BothCounters, &pair).unwrap(), (0, 0), "filled");
    let client = cads.cache().unwrap();
    let before = client.round_trips();
    d.faults.reset_counts();
    assert_eq!(cads.read(&BothCounters, &pair).unwrap(), (0, 0));
    assert_eq!(d.faults.counts().reads, 0, "a hit");
    assert_eq!(client.round_trips() - before, 2, "LMGET and LCOMMIT");
}
