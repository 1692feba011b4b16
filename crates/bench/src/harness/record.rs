//! The record of one run: the fields every benchmark has, the benchmark's own part (flattened
//! into the same JSON object), and the configuration, common and specific likewise.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cpu::CpuRecord;

/// Latency of one operation type, in microseconds, from an HDR histogram (3 significant digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Operations that completed (failed ones are counted in the record's failures).
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl LatencySummary {
    /// The summary of a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        LatencySummary {
            count: h.len(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// Data-store calls during the run phase, as a `FaultyStore` in front of the store counts them
/// (benchmark threads and write-back's workers together).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct StoreCalls {
    /// `get`, `get_many`, `scan`, `count`, and SQL queries.
    pub reads: u64,
    /// `update`, `put`, `insert`, `delete`, `write_batch`, ... and SQL statements that write.
    pub writes: u64,
    /// SQL transactions begun.
    pub transactions: u64,
    /// Calls per operation of the run phase: (reads + writes + transactions) / operations (for
    /// TPC-C, per session run, re-runs included).
    pub per_operation: f64,
}

/// Cache hits and misses summed over the CMIs' INFO (`keyspace_hits`, `keyspace_misses`) during
/// the run phase. These count every read command, including write-back's bookkeeping (workers
/// polling PendingWrites, buffered writes read before they are changed), so `hit_ratio` is
/// computed by the driver instead.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Keyspace {
    /// `keyspace_hits`.
    pub hits: u64,
    /// `keyspace_misses`.
    pub misses: u64,
}

/// How many contended keys a record lists.
pub const CONTENDED_KEYS_KEPT: usize = 8;

/// Lease contention summed over the CMIs' INFO: the counters over the run phase, the keys most
/// contended for since the CMIs started (INFO's `contended_key_N`, merged).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Contention {
    /// Lease requests that met another session's lease.
    pub lease_conflicts: u64,
    /// Ticketed sessions told to wait for a key rather than give way.
    pub lease_waits: u64,
    /// Sessions aborted because they asked for a lease they could not have.
    pub sessions_conflicted: u64,
    /// Sessions aborted because a writer voided their shared lease.
    pub sessions_wounded: u64,
    /// Sessions aborted because their leases ran out.
    pub sessions_expired: u64,
    /// Sessions of the deploying process that committed more than one write of the same keys
    /// (group commit, `Cads::write`).
    pub combined_sessions: u64,
    /// The writes those sessions carried.
    pub combined_writes: u64,
    /// The most contended keys, as INFO shows them, with their conflict counts.
    pub contended_keys: Vec<(String, u64)>,
}

impl Contention {
    /// The counters from `self` to `later`; the keys of `later`. A CMI restarted in between
    /// counts from zero again: its share is undercounted, never negative.
    pub fn until(&self, later: &Contention) -> Contention {
        Contention {
            lease_conflicts: later.lease_conflicts.saturating_sub(self.lease_conflicts),
            lease_waits: later.lease_waits.saturating_sub(self.lease_waits),
            sessions_conflicted: later
                .sessions_conflicted
                .saturating_sub(self.sessions_conflicted),
            sessions_wounded: later.sessions_wounded.saturating_sub(self.sessions_wounded),
            sessions_expired: later.sessions_expired.saturating_sub(self.sessions_expired),
            combined_sessions: later
                .combined_sessions
                .saturating_sub(self.combined_sessions),
            combined_writes: later.combined_writes.saturating_sub(self.combined_writes),
            contended_keys: later.contended_keys.clone(),
        }
    }
}

/// Pinned memory (buffered writes, PendingWrites, queues, markers) summed over the CMIs, sampled
/// every second during the run phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PinnedBytes {
    /// `(seconds since the run began, bytes)`.
    pub samples: Vec<(f64, u64)>,
    /// The largest sample (the end of the run's, when none was taken).
    pub max: u64,
    /// The mean of the samples (likewise).
    pub mean: f64,
    /// At the end of the run phase, before the drain.
    pub end: u64,
}

impl PinnedBytes {
    /// Fills `max` and `mean` from the samples and the end.
    pub(crate) fn close(&mut self, end: u64) {
        self.end = end;
        if self.samples.is_empty() {
            (self.max, self.mean) = (end, end as f64);
        } else {
            self.max = self.samples.iter().map(|s| s.1).max().unwrap_or(0);
            self.mean =
                self.samples.iter().map(|s| s.1 as f64).sum::<f64>() / self.samples.len() as f64;
        }
    }
}

/// Write-back's activity in a run. Design 1 (documents: YCSB, BG) counts operations and
/// documents, Design 2 (sessions: TPC-C) sessions; a benchmark's records show the other design's
/// counts as 0.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriteBackRecord {
    /// Background workers during the run (in each AppNode).
    pub workers: usize,
    /// Design 1: document operations buffered by committed sessions during the run.
    pub buffered_ops: u64,
    /// Design 1: buffered operations applied to the data store by the end of the run (by workers,
    /// and by reads that missed). Compaction merges the operations of one document, and the
    /// framework counts what is left, so this is a lower bound.
    pub applied_ops: u64,
    /// Design 1: buffered writes (one per document, holding its operations) applied by the end of
    /// the run.
    pub applied_writes: u64,
    /// Design 1: distinct documents written during the run.
    pub written_documents: u64,
    /// Design 1: documents with buffered writes still waiting when the run ended (workers
    /// stopped).
    pub pending_documents: u64,
    /// Design 1: `1 - pending_documents / written_documents`, the share of written documents
    /// whose every change had reached the data store when the run ended.
    pub documents_applied_share: f64,
    /// Design 1: non-idempotent buffered writes turned into their idempotent form.
    pub conversions: u64,
    /// Design 2: sessions that committed with buffered statements during the run.
    pub buffered_sessions: u64,
    /// Design 2: buffered sessions applied to the data store during the run, by the workers and
    /// by reads that missed (Algorithm 1).
    pub applied_sessions: u64,
    /// Design 2: buffered sessions still queued when the run ended: what the drain applied.
    pub pending_sessions: u64,
    /// What was applied of what was buffered at the end of the run (operations and sessions),
    /// 000 Fig. 3.4b; a lower bound.
    pub applied_share: f64,
    /// Sessions that found pinned memory full and ran as write-through.
    pub fallbacks: u64,
    /// Pinned memory over the run.
    pub pinned_bytes: PinnedBytes,
    /// `(seconds since the run began, applied_share so far)`, sampled with the pinned memory:
    /// how far the data store lags behind the buffered writes over the run (000 Fig. 3.4b).
    pub applied_share_samples: Vec<(f64, f64)>,
    /// Seconds the drain after the run took (every buffered write applied).
    pub drain_s: f64,
}

/// What a benchmark that logs its reads and writes found when it validated a run (YCSB, BG):
/// flattened into its part of the record.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Validated {
    /// Reads through the cache by the benchmark's threads (YCSB: record reads, every attempt of
    /// a session that reads and writes counting; BG: read actions).
    pub cache_reads: u64,
    /// Of those, the ones that queried the data store.
    pub cache_misses: u64,
    /// What was read and validated: records (YCSB: reads, scanned records, reads of
    /// read-modify-writes) or friend and pending counts (BG).
    pub reads: u64,
    /// The first few stale reads (a value no serial order allows, or a missing or damaged
    /// record), described.
    pub stale_examples: Vec<String>,
    /// Records (YCSB) or members (BG) whose final value in the data store, after write-back's
    /// drain, does not follow from the acknowledged writes: lost writes.
    pub lost_writes: u64,
    /// The first few, described.
    pub lost_examples: Vec<String>,
}

/// The options as recorded in a record's `config`: the common ones, then the benchmark's.
#[derive(Clone, Debug, Serialize)]
pub struct RunConfig<C> {
    /// Threads asked for (a SoAR search records each probe's).
    pub threads: usize,
    /// Application processes the run was split over.
    pub appnodes: usize,
    /// Write-back workers (in each AppNode).
    pub workers: usize,
    /// Write-back replicas of each buffered write (capped by the CMIs).
    pub write_back_replicas: usize,
    /// Write-back PendingWrites partitions.
    pub write_back_partitions: usize,
    /// How write-back adds a write to a buffered write: `rmw` or `append`.
    pub write_back_buffering: &'static str,
    /// Write-back workers' pause after a pass without a full batch, ms.
    pub worker_pause_ms: f64,
    /// Warm cache before the run.
    pub warm: bool,
    /// The cache (`embedded:N`, addresses, or `none`).
    pub cache: String,
    /// Embedded CMIs' maxmemory.
    pub cmi_maxmemory: Option<String>,
    /// Embedded CMIs' max-pinned-memory.
    pub cmi_max_pinned_memory: Option<String>,
    /// How the framework reached the CMIs: `unix` with `--cmi-transport unix` on embedded CMIs
    /// it reaches directly, else `tcp` (also without a cache).
    pub cmi_transport: &'static str,
    /// The generators' seed.
    pub seed: u64,
    /// The benchmark's own settings.
    #[serde(flatten)]
    pub detail: C,
}

/// The record of one run of one policy: what `--json` writes, one per run. `D` is the
/// benchmark's own part, `C` its part of the configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Record<D, C> {
    /// `ycsb`, `bg` or `tpcc`.
    pub benchmark: &'static str,
    /// The workload or mix.
    pub workload: String,
    /// The policy (`none`, `write-around`, `write-through`, `write-back`).
    pub policy: String,
    /// The data store's URL, password hidden.
    pub store: String,
    /// Which run of this policy (0-based; see `--repeat`).
    pub run: usize,
    /// Threads that issued work, over all AppNodes.
    pub threads: usize,
    /// Application processes the run was split over (`--appnodes`).
    pub appnodes: usize,
    /// Seconds the run phase lasted (from the first thread's start to the last one's end).
    pub elapsed_s: f64,
    /// Completed operations (actions, transactions) per second.
    pub throughput: f64,
    /// Latency per operation type, whole sessions with their retries.
    pub latency_us: BTreeMap<String, LatencySummary>,
    /// Operations that failed (after the framework's retries).
    pub failed: u64,
    /// The first few errors, described.
    pub errors: Vec<String>,
    /// Reads through the cache answered without querying the data store, over all reads through
    /// the cache, counted by the benchmark threads. `None` without a cache.
    pub hit_ratio: Option<f64>,
    /// Reads that showed a value no serial order allows (TPC-C: cached entries found stale).
    pub stale_reads: u64,
    /// The CMIs' own counters, for reference (they count write-back's bookkeeping too).
    pub keyspace: Option<Keyspace>,
    /// Lease contention on the CMIs over the run phase, and the most contended keys.
    pub contention: Option<Contention>,
    /// The SAS core's counters over the run phase (`--cache sas`): leases granted and refused,
    /// fills, commits, and `delivered`, the keys it told AppNodes to delete or refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sas_core: Option<BTreeMap<String, u64>>,
    /// Data-store calls in the run phase.
    pub store_calls: StoreCalls,
    /// Cache round trips in the run phase (`Client::round_trips`, INFO samples included).
    pub cache_round_trips: u64,
    /// CPU use in the run phase (Linux), to tell what bounded it: this process and its AppNodes.
    pub cpu: Option<CpuRecord>,
    /// Seconds the load took.
    pub load_s: f64,
    /// Seconds the warm-up took, if any.
    pub warm_s: Option<f64>,
    /// Write-back's activity (write-back only).
    pub write_back: Option<WriteBackRecord>,
    /// What the run did about a data store that went away: with `--outage`, or when TARDIS saw
    /// the data store fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outage: Option<super::OutageRecord>,
    /// CMIs failing and recovering under Gemini (`--fail-cmis`): their hit ratio over time and
    /// the time to restore it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gemini: Option<crate::gemini::GeminiRecord>,
    /// The benchmark's own fields.
    #[serde(flatten)]
    pub detail: D,
    /// The full configuration.
    pub config: RunConfig<C>,
}

/// Writes `records` as one JSON array to `path`.
pub(crate) fn write_json<R: Serialize>(path: &Path, records: &[R]) -> Result<()> {
    let text = serde_json::to_string_pretty(records).context("a run record does not serialize")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// The median, `None` for no values.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (n > 0).then(|| (values[(n - 1) / 2] + values[n / 2]) / 2.0)
}

/// The median, NaN for no values (a summary's cell that shows no number).
pub fn median_or_nan(values: Vec<f64>) -> f64 {
    median(values).unwrap_or(f64::NAN)
}

/// Each row's value over the value of the row of `baseline`'s policy for the same workload
/// (None where that policy did not run). Rows are (workload, policy, value).
pub fn ratios_to(rows: &[(&str, &str, f64)], baseline: &str) -> Vec<Option<f64>> {
    rows.iter()
        .map(|(workload, _, value)| {
            rows.iter()
                .find(|(w, p, _)| w == workload && *p == baseline)
                .map(|(_, _, base)| value / base)
        })
        .collect()
}

/// The runs of one workload under one policy: `((workload, policy), runs)`.
pub type Group<'r, D, C> = ((&'r str, &'r str), Vec<&'r Record<D, C>>);

/// Records grouped by (workload, policy), in the order the records first name them.
pub fn by_workload_and_policy<D, C>(records: &[Record<D, C>]) -> Vec<Group<'_, D, C>> {
    let mut groups: Vec<Group<'_, D, C>> = Vec::new();
    for r in records {
        let key = (r.workload.as_str(), r.policy.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runs)) => runs.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups
}

/// Starts a row of a summary table: `| workload | policy | runs | value | ratio |`, the value
/// without decimals and the ratio (to a baseline policy) as `1.23x`.
pub fn row_head(
    out: &mut String,
    group: (&str, &str),
    runs: usize,
    value: f64,
    ratio: Option<f64>,
) {
    let (workload, policy) = group;
    let ratio = ratio.map_or("-".into(), |r| format!("{r:.2}x"));
    out.push_str(&format!(
        "| {workload} | {policy} | {runs} | {value:.0} | {ratio} |"
    ));
}

/// Appends a cell of a Markdown table row: ` value |`, or ` - |` for none.
pub fn cell(out: &mut String, value: Option<String>) {
    out.push(' ');
    out.push_str(value.as_deref().unwrap_or("-"));
    out.push_str(" |");
}

/// Bytes in B, KB, MB or GB (powers of 1024).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
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

    #[test]
    fn ratios_are_to_the_baseline_of_the_same_workload() {
        let rows = [
            ("A", "none", 10.0),
            ("A", "write-through", 20.0),
            ("B", "write-through", 30.0),
        ];
        assert_eq!(
            ratios_to(&rows, "none"),
            [Some(1.0), Some(2.0), None],
            "B has no baseline"
        );
    }

    #[test]
    fn pinned_memory_without_samples_is_its_end() {
        let mut p = PinnedBytes::default();
        p.close(100);
        assert_eq!((p.max, p.mean), (100, 100.0));
        p.samples = vec![(1.0, 10), (2.0, 30)];
        p.close(5);
        assert_eq!((p.max, p.mean, p.end), (30, 20.0, 5));
    }
}
