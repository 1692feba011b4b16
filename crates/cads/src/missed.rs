//! Which CMIs missed writes of this process while it could not reach them, and how each is
//! repaired once it answers again.
//!
//! A CMI that missed a change to a cached value may hold the old value: until this process has
//! flushed it, reads of its keys go to the data store. What the flush drops depends on what was
//! missed. A missed cached-value write needs only the unpinned entries gone (`FLUSHALL
//! UNPINNED`): the buffered-write replicas there are as current as the other replicas, and
//! dropping them would leave their writes with one copy fewer, so that two such flushes in a row
//! could lose a buffered write whose replicas were on both CMIs. A missed replica write (a write
//! or a delete of a buffered write, a mapping or a list that skipped the CMI) makes the pinned
//! entries suspect too: the CMI may come back with copies older than the other replicas', or of
//! buffered writes applied and deleted meanwhile, so everything goes (`FLUSHALL`).
//!
//! Counting records rather than setting flags keeps a record made while a flush is in flight:
//! the flush covers only the records made before it was sent.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a CMI missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missed {
    /// A change to a cached value (a write-around delete, a write-through set, an invalidation).
    Values,
    /// A change to an entry replicated for write-back (000 §3.3.4).
    Replicas,
}

/// How many records were made and how many a flush has covered since.
#[derive(Default)]
struct Count {
    recorded: AtomicU64,
    flushed: AtomicU64,
}

impl Count {
    fn pending(&self) -> bool {
        self.recorded.load(Ordering::Acquire) != self.flushed.load(Ordering::Acquire)
    }
}

#[derive(Default)]
struct PerCmi {
    values: Count,
    replicas: Count,
}

/// The record of missed writes, per CMI.
pub(crate) struct MissedWrites {
    cmis: Vec<PerCmi>,
}

/// The flush a missed CMI needs, and the records it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Repair {
    /// Only unpinned entries go: the CMI missed no replica write.
    pub unpinned: bool,
    values_through: u64,
    replicas_through: u64,
}

impl MissedWrites {
    pub fn new(cmis: usize) -> MissedWrites {
        MissedWrites {
            cmis: (0..cmis).map(|_| PerCmi::default()).collect(),
        }
    }

    /// Records that CMI `cmi` missed a write of this kind.
    pub fn record(&self, cmi: usize, missed: Missed) {
        if let Some(per) = self.cmis.get(cmi) {
            let count = match missed {
                Missed::Values => &per.values,
                Missed::Replicas => &per.replicas,
            };
            count.recorded.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether CMI `cmi` missed writes it has not been flushed for since.
    pub fn is_missed(&self, cmi: usize) -> bool {
        self.cmis
            .get(cmi)
            .is_some_and(|per| per.values.pending() || per.replicas.pending())
    }

    pub fn any(&self) -> bool {
        (0..self.cmis.len()).any(|cmi| self.is_missed(cmi))
    }

    /// The flush CMI `cmi` needs now, if it missed anything.
    pub fn repair(&self, cmi: usize) -> Option<Repair> {
        let per = self.cmis.get(cmi)?;
        // Records made after these loads are not covered by this flush: they stay pending.
        let repair = Repair {
            unpinned: !per.replicas.pending(),
            values_through: per.values.recorded.load(Ordering::Acquire),
            replicas_through: per.replicas.recorded.load(Ordering::Acquire),
        };
        self.is_missed(cmi).then_some(repair)
    }

    /// Notes that `repair`'s flush of CMI `cmi` succeeded.
    pub fn repaired(&self, cmi: usize, repair: Repair) {
        let per = &self.cmis[cmi];
        per.values
            .flushed
            .fetch_max(repair.values_through, Ordering::AcqRel);
        if !repair.unpinned {
            per.replicas
                .flushed
                .fetch_max(repair.replicas_through, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_value_write_needs_only_the_unpinned_entries_flushed() {
        let missed = MissedWrites::new(2);
        assert!(!missed.any());
        assert_eq!(missed.repair(0), None);
        missed.record(0, Missed::Values);
        assert!(missed.is_missed(0) && !missed.is_missed(1));
        let repair = missed.repair(0).unwrap();
        assert!(repair.unpinned);
        missed.repaired(0, repair);
        assert!(!missed.any());
    }

    #[test]
    fn a_missed_replica_write_needs_everything_flushed_and_covers_value_writes() {
        let missed = MissedWrites::new(1);
        missed.record(0, Missed::Values);
        missed.record(0, Missed::Replicas);
        let repair = missed.repair(0).unwrap();
        assert!(!repair.unpinned);
        missed.repaired(0, repair);
        assert!(!missed.is_missed(0));
    }

    #[test]
    fn a_replica_write_recorded_during_an_unpinned_flush_stays_pending() {
        let missed = MissedWrites::new(1);
        missed.record(0, Missed::Values);
        let repair = missed.repair(0).unwrap();
        // Sent before the flush, seen after it: the flush may have preceded the missed write.
        missed.record(0, Missed::Replicas);
        missed.repaired(0, repair);
        assert!(missed.is_missed(0));
        assert!(!missed.repair(0).unwrap().unpinned);
    }

    #[test]
    fn a_value_write_recorded_during_a_flush_stays_pending() {
        let missed = MissedWrites::new(1);
        missed.record(0, Missed::Values);
        let unpinned = missed.repair(0).unwrap();
        missed.record(0, Missed::Values);
        missed.repaired(0, unpinned);
        assert!(
            missed.is_missed(0),
            "the second value write is still to flush"
        );
    }

    /// Write-back with R = 2 over two in-process CMIs, no workers running: a buffered write has
    /// a replica on each CMI. Both CMIs miss cached-value writes and are flushed one after the
    /// other; the buffered write must survive both flushes and reach the data store.
    #[test]
    fn flushing_cmis_that_missed_value_writes_keeps_buffered_writes() {
        use std::time::Duration;

        use cads_store::{Changes, StoreOptions};
        use cads_testkit::{Cmis, ScratchDir};
        use serde_json::json;

        use crate::documents::Collection;
        use crate::{Cads, Config, Policy, WriteBackConfig};

        let dir = ScratchDir::new("missed");
        let store = dir.sqlite(&StoreOptions::default());
        let cmis = Cmis::start(2, Policy::WriteBack.cmi_mode());
        let config = Config {
            write_back: WriteBackConfig {
                replicas: 2,
                ..WriteBackConfig::default()
            },
            ..Config::default()
        };
        let cads = Cads::connect(store.clone(), cmis.addrs(), Policy::WriteBack, config);
        let docs = Collection::create(&cads, "tallies").unwrap();
        store
            .put("tallies", "d", json!({"n": 0}).as_object().unwrap())
            .unwrap();
        docs.read(&cads, "d").unwrap(); // cached
        let set = Changes::from_json(&json!({"$set": {"n": 1}})).unwrap();
        cads.run(|s| docs.update(s, "d", set.clone())).unwrap();

        let client = cads.cache().unwrap();
        let value_key = docs.key("d");
        let value_cmi = client.route(&value_key);
        let buffered = crate::writeback::bw_key(&docs.doc_ref("d"));
        let holds = |cmi: usize, key: &[u8]| client.get_from(cmi, key).unwrap().is_some();
        assert!(
            holds(value_cmi, &value_key),
            "the write changed the cached value"
        );
        for cmi in 0..2 {
            cads.missed_cmi(cmi, Missed::Values);
            assert_eq!(cads.flush_missed_cmis(), 1);
            assert!(!cads.is_missed(cmi));
            assert!(holds(cmi, &buffered), "CMI {cmi} kept its replica");
        }
        assert!(!holds(value_cmi, &value_key), "the cached value went");

        // A missed replica write empties the CMI; the other replica remains.
        cads.missed_cmi(1, Missed::Replicas);
        assert_eq!(cads.flush_missed_cmis(), 1);
        assert!(!holds(1, &buffered) && holds(0, &buffered));

        crate::writeback::drain(&cads, Duration::from_secs(10)).unwrap();
        assert_eq!(store.get("tallies", "d").unwrap().unwrap()["n"], json!(1));
    }

    /// Write-back: a session that read a key of a CMI that missed writes read it from the data
    /// store without a lease, so that a writer could change it unseen before this session's
    /// writes are buffered (and no data-store transaction orders buffered writes): it must not
    /// write. (The CMI is recorded missed inside each run of the session, after the flush a
    /// session's start may do.) A read-only one reads, and once the CMI is flushed the same
    /// session writes.
    #[test]
    fn a_write_back_session_that_read_a_missed_cmi_writes_nothing() {
        use cads_client::ClientError;
        use cads_store::{Changes, StoreOptions};
        use cads_testkit::{Cmis, ScratchDir};
        use serde_json::json;

        use crate::documents::Collection;
        use crate::{Cads, Config, Error, Policy, Session};

        let dir = ScratchDir::new("missed-read");
        let store = dir.sqlite(&StoreOptions::default());
        let cmis = Cmis::start(2, Policy::WriteBack.cmi_mode());
        let cads = Cads::connect(
            store.clone(),
            cmis.addrs(),
            Policy::WriteBack,
            Config::default(),
        );
        let docs = Collection::create(&cads, "tallies").unwrap();
        store
            .put("tallies", "d", json!({"n": 0}).as_object().unwrap())
            .unwrap();
        docs.read(&cads, "d").unwrap(); // cached
        let cmi = cads.cache().unwrap().route(&docs.key("d"));
        let count = |s: &mut Session<'_>| -> crate::Result<i64> {
            Ok(docs.get(s, "d")?.expect("the document")["n"]
                .as_i64()
                .unwrap())
        };
        let increment = |s: &mut Session<'_>| {
            let n = count(s)?;
            docs.update(
                s,
                "d",
                Changes::from_json(&json!({"$set": {"n": n + 1}})).unwrap(),
            )
        };

        let refused = cads.run(|s| {
            cads.missed_cmi(cmi, Missed::Values);
            increment(s)
        });
        assert!(
            matches!(refused, Err(Error::Cache(ClientError::Unavailable { .. }))),
            "{refused:?}"
        );
        assert!(!crate::writeback::design1::has_buffered(&cads, &docs.doc_ref("d")).unwrap());
        let read = cads.run(|s| {
            cads.missed_cmi(cmi, Missed::Values);
            count(s)
        });
        assert_eq!(read.unwrap(), 0);

        cads.flush_missed_cmis();
        cads.run(increment).unwrap();
        crate::writeback::drain(&cads, std::time::Duration::from_secs(10)).unwrap();
        assert_eq!(store.get("tallies", "d").unwrap().unwrap()["n"], json!(1));
    }
}
