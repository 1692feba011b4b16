//! cads-apps: the applications the benchmarks run on cads, each written only against the
//! framework's public API, as any application would be:
//!
//! - [`ycsb`]: YCSB's usertable on the document layer, its records carrying version tokens;
//! - [`bg`]: BG's social graph and its seven actions, on the document layer and on SQL tables
//!   with 001's key layouts;
//! - [`tpcc`]: TPC-C's nine tables, rows and the CacheStores its transactions use.
//!
//! The benchmarks (`cads-bench`) drive them, validate what they read and measure.

#![warn(missing_docs)]

pub mod bg;
mod rng;
pub mod tpcc;
pub mod ycsb;

pub use rng::Rng;
