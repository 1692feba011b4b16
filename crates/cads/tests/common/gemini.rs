//! Gemini with the test playing the coordinator: it changes the configuration itself and makes
//! each change known to the instances, so that no recovery worker or probe acts between the
//! steps a test takes.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cads_client::{Client, ClientConfig, RangeSource};
use cads_coord::configuration::Configuration;
use cads_coord::dirty_list;
use cads_coord::publish::publish;
use cads_coord::service::CONFIGURATION_KEY;
use cads_protocol::Reply;
use cads_testkit::resp::RespConn;

/// Session ids for the tests' own clients, far from the AppNodes'.
pub fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1 << 40));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

/// One command on the CMI at `addr`, on a connection of its own.
pub fn call(addr: SocketAddr, args: &[&str]) -> Reply<'static> {
    RespConn::connect(addr.port()).call(args)
}

/// The coordinator, played by the test.
pub struct PlayedCoordinator {
    pub addrs: Vec<SocketAddr>,
    /// A plain client of the instances, to look at what they hold.
    pub admin: Client,
    pub configuration: Configuration,
}

impl PlayedCoordinator {
    /// The first configuration over the instances at `addrs`, made known to all.
    pub fn start(addrs: &[SocketAddr], fragments: u32) -> PlayedCoordinator {
        let played = PlayedCoordinator {
            addrs: addrs.to_vec(),
            admin: Client::new(ClientConfig::new(addrs.to_vec()), ranges()),
            configuration: Configuration::new(addrs.len(), fragments),
        };
        let all: Vec<usize> = (0..addrs.len()).collect();
        played.make_known(&all);
        played
    }

    /// Publishes the configuration's ids to `instances`, grants them a lease that never runs
    /// out, and stores the configuration entry on them.
    pub fn make_known(&self, instances: &[usize]) {
        for &i in instances {
            publish(&self.admin, &self.configuration, i).unwrap();
            let lease = call(self.addrs[i], &["INSTANCELEASE", &i64::MAX.to_string()]);
            assert_eq!(lease, Reply::OK);
        }
        let entry = String::from_utf8(serde_json::to_vec(&self.configuration).unwrap()).unwrap();
        let key = std::str::from_utf8(CONFIGURATION_KEY).unwrap();
        for &i in instances {
            assert_eq!(call(self.addrs[i], &["PINSET", key, &entry]), Reply::OK);
        }
    }

    /// Instance `failed` fails: its lease is withdrawn, its fragments move to the others, whose
    /// dirty lists are started (if the configuration keeps them), and the others learn the new
    /// configuration.
    pub fn fail(&mut self, failed: usize) {
        assert_eq!(call(self.addrs[failed], &["INSTANCELEASE", "0"]), Reply::OK);
        self.configuration.instance_failed(failed).unwrap();
        if self.configuration.dirty_lists() {
            self.start_dirty_lists();
        }
        let others: Vec<usize> = (0..self.addrs.len()).filter(|&i| i != failed).collect();
        self.make_known(&others);
    }

    /// A dirty list, holding its start, on each fragment's secondary.
    fn start_dirty_lists(&self) {
        let start = std::str::from_utf8(dirty_list::START).unwrap();
        for (j, f) in (0..).zip(self.configuration.fragments()) {
            if let Some(s) = f.secondary {
                let list = String::from_utf8(dirty_list::key(j)).unwrap();
                assert_eq!(
                    call(self.addrs[s.instance], &["PINSET", &list, start]),
                    Reply::OK
                );
            }
        }
    }

    /// Instance `back` returns with its content: its fragments enter recovery mode (their dirty
    /// lists are all there), with working-set transfer towards `transfer` (the instance's hit
    /// ratio before it failed, per mille) if given, and every instance learns the configuration.
    pub fn recover(&mut self, back: usize, transfer: Option<u16>) {
        self.configuration
            .instance_recovered(back, |_| true, transfer)
            .unwrap();
        let all: Vec<usize> = (0..self.addrs.len()).collect();
        self.make_known(&all);
    }

    /// What instance `i` holds under `key`, read without a lease.
    pub fn held(&self, i: usize, key: &[u8]) -> Option<Vec<u8>> {
        self.admin.get_from(i, key).unwrap()
    }
}
