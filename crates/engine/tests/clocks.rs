//! The engine's two clocks: leases, sessions and tombstones live on the monotonic clock, key expiry
//! on the wall clock. A step of the wall clock (NTP, an operator), forward or back, must neither
//! expire nor stretch any lease, while keys with a time to live follow the wall clock as Redis's do.

use cads_engine::{Engine, EngineConfig, Now};
use cads_protocol::{Command, ErrorKind, Reply};

const HOUR: u64 = 3_600_000;
const LEASE_MS: u64 = 500;

struct Clocks {
    engine: Engine,
    now: Now,
}

impl Clocks {
    fn new() -> Clocks {
        Clocks {
            engine: Engine::new(EngineConfig {
                lease_ms: LEASE_MS,
                tombstone_ms: 1_000,
                ..EngineConfig::default()
            }),
            now: Now {
                wall_ms: 1_700_000_000_000,
                mono_ms: 5_000,
            },
        }
    }

    fn run(&mut self, line: &str) -> Reply<'static> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let cmd = Command::parse(&args).expect("a valid command");
        let reply = self.engine.execute(&cmd, self.now).into_owned();
        self.engine.check_invariants();
        reply
    }

    fn abort(&mut self, line: &str) -> bool {
        matches!(self.run(line), Reply::Error(e) if e.kind == ErrorKind::Abort)
    }

    /// Moves the monotonic clock on by `mono` ms and the wall clock by `wall` ms (either way).
    fn advance(&mut self, mono: u64, wall: i64) {
        self.now.mono_ms += mono;
        self.now.wall_ms = self.now.wall_ms.checked_add_signed(wall).unwrap();
        self.engine.tick(self.now);
        self.engine.check_invariants();
    }

    fn lease(&mut self, key: &str) -> Reply<'static> {
        self.run(&format!("INSPECT {key}"))
            .field("lease")
            .cloned()
            .unwrap()
    }
}

#[test]
fn a_wall_clock_step_neither_expires_nor_stretches_a_lease() {
    let mut c = Clocks::new();
    c.run("SET k v");
    c.run("SET ttl v PX 60000");
    assert_eq!(c.run("LGET 1 k RMW"), Reply::owned_bulk(b"v".to_vec()));
    assert_eq!(c.run("IQGET 2 miss"), Reply::Int(0), "an I lease");
    // Session 3 asks for a lease it cannot have and becomes a tombstone.
    assert!(c.abort("LGET 3 k"));

    // The wall clock jumps an hour ahead while 1 ms passes.
    c.advance(1, HOUR as i64);
    assert_eq!(c.lease("k"), Reply::status("exclusive"), "X lease kept");
    assert_eq!(c.lease("miss"), Reply::status("shared"), "I lease kept");
    assert_eq!(c.engine.stats().sessions_expired, 0);
    assert!(c.abort("LVALIDATE 3"), "the tombstone is remembered");
    // Key expiry is wall time: the minute-long TTL is over.
    assert_eq!(c.run("GET ttl"), Reply::Nil);

    // Then two hours back: the leases must not live longer for it.
    c.advance(1, -2 * HOUR as i64);
    assert_eq!(c.lease("k"), Reply::status("exclusive"));
    // 500 ms after the first grant on the monotonic clock the leases are over, although the wall
    // clock is now an hour behind the time they were granted at.
    c.advance(LEASE_MS - 3, 0);
    assert_eq!(c.lease("k"), Reply::status("exclusive"), "1 ms left");
    c.advance(1, 0);
    assert_eq!(c.lease("k"), Reply::status("none"), "expired on time");
    assert_eq!(c.lease("miss"), Reply::status("none"));
    assert_eq!(c.engine.stats().sessions_expired, 2);
    assert!(c.abort("LCOMMIT 1"), "session 1 expired");
    assert_eq!(
        c.run("IQSET 2 miss late"),
        Reply::Int(0),
        "the expired I lease stores nothing"
    );
}

#[test]
fn validation_renews_on_the_monotonic_clock() {
    let mut c = Clocks::new();
    c.run("SET k v");
    c.run("LGET 1 k");
    c.advance(400, 0);
    assert_eq!(c.run("LVALIDATE 1"), Reply::OK);
    // A backward step right after the renewal does not push its end out...
    c.advance(1, -(HOUR as i64));
    c.advance(LEASE_MS - 2, 0);
    assert_eq!(c.lease("k"), Reply::status("shared"));
    c.advance(1, 0);
    assert_eq!(c.lease("k"), Reply::status("none"));
    assert!(c.abort("LCOMMIT 1"));
    // ...and a tombstone is forgotten after its time on the same clock, whatever the wall does.
    c.advance(999, 10 * HOUR as i64);
    assert_eq!(c.engine.session_counts(), (0, 1));
    c.advance(1, -(20 * HOUR as i64));
    assert_eq!(c.engine.session_counts(), (0, 0));
}
