//! `cads`: one command for the cads tools. `cads server` starts CMIs with the same flags as
//! `cads-server`; `cads coord` runs Gemini's coordinator over them; `cads bench` runs a benchmark against any policy, data store and cache;
//! `cads demo` shows what each policy buys on this machine with nothing installed; `cads report`
//! draws charts of run records.

mod bench;
mod cmis;
mod coord;
mod demo;
mod latency;
mod progress;
mod report;

use std::process::ExitCode;

/// The cache server, the benchmarks and an SAS AppNode allocate small, short-lived buffers on
/// every request (values, documents, replies); glibc's allocator spent about a quarter of an SAS
/// AppNode's CPU on them (docs/RESULTS.md, "SAS against CS").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Result;
use cads_server::{init_logging, Config, Options, Server};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "cads",
    version,
    about = "cads: a cache-augmented data store",
    long_about = "cads: a cache-augmented data store. Cache manager instances (CMIs) in front of \
                  a SQL data store, kept consistent with it by leases under write-around, \
                  write-through or write-back.\n\nStart with `cads demo`.",
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Start cache manager instances (CMIs): the same flags as `cads-server`.
    Server {
        #[command(flatten)]
        options: Options,
    },
    /// Gemini's coordinator (004) over running CMIs: detects failed instances by leases, moves
    /// their fragments to others with dirty lists, repairs them when they return, and stores
    /// every configuration on the instances for clients (`cads::Config::gemini`). `cads coord
    /// status` prints the configuration. Stops on SIGINT or SIGTERM.
    Coord(coord::CoordArgs),
    /// Run a benchmark (YCSB, BG or TPC-C) under each policy: progress on standard error, a
    /// summary table on standard output. Exits with status 1 if a run read a stale value, lost
    /// a write or broke a consistency condition.
    Bench(bench::BenchArgs),
    /// About a minute on the embedded default (SQLite, two CMIs in this process): YCSB
    /// Workloads A and B on the data store alone and under write-around, write-through and
    /// write-back, every read validated; prints a table and writes records and charts to --out.
    /// Exits with status 1 if a run read a stale value or lost a write.
    Demo(demo::DemoArgs),
    /// Draw charts of the run records (JSON) in a directory, as PNG and SVG: throughput by
    /// policy, latency percentiles by policy, write-back's pinned memory (and applied share,
    /// when the records sample it) over time, dirty documents and throughput around a
    /// data-store outage, and the hit ratio of cache instances that failed (Gemini).
    Report(report::ReportArgs),
}

fn run(command: Commands) -> Result<bool> {
    match command {
        Commands::Server { options } => {
            let config = Config::resolve(options.with_file()?)?;
            init_logging(&config.log_level);
            Server::serve_until_signal(config)?;
            Ok(true)
        }
        Commands::Coord(args) => coord::run(&args),
        Commands::Bench(args) => bench::run(&args),
        Commands::Demo(args) => demo::run(&args),
        Commands::Report(args) => report::run(&args).map(|()| true),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(true) => ExitCode::SUCCESS,
        // What was inconsistent has been printed.
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cads: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
