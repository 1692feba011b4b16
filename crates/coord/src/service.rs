//! The coordinator at work (004 §2.1): it probes every instance, takes one whose lease has run
//! out as failed and one that answers again as back, turns that into configuration changes
//! ([`Configuration`]), and makes each change durable and known, in this order:
//!
//! 1. saved to the state file, so that a restarted coordinator never hands out an id twice or
//!    forgets a change it published;
//! 2. each fragment given a new secondary gets its dirty list there, a pinned entry that starts
//!    with [`dirty_list::START`], before any client can learn of the secondary: a list without its
//!    start was lost (evicted, or its instance restarted), and the primary cannot be trusted;
//! 3. the ids published to every instance that is up (`CONFIGID`, `FRAGMENTID`: see
//!    [`publish`]), and only once every instance that may still serve knows them,
//! 4. the configuration stored on each as a pinned cache entry ([`CONFIGURATION_KEY`]), which is
//!    how clients learn of it.
//!
//! Each probe also keeps the instances' leases (Gemini's fences, in the engine's `fencing`): it
//! grants a lease from the clock reading of the previous probe to every instance that knows the
//! current configuration, and reads the clock again. An instance that misses a publication gets
//! no lease, stops serving when its lease runs out, and is taken for failed when this
//! coordinator's lease on it does, later. An instance that cannot be reached while it is
//! published to is published to again at the next step. The service has no clock of its own:
//! [`Service::step`] is given the time, so that tests can move it; [`Service::run`] gives it a
//! monotonic clock's.
//!
//! The pinned entries are stored with `PINSET`, which CMIs of either lease mode take.
//!
//! After the probes, the recovery workers repair a bounded number of dirty keys of the fragments
//! in recovery ([`crate::repair`]); a fragment whose dirty keys are all repaired returns to
//! normal mode.
//!
//! With working-set transfer ([`ServiceOptions::transfer`], 004 §3.2.2), the service samples the
//! instances' hit ratios ([`HitRatios`]) every [`HIT_RATIO_EVERY_MS`]. A returning instance's
//! fragments enter recovery with the ratio it had before it failed as their transfer's goal, and
//! stay in recovery, their clients copying what they miss on the primary from the secondary,
//! until the instance's ratio is back within [`TRANSFER_MARGIN`] of it or the transfer has run as
//! long as it may; then a fragment whose dirty keys are repaired returns to normal, and one
//! whose are not goes on recovering without transfer.
//!
//! `cads coord` runs it as a process, with the session-id service ([`crate::ids`]) beside it
//! when it listens, its state in a file or, with a standby, in etcd ([`crate::etcd`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cads_client::{Client, ClientError, CmiStats};
use cads_protocol::{Command, Reply};

use crate::configuration::{ConfigError, Configuration, InstanceId, InstanceState, Mode, Replica};
use crate::dirty_list;
use crate::etcd::Leadership;
use crate::hit_ratio::HitRatios;
use crate::ids::{self, IdRanges};
use crate::liveness::{Liveness, Renewal};
use crate::publish::publish;
use crate::repair::{Pass, Repair, RepairJob};
use crate::state_file::{self, SavedState, SharedState, StateStore};

/// The cache entry holding the current configuration (JSON), on every instance that is up.
pub const CONFIGURATION_KEY: &[u8] = b"gemini:configuration";

/// Dirty keys a step repairs at most, over all fragments in recovery: a step must end in time for
/// the next probe, which renews the instances' leases.
pub const REPAIR_KEYS_PER_STEP: usize = 2048;

/// How often the instances' hit ratios are sampled, with working-set transfer.
pub const HIT_RATIO_EVERY_MS: u64 = 1_000;

/// How far below its ratio from before the failure (per mille) a returning instance's hit ratio
/// may be for its transfer to end: 004 §3.2.2's ε, the ratio's own variation.
pub const TRANSFER_MARGIN: u16 = 50;

/// How the service runs.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Fragments of a new configuration (a saved one keeps its own).
    pub fragments: u32,
    /// An instance that has not answered a probe for this long has failed.
    pub lease: Duration,
    /// Time between probes ([`Service::run`]).
    pub probe_every: Duration,
    /// Where the state survives a restart; None keeps it in memory only.
    pub state_file: Option<PathBuf>,
    /// What the recovery workers do with a dirty key (Gemini-I or Gemini-O).
    pub repair: Repair,
    /// Working-set transfer ("+W"): a returning instance's fragments are recovered with clients
    /// copying what they miss on the primary from the secondary, until the instance's hit ratio
    /// is back to what it was before it failed, or for at most this long. None: no transfer.
    pub transfer: Option<Duration>,
}

/// What a step saw happen to an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Failed(InstanceId),
    Returned(InstanceId),
    /// Every dirty key of the fragment was repaired: it is back to normal mode.
    FragmentRecovered(u32),
    /// The fragment's dirty list was lost during recovery: its primary's copy was discarded.
    FragmentDiscarded(u32),
    /// The fragment's working-set transfer ended before its dirty keys were all repaired; its
    /// recovery goes on.
    TransferEnded(u32),
}

/// Why the service cannot go on.
#[derive(Debug)]
pub enum ServiceError {
    /// The state file cannot be read, or does not describe these instances.
    State(String),
    /// The state file cannot be written: the change is not published until it can be.
    Save(std::io::Error),
    Config(ConfigError),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::State(why) => write!(f, "coordinator state: {why}"),
            ServiceError::Save(e) => write!(f, "cannot save the coordinator's state: {e}"),
            ServiceError::Config(e) => write!(f, "configuration: {e}"),
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<ConfigError> for ServiceError {
    fn from(e: ConfigError) -> Self {
        ServiceError::Config(e)
    }
}

/// The coordinator over the instances of `client` (instance `i` is the client's CMI `i`).
pub struct Service {
    client: Client,
    options: ServiceOptions,
    configuration: Configuration,
    liveness: Liveness,
    /// The state file's content, shared with the session-id ranges.
    state: Arc<SharedState>,
    /// The session-id ranges this coordinator hands out ([`Service::session_ids`]).
    ids: Arc<IdRanges>,
    /// The configuration id saved to the state file.
    saved: u64,
    /// Per instance, the configuration id it was last told (0: it must be told again).
    published: Vec<u64>,
    /// Per instance, the id of the configuration entry stored on it.
    entry_stored: Vec<u64>,
    /// Per instance, its monotonic clock as the last probe read it, for the next grant.
    clock_read: Vec<Option<ClockRead>>,
    /// Per instance, the incarnation last seen: a new one has restarted.
    boots: Vec<Option<u64>>,
    /// The recovery workers' progress, per fragment in recovery.
    repairs: Vec<RepairJob>,
    /// Where the next step's recovery work starts among the fragments in recovery.
    repair_cursor: usize,
    /// Per instance, whether dirty lists it kept from before its failure are still to delete.
    old_lists: Vec<bool>,
    /// Per fragment, the secondary its dirty list was made on.
    lists_made: Vec<Option<Replica>>,
    /// The instances' hit ratios, sampled with working-set transfer only.
    hit_ratios: HitRatios,
    /// When the hit ratios were last sampled.
    sampled_ms: Option<u64>,
    /// Per instance, its hit ratio from before it last failed (per mille), if one was measured.
    ratio_before_failure: Vec<Option<u16>>,
    /// Per instance, when the transfer of its fragments began.
    transfer_began: Vec<Option<u64>>,
    /// Per fragment, whether its dirty keys are all repaired while its transfer goes on.
    repaired: Vec<bool>,
}

impl Service {
    /// A coordinator starting at `now_ms` with the state saved in `options.state_file`, or a new
    /// configuration. A saved configuration's secondaries are taken to have their dirty lists
    /// (made before it was saved); a list missing when its primary returns is a lost one.
    pub fn start(
        client: Client,
        options: ServiceOptions,
        now_ms: u64,
    ) -> Result<Service, ServiceError> {
        let saved = match &options.state_file {
            Some(path) => state_file::load(path).map_err(ServiceError::State)?,
            None => None,
        };
        let store = options
            .state_file
            .clone()
            .map_or(StateStore::Memory, StateStore::File);
        Service::start_from(client, options, now_ms, saved, store)
    }

    /// A coordinator that leads through etcd ([`crate::etcd`]), starting at `now_ms` from the
    /// state the last leader saved there (or a new configuration), and saving there while it
    /// leads (`options.state_file` is not used).
    pub fn start_leading(
        client: Client,
        options: ServiceOptions,
        now_ms: u64,
        leadership: Leadership,
    ) -> Result<Service, ServiceError> {
        let saved = leadership.load().map_err(ServiceError::State)?;
        Service::start_from(client, options, now_ms, saved, StateStore::Etcd(leadership))
    }

    fn start_from(
        client: Client,
        options: ServiceOptions,
        now_ms: u64,
        saved: Option<SavedState>,
        store: StateStore,
    ) -> Result<Service, ServiceError> {
        let instances = client.cmis();
        let durable = !matches!(store, StateStore::Memory);
        let (mut configuration, next_session_id) = match saved {
            Some(state) if state.configuration.instances().len() != instances => {
                return Err(ServiceError::State(format!(
                    "the saved configuration has {} instances, and {instances} were given",
                    state.configuration.instances().len()
                )))
            }
            Some(state) => (
                state.configuration,
                state.next_session_id.max(ids::SERVED_IDS_START),
            ),
            // Without its state, the coordinator cannot tell what the instances' entries are
            // worth: a new configuration above every id they know makes them all obsolete (an
            // id below theirs would be refused, and no instance would ever be granted a lease).
            None => {
                let known = highest_configuration_id(&client);
                let fragments = options.fragments.max(1);
                (
                    Configuration::starting_at(instances, fragments, known + 1),
                    ids::first_served_id(durable),
                )
            }
        };
        configuration.set_dirty_lists(options.repair.uses_dirty_lists());
        let lists_made = configuration
            .fragments()
            .iter()
            .map(|f| f.secondary)
            .collect();
        let mut liveness =
            Liveness::new(instances, options.lease.as_millis().max(1) as u64, now_ms);
        for (i, state) in configuration.instances().iter().enumerate() {
            if *state == InstanceState::Down {
                liveness.mark_failed(i);
            }
        }
        let fragments = configuration.fragments().len();
        let transfer_began = (0..instances)
            .map(|i| {
                let transferring = configuration
                    .fragments()
                    .iter()
                    .any(|f| f.transfer.is_some() && f.primary.instance == i);
                transferring.then_some(now_ms)
            })
            .collect();
        let state = Arc::new(SharedState::in_store(
            store,
            SavedState {
                configuration: configuration.clone(),
                next_session_id,
            },
        ));
        let mut service = Service {
            hit_ratios: HitRatios::new(instances),
            sampled_ms: None,
            ratio_before_failure: vec![None; instances],
            transfer_began,
            repaired: vec![false; fragments],
            liveness,
            client,
            options,
            configuration,
            ids: Arc::new(IdRanges::new(state.clone())),
            state,
            saved: 0,
            published: vec![0; instances],
            entry_stored: vec![0; instances],
            clock_read: vec![None; instances],
            boots: vec![None; instances],
            repairs: Vec::new(),
            repair_cursor: 0,
            old_lists: vec![false; instances],
            lists_made,
        };
        service.make_known()?;
        Ok(service)
    }

    pub fn configuration(&self) -> &Configuration {
        &self.configuration
    }

    /// The session-id ranges this coordinator hands out, reserved in its state file (for an
    /// [`crate::ids::IdServer`]).
    pub fn session_ids(&self) -> Arc<IdRanges> {
        self.ids.clone()
    }

    /// Probes every instance at `now_ms`, applies what changed, and makes the configuration
    /// known. Returns the changes seen.
    ///
    /// A probe renews the instance's lease from the clock reading the previous probe brought back,
    /// and reads the clock again for the next one: a reading taken before this step began, so the
    /// lease it grants ends, on any clock, no later than `now_ms` plus its length, where this
    /// coordinator's lease on the instance ends (see `fencing` in the engine). Only an instance
    /// that knows the current configuration is granted one.
    pub fn step(&mut self, now_ms: u64) -> Result<Vec<Change>, ServiceError> {
        let mut probes: Vec<(usize, Command<'_>)> = Vec::new();
        for i in 0..self.client.cmis() {
            let grantable = self.liveness.is_alive(i)
                && self.published[i] == self.configuration.id()
                && self.configuration.instances()[i] == InstanceState::Up;
            if let (Some(read), true) = (self.clock_read[i].take(), grantable) {
                self.liveness.renew(i, now_ms);
                let until = Some(read.clock.saturating_add(self.grant_ms()));
                let boot = Some(read.boot);
                probes.push((i, Command::InstanceLease { until, boot }));
            }
            probes.push((
                i,
                Command::InstanceLease {
                    until: None,
                    boot: None,
                },
            ));
        }
        let answers = self.client.execute_many(&probes);
        let mut changes = Vec::new();
        for ((i, probe), answer) in probes.iter().zip(answers) {
            let Command::InstanceLease { until: None, .. } = probe else {
                continue;
            };
            let Some(read) = clock_of(answer) else {
                continue;
            };
            if self.boots[*i].is_some_and(|boot| boot != read.boot) {
                // Restarted without missing a lease: what it was told may be gone (a volatile
                // instance comes back without fragments), so it is told again before it serves.
                tracing::warn!(instance = *i, "instance restarted; publishing to it again");
                self.published[*i] = 0;
                self.entry_stored[*i] = 0;
            }
            self.boots[*i] = Some(read.boot);
            self.clock_read[*i] = Some(read);
            if !self.liveness.is_alive(*i)
                && self.liveness.renew(*i, now_ms) == Some(Renewal::Returned)
            {
                changes.push(Change::Returned(*i));
            }
        }
        if self.options.transfer.is_some() {
            self.sample_hit_ratios(now_ms);
        }
        self.repair_fragments(&mut changes)?;
        self.end_transfers(now_ms, &mut changes)?;
        changes.extend(
            self.liveness
                .expired(now_ms)
                .into_iter()
                .map(Change::Failed),
        );
        for &change in &changes {
            self.apply(change, now_ms)?;
        }
        self.make_known()?;
        Ok(changes)
    }

    /// The recovery workers' share of a step (004 Algorithm 3): at most [`REPAIR_KEYS_PER_STEP`]
    /// dirty keys over the fragments in recovery, taken in turn, once every instance that may
    /// serve knows the configuration that put them there. A fragment whose dirty keys are all
    /// repaired returns to normal, one whose list is lost is discarded; work that cannot reach an
    /// instance is tried again at the next step.
    fn repair_fragments(&mut self, changes: &mut Vec<Change>) -> Result<(), ServiceError> {
        for (j, f) in self.configuration.fragments().iter().enumerate() {
            if f.mode != Mode::Recovery {
                self.repaired[j] = false;
            }
        }
        let mut recovering = self.configuration.recovering();
        recovering.retain(|&(j, _, _)| !self.repaired[j as usize]);
        // A job ends with its recovery (checked at every step, so that a job read from one
        // recovery's list never serves the next one's), or when its replicas change.
        self.repairs
            .retain(|job| recovering.contains(&job.target()));
        let id = self.configuration.id();
        let known = (0..self.entry_stored.len())
            .all(|i| !self.liveness.is_alive(i) || self.entry_stored[i] >= id);
        if !known || recovering.is_empty() {
            return Ok(());
        }
        // The step's budget, fragment after fragment, starting where the last step stopped.
        let mut budget = REPAIR_KEYS_PER_STEP;
        let first = self.repair_cursor % recovering.len();
        for k in 0..recovering.len() {
            if budget == 0 {
                break;
            }
            self.repair_cursor = first + k + 1;
            let (j, primary, secondary) = recovering[(first + k) % recovering.len()];
            let job = match self.repairs.iter().position(|job| job.target().0 == j) {
                Some(at) => Ok(Some(self.repairs.swap_remove(at))),
                None => RepairJob::start(&self.client, j, primary, secondary),
            };
            let pass = job.and_then(|job| match job {
                Some(mut job) => {
                    let stepped = job.step(&self.client, self.options.repair, budget);
                    self.repairs.push(job);
                    stepped.map(|(pass, tried)| {
                        budget = budget.saturating_sub(tried);
                        pass
                    })
                }
                None => Ok(Pass::ListLost),
            });
            match pass {
                Ok(Pass::Done { repaired }) => {
                    self.repairs.retain(|job| job.target().0 != j);
                    if self.configuration.fragment(j)?.transfer.is_some() {
                        tracing::info!(
                            fragment = j,
                            repaired,
                            "dirty keys repaired; the working-set transfer goes on"
                        );
                        self.repaired[j as usize] = true;
                        // Clients that fetch the list from now on have nothing to repair.
                        if let Err(e) = start_dirty_list(&self.client, secondary, j) {
                            tracing::debug!(fragment = j, error = %e, "dirty list not emptied");
                        }
                    } else {
                        tracing::info!(fragment = j, repaired, "fragment recovered");
                        self.configuration.fragment_recovered(j)?;
                        changes.push(Change::FragmentRecovered(j));
                    }
                }
                Ok(Pass::Partly { repaired, left }) => {
                    tracing::debug!(fragment = j, repaired, left, "dirty keys left");
                }
                Ok(Pass::ListLost) => {
                    tracing::warn!(fragment = j, "dirty list lost in recovery; discarding");
                    self.configuration.recovery_list_lost(j)?;
                    changes.push(Change::FragmentDiscarded(j));
                }
                Err(e) => tracing::warn!(fragment = j, error = %e, "recovery pass failed"),
            }
        }
        Ok(())
    }

    /// INFO's read counters of every instance that is up, at most every [`HIT_RATIO_EVERY_MS`].
    fn sample_hit_ratios(&mut self, now_ms: u64) {
        if self
            .sampled_ms
            .is_some_and(|at| now_ms < at + HIT_RATIO_EVERY_MS)
        {
            return;
        }
        self.sampled_ms = Some(now_ms);
        let sections: [&[u8]; 1] = [b"stats"];
        let asks: Vec<(usize, Command<'_>)> = (0..self.client.cmis())
            .filter(|&i| self.configuration.instances()[i] == InstanceState::Up)
            .map(|i| (i, Command::Info(&sections)))
            .collect();
        for ((i, _), answer) in asks.iter().zip(self.client.execute_many(&asks)) {
            if let Ok(Reply::Bulk(text)) = answer {
                let stats = CmiStats::parse(&String::from_utf8_lossy(&text));
                self.hit_ratios
                    .observe(*i, stats.keyspace_hits, stats.keyspace_misses);
            }
        }
    }

    /// Ends the working-set transfer of the fragments whose primary's hit ratio is back within
    /// [`TRANSFER_MARGIN`] of its goal, or that transferred as long as they may: those repaired
    /// return to normal mode, the others go on recovering without transfer.
    fn end_transfers(
        &mut self,
        now_ms: u64,
        changes: &mut Vec<Change>,
    ) -> Result<(), ServiceError> {
        let Some(longest) = self.options.transfer else {
            return Ok(());
        };
        let longest_ms = longest.as_millis() as u64;
        let transferring: Vec<(u32, InstanceId, u16)> = (0..)
            .zip(self.configuration.fragments())
            .filter(|(_, f)| f.mode == Mode::Recovery)
            .filter_map(|(j, f)| Some((j, f.primary.instance, f.transfer?)))
            .collect();
        for (j, primary, goal) in transferring {
            let ratio = self.hit_ratios.current(primary);
            let reached = ratio.is_some_and(|r| r.saturating_add(TRANSFER_MARGIN) >= goal);
            let ran_ms =
                self.transfer_began[primary].map_or(u64::MAX, |t| now_ms.saturating_sub(t));
            if !reached && ran_ms < longest_ms {
                continue;
            }
            tracing::info!(
                fragment = j,
                hit_ratio = ratio,
                goal,
                ran_ms,
                "working-set transfer ends"
            );
            if self.repaired[j as usize] {
                self.configuration.fragment_recovered(j)?;
                changes.push(Change::FragmentRecovered(j));
            } else {
                self.configuration.end_transfer(j)?;
                changes.push(Change::TransferEnded(j));
            }
        }
        Ok(())
    }

    /// How long a granted lease lasts on the instance's clock: this coordinator's lease on it,
    /// less a tenth for clocks that run at slightly different rates.
    fn grant_ms(&self) -> u64 {
        let lease = self.options.lease.as_millis() as u64;
        lease - lease / 10
    }

    /// Steps every `probe_every` until `stop` is set, logging each change and error.
    pub fn run(self, stop: &AtomicBool) {
        self.run_while(stop, || true);
    }

    /// [`Service::run`], checking `may_go_on` before each step and stopping when it says no (a
    /// coordinator that lost the lead).
    pub fn run_while(mut self, stop: &AtomicBool, mut may_go_on: impl FnMut() -> bool) {
        let started = Instant::now();
        while !stop.load(Ordering::Acquire) && may_go_on() {
            let now_ms = started.elapsed().as_millis() as u64;
            match self.step(now_ms) {
                Ok(changes) => {
                    for change in changes {
                        tracing::warn!(
                            ?change,
                            configuration = self.configuration.id(),
                            "instance changed state"
                        );
                    }
                }
                Err(e) => tracing::error!(error = %e, "coordinator step failed"),
            }
            std::thread::sleep(self.options.probe_every);
        }
    }

    fn apply(&mut self, change: Change, now_ms: u64) -> Result<(), ServiceError> {
        match change {
            // Applied by the pass that saw them.
            Change::FragmentRecovered(_)
            | Change::FragmentDiscarded(_)
            | Change::TransferEnded(_) => {}
            Change::Failed(instance) => {
                // A fragment whose dirty keys are all repaired recovers only for the transfer,
                // which its failed secondary ends: its primary is consistent, and kept.
                let repaired_on: Vec<u32> = self
                    .configuration
                    .recovering()
                    .into_iter()
                    .filter(|&(j, _, secondary)| secondary == instance && self.repaired[j as usize])
                    .map(|(j, _, _)| j)
                    .collect();
                for j in repaired_on {
                    tracing::info!(
                        fragment = j,
                        "the secondary of a repaired fragment failed: its transfer ends"
                    );
                    self.configuration.fragment_recovered(j)?;
                }
                self.configuration.instance_failed(instance)?;
                self.published[instance] = 0;
                // Failed again before a ratio of its return was measured: the older one stands.
                if let Some(ratio) = self.hit_ratios.take(instance) {
                    self.ratio_before_failure[instance] = Some(ratio);
                }
                self.transfer_began[instance] = None;
            }
            Change::Returned(instance) => {
                // The secondaries as they were, asked only for the fragments it asks about.
                let before = self.configuration.fragments().to_vec();
                let (client, repair) = (&self.client, self.options.repair);
                let transfer = match (self.options.transfer, repair) {
                    (Some(_), Repair::Invalidate | Repair::Overwrite) => {
                        let ratio = self.ratio_before_failure[instance];
                        if ratio.is_none() {
                            tracing::warn!(
                                instance,
                                "no hit ratio was measured before the instance failed; \
                                 recovering it without working-set transfer"
                            );
                        }
                        ratio
                    }
                    _ => None,
                };
                self.configuration.instance_recovered(
                    instance,
                    |j| match repair {
                        Repair::Discard => false,
                        // Nothing was listed, and nothing will be repaired.
                        Repair::Keep => true,
                        Repair::Invalidate | Repair::Overwrite => before[j as usize]
                            .secondary
                            .is_some_and(|s| has_dirty_list(client, s.instance, j)),
                    },
                    transfer,
                )?;
                if let Some(goal) = transfer {
                    tracing::info!(instance, goal, "working-set transfer begins");
                    self.transfer_began[instance] = Some(now_ms);
                }
                if repair == Repair::Keep {
                    for (j, _, _) in self.configuration.recovering() {
                        self.configuration.fragment_recovered(j)?;
                    }
                }
                self.old_lists[instance] = true;
            }
        }
        Ok(())
    }

    /// Deletes the dirty lists a returning instance kept from before it failed (it was a
    /// secondary then): pinned, they would stay for good, and no client reads them now. Tried at
    /// every step until the instance, granted a lease again, takes the deletes.
    fn delete_old_lists(&mut self) {
        for instance in 0..self.old_lists.len() {
            if !self.old_lists[instance] || !self.liveness.is_alive(instance) {
                continue;
            }
            let keys: Vec<Vec<u8>> = (0..)
                .zip(self.configuration.fragments())
                .filter(|(_, f)| f.secondary.is_none_or(|s| s.instance != instance))
                .map(|(j, _)| dirty_list::key(j))
                .collect();
            let deletes: Vec<[&[u8]; 1]> = keys.iter().map(|k| [k.as_slice()]).collect();
            let commands: Vec<(usize, Command<'_>)> = deletes
                .iter()
                .map(|key| (instance, Command::Del(key)))
                .collect();
            let answers = self.client.execute_many(&commands);
            if answers.iter().all(|a| matches!(a, Ok(Reply::Int(_)))) {
                self.old_lists[instance] = false;
            }
        }
    }

    /// Saves, makes the new secondaries' dirty lists, publishes the ids to every instance that is
    /// up and was not told them yet, and once every instance that may still serve knows them,
    /// stores the configuration entry (see the module's order).
    fn make_known(&mut self) -> Result<(), ServiceError> {
        let id = self.configuration.id();
        if self.saved < id {
            self.state
                .save_configuration(&self.configuration)
                .map_err(ServiceError::Save)?;
            self.saved = id;
        }
        for (j, f) in self.configuration.fragments().iter().enumerate() {
            let Some(secondary) = f.secondary else {
                continue;
            };
            if f.mode != Mode::Transient
                || !self.configuration.dirty_lists()
                || self.lists_made[j] == Some(secondary)
            {
                continue;
            }
            // Not reachable: the next probe reports it failed, and the fragment moves on.
            if start_dirty_list(&self.client, secondary.instance, j as u32).is_ok() {
                self.lists_made[j] = Some(secondary);
            }
        }
        let alive: Vec<InstanceId> = (0..self.published.len())
            .filter(|&i| self.liveness.is_alive(i))
            .collect();
        for &i in &alive {
            if self.published[i] < id && publish(&self.client, &self.configuration, i).is_ok() {
                self.published[i] = id;
            }
        }
        // A client that learned the id from the entry could otherwise meet an instance serving
        // by an older one (an unpublished instance is granted no lease, so it stops in time).
        let lists_ready = !self.configuration.dirty_lists()
            || self
                .configuration
                .fragments()
                .iter()
                .zip(&self.lists_made)
                .all(|(f, made)| {
                    f.mode != Mode::Transient || f.secondary.is_none() || *made == f.secondary
                });
        if !lists_ready || alive.iter().any(|&i| self.published[i] < id) {
            return Ok(());
        }
        let text = serde_json::to_vec(&self.configuration).expect("a configuration serializes");
        for &i in &alive {
            if self.entry_stored[i] < id
                && pin_set(&self.client, i, CONFIGURATION_KEY, &text).is_ok()
            {
                self.entry_stored[i] = id;
            }
        }
        // Lists of fragments that left transient and recovery mode: no client reads them now.
        for (j, f) in self.configuration.fragments().iter().enumerate() {
            let Some(made_on) = self.lists_made[j] else {
                continue;
            };
            if f.secondary.is_none() && self.liveness.is_alive(made_on.instance) {
                let key = dirty_list::key(j as u32);
                let keys = [key.as_slice()];
                let deleted = self.client.execute(made_on.instance, &Command::Del(&keys));
                if matches!(deleted, Ok(Reply::Int(_))) {
                    self.lists_made[j] = None;
                }
            }
        }
        self.delete_old_lists();
        Ok(())
    }
}

/// The highest configuration id any reachable instance knows (0 if none knows one).
fn highest_configuration_id(client: &Client) -> u64 {
    let asks: Vec<(usize, Command<'_>)> = (0..client.cmis())
        .map(|i| (i, Command::ConfigId(None)))
        .collect();
    client
        .execute_many(&asks)
        .into_iter()
        .filter_map(|reply| match reply {
            Ok(Reply::Int(id)) => u64::try_from(id).ok(),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// What an `INSTANCELEASE` probe read: the instance's monotonic clock and incarnation.
#[derive(Clone, Copy, Debug)]
struct ClockRead {
    clock: u64,
    boot: u64,
}

/// The clock an `INSTANCELEASE` probe read, if the instance answered.
fn clock_of(answer: Result<Reply<'static>, ClientError>) -> Option<ClockRead> {
    match answer.ok()? {
        Reply::Array(fields) => match fields.as_slice() {
            [Reply::Int(clock), _, Reply::Int(boot)] => Some(ClockRead {
                clock: u64::try_from(*clock).ok()?,
                boot: u64::try_from(*boot).ok()?,
            }),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `instance` holds `fragment`'s dirty list, whole from its start.
fn has_dirty_list(client: &Client, instance: InstanceId, fragment: u32) -> bool {
    let key = dirty_list::key(fragment);
    match client.get_at(&[(instance, key.as_slice())]).pop() {
        Some(Ok(Some(list))) => list.starts_with(dirty_list::START),
        Some(Ok(None)) | None => false,
        // Taken for lost, which discards the primary's copy: safe, and said, since it costs the
        // returning instance its content.
        Some(Err(e)) => {
            tracing::warn!(
                instance,
                fragment,
                error = %e,
                "cannot read a dirty list of a returning instance's fragment; taking it for lost"
            );
            false
        }
    }
}

/// A new, empty dirty list for `fragment` on `instance` (replacing any left from before).
fn start_dirty_list(
    client: &Client,
    instance: InstanceId,
    fragment: u32,
) -> Result<(), ClientError> {
    pin_set(
        client,
        instance,
        &dirty_list::key(fragment),
        dirty_list::START,
    )
}

/// Stores `value` under `key` on `instance`, pinned (`PINSET`, which every lease mode takes).
fn pin_set(
    client: &Client,
    instance: InstanceId,
    key: &[u8],
    value: &[u8],
) -> Result<(), ClientError> {
    match client.execute(instance, &Command::PinSet { key, value })? {
        Reply::Status(_) => Ok(()),
        Reply::Error(e) => Err(ClientError::Server(e)),
        other => Err(ClientError::Protocol(format!("PINSET answered {other:?}"))),
    }
}
