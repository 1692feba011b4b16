//! The social graph of BG (001 §3): its shape, the members' profiles and counts, and the seven
//! actions of 001 Table 1 with what each write does to the counts.

use std::fmt;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

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
/// layout does not read them. The attributes are a map by name, or as a layout decodes them
/// (the document layout: the ten values in the order of [`ATTRIBUTES`], borrowed from the text).
#[derive(Clone, Debug, PartialEq)]
pub struct Profile<A = serde_json::Map<String, serde_json::Value>> {
    /// The member id.
    pub id: u32,
    /// The attributes.
    pub attributes: A,
    /// Number of confirmed friends, if read.
    pub friendcount: Option<i64>,
    /// Number of pending invitations received, if read.
    pub pendingcount: Option<i64>,
}

impl<A> Profile<A> {
    /// The profile as View Profile shows it to `requester`: the pending count only to the member
    /// itself (001 §3).
    pub fn seen_by(mut self, requester: u32) -> Profile<A> {
        if requester != self.id {
            self.pendingcount = None;
        }
        self
    }

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

impl Count {
    /// Both counts.
    pub const BOTH: [Count; 2] = [Count::Friends, Count::Pending];
}

/// A member's two counts, as the data store holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Confirmed friends.
    pub friends: i64,
    /// Pending invitations received.
    pub pending: i64,
}

impl Counts {
    /// One of the two.
    pub fn get(&self, count: Count) -> i64 {
        match count {
            Count::Friends => self.friends,
            Count::Pending => self.pending,
        }
    }
}

/// A count an action read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

    /// BG's abbreviations, in the order of [`ActionKind::ALL`].
    pub const ABBREVIATIONS: [&'static str; 7] = ["VP", "LF", "VFR", "IF", "AFR", "RFR", "TF"];

    /// BG's abbreviation (VP, LF, VFR, IF, AFR, RFR, TF).
    pub fn abbreviation(self) -> &'static str {
        ActionKind::ABBREVIATIONS[self.index()]
    }

    /// The kind's position in [`ActionKind::ALL`], to index per-kind tables.
    pub fn index(self) -> usize {
        self as usize
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_lattice_has_the_stated_degrees() {
        let g = GraphParams::default();
        g.check().unwrap();
        let n = g.members as usize;
        let mut friends = vec![BTreeSet::new(); n];
        let mut inviters = vec![BTreeSet::new(); n];
        let mut invitees = vec![BTreeSet::new(); n];
        for (i, j) in g.confirmed() {
            assert!(friends[i as usize].insert(j) && friends[j as usize].insert(i));
        }
        for (inviter, invitee) in g.invitations() {
            inviters[invitee as usize].insert(inviter);
            invitees[inviter as usize].insert(invitee);
        }
        for i in 0..n {
            assert_eq!(friends[i].len(), g.friends as usize);
            assert_eq!(inviters[i].len(), g.pending as usize);
            assert_eq!(invitees[i].len(), g.pending as usize);
            assert!(friends[i].is_disjoint(&inviters[i]));
            assert!(friends[i].is_disjoint(&invitees[i]));
            assert!(!friends[i].contains(&(i as u32)) && !inviters[i].contains(&(i as u32)));
        }
        assert!(GraphParams { members: 20, ..g }.check().is_err());
        assert!(GraphParams { friends: 3, ..g }.check().is_err());
    }

    #[test]
    fn kinds_index_all_and_writes_change_counts() {
        for (i, kind) in ActionKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i);
        }
        let accept = Action::AcceptFriendRequest {
            inviter: 1,
            invitee: 2,
        };
        let changes = accept.count_changes();
        let total = |member, count| -> i64 {
            changes
                .iter()
                .filter(|c| c.member == member && c.count == count)
                .map(|c| c.delta)
                .sum()
        };
        assert_eq!(total(2, Count::Pending), -1);
        assert_eq!(total(2, Count::Friends), 1);
        assert_eq!(total(1, Count::Friends), 1);
        assert!(Action::ListFriends { member: 3 }.count_changes().is_empty());
        assert_eq!(accept.pair(), Some((1, 2)));
    }
}
