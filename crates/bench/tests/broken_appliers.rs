//! Write-back appliers broken on purpose (cads' `APPLY_BROKEN` failpoint): one that drops a
//! buffered write, one that writes every batch again after each later one (an older write landing
//! after newer ones), and one that applies two writes out of order, each once (it holds one back
//! and applies it when the drain finds nothing else). The cache goes on as if each applied
//! correctly, so nothing a read sees betrays them during the run; YCSB's and BG's checks of the
//! data store after the drain must find the acknowledged writes they lost or undid.
//!
//! Failpoints are process-wide: every test here holds the failpoint scenario (see
//! `cads_testkit::failpoints`), and no test of another file sees them.

mod support;
mod tpcc_support;

use cads::Policy;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads_bench::bg::{BgOptions, LayoutKind};
use cads_bench::harness::Phase;
use cads_bench::harness::{CommonOptions, Validated};
use cads_bench::ycsb::{BenchmarkOptions, Progress, YcsbOptions};
use cads_bench::CmiSettings;
use cads_testkit::failpoints::{Scenario, APPLY_BROKEN, APPLY_LEASED, UNREPLICATED};
use support::{InProcess, Killable};

fn quiet(_: Progress) {}

/// The appliers' ways of breaking.
const BROKEN: [&str; 3] = ["drop", "twice", "reorder"];

/// YCSB A under write-back on a handful of records, so that every batch a worker applies holds
/// most of them and consecutive batches share documents. Long enough that the worker applies
/// several batches during the run (it naps at most 50 ms when idle): with 600 operations a run
/// in CI ended before the worker applied anything, the drain applied everything in one batch,
/// which `twice` cannot harm, and the check rightly found nothing lost.
/// Workers that pause 10 ms between passes, not the default's 250: these short runs need many
/// applies while writes go on.
fn frequent_applies() -> CmiSettings {
    CmiSettings {
        worker_pause: Some(Duration::from_millis(10)),
        ..CmiSettings::default()
    }
}

fn few_hot_records() -> YcsbOptions {
    YcsbOptions {
        workload: "A".into(),
        records: 5,
        operations: Some(6_000),
        duration: None,
        distribution: Some(cads_bench::ycsb::Distribution::Uniform),
        common: CommonOptions {
            policies: vec![Policy::WriteBack],
            threads: 2,
            workers: 1,
            cmi: frequent_applies(),
            ..YcsbOptions::default().common
        },
        ..YcsbOptions::default()
    }
}

/// Runs `run` (a run's stale reads and validation) with each broken applier, expecting the
/// final check to find lost writes, then with a correct one, expecting none. What a broken
/// applier undoes shows only if a later write of the same document reached the data store
/// before it (the write held back by `reorder` is the first of the first batch): a run of fixed
/// length on a loaded machine may make too few writes for that, so each broken applier must be
/// caught in one of three runs, and the correct one in none.
fn each_broken_applier_loses_writes(run: impl Fn() -> (u64, Validated)) {
    let scenario = Scenario::setup();
    for broken in BROKEN {
        let mut found = Vec::new();
        for _ in 0..3 {
            scenario.set(APPLY_BROKEN, &format!("return({broken})"));
            let (stale, validated) = run();
            scenario.clear(APPLY_BROKEN);
            if validated.lost_writes > 0 {
                assert!(!validated.lost_examples.is_empty(), "{broken}");
                break;
            }
            found.push(format!(
                "{} reads validated, {stale} stale",
                validated.reads
            ));
        }
        assert!(
            found.len() < 3,
            "{broken}: three runs, and the check found no lost write ({found:?})"
        );
    }
    let (stale, validated) = run();
    support::assert_nothing_stale_or_lost("a correct applier", stale, &validated);
}

#[test]
fn ycsb_finds_the_writes_every_broken_applier_loses() {
    each_broken_applier_loses_writes(|| {
        let r = few_hot_records().run(&InProcess, &quiet).unwrap().remove(0);
        (r.stale_reads, r.detail.validated)
    });
}

/// BG's write actions under write-back on a small social graph, so that consecutive batches share
/// members' documents.
fn small_graph() -> BgOptions {
    BgOptions {
        common: CommonOptions {
            policies: vec![Policy::WriteBack],
            threads: 2,
            workers: 1,
            cmi: frequent_applies(),
            ..BgOptions::default().common
        },
        layout: LayoutKind::Documents,
        members: 20,
        friends: 4,
        pending: 2,
        duration: Duration::from_millis(500),
        ..BgOptions::default()
    }
}

#[test]
fn bg_counts_catch_every_broken_applier() {
    each_broken_applier_loses_writes(|| {
        let r = small_graph().run(&InProcess, &quiet).unwrap().remove(0);
        (r.stale_reads, r.detail.validated)
    });
}

/// Installed on the appliers' first step: kills CMI 0 (and starts it again, empty) at the fifth
/// apply after the warm-up, when applied writes and newer ones are both behind and ahead, and
/// acknowledged writes are certainly pending (the applier holds leases on them).
struct KillMidRun {
    running: Arc<AtomicBool>,
    killed: Arc<AtomicBool>,
}

impl KillMidRun {
    const AT_APPLY: u64 = 5;

    fn install(scenario: &Scenario, cmis: &Killable) -> KillMidRun {
        let running = Arc::new(AtomicBool::new(false));
        let killed = Arc::new(AtomicBool::new(false));
        let applies = AtomicU64::new(0);
        let (now, done, cmis) = (running.clone(), killed.clone(), cmis.clone());
        scenario.on(APPLY_LEASED, move || {
            if now.load(Ordering::SeqCst)
                && applies.fetch_add(1, Ordering::SeqCst) + 1 == Self::AT_APPLY
            {
                cmis.kill_and_restart(0);
                done.store(true, Ordering::SeqCst);
            }
        });
        KillMidRun { running, killed }
    }

    /// The run's progress callback. The warm-up's last report (a short run may report nothing
    /// of its own before it ends) or the run's first starts the count.
    fn progress(&self, p: Progress) {
        let warm = p.phase == Phase::Warm && p.done > 0 && p.total.is_none_or(|t| p.done >= t);
        if warm || p.phase == Phase::Run {
            self.running.store(true, Ordering::SeqCst);
        }
    }
}

/// Runs `run` (given the launcher and a progress callback) on two CMIs, CMI 0 killed during the
/// run, first with writers that acknowledge before replicating (`UNREPLICATED`: each buffered
/// write only on its lowest-numbered replica, CMI 0 with two CMIs), expecting `found` to report
/// what the kill lost, then with writers that write every replica, expecting it to report
/// nothing: the copies on CMI 1 are applied. `found` describes what the checks found, if
/// anything. A kill loses the writes pending at that moment, which later writes may overwrite or
/// undo before the end (a BG invitation rejected afterwards, say), and which TPC-C's checks see
/// only through their traces on CMI 1 (a lost session takes all its rows with it, and the
/// sessions after the kill read the data store's state from the restarted CMI 0): the broken
/// writer must be caught in one of five runs, and the correct one in none.
fn each_writer_with_cmi_0_killed<T>(
    run: impl Fn(&Killable, &(dyn Fn(Progress) + Sync)) -> T,
    found: impl Fn(T) -> Option<String>,
) {
    let scenario = Scenario::setup();
    let once = |unreplicated: bool| {
        let cmis = Killable::default();
        let kill = KillMidRun::install(&scenario, &cmis);
        if unreplicated {
            scenario.set(UNREPLICATED, "return");
        }
        let outcome = run(&cmis, &|p| kill.progress(p));
        scenario.clear(UNREPLICATED);
        scenario.clear(APPLY_LEASED);
        assert!(
            kill.killed.load(Ordering::SeqCst),
            "the run applied fewer than {} times",
            KillMidRun::AT_APPLY
        );
        found(outcome)
    };
    assert!(
        (0..5).any(|_| once(true).is_some()),
        "five runs with writers acknowledging before replicating, and the checks found nothing"
    );
    if let Some(what) = once(false) {
        panic!("every replica written, and the checks found {what}");
    }
}

/// What YCSB's and BG's checks found: stale reads or lost writes. (The writes lost with CMI 0
/// show as reads older than them, of values that were cached there too, or as a data store that
/// never got them.)
fn stale_or_lost((stale, validated): (u64, Validated)) -> Option<String> {
    (stale > 0 || validated.lost_writes > 0).then(|| {
        format!(
            "{stale} stale reads {:?}, {} lost writes {:?}",
            validated.stale_examples, validated.lost_writes, validated.lost_examples
        )
    })
}

#[test]
fn ycsb_finds_the_writes_a_writer_acknowledging_before_replicating_loses() {
    each_writer_with_cmi_0_killed(
        |cmis, progress| {
            // Enough records that a write lost with CMI 0 is seldom overwritten before the end.
            let opts = YcsbOptions {
                records: 5_000,
                ..few_hot_records()
            };
            let r = opts.run(cmis, progress).unwrap().remove(0);
            (r.stale_reads, r.detail.validated)
        },
        stale_or_lost,
    );
}

#[test]
fn bg_finds_the_writes_a_writer_acknowledging_before_replicating_loses() {
    each_writer_with_cmi_0_killed(
        |cmis, progress| {
            let r = small_graph().run(cmis, progress).unwrap().remove(0);
            (r.stale_reads, r.detail.validated)
        },
        stale_or_lost,
    );
}

/// TPC-C under write-back (Design 2, sessions of SQL statements): a session dropped, whose
/// updates ran twice, or held back behind later sessions of its queue, is caught either by the
/// appliers themselves, whose conditional statements (New-Order's `d_next_o_id` guard) then match
/// no row, which stops the queue and fails the drain, or by the checks after the run (the
/// consistency conditions, the cache against the data store).
#[test]
fn tpcc_checks_catch_every_broken_applier() {
    let scenario = Scenario::setup();
    for broken in BROKEN {
        let (url, _dir) = tpcc_support::sqlite_url(&format!("broken-{broken}"));
        let mut opts = tpcc_support::options(Some(url), "tpcc_");
        opts.common.policies = vec![Policy::WriteBack];
        opts.common.drain_timeout = Duration::from_secs(5);
        scenario.set(APPLY_BROKEN, &format!("return({broken})"));
        let outcome = opts.run(&InProcess, &quiet);
        scenario.clear(APPLY_BROKEN);
        match outcome {
            Err(e) => {
                let e = format!("{e:#}");
                assert!(
                    e.contains("does not hold what the session read"),
                    "{broken}: the run failed for another reason: {e}"
                );
            }
            Ok(records) => {
                let r = &records[0];
                assert!(
                    !r.detail.consistent || r.stale_reads > 0,
                    "{broken}: the checks found nothing: {:#?}",
                    r.detail.consistency
                );
            }
        }
    }
}

/// TPC-C under write-back with CMI 0 killed during the run: sessions acknowledged with their
/// session objects on CMI 0 only are lost with it, which the appliers' guards (a later New-Order
/// of the district finds the order id it counted on missing) or the checks after the run must
/// find; with every replica written, the run is consistent.
#[test]
fn tpcc_checks_catch_a_writer_acknowledging_before_replicating() {
    each_writer_with_cmi_0_killed(
        |cmis, progress| {
            let (url, dir) = tpcc_support::sqlite_url("unreplicated");
            let mut opts = tpcc_support::options(Some(url), "tpcc_");
            opts.common.policies = vec![Policy::WriteBack];
            opts.common.drain_timeout = Duration::from_secs(5);
            (opts.run(cmis, progress), dir)
        },
        |(outcome, _dir)| match outcome {
            Err(e) => {
                let e = format!("{e:#}");
                assert!(
                    e.contains("does not hold what the session read"),
                    "the run failed for another reason: {e}"
                );
                Some(e)
            }
            Ok(records) => {
                let r = &records[0];
                (!r.detail.consistent || r.stale_reads > 0)
                    .then(|| format!("{} stale, {:#?}", r.stale_reads, r.detail.consistency))
            }
        },
    );
}
