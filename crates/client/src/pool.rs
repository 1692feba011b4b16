//! Idle connections per CMI, reused across calls and sessions.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use crate::conn::Connection;
use crate::error::Result;

pub struct Pool {
    cmi: usize,
    addr: SocketAddr,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    connect_timeout: Duration,
    io_timeout: Duration,
    password: Option<String>,
}

impl Pool {
    pub fn new(
        cmi: usize,
        addr: SocketAddr,
        max_idle: usize,
        connect_timeout: Duration,
        io_timeout: Duration,
        password: Option<String>,
    ) -> Pool {
        Pool {
            cmi,
            addr,
            idle: Mutex::new(Vec::new()),
            max_idle,
            connect_timeout,
            io_timeout,
            password,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// An idle connection, or a new one.
    pub fn take(&self) -> Result<Connection> {
        if let Some(conn) = self.idle.lock().expect("pool lock").pop() {
            return Ok(conn);
        }
        Connection::open(
            self.cmi,
            self.addr,
            self.connect_timeout,
            self.io_timeout,
            self.password.as_deref(),
        )
    }

    /// Returns a healthy connection (one whose every reply was read) for reuse.
    pub fn put(&self, conn: Connection) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }

    /// Drops every idle connection (after the CMI failed, for instance).
    pub fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }
}
