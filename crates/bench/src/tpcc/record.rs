//! The JSON record of one policy's run, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::check::{CacheComparison, Condition};
use super::options::ConfigRecord;
use super::txn::Kind;
use crate::harness::{
    by_workload_and_policy, cell, human_bytes, median_or_nan as median, ratios_to, row_head,
    Record, WriteBackRecord,
};

/// What happened to the transactions of one type.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TxnCounts {
    /// Committed.
    pub completed: u64,
    /// New-Order's intentional 1% rollbacks (BenchBase counts them as aborts).
    pub rolled_back: u64,
    /// Failed after the framework's re-runs, or with an error that is not a conflict.
    pub failed: u64,
    /// Sessions run: completed + rolled back + failed + re-runs after lease or serialization
    /// conflicts.
    pub sessions: u64,
}

/// TPC-C's part of a run record (flattened into it).
#[derive(Clone, Debug, Serialize)]
pub struct TpccRun {
    /// Transactions committed.
    pub transactions: u64,
    /// Committed New-Orders per minute (rollbacks excluded).
    pub tpmc: f64,
    /// Outcomes per type.
    pub counts: BTreeMap<String, TxnCounts>,
    /// Reads through CacheStores by the terminals (every session's, re-runs included); a read is
    /// one CacheStore query: a row, the rows of a batch, a per-district entry.
    pub reads: u64,
    /// Of those, the ones that queried the data store.
    pub store_queries: u64,
    /// The final comparison of the cache with the data store (policies with a cache); its stale
    /// entries are the record's `stale_reads`.
    pub cache_check: Option<CacheComparison>,
    /// The consistency conditions of clause 3.3.2 after the run.
    pub consistency: Vec<Condition>,
    /// Whether every condition held and no cached entry was stale.
    pub consistent: bool,
    /// Seconds the checks took.
    pub check_s: f64,
}

/// The record of one TPC-C run of one policy: what `--json` writes, one per run.
pub type TpccRecord = Record<TpccRun, ConfigRecord>;

/// The medians of one policy's runs.
#[derive(Clone, Debug, Serialize)]
pub struct TpccSummary {
    /// The workload.
    pub workload: String,
    /// The policy.
    pub policy: String,
    /// Runs summarised.
    pub runs: usize,
    /// Median tpmC.
    pub tpmc: f64,
    /// Every run's tpmC.
    pub tpmcs: Vec<f64>,
    /// Median of the mean latency per transaction type (ms), as 000 Table 3.8 reports.
    pub mean_latency_ms: BTreeMap<String, f64>,
    /// Median of the mean latency weighted by the mix (ms).
    pub weighted_latency_ms: f64,
    /// Median hit ratio.
    pub hit_ratio: Option<f64>,
    /// Stale entries over the runs.
    pub stale_reads: u64,
    /// Whether every run was consistent.
    pub consistent: bool,
    /// Median tpmC over the data store alone's median, when it ran.
    pub vs_data_store: Option<f64>,
    /// Write-back: median share of buffered sessions applied when the interval ended.
    pub applied_share: Option<f64>,
    /// Write-back: median of the runs' largest pinned-memory sample (bytes).
    pub pinned_max: Option<f64>,
}

/// Medians per (workload, policy), in the order the records first name them.
pub fn summarize(records: &[TpccRecord]) -> Vec<TpccSummary> {
    let mut out: Vec<TpccSummary> = by_workload_and_policy(records)
        .into_iter()
        .map(|((workload, policy), runs)| {
            let tpmcs: Vec<f64> = runs.iter().map(|r| r.detail.tpmc).collect();
            let mut mean_latency_ms = BTreeMap::new();
            for kind in Kind::ALL {
                let means: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.latency_us.get(kind.name()))
                    .filter(|l| l.count > 0)
                    .map(|l| l.mean / 1000.0)
                    .collect();
                if !means.is_empty() {
                    mean_latency_ms.insert(kind.name().to_string(), median(means));
                }
            }
            let weighted = median(runs.iter().map(|r| weighted_latency_ms(r)).collect());
            let hits: Vec<f64> = runs.iter().filter_map(|r| r.hit_ratio).collect();
            let write_back: Vec<&WriteBackRecord> =
                runs.iter().filter_map(|r| r.write_back.as_ref()).collect();
            let of_write_back = |value: fn(&WriteBackRecord) -> f64| {
                (!write_back.is_empty())
                    .then(|| median(write_back.iter().map(|w| value(w)).collect()))
            };
            TpccSummary {
                workload: workload.to_string(),
                policy: policy.to_string(),
                runs: runs.len(),
                tpmc: median(tpmcs.clone()),
                tpmcs,
                mean_latency_ms,
                weighted_latency_ms: weighted,
                hit_ratio: (!hits.is_empty()).then(|| median(hits)),
                stale_reads: runs.iter().map(|r| r.stale_reads).sum(),
                consistent: runs.iter().all(|r| r.detail.consistent),
                vs_data_store: None,
                applied_share: of_write_back(|w| w.applied_share),
                pinned_max: of_write_back(|w| w.pinned_bytes.max as f64),
            }
        })
        .collect();
    let rows: Vec<(&str, &str, f64)> = out
        .iter()
        .map(|s| (s.workload.as_str(), s.policy.as_str(), s.tpmc))
        .collect();
    let ratios = ratios_to(&rows, cads::Policy::DataStoreOnly.name());
    for (s, ratio) in out.iter_mut().zip(ratios) {
        s.vs_data_store = ratio;
    }
    out
}

/// The mean latency over all committed transactions of a run (ms): each type's mean weighted by
/// its share of the committed transactions (003 §4.3's "weighted response time").
pub fn weighted_latency_ms(r: &TpccRecord) -> f64 {
    let (mut sum, mut count) = (0.0, 0u64);
    for l in r.latency_us.values() {
        sum += l.mean * l.count as f64;
        count += l.count;
    }
    if count == 0 {
        f64::NAN
    } else {
        sum / count as f64 / 1000.0
    }
}

/// The summary as a Markdown table (000 Table 3.8 style: mean response time per transaction).
pub fn render_summary(summaries: &[TpccSummary]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "| workload | policy | runs | tpmC (median) | vs data store |"
    );
    for kind in Kind::ALL {
        let _ = write!(out, " {} ms |", kind.name());
    }
    let _ = writeln!(
        out,
        " weighted ms | hit ratio | applied at end | pinned max | stale | consistent |"
    );
    let _ = write!(out, "| --- | --- | ---: | ---: | ---: |");
    for _ in Kind::ALL {
        let _ = write!(out, " ---: |");
    }
    let _ = writeln!(out, " ---: | ---: | ---: | ---: | ---: | --- |");
    for s in summaries {
        row_head(
            &mut out,
            (&s.workload, &s.policy),
            s.runs,
            s.tpmc,
            s.vs_data_store,
        );
        for kind in Kind::ALL {
            let mean = s.mean_latency_ms.get(kind.name());
            cell(&mut out, mean.map(|ms| format!("{ms:.2}")));
        }
        let _ = writeln!(
            out,
            " {:.2} | {} | {} | {} | {} | {} |",
            s.weighted_latency_ms,
            s.hit_ratio
                .map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
            s.applied_share
                .map_or("-".into(), |a| format!("{:.1}%", a * 100.0)),
            s.pinned_max.map_or("-".into(), |p| human_bytes(p as u64)),
            s.stale_reads,
            if s.consistent { "yes" } else { "NO" }
        );
    }
    out
}
