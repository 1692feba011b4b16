//! The append-only log of a CMI, without I/O: the engine encodes every change as a record, the
//! server writes the records to a file, and on restart the engine replays the file.
//!
//! Records are RESP arrays (so a log can be read with any RESP tool). All but `APPEND` hold
//! resulting state rather than commands; `APPEND` carries only the appended bytes, so that a long
//! value growing by appends does not rewrite itself into the log each time:
//!
//! | record | effect |
//! | --- | --- |
//! | `PUT key value expire_at config_id pinned` | the entry, whole |
//! | `APPEND key bytes config_id` | bytes appended to the entry's value (plain APPEND) |
//! | `EXPIREAT key ms` | the entry's expiry (0: none) |
//! | `DEL key` | no entry |
//! | `MARK key` / `UNMARK key` | the key's TARDIS marker |
//! | `CONFIGID id` / `FRAGMENTS n` / `FRAGMENTID f id` | configuration ids |
//! | `FLUSH` | nothing at all |
//! | `FLUSH UNPINNED` | no unpinned entry |
//!
//! Leases and sessions are not logged: a restart ends them all, as lease expiry would. That is why
//! granting an exclusive lease on an unpinned key logs `DEL key` (see `Store::log_exclusive_lease`).
//!
//! Rewriting is incremental. A snapshot walks the entry slots in order, a few per call, into a new
//! log; meanwhile every change is still logged to the old log and, when it touches a slot the
//! snapshot has already passed (or is not about an entry), to the new log as well. Changes to slots
//! not yet reached need no copy: the walk will pick up their final state. When the walk ends the new
//! log equals the state, and it keeps receiving every change from then on.

use cads_protocol::resp::{self, Parsed};
use cads_protocol::{parse_i64, Limits};

use crate::store::{put_record, PutOptions, SlotId, Ttl};
use crate::{Engine, Now};

#[derive(Default)]
pub struct Log {
    enabled: bool,
    main: Vec<u8>,
    rewrite: Option<Rewrite>,
}

struct Rewrite {
    /// Slots below this were already written to the new log.
    cursor: SlotId,
    out: Vec<u8>,
}

impl Log {
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        if !enabled {
            self.main.clear();
            self.rewrite = None;
        }
    }

    /// Logs a change to the entry in `slot`.
    pub fn entry_record(&mut self, slot: SlotId, args: &[&[u8]]) {
        resp::write_request(&mut self.main, args);
        if let Some(rw) = &mut self.rewrite {
            if slot < rw.cursor {
                resp::write_request(&mut rw.out, args);
            }
        }
    }

    /// Logs an already encoded change to the entry in `slot`.
    pub fn entry_record_owned(&mut self, slot: SlotId, record: Vec<u8>) {
        if let Some(rw) = &mut self.rewrite {
            if slot < rw.cursor {
                rw.out.extend_from_slice(&record);
            }
        }
        if self.main.is_empty() {
            self.main = record;
        } else {
            self.main.extend_from_slice(&record);
        }
    }

    /// Logs a change that is not about one entry (markers, configuration ids, flush).
    pub fn global_record(&mut self, args: &[&[u8]]) {
        if !self.enabled {
            return;
        }
        resp::write_request(&mut self.main, args);
        if let Some(rw) = &mut self.rewrite {
            resp::write_request(&mut rw.out, args);
        }
    }

    /// Moves the records logged since the last call to the end of `out`.
    pub fn drain(&mut self, out: &mut Vec<u8>) {
        if out.is_empty() {
            std::mem::swap(out, &mut self.main);
        } else {
            out.append(&mut self.main);
        }
    }

    pub fn rewriting(&self) -> bool {
        self.rewrite.is_some()
    }
}

/// What a replay found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub records: u64,
    /// Bytes of valid records; a log cut short by a crash has a torn last record after this point,
    /// which the caller should truncate away before appending.
    pub valid_bytes: usize,
    /// Whether a torn record was found at the end.
    pub truncated: bool,
}

/// A log that cannot be replayed: a malformed record before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayError {
    pub offset: usize,
    pub reason: String,
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad log record at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for ReplayError {}

fn number(arg: &[u8]) -> Option<u64> {
    parse_i64(arg).and_then(|n| u64::try_from(n).ok())
}

impl Engine {
    /// Starts writing records of every change (call before serving, after replay).
    pub fn enable_log(&mut self) {
        self.store.log.set_enabled(true);
    }

    pub fn log_enabled(&self) -> bool {
        self.store.log.enabled()
    }

    /// Appends the records logged since the last call to `out`.
    pub fn drain_log(&mut self, out: &mut Vec<u8>) {
        self.store.log.drain(out);
    }

    /// Starts an incremental rewrite: the new log begins with the CMI-wide state (configuration
    /// ids, markers); entries follow through `rewrite_step`.
    pub fn begin_rewrite(&mut self) {
        let mut out = Vec::new();
        let ids = &self.store.config;
        let latest = ids.latest.to_string();
        resp::write_request(&mut out, &[&b"CONFIGID"[..], latest.as_bytes()]);
        let fragments = ids.fragments().to_string();
        resp::write_request(&mut out, &[&b"FRAGMENTS"[..], fragments.as_bytes()]);
        for (f, id) in ids.all_fragment_ids().iter().enumerate() {
            if *id != 0 {
                let (f, id) = (f.to_string(), id.to_string());
                resp::write_request(&mut out, &[&b"FRAGMENTID"[..], f.as_bytes(), id.as_bytes()]);
            }
        }
        for key in &self.markers {
            resp::write_request(&mut out, &[&b"MARK"[..], key]);
        }
        self.store.log.rewrite = Some(Rewrite { cursor: 0, out });
    }

    /// Copies up to `max_slots` more slots into the new log. Returns true once every slot is copied;
    /// from then on the new log receives every change until `end_rewrite`.
    pub fn rewrite_step(&mut self, max_slots: u32) -> bool {
        let end = self.store.slot_end();
        let Some(rw) = &self.store.log.rewrite else {
            return true;
        };
        let start = rw.cursor;
        if start >= end {
            // Nothing (left) to walk: an empty CMI, or FLUSHALL during the walk. Every slot, including
            // ones created from now on, counts as copied.
            self.store
                .log
                .rewrite
                .as_mut()
                .expect("checked above")
                .cursor = SlotId::MAX;
            return true;
        }
        let stop = start.saturating_add(max_slots).min(end);
        let mut chunk = Vec::new();
        for slot in start..stop {
            if let Some(entry) = self.store.slot(slot) {
                // An unpinned entry under an exclusive lease may be stale by now (see the module
                // comment); a restarted CMI must not serve it.
                let writer_holds = !entry.pinned && self.exclusively_leased(&entry.key);
                if !writer_holds {
                    chunk.extend_from_slice(&put_record(entry));
                }
            }
        }
        let rw = self.store.log.rewrite.as_mut().expect("checked above");
        rw.out.extend_from_slice(&chunk);
        // Once the walk is over, every slot counts as copied, including ones created later.
        rw.cursor = if stop >= end { SlotId::MAX } else { stop };
        stop >= end
    }

    /// Appends the new log's bytes produced so far to `out`.
    pub fn drain_rewrite(&mut self, out: &mut Vec<u8>) {
        if let Some(rw) = &mut self.store.log.rewrite {
            out.append(&mut rw.out);
        }
    }

    /// Stops feeding the new log (after switching to it, or to give up on it).
    pub fn end_rewrite(&mut self) {
        self.store.log.rewrite = None;
    }

    pub fn rewriting(&self) -> bool {
        self.store.log.rewriting()
    }

    /// Restores state from log bytes. Call on a fresh engine, before `enable_log`. A torn record at
    /// the very end (a crash in the middle of a write) is reported, not an error; anything else
    /// malformed is.
    pub fn replay(&mut self, bytes: &[u8]) -> Result<Replayed, ReplayError> {
        let limits = Limits {
            max_bulk: usize::MAX,
            max_args: 16,
            max_inline: 0,
            unauthenticated: false,
        };
        let mut ranges = Vec::new();
        let mut pos = 0;
        let mut replayed = Replayed::default();
        while pos < bytes.len() {
            let rest = &bytes[pos..];
            let bad = |reason: String| ReplayError {
                offset: pos,
                reason,
            };
            if rest[0] != b'*' {
                return Err(bad("record does not start with '*'".into()));
            }
            match resp::parse_request(rest, &limits, &mut ranges) {
                Ok(Parsed::Request { consumed }) => {
                    let args: Vec<&[u8]> = ranges.iter().map(|r| &rest[r.clone()]).collect();
                    self.apply_record(&args).map_err(bad)?;
                    replayed.records += 1;
                    pos += consumed;
                }
                Ok(Parsed::Empty { consumed }) => pos += consumed,
                Ok(Parsed::Incomplete { .. }) => {
                    replayed.truncated = true;
                    break;
                }
                Ok(Parsed::Inline { .. }) => unreachable!("records start with '*'"),
                Err(e) => return Err(bad(e.to_string())),
            }
        }
        replayed.valid_bytes = pos;
        Ok(replayed)
    }

    fn apply_record(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let num = |i: usize| {
            args.get(i)
                .and_then(|a| number(a))
                .ok_or_else(|| format!("argument {i} is not a number"))
        };
        let arity = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{} takes {} arguments",
                    String::from_utf8_lossy(args[0]),
                    n - 1
                ))
            }
        };
        let forced = |pinned: bool, ttl: Ttl| PutOptions {
            pinned,
            ttl,
            leased: false,
            force: true,
        };
        match args.first().copied().unwrap_or_default() {
            b"PUT" => {
                arity(6)?;
                let (expire_at, config_id) = (num(3)?, num(4)?);
                let pinned = args[5] == b"1";
                let latest = self.store.config.latest;
                // The entry keeps the configuration id it was written under.
                self.store.config.latest = config_id;
                let result = self.store.put(
                    args[1],
                    args[2].to_vec(),
                    forced(pinned, Ttl::At(expire_at)),
                );
                self.store.config.latest = latest;
                result.map_err(|_| "cannot happen: forced put".to_string())?;
            }
            b"APPEND" => {
                arity(4)?;
                let config_id = num(3)?;
                let latest = self.store.config.latest;
                self.store.config.latest = config_id;
                match self.store.lookup(args[1], 0) {
                    Some(slot) => {
                        self.store
                            .append(slot, args[2], true)
                            .map_err(|_| "cannot happen: forced append".to_string())?;
                    }
                    None => {
                        self.store
                            .put(args[1], args[2].to_vec(), forced(false, Ttl::At(0)))
                            .map_err(|_| "cannot happen: forced put".to_string())?;
                    }
                }
                self.store.config.latest = latest;
            }
            b"EXPIREAT" => {
                arity(3)?;
                let at = num(2)?;
                if let Some(slot) = self.store.lookup(args[1], 0) {
                    self.store.set_expire(slot, at);
                }
            }
            b"DEL" => {
                arity(2)?;
                self.store.remove(args[1]);
            }
            b"MARK" => {
                arity(2)?;
                self.set_marker(args[1], true);
            }
            b"UNMARK" => {
                arity(2)?;
                self.set_marker(args[1], false);
            }
            b"CONFIGID" => {
                arity(2)?;
                self.store.config.latest = num(1)?;
            }
            b"FRAGMENTS" => {
                arity(2)?;
                let n = u32::try_from(num(1)?).map_err(|_| "too many fragments".to_string())?;
                self.store
                    .config
                    .set_fragments(n)
                    .map_err(|e| e.to_string())?;
            }
            b"FRAGMENTID" => {
                arity(3)?;
                let f = u32::try_from(num(1)?).map_err(|_| "bad fragment".to_string())?;
                self.store
                    .config
                    .set_fragment_id(f, num(2)?)
                    .map_err(|e| e.to_string())?;
            }
            // A log holds no sessions, so the time a flush would stamp on their tombstones is moot.
            b"FLUSH" if args.len() == 2 && args[1] == b"UNPINNED" => {
                self.flush_all(Now::at(0), true)
            }
            b"FLUSH" => {
                arity(1)?;
                self.flush_all(Now::at(0), false);
            }
            other => return Err(format!("unknown record {}", String::from_utf8_lossy(other))),
        }
        Ok(())
    }
}
