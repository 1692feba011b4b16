//! A blocking RESP connection that hands back replies byte for byte, for tests that compare
//! exact bytes or send malformed input.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use cads_protocol::resp::{parse_reply, write_request};
use cads_protocol::Reply;

/// Read timeout on test connections: generous, only there so that a hung server fails a test
/// instead of hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A blocking RESP connection that returns each reply as the exact bytes the server sent.
pub struct RespConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RespConn {
    pub fn connect(port: u16) -> RespConn {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        RespConn::from_stream(stream)
    }

    pub fn from_stream(stream: TcpStream) -> RespConn {
        RespConn {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes raw bytes (a pipelined batch, an inline command, malformed input, ...).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes one request as an array of bulk strings.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<()> {
        let mut out = Vec::new();
        write_request(&mut out, args);
        self.stream.write_all(&out)
    }

    /// Reads exactly one reply and returns its bytes, untouched.
    pub fn read_raw(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            match parse_reply(&self.buf) {
                Ok(Some((_, used))) => return Ok(self.buf.drain(..used).collect()),
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("unparsable reply {}: {e}", show(&self.buf, 200)),
                    ))
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a full reply (have {})",
                        show(&self.buf, 200)
                    ),
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one request and reads its reply's bytes.
    pub fn raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<Vec<u8>> {
        self.send(args)?;
        self.read_raw()
    }

    /// Sends one request and reads its reply, decoded.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply<'static> {
        let bytes = self.raw(args).expect("request failed");
        parse_reply(&bytes).unwrap().unwrap().0
    }

    /// True if the server closed the connection (reads EOF, or a reset) with no further bytes.
    /// Bytes that arrive instead are returned as the error.
    pub fn expect_closed(&mut self) -> Result<(), Vec<u8>> {
        if !self.buf.is_empty() {
            return Err(std::mem::take(&mut self.buf));
        }
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => return Err(chunk[..n].to_vec()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(b"<still open: read timed out>".to_vec())
                }
                Err(_) => return Ok(()),
            }
        }
    }

    pub fn set_read_timeout(&self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

/// Bytes shown for a message: printable ASCII as is, the rest escaped, cut after `max` bytes.
pub fn show(bytes: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        s.push_str(&format!("...({} bytes)", bytes.len()));
    }
    s
}
