//! `cads demo`: what each write policy buys on this machine, in about a minute, with nothing to
//! install: YCSB Workloads A (50% updates) and B (5% updates) and BG's social network (its 90%
//! mix of reads) on small databases in SQLite (or `--store`), with two CMIs started in this
//! process, under each policy, under cache-aside without leases (what applications do over
//! Redis), and on the data store alone. Every read is validated; the table shows each policy's
//! throughput over the data store's and its stale reads.
//!
//! The default SQLite database syncs every commit to disk (`synchronous=FULL`), as a server data
//! store commits, rather than SQLite's faster setting that may lose the last commits: a cache that
//! absorbs writes is measured against a data store that keeps what it acknowledged.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use cads_bench::bg::{ActionKind, BgOptions};
use cads_bench::deploy::{redact, store_url};
use cads_bench::harness::{CommonOptions, LatencySummary, Record};
use cads_bench::ycsb::YcsbOptions;
use cads_bench::{parse_duration, parse_policies, CacheSpec};
use clap::Args;

use crate::bench::{inconsistencies, run_benchmark, write_out};
use crate::progress::Progress;

/// `cads demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the run records (JSON), summary.md and the charts (PNG and SVG).
    #[arg(long, value_name = "DIR", default_value = "cads-demo")]
    pub out: PathBuf,
    /// Records in YCSB's table.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub records: u64,
    /// Members of BG's social graph.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub members: u32,
    /// Length of each run: three workloads, five runs each (a second or two more per run go
    /// to loading and checking).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Threads issuing operations.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub threads: usize,
    /// Data store: sqlite:PATH[?synchronous=full], postgres://USER:PASSWORD@HOST:PORT/DATABASE or
    /// mysql://USER:PASSWORD@HOST:PORT/DATABASE (YCSB's table usertable and BG's collections are
    /// dropped and reloaded). [default: a SQLite file syncing every commit, in a temporary
    /// directory removed afterwards]
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// YCSB's workloads the demo runs: one write-heavy, one read-mostly.
const YCSB_WORKLOADS: [&str; 2] = ["A", "B"];

/// BG's mix the demo runs: the one with the most writes, 10% of the actions.
const BG_MIX: &str = "90";

/// The policies of every workload, the baselines first.
const POLICIES: &str = "none,cache-aside,write-around,write-through,write-back";

/// Runs the demo; returns whether every run was consistent (no stale read, no lost write).
pub fn run(args: &DemoArgs) -> Result<bool> {
    let progress = Progress::new();
    // Kept until the runs end; the database goes with it.
    let (store, temporary) = store_url(&args.store, "demo")?;
    let (store, described) = match &temporary {
        Some(_) => (
            format!("{store}?synchronous=full"),
            "SQLite (a temporary file, every commit synced to disk)".into(),
        ),
        None => (store.clone(), redact(&store)),
    };
    eprintln!(
        "cads demo: YCSB Workloads A and B on {} records and BG's {BG_MIX}% mix on {} members in \
         {described}, two CMIs in this process; the data store alone, cache-aside without \
         leases and each write policy run {:.1?} each, every read validated.",
        args.records, args.members, args.duration
    );
    let common = CommonOptions {
        policies: parse_policies(POLICIES)?,
        store: Some(store),
        cache: CacheSpec::Embedded { cmis: 2 },
        threads: args.threads,
        ..CommonOptions::default()
    };
    let mut rows = Vec::new();
    let mut values = Vec::new();
    for workload in YCSB_WORKLOADS {
        let opts = YcsbOptions {
            common: CommonOptions {
                seed: YcsbOptions::default().common.seed,
                ..common.clone()
            },
            workload: workload.into(),
            records: args.records,
            duration: Some(args.duration),
            ..YcsbOptions::default()
        };
        for record in run_benchmark(&opts, &progress)? {
            rows.push(Row::new(
                &record,
                format!("YCSB {workload}"),
                record.detail.validated.lost_writes,
                |op| op != "READ",
            ));
            values.push(serde_json::to_value(&record).context("a run record does not serialize")?);
        }
    }
    let bg = BgOptions {
        common: CommonOptions {
            seed: BgOptions::default().common.seed,
            ..common.clone()
        },
        workload: BG_MIX.into(),
        members: args.members,
        duration: args.duration,
        ..BgOptions::default()
    };
    for record in run_benchmark(&bg, &progress)? {
        rows.push(Row::new(
            &record,
            format!("BG {BG_MIX}%"),
            record.detail.validated.lost_writes,
            |op| {
                ActionKind::ALL
                    .iter()
                    .any(|k| k.abbreviation() == op && k.is_write())
            },
        ));
        values.push(serde_json::to_value(&record).context("a run record does not serialize")?);
    }
    drop(temporary);
    let table = render_table(&rows);
    print!("{table}");
    let cads_stale: u64 = rows
        .iter()
        .filter(|r| r.policy != "cache-aside")
        .map(|r| r.stale_reads)
        .sum();
    println!(
        "\nCache-aside is what an application does over Redis or memcached: fill a miss with SET, \
         delete the key after a write. Without leases a fill read before a write can land after \
         its delete and stay cached: its stale reads are those the validator caught in this run \
         (how many depends on timing; the race needs a miss and a write of one record at once, \
         which BG's popular members see most).{}",
        if cads_stale == 0 {
            " The cads policies read nothing stale."
        } else {
            ""
        }
    );
    if args.store.is_none() {
        println!(
            "\nSQLite runs inside this process: a read from it costs no round trip, while a cache \
             hit costs one to a CMI. Its commits are synced to disk, as a server data store's \
             are, and write-back takes that wait off the write path. Against a data store on a \
             server, try --store postgres://USER:PASSWORD@HOST:PORT/DATABASE."
        );
    }
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

/// One line of the demo's table.
struct Row {
    /// The benchmark and its workload, `YCSB A` or `BG 90%`.
    workload: String,
    policy: String,
    /// Operations (BG: actions) per second.
    throughput: f64,
    /// The slowest read and write operation's p99 latency, in microseconds.
    read_p99: Option<u64>,
    write_p99: Option<u64>,
    hit_ratio: Option<f64>,
    stale_reads: u64,
    lost_writes: u64,
}

impl Row {
    /// `is_write` tells the record's write operations from its reads, by name.
    fn new<D, C>(
        record: &Record<D, C>,
        workload: String,
        lost_writes: u64,
        is_write: impl Fn(&str) -> bool,
    ) -> Row {
        let slowest = |writes: bool| {
            record
                .latency_us
                .iter()
                .filter(|(op, _)| is_write(op) == writes)
                .map(|(_, l): (_, &LatencySummary)| l.p99)
                .max()
        };
        Row {
            workload,
            policy: record.policy.clone(),
            throughput: record.throughput,
            read_p99: slowest(false),
            write_p99: slowest(true),
            hit_ratio: record.hit_ratio,
            stale_reads: record.stale_reads,
            lost_writes,
        }
    }
}

/// The demo's table, in Markdown: per workload and policy, throughput, speed-up over the data
/// store alone, p99 latency of the slowest read and write operation, hit ratio, stale reads and
/// lost writes.
fn render_table(rows: &[Row]) -> String {
    let header = [
        "workload",
        "policy",
        "ops/s",
        "speed-up",
        "read p99 µs",
        "write p99 µs",
        "hit ratio",
        "stale reads",
        "lost writes",
    ];
    let micros = |p99: Option<u64>| p99.map_or("-".into(), |p| p.to_string());
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let alone = rows
                .iter()
                .find(|o| o.workload == r.workload && o.policy == "none")
                .map(|o| o.throughput);
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
                micros(r.read_p99),
                micros(r.write_p99),
                r.hit_ratio
                    .map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
                r.stale_reads.to_string(),
                r.lost_writes.to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
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
    for row in &cells {
        line(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    out
}
