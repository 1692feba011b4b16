//! PrInT's log records (002 §3.1): what lets a Dendrite that replaces one that died rebuild the
//! intervals whose results are cached, so that its writes keep changing them.
//!
//! Each CMI holds one log per Dendrite attribute, `cprlog:<collection>:<attribute>:<cmi>`, beside
//! the cached results it records (a result's log is the log of the CMI its key routes to), pinned
//! and with one replica: a CMI that fails loses the results and their records together. A log is
//! a header naming the Dendrite's generation, then records: `+<lsn> <lo>:<hi>\n` when an interval
//! enters PrInT, appended before its result is filled; `-<lsn> <lo>:<hi>\n` when it leaves,
//! appended in batches of `alpha` (a record lost with its Dendrite leaves an interval whose entry
//! is gone, which costs a write a round trip and nothing else). Points are length-prefixed, so a
//! record holds any text. LSNs rise across all of a Dendrite's logs; a Dendrite that takes over
//! starts above the highest it read. A log grown past `compact_bytes`, and to twice what its last
//! compaction left, is compacted: records sorted by LSN, each interval's last record kept if it
//! is an insert, the rest dropped (an insert and a later delete nullify each other). The doubling
//! keeps compaction's cost (reading and rewriting the log) to a constant per record appended when
//! most of the log is live, as with many cached ranges.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use cads_client::Client;

use super::intervals::Interval;
use super::Point;
use crate::error::{Error, Result};

const HEADER: &str = "cprlog1 ";

/// The logs of one Dendrite, one per CMI.
pub(crate) struct PrintLog {
    /// `cprlog:<collection>:<attribute>:`, completed by the CMI's index.
    prefix: String,
    generation: u64,
    alpha: usize,
    compact_bytes: usize,
    next_lsn: AtomicU64,
    logs: Vec<CmiLog>,
    counts: Mutex<LogCounts>,
}

/// One CMI's log.
#[derive(Default)]
struct CmiLog {
    /// Appends hold it shared, and run side by side; compaction holds it exclusively, since an
    /// append between its read and its rewrite would be lost.
    gate: RwLock<()>,
    state: Mutex<CmiState>,
}

/// One CMI's log as this Dendrite knows it.
#[derive(Default)]
struct CmiState {
    /// Whether the log holds this Dendrite's header (written, or read at takeover).
    started: bool,
    /// Its length in bytes.
    bytes: usize,
    /// Its length when it was last compacted (or started).
    compacted: usize,
    /// Whether it must be compacted at the next append: re-created without its header (and
    /// unpinned) after its CMI lost its content, and not yet rewritten.
    must_compact: bool,
    /// Delete records not appended yet.
    deletes: String,
    deletes_pending: usize,
}

/// What the logs cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCounts {
    /// Bytes appended to the logs (headers and records).
    pub appended: u64,
    /// Compactions, and the logs' bytes before and after them.
    pub compactions: u64,
    pub before_compaction: u64,
    pub after_compaction: u64,
}

/// What a Dendrite that takes over read from the logs.
pub(crate) struct Recovered {
    pub generation: u64,
    /// The intervals in PrInT when the logs were last written.
    pub intervals: Vec<Interval<Point>>,
    /// Above the highest LSN read.
    next_lsn: u64,
    /// The logs of that generation: (CMI, bytes, whether it has its header).
    logs: Vec<(usize, usize, bool)>,
}

impl PrintLog {
    /// The logs of the attribute `attribute` of `collection`, on `cmis` CMIs.
    /// `recovered` is what [`recover`] read, if this Dendrite takes over: it goes on in those
    /// logs, above their highest LSN.
    pub(crate) fn new(
        collection: &str,
        attribute: &str,
        cmis: usize,
        generation: u64,
        recovered: Option<&Recovered>,
        alpha: usize,
        compact_bytes: usize,
    ) -> PrintLog {
        let logs: Vec<CmiLog> = (0..cmis).map(|_| CmiLog::default()).collect();
        for &(cmi, bytes, header) in recovered.map_or(&[][..], |r| r.logs.as_slice()) {
            let Some(log) = logs.get(cmi) else {
                continue;
            };
            let mut log = log.state.lock().expect("not poisoned");
            log.started = true;
            log.bytes = bytes;
            // Compacted once it passes the bound, whatever it held when adopted.
            log.compacted = 0;
            log.must_compact = !header;
        }
        PrintLog {
            prefix: log_prefix(collection, attribute),
            generation,
            alpha: alpha.max(1),
            compact_bytes,
            next_lsn: AtomicU64::new(recovered.map_or(0, |r| r.next_lsn)),
            logs,
            counts: Mutex::default(),
        }
    }

    pub(crate) fn counts(&self) -> LogCounts {
        *self.counts.lock().expect("not poisoned")
    }

    /// The logs' bytes now (as this Dendrite wrote them).
    pub(crate) fn bytes(&self) -> u64 {
        self.logs
            .iter()
            .map(|l| l.state.lock().expect("not poisoned").bytes as u64)
            .sum()
    }

    /// Records that `interval`, whose result is cached under `key`, enters PrInT: appended before
    /// the result is filled, so a Dendrite that takes over finds every interval whose result may
    /// be cached. A delete of the interval waiting in this CMI's batch goes first.
    pub(crate) fn insert(
        &self,
        client: &Client,
        key: &[u8],
        interval: &Interval<Point>,
    ) -> Result<()> {
        let cmi = client.route(key);
        let mut state = self.log(cmi)?.state.lock().expect("not poisoned");
        let mut records = std::mem::take(&mut state.deletes);
        state.deletes_pending = 0;
        records.push_str(&self.record('+', interval));
        drop(state);
        self.append(client, cmi, records)
    }

    /// The record of `interval` leaving PrInT, its LSN drawn now: when it leaves, before any
    /// miss can cache it again.
    pub(crate) fn delete_record(&self, interval: &Interval<Point>) -> String {
        self.record('-', interval)
    }

    /// Queues a [`delete_record`](Self::delete_record) of an interval cached under `key`;
    /// appended once `alpha` of them wait for this CMI.
    pub(crate) fn delete(&self, client: &Client, key: &[u8], record: String) -> Result<()> {
        let cmi = client.route(key);
        let mut state = self.log(cmi)?.state.lock().expect("not poisoned");
        state.deletes.push_str(&record);
        state.deletes_pending += 1;
        if state.deletes_pending < self.alpha {
            return Ok(());
        }
        let records = std::mem::take(&mut state.deletes);
        state.deletes_pending = 0;
        drop(state);
        self.append(client, cmi, records)
    }

    fn record(&self, action: char, interval: &Interval<Point>) -> String {
        let lsn = self.next_lsn.fetch_add(1, Ordering::Relaxed);
        let mut record = format!("{action}{lsn} ");
        interval.lo.encode(&mut record);
        record.push(':');
        interval.hi.encode(&mut record);
        record.push('\n');
        record
    }

    /// Appends `records` to CMI `cmi`'s log (starting it with the header, pinned, if this
    /// Dendrite has not yet), compacting it when it has grown past the bound.
    fn append(&self, client: &Client, cmi: usize, records: String) -> Result<()> {
        let key = self.key(cmi);
        let log = self.log(cmi)?;
        let shared = log.gate.read().expect("not poisoned");
        let mut state = log.state.lock().expect("not poisoned");
        self.counts.lock().expect("not poisoned").appended += records.len() as u64;
        if !state.started {
            // Under the state's lock, so that no other record goes before the header.
            let value = format!("{HEADER}{:x}\n{records}", self.generation);
            pin_set(client, cmi, &key, value.as_bytes())?;
            state.started = true;
            state.bytes = value.len();
            state.compacted = value.len();
            return Ok(());
        }
        drop(state);
        let appended = client
            .append_at(&[(cmi, key.as_slice(), records.as_bytes())])
            .pop()
            .expect("one append, one answer")?;
        let mut state = log.state.lock().expect("not poisoned");
        state.bytes = state.bytes.max(appended);
        // A log that held nothing before this append was gone (its CMI lost its content, and
        // the results with it): the append made a new one, unpinned and without its header,
        // which the compaction below rewrites as it should be.
        state.must_compact |= appended == records.len();
        let compact =
            state.must_compact || state.bytes > self.compact_bytes.max(2 * state.compacted);
        drop(state);
        drop(shared);
        if compact {
            let _alone = log.gate.write().expect("not poisoned");
            let mut state = log.state.lock().expect("not poisoned");
            self.compact(client, cmi, &mut state)?;
        }
        Ok(())
    }

    /// Rewrites CMI `cmi`'s log, pinned, as its header and the inserts of the intervals its
    /// records leave in PrInT. Appends wait meanwhile.
    fn compact(&self, client: &Client, cmi: usize, state: &mut CmiState) -> Result<()> {
        let key = self.key(cmi);
        let Some(bytes) = client.get_from(cmi, &key)? else {
            // Gone with its CMI's content: the next record starts it again.
            state.started = false;
            state.bytes = 0;
            state.compacted = 0;
            return Ok(());
        };
        let records = parse(&bytes)
            .map(|p| p.records)
            .or_else(|| parse_records(std::str::from_utf8(&bytes).ok()?))
            .ok_or_else(|| corrupt(&key))?;
        let mut value = format!("{HEADER}{:x}\n", self.generation);
        for (lsn, interval) in live(records) {
            value.push_str(&format!("+{lsn} "));
            interval.lo.encode(&mut value);
            value.push(':');
            interval.hi.encode(&mut value);
            value.push('\n');
        }
        pin_set(client, cmi, &key, value.as_bytes())?;
        let mut counts = self.counts.lock().expect("not poisoned");
        counts.compactions += 1;
        counts.before_compaction += bytes.len() as u64;
        counts.after_compaction += value.len() as u64;
        state.started = true;
        state.bytes = value.len();
        state.compacted = value.len();
        state.must_compact = false;
        Ok(())
    }

    /// CMI `cmi`'s log: the Dendrite was made for a framework of so many CMIs.
    fn log(&self, cmi: usize) -> Result<&CmiLog> {
        self.logs.get(cmi).ok_or_else(|| {
            Error::App(format!(
                "CPR: the Dendrite was made for {} CMIs and is used with more",
                self.logs.len()
            ))
        })
    }

    fn key(&self, cmi: usize) -> Vec<u8> {
        format!("{}{cmi}", self.prefix).into_bytes()
    }
}

fn log_prefix(collection: &str, attribute: &str) -> String {
    format!(
        "cprlog:{}.{collection}:{}.{attribute}:",
        collection.len(),
        attribute.len()
    )
}

fn pin_set(client: &Client, cmi: usize, key: &[u8], value: &[u8]) -> Result<()> {
    Ok(client.pin_set_at(cmi, key, value)?)
}

fn corrupt(key: &[u8]) -> Error {
    Error::App(format!(
        "CPR: the log {} does not parse",
        String::from_utf8_lossy(key)
    ))
}

/// A log's content.
struct Parsed {
    generation: u64,
    records: Vec<Record>,
}

fn parse(bytes: &[u8]) -> Option<Parsed> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(HEADER)?;
    let (generation, rest) = rest.split_once('\n')?;
    Some(Parsed {
        generation: u64::from_str_radix(generation, 16).ok()?,
        records: parse_records(rest)?,
    })
}

/// The records of a log, after its header.
fn parse_records(mut rest: &str) -> Option<Vec<Record>> {
    let mut records = Vec::new();
    while !rest.is_empty() {
        let insert = match rest.as_bytes()[0] {
            b'+' => true,
            b'-' => false,
            _ => return None,
        };
        let (lsn, after) = rest[1..].split_once(' ')?;
        let lsn: u64 = lsn.parse().ok()?;
        let (lo, after) = Point::decode(after)?;
        let after = after.strip_prefix(':')?;
        let (hi, after) = Point::decode(after)?;
        rest = after.strip_prefix('\n')?;
        records.push((lsn, insert, Interval::new(lo, hi)?));
    }
    Some(records)
}

/// The intervals records leave in PrInT, each with its insert's LSN: in LSN order, an
/// interval's last record decides.
fn live(mut records: Vec<Record>) -> Vec<(u64, Interval<Point>)> {
    records.sort_by_key(|(lsn, ..)| *lsn);
    let mut last: BTreeMap<(Point, Point), (u64, bool)> = BTreeMap::new();
    for (lsn, insert, interval) in records {
        last.insert((interval.lo, interval.hi), (lsn, insert));
    }
    last.into_iter()
        .filter(|(_, (_, insert))| *insert)
        .map(|((lo, hi), (lsn, _))| (lsn, Interval::new(lo, hi).expect("a parsed interval")))
        .collect()
}

/// Reads the logs of `collection`'s `attribute` on every CMI. The generation is the one whose
/// records reach the highest LSN (logs of another generation, left by an older Dendrite, are
/// ignored, and overwritten when this Dendrite first writes there). A log without its header
/// was begun again by an append after its CMI lost its content and not yet rewritten: its
/// records are the latest Dendrite's. None when no log exists.
pub(crate) fn recover(
    client: &Client,
    collection: &str,
    attribute: &str,
) -> Result<Option<Recovered>> {
    let logs = read_all(client, &log_prefix(collection, attribute))?;
    let top = |records: &[Record]| records.iter().map(|r| r.0).max();
    let newest = logs
        .iter()
        .filter_map(|(_, _, g, r)| Some((top(r).unwrap_or(0), (*g)?)))
        .max();
    let Some((_, generation)) = newest else {
        return Ok(None);
    };
    let mut records = Vec::new();
    let mut adopted = Vec::new();
    for (cmi, bytes, g, found) in logs {
        if g.is_none_or(|g| g == generation) {
            records.extend(found);
            adopted.push((cmi, bytes, g.is_some()));
        }
    }
    let top = top(&records).unwrap_or(0);
    let intervals = live(records).into_iter().map(|(_, i)| i).collect();
    Ok(Some(Recovered {
        generation,
        intervals,
        next_lsn: top + 1,
        logs: adopted,
    }))
}

/// Deletes the logs of `collection`'s `attribute` on every CMI: a Dendrite that does not take
/// over them (β = 0%) makes sure no later one takes over results its writes did not keep right.
pub(crate) fn discard(client: &Client, collection: &str, attribute: &str) -> Result<()> {
    let prefix = log_prefix(collection, attribute);
    for cmi in 0..client.cmis() {
        client.delete_from(cmi, format!("{prefix}{cmi}").as_bytes())?;
    }
    Ok(())
}

/// A log record: LSN, insert (or delete), interval.
type Record = (u64, bool, Interval<Point>);

/// A CMI's log as read: CMI, bytes, generation (None without a header), records.
type Found = (usize, usize, Option<u64>, Vec<Record>);

/// Every CMI's log of an attribute.
fn read_all(client: &Client, prefix: &str) -> Result<Vec<Found>> {
    let keys: Vec<Vec<u8>> = (0..client.cmis())
        .map(|cmi| format!("{prefix}{cmi}").into_bytes())
        .collect();
    let places: Vec<(usize, &[u8])> = keys
        .iter()
        .enumerate()
        .map(|(c, k)| (c, k.as_slice()))
        .collect();
    let mut logs = Vec::new();
    for ((cmi, key), value) in places.iter().zip(client.get_at(&places)) {
        let Some(bytes) = value? else {
            continue;
        };
        let (generation, records) = match parse(&bytes) {
            Some(p) => (Some(p.generation), p.records),
            None => (
                None,
                std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(parse_records)
                    .ok_or_else(|| corrupt(key))?,
            ),
        };
        logs.push((*cmi, bytes.len(), generation, records));
    }
    Ok(logs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(lo: i64, hi: i64) -> Interval<Point> {
        Interval::new(Point::Int(lo), Point::Int(hi)).unwrap()
    }

    #[test]
    fn records_parse_back_and_fold_by_lsn() {
        let texts = [
            Point::Text("a:b\nc".into()),
            Point::Text(String::new()),
            Point::Int(-5),
        ];
        let mut log = format!("{HEADER}ff\n");
        let mut lsn = 0;
        for lo in &texts {
            for (action, hi) in [('+', Point::Text("zz".into())), ('-', Point::Int(9))] {
                let Some(i) = Interval::new(lo.clone(), hi) else {
                    continue;
                };
                log.push_str(&format!("{action}{lsn} "));
                i.lo.encode(&mut log);
                log.push(':');
                i.hi.encode(&mut log);
                log.push('\n');
                lsn += 1;
            }
        }
        let parsed = parse(log.as_bytes()).unwrap();
        assert_eq!(parsed.generation, 0xff);
        assert_eq!(parsed.records.len(), lsn as usize);
        assert!(parse(b"cprlog1 ff\n+1 i1").is_none(), "a torn record");
        // Out of LSN order, as batched deletes may land: the last record of each interval wins.
        let folded = live(vec![
            (7, false, interval(1, 2)),
            (3, true, interval(1, 2)),
            (9, true, interval(5, 6)),
            (4, true, interval(3, 4)),
            (5, false, interval(3, 4)),
            (6, true, interval(3, 4)),
        ]);
        assert_eq!(folded, vec![(6, interval(3, 4)), (9, interval(5, 6))]);
    }
}
