//! A reference model of one CMI: its cached entries, markers, leases and sessions, written from the
//! papers and the project's documents rather than from the engine, so that `tests/model_based.rs`
//! can check the engine against it reply by reply.
//!
//! Sources, rule by rule:
//! - S/X leases: 000 Table 3.1 (write-through) and Table 5.1 (write-around), 000 §5.1.1;
//! - I/Q leases: 000 §4.4.2.2 and 004 Table 2, with write-around's Q leases shared (DESIGN.md §3);
//! - sessions (active, validated, aborted), golden S leases, wounding: 000 §3.1 and §5.1.1;
//! - markers: 000 §4.4.2.2; pins: 000 §5.1.1.3;
//! - tickets (LPRIORITY), waiting writers and their reservations: `docs/PROTOCOL.md` ("Hot keys");
//! - everything the papers leave open: `docs/ARCHITECTURE.md` ("The engine") and `docs/PROTOCOL.md`
//!   (lifetimes on the monotonic clock, renewal on validation up to a maximum lifetime,
//!   tombstones, what an abort deletes, writes under a fill, the mode check, LEASED, sticky pins,
//!   memory and session-memory accounting).
//!
//! The model keeps no lease table: a key's lease is whatever the sessions holding it hold, which is
//! how the tables read. The one choice it leaves to the engine is which entry eviction takes (the
//! policy is pluggable): it takes victims from `victims`, in order, and records in `bad_eviction`
//! a victim that was not a candidate (pinned, leased) or room that was needed and not made.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use cads_engine::lease::{HOLD_OVERHEAD, LEASE_OVERHEAD, SESSION_OVERHEAD};
use cads_engine::{Mode, Now, ENTRY_OVERHEAD, MARKER_OVERHEAD};
use cads_protocol::{ErrorKind, ErrorReply, Reply};

mod cmd;

pub use cmd::{Cmd, Sid};

/// The configuration the model needs (the engine's `EngineConfig` fields of the same names).
#[derive(Clone, Debug)]
pub struct Limits {
    pub mode: Mode,
    pub lease_ms: u64,
    pub max_session_ms: u64,
    pub tombstone_ms: u64,
    /// 0: no limit.
    pub maxmemory: usize,
    /// 0: no separate cap.
    pub max_pinned: usize,
    /// 0: no limit.
    pub max_session_memory: usize,
}

/// S and I leases are shared, X and Q leases exclusive: one table serves both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Shared,
    Exclusive,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub value: String,
    pub pinned: bool,
}

/// A session's private version of a key, swapped in at commit.
#[derive(Clone, Debug)]
enum Pending {
    Delete,
    Value(Entry),
}

/// A session's lease on one key, with what it staged there.
#[derive(Clone, Debug)]
struct Hold {
    kind: Kind,
    pending: Option<Pending>,
    /// A marker change for commit: set (true) or clear (false).
    mark: Option<bool>,
}

#[derive(Clone, Debug)]
enum Session {
    Live {
        /// Validated: its S leases are golden.
        validated: bool,
        holds: BTreeMap<String, Hold>,
        /// When its leases expire, on the monotonic clock.
        deadline: u64,
        /// Its maximum lifetime: validation renews the deadline up to here, no further.
        ends_by: u64,
        /// Its ticket (LPRIORITY): a ticketed writer older than every session in its way waits
        /// (RETRY) and reserves the key instead of giving way.
        ticket: Option<u64>,
        /// It took a Q lease with QAREG or QAREAD: an IQ writer, which writes the data store
        /// without validating.
        iq_writer: bool,
    },
    /// Aborted by the CMI: calls get ABORT until LABORT, or until it is forgotten.
    Tombstone { forget_at: u64 },
}

/// Why the CMI ends a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Wounded,
    Expired,
    /// It asked for a lease it cannot have.
    Conflict,
    Flushed,
}

/// How a lease request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Back off and ask again; the session lives on.
    Retry,
    /// A ticketed writer waits: RETRY, and it reserves the key unless an older waiter has.
    Wait,
    Abort,
}

/// A refused shared request aborts a session but makes an IQ reader back off (000 Table 3.1
/// against §4.4.2.2).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Session,
    Iq,
}

type Outcome = Result<Reply<'static>, ErrorReply>;

#[derive(Clone, Debug)]
pub struct Model {
    pub limits: Limits,
    pub entries: BTreeMap<String, Entry>,
    pub markers: BTreeSet<String>,
    sessions: BTreeMap<Sid, Session>,
    /// Keys reserved by the oldest writer waiting for them; a reservation lasts while its
    /// session is live and has not taken the key.
    reservations: BTreeMap<String, Sid>,
    /// The keys eviction takes, in this order, when room is needed.
    pub victims: VecDeque<String>,
    pub bad_eviction: Option<String>,
}

fn bulk(value: Option<&str>) -> Reply<'static> {
    value.map_or(Reply::Nil, |v| Reply::owned_bulk(v.as_bytes().to_vec()))
}

fn entry_bytes(key: &str, value: &str) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

fn marker_reply(marked: bool) -> Reply<'static> {
    Reply::Int(marked as i64)
}

/// Redis's integer syntax: an optional minus, digits without leading zeros, within i64.
fn parse_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    canonical.then(|| s.parse().ok()).flatten()
}

/// An integer value plus `delta`, as INCRBY and LINCR compute it.
fn add(value: &str, delta: i64) -> Result<i64, ErrorReply> {
    let n = parse_int(value).ok_or_else(ErrorReply::not_integer)?;
    n.checked_add(delta)
        .ok_or_else(|| ErrorReply::err("increment or decrement would overflow"))
}

fn too_many_sessions() -> ErrorReply {
    ErrorReply::new(ErrorKind::NotStored, "too many sessions")
}

impl Model {
    pub fn new(limits: Limits) -> Model {
        Model {
            limits,
            entries: BTreeMap::new(),
            markers: BTreeSet::new(),
            sessions: BTreeMap::new(),
            reservations: BTreeMap::new(),
            victims: VecDeque::new(),
            bad_eviction: None,
        }
    }

    // ----- what can be observed -----

    /// The key's lease as INSPECT shows it: its kind and how many sessions hold it.
    pub fn lease(&self, key: &str) -> Option<(Kind, usize)> {
        let kinds: Vec<Kind> = self
            .holds()
            .filter(|(_, k, _)| *k == key)
            .map(|(_, _, h)| h.kind)
            .collect();
        kinds.first().map(|&kind| (kind, kinds.len()))
    }

    /// Live sessions and tombstones.
    pub fn session_counts(&self) -> (usize, usize) {
        let live = self
            .sessions
            .values()
            .filter(|s| matches!(s, Session::Live { .. }))
            .count();
        (live, self.sessions.len() - live)
    }

    pub fn lease_count(&self) -> usize {
        self.leased_keys().len()
    }

    /// Bytes of sessions (tombstones too), holds and leases, as ARCHITECTURE.md charges them.
    pub fn session_memory(&self) -> usize {
        let holds: usize = self.holds().map(|(_, k, _)| k.len() + HOLD_OVERHEAD).sum();
        let leases: usize = self
            .leased_keys()
            .iter()
            .map(|k| k.len() + LEASE_OVERHEAD)
            .sum();
        let reservations: usize = self
            .reservations
            .keys()
            .map(|k| k.len() + LEASE_OVERHEAD)
            .sum();
        self.sessions.len() * SESSION_OVERHEAD + holds + leases + reservations
    }

    /// Bytes used and their pinned part: entries and pending versions, markers (pinned).
    pub fn memory(&self) -> (usize, usize) {
        let pending = self.holds().filter_map(|(_, k, h)| match &h.pending {
            Some(Pending::Value(e)) => Some((k, e)),
            _ => None,
        });
        let (mut used, mut pinned) = (0, 0);
        for (key, entry) in self
            .entries
            .iter()
            .map(|(k, e)| (k.as_str(), e))
            .chain(pending)
        {
            let bytes = entry_bytes(key, &entry.value);
            used += bytes;
            pinned += if entry.pinned { bytes } else { 0 };
        }
        let markers: usize = self.markers.iter().map(|k| k.len() + MARKER_OVERHEAD).sum();
        (used + markers, pinned + markers)
    }

    fn holds(&self) -> impl Iterator<Item = (Sid, &str, &Hold)> {
        self.sessions.iter().flat_map(|(sid, s)| {
            let holds = match s {
                Session::Live { holds, .. } => Some(holds),
                Session::Tombstone { .. } => None,
            };
            holds
                .into_iter()
                .flatten()
                .map(move |(k, h)| (*sid, k.as_str(), h))
        })
    }

    fn leased_keys(&self) -> BTreeSet<&str> {
        self.holds().map(|(_, k, _)| k).collect()
    }

    // ----- the clock -----

    /// Forgets the tombstones whose time is over and ends the sessions whose leases ran out; the
    /// engine does this at every command and tick. A tombstone's time runs from when the CMI ends
    /// the session, here and for every other cause.
    pub fn expire(&mut self, now: Now) {
        let at = now.mono_ms;
        self.sessions
            .retain(|_, s| !matches!(s, Session::Tombstone { forget_at } if *forget_at <= at));
        let due: Vec<Sid> = self
            .sessions
            .iter()
            .filter(|(_, s)| matches!(s, Session::Live { deadline, .. } if *deadline <= at))
            .map(|(sid, _)| *sid)
            .collect();
        for sid in due {
            self.end(sid, End::Expired, at);
        }
    }

    // ----- commands -----

    pub fn execute(&mut self, cmd: &Cmd, now: Now) -> Reply<'static> {
        self.expire(now);
        let at = now.mono_ms;
        let outcome = match cmd {
            Cmd::Get(..) | Cmd::Set(..) | Cmd::Del(..) | Cmd::IncrBy(..) | Cmd::Append(..) => {
                self.plain(cmd)
            }
            Cmd::FlushAll { unpinned } => {
                let sids: Vec<Sid> = self.sessions.keys().copied().collect();
                for sid in sids {
                    self.end(sid, End::Flushed, at);
                }
                if *unpinned {
                    self.entries.retain(|_, e| e.pinned);
                } else {
                    self.entries.clear();
                    self.markers.clear();
                }
                Ok(Reply::OK)
            }
            Cmd::IqGet { .. }
            | Cmd::IqSet { .. }
            | Cmd::QaReg { .. }
            | Cmd::QaRead { .. }
            | Cmd::Sar { .. }
            | Cmd::Dar { .. } => self.iq(cmd, at),
            _ => self.session(cmd, at),
        };
        outcome.unwrap_or_else(Reply::Error)
    }

    /// Plain commands behave as Redis's, except that writes refuse leased keys: a lease-unaware
    /// writer must not slip between a reader's miss and its fill. Only SET unpins.
    fn plain(&mut self, cmd: &Cmd) -> Outcome {
        let unleased = |m: &Self, key: &str| match m.lease(key) {
            Some(_) => Err(ErrorReply::leased()),
            None => Ok(()),
        };
        match cmd {
            Cmd::Get(key) => Ok(bulk(self.entries.get(key).map(|e| e.value.as_str()))),
            Cmd::Set(key, value) => {
                unleased(self, key)?;
                self.store(key, value.clone(), false)?;
                Ok(Reply::OK)
            }
            Cmd::Del(key) => {
                unleased(self, key)?;
                Ok(Reply::Int(self.entries.remove(key).is_some() as i64))
            }
            Cmd::IncrBy(key, delta) => {
                unleased(self, key)?;
                let current = self.entries.get(key);
                let n = add(current.map_or("0", |e| &e.value), *delta)?;
                let pinned = current.is_some_and(|e| e.pinned);
                self.store(key, n.to_string(), pinned)?;
                Ok(Reply::Int(n))
            }
            Cmd::Append(key, bytes) => {
                unleased(self, key)?;
                let current = self.entries.get(key);
                let value = current.map_or(String::new(), |e| e.value.clone()) + bytes;
                let (len, pinned) = (value.len(), current.is_some_and(|e| e.pinned));
                self.store(key, value, pinned)?;
                Ok(Reply::Int(len as i64))
            }
            _ => unreachable!("not a plain command: {cmd:?}"),
        }
    }

    /// The session family (000 §5.1.1).
    fn session(&mut self, cmd: &Cmd, at: u64) -> Outcome {
        match cmd {
            Cmd::LGet { sid, key, rmw } => self.lget(*sid, key, *rmw, at),
            Cmd::LMGet { sid, rmw, keys } => {
                // RETRY is per key; any other refusal is the whole reply's.
                self.each(
                    keys,
                    |m, key| m.lget(*sid, key, *rmw, at),
                    &[ErrorKind::Retry],
                )
            }
            Cmd::LSet {
                sid,
                key,
                value,
                pin,
            } => self.lset(*sid, key, value, *pin, at).map(|_| Reply::OK),
            Cmd::LMSet { sid, pin, pairs } => self.each(
                pairs,
                |m, (key, value)| m.lset(*sid, key, value, *pin, at).map(|_| Reply::OK),
                // RETRY: a ticketed writer waits for that key, which is left untouched.
                &[ErrorKind::NotStored, ErrorKind::Retry],
            ),
            Cmd::LAdd {
                sid,
                key,
                value,
                pin,
            } => {
                self.write_through_only()?;
                self.write_lease(*sid, key, at)?;
                if self.view(*sid, key).is_some() {
                    return Ok(Reply::Int(0));
                }
                self.stage(
                    *sid,
                    key,
                    Pending::Value(Entry {
                        value: value.clone(),
                        pinned: *pin,
                    }),
                )?;
                Ok(Reply::Int(1))
            }
            Cmd::LDel { sid, key } => self.ldel(*sid, key, at),
            Cmd::LMDel { sid, keys } => {
                self.each(keys, |m, key| m.ldel(*sid, key, at), &[ErrorKind::Retry])
            }
            Cmd::LAppend {
                sid,
                key,
                bytes,
                prepend,
            } => {
                self.write_through_only()?;
                self.lappend(*sid, key, bytes, *prepend, at)
            }
            Cmd::LMAppend { sid, pairs } => {
                self.write_through_only()?;
                // Only ABORT is the whole reply's; other errors are per key.
                let mut replies = Vec::new();
                for (key, bytes) in pairs {
                    match self.lappend(*sid, key, bytes, false, at) {
                        Err(e) if e.kind == ErrorKind::Abort => return Err(e),
                        reply => replies.push(reply.unwrap_or_else(Reply::Error)),
                    }
                }
                Ok(Reply::Array(replies))
            }
            Cmd::LUpdate { sid, key, changes } => {
                self.write_through_only()?;
                let changes = cads_doc::Changes::parse(changes)
                    .map_err(|e| ErrorReply::err(format!("bad changes: {e}")))?;
                self.acquire(*sid, key, Kind::Exclusive, Family::Session, at)?;
                let Some(view) = self.view(*sid, key) else {
                    return Ok(Reply::Nil);
                };
                // A value that is not a document, or cannot take the changes, goes.
                match cads_doc::apply_to_text(view.value.as_bytes(), &changes) {
                    Some(text) => {
                        let value = String::from_utf8(text).expect("JSON text");
                        let len = value.len();
                        self.stage(*sid, key, Pending::Value(Entry { value, ..view }))?;
                        Ok(Reply::Int(len as i64))
                    }
                    None => {
                        self.stage(*sid, key, Pending::Delete)?;
                        Ok(Reply::Int(0))
                    }
                }
            }
            Cmd::LIncr { sid, key, delta } => {
                self.write_through_only()?;
                self.acquire(*sid, key, Kind::Exclusive, Family::Session, at)?;
                let Some(view) = self.view(*sid, key) else {
                    return Ok(Reply::Nil);
                };
                let n = add(&view.value, *delta)?;
                self.stage(
                    *sid,
                    key,
                    Pending::Value(Entry {
                        value: n.to_string(),
                        ..view
                    }),
                )?;
                Ok(Reply::Int(n))
            }
            Cmd::LUnpin { sid, key } => {
                self.write_through_only()?;
                self.acquire(*sid, key, Kind::Exclusive, Family::Session, at)?;
                let Some(view) = self.view(*sid, key) else {
                    return Ok(Reply::Int(0));
                };
                self.stage(
                    *sid,
                    key,
                    Pending::Value(Entry {
                        pinned: false,
                        ..view
                    }),
                )?;
                Ok(Reply::Int(1))
            }
            Cmd::LMark { sid, key, set } => {
                self.require_live(*sid)?;
                let hold = self
                    .hold_mut(*sid, key)
                    .ok_or_else(|| ErrorReply::err("the session holds no lease on the key"))?;
                if *set && hold.kind == Kind::Shared {
                    return Err(ErrorReply::err("setting a marker needs an exclusive lease"));
                }
                hold.mark = Some(*set);
                Ok(Reply::OK)
            }
            Cmd::LValidate(sid) => {
                self.require_live(*sid)?;
                let lease_ms = self.limits.lease_ms;
                if let Some(Session::Live {
                    validated,
                    deadline,
                    ends_by,
                    ..
                }) = self.sessions.get_mut(sid)
                {
                    // 000 §3.1: its S leases become golden. The renewal is ours.
                    *validated = true;
                    *deadline = (at + lease_ms).min(*ends_by);
                }
                Ok(Reply::OK)
            }
            Cmd::LCommit(sid) => {
                self.require_live(*sid)?;
                let Some(Session::Live { holds, .. }) = self.forget(*sid) else {
                    unreachable!("checked live")
                };
                for (key, hold) in holds {
                    self.commit_key(&key, hold);
                }
                Ok(Reply::OK)
            }
            Cmd::LAbort(sid) => {
                // The client rolls its transaction back: nothing is deleted.
                self.forget(*sid);
                Ok(Reply::OK)
            }
            Cmd::LPriority { sid, ticket } => match self.sessions.get_mut(sid) {
                Some(Session::Tombstone { .. }) => Err(ErrorReply::abort()),
                // The first ticket stays: others may have waited or given way by it.
                Some(Session::Live { ticket: held, .. }) => {
                    held.get_or_insert(*ticket);
                    Ok(Reply::OK)
                }
                None => {
                    let cap = self.limits.max_session_memory;
                    if cap != 0 && self.session_memory() + SESSION_OVERHEAD > cap {
                        return Err(too_many_sessions());
                    }
                    self.open(*sid, Some(*ticket), at);
                    Ok(Reply::OK)
                }
            },
            _ => unreachable!("not a session command: {cmd:?}"),
        }
    }

    /// The IQ family (000 §4.4.2.2, 004 §2.3): one-key sessions; IQSET, SAR and DAR commit their
    /// key, and the session ends with its last lease.
    fn iq(&mut self, cmd: &Cmd, at: u64) -> Outcome {
        match cmd {
            Cmd::IqGet { sid, key } => {
                // A hit needs no lease, so it does not consult the session (a tombstone's either).
                if let Some(e) = self.view(*sid, key) {
                    return Ok(bulk(Some(&e.value)));
                }
                self.acquire(*sid, key, Kind::Shared, Family::Iq, at)?;
                Ok(marker_reply(self.markers.contains(key)))
            }
            Cmd::IqSet { sid, key, value } => {
                // Only under the I lease, still held (004 §2.3): voided or expired, the fill may
                // be stale and is ignored.
                if self.hold_kind(*sid, key) != Some(Kind::Shared) {
                    return Ok(Reply::Int(0));
                }
                // The session's last word on the key: it replaces what the session staged there,
                // and releases the lease even when memory refuses it.
                let hold = self.release(*sid, key);
                self.commit_key(
                    key,
                    Hold {
                        pending: None,
                        ..hold
                    },
                );
                let pinned = self.entries.get(key).is_some_and(|e| e.pinned);
                self.store(key, value.clone(), pinned)?;
                Ok(Reply::Int(1))
            }
            Cmd::QaReg { sid, key } => {
                self.acquire(*sid, key, Kind::Exclusive, Family::Iq, at)?;
                if self.limits.mode == Mode::WriteAround {
                    // A write-around write deletes the key when it commits.
                    self.stage(*sid, key, Pending::Delete)?;
                }
                Ok(marker_reply(self.markers.contains(key)))
            }
            Cmd::QaRead { sid, key } => {
                self.write_through_only()?;
                self.acquire(*sid, key, Kind::Exclusive, Family::Iq, at)?;
                let value = self.view(*sid, key).map(|e| e.value);
                Ok(Reply::Array(vec![
                    bulk(value.as_deref()),
                    marker_reply(self.markers.contains(key)),
                ]))
            }
            Cmd::Sar {
                sid,
                key,
                value,
                mark,
            } => {
                self.write_through_only()?;
                self.require_exclusive(*sid, key, at)?;
                let pinned = self.view(*sid, key).is_some_and(|e| e.pinned);
                self.store(key, value.clone(), pinned)?;
                let hold = self.release(*sid, key);
                let mark = mark.or(hold.mark);
                self.commit_key(
                    key,
                    Hold {
                        pending: None,
                        mark,
                        ..hold
                    },
                );
                Ok(Reply::OK)
            }
            Cmd::Dar { sid, key, mark } => {
                self.require_exclusive(*sid, key, at)?;
                let hold = self.release(*sid, key);
                let mark = mark.or(hold.mark);
                self.commit_key(
                    key,
                    Hold {
                        pending: Some(Pending::Delete),
                        mark,
                        ..hold
                    },
                );
                Ok(Reply::OK)
            }
            _ => unreachable!("not an IQ command: {cmd:?}"),
        }
    }

    /// A multi-key command: one reply per item, errors of `per_item` kind among them; any other
    /// error is the whole reply.
    fn each<T>(
        &mut self,
        items: &[T],
        mut one: impl FnMut(&mut Self, &T) -> Outcome,
        per_item: &[ErrorKind],
    ) -> Outcome {
        let mut replies = Vec::new();
        for item in items {
            match one(self, item) {
                Err(e) if !per_item.contains(&e.kind) => return Err(e),
                reply => replies.push(reply.unwrap_or_else(Reply::Error)),
            }
        }
        Ok(Reply::Array(replies))
    }

    fn lget(&mut self, sid: Sid, key: &str, rmw: bool, at: u64) -> Outcome {
        if rmw {
            self.write_through_only()?;
        }
        let kind = if rmw { Kind::Exclusive } else { Kind::Shared };
        self.acquire(sid, key, kind, Family::Session, at)?;
        Ok(bulk(self.view(sid, key).map(|e| e.value).as_deref()))
    }

    fn lset(
        &mut self,
        sid: Sid,
        key: &str,
        value: &str,
        pin: bool,
        at: u64,
    ) -> Result<(), ErrorReply> {
        if self.limits.mode == Mode::WriteAround {
            // 000 §5.1.1.1: write-around sets only fill, at once, under the session's S lease.
            if pin {
                return Err(ErrorReply::not_available(Mode::WriteAround.name()));
            }
            self.require_live(sid)?;
            return match self.hold_kind(sid, key) {
                Some(Kind::Shared) => self.store(key, value.to_string(), false),
                // The session deletes the key at commit: a value set now would not survive it.
                Some(Kind::Exclusive) => Ok(()),
                None => Err(self.abort_requester(sid, at)),
            };
        }
        self.write_lease(sid, key, at)?;
        // Pins are sticky (000 §5.1.1.3, extended to every change).
        let pinned = pin || self.view(sid, key).is_some_and(|e| e.pinned);
        self.stage(
            sid,
            key,
            Pending::Value(Entry {
                value: value.to_string(),
                pinned,
            }),
        )
    }

    /// The lease a write-through LSET or LADD needs: the session's own S lease on a missing key (it
    /// is the one filling it), an X lease otherwise (ARCHITECTURE.md, "Writes under a fill").
    fn write_lease(&mut self, sid: Sid, key: &str, at: u64) -> Result<(), ErrorReply> {
        if self.hold_kind(sid, key) == Some(Kind::Shared) && !self.entries.contains_key(key) {
            return self.require_live(sid);
        }
        self.acquire(sid, key, Kind::Exclusive, Family::Session, at)
    }

    fn ldel(&mut self, sid: Sid, key: &str, at: u64) -> Outcome {
        self.acquire(sid, key, Kind::Exclusive, Family::Session, at)?;
        let had = self.view(sid, key).is_some();
        self.stage(sid, key, Pending::Delete)?;
        Ok(Reply::Int(had as i64))
    }

    fn lappend(&mut self, sid: Sid, key: &str, bytes: &str, prepend: bool, at: u64) -> Outcome {
        self.acquire(sid, key, Kind::Exclusive, Family::Session, at)?;
        let Some(view) = self.view(sid, key) else {
            return Ok(Reply::Nil);
        };
        let value = if prepend {
            format!("{bytes}{}", view.value)
        } else {
            format!("{}{bytes}", view.value)
        };
        let len = value.len();
        self.stage(sid, key, Pending::Value(Entry { value, ..view }))?;
        Ok(Reply::Int(len as i64))
    }

    fn write_through_only(&self) -> Result<(), ErrorReply> {
        match self.limits.mode {
            Mode::WriteThrough => Ok(()),
            Mode::WriteAround => Err(ErrorReply::not_available(Mode::WriteAround.name())),
        }
    }

    // ----- leases -----

    /// The two compatibility tables (DESIGN.md §3), requested against held. A refused request
    /// still opens the session it names (a conflict leaves a tombstone), so the session-memory cap
    /// is checked first, for everything the request would add.
    fn acquire(
        &mut self,
        sid: Sid,
        key: &str,
        want: Kind,
        family: Family,
        at: u64,
    ) -> Result<(), ErrorReply> {
        if matches!(self.sessions.get(&sid), Some(Session::Tombstone { .. })) {
            return Err(ErrorReply::abort());
        }
        let own = self.hold_kind(sid, key);
        if own == Some(Kind::Exclusive) || (own == Some(Kind::Shared) && want == Kind::Shared) {
            self.note_iq_writer(sid, want, family);
            return Ok(());
        }
        let others: Vec<Sid> = self
            .holds()
            .filter(|(s, k, _)| *s != sid && *k == key)
            .map(|(s, _, _)| s)
            .collect();
        let held = others.first().and_then(|s| self.hold_kind(*s, key));
        // A writer older than everyone in its way waits (RETRY) instead of giving way.
        let writer_waits = |m: &Model, in_way: &[Sid]| {
            family == Family::Session
                && m.ticket(sid).is_some()
                && in_way.iter().all(|&s| m.age(sid) < m.age(s))
        };
        let reserved_by_older = self
            .reservations
            .get(key)
            .is_some_and(|&owner| owner != sid && self.age(owner) < self.age(sid));
        // Ok: granted, after voiding (wounding) the sessions listed.
        let decision: Result<Vec<Sid>, Refusal> = match (want, held) {
            // A key an older writer waits for is not for younger writers, held or not.
            (Kind::Exclusive, _) if own.is_none() && reserved_by_older => Err(match family {
                Family::Session => Refusal::Abort,
                Family::Iq => Refusal::Retry,
            }),
            // S on X: the requester aborts; I on Q: it backs off.
            (Kind::Shared, Some(Kind::Exclusive)) => Err(match family {
                Family::Session => Refusal::Abort,
                Family::Iq => Refusal::Retry,
            }),
            // S on S without a value: a holder is filling it. I on I: back off.
            (Kind::Shared, Some(Kind::Shared)) if !self.entries.contains_key(key) => {
                Err(Refusal::Retry)
            }
            (Kind::Shared, _) | (Kind::Exclusive, None) => Ok(Vec::new()),
            // X on X, Q on Q: shared in write-around; the requester aborts in write-through.
            (Kind::Exclusive, Some(Kind::Exclusive)) => match self.limits.mode {
                Mode::WriteAround => Ok(Vec::new()),
                Mode::WriteThrough if writer_waits(self, &others) => Err(Refusal::Wait),
                Mode::WriteThrough => Err(Refusal::Abort),
            },
            // X on S, Q on I: void the holders, unless one of them is golden.
            (Kind::Exclusive, Some(Kind::Shared)) => {
                let golden: Vec<Sid> = others
                    .iter()
                    .copied()
                    .filter(|s| self.is_validated(*s))
                    .collect();
                if golden.is_empty() {
                    Ok(others)
                } else if writer_waits(self, &golden) {
                    Err(Refusal::Wait)
                } else {
                    Err(Refusal::Abort)
                }
            }
        };
        let opening = !self.sessions.contains_key(&sid);
        let mut grows = if opening { SESSION_OVERHEAD } else { 0 };
        if decision.is_ok() && own.is_none() {
            grows += key.len() + HOLD_OVERHEAD;
            if held.is_none() {
                grows += key.len() + LEASE_OVERHEAD;
            }
        }
        if decision == Err(Refusal::Wait) && !self.reservations.contains_key(key) {
            grows += key.len() + LEASE_OVERHEAD;
        }
        let cap = self.limits.max_session_memory;
        if grows > 0 && cap != 0 && self.session_memory() + grows > cap {
            return Err(too_many_sessions());
        }
        if opening {
            self.open(sid, None, at);
        }
        let wound = match decision {
            Ok(wound) => wound,
            Err(Refusal::Retry) => return Err(ErrorReply::retry()),
            Err(Refusal::Wait) => {
                // The oldest waiter holds the reservation.
                let keeps = self
                    .reservations
                    .get(key)
                    .is_some_and(|&owner| self.age(owner) <= self.age(sid));
                if !keeps {
                    self.reservations.insert(key.to_string(), sid);
                }
                return Err(ErrorReply::retry());
            }
            Err(Refusal::Abort) => return Err(self.abort_requester(sid, at)),
        };
        if want == Kind::Exclusive && self.reservations.get(key) == Some(&sid) {
            self.reservations.remove(key);
        }
        for other in wound {
            self.end(other, End::Wounded, at);
        }
        let Some(Session::Live { holds, .. }) = self.sessions.get_mut(&sid) else {
            unreachable!("opened above")
        };
        let hold = Hold {
            kind: want,
            pending: None,
            mark: None,
        };
        holds.entry(key.to_string()).or_insert(hold).kind = want;
        self.note_iq_writer(sid, want, family);
        Ok(())
    }

    /// A Q lease granted to an IQ command makes its session an IQ writer.
    fn note_iq_writer(&mut self, sid: Sid, want: Kind, family: Family) {
        if let Some(Session::Live { iq_writer, .. }) = self.sessions.get_mut(&sid) {
            *iq_writer |= want == Kind::Exclusive && family == Family::Iq;
        }
    }

    /// Opens session `sid` at `at`: its lifetime runs from its first lease request (or
    /// LPRIORITY).
    fn open(&mut self, sid: Sid, ticket: Option<u64>, at: u64) {
        let ends_by = at + self.limits.max_session_ms;
        let deadline = (at + self.limits.lease_ms).min(ends_by);
        let live = Session::Live {
            validated: false,
            holds: BTreeMap::new(),
            deadline,
            ends_by,
            ticket,
            iq_writer: false,
        };
        self.sessions.insert(sid, live);
    }

    fn ticket(&self, sid: Sid) -> Option<u64> {
        match self.sessions.get(&sid) {
            Some(Session::Live { ticket, .. }) => *ticket,
            _ => None,
        }
    }

    /// Older is smaller: the ticket, then the session id; no ticket is the youngest.
    fn age(&self, sid: Sid) -> (u64, Sid) {
        (self.ticket(sid).unwrap_or(u64::MAX), sid)
    }

    /// Forgets a session (committed, rolled back, or its last IQ lease released) and its
    /// reservations.
    fn forget(&mut self, sid: Sid) -> Option<Session> {
        self.reservations.retain(|_, owner| *owner != sid);
        self.sessions.remove(&sid)
    }

    /// SAR and DAR need the session's exclusive lease; without it, the session is aborted.
    fn require_exclusive(&mut self, sid: Sid, key: &str, at: u64) -> Result<(), ErrorReply> {
        self.require_live(sid)?;
        if self.hold_kind(sid, key) != Some(Kind::Exclusive) {
            return Err(self.abort_requester(sid, at));
        }
        Ok(())
    }

    // ----- sessions -----

    /// Commands that need the session (validate, commit, mark, ...) answer ABORT for a tombstone
    /// and for an unknown session alike.
    fn require_live(&self, sid: Sid) -> Result<(), ErrorReply> {
        match self.sessions.get(&sid) {
            Some(Session::Live { .. }) => Ok(()),
            _ => Err(ErrorReply::abort()),
        }
    }

    fn live_holds(&self, sid: Sid) -> Option<&BTreeMap<String, Hold>> {
        match self.sessions.get(&sid) {
            Some(Session::Live { holds, .. }) => Some(holds),
            _ => None,
        }
    }

    fn hold_kind(&self, sid: Sid, key: &str) -> Option<Kind> {
        self.live_holds(sid)?.get(key).map(|h| h.kind)
    }

    fn hold_mut(&mut self, sid: Sid, key: &str) -> Option<&mut Hold> {
        match self.sessions.get_mut(&sid) {
            Some(Session::Live { holds, .. }) => holds.get_mut(key),
            _ => None,
        }
    }

    fn is_validated(&self, sid: Sid) -> bool {
        matches!(
            self.sessions.get(&sid),
            Some(Session::Live {
                validated: true,
                ..
            })
        )
    }

    /// What the session reads: its pending version if it has one, else the cached value.
    fn view(&self, sid: Sid, key: &str) -> Option<Entry> {
        match self
            .live_holds(sid)
            .and_then(|h| h.get(key)?.pending.as_ref())
        {
            Some(Pending::Delete) => None,
            Some(Pending::Value(e)) => Some(e.clone()),
            None => self.entries.get(key).cloned(),
        }
    }

    /// The requester asked for a lease it cannot have: it is aborted as a whole.
    fn abort_requester(&mut self, sid: Sid, at: u64) -> ErrorReply {
        self.end(sid, End::Conflict, at);
        ErrorReply::abort()
    }

    /// The CMI ends a live session: its pending versions go, its leases are released, and it is
    /// kept as a tombstone. Expired, it may already have written the data store under an X or Q
    /// lease, so those keys are deleted unless pinned (000 §3.1, 004 §2.3). Wounded, it had not
    /// validated, so it wrote nothing unless it is an IQ writer: only then do they go. A conflict
    /// answers the session's own request, which a client makes before writing the data store, so
    /// like LABORT it deletes nothing.
    fn end(&mut self, sid: Sid, why: End, at: u64) {
        let Some(&Session::Live { iq_writer, .. }) = self.sessions.get(&sid) else {
            return;
        };
        let forget_at = at + self.limits.tombstone_ms;
        self.reservations.retain(|_, owner| *owner != sid);
        let Some(Session::Live { holds, .. }) =
            self.sessions.insert(sid, Session::Tombstone { forget_at })
        else {
            unreachable!("checked live")
        };
        if why == End::Expired || (why == End::Wounded && iq_writer) {
            for (key, hold) in holds {
                if hold.kind == Kind::Exclusive && self.entries.get(&key).is_some_and(|e| !e.pinned)
                {
                    self.entries.remove(&key);
                }
            }
        }
    }

    /// Takes the session's hold on `key` (and forgets the session with its last hold).
    fn release(&mut self, sid: Sid, key: &str) -> Hold {
        let Some(Session::Live { holds, .. }) = self.sessions.get_mut(&sid) else {
            unreachable!("released by a live session")
        };
        let hold = holds.remove(key).expect("the session holds the key");
        if holds.is_empty() {
            self.forget(sid);
        }
        hold
    }

    /// Applies what a session staged for one key: its pending version, its marker change.
    fn commit_key(&mut self, key: &str, hold: Hold) {
        match hold.pending {
            Some(Pending::Value(entry)) => {
                self.entries.insert(key.to_string(), entry);
            }
            Some(Pending::Delete) => {
                self.entries.remove(key);
            }
            None => {}
        }
        match hold.mark {
            Some(true) => {
                self.markers.insert(key.to_string());
            }
            Some(false) => {
                self.markers.remove(key);
            }
            None => {}
        }
    }

    // ----- memory -----

    /// Stages a pending version in place of the session's previous one for the key.
    fn stage(&mut self, sid: Sid, key: &str, pending: Pending) -> Result<(), ErrorReply> {
        let hold = self.hold_mut(sid, key).expect("staged under a lease");
        let old = match &hold.pending {
            Some(Pending::Value(e)) => Some(e.clone()),
            _ => None,
        };
        if let Pending::Value(new) = &pending {
            // A version that does not grow is taken as it is, even over the limit (markers).
            let grows = !old
                .as_ref()
                .is_some_and(|old| old.pinned == new.pinned && new.value.len() <= old.value.len());
            if grows {
                self.make_room(key, new, old.as_ref())?;
            }
        }
        self.hold_mut(sid, key)
            .expect("staged under a lease")
            .pending = Some(pending);
        Ok(())
    }

    /// Stores a cached value in place of the current one.
    fn store(&mut self, key: &str, value: String, pinned: bool) -> Result<(), ErrorReply> {
        let new = Entry { value, pinned };
        let old = self.entries.get(key).cloned();
        self.make_room(key, &new, old.as_ref())?;
        self.entries.insert(key.to_string(), new);
        Ok(())
    }

    /// Room for `new` in place of `old` (ARCHITECTURE.md, "Memory"): only what the replacement
    /// adds needs room. Refused with NOTSTORED, before anything is evicted, if the pinned cap or
    /// memory cannot take it even with every candidate gone; otherwise candidates are evicted
    /// until it fits, and no more.
    fn make_room(&mut self, key: &str, new: &Entry, old: Option<&Entry>) -> Result<(), ErrorReply> {
        let new_bytes = entry_bytes(key, &new.value);
        let old_bytes = old.map_or(0, |e| entry_bytes(key, &e.value));
        let (mut used, pinned) = self.memory();
        if new.pinned && self.limits.max_pinned != 0 {
            let old_pinned = if old.is_some_and(|e| e.pinned) {
                old_bytes
            } else {
                0
            };
            let grow_pinned = new_bytes.saturating_sub(old_pinned);
            // An eighth of the cap is kept back for LSET ... PINRESERVE, which this model does
            // not send.
            let cap = self.limits.max_pinned - self.limits.max_pinned / 8;
            if grow_pinned > 0 && pinned + grow_pinned > cap {
                return Err(ErrorReply::not_stored());
            }
        }
        let grow = new_bytes.saturating_sub(old_bytes);
        let max = self.limits.maxmemory;
        if max == 0 || used + grow <= max {
            return Ok(());
        }
        let evictable: usize = self.candidates(key).values().sum();
        if used - evictable + grow > max {
            return Err(ErrorReply::not_stored());
        }
        while used + grow > max {
            let Some(victim) = self.victims.pop_front() else {
                self.bad_eviction
                    .get_or_insert(format!("{key} needed room and nothing was evicted"));
                return Ok(());
            };
            match self.candidates(key).get(&victim) {
                Some(bytes) => used -= bytes,
                None => {
                    self.bad_eviction
                        .get_or_insert(format!("{victim} was evicted, not being a candidate"));
                }
            }
            self.entries.remove(&victim);
        }
        Ok(())
    }

    /// What eviction may take to make room for `key`: unpinned entries not under a lease, with
    /// their bytes.
    fn candidates(&self, key: &str) -> BTreeMap<String, usize> {
        let leased = self.leased_keys();
        self.entries
            .iter()
            .filter(|(k, e)| *k != key && !e.pinned && !leased.contains(k.as_str()))
            .map(|(k, e)| (k.clone(), entry_bytes(k, &e.value)))
            .collect()
    }
}
