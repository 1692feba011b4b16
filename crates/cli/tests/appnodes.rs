//! `cads bench ... --appnodes 2`: each run phase split over two application processes sharing
//! the CMIs (or, under `--cache sas`, each with its own cache and the SAS core between them) and
//! the data store, their logs validated as one history; a deliberately broken policy run in both
//! processes is caught.

use std::process::{Command, Output};

use cads_testkit::ScratchDir;
use serde_json::Value;
use support::{assert_failed_on_stale_reads, stderr};

mod support;

/// `cads bench bg` on two AppNodes of two threads each, a small graph, short runs, and `more`.
fn bg_on_two_appnodes(more: &[&str]) -> (Output, Vec<Value>) {
    let mut args = vec![
        "bg",
        "--appnodes",
        "2",
        "--threads",
        "4",
        "--members",
        "200",
    ];
    args.extend(["--duration", "700ms"]);
    args.extend(more);
    bench(&args)
}

/// `cads bench ycsb` on two AppNodes of two threads each, 300 records, 600 operations, and
/// `more`.
fn ycsb_on_two_appnodes(more: &[&str]) -> (Output, Vec<Value>) {
    let mut args = vec!["ycsb", "--appnodes", "2", "--threads", "4"];
    args.extend(["--records", "300", "--operations", "600"]);
    args.extend(more);
    bench(&args)
}

/// Runs `cads bench <args> --json FILE`; returns the output and the records.
fn bench(args: &[&str]) -> (Output, Vec<Value>) {
    let dir = ScratchDir::new("cli");
    let json = dir.path().join("runs.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cads"))
        .arg("bench")
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .env("TERM", "dumb")
        .output()
        .expect("run cads");
    let records = std::fs::read_to_string(&json)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    (out, records)
}

/// Every record ran on two AppNodes over all the threads, did work, and found nothing stale or
/// lost.
fn assert_clean_on_two_appnodes(records: &[Value], threads: u64) {
    assert!(!records.is_empty());
    for r in records {
        let what = format!("{} {}", r["benchmark"], r["policy"]);
        assert_eq!(r["appnodes"], 2, "{what}");
        assert_eq!(r["config"]["appnodes"], 2, "{what}");
        assert_eq!(r["threads"], threads, "{what}");
        assert_eq!(r["stale_reads"], 0, "{what}: {}", r["stale_examples"]);
        assert_eq!(r["lost_writes"].as_u64().unwrap_or(0), 0, "{what}");
        assert!(r["throughput"].as_f64().unwrap() > 0.0, "{what}");
        assert!(
            r["reads"].as_u64().unwrap() > 0,
            "{what}: nothing validated"
        );
    }
}

#[test]
fn ycsb_on_two_appnodes_validates_the_merged_history() {
    // Workload D inserts: the two AppNodes' inserts must not take the same key numbers.
    for workload in ["A", "D"] {
        let (out, records) = ycsb_on_two_appnodes(&[
            "--workload",
            workload,
            "--policy",
            "none,write-through,write-back",
        ]);
        assert!(out.status.success(), "{workload}: {}", stderr(&out));
        assert_eq!(records.len(), 3);
        assert_clean_on_two_appnodes(&records, 4);
        for r in &records {
            // The operation budget is split, not run twice.
            let done = r["operations"].as_u64().unwrap() + r["failed"].as_u64().unwrap();
            assert_eq!(done, 600, "{workload} {}", r["policy"]);
        }
        let wb = &records[2]["write_back"];
        assert!(wb["buffered_ops"].as_u64().unwrap() > 0, "{wb}");
    }
}

/// `--cmi-transport unix`: the embedded CMIs serve Unix sockets, and both AppNodes reach them
/// through those, with every read validated.
#[test]
fn ycsb_on_two_appnodes_over_unix_sockets() {
    let (out, records) = ycsb_on_two_appnodes(&[
        "--policy",
        "write-through,write-back",
        "--cmi-transport",
        "unix",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records.len(), 2);
    assert_clean_on_two_appnodes(&records, 4);
    for r in &records {
        assert_eq!(r["config"]["cmi_transport"], "unix", "{}", r["policy"]);
    }
}

/// CPR on two AppNodes: the process that deployed owns the ranges and serves them; both
/// AppNodes forward their scans and writes to it, and every scanned record is validated.
#[test]
fn cpr_on_two_appnodes_forwards_to_the_ranges_owner() {
    let (out, records) = bench(&[
        "ycsb",
        "--appnodes",
        "2",
        "--threads",
        "4",
        "--workload",
        "CPR",
        "--scan-share",
        "0.9",
        "--records",
        "300",
        "--operations",
        "600",
        "--policy",
        "write-around,write-through,write-back",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records.len(), 3);
    assert_clean_on_two_appnodes(&records, 4);
    for r in &records {
        assert_eq!(r["failed"], 0, "{}: {}", r["policy"], r["errors"]);
        let ranges = &r["ranges"];
        assert!(
            ranges["scans"].as_u64().unwrap() > 0,
            "{}: the owner served the AppNodes' scans: {ranges}",
            r["policy"]
        );
    }
    let (out, _) = bench(&[
        "ycsb",
        "--appnodes",
        "2",
        "--workload",
        "CPR",
        "--policy",
        "redis-zindex",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("redis-zindex"), "{}", stderr(&out));
}

#[test]
fn bg_on_two_appnodes_validates_the_merged_history() {
    let (out, records) = bg_on_two_appnodes(&["--policy", "write-around,write-through,write-back"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records.len(), 3);
    assert_clean_on_two_appnodes(&records, 4);
    for r in &records {
        assert_eq!(r["cache_check"]["mismatches"], 0, "{}", r["cache_check"]);
    }
}

#[test]
fn bg_on_two_sas_appnodes_reads_nothing_stale_in_every_mix() {
    // Each AppNode caches in its own memory; a write on one reaches the other's copies through
    // the SAS core before it is acknowledged.
    // The SQL layout's write-through is 001 Table 4 under SAS: counts changed inside profiles.
    for (cache, mix, layout) in [
        ("sas", "90", "documents"),
        ("sas", "99", "documents"),
        ("sas", "99.9", "documents"),
        ("sas:ingest", "99", "documents"),
        ("sas", "99", "sql"),
    ] {
        let (out, records) = bg_on_two_appnodes(&[
            "--cache",
            cache,
            "--layout",
            layout,
            "--workload",
            mix,
            "--policy",
            "write-around,write-through",
        ]);
        assert!(out.status.success(), "{mix}: {}", stderr(&out));
        assert_eq!(records.len(), 2, "{mix}");
        assert_clean_on_two_appnodes(&records, 4);
        for r in &records {
            assert_eq!(r["config"]["cache"], cache, "{mix}");
            assert!(
                r["hit_ratio"].as_f64().is_some_and(|h| h > 0.0),
                "{mix}: {r}"
            );
        }
    }
}

#[test]
fn bg_on_three_sas_appnodes_reads_nothing_stale() {
    let (out, records) = bench(&[
        "bg",
        "--appnodes",
        "3",
        "--threads",
        "6",
        "--members",
        "200",
        "--duration",
        "700ms",
        "--cache",
        "sas:ingest",
        "--workload",
        "90",
        "--policy",
        "write-around,write-through",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(r["appnodes"], 3);
        assert_eq!(r["stale_reads"], 0, "{}", r["stale_examples"]);
        assert_eq!(r["lost_writes"].as_u64().unwrap_or(0), 0);
        assert!(r["reads"].as_u64().unwrap() > 0);
    }
}

#[test]
fn a_broken_policy_on_two_appnodes_is_caught() {
    // Both AppNodes write behind the cache (--broken): the merged history shows stale reads, and
    // the command fails.
    let (out, records) = bg_on_two_appnodes(&["--broken", "--policy", "write-around"]);
    assert_failed_on_stale_reads(&out, "bg 90 write-around #0");
    assert_eq!(records[0]["appnodes"], 2);
    assert!(records[0]["stale_reads"].as_u64().unwrap() > 0);
}

#[test]
fn tpcc_on_two_appnodes_keeps_the_database_consistent() {
    let (out, records) = bench(&[
        "tpcc",
        "--appnodes",
        "2",
        "--threads",
        "4",
        "--warehouses",
        "2",
        "--scale",
        "hundredth",
        "--duration",
        "1s",
        "--policy",
        "write-through,write-back",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records.len(), 2);
    assert_clean_on_two_appnodes(&records, 4);
    for r in &records {
        assert_eq!(r["consistent"], true, "{}", r["consistency"]);
    }
}

#[test]
fn appnodes_need_threads_and_a_search_needs_one_process() {
    for (args, expected) in [
        (&["ycsb", "--appnodes", "0"][..], "--appnodes"),
        (
            &["ycsb", "--appnodes", "3", "--threads", "2"][..],
            "--appnodes",
        ),
        (
            &["bg", "--appnodes", "2", "--soar"][..],
            "--soar runs in one process",
        ),
    ] {
        let (out, _) = bench(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
