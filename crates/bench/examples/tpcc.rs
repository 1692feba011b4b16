//! TPC-C against the cads framework, until `cads bench tpcc` wires the same library call:
//!
//! ```sh
//! cargo run --release -p cads-bench --example tpcc -- \
//!     --policy none,write-around,write-through,write-back \
//!     --store postgres://cads:cads@127.0.0.1:5432/cads --warehouses 2 --threads 8 --duration 60s
//! ```
//!
//! Prints progress lines on standard error, then the summary table (medians over `--repeat`
//! runs) on standard output.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use cads_bench::tpcc::{
    print_progress, render_summary, run_tpcc, summarize, Mix, Scale, TpccOptions,
};
use cads_bench::ycsb::{parse_duration, parse_policies};
use cads_bench::{CacheSpec, CmiSettings};
use clap::Parser;

/// TPC-C (benchmarks.md Part B §3) over CacheStores, with the consistency conditions checked
/// after every run.
#[derive(Parser, Debug)]
#[command(name = "tpcc")]
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
    /// Warehouses.
    #[arg(long, default_value_t = 1)]
    warehouses: u32,
    /// Size of a warehouse: spec (100,000 items, 3,000 customers per district) or hundredth.
    #[arg(long, value_parser = Scale::parse, default_value = "spec")]
    scale: Scale,
    /// Terminals, spread over the warehouses.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// The measured interval (30s, 2m).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    duration: Duration,
    /// Weights of New-Order, Payment, Order-Status, Delivery, Stock-Level.
    #[arg(long, value_parser = Mix::parse, default_value = "45,43,4,4,4")]
    mix: Mix,
    /// Skip the warm-up (start with a cold cache).
    #[arg(long)]
    cold: bool,
    /// Write-back background workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Runs of each policy (interleaved); the summary shows medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Seed of the loader and the terminals.
    #[arg(long, default_value_t = 0x007A_C00C)]
    seed: u64,
    /// Table name prefix.
    #[arg(long, default_value = "tpcc_")]
    prefix: String,
    /// Load once and let later runs go on with the data the previous one left.
    #[arg(long)]
    keep_data: bool,
    /// Threads loading the initial database.
    #[arg(long, default_value_t = 4)]
    load_threads: usize,
    /// How long write-back's drain may take after a run.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    drain_timeout: Duration,
    /// maxmemory of each embedded CMI.
    #[arg(long)]
    maxmemory: Option<String>,
    /// max-pinned-memory of each embedded CMI.
    #[arg(long)]
    max_pinned_memory: Option<String>,
    /// File for every run record in one JSON array (rewritten after each run).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    let a = Args::parse();
    let opts = TpccOptions {
        policies: parse_policies(&a.policy)?,
        store: a.store,
        cache: CacheSpec::parse(&a.cache)?,
        cmi: CmiSettings {
            maxmemory: a.maxmemory,
            max_pinned_memory: a.max_pinned_memory,
            ..CmiSettings::default()
        },
        warehouses: a.warehouses,
        scale: a.scale,
        threads: a.threads,
        duration: a.duration,
        mix: a.mix,
        warm: !a.cold,
        workers: a.workers,
        repeat: a.repeat,
        seed: a.seed,
        prefix: a.prefix,
        keep_data: a.keep_data,
        load_threads: a.load_threads,
        drain_timeout: a.drain_timeout,
        json: a.json,
        ..TpccOptions::default()
    };
    let records = run_tpcc(&opts, &print_progress)?;
    for r in &records {
        for c in r.consistency.iter().filter(|c| c.violations > 0) {
            eprintln!("{} #{}: condition {c:?}", r.policy, r.run);
        }
        for e in &r.errors {
            eprintln!("{} #{}: error: {e}", r.policy, r.run);
        }
    }
    print!("{}", render_summary(&summarize(&records)));
    Ok(())
}
