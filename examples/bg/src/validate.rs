//! BG's validation (001 §3, "anomalies"): every count a read action showed is checked against the
//! write actions logged with their start and end times. A read that began at `s` and ended at `e`
//! may show the initial value plus every write that ended before `s`, plus any subset of the
//! writes that overlap it (began before `e` and had not ended by `s`). Each write changes a count
//! by ±1, so the allowed values are exactly the integers between the two extremes; a value
//! outside them is stale (or simply wrong).

use std::collections::HashMap;
use std::time::Instant;

use crate::graph::{Action, Count, CountRead, GraphParams};

/// A count shown by a read action, with the action's time window.
#[derive(Clone, Copy, Debug)]
pub struct ReadRecord {
    /// What was read.
    pub read: CountRead,
    /// When the action began.
    pub start: Instant,
    /// When it returned.
    pub end: Instant,
}

/// A change to a count made by a write action, with the action's time window. `end` is `None`
/// for a write whose outcome is unknown (it failed after possibly committing): it may have taken
/// effect at any time after it began.
#[derive(Clone, Copy, Debug)]
pub struct WriteRecord {
    /// Whose count.
    pub member: u32,
    /// Which count.
    pub count: Count,
    /// By how much.
    pub delta: i64,
    /// When the action began.
    pub start: Instant,
    /// When it returned, if it is known to have committed.
    pub end: Option<Instant>,
}

/// The reads and writes of a run (each thread keeps one; they are merged at the end).
#[derive(Debug, Default)]
pub struct Log {
    /// Counts read.
    pub reads: Vec<ReadRecord>,
    /// Counts changed.
    pub writes: Vec<WriteRecord>,
}

impl Log {
    /// Logs the counts one read action showed.
    pub fn reads(&mut self, reads: &[CountRead], start: Instant, end: Instant) {
        self.reads
            .extend(reads.iter().map(|&read| ReadRecord { read, start, end }));
    }

    /// Logs a write action that committed (`end` known) or may have (`end` None).
    pub fn write(&mut self, action: &Action, start: Instant, end: Option<Instant>) {
        self.writes
            .extend(action.count_changes().into_iter().map(|c| WriteRecord {
                member: c.member,
                count: c.count,
                delta: c.delta,
                start,
                end,
            }));
    }

    /// Appends another thread's log.
    pub fn merge(&mut self, other: Log) {
        self.reads.extend(other.reads);
        self.writes.extend(other.writes);
    }
}

/// What the validation found.
#[derive(Clone, Debug, Default)]
pub struct Validation {
    /// Count reads checked.
    pub checked: usize,
    /// Reads that showed a value no serial order allows.
    pub stale: usize,
    /// The first few stale reads, described.
    pub examples: Vec<String>,
}

/// How many stale reads are described in [`Validation::examples`].
const EXAMPLES: usize = 10;

/// Checks every logged read against the logged writes.
pub fn validate(graph: &GraphParams, log: &Log) -> Validation {
    let mut writes: HashMap<(u32, Count), Vec<&WriteRecord>> = HashMap::new();
    for w in &log.writes {
        writes.entry((w.member, w.count)).or_default().push(w);
    }
    let mut v = Validation::default();
    for r in &log.reads {
        v.checked += 1;
        let base = graph.initial(r.read.count);
        let (mut low, mut high) = (base, base);
        for w in writes
            .get(&(r.read.member, r.read.count))
            .map_or(&[][..], Vec::as_slice)
        {
            match w.end {
                Some(end) if end < r.start => {
                    low += w.delta;
                    high += w.delta;
                }
                _ if w.start < r.end => {
                    if w.delta < 0 {
                        low += w.delta;
                    } else {
                        high += w.delta;
                    }
                }
                _ => {}
            }
        }
        if r.read.value < low || r.read.value > high {
            v.stale += 1;
            if v.examples.len() < EXAMPLES {
                v.examples.push(format!(
                    "member {} {}: read {}, allowed {low}..={high}",
                    r.read.member, r.read.count, r.read.value
                ));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reads_are_checked_against_finished_and_overlapping_writes() {
        let g = GraphParams::default();
        let t0 = Instant::now();
        let t = |ms: u64| t0 + Duration::from_millis(ms);
        let mut log = Log::default();
        let invite = Action::InviteFriend {
            inviter: 1,
            invitee: 2,
        };
        log.write(&invite, t(10), Some(t(20)));
        let read = |value| CountRead {
            member: 2,
            count: Count::Pending,
            value,
        };
        // Before the write: 5. During: 5 or 6. After: 6 only.
        log.reads(&[read(5)], t(0), t(5));
        log.reads(&[read(5), read(6)], t(15), t(25));
        log.reads(&[read(6)], t(30), t(31));
        assert_eq!(validate(&g, &log).stale, 0);
        log.reads(&[read(5)], t(30), t(31));
        log.reads(&[read(6)], t(0), t(5));
        let v = validate(&g, &log);
        assert_eq!(v.stale, 2, "{:?}", v.examples);
    }
}
