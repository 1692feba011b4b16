//! Progress: one report type for every benchmark and phase, sent about once a second during long
//! phases and at their ends.

use std::fmt;
use std::time::{Duration, Instant};

use cads::Policy;

/// A phase of a policy's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Loading the data store (`done` of `total` records, members or rows).
    Load,
    /// Reading the data through the cache (`done` of `total`).
    Warm,
    /// The measured phase (`done` operations, actions or transactions).
    Run,
    /// Write-back: applying what is still buffered.
    Drain,
    /// Validating what was read and checking the data store (and the cache) afterwards.
    Verify,
}

impl Phase {
    /// Its name in progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Warm => "warm",
            Phase::Run => "run",
            Phase::Drain => "drain",
            Phase::Verify => "verify",
        }
    }
}

/// A progress report.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The benchmark (`ycsb`, `bg`, `tpcc`).
    pub benchmark: &'static str,
    /// The workload or mix.
    pub workload: String,
    /// The policy running, as records name it ([`Benchmark::policy_name`]).
    ///
    /// [`Benchmark::policy_name`]: crate::harness::Benchmark::policy_name
    pub policy: &'static str,
    /// Which run of it (0-based, `--repeat`).
    pub run: usize,
    /// Threads issuing work (0 outside measured runs).
    pub threads: usize,
    /// The phase.
    pub phase: Phase,
    /// Units done so far (records, members, rows, entries, operations, reads verified).
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// Time since the phase began.
    pub elapsed: Duration,
    /// How long the phase is meant to last, for a run of fixed duration.
    pub expected: Option<Duration>,
    /// Details: current rate, pinned memory, ... (`"done"` at a phase's end).
    pub note: String,
}

impl Progress {
    /// `benchmark workload policy #run [T=threads]`: which run this is.
    pub fn label(&self) -> String {
        let workload = crate::report::short_workload(self.benchmark, &self.workload);
        let mut label = format!(
            "{} {workload} {} #{}",
            self.benchmark, self.policy, self.run
        );
        if self.threads > 0 {
            label.push_str(&format!(" T={}", self.threads));
        }
        label
    }
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {} {:>6.1}s {}",
            self.label(),
            self.phase.name(),
            self.elapsed.as_secs_f64(),
            self.done
        )?;
        if let Some(total) = self.total {
            write!(f, "/{total}")?;
        }
        if !self.note.is_empty() {
            write!(f, " {}", self.note)?;
        }
        Ok(())
    }
}

/// A progress callback that prints each report as a line on standard error.
pub fn print_progress(p: Progress) {
    eprintln!("{p}");
}

/// What a benchmark reports progress through: the run it belongs to, and the callback.
#[derive(Clone)]
pub struct Reporter<'a> {
    pub(crate) benchmark: &'static str,
    pub(crate) workload: String,
    pub(crate) policy: Policy,
    /// Its name in records.
    pub(crate) policy_name: &'static str,
    pub(crate) run: usize,
    /// Threads of the measured run being reported (0 outside one).
    pub(crate) threads: usize,
    pub(crate) progress: &'a (dyn Fn(Progress) + Sync),
}

impl<'a> Reporter<'a> {
    /// The policy of the run.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Which run of the policy this is (0-based, `--repeat`).
    pub fn run(&self) -> usize {
        self.run
    }

    /// The reporter of a measured run on `threads` threads.
    pub(crate) fn with_threads(&self, threads: usize) -> Reporter<'a> {
        Reporter {
            threads,
            ..self.clone()
        }
    }

    /// Reports `done` (of `total`) units of `phase`, begun at `started`.
    pub fn report(
        &self,
        phase: Phase,
        done: u64,
        total: Option<u64>,
        started: Instant,
        note: impl Into<String>,
    ) {
        self.send(phase, done, total, started, None, note.into());
    }

    /// Reports the run phase, meant to last `expected`.
    pub(crate) fn report_run(
        &self,
        done: u64,
        total: Option<u64>,
        started: Instant,
        expected: Option<Duration>,
        note: String,
    ) {
        self.send(Phase::Run, done, total, started, expected, note);
    }

    fn send(
        &self,
        phase: Phase,
        done: u64,
        total: Option<u64>,
        started: Instant,
        expected: Option<Duration>,
        note: String,
    ) {
        (self.progress)(Progress {
            benchmark: self.benchmark,
            workload: self.workload.clone(),
            policy: self.policy_name,
            run: self.run,
            threads: self.threads,
            phase,
            done,
            total,
            elapsed: started.elapsed(),
            expected,
            note,
        });
    }
}
