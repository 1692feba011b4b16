//! The read-write race of 001 §3.3 with and without leases, and the thundering herd, each made to
//! happen by holding readers between their data-store query and their cache fill (cads'
//! failpoints).
//!
//! Failpoints are process-wide, so every test here holds the failpoint scenario (they run one at
//! a time) and no test of another file sees them.

mod common;

use std::sync::{Arc, Barrier};

use cads::{Cads, Config, Policy};
use cads_testkit::failpoints::{Scenario, FILL, LEASES_OFF};
use common::{counter_key, hold_first_fill, Counters, Deployment};

/// The interleaving of 001 §3.3: a reader misses and queries the data store; a writer updates the
/// data store and the cache; then the reader fills the cache with what it read.
/// `leases_off`: sessions run without leases (the failpoint), whatever the policy. Returns what
/// the cache holds after, what the data store holds, and what the read returned.
fn race(policy: Policy, leases_off: bool) -> (Option<i64>, i64, i64) {
    let scenario = Scenario::setup();
    if leases_off {
        scenario.set(LEASES_OFF, "return");
    }
    let d = Deployment::start(policy);
    d.counters(1);
    let (queried, go) = hold_first_fill(&scenario);
    let reader = d.cads(Config::default());
    let writer = d.cads(Config::default());
    let read = std::thread::scope(|scope| {
        let read = scope.spawn(|| {
            reader
                .run(|s| s.read(&Counters, &"c0".to_string()))
                .unwrap()
        });
        queried.recv().unwrap();
        writer
            .run(|s| s.write(&Counters, &"c0".to_string()))
            .unwrap();
        go.send(()).unwrap();
        read.join().unwrap()
    });
    let cached = reader
        .cache()
        .unwrap()
        .get(&counter_key("c0"))
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap().parse().unwrap());
    (cached, d.stored("c0"), read)
}

#[test]
fn without_leases_the_race_leaves_a_stale_value_in_the_cache() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let (cached, stored, _) = race(policy, true);
        assert_eq!(stored, 1);
        assert_eq!(
            cached,
            Some(0),
            "{policy:?}: the reader cached what it read before the write"
        );
    }
}

/// The cache-aside policy is that broken baseline as a setting, for the benchmarks to compare
/// against: no failpoint turns its leases off, it has none.
#[test]
fn cache_aside_leaves_the_same_stale_value() {
    let (cached, stored, _) = race(Policy::CacheAside, false);
    assert_eq!(stored, 1);
    assert_eq!(
        cached,
        Some(0),
        "the reader cached what it read before the write"
    );
}

#[test]
fn with_leases_the_same_race_leaves_the_cache_consistent() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let (cached, stored, read) = race(policy, false);
        assert_eq!(stored, 1);
        assert!(
            cached.is_none() || cached == Some(1),
            "{policy:?}: cache holds {cached:?}, the data store 1"
        );
        // The writer's lease voided the reader's: its fill is refused with an abort, and the
        // session runs again (it does not go on without the cache, as if the CMI were gone).
        assert_eq!(read, 1, "{policy:?}: the reader ran again");
    }
}

#[test]
fn concurrent_misses_on_one_key_query_the_data_store_once() {
    let scenario = Scenario::setup();
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        // Long leases: on a loaded machine the filler's 500 ms default could run out while it
        // lingers, and a second reader would then rightly query the data store too.
        let d = Deployment::start_with(policy, 2, |o| o.lease_ms = Some(10_000));
        d.counters(1);
        let threads = 24;
        let barrier = Barrier::new(threads);
        // The filler lingers so that every other reader arrives while the key is being filled.
        scenario.set(FILL, "sleep(100)");
        let cads = d.cads(Config::default());
        d.faults.reset_counts();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    barrier.wait();
                    let v = cads.run(|s| s.read(&Counters, &"c0".to_string())).unwrap();
                    assert_eq!(v, 0);
                });
            }
        });
        let queries = d.faults.counts().reads;
        assert_eq!(
            queries, 1,
            "{policy:?}: {threads} concurrent misses, {queries} queries"
        );
    }
}

/// A fill that finds its CMI gone (cut between the miss's data-store query and the fill) is
/// dropped, not returned as an error: the read returns the data store's value at its first try,
/// and the session goes on without the cache (so that under write-back it would write nothing).
#[test]
fn a_read_whose_cmi_goes_away_before_the_fill_returns_the_data_stores_value() {
    let scenario = Scenario::setup();
    let d = Deployment::start(Policy::WriteThrough);
    let name = d.counters(1).remove(0);
    let (client, relays) = d.relayed_client();
    let cmi = client.route(&counter_key(&name));
    let cads = Cads::new(
        d.store.clone(),
        Some(client),
        Policy::WriteThrough,
        Config::default(),
    );
    let relays = Arc::new(relays);
    let cut = relays.clone();
    scenario.on(FILL, move || cut[cmi].set_cut(true));
    let mut tries = 0;
    let (value, degraded) = cads
        .run(|s| {
            tries += 1;
            let value = s.read(&Counters, &name)?;
            Ok((value, s.degraded()))
        })
        .unwrap();
    scenario.clear(FILL);
    relays[cmi].set_cut(false);
    assert_eq!((value, degraded, tries), (0, true, 1));
}
