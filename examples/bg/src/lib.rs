//! The BG social graph (001 §3) as an example cads application.
//!
//! BG's members, friendships and invitations, its seven core actions (001 Table 1) and its
//! validation of what reads show, on two implementations of the actions:
//!
//! - [`layout::documents`]: the document layer, one JSON document per member, written with change
//!   operators; cads derives the cache keys and what a write does to them.
//! - [`layout::sql`]: SQL tables with hand-written [`cads::CacheStore`]s and the cache key layouts
//!   of 001 (Tables 2-3 for write-around, 5-6 for write-through).
//!
//! Both run under every policy (the data store alone, write-around, write-through) against SQLite,
//! PostgreSQL or MySQL/MariaDB, with CMIs started in-process or running elsewhere. The `bg` binary
//! has three commands: `run` (threads, a mix of 000 Table 3.5, validation of every count read and a
//! final comparison of the cache with the data store), `latency` (000 Table 3.6: latency and round
//! trips per action) and `ycsb` (000 Table 3.4: YCSB Read and Update).

pub mod deploy;
pub mod graph;
pub mod latency;
pub mod layout;
pub mod run;
pub mod validate;

pub use deploy::{CacheSpec, Deployment};
pub use graph::{Action, ActionKind, GraphParams, Mix};
pub use layout::{layout, Layout, LayoutKind};
pub use run::{prepare, run, RunOptions, RunReport};
