//! The CMIs of `--cache embedded:N`: started in this process, on loopback and free ports, for
//! each policy run of a benchmark (the benchmarks ask through [`Launcher`]).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use cads_bench::{CmiSettings, Launcher, RunningCmis};
use cads_server::{Options, Server};

/// Starts `count` CMIs in this process in lease `mode`, on loopback and free ports.
pub fn start_embedded(count: usize, mode: &str, settings: &CmiSettings) -> Result<Server> {
    let config = cads_server::Config::resolve(Options {
        port: Some(0),
        cmis: Some(count),
        mode: Some(mode.into()),
        maxmemory: settings.maxmemory.clone(),
        max_pinned_memory: settings.max_pinned_memory.clone(),
        ..Options::default()
    })
    .context("configuring the embedded CMIs")?;
    Server::start(config).context("starting the embedded CMIs")
}

/// What `cads bench` and `cads demo` hand the benchmarks.
pub struct InProcess;

impl Launcher for InProcess {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        Ok(Box::new(Embedded(start_embedded(count, mode, settings)?)))
    }
}

struct Embedded(Server);

impl RunningCmis for Embedded {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.0.addrs().to_vec()
    }

    fn stop(self: Box<Self>) -> Result<()> {
        self.0.stop();
        self.0.join()
    }
}
