//! What the `cads` command starts for the benchmarks ([`Launcher`]): the CMIs of `--cache
//! embedded:N`, in this process on loopback and free ports, fresh for each policy run; and the
//! AppNodes of `--appnodes N`, copies of this command.

use std::net::SocketAddr;
use std::process::Command;

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
        requirepass: settings.password.as_ref().map(|p| p.0.clone()),
        ..Options::default()
    })
    .context("configuring the embedded CMIs")?;
    Server::start(config).context("starting the embedded CMIs")
}

/// What `cads bench` and `cads demo` hand the benchmarks.
pub struct ThisProgram;

impl Launcher for ThisProgram {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        Ok(Box::new(Embedded(start_embedded(count, mode, settings)?)))
    }

    /// This program with the arguments it was started with: the same benchmark, same options.
    fn appnode_command(&self) -> Result<Command> {
        let program = std::env::current_exe().context("finding this program to start AppNodes")?;
        let mut command = Command::new(program);
        command.args(std::env::args_os().skip(1));
        Ok(command)
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
