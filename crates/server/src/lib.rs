//! cads-server: the cache server runtime.
//!
//! - [`event_loop`]: one CMI's single-threaded, Redis-style event loop.
//! - [`cmi`]: the commands about connections and the server, around the engine.
//! - [`aof`]: the append-only file of a CMI.
//! - [`config`]: flags and TOML settings.
//! - [`server`]: starting and stopping the CMIs of a process.

pub mod aof;
pub mod cmi;
pub mod config;
pub mod event_loop;
pub mod server;
mod sys;
pub mod tls;

pub use config::{Config, Options};
pub use server::Server;

/// Sets up logging to stderr with a tracing filter (`info`, `debug`, or a directive).
pub fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
