//! `bg`: the BG social graph on cads. See `bg --help` and examples/bg/README.md.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cads::Policy;
use cads_example_bg::deploy::redact;
use cads_example_bg::latency::{self, YcsbParams};
use cads_example_bg::{
    layout, prepare, run, CacheSpec, Deployment, GraphParams, LayoutKind, Mix, RunOptions,
};
use clap::{Args, Parser, Subcommand};
use tempfile::TempDir;

/// The BG social graph (001 §3) on cads: members, friendships and invitations, the seven
/// core actions, validated reads, and latency tables in the shape of 000 Tables 3.4 and 3.6.
///
/// With no options it runs on SQLite in a temporary directory with two CMIs started in this
/// process.
#[derive(Parser, Debug)]
#[command(name = "bg", version, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a mix of actions on several threads, validate every friend and pending count read
    /// against the writes logged with their times, and compare every cached key with the data
    /// store at the end. Exits with status 1 if any read was stale or any cached key differs.
    Run(RunArgs),
    /// One thread, each of the seven actions N times on a warm cache: mean latency and mean
    /// round trips per action (000 Table 3.6).
    Latency(LatencyArgs),
    /// One thread, YCSB Read and Update (all 10 fields of 100 bytes) on the document layer:
    /// mean latency and round trips (000 Table 3.4).
    Ycsb(YcsbArgs),
}

#[derive(Args, Debug)]
struct Deploy {
    /// Data store URL: sqlite:PATH, postgres://USER:PASS@HOST:PORT/DB or
    /// mysql://USER:PASS@HOST:PORT/DB. Its bg_* tables (or usertable) are dropped and
    /// reloaded. [default: a SQLite file in a new temporary directory, removed at exit]
    #[arg(long, value_name = "URL")]
    store: Option<String>,

    /// CMIs to start in this process, on loopback and free ports, in the policy's lease mode.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    cmis: u16,

    /// Use running CMIs instead of starting them: HOST:PORT,HOST:PORT,... They must run in the
    /// policy's lease mode (`cads server --mode write-around` or `--mode write-through`) and are
    /// flushed (FLUSHALL) after loading.
    #[arg(long, value_name = "LIST", conflicts_with = "cmis")]
    cache: Option<String>,

    /// Seed of the random choices.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
}

impl Deploy {
    fn cache(&self) -> Result<CacheSpec> {
        match &self.cache {
            Some(list) => CacheSpec::parse_external(list),
            None => Ok(CacheSpec::Embedded {
                cmis: usize::from(self.cmis),
            }),
        }
    }

    /// The store URL, and the temporary directory that holds the default SQLite file.
    fn store(&self) -> Result<(String, Option<TempDir>)> {
        if let Some(url) = &self.store {
            return Ok((url.clone(), None));
        }
        let dir = tempfile::Builder::new()
            .prefix("cads-bg-")
            .tempdir()
            .context("cannot create a temporary directory for the SQLite database")?;
        let url = format!("sqlite:{}", dir.path().join("bg.db").display());
        Ok((url, Some(dir)))
    }
}

#[derive(Args, Debug)]
struct Graph {
    /// Members in the social graph.
    #[arg(long, value_name = "M", default_value_t = 1000)]
    members: u32,

    /// Confirmed friends per member (φ; even): member i is a friend of i±1 ..= i±φ/2.
    #[arg(long, value_name = "PHI", default_value_t = 10)]
    friends: u32,

    /// Pending invitations each member has received (and sent) at load time.
    #[arg(long, value_name = "P", default_value_t = 5)]
    pending: u32,
}

impl Graph {
    fn params(&self) -> Result<GraphParams> {
        let g = GraphParams {
            members: self.members,
            friends: self.friends,
            pending: self.pending,
        };
        g.check()?;
        Ok(g)
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    Policy::parse(s)
        .ok_or_else(|| format!("unknown policy {s:?} (none, write-around, write-through)"))
}

fn parse_layout(s: &str) -> Result<LayoutKind, String> {
    LayoutKind::parse(s).ok_or_else(|| format!("unknown layout {s:?} (documents, sql)"))
}

fn parse_mix(s: &str) -> Result<Mix, String> {
    Mix::parse(s).ok_or_else(|| format!("unknown mix {s:?} (90, 99, 99.9: percent of reads)"))
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Write policy: none (the data store alone), write-around or write-through.
    #[arg(long, value_name = "POLICY", default_value = "write-around", value_parser = parse_policy)]
    policy: Policy,

    /// Implementation of the actions: documents (the document layer, one document per member)
    /// or sql (tables and CacheStores with the key layouts of 001 Tables 2-6).
    #[arg(long, value_name = "LAYOUT", default_value = "documents", value_parser = parse_layout)]
    layout: LayoutKind,

    /// Threads issuing actions.
    #[arg(long, value_name = "T", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,

    /// How long to issue actions, in seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    seconds: f64,

    /// Action mix of 000 Table 3.5, by percent of reads: 90, 99 or 99.9.
    #[arg(long, value_name = "MIX", default_value = "90", value_parser = parse_mix)]
    mix: Mix,

    /// Deliberately wrong writes that skip the cache (no invalidation, no update), to see the
    /// validator report stale reads.
    #[arg(long)]
    broken: bool,

    #[command(flatten)]
    graph: Graph,

    #[command(flatten)]
    deploy: Deploy,
}

#[derive(Args, Debug)]
struct LatencyArgs {
    /// Write policy: none, write-around or write-through (ignored with --all-policies).
    #[arg(long, value_name = "POLICY", default_value = "write-around", value_parser = parse_policy)]
    policy: Policy,

    /// Measure none, write-around and write-through side by side (interleaved, each on a fresh
    /// load and fresh embedded CMIs) and print one table.
    #[arg(long, conflicts_with = "cache")]
    all_policies: bool,

    /// Implementation of the actions: documents or sql.
    #[arg(long, value_name = "LAYOUT", default_value = "documents", value_parser = parse_layout)]
    layout: LayoutKind,

    /// Times each action is run per measurement.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    actions: u32,

    /// Measurements per policy; each cell is the median of their means.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,

    #[command(flatten)]
    graph: Graph,

    #[command(flatten)]
    deploy: Deploy,
}

#[derive(Args, Debug)]
struct YcsbArgs {
    /// Write policy: none, write-around or write-through (ignored with --all-policies).
    #[arg(long, value_name = "POLICY", default_value = "write-around", value_parser = parse_policy)]
    policy: Policy,

    /// Measure none, write-around and write-through side by side and print one table.
    #[arg(long, conflicts_with = "cache")]
    all_policies: bool,

    /// Records in usertable.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    records: u32,

    /// Reads and updates per measurement.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    actions: u32,

    /// Measurements per policy; each cell is the median of their means.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,

    #[command(flatten)]
    deploy: Deploy,
}

fn main() -> ExitCode {
    cads_server::init_logging(&std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()));
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(args) => run_command(args),
        Command::Latency(args) => latency_command(args).map(|()| true),
        Command::Ycsb(args) => ycsb_command(args).map(|()| true),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("bg: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn describe_cache(dep: &Deployment, spec: &CacheSpec) -> String {
    let addrs: Vec<String> = dep.cmis().iter().map(ToString::to_string).collect();
    match (dep.policy(), spec) {
        (Policy::DataStoreOnly, _) => "no cache".into(),
        (_, CacheSpec::Embedded { cmis }) => format!(
            "{cmis} embedded CMI(s) in {} mode at {}",
            dep.policy().cmi_mode(),
            addrs.join(", ")
        ),
        (_, CacheSpec::External(_)) => format!("CMIs at {}", addrs.join(", ")),
    }
}

/// `bg run`; Ok(false) when the validation found anomalies.
fn run_command(args: RunArgs) -> Result<bool> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds must be a positive number of seconds");
    }
    let graph = args.graph.params()?;
    let (url, _dir) = args.deploy.store()?;
    let spec = args.deploy.cache()?;
    let dep = Deployment::start(args.policy, &url, &spec)?;
    let layout = layout(args.layout, args.policy, args.broken);
    println!("bg run: policy {}", args.policy.name());
    println!("layout: {}", layout.describe());
    println!("store: {}", redact(&url));
    println!("cache: {}", describe_cache(&dep, &spec));
    let loaded = prepare(&dep, layout.as_ref(), &graph)?;
    println!(
        "graph: {} members, {} friends and {} pending invitations each, loaded in {:.2} s",
        graph.members,
        graph.friends,
        graph.pending,
        loaded.as_secs_f64()
    );
    let options = RunOptions {
        threads: usize::from(args.threads),
        duration: Duration::from_secs_f64(args.seconds),
        mix: args.mix,
        seed: args.deploy.seed,
    };
    println!(
        "running the {}% read mix (000 Table 3.5) on {} threads for {} s ...\n",
        args.mix.reads(),
        options.threads,
        args.seconds
    );
    let report = run(&dep, layout.as_ref(), &graph, &options)?;
    print!("{}", report.render());
    let ok = report.anomalies() == 0;
    if !ok {
        println!(
            "FAILED: {} stale reads, {} cached keys differ from the data store",
            report.validation.stale,
            report
                .cache_check
                .as_ref()
                .map_or(0, |c| c.mismatches.len())
        );
    }
    Ok(ok)
}

fn policies(all: bool, one: Policy) -> Vec<Policy> {
    if all {
        vec![
            Policy::DataStoreOnly,
            Policy::WriteAround,
            Policy::WriteThrough,
        ]
    } else {
        vec![one]
    }
}

/// Measures every policy `repeat` times, interleaved (none, around, through, none, ...), so that
/// a noisy moment hits all of them; returns each policy's medians.
fn measure_interleaved(
    policies: &[Policy],
    repeat: u32,
    mut measure: impl FnMut(Policy, u64) -> Result<Vec<latency::Row>>,
) -> Result<Vec<(Policy, Vec<latency::Row>)>> {
    let mut runs: Vec<Vec<Vec<latency::Row>>> = vec![Vec::new(); policies.len()];
    for r in 0..repeat {
        for (i, policy) in policies.iter().enumerate() {
            eprintln!("measuring {} ({}/{repeat}) ...", policy.name(), r + 1);
            let rows = measure(*policy, u64::from(r))
                .with_context(|| format!("measuring {}", policy.name()))?;
            runs[i].push(rows);
        }
    }
    Ok(policies
        .iter()
        .zip(runs)
        .map(|(p, r)| (*p, latency::median(&r)))
        .collect())
}

fn latency_command(args: LatencyArgs) -> Result<()> {
    let graph = args.graph.params()?;
    let (url, _dir) = args.deploy.store()?;
    let spec = args.deploy.cache()?;
    let policies = policies(args.all_policies, args.policy);
    let seed = args.deploy.seed;
    let columns = measure_interleaved(&policies, args.repeat, |policy, r| {
        latency::measure_bg(
            policy,
            args.layout,
            &url,
            &spec,
            &graph,
            args.actions as usize,
            seed.wrapping_add(r),
        )
    })?;
    println!(
        "BG actions, layout {}, store {}, cache {}, {} members (φ = {}), {} of each action per \
         measurement, median of {} measurement(s).\nEach cell: mean ms (round trips per action = \
         cache + data store).\n",
        args.layout,
        redact(&url),
        cache_words(&spec),
        graph.members,
        graph.friends,
        args.actions,
        args.repeat
    );
    print!("{}", latency::table(&columns));
    Ok(())
}

fn ycsb_command(args: YcsbArgs) -> Result<()> {
    let (url, _dir) = args.deploy.store()?;
    let spec = args.deploy.cache()?;
    let params = YcsbParams {
        records: args.records,
        ..YcsbParams::default()
    };
    let policies = policies(args.all_policies, args.policy);
    let seed = args.deploy.seed;
    let columns = measure_interleaved(&policies, args.repeat, |policy, r| {
        latency::measure_ycsb(
            policy,
            &url,
            &spec,
            &params,
            args.actions as usize,
            seed.wrapping_add(r),
        )
    })?;
    println!(
        "YCSB on the document layer, store {}, cache {}, {} records of {} fields x {} bytes, {} \
         reads and {} updates per measurement, median of {} measurement(s).\nEach cell: mean ms \
         (round trips per action = cache + data store).\n",
        redact(&url),
        cache_words(&spec),
        params.records,
        params.fields,
        params.field_len,
        args.actions,
        args.actions,
        args.repeat
    );
    print!("{}", latency::table(&columns));
    Ok(())
}

fn cache_words(spec: &CacheSpec) -> String {
    match spec {
        CacheSpec::Embedded { cmis } => format!("{cmis} embedded CMI(s)"),
        CacheSpec::External(a) => format!("{} external CMI(s)", a.len()),
    }
}
