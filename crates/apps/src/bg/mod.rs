//! BG's social graph (001 §3) as a cads application.
//!
//! BG's members, friendships and invitations and its seven core actions (001 Table 1), written
//! twice on the cads framework:
//!
//! - [`layout::documents`]: the document layer, one JSON document per member, written with change
//!   operators; cads derives the cache keys and what a write does to them, under every policy,
//!   write-back included.
//! - [`layout::sql`]: SQL tables with hand-written [`cads::CacheStore`]s and the cache key layouts
//!   of 001 (Tables 2-3 for write-around, 5-6 for write-through).
//!
//! An application picks a [`Layout`] for its policy, loads the graph and performs [`Action`]s on a
//! [`cads::Cads`]:
//!
//! ```no_run
//! use std::sync::Arc;
//! use cads::{Cads, Config, Policy};
//! use cads_apps::bg::{layout, Action, GraphParams, LayoutKind};
//!
//! let store = cads::store::open("sqlite:/tmp/bg.db", &Default::default())?;
//! let cmis = vec!["127.0.0.1:7379".parse()?];
//! let cads = Cads::connect(store, &cmis, Policy::WriteThrough, Config::default());
//! let bg = layout(LayoutKind::Documents, &cads);
//! bg.load(&cads, &GraphParams::default())?;
//! bg.perform(&cads, &Action::InviteFriend { inviter: 100, invitee: 2 })?;
//! let counts = bg.perform(&cads, &Action::ViewProfile { requester: 2, owner: 2 })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The BG benchmark (`cads bench bg`, `cads_bench::bg`) drives these actions from many threads
//! with BG's model of relationships, validates every count they read and finds the SoAR.

pub mod graph;
pub mod layout;

pub use graph::{Action, ActionKind, Count, CountRead, Counts, GraphParams, Profile};
pub use layout::{layout, Layout, LayoutKind};
