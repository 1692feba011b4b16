//! Idle connections per CMI, reused across calls and sessions.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::conn::{Connection, Dial};
use crate::error::{ClientError, Result};

pub struct Pool {
    cmi: usize,
    addr: SocketAddr,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    dial: Dial,
    /// Until when the CMI counts as down after a failure (see [`Pool::mark_down`]).
    down_until: Mutex<Option<Instant>>,
}

/// How long a CMI that failed counts as down before it is tried again.
const DOWN_FOR: Duration = Duration::from_secs(1);

impl Pool {
    pub(crate) fn new(cmi: usize, addr: SocketAddr, max_idle: usize, dial: Dial) -> Pool {
        Pool {
            cmi,
            addr,
            idle: Mutex::new(Vec::new()),
            max_idle,
            dial,
            down_until: Mutex::new(None),
        }
    }

    /// Records that the CMI failed: for a while, callers that can do without it (replicas) skip it.
    pub fn mark_down(&self) {
        *self.down_until.lock().expect("pool lock") = Some(Instant::now() + DOWN_FOR);
    }

    /// Whether the CMI failed recently.
    pub fn is_down(&self) -> bool {
        self.down_until
            .lock()
            .expect("pool lock")
            .is_some_and(|until| Instant::now() < until)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// An idle connection, or a new one.
    pub fn take(&self) -> Result<Connection> {
        if let Some(conn) = self.idle.lock().expect("pool lock").pop() {
            return Ok(conn);
        }
        let opened = Connection::open(self.cmi, self.addr, &self.dial);
        if let Err(ClientError::Unavailable { refused: true, .. }) = &opened {
            // Nothing listens there: the CMI process is gone. (A timeout proves nothing: a CMI
            // that is only slow keeps its entries, and skipping it would let its copies go stale.)
            self.mark_down();
        }
        opened
    }

    /// Returns a healthy connection (one whose every reply was read) for reuse.
    pub fn put(&self, conn: Connection) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }

    /// Drops every idle connection (after the CMI failed).
    pub fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }
}
