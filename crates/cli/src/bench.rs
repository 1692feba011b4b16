//! `cads bench`: the benchmarks of `cads-bench` (YCSB, BG, TPC-C) behind one set of flags. Each
//! benchmark's library call does the work; this module turns flags into its options (with the
//! library's parsers and defaults), shows its progress, and afterwards prints the summary, writes
//! `--out` and the charts, and checks consistency.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use cads::writeback::{Buffering, MacKey};
use cads::{AppNodes, Password, Policy, TardisConfig, Technique, TlsConfig, TlsIdentity, TlsName};
use cads_bench::bg::{self, BgOptions, LayoutKind, Popularity, Sla};
use cads_bench::gemini::{CmiFailure, FailKind, GeminiOptions, Recovery};
use cads_bench::harness::{self, BenchRecord, BenchmarkOptions, CommonOptions, Outage};
use cads_bench::report::{draw_charts, RunPoint};
use cads_bench::tpcc::{self, Mix, Scale, TpccOptions};
use cads_bench::ycsb::{self, Distribution, FieldLength, Fields, YcsbOptions};
use cads_bench::{parse_duration, parse_policies, CacheSpec, CmiSettings};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;

use crate::cmis::ThisProgram;
use crate::latency::{self, BgLatencyArgs, YcsbLatencyArgs};
use crate::progress::{Progress, Report};

/// `cads bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub benchmark: Benchmark,
}

/// The benchmarks.
#[derive(Subcommand, Debug)]
pub enum Benchmark {
    /// YCSB: workloads A-F, the papers' S, CPR's scans and an ETC-like trace on the document
    /// layer; every read
    /// validated, and the data store's final state checked against the last acknowledged writes.
    Ycsb(YcsbArgs),
    /// BG: a social graph and its seven core actions under BG's mixes; every count read
    /// validated, the data store's counts and the cache checked after each run, and with --soar
    /// the SoAR (the most actions per second that meet the SLA).
    Bg(BgArgs),
    /// TPC-C: the nine tables and five transactions with BenchBase's simplifications; tpmC and
    /// latency per transaction, and the consistency conditions of clause 3.3.2 checked after
    /// each run.
    Tpcc(TpccArgs),
    /// One thread, each of BG's seven actions N times on a warm cache: mean latency and round
    /// trips per action and policy (000 Table 3.6).
    BgLatency(BgLatencyArgs),
    /// One thread, YCSB Read and Update (10 fields of 100 bytes, all read, all updated) on the
    /// document layer: mean latency and round trips per policy (000 Table 3.4).
    YcsbLatency(YcsbLatencyArgs),
}

/// The policies of `--policy`.
#[derive(Clone, Debug)]
pub struct Policies(pub Vec<Policy>);

pub(crate) fn policy_list(text: &str) -> Result<Policies> {
    parse_policies(text).map(Policies)
}

/// Where every benchmark runs, what it keeps, and what it writes.
#[derive(Args, Debug)]
pub struct Common {
    /// Policies, each run in turn: write-around, write-through, write-back, none (the data store
    /// alone), cache-aside (no leases, as applications do over Redis: for comparison, its stale
    /// reads are counted but fail nothing), comma-separated, or all for the first four.
    /// redis-zindex is another name for cache-aside, which YCSB's CPR workload runs on a real
    /// redis-server with its ranges in a sorted set (ZRANGEBYLEX, then MGET).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = policy_list)]
    pub policy: Policies,
    /// Data store: sqlite:PATH (add ?synchronous=full to sync every commit to disk),
    /// postgres://USER:PASSWORD@HOST:PORT/DATABASE or mysql://USER:PASSWORD@HOST:PORT/DATABASE.
    /// [default: a SQLite file in a temporary directory, removed afterwards]
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Cache: embedded:N starts N CMIs in this process on loopback, fresh for each policy in its
    /// lease mode; or host:port,host:port,... of running CMIs (`cads server`), emptied before
    /// each run, whose --mode must suit every policy given; or sas: each AppNode caches in its
    /// own memory, kept consistent by a SAS core started in this process (write-around and
    /// write-through), and computes its misses from the data store (sas:greedy, the same) or
    /// fetches a key another AppNode holds (sas:ingest).
    #[arg(long, value_name = "SPEC", default_value = "embedded:2", value_parser = CacheSpec::parse)]
    pub cache: CacheSpec,
    /// The CMIs' password (their --requirepass): the benchmark logs in with it, and starts
    /// embedded CMIs requiring it.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "CADS_CACHE_PASSWORD",
        hide_env_values = true
    )]
    pub cache_password: Option<String>,
    /// Speak TLS to the CMIs (cads server --tls-cert), trusting the CA certificates in this
    /// PEM file: for CMIs given with --cache host:port,...
    #[arg(
        long,
        value_name = "FILE",
        env = "CADS_CACHE_TLS_CA",
        value_parser = |s: &str| TlsConfig::from_ca_file(Path::new(s))
    )]
    pub cache_tls_ca: Option<TlsConfig>,
    /// The name the CMIs' certificates must be valid for (a DNS name or an IP address).
    /// [default: each CMI's IP address]
    #[arg(
        long,
        value_name = "NAME",
        env = "CADS_CACHE_TLS_NAME",
        requires = "cache_tls_ca",
        value_parser = |s: &str| s.parse::<TlsName>()
    )]
    pub cache_tls_name: Option<TlsName>,
    /// This client's certificate chain and private key, in one PEM file, for CMIs that require
    /// client certificates (cads server --tls-ca).
    #[arg(
        long,
        value_name = "FILE",
        env = "CADS_CACHE_TLS_CERT",
        requires = "cache_tls_ca",
        value_parser = |s: &str| TlsIdentity::from_file(Path::new(s))
    )]
    pub cache_tls_cert: Option<TlsIdentity>,
    /// How the framework reaches embedded CMIs: tcp (loopback), or unix (each CMI also serves a
    /// Unix socket in a private directory, which skips TCP's work in the kernel; CMIs started as
    /// processes to kill, and Gemini's behind their relays, stay on TCP).
    #[arg(long, value_name = "tcp|unix", default_value = "tcp", value_parser = ["tcp", "unix"])]
    pub cmi_transport: String,
    /// Where write-back's MAC key comes from: stored (generated on first use and kept in the
    /// data store, so every process using it agrees), file:PATH (the key in hex), or off (no
    /// MACs: for CMIs only the benchmark can write to, and to measure what the MACs cost).
    #[arg(long, value_name = "stored|file:PATH|off", default_value = "stored", value_parser = MacKey::parse)]
    pub write_back_key: MacKey,
    /// CMIs holding each of write-back's buffered writes (capped by the number of CMIs).
    /// [default: 3]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub write_back_replicas: Option<u16>,
    /// How write-back adds a write to a document's buffered write: append (append the write
    /// without reading: two cache round trips per write) or rmw (read it under an exclusive
    /// lease, add the write, compact, write it back: three). [default: append]
    #[arg(long, value_name = "rmw|append", value_parser = parse_buffering)]
    pub write_back_buffering: Option<Buffering>,
    /// How long a write-back worker waits after a pass that found no full batch, so that
    /// writes accumulate into larger batches (shorter: writes pending less, more data-store
    /// transactions and cache round trips per write). [default: 250ms]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub worker_pause: Option<Duration>,
    /// maxmemory of each embedded CMI (e.g. 512mb). [default: the server's]
    #[arg(long, value_name = "BYTES")]
    pub maxmemory: Option<String>,
    /// max-pinned-memory of each embedded CMI: room for write-back's buffered writes.
    /// [default: the server's]
    #[arg(long, value_name = "BYTES")]
    pub max_pinned_memory: Option<String>,
    /// Runs of each policy, the policies interleaved; summaries show medians.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: usize,
    /// Start every run with a cold cache (no warm-up read of the data).
    #[arg(long)]
    pub cold: bool,
    /// How long write-back's drain may take after a run.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Directory for one JSON record per run, summary.md, and the charts (PNG and SVG).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// File for every run record in one JSON array, rewritten after each run.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// What the framework, the embedded CMIs and Gemini's coordinator log to standard error
    /// during the runs: error, warn, info, debug, or a tracing directive.
    #[arg(long, value_name = "LEVEL", default_value = "error")]
    pub log_level: String,
    /// Application processes to split each run phase over (AppNodes: copies of this command over
    /// the same CMIs and data store, each with its share of --threads and its own write-back
    /// workers); their logs are merged and validated as one history.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub appnodes: usize,
    /// Runs one AppNode of a run, the job in FILE (what --appnodes starts; not for users).
    #[arg(long, value_name = "FILE", hide = true)]
    pub appnode: Option<PathBuf>,
    /// TARDIS for write-around and write-through (000 ch. 4): while the data store is down,
    /// writes are buffered in the cache and applied once it is back. tar: misses are refused and
    /// writes buffered until every buffered write is applied; dis: writes apply their documents'
    /// buffered writes first; tard: misses do; tardis: both. With --appnodes, Recon keeps the
    /// AppNodes consistent unless --tardis-appnodes says otherwise.
    #[arg(long, value_name = "TECHNIQUE", value_parser = technique)]
    pub tardis: Option<Technique>,
    /// TARDIS: how AppNodes that may see the data store in different modes stay consistent.
    /// recon: every miss and write checks its documents for buffered writes; contextual: writes
    /// made while the data store is down mark their keys, and only a miss on a marked key checks.
    #[arg(long, value_name = "HOW", value_parser = appnodes_consistency, requires = "tardis")]
    pub tardis_appnodes: Option<AppNodes>,
    /// TARDIS: Active Recovery workers per AppNode (0: buffered writes are applied only by
    /// requests that touch their documents).
    #[arg(long, value_name = "N", default_value_t = TardisConfig::default().ar_workers, requires = "tardis")]
    pub ar_workers: usize,
    /// TARDIS: documents an AR worker picks per iteration (alpha).
    #[arg(long, value_name = "N", default_value_t = TardisConfig::default().alpha, requires = "tardis")]
    pub alpha: usize,
    /// TARDIS: TeleW keys listing the documents with buffered writes (omega).
    #[arg(long, value_name = "N", default_value_t = TardisConfig::default().telew, requires = "tardis")]
    pub telew: usize,
    /// TARDIS: successful probes of the data store that end failed mode (p).
    #[arg(long, value_name = "N", default_value_t = TardisConfig::default().recover_after, requires = "tardis")]
    pub recover_after: usize,
    /// Makes the data store unreachable during the run phase, from AT for FOR (5s+20s):
    /// PostgreSQL and MariaDB through a relay that cuts every connection, SQLite by failing its
    /// calls. The record gains an outage object (writes taken, refused, read errors, dirty
    /// documents per second, recovery time).
    #[arg(long, value_name = "AT+FOR", value_parser = Outage::parse)]
    pub outage: Option<Outage>,
    /// Gemini (004), write-around only: a coordinator over the embedded CMIs routes keys by
    /// fragments and moves a failed CMI's fragments to the others. What becomes of a CMI that
    /// comes back with its content: gemini-i (its dirty keys deleted), gemini-o (overwritten
    /// with the secondary's values), volatile (all discarded) or stale (kept unrepaired: a
    /// baseline that reads stale values, which the validator counts); gemini-i+w and gemini-o+w
    /// add working-set transfer (what a returning CMI misses is copied from the CMI that stood
    /// in for it, until its hit ratio is back or for at most 30 s).
    #[arg(long, value_name = "VARIANT", value_parser = recovery)]
    pub recovery: Option<Recovery>,
    /// Gemini: fragments the key space is split into.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "recovery")]
    pub fragments: u32,
    /// Gemini: how many CMIs fail during the run phase (the first ones) and come back with
    /// their content (see --fail-kind). The record gains their hit ratio over time and the time
    /// to restore it.
    #[arg(long, value_name = "K", requires_all = ["recovery", "fail_at", "fail_for"])]
    pub fail_cmis: Option<usize>,
    /// Gemini: when the CMIs fail, from the start of the run phase.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "fail_cmis")]
    pub fail_at: Option<Duration>,
    /// Gemini: how long they stay away.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "fail_cmis")]
    pub fail_for: Option<Duration>,
    /// Gemini: how they fail. cut: the embedded CMIs are cut off from everyone (a relay in
    /// front of each) and keep their content in memory; kill: the CMIs run as `cads server`
    /// processes keeping append-only files, and the failing ones are killed (SIGKILL) and
    /// started again from their files.
    #[arg(long, value_name = "KIND", value_parser = fail_kind, default_value = "cut", requires = "fail_cmis")]
    pub fail_kind: FailKind,
}

fn field_length(text: &str) -> Result<FieldLength, String> {
    FieldLength::parse(text).ok_or_else(|| format!("{text:?} is not a length (use bytes or etc)"))
}

fn fail_kind(text: &str) -> Result<FailKind, String> {
    FailKind::parse(text).ok_or_else(|| format!("unknown failure {text:?} (use cut or kill)"))
}

fn recovery(text: &str) -> Result<Recovery, String> {
    Recovery::parse(text).ok_or_else(|| {
        let names = Recovery::names().join(", ");
        format!("unknown recovery {text:?} (use one of {names})")
    })
}

fn appnodes_consistency(text: &str) -> Result<AppNodes, String> {
    AppNodes::parse(text)
        .filter(|a| *a != AppNodes::One)
        .ok_or_else(|| format!("unknown choice {text:?} (use recon or contextual)"))
}

fn parse_buffering(text: &str) -> Result<Buffering, String> {
    Buffering::parse(text).ok_or_else(|| format!("unknown buffering {text:?} (use rmw or append)"))
}

fn technique(text: &str) -> Result<Technique, String> {
    Technique::parse(text)
        .ok_or_else(|| format!("unknown technique {text:?} (use tar, dis, tard or tardis)"))
}

impl Common {
    /// The options every benchmark shares, with the benchmark's own flags for threads,
    /// write-back workers and seed.
    fn options(&self, threads: usize, workers: usize, seed: u64) -> CommonOptions {
        CommonOptions {
            policies: self.policy.0.clone(),
            store: self.store.clone(),
            cache: self.cache.clone(),
            cmi: self.cmi(),
            threads,
            workers,
            warm: !self.cold,
            repeat: self.repeat,
            seed,
            drain_timeout: self.drain_timeout,
            json: self.json.clone(),
            appnodes: self.appnodes,
            tardis: self.tardis.map(|technique| TardisConfig {
                technique,
                ar_workers: self.ar_workers,
                alpha: self.alpha,
                telew: self.telew,
                recover_after: self.recover_after,
                appnodes: self.tardis_appnodes.unwrap_or(AppNodes::One),
            }),
            outage: self.outage,
            gemini: self.recovery.map(|recovery| GeminiOptions {
                recovery,
                fragments: self.fragments,
                fail: self.fail_cmis.zip(self.fail_at.zip(self.fail_for)).map(
                    |(cmis, (at, length))| CmiFailure {
                        cmis,
                        at,
                        length,
                        kind: self.fail_kind,
                    },
                ),
            }),
        }
    }

    /// The CMIs' settings: embedded ones' memory, and how the framework reaches any of them.
    fn cmi(&self) -> CmiSettings {
        CmiSettings {
            maxmemory: self.maxmemory.clone(),
            max_pinned_memory: self.max_pinned_memory.clone(),
            password: self.cache_password.clone().map(Password),
            tls: self.cache_tls_ca.clone().map(|tls| {
                let tls = match &self.cache_tls_name {
                    Some(name) => tls.with_server_name(name.clone()),
                    None => tls,
                };
                match &self.cache_tls_cert {
                    Some(identity) => tls.with_identity(identity.clone()),
                    None => tls,
                }
            }),
            write_back_key: self.write_back_key.clone(),
            write_back_replicas: self.write_back_replicas.map(usize::from),
            write_back_buffering: self.write_back_buffering,
            worker_pause: self.worker_pause,
            unix_sockets: self.cmi_transport == "unix",
        }
    }
}

/// `cads bench ycsb`.
#[derive(Args, Debug)]
pub struct YcsbArgs {
    #[command(flatten)]
    pub common: Common,
    /// Workload: A, B, C, D, E, F (YCSB's), S (95% scans of 5 records, 5% updates), CPR
    /// (scans and updates; see --scan-share, --scan-length, --projection) or ETC (95% reads, 5%
    /// updates, zipfian, one field as long as Facebook's ETC values).
    #[arg(long, default_value = "A")]
    pub workload: String,
    /// Threads issuing operations (load, warm-up and run phases).
    #[arg(long, value_name = "N", default_value_t = YcsbOptions::default().common.threads)]
    pub threads: usize,
    /// Length of the run phase (8s, 2m, 500ms). [default: 10s, unless --operations is given]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Operations of the run phase over all threads; with --duration too, the first reached
    /// ends the run.
    #[arg(long, value_name = "N")]
    pub operations: Option<u64>,
    /// Records loaded.
    #[arg(long, value_name = "N", default_value_t = YcsbOptions::default().records)]
    pub records: u64,
    /// Key distribution: zipfian, uniform or latest. [default: the workload's]
    #[arg(long, value_parser = Distribution::parse)]
    pub distribution: Option<Distribution>,
    /// Zipfian constant (YCSB's 0.99; the papers also use 0.75).
    #[arg(long, value_name = "C", default_value_t = YcsbOptions::default().zipfian_constant)]
    pub zipfian_constant: f64,
    /// Fields an update writes: all (as the papers do) or one (YCSB's default). [default: all]
    #[arg(long, value_name = "all|one", value_parser = Fields::parse)]
    pub update_fields: Option<Fields>,
    /// A fixed scan length (CPR: 5, 10 or 100).
    #[arg(long, value_name = "N")]
    pub scan_length: Option<u64>,
    /// Share of scans, the rest updates (CPR's f, 0.1 to 1.0).
    #[arg(long, value_name = "F")]
    pub scan_share: Option<f64>,
    /// Fields a scan returns of each record: all (CPR's YCSB*) or one (YCSB^1).
    #[arg(long, value_name = "all|one", value_parser = Fields::parse)]
    pub projection: Option<Fields>,
    /// CPR's β in percent: 100 caches each range's whole result, 0 each record once (the
    /// Dendrite keeps each range's ids); between, a range is cached whole unless it would share
    /// more than β% of its records with a range cached whole, and then as 0 caches it.
    #[arg(long, value_name = "0..100", default_value_t = YcsbOptions::default().beta)]
    pub beta: u8,
    /// Fields per record. [default: the workload's, 10; ETC: 1]
    #[arg(long, value_name = "N")]
    pub field_count: Option<usize>,
    /// Bytes per field (at least 16: each field starts with its version), or etc: each field
    /// as long as a value of Facebook's ETC pool (generalized Pareto, median 168 bytes).
    /// [default: the workload's, 100; ETC: etc]
    #[arg(long, value_name = "BYTES|etc", value_parser = field_length)]
    pub field_length: Option<FieldLength>,
    /// Gemini (004 Fig. 10): an access pattern that changes when the CMIs fail. Reads and
    /// updates go to the first half of the records until --fail-at; from then on the hottest
    /// PCT% of that half's keys are replaced by their counterparts in the second half (100: the
    /// whole working set changes). Only the first half is warmed.
    #[arg(long, value_name = "PCT", requires = "fail_cmis")]
    pub pattern_change: Option<u8>,
    /// Write-back's background workers.
    #[arg(long, value_name = "N", default_value_t = YcsbOptions::default().common.workers)]
    pub workers: usize,
    /// Seed of the load's and the threads' generators.
    #[arg(long, default_value_t = YcsbOptions::default().common.seed)]
    pub seed: u64,
    /// The collection, dropped and reloaded for every run.
    #[arg(long, default_value_t = YcsbOptions::default().table)]
    pub table: String,
    /// The bound on each data-store call: a call caught behind a checkpoint shows up as
    /// latency instead of failing the run.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub store_timeout: Duration,
}

impl YcsbArgs {
    /// The library's options.
    pub fn options(&self) -> YcsbOptions {
        YcsbOptions {
            common: self.common.options(self.threads, self.workers, self.seed),
            workload: self.workload.clone(),
            duration: self.duration,
            operations: self.operations,
            records: self.records,
            distribution: self.distribution,
            zipfian_constant: self.zipfian_constant,
            update_fields: self.update_fields,
            scan_length: self.scan_length,
            scan_share: self.scan_share,
            projection: self.projection,
            beta: self.beta,
            field_count: self.field_count,
            field_length: self.field_length,
            pattern_change: self.pattern_change,
            table: self.table.clone(),
            store_timeout: self.store_timeout,
            ..YcsbOptions::default()
        }
    }
}

pub(crate) fn parse_layout(text: &str) -> Result<LayoutKind> {
    LayoutKind::parse(text).ok_or_else(|| anyhow!("unknown layout {text:?} (use documents or sql)"))
}

/// `cads bench bg`.
#[derive(Args, Debug)]
pub struct BgArgs {
    #[command(flatten)]
    pub common: Common,
    /// Mix: 90, 99, 99.9 (000 Table 3.5, percent of reads) or 10:1, 100:1, 1000:1 (001 Table 1).
    #[arg(long, default_value_t = BgOptions::default().workload)]
    pub workload: String,
    /// Implementation of the actions: documents (the document layer; every policy) or sql
    /// (tables with 001's key layouts; not write-back).
    #[arg(long, default_value = "documents", value_parser = parse_layout)]
    pub layout: LayoutKind,
    /// Threads issuing actions (BG's socialites); with --soar, the search chooses.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().common.threads)]
    pub threads: usize,
    /// Length of a run, or with --soar of each run of the search (8s, 2m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Members of the social graph.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().members)]
    pub members: u32,
    /// Confirmed friends per member (even).
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().friends)]
    pub friends: u32,
    /// Pending invitations each member has received at load time.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().pending)]
    pub pending: u32,
    /// How members are chosen: dzipfian (BG's, mean 0.27), dzipfian:MEAN or uniform.
    #[arg(long, default_value = "dzipfian", value_parser = Popularity::parse)]
    pub distribution: Popularity,
    /// Find the SoAR: double the threads from --soar-start until the SLA fails, then bisect.
    #[arg(long)]
    pub soar: bool,
    /// First thread count of the SoAR search.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().soar_start)]
    pub soar_start: usize,
    /// Thread count where the SoAR search stops doubling.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().max_threads)]
    pub max_threads: usize,
    /// SLA: the latency most actions must meet.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_duration)]
    pub sla_latency: Duration,
    /// SLA: the share of actions that must meet it.
    #[arg(long, value_name = "SHARE", default_value_t = Sla::default().satisfied)]
    pub sla_satisfied: f64,
    /// SLA: the largest share of reads that may be stale.
    #[arg(long, value_name = "SHARE", default_value_t = Sla::default().max_stale)]
    pub sla_stale: f64,
    /// Write-back's background workers.
    #[arg(long, value_name = "N", default_value_t = BgOptions::default().common.workers)]
    pub workers: usize,
    /// Seed of the threads' generators.
    #[arg(long, default_value_t = BgOptions::default().common.seed)]
    pub seed: u64,
    /// Writes skip the cache (no invalidation, no update): a deliberately broken policy, to see
    /// validation report stale reads (the command then exits with status 1).
    #[arg(long)]
    pub broken: bool,
}

impl BgArgs {
    /// The library's options.
    pub fn options(&self) -> BgOptions {
        BgOptions {
            common: self.common.options(self.threads, self.workers, self.seed),
            workload: self.workload.clone(),
            layout: self.layout,
            duration: self.duration,
            members: self.members,
            friends: self.friends,
            pending: self.pending,
            popularity: self.distribution,
            soar: self.soar,
            sla: Sla {
                satisfied: self.sla_satisfied,
                latency: self.sla_latency,
                max_stale: self.sla_stale,
            },
            soar_start: self.soar_start,
            max_threads: self.max_threads,
            broken: self.broken,
        }
    }
}

/// `cads bench tpcc`.
#[derive(Args, Debug)]
pub struct TpccArgs {
    #[command(flatten)]
    pub common: Common,
    /// Warehouses.
    #[arg(long, value_name = "N", default_value_t = TpccOptions::default().warehouses)]
    pub warehouses: u32,
    /// Size of a warehouse: spec (100,000 items, 3,000 customers per district) or hundredth.
    #[arg(long, default_value = "spec", value_parser = Scale::parse)]
    pub scale: Scale,
    /// Terminals, spread evenly over the warehouses, each owning a range of districts.
    #[arg(long, value_name = "N", default_value_t = TpccOptions::default().common.threads)]
    pub threads: usize,
    /// Length of the measured interval (30s, 2m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Weights of New-Order, Payment, Order-Status, Delivery and Stock-Level.
    #[arg(long, value_name = "NO,P,OS,D,SL", default_value = "45,43,4,4,4", value_parser = Mix::parse)]
    pub mix: Mix,
    /// Write-back's background workers.
    #[arg(long, value_name = "N", default_value_t = TpccOptions::default().common.workers)]
    pub workers: usize,
    /// Threads inserting the initial database.
    #[arg(long, value_name = "N", default_value_t = TpccOptions::default().load_threads)]
    pub load_threads: usize,
    /// Write-back's sessions a worker applies per data-store transaction (more: fewer
    /// transactions, but longer ones, which deadlock more often with another queue's).
    #[arg(long, value_name = "N", default_value_t = TpccOptions::default().write_back_batch,
          value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    pub write_back_batch: usize,
    /// Load the database once, before the first run; later runs go on with the data the
    /// previous one left (faster, but the policies no longer start from the same data).
    #[arg(long)]
    pub keep_data: bool,
    /// Prefix of the table names.
    #[arg(long, default_value_t = TpccOptions::default().prefix)]
    pub prefix: String,
    /// Seed of the loader's and the terminals' generators.
    #[arg(long, default_value_t = TpccOptions::default().common.seed)]
    pub seed: u64,
}

impl TpccArgs {
    /// The library's options.
    pub fn options(&self) -> TpccOptions {
        TpccOptions {
            common: self.common.options(self.threads, self.workers, self.seed),
            warehouses: self.warehouses,
            scale: self.scale,
            duration: self.duration,
            mix: self.mix,
            prefix: self.prefix.clone(),
            keep_data: self.keep_data,
            load_threads: self.load_threads,
            write_back_batch: self.write_back_batch,
            ..TpccOptions::default()
        }
    }
}

/// Runs a benchmark (`run`, given the progress callback), showing its progress; returns its
/// records.
pub fn with_progress<R>(
    progress: &Progress,
    run: impl FnOnce(&(dyn Fn(harness::Progress) + Sync)) -> Result<R>,
) -> Result<R> {
    let records = run(&|p: harness::Progress| {
        progress.show(
            &p,
            Report {
                label: p.label(),
                phase: p.phase.name(),
                done: p.done,
                total: p.total,
                elapsed: p.elapsed,
                expected: p.expected,
                note: &p.note,
            },
        )
    });
    progress.finish();
    records
}

/// Runs a benchmark with `opts`, showing progress; returns the records.
pub fn run_benchmark<O: BenchmarkOptions>(
    opts: &O,
    progress: &Progress,
) -> Result<Vec<BenchRecord<O::Benchmark>>> {
    with_progress(progress, |p| opts.run(&ThisProgram, p))
}

/// Runs `cads bench`; returns whether every run was consistent.
pub fn run(args: &BenchArgs) -> Result<bool> {
    match &args.benchmark {
        Benchmark::Ycsb(a) => bench(&a.options(), &a.common, |records| {
            ycsb::render_summary(&ycsb::summarize(records))
        }),
        Benchmark::Bg(a) => {
            let opts = a.options();
            bench(&opts, &a.common, |records| {
                print_searches(records);
                bg::render_summary(&bg::summarize(records), opts.soar)
            })
        }
        Benchmark::Tpcc(a) => bench(&a.options(), &a.common, |records| {
            tpcc::render_summary(&tpcc::summarize(records))
        }),
        Benchmark::BgLatency(a) => latency::bg(a).map(|()| true),
        Benchmark::YcsbLatency(a) => latency::ycsb(a).map(|()| true),
    }
}

/// Runs a benchmark with `opts`, showing progress, then prints `summary` of the records and
/// finishes (see [`finish`]); or, with `--appnode`, runs one AppNode of a run started by another
/// `cads bench`.
fn bench<O: BenchmarkOptions>(
    opts: &O,
    common: &Common,
    summary: impl FnOnce(&[BenchRecord<O::Benchmark>]) -> String,
) -> Result<bool> {
    cads_server::init_logging(&common.log_level);
    if let Some(job) = &common.appnode {
        harness::serve_appnode(&opts.benchmark()?, job)?;
        return Ok(true);
    }
    let records = run_benchmark(opts, &Progress::new())?;
    let summary = summary(&records);
    finish(&records, &summary, common.out.as_deref())
}

/// BG's SoAR searches, probe by probe, on standard error.
fn print_searches(records: &[bg::BgRecord]) {
    for r in records {
        let Some(s) = &r.detail.soar else { continue };
        let probes: Vec<String> = s
            .probes
            .iter()
            .map(|p| {
                let verdict = if p.meets_sla {
                    "meets the SLA"
                } else {
                    "fails"
                };
                format!("T={} {:.0}/s {verdict}", p.threads, p.throughput)
            })
            .collect();
        eprintln!(
            "bg {} {} #{} search: {}",
            r.workload,
            r.policy,
            r.run,
            probes.join(", ")
        );
    }
}

/// After a benchmark: prints the summary (standard output) and what went wrong in each run
/// (standard error), writes `out` when given, and returns whether every run was consistent.
pub fn finish<R: Serialize>(records: &[R], summary: &str, out: Option<&Path>) -> Result<bool> {
    let values: Vec<Value> = records
        .iter()
        .map(|r| serde_json::to_value(r).context("a run record does not serialize"))
        .collect::<Result<_>>()?;
    for v in &values {
        let name = run_name(v);
        let cached = v.get("cache_check").and_then(|c| c.get("examples"));
        for (what, list) in [
            ("stale read", v.get("stale_examples")),
            ("lost write", v.get("lost_examples")),
            ("cached entry", cached),
            ("error", v.get("errors")),
        ] {
            for example in list.and_then(Value::as_array).into_iter().flatten() {
                let text = example
                    .as_str()
                    .map_or_else(|| example.to_string(), str::to_string);
                eprintln!("{name}: {what}: {text}");
            }
        }
    }
    print!("{summary}");
    if let Some(dir) = out {
        let written = write_out(dir, &values, summary)?;
        eprintln!("wrote {} files to {}", written, dir.display());
    }
    let problems = inconsistencies(&values);
    for p in &problems {
        eprintln!("inconsistent: {p}");
    }
    Ok(problems.is_empty())
}

/// `benchmark workload policy #run` of a record.
fn run_name(v: &Value) -> String {
    let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("?");
    let run = v.get("run").and_then(Value::as_u64).unwrap_or(0);
    format!(
        "{} {} {} #{run}",
        text("benchmark"),
        text("workload"),
        text("policy")
    )
}

/// What a run found wrong: stale reads, lost writes, cached entries that differ from the data
/// store (BG), or violated consistency conditions (TPC-C). Every policy promises consistency,
/// the data store alone included, so any is a failure; cache-aside (`redis-zindex` under YCSB's
/// CPR workload), the baseline without leases, promises none of the cache's, so its stale reads
/// and entries are not.
pub fn inconsistencies(values: &[Value]) -> Vec<String> {
    let count = |v: Option<&Value>, key: &str| {
        v.and_then(|v| v.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let mut problems = Vec::new();
    for v in values {
        let name = run_name(v);
        let stale = count(Some(v), "stale_reads");
        // Cache-aside runs without leases to show the stale values they allow: its stale reads
        // and stale cached entries are counted, not failures of the run.
        let shows_staleness = matches!(
            v.get("policy").and_then(Value::as_str),
            Some("cache-aside" | cads_bench::harness::REDIS_ZINDEX)
        );
        if stale > 0 && !shows_staleness {
            problems.push(format!("{name}: {stale} stale reads"));
        }
        let lost = count(Some(v), "lost_writes");
        if lost > 0 {
            problems.push(format!("{name}: {lost} lost writes"));
        }
        if v.get("benchmark").and_then(Value::as_str) == Some("bg") {
            let differ = count(v.get("cache_check"), "mismatches");
            if differ > 0 && !shows_staleness {
                problems.push(format!(
                    "{name}: {differ} cached entries differ from the data store"
                ));
            }
        }
        for condition in v
            .get("consistency")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let violations = count(Some(condition), "violations");
            if violations > 0 {
                let id = condition.get("id").and_then(Value::as_str).unwrap_or("?");
                let rule = condition.get("rule").and_then(Value::as_str).unwrap_or("");
                problems.push(format!(
                    "{name}: consistency condition {id} ({rule}) broken {violations} times"
                ));
            }
        }
    }
    problems
}

/// Writes `<benchmark>-<workload>-<policy>-<run>.json` per record, `summary.md`, and the
/// charts into `dir`; returns how many files.
pub fn write_out(dir: &Path, values: &[Value], summary: &str) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut runs = Vec::new();
    for v in values {
        let run = RunPoint::from_json(v)
            .with_context(|| format!("{} is not a run record", run_name(v)))?;
        let path = dir.join(format!("{}.json", run.file_stem()));
        let text = serde_json::to_string_pretty(v).context("a run record does not serialize")?;
        std::fs::write(&path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        runs.push(run);
    }
    let path = dir.join("summary.md");
    std::fs::write(&path, summary).with_context(|| format!("writing {}", path.display()))?;
    let charts = draw_charts(&runs, dir)?;
    Ok(values.len() + 1 + charts.len())
}
