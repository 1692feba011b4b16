//! Design 1 (000 §3.2): buffered writes per document, staged by writes, applied by Algorithm 2.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::Ordering;

use cads_client::{ClientError, Session as CacheSession, Write, Written};
use cads_store::{DocOp, DocWrite, StoreError};

use super::mac::Seal;
use super::replicated::{
    append_line, filter_list, lines, placed, read_many, replicas, sealed_line,
};
use super::{buffer, Buffering, Refused};
use crate::attempts::Attempts;
use crate::cache_store::DocRef;
use crate::error::{Error, Result};
use crate::failpoints;
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

pub(crate) fn pw_key(partition: usize) -> Vec<u8> {
    format!("PW:{partition}").into_bytes()
}

fn partition_of(cads: &Cads, bw_key: &[u8]) -> usize {
    let partitions = cads.buffer_partitions();
    (cads_client::stable_hash(bw_key) % partitions as u64) as usize
}

/// The buffered writes a session stages (000 Algorithm 11, write-back): per document, the
/// operations to add to its buffered write on every replica. A document without one gets it
/// registered in its PendingWrites partition. Appending, whether it has one is known only from
/// the replies: a write registers its document with its other writes unless this process wrote
/// the document's buffered write lately ([`RecentBuffers`](super::recent::RecentBuffers)), and
/// registers it after the replies if it guessed wrong (a line listed twice is read once). All
/// under the session's exclusive leases, so they become visible at its commit, together with the
/// cached values they go with.
///
/// Staging takes no round trip of its own: the session reads what [`reads`](Self::reads) lists
/// in the same `LMGET` as the cached values it changes, and sends [`writes`](Self::writes) in
/// the same pipeline as its other writes and its validation.
pub(crate) struct Staging {
    buffering: Buffering,
    seal: Seal,
    docs: Vec<DocStaging>,
}

struct DocStaging {
    key: Vec<u8>,
    cmis: Vec<usize>,
    ops: Vec<DocOp>,
    /// Appending: the document's registration in PendingWrites, sent with the other writes; empty
    /// when the document likely has a buffered write already.
    registration: Vec<(usize, Write)>,
}

impl Staging {
    pub(crate) fn plan(
        cads: &Cads,
        seal: &Seal,
        ops: &[(DocRef, DocOp)],
        buffering: Buffering,
    ) -> Staging {
        let client = cads.cache().expect("write-back has a cache");
        let mut per_doc: BTreeMap<&DocRef, Vec<DocOp>> = BTreeMap::new();
        for (doc, op) in ops {
            per_doc.entry(doc).or_default().push(op.clone());
        }
        let docs = per_doc
            .into_iter()
            .map(|(doc, ops)| {
                let key = bw_key(doc);
                // Half a pause: a worker pauses that long between passes that find little, so a
                // buffered write committed less than that ago is likely still there.
                let listed = || {
                    cads.recent_buffers
                        .within(&key, cads.config().write_back.worker_pause / 2)
                };
                let registration = match buffering {
                    Buffering::Append if !listed() => registration(cads, seal, &key),
                    _ => Vec::new(),
                };
                DocStaging {
                    cmis: replicas(cads, client, &key),
                    key,
                    ops,
                    registration,
                }
            })
            .collect();
        Staging {
            buffering,
            seal: seal.clone(),
            docs,
        }
    }

    /// The replicas to read under exclusive leases first: every replica of every buffered write
    /// when writes read-modify-write them, none when they append.
    pub(crate) fn reads(&self) -> Vec<(usize, Vec<u8>)> {
        if self.buffering == Buffering::Append {
            return Vec::new();
        }
        self.docs
            .iter()
            .flat_map(|d| d.cmis.iter().map(|&cmi| (cmi, d.key.clone())))
            .collect()
    }

    /// The writes, given the values [`reads`](Self::reads) returned (in its order), and the
    /// lines they leave out of the buffered writes they rewrite (refused: see [`buffer`]).
    ///
    /// Read-modify-write keeps the newest of the replicas' copies (a replica may lag behind after
    /// a commit that failed on it), adds the operations, compacts, and writes the result, one
    /// version newer, to every replica. Append adds, on every replica, a new buffered write's
    /// header where there is no buffered write (`LADD`) and then the operations (`LAPPEND`), and
    /// registers the document; see [`finish`](Self::finish) for replicas that turn out to
    /// disagree on whether there was one.
    pub(crate) fn writes(
        &self,
        cads: &Cads,
        read: &[Option<Vec<u8>>],
    ) -> (Vec<(usize, Write)>, Refused) {
        let mut writes = Vec::new();
        let mut refused = Refused::default();
        let mut read = read.iter();
        for doc in &self.docs {
            if self.buffering == Buffering::Append {
                // A new buffered write starts with its creation version (see `new_version`); the
                // appended lines after it count one write each.
                let header = buffer::encode_versioned(&self.seal, &doc.key, new_version(), 0, &[]);
                let lines = buffer::encode(&self.seal, &doc.key, &doc.ops);
                for &cmi in failpoints::replicas_written(&doc.cmis, |&cmi| cmi) {
                    let create = Write::Add {
                        key: doc.key.clone(),
                        value: header.clone(),
                        pin: true,
                    };
                    let append = Write::Append {
                        key: doc.key.clone(),
                        bytes: lines.clone(),
                    };
                    writes.extend([(cmi, create), (cmi, append)]);
                }
                writes.extend(doc.registration.iter().cloned());
                continue;
            }
            let mut newest: Option<buffer::Buffered> = None;
            for bytes in read.by_ref().take(doc.cmis.len()).flatten() {
                let mut held = buffer::decode_versioned(&self.seal, &doc.key, bytes);
                for (line, why) in std::mem::take(&mut held.refused) {
                    refused.add(&doc.key, &line, why);
                }
                if newest.as_ref().is_none_or(|n| held.version > n.version) {
                    newest = Some(held);
                }
            }
            let created = newest.is_none();
            let held = newest.unwrap_or(buffer::Buffered {
                version: 0,
                writes: 0,
                ops: Vec::new(),
                refused: Vec::new(),
            });
            let count = held.writes + doc.ops.len() as u64;
            let mut all = held.ops;
            all.extend(doc.ops.iter().cloned());
            let version = if created {
                new_version()
            } else {
                held.version + 1
            };
            let value = buffer::encode_versioned(
                &self.seal,
                &doc.key,
                version,
                count,
                &buffer::compact(all),
            );
            let cmis = failpoints::replicas_written(&doc.cmis, |&cmi| cmi);
            writes.extend(cmis.iter().map(|&cmi| {
                let set = Write::Set {
                    key: doc.key.clone(),
                    value: value.clone(),
                    pin: true,
                };
                (cmi, set)
            }));
            if created {
                writes.extend(registration(cads, &self.seal, &doc.key));
            }
        }
        (writes, refused)
    }

    /// Append buffering, after the writes: a new buffered write that was not registered with them
    /// is registered now; a replica that had no buffered write while another had one lost it (a
    /// CMI that restarted empty) and gets the whole buffered write from one that has it, not a
    /// new one holding this write alone. `written` is what the session's pipeline returned for
    /// [`writes`](Self::writes), in its order. These writes go with `LVALIDATE` when `validate`
    /// (the session's validation must follow its last write). There are none when the guess about
    /// the registration was right and the replicas agree on whether the document had a buffered
    /// write: then a write costs two round trips, new buffered write or not.
    pub(crate) fn finish(
        &self,
        cads: &Cads,
        session: &mut CacheSession<'_>,
        written: &[Written],
        validate: bool,
    ) -> Result<(), ClientError> {
        if self.buffering != Buffering::Append {
            return Ok(());
        }
        let mut fixes = Vec::new();
        let mut written = written.iter();
        for doc in &self.docs {
            let mut created = Vec::new();
            let mut holder = None;
            for &cmi in failpoints::replicas_written(&doc.cmis, |&cmi| cmi) {
                let added = written.next();
                let _appended = written.next();
                match added {
                    Some(Written::Added(true)) => created.push(cmi),
                    _ => {
                        holder.get_or_insert(cmi);
                    }
                }
            }
            written.by_ref().take(doc.registration.len()).for_each(drop);
            if created.is_empty() {
                continue;
            }
            let Some(holder) = holder else {
                // New on every replica: listed unless the guess skipped it.
                if doc.registration.is_empty() {
                    fixes.extend(registration(cads, &self.seal, &doc.key));
                }
                continue;
            };
            let whole = session
                .on(holder, |s| s.get(&doc.key, true))?
                .expect("the holder has the buffered write");
            fixes.extend(created.into_iter().map(|cmi| {
                let set = Write::Set {
                    key: doc.key.clone(),
                    value: whole.clone(),
                    pin: true,
                };
                (cmi, set)
            }));
        }
        if !fixes.is_empty() {
            session.write_at(&fixes, validate)?;
        }
        Ok(())
    }
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

/// The writes listing a new buffered write in its PendingWrites partition, on every replica of
/// the partition (the line sealed for the partition).
fn registration(cads: &Cads, seal: &Seal, key: &[u8]) -> Vec<(usize, Write)> {
    let pw = pw_key(partition_of(cads, key));
    append_line(cads, &pw, &sealed_line(seal, &pw, key))
}

/// The writes listing `docs` in their PendingWrites partitions again, whether or not they have
/// a buffered write (a line without one is dropped by the next worker that reads it): for a
/// session whose commit some CMIs took and others did not, which may have left a buffered write
/// visible without its line.
pub(crate) fn listing(cads: &Cads, docs: &[DocRef]) -> Result<Vec<(usize, Write)>> {
    let seal = cads.seal()?;
    Ok(docs
        .iter()
        .flat_map(|doc| registration(cads, seal, &bw_key(doc)))
        .collect())
}

/// Whether `doc` has a buffered write on any of its replicas (one round trip, no lease).
pub(crate) fn has_buffered(cads: &Cads, doc: &DocRef) -> Result<bool> {
    let client = cads.cache().expect("write-back has a cache");
    let key = bw_key(doc);
    let places: Vec<(usize, &[u8])> = replicas(cads, client, &key)
        .into_iter()
        .map(|cmi| (cmi, key.as_slice()))
        .collect();
    let mut reachable = false;
    for exists in client.exists_at(&places) {
        match exists {
            Ok(true) => return Ok(true),
            Ok(false) => reachable = true,
            Err(e) if e.is_unavailable() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if reachable {
        Ok(false)
    } else {
        Err(Error::Cache(ClientError::Unavailable {
            cmi: places[0].0,
            reason: "no replica of the buffered write can be reached".into(),
            refused: false,
        }))
    }
}

/// Algorithm 2 of 000 §3.2: applies `doc`'s buffered write to the data store, if it has one.
/// Returns whether it applied one.
pub fn apply_buffered(cads: &Cads, doc: &DocRef) -> Result<bool> {
    apply_docs(cads, std::slice::from_ref(doc), Patience::Wait, None).map(|applied| applied > 0)
}

/// What an applier does about a document whose leases another session holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Try again, for as long as [`Config::give_up_after`](crate::Config::give_up_after).
    Wait,
    /// Leave it: whoever holds it is applying it or writing it (TARDIS's AR workers, 000 §4.3.5).
    Skip,
}

/// Algorithm 2 for several documents at once (workers and the drain take them a PendingWrites
/// partition at a time): their idempotent buffered writes go to the data store in one
/// transaction, and are deleted with their PendingWrites lines in one cache session; the
/// non-idempotent ones are turned into their idempotent form in that session and applied in the
/// next round. Returns how many buffered writes it applied.
///
/// A batch that a writer's lease conflict aborts, or that the data store rejects, is split in
/// two and each half tried on its own, so that one contended or failing document does not hold
/// up the others. A single contended document is tried again or skipped, as `patience` says.
///
/// The lines of applied documents leave PendingWrites after each data-store transaction, or, when
/// `unlist_later` is given, their buffered writes' keys are added to it, for the caller to remove
/// with [`unlist`] once it has applied more (an AR worker working through a TeleW key reads and
/// rewrites it once, not once per batch).
pub(crate) fn apply_docs(
    cads: &Cads,
    docs: &[DocRef],
    patience: Patience,
    mut unlist_later: Option<&mut Vec<Vec<u8>>>,
) -> Result<usize> {
    let mut docs = docs.to_vec();
    docs.sort();
    docs.dedup();
    let mut applied = 0;
    let mut attempts = Attempts::new(cads.config());
    loop {
        let ticket = attempts.start();
        let failure = match apply_once(cads, &docs, ticket, unlist_later.as_deref_mut()) {
            Ok(round) if round.converted.is_empty() => return Ok(applied + round.applied),
            Ok(round) => {
                applied += round.applied;
                docs = round
                    .converted
                    .into_iter()
                    .map(|i| docs[i].clone())
                    .collect();
                continue;
            }
            Err(e) => e,
        };
        let splits = match &failure {
            Error::Aborted { .. } => true,
            Error::Store(e) => !e.is_transient(),
            // The conversions of a batch share the CMIs' pinned reserve: fewer may fit.
            Error::Cache(ClientError::NotStored) => true,
            _ => false,
        };
        if splits && docs.len() > 1 {
            let (first, second) = docs.split_at(docs.len() / 2);
            let first = apply_docs(cads, first, patience, unlist_later.as_deref_mut());
            let second = apply_docs(cads, second, patience, unlist_later);
            return Ok(applied + first? + second?);
        }
        match failure {
            Error::Aborted { .. } if patience == Patience::Skip => return Ok(applied),
            e @ Error::Aborted { .. } if !attempts.again() => return Err(attempts.gave_up(e)),
            Error::Aborted { .. } => {}
            Error::Cache(ClientError::NotStored) => {
                return Err(Error::App(format!(
                    "the buffered write of {}/{} cannot be turned into its idempotent form to be \
                     applied: the form does not fit in what is left of the CMIs' pinned reserve \
                     (the last eighth of max-pinned-memory, kept for this); it is tried again \
                     later, and a larger max-pinned-memory lets it through",
                    docs[0].collection, docs[0].id
                )))
            }
            e => return Err(e),
        }
    }
}

/// What one round of Algorithm 2 did.
struct Round {
    /// Buffered writes applied.
    applied: usize,
    /// Indexes of the documents whose buffered writes were converted to their idempotent form,
    /// to be applied next.
    converted: Vec<usize>,
}

/// An applier that a failpoint makes die at `point`: the session is abandoned without releasing
/// anything, as a crashed process would leave it; its leases expire. Returns the session if the
/// applier lives on.
fn crash_at<'c>(point: &str, session: CacheSession<'c>) -> Option<CacheSession<'c>> {
    if failpoints::dies_at(point) {
        std::mem::forget(session);
        None
    } else {
        Some(session)
    }
}

fn crashed() -> Error {
    Error::App("the worker died (failpoint)".into())
}

/// One round of Algorithm 2 over distinct documents, in three cache round trips and one
/// data-store transaction: exclusive leases on every replica of their buffered writes (the newest
/// copy is the buffered write); the idempotent ones written to the data store; inside that
/// transaction, before it commits, the session validated, the applied ones deleted and the others
/// replaced by their idempotent form, and the session validated again; then the session
/// committed, and the documents' lines removed from PendingWrites (`unlist`; in the same session
/// when nothing went to the data store). A worker that dies anywhere in between leaves either the
/// original or the idempotent form behind, never a half-applied one: applying an idempotent one
/// again does no harm. One whose leases ran out before the validation applies nothing.
fn apply_once(
    cads: &Cads,
    docs: &[DocRef],
    ticket: Option<u64>,
    unlist_later: Option<&mut Vec<Vec<u8>>>,
) -> Result<Round> {
    let client = cads.cache().expect("write-back has a cache");
    let store = cads.store().as_ref();
    let seal = cads.seal()?;
    let mut refused = Refused::default();
    let keys: Vec<Vec<u8>> = docs.iter().map(bw_key).collect();
    let places = placed(cads, client, &keys);
    let mut session = client.session();
    if let Some(ticket) = ticket {
        session.set_ticket(ticket);
    }
    let copies = session.mget_at(&places, true)?;
    let mut newest: Vec<Option<buffer::Buffered>> = vec![None; docs.len()];
    let mut index = 0;
    for ((_, key), bytes) in places.iter().zip(copies) {
        // Replicas of a key are next to one another, in the order of `keys`.
        while keys[index].as_slice() != *key {
            index += 1;
        }
        let Some(bytes) = bytes else { continue };
        let mut held = buffer::decode_versioned(seal, key, &bytes);
        for (line, why) in std::mem::take(&mut held.refused) {
            refused.add(key, &line, why);
        }
        if newest[index]
            .as_ref()
            .is_none_or(|n| held.version > n.version)
        {
            newest[index] = Some(held);
        }
    }
    let mut batch: Vec<DocWrite> = Vec::new();
    // (document, version, operations written) of the buffered writes applied now.
    let mut applied: Vec<(usize, u64, u64)> = Vec::new();
    let mut converted: Vec<(usize, Vec<u8>)> = Vec::new();
    for (i, held) in newest.into_iter().enumerate() {
        let Some(held) = held else { continue };
        let ops = buffer::compact(held.ops);
        if buffer::is_idempotent(&ops) {
            batch.extend(ops.into_iter().map(|op| DocWrite {
                collection: docs[i].collection.clone(),
                id: docs[i].id.clone(),
                // Applied again after a worker died, an insert must not fail on the document it
                // created the first time.
                op: match op {
                    DocOp::Insert(d) => DocOp::Put(d),
                    other => other,
                },
            }));
            applied.push((i, held.version, held.writes));
        } else {
            // The data store has none of these operations yet (a buffered write is applied only
            // once it is idempotent), so its document is the state they apply to.
            let before = store.get(&docs[i].collection, &docs[i].id)?;
            let form = buffer::idempotent_form(&ops, before)?;
            converted.push((
                i,
                buffer::encode_versioned(seal, &keys[i], held.version + 1, held.writes, &form),
            ));
        }
    }
    failpoints::break_applier(&mut batch, |w: &DocWrite| {
        format!("{}:{}", w.collection, w.id)
    });
    // Lines of documents applied now, or found without a buffered write, leave PendingWrites.
    let converted_docs: HashSet<usize> = converted.iter().map(|(i, _)| *i).collect();
    let gone: Vec<Vec<u8>> = (0..docs.len())
        .filter(|i| !converted_docs.contains(i))
        .map(|i| keys[i].clone())
        .collect();
    let mut writes: Vec<(usize, Write)> = Vec::new();
    for &(cmi, key) in &places {
        let i = keys
            .iter()
            .position(|k| k.as_slice() == key)
            .expect("placed");
        if applied.iter().any(|&(a, _, _)| a == i) {
            writes.push((cmi, Write::Delete { key: key.to_vec() }));
        } else if let Some((_, value)) = converted.iter().find(|(c, _)| *c == i) {
            // From the pinned reserve: with pinned memory full of buffered writes, converting
            // one is the only way to apply it and free its room.
            let set = Write::SetPinnedFromReserve {
                key: key.to_vec(),
                value: value.clone(),
            };
            writes.push((cmi, set));
        }
    }
    // Without a data-store transaction the lines go in this session. With one they go in a
    // session of their own once it commits: writers registering new buffered writes need the
    // partitions' leases, and would wait out the transaction's commit.
    let unlist_now = batch.is_empty();
    if unlist_now {
        let gone: HashSet<&[u8]> = gone.iter().map(Vec::as_slice).collect();
        let pw_keys = partitions_listing(cads, &gone);
        let pw_places = placed(cads, client, &pw_keys);
        let lists = if pw_places.is_empty() {
            Vec::new()
        } else {
            session.mget_at(&pw_places, true)?
        };
        writes.extend(unlisting(seal, &pw_places, lists, &gone, &mut refused));
    }
    session = crash_at(failpoints::APPLY_LEASED, session).ok_or_else(crashed)?;
    if batch.is_empty() {
        session.validate_and_write_at(&writes)?;
    } else {
        // The cache changes are validated inside the data-store transaction, after its writes:
        // were this worker's leases gone (it stalled past them), another applier may have applied
        // a newer buffered write already, and this older one must not land after it. Once
        // validated, an applier that takes the leases over waits for this transaction's row
        // locks, so its newer writes land after these.
        let mut lost = None;
        let fenced = store.write_batch_fenced(&batch, &mut || {
            session
                .validate_and_write_at(&writes)
                .map(drop)
                .map_err(|e| {
                    lost = Some(e);
                    StoreError::Conflict("the applier lost its cache leases".into())
                })
        });
        if let Some(e) = lost {
            return Err(e.into());
        }
        fenced?;
        session = crash_at(failpoints::APPLY_APPLIED, session).ok_or_else(crashed)?;
    }
    if !converted.is_empty() {
        session = crash_at(failpoints::APPLY_CONVERTED, session).ok_or_else(crashed)?;
    }
    match session.commit() {
        Ok(()) => {}
        // Done on some replicas only (one's leases ran out): the applied copies left must go
        // before a write mistakes them for a pending buffered write. A conversion that reached
        // some replicas only is found there as the newest copy.
        Err(ClientError::PartialCommit { .. }) => {
            for &(i, version, writes) in &applied {
                clean_up(cads, &keys[i], version, writes)?;
            }
        }
        Err(e) => return Err(e.into()),
    }
    refused.discarded(cads.write_back_stats());
    if !unlist_now {
        match unlist_later {
            Some(later) => later.extend(gone),
            None => unlist_applied(cads, &gone),
        }
    }
    let stats = cads.write_back_stats();
    if !converted.is_empty() {
        stats
            .conversions
            .fetch_add(converted.len() as u64, Ordering::Relaxed);
        if failpoints::dies_at(failpoints::APPLY_CONVERTED_COMMITTED) {
            return Err(crashed());
        }
    }
    stats
        .applied_writes
        .fetch_add(applied.len() as u64, Ordering::Relaxed);
    stats.applied_ops.fetch_add(
        applied.iter().map(|&(_, _, writes)| writes).sum(),
        Ordering::Relaxed,
    );
    Ok(Round {
        applied: applied.len(),
        converted: converted.into_iter().map(|(i, _)| i).collect(),
    })
}

/// Writes what a broken `reorder` applier held back (see [`failpoints::Broken::Reorder`]), if
/// it held something: last, after every newer write of its document.
pub(crate) fn apply_delayed(cads: &Cads) -> Result<()> {
    let writes: Vec<DocWrite> = failpoints::take_delayed();
    if !writes.is_empty() {
        cads.store().write_batch(&writes)?;
    }
    Ok(())
}

/// The PendingWrites partitions listing these buffered writes.
fn partitions_listing(cads: &Cads, bw_keys: &HashSet<&[u8]>) -> Vec<Vec<u8>> {
    let partitions: BTreeSet<usize> = bw_keys.iter().map(|k| partition_of(cads, k)).collect();
    partitions.into_iter().map(pw_key).collect()
}

/// The writes removing the lines of `gone` buffered writes, and the lines whose seals do not open
/// (noted in `refused`), from the PendingWrites `lists` read at `pw_places`.
fn unlisting(
    seal: &Seal,
    pw_places: &[(usize, &[u8])],
    lists: Vec<Option<Vec<u8>>>,
    gone: &HashSet<&[u8]>,
    refused: &mut Refused,
) -> Vec<(usize, Write)> {
    let mut writes = Vec::new();
    for (&(cmi, pw), list) in pw_places.iter().zip(lists) {
        let Some(list) = list else { continue };
        let keep = |bw_key: &[u8]| !gone.contains(bw_key);
        if let Some(write) = filter_list(seal, pw, &list, keep, false, refused) {
            writes.push((cmi, write));
        }
    }
    writes
}

/// Removes applied buffered writes from PendingWrites (Step 6 of 000 Algorithm 6); on failure the
/// lines stay, and the next pass over the partition finds no buffered write there and removes
/// them.
pub(crate) fn unlist_applied(cads: &Cads, bw_keys: &[Vec<u8>]) {
    if bw_keys.is_empty() {
        return;
    }
    failpoints::before_unlist();
    if let Err(e) = unlist(cads, bw_keys) {
        tracing::debug!(error = %e, "applied buffered writes left listed in PendingWrites");
    }
}

/// Removes applied buffered writes (`bw_keys`) from PendingWrites, in a session of their own: it
/// holds their exclusive leases with the partitions', so that a buffered write a writer created
/// since keeps its line (the writer registered it again, or will once these leases are gone).
fn unlist(cads: &Cads, bw_keys: &[Vec<u8>]) -> Result<()> {
    let all: HashSet<&[u8]> = bw_keys.iter().map(Vec::as_slice).collect();
    unlist_from(cads, bw_keys, &partitions_listing(cads, &all))
}

/// Removes the lines whose seals do not open from PendingWrites `partitions` (found by
/// [`pending_in`]): not written by an AppNode of this deployment, they name nothing to apply.
pub(crate) fn purge(cads: &Cads, partitions: &[usize]) -> Result<()> {
    let pw_keys: Vec<Vec<u8>> = partitions.iter().map(|&p| pw_key(p)).collect();
    unlist_from(cads, &[], &pw_keys)
}

/// [`unlist`] from the lists `pw_keys`, which also loses its lines that do not open.
fn unlist_from(cads: &Cads, bw_keys: &[Vec<u8>], pw_keys: &[Vec<u8>]) -> Result<()> {
    let client = cads.cache().expect("write-back has a cache");
    let seal = cads.seal()?;
    let all: HashSet<&[u8]> = bw_keys.iter().map(Vec::as_slice).collect();
    let bw_places = placed(cads, client, bw_keys);
    let pw_places = placed(cads, client, pw_keys);
    let mut reads = bw_places.clone();
    reads.extend_from_slice(&pw_places);
    let mut session = client.session();
    let mut values = session.mget_at(&reads, true)?;
    let lists = values.split_off(bw_places.len());
    let recreated: HashSet<&[u8]> = bw_places
        .iter()
        .zip(&values)
        .filter(|(_, value)| value.is_some())
        .map(|(&(_, key), _)| key)
        .collect();
    let gone: HashSet<&[u8]> = all.difference(&recreated).copied().collect();
    let mut refused = Refused::default();
    let writes = unlisting(seal, &pw_places, lists, &gone, &mut refused);
    session.write_at(&writes, true)?;
    session.commit()?;
    refused.discarded(cads.write_back_stats());
    Ok(())
}

/// Deletes the copies of an applied buffered write (`version`, `writes` operations) that a
/// partial commit left on some replicas (see [`left_behind`]).
fn clean_up(cads: &Cads, key: &[u8], version: u64, writes: u64) -> Result<()> {
    let client = cads.cache().expect("write-back has a cache");
    let seal = cads.seal()?;
    let mut attempts = Attempts::new(cads.config());
    loop {
        let mut session = client.session();
        if let Some(ticket) = attempts.start() {
            session.set_ticket(ticket);
        }
        let result = (|| {
            for cmi in replicas(cads, client, key) {
                let Some(bytes) = session.on(cmi, |s| s.get(key, true))? else {
                    continue;
                };
                let held = buffer::decode_versioned(seal, key, &bytes);
                if left_behind(&held, version, writes) {
                    session.on(cmi, |s| s.delete(key))?;
                }
            }
            Ok::<(), Error>(())
        })();
        let outcome = result.and_then(|()| session.commit().map_err(Error::from));
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if !attempts.again() => return Err(attempts.gave_up(e)),
            Err(_) => {}
        }
    }
}

/// Whether `held`, a copy of a buffered write found after an applier's commit reached some of
/// its replicas only, is the applied one (`version`, `writes` operations) or older, and must go.
/// A newer copy is a new buffered write. So is a copy of the applied version holding more
/// operations: a write appended to it since (append buffering finds the copy in place, and
/// copies it to the replicas that lost theirs, version and all), which deleting would lose.
fn left_behind(held: &buffer::Buffered, version: u64, writes: u64) -> bool {
    held.version < version || (held.version == version && held.writes <= writes)
}

/// What the PendingWrites partitions list.
pub(crate) struct Listed {
    /// Per partition asked for, the documents with buffered writes it lists (the union over its
    /// reachable replicas).
    pub docs: Vec<Vec<DocRef>>,
    /// The partitions holding lines whose seals do not open (see [`purge`]).
    pub refused: Vec<usize>,
}

/// The documents with buffered writes listed in each of the PendingWrites `partitions`, read in
/// one round trip.
pub(crate) fn pending_in(cads: &Cads, partitions: &[usize]) -> Result<Listed> {
    let seal = cads.seal()?;
    let keys: Vec<Vec<u8>> = partitions.iter().map(|&p| pw_key(p)).collect();
    let mut listed = Listed {
        docs: Vec::with_capacity(partitions.len()),
        refused: Vec::new(),
    };
    for ((copies, key), &partition) in read_many(cads, &keys)?
        .into_iter()
        .zip(&keys)
        .zip(partitions)
    {
        let mut docs: Vec<DocRef> = Vec::new();
        // A partition lists thousands of documents during a long outage, on every replica, and
        // a document's line is the same bytes on each: each is opened once.
        let copies: Vec<Vec<u8>> = copies.into_iter().flatten().collect();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut refused = false;
        for list in &copies {
            for line in lines(list) {
                if !seen.insert(line) {
                    continue;
                }
                match seal.open(key, line) {
                    Some(payload) => docs.extend(doc_of(payload)),
                    None => refused = true,
                }
            }
        }
        if refused {
            listed.refused.push(partition);
        }
        listed.docs.push(docs);
    }
    Ok(listed)
}

/// Every document with a buffered write waiting (all PendingWrites partitions).
pub fn pending(cads: &Cads) -> Result<Vec<DocRef>> {
    let partitions: Vec<usize> = (0..cads.buffer_partitions()).collect();
    Ok(pending_in(cads, &partitions)?
        .docs
        .into_iter()
        .flatten()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(version: u64, writes: u64) -> buffer::Buffered {
        buffer::Buffered {
            version,
            writes,
            ops: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Applied version 7 with 3 operations: the copies left of it or older go; a newer one, or
    /// one a write appended to since, stays.
    #[test]
    fn only_the_applied_copy_or_an_older_one_is_left_behind() {
        assert!(left_behind(&copy(7, 3), 7, 3));
        assert!(left_behind(&copy(7, 2), 7, 3), "a lagging replica of it");
        assert!(left_behind(&copy(6, 9), 7, 3), "an older buffered write");
        assert!(!left_behind(&copy(7, 4), 7, 3), "a write appended since");
        assert!(!left_behind(&copy(8, 1), 7, 3), "a new buffered write");
    }
}
