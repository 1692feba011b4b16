//! The `cads` command as a user runs it: argument errors, a tiny `cads demo`, `cads bench ycsb
//! --json --out`, and `cads report` on records.

use std::path::Path;
use std::process::{Command, Output};

use cads_testkit::ScratchDir;
use serde_json::{json, Value};
use support::{assert_failed_on_stale_reads, stderr};

mod support;

fn cads(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cads"))
        .args(args)
        .output()
        .expect("run cads")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `args` fail with a non-zero status and a message containing every one of `expected`.
fn fails_with(args: &[&str], expected: &[&str]) {
    let out = cads(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let text = stderr(&out);
    for e in expected {
        assert!(text.contains(e), "{args:?}: {e:?} not in {text}");
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    fails_with(
        &["bench", "ycsb", "--policy", "write-around,write-sideways"],
        &["--policy", "unknown policy \"write-sideways\""],
    );
    fails_with(
        &["bench", "ycsb", "--duration", "fast"],
        &["--duration", "bad duration \"fast\""],
    );
    fails_with(
        &["bench", "ycsb", "--duration", "3 weeks"],
        &["bad duration unit"],
    );
    fails_with(
        &["bench", "ycsb", "--cache", "embedded:0"],
        &["embedded:N needs a positive N"],
    );
    fails_with(
        &[
            "bench",
            "ycsb",
            "--policy",
            "none",
            "--store",
            "oracle://db/x",
            "--records",
            "10",
        ],
        &["cannot open the data store oracle://db/x"],
    );
    fails_with(
        &[
            "bench",
            "ycsb",
            "--policy",
            "none",
            "--workload",
            "Z",
            "--records",
            "10",
        ],
        &["workload"],
    );
    fails_with(&["bench", "tpcx"], &["unrecognized subcommand"]);
    fails_with(
        &["demo", "--duration", "0s"],
        &["a duration must be positive"],
    );
    fails_with(
        &["report", "/nonexistent/cads-records"],
        &["cannot read the directory"],
    );
}

#[test]
fn bad_benchmark_options_are_clear_errors() {
    fails_with(&["bench", "bg", "--workload", "50"], &["mix"]);
    fails_with(
        &["bench", "bg", "--layout", "graph"],
        &["unknown layout \"graph\""],
    );
    fails_with(
        &["bench", "bg", "--distribution", "normal"],
        &["unknown member distribution"],
    );
    fails_with(
        &["bench", "tpcc", "--mix", "45,43"],
        &["--mix takes five weights"],
    );
    fails_with(
        &["bench", "tpcc", "--scale", "huge"],
        &["unknown scale \"huge\""],
    );
    fails_with(
        &["bench", "tpcc", "--warehouses", "0", "--policy", "none"],
        &["--warehouses"],
    );
    fails_with(
        &["bench", "tpcc", "--write-back-batch", "0"],
        &["--write-back-batch"],
    );
    fails_with(
        &[
            "bench",
            "tpcc",
            "--policy",
            "none",
            "--store",
            "postgres://nobody@127.0.0.1:1/x",
        ],
        &["cannot open the data store postgres://nobody@127.0.0.1:1/x"],
    );
}

#[test]
fn help_lists_every_command_and_its_flags() {
    let top = stdout(&cads(&["--help"]));
    for command in ["server", "bench", "demo", "report"] {
        assert!(top.contains(command), "{command} missing from\n{top}");
    }
    let shared = [
        "--policy",
        "--store",
        "--cache",
        "--threads",
        "--duration",
        "--out",
        "--json",
        "--appnodes",
    ];
    let cases: [(&[&str], &[&str]); 9] = [
        (
            &["bench", "--help"],
            &["ycsb", "bg", "tpcc", "bg-latency", "ycsb-latency"],
        ),
        (
            &["bench", "ycsb", "--help"],
            &["--workload", "--records", "--operations"],
        ),
        (
            &["bench", "bg", "--help"],
            &["--workload", "--members", "--soar", "--sla-latency"],
        ),
        (
            &["bench", "tpcc", "--help"],
            &["--warehouses", "--scale", "--mix"],
        ),
        (
            &["demo", "--help"],
            &["--out", "--duration", "--records", "--store"],
        ),
        (&["report", "--help"], &["DIR", "--out"]),
        (&["server", "--help"], &["--port", "--cmis"]),
        (
            &["bench", "bg-latency", "--help"],
            &["--policy", "--store", "--cache", "--layout", "--actions"],
        ),
        (
            &["bench", "ycsb-latency", "--help"],
            &["--policy", "--store", "--cache", "--records", "--repeat"],
        ),
    ];
    for (args, flags) in cases {
        let out = cads(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        // The harness's runners share the flags; the single-action ones have their own.
        let benchmark = args.len() == 3 && args[0] == "bench" && !args[1].ends_with("-latency");
        for flag in flags
            .iter()
            .chain(if benchmark { &shared[..] } else { &[] })
        {
            assert!(text.contains(flag), "{flag} missing from {args:?}:\n{text}");
        }
    }
}

/// The keys every run record must have (benchmarks.md Part A, and what `cads report` reads).
fn assert_record_keys(record: &Value) {
    for key in [
        "benchmark",
        "workload",
        "policy",
        "store",
        "throughput",
        "latency_us",
        "hit_ratio",
        "reads",
        "stale_reads",
        "config",
    ] {
        assert!(record.get(key).is_some(), "{key} missing from {record}");
    }
    for latency in record["latency_us"].as_object().unwrap().values() {
        for p in ["p50", "p95", "p99", "p999"] {
            assert!(latency[p].is_u64(), "{p} missing from {latency}");
        }
    }
}

fn files_ending(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn a_tiny_demo_validates_every_read_and_writes_records_and_charts() {
    let dir = ScratchDir::new("cli");
    let out_dir = dir.path().join("demo");
    let out = cads(&[
        "demo",
        "--records",
        "100",
        "--members",
        "100",
        "--duration",
        "200ms",
        "--threads",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let (text, log) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "demo failed:\n{log}\n{text}");
    assert!(log.contains("every commit synced to disk"), "{log}");
    // Three workloads, the data store alone, cache-aside and three policies each.
    for row in [
        "data store alone",
        "cache-aside, no leases",
        "| write-around",
        "| write-through",
        "| write-back",
    ] {
        assert_eq!(text.matches(row).count(), 3, "{row}:\n{text}");
    }
    for workload in ["| YCSB A ", "| YCSB B ", "| BG 90% "] {
        assert_eq!(text.matches(workload).count(), 5, "{workload}:\n{text}");
    }
    let records = files_ending(&out_dir, ".json");
    assert_eq!(records.len(), 15, "{records:?}");
    for path in &records {
        let record: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_record_keys(&record);
        // Cache-aside's stale reads are what it shows; every other row has none.
        if record["policy"] != "cache-aside" {
            assert_eq!(record["stale_reads"], 0, "{}", path.display());
        }
        assert!(record["reads"].as_u64().unwrap() > 0, "{}", path.display());
    }
    for chart in [
        "ycsb-A-throughput",
        "ycsb-B-latency",
        "ycsb-A-write-back",
        "bg-90-throughput",
    ] {
        for ext in ["png", "svg"] {
            let path = out_dir.join(format!("{chart}.{ext}"));
            assert!(
                std::fs::metadata(&path).is_ok_and(|m| m.len() > 0),
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn bench_json_has_the_required_keys_and_out_has_charts() {
    let dir = ScratchDir::new("cli");
    let json_path = dir.path().join("runs.json");
    let out_dir = dir.path().join("out");
    let out = cads(&[
        "bench",
        "ycsb",
        "--policy",
        "none,write-through",
        "--workload",
        "B",
        "--records",
        "100",
        "--threads",
        "2",
        "--duration",
        "200ms",
        "--json",
        json_path.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("write-through"), "{}", stdout(&out));
    let records: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 2);
    for r in records {
        assert_record_keys(r);
    }
    assert_eq!(records[1]["policy"], "write-through");
    assert!(records[1]["hit_ratio"].is_f64());
    assert!(out_dir.join("summary.md").is_file());
    assert_eq!(files_ending(&out_dir, ".json").len(), 2);
    assert_eq!(
        files_ending(&out_dir, ".png").len(),
        2,
        "throughput and latency"
    );
}

#[test]
fn report_draws_png_and_svg_for_every_benchmark() {
    let dir = ScratchDir::new("cli");
    let latency = |p50: u64| json!({"count": 100, "p50": p50, "p95": 2 * p50, "p99": 4 * p50, "p999": 9 * p50});
    let mut records = Vec::new();
    for (benchmark, workload, actions) in [
        ("ycsb", "A", vec!["READ", "UPDATE"]),
        ("bg", "99", vec!["VP", "LF", "IF"]),
    ] {
        for (i, policy) in ["none", "write-around", "write-through", "write-back"]
            .iter()
            .enumerate()
        {
            let lat: serde_json::Map<String, Value> = actions
                .iter()
                .map(|a| (a.to_string(), latency(100 * (4 - i as u64))))
                .collect();
            records.push(json!({
                "benchmark": benchmark, "workload": workload, "policy": policy, "run": 0,
                "throughput": 1000.0 * (i + 1) as f64, "latency_us": lat,
                "write_back": if *policy == "write-back" {
                    json!({
                        "pinned_bytes": {"samples": [[0.0, 0], [1.0, 3_000_000], [2.0, 5_000_000]]},
                        "applied_share_samples": [[0.0, 0.0], [1.0, 0.4], [2.0, 0.7]],
                    })
                } else {
                    Value::Null
                },
            }));
        }
    }
    std::fs::write(
        dir.path().join("records.json"),
        Value::Array(records).to_string(),
    )
    .unwrap();
    let charts = dir.path().join("charts");
    let out = cads(&[
        "report",
        dir.path().to_str().unwrap(),
        "--out",
        charts.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    for stem in ["ycsb-A", "bg-99"] {
        for chart in ["throughput", "latency", "write-back"] {
            for ext in ["png", "svg"] {
                let path = charts.join(format!("{stem}-{chart}.{ext}"));
                assert!(listed.contains(path.to_str().unwrap()), "{listed}");
                let bytes = std::fs::read(&path).unwrap();
                match ext {
                    "png" => assert!(bytes.starts_with(b"\x89PNG"), "{}", path.display()),
                    _ => assert!(String::from_utf8(bytes).unwrap().contains("<svg")),
                }
            }
        }
    }
    // An empty directory is an error, not an empty report.
    let empty = ScratchDir::new("cli");
    fails_with(
        &["report", empty.path().to_str().unwrap()],
        &["no run records"],
    );
}

/// A tiny run of `cads bench <benchmark>` with `--json`: it succeeds, and every record has the
/// keys and says it found nothing inconsistent.
fn tiny_run(benchmark: &str, args: &[&str]) -> Vec<Value> {
    let dir = ScratchDir::new("cli");
    let json_path = dir.path().join("runs.json");
    let mut all = vec!["bench", benchmark, "--threads", "2", "--duration", "300ms"];
    all.extend(args);
    all.extend(["--json", json_path.to_str().unwrap()]);
    let out = cads(&all);
    assert!(out.status.success(), "{all:?}:\n{}", stderr(&out));
    let records: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let records = records.as_array().unwrap().clone();
    for r in &records {
        assert_record_keys(r);
        assert_eq!(r["benchmark"], benchmark);
        assert_eq!(r["stale_reads"], 0, "{r}");
    }
    records
}

#[test]
fn bg_and_tpcc_run_from_the_command_line() {
    let bg = tiny_run(
        "bg",
        &[
            "--policy",
            "write-through",
            "--members",
            "100",
            "--workload",
            "99",
        ],
    );
    assert_eq!(bg.len(), 1);
    assert_eq!(
        (bg[0]["policy"].as_str(), bg[0]["workload"].as_str()),
        (Some("write-through"), Some("99"))
    );
    let tpcc = tiny_run(
        "tpcc",
        &[
            "--policy",
            "none,write-through,write-back",
            "--scale",
            "hundredth",
            "--write-back-batch",
            "3",
        ],
    );
    assert_eq!(tpcc.len(), 3);
    for r in &tpcc {
        assert_eq!(r["consistent"], true, "{r}");
        assert!(r["tpmc"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["config"]["write_back_batch"], 3, "{r}");
    }
}

#[test]
fn stale_reads_make_the_command_fail() {
    // Writes that skip the cache (--broken) leave stale cached copies: validation reports them,
    // and the command exits with status 1 and says which run read them.
    let out = cads(&[
        "bench",
        "bg",
        "--broken",
        "--policy",
        "write-around",
        "--members",
        "200",
        "--workload",
        "90",
        "--threads",
        "4",
        "--duration",
        "700ms",
    ]);
    let log = assert_failed_on_stale_reads(&out, "bg 90 write-around #0");
    assert!(
        log.contains("cached entries differ from the data store"),
        "{log}"
    );
}

/// `cads coord` over running CMIs: `cads coord status` shows its configuration once it has
/// stored one; it stops cleanly on SIGTERM; and one restarted without a state file starts a
/// configuration above every id the instances know (a lower one would never be taken).
#[test]
fn coord_runs_over_cmis_and_status_shows_its_configuration() {
    let cmis = cads_testkit::Cmis::start(2, "write-around");
    let list = cmis
        .addrs()
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let status = |expected: &str| loop {
        let out = cads(&["coord", "status", "--cmis", &list]);
        let text = stdout(&out);
        if out.status.success() && text.contains(expected) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let fails = cads(&["coord", "status", "--cmis", &list]);
    assert!(!fails.status.success());
    assert!(
        stderr(&fails).contains("no instance holds a configuration"),
        "{}",
        stderr(&fails)
    );

    for (run, expected) in [(1, "configuration 1\n"), (2, "configuration 2\n")] {
        let mut coord = Command::new(env!("CARGO_BIN_EXE_cads"))
            .args([
                "coord",
                "--cmis",
                &list,
                "--fragments",
                "4",
                "--log-level",
                "warn",
            ])
            .spawn()
            .expect("start cads coord");
        let text = status(expected);
        assert!(
            text.contains("0 of 4 fragments not in normal mode"),
            "run {run}: {text}"
        );
        let pid = coord.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let exit = coord.wait().unwrap();
        assert!(exit.success(), "run {run}: cads coord exited with {exit}");
    }
}

/// A YCSB run of `--recovery VARIANT` with one of three CMIs failing mid-run (004 §5) as
/// `extra` says: its output and record.
fn gemini_run(dir: &ScratchDir, recovery: &str, extra: &[&str]) -> (Output, Value) {
    let json = dir.path().join(format!("{recovery}.json"));
    let mut args = vec![
        "bench",
        "ycsb",
        "--policy",
        "write-around",
        "--workload",
        "A",
        "--records",
        "500",
        "--threads",
        "4",
        "--duration",
        "9s",
        "--cache",
        "embedded:3",
        "--recovery",
        recovery,
        "--fragments",
        "12",
        "--fail-cmis",
        "1",
        "--fail-at",
        "1s",
        // Long enough after the coordinator's 1 s lease for writes to reach the secondaries
        // however slowly the machine runs (the stale run needs some to read stale values).
        "--fail-for",
        "4s",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = cads(&args);
    let records: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (out, records[0].clone())
}

/// StaleCache, which keeps the returning CMI's content unrepaired, reads values overwritten
/// while it was away, and the validator catches them (the positive control); `gemini`, the
/// same run otherwise, reads none. Both records carry the failed CMI's hit ratio over time,
/// and the run's throughput and latency each second.
fn gemini_reads_nothing_stale(gemini: &str, kind: &str, extra: &[&str]) {
    let dir = ScratchDir::new("gemini-bench");
    let (out, record) = gemini_run(&dir, "stale", extra);
    assert_failed_on_stale_reads(&out, "ycsb A write-around #0");
    assert!(record["stale_reads"].as_u64().unwrap() > 0);
    assert_eq!(record["gemini"]["recovery"], "stale");

    let (out, record) = gemini_run(&dir, gemini, extra);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(record["stale_reads"], 0);
    let failure = &record["gemini"];
    assert_eq!(failure["recovery"], gemini);
    assert_eq!(failure["fail_kind"], kind);
    assert_eq!(failure["failed_cmis"], 1);
    assert!(failure["back_s"].as_f64().unwrap() > failure["fail_at_s"].as_f64().unwrap());
    assert!(!failure["timeline"].as_array().unwrap().is_empty());
    let load = failure["load"].as_array().unwrap();
    assert!(
        load.iter()
            .any(|s| s["ops_per_s"].as_f64().unwrap() > 0.0 && s["p90_ms"].is_f64()),
        "every AppNode's operations counted each second: {load:?}"
    );
}

/// The CMI cut off from everyone, its content kept in memory, under one AppNode; back, it
/// recovers with working-set transfer.
#[test]
fn gemini_reads_nothing_stale_where_a_stale_cache_does() {
    gemini_reads_nothing_stale("gemini-i+w", "cut", &[]);
}

/// The CMI's process killed (SIGKILL) and started again from its append-only file, while two
/// AppNode processes keep reading and writing.
#[test]
fn gemini_reads_nothing_stale_from_a_killed_cmi_back_from_its_log() {
    gemini_reads_nothing_stale(
        "gemini-o",
        "kill",
        &["--fail-kind", "kill", "--appnodes", "2"],
    );
}

/// `cads coord status` of the CMIs in `list`, once it contains `wanted`.
fn coord_status_with(list: &str, wanted: &str) -> String {
    loop {
        let text = stdout(&cads(&["coord", "status", "--cmis", list]));
        if text.contains(wanted) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `cads coord status` of the CMIs in `list`, once they hold a configuration above `id`.
fn coord_status_newer_than(list: &str, id: u64) -> String {
    loop {
        let text = stdout(&cads(&["coord", "status", "--cmis", list]));
        let shown = text
            .strip_prefix("configuration ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok());
        if shown.is_some_and(|shown| shown > id) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A range from a coordinator's id service, once one of its addresses serves.
fn served_range(ids: &cads_coord::ids::RemoteRanges) -> std::ops::Range<u64> {
    loop {
        if let Ok(range) = ids.ask() {
            return range;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A child process killed (and reaped) when dropped, so that a failing test leaves none behind.
struct KilledOnDrop(std::process::Child);

impl KilledOnDrop {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An etcd server of the test's own, on free ports with its data in `dir`, killed when dropped.
struct EtcdServer {
    _process: KilledOnDrop,
    url: String,
}

impl EtcdServer {
    /// None (said loudly, or a failure under `CADS_REQUIRE_SERVICES=1`) without `etcd`.
    fn start(dir: &Path) -> Option<EtcdServer> {
        let binary = cads_testkit::services::require_tool("etcd", "install etcd-server (Debian)")?;
        let ports = cads_testkit::free_ports(2);
        let url = format!("http://127.0.0.1:{ports}");
        let peer = format!("http://127.0.0.1:{}", ports + 1);
        let child = Command::new(binary)
            .args(["--name", "test", "--data-dir"])
            .arg(dir.join("etcd"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start etcd");
        let server = EtcdServer {
            _process: KilledOnDrop(child),
            url,
        };
        let etcd = cads_coord::etcd::Etcd::new(&server.url).unwrap();
        while etcd.get("probe").is_err() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(server)
    }
}

/// Two `cads coord --etcd` processes: one leads, the other stands by. The leader is killed
/// with SIGKILL; the standby takes the lead once etcd's lease on it runs out and goes on from
/// the state the leader saved in etcd, so that the next change is the next id (a coordinator
/// starting afresh would have made configuration 2 for itself and the failure 3). Both serve
/// session ids while they lead: a client that knows both addresses gets its ranges from the
/// leader, then from the standby, never an id twice.
#[test]
fn coord_leader_killed_its_standby_goes_on_from_etcd() {
    let dir = ScratchDir::new("coord-etcd");
    let Some(etcd_server) = EtcdServer::start(dir.path()) else {
        return;
    };
    let etcd = cads_coord::etcd::Etcd::new(&etcd_server.url).unwrap();
    let leader = || etcd.get(cads_coord::etcd::LEADER_KEY).unwrap();
    let (kept, mut failing) = (
        cads_testkit::Cmis::start(1, "write-around"),
        cads_testkit::Cmis::start(1, "write-around"),
    );
    let list = format!("{},{}", kept.addrs()[0], failing.addrs()[0]);
    let listen =
        [(); 2].map(|()| std::net::SocketAddr::from(([127, 0, 0, 1], cads_testkit::free_port())));
    let ids = cads_coord::ids::RemoteRanges::new(listen.to_vec(), None);
    let start = |name: &str, listen: std::net::SocketAddr| {
        KilledOnDrop(
            Command::new(env!("CARGO_BIN_EXE_cads"))
                .args(["coord", "--cmis", &list, "--fragments", "4"])
                .args([
                    "--etcd",
                    &etcd_server.url,
                    "--name",
                    name,
                    "--listen",
                    &listen.to_string(),
                    "--log-level",
                    "warn",
                ])
                .spawn()
                .expect("start cads coord"),
        )
    };
    let mut first = start("first", listen[0]);
    coord_status_with(&list, "configuration 1\n");
    assert_eq!(leader(), Some(b"first".to_vec()));
    let _second = start("second", listen[1]);
    let before = served_range(&ids);
    first.kill();
    while leader() != Some(b"second".to_vec()) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let after = served_range(&ids);
    assert!(
        after.start >= before.end,
        "ids handed out again: {before:?} then {after:?}"
    );
    failing.stop();
    let text = coord_status_newer_than(&list, 1);
    assert!(
        text.starts_with("configuration 2\n") && text.contains("\n2 of 4 fragments not in"),
        "the standby did not go on from the leader's state:\n{text}"
    );
}

/// `cads coord --state-file` killed with SIGKILL and started again: it goes on from the
/// configuration it saved, so that the next change is the next id. A coordinator that lost its
/// state would have started a new configuration above the instances' (2), and the failure below
/// would then be configuration 3. Its session-id service goes on above every id it handed out.
#[test]
fn coord_killed_goes_on_from_its_state_file() {
    let dir = ScratchDir::new("coord-state");
    let state = dir.path().join("coord.json");
    let (kept, mut failing) = (
        cads_testkit::Cmis::start(1, "write-around"),
        cads_testkit::Cmis::start(1, "write-around"),
    );
    let list = format!("{},{}", kept.addrs()[0], failing.addrs()[0]);
    let status_with = |wanted: &str| coord_status_with(&list, wanted);
    let status_with_newer_than = |id: u64| coord_status_newer_than(&list, id);
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], cads_testkit::free_port()));
    // A range from the coordinator's id service, once it listens.
    let ids = cads_coord::ids::RemoteRanges::new(vec![listen], None);
    let start = || {
        Command::new(env!("CARGO_BIN_EXE_cads"))
            .args(["coord", "--cmis", &list, "--fragments", "4"])
            .args(["--listen", &listen.to_string()])
            .args([
                "--state-file",
                state.to_str().unwrap(),
                "--log-level",
                "warn",
            ])
            .spawn()
            .expect("start cads coord")
    };
    let mut coord = start();
    status_with("configuration 1\n");
    let before = served_range(&ids);
    coord.kill().unwrap();
    coord.wait().unwrap();
    assert!(state.exists(), "the state was saved before the kill");

    let mut coord = start();
    let after = served_range(&ids);
    assert!(
        after.start >= before.end,
        "ids handed out again: {before:?} then {after:?}"
    );
    // The second instance fails: its fragments go to the first, in a new configuration.
    failing.stop();
    let text = status_with_newer_than(1);
    assert!(
        text.starts_with("configuration 2\n") && text.contains("\n2 of 4 fragments not in"),
        "the restarted coordinator did not go on from its state:\n{text}"
    );
    coord.kill().unwrap();
    coord.wait().unwrap();
}

#[test]
fn write_back_buffering_is_chosen_and_recorded() {
    let dir = ScratchDir::new("cli");
    for buffering in ["append", "rmw"] {
        let json_path = dir.path().join(format!("{buffering}.json"));
        let out = cads(&[
            "bench",
            "ycsb",
            "--policy",
            "write-back",
            "--write-back-buffering",
            buffering,
            "--records",
            "20",
            "--threads",
            "2",
            "--operations",
            "200",
            "--json",
            json_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{buffering}: {}", stderr(&out));
        let records: Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        assert_eq!(
            records[0]["config"]["write_back_buffering"], buffering,
            "{records}"
        );
        assert_eq!(records[0]["lost_writes"], 0);
    }
    let out = cads(&["bench", "ycsb", "--write-back-buffering", "sometimes"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("use rmw or append"),
        "{}",
        stderr(&out)
    );
}
