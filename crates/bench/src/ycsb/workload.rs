//! YCSB's workloads (benchmarks.md Part B §1: `workloads/workloada..f`), the papers' Workload S
//! (000 Table 3.3), CPR's scan variants (002 §4) and a trace-like workload after Facebook's ETC
//! pool (Part B §4; 004 §5), and what one benchmark thread draws from them: operations, key
//! numbers, scan lengths.

use std::fmt;

use anyhow::{bail, Result};
use cads_apps::ycsb::FieldLength;
use serde::Serialize;

use crate::generator::{
    AcknowledgedCounter, Discrete, Rng, ScrambledZipfian, SkewedLatest, Uniform,
};

/// A YCSB operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Operation {
    /// Read all fields of a record.
    Read,
    /// Update fields of a record.
    Update,
    /// Insert a new record (its key number from the insert counter).
    Insert,
    /// Read up to *len* records in key order.
    Scan,
    /// Read a record, then update it, in one session (timed as one operation).
    ReadModifyWrite,
}

impl Operation {
    /// Every operation, in YCSB's order.
    pub const ALL: [Operation; 5] = [
        Operation::Read,
        Operation::Update,
        Operation::Insert,
        Operation::Scan,
        Operation::ReadModifyWrite,
    ];

    /// YCSB's names for them in its output (`[READ]`, `[READ-MODIFY-WRITE]`, ...), in the
    /// order of [`Operation::ALL`].
    pub const NAMES: [&'static str; 5] = ["READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"];

    /// YCSB's name for it.
    pub fn name(self) -> &'static str {
        Operation::NAMES[self.index()]
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How key numbers are chosen (`requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Uniform over the loaded records.
    Uniform,
    /// Scrambled zipfian over the loaded records and the inserts expected.
    Zipfian,
    /// Skewed towards the newest records (`SkewedLatestGenerator`).
    Latest,
}

impl Distribution {
    /// `uniform`, `zipfian` or `latest`.
    pub fn parse(text: &str) -> Result<Distribution> {
        Ok(match text {
            "uniform" => Distribution::Uniform,
            "zipfian" => Distribution::Zipfian,
            "latest" => Distribution::Latest,
            other => bail!("unknown distribution {other:?} (use zipfian, uniform or latest)"),
        })
    }

    /// The spelling [`parse`](Self::parse) reads.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
        }
    }
}

/// Which fields an update writes or a scan returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fields {
    /// All `fieldcount` fields (the papers' update, 000 §3.3.1; CPR's YCSB*).
    All,
    /// One field chosen uniformly (YCSB's default update, `writeallfields=false`; CPR's YCSB^1).
    One,
}

impl Fields {
    /// `all` or `one`.
    pub fn parse(text: &str) -> Result<Fields> {
        Ok(match text {
            "all" => Fields::All,
            "one" => Fields::One,
            other => bail!("unknown field choice {other:?} (use all or one)"),
        })
    }
}

/// How scan lengths are drawn (`scanlengthdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanLength {
    /// Uniform in `1..=max` (YCSB's default, `minscanlength=1`).
    Uniform {
        /// `maxscanlength`.
        max: u64,
    },
    /// Always this many records (the papers' cardinality: 5 in Workload S, 5/10/100 in CPR).
    Fixed(u64),
}

/// A workload: the operation mix, how its keys and scans are drawn, and its records' shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    /// `A`..`F`, `S`, `CPR` or `ETC`.
    pub name: String,
    /// `readproportion`.
    pub read: f64,
    /// `updateproportion`.
    pub update: f64,
    /// `insertproportion`.
    pub insert: f64,
    /// `scanproportion`.
    pub scan: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write: f64,
    /// `requestdistribution`.
    pub distribution: Distribution,
    /// Scan lengths.
    pub scan_length: ScanLength,
    /// Fields a scan returns of each record.
    pub scan_fields: Fields,
    /// Fields an update writes.
    pub update_fields: Fields,
    /// Scans are ranges of ids, whose results a Dendrite caches (CPR, 002); ids are then
    /// ordered, not hashed. Else a scan takes its ids from the data store and reads each record
    /// through the cache.
    pub ranges: bool,
    /// `fieldcount`.
    pub field_count: usize,
    /// `fieldlength`.
    pub field_length: FieldLength,
}

impl Workload {
    /// A named workload with YCSB's settings: `A`..`F` from the workload files, `S` (000 Table
    /// 3.3: 95% scans of 5 consecutive records, 5% updates, uniform as 000 §3.3.1 assumes) and
    /// `CPR` (002 §4: 90% scans of 5 records, the rest updates, uniform; vary it with the scan
    /// options) and `ETC` (95% reads and 5% updates, zipfian, of records holding one value as
    /// long as Facebook's ETC values: the trace-like workload of 004 §5). Records have 10
    /// fields of 100 bytes but in `ETC`. Updates write all fields, as the papers do (000
    /// §3.3.1).
    pub fn named(name: &str) -> Result<Workload> {
        let base = Workload {
            name: name.to_ascii_uppercase(),
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
            distribution: Distribution::Zipfian,
            scan_length: ScanLength::Uniform { max: 1000 },
            scan_fields: Fields::All,
            update_fields: Fields::All,
            ranges: false,
            field_count: 10,
            field_length: FieldLength::Fixed(100),
        };
        Ok(match name.to_ascii_uppercase().as_str() {
            "A" => Workload {
                read: 0.5,
                update: 0.5,
                ..base
            },
            "B" => Workload {
                read: 0.95,
                update: 0.05,
                ..base
            },
            "C" => Workload { read: 1.0, ..base },
            "D" => Workload {
                read: 0.95,
                insert: 0.05,
                distribution: Distribution::Latest,
                ..base
            },
            "E" => Workload {
                scan: 0.95,
                insert: 0.05,
                scan_length: ScanLength::Uniform { max: 100 },
                ..base
            },
            "F" => Workload {
                read: 0.5,
                read_modify_write: 0.5,
                ..base
            },
            "S" => Workload {
                scan: 0.95,
                update: 0.05,
                distribution: Distribution::Uniform,
                scan_length: ScanLength::Fixed(5),
                ..base
            },
            "CPR" => Workload {
                scan: 0.9,
                update: 0.1,
                distribution: Distribution::Uniform,
                scan_length: ScanLength::Fixed(5),
                ranges: true,
                ..base
            },
            "ETC" => Workload {
                read: 0.95,
                update: 0.05,
                field_count: 1,
                field_length: FieldLength::Etc,
                ..base
            },
            other => bail!("unknown workload {other:?} (use A, B, C, D, E, F, S, CPR or ETC)"),
        })
    }

    /// Sets the scan share to `share` and the update share to the rest (CPR's `f`), dropping
    /// every other operation.
    pub fn with_scan_share(mut self, share: f64) -> Result<Workload> {
        if !(0.0..=1.0).contains(&share) {
            bail!("the scan share must lie in [0, 1], not {share}");
        }
        self.scan = share;
        self.update = 1.0 - share;
        self.read = 0.0;
        self.insert = 0.0;
        self.read_modify_write = 0.0;
        Ok(self)
    }

    /// The proportion of an operation.
    pub fn proportion(&self, op: Operation) -> f64 {
        match op {
            Operation::Read => self.read,
            Operation::Update => self.update,
            Operation::Insert => self.insert,
            Operation::Scan => self.scan,
            Operation::ReadModifyWrite => self.read_modify_write,
        }
    }

    /// Whether the workload writes (updates, inserts or read-modify-writes).
    pub fn writes(&self) -> bool {
        self.update + self.insert + self.read_modify_write > 0.0
    }

    /// YCSB's operation chooser.
    pub fn chooser(&self) -> Result<Discrete<Operation>> {
        let values: Vec<(f64, Operation)> = Operation::ALL
            .iter()
            .map(|&op| (self.proportion(op), op))
            .filter(|(p, _)| *p > 0.0)
            .collect();
        if values.is_empty() {
            bail!("workload {} has no operation", self.name);
        }
        Ok(Discrete::new(values))
    }
}

/// One thread's key chooser (`CoreWorkload.keychooser` and `nextKeynum`).
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Uniform over `0..records`.
    Uniform(Uniform),
    /// Scrambled zipfian over `0..=records + expected new keys`.
    Zipfian(ScrambledZipfian),
    /// Skewed towards the newest acknowledged insert.
    Latest(SkewedLatest),
}

impl KeyChooser {
    /// YCSB's key chooser for `records` loaded records and `expected_new_keys` inserts expected
    /// (`⌊operationcount × insertproportion × 2⌋`), with zipfian constant `theta`.
    pub fn new(
        distribution: Distribution,
        records: i64,
        expected_new_keys: i64,
        theta: f64,
        inserts: &AcknowledgedCounter,
    ) -> KeyChooser {
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform(Uniform::new(0, records - 1)),
            // The upper bound is inclusive, as in CoreWorkload: even without inserts, key
            // number `records` can be drawn, and is redrawn below.
            Distribution::Zipfian => {
                KeyChooser::Zipfian(ScrambledZipfian::new(0, records + expected_new_keys, theta))
            }
            Distribution::Latest => KeyChooser::Latest(SkewedLatest::new(inserts.last(), theta)),
        }
    }

    /// A key number of a record whose insert was acknowledged (choices above the highest
    /// acknowledged insert, or of another AppNode's inserts, are redrawn, as YCSB's `nextKeynum`
    /// does).
    pub fn next(&mut self, rng: &mut Rng, inserts: &AcknowledgedCounter) -> i64 {
        loop {
            let last = inserts.last();
            let keynum = match self {
                KeyChooser::Uniform(u) => u.next(rng),
                KeyChooser::Zipfian(z) => z.next(rng),
                KeyChooser::Latest(l) => l.next(last, rng),
            };
            if inserts.holds(keynum) {
                return keynum;
            }
        }
    }
}

impl ScanLength {
    /// A scan length.
    pub fn next(self, rng: &mut Rng) -> u64 {
        match self {
            ScanLength::Uniform { max } => Uniform::new(1, max.max(1) as i64).next(rng) as u64,
            ScanLength::Fixed(n) => n,
        }
    }
}
