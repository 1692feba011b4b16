//! YCSB in the harness: the load, the warm-up, what one thread does per operation, and the
//! validation of a run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use cads::cpr::{Dendrite, DendriteConfig, DendriteStats, Point, RangeService, RemoteDendrite};
use cads::documents::Collection;
use cads::store::{DataStore, DocOp, Document, StoreOptions};
use cads::{Cads, Config, Policy};
use serde_json::Value;

use super::options::{ConfigRecord, YcsbOptions};
use super::record::{RangeCounts, YcsbRun, RANGES_NOTE, SCAN_NOTE, ZINDEX_NOTE};
use super::validate::{
    check_final, check_reads, field_name, id_hash, inspect, load_token, record, record_id,
    writer_token, Log, ReadRecord, Record, RecordText, Seen, WriteRecord, UNKNOWN_END,
};
use super::workload::{Fields, KeyChooser, Operation, PatternChange, ScanLength, Workload};
use super::zindex::{RedisServer, Zindex};
use crate::deploy::{driver_misses, driver_store_calls, Deployment};
use crate::generator::{AcknowledgedCounter, Discrete, Rng};
use crate::harness::{
    reported_kinds, run_threads, AppNode, Benchmark, CommonOptions, Env, Limit, Measured, Outcome,
    Phase, PolicyRun, Step, ThreadContext, Validated, Verified, REDIS_ZINDEX,
};

/// Records per `insert_many` call in the load phase.
const LOAD_BATCH: u64 = 500;
/// Records per page when the data store is read back after the run.
const CHECK_PAGE: usize = 1000;

/// YCSB with its options checked and its workload resolved.
pub struct Ycsb {
    pub(crate) opts: YcsbOptions,
    pub(crate) workload: Workload,
}

/// How the CPR workload's scans are served.
enum Ranges {
    /// Through a Dendrite that caches their results (CPR): in the process that deployed, which
    /// owns the ranges, and which serves them to its AppNodes under `--appnodes`.
    Dendrite(Dendrite, Option<Owner>),
    /// In an AppNode: through the owner's Dendrite, every scan and write forwarded to it.
    Remote(RemoteDendrite),
    /// Through a sorted set of ids on a real Redis, the baseline of 002 §4.5 (the cache-aside
    /// policy, `redis-zindex`): every operation of the run goes through it.
    Zindex {
        zindex: Zindex,
        _server: RedisServer,
    },
}

/// What the scans' counters were at some instant.
#[derive(Clone, Copy, Debug, Default)]
struct RangeSnapshot {
    /// In a Dendrite's terms (the baseline counts scans and scans that missed).
    stats: DendriteStats,
    /// The baseline's round trips to Redis.
    redis_round_trips: u64,
}

/// The ranges' owner's service to the AppNodes.
struct Owner {
    service: RangeService,
}

impl Ranges {
    fn snapshot(&self) -> RangeSnapshot {
        match self {
            Ranges::Dendrite(d, _) => RangeSnapshot {
                stats: d.stats(),
                redis_round_trips: 0,
            },
            // Counted by the owner, which verifies.
            Ranges::Remote(_) => RangeSnapshot::default(),
            Ranges::Zindex { zindex, .. } => {
                let (gets, misses, redis_round_trips) = zindex.counts();
                RangeSnapshot {
                    stats: DendriteStats {
                        gets,
                        misses,
                        ..DendriteStats::default()
                    },
                    redis_round_trips,
                }
            }
        }
    }
}

/// Serves `dendrite`'s ranges to the AppNodes of a run, on loopback.
fn serve(cads: &Arc<Cads>, dendrite: &Dendrite) -> Result<Owner> {
    let service = RangeService::start(
        cads.clone(),
        dendrite.clone(),
        (std::net::Ipv4Addr::LOCALHOST, 0).into(),
    )?;
    Ok(Owner { service })
}

/// The baseline's failures as the framework's (an application error: the record's outcome is
/// unknown to the validator unless the data store's error says otherwise).
fn baseline_error(e: anyhow::Error) -> cads::Error {
    match e.downcast::<cads::store::StoreError>() {
        Ok(e) => cads::Error::Store(e),
        Err(e) => cads::Error::App(format!("{e:#}")),
    }
}

/// A policy's loaded usertable, and what its run's threads share.
pub struct LoadedTable {
    table: Collection,
    /// The CPR workload's scans (None for the other workloads).
    ranges: Option<Ranges>,
    /// Its counts when the run began.
    ranges_at_start: Mutex<RangeSnapshot>,
    /// Key numbers of the run's inserts, acknowledged as they finish.
    inserts: AcknowledgedCounter,
    /// YCSB's `⌊operationcount × insertproportion × 2⌋`, for the zipfian key chooser.
    expected_new_keys: i64,
}

/// One benchmark thread.
pub struct YcsbThread {
    index: usize,
    rng: Rng,
    operations: Discrete<Operation>,
    keys: KeyChooser,
    /// Writes made so far (the sequence of its version tokens).
    writes: u64,
}

impl Ycsb {
    /// The loaded table as `appnode` sees it: its inserts take every `count`-th key number after
    /// the loaded records, from `records + index` (all of them in one process). An AppNode
    /// (`owner`: where the ranges' owner serves them) forwards the CPR workload's scans and
    /// writes there; the process that deployed owns them, and serves them if it has AppNodes.
    fn loaded(
        &self,
        cads: &Arc<Cads>,
        appnode: AppNode,
        owner: Option<(SocketAddr, String)>,
    ) -> Result<LoadedTable> {
        let o = &self.opts;
        let expected_ops = o.operations.unwrap_or(o.records) as f64;
        let table = Collection::named(&o.table)?;
        let ranges = match (self.workload.ranges, cads.policy()) {
            (false, _) => None,
            (true, Policy::CacheAside) => {
                let server = RedisServer::start()?;
                Some(Ranges::Zindex {
                    zindex: Zindex::new(server.addr(), &o.table)?,
                    _server: server,
                })
            }
            (true, _) => Some(match owner {
                Some((addr, token)) => Ranges::Remote(RemoteDendrite::new(addr, token)),
                None => {
                    let dendrite = Dendrite::new(cads, &table, self.range_config())?;
                    let service = match o.common.appnodes {
                        1 => None,
                        _ => Some(serve(cads, &dendrite)?),
                    };
                    Ranges::Dendrite(dendrite, service)
                }
            }),
        };
        Ok(LoadedTable {
            table,
            ranges,
            ranges_at_start: Mutex::default(),
            inserts: AcknowledgedCounter::strided(
                o.records as i64,
                appnode.index as i64,
                appnode.count as i64,
            ),
            expected_new_keys: (expected_ops * self.workload.insert * 2.0) as i64,
        })
    }

    /// The id of key number `k` (ordered under CPR, see [`record_id`]).
    fn id(&self, k: i64) -> String {
        record_id(k, self.workload.ranges)
    }

    /// The CPR workload's Dendrite: ranges of ids, as long as the longest scan.
    fn range_config(&self) -> DendriteConfig {
        let longest = match self.workload.scan_length {
            ScanLength::Fixed(n) => n,
            ScanLength::Uniform { max } => max,
        };
        DendriteConfig {
            max_results: longest as usize,
            beta: self.opts.beta,
            ..DendriteConfig::by_id()
        }
    }

    /// One pass of the warm-up over every key number: its record, or (`range_length`) the
    /// range of that many records it starts.
    fn warm_pass(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        loaded: &LoadedTable,
        range_length: Option<i64>,
    ) -> Result<()> {
        let started = Instant::now();
        let next = AtomicU64::new(0);
        let warmed = AtomicU64::new(0);
        let total = self.opts.warmed_records();
        let results = run_threads(
            self.opts.common.threads,
            &warmed,
            started,
            |done| run.report(Phase::Warm, done, Some(total), started, ""),
            |_| -> Result<()> {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= total {
                        return Ok(());
                    }
                    let id = self.id(k as i64);
                    let missing = || anyhow!("record {id} is missing after the load");
                    match (&loaded.ranges, range_length) {
                        (Some(Ranges::Dendrite(ranges, _)), Some(n)) => {
                            let lo = Point::Text(id.clone());
                            let hi = Point::Text(self.id(k as i64 + n - 1));
                            ranges
                                .read(&dep.cads, &lo, &hi)
                                .with_context(|| format!("warming the range [{lo:?}, {hi:?}]"))?;
                        }
                        (Some(Ranges::Zindex { zindex, .. }), _) => {
                            zindex
                                .read(dep.cads.store().as_ref(), &id)
                                .with_context(|| format!("warming record {id} in Redis"))?
                                .ok_or_else(missing)?;
                        }
                        _ => {
                            dep.cads
                                .run(|s| loaded.table.get(s, &id))
                                .with_context(|| format!("warming record {id}"))?
                                .ok_or_else(missing)?;
                        }
                    }
                    warmed.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
        results.into_iter().collect::<Result<()>>()?;
        let what = if range_length.is_some() {
            "ranges done"
        } else {
            "done"
        };
        run.report(Phase::Warm, total, Some(total), started, what);
        Ok(())
    }

    /// The field a scan projects its records to (YCSB^1), if it projects.
    fn projected(&self, rng: &mut Rng) -> Option<String> {
        match self.workload.scan_fields {
            Fields::All => None,
            Fields::One => Some(field_name(
                rng.below(self.workload.field_count as u64) as usize
            )),
        }
    }

    fn inspect<R: Record>(&self, doc: Option<&R>) -> Seen {
        let w = &self.workload;
        inspect(
            doc,
            w.field_count,
            w.field_length,
            self.workload.update_fields == Fields::All,
        )
    }

    /// The changes of an update with version `token`: `$set` of the fields and of `v`.
    fn update(&self, token: u64, rng: &mut Rng) -> cads::store::Changes {
        let w = &self.workload;
        let field = match w.update_fields {
            Fields::All => None,
            Fields::One => Some(rng.below(w.field_count as u64) as usize),
        };
        cads_apps::ycsb::update(token, field, w.field_count, w.field_length)
    }

    /// Every record of the table as the data store holds it.
    fn read_back(&self, store: &dyn DataStore) -> Result<HashMap<u64, Seen>> {
        let table = &self.opts.table;
        let mut stored = HashMap::with_capacity(self.opts.records as usize);
        let mut after: Option<Value> = None;
        loop {
            let from = match &after {
                Some(id) => Bound::Excluded(id),
                None => Bound::Unbounded,
            };
            let page = store
                .scan(table, None, from, Bound::Unbounded, CHECK_PAGE)
                .context("reading the table back")?;
            let Some((last, _)) = page.last() else {
                return Ok(stored);
            };
            after = Some(Value::String(last.clone()));
            let full = page.len() == CHECK_PAGE;
            for (id, doc) in &page {
                stored.insert(id_hash(id), self.inspect(Some(doc)));
            }
            if !full {
                return Ok(stored);
            }
        }
    }
}

/// Logs a write: committed (known end), aborted (nothing written: not logged), or failed
/// otherwise (it may have committed: unknown end).
fn log_write<T>(
    log: &mut Log,
    id: &str,
    token: u64,
    start: u64,
    end: u64,
    result: &Result<T, cads::Error>,
) {
    let end = match result {
        Ok(_) => end,
        Err(cads::Error::Aborted { .. }) => return,
        Err(_) => UNKNOWN_END,
    };
    log.writes.push(WriteRecord {
        key: id_hash(id),
        token,
        start,
        end,
    });
}

impl Benchmark for Ycsb {
    const NAME: &'static str = "ycsb";
    const UNIT: &'static str = "ops";
    type Loaded = LoadedTable;
    type Thread = YcsbThread;
    type Log = Log;
    type Detail = YcsbRun;
    type Config = ConfigRecord;

    fn options(&self) -> &CommonOptions {
        &self.opts.common
    }

    fn workload(&self) -> String {
        self.workload.name.clone()
    }

    fn policy_name(&self, policy: Policy) -> &'static str {
        match policy {
            Policy::CacheAside if self.workload.ranges => REDIS_ZINDEX,
            _ => policy.name(),
        }
    }

    fn kinds(&self) -> Vec<(&'static str, f64)> {
        Operation::ALL
            .iter()
            .map(|&op| (op.name(), self.workload.proportion(op)))
            .collect()
    }

    fn limit(&self) -> Limit {
        Limit {
            duration: self.opts.run_duration(),
            operations: self.opts.operations,
        }
    }

    fn store_options(&self) -> StoreOptions {
        let c = &self.opts.common;
        StoreOptions::default()
            .with_pool_size(c.threads + c.workers + 4)
            .with_timeout(self.opts.store_timeout)
    }

    fn framework_config(&self) -> Config {
        let mut config = Config::default();
        // PendingWrites partitions well above the writer threads (as `WriteBackConfig`
        // advises): writers that create a buffered write register it in one, under its
        // exclusive lease, and with fewer partitions than writers they queue there.
        let threads = self.opts.common.threads;
        config.write_back.partitions = config.write_back.partitions.max(4 * threads);
        config
    }

    fn miss_collection(&self) -> &str {
        &self.opts.table
    }

    /// Drops and recreates the table and inserts `records` records (key numbers split across
    /// the threads in batches), each at its load version.
    fn load(&self, run: &PolicyRun<'_>, dep: &Deployment) -> Result<LoadedTable> {
        let o = &self.opts;
        let store = dep.cads.store();
        let started = Instant::now();
        store
            .drop_collection(&o.table)
            .with_context(|| format!("dropping the table {}", o.table))?;
        store
            .create_collection(&o.table, &[])
            .with_context(|| format!("creating the table {}", o.table))?;
        let next = AtomicU64::new(0);
        let loaded = AtomicU64::new(0);
        let total = o.records;
        let results = run_threads(
            o.common.threads.min(8),
            &loaded,
            started,
            |done| run.report(Phase::Load, done, Some(total), started, ""),
            |_| -> Result<()> {
                loop {
                    let first = next.fetch_add(LOAD_BATCH, Ordering::Relaxed);
                    if first >= total {
                        return Ok(());
                    }
                    let last = (first + LOAD_BATCH).min(total);
                    let docs: Vec<(String, Document)> = (first..last)
                        .map(|k| {
                            let k = k as i64;
                            (
                                self.id(k),
                                record(
                                    load_token(k),
                                    self.workload.field_count,
                                    self.workload.field_length,
                                ),
                            )
                        })
                        .collect();
                    store
                        .insert_many(&o.table, &docs)
                        .with_context(|| format!("loading records {first}..{last}"))?;
                    loaded.fetch_add(last - first, Ordering::Relaxed);
                }
            },
        );
        results.into_iter().collect::<Result<()>>()?;
        let loaded = self.loaded(&dep.cads, AppNode::ALONE, None)?;
        if let Some(Ranges::Zindex { zindex, .. }) = &loaded.ranges {
            // The baseline's inserts index their ids; the load's records are indexed here.
            let ids: Vec<String> = (0..total as i64).map(|k| self.id(k)).collect();
            zindex
                .index(&ids)
                .context("indexing the loaded records in Redis")?;
        }
        if let Some(ranges) = &loaded.ranges {
            // The run counts from here, or from the end of the warm-up.
            *loaded.ranges_at_start.lock().expect("not poisoned") = ranges.snapshot();
        }
        run.report(Phase::Load, total, Some(total), started, "done");
        Ok(loaded)
    }

    fn attach(
        &self,
        _run: &PolicyRun<'_>,
        dep: &Deployment,
        appnode: AppNode,
        handoff: Option<&Value>,
    ) -> Result<LoadedTable> {
        let owner = match handoff {
            Some(h) => {
                let field = |name: &str| h.get(name).and_then(Value::as_str);
                let addr = field("ranges")
                    .and_then(|a| a.parse().ok())
                    .ok_or_else(|| anyhow!("the job's handoff names no ranges' owner: {h}"))?;
                let token = field("token").ok_or_else(|| {
                    anyhow!("the job's handoff has no token for the ranges' owner")
                })?;
                Some((addr, token.to_string()))
            }
            None => None,
        };
        self.loaded(&dep.cads, appnode, owner)
    }

    /// Under the CPR workload with AppNodes: where the ranges' owner (this process) serves them.
    fn handoff(&self, loaded: &LoadedTable) -> Option<Value> {
        match &loaded.ranges {
            Some(Ranges::Dendrite(_, Some(owner))) => Some(serde_json::json!({
                "ranges": owner.service.addr().to_string(),
                "token": owner.service.token(),
            })),
            _ => None,
        }
    }

    /// Every record read once through the cache, so the run starts at a 100% hit rate
    /// (000 §3.3); under CPR with scans of one length, every range a scan can ask for instead
    /// (002 §4.5 warms the cache the same way).
    fn warm(&self, run: &PolicyRun<'_>, dep: &Deployment, loaded: &LoadedTable) -> Result<()> {
        let range_length = match (&loaded.ranges, self.workload.scan_length) {
            (Some(Ranges::Dendrite(..)), ScanLength::Fixed(n)) => Some(n as i64),
            _ => None,
        };
        // With β = 0% a range's miss caches its records under their I leases, which the
        // overlapping ranges that other threads warm at the same time would wait for: the
        // records are warmed first, so the ranges' misses find them cached.
        let records_first = range_length.is_some() && self.opts.beta == 0;
        if range_length.is_none() || records_first {
            self.warm_pass(run, dep, loaded, None)?;
        }
        if range_length.is_some() {
            self.warm_pass(run, dep, loaded, range_length)?;
        }
        if let Some(ranges) = &loaded.ranges {
            *loaded.ranges_at_start.lock().expect("not poisoned") = ranges.snapshot();
        }
        Ok(())
    }

    fn thread(&self, loaded: &LoadedTable, ctx: &ThreadContext) -> YcsbThread {
        let w = &self.workload;
        YcsbThread {
            index: ctx.index,
            rng: Rng::new(
                ctx.seed
                    .wrapping_add((ctx.index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            ),
            operations: w.chooser().expect("checked with the options"),
            keys: match (self.opts.pattern_change, self.opts.failure_at()) {
                (Some(percent), Some(at)) => {
                    let (records, theta) = (self.opts.records as i64, self.opts.zipfian_constant);
                    let change = PatternChange::new(
                        records,
                        percent,
                        w.distribution,
                        theta,
                        ctx.started + at,
                    );
                    KeyChooser::changing(w.distribution, records, theta, change)
                }
                _ => KeyChooser::new(
                    w.distribution,
                    self.opts.records as i64,
                    loaded.expected_new_keys,
                    self.opts.zipfian_constant,
                    &loaded.inserts,
                ),
            },
            writes: 0,
        }
    }

    fn operate(
        &self,
        loaded: &LoadedTable,
        t: &mut YcsbThread,
        log: &mut Log,
        env: &Env<'_>,
    ) -> Step {
        let o = &self.opts;
        let (cads, table) = (env.cads, &loaded.table);
        let store = cads.store().as_ref();
        let op = t.operations.next(&mut t.rng);
        let start = env.clock.now();
        let misses = driver_misses();
        let mut reads = 0u64;
        // Records of a CPR scan that missed (its range came from the data store).
        let mut range_misses = 0u64;
        let outcome: Result<(), cads::Error> = match op {
            Operation::Read => {
                let id = self.id(t.keys.next(&mut t.rng, &loaded.inserts));
                reads += 1;
                let seen = match &loaded.ranges {
                    Some(Ranges::Zindex { zindex, .. }) => zindex
                        .read(store, &id)
                        .map(|doc| self.inspect(doc.as_ref()))
                        .map_err(baseline_error),
                    // The record as its text: checked without building it as a document.
                    _ => table.read_text(cads, &id).map(|text| {
                        let record = text.as_ref().map(RecordText::of);
                        self.inspect(record.as_ref())
                    }),
                };
                seen.map(|seen| {
                    log.reads.push(ReadRecord {
                        key: id_hash(&id),
                        seen,
                        start,
                        end: env.clock.now(),
                    });
                })
            }
            Operation::Update => {
                let id = self.id(t.keys.next(&mut t.rng, &loaded.inserts));
                t.writes += 1;
                let token = writer_token(t.index, t.writes);
                let changes = self.update(token, &mut t.rng);
                let result = if o.sabotage {
                    // Behind the framework's back: the cache keeps the old version.
                    cads.store()
                        .update(&o.table, &id, &changes)
                        .map(|_| ())
                        .map_err(cads::Error::from)
                } else {
                    match &loaded.ranges {
                        // Through the Dendrite, which changes the cached ranges holding it.
                        Some(Ranges::Dendrite(ranges, _)) => {
                            cads.run(|s| ranges.update(s, &id, changes.clone()))
                        }
                        Some(Ranges::Remote(owner)) => owner.write(&id, DocOp::Update(changes)),
                        Some(Ranges::Zindex { zindex, .. }) => {
                            zindex.update(store, &id, &changes).map_err(baseline_error)
                        }
                        // A session of its own, combined with concurrent updates of the record
                        // under write-back and write-through.
                        None => table.apply(cads, &id, changes),
                    }
                };
                log_write(log, &id, token, start, env.clock.now(), &result);
                result
            }
            Operation::Insert => {
                let keynum = loaded.inserts.next();
                let id = self.id(keynum);
                t.writes += 1;
                let token = writer_token(t.index, t.writes);
                let doc = record(token, self.workload.field_count, self.workload.field_length);
                let result = match &loaded.ranges {
                    Some(Ranges::Dendrite(ranges, _)) => {
                        cads.run(|s| ranges.insert(s, &id, doc.clone()))
                    }
                    Some(Ranges::Remote(owner)) => owner.write(&id, DocOp::Insert(doc)),
                    Some(Ranges::Zindex { zindex, .. }) => {
                        zindex.insert(store, &id, &doc).map_err(baseline_error)
                    }
                    None => cads.run(|s| table.insert(s, &id, doc.clone())),
                };
                log_write(log, &id, token, start, env.clock.now(), &result);
                // Acknowledged whatever the outcome, as YCSB does.
                loaded.inserts.acknowledge(keynum);
                result
            }
            Operation::Scan if loaded.ranges.is_some() => {
                let first = t.keys.next(&mut t.rng, &loaded.inserts);
                let last = first + self.workload.scan_length.next(&mut t.rng) as i64 - 1;
                let (lo, hi) = (self.id(first), self.id(last));
                let projected = self.projected(&mut t.rng);
                // With the records read from the data store: all of them when a Dendrite's
                // range missed (None), those Redis lacked under the baseline.
                let scanned = match loaded.ranges.as_ref().expect("matched") {
                    Ranges::Dendrite(ranges, _) => {
                        let calls = driver_store_calls();
                        let found = ranges.read(cads, &Point::Text(lo), &Point::Text(hi));
                        let missed = driver_store_calls() > calls;
                        found.map(|found| (found, (!missed).then_some(0)))
                    }
                    // Whether the owner's range missed is not known here: the scan's records stay
                    // out of the AppNode's hit ratio (the owner's `ranges` count its scans).
                    Ranges::Remote(owner) => owner
                        .read(&Point::Text(lo), &Point::Text(hi))
                        .map(|found| (found, Some(0))),
                    Ranges::Zindex { zindex, .. } => zindex
                        .scan(store, &lo, &hi)
                        .map(|(found, filled)| (found, Some(filled)))
                        .map_err(baseline_error),
                };
                let forwarded = matches!(loaded.ranges, Some(Ranges::Remote(_)));
                scanned.map(|(found, filled)| {
                    let reads_before = reads;
                    let end = env.clock.now();
                    // Every loaded record of the range must be in the result: one it lacks is
                    // read as missing, which the validator counts as stale. Inserted ones are
                    // checked when they are there (an insert that failed is acknowledged too).
                    let mut found = found.iter().peekable();
                    for k in first..=last {
                        let id = self.id(k);
                        while found.next_if(|(i, _)| *i < id).is_some() {}
                        let doc = found.next_if(|(i, _)| *i == id).map(|(_, d)| d);
                        if doc.is_none() && k >= o.records as i64 {
                            continue;
                        }
                        reads += u64::from(!forwarded);
                        log.reads.push(ReadRecord {
                            key: id_hash(&id),
                            seen: self.inspect(doc),
                            start,
                            end,
                        });
                        if let (Some(field), Some(doc)) = (&projected, doc) {
                            std::hint::black_box(doc.get(field));
                        }
                    }
                    range_misses = filled.unwrap_or(reads - reads_before);
                })
            }
            Operation::Scan => {
                let keynum = t.keys.next(&mut t.rng, &loaded.inserts);
                let from = Value::String(self.id(keynum));
                let len = self.workload.scan_length.next(&mut t.rng) as usize;
                let projected = self.projected(&mut t.rng);
                // No scan caching in the framework yet: the ids come from the data store, the
                // records through the cache, in the same session.
                let result = cads.run(|s| {
                    let rows = s.tx().documents().scan(
                        &o.table,
                        None,
                        Bound::Included(&from),
                        Bound::Unbounded,
                        len,
                    )?;
                    let mut records = Vec::with_capacity(rows.len());
                    for (id, _) in rows {
                        reads += 1;
                        let doc = table.get(s, &id)?;
                        records.push((id, doc));
                    }
                    Ok(records)
                });
                result.map(|records| {
                    let end = env.clock.now();
                    for (id, doc) in &records {
                        log.reads.push(ReadRecord {
                            key: id_hash(id),
                            seen: self.inspect(doc.as_ref()),
                            start,
                            end,
                        });
                        if let (Some(field), Some(doc)) = (&projected, doc) {
                            // The projection (YCSB^1) happens here: the document layer caches
                            // and returns whole documents.
                            std::hint::black_box(doc.get(field));
                        }
                    }
                })
            }
            Operation::ReadModifyWrite => {
                let id = self.id(t.keys.next(&mut t.rng, &loaded.inserts));
                t.writes += 1;
                let token = writer_token(t.index, t.writes);
                let changes = self.update(token, &mut t.rng);
                reads += 1;
                let result = match &loaded.ranges {
                    Some(Ranges::Zindex { zindex, .. }) => zindex
                        .read(store, &id)
                        .and_then(|doc| zindex.update(store, &id, &changes).map(|()| doc))
                        .map_err(baseline_error),
                    // The read here, the write on the ranges' owner: not one session.
                    Some(Ranges::Remote(owner)) => table.read(cads, &id).and_then(|doc| {
                        owner
                            .write(&id, DocOp::Update(changes.clone()))
                            .map(|()| doc)
                    }),
                    _ => cads.run(|s| {
                        let doc = table.get(s, &id)?;
                        match &loaded.ranges {
                            Some(Ranges::Dendrite(ranges, _)) => {
                                ranges.update(s, &id, changes.clone())?
                            }
                            _ => table.update(s, &id, changes.clone())?,
                        }
                        Ok(doc)
                    }),
                };
                let end = env.clock.now();
                log_write(log, &id, token, start, end, &result);
                result.map(|doc| {
                    log.reads.push(ReadRecord {
                        key: id_hash(&id),
                        seen: self.inspect(doc.as_ref()),
                        start,
                        end,
                    });
                })
            }
        };
        Step {
            kind: op.index(),
            outcome: match outcome {
                Ok(()) => Outcome::Done,
                Err(e) => Outcome::Failed(format!("{op}: {e}")),
            },
            cache_reads: reads,
            cache_misses: driver_misses() - misses + range_misses,
        }
    }

    /// Every read against the logged writes, then every record of the data store against its
    /// last acknowledged write.
    fn verify(
        &self,
        run: &PolicyRun<'_>,
        dep: &Deployment,
        table: &mut LoadedTable,
        measured: &Measured<Log>,
    ) -> Result<Verified<YcsbRun>> {
        let node = &measured.node;
        let log = &node.log;
        let started = Instant::now();
        let note = format!("{} reads, {} writes", log.reads.len(), log.writes.len());
        run.report(Phase::Verify, 0, None, started, note);
        let reads = check_reads(log);
        let stored = self.read_back(dep.cads.store().as_ref())?;
        let mut loaded: Vec<u64> = (0..self.opts.records as i64)
            .map(|k| id_hash(&self.id(k)))
            .collect();
        loaded.sort_unstable();
        let lost = check_final(log, &loaded, &stored);
        let note = format!("{} stale reads, {} lost writes", reads.stale, lost.lost);
        run.report(Phase::Verify, stored.len() as u64, None, started, note);
        let operations = node.completed();
        Ok(Verified {
            detail: YcsbRun {
                operations,
                failed_by_operation: reported_kinds(self, node)
                    .into_iter()
                    .map(|(i, name)| (name.to_string(), node.failed[i]))
                    .collect(),
                validated: Validated {
                    cache_reads: node.cache_reads,
                    cache_misses: node.cache_misses,
                    reads: reads.reads,
                    stale_examples: reads.examples,
                    lost_writes: lost.lost,
                    lost_examples: lost.examples,
                },
                scan: match &table.ranges {
                    Some(Ranges::Dendrite(..) | Ranges::Remote(_)) => Some(RANGES_NOTE),
                    Some(Ranges::Zindex { .. }) => Some(ZINDEX_NOTE),
                    None => (self.workload.scan > 0.0).then_some(SCAN_NOTE),
                },
                ranges: table.ranges.as_ref().map(|ranges| {
                    let RangeSnapshot {
                        stats: now,
                        redis_round_trips,
                    } = ranges.snapshot();
                    let at_start = *table.ranges_at_start.lock().expect("not poisoned");
                    let start = at_start.stats;
                    let scans = now.gets - start.gets;
                    let scan_misses = now.misses - start.misses;
                    RangeCounts {
                        scans,
                        scan_misses,
                        scan_hit_ratio: (scans > 0)
                            .then(|| (scans - scan_misses) as f64 / scans as f64),
                        cached_ranges: now.cached_intervals,
                        results_changed: now.results_changed - start.results_changed,
                        lease_waits: now.lease_waits - start.lease_waits,
                        redis_round_trips: redis_round_trips - at_start.redis_round_trips,
                        log_bytes: now.log_bytes,
                        log_appended_bytes: now.log.appended - start.log.appended,
                        log_compactions: now.log.compactions - start.log.compactions,
                        log_bytes_before_compaction: now.log.before_compaction
                            - start.log.before_compaction,
                        log_bytes_after_compaction: now.log.after_compaction
                            - start.log.after_compaction,
                    }
                }),
            },
            stale_reads: reads.stale,
            operations,
        })
    }

    fn config(&self, _loaded: &LoadedTable, _threads: usize) -> ConfigRecord {
        let o = &self.opts;
        ConfigRecord {
            workload: self.workload.clone(),
            records: o.records,
            duration_s: o.run_duration().map(|d| d.as_secs_f64()),
            operations: o.operations,
            zipfian_constant: o.zipfian_constant,
            field_count: self.workload.field_count,
            field_length: self.workload.field_length,
            insert_order: if self.workload.ranges {
                "ordered"
            } else {
                "hashed"
            },
            beta: self.workload.ranges.then_some(self.opts.beta),
            pattern_change: o.pattern_change,
            table: o.table.clone(),
            store_timeout_s: o.store_timeout.as_secs_f64(),
        }
    }
}
