//! The command entry: a typed command in, a reply out. Plain commands behave as Redis documents
//! them; the session and IQ families follow 000 §5.1.1 and `docs/PROTOCOL.md`.

use std::ops::Range;

use cads_protocol::{
    expire_ms, parse_i64, Command, ErrorReply, ExpireCondition, FlushScope, GetExExpiry, MarkOp,
    Reply, SessionId, SetCondition, SetExpiry, TimeUnit,
};

use crate::failpoints;
use crate::lease::{EndCause, LeaseKind, Pending, Requester, SessionValue};
use crate::long_double::LongDouble;
use crate::store::{entry_charge, Budget, PutOptions, SlotId, Ttl};
use crate::{Engine, Mode, Now, Recency};

type Outcome<'e> = Result<Reply<'e>, ErrorReply>;

fn unpinned(ttl: Ttl) -> PutOptions {
    PutOptions {
        pinned: false,
        ttl,
        leased: false,
        force: false,
    }
}

fn too_long() -> ErrorReply {
    ErrorReply::err("string exceeds maximum allowed size (proto-max-bulk-len)")
}

/// A session read's reply: what the session sees, or nil.
fn session_value_reply(value: Option<SessionValue<'_>>) -> Reply<'_> {
    value.map_or(Reply::Nil, |v| Reply::Bulk(v.bytes()))
}

fn overflow() -> ErrorReply {
    ErrorReply::err("increment or decrement would overflow")
}

fn not_a_float() -> ErrorReply {
    ErrorReply::err("value is not a valid float")
}

/// What a SET-family write found and did.
struct SetOutcome {
    /// The value the key had, when asked for.
    old: Option<Vec<u8>>,
    /// Whether the condition (NX, XX) let the write happen.
    written: bool,
}

impl SetOutcome {
    fn old_value(self) -> Reply<'static> {
        self.old.map_or(Reply::Nil, Reply::owned_bulk)
    }
}

/// The bytes GETRANGE returns of a value of `len` bytes, as Redis computes them: negative offsets
/// count from the end, both are clamped into the value, and an inverted range is empty.
fn redis_range(len: usize, start: i64, end: i64) -> Range<usize> {
    if start < 0 && end < 0 && start > end {
        return 0..0;
    }
    let len_i = len as i64;
    let from_end = |i: i64| if i < 0 { len_i.wrapping_add(i) } else { i };
    let start = from_end(start).max(0);
    let end = from_end(end).max(0).min(len_i - 1);
    if len == 0 || start > end {
        return 0..0;
    }
    start as usize..end as usize + 1
}

impl Engine {
    /// Runs one command at time `now` and returns its reply: key expiry reads `now.wall_ms`,
    /// leases and sessions `now.mono_ms`. Commands that concern the
    /// connection or the server process (PING, AUTH, INFO, CONFIG, ...) are the runtime's; given
    /// one, the engine answers with an error.
    pub fn execute<'e>(&'e mut self, cmd: &Command<'_>, now: Now) -> Reply<'e> {
        self.execute_with(cmd, now, Recency::Touch)
    }

    /// [`execute`](Self::execute), saying whether the command's reads count as uses of the keys
    /// for eviction (`CLIENT NO-TOUCH` clients' do not).
    pub fn execute_with<'e>(
        &'e mut self,
        cmd: &Command<'_>,
        now: Now,
        recency: Recency,
    ) -> Reply<'e> {
        self.stats.commands += 1;
        self.recency = recency;
        self.expire_sessions(now);
        if let Some(refusal) = self.fence_refusal(cmd, now) {
            return Reply::Error(refusal);
        }
        self.dispatch(cmd, now).unwrap_or_else(Reply::Error)
    }

    fn dispatch<'e>(&'e mut self, cmd: &Command<'_>, now: Now) -> Outcome<'e> {
        use Command as C;
        // Plain commands know only key expiry, which is wall-clock time.
        let wall = now.wall_ms;
        match *cmd {
            C::Get(key) => Ok(self.plain_get(key, wall)),
            C::Set {
                key,
                value,
                condition,
                expiry,
                get,
            } => {
                let set = self.plain_set(cmd.name(), key, value, condition, expiry, get, wall)?;
                Ok(match (get, set.written) {
                    (true, _) => set.old_value(),
                    (false, true) => Reply::OK,
                    (false, false) => Reply::Nil,
                })
            }
            C::SetEx { key, ms, value, .. } => {
                let (always, expiry) = (SetCondition::Always, SetExpiry::In(ms));
                self.plain_set(cmd.name(), key, value, always, expiry, false, wall)?;
                Ok(Reply::OK)
            }
            C::SetNx { key, value } => {
                let (absent, none) = (SetCondition::IfAbsent, SetExpiry::None);
                let set = self.plain_set(cmd.name(), key, value, absent, none, false, wall)?;
                Ok(Reply::Int(set.written as i64))
            }
            C::GetSet { key, value } => {
                let (always, none) = (SetCondition::Always, SetExpiry::None);
                let set = self.plain_set(cmd.name(), key, value, always, none, true, wall)?;
                Ok(set.old_value())
            }
            C::GetDel(key) => {
                self.refuse_leased([key])?;
                let slot = self.store.lookup(key, wall);
                self.count_read(slot.is_some());
                Ok(match slot {
                    Some(_) => {
                        let entry = self.store.remove(key).expect("looked up");
                        Reply::owned_bulk(entry.value)
                    }
                    None => Reply::Nil,
                })
            }
            C::GetEx { key, expiry } => self.plain_getex(key, expiry, wall),
            C::GetRange { key, start, end } => {
                let slot = self.store.lookup(key, wall);
                self.count_read(slot.is_some());
                let Some(slot) = slot else {
                    return Ok(Reply::bulk(b""));
                };
                self.touch(slot);
                let value = &self.store.entry(slot).value;
                Ok(Reply::bulk(&value[redis_range(value.len(), start, end)]))
            }
            C::SetRange { key, offset, value } => self.plain_setrange(key, offset, value, wall),
            C::IncrByFloat { key, increment } => self.plain_incrbyfloat(key, increment, wall),
            C::MSetNx(pairs) => {
                self.refuse_leased(pairs.iter().step_by(2).copied())?;
                let keys = pairs.iter().step_by(2);
                if keys.clone().any(|k| self.store.lookup(k, wall).is_some()) {
                    return Ok(Reply::Int(0));
                }
                self.store_pairs(pairs, wall)?;
                Ok(Reply::Int(1))
            }
            C::Time => {
                // The wall clock of this loop turn, the one key expiry follows.
                let seconds = (wall / 1000).to_string().into_bytes();
                let micros = (wall % 1000 * 1000).to_string().into_bytes();
                Ok(Reply::Array(vec![
                    Reply::owned_bulk(seconds),
                    Reply::owned_bulk(micros),
                ]))
            }
            C::Del(keys) => {
                self.refuse_leased(keys.iter().copied())?;
                let removed = keys
                    .iter()
                    .filter(|k| {
                        self.store.lookup(k, wall).is_some() && self.store.remove(k).is_some()
                    })
                    .count();
                Ok(Reply::Int(removed as i64))
            }
            C::Exists(keys) => {
                let n = keys
                    .iter()
                    .filter(|k| self.store.lookup(k, wall).is_some())
                    .count();
                Ok(Reply::Int(n as i64))
            }
            C::MGet(keys) => Ok(self.plain_mget(keys, wall)),
            C::MSet(pairs) => {
                self.refuse_leased(pairs.iter().step_by(2).copied())?;
                self.store_pairs(pairs, wall)?;
                Ok(Reply::OK)
            }
            C::IncrBy { key, delta } => self.plain_incr(key, delta, wall),
            C::Append { key, value } => self.plain_append(key, value, wall),
            C::StrLen(key) => {
                let len = self
                    .store
                    .lookup(key, wall)
                    .map_or(0, |slot| self.store.entry(slot).value.len());
                Ok(Reply::Int(len as i64))
            }
            C::Expire {
                key,
                amount,
                unit,
                absolute,
                condition,
            } => self.plain_expire(cmd.name(), key, amount, unit, absolute, condition, wall),
            C::Ttl(key) => Ok(Reply::Int(
                self.ttl_ms(key, wall)
                    .map_or_else(|c| c, |ms| (ms + 500) / 1000),
            )),
            C::PTtl(key) => Ok(Reply::Int(self.ttl_ms(key, wall).unwrap_or_else(|c| c))),
            C::Persist(key) => {
                self.refuse_leased([key])?;
                match self.store.lookup(key, wall) {
                    Some(slot) if self.store.entry(slot).expire_at != 0 => {
                        self.store.set_expire(slot, 0);
                        Ok(Reply::Int(1))
                    }
                    _ => Ok(Reply::Int(0)),
                }
            }
            C::DbSize => Ok(Reply::Int(self.store.len() as i64)),
            C::FlushAll(scope) => {
                match scope {
                    FlushScope::Everything => self.flush_all(now, false),
                    FlushScope::Unpinned => self.flush_all(now, true),
                    FlushScope::Restored if self.holds_restored_values => self.flush_all(now, true),
                    FlushScope::Restored => {}
                }
                Ok(Reply::OK)
            }
            C::FlushDb => {
                self.flush_all(now, false);
                Ok(Reply::OK)
            }
            C::Inspect(key) => Ok(self.inspect(key, wall)),
            C::ConfigId(id) => {
                if let Some(id) = id {
                    self.store.config.set_latest(id)?;
                    let text = id.to_string();
                    self.store
                        .log
                        .global_record(&[b"CONFIGID", text.as_bytes()]);
                    return Ok(Reply::OK);
                }
                Ok(Reply::Int(self.store.config.latest as i64))
            }
            C::Fragments(count) => {
                if let Some(count) = count {
                    self.store.config.set_fragments(count)?;
                    let text = count.to_string();
                    self.store
                        .log
                        .global_record(&[b"FRAGMENTS", text.as_bytes()]);
                    return Ok(Reply::OK);
                }
                Ok(Reply::Int(self.store.config.fragments() as i64))
            }
            C::FragmentId { fragment, id } => {
                if let Some(id) = id {
                    self.store.config.set_fragment_id(fragment, id)?;
                    let (f, i) = (fragment.to_string(), id.to_string());
                    self.store
                        .log
                        .global_record(&[b"FRAGMENTID", f.as_bytes(), i.as_bytes()]);
                    return Ok(Reply::OK);
                }
                let id = self
                    .store
                    .config
                    .fragment_id(fragment)
                    .ok_or_else(|| ErrorReply::err("fragment out of range"))?;
                Ok(Reply::Int(id as i64))
            }
            C::InstanceLease { until, boot } => self.instance_lease(until, boot, now),
            C::PinSet { key, value } => {
                self.refuse_leased([key])?;
                self.store
                    .put(
                        key,
                        value.to_vec(),
                        PutOptions {
                            pinned: true,
                            ..unpinned(Ttl::At(0))
                        },
                    )
                    .map_err(|_| ErrorReply::not_stored())?;
                Ok(Reply::OK)
            }

            // --- sessions ---
            C::LGet { sid, key, rmw } => {
                if rmw {
                    self.require_write_through()?;
                }
                let want = if rmw {
                    LeaseKind::Exclusive
                } else {
                    LeaseKind::Shared
                };
                self.acquire(sid, key, want, Requester::Session, now)?;
                Ok(self.session_read(sid, key, now))
            }
            C::LMGet {
                sid,
                rmw,
                markers,
                keys,
            } => self.session_mget(sid, rmw, markers, keys, now),
            C::LSet {
                sid,
                key,
                value,
                pin,
                reserve,
            } => {
                let budget = if reserve {
                    Budget::Reserve
                } else {
                    Budget::Capped
                };
                self.session_set(sid, key, value, pin, false, budget, now)
            }
            C::LAdd {
                sid,
                key,
                value,
                pin,
            } => {
                self.require_write_through()?;
                self.session_set(sid, key, value, pin, true, Budget::Capped, now)
            }
            C::LMSet { sid, pin, pairs } => {
                let mut replies = Vec::with_capacity(pairs.len() / 2);
                for pair in pairs.chunks_exact(2) {
                    match self.session_set(sid, pair[0], pair[1], pin, false, Budget::Capped, now) {
                        Ok(_) => replies.push(Reply::OK),
                        // RETRY: a ticketed session waits for this key; the pair did nothing.
                        Err(e)
                            if matches!(
                                e.kind,
                                cads_protocol::ErrorKind::NotStored
                                    | cads_protocol::ErrorKind::Retry
                            ) =>
                        {
                            replies.push(Reply::Error(e));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(Reply::Array(replies))
            }
            C::LDel { sid, key } => self.session_delete(sid, key, now).map(Reply::Int),
            C::LMDel { sid, keys } => {
                let mut replies = Vec::with_capacity(keys.len());
                for key in keys {
                    match self.session_delete(sid, key, now) {
                        Ok(existed) => replies.push(Reply::Int(existed)),
                        Err(e) if e.kind == cads_protocol::ErrorKind::Retry => {
                            replies.push(Reply::Error(e));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(Reply::Array(replies))
            }
            C::LAppend { sid, key, delta } => self.session_append(sid, key, delta, false, now),
            C::LUpdate { sid, key, changes } => self.session_update(sid, key, changes, now),
            C::LPrepend { sid, key, delta } => self.session_append(sid, key, delta, true, now),
            C::LMAppend { sid, pairs } => {
                self.require_write_through()?;
                let mut replies = Vec::with_capacity(pairs.len() / 2);
                for pair in pairs.chunks_exact(2) {
                    match self.session_append(sid, pair[0], pair[1], false, now) {
                        Ok(reply) => replies.push(reply),
                        Err(e) if e.kind == cads_protocol::ErrorKind::Abort => return Err(e),
                        Err(e) => replies.push(Reply::Error(e)),
                    }
                }
                Ok(Reply::Array(replies))
            }
            C::LIncr { sid, key, delta } => self.session_incr(sid, key, delta, now),
            C::LUnpin { sid, key } => {
                self.require_write_through()?;
                self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now)?;
                let Some(current) = self.session_view(sid, key, now) else {
                    return Ok(Reply::Int(0));
                };
                let value = current.bytes().into_owned();
                self.set_pending(
                    sid,
                    key,
                    Pending::Value {
                        value,
                        pinned: false,
                    },
                )?;
                Ok(Reply::Int(1))
            }
            C::LMark { sid, key, op } => {
                self.live_session(sid)?;
                match self.holds(sid, key) {
                    None => Err(ErrorReply::err("the session holds no lease on this key")),
                    Some(LeaseKind::Shared) if op == MarkOp::Set => Err(ErrorReply::err(
                        "setting a marker needs an exclusive lease on the key",
                    )),
                    Some(_) => {
                        self.set_mark(sid, key, op);
                        Ok(Reply::OK)
                    }
                }
            }
            C::LValidate(sid) => self.validate_session(sid, now).map(|_| Reply::OK),
            C::LPriority { sid, ticket } => self.set_ticket(sid, ticket, now).map(|_| Reply::OK),
            C::LConfig { sid, id } => self.set_session_config(sid, id, now).map(|_| Reply::OK),
            C::LCommit(sid) => self.commit_session(sid).map(|_| Reply::OK),
            C::LAbort(sid) => {
                self.end_session(sid, EndCause::ClientAbort, now);
                Ok(Reply::OK)
            }

            // --- IQ leases ---
            C::IqGet { sid, key } => {
                if self.session_view(sid, key, now).is_some() {
                    return Ok(self.session_read(sid, key, now));
                }
                self.stats.misses += 1;
                self.acquire(sid, key, LeaseKind::Shared, Requester::Iq, now)?;
                Ok(self.marker_reply(key))
            }
            C::IqSet { sid, key, value } => {
                let filling = self.live_session(sid).is_ok()
                    && self.holds(sid, key) == Some(LeaseKind::Shared);
                if !filling {
                    if failpoints::fill_after_void() {
                        // Broken on purpose: the fill is stored all the same.
                        let _ = self.store.put(key, value.to_vec(), unpinned(Ttl::At(0)));
                        return Ok(Reply::Int(1));
                    }
                    // The I lease was voided by a writer (or expired): the value may be stale.
                    return Ok(Reply::Int(0));
                }
                // The fill is the session's last word on the key: a value it staged under the
                // same lease (LSET of a miss) must not replace it at release.
                self.drop_pending(sid, key);
                // Pins are sticky: a fill over a pinned value (a buffered write) keeps it pinned.
                let pinned = self.store.peek(key, now.wall_ms).is_some_and(|e| e.pinned);
                let stored = self.store.put(
                    key,
                    value.to_vec(),
                    PutOptions {
                        pinned,
                        leased: true,
                        ..unpinned(Ttl::At(0))
                    },
                );
                self.commit_key(sid, key);
                stored.map_err(|_| ErrorReply::not_stored())?;
                Ok(Reply::Int(1))
            }
            C::ISet { sid, key } => {
                // A pinned value is a buffered write, which a repair must not drop.
                if self.store.peek(key, now.wall_ms).is_some_and(|e| e.pinned) {
                    return Err(ErrorReply::err(
                        "the key is pinned (a buffered write): ISET would drop it",
                    ));
                }
                self.acquire(sid, key, LeaseKind::Shared, Requester::Iq, now)?;
                self.store.remove(key);
                Ok(self.marker_reply(key))
            }
            C::IDelete { sid, key } => {
                let held = self.live_session(sid).is_ok()
                    && self.holds(sid, key) == Some(LeaseKind::Shared);
                if !held {
                    return Ok(Reply::Int(0));
                }
                self.drop_pending(sid, key);
                self.commit_key(sid, key);
                Ok(Reply::Int(1))
            }
            C::QaReg { sid, key } => {
                self.acquire(sid, key, LeaseKind::Exclusive, Requester::Iq, now)?;
                if self.mode() == Mode::WriteAround {
                    // A write-around write deletes the key when it commits (000 §4.4.2.2).
                    self.set_pending(sid, key, Pending::Delete)?;
                }
                Ok(self.marker_reply(key))
            }
            C::QaRead { sid, key } => {
                self.require_write_through()?;
                self.acquire(sid, key, LeaseKind::Exclusive, Requester::Iq, now)?;
                let marker = self.markers.contains(key) as i64;
                let value = session_value_reply(self.session_view(sid, key, now));
                Ok(Reply::Array(vec![value, Reply::Int(marker)]))
            }
            C::Sar {
                sid,
                key,
                value,
                mark,
            } => {
                self.require_write_through()?;
                self.require_exclusive(sid, key, now)?;
                let pinned = self.session_view(sid, key, now).is_some_and(|v| v.pinned);
                // A swap replaces the cached value, so only what it adds needs room (staged as a
                // pending version first, it needed room for the whole value next to the old one).
                let options = PutOptions {
                    pinned,
                    ttl: Ttl::Keep,
                    leased: true,
                    force: false,
                };
                self.store
                    .put(key, value.to_vec(), options)
                    .map_err(|_| ErrorReply::not_stored())?;
                self.drop_pending(sid, key);
                self.set_mark(sid, key, mark);
                self.commit_key(sid, key);
                Ok(Reply::OK)
            }
            C::Dar { sid, key, mark } => {
                self.require_exclusive(sid, key, now)?;
                self.set_pending(sid, key, Pending::Delete)?;
                self.set_mark(sid, key, mark);
                self.commit_key(sid, key);
                Ok(Reply::OK)
            }

            C::Ping(_)
            | C::Echo(_)
            | C::Auth { .. }
            | C::Hello { .. }
            | C::Select(_)
            | C::Quit
            | C::Commands(_)
            | C::Config(_)
            | C::Client(_)
            | C::Info(_)
            | C::BgRewriteAof => Err(ErrorReply::err(format!(
                "'{}' is a server command, not an engine command",
                cmd.name()
            ))),
        }
    }

    fn require_write_through(&self) -> Result<(), ErrorReply> {
        match self.mode() {
            Mode::WriteThrough => Ok(()),
            Mode::WriteAround => Err(ErrorReply::not_available(Mode::WriteAround.name())),
        }
    }

    /// SAR and DAR need the Q lease; without it the session is over.
    fn require_exclusive(
        &mut self,
        sid: SessionId,
        key: &[u8],
        now: Now,
    ) -> Result<(), ErrorReply> {
        self.live_session(sid)?;
        if self.holds(sid, key) != Some(LeaseKind::Exclusive) {
            self.end_session(sid, EndCause::Conflict, now);
            return Err(ErrorReply::abort());
        }
        Ok(())
    }

    fn marker_reply(&self, key: &[u8]) -> Reply<'static> {
        Reply::Int(self.markers.contains(key) as i64)
    }

    /// A plain (lease-unaware) write may not change a key a session holds a lease on.
    fn refuse_leased<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<(), ErrorReply> {
        if self.leases.is_empty() {
            return Ok(());
        }
        if keys.into_iter().any(|k| self.leases.contains_key(k)) {
            return Err(ErrorReply::leased());
        }
        Ok(())
    }

    /// Counts a read of the entry as a use, for eviction, unless the client asked otherwise.
    fn touch(&mut self, slot: SlotId) {
        if self.recency == Recency::Touch {
            self.store.touch(slot);
        }
    }

    fn count_read(&mut self, hit: bool) {
        if hit {
            self.stats.hits += 1;
        } else {
            self.stats.misses += 1;
        }
    }

    // --- plain commands ---

    fn plain_get(&mut self, key: &[u8], now: u64) -> Reply<'_> {
        let slot = self.store.lookup(key, now);
        self.count_read(slot.is_some());
        match slot {
            Some(slot) => {
                self.touch(slot);
                Reply::bulk(&self.store.entry(slot).value)
            }
            None => Reply::Nil,
        }
    }

    fn plain_mget(&mut self, keys: &[&[u8]], now: u64) -> Reply<'_> {
        let slots: Vec<_> = keys.iter().map(|k| self.store.lookup(k, now)).collect();
        for slot in &slots {
            self.count_read(slot.is_some());
            if let Some(slot) = slot {
                self.touch(*slot);
            }
        }
        Reply::Array(
            slots
                .into_iter()
                .map(|slot| slot.map_or(Reply::Nil, |s| Reply::bulk(&self.store.entry(s).value)))
                .collect(),
        )
    }

    /// SET and the commands that are SET with fixed options (SETEX, PSETEX, SETNX, GETSET).
    /// `name` is the command's, for errors; `want_old` reads the old value (counted as a read).
    #[allow(clippy::too_many_arguments)]
    fn plain_set(
        &mut self,
        name: &str,
        key: &[u8],
        value: &[u8],
        condition: SetCondition,
        expiry: SetExpiry,
        want_old: bool,
        now: u64,
    ) -> Result<SetOutcome, ErrorReply> {
        self.refuse_leased([key])?;
        let existing = self.store.lookup(key, now);
        let old = if want_old {
            self.count_read(existing.is_some());
            existing.map(|slot| self.store.entry(slot).value.clone())
        } else {
            None
        };
        let written = match condition {
            SetCondition::Always => true,
            SetCondition::IfAbsent => existing.is_none(),
            SetCondition::IfPresent => existing.is_some(),
        };
        if !written {
            return Ok(SetOutcome { old, written });
        }
        let ttl = match expiry {
            SetExpiry::None => Ttl::At(0),
            SetExpiry::Keep => Ttl::Keep,
            // As Redis: a relative expiry whose deadline passes i64 milliseconds is invalid.
            SetExpiry::In(ms) => Ttl::At(
                ms.checked_add(now as i64)
                    .ok_or_else(|| ErrorReply::invalid_expire_time(name))? as u64,
            ),
            SetExpiry::At(ms) => Ttl::At(ms as u64),
        };
        if let Ttl::At(at) = ttl {
            if at != 0 && at <= now {
                // Already expired: Redis stores nothing and deletes what was there.
                self.store.remove(key);
                return Ok(SetOutcome { old, written });
            }
        }
        self.store
            .put(key, value.to_vec(), unpinned(ttl))
            .map_err(|_| ErrorReply::not_stored())?;
        Ok(SetOutcome { old, written })
    }

    /// MSET and MSETNX once their keys are checked: all or nothing on memory too, so eviction
    /// must be able to make room for every value before any is stored.
    fn store_pairs(&mut self, pairs: &[&[u8]], now: u64) -> Result<(), ErrorReply> {
        let needed: usize = pairs
            .chunks_exact(2)
            .map(|p| entry_charge(p[0].len(), p[1].len()))
            .sum();
        self.store
            .check_room(needed)
            .map_err(|_| ErrorReply::not_stored())?;
        for pair in pairs.chunks_exact(2) {
            self.store.lookup(pair[0], now);
            self.store
                .put(pair[0], pair[1].to_vec(), unpinned(Ttl::At(0)))
                .map_err(|_| ErrorReply::not_stored())?;
        }
        Ok(())
    }

    /// GETEX: a read, and with an option a write of the time to live (so then refused under a
    /// lease). The expiry's value is checked only if the key exists, as Redis does.
    fn plain_getex(&mut self, key: &[u8], expiry: GetExExpiry<'_>, now: u64) -> Outcome<'static> {
        if expiry != GetExExpiry::Keep {
            self.refuse_leased([key])?;
        }
        let slot = self.store.lookup(key, now);
        self.count_read(slot.is_some());
        let Some(slot) = slot else {
            return Ok(Reply::Nil);
        };
        self.touch(slot);
        let value = Reply::owned_bulk(self.store.entry(slot).value.clone());
        match expiry {
            GetExExpiry::Keep => {}
            GetExExpiry::Persist => {
                if self.store.entry(slot).expire_at != 0 {
                    self.store.set_expire(slot, 0);
                }
            }
            GetExExpiry::Set {
                amount,
                unit,
                absolute,
            } => {
                let ms = expire_ms(amount, unit, "getex")?;
                let when = if absolute {
                    ms
                } else {
                    ms.checked_add(now as i64)
                        .ok_or_else(|| ErrorReply::invalid_expire_time("getex"))?
                };
                if when <= now as i64 {
                    self.store.remove(key);
                } else {
                    self.store.set_expire(slot, when as u64);
                }
            }
        }
        Ok(value)
    }

    /// SETRANGE: overwrites from `offset`, padding with zero bytes; like APPEND it keeps the
    /// entry's pin and time to live.
    fn plain_setrange(
        &mut self,
        key: &[u8],
        offset: i64,
        value: &[u8],
        now: u64,
    ) -> Outcome<'static> {
        self.refuse_leased([key])?;
        let slot = self.store.lookup(key, now);
        let current_len = slot.map_or(0, |s| self.store.entry(s).value.len());
        if value.is_empty() {
            // Nothing to write, and a missing key is not created.
            return Ok(Reply::Int(current_len as i64));
        }
        let offset = offset as u64;
        let end = offset.saturating_add(value.len() as u64);
        if end > self.config().max_value_bytes as u64 {
            return Err(too_long());
        }
        let (offset, end) = (offset as usize, end as usize);
        let (mut bytes, options) = match slot {
            Some(slot) => {
                let entry = self.store.entry(slot);
                let options = PutOptions {
                    pinned: entry.pinned,
                    ..unpinned(Ttl::Keep)
                };
                (entry.value.clone(), options)
            }
            None => (Vec::new(), unpinned(Ttl::At(0))),
        };
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset..end].copy_from_slice(value);
        let len = bytes.len();
        self.store
            .put(key, bytes, options)
            .map_err(|_| ErrorReply::not_stored())?;
        Ok(Reply::Int(len as i64))
    }

    /// INCRBYFLOAT in Redis's `long double` arithmetic; like INCR it keeps the entry's pin and
    /// time to live.
    fn plain_incrbyfloat(&mut self, key: &[u8], increment: &[u8], now: u64) -> Outcome<'static> {
        let increment = LongDouble::parse(increment).ok_or_else(not_a_float)?;
        self.refuse_leased([key])?;
        let slot = self.store.lookup(key, now);
        let (current, options) = match slot {
            Some(slot) => {
                let entry = self.store.entry(slot);
                let current = LongDouble::parse(&entry.value).ok_or_else(not_a_float)?;
                let options = PutOptions {
                    pinned: entry.pinned,
                    ..unpinned(Ttl::Keep)
                };
                (current, options)
            }
            None => (LongDouble::ZERO, unpinned(Ttl::At(0))),
        };
        let sum = current
            .checked_add(increment)
            .ok_or_else(|| ErrorReply::err("increment would produce NaN or Infinity"))?;
        let text = sum.to_human().into_bytes();
        self.store
            .put(key, text.clone(), options)
            .map_err(|_| ErrorReply::not_stored())?;
        Ok(Reply::owned_bulk(text))
    }

    fn plain_incr(&mut self, key: &[u8], delta: i64, now: u64) -> Outcome<'static> {
        self.refuse_leased([key])?;
        let slot = self.store.lookup(key, now);
        let (current, pinned) = match slot {
            Some(slot) => {
                let entry = self.store.entry(slot);
                let n = parse_i64(&entry.value).ok_or_else(ErrorReply::not_integer)?;
                (n, entry.pinned)
            }
            None => (0, false),
        };
        let next = current.checked_add(delta).ok_or_else(overflow)?;
        let ttl = if slot.is_some() {
            Ttl::Keep
        } else {
            Ttl::At(0)
        };
        self.store
            .put(
                key,
                next.to_string().into_bytes(),
                PutOptions {
                    pinned,
                    ..unpinned(ttl)
                },
            )
            .map_err(|_| ErrorReply::not_stored())?;
        Ok(Reply::Int(next))
    }

    fn plain_append(&mut self, key: &[u8], value: &[u8], now: u64) -> Outcome<'static> {
        self.refuse_leased([key])?;
        let len = match self.store.lookup(key, now) {
            Some(slot) => {
                if self.store.entry(slot).value.len() + value.len() > self.config().max_value_bytes
                {
                    return Err(too_long());
                }
                self.store.append(slot, value, false)
            }
            None => self
                .store
                .put(key, value.to_vec(), unpinned(Ttl::At(0)))
                .map(|_| value.len()),
        };
        len.map(|n| Reply::Int(n as i64))
            .map_err(|_| ErrorReply::not_stored())
    }

    #[allow(clippy::too_many_arguments)]
    fn plain_expire(
        &mut self,
        name: &str,
        key: &[u8],
        amount: i64,
        unit: TimeUnit,
        absolute: bool,
        condition: ExpireCondition,
        now: u64,
    ) -> Outcome<'static> {
        self.refuse_leased([key])?;
        let invalid = || ErrorReply::err(format!("invalid expire time in '{name}' command"));
        let ms = match unit {
            TimeUnit::Seconds => amount.checked_mul(1000).ok_or_else(invalid)?,
            TimeUnit::Millis => amount,
        };
        let when = if absolute {
            ms
        } else {
            ms.checked_add(now as i64).ok_or_else(invalid)?
        };
        let Some(slot) = self.store.lookup(key, now) else {
            return Ok(Reply::Int(0));
        };
        let current = self.store.entry(slot).expire_at;
        let allowed = match condition {
            ExpireCondition::Always => true,
            ExpireCondition::IfNone => current == 0,
            ExpireCondition::IfSome => current != 0,
            // A key without expiry counts as expiring never: GT can't beat it, LT always does.
            ExpireCondition::IfGreater => current != 0 && when > current as i64,
            ExpireCondition::IfLess => current == 0 || when < current as i64,
        };
        if !allowed {
            return Ok(Reply::Int(0));
        }
        if when <= now as i64 {
            self.store.remove(key);
        } else {
            self.store.set_expire(slot, when as u64);
        }
        Ok(Reply::Int(1))
    }

    /// Remaining time to live in ms, or the code TTL reports (-2 missing, -1 no expiry).
    fn ttl_ms(&mut self, key: &[u8], now: u64) -> Result<i64, i64> {
        let slot = self.store.lookup(key, now).ok_or(-2)?;
        match self.store.entry(slot).expire_at {
            0 => Err(-1),
            at => Ok(at.saturating_sub(now) as i64),
        }
    }

    fn inspect(&mut self, key: &[u8], now: u64) -> Reply<'static> {
        let slot = self.store.lookup(key, now);
        let entry = slot.map(|s| self.store.entry(s));
        let lease = self.leases.get(key);
        let int = |name: &'static str, n: i64| (Reply::status(name), Reply::Int(n));
        Reply::Map(vec![
            int("exists", entry.is_some() as i64),
            int("value-bytes", entry.map_or(-1, |e| e.value.len() as i64)),
            int("pinned", entry.is_some_and(|e| e.pinned) as i64),
            int(
                "expire-at-ms",
                entry.map_or(-1, |e| {
                    if e.expire_at == 0 {
                        -1
                    } else {
                        e.expire_at as i64
                    }
                }),
            ),
            int("config-id", entry.map_or(-1, |e| e.config_id as i64)),
            int("marker", self.markers.contains(key) as i64),
            (
                Reply::status("lease"),
                Reply::status(match lease.map(|l| l.kind) {
                    None => "none",
                    Some(LeaseKind::Shared) => "shared",
                    Some(LeaseKind::Exclusive) => "exclusive",
                }),
            ),
            int("holders", lease.map_or(0, |l| l.holders.len() as i64)),
        ])
    }

    // --- session commands ---

    /// The reply to a session read: the session's view of the key, counted as a hit or a miss.
    fn session_read(&mut self, sid: SessionId, key: &[u8], now: Now) -> Reply<'_> {
        let hit = self.session_view(sid, key, now).is_some();
        self.count_read(hit);
        if let Some(slot) = self.store.lookup(key, now.wall_ms) {
            self.touch(slot);
        }
        session_value_reply(self.session_view(sid, key, now))
    }

    fn session_mget<'e>(
        &'e mut self,
        sid: SessionId,
        rmw: bool,
        markers: bool,
        keys: &[&[u8]],
        now: Now,
    ) -> Outcome<'e> {
        if rmw {
            self.require_write_through()?;
        }
        let want = if rmw {
            LeaseKind::Exclusive
        } else {
            LeaseKind::Shared
        };
        let mut retry = vec![false; keys.len()];
        for (i, key) in keys.iter().enumerate() {
            match self.acquire(sid, key, want, Requester::Session, now) {
                Ok(()) => {
                    let hit = self.session_view(sid, key, now).is_some();
                    self.count_read(hit);
                }
                Err(e) if e.kind == cads_protocol::ErrorKind::Retry => retry[i] = true,
                Err(e) => return Err(e),
            }
        }
        Ok(Reply::Array(
            keys.iter()
                .zip(retry)
                .map(|(key, retry)| {
                    if retry {
                        return Reply::Error(ErrorReply::retry());
                    }
                    let value = session_value_reply(self.session_view(sid, key, now));
                    if markers {
                        Reply::Array(vec![value, self.marker_reply(key)])
                    } else {
                        value
                    }
                })
                .collect(),
        ))
    }

    /// LSET and LADD; `budget`: the memory its pending version is charged to.
    #[allow(clippy::too_many_arguments)]
    fn session_set(
        &mut self,
        sid: SessionId,
        key: &[u8],
        value: &[u8],
        pin: bool,
        only_if_absent: bool,
        budget: Budget,
        now: Now,
    ) -> Outcome<'static> {
        if self.mode() == Mode::WriteAround {
            if pin {
                return Err(ErrorReply::not_available(Mode::WriteAround.name()));
            }
            // Write-around fills a missing value under the session's S lease and stores it at once
            // (000 §5.1.1.1 LSet); writes never set values.
            if failpoints::fill_after_void()
                && self.sessions.contains_key(&sid)
                && self.live_session(sid).is_err()
            {
                // Broken on purpose: the fill of a reader a writer wounded.
                let _ = self.store.put(key, value.to_vec(), unpinned(Ttl::At(0)));
                return Ok(Reply::OK);
            }
            self.live_session(sid)?;
            return match self.holds(sid, key) {
                Some(LeaseKind::Shared) => {
                    self.store
                        .put(
                            key,
                            value.to_vec(),
                            PutOptions {
                                leased: true,
                                ..unpinned(Ttl::At(0))
                            },
                        )
                        .map_err(|_| ErrorReply::not_stored())?;
                    Ok(Reply::OK)
                }
                // The session deletes the key at commit; a value set now would not survive it.
                Some(LeaseKind::Exclusive) => Ok(Reply::OK),
                None => {
                    self.end_session(sid, EndCause::Conflict, now);
                    Err(ErrorReply::abort())
                }
            };
        }
        self.write_lease(sid, key, now)?;
        let current = self.session_view(sid, key, now);
        if only_if_absent && current.is_some() {
            return Ok(Reply::Int(0));
        }
        // A pinned value stays pinned through every change but LUNPIN and delete (000 §5.1.1.3).
        let pinned = pin || current.is_some_and(|v| v.pinned);
        let pending = Pending::Value {
            value: value.to_vec(),
            pinned,
        };
        self.set_pending_within(sid, key, pending, budget)?;
        Ok(if only_if_absent {
            Reply::Int(1)
        } else {
            Reply::OK
        })
    }

    /// The lease a write-through set needs: an exclusive one, except that the session filling a
    /// missing value under its shared lease keeps it (other readers of that key are backing off).
    fn write_lease(&mut self, sid: SessionId, key: &[u8], now: Now) -> Result<(), ErrorReply> {
        match self.holds(sid, key) {
            Some(LeaseKind::Exclusive) => {
                self.live_session(sid)?;
                Ok(())
            }
            Some(LeaseKind::Shared) if self.store.peek(key, now.wall_ms).is_none() => {
                self.live_session(sid)?;
                Ok(())
            }
            _ => self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now),
        }
    }

    fn session_delete(&mut self, sid: SessionId, key: &[u8], now: Now) -> Result<i64, ErrorReply> {
        self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now)?;
        let existed = self.session_view(sid, key, now).is_some();
        self.set_pending(sid, key, Pending::Delete)?;
        Ok(existed as i64)
    }

    fn session_append(
        &mut self,
        sid: SessionId,
        key: &[u8],
        delta: &[u8],
        prepend: bool,
        now: Now,
    ) -> Outcome<'static> {
        self.require_write_through()?;
        self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now)?;
        let Some(current) = self.session_view(sid, key, now) else {
            return Ok(Reply::Nil);
        };
        let len = current.len() + delta.len();
        if len > self.config().max_value_bytes {
            return Err(too_long());
        }
        let pinned = current.pinned;
        if prepend {
            let value = [delta, &current.bytes()].concat();
            self.set_pending(sid, key, Pending::Value { value, pinned })?;
        } else {
            self.stage_append(sid, key, (current.len(), pinned), delta)?;
        }
        Ok(Reply::Int(len as i64))
    }

    /// LUPDATE: stages the cached JSON document with `changes` applied, as the data store
    /// applies them to the stored one, so that a write-through or write-back update of a document
    /// costs no read of it. A cached value that is not a document, cannot take the changes (an
    /// operator on a field of the wrong type) or would grow past the largest value is staged as a
    /// delete instead: the data store reports such an error to the writer, and a miss refills.
    /// Replies the new length, 0 for a delete, nil if nothing is cached.
    fn session_update(
        &mut self,
        sid: SessionId,
        key: &[u8],
        changes: &[u8],
        now: Now,
    ) -> Outcome<'static> {
        self.require_write_through()?;
        let changes = cads_doc::Changes::parse(changes)
            .map_err(|e| ErrorReply::err(format!("bad changes: {e}")))?;
        self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now)?;
        let Some(current) = self.session_view(sid, key, now) else {
            return Ok(Reply::Nil);
        };
        let pinned = current.pinned;
        match cads_doc::apply_to_text(&current.bytes(), &changes)
            .filter(|value| value.len() <= self.config().max_value_bytes)
        {
            Some(value) => {
                let len = value.len();
                self.set_pending(sid, key, Pending::Value { value, pinned })?;
                Ok(Reply::Int(len as i64))
            }
            None => {
                self.set_pending(sid, key, Pending::Delete)?;
                Ok(Reply::Int(0))
            }
        }
    }

    fn session_incr(
        &mut self,
        sid: SessionId,
        key: &[u8],
        delta: i64,
        now: Now,
    ) -> Outcome<'static> {
        self.require_write_through()?;
        self.acquire(sid, key, LeaseKind::Exclusive, Requester::Session, now)?;
        let Some(current) = self.session_view(sid, key, now) else {
            return Ok(Reply::Nil);
        };
        let pinned = current.pinned;
        let n = parse_i64(&current.bytes()).ok_or_else(ErrorReply::not_integer)?;
        let next = n.checked_add(delta).ok_or_else(overflow)?;
        let value = next.to_string().into_bytes();
        self.set_pending(sid, key, Pending::Value { value, pinned })?;
        Ok(Reply::Int(next))
    }
}
