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
//! document, then the first ten friends' (or inviters') documents in one cache round trip, each
//! document read on its own (`Collection::read_text`, `read_each_text`) rather than in a session
//! whose reads agree: BG validates every profile it shows on its own, and the data store alone
//! reads them as separate statements (one for the member, one for the list). The read actions take
//! documents as their text and decode only the fields they show (`Member`), borrowing the
//! attributes from the text instead of building each document as a tree. A member document
//! without one of those fields, or with one of another type, fails the action (an error the run
//! counts) instead of being shown without it.

use std::borrow::Cow;

use anyhow::{Context, Result};
use cads::documents::Collection;
use cads::store::{Changes, DataStore, Document, DocumentText};
use cads::{CacheStore, Cads};
use serde::de::IgnoredAny;
use serde::Deserialize;
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

    /// A member's document, read on its own ([`Collection::read_text`]).
    fn member_text(&self, cads: &Cads, id: u32) -> cads::Result<DocumentText> {
        self.members
            .read_text(cads, &id.to_string())?
            .ok_or_else(|| missing(id))
    }

    /// The documents of `ids`, each read on its own ([`Collection::read_each_text`]): in one
    /// cache round trip when they are cached.
    fn members(&self, cads: &Cads, ids: &[u32]) -> cads::Result<Vec<DocumentText>> {
        let names: Vec<String> = ids.iter().map(u32::to_string).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let texts = self.members.read_each_text(cads, &names)?;
        ids.iter()
            .zip(texts)
            .map(|(&id, text)| text.ok_or_else(|| missing(id)))
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

/// What the read actions use of a member's document, decoded from its text: the attributes
/// (borrowed from the text where they have no escapes), both counts and both id lists (`L`:
/// `Vec<u32>` for the member whose lists an action reads, `IgnoredAny` to read past them).
#[derive(Deserialize)]
struct Member<'a, L = IgnoredAny> {
    #[serde(borrow)]
    username: Cow<'a, str>,
    #[serde(borrow)]
    firstname: Cow<'a, str>,
    #[serde(borrow)]
    lastname: Cow<'a, str>,
    #[serde(borrow)]
    gender: Cow<'a, str>,
    #[serde(borrow)]
    dob: Cow<'a, str>,
    #[serde(borrow)]
    jdate: Cow<'a, str>,
    #[serde(borrow)]
    ldate: Cow<'a, str>,
    #[serde(borrow)]
    address: Cow<'a, str>,
    #[serde(borrow)]
    email: Cow<'a, str>,
    #[serde(borrow)]
    tel: Cow<'a, str>,
    friendcount: i64,
    pendingcount: i64,
    friends: L,
    pending: L,
}

/// A profile's attributes as the document layout reads them: the values of [`ATTRIBUTES`], in
/// its order.
type Attributes<'a> = [Cow<'a, str>; ATTRIBUTES.len()];

fn member<'a, L: Deserialize<'a>>(id: u32, text: &'a DocumentText) -> cads::Result<Member<'a, L>> {
    text.parse()
        .map_err(|e| cads::Error::App(format!("member {id}'s document: {e}")))
}

/// Member `id`'s document as loaded.
fn loaded_member(graph: &GraphParams, id: u32, friends: &[u32], pending: &[u32]) -> Document {
    let mut doc = Document::new();
    for (name, value) in ATTRIBUTES.iter().zip(attribute_values(id)) {
        doc.insert(name.to_string(), Value::String(value));
    }
    doc.insert("friends".into(), json!(friends));
    doc.insert("pending".into(), json!(pending));
    doc.insert("friendcount".into(), json!(graph.friends));
    doc.insert("pendingcount".into(), json!(graph.pending));
    doc
}

/// A member's profile: its attributes and both counts.
fn profile<L>(id: u32, m: Member<'_, L>) -> Profile<Attributes<'_>> {
    Profile {
        id,
        attributes: [
            m.username,
            m.firstname,
            m.lastname,
            m.gender,
            m.dob,
            m.jdate,
            m.ldate,
            m.address,
            m.email,
            m.tel,
        ],
        friendcount: Some(m.friendcount),
        pendingcount: Some(m.pendingcount),
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
            let mine = &mut friends[id as usize];
            mine.sort_unstable();
            let doc = loaded_member(graph, id, mine, &pending[id as usize]);
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
                let text = self.member_text(cads, owner)?;
                let shown = profile(owner, member::<IgnoredAny>(owner, &text)?).seen_by(requester);
                Ok(shown.count_reads().collect())
            }
            Action::ListFriends { member: id } | Action::ViewFriendRequests { member: id } => {
                let friends = matches!(action, Action::ListFriends { .. });
                let text = self.member_text(cads, id)?;
                let me: Member<'_, Vec<u32>> = member(id, &text)?;
                let listed = if friends { &me.friends } else { &me.pending };
                let ids: Vec<u32> = listed.iter().copied().take(LIST_LIMIT).collect();
                let texts = self.members(cads, &ids)?;
                let mut reads: Vec<CountRead> = profile(id, me).count_reads().collect();
                for (&other, text) in ids.iter().zip(&texts) {
                    reads.extend(profile(other, member::<IgnoredAny>(other, text)?).count_reads());
                }
                Ok(reads)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_read_from_its_text_shows_its_attributes_in_order() {
        let graph = GraphParams {
            members: 100,
            friends: 2,
            pending: 1,
        };
        let doc = loaded_member(&graph, 7, &[6, 8], &[9]);
        let text = DocumentText::of(&doc);
        let m: Member<'_, Vec<u32>> = member(7, &text).unwrap();
        assert_eq!(
            (m.friends.as_slice(), m.pending.as_slice()),
            (&[6, 8][..], &[9][..])
        );
        let shown = profile(7, m);
        let values = attribute_values(7);
        assert_eq!(shown.attributes.map(Cow::into_owned), values);
        assert_eq!((shown.friendcount, shown.pendingcount), (Some(2), Some(1)));
        for (name, value) in ATTRIBUTES.iter().zip(&values) {
            assert_eq!(doc[*name], json!(value), "{name}");
        }
    }
}
