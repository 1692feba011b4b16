//! The JSON record of one BG run, the SoAR search's, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::options::{ConfigRecord, Sla};
use crate::cpu::CpuRecord;
use crate::ycsb::{human_bytes, Keyspace, LatencySummary, StoreCalls, WriteBackRecord};

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

/// The record of one run of one policy (with `--soar`, of the search): what `--json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct BgRecord {
    /// `"bg"`.
    pub benchmark: &'static str,
    /// The mix (`90`, `99`, `99.9`, `10:1`, `100:1`, `1000:1`).
    pub workload: String,
    /// The policy (`none`, `write-around`, `write-through`, `write-back`).
    pub policy: String,
    /// The data store's URL, password hidden.
    pub store: String,
    /// `documents` or `sql`.
    pub layout: String,
    /// Which run of this policy (0-based; see `--repeat`).
    pub run: usize,
    /// Threads that issued actions.
    pub threads: usize,
    /// Seconds the run lasted.
    pub elapsed_s: f64,
    /// Actions completed.
    pub actions: u64,
    /// Actions that failed (after the framework's retries).
    pub failed: u64,
    /// Write actions not issued because no valid pair of free members was found in a few tries.
    pub skipped: u64,
    /// Completed actions per second.
    pub throughput: f64,
    /// Latency per action (`VP`, `LF`, `VFR`, `IF`, `AFR`, `RFR`, `TF`), whole sessions with
    /// their retries.
    pub latency_us: BTreeMap<String, LatencySummary>,
    /// Latency of all actions together.
    pub latency_all_us: LatencySummary,
    /// Failures per action.
    pub failed_by_action: BTreeMap<String, u64>,
    /// The first few errors, described.
    pub errors: Vec<String>,
    /// Share of the actions (failed ones included) that finished within the SLA's latency.
    pub satisfied: f64,
    /// Share of the count reads that were stale.
    pub stale_share: f64,
    /// Whether the run met the SLA.
    pub meets_sla: bool,
    /// Read actions answered without a data-store call / read actions, counted by the driver
    /// (a read that queried the data store for any key is a miss). `None` without a cache.
    pub hit_ratio: Option<f64>,
    /// Read actions through the cache.
    pub cache_reads: u64,
    /// Of those, the ones that called the data store.
    pub cache_misses: u64,
    /// The CMIs' own counters, for reference (they count write-back's bookkeeping too).
    pub keyspace: Option<Keyspace>,
    /// Friend and pending counts read and validated.
    pub reads: u64,
    /// Reads that showed a count no serial order allows.
    pub stale_reads: u64,
    /// The first few stale reads, described.
    pub stale_examples: Vec<String>,
    /// Members whose counts in the data store (after write-back's drain) are not their counts
    /// before the run plus every acknowledged write.
    pub lost_writes: u64,
    /// The first few, described.
    pub lost_examples: Vec<String>,
    /// Members left out of writes after a write of theirs ended with an unknown outcome.
    pub frozen_members: usize,
    /// The cache against the data store after the policy's last run (None without a cache).
    pub cache_check: Option<CacheCheck>,
    /// Data-store calls during the run (benchmark threads and write-back's workers).
    pub store_calls: StoreCalls,
    /// Cache round trips during the run.
    pub cache_round_trips: u64,
    /// CPU use during the run (Linux).
    pub cpu: Option<CpuRecord>,
    /// Seconds the load took.
    pub load_s: f64,
    /// Seconds the warm-up took, if any.
    pub warm_s: Option<f64>,
    /// Write-back's activity (write-back only).
    pub write_back: Option<WriteBackRecord>,
    /// The SoAR search (`--soar`).
    pub soar: Option<SoarRecord>,
    /// The full configuration.
    pub config: ConfigRecord,
}

impl BgRecord {
    /// The run as a probe of the SoAR search.
    pub fn probe(&self) -> Probe {
        Probe {
            threads: self.threads,
            throughput: self.throughput,
            satisfied: self.satisfied,
            p95_us: self.latency_all_us.p95,
            reads: self.reads,
            stale_reads: self.stale_reads,
            lost_writes: self.lost_writes,
            failed: self.failed,
            meets_sla: self.meets_sla,
        }
    }

    /// Stale reads and lost writes (of every run of a search) and cached keys that differ from
    /// the data store.
    pub fn anomalies(&self) -> u64 {
        let runs = match &self.soar {
            Some(search) => search
                .probes
                .iter()
                .map(|p| p.stale_reads + p.lost_writes)
                .sum(),
            None => self.stale_reads + self.lost_writes,
        };
        runs + self.cache_check.as_ref().map_or(0, |c| c.mismatches)
    }
}

/// The median, `None` for no values.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (n > 0).then(|| (values[(n - 1) / 2] + values[n / 2]) / 2.0)
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
    /// Median threads (Socialites, with a search).
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
    let mut groups: Vec<((&str, &str), Vec<&BgRecord>)> = Vec::new();
    for r in records {
        let key = (r.workload.as_str(), r.policy.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runs)) => runs.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let mut out: Vec<BgSummary> = groups
        .into_iter()
        .map(|((workload, policy), runs)| {
            let of = |f: &dyn Fn(&BgRecord) -> Option<f64>| {
                median(runs.iter().filter_map(|r| f(r)).collect())
            };
            let throughputs: Vec<f64> = runs.iter().map(|r| r.throughput).collect();
            BgSummary {
                workload: workload.to_string(),
                policy: policy.to_string(),
                runs: runs.len(),
                throughput: median(throughputs.clone()).unwrap_or(0.0),
                throughputs,
                threads: of(&|r| Some(r.threads as f64)).unwrap_or(0.0),
                p95_us: of(&|r| Some(r.latency_all_us.p95 as f64)).unwrap_or(0.0),
                hit_ratio: of(&|r| r.hit_ratio),
                anomalies: runs.iter().map(|r| r.anomalies()).sum(),
                applied_share: of(&|r| r.write_back.as_ref().map(|w| w.applied_share)),
                pinned_max: of(&|r| r.write_back.as_ref().map(|w| w.pinned_bytes.max as f64)),
                vs_none: None,
            }
        })
        .collect();
    let alone: Vec<(String, f64)> = out
        .iter()
        .filter(|s| s.policy == "none")
        .map(|s| (s.workload.clone(), s.throughput))
        .collect();
    for s in &mut out {
        if let Some((_, base)) = alone.iter().find(|(w, _)| *w == s.workload) {
            s.vs_none = Some(s.throughput / base);
        }
    }
    out
}

/// The summary as a Markdown table; `soar` names the throughput column after the search.
pub fn render_summary(summaries: &[BgSummary], soar: bool) -> String {
    let (rate, threads) = if soar {
        ("SoAR actions/s", "socialites")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
