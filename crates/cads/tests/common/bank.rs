//! A small bank for write-back Design 2 tests: accounts and ledger entries in SQL, the entries
//! referencing their account (a foreign key), cached as balances, entry lists and a total.

use std::sync::atomic::{AtomicI64, Ordering};

use cads::writeback::APPLIED_SESSIONS;
use cads::{
    CacheChange, CacheStore, Cads, Config, Error, SqlBuffer, Statement, StoreTx, WriteBackConfig,
};
use cads_store::{DataStore, Isolation, SqlValue, StoreError};

/// Which queue a bank session joins.
#[derive(Clone, Copy)]
pub enum Queues {
    /// One per account: sessions of different accounts are applied independently.
    PerAccount,
    /// One for all.
    Single,
}

pub struct Bank {
    pub accounts: String,
    pub entries: String,
    pub queues: Queues,
    /// Whether it folds query result changes into a missed total (it always leaves them).
    pub folds: bool,
}

pub enum Query {
    Balance(String),
    Total,
    Entries(String),
}

pub enum Write {
    Open(String),
    Deposit {
        account: String,
        amount: i64,
        entry: i64,
    },
}

pub fn text(s: &str) -> SqlValue {
    SqlValue::Text(s.to_string())
}

pub fn balance_key(account: &str) -> Vec<u8> {
    format!("bal:{account}").into_bytes()
}

pub fn entries_key(account: &str) -> Vec<u8> {
    format!("entries:{account}").into_bytes()
}

pub const TOTAL: &[u8] = b"total";

impl Bank {
    pub fn new(prefix: &str, queues: Queues) -> Bank {
        Bank {
            accounts: format!("{prefix}_accounts"),
            entries: format!("{prefix}_entries"),
            queues,
            folds: true,
        }
    }

    pub fn create(&self, store: &dyn DataStore) {
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

    pub fn drop_tables(&self, store: &dyn DataStore) {
        let _ = store.execute_batch(&format!(
            "DROP TABLE IF EXISTS {}; DROP TABLE IF EXISTS {}",
            self.entries, self.accounts
        ));
    }

    pub fn account(write: &Write) -> &str {
        match write {
            Write::Open(a) | Write::Deposit { account: a, .. } => a,
        }
    }

    pub fn statements(&self, write: &Write) -> Vec<Statement> {
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
    pub fn stored(&self, store: &dyn DataStore, query: &Query) -> i64 {
        let mut tx = store.begin_read(Isolation::ReadCommitted).unwrap();
        let (sql, params) = self.query_sql(query);
        tx.query(&sql, &params).unwrap()[0].get::<i64>(0).unwrap()
    }

    pub fn query_sql(&self, query: &Query) -> (String, Vec<SqlValue>) {
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

    pub fn applied_sessions(store: &dyn DataStore) -> i64 {
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

pub fn config(batch: usize) -> Config {
    Config {
        write_back: WriteBackConfig {
            replicas: 2,
            batch,
            compact_every: 4,
            ..WriteBackConfig::default()
        },
        ..Config::default()
    }
}

static NEXT_ENTRY: AtomicI64 = AtomicI64::new(1);

pub fn deposit(cads: &Cads, bank: &Bank, account: &str, amount: i64) -> Result<(), Error> {
    let entry = NEXT_ENTRY.fetch_add(1, Ordering::Relaxed);
    let write = Write::Deposit {
        account: account.to_string(),
        amount,
        entry,
    };
    cads.run(|s| s.write(bank, &write))
}

pub fn open_account(cads: &Cads, bank: &Bank, account: &str) {
    cads.run(|s| s.write(bank, &Write::Open(account.to_string())))
        .unwrap();
}

/// After a drain: no session object is left, and no mapping of the bank's keys (the emptied
/// queues and their list stay, pinned and tiny).
pub fn assert_nothing_left(cads: &Cads, accounts: &[&str]) {
    assert_eq!(cads::writeback::pending_sessions(cads).unwrap(), 0);
    let client = cads.cache().unwrap();
    let mut keys = vec![TOTAL.to_vec()];
    for a in accounts {
        keys.push(balance_key(a));
        keys.push(entries_key(a));
    }
    // Every queue named in SQS is empty, where it is kept.
    for cmi in 0..client.cmis() {
        let queues = client
            .execute(cmi, &cads_protocol::Command::Get(b"SQS"))
            .unwrap();
        let cads_protocol::Reply::Bulk(queues) = queues else {
            continue;
        };
        for line in String::from_utf8_lossy(&queues).lines() {
            // The queue's name, before the line's tag.
            let name = line.rsplit_once(' ').map_or(line, |(name, _tag)| name);
            let queue = format!("SQ:{name}");
            let left = client
                .execute(cmi, &cads_protocol::Command::Get(queue.as_bytes()))
                .unwrap();
            let cads_protocol::Reply::Bulk(left) = left else {
                continue;
            };
            assert!(
                left.is_empty(),
                "{queue} still lists sessions: {}",
                String::from_utf8_lossy(&left)
            );
        }
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

pub fn read(cads: &Cads, bank: &Bank, query: &Query) -> i64 {
    cads.run(|s| s.read(bank, query)).unwrap()
}
