//! Recovery workers (004 Algorithm 3): the keys of a fragment's dirty list repaired on its
//! recovering primary, after which the fragment can return to normal mode.
//!
//! Each dirty key is deleted on the primary under an I lease (`ISET`): a client filling it at the
//! same time holds the I lease (the worker's `ISET` is told RETRY and tries again at the next
//! pass) or has it voided by a writer's Q lease, as for any fill. Then either
//!
//! - **Gemini-I** ([`Repair::Invalidate`]) releases the lease (`IDELETE`): the next read misses
//!   and fills from the data store; or
//! - **Gemini-O** ([`Repair::Overwrite`]) copies the secondary's value under the lease (`IQSET`),
//!   or releases it when the secondary has none. A writer in recovery mode deletes the key on the
//!   secondary too, so the secondary holds nothing older than the latest write once that write
//!   is done, and the writer's Q lease on the primary, taken before its data-store write, voids
//!   the worker's I lease meanwhile: see ARCHITECTURE.md, "Gemini".
//!
//! The coordinator runs the workers itself, a bounded number of keys per step ([`RepairJob`]),
//! so no Redlease is needed to keep two workers off one list. Keys go in pipelined batches: three
//! or four round trips per batch.

use cads_client::{Client, ClientError};
use cads_protocol::{Command, Reply};

use crate::configuration::InstanceId;
use crate::dirty_list::{self, ListError};

/// What happens to a returning instance's fragments (004 §5's variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// Gemini-I: recovery mode, and workers delete the dirty keys.
    Invalidate,
    /// Gemini-O: recovery mode, and workers overwrite the dirty keys with the secondary's values.
    Overwrite,
    /// VolatileCache: every fragment of the instance is discarded, as if it came back empty.
    Discard,
    /// StaleCache, a baseline that is not consistent: the fragments return to normal with all
    /// they held, nothing repaired, so values overwritten while the instance was away are served
    /// again. It exists to show what the others prevent.
    Keep,
}

impl Repair {
    /// The name 004 §5 gives the variant.
    pub fn name(self) -> &'static str {
        match self {
            Repair::Invalidate => "gemini-i",
            Repair::Overwrite => "gemini-o",
            Repair::Discard => "volatile",
            Repair::Keep => "stale",
        }
    }

    /// Whether this variant repairs from dirty lists (Gemini-I and Gemini-O); the baselines keep
    /// none.
    pub fn uses_dirty_lists(self) -> bool {
        matches!(self, Repair::Invalidate | Repair::Overwrite)
    }
}

/// How a pass over a fragment's dirty list went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every key is repaired: the fragment may return to normal mode.
    Done { repaired: usize },
    /// Some keys were leased by clients: the next pass tries them again.
    Partly { repaired: usize, left: usize },
    /// The list is lost or damaged: the primary cannot be trusted with the fragment.
    ListLost,
}

/// Keys per pipelined batch.
const BATCH: usize = 512;

/// A worker's progress through one fragment's dirty list, kept between passes so that a long
/// list is repaired a bounded number of keys at a time (the coordinator's probes must not wait
/// for it) and a pass does not start over.
#[derive(Debug)]
pub struct RepairJob {
    fragment: u32,
    primary: InstanceId,
    secondary: InstanceId,
    /// The keys of this round, and how far the round got.
    keys: Vec<Vec<u8>>,
    next: usize,
    /// Keys a client held this round, for the next one.
    busy: Vec<Vec<u8>>,
    repaired: usize,
}

impl RepairJob {
    /// Reads `fragment`'s dirty list from `secondary`; None when it is lost or damaged.
    pub fn start(
        client: &Client,
        fragment: u32,
        primary: InstanceId,
        secondary: InstanceId,
    ) -> Result<Option<RepairJob>, ClientError> {
        let list_key = dirty_list::key(fragment);
        let list = match client.get_at(&[(secondary, list_key.as_slice())]).pop() {
            Some(Ok(Some(list))) => list,
            Some(Ok(None)) => return Ok(None),
            Some(Err(e)) => return Err(e),
            None => unreachable!("one place asked"),
        };
        let mut keys = match dirty_list::parse(&list) {
            Ok(keys) => keys,
            Err(ListError::Lost | ListError::Malformed(_)) => return Ok(None),
        };
        keys.sort_unstable();
        keys.dedup();
        Ok(Some(RepairJob {
            fragment,
            primary,
            secondary,
            keys,
            next: 0,
            busy: Vec::new(),
            repaired: 0,
        }))
    }

    /// The fragment, primary and secondary the job is for.
    pub fn target(&self) -> (u32, InstanceId, InstanceId) {
        (self.fragment, self.primary, self.secondary)
    }

    /// Repairs up to `budget` more keys; returns how it stands and how many keys it tried. Done
    /// once every key is repaired; Partly while keys are left (in this round, or held by clients
    /// and tried again in the next).
    pub fn step(
        &mut self,
        client: &Client,
        how: Repair,
        budget: usize,
    ) -> Result<(Pass, usize), ClientError> {
        let start = self.next;
        let end = self.keys.len().min(self.next.saturating_add(budget.max(1)));
        for batch in self.keys[self.next..end].chunks(BATCH) {
            let (done, busy) = repair_batch(client, batch, self.primary, self.secondary, how)?;
            self.repaired += done;
            self.busy.extend(busy);
            self.next += batch.len();
        }
        let tried = end - start;
        if self.next == self.keys.len() {
            if self.busy.is_empty() {
                let repaired = self.repaired;
                return Ok((Pass::Done { repaired }, tried));
            }
            self.keys = std::mem::take(&mut self.busy);
            self.next = 0;
        }
        let left = self.keys.len() - self.next + self.busy.len();
        let repaired = self.repaired;
        Ok((Pass::Partly { repaired, left }, tried))
    }
}

/// One pass over `fragment`'s whole dirty list: each key repaired on `primary` (the values read
/// from `secondary` to overwrite), keys held by clients left for another pass.
pub fn repair_fragment(
    client: &Client,
    fragment: u32,
    primary: InstanceId,
    secondary: InstanceId,
    how: Repair,
) -> Result<Pass, ClientError> {
    match RepairJob::start(client, fragment, primary, secondary)? {
        Some(mut job) => {
            let round = job.keys.len();
            job.step(client, how, round).map(|(pass, _)| pass)
        }
        None => Ok(Pass::ListLost),
    }
}

/// One batch in an IQ session of its own, ended whatever happens (so that no I lease it took
/// outlives it): returns how many keys were repaired and the keys clients held.
fn repair_batch(
    client: &Client,
    keys: &[Vec<u8>],
    primary: InstanceId,
    secondary: InstanceId,
    how: Repair,
) -> Result<(usize, Vec<Vec<u8>>), ClientError> {
    let sid = client.session().id();
    let repaired = repair_in_session(client, sid, keys, primary, secondary, how);
    let _ = client.execute(primary, &Command::LAbort(sid));
    repaired
}

fn repair_in_session(
    client: &Client,
    sid: cads_protocol::SessionId,
    keys: &[Vec<u8>],
    primary: InstanceId,
    secondary: InstanceId,
    how: Repair,
) -> Result<(usize, Vec<Vec<u8>>), ClientError> {
    let isets: Vec<(usize, Command<'_>)> = keys
        .iter()
        .map(|key| (primary, Command::ISet { sid, key }))
        .collect();
    let mut held = Vec::new();
    let mut busy = Vec::new();
    for (key, reply) in keys.iter().zip(client.execute_many(&isets)) {
        match reply? {
            Reply::Int(_) => held.push(key.as_slice()),
            // Leased by a client's fill or write: repaired by it, or at the next pass.
            Reply::Error(e) if e.kind == cads_protocol::ErrorKind::Retry => busy.push(key.clone()),
            Reply::Error(e) => return Err(ClientError::Server(e)),
            other => return Err(ClientError::Protocol(format!("ISET answered {other:?}"))),
        }
    }
    let values: Vec<Option<Vec<u8>>> = match how {
        Repair::Overwrite => {
            let places: Vec<(usize, &[u8])> = held.iter().map(|k| (secondary, *k)).collect();
            client
                .get_at(&places)
                .into_iter()
                .collect::<Result<_, _>>()?
        }
        _ => vec![None; held.len()],
    };
    let releases: Vec<(usize, Command<'_>)> = held
        .iter()
        .zip(&values)
        .map(|(&key, value)| match value {
            Some(value) => (primary, Command::IqSet { sid, key, value }),
            None => (primary, Command::IDelete { sid, key }),
        })
        .collect();
    for reply in client.execute_many(&releases) {
        if let Reply::Error(e) = reply? {
            // The value does not fit: the key stays deleted, which is repaired too.
            if e.kind != cads_protocol::ErrorKind::NotStored {
                return Err(ClientError::Server(e));
            }
        }
    }
    Ok((held.len(), busy))
}
