//! Write-back appliers that die or stall mid-apply, made to by cads' failpoints: workers dying
//! at every step of Algorithm 2 (Design 1) and Algorithm 4 (Design 2) apply every buffered write
//! exactly once in the end, and an applier stalled past its leases lands nothing after a newer
//! write another applier took over.
//!
//! Failpoints are process-wide, so every test here holds the failpoint scenario from its first
//! line (they run one at a time: a test still setting up could otherwise reach a point another
//! has configured), and no test of another file sees them.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::documents::Collection;
use cads::writeback::{self, Buffering};
use cads::{Cads, Policy, Workers};
use cads_testkit::failpoints::{DyingWorkers, Scenario, Stall, APPLY_APPLIED, APPLY_LEASED};
use common::bank::*;
use common::{changes, doc, documents_config, Deployment, LONG_LEASE_MS, PAST_A_LONG_LEASE};
use serde_json::json;

/// Counters changed only with `$inc` and lists only with `$push` by concurrent sessions, while
/// workers die at random points of Algorithm 2 and carry on: once everything drains, every sum is
/// exact and every list holds each pushed element once.
#[test]
fn non_idempotent_writes_are_applied_exactly_once_despite_dying_workers() {
    let scenario = Scenario::setup();
    for buffering in [Buffering::Append, Buffering::ReadModifyWrite] {
        let d = Deployment::start_with(Policy::WriteBack, 3, |o| o.lease_ms = Some(150));
        let writers = d.cads(documents_config(buffering));
        let dying_workers = DyingWorkers::start(&scenario, 0x2545_F491_4F6C_DD1D, 5, u64::MAX);
        let dying = Arc::new(d.cads(documents_config(buffering)));
        let docs = Collection::create(&writers, "tallies").unwrap();
        let ids = ["a", "b", "c"];
        for id in ids {
            d.store
                .put("tallies", id, &doc(json!({"n": 0, "log": []})))
                .unwrap();
        }
        let workers = Workers::start(dying.clone(), 2);
        let (threads, each) = (4, 25);
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (writers, docs) = (&writers, &docs);
                scope.spawn(move || {
                    for i in 0..each {
                        let id = ids[(t + i) % ids.len()];
                        let entry = format!("{t}-{i}");
                        writers
                            .run(|s| {
                                docs.update(
                                    s,
                                    id,
                                    changes(
                                        json!({"$inc": {"n": 1}, "$push": {"log": entry.clone()}}),
                                    ),
                                )
                            })
                            .unwrap();
                    }
                });
            }
        });
        // Drain with workers that do not die.
        workers.stop();
        scenario.clear_apply_steps();
        Workers::start(Arc::new(d.cads(documents_config(buffering))), 1)
            .drain(Duration::from_secs(60))
            .unwrap();
        let mut total = 0;
        let mut entries = Vec::new();
        for id in ids {
            let stored = d.store.get("tallies", id).unwrap().unwrap();
            total += stored["n"].as_i64().unwrap();
            for e in stored["log"].as_array().unwrap() {
                entries.push(e.as_str().unwrap().to_string());
            }
            assert_eq!(
                stored["n"].as_i64().unwrap() as usize,
                stored["log"].as_array().unwrap().len(),
                "{buffering:?}: {id} got as many increments as pushes"
            );
        }
        assert_eq!(
            total,
            (threads * each) as i64,
            "{buffering:?}: every $inc exactly once"
        );
        entries.sort();
        let before = entries.len();
        entries.dedup();
        assert_eq!(
            entries.len(),
            before,
            "{buffering:?}: no $push applied twice"
        );
        assert_eq!(
            entries.len(),
            threads * each,
            "{buffering:?}: no $push lost"
        );
        assert!(dying_workers.deaths() > 0, "workers did die");
        // The cache agrees with the store.
        for id in ids {
            let cached = writers.run(|s| docs.get(s, id)).unwrap().unwrap();
            assert_eq!(cached, d.store.get("tallies", id).unwrap().unwrap());
        }
    }
}

/// Two CMIs with long leases, an applier that stalls once it holds its leases (the first to get
/// there), and the document `users/u1` with `n: 0` in the data store.
fn one_user_and_a_stalling_applier(scenario: &Scenario) -> (Deployment, Stall, Cads, Collection) {
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
    let stall = Stall::at(scenario, APPLY_LEASED);
    let cads = d.cads(documents_config(Buffering::ReadModifyWrite));
    let users = Collection::create(&cads, "users").unwrap();
    d.store.put("users", "u1", &doc(json!({"n": 0}))).unwrap();
    (d, stall, cads, users)
}

/// A worker that stalls past its leases between reading a buffered write and writing it to the
/// data store (a descheduled thread, a data store slow to answer) must not land it after a newer
/// buffered write of the document that another applier took over and applied meanwhile: that
/// would undo an acknowledged write in the data store.
#[test]
fn a_worker_stalled_past_its_leases_does_not_undo_a_later_write() {
    let scenario = Scenario::setup();
    let (d, stall, cads, users) = one_user_and_a_stalling_applier(&scenario);
    let set = |n: i64| {
        cads.run(|s| users.update(s, "u1", changes(json!({"$set": {"n": n}}))))
            .unwrap()
    };
    let stored = || d.store.get("users", "u1").unwrap().unwrap()["n"].clone();
    set(1);
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| writeback::apply_buffered(&cads, &users.doc_ref("u1")));
        // The worker holds the buffered write (n = 1) and stalls; its leases run out.
        stall.wait_stalled();
        d.cmis.advance_clock(PAST_A_LONG_LEASE);
        set(2);
        assert!(writeback::apply_buffered(&cads, &users.doc_ref("u1")).unwrap());
        assert_eq!(stored(), json!(2));
        stall.release();
        let late = stalled.join().unwrap();
        assert!(
            !matches!(late, Ok(true)),
            "the stalled worker applied: {late:?}"
        );
    });
    assert_eq!(
        stored(),
        json!(2),
        "the stalled worker's older write landed last"
    );
    writeback::drain(&cads, Duration::from_secs(5)).unwrap();
    assert_eq!(stored(), json!(2));
    assert_eq!(users.read(&cads, "u1").unwrap().unwrap()["n"], json!(2));
}

/// An apply on demand (as a miss makes) that finds an applier holding the document's buffered
/// write waits for it rather than leaving it: when it returns, the write is in the data store, and
/// the miss reads it there.
#[test]
fn an_apply_on_demand_waits_for_the_applier_holding_the_buffered_write() {
    let scenario = Scenario::setup();
    let (d, stall, cads, users) = one_user_and_a_stalling_applier(&scenario);
    cads.run(|s| users.update(s, "u1", changes(json!({"$set": {"n": 1}}))))
        .unwrap();
    let stored = || d.store.get("users", "u1").unwrap().unwrap()["n"].clone();
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| writeback::apply_buffered(&cads, &users.doc_ref("u1")));
        stall.wait_stalled();
        let waiting = scope.spawn(|| {
            let applied = writeback::apply_buffered(&cads, &users.doc_ref("u1"));
            (applied, stored())
        });
        // The stalled applier goes on once the second returned (it must not), or after a while.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !waiting.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        stall.release();
        assert!(stalled.join().unwrap().unwrap());
        let (applied, seen) = waiting.join().unwrap();
        applied.unwrap();
        assert_eq!(
            seen,
            json!(1),
            "the second apply returned before the write was applied"
        );
    });
}

/// Deposits by concurrent sessions while workers die at every step of Algorithm 4 and carry on,
/// and readers delete cached values and read them back: every read is validated against the
/// deposits that finished before it began and those begun before it ended, and once everything
/// drains every balance and entry count is exact (a deposit applied twice would also violate the
/// entries' primary key).
#[test]
fn sessions_are_applied_exactly_once_despite_dying_workers() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteBack, 3, |o| o.lease_ms = Some(150));
    let bank = Bank::new("exactly", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let writers = d.cads(config(3));
    let accounts = ["a", "b", "c"];
    for a in accounts {
        open_account(&writers, &bank, a);
    }
    let dying_workers = DyingWorkers::start(&scenario, 0x9E37_79B9_7F4A_7C15, 4, u64::MAX);
    let dying = Arc::new(d.cads(config(3)));
    let workers = Workers::start(dying.clone(), 2);
    type Window = (String, Instant, Instant, i64);
    let deposits: Mutex<Vec<Window>> = Mutex::new(Vec::new());
    let reads: Mutex<Vec<Window>> = Mutex::new(Vec::new());
    let (threads, each) = (3, 30);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (writers, bank, deposits) = (&writers, &bank, &deposits);
            scope.spawn(move || {
                for i in 0..each {
                    let account = accounts[(t + i) % accounts.len()];
                    let amount = 1 + (i % 5) as i64;
                    let start = Instant::now();
                    deposit(writers, bank, account, amount).unwrap();
                    deposits.lock().unwrap().push((
                        account.to_string(),
                        start,
                        Instant::now(),
                        amount,
                    ));
                }
            });
        }
        let (writers, bank, reads) = (&writers, &bank, &reads);
        scope.spawn(move || {
            let client = writers.cache().unwrap();
            for i in 0..40 {
                let account = accounts[i % accounts.len()];
                // Gone from the cache (as if evicted) while deposits are pending. A key a session
                // holds refuses a plain DEL (LEASED): try again.
                while client.delete(&balance_key(account)).is_err() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let start = Instant::now();
                let value = read(writers, bank, &Query::Balance(account.into()));
                reads
                    .lock()
                    .unwrap()
                    .push((account.to_string(), start, Instant::now(), value));
            }
        });
    });
    workers.stop();
    scenario.clear_apply_steps();
    Workers::start(Arc::new(d.cads(config(3))), 1)
        .drain(Duration::from_secs(60))
        .unwrap();

    let deposits = deposits.into_inner().unwrap();
    let mut stale = Vec::new();
    for (account, start, end, value) in reads.into_inner().unwrap() {
        let of = |keep: &dyn Fn(&Window) -> bool| -> i64 {
            deposits
                .iter()
                .filter(|w| w.0 == account && keep(w))
                .map(|w| w.3)
                .sum()
        };
        let done = of(&|w| w.2 < start);
        let begun = of(&|w| w.1 < end);
        if value < done || value > begun {
            stale.push(format!("{account}: read {value}, allowed {done}..={begun}"));
        }
    }
    assert!(stale.is_empty(), "stale reads: {stale:?}");
    for a in accounts {
        let expected: i64 = deposits.iter().filter(|w| w.0 == a).map(|w| w.3).sum();
        let count = deposits.iter().filter(|w| w.0 == a).count() as i64;
        assert_eq!(
            bank.stored(d.store.as_ref(), &Query::Balance(a.into())),
            expected,
            "{a}: every deposit exactly once"
        );
        assert_eq!(
            bank.stored(d.store.as_ref(), &Query::Entries(a.into())),
            count
        );
        assert_eq!(
            read(&writers, &bank, &Query::Balance(a.into())),
            expected,
            "{a}: the cache agrees"
        );
    }
    assert!(dying_workers.deaths() > 0, "the workers did die mid-apply");
    assert_nothing_left(&writers, &accounts);
    assert_eq!(Bank::applied_sessions(d.store.as_ref()), 0);
    bank.drop_tables(d.store.as_ref());
}

/// An applier that stalls past its leases after reading a batch's session objects (a descheduled
/// thread, a data store slow to answer) must not apply them once another applier has applied
/// them, deleted their objects and compacted their ids out of `cads_applied_sessions`. The
/// ledger here has no primary key, which would otherwise make the second apply fail.
#[test]
fn an_applier_stalled_past_its_leases_does_not_apply_a_session_twice() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
    let bank = Bank::new("stalled", Queues::PerAccount);
    without_ledger_key(&d, &bank);
    let writers = d.cads(config(3));
    open_account(&writers, &bank, "a");
    cads::writeback::drain(&writers, Duration::from_secs(5)).unwrap();
    let stall = Stall::at(&scenario, APPLY_LEASED);
    let stalling = d.cads(config(3));
    deposit(&writers, &bank, "a", 5).unwrap();
    let balance = || bank.stored(d.store.as_ref(), &Query::Balance("a".into()));
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| cads::writeback::drain(&stalling, Duration::from_secs(10)));
        stall.wait_stalled();
        d.cmis.advance_clock(PAST_A_LONG_LEASE);
        cads::writeback::drain(&writers, Duration::from_secs(5)).unwrap();
        assert_eq!(balance(), 5);
        stall.release();
        let _ = stalled.join().unwrap();
    });
    assert_eq!(balance(), 5, "the deposit was applied twice");
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Entries("a".into())),
        1
    );
    bank.drop_tables(d.store.as_ref());
}

/// An applier that dies after its data-store commit, before deleting its session objects, leaves
/// them queued with their ids in `cads_applied_sessions`. The next applier's first try, which
/// does not ask which sessions are applied, stops at a recorded id; it then asks, and applies
/// only the session queued after them (the batch holds all three), and deletes all three
/// objects. The ledger has no primary key, so a session applied twice shows in the sums.
#[test]
fn a_session_applied_by_an_applier_that_died_is_deleted_not_applied_again() {
    let scenario = Scenario::setup();
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
    let bank = Arc::new(Bank::new("diedafter", Queues::Single));
    without_ledger_key(&d, &bank);
    let cads = Arc::new(d.cads(config(3)));
    open_account(&cads, &bank, "a");
    writeback::drain(&cads, Duration::from_secs(10)).unwrap();
    deposit(&cads, &bank, "a", 5).unwrap();
    deposit(&cads, &bank, "a", 7).unwrap();
    let (died_tx, died) = std::sync::mpsc::channel();
    let died_tx = Mutex::new(Some(died_tx));
    {
        let (cads, bank) = (cads.clone(), bank.clone());
        scenario.on(APPLY_APPLIED, move || {
            let first = died_tx.lock().unwrap().take();
            if let Some(tx) = first {
                // Queued behind the two being applied, before the applier dies.
                deposit(&cads, &bank, "a", 9).unwrap();
                cads::failpoints::die();
                tx.send(()).unwrap();
            }
        });
    }
    std::thread::scope(|scope| {
        let drained = scope.spawn(|| writeback::drain(&cads, Duration::from_secs(60)));
        died.recv_timeout(Duration::from_secs(60))
            .expect("the applier reached the point where it dies");
        // The dead applier's leases hold the objects until the clocks move past them.
        d.cmis.advance_clock(PAST_A_LONG_LEASE);
        drained.join().unwrap().unwrap();
    });
    scenario.clear(APPLY_APPLIED);
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Balance("a".into())),
        21
    );
    assert_eq!(
        bank.stored(d.store.as_ref(), &Query::Entries("a".into())),
        3
    );
    assert_nothing_left(&cads, &["a"]);
    assert_eq!(Bank::applied_sessions(d.store.as_ref()), 0);
    bank.drop_tables(d.store.as_ref());
}

/// The bank's tables with a ledger that has no primary key, which would otherwise make a session
/// applied a second time fail rather than count twice.
fn without_ledger_key(d: &Deployment, bank: &Bank) {
    d.store
        .execute_batch(&format!(
            "DROP TABLE IF EXISTS {entries}; DROP TABLE IF EXISTS {accounts};
             CREATE TABLE {accounts} (id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL);
             CREATE TABLE {entries} (id BIGINT NOT NULL, account VARCHAR(64) NOT NULL,
                 amount BIGINT NOT NULL)",
            accounts = bank.accounts,
            entries = bank.entries
        ))
        .unwrap();
}
