//! Design 2 (000 §3.2, 003 Algorithms 3 and 4): one buffered write per session, for sessions
//! whose data-store transaction changes several rows (TPC-C).
//!
//! - A committing session's SQL statements become one *session object* `BS:<id>` (Definition
//!   3.2), pinned on R CMIs, with the cache keys it affects and its query result changes.
//! - The *queue* `SQ:<name>` lists session ids in commit order: a session appends its id under an
//!   exclusive lease held until its commit, so two sessions of a queue are listed in the order
//!   they committed. `SQS` lists the queues, for workers to find them.
//! - The *mapping* `SM:<cache key>` lists the sessions with pending changes to that key's value,
//!   for every key the session wrote or left a query result change for.
//! - Workers apply a queue's sessions in order, `batch` at a time, each batch in one data-store
//!   transaction that also inserts the session ids into `cads_applied_sessions`; an id already
//!   there was applied by a worker that died before deleting the session object, and is skipped
//!   (Algorithm 4). Exactly-once rests on that table's primary key, not on leases.
//! - Every `compact_every` applied sessions, or an eighth of the queue as read if that is more
//!   (or when the queue runs dry), the ids leave the queue, the mappings and the table.
//! - A read that misses a key with pending sessions either applies them, with every session
//!   queued before them, and then queries the data store (Algorithm 1), or, when each of them left
//!   a query result change for the key, queries the data store and folds the changes in
//!   (Algorithm 3).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use cads_client::{ClientError, Session as CacheSession, Write, Written};
use cads_store::{parse_json, SqlTransaction, SqlValue, StoreError};
use serde_json::Value;

use super::mac::Seal;
use super::replicated::{
    append_line, open_lines, placed, present_many, purge_list, read_all, read_many, remove_lines,
    rewrite_lists, sealed_line,
};
use super::{Refusal, Refused};
use crate::attempts::Attempts;
use crate::error::{Error, Result};
use crate::failpoints;
use crate::hex::{push_hex, unhex};
use crate::Cads;

/// A SQL statement buffered by a write-back session, with its `?` parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<SqlValue>,
    /// How many rows the statement must change when it is applied, if the session counts on it:
    /// a change guarded by a value the session read (`... WHERE next_id = ?`) holds only if the
    /// sessions before it were applied in order. An apply that finds another count fails loudly
    /// and its queue waits, rather than skipping the change.
    pub rows: Option<u64>,
}

impl Statement {
    pub fn new(sql: impl Into<String>, params: Vec<SqlValue>) -> Statement {
        Statement {
            sql: sql.into(),
            params,
            rows: None,
        }
    }

    /// The statement, required to change exactly `rows` rows when applied.
    pub fn changing(mut self, rows: u64) -> Statement {
        self.rows = Some(rows);
        self
    }
}

/// What a write buffers under write-back's Design 2 (see
/// [`CacheStore::buffer_sql`](crate::CacheStore::buffer_sql)).
#[derive(Clone, Debug, PartialEq)]
pub struct SqlBuffer {
    /// The queue the session joins (TPC-C: one per warehouse). Sessions of a queue reach the data
    /// store in the order they committed; queues are applied independently of one another.
    pub queue: String,
    pub statements: Vec<Statement>,
}

/// The table that records applied sessions.
pub const APPLIED_SESSIONS: &str = "cads_applied_sessions";

/// The longest queue name.
pub const MAX_QUEUE_NAME: usize = 200;

const QUEUES_KEY: &[u8] = b"SQS";

fn session_key(id: &str) -> Vec<u8> {
    format!("BS:{id}").into_bytes()
}

fn queue_key(queue: &str) -> Vec<u8> {
    format!("SQ:{queue}").into_bytes()
}

fn mapping_key(key: &[u8]) -> Vec<u8> {
    let mut m = b"SM:".to_vec();
    m.extend_from_slice(key);
    m
}

/// A session's buffered write: the value of `BS:<id>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SessionWrites {
    pub queue: String,
    pub statements: Vec<Statement>,
    /// The cache keys whose mappings list the session.
    pub mapped: Vec<Vec<u8>>,
    /// Query result changes: (cache key of a query result, change), in the order made.
    pub result_changes: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SessionWrites {
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    /// The object's JSON: `{"m":[mapped keys],"q":queue,"r":[[key,change]],"s":[statements]}`,
    /// keys and bytes in hex. Written piece by piece rather than built as a JSON tree first:
    /// every write-back session of SQL encodes one at its commit.
    fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(b"{\"m\":[");
        for (i, key) in self.mapped.iter().enumerate() {
            push_separator(&mut out, i);
            push_hex_string(&mut out, key);
        }
        out.extend_from_slice(b"],\"q\":");
        push_json(&mut out, &self.queue);
        out.extend_from_slice(b",\"r\":[");
        for (i, (key, change)) in self.result_changes.iter().enumerate() {
            push_separator(&mut out, i);
            out.push(b'[');
            push_hex_string(&mut out, key);
            out.push(b',');
            push_hex_string(&mut out, change);
            out.push(b']');
        }
        out.extend_from_slice(b"],\"s\":[");
        for (i, statement) in self.statements.iter().enumerate() {
            push_separator(&mut out, i);
            out.push(b'[');
            push_json(&mut out, &statement.sql);
            out.extend_from_slice(b",[");
            for (j, param) in statement.params.iter().enumerate() {
                push_separator(&mut out, j);
                push_param(&mut out, param)?;
            }
            out.push(b']');
            if let Some(rows) = statement.rows {
                out.push(b',');
                push_json(&mut out, &rows);
            }
            out.push(b']');
        }
        out.extend_from_slice(b"]}");
        Ok(out)
    }

    fn decode(bytes: &[u8]) -> Result<SessionWrites> {
        let bad = |what: &str| {
            Error::Store(StoreError::Invalid(format!(
                "a buffered session is malformed: {what}"
            )))
        };
        let value: Value = parse_json(bytes).map_err(|_| bad("not JSON"))?;
        let queue = value["q"].as_str().ok_or_else(|| bad("queue"))?.to_string();
        let mut statements = Vec::new();
        for s in value["s"].as_array().ok_or_else(|| bad("statements"))? {
            let sql = s[0].as_str().ok_or_else(|| bad("statement text"))?;
            let params = s[1]
                .as_array()
                .ok_or_else(|| bad("parameters"))?
                .iter()
                .map(decode_value)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("a parameter"))?;
            let mut statement = Statement::new(sql, params);
            if let Some(rows) = s.get(2) {
                statement.rows = Some(rows.as_u64().ok_or_else(|| bad("a row count"))?);
            }
            statements.push(statement);
        }
        let mapped = value["m"]
            .as_array()
            .ok_or_else(|| bad("mapped keys"))?
            .iter()
            .map(|k| k.as_str().and_then(unhex))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a mapped key"))?;
        let result_changes = value["r"]
            .as_array()
            .ok_or_else(|| bad("result changes"))?
            .iter()
            .map(|pair| Some((unhex(pair[0].as_str()?)?, unhex(pair[1].as_str()?)?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a result change"))?;
        Ok(SessionWrites {
            queue,
            statements,
            mapped,
            result_changes,
        })
    }
}

/// A comma before every item of a JSON array but its first.
fn push_separator(out: &mut Vec<u8>, index: usize) {
    if index > 0 {
        out.push(b',');
    }
}

/// A JSON string or number, escaped as JSON requires.
fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("strings and finite numbers always serialize");
}

/// Bytes as a JSON string of their hex digits (which need no escaping).
fn push_hex_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    push_hex(out, bytes);
    out.push(b'"');
}

/// A parameter as JSON: integers and strings as themselves, floats and bytes tagged so that they
/// come back as the same SQL type.
fn push_param(out: &mut Vec<u8>, value: &SqlValue) -> Result<()> {
    match value {
        SqlValue::Null => out.extend_from_slice(b"null"),
        SqlValue::Int(n) => push_json(out, n),
        SqlValue::Float(f) if f.is_finite() => {
            out.extend_from_slice(b"{\"f\":");
            push_json(out, f);
            out.push(b'}');
        }
        SqlValue::Float(f) => {
            return Err(Error::App(format!(
                "a buffered statement parameter must be finite, not {f}"
            )))
        }
        SqlValue::Text(s) => push_json(out, s),
        SqlValue::Bytes(b) => {
            out.extend_from_slice(b"{\"b\":");
            push_hex_string(out, b);
            out.push(b'}');
        }
    }
    Ok(())
}

fn decode_value(value: &Value) -> Option<SqlValue> {
    Some(match value {
        Value::Null => SqlValue::Null,
        Value::Number(n) => SqlValue::Int(n.as_i64()?),
        Value::String(s) => SqlValue::Text(s.clone()),
        Value::Object(o) => match (o.get("f"), o.get("b")) {
            (Some(f), None) => SqlValue::Float(f.as_f64()?),
            (None, Some(b)) => SqlValue::Bytes(unhex(b.as_str()?)?),
            _ => return None,
        },
        _ => return None,
    })
}

/// A new session id: unique across processes and restarts (a random 64-bit tag per process and a
/// counter), since a reused id found in `cads_applied_sessions` would make a new session look
/// applied.
fn new_session_id() -> String {
    static TAG: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let tag = TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let local = 0u8;
        process_tag(nanos, std::process::id(), &local as *const u8 as u64)
    });
    format!("{tag:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The tag of a process's session ids, from its start time, its id and a stack address: each
/// input matters, and nearby inputs give unrelated tags.
fn process_tag(nanos: u64, pid: u32, address: u64) -> u64 {
    spread(nanos ^ (u64::from(pid) << 32) ^ address)
}

/// splitmix64's finalizer: spreads nearby inputs over the whole range.
fn spread(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A session object read back from the cache key `key`: refused if its seal does not open or it
/// cannot be read.
fn open_object(seal: &Seal, key: &[u8], bytes: &[u8]) -> Result<SessionWrites, Refusal> {
    let payload = seal.open(key, bytes).ok_or(Refusal::Unauthenticated)?;
    SessionWrites::decode(payload).map_err(|e| Refusal::Malformed(e.to_string()))
}

/// Checks a queue name: it is part of cache keys and of list lines.
pub(crate) fn check_queue_name(queue: &str) -> Result<()> {
    if queue.is_empty() || queue.len() > MAX_QUEUE_NAME || queue.contains(['\n', '\r']) {
        return Err(Error::App(format!(
            "a write-back queue name must have 1 to {MAX_QUEUE_NAME} bytes and no line break: {queue:?}"
        )));
    }
    Ok(())
}

/// A committing session's buffered write (000 Algorithm 11 under Design 2), as writes for the
/// session's last pipeline, after its own cache changes: the session object on its replicas, its
/// id appended to the mapping of every key it affects and to its queue (each list created where
/// it is missing: [`append_line`]), so that the whole takes no round trip of its own. The queue
/// comes last in each CMI's share of the pipeline, but its exclusive lease, the one writers of a
/// queue contend for, is asked for in the same round trip as the session's other leases, and
/// held through the backoff if one of those is answered RETRY. Everything becomes visible at the
/// session's commit, with the cached values it changed.
pub(crate) struct Staging {
    seal: Seal,
    writes: Vec<(usize, Write)>,
    queue: String,
    /// Where in `writes` the queue's `LADD`s are: a queue new on every replica joins `SQS`.
    queue_adds: Vec<usize>,
}

impl Staging {
    pub(crate) fn plan(cads: &Cads, seal: &Seal, writes: &SessionWrites) -> Result<Staging> {
        let client = cads.cache().expect("write-back has a cache");
        let id = new_session_id();
        let object = seal.seal(&session_key(&id), &writes.encode()?);
        let object_key = [session_key(&id)];
        let object_places = placed(cads, client, &object_key);
        let mut staged: Vec<(usize, Write)> = failpoints::replicas_written(&object_places, |r| r.0)
            .iter()
            .map(|&(cmi, key)| {
                let set = Write::Set {
                    key: key.to_vec(),
                    value: object.clone(),
                    pin: true,
                };
                (cmi, set)
            })
            .collect();
        let mut lists: Vec<Vec<u8>> = writes.mapped.iter().map(|k| mapping_key(k)).collect();
        lists.sort();
        lists.dedup();
        let queue = queue_key(&writes.queue);
        lists.push(queue.clone());
        for list in &lists {
            // Each list's line is sealed for that list, so that it cannot be moved to another.
            staged.extend(append_line(
                cads,
                list,
                &sealed_line(seal, list, id.as_bytes()),
            ));
        }
        let queue_adds = adds_of(&staged, &queue);
        Ok(Staging {
            seal: seal.clone(),
            writes: staged,
            queue: writes.queue.clone(),
            queue_adds,
        })
    }

    pub(crate) fn writes(&self) -> &[(usize, Write)] {
        &self.writes
    }

    /// After the pipeline (`written` answers [`writes`](Self::writes)): a queue that was new on
    /// every replica joins `SQS`, in a round trip more (validated again if `validate`).
    pub(crate) fn finish(
        &self,
        cads: &Cads,
        session: &mut CacheSession<'_>,
        written: &[Written],
        validate: bool,
    ) -> Result<(), ClientError> {
        let queue_is_new = self
            .queue_adds
            .iter()
            .all(|&i| written[i] == Written::Added(true));
        if !queue_is_new {
            return Ok(());
        }
        let line = sealed_line(&self.seal, QUEUES_KEY, self.queue.as_bytes());
        session.write_at(&append_line(cads, QUEUES_KEY, &line), validate)?;
        Ok(())
    }
}

/// Where in `writes` the `LADD`s of the list `key` are.
fn adds_of(writes: &[(usize, Write)], key: &[u8]) -> Vec<usize> {
    writes
        .iter()
        .enumerate()
        .filter(|(_, (_, write))| matches!(write, Write::Add { key: k, .. } if k.as_slice() == key))
        .map(|(i, _)| i)
        .collect()
}

/// The queues sessions have used (the union over the reachable replicas of `SQS`), and whether
/// `SQS` holds lines whose seals do not open.
fn read_queues(cads: &Cads) -> Result<(Vec<String>, bool)> {
    let seal = cads.seal()?;
    let mut names = BTreeSet::new();
    let mut refused = false;
    for list in read_all(cads, QUEUES_KEY)?.into_iter().flatten() {
        let (payloads, some_refused) = open_lines(seal, QUEUES_KEY, &list);
        refused |= some_refused;
        names.extend(
            payloads
                .into_iter()
                .map(|l| String::from_utf8_lossy(l).into_owned()),
        );
    }
    Ok((names.into_iter().collect(), refused))
}

/// The queues for a worker to apply; lines of `SQS` whose seals do not open are removed.
pub(crate) fn queues(cads: &Cads) -> Result<Vec<String>> {
    let (names, refused) = read_queues(cads)?;
    if refused {
        purge_list(cads, QUEUES_KEY, false)?;
    }
    Ok(names)
}

/// A queue's session ids in commit order: the longest of its replicas (a replica that restarted
/// empty holds only what was queued since), and whether some replica holds lines whose seals do
/// not open.
fn queued(cads: &Cads, queue: &str) -> Result<(Vec<String>, bool)> {
    let seal = cads.seal()?;
    let key = queue_key(queue);
    let mut refused = false;
    let longest = read_all(cads, &key)?
        .into_iter()
        .flatten()
        .map(|list| {
            let (payloads, some_refused) = open_lines(seal, &key, &list);
            refused |= some_refused;
            payloads
                .into_iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect::<Vec<_>>()
        })
        .max_by_key(Vec::len);
    Ok((longest.unwrap_or_default(), refused))
}

/// A session object read back.
pub(crate) struct Pending {
    pub id: String,
    pub writes: SessionWrites,
}

/// The sessions with changes pending to any of `keys` (through their mappings), read without
/// leases. A session whose object is gone from every replica has been applied.
pub(crate) fn pending_for(cads: &Cads, keys: &[Vec<u8>]) -> Result<Vec<Pending>> {
    let seal = cads.seal()?;
    let mappings: Vec<Vec<u8>> = keys.iter().map(|k| mapping_key(k)).collect();
    let mut listed: Vec<Vec<String>> = Vec::new();
    // Mappings holding lines whose seals do not open.
    let mut refused_in: Vec<bool> = Vec::new();
    for (replicas, mapping) in read_many(cads, &mappings)?.into_iter().zip(&mappings) {
        let mut ids: Vec<String> = Vec::new();
        let mut refused = false;
        for list in replicas.iter().flatten() {
            let (payloads, some_refused) = open_lines(seal, mapping, list);
            refused |= some_refused;
            for line in payloads {
                let id = String::from_utf8_lossy(line).into_owned();
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        listed.push(ids);
        refused_in.push(refused);
    }
    let mut ids: Vec<&String> = listed.iter().flatten().collect();
    ids.sort();
    ids.dedup();
    let objects: Vec<Vec<u8>> = ids.iter().map(|id| session_key(id)).collect();
    let mut pending = Vec::new();
    for ((id, key), replicas) in ids.iter().zip(&objects).zip(read_many(cads, &objects)?) {
        // The first copy that opens; one refused everywhere is left for the worker that meets
        // it in its queue to discard.
        let object = replicas
            .iter()
            .flatten()
            .find_map(|bytes| open_object(seal, key, bytes).ok());
        if let Some(writes) = object {
            pending.push(Pending {
                writes,
                id: id.to_string(),
            });
        }
    }
    // A mapping that lists only applied sessions is left over from a worker that died before
    // compacting: it goes now. Lines whose seals do not open go too.
    for ((mapping, ids), refused) in mappings.iter().zip(&listed).zip(refused_in) {
        let stale = !ids.is_empty() && !pending.iter().any(|p| ids.contains(&p.id));
        if stale || refused {
            clean_mapping(cads, mapping, if stale { ids } else { &[] });
        }
    }
    Ok(pending)
}

/// Removes from a mapping the lines of `applied` ids and the lines whose seals do not open,
/// deleting it if nothing is left (best effort: a writer that adds to it meanwhile keeps it).
fn clean_mapping(cads: &Cads, mapping: &[u8], applied: &[String]) {
    let client = cads.cache().expect("write-back has a cache");
    let keys = [mapping.to_vec()];
    let places = placed(cads, client, &keys);
    let mut session = client.session();
    let outcome = cads.seal().and_then(|seal| {
        let keep = |_: &[u8], id: &[u8]| !applied.iter().any(|a| a.as_bytes() == id);
        let refused = rewrite_lists(seal, &mut session, &places, keep, |_| false)?;
        session.commit()?;
        Ok(refused)
    });
    match outcome {
        Ok(refused) => refused.discarded(cads.write_back_stats()),
        Err(e) => tracing::debug!(error = %e, "cleaning a mapping failed; it stays"),
    }
}

/// Orders pending sessions as they will be applied: by queue, and in a queue by position. Sessions
/// no longer queued (compacted away: applied) are dropped.
pub(crate) fn in_queue_order(cads: &Cads, pending: Vec<Pending>) -> Result<Vec<Pending>> {
    let mut by_queue: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
    for p in pending {
        by_queue.entry(p.writes.queue.clone()).or_default().push(p);
    }
    let mut ordered = Vec::new();
    for (queue, mut sessions) in by_queue {
        let positions: HashMap<String, usize> = queued(cads, &queue)?
            .0
            .into_iter()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect();
        sessions.retain(|p| positions.contains_key(&p.id));
        sessions.sort_by_key(|p| positions[&p.id]);
        ordered.extend(sessions);
    }
    Ok(ordered)
}

/// Applies the queues of `pending` (in queue order: [`in_queue_order`]) through their pending
/// sessions, one pass per queue through its last one: a pass applies every session queued
/// before that one too, and each pass reads the whole queue and compacts it, which behind a
/// backlog costs more than the sessions it applies.
pub(crate) fn apply_through(cads: &Cads, pending: &[Pending]) -> Result<()> {
    // A queue's later sessions overwrite its earlier ones.
    let last: BTreeMap<&str, &str> = pending
        .iter()
        .map(|p| (p.writes.queue.as_str(), p.id.as_str()))
        .collect();
    for (queue, id) in last {
        apply_queue(cads, queue, Some(id))?;
    }
    Ok(())
}

/// Whether each pending session left a query result change for every one of `keys` it is
/// mapped on: then a read can fold them in (Algorithm 3) instead of applying them first.
pub(crate) fn all_foldable(pending: &[Pending], keys: &[Vec<u8>]) -> bool {
    pending.iter().all(|p| {
        keys.iter()
            .filter(|k| p.writes.mapped.contains(k))
            .all(|k| p.writes.result_changes.iter().any(|(rk, _)| rk == k))
    })
}

/// Algorithm 3's guard: takes exclusive leases, in the reader's session, on the objects of the
/// pending sessions, so that no worker applies them while the reader queries the data store and
/// folds their changes in (a worker asking for them is refused; the reader's fill fails if its
/// leases run out). Returns the sessions whose object is still there.
pub(crate) fn lease_pending(
    cads: &Cads,
    session: &mut CacheSession<'_>,
    pending: Vec<Pending>,
) -> Result<Vec<Pending>> {
    let client = cads.cache().expect("write-back has a cache");
    let keys: Vec<Vec<u8>> = pending.iter().map(|p| session_key(&p.id)).collect();
    let places = placed(cads, client, &keys);
    let values = session.mget_at(&places, true)?;
    let present: BTreeSet<&[u8]> = places
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_some())
        .map(|(&(_, key), _)| key)
        .collect();
    Ok(pending
        .into_iter()
        .filter(|p| present.contains(session_key(&p.id).as_slice()))
        .collect())
}

/// The sessions `cads_applied_sessions` does not list (those it lists were applied by a worker
/// that died before deleting their objects).
pub(crate) fn not_applied(
    cads: &Cads,
    tx: &mut dyn SqlTransaction,
    pending: Vec<Pending>,
) -> Result<Vec<Pending>> {
    prepare(cads)?;
    let ids: Vec<&str> = pending.iter().map(|p| p.id.as_str()).collect();
    let applied = applied_among(tx, &ids)?;
    Ok(pending
        .into_iter()
        .filter(|p| !applied.contains(&p.id))
        .collect())
}

/// The ids among `ids` that `cads_applied_sessions` lists.
fn applied_among(tx: &mut dyn SqlTransaction, ids: &[&str]) -> Result<BTreeSet<String>> {
    if ids.is_empty() {
        return Ok(BTreeSet::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let params: Vec<SqlValue> = ids
        .iter()
        .map(|id| SqlValue::Text(id.to_string()))
        .collect();
    let rows = tx.query(
        &format!("SELECT id FROM {APPLIED_SESSIONS} WHERE id IN ({marks})"),
        &params,
    )?;
    Ok(rows
        .into_iter()
        .filter_map(|row| row.get::<String>(0).ok())
        .collect())
}

/// Creates `cads_applied_sessions` once per process.
fn prepare(cads: &Cads) -> Result<()> {
    if cads.applied_sessions_ready.load(Ordering::Acquire) {
        return Ok(());
    }
    cads.store().create_if_absent(&format!(
        "CREATE TABLE IF NOT EXISTS {APPLIED_SESSIONS} (id VARCHAR(64) PRIMARY KEY)"
    ))?;
    cads.applied_sessions_ready.store(true, Ordering::Release);
    Ok(())
}

/// Applies `queue`'s pending sessions in order (Algorithm 4), through the session `through` if
/// given (a read that depends on it), else through the end of the queue as it is now, and
/// compacts what it applied. Returns how many sessions this call applied.
pub(crate) fn apply_queue(cads: &Cads, queue: &str, through: Option<&str>) -> Result<usize> {
    let mut done = Done::default();
    let applied = apply_prefix(cads, queue, through, &mut done, true);
    // The queue as read has been worked through (or a batch failed): compact what is done
    // (Algorithm 4, line 25) while the mappings of the applied sessions are known.
    compact(cads, queue, &mut done)?;
    applied
}

/// Applies the queue's sessions up to `through` (or its end), batch by batch, noting in `done`
/// what is applied; compacts every `compact_every` sessions if `compact_midway`.
fn apply_prefix(
    cads: &Cads,
    queue: &str,
    through: Option<&str>,
    done: &mut Done,
    compact_midway: bool,
) -> Result<usize> {
    prepare(cads)?;
    let (ids, refused) = queued(cads, queue)?;
    // The queue's lines that do not open leave it at the next compaction.
    done.refused_lines |= refused;
    let end = match through {
        Some(id) => match ids.iter().position(|q| q == id) {
            Some(i) => i + 1,
            // Not queued any more: compacted away, so applied.
            None => return Ok(0),
        },
        None => ids.len(),
    };
    let batch = cads.config().write_back.batch.max(1);
    // A compaction reads and rewrites the whole queue and the mappings: behind a backlog of n
    // sessions, one every `compact_every` would cost O(n) per few dozen sessions applied. At
    // least an eighth of the queue as read between two keeps it in proportion to the work done.
    let compact_every = cads
        .config()
        .write_back
        .compact_every
        .max(ids.len() / 8)
        .max(1);
    let mut applied = 0;
    for chunk in ids[..end].chunks(batch) {
        applied += with_retries(cads, || apply_batch(cads, chunk, done))?;
        if compact_midway && done.ids.len() >= compact_every {
            compact(cads, queue, done)?;
        }
    }
    Ok(applied)
}

/// Sessions applied (or found applied) and not yet compacted away, with the mappings that list
/// them.
#[derive(Default)]
struct Done {
    ids: Vec<String>,
    /// The keys the applied sessions changed, each with the ids of those that did.
    mapped: BTreeMap<Vec<u8>, Vec<String>>,
    /// Ids found with no object to read (applied and deleted by an applier that did not compact,
    /// or refused everywhere): which keys they changed is unknown, so they leave every mapping
    /// compacted with them.
    unread: Vec<String>,
    /// The queue holds lines whose seals do not open.
    refused_lines: bool,
}

/// Runs `step` again after a backoff while it loses lease races or data-store conflicts.
fn with_retries<T>(cads: &Cads, mut step: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempts = Attempts::new(cads.config());
    loop {
        attempts.start();
        match step() {
            Err(e) if retryable(&e) => {
                if !attempts.again() {
                    return Err(attempts.gave_up(e));
                }
            }
            other => return other,
        }
    }
}

/// Another applier got there first (a lease, a conflict): trying again finds the state it left.
/// A constraint a buffered statement meets is tried again too, since another queue's applier
/// may commit the row it lacks meanwhile; one that stays stops the queue once the attempts run
/// out. (An id recorded first by another applier is `Aborted`, from [`run_fresh`].)
fn retryable(e: &Error) -> bool {
    e.is_retryable() || matches!(e, Error::Store(StoreError::Constraint(_)))
}

/// The error of an applier that a failpoint made die: its cache session was abandoned without
/// releasing anything, as a crashed process would leave it (its leases expire).
fn crashed() -> Error {
    Error::App("the worker died (failpoint)".into())
}

/// Applies one batch of consecutive queued sessions in one data-store transaction (Algorithm 4,
/// lines 10-21). Returns how many it applied.
fn apply_batch(cads: &Cads, ids: &[String], done: &mut Done) -> Result<usize> {
    let client = cads.cache().expect("write-back has a cache");
    let seal = cads.seal()?;
    let keys: Vec<Vec<u8>> = ids.iter().map(|id| session_key(id)).collect();
    let places = placed(cads, client, &keys);
    let mut session = client.session();
    // Exclusive leases on every replica of every object: no other applier, and no reader folding
    // them in, can work on these sessions until this one is done.
    let values = session.mget_at(&places, true)?;
    let mut objects: Vec<(&String, SessionWrites)> = Vec::new();
    // Gone from every replica (applied and deleted already), or refused on every one: noted done
    // once the copies present are deleted.
    let mut unread: Vec<&String> = Vec::new();
    // Copies refused: deleted with the applied ones. A session none of whose copies opens is
    // moved past (its id leaves the queue at the next compaction), so that its queue goes on.
    let mut refused = Refused::default();
    for (id, key) in ids.iter().zip(&keys) {
        let copies = places
            .iter()
            .zip(&values)
            .filter(|((_, k), _)| *k == key.as_slice())
            .filter_map(|(_, v)| v.as_deref());
        let mut object = None;
        let mut present = false;
        for bytes in copies {
            present = true;
            match open_object(seal, key, bytes) {
                Ok(writes) if object.is_none() => object = Some(writes),
                Ok(_) => {}
                Err(why) => refused.add(key, bytes, why),
            }
        }
        match object {
            Some(writes) => objects.push((id, writes)),
            None => {
                if present {
                    tracing::warn!(session = %id, "a queued session is refused; its queue goes on");
                }
                unread.push(id);
            }
        }
    }
    // Every copy present goes: those of the sessions applied below, and those refused.
    let deletes: Vec<(usize, Write)> = places
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_some())
        .map(|(&(cmi, key), _)| (cmi, Write::Delete { key: key.to_vec() }))
        .collect();
    let mut applied = 0;
    if !objects.is_empty() {
        if failpoints::dies_at(failpoints::APPLY_LEASED) {
            std::mem::forget(session);
            return Err(crashed());
        }
        failpoints::break_sessions(&mut objects, |(_, writes)| &mut writes.statements);
        let sessions: Vec<Buffered<'_>> = objects
            .iter()
            .map(|(id, writes)| (id.as_str(), writes.statements.as_slice()))
            .collect();
        let (tx, fresh_sessions) = run_fresh(cads, &sessions)?;
        applied = fresh_sessions.len();
        if failpoints::dies_at(failpoints::APPLY_RUNNING) {
            std::mem::forget(session);
            drop(tx);
            return Err(crashed());
        }
        // Before the commit, the sessions applied here must still have their objects. An
        // applier that stalled past its leases may find its sessions applied by another one
        // meanwhile: their objects deleted, then their ids compacted out of
        // cads_applied_sessions, so that the inserts above found nothing and it would apply them
        // twice. Once this transaction holds the ids' rows, an applier that took the leases over
        // waits on them and then finds them applied, so the objects seen here cannot be applied
        // by anyone else first. (A check of the leases would serve too, but an applier whose
        // transaction waits out a lease on row locks would then never commit.)
        let fresh: Vec<Vec<u8>> = fresh_sessions
            .iter()
            .map(|(id, _)| session_key(id))
            .collect();
        if !fresh.is_empty() && present_many(cads, &fresh)?.contains(&false) {
            return Err(Error::Aborted {
                reason: "another applier applied and compacted one of its sessions".into(),
            });
        }
        tx.commit()?;
        if failpoints::dies_at(failpoints::APPLY_APPLIED) {
            std::mem::forget(session);
            return Err(crashed());
        }
    }
    // The deletes and the commit in one round trip, without validating across CMIs first: a
    // replica that keeps its copy is handled as any partial commit is, below.
    match session.write_and_commit(&deletes) {
        Ok(()) => {
            refused.discarded(cads.write_back_stats());
            for id in unread {
                done.ids.push(id.clone());
                done.unread.push(id.clone());
            }
            for (id, writes) in objects {
                done.ids.push(id.clone());
                for key in writes.mapped {
                    done.mapped.entry(key).or_default().push(id.clone());
                }
            }
        }
        // Some replicas kept their copy (a lease ran out): the ids stay in the queue (and those
        // applied in cads_applied_sessions), so that the next pass finds the copies again,
        // applied or refused, and deletes them.
        Err(ClientError::PartialCommit { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let stats = cads.write_back_stats();
    stats
        .applied_sessions
        .fetch_add(applied as u64, Ordering::Relaxed);
    Ok(applied)
}

/// A buffered session to apply: its id and its statements.
type Buffered<'a> = (&'a str, &'a [Statement]);

/// Begins a data-store transaction and runs in it those of `sessions` that
/// `cads_applied_sessions` does not list, each recording its id there; returns the transaction
/// and the sessions it ran. Sessions found applied are rare (an applier died between its commit
/// and its deletes, or its deletes reached some replicas only), so the first try runs them all
/// without asking; an id recorded already (or by another applier's transaction that commits
/// while this insert waits for it) stops it, and the second try asks first.
fn run_fresh<'s>(
    cads: &'s Cads,
    sessions: &[Buffered<'s>],
) -> Result<(Box<dyn SqlTransaction + 's>, Vec<Buffered<'s>>)> {
    let store = cads.store().as_ref();
    let mut tx = store.begin(cads.config().isolation)?;
    if let Ran::All = run_sessions(tx.as_mut(), sessions, true)? {
        return Ok((tx, sessions.to_vec()));
    }
    drop(tx);
    let mut tx = store.begin(cads.config().isolation)?;
    let ids: Vec<&str> = sessions.iter().map(|(id, _)| *id).collect();
    let applied_before = applied_among(tx.as_mut(), &ids)?;
    let fresh: Vec<Buffered<'_>> = sessions
        .iter()
        .filter(|(id, _)| !applied_before.contains(*id))
        .copied()
        .collect();
    match run_sessions(tx.as_mut(), &fresh, true)? {
        Ran::All => Ok((tx, fresh)),
        Ran::Recorded => Err(Error::Aborted {
            reason: "another applier recorded one of its sessions as applied first".into(),
        }),
    }
}

/// How [`run_sessions`] ended without an error.
enum Ran {
    /// Every statement ran.
    All,
    /// A session's id is recorded in `cads_applied_sessions` already: its insert failed, and
    /// the transaction with it.
    Recorded,
}

/// Runs buffered sessions' statements in `tx`, each changing the rows its session counted on,
/// and, if `record`, inserts each session's id into `cads_applied_sessions` before them. All go in
/// one pipeline (one round trip on PostgreSQL): none depends on another's result, and a count
/// that does not match fails the transaction as a failed statement does.
fn run_sessions(
    tx: &mut dyn SqlTransaction,
    sessions: &[Buffered<'_>],
    record: bool,
) -> Result<Ran> {
    let insert_id = format!("INSERT INTO {APPLIED_SESSIONS} (id) VALUES (?)");
    let ids: Vec<[SqlValue; 1]> = sessions
        .iter()
        .map(|(id, _)| [SqlValue::Text(id.to_string())])
        .collect();
    let mut pipeline: Vec<(&str, &[SqlValue])> = Vec::new();
    // Per statement of the pipeline: its session, and the buffered statement (none for an id).
    let mut origin: Vec<(&str, Option<&Statement>)> = Vec::new();
    for ((id, statements), id_param) in sessions.iter().zip(&ids) {
        if record {
            pipeline.push((&insert_id, id_param));
            origin.push((id, None));
        }
        for statement in statements.iter() {
            pipeline.push((&statement.sql, &statement.params));
            origin.push((id, Some(statement)));
        }
    }
    if pipeline.is_empty() {
        return Ok(Ran::All);
    }
    // The first problem in the statements' order is the one reported: a count that does not
    // match comes before a later statement's failure.
    let (changed, failed) = match tx.execute_all(&pipeline) {
        Ok(changed) => (changed, None),
        Err(mut failed) => (std::mem::take(&mut failed.changed), Some(failed)),
    };
    for (&(id, statement), changed) in origin.iter().zip(changed) {
        let Some(statement) = statement else { continue };
        if statement.rows.is_some_and(|rows| rows != changed) {
            return Err(apply_error(
                id,
                statement,
                StoreError::Invalid(format!(
                    "buffered session {id}: `{}` changed {changed} rows where the session \
                     counted on {}: the data store does not hold what the session read",
                    statement.sql,
                    statement.rows.unwrap_or_default()
                )),
            ));
        }
    }
    match failed {
        None => Ok(Ran::All),
        Some(failed) => match (origin.get(failed.index), failed.error) {
            (Some(&(_, None)), StoreError::Constraint(_)) => Ok(Ran::Recorded),
            (Some(&(id, Some(statement))), error) => Err(apply_error(id, statement, error)),
            (_, error) => Err(error.into()),
        },
    }
}

/// Runs the statements a broken `reorder` applier held back (see
/// [`failpoints::Broken::Reorder`]), if it held some: last, after every session of their queue.
pub(crate) fn apply_delayed(cads: &Cads) -> Result<()> {
    let statements: Vec<Statement> = failpoints::take_delayed();
    if statements.is_empty() {
        return Ok(());
    }
    let mut tx = cads.store().begin(cads.config().isolation)?;
    // Nothing is recorded, so every statement ran if none failed.
    run_sessions(tx.as_mut(), &[("held back", &statements)], false)?;
    tx.commit()?;
    Ok(())
}

/// A statement the data store refused: the session's changes cannot be applied as buffered.
fn apply_error(id: &str, statement: &Statement, e: StoreError) -> Error {
    if e.is_retryable() || e.is_transient() {
        return e.into();
    }
    tracing::error!(
        session = id,
        sql = %statement.sql,
        error = %e,
        "a buffered session cannot be applied; its queue waits behind it"
    );
    Error::Store(e)
}

/// Removes applied sessions from the queue and the mappings, then from `cads_applied_sessions`
/// (Algorithm 4, lines 25-29). Only ids whose session objects are gone from every replica are
/// here, so no applier can be led to them again.
fn compact(cads: &Cads, queue: &str, done: &mut Done) -> Result<()> {
    if done.ids.is_empty() && !done.refused_lines {
        return Ok(());
    }
    let client = cads.cache().expect("write-back has a cache");
    let refused = with_retries(cads, || {
        let mut session = client.session();
        let refused = remove_ids(cads, &mut session, queue, done)?;
        session.commit()?;
        Ok(refused)
    })?;
    refused.discarded(cads.write_back_stats());
    forget_applied(cads, &done.ids)?;
    *done = Done::default();
    Ok(())
}

/// Deletes ids from `cads_applied_sessions`.
fn forget_applied(cads: &Cads, ids: &[String]) -> Result<()> {
    // A compaction behind a long backlog holds thousands of ids; a statement takes at most this
    // many parameters, well under every data store's limit.
    const PER_STATEMENT: usize = 1000;
    for chunk in ids.chunks(PER_STATEMENT) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let params: Vec<SqlValue> = chunk.iter().map(|id| SqlValue::Text(id.clone())).collect();
        with_retries(cads, || {
            let mut tx = cads.store().begin(cads.config().isolation)?;
            tx.execute(
                &format!("DELETE FROM {APPLIED_SESSIONS} WHERE id IN ({marks})"),
                &params,
            )?;
            Ok(tx.commit()?)
        })?;
    }
    Ok(())
}

/// Rewrites, in `session`, the queue without the ids in `done` and each mapping without the
/// applied ids that listed it. An emptied queue stays (empty), so that it is not registered
/// again; an emptied mapping goes. The lines to remove are sealed here and compared byte for
/// byte, so that the lines a long list keeps are not opened; when the queue was read with lines
/// whose seals do not open, every line is opened and those go too (returned, to be counted once
/// the session commits).
fn remove_ids(
    cads: &Cads,
    session: &mut CacheSession<'_>,
    queue: &str,
    done: &Done,
) -> Result<Refused> {
    let client = cads.cache().expect("write-back has a cache");
    let seal = cads.seal()?;
    let queue = queue_key(queue);
    let keep_empty = |key: &[u8]| key == queue.as_slice();
    // The queue first, then the mappings in key order: leases taken in one order.
    let mut lists: Vec<Vec<u8>> = vec![queue.clone()];
    lists.extend(done.mapped.keys().map(|k| mapping_key(k)));
    let places = placed(cads, client, &lists);
    if done.refused_lines {
        let ids: BTreeSet<&[u8]> = done.ids.iter().map(String::as_bytes).collect();
        let keep = |_: &[u8], id: &[u8]| !ids.contains(id);
        return Ok(rewrite_lists(seal, session, &places, keep, keep_empty)?);
    }
    let sealed_lines = |list: &[u8], ids: &[String]| -> HashSet<Vec<u8>> {
        ids.iter()
            .map(|id| seal.seal(list, id.as_bytes()))
            .collect()
    };
    let mut removals = HashMap::new();
    removals.insert(queue.clone(), sealed_lines(&queue, &done.ids));
    for (key, ids) in &done.mapped {
        let mapping = mapping_key(key);
        let mut lines = sealed_lines(&mapping, ids);
        lines.extend(sealed_lines(&mapping, &done.unread));
        removals.insert(mapping, lines);
    }
    remove_lines(session, &places, &removals, keep_empty)?;
    Ok(Refused::default())
}

/// Sessions still waiting in every queue.
pub fn pending_sessions(cads: &Cads) -> Result<usize> {
    // Objects asked after per round trip to each CMI (EXISTS, a few bytes each way): a backlog
    // of thousands costs a few round trips, not one each.
    const PER_ASK: usize = 1024;
    let mut count = 0;
    for queue in read_queues(cads)?.0 {
        let objects: Vec<Vec<u8>> = queued(cads, &queue)?
            .0
            .iter()
            .map(|id| session_key(id))
            .collect();
        for chunk in objects.chunks(PER_ASK) {
            count += present_many(cads, chunk)?
                .into_iter()
                .filter(|&present| present)
                .count();
        }
    }
    Ok(count)
}

/// Write-back's fallback to write-through for a session of `queue`: takes exclusive leases on
/// the queue in the session, which is going to write the data store directly, applies what the
/// queue holds and removes it from the queue in the same session. No session can join the queue
/// until this one commits, so the data store receives the queue's sessions and this one in
/// commit order.
/// Returns the lines it removed from the queue as refused, to be counted if the session commits.
pub(crate) fn hold_and_apply(
    cads: &Cads,
    session: &mut CacheSession<'_>,
    queue: &str,
) -> Result<Refused> {
    let client = cads.cache().expect("write-back has a cache");
    let keys = [queue_key(queue)];
    session.mget_at(&placed(cads, client, &keys), true)?;
    let mut done = Done::default();
    apply_prefix(cads, queue, None, &mut done, false)?;
    let mut refused = Refused::default();
    if !done.ids.is_empty() || done.refused_lines {
        refused = remove_ids(cads, session, queue, &done)?;
        forget_applied(cads, &done.ids)?;
    }
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_objects_round_trip() {
        let writes = SessionWrites {
            queue: "w1".into(),
            statements: vec![
                Statement::new(
                    "UPDATE t SET a = a + ?, b = ?, c = ? WHERE id = ?",
                    vec![
                        SqlValue::Int(-3),
                        SqlValue::Float(2.5),
                        SqlValue::Bytes(vec![0, 255, 10]),
                        SqlValue::Text("x\ny".into()),
                    ],
                ),
                Statement::new("DELETE FROM t WHERE v IS ?", vec![SqlValue::Null]),
            ],
            mapped: vec![b"k1".to_vec(), vec![0, 1, 2]],
            result_changes: vec![(b"total".to_vec(), b"+3".to_vec())],
        };
        let bytes = writes.encode().unwrap();
        assert_eq!(SessionWrites::decode(&bytes).unwrap(), writes);
    }

    /// The object's bytes are those the JSON tree of earlier versions gave (a serde_json map's
    /// keys in order), so objects buffered before and after an upgrade read alike.
    #[test]
    fn session_objects_are_the_documented_json() {
        let writes = SessionWrites {
            queue: "w1".into(),
            statements: vec![
                Statement::new(
                    "UPDATE t SET a = ? WHERE id = ?",
                    vec![
                        SqlValue::Int(-3),
                        SqlValue::Float(2.5),
                        SqlValue::Bytes(vec![0, 255]),
                        SqlValue::Text("x\"y\n".into()),
                        SqlValue::Null,
                    ],
                )
                .changing(1),
                Statement::new("DELETE FROM t", vec![]),
            ],
            mapped: vec![b"k1".to_vec(), vec![0, 1]],
            result_changes: vec![(b"t".to_vec(), b"+3".to_vec())],
        };
        let expected = r#"{"m":["6b31","0001"],"q":"w1","r":[["74","2b33"]],"s":[["UPDATE t SET a = ? WHERE id = ?",[-3,{"f":2.5},{"b":"00ff"},"x\"y\n",null],1],["DELETE FROM t",[]]]}"#;
        assert_eq!(
            String::from_utf8(writes.encode().unwrap()).unwrap(),
            expected
        );
        let empty = SessionWrites {
            queue: "q".into(),
            ..SessionWrites::default()
        };
        assert_eq!(
            empty.encode().unwrap(),
            br#"{"m":[],"q":"q","r":[],"s":[]}"#
        );
    }

    #[test]
    fn floats_stay_floats_and_integers_integers() {
        let writes = SessionWrites {
            queue: "q".into(),
            statements: vec![Statement::new(
                "x",
                vec![SqlValue::Float(3.0), SqlValue::Int(3)],
            )],
            ..SessionWrites::default()
        };
        let back = SessionWrites::decode(&writes.encode().unwrap()).unwrap();
        assert_eq!(
            back.statements[0].params,
            vec![SqlValue::Float(3.0), SqlValue::Int(3)]
        );
    }

    #[test]
    fn non_finite_parameters_are_refused() {
        let writes = SessionWrites {
            queue: "q".into(),
            statements: vec![Statement::new("x", vec![SqlValue::Float(f64::NAN)])],
            ..SessionWrites::default()
        };
        assert!(matches!(writes.encode(), Err(Error::App(_))));
    }

    #[test]
    fn malformed_objects_are_errors() {
        for bad in [
            &b"not json"[..],
            br#"{"q": 1}"#,
            br#"{"q":"a","s":[["x",[[1]]]],"m":[],"r":[]}"#,
        ] {
            assert!(SessionWrites::decode(bad).is_err());
        }
    }

    #[test]
    fn session_ids_do_not_repeat() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert!(a.len() < 64);
    }

    #[test]
    fn the_tag_spreads_as_splitmix64_does() {
        // splitmix64 from seed 1234567: its state advances by the golden gamma before each
        // output, and its first three outputs are these (the reference implementation's).
        let mut state = 1_234_567u64;
        for expected in [
            6_457_827_717_110_365_317u64,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
        ] {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            assert_eq!(spread(state), expected);
        }
    }

    #[test]
    fn every_input_of_the_tag_matters() {
        // Chosen so that or-ing or and-ing the inputs instead of xor-ing them, or shifting the
        // process id the wrong way, makes two of them collide.
        let nanos = (3 << 32) | 0b1100;
        let inputs = [
            (nanos, 1, 0b0100),
            (nanos, 2, 0b0100),
            (nanos + 1, 1, 0b0100),
            (nanos, 1, 0b1000),
            (nanos, 1, 0b0001),
            (nanos, 1, 0b0010),
        ];
        let tags: std::collections::HashSet<u64> = inputs
            .iter()
            .map(|&(n, pid, address)| process_tag(n, pid, address))
            .collect();
        assert_eq!(tags.len(), inputs.len());
    }

    #[test]
    fn queue_names_are_checked() {
        assert!(check_queue_name("w1").is_ok());
        assert!(check_queue_name("").is_err());
        assert!(check_queue_name("a\nb").is_err());
        assert!(check_queue_name(&"x".repeat(MAX_QUEUE_NAME)).is_ok());
        assert!(check_queue_name(&"x".repeat(MAX_QUEUE_NAME + 1)).is_err());
        assert!(check_queue_name("a\rb").is_err());
    }
}
