//! Entry storage for one CMI: the key table, memory accounting, the eviction candidates, the expiry
//! index and configuration-id checks. Every change to an entry goes through this module, which keeps
//! those structures and the append-only log consistent with each other.

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::config_ids::ConfigIds;
use crate::eviction::EvictionPolicy;
use crate::persist::Log;

/// Index of an entry's slot. Stable for the entry's life; reused after it is removed.
pub type SlotId = u32;

/// Bytes charged per entry beyond its key and value: the slot, the table index, the eviction links
/// and the allocator's headers for key and value. An estimate, fixed so that accounting is
/// deterministic (DESIGN.md §3: memory is accounted in bytes, not slabs).
pub const ENTRY_OVERHEAD: usize = 96;

/// What an entry of this key and value length costs against `maxmemory`.
pub fn entry_charge(key_len: usize, value_len: usize) -> usize {
    key_len + value_len + ENTRY_OVERHEAD
}

/// A cached value with its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub value: Vec<u8>,
    /// Unix time in milliseconds at which the entry expires; 0 for never.
    pub expire_at: u64,
    /// The configuration id the CMI had when this value was written (004 §3.2.4).
    pub config_id: u64,
    /// Pinned entries are never evicted (buffered writes, mappings, queues; 000 §3.1).
    pub pinned: bool,
    /// A session holds a lease on the key: the entry is not an eviction candidate meanwhile.
    pub leased: bool,
    /// The log has recorded this entry as deleted while a writer held it (see
    /// `Store::log_exclusive_lease`); when the lease ends with the entry still here, the log must
    /// learn it again.
    pub unlogged: bool,
}

impl Entry {
    pub fn charge(&self) -> usize {
        entry_charge(self.key.len(), self.value.len())
    }

    fn is_candidate(&self) -> bool {
        !self.pinned && !self.leased
    }

    fn expired(&self, now: u64) -> bool {
        self.expire_at != 0 && now >= self.expire_at
    }
}

/// The store could not make room: everything left is pinned, leased or pending, or the pinned cap
/// is reached. Nothing already stored was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotStored;

/// Memory use and limits, in bytes.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Entries, pending versions and markers.
    pub used: usize,
    /// The pinned part of `used`.
    pub pinned: usize,
    /// The part of `used` the eviction policy may reclaim.
    pub evictable: usize,
    /// 0 means no limit.
    pub maxmemory: usize,
    /// 0 means no separate cap for pinned bytes.
    pub max_pinned: usize,
}

/// How a put treats the entry's time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// Keep whatever the existing entry had (none for a new entry).
    Keep,
    /// Expire at this Unix time in ms (0: never).
    At(u64),
}

/// The pinned memory kept back from ordinary pinned writes for [`Budget::Reserve`]: an eighth of
/// the cap.
pub fn pinned_reserve(max_pinned: usize) -> usize {
    max_pinned / 8
}

/// Which limits a charge for bytes outside entries must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// `maxmemory` and the pinned cap short of its reserve.
    Capped,
    /// `maxmemory` and the whole pinned cap: for a pinned write that makes room soon after it
    /// (`LSET ... PINRESERVE`: a buffered write replaced by its idempotent form just before it is
    /// applied and deleted), so that a cache whose pinned memory is full can still empty it.
    Reserve,
    /// None: the bytes were reserved before (a pending version put back), or must not be refused
    /// (markers).
    Forced,
}

/// Options of a put.
#[derive(Clone, Copy, Debug)]
pub struct PutOptions {
    pub pinned: bool,
    pub ttl: Ttl,
    /// The key is under a lease right now.
    pub leased: bool,
    /// Skip the memory limits: used when the bytes were already reserved (a committing pending
    /// version) or when restoring from the log.
    pub force: bool,
}

#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    pub evicted: u64,
    /// Stores refused with NOTSTORED.
    pub refused: u64,
    pub expired: u64,
    /// Entries dropped because their configuration id is below their fragment's.
    pub discarded: u64,
}

pub struct Store {
    table: HashTable<SlotId>,
    hasher: foldhash::fast::RandomState,
    slots: Vec<Option<Entry>>,
    free: Vec<SlotId>,
    /// Entries with a time to live, by expiry time.
    expires: BTreeSet<(u64, SlotId)>,
    policy: Box<dyn EvictionPolicy>,
    pub memory: Memory,
    pub config: ConfigIds,
    pub log: Log,
    pub stats: StoreStats,
}

impl Store {
    pub fn new(policy: Box<dyn EvictionPolicy>, maxmemory: usize, max_pinned: usize) -> Store {
        Store {
            table: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            slots: Vec::new(),
            free: Vec::new(),
            expires: BTreeSet::new(),
            policy,
            memory: Memory {
                maxmemory,
                max_pinned,
                ..Memory::default()
            },
            config: ConfigIds::default(),
            log: Log::default(),
            stats: StoreStats::default(),
        }
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Number of entries, expired ones not yet reclaimed included (as Redis's DBSIZE).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn with_expiry(&self) -> usize {
        self.expires.len()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The slot holding `key`, live or not.
    pub(crate) fn find(&self, key: &[u8]) -> Option<SlotId> {
        let slots = &self.slots;
        self.table
            .find(self.hash(key), |&s| slot_key(slots, s) == key)
            .copied()
    }

    fn entry_ref(&self, slot: SlotId) -> &Entry {
        self.slots[slot as usize]
            .as_ref()
            .expect("slot in the table holds an entry")
    }

    fn entry_mut(&mut self, slot: SlotId) -> &mut Entry {
        self.slots[slot as usize]
            .as_mut()
            .expect("slot in the table holds an entry")
    }

    /// Whether the entry is current for its fragment (004 §3.2.4). A pinned entry always is: it is
    /// the only copy of what it holds (a buffered write, a dirty list), which discarding a
    /// fragment's cached values must not lose.
    fn current(&self, entry: &Entry) -> bool {
        entry.pinned || self.config.is_current(&entry.key, entry.config_id)
    }

    /// The live entry for `key`, without side effects: an expired or discarded entry reads as absent.
    pub fn peek(&self, key: &[u8], now: u64) -> Option<&Entry> {
        let entry = self.entry_ref(self.find(key)?);
        (!entry.expired(now) && self.current(entry)).then_some(entry)
    }

    /// The live entry's slot for `key`. Reclaims an expired entry, and an entry whose configuration
    /// id is obsolete (unless a session holds a lease on it), on the way.
    pub fn lookup(&mut self, key: &[u8], now: u64) -> Option<SlotId> {
        let slot = self.find(key)?;
        let entry = self.entry_ref(slot);
        if entry.expired(now) {
            self.remove_slot(slot);
            self.stats.expired += 1;
            return None;
        }
        if !self.current(entry) {
            if !entry.leased {
                self.remove_slot(slot);
                self.stats.discarded += 1;
            }
            return None;
        }
        Some(slot)
    }

    /// Reads `key` as a cache read: the entry counts as recently used.
    pub fn get(&mut self, key: &[u8], now: u64) -> Option<&Entry> {
        let slot = self.lookup(key, now)?;
        self.policy.touch(slot);
        Some(self.entry_ref(slot))
    }

    /// Counts a use of the entry for the eviction policy.
    pub fn touch(&mut self, slot: SlotId) {
        self.policy.touch(slot);
    }

    pub fn entry(&self, slot: SlotId) -> &Entry {
        self.entry_ref(slot)
    }

    /// Every entry, live or not.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten()
    }

    // --- memory ---

    /// Whether `bytes` more pinned bytes stay within the pinned cap: short of its reserve
    /// ([`pinned_reserve`]) unless `from_reserve`.
    fn pinned_fits(&self, bytes: usize, from_reserve: bool) -> bool {
        let m = &self.memory;
        let limit = match from_reserve {
            true => m.max_pinned,
            false => m.max_pinned - pinned_reserve(m.max_pinned),
        };
        m.max_pinned == 0 || m.pinned + bytes <= limit
    }

    /// Makes room for `bytes` more (pinned or not), evicting candidates in the policy's order.
    /// Refuses without evicting anything when eviction could not make enough room.
    fn reserve(&mut self, bytes: usize, pinned: bool) -> Result<(), NotStored> {
        if pinned && !self.pinned_fits(bytes, false) {
            self.stats.refused += 1;
            return Err(NotStored);
        }
        let m = &self.memory;
        if m.maxmemory == 0 || m.used + bytes <= m.maxmemory {
            return Ok(());
        }
        self.check_room(bytes)?;
        while self.memory.used + bytes > self.memory.maxmemory {
            let victim = self
                .policy
                .victim()
                .expect("evictable bytes are backed by candidates");
            self.remove_slot(victim);
            self.stats.evicted += 1;
        }
        Ok(())
    }

    /// Whether eviction could make room for `bytes` more unpinned bytes; counts a refusal.
    pub fn check_room(&mut self, bytes: usize) -> Result<(), NotStored> {
        let m = &self.memory;
        if m.maxmemory != 0 && m.used - m.evictable + bytes > m.maxmemory {
            self.stats.refused += 1;
            return Err(NotStored);
        }
        Ok(())
    }

    /// Charges bytes that live outside entries (pending versions, markers).
    pub fn charge(&mut self, bytes: usize, pinned: bool, budget: Budget) -> Result<(), NotStored> {
        match budget {
            Budget::Capped => self.reserve(bytes, pinned)?,
            Budget::Reserve => {
                if pinned && !self.pinned_fits(bytes, true) {
                    self.stats.refused += 1;
                    return Err(NotStored);
                }
                self.reserve(bytes, false)?;
            }
            Budget::Forced => {}
        }
        self.memory.used += bytes;
        if pinned {
            self.memory.pinned += bytes;
        }
        Ok(())
    }

    pub fn uncharge(&mut self, bytes: usize, pinned: bool) {
        self.memory.used -= bytes;
        if pinned {
            self.memory.pinned -= bytes;
        }
    }

    /// Evicts candidates until memory is within `maxmemory` again (after the limit was lowered).
    pub fn evict_to_limit(&mut self) {
        while self.memory.maxmemory != 0 && self.memory.used > self.memory.maxmemory {
            let Some(victim) = self.policy.victim() else {
                return;
            };
            self.remove_slot(victim);
            self.stats.evicted += 1;
        }
    }

    fn leave_candidates(&mut self, slot: SlotId) {
        let entry = self.entry_ref(slot);
        if entry.is_candidate() {
            let charge = entry.charge();
            self.policy.remove(slot);
            self.memory.evictable -= charge;
        }
    }

    fn enter_candidates(&mut self, slot: SlotId) {
        let entry = self.entry_ref(slot);
        if entry.is_candidate() {
            let charge = entry.charge();
            self.policy.insert(slot);
            self.memory.evictable += charge;
        }
    }

    fn account(&mut self, entry_charge: usize, pinned: bool, add: bool) {
        if add {
            self.memory.used += entry_charge;
            if pinned {
                self.memory.pinned += entry_charge;
            }
        } else {
            self.memory.used -= entry_charge;
            if pinned {
                self.memory.pinned -= entry_charge;
            }
        }
    }

    // --- changes ---

    /// Stores `value` under `key`, replacing any entry. The configuration id stamped on the entry is
    /// the CMI's latest.
    pub fn put(
        &mut self,
        key: &[u8],
        value: Vec<u8>,
        opts: PutOptions,
    ) -> Result<SlotId, NotStored> {
        let new_charge = entry_charge(key.len(), value.len());
        let config_id = self.config.latest;
        let slot = match self.find(key) {
            Some(slot) => {
                let old = self.entry_ref(slot);
                let (old_charge, old_pinned) = (old.charge(), old.pinned);
                self.leave_candidates(slot);
                if !opts.force {
                    // The old entry's bytes are freed by the replacement.
                    let grow = new_charge.saturating_sub(old_charge);
                    let grow_pinned = if opts.pinned {
                        new_charge.saturating_sub(if old_pinned { old_charge } else { 0 })
                    } else {
                        0
                    };
                    if let Err(e) = self.reserve_replacing(grow, grow_pinned) {
                        self.enter_candidates(slot);
                        return Err(e);
                    }
                }
                self.account(old_charge, old_pinned, false);
                let entry = self.entry_mut(slot);
                let old_expire = entry.expire_at;
                entry.value = value;
                entry.pinned = opts.pinned;
                entry.leased = opts.leased;
                entry.unlogged = false;
                entry.config_id = config_id;
                let new_expire = match opts.ttl {
                    Ttl::Keep => old_expire,
                    Ttl::At(at) => at,
                };
                entry.expire_at = new_expire;
                if old_expire != new_expire {
                    self.reindex_expiry(slot, old_expire, new_expire);
                }
                slot
            }
            None => {
                if !opts.force {
                    self.reserve(new_charge, opts.pinned)?;
                }
                let expire_at = match opts.ttl {
                    Ttl::Keep => 0,
                    Ttl::At(at) => at,
                };
                let entry = Entry {
                    key: key.into(),
                    value,
                    expire_at,
                    config_id,
                    pinned: opts.pinned,
                    leased: opts.leased,
                    unlogged: false,
                };
                let slot = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = Some(entry);
                        s
                    }
                    None => {
                        self.slots.push(Some(entry));
                        (self.slots.len() - 1) as SlotId
                    }
                };
                let hash = self.hash(key);
                let slots = &self.slots;
                let hasher = &self.hasher;
                self.table
                    .insert_unique(hash, slot, |&s| hasher.hash_one(slot_key(slots, s)));
                if expire_at != 0 {
                    self.expires.insert((expire_at, slot));
                }
                slot
            }
        };
        self.account(new_charge, opts.pinned, true);
        self.enter_candidates(slot);
        self.log_put(slot);
        Ok(slot)
    }

    /// Reserve for a replacement whose old entry was already taken out of the candidates.
    fn reserve_replacing(&mut self, grow: usize, grow_pinned: usize) -> Result<(), NotStored> {
        if grow_pinned > 0 && !self.pinned_fits(grow_pinned, false) {
            self.stats.refused += 1;
            return Err(NotStored);
        }
        self.reserve(grow, false)
    }

    /// Appends bytes to the entry in `slot`, keeping its pin and time to live. Returns the new length.
    pub fn append(&mut self, slot: SlotId, bytes: &[u8], force: bool) -> Result<usize, NotStored> {
        let pinned = self.entry_ref(slot).pinned;
        self.leave_candidates(slot);
        if !force {
            if let Err(e) = self.reserve(bytes.len(), pinned) {
                self.enter_candidates(slot);
                return Err(e);
            }
        }
        let config_id = self.config.latest;
        let entry = self.entry_mut(slot);
        entry.value.extend_from_slice(bytes);
        entry.config_id = config_id;
        let len = entry.value.len();
        self.account(bytes.len(), pinned, true);
        self.enter_candidates(slot);
        // An entry the log forgot under a writer's lease is logged whole when the lease ends.
        if self.log.enabled() && !self.entry_ref(slot).unlogged {
            let key = self.entry_ref(slot).key.clone();
            let cfg = config_id.to_string();
            self.log
                .entry_record(slot, &[b"APPEND", &key, bytes, cfg.as_bytes()]);
        }
        Ok(len)
    }

    /// Removes the entry for `key`, live or not, returning it.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let slot = self.find(key)?;
        Some(self.remove_slot(slot))
    }

    fn remove_slot(&mut self, slot: SlotId) -> Entry {
        let entry = self.unlink_slot(slot);
        if self.log.enabled() {
            self.log.entry_record(slot, &[b"DEL", &entry.key]);
        }
        entry
    }

    /// Removes the entry in `slot` from every index and from the memory count, logging nothing.
    fn unlink_slot(&mut self, slot: SlotId) -> Entry {
        self.leave_candidates(slot);
        let entry = self.slots[slot as usize]
            .take()
            .expect("slot in the table holds an entry");
        let hash = self.hash(&entry.key);
        let found = self
            .table
            .find_entry(hash, |&s| s == slot)
            .expect("entry is indexed");
        found.remove();
        if entry.expire_at != 0 {
            self.expires.remove(&(entry.expire_at, slot));
        }
        self.account(entry.charge(), entry.pinned, false);
        self.free.push(slot);
        entry
    }

    /// Sets or clears (0) the expiry of the entry in `slot`.
    pub fn set_expire(&mut self, slot: SlotId, expire_at: u64) {
        let entry = self.entry_mut(slot);
        let old = entry.expire_at;
        entry.expire_at = expire_at;
        self.reindex_expiry(slot, old, expire_at);
        if self.log.enabled() {
            let key = self.entry_ref(slot).key.clone();
            let at = expire_at.to_string();
            self.log
                .entry_record(slot, &[b"EXPIREAT", &key, at.as_bytes()]);
        }
    }

    fn reindex_expiry(&mut self, slot: SlotId, old: u64, new: u64) {
        if old != 0 {
            self.expires.remove(&(old, slot));
        }
        if new != 0 {
            self.expires.insert((new, slot));
        }
    }

    /// Marks whether a session holds a lease on the key, moving its entry (if any) out of or back
    /// into the eviction candidates.
    pub fn set_leased(&mut self, key: &[u8], leased: bool) {
        if let Some(slot) = self.find(key) {
            if self.entry_ref(slot).leased != leased {
                self.leave_candidates(slot);
                self.entry_mut(slot).leased = leased;
                self.enter_candidates(slot);
            }
            if !leased && self.entry_ref(slot).unlogged {
                // The writer left the value as it was: the log, which forgot it, learns it again.
                self.entry_mut(slot).unlogged = false;
                self.log_put(slot);
            }
        }
    }

    /// Logs that a writer now holds an exclusive lease on an unpinned key: should the CMI restart
    /// before the writer finishes, the restored cache must not serve the value the writer is
    /// replacing (it may already be stale in the data store), so the log forgets it now.
    pub fn log_exclusive_lease(&mut self, key: &[u8]) {
        if !self.log.enabled() {
            return;
        }
        if let Some(slot) = self.find(key) {
            if !self.entry_ref(slot).pinned {
                self.log.entry_record(slot, &[b"DEL", key]);
                self.entry_mut(slot).unlogged = true;
            }
        }
    }

    fn log_put(&mut self, slot: SlotId) {
        if self.log.enabled() {
            let record = put_record(self.entry_ref(slot));
            self.log.entry_record_owned(slot, record);
        }
    }

    /// Removes entries whose time to live has passed, at most `limit` of them.
    pub fn expire_due(&mut self, now: u64, limit: usize) -> usize {
        let mut removed = 0;
        while removed < limit {
            match self.expires.first() {
                Some(&(at, slot)) if at <= now => {
                    self.remove_slot(slot);
                    self.stats.expired += 1;
                    removed += 1;
                }
                _ => break,
            }
        }
        removed
    }

    /// Drops every entry. Memory charged outside entries (pending versions, markers) stays charged;
    /// its owners release it.
    pub fn clear(&mut self) {
        let entries_bytes: usize = self.slots.iter().flatten().map(Entry::charge).sum();
        let pinned_bytes: usize = self
            .slots
            .iter()
            .flatten()
            .filter(|e| e.pinned)
            .map(Entry::charge)
            .sum();
        self.memory.used -= entries_bytes;
        self.memory.pinned -= pinned_bytes;
        self.memory.evictable = 0;
        self.table.clear();
        self.slots.clear();
        self.free.clear();
        self.expires.clear();
        self.policy.clear();
    }

    /// Drops every unpinned entry (cached values) and keeps the pinned ones. Logs nothing: the
    /// caller logs the flush as one record.
    pub fn clear_unpinned(&mut self) {
        let unpinned: Vec<SlotId> = (0..self.slot_end())
            .filter(|&slot| self.slot(slot).is_some_and(|entry| !entry.pinned))
            .collect();
        for slot in unpinned {
            self.unlink_slot(slot);
        }
    }

    // --- snapshots for log rewriting ---

    /// One past the highest slot index in use.
    pub fn slot_end(&self) -> SlotId {
        self.slots.len() as SlotId
    }

    pub fn slot(&self, slot: SlotId) -> Option<&Entry> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// Checks the bookkeeping against a recount; used by tests and the fuzzer.
    pub fn check_invariants(&self, extra_used: usize, extra_pinned: usize) {
        let entries = self.slots.iter().flatten();
        let used: usize = entries.clone().map(Entry::charge).sum();
        let pinned: usize = entries
            .clone()
            .filter(|e| e.pinned)
            .map(Entry::charge)
            .sum();
        let evictable: usize = entries
            .clone()
            .filter(|e| e.is_candidate())
            .map(Entry::charge)
            .sum();
        assert_eq!(self.memory.used, used + extra_used, "used bytes");
        assert_eq!(self.memory.pinned, pinned + extra_pinned, "pinned bytes");
        assert_eq!(self.memory.evictable, evictable, "evictable bytes");
        assert_eq!(self.table.len(), entries.clone().count(), "table size");
        let with_ttl = entries.filter(|e| e.expire_at != 0).count();
        assert_eq!(self.expires.len(), with_ttl, "expiry index");
    }
}

fn slot_key(slots: &[Option<Entry>], slot: SlotId) -> &[u8] {
    &slots[slot as usize]
        .as_ref()
        .expect("slot in the table holds an entry")
        .key
}

/// The log record that recreates an entry.
pub fn put_record(entry: &Entry) -> Vec<u8> {
    let mut record = Vec::with_capacity(entry.key.len() + entry.value.len() + 64);
    let expire = entry.expire_at.to_string();
    let config = entry.config_id.to_string();
    cads_protocol::resp::write_request(
        &mut record,
        &[
            &b"PUT"[..],
            &entry.key,
            &entry.value,
            expire.as_bytes(),
            config.as_bytes(),
            if entry.pinned { b"1" } else { b"0" },
        ],
    );
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::Lru;

    fn store(maxmemory: usize, max_pinned: usize) -> Store {
        Store::new(Box::new(Lru::default()), maxmemory, max_pinned)
    }

    fn plain() -> PutOptions {
        PutOptions {
            pinned: false,
            ttl: Ttl::At(0),
            leased: false,
            force: false,
        }
    }

    fn pinned() -> PutOptions {
        PutOptions {
            pinned: true,
            ..plain()
        }
    }

    #[test]
    fn accounting_is_exact() {
        let mut s = store(0, 0);
        s.put(b"a", b"12345".to_vec(), plain()).unwrap();
        s.put(b"bb", b"1".to_vec(), pinned()).unwrap();
        assert_eq!(s.memory.used, entry_charge(1, 5) + entry_charge(2, 1));
        assert_eq!(s.memory.pinned, entry_charge(2, 1));
        assert_eq!(s.memory.evictable, entry_charge(1, 5));
        s.put(b"a", b"1".to_vec(), pinned()).unwrap();
        assert_eq!(s.memory.pinned, entry_charge(1, 1) + entry_charge(2, 1));
        s.remove(b"bb");
        s.check_invariants(0, 0);
        assert_eq!(s.memory.used, entry_charge(1, 1));
    }

    #[test]
    fn eviction_takes_least_recent_unpinned_only() {
        let each = entry_charge(2, 10);
        let mut s = store(each * 3, 0);
        s.put(b"p1", vec![0; 10], pinned()).unwrap();
        s.put(b"u1", vec![0; 10], plain()).unwrap();
        s.put(b"u2", vec![0; 10], plain()).unwrap();
        s.get(b"u1", 0);
        s.put(b"u3", vec![0; 10], plain()).unwrap();
        assert!(s.peek(b"u2", 0).is_none(), "u2 was least recently used");
        assert!(s.peek(b"u1", 0).is_some());
        assert!(s.peek(b"p1", 0).is_some());
        assert_eq!(s.stats.evicted, 1);
        s.check_invariants(0, 0);
    }

    #[test]
    fn full_of_pinned_refuses_and_loses_nothing() {
        let each = entry_charge(2, 10);
        let mut s = store(each * 2, 0);
        s.put(b"p1", vec![1; 10], pinned()).unwrap();
        s.put(b"p2", vec![2; 10], pinned()).unwrap();
        assert_eq!(s.put(b"u1", vec![0; 10], plain()), Err(NotStored));
        // A replacement that grows does not fit either, and the old value survives.
        assert_eq!(s.put(b"p1", vec![9; 11], pinned()), Err(NotStored));
        assert_eq!(s.peek(b"p1", 0).unwrap().value, vec![1; 10]);
        // A replacement of the same size fits.
        s.put(b"p1", vec![3; 10], pinned()).unwrap();
        s.check_invariants(0, 0);
    }

    #[test]
    fn refusal_does_not_evict_in_vain() {
        let each = entry_charge(2, 10);
        let mut s = store(each * 2, 0);
        s.put(b"u1", vec![0; 10], plain()).unwrap();
        s.put(b"p1", vec![0; 10], pinned()).unwrap();
        assert_eq!(s.put(b"big", vec![0; 200], plain()), Err(NotStored));
        assert!(
            s.peek(b"u1", 0).is_some(),
            "nothing evicted for a store that cannot fit"
        );
    }

    #[test]
    fn pinned_cap() {
        let each = entry_charge(2, 10);
        // Room for one pinned entry short of the reserve.
        let cap = each + each / 4;
        let mut s = store(0, cap);
        s.put(b"p1", vec![0; 10], pinned()).unwrap();
        assert_eq!(s.put(b"p2", vec![0; 10], pinned()), Err(NotStored));
        s.put(b"u1", vec![0; 10], plain()).unwrap();
        assert_eq!(s.charge(each, true, Budget::Capped), Err(NotStored));
        s.check_invariants(0, 0);
    }

    #[test]
    fn the_pinned_reserve_is_for_reserve_charges_only() {
        let mut s = store(0, 800);
        assert_eq!(pinned_reserve(800), 100);
        s.charge(700, true, Budget::Capped).unwrap();
        assert_eq!(s.charge(1, true, Budget::Capped), Err(NotStored));
        s.charge(100, true, Budget::Reserve).unwrap();
        assert_eq!(s.charge(1, true, Budget::Reserve), Err(NotStored));
        s.charge(1, false, Budget::Capped).unwrap();
        s.uncharge(100, true);
        assert_eq!(s.memory.pinned, 700);
    }

    #[test]
    fn leased_entries_are_not_evicted() {
        let each = entry_charge(2, 10);
        let mut s = store(each * 2, 0);
        s.put(b"u1", vec![0; 10], plain()).unwrap();
        s.put(b"u2", vec![0; 10], plain()).unwrap();
        s.set_leased(b"u1", true);
        s.put(b"u3", vec![0; 10], plain()).unwrap();
        assert!(s.peek(b"u1", 0).is_some());
        assert!(s.peek(b"u2", 0).is_none());
        s.set_leased(b"u1", false);
        s.put(b"u4", vec![0; 10], plain()).unwrap();
        assert!(
            s.peek(b"u3", 0).is_none(),
            "the released u1 re-entered as most recently used, so u3 went first"
        );
        s.check_invariants(0, 0);
    }

    #[test]
    fn expiry_lazy_and_active() {
        let mut s = store(0, 0);
        let ttl = |at| PutOptions {
            ttl: Ttl::At(at),
            ..plain()
        };
        s.put(b"a", b"1".to_vec(), ttl(100)).unwrap();
        s.put(b"b", b"1".to_vec(), ttl(200)).unwrap();
        assert!(s.peek(b"a", 99).is_some());
        assert!(s.peek(b"a", 100).is_none());
        assert_eq!(s.lookup(b"a", 100), None);
        assert_eq!(s.len(), 1);
        assert_eq!(s.expire_due(150, 10), 0);
        assert_eq!(s.expire_due(250, 10), 1);
        assert!(s.is_empty());
        assert_eq!(s.stats.expired, 2);
        s.check_invariants(0, 0);
    }

    #[test]
    fn obsolete_configuration_reads_as_missing() {
        let mut s = store(0, 0);
        s.config.latest = 5;
        s.config.set_fragments(4).unwrap();
        s.put(b"k", b"v".to_vec(), plain()).unwrap();
        let fragment = cads_protocol::fragment::fragment_of(b"k", 4);
        s.config.set_fragment_id(fragment, 5).unwrap();
        assert!(s.peek(b"k", 0).is_some(), "equal ids are current");
        s.config.set_fragment_id(fragment, 6).unwrap();
        assert!(s.peek(b"k", 0).is_none());
        assert_eq!(s.lookup(b"k", 0), None);
        assert_eq!(s.stats.discarded, 1);
        assert!(s.is_empty());
    }

    #[test]
    fn slots_are_reused() {
        let mut s = store(0, 0);
        let a = s.put(b"a", b"1".to_vec(), plain()).unwrap();
        s.remove(b"a");
        let b = s.put(b"b", b"1".to_vec(), plain()).unwrap();
        assert_eq!(a, b);
        assert_eq!(s.slot_end(), 1);
    }
}
