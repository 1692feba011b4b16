//! Eviction policies. A policy only ever sees entries that may be evicted: the store keeps pinned
//! entries and entries under a lease out of it altogether, so a policy never has to skip anything
//! (skipping pinned entries while sampling starves eviction; DESIGN.md §3).

use crate::store::SlotId;

/// Chooses which evictable entry goes first when memory is needed.
pub trait EvictionPolicy: Send {
    /// The entry became a candidate (inserted, unpinned, or its lease was released).
    fn insert(&mut self, slot: SlotId);
    /// The entry was read or written.
    fn touch(&mut self, slot: SlotId);
    /// The entry stopped being a candidate (deleted, pinned, leased).
    fn remove(&mut self, slot: SlotId);
    /// The candidate to evict next, if any. It stays a candidate until `remove` is called.
    fn victim(&self) -> Option<SlotId>;
    /// Forgets every candidate.
    fn clear(&mut self);
    /// The policy's name, as `INFO` and `CONFIG GET` show it.
    fn name(&self) -> &'static str;
}

/// The eviction policies a CMI can be started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum EvictionKind {
    #[default]
    Lru,
}

impl EvictionKind {
    pub fn build(self) -> Box<dyn EvictionPolicy> {
        match self {
            EvictionKind::Lru => Box::new(Lru::default()),
        }
    }

    pub fn parse(name: &str) -> Option<EvictionKind> {
        match name {
            "lru" => Some(EvictionKind::Lru),
            _ => None,
        }
    }
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
    linked: bool,
}

const UNLINKED: Links = Links {
    prev: NIL,
    next: NIL,
    linked: false,
};

/// Exact least-recently-used order: a doubly linked list threaded through an array indexed by slot,
/// so every operation is O(1) and allocation-free once the array has grown.
pub struct Lru {
    links: Vec<Links>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next victim.
    tail: u32,
    len: usize,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl Lru {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn unlink(&mut self, slot: u32) {
        let Links { prev, next, .. } = self.links[slot as usize];
        match prev {
            NIL => self.head = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.links[n as usize].prev = prev,
        }
        self.links[slot as usize] = UNLINKED;
        self.len -= 1;
    }

    fn push_front(&mut self, slot: u32) {
        let old_head = self.head;
        self.links[slot as usize] = Links {
            prev: NIL,
            next: old_head,
            linked: true,
        };
        match old_head {
            NIL => self.tail = slot,
            h => self.links[h as usize].prev = slot,
        }
        self.head = slot;
        self.len += 1;
    }
}

impl EvictionPolicy for Lru {
    fn insert(&mut self, slot: SlotId) {
        let i = slot as usize;
        if i >= self.links.len() {
            self.links.resize(i + 1, UNLINKED);
        }
        if self.links[i].linked {
            self.unlink(slot);
        }
        self.push_front(slot);
    }

    fn touch(&mut self, slot: SlotId) {
        if self.head != slot && self.links.get(slot as usize).is_some_and(|l| l.linked) {
            self.unlink(slot);
            self.push_front(slot);
        }
    }

    fn remove(&mut self, slot: SlotId) {
        if self.links.get(slot as usize).is_some_and(|l| l.linked) {
            self.unlink(slot);
        }
    }

    fn victim(&self) -> Option<SlotId> {
        (self.tail != NIL).then_some(self.tail)
    }

    fn clear(&mut self) {
        self.links.clear();
        self.head = NIL;
        self.tail = NIL;
        self.len = 0;
    }

    fn name(&self) -> &'static str {
        "lru"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_goes_first() {
        let mut lru = Lru::default();
        for s in [3, 1, 4, 5] {
            lru.insert(s);
        }
        assert_eq!(lru.victim(), Some(3));
        lru.touch(3);
        assert_eq!(lru.victim(), Some(1));
        lru.remove(1);
        assert_eq!(lru.victim(), Some(4));
        lru.remove(4);
        lru.remove(5);
        assert_eq!(lru.victim(), Some(3));
        lru.remove(3);
        assert_eq!(lru.victim(), None);
        assert!(lru.is_empty());
        // Removing or touching what is not a candidate is harmless.
        lru.remove(9);
        lru.touch(9);
        assert_eq!(lru.len(), 0);
    }

    #[test]
    fn reinsert_moves_to_front() {
        let mut lru = Lru::default();
        lru.insert(0);
        lru.insert(1);
        lru.insert(0);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.victim(), Some(1));
    }
}
