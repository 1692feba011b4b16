//! One connection to a CMI: RESP requests out, replies in, with timeouts, over TCP or TLS.
//! Requests can be pipelined: write several, then read their replies in order.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cads_protocol::resp::parse_reply;
use cads_protocol::{Command, ErrorKind, FlushScope, Reply};

use crate::error::{ClientError, Result};
use crate::tls::{self, TlsConfig};

/// The bytes' way to the CMI.
enum Stream {
    Plain(TcpStream),
    /// Boxed: the TLS state is large, and most connections are plaintext.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    /// With TLS, writes out what rustls still holds encrypted (a plaintext socket holds nothing).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
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
}

impl Connection {
    pub fn open(
        cmi: usize,
        addr: SocketAddr,
        connect_timeout: Duration,
        io_timeout: Duration,
        password: Option<&str>,
        tls: Option<&TlsConfig>,
    ) -> Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, connect_timeout).map_err(|e| {
            ClientError::Unavailable {
                cmi,
                reason: format!("cannot connect to {addr}: {e}"),
                refused: e.kind() == io::ErrorKind::ConnectionRefused,
            }
        })?;
        let io = |source| ClientError::Io { cmi, source };
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(io_timeout)).map_err(io)?;
        stream.set_write_timeout(Some(io_timeout)).map_err(io)?;
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(tls) => Stream::Tls(Box::new(tls.handshake(cmi, addr, stream, io_timeout)?)),
        };
        let mut conn = Connection {
            cmi,
            stream,
            out: Vec::with_capacity(1024),
            input: Vec::with_capacity(16 * 1024),
            consumed: 0,
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
            let pending = &self.input[self.consumed..];
            match parse_reply(pending) {
                Ok(Some((reply, used))) => {
                    self.consumed += used;
                    if self.consumed == self.input.len() {
                        self.input.clear();
                        self.consumed = 0;
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
            let mut chunk = [0u8; 16 * 1024];
            let n = match self.stream.read(&mut chunk) {
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
            self.input.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one request and reads its reply.
    pub fn call(&mut self, cmd: &Command<'_>) -> Result<Reply<'static>> {
        self.queue(cmd);
        self.flush()?;
        self.read()
    }
}
