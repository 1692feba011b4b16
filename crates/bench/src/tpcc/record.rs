//! The JSON record of one policy's run, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::check::{CacheComparison, Condition};
use super::options::ConfigRecord;
use super::txn::Kind;
use crate::ycsb::{human_bytes, LatencySummary, PinnedBytes, StoreCalls};

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

/// Write-back's activity in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TpccWriteBack {
    /// Background workers during the run.
    pub workers: usize,
    /// Sessions that committed with buffered statements during the measured interval (one per
    /// committed New-Order, Payment and Delivery that wrote).
    pub buffered_sessions: u64,
    /// Buffered sessions applied to the data store during the interval, by the workers and by
    /// reads that missed (Algorithm 1).
    pub applied_sessions: u64,
    /// Buffered sessions still queued when the interval ended: what the drain applied.
    pub pending_sessions: u64,
    /// `applied_sessions / buffered_sessions` when the interval ended (000 Fig. 3.4b).
    pub applied_share: f64,
    /// Sessions that found pinned memory full and ran as write-through.
    pub fallbacks: u64,
    /// Pinned memory over the run (cached values are not pinned: this is the session objects,
    /// mappings and queues, on every replica).
    pub pinned_bytes: PinnedBytes,
    /// Seconds the drain after the interval took (every buffered session applied).
    pub drain_s: f64,
}

/// The record of one run of one policy: what `--json` writes, one per run.
#[derive(Clone, Debug, Serialize)]
pub struct TpccRecord {
    /// `"tpcc"`.
    pub benchmark: &'static str,
    /// `tpcc-<scale>-<warehouses>w`.
    pub workload: String,
    /// `none`, `write-around`, `write-through` or `write-back`.
    pub policy: String,
    /// The data store's URL, password hidden.
    pub store: String,
    /// Which run of this policy (0-based).
    pub run: usize,
    /// Seconds the measured interval lasted (until the last transaction in flight ended).
    pub elapsed_s: f64,
    /// Transactions committed.
    pub transactions: u64,
    /// Committed transactions per second (BenchBase's goodput).
    pub throughput: f64,
    /// Committed New-Orders per minute (rollbacks excluded).
    pub tpmc: f64,
    /// Latency of committed transactions per type (µs, HDR), re-runs included.
    pub latency_us: BTreeMap<String, LatencySummary>,
    /// Outcomes per type.
    pub counts: BTreeMap<String, TxnCounts>,
    /// The first few failures, described.
    pub errors: Vec<String>,
    /// Reads through the cache answered without querying the data store, over all reads (a read
    /// is one CacheStore query: a row, the rows of a batch, a per-district entry). `None` without
    /// a cache.
    pub hit_ratio: Option<f64>,
    /// Reads through CacheStores by the terminals (every session's, re-runs included).
    pub reads: u64,
    /// Of those, the ones that queried the data store.
    pub store_queries: u64,
    /// Cached entries found stale by the final comparison with the data store.
    pub stale_reads: u64,
    /// The final comparison of the cache with the data store (policies with a cache).
    pub cache_check: Option<CacheComparison>,
    /// The consistency conditions of clause 3.3.2 after the run.
    pub consistency: Vec<Condition>,
    /// Whether every condition held and no cached entry was stale.
    pub consistent: bool,
    /// Data-store calls during the measured interval (terminals and write-back's workers).
    pub store_calls: StoreCalls,
    /// Cache round trips during the measured interval.
    pub cache_round_trips: u64,
    /// Seconds loading the database took.
    pub load_s: f64,
    /// Seconds the warm-up took, if any.
    pub warm_s: Option<f64>,
    /// Seconds the checks took.
    pub check_s: f64,
    /// Write-back's activity (write-back only).
    pub write_back: Option<TpccWriteBack>,
    /// The full configuration.
    pub config: ConfigRecord,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

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
    let mut groups: Vec<((String, String), Vec<&TpccRecord>)> = Vec::new();
    for r in records {
        let key = (r.workload.clone(), r.policy.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let mut out: Vec<TpccSummary> = groups
        .into_iter()
        .map(|((workload, policy), runs)| {
            let tpmcs: Vec<f64> = runs.iter().map(|r| r.tpmc).collect();
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
            let write_back: Vec<&TpccWriteBack> =
                runs.iter().filter_map(|r| r.write_back.as_ref()).collect();
            let of_write_back = |value: fn(&TpccWriteBack) -> f64| {
                (!write_back.is_empty())
                    .then(|| median(write_back.iter().map(|w| value(w)).collect()))
            };
            TpccSummary {
                workload,
                policy,
                runs: runs.len(),
                tpmc: median(tpmcs.clone()),
                tpmcs,
                mean_latency_ms,
                weighted_latency_ms: weighted,
                hit_ratio: (!hits.is_empty()).then(|| median(hits)),
                stale_reads: runs.iter().map(|r| r.stale_reads).sum(),
                consistent: runs.iter().all(|r| r.consistent),
                vs_data_store: None,
                applied_share: of_write_back(|w| w.applied_share),
                pinned_max: of_write_back(|w| w.pinned_bytes.max as f64),
            }
        })
        .collect();
    let alone: Vec<(String, f64)> = out
        .iter()
        .filter(|s| s.policy == cads::Policy::DataStoreOnly.name())
        .map(|s| (s.workload.clone(), s.tpmc))
        .collect();
    for s in &mut out {
        if let Some((_, base)) = alone.iter().find(|(w, _)| *w == s.workload) {
            s.vs_data_store = Some(s.tpmc / base);
        }
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
        let _ = write!(
            out,
            "| {} | {} | {} | {:.0} | {} |",
            s.workload,
            s.policy,
            s.runs,
            s.tpmc,
            s.vs_data_store.map_or("-".into(), |r| format!("{r:.2}x"))
        );
        for kind in Kind::ALL {
            match s.mean_latency_ms.get(kind.name()) {
                Some(ms) => {
                    let _ = write!(out, " {ms:.2} |");
                }
                None => {
                    let _ = write!(out, " - |");
                }
            }
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
