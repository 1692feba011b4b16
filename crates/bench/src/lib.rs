//! cads-bench: the benchmarks `cads bench` runs, natively, against any policy and data store
//! (DESIGN.md §7; `../shared/benchmarks.md` fixes what each benchmark means).
//!
//! Today: YCSB ([`ycsb`]): YCSB's generators ([`generator`]), workloads A–F, the papers'
//! Workload S and CPR's scan variants, load and run phases on the document layer under every
//! policy, HDR latency histograms, driver-counted cache hits, data-store calls, write-back's
//! buffered writes and pinned memory, and validation of every read and of the data store's final
//! state.
//!
//! BG ([`bg`]): the social graph of the application `cads_apps::bg` under every
//! policy, BG's mixes and model of relationships, validation of every count read, and the SoAR
//! search; the entry point is [`bg::run_bg`].
//!
//! And TPC-C ([`tpcc`]): the nine tables on any SQL store, the five transactions as sessions over
//! CacheStores of rows and per-district entries, tpmC, and the consistency conditions checked
//! after every run ([`tpcc::run_tpcc`]).
//!
//! The entry point for the CLI is [`ycsb::run_ycsb`]; the caller says where the CMIs are, or
//! starts them (a [`Launcher`]: the `cads` command starts them in its own process):
//!
//! ```no_run
//! use cads_bench::ycsb::{print_progress, run_ycsb, YcsbOptions};
//! use cads_bench::{CacheSpec, NoLauncher};
//! let opts = YcsbOptions {
//!     workload: "B".into(),
//!     records: 10_000,
//!     cache: CacheSpec::parse("127.0.0.1:7379,127.0.0.1:7380")?,
//!     policies: vec![cads::Policy::WriteThrough],
//!     ..YcsbOptions::default()
//! };
//! for record in run_ycsb(&opts, &NoLauncher, &print_progress)? {
//!     println!("{}: {:.0} ops/s, {} stale reads", record.policy, record.throughput, record.stale_reads);
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

#![warn(missing_docs)]

pub mod bg;
pub mod cpu;
pub mod deploy;
pub mod generator;
pub mod report;
pub mod tpcc;
pub mod ycsb;

pub use deploy::{CacheSpec, CmiSettings, Launcher, NoLauncher, RunningCmis};
