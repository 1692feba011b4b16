//! The options of a YCSB benchmark, spelled as `cads bench ycsb` spells its flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use cads::Policy;
use serde::Serialize;

use super::workload::{Distribution, Fields, ScanLength, Workload};
use crate::deploy::{CacheSpec, CmiSettings};

/// What `cads bench ycsb` runs. [`YcsbOptions::default`] is a short laptop-sized run of
/// Workload A on SQLite with two embedded CMIs, every policy in turn.
#[derive(Clone, Debug)]
pub struct YcsbOptions {
    /// `--policy`: the policies to run, each in turn (`none`, `write-around`, `write-through`,
    /// `write-back`).
    pub policies: Vec<Policy>,
    /// `--store`: a data-store URL (`sqlite:PATH`, `postgres://...`, `mysql://...`); `None`: a
    /// SQLite file in a temporary directory, removed afterwards.
    pub store: Option<String>,
    /// `--cache`: `embedded:N` (default `embedded:2`) or CMI addresses.
    pub cache: CacheSpec,
    /// Settings of embedded CMIs (`--maxmemory`, `--max-pinned-memory`).
    pub cmi: CmiSettings,
    /// `--workload`: `A`..`F`, `S` or `CPR`.
    pub workload: String,
    /// `--threads`: benchmark threads in the load, warm-up and run phases.
    pub threads: usize,
    /// `--duration` (`8s`, `2m`): how long the run phase lasts. With `operations` too, the run
    /// ends at whichever comes first; with neither, 10 s.
    pub duration: Option<Duration>,
    /// `--operations`: operations of the run phase over all threads (`operationcount`).
    pub operations: Option<u64>,
    /// `--records`: records loaded (`recordcount`).
    pub records: u64,
    /// `--distribution`: overrides the workload's key distribution.
    pub distribution: Option<Distribution>,
    /// `--zipfian-constant` (YCSB's 0.99; the papers also use 0.75).
    pub zipfian_constant: f64,
    /// `--update-fields all|one`: overrides the workload's (all, as the papers do).
    pub update_fields: Option<Fields>,
    /// `--scan-length N`: a fixed scan cardinality (CPR: 5, 10 or 100).
    pub scan_length: Option<u64>,
    /// `--scan-share F`: scans are this share of operations, updates the rest (CPR's `f`).
    pub scan_share: Option<f64>,
    /// `--projection all|one`: fields a scan returns of each record (CPR's YCSB* and YCSB^1).
    pub projection: Option<Fields>,
    /// `--field-count` (`fieldcount`, 10).
    pub field_count: usize,
    /// `--field-length` (`fieldlength`, 100 bytes; at least 16, the version prefix).
    pub field_length: usize,
    /// `--workers`: write-back's background workers during the run (4).
    pub workers: usize,
    /// `--worker-pause`: how long a write-back worker waits after a pass without a full batch
    /// (`WriteBackConfig::worker_pause`).
    pub worker_pause: Duration,
    /// `--warm`: read every record through the cache before the run (000 §3.3: "each experiment
    /// starts with a warm cache"). Default on.
    pub warm: bool,
    /// `--repeat`: runs of each policy; the policies are interleaved (none, write-around, ...,
    /// none, ...), and the summary shows medians.
    pub repeat: usize,
    /// `--seed`: the load's and the threads' generators.
    pub seed: u64,
    /// `--table`: the collection (YCSB's `usertable`). It is dropped and reloaded for every run.
    pub table: String,
    /// `--drain-timeout`: how long write-back's drain may take after the run.
    pub drain_timeout: Duration,
    /// `--store-timeout`: the bound on each data-store call (`StoreOptions::timeout`). Longer
    /// than the store's 5 s default, so that a call caught behind a checkpoint on a busy disk
    /// shows up as latency instead of failing the run (on PostgreSQL a `DROP TABLE` after a
    /// write-heavy run took longer than 5 s here).
    pub store_timeout: Duration,
    /// `--out DIR`: one JSON record per run and `summary.md`.
    pub out: Option<PathBuf>,
    /// `--json FILE`: every run record in one JSON array.
    pub json: Option<PathBuf>,
    /// Test hook: updates write the data store directly, behind the framework's back, so that
    /// cached copies go stale (shows the validator at work).
    #[doc(hidden)]
    pub sabotage: bool,
}

impl Default for YcsbOptions {
    fn default() -> Self {
        YcsbOptions {
            policies: vec![
                Policy::DataStoreOnly,
                Policy::WriteAround,
                Policy::WriteThrough,
                Policy::WriteBack,
            ],
            store: None,
            cache: CacheSpec::default(),
            cmi: CmiSettings::default(),
            workload: "A".into(),
            threads: 8,
            duration: None,
            operations: None,
            records: 100_000,
            distribution: None,
            zipfian_constant: crate::generator::ZIPFIAN_CONSTANT,
            update_fields: None,
            scan_length: None,
            scan_share: None,
            projection: None,
            field_count: 10,
            field_length: 100,
            workers: 4,
            worker_pause: cads::WriteBackConfig::default().worker_pause,
            warm: true,
            repeat: 1,
            seed: 0x00C0_FFEE,
            table: "usertable".into(),
            drain_timeout: Duration::from_secs(600),
            store_timeout: Duration::from_secs(30),
            out: None,
            json: None,
            sabotage: false,
        }
    }
}

/// The default run-phase length when neither a duration nor an operation count is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

impl YcsbOptions {
    /// The workload with every override applied, checked.
    pub fn resolved_workload(&self) -> Result<Workload> {
        let mut w = Workload::named(&self.workload)?;
        if let Some(share) = self.scan_share {
            w = w.with_scan_share(share)?;
            w.name = format!("{}-scan{:.0}%", w.name, share * 100.0);
        }
        if let Some(len) = self.scan_length {
            if len == 0 {
                bail!("--scan-length must be positive");
            }
            w.scan_length = ScanLength::Fixed(len);
        }
        if let Some(p) = self.projection {
            w.scan_fields = p;
            // CPR's YCSB^1 updates the one column it projects (002 §4).
            if self.update_fields.is_none() {
                w.update_fields = p;
            }
        }
        if let Some(d) = self.distribution {
            w.distribution = d;
        }
        if let Some(f) = self.update_fields {
            w.update_fields = f;
        }
        Ok(w)
    }

    /// Checks the options that do not depend on the workload.
    pub fn check(&self) -> Result<()> {
        if self.policies.is_empty() {
            bail!("--policy: give at least one policy");
        }
        if self.threads == 0 || self.threads > 4000 {
            bail!("--threads must lie in 1..=4000");
        }
        if self.records == 0 || self.records >= 1 << 40 {
            bail!("--records must be positive (and below 2^40)");
        }
        if self.field_length < 16 {
            bail!("--field-length must be at least 16 (each field starts with its version)");
        }
        if self.field_count == 0 {
            bail!("--field-count must be positive");
        }
        if !(self.zipfian_constant > 0.0 && self.zipfian_constant < 1.0) {
            bail!("--zipfian-constant must lie in (0, 1)");
        }
        if self.repeat == 0 {
            bail!("--repeat must be positive");
        }
        cads::store::validate_collection_name(&self.table).map_err(|e| anyhow!("--table: {e}"))?;
        self.resolved_workload().map(|_| ())
    }

    /// The run phase's length (`duration`, else 10 s when no operation count is given).
    pub fn run_duration(&self) -> Option<Duration> {
        match (self.duration, self.operations) {
            (None, None) => Some(DEFAULT_DURATION),
            (d, _) => d,
        }
    }
}

/// Parses a duration: a number with `ms`, `s`, `m` or `h` (`8s`, `2m`, `500ms`); a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .with_context(|| format!("bad duration {text:?} (use 8s, 2m, 500ms)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => bail!("bad duration unit {other:?} in {text:?} (use ms, s, m or h)"),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        bail!("a duration must be positive, not {text:?}");
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a comma-separated list of policies (`none,write-around,write-through,write-back`;
/// `all` for the four).
pub fn parse_policies(text: &str) -> Result<Vec<Policy>> {
    if text.trim() == "all" {
        return Ok(YcsbOptions::default().policies);
    }
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            Policy::parse(name).ok_or_else(|| {
                anyhow!(
                    "unknown policy {name:?} (use none, write-around, write-through, write-back)"
                )
            })
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|list| {
            if list.is_empty() {
                bail!("--policy: give at least one policy")
            } else {
                Ok(list)
            }
        })
}

/// The options as recorded in a run record's `config`.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigRecord {
    /// The workload as run, every override applied.
    pub workload: Workload,
    /// Records loaded.
    pub records: u64,
    /// Benchmark threads.
    pub threads: usize,
    /// Run-phase length asked for, in seconds.
    pub duration_s: Option<f64>,
    /// Run-phase operations asked for.
    pub operations: Option<u64>,
    /// The zipfian constant.
    pub zipfian_constant: f64,
    /// `fieldcount`.
    pub field_count: usize,
    /// `fieldlength`.
    pub field_length: usize,
    /// Key names: `"user" + fnvhash64(keynum)`.
    pub insert_order: &'static str,
    /// Write-back workers.
    pub workers: usize,
    /// Write-back workers' pause after a pass without a full batch, ms.
    pub worker_pause_ms: f64,
    /// Write-back replicas of each buffered write (capped by the CMIs).
    pub write_back_replicas: usize,
    /// Write-back PendingWrites partitions.
    pub write_back_partitions: usize,
    /// Warm cache before the run.
    pub warm: bool,
    /// The cache (`embedded:N` or addresses).
    pub cache: String,
    /// Embedded CMIs' maxmemory.
    pub cmi_maxmemory: Option<String>,
    /// Embedded CMIs' max-pinned-memory.
    pub cmi_max_pinned_memory: Option<String>,
    /// The collection.
    pub table: String,
    /// The generators' seed.
    pub seed: u64,
    /// The bound on each data-store call, in seconds.
    pub store_timeout_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("8s").unwrap(), Duration::from_secs(8));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn policy_lists_parse() {
        assert_eq!(
            parse_policies("none, write-back").unwrap(),
            vec![Policy::DataStoreOnly, Policy::WriteBack]
        );
        assert_eq!(parse_policies("all").unwrap().len(), 4);
        assert!(parse_policies("write-sideways").is_err());
        assert!(parse_policies("").is_err());
    }

    #[test]
    fn cpr_variants_resolve() {
        let o = YcsbOptions {
            workload: "cpr".into(),
            scan_share: Some(0.5),
            scan_length: Some(100),
            projection: Some(Fields::One),
            ..YcsbOptions::default()
        };
        let w = o.resolved_workload().unwrap();
        assert_eq!((w.scan, w.update), (0.5, 0.5));
        assert_eq!(w.scan_length, ScanLength::Fixed(100));
        assert_eq!((w.scan_fields, w.update_fields), (Fields::One, Fields::One));
        assert_eq!(w.distribution, Distribution::Uniform);
        assert!(o.check().is_ok());
    }
}
