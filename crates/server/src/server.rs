//! Starting and stopping a process's CMIs: one thread, event loop and listener each, on consecutive
//! ports (DESIGN.md §3). Nothing is shared between CMIs on the request path.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use cads_engine::Engine;
use cads_protocol::Limits;

use crate::aof::{Aof, AofSettings};
use crate::cmi::Cmi;
use crate::config::Config;
use crate::event_loop::{EventLoop, LoopConfig};

/// A running set of CMIs.
pub struct Server {
    addrs: Vec<SocketAddr>,
    /// The Unix sockets the CMIs serve, removed when they stop.
    unix_sockets: SocketFiles,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<()>>>,
    /// How far [`Server::advance_clock`] moved the CMIs' clocks, in ms.
    clock_ahead: Arc<AtomicU64>,
}

impl Server {
    /// Binds every listener and restores every log before serving anything, so that a bad port or
    /// a damaged log fails the start as a whole.
    pub fn start(config: Config) -> Result<Server> {
        let config = Arc::new(config);
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::server_config(
                cert,
                key,
                config.tls_ca.as_deref(),
            )?),
            _ => None,
        };
        let mut listeners = Vec::with_capacity(config.cmis);
        for i in 0..config.cmis {
            let port = if config.port == 0 {
                0
            } else {
                config.port + i as u16
            };
            let addr = SocketAddr::new(config.bind, port);
            let listener =
                listen(addr).with_context(|| format!("cannot listen on {addr} for CMI {i}"))?;
            listeners.push(listener);
        }
        let clock_ahead = Arc::new(AtomicU64::new(0));
        let mut cmis = Vec::with_capacity(config.cmis);
        let mut unix_sockets = SocketFiles(Vec::new());
        for (i, listener) in listeners.into_iter().enumerate() {
            let mut engine = Engine::new(config.engine());
            engine.set_boot_id(boot_id(i));
            let aof = if config.appendonly {
                let settings = AofSettings {
                    fsync: config.appendfsync,
                    rewrite_percentage: config.aof_rewrite_percentage,
                    rewrite_min_size: config.aof_rewrite_min_size,
                };
                Some(Aof::open(&config.dir, i, &mut engine, settings)?)
            } else {
                None
            };
            let mut event_loop = EventLoop::new(listener, loop_config(&config, tls.clone()))?;
            let addr = event_loop.local_addr()?;
            if let Some(dir) = &config.unixsocket_dir {
                let path = cads_protocol::unix_socket_path(dir, addr.port());
                let unix = listen_unix(&path)
                    .with_context(|| format!("cannot listen on {} for CMI {i}", path.display()))?;
                unix_sockets.0.push(path);
                event_loop.listen_unix(unix)?;
            }
            let cmi = Cmi::new(
                i,
                addr.port(),
                engine,
                aof,
                config.clone(),
                event_loop.stats_handle(),
                clock_ahead.clone(),
            );
            cmis.push((event_loop, cmi, addr));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut addrs = Vec::new();
        let mut threads = Vec::new();
        for (mut event_loop, mut cmi, addr) in cmis {
            addrs.push(addr);
            let stop = stop.clone();
            let index = cmi.index;
            let thread = thread::Builder::new()
                .name(format!("cmi-{index}"))
                .spawn(move || {
                    event_loop
                        .run(&mut cmi, &stop)
                        .with_context(|| format!("CMI {index} stopped on an error"))
                })
                .context("cannot start a CMI thread")?;
            threads.push(thread);
        }
        tracing::info!(
            cmis = addrs.len(),
            first = %addrs[0],
            mode = config.mode.name(),
            maxmemory = config.maxmemory,
            appendonly = config.appendonly,
            tls = tls.is_some(),
            "cads-server ready"
        );
        Ok(Server {
            addrs,
            unix_sockets,
            stop,
            threads,
            clock_ahead,
        })
    }

    /// Moves every CMI's clocks `by` ahead, as if that much time had passed at once: leases,
    /// sessions and key expiry run out by it (at the next command or tick). For tests of expiry
    /// that must not depend on how fast the machine runs them; the process's own clocks and the
    /// loops' timers are not moved.
    pub fn advance_clock(&self, by: Duration) {
        self.clock_ahead
            .fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }

    /// The address of each CMI, in order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Asks every CMI to stop; [`Server::join`] waits for them.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits for every CMI to stop.
    pub fn join(self) -> Result<()> {
        let mut result = Ok(());
        drop(self.unix_sockets);
        for thread in self.threads {
            let outcome = thread
                .join()
                .map_err(|_| anyhow!("a CMI thread panicked"))
                .and_then(|r| r);
            if let Err(e) = outcome {
                tracing::error!(error = %format!("{e:#}"), "CMI failed");
                result = Err(e);
            }
        }
        result
    }

    /// Starts a server for `config` and serves until SIGTERM or SIGINT (see
    /// [`Server::run_until_signal`]). The handlers are installed before the CMIs serve: a signal
    /// that arrives while the server starts is not lost (on a busy machine a client could be
    /// served before the starting thread ran again, and a SIGTERM then killed the process).
    pub fn serve_until_signal(config: Config) -> Result<()> {
        install_signal_handlers();
        Server::start(config)?.run_until_signal()
    }

    /// Serves until SIGTERM or SIGINT, then stops gracefully: pending replies are flushed and the
    /// logs synced.
    pub fn run_until_signal(self) -> Result<()> {
        install_signal_handlers();
        while !SIGNALLED.load(Ordering::Acquire) {
            if self.threads.iter().any(|t| t.is_finished()) {
                // A CMI died on its own: stop the others and report.
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        tracing::info!("shutting down");
        self.stop();
        self.join()
    }
}

/// A number for this start of CMI `cmi` that no earlier start used: the wall clock in
/// nanoseconds and the process id (Gemini's coordinator names the incarnation its lease is for).
fn boot_id(cmi: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Below i64::MAX, as RESP integers are signed.
    (nanos ^ (u64::from(std::process::id()) << 40) ^ cmi as u64) >> 1
}

/// Connections that may wait to be accepted, as Redis's `tcp-backlog` (std's `bind` asks for 128,
/// which a burst of clients overflows; the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: i32 = 511;

/// The Unix sockets a server made, removed when it stops (or fails to start).
struct SocketFiles(Vec<PathBuf>);

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A CMI's Unix socket at `path`, replacing a socket file nobody serves (an earlier run's); a
/// socket another server serves, or a file that is not a socket, is refused.
fn listen_unix(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server serves this socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            ))
        }
        Err(_) => {}
    }
    UnixListener::bind(path)
}

/// The listener of a CMI.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    crate::sys::tcp_listen(addr, LISTEN_BACKLOG)
}

fn loop_config(config: &Config, tls: Option<Arc<rustls::ServerConfig>>) -> LoopConfig {
    LoopConfig {
        limits: Limits {
            max_bulk: config.max_bulk,
            max_args: config.max_args,
            ..Limits::default()
        },
        max_request_bytes: config.max_request,
        max_clients: config.max_clients,
        max_output_bytes: config.max_output,
        idle_timeout_ms: config.idle_timeout_secs * 1000,
        tls,
        ..LoopConfig::default()
    }
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(true, Ordering::Release);
}

/// Installs handlers for SIGTERM and SIGINT and returns the flag they set: for a process that
/// runs something else until it is told to stop (`cads coord`).
pub fn stop_on_signal() -> &'static AtomicBool {
    install_signal_handlers();
    &SIGNALLED
}

fn install_signal_handlers() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `on_signal` is an `extern "C"` function that only performs an atomic store, which
        // is async-signal-safe; `signal` installs it for a valid signal number.
        unsafe {
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::time::Duration;

    /// 300 clients connect to a listener that accepts none of them: with std's backlog of 128
    /// the later ones would wait for ever (their SYNs dropped); with Redis's 511 the kernel
    /// completes every handshake.
    #[test]
    fn the_listen_backlog_holds_hundreds_of_waiting_connections() {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let waiting: Vec<TcpStream> = (0..300)
            .map(|i| {
                // Only a safety net: a completed handshake takes microseconds on loopback.
                TcpStream::connect_timeout(&addr, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("connection {i} was not queued: {e}"))
            })
            .collect();
        assert_eq!(waiting.len(), 300);
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer, waiting[0].local_addr().unwrap());
    }

    #[test]
    fn ipv6_listeners_work_too() {
        let Ok(listener) = listen(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0))) else {
            return; // no IPv6 on this machine
        };
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).unwrap();
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
    }
}
