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
use cads::{Cads, Policy};

use crate::graph::{Action, CountRead, GraphParams};

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

/// What the final check found: every cached key compared with what the data store says it should
/// hold.
#[derive(Clone, Debug, Default)]
pub struct CacheCheck {
    /// Keys looked up in the cache.
    pub keys: usize,
    /// Of those, keys the cache held (and that were compared).
    pub cached: usize,
    /// Keys whose cached value differs from the data store's, described.
    pub mismatches: Vec<String>,
}

/// An implementation of the seven actions over a data store and a cache.
pub trait Layout: Send + Sync {
    /// One line saying what the layout is, for the run's header.
    fn describe(&self) -> String;

    /// Creates the tables or collection (dropping old ones) and loads the graph into the data
    /// store. The caller flushes the cache afterwards.
    fn load(&self, cads: &Cads, graph: &GraphParams) -> Result<()>;

    /// Runs one action as one session (`Cads::run`, re-run when a lease conflict aborts it) and
    /// returns the counts it read.
    fn perform(&self, cads: &Cads, action: &Action) -> cads::Result<Vec<CountRead>>;

    /// Compares every key the cache holds for the graph's members with the data store. Run it
    /// when no action is in flight.
    fn check_cache(&self, cads: &Cads, graph: &GraphParams) -> Result<CacheCheck>;
}

/// The implementation for a layout and policy. `broken` makes the writes skip the cache (no
/// invalidation, no update): a deliberately wrong implementation that the validator must catch.
pub fn layout(kind: LayoutKind, policy: Policy, broken: bool) -> Box<dyn Layout> {
    match kind {
        LayoutKind::Documents => Box::new(documents::DocumentLayout::new(broken)),
        LayoutKind::Sql => {
            let keys = if policy == Policy::WriteThrough {
                sql::KeyLayout::Counters
            } else {
                sql::KeyLayout::Profile
            };
            Box::new(sql::SqlLayout::new(keys, broken))
        }
    }
}

/// First 10 elements of a list, as BG's List Friends and View Friend Requests show.
pub(crate) const LIST_LIMIT: usize = 10;

/// Reads a cached value without leases, for the final check.
pub(crate) fn cached(cads: &Cads, key: &[u8]) -> Result<Option<Vec<u8>>> {
    match cads.cache() {
        Some(client) => Ok(client.get(key)?),
        None => Ok(None),
    }
}
