//! The instances' hit ratios as the coordinator sees them (INFO's `keyspace_hits` and
//! `keyspace_misses`), for working-set transfer (004 §3.2.2): the ratio an instance had before it
//! failed is the goal of its fragments' transfer when it is back, and the ratio it has since
//! says when the goal is reached.
//!
//! A ratio is that of a window of reads: from one observation of an instance's counters to the
//! first later one that has seen at least [`MIN_READS`] more reads. The ratio of a window that
//! closed is the instance's current one until the next window closes.

/// Reads a window needs before its ratio stands for the instance: a handful says little.
pub const MIN_READS: u64 = 100;

/// An instance's counters at one observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counts {
    hits: u64,
    misses: u64,
}

/// Per instance, the open window and the ratio of the last one closed.
#[derive(Debug)]
pub struct HitRatios {
    window_start: Vec<Option<Counts>>,
    last: Vec<Option<u16>>,
}

impl HitRatios {
    pub fn new(instances: usize) -> HitRatios {
        HitRatios {
            window_start: vec![None; instances],
            last: vec![None; instances],
        }
    }

    /// Instance `i`'s counters now. Counters below the window's start (the instance restarted
    /// and counts from zero again) start a new window.
    pub fn observe(&mut self, i: usize, hits: u64, misses: u64) {
        let now = Counts { hits, misses };
        let Some(start) = self.window_start[i] else {
            self.window_start[i] = Some(now);
            return;
        };
        if hits < start.hits || misses < start.misses {
            self.window_start[i] = Some(now);
            return;
        }
        let (h, m) = (hits - start.hits, misses - start.misses);
        if h + m >= MIN_READS {
            self.last[i] = Some((h * 1000 / (h + m)) as u16);
            self.window_start[i] = Some(now);
        }
    }

    /// Instance `i`'s hit ratio per mille: that of its last window, None before one closed.
    pub fn current(&self, i: usize) -> Option<u16> {
        self.last[i]
    }

    /// Instance `i` failed: returns its ratio from before, and forgets it, so that the ratio it
    /// has once back is measured from reads after its return only.
    pub fn take(&mut self, i: usize) -> Option<u16> {
        self.window_start[i] = None;
        self.last[i].take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_is_that_of_the_last_window_of_enough_reads() {
        let mut r = HitRatios::new(2);
        r.observe(0, 1_000, 1_000);
        assert_eq!(r.current(0), None, "one observation is no window");
        r.observe(0, 1_050, 1_010);
        assert_eq!(r.current(0), None, "60 reads are too few");
        r.observe(0, 1_090, 1_010);
        assert_eq!(r.current(0), Some(900), "90 hits in 100 reads");
        r.observe(0, 1_090, 1_110);
        assert_eq!(r.current(0), Some(0), "the next window replaces it");
        assert_eq!(r.current(1), None, "each instance has its own");
    }

    #[test]
    fn counters_that_went_back_start_a_new_window() {
        let mut r = HitRatios::new(1);
        r.observe(0, 5_000, 5_000);
        r.observe(0, 10, 0);
        assert_eq!(r.current(0), None, "a restart is no window");
        r.observe(0, 210, 0);
        assert_eq!(r.current(0), Some(1000));
    }

    #[test]
    fn a_failed_instance_gives_its_ratio_and_starts_over() {
        let mut r = HitRatios::new(1);
        r.observe(0, 0, 0);
        r.observe(0, 80, 20);
        assert_eq!(r.take(0), Some(800));
        assert_eq!(r.current(0), None);
        assert_eq!(r.take(0), None);
        r.observe(0, 80, 20);
        r.observe(0, 80, 120);
        assert_eq!(
            r.current(0),
            Some(0),
            "reads before the failure are not counted"
        );
    }
}
