//! The threads that move an AppNode between modes and apply buffered writes eagerly: a monitor
//! that probes the data store in failed mode and returns the AppNode to normal once no buffered
//! write is left (000 §4.3.5), and the Active Recovery workers of Algorithm 6.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cads_client::Write;
use cads_store::Isolation;

use super::{apply, Mode, Tardis};
use crate::background::Background;
use crate::cache_store::DocRef;
use crate::error::{Error, Result};
use crate::writeback::design1::{pending_in, purge, pw_key, unlist_applied};
use crate::writeback::replicated::{filter_list, open_lines, placed};
use crate::writeback::Refused;
use crate::Cads;

/// The monitor and the AR workers of one AppNode. Without them an AppNode that entered failed
/// mode stays there. Dropping the handle stops them.
pub struct Recovery {
    threads: Background,
}

/// First and longest wait between failed probes (exponential back-off, 000 §4.3.2).
const PROBE_FIRST: Duration = Duration::from_millis(10);
const PROBE_LONGEST: Duration = Duration::from_millis(250);
/// How often the threads look at the mode when there is nothing for them to do.
const IDLE: Duration = Duration::from_millis(20);
/// Listed documents the monitor checks for a buffered write per attempt to end recovery.
const CHECKED_PER_ATTEMPT: usize = 4096;
/// With AR workers running, the TeleW keys' total size above which the monitor does not try to
/// end recovery: about `CHECKED_PER_ATTEMPT` lines of a typical document key and its tag.
const LONG_LISTS: usize = CHECKED_PER_ATTEMPT * 64;

impl Recovery {
    /// Starts the monitor and `ar_workers` AR workers for `cads`, which must have TARDIS on
    /// ([`Config::tardis`](crate::Config::tardis) with write-around or write-through). Loads the
    /// key of the buffered writes' MACs now, while the data store answers: an AppNode that
    /// never had it cannot buffer writes when the data store is down.
    pub fn start(cads: Arc<Cads>) -> Result<Recovery> {
        let Some(tardis) = cads.tardis() else {
            return Err(Error::App(
                "TARDIS is not on: it needs Config::tardis and write-around or write-through"
                    .into(),
            ));
        };
        if let Err(e) = cads.seal() {
            tracing::warn!(
                error = %e,
                "cannot load the key of buffered writes yet: writes fail while the data store is \
                 down until it is loaded"
            );
        }
        let workers = tardis.config.ar_workers;
        let mut threads = Background::new();
        let c = cads.clone();
        threads.spawn("cads-tardis-monitor".into(), move |stop| monitor(&c, stop));
        let claims = Arc::new(Claims::new(tardis.config.telew.max(1)));
        for index in 0..workers {
            let (c, claims) = (cads.clone(), claims.clone());
            threads.spawn(format!("cads-ar-{index}"), move |stop| {
                ar_worker(&c, &claims, stop, index as u64)
            });
        }
        Ok(Recovery { threads })
    }

    /// Stops the threads and waits for them.
    pub fn stop(mut self) {
        self.threads.stop();
    }
}

/// Sleeps `d` in short steps, returning early once `stop` is set.
fn nap(stop: &AtomicBool, d: Duration) {
    let step = Duration::from_millis(10);
    let mut left = d;
    while !left.is_zero() && !stop.load(Ordering::Acquire) {
        let now = left.min(step);
        std::thread::sleep(now);
        left -= now;
    }
}

fn monitor(cads: &Cads, stop: &AtomicBool) {
    let tardis = cads.tardis().expect("started with TARDIS");
    let mut rng = Rng::new(u64::MAX);
    let mut backoff = PROBE_FIRST;
    let mut probes = 0;
    while !stop.load(Ordering::Acquire) {
        // Recovery does not end while a teleported write whose cache commit failed may have
        // left a buffered write without its line or its markers.
        let settled = tardis.settle_lost(cads);
        match tardis.mode() {
            Mode::Recovery if !settled => nap(stop, IDLE),
            Mode::Normal => {
                probes = 0;
                // Loaded at start unless the data store failed then: until it is loaded, writes
                // cannot be buffered when the data store goes away.
                if !cads.mac_key_loaded() {
                    if let Err(e) = cads.seal() {
                        tracing::debug!(error = %e, "the key of buffered writes is not loaded yet");
                    }
                }
                nap(stop, IDLE);
            }
            Mode::Failed => match probe(cads, tardis, &mut rng) {
                Ok(()) => {
                    probes += 1;
                    backoff = PROBE_FIRST;
                    if probes >= tardis.config.recover_after.max(1) {
                        tardis.store_back();
                        probes = 0;
                    } else {
                        nap(stop, PROBE_FIRST);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "TARDIS probe failed; the data store is still down");
                    probes = 0;
                    nap(stop, backoff);
                    backoff = (backoff * 2).min(PROBE_LONGEST);
                }
            },
            Mode::Recovery => match end_recovery(cads, tardis) {
                Ok(Ending::Normal) => {}
                Ok(Ending::Pending(listed)) => {
                    // Reading every TeleW key costs in proportion to what they list.
                    let wait = IDLE + Duration::from_micros(10 * listed as u64);
                    nap(stop, wait.min(PROBE_LONGEST));
                }
                Ok(Ending::Contended) => nap(stop, IDLE + rng.below(4) as u32 * IDLE),
                Ok(Ending::LeftToWorkers) => nap(stop, 5 * IDLE),
                Err(e) => {
                    tracing::debug!(error = %e, "TARDIS: checking for the end of recovery failed");
                    nap(stop, IDLE);
                }
            },
        }
    }
}

/// One probe of the data store in failed mode: first the data store is settled (the server
/// sessions of connections given up on are ended, so that a commit that timed out cannot land
/// after a buffered write applied now), and the cache keys of writes whose outcome was unknown
/// are invalidated again; then a buffered write is applied (a document from a random TeleW key),
/// or, when that key lists none, an empty transaction runs.
fn probe(cads: &Cads, tardis: &Tardis, rng: &mut Rng) -> Result<()> {
    cads.store().settle()?;
    let in_doubt = tardis.take_in_doubt();
    if !in_doubt.is_empty() {
        cads.invalidate(&in_doubt);
    }
    let telew = rng.below(tardis.config.telew.max(1));
    let listed = pending_in(cads, &[telew])?;
    match listed.docs.into_iter().flatten().next() {
        Some(doc) => apply(cads, &[doc], false, None).map(drop),
        None => {
            let tx = cads
                .store()
                .begin(Isolation::ReadCommitted)
                .and_then(|tx| tx.commit());
            tx.map_err(Error::Store)
        }
    }
}

/// What an attempt to end recovery found.
enum Ending {
    /// No document listed has a buffered write: the AppNode is in normal mode.
    Normal,
    /// This many lines are listed (some documents still have buffered writes).
    Pending(usize),
    /// A TeleW key was leased by another session.
    Contended,
    /// The TeleW keys list many documents, which the AR workers are working through (and
    /// unlisting): not worth reading, checking and rewriting now, under leases that would hold
    /// the workers up.
    LeftToWorkers,
}

/// 000 §4.3.5: under exclusive leases on all omega TeleW keys, drops the lines of documents
/// without a buffered write (applied by a request, whose Algorithm 5 leaves TeleW alone) and, if
/// none is left, enters normal mode before releasing the leases. A writer that creates a buffered
/// write needs the lease of its TeleW key to list it, so none can appear meanwhile; one whose
/// session began in failed mode sees normal mode once it has the lease and runs again.
fn end_recovery(cads: &Cads, tardis: &Tardis) -> Result<Ending> {
    let client = cads.cache().expect("TARDIS has a cache");
    let seal = cads.seal()?;
    let keys: Vec<Vec<u8>> = (0..tardis.config.telew.max(1)).map(pw_key).collect();
    // (A CMI that cannot say leaves it to the full check below, which reads every replica.)
    let long = listed_bytes(client, &keys).is_ok_and(|bytes| bytes > LONG_LISTS);
    if tardis.config.ar_workers > 0 && long {
        return Ok(Ending::LeftToWorkers);
    }
    let places = placed(cads, client, &keys);
    let mut session = client.session();
    let lists = match session.mget_at(&places, true) {
        Ok(lists) => lists,
        Err(e) if e.is_unavailable() => return Err(e.into()),
        Err(_) => {
            session.abort();
            return Ok(Ending::Contended);
        }
    };
    let mut listed: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut lines = 0;
    for (&(_, key), list) in places.iter().zip(&lists) {
        let Some(list) = list else { continue };
        let (payloads, _) = open_lines(seal, key, list);
        lines += payloads.len();
        listed.extend(payloads.into_iter().map(<[u8]>::to_vec));
    }
    // Which listed documents still have a buffered write, on any replica; checked up to a bound
    // per attempt, so that a long list is pruned over several.
    let checked: Vec<Vec<u8>> = listed.iter().take(CHECKED_PER_ATTEMPT).cloned().collect();
    let bw_places = placed(cads, client, &checked);
    let mut dirty: BTreeSet<&[u8]> = BTreeSet::new();
    for (exists, &(_, key)) in client.exists_at(&bw_places).into_iter().zip(&bw_places) {
        match exists {
            Ok(false) => {}
            Ok(true) => {
                dirty.insert(key);
            }
            Err(e) => {
                session.abort();
                return Err(e.into());
            }
        }
    }
    let clean: BTreeSet<&[u8]> = checked
        .iter()
        .map(Vec::as_slice)
        .filter(|k| !dirty.contains(k))
        .collect();
    let all_clean = clean.len() == listed.len();
    // A teleported write whose commit failed may have left a buffered write without its line.
    if all_clean && !tardis.teleports_settled() {
        session.abort();
        return Ok(Ending::Pending(lines));
    }
    if all_clean && !tardis.recovered() {
        // Failed again meanwhile: the lines stay for the next recovery.
        session.abort();
        return Ok(Ending::Pending(lines));
    }
    let mut refused = Refused::default();
    let writes: Vec<(usize, Write)> = places
        .iter()
        .zip(lists)
        .filter_map(|(&(cmi, key), list)| {
            let list = list?;
            let keep = |bw: &[u8]| !clean.contains(bw);
            filter_list(seal, key, &list, keep, false, &mut refused).map(|w| (cmi, w))
        })
        .collect();
    session.write_at(&writes, true)?;
    session.commit()?;
    refused.discarded(cads.write_back_stats());
    Ok(if all_clean {
        Ending::Normal
    } else {
        Ending::Pending(lines)
    })
}

/// The size of the TeleW `keys` on their first replicas: one round trip, no lease, nothing
/// opened.
fn listed_bytes(client: &cads_client::Client, keys: &[Vec<u8>]) -> Result<usize> {
    let places: Vec<(usize, &[u8])> = keys
        .iter()
        .map(|key| (client.route(key), key.as_slice()))
        .collect();
    let mut total = 0;
    for length in client.strlen_at(&places) {
        total += length?;
    }
    Ok(total)
}

/// An AR worker: Algorithm 6 in recovery mode, idle otherwise.
fn ar_worker(cads: &Cads, claims: &Claims, stop: &AtomicBool, index: u64) {
    let tardis = cads.tardis().expect("started with TARDIS");
    let mut rng = Rng::new(index);
    while !stop.load(Ordering::Acquire) {
        if tardis.mode() != Mode::Recovery {
            nap(stop, IDLE);
            continue;
        }
        match ar_pass(cads, tardis, claims, &mut rng, stop) {
            Ok(true) => {}
            Ok(false) => nap(stop, IDLE),
            Err(e) => {
                tracing::debug!(error = %e, "AR worker: iteration failed");
                nap(stop, IDLE);
            }
        }
    }
}

/// The TeleW keys that this AppNode's AR workers are working through. Two workers on one key
/// take the same documents in different orders and keep running into each other's leases
/// (every conflict splits a batch and costs its round trips again), so a worker picks a key no
/// other has while there is one with documents listed.
struct Claims(Mutex<Vec<bool>>);

impl Claims {
    fn new(omega: usize) -> Claims {
        Claims(Mutex::new(vec![false; omega]))
    }

    fn claimed(&self, telew: usize) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner())[telew]
    }

    fn set(&self, telew: usize, claimed: bool) {
        self.0.lock().unwrap_or_else(|p| p.into_inner())[telew] = claimed;
    }
}

/// Iterations of Algorithm 6 over one TeleW key: a random one (the next ones when it lists
/// nothing, or another worker of this AppNode has it: see [`Claims`]; a key another worker has
/// when no other lists anything), its documents in random order, alpha at a time, each batch
/// applied in one data-store transaction (a document another session holds is skipped); then
/// the applied ones leave the TeleW key together, keeping any that a write gave a new buffered
/// write meanwhile (Step 6). The paper reads the TeleW key again for every alpha documents;
/// reading and rewriting a list of thousands of sealed lines per batch of alpha cost more than
/// the batches themselves (docs/ARCHITECTURE.md, "TARDIS"). Returns whether it found documents
/// listed.
fn ar_pass(
    cads: &Cads,
    tardis: &Tardis,
    claims: &Claims,
    rng: &mut Rng,
    stop: &AtomicBool,
) -> Result<bool> {
    let omega = tardis.config.telew.max(1);
    let first = rng.below(omega);
    let order = (0..omega).map(|step| (first + step) % omega);
    let unclaimed = order.clone().filter(|&k| !claims.claimed(k));
    let claimed: Vec<usize> = order.filter(|&k| claims.claimed(k)).collect();
    for telew in unclaimed.chain(claimed) {
        let listed = pending_in(cads, &[telew])?;
        if !listed.refused.is_empty() {
            purge(cads, &listed.refused)?;
        }
        let mut docs: Vec<DocRef> = listed.docs.into_iter().flatten().collect();
        if docs.is_empty() {
            continue;
        }
        for i in 0..docs.len() {
            let j = i + rng.below(docs.len() - i);
            docs.swap(i, j);
        }
        claims.set(telew, true);
        let mut applied = Vec::new();
        let mut outcome = Ok(true);
        for batch in docs.chunks(tardis.config.alpha.max(1)) {
            if stop.load(Ordering::Acquire) || tardis.mode() != Mode::Recovery {
                break;
            }
            if let Err(e) = apply(cads, batch, false, Some(&mut applied)) {
                outcome = Err(e);
                break;
            }
        }
        unlist_applied(cads, &applied);
        claims.set(telew, false);
        return outcome;
    }
    Ok(false)
}

/// A small generator for random choices (SplitMix64), seeded per thread.
struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Rng {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Rng(u64::from_le_bytes(seed) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
