//! Which CMI owns a key. Consistent hashing by default, behind a trait so that a Gemini
//! configuration (fragments assigned to instances) can replace it.

use cads_protocol::fragment::fnv1a64;

/// Maps keys to CMI indexes (positions in the client's CMI list).
pub trait Router: Send + Sync {
    fn route(&self, key: &[u8]) -> usize;
    /// How many CMIs keys are spread over.
    fn cmis(&self) -> usize;
    /// The CMIs that keep replicas of `key`: its own CMI first, then `count - 1` others (fewer if
    /// there are fewer CMIs), always the same ones for the same key.
    fn replicas(&self, key: &[u8], count: usize) -> Vec<usize> {
        let n = self.cmis();
        let first = self.route(key);
        (0..count.min(n)).map(|i| (first + i) % n).collect()
    }
}

/// Points each CMI owns on the ring: enough for an even spread with few CMIs.
const POINTS_PER_CMI: usize = 160;

/// A hash ring with virtual nodes: adding or removing a CMI moves only the keys of its arcs.
pub struct ConsistentHash {
    ring: Vec<(u64, usize)>,
    cmis: usize,
}

/// Spreads FNV's output (weak in its high bits for short similar keys) over the ring.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl ConsistentHash {
    /// A ring over `names` (stable identities of the CMIs, e.g. their addresses), so that the
    /// mapping does not depend on list order.
    pub fn new<S: AsRef<str>>(names: &[S]) -> ConsistentHash {
        assert!(!names.is_empty(), "a ring needs at least one CMI");
        let mut ring = Vec::with_capacity(names.len() * POINTS_PER_CMI);
        for (cmi, name) in names.iter().enumerate() {
            for point in 0..POINTS_PER_CMI {
                let label = format!("{}#{point}", name.as_ref());
                ring.push((mix(fnv1a64(label.as_bytes())), cmi));
            }
        }
        ring.sort_unstable();
        ConsistentHash {
            ring,
            cmis: names.len(),
        }
    }
}

impl Router for ConsistentHash {
    fn route(&self, key: &[u8]) -> usize {
        if self.cmis == 1 {
            return 0;
        }
        let h = mix(fnv1a64(key));
        let i = self.ring.partition_point(|&(point, _)| point < h);
        self.ring[i % self.ring.len()].1
    }

    fn cmis(&self) -> usize {
        self.cmis
    }

    /// The first `count` distinct CMIs met walking the ring from the key's point, so that a CMI's
    /// replicas spread over the others instead of all landing on its neighbour in the list.
    fn replicas(&self, key: &[u8], count: usize) -> Vec<usize> {
        let want = count.min(self.cmis);
        let mut found = Vec::with_capacity(want);
        if want == 0 {
            return found;
        }
        let h = mix(fnv1a64(key));
        let start = self.ring.partition_point(|&(point, _)| point < h);
        for i in 0..self.ring.len() {
            let cmi = self.ring[(start + i) % self.ring.len()].1;
            if !found.contains(&cmi) {
                found.push(cmi);
                if found.len() == want {
                    break;
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_start_with_the_owner_and_are_distinct() {
        let ring = ConsistentHash::new(&["a", "b", "c", "d"]);
        for i in 0..1000 {
            let key = format!("k{i}");
            let r = ring.replicas(key.as_bytes(), 3);
            assert_eq!(r.len(), 3);
            assert_eq!(r[0], ring.route(key.as_bytes()));
            assert!(r[0] != r[1] && r[1] != r[2] && r[0] != r[2]);
        }
        assert_eq!(ring.replicas(b"k", 9).len(), 4);
    }

    #[test]
    fn spread_and_stability() {
        let three = ConsistentHash::new(&["a", "b", "c"]);
        let mut counts = [0usize; 3];
        for i in 0..30_000 {
            counts[three.route(format!("user{i}").as_bytes())] += 1;
        }
        assert!(counts.iter().all(|&c| c > 7_000), "{counts:?}");
        // Adding a CMI moves only about a quarter of the keys, all to the new one.
        let four = ConsistentHash::new(&["a", "b", "c", "d"]);
        let mut moved = 0;
        for i in 0..30_000 {
            let key = format!("user{i}");
            let (before, after) = (three.route(key.as_bytes()), four.route(key.as_bytes()));
            if before != after {
                assert_eq!(after, 3);
                moved += 1;
            }
        }
        assert!((4_000..11_000).contains(&moved), "{moved}");
    }
}
