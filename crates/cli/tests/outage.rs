//! `cads bench ycsb --outage ... --tardis ...` against PostgreSQL through the benchmark's relay,
//! on two AppNodes (Recon, then Contextual): every write acknowledged while the data store was cut off is in it
//! afterwards, nothing read is stale, and the records describe the outage. The relay cuts only the
//! benchmark's connections: the shared server keeps serving everyone else.

use std::process::Command;

use cads_testkit::{ScratchDatabase, ScratchDir};
use serde_json::Value;
use support::stderr;

mod support;

#[test]
fn tardis_on_two_appnodes_with_recon_takes_writes_while_postgres_is_cut_off() {
    two_appnodes_through_an_outage("recon");
}

#[test]
fn tardis_on_two_appnodes_with_contextual_takes_writes_while_postgres_is_cut_off() {
    two_appnodes_through_an_outage("contextual");
}

fn two_appnodes_through_an_outage(appnodes: &str) {
    let Some(db) = ScratchDatabase::postgres() else {
        return;
    };
    let dir = ScratchDir::new("cli-outage");
    let json = dir.path().join("runs.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cads"))
        .args(["bench", "ycsb", "--appnodes", "2", "--threads", "4"])
        .args(["--records", "300", "--workload", "A", "--duration", "4s"])
        .args([
            "--policy",
            "write-through,write-around",
            "--tardis",
            "tardis",
        ])
        .args(["--ar-workers", "2", "--outage", "1s+1500ms"])
        .args(["--tardis-appnodes", appnodes])
        .args(["--store", db.url(), "--json", json.to_str().unwrap()])
        .env("TERM", "dumb")
        .output()
        .expect("run cads");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&json).unwrap();
    let records: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        let what = format!("{} {appnodes}", r["policy"]);
        assert_eq!(r["appnodes"], 2, "{what}");
        assert_eq!(r["stale_reads"], 0, "{what}: {}", r["stale_examples"]);
        assert_eq!(r["lost_writes"].as_u64().unwrap_or(0), 0, "{what}");
        let outage = &r["outage"];
        assert_eq!(outage["tardis"], "tardis", "{what}");
        assert_eq!(outage["appnodes"], appnodes, "{what}");
        assert!(
            outage["at_s"].as_f64().is_some(),
            "{what}: the cut happened"
        );
        assert_eq!(
            outage["writes_refused"], 0,
            "{what}: pinned memory is ample; {outage}; errors: {}",
            r["errors"]
        );
        assert!(
            outage["recovery_s"].as_f64().is_some(),
            "{what}: recovery ended: {outage}"
        );
        assert!(!outage["timeline"].as_array().unwrap().is_empty(), "{what}");
        for error in r["errors"].as_array().unwrap() {
            let error = error.as_str().unwrap();
            assert!(
                error.contains("data store"),
                "{what}: an error the outage does not explain: {error}"
            );
        }
    }
}
