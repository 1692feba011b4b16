//! A session: the lease and session commands of one atomic unit of work, over every CMI its keys
//! live on (000 §5.1.2, §5.1.3).

use std::collections::HashSet;

use cads_protocol::{Command, ErrorKind, ErrorReply, MarkOp, Reply, SessionId};

use crate::conn::Connection;
use crate::error::{ClientError, Result};
use crate::retry::{Backoff, RetryPolicy};
use crate::Client;

/// What an IQ read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IqRead {
    /// The cached value; no lease was taken.
    Hit(Vec<u8>),
    /// A miss: the session holds the I lease and should fill the key with `iq_set`. `marker` says
    /// the key has buffered writes to apply to the data store first (TARDIS, 000 §4.4.2.2).
    Miss { marker: bool },
}

/// A key's value (`None`: not cached) and whether it carries a TARDIS marker.
pub type MarkedValue = (Option<Vec<u8>>, bool);

/// A write of [`Session::write_at`], under an exclusive lease (write-through mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// LSET, pinned if `pin`.
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        pin: bool,
    },
    /// LSET ... PINRESERVE: a pinned value charged to the pinned memory the CMI keeps back for
    /// replacing a buffered write by its idempotent form just before it is applied.
    SetPinnedFromReserve { key: Vec<u8>, value: Vec<u8> },
    /// LADD: only if the key has no value.
    Add {
        key: Vec<u8>,
        value: Vec<u8>,
        pin: bool,
    },
    /// LAPPEND.
    Append { key: Vec<u8>, bytes: Vec<u8> },
    /// LINCR, or LDECR for a negative `delta`.
    Incr { key: Vec<u8>, delta: i64 },
    /// LUPDATE: document change operators (JSON text) applied to the cached document.
    Update { key: Vec<u8>, changes: Vec<u8> },
    /// LDEL.
    Delete { key: Vec<u8> },
    /// LMARK or LUNMARK: a TARDIS marker change at commit, on a key the session already holds
    /// a lease on (an earlier write of the same call, or an earlier read).
    Mark { key: Vec<u8>, op: MarkOp },
    /// LGET ... RMW: the exclusive lease on a key, and whether its value (the session's own
    /// pending version, if it has one) is still `value`. Before a write computed from a value the
    /// session read earlier, in the same pipeline: the check that it did not change meanwhile.
    Expect { key: Vec<u8>, value: Vec<u8> },
}

/// What a [`Write`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// `Set` staged its value.
    Stored,
    /// `Add`: whether the value was added (false: the key had one).
    Added(bool),
    /// `Append`: the new length, or `None` if the key had no value (nothing appended).
    Length(Option<usize>),
    /// `Incr`: the new value, or `None` if the key had no value.
    Value(Option<i64>),
    /// `Update`: whether the key had a value (that took the changes, or that goes at commit).
    Updated(bool),
    /// `Delete`: whether the key had a value.
    Deleted(bool),
    /// `Mark`: the change is staged.
    Marked,
    /// `Expect`: whether the key held the expected value.
    Matched(bool),
}

impl Write {
    pub fn key(&self) -> &[u8] {
        match self {
            Write::Set { key, .. }
            | Write::SetPinnedFromReserve { key, .. }
            | Write::Add { key, .. }
            | Write::Append { key, .. }
            | Write::Incr { key, .. }
            | Write::Update { key, .. }
            | Write::Delete { key }
            | Write::Mark { key, .. }
            | Write::Expect { key, .. } => key,
        }
    }

    fn command(&self, sid: SessionId) -> Command<'_> {
        match self {
            Write::Set { key, value, pin } => Command::LSet {
                sid,
                key,
                value,
                pin: *pin,
                reserve: false,
            },
            Write::SetPinnedFromReserve { key, value } => Command::LSet {
                sid,
                key,
                value,
                pin: true,
                reserve: true,
            },
            Write::Add { key, value, pin } => Command::LAdd {
                sid,
                key,
                value,
                pin: *pin,
            },
            Write::Append { key, bytes } => Command::LAppend {
                sid,
                key,
                delta: bytes,
            },
            Write::Incr { key, delta } => Command::LIncr {
                sid,
                key,
                delta: *delta,
            },
            Write::Update { key, changes } => Command::LUpdate { sid, key, changes },
            Write::Delete { key } => Command::LDel { sid, key },
            Write::Mark { key, op } => Command::LMark { sid, key, op: *op },
            Write::Expect { key, .. } => Command::LGet {
                sid,
                key,
                rmw: true,
            },
        }
    }

    fn outcome(&self, reply: Reply<'static>) -> Result<Written> {
        Ok(match self {
            Write::Set { .. } | Write::SetPinnedFromReserve { .. } => {
                ok(reply).map(|()| Written::Stored)?
            }
            Write::Add { .. } => Written::Added(int(reply)? == 1),
            Write::Append { .. } => Written::Length(optional_int(reply)?.map(|n| n as usize)),
            Write::Incr { .. } => Written::Value(optional_int(reply)?),
            Write::Update { .. } => Written::Updated(optional_int(reply)?.is_some()),
            Write::Delete { .. } => Written::Deleted(int(reply)? == 1),
            Write::Mark { .. } => ok(reply).map(|()| Written::Marked)?,
            Write::Expect { value, .. } => {
                Written::Matched(bulk(reply)?.as_deref() == Some(value.as_slice()))
            }
        })
    }
}

/// Maps an error reply to the client's error type (RETRY is handled before this).
pub(crate) fn error_from(e: ErrorReply) -> ClientError {
    match e.kind {
        ErrorKind::Abort => ClientError::Aborted {
            reason: aborted_because(&e),
        },
        ErrorKind::NotStored => ClientError::NotStored,
        ErrorKind::Fenced => ClientError::Fenced,
        ErrorKind::StaleConfig => match e.latest_config() {
            Some(latest) => ClientError::StaleConfiguration { latest },
            None => ClientError::Server(e),
        },
        _ => ClientError::Server(e),
    }
}

pub(crate) fn unexpected(reply: &Reply<'_>) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {reply:?}"))
}

pub(crate) fn bulk(reply: Reply<'static>) -> Result<Option<Vec<u8>>> {
    match reply {
        Reply::Bulk(b) => Ok(Some(b.into_owned())),
        Reply::Nil => Ok(None),
        Reply::Error(e) => Err(error_from(e)),
        other => Err(unexpected(&other)),
    }
}

fn int(reply: Reply<'static>) -> Result<i64> {
    match reply {
        Reply::Int(n) => Ok(n),
        Reply::Error(e) => Err(error_from(e)),
        other => Err(unexpected(&other)),
    }
}

fn ok(reply: Reply<'static>) -> Result<()> {
    match reply {
        Reply::Status(_) => Ok(()),
        Reply::Error(e) => Err(error_from(e)),
        other => Err(unexpected(&other)),
    }
}

fn optional_int(reply: Reply<'static>) -> Result<Option<i64>> {
    match reply {
        Reply::Nil => Ok(None),
        other => int(other).map(Some),
    }
}

/// Why a CMI aborted a session, in words for [`ClientError::Aborted`].
fn aborted_because(e: &ErrorReply) -> String {
    e.abort_reason()
        .unwrap_or("the CMI ended it (wounded by a writer, expired, or a conflict before)")
        .to_string()
}

/// The reason of an abort after RETRY for longer than the retry budget.
fn waited_too_long(key: &[u8]) -> String {
    format!(
        "still waiting for a lease on key {} when the retry budget ran out",
        cads_protocol::printable_key(key)
    )
}

fn is_retry(reply: &Reply<'_>) -> bool {
    matches!(reply, Reply::Error(e) if e.kind == ErrorKind::Retry)
}

/// Groups the indexes of placed keys by CMI, keeping their order within a CMI.
fn group(indexes: &[usize], keys: &[(usize, &[u8])]) -> Vec<(usize, Vec<usize>)> {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &i in indexes {
        let cmi = keys[i].0;
        match groups.iter_mut().find(|(c, _)| *c == cmi) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((cmi, vec![i])),
        }
    }
    groups
}

fn is_abort(reply: &Reply<'_>) -> bool {
    matches!(reply, Reply::Error(e) if e.kind == ErrorKind::Abort)
}

/// The multi-key commands [`Session::per_key`] sends.
#[derive(Clone, Copy)]
enum PerKey {
    Get { rmw: bool, markers: bool },
    Set { pin: bool },
    Delete,
    Append,
}

impl PerKey {
    /// The command for one CMI: `args` are its keys, or its key-value pairs for `Set` and
    /// `Append`.
    fn command<'a>(self, sid: SessionId, args: &'a [&'a [u8]]) -> Command<'a> {
        match self {
            PerKey::Get { rmw, markers } => Command::LMGet {
                sid,
                rmw,
                markers,
                keys: args,
            },
            PerKey::Set { pin } => Command::LMSet {
                sid,
                pin,
                pairs: args,
            },
            PerKey::Delete => Command::LMDel { sid, keys: args },
            PerKey::Append => Command::LMAppend { sid, pairs: args },
        }
    }
}

/// What one round of [`Session::write_at`] sends: the writes (`pending` are the indexes still to
/// send) and where the validations go.
struct WriteRound<'w, 'p> {
    writes: &'w [(usize, Write)],
    pending: &'p [usize],
    validate_first: bool,
    validate: bool,
}

/// One session. Dropping it without `commit` aborts it.
pub struct Session<'c> {
    client: &'c Client,
    id: SessionId,
    /// A connection per CMI, taken on first use and returned at the end.
    links: Vec<Option<Connection>>,
    /// The keys this session holds a lease on, per CMI (as far as the client knows).
    held: Vec<HashSet<Vec<u8>>>,
    /// CMIs that may have a session object (live or tombstone) for this id.
    touched: Vec<bool>,
    validated: bool,
    finished: bool,
    /// Set by [`Session::on`]: every key goes to this CMI instead of its routed one.
    target: Option<usize>,
    /// The ticket given with [`Session::set_ticket`].
    ticket: Option<u64>,
    /// The configuration given with [`Session::set_configuration`].
    configuration: Option<u64>,
    /// The CMIs told the ticket and the configuration.
    introduced: Vec<bool>,
}

impl<'c> Session<'c> {
    pub(crate) fn new(client: &'c Client, id: SessionId) -> Session<'c> {
        let n = client.cmis();
        Session {
            client,
            id,
            links: (0..n).map(|_| None).collect(),
            held: vec![HashSet::new(); n],
            touched: vec![false; n],
            validated: false,
            finished: false,
            target: None,
            ticket: None,
            configuration: None,
            introduced: vec![false; n],
        }
    }

    /// Gives the session a ticket: the time the work it does first started (any clock the
    /// application's processes share, microseconds since the Unix epoch for instance; smaller is
    /// older), kept by the caller across the retries of that work. On a hot key, a ticketed
    /// session asking for an exclusive lease and older than the sessions in its way waits for
    /// them (RETRY, polled here within the retry budget) instead of being aborted, and younger
    /// writers give way to it, so work that keeps its ticket eventually gets every key it writes
    /// (`LPRIORITY`, PROTOCOL.md). Shared (read) requests are not affected.
    /// Each CMI is told with the session's first command there, in the same round trip.
    pub fn set_ticket(&mut self, ticket: u64) {
        self.ticket = Some(ticket);
    }

    /// Names the Gemini configuration the session routes its keys by (`LCONFIG`). A CMI that
    /// knows a newer one refuses the session's commands from then on
    /// ([`ClientError::StaleConfiguration`]): fetch the configuration and run the session again.
    /// Each CMI is told with the session's first command there, in the same round trip.
    pub fn set_configuration(&mut self, id: u64) {
        self.configuration = Some(id);
    }

    /// How this session backs off on RETRY: with a ticket, RETRY means it waits for a key and
    /// polls more often.
    fn backoff<'p>(&self, policy: &'p RetryPolicy) -> Backoff<'p> {
        let mut backoff = Backoff::new(policy);
        if self.ticket.is_some() {
            backoff.cap(policy.ticketed_max);
        }
        backoff
    }

    /// What CMI `cmi` must be told before the session's first command there: its ticket and its
    /// configuration.
    fn introduction(&self, cmi: usize) -> Vec<Command<'static>> {
        if self.introduced[cmi] {
            return Vec::new();
        }
        let sid = self.id;
        let ticket = self.ticket.map(|ticket| Command::LPriority { sid, ticket });
        let config = self.configuration.map(|id| Command::LConfig { sid, id });
        ticket.into_iter().chain(config).collect()
    }

    /// Runs `work` with every key of this session sent to CMI `cmi`, whatever the router says:
    /// for replicas of an entry kept on several CMIs (write-back's buffered writes).
    pub fn on<T>(&mut self, cmi: usize, work: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let previous = self.target.replace(cmi);
        let result = work(self);
        self.target = previous;
        result
    }

    /// The CMI a key's commands go to.
    fn cmi_of(&self, key: &[u8]) -> usize {
        self.target.unwrap_or_else(|| self.client.route(key))
    }

    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The CMIs this session holds leases on.
    pub fn cmis_with_leases(&self) -> Vec<usize> {
        (0..self.held.len())
            .filter(|&c| !self.held[c].is_empty())
            .collect()
    }

    fn link(&mut self, cmi: usize) -> Result<&mut Connection> {
        if self.links[cmi].is_none() {
            self.links[cmi] = Some(self.client.pool(cmi).take()?);
        }
        Ok(self.links[cmi].as_mut().expect("just set"))
    }

    /// Drops a connection whose state is unknown after an error.
    fn broken(&mut self, cmi: usize, error: ClientError) -> ClientError {
        self.links[cmi] = None;
        if error.is_unavailable() {
            self.client.pool(cmi).clear();
        }
        error
    }

    fn call(&mut self, cmi: usize, cmd: &Command<'_>) -> Result<Reply<'static>> {
        if !self.introduction(cmi).is_empty() {
            let mut replies = self.pipeline(vec![(cmi, vec![cmd.clone()])])?;
            let (_, mut list) = replies.pop().expect("one CMI asked");
            return Ok(list.pop().expect("one reply per command"));
        }
        self.touched[cmi] = true;
        self.client.count_round_trip();
        let result = self.link(cmi).and_then(|conn| conn.call(cmd));
        result.map_err(|e| self.broken(cmi, e))
    }

    /// Sends one command per CMI (all written before any reply is read) and returns the replies.
    fn call_each(
        &mut self,
        cmds: Vec<(usize, Command<'_>)>,
    ) -> Result<Vec<(usize, Reply<'static>)>> {
        let replies = self.pipeline(cmds.into_iter().map(|(c, cmd)| (c, vec![cmd])).collect())?;
        Ok(replies
            .into_iter()
            .map(|(cmi, mut r)| (cmi, r.pop().expect("one reply per command")))
            .collect())
    }

    /// Sends a list of commands to each CMI, pipelined, every list written before any reply is
    /// read: one round trip however many commands and CMIs. Returns each CMI's replies in order.
    /// A CMI not yet told the session's ticket and configuration gets `LPRIORITY` and `LCONFIG`
    /// first, their replies left out; if one is an error (the session is aborted, or routes by
    /// another configuration than the CMI's), it is every command's reply there.
    fn pipeline(
        &mut self,
        mut cmds: Vec<(usize, Vec<Command<'_>>)>,
    ) -> Result<Vec<(usize, Vec<Reply<'static>>)>> {
        if !cmds.is_empty() {
            self.client.count_round_trip();
        }
        let mut told = vec![0; cmds.len()];
        for ((cmi, list), told) in cmds.iter_mut().zip(&mut told) {
            let introduction = self.introduction(*cmi);
            *told = introduction.len();
            list.splice(0..0, introduction);
            self.introduced[*cmi] = true;
        }
        for (cmi, list) in &cmds {
            self.touched[*cmi] = true;
            let sent = self.link(*cmi).and_then(|conn| {
                for cmd in list {
                    conn.queue(cmd);
                }
                conn.flush()
            });
            if let Err(e) = sent {
                // Connections already written to owe a reply nobody will read: never reuse them.
                for (other, _) in &cmds {
                    self.links[*other] = None;
                }
                return Err(self.broken(*cmi, e));
            }
        }
        let mut replies = Vec::with_capacity(cmds.len());
        for (cmi, list) in &cmds {
            let mut got = Vec::with_capacity(list.len());
            for _ in list {
                match self.link(*cmi).and_then(|conn| conn.read()) {
                    Ok(reply) => got.push(reply),
                    Err(e) => {
                        // The other connections may still hold unread replies: drop them all.
                        for (other, _) in &cmds {
                            self.links[*other] = None;
                        }
                        return Err(self.broken(*cmi, e));
                    }
                }
            }
            replies.push((*cmi, got));
        }
        for ((_, got), told) in replies.iter_mut().zip(told) {
            // A refused introduction ended the session there: its reason is the answer to every
            // command after it (which the CMI answered ABORT).
            let refused = got[..told].iter().find_map(|r| match r {
                Reply::Error(e) => Some(e.clone()),
                _ => None,
            });
            got.drain(..told);
            if let Some(e) = refused {
                got.iter_mut().for_each(|r| *r = Reply::Error(e.clone()));
            }
        }
        Ok(replies)
    }

    /// Ends the session everywhere after the CMI said ABORT (or the client gave up), then reports
    /// it with `reason`.
    fn aborted(&mut self, reason: String) -> ClientError {
        self.abort();
        ClientError::Aborted { reason }
    }

    /// [`aborted`](Self::aborted) for an ABORT reply.
    fn aborted_by(&mut self, reply: &Reply<'_>) -> ClientError {
        let reason = match reply {
            Reply::Error(e) => aborted_because(e),
            _ => String::new(),
        };
        self.aborted(reason)
    }

    /// Runs a multi-key request until every item is granted: `send` sends the items named
    /// (indexes into `keys`) and returns those a CMI answered RETRY (a ticketed session waiting
    /// for a key), which are sent again after a backoff. Gives up, aborting the session, when the
    /// retry budget is spent.
    fn until_granted(
        &mut self,
        keys: &[(usize, &[u8])],
        mut send: impl FnMut(&mut Self, &[usize]) -> Result<Vec<usize>>,
    ) -> Result<()> {
        let policy = self.client.retry_policy().clone();
        let mut backoff = self.backoff(&policy);
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        loop {
            pending = send(self, &pending)?;
            let Some(&first) = pending.first() else {
                return Ok(());
            };
            if !backoff.wait() {
                return Err(self.aborted(waited_too_long(keys[first].1)));
            }
        }
    }

    /// Runs a single-key command, backing off on RETRY; ABORT aborts the whole session.
    fn keyed(&mut self, key: &[u8], cmd: &Command<'_>) -> Result<Reply<'static>> {
        let cmi = self.cmi_of(key);
        let policy = self.client.retry_policy().clone();
        let mut backoff = self.backoff(&policy);
        loop {
            let reply = match self.call(cmi, cmd) {
                Ok(reply) => reply,
                Err(e) => {
                    self.abort();
                    return Err(e);
                }
            };
            if is_retry(&reply) {
                if backoff.wait() {
                    continue;
                }
                return Err(self.aborted(waited_too_long(key)));
            }
            if is_abort(&reply) {
                return Err(self.aborted_by(&reply));
            }
            return Ok(reply);
        }
    }

    fn hold(&mut self, key: &[u8]) {
        self.hold_at(self.cmi_of(key), key);
    }

    fn hold_at(&mut self, cmi: usize, key: &[u8]) {
        self.held[cmi].insert(key.to_vec());
        self.validated = false;
    }

    fn release(&mut self, key: &[u8]) {
        let cmi = self.cmi_of(key);
        self.held[cmi].remove(key);
    }

    /// The check after a call that failed for a reason other than ABORT or RETRY (NOTSTORED, ERR):
    /// the session lives on.
    fn map<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(ClientError::Aborted { reason }) = result {
            return Err(self.aborted(reason));
        }
        result
    }

    /// After a lease-taking command on `key`: the CMI holds the lease unless it refused the command
    /// before taking it (NOTAVAILABLE); NOTSTORED and value errors (not an integer, overflow) come
    /// after the lease was granted.
    fn leased<T>(&mut self, key: &[u8], result: Result<T>) -> Result<T> {
        let refused =
            matches!(&result, Err(ClientError::Server(e)) if e.kind == ErrorKind::NotAvailable);
        if !refused {
            self.hold(key);
        }
        self.map(result)
    }

    // --- reads ---

    /// LGET: a shared lease (`rmw` false) or an exclusive one for read-modify-write. `None` under
    /// a shared lease means a miss this session should fill with `set`.
    pub fn get(&mut self, key: &[u8], rmw: bool) -> Result<Option<Vec<u8>>> {
        let reply = self.keyed(
            key,
            &Command::LGet {
                sid: self.id,
                key,
                rmw,
            },
        )?;
        let value = bulk(reply);
        self.leased(key, value)
    }

    /// LMGET over every CMI the keys live on, in parallel. Keys told to RETRY are asked again
    /// after a backoff.
    pub fn mget(&mut self, keys: &[&[u8]], rmw: bool) -> Result<Vec<Option<Vec<u8>>>> {
        let placed = self.place(keys);
        self.mget_at(&placed, rmw)
    }

    /// LMGET of keys on chosen CMIs (a key may appear once per CMI: replicas of an entry kept on
    /// several CMIs).
    pub fn mget_at(&mut self, keys: &[(usize, &[u8])], rmw: bool) -> Result<Vec<Option<Vec<u8>>>> {
        let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        let get = PerKey::Get {
            rmw,
            markers: false,
        };
        self.per_key(keys, None, get, |i, item| {
            values[i] = bulk(item)?;
            Ok(())
        })?;
        Ok(values)
    }

    /// LMGETMARK: [`mget`](Self::mget) that also says which keys carry a TARDIS marker.
    pub fn mget_marked(&mut self, keys: &[&[u8]], rmw: bool) -> Result<Vec<MarkedValue>> {
        let placed = self.place(keys);
        let mut values: Vec<MarkedValue> = vec![(None, false); keys.len()];
        let get = PerKey::Get { rmw, markers: true };
        self.per_key(&placed, None, get, |i, item| {
            values[i] = match item {
                Reply::Array(pair) if pair.len() == 2 => {
                    let mut pair = pair.into_iter();
                    let value = bulk(pair.next().expect("two items"))?;
                    (value, int(pair.next().expect("two items"))? == 1)
                }
                other => return Err(unexpected(&other)),
            };
            Ok(())
        })?;
        Ok(values)
    }

    /// Runs a multi-key command over `keys` (with `values`, for a command of pairs), one command
    /// per CMI in parallel, until every key is granted (see `until_granted`), and hands each
    /// granted key's reply item to `each` with the key's index.
    fn per_key(
        &mut self,
        keys: &[(usize, &[u8])],
        values: Option<&[&[u8]]>,
        command: PerKey,
        mut each: impl FnMut(usize, Reply<'static>) -> Result<()>,
    ) -> Result<()> {
        self.until_granted(keys, |session, pending| {
            let groups = group(pending, keys);
            let args: Vec<Vec<&[u8]>> = groups
                .iter()
                .map(|(_, idx)| {
                    idx.iter()
                        .flat_map(|&i| std::iter::once(keys[i].1).chain(values.map(|v| v[i])))
                        .collect()
                })
                .collect();
            let sid = session.id;
            let commands = groups
                .iter()
                .zip(&args)
                .map(|((cmi, _), args)| (*cmi, command.command(sid, args)))
                .collect();
            let replies = session.each_or_abort(commands)?;
            let mut retry = Vec::new();
            for ((cmi, reply), (_, idx)) in replies.into_iter().zip(&groups) {
                let items = session.items(reply, idx.len())?;
                for (item, &i) in items.into_iter().zip(idx) {
                    if is_retry(&item) {
                        retry.push(i);
                        continue;
                    }
                    session.hold_at(cmi, keys[i].1);
                    each(i, item)?;
                }
            }
            Ok(retry)
        })
    }

    /// The writes `indexes` of `placed` grouped by CMI, and, if `every_leased`, an empty group
    /// for each other CMI the session holds leases on (which must validate or commit too).
    fn grouped(
        &self,
        indexes: &[usize],
        placed: &[(usize, &[u8])],
        every_leased: bool,
    ) -> Vec<(usize, Vec<usize>)> {
        let mut groups = group(indexes, placed);
        if every_leased {
            for cmi in self.cmis_with_leases() {
                if !groups.iter().any(|(c, _)| *c == cmi) {
                    groups.push((cmi, Vec::new()));
                }
            }
        }
        groups
    }

    /// [`pipeline`](Self::pipeline); a CMI that cannot be reached aborts the session everywhere.
    fn pipeline_or_abort(
        &mut self,
        commands: Vec<(usize, Vec<Command<'_>>)>,
    ) -> Result<Vec<(usize, Vec<Reply<'static>>)>> {
        self.pipeline(commands).inspect_err(|_| self.abort())
    }

    /// Sends one command per CMI in parallel; ABORT from any aborts the session, as does a
    /// failure to reach a CMI. Other error replies are returned to the caller.
    fn each_or_abort(
        &mut self,
        commands: Vec<(usize, Command<'_>)>,
    ) -> Result<Vec<(usize, Reply<'static>)>> {
        let replies = self.call_each(commands).inspect_err(|_| self.abort())?;
        if let Some((_, reply)) = replies.iter().find(|(_, r)| is_abort(r)) {
            return Err(self.aborted_by(reply));
        }
        Ok(replies)
    }

    /// The items of a multi-key reply of `len` items; an error reply in their place (the whole
    /// request refused, NOTSTORED at the CMI's session memory cap for instance) aborts the session.
    fn items(&mut self, reply: Reply<'static>, len: usize) -> Result<Vec<Reply<'static>>> {
        match reply {
            Reply::Array(items) if items.len() == len => Ok(items),
            other => {
                let e = match other {
                    Reply::Error(e) => error_from(e),
                    other => unexpected(&other),
                };
                self.abort();
                Err(e)
            }
        }
    }

    /// Each key with the CMI its commands go to.
    fn place<'k>(&self, keys: &[&'k [u8]]) -> Vec<(usize, &'k [u8])> {
        keys.iter().map(|&k| (self.cmi_of(k), k)).collect()
    }

    // --- writes ---

    /// LSET: stages `value` (pinned if `pin`), visible to others at commit.
    pub fn set(&mut self, key: &[u8], value: &[u8], pin: bool) -> Result<()> {
        let reply = self.keyed(
            key,
            &Command::LSet {
                sid: self.id,
                key,
                value,
                pin,
                reserve: false,
            },
        )?;
        let result = ok(reply);
        self.leased(key, result)
    }

    /// LSET of several keys, sent to their CMIs in parallel (LMSET per CMI).
    pub fn mset(&mut self, pairs: &[(&[u8], &[u8])], pin: bool) -> Result<()> {
        let placed: Vec<(usize, &[u8], &[u8])> =
            pairs.iter().map(|&(k, v)| (self.cmi_of(k), k, v)).collect();
        self.mset_at(&placed, pin)
    }

    /// LSET of keys on chosen CMIs, in parallel (LMSET per CMI). A pair the CMI had no room for
    /// (NOTSTORED) is reported after the others were staged; the session lives on.
    pub fn mset_at(&mut self, pairs: &[(usize, &[u8], &[u8])], pin: bool) -> Result<()> {
        let keys: Vec<(usize, &[u8])> = pairs.iter().map(|&(c, k, _)| (c, k)).collect();
        let values: Vec<&[u8]> = pairs.iter().map(|&(_, _, v)| v).collect();
        let mut failure = None;
        self.per_key(&keys, Some(&values), PerKey::Set { pin }, |_, item| {
            if let Reply::Error(e) = item {
                failure = Some(error_from(e));
            }
            Ok(())
        })?;
        failure.map_or(Ok(()), Err)
    }

    /// LADD: stages `value` only if the key has none. Returns whether it was added.
    pub fn add(&mut self, key: &[u8], value: &[u8], pin: bool) -> Result<bool> {
        let reply = self.keyed(
            key,
            &Command::LAdd {
                sid: self.id,
                key,
                value,
                pin,
            },
        )?;
        let added = int(reply).map(|n| n == 1);
        self.leased(key, added)
    }

    /// LDEL: the key is deleted at commit. Returns whether it had a value.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let reply = self.keyed(key, &Command::LDel { sid: self.id, key })?;
        let existed = int(reply).map(|n| n == 1);
        self.leased(key, existed)
    }

    /// LDEL of several keys, in parallel (LMDEL per CMI).
    pub fn mdelete(&mut self, keys: &[&[u8]]) -> Result<()> {
        let placed = self.place(keys);
        self.mdelete_at(&placed)
    }

    /// LDEL of keys on chosen CMIs, in parallel (LMDEL per CMI).
    pub fn mdelete_at(&mut self, keys: &[(usize, &[u8])]) -> Result<()> {
        self.per_key(keys, None, PerKey::Delete, |_, _| Ok(()))
    }

    /// LAPPEND of keys on chosen CMIs, in parallel (LMAPPEND per CMI): each key's new length, or
    /// `None` where the key has no value.
    pub fn mappend_at(&mut self, pairs: &[(usize, &[u8], &[u8])]) -> Result<Vec<Option<usize>>> {
        let keys: Vec<(usize, &[u8])> = pairs.iter().map(|&(c, k, _)| (c, k)).collect();
        let values: Vec<&[u8]> = pairs.iter().map(|&(_, _, v)| v).collect();
        let mut lengths = vec![None; pairs.len()];
        let mut failure = None;
        self.per_key(&keys, Some(&values), PerKey::Append, |i, item| {
            match optional_int(item) {
                Ok(length) => lengths[i] = length.map(|n| n as usize),
                Err(e) => failure = Some(e),
            }
            Ok(())
        })?;
        match failure {
            Some(e) => self.map(Err(e)),
            None => Ok(lengths),
        }
    }

    /// Exclusive-lease writes on chosen CMIs, pipelined: each CMI gets its writes in the order
    /// given (then `LVALIDATE` when `validate`), all CMIs in parallel, in one round trip. Returns
    /// what each write did, in the order given. ABORT from any CMI aborts the session; NOTSTORED
    /// or another error on a write is returned after the whole pipeline ran (the session lives
    /// on, as after [`mset`](Self::mset)), and the session then counts as not validated.
    pub fn write_at(&mut self, writes: &[(usize, Write)], validate: bool) -> Result<Vec<Written>> {
        self.pipeline_writes(writes, false, validate)
    }

    /// [`write_at`](Self::write_at) with `LVALIDATE` before the writes as well as after them, in
    /// the same round trip: for a session that may have outlived its leases. A CMI that no longer
    /// knows the session (it outlived its tombstone, or the CMI restarted) would take its writes
    /// for a new session's, which would validate; the first `LVALIDATE` answers ABORT there.
    pub fn validate_and_write_at(&mut self, writes: &[(usize, Write)]) -> Result<Vec<Written>> {
        self.pipeline_writes(writes, true, true)
    }

    fn pipeline_writes(
        &mut self,
        writes: &[(usize, Write)],
        validate_first: bool,
        validate: bool,
    ) -> Result<Vec<Written>> {
        let placed: Vec<(usize, &[u8])> = writes.iter().map(|(c, w)| (*c, w.key())).collect();
        let mut done: Vec<Option<Written>> = vec![None; writes.len()];
        let mut failure = None;
        let mut first_round = true;
        self.until_granted(&placed, |session, pending| {
            let round = WriteRound {
                writes,
                pending,
                validate_first: validate_first && std::mem::take(&mut first_round),
                validate,
            };
            session.write_round(round, &mut done, &mut failure)
        })?;
        if let Some(e) = failure {
            return self.map(Err(e));
        }
        self.validated = validate;
        Ok(done
            .into_iter()
            .map(|w| w.expect("every write answered"))
            .collect())
    }

    /// One round trip of [`write_at`](Self::write_at) for the writes still pending: records what
    /// each did in `done` (the last failure in `failure`) and returns those answered RETRY.
    fn write_round(
        &mut self,
        round: WriteRound<'_, '_>,
        done: &mut [Option<Written>],
        failure: &mut Option<ClientError>,
    ) -> Result<Vec<usize>> {
        let WriteRound {
            writes,
            pending,
            validate_first,
            validate,
        } = round;
        let placed: Vec<(usize, &[u8])> = writes.iter().map(|(c, w)| (*c, w.key())).collect();
        // CMIs holding leases from earlier calls validate too.
        let groups = self.grouped(pending, &placed, validate);
        let sid = self.id;
        let commands: Vec<(usize, Vec<Command<'_>>)> = groups
            .iter()
            .map(|(cmi, idx)| {
                let mut list: Vec<Command<'_>> = Vec::with_capacity(idx.len() + 2);
                if validate_first {
                    list.push(Command::LValidate(sid));
                }
                list.extend(idx.iter().map(|&i| writes[i].1.command(sid)));
                if validate {
                    list.push(Command::LValidate(sid));
                }
                (*cmi, list)
            })
            .collect();
        let replies = self.pipeline_or_abort(commands)?;
        if let Some(reply) = replies
            .iter()
            .flat_map(|(_, list)| list)
            .find(|r| is_abort(r))
        {
            return Err(self.aborted_by(reply));
        }
        let mut retry = Vec::new();
        let mut overtaken = None;
        for ((cmi, list), (_, idx)) in replies.into_iter().zip(&groups) {
            let mut list = list.into_iter();
            if validate_first {
                let reply = list.next().expect("a reply per command");
                if let Err(e) = ok(reply) {
                    *failure = Some(e);
                }
            }
            // Keys of this CMI whose write was answered RETRY in this round.
            let mut waiting: Vec<&[u8]> = Vec::new();
            for &i in idx {
                let reply = list.next().expect("a reply per command");
                if is_retry(&reply) {
                    retry.push(i);
                    waiting.push(placed[i].1);
                    continue;
                }
                if waiting.contains(&placed[i].1) {
                    // The key's holder finished between two writes of one pipeline (it reached
                    // the CMI in parts): this write went ahead of an earlier one of its key,
                    // which may depend on it (LADD, then LAPPEND).
                    overtaken = Some(placed[i].1.to_vec());
                }
                self.hold_at(cmi, placed[i].1);
                match writes[i].1.outcome(reply) {
                    Ok(written) => done[i] = Some(written),
                    Err(e) => *failure = Some(e),
                }
            }
            if let Some(reply) = list.next() {
                if let Err(e) = ok(reply) {
                    *failure = Some(e);
                }
            }
        }
        if let Some(key) = overtaken {
            return Err(self.aborted(format!(
                "a write of key {} went ahead of an earlier one that waited",
                cads_protocol::printable_key(&key)
            )));
        }
        Ok(retry)
    }

    /// LAPPEND: the new length, or `None` if the key has no value.
    pub fn append(&mut self, key: &[u8], bytes: &[u8]) -> Result<Option<usize>> {
        let cmd = Command::LAppend {
            sid: self.id,
            key,
            delta: bytes,
        };
        let reply = self.keyed(key, &cmd)?;
        let len = optional_int(reply).map(|n| n.map(|n| n as usize));
        self.leased(key, len)
    }

    /// LPREPEND: the new length, or `None` if the key has no value.
    pub fn prepend(&mut self, key: &[u8], bytes: &[u8]) -> Result<Option<usize>> {
        let cmd = Command::LPrepend {
            sid: self.id,
            key,
            delta: bytes,
        };
        let reply = self.keyed(key, &cmd)?;
        let len = optional_int(reply).map(|n| n.map(|n| n as usize));
        self.leased(key, len)
    }

    /// LINCR / LDECR (negative `delta`): the new value, or `None` if the key has no value.
    pub fn incr(&mut self, key: &[u8], delta: i64) -> Result<Option<i64>> {
        let cmd = Command::LIncr {
            sid: self.id,
            key,
            delta,
        };
        let reply = self.keyed(key, &cmd)?;
        let n = optional_int(reply);
        self.leased(key, n)
    }

    /// LUNPIN: the key's value stays but may be evicted after commit. Returns whether it had one.
    pub fn unpin(&mut self, key: &[u8]) -> Result<bool> {
        let reply = self.keyed(key, &Command::LUnpin { sid: self.id, key })?;
        let had = int(reply).map(|n| n == 1);
        self.leased(key, had)
    }

    /// LMARK / LUNMARK: stages a marker change for commit (the session must hold a lease on it).
    pub fn mark(&mut self, key: &[u8], op: MarkOp) -> Result<()> {
        if op == MarkOp::Keep {
            return Ok(());
        }
        let reply = self.keyed(
            key,
            &Command::LMark {
                sid: self.id,
                key,
                op,
            },
        )?;
        let result = ok(reply);
        self.map(result)
    }

    // --- IQ leases ---

    /// IQGET: a hit, or a miss with the I lease (RETRY is backed off here).
    pub fn iq_get(&mut self, key: &[u8]) -> Result<IqRead> {
        match self.keyed(key, &Command::IqGet { sid: self.id, key })? {
            Reply::Bulk(b) => Ok(IqRead::Hit(b.into_owned())),
            Reply::Int(marker) => {
                self.hold(key);
                Ok(IqRead::Miss {
                    marker: marker == 1,
                })
            }
            other => {
                let e = match other {
                    Reply::Error(e) => error_from(e),
                    other => unexpected(&other),
                };
                self.map(Err(e))
            }
        }
    }

    /// IQSET: fills a miss under the I lease and releases it. Returns false when the lease was
    /// voided by a writer (or expired): the value, possibly stale, was not stored.
    pub fn iq_set(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let cmi = self.cmi_of(key);
        let reply = self.call(
            cmi,
            &Command::IqSet {
                sid: self.id,
                key,
                value,
            },
        );
        self.release(key);
        let stored = int(reply?).map(|n| n == 1);
        if let Ok(false) = stored {
            // The lease was voided: the CMI may keep a tombstone for this session.
            if self.held[cmi].is_empty() {
                let _ = self.call(cmi, &Command::LAbort(self.id));
                self.touched[cmi] = false;
            }
        }
        self.map(stored)
    }

    /// ISET (Gemini, 004 Algorithms 1 and 3): deletes the key's value and takes its I lease, to
    /// be filled with [`iq_set`](Self::iq_set) or released with [`idelete`](Self::idelete).
    /// Returns the key's marker.
    pub fn iset(&mut self, key: &[u8]) -> Result<bool> {
        let reply = self.keyed(key, &Command::ISet { sid: self.id, key })?;
        let marker = int(reply).map(|m| m == 1);
        self.leased(key, marker)
    }

    /// IDELETE: releases the I lease on `key` without filling it. Returns whether it was held.
    pub fn idelete(&mut self, key: &[u8]) -> Result<bool> {
        let cmi = self.cmi_of(key);
        let reply = self.call(cmi, &Command::IDelete { sid: self.id, key });
        self.release(key);
        let released = int(reply?).map(|n| n == 1);
        self.map(released)
    }

    /// QAREG: the Q lease. Returns the key's marker.
    pub fn qareg(&mut self, key: &[u8]) -> Result<bool> {
        let reply = self.keyed(key, &Command::QaReg { sid: self.id, key })?;
        let marker = int(reply).map(|m| m == 1);
        self.leased(key, marker)
    }

    /// QAREAD: the Q lease and the value (write-through). Returns (value, marker).
    pub fn qaread(&mut self, key: &[u8]) -> Result<(Option<Vec<u8>>, bool)> {
        let reply = self.keyed(key, &Command::QaRead { sid: self.id, key })?;
        let parsed = match reply {
            Reply::Array(mut items) if items.len() == 2 => {
                let marker = int(items.pop().expect("two items"));
                let value = bulk(items.pop().expect("two items"));
                value.and_then(|v| marker.map(|m| (v, m == 1)))
            }
            other => Err(unexpected(&other)),
        };
        self.leased(key, parsed)
    }

    /// SAR: stores the value, applies the marker change, releases the Q lease.
    pub fn sar(&mut self, key: &[u8], value: &[u8], mark: MarkOp) -> Result<()> {
        let cmd = Command::Sar {
            sid: self.id,
            key,
            value,
            mark,
        };
        let reply = self.keyed(key, &cmd)?;
        let result = ok(reply);
        if result.is_ok() {
            self.release(key);
        }
        self.map(result)
    }

    /// DAR: deletes the key, applies the marker change, releases the Q lease.
    pub fn dar(&mut self, key: &[u8], mark: MarkOp) -> Result<()> {
        let reply = self.keyed(
            key,
            &Command::Dar {
                sid: self.id,
                key,
                mark,
            },
        )?;
        let result = ok(reply);
        if result.is_ok() {
            self.release(key);
        }
        self.map(result)
    }

    // --- the end ---

    /// LVALIDATE on every CMI the session holds leases on, in parallel: afterwards its shared
    /// leases are golden. Any ABORT aborts the session everywhere.
    pub fn validate(&mut self) -> Result<()> {
        let cmis = self.cmis_with_leases();
        let commands = cmis
            .iter()
            .map(|&c| (c, Command::LValidate(self.id)))
            .collect();
        let replies = self.each_or_abort(commands)?;
        if let Some((_, Reply::Error(e))) = replies.into_iter().find(|(_, r)| r.is_error()) {
            let e = error_from(e);
            self.abort();
            return Err(e);
        }
        self.validated = true;
        Ok(())
    }

    /// LCOMMIT everywhere. A session that spans CMIs is validated on all of them first, so that it
    /// commits on all or on none (000 §5.1.3); what can still fail after validation is a lease
    /// expiring, reported as `PartialCommit`. A caller that writes a data store between its
    /// leases and this commit calls [`validate`](Self::validate) before that write: a wound keeps
    /// the cached values of a session that has not validated (docs/PROTOCOL.md, "Wounded").
    pub fn commit(self) -> Result<()> {
        self.commit_first(&[])
    }

    /// [`commit`](Self::commit), on the CMIs in `first` one round trip before the others, which
    /// commit only if all of `first` did. TARDIS's Contextual leases use it so that a key's
    /// marker is set before the buffered write it announces becomes visible.
    pub fn commit_first(mut self, first: &[usize]) -> Result<()> {
        let cmis = self.cmis_with_leases();
        if cmis.len() > 1 && !self.validated {
            self.validate()?;
        }
        let (early, late): (Vec<usize>, Vec<usize>) =
            cmis.into_iter().partition(|c| first.contains(c));
        let (mut committed, mut failed) = (Vec::new(), Vec::new());
        for round in [early, late] {
            if round.is_empty() || !failed.is_empty() {
                continue;
            }
            let commands = round
                .iter()
                .map(|&c| (c, Command::LCommit(self.id)))
                .collect();
            let replies = self.call_each(commands).inspect_err(|_| self.abort())?;
            for (cmi, reply) in replies {
                if matches!(reply, Reply::Status(_)) {
                    committed.push(cmi);
                    self.held[cmi].clear();
                    self.touched[cmi] = false;
                } else {
                    failed.push(cmi);
                }
            }
        }
        let landed = !committed.is_empty();
        self.ended(
            committed,
            failed,
            landed,
            "a CMI refused the commit: its leases ran out or a writer wounded it",
        )
    }

    /// Last writes and LCOMMIT in one round trip: each CMI gets its writes in the order given,
    /// then LCOMMIT, all CMIs in parallel, without validating first. For a caller that needs no
    /// all-or-none, across CMIs or on one (a write a CMI refuses does not stop its commit of the
    /// others): a write-back applier deleting what it applied, whose copies left behind the next
    /// pass finds applied and deletes. A CMI counts as committed when it took every write given
    /// to it and then its commit; a write answered RETRY (another session holds its key) is not
    /// sent again. `Aborted` means no CMI took its commit, so nothing landed; `PartialCommit`
    /// that some did, and names among `failed` every CMI that refused its commit or one of its
    /// writes (so `committed` may be empty). A CMI that cannot be reached is that error, whatever
    /// the others did.
    pub fn write_and_commit(mut self, writes: &[(usize, Write)]) -> Result<()> {
        let placed: Vec<(usize, &[u8])> = writes.iter().map(|(c, w)| (*c, w.key())).collect();
        let indexes: Vec<usize> = (0..writes.len()).collect();
        let groups = self.grouped(&indexes, &placed, true);
        let sid = self.id;
        let commands = groups
            .iter()
            .map(|(cmi, idx)| {
                let mut list: Vec<Command<'_>> =
                    idx.iter().map(|&i| writes[i].1.command(sid)).collect();
                list.push(Command::LCommit(sid));
                (*cmi, list)
            })
            .collect();
        let replies = self.pipeline_or_abort(commands)?;
        let (mut committed, mut failed) = (Vec::new(), Vec::new());
        let mut landed = false;
        for ((cmi, mut list), (_, idx)) in replies.into_iter().zip(&groups) {
            let commit = list.pop().expect("a reply per command");
            let took_commit = matches!(commit, Reply::Status(_));
            if took_commit {
                landed = true;
                // Nothing is left to abort there.
                self.held[cmi].clear();
                self.touched[cmi] = false;
            }
            let took_writes = list
                .into_iter()
                .zip(idx)
                .all(|(reply, &i)| writes[i].1.outcome(reply).is_ok());
            if took_commit && took_writes {
                committed.push(cmi);
            } else {
                failed.push(cmi);
            }
        }
        self.ended(
            committed,
            failed,
            landed,
            "no CMI took the session's commit: its leases ran out or a writer wounded it",
        )
    }

    /// The end of a commit that `failed` CMIs refused (or `committed` all took): `Aborted` with
    /// `reason` unless some CMI's commit `landed`, `PartialCommit` if one did.
    fn ended(
        &mut self,
        committed: Vec<usize>,
        failed: Vec<usize>,
        landed: bool,
        reason: &str,
    ) -> Result<()> {
        if failed.is_empty() {
            self.finish();
            return Ok(());
        }
        self.abort();
        if !landed {
            Err(ClientError::Aborted {
                reason: reason.into(),
            })
        } else {
            Err(ClientError::PartialCommit { committed, failed })
        }
    }

    /// Ends a session that staged no change: LCOMMIT on every CMI at once, without validating
    /// first (there is nothing to commit on all or none). An ABORT from any CMI means a writer
    /// voided one of the session's shared leases, so its reads may not fit together: the result is
    /// `Aborted`, and the session should run again.
    pub fn commit_read_only(mut self) -> Result<()> {
        let cmis = self.cmis_with_leases();
        let commands = cmis
            .iter()
            .map(|&c| (c, Command::LCommit(self.id)))
            .collect();
        let replies = self.call_each(commands);
        let all_ok = matches!(&replies, Ok(r) if r.iter().all(|(_, reply)| matches!(reply, Reply::Status(_))));
        for cmi in cmis {
            self.held[cmi].clear();
            self.touched[cmi] = false;
        }
        match replies {
            Ok(_) if all_ok => {
                self.finish();
                Ok(())
            }
            Ok(_) => {
                self.abort();
                Err(ClientError::Aborted {
                    reason: "a writer voided one of its reads".into(),
                })
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    /// LABORT on every CMI that may know the session. Best effort: a CMI that cannot be reached
    /// drops the session when its leases expire.
    pub fn abort(&mut self) {
        if self.finished {
            return;
        }
        let cmis: Vec<usize> = (0..self.touched.len())
            .filter(|&c| self.touched[c])
            .collect();
        let commands = cmis
            .iter()
            .map(|&c| (c, Command::LAbort(self.id)))
            .collect();
        let _ = self.call_each(commands);
        self.finish();
    }

    fn finish(&mut self) {
        self.finished = true;
        for held in &mut self.held {
            held.clear();
        }
        for (cmi, link) in self.links.iter_mut().enumerate() {
            if let Some(conn) = link.take() {
                self.client.pool(cmi).put(conn);
            }
        }
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.abort();
    }
}
