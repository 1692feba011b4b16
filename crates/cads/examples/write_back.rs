//! Write-back: writes are acknowledged once the cache holds them; workers apply them later.
//!
//! `cargo run -p cads --example write_back` starts three cache manager instances (CMIs) inside
//! this process and opens SQLite in a temporary directory. A `counters` collection is updated
//! with `$inc` and `$push`, which are not idempotent, by sessions that never touch SQLite:
//!
//! - each write is buffered as `BW:<doc>` pinned on R = 3 CMIs (so losing one CMI loses
//!   nothing) and listed in PendingWrites, and the cached document changes in the same session;
//! - reads see every acknowledged write at once, from the cache, even while SQLite lags;
//! - background workers apply the buffered writes, each exactly once, in the order they were made;
//! - a drain (what a clean shutdown does) applies whatever is left.

use std::sync::Arc;
use std::time::Duration;

use cads::documents::Collection;
use cads::writeback::{pending, Workers};
use cads::{Cads, Config, Policy};
use cads_store::{Changes, StoreOptions};
use cads_testkit::{Cmis, ScratchDir};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Three CMIs in this process, in the policy's lease mode, on free loopback ports.
    let policy = Policy::WriteBack;
    //    (The test kit stands in for a deployment here: in production the CMIs are `cads server`
    //    processes and the data store a server of its own.)
    let cmis = Cmis::start(3, policy.cmi_mode());

    // 2. SQLite in a fresh directory, and the framework over both.
    let dir = ScratchDir::new("write-back");
    let store = dir.sqlite(&StoreOptions::default());
    let cads = Arc::new(Cads::connect(
        store,
        cmis.addrs(),
        policy,
        Config::default(),
    ));
    let counters = Collection::create(&cads, "counters")?;
    let start = json!({"hits": 0, "log": []});
    cads.run(|s| counters.insert(s, "home", start.as_object().unwrap().clone()))?;

    // 3. Ten writes, acknowledged by the cache alone: no worker runs yet.
    for i in 0..10 {
        let change = Changes::from_json(&json!({"$inc": {"hits": 1}, "$push": {"log": i}}))?;
        cads.run(|s| counters.update(s, "home", change.clone()))?;
    }
    // The insert is buffered too, so SQLite may not even have the row yet.
    let cached = cads.run(|s| counters.get(s, "home"))?;
    let stored = cads.store().get("counters", "home")?;
    let hits = |doc: &Option<cads_store::Document>| {
        doc.as_ref()
            .and_then(|d| d.get("hits").cloned())
            .map_or("(no row yet)".to_string(), |h| h.to_string())
    };
    println!("read through cads: hits = {}", hits(&cached));
    println!(
        "SQLite so far:     hits = {} ({} document(s) with buffered writes)",
        hits(&stored),
        pending(&cads)?.len()
    );

    // 4. Background workers apply the buffered writes; the drain waits until none is left.
    let workers = Workers::start(cads.clone(), 2);
    workers.drain(Duration::from_secs(10))?;
    workers.stop();
    let stored = cads.store().get("counters", "home")?.unwrap_or_default();
    println!(
        "SQLite after the drain: {}",
        serde_json::Value::Object(stored)
    );

    Ok(())
}
