//! `--appnodes N`: a run phase split over N application processes (AppNodes), copies of the
//! program the [`Launcher`] starts, each with its share of the threads (and of `--operations`),
//! its own framework and write-back workers, over the CMIs and the data store of the process
//! that deployed them (its embedded CMIs are external CMIs to them). The processes time their
//! logs on one clock ([`Clock`]: the machine's monotonic clock), and the process that deployed
//! merges them and validates them as one history.
//!
//! The conversation, one JSON message a line on the AppNode's standard output, and a line on its
//! standard input:
//!
//! 1. the parent writes a [`Job`] to a file and starts the AppNode with `--appnode FILE`;
//! 2. the AppNode attaches to the deployment (builds what the load built, without loading) and
//!    says `Ready`; once every AppNode is ready, the parent writes `go` to each;
//! 3. the AppNode runs its threads, says `Progress` every second (operations done, write-back's
//!    counters), writes its results (a [`NodeReport`]) to the job's result file, and exits.
//!
//! The parent samples pinned memory, reports progress, and after the run drains write-back and
//! verifies, as for a run in one process. Anything a process assumes unique is made unique
//! across them: thread indexes (and so YCSB's version tokens) are global, YCSB's inserts are
//! strided by AppNode, BG's writes stay among each AppNode's own members.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cads::store::CallCounts;
use cads::tardis::Recovery;
use cads::{Coordinator, IdRanges, IdServer, Mode, Policy, TardisCounts, Workers, WriteBackCounts};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::drive::{self, drive, RecentLatencies, ThreadSet, TICK};
use super::outage::{
    cut_off, dirty, AppNodesRecovered, Cut, Happened, OutageRecord, Stall, Timeline,
};
use super::{
    drain_left, AppNode, Benchmark, Clock, Counters, Env, Limit, Measured, Nanos, NodeResult,
    PolicyRun, Reporter, RunLog, Sampler,
};
use crate::deploy::{Deployment, Launcher};

/// What an AppNode runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    /// The policy's name.
    policy: String,
    /// Which run of the policy (`--repeat`).
    run: usize,
    /// Runs on this load before this one.
    run_on_load: u64,
    /// Which AppNode, of how many.
    appnode: AppNode,
    /// Its threads' global indexes.
    threads: Range<usize>,
    /// Threads over all AppNodes.
    total_threads: usize,
    /// Its share of `--operations`.
    operations: Option<u64>,
    /// The CMIs.
    cmis: Vec<SocketAddr>,
    /// Where they serve Unix sockets too (`--cmi-transport unix`).
    cmi_unix_dir: Option<PathBuf>,
    /// The SAS core, and whether the AppNodes fetch from each other, under `--cache sas`.
    #[serde(default)]
    sas_core: Option<(SocketAddr, bool)>,
    /// The deploying process's session-id service, which numbers every AppNode's sessions.
    session_ids: SocketAddr,
    /// The data store.
    store_url: String,
    /// The run's clock.
    clock: Clock,
    /// Where it writes its [`NodeReport`].
    result: PathBuf,
    /// What the benchmark hands its AppNodes ([`Benchmark::handoff`]).
    #[serde(default)]
    handoff: Option<serde_json::Value>,
}

/// What the parent last heard from an AppNode: its `Progress`, with the latencies it reported
/// since the parent's last tick.
struct Heard {
    done: u64,
    write_back: WriteBackCounts,
    recent: Histogram<u64>,
}

impl Heard {
    fn new() -> Heard {
        Heard {
            done: 0,
            write_back: WriteBackCounts::default(),
            recent: drive::histogram(),
        }
    }
}

/// What an AppNode says on its standard output.
#[derive(Debug, Serialize, Deserialize)]
enum Message {
    /// Attached, waiting for `go`.
    Ready,
    /// Operations done so far, write-back's counters since the run began, and (in runs that
    /// fail CMIs) the latencies of the operations since the last `Progress`, as buckets.
    Progress {
        done: u64,
        #[serde(with = "counts")]
        write_back: WriteBackCounts,
        recent: Vec<(u64, u64)>,
    },
}

/// What an AppNode measured.
#[derive(Serialize, Deserialize)]
#[serde(bound = "L: RunLog")]
pub struct NodeReport<L> {
    node: NodeResult<L>,
    /// Data-store calls: reads, writes, transactions.
    calls: [u64; 3],
    round_trips: u64,
    /// SAS: the AppNode's own cache's hits and misses (each AppNode has its own).
    #[serde(default)]
    sas_keyspace: Option<(u64, u64)>,
    #[serde(with = "counts")]
    write_back: WriteBackCounts,
    /// TARDIS's counters (None: TARDIS off).
    #[serde(with = "tardis_counts")]
    tardis: Option<TardisCounts>,
    /// TARDIS: when it last entered normal mode, on the run's clock.
    normal_since: Option<Nanos>,
    /// TARDIS: how long its last recovery mode lasted, in seconds.
    last_recovery_s: Option<f64>,
}

/// [`TardisCounts`] as a list, in the order of its fields.
mod tardis_counts {
    use cads::TardisCounts;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &Option<TardisCounts>, s: S) -> Result<S::Ok, S::Error> {
        c.map(|c| {
            [
                c.failures,
                c.recoveries,
                c.writes_teleported,
                c.writes_refused,
                c.writes_failed,
                c.misses_refused,
                c.applied_on_demand,
                c.applied_by_workers,
            ]
        })
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TardisCounts>, D::Error> {
        Ok(<Option<[u64; 8]>>::deserialize(d)?.map(
            |[failures, recoveries, writes_teleported, writes_refused, writes_failed, misses_refused, applied_on_demand, applied_by_workers]| {
                TardisCounts {
                    failures,
                    recoveries,
                    writes_teleported,
                    writes_refused,
                    writes_failed,
                    misses_refused,
                    applied_on_demand,
                    applied_by_workers,
                }
            },
        ))
    }
}

/// [`WriteBackCounts`] as a list, in the order of its fields.
mod counts {
    use cads::WriteBackCounts;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(c: &WriteBackCounts, s: S) -> Result<S::Ok, S::Error> {
        [
            c.buffered,
            c.applied_writes,
            c.applied_ops,
            c.conversions,
            c.buffered_sessions,
            c.applied_sessions,
            c.fallbacks,
            c.refused_unauthenticated,
            c.refused_malformed,
        ]
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<WriteBackCounts, D::Error> {
        let [buffered, applied_writes, applied_ops, conversions, buffered_sessions, applied_sessions, fallbacks, refused_unauthenticated, refused_malformed] =
            <[u64; 9]>::deserialize(d)?;
        Ok(WriteBackCounts {
            buffered,
            applied_writes,
            applied_ops,
            conversions,
            buffered_sessions,
            applied_sessions,
            fallbacks,
            refused_unauthenticated,
            refused_malformed,
        })
    }
}

/// A started AppNode; killed if dropped before it finished.
struct Running {
    child: Child,
    stdout: BufReader<ChildStdout>,
    result: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads the next message of an AppNode; None at the end of its output.
fn receive(stdout: &mut BufReader<ChildStdout>) -> Result<Option<Message>> {
    let mut line = String::new();
    if stdout.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .with_context(|| format!("an AppNode said {line:?}"))
}

/// The run phase split over `--appnodes` processes started with `launcher`: what they measured,
/// merged, with this process's samples and counters.
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure<B: Benchmark>(
    bench: &B,
    run: &PolicyRun<'_>,
    dep: &Deployment,
    threads: usize,
    run_on_load: u64,
    launcher: &dyn Launcher,
    cut: Cut<'_>,
    handoff: Option<serde_json::Value>,
) -> Result<Measured<B::Log>> {
    let opts = bench.options();
    let count = opts.appnodes;
    let limit = bench.limit();
    // The jobs name the data store (with its password) and what the benchmark hands over (the
    // CPR ranges' owner's token).
    let dir = crate::private_dir("cads-appnodes-").context("a directory for the AppNodes' jobs")?;
    dep.faults.reset_counts();
    let before = Counters::take(dep);
    let clock = Clock::start();
    let mut nodes = Vec::with_capacity(count);
    for index in 0..count {
        let appnode = AppNode { index, count };
        let job = Job {
            policy: run.policy.name().to_string(),
            run: run.run,
            run_on_load,
            appnode,
            threads: appnode.share(threads),
            total_threads: threads,
            operations: limit
                .operations
                .map(|ops| appnode.share(ops as usize).len() as u64),
            cmis: dep.cmi_addrs(),
            cmi_unix_dir: dep.cads.config().cache_unix_dir.clone(),
            sas_core: dep.sas_core(),
            session_ids: session_id_service()?,
            store_url: run.store_url.to_string(),
            clock,
            result: dir.path().join(format!("result-{index}.json")),
            handoff: handoff.clone(),
        };
        let path = dir.path().join(format!("job-{index}.json"));
        let text = serde_json::to_string(&job).expect("a job serializes");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        let mut child = launcher
            .appnode_command()?
            .arg("--appnode")
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting an AppNode")?;
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        nodes.push(Running {
            child,
            stdout,
            result: job.result,
        });
    }
    for (index, node) in nodes.iter_mut().enumerate() {
        match receive(&mut node.stdout)? {
            Some(Message::Ready) => {}
            other => bail!("AppNode {index} did not start (it said {other:?}; see above)"),
        }
    }
    for node in &mut nodes {
        let mut stdin = node.child.stdin.take().expect("piped");
        writeln!(stdin, "go").context("starting an AppNode's run")?;
    }

    let mut sampler = Sampler::new::<B>(run, &dep.cads, limit);
    let started = Instant::now();
    let tracked = opts.outage.is_some() || opts.tardis.is_some();
    sampler.timeline = tracked.then(|| Timeline::new(started, false));
    sampler.load = opts.fails_cmis().then(Vec::new);
    let stop = AtomicBool::new(false);
    let progress: Vec<Mutex<Heard>> = (0..count).map(|_| Mutex::new(Heard::new())).collect();
    let write_back = run.policy == Policy::WriteBack;
    let (heard, happened, failed_cmis) = std::thread::scope(|scope| {
        let cutter = opts.outage.map(|o| {
            let (cut, stop) = (&cut, &stop);
            scope.spawn(move || cut_off(cut, o, started, clock, stop))
        });
        let failer = scope.spawn(|| dep.fail_cmis(started, &stop));
        let readers: Vec<_> = nodes
            .iter_mut()
            .zip(&progress)
            .map(|(node, progress)| {
                let stdout = &mut node.stdout;
                scope.spawn(move || -> Result<()> {
                    while let Some(message) = receive(stdout)? {
                        if let Message::Progress {
                            done,
                            write_back,
                            recent,
                        } = message
                        {
                            let mut heard = progress.lock().expect("not poisoned");
                            heard.done = done;
                            heard.write_back = write_back;
                            heard
                                .recent
                                .add(drive::from_buckets(&recent))
                                .expect("histograms of the same bounds");
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let started = Instant::now();
        let mut next_tick = started + TICK;
        while !readers.iter().all(|r| r.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if Instant::now() >= next_tick {
                let mut all = Heard::new();
                for p in &progress {
                    let mut p = p.lock().expect("not poisoned");
                    all.done += p.done;
                    all.write_back = all.write_back + p.write_back;
                    all.recent
                        .add(&p.recent)
                        .expect("histograms of the same bounds");
                    p.recent.reset();
                }
                let own = dep.cads.write_back_stats().snapshot().since(&before.wb);
                let recent = opts.fails_cmis().then_some(all.recent);
                sampler.tick(all.done, write_back.then_some(all.write_back + own), recent);
                next_tick += TICK;
            }
        }
        stop.store(true, Ordering::Release);
        let happened = cutter.map_or(Happened::default(), |c| {
            c.join().expect("the outage thread does not panic")
        });
        let failed_cmis = failer
            .join()
            .expect("the CMI failure thread does not panic");
        let heard: Vec<Result<()>> = readers
            .into_iter()
            .map(|r| {
                r.join()
                    .map_err(|_| anyhow!("an AppNode's reader panicked"))?
            })
            .collect();
        (heard, happened, failed_cmis)
    });
    let mut merged: Option<NodeReport<B::Log>> = None;
    for (index, (mut node, heard)) in nodes.into_iter().zip(heard).enumerate() {
        let status = node.child.wait().context("waiting for an AppNode")?;
        if !status.success() {
            bail!("AppNode {index} failed ({status}; its error is above)");
        }
        heard.with_context(|| format!("reading AppNode {index}"))?;
        let report: NodeReport<B::Log> = read_report(&node.result)
            .with_context(|| format!("reading the results of AppNode {index}"))?;
        merged = Some(match merged {
            None => report,
            Some(mut total) => {
                total.node.merge(report.node);
                for (sum, n) in total.calls.iter_mut().zip(report.calls) {
                    *sum += n;
                }
                total.round_trips += report.round_trips;
                total.sas_keyspace = match (total.sas_keyspace, report.sas_keyspace) {
                    (Some(a), Some(b)) => Some((a.0 + b.0, a.1 + b.1)),
                    (a, b) => a.or(b),
                };
                total.write_back = total.write_back + report.write_back;
                total.normal_since = total.normal_since.max(report.normal_since);
                total.last_recovery_s = match (total.last_recovery_s, report.last_recovery_s) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                total.tardis = match (total.tardis, report.tardis) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                total
            }
        });
    }
    let total = merged.expect("at least one AppNode");
    let after = Counters::take(dep);
    let node = total.node;
    let elapsed_s = node.finished.saturating_sub(node.started) as f64 / 1e9;
    let failed_operations = node.failed.iter().sum();
    let done = node.completed();
    let timeline = sampler.timeline.take();
    let load = sampler.load.take();
    let mut measured = sampler.finish(threads, elapsed_s, node, before.until(&after, elapsed_s));
    measured.gemini = failed_cmis
        .transpose()
        .context("failing CMIs (--fail-cmis)")?
        .map(|g| g.with_load(load));
    let failed = total.tardis.is_some_and(|t| t.failures > 0);
    if let Some(timeline) = timeline.filter(|_| opts.outage.is_some() || failed) {
        let mut record = OutageRecord::of_run(opts, failed_operations);
        match total.tardis {
            Some(counts) => {
                // The AppNodes waited for their recovery before they ended.
                let left = timeline.recover(
                    &dep.cads,
                    clock,
                    happened,
                    done,
                    opts.drain_timeout,
                    Some(AppNodesRecovered {
                        normal_since: total.normal_since,
                        longest_recovery_s: total.last_recovery_s,
                    }),
                    &mut record,
                );
                drain_left(&dep.cads, left, opts, &mut record)?;
                record.count(&counts);
            }
            None => timeline.finish(happened, &mut record),
        }
        measured.outage = Some(record);
    }
    let own = dep.faults.counts();
    measured.calls = CallCounts {
        reads: own.reads + total.calls[0],
        writes: own.writes + total.calls[1],
        transactions: own.transactions + total.calls[2],
    };
    measured.cache_round_trips += total.round_trips;
    if let (Some(keyspace), Some((hits, misses))) = (measured.keyspace.as_mut(), total.sas_keyspace)
    {
        keyspace.hits += hits;
        keyspace.misses += misses;
    }
    // This process's own (the owner of YCSB's CPR ranges buffers the writes forwarded to it)
    // and the AppNodes'.
    measured.write_back = measured.write_back + total.write_back;
    if write_back {
        measured.pinned.close(dep.cads.pinned_bytes());
    }
    Ok(measured)
}

fn read_report<L: RunLog>(path: &Path) -> Result<NodeReport<L>> {
    let file = std::fs::File::open(path)?;
    Ok(serde_json::from_reader(std::io::BufReader::new(file))?)
}

/// Tells the parent `message`, one line on standard output.
fn say(message: &Message) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, message).expect("a message serializes");
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// The deploying process's session-id service (000 §5.1), started at its first AppNode run:
/// AppNode processes take their session ids from it, so that no two number a session alike.
/// Its ids lie above those the deploying process numbers for itself (`cads_coord::ids`).
fn session_id_service() -> Result<SocketAddr> {
    static SERVICE: OnceLock<IdServer> = OnceLock::new();
    if let Some(service) = SERVICE.get() {
        return Ok(service.addr());
    }
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let server = IdServer::start(loopback, Some(Arc::new(IdRanges::in_memory())), None)
        .context("starting the session-id service for the AppNodes")?;
    Ok(SERVICE.get_or_init(|| server).addr())
}

/// Runs one AppNode of a run of `bench`: the job at `job_path` (written by the process that
/// deployed), talking to that process on standard input and output. What `cads bench ...
/// --appnode FILE` does.
pub fn serve_appnode<B: Benchmark>(bench: &B, job_path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(job_path)
        .with_context(|| format!("reading the job {}", job_path.display()))?;
    let job: Job = serde_json::from_str(&text).context("a job of an AppNode")?;
    // Before any client: every session of this process is numbered by the service.
    Coordinator::use_service(vec![job.session_ids], None).map_err(|e| anyhow!(e))?;
    let policy = Policy::parse(&job.policy)
        .ok_or_else(|| anyhow!("unknown policy {:?} in the job", job.policy))?;
    let store = cads::store::open(&job.store_url, &bench.store_options())
        .context("cannot open the data store")?;
    let opts = bench.options();
    let mut config = opts
        .cmi
        .framework_config(opts.with_tardis(bench.framework_config()));
    config.gemini = opts.gemini.is_some() && policy == cads::Policy::WriteAround;
    config.cache_unix_dir = job.cmi_unix_dir.clone();
    if let Some((core, ingest)) = job.sas_core {
        let mut sas = crate::deploy::sas_config(core, ingest);
        sas.password = opts.cmi.password.clone();
        config.sas = Some(sas);
    }
    let dep = Deployment::attach(policy, store, bench.miss_collection(), &job.cmis, config);
    let quiet = |_| {};
    let run = PolicyRun {
        policy,
        run: job.run,
        first: false,
        store_url: &job.store_url,
        reporter: Reporter {
            benchmark: B::NAME,
            workload: bench.workload(),
            policy,
            policy_name: bench.policy_name(policy),
            run: job.run,
            threads: job.threads.len(),
            progress: &quiet,
        },
    };
    let loaded = bench.attach(&run, &dep, job.appnode, job.handoff.as_ref())?;
    // Under SAS each AppNode's cache is its own: the parent's warm-up filled only the parent's.
    if job.sas_core.is_some() && opts.warm {
        bench.warm(&run, &dep, &loaded)?;
    }
    say(&Message::Ready)?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    if go.trim() != "go" {
        bail!("the parent did not start the run");
    }

    let cads = &dep.cads;
    dep.faults.reset_counts();
    let round_trips = dep.cache_round_trips();
    let sas_keyspace = dep.cads.sas_stats().and(dep.keyspace());
    let wb_before = cads.write_back_stats().snapshot();
    let workers = (policy == Policy::WriteBack)
        .then(|| Workers::start(cads.clone(), bench.options().workers));
    let recovery = match cads.mode() {
        Some(_) => Some(Recovery::start(cads.clone()).context("starting TARDIS's recovery")?),
        None => None,
    };
    let tardis_before = cads.tardis_counts();
    let set = ThreadSet {
        threads: job.threads.clone(),
        total: job.total_threads,
        appnode: job.appnode.index,
        appnodes: job.appnode.count,
        run_on_load: job.run_on_load,
    };
    let limit = Limit {
        duration: bench.limit().duration,
        operations: job.operations,
    };
    let recent = opts
        .fails_cmis()
        .then(|| RecentLatencies::new(job.threads.len()));
    let env = Env {
        cads,
        clock: job.clock,
        recent: recent.as_ref(),
    };
    let mut said = Ok(());
    let node = drive(bench, &loaded, &env, &set, limit, |done| {
        let write_back = cads.write_back_stats().snapshot().since(&wb_before);
        let recent = env
            .recent
            .map_or_else(Vec::new, |r| drive::buckets(&r.take()));
        if said.is_ok() {
            said = say(&Message::Progress {
                done,
                write_back,
                recent,
            });
        }
    });
    if let Some(workers) = workers {
        workers.stop();
    }
    if recovery.is_some() {
        // The data store may still be down, or buffered writes of this AppNode pending: it
        // ends once its recovery has (or stalled: the parent applies what is left).
        let deadline = Instant::now() + bench.options().drain_timeout;
        let mut stall = Stall::default();
        let mut next = Instant::now();
        while cads.mode() != Some(Mode::Normal) && Instant::now() < deadline {
            if Instant::now() >= next {
                next += Duration::from_secs(1);
                if stall.stalled(dirty(cads), cads) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(recovery);
    said.context("telling the parent the progress")?;
    let calls = dep.faults.counts();
    let report = NodeReport {
        node,
        calls: [calls.reads, calls.writes, calls.transactions],
        round_trips: dep.cache_round_trips() - round_trips,
        sas_keyspace: sas_keyspace
            .zip(dep.keyspace())
            .map(|(a, b)| (b.0 - a.0, b.1 - a.1)),
        write_back: cads.write_back_stats().snapshot().since(&wb_before),
        tardis: cads
            .tardis_counts()
            .zip(tardis_before)
            .map(|(now, then)| now.since(&then)),
        normal_since: match (cads.mode(), cads.in_mode_for()) {
            (Some(Mode::Normal), Some(d)) => {
                Some(job.clock.now().saturating_sub(d.as_nanos() as Nanos))
            }
            _ => None,
        },
        last_recovery_s: cads.last_recovery().map(|d| d.as_secs_f64()),
    };
    let file = std::fs::File::create(&job.result)
        .with_context(|| format!("writing {}", job.result.display()))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &report).context("writing the results")?;
    out.flush()?;
    Ok(())
}
