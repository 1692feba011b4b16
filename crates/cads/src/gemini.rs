//! Gemini on the AppNode (004 §2.2, §3.1-3.2): keys routed by the coordinator's configuration,
//! the dirty lists kept while a fragment's primary is away, and the repair of dirty keys when it
//! is back (Algorithms 1 and 2). The coordinator's side is `cads_coord` (its service and
//! recovery workers); the CMIs' fences (`fencing` in the engine) make a change of configuration
//! safe: a session routed by a replaced configuration is refused (STALECONFIG) and runs again
//! after [`GeminiRouter::refresh`].
//!
//! Per fragment mode, for a key of the fragment:
//!
//! - **normal**: reads and writes go to the primary, as without Gemini;
//! - **transient**: they go to the secondary, and a write appends the key to the fragment's
//!   dirty list there before its data-store commit;
//! - **transient without a secondary** (no instance was up to host one): reads go to the data
//!   store, and writes wait (a retryable abort) until the coordinator places the fragment; the
//!   same while an instance cannot be reached or is fenced, before the coordinator has moved its
//!   fragments;
//! - **recovery**: reads and writes go to the primary; a read of a key still on the dirty list
//!   deletes it there under an I lease (`ISET`) and fills it as a miss (Algorithm 1), and a write
//!   deletes the key on the secondary too, before its data-store commit (which Algorithm 2 does
//!   only with working-set transfer: here always, so that a Gemini-O worker never copies a value
//!   older than the latest write; see `delete_on_secondaries`).
//!   A fragment whose dirty list cannot be read is read from the data store until the
//!   configuration changes.
//! - **recovery with working-set transfer** (the fragment's `transfer`, 004 §3.2.2): a read that
//!   misses on the primary looks its keys up on the secondary and, when all are there, is
//!   answered from them and fills the primary under its I leases, instead of asking the data
//!   store (`Session::transfer_working_set`). The coordinator ends the transfer once the
//!   primary's hit ratio is back; a process stops it sooner for a primary whose secondaries miss
//!   too often (see `TransferLookups`).
//!
//! Gemini is for write-around (004's assumption), the only policy this module supports.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use cads_client::{Backoff, Client, ClientError, Router, Write};
use cads_coord::configuration::Route;
use cads_coord::dirty_list;
use cads_coord::hit_ratio::MIN_READS;
use cads_coord::service::{CONFIGURATION_KEY, TRANSFER_MARGIN};

use cads_coord::configuration::Configuration;

use crate::Config;

/// The coordinator's side, for a process that runs it (a benchmark, a test): see `cads_coord`.
pub use cads_coord::repair::Repair;
pub use cads_coord::service::{Service, ServiceOptions};

/// The dirty keys of a fragment in recovery that this process has not repaired yet, or None when
/// its list could not be read.
type DirtyKeys = Option<Mutex<HashSet<Vec<u8>>>>;

/// A configuration and what this process knows of its fragments in recovery.
pub(crate) struct Routes {
    configuration: Option<Configuration>,
    dirty: HashMap<u32, DirtyKeys>,
    /// Working-set transfer: per recovering primary instance, this process's lookups on the
    /// secondaries.
    transfers: HashMap<usize, TransferLookups>,
}

/// Where a key missed on its recovering primary is looked up, and the transfer's goal (the
/// primary's hit ratio before it failed, per mille).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TransferSource {
    pub secondary: usize,
    pub primary: usize,
    pub goal: u16,
}

/// A process's working-set transfer lookups for one recovering primary, and whether it stopped
/// them: 004 §3.2.2 ends the transfer once the secondary's miss ratio passes m = 1 - h + ε, h
/// being the primary's hit ratio before it failed (the fragment's `transfer`), ε the
/// coordinator's [`TRANSFER_MARGIN`]. The coordinator ends it for every process once the
/// primary's hit ratio is back; this is the other condition, which each process judges by its
/// own lookups (over at least [`MIN_READS`] of them).
#[derive(Default)]
struct TransferLookups {
    lookups: AtomicU64,
    misses: AtomicU64,
    stopped: AtomicBool,
}

/// What a write does besides deleting its keys where they route.
#[derive(Debug, Default)]
pub(crate) struct WritePlan {
    /// Transient mode: per secondary, the dirty list and the lines to append to it.
    pub appends: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// Recovery mode: keys to delete on their fragment's secondary too.
    pub secondary_deletes: Vec<(usize, Vec<u8>)>,
}

impl Routes {
    fn empty() -> Routes {
        Routes {
            configuration: None,
            dirty: HashMap::new(),
            transfers: HashMap::new(),
        }
    }

    /// Routes by `configuration`, with the dirty keys of its fragments in recovery.
    fn new(configuration: Configuration, dirty: HashMap<u32, DirtyKeys>) -> Routes {
        let transfers = configuration
            .fragments()
            .iter()
            .filter(|f| f.transfer.is_some())
            .map(|f| (f.primary.instance, TransferLookups::default()))
            .collect();
        Routes {
            configuration: Some(configuration),
            dirty,
            transfers,
        }
    }

    /// The configuration's id; 0 before any was fetched.
    pub(crate) fn id(&self) -> u64 {
        self.configuration.as_ref().map_or(0, Configuration::id)
    }

    /// Whether writes in transient mode list their keys (off for the baselines that repair
    /// nothing).
    fn lists_dirty_keys(&self) -> bool {
        self.configuration
            .as_ref()
            .is_some_and(Configuration::dirty_lists)
    }

    fn route_of(&self, key: &[u8]) -> Option<(u32, Route)> {
        let c = self.configuration.as_ref()?;
        let fragment = cads_client::fragment_of(key, c.fragments().len() as u32);
        Some((fragment, c.route(fragment).ok()?))
    }

    /// How a read of `keys` may use the cache: None when it may not (a key's fragment has no
    /// instance, its dirty list could not be read, or no configuration is known yet), else the
    /// keys to repair before reading them (Algorithm 1).
    pub(crate) fn read_plan(&self, keys: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let mut repair = Vec::new();
        for key in keys {
            match self.route_of(key)? {
                (_, Route::Nowhere) => return None,
                (j, Route::Recovering { .. }) => {
                    let dirty = self.dirty.get(&j)?.as_ref()?;
                    if dirty.lock().expect("dirty keys").contains(key) {
                        repair.push(key.clone());
                    }
                }
                _ => {}
            }
        }
        Some(repair)
    }

    /// Working-set transfer (004 Algorithm 1 line 10): where each of `missed`, keys that missed
    /// on their recovering primaries, may be looked up; None unless every one may (its fragment
    /// transfers, and this process has not stopped looking up its primary's keys).
    pub(crate) fn transfer_sources(&self, missed: &[&Vec<u8>]) -> Option<Vec<TransferSource>> {
        missed
            .iter()
            .map(|key| match self.route_of(key)? {
                (
                    _,
                    Route::Recovering {
                        primary,
                        secondary,
                        transfer: Some(goal),
                    },
                ) => {
                    let lookups = self.transfers.get(&primary)?;
                    let source = TransferSource {
                        secondary,
                        primary,
                        goal,
                    };
                    (!lookups.stopped.load(Ordering::Relaxed)).then_some(source)
                }
                _ => None,
            })
            .collect()
    }

    /// Counts the transfer lookups made at `sources` ([`Routes::transfer_sources`]), with what
    /// they `found`, and stops looking up a primary's keys once its secondary's miss ratio passes
    /// m (see [`TransferLookups`]).
    pub(crate) fn note_transfer(&self, sources: &[TransferSource], found: &[Option<Vec<u8>>]) {
        for (&TransferSource { primary, goal, .. }, value) in sources.iter().zip(found) {
            let Some(lookups) = self.transfers.get(&primary) else {
                continue;
            };
            let n = lookups.lookups.fetch_add(1, Ordering::Relaxed) + 1;
            let misses = lookups.misses.load(Ordering::Relaxed) + u64::from(value.is_none());
            if value.is_none() {
                lookups.misses.fetch_add(1, Ordering::Relaxed);
            }
            // m = 1 - h + ε, per mille.
            let m = (1000 - u64::from(goal.min(1000)) + u64::from(TRANSFER_MARGIN)).min(1000);
            if n >= MIN_READS
                && misses * 1000 >= m * n
                && !lookups.stopped.swap(true, Ordering::Relaxed)
            {
                tracing::info!(
                    primary,
                    lookups = n,
                    misses,
                    "the secondaries miss too often; this process stops transferring the \
                     primary's working set"
                );
            }
        }
    }

    /// `key` was deleted on its recovering primary under an I lease: this process need not
    /// repair it again.
    pub(crate) fn repaired(&self, key: &[u8]) {
        let Some((j, Route::Recovering { .. })) = self.route_of(key) else {
            return;
        };
        if let Some(Some(dirty)) = self.dirty.get(&j) {
            dirty.lock().expect("dirty keys").remove(key);
        }
    }

    /// What a write of `keys` adds to their deletes; an error says why it must wait.
    pub(crate) fn write_plan(&self, keys: &[Vec<u8>]) -> Result<WritePlan, String> {
        let mut plan = WritePlan::default();
        for key in keys {
            match self.route_of(key) {
                None => return Err("no Gemini configuration is known yet".into()),
                Some((j, Route::Nowhere)) => {
                    return Err(format!(
                        "fragment {j} has no instance until the coordinator places it"
                    ))
                }
                Some((_, Route::Secondary(_))) if !self.lists_dirty_keys() => {}
                Some((j, Route::Secondary(s))) => {
                    let list = dirty_list::key(j);
                    let line = dirty_list::line(key);
                    match plan
                        .appends
                        .iter_mut()
                        .find(|(c, l, _)| *c == s && *l == list)
                    {
                        Some((_, _, lines)) => lines.extend(line),
                        None => plan.appends.push((s, list, line)),
                    }
                }
                Some((_, Route::Recovering { secondary, .. })) => {
                    plan.secondary_deletes.push((secondary, key.clone()));
                }
                Some((_, Route::Primary(_))) => {}
            }
        }
        Ok(plan)
    }
}

/// Appends written keys to the dirty lists of their fragments' secondaries (transient mode), in
/// one round trip. A list that an append finds missing is created without its start, which the
/// coordinator then takes for lost. A list with no room left (NOTSTORED) is deleted, which
/// declares it lost the same way: the write goes on, and the primary's copy of the fragment will
/// be discarded instead of repaired.
pub(crate) fn append_to_dirty_lists(
    client: &Client,
    appends: &[(usize, Vec<u8>, Vec<u8>)],
) -> Result<(), ClientError> {
    let places: Vec<(usize, &[u8], &[u8])> = appends
        .iter()
        .map(|(cmi, list, lines)| (*cmi, list.as_slice(), lines.as_slice()))
        .collect();
    for (&(cmi, list, _), appended) in places.iter().zip(client.append_at(&places)) {
        match appended {
            Ok(_) => {}
            Err(ClientError::NotStored) => {
                tracing::warn!(
                    cmi,
                    "a dirty list is full; deleting it, so its primary is discarded"
                );
                client.delete_from(cmi, list)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Recovery mode (004 Algorithm 2 line 3): deletes written keys on their fragments' secondaries,
/// in a session of its own committed at once, while the writer holds Q leases on the primaries
/// and before its data-store commit. Nothing fills a secondary in recovery mode (reads go to the
/// primary, and sessions of the transient configuration are refused), so from the moment the
/// writer's primary Q lease is released, the secondary holds no value older than the write for a
/// Gemini-O worker or a working-set transfer to copy onto the primary. Deleted within the
/// writer's session instead, the secondary's delete would commit beside the primary's, and one
/// of them could come first: a worker filling the key between the two would copy the old value.
pub(crate) fn delete_on_secondaries(
    client: &Client,
    configuration: u64,
    deletes: &[(usize, Vec<u8>)],
) -> Result<(), ClientError> {
    if deletes.is_empty() {
        return Ok(());
    }
    let mut session = client.session();
    session.set_configuration(configuration);
    let writes: Vec<(usize, Write)> = deletes
        .iter()
        .map(|(cmi, key)| (*cmi, Write::Delete { key: key.clone() }))
        .collect();
    session.write_at(&writes, false)?;
    session.commit()
}

/// Routes keys by the Gemini configuration the coordinator stores on the CMIs, and fetches a
/// newer one when told to. The client ([`Client::with_router`]) asks it for every key.
pub struct GeminiRouter {
    cmis: usize,
    routes: RwLock<Arc<Routes>>,
    /// Held while a refresh runs, so that concurrent sessions fetch once.
    refreshing: Mutex<()>,
    /// When the last refresh began, in ms since `started` (see [`GeminiRouter::refresh_soon`]).
    last_refresh_ms: AtomicU64,
    started: Instant,
}

/// How often an instance that cannot be reached (or is fenced) makes the process fetch the
/// configuration: every read of it does during a failure, and the coordinator changes it at
/// most once per lease.
const REFRESH_AT_MOST_EVERY_MS: u64 = 50;

impl std::fmt::Debug for GeminiRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GeminiRouter(configuration {})", self.routes().id())
    }
}

impl GeminiRouter {
    /// A router over `cmis` instances that knows no configuration yet.
    pub fn new(cmis: usize) -> GeminiRouter {
        GeminiRouter {
            cmis,
            routes: RwLock::new(Arc::new(Routes::empty())),
            refreshing: Mutex::new(()),
            last_refresh_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    pub(crate) fn routes(&self) -> Arc<Routes> {
        self.routes.read().expect("routes").clone()
    }

    /// The id of the configuration keys are routed by (0: none yet).
    pub fn configuration_id(&self) -> u64 {
        self.routes().id()
    }

    /// Fetches the newest configuration the instances hold (and, for its fragments in recovery,
    /// their dirty lists) and routes by it if it is newer. Returns whether it changed. Fenced or
    /// unreachable instances are skipped; a configuration that does not fit the client (another
    /// number of instances) is ignored with a warning.
    pub fn refresh(&self, client: &Client) -> bool {
        // One refresh at a time; a session that finds one running goes on (its next run routes
        // by what that one fetches) instead of queueing behind it.
        let Ok(_one_at_a_time) = self.refreshing.try_lock() else {
            return false;
        };
        self.last_refresh_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let current = self.routes().id();
        let places: Vec<(usize, &[u8])> = (0..self.cmis).map(|i| (i, CONFIGURATION_KEY)).collect();
        let newest = client
            .get_at(&places)
            .into_iter()
            .filter_map(|entry| serde_json::from_slice::<Configuration>(&entry.ok()??).ok())
            .max_by_key(Configuration::id);
        let Some(configuration) = newest.filter(|c| c.id() > current) else {
            return false;
        };
        if configuration.instances().len() != self.cmis || configuration.check().is_err() {
            tracing::warn!(
                id = configuration.id(),
                "ignoring a Gemini configuration that does not fit this client's instances"
            );
            return false;
        }
        let recovering = configuration.recovering();
        let keys: Vec<Vec<u8>> = recovering
            .iter()
            .map(|&(j, _, _)| dirty_list::key(j))
            .collect();
        let places: Vec<(usize, &[u8])> = recovering
            .iter()
            .zip(&keys)
            .map(|(&(_, _, s), key)| (s, key.as_slice()))
            .collect();
        let lists = client.get_at(&places);
        let dirty = recovering
            .iter()
            .zip(lists)
            .map(|(&(j, _, _), list)| {
                let keys = list
                    .ok()
                    .flatten()
                    .and_then(|list| dirty_list::parse(&list).ok())
                    .map(|keys| Mutex::new(keys.into_iter().collect()));
                if keys.is_none() {
                    tracing::warn!(
                        fragment = j,
                        "dirty list unreadable; reading the fragment from the data store"
                    );
                }
                (j, keys)
            })
            .collect();
        tracing::info!(
            from = current,
            to = configuration.id(),
            "routing by a new Gemini configuration"
        );
        *self.routes.write().expect("routes") = Arc::new(Routes::new(configuration, dirty));
        true
    }

    /// [`GeminiRouter::refresh`], unless one began in the last few milliseconds: for what only
    /// suggests the configuration may have changed (an instance unreachable or fenced).
    pub(crate) fn refresh_soon(&self, client: &Client) -> bool {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.last_refresh_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= REFRESH_AT_MOST_EVERY_MS && self.refresh(client)
    }

    /// Deletes `keys` where the newest configuration routes them, as a write would (on the
    /// secondary in transient mode, listed dirty there; on the primary and the secondary in
    /// recovery), in a session of its own under Q leases: for a write whose data-store commit
    /// succeeded and whose cache commit did not. Runs again by each newer configuration until it
    /// succeeds, however long that takes (a fragment's failed instance is taken out of the
    /// configuration within the coordinator's lease): the write is not acknowledged before, as
    /// a reader could otherwise meet a value it replaced. Warns every `config.give_up_after`.
    pub(crate) fn invalidate(&self, client: &Client, keys: &[Vec<u8>], config: &Config) {
        let mut warned = Instant::now();
        let mut backoff = Backoff::new(&config.retry);
        loop {
            let routes = self.routes();
            let attempt = routes
                .write_plan(keys)
                .map_err(|reason| ClientError::Aborted { reason })
                .and_then(|plan| {
                    let mut session = client.session();
                    session.set_configuration(routes.id());
                    let deletes: Vec<(usize, Write)> = keys
                        .iter()
                        .map(|key| (client.route(key), Write::Delete { key: key.clone() }))
                        .collect();
                    session.write_at(&deletes, true)?;
                    delete_on_secondaries(client, routes.id(), &plan.secondary_deletes)?;
                    append_to_dirty_lists(client, &plan.appends)?;
                    session.commit()
                });
            match attempt {
                Ok(()) => return,
                Err(e) => {
                    if warned.elapsed() >= config.give_up_after {
                        tracing::warn!(
                            error = %e,
                            "still invalidating the keys of a write whose cache commit failed"
                        );
                        warned = Instant::now();
                    }
                    self.refresh(client);
                    backoff.pause();
                }
            }
        }
    }
}

impl Router for GeminiRouter {
    /// The instance a key's reads and writes go to. A key whose fragment has no instance routes
    /// to its (failed) primary; the framework does not send it to the cache (see the module).
    fn route(&self, key: &[u8]) -> usize {
        let routes = self.routes.read().expect("routes");
        match routes.route_of(key) {
            Some((_, Route::Primary(i) | Route::Secondary(i))) => i,
            Some((_, Route::Recovering { primary, .. })) => primary,
            Some((j, Route::Nowhere)) => routes
                .configuration
                .as_ref()
                .and_then(|c| c.fragment(j).ok())
                .map_or(0, |f| f.primary.instance),
            None => 0,
        }
    }

    fn cmis(&self) -> usize {
        self.cmis
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One fragment, its primary (instance 0) back and recovering towards `goal`.
    fn transferring(goal: u16) -> Routes {
        let mut c = Configuration::new(2, 1);
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, Some(goal)).unwrap();
        Routes::new(c, HashMap::new())
    }

    /// Lookups of `key` at its sources, the last `missing` of `n` finding nothing.
    fn look_up(routes: &Routes, key: &Vec<u8>, n: usize, missing: usize) {
        let sources = routes.transfer_sources(&[key]).expect("transferring");
        for i in 0..n {
            let found = (i < n - missing).then(|| b"v".to_vec());
            routes.note_transfer(&sources, &[found]);
        }
    }

    /// 004 §3.2.2: with the primary's hit ratio h = 90% before its failure, m = 1 - h + 5% =
    /// 15%: a process stops transferring once its secondaries missed that share of at least 100
    /// lookups, and not before.
    #[test]
    fn a_process_stops_transferring_once_the_secondaries_miss_more_than_m() {
        let key = b"k".to_vec();
        let routes = transferring(900);
        look_up(&routes, &key, 99, 20);
        assert!(
            routes.transfer_sources(&[&key]).is_some(),
            "99 lookups say too little"
        );
        look_up(&routes, &key, 1, 0);
        assert!(
            routes.transfer_sources(&[&key]).is_none(),
            "20 misses in 100"
        );

        let routes = transferring(900);
        look_up(&routes, &key, 200, 29);
        assert!(
            routes.transfer_sources(&[&key]).is_some(),
            "14.5% is below m"
        );
        look_up(&routes, &key, 1, 1);
        assert!(
            routes.transfer_sources(&[&key]).is_some(),
            "30 in 201 is 14.9%"
        );
        look_up(&routes, &key, 1, 1);
        assert!(
            routes.transfer_sources(&[&key]).is_none(),
            "31 in 202 is 15.3%"
        );

        let routes = transferring(1000);
        look_up(&routes, &key, 100, 4);
        assert!(
            routes.transfer_sources(&[&key]).is_some(),
            "m is 5% for a perfect goal"
        );
    }

    /// Keys of fragments that do not transfer have no source, and a read with one of them goes
    /// to the data store whole.
    #[test]
    fn only_transferring_fragments_have_sources() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, None).unwrap();
        let routes = Routes::new(c, HashMap::new());
        assert!(routes.transfer_sources(&[&b"k".to_vec()]).is_none());
        let routes = transferring(900);
        let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("k{i}").into_bytes()).collect();
        let refs: Vec<&Vec<u8>> = keys.iter().collect();
        let sources = routes
            .transfer_sources(&refs)
            .expect("one fragment, transferring");
        assert!(sources
            .iter()
            .all(|s| (s.primary, s.secondary, s.goal) == (0, 1, 900)));
    }
}
