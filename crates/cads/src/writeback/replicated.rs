//! Entries kept on R CMIs (000 §3.3.4: buffered writes, mappings and the lists workers read are
//! replicated so that losing a CMI loses no acknowledged write), and the newline-separated lists
//! several of them hold.

use std::collections::{HashMap, HashSet};

use cads_client::{Client, ClientError, Session as CacheSession, Write};

use super::mac::Seal;
use super::{Refusal, Refused};
use crate::error::{Error, Result};
use crate::missed::Missed;
use crate::Cads;

/// The CMIs keeping replicas of `key`, its own first, leaving out CMIs that just failed (a write
/// proceeds on the replicas that remain; when all are down, all are tried).
///
/// A CMI left out is recorded as missed, and a missed CMI that answers again is flushed before
/// anything reads it: it may come back with the entries it had (a persistent CMI restores its
/// log), and its copies are then older than the other replicas' or of buffered writes applied and
/// deleted meanwhile. The newest copy wins over an older one, but an old copy left alone would be
/// applied again and undo later writes in the data store.
pub(crate) fn replicas(cads: &Cads, client: &Client, key: &[u8]) -> Vec<usize> {
    let all = client.replicas(key, cads.config().write_back.replicas.max(1));
    let mut up = Vec::with_capacity(all.len());
    for &cmi in &all {
        if client.is_down(cmi) {
            cads.missed_cmi(cmi, Missed::Replicas);
        } else {
            up.push(cmi);
        }
    }
    if up.iter().any(|&cmi| cads.is_missed(cmi)) {
        cads.flush_missed_cmis();
        // One that could not be flushed stays out, unless nothing else is left.
        let flushed: Vec<usize> = up
            .iter()
            .copied()
            .filter(|&cmi| !cads.is_missed(cmi))
            .collect();
        if !flushed.is_empty() {
            up = flushed;
        }
    }
    if up.is_empty() {
        all
    } else {
        up
    }
}

/// Each of the keys placed on every one of its replicas: `(cmi, key)` pairs, a key's replicas
/// next to one another.
pub(crate) fn placed<'k>(
    cads: &Cads,
    client: &Client,
    keys: &'k [Vec<u8>],
) -> Vec<(usize, &'k [u8])> {
    keys.iter()
        .flat_map(|key| {
            replicas(cads, client, key)
                .into_iter()
                .map(move |cmi| (cmi, key.as_slice()))
        })
        .collect()
}

/// The writes that append `line` to the list `key` on each of its replicas, for one pipeline:
/// an empty pinned list where there is none (`LADD`), then the line (`LAPPEND`). A list may be
/// missing on some replicas only (a CMI that restarted empty): what it held before is kept on the
/// others. Appending thus takes no round trip of its own, and the replies of the `LADD`s say
/// whether the list is new.
pub(crate) fn append_line(cads: &Cads, key: &[u8], line: &[u8]) -> Vec<(usize, Write)> {
    let client = cads.cache().expect("write-back has a cache");
    replicas(cads, client, key)
        .into_iter()
        .flat_map(|cmi| {
            let create = Write::Add {
                key: key.to_vec(),
                value: Vec::new(),
                pin: true,
            };
            let append = Write::Append {
                key: key.to_vec(),
                bytes: line.to_vec(),
            };
            [(cmi, create), (cmi, append)]
        })
        .collect()
}

/// The values of `key` on its reachable replicas (plain GET, no lease; `None` where a replica
/// has none). An error if no replica answers: the caller cannot know what is pending.
pub(crate) fn read_all(cads: &Cads, key: &[u8]) -> Result<Vec<Option<Vec<u8>>>> {
    let keys = [key.to_vec()];
    Ok(read_many(cads, &keys)?.pop().expect("one key"))
}

/// [`read_all`] for several keys, in one round trip to each CMI. A key given twice is read
/// twice, each answer in its own place.
pub(crate) fn read_many(cads: &Cads, keys: &[Vec<u8>]) -> Result<Vec<Vec<Option<Vec<u8>>>>> {
    ask_replicas(cads, keys, Client::get_at)
}

/// Whether each key has a copy on some reachable replica, in one round trip to each CMI and
/// without reading the copies.
pub(crate) fn present_many(cads: &Cads, keys: &[Vec<u8>]) -> Result<Vec<bool>> {
    Ok(ask_replicas(cads, keys, Client::exists_at)?
        .into_iter()
        .map(|copies| copies.contains(&true))
        .collect())
}

/// Asks every replica of every key (`ask` sends one command per place, all in one round trip),
/// and returns per key the answers of the replicas that could be reached; an error if none of
/// a key's could.
fn ask_replicas<T>(
    cads: &Cads,
    keys: &[Vec<u8>],
    ask: impl FnOnce(&Client, &[(usize, &[u8])]) -> Vec<cads_client::Result<T>>,
) -> Result<Vec<Vec<T>>> {
    let client = cads.cache().expect("write-back has a cache");
    let replicas_of: Vec<Vec<usize>> = keys.iter().map(|key| replicas(cads, client, key)).collect();
    let places: Vec<(usize, &[u8])> = replicas_of
        .iter()
        .zip(keys)
        .flat_map(|(cmis, key)| cmis.iter().map(move |&cmi| (cmi, key.as_slice())))
        .collect();
    let owners = replicas_of
        .iter()
        .enumerate()
        .flat_map(|(index, cmis)| std::iter::repeat_n(index, cmis.len()));
    let mut answers: Vec<Vec<T>> = keys.iter().map(|_| Vec::new()).collect();
    for (reply, index) in ask(client, &places).into_iter().zip(owners) {
        match reply {
            Ok(answer) => answers[index].push(answer),
            Err(e) if e.is_unavailable() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(i) = answers.iter().position(Vec::is_empty) {
        return Err(Error::Cache(ClientError::Unavailable {
            cmi: client.route(&keys[i]),
            reason: format!(
                "no replica of {} can be reached",
                String::from_utf8_lossy(&keys[i])
            ),
            refused: false,
        }));
    }
    Ok(answers)
}

/// The non-empty lines of a list value.
pub(crate) fn lines(value: &[u8]) -> Vec<&[u8]> {
    value
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// A list value from lines (each ends with a newline, so that appending a line keeps it a list).
pub(crate) fn join_lines<L: AsRef<[u8]>>(lines: &[L]) -> Vec<u8> {
    let mut value = Vec::new();
    for line in lines {
        value.extend_from_slice(line.as_ref());
        value.push(b'\n');
    }
    value
}

/// A line of the list `key`: `payload` sealed for that list, with its line break.
pub(crate) fn sealed_line(seal: &Seal, key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut line = seal.seal(key, payload);
    line.push(b'\n');
    line
}

/// The payloads of the lines of the list `key` whose seals open, and whether some did not.
pub(crate) fn open_lines<'v>(seal: &Seal, key: &[u8], list: &'v [u8]) -> (Vec<&'v [u8]>, bool) {
    let mut refused = false;
    let payloads = lines(list)
        .into_iter()
        .filter_map(|line| {
            let payload = seal.open(key, line);
            refused |= payload.is_none();
            payload
        })
        .collect();
    (payloads, refused)
}

/// The write that leaves in the list `key` only the lines whose seals open and whose payloads
/// `keep` accepts, noting the lines that do not open in `refused`; `None` if nothing changes. An
/// emptied list is deleted, or kept empty when `keep_empty`.
pub(crate) fn filter_list(
    seal: &Seal,
    key: &[u8],
    list: &[u8],
    keep: impl Fn(&[u8]) -> bool,
    keep_empty: bool,
    refused: &mut Refused,
) -> Option<Write> {
    let all = lines(list);
    let kept: Vec<&[u8]> = all
        .iter()
        .copied()
        .filter(|line| match seal.open(key, line) {
            Some(payload) => keep(payload),
            None => {
                refused.add(key, line, Refusal::Unauthenticated);
                false
            }
        })
        .collect();
    list_write(key, all.len(), &kept, keep_empty)
}

/// The write that leaves the list `key`, of `count` lines, with the lines `kept`; `None` if they
/// are all of them.
fn list_write(key: &[u8], count: usize, kept: &[&[u8]], keep_empty: bool) -> Option<Write> {
    if kept.len() == count {
        return None;
    }
    Some(if kept.is_empty() && !keep_empty {
        Write::Delete { key: key.to_vec() }
    } else {
        Write::Set {
            key: key.to_vec(),
            value: join_lines(kept),
            pin: true,
        }
    })
}

/// Reads the lists at `places` in `session` under exclusive leases (so that no writer's line is
/// lost) and writes back, on each replica, what `rewrite(list key, list)` makes of it (nothing
/// where it returns `None`).
fn rewrite_each(
    session: &mut CacheSession<'_>,
    places: &[(usize, &[u8])],
    mut rewrite: impl FnMut(&[u8], &[u8]) -> Option<Write>,
) -> Result<(), ClientError> {
    let values = session.mget_at(places, true)?;
    let writes: Vec<(usize, Write)> = places
        .iter()
        .zip(&values)
        .filter_map(|(&(cmi, key), value)| rewrite(key, value.as_deref()?).map(|w| (cmi, w)))
        .collect();
    if !writes.is_empty() {
        session.write_at(&writes, false)?;
    }
    Ok(())
}

/// Rewrites the lists at `places` ([`rewrite_each`]) with [`filter_list`]: only the lines whose
/// seals open and that `keep(list key, payload)` accepts stay; an emptied list goes unless
/// `keep_empty(list key)`. Returns the lines refused, to be counted once the session commits.
pub(crate) fn rewrite_lists(
    seal: &Seal,
    session: &mut CacheSession<'_>,
    places: &[(usize, &[u8])],
    keep: impl Fn(&[u8], &[u8]) -> bool,
    keep_empty: impl Fn(&[u8]) -> bool,
) -> Result<Refused, ClientError> {
    let mut refused = Refused::default();
    rewrite_each(session, places, |key, list| {
        let keep_line = |payload: &[u8]| keep(key, payload);
        filter_list(seal, key, list, keep_line, keep_empty(key), &mut refused)
    })?;
    Ok(refused)
}

/// Rewrites the lists at `places` ([`rewrite_each`]) without the lines `removals` names for each,
/// compared byte for byte (sealed lines without their line break), opening none of the others: a
/// compaction knows the sealed lines of what it applied, and checking the MAC of every line a
/// long list keeps would cost one each time. Lines whose seals do not open stay, for the readers
/// that open them to remove. An emptied list goes unless `keep_empty(list key)`.
pub(crate) fn remove_lines(
    session: &mut CacheSession<'_>,
    places: &[(usize, &[u8])],
    removals: &HashMap<Vec<u8>, HashSet<Vec<u8>>>,
    keep_empty: impl Fn(&[u8]) -> bool,
) -> Result<(), ClientError> {
    rewrite_each(session, places, |key, list| {
        let remove = removals.get(key)?;
        let all = lines(list);
        let kept: Vec<&[u8]> = all
            .iter()
            .copied()
            .filter(|line| !remove.contains(*line))
            .collect();
        list_write(key, all.len(), &kept, keep_empty(key))
    })
}

/// Removes the lines whose seals do not open from the list `key` on every replica, in a session
/// of its own, and counts them.
pub(crate) fn purge_list(cads: &Cads, key: &[u8], keep_empty: bool) -> Result<()> {
    let client = cads.cache().expect("write-back has a cache");
    let seal = cads.seal()?;
    let keys = [key.to_vec()];
    let places = placed(cads, client, &keys);
    let mut session = client.session();
    let refused = rewrite_lists(seal, &mut session, &places, |_, _| true, |_| keep_empty)?;
    session.commit()?;
    refused.discarded(cads.write_back_stats());
    Ok(())
}

#[cfg(test)]
mod tests {
    use cads_store::StoreOptions;
    use cads_testkit::{Cmis, ScratchDir};

    use super::*;
    use crate::{Config, Policy};

    /// A key given twice, next to itself, gets its replicas' values in both places (they used to
    /// go to the first, and the second read as unreachable).
    #[test]
    fn a_key_read_twice_gets_its_values_twice() {
        let dir = ScratchDir::new("read_many");
        let cmis = Cmis::start(2, Policy::WriteBack.cmi_mode());
        let cads = Cads::connect(
            dir.sqlite(&StoreOptions::default()),
            cmis.addrs(),
            Policy::WriteBack,
            Config::default(),
        );
        let client = cads.cache().unwrap();
        client.set(b"a", b"1").unwrap();
        let keys = [b"a".to_vec(), b"a".to_vec(), b"b".to_vec()];
        let values = read_many(&cads, &keys).unwrap();
        // `set` wrote a's own CMI, the first of its replicas; b is nowhere.
        let a = vec![Some(b"1".to_vec()), None];
        assert_eq!(values, [a.clone(), a, vec![None, None]]);
    }
}
