//! Write-back, Design 2 (per session, 000 §3.2 and 003 Algorithms 3 and 4) on a small bank:
//! accounts and ledger entries in SQL, the entries referencing their account (a foreign key).
//! Read-after-write on misses by applying (Algorithm 1) and by folding query result changes
//! (Algorithm 3), the order of sessions in a queue against the foreign key (SQLite, and
//! PostgreSQL when it runs), the pinned-memory fallback, and a process applying what an earlier
//! one left. Appliers that die or stall are in `dying_appliers.rs`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads::{CacheChange, CacheStore, Cads, Error, Policy, SqlBuffer, StoreTx, Workers};
use cads_protocol::{Command, Reply};
use cads_store::{open, DataStore, StoreError, StoreOptions};
use cads_testkit::failpoints::{Scenario, CACHE_COMMIT};
use common::bank::*;
use common::Deployment;

#[test]
fn misses_apply_or_fold_what_they_depend_on() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("misses", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    let client = cads.cache().unwrap();
    open_account(&cads, &bank, "a");
    open_account(&cads, &bank, "b");
    for _ in 0..3 {
        deposit(&cads, &bank, "a", 10).unwrap();
    }
    for _ in 0..2 {
        deposit(&cads, &bank, "b", 5).unwrap();
    }
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Total),
        0,
        "nothing applied yet"
    );
    assert_eq!(cads.write_back_stats().snapshot().buffered_sessions, 7);

    // The total was never cached: the miss folds the pending deposits into the data store's sum
    // (Algorithm 3) and applies nothing.
    client.delete(TOTAL).unwrap();
    assert_eq!(read(&cads, &bank, &Query::Total), 40);
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 0);
    assert_eq!(cads.write_back_stats().snapshot().applied_sessions, 0);

    // A's balance has no result changes: the miss applies a's queue first (Algorithm 1).
    client.delete(&balance_key("a")).unwrap();
    assert_eq!(read(&cads, &bank, &Query::Balance("a".into())), 30);
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Balance("a".into())),
        30
    );
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Entries("b".into())),
        0,
        "b's queue is not a's"
    );

    // Folding again: a's deposits are in the data store now and are not folded twice.
    client.delete(TOTAL).unwrap();
    assert_eq!(read(&cads, &bank, &Query::Total), 40);

    client.delete(&entries_key("b")).unwrap();
    assert_eq!(read(&cads, &bank, &Query::Entries("b".into())), 2);
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 40);

    // Everything is applied: the drain has nothing to do and leaves nothing behind.
    Workers::start(Arc::new(d.cads(config(8))), 1)
        .drain(Duration::from_secs(20))
        .unwrap();
    assert_nothing_left(&cads, &["a", "b"]);
    assert_eq!(Bank::applied_sessions(d.store.as_ref()), 0, "compacted");
    bank.drop_tables(d.store.as_ref());
}

#[test]
fn result_changes_without_a_fold_are_an_error() {
    let d = Deployment::start(Policy::WriteBack);
    let mut bank = Bank::new("nofold", Queues::PerAccount);
    bank.folds = false;
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    open_account(&cads, &bank, "a");
    deposit(&cads, &bank, "a", 1).unwrap();
    let err = cads.run(|s| s.read(&bank, &Query::Total)).unwrap_err();
    assert!(
        err.to_string().contains("fold_result_changes"),
        "a clear error: {err}"
    );
}

/// A buffered statement that must change one row and changes none (a deposit to an account the
/// data store does not have) fails its apply with an error naming it; its queue waits, nothing
/// of it is applied or lost, other queues go on, and once the row exists it applies.
#[test]
fn a_statement_changing_other_rows_than_counted_stops_its_queue() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("counted", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    open_account(&cads, &bank, "a");
    deposit(&cads, &bank, "a", 5).unwrap();
    deposit(&cads, &bank, "ghost", 7).unwrap();
    let error = cads::writeback::drain(&cads, Duration::from_secs(3)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("changed 0 rows where the session counted on 1"),
        "{error}"
    );
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Balance("a".into())),
        5
    );
    assert_eq!(cads::writeback::pending_sessions(&cads).unwrap(), 1);
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Entries("ghost".into())),
        0
    );
    d.store
        .execute_batch(&format!(
            "INSERT INTO {} (id, balance) VALUES ('ghost', 0)",
            bank.accounts
        ))
        .unwrap();
    cads::writeback::drain(&cads, Duration::from_secs(20)).unwrap();
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Balance("ghost".into())),
        7
    );
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Entries("ghost".into())),
        1
    );
}

#[test]
fn queue_names_are_checked() {
    struct BadQueue(Bank);
    impl CacheStore for BadQueue {
        type Query = Query;
        type Write = Write;
        type Output = i64;
        fn keys_read(&self, q: &Query) -> Vec<Vec<u8>> {
            self.0.keys_read(q)
        }
        fn result_from_cache(&self, q: &Query, v: &[Vec<u8>]) -> Option<i64> {
            self.0.result_from_cache(q, v)
        }
        fn query_store(&self, q: &Query, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
            self.0.query_store(q, tx)
        }
        fn entries(&self, q: &Query, v: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
            self.0.entries(q, v)
        }
        fn keys_written(&self, w: &Write) -> Vec<Vec<u8>> {
            self.0.keys_written(w)
        }
        fn write_store(&self, w: &Write, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
            self.0.write_store(w, tx)
        }
        fn cache_change(&self, w: &Write, k: &[u8]) -> CacheChange {
            self.0.cache_change(w, k)
        }
        fn buffer_sql(&self, w: &Write) -> Option<SqlBuffer> {
            let mut b = self.0.buffer_sql(w)?;
            b.queue = "two\nlines".into();
            Some(b)
        }
    }
    let d = Deployment::start(Policy::WriteBack);
    let bank = BadQueue(Bank::new("badqueue", Queues::Single));
    bank.0.create(d.store.as_ref());
    let cads = d.cads(config(8));
    let err = cads
        .run(|s| s.write(&bank, &Write::Open("a".into())))
        .unwrap_err();
    assert!(err.to_string().contains("queue name"), "{err}");
}

/// Sessions open accounts and deposit into them right away, in one queue, while two workers
/// apply small batches: the entries' foreign key would fail if a deposit reached the data store
/// before the session that opened its account.
fn queue_order_keeps_foreign_keys(store: Arc<dyn DataStore>, prefix: &str) {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new(prefix, Queues::Single);
    bank.create(store.as_ref());
    let cads = Arc::new(Cads::connect(
        store.clone(),
        d.cmis.addrs(),
        Policy::WriteBack,
        config(3),
    ));
    let workers = Workers::start(cads.clone(), 2);
    std::thread::scope(|scope| {
        for t in 0..2 {
            let (cads, bank) = (&cads, &bank);
            scope.spawn(move || {
                for i in 0..15 {
                    let account = format!("{t}-{i}");
                    open_account(cads, bank, &account);
                    deposit(cads, bank, &account, 7).unwrap();
                    deposit(cads, bank, &account, 1).unwrap();
                }
            });
        }
    });
    workers.drain(Duration::from_secs(60)).unwrap();
    workers.stop();
    assert_eq!(bank.stored(store.as_ref(), &Query::Total), 2 * 15 * 8);
    for t in 0..2 {
        for i in 0..15 {
            let account = format!("{t}-{i}");
            assert_eq!(
                bank.stored(store.as_ref(), &Query::Entries(account.clone())),
                2
            );
        }
    }
    bank.drop_tables(store.as_ref());
}

#[test]
fn queue_order_keeps_foreign_keys_on_sqlite() {
    let d = Deployment::start(Policy::WriteBack);
    queue_order_keeps_foreign_keys(d.store.clone(), "fk");
}

#[test]
fn queue_order_keeps_foreign_keys_on_postgres() {
    let url = std::env::var("CADS_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://cads:cads@127.0.0.1:5432/cads".into());
    let store = match open(&url, &StoreOptions::default()) {
        Ok(store) => store,
        Err(e) if std::env::var("CADS_REQUIRE_SERVICES").is_ok_and(|v| v.trim() == "1") => {
            panic!("CADS_REQUIRE_SERVICES=1 but PostgreSQL is unreachable at {url}: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: PostgreSQL unreachable at {url}: {e}");
            return;
        }
    };
    queue_order_keeps_foreign_keys(store, &format!("wbfk{}", std::process::id()));
}

/// With room for almost nothing pinned, sessions find the cache full and run as write-through,
/// after applying what their queue holds: nothing is lost and nothing is applied out of order.
#[test]
fn full_pinned_memory_falls_back_to_write_through() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.max_pinned_memory = Some("3kb".into());
    });
    let bank = Bank::new("full", Queues::Single);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(4));
    let mut expected = 0;
    for i in 0..20 {
        let account = format!("x{}", i % 4);
        if i < 4 {
            open_account(&cads, &bank, &account);
        }
        deposit(&cads, &bank, &account, 3).unwrap();
        expected += 3;
    }
    let stats = cads.write_back_stats().snapshot();
    assert!(stats.fallbacks > 0, "the cap was reached: {stats:?}");
    Workers::start(Arc::new(d.cads(config(4))), 1)
        .drain(Duration::from_secs(30))
        .unwrap();
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), expected);
    assert_eq!(read(&cads, &bank, &Query::Total), expected);
    bank.drop_tables(d.store.as_ref());
}

/// A process buffers sessions and goes away; workers of a new process find its queues and apply
/// them.
#[test]
fn a_new_process_applies_what_an_old_one_left() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("restart", Queues::PerAccount);
    bank.create(d.store.as_ref());
    {
        let old = d.cads(config(8));
        open_account(&old, &bank, "a");
        open_account(&old, &bank, "b");
        deposit(&old, &bank, "a", 4).unwrap();
        deposit(&old, &bank, "b", 6).unwrap();
    }
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 0);
    let new = Arc::new(d.cads(config(8)));
    let workers = Workers::start(new.clone(), 1);
    workers.drain(Duration::from_secs(20)).unwrap();
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 10);
    assert_nothing_left(&new, &["a", "b"]);
    bank.drop_tables(d.store.as_ref());
}

/// A session that read from the data store (its read snapshot taken) and then misses on a key
/// with pending sessions applies them first, and its next read sees them: the applied writes
/// are newer than its snapshot, which is taken again.
#[test]
fn a_miss_after_applying_reads_past_the_sessions_snapshot() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("snapshot", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    let client = cads.cache().unwrap();
    open_account(&cads, &bank, "a");
    open_account(&cads, &bank, "b");
    Workers::start(Arc::new(d.cads(config(8))), 1)
        .drain(Duration::from_secs(20))
        .unwrap();
    client.delete(&balance_key("b")).unwrap();
    let mut s = cads.session();
    assert_eq!(s.read(&bank, &Query::Balance("b".into())).unwrap(), 0);
    deposit(&cads, &bank, "a", 10).unwrap();
    client.delete(&balance_key("a")).unwrap();
    assert_eq!(s.read(&bank, &Query::Balance("a".into())).unwrap(), 10);
    s.commit().unwrap();
    bank.drop_tables(d.store.as_ref());
}

/// A buffered session is acknowledged by its cache commit: one that fails (its leases run out
/// between pre-commit and commit, taking the staged session with them) returns the error, and
/// the deposit is never applied.
#[test]
fn a_buffered_session_whose_cache_commit_fails_is_not_acknowledged() {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.lease_ms = Some(common::LONG_LEASE_MS)
    });
    let bank = Bank::new("lost_commit", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    open_account(&cads, &bank, "a");
    let mut session = cads.session();
    let deposit = Write::Deposit {
        account: "a".into(),
        amount: 10,
        entry: 1,
    };
    session.write(&bank, &deposit).unwrap();
    session.pre_commit().unwrap();
    d.cmis.advance_clock(common::PAST_A_LONG_LEASE);
    let outcome = session.commit();
    assert!(outcome.is_err(), "acknowledged: {outcome:?}");
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    let balance = Query::Balance("a".into());
    assert_eq!(bank.stored(d.store.as_ref(), &balance), 0);
    assert_eq!(read(&cads, &bank, &balance), 0);
}

/// A session whose cache commit reached the CMI of its account's cached balance (CMI 0) but not
/// the two holding its queue: the new balance was visible while no applier would ever apply the
/// session. The session's keys are deleted after the failed commit, so reads see the data
/// store's balance, before a drain and after it.
#[test]
fn a_session_whose_queue_missed_its_commit_is_not_seen() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteBack, 3, |_| {});
    let bank = Bank::new("unqueued", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    let client = cads.cache().unwrap();
    let account = (0..256)
        .map(|i| format!("u{i}"))
        .find(|a| {
            let mut queue = client.replicas(format!("SQ:acct-{a}").as_bytes(), 2);
            queue.sort();
            client.route(&balance_key(a)) == 0 && queue == [1, 2]
        })
        .expect("an account placed so");
    open_account(&cads, &bank, &account);
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    let balance = Query::Balance(account.clone());
    assert_eq!(read(&cads, &bank, &balance), 0, "cached");
    // Only this test's session: the other tests of this file commit beside it.
    let writer = std::thread::current().id();
    let flushed = AtomicBool::new(false);
    let flusher = d.cads(config(8));
    scenario.on(CACHE_COMMIT, move || {
        if std::thread::current().id() == writer && !flushed.swap(true, Ordering::SeqCst) {
            let flush = Command::FlushAll(cads_protocol::FlushScope::Unpinned);
            for cmi in [1, 2] {
                flusher.cache().unwrap().execute(cmi, &flush).unwrap();
            }
        }
    });
    let refused = deposit(&cads, &bank, &account, 10);
    scenario.clear(CACHE_COMMIT);
    assert!(matches!(refused, Err(Error::Cache(_))), "{refused:?}");
    assert_eq!(read(&cads, &bank, &balance), 0, "not the refused deposit");
    cads::writeback::drain(&cads, Duration::from_secs(60)).unwrap();
    assert_eq!(bank.stored(d.store.as_ref(), &balance), 0);
    assert_eq!(read(&cads, &bank, &balance), 0);
}

/// A session that falls back to write-through (pinned memory full) writes the data store
/// directly, so every queue it writes to is held and emptied first, the second as well as the
/// first: here the deposit into `b` must follow `b`'s buffered opening (its entry references
/// the account). Also when the session's first statement is the application's own.
#[test]
fn a_fallback_session_applies_every_queue_it_writes_first() {
    for own_statement_first in [false, true] {
        fallback_session_with_two_queues(own_statement_first);
    }
}

fn fallback_session_with_two_queues(own_statement_first: bool) {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| {
        o.max_pinned_memory = Some("4kb".into());
    });
    let bank = Bank::new("fallback_queues", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8));
    open_account(&cads, &bank, "a");
    open_account(&cads, &bank, "b");
    // Fill pinned memory with the openings of other accounts, until one finds it full.
    let mut others = 0;
    while cads.write_back_stats().snapshot().fallbacks == 0 {
        open_account(&cads, &bank, &format!("other{others}"));
        others += 1;
        assert!(others < 1000, "pinned memory never filled");
    }
    let balance = |account: &str| Query::Balance(account.into());
    assert_eq!(
        Bank::applied_sessions(d.store.as_ref()),
        0,
        "the openings of a and b are still buffered"
    );
    cads.run(|s| {
        if own_statement_first {
            let touch = format!(
                "UPDATE {} SET balance = balance WHERE id = 'a'",
                bank.accounts
            );
            s.tx().sql()?.execute(&touch, &[])?;
        }
        for (account, entry) in [("a", 1), ("b", 2)] {
            let write = Write::Deposit {
                account: account.into(),
                amount: 5,
                entry,
            };
            s.write(&bank, &write)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(cads.write_back_stats().snapshot().fallbacks, 2);
    for account in ["a", "b"] {
        let what = format!("{account}, own statement first: {own_statement_first}");
        assert_eq!(
            bank.stored(d.store.as_ref(), &balance(account)),
            5,
            "{what}"
        );
        assert_eq!(read(&cads, &bank, &balance(account)), 5, "{what}");
    }
}

/// A queue missing on one of its replicas only (its CMI lost it, as one that restarted empty
/// does) is created there by the next session's `LADD`, which then appends its line on both; the
/// queue counts as known (it is on the other replica and in `SQS`), and the workers apply every
/// session, reading the longer replica.
#[test]
fn a_queue_missing_on_one_replica_gets_the_next_session_there() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("onereplica", Queues::Single);
    bank.create(d.store.as_ref());
    let cads = Arc::new(d.cads(config(8)));
    let client = cads.cache().unwrap();
    open_account(&cads, &bank, "a");
    deposit(&cads, &bank, "a", 10).unwrap();
    let queue = b"SQ:bank";
    let replicas = client.replicas(queue, 2);
    assert_eq!(replicas.len(), 2);
    let lines_on = |cmi: usize| match client.execute(cmi, &Command::Get(queue)).unwrap() {
        Reply::Bulk(list) => list
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        Reply::Nil => 0,
        other => panic!("GET {}: {other:?}", String::from_utf8_lossy(queue)),
    };
    assert_eq!(lines_on(replicas[1]), 2);
    let keys = [&queue[..]];
    client.execute(replicas[1], &Command::Del(&keys)).unwrap();
    deposit(&cads, &bank, "a", 5).unwrap();
    assert_eq!(lines_on(replicas[0]), 3);
    assert_eq!(
        lines_on(replicas[1]),
        1,
        "created with the new session's line"
    );
    let workers = Workers::start(cads.clone(), 1);
    workers.drain(Duration::from_secs(60)).unwrap();
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Balance("a".into())),
        15
    );
    assert_nothing_left(&cads, &["a"]);
}
