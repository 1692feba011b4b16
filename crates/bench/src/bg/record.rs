//! The JSON record of one BG run, the SoAR search's, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::options::{ConfigRecord, Sla};
use crate::harness::{
    by_workload_and_policy, human_bytes, median, ratios_to, LatencySummary, Record, Validated,
};

/// What the comparison of the cache with the data store found at the end of a policy's runs:
/// every cache key a member may have, looked up without leases, and each one cached compared
/// with what a read would fill it with from the data store now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CacheCheck {
    /// Keys looked up.
    pub keys: u64,
    /// Of those, keys the cache held.
    pub cached: u64,
    /// Cached keys whose value differs from the data store's.
    pub mismatches: u64,
    /// Lost cache commits whose keys the framework could not invalidate, since the framework
    /// started (load, warm-up and every run); each made it mark the keys' CMIs missed.
    pub invalidations_failed: u64,
    /// CMIs flushed before the comparison because they were marked missed, by a failed
    /// invalidation or a write while unreachable (sessions flush them on their own; none runs at
    /// the check).
    pub flushed_cmis: usize,
    /// The first few, described.
    pub examples: Vec<String>,
}

/// One run of the SoAR search.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    /// Threads issuing actions.
    pub threads: usize,
    /// Completed actions per second.
    pub throughput: f64,
    /// Share of the actions (failed ones included) that finished within the SLA's latency.
    pub satisfied: f64,
    /// 95th percentile latency of all actions, µs.
    pub p95_us: u64,
    /// Count reads validated.
    pub reads: u64,
    /// Of those, stale.
    pub stale_reads: u64,
    /// Members whose counts in the data store were wrong after the run.
    pub lost_writes: u64,
    /// Actions that failed.
    pub failed: u64,
    /// Whether the run met the SLA.
    pub meets_sla: bool,
}

/// The outcome of the SoAR search (benchmarks.md Part B §2): thread counts doubled until the SLA
/// failed, then bisected between the last that met it and the first that did not.
#[derive(Clone, Debug, Serialize)]
pub struct SoarRecord {
    /// The SLA searched with.
    pub sla: Sla,
    /// Actions per second at the highest thread count that met the SLA (0 if none did). The
    /// record's other fields are that run's.
    pub soar: f64,
    /// That thread count (BG's Socialites; 0 if none met the SLA).
    pub socialites: usize,
    /// The highest throughput of any run that met the SLA, and its threads (with noise, a lower
    /// thread count may have done better than `socialites`).
    pub best_throughput: f64,
    /// Threads of `best_throughput`.
    pub best_threads: usize,
    /// Whether a thread count that fails the SLA was found; `false` when the SLA still held at
    /// `--max-threads`, so the SoAR may be higher.
    pub bounded: bool,
    /// Every run of the search, in the order they ran.
    pub probes: Vec<Probe>,
}

/// BG's part of a run record (flattened into it).
#[derive(Clone, Debug, Serialize)]
pub struct BgRun {
    /// `documents` or `sql`.
    pub layout: String,
    /// Actions completed.
    pub actions: u64,
    /// Write actions not issued because no valid pair of free members was found in a few tries.
    pub skipped: u64,
    /// Latency of all actions together.
    pub latency_all_us: LatencySummary,
    /// Failures per action (`VP`, `LF`, `VFR`, `IF`, `AFR`, `RFR`, `TF`).
    pub failed_by_action: BTreeMap<String, u64>,
    /// Share of the actions (failed ones included) that finished within the SLA's latency.
    pub satisfied: f64,
    /// Share of the count reads that were stale.
    pub stale_share: f64,
    /// Whether the run met the SLA.
    pub meets_sla: bool,
    /// The counts read validated, the members' final counts checked.
    #[serde(flatten)]
    pub validated: Validated,
    /// Members left out of writes after a write of theirs ended with an unknown outcome.
    pub frozen_members: usize,
    /// The cache against the data store after the policy's last run (None without a cache).
    pub cache_check: Option<CacheCheck>,
    /// The SoAR search (`--soar`).
    pub soar: Option<SoarRecord>,
}

/// The record of one run of one policy (with `--soar`, of the search): what `--json` writes.
pub type BgRecord = Record<BgRun, ConfigRecord>;

impl BgRecord {
    /// The run as a probe of the SoAR search.
    pub fn probe(&self) -> Probe {
        Probe {
            threads: self.threads,
            throughput: self.throughput,
            satisfied: self.detail.satisfied,
            p95_us: self.detail.latency_all_us.p95,
            reads: self.detail.validated.reads,
            stale_reads: self.stale_reads,
            lost_writes: self.detail.validated.lost_writes,
            failed: self.failed,
            meets_sla: self.detail.meets_sla,
        }
    }

    /// The throughput and threads the summary shows: with a search, the SoAR (the highest
    /// throughput of a probe that met the SLA, which need not be the run at the most threads
    /// that met it) and its probe's threads.
    fn soar_or_throughput(&self) -> (f64, usize) {
        match &self.detail.soar {
            Some(s) => (s.best_throughput, s.best_threads),
            None => (self.throughput, self.threads),
        }
    }

    /// Stale reads and lost writes (of every run of a search) and cached keys that differ from
    /// the data store.
    pub fn anomalies(&self) -> u64 {
        let runs = match &self.detail.soar {
            Some(search) => search
                .probes
                .iter()
                .map(|p| p.stale_reads + p.lost_writes)
                .sum(),
            None => self.stale_reads + self.detail.validated.lost_writes,
        };
        runs + self.detail.cache_check.as_ref().map_or(0, |c| c.mismatches)
    }
}

/// The medians of one policy's runs of one mix.
#[derive(Clone, Debug, Serialize)]
pub struct BgSummary {
    /// The mix.
    pub workload: String,
    /// The policy.
    pub policy: String,
    /// Runs summarised.
    pub runs: usize,
    /// Median throughput (the SoAR, with a search).
    pub throughput: f64,
    /// Every run's.
    pub throughputs: Vec<f64>,
    /// Median threads (of the SoAR's probe, with a search).
    pub threads: f64,
    /// Median p95 latency of all actions, µs.
    pub p95_us: f64,
    /// Median hit ratio.
    pub hit_ratio: Option<f64>,
    /// Stale reads, lost writes and differing cached keys, summed over the runs (and probes).
    pub anomalies: u64,
    /// Median share of buffered operations applied by the end of a run (write-back).
    pub applied_share: Option<f64>,
    /// Median of the runs' largest pinned-memory sample (write-back).
    pub pinned_max: Option<f64>,
    /// Median throughput over the data store alone's, when `none` ran.
    pub vs_none: Option<f64>,
}

/// Medians per (mix, policy), in the order the records first name them.
pub fn summarize(records: &[BgRecord]) -> Vec<BgSummary> {
    let mut out: Vec<BgSummary> = by_workload_and_policy(records)
        .into_iter()
        .map(|((workload, policy), runs)| {
            let of = |f: &dyn Fn(&BgRecord) -> Option<f64>| {
                median(runs.iter().filter_map(|r| f(r)).collect())
            };
            let throughputs: Vec<f64> = runs.iter().map(|r| r.soar_or_throughput().0).collect();
            BgSummary {
                workload: workload.to_string(),
                policy: policy.to_string(),
                runs: runs.len(),
                throughput: median(throughputs.clone()).unwrap_or(0.0),
                throughputs,
                threads: of(&|r| Some(r.soar_or_throughput().1 as f64)).unwrap_or(0.0),
                p95_us: of(&|r| Some(r.detail.latency_all_us.p95 as f64)).unwrap_or(0.0),
                hit_ratio: of(&|r| r.hit_ratio),
                anomalies: runs.iter().map(|r| r.anomalies()).sum(),
                applied_share: of(&|r| r.write_back.as_ref().map(|w| w.applied_share)),
                pinned_max: of(&|r| r.write_back.as_ref().map(|w| w.pinned_bytes.max as f64)),
                vs_none: None,
            }
        })
        .collect();
    let rows: Vec<(&str, &str, f64)> = out
        .iter()
        .map(|s| (s.workload.as_str(), s.policy.as_str(), s.throughput))
        .collect();
    let ratios = ratios_to(&rows, "none");
    for (s, ratio) in out.iter_mut().zip(ratios) {
        s.vs_none = ratio;
    }
    out
}

/// The summary as a Markdown table; `soar` names the throughput column after the search.
pub fn render_summary(summaries: &[BgSummary], soar: bool) -> String {
    let (rate, threads) = if soar {
        ("SoAR actions/s", "at threads")
    } else {
        ("actions/s", "threads")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| mix | policy | runs | {rate} (median) | vs none | {threads} | p95 ms | hit ratio | \
         anomalies | applied share | pinned max |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {} | {} | {:.1} | {} | {} | {} | {} |",
            s.workload,
            s.policy,
            s.runs,
            s.throughput,
            s.vs_none.map_or("-".into(), |r| format!("{r:.2}x")),
            s.threads,
            s.p95_us / 1e3,
            s.hit_ratio
                .map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
            s.anomalies,
            s.applied_share
                .map_or("-".into(), |a| format!("{:.1}%", a * 100.0)),
            s.pinned_max.map_or("-".into(), |p| human_bytes(p as u64)),
        );
    }
    out
}
