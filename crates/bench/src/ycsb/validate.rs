//! Validation of every read (BG's idea, benchmarks.md Part B §2, applied to YCSB records) and of
//! the data store's final state.
//!
//! Every write puts a *version token* into the record: the field `v`, and the first 16 characters
//! (hex) of every field it writes, the rest of whose value is derived from the token. Tokens are
//! unique per write (the writing thread and its sequence number), so a read tells exactly which
//! write it saw, and whether the record is intact (each field is the value its token derives).
//!
//! A read is *stale* when it shows
//! - a version no write began before the read ended (or no write made at all), or
//! - a version older than a write that ended before the read began: some write W' of the record
//!   began after the read's version W ended (W' is newer in every serial order), and W' ended
//!   before the read began,
//! - or a record that is missing or not intact.
//!
//! Writes overlapping each other or the read may be ordered either way, so they never make a read
//! stale. A write that failed with an unknown outcome may have taken effect any time after it
//! began; a write whose session aborted wrote nothing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::generator::key_name;
use crate::harness::{LoggedWrite, ReadWriteLog};

pub use cads_apps::ycsb::{
    field_name, field_value, inspect, load_token, record, Record, RecordText, Seen, LOAD_BIT,
};

/// Writer tokens: `(thread + 1) << THREAD_SHIFT | sequence`.
const THREAD_SHIFT: u32 = 40;

/// The version of the `seq`-th write of benchmark thread `thread` (below 2^53, so exact in JSON
/// numbers anywhere).
pub fn writer_token(thread: usize, seq: u64) -> u64 {
    assert!(thread < 4095 && seq < 1 << THREAD_SHIFT);
    ((thread as u64 + 1) << THREAD_SHIFT) | seq
}

/// A 64-bit hash of a record id (FNV-1a): the validation's key.
pub fn id_hash(id: &str) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in id.as_bytes() {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x0100_0000_01B3);
    }
    hash
}

pub use crate::harness::Nanos;

/// `end` of a write whose outcome is unknown (it may have taken effect any time after it began).
pub const UNKNOWN_END: Nanos = Nanos::MAX;

/// A write (update, insert, or the write of a read-modify-write) that committed or may have.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct WriteRecord {
    /// [`id_hash`] of the record.
    pub key: u64,
    /// Its version.
    pub token: u64,
    /// When the operation began.
    pub start: Nanos,
    /// When it returned; [`UNKNOWN_END`] if it failed after possibly committing.
    pub end: Nanos,
}

/// Digits of an ordered id: key numbers below 10^12 sort as their ids do.
const ORDERED_ID_WIDTH: usize = 12;

/// The id of key number `keynum`: YCSB's hashed one, or (`ordered`, the CPR workload's) the
/// number zero-padded, so that a range of key numbers is a range of ids.
pub fn record_id(keynum: i64, ordered: bool) -> String {
    if ordered {
        key_name(keynum, false, ORDERED_ID_WIDTH)
    } else {
        key_name(keynum, true, 1)
    }
}

/// A record a read, scan or read-modify-write returned.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ReadRecord {
    /// [`id_hash`] of the record.
    pub key: u64,
    /// What it showed.
    pub seen: Seen,
    /// When the operation began.
    pub start: Nanos,
    /// When it returned.
    pub end: Nanos,
}

impl LoggedWrite for WriteRecord {
    fn document(&self) -> u64 {
        self.key
    }
}

/// The records a run read and the writes it made.
pub type Log = ReadWriteLog<ReadRecord, WriteRecord>;

/// How many problems a check describes.
const EXAMPLES: usize = 10;

/// What the read validation found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReadCheck {
    /// Records read and checked.
    pub reads: u64,
    /// Reads of a version no serial order allows at that time, or of a missing or damaged record.
    pub stale: u64,
    /// Of those, reads of a record that was missing or not intact.
    pub damaged: u64,
    /// The first few stale reads, described.
    pub examples: Vec<String>,
}

/// The writes of each record, sorted by end, with the latest start among each prefix.
struct History<'l> {
    by_key: HashMap<u64, (Vec<&'l WriteRecord>, Vec<Nanos>)>,
    by_token: HashMap<u64, &'l WriteRecord>,
}

impl<'l> History<'l> {
    fn new(log: &'l Log) -> History<'l> {
        let mut by_key: HashMap<u64, (Vec<&WriteRecord>, Vec<Nanos>)> = HashMap::new();
        let mut by_token = HashMap::with_capacity(log.writes.len());
        for w in &log.writes {
            by_key.entry(w.key).or_default().0.push(w);
            by_token.insert(w.token, w);
        }
        for (writes, latest_start) in by_key.values_mut() {
            writes.sort_by_key(|w| w.end);
            let mut latest = 0;
            *latest_start = writes
                .iter()
                .map(|w| {
                    latest = latest.max(w.start);
                    latest
                })
                .collect();
        }
        History { by_key, by_token }
    }

    /// The window of the write of version `token` of record `key`: `Some((start, end))`, with a
    /// loaded version as a write that ended at time 0; `None` if no write of this record made it.
    fn window(&self, key: u64, token: u64) -> Option<(Nanos, Nanos)> {
        if token & LOAD_BIT != 0 {
            let keynum = (token & !LOAD_BIT) as i64;
            return (id_hash(&key_name(keynum, true, 1)) == key
                || id_hash(&key_name(keynum, false, 1)) == key
                || id_hash(&record_id(keynum, true)) == key)
                .then_some((0, 0));
        }
        self.by_token
            .get(&token)
            .filter(|w| w.key == key)
            .map(|w| (w.start, w.end))
    }

    /// The latest start among the acknowledged writes of `key` that ended before `before`.
    fn latest_start_of_ended(&self, key: u64, before: Nanos) -> Option<Nanos> {
        let (writes, latest_start) = self.by_key.get(&key)?;
        let n = writes.partition_point(|w| w.end < before);
        (n > 0).then(|| latest_start[n - 1])
    }
}

/// Checks every logged read against the logged writes.
pub fn check_reads(log: &Log) -> ReadCheck {
    let history = History::new(log);
    let mut check = ReadCheck::default();
    let note = |check: &mut ReadCheck, text: String| {
        check.stale += 1;
        if check.examples.len() < EXAMPLES {
            check.examples.push(text);
        }
    };
    for r in &log.reads {
        check.reads += 1;
        let Some(token) = r.seen.token else {
            check.damaged += 1;
            note(&mut check, format!("record {:016x}: missing", r.key));
            continue;
        };
        if !r.seen.intact {
            check.damaged += 1;
            note(
                &mut check,
                format!("record {:016x}: version {token:x} not intact", r.key),
            );
            continue;
        }
        let Some((w_start, w_end)) = history.window(r.key, token) else {
            note(
                &mut check,
                format!("record {:016x}: version {token:x} was never written", r.key),
            );
            continue;
        };
        if w_start > r.end {
            note(
                &mut check,
                format!(
                    "record {:016x}: version {token:x} written after the read ended",
                    r.key
                ),
            );
            continue;
        }
        if let Some(latest) = history.latest_start_of_ended(r.key, r.start) {
            if latest > w_end {
                note(
                    &mut check,
                    format!(
                        "record {:016x}: read version {token:x} (written until {} µs) at {} µs, \
                         but a newer write began at {} µs and ended before the read",
                        r.key,
                        w_end / 1000,
                        r.start / 1000,
                        latest / 1000
                    ),
                );
            }
        }
    }
    check
}

/// What the check of the data store's final state found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FinalCheck {
    /// Records checked (loaded, inserted, or found in the store).
    pub records: u64,
    /// Records whose stored version is not the last acknowledged write (or that are missing or
    /// damaged): acknowledged writes that were lost.
    pub lost: u64,
    /// The first few, described.
    pub examples: Vec<String>,
}

/// Compares the data store's final records (`stored`: id hash → what it holds) with the writes:
/// each record must hold a version no acknowledged write of it follows (the last write, where
/// writes of a record did not overlap), intact. `loaded` lists the id hashes of the loaded records.
pub fn check_final(log: &Log, loaded: &[u64], stored: &HashMap<u64, Seen>) -> FinalCheck {
    let history = History::new(log);
    let mut keys: Vec<u64> = loaded.to_vec();
    keys.extend(history.by_key.keys().copied());
    keys.sort_unstable();
    keys.dedup();
    let mut check = FinalCheck::default();
    for key in keys {
        check.records += 1;
        let problem = match stored.get(&key) {
            None => {
                let acknowledged = history
                    .by_key
                    .get(&key)
                    .is_some_and(|(w, _)| w.iter().any(|w| w.end != UNKNOWN_END));
                (loaded.binary_search(&key).is_ok() || acknowledged).then(|| "missing".to_string())
            }
            Some(seen) => match (seen.token, seen.intact) {
                (Some(token), true) => match history.window(key, token) {
                    None => Some(format!("holds version {token:x}, which no write made")),
                    Some((_, w_end)) => {
                        let latest = history.latest_start_of_ended(key, UNKNOWN_END);
                        latest
                            .filter(|&latest| latest > w_end)
                            .map(|_| format!("holds version {token:x}, older than the last write"))
                    }
                },
                (token, _) => Some(format!("damaged (version {token:x?})")),
            },
        };
        if let Some(problem) = problem {
            check.lost += 1;
            if check.examples.len() < EXAMPLES {
                check.examples.push(format!("record {key:016x}: {problem}"));
            }
        }
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use cads_apps::ycsb::FieldLength;

    fn seen(token: u64) -> Seen {
        Seen {
            token: Some(token),
            intact: true,
        }
    }

    #[test]
    fn records_are_recognised() {
        const HUNDRED: FieldLength = FieldLength::Fixed(100);
        let doc = record(writer_token(3, 7), 10, HUNDRED);
        assert_eq!(doc["field3"].as_str().unwrap().len(), 100);
        assert_eq!(
            inspect(Some(&doc), 10, HUNDRED, true),
            seen(writer_token(3, 7))
        );
        let mut torn = doc.clone();
        torn.insert(
            "field2".into(),
            field_value(writer_token(1, 1), 2, 100).into(),
        );
        assert!(!inspect(Some(&torn), 10, HUNDRED, true).intact);
        assert!(inspect(Some(&torn), 10, HUNDRED, false).intact);
        torn.insert("field4".into(), "x".repeat(100).into());
        assert!(!inspect(Some(&torn), 10, HUNDRED, false).intact);
        assert_eq!(
            inspect(None::<&cads::store::Document>, 10, HUNDRED, true).token,
            None
        );
    }

    #[test]
    fn reads_are_checked_against_finished_and_overlapping_writes() {
        let key = id_hash(&key_name(5, true, 1));
        let (w1, w2) = (writer_token(0, 1), writer_token(1, 1));
        let log_with = |reads: Vec<(u64, Nanos, Nanos)>| Log {
            writes: vec![
                WriteRecord {
                    key,
                    token: w1,
                    start: 10,
                    end: 20,
                },
                WriteRecord {
                    key,
                    token: w2,
                    start: 30,
                    end: 40,
                },
            ],
            reads: reads
                .into_iter()
                .map(|(token, start, end)| ReadRecord {
                    key,
                    seen: seen(token),
                    start,
                    end,
                })
                .collect(),
        };
        let ok = log_with(vec![
            (load_token(5), 0, 5),
            (load_token(5), 15, 25),
            (w1, 15, 25),
            (w1, 25, 35),
            (w2, 35, 36),
            (w2, 50, 60),
        ]);
        let check = check_reads(&ok);
        assert_eq!(check.stale, 0, "{:?}", check.examples);
        let bad = log_with(vec![
            (load_token(5), 25, 26), // w1 ended before
            (w1, 45, 46),            // w2 began after w1 ended and ended before
            (w2, 0, 5),              // from the future
            (writer_token(9, 9), 50, 51),
            (load_token(6), 0, 1), // another record's version
        ]);
        assert_eq!(check_reads(&bad).stale, 5);
    }

    #[test]
    fn final_state_must_be_the_last_write() {
        let key = id_hash(&key_name(1, true, 1));
        let other = id_hash(&key_name(2, true, 1));
        let log = Log {
            writes: vec![
                WriteRecord {
                    key,
                    token: 11,
                    start: 10,
                    end: 20,
                },
                WriteRecord {
                    key,
                    token: 12,
                    start: 15,
                    end: 30,
                },
                WriteRecord {
                    key,
                    token: 13,
                    start: 40,
                    end: UNKNOWN_END,
                },
            ],
            reads: vec![],
        };
        let loaded = {
            let mut l = vec![key, other];
            l.sort_unstable();
            l
        };
        let stored = |a: u64, b: u64| HashMap::from([(key, seen(a)), (other, seen(b))]);
        for ok in [11, 12, 13] {
            let c = check_final(&log, &loaded, &stored(ok, load_token(2)));
            assert_eq!(c.lost, 0, "{ok}: {:?}", c.examples);
        }
        assert_eq!(
            check_final(&log, &loaded, &stored(load_token(1), load_token(2))).lost,
            1
        );
        assert_eq!(check_final(&log, &loaded, &stored(12, 99)).lost, 1);
        assert_eq!(check_final(&log, &loaded, &HashMap::new()).lost, 2);
    }
}
