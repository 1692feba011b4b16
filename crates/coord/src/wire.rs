//! Frames between the coordinator's services and their clients (the SAS core and its AppNodes,
//! the session-id service and the processes it numbers): every message, either way, is a RESP
//! array of bulk strings (a request as a CMI reads it), so `redis-cli` can talk to either, and
//! one parser with hard limits reads both directions.

use std::io::{self, Read, Write};
use std::time::Duration;

use cads_protocol::resp::{write_request, Limits, Parsed, RequestParser};

/// Most bytes one frame may hold: a frame carries a session's keys and, under write-through,
/// their new values.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// A connection that reads and writes frames.
pub struct Framed<S> {
    stream: S,
    buf: Vec<u8>,
    parser: RequestParser,
    limits: Limits,
    out: Vec<u8>,
}

impl<S: Read + Write> Framed<S> {
    pub fn new(stream: S) -> Framed<S> {
        Framed {
            stream,
            buf: Vec::new(),
            parser: RequestParser::default(),
            limits: Limits {
                max_bulk: MAX_FRAME,
                ..Limits::default()
            },
            out: Vec::new(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Sends one frame.
    pub fn send<A: AsRef<[u8]>>(&mut self, parts: &[A]) -> io::Result<()> {
        self.out.clear();
        write_request(&mut self.out, parts);
        self.stream.write_all(&self.out)?;
        self.stream.flush()
    }

    /// Reads one frame; `Ok(None)` when the peer closed the connection between frames. A
    /// malformed frame is an `InvalidData` error: the connection is to be closed.
    pub fn receive(&mut self) -> io::Result<Option<Vec<Vec<u8>>>> {
        loop {
            let parsed = self
                .parser
                .parse(&self.buf, &self.limits)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            match parsed {
                Parsed::Request { consumed } => {
                    let parts = self
                        .parser
                        .args()
                        .iter()
                        .map(|r| self.buf[r.clone()].to_vec());
                    let parts = parts.collect();
                    self.buf.drain(..consumed);
                    return Ok(Some(parts));
                }
                Parsed::Inline { consumed, args } => {
                    self.buf.drain(..consumed);
                    return Ok(Some(args));
                }
                Parsed::Empty { consumed } => {
                    self.buf.drain(..consumed);
                }
                Parsed::Incomplete { .. } => {
                    let mut chunk = [0u8; 16 * 1024];
                    let n = self.stream.read(&mut chunk)?;
                    if n == 0 {
                        if self.buf.is_empty() && !self.parser.in_request() {
                            return Ok(None);
                        }
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// Sends a frame and reads the answer; a closed connection is an error.
    pub fn call<A: AsRef<[u8]>>(&mut self, parts: &[A]) -> io::Result<Vec<Vec<u8>>> {
        self.send(parts)?;
        self.receive()?
            .ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
    }
}

impl Framed<std::net::TcpStream> {
    /// A connection to `addr`, with `TCP_NODELAY` (a frame waits for no delayed ACK) and reads
    /// that give up after `timeout`.
    pub fn connect(addr: std::net::SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Framed::new(stream))
    }
}

/// Logs in on a new connection to a core or an AppNode that wants `password` (None: nothing to
/// send).
pub fn login<S: Read + Write>(conn: &mut Framed<S>, password: Option<&str>) -> io::Result<()> {
    let Some(password) = password else {
        return Ok(());
    };
    match conn
        .call(&[b"AUTH".as_slice(), password.as_bytes()])?
        .first()
    {
        Some(ok) if ok == b"OK" => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the password was refused",
        )),
    }
}

/// The serving side of [`login`]: with a password set, the connection's first request must be
/// `AUTH password`, answered `OK`; anything else is answered with an error, and false tells the
/// caller to close the connection.
pub fn accept_login<S: Read + Write>(conn: &mut Framed<S>, password: Option<&str>) -> bool {
    let Some(password) = password else {
        return true;
    };
    match conn.receive() {
        Ok(Some(request)) => match request.as_slice() {
            [name, given] if name.eq_ignore_ascii_case(b"AUTH") && given == password.as_bytes() => {
                conn.send(&["OK"]).is_ok()
            }
            [name, _] if name.eq_ignore_ascii_case(b"AUTH") => {
                let _ = conn.send(&["ERR invalid password"]);
                false
            }
            _ => {
                let _ = conn.send(&["ERR NOAUTH Authentication required."]);
                false
            }
        },
        _ => false,
    }
}

/// A decimal number in a frame.
pub fn number(part: &[u8]) -> Option<u64> {
    std::str::from_utf8(part).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream reading from one buffer and writing to another.
    struct Pipe {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            // One byte at a time: frames arrive in pieces.
            let one = buf.len().min(1);
            self.input.read(&mut buf[..one])
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn frames_cross_in_pieces_and_end_cleanly() {
        let mut sent = Framed::new(Pipe {
            input: io::Cursor::new(Vec::new()),
            output: Vec::new(),
        });
        sent.send(&[&b"IGET"[..], b"k\r\n1", b""]).unwrap();
        sent.send(&["PING"]).unwrap();
        let bytes = std::mem::take(&mut sent.stream.output);
        let mut read = Framed::new(Pipe {
            input: io::Cursor::new(bytes),
            output: Vec::new(),
        });
        let first = read.receive().unwrap().unwrap();
        assert_eq!(
            first,
            vec![b"IGET".to_vec(), b"k\r\n1".to_vec(), Vec::new()]
        );
        assert_eq!(read.receive().unwrap().unwrap(), vec![b"PING".to_vec()]);
        assert!(read.receive().unwrap().is_none());
    }

    #[test]
    fn a_malformed_or_cut_frame_is_an_error() {
        let mut bad = Framed::new(Pipe {
            input: io::Cursor::new(b"*2\r\n$x\r\n".to_vec()),
            output: Vec::new(),
        });
        assert_eq!(
            bad.receive().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut cut = Framed::new(Pipe {
            input: io::Cursor::new(b"*2\r\n$4\r\nIGET\r\n".to_vec()),
            output: Vec::new(),
        });
        assert_eq!(
            cut.receive().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
