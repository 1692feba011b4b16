//! The "ceiling" server: the cads event loop with a handler that answers every request `+OK`.
//! It measures what the loop alone costs, against redis-server on the same machine:
//!
//! ```text
//! cargo run --release -p cads-server --example ok_server -- --port 7000
//! redis-benchmark -p 7000 -t get,set -n 1000000 -c 50 -q
//! ```

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context};
use cads_server::event_loop::{ConnId, EventLoop, Flow, Handler, LoopConfig, Now};

struct OkHandler;

impl Handler for OkHandler {
    type Conn = ();

    fn on_accept(&mut self, _id: ConnId, _peer: SocketAddr) {}

    fn on_request(
        &mut self,
        _conn: &mut (),
        _args: &[&[u8]],
        out: &mut Vec<u8>,
        _out_limit: usize,
        _now: Now,
    ) -> Flow {
        out.extend_from_slice(b"+OK\r\n");
        Flow::Continue
    }

    fn on_close(&mut self, _conn: &mut ()) {}
    fn before_reply(&mut self, _now: Now) {}
    fn tick(&mut self, _now: Now) {}
    fn on_shutdown(&mut self, _now: Now) {}
}

fn main() -> anyhow::Result<()> {
    let mut port: u16 = 7000;
    let mut bind = String::from("127.0.0.1");
    let mut config = LoopConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => port = args.next().context("--port needs a value")?.parse()?,
            "--bind" => bind = args.next().context("--bind needs a value")?,
            "--busy-poll-us" => {
                config.busy_poll_us = args
                    .next()
                    .context("--busy-poll-us needs a value")?
                    .parse()?
            }
            other => {
                bail!("unknown argument {other:?} (usage: ok_server [--port P] [--bind ADDR] [--busy-poll-us N])")
            }
        }
    }
    let listener = TcpListener::bind((bind.as_str(), port))
        .with_context(|| format!("binding {bind}:{port}"))?;
    let mut event_loop = EventLoop::new(listener, config)?;
    eprintln!("ok_server listening on {}", event_loop.local_addr()?);
    let stop = AtomicBool::new(false);
    event_loop.run(&mut OkHandler, &stop)?;
    Ok(())
}
