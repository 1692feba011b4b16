//! Write-around: reads fill the cache, writes delete what they make stale.
//!
//! `cargo run -p cads --example write_around` starts two cache manager instances (CMIs) inside
//! this process, opens SQLite in a temporary directory, and uses both ways to describe data:
//!
//! - the document layer: a `users` collection, cached one entry per document (`users:<id>`);
//! - a `CacheStore` of your own: page views in a SQL table, cached under `views:<page>`.
//!
//! A write deletes the cached entries it changes, under a lease that keeps concurrent readers
//! from putting an old value back; the next read refills them from the data store.

use cads::documents::Collection;
use cads::{CacheChange, CacheStore, Cads, Config, Policy, StoreTx};
use cads_store::{Changes, StoreError, StoreOptions};
use cads_testkit::{Cmis, ScratchDir};
use serde_json::{json, Value};

/// Page views in the SQL table `views(page, n)`: a read is a page, a write one more view.
struct PageViews;

impl CacheStore for PageViews {
    type Query = String;
    type Write = String;
    type Output = i64;

    // The keys a read needs, and its result from their cached values.
    fn keys_read(&self, page: &String) -> Vec<Vec<u8>> {
        vec![format!("views:{page}").into_bytes()]
    }
    fn result_from_cache(&self, _: &String, values: &[Vec<u8>]) -> Option<i64> {
        std::str::from_utf8(&values[0]).ok()?.parse().ok()
    }
    // On a miss: the query (in the session's transaction), then the entries to cache.
    fn query_store(&self, page: &String, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
        let sql = "SELECT n FROM views WHERE page = ?";
        let rows = tx.read_sql()?.query(sql, &[page.as_str().into()])?;
        rows.first().map_or(Ok(0), |row| row.get(0))
    }
    fn entries(&self, page: &String, n: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(self.keys_read(page).remove(0), n.to_string().into_bytes())]
    }
    // A write: the keys it makes stale, and the SQL that does it.
    fn keys_written(&self, page: &String) -> Vec<Vec<u8>> {
        self.keys_read(page)
    }
    fn write_store(&self, page: &String, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        let sql = "UPDATE views SET n = n + 1 WHERE page = ?";
        tx.sql()?.execute(sql, &[page.as_str().into()]).map(drop)
    }
    // Only write-through asks how a write changes a cached value.
    fn cache_change(&self, _: &String, _: &[u8]) -> CacheChange {
        CacheChange::Incr(1)
    }
}

/// Cache hits so far, summed over the CMIs (`keyspace_hits` in their INFO).
fn hits(cads: &Cads) -> u64 {
    let stats = cads.cmi_stats().expect("the CMIs answer INFO");
    stats.iter().map(|s| s.keyspace_hits).sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Two CMIs in this process, in the policy's lease mode, on free loopback ports.
    let policy = Policy::WriteAround;
    //    (The test kit stands in for a deployment here: in production the CMIs are `cads server`
    //    processes and the data store a server of its own.)
    let cmis = Cmis::start(2, policy.cmi_mode());

    // 2. The data store: SQLite in a fresh directory, with the table of PageViews.
    let dir = ScratchDir::new("write-around");
    let store = dir.sqlite(&StoreOptions::default());
    store.execute_batch("CREATE TABLE views (page TEXT PRIMARY KEY, n BIGINT NOT NULL)")?;
    store.execute_batch("INSERT INTO views VALUES ('home', 0)")?;

    // 3. The framework over both. A session is a closure that `run` commits, or runs again if
    //    a lease conflict with a concurrent session aborted it.
    let cads = Cads::connect(store, cmis.addrs(), policy, Config::default());
    let users = Collection::create(&cads, "users")?;
    let alice = json!({"name": "Alice", "visits": 0});
    cads.run(|s| users.insert(s, "alice", alice.as_object().unwrap().clone()))?;
    let show = |doc: Option<_>| doc.map_or(Value::Null, Value::Object).to_string();

    cads.run(|s| users.get(s, "alice"))?; // a miss: read from SQLite, then cached
    let before = hits(&cads);
    let doc = cads.run(|s| users.get(s, "alice"))?; // a hit: SQLite is not asked
    println!("alice: {} ({} cache hit)", show(doc), hits(&cads) - before);

    // 4. A write updates SQLite and deletes the cached document, in one atomic session.
    let visit = Changes::from_json(&json!({"$inc": {"visits": 1}}))?;
    cads.run(|s| users.update(s, "alice", visit.clone()))?;
    let cached = cads.cache().unwrap().get(&users.key("alice"))?;
    println!(
        "after an update, users:alice is cached: {}",
        cached.is_some()
    );
    let doc = cads.run(|s| users.get(s, "alice"))?;
    println!("the next read refills it: {}", show(doc));

    // 5. The hand-written CacheStore; one session may use several of them.
    let home = "home".to_string();
    cads.run(|s| s.read(&PageViews, &home))?; // caches views:home = 0
    cads.run(|s| {
        s.write(&PageViews, &home)
            .and_then(|()| s.write(&PageViews, &home))
    })?;
    let before = hits(&cads);
    let views = cads.run(|s| s.read(&PageViews, &home))?;
    println!(
        "home: {views} views after two writes ({} hits: refilled from SQLite)",
        hits(&cads) - before
    );

    Ok(())
}
