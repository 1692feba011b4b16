//! The options of a YCSB benchmark, spelled as `cads bench ycsb` spells its flags.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use super::workload::{Distribution, Fields, ScanLength, Workload};
use crate::harness::CommonOptions;
use cads_apps::ycsb::{FieldLength, MIN_FIELD_LENGTH};

/// What `cads bench ycsb` runs. [`YcsbOptions::default`] is a short laptop-sized run of
/// Workload A on SQLite with two embedded CMIs, every policy in turn.
#[derive(Clone, Debug)]
pub struct YcsbOptions {
    /// What every benchmark has: policies, store, cache, threads (in the load, warm-up and run
    /// phases), workers, warm-up, repeats, seed (the load's and the threads' generators), ...
    pub common: CommonOptions,
    /// `--workload`: `A`..`F`, `S`, `CPR` or `ETC`.
    pub workload: String,
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
    /// `--beta 0..100`: CPR's β, the Dendrite's (100: each range's whole result cached; 0: each
    /// record cached once, the ranges' ids kept by the Dendrite; between: each range one way or
    /// the other by how much it shares with ranges cached whole).
    pub beta: u8,
    /// `--field-count` (`fieldcount`): overrides the workload's (10; 1 in `ETC`).
    pub field_count: Option<usize>,
    /// `--field-length` (`fieldlength`, bytes, at least 16, the version prefix; or ETC's value
    /// sizes): overrides the workload's (100; ETC's in `ETC`).
    pub field_length: Option<FieldLength>,
    /// `--table`: the collection (YCSB's `usertable`). It is dropped and reloaded for every run.
    pub table: String,
    /// `--store-timeout`: the bound on each data-store call (`StoreOptions::timeout`). Longer
    /// than the store's 5 s default, so that a call caught behind a checkpoint on a busy disk
    /// shows up as latency instead of failing the run (on PostgreSQL a `DROP TABLE` after a
    /// write-heavy run took longer than 5 s here).
    pub store_timeout: Duration,
    /// `--pattern-change PCT` (004 §5.4.4, Fig. 10): with Gemini's failure, draws go to the first
    /// half of the records until the CMIs fail, and from then on the hottest PCT% of that half's
    /// keys are replaced by their counterparts in the second half (100: the whole working set
    /// changes). Only the first half is warmed.
    pub pattern_change: Option<u8>,
    /// Test hook: updates write the data store directly, behind the framework's back, so that
    /// cached copies go stale (shows the validator at work).
    #[doc(hidden)]
    pub sabotage: bool,
}

impl Default for YcsbOptions {
    fn default() -> Self {
        YcsbOptions {
            common: CommonOptions {
                seed: 0x00C0_FFEE,
                ..CommonOptions::default()
            },
            workload: "A".into(),
            duration: None,
            operations: None,
            records: 100_000,
            distribution: None,
            zipfian_constant: crate::generator::ZIPFIAN_CONSTANT,
            update_fields: None,
            scan_length: None,
            scan_share: None,
            projection: None,
            beta: 100,
            field_count: None,
            field_length: None,
            table: cads_apps::ycsb::TABLE.into(),
            store_timeout: Duration::from_secs(30),
            pattern_change: None,
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
        if let Some(count) = self.field_count {
            w.field_count = count;
        }
        if let Some(length) = self.field_length {
            w.field_length = length;
        }
        Ok(w)
    }

    /// Checks the options.
    pub fn check(&self) -> Result<()> {
        // Writer tokens number the threads below 4095 (`validate::writer_token`).
        self.common.check(4000)?;
        if self.records == 0 || self.records >= 1 << 40 {
            bail!("--records must be positive (and below 2^40)");
        }
        if matches!(self.field_length, Some(FieldLength::Fixed(len)) if len < MIN_FIELD_LENGTH) {
            bail!(
                "--field-length must be at least {MIN_FIELD_LENGTH} (each field starts with its \
                 version)"
            );
        }
        if self.field_count == Some(0) {
            bail!("--field-count must be positive");
        }
        if !(self.zipfian_constant > 0.0 && self.zipfian_constant < 1.0) {
            bail!("--zipfian-constant must lie in (0, 1)");
        }
        cads::store::validate_collection_name(&self.table).map_err(|e| anyhow!("--table: {e}"))?;
        let workload = self.resolved_workload()?;
        if self.beta > 100 {
            bail!("--beta is a percentage, 0 to 100");
        }
        if let Some(percent) = self.pattern_change {
            if percent == 0 || percent > 100 {
                bail!("--pattern-change is a percentage, 1 to 100");
            }
            if self.failure_at().is_none() {
                bail!("--pattern-change changes the keys read when CMIs fail: add --fail-cmis");
            }
            if workload.insert > 0.0 || workload.scan > 0.0 || workload.ranges {
                bail!(
                    "--pattern-change needs a workload of reads and updates (A, B, C, F, S or ETC)"
                );
            }
            if workload.distribution == Distribution::Latest {
                bail!("--pattern-change needs the zipfian or uniform distribution");
            }
            if self.records < 4 {
                bail!("--pattern-change splits the records in two halves: load at least 4");
            }
        }
        let baseline = self.common.policies.contains(&cads::Policy::CacheAside);
        if workload.ranges && self.common.appnodes > 1 && baseline {
            bail!(
                "--workload CPR with --appnodes: redis-zindex (cache-aside) runs in one process; \
                 drop it from --policy"
            );
        }
        Ok(())
    }

    /// When Gemini's failure begins, from the start of the run phase, if one is injected.
    pub fn failure_at(&self) -> Option<Duration> {
        Some(self.common.gemini.as_ref()?.fail?.at)
    }

    /// Records the warm-up reads: all, or with a pattern change the half read before it.
    pub fn warmed_records(&self) -> u64 {
        match self.pattern_change {
            Some(_) => self.records / 2,
            None => self.records,
        }
    }

    /// The run phase's length (`duration`, else 10 s when no operation count is given).
    pub fn run_duration(&self) -> Option<Duration> {
        match (self.duration, self.operations) {
            (None, None) => Some(DEFAULT_DURATION),
            (d, _) => d,
        }
    }
}

/// YCSB's part of a run record's `config`.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigRecord {
    /// The workload as run, every override applied.
    pub workload: Workload,
    /// Records loaded.
    pub records: u64,
    /// Run-phase length asked for, in seconds.
    pub duration_s: Option<f64>,
    /// Run-phase operations asked for.
    pub operations: Option<u64>,
    /// The zipfian constant.
    pub zipfian_constant: f64,
    /// `fieldcount`.
    pub field_count: usize,
    /// `fieldlength`: bytes, or `"etc"`.
    pub field_length: FieldLength,
    /// Key names: `"user" + fnvhash64(keynum)` (`hashed`), or the key number in 12 digits
    /// (`ordered`, the CPR workload).
    pub insert_order: &'static str,
    /// CPR's β, when scans go through a Dendrite.
    pub beta: Option<u8>,
    /// `--pattern-change`: the share of the working set replaced when the CMIs fail, %.
    pub pattern_change: Option<u8>,
    /// The collection.
    pub table: String,
    /// The bound on each data-store call, in seconds.
    pub store_timeout_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_shapes_come_from_the_workload_unless_given() {
        let etc = YcsbOptions {
            workload: "etc".into(),
            ..YcsbOptions::default()
        };
        let w = etc.resolved_workload().unwrap();
        assert_eq!((w.read, w.update), (0.95, 0.05));
        assert_eq!(w.distribution, Distribution::Zipfian);
        assert_eq!((w.field_count, w.field_length), (1, FieldLength::Etc));
        let a = YcsbOptions::default().resolved_workload().unwrap();
        assert_eq!(
            (a.field_count, a.field_length),
            (10, FieldLength::Fixed(100))
        );
        let given = YcsbOptions {
            field_count: Some(2),
            field_length: Some(FieldLength::Fixed(16)),
            ..etc.clone()
        };
        let w = given.resolved_workload().unwrap();
        assert_eq!((w.field_count, w.field_length), (2, FieldLength::Fixed(16)));
        assert!(given.check().is_ok());
        for bad in [
            YcsbOptions {
                field_length: Some(FieldLength::Fixed(15)),
                ..etc.clone()
            },
            YcsbOptions {
                field_count: Some(0),
                ..etc
            },
        ] {
            assert!(bad.check().is_err());
        }
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
        let halfway = YcsbOptions {
            beta: 50,
            ..o.clone()
        };
        assert!(halfway.check().is_ok());
        let past = YcsbOptions {
            beta: 101,
            ..o.clone()
        };
        assert!(past.check().is_err());
    }
}
