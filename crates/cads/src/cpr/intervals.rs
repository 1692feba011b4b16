//! An interval tree: closed intervals `[lo, hi]` over an ordered domain, one value per distinct
//! interval, found by overlap in O(log n + k). PrInT and LeMInT (002 §2) are both one.
//!
//! A treap ordered by `(lo, hi)`: random priorities keep it balanced in expectation whatever
//! order the intervals arrive in, and each node also keeps the highest `hi` of its subtree, so an
//! overlap search skips every subtree that ends before the interval it looks for (the augmented
//! tree of Cormen et al., §14.3). No crate fits: the maintained ones keep intervals without
//! values, or share nodes through `Rc`, which a tree behind a `Mutex` shared by threads cannot
//! hold (docs/ARCHITECTURE.md, "CPR").

use std::cmp::Ordering;

/// A closed interval; `lo <= hi`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Interval<K> {
    pub lo: K,
    pub hi: K,
}

impl<K: Ord> Interval<K> {
    /// The interval `[lo, hi]`; None if `lo > hi`.
    pub fn new(lo: K, hi: K) -> Option<Interval<K>> {
        (lo <= hi).then_some(Interval { lo, hi })
    }

    /// Whether the two share a point (002 Definition 3.2: containment counts).
    pub fn overlaps(&self, other: &Interval<K>) -> bool {
        self.lo <= other.hi && other.lo <= self.hi
    }

    pub fn contains(&self, point: &K) -> bool {
        &self.lo <= point && point <= &self.hi
    }
}

type Link<K, V> = Option<Box<Node<K, V>>>;

struct Node<K, V> {
    interval: Interval<K>,
    value: V,
    /// The highest `hi` in this subtree.
    max_hi: K,
    priority: u64,
    left: Link<K, V>,
    right: Link<K, V>,
}

impl<K: Ord + Clone, V> Node<K, V> {
    fn update(&mut self) {
        let mut max = &self.interval.hi;
        for child in [&self.left, &self.right].into_iter().flatten() {
            if child.max_hi > *max {
                max = &child.max_hi;
            }
        }
        if *max != self.max_hi {
            self.max_hi = max.clone();
        }
    }
}

/// Intervals with a value each.
pub struct IntervalTree<K, V> {
    root: Link<K, V>,
    len: usize,
    /// State of the priorities' generator (splitmix64).
    seed: u64,
}

impl<K: Ord + Clone, V> Default for IntervalTree<K, V> {
    fn default() -> Self {
        IntervalTree::new()
    }
}

impl<K: Ord + Clone, V> IntervalTree<K, V> {
    pub fn new() -> IntervalTree<K, V> {
        IntervalTree {
            root: None,
            len: 0,
            seed: 0x5eed_1e55_cafe_f00d,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn next_priority(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Sets the value of `interval`, returning the one it replaces.
    pub fn insert(&mut self, interval: Interval<K>, value: V) -> Option<V> {
        if let Some(slot) = self.get_mut(&interval) {
            return Some(std::mem::replace(slot, value));
        }
        let node = Box::new(Node {
            max_hi: interval.hi.clone(),
            interval,
            value,
            priority: self.next_priority(),
            left: None,
            right: None,
        });
        self.root = insert_node(self.root.take(), node);
        self.len += 1;
        None
    }

    pub fn get(&self, interval: &Interval<K>) -> Option<&V> {
        let mut link = &self.root;
        while let Some(node) = link {
            link = match interval.cmp(&node.interval) {
                Ordering::Less => &node.left,
                Ordering::Greater => &node.right,
                Ordering::Equal => return Some(&node.value),
            };
        }
        None
    }

    pub fn get_mut(&mut self, interval: &Interval<K>) -> Option<&mut V> {
        let mut link = &mut self.root;
        while let Some(node) = link {
            link = match interval.cmp(&node.interval) {
                Ordering::Less => &mut node.left,
                Ordering::Greater => &mut node.right,
                Ordering::Equal => return Some(&mut node.value),
            };
        }
        None
    }

    /// Removes `interval`, returning its value.
    pub fn remove(&mut self, interval: &Interval<K>) -> Option<V> {
        let removed = remove_node(&mut self.root, interval);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// Every interval that overlaps `interval`, in order of `(lo, hi)`.
    pub fn overlapping(&self, interval: &Interval<K>) -> Vec<(&Interval<K>, &V)> {
        let mut out = Vec::new();
        collect_overlapping(&self.root, interval, &mut out);
        out
    }

    /// Every interval, in order of `(lo, hi)`.
    pub fn iter(&self) -> Vec<(&Interval<K>, &V)> {
        let mut out = Vec::with_capacity(self.len);
        collect_all(&self.root, &mut out);
        out
    }
}

fn insert_node<K: Ord + Clone, V>(link: Link<K, V>, mut new: Box<Node<K, V>>) -> Link<K, V> {
    let Some(mut node) = link else {
        return Some(new);
    };
    if new.priority > node.priority {
        let (left, right) = split(Some(node), &new.interval);
        new.left = left;
        new.right = right;
        new.update();
        return Some(new);
    }
    if new.interval < node.interval {
        node.left = insert_node(node.left.take(), new);
    } else {
        node.right = insert_node(node.right.take(), new);
    }
    node.update();
    Some(node)
}

/// Splits a subtree into the intervals before `at` and those after it (`at` itself is absent).
fn split<K: Ord + Clone, V>(link: Link<K, V>, at: &Interval<K>) -> (Link<K, V>, Link<K, V>) {
    let Some(mut node) = link else {
        return (None, None);
    };
    if node.interval < *at {
        let (less, greater) = split(node.right.take(), at);
        node.right = less;
        node.update();
        (Some(node), greater)
    } else {
        let (less, greater) = split(node.left.take(), at);
        node.left = greater;
        node.update();
        (less, Some(node))
    }
}

/// Joins two subtrees, every interval of `left` before every one of `right`.
fn merge<K: Ord + Clone, V>(left: Link<K, V>, right: Link<K, V>) -> Link<K, V> {
    match (left, right) {
        (None, right) => right,
        (left, None) => left,
        (Some(mut l), Some(mut r)) => {
            if l.priority > r.priority {
                l.right = merge(l.right.take(), Some(r));
                l.update();
                Some(l)
            } else {
                r.left = merge(Some(l), r.left.take());
                r.update();
                Some(r)
            }
        }
    }
}

fn remove_node<K: Ord + Clone, V>(link: &mut Link<K, V>, interval: &Interval<K>) -> Option<V> {
    let node = link.as_mut()?;
    let removed = match interval.cmp(&node.interval) {
        Ordering::Less => remove_node(&mut node.left, interval),
        Ordering::Greater => remove_node(&mut node.right, interval),
        Ordering::Equal => {
            let mut gone = link.take().expect("matched above");
            *link = merge(gone.left.take(), gone.right.take());
            return Some(gone.value);
        }
    };
    if removed.is_some() {
        node.update();
    }
    removed
}

fn collect_overlapping<'t, K: Ord, V>(
    link: &'t Link<K, V>,
    interval: &Interval<K>,
    out: &mut Vec<(&'t Interval<K>, &'t V)>,
) {
    let Some(node) = link else { return };
    if node.max_hi < interval.lo {
        return;
    }
    collect_overlapping(&node.left, interval, out);
    if node.interval.lo > interval.hi {
        // Everything to the right starts later still.
        return;
    }
    if node.interval.hi >= interval.lo {
        out.push((&node.interval, &node.value));
    }
    collect_overlapping(&node.right, interval, out);
}

fn collect_all<'t, K, V>(link: &'t Link<K, V>, out: &mut Vec<(&'t Interval<K>, &'t V)>) {
    if let Some(node) = link {
        collect_all(&node.left, out);
        out.push((&node.interval, &node.value));
        collect_all(&node.right, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn iv(lo: i64, hi: i64) -> Interval<i64> {
        Interval::new(lo, hi).unwrap()
    }

    #[test]
    fn finds_overlaps_containment_and_points() {
        let mut t = IntervalTree::new();
        t.insert(iv(1, 5), "a");
        t.insert(iv(10, 20), "b");
        t.insert(iv(12, 14), "c");
        t.insert(iv(30, 30), "d");
        let found = |lo, hi| -> Vec<&str> {
            t.overlapping(&iv(lo, hi))
                .into_iter()
                .map(|(_, v)| *v)
                .collect()
        };
        assert_eq!(found(5, 5), ["a"]);
        assert_eq!(found(6, 9), Vec::<&str>::new());
        assert_eq!(found(13, 13), ["b", "c"]);
        assert_eq!(found(0, 100), ["a", "b", "c", "d"]);
        assert_eq!(found(20, 30), ["b", "d"]);
        assert!(Interval::new(3, 2).is_none());
    }

    #[test]
    fn an_interval_has_one_value() {
        let mut t = IntervalTree::new();
        assert_eq!(t.insert(iv(1, 2), 1), None);
        assert_eq!(t.insert(iv(1, 2), 2), Some(1));
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&iv(1, 2)), Some(&2));
        assert_eq!(t.remove(&iv(1, 2)), Some(2));
        assert_eq!(t.remove(&iv(1, 2)), None);
        assert!(t.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(i64, i64, u32),
        Remove(i64, i64),
        Overlapping(i64, i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let bounds = (0i64..60, 0i64..12).prop_map(|(lo, len)| (lo, lo + len));
        prop_oneof![
            (bounds.clone(), any::<u32>()).prop_map(|((lo, hi), v)| Op::Insert(lo, hi, v)),
            bounds.clone().prop_map(|(lo, hi)| Op::Remove(lo, hi)),
            bounds.prop_map(|(lo, hi)| Op::Overlapping(lo, hi)),
        ]
    }

    proptest! {
        /// The tree answers as a sorted map of intervals scanned in full would.
        #[test]
        fn matches_a_scan_of_every_interval(ops in proptest::collection::vec(op(), 1..300)) {
            let mut tree = IntervalTree::new();
            let mut model: BTreeMap<Interval<i64>, u32> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(lo, hi, v) => {
                        prop_assert_eq!(tree.insert(iv(lo, hi), v), model.insert(iv(lo, hi), v));
                    }
                    Op::Remove(lo, hi) => {
                        prop_assert_eq!(tree.remove(&iv(lo, hi)), model.remove(&iv(lo, hi)));
                    }
                    Op::Overlapping(lo, hi) => {
                        let q = iv(lo, hi);
                        let got: Vec<(Interval<i64>, u32)> =
                            tree.overlapping(&q).into_iter().map(|(i, v)| (i.clone(), *v)).collect();
                        let want: Vec<(Interval<i64>, u32)> = model
                            .iter()
                            .filter(|(i, _)| i.overlaps(&q))
                            .map(|(i, v)| (i.clone(), *v))
                            .collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(tree.len(), model.len());
            }
            let all: Vec<Interval<i64>> = tree.iter().into_iter().map(|(i, _)| i.clone()).collect();
            prop_assert_eq!(all, model.keys().cloned().collect::<Vec<_>>());
        }
    }
}
