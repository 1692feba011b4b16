//! TPC-C as a cads application: the nine tables ([`schema`]) under a name prefix on any SQL
//! store, their rows ([`rows`]), the size of a warehouse ([`Scale`]), and the [`CacheStore`]s
//! the transactions read and write through ([`cache`]). The benchmark (`cads_bench::tpcc`)
//! loads the database, draws and runs the five transactions and checks the consistency
//! conditions.
//!
//! [`CacheStore`]: cads::CacheStore

pub mod cache;
pub mod rows;
mod scale;
pub mod schema;

pub use scale::{Scale, DISTRICTS};
