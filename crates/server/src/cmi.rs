//! One CMI as the event loop sees it: the engine, the append-only file, and the commands that are
//! about the connection or the server rather than the data (PING, AUTH, HELLO, INFO, CONFIG, ...).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cads_engine::{Engine, Now, Recency};
use cads_protocol::resp::{
    write_error, write_reply_as, write_reply_within, Protocol, ReplyTooLarge,
};
use cads_protocol::spec::{self, CommandSpec};
use cads_protocol::{
    ClientAttr, ClientFilter, ClientSub, ClientType, Command, CommandSub, ConfigSub, ErrorKind,
    ErrorReply, FlushScope, Reply,
};

use crate::aof::Aof;
use crate::config::{parse_size, Config};
use crate::event_loop::{ConnId, Flow, Handler, SharedStats};

/// What the server tells clients it is, in HELLO and INFO.
pub const SERVER_NAME: &str = "cads";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The Redis version whose command semantics the plain subset follows; some clients read it.
pub const REDIS_COMPATIBLE_VERSION: &str = "7.0.0";

/// Per-connection state.
pub struct Client {
    id: ConnId,
    authenticated: bool,
    protocol: Protocol,
    /// `CLIENT NO-TOUCH`: whether this connection's reads count as uses for eviction.
    recency: Recency,
}

/// What CLIENT LIST shows of a connection.
struct ClientInfo {
    addr: SocketAddr,
    name: Option<String>,
    since: Instant,
    lib_name: Option<String>,
    lib_ver: Option<String>,
    protocol: Protocol,
    recency: Recency,
}

impl ClientInfo {
    /// One line of CLIENT LIST, in Redis's `field=value` layout. Only what a CMI knows: it has
    /// one database, no pub/sub and no transactions, so `db`, `sub`, `psub` and `multi` are
    /// constants.
    fn line(&self, id: ConnId) -> String {
        let flags = match self.recency {
            Recency::Touch => "N",
            Recency::NoTouch => "T",
        };
        let resp = match self.protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        format!(
            "id={id} addr={} name={} age={} flags={flags} db=0 sub=0 psub=0 multi=-1 \
             user=default lib-name={} lib-ver={} resp={resp}\n",
            self.addr,
            self.name.as_deref().unwrap_or(""),
            self.since.elapsed().as_secs(),
            self.lib_name.as_deref().unwrap_or(""),
            self.lib_ver.as_deref().unwrap_or(""),
        )
    }
}

/// Whether a client name or library attribute can be shown in CLIENT LIST, whose fields are
/// split at spaces: printable ASCII without blanks, as Redis requires.
fn valid_client_attr(value: &[u8]) -> bool {
    value.iter().all(|b| (b'!'..=b'~').contains(b))
}

/// Samples of the command counter for `instantaneous_ops_per_sec` (Redis keeps 16 too).
const OPS_SAMPLES: usize = 16;

pub struct Cmi {
    pub index: usize,
    pub port: u16,
    engine: Engine,
    aof: Option<Aof>,
    config: Arc<Config>,
    loop_stats: Arc<SharedStats>,
    clients: HashMap<ConnId, ClientInfo>,
    started: Instant,
    ops_samples: VecDeque<(Instant, u64)>,
    /// How far the embedder moved this server's clocks ahead ([`Server::advance_clock`]), in ms.
    ///
    /// [`Server::advance_clock`]: crate::Server::advance_clock
    clock_ahead: Arc<AtomicU64>,
}

impl Cmi {
    pub fn new(
        index: usize,
        port: u16,
        engine: Engine,
        aof: Option<Aof>,
        config: Arc<Config>,
        loop_stats: Arc<SharedStats>,
        clock_ahead: Arc<AtomicU64>,
    ) -> Cmi {
        Cmi {
            index,
            port,
            engine,
            aof,
            config,
            loop_stats,
            clients: HashMap::new(),
            started: Instant::now(),
            ops_samples: VecDeque::with_capacity(OPS_SAMPLES + 1),
            clock_ahead,
        }
    }

    /// The time the engine is told: the loop's, moved ahead as the embedder asked.
    fn engine_time(&self, now: Now) -> Now {
        let ahead = self.clock_ahead.load(Ordering::Relaxed);
        Now {
            wall_ms: now.wall_ms + ahead,
            mono_ms: now.mono_ms + ahead,
        }
    }

    /// Runs a command and writes its reply to `out`, which may grow to `out_limit` bytes.
    fn run(
        &mut self,
        client: &mut Client,
        cmd: &Command<'_>,
        out: &mut Vec<u8>,
        out_limit: usize,
        now: Now,
    ) -> Flow {
        use Command as C;
        // Gemini's fence must judge the lease by the time the command runs: the loop's time is
        // from before it read the request, and a process stopped in between (SIGSTOP, a long
        // pause) would serve a request sent after its lease ran out.
        let now = self.engine_time(if self.engine.fragments() > 0 {
            crate::event_loop::clock_now()
        } else {
            now
        });
        let reply = match cmd {
            C::Ping(None) => Reply::status("PONG"),
            C::Ping(Some(message)) | C::Echo(message) => Reply::bulk(message),
            C::Auth { username, password } => self.auth(client, *username, password),
            C::Hello {
                version,
                auth,
                client_name,
            } => self.hello(client, *version, *auth, *client_name),
            C::Select(0) => Reply::OK,
            // Redis has databases 0 to 15 by default: for those, say why a CMI refuses them.
            C::Select(1..=15) => {
                ErrorReply::err("DB index is out of range: a CMI has one database, number 0").into()
            }
            C::Select(_) => ErrorReply::err("DB index is out of range").into(),
            C::Quit => {
                write_reply_as(out, &Reply::OK, client.protocol);
                return Flow::Close;
            }
            C::Commands(sub) => command_info(sub),
            C::Config(sub) => self.config_command(sub),
            C::Client(sub) => self.client_command(client, sub),
            C::Info(sections) => Reply::Bulk(self.info(sections, now).into_bytes().into()),
            C::BgRewriteAof => self.bgrewriteaof(),
            _ => {
                if let Some(refusal) = self.refuse_write(cmd) {
                    refusal.into()
                } else {
                    let reply = self.engine.execute_with(cmd, now, client.recency);
                    return reply_flow(write_reply_within(out, &reply, client.protocol, out_limit));
                }
            }
        };
        reply_flow(write_reply_within(out, &reply, client.protocol, out_limit))
    }

    /// While the log cannot be written, writes are refused rather than acknowledged and lost.
    fn refuse_write(&self, cmd: &Command<'_>) -> Option<ErrorReply> {
        let error = self.aof.as_ref()?.write_error.as_ref()?;
        // Every cads connection opens with it, so refusing it would refuse every connection;
        // unless restored values are held it changes nothing and writes no log record.
        if matches!(cmd, Command::FlushAll(FlushScope::Restored))
            && !self.engine.holds_restored_values()
        {
            return None;
        }
        let spec = cmd.spec();
        let writes = spec.flags.contains(&"write") || spec.group != spec::Group::Plain;
        writes.then(|| {
            ErrorReply::new(
                ErrorKind::Other("MISCONF".into()),
                format!("Errors writing to the append-only log: {error}"),
            )
        })
    }

    /// AUTH as Redis's default user: without `requirepass` it takes any password when named
    /// (`AUTH default x`), and refuses the one-argument form with Redis's explanation.
    fn auth(
        &mut self,
        client: &mut Client,
        username: Option<&[u8]>,
        password: &[u8],
    ) -> Reply<'static> {
        let wrong = || {
            ErrorReply::new(
                ErrorKind::WrongPass,
                "invalid username-password pair or user is disabled.",
            )
            .into()
        };
        if username.is_some_and(|u| u != b"default") {
            return wrong();
        }
        match &self.config.requirepass {
            None if username.is_none() => ErrorReply::err(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            )
            .into(),
            None => Reply::OK,
            Some(expected) if password == expected.as_bytes() => {
                client.authenticated = true;
                Reply::OK
            }
            Some(_) => wrong(),
        }
    }

    fn hello(
        &mut self,
        client: &mut Client,
        version: Option<i64>,
        auth: Option<(&[u8], &[u8])>,
        name: Option<&[u8]>,
    ) -> Reply<'static> {
        let protocol = match version {
            None => client.protocol,
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => {
                return ErrorReply::new(ErrorKind::NoProto, "unsupported protocol version").into()
            }
        };
        if let Some((user, pass)) = auth {
            if let Reply::Error(e) = self.auth(client, Some(user), pass) {
                return e.into();
            }
        }
        if !client.authenticated {
            return noauth().into();
        }
        client.protocol = protocol;
        if let Some(info) = self.clients.get_mut(&client.id) {
            info.protocol = protocol;
            if let Some(name) = name {
                info.name = Some(String::from_utf8_lossy(name).into_owned());
            }
        }
        let text = |k: &'static str, v: &str| {
            (
                Reply::owned_bulk(k.as_bytes().to_vec()),
                Reply::owned_bulk(v.as_bytes().to_vec()),
            )
        };
        let proto = match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        Reply::Map(vec![
            text("server", SERVER_NAME),
            text("version", VERSION),
            (Reply::owned_bulk(b"proto".to_vec()), Reply::Int(proto)),
            (
                Reply::owned_bulk(b"id".to_vec()),
                Reply::Int(client.id as i64),
            ),
            text("mode", "standalone"),
            text("role", "master"),
            (
                Reply::owned_bulk(b"modules".to_vec()),
                Reply::Array(Vec::new()),
            ),
        ])
    }

    fn client_command(&mut self, client: &mut Client, sub: &ClientSub<'_>) -> Reply<'static> {
        let info = self.clients.get_mut(&client.id);
        match sub {
            ClientSub::Id => Reply::Int(client.id as i64),
            ClientSub::GetName => info
                .and_then(|i| i.name.clone())
                .map_or(Reply::Nil, |n| Reply::owned_bulk(n.into_bytes())),
            ClientSub::SetName(name) => {
                if !valid_client_attr(name) {
                    return ErrorReply::err(
                        "Client names cannot contain spaces, newlines or special characters.",
                    )
                    .into();
                }
                if let Some(info) = info {
                    info.name = (!name.is_empty()).then(|| String::from_utf8_lossy(name).into());
                }
                Reply::OK
            }
            ClientSub::SetInfo { attr, value } => {
                let name = match attr {
                    ClientAttr::LibName => "lib-name",
                    ClientAttr::LibVer => "lib-ver",
                };
                if !valid_client_attr(value) {
                    return ErrorReply::err(format!(
                        "{name} cannot contain spaces, newlines or special characters."
                    ))
                    .into();
                }
                if let Some(info) = info {
                    let value = (!value.is_empty()).then(|| String::from_utf8_lossy(value).into());
                    match attr {
                        ClientAttr::LibName => info.lib_name = value,
                        ClientAttr::LibVer => info.lib_ver = value,
                    }
                }
                Reply::OK
            }
            ClientSub::Info => {
                let line = info.map(|i| i.line(client.id)).unwrap_or_default();
                Reply::owned_bulk(line.into_bytes())
            }
            ClientSub::List(filter) => {
                let ids: Vec<ConnId> = match filter {
                    // Every client of a CMI is a normal one.
                    ClientFilter::All | ClientFilter::Type(ClientType::Normal) => {
                        let mut ids: Vec<_> = self.clients.keys().copied().collect();
                        ids.sort_unstable();
                        ids
                    }
                    ClientFilter::Type(_) => Vec::new(),
                    ClientFilter::Ids(ids) => ids
                        .iter()
                        .filter_map(|&id| ConnId::try_from(id).ok())
                        .filter(|id| self.clients.contains_key(id))
                        .collect(),
                };
                let text: String = ids.iter().map(|id| self.clients[id].line(*id)).collect();
                Reply::owned_bulk(text.into_bytes())
            }
            // A CMI never evicts clients: with or without the protection, nothing changes.
            ClientSub::NoEvict(_) => Reply::OK,
            ClientSub::NoTouch(on) => {
                client.recency = if *on {
                    Recency::NoTouch
                } else {
                    Recency::Touch
                };
                if let Some(info) = info {
                    info.recency = client.recency;
                }
                Reply::OK
            }
            ClientSub::Help => help(spec::lookup(b"client")),
        }
    }

    fn bgrewriteaof(&mut self) -> Reply<'static> {
        let Some(aof) = &mut self.aof else {
            return ErrorReply::err("append-only persistence is off (start with --appendonly)")
                .into();
        };
        if aof.rewriting() {
            return ErrorReply::err("Background append only file rewriting already in progress")
                .into();
        }
        match aof.start_rewrite(&mut self.engine) {
            Ok(()) => Reply::Status("Background append only file rewriting started".into()),
            Err(e) => ErrorReply::err(format!("cannot start the rewrite: {e:#}")).into(),
        }
    }

    // --- CONFIG ---

    fn config_values(&self) -> Vec<(&'static str, String)> {
        let c = &self.config;
        let e = self.engine.config();
        vec![
            ("port", self.port.to_string()),
            ("bind", c.bind.to_string()),
            ("cmis", c.cmis.to_string()),
            ("mode", e.mode.name().to_string()),
            ("maxmemory", e.maxmemory.to_string()),
            ("max-pinned-memory", e.max_pinned_memory.to_string()),
            // Redis's name for evicting any key by LRU; cads's own setting is `eviction`.
            (
                "maxmemory-policy",
                format!("allkeys-{}", self.engine.eviction_policy()),
            ),
            ("eviction", self.engine.eviction_policy().to_string()),
            ("lease-ms", e.lease_ms.to_string()),
            ("tombstone-ms", e.tombstone_ms.to_string()),
            ("max-session-ms", e.max_session_ms.to_string()),
            ("max-session-memory", e.max_session_memory.to_string()),
            ("maxclients", c.max_clients.to_string()),
            ("proto-max-bulk-len", c.max_bulk.to_string()),
            ("client-query-buffer-limit", c.max_request.to_string()),
            ("timeout", c.idle_timeout_secs.to_string()),
            (
                "appendonly",
                if c.appendonly { "yes" } else { "no" }.to_string(),
            ),
            ("appendfsync", c.appendfsync.name().to_string()),
            ("dir", c.dir.display().to_string()),
            (
                "auto-aof-rewrite-percentage",
                c.aof_rewrite_percentage.to_string(),
            ),
            (
                "auto-aof-rewrite-min-size",
                c.aof_rewrite_min_size.to_string(),
            ),
            ("save", String::new()),
            ("databases", "1".to_string()),
            ("requirepass", c.requirepass.clone().unwrap_or_default()),
            (
                "protected-mode",
                if c.protected_mode { "yes" } else { "no" }.to_string(),
            ),
        ]
    }

    fn config_command(&mut self, sub: &ConfigSub<'_>) -> Reply<'static> {
        match sub {
            ConfigSub::Get(patterns) => {
                let lower: Vec<Vec<u8>> = patterns.iter().map(|p| p.to_ascii_lowercase()).collect();
                let pairs = self
                    .config_values()
                    .into_iter()
                    .filter(|(name, _)| lower.iter().any(|p| glob_match(p, name.as_bytes())))
                    .map(|(name, value)| {
                        (
                            Reply::owned_bulk(name.as_bytes().to_vec()),
                            Reply::owned_bulk(value.into_bytes()),
                        )
                    })
                    .collect();
                Reply::Map(pairs)
            }
            ConfigSub::Set(pairs) => {
                for pair in pairs.chunks_exact(2) {
                    if let Err(e) = self.config_set(pair[0], pair[1]) {
                        return e.into();
                    }
                }
                Reply::OK
            }
            ConfigSub::ResetStat => {
                self.engine.reset_stats();
                // The samples count commands from before the reset; the rate starts over.
                self.ops_samples.clear();
                Reply::OK
            }
            ConfigSub::Help => help(spec::lookup(b"config")),
        }
    }

    fn config_set(&mut self, name: &[u8], value: &[u8]) -> Result<(), ErrorReply> {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let value = String::from_utf8_lossy(value);
        let bad_value = |e: String| {
            ErrorReply::err(format!(
                "CONFIG SET failed (possibly related to argument '{name}') - {e}"
            ))
        };
        let ms = || {
            value
                .parse::<u64>()
                .ok()
                .filter(|&ms| ms > 0)
                .ok_or_else(|| bad_value("not a positive number of milliseconds".into()))
        };
        match name.as_str() {
            "maxmemory" => {
                let bytes = parse_size(&value).map_err(|e| bad_value(e.to_string()))?;
                self.engine.set_maxmemory(bytes);
            }
            "max-pinned-memory" => {
                let bytes = parse_size(&value).map_err(|e| bad_value(e.to_string()))?;
                self.engine.set_max_pinned_memory(bytes);
            }
            // The order the command line enforces, lease-ms <= max-session-ms <= tombstone-ms,
            // holds here too: a session's late calls must still meet its tombstone.
            "lease-ms" => {
                let ms = ms()?;
                let max_session_ms = self.engine.config().max_session_ms;
                if ms > max_session_ms {
                    return Err(bad_value(format!(
                        "above max-session-ms ({max_session_ms})"
                    )));
                }
                self.engine.set_lease_ms(ms);
            }
            "max-session-ms" => {
                let ms = ms()?;
                let config = self.engine.config();
                if ms < config.lease_ms {
                    return Err(bad_value(format!("below lease-ms ({})", config.lease_ms)));
                }
                if ms > config.tombstone_ms {
                    return Err(bad_value(format!(
                        "above tombstone-ms ({})",
                        config.tombstone_ms
                    )));
                }
                self.engine.set_max_session_ms(ms);
            }
            "max-session-memory" => {
                let bytes = parse_size(&value).map_err(|e| bad_value(e.to_string()))?;
                self.engine.set_max_session_memory(bytes);
            }
            _ => {
                return Err(ErrorReply::err(format!(
                    "Unknown option or number of arguments for CONFIG SET - '{name}'"
                )))
            }
        }
        Ok(())
    }

    // --- INFO ---

    fn instantaneous_ops(&self) -> u64 {
        match (self.ops_samples.front(), self.ops_samples.back()) {
            (Some(&(t0, c0)), Some(&(t1, c1))) if t1 > t0 => {
                let secs = (t1 - t0).as_secs_f64();
                ((c1 - c0) as f64 / secs).round() as u64
            }
            _ => 0,
        }
    }

    /// The INFO text: Redis's layout (`# Section` headers, `field:value` lines).
    pub fn info(&self, sections: &[&[u8]], now: Now) -> String {
        let wanted: Vec<String> = sections
            .iter()
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|s| s == "all" || s == "everything" || s == "default");
        let want = |name: &str| all || wanted.iter().any(|s| s == name);
        let mut text = String::new();
        let mut section = |name: &str, lines: Vec<(&str, String)>| {
            if want(&name.to_ascii_lowercase()) {
                if !text.is_empty() {
                    text.push_str("\r\n");
                }
                let _ = write!(text, "# {name}\r\n");
                for (k, v) in lines {
                    let _ = write!(text, "{k}:{v}\r\n");
                }
            }
        };
        let e = &self.engine;
        let stats = e.stats();
        let store = e.store_stats();
        let mem = e.memory();
        let net = self.loop_stats.snapshot();
        let uptime = self.started.elapsed().as_secs();
        section(
            "Server",
            vec![
                ("cads_version", VERSION.into()),
                ("redis_version", REDIS_COMPATIBLE_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("os", crate::sys::os_description()),
                ("arch_bits", usize::BITS.to_string()),
                ("multiplexing_api", "epoll".into()),
                ("cmi_index", self.index.to_string()),
                ("cmis", self.config.cmis.to_string()),
                ("tcp_port", self.port.to_string()),
                ("mode", e.mode().name().into()),
                ("process_id", std::process::id().to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86_400).to_string()),
            ],
        );
        section(
            "Clients",
            vec![
                ("connected_clients", net.connected_clients.to_string()),
                ("maxclients", self.config.max_clients.to_string()),
                // No command blocks a client.
                ("blocked_clients", "0".into()),
            ],
        );
        section(
            "Memory",
            vec![
                ("used_memory", mem.used.to_string()),
                ("used_memory_human", human(mem.used)),
                ("used_memory_pinned", mem.pinned.to_string()),
                ("used_memory_evictable", mem.evictable.to_string()),
                ("maxmemory", mem.maxmemory.to_string()),
                ("maxmemory_human", human(mem.maxmemory)),
                ("max_pinned_memory", mem.max_pinned.to_string()),
                ("used_memory_sessions", e.session_memory().to_string()),
                (
                    "max_session_memory",
                    e.config().max_session_memory.to_string(),
                ),
                ("maxmemory_policy", e.eviction_policy().into()),
            ],
        );
        // A CMI replays its log before it serves (never `loading` while answering) and has no
        // snapshots (never a background save): tools that watch for either read 0.
        let mut persistence = vec![
            ("loading", "0".to_string()),
            ("rdb_bgsave_in_progress", "0".into()),
            (
                "aof_rewrite_in_progress",
                (self.aof.as_ref().is_some_and(Aof::rewriting) as u8).to_string(),
            ),
        ];
        persistence.extend(match &self.aof {
            None => vec![("aof_enabled", "0".to_string())],
            Some(aof) => vec![
                ("aof_enabled", "1".into()),
                ("aof_fsync", aof.fsync_policy().name().into()),
                ("aof_rewrites", aof.rewrites.to_string()),
                (
                    "aof_last_bgrewrite_status",
                    if aof.last_rewrite_ok { "ok" } else { "err" }.into(),
                ),
                (
                    "aof_last_write_status",
                    if aof.write_error.is_none() {
                        "ok"
                    } else {
                        "err"
                    }
                    .into(),
                ),
                ("aof_current_size", aof.size().to_string()),
                ("aof_base_size", aof.base_size().to_string()),
                // Cached values restored from the log that no cads client has dropped yet.
                (
                    "restored_values_held",
                    (self.engine.holds_restored_values() as u8).to_string(),
                ),
            ],
        });
        section("Persistence", persistence);
        section(
            "Stats",
            vec![
                (
                    "total_connections_received",
                    net.total_connections_received.to_string(),
                ),
                ("total_commands_processed", stats.commands.to_string()),
                (
                    "instantaneous_ops_per_sec",
                    self.instantaneous_ops().to_string(),
                ),
                (
                    "total_net_input_bytes",
                    net.total_net_input_bytes.to_string(),
                ),
                (
                    "total_net_output_bytes",
                    net.total_net_output_bytes.to_string(),
                ),
                ("rejected_connections", net.rejected_connections.to_string()),
                (
                    "client_output_buffer_limit_disconnections",
                    net.client_output_buffer_limit_disconnections.to_string(),
                ),
                ("expired_keys", store.expired.to_string()),
                ("evicted_keys", store.evicted.to_string()),
                ("discarded_keys", store.discarded.to_string()),
                ("notstored", store.refused.to_string()),
                ("keyspace_hits", stats.hits.to_string()),
                ("keyspace_misses", stats.misses.to_string()),
            ],
        );
        // A CMI is not replicated by the server (write-back replicates in the client): it takes
        // writes and has no replicas.
        section(
            "Replication",
            vec![("role", "master".into()), ("connected_slaves", "0".into())],
        );
        let (active, aborted) = e.session_counts();
        section(
            "Leases",
            vec![
                ("leases_held", e.lease_count().to_string()),
                ("leases_granted", stats.leases_granted.to_string()),
                ("leases_voided", stats.leases_voided.to_string()),
                ("leases_expired", stats.leases_expired.to_string()),
                ("lease_retries", stats.retries.to_string()),
                ("lease_ms", e.config().lease_ms.to_string()),
                ("markers", e.marker_count().to_string()),
                ("configuration_id", e.configuration_id().to_string()),
                ("fragments", e.fragments().to_string()),
                // Gemini: keys are served only under the coordinator's lease (ms left; 0: fenced).
                ("fenced", (e.fenced(now) as u8).to_string()),
                (
                    "instance_lease_left_ms",
                    e.instance_lease_until()
                        .saturating_sub(now.mono_ms)
                        .to_string(),
                ),
            ],
        );
        section(
            "Sessions",
            vec![
                ("sessions_active", active.to_string()),
                ("sessions_tombstones", aborted.to_string()),
                ("sessions_committed", stats.sessions_committed.to_string()),
                ("sessions_aborted", stats.sessions_aborted.to_string()),
                ("sessions_wounded", stats.sessions_wounded.to_string()),
                ("sessions_expired", stats.sessions_expired.to_string()),
                ("sessions_outlived", stats.sessions_outlived.to_string()),
                ("sessions_refused", stats.sessions_refused.to_string()),
                ("max_session_ms", e.config().max_session_ms.to_string()),
            ],
        );
        // Hot keys: the lease conflicts behind them and the keys most contended for (counted
        // by Space-Saving, so a count may overstate its key's by the smallest one listed).
        const NAMES: [&str; cads_engine::contention::HOT_KEYS] = [
            "contended_key_1",
            "contended_key_2",
            "contended_key_3",
            "contended_key_4",
            "contended_key_5",
            "contended_key_6",
            "contended_key_7",
            "contended_key_8",
        ];
        let mut contention = vec![
            ("lease_conflicts", stats.lease_conflicts.to_string()),
            ("lease_waits", stats.lease_waits.to_string()),
            ("sessions_conflicted", stats.sessions_conflicted.to_string()),
        ];
        for (name, (key, conflicts)) in NAMES.iter().zip(e.hot_keys()) {
            let key = cads_protocol::printable_key(key);
            contention.push((name, format!("key={key},conflicts={conflicts}")));
        }
        section("Contention", contention);
        section("Cluster", vec![("cluster_enabled", "0".into())]);
        let keys = e.key_count();
        let keyspace = if keys == 0 {
            vec![]
        } else {
            vec![(
                "db0",
                format!("keys={keys},expires={},avg_ttl=0", e.keys_with_expiry()),
            )]
        };
        section("Keyspace", keyspace);
        text
    }
}

/// A reply that did not fit under the output limit closes the client, as Redis's
/// `client-output-buffer-limit` does: the reply is never built in full.
fn reply_flow(written: Result<(), ReplyTooLarge>) -> Flow {
    match written {
        Ok(()) => Flow::Continue,
        Err(ReplyTooLarge) => Flow::Disconnect,
    }
}

fn noauth() -> ErrorReply {
    ErrorReply::new(ErrorKind::NoAuth, "Authentication required.")
}

fn human(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "K", "M", "G"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2}{}", UNITS[unit])
}

/// Glob matching with `*` and `?`, as CONFIG GET patterns use.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}

/// A command's `COMMAND INFO` entry in Redis 7's layout: name, arity, flags, first key, last
/// key, key step, ACL categories, tips, key specifications, subcommands. A CMI has no ACLs, and
/// its key positions are the first/last/step triple, so categories, tips and key
/// specifications are empty.
fn spec_reply(spec: &CommandSpec) -> Reply<'static> {
    let subcommands = spec
        .subcommands
        .iter()
        .map(|sub| {
            info_entry(
                format!("{}|{}", spec.name, sub.name),
                sub.arity,
                spec.flags,
                (0, 0, 0),
                Vec::new(),
            )
        })
        .collect();
    info_entry(
        spec.name.to_string(),
        spec.arity,
        spec.flags,
        (spec.first_key, spec.last_key, spec.step),
        subcommands,
    )
}

fn info_entry(
    name: String,
    arity: i32,
    flags: &[&'static str],
    keys: (i32, i32, i32),
    subcommands: Vec<Reply<'static>>,
) -> Reply<'static> {
    Reply::Array(vec![
        Reply::owned_bulk(name.into_bytes()),
        Reply::Int(arity as i64),
        Reply::Array(flags.iter().map(|f| Reply::status(f)).collect()),
        Reply::Int(keys.0 as i64),
        Reply::Int(keys.1 as i64),
        Reply::Int(keys.2 as i64),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(subcommands),
    ])
}

/// The `HELP` of a container command: its subcommands from the command table.
fn help(spec: Option<&CommandSpec>) -> Reply<'static> {
    let spec = spec.expect("container commands are in the table");
    Reply::Array(
        spec.help()
            .into_iter()
            .map(|line| Reply::Status(line.into()))
            .collect(),
    )
}

/// A command's (or subcommand's) entry in `COMMAND DOCS`.
fn docs_reply(spec: &CommandSpec) -> Reply<'static> {
    let text = |s: &str| Reply::owned_bulk(s.as_bytes().to_vec());
    let group = text(spec.group.name());
    let mut fields = vec![
        (text("summary"), text(spec.summary)),
        (text("group"), group.clone()),
    ];
    if !spec.subcommands.is_empty() {
        let subs = spec
            .subcommands
            .iter()
            .map(|s| {
                (
                    text(&format!("{}|{}", spec.name, s.name)),
                    Reply::Map(vec![
                        (text("summary"), text(s.summary)),
                        (text("group"), group.clone()),
                    ]),
                )
            })
            .collect();
        fields.push((text("subcommands"), Reply::Map(subs)));
    }
    Reply::Map(fields)
}

/// The commands `names` names (unknown names left out), or all of them.
fn named_specs(names: &[&[u8]]) -> Vec<&'static CommandSpec> {
    if names.is_empty() {
        spec::COMMANDS.iter().collect()
    } else {
        names.iter().filter_map(|n| spec::lookup(n)).collect()
    }
}

fn command_info(sub: &CommandSub<'_>) -> Reply<'static> {
    let name = |s: &CommandSpec| Reply::owned_bulk(s.name.as_bytes().to_vec());
    match sub {
        CommandSub::All => Reply::Array(spec::COMMANDS.iter().map(spec_reply).collect()),
        CommandSub::Count => Reply::Int(spec::COMMANDS.len() as i64),
        CommandSub::List(pattern) => Reply::Array(
            spec::COMMANDS
                .iter()
                .filter(|s| {
                    pattern.is_none_or(|p| glob_match(&p.to_ascii_lowercase(), s.name.as_bytes()))
                })
                .map(name)
                .collect(),
        ),
        // As Redis: a name it does not know answers nil in its place.
        CommandSub::Info([]) => Reply::Array(spec::COMMANDS.iter().map(spec_reply).collect()),
        CommandSub::Info(names) => Reply::Array(
            names
                .iter()
                .map(|n| spec::lookup(n).map_or(Reply::Nil, spec_reply))
                .collect(),
        ),
        CommandSub::Docs(names) => Reply::Map(
            named_specs(names)
                .into_iter()
                .map(|s| (name(s), docs_reply(s)))
                .collect(),
        ),
        CommandSub::Help => help(spec::lookup(b"command")),
    }
}

/// Redis's protected-mode refusal, for a client from outside loopback when no password is set.
const PROTECTED_MODE_REPLY: &[u8] = b"-DENIED cads is running in protected mode because protected \
mode is enabled and no password is set. In this mode connections are only accepted from the \
loopback interface. If you want to connect from other computers, either 1) set a password with \
--requirepass (or requirepass in the configuration file) and restart the server, then \
authenticate with AUTH; or 2) if the server is reachable only from trusted networks, disable \
protected mode with --protected-mode false (or protected-mode = false in the configuration file) \
and restart the server.\r\n";

/// Whether `ip` is a loopback address: 127.0.0.0/8 or ::1, also as an IPv4-mapped IPv6 address.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Whether a request is the start of an HTTP request (`POST /...`, or a `Host:` header line): a
/// web page can make a browser send one to a server on localhost, with commands in its body.
fn is_http(args: &[&[u8]]) -> bool {
    args[0].eq_ignore_ascii_case(b"POST") || args[0].eq_ignore_ascii_case(b"Host:")
}

impl Handler for Cmi {
    type Conn = Client;

    fn refusal(&mut self, peer: SocketAddr) -> Option<Vec<u8>> {
        let open = self.config.requirepass.is_none() && self.config.protected_mode;
        if open && !is_loopback(peer.ip()) {
            tracing::warn!(%peer, "protected mode: refused a client from outside loopback");
            return Some(PROTECTED_MODE_REPLY.to_vec());
        }
        None
    }

    fn on_accept(&mut self, id: ConnId, peer: SocketAddr) -> Client {
        self.clients.insert(
            id,
            ClientInfo {
                addr: peer,
                name: None,
                since: Instant::now(),
                lib_name: None,
                lib_ver: None,
                protocol: Protocol::Resp2,
                recency: Recency::Touch,
            },
        );
        Client {
            id,
            authenticated: self.config.requirepass.is_none(),
            protocol: Protocol::Resp2,
            recency: Recency::Touch,
        }
    }

    fn on_request(
        &mut self,
        client: &mut Client,
        args: &[&[u8]],
        out: &mut Vec<u8>,
        out_limit: usize,
        now: Now,
    ) -> Flow {
        if is_http(args) {
            // Redis's answer to the cross-protocol attack: run nothing more from this client.
            let peer = self.clients.get(&client.id).map(|c| c.addr);
            tracing::warn!(
                ?peer,
                "possible SECURITY ATTACK: a client sent POST or Host:, as an HTTP request from \
                 a web page would; connection closed"
            );
            return Flow::Close;
        }
        let cmd = match Command::parse(args) {
            Ok(cmd) => cmd,
            Err(e) => {
                write_error(out, &e);
                return Flow::Continue;
            }
        };
        if !client.authenticated
            && !matches!(
                cmd,
                Command::Auth { .. } | Command::Hello { .. } | Command::Quit
            )
        {
            write_error(out, &noauth());
            return Flow::Continue;
        }
        self.run(client, &cmd, out, out_limit, now)
    }

    fn authenticated(&self, client: &Client) -> bool {
        client.authenticated
    }

    fn on_close(&mut self, client: &mut Client) {
        self.clients.remove(&client.id);
    }

    fn before_reply(&mut self, _now: Now) {
        if let Some(aof) = &mut self.aof {
            aof.flush(&mut self.engine);
        }
    }

    fn tick(&mut self, now: Now) {
        let now = self.engine_time(now);
        self.engine.tick(now);
        self.ops_samples
            .push_back((Instant::now(), self.engine.stats().commands));
        if self.ops_samples.len() > OPS_SAMPLES {
            self.ops_samples.pop_front();
        }
        if let Some(aof) = &mut self.aof {
            if aof.wants_rewrite() {
                if let Err(e) = aof.start_rewrite(&mut self.engine) {
                    tracing::error!(error = %e, "cannot start the log rewrite");
                }
            }
        }
    }

    fn on_shutdown(&mut self, _now: Now) {
        if let Some(aof) = &mut self.aof {
            aof.close(&mut self.engine);
        }
        tracing::info!(cmi = self.index, port = self.port, "CMI stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b"maxmemory"));
        assert!(glob_match(b"max*", b"maxmemory"));
        assert!(glob_match(b"*memory", b"max-pinned-memory"));
        assert!(glob_match(b"p?rt", b"port"));
        assert!(!glob_match(b"port?", b"port"));
        assert!(!glob_match(b"save", b"saved"));
    }

    #[test]
    fn loopback_is_all_of_127_slash_8_and_ipv6_s_one() {
        for ip in [
            "127.0.0.1",
            "127.0.0.2",
            "127.255.255.254",
            "::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "192.0.2.2",
            "0.0.0.0",
            "::ffff:10.0.0.1",
            "fd00::2",
            "::",
        ] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0.00B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(1 << 30), "1.00G");
    }
}
