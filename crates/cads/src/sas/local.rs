//! An AppNode's own copies (001 §1, Fig. 1.b): the engine's store (bytes accounted, LRU
//! eviction) inside the process, sharded by key so that threads rarely meet on a lock.
//!
//! Each copy carries a version (the token of the fill or commit that installed it), so a session
//! of several reads can check at its end that none of them was invalidated meanwhile. A fill is
//! installed only if no delivery touched its key since the fill began ([`LocalCache::begin_fill`]):
//! the core may tell this AppNode to delete a key between granting the fill and the fill's
//! arrival here, and the delete must win.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use cads_engine::eviction::EvictionKind;
use cads_engine::store::{PutOptions, Store, Ttl};

/// Shards of the local cache: a few per core is plenty on the machines cads targets.
const SHARDS: usize = 16;

struct Shard {
    store: Store,
    /// Keys with a fill under way, and its token.
    pending: HashMap<Vec<u8>, u64>,
}

/// What the local cache counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalStats {
    pub hits: u64,
    pub misses: u64,
    /// Copies installed by fills and by this AppNode's own commits.
    pub fills: u64,
    /// Fills dropped because a delivery touched their key first.
    pub fills_dropped: u64,
    /// Copies deleted or replaced by deliveries from the core.
    pub delivered: u64,
    pub evicted: u64,
    pub keys: u64,
    pub bytes: u64,
}

pub(crate) struct LocalCache {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
    next_token: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    fills: AtomicU64,
    fills_dropped: AtomicU64,
    delivered: AtomicU64,
}

impl LocalCache {
    /// A cache of at most `bytes` (0: no limit), split evenly over its shards.
    pub(crate) fn new(bytes: usize) -> LocalCache {
        let per_shard = if bytes == 0 {
            0
        } else {
            (bytes / SHARDS).max(1)
        };
        LocalCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        store: Store::new(EvictionKind::Lru.build(), per_shard, 0),
                        pending: HashMap::new(),
                    })
                })
                .collect(),
            hasher: Default::default(),
            next_token: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fills: AtomicU64::new(0),
            fills_dropped: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The copy of `key` and its version (a use, for eviction).
    pub(crate) fn get(&self, key: &[u8]) -> Option<(u64, Vec<u8>)> {
        self.shard(key).store.get(key, 0).map(|e| split(&e.value))
    }

    /// Counts reads of keys: each key once per read, however often the read looked it up.
    pub(crate) fn count(&self, hits: u64, misses: u64) {
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(misses, Ordering::Relaxed);
    }

    /// The copy of `key` without counting or touching its recency.
    pub(crate) fn peek(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.shard(key)
            .store
            .peek(key, 0)
            .map(|e| split(&e.value).1)
    }

    /// Whether `key`'s copy is still the one of `version`.
    pub(crate) fn still(&self, key: &[u8], version: u64) -> bool {
        self.shard(key)
            .store
            .peek(key, 0)
            .is_some_and(|e| split(&e.value).0 == version)
    }

    /// Starts a fill of `key`: the token to finish it with.
    pub(crate) fn begin_fill(&self, key: &[u8]) -> u64 {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.shard(key).pending.insert(key.to_vec(), token);
        token
    }

    /// Installs `value` as the copy of `key` if no delivery touched the key since
    /// [`LocalCache::begin_fill`] gave `token` and `valid()` still holds (checked under the
    /// shard's lock, so that clearing the cache and then changing what `valid` reads leaves no
    /// fill behind). Returns the copy's version.
    pub(crate) fn finish_fill(
        &self,
        key: &[u8],
        token: u64,
        value: &[u8],
        valid: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let mut shard = self.shard(key);
        if shard.pending.get(key) != Some(&token) {
            self.fills_dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        shard.pending.remove(key);
        if !valid() {
            self.fills_dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let mut stamped = Vec::with_capacity(8 + value.len());
        stamped.extend_from_slice(&token.to_le_bytes());
        stamped.extend_from_slice(value);
        let opts = PutOptions {
            pinned: false,
            ttl: Ttl::At(0),
            leased: false,
            force: false,
        };
        // No room (a value larger than the cache): the read is served all the same.
        shard.store.put(key, stamped, opts).ok()?;
        self.fills.fetch_add(1, Ordering::Relaxed);
        Some(token)
    }

    /// Gives up a fill.
    pub(crate) fn cancel_fill(&self, key: &[u8], token: u64) {
        let mut shard = self.shard(key);
        if shard.pending.get(key) == Some(&token) {
            shard.pending.remove(key);
        }
    }

    /// Deletes the copy of `key` and voids any fill of it under way.
    pub(crate) fn delete(&self, key: &[u8]) {
        let mut shard = self.shard(key);
        shard.pending.remove(key);
        shard.store.remove(key);
    }

    /// What the core delivered: each key deleted, or its copy (if this AppNode has one) replaced
    /// by the new value; fills of these keys under way are voided either way.
    pub(crate) fn apply(&self, items: &[(Vec<u8>, Option<Vec<u8>>)]) {
        for (key, value) in items {
            let mut shard = self.shard(key);
            shard.pending.remove(key.as_slice());
            match value {
                Some(value) if shard.store.peek(key, 0).is_some() => {
                    let token = self.next_token.fetch_add(1, Ordering::Relaxed);
                    let mut stamped = token.to_le_bytes().to_vec();
                    stamped.extend_from_slice(value);
                    let opts = PutOptions {
                        pinned: false,
                        ttl: Ttl::Keep,
                        leased: false,
                        force: false,
                    };
                    if shard.store.put(key, stamped, opts).is_err() {
                        shard.store.remove(key);
                    }
                }
                _ => {
                    shard.store.remove(key);
                }
            }
            self.delivered.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops every copy and every fill under way.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            shard.pending.clear();
            shard.store.clear();
        }
    }

    pub(crate) fn stats(&self) -> LocalStats {
        let (mut evicted, mut keys, mut bytes) = (0, 0, 0);
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            evicted += shard.store.stats.evicted;
            keys += shard.store.len() as u64;
            bytes += shard.store.memory.used as u64;
        }
        LocalStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            fills_dropped: self.fills_dropped.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            evicted,
            keys,
            bytes,
        }
    }
}

/// A stored copy: its version, then the value.
fn split(stored: &[u8]) -> (u64, Vec<u8>) {
    let (version, value) = stored.split_at(8);
    (
        u64::from_le_bytes(version.try_into().expect("8 bytes")),
        value.to_vec(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_during_a_fill_wins() {
        let cache = LocalCache::new(0);
        let token = cache.begin_fill(b"k");
        cache.apply(&[(b"k".to_vec(), None)]);
        assert_eq!(cache.finish_fill(b"k", token, b"old", || true), None);
        assert_eq!(cache.peek(b"k"), None);
        // A fill begun after the delivery is installed.
        let token = cache.begin_fill(b"k");
        let version = cache.finish_fill(b"k", token, b"new", || true).unwrap();
        assert_eq!(cache.get(b"k"), Some((version, b"new".to_vec())));
        assert_eq!(cache.stats().fills_dropped, 1);
    }

    #[test]
    fn a_refresh_replaces_a_copy_changes_its_version_and_creates_none() {
        let cache = LocalCache::new(0);
        let version = cache
            .finish_fill(b"k", cache.begin_fill(b"k"), b"v1", || true)
            .unwrap();
        cache.apply(&[
            (b"k".to_vec(), Some(b"v2".to_vec())),
            (b"j".to_vec(), Some(b"x".to_vec())),
        ]);
        assert_eq!(cache.peek(b"k"), Some(b"v2".to_vec()));
        assert!(!cache.still(b"k", version));
        assert_eq!(
            cache.peek(b"j"),
            None,
            "a key this AppNode did not hold stays absent"
        );
    }

    #[test]
    fn a_fill_is_dropped_when_its_registration_is_no_longer_valid() {
        let cache = LocalCache::new(0);
        let token = cache.begin_fill(b"k");
        assert_eq!(cache.finish_fill(b"k", token, b"v", || false), None);
        let token = cache.begin_fill(b"k");
        cache.clear();
        assert_eq!(cache.finish_fill(b"k", token, b"v", || true), None);
        assert_eq!(cache.peek(b"k"), None);
    }

    #[test]
    fn the_cache_stays_within_its_bytes_by_evicting_the_least_recently_used() {
        let cache = LocalCache::new(SHARDS * 2_000);
        for i in 0..1_000u32 {
            let key = format!("key{i}");
            let token = cache.begin_fill(key.as_bytes());
            cache.finish_fill(key.as_bytes(), token, &[7u8; 100], || true);
        }
        let stats = cache.stats();
        assert!(stats.bytes <= (SHARDS * 2_000) as u64, "{stats:?}");
        assert!(stats.evicted > 0 && stats.keys < 1_000, "{stats:?}");
        assert_eq!(stats.keys + stats.evicted, 1_000);
    }
}
