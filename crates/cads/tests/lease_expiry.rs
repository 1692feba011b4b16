//! YCSB's records (documents, read several at a time as a scan does) with a writer whose leases
//! expire after validation and before its data-store commit, as happens on a loaded machine when
//! the commit waits (SQLite's single writer, a descheduled thread). The expiry deletes the cached
//! record, and a scan that misses it fills it from the data store as it was before the write. (The
//! same with SQL counters is in `consistency.rs`.)

mod common;

use cads::documents::Collection;
use cads::{Cads, Config, Policy};
use cads_store::{Changes, Document};
use common::{Deployment, LONG_LEASE_MS, PAST_A_LONG_LEASE};

#[test]
fn records_a_scan_filled_after_a_writers_leases_expired_are_not_served_after_the_write() {
    for policy in [Policy::WriteAround, Policy::WriteThrough, Policy::WriteBack] {
        let d = Deployment::start_with(policy, 2, |o| o.lease_ms = Some(LONG_LEASE_MS));
        let cads = d.cads(Config::default());
        let table = Collection::create(&cads, "usertable").unwrap();
        let ids: Vec<String> = (0..5).map(|i| format!("user{i}")).collect();
        let version =
            |v: i64| -> Document { serde_json::from_value(serde_json::json!({ "v": v })).unwrap() };
        for id in &ids {
            d.store.put("usertable", id, &version(0)).unwrap();
        }
        let scan = |cads: &Cads| -> Vec<i64> {
            cads.run(|s| {
                ids.iter()
                    .map(|id| Ok(table.get(s, id)?.unwrap()["v"].as_i64().unwrap()))
                    .collect()
            })
            .unwrap()
        };
        assert_eq!(scan(&cads), vec![0; 5]);

        let changes = Changes::from_json(&serde_json::json!({ "$set": { "v": 1 } })).unwrap();
        let mut writer = cads.session();
        table.update(&mut writer, &ids[2], changes).unwrap();
        writer.pre_commit().unwrap();
        // The writer's leases run out (its thread descheduled that long, say).
        d.cmis.advance_clock(PAST_A_LONG_LEASE);
        // The expiry deleted the cached record; the scan fills it from the data store.
        assert_eq!(scan(&cads), vec![0; 5], "{policy:?}");
        let committed = writer.commit();

        if policy == Policy::WriteBack {
            // The cache commit is what acknowledges a buffered write, and the expiry dropped it
            // everywhere: the write is refused (and may be run again), and nothing of it remains.
            assert!(
                matches!(committed, Err(cads::Error::Aborted { .. })),
                "{committed:?}"
            );
            assert!(cads::writeback::pending(&cads).unwrap().is_empty());
            assert_eq!(scan(&cads), vec![0; 5]);
            let stored = d.store.get("usertable", &ids[2]).unwrap().unwrap();
            assert_eq!(stored["v"], 0);
        } else {
            committed.unwrap();
            assert_eq!(
                scan(&cads),
                vec![0, 0, 1, 0, 0],
                "{policy:?}: the record filled before the data-store commit is still cached"
            );
        }
    }
}
