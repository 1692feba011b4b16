//! BG's validation of unpredictable data (benchmarks.md Part B §2, `validator/*`): every friend and
//! pending count an action read is logged with the action's start and end, every write with the
//! ±1 it makes to each count; afterwards each read is checked against the writes.
//!
//! A read that began at `s` and ended at `e` may show the count it started from plus every write
//! that ended before `s`, plus any subset of the writes that overlap it (began before `e` and had
//! not ended by `s`). Each write changes a count by ±1, so the allowed values are exactly the
//! integers between the two extremes; a value outside them is stale (unpredictable). A write that
//! failed with an unknown outcome may have taken effect at any time after it began; one whose
//! session aborted wrote nothing and is not logged.
//!
//! The same rule checks the data store after a run (and write-back's drain): its counts, read as if
//! at the end of time, must be the starting counts plus every acknowledged write.

use std::collections::HashMap;

use cads_apps::bg::{Action, Count, CountRead, Counts};
use serde::{Deserialize, Serialize};

use crate::harness::{LoggedWrite, ReadWriteLog};

pub use crate::harness::Nanos;

/// `end` of a write whose outcome is unknown.
pub const UNKNOWN_END: Nanos = Nanos::MAX;

/// A count a read action showed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ReadRecord {
    /// What was read.
    pub read: CountRead,
    /// When the action began.
    pub start: Nanos,
    /// When it returned.
    pub end: Nanos,
}

/// A change a write action made (or may have made) to one count.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct WriteRecord {
    /// Whose count.
    pub member: u32,
    /// Which count.
    pub count: Count,
    /// By how much (±1).
    pub delta: i64,
    /// When the action began.
    pub start: Nanos,
    /// When it returned; [`UNKNOWN_END`] if it failed after possibly committing.
    pub end: Nanos,
}

impl LoggedWrite for WriteRecord {
    fn document(&self) -> u64 {
        u64::from(self.member)
    }
}

/// The counts a run read and the changes it made to them.
pub type Log = ReadWriteLog<ReadRecord, WriteRecord>;

impl Log {
    /// Logs the counts one read action showed.
    pub fn reads(&mut self, reads: &[CountRead], start: Nanos, end: Nanos) {
        self.reads
            .extend(reads.iter().map(|&read| ReadRecord { read, start, end }));
    }

    /// Logs a write action that committed (`end`) or may have ([`UNKNOWN_END`]).
    pub fn write(&mut self, action: &Action, start: Nanos, end: Nanos) {
        self.writes
            .extend(action.count_changes().into_iter().map(|c| WriteRecord {
                member: c.member,
                count: c.count,
                delta: c.delta,
                start,
                end,
            }));
    }
}

/// What the validation of the reads found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadCheck {
    /// Count reads checked.
    pub reads: u64,
    /// Reads that showed a value no serial order allows.
    pub stale: u64,
    /// The first few stale reads, described.
    pub examples: Vec<String>,
}

/// What the check of the data store's counts found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FinalCheck {
    /// Members checked.
    pub members: u64,
    /// Members with a count that is not the starting count plus every acknowledged write.
    pub wrong: u64,
    /// The first few, described.
    pub examples: Vec<String>,
}

/// How many problems a check describes.
const EXAMPLES: usize = 10;

/// The writes of one count of one member.
#[derive(Default)]
struct CountHistory {
    /// Acknowledged writes as (end, start, delta), sorted by end.
    known: Vec<(Nanos, Nanos, i64)>,
    /// `prefix[i]`: the sum of the deltas of `known[..i]`.
    prefix: Vec<i64>,
    /// Writes with an unknown outcome, as (start, delta).
    unknown: Vec<(Nanos, i64)>,
}

/// Every count's writes, indexed for the checks.
struct History {
    counts: HashMap<(u32, Count), CountHistory>,
    /// The longest acknowledged write: a write that overlaps a read ending at `e` ended before
    /// `e + longest`.
    longest: Nanos,
}

impl History {
    fn new(log: &Log) -> History {
        let mut counts: HashMap<(u32, Count), CountHistory> = HashMap::new();
        let mut longest = 0;
        for w in &log.writes {
            let h = counts.entry((w.member, w.count)).or_default();
            if w.end == UNKNOWN_END {
                h.unknown.push((w.start, w.delta));
            } else {
                longest = longest.max(w.end.saturating_sub(w.start));
                h.known.push((w.end, w.start, w.delta));
            }
        }
        for h in counts.values_mut() {
            h.known.sort_unstable();
            let mut sum = 0;
            h.prefix = std::iter::once(0)
                .chain(h.known.iter().map(|&(_, _, d)| {
                    sum += d;
                    sum
                }))
                .collect();
        }
        History { counts, longest }
    }

    /// The values a read of `member`'s `count` between `start` and `end` may show, from `base`.
    fn allowed(
        &self,
        member: u32,
        count: Count,
        base: i64,
        start: Nanos,
        end: Nanos,
    ) -> (i64, i64) {
        let Some(h) = self.counts.get(&(member, count)) else {
            return (base, base);
        };
        let done = h.known.partition_point(|&(w_end, _, _)| w_end < start);
        let settled = base + h.prefix[done];
        let (mut low, mut high) = (settled, settled);
        let mut widen = |delta: i64| {
            if delta < 0 {
                low += delta;
            } else {
                high += delta;
            }
        };
        let horizon = end.saturating_add(self.longest);
        for &(_, w_start, delta) in h.known[done..]
            .iter()
            .take_while(|&&(w_end, _, _)| w_end <= horizon)
        {
            if w_start < end {
                widen(delta);
            }
        }
        for &(w_start, delta) in &h.unknown {
            if w_start < end {
                widen(delta);
            }
        }
        (low, high)
    }
}

fn note(examples: &mut Vec<String>, text: impl FnOnce() -> String) {
    if examples.len() < EXAMPLES {
        examples.push(text());
    }
}

/// Checks every logged read against the logged writes; `base[m]` holds member `m`'s counts when
/// the run began.
pub fn check_reads(log: &Log, base: &[Counts]) -> ReadCheck {
    let history = History::new(log);
    let mut check = ReadCheck::default();
    for r in &log.reads {
        check.reads += 1;
        let CountRead {
            member,
            count,
            value,
        } = r.read;
        let from = base[member as usize].get(count);
        let (low, high) = history.allowed(member, count, from, r.start, r.end);
        if value < low || value > high {
            check.stale += 1;
            note(&mut check.examples, || {
                format!(
                    "member {member} {count}: read {value} at {:.3} ms, allowed {low}..={high}",
                    r.start as f64 / 1e6
                )
            });
        }
    }
    check
}

/// Checks the data store's counts after a run (and write-back's drain) against the counts it began
/// with and the logged writes.
pub fn check_final(log: &Log, base: &[Counts], stored: &[Counts]) -> FinalCheck {
    let history = History::new(log);
    let mut check = FinalCheck::default();
    // After every write: a read at the end of time.
    let last = UNKNOWN_END - 1;
    for (member, (from, now)) in base.iter().zip(stored).enumerate() {
        check.members += 1;
        let mut wrong = false;
        for count in Count::BOTH {
            let (low, high) = history.allowed(member as u32, count, from.get(count), last, last);
            let value = now.get(count);
            if value < low || value > high {
                wrong = true;
                note(&mut check.examples, || {
                    format!(
                        "member {member} {count}: the data store holds {value}, the writes make \
                         {low}..={high}"
                    )
                });
            }
        }
        check.wrong += u64::from(wrong);
    }
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<Counts> {
        vec![
            Counts {
                friends: 10,
                pending: 5
            };
            4
        ]
    }

    fn pending(value: i64) -> CountRead {
        CountRead {
            member: 2,
            count: Count::Pending,
            value,
        }
    }

    #[test]
    fn reads_are_checked_against_finished_and_overlapping_writes() {
        let invite = Action::InviteFriend {
            inviter: 1,
            invitee: 2,
        };
        let mut log = Log::default();
        log.write(&invite, 10, 20);
        // Before the write: 5. During: 5 or 6. After: 6 only.
        log.reads(&[pending(5)], 0, 5);
        log.reads(&[pending(5), pending(6)], 15, 25);
        log.reads(&[pending(6)], 30, 31);
        assert_eq!(check_reads(&log, &base()).stale, 0);
        log.reads(&[pending(5)], 30, 31);
        log.reads(&[pending(6)], 0, 5);
        log.reads(&[pending(7)], 15, 25);
        let check = check_reads(&log, &base());
        assert_eq!(check.stale, 3, "{:?}", check.examples);
        assert!(
            check.examples[0].contains("read 5 at 0.000 ms, allowed 6..=6"),
            "{:?}",
            check.examples
        );
    }

    #[test]
    fn long_and_unknown_writes_widen_what_a_read_may_show() {
        let reject = Action::RejectFriendRequest {
            inviter: 3,
            invitee: 2,
        };
        let invite = Action::InviteFriend {
            inviter: 1,
            invitee: 2,
        };
        let mut log = Log::default();
        // A long reject overlapping a short read that begins and ends inside it, and an invite
        // whose outcome is unknown.
        log.write(&reject, 0, 1000);
        log.write(&invite, 50, UNKNOWN_END);
        for value in [4, 5, 6] {
            log.reads(&[pending(value)], 100, 110);
        }
        assert_eq!(check_reads(&log, &base()).stale, 0);
        log.reads(&[pending(3)], 100, 110);
        // Before the invite began, only the reject may show.
        log.reads(&[pending(6)], 10, 20);
        assert_eq!(check_reads(&log, &base()).stale, 2);
    }

    #[test]
    fn the_final_counts_must_include_every_acknowledged_write() {
        let accept = Action::AcceptFriendRequest {
            inviter: 1,
            invitee: 2,
        };
        let mut log = Log::default();
        log.write(&accept, 10, 20);
        let mut stored = base();
        stored[1].friends = 11;
        stored[2] = Counts {
            friends: 11,
            pending: 4,
        };
        let check = check_final(&log, &base(), &stored);
        assert_eq!((check.members, check.wrong), (4, 0), "{:?}", check.examples);
        let check = check_final(&log, &base(), &base());
        assert_eq!(check.wrong, 2, "{:?}", check.examples);
        log.write(
            &Action::ThawFriendship {
                member: 1,
                friend: 2,
            },
            30,
            UNKNOWN_END,
        );
        assert_eq!(check_final(&log, &base(), &stored).wrong, 0);
    }
}
