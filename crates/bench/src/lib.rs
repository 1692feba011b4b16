//! cads-bench: the benchmarks `cads bench` runs, natively, against any policy and data store
//! (DESIGN.md §7; `../shared/benchmarks.md` fixes what each benchmark means).
//!
//! One harness ([`harness`]) runs them all: the deployment the caller hands in (where the data
//! store and the CMIs are, and a [`Launcher`] that starts embedded CMIs and AppNodes), the
//! phases (load, warm, run, drain, verify) for every policy in turn, one progress report, one
//! record type with the common fields and each benchmark's own part, and the run split over
//! many application processes (`--appnodes`). Each benchmark is only its workload and its
//! validation, on the applications of `cads-apps`:
//!
//! - YCSB ([`ycsb`]): YCSB's generators ([`generator`]), workloads A–F, the papers' Workload S
//!   and CPR's scan variants on the document layer, every read and the data store's final state
//!   validated;
//! - BG ([`bg`]): the social graph under BG's mixes and model of relationships, every count
//!   read validated, the SoAR search;
//! - TPC-C ([`tpcc`]): the five transactions as sessions over CacheStores of rows and
//!   per-district entries, tpmC, and the consistency conditions checked after every run.
//!
//! A benchmark runs from its options ([`harness::BenchmarkOptions::run`]); the caller says where
//! the CMIs are, or starts them (the `cads` command starts them in its own process):
//!
//! ```no_run
//! use cads_bench::harness::{BenchmarkOptions, CommonOptions};
//! use cads_bench::ycsb::{print_progress, YcsbOptions};
//! use cads_bench::{CacheSpec, NoLauncher};
//! let opts = YcsbOptions {
//!     workload: "B".into(),
//!     records: 10_000,
//!     common: CommonOptions {
//!         cache: CacheSpec::parse("127.0.0.1:7379,127.0.0.1:7380")?,
//!         policies: vec![cads::Policy::WriteThrough],
//!         ..YcsbOptions::default().common
//!     },
//!     ..YcsbOptions::default()
//! };
//! for record in opts.run(&NoLauncher, &print_progress)? {
//!     println!(
//!         "{}: {:.0} ops/s, {} stale reads",
//!         record.policy, record.throughput, record.stale_reads
//!     );
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

#![warn(missing_docs)]

pub mod bg;
pub mod cpu;
pub mod deploy;
pub mod gemini;
pub mod generator;
pub mod harness;
pub mod latency;
pub mod report;
pub mod tpcc;
pub mod ycsb;

pub use deploy::{private_dir, CacheSpec, CmiSettings, Launcher, NoLauncher, RunningCmis};
pub use harness::{parse_duration, parse_policies};
