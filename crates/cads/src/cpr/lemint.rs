//! LeMInT, the Lease Manager Interval Tree (002 §2, §3.3): Shared leases for reads that missed
//! and eXclusive leases for writes, on intervals. A Shared lease conflicts with an eXclusive one
//! on an overlapping interval, two eXclusive ones conflict, two Shared ones do not; a session's
//! own leases never conflict with each other.
//!
//! A lease lasts until its guard is dropped: the Dendrite lives in the process whose sessions
//! hold its leases, so a holder that dies takes the table with it. Waiting is bounded, and only a
//! session that holds no lease of the table waits: one that holds some gets the conflict at once
//! and is run again, so two sessions never wait for each other on one table.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::intervals::{Interval, IntervalTree};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

/// Who holds a lease: a session of this process ([`next_owner`]).
pub type Owner = u64;

/// A new owner id, unique in the process.
pub fn next_owner() -> Owner {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    owner: Owner,
    mode: Mode,
}

/// A lease refused: another session holds a conflicting one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub held: Mode,
}

/// The table of one Dendrite's range.
pub struct LeaseTable<K> {
    leases: Mutex<IntervalTree<K, Vec<Lease>>>,
    released: Condvar,
    /// Requests that had to wait for a conflicting lease.
    waits: AtomicU64,
}

impl<K: Ord + Clone + Debug> Default for LeaseTable<K> {
    fn default() -> Self {
        LeaseTable {
            leases: Mutex::new(IntervalTree::new()),
            released: Condvar::new(),
            waits: AtomicU64::new(0),
        }
    }
}

/// A granted lease; dropping it releases the lease.
pub struct LeaseGuard<K: Ord + Clone + Debug> {
    table: Arc<LeaseTable<K>>,
    interval: Interval<K>,
    lease: Lease,
}

impl<K: Ord + Clone + Debug> LeaseGuard<K> {
    pub fn interval(&self) -> &Interval<K> {
        &self.interval
    }

    #[cfg(test)]
    pub fn mode(&self) -> Mode {
        self.lease.mode
    }
}

impl<K: Ord + Clone + Debug> Drop for LeaseGuard<K> {
    fn drop(&mut self) {
        let mut leases = self.table.leases.lock().expect("LeMInT poisoned");
        if let Some(held) = leases.get_mut(&self.interval) {
            if let Some(i) = held.iter().position(|l| *l == self.lease) {
                held.swap_remove(i);
            }
            if held.is_empty() {
                leases.remove(&self.interval);
            }
        }
        drop(leases);
        self.table.released.notify_all();
    }
}

impl<K: Ord + Clone + Debug> LeaseTable<K> {
    /// Grants `mode` on each of `intervals` to `owner`, all of them or none, waiting up to
    /// `wait` while another owner holds a conflicting lease (not at all if `owner` already holds
    /// a lease here).
    pub fn acquire(
        self: &Arc<Self>,
        intervals: Vec<Interval<K>>,
        owner: Owner,
        mode: Mode,
        wait: Duration,
    ) -> Result<Vec<LeaseGuard<K>>, Conflict> {
        let deadline = Instant::now() + wait;
        let mut leases = self.leases.lock().expect("LeMInT poisoned");
        let may_wait = !holds_any(&leases, owner);
        let mut waited = false;
        loop {
            let conflict = if crate::failpoints::cpr_leases_off() {
                None
            } else {
                intervals
                    .iter()
                    .find_map(|interval| conflict(&leases, interval, owner, mode))
            };
            match conflict {
                None => {
                    let lease = Lease { owner, mode };
                    let mut granted = Vec::with_capacity(intervals.len());
                    for interval in intervals {
                        match leases.get_mut(&interval) {
                            Some(held) => held.push(lease),
                            None => {
                                leases.insert(interval.clone(), vec![lease]);
                            }
                        }
                        granted.push(LeaseGuard {
                            table: self.clone(),
                            interval,
                            lease,
                        });
                    }
                    return Ok(granted);
                }
                Some(held) => {
                    let now = Instant::now();
                    if !may_wait || now >= deadline {
                        return Err(Conflict { held });
                    }
                    if !waited {
                        waited = true;
                        self.waits.fetch_add(1, Ordering::Relaxed);
                    }
                    leases = self
                        .released
                        .wait_timeout(leases, deadline - now)
                        .expect("LeMInT poisoned")
                        .0;
                }
            }
        }
    }

    /// Whether `owner` (`mine`), or another owner (`!mine`), holds an eXclusive lease on an
    /// interval overlapping `interval`.
    pub fn written(&self, interval: &Interval<K>, owner: Owner, mine: bool) -> bool {
        let leases = self.leases.lock().expect("LeMInT poisoned");
        leases.overlapping(interval).into_iter().any(|(_, held)| {
            held.iter()
                .any(|l| (l.owner == owner) == mine && l.mode == Mode::Exclusive)
        })
    }

    /// Requests that waited for a conflicting lease so far.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Leases held now (for stats and tests).
    pub fn len(&self) -> usize {
        let leases = self.leases.lock().expect("LeMInT poisoned");
        leases.iter().into_iter().map(|(_, held)| held.len()).sum()
    }
}

fn holds_any<K: Ord + Clone>(leases: &IntervalTree<K, Vec<Lease>>, owner: Owner) -> bool {
    leases
        .iter()
        .into_iter()
        .any(|(_, held)| held.iter().any(|l| l.owner == owner))
}

/// The mode of a lease of another owner that `mode` on `interval` conflicts with.
fn conflict<K: Ord + Clone>(
    leases: &IntervalTree<K, Vec<Lease>>,
    interval: &Interval<K>,
    owner: Owner,
    mode: Mode,
) -> Option<Mode> {
    leases
        .overlapping(interval)
        .into_iter()
        .flat_map(|(_, held)| held.iter())
        .find(|l| l.owner != owner && (mode == Mode::Exclusive || l.mode == Mode::Exclusive))
        .map(|l| l.mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn iv(lo: i64, hi: i64) -> Interval<i64> {
        Interval::new(lo, hi).unwrap()
    }

    const NOW: Duration = Duration::ZERO;

    #[test]
    fn shared_leases_share_an_interval() {
        let t = Arc::new(LeaseTable::default());
        let _a = t.acquire(vec![iv(1, 10)], 1, Mode::Shared, NOW).unwrap();
        let _b = t.acquire(vec![iv(5, 15)], 2, Mode::Shared, NOW).unwrap();
        let _c = t.acquire(vec![iv(1, 10)], 3, Mode::Shared, NOW).unwrap();
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn exclusive_conflicts_with_every_overlapping_lease_of_another() {
        let t = Arc::new(LeaseTable::default());
        let shared = t.acquire(vec![iv(1, 10)], 1, Mode::Shared, NOW).unwrap();
        let held = Conflict { held: Mode::Shared };
        assert_eq!(
            t.acquire(vec![iv(10, 20)], 2, Mode::Exclusive, NOW).err(),
            Some(held)
        );
        // Not overlapping: granted.
        let x = t
            .acquire(vec![iv(11, 20)], 2, Mode::Exclusive, NOW)
            .unwrap();
        let held = Conflict {
            held: Mode::Exclusive,
        };
        assert_eq!(
            t.acquire(vec![iv(15, 15)], 3, Mode::Shared, NOW).err(),
            Some(held.clone())
        );
        assert!(t.acquire(vec![iv(0, 30)], 3, Mode::Exclusive, NOW).is_err());
        drop(shared);
        drop(x);
        assert_eq!(t.len(), 0);
        t.acquire(vec![iv(0, 30)], 3, Mode::Exclusive, NOW).unwrap();
    }

    #[test]
    fn a_sessions_own_leases_do_not_conflict() {
        let t = Arc::new(LeaseTable::default());
        let _x = t.acquire(vec![iv(1, 10)], 7, Mode::Exclusive, NOW).unwrap();
        let _s = t.acquire(vec![iv(5, 5)], 7, Mode::Shared, NOW).unwrap();
        let _x2 = t.acquire(vec![iv(1, 10)], 7, Mode::Exclusive, NOW).unwrap();
        assert!(t.written(&iv(10, 12), 7, true));
        assert!(!t.written(&iv(11, 12), 7, true));
        assert!(!t.written(&iv(1, 12), 8, true));
        assert!(t.written(&iv(1, 12), 8, false));
        assert!(!t.written(&iv(1, 12), 7, false));
    }

    #[test]
    fn a_waiter_gets_the_lease_when_it_is_released() {
        let t = Arc::new(LeaseTable::default());
        let x = t.acquire(vec![iv(1, 10)], 1, Mode::Exclusive, NOW).unwrap();
        let waiter = {
            let t = t.clone();
            // Long enough never to run out on a busy machine: the release below ends the wait.
            thread::spawn(move || {
                t.acquire(vec![iv(3, 4)], 2, Mode::Shared, Duration::from_secs(600))
                    .map(|g| g[0].mode())
            })
        };
        // The waiter is either waiting or not yet started; either way it must get the lease.
        drop(x);
        assert_eq!(waiter.join().unwrap(), Ok(Mode::Shared));
    }

    #[test]
    fn several_intervals_are_granted_together_or_not_at_all() {
        let t = Arc::new(LeaseTable::default());
        let _s = t.acquire(vec![iv(5, 5)], 1, Mode::Shared, NOW).unwrap();
        let refused = t.acquire(vec![iv(1, 1), iv(5, 5)], 2, Mode::Exclusive, NOW);
        assert!(refused.is_err());
        assert_eq!(t.len(), 1, "nothing of the refused request is held");
        let both = t
            .acquire(vec![iv(1, 1), iv(9, 9)], 2, Mode::Exclusive, NOW)
            .unwrap();
        assert_eq!((both.len(), t.len()), (2, 3));
        drop(both);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_holder_does_not_wait() {
        let t = Arc::new(LeaseTable::default());
        let _x = t.acquire(vec![iv(1, 10)], 1, Mode::Exclusive, NOW).unwrap();
        let _mine = t
            .acquire(vec![iv(20, 30)], 2, Mode::Exclusive, NOW)
            .unwrap();
        // Owner 2 holds a lease: asking for one that conflicts fails at once, however long it
        // offers to wait (a wait here could be half of a deadlock).
        let refused = t.acquire(
            vec![iv(5, 25)],
            2,
            Mode::Exclusive,
            Duration::from_secs(600),
        );
        assert_eq!(
            refused.err(),
            Some(Conflict {
                held: Mode::Exclusive
            })
        );
    }
}
