//! The lease engine. One table of leases per CMI serves both families:
//!
//! - S/X session leases of LeCaF (000 §3.1 Table 3.1, §5.1.1 Table 5.1);
//! - I/Q leases (000 §4.4.2.2; 004 §2.3 Table 2). An I lease is a shared lease taken on a miss, a Q
//!   lease an exclusive one; a single-key IQ call is a one-key session.
//!
//! The compatibility rules (DESIGN.md §3), requested against held:
//!
//! | requested \ held | shared (S, I) | exclusive (X, Q) |
//! | --- | --- | --- |
//! | shared | grant if the value is cached; RETRY if a holder is filling it | session: ABORT the requester; IQ: RETRY |
//! | exclusive | void (wound) the holders and grant, unless one is golden: then ABORT the requester | write-around: grant too; write-through: ABORT the requester |
//!
//! A session's leases live `lease_ms` from its first grant, and a fresh `lease_ms` from its
//! validation, on the monotonic clock ([`Now::mono_ms`]): a step of the wall clock changes no
//! lease. No renewal reaches past the session's maximum lifetime, `max_session_ms` from its
//! start. When they run out the session is aborted, and unpinned keys it held exclusively are
//! deleted: the holder may have changed the data store already, so the cached value can no longer
//! be trusted (000 §3.1). A wound aborts a session that has not validated (golden leases are never
//! voided), and a session writes its data store only once validated (000 §5.2), so a wound deletes
//! nothing of a session's own, as 000 §5.1.1.2 has it; only an IQ writer's keys go, since IQ writes
//! do not validate. Aborted sessions stay as tombstones for `tombstone_ms` so their late calls
//! still get ABORT rather than silently starting a new session with the same id.

use std::borrow::Cow;

use cads_protocol::{ErrorKind, ErrorReply, MarkOp, SessionId};

use crate::store::{entry_charge, Budget, PutOptions, Ttl};
use crate::{Engine, HashMap, HashSet, Mode, Now};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// S, or I when taken on a miss.
    Shared,
    /// X, or Q.
    Exclusive,
}

/// The lease object of a key: its kind and the sessions holding it (000 §5.1.1). A set, so that
/// joining, leaving and asking "do I hold it?" cost the same however many sessions share the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub kind: LeaseKind,
    pub holders: HashSet<SessionId>,
    /// How many holders are validated sessions holding it shared: golden leases no exclusive
    /// request may void. Counted, so that an exclusive request learns it without visiting every
    /// holder.
    pub golden: usize,
}

impl Lease {
    fn new(kind: LeaseKind, holder: SessionId) -> Lease {
        let mut holders = HashSet::default();
        holders.insert(holder);
        Lease {
            kind,
            holders,
            golden: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    Active,
    /// Validated: its shared leases are golden and the CMI may no longer void them.
    Validated,
    /// Aborted by the CMI (wounded, expired, conflicting request, flush); kept as a tombstone.
    Aborted,
}

/// A session's private version of a key, swapped in at commit (000 §5.1.1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    Value {
        value: Vec<u8>,
        pinned: bool,
    },
    /// Append `delta` to the cached value, `base_len` bytes long, at commit. The session's
    /// exclusive lease keeps that value as it is until then, so an append to a long value (a
    /// write-back queue) copies only the bytes it adds. It is charged as the whole value it makes,
    /// as a copy would be (ARCHITECTURE.md, "Memory"); `pinned` is the cached value's.
    Append {
        delta: Vec<u8>,
        base_len: usize,
        pinned: bool,
    },
    /// Delete the key at commit.
    Delete,
}

impl Pending {
    /// The bytes this version is charged, and whether they count as pinned.
    pub(crate) fn charge(&self, key: &[u8]) -> Option<(usize, bool)> {
        match self {
            Pending::Value { value, pinned } => {
                Some((entry_charge(key.len(), value.len()), *pinned))
            }
            Pending::Append {
                delta,
                base_len,
                pinned,
            } => Some((entry_charge(key.len(), base_len + delta.len()), *pinned)),
            Pending::Delete => None,
        }
    }
}

/// What a session sees of a key: the cached value or its own version, followed by the bytes it
/// has appended and not yet committed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionValue<'a> {
    pub head: &'a [u8],
    pub appended: &'a [u8],
    pub pinned: bool,
}

impl<'a> SessionValue<'a> {
    pub fn len(&self) -> usize {
        self.head.len() + self.appended.len()
    }

    /// The value's bytes, copied only when the session has appended to it.
    pub fn bytes(&self) -> Cow<'a, [u8]> {
        if self.appended.is_empty() {
            Cow::Borrowed(self.head)
        } else {
            Cow::Owned([self.head, self.appended].concat())
        }
    }
}

/// What a session holds on one key.
#[derive(Clone, Debug)]
pub struct Hold {
    pub kind: LeaseKind,
    pub pending: Option<Pending>,
    /// What commit does to the key's marker.
    pub mark: MarkOp,
}

#[derive(Clone, Debug)]
pub struct Session {
    pub state: SessionState,
    /// When its leases expire; for a tombstone, when it is forgotten (monotonic ms).
    pub deadline: u64,
    /// Its maximum lifetime ends here (monotonic ms): validation renews its leases up to this
    /// time, no further.
    pub ends_by: u64,
    /// The deadline is `ends_by`, which came before a full lease lifetime.
    pub cut_short: bool,
    /// What it holds, by key: looking a key up costs the same however many keys it holds.
    pub holds: HashMap<Box<[u8]>, Hold>,
    /// Its ticket (`LPRIORITY`): when its work first started; its exclusive requests then wait
    /// for younger sessions instead of giving way (`contention`).
    pub ticket: Option<u64>,
    /// Keys it has reserved while waiting for them.
    pub reserved: HashSet<Box<[u8]>>,
    /// The configuration it routes by (`LCONFIG`, Gemini): see `fencing`.
    pub config: Option<u64>,
    /// It took a Q lease with an IQ command (`QAREG`, `QAREAD`): an IQ writer changes the data
    /// store under its Q leases without validating, so a wound must not trust what it holds.
    pub iq_writer: bool,
}

impl Session {
    pub(crate) fn hold(&self, key: &[u8]) -> Option<&Hold> {
        self.holds.get(key)
    }

    fn hold_mut(&mut self, key: &[u8]) -> Option<&mut Hold> {
        self.holds.get_mut(key)
    }

    fn validated(&self) -> bool {
        self.state == SessionState::Validated
    }
}

/// Who asks: a session command (a refused shared request aborts the session) or an IQ command (a
/// refused I request backs off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requester {
    Session,
    Iq,
}

/// Why a session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndCause {
    /// LABORT: the client rolled back; nothing is kept.
    ClientAbort,
    /// The session asked for a lease it cannot have.
    Conflict,
    /// An exclusive request voided its shared lease.
    Wounded,
    /// Its leases ran out.
    Expired,
    /// FLUSHALL.
    Flushed,
    /// Refused by one of Gemini's fences (`fencing`): as on expiry, the keys it held exclusively
    /// go, since its data-store write may have happened and its commit will not come here.
    Fenced,
}

enum Decision {
    New,
    Join,
    Already,
    /// Void these holders, then hold the lease exclusively.
    Take(Vec<SessionId>),
    Retry,
    Abort,
    /// A ticketed session older than every holder in its way: RETRY, and the key is reserved
    /// for it (`contention`).
    Wait,
}

/// Bytes of session state charged per session (live or tombstone): the record, its slot in the
/// session table and its entry in the deadline index. Estimates, fixed so that the accounting is
/// deterministic, like `ENTRY_OVERHEAD`.
pub const SESSION_OVERHEAD: usize = 128;
/// Bytes charged per hold of a session on a key, beyond the key: the slot in the session's holds
/// and the session's place among the lease's holders.
pub const HOLD_OVERHEAD: usize = 80;
/// Bytes charged per lease, beyond the key: the slot in the lease table and the holder set.
pub const LEASE_OVERHEAD: usize = 96;

fn hold_charge(key: &[u8]) -> usize {
    key.len() + HOLD_OVERHEAD
}

pub(crate) fn lease_charge(key: &[u8]) -> usize {
    key.len() + LEASE_OVERHEAD
}

/// NOTSTORED for a request that would take the sessions' state past `max_session_memory`.
fn sessions_full() -> ErrorReply {
    ErrorReply::new(
        ErrorKind::NotStored,
        "too many sessions: their state is at max-session-memory; nothing was changed, retry later",
    )
}

impl Engine {
    pub(crate) fn lease_ms(&self) -> u64 {
        self.config().lease_ms
    }

    /// Refuses (and counts) a request that would grow the sessions' state by `bytes` past its cap.
    pub(crate) fn session_room(&mut self, bytes: usize) -> Result<(), ErrorReply> {
        let max = self.config().max_session_memory;
        if bytes > 0 && max != 0 && self.session_bytes + bytes > max {
            self.stats.sessions_refused += 1;
            return Err(sessions_full());
        }
        Ok(())
    }

    /// Starts session `sid` (which must not exist): its leases live `lease_ms`, and it lives
    /// `max_session_ms` at most.
    fn open_session(&mut self, sid: SessionId, now: Now) {
        self.open_session_with(sid, None, now);
    }

    /// LPRIORITY for a session the CMI does not know yet: opens it with its ticket.
    pub(crate) fn open_ticketed_session(
        &mut self,
        sid: SessionId,
        ticket: u64,
        now: Now,
    ) -> Result<(), ErrorReply> {
        self.session_room(SESSION_OVERHEAD)?;
        self.open_session_with(sid, Some(ticket), now);
        Ok(())
    }

    pub(crate) fn open_session_with(&mut self, sid: SessionId, ticket: Option<u64>, now: Now) {
        let ends_by = now.mono_ms.saturating_add(self.config().max_session_ms);
        let lease_end = now.mono_ms.saturating_add(self.lease_ms());
        let session = Session {
            state: SessionState::Active,
            deadline: lease_end.min(ends_by),
            ends_by,
            cut_short: ends_by < lease_end,
            holds: HashMap::default(),
            ticket,
            reserved: HashSet::default(),
            config: None,
            iq_writer: false,
        };
        self.put_session(sid, session);
    }

    /// Files a session under `sid`: the table, the deadline index, its bytes, the tombstone count.
    /// Its holds are charged as they are added.
    fn put_session(&mut self, sid: SessionId, session: Session) {
        self.deadlines.insert((session.deadline, sid));
        self.session_bytes += SESSION_OVERHEAD;
        if session.state == SessionState::Aborted {
            self.tombstones += 1;
        }
        self.sessions.insert(sid, session);
    }

    /// Takes a session out of the table and the deadline index, uncharges its record and drops
    /// its reservations; its holds stay charged until each goes through `release`.
    fn take_session(&mut self, sid: SessionId) -> Option<Session> {
        let mut session = self.sessions.remove(&sid)?;
        let reserved = std::mem::take(&mut session.reserved);
        self.drop_reservations(sid, reserved);
        self.deadlines.remove(&(session.deadline, sid));
        self.session_bytes -= SESSION_OVERHEAD;
        if session.state == SessionState::Aborted {
            self.tombstones -= 1;
        }
        Some(session)
    }

    /// A live (not aborted) session, or ABORT.
    pub(crate) fn live_session(&self, sid: SessionId) -> Result<&Session, ErrorReply> {
        match self.sessions.get(&sid) {
            Some(s) if s.state != SessionState::Aborted => Ok(s),
            _ => Err(ErrorReply::abort()),
        }
    }

    /// Grants `sid` a lease of kind `want` on `key`, following the compatibility tables, or answers
    /// RETRY (back off, the session lives on) or ABORT (the session is aborted).
    pub(crate) fn acquire(
        &mut self,
        sid: SessionId,
        key: &[u8],
        want: LeaseKind,
        requester: Requester,
        now: Now,
    ) -> Result<(), ErrorReply> {
        let opening = match self.sessions.get(&sid) {
            Some(s) if s.state == SessionState::Aborted => return Err(ErrorReply::abort()),
            Some(_) => false,
            None => true,
        };
        // An entry of a discarded fragment (Gemini) or an expired one is reclaimed here, as a
        // plain read reclaims it: it reads as a miss either way, and `discarded_keys` counts it.
        let cached = self.store.lookup(key, now.wall_ms).is_some();
        let mine = self
            .leases
            .get(key)
            .is_some_and(|l| l.holders.contains(&sid));
        let decision = match self.leases.get(key) {
            // An older session waits for this key: it is not for younger ones, free or not.
            // (A holder keeps going: the waiter waits for it.)
            _ if want == LeaseKind::Exclusive && !mine && self.reserved_for_older(sid, key) => {
                match requester {
                    Requester::Session => Decision::Abort,
                    Requester::Iq => Decision::Retry,
                }
            }
            None => Decision::New,
            Some(lease) => {
                match (want, lease.kind) {
                    (_, LeaseKind::Exclusive) if mine => Decision::Already,
                    (LeaseKind::Shared, LeaseKind::Shared) if mine => Decision::Already,
                    (LeaseKind::Shared, LeaseKind::Shared) => {
                        if cached {
                            Decision::Join
                        } else {
                            Decision::Retry
                        }
                    }
                    // Readers do not wait: a writer's commit changes or deletes the value anyway,
                    // and a reader polling behind a stream of writers only costs round trips.
                    (LeaseKind::Shared, LeaseKind::Exclusive) => match requester {
                        Requester::Session => Decision::Abort,
                        Requester::Iq => Decision::Retry,
                    },
                    (LeaseKind::Exclusive, LeaseKind::Shared) => {
                        let mine_golden = mine && self.sessions[&sid].validated();
                        if lease.golden > usize::from(mine_golden) {
                            // Golden holders are about to commit: an older requester waits for
                            // them (the others it will wound when it takes the lease).
                            let golden =
                                lease.holders.iter().copied().filter(|h| {
                                    self.sessions.get(h).is_some_and(Session::validated)
                                });
                            if requester == Requester::Session && self.may_wait(sid, golden) {
                                Decision::Wait
                            } else {
                                Decision::Abort
                            }
                        } else {
                            // Every other holder is wounded: the cost is one per lease voided.
                            let others = lease.holders.iter().copied().filter(|&h| h != sid);
                            Decision::Take(others.collect())
                        }
                    }
                    (LeaseKind::Exclusive, LeaseKind::Exclusive) => match self.mode() {
                        Mode::WriteAround => Decision::Join,
                        Mode::WriteThrough
                            if requester == Requester::Session
                                && self.may_wait(sid, lease.holders.iter().copied()) =>
                        {
                            Decision::Wait
                        }
                        Mode::WriteThrough => Decision::Abort,
                    },
                }
            }
        };
        // What the request adds to the sessions' state; past the cap it is refused before anything
        // changes (a tombstone, which a conflict would leave, counts as a session).
        let grows = match decision {
            Decision::New => hold_charge(key) + lease_charge(key),
            Decision::Join => hold_charge(key),
            Decision::Take(_) if !mine => hold_charge(key),
            Decision::Wait => self.reservation_charge(key),
            _ => 0,
        } + if opening { SESSION_OVERHEAD } else { 0 };
        self.session_room(grows)?;
        if opening {
            self.open_session(sid, now);
        }
        match &decision {
            Decision::Retry | Decision::Abort | Decision::Wait => self.note_conflict(key),
            Decision::Take(victims) if !victims.is_empty() => self.note_conflict(key),
            _ => {}
        }
        let grants = matches!(
            decision,
            Decision::New | Decision::Join | Decision::Take(_) | Decision::Already
        );
        if grants && want == LeaseKind::Exclusive {
            // A waiting writer's reservation ends with the lease it waited for, not with a read
            // of the key while it waits.
            self.unreserve(sid, key);
            if requester == Requester::Iq {
                let session = self.sessions.get_mut(&sid).expect("opened above");
                session.iq_writer = true;
            }
        }
        match decision {
            Decision::Already => Ok(()),
            Decision::Retry => {
                self.stats.retries += 1;
                Err(ErrorReply::retry())
            }
            Decision::Wait => {
                self.stats.retries += 1;
                self.stats.lease_waits += 1;
                self.reserve(sid, key);
                Err(ErrorReply::retry())
            }
            Decision::Abort => {
                self.end_session(sid, EndCause::Conflict, now);
                Err(ErrorReply::lease_conflict(key))
            }
            Decision::New => {
                self.leases.insert(key.into(), Lease::new(want, sid));
                self.session_bytes += lease_charge(key);
                self.store.set_leased(key, true);
                self.add_hold(sid, key, want);
                self.granted(key, want);
                Ok(())
            }
            Decision::Join => {
                self.leases
                    .get_mut(key)
                    .expect("decided on an existing lease")
                    .holders
                    .insert(sid);
                self.add_hold(sid, key, want);
                self.granted(key, want);
                Ok(())
            }
            Decision::Take(victims) => {
                self.stats.leases_voided += victims.len() as u64;
                for victim in victims {
                    self.end_session(victim, EndCause::Wounded, now);
                }
                // The victims are gone from the lease; what is left is at most our own S lease.
                let replaced = self
                    .leases
                    .insert(key.into(), Lease::new(LeaseKind::Exclusive, sid));
                if replaced.is_none() {
                    self.session_bytes += lease_charge(key);
                }
                self.store.set_leased(key, true);
                let session = self.sessions.get_mut(&sid).expect("opened above");
                match session.hold_mut(key) {
                    Some(hold) => hold.kind = LeaseKind::Exclusive,
                    None => self.add_hold(sid, key, LeaseKind::Exclusive),
                }
                self.granted(key, LeaseKind::Exclusive);
                Ok(())
            }
        }
    }

    /// Records a new hold of `sid` on `key`, whose lease already lists it as a holder.
    fn add_hold(&mut self, sid: SessionId, key: &[u8], kind: LeaseKind) {
        self.session_bytes += hold_charge(key);
        let session = self.sessions.get_mut(&sid).expect("session is open");
        session.holds.insert(
            key.into(),
            Hold {
                kind,
                pending: None,
                mark: MarkOp::Keep,
            },
        );
        if kind == LeaseKind::Shared && session.validated() {
            self.leases.get_mut(key).expect("lease granted").golden += 1;
        }
    }

    fn granted(&mut self, key: &[u8], kind: LeaseKind) {
        self.stats.leases_granted += 1;
        if kind == LeaseKind::Exclusive {
            self.store.log_exclusive_lease(key);
        }
    }

    /// Takes `sid`'s hold on `key` (already out of its session) off the holders of the lease,
    /// removing the lease when it was the last. `golden`: the hold was a validated session's
    /// shared one.
    fn release(&mut self, sid: SessionId, key: &[u8], golden: bool) {
        self.session_bytes -= hold_charge(key);
        if let Some(lease) = self.leases.get_mut(key) {
            if lease.holders.remove(&sid) && golden {
                lease.golden -= 1;
            }
            if lease.holders.is_empty() {
                self.leases.remove(key);
                self.session_bytes -= lease_charge(key);
                self.store.set_leased(key, false);
            }
        }
    }

    fn uncharge_pending(&mut self, key: &[u8], pending: &Option<Pending>) {
        if let Some((bytes, pinned)) = pending.as_ref().and_then(|p| p.charge(key)) {
            self.store.uncharge(bytes, pinned);
        }
    }

    /// Ends a session: drops its pending versions and releases its leases. A CMI-initiated end
    /// (conflict, wound, expiry, flush) leaves a tombstone; expiry, a fence, and a wound of an IQ
    /// writer also delete the unpinned keys the session held exclusively (see the module's
    /// documentation).
    pub(crate) fn end_session(&mut self, sid: SessionId, cause: EndCause, now: Now) {
        let Some(mut session) = self.take_session(sid) else {
            return;
        };
        let drop_exclusive = match cause {
            EndCause::Expired | EndCause::Fenced => true,
            EndCause::Wounded => session.iq_writer,
            EndCause::ClientAbort | EndCause::Conflict | EndCause::Flushed => false,
        };
        let was_live = session.state != SessionState::Aborted;
        let validated = session.validated();
        for (key, hold) in std::mem::take(&mut session.holds) {
            self.uncharge_pending(&key, &hold.pending);
            self.release(sid, &key, validated && hold.kind == LeaseKind::Shared);
            if cause == EndCause::Expired {
                self.stats.leases_expired += 1;
            }
            if drop_exclusive && hold.kind == LeaseKind::Exclusive {
                if let Some(entry) = self.store.peek(&key, now.wall_ms) {
                    if !entry.pinned {
                        self.store.remove(&key);
                    }
                }
            }
        }
        if was_live {
            self.stats.sessions_aborted += 1;
            match cause {
                EndCause::Wounded => self.stats.sessions_wounded += 1,
                EndCause::Conflict => self.stats.sessions_conflicted += 1,
                EndCause::Expired => {
                    self.stats.sessions_expired += 1;
                    if session.cut_short {
                        self.stats.sessions_outlived += 1;
                    }
                }
                _ => {}
            }
        }
        let tombstone = was_live && cause != EndCause::ClientAbort;
        if tombstone {
            session.state = SessionState::Aborted;
            session.deadline = now.mono_ms.saturating_add(self.config().tombstone_ms);
            self.put_session(sid, session);
        }
    }

    /// Aborts sessions whose leases ran out and forgets tombstones whose time is up.
    pub(crate) fn expire_sessions(&mut self, now: Now) {
        while let Some(&(deadline, sid)) = self.deadlines.first() {
            if deadline > now.mono_ms {
                break;
            }
            let tombstone = self
                .sessions
                .get(&sid)
                .is_some_and(|s| s.state == SessionState::Aborted);
            if tombstone {
                self.take_session(sid);
            } else {
                self.end_session(sid, EndCause::Expired, now);
            }
        }
    }

    /// The value `sid` sees for `key`: its own pending version if it has one, else the cached one
    /// (with what the session appended to it).
    pub(crate) fn session_view(
        &self,
        sid: SessionId,
        key: &[u8],
        now: Now,
    ) -> Option<SessionValue<'_>> {
        let pending = self
            .sessions
            .get(&sid)
            .and_then(|s| s.hold(key))
            .and_then(|h| h.pending.as_ref());
        let cached = || self.store.peek(key, now.wall_ms);
        match pending {
            Some(Pending::Value { value, pinned }) => Some(SessionValue {
                head: value,
                appended: &[],
                pinned: *pinned,
            }),
            Some(Pending::Append { delta, .. }) => cached().map(|e| SessionValue {
                head: &e.value,
                appended: delta,
                pinned: e.pinned,
            }),
            Some(Pending::Delete) => None,
            None => cached().map(|e| SessionValue {
                head: &e.value,
                appended: &[],
                pinned: e.pinned,
            }),
        }
    }

    pub(crate) fn holds(&self, sid: SessionId, key: &[u8]) -> Option<LeaseKind> {
        self.sessions.get(&sid)?.hold(key).map(|h| h.kind)
    }

    /// Whether a session holds an exclusive lease on `key`.
    pub(crate) fn exclusively_leased(&self, key: &[u8]) -> bool {
        self.leases
            .get(key)
            .is_some_and(|l| l.kind == LeaseKind::Exclusive)
    }

    /// Replaces `sid`'s pending version of `key` (the session must hold a lease on it), charging
    /// its bytes. NOTSTORED leaves the previous pending version in place.
    pub(crate) fn set_pending(
        &mut self,
        sid: SessionId,
        key: &[u8],
        pending: Pending,
    ) -> Result<(), ErrorReply> {
        self.set_pending_within(sid, key, pending, Budget::Capped)
    }

    /// [`set_pending`](Self::set_pending) charged to `budget`.
    pub(crate) fn set_pending_within(
        &mut self,
        sid: SessionId,
        key: &[u8],
        pending: Pending,
        budget: Budget,
    ) -> Result<(), ErrorReply> {
        let old = self
            .sessions
            .get_mut(&sid)
            .and_then(|s| s.hold_mut(key))
            .expect("a session sets a pending version only under its lease")
            .pending
            .take();
        self.uncharge_pending(key, &old);
        if let Some((charge, pinned)) = pending.charge(key) {
            // Only what the new version adds over the old one needs room (ARCHITECTURE.md,
            // "Memory"): a version that does not grow is taken even where markers, which are
            // never refused, have filled the pinned cap.
            let old_charge = old.as_ref().and_then(|p| p.charge(key));
            let grows = match old_charge {
                Some((old_charge, old_pinned)) if old_pinned == pinned => charge > old_charge,
                _ => true,
            };
            let budget = if grows { budget } else { Budget::Forced };
            if self.store.charge(charge, pinned, budget).is_err() {
                if let Some((old_charge, old_pinned)) = old_charge {
                    let _ = self.store.charge(old_charge, old_pinned, Budget::Forced);
                }
                self.put_pending(sid, key, old);
                return Err(ErrorReply::not_stored());
            }
        }
        self.put_pending(sid, key, Some(pending));
        Ok(())
    }

    /// Stages `delta` after `current`, what `sid` sees of `key`: added to its pending version
    /// if it has one, else kept apart from the cached value until commit, so that neither is
    /// copied. Charged as a copy would be; NOTSTORED changes nothing.
    pub(crate) fn stage_append(
        &mut self,
        sid: SessionId,
        key: &[u8],
        current: (usize, bool),
        delta: &[u8],
    ) -> Result<(), ErrorReply> {
        let (current_len, pinned) = current;
        let hold = self
            .sessions
            .get(&sid)
            .and_then(|s| s.hold(key))
            .expect("a session appends only under its lease");
        let grows = match hold.pending {
            Some(_) => delta.len(),
            None => entry_charge(key.len(), current_len + delta.len()),
        };
        self.store
            .charge(grows, pinned, Budget::Capped)
            .map_err(|_| ErrorReply::not_stored())?;
        let hold = self
            .sessions
            .get_mut(&sid)
            .and_then(|s| s.hold_mut(key))
            .expect("looked up above");
        match &mut hold.pending {
            Some(Pending::Value { value, .. }) => value.extend_from_slice(delta),
            Some(Pending::Append { delta: staged, .. }) => staged.extend_from_slice(delta),
            Some(Pending::Delete) => unreachable!("a deleted key has nothing to append to"),
            None => {
                hold.pending = Some(Pending::Append {
                    delta: delta.to_vec(),
                    base_len: current_len,
                    pinned,
                })
            }
        }
        Ok(())
    }

    /// Forgets `sid`'s pending version of `key`, returning its bytes.
    pub(crate) fn drop_pending(&mut self, sid: SessionId, key: &[u8]) {
        let old = self
            .sessions
            .get_mut(&sid)
            .and_then(|s| s.hold_mut(key))
            .and_then(|h| h.pending.take());
        self.uncharge_pending(key, &old);
    }

    fn put_pending(&mut self, sid: SessionId, key: &[u8], pending: Option<Pending>) {
        if let Some(hold) = self.sessions.get_mut(&sid).and_then(|s| s.hold_mut(key)) {
            hold.pending = pending;
        }
    }

    pub(crate) fn set_mark(&mut self, sid: SessionId, key: &[u8], op: MarkOp) {
        if op == MarkOp::Keep {
            return;
        }
        if let Some(hold) = self.sessions.get_mut(&sid).and_then(|s| s.hold_mut(key)) {
            hold.mark = op;
        }
    }

    /// Applies one hold at commit: swaps the pending version in, applies the marker change,
    /// releases the lease. Never fails: the pending version's bytes were reserved when it was made.
    /// `validated`: the session was validated (its shared leases are golden).
    fn commit_hold(&mut self, sid: SessionId, key: &[u8], hold: Hold, validated: bool) {
        if let Some((charge, pinned)) = hold.pending.as_ref().and_then(|p| p.charge(key)) {
            self.store.uncharge(charge, pinned);
        }
        match hold.pending {
            Some(Pending::Value { value, pinned }) => {
                let leased = self.leases.contains_key(key);
                let _ = self.store.put(
                    key,
                    value,
                    PutOptions {
                        pinned,
                        ttl: Ttl::Keep,
                        leased,
                        force: true,
                    },
                );
            }
            Some(Pending::Append { delta, .. }) => {
                // An expiry, or the session's own ISET, can have taken the value from under the
                // lease: what is gone stays gone, a miss.
                if let Some(slot) = self.store.find(key) {
                    let _ = self.store.append(slot, &delta, true);
                }
            }
            Some(Pending::Delete) => {
                self.store.remove(key);
            }
            None => {}
        }
        match hold.mark {
            MarkOp::Keep => {}
            MarkOp::Set => self.set_marker(key, true),
            MarkOp::Clear => self.set_marker(key, false),
        }
        self.release(sid, key, validated && hold.kind == LeaseKind::Shared);
    }

    /// LCOMMIT: applies every hold and forgets the session.
    pub(crate) fn commit_session(&mut self, sid: SessionId) -> Result<(), ErrorReply> {
        self.live_session(sid)?;
        let mut session = self.take_session(sid).expect("checked live");
        let validated = session.validated();
        for (key, hold) in std::mem::take(&mut session.holds) {
            self.commit_hold(sid, &key, hold, validated);
        }
        self.stats.sessions_committed += 1;
        Ok(())
    }

    /// Commits one key of a session (IQSET, SAR, DAR); the session ends with its last hold.
    pub(crate) fn commit_key(&mut self, sid: SessionId, key: &[u8]) {
        let Some(session) = self.sessions.get_mut(&sid) else {
            return;
        };
        let Some(hold) = session.holds.remove(key) else {
            return;
        };
        let ended = session.holds.is_empty();
        let validated = session.validated();
        self.commit_hold(sid, key, hold, validated);
        if ended {
            self.take_session(sid).expect("looked up above");
            self.stats.sessions_committed += 1;
        }
    }

    /// LVALIDATE: the session's shared leases become golden, and its leases are renewed for a
    /// full lifetime: validation proves the client alive, and what remains (the data-store
    /// commit, then LCOMMIT on every CMI) must not be cut short by leases that a long session has
    /// almost used up. Otherwise a session could commit on one CMI after its leases expired on
    /// another, leaving its changes on some CMIs only.
    ///
    /// Renewal stops at the session's maximum lifetime (`max_session_ms` from its start): a
    /// session that validates over and over would otherwise keep its leases, and block every
    /// writer of its keys, for as long as it liked.
    pub(crate) fn validate_session(&mut self, sid: SessionId, now: Now) -> Result<(), ErrorReply> {
        self.live_session(sid)?;
        let lease_end = now.mono_ms.saturating_add(self.lease_ms());
        let session = self.sessions.get_mut(&sid).expect("checked live");
        let renewed = lease_end.min(session.ends_by);
        session.cut_short = session.ends_by < lease_end;
        if !session.validated() {
            session.state = SessionState::Validated;
            for (key, hold) in &session.holds {
                if hold.kind == LeaseKind::Shared {
                    self.leases
                        .get_mut(key)
                        .expect("a hold has its lease")
                        .golden += 1;
                }
            }
        }
        let old = std::mem::replace(&mut session.deadline, renewed);
        self.deadlines.remove(&(old, sid));
        self.deadlines.insert((renewed, sid));
        Ok(())
    }
}
