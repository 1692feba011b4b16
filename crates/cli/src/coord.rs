//! `cads coord`: Gemini's coordinator (004 §2.1) as a process of its own, over CMIs already
//! running; `cads coord status` prints the configuration the CMIs hold.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cads::sas::{Core, CoreSettings};
use cads::{Client, ClientConfig, Coordinator, Policy};
use cads_bench::parse_duration;
use cads_coord::configuration::{Configuration, InstanceState, Mode};
use cads_coord::etcd::{self, Etcd, Leadership};
use cads_coord::ids::IdServer;
use cads_coord::repair::Repair;
use cads_coord::service::{Service, ServiceOptions, CONFIGURATION_KEY};
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CoordArgs {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Print the newest configuration the CMIs hold: its id, the instances' states, and each
    /// fragment's mode and replicas.
    Status(Instances),
    /// Run the SAS core (001): the lease coordinator of AppNodes that cache in their own memory
    /// (`Config::sas`, `cads bench --cache sas`). It grants I and Q leases, knows which AppNodes
    /// hold each key, and tells them of every write before the write is acknowledged.
    Sas(SasArgs),
}

#[derive(Args, Debug)]
struct SasArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7400")]
    listen: SocketAddr,
    /// The AppNodes' write policy: write-around (Q leases shared, writes delete copies) or
    /// write-through (Q leases exclusive, writes refresh copies).
    #[arg(long, value_name = "write-around|write-through", default_value = "write-around", value_parser = sas_policy)]
    policy: Policy,
    /// How long an I or Q lease lasts: a writer must commit within it, or every copy of its
    /// keys is deleted.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    lease: Duration,
    /// How long an AppNode's lease lasts after each renewal: a write waits at most this long
    /// for an AppNode it cannot reach (which stops serving its copies before then).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    node_lease: Duration,
    /// Ingest: most AppNodes that may hold a copy of one key (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_replicas: usize,
    /// A password every connection must log in with (`AUTH`); the AppNodes give it as
    /// `SasConfig::password`. Without it, anyone who reaches the core can change what the
    /// AppNodes cache.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "CADS_SAS_PASSWORD",
        hide_env_values = true
    )]
    requirepass: Option<String>,
    /// Log level (error, warn, info, debug) or a tracing filter.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: String,
}

fn sas_policy(text: &str) -> Result<Policy> {
    match Policy::parse(text) {
        Some(p @ (Policy::WriteAround | Policy::WriteThrough)) => Ok(p),
        _ => bail!("the SAS core serves write-around or write-through, not {text:?}"),
    }
}

#[derive(Args, Debug)]
struct Instances {
    /// The CMIs, in the order the configuration numbers them: `host:port,host:port,...`.
    #[arg(long, value_name = "LIST", value_delimiter = ',', required = true)]
    cmis: Vec<SocketAddr>,
    /// The CMIs' password (their --requirepass).
    #[arg(long, value_name = "PASSWORD", env = "CADS_CACHE_PASSWORD")]
    cache_password: Option<String>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    instances: Option<Instances>,
    /// Fragments the key space is split into (a saved state keeps its own).
    #[arg(long, value_name = "N", default_value_t = 64)]
    fragments: u32,
    /// An instance that has not answered for this long is taken for failed; it stops serving
    /// keys a tenth of it earlier (its lease from the coordinator, on its own clock).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    lease: Duration,
    /// Time between probes of the instances.
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration)]
    probe_every: Duration,
    /// Where the configuration survives a restart of the coordinator (written atomically at
    /// every change). Without it, a restarted coordinator starts a new configuration.
    #[arg(long, value_name = "PATH")]
    state_file: Option<PathBuf>,
    /// What becomes of a returning instance's content: its dirty keys deleted (Gemini-I) or
    /// overwritten with the secondary's values (Gemini-O), or all of it discarded (as a volatile
    /// cache would come back; no dirty lists are kept then).
    #[arg(long, value_name = "invalidate|overwrite|discard", default_value = "invalidate", value_parser = repair)]
    repair: Repair,
    /// Working-set transfer (004's +W): while a returning instance recovers, clients copy what
    /// they miss on it from the instance that stood in for it, until its hit ratio is back to
    /// what it was before it failed, or for at most DURATION. Not with --repair discard.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    transfer_for: Option<Duration>,
    /// Serve session-id ranges on ADDR (`IDRANGE`), so that processes numbering their
    /// sessions from this coordinator never meet: each range is reserved in the state file
    /// (or etcd) before it is handed out, so that a restarted coordinator never hands it out
    /// again. With --etcd only the leader hands out ranges; a standby refuses them, and clients
    /// given every coordinator's address ask the next.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// High availability: keep the configuration and the leader's lease in etcd at URL
    /// (`http://host:port`, its client URL). Run several coordinators with the same --etcd and
    /// --cmis: one leads, the others stand by and take over, from the state it saved in etcd,
    /// once its etcd lease (2 s) has run out after its death. Not with --state-file.
    #[arg(long, value_name = "URL", conflicts_with = "state_file")]
    etcd: Option<String>,
    /// This coordinator's name in etcd's leader key [default: host name and process id].
    #[arg(long, value_name = "NAME", requires = "etcd")]
    name: Option<String>,
    /// A password every connection to --listen must log in with (`AUTH`).
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "CADS_COORD_PASSWORD",
        hide_env_values = true,
        requires = "listen"
    )]
    requirepass: Option<String>,
    /// Log level (error, warn, info, debug) or a tracing filter.
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    log_level: String,
}

fn repair(text: &str) -> Result<Repair> {
    match text {
        "invalidate" | "gemini-i" => Ok(Repair::Invalidate),
        "overwrite" | "gemini-o" => Ok(Repair::Overwrite),
        "discard" | "volatile" => Ok(Repair::Discard),
        other => bail!("unknown repair {other:?} (use invalidate, overwrite or discard)"),
    }
}

fn client(instances: &Instances) -> Client {
    let mut config = ClientConfig::new(instances.cmis.clone());
    config.password = instances.cache_password.clone();
    Client::new(config, Coordinator::process())
}

pub fn run(args: &CoordArgs) -> Result<bool> {
    match &args.action {
        Some(Action::Status(instances)) => status(instances).map(|()| true),
        Some(Action::Sas(args)) => sas_core(args).map(|()| true),
        None => coordinate(&args.run).map(|()| true),
    }
}

fn coordinate(args: &RunArgs) -> Result<()> {
    let Some(instances) = &args.instances else {
        bail!("--cmis is required: the CMIs to coordinate, in a fixed order");
    };
    if args.probe_every >= args.lease / 2 {
        bail!(
            "--probe-every ({:?}) must be under half of --lease ({:?}), or live instances lose \
             their lease between probes",
            args.probe_every,
            args.lease
        );
    }
    if args.transfer_for.is_some() && matches!(args.repair, Repair::Discard | Repair::Keep) {
        bail!("--transfer-for needs a repairing recovery (--repair invalidate or overwrite)");
    }
    cads_server::init_logging(&args.log_level);
    let options = ServiceOptions {
        fragments: args.fragments,
        lease: args.lease,
        probe_every: args.probe_every,
        state_file: args.state_file.clone(),
        repair: args.repair,
        transfer: args.transfer_for,
    };
    if let Some(url) = &args.etcd {
        return coordinate_through_etcd(args, instances, options, url);
    }
    let service =
        Service::start(client(instances), options, 0).context("starting the coordinator")?;
    let _id_service = match args.listen {
        Some(addr) => {
            if args.state_file.is_none() {
                tracing::warn!(
                    "session ids are served without --state-file: a restarted coordinator \
                     starts at a random point instead of after the ids it handed out"
                );
            }
            let server =
                IdServer::start(addr, Some(service.session_ids()), args.requirepass.clone())
                    .with_context(|| format!("listening on {addr} for session-id requests"))?;
            tracing::info!(addr = %server.addr(), "serving session-id ranges");
            Some(server)
        }
        None => None,
    };
    tracing::info!(
        configuration = service.configuration().id(),
        instances = instances.cmis.len(),
        fragments = service.configuration().fragments().len(),
        "coordinating"
    );
    service.run(cads_server::server::stop_on_signal());
    tracing::info!("stopped");
    Ok(())
}

/// The etcd lease a leader holds its key under, in seconds (etcd's shortest is about 2 s).
const LEADER_TTL_S: u64 = 2;

/// `cads coord --etcd`: stands by until this coordinator leads (see `cads_coord::etcd`), then
/// coordinates from the state the last leader saved, renewing the lead at every step; a lead
/// lost (or not renewed for half its lease) stops the service, and it stands by again.
fn coordinate_through_etcd(
    args: &RunArgs,
    instances: &Instances,
    options: ServiceOptions,
    url: &str,
) -> Result<()> {
    let etcd = Etcd::new(url).map_err(|e| anyhow!("--etcd: {e}"))?;
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "coordinator".into());
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("{host}-{}", std::process::id()));
    let stop = cads_server::server::stop_on_signal();
    // Listening from the start, refusing ranges until this coordinator leads.
    let id_service = match args.listen {
        Some(addr) => {
            let server = IdServer::start(addr, None, args.requirepass.clone())
                .with_context(|| format!("listening on {addr} for session-id requests"))?;
            tracing::info!(addr = %server.addr(), "serving session-id ranges while leading");
            Some(server)
        }
        None => None,
    };
    let mut standing_by = false;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        let leadership = match etcd.get(etcd::LEADER_KEY) {
            Ok(Some(_)) => None,
            Ok(None) => Leadership::campaign(&etcd, &name, LEADER_TTL_S).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot campaign in etcd");
                None
            }),
            Err(e) => {
                tracing::warn!(error = %e, url, "cannot reach etcd");
                None
            }
        };
        let Some(leadership) = leadership else {
            if !standing_by {
                tracing::info!(name, "standing by: another coordinator leads");
                standing_by = true;
            }
            std::thread::sleep(args.probe_every);
            continue;
        };
        standing_by = false;
        let service =
            Service::start_leading(client(instances), options.clone(), 0, leadership.clone())
                .context("starting the coordinator from the state in etcd")?;
        tracing::info!(
            name,
            configuration = service.configuration().id(),
            "leading"
        );
        if let Some(server) = &id_service {
            server.serve(Some(service.session_ids()));
        }
        let mut renewed = Instant::now();
        let half_lease = Duration::from_secs(LEADER_TTL_S) / 2;
        service.run_while(stop, || match leadership.renew() {
            Ok(true) => {
                renewed = Instant::now();
                true
            }
            Ok(false) => {
                tracing::warn!(name, "lost the lead: standing by");
                false
            }
            Err(e) if renewed.elapsed() < half_lease => {
                tracing::warn!(error = %e, "cannot renew the lead yet");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "lead not renewed for half its lease: standing by");
                false
            }
        });
        // What was reserved and not handed out stays unused: the next leader reserves above it.
        if let Some(server) = &id_service {
            server.serve(None);
        }
    }
    tracing::info!("stopped");
    Ok(())
}

fn sas_core(args: &SasArgs) -> Result<()> {
    if args.lease.is_zero() || args.node_lease < Duration::from_millis(20) {
        bail!("--lease must be positive and --node-lease at least 20ms");
    }
    cads_server::init_logging(&args.log_level);
    let settings = CoreSettings {
        lease_ms: args.lease.as_millis() as u64,
        node_lease_ms: args.node_lease.as_millis() as u64,
        exclusive_q: args.policy == Policy::WriteThrough,
        max_replicas: args.max_replicas,
        password: args.requirepass.clone().filter(|p| !p.is_empty()),
    };
    let core = Core::start(args.listen, settings)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(addr = %core.addr(), policy = args.policy.name(), "SAS core running");
    let stop = cads_server::server::stop_on_signal();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    core.stop();
    tracing::info!("stopped");
    Ok(())
}

fn status(instances: &Instances) -> Result<()> {
    let client = client(instances);
    let places: Vec<(usize, &[u8])> = (0..client.cmis()).map(|i| (i, CONFIGURATION_KEY)).collect();
    let mut newest: Option<Configuration> = None;
    for (i, entry) in client.get_at(&places).into_iter().enumerate() {
        match entry {
            Ok(Some(text)) => match serde_json::from_slice::<Configuration>(&text) {
                Ok(c) if newest.as_ref().is_none_or(|n| c.id() > n.id()) => newest = Some(c),
                Ok(_) => {}
                Err(e) => eprintln!("instance {i}: unreadable configuration entry: {e}"),
            },
            Ok(None) => eprintln!("instance {i}: no configuration entry"),
            Err(e) => eprintln!("instance {i}: {e}"),
        }
    }
    let Some(c) = newest else {
        bail!("no instance holds a configuration: is `cads coord` running over these CMIs?");
    };
    print!("{}", describe(&c, &instances.cmis));
    Ok(())
}

/// The configuration as `cads coord status` prints it.
fn describe(c: &Configuration, addrs: &[SocketAddr]) -> String {
    let mut out = format!(
        "configuration {}\n\ninstance  address                state\n",
        c.id()
    );
    for (i, state) in c.instances().iter().enumerate() {
        let addr = addrs.get(i).map_or("?".to_string(), |a| a.to_string());
        let state = match state {
            InstanceState::Up => "up",
            InstanceState::Down => "down",
        };
        out += &format!("{i:>8}  {addr:<21}  {state}\n");
    }
    out += "\nfragment  mode       primary (id)  secondary (id)\n";
    for (j, f) in c.fragments().iter().enumerate() {
        let secondary = f
            .secondary
            .map_or("-".to_string(), |s| format!("{} ({})", s.instance, s.id));
        let primary = format!("{} ({})", f.primary.instance, f.primary.id);
        out += &format!("{j:>8}  {:<9}  {primary:<12}  {secondary}\n", f.mode.name());
    }
    let away = c
        .fragments()
        .iter()
        .filter(|f| f.mode != Mode::Normal)
        .count();
    out += &format!(
        "\n{away} of {} fragments not in normal mode; dirty lists {}\n",
        c.fragments().len(),
        if c.dirty_lists() { "kept" } else { "off" }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_modes_and_replicas() {
        let mut c = Configuration::new(2, 2);
        c.instance_failed(1).unwrap();
        let addrs: Vec<SocketAddr> = vec!["127.0.0.1:7379".parse().unwrap()];
        let text = describe(&c, &addrs);
        assert!(text.starts_with("configuration 2\n"), "{text}");
        assert!(
            text.contains("       0  127.0.0.1:7379         up\n"),
            "{text}"
        );
        assert!(
            text.contains("       1  ?                      down\n"),
            "{text}"
        );
        assert!(
            text.contains("       1  transient  1 (1)         0 (2)\n"),
            "{text}"
        );
        assert!(
            text.contains("1 of 2 fragments not in normal mode"),
            "{text}"
        );
    }
}
