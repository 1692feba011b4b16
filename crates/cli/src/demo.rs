//! `cads demo`: what each write policy buys on this machine, in about a minute, with nothing to
//! install: YCSB Workloads A (50% updates) and B (5% updates) on a small database in SQLite (or
//! `--store`), with two CMIs started in this process, under each policy, under cache-aside
//! without leases (what applications do over Redis), and on the data store alone. Every read is
//! validated; the table shows each policy's throughput over the data store's and its stale
//! reads.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use cads_bench::deploy::redact;
use cads_bench::harness::CommonOptions;
use cads_bench::ycsb::{RunRecord, YcsbOptions};
use cads_bench::{parse_duration, parse_policies, CacheSpec};
use clap::Args;

use crate::bench::{inconsistencies, run_ycsb, write_out};
use crate::progress::Progress;

/// `cads demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the run records (JSON), summary.md and the charts (PNG and SVG).
    #[arg(long, value_name = "DIR", default_value = "cads-demo")]
    pub out: PathBuf,
    /// Records in the database.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub records: u64,
    /// Length of each run: two workloads, five runs each (about 2.5 s more per run go to
    /// loading and checking).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Threads issuing operations.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub threads: usize,
    /// Data store: sqlite:PATH, postgres://USER:PASSWORD@HOST:PORT/DATABASE or
    /// mysql://USER:PASSWORD@HOST:PORT/DATABASE (its table usertable is dropped and reloaded).
    /// [default: a SQLite file in a temporary directory, removed afterwards]
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// The workloads the demo runs: one write-heavy, one read-mostly.
const WORKLOADS: [&str; 2] = ["A", "B"];

/// Runs the demo; returns whether every run was consistent (no stale read, no lost write).
pub fn run(args: &DemoArgs) -> Result<bool> {
    let progress = Progress::new();
    let store = match &args.store {
        Some(url) => redact(url),
        None => "SQLite (a temporary file)".into(),
    };
    eprintln!(
        "cads demo: YCSB Workloads A and B on {} records in {store}, two CMIs in this process; \
         the data store alone, cache-aside without leases and each write policy run {:.1?} \
         each, every read validated.",
        args.records, args.duration
    );
    let mut records = Vec::new();
    for workload in WORKLOADS {
        let opts = YcsbOptions {
            common: CommonOptions {
                policies: parse_policies("none,cache-aside,write-around,write-through,write-back")?,
                store: args.store.clone(),
                cache: CacheSpec::Embedded { cmis: 2 },
                threads: args.threads,
                ..YcsbOptions::default().common
            },
            workload: workload.into(),
            records: args.records,
            duration: Some(args.duration),
            ..YcsbOptions::default()
        };
        records.extend(run_ycsb(&opts, &progress)?);
    }
    let table = render_table(&records);
    print!("{table}");
    let cads_stale: u64 = records
        .iter()
        .filter(|r| r.policy != "cache-aside")
        .map(|r| r.stale_reads)
        .sum();
    println!(
        "\nCache-aside is what an application does over Redis or memcached: fill a miss with SET, \
         delete the key after a write. Without leases a fill read before a write can land after \
         its delete and stay cached: its stale reads are those the validator caught in this run \
         (how many depends on timing; the race needs a miss and a write of one record at once).{}",
        if cads_stale == 0 {
            " The cads policies read nothing stale."
        } else {
            ""
        }
    );
    if args.store.is_none() {
        println!(
            "\nSQLite runs inside this process: a read from it costs no round trip, a cache hit \
             costs one to a CMI. A cache pays off in front of a data store on a server; try \
             --store postgres://USER:PASSWORD@HOST:PORT/DATABASE."
        );
    }
    let values: Vec<serde_json::Value> = records
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .context("a run record does not serialize")?;
    let written = write_out(&args.out, &values, &table)?;
    eprintln!(
        "wrote {written} files to {}: a JSON record per run, summary.md, and charts \
         (`cads report {}` draws them again)",
        args.out.display(),
        args.out.display()
    );
    let problems = inconsistencies(&values);
    for p in &problems {
        eprintln!("inconsistent: {p}");
    }
    Ok(problems.is_empty())
}

/// The demo's table, in Markdown: per workload and policy, throughput, speed-up over the data
/// store alone, p99 latency of reads and updates, hit ratio, stale reads and lost writes.
pub fn render_table(records: &[RunRecord]) -> String {
    let header = [
        "workload",
        "policy",
        "ops/s",
        "speed-up",
        "READ p99 µs",
        "UPDATE p99 µs",
        "hit ratio",
        "stale reads",
        "lost writes",
    ];
    let rows: Vec<[String; 9]> = records
        .iter()
        .map(|r| {
            let alone = records
                .iter()
                .find(|o| o.workload == r.workload && o.policy == "none")
                .map(|o| o.throughput);
            let p99 = |op: &str| {
                r.latency_us
                    .get(op)
                    .map_or("-".into(), |l| l.p99.to_string())
            };
            [
                r.workload.clone(),
                match r.policy.as_str() {
                    "none" => "data store alone".into(),
                    "cache-aside" => "cache-aside, no leases".into(),
                    _ => r.policy.clone(),
                },
                format!("{:.0}", r.throughput),
                alone
                    .filter(|a| *a > 0.0)
                    .map_or("-".into(), |a| format!("{:.2}x", r.throughput / a)),
                p99("READ"),
                p99("UPDATE"),
                r.hit_ratio
                    .map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
                r.stale_reads.to_string(),
                r.detail.validated.lost_writes.to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        out.push('|');
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            // Names left, numbers right.
            if i < 2 {
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(out, " {}{cell} |", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    line(&mut out, &header);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i < 2 {
                "-".repeat(*w)
            } else {
                format!("{}:", "-".repeat(w - 1))
            }
        })
        .collect();
    line(
        &mut out,
        &rule.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for row in &rows {
        line(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    out
}
