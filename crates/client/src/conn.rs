//! One connection to a CMI: RESP requests out, replies in, with timeouts, over TCP, TLS or a
//! Unix socket. Requests can be pipelined: write several, then read their replies in order.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use cads_protocol::resp::{parse_reply, reply_extent, ReplyExtent};
use cads_protocol::{Command, ErrorKind, FlushScope, Reply};

use crate::error::{ClientError, Result};
use crate::tls::{self, TlsConfig};

/// How connections to the CMIs are opened (from [`crate::ClientConfig`]).
#[derive(Clone)]
pub(crate) struct Dial {
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    pub password: Option<String>,
    pub tls: Option<TlsConfig>,
    pub unix_dir: Option<PathBuf>,
}

impl Dial {
    /// The Unix socket a CMI at `addr` serves, when it is on this machine, serves one in
    /// `unix_dir`, and TLS is off (TLS is for the network).
    fn unix_socket(&self, addr: SocketAddr) -> Option<PathBuf> {
        let dir = self.unix_dir.as_deref()?;
        if self.tls.is_some() || !addr.ip().is_loopback() {
            return None;
        }
        let path = cads_protocol::unix_socket_path(dir, addr.port());
        path.exists().then_some(path)
    }
}

/// Connects to the Unix socket at `path`, waiting at most `timeout`: a plain connect to a
/// listener whose backlog is full (a CMI that stopped accepting) waits as long as it stays full,
/// and on Linux the socket's send timeout bounds that wait.
fn connect_unix(path: &std::path::Path, timeout: Duration) -> io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket path is too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, &from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = from as libc::c_char;
    }
    // SAFETY: creates a socket; a negative result is checked below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket nothing else owns; the stream closes it on every path.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes, and `fd` is open.
    let rc = unsafe {
        libc::connect(
            fd,
            (&raw const addr).cast::<libc::sockaddr>(),
            len as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stream)
}

/// The bytes' way to the CMI.
enum Stream {
    Plain(TcpStream),
    /// Boxed: the TLS state is large, and most connections are plaintext.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    /// With TLS, writes out what rustls still holds encrypted (a plaintext socket holds nothing).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

pub struct Connection {
    cmi: usize,
    stream: Stream,
    out: Vec<u8>,
    input: Vec<u8>,
    /// Bytes of `input` already consumed by parsed replies.
    consumed: usize,
    /// How many bytes past `consumed` the reply under way needs before it can be whole (0: none
    /// known, look at once).
    needs: usize,
    /// Where reads land: it grows with a long reply, so that a read can take more of it.
    chunk: Vec<u8>,
}

/// The least a read asks for.
const MIN_READ: usize = 16 * 1024;
/// The most a read asks for: a reply longer than that arrives in reads of at most this.
const MAX_READ: usize = 1024 * 1024;

impl Connection {
    pub fn open(cmi: usize, addr: SocketAddr, dial: &Dial) -> Result<Connection> {
        let io = |source| ClientError::Io { cmi, source };
        let unavailable = |to: &SocketAddr, e: io::Error| ClientError::Unavailable {
            cmi,
            reason: format!("cannot connect to {to}: {e}"),
            refused: e.kind() == io::ErrorKind::ConnectionRefused,
        };
        let io_timeout = dial.io_timeout;
        // A socket nobody listens on (its server was killed, or a server started since serves
        // TCP only) is passed over for the port.
        let unix = dial
            .unix_socket(addr)
            .and_then(|path| connect_unix(&path, dial.connect_timeout).ok());
        let stream = match unix {
            Some(stream) => {
                stream.set_read_timeout(Some(io_timeout)).map_err(io)?;
                stream.set_write_timeout(Some(io_timeout)).map_err(io)?;
                Stream::Unix(stream)
            }
            None => {
                let stream = TcpStream::connect_timeout(&addr, dial.connect_timeout)
                    .map_err(|e| unavailable(&addr, e))?;
                stream.set_nodelay(true).map_err(io)?;
                stream.set_read_timeout(Some(io_timeout)).map_err(io)?;
                stream.set_write_timeout(Some(io_timeout)).map_err(io)?;
                match &dial.tls {
                    None => Stream::Plain(stream),
                    Some(tls) => {
                        Stream::Tls(Box::new(tls.handshake(cmi, addr, stream, io_timeout)?))
                    }
                }
            }
        };
        let password = dial.password.as_deref();
        let mut conn = Connection {
            cmi,
            stream,
            out: Vec::with_capacity(1024),
            input: Vec::with_capacity(MIN_READ),
            consumed: 0,
            needs: 0,
            chunk: Vec::new(),
        };
        if let Some(password) = password {
            let reply = conn.call(&Command::Auth {
                username: None,
                password: password.as_bytes(),
            })?;
            if let Reply::Error(e) = reply {
                return Err(ClientError::Auth {
                    cmi,
                    reason: e.to_string(),
                });
            }
        }
        // A CMI restored from its log may hold values overwritten while it was down: before
        // this connection reads anything, they go (a no-op once any client has dropped them).
        if let Reply::Error(e) = conn.call(&Command::FlushAll(FlushScope::Restored))? {
            return Err(ClientError::Server(e));
        }
        Ok(conn)
    }

    /// Queues a request; nothing is sent before `flush` (or `call`).
    pub fn queue(&mut self, cmd: &Command<'_>) {
        cmd.encode(&mut self.out);
    }

    /// Sends every queued request.
    pub fn flush(&mut self) -> Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = self
            .stream
            .write_all(&self.out)
            .and_then(|()| self.stream.flush());
        self.out.clear();
        result.map_err(|source| self.failed(source))
    }

    /// The error for a failed read or write: a TLS failure explained, or an I/O error.
    fn failed(&self, source: io::Error) -> ClientError {
        match tls::rustls_error(&source) {
            Some(error) => ClientError::Tls {
                cmi: self.cmi,
                reason: tls::explain(error),
            },
            None => ClientError::Io {
                cmi: self.cmi,
                source,
            },
        }
    }

    /// Reads the next reply.
    pub fn read(&mut self) -> Result<Reply<'static>> {
        loop {
            match self.whole_reply() {
                Ok(Some((reply, used))) => {
                    self.consumed += used;
                    self.needs = 0;
                    if self.consumed == self.input.len() {
                        self.input.clear();
                        self.consumed = 0;
                        // What a long reply grew is not kept for the short ones after it.
                        self.input.shrink_to(MIN_READ);
                        self.chunk.truncate(MIN_READ);
                        self.chunk.shrink_to(MIN_READ);
                    }
                    // A CMI that wants a password answers every command so, and a TLS CMI
                    // answers a plaintext client so and closes: a failure of the connection, not
                    // of the command.
                    if let Reply::Error(e) = &reply {
                        if e.kind == ErrorKind::NoAuth {
                            return Err(ClientError::Auth {
                                cmi: self.cmi,
                                reason: e.to_string(),
                            });
                        }
                        if tls::is_plaintext_refusal(e) {
                            return Err(ClientError::Tls {
                                cmi: self.cmi,
                                reason: "the CMI serves TLS only and this client speaks \
                                         plaintext: give it the CA that signed the CMI's \
                                         certificate"
                                    .into(),
                            });
                        }
                    }
                    return Ok(reply);
                }
                Ok(None) => {}
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            }
            if self.consumed > 0 {
                self.input.drain(..self.consumed);
                self.consumed = 0;
            }
            // As much as the reply still needs, and at least as much as it has: a long reply
            // arriving faster than it is read comes in few reads, whatever its length.
            let want = self
                .needs
                .saturating_sub(self.input.len())
                .max(self.input.len())
                .clamp(MIN_READ, MAX_READ);
            if self.chunk.len() < want {
                self.chunk.resize(want, 0);
            }
            let n = match self.stream.read(&mut self.chunk[..want]) {
                Ok(0) => {
                    return Err(ClientError::Io {
                        cmi: self.cmi,
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the CMI closed the connection",
                        ),
                    })
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(self.failed(source)),
            };
            self.input.extend_from_slice(&self.chunk[..n]);
        }
    }

    /// The reply at the front of what was read and not consumed, if it is whole, with its length.
    /// The first look builds it, since most replies arrive whole in one read; a reply found short
    /// is walked without being built until it is whole (see [`reply_extent`]), so that a long one
    /// arriving over many reads is built once.
    fn whole_reply(
        &mut self,
    ) -> std::result::Result<Option<(Reply<'static>, usize)>, cads_protocol::ProtocolError> {
        let pending = &self.input[self.consumed..];
        if pending.len() < self.needs {
            return Ok(None);
        }
        if self.needs == 0 {
            if let Some(whole) = parse_reply(pending)? {
                return Ok(Some(whole));
            }
        }
        match reply_extent(pending)? {
            ReplyExtent::Short { needs } => {
                self.needs = needs;
                Ok(None)
            }
            ReplyExtent::Whole(end) => match parse_reply(&pending[..end])? {
                Some(whole) => Ok(Some(whole)),
                None => Err(cads_protocol::ProtocolError(
                    "a reply walked as whole did not parse as whole".into(),
                )),
            },
        }
    }

    /// Sends one request and reads its reply.
    pub fn call(&mut self, cmd: &Command<'_>) -> Result<Reply<'static>> {
        self.queue(cmd);
        self.flush()?;
        self.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a loopback CMI whose socket exists is dialled through it.
    #[test]
    fn a_unix_socket_is_used_only_for_a_local_cmi_that_serves_one() {
        let dir = std::env::temp_dir().join(format!("cads-dial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let served = cads_protocol::unix_socket_path(&dir, 7001);
        let _listener = std::os::unix::net::UnixListener::bind(&served).unwrap();
        let dial = Dial {
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            password: None,
            tls: None,
            unix_dir: Some(dir.clone()),
        };
        let local = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(dial.unix_socket(local(7001)), Some(served.clone()));
        assert_eq!(dial.unix_socket(local(7002)), None, "no socket there");
        let remote = SocketAddr::from(([10, 0, 0, 1], 7001));
        assert_eq!(dial.unix_socket(remote), None, "another machine's");
        let without = Dial {
            unix_dir: None,
            ..dial
        };
        assert_eq!(without.unix_socket(local(7001)), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Replies that arrive in many small pieces, a long array of values among them, are read
    /// whole and in order.
    #[test]
    fn a_long_reply_in_small_pieces_reads_whole() {
        use cads_protocol::resp::write_reply_as;
        use cads_protocol::Protocol;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let values: Vec<Reply<'static>> = (0..3000)
            .map(|i| Reply::owned_bulk(format!("value {i} ").repeat(i % 40).into_bytes()))
            .collect();
        let long = Reply::Array(values);
        let mut stream_out = Vec::new();
        // The connection's first command (FLUSHALL RESTORED) gets its own reply.
        write_reply_as(&mut stream_out, &Reply::OK, Protocol::Resp2);
        write_reply_as(&mut stream_out, &long, Protocol::Resp2);
        write_reply_as(&mut stream_out, &Reply::Int(7), Protocol::Resp2);
        let cmi = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            socket.set_nodelay(true).unwrap();
            for piece in stream_out.chunks(997) {
                socket.write_all(piece).unwrap();
                socket.flush().unwrap();
            }
            // Held open until the client has read everything.
            let mut rest = Vec::new();
            let _ = socket.read_to_end(&mut rest);
        });
        let dial = Dial {
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(60),
            password: None,
            tls: None,
            unix_dir: None,
        };
        let mut conn = Connection::open(0, addr, &dial).unwrap();
        assert_eq!(conn.read().unwrap(), long);
        assert_eq!(conn.read().unwrap(), Reply::Int(7));
        drop(conn);
        cmi.join().unwrap();
    }
}
