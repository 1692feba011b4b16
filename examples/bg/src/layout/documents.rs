//! BG on the document layer: one document per member (000 §3.2, Design 1),
//!
//! ```json
//! {"username": "user7", ..., "friends": [2, 3, ...], "pending": [13, 14, ...],
//!  "friendcount": 10, "pendingcount": 5}
//! ```
//!
//! cached as one entry per document (`bg_members:<id>`). `pending` lists the members who invited
//! this one. A write action is change operators (`$addToSet`, `$pull`, `$inc`) on the one or two
//! members involved: write-around deletes their entries, write-through applies the same
//! operators to the cached documents. List Friends and View Friend Requests read the member's
//! document, then the first ten friends' (or inviters') documents in one cache round trip with
//! [`MemberDocs`], a small `CacheStore` over the collection's own keys.

use std::convert::Infallible;

use anyhow::{Context, Result};
use cads::documents::Collection;
use cads::{CacheChange, CacheStore, Cads, Session, StoreTx};
use cads_store::{Changes, Document, StoreError};
use serde_json::{json, Value};

use super::{CacheCheck, Layout, LIST_LIMIT};
use crate::graph::{attribute_values, Action, CountRead, GraphParams, Profile, ATTRIBUTES};

/// The collection's name.
pub const COLLECTION: &str = "bg_members";

/// Documents inserted per call while loading.
const LOAD_CHUNK: usize = 500;

/// The document layout.
pub struct DocumentLayout {
    members: Collection,
    broken: bool,
}

impl DocumentLayout {
    /// The layout; `broken` writes the data store directly, leaving the cache alone.
    pub fn new(broken: bool) -> DocumentLayout {
        DocumentLayout {
            members: Collection::named(COLLECTION),
            broken,
        }
    }

    fn get(&self, s: &mut Session<'_>, member: u32) -> cads::Result<Document> {
        self.members
            .get(s, &member.to_string())?
            .ok_or_else(|| missing(member))
    }

    /// The first ten members of an id array of `doc`, and their profiles.
    fn list(&self, s: &mut Session<'_>, doc: &Document, field: &str) -> cads::Result<Vec<Profile>> {
        let ids: Vec<u32> = doc
            .get(field)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_u64)
                    .filter_map(|v| u32::try_from(v).ok())
                    .take(LIST_LIMIT)
                    .collect()
            })
            .unwrap_or_default();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let docs = s.read(&MemberDocs(&self.members), &ids)?;
        ids.iter()
            .zip(docs)
            .map(|(id, doc)| Ok(profile(*id, &doc.ok_or_else(|| missing(*id))?)))
            .collect()
    }

    /// Applies change operators to members, in a session (or straight to the store when broken).
    fn write(&self, cads: &Cads, changes: &[(u32, Changes)]) -> cads::Result<()> {
        if self.broken {
            for (member, c) in changes {
                cads.store().update(COLLECTION, &member.to_string(), c)?;
            }
            return Ok(());
        }
        cads.run(|s| {
            for (member, c) in changes {
                self.members.update(s, &member.to_string(), c.clone())?;
            }
            Ok(())
        })
    }
}

fn missing(member: u32) -> cads::Error {
    cads::Error::App(format!("member {member} has no document"))
}

fn changes(value: Value) -> cads::Result<Changes> {
    Ok(Changes::from_json(&value)?)
}

/// A member's profile from its document (attributes and both counts).
fn profile(id: u32, doc: &Document) -> Profile {
    let attributes = ATTRIBUTES
        .iter()
        .filter_map(|name| doc.get(*name).map(|v| (name.to_string(), v.clone())))
        .collect();
    Profile {
        id,
        attributes,
        friendcount: doc.get("friendcount").and_then(Value::as_i64),
        pendingcount: doc.get("pendingcount").and_then(Value::as_i64),
    }
}

impl Layout for DocumentLayout {
    fn describe(&self) -> String {
        format!(
            "documents: collection {COLLECTION}, one document per member, cached per document{}",
            if self.broken {
                " (BROKEN: writes skip the cache)"
            } else {
                ""
            }
        )
    }

    fn load(&self, cads: &Cads, graph: &GraphParams) -> Result<()> {
        let store = cads.store();
        store
            .drop_collection(COLLECTION)
            .context("dropping the old collection")?;
        Collection::create(cads, COLLECTION).context("creating the collection")?;
        let n = graph.members as usize;
        let mut friends: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut pending: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (i, j) in graph.confirmed() {
            friends[i as usize].push(j);
            friends[j as usize].push(i);
        }
        for (inviter, invitee) in graph.invitations() {
            pending[invitee as usize].push(inviter);
        }
        let mut docs = Vec::with_capacity(n);
        for id in 0..graph.members {
            let mut doc = Document::new();
            for (name, value) in ATTRIBUTES.iter().zip(attribute_values(id)) {
                doc.insert(name.to_string(), Value::String(value));
            }
            let mine = &mut friends[id as usize];
            mine.sort_unstable();
            doc.insert("friends".into(), json!(mine));
            doc.insert("pending".into(), json!(pending[id as usize]));
            doc.insert("friendcount".into(), json!(graph.friends));
            doc.insert("pendingcount".into(), json!(graph.pending));
            docs.push((id.to_string(), doc));
        }
        for chunk in docs.chunks(LOAD_CHUNK) {
            store
                .insert_many(COLLECTION, chunk)
                .context("inserting members")?;
        }
        Ok(())
    }

    fn perform(&self, cads: &Cads, action: &Action) -> cads::Result<Vec<CountRead>> {
        match *action {
            Action::ViewProfile { owner, .. } => {
                let doc = cads.run(|s| self.get(s, owner))?;
                Ok(profile(owner, &doc).count_reads().collect())
            }
            Action::ListFriends { member } | Action::ViewFriendRequests { member } => {
                let field = if matches!(action, Action::ListFriends { .. }) {
                    "friends"
                } else {
                    "pending"
                };
                let (me, others) = cads.run(|s| {
                    let doc = self.get(s, member)?;
                    let others = self.list(s, &doc, field)?;
                    Ok((profile(member, &doc), others))
                })?;
                Ok(me
                    .count_reads()
                    .chain(others.iter().flat_map(Profile::count_reads))
                    .collect())
            }
            Action::InviteFriend { inviter, invitee } => {
                let c = changes(json!({
                    "$addToSet": {"pending": inviter},
                    "$inc": {"pendingcount": 1},
                }))?;
                self.write(cads, &[(invitee, c)])?;
                Ok(Vec::new())
            }
            Action::AcceptFriendRequest { inviter, invitee } => {
                let accepting = changes(json!({
                    "$pull": {"pending": inviter},
                    "$addToSet": {"friends": inviter},
                    "$inc": {"friendcount": 1, "pendingcount": -1},
                }))?;
                let accepted = changes(json!({
                    "$addToSet": {"friends": invitee},
                    "$inc": {"friendcount": 1},
                }))?;
                self.write(cads, &[(invitee, accepting), (inviter, accepted)])?;
                Ok(Vec::new())
            }
            Action::RejectFriendRequest { inviter, invitee } => {
                let c = changes(json!({
                    "$pull": {"pending": inviter},
                    "$inc": {"pendingcount": -1},
                }))?;
                self.write(cads, &[(invitee, c)])?;
                Ok(Vec::new())
            }
            Action::ThawFriendship { member, friend } => {
                let thaw = |other: u32| {
                    changes(json!({
                        "$pull": {"friends": other},
                        "$inc": {"friendcount": -1},
                    }))
                };
                self.write(cads, &[(member, thaw(friend)?), (friend, thaw(member)?)])?;
                Ok(Vec::new())
            }
        }
    }

    fn check_cache(&self, cads: &Cads, graph: &GraphParams) -> Result<CacheCheck> {
        let mut check = CacheCheck::default();
        let ids: Vec<String> = (0..graph.members).map(|i| i.to_string()).collect();
        for chunk in ids.chunks(LOAD_CHUNK) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let stored = cads.store().get_many(COLLECTION, &refs)?;
            for (id, stored) in chunk.iter().zip(stored) {
                check.keys += 1;
                let key = self.members.key(id);
                let Some(bytes) = super::cached(cads, &key)? else {
                    continue;
                };
                check.cached += 1;
                let cached: Option<Value> = serde_json::from_slice(&bytes).ok();
                let stored = stored.map(Value::Object);
                if cached != stored {
                    check.mismatches.push(format!(
                        "{}: cached {} but the data store has {}",
                        String::from_utf8_lossy(&key),
                        String::from_utf8_lossy(&bytes),
                        stored.map_or("nothing".into(), |v| v.to_string()),
                    ));
                }
            }
        }
        Ok(check)
    }
}

/// Several member documents read in one cache round trip (an LMGET of their keys) and, on a
/// miss, one `get_many` from the data store. It caches exactly what [`Collection`] caches (the
/// document's JSON under `<collection>:<id>`), so both read and keep the same entries.
pub struct MemberDocs<'a>(pub &'a Collection);

impl CacheStore for MemberDocs<'_> {
    type Query = Vec<u32>;
    type Write = Infallible;
    type Output = Vec<Option<Document>>;

    fn keys_read(&self, ids: &Vec<u32>) -> Vec<Vec<u8>> {
        ids.iter().map(|id| self.0.key(&id.to_string())).collect()
    }

    fn result_from_cache(&self, _: &Vec<u32>, values: &[Vec<u8>]) -> Option<Self::Output> {
        values
            .iter()
            .map(|v| serde_json::from_slice::<Document>(v).ok().map(Some))
            .collect()
    }

    fn query_store(
        &self,
        ids: &Vec<u32>,
        tx: &mut StoreTx<'_>,
    ) -> Result<Self::Output, StoreError> {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        tx.documents().get_many(self.0.name(), &refs)
    }

    fn entries(&self, ids: &Vec<u32>, docs: &Self::Output) -> Vec<(Vec<u8>, Vec<u8>)> {
        ids.iter()
            .zip(docs)
            .filter_map(|(id, doc)| {
                let doc = doc.as_ref()?;
                let bytes = serde_json::to_vec(doc).ok()?;
                Some((self.0.key(&id.to_string()), bytes))
            })
            .collect()
    }

    fn keys_written(&self, write: &Infallible) -> Vec<Vec<u8>> {
        match *write {}
    }

    fn write_store(&self, write: &Infallible, _: &mut StoreTx<'_>) -> Result<(), StoreError> {
        match *write {}
    }

    fn cache_change(&self, write: &Infallible, _: &[u8]) -> CacheChange {
        match *write {}
    }
}
