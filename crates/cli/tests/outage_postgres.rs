//! `cads bench ycsb --appnodes 2 --tardis tardis` against a PostgreSQL of the test's own that is
//! stopped (fast shutdown, then started again) or frozen (SIGSTOP of the postmaster and its
//! backends, then SIGCONT) for a few seconds in the middle of each run phase, under write-through
//! and write-around, with Recon and with Contextual keeping the two AppNode processes consistent.
//! Nothing cuts the connections for the benchmark: the AppNodes find the server gone by
//! themselves. Every acknowledged write is in the data store afterwards (the benchmark's
//! validation), no read was stale, and each AppNode recovered.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cads_testkit::{PrivatePostgres, ScratchDir};
use serde_json::Value;

#[derive(Clone, Copy, Debug)]
enum Fault {
    Stop,
    Freeze,
}

/// How long the server stays away: well past the benchmark's 1 s data-store timeout.
const AWAY: Duration = Duration::from_secs(3);

/// Runs `cads bench <args> --store <pg> --json <json>`, with `fault` on the server for [`AWAY`]
/// from each run phase's first progress line (a second into it); returns how the benchmark
/// exited, what it printed, and how many faults it went through.
fn bench_through_faults(
    pg: &Arc<PrivatePostgres>,
    fault: Fault,
    args: &[&str],
    json: &std::path::Path,
) -> (std::process::ExitStatus, String, usize) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cads"))
        .arg("bench")
        .args(args)
        .args(["--store", &pg.url(), "--json", json.to_str().unwrap()])
        .env("TERM", "dumb")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cads");
    let mut log = String::new();
    let mut faulted: Vec<String> = Vec::new();
    let mut faults = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((run, _)) = line.split_once("] run ") {
            if !faulted.iter().any(|r| r == run) {
                faulted.push(run.to_string());
                let pg = pg.clone();
                faults.push(std::thread::spawn(move || match fault {
                    Fault::Stop => {
                        pg.stop();
                        std::thread::sleep(AWAY);
                        pg.start_again();
                    }
                    Fault::Freeze => {
                        pg.freeze();
                        std::thread::sleep(AWAY);
                        pg.thaw();
                    }
                }));
            }
        }
        log.push_str(&line);
        log.push('\n');
    }
    let status = child.wait().unwrap();
    for f in faults {
        f.join().unwrap();
    }
    (status, log, faulted.len())
}

fn two_appnodes_through(fault: Fault, appnodes: &str) {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let pg = Arc::new(pg);
    let dir = ScratchDir::new("cli-outage-pg");
    let json = dir.path().join("runs.json");
    let args = [
        "ycsb",
        "--appnodes",
        "2",
        "--threads",
        "4",
        "--records",
        "300",
        "--workload",
        "A",
        "--duration",
        "7s",
        "--policy",
        "write-through,write-around",
        "--tardis",
        "tardis",
        "--tardis-appnodes",
        appnodes,
        "--ar-workers",
        "2",
        "--store-timeout",
        "1s",
    ];
    let (status, log, faulted) = bench_through_faults(&pg, fault, &args, &json);
    let what = format!("{fault:?} {appnodes}");
    assert!(status.success(), "{what}: {log}");
    assert_eq!(faulted, 2, "{what}: a fault per run phase: {log}");
    let text = std::fs::read_to_string(&json).unwrap();
    let records: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        let what = format!("{what} {}", r["policy"]);
        assert_eq!(r["stale_reads"], 0, "{what}: {}", r["stale_examples"]);
        assert_eq!(r["lost_writes"].as_u64().unwrap_or(0), 0, "{what}");
        let outage = &r["outage"];
        assert!(
            outage.is_object(),
            "{what}: TARDIS saw the server go: {log}"
        );
        assert_eq!(outage["appnodes"], appnodes, "{what}");
        assert!(outage["at_s"].is_null(), "{what}: no --outage, no cut");
        assert!(
            outage["recovery_s"].as_f64().is_some(),
            "{what}: recovery ended: {outage}"
        );
    }
}

#[test]
fn two_appnodes_with_recon_survive_postgres_stopped() {
    two_appnodes_through(Fault::Stop, "recon");
}

#[test]
fn two_appnodes_with_contextual_survive_postgres_stopped() {
    two_appnodes_through(Fault::Stop, "contextual");
}

#[test]
fn two_appnodes_with_recon_survive_postgres_frozen() {
    two_appnodes_through(Fault::Freeze, "recon");
}

#[test]
fn two_appnodes_with_contextual_survive_postgres_frozen() {
    two_appnodes_through(Fault::Freeze, "contextual");
}

/// Issue 17's kill matrix: PostgreSQL stopped for a few seconds in the middle of a write-back
/// run (one process, no TARDIS). Writes go on into the cache as buffered writes; reads that
/// miss and the workers fail while it is away; after it is back the drain applies everything:
/// no acknowledged write lost, no read stale.
#[test]
fn write_back_survives_postgres_stopped() {
    let Some(pg) = PrivatePostgres::start() else {
        return;
    };
    let pg = Arc::new(pg);
    let dir = ScratchDir::new("cli-wb-pg-stopped");
    let json = dir.path().join("runs.json");
    let args = [
        "ycsb",
        "--threads",
        "4",
        "--records",
        "300",
        "--workload",
        "A",
        "--duration",
        "7s",
        "--policy",
        "write-back",
        "--store-timeout",
        "1s",
    ];
    let (status, log, faulted) = bench_through_faults(&pg, Fault::Stop, &args, &json);
    assert_eq!(faulted, 1, "the run phase reported progress: {log}");
    assert!(status.success(), "{log}");
    let text = std::fs::read_to_string(&json).unwrap();
    let records: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r["stale_reads"], 0, "{}", r["stale_examples"]);
    assert_eq!(
        r["lost_writes"].as_u64().unwrap_or(0),
        0,
        "{}",
        r["lost_examples"]
    );
    assert!(
        r["write_back"]["buffered_ops"].as_u64().unwrap() > 0,
        "{}",
        r["write_back"]
    );
}
