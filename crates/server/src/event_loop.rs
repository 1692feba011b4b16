//! The event loop of one CMI: a single thread, level-triggered epoll, non-blocking sockets, RESP2.
//!
//! # How it runs
//!
//! The loop is shaped after Redis's `ae.c` and `networking.c`, because on a loaded machine the
//! syscalls per request decide throughput, and Redis's loop is frugal with them:
//!
//! 1. `epoll_wait` (level-triggered, so nothing is lost if we do not drain a socket).
//! 2. For each readable connection, **one** read of up to 16 KiB (Redis's `PROTO_IOBUF_LEN`), never
//!    a second read to see `EAGAIN` as an edge-triggered loop (tokio, mio) must, a third syscall
//!    per unpipelined request. Every complete
//!    request in the bytes read runs at once ([`Handler::on_request`]), its reply appended to the
//!    connection's output buffer; nothing is written yet.
//! 3. [`Handler::before_reply`] (the append-only file is written and synced here), then every
//!    connection with output gets **one** `send`, directly, without asking epoll whether it is
//!    writable (Redis's `beforeSleep` / `handleClientsWithPendingWrites`). Only a short write
//!    registers `EPOLLOUT`, and the interest is dropped again once the output is gone.
//! 4. About every `tick_ms`, [`Handler::tick`], idle timeouts, and the stop flag.
//!
//! So an unpipelined request costs one `recv`, one `send` and a share of one `epoll_wait`; a pipeline
//! of any depth costs the same per batch.
//!
//! # Busy polling
//!
//! With exactly Redis's syscalls per request the loop still measured only about 0.9x Redis under
//! `redis-benchmark -c 50` unpipelined on 2 cores. There the client is the bottleneck (a full core;
//! the loop needs about 0.6 of the other), and what differs is how often the server sleeps: doing
//! less per iteration than Redis, the loop more often finds no socket ready and blocks in
//! `epoll_wait` (about 1.5x Redis's context switches per request), and every client `send` that
//! finds it blocked pays a cross-CPU wakeup on the client's core (`ep_poll_callback`,
//! `try_to_wake_up`, an IPI: a VM exit on a virtual machine). So after an iteration that found
//! several connections ready, the loop keeps polling epoll without sleeping for
//! [`LoopConfig::busy_poll_us`] before it blocks: under load the next requests arrive within
//! microseconds and find it awake. With one client, or a load light enough that connections become
//! ready one at a time, it blocks at once as before. The price is at most `busy_poll_us` of CPU each
//! time a burst of work ends; 0 gives Redis's behaviour.
//!
//! Reads go to one 16 KiB buffer shared by all connections (Redis's reusable query buffer, #13488),
//! which stays hot in cache; only the unfinished tail of a batch (a request split across reads, or
//! requests held back by backpressure) is copied to the connection's own buffer, which is freed as
//! soon as it empties. A large request is then read straight into the connection's buffer, which
//! grows (at most doubling per read) toward what the parser says the request needs, and parsing is
//! not retried until that many bytes are there.
//!
//! # Backpressure and limits
//!
//! - A connection whose unsent output reaches [`LoopConfig::output_pause_bytes`] (64 KiB) is
//!   *stalled*: its remaining requests wait until the output drains below that, so one client that
//!   pipelines and never reads cannot make the loop buffer unbounded replies. Unlike a plain
//!   "stop reading" this keeps reading (without running) what the client sends, up to
//!   [`LoopConfig::max_request_bytes`] of input, so a client that writes its whole pipeline before
//!   reading any reply (as many client libraries do) does not deadlock; past that much input the
//!   loop stops reading from it (and its writes block) until it reads.
//! - A connection whose unsent output would exceed [`LoopConfig::max_output_bytes`] (one huge
//!   reply, or many) is closed at once, like Redis's `client-output-buffer-limit`.
//! - A single request larger than `max_request_bytes`, or any malformed one, gets
//!   `-ERR Protocol error: ...` and the connection is closed after that reply is flushed, as Redis
//!   does; requests after it in the same batch are not run.
//! - Until a connection authenticates ([`Handler::authenticated`]) its requests are held to
//!   [`LoopConfig::unauthenticated_limits`] (Redis's 16 KiB arguments and ten arguments), and
//!   its request and held input to the largest request those allow.
//! - A reply is checked against `max_output_bytes` as it is written ([`Handler::on_request`]'s
//!   `out_limit`): one that would pass it is never built, and the connection is closed at once
//!   ([`Flow::Disconnect`]), so a small request naming a large value many times cannot make the
//!   loop hold its replies.
//! - The parser of each connection keeps its progress across reads ([`RequestParser`]), so a
//!   request costs the same to parse however it is split.
//! - Beyond `max_clients` connections a new one gets `-ERR max number of clients reached` and is
//!   closed. So does one arriving when the process has no file descriptor left: the loop keeps a
//!   spare one to give up for that, rather than leave it waiting in the backlog, and logs the
//!   shortage once, not on every attempt. [`Handler::refusal`] may turn away others (protected
//!   mode).
//! - A peer that half-closes still gets the replies to everything it sent; then it is closed.
//!
//! # TLS
//!
//! With [`LoopConfig::tls`], every connection speaks TLS ([`crate::tls`]) and the steps above stay
//! the same: the one read of a readable event goes to the shared buffer and through rustls, and
//! its plaintext runs as a plaintext connection's bytes do; each flush encrypts output (at most
//! rustls's 64 KiB at a time, the rest staying in the connection's output, where the limits
//! above see it) and writes the records with one `writev`, again while the socket takes them
//! all. A client that finishes (QUIT, a protocol error, or its own `close_notify`) gets
//! `close_notify` after its last reply. A client whose first byte is not a TLS handshake record
//! is told in plaintext that the port wants TLS and closed; a failed handshake is closed with
//! rustls's alert; both are logged. Clients turned away before they are served (`max_clients`,
//! no descriptor, [`Handler::refusal`]) are closed without a reply, which a TLS client could not
//! read before its handshake.
//!
//! # Stats for INFO
//!
//! [`EventLoop::stats_handle`] returns an `Arc<SharedStats>` that the loop keeps current; give it
//! to the handler when constructing it and call [`SharedStats::snapshot`] from `on_request` (for
//! INFO) or from any other thread. Only the loop thread writes the counters, so they are plain
//! relaxed loads and stores, no locked instructions on the request path.
//!
//! # Time
//!
//! The handler is given a [`Now`]: the wall clock (ms since the Unix epoch, for key expiry and what
//! the log persists) and a monotonic clock (ms since the process's first loop started, for leases
//! and sessions), both read once per loop iteration (Redis likewise caches the time per
//! iteration). Ticks and idle timeouts run on the monotonic clock too, so a step of the wall clock
//! moves nothing but key expiry. A handler that needs the time a command runs at, not the time
//! its iteration began, reads [`clock_now`], on the same clocks.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cads_protocol::resp::{write_error, RequestParser};
use cads_protocol::{Limits, Parsed, ProtocolError};

use crate::sys::{self, Epoll, EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT};
use crate::tls::{Received, TlsConn, TlsFailure, PLAINTEXT_REFUSAL};

/// The two clocks a handler is given (see "Time" above).
pub use cads_engine::Now;

/// Where every loop's monotonic clock starts.
static CLOCK_ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn clock_at(mono: Instant) -> Now {
    let origin = *CLOCK_ORIGIN.get_or_init(Instant::now);
    Now {
        wall_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        mono_ms: mono.saturating_duration_since(origin).as_millis() as u64,
    }
}

/// Both clocks now, as the loops read them: never behind what a loop handed its handler.
pub fn clock_now() -> Now {
    clock_at(Instant::now())
}

/// Identifies a connection for the lifetime of the loop; never reused.
pub type ConnId = u64;

/// What the loop does with a connection after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep serving it.
    Continue,
    /// Run nothing more from it; flush its pending output, then close it (Redis's
    /// `CLIENT_CLOSE_AFTER_REPLY`, as for QUIT).
    Close,
    /// Close it at once, sending nothing more: its reply would take its output past
    /// `out_limit` (Redis closes a client at its output buffer limit the same way).
    Disconnect,
}

/// The command side of a CMI, driven by the loop. All calls come from the loop's thread.
pub trait Handler {
    /// Per-connection state (auth, name, ...).
    type Conn;

    /// A connection was accepted.
    fn on_accept(&mut self, id: ConnId, peer: SocketAddr) -> Self::Conn;

    /// Whether to turn away a new connection from `peer` before it is served: the reply to send
    /// it (best effort) before closing it, or None to serve it. Called before
    /// [`Handler::on_accept`]; a refused connection is counted in `rejected_connections`.
    fn refusal(&mut self, _peer: SocketAddr) -> Option<Vec<u8>> {
        None
    }

    /// Runs one request (`args[0]` is the command name, never absent) and appends its RESP reply
    /// to `out`. `out` may hold earlier replies not yet sent: append, never inspect or truncate.
    /// `out` may grow to `out_limit` bytes ([`LoopConfig::max_output_bytes`] unsent): a reply that
    /// would take it further must be left unwritten (or cut back) and answered with
    /// [`Flow::Disconnect`], so that no request makes the loop hold more. Checking as the reply is
    /// produced matters for replies that repeat large values (`MGET k k k ...`).
    fn on_request(
        &mut self,
        conn: &mut Self::Conn,
        args: &[&[u8]],
        out: &mut Vec<u8>,
        out_limit: usize,
        now: Now,
    ) -> Flow;

    /// Whether the connection has authenticated. Until it has, its requests are held to
    /// [`LoopConfig::unauthenticated_limits`]. Without a password, every connection has.
    fn authenticated(&self, _conn: &Self::Conn) -> bool {
        true
    }

    /// The connection is gone (closed by either side, or by the loop stopping).
    fn on_close(&mut self, conn: &mut Self::Conn);

    /// Once per loop iteration, after requests ran and BEFORE any reply of that iteration is written
    /// to a socket (this is where the append-only file is written and, with fsync=always, synced).
    /// It runs in every iteration that handled an event, even if no request ran, and at least every
    /// `tick_ms`, so it must be cheap when there is nothing to do.
    fn before_reply(&mut self, now: Now);

    /// About every `tick_ms`: timers, expiry.
    fn tick(&mut self, now: Now);

    /// Called once when the loop stops, after pending replies were flushed best-effort and every
    /// remaining connection was closed (with [`Handler::on_close`]); it is the handler's last call.
    fn on_shutdown(&mut self, now: Now);
}

/// Limits and timers of one loop.
#[derive(Clone, Debug)]
pub struct LoopConfig {
    /// Bulk, argument-count and inline limits for the request parser.
    pub limits: Limits,
    /// The same for a connection that has not authenticated ([`Handler::authenticated`]); its
    /// requests, and the unread input kept for it, are also held to the largest request these
    /// allow.
    pub unauthenticated_limits: Limits,
    /// A single request larger than this is a protocol error and closes the connection. It also
    /// bounds the unread input kept for a stalled connection.
    pub max_request_bytes: usize,
    /// Connections beyond this many get `-ERR max number of clients reached` and are closed.
    pub max_clients: usize,
    /// A connection whose unsent replies exceed this is closed without further ado.
    pub max_output_bytes: usize,
    /// Unsent output at which a connection's further requests wait for it to drain.
    pub output_pause_bytes: usize,
    /// Close connections idle (nothing read or written) for this long; 0 = never.
    pub idle_timeout_ms: u64,
    /// Period of [`Handler::tick`]; the stop flag is checked at least this often.
    pub tick_ms: u64,
    /// After an iteration that found several connections ready, keep polling epoll without
    /// sleeping for this many microseconds before blocking; 0 blocks at once, as Redis does. See
    /// the module documentation for why this pays and what it costs.
    pub busy_poll_us: u64,
    /// Serve TLS only, with this configuration ([`crate::tls::server_config`]); None serves
    /// plaintext. See "TLS" in the module documentation.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            limits: Limits::default(),
            unauthenticated_limits: Limits::unauthenticated(),
            max_request_bytes: 512 * 1024 * 1024,
            max_clients: 10_000,
            max_output_bytes: 256 * 1024 * 1024,
            output_pause_bytes: 64 * 1024,
            idle_timeout_ms: 0,
            tick_ms: 100,
            busy_poll_us: 50,
            tls: None,
        }
    }
}

impl LoopConfig {
    /// The parser limits for a connection, and the largest request (and unread input) it may
    /// send: `max_request_bytes` once authenticated; before, what the unauthenticated limits
    /// allow (every argument at its largest, with its header), or one inline line.
    fn request_limits(&self, authenticated: bool) -> (&Limits, usize) {
        if authenticated {
            return (&self.limits, self.max_request_bytes);
        }
        let limits = &self.unauthenticated_limits;
        const HEADER: usize = 32;
        let multibulk = limits
            .max_args
            .saturating_mul(limits.max_bulk.saturating_add(HEADER))
            .saturating_add(HEADER);
        let largest = multibulk.max(limits.max_inline + 1);
        (limits, largest.min(self.max_request_bytes))
    }
}

/// A snapshot of the loop's counters, named as Redis's INFO names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopStats {
    pub connected_clients: u64,
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_net_input_bytes: u64,
    pub total_net_output_bytes: u64,
    /// Connections closed because their replies would have passed `max_output_bytes`.
    pub client_output_buffer_limit_disconnections: u64,
}

/// The loop's live counters, shared with the handler (and anyone else) through an `Arc`.
#[derive(Debug, Default)]
pub struct SharedStats {
    connected_clients: AtomicU64,
    total_connections_received: AtomicU64,
    rejected_connections: AtomicU64,
    total_net_input_bytes: AtomicU64,
    total_net_output_bytes: AtomicU64,
    client_output_buffer_limit_disconnections: AtomicU64,
}

impl SharedStats {
    pub fn snapshot(&self) -> LoopStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LoopStats {
            connected_clients: get(&self.connected_clients),
            total_connections_received: get(&self.total_connections_received),
            rejected_connections: get(&self.rejected_connections),
            total_net_input_bytes: get(&self.total_net_input_bytes),
            total_net_output_bytes: get(&self.total_net_output_bytes),
            client_output_buffer_limit_disconnections: get(
                &self.client_output_buffer_limit_disconnections
            ),
        }
    }
}

/// Adds to a counter that only the loop thread writes: a load and a store, not a locked RMW.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// What one read asks for at least (Redis's `PROTO_IOBUF_LEN`).
const READ_CHUNK: usize = 16 * 1024;
/// Connections accepted per listener event at most (Redis's `MAX_ACCEPTS_PER_CALL`), so a connect
/// storm cannot starve established clients.
const MAX_ACCEPTS_PER_EVENT: usize = 1000;
/// Events taken from one `epoll_wait`.
const EVENTS_PER_WAIT: usize = 1024;
/// Output buffers larger than this are freed, rather than kept, once sent.
const KEEP_OUTPUT_CAPACITY: usize = 64 * 1024;
/// Arguments passed without a heap allocation.
const ARGV_INLINE: usize = 16;
/// The epoll tokens of the listeners; connections use their slot index.
const LISTENER: u64 = u64::MAX;
const UNIX_LISTENER: u64 = u64::MAX - 1;
/// The peer address a Unix-socket client is known by (to the handler, and in `CLIENT LIST`):
/// it is on this machine, and has no port.
pub const UNIX_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
const MAX_CLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// A listener and the configuration it is served with. See the module documentation.
pub struct EventLoop {
    listener: TcpListener,
    /// A Unix socket served beside the TCP port (clients on this machine skip TCP's work).
    unix: Option<UnixListener>,
    epoll: Epoll,
    config: LoopConfig,
    stats: Arc<SharedStats>,
    next_id: ConnId,
}

impl EventLoop {
    /// Takes over `listener` (made non-blocking). Nothing is accepted before [`EventLoop::run`].
    pub fn new(listener: TcpListener, config: LoopConfig) -> io::Result<EventLoop> {
        listener.set_nonblocking(true)?;
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), EPOLLIN, LISTENER)?;
        Ok(EventLoop {
            listener,
            unix: None,
            epoll,
            config,
            stats: Arc::new(SharedStats::default()),
            next_id: 1,
        })
    }

    /// Serves `listener`, a Unix socket, too: its clients are served as the TCP port's are
    /// (known as [`UNIX_PEER`]).
    pub fn listen_unix(&mut self, listener: UnixListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        self.epoll
            .add(listener.as_raw_fd(), EPOLLIN, UNIX_LISTENER)?;
        self.unix = Some(listener);
        Ok(())
    }

    /// The address the loop serves.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The current counters.
    pub fn stats(&self) -> LoopStats {
        self.stats.snapshot()
    }

    /// The live counters, for the handler's INFO: pass this to the handler when you build it.
    pub fn stats_handle(&self) -> Arc<SharedStats> {
        Arc::clone(&self.stats)
    }

    /// Serves until `stop` becomes true (checked at least every `tick_ms`), then flushes pending
    /// replies best-effort, closes all connections (calling [`Handler::on_close`] for each), calls
    /// [`Handler::on_shutdown`] and returns. Errors of one connection only close that connection;
    /// an error is returned only if epoll itself fails.
    pub fn run<H: Handler>(&mut self, handler: &mut H, stop: &AtomicBool) -> io::Result<()> {
        let mut runtime = Runtime::new(self, handler);
        let result = runtime.serve(stop);
        runtime.shutdown();
        result
    }
}

/// Unprocessed input of one connection. Usually empty and unallocated: reads go to the loop's shared
/// buffer and only a batch's unfinished tail lands here. `data` is fully initialized (its length is
/// the usable capacity); the bytes not yet run are `data[start..end]`.
#[derive(Default)]
struct InBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl InBuf {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    fn unread(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// Drops the first `n` unread bytes; an emptied buffer gives its memory back, since the next
    /// read goes to the shared buffer anyway.
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.clear();
        }
    }

    fn clear(&mut self) {
        *self = InBuf::default();
    }

    /// Room for at least `min` more bytes after the unread ones. The unread bytes move to the
    /// front only when the room is short, so a batch costs at most one small move, never one per
    /// request.
    fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.data.len() - self.end < min {
            if self.start > 0 {
                self.data.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.data.len() - self.end < min {
                self.data.resize(self.end + min, 0);
            }
        }
        &mut self.data[self.end..]
    }

    fn push(&mut self, bytes: &[u8]) {
        self.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }
}

/// The part of a connection that running requests touches (apart from its input).
struct ConnIo<C> {
    id: ConnId,
    app: C,
    /// Replies; `output[sent..]` is not written yet.
    output: Vec<u8>,
    sent: usize,
    /// The request being read: the parser keeps its progress across reads, so a request costs
    /// the same to parse however it is split.
    parser: RequestParser,
    /// Do not parse the unread input before it holds this many bytes (from the parser's
    /// `Incomplete { needed }`).
    need: usize,
    /// Run nothing more; close once the output is flushed.
    closing: bool,
    /// The output would exceed `max_output_bytes`: close without flushing.
    overflowed: bool,
    /// Requests wait in `input` until the output drains below `output_pause_bytes`.
    stalled: bool,
    /// The peer sent FIN; close once everything it sent is answered and flushed.
    eof: bool,
    /// The last send was short: `EPOLLOUT` is wanted.
    write_blocked: bool,
    /// Queued in `Runtime::pending`.
    pending: bool,
    /// The epoll interest currently registered.
    interest: u32,
    /// Monotonic ms of the last read or write, for the idle timeout.
    last_active: u64,
}

impl<C> ConnIo<C> {
    fn unsent(&self) -> usize {
        self.output.len() - self.sent
    }

    /// Whether the connection is to be closed once its output is gone: it asked to (QUIT, a
    /// protocol error), or its peer finished sending and every request it sent has run.
    fn finishing(&self) -> bool {
        self.closing || (self.eof && !self.stalled)
    }

    /// `n` more bytes of the output left the connection (to the socket, or to TLS).
    fn advance(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.output.len() {
            self.sent = 0;
            if self.output.capacity() > KEEP_OUTPUT_CAPACITY {
                self.output = Vec::new();
            } else {
                self.output.clear();
            }
        } else if self.sent >= self.output.len() / 2 {
            // Keep the sent prefix from growing without bound while replies are appended behind
            // it; moving the rest when it is at most half costs amortized O(1) per byte.
            self.output.drain(..self.sent);
            self.sent = 0;
        }
    }
}

/// A client's connection: TCP, or a Unix socket.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    /// Non-blocking, and (TCP) without Nagle's delay.
    fn configure(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_nonblocking(true).and_then(|()| s.set_nodelay(true)),
            Socket::Unix(s) => s.set_nonblocking(true),
        }
    }

    /// The peer, for logs.
    fn peer(&self) -> String {
        match self {
            Socket::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "unknown".to_string(), |a| a.to_string()),
            Socket::Unix(_) => "a Unix-socket client".to_string(),
        }
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).read(buf),
            Socket::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write(buf),
            Socket::Unix(s) => (&*s).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write_vectored(bufs),
            Socket::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Conn<C> {
    stream: Socket,
    input: InBuf,
    io: ConnIo<C>,
    /// The TLS state of a connection to a TLS port (boxed: plaintext connections stay small).
    tls: Option<Box<TlsConn>>,
}

impl<C> Conn<C> {
    /// Nothing is left to write: no reply waits, nor (with TLS) any encrypted byte.
    fn flushed(&self) -> bool {
        self.io.unsent() == 0 && self.tls.as_ref().is_none_or(|tls| !tls.wants_write())
    }
}

/// Everything `run` needs, for the duration of one `run`.
struct Runtime<'a, H: Handler> {
    lp: &'a mut EventLoop,
    handler: &'a mut H,
    /// Connections by slot; a slot's index is its epoll token.
    conns: Vec<Option<Conn<H::Conn>>>,
    live: usize,
    /// Slots free for reuse.
    free: Vec<usize>,
    /// Slots closed in this iteration; reused only from the next one, so an event already fetched
    /// for a closed connection can never be mistaken for a new connection's.
    freed: Vec<usize>,
    /// The shared read buffer.
    shared: Vec<u8>,
    /// The plaintext of one TLS read, before it runs (kept for its capacity).
    plain: Vec<u8>,
    events: Vec<sys::Event>,
    /// Connections to write to (or close) after `before_reply`.
    pending: Vec<usize>,
    /// Stalled connections whose output drained: run their held requests in the next iteration.
    resume: Vec<(usize, ConnId)>,
    listener_paused: bool,
    /// A descriptor held in reserve, given up to turn a client away when the process has no
    /// other (see `refuse_without_a_fd`).
    spare_fd: Option<std::fs::File>,
    /// Accepting failed for want of file descriptors, and none has succeeded since.
    out_of_fds: bool,
    /// Monotonic time of this iteration.
    mono: Instant,
    /// Both clocks in ms as the handler gets them (see [`clock_now`]).
    now: Now,
    /// `now.mono_ms`, for the loop's own timers.
    mono_ms: u64,
}

impl<'a, H: Handler> Runtime<'a, H> {
    fn new(lp: &'a mut EventLoop, handler: &'a mut H) -> Self {
        let now = Instant::now();
        let mut runtime = Runtime {
            lp,
            handler,
            conns: Vec::new(),
            live: 0,
            free: Vec::new(),
            freed: Vec::new(),
            shared: vec![0; READ_CHUNK],
            plain: Vec::new(),
            events: sys::event_buffer(EVENTS_PER_WAIT),
            pending: Vec::new(),
            resume: Vec::new(),
            listener_paused: false,
            spare_fd: spare_fd(),
            out_of_fds: false,
            mono: now,
            now: Now::at(0),
            mono_ms: 0,
        };
        runtime.refresh_clock();
        runtime
    }

    fn refresh_clock(&mut self) {
        self.mono = Instant::now();
        self.now = clock_at(self.mono);
        self.mono_ms = self.now.mono_ms;
    }

    fn serve(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let tick_ms = self.lp.config.tick_ms.max(1);
        let busy_poll = Duration::from_micros(self.lp.config.busy_poll_us);
        let mut next_tick = self.mono_ms + tick_ms;
        let mut polling_until = self.mono;
        let mut events = std::mem::take(&mut self.events);
        let result = loop {
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            // Held requests are already in memory and epoll will not report them: do not sleep.
            // Nor while busy-polling (see `LoopConfig::busy_poll_us`).
            let timeout = if self.resume.is_empty() && self.mono >= polling_until {
                next_tick.saturating_sub(self.mono_ms).min(i32::MAX as u64) as i32
            } else {
                0
            };
            let fired = match self.lp.epoll.wait(&mut events, timeout) {
                Ok(fired) => fired,
                Err(e) => break Err(e),
            };
            self.refresh_clock();
            // Several connections ready at once means several clients are active: keep polling a
            // little after the work is done, so that their next requests find the loop awake. A
            // single ready connection (one client, or a light load) never starts the polling, so
            // the cost stays bounded.
            let polling = self.mono < polling_until;
            if fired.len() >= 2 || (polling && !fired.is_empty()) {
                polling_until = self.mono + busy_poll;
            }
            let active = !fired.is_empty() || !self.resume.is_empty();
            for event in fired {
                let (token, flags) = (event.u64, event.events);
                self.dispatch(token, flags);
            }
            self.resume_stalled();
            let tick_due = self.mono_ms >= next_tick;
            if active || tick_due {
                // The durability point: the handler persists what this iteration's requests did
                // before any of their replies leaves the process.
                self.handler.before_reply(self.now);
                self.flush();
            }
            if tick_due {
                self.tick();
                next_tick = self.mono_ms + tick_ms;
            }
            self.free.append(&mut self.freed);
        };
        self.events = events;
        result
    }

    fn dispatch(&mut self, token: u64, flags: u32) {
        if token == LISTENER || token == UNIX_LISTENER {
            self.accept(token);
            return;
        }
        let slot = token as usize;
        if !matches!(self.conns.get(slot), Some(Some(_))) {
            return; // closed earlier in this batch of events
        }
        if flags & (EPOLLERR | EPOLLHUP) != 0 {
            // Reset, or both directions shut: nothing can be delivered any more.
            self.close(slot);
            return;
        }
        if flags & EPOLLIN != 0 {
            self.read(slot);
        }
        if flags & EPOLLOUT != 0 {
            self.mark_pending(slot);
        }
    }

    /// One connection waiting on the listener of `token`.
    fn accept_one(&self, token: u64) -> io::Result<(Socket, SocketAddr)> {
        match (token, &self.lp.unix) {
            (UNIX_LISTENER, Some(unix)) => unix.accept().map(|(s, _)| (Socket::Unix(s), UNIX_PEER)),
            _ => self
                .lp
                .listener
                .accept()
                .map(|(s, peer)| (Socket::Tcp(s), peer)),
        }
    }

    fn accept(&mut self, token: u64) {
        for _ in 0..MAX_ACCEPTS_PER_EVENT {
            match self.accept_one(token) {
                Ok((stream, peer)) => {
                    if self.out_of_fds {
                        self.out_of_fds = false;
                        tracing::info!("file descriptors available again: accepting clients");
                    }
                    self.admit(stream, peer);
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => continue,
                    _ if is_out_of_fds(&e) && self.refuse_without_a_fd(token) => continue,
                    _ => {
                        // The connection stays in the backlog and a level-triggered listener
                        // would be reported again at once, spinning. Stop listening until the
                        // next tick.
                        tracing::warn!(error = %e, "accept failed; pausing the listener until the next tick");
                        self.pause_listener(true);
                        return;
                    }
                },
            }
        }
    }

    /// The process is out of file descriptors, so the connection waiting in the backlog cannot be
    /// accepted, and left there it would wait unanswered while the listener reported it over and
    /// over. The usual remedy (libev's manual describes it): give up the spare descriptor kept for
    /// this, accept the connection, tell it `max number of clients reached`, close it, take the
    /// spare back. Logs once per shortage. False if there is no spare to give up.
    fn refuse_without_a_fd(&mut self, token: u64) -> bool {
        if self.spare_fd.take().is_none() {
            return false;
        }
        if !self.out_of_fds {
            self.out_of_fds = true;
            tracing::warn!(
                "out of file descriptors: refusing new clients until some leave (raise the limit \
                 with ulimit -n, or lower --max-clients)"
            );
        }
        if let Ok((stream, _)) = self.accept_one(token) {
            // Best effort, as for max_clients: a fresh socket's send buffer is empty.
            if self.lp.config.tls.is_none() {
                let _ = (&stream).write(MAX_CLIENTS_REPLY);
            }
            bump(&self.lp.stats.rejected_connections, 1);
        }
        self.spare_fd = spare_fd();
        self.spare_fd.is_some()
    }

    fn pause_listener(&mut self, pause: bool) {
        if self.listener_paused == pause {
            return;
        }
        let events = if pause { 0 } else { EPOLLIN };
        let mut listeners = vec![(self.lp.listener.as_raw_fd(), LISTENER)];
        if let Some(unix) = &self.lp.unix {
            listeners.push((unix.as_raw_fd(), UNIX_LISTENER));
        }
        // Every listener is set each time, so that one that failed is set again by the next call.
        let mut all = true;
        for (fd, token) in listeners {
            if let Err(e) = self.lp.epoll.modify(fd, events, token) {
                tracing::warn!(error = %e, "cannot change the listener's epoll interest");
                all = false;
            }
        }
        if all {
            self.listener_paused = pause;
        }
    }

    fn admit(&mut self, stream: Socket, peer: SocketAddr) {
        if let Err(e) = stream.configure() {
            tracing::debug!(error = %e, %peer, "dropping a connection that cannot be configured");
            return;
        }
        // A TLS client cannot read a plaintext reply before its handshake: it is closed without.
        let tls = self.lp.config.tls.is_some();
        if self.live >= self.lp.config.max_clients {
            // Best effort, as Redis does: a fresh socket's send buffer is empty.
            if !tls {
                let _ = (&stream).write(MAX_CLIENTS_REPLY);
            }
            bump(&self.lp.stats.rejected_connections, 1);
            return;
        }
        if let Some(reply) = self.handler.refusal(peer) {
            if !tls {
                let _ = (&stream).write(&reply);
            }
            bump(&self.lp.stats.rejected_connections, 1);
            return;
        }
        let tls = match &self.lp.config.tls {
            None => None,
            Some(config) => match TlsConn::new(config) {
                Ok(tls) => Some(Box::new(tls)),
                Err(e) => {
                    tracing::warn!(error = %e, %peer, "cannot start TLS on a connection");
                    return;
                }
            },
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self.lp.epoll.add(stream.as_raw_fd(), EPOLLIN, slot as u64) {
            tracing::warn!(error = %e, %peer, "cannot register a connection with epoll");
            self.free.push(slot);
            return;
        }
        let id = self.lp.next_id;
        self.lp.next_id += 1;
        let app = self.handler.on_accept(id, peer);
        self.conns[slot] = Some(Conn {
            stream,
            tls,
            input: InBuf::default(),
            io: ConnIo {
                id,
                app,
                output: Vec::new(),
                sent: 0,
                parser: RequestParser::default(),
                need: 0,
                closing: false,
                overflowed: false,
                stalled: false,
                eof: false,
                write_blocked: false,
                pending: false,
                interest: EPOLLIN,
                last_active: self.mono_ms,
            },
        });
        self.live += 1;
        let stats = &self.lp.stats;
        stats
            .connected_clients
            .store(self.live as u64, Ordering::Relaxed);
        bump(&stats.total_connections_received, 1);
    }

    /// One read (Redis's `readQueryFromClient`), then every complete request in it.
    fn read(&mut self, slot: usize) {
        let Runtime {
            conns,
            handler,
            shared,
            plain,
            lp,
            ..
        } = self;
        let Some(conn) = conns[slot].as_mut() else {
            return;
        };
        if conn.io.closing || conn.io.eof {
            return; // input is ignored from here on; the interest is being dropped
        }
        let config = &lp.config;
        // With nothing held over, read into the shared buffer and run straight out of it;
        // otherwise append to what is held, making room for at least the rest of a large request.
        // TLS bytes always go to the shared buffer, to be decrypted.
        let from_shared = conn.input.is_empty() || conn.tls.is_some();
        let result = if from_shared {
            (&conn.stream).read(shared)
        } else {
            // Room for the rest of a large request, but at most doubling the buffer per read:
            // Redis allocates a big argument's whole declared length up front, which lets a
            // client that only *declares* 500 MB make the server allocate (and here zero) it.
            let held = conn.input.len();
            let missing = conn.io.need.saturating_sub(held);
            let want = missing.min(held.max(READ_CHUNK)).max(READ_CHUNK);
            (&conn.stream).read(conn.input.spare(want))
        };
        let n = match result {
            Ok(0) => {
                conn.io.eof = true;
                self.mark_pending(slot);
                return;
            }
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return
            }
            Err(_) => {
                self.close(slot);
                return;
            }
        };
        bump(&lp.stats.total_net_input_bytes, n as u64);
        conn.io.last_active = self.mono_ms;
        if let Some(tls) = conn.tls.as_mut() {
            plain.clear();
            let closed = match tls.receive(&shared[..n], plain) {
                Ok(Received::Bytes) => false,
                Ok(Received::Closed) => true,
                Err(failure) => {
                    self.fail_tls(slot, failure);
                    return;
                }
            };
            if conn.input.is_empty() {
                run_fresh(&mut **handler, conn, plain, config, self.now);
            } else {
                conn.input.push(plain);
                run_held(&mut **handler, conn, config, self.now);
            }
            // The peer's close_notify: it sends nothing more, as a plaintext peer's FIN says.
            conn.io.eof |= closed;
        } else if from_shared {
            run_fresh(&mut **handler, conn, &shared[..n], config, self.now);
        } else {
            conn.input.end += n;
            run_held(&mut **handler, conn, config, self.now);
        }
        self.after_batch(slot);
    }

    /// Closes a TLS connection that cannot go on, saying why to the log and (best effort, in one
    /// write) to the client: a plaintext client gets a RESP error it can show, a TLS client the
    /// alert rustls queued.
    fn fail_tls(&mut self, slot: usize, failure: TlsFailure) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let peer = conn.stream.peer();
        match failure {
            TlsFailure::Plaintext => {
                tracing::warn!(%peer, "refused a client that does not speak TLS on a TLS port");
                let _ = (&conn.stream).write(PLAINTEXT_REFUSAL);
            }
            TlsFailure::Protocol(error) => {
                tracing::warn!(%peer, %error, "TLS failed; closing the connection");
                if let Some(tls) = conn.tls.as_mut() {
                    let _ = tls.send(&mut &conn.stream);
                }
            }
        }
        self.close(slot);
    }

    /// After requests ran: a connection whose output would pass `max_output_bytes` is closed at
    /// once, without its output; any other has output to send (or a close to settle).
    fn after_batch(&mut self, slot: usize) {
        if self.conns[slot].as_ref().is_some_and(|c| c.io.overflowed) {
            bump(&self.lp.stats.client_output_buffer_limit_disconnections, 1);
            self.close(slot);
        } else {
            self.mark_pending(slot);
        }
    }

    /// Runs the held requests of stalled connections whose output has drained.
    fn resume_stalled(&mut self) {
        let mut resume = std::mem::take(&mut self.resume);
        for &(slot, id) in &resume {
            let Runtime {
                conns, handler, lp, ..
            } = self;
            let Some(conn) = conns[slot].as_mut().filter(|c| c.io.id == id) else {
                continue;
            };
            if !conn.io.stalled || conn.io.closing {
                continue;
            }
            run_held(&mut **handler, conn, &lp.config, self.now);
            self.after_batch(slot);
        }
        resume.clear();
        self.resume = resume;
    }

    fn mark_pending(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut() {
            if !conn.io.pending {
                conn.io.pending = true;
                self.pending.push(slot);
            }
        }
    }

    /// Redis's `handleClientsWithPendingWrites`: one send per connection with output, then closes
    /// and epoll interest brought up to date.
    fn flush(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        for &slot in &pending {
            self.settle(slot);
        }
        pending.clear();
        self.pending = pending;
    }

    fn settle(&mut self, slot: usize) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        conn.io.pending = false;
        let sent = match conn.tls.as_deref_mut() {
            None => send_plain(&conn.stream, &mut conn.io),
            Some(tls) => send_tls(tls, &conn.stream, &mut conn.io),
        };
        match sent {
            Ok(0) => {}
            Ok(n) => {
                bump(&self.lp.stats.total_net_output_bytes, n as u64);
                conn.io.last_active = self.mono_ms;
            }
            Err(_) => {
                self.close(slot);
                return;
            }
        }
        if conn.flushed() && conn.io.finishing() {
            self.close(slot);
            return;
        }
        let io = &mut conn.io;
        if io.stalled && io.unsent() < self.lp.config.output_pause_bytes {
            self.resume.push((slot, io.id));
        }
        let mut interest = 0;
        let (_, max_input) = self
            .lp
            .config
            .request_limits(self.handler.authenticated(&io.app));
        if !io.closing && !io.eof && conn.input.len() < max_input {
            interest |= EPOLLIN;
        }
        if io.write_blocked {
            interest |= EPOLLOUT;
        }
        if interest != io.interest {
            let fd = conn.stream.as_raw_fd();
            if let Err(e) = self.lp.epoll.modify(fd, interest, slot as u64) {
                tracing::warn!(error = %e, "cannot change a connection's epoll interest; closing it");
                self.close(slot);
                return;
            }
            io.interest = interest;
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut conn) = self.conns[slot].take() {
            self.handler.on_close(&mut conn.io.app);
            self.live -= 1;
            self.lp
                .stats
                .connected_clients
                .store(self.live as u64, Ordering::Relaxed);
            self.freed.push(slot);
            // Dropping the stream closes the socket, which also removes it from the epoll set.
        }
    }

    fn tick(&mut self) {
        self.handler.tick(self.now);
        self.pause_listener(false);
        let idle = self.lp.config.idle_timeout_ms;
        if idle > 0 {
            for slot in 0..self.conns.len() {
                let expired = self.conns[slot]
                    .as_ref()
                    .is_some_and(|c| self.mono_ms.saturating_sub(c.io.last_active) > idle);
                if expired {
                    self.close(slot);
                }
            }
        }
    }

    fn shutdown(&mut self) {
        self.refresh_clock();
        for conn in self.conns.iter_mut().flatten() {
            match conn.tls.as_deref_mut() {
                None if conn.io.unsent() > 0 => {
                    let _ = (&conn.stream).write(&conn.io.output[conn.io.sent..]);
                }
                None => {}
                Some(tls) => {
                    conn.io.closing = true;
                    let _ = send_tls(tls, &conn.stream, &mut conn.io);
                }
            }
        }
        for slot in 0..self.conns.len() {
            self.close(slot);
        }
        self.handler.on_shutdown(self.now);
    }
}

/// One send of a plaintext connection's output (Redis's `writeToClient`), if it has any: if it
/// is short the socket buffer is full, and a second would see EAGAIN. The bytes sent.
fn send_plain<C>(stream: &Socket, io: &mut ConnIo<C>) -> io::Result<usize> {
    if io.unsent() == 0 {
        return Ok(0);
    }
    match (&*stream).write(&io.output[io.sent..]) {
        Ok(n) => {
            io.advance(n);
            io.write_blocked = io.unsent() > 0;
            Ok(n)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            io.write_blocked = true;
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

/// The same for a TLS connection: its output is encrypted (at most rustls's 64 KiB at a time, so
/// the rest stays in `output` where the output limits see it) and written with one `writev` per
/// batch of records, until the socket is full or nothing is left; a connection that is finishing
/// ends with `close_notify`. The bytes sent.
fn send_tls<C>(tls: &mut TlsConn, stream: &Socket, io: &mut ConnIo<C>) -> io::Result<usize> {
    let mut sent = 0;
    loop {
        let taken = tls.encrypt(&io.output[io.sent..]);
        if taken > 0 {
            io.advance(taken);
        }
        if io.unsent() == 0 && io.finishing() {
            tls.close_notify();
        }
        if !tls.wants_write() {
            io.write_blocked = false;
            return Ok(sent);
        }
        match tls.send(&mut &*stream) {
            Ok(n) => sent += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                io.write_blocked = true;
                return Ok(sent);
            }
            Err(e) => return Err(e),
        }
        if tls.wants_write() {
            // A short write: the socket buffer is full.
            io.write_blocked = true;
            return Ok(sent);
        }
    }
}

/// Whether an error says the process (or the system) has no file descriptor left.
fn is_out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// A descriptor to hold in reserve for turning clients away when the process runs out.
fn spare_fd() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Runs the requests in `batch`, bytes just read (or decrypted) for a connection holding no
/// input, and keeps their unfinished tail as the connection's input.
fn run_fresh<H: Handler>(
    handler: &mut H,
    conn: &mut Conn<H::Conn>,
    batch: &[u8],
    config: &LoopConfig,
    now: Now,
) {
    let used = run_batch(handler, &mut conn.io, batch, config, now);
    if !conn.io.closing {
        conn.input.push(&batch[used..]);
    }
}

/// Runs the requests in a connection's held input.
fn run_held<H: Handler>(handler: &mut H, conn: &mut Conn<H::Conn>, config: &LoopConfig, now: Now) {
    let used = run_batch(handler, &mut conn.io, conn.input.unread(), config, now);
    conn.input.consume(used);
    if conn.io.closing {
        conn.input.clear();
    }
}

/// Runs the complete requests at the front of `buf` for one connection and returns how many bytes
/// they took. Stops early when the connection is closing or its output must drain first. A
/// request left unfinished at the end stays in `io.parser`, which resumes it when `buf` (then the
/// connection's held input, starting with that request) has grown.
fn run_batch<H: Handler>(
    handler: &mut H,
    io: &mut ConnIo<H::Conn>,
    buf: &[u8],
    config: &LoopConfig,
    now: Now,
) -> usize {
    let mut argv: [&[u8]; ARGV_INLINE] = [&[]; ARGV_INLINE];
    let mut pos = 0;
    io.stalled = false;
    while !io.closing && pos < buf.len() {
        if io.unsent() >= config.output_pause_bytes {
            io.stalled = true;
            break;
        }
        let rest = &buf[pos..];
        if rest.len() < io.need {
            break;
        }
        let (limits, max_request) = config.request_limits(handler.authenticated(&io.app));
        let out_limit = io.sent + config.max_output_bytes;
        let flow = match io.parser.parse(rest, limits) {
            Ok(Parsed::Request { consumed }) => {
                io.need = 0;
                pos += consumed;
                let ranges = io.parser.args();
                if ranges.len() <= ARGV_INLINE {
                    for (arg, range) in argv.iter_mut().zip(ranges) {
                        *arg = &rest[range.clone()];
                    }
                    let args = &argv[..ranges.len()];
                    handler.on_request(&mut io.app, args, &mut io.output, out_limit, now)
                } else {
                    let args: Vec<&[u8]> = ranges.iter().map(|r| &rest[r.clone()]).collect();
                    handler.on_request(&mut io.app, &args, &mut io.output, out_limit, now)
                }
            }
            Ok(Parsed::Inline { consumed, args }) => {
                io.need = 0;
                pos += consumed;
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                handler.on_request(&mut io.app, &args, &mut io.output, out_limit, now)
            }
            Ok(Parsed::Empty { consumed }) => {
                io.need = 0;
                pos += consumed;
                Flow::Continue
            }
            Ok(Parsed::Incomplete { needed }) => {
                if needed > max_request {
                    protocol_error(io, &ProtocolError("too big request".into()));
                } else {
                    io.need = needed;
                }
                break;
            }
            Err(e) => {
                protocol_error(io, &e);
                break;
            }
        };
        match flow {
            Flow::Continue => {}
            Flow::Close => io.closing = true,
            Flow::Disconnect => {
                io.overflowed = true;
                break;
            }
        }
        if io.unsent() > config.max_output_bytes {
            io.overflowed = true;
            break;
        }
    }
    pos
}

/// Answers a malformed request and closes after the reply, like Redis's `setProtocolError`.
fn protocol_error<C>(io: &mut ConnIo<C>, error: &ProtocolError) {
    write_error(&mut io.output, &error.to_reply());
    io.closing = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use cads_protocol::resp::{parse_reply, write_request};
    use cads_protocol::Reply;
    use std::net::Shutdown;
    use std::thread::JoinHandle;
    use std::time::Duration;

    /// PING, ECHO x, LEN x (length of x), QUIT; anything else is an error.
    #[derive(Default)]
    struct TestHandler {
        accepted: u64,
        closed: u64,
        shutdown: bool,
        requests: u64,
        /// Largest output buffer a request was appended to: shows that stalling bounds it.
        max_output: usize,
    }

    impl Handler for TestHandler {
        type Conn = ConnId;

        fn on_accept(&mut self, id: ConnId, _peer: SocketAddr) -> ConnId {
            self.accepted += 1;
            id
        }

        fn on_request(
            &mut self,
            _: &mut ConnId,
            args: &[&[u8]],
            out: &mut Vec<u8>,
            _: usize,
            _: Now,
        ) -> Flow {
            assert!(!self.shutdown);
            self.requests += 1;
            self.max_output = self.max_output.max(out.len());
            match (args[0].to_ascii_uppercase().as_slice(), args.len()) {
                (b"PING", 1) => out.extend_from_slice(b"+PONG\r\n"),
                (b"ECHO", 2) => cads_protocol::resp::write_bulk(out, args[1]),
                (b"LEN", 2) => cads_protocol::resp::write_int(out, args[1].len() as i64),
                (b"QUIT", 1) => {
                    out.extend_from_slice(b"+OK\r\n");
                    return Flow::Close;
                }
                _ => out.extend_from_slice(b"-ERR unknown command\r\n"),
            }
            Flow::Continue
        }

        fn on_close(&mut self, _: &mut ConnId) {
            self.closed += 1;
        }

        fn before_reply(&mut self, _: Now) {}

        fn tick(&mut self, _: Now) {}

        fn on_shutdown(&mut self, _: Now) {
            assert_eq!(
                self.accepted, self.closed,
                "on_close runs for every connection first"
            );
            self.shutdown = true;
        }
    }

    struct Server {
        addr: SocketAddr,
        stats: Arc<SharedStats>,
        stop: Arc<AtomicBool>,
        thread: JoinHandle<(TestHandler, io::Result<()>)>,
    }

    impl Server {
        fn start(config: LoopConfig) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut event_loop = EventLoop::new(listener, config).unwrap();
            let addr = event_loop.local_addr().unwrap();
            let stats = event_loop.stats_handle();
            let stop = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                let mut handler = TestHandler::default();
                let result = event_loop.run(&mut handler, &flag);
                (handler, result)
            });
            Server {
                addr,
                stats,
                stop,
                thread,
            }
        }

        fn quick() -> LoopConfig {
            LoopConfig {
                tick_ms: 5,
                ..LoopConfig::default()
            }
        }

        fn stop(self) -> TestHandler {
            self.stop.store(true, Ordering::Release);
            let (handler, result) = self.thread.join().unwrap();
            result.unwrap();
            assert!(handler.shutdown);
            handler
        }

        /// Waits (without a deadline that decides the outcome) until `check` holds.
        fn wait_for(&self, check: impl Fn(&LoopStats) -> bool) {
            while !check(&self.stats.snapshot()) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    struct Client<S = TcpStream> {
        stream: S,
        buf: Vec<u8>,
        pos: usize,
    }

    impl Client {
        fn connect(addr: SocketAddr) -> Client {
            let stream = TcpStream::connect(addr).unwrap();
            stream.set_nodelay(true).unwrap();
            // Only a safety net against a hung test, never what decides a pass.
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            Client {
                stream,
                buf: Vec::new(),
                pos: 0,
            }
        }
    }

    impl<S: Read + Write> Client<S> {
        fn send(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).unwrap();
            self.stream.flush().unwrap(); // TLS: what rustls still holds
        }

        fn request(&mut self, args: &[&[u8]]) {
            let mut out = Vec::new();
            write_request(&mut out, args);
            self.send(&out);
        }

        /// Reads more; false at EOF.
        fn fill(&mut self) -> bool {
            if self.pos > 0 && self.pos == self.buf.len() {
                self.buf.clear();
                self.pos = 0;
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    true
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => false,
                Err(e) => panic!("read failed: {e}"),
            }
        }

        fn reply(&mut self) -> Reply<'static> {
            loop {
                if let Some((reply, used)) = parse_reply(&self.buf[self.pos..]).unwrap() {
                    self.pos += used;
                    return reply;
                }
                assert!(self.fill(), "connection closed while a reply was expected");
            }
        }

        fn status(&mut self) -> String {
            match self.reply() {
                Reply::Status(s) => s.into_owned(),
                Reply::Error(e) => format!("-{e}"),
                other => panic!("unexpected reply {other:?}"),
            }
        }

        fn bulk(&mut self) -> Vec<u8> {
            match self.reply() {
                Reply::Bulk(b) => b.into_owned(),
                other => panic!("unexpected reply {other:?}"),
            }
        }

        /// True if the server closed the connection with nothing more to say.
        fn at_eof(&mut self) -> bool {
            self.pos == self.buf.len() && !self.fill()
        }
    }

    #[test]
    fn pipelined_requests_are_answered_in_order() {
        let server = Server::start(Server::quick());
        let client = Client::connect(server.addr);
        answers_a_pipeline_in_order(server, client);
    }

    fn answers_a_pipeline_in_order<S: Read + Write>(server: Server, mut client: Client<S>) {
        let mut batch = Vec::new();
        for i in 0..1000 {
            if i % 10 == 0 {
                batch.extend_from_slice(format!("ECHO inline{i}\r\n").as_bytes());
            } else {
                write_request(
                    &mut batch,
                    &[b"ECHO".as_slice(), format!("v{i}").as_bytes()],
                );
            }
        }
        client.send(&batch);
        for i in 0..1000 {
            let expected = if i % 10 == 0 {
                format!("inline{i}")
            } else {
                format!("v{i}")
            };
            assert_eq!(client.bulk(), expected.as_bytes());
        }
        let handler = server.stop();
        assert_eq!(handler.requests, 1000);
    }

    #[test]
    fn a_request_split_byte_by_byte_is_reassembled() {
        let server = Server::start(Server::quick());
        let mut client = Client::connect(server.addr);
        let mut bytes = Vec::new();
        write_request(&mut bytes, &[b"ECHO".as_slice(), &[b'x'; 300]]);
        bytes.extend_from_slice(b"PING\r\n*0\r\n\r\n");
        write_request(&mut bytes, &[b"LEN".as_slice(), b"four"]);
        for byte in &bytes {
            client.send(std::slice::from_ref(byte));
        }
        assert_eq!(client.bulk(), vec![b'x'; 300]);
        assert_eq!(client.status(), "PONG");
        assert_eq!(client.reply(), Reply::Int(4));
        server.stop();
    }

    #[test]
    fn a_five_mib_bulk_goes_both_ways() {
        let server = Server::start(Server::quick());
        let client = Client::connect(server.addr);
        five_mib_go_both_ways(server, client);
    }

    fn five_mib_go_both_ways<S: Read + Write>(server: Server, mut client: Client<S>) {
        let value: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        client.request(&[b"LEN", &value]);
        client.request(&[b"ECHO", &value]);
        client.request(&[b"PING"]);
        assert_eq!(client.reply(), Reply::Int(value.len() as i64));
        assert!(client.bulk() == value);
        assert_eq!(client.status(), "PONG");
        let stats = server.stats.snapshot();
        assert!(stats.total_net_input_bytes > 10 * 1024 * 1024);
        assert!(stats.total_net_output_bytes > 5 * 1024 * 1024);
        server.stop();
    }

    #[test]
    fn a_protocol_error_is_answered_then_the_connection_closes() {
        let server = Server::start(Server::quick());
        let mut client = Client::connect(server.addr);
        client.send(b"PING\r\n*1\r\n$abc\r\nPING\r\n");
        assert_eq!(client.status(), "PONG");
        assert_eq!(client.status(), "-ERR Protocol error: invalid bulk length");
        assert!(client.at_eof());

        let mut client = Client::connect(server.addr);
        client.send(b"*1\r\n$4\r\nPINGxx");
        assert_eq!(
            client.status(),
            "-ERR Protocol error: bulk string is not terminated by CRLF"
        );
        assert!(client.at_eof());
        let handler = server.stop();
        assert_eq!(handler.requests, 1);
    }

    #[test]
    fn a_request_over_max_request_bytes_is_refused() {
        let server = Server::start(LoopConfig {
            max_request_bytes: 1000,
            ..Server::quick()
        });
        let mut client = Client::connect(server.addr);
        client.request(&[b"ECHO", &[b'y'; 900]]);
        assert_eq!(client.bulk().len(), 900);
        client.send(b"*2\r\n$4\r\nECHO\r\n$5000\r\n");
        assert_eq!(client.status(), "-ERR Protocol error: too big request");
        assert!(client.at_eof());
        server.stop();
    }

    #[test]
    fn unauthenticated_connections_are_held_to_the_largest_request_their_limits_allow() {
        let config = LoopConfig::default();
        let (limits, largest) = config.request_limits(false);
        assert!(limits.unauthenticated);
        assert_eq!((limits.max_args, limits.max_bulk), (10, 16 * 1024));
        assert!(
            (10 * 16 * 1024..200 * 1024).contains(&largest),
            "ten 16 KiB arguments with their headers: {largest}"
        );
        let (limits, largest) = config.request_limits(true);
        assert!(!limits.unauthenticated);
        assert_eq!(largest, config.max_request_bytes);
    }

    #[test]
    fn quit_flushes_its_reply_and_runs_nothing_after_it() {
        let server = Server::start(Server::quick());
        let client = Client::connect(server.addr);
        quit_flushes_its_reply_and_closes(server, client);
    }

    fn quit_flushes_its_reply_and_closes<S: Read + Write>(server: Server, mut client: Client<S>) {
        client.send(b"PING\r\nQUIT\r\nPING\r\n");
        assert_eq!(client.status(), "PONG");
        assert_eq!(client.status(), "OK");
        assert!(client.at_eof());
        let handler = server.stop();
        assert_eq!(handler.requests, 2);
    }

    #[test]
    fn clients_beyond_max_clients_are_rejected() {
        let server = Server::start(LoopConfig {
            max_clients: 2,
            ..Server::quick()
        });
        let mut first = Client::connect(server.addr);
        let mut second = Client::connect(server.addr);
        for client in [&mut first, &mut second] {
            client.send(b"PING\r\n");
            assert_eq!(client.status(), "PONG");
        }
        let mut third = Client::connect(server.addr);
        assert_eq!(third.status(), "-ERR max number of clients reached");
        assert!(third.at_eof());
        let stats = server.stats.snapshot();
        assert_eq!(stats.connected_clients, 2);
        assert_eq!(stats.rejected_connections, 1);
        assert_eq!(stats.total_connections_received, 2);

        drop(first);
        server.wait_for(|s| s.connected_clients == 1);
        let mut fourth = Client::connect(server.addr);
        fourth.send(b"PING\r\n");
        assert_eq!(fourth.status(), "PONG");
        let handler = server.stop();
        assert_eq!((handler.accepted, handler.closed), (3, 3));
    }

    #[test]
    fn the_stop_flag_ends_run_and_shutdown_runs_last() {
        let server = Server::start(Server::quick());
        let mut client = Client::connect(server.addr);
        client.send(b"PING\r\n");
        assert_eq!(client.status(), "PONG");
        let handler = server.stop();
        assert_eq!((handler.accepted, handler.closed), (1, 1));
        assert!(client.at_eof());
    }

    /// 100k pipelined requests written before any reply is read, with ~11 MB of replies (more than
    /// the kernel buffers hold), so the connection must stall; nothing may be lost or reordered,
    /// and the output buffer must stay bounded.
    #[test]
    fn output_backpressure_loses_and_reorders_nothing() {
        let server = Server::start(Server::quick());
        let client = Client::connect(server.addr);
        backpressure_loses_and_reorders_nothing(server, client);
    }

    fn backpressure_loses_and_reorders_nothing<S: Read + Write>(
        server: Server,
        mut client: Client<S>,
    ) {
        const N: usize = 100_000;
        let pad = [b'p'; 100];
        let mut batch = Vec::with_capacity(N * 140);
        for i in 0..N {
            let mut value = format!("{i}:").into_bytes();
            value.extend_from_slice(&pad);
            write_request(&mut batch, &[b"ECHO".as_slice(), &value]);
        }
        client.send(&batch);
        for i in 0..N {
            let value = client.bulk();
            let prefix = format!("{i}:");
            assert!(
                value.starts_with(prefix.as_bytes()),
                "reply {i} out of order"
            );
            assert_eq!(value.len(), prefix.len() + pad.len());
        }
        let handler = server.stop();
        assert_eq!(handler.requests, N as u64);
        assert!(
            handler.max_output < 1024 * 1024,
            "output grew to {}",
            handler.max_output
        );
    }

    #[test]
    fn a_half_closed_client_gets_every_reply_then_eof() {
        let server = Server::start(Server::quick());
        let client = Client::connect(server.addr);
        a_finished_client_gets_every_reply_then_eof(server, client);
    }

    fn a_finished_client_gets_every_reply_then_eof<S: Read + Write + Finish>(
        server: Server,
        mut client: Client<S>,
    ) {
        const N: usize = 20_000;
        let mut batch = Vec::new();
        for i in 0..N {
            write_request(
                &mut batch,
                &[b"ECHO".as_slice(), format!("{i:0>400}").as_bytes()],
            );
        }
        client.send(&batch);
        client.stream.finish();
        for i in 0..N {
            assert_eq!(client.bulk(), format!("{i:0>400}").as_bytes());
        }
        assert!(client.at_eof());
        server.wait_for(|s| s.connected_clients == 0);
        server.stop();
    }

    /// A connection that sends nothing is closed by the server. (Nothing is sent first: with a
    /// timeout this short, a client slowed by a busy machine could find the connection closed
    /// before its first request.)
    #[test]
    fn idle_connections_are_closed() {
        let server = Server::start(LoopConfig {
            idle_timeout_ms: 20,
            ..Server::quick()
        });
        let mut client = Client::connect(server.addr);
        assert!(client.at_eof());
        server.wait_for(|s| s.connected_clients == 0);
        server.stop();
    }

    #[test]
    fn empty_requests_get_no_reply() {
        let server = Server::start(Server::quick());
        let mut client = Client::connect(server.addr);
        client.send(b"*0\r\n*-1\r\n\r\n   \r\nPING\r\n");
        assert_eq!(client.status(), "PONG");
        let handler = server.stop();
        assert_eq!(handler.requests, 1);
    }

    /// Random bytes on many connections: whatever the loop answers, it must keep serving.
    #[test]
    fn garbage_never_takes_the_loop_down() {
        let server = Server::start(Server::quick());
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const ALPHABET: &[u8] = b"*$\r\n-0123456789:+abcPING \"'\\x";
        for round in 0..100 {
            let len = (next() % 2000) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if round % 2 == 0 {
                        ALPHABET[(r % ALPHABET.len() as u64) as usize]
                    } else {
                        r as u8
                    }
                })
                .collect();
            let mut client = Client::connect(server.addr);
            // The server may close first and reset the connection: both ends are fine.
            let _ = client.stream.write_all(&bytes);
            let _ = client.stream.shutdown(Shutdown::Write);
            while client.fill() {}
        }
        let mut client = Client::connect(server.addr);
        client.send(b"PING\r\n");
        assert_eq!(client.status(), "PONG");
        server.wait_for(|s| s.connected_clients == 1);
        server.stop();
    }

    // TLS: the same loop, its bytes through rustls.

    type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

    /// A server configuration from a CA made for the test, and a client configuration trusting
    /// that CA (or, `trusted` false, another one).
    fn tls_configs(trusted: bool) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        use rustls::pki_types::pem::PemObject;
        let ca = cads_testkit::TestCa::new();
        let server =
            crate::tls::server_config(&ca.cmi_cert_file(), &ca.cmi_key_file(), None).unwrap();
        let other = cads_testkit::TestCa::new();
        let trusted_ca = if trusted { &ca } else { &other };
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(trusted_ca.ca_file()).unwrap()
        {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (server, Arc::new(client))
    }

    impl Server {
        fn start_tls(config: LoopConfig) -> (Server, Arc<rustls::ClientConfig>) {
            let (server, client) = tls_configs(true);
            let server = Server::start(LoopConfig {
                tls: Some(server),
                ..config
            });
            (server, client)
        }
    }

    impl Client<TlsStream> {
        fn connect_tls(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Client<TlsStream> {
            let Client { stream, .. } = Client::connect(addr);
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
            Client {
                stream: rustls::StreamOwned::new(conn, stream),
                buf: Vec::new(),
                pos: 0,
            }
        }
    }

    /// How a client says it will send nothing more.
    trait Finish {
        fn finish(&mut self);
    }

    impl Finish for TcpStream {
        fn finish(&mut self) {
            self.shutdown(Shutdown::Write).unwrap();
        }
    }

    /// `close_notify`, TLS's FIN.
    impl Finish for TlsStream {
        fn finish(&mut self) {
            self.conn.send_close_notify();
            self.flush().unwrap();
        }
    }

    /// A TLS server with [`Server::quick`]'s settings, and a client of it.
    fn tls_server_and_client() -> (Server, Client<TlsStream>) {
        let (server, tls) = Server::start_tls(Server::quick());
        let client = Client::connect_tls(server.addr, &tls);
        (server, client)
    }

    #[test]
    fn tls_pipelined_requests_are_answered_in_order() {
        let (server, client) = tls_server_and_client();
        answers_a_pipeline_in_order(server, client);
    }

    #[test]
    fn tls_a_five_mib_bulk_goes_both_ways() {
        let (server, client) = tls_server_and_client();
        five_mib_go_both_ways(server, client);
    }

    /// Replies wait in the connection's output, not in rustls, so the same stall bounds them.
    #[test]
    fn tls_output_backpressure_loses_and_reorders_nothing() {
        let (server, client) = tls_server_and_client();
        backpressure_loses_and_reorders_nothing(server, client);
    }

    /// `close_notify` is a TLS client's FIN: it still gets every reply, then the server's own
    /// `close_notify` (a clean end: rustls reports a close without it as an error, which `fill`
    /// would panic on).
    #[test]
    fn a_tls_client_that_finishes_gets_every_reply_then_close_notify() {
        let (server, client) = tls_server_and_client();
        a_finished_client_gets_every_reply_then_eof(server, client);
    }

    /// QUIT's reply, then `close_notify` (`at_eof` reads a close without it as an error).
    #[test]
    fn quit_over_tls_ends_with_close_notify() {
        let (server, client) = tls_server_and_client();
        quit_flushes_its_reply_and_closes(server, client);
    }

    /// A RESP client of a TLS port is told, in RESP, and closed; nothing it sent runs, and the
    /// loop goes on serving.
    #[test]
    fn a_plaintext_client_of_a_tls_port_is_told_and_closed() {
        let (server, tls) = Server::start_tls(Server::quick());
        for request in [
            &b"*1\r\n$4\r\nPING\r\n"[..],
            b"PING\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let mut client = Client::connect(server.addr);
            client.send(request);
            assert_eq!(
                client.status(),
                String::from_utf8_lossy(&PLAINTEXT_REFUSAL[..PLAINTEXT_REFUSAL.len() - 2])
            );
            assert!(client.at_eof());
        }
        let mut client = Client::connect_tls(server.addr, &tls);
        client.send(b"PING\r\n");
        assert_eq!(client.status(), "PONG");
        server.wait_for(|s| s.connected_clients == 1);
        let handler = server.stop();
        assert_eq!(handler.requests, 1);
    }

    /// A client beyond `max_clients` on a TLS port is closed without the plaintext reply, which a
    /// TLS client would read as a corrupt record. (It sends nothing here, so that the close is an
    /// end of stream and not a reset.)
    #[test]
    fn tls_clients_beyond_max_clients_are_closed_without_a_reply() {
        let (server, tls) = Server::start_tls(LoopConfig {
            max_clients: 1,
            ..Server::quick()
        });
        let mut first = Client::connect_tls(server.addr, &tls);
        first.send(b"PING\r\n");
        assert_eq!(first.status(), "PONG");
        let mut second = Client::connect(server.addr);
        assert!(
            second.at_eof(),
            "{:?}",
            String::from_utf8_lossy(&second.buf)
        );
        assert_eq!(server.stats.snapshot().rejected_connections, 1);
        server.stop();
    }

    /// A handshake that fails (the client does not trust the certificate; bytes that start like
    /// TLS and are not) closes that connection only.
    #[test]
    fn failed_handshakes_close_their_connection_only() {
        let (server_tls, trusting) = tls_configs(true);
        let (_, untrusting) = tls_configs(false);
        let server = Server::start(LoopConfig {
            tls: Some(server_tls),
            ..Server::quick()
        });
        let mut client = Client::connect_tls(server.addr, &untrusting);
        let err = client.stream.write_all(b"PING\r\n").unwrap_err();
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");

        let mut client = Client::connect(server.addr);
        let _ = client
            .stream
            .write_all(b"\x16\x03\x01\x00\x05hello, not TLS");
        while client.fill() {}

        let mut client = Client::connect_tls(server.addr, &trusting);
        client.send(b"PING\r\n");
        assert_eq!(client.status(), "PONG");
        server.wait_for(|s| s.connected_clients == 1);
        let handler = server.stop();
        assert_eq!(handler.requests, 1);
        assert_eq!((handler.accepted, handler.closed), (3, 3));
    }
}
