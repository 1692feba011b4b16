//! `cads bench bg-latency` and `cads bench ycsb-latency`: single actions on one thread, their
//! mean latency and round trips per policy, in the shape of 000 Table 3.6 (BG's actions) and
//! Table 3.4 (YCSB's Read and Update on the document layer).

use anyhow::{Context, Result};
use cads::store::StoreOptions;
use cads::Policy;
use cads_bench::bg::{GraphParams, LayoutKind};
use cads_bench::deploy::{redact, store_url};
use cads_bench::latency::{self, Column, Row, Site};
use cads_bench::CacheSpec;
use clap::Args;

use crate::bench::{parse_layout, Policies};
use crate::cmis::ThisProgram;

/// Where single actions are measured.
#[derive(Args, Debug)]
pub struct Deploy {
    /// Policies, measured side by side (interleaved): none, write-around, write-through.
    #[arg(long, value_name = "LIST", default_value = "none,write-around,write-through",
          value_parser = crate::bench::policy_list)]
    pub policy: Policies,
    /// Data store: sqlite:PATH, postgres://... or mysql://... [default: a SQLite file in a
    /// temporary directory, removed afterwards]
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Cache: embedded:N (started in this process in each policy's lease mode) or
    /// host:port,host:port,...
    #[arg(long, value_name = "SPEC", default_value = "embedded:2", value_parser = CacheSpec::parse)]
    pub cache: CacheSpec,
    /// Measurements per policy; each cell is the median of their means.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: usize,
    /// Times each action runs per measurement.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub actions: usize,
    /// Seed of the random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `cads bench bg-latency`.
#[derive(Args, Debug)]
pub struct BgLatencyArgs {
    #[command(flatten)]
    pub deploy: Deploy,
    /// Implementation of the actions: documents or sql.
    #[arg(long, default_value = "documents", value_parser = parse_layout)]
    pub layout: LayoutKind,
    /// Members of the social graph.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub members: u32,
    /// Confirmed friends per member.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub friends: u32,
    /// Pending invitations per member.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub pending: u32,
}

/// `cads bench ycsb-latency`.
#[derive(Args, Debug)]
pub struct YcsbLatencyArgs {
    #[command(flatten)]
    pub deploy: Deploy,
    /// Records in usertable.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub records: u64,
}

fn print_table(title: String, columns: &[Column]) {
    println!(
        "{title}\nEach cell: mean ms (round trips per action = cache + data store).\n\n{}",
        latency::table(columns)
    );
}

/// Measures every policy with `measure` (the policy, the data store, the seed), interleaved
/// `--repeat` times; returns the columns and the store's URL.
fn measure(
    d: &Deploy,
    name: &str,
    measure: impl Fn(Policy, &Site<'_>, u64) -> Result<Vec<Row>>,
) -> Result<(Vec<Column>, String)> {
    let (url, _scratch) = store_url(&d.store, name)?;
    let site = Site {
        store: cads::store::open(&url, &StoreOptions::default())
            .with_context(|| format!("cannot open the data store {}", redact(&url)))?,
        cache: &d.cache,
        launcher: &ThisProgram,
    };
    let columns = latency::interleaved(&d.policy.0, d.repeat, |policy, r| {
        eprintln!("measuring {} ({}/{})", policy.name(), r + 1, d.repeat);
        measure(policy, &site, d.seed.wrapping_add(r as u64))
    })?;
    Ok((columns, redact(&url)))
}

/// `cads bench bg-latency`.
pub fn bg(a: &BgLatencyArgs) -> Result<()> {
    let graph = GraphParams {
        members: a.members,
        friends: a.friends,
        pending: a.pending,
    };
    graph.check()?;
    let d = &a.deploy;
    let (columns, url) = measure(d, "bg", |policy, site, seed| {
        latency::measure_actions(policy, a.layout, site, &graph, d.actions, seed)
    })?;
    print_table(
        format!(
            "BG actions, layout {}, store {url}, cache {}, {} members (φ = {}), {} of each action \
             per measurement, median of {} measurement(s).",
            a.layout,
            d.cache.describe(),
            graph.members,
            graph.friends,
            d.actions,
            d.repeat
        ),
        &columns,
    );
    Ok(())
}

/// `cads bench ycsb-latency`.
pub fn ycsb(a: &YcsbLatencyArgs) -> Result<()> {
    let d = &a.deploy;
    let (columns, url) = measure(d, "ycsb", |policy, site, seed| {
        latency::measure_ycsb(policy, site, a.records, d.actions, seed)
    })?;
    print_table(
        format!(
            "YCSB on the document layer, store {url}, cache {}, {} records of 10 fields x 100 \
             bytes, {} reads and {} updates per measurement, median of {} measurement(s).",
            d.cache.describe(),
            a.records,
            d.actions,
            d.actions,
            d.repeat
        ),
        &columns,
    );
    Ok(())
}
