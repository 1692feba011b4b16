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
//! operators to the cached documents, write-back buffers the operators in the cache (Design 1)
//! for background workers to apply. List Friends and View Friend Requests read the member's
//! document, then the first ten friends' (or inviters') documents in one cache round trip with
//! [`MemberDocs`], a small `CacheStore` over the collection's own keys.

use std::convert::Infallible;

use anyhow::{Context, Result};
use cads::documents::Collection;
use cads::store::{Changes, DataStore, Document, StoreError};
use cads::{CacheChange, CacheStore, Cads, DocRef, Session, StoreTx};
use serde_json::{json, Value};

use super::{same_json, Entry, Layout, LIST_LIMIT};
use crate::bg::graph::{
    attribute_values, Action, CountRead, Counts, GraphParams, Profile, ATTRIBUTES,
};

/// The collection's name.
pub const COLLECTION: &str = "bg_members";

/// Documents inserted or read per data-store call while loading and checking.
const CHUNK: usize = 500;

/// The document layout.
pub struct DocumentLayout {
    members: Collection,
}

impl Default for DocumentLayout {
    fn default() -> Self {
        DocumentLayout::new()
    }
}

impl DocumentLayout {
    /// The layout over the collection [`COLLECTION`].
    pub fn new() -> DocumentLayout {
        DocumentLayout {
            members: Collection::named(COLLECTION).expect("COLLECTION is a valid name"),
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

    /// Applies change operators to members in one session.
    fn write(&self, cads: &Cads, changes: &[(u32, Changes)]) -> cads::Result<()> {
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
        format!("documents: collection {COLLECTION}, one document per member, cached per document")
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
        for chunk in docs.chunks(CHUNK) {
            store
                .insert_many(COLLECTION, chunk)
                .context("inserting members")?;
        }
        Ok(())
    }

    fn perform(&self, cads: &Cads, action: &Action) -> cads::Result<Vec<CountRead>> {
        match *action {
            Action::ViewProfile { requester, owner } => {
                let doc = self
                    .members
                    .read(cads, &owner.to_string())?
                    .ok_or_else(|| missing(owner))?;
                let shown = profile(owner, &doc).seen_by(requester);
                Ok(shown.count_reads().collect())
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

    fn stored_counts(&self, store: &dyn DataStore, graph: &GraphParams) -> Result<Vec<Counts>> {
        let ids: Vec<String> = (0..graph.members).map(|i| i.to_string()).collect();
        let mut counts = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CHUNK) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let docs = store
                .get_many(COLLECTION, &refs)
                .context("reading the members' counts")?;
            for (id, doc) in chunk.iter().zip(docs) {
                let doc = doc.with_context(|| format!("member {id} has no document"))?;
                let count = |field: &str| {
                    doc.get(field)
                        .and_then(Value::as_i64)
                        .with_context(|| format!("member {id} has no {field}"))
                };
                counts.push(Counts {
                    friends: count("friendcount")?,
                    pending: count("pendingcount")?,
                });
            }
        }
        Ok(counts)
    }

    fn cache_keys(&self, member: u32) -> Vec<Vec<u8>> {
        vec![self.members.key(&member.to_string())]
    }

    fn fresh_entries(&self, store_only: &Cads, member: u32) -> cads::Result<Vec<Entry>> {
        let id = member.to_string();
        let doc = store_only.run(|s| self.members.get(s, &id))?;
        // Encoded as the collection caches a document.
        Ok(self.members.entries(&id, &doc))
    }

    fn same_value(&self, _key: &[u8], a: &[u8], b: &[u8]) -> bool {
        same_json(a, b)
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

    fn result_from_cache(&self, ids: &Vec<u32>, values: &[Vec<u8>]) -> Option<Self::Output> {
        ids.iter()
            .zip(values)
            .map(|(id, v)| {
                self.0
                    .result_from_cache(&id.to_string(), std::slice::from_ref(v))
            })
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

    fn entries(&self, ids: &Vec<u32>, docs: &Self::Output) -> Vec<Entry> {
        ids.iter()
            .zip(docs)
            .flat_map(|(id, doc)| self.0.entries(&id.to_string(), doc))
            .collect()
    }

    /// Write-back: a miss must not read a member from the data store while that member's
    /// buffered writes wait in the cache (000 Algorithm 1), so each listed document maps to its
    /// own buffered write, as `Collection::get` does.
    fn buffered_reads(&self, ids: &Vec<u32>) -> Vec<DocRef> {
        ids.iter()
            .map(|id| self.0.doc_ref(&id.to_string()))
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
