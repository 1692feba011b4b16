//! Configuration: a TOML file and command-line flags with the same names (flags win), resolved into
//! a checked [`Config`] with defaults.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use cads_engine::{EvictionKind, Mode};
use clap::Args;
use serde::Deserialize;

/// Every setting, as flags of `cads-server` (and `cads server`) and as keys of the TOML file.
/// Unset values fall back to the file, then to the defaults shown in `--help`.
#[derive(Args, Deserialize, Debug, Clone, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Options {
    /// TOML file with any of these settings (keys spelled as the flags, without the dashes in front).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Port of the first CMI; CMI i listens on PORT+i. 0 picks free ports (for tests).
    /// [default: 7379]
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,

    /// Number of CMIs, each a thread with its own event loop and port. [default: number of cores]
    #[arg(long, value_name = "N")]
    pub cmis: Option<usize>,

    /// Address to listen on. [default: 127.0.0.1]
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<IpAddr>,

    /// Lease mode: write-around, or write-through (also serves write-back). [default: write-through]
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,

    /// Memory for entries, pending versions and markers, per CMI (sizes: 1048576, 512kb, 64mb, 1gb;
    /// 0 for no limit). [default: 1gb]
    #[arg(long, value_name = "SIZE")]
    pub maxmemory: Option<String>,

    /// Cap on pinned memory per CMI (0: no cap beyond maxmemory); its last eighth is kept for
    /// applying buffered writes. [default: half of maxmemory]
    #[arg(long, value_name = "SIZE")]
    pub max_pinned_memory: Option<String>,

    /// Eviction policy for unpinned entries: lru. [default: lru]
    #[arg(long, value_name = "POLICY")]
    pub eviction: Option<String>,

    /// Lifetime of a lease in milliseconds; a session is aborted when its first lease expires.
    /// [default: 500]
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,

    /// How long an aborted session is remembered so its late calls still get ABORT, in ms; at
    /// least --max-session-ms. [default: 60000, or --max-session-ms if longer]
    #[arg(long, value_name = "MS")]
    pub tombstone_ms: Option<u64>,

    /// The longest a session may live, in ms: validation renews its leases up to this age, and
    /// then it is aborted however often it validates. [default: 5 x lease-ms]
    #[arg(long, value_name = "MS")]
    pub max_session_ms: Option<u64>,

    /// Memory for the state of sessions, leases and tombstones per CMI, apart from maxmemory; a
    /// request that would open a session or take a lease beyond it gets NOTSTORED (0: no cap).
    /// [default: a quarter of maxmemory]
    #[arg(long, value_name = "SIZE")]
    pub max_session_memory: Option<String>,

    /// Password clients must give with AUTH (or HELLO AUTH) before any other command. Until they
    /// do, requests are limited to 10 arguments of 16 KiB.
    #[arg(long, value_name = "PASSWORD")]
    pub requirepass: Option<String>,

    /// Serve TLS only (TLS 1.3), with this certificate chain (PEM, the CMI's own certificate
    /// first); needs --tls-key. A client that does not speak TLS is told so and closed.
    /// [default: no TLS]
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// With TLS, also require every client to present a certificate signed by a CA in this PEM
    /// file. [default: no client certificate asked for]
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// Without --requirepass, refuse clients from other addresses than loopback (127.0.0.0/8,
    /// ::1), telling them how to enable them, as Redis's protected mode does. [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub protected_mode: Option<bool>,

    /// Most connections per CMI. [default: 10000]
    #[arg(long, value_name = "N")]
    pub max_clients: Option<usize>,

    /// Largest argument (a key or value) in a request. [default: 64mb]
    #[arg(long, value_name = "SIZE")]
    pub max_bulk: Option<String>,

    /// Largest request. [default: 128mb]
    #[arg(long, value_name = "SIZE")]
    pub max_request: Option<String>,

    /// Most arguments in a request, command name included. [default: 1048576]
    #[arg(long, value_name = "N")]
    pub max_args: Option<usize>,

    /// A client whose replies would take its unsent output past this is disconnected, checked
    /// as each reply is written (a request repeating a large value never builds its replies).
    /// [default: 256mb]
    #[arg(long, value_name = "SIZE")]
    pub max_output: Option<String>,

    /// Close connections idle for this many seconds (0: never). [default: 0]
    #[arg(long, value_name = "SECONDS")]
    pub idle_timeout: Option<u64>,

    /// Keep an append-only log per CMI and restore from it at start. Outside a Gemini
    /// configuration, the first cads client to connect drops the restored cached values (they
    /// may be stale); buffered writes stay. [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub appendonly: Option<bool>,

    /// When the log is synced to disk: always (before replying), everysec, or no (left to the OS).
    /// [default: everysec]
    #[arg(long, value_name = "POLICY")]
    pub appendfsync: Option<String>,

    /// Directory of the append-only logs (`cmi-<i>.aof`). [default: .]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Also serve each CMI on a Unix socket, DIR/cads-PORT.sock, for clients on this machine
    /// (they skip TCP's work; `redis-cli -s` connects). Not with --tls-cert. Connecting takes
    /// access to DIR and write permission on the socket (as the umask leaves it): keep DIR
    /// private. A socket file nobody serves (left by an earlier run) is replaced.
    #[arg(long, value_name = "DIR")]
    pub unixsocket_dir: Option<PathBuf>,

    /// Rewrite a log once it has grown by this percentage since its last rewrite (0: never
    /// automatically). [default: 100]
    #[arg(long, value_name = "PERCENT")]
    pub aof_rewrite_percentage: Option<u64>,

    /// ... and is at least this large. [default: 64mb]
    #[arg(long, value_name = "SIZE")]
    pub aof_rewrite_min_size: Option<String>,

    /// Log filter (error, warn, info, debug, trace, or a tracing directive). [default: info]
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// When the append-only log is synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    Always,
    EverySec,
    No,
}

impl Fsync {
    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

/// A resolved, checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub port: u16,
    pub cmis: usize,
    pub bind: IpAddr,
    pub mode: Mode,
    pub maxmemory: usize,
    pub max_pinned_memory: usize,
    pub eviction: EvictionKind,
    pub lease_ms: u64,
    pub tombstone_ms: u64,
    pub max_session_ms: u64,
    pub max_session_memory: usize,
    pub requirepass: Option<String>,
    /// TLS's certificate chain, key, and the CAs of client certificates (all PEM files).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub protected_mode: bool,
    pub max_clients: usize,
    pub max_bulk: usize,
    pub max_request: usize,
    pub max_args: usize,
    pub max_output: usize,
    pub idle_timeout_secs: u64,
    pub appendonly: bool,
    pub appendfsync: Fsync,
    pub dir: PathBuf,
    /// Where each CMI also serves a Unix socket (see [`Options::unixsocket_dir`]).
    pub unixsocket_dir: Option<PathBuf>,
    pub aof_rewrite_percentage: u64,
    pub aof_rewrite_min_size: u64,
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config::resolve(Options::default()).expect("the defaults are valid")
    }
}

/// Parses a size: a number of bytes with an optional unit b, kb/k, mb/m, gb/g (powers of 1024).
pub fn parse_size(text: &str) -> Result<usize> {
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        bail!("'{text}' is not a size (examples: 1048576, 512kb, 64mb, 1gb)");
    }
    let n: usize = digits
        .parse()
        .with_context(|| format!("'{text}' is too large"))?;
    let scale: usize = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        other => bail!("unknown size unit '{other}' in '{text}' (use b, kb, mb or gb)"),
    };
    n.checked_mul(scale)
        .with_context(|| format!("'{text}' is too large"))
}

macro_rules! overlay {
    ($flags:ident, $file:ident, $($field:ident),* $(,)?) => {
        Options { config: $flags.config, $($field: $flags.$field.or($file.$field),)* }
    };
}

impl Options {
    /// The flags over the file named by `--config` (if any).
    pub fn with_file(self) -> Result<Options> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let file = Options::from_file(&path)?;
        let flags = self;
        Ok(overlay!(
            flags,
            file,
            port,
            cmis,
            bind,
            mode,
            maxmemory,
            max_pinned_memory,
            eviction,
            lease_ms,
            tombstone_ms,
            max_session_ms,
            max_session_memory,
            requirepass,
            tls_cert,
            tls_key,
            tls_ca,
            protected_mode,
            max_clients,
            max_bulk,
            max_request,
            max_args,
            max_output,
            idle_timeout,
            appendonly,
            appendfsync,
            dir,
            unixsocket_dir,
            aof_rewrite_percentage,
            aof_rewrite_min_size,
            log_level,
        ))
    }

    pub fn from_file(path: &Path) -> Result<Options> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("bad configuration file {}", path.display()))
    }
}

impl Config {
    /// Resolves options (flags already laid over the file) into a checked configuration.
    pub fn resolve(o: Options) -> Result<Config> {
        let size = |value: &Option<String>, default: &str, name: &str| -> Result<usize> {
            parse_size(value.as_deref().unwrap_or(default)).with_context(|| format!("--{name}"))
        };
        let maxmemory = size(&o.maxmemory, "1gb", "maxmemory")?;
        let max_pinned_memory = match &o.max_pinned_memory {
            Some(v) => parse_size(v).context("--max-pinned-memory")?,
            None => maxmemory / 2,
        };
        let max_session_memory = match &o.max_session_memory {
            Some(v) => parse_size(v).context("--max-session-memory")?,
            None => maxmemory / 4,
        };
        let lease_ms = o.lease_ms.unwrap_or(500);
        let max_session_ms = o
            .max_session_ms
            .unwrap_or_else(|| lease_ms.saturating_mul(5));
        let mode_name = o.mode.as_deref().unwrap_or("write-through");
        let mode = Mode::parse(mode_name).with_context(|| {
            format!("--mode: unknown mode '{mode_name}' (write-around, write-through, write-back)")
        })?;
        let eviction_name = o.eviction.as_deref().unwrap_or("lru");
        let eviction = EvictionKind::parse(eviction_name)
            .with_context(|| format!("--eviction: unknown policy '{eviction_name}' (lru)"))?;
        let fsync_name = o.appendfsync.as_deref().unwrap_or("everysec");
        let appendfsync = match fsync_name {
            "always" => Fsync::Always,
            "everysec" => Fsync::EverySec,
            "no" => Fsync::No,
            other => bail!("--appendfsync: unknown policy '{other}' (always, everysec, no)"),
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let config = Config {
            port: o.port.unwrap_or(7379),
            cmis: o.cmis.unwrap_or(cores),
            bind: o.bind.unwrap_or(IpAddr::from([127, 0, 0, 1])),
            mode,
            maxmemory,
            max_pinned_memory,
            eviction,
            lease_ms,
            tombstone_ms: o.tombstone_ms.unwrap_or(60_000.max(max_session_ms)),
            max_session_ms,
            max_session_memory,
            requirepass: o.requirepass.filter(|p| !p.is_empty()),
            tls_cert: o.tls_cert,
            tls_key: o.tls_key,
            tls_ca: o.tls_ca,
            protected_mode: o.protected_mode.unwrap_or(true),
            max_clients: o.max_clients.unwrap_or(10_000),
            max_bulk: size(&o.max_bulk, "64mb", "max-bulk")?,
            max_request: size(&o.max_request, "128mb", "max-request")?,
            max_args: o.max_args.unwrap_or(1 << 20),
            max_output: size(&o.max_output, "256mb", "max-output")?,
            idle_timeout_secs: o.idle_timeout.unwrap_or(0),
            appendonly: o.appendonly.unwrap_or(false),
            appendfsync,
            dir: o.dir.unwrap_or_else(|| PathBuf::from(".")),
            unixsocket_dir: o.unixsocket_dir,
            aof_rewrite_percentage: o.aof_rewrite_percentage.unwrap_or(100),
            aof_rewrite_min_size: size(&o.aof_rewrite_min_size, "64mb", "aof-rewrite-min-size")?
                as u64,
            log_level: o.log_level.unwrap_or_else(|| "info".into()),
        };
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<()> {
        if self.cmis == 0 || self.cmis > 1024 {
            bail!("--cmis must be between 1 and 1024, not {}", self.cmis);
        }
        if self.port != 0 && self.port as usize + self.cmis - 1 > u16::MAX as usize {
            bail!(
                "--port {} with --cmis {} runs past port 65535",
                self.port,
                self.cmis
            );
        }
        if self.lease_ms == 0 {
            bail!("--lease-ms must be positive");
        }
        if self.max_session_ms < self.lease_ms {
            bail!(
                "--max-session-ms ({}) must be at least --lease-ms ({})",
                self.max_session_ms,
                self.lease_ms
            );
        }
        // A session's late calls should meet its tombstone: a call that finds the session
        // forgotten opens a new one under its id, which can validate what the old one read.
        if self.tombstone_ms < self.max_session_ms {
            bail!(
                "--tombstone-ms ({}) must be at least --max-session-ms ({})",
                self.tombstone_ms,
                self.max_session_ms
            );
        }
        if self.max_bulk == 0 || self.max_request < self.max_bulk {
            bail!("--max-request must be at least --max-bulk, and both positive");
        }
        if self.max_args < 1 {
            bail!("--max-args must be positive");
        }
        if self.max_clients == 0 {
            bail!("--max-clients must be positive");
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            bail!("--tls-cert and --tls-key go together: give both, or neither");
        }
        if self.unixsocket_dir.is_some() && self.tls_cert.is_some() {
            bail!(
                "--unixsocket-dir is for plaintext clients on this machine; a server with \
                 --tls-cert serves TLS only"
            );
        }
        if self.tls_ca.is_some() && self.tls_cert.is_none() {
            bail!("--tls-ca needs --tls-cert and --tls-key");
        }
        Ok(())
    }

    /// The engine settings of one CMI.
    pub fn engine(&self) -> cads_engine::EngineConfig {
        cads_engine::EngineConfig {
            mode: self.mode,
            maxmemory: self.maxmemory,
            max_pinned_memory: self.max_pinned_memory,
            lease_ms: self.lease_ms,
            max_session_ms: self.max_session_ms,
            max_session_memory: self.max_session_memory,
            tombstone_ms: self.tombstone_ms,
            max_value_bytes: self.max_bulk,
            eviction: self.eviction,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("2kb").unwrap(), 2048);
        assert_eq!(parse_size("64MB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("mb").is_err());
        assert!(parse_size("1tb").is_err());
        assert!(parse_size("-1").is_err());
    }

    #[test]
    fn defaults_and_checks() {
        let c = Config::default();
        assert_eq!(c.port, 7379);
        assert_eq!(c.max_pinned_memory, c.maxmemory / 2);
        assert_eq!(c.bind.to_string(), "127.0.0.1");
        let bad = |o: Options| Config::resolve(o).unwrap_err().to_string();
        assert!(bad(Options {
            cmis: Some(0),
            ..Options::default()
        })
        .contains("--cmis"));
        assert!(bad(Options {
            mode: Some("write-sideways".into()),
            ..Options::default()
        })
        .contains("unknown mode"));
        assert!(bad(Options {
            port: Some(65535),
            cmis: Some(2),
            ..Options::default()
        })
        .contains("past port"));
        assert!(bad(Options {
            tombstone_ms: Some(2_000),
            lease_ms: Some(500),
            ..Options::default()
        })
        .contains("--tombstone-ms (2000) must be at least --max-session-ms (2500)"));
        let long_leases = Config::resolve(Options {
            lease_ms: Some(30_000),
            ..Options::default()
        })
        .unwrap();
        assert_eq!(
            long_leases.tombstone_ms, 150_000,
            "follows --max-session-ms"
        );
    }

    #[test]
    fn session_limits_follow_lease_ms_and_maxmemory() {
        let c = Config::resolve(Options {
            lease_ms: Some(300),
            maxmemory: Some("64mb".into()),
            ..Options::default()
        })
        .unwrap();
        assert_eq!(c.max_session_ms, 1_500, "five lease lengths");
        assert_eq!(c.max_session_memory, 16 << 20, "a quarter of maxmemory");
        assert_eq!(c.engine().max_session_ms, 1_500);
        let err = Config::resolve(Options {
            lease_ms: Some(300),
            max_session_ms: Some(200),
            ..Options::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("--max-session-ms"), "{err}");
    }

    #[test]
    fn flags_override_the_file() {
        let dir = std::env::temp_dir().join(format!("cads-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cads.toml");
        std::fs::write(
            &path,
            "port = 9000\ncmis = 3\nmaxmemory = \"10mb\"\nappendonly = true\n",
        )
        .unwrap();
        let flags = Options {
            config: Some(path.clone()),
            cmis: Some(2),
            ..Options::default()
        };
        let c = Config::resolve(flags.with_file().unwrap()).unwrap();
        assert_eq!(
            (c.port, c.cmis, c.maxmemory, c.appendonly),
            (9000, 2, 10 << 20, true)
        );
        std::fs::write(&path, "prot = 1\n").unwrap();
        let err = Options {
            config: Some(path),
            ..Options::default()
        }
        .with_file()
        .unwrap_err();
        assert!(format!("{err:#}").contains("unknown field"), "{err:#}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn tls_settings_come_from_flags_or_the_file() {
        let dir = std::env::temp_dir().join(format!("cads-config-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cads.toml");
        std::fs::write(
            &path,
            "tls-cert = \"cmi.pem\"\ntls-key = \"cmi.key\"\ntls-ca = \"ca.pem\"\n",
        )
        .unwrap();
        let flags = Options {
            config: Some(path),
            tls_ca: Some("clients.pem".into()),
            ..Options::default()
        };
        let c = Config::resolve(flags.with_file().unwrap()).unwrap();
        assert_eq!(c.tls_cert, Some(PathBuf::from("cmi.pem")));
        assert_eq!(c.tls_key, Some(PathBuf::from("cmi.key")));
        assert_eq!(c.tls_ca, Some(PathBuf::from("clients.pem")));
        assert_eq!(Config::default().tls_cert, None, "plaintext by default");
        std::fs::remove_dir_all(dir).ok();
    }
}
