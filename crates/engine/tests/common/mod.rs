//! A CMI under test: commands written as text, a clock moved by hand.
#![allow(dead_code)]

use cads_engine::{Engine, EngineConfig, Mode, Now};
use cads_protocol::{Command, ErrorKind, Reply};

pub struct Cmi {
    pub engine: Engine,
    pub now: u64,
}

/// Splits on blanks; `""` stands for an empty argument.
fn args(line: &str) -> Vec<Vec<u8>> {
    line.split_whitespace()
        .map(|a| {
            if a == "\"\"" {
                Vec::new()
            } else {
                a.as_bytes().to_vec()
            }
        })
        .collect()
}

impl Cmi {
    pub fn new(mode: Mode) -> Cmi {
        Cmi::with(EngineConfig {
            mode,
            ..EngineConfig::default()
        })
    }

    pub fn with(config: EngineConfig) -> Cmi {
        Cmi {
            engine: Engine::new(config),
            now: 1_000_000,
        }
    }

    pub fn wt() -> Cmi {
        Cmi::new(Mode::WriteThrough)
    }

    pub fn wa() -> Cmi {
        Cmi::new(Mode::WriteAround)
    }

    /// Runs a command given as text and checks the engine's invariants afterwards.
    pub fn run(&mut self, line: &str) -> Reply<'static> {
        let owned = args(line);
        self.run_args(&owned)
    }

    pub fn run_args(&mut self, owned: &[Vec<u8>]) -> Reply<'static> {
        let slices: Vec<&[u8]> = owned.iter().map(|a| a.as_slice()).collect();
        let reply = match Command::parse(&slices) {
            Ok(cmd) => self.engine.execute(&cmd, Now::at(self.now)).into_owned(),
            Err(e) => Reply::Error(e),
        };
        self.engine.check_invariants();
        reply
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.engine.tick(Now::at(self.now));
        self.engine.check_invariants();
    }

    // Assertions with readable failure messages.

    pub fn ok(&mut self, line: &str) {
        let r = self.run(line);
        assert_eq!(r, Reply::OK, "{line}");
    }

    pub fn int(&mut self, line: &str) -> i64 {
        match self.run(line) {
            Reply::Int(n) => n,
            other => panic!("{line}: expected an integer, got {other:?}"),
        }
    }

    pub fn bulk(&mut self, line: &str) -> Option<Vec<u8>> {
        match self.run(line) {
            Reply::Bulk(b) => Some(b.into_owned()),
            Reply::Nil => None,
            other => panic!("{line}: expected a bulk string or nil, got {other:?}"),
        }
    }

    pub fn value(&mut self, line: &str) -> String {
        String::from_utf8(self.bulk(line).unwrap_or_else(|| panic!("{line}: nil"))).unwrap()
    }

    pub fn value_or_nil(&mut self, line: &str) -> Option<String> {
        self.bulk(line).map(|v| String::from_utf8(v).unwrap())
    }

    pub fn err(&mut self, line: &str) -> ErrorKind {
        match self.run(line) {
            Reply::Error(e) => e.kind,
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    pub fn err_text(&mut self, line: &str) -> String {
        match self.run(line) {
            Reply::Error(e) => e.to_string(),
            other => panic!("{line}: expected an error, got {other:?}"),
        }
    }

    /// The committed value, read without leases.
    pub fn cached(&mut self, key: &str) -> Option<String> {
        self.bulk(&format!("GET {key}"))
            .map(|v| String::from_utf8(v).unwrap())
    }

    /// A field of INSPECT.
    pub fn inspect(&mut self, key: &str, field: &str) -> Reply<'static> {
        let reply = self.run(&format!("INSPECT {key}"));
        reply
            .field(field)
            .unwrap_or_else(|| panic!("INSPECT has no field {field}"))
            .clone()
    }
}
