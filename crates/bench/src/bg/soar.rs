//! BG's search for the SoAR (benchmarks.md Part B §2, after BGCoord): runs at thread counts
//! doubled from a start until one fails the SLA, then bisection between the last count that met
//! it and the first that did not.

use anyhow::Result;

/// The runs of a search.
#[derive(Debug)]
pub struct Search<R> {
    /// Every run, in order, with its thread count.
    pub runs: Vec<(usize, R)>,
    /// The index in `runs` of the run at the highest thread count that met the SLA.
    pub best: Option<usize>,
    /// Whether some thread count failed the SLA (else the search stopped at its maximum).
    pub bounded: bool,
}

/// How close the bisection gets: it stops when the failing count exceeds the passing one by at
/// most an eighth of it (or by one thread). Throughput on a saturated machine barely changes
/// over such a step, and each probe costs a full run.
fn resolution(passing: usize) -> usize {
    (passing / 8).max(1)
}

/// Runs `probe` at thread counts `start`, 2·`start`, ... (capped at `max`) until `meets` says a
/// run failed the SLA, then bisects. A failing `start` is bisected towards one thread.
pub fn search<R>(
    start: usize,
    max: usize,
    mut probe: impl FnMut(usize) -> Result<R>,
    meets: impl Fn(&R) -> bool,
) -> Result<Search<R>> {
    let mut runs = Vec::new();
    let mut run = |threads: usize, runs: &mut Vec<(usize, R)>| -> Result<bool> {
        let outcome = probe(threads)?;
        let ok = meets(&outcome);
        runs.push((threads, outcome));
        Ok(ok)
    };
    let mut passing = 0;
    let mut failing = None;
    let mut threads = start.max(1);
    loop {
        if !run(threads, &mut runs)? {
            failing = Some(threads);
            break;
        }
        passing = threads;
        if threads >= max {
            break;
        }
        threads = (threads * 2).min(max);
    }
    if let Some(mut fail) = failing {
        while fail - passing > resolution(passing) {
            let mid = passing + (fail - passing) / 2;
            if run(mid, &mut runs)? {
                passing = mid;
            } else {
                fail = mid;
            }
        }
    }
    let best = runs
        .iter()
        .position(|(threads, r)| *threads == passing && meets(r));
    Ok(Search {
        runs,
        best,
        bounded: failing.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads_run(s: &Search<bool>) -> Vec<usize> {
        s.runs.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn doubles_then_bisects_to_within_an_eighth() {
        let s = search(1, 1024, |t| Ok(t <= 37), |ok| *ok).unwrap();
        assert_eq!(threads_run(&s), [1, 2, 4, 8, 16, 32, 64, 48, 40, 36]);
        assert_eq!(s.runs[s.best.unwrap()].0, 36);
        assert!(s.bounded);
    }

    #[test]
    fn stops_at_the_maximum_when_everything_passes() {
        let s = search(1, 10, |_| Ok(true), |ok| *ok).unwrap();
        assert_eq!(threads_run(&s), [1, 2, 4, 8, 10]);
        assert_eq!(s.runs[s.best.unwrap()].0, 10);
        assert!(!s.bounded);
    }

    #[test]
    fn a_failing_start_is_bisected_down() {
        let s = search(8, 64, |t| Ok(t <= 2), |ok| *ok).unwrap();
        assert_eq!(threads_run(&s), [8, 4, 2, 3]);
        assert_eq!(s.runs[s.best.unwrap()].0, 2);
        let none = search(1, 64, |_| Ok(false), |ok| *ok).unwrap();
        assert_eq!(threads_run(&none), [1]);
        assert!(none.best.is_none());
    }

    #[test]
    fn probe_errors_end_the_search() {
        let probe = |t: usize| {
            anyhow::ensure!(t < 4, "the data store went away");
            Ok(true)
        };
        assert!(search(1, 64, probe, |ok| *ok).is_err());
    }
}
