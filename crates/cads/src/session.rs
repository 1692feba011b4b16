//! A session over the cache and the data store: NgCache's `startSession`, `readStatement`,
//! `writeStatement`, `preCommitSession`, `commitSession` and `abortSession` (000 §5.2,
//! Algorithms 8-11).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cads_client::{ClientError, MarkOp, Write};
use cads_store::{Changes, DocOp, StoreError};

use crate::cache_store::{CacheChange, CacheStore, DocRef};
use crate::cpr::{Ended, SessionLeases};
use crate::error::{Error, Result};
use crate::failpoints;
use crate::gemini::{self, Routes};
use crate::missed::Missed;
use crate::sas::{Grant, SasSession};
use crate::tardis::{self, Mode, OnMiss};
use crate::tx::StoreTx;
use crate::writeback::design1;
use crate::writeback::design2::{self, SessionWrites};
use crate::writeback::{Buffering, Refused, SqlBuffer};
use crate::{Cads, Policy};

/// One atomic unit of work: reads and writes through [`CacheStore`]s, at most one data-store
/// transaction. Use [`Cads::run`] for the form that retries aborted sessions; use this directly
/// for Algorithm 8's explicit steps.
pub struct Session<'a> {
    cads: &'a Cads,
    cache: Option<cads_client::Session<'a>>,
    tx: StoreTx<'a>,
    /// Write-around: keys deleted at commit.
    deletes: Vec<Vec<u8>>,
    /// Write-through: changes to cached values, in the order the writes were made.
    changes: Vec<(Vec<u8>, CacheChange)>,
    /// Every cache key this session's writes change (for the record of CMIs that missed writes).
    written_keys: Vec<Vec<u8>>,
    /// Write-back: document operations to buffer at pre-commit.
    buffered: Vec<(DocRef, DocOp)>,
    /// Write-back: the documents this session writes.
    written_docs: Vec<DocRef>,
    /// Write-back, Design 2: the session's buffered statements and what they affect.
    sql_writes: SessionWrites,
    /// Write-back's fallback to write-through: queues this session holds and has applied.
    held_queues: Vec<String>,
    /// Write-back's fallback: queues held from the session's start, which an earlier run of the
    /// same work held or met only after it had begun writing the data store.
    queues_first: Vec<String>,
    /// Write-back's fallback: a queue met after the session began writing (see `hold_queue`).
    late_queue: Option<String>,
    /// Write-back: what this session's writes leave out of the entries they rewrite (refused
    /// lines of buffered writes and queues), counted if it commits.
    refused: Refused,
    /// Write-back found pinned memory full: this session writes through, after applying the
    /// buffered writes of its documents.
    write_through: bool,
    /// Set when the cache could not be reached and the session went on with the data store
    /// alone: the CMI that failed and how.
    degraded: Option<(usize, String)>,
    /// CMIs this session's writes skipped (see [`Session::missed`]).
    missed_cmis: Vec<usize>,
    /// TARDIS: the AppNode's mode when the session started.
    mode: Option<Mode>,
    /// TARDIS: the session's document writes are buffered in the cache (teleported) instead of
    /// going to the data store.
    teleport: bool,
    /// TARDIS Contextual: the CMIs of the keys a teleported write marked, committed first.
    marked_cmis: Vec<usize>,
    /// The session gave up its data-store transaction: it can only be aborted and run again.
    must_rerun: bool,
    prepared: bool,
    /// Gemini: the configuration the session routes by, when Gemini is on.
    routes: Option<Arc<Routes>>,
    /// SAS: the session's leases and reads with the SAS core, when the cache is in-process.
    sas: Option<SasSession>,
    /// CPR: the interval leases of the session's range writes, held until it ends.
    cpr: SessionLeases,
    /// Values this session found cached under its shared leases: a change that needs the cached
    /// value starts from it instead of reading it again (see `stage`).
    read_values: HashMap<Vec<u8>, Vec<u8>>,
}

impl<'a> Session<'a> {
    /// A session of `cads`; `ticket`: the work's ticket, for a session that runs it again after
    /// a conflict ([`cads_client::Session::set_ticket`]).
    pub(crate) fn new(cads: &'a Cads, write_through: bool, ticket: Option<u64>) -> Session<'a> {
        let routes = cads.gemini().map(|g| g.routes());
        let cache = match cads.policy() {
            Policy::DataStoreOnly => None,
            _ => cads.cache().map(|c| {
                let mut session = c.session();
                if let Some(ticket) = ticket {
                    session.set_ticket(ticket);
                }
                if let Some(id) = routes.as_ref().map(|r| r.id()).filter(|&id| id > 0) {
                    session.set_configuration(id);
                }
                session
            }),
        };
        let mode = cads.tardis().map(|t| t.mode());
        let teleport = match (cads.tardis(), mode) {
            (Some(t), Some(mode)) => t.teleports(mode),
            _ => false,
        };
        Session {
            cads,
            cache,
            tx: StoreTx::new(cads.store().as_ref(), cads.config().isolation),
            deletes: Vec::new(),
            changes: Vec::new(),
            written_keys: Vec::new(),
            buffered: Vec::new(),
            written_docs: Vec::new(),
            sql_writes: SessionWrites::default(),
            held_queues: Vec::new(),
            queues_first: Vec::new(),
            late_queue: None,
            refused: Refused::default(),
            write_through,
            degraded: None,
            missed_cmis: Vec::new(),
            mode,
            teleport,
            marked_cmis: Vec::new(),
            must_rerun: false,
            prepared: false,
            routes,
            sas: cads.sas_node().map(SasSession::new),
            cpr: SessionLeases::default(),
            read_values: HashMap::new(),
        }
    }

    /// The framework the session runs in.
    pub(crate) fn framework(&self) -> &'a Cads {
        self.cads
    }

    /// CPR: the session's interval leases.
    pub(crate) fn cpr(&mut self) -> &mut SessionLeases {
        &mut self.cpr
    }

    /// Gemini: a cache error that may mean the configuration changed (a refusal by a newer
    /// configuration or by a fence, an instance that cannot be reached) makes the process fetch
    /// it, so that the session's next run routes by it; such an error is a retryable abort.
    /// Other errors, and every error without Gemini, convert as usual.
    fn cache_error(&self, e: ClientError) -> Error {
        if !self.refresh_after(&e) {
            return e.into();
        }
        Error::Aborted {
            reason: format!("{e}; running again by the newest configuration"),
        }
    }

    /// Gemini: whether `e` may mean the configuration changed, in which case the process fetches
    /// it (at once when a CMI named a newer one, else unless a fetch just began).
    fn refresh_after(&self, e: &ClientError) -> bool {
        let (Some(router), Some(client)) = (self.cads.gemini(), self.cads.cache()) else {
            return false;
        };
        match e {
            ClientError::StaleConfiguration { .. } => router.refresh(client),
            e if Self::read_goes_around(e) => router.refresh_soon(client),
            _ => return false,
        };
        true
    }

    /// A cache error a read survives by going to the data store: the cache cannot be reached,
    /// or (Gemini) the instance serves no key until the coordinator moves its fragments.
    fn read_goes_around(e: &ClientError) -> bool {
        e.is_unavailable() || matches!(e, ClientError::Fenced)
    }

    /// Write-back, before a read of `keys` queries the data store: the buffered writes its result
    /// depends on go to the data store first (000 Algorithm 1, with the mappings), or, when
    /// `may_fold` and every pending session left query result changes for the keys, those
    /// changes are returned, to be folded into the data store's result (Algorithm 3). Under
    /// TARDIS, see [`Self::before_store_read_tardis`]; `marked` is for it.
    fn before_store_read<C: CacheStore>(
        &mut self,
        cs: &C,
        query: &C::Query,
        keys: &[Vec<u8>],
        may_fold: bool,
        marked: bool,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        if self.cads.tardis().is_some() {
            self.before_store_read_tardis(&cs.buffered_reads(query), marked)?;
            return Ok(None);
        }
        if self.cads.policy() != Policy::WriteBack {
            return Ok(None);
        }
        for doc in cs.buffered_reads(query) {
            if design1::has_buffered(self.cads, &doc)? {
                design1::apply_buffered(self.cads, &doc)?;
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        let pending = design2::pending_for(self.cads, keys)?;
        if pending.is_empty() {
            return Ok(None);
        }
        let pending = design2::in_queue_order(self.cads, pending)?;
        if pending.is_empty() {
            return Ok(None);
        }
        if may_fold && design2::all_foldable(&pending, keys) {
            let cache = self.cache.as_mut().expect("folding needs the cache");
            let held = design2::lease_pending(self.cads, cache, pending)?;
            self.refresh_reads()?;
            let unapplied = design2::not_applied(self.cads, self.tx.read_sql()?, held)?;
            let changes = unapplied
                .into_iter()
                .flat_map(|p| p.writes.result_changes)
                .filter(|(key, _)| keys.contains(key))
                .map(|(_, change)| change)
                .collect();
            return Ok(Some(changes));
        }
        design2::apply_through(self.cads, &pending)?;
        self.refresh_reads()?;
        Ok(None)
    }

    /// TARDIS, before a miss queries the data store (000 Tables 4.2-4.3): depending on the mode
    /// and the technique, the buffered writes of `docs` (the mapping) are applied first, or the
    /// read is refused because the data store may lack them. `marked`: a key read carries a
    /// Contextual marker (a hit included), or the read could not ask for markers.
    fn before_store_read_tardis(&mut self, docs: &[DocRef], marked: bool) -> Result<()> {
        let t = self.cads.tardis().expect("checked");
        let refuse = |why: String| {
            t.note_refused_miss();
            Err(Error::StoreUnavailable { reason: why })
        };
        let unchecked = |e: &ClientError| {
            format!(
                "the data store must answer this read, and whether it lacks buffered writes the \
                 read depends on cannot be checked: {e}"
            )
        };
        match t.on_miss(marked) {
            OnMiss::Query => Ok(()),
            OnMiss::Refuse => refuse(format!(
                "a read missed in the cache in {} mode, and {} does not apply buffered writes on \
                 a miss: retry once the AppNode is in normal mode",
                t.mode().name(),
                t.config.technique.name().to_uppercase()
            )),
            OnMiss::QueryIfClean => match tardis::any_dirty(self.cads, docs) {
                Ok(true) => refuse(
                    "a read missed in the cache while the data store is down and lacks buffered \
                     writes it depends on"
                        .into(),
                ),
                Ok(false) => Ok(()),
                Err(Error::Cache(e)) if e.is_unavailable() => refuse(unchecked(&e)),
                Err(e) => Err(e),
            },
            OnMiss::ApplyFirst if self.tx.write_snapshot_fixed() => {
                match tardis::any_dirty(self.cads, docs) {
                    Ok(true) => Err(self.rerun_after_applying(docs, Vec::new())),
                    Ok(false) => Ok(()),
                    Err(Error::Cache(e)) if e.is_unavailable() => refuse(unchecked(&e)),
                    Err(e) => Err(e),
                }
            }
            OnMiss::ApplyFirst => match tardis::apply_dirty(self.cads, docs) {
                // Another AppNode may have applied them after this session's read snapshot was
                // taken (a write snapshot is dealt with above, and for markers in `read`).
                Ok(0) => {
                    self.tx.renew_read_snapshot();
                    Ok(())
                }
                Ok(_) => self.refresh_reads(),
                Err(Error::Store(e)) if tardis::is_failure(&e) => refuse(format!(
                    "the data store must answer this read and the buffered writes it depends on \
                     cannot be applied: {e}"
                )),
                Err(Error::Cache(e)) if e.is_unavailable() => refuse(unchecked(&e)),
                Err(e) => Err(e),
            },
        }
    }

    /// Makes the session's next data-store read see what was applied just now. A session whose
    /// write transaction reads from an older snapshot cannot: it runs again.
    fn refresh_reads(&mut self) -> Result<()> {
        if self.tx.refresh_reads() {
            Ok(())
        } else {
            Err(Error::Aborted {
                reason: "its data-store snapshot predates buffered writes it just applied".into(),
            })
        }
    }

    /// Queries the data store for a read the cache cannot serve, after write-back's buffered writes
    /// for `keys` are applied or folded in (TARDIS: `marked`, see `before_store_read_tardis`).
    fn query_store<C: CacheStore>(
        &mut self,
        cs: &C,
        query: &C::Query,
        keys: &[Vec<u8>],
        may_fold: bool,
        marked: bool,
    ) -> Result<C::Output> {
        let queried = self
            .before_store_read(cs, query, keys, may_fold, marked)
            .and_then(|changes| Ok((changes, cs.query_store(query, &mut self.tx)?)));
        let (changes, mut output) = match queried {
            Ok(queried) => queried,
            // Under TARDIS and write-back the cache may hold writes the data store lacks: a miss
            // the data store cannot serve is the same refusal whatever failed, applying them or
            // querying.
            Err(Error::Store(e))
                if tardis::is_failure(&e)
                    && (self.cads.tardis().is_some()
                        || self.cads.policy() == Policy::WriteBack) =>
            {
                if let Some(t) = self.cads.tardis() {
                    t.store_failed(&e);
                    t.note_refused_miss();
                }
                return Err(Error::StoreUnavailable {
                    reason: format!("a read missed in the cache and the data store failed: {e}"),
                });
            }
            Err(e) => return Err(e),
        };
        if let Some(changes) = changes {
            if !changes.is_empty() && !cs.fold_result_changes(query, &mut output, &changes) {
                return Err(Error::App(
                    "fold_result_changes did not fold pending query result changes into a \
                     result (a CacheStore that returns result_changes must implement it)"
                        .into(),
                ));
            }
        }
        Ok(output)
    }

    /// The session's data-store transaction, for statements the application runs itself.
    pub fn tx(&mut self) -> &mut StoreTx<'a> {
        &mut self.tx
    }

    /// Whether the cache was found down during this session, which then worked on the data store
    /// alone.
    pub fn degraded(&self) -> bool {
        self.degraded.is_some()
    }

    /// A cache failure that the session survives by working on the data store alone. The CMIs
    /// are recorded as missed only for what the session then writes (`note_missed_writes`): a
    /// read around the cache misses nothing, and a needless record costs the CMI a flush.
    pub(crate) fn degrade(&mut self, e: &ClientError) {
        if self.routes.is_some() {
            // Gemini: every read of a failed instance comes here until the coordinator moves its
            // fragments, which the coordinator and the configuration's refresh log once.
            tracing::debug!(error = %e, "cache instance unavailable; reading the data store");
        } else {
            tracing::warn!(error = %e, "cache unreachable; this session uses the data store alone");
        }
        let cmi = match e {
            ClientError::Unavailable { cmi, .. } | ClientError::Io { cmi, .. } => *cmi,
            _ => 0,
        };
        self.degraded = Some((cmi, e.to_string()));
    }

    fn use_cache(&self) -> bool {
        self.cache.is_some() && self.degraded.is_none() && self.cads.leases()
    }

    /// `readStatement` (Algorithm 9): the cached result if every key hits, else the data store's,
    /// filling the keys that missed. Misses take shared (I) leases, so concurrent misses on one
    /// key query the data store once, and a writer's exclusive lease voids a fill computed from
    /// data it is about to change (001 §3.3).
    pub fn read<C: CacheStore>(&mut self, cs: &C, query: &C::Query) -> Result<C::Output> {
        self.check_not_given_up()?;
        if self.sas.is_some() {
            return self.read_sas(cs, query);
        }
        if !self.cads.leases() && self.cache.is_some() {
            return self.read_without_leases(cs, query);
        }
        let keys = cs.keys_read(query);
        // Without the keys' markers, a Contextual read must assume some key is marked.
        if !self.use_cache() || keys.is_empty() {
            return self.query_store(cs, query, &keys, false, true);
        }
        if let Some(cmi) = self.cads.missed_among(&keys) {
            if self.cads.policy() == Policy::WriteBack {
                // Read without a lease, the value may change before this session's writes are
                // buffered, and no data-store transaction orders them as it would a
                // write-through's: the session must not write (see `pre_commit`).
                self.degrade(&ClientError::Unavailable {
                    cmi,
                    reason: "it missed writes of this process and is not flushed yet".into(),
                    refused: false,
                });
            }
            return self.query_store(cs, query, &keys, false, true);
        }
        // Gemini: keys of a fragment no instance can serve now are read around the cache, and
        // dirty keys of a recovering primary are repaired first (004 Algorithm 1).
        let repair = match self.routes.as_ref().map(|r| r.read_plan(&keys)) {
            Some(None) => return self.query_store(cs, query, &keys, false, true),
            Some(Some(repair)) => repair,
            None => Vec::new(),
        };
        if !repair.is_empty() {
            self.repair_dirty(&repair)?;
        }
        let step = self.tx.next_step();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let cache = self.cache.as_mut().expect("use_cache checked it");
        let read = if self.cads.tardis().is_some_and(|t| t.marks()) {
            cache.mget_marked(&key_refs, false)
        } else {
            cache
                .mget(&key_refs, false)
                .map(|values| values.into_iter().map(|v| (v, false)).collect())
        };
        let (values, marked): (Vec<Option<Vec<u8>>>, Vec<bool>) = match read {
            Ok(read) => read.into_iter().unzip(),
            // Reads go to the data store (004 §2.2); a write of the session will wait.
            Err(e) if Self::read_goes_around(&e) => {
                self.refresh_after(&e);
                self.degrade(&e);
                return self.query_store(cs, query, &keys, false, true);
            }
            Err(e) => return Err(self.cache_error(e)),
        };
        if values.iter().all(Option::is_some) {
            let cached: Vec<Vec<u8>> = values.iter().flatten().cloned().collect();
            if let Some(output) = cs.result_from_cache(query, &cached) {
                // Only write-through and write-back change cached values from what was read.
                if matches!(self.cads.policy(), Policy::WriteThrough | Policy::WriteBack) {
                    self.read_values.extend(keys.into_iter().zip(cached));
                }
                return Ok(output);
            }
        } else if let Some(output) = self.transfer_working_set(cs, query, &keys, &values) {
            return Ok(output);
        }
        let missed = missed_keys(&keys, &values);
        let marked: Vec<Vec<u8>> = keys
            .iter()
            .zip(&marked)
            .filter(|(_, &m)| m)
            .map(|(k, _)| k.clone())
            .collect();
        if !marked.is_empty() && self.tx.write_snapshot_fixed() {
            return Err(self.rerun_after_applying(&cs.buffered_reads(query), marked));
        }
        // Pending buffered writes of every key count, not only of those that missed: the data
        // store's result also stands for the keys that hit (and so do their markers).
        let output = self.query_store(cs, query, &keys, true, !marked.is_empty())?;
        if !marked.is_empty() {
            self.unmark(marked)?;
        }
        failpoints::before_fill();
        // A transaction reading from a snapshot older than our leases could have read data that a
        // writer changed and released before we asked: such a result is not cached.
        if self.tx.snapshot_before(step) {
            return Ok(output);
        }
        let fills: Vec<(Vec<u8>, Vec<u8>)> = cs
            .entries(query, &output)
            .into_iter()
            .filter(|(k, _)| missed.contains(k))
            .collect();
        if !fills.is_empty() {
            let pairs: Vec<(&[u8], &[u8])> = fills
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            match self.cache.as_mut().expect("checked").mset(&pairs, false) {
                Ok(()) => {}
                // No room to cache the result: the read still succeeds.
                Err(ClientError::NotStored) => {}
                Err(e) if Self::read_goes_around(&e) => {
                    self.refresh_after(&e);
                    self.degrade(&e);
                }
                Err(e) => return Err(self.cache_error(e)),
            }
        }
        Ok(output)
    }

    /// `readStatement` with the cache in-process (SAS, 001 §3.3): the AppNode's copies if every
    /// key hits; else I leases from the SAS core for the keys that missed, the data store's
    /// result, and the fills the core registers. A key another session is filling is looked up
    /// again after a backoff; a key under a writer's Q lease, or a core that cannot be reached,
    /// sends the read to the data store without a fill.
    fn read_sas<C: CacheStore>(&mut self, cs: &C, query: &C::Query) -> Result<C::Output> {
        let keys = cs.keys_read(query);
        if keys.is_empty() {
            return self.query_store(cs, query, &keys, false, false);
        }
        let step = self.tx.next_step();
        let mut backoff = cads_client::Backoff::new(&self.cads.config().retry);
        let mut granted: Vec<Vec<u8>> = Vec::new();
        let mut values;
        // Ingest: the keys granted in the last round that other AppNodes hold, and where.
        let mut held_elsewhere: Vec<(Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
        let sas = self.sas.as_mut().expect("checked");
        let mut first = true;
        loop {
            values = sas.lookup(&keys, std::mem::take(&mut first));
            if values.iter().all(Option::is_some) {
                let cached: Vec<Vec<u8>> = values.iter().flatten().cloned().collect();
                if let Some(output) = cs.result_from_cache(query, &cached) {
                    sas.give_up_fills(&granted);
                    sas.note_reads(keys.len(), []);
                    return Ok(output);
                }
            }
            let missed = missed_keys(&keys, &values);
            held_elsewhere.clear();
            let grants = match sas.iget(&missed) {
                Ok(grants) => grants,
                Err(e) => {
                    tracing::debug!(error = %e, "SAS core unreachable; reading the data store");
                    sas.note_degraded();
                    break;
                }
            };
            let mut busy = false;
            for (key, grant) in missed.into_iter().zip(grants) {
                match grant {
                    Grant::Granted(holders) => {
                        if !holders.is_empty() {
                            held_elsewhere.push((key.clone(), holders));
                        }
                        if !granted.contains(&key) {
                            granted.push(key);
                        }
                    }
                    Grant::Writing => {}
                    Grant::Busy => busy = true,
                }
            }
            if !busy {
                break;
            }
            // Another session computes a key: give back the leases granted meanwhile before
            // waiting, or two sessions each holding a key the other waits for would wait out the
            // whole backoff budget.
            sas.give_up_fills(&granted);
            granted.clear();
            held_elsewhere.clear();
            if !backoff.wait() {
                break;
            }
        }
        let missed = missed_keys(&keys, &values);
        if !missed.is_empty() && held_elsewhere.len() == missed.len() {
            if let Some(output) =
                self.read_from_peers(cs, query, &keys, values, &held_elsewhere, &granted)
            {
                return Ok(output);
            }
        }
        let output = match self.query_store(cs, query, &keys, true, false) {
            Ok(output) => output,
            Err(e) => {
                self.sas.as_mut().expect("checked").give_up_fills(&granted);
                return Err(e);
            }
        };
        failpoints::before_fill();
        let sas = self.sas.as_mut().expect("checked");
        // As on CS: a snapshot older than the leases may hold data a writer has since changed.
        if self.tx.snapshot_before(step) {
            sas.give_up_fills(&granted);
            sas.note_reads(keys.len(), missed);
            return Ok(output);
        }
        let fills: Vec<(Vec<u8>, Vec<u8>)> = cs
            .entries(query, &output)
            .into_iter()
            .filter(|(k, _)| granted.contains(k))
            .collect();
        let unfilled: Vec<Vec<u8>> = granted
            .into_iter()
            .filter(|k| !fills.iter().any(|(f, _)| f == k))
            .collect();
        sas.give_up_fills(&unfilled);
        let installed = sas.fill(&fills);
        let unguarded = missed.into_iter().filter(|k| !installed.contains(k));
        sas.note_reads(keys.len(), unguarded);
        Ok(output)
    }

    /// Ingest (001 §4): the result from this AppNode's copies and, for every key that missed,
    /// the copy of an AppNode that holds it, which this session then fills its own copies with
    /// under the I leases it holds (`granted`). None if a fetch came back empty or the values
    /// make no result: the data store is asked instead.
    fn read_from_peers<C: CacheStore>(
        &mut self,
        cs: &C,
        query: &C::Query,
        keys: &[Vec<u8>],
        mut values: Vec<Option<Vec<u8>>>,
        held_elsewhere: &[(Vec<u8>, Vec<Vec<u8>>)],
        granted: &[Vec<u8>],
    ) -> Option<C::Output> {
        let sas = self.sas.as_mut().expect("checked");
        let mut fills = Vec::with_capacity(held_elsewhere.len());
        for (key, holders) in held_elsewhere {
            let value = sas.fetch(key, holders)?;
            let at = keys.iter().position(|k| k == key)?;
            values[at] = Some(value.clone());
            fills.push((key.clone(), value));
        }
        let values: Vec<Vec<u8>> = values.into_iter().collect::<Option<_>>()?;
        let output = cs.result_from_cache(query, &values)?;
        let unfilled: Vec<Vec<u8>> = granted
            .iter()
            .filter(|k| !fills.iter().any(|(f, _)| f == *k))
            .cloned()
            .collect();
        sas.give_up_fills(&unfilled);
        let installed = sas.fill(&fills);
        let unguarded = held_elsewhere.iter().map(|(k, _)| k.clone());
        sas.note_reads(keys.len(), unguarded.filter(|k| !installed.contains(k)));
        Some(output)
    }

    /// Gemini, recovery mode (004 Algorithm 1): each dirty key is deleted on its recovering
    /// primary under an I lease this session then fills it with, as for a miss; from then on
    /// this process reads it as any other key.
    fn repair_dirty(&mut self, keys: &[Vec<u8>]) -> Result<()> {
        let routes = self.routes.clone().expect("Gemini");
        for key in keys {
            let cache = self.cache.as_mut().expect("use_cache checked it");
            if let Err(e) = cache.iset(key) {
                return Err(self.cache_error(e));
            }
            routes.repaired(key);
        }
        Ok(())
    }

    /// Gemini, working-set transfer (004 Algorithm 1 lines 10-15): when every key that missed on
    /// its recovering primary is on its fragment's secondary, the read is served from there and
    /// the primary filled with those values under this session's I leases; None sends the read
    /// to the data store. The secondary is read without a lease. In recovery mode nothing fills
    /// it, and a writer deletes its keys there before its data-store commit, while its Q lease
    /// on the primary voids this session's I lease (`gemini::delete_on_secondaries`): so a value
    /// found there is the latest, or a writer voided this session's lease, and the session's
    /// commit fails and it runs again.
    fn transfer_working_set<C: CacheStore>(
        &mut self,
        cs: &C,
        query: &C::Query,
        keys: &[Vec<u8>],
        values: &[Option<Vec<u8>>],
    ) -> Option<C::Output> {
        let routes = self.routes.clone()?;
        let missed: Vec<&Vec<u8>> = keys
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k)
            .collect();
        let sources = routes.transfer_sources(&missed)?;
        let client = self.cads.cache().expect("use_cache checked it");
        let places: Vec<(usize, &[u8])> = sources
            .iter()
            .zip(&missed)
            .map(|(source, key)| (source.secondary, key.as_slice()))
            .collect();
        // A secondary that cannot be asked is a miss: the data store answers instead.
        let found: Vec<Option<Vec<u8>>> = client
            .get_at(&places)
            .into_iter()
            .map(|value| value.ok().flatten())
            .collect();
        routes.note_transfer(&sources, &found);
        if found.iter().any(Option::is_none) {
            return None;
        }
        let mut copies = found.iter().flatten();
        let cached: Vec<Vec<u8>> = values
            .iter()
            .map(|v| match v {
                Some(v) => v.clone(),
                None => copies.next().expect("a copy per miss").clone(),
            })
            .collect();
        let output = cs.result_from_cache(query, &cached)?;
        failpoints::before_fill();
        let fills: Vec<(&[u8], &[u8])> = missed
            .iter()
            .zip(found.iter().flatten())
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        match self.cache.as_mut().expect("checked").mset(&fills, false) {
            // No room on the primary: the read still stands, under its leases.
            Ok(()) | Err(ClientError::NotStored) => Some(output),
            // The data store's answer, and its fill, handle the rest as any miss.
            Err(_) => None,
        }
    }

    /// Contextual: `keys` carry markers and the buffered writes the read depends on are in the
    /// data store now (applied, or found to be none), so their markers go when the session
    /// commits. The session's shared leases on them keep teleporting writers, which would mark
    /// them again, waiting until then.
    fn unmark(&mut self, keys: Vec<Vec<u8>>) -> Result<()> {
        match self.stage_marks(keys, MarkOp::Clear, false) {
            Ok(_) => Ok(()),
            // The markers stay: the next miss applies again, finding nothing to apply.
            Err(e) if e.is_unavailable() => {
                self.degrade(&e);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// For a read whose data-store answer depends on buffered writes of `docs`, in a session
    /// whose write transaction reads from a snapshot fixed earlier, which cannot see them once
    /// applied (Contextual: marked `keys`, whose buffered writes another AppNode may have applied
    /// after that snapshot; or buffered writes found pending). The session is aborted (on SQLite
    /// its transaction holds the write lock an applier needs, and its leases on the keys that
    /// missed keep other sessions' reads of them waiting), the buffered writes are applied and
    /// the markers cleared in sessions of their own, and the session is to run again: its next
    /// run reads from a snapshot taken after that, and finds no marker to send it here again.
    fn rerun_after_applying(&mut self, docs: &[DocRef], keys: Vec<Vec<u8>>) -> Error {
        self.abort_in_place();
        self.must_rerun = true;
        match tardis::apply_then_unmark(self.cads, docs, &keys) {
            Err(Error::Store(e)) if tardis::is_failure(&e) => {
                let t = self.cads.tardis().expect("TARDIS");
                t.note_refused_miss();
                Error::StoreUnavailable {
                    reason: format!(
                        "the data store must answer this read and the buffered writes it depends \
                         on cannot be applied: {e}"
                    ),
                }
            }
            Err(e) => e,
            Ok(()) => Error::Aborted {
                reason: "its data-store snapshot is older than buffered writes applied for a \
                         read (written while the data store was down)"
                    .into(),
            },
        }
    }

    /// The test-only path without leases: plain GET, and SET of what the data store returned.
    fn read_without_leases<C: CacheStore>(
        &mut self,
        cs: &C,
        query: &C::Query,
    ) -> Result<C::Output> {
        let client = self.cads.cache().expect("a cache");
        let keys = cs.keys_read(query);
        let mut values = Vec::new();
        for key in &keys {
            values.push(client.get(key).map_err(Error::from)?);
        }
        if values.iter().all(Option::is_some) {
            let cached: Vec<Vec<u8>> = values.iter().flatten().cloned().collect();
            if let Some(output) = cs.result_from_cache(query, &cached) {
                return Ok(output);
            }
        }
        let output = self.query_store(cs, query, &keys, false, true)?;
        failpoints::before_fill();
        for (key, value) in cs.entries(query, &output) {
            client.set(&key, &value).map_err(Error::from)?;
        }
        Ok(output)
    }

    /// `writeStatement` (Algorithm 10): runs the write in the data-store transaction and records
    /// what it does to the cache, applied at pre-commit.
    pub fn write<C: CacheStore>(&mut self, cs: &C, write: &C::Write) -> Result<()> {
        self.check_not_given_up()?;
        let ops = match self.cads.policy() {
            Policy::WriteBack => cs.buffer(write),
            _ if self.cads.tardis().is_some() => cs.buffer(write),
            _ => Vec::new(),
        };
        for (doc, op) in &ops {
            doc.check(op)?;
        }
        let teleported = self.teleport && !ops.is_empty();
        if self.teleport && ops.is_empty() && self.mode == Some(Mode::Failed) {
            let t = self.cads.tardis().expect("teleporting");
            t.note_refused_write();
            return Err(Error::StoreUnavailable {
                reason: "the data store is down and this write cannot be buffered (its \
                         CacheStore gives no document operations); nothing was written"
                    .into(),
            });
        }
        let keys = cs.keys_written(write);
        self.written_keys.extend(keys.iter().cloned());
        match self.cads.policy() {
            Policy::DataStoreOnly => {}
            // A teleported write changes the cached value as write-through does (000 §4.3.2):
            // deleting it would leave reads nothing to hit until the data store is back.
            Policy::WriteAround if !teleported => self.deletes.extend(keys.iter().cloned()),
            Policy::CacheAside => self.deletes.extend(keys.iter().cloned()),
            Policy::WriteAround | Policy::WriteThrough | Policy::WriteBack => {
                let changes = cs.cache_changes(write, &keys);
                if changes.len() != keys.len() {
                    return Err(Error::App(format!(
                        "the CacheStore gave {} cache changes for a write of {} keys",
                        changes.len(),
                        keys.len()
                    )));
                }
                self.changes.extend(keys.iter().cloned().zip(changes));
            }
        }
        // Documents written, for write-back and TARDIS (`ops` is empty otherwise).
        self.written_docs
            .extend(ops.iter().map(|(doc, _)| doc.clone()));
        if teleported {
            self.buffered.extend(ops);
            return Ok(());
        }
        if self.cads.policy() == Policy::WriteBack {
            if !ops.is_empty() && !self.write_through {
                // Buffered in the cache at pre-commit instead of written to the data store.
                self.buffered.extend(ops);
                return Ok(());
            }
            if ops.is_empty() {
                if let Some(buffer) = cs.buffer_sql(write) {
                    design2::check_queue_name(&buffer.queue)?;
                    if self.write_through {
                        self.hold_queue(&buffer.queue)?;
                    } else {
                        self.buffer_statements(cs, write, &keys, buffer);
                        return Ok(());
                    }
                }
            }
        }
        if self.cads.policy() == Policy::WriteBack {
            // Pre-commit seals buffered writes with the MAC key, which is read (or created) in a
            // data-store transaction of its own: it must be loaded before this session's
            // transaction writes, which on SQLite holds the only writer until it ends.
            self.cads.seal()?;
        }
        cs.write_store(write, &mut self.tx)?;
        Ok(())
    }

    /// Design 2: adds a write's statements to the session's buffered write, which joins the queue
    /// of its first write; the write's keys and query result keys get mappings to the session.
    fn buffer_statements<C: CacheStore>(
        &mut self,
        cs: &C,
        write: &C::Write,
        keys: &[Vec<u8>],
        buffer: SqlBuffer,
    ) {
        let writes = &mut self.sql_writes;
        if writes.queue.is_empty() {
            writes.queue = buffer.queue;
        }
        writes.statements.extend(buffer.statements);
        writes.mapped.extend(keys.iter().cloned());
        let changes = cs.result_changes(write);
        writes.mapped.extend(changes.iter().map(|(k, _)| k.clone()));
        writes.result_changes.extend(changes);
    }

    /// Write-back's fallback for a Design 2 write: before it goes to the data store, its queue is
    /// held and emptied (see `design2::hold_and_apply`). A queue met once the session has begun
    /// writing the data store cannot be emptied first: that takes a data-store transaction of
    /// its own, which on SQLite waits for the single writer this session holds. The session then
    /// runs again, holding that queue from its start ([`Session::hold_first`]).
    fn hold_queue(&mut self, queue: &str) -> Result<()> {
        if self.held_queues.iter().any(|q| q == queue) || !self.use_cache() {
            return Ok(());
        }
        if self.tx.writing() {
            self.late_queue = Some(queue.to_string());
            return Err(Error::Aborted {
                reason: format!(
                    "write-back's fallback to write-through met queue {queue} after writing the \
                     data store; it runs again, emptying that queue first"
                ),
            });
        }
        let cache = self.cache.as_mut().expect("use_cache checked it");
        let refused = design2::hold_and_apply(self.cads, cache, queue)?;
        self.refused.extend(refused);
        self.held_queues.push(queue.to_string());
        Ok(())
    }

    /// Write-back's fallback, before the work of a session runs: holds and empties `queues`, those
    /// an earlier run of the same work held or met too late ([`Session::queues_to_hold_first`]).
    pub(crate) fn hold_first(&mut self, queues: Vec<String>) -> Result<()> {
        self.queues_first = queues;
        for queue in self.queues_first.clone() {
            self.hold_queue(&queue)?;
        }
        Ok(())
    }

    /// Write-back's fallback: the queues a run of the same work after this one is to hold from
    /// its start (those this session held or was to hold, and the one it met too late).
    pub(crate) fn queues_to_hold_first(&self) -> Vec<String> {
        let mut queues = self.held_queues.clone();
        queues.extend(self.queues_first.iter().cloned());
        queues.extend(self.late_queue.clone());
        queues.sort();
        queues.dedup();
        queues
    }

    /// A session that gave up its transaction (`rerun_after_applying`) only aborts.
    fn check_not_given_up(&self) -> Result<()> {
        match self.must_rerun {
            true => Err(Error::Aborted {
                reason: "its data-store transaction was rolled back to let buffered writes it \
                         read be applied"
                    .into(),
            }),
            false => Ok(()),
        }
    }

    /// `preCommitSession` (Algorithm 11): takes the exclusive leases and stages the cache changes,
    /// then validates on every CMI the session touched. After this the session can only fail by
    /// its data-store commit.
    pub fn pre_commit(&mut self) -> Result<()> {
        self.check_not_given_up()?;
        if self.prepared {
            return Ok(());
        }
        self.prepared = true;
        if !self.cads.leases() {
            return Ok(());
        }
        if self.sas.is_some() {
            return self.pre_commit_sas();
        }
        if let Some((cmi, cause)) = &self.degraded {
            if !self.buffered.is_empty() && self.teleport {
                self.cads
                    .tardis()
                    .expect("teleporting")
                    .note_refused_write();
                return Err(Error::StoreUnavailable {
                    reason: format!(
                        "the data store is down and the cache cannot be reached to buffer this \
                         session's writes ({cause}); nothing was written"
                    ),
                });
            }
            if self.cads.policy() == Policy::WriteBack && !self.read_only() {
                // Write-back acknowledges a write once it is buffered in the cache, and only the
                // cache knows which earlier writes of its documents are still to be applied: a
                // session that cannot reach it cannot write, to the cache or around it.
                return Err(Error::Cache(ClientError::Unavailable {
                    cmi: *cmi,
                    reason: format!(
                        "write-back cannot take this session's writes without the cache \
                         ({cause}); nothing was written"
                    ),
                    refused: false,
                }));
            }
        }
        if let Some(routes) = self.routes.clone() {
            if self.cache.is_some() && !self.read_only() {
                return self.pre_commit_gemini(&routes);
            }
        }
        if self.cache.is_none() || self.degraded.is_some() {
            self.note_missed_writes();
            return Ok(());
        }
        if self.read_only() {
            // Nothing to stage or to commit on all CMIs or none: commit checks the reads.
            return Ok(());
        }
        if self.cads.policy() == Policy::WriteBack {
            return self.pre_commit_write_back();
        }
        if self.teleport && !self.buffered.is_empty() {
            return self.pre_commit_teleport();
        }
        match self.stage(None, None, true) {
            Ok(_) => {}
            Err(e) if e.is_unavailable() => {
                self.degrade(&e);
                self.note_missed_writes();
            }
            Err(e) => return Err(e.into()),
        }
        self.apply_before_write()
    }

    /// SAS: Q leases on the written keys (sorted, 001 §3.3), a check that no copy the session
    /// read was invalidated since, and the new values of write-through computed from the
    /// AppNode's own copies, in the order the writes were made.
    fn pre_commit_sas(&mut self) -> Result<()> {
        let mut keys = self.written_keys.clone();
        keys.sort_unstable();
        keys.dedup();
        let changes = std::mem::take(&mut self.changes);
        let (config, policy) = (self.cads.config(), self.cads.policy());
        let sas = self.sas.as_mut().expect("checked");
        if !keys.is_empty() {
            sas.take_q(&keys, config)?;
        }
        if !sas.reads_fit(!keys.is_empty()) {
            return Err(Error::Aborted {
                reason: "a cached value this session read was changed by a writer".into(),
            });
        }
        let mut items: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            keys.iter().map(|k| (k.clone(), None)).collect();
        if policy == Policy::WriteThrough {
            for (key, value) in &mut items {
                *value = sas.own_copy(key);
            }
            for (key, change) in changes {
                let at = items
                    .iter()
                    .position(|(k, _)| *k == key)
                    .expect("a written key");
                let value = items[at].1.take();
                items[at].1 = change.apply(value);
            }
        }
        sas.set_items(items);
        Ok(())
    }

    /// Gemini (write-around): the session's deletes where its keys route, staged under Q leases
    /// and validated; then the keys of recovering fragments deleted on their secondaries and
    /// those of fragments in transient mode appended to their dirty lists, all before the
    /// data-store commit (004 §3.1, Algorithm 2). A key no instance can take, an instance that cannot be
    /// reached, or a newer configuration ends the session for a run by the newest configuration
    /// (a retryable abort): a write is never acknowledged that the instances of its keys might
    /// not know of, which is why Gemini needs no record of missed writes.
    fn pre_commit_gemini(&mut self, routes: &Routes) -> Result<()> {
        let (client, router) = (self.cads.cache().expect("a cache"), self.cads.gemini());
        let router = router.expect("Gemini");
        if let Some((cmi, cause)) = &self.degraded {
            router.refresh_soon(client);
            return Err(Error::Aborted {
                reason: format!("CMI {cmi} could not be reached ({cause}): the write waits"),
            });
        }
        let plan = match routes.write_plan(&self.deletes) {
            Ok(plan) => plan,
            Err(reason) => {
                router.refresh(client);
                return Err(Error::Aborted { reason });
            }
        };
        if let Err(e) = self.stage(None, None, true) {
            return Err(self.cache_error(e));
        }
        // Under the primaries' Q leases, before the data-store commit: see `delete_on_secondaries`.
        let config_id = routes.id();
        if let Err(e) = gemini::delete_on_secondaries(client, config_id, &plan.secondary_deletes) {
            return Err(self.cache_error(e));
        }
        if let Err(e) = gemini::append_to_dirty_lists(client, &plan.appends) {
            return Err(self.cache_error(e));
        }
        Ok(())
    }

    /// TARDIS: a session that teleports its writes stages them as write-back does, the cached
    /// values changed and the buffered writes added to (000 §4.3.2), all under its exclusive
    /// leases. Pinned memory full is [`Error::BufferFull`]: nothing of the session is written, and
    /// nothing buffered before is lost.
    fn pre_commit_teleport(&mut self) -> Result<()> {
        let t = self.cads.tardis().expect("teleporting");
        let seal = self.cads.seal().map_err(|e| {
            t.note_refused_write();
            Error::StoreUnavailable {
                reason: format!(
                    "the key of buffered writes was never loaded and the data store cannot give \
                     it ({e}); nothing was written"
                ),
            }
        })?;
        // Read-modify-write whatever write-back does: during an outage a document's writes then
        // compact into one buffered write, and its TeleW line is written once, not with every
        // write (nothing removes lines until the data store is back).
        let staging =
            design1::Staging::plan(self.cads, seal, &self.buffered, Buffering::ReadModifyWrite);
        let marks = t.marks();
        match self.stage(Some(&staging), None, !marks) {
            Ok(()) => {}
            Err(ClientError::NotStored) => {
                t.note_refused_write();
                return Err(Error::BufferFull);
            }
            Err(e) => return Err(e.into()),
        }
        if marks {
            self.mark_written()?;
        }
        // With the leases held, a monitor cannot be ending recovery (it needs the TeleW keys'
        // leases, and this session holds its new buffered writes' ones). If it ended it before,
        // buffered writes made now would be missed by misses in normal mode: run again.
        if t.mode() == Mode::Normal {
            return Err(Error::Aborted {
                reason: "the AppNode returned to normal mode while the session buffered its \
                         writes"
                    .into(),
            });
        }
        Ok(())
    }

    /// Contextual: a teleported write marks the keys it wrote (under the exclusive leases that
    /// `stage` took on every one of them), and validates in the same round trip. A key whose CMI
    /// is down cannot be marked, and a miss there after it returns would not know to apply the
    /// buffered write: the write is refused.
    fn mark_written(&mut self) -> Result<()> {
        let client = self.cads.cache().expect("a session that staged");
        let mut keys = self.written_keys.clone();
        keys.sort();
        keys.dedup();
        if let Some(cmi) = keys
            .iter()
            .map(|k| client.route(k))
            .find(|&c| client.is_down(c))
        {
            let t = self.cads.tardis().expect("marking");
            t.note_refused_write();
            return Err(Error::StoreUnavailable {
                reason: format!(
                    "the AppNode buffers writes in the cache ({} mode), and CMI {cmi}, which \
                     holds keys this write changes, cannot be reached to mark them; nothing was \
                     written",
                    t.mode().name()
                ),
            });
        }
        self.marked_cmis = keys.iter().map(|k| client.route(k)).collect();
        self.marked_cmis.sort_unstable();
        self.marked_cmis.dedup();
        self.stage_marks(keys, MarkOp::Set, true)?;
        Ok(())
    }

    /// Stages marker changes on `keys`, which the session holds leases on.
    fn stage_marks(
        &mut self,
        keys: Vec<Vec<u8>>,
        op: MarkOp,
        validate: bool,
    ) -> Result<(), ClientError> {
        let client = self.cads.cache().expect("a session with leases");
        let marks: Vec<(usize, Write)> = keys
            .into_iter()
            .map(|key| (client.route(&key), Write::Mark { key, op }))
            .collect();
        let cache = self.cache.as_mut().expect("a session with leases");
        cache.write_at(&marks, validate).map(|_| ())
    }

    /// TARDIS, once a write's exclusive leases are held: Algorithm 5 for its documents when the
    /// mode asks for it (recovery under DIS and TARDIS, Recon's normal mode), or when the mode
    /// changed since the session began (a buffered write may have been made meanwhile). The
    /// leases keep writers that teleport out until this session commits, so its write lands
    /// after every buffered write of its documents.
    fn apply_before_write(&mut self) -> Result<()> {
        let Some(t) = self.cads.tardis() else {
            return Ok(());
        };
        let now = t.mode();
        if self.written_docs.is_empty() || !(t.applies_before_write(now) || self.mode != Some(now))
        {
            return Ok(());
        }
        let mut docs = self.written_docs.clone();
        docs.sort();
        docs.dedup();
        match tardis::apply_dirty(self.cads, &docs) {
            Ok(_) => {}
            // Nothing of this session reached the data store: it runs again, teleporting.
            Err(Error::Store(e)) if tardis::is_failure(&e) => {
                return Err(Error::Aborted {
                    reason: format!(
                        "the data store failed while applying buffered writes before a write: {e}"
                    ),
                })
            }
            Err(e) => return Err(e),
        }
        // Applying took time: the leases are checked again before the data store is written.
        match self.cache.as_mut() {
            Some(cache) if self.degraded.is_none() => cache.validate().map_err(Error::from),
            _ => Ok(()),
        }
    }

    /// Whether the session wrote nothing.
    fn read_only(&self) -> bool {
        self.written_keys.is_empty() && self.written_docs.is_empty() && self.sql_writes.is_empty()
    }

    /// Write-back's pre-commit: the cached values change as with write-through, and the buffered
    /// writes are staged on their replicas, all under the session's exclusive leases. With pinned
    /// memory full, the session's documents have their buffered writes applied (while this session
    /// holds their exclusive leases, so none can be added) and the session writes through.
    fn pre_commit_write_back(&mut self) -> Result<()> {
        if self.write_through {
            self.stage(None, None, false)?;
            let mut docs = self.written_docs.clone();
            docs.sort();
            docs.dedup();
            for doc in &docs {
                design1::apply_buffered(self.cads, doc)?;
            }
        } else {
            let seal = self.cads.seal()?;
            let buffering = self.cads.config().write_back.buffering;
            let staging = design1::Staging::plan(self.cads, seal, &self.buffered, buffering);
            let sql = match self.sql_writes.is_empty() {
                true => None,
                false => {
                    self.sql_writes.mapped.sort();
                    self.sql_writes.mapped.dedup();
                    Some(design2::Staging::plan(self.cads, seal, &self.sql_writes)?)
                }
            };
            return match self.stage(Some(&staging), sql.as_ref(), true) {
                Ok(()) => Ok(()),
                // Whatever could not be stored, pinned memory is what is full (unpinned values
                // make room by eviction).
                Err(ClientError::NotStored) => Err(Error::BufferFull),
                Err(e) => Err(e.into()),
            };
        }
        self.cache
            .as_mut()
            .expect("checked")
            .validate()
            .map_err(Error::from)
    }

    /// The CMIs of keys this session wrote without reaching the cache missed those writes.
    fn note_missed_writes(&mut self) {
        let Some(client) = self.cads.cache() else {
            return;
        };
        let cmis: Vec<usize> = self.written_keys.iter().map(|k| client.route(k)).collect();
        for cmi in cmis {
            self.missed(cmi);
        }
    }

    /// Records that CMI `cmi` missed this session's writes (see `Cads::missed_cmi`): at once, so
    /// that this process reads around it from now on, and again once the write has taken effect
    /// (after the data-store commit, and after the cache commit, where write-back's writes take
    /// effect). A flush of the CMI in between covers nothing of this write: a reader may have
    /// filled the CMI with the value the write then replaced, and no lease of this session
    /// stops it there.
    fn missed(&mut self, cmi: usize) {
        self.cads.missed_cmi(cmi, Missed::Values);
        if !self.missed_cmis.contains(&cmi) {
            self.missed_cmis.push(cmi);
        }
    }

    /// Records again, now, that the CMIs this session's writes skipped missed them: called once
    /// a write has taken effect (or may have), so that a flush made before covers nothing of it.
    fn note_skipped_cmis(&self) {
        for &cmi in &self.missed_cmis {
            self.cads.missed_cmi(cmi, Missed::Values);
        }
    }

    /// The CMI of `key` if it just failed: the session goes on without it.
    fn down_cmi(&self, key: &[u8]) -> Option<usize> {
        let client = self.cads.cache()?;
        let cmi = client.route(key);
        client.is_down(cmi).then_some(cmi)
    }

    /// Stages the session's cache changes (write-around's deletes, write-through's new values)
    /// and write-back's buffered writes, of documents in `staging` and of the session's SQL in
    /// `sql`, in at most two round trips: one `LMGET` taking the exclusive leases of every
    /// value a change must read first (cached values changed by read-modify-write that the
    /// session did not read already, buffered writes of documents), then every write pipelined,
    /// each computed from a value read earlier behind its check (`Write::Expect`), followed by
    /// `LVALIDATE` when `validate` (one more, validated again, when append buffering must
    /// register a new buffered write or mend a replica, or a queue is new: see the stagings'
    /// `finish`).
    fn stage(
        &mut self,
        staging: Option<&design1::Staging>,
        sql: Option<&design2::Staging>,
        validate: bool,
    ) -> Result<(), ClientError> {
        let mut per_key: Vec<(Vec<u8>, Vec<CacheChange>)> = Vec::new();
        for key in std::mem::take(&mut self.deletes) {
            per_key.push((key, vec![CacheChange::Delete]));
        }
        for (key, change) in std::mem::take(&mut self.changes) {
            match per_key.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push(change),
                None => per_key.push((key, vec![change])),
            }
        }
        if self.routes.is_none() {
            let mut skipped = Vec::new();
            per_key.retain(|(key, _)| match self.down_cmi(key) {
                Some(cmi) => {
                    skipped.push(cmi);
                    false
                }
                None => true,
            });
            for cmi in skipped {
                self.missed(cmi);
            }
        }
        // Keys in order, so that sessions writing the same keys list them alike.
        per_key.sort_by(|a, b| a.0.cmp(&b.0));
        per_key.dedup_by(|a, b| a.0 == b.0);
        let client = self
            .cads
            .cache()
            .expect("a session that stages has a cache");
        let mut writes: Vec<(usize, Write)> = Vec::new();
        // Changes that need the cached value, and where it is read.
        let mut modify: Vec<(Vec<u8>, Vec<CacheChange>)> = Vec::new();
        for (key, mut list) in per_key {
            let cmi = client.route(&key);
            if list.iter().all(|c| matches!(c, CacheChange::Update(_))) {
                // Document updates, however many, go as one LUPDATE: the CMI applies them.
                let mut changes = Changes::new();
                for change in &list {
                    if let CacheChange::Update(more) = change {
                        changes.extend(more);
                    }
                }
                let write = match changes.check() {
                    Ok(()) => Write::Update {
                        key,
                        changes: serde_json::to_vec(&changes.to_json()).expect("JSON serializes"),
                    },
                    // The data store refuses them at commit (the session's error); until then the
                    // copy goes, which the CMI would refuse to change.
                    Err(_) => Write::Delete { key },
                };
                writes.push((cmi, write));
                continue;
            }
            let write = match (list.len(), list.last()) {
                (1, Some(CacheChange::Delete)) => Write::Delete { key },
                (1, Some(CacheChange::Set(_))) => match list.pop() {
                    Some(CacheChange::Set(value)) => Write::Set {
                        key,
                        value,
                        pin: false,
                    },
                    _ => unreachable!("matched a set"),
                },
                (1, Some(CacheChange::Append(_))) => match list.pop() {
                    Some(CacheChange::Append(bytes)) => Write::Append { key, bytes },
                    _ => unreachable!("matched an append"),
                },
                (1, Some(CacheChange::Incr(delta))) => Write::Incr { key, delta: *delta },
                _ => {
                    modify.push((key, list));
                    continue;
                }
            };
            writes.push((cmi, write));
        }
        // A value the session read is computed from here and written, with a check in the same
        // pipeline that it is still the key's value (see `Write::Expect`); only the others are
        // read first, under exclusive leases.
        let (known, modify): (Vec<_>, Vec<_>) = modify
            .into_iter()
            .partition(|(key, _)| self.read_values.contains_key(key));
        let mut reads: Vec<(usize, Vec<u8>)> = modify
            .iter()
            .map(|(key, _)| (client.route(key), key.clone()))
            .collect();
        if let Some(staging) = staging {
            reads.extend(staging.reads());
        }
        let cache = self.cache.as_mut().expect("checked");
        let values = if reads.is_empty() {
            Vec::new()
        } else {
            let places: Vec<(usize, &[u8])> =
                reads.iter().map(|(c, k)| (*c, k.as_slice())).collect();
            cache.mget_at(&places, true)?
        };
        let known = known.into_iter().map(|(key, list)| {
            let value = self.read_values.remove(&key);
            (key, list, value, true)
        });
        let read = modify
            .into_iter()
            .zip(&values)
            .map(|((key, list), value)| (key, list, value.clone(), false));
        let mut modified: Vec<_> = known.chain(read).collect();
        modified.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected = Vec::new();
        for (key, list, value, known) in modified {
            // Not cached: nothing to change; the exclusive lease keeps fills out until commit.
            let Some(current) = value else { continue };
            let cmi = client.route(&key);
            if known {
                expected.push(writes.len());
                writes.push((
                    cmi,
                    Write::Expect {
                        key: key.clone(),
                        value: current.clone(),
                    },
                ));
            }
            let mut next = Some(current);
            for change in list {
                next = change.apply(next);
            }
            writes.push(match next {
                Some(value) => (
                    cmi,
                    Write::Set {
                        key,
                        value,
                        pin: false,
                    },
                ),
                None => (cmi, Write::Delete { key }),
            });
        }
        let own = writes.len();
        if let Some(staging) = staging {
            let buffered_reads = &values[values.len() - staging.reads().len()..];
            let (buffered, refused) = staging.writes(self.cads, buffered_reads);
            writes.extend(buffered);
            self.refused.extend(refused);
        }
        let documents_end = writes.len();
        if let Some(sql) = sql {
            writes.extend_from_slice(sql.writes());
        }
        if writes.is_empty() && !validate {
            return Ok(());
        }
        let written = cache.write_at(&writes, validate)?;
        if expected
            .iter()
            .any(|&i| written[i] != cads_client::Written::Matched(true))
        {
            // What it staged must not commit, whatever the caller does next.
            cache.abort();
            return Err(ClientError::Aborted {
                reason: "a value the session read was no longer the key's at its write".into(),
            });
        }
        if let Some(staging) = staging {
            staging.finish(self.cads, cache, &written[own..documents_end], validate)?;
        }
        if let Some(sql) = sql {
            sql.finish(self.cads, cache, &written[documents_end..], validate)?;
        }
        Ok(())
    }

    /// Pre-commits (if not done yet), commits the data-store transaction, then the cache session
    /// (`commitSession`). If the data store refuses, the cache session is aborted: nothing of the
    /// session is visible anywhere.
    pub fn commit(mut self) -> Result<()> {
        let cpr = std::mem::take(&mut self.cpr);
        let committed = self.commit_session();
        cpr.end(Ended::of(&committed));
        committed
    }

    fn commit_session(mut self) -> Result<()> {
        if let Err(e) = self.pre_commit() {
            self.abort();
            return Err(e);
        }
        let tx = std::mem::replace(
            &mut self.tx,
            StoreTx::new(self.cads.store().as_ref(), self.cads.config().isolation),
        );
        failpoints::before_store_commit();
        let stored = tx.commit();
        if matches!(
            stored,
            Ok(()) | Err(StoreError::Timeout(_) | StoreError::Unavailable(_))
        ) {
            // The commit happened or may have: the CMIs it skipped missed it from now on.
            self.note_skipped_cmis();
        }
        if let Err(e) = stored {
            if let Some(cache) = self.cache.as_mut() {
                cache.abort();
            }
            if let Some(mut sas) = self.sas.take() {
                // The commit may have happened: every copy of the written keys goes.
                if matches!(e, StoreError::Timeout(_) | StoreError::Unavailable(_)) {
                    sas.set_items(
                        self.written_keys
                            .iter()
                            .map(|k| (k.clone(), None))
                            .collect(),
                    );
                    sas.commit(self.cads.config())?;
                } else {
                    sas.abort();
                }
                return Err(e.into());
            }
            if let Some(t) = self.cads.tardis() {
                if tardis::is_failure(&e) {
                    t.store_failed(&e);
                    if !self.read_only() {
                        t.note_failed_write(&self.written_keys);
                    }
                }
            }
            // The commit may have happened (its reply was lost, or the store went down after
            // it): the cached values of the written keys may be old, so they go.
            if matches!(e, StoreError::Timeout(_) | StoreError::Unavailable(_)) {
                self.cads.invalidate(&self.written_keys);
            }
            return Err(e.into());
        }
        // SAS: pre-commit checked the reads (`pre_commit_sas`), read-only sessions' too.
        if let Some(sas) = self.sas.take() {
            failpoints::before_cache_commit();
            return sas.commit(self.cads.config());
        }
        if !self.cads.leases() {
            return self.apply_without_leases();
        }
        let Some(cache) = self.cache.take() else {
            return Ok(());
        };
        if self.read_only() {
            // A writer voided one of the reads: they may not fit together, so run again.
            return cache.commit_read_only().map_err(|e| Error::Aborted {
                reason: e.to_string(),
            });
        }
        failpoints::before_cache_commit();
        let _committing = match (self.cads.tardis(), self.teleport) {
            (Some(t), true) => Some(t.teleport_committing()),
            _ => None,
        };
        // The markers first: were a CMI of marked keys to fail its commit, the buffered writes
        // must not become visible without them (a miss there would not know to apply them).
        let committed = cache.commit_first(&self.marked_cmis);
        // Under write-back (and TARDIS's teleported writes) the write takes effect here, not at
        // the data-store commit: a flush of a skipped CMI since the last record covers nothing
        // of it either.
        self.note_skipped_cmis();
        match committed {
            Ok(()) => {
                let stats = self.cads.write_back_stats();
                std::mem::take(&mut self.refused).discarded(stats);
                let buffered = self.buffered.len() as u64;
                match self.cads.tardis() {
                    Some(t) => t.note_teleported(buffered),
                    None => {
                        stats.buffered.fetch_add(buffered, Ordering::Relaxed);
                        if self.cads.config().write_back.buffering == Buffering::Append {
                            for (doc, _) in &self.buffered {
                                self.cads.recent_buffers.note(&design1::bw_key(doc));
                            }
                        }
                    }
                }
                if !self.sql_writes.is_empty() {
                    stats.buffered_sessions.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
            // Buffered writes are acknowledged by this commit: if it failed, they are not (those
            // that reached some replicas may still be applied, as after a timeout). A teleported
            // write that some CMIs may have taken is settled (see `tardis::LostTeleport`): misses
            // do not always look for buffered writes the way write-back's do. A write-back
            // session's keys are invalidated and its documents listed again (see
            // `settle_partial_commit`). One that no CMI took (`Aborted`) left nothing, and may
            // run again.
            Err(e) if !self.buffered.is_empty() || !self.sql_writes.is_empty() => {
                let taken_by_none = matches!(e, ClientError::Aborted { .. });
                if let (Some(t), true, false) = (self.cads.tardis(), self.teleport, taken_by_none) {
                    let mut docs = std::mem::take(&mut self.written_docs);
                    docs.sort();
                    docs.dedup();
                    let keys = std::mem::take(&mut self.written_keys);
                    t.lost_teleport(self.cads, tardis::LostTeleport { docs, keys });
                } else if !self.teleport && !taken_by_none {
                    self.settle_partial_commit();
                }
                Err(e.into())
            }
            // The data store has committed: that is the truth. A CMI that did not take the
            // commit dropped the session's changes when its leases expired, deleting the keys it
            // held exclusively; a reader may have refilled them from the data store as it was
            // before this commit, so they are invalidated again now.
            Err(e) => {
                tracing::warn!(error = %e, "cache commit incomplete after data-store commit");
                self.cads.invalidate(&self.written_keys);
                Ok(())
            }
        }
    }

    /// After a write-back cache commit that some CMIs may have taken and others not: deletes the
    /// session's written keys and lists the documents of its buffered writes (Design 1) in their
    /// PendingWrites partitions again, in one session of their own. A CMI may have taken a
    /// cached value, or a replica of a buffered write, while those of the write's list did not:
    /// a buffered write visible without its line would be applied only by a miss on its
    /// document, never by the workers or a drain, and a Design 2 session whose queue missed the
    /// commit by no one. With the cached copies gone, the next read applies a document's
    /// buffered write if a replica holds one, and reads the data store without it if none does;
    /// it applies a Design 2 session if its queue lists it, and takes it for applied if not. A
    /// line for a buffered write that no replica took names nothing, and the next worker to read
    /// it drops it. Should this fail, the keys are invalidated as after any lost cache commit
    /// ([`Cads::invalidate`]), and the documents stay unlisted until their next reads.
    fn settle_partial_commit(&self) {
        let mut docs: Vec<DocRef> = self.buffered.iter().map(|(doc, _)| doc.clone()).collect();
        docs.sort();
        docs.dedup();
        let listed = design1::listing(self.cads, &docs)
            .and_then(|writes| Ok(self.cads.invalidate_with(&self.written_keys, &writes)?));
        if let Err(e) = listed {
            tracing::warn!(
                error = %e,
                documents = docs.len(),
                "a write-back session that some CMIs committed could not be settled; its keys \
                 are invalidated, and only reads of its documents will apply their buffered writes"
            );
            self.cads.invalidate(&self.written_keys);
        }
    }

    /// The test-only path without leases: plain DEL of written keys after the data store commits
    /// (write-through's changes become deletes too: without leases a read-modify-write is unsafe
    /// anyway, and the point of this path is to show what leases prevent).
    fn apply_without_leases(&mut self) -> Result<()> {
        if let Some(client) = self.cads.cache() {
            for key in &self.written_keys {
                client.delete(key).map_err(Error::from)?;
            }
        }
        Ok(())
    }

    /// `abortSession`: rolls the data-store transaction back and releases the cache session.
    pub fn abort(mut self) {
        self.abort_in_place();
    }

    fn abort_in_place(&mut self) {
        if let Some(cache) = self.cache.as_mut() {
            cache.abort();
        }
        if let Some(sas) = self.sas.take() {
            sas.abort();
        }
        self.cache = None;
        let tx = std::mem::replace(
            &mut self.tx,
            StoreTx::new(self.cads.store().as_ref(), self.cads.config().isolation),
        );
        tx.rollback();
    }
}

/// The keys a lookup found no value for.
fn missed_keys(keys: &[Vec<u8>], values: &[Option<Vec<u8>>]) -> Vec<Vec<u8>> {
    keys.iter()
        .zip(values)
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k.clone())
        .collect()
}
