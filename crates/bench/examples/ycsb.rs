//! YCSB against the cads framework, until `cads bench ycsb` wires the same library call:
//!
//! ```sh
//! cargo run --release -p cads-bench --example ycsb -- \
//!     --policy none,write-around,write-through,write-back \
//!     --store postgres://cads:cads@127.0.0.1:5432/cads --workload A --threads 8 --duration 30s
//! ```
//!
//! Prints progress lines on standard error, then the summary table (medians over `--repeat`
//! runs) on standard output.

use std::path::PathBuf;

use anyhow::Result;
use cads_bench::ycsb::{
    parse_duration, parse_policies, print_progress, render_summary, run_ycsb, summarize,
    Distribution, Fields, YcsbOptions,
};
use cads_bench::{CacheSpec, CmiSettings};
use clap::Parser;

/// YCSB (benchmarks.md Part B §1) on the cads document layer, every read validated.
#[derive(Parser, Debug)]
#[command(name = "ycsb")]
struct Args {
    /// Policies to run in turn: none, write-around, write-through, write-back (or all).
    #[arg(long, default_value = "all")]
    policy: String,
    /// Data store URL: sqlite:PATH, postgres://..., mysql://... [default: SQLite in a temp dir]
    #[arg(long)]
    store: Option<String>,
    /// CMIs: embedded:N (started here in each policy's lease mode) or host:port,...
    #[arg(long, default_value = "embedded:2")]
    cache: String,
    /// Workload: A, B, C, D, E, F, S (000 Table 3.3) or CPR (002 §4).
    #[arg(long, default_value = "A")]
    workload: String,
    /// Benchmark threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Run-phase length (8s, 2m). [default: 10s unless --operations is given]
    #[arg(long, value_parser = parse_duration)]
    duration: Option<std::time::Duration>,
    /// Run-phase operations over all threads.
    #[arg(long)]
    operations: Option<u64>,
    /// Records loaded.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Key distribution: zipfian, uniform or latest. [default: the workload's]
    #[arg(long, value_parser = Distribution::parse)]
    distribution: Option<Distribution>,
    /// Zipfian constant (YCSB's 0.99; the papers also use 0.75).
    #[arg(long, default_value_t = 0.99)]
    zipfian_constant: f64,
    /// Fields an update writes: all (the papers) or one (YCSB's default). [default: all]
    #[arg(long, value_parser = Fields::parse)]
    update_fields: Option<Fields>,
    /// Fixed scan cardinality (CPR: 5, 10, 100).
    #[arg(long)]
    scan_length: Option<u64>,
    /// Scan share, the rest updates (CPR's f: 0.1 to 1.0).
    #[arg(long)]
    scan_share: Option<f64>,
    /// Fields a scan returns: all (YCSB*) or one (YCSB^1).
    #[arg(long, value_parser = Fields::parse)]
    projection: Option<Fields>,
    /// Fields per record.
    #[arg(long, default_value_t = 10)]
    field_count: usize,
    /// Bytes per field (at least 16).
    #[arg(long, default_value_t = 100)]
    field_length: usize,
    /// Write-back background workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Write-back workers' pause after a pass without a full batch.
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    worker_pause: std::time::Duration,
    /// Skip the warm-up (start with a cold cache).
    #[arg(long)]
    cold: bool,
    /// Runs of each policy (interleaved); the summary shows medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Seed of the generators.
    #[arg(long, default_value_t = 0x00C0_FFEE)]
    seed: u64,
    /// The collection.
    #[arg(long, default_value = "usertable")]
    table: String,
    /// Bound on each data-store call.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    store_timeout: std::time::Duration,
    /// How long write-back's drain may take after a run.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    drain_timeout: std::time::Duration,
    /// maxmemory of each embedded CMI (1gb by default).
    #[arg(long)]
    maxmemory: Option<String>,
    /// max-pinned-memory of each embedded CMI (half of maxmemory by default).
    #[arg(long)]
    max_pinned_memory: Option<String>,
    /// Directory for one JSON record per run and summary.md.
    #[arg(long)]
    out: Option<PathBuf>,
    /// File for every run record in one JSON array.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    let a = Args::parse();
    let opts = YcsbOptions {
        policies: parse_policies(&a.policy)?,
        store: a.store,
        cache: CacheSpec::parse(&a.cache)?,
        cmi: CmiSettings {
            maxmemory: a.maxmemory,
            max_pinned_memory: a.max_pinned_memory,
            ..CmiSettings::default()
        },
        workload: a.workload,
        threads: a.threads,
        duration: a.duration,
        operations: a.operations,
        records: a.records,
        distribution: a.distribution,
        zipfian_constant: a.zipfian_constant,
        update_fields: a.update_fields,
        scan_length: a.scan_length,
        scan_share: a.scan_share,
        projection: a.projection,
        field_count: a.field_count,
        field_length: a.field_length,
        workers: a.workers,
        worker_pause: a.worker_pause,
        warm: !a.cold,
        repeat: a.repeat,
        seed: a.seed,
        table: a.table,
        store_timeout: a.store_timeout,
        drain_timeout: a.drain_timeout,
        out: a.out,
        json: a.json,
        ..YcsbOptions::default()
    };
    let records = run_ycsb(&opts, &print_progress)?;
    for r in &records {
        for e in r.stale_examples.iter().chain(&r.lost_examples) {
            eprintln!("{} #{}: {e}", r.policy, r.run);
        }
        for e in &r.errors {
            eprintln!("{} #{}: error: {e}", r.policy, r.run);
        }
    }
    print!("{}", render_summary(&summarize(&records)));
    Ok(())
}
