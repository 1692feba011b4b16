//! A small blocking connection pool with a checkout timeout, and a timed lock; shared by the
//! backends.

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};

/// Who a connection is on the server: enough to end its session there after the client gave up
/// on the connection (see [`Pool::in_doubt`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerSession {
    /// The server's id of the session (PostgreSQL's backend pid, MySQL's connection id).
    pub id: i64,
    /// When it started, where ids are reused (PostgreSQL); empty otherwise.
    pub started: String,
}

/// A connection that may know its [`ServerSession`].
pub(crate) trait ServerSide {
    fn server_session(&self) -> Option<ServerSession> {
        None
    }
}

struct State<C> {
    idle: Vec<C>,
    /// Connections open: idle plus checked out plus being opened.
    open: usize,
}

/// At most `size` connections, opened lazily; a checkout waits at most `timeout` for one.
pub(crate) struct Pool<C: ServerSide> {
    state: Mutex<State<C>>,
    freed: Condvar,
    size: usize,
    timeout: Duration,
    /// The server sessions of connections closed as broken: a transaction of theirs whose commit
    /// the client gave up on may still commit on the server (a server that was frozen reads the
    /// COMMIT once it runs again). The store's `settle` ends them.
    in_doubt: Mutex<Vec<ServerSession>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<C: ServerSide> Pool<C> {
    pub(crate) fn new(size: usize, timeout: Duration) -> Pool<C> {
        Pool {
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            size: size.max(1),
            timeout,
            in_doubt: Mutex::new(Vec::new()),
        }
    }

    /// Takes the server sessions of connections closed as broken since the last call.
    pub(crate) fn take_in_doubt(&self) -> Vec<ServerSession> {
        std::mem::take(&mut *lock(&self.in_doubt))
    }

    /// Gives back sessions [`take_in_doubt`](Self::take_in_doubt) took that could not be ended.
    pub(crate) fn keep_in_doubt(&self, sessions: Vec<ServerSession>) {
        lock(&self.in_doubt).extend(sessions);
    }

    /// An idle connection, a new one from `connect` if fewer than `size` are open, or, after waiting
    /// up to the timeout for one to be returned, [`StoreError::Timeout`].
    pub(crate) fn get(&self, connect: impl FnOnce() -> Result<C>) -> Result<Pooled<'_, C>> {
        let deadline = Instant::now() + self.timeout;
        let mut state = lock(&self.state);
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(Pooled {
                    pool: self,
                    conn: Some(conn),
                    broken: false,
                    reused: true,
                });
            }
            if state.open < self.size {
                state.open += 1;
                drop(state);
                return match connect() {
                    Ok(conn) => Ok(Pooled {
                        pool: self,
                        conn: Some(conn),
                        broken: false,
                        reused: false,
                    }),
                    Err(e) => {
                        lock(&self.state).open -= 1;
                        self.freed.notify_one();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Timeout(self.timeout));
            }
            state = self
                .freed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Closes every idle connection (after one turned out dead, the others likely are too: the server
    /// restarted).
    pub(crate) fn discard_idle(&self) {
        let idle = {
            let mut state = lock(&self.state);
            let idle = std::mem::take(&mut state.idle);
            state.open -= idle.len();
            idle
        };
        if !idle.is_empty() {
            self.freed.notify_all();
        }
        drop(idle);
    }

    fn put_back(&self, conn: Option<C>) {
        let mut state = lock(&self.state);
        match conn {
            Some(conn) => state.idle.push(conn),
            None => state.open -= 1,
        }
        drop(state);
        self.freed.notify_one();
    }
}

/// A checked-out connection; returned to the pool on drop, or closed if marked broken.
pub(crate) struct Pooled<'p, C: ServerSide> {
    pool: &'p Pool<C>,
    conn: Option<C>,
    broken: bool,
    /// Taken from the idle list rather than connected for this checkout.
    reused: bool,
}

impl<C: ServerSide> Pooled<'_, C> {
    /// Passes `r` through, closing the connection on drop if the error leaves it in an unknown state
    /// (lost, or timed out with a statement possibly still running).
    pub(crate) fn check<T>(&mut self, r: Result<T>) -> Result<T> {
        match &r {
            Err(StoreError::Unavailable(_)) => {
                self.broken = true;
                self.pool.discard_idle();
            }
            Err(StoreError::Timeout(_)) => self.broken = true,
            _ => {}
        }
        r
    }

    /// Closes the connection on drop instead of returning it.
    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Whether the connection will be closed (lost, or in doubt after a timeout).
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether the connection sat idle in the pool before this checkout (it may have died with
    /// its server meanwhile).
    pub(crate) fn reused(&self) -> bool {
        self.reused
    }
}

impl<C: ServerSide> Deref for Pooled<'_, C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.conn.as_ref().expect("present until drop")
    }
}

impl<C: ServerSide> DerefMut for Pooled<'_, C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().expect("present until drop")
    }
}

impl<C: ServerSide> Drop for Pooled<'_, C> {
    fn drop(&mut self) {
        let conn = self.conn.take();
        if self.broken {
            if let Some(session) = conn.as_ref().and_then(ServerSide::server_session) {
                lock(&self.pool.in_doubt).push(session);
            }
            drop(conn);
            self.pool.put_back(None);
        } else {
            self.pool.put_back(conn);
        }
    }
}

/// A lock that a thread waits for at most a timeout (SQLite's single writer).
pub(crate) struct TimedLock {
    held: Mutex<bool>,
    released: Condvar,
}

impl TimedLock {
    pub(crate) fn new() -> TimedLock {
        TimedLock {
            held: Mutex::new(false),
            released: Condvar::new(),
        }
    }

    pub(crate) fn acquire(&self, timeout: Duration) -> Result<TimedGuard<'_>> {
        let deadline = Instant::now() + timeout;
        let mut held = lock(&self.held);
        while *held {
            let now = Instant::now();
            if now >= deadline {
                // Another writer held the database that long: contention, so retry the work.
                return Err(StoreError::Conflict(format!(
                    "waited {timeout:?} for the database's single writer"
                )));
            }
            held = self
                .released
                .wait_timeout(held, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *held = true;
        Ok(TimedGuard { lock: self })
    }
}

/// Holds a [`TimedLock`] until dropped.
pub(crate) struct TimedGuard<'l> {
    lock: &'l TimedLock,
}

impl Drop for TimedGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.lock.held) = false;
        self.lock.released.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ServerSide for u32 {
        fn server_session(&self) -> Option<ServerSession> {
            Some(ServerSession {
                id: i64::from(*self),
                started: String::new(),
            })
        }
    }

    #[test]
    fn broken_connections_leave_their_server_sessions_in_doubt() {
        let pool: Pool<u32> = Pool::new(2, Duration::from_millis(50));
        let healthy = pool.get(|| Ok(1)).unwrap();
        let mut broken = pool.get(|| Ok(2)).unwrap();
        broken.mark_broken();
        drop(broken);
        drop(healthy);
        let in_doubt = pool.take_in_doubt();
        assert_eq!(in_doubt.iter().map(|s| s.id).collect::<Vec<_>>(), [2]);
        assert!(pool.take_in_doubt().is_empty());
        pool.keep_in_doubt(in_doubt);
        assert_eq!(pool.take_in_doubt().len(), 1);
    }

    #[test]
    fn checkout_times_out_and_reuses() {
        let pool: Pool<u32> = Pool::new(1, Duration::from_millis(50));
        let a = pool.get(|| Ok(7)).unwrap();
        assert!(matches!(pool.get(|| Ok(8)), Err(StoreError::Timeout(_))));
        drop(a);
        assert_eq!(*pool.get(|| Ok(9)).unwrap(), 7);
        let mut b = pool.get(|| Ok(9)).unwrap();
        b.mark_broken();
        drop(b);
        assert_eq!(*pool.get(|| Ok(10)).unwrap(), 10);
    }

    #[test]
    fn failed_connect_frees_its_slot() {
        let pool: Pool<u32> = Pool::new(1, Duration::from_millis(50));
        assert!(pool
            .get(|| Err(StoreError::Unavailable("down".into())))
            .is_err());
        assert_eq!(*pool.get(|| Ok(1)).unwrap(), 1);
    }

    #[test]
    fn timed_lock() {
        let l = TimedLock::new();
        let g = l.acquire(Duration::from_millis(10)).unwrap();
        assert!(l.acquire(Duration::from_millis(10)).is_err());
        drop(g);
        assert!(l.acquire(Duration::from_millis(10)).is_ok());
    }
}
