//! The baseline: the same application with `Policy::DataStoreOnly`, so every read and write
//! goes to the data store and the cache is never used.
//!
//! `cargo run -p cads --example data_store_only` starts two cache manager instances (CMIs) inside
//! this process, as the other examples do, opens SQLite in a temporary directory, and runs the
//! same sessions as `write_around` and `write_through`. Only the policy differs: changing that
//! one setting is how an application moves from the data store alone to a cache. A
//! `FaultyStore` in front of SQLite counts the calls it receives, to show where reads go.

use std::sync::Arc;

use cads::documents::Collection;
use cads::{CacheChange, CacheStore, Cads, Config, Policy, StoreTx};
use cads_store::{Changes, DataStore, FaultyStore, StoreError, StoreOptions};
use cads_testkit::{Cmis, ScratchDir};
use serde_json::{json, Value};

/// Page views in the SQL table `views(page, n)`: a read is a page, a write one more view.
struct PageViews;

impl CacheStore for PageViews {
    type Query = String;
    type Write = String;
    type Output = i64;

    // The keys a read needs, and its result from their cached values (unused without a cache).
    fn keys_read(&self, page: &String) -> Vec<Vec<u8>> {
        vec![format!("views:{page}").into_bytes()]
    }
    fn result_from_cache(&self, _: &String, values: &[Vec<u8>]) -> Option<i64> {
        std::str::from_utf8(&values[0]).ok()?.parse().ok()
    }
    // The query, inside the session's transaction: with this policy, every read runs it.
    fn query_store(&self, page: &String, tx: &mut StoreTx<'_>) -> Result<i64, StoreError> {
        let sql = "SELECT n FROM views WHERE page = ?";
        let rows = tx.read_sql()?.query(sql, &[page.as_str().into()])?;
        rows.first().map_or(Ok(0), |row| row.get(0))
    }
    fn entries(&self, page: &String, n: &i64) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(self.keys_read(page).remove(0), n.to_string().into_bytes())]
    }
    // A write: the keys it changes (ignored here), and the SQL that does it.
    fn keys_written(&self, page: &String) -> Vec<Vec<u8>> {
        self.keys_read(page)
    }
    fn write_store(&self, page: &String, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        let sql = "UPDATE views SET n = n + 1 WHERE page = ?";
        tx.sql()?.execute(sql, &[page.as_str().into()]).map(drop)
    }
    fn cache_change(&self, _: &String, _: &[u8]) -> CacheChange {
        CacheChange::Incr(1)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Two CMIs in this process, as for the caching policies; this policy will not use them.
    let policy = Policy::DataStoreOnly;
    //    (The test kit stands in for a deployment here: in production the CMIs are `cads server`
    //    processes and the data store a server of its own.)
    let cmis = Cmis::start(2, policy.cmi_mode());

    // 2. The data store: SQLite in a fresh directory, behind a wrapper that counts its calls.
    let dir = ScratchDir::new("data-store-only");
    let sqlite = dir.sqlite(&StoreOptions::default());
    let counted = FaultyStore::new(sqlite);
    let faults = counted.faults();
    let store: Arc<dyn DataStore> = Arc::new(counted);
    store.execute_batch("CREATE TABLE views (page TEXT PRIMARY KEY, n BIGINT NOT NULL)")?;
    store.execute_batch("INSERT INTO views VALUES ('home', 0)")?;

    // 3. The framework: with this policy it connects to no CMI.
    let cads = Cads::connect(store, cmis.addrs(), policy, Config::default());
    println!("cache in use: {}", cads.cache().is_some());
    let users = Collection::create(&cads, "users")?;
    let alice = json!({"name": "Alice", "visits": 0});
    cads.run(|s| users.insert(s, "alice", alice.as_object().unwrap().clone()))?;
    let show = |doc: Option<_>| doc.map_or(Value::Null, Value::Object).to_string();

    // 4. Two reads of one document: both are data-store reads.
    let reads = faults.reads();
    cads.run(|s| users.get(s, "alice"))?;
    let doc = cads.run(|s| users.get(s, "alice"))?;
    println!(
        "alice: {} ({} data-store reads)",
        show(doc),
        faults.reads() - reads
    );

    // 5. Writes are sessions too: the document update and two page views, each atomic.
    let visit = Changes::from_json(&json!({"$inc": {"visits": 1}}))?;
    cads.run(|s| users.update(s, "alice", visit.clone()))?;
    let doc = cads.run(|s| users.get(s, "alice"))?;
    println!("after an update: {}", show(doc));
    let home = "home".to_string();
    cads.run(|s| {
        s.write(&PageViews, &home)
            .and_then(|()| s.write(&PageViews, &home))
    })?;
    let reads = faults.reads();
    let views = cads.run(|s| s.read(&PageViews, &home))?;
    println!(
        "home: {views} views ({} data-store read)",
        faults.reads() - reads
    );

    Ok(())
}
