//! YCSB's generators against values derived by hand from the algorithms in
//! `../shared/benchmarks.md` Part B §1, and their frequencies against the closed forms.

use cads_bench::generator::{
    fnvhash64, key_name, zeta, zeta_from, AcknowledgedCounter, Discrete, Rng, ScrambledZipfian,
    SkewedLatest, Uniform, Zipfian, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN,
};

/// fnvhash64 by the 8-round rule of benchmarks.md: h = 0xCBF29CE484222325; 8 times:
/// h ^= value & 0xff; h *= 1099511628211 (mod 2^64); value >>= 8; then abs(h) read as signed.
/// The expected numbers were computed with that rule in Python's arbitrary-precision integers
/// (`h = (h * 1099511628211) % 2**64`, then `h - 2**64` if `h >= 2**63`, then `abs`), not with
/// this crate's code:
///
/// - 0: every round XORs 0, so h = 0xCBF29CE484222325 · prime^8 mod 2^64 = 0xA8C7F832281A39C5 as
///   unsigned, negative as signed; its absolute value is 6284781860667377211.
/// - 1: the first round XORs 1 (0x...24), the other seven 0.
#[test]
fn fnvhash64_matches_hand_computed_values() {
    assert_eq!(fnvhash64(0), 6_284_781_860_667_377_211);
    assert_eq!(fnvhash64(1), 8_517_097_267_634_966_620);
    assert_eq!(fnvhash64(2), 1_820_151_046_732_198_393);
    assert_eq!(fnvhash64(12345), 1_792_800_413_050_876_852);
    assert_eq!(fnvhash64(99_999), 7_592_201_923_306_675_823);
    assert_eq!(fnvhash64(10_000_000_000), 1_201_321_332_300_452_516);
    // The unsigned product of the key-0 rounds, checked step by step here too.
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h = h.wrapping_mul(1_099_511_628_211);
    }
    assert_eq!(h, 0xA8C7_F832_281A_39C5);
    assert_eq!(fnvhash64(0), (h as i64).wrapping_abs());
}

#[test]
fn key_names_are_user_and_the_hashed_number() {
    assert_eq!(key_name(0, true, 1), "user6284781860667377211");
    assert_eq!(key_name(12345, true, 1), "user1792800413050876852");
    // insertorder=ordered, and zero padding.
    assert_eq!(key_name(42, false, 1), "user42");
    assert_eq!(key_name(42, false, 5), "user00042");
}

#[test]
fn zeta_sums_and_the_precomputed_constant() {
    // zeta(2, θ) = 1 + 2^-θ.
    assert!((zeta(2, 0.99) - (1.0 + 2f64.powf(-0.99))).abs() < 1e-15);
    // Computed in Python with math.fsum over the terms.
    assert!((zeta(1000, 0.99) - 7.728_953_217_284_738).abs() < 1e-10);
    assert!((zeta(100_000, 0.99) - 12.778_338_062_551_171).abs() < 1e-9);
    // Incremental extension equals the whole sum.
    let head = zeta(1000, 0.99);
    assert!((zeta_from(1000, 5000, 0.99, head) - zeta(5000, 0.99)).abs() < 1e-10);
    // The Euler-Maclaurin tail reproduces YCSB's ZETAN for 10^10 items (it lies between
    // zeta(10^10) and zeta(10^10 + 1), which differ by 1.3e-10).
    let n = SCRAMBLED_ITEM_COUNT;
    assert!((zeta(n, 0.99) - SCRAMBLED_ZETAN).abs() < 1e-9);
    assert!((zeta(n + 1, 0.99) - SCRAMBLED_ZETAN).abs() < 1e-9);
    // Just above the exact-summation limit, both ways agree.
    let m = cads_bench::generator::EXACT_ZETA_TERMS + 1;
    let exact = zeta_from(0, m, 0.75, 0.0);
    assert!((zeta(m, 0.75) - exact).abs() / exact < 1e-11);
}

/// Draws `n` values and counts them by offset from `min` (values outside `min..min+len` panic).
fn histogram(n: usize, len: usize, mut draw: impl FnMut() -> i64, min: i64) -> Vec<u64> {
    let mut counts = vec![0u64; len];
    for _ in 0..n {
        let v = draw();
        counts[(v - min) as usize] += 1;
    }
    counts
}

/// |observed - expected| within `sigmas` binomial standard deviations.
fn within(observed: u64, p: f64, n: usize, sigmas: f64) -> bool {
    let expected = p * n as f64;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (observed as f64 - expected).abs() <= sigmas * sd
}

/// The exact CDF of Gray's generator, in closed form from zeta: for k >= 2,
/// P(X < k) = ((k/n)^(1-θ) - 1 + η) / η, which at k = 2 equals zeta(2, θ)/zeta(n, θ), the mass
/// of the first two items (drawn when u·zetan < 1 + 2^-θ).
fn gray_cdf(k: usize, n: i64, theta: f64) -> f64 {
    let zetan = zeta(n, theta);
    let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta(2, theta) / zetan);
    ((k as f64 / n as f64).powf(1.0 - theta) - 1.0 + eta) / eta
}

#[test]
fn zipfian_top_items_follow_the_closed_form() {
    const N: usize = 1_000_000;
    for theta in [0.99, 0.75] {
        let items = 1000;
        let mut z = Zipfian::new(10, 10 + items - 1, theta);
        let zetan = zeta(items, theta);
        assert!((z.zetan() - zetan).abs() < 1e-12);
        let mut rng = Rng::new(42);
        let counts = histogram(N, items as usize, || z.next(&mut rng), 10);
        // Items 0 and 1 are exact by construction: u·zetan < 1, and < 1 + 2^-θ.
        assert!(
            within(counts[0], 1.0 / zetan, N, 5.0),
            "θ={theta} {counts:?}"
        );
        assert!(
            within(counts[1], 0.5f64.powf(theta) / zetan, N, 5.0),
            "θ={theta} {}",
            counts[1]
        );
        assert!((gray_cdf(2, items, theta) - zeta(2, theta) / zetan).abs() < 1e-12);
        // Chi-square over the two top items and decades of ranks against the closed form;
        // 4 degrees of freedom, 18.47 is the 0.999 quantile.
        let cells = [(0usize, 1usize), (1, 2), (2, 10), (10, 100), (100, 1000)];
        let mut chi2 = 0.0;
        for (lo, hi) in cells {
            let observed: u64 = counts[lo..hi].iter().sum();
            let p = match lo {
                0 => 1.0 / zetan,
                1 => 0.5f64.powf(theta) / zetan,
                _ => gray_cdf(hi, items, theta) - gray_cdf(lo, items, theta),
            };
            let expected = p * N as f64;
            chi2 += (observed as f64 - expected).powi(2) / expected;
            // Against the ideal Zipf, (i+1)^-θ / zetan, Gray's formula is an approximation,
            // within 10% per decade of ranks (8.6% at ranks 2..10 with θ = 0.99).
            let ideal: f64 = (lo..hi).map(|i| ((i + 1) as f64).powf(-theta)).sum::<f64>() / zetan;
            let relative = (observed as f64 / N as f64 - ideal).abs() / ideal;
            assert!(relative < 0.10, "θ={theta} ranks {lo}..{hi}: {relative}");
        }
        assert!(chi2 < 18.47, "θ={theta}: chi-square {chi2}");
        // Popularity decreases with rank.
        assert!(counts[0] > counts[1] && counts[1] > counts[5] && counts[5] > counts[500]);
    }
}

#[test]
fn zipfian_growing_item_count_extends_zeta_and_keeps_eta() {
    let mut rng = Rng::new(1);
    let mut z = Zipfian::new(0, 999, 0.99);
    let v = z.next_long(2000, &mut rng);
    assert!((0..2000).contains(&v));
    assert!((z.zetan() - zeta(2000, 0.99)).abs() < 1e-10);
    // η stays computed with the construction-time count (YCSB's quirk): replay the formula with
    // items = 1000 in η and zeta(2000) and the count 2000 elsewhere.
    let theta: f64 = 0.99;
    let zetan = zeta(2000, theta);
    let eta = (1.0 - (2.0f64 / 1000.0).powf(1.0 - theta)) / (1.0 - zeta(2, theta) / zetan);
    let mut draws = Rng::new(9);
    let mut replay = draws.clone();
    for _ in 0..10_000 {
        let u = replay.next_f64();
        let expected = if u * zetan < 1.0 {
            0
        } else if u * zetan < 1.0 + 0.5f64.powf(theta) {
            1
        } else {
            (2000.0 * (eta * u - eta + 1.0).powf(1.0 / (1.0 - theta))) as i64
        };
        assert_eq!(z.next_long(2000, &mut draws), expected);
    }
}

#[test]
fn scrambled_zipfian_spreads_the_zipf_ranks_by_fnvhash() {
    const N: usize = 1_000_000;
    let (min, max) = (0, 999);
    let mut s = ScrambledZipfian::new(min, max, 0.99);
    let mut rng = Rng::new(7);
    let counts = histogram(N, 1000, || s.next(&mut rng), min);
    // The top item is fnvhash64(0) mod 1000 = 211 (hand-computed from the value above), then
    // fnvhash64(1) mod 1000 = 620 and fnvhash64(2) mod 1000 = 393.
    assert_eq!(s.item_of_rank(0), 211);
    assert_eq!(s.item_of_rank(1), 620);
    assert_eq!(s.item_of_rank(2), 393);
    let mut order: Vec<usize> = (0..1000).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
    assert_eq!(&order[..2], &[211, 620], "{:?}", &order[..5]);
    // P(rank 0) = 1/ZETAN, P(rank 1) = 2^-0.99/ZETAN; the other ~10^10 ranks add about
    // (1 - their share) / 1000 to every item, hash collisions being uniform.
    let spread = 1.0 / 1000.0;
    let p0 = 1.0 / SCRAMBLED_ZETAN;
    let p1 = 0.5f64.powf(0.99) / SCRAMBLED_ZETAN;
    let rest = 1.0 - p0 - p1;
    assert!(
        within(counts[211], p0 + rest * spread, N, 6.0),
        "{}",
        counts[211]
    );
    assert!(
        within(counts[620], p1 + rest * spread, N, 6.0),
        "{}",
        counts[620]
    );
    // Every item is drawn: the hashed tail covers the range.
    assert!(counts.iter().all(|&c| c > 0));
}

#[test]
fn skewed_latest_prefers_the_newest_records() {
    const N: usize = 200_000;
    let counter = AcknowledgedCounter::new(1000);
    let mut latest = SkewedLatest::new(counter.last(), 0.99);
    let mut rng = Rng::new(3);
    let last = counter.last();
    assert_eq!(last, 999);
    let counts = histogram(N, 1000, || latest.next(last, &mut rng), 0);
    // max - zipf: the newest (999) is zipfian rank 0, whose probability is 1/zeta(999).
    let p = 1.0 / zeta(999, 0.99);
    assert!(within(counts[999], p, N, 5.0), "{}", counts[999]);
    assert_eq!(
        counts[0], 0,
        "key 0 is never drawn (max - zipf lies in 1..=max)"
    );
    assert!(counts[999] > counts[998] && counts[998] > counts[990]);
    // New inserts acknowledged: the newest moves.
    let k = counter.next();
    counter.acknowledge(k);
    assert_eq!(counter.last(), 1000);
    let v: Vec<i64> = (0..1000)
        .map(|_| latest.next(counter.last(), &mut rng))
        .collect();
    assert!(v.contains(&1000) && v.iter().all(|&x| (1..=1000).contains(&x)));
}

#[test]
fn uniform_and_discrete_frequencies() {
    const N: usize = 400_000;
    let mut rng = Rng::new(11);
    let u = Uniform::new(5, 14);
    let counts = histogram(N, 10, || u.next(&mut rng), 5);
    // Chi-square with 9 degrees of freedom: 27.9 is the 0.999 quantile.
    let expected = N as f64 / 10.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    assert!(chi2 < 27.9, "{chi2} {counts:?}");

    // Weights are normalised (they need not sum to 1), zero weights never come up.
    let d = Discrete::new([(0.95, 'r'), (0.0, 'x'), (0.05, 'u')]);
    let mut r = 0u64;
    for _ in 0..N {
        match d.next(&mut rng) {
            'r' => r += 1,
            'u' => {}
            other => panic!("drew {other}"),
        }
    }
    assert!(within(r, 0.95, N, 5.0), "{r}");
    let d = Discrete::new([(3.0, 'a'), (1.0, 'b')]);
    let a = (0..N).filter(|_| d.next(&mut rng) == 'a').count() as u64;
    assert!(within(a, 0.75, N, 5.0), "{a}");
}
