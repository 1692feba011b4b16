//! Write-back, Design 2 (per session, 000 §3.2 and 003 Algorithms 3 and 4) on a small bank:
//! accounts and ledger entries in SQL, the entries referencing their account (a foreign key).
//! Read-after-write on misses by applying (Algorithm 1) and by folding query result changes
//! (Algorithm 3), exactly-once with workers dying mid-apply, the order of sessions in a queue
//! against the foreign key (SQLite, and PostgreSQL when it runs), the pinned-memory fallback, and
//! a process applying what an earlier one left.

mod common;

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cads::writeback::{ApplyStep, CrashHook, APPLIED_SESSIONS};
use cads::{
    CacheChange, CacheStore, Cads, Config, Error, Policy, SqlBuffer, Statement, StoreTx, Workers,
    WriteBackConfig,
};
use cads_store::{open, DataStore, Isolation, SqlValue, StoreError, StoreOptions};
use common::{Deployment, Stall};

/// Which queue a bank session joins.
#[derive(Clone, Copy)]
enum Queues {
    /// One per account: sessions of different accounts are applied independently.
    PerAccount,
    /// One for all.
    Single,
}

struct Bank {
    accounts: String,
    entries: String,
    queues: Queues,
    /// Whether it folds query result changes into a missed total (it always leaves them).
    folds: bool,
}

enum Query {
    Balance(String),
    Total,
    Entries(String),
}

enum Write {
    Open(String),
    Deposit {
        account: String,
        amount: i64,
        entry: i64,
    },
}

fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

fn balance_key(account: &str) -> Vec<u8> {
    format!("bal:{account}").into_bytes()
}

fn entries_key(account: &str) -> Vec<u8> {
    format!("entries:{account}").into_bytes()
}

const TOTAL: &[u8] = b"total";

impl Bank {
    fn new(prefix: &str, queues: Queues) -> Bank {
        Bank {
            accounts: format!("{prefix}_accounts"),
            entries: format!("{prefix}_entries"),
            queues,
            folds: true,
        }
    }

    fn create(&self, store: &dyn DataStore) {
        store
            .execute_batch(&format!(
                "DROP TABLE IF EXISTS {entries}; DROP TABLE IF EXISTS {accounts};
                 CREATE TABLE {accounts} (id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL);
                 CREATE TABLE {entries} (id BIGINT PRIMARY KEY,
                     account VARCHAR(64) NOT NULL REFERENCES {accounts}(id),
                     amount BIGINT NOT NULL)",
                accounts = self.accounts,
                entries = self.entries
            ))
            .unwrap();
    }

    fn drop_tables(&self, store: &dyn DataStore) {
        let _ = store.execute_batch(&format!(
            "DROP TABLE IF EXISTS {}; DROP TABLE IF EXISTS {}",
            self.entries, self.accounts
        ));
    }

    fn account(write: &Write) -> &str {
        match write {
            Write::Open(a) | Write::Deposit { account: a, .. } => a,
        }
    }

    fn statements(&self, write: &Write) -> Vec<Statement> {
        match write {
            Write::Open(a) => vec![Statement::new(
                format!("INSERT INTO {} (id, balance) VALUES (?, 0)", self.accounts),
                vec![text(a)],
            )],
            Write::Deposit {
                account,
                amount,
                entry,
            } => vec![
                Statement::new(
                    format!(
                        "UPDATE {} SET balance = balance + ? WHERE id = ?",
                        self.accounts
                    ),
                    vec![SqlValue::Int(*amount), text(account)],
                )
                .changing(1),
                Statement::new(
                    format!(
                        "INSERT INTO {} (id, account, amount) VALUES (?, ?, ?)",
                        self.entries
                    ),
                    vec![SqlValue::Int(*entry), text(account), SqlValue::Int(*amount)],
                ),
            ],
        }
    }

    /// What the data store holds (read directly).
    fn stored(&self, store: &dyn DataStore, query: &Query) -> i64 {
        let mut tx = store.begin_read(Isolation::ReadCommitted).unwrap();
        let (sql, params) = self.query_sql(query);
        tx.query(&sql, &params).unwrap()[0].get::<i64>(0).unwrap()
    }

    fn query_sql(&self, query: &Query) -> (String, Vec<SqlValue>) {
        match query {
            Query::Balance(a) => (
                format!(
                    "SELECT CAST(COALESCE(SUM(balance), 0) AS BIGINT) FROM {} WHERE id = ?",
                    self.accounts
                ),
                vec![text(a)],
            ),
            Query::Total => (
                format!(
                    "SELECT CAST(COALESCE(SUM(balance), 0) AS BIGINT) FROM {}",
                    self.accounts
                ),
                vec![],
            ),
            Query::Entries(a) => (
                format!(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM {} WHERE account = ?",
                    self.entries
                ),
                vec![text(a)],
            ),
        }
    }

    fn applied_sessions(store: &dyn DataStore) -> i64 {
        let mut tx = store.begin_read(Isolation::ReadCommitted).unwrap();
        tx.query(
            &format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {APPLIED_SESSIONS}"),
            &[],
        )
        .unwrap()[0]
            .get::<i64>(0)
            .unwrap()
    }
}

impl CacheStore for Bank {
    type Query = Query;
    type Write = Write;
    type Output = i64;

    fn keys_read(&self, query: &Query) -> Vec<Vec<u8>> {
        vec![match query {
            Query::Balance(a) => balance_key(a),
            Query::Total => TOTAL.to_vec(),
            Query::Entries(a) => entries_key(a),
        }]
    }

    fn result_from_cache(&self, _: &Query, values: &[Vec<u8>]) -> Option<i64> {
        std::str::from_utf8(&values[0]).ok()?.parse().ok()
    }

    fn query_store(&self, query: &Query, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
        let (sql, params) = self.query_sql(query);
        tx.read_sql()?.query(&sql, &params)?[0].get::<i64>(0)
    }

    fn entries(&self, query: &Query, value: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.keys_read(query)
            .into_iter()
            .map(|k| (k, value.to_string().into_bytes()))
            .collect()
    }

    fn keys_written(&self, write: &Write) -> Vec<Vec<u8>> {
        match write {
            Write::Open(a) => vec![balance_key(a), entries_key(a)],
            Write::Deposit { account, .. } => {
                vec![balance_key(account), TOTAL.to_vec(), entries_key(account)]
            }
        }
    }

    fn write_store(&self, write: &Write, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        for s in self.statements(write) {
            tx.sql()?.execute(&s.sql, &s.params)?;
        }
        Ok(())
    }

    fn cache_change(&self, write: &Write, key: &[u8]) -> CacheChange {
        match write {
            Write::Open(_) => CacheChange::Set(b"0".to_vec()),
            Write::Deposit { .. } if key.starts_with(b"entries:") => CacheChange::Incr(1),
            Write::Deposit { amount, .. } => CacheChange::Incr(*amount),
        }
    }

    fn buffer_sql(&self, write: &Write) -> Option<SqlBuffer> {
        let queue = match self.queues {
            Queues::PerAccount => format!("acct-{}", Bank::account(write)),
            Queues::Single => "bank".to_string(),
        };
        Some(SqlBuffer {
            queue,
            statements: self.statements(write),
        })
    }

    fn result_changes(&self, write: &Write) -> Vec<(Vec<u8>, Vec<u8>)> {
        match write {
            Write::Deposit { amount, .. } => {
                vec![(TOTAL.to_vec(), amount.to_string().into_bytes())]
            }
            Write::Open(_) => Vec::new(),
        }
    }

    fn fold_result_changes(&self, query: &Query, total: &mut i64, changes: &[Vec<u8>]) -> bool {
        if !self.folds || !matches!(query, Query::Total) {
            return false;
        }
        for change in changes {
            *total += std::str::from_utf8(change).unwrap().parse::<i64>().unwrap();
        }
        true
    }
}

fn config(batch: usize, crash: Option<CrashHook>) -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            batch,
            compact_every: 4,
            crash,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

static NEXT_ENTRY: AtomicI64 = AtomicI64::new(1);

fn deposit(cads: &Cads, bank: &Bank, account: &str, amount: i64) -> Result<(), Error> {
    let entry = NEXT_ENTRY.fetch_add(1, Ordering::Relaxed);
    let write = Write::Deposit {
        account: account.to_string(),
        amount,
        entry,
    };
    cads.run(|s| s.write(bank, &write))
}

fn open_account(cads: &Cads, bank: &Bank, account: &str) {
    cads.run(|s| s.write(bank, &Write::Open(account.to_string())))
        .unwrap();
}

/// After a drain: no session object is left, and no mapping of the bank's keys (the emptied
/// queues and their list stay, pinned and tiny).
fn assert_nothing_left(cads: &Cads, accounts: &[&str]) {
    assert_eq!(cads::writeback::pending_sessions(cads).unwrap(), 0);
    let client = cads.cache().unwrap();
    let mut keys = vec![TOTAL.to_vec()];
    for a in accounts {
        keys.push(balance_key(a));
        keys.push(entries_key(a));
    }
    for key in keys {
        let mapping = [b"SM:".as_slice(), &key].concat();
        for cmi in 0..client.cmis() {
            let exists = client
                .execute(cmi, &cads_protocol::Command::Exists(&[mapping.as_slice()]))
                .unwrap();
            assert_eq!(
                exists,
                cads_protocol::Reply::Int(0),
                "a mapping is left: {}",
                String::from_utf8_lossy(&mapping)
            );
        }
    }
}

fn read(cads: &Cads, bank: &Bank, query: &Query) -> i64 {
    cads.run(|s| s.read(bank, query)).unwrap()
}

#[test]
fn misses_apply_or_fold_what_they_depend_on() {
    let d = Deployment::start(Policy::WriteBack);
    let bank = Bank::new("misses", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let cads = d.cads(config(8, None));
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
    Workers::start(Arc::new(d.cads(config(8, None))), 1)
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
    let cads = d.cads(config(8, None));
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
    let cads = d.cads(config(8, None));
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
    let cads = d.cads(config(8, None));
    let err = cads
        .run(|s| s.write(&bank, &Write::Open("a".into())))
        .unwrap_err();
    assert!(err.to_string().contains("queue name"), "{err}");
}

/// Deposits by concurrent sessions while workers die at every step of Algorithm 4 and carry on,
/// and readers delete cached values and read them back: every read is validated against the
/// deposits that finished before it began and those begun before it ended, and once everything
/// drains every balance and entry count is exact (a deposit applied twice would also violate the
/// entries' primary key).
#[test]
fn sessions_are_applied_exactly_once_despite_dying_workers() {
    let d = Deployment::start_with(Policy::WriteBack, 3, |o| o.lease_ms = Some(150));
    let bank = Bank::new("exactly", Queues::PerAccount);
    bank.create(d.store.as_ref());
    let writers = d.cads(config(3, None));
    let accounts = ["a", "b", "c"];
    for a in accounts {
        open_account(&writers, &bank, a);
    }
    let rolls = Arc::new(AtomicU64::new(0x9E37_79B9_7F4A_7C15));
    let crashes = Arc::new(AtomicUsize::new(0));
    let (r, c) = (rolls.clone(), crashes.clone());
    let hook = CrashHook(Arc::new(move |_step: ApplyStep| {
        let mut x = r.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.store(x, Ordering::Relaxed);
        let die = x % 4 == 0;
        if die {
            c.fetch_add(1, Ordering::Relaxed);
        }
        die
    }));
    let dying = Arc::new(d.cads(config(3, Some(hook))));
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
    Workers::start(Arc::new(d.cads(config(3, None))), 1)
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
    assert!(
        crashes.load(Ordering::Relaxed) > 0,
        "the workers did die mid-apply"
    );
    assert_nothing_left(&writers, &accounts);
    assert_eq!(Bank::applied_sessions(d.store.as_ref()), 0);
    bank.drop_tables(d.store.as_ref());
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
        d.server.as_ref().unwrap().addrs(),
        Policy::WriteBack,
        config(3, None),
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
    let cads = d.cads(config(4, None));
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
    Workers::start(Arc::new(d.cads(config(4, None))), 1)
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
        let old = d.cads(config(8, None));
        open_account(&old, &bank, "a");
        open_account(&old, &bank, "b");
        deposit(&old, &bank, "a", 4).unwrap();
        deposit(&old, &bank, "b", 6).unwrap();
    }
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 0);
    let new = Arc::new(d.cads(config(8, None)));
    let workers = Workers::start(new.clone(), 1);
    workers.drain(Duration::from_secs(20)).unwrap();
    assert_eq!(bank.stored(d.store.as_ref(), &Query::Total), 10);
    assert_nothing_left(&new, &["a", "b"]);
    bank.drop_tables(d.store.as_ref());
}

/// An applier that stalls past its leases after reading a batch's session objects (a descheduled
/// thread, a data store slow to answer) must not apply them once another applier has applied
/// them, deleted their objects and compacted their ids out of `cads_applied_sessions`. The
/// ledger here has no primary key, which would otherwise make the second apply fail.
#[test]
fn an_applier_stalled_past_its_leases_does_not_apply_a_session_twice() {
    const LEASE_MS: u64 = 100;
    let d = Deployment::start_with(Policy::WriteBack, 2, |o| o.lease_ms = Some(LEASE_MS));
    let bank = Bank::new("stalled", Queues::PerAccount);
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
    let writers = d.cads(config(3, None));
    open_account(&writers, &bank, "a");
    cads::writeback::drain(&writers, Duration::from_secs(5)).unwrap();
    let stall = Stall::default();
    let hook = stall.hook(ApplyStep::Leased);
    let stalling = d.cads(config(3, Some(hook)));
    deposit(&writers, &bank, "a", 5).unwrap();
    let balance = || bank.stored(d.store.as_ref(), &Query::Balance("a".into()));
    std::thread::scope(|scope| {
        let stalled = scope.spawn(|| cads::writeback::drain(&stalling, Duration::from_secs(10)));
        stall.wait_stalled();
        std::thread::sleep(Duration::from_millis(3 * LEASE_MS));
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
