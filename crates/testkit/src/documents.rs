//! Documents placed where a test needs them, and the token logs the kill tests append to.

use cads::documents::Collection;
use cads::store::{DataStore, Document};
use cads::Cads;

/// The id of a new document of `docs` whose cached value lives on CMI `cmi`, stored as
/// `{"n": 0}`: for tests that stop, kill or skip that CMI.
pub fn counter_on_cmi(cads: &Cads, store: &dyn DataStore, docs: &Collection, cmi: usize) -> String {
    let client = cads.cache().expect("a deployment with a cache");
    let id = (0..100)
        .map(|i| format!("d{i}"))
        .find(|id| client.route(&docs.key(id)) == cmi)
        .expect("one of 100 ids routes to every CMI");
    let mut doc = Document::new();
    doc.insert("n".into(), 0.into());
    store.put(docs.name(), &id, &doc).unwrap();
    id
}

/// The tokens appended to a document's `log` array.
pub fn logged(doc: &Document) -> Vec<String> {
    doc["log"]
        .as_array()
        .expect("a log array")
        .iter()
        .map(|v| v.as_str().expect("a token").to_string())
        .collect()
}
