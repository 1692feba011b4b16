//! YCSB's number generators, as `../shared/benchmarks.md` Part B §1 specifies them (after YCSB's
//! `core/src/main/java/site/ycsb/generator/*` and `Utils.java`), so that key popularity, key names
//! and operation mixes match the original tool's.
//!
//! Every generator draws from an explicit [`Rng`], so a run is reproducible from its seed; each
//! benchmark thread owns its generators (YCSB shares them behind `synchronized`: the numbers
//! drawn follow the same distributions either way).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The zipfian constant of YCSB's `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// The item count of the zipfian generator inside [`ScrambledZipfian`]: ranks `0..=ITEM_COUNT`.
pub const SCRAMBLED_ITEM_COUNT: i64 = 10_000_000_000;

/// `zeta(10^10, 0.99)` as YCSB precomputes it (`ScrambledZipfianGenerator.ZETAN`), so the
/// 10^10-term sum is never computed for the default constant.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// Above this many terms, [`zeta`] uses the Euler–Maclaurin formula instead of summing every term.
pub const EXACT_ZETA_TERMS: i64 = 10_000_000;

pub use cads_apps::ycsb::{fnvhash64, key_name};
pub use cads_apps::Rng;

/// `zeta(n, θ) = Σ_{i=1..n} i^-θ`: summed term by term up to [`EXACT_ZETA_TERMS`], beyond that
/// the first 10^6 terms summed and the rest from the Euler–Maclaurin formula (YCSB sums every
/// term, which for 10^10 items takes minutes; the two agree to about 1e-12 relative, see the
/// tests against [`SCRAMBLED_ZETAN`]).
pub fn zeta(n: i64, theta: f64) -> f64 {
    if n <= EXACT_ZETA_TERMS {
        return zeta_from(0, n, theta, 0.0);
    }
    let m = 1_000_000_i64;
    let head = zeta_from(0, m - 1, theta, 0.0);
    let (mf, nf) = (m as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let f1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let f3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    let integral = if (theta - 1.0).abs() < 1e-12 {
        (nf / mf).ln()
    } else {
        (nf.powf(1.0 - theta) - mf.powf(1.0 - theta)) / (1.0 - theta)
    };
    head + integral + (f(mf) + f(nf)) / 2.0 + (f1(nf) - f1(mf)) / 12.0 - (f3(nf) - f3(mf)) / 720.0
}

/// YCSB's `zetastatic(st, n, θ, initialsum)`: `initialsum + Σ_{i=st..n-1} (i+1)^-θ`, the
/// incremental form used when the item count grows.
pub fn zeta_from(start: i64, n: i64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in start..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly Generating Billion-Record Synthetic
/// Databases", SIGMOD'94): item `base + i` has popularity about `(i+1)^-θ / zeta(n, θ)`, so
/// `base` is the most popular.
#[derive(Clone, Debug)]
pub struct Zipfian {
    /// Items at construction (`items`); η keeps using it when the count grows (YCSB's quirk).
    items: i64,
    base: i64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// The item count `zetan` was computed for (`countforzeta`).
    count_for_zeta: i64,
}

impl Zipfian {
    /// Items `min..=max` with zipfian constant `theta` (0 < θ < 1), computing `zeta(n, θ)`.
    pub fn new(min: i64, max: i64, theta: f64) -> Zipfian {
        let items = max - min + 1;
        Zipfian::with_zetan(min, max, theta, zeta(items, theta))
    }

    /// Items `min..=max` with a precomputed `zeta(max - min + 1, θ)`.
    pub fn with_zetan(min: i64, max: i64, theta: f64, zetan: f64) -> Zipfian {
        assert!(max >= min, "a zipfian needs at least one item");
        assert!(
            theta > 0.0 && theta < 1.0,
            "the zipfian constant must lie in (0, 1)"
        );
        let items = max - min + 1;
        let zeta2theta = zeta(2, theta);
        Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: eta(items, theta, zeta2theta, zetan),
            count_for_zeta: items,
        }
    }

    /// YCSB's `ZipfianGenerator(items)`: items `0..items` with the default constant.
    pub fn items(items: i64) -> Zipfian {
        Zipfian::new(0, items - 1, ZIPFIAN_CONSTANT)
    }

    /// `zeta(n, θ)` for the current item count.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The zipfian constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// A value for the item count given at construction.
    pub fn next(&mut self, rng: &mut Rng) -> i64 {
        self.next_long(self.items, rng)
    }

    /// YCSB's `nextLong(itemcount)`: a value among `itemcount` items. A count above the one
    /// `zetan` is for extends `zetan` term by term; η is then recomputed with the item count
    /// from construction, not the new one (YCSB's quirk, kept so that popularity matches). A
    /// smaller count is ignored, as YCSB does unless `allowitemcountdecrease` is set.
    pub fn next_long(&mut self, itemcount: i64, rng: &mut Rng) -> i64 {
        if itemcount > self.count_for_zeta {
            self.zetan = zeta_from(self.count_for_zeta, itemcount, self.theta, self.zetan);
            self.count_for_zeta = itemcount;
            self.eta = eta(self.items, self.theta, self.zeta2theta, self.zetan);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5_f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (itemcount as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as i64
    }
}

fn eta(items: i64, theta: f64, zeta2theta: f64, zetan: f64) -> f64 {
    (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan)
}

/// YCSB's `ScrambledZipfianGenerator`: a zipfian over the ranks `0..=10^10` hashed onto
/// `min..=max` with [`fnvhash64`], so popular items are spread over the key range instead of
/// clustered at its start.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: i64,
    itemcount: i64,
    inner: Zipfian,
}

impl ScrambledZipfian {
    /// Items `min..=max` (inclusive, as YCSB's `CoreWorkload` passes them) with constant `theta`.
    /// With θ = 0.99 the inner zipfian uses the precomputed [`SCRAMBLED_ZETAN`]; with another
    /// constant its zeta is computed (by [`zeta`]'s Euler–Maclaurin tail rather than YCSB's
    /// 10^10-term sum).
    pub fn new(min: i64, max: i64, theta: f64) -> ScrambledZipfian {
        let zetan = if theta == ZIPFIAN_CONSTANT {
            SCRAMBLED_ZETAN
        } else {
            zeta(SCRAMBLED_ITEM_COUNT + 1, theta)
        };
        ScrambledZipfian {
            min,
            itemcount: max - min + 1,
            inner: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, theta, zetan),
        }
    }

    /// `min + fnvhash64(z) mod itemcount` for a zipfian rank `z`.
    pub fn next(&mut self, rng: &mut Rng) -> i64 {
        let z = self.inner.next(rng);
        self.min + fnvhash64(z) % self.itemcount
    }

    /// The item a zipfian rank maps to (rank 0 is the most popular).
    pub fn item_of_rank(&self, rank: i64) -> i64 {
        self.min + fnvhash64(rank) % self.itemcount
    }
}

/// YCSB's `UniformLongGenerator`: uniform over `min..=max`.
#[derive(Clone, Copy, Debug)]
pub struct Uniform {
    min: i64,
    max: i64,
}

impl Uniform {
    /// Uniform over `min..=max`.
    pub fn new(min: i64, max: i64) -> Uniform {
        assert!(max >= min, "an empty uniform range");
        Uniform { min, max }
    }

    /// A value.
    pub fn next(&self, rng: &mut Rng) -> i64 {
        self.min + rng.below((self.max - self.min + 1) as u64) as i64
    }
}

/// YCSB's `AcknowledgedCounterGenerator`: hands out consecutive numbers (the run phase's insert
/// key numbers) and tracks the highest number below which every number was acknowledged, so that
/// key choosers only pick records whose insert finished.
///
/// The counters of several application processes (`--appnodes`) share the numbers above the
/// loaded ones: each hands out every `stride`-th number from its own start (consecutive starts,
/// their count as the stride), so that no number is handed out twice; each knows only its own
/// numbers to be acknowledged.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    /// Numbers below it exist from the start (loaded records).
    base: i64,
    start: i64,
    stride: i64,
    /// The next number's position in the sequence.
    next: AtomicU64,
    /// (limit, acknowledged positions above it): positions `0..=limit` are acknowledged.
    state: Mutex<(i64, BTreeSet<i64>)>,
}

impl AcknowledgedCounter {
    /// A counter whose first number is `start`; [`last`](Self::last) is `start - 1` until `start`
    /// is acknowledged.
    pub fn new(start: i64) -> AcknowledgedCounter {
        AcknowledgedCounter::strided(start, 0, 1)
    }

    /// The counter of the `offset`-th of `stride` processes sharing the numbers from `base`: it
    /// hands out `base + offset`, `base + offset + stride`, ...
    pub fn strided(base: i64, offset: i64, stride: i64) -> AcknowledgedCounter {
        assert!(
            stride > 0 && (0..stride).contains(&offset),
            "an offset below the stride"
        );
        AcknowledgedCounter {
            base,
            start: base + offset,
            stride,
            next: AtomicU64::new(0),
            state: Mutex::new((-1, BTreeSet::new())),
        }
    }

    /// The next number.
    pub fn next(&self) -> i64 {
        self.start + self.stride * self.next.fetch_add(1, Ordering::Relaxed) as i64
    }

    /// Marks `value` (a number it handed out) done (whether its insert succeeded or not, as YCSB
    /// does).
    pub fn acknowledge(&self, value: i64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (limit, done) = &mut *state;
        done.insert((value - self.start) / self.stride);
        while done.remove(&(*limit + 1)) {
            *limit += 1;
        }
    }

    /// The highest number `n` of its sequence such that every number of it up to `n` was
    /// acknowledged (YCSB's `lastValue()`); `start - stride` before any was.
    pub fn last(&self) -> i64 {
        let limit = self.state.lock().unwrap_or_else(|p| p.into_inner()).0;
        self.start + self.stride * limit
    }

    /// Whether a record of key number `keynum` exists for this counter: a loaded one (below the
    /// base), or one of its own numbers up to [`last`](Self::last).
    pub fn holds(&self, keynum: i64) -> bool {
        let own = keynum >= self.start && (keynum - self.start) % self.stride == 0;
        keynum < self.base || (own && keynum <= self.last())
    }
}

/// YCSB's `SkewedLatestGenerator`: `max - Zipfian.nextLong(max)` where `max` is the highest
/// acknowledged insert, so the newest records are the most popular.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipfian: Zipfian,
}

impl SkewedLatest {
    /// Over a counter whose [`last`](AcknowledgedCounter::last) is `last` now (the zipfian is
    /// built for that many items, as YCSB's is).
    pub fn new(last: i64, theta: f64) -> SkewedLatest {
        SkewedLatest {
            zipfian: Zipfian::new(0, last.max(1) - 1, theta),
        }
    }

    /// A value for the current highest acknowledged number `last`.
    pub fn next(&mut self, last: i64, rng: &mut Rng) -> i64 {
        last - self.zipfian.next_long(last, rng)
    }
}

/// YCSB's `DiscreteGenerator`: picks one of several values with given weights, normalised, from
/// one uniform double per pick.
#[derive(Clone, Debug)]
pub struct Discrete<T> {
    values: Vec<(f64, T)>,
}

impl<T: Clone> Discrete<T> {
    /// The values with positive weight (zero weights are dropped).
    pub fn new(values: impl IntoIterator<Item = (f64, T)>) -> Discrete<T> {
        let values: Vec<(f64, T)> = values.into_iter().filter(|(w, _)| *w > 0.0).collect();
        assert!(!values.is_empty(), "a discrete generator needs a value");
        Discrete { values }
    }

    /// A value: walks the normalised weights, subtracting each from one uniform draw.
    pub fn next(&self, rng: &mut Rng) -> T {
        let sum: f64 = self.values.iter().map(|(w, _)| w).sum();
        let mut val = rng.next_f64();
        for (weight, value) in &self.values {
            let pw = weight / sum;
            if val < pw {
                return value.clone();
            }
            val -= pw;
        }
        // Rounding left `val` a hair above the last weight.
        self.values.last().expect("not empty").1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible_and_uniform_enough() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[a.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        assert!((0..1000).all(|_| (0.0..1.0).contains(&a.next_f64())));
    }

    #[test]
    fn acknowledged_counter_limit_waits_for_gaps() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last(), 9);
        let (a, b, d) = (c.next(), c.next(), c.next());
        assert_eq!((a, b, d), (10, 11, 12));
        c.acknowledge(11);
        assert_eq!(c.last(), 9);
        c.acknowledge(10);
        assert_eq!(c.last(), 11);
        c.acknowledge(12);
        assert_eq!(c.last(), 12);
    }

    #[test]
    fn strided_counters_of_appnodes_never_share_a_number() {
        // Two AppNodes over 100 loaded records: one inserts 100, 102, ..., the other 101, 103, ...
        let (a, b) = (
            AcknowledgedCounter::strided(100, 0, 2),
            AcknowledgedCounter::strided(100, 1, 2),
        );
        let ours: Vec<i64> = (0..3).map(|_| a.next()).collect();
        let theirs: Vec<i64> = (0..3).map(|_| b.next()).collect();
        assert_eq!((ours, theirs), (vec![100, 102, 104], vec![101, 103, 105]));
        assert_eq!(a.last(), 98);
        a.acknowledge(102);
        assert_eq!(a.last(), 98, "100 is not acknowledged yet");
        a.acknowledge(100);
        assert_eq!(a.last(), 102);
        // Loaded records and its own acknowledged inserts exist; the other AppNode's inserts
        // (which it cannot see acknowledged) and its own pending ones do not, for it.
        assert!(a.holds(99) && a.holds(100) && a.holds(102));
        assert!(!a.holds(101) && !a.holds(103) && !a.holds(104));
        // The second AppNode sees the first one's numbers as not its own, below its start too.
        assert!(b.holds(99) && !b.holds(100) && !b.holds(101));
        // With a stride of 1, holding is YCSB's "at most the last acknowledged".
        let c = AcknowledgedCounter::new(10);
        let _ = c.next();
        assert!(c.holds(9) && !c.holds(10));
    }
}
