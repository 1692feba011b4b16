//! BG against the cads framework, until `cads bench bg` wires the same library call:
//!
//! ```sh
//! cargo run --release -p cads-bench --example bg -- \
//!     --policy none,write-around,write-through,write-back \
//!     --store postgres://cads:cads@127.0.0.1:5432/cads --workload 90 --soar --duration 10s
//! ```
//!
//! prints progress lines on standard error, then the summary table (medians over `--repeat`
//! runs) on standard output. Two more commands measure single actions on one thread, in the
//! shape of 000 Table 3.6 (`latency`: BG's actions) and Table 3.4 (`ycsb-latency`: YCSB's Read
//! and Update on the document layer).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cads::Policy;
use cads_bench::bg::latency::{self, Row};
use cads_bench::bg::{
    print_progress, render_summary, run_bg, summarize, BgOptions, Popularity, Sla,
};
use cads_bench::deploy::redact;
use cads_bench::ycsb::{parse_duration, parse_policies};
use cads_bench::CacheSpec;
use cads_example_bg::{GraphParams, LayoutKind};
use cads_store::{DataStore, StoreOptions};
use clap::{Args, Parser, Subcommand};

/// BG (benchmarks.md Part B §2) on the cads framework: every count read validated, the SoAR
/// found with `--soar`.
#[derive(Parser, Debug)]
#[command(
    name = "bg",
    args_conflicts_with_subcommands = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One thread, each of BG's seven actions N times on a warm cache: mean latency and round
    /// trips per action (000 Table 3.6).
    Latency(LatencyArgs),
    /// One thread, YCSB Read and Update (10 fields of 100 bytes, all read, all updated) on the
    /// document layer: mean latency and round trips (000 Table 3.4).
    YcsbLatency(YcsbLatencyArgs),
}

fn parse_layout(s: &str) -> Result<LayoutKind, String> {
    LayoutKind::parse(s).ok_or_else(|| format!("unknown layout {s:?} (documents, sql)"))
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Policies to run in turn: none, write-around, write-through, write-back (or all).
    #[arg(long, default_value = "all")]
    policy: String,
    /// Data store URL: sqlite:PATH, postgres://..., mysql://... [default: SQLite in a temp dir]
    #[arg(long)]
    store: Option<String>,
    /// CMIs: embedded:N (started here in each policy's lease mode) or host:port,...
    #[arg(long, default_value = "embedded:2")]
    cache: String,
    /// Mix: 90, 99, 99.9 (000 Table 3.5, percent of reads) or 10:1, 100:1, 1000:1 (001 Table 1).
    #[arg(long, default_value = "90")]
    workload: String,
    /// Implementation of the actions: documents (every policy) or sql (001's key layouts).
    #[arg(long, default_value = "documents", value_parser = parse_layout)]
    layout: LayoutKind,
    /// Threads issuing actions (ignored with --soar).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Length of a run, or of each run of the SoAR search (8s, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Members of the social graph.
    #[arg(long, default_value_t = 10_000)]
    members: u32,
    /// Confirmed friends per member (even).
    #[arg(long, default_value_t = 10)]
    friends: u32,
    /// Pending invitations each member has received at load time.
    #[arg(long, default_value_t = 5)]
    pending: u32,
    /// How members are chosen: dzipfian (BG's, mean 0.27), dzipfian:MEAN or uniform.
    #[arg(long, default_value = "dzipfian", value_parser = Popularity::parse)]
    distribution: Popularity,
    /// Find the SoAR: double the threads until the SLA fails, then bisect.
    #[arg(long)]
    soar: bool,
    /// First thread count of the search.
    #[arg(long, default_value_t = 1)]
    soar_start: usize,
    /// Thread count where the search stops doubling.
    #[arg(long, default_value_t = 1024)]
    max_threads: usize,
    /// SLA: the latency most actions must meet.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    sla_latency: Duration,
    /// SLA: the share of actions that must meet it.
    #[arg(long, default_value_t = 0.95)]
    sla_satisfied: f64,
    /// SLA: the largest share of stale reads.
    #[arg(long, default_value_t = 0.0001)]
    sla_stale: f64,
    /// Write-back background workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Skip the warm-up (start with a cold cache).
    #[arg(long)]
    cold: bool,
    /// Runs of each policy (interleaved); the summary shows medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Seed of the generators.
    #[arg(long, default_value_t = 0x0B6_5EED)]
    seed: u64,
    /// maxmemory of each embedded CMI.
    #[arg(long)]
    maxmemory: Option<String>,
    /// max-pinned-memory of each embedded CMI.
    #[arg(long)]
    max_pinned_memory: Option<String>,
    /// Writes skip the cache (a deliberately wrong policy, to see the validator catch it).
    #[arg(long)]
    broken: bool,
    /// File for every record in one JSON array.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Where to measure single actions.
#[derive(Args, Debug)]
struct Deploy {
    /// Policies, measured side by side (interleaved): none, write-around, write-through.
    #[arg(long, default_value = "none,write-around,write-through")]
    policy: String,
    /// Data store URL. [default: SQLite in a temp dir]
    #[arg(long)]
    store: Option<String>,
    /// CMIs: embedded:N or host:port,...
    #[arg(long, default_value = "embedded:2")]
    cache: String,
    /// Measurements per policy; each cell is the median of their means.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Times each action runs per measurement.
    #[arg(long, default_value_t = 200)]
    actions: usize,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args, Debug)]
struct LatencyArgs {
    #[command(flatten)]
    deploy: Deploy,
    /// Implementation of the actions: documents or sql.
    #[arg(long, default_value = "documents", value_parser = parse_layout)]
    layout: LayoutKind,
    /// Members of the social graph.
    #[arg(long, default_value_t = 1000)]
    members: u32,
    /// Confirmed friends per member.
    #[arg(long, default_value_t = 10)]
    friends: u32,
    /// Pending invitations per member.
    #[arg(long, default_value_t = 5)]
    pending: u32,
}

#[derive(Args, Debug)]
struct YcsbLatencyArgs {
    #[command(flatten)]
    deploy: Deploy,
    /// Records in usertable.
    #[arg(long, default_value_t = 10_000)]
    records: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => run(cli.run),
        Some(Command::Latency(args)) => latency_table(args),
        Some(Command::YcsbLatency(args)) => ycsb_table(args),
    }
}

fn run(a: RunArgs) -> Result<()> {
    let opts = BgOptions {
        policies: parse_policies(&a.policy)?,
        store: a.store,
        cache: CacheSpec::parse(&a.cache)?,
        cmi: cads_bench::CmiSettings {
            maxmemory: a.maxmemory,
            max_pinned_memory: a.max_pinned_memory,
            ..cads_bench::CmiSettings::default()
        },
        workload: a.workload,
        layout: a.layout,
        threads: a.threads,
        duration: a.duration,
        members: a.members,
        friends: a.friends,
        pending: a.pending,
        popularity: a.distribution,
        soar: a.soar,
        sla: Sla {
            satisfied: a.sla_satisfied,
            latency: a.sla_latency,
            max_stale: a.sla_stale,
        },
        soar_start: a.soar_start,
        max_threads: a.max_threads,
        workers: a.workers,
        warm: !a.cold,
        repeat: a.repeat,
        seed: a.seed,
        json: a.json,
        broken: a.broken,
        ..BgOptions::default()
    };
    let records = run_bg(&opts, &print_progress)?;
    for r in &records {
        let examples = r.stale_examples.iter().chain(&r.lost_examples);
        let cached = r.cache_check.iter().flat_map(|c| &c.examples);
        for e in examples.chain(cached) {
            eprintln!("{} #{}: {e}", r.policy, r.run);
        }
        for e in &r.errors {
            eprintln!("{} #{}: error: {e}", r.policy, r.run);
        }
        if let Some(s) = &r.soar {
            let probes: Vec<String> = s
                .probes
                .iter()
                .map(|p| {
                    let verdict = if p.meets_sla { "ok" } else { "fails" };
                    format!("T={} {:.0}/s {verdict}", p.threads, p.throughput)
                })
                .collect();
            eprintln!("{} #{} search: {}", r.policy, r.run, probes.join(", "));
        }
    }
    print!("{}", render_summary(&summarize(&records), opts.soar));
    Ok(())
}

/// The store of a latency table, and the temporary directory holding the default SQLite file.
fn open_store(
    url: Option<&str>,
) -> Result<(Arc<dyn DataStore>, String, Option<tempfile::TempDir>)> {
    let (url, dir) = match url {
        Some(url) => (url.to_string(), None),
        None => {
            let dir = tempfile::tempdir().context("creating a temporary directory")?;
            let url = format!("sqlite:{}", dir.path().join("bg.db").display());
            (url, Some(dir))
        }
    };
    let store = cads_store::open(&url, &StoreOptions::default())
        .with_context(|| format!("cannot open the data store {}", redact(&url)))?;
    Ok((store, url, dir))
}

fn print_table(title: String, columns: &[(Policy, Vec<Row>)]) {
    println!(
        "{title}\nEach cell: mean ms (round trips per action = cache + data store).\n\n{}",
        latency::table(columns)
    );
}

fn latency_table(a: LatencyArgs) -> Result<()> {
    let graph = GraphParams {
        members: a.members,
        friends: a.friends,
        pending: a.pending,
    };
    graph.check()?;
    let d = &a.deploy;
    let (store, url, _dir) = open_store(d.store.as_deref())?;
    let cache = CacheSpec::parse(&d.cache)?;
    let columns = latency::interleaved(&parse_policies(&d.policy)?, d.repeat, |policy, r| {
        eprintln!("measuring {} ({}/{})", policy.name(), r + 1, d.repeat);
        let seed = d.seed.wrapping_add(r as u64);
        latency::measure_actions(policy, a.layout, &store, &cache, &graph, d.actions, seed)
    })?;
    print_table(
        format!(
            "BG actions, layout {}, store {}, cache {}, {} members (φ = {}), {} of each action \
             per measurement, median of {} measurement(s).",
            a.layout,
            redact(&url),
            cache.describe(),
            graph.members,
            graph.friends,
            d.actions,
            d.repeat
        ),
        &columns,
    );
    Ok(())
}

fn ycsb_table(a: YcsbLatencyArgs) -> Result<()> {
    let d = &a.deploy;
    let (store, url, _dir) = open_store(d.store.as_deref())?;
    let cache = CacheSpec::parse(&d.cache)?;
    let columns = latency::interleaved(&parse_policies(&d.policy)?, d.repeat, |policy, r| {
        eprintln!("measuring {} ({}/{})", policy.name(), r + 1, d.repeat);
        let seed = d.seed.wrapping_add(r as u64);
        latency::measure_ycsb(policy, &store, &cache, a.records, d.actions, seed)
    })?;
    print_table(
        format!(
            "YCSB on the document layer, store {}, cache {}, {} records of 10 fields x 100 bytes, \
             {} reads and {} updates per measurement, median of {} measurement(s).",
            redact(&url),
            cache.describe(),
            a.records,
            d.actions,
            d.actions,
            d.repeat
        ),
        &columns,
    );
    Ok(())
}
