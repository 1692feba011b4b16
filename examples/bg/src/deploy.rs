//! A deployment for one policy: the data store (behind a call-counting [`FaultyStore`]), the CMIs
//! (started in this process in the policy's lease mode, or running elsewhere) and the framework.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use cads::{Cads, Config, Policy};
use cads_client::Client;
use cads_protocol::{Command, Reply};
use cads_server::{Options, Server};
use cads_store::{open, DataStore, Faults, FaultyStore, StoreOptions};

/// Where the cache is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheSpec {
    /// CMIs started in this process on loopback, on free ports.
    Embedded {
        /// How many.
        cmis: usize,
    },
    /// CMIs already running (they must run in the policy's lease mode).
    External(Vec<SocketAddr>),
}

impl CacheSpec {
    /// `host:port,host:port,...`.
    pub fn parse_external(list: &str) -> Result<CacheSpec> {
        let mut addrs = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let addr = item
                .to_socket_addrs()
                .with_context(|| format!("--cache: cannot resolve {item:?} (use host:port)"))?
                .next()
                .ok_or_else(|| anyhow!("--cache: {item:?} resolves to no address"))?;
            addrs.push(addr);
        }
        if addrs.is_empty() {
            bail!("--cache: no address given (use host:port,host:port,...)");
        }
        Ok(CacheSpec::External(addrs))
    }
}

/// Cache hits and misses summed over the CMIs, as INFO reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// `keyspace_hits`.
    pub hits: u64,
    /// `keyspace_misses`.
    pub misses: u64,
}

/// The data store, the cache and the framework for one policy.
pub struct Deployment {
    /// The framework.
    pub cads: Cads,
    /// Counts the calls the data store receives.
    pub faults: Faults,
    server: Option<Server>,
    policy: Policy,
}

impl Deployment {
    /// Opens the store at `url` and starts or reaches the CMIs (none for `DataStoreOnly`).
    pub fn start(policy: Policy, url: &str, cache: &CacheSpec) -> Result<Deployment> {
        let inner = open(url, &StoreOptions::default())
            .with_context(|| format!("cannot open the data store {}", redact(url)))?;
        let faulty = FaultyStore::new(inner);
        let faults = faulty.faults();
        let store: Arc<dyn DataStore> = Arc::new(faulty);
        let (server, addrs) = match (policy, cache) {
            (Policy::DataStoreOnly, _) => (None, Vec::new()),
            (_, CacheSpec::Embedded { cmis }) => {
                let config = cads_server::Config::resolve(Options {
                    port: Some(0),
                    cmis: Some(*cmis),
                    mode: Some(policy.cmi_mode().into()),
                    ..Options::default()
                })
                .context("configuring the embedded CMIs")?;
                let server = Server::start(config).context("starting the embedded CMIs")?;
                let addrs = server.addrs().to_vec();
                (Some(server), addrs)
            }
            (_, CacheSpec::External(addrs)) => (None, addrs.clone()),
        };
        let cads = Cads::connect(store, &addrs, policy, Config::default());
        if let (Some(client), CacheSpec::External(_)) = (cads.cache(), cache) {
            for cmi in 0..client.cmis() {
                let addr = client.cmi_addr(cmi);
                let text =
                    info(client, cmi).with_context(|| format!("cannot reach the CMI at {addr}"))?;
                let mode = field(&text, "mode").unwrap_or_default();
                if mode != policy.cmi_mode() {
                    bail!(
                        "the CMI at {addr} runs in {mode:?} mode, but --policy {} needs {} mode \
                         (cads server --mode {})",
                        policy.name(),
                        policy.cmi_mode(),
                        policy.cmi_mode()
                    );
                }
            }
        }
        Ok(Deployment {
            cads,
            faults,
            server,
            policy,
        })
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The CMIs' addresses.
    pub fn cmis(&self) -> Vec<SocketAddr> {
        self.cads
            .cache()
            .map_or_else(Vec::new, |c| (0..c.cmis()).map(|i| c.cmi_addr(i)).collect())
    }

    /// Empties every CMI (after loading, so that nothing cached before survives).
    pub fn flush_cache(&self) -> Result<()> {
        if let Some(client) = self.cads.cache() {
            client.flush_all().context(
                "cannot flush the cache (is every CMI up, and in the policy's lease mode?)",
            )?;
        }
        Ok(())
    }

    /// Cache round trips so far ([`cads_client::Client::round_trips`]).
    pub fn cache_round_trips(&self) -> u64 {
        self.cads.cache().map_or(0, |c| c.round_trips())
    }

    /// Data-store calls so far: reads + writes + 2 × transactions, as the [`FaultyStore`] counts
    /// them, where each transaction counts its BEGIN and the COMMIT or ROLLBACK that ends it
    /// (`Faults` counts only the BEGIN).
    pub fn store_calls(&self) -> u64 {
        let c = self.faults.counts();
        c.reads + c.writes + 2 * c.transactions
    }

    /// Hits and misses summed over the CMIs (None without a cache or if INFO fails).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        let client = self.cads.cache()?;
        let mut stats = CacheStats::default();
        for cmi in 0..client.cmis() {
            let text = info(client, cmi).ok()?;
            stats.hits += field(&text, "keyspace_hits")?.parse::<u64>().ok()?;
            stats.misses += field(&text, "keyspace_misses")?.parse::<u64>().ok()?;
        }
        Some(stats)
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
            if let Err(e) = server.join() {
                eprintln!("warning: an embedded CMI stopped with an error: {e:#}");
            }
        }
    }
}

/// The INFO text of one CMI.
fn info(client: &Client, cmi: usize) -> Result<String> {
    match client.execute(cmi, &Command::Info(&[]))? {
        Reply::Bulk(text) => Ok(String::from_utf8_lossy(&text).into_owned()),
        other => bail!("unexpected INFO reply {other:?}"),
    }
}

/// The value of `name` in an INFO text (`name:value` lines).
fn field<'t>(info: &'t str, name: &str) -> Option<&'t str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// A store URL with its password hidden, for messages.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    match (rest.find('@'), rest.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &rest[..colon],
            &rest[at..]
        ),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://cads:secret@127.0.0.1:5432/cads"),
            "postgres://cads:***@127.0.0.1:5432/cads"
        );
        assert_eq!(redact("sqlite:/tmp/x.db"), "sqlite:/tmp/x.db");
    }

    #[test]
    fn cache_lists_parse() {
        assert_eq!(
            CacheSpec::parse_external("127.0.0.1:7379, 127.0.0.1:7380").unwrap(),
            CacheSpec::External(vec![
                "127.0.0.1:7379".parse().unwrap(),
                "127.0.0.1:7380".parse().unwrap()
            ])
        );
        assert!(CacheSpec::parse_external("").is_err());
        assert!(CacheSpec::parse_external("nohost").is_err());
    }
}
