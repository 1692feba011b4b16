//! CPR (002): range predicates cached, and kept consistent with the data store.
//!
//! A [`Dendrite`] owns the ranges of one ordered attribute of a collection: a document field
//! indexed for range scans, or the document id. [`Dendrite::get`] returns the documents whose
//! attribute lies in `[lo, hi]`, from one cache entry per predicate when it is cached (002's
//! β = 100%: each predicate's whole result), or (β = 0%) from each document's own entry, the
//! Dendrite keeping each cached range's ids; writes go through the Dendrite
//! ([`Dendrite::insert`], [`Dendrite::put`], [`Dendrite::update`], [`Dendrite::delete`]), which
//! finds the cached results they change and deletes them (write-around) or changes them in place
//! (write-through, and write-back, which also leaves the write buffered in the cache for the
//! workers to apply). The application names no interval: the Dendrite takes it from the documents.
//!
//! Four structures live in the Dendrite, as 002 §2 has them:
//! - **PrInT** (an interval tree, `cpr/intervals.rs`): the intervals whose results are cached,
//!   and their cache keys (β = 100%) or ids (β = 0%). A write looks up the intervals it
//!   overlaps.
//! - **LeMInT** (`cpr/lemint.rs`): Shared leases taken by a get that missed, from before its query to
//!   after its result is cached and entered in PrInT; eXclusive leases taken by a write, held to
//!   the end of its session. A miss and a write on overlapping intervals never run together, so
//!   a result computed before a write is never cached after it (Fig. 3a, 3b).
//! - **BuWrInT** (write-back): the points of documents whose writes may still be buffered,
//!   with their ids. A get that misses applies the buffered writes of the documents in its
//!   interval before it queries the data store (Fig. 3a), under its Shared lease; the entries it
//!   saw leave BuWrInT when its result enters PrInT.
//! - The CMIs' I and Q leases on the result keys, through the session, as for any key.
//!
//! PrInT's log records (`cpr/log.rs`, 002 §3.1) let a Dendrite made for the same attribute
//! take over from one that is gone: it rebuilds PrInT from them and keeps serving the results
//! cached before; under write-back it rebuilds BuWrInT from write-back's PendingWrites lists.
//!
//! Other processes reach the owner's Dendrite through a [`RemoteDendrite`] and the owner's
//! [`RangeService`] (`cpr/remote.rs`).
//!
//! What is not built yet (issue 15): ranges split among owners leased by the coordinator. Until then a Dendrite must be the only writer of its collection.

pub(crate) mod intervals;
pub(crate) mod lemint;
pub(crate) mod log;
mod remote;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cads_store::{DocOp, DocWrite, Document, FieldKind, StoreError};
use serde_json::Value;

use crate::cache_store::{CacheChange, CacheStore, DocRef};
use crate::documents::{self, Collection};
use crate::error::{Error, Result};
use crate::tx::StoreTx;
use crate::writeback::design1;
use crate::{Cads, Client, ClientError, Policy, Session};
pub use intervals::Interval;
use intervals::IntervalTree;
use lemint::{LeaseGuard, LeaseTable, Mode, Owner};
pub use log::LogCounts;
pub use remote::{RangeService, RemoteDendrite};

/// A value of a Dendrite's attribute. `Absent` stands for a document without the field (no
/// range holds it); it orders before every value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Point {
    Absent,
    Int(i64),
    Text(String),
    /// Not a value: the existence of the document with this id, which every write of it
    /// through a Dendrite by field leases, so that two writes of one document take turns
    /// wherever they move it. It orders after every value, so no range holds it.
    Doc(String),
}

impl Point {
    fn kind(&self) -> Option<FieldKind> {
        match self {
            Point::Absent | Point::Doc(_) => None,
            Point::Int(_) => Some(FieldKind::Int),
            Point::Text(_) => Some(FieldKind::Text),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Point::Absent | Point::Doc(_) => Value::Null,
            Point::Int(n) => Value::from(*n),
            Point::Text(s) => Value::from(s.as_str()),
        }
    }

    /// Appends an unambiguous form of the point to a cache key.
    fn encode(&self, out: &mut String) {
        match self {
            Point::Absent => out.push('-'),
            Point::Int(n) => out.push_str(&format!("i{n}")),
            Point::Text(s) => out.push_str(&format!("t{}.{s}", s.len())),
            Point::Doc(id) => out.push_str(&format!("d{}.{id}", id.len())),
        }
    }

    /// The point [`encode`](Self::encode) wrote at the start of `text`, and what follows it.
    fn decode(text: &str) -> Option<(Point, &str)> {
        let (tag, rest) = (*text.as_bytes().first()?, text.get(1..)?);
        match tag {
            b'-' => Some((Point::Absent, rest)),
            b'i' => {
                let end = rest
                    .char_indices()
                    .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                    .map_or(rest.len(), |(i, _)| i);
                Some((Point::Int(rest[..end].parse().ok()?), &rest[end..]))
            }
            b't' | b'd' => {
                let (len, after) = rest.split_once('.')?;
                let len: usize = len.parse().ok()?;
                let value = after.get(..len)?.to_string();
                let point = if tag == b't' {
                    Point::Text(value)
                } else {
                    Point::Doc(value)
                };
                Some((point, &after[len..]))
            }
            _ => None,
        }
    }
}

/// How a Dendrite is set up (002 §2, `Initialize`).
#[derive(Clone, Debug)]
pub struct DendriteConfig {
    /// The attribute: an indexed field of the collection, or None for the document id.
    pub field: Option<String>,
    /// The field's kind (the id is text).
    pub kind: FieldKind,
    /// The lowest and highest values a range may name (optional).
    pub min: Option<Point>,
    pub max: Option<Point>,
    /// The most documents one range may hold; a get of a larger one is an error.
    pub max_results: usize,
    /// How long a get that missed, or a write, waits for a conflicting lease on its interval
    /// (only a session that holds no lease of this Dendrite waits; see docs/ARCHITECTURE.md, "CPR").
    pub lease_wait: Duration,
    /// β (002 §2), the most data two cached results may share, in percent: 100 caches each
    /// range's whole result in one entry; 0 caches each document once, in the document layer's
    /// own entry, and keeps each range's ids in PrInT. In between, a range is cached whole
    /// unless its result would share more than β% of the smaller one's documents with a result
    /// already cached whole, and then as 0% caches it; which of the two a range is decided
    /// when it is first cached, for as long as the Dendrite lives.
    pub beta: u8,
    /// PrInT's log records (β > 0%): delete records are appended in batches of this many
    /// per CMI (002 §3.1's α).
    pub log_alpha: usize,
    /// A CMI's log is compacted once it holds more than this many bytes and twice what its last
    /// compaction left.
    pub log_compact_bytes: usize,
}

impl DendriteConfig {
    /// Ranges of document ids.
    pub fn by_id() -> DendriteConfig {
        DendriteConfig {
            field: None,
            kind: FieldKind::Text,
            min: None,
            max: None,
            max_results: 1000,
            lease_wait: Duration::from_secs(5),
            beta: 100,
            log_alpha: 16,
            log_compact_bytes: 256 * 1024,
        }
    }

    /// Ranges of an indexed field of this kind.
    pub fn by_field(field: &str, kind: FieldKind) -> DendriteConfig {
        DendriteConfig {
            field: Some(field.to_string()),
            kind,
            ..DendriteConfig::by_id()
        }
    }
}

/// What a Dendrite counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DendriteStats {
    /// Gets, and those that queried the data store.
    pub gets: u64,
    pub misses: u64,
    /// Intervals in PrInT now.
    pub cached_intervals: usize,
    /// Of those, the ones kept as lists of ids (β = 0%, or ranges 0% < β < 100% keeps so).
    pub cached_lists: usize,
    /// Writes, and the cached results they changed or deleted.
    pub writes: u64,
    pub results_changed: u64,
    /// Gets that missed and writes that waited for a conflicting interval lease.
    pub lease_waits: u64,
    /// Interval leases held now.
    pub leases_held: usize,
    /// Points in BuWrInT now (write-back).
    pub buffered_points: usize,
    /// PrInT's log records: their bytes in the CMIs now (as this Dendrite wrote them), and
    /// what they cost (bytes appended, compactions and the bytes before and after them).
    pub log_bytes: u64,
    pub log: LogCounts,
}

/// The owner of the ranges of one attribute of one collection.
#[derive(Clone)]
pub struct Dendrite {
    inner: Arc<Inner>,
}

struct Inner {
    collection: Collection,
    config: DendriteConfig,
    /// Drawn at creation; part of every key (see the module's documentation).
    generation: u64,
    /// PrInT: cached intervals, and what is cached of each.
    print: Mutex<IntervalTree<Point, Cached>>,
    /// LeMInT.
    lemint: Arc<LeaseTable<Point>>,
    /// BuWrInT (write-back): at each point, the ids of documents written there (before or after
    /// the write) whose writes may still be buffered.
    buwrint: Mutex<IntervalTree<Point, Vec<String>>>,
    /// PrInT's log records (β = 100% on CMIs).
    log: Option<log::PrintLog>,
    /// Delete records of intervals that left PrInT (with their results' keys), not given to the
    /// log yet: the next get or write of the Dendrite does it (it has the client). Their LSNs
    /// are drawn when the interval leaves, so an insert record of a miss that caches it again
    /// afterwards always has a higher one.
    left: Mutex<Vec<(Vec<u8>, String)>>,
    gets: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    results_changed: AtomicU64,
    /// Where the versions of β = 0%'s lists come from.
    list_versions: AtomicU64,
    /// 0% < β < 100%: how each range cached so far is cached, decided when it was first cached
    /// and kept for the Dendrite's life. A range's result key is filled only if the range is
    /// cached whole, so a range kept as a list never has a result that writes would not change.
    shapes: Mutex<BTreeMap<Interval<Point>, Shape>>,
}

/// How a range is cached under 0% < β < 100%.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Whole, as β = 100% caches it; the number of documents when first cached (None: taken
    /// over from the logs).
    Whole(Option<usize>),
    /// As a list of ids, as β = 0% caches it.
    Listed,
}

/// What PrInT keeps of a cached interval.
#[derive(Clone, Debug)]
enum Cached {
    /// β = 100%: the key of the entry holding the whole result.
    Result(Vec<u8>),
    /// β = 0%: the ids of the result, in its order, with their points; each document is cached
    /// in its own entry. The number is the list's version: it changes whenever a write changes
    /// the list, so a get that read the list can tell that it changed while it read the
    /// documents.
    Ids(Vec<(Point, String)>, u64),
}

/// A session's part in CPR: its owner id in LeMInT, the eXclusive leases its writes hold until
/// it ends, and what its end does to PrInT.
#[derive(Default)]
pub(crate) struct SessionLeases {
    owner: Option<Owner>,
    held: Vec<LeaseGuard<Point>>,
    /// Run when the session ends, told how.
    on_end: Vec<Box<dyn FnOnce(Ended) + Send>>,
    /// Documents the session wrote through a Dendrite by field (its generation, the id), as its
    /// writes leave them: the data store has them only once it commits.
    written: Vec<((u64, String), Option<Document>)>,
}

impl SessionLeases {
    fn owner(&mut self) -> Owner {
        *self.owner.get_or_insert_with(lemint::next_owner)
    }

    /// The session's commit returned: what that does to PrInT happens before its leases go, so
    /// no get can cache a result in between.
    pub(crate) fn end(self, ended: Ended) {
        for f in self.on_end {
            f(ended);
        }
        drop(self.held);
    }
}

/// How a session's commit ended, for what its writes do to PrInT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    Committed,
    /// Failed before the data store took anything.
    Failed,
    /// Failed in a way that may have left the writes in the data store (the data store timed
    /// out or went away during the commit).
    Unknown,
}

impl Ended {
    pub(crate) fn of(result: &Result<()>) -> Ended {
        match result {
            Ok(()) => Ended::Committed,
            Err(Error::Store(StoreError::Timeout(_) | StoreError::Unavailable(_))) => {
                Ended::Unknown
            }
            Err(_) => Ended::Failed,
        }
    }
}

impl Dendrite {
    /// A Dendrite for `config`'s attribute of `collection` under `cads`'s policy. CPR is built for
    /// write-around, write-through and write-back on CMIs (and the data store alone, where a get
    /// is a scan); cache-aside, SAS, TARDIS and Gemini are refused.
    pub fn new(cads: &Cads, collection: &Collection, config: DendriteConfig) -> Result<Dendrite> {
        let refused = match cads.policy() {
            Policy::CacheAside => Some("cache-aside"),
            _ if cads.config().sas.is_some() => Some("SAS"),
            _ if cads.config().tardis.is_some() => Some("TARDIS"),
            _ if cads.config().gemini => Some("Gemini"),
            _ => None,
        };
        if let Some(what) = refused {
            return Err(Error::App(format!(
                "CPR range caching is built for write-around, write-through and write-back, \
                 not {what}"
            )));
        }
        if let Some(path) = config.field.as_deref().filter(|f| f.contains('.')) {
            return Err(Error::App(format!(
                "a Dendrite orders by a top-level field, and {path:?} is a path"
            )));
        }
        if config.field.is_none() && config.kind != FieldKind::Text {
            return Err(Error::App(
                "document ids are text: a Dendrite by id needs FieldKind::Text".into(),
            ));
        }
        for bound in [&config.min, &config.max].into_iter().flatten() {
            if bound.kind() != Some(config.kind) {
                return Err(Error::App(format!(
                    "a domain bound of the wrong kind: {bound:?}"
                )));
            }
        }
        if config.beta > 100 {
            return Err(Error::App(format!(
                "beta {}%: a share of a result, between 0% and 100%",
                config.beta
            )));
        }
        if config.max_results == 0 {
            return Err(Error::App("max_results must be at least 1".into()));
        }
        // Takeover (002 §3.1): the ranges of an earlier Dendrite of this attribute whose
        // results may still be cached come back into PrInT from the logs, under its generation.
        let attribute = attribute_name(&config);
        if let (Some(client), 0) = (cads.cache(), config.beta) {
            // β = 0% logs nothing; its writes do not keep results of β = 100% right, so no
            // later Dendrite may take those over.
            log::discard(client, collection.name(), &attribute)?;
        }
        let client = cads.cache().filter(|_| config.beta > 0);
        let recovered = match client {
            Some(client) => log::recover(client, collection.name(), &attribute)?,
            None => None,
        };
        let generation = match &recovered {
            Some(r) => r.generation,
            None => {
                let mut drawn = [0u8; 8];
                getrandom::fill(&mut drawn)
                    .map_err(|e| Error::App(format!("no randomness: {e}")))?;
                u64::from_le_bytes(drawn)
            }
        };
        let log = client.map(|client| {
            log::PrintLog::new(
                collection.name(),
                &attribute,
                client.cmis(),
                generation,
                recovered.as_ref(),
                config.log_alpha,
                config.log_compact_bytes,
            )
        });
        let mut print = IntervalTree::new();
        let mut shapes = BTreeMap::new();
        for interval in recovered.map_or_else(Vec::new, |r| r.intervals) {
            let key = result_key(generation, collection.name(), &attribute, &interval);
            shapes.insert(interval.clone(), Shape::Whole(None));
            print.insert(interval, Cached::Result(key));
        }
        let inner = Inner {
            collection: collection.clone(),
            config,
            generation,
            print: Mutex::new(print),
            lemint: Arc::new(LeaseTable::default()),
            buwrint: Mutex::new(IntervalTree::new()),
            log,
            left: Mutex::default(),
            gets: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            results_changed: AtomicU64::new(0),
            list_versions: AtomicU64::new(0),
            shapes: Mutex::new(shapes),
        };
        inner.recover_buffered(cads)?;
        Ok(Dendrite {
            inner: Arc::new(inner),
        })
    }

    pub fn collection(&self) -> &Collection {
        &self.inner.collection
    }

    pub fn stats(&self) -> DendriteStats {
        let i = &self.inner;
        let (cached_intervals, cached_lists) = {
            let print = i.print.lock().expect("PrInT poisoned");
            let lists = print
                .iter()
                .into_iter()
                .filter(|(_, cached)| matches!(cached, Cached::Ids(..)))
                .count();
            (print.len(), lists)
        };
        DendriteStats {
            gets: i.gets.load(Ordering::Relaxed),
            misses: i.misses.load(Ordering::Relaxed),
            cached_intervals,
            cached_lists,
            writes: i.writes.load(Ordering::Relaxed),
            results_changed: i.results_changed.load(Ordering::Relaxed),
            lease_waits: i.lemint.waits(),
            leases_held: i.lemint.len(),
            buffered_points: i.buwrint.lock().expect("BuWrInT poisoned").len(),
            log_bytes: i.log.as_ref().map_or(0, log::PrintLog::bytes),
            log: i
                .log
                .as_ref()
                .map_or_else(Default::default, log::PrintLog::counts),
        }
    }

    /// The documents whose attribute lies in `[lo, hi]`, in order of it (then of id): from the
    /// cache when the range's result is cached, else from the data store, caching the result
    /// (Fig. 3a).
    pub fn get(
        &self,
        s: &mut Session<'_>,
        lo: &Point,
        hi: &Point,
    ) -> Result<Vec<(String, Document)>> {
        let inner = &self.inner;
        let interval = inner.range(lo, hi)?;
        inner.gets.fetch_add(1, Ordering::Relaxed);
        let owner = s.cpr().owner();
        // A session that holds no lease wrote nothing: hits skip LeMInT's lock.
        let writes_here = !s.cpr().held.is_empty() && inner.lemint.written(&interval, owner, true);
        if writes_here && s.framework().policy() == Policy::WriteBack {
            // The session's writes are buffered when it commits: the data store has none of them
            // yet, nor can it be brought up to date (002 leaves this case out too).
            return Err(Error::App(format!(
                "under write-back a session cannot get a range it wrote into before it commits \
                 ([{:?}, {:?}]): get it in a session of its own",
                interval.lo, interval.hi
            )));
        }
        if !s.framework().has_cache() || writes_here {
            // No cache, or this session writes into the range: its result may hold what the
            // session has not committed, so it is not cached.
            inner.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(inner.scan(s.tx(), &interval)?);
        }
        if inner.listed(&interval) {
            return inner.get_points(s, interval, owner);
        }
        let cads = s.framework();
        let query = RangeQuery::new(inner, cads, interval, owner);
        let result = s.read(&Ranges(inner), &query);
        inner.after_get(query, result)
    }

    /// [`get`](Self::get) in a session of its own. With β = 100% it goes through [`Cads::read`]:
    /// one cache round trip on a hit, where a session's get also validates its read when the
    /// session ends; with β = 0% a hit reads its documents in a session (two round trips).
    pub fn read(&self, cads: &Cads, lo: &Point, hi: &Point) -> Result<Vec<(String, Document)>> {
        let inner = &self.inner;
        let interval = inner.range(lo, hi)?;
        inner.gets.fetch_add(1, Ordering::Relaxed);
        if !cads.has_cache() {
            inner.misses.fetch_add(1, Ordering::Relaxed);
            return cads.run(|s| Ok(inner.scan(s.tx(), &interval)?));
        }
        if inner.listed(&interval) {
            return cads.run(|s| {
                let owner = s.cpr().owner();
                inner.get_points(s, interval.clone(), owner)
            });
        }
        let query = RangeQuery::new(inner, cads, interval, lemint::next_owner());
        let result = cads.read(&Ranges(inner), &query);
        inner.after_get(query, result)
    }

    /// Inserts a new document (the commit fails with a constraint error if its id exists; under
    /// write-back the insert is buffered, and applied as a put).
    pub fn insert(&self, s: &mut Session<'_>, id: &str, document: Document) -> Result<()> {
        self.write(s, id, DocOp::Insert(document))
    }

    /// Inserts or replaces a document.
    pub fn put(&self, s: &mut Session<'_>, id: &str, document: Document) -> Result<()> {
        self.write(s, id, DocOp::Put(document))
    }

    /// Applies change operators to a document (nothing if it is missing).
    pub fn update(
        &self,
        s: &mut Session<'_>,
        id: &str,
        changes: cads_store::Changes,
    ) -> Result<()> {
        self.write(s, id, DocOp::Update(changes))
    }

    pub fn delete(&self, s: &mut Session<'_>, id: &str) -> Result<()> {
        self.write(s, id, DocOp::Delete)
    }

    /// A write of document `id` (what [`insert`](Self::insert), [`put`](Self::put),
    /// [`update`](Self::update) and [`delete`](Self::delete) do). Fig. 3b: eXclusive leases on
    /// the points the write touches (see `lease_for_write`), then every cached result holding one
    /// deleted (write-around) or changed (write-through, write-back) with the write, and under
    /// β = 0% the lists of ids changed when the session ends.
    pub fn write(&self, s: &mut Session<'_>, id: &str, op: DocOp) -> Result<()> {
        let inner = &self.inner;
        cads_store::validate_id(id)?;
        let policy = s.framework().policy();
        if policy == Policy::DataStoreOnly {
            return s.write(&inner.collection, &(id.to_string(), op));
        }
        inner.writes.fetch_add(1, Ordering::Relaxed);
        if let Some(client) = s.framework().cache() {
            inner.log_left(client);
        }
        let (leases, after) = inner.lease_for_write(s, id, &op)?;
        // The cached results the write overlaps: whole ones (β = 100%) by key, lists of ids
        // (β = 0%) by interval.
        let mut entries: Vec<(Vec<u8>, Interval<Point>)> = Vec::new();
        let mut lists: Vec<Interval<Point>> = Vec::new();
        {
            let print = inner.print.lock().expect("PrInT poisoned");
            for lease in &leases {
                for (interval, cached) in print.overlapping(lease.interval()) {
                    match cached {
                        Cached::Result(key) if !entries.iter().any(|(k, _)| k == key) => {
                            entries.push((key.clone(), interval.clone()));
                        }
                        Cached::Ids(..) if !lists.contains(interval) => {
                            lists.push(interval.clone());
                        }
                        _ => {}
                    }
                }
            }
        }
        if policy == Policy::WriteBack {
            // The write is buffered when the session commits: its points enter BuWrInT then,
            // before its leases go, so a get that misses after them applies it first.
            let points: Vec<Point> = leases
                .iter()
                .map(|l| l.interval().lo.clone())
                .filter(|p| !matches!(p, Point::Doc(_)))
                .collect();
            // Whatever the commit's outcome: under write-back a cache commit reported as failed
            // may have left the buffered write on some replicas, and an entry whose write is
            // not buffered costs a miss one round trip.
            let (inner, id) = (self.inner.clone(), id.to_string());
            s.cpr()
                .on_end
                .push(Box::new(move |_| inner.note_buffered(points, &id)));
        }
        s.cpr().held.extend(leases);
        inner
            .results_changed
            .fetch_add((entries.len() + lists.len()) as u64, Ordering::Relaxed);
        if !lists.is_empty() {
            let membership = inner.membership(id, &op, after.as_ref());
            let (inner, id) = (self.inner.clone(), id.to_string());
            s.cpr().on_end.push(Box::new(move |ended| match ended {
                Ended::Committed => inner.change_lists(&lists, &id, Some(&membership)),
                Ended::Unknown => inner.change_lists(&lists, &id, None),
                Ended::Failed => {}
            }));
        }
        let write = RangeWrite {
            id: id.to_string(),
            op,
            after,
            entries,
        };
        s.write(&Ranges(inner), &write)?;
        if policy == Policy::WriteAround && !write.entries.is_empty() {
            // The results are deleted at commit; so are their intervals, before the lease goes.
            // Their delete records go to the log with the Dendrite's next operation.
            let gone = write.entries;
            let inner = self.inner.clone();
            s.cpr().on_end.push(Box::new(move |ended| {
                if ended == Ended::Committed {
                    let mut print = inner.print.lock().expect("PrInT poisoned");
                    for (_, interval) in &gone {
                        print.remove(interval);
                    }
                    drop(print);
                    if let Some(log) = &inner.log {
                        let records = gone
                            .into_iter()
                            .map(|(key, interval)| (key, log.delete_record(&interval)));
                        inner.left.lock().expect("not poisoned").extend(records);
                    }
                }
            }));
        }
        Ok(())
    }
}

/// Where a write leaves a document, for the lists of ids of β = 0%.
enum Membership {
    /// Deleted (or missing).
    Gone,
    /// At this point (it may have moved).
    At(Point),
    /// Where it was: an update by id, which cannot move it or make it exist.
    Unchanged,
}

impl Inner {
    /// Where the write `op` of `id` leaves the document (`after`: the document after it, where
    /// the Dendrite knows it).
    fn membership(&self, id: &str, op: &DocOp, after: Option<&Document>) -> Membership {
        match (op, after) {
            (DocOp::Delete, _) => Membership::Gone,
            (DocOp::Update(_), _) if self.config.field.is_none() => Membership::Unchanged,
            (_, Some(d)) => Membership::At(self.point_of(id, d)),
            (_, None) => Membership::Gone,
        }
    }

    /// At the end of a session that wrote `id`: the lists of ids of `intervals` take the write
    /// (`change`), or (None), if the session's commit failed and may still have reached the
    /// data store, leave PrInT (a range that is not in PrInT is read from the data store).
    fn change_lists(&self, intervals: &[Interval<Point>], id: &str, change: Option<&Membership>) {
        let mut print = self.print.lock().expect("PrInT poisoned");
        for interval in intervals {
            let Some(change) = change else {
                print.remove(interval);
                continue;
            };
            let Some(Cached::Ids(ids, version)) = print.get_mut(interval) else {
                continue;
            };
            *version = self.list_versions.fetch_add(1, Ordering::Relaxed);
            match change {
                Membership::Unchanged => {}
                Membership::Gone => ids.retain(|(_, i)| i != id),
                Membership::At(point) => {
                    ids.retain(|(_, i)| i != id);
                    if interval.contains(point) {
                        let entry = (point.clone(), id.to_string());
                        let place = ids.binary_search(&entry).unwrap_or_else(|p| p);
                        ids.insert(place, entry);
                    }
                }
            }
            if ids.len() > self.config.max_results {
                // Past the bound: the next get scans and reports the range as too large.
                print.remove(interval);
            }
        }
    }

    /// After a get: if it missed (it took the Shared lease), its result (if the fill was taken)
    /// is cached, and PrInT learns of it before the lease goes, so a write that follows finds it;
    /// the BuWrInT entries whose buffered writes the miss applied leave. A failure to apply them
    /// is the get's error.
    fn after_get(
        &self,
        query: RangeQuery,
        result: Result<Vec<(String, Document)>>,
    ) -> Result<Vec<(String, Document)>> {
        let RangeQuery {
            interval,
            key,
            shared,
            applied,
            uncached,
            listed,
            ..
        } = query;
        let applied = applied.into_inner().expect("not poisoned");
        let lease = shared.into_inner().expect("not poisoned");
        let result = match applied {
            Err(e) => return Err(e),
            Ok(applied) => {
                if result.is_ok() {
                    self.forget_buffered(applied);
                }
                result
            }
        };
        if let (Some(lease), Ok(_)) = (lease, &result) {
            self.misses.fetch_add(1, Ordering::Relaxed);
            let listed = listed.into_inner();
            // A miss that filled nothing (its read went around the cache) did not ask the
            // range's shape: one kept as a list must not enter PrInT as a whole result.
            let uncached = uncached.into_inner() || (!listed && self.listed(&interval));
            let cached = match (&result, listed) {
                (Ok(rows), true) => Cached::Ids(
                    rows.iter()
                        .map(|(id, d)| (self.point_of(id, d), id.clone()))
                        .collect(),
                    self.list_versions.fetch_add(1, Ordering::Relaxed),
                ),
                _ => Cached::Result(key),
            };
            if !uncached {
                self.print
                    .lock()
                    .expect("PrInT poisoned")
                    .insert(interval, cached);
            }
            drop(lease);
        }
        result
    }

    /// Whether gets of `interval` read a list of ids (β = 0%, or a range kept as one).
    fn listed(&self, interval: &Interval<Point>) -> bool {
        match self.config.beta {
            0 => true,
            100 => false,
            _ => {
                let shapes = self.shapes.lock().expect("not poisoned");
                shapes.get(interval) == Some(&Shape::Listed)
            }
        }
    }

    /// How a range whose result is `rows` is cached: whole, unless (0% < β < 100%) it would
    /// share more than β% of the smaller one's documents with a result already cached whole.
    /// Decided the first time, under the shapes' lock, so concurrent misses agree.
    fn shape(&self, interval: &Interval<Point>, rows: &[(String, Document)]) -> Shape {
        if self.config.beta == 100 {
            return Shape::Whole(Some(rows.len()));
        }
        let mut shapes = self.shapes.lock().expect("not poisoned");
        if let Some(shape) = shapes.get(interval) {
            return *shape;
        }
        let points: Vec<Point> = rows.iter().map(|(id, d)| self.point_of(id, d)).collect();
        let beta = self.config.beta as usize;
        let shares_too_much = self
            .print
            .lock()
            .expect("PrInT poisoned")
            .overlapping(interval)
            .into_iter()
            .filter(|(other, cached)| *other != interval && matches!(cached, Cached::Result(_)))
            .any(|(other, _)| {
                let shared = points.iter().filter(|p| other.contains(p)).count();
                let theirs = match shapes.get(other) {
                    Some(Shape::Whole(Some(n))) => *n,
                    _ => rows.len(),
                };
                let smaller = rows.len().min(theirs);
                smaller > 0 && shared * 100 > beta * smaller
            });
        let shape = if shares_too_much {
            Shape::Listed
        } else {
            Shape::Whole(Some(rows.len()))
        };
        shapes.insert(interval.clone(), shape);
        shape
    }

    /// Write-back: `id` was written at `points` by a session that committed (or may have).
    fn note_buffered(&self, points: Vec<Point>, id: &str) {
        let mut buwrint = self.buwrint.lock().expect("BuWrInT poisoned");
        for point in points {
            let at = Interval::new(point.clone(), point).expect("a point");
            match buwrint.get_mut(&at) {
                Some(ids) if ids.iter().any(|i| i == id) => {}
                Some(ids) => ids.push(id.to_string()),
                None => {
                    buwrint.insert(at, vec![id.to_string()]);
                }
            }
        }
    }

    /// Write-back, before a get that missed queries the data store (Fig. 3a): the buffered writes
    /// of the documents BuWrInT has in `interval` go to the data store. The caller holds the
    /// Shared lease on the interval, so no write of it is under way and none can add to BuWrInT
    /// there; returns the entries seen, for [`forget_buffered`](Self::forget_buffered) once the
    /// result is computed.
    fn apply_buffered(
        &self,
        cads: &Cads,
        interval: &Interval<Point>,
    ) -> Result<Vec<(Point, String)>> {
        if cads.policy() != Policy::WriteBack {
            return Ok(Vec::new());
        }
        let seen: Vec<(Point, String)> = self
            .buwrint
            .lock()
            .expect("BuWrInT poisoned")
            .overlapping(interval)
            .into_iter()
            .flat_map(|(at, ids)| ids.iter().map(|id| (at.lo.clone(), id.clone())))
            .collect();
        let mut docs: Vec<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
        docs.sort_unstable();
        docs.dedup();
        for id in docs {
            let doc = self.collection.doc_ref(id);
            if design1::has_buffered(cads, &doc)? {
                design1::apply_buffered(cads, &doc)?;
            }
        }
        Ok(seen)
    }

    /// The BuWrInT entries a get applied leave it (their writes are in the data store).
    fn forget_buffered(&self, seen: Vec<(Point, String)>) {
        let mut buwrint = self.buwrint.lock().expect("BuWrInT poisoned");
        for (point, id) in seen {
            let at = Interval::new(point.clone(), point).expect("a point");
            let Some(ids) = buwrint.get_mut(&at) else {
                continue;
            };
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                buwrint.remove(&at);
            }
        }
    }

    /// A get with β = 0%. A hit is the interval's ids in PrInT and their documents' entries (one
    /// round trip; a document missing there is read from the data store and cached, as by the
    /// document layer). A miss takes the Shared lease, scans the data store, caches each
    /// document under its I lease (no write can change them while the lease is held) and
    /// enters the ids in PrInT before the lease goes.
    fn get_points(
        &self,
        s: &mut Session<'_>,
        interval: Interval<Point>,
        owner: Owner,
    ) -> Result<Vec<(String, Document)>> {
        let listed = match self.print.lock().expect("PrInT poisoned").get(&interval) {
            Some(Cached::Ids(ids, version)) => {
                Some((ids.iter().map(|(_, id)| id.clone()).collect(), *version))
            }
            _ => None,
        };
        if let Some((ids, version)) = listed {
            crate::failpoints::cpr_list_read();
            let query = RecordsQuery { ids, known: None };
            let found = s.read(&Records(self), &query)?;
            // The list and the documents agree if no write changed the list meanwhile (its
            // version) and none is under way in the range (it changes documents before the
            // list); else the get is a miss.
            let unchanged = matches!(
                self.print.lock().expect("PrInT poisoned").get(&interval),
                Some(Cached::Ids(_, v)) if *v == version
            );
            if unchanged && !self.lemint.written(&interval, owner, false) {
                return Ok(query
                    .ids
                    .into_iter()
                    .zip(found)
                    .filter_map(|(id, d)| d.map(|d| (id, d)))
                    .collect());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let lease = self.shared_lease(&interval, owner)?;
        let applied = self.apply_buffered(s.framework(), &interval)?;
        let rows = self.scan(s.tx(), &interval)?;
        let query = RecordsQuery {
            ids: rows.iter().map(|(id, _)| id.clone()).collect(),
            known: Some(rows.iter().map(|(_, d)| Some(d.clone())).collect()),
        };
        s.read(&Records(self), &query)?;
        // The list is this mode's fill: it enters PrInT now.
        crate::failpoints::before_fill();
        let ids = rows
            .iter()
            .map(|(id, d)| (self.point_of(id, d), id.clone()))
            .collect();
        self.print.lock().expect("PrInT poisoned").insert(
            interval,
            Cached::Ids(ids, self.list_versions.fetch_add(1, Ordering::Relaxed)),
        );
        self.forget_buffered(applied);
        drop(lease);
        Ok(rows)
    }

    fn point_of(&self, id: &str, document: &Document) -> Point {
        point_in(self.config.field.as_deref(), self.config.kind, id, document)
    }

    /// `[lo, hi]` checked against the Dendrite's kind and domain.
    fn range(&self, lo: &Point, hi: &Point) -> Result<Interval<Point>> {
        let c = &self.config;
        for p in [lo, hi] {
            if p.kind() != Some(c.kind) {
                return Err(Error::App(format!(
                    "a range bound of the wrong kind: {p:?} (the attribute is {:?})",
                    c.kind
                )));
            }
        }
        if c.min.as_ref().is_some_and(|min| lo < min) || c.max.as_ref().is_some_and(|max| hi > max)
        {
            return Err(Error::App(format!(
                "range [{lo:?}, {hi:?}] outside the domain"
            )));
        }
        Interval::new(lo.clone(), hi.clone())
            .ok_or_else(|| Error::App(format!("empty range: {lo:?} > {hi:?}")))
    }

    /// The cache key of a range's result.
    fn key(&self, interval: &Interval<Point>) -> Vec<u8> {
        let attribute = attribute_name(&self.config);
        result_key(
            self.generation,
            self.collection.name(),
            &attribute,
            interval,
        )
    }

    /// Write-back: documents of the collection whose writes are buffered now, written before
    /// this Dendrite (by one it replaces, or through the document layer), enter BuWrInT, so that
    /// gets that miss apply them. By id a document's point is its id; by field the points its
    /// buffered writes moved it between are not known without reading them, so its writes are
    /// applied now instead.
    fn recover_buffered(&self, cads: &Cads) -> Result<()> {
        if cads.policy() != Policy::WriteBack || !cads.has_cache() {
            return Ok(());
        }
        let partitions: Vec<usize> = (0..cads.buffer_partitions()).collect();
        let listed = design1::pending_in(cads, &partitions)?;
        for doc in listed.docs.into_iter().flatten() {
            if doc.collection != self.collection.name() {
                continue;
            }
            match self.config.field {
                None => self.note_buffered(vec![Point::Text(doc.id.clone())], &doc.id),
                Some(_) => {
                    design1::apply_buffered(cads, &doc)?;
                }
            }
        }
        Ok(())
    }

    /// The log record of `interval` entering PrInT (with the delete records waiting).
    /// The record goes to the CMI the result would be filled on: if that CMI cannot be
    /// reached, neither can the fill, and the get goes on without either.
    fn log_insert(&self, cads: &Cads, key: &[u8], interval: &Interval<Point>) -> Result<()> {
        let (Some(log), Some(client)) = (&self.log, cads.cache()) else {
            return Ok(());
        };
        self.log_left(client);
        match log.insert(client, key, interval) {
            Err(Error::Cache(e)) if e.is_unavailable() => Ok(()),
            other => other,
        }
    }

    /// Hands the delete records of intervals that left PrInT to the log. One that cannot be
    /// written is dropped: it would only have removed an interval whose result is gone.
    fn log_left(&self, client: &Client) {
        let Some(log) = &self.log else {
            return;
        };
        let left = std::mem::take(&mut *self.left.lock().expect("not poisoned"));
        for (key, record) in left {
            if let Err(e) = log.delete(client, &key, record) {
                tracing::debug!(error = %e, "CPR: a delete record was not logged");
            }
        }
    }

    /// A miss's Shared lease on its interval (Fig. 3a line 6). A conflict that outlasts the
    /// wait is the data store's kind of lock conflict: the session runs again.
    fn shared_lease(
        &self,
        interval: &Interval<Point>,
        owner: Owner,
    ) -> Result<LeaseGuard<Point>, StoreError> {
        let mut granted = self
            .lemint
            .acquire(
                vec![interval.clone()],
                owner,
                Mode::Shared,
                self.config.lease_wait,
            )
            .map_err(|c| {
                StoreError::Conflict(format!(
                    "CPR: a {:?} lease on an interval overlapping [{:?}, {:?}]",
                    c.held, interval.lo, interval.hi
                ))
            })?;
        Ok(granted.pop().expect("one interval asked, one granted"))
    }

    /// The range's documents from the data store.
    fn scan(
        &self,
        tx: &mut StoreTx<'_>,
        interval: &Interval<Point>,
    ) -> Result<Vec<(String, Document)>, StoreError> {
        let (lo, hi) = (interval.lo.to_json(), interval.hi.to_json());
        let max = self.config.max_results;
        let rows = tx.documents().scan(
            self.collection.name(),
            self.config.field.as_deref(),
            Bound::Included(&lo),
            Bound::Included(&hi),
            max + 1,
        )?;
        if rows.len() > max {
            return Err(StoreError::Invalid(format!(
                "the range [{:?}, {:?}] holds more than {max} documents (the Dendrite's max_results)",
                interval.lo, interval.hi
            )));
        }
        Ok(rows)
    }

    /// The eXclusive leases for a write of `id`, and the document after the write where the
    /// Dendrite had to read it. By id, the lease is on the id. By field, it is on the document's
    /// value before the write and after it (the ranges holding either are the ones the write
    /// changes) and on its existence ([`Point::Doc`]), with the document read from the data
    /// store. Once the leases are held no other write can change the document, so it is read
    /// again, the write applied to what is read, and the leases taken anew if its values fell
    /// outside them.
    fn lease_for_write(
        &self,
        s: &mut Session<'_>,
        id: &str,
        op: &DocOp,
    ) -> Result<(Vec<LeaseGuard<Point>>, Option<Document>)> {
        let owner = s.cpr().owner();
        let wait = self.config.lease_wait;
        let acquire = |points: &[Point]| {
            let intervals = points
                .iter()
                .map(|p| Interval::new(p.clone(), p.clone()).expect("a point"))
                .collect();
            self.lemint
                .acquire(intervals, owner, Mode::Exclusive, wait)
                .map_err(|c| Error::Aborted {
                    reason: format!("CPR: a write of {id} meets a {:?} lease", c.held),
                })
        };
        if self.config.field.is_none() {
            let after = match op {
                DocOp::Insert(d) | DocOp::Put(d) => Some(d.clone()),
                _ => None,
            };
            return Ok((acquire(&[Point::Text(id.to_string())])?, after));
        }
        // The points a write from `before` to `after` leases, in order, without repeats.
        let points = |before: &Option<Document>, after: &Option<Document>| {
            let mut points = vec![Point::Doc(id.to_string())];
            for d in [before, after].into_iter().flatten() {
                let p = self.point_of(id, d);
                if p != Point::Absent && !points.contains(&p) {
                    points.push(p);
                }
            }
            points.sort();
            points
        };
        let written = (self.generation, id.to_string());
        let mine = s.cpr().written.iter().position(|(w, _)| *w == written);
        if let Some(at) = mine {
            // Written earlier in this session: its leases hold the document where that write
            // left it.
            let before = s.cpr().written[at].1.clone();
            let after = op.apply(before.clone())?;
            let leases = acquire(&points(&before, &after))?;
            s.cpr().written[at].1 = after.clone();
            return Ok((leases, after));
        }
        const ATTEMPTS: usize = 8;
        for _ in 0..ATTEMPTS {
            let before = self.current(s, id)?;
            let guess = points(&before, &op.apply(before.clone())?);
            crate::failpoints::cpr_write_leasing();
            let leases = acquire(&guess)?;
            let now = self.current(s, id)?;
            let after = op.apply(now.clone())?;
            if points(&now, &after).iter().all(|p| guess.contains(p)) {
                s.cpr().written.push((written, after.clone()));
                return Ok((leases, after));
            }
        }
        Err(Error::Aborted {
            reason: format!("CPR: document {id} kept moving while its write waited"),
        })
    }
}

impl Inner {
    /// The document `id` as the last write left it: from the data store, or under write-back
    /// (whose data store may lack buffered writes) through the document layer, whose miss
    /// applies them first.
    fn current(&self, s: &mut Session<'_>, id: &str) -> Result<Option<Document>> {
        if s.framework().policy() == Policy::WriteBack {
            self.collection.get(s, id)
        } else {
            Ok(s.tx().documents().get(self.collection.name(), id)?)
        }
    }
}

/// A get: the range, its key, the Shared lease its miss takes, and (write-back) the BuWrInT
/// entries whose buffered writes the miss applied, or why it could not.
struct RangeQuery<'c> {
    interval: Interval<Point>,
    key: Vec<u8>,
    owner: Owner,
    cads: &'c Cads,
    shared: Mutex<Option<LeaseGuard<Point>>>,
    applied: Mutex<Result<Vec<(Point, String)>>>,
    /// Its log record found no room in the CMI's pinned memory: the result is returned, not
    /// cached (002 §4.1).
    uncached: AtomicBool,
    /// 0% < β < 100%: the range is kept as a list of ids, not cached whole.
    listed: AtomicBool,
}

impl<'c> RangeQuery<'c> {
    fn new(inner: &Inner, cads: &'c Cads, interval: Interval<Point>, owner: Owner) -> Self {
        RangeQuery {
            key: inner.key(&interval),
            interval,
            owner,
            cads,
            shared: Mutex::new(None),
            applied: Mutex::new(Ok(Vec::new())),
            uncached: AtomicBool::new(false),
            listed: AtomicBool::new(false),
        }
    }
}

/// A write through a Dendrite: the document's write, the document after it when known, and the
/// cached results it overlaps (key, interval).
struct RangeWrite {
    id: String,
    op: DocOp,
    after: Option<Document>,
    entries: Vec<(Vec<u8>, Interval<Point>)>,
}

/// The session's view of a Dendrite's results.
struct Ranges<'d>(&'d Inner);

/// β = 0%: documents of a range, each in the document layer's entry, and (on a miss) as the
/// Dendrite's scan found them.
struct RecordsQuery {
    ids: Vec<String>,
    known: Option<Vec<Option<Document>>>,
}

/// The session's view of a β = 0% Dendrite's documents, for reading them: the Dendrite's
/// writes go through [`Ranges`], so the write half of the trait does nothing here.
struct Records<'d>(&'d Inner);

impl CacheStore for Records<'_> {
    type Query = RecordsQuery;
    type Write = ();
    type Output = Vec<Option<Document>>;

    fn keys_read(&self, query: &RecordsQuery) -> Vec<Vec<u8>> {
        query
            .ids
            .iter()
            .map(|id| self.0.collection.key(id))
            .collect()
    }

    fn result_from_cache(&self, _query: &RecordsQuery, values: &[Vec<u8>]) -> Option<Self::Output> {
        values
            .iter()
            .map(|v| documents::decode(v).map(Some))
            .collect()
    }

    fn query_store(
        &self,
        query: &RecordsQuery,
        tx: &mut StoreTx<'_>,
    ) -> Result<Self::Output, StoreError> {
        if let Some(known) = &query.known {
            return Ok(known.clone());
        }
        let ids: Vec<&str> = query.ids.iter().map(String::as_str).collect();
        let mut found = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            found.extend(tx.documents().get_many(self.0.collection.name(), chunk)?);
        }
        Ok(found)
    }

    fn entries(&self, query: &RecordsQuery, output: &Self::Output) -> Vec<(Vec<u8>, Vec<u8>)> {
        query
            .ids
            .iter()
            .zip(output)
            .filter_map(|(id, d)| {
                d.as_ref()
                    .map(|d| (self.0.collection.key(id), documents::encode(d)))
            })
            .collect()
    }

    /// Write-back: documents read from the data store (a hit whose entries missed) may have
    /// buffered writes, applied first as the document layer's reads apply them. A miss's
    /// documents (`known`) come from its scan, after its range's buffered writes were applied.
    fn buffered_reads(&self, query: &RecordsQuery) -> Vec<DocRef> {
        match query.known {
            Some(_) => Vec::new(),
            None => query
                .ids
                .iter()
                .map(|id| self.0.collection.doc_ref(id))
                .collect(),
        }
    }

    fn keys_written(&self, _write: &()) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn write_store(&self, _write: &(), _tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        Ok(())
    }

    fn cache_change(&self, _write: &(), _key: &[u8]) -> CacheChange {
        CacheChange::Delete
    }
}

fn encode(result: &[(String, Document)]) -> Vec<u8> {
    serde_json::to_vec(result).expect("documents serialize")
}

fn decode(bytes: &[u8]) -> Option<Vec<(String, Document)>> {
    serde_json::from_slice(bytes).ok()
}

impl<'c> CacheStore for Ranges<'c> {
    type Query = RangeQuery<'c>;
    type Write = RangeWrite;
    type Output = Vec<(String, Document)>;

    fn keys_read(&self, query: &RangeQuery<'c>) -> Vec<Vec<u8>> {
        vec![query.key.clone()]
    }

    fn result_from_cache(
        &self,
        _query: &RangeQuery<'c>,
        values: &[Vec<u8>],
    ) -> Option<Self::Output> {
        values.first().and_then(|v| decode(v))
    }

    /// A miss: the Shared lease on the interval first (Fig. 3a line 6), kept by the query until
    /// the result is in PrInT; under write-back, the buffered writes in the interval applied.
    fn query_store(
        &self,
        query: &RangeQuery<'c>,
        tx: &mut StoreTx<'_>,
    ) -> Result<Self::Output, StoreError> {
        // A failure that is not the data store's is kept for `after_get`, which reports it as
        // it is; the session sees an error it does not retry, so no retry can fill a result
        // that PrInT would not learn of.
        let failed = || StoreError::Backend("CPR: see the range's own error".into());
        let mut applied = query.applied.lock().expect("not poisoned");
        if applied.is_err() {
            return Err(failed());
        }
        let mut shared = query.shared.lock().expect("not poisoned");
        if shared.is_none() {
            *shared = Some(self.0.shared_lease(&query.interval, query.owner)?);
        }
        drop(shared);
        // The interval's log record goes before its result is filled (002 §3.1), on every
        // attempt: the CMI may have lost an earlier attempt's record with its content.
        match self.0.log_insert(query.cads, &query.key, &query.interval) {
            Ok(()) => {}
            // Pinned memory is full: no result is cached until it has room again.
            Err(Error::Cache(ClientError::NotStored)) => {
                query.uncached.store(true, Ordering::Relaxed);
            }
            Err(e) => {
                *applied = Err(e);
                return Err(failed());
            }
        }
        match self.0.apply_buffered(query.cads, &query.interval) {
            Ok(seen) => applied.as_mut().expect("checked above").extend(seen),
            Err(Error::Store(e)) => return Err(e),
            Err(e) => {
                *applied = Err(e);
                return Err(failed());
            }
        }
        drop(applied);
        self.0.scan(tx, &query.interval)
    }

    /// Write-back: the document's write, buffered as the document layer buffers it.
    fn buffer(&self, write: &RangeWrite) -> Vec<(DocRef, DocOp)> {
        vec![(self.0.collection.doc_ref(&write.id), write.op.clone())]
    }

    fn entries(&self, query: &RangeQuery<'c>, output: &Self::Output) -> Vec<(Vec<u8>, Vec<u8>)> {
        if query.uncached.load(Ordering::Relaxed) {
            return Vec::new();
        }
        if self.0.shape(&query.interval, output) == Shape::Listed {
            // Kept as a list of ids (`after_get`); its first hit reads the documents into their
            // own entries.
            query.listed.store(true, Ordering::Relaxed);
            return Vec::new();
        }
        vec![(query.key.clone(), encode(output))]
    }

    fn keys_written(&self, write: &RangeWrite) -> Vec<Vec<u8>> {
        let mut keys = vec![self.0.collection.key(&write.id)];
        keys.extend(write.entries.iter().map(|(k, _)| k.clone()));
        keys
    }

    fn write_store(&self, write: &RangeWrite, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        tx.write_document(DocWrite {
            collection: self.0.collection.name().to_string(),
            id: write.id.clone(),
            op: write.op.clone(),
        });
        Ok(())
    }

    /// Write-through: the document's own entry as the document layer changes it; each cached
    /// result read, changed and written back (the Cache Update Func of Fig. 3b).
    fn cache_change(&self, write: &RangeWrite, key: &[u8]) -> CacheChange {
        let Some((_, interval)) = write.entries.iter().find(|(k, _)| k == key) else {
            return self
                .0
                .collection
                .cache_change(&(write.id.clone(), write.op.clone()), key);
        };
        let interval = interval.clone();
        let id = write.id.clone();
        let op = write.op.clone();
        let after = write.after.clone();
        let field = self.0.config.field.clone();
        let kind = self.0.config.kind;
        let max = self.0.config.max_results;
        CacheChange::Modify(Box::new(move |cached| {
            let mut result = decode(cached)?;
            let at = result.iter().position(|(i, _)| *i == id);
            let document = match (&op, at) {
                (DocOp::Delete, _) => None,
                (DocOp::Insert(d) | DocOp::Put(d), _) => Some(d.clone()),
                (DocOp::Update(changes), Some(at)) => {
                    let mut d = result[at].1.clone();
                    // A change the document cannot take fails the write in the data store too;
                    // the entry goes.
                    changes.apply(&mut d).ok()?;
                    Some(d)
                }
                // Not in the result: by id, the document does not exist (the result holds every
                // id of the range); by field, `after` is what the write makes of it.
                (DocOp::Update(_), None) => after,
            };
            if let Some(at) = at {
                result.remove(at);
            }
            if let Some(document) = document {
                let point = point_in(field.as_deref(), kind, &id, &document);
                if interval.contains(&point) {
                    let place = result
                        .binary_search_by(|(i, d)| {
                            (point_in(field.as_deref(), kind, i, d), i.as_str())
                                .cmp(&(point.clone(), id.as_str()))
                        })
                        .unwrap_or_else(|p| p);
                    result.insert(place, (id, document));
                }
            }
            // A result grown past the bound is dropped: the next get reports it as too large.
            (result.len() <= max).then(|| encode(&result))
        }))
    }
}

/// How keys and logs name a Dendrite's attribute.
fn attribute_name(config: &DendriteConfig) -> String {
    match &config.field {
        None => "id".to_string(),
        Some(f) => format!("f{}.{f}", f.len()),
    }
}

/// The cache key of the result of `interval` for a Dendrite of `generation`.
fn result_key(
    generation: u64,
    collection: &str,
    attribute: &str,
    interval: &Interval<Point>,
) -> Vec<u8> {
    let mut key = format!("cpr:{generation:x}:{collection}:{attribute}:");
    interval.lo.encode(&mut key);
    key.push(':');
    interval.hi.encode(&mut key);
    key.into_bytes()
}

/// The point of a document on an attribute: its id, or the field's value if of the kind.
fn point_in(field: Option<&str>, kind: FieldKind, id: &str, document: &Document) -> Point {
    match field {
        None => Point::Text(id.to_string()),
        Some(field) => match (document.get(field), kind) {
            (Some(Value::Number(n)), FieldKind::Int) => {
                n.as_i64().map_or(Point::Absent, Point::Int)
            }
            (Some(Value::String(s)), FieldKind::Text) => Point::Text(s.clone()),
            _ => Point::Absent,
        },
    }
}
