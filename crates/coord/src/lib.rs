//! cads-coord: the coordinator.
//!
//! It hands out disjoint ranges of session ids to clients (000 §5.1), behind
//! `cads_client::RangeSource`: embedded in the application process ([`Coordinator`]), or served
//! by the coordinator's process to others ([`ids`]). Gemini's configurations
//! ([`configuration`]: fragments, their modes and configuration ids, 004 §2-3), instance leases
//! ([`liveness`]), publishing a configuration's ids to a CMI ([`publish`]), the state file that
//! lets a coordinator survive its restart ([`state_file`]), dirty lists ([`dirty_list`]), the
//! recovery workers ([`repair`]) and the service that runs them over real instances, granting
//! their leases, making the dirty lists of new secondaries and storing the configuration entry
//! clients fetch ([`service`]) are here (the clients' side is `cads::gemini`, the process is
//! `cads coord`); range leases (CPR) are not built yet.
//!
//! Every client of a process must draw from the same coordinator: two clients numbering sessions
//! from separate counters would give two sessions the same id, and a CMI would take them for one.
//! [`Coordinator::process`] is that shared source. It asks the coordinator's id service when the
//! process was pointed at one ([`Coordinator::use_service`]: `cads coord --listen`, the
//! benchmark's AppNode processes); otherwise it numbers from a block of 2^32 ids chosen at random
//! below 2^62, which keeps processes apart with high probability, and apart for certain from
//! every process served by the id service (whose ids lie above).

pub mod configuration;
pub mod dirty_list;
pub mod etcd;
pub mod hit_ratio;
pub mod ids;
pub mod liveness;
pub mod publish;
pub mod repair;
pub mod sas;
pub mod service;
pub mod state_file;
pub mod wire;

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cads_client::{RangeSource, SessionId};

/// The process's source of session ids ([`Coordinator::process`]).
static PROCESS: OnceLock<Arc<dyn RangeSource>> = OnceLock::new();

/// Session ids per range: a client asks again after this many sessions.
pub const DEFAULT_RANGE: u64 = 1 << 16;

/// An in-process coordinator. Ids start at 1 and never repeat within the process.
pub struct Coordinator {
    next: AtomicU64,
    range: u64,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator::embedded()
    }
}

impl Coordinator {
    /// The process's source of session ids, shared by every client in it: the id service named
    /// by [`Coordinator::use_service`], else an embedded coordinator.
    pub fn process() -> Arc<dyn RangeSource> {
        PROCESS
            .get_or_init(|| Arc::new(Coordinator::embedded()))
            .clone()
    }

    /// Makes the process take its session ids from the coordinator's id service at `addrs`
    /// (a leading coordinator and its standbys: whichever serves; [`ids::RemoteRanges`]).
    /// Refused once the process has begun numbering sessions (a client was made): its sessions
    /// would not all come from one source.
    pub fn use_service(
        addrs: Vec<std::net::SocketAddr>,
        password: Option<String>,
    ) -> Result<(), String> {
        if addrs.is_empty() {
            return Err("no address of a coordinator's id service".into());
        }
        PROCESS
            .set(Arc::new(ids::RemoteRanges::new(addrs, password)))
            .map_err(|_| {
                "this process already numbers its sessions: name the coordinator before any \
                 client is made"
                    .to_string()
            })
    }

    /// A coordinator of its own, numbering from a random block of 2^32 ids. Prefer
    /// [`Coordinator::process`]: clients of one process must share a coordinator.
    pub fn embedded() -> Coordinator {
        Coordinator::starting_at(random_block() << 32 | 1, DEFAULT_RANGE)
    }

    /// A coordinator handing out ranges of `range` ids from `first` on.
    pub fn starting_at(first: SessionId, range: u64) -> Coordinator {
        assert!(range > 0, "ranges hold at least one id");
        Coordinator {
            next: AtomicU64::new(first),
            range,
        }
    }
}

/// A block number from the clock and the process id (no randomness source is needed beyond
/// spreading processes apart).
pub fn random_block() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut h = nanos ^ (std::process::id() as u64).rotate_left(32);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    // Below 2^30 blocks, so ids stay below 2^62, under those the id service hands out
    // (`ids::SERVED_IDS_START`), and below 2^63 (the protocol parses them as signed decimals).
    h % (1 << 30)
}

impl RangeSource for Coordinator {
    fn next_range(&self) -> Range<SessionId> {
        let start = self.next.fetch_add(self.range, Ordering::Relaxed);
        start
            ..start
                .checked_add(self.range)
                .expect("session ids exhausted")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn the_process_coordinator_is_shared() {
        let a = Coordinator::process().next_range();
        let b = Coordinator::process().next_range();
        assert!(a.end <= b.start || b.end <= a.start);
        assert!(a.end <= ids::SERVED_IDS_START, "below the served ids");
    }

    #[test]
    fn ranges_are_disjoint_across_threads() {
        let coord = Arc::new(Coordinator::starting_at(1, 10));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let c = coord.clone();
                std::thread::spawn(move || (0..100).map(|_| c.next_range()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen = HashSet::new();
        for h in handles {
            for range in h.join().unwrap() {
                for id in range {
                    assert!(seen.insert(id), "id {id} handed out twice");
                }
            }
        }
        assert_eq!(seen.len(), 4000);
    }
}
