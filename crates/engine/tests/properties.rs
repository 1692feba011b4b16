//! Random sequences of sessions on a handful of keys, against a model of what must be cached.
//!
//! Checked after every step: the engine's own bookkeeping (one exclusive holder per key outside
//! write-around, memory and pinned bytes recounted and within their limits, leases and sessions
//! consistent); no pinned entry ever disappears except by a committed delete; every cached value
//! is one the model allows; a committed session's keys hold its last pending versions; an aborted
//! session leaves no lease, pending version or memory behind.

mod common;

use std::collections::HashMap;

use cads_engine::{EngineConfig, Mode, ENTRY_OVERHEAD};
use cads_protocol::{ErrorKind, Reply};
use common::Cmi;
use proptest::prelude::*;

const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
const VALUES: [&str; 5] = ["a", "bb", "12", "ccc", "7"];

#[derive(Clone, Debug)]
enum Op {
    LGet(u64, usize, bool),
    LSet(u64, usize, usize, bool),
    LDel(u64, usize),
    LAppend(u64, usize, usize),
    LIncr(u64, usize),
    LUnpin(u64, usize),
    LValidate(u64),
    LCommit(u64),
    LAbort(u64),
    IqGet(u64, usize),
    IqSet(u64, usize, usize),
    QaReg(u64, usize),
    Sar(u64, usize, usize),
    Dar(u64, usize),
    PlainSet(usize, usize),
    PlainGet(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let s = 1u64..5;
    let k = 0..KEYS.len();
    let v = 0..VALUES.len();
    prop_oneof![
        4 => (s.clone(), k.clone(), any::<bool>()).prop_map(|(s, k, r)| Op::LGet(s, k, r)),
        4 => (s.clone(), k.clone(), v.clone(), any::<bool>()).prop_map(|(s, k, v, p)| Op::LSet(s, k, v, p)),
        2 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::LDel(s, k)),
        2 => (s.clone(), k.clone(), v.clone()).prop_map(|(s, k, v)| Op::LAppend(s, k, v)),
        1 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::LIncr(s, k)),
        1 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::LUnpin(s, k)),
        2 => s.clone().prop_map(Op::LValidate),
        4 => s.clone().prop_map(Op::LCommit),
        2 => s.clone().prop_map(Op::LAbort),
        2 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::IqGet(s, k)),
        2 => (s.clone(), k.clone(), v.clone()).prop_map(|(s, k, v)| Op::IqSet(s, k, v)),
        2 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::QaReg(s, k)),
        1 => (s.clone(), k.clone(), v.clone()).prop_map(|(s, k, v)| Op::Sar(s, k, v)),
        1 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::Dar(s, k)),
        2 => (k.clone(), v.clone()).prop_map(|(k, v)| Op::PlainSet(k, v)),
        2 => k.clone().prop_map(Op::PlainGet),
        1 => (1u64..400).prop_map(Op::Advance),
    ]
}

/// A pending version as the model knows it: Some((value, pinned)) or None for a delete.
type Version = Option<(String, bool)>;

#[derive(Default)]
struct Model {
    /// What each key must hold if it is cached: pinned keys must be cached.
    committed: HashMap<usize, (String, bool)>,
    pending: HashMap<u64, HashMap<usize, Version>>,
}

impl Model {
    fn view(&self, s: u64, k: usize) -> Option<(String, bool)> {
        match self.pending.get(&s).and_then(|p| p.get(&k)) {
            Some(v) => v.clone(),
            None => self.committed.get(&k).cloned(),
        }
    }

    fn stage(&mut self, s: u64, k: usize, v: Version) {
        self.pending.entry(s).or_default().insert(k, v);
    }

    fn apply(&mut self, k: usize, v: Version) {
        match v {
            Some(v) => self.committed.insert(k, v),
            None => self.committed.remove(&k),
        };
    }
}

fn is_abort(r: &Reply) -> bool {
    matches!(r, Reply::Error(e) if e.kind == ErrorKind::Abort)
}

struct Harness {
    cmi: Cmi,
    model: Model,
}

impl Harness {
    fn new() -> Harness {
        let entry = 2 + 3 + ENTRY_OVERHEAD;
        let cmi = Cmi::with(EngineConfig {
            mode: Mode::WriteThrough,
            maxmemory: entry * 6,
            max_pinned_memory: entry * 3,
            lease_ms: 500,
            tombstone_ms: u64::MAX / 4,
            ..EngineConfig::default()
        });
        Harness {
            cmi,
            model: Model::default(),
        }
    }

    fn cached(&mut self, k: usize) -> Option<(String, bool)> {
        let value = self.cmi.cached(KEYS[k])?;
        let pinned = self.cmi.inspect(KEYS[k], "pinned") == Reply::Int(1);
        Some((value, pinned))
    }

    /// The session's own pinned flag for a write: sticky from what it sees now.
    fn sticky(&mut self, s: u64, k: usize, pin: bool) -> bool {
        pin || self.model.view(s, k).is_some_and(|(_, p)| p)
    }

    fn step(&mut self, op: &Op) {
        let key = |k: usize| KEYS[k];
        match *op {
            Op::LGet(s, k, rmw) => {
                let r = self.cmi.run(&format!(
                    "LGET {s} {} {}",
                    key(k),
                    if rmw { "RMW" } else { "RO" }
                ));
                self.after_session_reply(s, &r);
                if let Reply::Bulk(b) = &r {
                    let expect = self.model.view(s, k).map(|(v, _)| v);
                    assert_eq!(
                        Some(String::from_utf8_lossy(b).into_owned()),
                        expect,
                        "LGET reads the session's view"
                    );
                }
            }
            Op::LSet(s, k, v, pin) => {
                let pinned = self.sticky(s, k, pin);
                let pin_word = if pin { " PIN" } else { "" };
                let r = self
                    .cmi
                    .run(&format!("LSET {s} {} {}{pin_word}", key(k), VALUES[v]));
                if r == Reply::OK {
                    self.model
                        .stage(s, k, Some((VALUES[v].to_string(), pinned)));
                }
                self.after_session_reply(s, &r);
            }
            Op::LDel(s, k) => {
                let r = self.cmi.run(&format!("LDEL {s} {}", key(k)));
                if let Reply::Int(_) = r {
                    self.model.stage(s, k, None);
                }
                self.after_session_reply(s, &r);
            }
            Op::LAppend(s, k, v) => {
                let base = self.model.view(s, k);
                let r = self
                    .cmi
                    .run(&format!("LAPPEND {s} {} {}", key(k), VALUES[v]));
                if let Reply::Int(_) = r {
                    let (b, pinned) = base.expect("LAPPEND succeeds only on a value");
                    self.model.stage(s, k, Some((b + VALUES[v], pinned)));
                }
                self.after_session_reply(s, &r);
            }
            Op::LIncr(s, k) => {
                let base = self.model.view(s, k);
                let r = self.cmi.run(&format!("LINCR {s} {} 3", key(k)));
                if let Reply::Int(n) = r {
                    let (_, pinned) = base.expect("LINCR succeeds only on a value");
                    self.model.stage(s, k, Some((n.to_string(), pinned)));
                }
                self.after_session_reply(s, &r);
            }
            Op::LUnpin(s, k) => {
                let base = self.model.view(s, k);
                let r = self.cmi.run(&format!("LUNPIN {s} {}", key(k)));
                if r == Reply::Int(1) {
                    let (b, _) = base.expect("LUNPIN 1 means a value");
                    self.model.stage(s, k, Some((b, false)));
                }
                self.after_session_reply(s, &r);
            }
            Op::LValidate(s) => {
                let r = self.cmi.run(&format!("LVALIDATE {s}"));
                self.after_session_reply(s, &r);
            }
            Op::LCommit(s) => {
                let r = self.cmi.run(&format!("LCOMMIT {s}"));
                if r == Reply::OK {
                    let pending = self.model.pending.remove(&s).unwrap_or_default();
                    for (k, v) in pending {
                        self.model.apply(k, v.clone());
                        assert_eq!(
                            self.cached(k),
                            v,
                            "a committed key holds the session's last pending version"
                        );
                    }
                }
                self.after_session_reply(s, &r);
                self.model.pending.remove(&s);
            }
            Op::LAbort(s) => {
                self.cmi.ok(&format!("LABORT {s}"));
                self.model.pending.remove(&s);
            }
            Op::IqGet(s, k) => {
                let r = self.cmi.run(&format!("IQGET {s} {}", key(k)));
                self.after_session_reply(s, &r);
            }
            Op::IqSet(s, k, v) => {
                // A fill over a pinned cached value keeps the pin (pins are sticky).
                let pinned = self.model.committed.get(&k).is_some_and(|(_, p)| *p);
                let r = self.cmi.run(&format!("IQSET {s} {} {}", key(k), VALUES[v]));
                if r == Reply::Int(1) {
                    self.model.apply(k, Some((VALUES[v].to_string(), pinned)));
                    self.forget_key(s, k);
                }
            }
            Op::QaReg(s, k) => {
                let r = self.cmi.run(&format!("QAREG {s} {}", key(k)));
                self.after_session_reply(s, &r);
            }
            Op::Sar(s, k, v) => {
                let pinned = self.sticky(s, k, false);
                let r = self.cmi.run(&format!("SAR {s} {} {}", key(k), VALUES[v]));
                if r == Reply::OK {
                    self.model.apply(k, Some((VALUES[v].to_string(), pinned)));
                    self.forget_key(s, k);
                }
                self.after_session_reply(s, &r);
            }
            Op::Dar(s, k) => {
                let r = self.cmi.run(&format!("DAR {s} {}", key(k)));
                if r == Reply::OK {
                    self.model.apply(k, None);
                    self.forget_key(s, k);
                }
                self.after_session_reply(s, &r);
            }
            Op::PlainSet(k, v) => {
                if self.cmi.run(&format!("SET {} {}", key(k), VALUES[v])) == Reply::OK {
                    self.model.apply(k, Some((VALUES[v].to_string(), false)));
                }
            }
            Op::PlainGet(k) => {
                self.cmi.run(&format!("GET {}", key(k)));
            }
            Op::Advance(ms) => self.cmi.advance(ms),
        }
        self.check();
    }

    /// The key was committed by a single-key release; the session's remaining keys stay pending.
    fn forget_key(&mut self, s: u64, k: usize) {
        if let Some(p) = self.model.pending.get_mut(&s) {
            p.remove(&k);
        }
    }

    fn after_session_reply(&mut self, s: u64, r: &Reply) {
        if is_abort(r) {
            self.model.pending.remove(&s);
        }
    }

    fn check(&mut self) {
        let m = self.cmi.engine.memory().clone();
        assert!(
            m.used <= m.maxmemory,
            "used {} within maxmemory {}",
            m.used,
            m.maxmemory
        );
        assert!(
            m.pinned <= m.max_pinned,
            "pinned {} within the cap {}",
            m.pinned,
            m.max_pinned
        );
        for (k, name) in KEYS.iter().enumerate() {
            let expected = self.model.committed.get(&k).cloned();
            let actual = self.cached(k);
            match (&expected, &actual) {
                (Some((_, true)), None) => panic!("pinned {} disappeared", name),
                (_, None) => {}
                (Some(e), Some(a)) => assert_eq!(a, e, "{} holds what was committed", name),
                (None, Some(a)) => panic!("{} holds {a:?}, which nobody committed", name),
            }
        }
    }
}

/// Found by the property below: a session fills a miss with LSET (staged until commit) and then
/// with IQSET, which stores its value and releases the key. The staged value must not replace
/// the IQSET's at that release.
#[test]
fn an_iq_fill_replaces_a_staged_fill_of_the_same_session() {
    let mut h = Harness::new();
    for op in [
        Op::LAppend(1, 0, 0),
        Op::LIncr(1, 2),
        Op::IqGet(1, 1),
        Op::LSet(1, 1, 0, false),
        Op::IqSet(1, 1, 1),
        Op::LSet(2, 3, 3, true),
        Op::IqGet(2, 3),
        Op::IqSet(2, 3, 4),
    ] {
        h.step(&op);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn write_through_sessions_keep_their_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let mut h = Harness::new();
        for op in &ops {
            h.step(op);
        }
        // Ending every session leaves nothing behind.
        for s in 1..5 {
            h.cmi.ok(&format!("LABORT {s}"));
        }
        h.cmi.advance(1_000);
        prop_assert_eq!(h.cmi.engine.lease_count(), 0);
        prop_assert_eq!(h.cmi.engine.session_counts().0, 0);
    }

    #[test]
    fn write_around_sessions_keep_their_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let mut cmi = Cmi::with(EngineConfig {
            mode: Mode::WriteAround,
            maxmemory: (2 + 3 + ENTRY_OVERHEAD) * 6,
            ..EngineConfig::default()
        });
        for op in &ops {
            // Replay the same operations; check_invariants runs after each one.
            let line = match *op {
                Op::LGet(s, k, _) => format!("LGET {s} {}", KEYS[k]),
                Op::LSet(s, k, v, _) => format!("LSET {s} {} {}", KEYS[k], VALUES[v]),
                Op::LDel(s, k) => format!("LDEL {s} {}", KEYS[k]),
                Op::LValidate(s) => format!("LVALIDATE {s}"),
                Op::LCommit(s) => format!("LCOMMIT {s}"),
                Op::LAbort(s) => format!("LABORT {s}"),
                Op::IqGet(s, k) => format!("IQGET {s} {}", KEYS[k]),
                Op::IqSet(s, k, v) => format!("IQSET {s} {} {}", KEYS[k], VALUES[v]),
                Op::QaReg(s, k) => format!("QAREG {s} {}", KEYS[k]),
                Op::Dar(s, k) => format!("DAR {s} {}", KEYS[k]),
                Op::PlainSet(k, v) => format!("SET {} {}", KEYS[k], VALUES[v]),
                Op::Advance(ms) => { cmi.advance(ms); continue; }
                _ => format!("GET {}", KEYS[0]),
            };
            cmi.run(&line);
            let m = cmi.engine.memory().clone();
            prop_assert!(m.used <= m.maxmemory);
        }
    }
}
