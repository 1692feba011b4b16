//! `cads-server`: runs N lease-aware CMIs on consecutive ports.

use anyhow::Result;
use cads_server::{init_logging, Config, Options, Server};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "cads-server",
    version,
    about = "The cads cache server: lease-aware cache manager instances (CMIs) that speak RESP2",
    long_about = "The cads cache server. It runs N cache manager instances (CMIs), each on its own \
thread, event loop and port (PORT to PORT+N-1). A CMI speaks RESP2: redis-cli, redis-benchmark and \
Redis client libraries work against it for the plain string commands, and cads clients use its \
lease and session commands (see docs/PROTOCOL.md).\n\nSettings come from flags, then from the TOML \
file given with --config (keys spelled like the flags), then from the defaults. Sizes accept b, kb, \
mb and gb. SIGTERM or SIGINT stops the server gracefully.",
    after_help = "Examples:\n  cads-server --port 7379 --cmis 2\n  cads-server --config cads.toml --appendonly --dir /var/lib/cads\n  redis-cli -p 7379 SET greeting hello"
)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

fn main() -> Result<()> {
    let options = Cli::parse().options.with_file()?;
    let config = Config::resolve(options)?;
    init_logging(&config.log_level);
    Server::serve_until_signal(config)
}
