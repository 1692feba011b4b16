//! TPC-C in the harness: the load, the warm-up, what one terminal does per transaction, and the
//! checks after a run (the consistency conditions, then the cache against the data store).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use cads::store::StoreOptions;
use cads::{Cads, Config, Policy};
use serde::{Deserialize, Serialize};

use super::cache::Db;
use super::check::{compare_cache, consistency};
use super::keyspace::{batches, next_order_ids, Batch};
use super::load::load_database;
use super::options::{ConfigRecord, TpccOptions};
use super::random::{C_ID, C_LAST_LOAD, C_LAST_RUN, OL_I_ID};
use super::record::{TpccRun, TxnCounts};
use super::schema::Tables;
use super::txn::{is_rollback, Attempts, Context as TxnContext, Kind, Terminal};
use crate::deploy::Deployment;
use crate::generator::{Discrete, Rng};
use crate::harness::{
    run_threads, AppNode, Benchmark, CommonOptions, Env, Limit, Measured, Outcome, Phase,
    PolicyRun, RunLog, Step, ThreadContext, Verified, TICK,
};

/// TPC-C with its options checked.
pub struct Tpcc {
    pub(crate) opts: TpccOptions,
}

/// A policy's database: its tables and CacheStores.
pub struct LoadedDatabase {
    db: Db,
}

/// One terminal.
pub struct TerminalThread {
    terminal: Terminal,
    rng: Rng,
    mix: Discrete<Kind>,
    /// The terminal's own CacheStores, so that it counts its own queries to the data store.
    db: Db,
}

/// What the terminals count that the harness does not: the sessions each transaction type ran
/// (re-runs after conflicts included).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TpccLog {
    sessions: [u64; 5],
}

impl RunLog for TpccLog {
    fn merge(&mut self, other: TpccLog) {
        for (total, n) in self.sessions.iter_mut().zip(other.sessions) {
            *total += n;
        }
    }
}

impl Benchmark for Tpcc {
    const NAME: &'static str = "tpcc";
    const UNIT: &'static str = "txn";
    type Loaded = LoadedDatabase;
    type Thread = TerminalThread;
    type Log = TpccLog;
    type Detail = TpccRun;
    type Config = ConfigRecord;

    fn options(&self) -> &CommonOptions {
        &self.opts.common
    }

    fn workload(&self) -> String {
        format!("tpcc-{}-{}w", self.opts.scale.name(), self.opts.warehouses)
    }

    fn kinds(&self) -> Vec<(&'static str, f64)> {
        Kind::ALL
            .iter()
            .zip(self.opts.mix.weights())
            .map(|(k, weight)| (k.name(), f64::from(weight)))
            .collect()
    }

    fn limit(&self) -> Limit {
        Limit {
            duration: Some(self.opts.duration),
            operations: None,
        }
    }

    fn store_options(&self) -> StoreOptions {
        let o = &self.opts;
        StoreOptions::default()
            .with_pool_size(o.common.threads + o.common.workers + o.load_threads + 4)
    }

    // The framework's settings are the defaults (READ COMMITTED: the data store alone locks what
    // it changes with `FOR UPDATE`; with a cache, leases order the sessions), but for how many
    // write-back sessions a worker applies per data-store transaction.
    fn framework_config(&self) -> Config {
        let mut config = Config::default();
        config.write_back.batch = self.opts.write_back_batch;
        config
    }

    /// Loads the database (dropping old tables), unless `--keep-data` keeps the first run's.
    fn load(&self, run: &PolicyRun<'_>, dep: &Deployment) -> Result<LoadedDatabase> {
        let o = &self.opts;
        let store = dep.cads.store();
        let tables = Tables::new(&o.prefix, store.dialect());
        if !o.keep_data || run.first {
            let started = Instant::now();
            let last = Mutex::new(Instant::now());
            load_database(
                store.as_ref(),
                &tables,
                o.warehouses,
                o.scale,
                o.common.seed,
                o.load_threads,
                &|done, total| {
                    let mut last = last.lock().expect("not poisoned");
                    if last.elapsed() >= TICK || done == total {
                        *last = Instant::now();
                        run.report(Phase::Load, done, Some(total), started, "rows");
                    }
                },
            )?;
        }
        Ok(LoadedDatabase {
            db: Db::new(tables, o.scale),
        })
    }

    /// The database's CacheStores. The AppNodes' terminals own districts apart: they are the
    /// run's terminals, split.
    fn attach(
        &self,
        _run: &PolicyRun<'_>,
        dep: &Deployment,
        _appnode: AppNode,
        _handoff: Option<&serde_json::Value>,
    ) -> Result<LoadedDatabase> {
        let tables = Tables::new(&self.opts.prefix, dep.cads.store().dialect());
        Ok(LoadedDatabase {
            db: Db::new(tables, self.opts.scale),
        })
    }

    /// Reads every entry through the cache, so the run starts at a 100% hit rate (003 §4.3).
    fn warm(&self, run: &PolicyRun<'_>, dep: &Deployment, loaded: &LoadedDatabase) -> Result<()> {
        let (cads, db) = (&dep.cads, &loaded.db);
        let warehouses = self.opts.warehouses;
        let started = Instant::now();
        let next = next_order_ids(cads.store().as_ref(), db, warehouses)?;
        let work = batches(db, warehouses, &next);
        let total: u64 = work.iter().map(|b| b.len() as u64).sum();
        let index = AtomicUsize::new(0);
        let done = AtomicU64::new(0);
        let results = run_threads(
            self.opts.common.threads.min(8),
            &done,
            started,
            |done| run.report(Phase::Warm, done, Some(total), started, "entries"),
            |_| -> Result<()> {
                while let Some(batch) = work.get(index.fetch_add(1, Ordering::Relaxed)) {
                    cads.run(|s| batch.read(s, db))
                        .with_context(|| format!("warming {batch:?}"))?;
                    done.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Ok(())
            },
        );
        results.into_iter().collect::<Result<()>>()?;
        run.report(Phase::Warm, total, Some(total), started, "done");
        Ok(())
    }

    fn thread(&self, loaded: &LoadedDatabase, ctx: &ThreadContext) -> TerminalThread {
        let o = &self.opts;
        TerminalThread {
            terminal: Terminal::assign(ctx.threads, o.warehouses).swap_remove(ctx.index),
            rng: Rng::new(
                ctx.seed
                    .wrapping_add((ctx.index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            ),
            mix: Discrete::new(
                Kind::ALL
                    .into_iter()
                    .zip(o.mix.weights())
                    .map(|(kind, weight)| (f64::from(weight), kind)),
            ),
            db: Db::new(loaded.db.tables.clone(), loaded.db.scale),
        }
    }

    fn operate(
        &self,
        _loaded: &LoadedDatabase,
        t: &mut TerminalThread,
        log: &mut TpccLog,
        env: &Env<'_>,
    ) -> Step {
        let o = &self.opts;
        let kind = t.mix.next(&mut t.rng);
        let input = t.terminal.draw(kind, &mut t.rng, o.scale, o.warehouses);
        let queries = t.db.store_queries();
        let mut attempts = Attempts::default();
        let txn = TxnContext {
            cads: env.cads,
            db: &t.db,
            sabotage: o.sabotage,
        };
        let result = txn.execute(&input, &mut attempts);
        log.sessions[kind.index()] += attempts.sessions;
        Step {
            kind: kind.index(),
            outcome: match result {
                Ok(()) => Outcome::Done,
                Err(e) if is_rollback(&e) => Outcome::RolledBack,
                Err(e) => Outcome::Failed(format!("{kind}: {e}")),
            },
            cache_reads: attempts.reads,
            cache_misses: t.db.store_queries() - queries,
        }
    }

    /// The consistency conditions on the data store, then every entry the cache holds against
    /// the data store.
    fn verify(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        loaded: &mut LoadedDatabase,
        measured: &Measured<TpccLog>,
    ) -> Result<Verified<TpccRun>> {
        let (node, db) = (&measured.node, &loaded.db);
        let started = Instant::now();
        run.report(Phase::Verify, 0, None, started, "consistency conditions");
        let store = dep.cads.store().clone();
        let conditions = consistency(store.as_ref(), db)?;
        let violations: u64 = conditions.iter().map(|c| c.violations).sum();
        let cache_check = match dep.cads.cache() {
            Some(_) => {
                let plain = Cads::new(
                    store.clone(),
                    None,
                    Policy::DataStoreOnly,
                    Config::default(),
                );
                let next = next_order_ids(store.as_ref(), db, self.opts.warehouses)?;
                let work: Vec<Batch> = batches(db, self.opts.warehouses, &next);
                Some(compare_cache(&dep.cads, &plain, db, &work)?)
            }
            None => None,
        };
        let stale = cache_check.as_ref().map_or(0, |c| c.stale);
        run.report(
            Phase::Verify,
            conditions.len() as u64,
            None,
            started,
            format!("{violations} consistency violations, {stale} stale cached entries"),
        );
        let counts: BTreeMap<String, TxnCounts> = Kind::ALL
            .iter()
            .map(|kind| {
                let i = kind.index();
                let counts = TxnCounts {
                    completed: node.latencies[i].len(),
                    rolled_back: node.rolled_back[i],
                    failed: node.failed[i],
                    sessions: node.log.sessions[i],
                };
                (kind.name().to_string(), counts)
            })
            .collect();
        let new_orders = node.latencies[Kind::NewOrder.index()].len();
        Ok(Verified {
            detail: TpccRun {
                transactions: node.completed(),
                tpmc: new_orders as f64 * 60.0 / measured.elapsed_s.max(1e-9),
                counts,
                reads: node.cache_reads,
                store_queries: node.cache_misses,
                cache_check,
                consistency: conditions,
                consistent: violations == 0 && stale == 0,
                check_s: started.elapsed().as_secs_f64(),
            },
            stale_reads: stale,
            operations: node.log.sessions.iter().sum(),
        })
    }

    fn config(&self, _loaded: &LoadedDatabase, _threads: usize) -> ConfigRecord {
        let o = &self.opts;
        ConfigRecord {
            warehouses: o.warehouses,
            scale: o.scale,
            scale_name: o.scale.name(),
            duration_s: o.duration.as_secs_f64(),
            mix: o.mix,
            prefix: o.prefix.clone(),
            keep_data: o.keep_data,
            isolation: "READ COMMITTED",
            nurand_c: [C_ID, OL_I_ID, C_LAST_LOAD, C_LAST_RUN],
            write_back_batch: o.write_back_batch,
        }
    }
}
