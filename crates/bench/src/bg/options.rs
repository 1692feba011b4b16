//! The options of a BG benchmark, spelled as `cads bench bg` spells its flags, and the SLA.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use cads::Policy;
use cads_apps::bg::{GraphParams, LayoutKind};
use serde::Serialize;

use super::workload::{Mix, Popularity};
use crate::harness::CommonOptions;

/// BG's service level agreement (benchmarks.md Part B §2): `satisfied` of the actions finish
/// within `latency`, and at most `max_stale` of the reads are unpredictable. The papers use 95%,
/// 100 ms and 0.01%.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sla {
    /// The share of actions that must be fast enough (0.95).
    pub satisfied: f64,
    /// How fast (100 ms).
    #[serde(serialize_with = "millis")]
    pub latency: Duration,
    /// The largest share of reads that may be stale (0.0001).
    pub max_stale: f64,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Default for Sla {
    fn default() -> Self {
        Sla {
            satisfied: 0.95,
            latency: Duration::from_millis(100),
            max_stale: 0.0001,
        }
    }
}

impl Sla {
    /// Whether a run with these shares of fast actions and of stale reads meets the SLA.
    pub fn met_by(&self, satisfied: f64, stale: f64) -> bool {
        satisfied >= self.satisfied && stale <= self.max_stale
    }
}

/// What `cads bench bg` runs. [`BgOptions::default`] is BG's laptop-sized graph (10,000 members,
/// 10 friends each) on SQLite with two embedded CMIs, the 90%-read mix, every policy in turn,
/// 10 s on 8 threads, without the SoAR search.
#[derive(Clone, Debug)]
pub struct BgOptions {
    /// What every benchmark has: policies, store, cache, threads (BG's emulated socialites;
    /// with `soar`, ignored), workers, warm-up, repeats, seed (the threads' generators), ...
    pub common: CommonOptions,
    /// `--workload`: the mix, `90`, `99`, `99.9` (000 Table 3.5) or `10:1`, `100:1`, `1000:1`
    /// (001 Table 1).
    pub workload: String,
    /// `--layout`: `documents` (the document layer; every policy) or `sql` (tables with 001's
    /// key layouts; not write-back).
    pub layout: LayoutKind,
    /// `--duration`: how long a run lasts; with `soar`, each probe of the search.
    pub duration: Duration,
    /// `--members` (M, 10,000).
    pub members: u32,
    /// `--friends`: confirmed friends per member (φ, even; 10).
    pub friends: u32,
    /// `--pending`: pending invitations each member has received at load time (5).
    pub pending: u32,
    /// `--distribution`: how socialites and the members they act on are chosen (BG's `dzipfian`
    /// with mean 0.27).
    pub popularity: Popularity,
    /// `--soar`: find the SoAR: double the threads from `soar_start` until the SLA fails (or
    /// `max_threads` passes), then bisect.
    pub soar: bool,
    /// The SLA of the search (95% within 100 ms, at most 0.01% stale reads).
    pub sla: Sla,
    /// `--soar-start`: the first thread count of the search (1).
    pub soar_start: usize,
    /// `--max-threads`: where the search stops doubling (1024).
    pub max_threads: usize,
    /// `--broken`: write actions run on the data store alone, skipping the cache (no
    /// invalidation, no update): a deliberately wrong policy, to see the validator report stale
    /// reads.
    pub broken: bool,
}

impl Default for BgOptions {
    fn default() -> Self {
        BgOptions {
            common: CommonOptions {
                seed: 0x0B6_5EED,
                ..CommonOptions::default()
            },
            workload: "90".into(),
            layout: LayoutKind::Documents,
            duration: Duration::from_secs(10),
            members: 10_000,
            friends: 10,
            pending: 5,
            popularity: Popularity::BG,
            soar: false,
            sla: Sla::default(),
            soar_start: 1,
            max_threads: 1024,
            broken: false,
        }
    }
}

/// The most threads a run may use.
const THREAD_LIMIT: usize = 4096;

impl BgOptions {
    /// The graph to load.
    pub fn graph(&self) -> GraphParams {
        GraphParams {
            members: self.members,
            friends: self.friends,
            pending: self.pending,
        }
    }

    /// The mix.
    pub fn mix(&self) -> Result<Mix> {
        Mix::named(&self.workload)
    }

    /// Checks the options.
    pub fn check(&self) -> Result<()> {
        self.common.check(THREAD_LIMIT)?;
        if self.layout == LayoutKind::Sql && self.common.policies.contains(&Policy::WriteBack) {
            bail!(
                "--layout sql cannot run write-back: Design 1 buffers document writes, and the sql \
                 layout's writes are SQL statements (they would run as write-through); use \
                 --layout documents"
            );
        }
        if self.soar_start == 0
            || self.max_threads < self.soar_start
            || self.max_threads > THREAD_LIMIT
        {
            bail!("the SoAR search needs 1 <= --soar-start <= --max-threads <= {THREAD_LIMIT}");
        }
        if self.duration.is_zero() {
            bail!("--duration must be positive");
        }
        if self.soar && self.common.appnodes > 1 {
            // Each probe would start AppNodes whose models of the relationships know nothing of
            // the probes before it.
            bail!("--soar runs in one process: drop --appnodes");
        }
        if !(self.sla.satisfied > 0.0 && self.sla.satisfied <= 1.0)
            || self.sla.latency.is_zero()
            || !(0.0..1.0).contains(&self.sla.max_stale)
        {
            bail!("the SLA needs a share of actions in (0, 1], a positive latency and a stale share in [0, 1)");
        }
        self.graph().check().context("the social graph")?;
        self.mix().map(|_| ())
    }

    /// The threads of a single run, or the most a search may use: what the data store's
    /// connection pool is sized for.
    pub(crate) fn peak_threads(&self) -> usize {
        if self.soar {
            self.max_threads
        } else {
            self.common.threads
        }
    }
}

/// BG's part of a record's `config`.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigRecord {
    /// The mix as run.
    pub mix: Mix,
    /// `documents` or `sql`.
    pub layout: String,
    /// What the layout keeps where.
    pub layout_description: String,
    /// Members.
    pub members: u32,
    /// Confirmed friends per member at load time.
    pub friends: u32,
    /// Pending invitations per member at load time.
    pub pending: u32,
    /// How members are chosen.
    pub popularity: Popularity,
    /// Seconds of a run (of each probe, with a search).
    pub duration_s: f64,
    /// The SLA, when a search ran.
    pub sla: Option<Sla>,
    /// Connections of the data store's pool.
    pub store_pool: usize,
    /// Writes skipped the cache (`--broken`).
    pub broken: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_check_and_bad_options_do_not() {
        assert!(BgOptions::default().check().is_ok());
        let bad = [
            BgOptions {
                layout: LayoutKind::Sql,
                ..BgOptions::default()
            },
            BgOptions {
                workload: "50".into(),
                ..BgOptions::default()
            },
            BgOptions {
                members: 10,
                ..BgOptions::default()
            },
            BgOptions {
                soar_start: 8,
                max_threads: 4,
                ..BgOptions::default()
            },
            BgOptions {
                soar: true,
                common: CommonOptions {
                    appnodes: 2,
                    ..BgOptions::default().common
                },
                ..BgOptions::default()
            },
            BgOptions {
                common: CommonOptions {
                    policies: vec![],
                    ..BgOptions::default().common
                },
                ..BgOptions::default()
            },
        ];
        for o in bad {
            assert!(o.check().is_err(), "{o:?}");
        }
        let sql = BgOptions {
            layout: LayoutKind::Sql,
            common: CommonOptions {
                policies: vec![Policy::WriteAround, Policy::WriteThrough],
                ..BgOptions::default().common
            },
            ..BgOptions::default()
        };
        assert!(sql.check().is_ok());
    }

    #[test]
    fn the_sla_needs_both_shares() {
        let sla = Sla::default();
        assert!(sla.met_by(0.95, 0.0));
        assert!(sla.met_by(0.99, 0.0001));
        assert!(!sla.met_by(0.94, 0.0));
        assert!(!sla.met_by(1.0, 0.0002));
    }
}
