//! Hot keys: which of two sessions contending for a key waits and which gives way, and which
//! keys they contend for most.
//!
//! The lease tables (`lease.rs`, 000 Tables 5.1-5.3) settle every conflict by aborting the
//! requester, which is safe but not fair: on a hot key a session can lose again and again, each
//! retry a fresh session with no memory of the last. Here a session that lost before says so with
//! a *ticket* (`LPRIORITY`): the time its work first started, which the client keeps across its
//! retries. Ticketed writers follow wait-die, the rule databases use for lock conflicts
//! (Rosenkrantz, Stearns and Lewis, 1978):
//!
//! - a writer (exclusive request) older than every session in its way is answered RETRY instead
//!   of ABORT: it keeps its session and its leases, backs off and asks again; and it *reserves*
//!   the key, so that a younger writer cannot slip in between the holder's release and its next
//!   try;
//! - anyone else gives way as the tables say (ABORT), and so does a younger writer asking for a
//!   key an older one has reserved. Readers never wait and are never refused by a reservation: a
//!   writer's commit changes or deletes the value they want anyway.
//!
//! Age is the pair (ticket, session id), with no ticket counting as the youngest of all: the
//! same order on every CMI, so waits only ever go from an older session to a younger one and no
//! cycle of waits can form, on one CMI or across several. A waiter's wait ends when the holders
//! release or their leases run out, both bounded; a client gives up after its retry budget. A
//! session that keeps its ticket across retries becomes, in time, the oldest contender for any
//! key, and then nothing takes a key it asks for from it: every writer eventually wins.
//!
//! Sessions without a ticket (every first attempt) behave exactly as the tables say, so the
//! fast path costs nothing and the tables' tests hold as written.

use cads_protocol::reply::KEY_SHOWN_BYTES;
use cads_protocol::{ErrorReply, SessionId};

use crate::lease::lease_charge;
use crate::{Engine, HashSet};

/// How many contended keys are tracked for INFO.
pub const HOT_KEYS: usize = 8;

/// The most contended keys, estimated with the Space-Saving algorithm (Metwally, Agrawal and El
/// Abbadi, 2005): a fixed number of counters; a key not counted yet takes over the smallest
/// counter and adds one to it. Every key counted more often than the smallest counter is in the
/// list, and each count overstates its key's by at most that smallest count.
#[derive(Clone, Debug, Default)]
pub struct HotKeys {
    counts: Vec<(Box<[u8]>, u64)>,
}

impl HotKeys {
    /// Counts one conflict on `key`.
    pub fn record(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(KEY_SHOWN_BYTES)];
        if let Some(entry) = self.counts.iter_mut().find(|(k, _)| &**k == key) {
            entry.1 += 1;
        } else if self.counts.len() < HOT_KEYS {
            self.counts.push((key.into(), 1));
        } else if let Some(smallest) = self.counts.iter_mut().min_by_key(|(_, n)| *n) {
            *smallest = (key.into(), smallest.1 + 1);
        }
    }

    /// The keys and their counts, most contended first.
    pub fn top(&self) -> Vec<(&[u8], u64)> {
        let mut top: Vec<(&[u8], u64)> = self.counts.iter().map(|(k, n)| (&**k, *n)).collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top
    }

    pub fn clear(&mut self) {
        self.counts.clear();
    }
}

impl Engine {
    /// A session's age: smaller is older. Sessions without a ticket are the youngest.
    fn age(&self, sid: SessionId) -> (u64, SessionId) {
        let ticket = self.sessions.get(&sid).and_then(|s| s.ticket);
        (ticket.unwrap_or(u64::MAX), sid)
    }

    /// Whether `sid` may wait for every session in `others` (those other than itself): it has a
    /// ticket and is older than each of them.
    pub(crate) fn may_wait(
        &self,
        sid: SessionId,
        others: impl IntoIterator<Item = SessionId>,
    ) -> bool {
        if self.sessions.get(&sid).and_then(|s| s.ticket).is_none() {
            return false;
        }
        let mine = self.age(sid);
        others
            .into_iter()
            .filter(|&other| other != sid)
            .all(|other| mine < self.age(other))
    }

    /// Whether an older session has reserved `key`, so `sid` must give way.
    pub(crate) fn reserved_for_older(&self, sid: SessionId, key: &[u8]) -> bool {
        self.reservations
            .get(key)
            .is_some_and(|&owner| owner != sid && self.age(owner) < self.age(sid))
    }

    /// The bytes a reservation of `key` would add: none if the key is reserved already (by
    /// this session, by an older one that keeps it, or by a younger one it replaces).
    pub(crate) fn reservation_charge(&self, key: &[u8]) -> usize {
        if self.reservations.contains_key(key) {
            0
        } else {
            lease_charge(key)
        }
    }

    /// `sid` waits for `key`: it reserves it unless an older session has (its own wait is then
    /// still bounded, by that session's).
    pub(crate) fn reserve(&mut self, sid: SessionId, key: &[u8]) {
        match self.reservations.get(key).copied() {
            Some(owner) if owner == sid => return,
            Some(owner) if self.age(owner) < self.age(sid) => return,
            Some(owner) => self.unreserve(owner, key),
            None => {}
        }
        self.reservations.insert(key.into(), sid);
        self.session_bytes += lease_charge(key);
        if let Some(session) = self.sessions.get_mut(&sid) {
            session.reserved.insert(key.into());
        }
    }

    /// Takes `sid`'s reservation of `key` away, if it has one (it got the lease, or an older
    /// waiter took the reservation over). Runs on every grant: with no reservation of the key,
    /// which is nearly always, it costs one lookup.
    pub(crate) fn unreserve(&mut self, sid: SessionId, key: &[u8]) {
        if self.drop_reservation(sid, key) {
            if let Some(session) = self.sessions.get_mut(&sid) {
                session.reserved.remove(key);
            }
        }
    }

    /// Drops every reservation of a session that ended (`keys`: those it had).
    pub(crate) fn drop_reservations(&mut self, sid: SessionId, keys: HashSet<Box<[u8]>>) {
        for key in keys {
            self.drop_reservation(sid, &key);
        }
    }

    /// Removes and uncharges the reservation of `key` if `sid` holds it; returns whether it did.
    /// (A session lists only keys it holds the reservation of, so its own list needs no look
    /// otherwise.)
    fn drop_reservation(&mut self, sid: SessionId, key: &[u8]) -> bool {
        if self.reservations.get(key) != Some(&sid) {
            return false;
        }
        self.reservations.remove(key);
        self.session_bytes -= lease_charge(key);
        true
    }

    /// LPRIORITY: gives session `sid` its ticket, opening the session if the CMI does not know
    /// it yet. A session keeps the first ticket it is given: its age cannot be moved once other
    /// sessions have waited for it or given way to it.
    pub(crate) fn set_ticket(
        &mut self,
        sid: SessionId,
        ticket: u64,
        now: crate::Now,
    ) -> Result<(), ErrorReply> {
        match self.sessions.get_mut(&sid) {
            Some(s) if s.state == crate::SessionState::Aborted => Err(ErrorReply::abort()),
            Some(s) => {
                s.ticket.get_or_insert(ticket);
                Ok(())
            }
            None => {
                self.open_ticketed_session(sid, ticket, now)?;
                Ok(())
            }
        }
    }

    /// Counts a conflict on `key` for INFO's contended keys.
    pub(crate) fn note_conflict(&mut self, key: &[u8]) {
        self.stats.lease_conflicts += 1;
        self.hot_keys.record(key);
    }

    /// The most contended keys since start (or `CONFIG RESETSTAT`), most contended first.
    pub fn hot_keys(&self) -> Vec<(&[u8], u64)> {
        self.hot_keys.top()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_saving_keeps_the_hottest_keys() {
        let mut hot = HotKeys::default();
        for i in 0..100u32 {
            hot.record(b"hot");
            hot.record(format!("cold{i}").as_bytes());
        }
        for _ in 0..50 {
            hot.record(b"warm");
        }
        let top = hot.top();
        assert_eq!(top.len(), HOT_KEYS);
        assert_eq!(top[0], (&b"hot"[..], 100));
        assert_eq!(top[1].0, b"warm");
        assert!(top[1].1 >= 50, "a count never understates");
    }
}
