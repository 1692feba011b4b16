//! YCSB's workloads (benchmarks.md Part B §1: `workloads/workloada..f`), the papers' Workload S
//! (000 Table 3.3), CPR's scan variants (002 §4) and a trace-like workload after Facebook's ETC
//! pool (Part B §4; 004 §5), and what one benchmark thread draws from them: operations, key
//! numbers, scan lengths.

use std::collections::HashSet;
use std::fmt;
use std::time::Instant;

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

/// One thread's key chooser (`CoreWorkload.keychooser` and `nextKeynum`), over every record or,
/// with a [`PatternChange`], over the half it directs draws to.
#[derive(Clone, Debug)]
pub struct KeyChooser {
    draw: KeyDraw,
    change: Option<PatternChange>,
}

/// How a key number is drawn.
#[derive(Clone, Debug)]
enum KeyDraw {
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
        let draw = match distribution {
            Distribution::Uniform => KeyDraw::Uniform(Uniform::new(0, records - 1)),
            // The upper bound is inclusive, as in CoreWorkload: even without inserts, key
            // number `records` can be drawn, and is redrawn below.
            Distribution::Zipfian => {
                KeyDraw::Zipfian(ScrambledZipfian::new(0, records + expected_new_keys, theta))
            }
            Distribution::Latest => KeyDraw::Latest(SkewedLatest::new(inserts.last(), theta)),
        };
        KeyChooser { draw, change: None }
    }

    /// A chooser drawing over the first half of `records` (set A), as `distribution` would
    /// over all of them, and from `change` on partly or wholly over the second (set B).
    pub fn changing(
        distribution: Distribution,
        records: i64,
        theta: f64,
        change: PatternChange,
    ) -> KeyChooser {
        let half = records / 2;
        let draw = match distribution {
            Distribution::Zipfian => KeyDraw::Zipfian(ScrambledZipfian::new(0, half - 1, theta)),
            _ => KeyDraw::Uniform(Uniform::new(0, half - 1)),
        };
        KeyChooser {
            draw,
            change: Some(change),
        }
    }

    /// A key number of a record whose insert was acknowledged (choices above the highest
    /// acknowledged insert, or of another AppNode's inserts, are redrawn, as YCSB's `nextKeynum`
    /// does).
    pub fn next(&mut self, rng: &mut Rng, inserts: &AcknowledgedCounter) -> i64 {
        loop {
            let last = inserts.last();
            let keynum = match &mut self.draw {
                KeyDraw::Uniform(u) => u.next(rng),
                KeyDraw::Zipfian(z) => z.next(rng),
                KeyDraw::Latest(l) => l.next(last, rng),
            };
            let keynum = match &self.change {
                Some(change) => change.apply(keynum),
                None => keynum,
            };
            if inserts.holds(keynum) {
                return keynum;
            }
        }
    }
}

/// `--pattern-change PCT` (004 §5.4.4): the records split in two halves, A (key numbers below
/// half the records) and B. Draws go to A alone until the change (when the CMIs fail); from then
/// on the hottest PCT% of A's keys are replaced by their counterparts in B, the rest of A staying
/// as it was (100: all of A is replaced, the whole working set changes).
#[derive(Clone, Debug)]
pub struct PatternChange {
    at: Instant,
    half: i64,
    /// A's keys whose draws go to B after the change; None: every key.
    moved: Option<HashSet<i64>>,
}

impl PatternChange {
    /// The change of `percent`% of the keys of the first half of `records`, drawn by
    /// `distribution` (the hottest ones under zipfian, the lowest-numbered under uniform), at
    /// `at`.
    pub fn new(
        records: i64,
        percent: u8,
        distribution: Distribution,
        theta: f64,
        at: Instant,
    ) -> PatternChange {
        let half = records / 2;
        let count = (half * i64::from(percent.min(100)) / 100) as usize;
        let moved = (percent < 100).then(|| match distribution {
            Distribution::Zipfian => {
                // The items of the lowest ranks are the most popular: take them rank by rank.
                let z = ScrambledZipfian::new(0, half - 1, theta);
                let mut moved = HashSet::with_capacity(count);
                let mut rank = 0;
                while moved.len() < count && rank < 64 * half {
                    moved.insert(z.item_of_rank(rank));
                    rank += 1;
                }
                moved
            }
            _ => (0..count as i64).collect(),
        });
        PatternChange { at, half, moved }
    }

    /// Where a draw of A's key `keynum` goes now.
    pub fn apply(&self, keynum: i64) -> i64 {
        let moves =
            Instant::now() >= self.at && self.moved.as_ref().is_none_or(|m| m.contains(&keynum));
        if moves {
            keynum + self.half
        } else {
            keynum
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn draws(chooser: &mut KeyChooser, n: usize) -> Vec<i64> {
        let mut rng = Rng::new(7);
        let inserts = AcknowledgedCounter::new(1_000);
        (0..n).map(|_| chooser.next(&mut rng, &inserts)).collect()
    }

    /// Before the change every draw is in A; after a 100% change every draw is in B, where A's
    /// draws would have been, shifted by half the records.
    #[test]
    fn a_whole_change_moves_every_draw_to_the_other_half() {
        let later = Instant::now() + Duration::from_secs(3_600);
        let change = PatternChange::new(1_000, 100, Distribution::Zipfian, 0.99, later);
        let mut before = KeyChooser::changing(Distribution::Zipfian, 1_000, 0.99, change);
        let a = draws(&mut before, 2_000);
        assert!(a.iter().all(|&k| (0..500).contains(&k)));
        let change = PatternChange::new(1_000, 100, Distribution::Zipfian, 0.99, Instant::now());
        let mut after = KeyChooser::changing(Distribution::Zipfian, 1_000, 0.99, change);
        let b = draws(&mut after, 2_000);
        assert_eq!(b, a.iter().map(|k| k + 500).collect::<Vec<_>>());
    }

    /// A 20% change moves A's hottest fifth: the most drawn key moves, and the fifth moved
    /// draws well above a fifth of the draws (scrambled zipfian over few keys is flatter than
    /// its ranks: 38% here).
    #[test]
    fn a_partial_change_moves_the_hottest_keys() {
        let change = PatternChange::new(1_000, 20, Distribution::Zipfian, 0.99, Instant::now());
        assert_eq!(change.moved.as_ref().unwrap().len(), 100, "a fifth of A");
        let z = ScrambledZipfian::new(0, 499, 0.99);
        assert_eq!(change.apply(z.item_of_rank(0)), z.item_of_rank(0) + 500);
        let mut chooser = KeyChooser::changing(Distribution::Zipfian, 1_000, 0.99, change);
        let drawn = draws(&mut chooser, 10_000);
        let moved = drawn.iter().filter(|&&k| k >= 500).count();
        assert!(
            moved > 3_000,
            "the hottest fifth draws more than its share: {moved}"
        );
        assert!(moved < 10_000, "the rest of A is still drawn");

        let uniform = PatternChange::new(1_000, 20, Distribution::Uniform, 0.99, Instant::now());
        assert_eq!((uniform.apply(99), uniform.apply(100)), (599, 100));
    }
}
