//! Session ids served to other processes (000 §5.1): the coordinator hands out disjoint ranges
//! over a connection, so that the clients of every process that asks it number their sessions
//! apart, and a coordinator restarted from its state file never hands out an id twice: it
//! reserves ids a block at a time and saves the end of the block ([`SharedState`]) before it
//! hands out any id of it.
//!
//! The wire is [`crate::wire`]'s frames. `IDRANGE` is answered with the first id of a range of
//! [`DEFAULT_RANGE`] ids and the first id after it; `PING` with `PONG`; with a password, a
//! connection's first request must be `AUTH password`.
//!
//! Served ids lie at or above [`SERVED_IDS_START`] (2^62), where no embedded coordinator
//! numbers ([`crate::random_block`] stays below), so that processes that ask the service and
//! processes that number for themselves never meet. A service without a state file starts at a
//! random block of that space, as an embedded coordinator does of its own.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cads_client::{RangeSource, SessionId};

use crate::state_file::SharedState;
use crate::wire::{accept_login, login, number, Framed};
use crate::DEFAULT_RANGE;

/// The first id the service hands out.
pub const SERVED_IDS_START: u64 = 1 << 62;

/// Ids reserved at each save of the state: 4096 ranges.
pub const RESERVE: u64 = DEFAULT_RANGE << 12;

/// Where a new service starts: at [`SERVED_IDS_START`] when its state survives it (a restart
/// goes on from the saved reservation), else at a random block above it.
pub fn first_served_id(durable: bool) -> u64 {
    if durable {
        SERVED_IDS_START
    } else {
        SERVED_IDS_START + (crate::random_block() << 30)
    }
}

/// The ranges a coordinator hands out, reserved in its state (or in memory only).
#[derive(Debug)]
pub struct IdRanges {
    state: Option<Arc<SharedState>>,
    /// The next id to hand out, and the end of the reservation.
    next: Mutex<(u64, u64)>,
}

impl IdRanges {
    /// Ranges from the first id the state has not reserved.
    pub fn new(state: Arc<SharedState>) -> IdRanges {
        let first = state.next_session_id();
        IdRanges {
            state: Some(state),
            next: Mutex::new((first, first)),
        }
    }

    /// Ranges kept in memory only, from a random block of the served ids: for a service that
    /// lives as long as the processes it numbers (a benchmark's AppNodes).
    pub fn in_memory() -> IdRanges {
        let first = first_served_id(false);
        IdRanges {
            state: None,
            next: Mutex::new((first, first)),
        }
    }

    /// A range of `len` ids nobody was given; an error when the reservation it needs cannot be
    /// saved (no id is handed out then).
    pub fn grant(&self, len: u64) -> io::Result<Range<SessionId>> {
        let mut next = self.next.lock().expect("id ranges");
        let (start, reserved) = *next;
        let end = start
            .checked_add(len)
            .filter(|&end| end < 1 << 63)
            .ok_or_else(|| io::Error::other("session ids exhausted"))?;
        if end > reserved {
            let until = end.saturating_add(RESERVE).min(1 << 63);
            if let Some(state) = &self.state {
                state.save_next_session_id(until)?;
            }
            next.1 = until;
        }
        next.0 = end;
        Ok(start..end)
    }
}

/// The ranges a server hands out: None while its coordinator stands by.
type Serving = Arc<RwLock<Option<Arc<IdRanges>>>>;

/// The service answering `IDRANGE` on a TCP address, until dropped.
pub struct IdServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    serving: Serving,
}

impl IdServer {
    /// Listens on `addr` (port 0: any free port), handing out `ranges` (None: refusing
    /// `IDRANGE` until [`IdServer::serve`] gives some); with `password`, every connection must
    /// log in.
    pub fn start(
        addr: SocketAddr,
        ranges: Option<Arc<IdRanges>>,
        password: Option<String>,
    ) -> io::Result<IdServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let serving = Arc::new(RwLock::new(ranges));
        let (stopping, served) = (stop.clone(), serving.clone());
        std::thread::Builder::new()
            .name("id-service".into())
            .spawn(move || accept_loop(listener, served, password, stopping))?;
        Ok(IdServer {
            addr,
            stop,
            serving,
        })
    }

    /// Hands out `ranges` from now on; None refuses `IDRANGE` (a standby coordinator's server,
    /// whose clients then ask the next address they know).
    pub fn serve(&self, ranges: Option<Arc<IdRanges>>) {
        *self.serving.write().expect("served ranges") = ranges;
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for IdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn accept_loop(
    listener: TcpListener,
    ranges: Serving,
    password: Option<String>,
    stop: Arc<AtomicBool>,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        let (ranges, password, stop) = (ranges.clone(), password.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("id-service-conn".into())
            .spawn(move || serve(Framed::new(stream), &ranges, password.as_deref(), &stop));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "id service: no thread for a connection");
        }
    }
}

fn serve(
    mut conn: Framed<TcpStream>,
    ranges: &RwLock<Option<Arc<IdRanges>>>,
    password: Option<&str>,
    stop: &AtomicBool,
) {
    if !accept_login(&mut conn, password) {
        return;
    }
    while let Ok(Some(request)) = conn.receive() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let name = request.first().map(|n| n.to_ascii_uppercase());
        let reply: Vec<Vec<u8>> = match name.as_deref() {
            Some(b"PING") => vec![b"PONG".to_vec()],
            Some(b"IDRANGE") if request.len() == 1 => {
                let serving = ranges.read().expect("served ranges").clone();
                match serving.map(|r| r.grant(DEFAULT_RANGE)) {
                    Some(Ok(range)) => vec![
                        range.start.to_string().into_bytes(),
                        range.end.to_string().into_bytes(),
                    ],
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "cannot reserve session ids");
                        vec![format!("ERR cannot reserve session ids: {e}").into_bytes()]
                    }
                    None => vec![b"ERR standing by: ask the leading coordinator".to_vec()],
                }
            }
            Some(b"IDRANGE") => vec![b"ERR IDRANGE takes no arguments".to_vec()],
            _ => vec![b"ERR unknown command (IDRANGE or PING)".to_vec()],
        };
        if conn.send(&reply).is_err() {
            return;
        }
    }
}

/// A process's session ids from the coordinator's id service: each range is asked for over a
/// connection kept between ranges. Of several addresses (a leading coordinator and its
/// standbys, `cads coord --etcd --listen`), the one that answered last is asked first; one
/// that cannot be reached or refuses (a standby) sends the request to the next. When none
/// answers, they are asked again, after a growing pause, until one does (a warning every few
/// seconds meanwhile): no id is made up, since a made-up id could be another process's.
pub struct RemoteRanges {
    addrs: Vec<SocketAddr>,
    password: Option<String>,
    /// The address asked now, and its connection once made.
    conn: Mutex<(usize, Option<Framed<TcpStream>>)>,
}

/// How long a call to the id service may take before it is given up and made again.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

impl RemoteRanges {
    /// Asking the services at `addrs` (at least one).
    pub fn new(addrs: Vec<SocketAddr>, password: Option<String>) -> RemoteRanges {
        assert!(!addrs.is_empty(), "an id service to ask");
        RemoteRanges {
            addrs,
            password,
            conn: Mutex::new((0, None)),
        }
    }

    /// One request for a range of the address asked now, on the kept connection or a new one;
    /// on an error the next address is asked next time.
    pub fn ask(&self) -> io::Result<Range<SessionId>> {
        let mut kept = self.conn.lock().expect("id service connection");
        let (at, conn) = &mut *kept;
        let range = self.ask_at(self.addrs[*at], conn);
        if range.is_err() {
            *conn = None;
            *at = (*at + 1) % self.addrs.len();
        }
        range
    }

    fn ask_at(
        &self,
        addr: SocketAddr,
        kept: &mut Option<Framed<TcpStream>>,
    ) -> io::Result<Range<SessionId>> {
        let conn = match kept {
            Some(conn) => conn,
            None => {
                let mut conn = Framed::connect(addr, CALL_TIMEOUT)?;
                login(&mut conn, self.password.as_deref())?;
                kept.insert(conn)
            }
        };
        let answer = conn.call(&["IDRANGE"]);
        match answer.as_deref() {
            Ok([start, end]) => number(start)
                .zip(number(end))
                .filter(|(s, e)| s < e)
                .map(|(s, e)| s..e)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a range")),
            Ok([error]) => Err(io::Error::other(
                String::from_utf8_lossy(error).into_owned(),
            )),
            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "not a range")),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

impl RangeSource for RemoteRanges {
    fn next_range(&self) -> Range<SessionId> {
        let mut pause = Duration::from_millis(20);
        let mut warned: Option<Instant> = None;
        loop {
            match self.ask() {
                Ok(range) => return range,
                Err(e) => {
                    if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(5)) {
                        tracing::warn!(
                            coordinators = ?self.addrs,
                            error = %e,
                            "no session ids from the coordinator yet; asking again"
                        );
                        warned = Some(Instant::now());
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configuration::Configuration;
    use crate::state_file::{self, SavedState};

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cads-ids-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("coord.json")
    }

    fn state(path: Option<std::path::PathBuf>, next: u64) -> Arc<SharedState> {
        let saved = SavedState {
            configuration: Configuration::new(1, 1),
            next_session_id: next,
        };
        Arc::new(SharedState::new(path, saved))
    }

    /// Ranges follow each other; the state file says how far they may have gone before any id
    /// of a new block is handed out, so a coordinator restarted from it starts above them all.
    #[test]
    fn ranges_are_reserved_in_the_state_before_they_are_handed_out() {
        let path = scratch("reserve");
        let ranges = IdRanges::new(state(Some(path.clone()), SERVED_IDS_START));
        let a = ranges.grant(10).unwrap();
        let b = ranges.grant(10).unwrap();
        assert_eq!(
            (a.start, a.end, b.start),
            (SERVED_IDS_START, a.start + 10, a.end)
        );
        let saved = state_file::load(&path).unwrap().unwrap().next_session_id;
        assert_eq!(saved, a.start + 10 + RESERVE, "one save for the block");
        let restarted = IdRanges::new(state(Some(path.clone()), saved));
        assert!(restarted.grant(10).unwrap().start >= b.end);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// A reservation that cannot be saved hands out nothing, and says why.
    #[test]
    fn no_range_is_handed_out_when_its_reservation_cannot_be_saved() {
        let nowhere = std::env::temp_dir().join("cads-ids-no-such-dir/x/coord.json");
        let ranges = IdRanges::new(state(Some(nowhere), SERVED_IDS_START));
        assert!(ranges.grant(10).is_err());
        assert!(
            ranges.grant(10).is_err(),
            "nothing was handed out meanwhile"
        );
    }

    /// Ids stay below 2^63, the protocol's bound; the in-memory service starts in the served
    /// space, and an embedded coordinator's ids stay below it.
    #[test]
    fn served_ids_have_a_space_of_their_own() {
        let ranges = IdRanges::new(state(None, (1 << 63) - 5));
        assert!(ranges.grant(10).is_err(), "past 2^63");
        let first = IdRanges::in_memory().grant(1).unwrap().start;
        assert!((SERVED_IDS_START..1 << 63).contains(&first));
        let embedded = crate::Coordinator::embedded().next_range();
        assert!(embedded.end <= SERVED_IDS_START);
    }

    /// Two processes' sources over the wire get disjoint ranges; a wrong password gets none,
    /// and unknown requests an error.
    #[test]
    fn the_service_numbers_processes_apart_over_the_wire() {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let ranges = Arc::new(IdRanges::in_memory());
        let server = IdServer::start(loopback, Some(ranges), Some("secret".into())).unwrap();
        let a = RemoteRanges::new(vec![server.addr()], Some("secret".into()));
        let b = RemoteRanges::new(vec![server.addr()], Some("secret".into()));
        let (ra, rb, ra2) = (a.next_range(), b.next_range(), a.next_range());
        assert_eq!(ra.end - ra.start, DEFAULT_RANGE);
        for (x, y) in [(&ra, &rb), (&ra, &ra2), (&rb, &ra2)] {
            assert!(
                x.end <= y.start || y.end <= x.start,
                "{x:?} and {y:?} overlap"
            );
        }
        let intruder = RemoteRanges::new(vec![server.addr()], Some("guess".into()));
        assert_eq!(
            intruder.ask().unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        let mut conn = Framed::connect(server.addr(), CALL_TIMEOUT).unwrap();
        login(&mut conn, Some("secret")).unwrap();
        assert_eq!(conn.call(&["PING"]).unwrap(), [b"PONG".to_vec()]);
        let unknown = conn.call(&["GET", "k"]).unwrap();
        assert!(unknown[0].starts_with(b"ERR unknown command"));
        let extra = conn.call(&["IDRANGE", "5"]).unwrap();
        assert!(extra[0].starts_with(b"ERR IDRANGE takes no arguments"));
    }

    /// A standby's server refuses ranges, and a client that knows both addresses gets them from
    /// whichever serves, moving over when the leader stops serving.
    #[test]
    fn a_client_of_several_services_asks_the_one_that_serves() {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let ranges = Arc::new(IdRanges::in_memory());
        let standby = IdServer::start(loopback, None, None).unwrap();
        let leader = IdServer::start(loopback, Some(ranges.clone()), None).unwrap();
        let mut conn = Framed::connect(standby.addr(), CALL_TIMEOUT).unwrap();
        let refused = conn.call(&["IDRANGE"]).unwrap();
        assert!(refused[0].starts_with(b"ERR standing by"), "{refused:?}");

        let client = RemoteRanges::new(vec![standby.addr(), leader.addr()], None);
        let first = client.next_range();
        // The leader stands by, and the standby takes over from the same reservation.
        leader.serve(None);
        standby.serve(Some(ranges));
        let second = client.next_range();
        assert!(second.start >= first.end, "{first:?} then {second:?}");
        assert!(client.ask().is_ok(), "the standby's connection is kept");
    }
}
