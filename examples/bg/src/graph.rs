//! The social graph of BG (001 §3): its shape, the seven actions of 001 Table 1, the mixes of
//! 000 Table 3.5, and the in-memory model of relationships that keeps the write actions valid.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;

use anyhow::{bail, Result};

/// The shape of the loaded graph: `members` members on a ring lattice where member `i` is a
/// confirmed friend of `i±1 ..= i±friends/2` (mod `members`), as BG loads it, plus `pending`
/// invitations received by each member, from `i + friends/2 + 1 ..= i + friends/2 + pending`,
/// so that View Friend Requests, Accept and Reject have work from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphParams {
    /// Number of members (ids `0..members`).
    pub members: u32,
    /// Confirmed friends per member (φ in BG; even).
    pub friends: u32,
    /// Pending invitations received (and sent) per member.
    pub pending: u32,
}

impl Default for GraphParams {
    fn default() -> Self {
        GraphParams {
            members: 1000,
            friends: 10,
            pending: 5,
        }
    }
}

impl GraphParams {
    /// Checks that the lattice fits: the friends and the inviters of a member are distinct
    /// members other than itself.
    pub fn check(&self) -> Result<()> {
        if self.friends % 2 != 0 {
            bail!("--friends must be even (φ/2 friends on each side of the ring)");
        }
        let needed = u64::from(self.friends) + 2 * u64::from(self.pending) + 2;
        if u64::from(self.members) < needed {
            bail!(
                "--members must be at least friends + 2*pending + 2 = {needed} for this graph \
                 (got {})",
                self.members
            );
        }
        Ok(())
    }

    /// Confirmed friendships, each once as `(i, j)`.
    pub fn confirmed(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.members)
            .flat_map(move |i| (1..=self.friends / 2).map(move |k| (i, (i + k) % self.members)))
    }

    /// Pending invitations, as `(inviter, invitee)`.
    pub fn invitations(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.members).flat_map(move |invitee| {
            (1..=self.pending).map(move |k| {
                let inviter = (invitee + self.friends / 2 + k) % self.members;
                (inviter, invitee)
            })
        })
    }

    /// A member's count right after loading (every member starts alike).
    pub fn initial(&self, count: Count) -> i64 {
        match count {
            Count::Friends => i64::from(self.friends),
            Count::Pending => i64::from(self.pending),
        }
    }
}

/// The ten profile attributes of a member (short strings, as BG's `users` table without images).
pub const ATTRIBUTES: [&str; 10] = [
    "username",
    "firstname",
    "lastname",
    "gender",
    "dob",
    "jdate",
    "ldate",
    "address",
    "email",
    "tel",
];

/// The attribute values of member `id`, in the order of [`ATTRIBUTES`]; deterministic.
pub fn attribute_values(id: u32) -> [String; 10] {
    const FIRST: [&str; 8] = ["Ada", "Bo", "Cy", "Di", "Ed", "Fay", "Gus", "Hal"];
    const LAST: [&str; 8] = [
        "Ames", "Bell", "Chan", "Diaz", "Egan", "Ford", "Gray", "Hart",
    ];
    [
        format!("user{id}"),
        FIRST[id as usize % FIRST.len()].to_string(),
        LAST[(id as usize / FIRST.len()) % LAST.len()].to_string(),
        if id % 2 == 0 { "F" } else { "M" }.to_string(),
        format!(
            "19{:02}-{:02}-{:02}",
            50 + id % 50,
            1 + id % 12,
            1 + id % 28
        ),
        format!("2012-{:02}-{:02}", 1 + id % 12, 1 + id % 28),
        format!("2024-{:02}-{:02}", 1 + id % 12, 1 + id % 28),
        format!("{} Main St, Los Angeles", 100 + id),
        format!("user{id}@example.com"),
        format!("555-{:04}", id % 10_000),
    ]
}

/// A member's profile as the read actions show it. Counts are `None` where the action's key
/// layout does not read them.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The member id.
    pub id: u32,
    /// The attributes, by name.
    pub attributes: serde_json::Map<String, serde_json::Value>,
    /// Number of confirmed friends, if read.
    pub friendcount: Option<i64>,
    /// Number of pending invitations received, if read.
    pub pendingcount: Option<i64>,
}

impl Profile {
    /// The counts this profile shows, as reads to validate.
    pub fn count_reads(&self) -> impl Iterator<Item = CountRead> + '_ {
        let friends = self.friendcount.map(|value| CountRead {
            member: self.id,
            count: Count::Friends,
            value,
        });
        let pending = self.pendingcount.map(|value| CountRead {
            member: self.id,
            count: Count::Pending,
            value,
        });
        friends.into_iter().chain(pending)
    }
}

/// One of a member's two counts that BG validates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Count {
    /// Confirmed friends.
    Friends,
    /// Pending invitations received.
    Pending,
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Count::Friends => "friendcount",
            Count::Pending => "pendingcount",
        })
    }
}

/// A count an action read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountRead {
    /// Whose count.
    pub member: u32,
    /// Which count.
    pub count: Count,
    /// The value shown.
    pub value: i64,
}

/// A change a write action makes to a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountChange {
    /// Whose count.
    pub member: u32,
    /// Which count.
    pub count: Count,
    /// By how much.
    pub delta: i64,
}

/// The seven core actions of BG (001 Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    /// View Profile (VP).
    ViewProfile,
    /// List Friends (LF): ten friends' profiles.
    ListFriends,
    /// View Friend Requests (VFR): ten inviters' profiles.
    ViewFriendRequests,
    /// Invite Friend (IF).
    InviteFriend,
    /// Accept Friend Request (AFR).
    AcceptFriendRequest,
    /// Reject Friend Request (RFR).
    RejectFriendRequest,
    /// Thaw Friendship (TF).
    ThawFriendship,
}

impl ActionKind {
    /// Every action, reads first, in the order of the papers' tables.
    pub const ALL: [ActionKind; 7] = [
        ActionKind::ViewProfile,
        ActionKind::ListFriends,
        ActionKind::ViewFriendRequests,
        ActionKind::InviteFriend,
        ActionKind::AcceptFriendRequest,
        ActionKind::RejectFriendRequest,
        ActionKind::ThawFriendship,
    ];

    /// The action's name in the papers.
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::ViewProfile => "View Profile",
            ActionKind::ListFriends => "List Friends",
            ActionKind::ViewFriendRequests => "View Friend Requests",
            ActionKind::InviteFriend => "Invite Friend",
            ActionKind::AcceptFriendRequest => "Accept Friend Request",
            ActionKind::RejectFriendRequest => "Reject Friend Request",
            ActionKind::ThawFriendship => "Thaw Friendship",
        }
    }

    /// Whether the action writes.
    pub fn is_write(self) -> bool {
        !matches!(
            self,
            ActionKind::ViewProfile | ActionKind::ListFriends | ActionKind::ViewFriendRequests
        )
    }

    fn index(self) -> usize {
        ActionKind::ALL
            .iter()
            .position(|k| *k == self)
            .expect("every kind is in ALL")
    }
}

/// An action with its targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `requester` views `owner`'s profile; a self-view also shows the pending count.
    ViewProfile {
        /// Who looks.
        requester: u32,
        /// Whose profile.
        owner: u32,
    },
    /// The profiles of up to ten of `member`'s friends.
    ListFriends {
        /// Whose friends.
        member: u32,
    },
    /// The profiles of up to ten members who invited `member`.
    ViewFriendRequests {
        /// Whose invitations.
        member: u32,
    },
    /// `inviter` invites `invitee`.
    InviteFriend {
        /// Who invites.
        inviter: u32,
        /// Who is invited.
        invitee: u32,
    },
    /// `invitee` accepts `inviter`'s invitation.
    AcceptFriendRequest {
        /// Who invited.
        inviter: u32,
        /// Who accepts.
        invitee: u32,
    },
    /// `invitee` rejects `inviter`'s invitation.
    RejectFriendRequest {
        /// Who invited.
        inviter: u32,
        /// Who rejects.
        invitee: u32,
    },
    /// `member` ends the friendship with `friend`.
    ThawFriendship {
        /// Who thaws.
        member: u32,
        /// The former friend.
        friend: u32,
    },
}

impl Action {
    /// The action's kind.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::ViewProfile { .. } => ActionKind::ViewProfile,
            Action::ListFriends { .. } => ActionKind::ListFriends,
            Action::ViewFriendRequests { .. } => ActionKind::ViewFriendRequests,
            Action::InviteFriend { .. } => ActionKind::InviteFriend,
            Action::AcceptFriendRequest { .. } => ActionKind::AcceptFriendRequest,
            Action::RejectFriendRequest { .. } => ActionKind::RejectFriendRequest,
            Action::ThawFriendship { .. } => ActionKind::ThawFriendship,
        }
    }

    /// The two members a write action changes (`None` for reads).
    pub fn pair(&self) -> Option<(u32, u32)> {
        match *self {
            Action::InviteFriend { inviter, invitee }
            | Action::AcceptFriendRequest { inviter, invitee }
            | Action::RejectFriendRequest { inviter, invitee } => Some((inviter, invitee)),
            Action::ThawFriendship { member, friend } => Some((member, friend)),
            _ => None,
        }
    }

    /// What a write action does to the counts (empty for reads).
    pub fn count_changes(&self) -> Vec<CountChange> {
        let change = |member, count, delta| CountChange {
            member,
            count,
            delta,
        };
        match *self {
            Action::InviteFriend { invitee, .. } => vec![change(invitee, Count::Pending, 1)],
            Action::AcceptFriendRequest { inviter, invitee } => vec![
                change(invitee, Count::Pending, -1),
                change(invitee, Count::Friends, 1),
                change(inviter, Count::Friends, 1),
            ],
            Action::RejectFriendRequest { invitee, .. } => {
                vec![change(invitee, Count::Pending, -1)]
            }
            Action::ThawFriendship { member, friend } => vec![
                change(member, Count::Friends, -1),
                change(friend, Count::Friends, -1),
            ],
            _ => Vec::new(),
        }
    }
}

/// A mix of actions: 000 Table 3.5.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// Percent of each action, in the order of [`ActionKind::ALL`].
    pub percent: [f64; 7],
}

impl Mix {
    /// The mixes of 000 Table 3.5 by their read percentage: `90`, `99` or `99.9`.
    pub fn parse(name: &str) -> Option<Mix> {
        let percent = match name {
            "90" => [80.0, 5.0, 5.0, 4.0, 2.0, 2.0, 2.0],
            "99" => [89.0, 5.0, 5.0, 0.4, 0.2, 0.2, 0.2],
            "99.9" => [89.9, 5.0, 5.0, 0.04, 0.02, 0.02, 0.02],
            _ => return None,
        };
        Some(Mix { percent })
    }

    /// The percentage of read actions (90, 99 or 99.9 for the mixes of 000 Table 3.5).
    pub fn reads(&self) -> f64 {
        let reads: f64 = self.percent[..3].iter().sum();
        (reads * 1000.0).round() / 1000.0
    }

    /// An action kind drawn by the mix's weights.
    pub fn pick(&self, rng: &mut Rng) -> ActionKind {
        let total: f64 = self.percent.iter().sum();
        let mut x = rng.unit() * total;
        for (kind, p) in ActionKind::ALL.iter().zip(self.percent) {
            if x < p {
                return *kind;
            }
            x -= p;
        }
        ActionKind::ViewProfile
    }
}

/// A small, fast, seedable generator (SplitMix64): workloads need spread, not secrecy.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A random element of a set, if it has any.
    fn element(&mut self, set: &BTreeSet<u32>) -> Option<u32> {
        if set.is_empty() {
            return None;
        }
        set.iter()
            .nth(self.below(set.len() as u32) as usize)
            .copied()
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
pub struct Model {
    members: u32,
    state: Mutex<ModelState>,
}

struct ModelState {
    friends: Vec<BTreeSet<u32>>,
    /// Inviters of each member (pending invitations received).
    invited_by: Vec<BTreeSet<u32>>,
    /// Invitees of each member (pending invitations sent).
    invited: Vec<BTreeSet<u32>>,
    busy: Vec<bool>,
    /// Members whose state is unknown after a failed write.
    frozen: Vec<bool>,
}

/// How many members a picker tries before it reports that it found no valid target.
const PICK_ATTEMPTS: usize = 64;

impl Model {
    /// The model of a freshly loaded graph.
    pub fn new(graph: &GraphParams) -> Model {
        let n = graph.members as usize;
        let mut state = ModelState {
            friends: vec![BTreeSet::new(); n],
            invited_by: vec![BTreeSet::new(); n],
            invited: vec![BTreeSet::new(); n],
            busy: vec![false; n],
            frozen: vec![false; n],
        };
        for (i, j) in graph.confirmed() {
            state.friends[i as usize].insert(j);
            state.friends[j as usize].insert(i);
        }
        for (inviter, invitee) in graph.invitations() {
            state.invited_by[invitee as usize].insert(inviter);
            state.invited[inviter as usize].insert(invitee);
        }
        Model {
            members: graph.members,
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An action of this kind with valid targets. A write action's two members are marked busy
    /// until [`Model::finish`]; `None` if no valid target was found in a few tries.
    pub fn pick(&self, kind: ActionKind, rng: &mut Rng) -> Option<Action> {
        let m = self.members;
        match kind {
            ActionKind::ViewProfile => {
                let owner = rng.below(m);
                // Half the views are of one's own profile, which also shows the pending count.
                let requester = if rng.below(2) == 0 {
                    owner
                } else {
                    rng.below(m)
                };
                return Some(Action::ViewProfile { requester, owner });
            }
            ActionKind::ListFriends => {
                return Some(Action::ListFriends {
                    member: rng.below(m),
                })
            }
            ActionKind::ViewFriendRequests => {
                return Some(Action::ViewFriendRequests {
                    member: rng.below(m),
                })
            }
            _ => {}
        }
        let mut state = self.lock();
        for _ in 0..PICK_ATTEMPTS {
            let me = rng.below(m);
            if !state.free(me) {
                continue;
            }
            let action = match kind {
                ActionKind::InviteFriend => {
                    let other = rng.below(m);
                    if other == me
                        || state.friends[me as usize].contains(&other)
                        || state.invited[me as usize].contains(&other)
                        || state.invited_by[me as usize].contains(&other)
                    {
                        continue;
                    }
                    Action::InviteFriend {
                        inviter: me,
                        invitee: other,
                    }
                }
                ActionKind::AcceptFriendRequest | ActionKind::RejectFriendRequest => {
                    let Some(inviter) = rng.element(&state.invited_by[me as usize]) else {
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
                    let Some(friend) = rng.element(&state.friends[me as usize]) else {
                        continue;
                    };
                    Action::ThawFriendship { member: me, friend }
                }
            };
            let (a, b) = action.pair().expect("a write action");
            if !state.free(a) || !state.free(b) {
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
}

impl ModelState {
    fn free(&self, member: u32) -> bool {
        !self.busy[member as usize] && !self.frozen[member as usize]
    }

    fn apply(&mut self, action: &Action) {
        match *action {
            Action::InviteFriend { inviter, invitee } => {
                self.invited[inviter as usize].insert(invitee);
                self.invited_by[invitee as usize].insert(inviter);
            }
            Action::AcceptFriendRequest { inviter, invitee } => {
                self.invited[inviter as usize].remove(&invitee);
                self.invited_by[invitee as usize].remove(&inviter);
                self.friends[inviter as usize].insert(invitee);
                self.friends[invitee as usize].insert(inviter);
            }
            Action::RejectFriendRequest { inviter, invitee } => {
                self.invited[inviter as usize].remove(&invitee);
                self.invited_by[invitee as usize].remove(&inviter);
            }
            Action::ThawFriendship { member, friend } => {
                self.friends[member as usize].remove(&friend);
                self.friends[friend as usize].remove(&member);
            }
            _ => {}
        }
    }
}

/// Per-kind counters, indexed by [`ActionKind`].
#[derive(Clone, Debug, Default)]
pub struct PerKind<T>(pub [T; 7]);

impl<T> PerKind<T> {
    /// The entry of one kind.
    pub fn get(&self, kind: ActionKind) -> &T {
        &self.0[kind.index()]
    }

    /// The entry of one kind, to change.
    pub fn get_mut(&mut self, kind: ActionKind) -> &mut T {
        &mut self.0[kind.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lattice_has_the_stated_degrees() {
        let g = GraphParams::default();
        g.check().unwrap();
        let model = Model::new(&g);
        let state = model.lock();
        for i in 0..g.members as usize {
            assert_eq!(state.friends[i].len(), g.friends as usize);
            assert_eq!(state.invited_by[i].len(), g.pending as usize);
            assert_eq!(state.invited[i].len(), g.pending as usize);
            assert!(state.friends[i].is_disjoint(&state.invited_by[i]));
            assert!(state.friends[i].is_disjoint(&state.invited[i]));
        }
    }

    #[test]
    fn picked_writes_are_valid_and_lock_their_members() {
        let g = GraphParams::default();
        let model = Model::new(&g);
        let mut rng = Rng::new(7);
        let a = model.pick(ActionKind::ThawFriendship, &mut rng).unwrap();
        let (x, y) = a.pair().unwrap();
        assert!(model.lock().friends[x as usize].contains(&y));
        assert!(model.lock().busy[x as usize] && model.lock().busy[y as usize]);
        model.finish(&a, Outcome::Committed);
        assert!(!model.lock().friends[x as usize].contains(&y));
        assert!(!model.lock().busy[x as usize]);
    }

    #[test]
    fn mixes_sum_to_one_hundred() {
        for name in ["90", "99", "99.9"] {
            let total: f64 = Mix::parse(name).unwrap().percent.iter().sum();
            assert!((total - 100.0).abs() < 1e-9, "{name}: {total}");
        }
        assert!(Mix::parse("50").is_none());
    }
}
