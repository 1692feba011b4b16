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
//!   secondary too (before its data-store write), so the secondary holds nothing older than the
//!   latest write: see ARCHITECTURE.md, "Gemini".
//!
//! The coordinator runs the workers itself, one fragment at a time, so no Redlease is needed to
//! keep two workers off one list. Keys go in pipelined batches: two or three round trips per
//! batch.

use cads_client::{Client, ClientError};
use cads_protocol::{Command, Reply};

use crate::configuration::InstanceId;
use crate::dirty_list::{self, ListError};

/// What a worker does with a dirty key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// Gemini-I: delete it.
    Invalidate,
    /// Gemini-O: overwrite it with the secondary's value.
    Overwrite,
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

/// Repairs `fragment`'s dirty keys on `primary`, reading the list (and, to overwrite, the
/// values) from `secondary`. An instance that cannot be reached is an error: the pass is tried
/// again, or the coordinator moves the fragment on when it takes the instance for failed.
pub fn repair_fragment(
    client: &Client,
    fragment: u32,
    primary: InstanceId,
    secondary: InstanceId,
    how: Repair,
) -> Result<Pass, ClientError> {
    let list_key = dirty_list::key(fragment);
    let list = match client.get_at(&[(secondary, list_key.as_slice())]).pop() {
        Some(Ok(Some(list))) => list,
        Some(Ok(None)) => return Ok(Pass::ListLost),
        Some(Err(e)) => return Err(e),
        None => unreachable!("one place asked"),
    };
    let mut keys = match dirty_list::parse(&list) {
        Ok(keys) => keys,
        Err(ListError::Lost | ListError::Malformed(_)) => return Ok(Pass::ListLost),
    };
    keys.sort_unstable();
    keys.dedup();
    let (mut repaired, mut left) = (0, 0);
    for batch in keys.chunks(BATCH) {
        let (done, busy) = repair_batch(client, batch, primary, secondary, how)?;
        repaired += done;
        left += busy;
    }
    Ok(match left {
        0 => Pass::Done { repaired },
        _ => Pass::Partly { repaired, left },
    })
}

/// One batch: returns how many keys were repaired and how many were leased.
fn repair_batch(
    client: &Client,
    keys: &[Vec<u8>],
    primary: InstanceId,
    secondary: InstanceId,
    how: Repair,
) -> Result<(usize, usize), ClientError> {
    // One IQ session holds the batch's I leases.
    let sid = client.session().id();
    let isets: Vec<(usize, Command<'_>)> = keys
        .iter()
        .map(|key| (primary, Command::ISet { sid, key }))
        .collect();
    let mut held = Vec::new();
    let mut busy = 0;
    for (key, reply) in keys.iter().zip(client.execute_many(&isets)) {
        match reply? {
            Reply::Int(_) => held.push(key.as_slice()),
            // Leased by a client's fill or write: repaired by it, or at the next pass.
            Reply::Error(e) if e.kind == cads_protocol::ErrorKind::Retry => busy += 1,
            Reply::Error(e) => return Err(ClientError::Server(e)),
            other => return Err(ClientError::Protocol(format!("ISET answered {other:?}"))),
        }
    }
    let values: Vec<Option<Vec<u8>>> = match how {
        Repair::Invalidate => vec![None; held.len()],
        Repair::Overwrite => {
            let places: Vec<(usize, &[u8])> = held.iter().map(|k| (secondary, *k)).collect();
            client
                .get_at(&places)
                .into_iter()
                .collect::<Result<_, _>>()?
        }
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
