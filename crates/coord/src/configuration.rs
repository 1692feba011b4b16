//! Gemini's configurations (004 §2-3): the key space split into fragments, each fragment assigned
//! to instances (CMIs) in a mode, and the configuration ids that tell each instance which of its
//! entries it may keep.
//!
//! This is the coordinator's state and nothing else: no I/O, no clock. The service around it feeds
//! it what happened (an instance failed or came back, a fragment's recovery finished, a dirty list
//! was lost) and publishes what it returns: a new configuration, and per instance the ids its CMI
//! must hold (`CONFIGID`, `FRAGMENTID`).
//!
//! A fragment's life (004 Fig. 4):
//!
//! - **normal**: served by its primary replica;
//! - **transient**: the primary's instance failed; a secondary replica on another instance serves
//!   the fragment and keeps a dirty list of the keys written meanwhile;
//! - **recovery**: the primary's instance is back with its old content; clients and recovery
//!   workers repair the dirty keys (004 Algorithms 1-3), then the fragment returns to normal.
//!
//! **Ids.** Every change makes a configuration with a higher id. A CMI stamps each entry with the
//! latest id it was told and keeps an id per fragment: an entry below its fragment's id is
//! obsolete (004 §3.2.4). The paper keeps one id per fragment and restores it when a primary
//! recovers (Example 3.1); here each replica has its own, because the CMIs keep fragment ids per
//! instance: a secondary gets the new configuration's id (discarding whatever it held of the
//! fragment from an earlier failure), and the primary's id is left as it was while it is away, so
//! it needs no restoring. Discarding a primary (its dirty list is lost) raises its id to the new
//! configuration's, which makes all it held of the fragment obsolete.
//!
//! Choices the paper leaves open, made for consistency:
//!
//! - The secondary fails while the primary is away (transient): the dirty list is gone, so the
//!   primary is discarded and a new secondary takes over (004 §3.3).
//! - The secondary fails during recovery: the clients' copies of the dirty list may be incomplete
//!   or gone, so the primary is discarded and the fragment returns to normal (004 §3.3 has the
//!   workers delete the remaining dirty keys, which needs the list).
//! - The dirty list is lost while the primary is away (evicted, or a failpoint): the secondary is
//!   promoted to primary (004 §3.1), and the old primary's copy is discarded.
//! - No instance is up to host a secondary: the fragment stays in transient mode without one
//!   (requests use the data store) until an instance comes back, and its primary is discarded,
//!   since no dirty list was kept meanwhile.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An instance's position in the configuration's list (a CMI).
pub type InstanceId = usize;

/// Whether an instance takes requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Up,
    Down,
}

/// A fragment's mode (004 Fig. 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Normal,
    Transient,
    Recovery,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Transient => "transient",
            Mode::Recovery => "recovery",
        }
    }
}

/// A copy of a fragment on an instance, and the fragment id the instance's CMI gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    pub instance: InstanceId,
    pub id: u64,
}

/// A fragment's assignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    pub mode: Mode,
    pub primary: Replica,
    /// Transient and recovery: the secondary replica (None in transient mode when no instance was
    /// up to host one).
    pub secondary: Option<Replica>,
    /// Recovery mode with working-set transfer (004 §3.2.2): the primary's hit ratio before its
    /// instance failed, per mille, which ends the transfer once the primary is back to it.
    /// Clients copy entries they miss on the primary from the secondary while it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<u16>,
}

impl Fragment {
    /// The secondary takes the fragment over in normal mode; the old primary no longer hosts it.
    fn promote(&mut self, secondary: Replica) {
        self.mode = Mode::Normal;
        self.primary = secondary;
        self.secondary = None;
    }
}

/// Where a request for a fragment goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Normal mode: the primary.
    Primary(InstanceId),
    /// Transient mode: the secondary; writes append their keys to its dirty list.
    Secondary(InstanceId),
    /// Recovery mode: the primary, repairing dirty keys from the secondary's dirty list (and
    /// copying the working set from it).
    Recovering {
        primary: InstanceId,
        secondary: InstanceId,
        /// Working-set transfer: the primary's hit ratio before it failed, per mille.
        transfer: Option<u16>,
    },
    /// Transient mode without a secondary: no instance holds the fragment; reads go to the data
    /// store.
    Nowhere,
}

/// A change the configuration refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    NoSuchInstance(InstanceId),
    NoSuchFragment(u32),
    /// The event does not apply in the current state (an instance reported down twice, a
    /// fragment finishing a recovery it is not in).
    NotApplicable(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoSuchInstance(i) => write!(f, "no instance {i}"),
            ConfigError::NoSuchFragment(j) => write!(f, "no fragment {j}"),
            ConfigError::NotApplicable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What an instance's CMI must be told after a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    pub instance: InstanceId,
    /// `CONFIGID`: the id new entries are stamped with.
    pub latest: u64,
    /// `FRAGMENTID f id` for every fragment the instance hosts.
    pub fragment_ids: Vec<(u32, u64)>,
}

/// The coordinator's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    id: u64,
    instances: Vec<InstanceState>,
    fragments: Vec<Fragment>,
    /// Whether secondaries keep dirty lists in transient mode (see
    /// [`Configuration::set_dirty_lists`]).
    #[serde(default = "lists_kept", skip_serializing_if = "is_true")]
    dirty_lists: bool,
}

fn lists_kept() -> bool {
    true
}

fn is_true(on: &bool) -> bool {
    *on
}

impl Configuration {
    /// The first configuration (id 1): `fragments` spread round-robin over `instances`, all up
    /// and normal, every replica's id 1.
    pub fn new(instances: usize, fragments: u32) -> Configuration {
        Configuration::starting_at(instances, fragments, 1)
    }

    /// [`Configuration::new`] with id `id` for the configuration and every replica: for a
    /// coordinator that starts without its saved state over instances that knew ids below `id`,
    /// whose entries then all read as obsolete (nothing vouches for them).
    pub fn starting_at(instances: usize, fragments: u32, id: u64) -> Configuration {
        assert!(instances > 0, "a configuration has an instance");
        assert!(fragments > 0, "a configuration has a fragment");
        Configuration {
            id,
            instances: vec![InstanceState::Up; instances],
            fragments: (0..fragments as usize)
                .map(|j| Fragment {
                    mode: Mode::Normal,
                    primary: Replica {
                        instance: j % instances,
                        id,
                    },
                    secondary: None,
                    transfer: None,
                })
                .collect(),
            dirty_lists: true,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn instances(&self) -> &[InstanceState] {
        &self.instances
    }

    pub fn fragments(&self) -> &[Fragment] {
        &self.fragments
    }

    /// Whether writes in transient mode list their keys on the secondary (on unless the
    /// coordinator repairs nothing).
    pub fn dirty_lists(&self) -> bool {
        self.dirty_lists
    }

    /// Turns dirty lists on or off, in a new configuration if that changes them. Off suits a
    /// coordinator that never reads them: VolatileCache discards a returning instance's
    /// fragments and StaleCache keeps them unrepaired (004 §5.3 compares Gemini against these
    /// baselines, which "generate no dirty lists"). Turned on while fragments are in transient
    /// mode, their writes so far were listed nowhere: each secondary becomes its fragment's
    /// primary, as when a dirty list is lost, and the old primary's copy is discarded.
    pub fn set_dirty_lists(&mut self, on: bool) {
        if self.dirty_lists == on {
            return;
        }
        self.dirty_lists = on;
        if on {
            for f in &mut self.fragments {
                if let (Mode::Transient, Some(secondary)) = (f.mode, f.secondary) {
                    f.promote(secondary);
                }
            }
        }
        self.id += 1;
    }

    pub fn fragment(&self, fragment: u32) -> Result<&Fragment, ConfigError> {
        self.fragments
            .get(fragment as usize)
            .ok_or(ConfigError::NoSuchFragment(fragment))
    }

    /// The fragments in recovery mode, each with its primary's and its secondary's instance.
    pub fn recovering(&self) -> Vec<(u32, InstanceId, InstanceId)> {
        (0..)
            .zip(&self.fragments)
            .filter(|(_, f)| f.mode == Mode::Recovery)
            .filter_map(|(j, f)| Some((j, f.primary.instance, f.secondary?.instance)))
            .collect()
    }

    /// Where requests for `fragment` go.
    pub fn route(&self, fragment: u32) -> Result<Route, ConfigError> {
        let f = self.fragment(fragment)?;
        Ok(match (f.mode, f.secondary) {
            (Mode::Normal, _) => Route::Primary(f.primary.instance),
            (Mode::Transient, Some(s)) => Route::Secondary(s.instance),
            (Mode::Transient, None) => Route::Nowhere,
            (Mode::Recovery, Some(s)) => Route::Recovering {
                primary: f.primary.instance,
                secondary: s.instance,
                transfer: f.transfer,
            },
            (Mode::Recovery, None) => unreachable!("recovery mode always has its secondary"),
        })
    }

    /// The ids `instance`'s CMI must hold now: the latest id, and the id of every fragment it
    /// hosts a replica of.
    pub fn publication(&self, instance: InstanceId) -> Publication {
        let fragment_ids = self
            .fragments
            .iter()
            .enumerate()
            .flat_map(|(j, f)| {
                [Some(f.primary), f.secondary]
                    .into_iter()
                    .flatten()
                    .filter(move |r| r.instance == instance)
                    .map(move |r| (j as u32, r.id))
            })
            .collect();
        Publication {
            instance,
            latest: self.id,
            fragment_ids,
        }
    }

    /// The instance failed (004 §3.1): the fragments it is primary of go to transient mode with a
    /// secondary on the least loaded instance that is up; a fragment in recovery whose primary
    /// fails again goes back to transient with its secondary (Fig. 4, ⑤). Fragments it is the
    /// secondary of lose their dirty list (see the module's choices).
    pub fn instance_failed(&mut self, instance: InstanceId) -> Result<(), ConfigError> {
        self.check_instance(instance, InstanceState::Up, "already down")?;
        let next = self.id + 1;
        self.instances[instance] = InstanceState::Down;
        let mut hosts = Hosts::of(self);
        for f in &mut self.fragments {
            if f.primary.instance == instance {
                match f.mode {
                    Mode::Normal => {
                        f.mode = Mode::Transient;
                        f.secondary = hosts.take_least_loaded(next);
                    }
                    Mode::Recovery => {
                        f.mode = Mode::Transient;
                        f.transfer = None;
                    }
                    Mode::Transient => unreachable!("an up instance's primary is not away"),
                }
            } else if f.secondary.is_some_and(|s| s.instance == instance) {
                f.primary.id = next;
                match f.mode {
                    Mode::Transient => f.secondary = hosts.take_least_loaded(next),
                    Mode::Recovery => {
                        f.secondary = None;
                        f.mode = Mode::Normal;
                        f.transfer = None;
                    }
                    Mode::Normal => unreachable!("normal fragments have no secondary"),
                }
            }
        }
        self.id = next;
        Ok(())
    }

    /// The instance is back with its content (004 §3.2). Each fragment it is primary of enters
    /// recovery if its secondary still has the dirty list (`has_dirty_list(fragment)`, which the
    /// service asks the secondary), with working-set transfer towards `transfer` (the instance's
    /// hit ratio before it failed, per mille) if given, and is discarded otherwise: its primary's
    /// id rises to the new configuration's, and it returns to normal mode.
    pub fn instance_recovered(
        &mut self,
        instance: InstanceId,
        mut has_dirty_list: impl FnMut(u32) -> bool,
        transfer: Option<u16>,
    ) -> Result<(), ConfigError> {
        self.check_instance(instance, InstanceState::Down, "not down")?;
        let next = self.id + 1;
        self.instances[instance] = InstanceState::Up;
        let mut hosts = Hosts::of(self);
        for (j, f) in self.fragments.iter_mut().enumerate() {
            if f.primary.instance != instance {
                // A fragment no instance could host gets one now; its primary, whose writes
                // nobody listed meanwhile, is discarded.
                if f.mode == Mode::Transient && f.secondary.is_none() {
                    f.primary.id = next;
                    f.secondary = hosts.take_least_loaded(next);
                }
                continue;
            }
            debug_assert_eq!(f.mode, Mode::Transient);
            match f.secondary {
                Some(_) if has_dirty_list(j as u32) => {
                    f.mode = Mode::Recovery;
                    f.transfer = transfer.map(|permille| permille.min(1000));
                }
                _ => {
                    f.mode = Mode::Normal;
                    f.primary.id = next;
                    f.secondary = None;
                }
            }
        }
        self.id = next;
        Ok(())
    }

    /// Every dirty key of the fragment is repaired on its primary (004 Algorithm 3): it returns
    /// to normal mode. The primary's id stays, so what it holds stays valid.
    pub fn fragment_recovered(&mut self, fragment: u32) -> Result<(), ConfigError> {
        self.end_recovery(fragment, false)
    }

    /// The fragment's dirty list was lost during recovery (its secondary restarted, or the list
    /// was damaged): the dirty keys not repaired yet cannot be known, so the primary's copy is
    /// discarded (its id rises to the new configuration's) and the fragment returns to normal.
    pub fn recovery_list_lost(&mut self, fragment: u32) -> Result<(), ConfigError> {
        self.end_recovery(fragment, true)
    }

    /// A fragment in recovery returns to normal mode, its primary's copy kept or discarded.
    fn end_recovery(&mut self, fragment: u32, discard: bool) -> Result<(), ConfigError> {
        let next = self.id + 1;
        let f = self.fragment_mut(fragment)?;
        if f.mode != Mode::Recovery {
            return Err(ConfigError::NotApplicable(format!(
                "fragment {fragment} is in {} mode, not recovery",
                f.mode.name()
            )));
        }
        f.mode = Mode::Normal;
        f.secondary = None;
        f.transfer = None;
        if discard {
            f.primary.id = next;
        }
        self.id = next;
        Ok(())
    }

    /// The working-set transfer of a fragment in recovery ends (its primary's hit ratio is back,
    /// or the transfer ran as long as it may); its recovery goes on until its dirty keys are
    /// repaired.
    pub fn end_transfer(&mut self, fragment: u32) -> Result<(), ConfigError> {
        let next = self.id + 1;
        let f = self.fragment_mut(fragment)?;
        if f.mode != Mode::Recovery || f.transfer.is_none() {
            return Err(ConfigError::NotApplicable(format!(
                "fragment {fragment} transfers no working set ({} mode)",
                f.mode.name()
            )));
        }
        f.transfer = None;
        self.id = next;
        Ok(())
    }

    /// The secondary lost the fragment's dirty list while the primary was away (004 §3.1): the
    /// secondary becomes the primary, and the old primary's copy is discarded (it no longer hosts
    /// the fragment).
    pub fn dirty_list_lost(&mut self, fragment: u32) -> Result<(), ConfigError> {
        let f = self.fragment_mut(fragment)?;
        let secondary = match (f.mode, f.secondary) {
            (Mode::Transient, Some(s)) => s,
            _ => {
                return Err(ConfigError::NotApplicable(format!(
                    "fragment {fragment} keeps no dirty list ({} mode)",
                    f.mode.name()
                )))
            }
        };
        f.promote(secondary);
        self.id += 1;
        Ok(())
    }

    /// Whether the configuration is one this module can reach: every replica on a known
    /// instance, modes matching the instances' states, no id above the configuration's. For a
    /// configuration read from outside (the coordinator's state file).
    pub fn check(&self) -> Result<(), String> {
        if self.instances.is_empty() || self.fragments.is_empty() {
            return Err("no instances or no fragments".into());
        }
        for (j, f) in self.fragments.iter().enumerate() {
            let replicas = [Some(f.primary), f.secondary];
            for r in replicas.into_iter().flatten() {
                if r.instance >= self.instances.len() {
                    return Err(format!("fragment {j}: no instance {}", r.instance));
                }
                if r.id > self.id {
                    return Err(format!(
                        "fragment {j}: id {} above the configuration's {}",
                        r.id, self.id
                    ));
                }
            }
            let up = |r: Replica| self.instances[r.instance] == InstanceState::Up;
            let fits = match (f.mode, f.secondary) {
                (Mode::Normal, None) => up(f.primary),
                (Mode::Transient, s) => !up(f.primary) && s.is_none_or(up),
                (Mode::Recovery, Some(s)) => up(f.primary) && up(s),
                _ => false,
            };
            let transfer_fits = match f.transfer {
                None => true,
                Some(permille) => f.mode == Mode::Recovery && permille <= 1000,
            };
            if !fits
                || !transfer_fits
                || f.secondary
                    .is_some_and(|s| s.instance == f.primary.instance)
            {
                return Err(format!(
                    "fragment {j}: {} mode does not fit its replicas {f:?} and the instances' \
                     states",
                    f.mode.name()
                ));
            }
        }
        Ok(())
    }

    fn fragment_mut(&mut self, fragment: u32) -> Result<&mut Fragment, ConfigError> {
        self.fragments
            .get_mut(fragment as usize)
            .ok_or(ConfigError::NoSuchFragment(fragment))
    }

    fn check_instance(
        &self,
        instance: InstanceId,
        expected: InstanceState,
        otherwise: &str,
    ) -> Result<(), ConfigError> {
        match self.instances.get(instance) {
            None => Err(ConfigError::NoSuchInstance(instance)),
            Some(&state) if state == expected => Ok(()),
            Some(_) => Err(ConfigError::NotApplicable(format!(
                "instance {instance} is {otherwise}"
            ))),
        }
    }
}

/// The instances that may host a secondary, with the replicas each hosts.
struct Hosts {
    up: Vec<InstanceId>,
    load: Vec<usize>,
}

impl Hosts {
    fn of(config: &Configuration) -> Hosts {
        let mut load = vec![0usize; config.instances.len()];
        for f in &config.fragments {
            for r in [Some(f.primary), f.secondary].into_iter().flatten() {
                load[r.instance] += 1;
            }
        }
        let up = (0..config.instances.len())
            .filter(|&i| config.instances[i] == InstanceState::Up)
            .collect();
        Hosts { up, load }
    }

    /// A new replica with id `id` on the up instance hosting the fewest replicas (the
    /// lowest-numbered among equals), so that a failed instance's fragments spread evenly over
    /// the others; None when no instance is up.
    fn take_least_loaded(&mut self, id: u64) -> Option<Replica> {
        let instance = *self.up.iter().min_by_key(|&&i| (self.load[i], i))?;
        self.load[instance] += 1;
        Some(Replica { instance, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(c: &Configuration) -> Vec<Mode> {
        c.fragments().iter().map(|f| f.mode).collect()
    }

    #[test]
    fn fragments_start_round_robin_and_normal() {
        let c = Configuration::new(3, 7);
        assert_eq!(c.id(), 1);
        let primaries: Vec<_> = c.fragments().iter().map(|f| f.primary.instance).collect();
        assert_eq!(primaries, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(c.route(4), Ok(Route::Primary(1)));
        assert_eq!(
            c.publication(1),
            Publication {
                instance: 1,
                latest: 1,
                fragment_ids: vec![(1, 1), (4, 1)]
            }
        );
        assert_eq!(c.route(7), Err(ConfigError::NoSuchFragment(7)));
    }

    /// 004 Example 3.1 with per-replica ids: the secondaries get the new id, the recovered
    /// primary keeps its old one where the dirty list survived, and is discarded where not.
    #[test]
    fn a_failed_instance_goes_transient_then_recovers_or_is_discarded() {
        let mut c = Configuration::new(4, 12);
        c.instance_failed(0).unwrap();
        assert_eq!(c.id(), 2);
        let of_0: Vec<u32> = vec![0, 4, 8];
        for &j in &of_0 {
            let f = c.fragment(j).unwrap();
            assert_eq!(f.mode, Mode::Transient);
            assert_eq!(f.primary, Replica { instance: 0, id: 1 }, "left as it was");
            assert_eq!(f.secondary.unwrap().id, 2);
        }
        let secondaries: Vec<_> = of_0
            .iter()
            .map(|&j| c.fragment(j).unwrap().secondary.unwrap().instance)
            .collect();
        assert_eq!(secondaries, [1, 2, 3], "spread evenly over the others");
        assert_eq!(c.route(4), Ok(Route::Secondary(2)));
        assert!(c.publication(2).fragment_ids.contains(&(4, 2)));

        // Fragment 4's dirty list was evicted; 0's and 8's survived.
        c.instance_recovered(0, |j| j != 4, None).unwrap();
        assert_eq!(c.id(), 3);
        assert_eq!(c.fragment(0).unwrap().mode, Mode::Recovery);
        assert_eq!(
            c.fragment(0).unwrap().primary.id,
            1,
            "its entries stay valid"
        );
        assert_eq!(
            c.route(0),
            Ok(Route::Recovering {
                primary: 0,
                secondary: 1,
                transfer: None,
            })
        );
        let discarded = c.fragment(4).unwrap();
        assert_eq!(discarded.mode, Mode::Normal);
        assert_eq!(discarded.primary, Replica { instance: 0, id: 3 });
        assert_eq!(discarded.secondary, None);
        assert_eq!(
            c.publication(0),
            Publication {
                instance: 0,
                latest: 3,
                fragment_ids: vec![(0, 1), (4, 3), (8, 1)]
            }
        );

        c.fragment_recovered(0).unwrap();
        c.fragment_recovered(8).unwrap();
        assert_eq!(c.id(), 5);
        assert_eq!(modes(&c), vec![Mode::Normal; 12]);
        assert_eq!(
            c.fragment(8).unwrap().primary,
            Replica { instance: 0, id: 1 }
        );
        assert!(matches!(
            c.fragment_recovered(8),
            Err(ConfigError::NotApplicable(_))
        ));
    }

    #[test]
    fn a_primary_failing_during_recovery_goes_back_to_its_secondary() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, None).unwrap();
        assert_eq!(c.fragment(0).unwrap().mode, Mode::Recovery);
        c.instance_failed(0).unwrap();
        let f = c.fragment(0).unwrap();
        assert_eq!(f.mode, Mode::Transient);
        assert_eq!(
            f.secondary,
            Some(Replica { instance: 1, id: 2 }),
            "the same dirty list"
        );
        assert_eq!(f.primary.id, 1);
    }

    #[test]
    fn a_secondary_failing_discards_the_primary() {
        // In transient mode: a new secondary, and the primary's copy is obsolete.
        let mut c = Configuration::new(3, 3);
        c.instance_failed(0).unwrap();
        assert_eq!(c.fragment(0).unwrap().secondary.unwrap().instance, 1);
        c.instance_failed(1).unwrap();
        let f = c.fragment(0).unwrap();
        assert_eq!(f.mode, Mode::Transient);
        assert_eq!(f.secondary, Some(Replica { instance: 2, id: 3 }));
        assert_eq!(f.primary.id, 3);

        // In recovery: back to normal, the primary's copy obsolete.
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, None).unwrap();
        c.instance_failed(1).unwrap();
        let f = c.fragment(0).unwrap();
        assert_eq!(f.mode, Mode::Normal);
        assert_eq!(f.primary, Replica { instance: 0, id: 4 });
        assert_eq!(f.secondary, None);
    }

    #[test]
    fn a_lost_dirty_list_promotes_the_secondary() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.dirty_list_lost(0).unwrap();
        let f = c.fragment(0).unwrap();
        assert_eq!(
            (f.mode, f.primary),
            (Mode::Normal, Replica { instance: 1, id: 2 })
        );
        c.instance_recovered(0, |_| panic!("instance 0 hosts nothing to recover"), None)
            .unwrap();
        assert!(c.publication(0).fragment_ids.is_empty());
        assert!(matches!(
            c.dirty_list_lost(0),
            Err(ConfigError::NotApplicable(_))
        ));
    }

    /// Lists turned on while a fragment is transient: its writes so far were listed nowhere,
    /// so its secondary takes it over for good. Off, or unchanged, touches no fragment.
    #[test]
    fn dirty_lists_turned_on_in_transient_mode_promote_the_secondary() {
        let mut c = Configuration::new(2, 2);
        assert!(c.dirty_lists());
        c.set_dirty_lists(true);
        assert_eq!(c.id(), 1, "unchanged: no new configuration");
        c.set_dirty_lists(false);
        assert_eq!((c.dirty_lists(), c.id()), (false, 2));
        c.instance_failed(0).unwrap();
        assert_eq!(c.route(0), Ok(Route::Secondary(1)));
        c.set_dirty_lists(true);
        assert_eq!(c.id(), 4);
        let f = c.fragment(0).unwrap();
        assert_eq!(
            (f.mode, f.primary, f.secondary),
            (Mode::Normal, Replica { instance: 1, id: 3 }, None)
        );
        assert_eq!(c.route(1), Ok(Route::Primary(1)), "fragment 1 untouched");
        assert!(c.check().is_ok());
    }

    /// A configuration saved before dirty lists could be turned off reads with them on, and one
    /// with them on is saved as before.
    #[test]
    fn dirty_lists_are_on_unless_saved_off() {
        let on = Configuration::new(2, 2);
        let text = serde_json::to_string(&on).unwrap();
        assert!(!text.contains("dirty_lists"), "{text}");
        assert!(serde_json::from_str::<Configuration>(&text)
            .unwrap()
            .dirty_lists());
        let mut off = on.clone();
        off.set_dirty_lists(false);
        let back: Configuration =
            serde_json::from_str(&serde_json::to_string(&off).unwrap()).unwrap();
        assert_eq!(back, off);
    }

    #[test]
    fn with_no_instance_up_a_fragment_is_nowhere_and_its_primary_discarded_on_return() {
        let mut c = Configuration::new(1, 2);
        c.instance_failed(0).unwrap();
        assert_eq!(c.route(1), Ok(Route::Nowhere));
        c.instance_recovered(0, |_| panic!("no secondary keeps a dirty list"), None)
            .unwrap();
        assert_eq!(
            c.fragment(1).unwrap().primary,
            Replica { instance: 0, id: 3 }
        );
        assert_eq!(modes(&c), vec![Mode::Normal; 2]);

        // Both of two instances down; the first back hosts the other's fragment.
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.instance_failed(1).unwrap();
        assert_eq!(c.route(0), Ok(Route::Nowhere));
        assert_eq!(c.route(1), Ok(Route::Nowhere));
        c.instance_recovered(0, |_| panic!("no secondary keeps a dirty list"), None)
            .unwrap();
        assert_eq!(
            c.fragment(0).unwrap().primary,
            Replica { instance: 0, id: 4 }
        );
        let f = c.fragment(1).unwrap();
        assert_eq!(f.mode, Mode::Transient);
        assert_eq!(f.secondary, Some(Replica { instance: 0, id: 4 }));
        assert_eq!(f.primary.id, 4, "nobody listed its writes meanwhile");
        c.instance_recovered(1, |_| true, None).unwrap();
        assert_eq!(c.fragment(1).unwrap().mode, Mode::Recovery);
    }

    #[test]
    fn events_that_do_not_apply_are_refused_and_change_nothing() {
        let mut c = Configuration::new(2, 4);
        assert_eq!(c.instance_failed(5), Err(ConfigError::NoSuchInstance(5)));
        assert!(matches!(
            c.instance_recovered(0, |_| true, None),
            Err(ConfigError::NotApplicable(_))
        ));
        c.instance_failed(1).unwrap();
        let before = c.clone();
        assert!(matches!(
            c.instance_failed(1),
            Err(ConfigError::NotApplicable(_))
        ));
        assert!(matches!(
            c.fragment_recovered(1),
            Err(ConfigError::NotApplicable(_))
        ));
        assert_eq!(c.fragment_recovered(9), Err(ConfigError::NoSuchFragment(9)));
        assert_eq!(c, before);
    }

    #[test]
    fn a_list_lost_in_recovery_discards_the_primary() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(1).unwrap();
        c.instance_recovered(1, |_| true, None).unwrap();
        assert_eq!(c.fragments()[1].mode, Mode::Recovery);
        assert!(
            c.recovery_list_lost(0).is_err(),
            "fragment 0 is not in recovery"
        );
        c.recovery_list_lost(1).unwrap();
        let f = c.fragments()[1];
        assert_eq!((f.mode, f.secondary), (Mode::Normal, None));
        assert_eq!(
            f.primary.id,
            c.id(),
            "what the primary held of it is obsolete"
        );
        assert_eq!(c.publication(1).fragment_ids, vec![(1, c.id())]);
    }

    /// Working-set transfer lasts from the primary's return until it is ended or the fragment
    /// leaves recovery, and each end is a new configuration.
    #[test]
    fn a_transfer_is_part_of_recovery() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, Some(1200)).unwrap();
        let transferring = Route::Recovering {
            primary: 0,
            secondary: 1,
            transfer: Some(1000),
        };
        assert_eq!(c.route(0), Ok(transferring), "capped at all hits");
        assert_eq!(c.route(1), Ok(Route::Primary(1)), "instance 1 was not away");
        let id = c.id();
        c.end_transfer(0).unwrap();
        assert_eq!(c.id(), id + 1);
        assert_eq!(
            c.route(0),
            Ok(Route::Recovering {
                primary: 0,
                secondary: 1,
                transfer: None,
            })
        );
        assert!(matches!(
            c.end_transfer(0),
            Err(ConfigError::NotApplicable(_))
        ));
        assert!(matches!(
            c.end_transfer(1),
            Err(ConfigError::NotApplicable(_))
        ));

        // Failing again in recovery ends the transfer with it.
        c.instance_failed(0).unwrap();
        c.instance_recovered(0, |_| true, Some(500)).unwrap();
        c.instance_failed(0).unwrap();
        assert_eq!(c.fragment(0).unwrap().transfer, None);
        assert_eq!(c.check(), Ok(()));
        // So does its recovery's end.
        c.instance_recovered(0, |_| true, Some(500)).unwrap();
        c.fragment_recovered(0).unwrap();
        assert_eq!(c.fragment(0).unwrap().transfer, None);

        // A configuration read from outside with a transfer out of recovery is refused.
        let mut text = serde_json::to_value(&c).unwrap();
        text["fragments"][0]["transfer"] = 900.into();
        let read: Configuration = serde_json::from_value(text).unwrap();
        assert!(read.check().is_err());
    }

    /// Whatever happens, ids rise, every fragment is somewhere or its primary is down, and a
    /// fragment's replicas are on two instances.
    #[test]
    fn random_histories_keep_the_invariants() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..200 {
            let mut c = Configuration::new(4, 16);
            for _ in 0..40 {
                let before = c.id();
                let i = next(4);
                let j = next(16) as u32;
                let changed = match next(6) {
                    0 => c.instance_failed(i).is_ok(),
                    1 => {
                        let transfer = (next(2) == 0).then_some(900);
                        c.instance_recovered(i, |_| next(2) == 0, transfer).is_ok()
                    }
                    2 => c.fragment_recovered(j).is_ok(),
                    3 => c.recovery_list_lost(j).is_ok(),
                    4 => c.end_transfer(j).is_ok(),
                    _ => c.dirty_list_lost(j).is_ok(),
                };
                assert_eq!(c.id() > before, changed);
                for (j, f) in c.fragments().iter().enumerate() {
                    let up = |r: Replica| c.instances()[r.instance] == InstanceState::Up;
                    match f.mode {
                        Mode::Normal => assert!(up(f.primary) && f.secondary.is_none(), "{j}"),
                        Mode::Transient => {
                            assert!(!up(f.primary), "{j}");
                            assert!(f.secondary.is_none_or(up), "{j}");
                        }
                        Mode::Recovery => assert!(up(f.primary) && up(f.secondary.unwrap())),
                    }
                    if let Some(s) = f.secondary {
                        assert_ne!(s.instance, f.primary.instance);
                    }
                    assert!(f.primary.id <= c.id());
                }
                assert_eq!(c.check(), Ok(()));
            }
        }
    }
}
