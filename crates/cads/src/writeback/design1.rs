//! Design 1 (000 §3.2): buffered writes per document, staged by writes, applied by Algorithm 2.

use std::collections::BTreeMap;

use cads_client::{Client, ClientError, Session as CacheSession};
use cads_protocol::{Command, Reply};
use cads_store::{DataStore, DocOp, StoreError};

use super::replicated::{join_lines, lines, read_all, replicas};
use super::{buffer, ApplyStep, Buffering};
use crate::cache_store::DocRef;
use crate::error::{Error, Result};
use crate::Cads;

/// The cache key of a document's buffered write.
pub fn bw_key(doc: &DocRef) -> Vec<u8> {
    format!("BW:{}:{}", doc.collection, doc.id).into_bytes()
}

fn doc_of(bw_key: &[u8]) -> Option<DocRef> {
    let text = std::str::from_utf8(bw_key).ok()?.strip_prefix("BW:")?;
    let (collection, id) = text.split_once(':')?;
    Some(DocRef {
        collection: collection.to_string(),
        id: id.to_string(),
    })
}

fn pw_key(partition: usize) -> Vec<u8> {
    format!("PW:{partition}").into_bytes()
}

fn partition_of(cads: &Cads, bw_key: &[u8]) -> usize {
    let partitions = cads.config().write_back.partitions.max(1);
    (cads_protocol::fragment::fnv1a64(bw_key) % partitions as u64) as usize
}

/// Stages the buffered writes of a session (000 Algorithm 11, write-back): the operations are
/// added to each document's buffered write on every replica, and a document without one gets it
/// registered in its PendingWrites partition. All under the session's exclusive leases, so they
/// become visible at its commit, together with the cached values they go with.
pub(crate) fn stage(
    cads: &Cads,
    session: &mut CacheSession<'_>,
    ops: &[(DocRef, DocOp)],
) -> Result<(), ClientError> {
    let client = cads.cache().expect("write-back has a cache");
    let mut per_doc: BTreeMap<&DocRef, Vec<DocOp>> = BTreeMap::new();
    for (doc, op) in ops {
        per_doc.entry(doc).or_default().push(op.clone());
    }
    // Documents in order, so that concurrent writers take their exclusive leases in one order.
    for (doc, doc_ops) in per_doc {
        let key = bw_key(doc);
        let cmis = replicas(cads, client, &key);
        let created = match cads.config().write_back.buffering {
            Buffering::Append => stage_append(session, &key, &cmis, &doc_ops)?,
            Buffering::ReadModifyWrite => stage_rmw(session, &key, &cmis, doc_ops)?,
        };
        if created {
            register(cads, client, session, &key)?;
        }
    }
    Ok(())
}

/// Appends the operations on every replica. Returns whether the document had no buffered write
/// before. A replica without a copy while another has one lost it (a CMI that restarted empty):
/// it gets the whole buffered write.
fn stage_append(
    session: &mut CacheSession<'_>,
    key: &[u8],
    cmis: &[usize],
    ops: &[DocOp],
) -> Result<bool, ClientError> {
    let lines = buffer::encode(ops);
    let mut missing = Vec::new();
    let mut holder = None;
    for &cmi in cmis {
        if session.on(cmi, |s| s.append(key, &lines))?.is_none() {
            missing.push(cmi);
        } else if holder.is_none() {
            holder = Some(cmi);
        }
    }
    let whole = match holder {
        // A new buffered write starts with its creation version (see `new_version`).
        None => buffer::encode_versioned(new_version(), ops.len() as u64, ops),
        Some(h) => session
            .on(h, |s| s.get(key, true))?
            .expect("the holder has the buffered write"),
    };
    for cmi in missing {
        session.on(cmi, |s| s.set(key, &whole, true))?;
    }
    Ok(holder.is_none())
}

/// Reads the buffered write from every replica and keeps the newest (a replica may lag behind
/// after a commit that failed on it), adds the operations, compacts, and writes the result, one
/// version newer, to every replica.
fn stage_rmw(
    session: &mut CacheSession<'_>,
    key: &[u8],
    cmis: &[usize],
    ops: Vec<DocOp>,
) -> Result<bool, ClientError> {
    let mut newest: Option<buffer::Buffered> = None;
    for &cmi in cmis {
        let Some(bytes) = session.on(cmi, |s| s.get(key, true))? else {
            continue;
        };
        let held =
            buffer::decode_versioned(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if newest.as_ref().is_none_or(|n| held.version > n.version) {
            newest = Some(held);
        }
    }
    let created = newest.is_none();
    let held = newest.unwrap_or(buffer::Buffered {
        version: 0,
        writes: 0,
        ops: Vec::new(),
    });
    let writes = held.writes + ops.len() as u64;
    let mut all = held.ops;
    all.extend(ops);
    let version = if created {
        new_version()
    } else {
        held.version + 1
    };
    let value = buffer::encode_versioned(version, writes, &buffer::compact(all));
    for &cmi in cmis {
        session.on(cmi, |s| s.set(key, &value, true))?;
    }
    Ok(created)
}

/// The version a new buffered write starts at: the time in microseconds, so that a new buffered
/// write of a document is newer than any copy of an earlier one that a failed cleanup left behind
/// (see `clean_up`).
fn new_version() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
        .max(1)
}

/// Lists a new buffered write in its PendingWrites partition, on every replica of the partition.
fn register(
    cads: &Cads,
    client: &Client,
    session: &mut CacheSession<'_>,
    key: &[u8],
) -> Result<(), ClientError> {
    let pw = pw_key(partition_of(cads, key));
    let mut line = key.to_vec();
    line.push(b'\n');
    for cmi in replicas(cads, client, &pw) {
        if session.on(cmi, |s| s.append(&pw, &line))?.is_none() {
            session.on(cmi, |s| s.set(&pw, &line, true))?;
        }
    }
    Ok(())
}

/// Whether `doc` has a buffered write on any of its replicas (one round trip, no lease).
pub(crate) fn has_buffered(cads: &Cads, doc: &DocRef) -> Result<bool> {
    let client = cads.cache().expect("write-back has a cache");
    let key = bw_key(doc);
    let keys = [key.as_slice()];
    let commands: Vec<(usize, Command<'_>)> = replicas(cads, client, &key)
        .into_iter()
        .map(|cmi| (cmi, Command::Exists(&keys)))
        .collect();
    let mut reachable = false;
    for reply in client.execute_many(&commands) {
        match reply {
            Ok(Reply::Int(n)) if n > 0 => return Ok(true),
            Ok(_) => reachable = true,
            Err(e) if e.is_unavailable() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if reachable {
        Ok(false)
    } else {
        Err(Error::Cache(ClientError::Unavailable {
            cmi: commands[0].0,
            reason: "no replica of the buffered write can be reached".into(),
            refused: false,
        }))
    }
}

/// Algorithm 2 of 000 §3.2: applies `doc`'s buffered write to the data store, if it has one.
/// Returns whether it applied one.
pub fn apply_buffered(cads: &Cads, doc: &DocRef) -> Result<bool> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match apply_once(cads, doc) {
            Err(Error::Aborted) if attempts < cads.config().max_attempts => {
                cads_client::Backoff::new(&cads.config().retry).wait();
            }
            Ok(Step::Converted) => {}
            Ok(Step::Applied(applied)) => return Ok(applied),
            Err(e) => return Err(e),
        }
    }
}

enum Step {
    /// The buffered write was rewritten in idempotent form; apply again.
    Converted,
    Applied(bool),
}

/// A worker dying at `step`: the session is abandoned without releasing anything, as a crashed
/// process would leave it; its leases expire.
fn crash_at<'c>(
    cads: &Cads,
    step: ApplyStep,
    session: CacheSession<'c>,
) -> Result<(), CacheSession<'c>> {
    match &cads.config().write_back.crash {
        Some(hook) if (hook.0)(step) => {
            std::mem::forget(session);
            Ok(())
        }
        _ => Err(session),
    }
}

fn crashed() -> Error {
    Error::App("the worker died (test crash hook)".into())
}

fn apply_once(cads: &Cads, doc: &DocRef) -> Result<Step> {
    let client = cads.cache().expect("write-back has a cache");
    let store = cads.store().as_ref();
    let key = bw_key(doc);
    let cmis = replicas(cads, client, &key);
    let mut session = client.session();
    // Exclusive leases on every replica; the newest copy is the buffered write.
    let mut newest: Option<buffer::Buffered> = None;
    for &cmi in &cmis {
        let Some(bytes) = session.on(cmi, |s| s.get(&key, true))? else {
            continue;
        };
        let held = buffer::decode_versioned(&bytes)?;
        if newest.as_ref().is_none_or(|n| held.version > n.version) {
            newest = Some(held);
        }
    }
    let Some(held) = newest else {
        remove_pending_line(cads, client, &mut session, &key)?;
        session.commit()?;
        return Ok(Step::Applied(false));
    };
    let (version, writes) = (held.version, held.writes);
    let ops = buffer::compact(held.ops);
    if !buffer::is_idempotent(&ops) {
        // The data store has none of these operations yet (a buffered write is applied only once
        // it is idempotent), so its document is the state they apply to.
        let before = store.get(&doc.collection, &doc.id)?;
        let idempotent =
            buffer::encode_versioned(version + 1, writes, &buffer::idempotent_form(&ops, before)?);
        for &cmi in &cmis {
            session.on(cmi, |s| s.set(&key, &idempotent, true))?;
        }
        let session = match crash_at(cads, ApplyStep::Converted, session) {
            Ok(()) => return Err(crashed()),
            Err(s) => s,
        };
        session.commit()?;
        cads.write_back_stats()
            .conversions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if cads
            .config()
            .write_back
            .crash
            .as_ref()
            .is_some_and(|hook| (hook.0)(ApplyStep::ConvertedCommitted))
        {
            return Err(crashed());
        }
        return Ok(Step::Converted);
    }
    apply_ops(store, doc, &ops)?;
    let mut session = match crash_at(cads, ApplyStep::Applied, session) {
        Ok(()) => return Err(crashed()),
        Err(s) => s,
    };
    for &cmi in &cmis {
        session.on(cmi, |s| s.delete(&key))?;
    }
    remove_pending_line(cads, client, &mut session, &key)?;
    match session.commit() {
        Ok(()) => {}
        // Deleted on some replicas only (one's leases ran out): the copies left are applied
        // already and must go before a write mistakes them for a pending buffered write.
        Err(cads_client::ClientError::PartialCommit { .. }) => clean_up(cads, &key, version)?,
        Err(e) => return Err(e.into()),
    }
    let stats = cads.write_back_stats();
    stats
        .applied_writes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    stats
        .applied_ops
        .fetch_add(writes, std::sync::atomic::Ordering::Relaxed);
    Ok(Step::Applied(true))
}

/// Deletes the copies of an applied buffered write (version up to `applied`) that a partial
/// commit left on some replicas. A newer copy is a new buffered write and stays.
fn clean_up(cads: &Cads, key: &[u8], applied: u64) -> Result<()> {
    let client = cads.cache().expect("write-back has a cache");
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut session = client.session();
        let result = (|| {
            for cmi in replicas(cads, client, key) {
                let Some(bytes) = session.on(cmi, |s| s.get(key, true))? else {
                    continue;
                };
                let held = buffer::decode_versioned(&bytes)?;
                if held.version <= applied {
                    session.on(cmi, |s| s.delete(key))?;
                }
            }
            Ok::<(), Error>(())
        })();
        let outcome = result.and_then(|()| session.commit().map_err(Error::from));
        match outcome {
            Ok(()) => return Ok(()),
            Err(_) if attempts < cads.config().max_attempts => {
                cads_client::Backoff::new(&cads.config().retry).wait();
            }
            Err(e) => return Err(e),
        }
    }
}

/// Applies idempotent operations to the data store.
fn apply_ops(store: &dyn DataStore, doc: &DocRef, ops: &[DocOp]) -> Result<(), StoreError> {
    for op in ops {
        match op {
            DocOp::Insert(d) | DocOp::Put(d) => store.put(&doc.collection, &doc.id, d)?,
            DocOp::Delete => {
                store.delete(&doc.collection, &doc.id)?;
            }
            DocOp::Update(changes) => {
                store.update(&doc.collection, &doc.id, changes)?;
            }
        }
    }
    Ok(())
}

/// Removes one line naming `key` from its PendingWrites partition, on every replica.
fn remove_pending_line(
    cads: &Cads,
    client: &Client,
    session: &mut CacheSession<'_>,
    key: &[u8],
) -> Result<(), ClientError> {
    let pw = pw_key(partition_of(cads, key));
    for cmi in replicas(cads, client, &pw) {
        let Some(list) = session.on(cmi, |s| s.get(&pw, true))? else {
            continue;
        };
        let mut listed = lines(&list);
        if let Some(i) = listed.iter().position(|l| *l == key) {
            listed.remove(i);
        }
        if listed.is_empty() {
            session.on(cmi, |s| s.delete(&pw))?;
        } else {
            let value = join_lines(&listed);
            session.on(cmi, |s| s.set(&pw, &value, true))?;
        }
    }
    Ok(())
}

/// The documents with buffered writes listed in PendingWrites partition `partition` (the union
/// over its reachable replicas).
pub(crate) fn pending_in(cads: &Cads, partition: usize) -> Result<Vec<DocRef>> {
    let mut docs: Vec<DocRef> = Vec::new();
    for list in read_all(cads, &pw_key(partition))?.into_iter().flatten() {
        for doc in lines(&list).into_iter().filter_map(doc_of) {
            if !docs.contains(&doc) {
                docs.push(doc);
            }
        }
    }
    Ok(docs)
}

/// Every document with a buffered write waiting (all PendingWrites partitions).
pub fn pending(cads: &Cads) -> Result<Vec<DocRef>> {
    let mut all = Vec::new();
    for p in 0..cads.config().write_back.partitions.max(1) {
        all.extend(pending_in(cads, p)?);
    }
    Ok(all)
}
