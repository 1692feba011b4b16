//! The commands the model knows, and how a client spells them.

pub type Sid = u64;

/// The commands the model knows: the lease, session and IQ families, and the plain commands that
/// meet them on the same keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmd {
    Get(String),
    Set(String, String),
    Del(String),
    IncrBy(String, i64),
    Append(String, String),
    FlushAll {
        unpinned: bool,
    },
    LGet {
        sid: Sid,
        key: String,
        rmw: bool,
    },
    LMGet {
        sid: Sid,
        rmw: bool,
        keys: Vec<String>,
    },
    LSet {
        sid: Sid,
        key: String,
        value: String,
        pin: bool,
    },
    LMSet {
        sid: Sid,
        pin: bool,
        pairs: Vec<(String, String)>,
    },
    LAdd {
        sid: Sid,
        key: String,
        value: String,
        pin: bool,
    },
    LDel {
        sid: Sid,
        key: String,
    },
    LMDel {
        sid: Sid,
        keys: Vec<String>,
    },
    LAppend {
        sid: Sid,
        key: String,
        bytes: String,
        prepend: bool,
    },
    LMAppend {
        sid: Sid,
        pairs: Vec<(String, String)>,
    },
    /// LUPDATE: document change operators, JSON text.
    LUpdate {
        sid: Sid,
        key: String,
        changes: String,
    },
    /// LINCR for a delta >= 0, LDECR for a delta < 0.
    LIncr {
        sid: Sid,
        key: String,
        delta: i64,
    },
    LUnpin {
        sid: Sid,
        key: String,
    },
    /// LMARK (`set`) or LUNMARK.
    LMark {
        sid: Sid,
        key: String,
        set: bool,
    },
    LValidate(Sid),
    LCommit(Sid),
    LAbort(Sid),
    /// LPRIORITY: the session's ticket.
    LPriority {
        sid: Sid,
        ticket: u64,
    },
    IqGet {
        sid: Sid,
        key: String,
    },
    IqSet {
        sid: Sid,
        key: String,
        value: String,
    },
    QaReg {
        sid: Sid,
        key: String,
    },
    QaRead {
        sid: Sid,
        key: String,
    },
    /// `mark`: MARK (`Some(true)`), UNMARK (`Some(false)`) or neither.
    Sar {
        sid: Sid,
        key: String,
        value: String,
        mark: Option<bool>,
    },
    Dar {
        sid: Sid,
        key: String,
        mark: Option<bool>,
    },
}

macro_rules! words {
    ($($word:expr),* $(,)?) => { vec![$($word.to_string()),*] };
}

impl Cmd {
    /// The command as a client sends it.
    pub fn args(&self) -> Vec<String> {
        let flag = |on: bool, yes: &str, no: &str| if on { yes } else { no }.to_string();
        let mark = |m: &Option<bool>| m.map(|set| flag(set, "MARK", "UNMARK"));
        let flat = |pairs: &[(String, String)]| -> Vec<String> {
            pairs
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect()
        };
        match self {
            Cmd::Get(k) => words!["GET", k],
            Cmd::Set(k, v) => words!["SET", k, v],
            Cmd::Del(k) => words!["DEL", k],
            Cmd::IncrBy(k, n) => words!["INCRBY", k, n],
            Cmd::Append(k, v) => words!["APPEND", k, v],
            Cmd::FlushAll { unpinned: false } => words!["FLUSHALL"],
            Cmd::FlushAll { unpinned: true } => words!["FLUSHALL", "UNPINNED"],
            Cmd::LGet { sid, key, rmw } => words!["LGET", sid, key, flag(*rmw, "RMW", "RO")],
            Cmd::LMGet { sid, rmw, keys } => {
                let mut w = words!["LMGET", sid, flag(*rmw, "RMW", "RO")];
                w.extend(keys.iter().cloned());
                w
            }
            Cmd::LSet {
                sid,
                key,
                value,
                pin,
            }
            | Cmd::LAdd {
                sid,
                key,
                value,
                pin,
            } => {
                let name = if matches!(self, Cmd::LSet { .. }) {
                    "LSET"
                } else {
                    "LADD"
                };
                let mut w = words![name, sid, key, value];
                w.extend(pin.then(|| "PIN".to_string()));
                w
            }
            Cmd::LMSet { sid, pin, pairs } => {
                let mut w = words!["LMSET", sid, flag(*pin, "PIN", "NOPIN")];
                w.extend(flat(pairs));
                w
            }
            Cmd::LDel { sid, key } => words!["LDEL", sid, key],
            Cmd::LMDel { sid, keys } => {
                let mut w = words!["LMDEL", sid];
                w.extend(keys.iter().cloned());
                w
            }
            Cmd::LAppend {
                sid,
                key,
                bytes,
                prepend,
            } => {
                words![flag(*prepend, "LPREPEND", "LAPPEND"), sid, key, bytes]
            }
            Cmd::LMAppend { sid, pairs } => {
                let mut w = words!["LMAPPEND", sid];
                w.extend(flat(pairs));
                w
            }
            Cmd::LUpdate { sid, key, changes } => words!["LUPDATE", sid, key, changes],
            Cmd::LIncr { sid, key, delta } => {
                words![
                    flag(*delta < 0, "LDECR", "LINCR"),
                    sid,
                    key,
                    delta.unsigned_abs()
                ]
            }
            Cmd::LUnpin { sid, key } => words!["LUNPIN", sid, key],
            Cmd::LMark { sid, key, set } => words![flag(*set, "LMARK", "LUNMARK"), sid, key],
            Cmd::LValidate(sid) => words!["LVALIDATE", sid],
            Cmd::LCommit(sid) => words!["LCOMMIT", sid],
            Cmd::LAbort(sid) => words!["LABORT", sid],
            Cmd::LPriority { sid, ticket } => words!["LPRIORITY", sid, ticket],
            Cmd::IqGet { sid, key } => words!["IQGET", sid, key],
            Cmd::IqSet { sid, key, value } => words!["IQSET", sid, key, value],
            Cmd::QaReg { sid, key } => words!["QAREG", sid, key],
            Cmd::QaRead { sid, key } => words!["QAREAD", sid, key],
            Cmd::Sar {
                sid,
                key,
                value,
                mark: m,
            } => {
                let mut w = words!["SAR", sid, key, value];
                w.extend(mark(m));
                w
            }
            Cmd::Dar { sid, key, mark: m } => {
                let mut w = words!["DAR", sid, key];
                w.extend(mark(m));
                w
            }
        }
    }
}

impl Cmd {
    /// Reads a command spelled as `args` spells it, for fixed sequences in tests.
    pub fn parse(line: &str) -> Cmd {
        let w: Vec<String> = line.split_whitespace().map(String::from).collect();
        let sid = || w[1].parse::<Sid>().expect("a session id");
        let key = || w[2].clone();
        let arg = |i: usize| w[i].clone();
        let has = |i: usize, word: &str| w.get(i).is_some_and(|a| a == word);
        let pairs = |from: usize| {
            w[from..]
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect()
        };
        let mark = |i: usize| w.get(i).map(|a| a == "MARK");
        match w[0].as_str() {
            "GET" => Cmd::Get(arg(1)),
            "SET" => Cmd::Set(arg(1), arg(2)),
            "DEL" => Cmd::Del(arg(1)),
            "INCRBY" => Cmd::IncrBy(arg(1), arg(2).parse().expect("an integer")),
            "APPEND" => Cmd::Append(arg(1), arg(2)),
            "FLUSHALL" => Cmd::FlushAll {
                unpinned: has(1, "UNPINNED"),
            },
            "LGET" => Cmd::LGet {
                sid: sid(),
                key: key(),
                rmw: has(3, "RMW"),
            },
            "LMGET" => Cmd::LMGet {
                sid: sid(),
                rmw: has(2, "RMW"),
                keys: w[3..].to_vec(),
            },
            "LSET" | "LADD" => {
                let (sid, key, value, pin) = (sid(), key(), arg(3), has(4, "PIN"));
                match w[0].as_str() {
                    "LSET" => Cmd::LSet {
                        sid,
                        key,
                        value,
                        pin,
                    },
                    _ => Cmd::LAdd {
                        sid,
                        key,
                        value,
                        pin,
                    },
                }
            }
            "LMSET" => Cmd::LMSet {
                sid: sid(),
                pin: has(2, "PIN"),
                pairs: pairs(3),
            },
            "LDEL" => Cmd::LDel {
                sid: sid(),
                key: key(),
            },
            "LMDEL" => Cmd::LMDel {
                sid: sid(),
                keys: w[2..].to_vec(),
            },
            "LAPPEND" | "LPREPEND" => Cmd::LAppend {
                sid: sid(),
                key: key(),
                bytes: arg(3),
                prepend: w[0] == "LPREPEND",
            },
            "LMAPPEND" => Cmd::LMAppend {
                sid: sid(),
                pairs: pairs(2),
            },
            "LUPDATE" => Cmd::LUpdate {
                sid: sid(),
                key: key(),
                changes: arg(3),
            },
            "LINCR" | "LDECR" => {
                let n: i64 = arg(3).parse().expect("an integer");
                Cmd::LIncr {
                    sid: sid(),
                    key: key(),
                    delta: if w[0] == "LDECR" { -n } else { n },
                }
            }
            "LUNPIN" => Cmd::LUnpin {
                sid: sid(),
                key: key(),
            },
            "LMARK" | "LUNMARK" => Cmd::LMark {
                sid: sid(),
                key: key(),
                set: w[0] == "LMARK",
            },
            "LVALIDATE" => Cmd::LValidate(sid()),
            "LCOMMIT" => Cmd::LCommit(sid()),
            "LABORT" => Cmd::LAbort(sid()),
            "LPRIORITY" => Cmd::LPriority {
                sid: sid(),
                ticket: w[2].parse().expect("a ticket"),
            },
            "IQGET" => Cmd::IqGet {
                sid: sid(),
                key: key(),
            },
            "IQSET" => Cmd::IqSet {
                sid: sid(),
                key: key(),
                value: arg(3),
            },
            "QAREG" => Cmd::QaReg {
                sid: sid(),
                key: key(),
            },
            "QAREAD" => Cmd::QaRead {
                sid: sid(),
                key: key(),
            },
            "SAR" => Cmd::Sar {
                sid: sid(),
                key: key(),
                value: arg(3),
                mark: mark(4),
            },
            "DAR" => Cmd::Dar {
                sid: sid(),
                key: key(),
                mark: mark(3),
            },
            other => panic!("the model does not know {other}"),
        }
    }
}
