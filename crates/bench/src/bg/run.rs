//! BG in the harness: the load (the graph and BG's model of it), the warm-up, what one thread
//! does per action, the validation of a run, the SoAR search over runs, and the final comparison
//! of the cache with the data store.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use cads::store::StoreOptions;
use cads::{Cads, Config, Policy};
use cads_apps::bg::{layout, Action, ActionKind, Counts, GraphParams, Layout};
use serde::{Deserialize, Serialize};

use super::options::{BgOptions, ConfigRecord};
use super::record::{BgRecord, BgRun, CacheCheck, Probe, SoarRecord};
use super::validate::{check_final, check_reads, Log, UNKNOWN_END};
use super::workload::{MemberChooser, Mix, Model, Outcome as ModelOutcome};
use super::{soar, MAX_POOL};
use crate::deploy::{driver_store_calls, Deployment};
use crate::generator::{Discrete, Rng};
use crate::harness::{
    reported_kinds, AppNode, Benchmark, CommonOptions, Env, LatencySummary, Limit, Measured,
    Outcome, Phase, PolicyRun, RunLog, Runner, Step, ThreadContext, Validated, Verified,
};

/// How many mismatching cache keys a record describes.
const EXAMPLES: usize = 10;

/// BG with its options checked and its mix resolved.
pub struct Bg {
    pub(crate) opts: BgOptions,
    pub(crate) mix: Mix,
}

/// A policy's loaded graph, BG's model of it, and what its runs' threads share.
pub struct LoadedGraph {
    layout: Box<dyn Layout>,
    /// The framework without a cache over the same data store: the final checks read through
    /// it, and `--broken` writes with it.
    store_only: Cads,
    model: Model,
    chooser: MemberChooser,
    kinds: Discrete<ActionKind>,
    /// Every member's counts in the data store when the next run begins.
    base: Vec<Counts>,
    /// Members left out of writes since the load, after a write of theirs ended with an unknown
    /// outcome.
    frozen: BTreeSet<u32>,
}

/// What BG's threads log: the counts read and changed, and the members frozen (a write of
/// theirs ended with an unknown outcome, so their state is unknown to the model).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BgLog {
    counts: Log,
    frozen: Vec<u32>,
}

impl RunLog for BgLog {
    fn merge(&mut self, other: BgLog) {
        self.counts.merge(other.counts);
        self.frozen.extend(other.frozen);
    }

    fn written_documents(&self) -> u64 {
        self.counts.written_documents()
    }
}

/// One benchmark thread.
pub struct Socialite {
    rng: Rng,
}

impl Bg {
    fn graph(&self) -> GraphParams {
        self.opts.graph()
    }

    /// What `appnode` works with on the loaded graph (without the starting counts).
    fn loaded(&self, dep: &Deployment, appnode: AppNode) -> LoadedGraph {
        let graph = self.graph();
        let owned = appnode.share(graph.members as usize);
        LoadedGraph {
            layout: layout(self.opts.layout, &dep.cads),
            store_only: Cads::new(
                dep.cads.store().clone(),
                None,
                Policy::DataStoreOnly,
                Config::default(),
            ),
            model: Model::owning(&graph, owned.start as u32..owned.end as u32),
            chooser: MemberChooser::new(self.opts.popularity, graph.members),
            kinds: self.mix.chooser(),
            base: Vec::new(),
            frozen: BTreeSet::new(),
        }
    }

    /// Compares every cache key of every member with what a read would fill it with from the
    /// data store now (run it when no action is in flight, after write-back's drain).
    fn check_cache(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        loaded: &LoadedGraph,
    ) -> Result<Option<CacheCheck>> {
        let cads = &dep.cads;
        let client = cads.cache();
        if !cads.has_cache() {
            return Ok(None);
        }
        let started = Instant::now();
        let mut check = CacheCheck {
            invalidations_failed: cads.invalidations_failed(),
            flushed_cmis: cads.flush_missed_cmis(),
            ..CacheCheck::default()
        };
        for member in 0..self.graph().members {
            let mut cached = Vec::new();
            for key in loaded.layout.cache_keys(member) {
                check.keys += 1;
                // Under SAS, this process's own copies (the AppNodes of `--appnodes` keep theirs).
                let value = match client {
                    Some(client) => client.get(&key).context("reading the cache back")?,
                    None => cads.sas_copy(&key),
                };
                if let Some(value) = value {
                    cached.push((key, value));
                }
            }
            if cached.is_empty() {
                continue;
            }
            check.cached += cached.len() as u64;
            let fresh: HashMap<Vec<u8>, Vec<u8>> = loaded
                .layout
                .fresh_entries(&loaded.store_only, member)
                .with_context(|| format!("reading member {member} from the data store"))?
                .into_iter()
                .collect();
            for (key, value) in cached {
                let want = fresh.get(&key);
                if want.is_some_and(|w| loaded.layout.same_value(&key, &value, w)) {
                    continue;
                }
                check.mismatches += 1;
                if check.examples.len() < EXAMPLES {
                    check.examples.push(format!(
                        "{}: cached {:?}, the data store gives {:?}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(&value),
                        want.map(|w| String::from_utf8_lossy(w).into_owned())
                    ));
                }
            }
        }
        run.report(
            Phase::Verify,
            check.keys,
            None,
            started,
            format!(
                "cache check: {} of {} keys cached, {} differ from the data store \
                 (since the start: {} invalidations given up; {} CMIs marked missed flushed now)",
                check.cached,
                check.keys,
                check.mismatches,
                check.invalidations_failed,
                check.flushed_cmis
            ),
        );
        Ok(Some(check))
    }
}

/// Fills the cache with every member's read keys on `threads` threads: first each member's own
/// profile (View Profile of oneself), then its lists (List Friends, View Friend Requests), whose
/// profiles are then cached already. Each thread takes a block of members, so that in the first
/// pass no two threads miss on the same key and wait for each other's lease.
pub(crate) fn warm_cache(
    layout: &dyn Layout,
    cads: &Cads,
    members: u32,
    threads: u32,
) -> Result<()> {
    let block = members.div_ceil(threads.max(1));
    let passes: [&(dyn Fn(u32) -> Vec<Action> + Sync); 2] = [
        &|member| {
            vec![Action::ViewProfile {
                requester: member,
                owner: member,
            }]
        },
        &|member| {
            vec![
                Action::ListFriends { member },
                Action::ViewFriendRequests { member },
            ]
        },
    ];
    for actions in passes {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..members)
                .step_by(block.max(1) as usize)
                .map(|first| {
                    scope.spawn(move || -> Result<()> {
                        for member in first..(first + block).min(members) {
                            for action in actions(member) {
                                layout
                                    .perform(cads, &action)
                                    .with_context(|| format!("warming the cache: {action:?}"))?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().map_err(|_| anyhow!("a warm-up thread panicked"))?)
        })?;
    }
    Ok(())
}

impl Benchmark for Bg {
    const NAME: &'static str = "bg";
    const UNIT: &'static str = "actions";
    type Loaded = LoadedGraph;
    type Thread = Socialite;
    type Log = BgLog;
    type Detail = BgRun;
    type Config = ConfigRecord;

    fn options(&self) -> &CommonOptions {
        &self.opts.common
    }

    fn workload(&self) -> String {
        self.mix.name.clone()
    }

    fn kinds(&self) -> Vec<(&'static str, f64)> {
        ActionKind::ALL
            .iter()
            .map(|k| (k.abbreviation(), self.mix.percent[k.index()]))
            .collect()
    }

    fn limit(&self) -> Limit {
        Limit {
            duration: Some(self.opts.duration),
            operations: None,
        }
    }

    fn store_options(&self) -> StoreOptions {
        StoreOptions::default().with_pool_size(self.store_pool())
    }

    fn miss_collection(&self) -> &str {
        cads_apps::bg::layout::documents::COLLECTION
    }

    /// Loads the graph into the data store (the cache starts empty: fresh embedded CMIs, or
    /// external ones emptied by the deployment), and reads its counts back.
    fn load(&self, run: &PolicyRun<'_>, dep: &Deployment) -> Result<LoadedGraph> {
        let graph = self.graph();
        let layout = layout(self.opts.layout, &dep.cads);
        let started = Instant::now();
        run.report(Phase::Load, 0, None, started, layout.describe());
        layout
            .load(&dep.cads, &graph)
            .context("loading the social graph")?;
        run.report(Phase::Load, u64::from(graph.members), None, started, "done");
        let mut loaded = self.loaded(dep, AppNode::ALONE);
        loaded.base = loaded
            .layout
            .stored_counts(loaded.store_only.store().as_ref(), &graph)?;
        Ok(loaded)
    }

    /// The graph as AppNode `appnode` sees it: its writes stay among its share of the members
    /// (its model owns them), so that no two AppNodes change one relationship. It does not
    /// verify, so it has no counts to start from.
    fn attach(
        &self,
        _run: &PolicyRun<'_>,
        dep: &Deployment,
        appnode: AppNode,
        _handoff: Option<&serde_json::Value>,
    ) -> Result<LoadedGraph> {
        Ok(self.loaded(dep, appnode))
    }

    /// Reads every member's profile, friends and invitations through the cache, so that runs
    /// start warm (000 §3.3).
    fn warm(&self, run: &PolicyRun<'_>, dep: &Deployment, loaded: &LoadedGraph) -> Result<()> {
        let started = Instant::now();
        let members = self.graph().members;
        run.report(Phase::Warm, 0, None, started, "");
        let threads = self.opts.common.threads.clamp(1, 8) as u32;
        warm_cache(&*loaded.layout, &dep.cads, members, threads)?;
        run.report(Phase::Warm, u64::from(members), None, started, "done");
        Ok(())
    }

    fn thread(&self, _loaded: &LoadedGraph, ctx: &ThreadContext) -> Socialite {
        Socialite {
            rng: Rng::new(
                ctx.seed
                    ^ ctx.run_on_load.wrapping_mul(0xD134_2543_DE82_EF95)
                    ^ (ctx.index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
        }
    }

    fn operate(
        &self,
        loaded: &LoadedGraph,
        t: &mut Socialite,
        log: &mut BgLog,
        env: &Env<'_>,
    ) -> Step {
        let kind = loaded.kinds.next(&mut t.rng);
        let step = |outcome, cache_reads, cache_misses| Step {
            kind: kind.index(),
            outcome,
            cache_reads,
            cache_misses,
        };
        let Some(action) = loaded.model.pick(kind, &loaded.chooser, &mut t.rng) else {
            return step(Outcome::Skipped, 0, 0);
        };
        let write = kind.is_write();
        let cads = if write && self.opts.broken {
            &loaded.store_only
        } else {
            env.cads
        };
        let calls = driver_store_calls();
        let start = env.clock.now();
        let result = loaded.layout.perform(cads, &action);
        let end = env.clock.now();
        match result {
            Ok(_) if write => {
                log.counts.write(&action, start, end);
                loaded.model.finish(&action, ModelOutcome::Committed);
                step(Outcome::Done, 0, 0)
            }
            Ok(reads) => {
                log.counts.reads(&reads, start, end);
                let missed = u64::from(driver_store_calls() > calls);
                step(Outcome::Done, 1, missed)
            }
            Err(e) => {
                if write {
                    // An aborted session wrote nothing anywhere; after any other failure the
                    // write may or may not have reached the data store.
                    let outcome = if matches!(e, cads::Error::Aborted { .. }) {
                        ModelOutcome::RolledBack
                    } else {
                        log.counts.write(&action, start, UNKNOWN_END);
                        let (a, b) = action.pair().expect("a write action");
                        log.frozen.extend([a, b]);
                        ModelOutcome::Unknown
                    };
                    loaded.model.finish(&action, outcome);
                }
                step(Outcome::Failed(format!("{}: {e}", kind.name())), 0, 0)
            }
        }
    }

    /// Every count read against the writes, and the data store's counts against the counts
    /// before the run plus every acknowledged write; those become the next run's starting
    /// counts.
    fn verify(
        &self,
        run: &PolicyRun<'_>,
        _dep: &Deployment,
        loaded: &mut LoadedGraph,
        measured: &Measured<BgLog>,
    ) -> Result<Verified<BgRun>> {
        let node = &measured.node;
        let log = &node.log.counts;
        loaded.frozen.extend(&node.log.frozen);
        let started = Instant::now();
        let note = format!(
            "{} count reads, {} count changes",
            log.reads.len(),
            log.writes.len()
        );
        run.report(Phase::Verify, 0, None, started, note);
        let reads = check_reads(log, &loaded.base);
        let stored = loaded
            .layout
            .stored_counts(loaded.store_only.store().as_ref(), &self.graph())?;
        let lost = check_final(log, &loaded.base, &stored);
        loaded.base = stored;
        let note = format!(
            "{} stale reads, {} members with lost writes",
            reads.stale, lost.wrong
        );
        run.report(Phase::Verify, reads.reads, None, started, note);

        let all = node.all_latencies();
        let actions = all.len();
        let failures: u64 = node.failed.iter().sum();
        let sla = &self.opts.sla;
        let satisfied = all.count_between(0, sla.latency.as_micros() as u64) as f64
            / (actions + failures).max(1) as f64;
        let stale_share = reads.stale as f64 / reads.reads.max(1) as f64;
        Ok(Verified {
            detail: BgRun {
                layout: self.opts.layout.name().to_string(),
                actions,
                skipped: node.skipped,
                latency_all_us: LatencySummary::of(&all),
                failed_by_action: reported_kinds(self, node)
                    .into_iter()
                    .map(|(i, name)| (name.to_string(), node.failed[i]))
                    .collect(),
                satisfied,
                stale_share,
                meets_sla: sla.met_by(satisfied, stale_share),
                validated: Validated {
                    cache_reads: node.cache_reads,
                    cache_misses: node.cache_misses,
                    reads: reads.reads,
                    stale_examples: reads.examples,
                    lost_writes: lost.wrong,
                    lost_examples: lost.examples,
                },
                frozen_members: loaded.frozen.len(),
                cache_check: None,
                soar: None,
            },
            stale_reads: reads.stale,
            operations: actions,
        })
    }

    fn config(&self, loaded: &LoadedGraph, _threads: usize) -> ConfigRecord {
        let o = &self.opts;
        let graph = self.graph();
        ConfigRecord {
            mix: self.mix.clone(),
            layout: o.layout.name().to_string(),
            layout_description: loaded.layout.describe(),
            members: graph.members,
            friends: graph.friends,
            pending: graph.pending,
            popularity: o.popularity,
            duration_s: o.duration.as_secs_f64(),
            sla: o.soar.then_some(o.sla),
            store_pool: self.store_pool(),
            broken: o.broken,
        }
    }

    /// A run on `--threads` threads, or with `--soar` the search: its record is the run at the
    /// SoAR's thread count (or the first, if none met the SLA), with every probe in `soar`.
    fn runs(&self, runner: &mut Runner<'_, Self>) -> Result<BgRecord> {
        let o = &self.opts;
        if !o.soar {
            return runner.run(o.common.threads);
        }
        let search = soar::search(
            o.soar_start,
            o.max_threads,
            |threads| runner.run(threads),
            |r| r.detail.meets_sla,
        )?;
        let probes: Vec<Probe> = search.runs.iter().map(|(_, r)| r.probe()).collect();
        let best = probes
            .iter()
            .filter(|p| p.meets_sla)
            .max_by(|a, b| a.throughput.total_cmp(&b.throughput));
        let soar = SoarRecord {
            sla: o.sla,
            soar: search.best.map_or(0.0, |i| probes[i].throughput),
            socialites: search.best.map_or(0, |i| probes[i].threads),
            best_throughput: best.map_or(0.0, |p| p.throughput),
            best_threads: best.map_or(0, |p| p.threads),
            bounded: search.bounded,
            probes,
        };
        let mut runs = search.runs;
        let mut record = runs.swap_remove(search.best.unwrap_or(0)).1;
        record.detail.soar = Some(soar);
        Ok(record)
    }

    /// The cache against the data store, after the policy's last run.
    fn after_runs(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        loaded: &LoadedGraph,
        record: &mut BgRecord,
    ) -> Result<()> {
        record.detail.cache_check = self.check_cache(run, dep, loaded)?;
        Ok(())
    }
}

impl Bg {
    /// Connections of the data store's pool: the threads of a single run, or the most a search
    /// may use, and the workers; at most [`MAX_POOL`].
    fn store_pool(&self) -> usize {
        (self.opts.peak_threads() + self.opts.common.workers + 4).min(MAX_POOL)
    }
}
