//! `cads`: one command for the cads tools. `cads server` starts CMIs with the same flags as
//! `cads-server`.

use anyhow::Result;
use cads_server::{init_logging, Config, Options, Server};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "cads", version, about = "cads: a cache-augmented data store")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Start cache manager instances (CMIs): the same flags as `cads-server`.
    Server {
        #[command(flatten)]
        options: Options,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Commands::Server { options } => {
            let config = Config::resolve(options.with_file()?)?;
            init_logging(&config.log_level);
            Server::start(config)?.run_until_signal()
        }
    }
}
