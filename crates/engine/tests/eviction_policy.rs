//! The eviction policy a CMI is started with: its configured name, and LRU's bookkeeping as a
//! library user sees it.

mod common;

use cads_engine::{EvictionKind, EvictionPolicy, Lru};
use common::Cmi;

/// `lru` is the only policy name a CMI accepts (`--eviction`); anything else is refused, not
/// taken for the default.
#[test]
fn only_lru_is_a_policy_name() {
    assert_eq!(EvictionKind::parse("lru"), Some(EvictionKind::Lru));
    for other in ["", "LRU", "lfu", "random"] {
        assert_eq!(EvictionKind::parse(other), None, "{other:?}");
    }
}

/// The running CMI names its policy `lru`, which INFO and CONFIG GET show.
#[test]
fn the_default_policy_is_named_lru() {
    let cmi = Cmi::wt();
    assert_eq!(cmi.engine.eviction_policy(), "lru");
    assert_eq!(EvictionKind::Lru.build().name(), "lru");
}

/// An LRU list is empty exactly when it has no candidate.
#[test]
fn lru_is_empty_only_without_candidates() {
    let mut lru = Lru::default();
    assert!(lru.is_empty());
    lru.insert(7);
    assert!(!lru.is_empty());
    assert_eq!(lru.len(), 1);
    lru.remove(7);
    assert!(lru.is_empty());
}
