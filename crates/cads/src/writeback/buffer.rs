//! The value of a buffered write (Design 1, 000 Definition 3.2.1): the operations pending on one
//! document, in the order they were made, one JSON object per line so that a write can append to
//! it without reading it. A header line `{"v": version, "n": writes, "l": lines}` comes first:
//! the version tells the newest of several replicas, `n` counts the operations writes buffered,
//! which compaction and conversion merge, and `l` the operation lines written with the header
//! (lines appended after those count one write each). Read-modify-write rewrites it with every
//! write; append buffering writes it once, when its write finds no buffered write (`LADD`).
//!
//! Every line is sealed ([`Seal`]) for the buffered write's cache key: a line whose seal does not
//! open, or that does not read as an operation, is refused and left out (see [`Buffered::refused`]).

use cads_store::{parse_json, Change, Changes, DocOp, Document, Op, StoreError};

use super::mac::Seal;
use super::Refusal;

/// Encodes operations as lines, each sealed for the buffered write `key`.
pub fn encode(seal: &Seal, key: &[u8], ops: &[DocOp]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        push_line(&mut out, seal, key, &op.to_json());
    }
    out
}

fn push_line(out: &mut Vec<u8>, seal: &Seal, key: &[u8], value: &serde_json::Value) {
    let payload = serde_json::to_vec(value).expect("JSON serializes");
    out.extend(seal.seal(key, &payload));
    out.push(b'\n');
}

/// A buffered write read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffered {
    /// 0 when it has no header line.
    pub version: u64,
    /// Operations writes put in it (before compaction and conversion).
    pub writes: u64,
    pub ops: Vec<DocOp>,
    /// Lines left out, and why: written by something other than an AppNode of this deployment
    /// (their seals do not open), or unreadable.
    pub refused: Vec<(Vec<u8>, Refusal)>,
}

/// Encodes operations after a header line, each line sealed for the buffered write `key`.
pub fn encode_versioned(
    seal: &Seal,
    key: &[u8],
    version: u64,
    writes: u64,
    ops: &[DocOp],
) -> Vec<u8> {
    let mut out = Vec::new();
    let header = serde_json::json!({ "v": version, "n": writes, "l": ops.len() });
    push_line(&mut out, seal, key, &header);
    out.extend(encode(seal, key, ops));
    out
}

/// Decodes the buffered write `key` (appended lines after the header count one write each),
/// leaving out the lines it refuses.
pub fn decode_versioned(seal: &Seal, key: &[u8], bytes: &[u8]) -> Buffered {
    let mut buffered = Buffered {
        version: 0,
        writes: 0,
        ops: Vec::new(),
        refused: Vec::new(),
    };
    // Operation lines the header's count already covers.
    let mut covered = 0;
    for line in bytes.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
        let Some(payload) = seal.open(key, line) else {
            buffered
                .refused
                .push((line.to_vec(), Refusal::Unauthenticated));
            continue;
        };
        let value = match parse_json(payload) {
            Ok(value) => value,
            Err(e) => {
                buffered
                    .refused
                    .push((line.to_vec(), Refusal::Malformed(e.to_string())));
                continue;
            }
        };
        match (value.get("v"), value.get("n")) {
            (Some(v), Some(n)) => {
                buffered.version = v.as_u64().unwrap_or(0);
                buffered.writes = n.as_u64().unwrap_or(0);
                covered = value.get("l").and_then(|l| l.as_u64()).unwrap_or(0);
            }
            _ => match DocOp::from_json(&value) {
                Ok(op) => {
                    buffered.ops.push(op);
                    if covered > 0 {
                        covered -= 1;
                    } else {
                        buffered.writes += 1;
                    }
                }
                Err(e) => buffered
                    .refused
                    .push((line.to_vec(), Refusal::Malformed(e.to_string()))),
            },
        }
    }
    buffered
}

/// Removes operations that later ones make redundant (000 Example 3.2.1): everything before a
/// `put`, `insert` or `delete` (they replace the whole document); consecutive updates become one;
/// within it, when nothing in between touches the field, `$set` after `$set` keeps the last,
/// `$inc` after `$inc` adds up, and `$push`/`$addToSet` of a value followed by `$pull` of it no
/// longer carries the value (the `$pull` removes every copy anyway). The result always equals
/// applying the operations as they were.
pub fn compact(ops: Vec<DocOp>) -> Vec<DocOp> {
    let mut out: Vec<DocOp> = Vec::new();
    for op in ops {
        match op {
            DocOp::Update(changes) => match out.last_mut() {
                Some(DocOp::Update(previous)) => previous.extend(&changes),
                _ => out.push(DocOp::Update(changes)),
            },
            whole => {
                out.clear();
                out.push(whole);
            }
        }
    }
    for op in &mut out {
        if let DocOp::Update(changes) = op {
            *changes = compact_changes(changes);
        }
    }
    out
}

/// Whether two paths address overlapping parts of a document (equal, or one inside the other).
fn overlaps(a: &str, b: &str) -> bool {
    let inside = |outer: &str, inner: &str| {
        inner.len() > outer.len()
            && inner.starts_with(outer)
            && inner.as_bytes()[outer.len()] == b'.'
    };
    a == b || inside(a, b) || inside(b, a)
}

/// What a later change leaves of an earlier one when nothing in between touches their field:
/// `$set` after `$set` leaves nothing; `$pull` of a value after `$push`/`$addToSet` of it leaves
/// only the earlier change's side effect of creating a missing array (`$addToSet` of no elements).
/// `None`: the earlier change stays as it is.
fn superseded(later: &Change, earlier: &Change) -> Option<Option<Change>> {
    if earlier.field != later.field {
        return None;
    }
    match later.op {
        Op::Set if earlier.op == Op::Set => Some(None),
        Op::Pull
            if (earlier.op == Op::Push || earlier.op == Op::AddToSet)
                && earlier.value == later.value =>
        {
            Some(Some(Change::new(
                Op::AddToSet,
                earlier.field.clone(),
                serde_json::json!({ "$each": [] }),
            )))
        }
        _ => None,
    }
}

fn compact_changes(changes: &Changes) -> Changes {
    let mut kept: Vec<Change> = Vec::with_capacity(changes.len());
    for change in changes.changes() {
        // Only the last kept change overlapping this field can be dropped or merged: anything
        // between them would see a different document otherwise.
        while let Some(i) = kept.iter().rposition(|c| overlaps(&c.field, &change.field)) {
            match superseded(change, &kept[i]) {
                Some(None) => {
                    kept.remove(i);
                }
                Some(Some(rest)) => {
                    kept[i] = rest;
                    break;
                }
                None => break,
            }
        }
        if change.op == Op::Inc {
            if let Some(i) = kept.iter().rposition(|c| overlaps(&c.field, &change.field)) {
                let last = &mut kept[i];
                if last.op == Op::Inc && last.field == change.field {
                    if let (Some(a), Some(b)) = (last.value.as_i64(), change.value.as_i64()) {
                        if let Some(sum) = a.checked_add(b) {
                            last.value = sum.into();
                            continue;
                        }
                    }
                }
            }
        }
        kept.push(change.clone());
    }
    Changes(kept)
}

/// Whether applying the operations twice leaves the document as applying them once.
pub fn is_idempotent(ops: &[DocOp]) -> bool {
    match ops {
        [] => true,
        [op] => op.is_idempotent(),
        // A replacement followed by idempotent changes is idempotent as a whole only if the
        // changes are: `put` resets the document before they apply again.
        [DocOp::Put(_) | DocOp::Insert(_) | DocOp::Delete, rest @ ..] => {
            rest.iter().all(DocOp::is_idempotent)
        }
        _ => false,
    }
}

/// The document after the operations, from `before` (the data store's version).
pub fn final_state(
    ops: &[DocOp],
    before: Option<Document>,
) -> Result<Option<Document>, StoreError> {
    ops.iter().try_fold(before, |doc, op| op.apply(doc))
}

/// The idempotent equivalent of the operations on `before`: the final document, or its deletion
/// (000 §3.2: a non-idempotent buffered write is replaced by the final values before it is
/// applied, so that applying it twice does no harm).
pub fn idempotent_form(ops: &[DocOp], before: Option<Document>) -> Result<Vec<DocOp>, StoreError> {
    Ok(match final_state(ops, before)? {
        Some(document) => vec![DocOp::Put(document)],
        None => vec![DocOp::Delete],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(v: serde_json::Value) -> DocOp {
        DocOp::Update(Changes::from_json(&v).unwrap())
    }

    fn doc(v: serde_json::Value) -> Document {
        v.as_object().unwrap().clone()
    }

    const KEY: &[u8] = b"BW:users:u1";

    #[test]
    fn encodes_and_decodes_lines() {
        for seal in [Seal::new(&[7; 32]), Seal::off()] {
            let ops = vec![
                update(json!({"$inc": {"n": 1}})),
                DocOp::Put(doc(json!({"a": [1, 2]}))),
                DocOp::Delete,
            ];
            let mut bytes = encode(&seal, KEY, &ops[..1]);
            bytes.extend(encode(&seal, KEY, &ops[1..]));
            let read = decode_versioned(&seal, KEY, &bytes);
            assert_eq!(read.ops, ops);
            assert!(read.refused.is_empty());
            // Five writes compacted into three operations, then one appended.
            let mut versioned = encode_versioned(&seal, KEY, 7, 5, &ops);
            versioned.extend(encode(&seal, KEY, &ops[..1]));
            let read = decode_versioned(&seal, KEY, &versioned);
            assert_eq!((read.version, read.writes), (7, 6));
            assert_eq!(read.ops.len(), 4);
            // Read back and written again, the count stays.
            let again = encode_versioned(&seal, KEY, read.version + 1, read.writes, &read.ops);
            assert_eq!(decode_versioned(&seal, KEY, &again).writes, 6);
            assert_eq!(decode_versioned(&seal, KEY, &bytes).writes, 3);
        }
    }

    #[test]
    fn lines_that_do_not_open_or_read_are_refused_and_left_out() {
        let seal = Seal::new(&[7; 32]);
        let genuine = encode(&seal, KEY, &[update(json!({"$inc": {"n": 1}}))]);
        let mut bytes = genuine.clone();
        // Forged (no tag), sealed for another document, sealed but not an operation, sealed but
        // with a duplicate key, or past a bound.
        bytes.extend_from_slice(b"{\"put\":{\"evil\":true}}\n");
        bytes.extend(encode(&seal, b"BW:users:u2", &[DocOp::Delete]));
        for payload in [
            &b"{not json}"[..],
            br#"{"delete": true, "delete": true}"#,
            br#"{"update": {"$set": {"a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a": 1}}}"#,
        ] {
            bytes.extend(seal.seal(KEY, payload));
            bytes.push(b'\n');
        }
        bytes.extend(genuine);
        let read = decode_versioned(&seal, KEY, &bytes);
        assert_eq!(read.ops.len(), 2, "the genuine lines stay");
        assert_eq!(read.writes, 2);
        let why: Vec<bool> = read
            .refused
            .iter()
            .map(|(_, r)| *r == Refusal::Unauthenticated)
            .collect();
        assert_eq!(why, [true, true, false, false, false]);
    }

    #[test]
    fn compaction_of_example_3_2_1() {
        // Bob invites Alice, then Alice accepts: the pending entry cancels out.
        let ops = vec![
            update(json!({"$addToSet": {"pendingfriends": "Bob"}})),
            update(json!({"$pull": {"pendingfriends": "Bob"}, "$addToSet": {"friends": "Bob"}})),
        ];
        let compacted = compact(ops.clone());
        assert_eq!(compacted.len(), 1);
        let DocOp::Update(changes) = &compacted[0] else {
            panic!()
        };
        assert!(
            !changes.changes().iter().any(|c| c.value == json!("Bob")
                && c.field == "pendingfriends"
                && c.op == Op::AddToSet),
            "Bob's pending entry cancels out: {changes:?}"
        );
        // Compaction never changes the outcome.
        for before in [
            doc(json!({})),
            doc(json!({"pendingfriends": ["Bob", "Carl"]})),
        ] {
            assert_eq!(
                final_state(&compacted, Some(before.clone())).unwrap(),
                final_state(&ops, Some(before)).unwrap()
            );
        }
    }

    #[test]
    fn compaction_merges_increments_and_drops_overwritten_sets() {
        let ops = vec![
            update(json!({"$inc": {"n": 1}})),
            update(json!({"$inc": {"n": 2}})),
            update(json!({"$set": {"s": 1}})),
            update(json!({"$set": {"s": 2}})),
        ];
        let compacted = compact(ops.clone());
        let DocOp::Update(changes) = &compacted[0] else {
            panic!()
        };
        assert_eq!(changes.len(), 2);
        let before = doc(json!({"n": 5}));
        assert_eq!(
            final_state(&compacted, Some(before.clone())).unwrap(),
            final_state(&ops, Some(before)).unwrap()
        );
        let replaced = compact(vec![update(json!({"$inc": {"n": 1}})), DocOp::Delete]);
        assert_eq!(replaced, vec![DocOp::Delete]);
    }

    #[test]
    fn compaction_keeps_changes_that_others_depend_on() {
        // `$set a` in between sees `a.b`: the first `$set a.b` may not go.
        let ops = vec![update(json!([
            {"$set": {"a.b": 1}},
            {"$inc": {"a.b": 1}},
            {"$set": {"a.b": 5}}
        ]))];
        let compacted = compact(ops.clone());
        let DocOp::Update(changes) = &compacted[0] else {
            panic!()
        };
        assert_eq!(changes.len(), 3);
        let empty = Some(doc(json!({})));
        assert_eq!(
            final_state(&compacted, empty.clone()).unwrap(),
            final_state(&ops, empty).unwrap()
        );
    }

    #[test]
    fn compaction_sees_a_change_to_a_path_inside_or_around_another() {
        // `$set a` between two increments of `a.b`: they do not add up across it.
        let ops = vec![update(json!([
            {"$inc": {"a.b": 1}},
            {"$set": {"a": {"b": 10}}},
            {"$inc": {"a.b": 2}}
        ]))];
        // `$inc a.b` between two sets of `a`: the first set makes `a` an object to increment in,
        // so it stays (without it the increment fails on the number `a` was).
        let around = vec![update(json!([
            {"$set": {"a": {"b": 1}}},
            {"$inc": {"a.b": 1}},
            {"$set": {"a": {"b": 5}}}
        ]))];
        // `ab` is not inside `a`: the sets of `a` merge across it.
        let beside = vec![update(json!([
            {"$set": {"a": 1}},
            {"$set": {"ab": 1}},
            {"$set": {"a": 2}}
        ]))];
        for (ops, kept) in [(ops, 3), (around, 3), (beside, 2)] {
            let compacted = compact(ops.clone());
            let DocOp::Update(changes) = &compacted[0] else {
                panic!()
            };
            assert_eq!(changes.len(), kept, "{changes:?}");
            for before in [doc(json!({})), doc(json!({"a": 5}))] {
                assert_eq!(
                    final_state(&compacted, Some(before.clone())).map_err(|e| e.to_string()),
                    final_state(&ops, Some(before)).map_err(|e| e.to_string()),
                    "{changes:?}"
                );
            }
        }
    }

    #[test]
    fn a_pull_cancels_only_a_push_or_add_of_the_same_value() {
        for (first, kept) in [
            (
                json!({"$set": {"l": [1, 2]}}),
                json!({"$set": {"l": [1, 2]}}),
            ),
            (json!({"$push": {"l": 2}}), json!({"$push": {"l": 2}})),
            (
                json!({"$push": {"l": 1}}),
                json!({"$addToSet": {"l": {"$each": []}}}),
            ),
            (
                json!({"$addToSet": {"l": 1}}),
                json!({"$addToSet": {"l": {"$each": []}}}),
            ),
        ] {
            let ops = vec![update(first.clone()), update(json!({"$pull": {"l": 1}}))];
            let compacted = compact(ops.clone());
            let DocOp::Update(changes) = &compacted[0] else {
                panic!()
            };
            assert_eq!(
                changes.changes()[0],
                Changes::from_json(&kept).unwrap().changes()[0],
                "{first}"
            );
            let before = Some(doc(json!({"l": [1]})));
            assert_eq!(
                final_state(&compacted, before.clone()).unwrap(),
                final_state(&ops, before).unwrap(),
                "{first}"
            );
        }
    }

    #[test]
    fn idempotent_forms() {
        let inc = vec![update(json!({"$inc": {"n": 1}, "$push": {"l": 1}}))];
        assert!(!is_idempotent(&inc));
        let before = Some(doc(json!({"n": 1, "l": []})));
        let form = idempotent_form(&inc, before.clone()).unwrap();
        assert!(is_idempotent(&form));
        let once = final_state(&form, before.clone()).unwrap();
        let twice = final_state(&form, once.clone()).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once, final_state(&inc, before).unwrap());
        assert!(is_idempotent(&[]), "nothing to apply");
        assert!(is_idempotent(&[update(json!({"$set": {"a": 1}}))]));
        assert!(!is_idempotent(&[update(json!({"$inc": {"a": 1}}))]));
        assert!(is_idempotent(&[
            DocOp::Put(doc(json!({}))),
            update(json!({"$set": {"a": 1}}))
        ]));
    }
}
