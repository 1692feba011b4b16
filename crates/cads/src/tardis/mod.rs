//! TARDIS (000 ch. 4): under write-around and write-through, writes keep succeeding while the data
//! store is down. A write the data store cannot take is *teleported*: its cached values change as
//! write-through changes them, and its document operations become a buffered write in the cache,
//! applied to the data store once it is back.
//!
//! Every AppNode (a [`Cads`]) has a mode shared by its threads (Fig. 4.3):
//!
//! - **normal**: the policy as usual;
//! - **failed**, entered when a data-store call fails for a reason that may go away by itself
//!   (down, timed out, refusing writes): writes are teleported, misses are refused with
//!   [`Error::StoreUnavailable`] because the data store may lack
//!   buffered writes (Table 4.2, Theorem 3);
//! - **recovery**, entered once `recover_after` (p) probes of the data store succeed: buffered writes
//!   are applied by the AppNode when a request touches their document (Algorithm 5) and by the AR
//!   workers eagerly (Algorithm 6); normal returns when the monitor, holding leases on all omega
//!   TeleW keys, finds no document left with a buffered write.
//!
//! The four techniques are two switches ([`Technique`], Table 4.3): whether a miss applies the
//! buffered writes its result depends on before querying the data store (TARD, TARDIS; TAR and DIS
//! refuse misses until normal mode), and whether a write applies its documents' buffered writes
//! before writing them through (DIS, TARDIS; TAR and TARD keep teleporting writes until normal).
//!
//! The cache side is write-back's Design 1, reused whole (`writeback::design1`): Δ_i is the
//! buffered write `BW:<collection>:<id>`, pinned and kept on R replicas; the TeleW keys are the
//! PendingWrites partitions `PW:<k>`, `telew` of them (omega); the mapping from a cache key to its
//! document is the [`CacheStore`](crate::CacheStore)'s `buffered_reads`; applying a buffered write
//! is Algorithm 2 under exclusive leases on its replicas, with non-idempotent changes converted to
//! their idempotent form first and fenced by the data-store transaction (000 §4.5 allows this in
//! place of Snapshot Recovery: each `$inc` and `$push` lands exactly once whatever step an applier
//! dies at). See docs/ARCHITECTURE.md, "TARDIS".

mod monitor;

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use cads_client::{MarkOp, Write};
use cads_store::StoreError;

use crate::cache_store::DocRef;
use crate::error::{Error, Result};
use crate::writeback::design1::{self, Patience};
use crate::Cads;

pub use monitor::Recovery;

/// The four techniques of 000 §4.1 as two switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Technique {
    /// Writes buffer in failed and recovery modes; misses are refused until normal mode.
    Tar,
    /// Writes apply their documents' buffered writes in recovery mode; misses are refused.
    Dis,
    /// Misses apply the buffered writes they depend on in recovery mode; writes buffer.
    Tard,
    /// Both: the fastest recovery (000 Table 4.6).
    Tardis,
}

impl Technique {
    pub const ALL: [Technique; 4] = [
        Technique::Tar,
        Technique::Dis,
        Technique::Tard,
        Technique::Tardis,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Technique::Tar => "tar",
            Technique::Dis => "dis",
            Technique::Tard => "tard",
            Technique::Tardis => "tardis",
        }
    }

    pub fn parse(name: &str) -> Option<Technique> {
        Technique::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether a miss in recovery mode applies the buffered writes it depends on and then queries
    /// the data store (TARD, TARDIS), rather than being refused.
    pub fn applies_on_miss(self) -> bool {
        matches!(self, Technique::Tard | Technique::Tardis)
    }

    /// Whether a write in recovery mode applies its documents' buffered writes and then writes
    /// through (DIS, TARDIS), rather than being teleported.
    pub fn applies_on_write(self) -> bool {
        matches!(self, Technique::Dis | Technique::Tardis)
    }
}

/// How AppNodes that may be in different modes stay consistent (000 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppNodes {
    /// One AppNode writes the data: its normal mode does nothing extra.
    One,
    /// Recon (000 §4.4.2.1): recovery and normal are one mode; every miss and every write checks
    /// its documents for buffered writes (another AppNode may have left some) and applies them
    /// first. Costs a round trip per miss and write.
    Recon,
    /// Contextual leases (000 §4.4.2.2): a teleported write marks the cache keys it writes, and
    /// a reader learns of a marker from the lease it takes anyway (`LMGETMARK`): a miss on a
    /// marked key applies the buffered writes its result depends on and clears the marker at
    /// commit; a miss on an unmarked key goes straight to the data store. Writes check their
    /// documents as Recon's do, because here a document is not one cache key (see
    /// docs/ARCHITECTURE.md, "Many AppNodes").
    Contextual,
}

impl AppNodes {
    pub const ALL: [AppNodes; 3] = [AppNodes::One, AppNodes::Recon, AppNodes::Contextual];

    pub fn name(self) -> &'static str {
        match self {
            AppNodes::One => "one",
            AppNodes::Recon => "recon",
            AppNodes::Contextual => "contextual",
        }
    }

    pub fn parse(name: &str) -> Option<AppNodes> {
        AppNodes::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// TARDIS settings ([`Config::tardis`](crate::Config::tardis)).
#[derive(Clone, Debug)]
pub struct TardisConfig {
    pub technique: Technique,
    /// Active Recovery workers per AppNode (Algorithm 6). Zero leaves recovery to the requests
    /// that touch dirty documents.
    pub ar_workers: usize,
    /// Documents an AR worker picks from its TeleW key per iteration (alpha, 000 §4.6.3).
    pub alpha: usize,
    /// TeleW keys (omega): documents are spread over them by hash, and they over the CMIs.
    pub telew: usize,
    /// Successful data-store probes that end failed mode (p).
    pub recover_after: usize,
    pub appnodes: AppNodes,
}

impl Default for TardisConfig {
    fn default() -> Self {
        TardisConfig {
            technique: Technique::Tardis,
            ar_workers: 4,
            alpha: 16,
            telew: 64,
            recover_after: 3,
            appnodes: AppNodes::One,
        }
    }
}

/// An AppNode's mode (000 Fig. 4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Normal,
    Failed,
    Recovery,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Failed => "failed",
            Mode::Recovery => "recovery",
        }
    }

    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Failed,
            2 => Mode::Recovery,
            _ => Mode::Normal,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Mode::Normal => 0,
            Mode::Failed => 1,
            Mode::Recovery => 2,
        }
    }
}

/// TARDIS in one AppNode: its settings, its mode and its counters.
pub(crate) struct Tardis {
    pub(crate) config: TardisConfig,
    mode: AtomicU8,
    started: Instant,
    /// When the current mode began, in ms since `started`.
    mode_since_ms: AtomicU64,
    /// How long the last recovery mode lasted, in ms (`u64::MAX`: none ended yet).
    last_recovery_ms: AtomicU64,
    /// Cache keys written by sessions whose data-store commit failed with an unknown outcome:
    /// invalidated again once the data store has settled (see `monitor`).
    in_doubt: Mutex<Vec<Vec<u8>>>,
    /// Teleported writes whose cache commit failed, not yet settled (see [`LostTeleport`]),
    /// each with a number of its own.
    lost: Mutex<Vec<(u64, LostTeleport)>>,
    lost_numbers: AtomicU64,
    /// Teleported writes between the start of their cache commit and knowing how it went: one
    /// that fails released its leases (the TeleW key's among them) before it is recorded lost.
    committing: AtomicU64,
    stats: Stats,
}

/// A teleported write whose cache commit failed after some CMIs may have taken it: its buffered
/// writes may be visible there without their TeleW lines (on a CMI that did not take it) and
/// without the markers of keys on such a CMI (Contextual), and the new values it cached may never
/// reach the data store if its buffered writes were lost with the CMIs that did not take it. It
/// is settled by deleting its keys (marking them, under Contextual) and listing its documents
/// again, in one cache session; until that succeeds the AppNode keeps it and does not return to
/// normal mode.
#[derive(Clone)]
pub(crate) struct LostTeleport {
    pub(crate) docs: Vec<DocRef>,
    pub(crate) keys: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Stats {
    failures: AtomicU64,
    recoveries: AtomicU64,
    writes_teleported: AtomicU64,
    writes_refused: AtomicU64,
    writes_failed: AtomicU64,
    misses_refused: AtomicU64,
    applied_on_demand: AtomicU64,
    applied_by_workers: AtomicU64,
}

/// What TARDIS did in an AppNode ([`Cads::tardis_counts`](crate::Cads::tardis_counts)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TardisCounts {
    /// Times the AppNode entered failed mode.
    pub failures: u64,
    /// Times it returned to normal mode.
    pub recoveries: u64,
    /// Document writes teleported (buffered in the cache instead of written to the data store)
    /// by sessions that committed.
    pub writes_teleported: u64,
    /// Writes refused while teleporting: pinned memory full, or a write that cannot be buffered.
    pub writes_refused: u64,
    /// Writes whose data-store commit failed as the data store went away: reported to the
    /// application as data-store errors (whether they took effect is unknown), not teleported.
    pub writes_failed: u64,
    /// Reads refused because they missed while buffered writes could be pending.
    pub misses_refused: u64,
    /// Buffered writes applied by requests that touched their documents (Algorithm 5).
    pub applied_on_demand: u64,
    /// Buffered writes applied by AR workers (Algorithm 6) and the monitor's probes.
    pub applied_by_workers: u64,
}

impl TardisCounts {
    /// What happened between an earlier snapshot and this one.
    pub fn since(&self, earlier: &TardisCounts) -> TardisCounts {
        TardisCounts {
            failures: self.failures - earlier.failures,
            recoveries: self.recoveries - earlier.recoveries,
            writes_teleported: self.writes_teleported - earlier.writes_teleported,
            writes_refused: self.writes_refused - earlier.writes_refused,
            writes_failed: self.writes_failed - earlier.writes_failed,
            misses_refused: self.misses_refused - earlier.misses_refused,
            applied_on_demand: self.applied_on_demand - earlier.applied_on_demand,
            applied_by_workers: self.applied_by_workers - earlier.applied_by_workers,
        }
    }
}

/// The counts of several AppNodes together.
impl std::ops::Add for TardisCounts {
    type Output = TardisCounts;

    fn add(self, b: TardisCounts) -> TardisCounts {
        TardisCounts {
            failures: self.failures + b.failures,
            recoveries: self.recoveries + b.recoveries,
            writes_teleported: self.writes_teleported + b.writes_teleported,
            writes_refused: self.writes_refused + b.writes_refused,
            writes_failed: self.writes_failed + b.writes_failed,
            misses_refused: self.misses_refused + b.misses_refused,
            applied_on_demand: self.applied_on_demand + b.applied_on_demand,
            applied_by_workers: self.applied_by_workers + b.applied_by_workers,
        }
    }
}

/// Whether a data-store error means the data store failed (000 Definition 4.2.1: not processed
/// in a timely manner), as opposed to the request: down, timed out, or refusing writes. A
/// serialization conflict is the request's.
pub(crate) fn is_failure(e: &StoreError) -> bool {
    e.is_transient() && !matches!(e, StoreError::Conflict(_))
}

impl Tardis {
    pub(crate) fn new(config: TardisConfig) -> Tardis {
        Tardis {
            config,
            mode: AtomicU8::new(Mode::Normal.as_u8()),
            started: Instant::now(),
            mode_since_ms: AtomicU64::new(0),
            last_recovery_ms: AtomicU64::new(u64::MAX),
            in_doubt: Mutex::new(Vec::new()),
            lost: Mutex::new(Vec::new()),
            lost_numbers: AtomicU64::new(0),
            committing: AtomicU64::new(0),
            stats: Stats::default(),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    /// How long the AppNode has been in its current mode.
    pub(crate) fn in_mode_for(&self) -> std::time::Duration {
        let since = self.mode_since_ms.load(Ordering::Relaxed);
        let now = self.started.elapsed().as_millis() as u64;
        std::time::Duration::from_millis(now.saturating_sub(since))
    }

    /// Moves from `from` to `to`; false if the mode was not `from`.
    fn shift(&self, from: Mode, to: Mode) -> bool {
        let moved = self
            .mode
            .compare_exchange(from.as_u8(), to.as_u8(), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if moved {
            let now = self.started.elapsed().as_millis() as u64;
            self.mode_since_ms.store(now, Ordering::Relaxed);
        }
        moved
    }

    /// A data-store call failed with `e`: the AppNode enters failed mode, from whichever mode.
    pub(crate) fn store_failed(&self, e: &StoreError) {
        if !is_failure(e) {
            return;
        }
        for from in [Mode::Normal, Mode::Recovery] {
            if self.shift(from, Mode::Failed) {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    error = %e,
                    technique = self.config.technique.name(),
                    "data store failed: failed mode, writes are buffered in the cache"
                );
                return;
            }
        }
    }

    /// The data store took `p` probes: recovery mode.
    pub(crate) fn store_back(&self) -> bool {
        let moved = self.shift(Mode::Failed, Mode::Recovery);
        if moved {
            tracing::warn!("data store is back: recovery mode, applying buffered writes");
        }
        moved
    }

    /// How long the last recovery mode lasted, from the data store's return (as the monitor's
    /// probes found it) to normal mode.
    pub(crate) fn last_recovery(&self) -> Option<std::time::Duration> {
        match self.last_recovery_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// No buffered write is left: normal mode.
    pub(crate) fn recovered(&self) -> bool {
        let took = self.in_mode_for();
        let moved = self.shift(Mode::Recovery, Mode::Normal);
        if moved {
            self.last_recovery_ms
                .store(took.as_millis() as u64, Ordering::Relaxed);
            self.stats.recoveries.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("every buffered write is in the data store: normal mode");
        }
        moved
    }

    /// Whether a session starting in `mode` teleports its document writes.
    pub(crate) fn teleports(&self, mode: Mode) -> bool {
        match mode {
            Mode::Normal => false,
            Mode::Failed => true,
            Mode::Recovery => !self.config.technique.applies_on_write(),
        }
    }

    /// Whether a write in `mode` must apply its documents' buffered writes before it goes to the
    /// data store (Algorithm 5).
    pub(crate) fn applies_before_write(&self, mode: Mode) -> bool {
        match mode {
            Mode::Normal => self.config.appnodes != AppNodes::One,
            Mode::Failed => false,
            Mode::Recovery => self.config.technique.applies_on_write(),
        }
    }

    /// Whether teleported writes mark their keys and reads ask for markers (Contextual).
    pub(crate) fn marks(&self) -> bool {
        self.config.appnodes == AppNodes::Contextual
    }

    /// What a miss does in the current mode; `marked`: a key that missed carries a marker, or
    /// the read could not ask (Contextual only).
    pub(crate) fn on_miss(&self, marked: bool) -> OnMiss {
        match self.mode() {
            Mode::Normal => match self.config.appnodes {
                AppNodes::One => OnMiss::Query,
                AppNodes::Recon => OnMiss::ApplyFirst,
                AppNodes::Contextual if marked => OnMiss::ApplyFirst,
                AppNodes::Contextual => OnMiss::Query,
            },
            Mode::Failed if self.config.technique.applies_on_miss() => OnMiss::QueryIfClean,
            Mode::Recovery if self.config.technique.applies_on_miss() => OnMiss::ApplyFirst,
            Mode::Failed | Mode::Recovery => OnMiss::Refuse,
        }
    }

    pub(crate) fn note_teleported(&self, writes: u64) {
        self.stats
            .writes_teleported
            .fetch_add(writes, Ordering::Relaxed);
    }

    pub(crate) fn note_refused_write(&self) {
        self.stats.writes_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A write's data-store commit failed with an unknown outcome; `keys` are its cache keys.
    pub(crate) fn note_failed_write(&self, keys: &[Vec<u8>]) {
        self.stats.writes_failed.fetch_add(1, Ordering::Relaxed);
        self.in_doubt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys.iter().cloned());
    }

    /// Takes the keys of writes whose outcome was unknown.
    pub(crate) fn take_in_doubt(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.in_doubt.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A teleported write starts its cache commit; the guard ends it, once a failed commit is
    /// recorded with [`lost_teleport`](Self::lost_teleport).
    pub(crate) fn teleport_committing(&self) -> Committing<'_> {
        self.committing.fetch_add(1, Ordering::SeqCst);
        Committing(self)
    }

    /// Whether no teleported write is committing or lost: recovery may end. Checked under the
    /// leases of every TeleW key, which a committing write that registers a buffered write holds
    /// until its commit is over.
    pub(crate) fn teleports_settled(&self) -> bool {
        self.committing.load(Ordering::SeqCst) == 0
            && self
                .lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    /// A teleported write's cache commit failed: it is settled now if the cache lets it, else
    /// by the monitor later.
    pub(crate) fn lost_teleport(&self, cads: &Cads, lost: LostTeleport) {
        let number = self.lost_numbers.fetch_add(1, Ordering::Relaxed);
        self.lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((number, lost));
        if !self.settle_lost(cads) {
            tracing::warn!(
                "a teleported write's cache commit failed and its keys cannot be invalidated yet; \
                 recovery will not end before they are"
            );
        }
    }

    /// Settles the teleported writes whose cache commit failed. Returns whether none is left.
    /// Each stays listed while it is being settled, so that the monitor does not end recovery
    /// meanwhile (two threads settling one write do it twice, which is harmless).
    pub(crate) fn settle_lost(&self, cads: &Cads) -> bool {
        let pending = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if pending.is_empty() {
            return true;
        }
        let mut settled = Vec::new();
        for (number, write) in &pending {
            match self.settle(cads, write) {
                Ok(()) => settled.push(*number),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot settle a teleported write whose cache commit failed yet")
                }
            }
        }
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.retain(|(number, _)| !settled.contains(number));
        lost.is_empty()
    }

    /// A CMI that is down keeps the write unsettled until it is back: its keys must be deleted
    /// and marked there (it may return with their old values, or empty and without markers).
    fn settle(&self, cads: &Cads, lost: &LostTeleport) -> Result<()> {
        let client = cads.cache().expect("TARDIS has a cache");
        let keys = &lost.keys;
        let mut writes = design1::listing(cads, &lost.docs)?;
        if self.marks() {
            writes.extend(keys.iter().map(|key| {
                let mark = Write::Mark {
                    key: key.clone(),
                    op: MarkOp::Set,
                };
                (client.route(key), mark)
            }));
        }
        cads.invalidate_with(keys, &writes).map_err(Error::from)
    }

    pub(crate) fn note_refused_miss(&self) {
        self.stats.misses_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_applied(&self, on_demand: bool, applied: usize) {
        let counter = if on_demand {
            &self.stats.applied_on_demand
        } else {
            &self.stats.applied_by_workers
        };
        counter.fetch_add(applied as u64, Ordering::Relaxed);
    }

    pub(crate) fn counts(&self) -> TardisCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let s = &self.stats;
        TardisCounts {
            failures: get(&s.failures),
            recoveries: get(&s.recoveries),
            writes_teleported: get(&s.writes_teleported),
            writes_refused: get(&s.writes_refused),
            writes_failed: get(&s.writes_failed),
            misses_refused: get(&s.misses_refused),
            applied_on_demand: get(&s.applied_on_demand),
            applied_by_workers: get(&s.applied_by_workers),
        }
    }
}

/// A teleported write's cache commit in progress ([`Tardis::teleport_committing`]).
pub(crate) struct Committing<'t>(&'t Tardis);

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        self.0.committing.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a read that missed does before it may query the data store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnMiss {
    /// Query the data store.
    Query,
    /// Apply the buffered writes of the documents the result depends on, then query.
    ApplyFirst,
    /// Refuse if a document the result depends on has a buffered write; query otherwise (the
    /// data store is likely down, and the read then fails too).
    QueryIfClean,
    /// Refuse: without applying buffered writes the data store may be behind the cache.
    Refuse,
}

/// Applies the buffered writes of `docs` (Algorithm 2 as Algorithm 5 or 6 uses it): a request
/// (`on_demand`) waits for a document another session holds, an AR worker skips it (and may keep
/// the applied documents' keys in `unlist_later`, see [`design1::apply_docs`]). A data-store
/// failure puts the AppNode in failed mode.
pub(crate) fn apply(
    cads: &Cads,
    docs: &[DocRef],
    on_demand: bool,
    unlist_later: Option<&mut Vec<Vec<u8>>>,
) -> Result<usize> {
    let tardis = cads.tardis().expect("TARDIS is on");
    let patience = if on_demand {
        Patience::Wait
    } else {
        Patience::Skip
    };
    match design1::apply_docs(cads, docs, patience, unlist_later) {
        Ok(applied) => {
            tardis.note_applied(on_demand, applied);
            Ok(applied)
        }
        Err(Error::Store(e)) => {
            tardis.store_failed(&e);
            Err(Error::Store(e))
        }
        Err(e) => Err(e),
    }
}

/// Algorithm 5 for the documents a request touches: each that has a buffered write gets it
/// applied. Returns how many it applied.
pub(crate) fn apply_dirty(cads: &Cads, docs: &[DocRef]) -> Result<usize> {
    let mut dirty = Vec::new();
    for doc in docs {
        if design1::has_buffered(cads, doc)? {
            dirty.push(doc.clone());
        }
    }
    if dirty.is_empty() {
        return Ok(0);
    }
    apply(cads, &dirty, true, None)
}

/// Whether any of `docs` has a buffered write.
pub(crate) fn any_dirty(cads: &Cads, docs: &[DocRef]) -> Result<bool> {
    for doc in docs {
        if design1::has_buffered(cads, doc)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Applies the buffered writes of `docs` and clears the markers of `keys` (Contextual), in a
/// session of its own that holds shared leases on `keys` from before the apply to the clearing: a
/// teleported write that marks one of them again needs its exclusive lease, so it either marked
/// it before (and its buffered write is applied now) or marks it after the clearing.
pub(crate) fn apply_then_unmark(cads: &Cads, docs: &[DocRef], keys: &[Vec<u8>]) -> Result<()> {
    if keys.is_empty() {
        return apply_dirty(cads, docs).map(drop);
    }
    let client = cads.cache().expect("TARDIS has a cache");
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let clears: Vec<(usize, Write)> = keys
        .iter()
        .map(|key| {
            let clear = Write::Mark {
                key: key.clone(),
                op: MarkOp::Clear,
            };
            (client.route(key), clear)
        })
        .collect();
    let mut session = client.session();
    session.mget(&refs, false)?;
    if let Err(e) = apply_dirty(cads, docs) {
        session.abort();
        return Err(e);
    }
    session.write_at(&clears, true)?;
    session.commit().map_err(Error::from)
}
