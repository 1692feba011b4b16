//! TPC-C's random inputs (clause 2.1.6, 4.3.2; BenchBase's `TPCCUtil`): uniform numbers and
//! strings, NURand with BenchBase's constants, and customer last names from syllables.

use crate::generator::Rng;

/// The run-time constant C of NURand(1023) for customer ids (BenchBase's `C_ID`).
pub const C_ID: u32 = 259;
/// The run-time constant C of NURand(8191) for item ids (BenchBase's `OL_I_ID`).
pub const OL_I_ID: u32 = 7911;
/// C of NURand(255) for last names while loading (BenchBase's load value).
pub const C_LAST_LOAD: u32 = 157;
/// C of NURand(255) for last names at run time: |223 − 157| = 66 lies in [65, 119] and is
/// neither 96 nor 112, as clause 2.1.6.1 requires.
pub const C_LAST_RUN: u32 = 223;

const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Uniform in `[min, max]` (both inclusive).
pub fn uniform(rng: &mut Rng, min: i64, max: i64) -> i64 {
    debug_assert!(min <= max);
    min + rng.below((max - min + 1) as u64) as i64
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) mod (y − x + 1)) + x (clause 2.1.6).
pub fn nurand(rng: &mut Rng, a: u32, c: u32, x: u32, y: u32) -> u32 {
    let (a, c, x, y) = (i64::from(a), i64::from(c), i64::from(x), i64::from(y));
    ((((uniform(rng, 0, a) | uniform(rng, x, y)) + c) % (y - x + 1)) + x) as u32
}

/// The last name of number `n` in `0..=999`: the syllables of its three digits (clause 4.3.2.3).
pub fn last_name(n: u32) -> String {
    debug_assert!(n <= 999);
    let digits = [n / 100, (n / 10) % 10, n % 10];
    digits.iter().map(|&d| SYLLABLES[d as usize]).collect()
}

/// A random string of letters and digits with a length in `[min, max]` (a-string, clause 4.3.2.2).
pub fn alphanumeric(rng: &mut Rng, min: usize, max: usize) -> String {
    let len = uniform(rng, min as i64, max as i64) as usize;
    (0..len)
        .map(|_| ALPHANUMERIC[rng.below(ALPHANUMERIC.len() as u64) as usize] as char)
        .collect()
}

/// A random string of digits of exactly `len` characters (n-string).
pub fn numeric(rng: &mut Rng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(b'0' + rng.below(10) as u8))
        .collect()
}

/// A zip code: four random digits and "11111" (clause 4.3.2.7).
pub fn zip(rng: &mut Rng) -> String {
    numeric(rng, 4) + "11111"
}

/// I_DATA or S_DATA: 26 to 50 characters, 10% of them with "ORIGINAL" at a random position
/// (clause 4.3.3.1).
pub fn data_with_original(rng: &mut Rng) -> String {
    let mut data = alphanumeric(rng, 26, 50);
    if rng.below(10) == 0 {
        let at = rng.below((data.len() - 8 + 1) as u64) as usize;
        data.replace_range(at..at + 8, "ORIGINAL");
    }
    data
}

/// A random permutation of `1..=n` (O_C_ID of the loaded orders, clause 4.3.3.1).
pub fn permutation(rng: &mut Rng, n: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = (1..=n).collect();
    for i in (1..ids.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        ids.swap(i, j);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_follow_the_syllables() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = Rng::new(7);
        let mut counts = vec![0u32; 3001];
        for _ in 0..200_000 {
            let c = nurand(&mut rng, 1023, C_ID, 1, 3000);
            assert!((1..=3000).contains(&c));
            counts[c as usize] += 1;
        }
        // Non-uniform: the most popular id is drawn far more often than the mean (about 67).
        let max = *counts.iter().max().unwrap();
        assert!(max > 200, "max {max}");
    }

    #[test]
    fn strings_have_their_lengths() {
        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            let s = alphanumeric(&mut rng, 26, 50);
            assert!((26..=50).contains(&s.len()));
            assert_eq!(zip(&mut rng).len(), 9);
            let d = data_with_original(&mut rng);
            assert!((26..=50).contains(&d.len()));
        }
        let mut p = permutation(&mut rng, 100);
        p.sort_unstable();
        assert_eq!(p, (1..=100).collect::<Vec<_>>());
    }

    #[test]
    fn the_run_constant_of_last_names_is_legal() {
        let delta = C_LAST_RUN.abs_diff(C_LAST_LOAD);
        assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
    }
}
