//! What BG's threads issue: the mixes of actions, the choice of members, and BG's in-memory model
//! of relationships that keeps every write action valid.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use anyhow::{bail, Result};
use cads_apps::bg::{Action, ActionKind, GraphParams};
use serde::Serialize;

use crate::generator::{Discrete, Rng};

/// A mix of BG's seven core actions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mix {
    /// Its name on the command line (`90`, `99`, `99.9`, `10:1`, `100:1`, `1000:1`).
    pub name: String,
    /// Where it comes from.
    pub source: &'static str,
    /// Percent of each action, in the order of [`ActionKind::ALL`].
    pub percent: [f64; 7],
}

impl Mix {
    /// The mixes of 000 Table 3.5 by their read percentage (`90`, `99`, `99.9`, also with a `%`)
    /// and of 001 Table 1 by their read-to-write ratio (`10:1`, `100:1`, `1000:1`). 001's ratios
    /// are nominal: its mixes have the same read shares as 000's (90, 99 and 99.9%), with the
    /// reads split evenly over the three read actions instead of 80/89/89.9% View Profile.
    pub fn named(name: &str) -> Result<Mix> {
        let (name, source, percent) = match name.trim().trim_end_matches('%') {
            "90" => ("90", "000 Table 3.5", [80.0, 5.0, 5.0, 4.0, 2.0, 2.0, 2.0]),
            "99" => ("99", "000 Table 3.5", [89.0, 5.0, 5.0, 0.4, 0.2, 0.2, 0.2]),
            "99.9" => (
                "99.9",
                "000 Table 3.5",
                [89.9, 5.0, 5.0, 0.04, 0.02, 0.02, 0.02],
            ),
            "10:1" => (
                "10:1",
                "001 Table 1",
                [30.0, 30.0, 30.0, 4.0, 2.0, 2.0, 2.0],
            ),
            "100:1" => (
                "100:1",
                "001 Table 1",
                [33.0, 33.0, 33.0, 0.4, 0.2, 0.2, 0.2],
            ),
            "1000:1" => (
                "1000:1",
                "001 Table 1",
                [33.3, 33.3, 33.3, 0.04, 0.02, 0.02, 0.02],
            ),
            other => bail!(
                "unknown BG mix {other:?}: 90, 99, 99.9 (000 Table 3.5, percent of reads) or \
                 10:1, 100:1, 1000:1 (001 Table 1, reads to writes)"
            ),
        };
        Ok(Mix {
            name: name.into(),
            source,
            percent,
        })
    }

    /// The percentage of read actions.
    pub fn read_percent(&self) -> f64 {
        ActionKind::ALL
            .iter()
            .filter(|k| !k.is_write())
            .map(|k| self.percent[k.index()])
            .sum()
    }

    /// A generator of action kinds with the mix's weights.
    pub fn chooser(&self) -> Discrete<ActionKind> {
        Discrete::new(
            ActionKind::ALL
                .iter()
                .map(|k| (self.percent[k.index()], *k)),
        )
    }
}

/// How members are chosen (BG's `requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Popularity {
    /// BG's default `dzipfian` (`generator/DistOfAccess.java`): the member of rank `i` (member
    /// `i - 1`) has weight `i^-(1 - mean)`; with BG's `zipfianmean` 0.27, 30% of the members take
    /// part in about 70% of the actions (001 §3).
    Zipfian {
        /// `zipfianmean`.
        mean: f64,
    },
    /// Every member alike.
    Uniform,
}

impl Popularity {
    /// BG's default: `dzipfian` with `zipfianmean` 0.27.
    pub const BG: Popularity = Popularity::Zipfian { mean: 0.27 };

    /// `dzipfian` (BG's 0.27), `dzipfian:MEAN` or `uniform`.
    pub fn parse(text: &str) -> Result<Popularity> {
        match text.trim() {
            "uniform" => Ok(Popularity::Uniform),
            "dzipfian" | "zipfian" => Ok(Popularity::BG),
            other => {
                let mean = other
                    .strip_prefix("dzipfian:")
                    .and_then(|m| m.parse::<f64>().ok())
                    .filter(|m| *m > 0.0 && *m < 1.0);
                match mean {
                    Some(mean) => Ok(Popularity::Zipfian { mean }),
                    None => bail!(
                        "unknown member distribution {other:?}: dzipfian, dzipfian:MEAN (0 < MEAN \
                         < 1) or uniform"
                    ),
                }
            }
        }
    }
}

/// Draws members by a [`Popularity`]: a binary search of the cumulative weights, as BG does.
#[derive(Clone, Debug)]
pub struct MemberChooser {
    /// Cumulative weights, normalised to end at 1; empty for the uniform distribution.
    cumulative: Vec<f64>,
    members: u32,
}

impl MemberChooser {
    /// A chooser over members `0..members`.
    pub fn new(popularity: Popularity, members: u32) -> MemberChooser {
        let cumulative = match popularity {
            Popularity::Uniform => Vec::new(),
            Popularity::Zipfian { mean } => {
                let mut sum = 0.0;
                let mut c: Vec<f64> = (1..=members)
                    .map(|rank| {
                        sum += f64::from(rank).powf(-(1.0 - mean));
                        sum
                    })
                    .collect();
                for w in &mut c {
                    *w /= sum;
                }
                c
            }
        };
        MemberChooser {
            cumulative,
            members,
        }
    }

    /// A member.
    pub fn next(&self, rng: &mut Rng) -> u32 {
        if self.cumulative.is_empty() {
            return rng.below(u64::from(self.members)) as u32;
        }
        let u = rng.next_f64();
        let rank = self.cumulative.partition_point(|&c| c <= u);
        rank.min(self.members as usize - 1) as u32
    }
}

/// How a write action ended, for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It committed: the relationship changed.
    Committed,
    /// It was rolled back: nothing changed.
    RolledBack,
    /// It failed in a way that leaves its effect unknown: its members are left out of further
    /// writes, and their counts may or may not include it.
    Unknown,
}

/// BG's in-memory model of relationships: which pairs are friends and which invitations are
/// pending, so that write actions are valid, and which members are being written, so that two
/// threads never write the same member at once (BG locks the members of an action).
///
/// A model may own only some members (an AppNode's share, as BG gives each BGClient its own
/// members): it then writes only pairs of its own members, so that the models of several
/// processes never disagree about a relationship, while reads go to any member.
pub struct Model {
    state: Mutex<ModelState>,
    /// The members its writes may involve.
    owned: Range<u32>,
}

struct ModelState {
    friends: Vec<BTreeSet<u32>>,
    /// Inviters of each member (pending invitations received), oldest first.
    invited_by: Vec<Vec<u32>>,
    /// Invitees of each member (pending invitations sent).
    invited: Vec<BTreeSet<u32>>,
    busy: Vec<bool>,
    /// Members whose state is unknown after a failed write.
    frozen: Vec<bool>,
}

/// How many socialites a picker tries before it reports that it found no valid action.
const PICK_ATTEMPTS: usize = 64;

impl Model {
    /// The model of a freshly loaded graph, owning every member.
    pub fn new(graph: &GraphParams) -> Model {
        Model::owning(graph, 0..graph.members)
    }

    /// The model of a freshly loaded graph whose writes involve only the members `owned`.
    pub fn owning(graph: &GraphParams, owned: Range<u32>) -> Model {
        let n = graph.members as usize;
        let mut state = ModelState {
            friends: vec![BTreeSet::new(); n],
            invited_by: vec![Vec::new(); n],
            invited: vec![BTreeSet::new(); n],
            busy: vec![false; n],
            frozen: vec![false; n],
        };
        for (i, j) in graph.confirmed() {
            state.friends[i as usize].insert(j);
            state.friends[j as usize].insert(i);
        }
        for (inviter, invitee) in graph.invitations() {
            state.invited_by[invitee as usize].push(inviter);
            state.invited[inviter as usize].insert(invitee);
        }
        Model {
            state: Mutex::new(state),
            owned,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An action of this kind with members drawn by `chooser`. A write action's two members are
    /// marked busy until [`Model::finish`]; `None` if no valid, free pair was found in a few
    /// tries (BG skips the action then).
    pub fn pick(&self, kind: ActionKind, chooser: &MemberChooser, rng: &mut Rng) -> Option<Action> {
        match kind {
            ActionKind::ViewProfile => {
                let owner = chooser.next(rng);
                // Half the views are of one's own profile, which also shows the pending count.
                let requester = if rng.below(2) == 0 {
                    owner
                } else {
                    chooser.next(rng)
                };
                return Some(Action::ViewProfile { requester, owner });
            }
            ActionKind::ListFriends => {
                return Some(Action::ListFriends {
                    member: chooser.next(rng),
                })
            }
            ActionKind::ViewFriendRequests => {
                return Some(Action::ViewFriendRequests {
                    member: chooser.next(rng),
                })
            }
            _ => {}
        }
        let mut state = self.lock();
        let free =
            |state: &ModelState, member: u32| self.owned.contains(&member) && state.free(member);
        for _ in 0..PICK_ATTEMPTS {
            let me = chooser.next(rng);
            if !free(&state, me) {
                continue;
            }
            let mine = me as usize;
            let action = match kind {
                ActionKind::InviteFriend => {
                    let other = chooser.next(rng);
                    if other == me
                        || state.friends[mine].contains(&other)
                        || state.invited[mine].contains(&other)
                        || state.invited[other as usize].contains(&me)
                    {
                        continue;
                    }
                    Action::InviteFriend {
                        inviter: me,
                        invitee: other,
                    }
                }
                ActionKind::AcceptFriendRequest | ActionKind::RejectFriendRequest => {
                    // The socialite answers its most recent invitation.
                    let Some(&inviter) = state.invited_by[mine].last() else {
                        continue;
                    };
                    if kind == ActionKind::AcceptFriendRequest {
                        Action::AcceptFriendRequest {
                            inviter,
                            invitee: me,
                        }
                    } else {
                        Action::RejectFriendRequest {
                            inviter,
                            invitee: me,
                        }
                    }
                }
                _ => {
                    let friends = &state.friends[mine];
                    if friends.is_empty() {
                        continue;
                    }
                    let nth = rng.below(friends.len() as u64) as usize;
                    let friend = *friends.iter().nth(nth).expect("nth < len");
                    Action::ThawFriendship { member: me, friend }
                }
            };
            let (a, b) = action.pair().expect("a write action");
            if !free(&state, a) || !free(&state, b) {
                continue;
            }
            state.busy[a as usize] = true;
            state.busy[b as usize] = true;
            return Some(action);
        }
        None
    }

    /// Records how a write action picked by [`Model::pick`] ended and frees its members.
    pub fn finish(&self, action: &Action, outcome: Outcome) {
        let Some((a, b)) = action.pair() else {
            return;
        };
        let mut state = self.lock();
        state.busy[a as usize] = false;
        state.busy[b as usize] = false;
        match outcome {
            Outcome::RolledBack => {}
            Outcome::Unknown => {
                state.frozen[a as usize] = true;
                state.frozen[b as usize] = true;
            }
            Outcome::Committed => state.apply(action),
        }
    }

    /// Members left out of writes because a write of theirs ended with an unknown outcome.
    pub fn frozen(&self) -> usize {
        self.lock().frozen.iter().filter(|f| **f).count()
    }
}

impl ModelState {
    fn free(&self, member: u32) -> bool {
        !self.busy[member as usize] && !self.frozen[member as usize]
    }

    fn apply(&mut self, action: &Action) {
        let mut answer = |inviter: u32, invitee: u32| {
            self.invited[inviter as usize].remove(&invitee);
            self.invited_by[invitee as usize].retain(|i| *i != inviter);
        };
        match *action {
            Action::InviteFriend { inviter, invitee } => {
                self.invited[inviter as usize].insert(invitee);
                self.invited_by[invitee as usize].push(inviter);
            }
            Action::AcceptFriendRequest { inviter, invitee } => {
                answer(inviter, invitee);
                self.friends[inviter as usize].insert(invitee);
                self.friends[invitee as usize].insert(inviter);
            }
            Action::RejectFriendRequest { inviter, invitee } => answer(inviter, invitee),
            Action::ThawFriendship { member, friend } => {
                self.friends[member as usize].remove(&friend);
                self.friends[friend as usize].remove(&member);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_sum_to_one_hundred_with_their_read_shares() {
        for (name, reads) in [
            ("90", 90.0),
            ("99%", 99.0),
            ("99.9", 99.9),
            ("10:1", 90.0),
            ("100:1", 99.0),
            ("1000:1", 99.9),
        ] {
            let mix = Mix::named(name).unwrap();
            let total: f64 = mix.percent.iter().sum();
            assert!((total - 100.0).abs() < 1e-9, "{name}: {total}");
            assert!((mix.read_percent() - reads).abs() < 1e-9, "{name}");
        }
        assert!(Mix::named("50").is_err());
        assert_eq!(Mix::named("99%").unwrap().name, "99");
    }

    #[test]
    fn dzipfian_puts_about_seventy_percent_of_picks_on_thirty_percent_of_members() {
        let chooser = MemberChooser::new(Popularity::BG, 1000);
        let mut rng = Rng::new(3);
        let n = 100_000;
        let top = (0..n).filter(|_| chooser.next(&mut rng) < 300).count();
        // The weights of ranks 1..=300 over those of 1..=1000 (0.3^0.27 = 0.72 in the
        // continuous limit, 001 §3's "30% ... 70%").
        let weight = |ranks: u32| (1..=ranks).map(|i| f64::from(i).powf(-0.73)).sum::<f64>();
        let expected = weight(300) / weight(1000);
        let share = top as f64 / n as f64;
        assert!(
            (share - expected).abs() < 0.01,
            "{share} against {expected}"
        );
        assert!((0.65..0.75).contains(&expected));
        let uniform = MemberChooser::new(Popularity::Uniform, 1000);
        let top = (0..n).filter(|_| uniform.next(&mut rng) < 300).count();
        assert!((0.29..0.31).contains(&(top as f64 / n as f64)));
        assert_eq!(
            Popularity::parse("dzipfian:0.5").unwrap(),
            Popularity::Zipfian { mean: 0.5 }
        );
        assert!(Popularity::parse("dzipfian:1.5").is_err());
    }

    #[test]
    fn picked_writes_are_valid_and_lock_their_members() {
        let g = GraphParams::default();
        let model = Model::new(&g);
        let chooser = MemberChooser::new(Popularity::BG, g.members);
        let mut rng = Rng::new(7);
        let thaw = model
            .pick(ActionKind::ThawFriendship, &chooser, &mut rng)
            .unwrap();
        let (x, y) = thaw.pair().unwrap();
        assert!(model.lock().friends[x as usize].contains(&y));
        assert!(model.lock().busy[x as usize] && model.lock().busy[y as usize]);
        model.finish(&thaw, Outcome::Committed);
        assert!(!model.lock().friends[x as usize].contains(&y));
        assert!(!model.lock().busy[x as usize]);

        let accept = model
            .pick(ActionKind::AcceptFriendRequest, &chooser, &mut rng)
            .unwrap();
        let Action::AcceptFriendRequest { inviter, invitee } = accept else {
            panic!("{accept:?}");
        };
        assert_eq!(
            model.lock().invited_by[invitee as usize].last(),
            Some(&inviter)
        );
        model.finish(&accept, Outcome::Unknown);
        assert_eq!(model.frozen(), 2);
        for _ in 0..200 {
            if let Some(a) = model.pick(ActionKind::InviteFriend, &chooser, &mut rng) {
                let (a1, a2) = a.pair().unwrap();
                assert!(![a1, a2].contains(&invitee) && ![a1, a2].contains(&inviter));
                model.finish(&a, Outcome::RolledBack);
            }
        }
    }

    #[test]
    fn a_model_owning_some_members_writes_only_pairs_of_them() {
        let g = GraphParams::default();
        let owned = 500..1000;
        let model = Model::owning(&g, owned.clone());
        let chooser = MemberChooser::new(Popularity::BG, g.members);
        let mut rng = Rng::new(11);
        let mut writes = 0;
        for kind in ActionKind::ALL.into_iter().filter(|k| k.is_write()) {
            for _ in 0..100 {
                if let Some(action) = model.pick(kind, &chooser, &mut rng) {
                    let (a, b) = action.pair().unwrap();
                    assert!(owned.contains(&a) && owned.contains(&b), "{action:?}");
                    model.finish(&action, Outcome::Committed);
                    writes += 1;
                }
            }
        }
        assert!(writes > 100, "{writes} writes");
        // Reads go to any member.
        let reads = (0..200)
            .filter_map(|_| model.pick(ActionKind::ListFriends, &chooser, &mut rng))
            .filter(|a| matches!(a, Action::ListFriends { member } if *member < 500))
            .count();
        assert!(reads > 0);
    }
}
