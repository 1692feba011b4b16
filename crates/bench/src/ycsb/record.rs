//! The JSON record of one run, and the summary of several.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::options::ConfigRecord;
use crate::cpu::CpuRecord;

/// Latency of one operation type, in microseconds, from an HDR histogram (3 significant digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Operations that completed (failed ones are counted in `failed` of the record).
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
    /// Calls per run-phase operation: (reads + writes + transactions) / operations.
    pub per_operation: f64,
}

/// Pinned memory (buffered writes, PendingWrites, markers) summed over the CMIs, sampled every
/// second during the run phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PinnedBytes {
    /// `(seconds since the run began, bytes)`.
    pub samples: Vec<(f64, u64)>,
    /// The largest sample.
    pub max: u64,
    /// The mean of the samples.
    pub mean: f64,
    /// At the end of the run phase, before the drain.
    pub end: u64,
}

/// Write-back's activity in a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriteBackRecord {
    /// Background workers during the run.
    pub workers: usize,
    /// Document operations buffered by committed sessions during the run.
    pub buffered_ops: u64,
    /// Buffered operations applied to the data store by the end of the run (by workers, and by
    /// reads that missed). Compaction merges the operations of one document, and the framework
    /// counts what is left, so this is a lower bound.
    pub applied_ops: u64,
    /// Buffered writes (one per document, holding its operations) applied by the end of the run.
    pub applied_writes: u64,
    /// `applied_ops / buffered_ops` at the end of the run (000 Fig. 3.4b), a lower bound.
    pub applied_share: f64,
    /// Distinct records written during the run.
    pub written_documents: u64,
    /// Records with buffered writes still waiting when the run ended (workers stopped).
    pub pending_documents: u64,
    /// `1 - pending_documents / written_documents`: the share of written records whose every
    /// change had reached the data store when the run ended.
    pub documents_applied_share: f64,
    /// Sessions that found pinned memory full and ran as write-through.
    pub fallbacks: u64,
    /// Non-idempotent buffered writes turned into their idempotent form.
    pub conversions: u64,
    /// Pinned memory over the run.
    pub pinned_bytes: PinnedBytes,
    /// `(seconds since the run began, applied_share so far)`, sampled with the pinned memory:
    /// how far the data store lags behind the buffered writes over the run (000 Fig. 3.4b).
    pub applied_share_samples: Vec<(f64, f64)>,
    /// Seconds the drain after the run took (every buffered write applied).
    pub drain_s: f64,
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

/// The record of one run of one policy: what `--json` writes, one per run.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    /// `"ycsb"`.
    pub benchmark: &'static str,
    /// The workload's name (`A`, `B`, `S`, `CPR-scan50%`, ...).
    pub workload: String,
    /// The policy (`none`, `write-around`, `write-through`, `write-back`).
    pub policy: String,
    /// The data store's URL, password hidden.
    pub store: String,
    /// Which run of this policy (0-based; see `--repeat`).
    pub run: usize,
    /// Seconds the run phase lasted.
    pub elapsed_s: f64,
    /// Operations completed in the run phase.
    pub operations: u64,
    /// Operations that failed (after the framework's retries).
    pub failed: u64,
    /// Completed operations per second: `operations / elapsed_s` (YCSB's `Throughput(ops/sec)`).
    pub throughput: f64,
    /// Latency per operation type (`READ`, `UPDATE`, `INSERT`, `SCAN`, `READ-MODIFY-WRITE`).
    pub latency_us: BTreeMap<String, LatencySummary>,
    /// Failures per operation type.
    pub failed_by_operation: BTreeMap<String, u64>,
    /// The first few errors, described.
    pub errors: Vec<String>,
    /// Cache hits / cache reads of records, counted by the driver: a record read through the
    /// cache that had to query the data store is a miss. `None` without a cache.
    pub hit_ratio: Option<f64>,
    /// Record reads through the cache (a read on its own counts once, every attempt of a
    /// session that reads and writes counts).
    pub cache_reads: u64,
    /// Of those, the ones that queried the data store.
    pub cache_misses: u64,
    /// The CMIs' own counters, for reference.
    pub keyspace: Option<Keyspace>,
    /// Records read and validated (reads, scanned records, reads of read-modify-writes).
    pub reads: u64,
    /// Reads that showed a version no serial order allows, or a missing or damaged record.
    pub stale_reads: u64,
    /// The first few stale reads, described.
    pub stale_examples: Vec<String>,
    /// Records whose final value in the data store (after write-back's drain) is not the last
    /// acknowledged write of it.
    pub lost_writes: u64,
    /// The first few, described.
    pub lost_examples: Vec<String>,
    /// Data-store calls in the run phase.
    pub store_calls: StoreCalls,
    /// Cache round trips in the run phase (`Client::round_trips`; INFO samples included).
    pub cache_round_trips: u64,
    /// CPU use in the run phase (Linux), to tell what bounded it.
    pub cpu: Option<CpuRecord>,
    /// How scans work on the framework, when the workload scans.
    pub scan: Option<&'static str>,
    /// Seconds the load took (drop, create, insert every record).
    pub load_s: f64,
    /// Seconds the warm-up took (every record read through the cache), if any.
    pub warm_s: Option<f64>,
    /// Write-back's activity (write-back only).
    pub write_back: Option<WriteBackRecord>,
    /// The full configuration.
    pub config: ConfigRecord,
}

/// What a scan does on the framework today (also in the run record).
pub const SCAN_NOTE: &str = "ids from the data store, records through the cache";

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
            let ops = r.operations.max(1) as f64;
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
    let mut groups: Vec<((String, String), Vec<&RunRecord>)> = Vec::new();
    for r in records {
        let key = (r.workload.clone(), r.policy.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let mut out: Vec<PolicySummary> = groups
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
                workload,
                policy,
                runs: runs.len(),
                throughput: median(throughputs.clone()),
                throughputs,
                latency_p50_p99: latency,
                hit_ratio: (!hits.is_empty()).then(|| median(hits)),
                stale_reads: runs.iter().map(|r| r.stale_reads).sum(),
                lost_writes: runs.iter().map(|r| r.lost_writes).sum(),
                store_calls_per_operation: median(
                    runs.iter().map(|r| r.store_calls.per_operation).collect(),
                ),
                cache_round_trips_per_operation: median(
                    runs.iter()
                        .map(|r| r.cache_round_trips as f64 / r.operations.max(1) as f64)
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
    let through: Vec<(String, f64)> = out
        .iter()
        .filter(|s| s.policy == "write-through")
        .map(|s| (s.workload.clone(), s.throughput))
        .collect();
    for s in &mut out {
        if let Some((_, wt)) = through.iter().find(|(w, _)| *w == s.workload) {
            s.vs_write_through = Some(s.throughput / wt);
        }
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
        let _ = write!(
            out,
            "| {} | {} | {} | {:.0} | {} |",
            s.workload,
            s.policy,
            s.runs,
            s.throughput,
            s.vs_write_through
                .map_or("-".into(), |r| format!("{r:.2}x"))
        );
        for op in &ops {
            match s.latency_p50_p99.get(op) {
                Some((p50, p99)) => {
                    let _ = write!(out, " {p50:.0} / {p99:.0} |");
                }
                None => {
                    let _ = write!(out, " - |");
                }
            }
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
