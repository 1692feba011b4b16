//! CMIs for the tests' embedded deployments: started in the test's process on loopback.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use cads_bench::{CmiSettings, Launcher, RunningCmis};
use cads_server::{Options, Server};

/// Starts embedded CMIs in this process.
pub struct InProcess;

impl Launcher for InProcess {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        let config = cads_server::Config::resolve(Options {
            port: Some(0),
            cmis: Some(count),
            mode: Some(mode.into()),
            maxmemory: settings.maxmemory.clone(),
            max_pinned_memory: settings.max_pinned_memory.clone(),
            ..Options::default()
        })?;
        Ok(Box::new(Running(Server::start(config)?)))
    }
}

struct Running(Server);

impl RunningCmis for Running {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.0.addrs().to_vec()
    }

    fn stop(self: Box<Self>) -> Result<()> {
        self.0.stop();
        self.0.join().context("a CMI stopped with an error")
    }
}
