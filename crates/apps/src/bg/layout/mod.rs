//! The two implementations of BG's actions.
//!
//! - [`documents`]: one JSON document per member on [`cads::documents::Collection`] (000 §3.2,
//!   Design 1), written with change operators.
//! - [`sql`]: SQL tables and hand-written [`cads::CacheStore`]s with the key layouts of 001:
//!   Tables 2-3 for write-around (and for the data store alone), Tables 5-6 for write-through.

pub mod documents;
pub mod sql;

use std::fmt;

use anyhow::Result;
use cads::store::DataStore;
use cads::{Cads, Policy};

use crate::bg::graph::{Action, CountRead, Counts, GraphParams};

/// Which implementation of the actions to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutKind {
    /// The document layer.
    Documents,
    /// SQL tables with raw `CacheStore`s.
    Sql,
}

impl LayoutKind {
    /// The layout called `name` (`documents` or `sql`).
    pub fn parse(name: &str) -> Option<LayoutKind> {
        match name {
            "documents" | "docs" => Some(LayoutKind::Documents),
            "sql" => Some(LayoutKind::Sql),
            _ => None,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LayoutKind::Documents => "documents",
            LayoutKind::Sql => "sql",
        }
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A cache entry: key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// An implementation of the seven actions over a data store and a cache.
///
/// Besides the actions, a layout says what it keeps where, so that a caller can check the cache
/// and the data store against each other after a run: the counts the data store holds, the cache
/// keys of a member, and what those keys would hold if filled from the data store now.
pub trait Layout: Send + Sync {
    /// One line saying what the layout is.
    fn describe(&self) -> String;

    /// Creates the tables or collection (dropping old ones) and loads the graph into the data
    /// store. Nothing goes through the cache: the caller empties it (or starts with empty CMIs).
    fn load(&self, cads: &Cads, graph: &GraphParams) -> Result<()>;

    /// Runs one action as one session (`Cads::run`, re-run when a lease conflict aborts it) and
    /// returns the counts it read.
    fn perform(&self, cads: &Cads, action: &Action) -> cads::Result<Vec<CountRead>>;

    /// Every member's counts as the data store holds them, indexed by member id.
    fn stored_counts(&self, store: &dyn DataStore, graph: &GraphParams) -> Result<Vec<Counts>>;

    /// The cache keys this layout may hold for `member`.
    fn cache_keys(&self, member: u32) -> Vec<Vec<u8>>;

    /// The entries of [`Layout::cache_keys`] as a read would fill them now, from the data store:
    /// `store_only` must be a framework without a cache (`Policy::DataStoreOnly`).
    fn fresh_entries(&self, store_only: &Cads, member: u32) -> cads::Result<Vec<Entry>>;

    /// Whether two values of `key` say the same thing (a cached list may hold its ids in another
    /// order than the data store returns them, a JSON object its fields).
    fn same_value(&self, key: &[u8], a: &[u8], b: &[u8]) -> bool;
}

/// The implementation of a layout for `cads`'s policy and cache. The SQL layout uses 001's
/// Tables 2-3 keys where writes delete cached values (write-around and cache-aside, or no cache),
/// Table 4 (the same keys, changed in place) under write-through with the cache in-process
/// (SAS), and Tables 5-6 where writes change the values of a cache server (write-through, and
/// write-back, under which its SQL writes, having no documents to buffer, run as write-through).
pub fn layout(kind: LayoutKind, cads: &Cads) -> Box<dyn Layout> {
    match kind {
        LayoutKind::Documents => Box::new(documents::DocumentLayout::new()),
        LayoutKind::Sql => {
            let in_process = cads.sas_stats().is_some();
            let keys = match cads.policy() {
                Policy::WriteThrough if in_process => sql::KeyLayout::Profile,
                Policy::WriteThrough | Policy::WriteBack => sql::KeyLayout::Counters,
                Policy::DataStoreOnly | Policy::WriteAround | Policy::CacheAside => {
                    sql::KeyLayout::Profile
                }
            };
            Box::new(sql::SqlLayout::new(keys))
        }
    }
}

/// First 10 elements of a list, as BG's List Friends and View Friend Requests show.
pub(crate) const LIST_LIMIT: usize = 10;

/// Whether two byte strings hold the same JSON value.
pub(crate) fn same_json(a: &[u8], b: &[u8]) -> bool {
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
