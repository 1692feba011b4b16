//! BG over SQL tables with raw [`CacheStore`]s and the key layouts of 001 §3.
//!
//! Tables (as in BG's relational schema): `bg_users(userid, <10 attributes>, friendcount,
//! pendingcount)` and `bg_friendship(inviterid, inviteeid, status)`, where a pending invitation
//! is one row with status 1 and a friendship two rows, one each way, with status 2.
//!
//! Keys, for member `i`:
//!
//! | key | value | layout |
//! | --- | --- | --- |
//! | `iProfile` | JSON of the attributes, with `friendcount` and `pendingcount` in [`KeyLayout::Profile`] | both |
//! | `iFrdList` | the friends' ids, each followed by a comma (`"3,4,17,"`) | both |
//! | `iPndList` | the inviters' ids, same form | both |
//! | `iFrdCnt`, `iPndCnt` | the counts in decimal | [`KeyLayout::Counters`] |
//!
//! [`KeyLayout::Profile`] is 001 Tables 2-3: reads as Table 2, and a write deletes the keys of
//! Table 3 (write-around); under SAS's write-through it is Table 4, the same keys changed in
//! place: the counts inside the profile by a read-modify-write. [`KeyLayout::Counters`] is 001
//! Tables 5-6, for write-through on CS: the counts have keys of their own, changed with
//! `CacheChange::Incr`. In both, lists grow with `CacheChange::Append` and shrink with a
//! read-modify-write (`CacheChange::Modify`).

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use anyhow::{bail, Context, Result};
use cads::store::{DataStore, Isolation, Row, SqlValue, StoreError};
use cads::{CacheChange, CacheStore, Cads, StoreTx};
use serde_json::{Map, Value};

use super::{same_json, Entry, Layout, LIST_LIMIT};
use crate::bg::graph::{
    attribute_values, Action, Count, CountRead, Counts, GraphParams, Profile, ATTRIBUTES,
};

const PROFILE: &str = "Profile";
const FRD_LIST: &str = "FrdList";
const PND_LIST: &str = "PndList";
const FRD_CNT: &str = "FrdCnt";
const PND_CNT: &str = "PndCnt";

/// Rows per INSERT statement while loading.
const LOAD_ROWS: usize = 100;

/// Which of 001's key layouts the cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLayout {
    /// 001 Tables 2-3: the counts live in `iProfile` (write-around, and the data store alone);
    /// Table 4 under SAS's write-through.
    Profile,
    /// 001 Tables 5-6: the counts have keys of their own (write-through).
    Counters,
}

/// The cache key of one of member `id`'s values (`17Profile`).
pub fn key(id: u32, suffix: &str) -> Vec<u8> {
    format!("{id}{suffix}").into_bytes()
}

/// The member and suffix of a key made by [`key`].
fn parse_key(key: &[u8]) -> Option<(u32, &str)> {
    let text = std::str::from_utf8(key).ok()?;
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    Some((text[..split].parse().ok()?, &text[split..]))
}

/// A list value: each id followed by a comma, so that `Append` adds one.
fn encode_list(ids: &[u32]) -> Vec<u8> {
    ids.iter()
        .map(|id| format!("{id},"))
        .collect::<String>()
        .into_bytes()
}

fn decode_list(bytes: &[u8]) -> Option<Vec<u32>> {
    std::str::from_utf8(bytes)
        .ok()?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

fn decode_count(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// The SELECT list of a profile: the attributes, then the two counts.
fn profile_columns() -> String {
    let mut cols: Vec<&str> = ATTRIBUTES.to_vec();
    cols.extend(["friendcount", "pendingcount"]);
    cols.join(", ")
}

/// A profile from a row of `id, <attributes>, friendcount, pendingcount` starting at column
/// `first` (the attributes).
fn profile_from_row(id: u32, row: &Row, first: usize) -> Result<Profile, StoreError> {
    let mut attributes = Map::new();
    for (i, name) in ATTRIBUTES.iter().enumerate() {
        attributes.insert(name.to_string(), Value::String(row.get(first + i)?));
    }
    Ok(Profile {
        id,
        attributes,
        friendcount: Some(row.get(first + ATTRIBUTES.len())?),
        pendingcount: Some(row.get(first + ATTRIBUTES.len() + 1)?),
    })
}

/// The JSON a profile is cached as: attributes, plus the counts in the Profile layout.
fn encode_profile(layout: KeyLayout, p: &Profile) -> Vec<u8> {
    let mut obj = p.attributes.clone();
    if layout == KeyLayout::Profile {
        obj.insert("friendcount".into(), p.friendcount.into());
        obj.insert("pendingcount".into(), p.pendingcount.into());
    }
    serde_json::to_vec(&obj).expect("a JSON map serializes")
}

fn decode_profile(layout: KeyLayout, id: u32, bytes: &[u8]) -> Option<Profile> {
    let mut attributes: Map<String, Value> = serde_json::from_slice(bytes).ok()?;
    let (friendcount, pendingcount) = if layout == KeyLayout::Profile {
        (
            Some(attributes.remove("friendcount")?.as_i64()?),
            Some(attributes.remove("pendingcount")?.as_i64()?),
        )
    } else {
        (None, None)
    };
    Some(Profile {
        id,
        attributes,
        friendcount,
        pendingcount,
    })
}

/// View Profile's read (001 Table 2, or Table 5: profile, friend count and, on a self-view, the
/// pending count).
pub struct ProfileRead(pub KeyLayout);

/// Which member, and whether the pending count is shown (a self-view).
#[derive(Clone, Copy, Debug)]
pub struct ProfileQuery {
    /// Whose profile.
    pub member: u32,
    /// Whether the pending count is shown.
    pub with_pending: bool,
}

impl CacheStore for ProfileRead {
    type Query = ProfileQuery;
    type Write = Infallible;
    type Output = Profile;

    fn keys_read(&self, q: &ProfileQuery) -> Vec<Vec<u8>> {
        let mut keys = vec![key(q.member, PROFILE)];
        if self.0 == KeyLayout::Counters {
            keys.push(key(q.member, FRD_CNT));
            if q.with_pending {
                keys.push(key(q.member, PND_CNT));
            }
        }
        keys
    }

    fn result_from_cache(&self, q: &ProfileQuery, values: &[Vec<u8>]) -> Option<Profile> {
        let mut profile = decode_profile(self.0, q.member, values.first()?)?;
        if self.0 == KeyLayout::Counters {
            profile.friendcount = Some(decode_count(values.get(1)?)?);
            if q.with_pending {
                profile.pendingcount = Some(decode_count(values.get(2)?)?);
            }
        }
        Some(profile)
    }

    fn query_store(&self, q: &ProfileQuery, tx: &mut StoreTx<'_>) -> Result<Profile, StoreError> {
        let sql = format!(
            "SELECT {} FROM bg_users WHERE userid = ?",
            profile_columns()
        );
        let rows = tx.read_sql()?.query(&sql, &[q.member.into()])?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Invalid(format!("no member {}", q.member)))?;
        let mut profile = profile_from_row(q.member, row, 0)?;
        if self.0 == KeyLayout::Counters && !q.with_pending {
            profile.pendingcount = None;
        }
        Ok(profile)
    }

    fn entries(&self, q: &ProfileQuery, p: &Profile) -> Vec<Entry> {
        let mut entries = vec![(key(q.member, PROFILE), encode_profile(self.0, p))];
        if self.0 == KeyLayout::Counters {
            if let Some(n) = p.friendcount {
                entries.push((key(q.member, FRD_CNT), n.to_string().into_bytes()));
            }
            if let Some(n) = p.pendingcount {
                entries.push((key(q.member, PND_CNT), n.to_string().into_bytes()));
            }
        }
        entries
    }

    cads::read_only!();
}

/// A member's friend list or list of inviters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// Confirmed friends (`iFrdList`).
    Friends,
    /// Members with a pending invitation to this one (`iPndList`).
    Pending,
}

/// The read of `iFrdList` or `iPndList`: all the ids (the action shows ten).
pub struct ListRead;

impl CacheStore for ListRead {
    type Query = (u32, List);
    type Write = Infallible;
    type Output = Vec<u32>;

    fn keys_read(&self, &(member, list): &(u32, List)) -> Vec<Vec<u8>> {
        vec![key(member, list_suffix(list))]
    }

    fn result_from_cache(&self, _: &(u32, List), values: &[Vec<u8>]) -> Option<Vec<u32>> {
        decode_list(values.first()?)
    }

    fn query_store(
        &self,
        &(member, list): &(u32, List),
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<u32>, StoreError> {
        let sql = match list {
            List::Friends => {
                "SELECT inviteeid FROM bg_friendship WHERE inviterid = ? AND status = 2 \
                 ORDER BY inviteeid"
            }
            List::Pending => {
                "SELECT inviterid FROM bg_friendship WHERE inviteeid = ? AND status = 1 \
                 ORDER BY inviterid"
            }
        };
        let rows = tx.read_sql()?.query(sql, &[member.into()])?;
        rows.iter()
            .map(|r| r.get::<i64>(0).map(|v| v as u32))
            .collect()
    }

    fn entries(&self, &(member, list): &(u32, List), ids: &Vec<u32>) -> Vec<Entry> {
        vec![(key(member, list_suffix(list)), encode_list(ids))]
    }

    cads::read_only!();
}

fn list_suffix(list: List) -> &'static str {
    match list {
        List::Friends => FRD_LIST,
        List::Pending => PND_LIST,
    }
}

/// The profiles of several members (`{jProfile}` of 001 Tables 2 and 5) in one cache round trip
/// and, on a miss, one query. In the Counters layout the profiles carry no counts.
pub struct ProfilesRead(pub KeyLayout);

impl CacheStore for ProfilesRead {
    type Query = Vec<u32>;
    type Write = Infallible;
    type Output = Vec<Profile>;

    fn keys_read(&self, ids: &Vec<u32>) -> Vec<Vec<u8>> {
        ids.iter().map(|id| key(*id, PROFILE)).collect()
    }

    fn result_from_cache(&self, ids: &Vec<u32>, values: &[Vec<u8>]) -> Option<Vec<Profile>> {
        ids.iter()
            .zip(values)
            .map(|(id, v)| decode_profile(self.0, *id, v))
            .collect()
    }

    fn query_store(
        &self,
        ids: &Vec<u32>,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Profile>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; ids.len()].join(", ");
        let sql = format!(
            "SELECT userid, {} FROM bg_users WHERE userid IN ({marks})",
            profile_columns()
        );
        let params: Vec<SqlValue> = ids.iter().map(|id| (*id).into()).collect();
        let rows = tx.read_sql()?.query(&sql, &params)?;
        let mut found = BTreeMap::new();
        for row in &rows {
            let id = row.get::<i64>(0)? as u32;
            let mut profile = profile_from_row(id, row, 1)?;
            if self.0 == KeyLayout::Counters {
                profile.friendcount = None;
                profile.pendingcount = None;
            }
            found.insert(id, profile);
        }
        ids.iter()
            .map(|id| {
                found
                    .get(id)
                    .cloned()
                    .ok_or_else(|| StoreError::Invalid(format!("no member {id}")))
            })
            .collect()
    }

    fn entries(&self, _: &Vec<u32>, profiles: &Vec<Profile>) -> Vec<Entry> {
        profiles
            .iter()
            .map(|p| (key(p.id, PROFILE), encode_profile(self.0, p)))
            .collect()
    }

    cads::read_only!();
}

/// BG's four write actions: SQL in the session's transaction, and the keys of 001 Table 3
/// (deleted) or Table 6 (changed in place).
pub struct FriendshipWrite {
    /// The key layout.
    pub layout: KeyLayout,
}

fn expect_rows(n: u64, wanted: u64, what: &str) -> Result<(), StoreError> {
    if n == wanted {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{what}: {n} rows changed, expected {wanted} (the model and the data store disagree)"
        )))
    }
}

impl CacheStore for FriendshipWrite {
    type Query = Infallible;
    type Write = Action;
    type Output = ();

    fn keys_read(&self, q: &Infallible) -> Vec<Vec<u8>> {
        match *q {}
    }

    fn result_from_cache(&self, q: &Infallible, _: &[Vec<u8>]) -> Option<()> {
        match *q {}
    }

    fn query_store(&self, q: &Infallible, _: &mut StoreTx<'_>) -> Result<(), StoreError> {
        match *q {}
    }

    fn entries(&self, q: &Infallible, _: &()) -> Vec<Entry> {
        match *q {}
    }

    fn keys_written(&self, action: &Action) -> Vec<Vec<u8>> {
        let Some((a, b)) = action.pair() else {
            return Vec::new();
        };
        // (member, suffix) of 001 Table 3 (Profile layout) or Table 6 (Counters layout); `a` is
        // the inviter (or the member who thaws), `b` the invitee (or the friend).
        let keys: &[(u32, &str)] = match (self.layout, action) {
            (
                KeyLayout::Profile,
                Action::InviteFriend { .. } | Action::RejectFriendRequest { .. },
            ) => &[(b, PROFILE), (b, PND_LIST)],
            (KeyLayout::Profile, Action::AcceptFriendRequest { .. }) => &[
                (a, PROFILE),
                (a, FRD_LIST),
                (b, PROFILE),
                (b, FRD_LIST),
                (b, PND_LIST),
            ],
            (KeyLayout::Profile, _) => &[(a, PROFILE), (a, FRD_LIST), (b, PROFILE), (b, FRD_LIST)],
            (
                KeyLayout::Counters,
                Action::InviteFriend { .. } | Action::RejectFriendRequest { .. },
            ) => &[(b, PND_LIST), (b, PND_CNT)],
            (KeyLayout::Counters, Action::AcceptFriendRequest { .. }) => &[
                (a, FRD_LIST),
                (a, FRD_CNT),
                (b, FRD_LIST),
                (b, PND_LIST),
                (b, FRD_CNT),
                (b, PND_CNT),
            ],
            (KeyLayout::Counters, _) => &[(a, FRD_LIST), (a, FRD_CNT), (b, FRD_LIST), (b, FRD_CNT)],
        };
        let set: BTreeSet<Vec<u8>> = keys.iter().map(|(m, s)| key(*m, s)).collect();
        set.into_iter().collect()
    }

    fn write_store(&self, action: &Action, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        let tx = tx.sql()?;
        match *action {
            Action::InviteFriend { inviter, invitee } => {
                tx.execute(
                    "INSERT INTO bg_friendship (inviterid, inviteeid, status) VALUES (?, ?, 1)",
                    &[inviter.into(), invitee.into()],
                )?;
                let n = tx.execute(
                    "UPDATE bg_users SET pendingcount = pendingcount + 1 WHERE userid = ?",
                    &[invitee.into()],
                )?;
                expect_rows(n, 1, "invite")
            }
            Action::AcceptFriendRequest { inviter, invitee } => {
                let n = tx.execute(
                    "UPDATE bg_friendship SET status = 2 \
                     WHERE inviterid = ? AND inviteeid = ? AND status = 1",
                    &[inviter.into(), invitee.into()],
                )?;
                expect_rows(n, 1, "accept")?;
                tx.execute(
                    "INSERT INTO bg_friendship (inviterid, inviteeid, status) VALUES (?, ?, 2)",
                    &[invitee.into(), inviter.into()],
                )?;
                let n = tx.execute(
                    "UPDATE bg_users SET friendcount = friendcount + 1, \
                     pendingcount = pendingcount - CASE WHEN userid = ? THEN 1 ELSE 0 END \
                     WHERE userid IN (?, ?)",
                    &[invitee.into(), invitee.into(), inviter.into()],
                )?;
                expect_rows(n, 2, "accept")
            }
            Action::RejectFriendRequest { inviter, invitee } => {
                let n = tx.execute(
                    "DELETE FROM bg_friendship WHERE inviterid = ? AND inviteeid = ? AND status = 1",
                    &[inviter.into(), invitee.into()],
                )?;
                expect_rows(n, 1, "reject")?;
                tx.execute(
                    "UPDATE bg_users SET pendingcount = pendingcount - 1 WHERE userid = ?",
                    &[invitee.into()],
                )
                .and_then(|n| expect_rows(n, 1, "reject"))
            }
            Action::ThawFriendship { member, friend } => {
                let n = tx.execute(
                    "DELETE FROM bg_friendship WHERE status = 2 AND \
                     ((inviterid = ? AND inviteeid = ?) OR (inviterid = ? AND inviteeid = ?))",
                    &[member.into(), friend.into(), friend.into(), member.into()],
                )?;
                expect_rows(n, 2, "thaw")?;
                tx.execute(
                    "UPDATE bg_users SET friendcount = friendcount - 1 WHERE userid IN (?, ?)",
                    &[member.into(), friend.into()],
                )
                .and_then(|n| expect_rows(n, 2, "thaw"))
            }
            _ => Err(StoreError::Invalid(format!("{action:?} is not a write"))),
        }
    }

    /// 001 Table 6 in the Counters layout; Table 4 (SAS's write-through) in the Profile layout,
    /// whose counts change inside the cached profile by a read-modify-write. Only write-through
    /// asks (write-around deletes every written key).
    fn cache_change(&self, action: &Action, key: &[u8]) -> CacheChange {
        let Some((member, suffix)) = parse_key(key) else {
            return CacheChange::Delete;
        };
        let Some((a, b)) = action.pair() else {
            return CacheChange::Delete;
        };
        let other = if member == a { b } else { a };
        let delta = |count: Count| {
            action
                .count_changes()
                .iter()
                .filter(|c| c.member == member && c.count == count)
                .map(|c| c.delta)
                .sum()
        };
        let remove = move || {
            CacheChange::Modify(Box::new(move |value| {
                let mut ids = decode_list(value)?;
                ids.retain(|id| *id != other);
                Some(encode_list(&ids))
            }))
        };
        match (suffix, action) {
            (FRD_CNT, _) => CacheChange::Incr(delta(Count::Friends)),
            (PND_CNT, _) => CacheChange::Incr(delta(Count::Pending)),
            (PROFILE, _) if self.layout == KeyLayout::Profile => {
                let (friends, pending) = (delta(Count::Friends), delta(Count::Pending));
                CacheChange::Modify(Box::new(move |value| {
                    let mut obj: Map<String, Value> = serde_json::from_slice(value).ok()?;
                    for (field, by) in [("friendcount", friends), ("pendingcount", pending)] {
                        let n = obj.get(field)?.as_i64()?.checked_add(by)?;
                        obj.insert(field.into(), n.into());
                    }
                    serde_json::to_vec(&obj).ok()
                }))
            }
            (FRD_LIST, Action::AcceptFriendRequest { .. }) => {
                CacheChange::Append(encode_list(&[other]))
            }
            (FRD_LIST, Action::ThawFriendship { .. }) => remove(),
            (PND_LIST, Action::InviteFriend { .. }) => CacheChange::Append(encode_list(&[other])),
            (PND_LIST, Action::AcceptFriendRequest { .. } | Action::RejectFriendRequest { .. }) => {
                remove()
            }
            _ => CacheChange::Delete,
        }
    }
}

/// The SQL layout.
pub struct SqlLayout {
    keys: KeyLayout,
    write: FriendshipWrite,
}

impl SqlLayout {
    /// The layout with these keys.
    pub fn new(keys: KeyLayout) -> SqlLayout {
        SqlLayout {
            keys,
            write: FriendshipWrite { layout: keys },
        }
    }

    /// The suffixes of a member's keys.
    fn suffixes(&self) -> &'static [&'static str] {
        match self.keys {
            KeyLayout::Profile => &[PROFILE, FRD_LIST, PND_LIST],
            KeyLayout::Counters => &[PROFILE, FRD_LIST, PND_LIST, FRD_CNT, PND_CNT],
        }
    }

    /// The first ten members of one of `member`'s lists and their profiles, in one session.
    fn list(&self, cads: &Cads, member: u32, list: List) -> cads::Result<Vec<Profile>> {
        cads.run(|s| {
            let mut ids = s.read(&ListRead, &(member, list))?;
            ids.truncate(LIST_LIMIT);
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            s.read(&ProfilesRead(self.keys), &ids)
        })
    }
}

impl Layout for SqlLayout {
    fn describe(&self) -> String {
        let keys = match self.keys {
            KeyLayout::Profile => {
                "keys of 001 Tables 2-3 (iProfile with counts, iFrdList, iPndList)"
            }
            KeyLayout::Counters => {
                "keys of 001 Tables 5-6 (iProfile, iFrdCnt, iPndCnt, iFrdList, iPndList)"
            }
        };
        format!("sql: tables bg_users and bg_friendship, {keys}")
    }

    fn load(&self, cads: &Cads, graph: &GraphParams) -> Result<()> {
        let store = cads.store();
        for ddl in [
            "DROP TABLE IF EXISTS bg_friendship",
            "DROP TABLE IF EXISTS bg_users",
        ] {
            store
                .execute_batch(ddl)
                .context("dropping the old tables")?;
        }
        let attrs: Vec<String> = ATTRIBUTES
            .iter()
            .map(|a| format!("{a} VARCHAR(64) NOT NULL"))
            .collect();
        let ddl = [
            format!(
                "CREATE TABLE bg_users (userid BIGINT PRIMARY KEY, {}, \
                 friendcount BIGINT NOT NULL, pendingcount BIGINT NOT NULL)",
                attrs.join(", ")
            ),
            "CREATE TABLE bg_friendship (inviterid BIGINT NOT NULL, inviteeid BIGINT NOT NULL, \
             status INT NOT NULL, PRIMARY KEY (inviterid, inviteeid))"
                .to_string(),
            "CREATE INDEX bg_friendship_invitee ON bg_friendship (inviteeid, status)".to_string(),
        ];
        for statement in &ddl {
            store
                .execute_batch(statement)
                .context("creating the tables")?;
        }

        let mut tx = store.begin(Isolation::ReadCommitted)?;
        let users: Vec<Vec<SqlValue>> = (0..graph.members)
            .map(|id| {
                let mut row: Vec<SqlValue> = vec![id.into()];
                row.extend(attribute_values(id).into_iter().map(SqlValue::from));
                row.push(i64::from(graph.friends).into());
                row.push(i64::from(graph.pending).into());
                row
            })
            .collect();
        let columns = format!("userid, {}", profile_columns());
        insert_rows(tx.as_mut(), "bg_users", &columns, &users)?;
        let mut friendship: Vec<Vec<SqlValue>> = Vec::new();
        for (i, j) in graph.confirmed() {
            friendship.push(vec![i.into(), j.into(), 2.into()]);
            friendship.push(vec![j.into(), i.into(), 2.into()]);
        }
        for (inviter, invitee) in graph.invitations() {
            friendship.push(vec![inviter.into(), invitee.into(), 1.into()]);
        }
        insert_rows(
            tx.as_mut(),
            "bg_friendship",
            "inviterid, inviteeid, status",
            &friendship,
        )?;
        tx.commit().context("committing the load")?;
        Ok(())
    }

    fn perform(&self, cads: &Cads, action: &Action) -> cads::Result<Vec<CountRead>> {
        match *action {
            Action::ViewProfile { requester, owner } => {
                let query = ProfileQuery {
                    member: owner,
                    with_pending: requester == owner,
                };
                let profile = cads.read(&ProfileRead(self.keys), &query)?;
                Ok(profile.seen_by(requester).count_reads().collect())
            }
            Action::ListFriends { member } => {
                let profiles = self.list(cads, member, List::Friends)?;
                Ok(profiles.iter().flat_map(Profile::count_reads).collect())
            }
            Action::ViewFriendRequests { member } => {
                let profiles = self.list(cads, member, List::Pending)?;
                Ok(profiles.iter().flat_map(Profile::count_reads).collect())
            }
            _ => {
                cads.run(|s| s.write(&self.write, action))?;
                Ok(Vec::new())
            }
        }
    }

    fn stored_counts(&self, store: &dyn DataStore, graph: &GraphParams) -> Result<Vec<Counts>> {
        let mut tx = store.begin_read(Isolation::ReadCommitted)?;
        let rows = tx
            .query(
                "SELECT userid, friendcount, pendingcount FROM bg_users ORDER BY userid",
                &[],
            )
            .context("reading the members' counts")?;
        let _ = tx.rollback();
        if rows.len() != graph.members as usize {
            bail!(
                "bg_users has {} rows for {} members",
                rows.len(),
                graph.members
            );
        }
        rows.iter()
            .enumerate()
            .map(|(i, row)| {
                if row.get::<i64>(0)? != i as i64 {
                    bail!("bg_users: member {i} is missing");
                }
                Ok(Counts {
                    friends: row.get(1)?,
                    pending: row.get(2)?,
                })
            })
            .collect()
    }

    fn cache_keys(&self, member: u32) -> Vec<Vec<u8>> {
        self.suffixes().iter().map(|s| key(member, s)).collect()
    }

    fn fresh_entries(&self, store_only: &Cads, member: u32) -> cads::Result<Vec<Entry>> {
        store_only.run(|s| {
            let query = ProfileQuery {
                member,
                with_pending: true,
            };
            let profile_read = ProfileRead(self.keys);
            let profile = s.read(&profile_read, &query)?;
            let mut entries = profile_read.entries(&query, &profile);
            for list in [List::Friends, List::Pending] {
                let ids = s.read(&ListRead, &(member, list))?;
                entries.extend(ListRead.entries(&(member, list), &ids));
            }
            Ok(entries)
        })
    }

    fn same_value(&self, key: &[u8], a: &[u8], b: &[u8]) -> bool {
        match parse_key(key).map(|(_, suffix)| suffix) {
            Some(PROFILE) => same_json(a, b),
            // Appends put new ids at the end; the data store lists them in order.
            Some(FRD_LIST | PND_LIST) => {
                let sorted = |bytes: &[u8]| {
                    decode_list(bytes).map(|mut ids| {
                        ids.sort_unstable();
                        ids
                    })
                };
                sorted(a).is_some() && sorted(a) == sorted(b)
            }
            _ => decode_count(a).is_some() && decode_count(a) == decode_count(b),
        }
    }
}

/// Inserts rows with multi-row INSERT statements of [`LOAD_ROWS`] rows each.
fn insert_rows(
    tx: &mut dyn cads::store::SqlTransaction,
    table: &str,
    columns: &str,
    rows: &[Vec<SqlValue>],
) -> Result<()> {
    for chunk in rows.chunks(LOAD_ROWS) {
        let width = chunk[0].len();
        let one = format!("({})", vec!["?"; width].join(", "));
        let sql = format!(
            "INSERT INTO {table} ({columns}) VALUES {}",
            vec![one; chunk.len()].join(", ")
        );
        let params: Vec<SqlValue> = chunk.iter().flatten().cloned().collect();
        tx.execute(&sql, &params)
            .with_context(|| format!("loading {table}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_lists_round_trip() {
        assert_eq!(parse_key(b"17FrdList"), Some((17, FRD_LIST)));
        assert_eq!(parse_key(b"Profile"), None);
        assert_eq!(decode_list(&encode_list(&[3, 4, 17])), Some(vec![3, 4, 17]));
        assert_eq!(decode_list(b""), Some(vec![]));
        assert_eq!(decode_list(b"3,x,"), None);
    }

    #[test]
    fn write_keys_follow_tables_3_and_6() {
        let accept = Action::AcceptFriendRequest {
            inviter: 1,
            invitee: 2,
        };
        let w = FriendshipWrite {
            layout: KeyLayout::Profile,
        };
        let names = |keys: Vec<Vec<u8>>| -> Vec<String> {
            keys.into_iter()
                .map(|k| String::from_utf8(k).unwrap())
                .collect()
        };
        assert_eq!(
            names(w.keys_written(&accept)),
            ["1FrdList", "1Profile", "2FrdList", "2PndList", "2Profile"]
        );
        let w = FriendshipWrite {
            layout: KeyLayout::Counters,
        };
        assert_eq!(
            names(w.keys_written(&accept)),
            ["1FrdCnt", "1FrdList", "2FrdCnt", "2FrdList", "2PndCnt", "2PndList"]
        );
        let change = |k: &[u8], v: &[u8]| w.cache_change(&accept, k).apply(Some(v.to_vec()));
        assert_eq!(change(b"2PndCnt", b"5"), Some(b"4".to_vec()));
        assert_eq!(change(b"1FrdCnt", b"10"), Some(b"11".to_vec()));
        assert_eq!(change(b"1FrdList", b"3,"), Some(b"3,2,".to_vec()));
        assert_eq!(change(b"2PndList", b"1,7,"), Some(b"7,".to_vec()));
        // Table 4: the counts inside the profile.
        let w = FriendshipWrite {
            layout: KeyLayout::Profile,
        };
        let profile = br#"{"fname":"a","friendcount":10,"pendingcount":5}"#;
        let changed = w
            .cache_change(&accept, b"2Profile")
            .apply(Some(profile.to_vec()));
        let changed: Value = serde_json::from_slice(&changed.unwrap()).unwrap();
        assert_eq!(changed["friendcount"], 11);
        assert_eq!(changed["pendingcount"], 4);
        assert_eq!(changed["fname"], "a");
        let changed = w
            .cache_change(&accept, b"1Profile")
            .apply(Some(profile.to_vec()));
        let changed: Value = serde_json::from_slice(&changed.unwrap()).unwrap();
        assert_eq!(
            (
                changed["friendcount"].as_i64(),
                changed["pendingcount"].as_i64()
            ),
            (Some(11), Some(5))
        );
        let change = |k: &[u8], v: &[u8]| w.cache_change(&accept, k).apply(Some(v.to_vec()));
        assert_eq!(change(b"1FrdList", b"3,"), Some(b"3,2,".to_vec()));
        assert_eq!(change(b"2PndList", b"1,7,"), Some(b"7,".to_vec()));
    }
}
