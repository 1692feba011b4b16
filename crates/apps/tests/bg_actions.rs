//! The seven actions, one after another, under every layout and policy on SQLite with CMIs
//! started in the test: each read shows what the writes before it did, and the data store ends
//! with the same counts (under write-back, once the buffered writes are drained).

use std::sync::Arc;
use std::time::Duration;

use cads::store::StoreOptions;
use cads::{Cads, Config, Policy, Workers};
use cads_apps::bg::{layout, Action, Count, CountRead, Counts, GraphParams, LayoutKind};
use cads_testkit::{Cmis, ScratchDir};

/// Few enough friends and invitations that the lists (ten entries) show them all.
const GRAPH: GraphParams = GraphParams {
    members: 50,
    friends: 4,
    pending: 3,
};

/// The value of one count among those an action read.
fn shown(reads: &[CountRead], member: u32, count: Count) -> Option<i64> {
    reads
        .iter()
        .find(|r| r.member == member && r.count == count)
        .map(|r| r.value)
}

fn script(kind: LayoutKind, policy: Policy) {
    let what = format!("{kind} {}", policy.name());
    let dir = ScratchDir::new("bg-actions");
    let store = dir.sqlite(&StoreOptions::default());
    let mut cmis = (policy != Policy::DataStoreOnly).then(|| Cmis::start(2, policy.cmi_mode()));
    let addrs = cmis.as_ref().map_or_else(Vec::new, |c| c.addrs().to_vec());
    let cads = Arc::new(Cads::connect(store, &addrs, policy, Config::default()));
    let bg = layout(kind, &cads);
    bg.load(&cads, &GRAPH).unwrap();
    let act = |action: Action| {
        bg.perform(&cads, &action)
            .unwrap_or_else(|e| panic!("{what}: {action:?}: {e}"))
    };
    let view = |member| {
        act(Action::ViewProfile {
            requester: member,
            owner: member,
        })
    };

    let me = 2;
    // Member 30 is neither a friend of member 2 nor an inviter or invitee; members 5, 6 and 7
    // invited 2.
    let (stranger, inviter) = (30, 5);
    assert_eq!(shown(&view(me), me, Count::Pending), Some(3), "{what}");
    act(Action::InviteFriend {
        inviter: stranger,
        invitee: me,
    });
    assert_eq!(shown(&view(me), me, Count::Pending), Some(4), "{what}");
    act(Action::AcceptFriendRequest {
        inviter: stranger,
        invitee: me,
    });
    let after = view(me);
    assert_eq!(shown(&after, me, Count::Friends), Some(5), "{what}");
    assert_eq!(shown(&after, me, Count::Pending), Some(3), "{what}");
    let other = act(Action::ViewProfile {
        requester: me,
        owner: stranger,
    });
    assert_eq!(shown(&other, stranger, Count::Friends), Some(5), "{what}");
    assert_eq!(shown(&other, stranger, Count::Pending), None, "{what}");
    act(Action::RejectFriendRequest {
        inviter,
        invitee: me,
    });
    // Listed profiles show their counts, except in 001's Table 5 layout (SQL, write-through).
    let lists_show_counts = !(kind == LayoutKind::Sql && policy == Policy::WriteThrough);
    let requests = act(Action::ViewFriendRequests { member: me });
    assert_eq!(shown(&requests, inviter, Count::Friends), None, "{what}");
    assert_eq!(
        shown(&requests, inviter + 1, Count::Friends).is_some(),
        lists_show_counts,
        "{what}"
    );
    let friends = act(Action::ListFriends { member: me });
    assert_eq!(
        shown(&friends, stranger, Count::Friends).is_some(),
        lists_show_counts,
        "{what}"
    );
    act(Action::ThawFriendship {
        member: me,
        friend: stranger,
    });
    let friends = act(Action::ListFriends { member: me });
    assert_eq!(shown(&friends, stranger, Count::Friends), None, "{what}");
    assert_eq!(shown(&view(me), me, Count::Pending), Some(2), "{what}");

    if policy == Policy::WriteBack {
        let workers = Workers::start(cads.clone(), 1);
        workers.drain(Duration::from_secs(30)).unwrap();
        workers.stop();
    }
    let stored = bg.stored_counts(cads.store().as_ref(), &GRAPH).unwrap();
    let loaded = Counts {
        friends: 4,
        pending: 3,
    };
    let expected = |member: u32| match member {
        2 => Counts {
            friends: 4,
            pending: 2,
        },
        _ => loaded,
    };
    for (member, counts) in stored.iter().enumerate() {
        assert_eq!(*counts, expected(member as u32), "{what}: member {member}");
    }
    drop(cads);
    if let Some(cmis) = &mut cmis {
        cmis.stop();
    }
}

#[test]
fn documents_under_every_policy() {
    for policy in [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
        Policy::WriteBack,
    ] {
        script(LayoutKind::Documents, policy);
    }
}

#[test]
fn sql_with_001s_key_layouts() {
    for policy in [
        Policy::DataStoreOnly,
        Policy::WriteAround,
        Policy::WriteThrough,
    ] {
        script(LayoutKind::Sql, policy);
    }
}
