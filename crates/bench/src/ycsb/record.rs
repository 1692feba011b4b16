//! The JSON record of one run, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::options::ConfigRecord;
use crate::harness::{
    self, cell, human_bytes, median_or_nan as median, row_head, LatencySummary, Record, Validated,
    WriteBackRecord,
};

/// YCSB's part of a run record (flattened into it).
#[derive(Clone, Debug, Serialize)]
pub struct YcsbRun {
    /// Operations completed in the run phase.
    pub operations: u64,
    /// Failures per operation type (`READ`, `UPDATE`, `INSERT`, `SCAN`, `READ-MODIFY-WRITE`).
    pub failed_by_operation: BTreeMap<String, u64>,
    /// The reads validated, the records' final values checked.
    #[serde(flatten)]
    pub validated: Validated,
    /// How scans work on the framework, when the workload scans.
    pub scan: Option<&'static str>,
    /// The CPR workload's Dendrite over the run (its scans' ranges).
    pub ranges: Option<RangeCounts>,
}

/// What the CPR workload's Dendrite did during the run.
#[derive(Clone, Debug, Serialize)]
pub struct RangeCounts {
    /// Scans (attempts: a scan run again after a conflict counts again).
    pub scans: u64,
    /// Of those, the ones that missed and queried the data store.
    pub scan_misses: u64,
    /// The share of scans served by a cached result.
    pub scan_hit_ratio: Option<f64>,
    /// Cached ranges (PrInT's intervals) at the end.
    pub cached_ranges: usize,
    /// Cached results the run's writes changed (write-through) or deleted (write-around).
    pub results_changed: u64,
    /// Scans that missed and writes that waited for a conflicting interval lease.
    pub lease_waits: u64,
    /// The Redis baseline's round trips to redis-server (the framework's are the record's
    /// `cache_round_trips`).
    pub redis_round_trips: u64,
    /// PrInT's log records (β = 100%): their bytes in the CMIs at the end.
    pub log_bytes: u64,
    /// Bytes appended to the logs during the run.
    pub log_appended_bytes: u64,
    /// Compactions of a log during the run.
    pub log_compactions: u64,
    /// The compacted logs' bytes before their compactions, summed.
    pub log_bytes_before_compaction: u64,
    /// And after them.
    pub log_bytes_after_compaction: u64,
}

/// What a scan of the CPR workload does on a policy CPR is built for.
pub const RANGES_NOTE: &str = "ranges of ids cached through a Dendrite (CPR)";

/// What a scan of the CPR workload does under the cache-aside policy (`redis-zindex`).
pub const ZINDEX_NOTE: &str = "ids from a sorted set on redis-server, records with MGET (002 §4.5)";

/// The record of one YCSB run of one policy: what `--json` writes, one per run.
pub type RunRecord = Record<YcsbRun, ConfigRecord>;

/// What a scan does on the framework today (also in the run record).
pub const SCAN_NOTE: &str = "ids from the data store, records through the cache";

/// The medians of one policy's runs of one workload.
#[derive(Clone, Debug, Serialize)]
pub struct PolicySummary {
    /// The workload.
    pub workload: String,
    /// The policy.
    pub policy: String,
    /// Runs summarised.
    pub runs: usize,
    /// Median throughput.
    pub throughput: f64,
    /// Every run's throughput.
    pub throughputs: Vec<f64>,
    /// Median p50 and p99 latency per operation type (µs).
    pub latency_p50_p99: BTreeMap<String, (f64, f64)>,
    /// Median hit ratio.
    pub hit_ratio: Option<f64>,
    /// Stale reads summed over the runs.
    pub stale_reads: u64,
    /// Lost writes summed over the runs.
    pub lost_writes: u64,
    /// Median data-store calls per operation.
    pub store_calls_per_operation: f64,
    /// Median cache round trips per operation (write-back's workers included).
    pub cache_round_trips_per_operation: f64,
    /// Median CPU µs per operation of this process (clients, embedded CMIs, workers) and of the
    /// data store's server, when measured.
    pub cpu_us_per_operation: Option<(f64, f64)>,
    /// Median share of the machine's CPU that was busy.
    pub machine_busy: Option<f64>,
    /// Write-back: median applied share (operations) at the end of the runs.
    pub applied_share: Option<f64>,
    /// Write-back: median of the runs' largest pinned-memory sample.
    pub pinned_max: Option<f64>,
    /// Median throughput over write-through's median, when write-through ran.
    pub vs_write_through: Option<f64>,
}

/// Median CPU µs per operation (this process, the data store's server) over the runs that
/// measured it.
fn cpu_per_op(runs: &[&RunRecord]) -> Option<(f64, f64)> {
    let per_op: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| {
            let c = r.cpu?;
            let ops = r.detail.operations.max(1) as f64;
            Some((c.process_s * 1e6 / ops, c.data_store_s * 1e6 / ops))
        })
        .collect();
    (!per_op.is_empty()).then(|| {
        (
            median(per_op.iter().map(|c| c.0).collect()),
            median(per_op.iter().map(|c| c.1).collect()),
        )
    })
}

/// Medians per (workload, policy), in the order the records first name them.
pub fn summarize(records: &[RunRecord]) -> Vec<PolicySummary> {
    let mut out: Vec<PolicySummary> = harness::by_workload_and_policy(records)
        .into_iter()
        .map(|((workload, policy), runs)| {
            let throughputs: Vec<f64> = runs.iter().map(|r| r.throughput).collect();
            let mut latency = BTreeMap::new();
            for op in runs[0].latency_us.keys() {
                let get = |f: fn(&LatencySummary) -> u64| {
                    median(
                        runs.iter()
                            .filter_map(|r| r.latency_us.get(op).map(|l| f(l) as f64))
                            .collect(),
                    )
                };
                latency.insert(op.clone(), (get(|l| l.p50), get(|l| l.p99)));
            }
            let hits: Vec<f64> = runs.iter().filter_map(|r| r.hit_ratio).collect();
            let wb: Vec<&WriteBackRecord> =
                runs.iter().filter_map(|r| r.write_back.as_ref()).collect();
            PolicySummary {
                workload: workload.to_string(),
                policy: policy.to_string(),
                runs: runs.len(),
                throughput: median(throughputs.clone()),
                throughputs,
                latency_p50_p99: latency,
                hit_ratio: (!hits.is_empty()).then(|| median(hits)),
                stale_reads: runs.iter().map(|r| r.stale_reads).sum(),
                lost_writes: runs.iter().map(|r| r.detail.validated.lost_writes).sum(),
                store_calls_per_operation: median(
                    runs.iter().map(|r| r.store_calls.per_operation).collect(),
                ),
                cache_round_trips_per_operation: median(
                    runs.iter()
                        .map(|r| {
                            let redis = r.detail.ranges.as_ref().map_or(0, |c| c.redis_round_trips);
                            (r.cache_round_trips + redis) as f64 / r.detail.operations.max(1) as f64
                        })
                        .collect(),
                ),
                cpu_us_per_operation: cpu_per_op(&runs),
                machine_busy: {
                    let busy: Vec<f64> = runs
                        .iter()
                        .filter_map(|r| r.cpu.map(|c| c.machine_busy))
                        .collect();
                    (!busy.is_empty()).then(|| median(busy))
                },
                applied_share: (!wb.is_empty())
                    .then(|| median(wb.iter().map(|w| w.applied_share).collect())),
                pinned_max: (!wb.is_empty())
                    .then(|| median(wb.iter().map(|w| w.pinned_bytes.max as f64).collect())),
                vs_write_through: None,
            }
        })
        .collect();
    let rows: Vec<(&str, &str, f64)> = out
        .iter()
        .map(|s| (s.workload.as_str(), s.policy.as_str(), s.throughput))
        .collect();
    let ratios = harness::ratios_to(&rows, "write-through");
    for (s, ratio) in out.iter_mut().zip(ratios) {
        s.vs_write_through = ratio;
    }
    out
}

/// The summary as a Markdown table.
pub fn render_summary(summaries: &[PolicySummary]) -> String {
    let mut out = String::new();
    let ops: Vec<String> = {
        let mut ops: Vec<String> = summaries
            .iter()
            .flat_map(|s| s.latency_p50_p99.keys().cloned())
            .collect();
        ops.sort();
        ops.dedup();
        ops
    };
    let _ = write!(
        out,
        "| workload | policy | runs | ops/s (median) | vs write-through |"
    );
    for op in &ops {
        let _ = write!(out, " {op} p50 / p99 µs |");
    }
    let _ = writeln!(
        out,
        " hit ratio | store calls/op | cache RT/op | CPU µs/op (cads + store) | busy | stale reads | \
         lost writes | applied share | pinned max |"
    );
    let _ = write!(out, "| --- | --- | ---: | ---: | ---: |");
    for _ in &ops {
        let _ = write!(out, " ---: |");
    }
    let _ = writeln!(
        out,
        " ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in summaries {
        row_head(
            &mut out,
            (&s.workload, &s.policy),
            s.runs,
            s.throughput,
            s.vs_write_through,
        );
        for op in &ops {
            let latency = s.latency_p50_p99.get(op);
            cell(
                &mut out,
                latency.map(|(p50, p99)| format!("{p50:.0} / {p99:.0}")),
            );
        }
        let _ = writeln!(
            out,
            " {} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {} |",
            s.hit_ratio
                .map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
            s.store_calls_per_operation,
            s.cache_round_trips_per_operation,
            s.cpu_us_per_operation
                .map_or("-".into(), |(a, b)| format!("{a:.0} + {b:.0}")),
            s.machine_busy
                .map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
            s.stale_reads,
            s.lost_writes,
            s.applied_share
                .map_or("-".into(), |a| format!("{:.1}%", a * 100.0)),
            s.pinned_max.map_or("-".into(), |p| human_bytes(p as u64)),
        );
    }
    out
}
