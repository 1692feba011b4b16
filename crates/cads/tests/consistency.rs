//! Thousands of randomized concurrent sessions whose every read is checked, and writes whose cache
//! commit is lost. The read-write race of 001 §3.3 and the thundering herd are in `races.rs`.

mod common;

use std::sync::Mutex;
use std::time::Instant;

use cads::{Config, Policy};
use common::{
    counter_key, on_cmi, sessions_expired, Counters, Deployment, History, LONG_LEASE_MS,
    PAST_A_LONG_LEASE,
};

/// Thousands of sessions from many threads over counters on two CMIs: single reads, single
/// increments, and sessions that read two counters and increment both (on different CMIs). Every
/// read must fit the increments that finished before it began and those begun before it ended,
/// and at the end the cache must agree with the data store.
#[test]
fn randomized_concurrent_sessions_never_read_a_stale_value() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        let names = d.counters(6);
        let cads = d.cads(Config::default());
        let history = Mutex::new(History::default());
        let threads = 8;
        let sessions = 300;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let (cads, names, history) = (&cads, &names, &history);
                scope.spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                    let mut next = || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    for _ in 0..sessions {
                        let a = names[(next() % names.len() as u64) as usize].clone();
                        let b = names[(next() % names.len() as u64) as usize].clone();
                        let start = Instant::now();
                        match next() % 10 {
                            0..=5 => {
                                let v = cads.run(|s| s.read(&Counters, &a)).unwrap();
                                history
                                    .lock()
                                    .unwrap()
                                    .reads
                                    .push((a, start, Instant::now(), v));
                            }
                            6..=7 => {
                                cads.run(|s| s.write(&Counters, &a)).unwrap();
                                history
                                    .lock()
                                    .unwrap()
                                    .writes
                                    .push((a, start, Instant::now()));
                            }
                            _ if a != b => {
                                let (va, vb) = cads
                                    .run(|s| {
                                        let va = s.read(&Counters, &a)?;
                                        let vb = s.read(&Counters, &b)?;
                                        s.write(&Counters, &a)?;
                                        s.write(&Counters, &b)?;
                                        Ok((va, vb))
                                    })
                                    .unwrap();
                                let end = Instant::now();
                                let mut h = history.lock().unwrap();
                                h.reads.push((a.clone(), start, end, va));
                                h.reads.push((b.clone(), start, end, vb));
                                h.writes.push((a, start, end));
                                h.writes.push((b, start, end));
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        let history = history.into_inner().unwrap();
        let stale = history.stale_reads();
        assert!(
            stale.is_empty(),
            "{policy:?}: {} stale reads of {}: {:?}",
            stale.len(),
            history.reads.len(),
            &stale[..stale.len().min(10)]
        );
        let client = cads.cache().unwrap();
        for name in &names {
            let stored = d.stored(name);
            let writes = history.writes.iter().filter(|(n, _, _)| n == name).count() as i64;
            assert_eq!(
                stored, writes,
                "every acknowledged increment of {name} is stored once"
            );
            if let Some(v) = client.get(&counter_key(name)).unwrap() {
                let cached: i64 = String::from_utf8(v).unwrap().parse().unwrap();
                assert_eq!(
                    cached, stored,
                    "{policy:?}: cached {name} differs from the data store"
                );
            }
        }
        assert!(history.reads.len() > 1000, "enough reads were checked");
    }
}

/// A session writing counters on two CMIs, aborted on one of them (a validated reader holds a
/// golden lease there): neither the data store nor either CMI shows any of its writes.
#[test]
fn a_session_aborted_on_one_cmi_commits_nowhere() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        // Keys are placed by the CMIs' addresses, which change from run to run: with 64
        // counters, both CMIs hold some (8 left one of them none about once in 128 runs).
        let names = d.counters(64);
        let cads = d.cads(Config::default());
        let client = cads.cache().unwrap();
        let (a, b) = (
            on_cmi(&cads, &names, counter_key, 0),
            on_cmi(&cads, &names, counter_key, 1),
        );
        for n in [&a, &b] {
            assert_eq!(cads.run(|s| s.read(&Counters, n)).unwrap(), 0);
        }
        let mut reader = client.session();
        reader.get(&counter_key(&b), false).unwrap();
        reader.validate().unwrap();
        let mut s = cads.session();
        s.write(&Counters, &a).unwrap();
        s.write(&Counters, &b).unwrap();
        let outcome = s.commit();
        assert!(
            matches!(outcome, Err(cads::Error::Aborted { .. })),
            "{policy:?}: {outcome:?}"
        );
        reader.commit().unwrap();
        assert_eq!(
            (d.stored(&a), d.stored(&b)),
            (0, 0),
            "{policy:?}: the data store rolled back"
        );
        for n in [&a, &b] {
            let cached = client.get(&counter_key(n)).unwrap();
            assert_eq!(
                cached.as_deref(),
                Some(&b"0"[..]),
                "{policy:?}: {n} untouched in the cache"
            );
        }
    }
}

/// A write whose leases expire between validation and the cache commit: the data store has
/// committed, so the session succeeds (once: it is not re-run), and the expired leases took the
/// stale cached value with them.
#[test]
fn a_cache_commit_lost_after_the_data_store_commit_is_not_retried() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start_with(policy, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
        d.counters(1);
        let cads = d.cads(Config::default());
        let c0 = "c0".to_string();
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
        let mut attempts = 0;
        cads.run(|s| {
            attempts += 1;
            s.write(&Counters, &c0)?;
            s.pre_commit()?;
            d.cmis.advance_clock(PAST_A_LONG_LEASE);
            Ok(())
        })
        .unwrap();
        assert!(
            sessions_expired(&cads) > 0,
            "{policy:?}: the leases ran out"
        );
        assert_eq!(attempts, 1, "{policy:?}: not re-run");
        assert_eq!(d.stored("c0"), 1, "{policy:?}: applied once");
        assert_eq!(
            cads.run(|s| s.read(&Counters, &c0)).unwrap(),
            1,
            "{policy:?}: no stale value"
        );
    }
}

/// The same window when the writer cannot invalidate: a validated (golden) reader holds the key
/// with the old value staged, longer than the writer's retry budget. The writer gives up, counts
/// it, and marks the key's CMI missed: this process reads the key from the data store until it
/// flushes that CMI, and after the flush nothing stale is left cached.
#[test]
fn an_invalidation_that_gives_up_never_serves_the_old_value() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        // The reader's lease must outlive the writer's commits and its whole invalidation.
        let d = Deployment::start_with(policy, 2, |o| o.lease_ms = Some(1000));
        d.counters(1);
        let mut config = Config::default();
        config.retry.budget = std::time::Duration::from_millis(20);
        let cads = d.cads(config);
        let client = cads.cache().unwrap();
        let c0 = "c0".to_string();
        let key = counter_key(&c0);
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
        let mut blocker = None;
        cads.run(|s| {
            s.write(&Counters, &c0)?;
            s.pre_commit()?;
            std::thread::sleep(std::time::Duration::from_millis(1200));
            // The writer's leases expired and the CMI deleted the key. A reader misses, fills
            // the old value it read from the data store, and validates: its lease is golden.
            let mut reader = client.session();
            assert_eq!(reader.get(&key, false).unwrap(), None);
            reader.set(&key, b"0", false).unwrap();
            reader.validate().unwrap();
            blocker = Some(reader);
            Ok(())
        })
        .unwrap();
        assert_eq!(cads.invalidations_failed(), 1, "{policy:?}");
        blocker.take().unwrap().commit().unwrap();
        assert_eq!(client.get(&key).unwrap(), Some(b"0".to_vec()), "{policy:?}");
        assert_eq!(d.stored("c0"), 1);
        assert_eq!(
            cads.run(|s| s.read(&Counters, &c0)).unwrap(),
            1,
            "{policy:?}"
        );
        assert_eq!(cads.read(&Counters, &c0).unwrap(), 1, "{policy:?}");
        // The reads above may have flushed it already (sessions do every 500 ms) and cached the
        // new value; the old one is gone either way.
        cads.flush_missed_cmis();
        assert_ne!(client.get(&key).unwrap(), Some(b"0".to_vec()), "{policy:?}");
        assert_eq!(cads.read(&Counters, &c0).unwrap(), 1, "{policy:?}");
        assert_eq!(cads.read(&Counters, &c0).unwrap(), 1, "{policy:?}: a hit");
    }
}

/// The same lost cache commit, with a reader in the window: the writer's leases expire (the CMI
/// deletes the key), a reader misses and queries the data store before the writer's data-store
/// commit, and fills the old value. The writer must then invalidate the key under exclusive
/// leases after its data-store commit, or the old value stays cached for good.
#[test]
fn a_reader_filling_after_a_lost_cache_commit_leaves_no_stale_value() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start_with(policy, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
        d.counters(1);
        let cads = d.cads(Config::default());
        let c0 = "c0".to_string();
        assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
        cads.run(|s| {
            s.write(&Counters, &c0)?;
            s.pre_commit()?;
            d.cmis.advance_clock(PAST_A_LONG_LEASE);
            // The writer's leases are gone; its data-store transaction is not committed yet.
            assert_eq!(cads.run(|r| r.read(&Counters, &c0)).unwrap(), 0);
            Ok(())
        })
        .unwrap();
        assert_eq!(d.stored("c0"), 1, "{policy:?}: applied once");
        assert_eq!(
            cads.run(|s| s.read(&Counters, &c0)).unwrap(),
            1,
            "{policy:?}: no stale value"
        );
    }
}

/// A session that wrote (its data-store transaction's snapshot is then fixed) still reads: a miss
/// after its write queries the data store in that transaction and sees the write.
#[test]
fn a_session_reads_what_it_missed_after_writing() {
    for policy in [Policy::WriteAround, Policy::WriteThrough] {
        let d = Deployment::start(policy);
        d.counters(2);
        let cads = d.cads(Config::default());
        let (c0, c1) = ("c0".to_string(), "c1".to_string());
        let mut s = cads.session();
        s.write(&Counters, &c0).unwrap();
        assert_eq!(s.read(&Counters, &c1).unwrap(), 0, "{policy:?}");
        assert_eq!(s.read(&Counters, &c0).unwrap(), 1, "{policy:?}");
        s.commit().unwrap();
        assert_eq!((d.stored("c0"), d.stored("c1")), (1, 0));
    }
}

/// Cache-aside, the baseline without leases, still deletes the keys a write changes once the
/// data store has committed it: a read after the write (with no race) sees it.
#[test]
fn cache_aside_deletes_what_it_writes() {
    let d = Deployment::start(Policy::CacheAside);
    d.counters(1);
    let cads = d.cads(Config::default());
    let c0 = "c0".to_string();
    assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 0);
    cads.run(|s| s.write(&Counters, &c0)).unwrap();
    assert_eq!(cads.cache().unwrap().get(&counter_key("c0")).unwrap(), None);
    assert_eq!(cads.run(|s| s.read(&Counters, &c0)).unwrap(), 1);
}
