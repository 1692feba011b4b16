//! Which fragment a key belongs to (Gemini, 004 §2). Server and client must agree on it, so it lives
//! here: FNV-1a over the key bytes, modulo the number of fragments.

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The fragment of `key` when the key space is split into `fragments` fragments (`fragments > 0`).
pub fn fragment_of(key: &[u8], fragments: u32) -> u32 {
    debug_assert!(fragments > 0);
    (fnv1a64(key) % fragments as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn fragments_spread_and_stay_in_range() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            let f = fragment_of(format!("user{i}").as_bytes(), 8);
            counts[f as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}
