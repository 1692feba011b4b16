//! A closed-loop RESP load generator: one thread, level-triggered epoll, `--clients` connections,
//! each sending `--pipeline` requests and waiting for all their replies before sending the next
//! batch (as redis-benchmark does).
//!
//! ```text
//! cargo run --release -p cads-server --example loadgen -- --port 7000 --clients 50 --seconds 10 \
//!     --pipeline 1 --mode get|set|lease
//! ```
//!
//! - `get` / `set`: `GET key:<n>` / `SET key:<n> xxx`, keys uniform over `--keys` (100000).
//! - `lease`: rounds of `LGET <sid> <key> RMW`, then `LSET <sid> <key> <value>`, then
//!   `LCOMMIT <sid>`, each step waiting for its reply; every round has its own session id
//!   (`client_index * 10^12 + counter`). With `--pipeline P` a client runs P rounds side by side.
//!
//! It prints commands/s, completed rounds/s (lease) and error replies counted by their first word.

// The same thin epoll wrappers the server uses, without making them part of its public API.
#[path = "../src/sys.rs"]
#[allow(dead_code)]
mod sys;

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cads_protocol::resp::parse_reply;
use cads_protocol::Reply;

use sys::{Epoll, EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Get,
    Set,
    Lease,
}

struct Options {
    host: String,
    port: u16,
    clients: usize,
    seconds: f64,
    pipeline: usize,
    mode: Mode,
    keys: u64,
    value: Vec<u8>,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 7000,
        clients: 50,
        seconds: 10.0,
        pipeline: 1,
        mode: Mode::Get,
        keys: 100_000,
        value: b"xxx".to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--host" => options.host = value()?,
            "--port" => options.port = value()?.parse()?,
            "--clients" => options.clients = value()?.parse()?,
            "--seconds" => options.seconds = value()?.parse()?,
            "--pipeline" => options.pipeline = value()?.parse()?,
            "--keys" => options.keys = value()?.parse()?,
            "--value-size" => options.value = vec![b'x'; value()?.parse()?],
            "--mode" => {
                options.mode = match value()?.as_str() {
                    "get" => Mode::Get,
                    "set" => Mode::Set,
                    "lease" => Mode::Lease,
                    other => bail!("unknown mode {other:?}: get, set or lease"),
                }
            }
            other => bail!(
                "unknown argument {other:?}; flags: --host --port --clients --seconds --pipeline \
                 --mode get|set|lease --keys --value-size"
            ),
        }
    }
    if options.clients == 0 || options.pipeline == 0 || options.keys == 0 {
        bail!("--clients, --pipeline and --keys must be positive");
    }
    Ok(options)
}

/// The step a batch is at; `get` and `set` have a single step.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Get,
    Set,
    LGet,
    LSet,
    LCommit,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Get => "GET",
            Step::Set => "SET",
            Step::LGet => "LGET",
            Step::LSet => "LSET",
            Step::LCommit => "LCOMMIT",
        }
    }
}

struct Client {
    stream: TcpStream,
    index: u64,
    rng: u64,
    /// The rounds (lease) or requests of the current batch: (session id, key number).
    batch: Vec<(u64, u64)>,
    step: Step,
    outstanding: usize,
    rounds_started: u64,
    /// Replies of this LCOMMIT batch that were `+OK`.
    committed: u64,
    input: Vec<u8>,
    output: Vec<u8>,
    sent: usize,
    interest: u32,
}

#[derive(Default)]
struct Totals {
    commands: u64,
    rounds: u64,
    errors: BTreeMap<String, u64>,
}

fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let epoll = Epoll::new()?;
    let mut clients = Vec::with_capacity(options.clients);
    for index in 0..options.clients {
        let stream = TcpStream::connect((options.host.as_str(), options.port))
            .with_context(|| format!("connecting to {}:{}", options.host, options.port))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        epoll.add(stream.as_raw_fd(), EPOLLIN, index as u64)?;
        clients.push(Client {
            stream,
            index: index as u64,
            rng: 0x9E37_79B9_7F4A_7C15 ^ ((index as u64 + 1) * 0xD1B5_4A32_D192_ED03),
            batch: Vec::with_capacity(options.pipeline),
            step: Step::Get,
            outstanding: 0,
            rounds_started: 0,
            committed: 0,
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            interest: EPOLLIN,
        });
    }

    let mut totals = Totals::default();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(options.seconds);
    for client in &mut clients {
        client.start_batch(&options);
        client.flush(&epoll)?;
    }
    let mut events = sys::event_buffer(1024);
    let mut chunk = vec![0u8; 64 * 1024];
    while Instant::now() < deadline {
        let fired = epoll.wait(&mut events, 100)?;
        for event in fired {
            let (token, flags) = (event.u64, event.events);
            let client = &mut clients[token as usize];
            if flags & (EPOLLERR | EPOLLHUP) != 0 {
                bail!("client {token}: the server closed the connection");
            }
            if flags & EPOLLOUT != 0 {
                client.flush(&epoll)?;
            }
            if flags & EPOLLIN != 0 {
                client.read(&mut chunk, &mut totals)?;
                if client.outstanding == 0 && Instant::now() < deadline {
                    client.next(&options, &mut totals);
                    client.flush(&epoll)?;
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();

    let mode = match options.mode {
        Mode::Get => "get",
        Mode::Set => "set",
        Mode::Lease => "lease",
    };
    println!(
        "mode={mode} clients={} pipeline={} seconds={elapsed:.2}",
        options.clients, options.pipeline
    );
    println!(
        "commands: {} ({:.0}/s)",
        totals.commands,
        totals.commands as f64 / elapsed
    );
    if options.mode == Mode::Lease {
        println!(
            "rounds committed: {} ({:.0}/s)",
            totals.rounds,
            totals.rounds as f64 / elapsed
        );
    }
    if totals.errors.is_empty() {
        println!("errors: none");
    } else {
        let list: Vec<String> = totals
            .errors
            .iter()
            .map(|(word, n)| format!("{word}={n}"))
            .collect();
        println!("errors: {}", list.join(" "));
    }
    Ok(())
}

impl Client {
    fn random_key(&mut self, keys: u64) -> u64 {
        // xorshift64*: plenty for spreading keys.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % keys
    }

    /// Starts a new batch: `pipeline` fresh requests, or the first step of `pipeline` fresh rounds.
    fn start_batch(&mut self, options: &Options) {
        self.batch.clear();
        for _ in 0..options.pipeline {
            let key = self.random_key(options.keys);
            let sid = self.index * 1_000_000_000_000 + self.rounds_started;
            self.rounds_started += 1;
            self.batch.push((sid, key));
        }
        self.step = match options.mode {
            Mode::Get => Step::Get,
            Mode::Set => Step::Set,
            Mode::Lease => Step::LGet,
        };
        self.committed = 0;
        self.send_step(options);
    }

    /// All replies of the batch are in: the next step of the rounds, or a new batch.
    fn next(&mut self, options: &Options, totals: &mut Totals) {
        match self.step {
            Step::LGet => self.step = Step::LSet,
            Step::LSet => self.step = Step::LCommit,
            Step::LCommit => {
                totals.rounds += self.committed;
                return self.start_batch(options);
            }
            Step::Get | Step::Set => return self.start_batch(options),
        }
        self.send_step(options);
    }

    fn send_step(&mut self, options: &Options) {
        let mut sid_digits = [0u8; 20];
        let mut key = Vec::with_capacity(16);
        for i in 0..self.batch.len() {
            let (sid, n) = self.batch[i];
            key.clear();
            key.extend_from_slice(b"key:");
            key.extend_from_slice(decimal(&mut [0u8; 20], n));
            let sid = decimal(&mut sid_digits, sid);
            let out = &mut self.output;
            match self.step {
                Step::Get => request(out, &[b"GET", &key]),
                Step::Set => request(out, &[b"SET", &key, &options.value]),
                Step::LGet => request(out, &[b"LGET", sid, &key, b"RMW"]),
                Step::LSet => request(out, &[b"LSET", sid, &key, &options.value]),
                Step::LCommit => request(out, &[b"LCOMMIT", sid]),
            }
        }
        self.outstanding = self.batch.len();
    }

    /// One read, then every complete reply in the input.
    fn read(&mut self, chunk: &mut [u8], totals: &mut Totals) -> anyhow::Result<()> {
        match self.stream.read(chunk) {
            Ok(0) => bail!("client {}: the server closed the connection", self.index),
            Ok(n) => self.input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e).context("reading replies"),
        }
        let mut pos = 0;
        while let Some((reply, used)) = parse_reply(&self.input[pos..])? {
            pos += used;
            if self.outstanding == 0 {
                bail!("client {}: a reply nobody asked for", self.index);
            }
            self.outstanding -= 1;
            totals.commands += 1;
            match reply {
                Reply::Error(e) => {
                    let word = format!("{}:{}", self.step.name(), e.kind.as_str());
                    *totals.errors.entry(word).or_default() += 1;
                }
                Reply::Status(s) if self.step == Step::LCommit && s == "OK" => self.committed += 1,
                _ => {}
            }
        }
        self.input.drain(..pos);
        Ok(())
    }

    /// Writes what is queued; a short write waits for `EPOLLOUT`.
    fn flush(&mut self, epoll: &Epoll) -> anyhow::Result<()> {
        while self.sent < self.output.len() {
            match self.stream.write(&self.output[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("sending requests"),
            }
        }
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
        }
        let interest = if self.output.is_empty() {
            EPOLLIN
        } else {
            EPOLLIN | EPOLLOUT
        };
        if interest != self.interest {
            epoll.modify(self.stream.as_raw_fd(), interest, self.index)?;
            self.interest = interest;
        }
        Ok(())
    }
}

/// Appends a request as an array of bulk strings.
fn request(out: &mut Vec<u8>, args: &[&[u8]]) {
    cads_protocol::resp::write_request(out, args);
}

/// Formats `n` into `buf` and returns the digits.
fn decimal(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}
