//! Change operators on JSON documents (000 §3.2, Table 3.2): `$set`, `$unset`, `$inc`, `$addToSet`,
//! `$push`, `$pull`, each known to be idempotent or not, and the idempotent equivalent of a sequence
//! of changes that write-back applies in place of non-idempotent buffered writes.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde_json::{Map, Value};

use crate::limits::{check_path_segments, check_placed_depth};
use crate::Document;
use crate::{DocError, Result};

/// A change operator, as in MongoDB's update command (000 Table 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `$set`: set a field to a value, creating missing parent objects. Idempotent.
    Set,
    /// `$unset`: remove a field (the value is ignored; MongoDB uses `""`). Idempotent.
    Unset,
    /// `$inc`: add a number to a numeric field; a missing field starts at 0. Not idempotent.
    Inc,
    /// `$addToSet`: append a value to an array field unless an equal element is in it; a missing
    /// field becomes a one-element array. Idempotent.
    AddToSet,
    /// `$push`: append a value to an array field; a missing field becomes a one-element array. Not
    /// idempotent.
    Push,
    /// `$pull`: remove every element equal to a value from an array field; a missing field is left
    /// missing. Not idempotent (000 Table 3.2: it removes what an interleaved `$push` added).
    Pull,
}

impl Op {
    /// Every operator, in the order [`Changes::from_json`] applies the operators of one object.
    pub const ALL: [Op; 6] = [
        Op::Set,
        Op::Unset,
        Op::Inc,
        Op::AddToSet,
        Op::Push,
        Op::Pull,
    ];

    /// Whether applying a change with this operator twice has the same effect as applying it once,
    /// as classified by 000 Table 3.2: `$set`, `$unset` and `$addToSet` are idempotent; `$inc`,
    /// `$push` and `$pull` are not.
    pub fn idempotent(self) -> bool {
        match self {
            Op::Set | Op::Unset | Op::AddToSet => true,
            Op::Inc | Op::Push | Op::Pull => false,
        }
    }

    /// The operator's name in JSON, with its dollar sign (`"$addToSet"`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Set => "$set",
            Op::Unset => "$unset",
            Op::Inc => "$inc",
            Op::AddToSet => "$addToSet",
            Op::Push => "$push",
            Op::Pull => "$pull",
        }
    }

    /// The operator with this JSON name, if any.
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One change: an operator applied to one field of a document.
///
/// `field` is a dotted path (`"address.city"`) through nested objects; array elements cannot be
/// addressed. For `$push` and `$addToSet`, a value `{"$each": [..]}` appends each element in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The operator.
    pub op: Op,
    /// The field, a dotted path of non-empty names.
    pub field: String,
    /// The operand: the new value (`$set`), the amount (`$inc`), the element (`$addToSet`, `$push`,
    /// `$pull`); ignored by `$unset`.
    pub value: Value,
}

impl Change {
    /// A change of `field` by `op` with operand `value`.
    pub fn new(op: Op, field: impl Into<String>, value: impl Into<Value>) -> Change {
        Change {
            op,
            field: field.into(),
            value: value.into(),
        }
    }

    /// Whether this change is idempotent (its operator's class, 000 Table 3.2).
    pub fn is_idempotent(&self) -> bool {
        self.op.idempotent()
    }

    /// Checks the change on its own: its path, the bounds of [`limits`](crate::limits) (path
    /// segments; the depth its operand reaches in the document), and a number for `$inc`.
    pub fn check(&self) -> Result<()> {
        let segments = split_path(&self.field)?.len();
        let operands: Vec<&Value> = match (self.op, &self.value) {
            (Op::Unset, _) => Vec::new(),
            (Op::Inc, v) if !v.is_number() => {
                return Err(DocError::Invalid(format!(
                    "$inc of {:?} by a non-number {v}",
                    self.field
                )))
            }
            (Op::Push | Op::AddToSet, Value::Object(m))
                if m.len() == 1 && m.contains_key("$each") =>
            {
                match &m["$each"] {
                    Value::Array(items) => items.iter().collect(),
                    other => vec![other],
                }
            }
            (_, v) => vec![v],
        };
        // An appended element sits one level below the path, inside the array.
        let above = segments + usize::from(matches!(self.op, Op::Push | Op::AddToSet));
        for operand in operands {
            check_placed_depth(operand, above, &self.field)?;
        }
        Ok(())
    }

    /// Applies this change to `doc`. On error (a field of the wrong type on the way or at the end,
    /// a bad path, an overflowing `$inc`, a bound of [`limits`](crate::limits)) `doc` is left as
    /// it was: every check precedes the write.
    pub fn apply(&self, doc: &mut Document) -> Result<()> {
        self.check()?;
        let path = split_path(&self.field)?;
        let (last, parents) = path
            .split_last()
            .expect("split_path returns at least one segment");
        match self.op {
            Op::Unset => {
                if let Some(parent) = lookup_object_mut(doc, parents) {
                    parent.remove(*last);
                }
                Ok(())
            }
            Op::Pull => {
                let Some(parent) = lookup_object_mut(doc, parents) else {
                    return Ok(());
                };
                match parent.get_mut(*last) {
                    None => Ok(()),
                    Some(Value::Array(items)) => {
                        items.retain(|item| item != &self.value);
                        Ok(())
                    }
                    Some(other) => Err(type_error(self, other)),
                }
            }
            Op::Set => {
                let parent = create_parents(doc, parents, &self.field)?;
                parent.insert((*last).to_owned(), self.value.clone());
                Ok(())
            }
            Op::Inc => {
                if !self.value.is_number() {
                    return Err(DocError::Invalid(format!(
                        "$inc of {:?} by a non-number {}",
                        self.field, self.value
                    )));
                }
                let current = lookup_object(doc, parents).and_then(|p| p.get(*last));
                let sum = match current {
                    None => self.value.clone(),
                    Some(Value::Number(n)) => add_numbers(
                        n,
                        self.value.as_number().expect("checked above"),
                        &self.field,
                    )?,
                    Some(other) => return Err(type_error(self, other)),
                };
                let parent = create_parents(doc, parents, &self.field)?;
                parent.insert((*last).to_owned(), sum);
                Ok(())
            }
            Op::Push | Op::AddToSet => {
                let elements: Vec<&Value> = match &self.value {
                    Value::Object(m) if m.len() == 1 && m.contains_key("$each") => {
                        match &m["$each"] {
                            Value::Array(items) => items.iter().collect(),
                            other => {
                                return Err(DocError::Invalid(format!(
                                    "{} of {:?}: $each needs an array, not {other}",
                                    self.op, self.field
                                )))
                            }
                        }
                    }
                    v => vec![v],
                };
                if let Some(existing) = lookup_object(doc, parents).and_then(|p| p.get(*last)) {
                    if !existing.is_array() {
                        return Err(type_error(self, existing));
                    }
                }
                let parent = create_parents(doc, parents, &self.field)?;
                let slot = parent
                    .entry((*last).to_owned())
                    .or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(items) = slot else {
                    unreachable!("checked above")
                };
                for element in elements {
                    if self.op == Op::Push || !items.contains(element) {
                        items.push(element.clone());
                    }
                }
                Ok(())
            }
        }
    }
}

fn type_error(change: &Change, found: &Value) -> DocError {
    let wanted = match change.op {
        Op::Inc => "a number",
        _ => "an array",
    };
    DocError::Invalid(format!(
        "{} of {:?} needs {wanted}, the field holds {}",
        change.op,
        change.field,
        kind_name(found)
    ))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `a + b` as JSON numbers, `a` the field's value: integers stay integers of the field's width
/// (signed 64-bit, or unsigned for a value above `i64::MAX`), and a sum past it is an error, not
/// a float that silently loses digits; anything else becomes a float.
fn add_numbers(a: &serde_json::Number, b: &serde_json::Number, field: &str) -> Result<Value> {
    let integer = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    if let (Some(x), Some(y)) = (integer(a), integer(b)) {
        // Two 64-bit integers cannot overflow 128 bits.
        let sum = x + y;
        let sum = if a.as_i64().is_some() {
            i64::try_from(sum).map(Value::from).ok()
        } else {
            u64::try_from(sum).map(Value::from).ok()
        };
        let width = if a.as_i64().is_some() {
            "signed"
        } else {
            "unsigned"
        };
        return sum.ok_or_else(|| {
            DocError::Invalid(format!(
                "$inc of {field:?}: {x} + {y} overflows a {width} 64-bit integer"
            ))
        });
    }
    let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
    serde_json::Number::from_f64(sum)
        .map(Value::Number)
        .ok_or_else(|| {
            DocError::Invalid(format!("$inc of {field:?} gives {sum}, not a JSON number"))
        })
}

/// Splits a dotted path into its segments, checking that none is empty and that there are at most
/// [`MAX_PATH_SEGMENTS`](crate::limits::MAX_PATH_SEGMENTS).
pub fn split_path(field: &str) -> Result<Vec<&str>> {
    check_path_segments(field)?;
    let segments: Vec<&str> = field.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(DocError::Invalid(format!(
            "bad field path {field:?}: empty name"
        )));
    }
    if segments[0].starts_with('$') {
        return Err(DocError::Invalid(format!(
            "bad field path {field:?}: names may not start with '$'"
        )));
    }
    Ok(segments)
}

fn lookup_object<'d>(doc: &'d Document, parents: &[&str]) -> Option<&'d Map<String, Value>> {
    let mut cur = doc;
    for name in parents {
        cur = cur.get(*name)?.as_object()?;
    }
    Some(cur)
}

fn lookup_object_mut<'d>(
    doc: &'d mut Document,
    parents: &[&str],
) -> Option<&'d mut Map<String, Value>> {
    let mut cur = doc;
    for name in parents {
        cur = cur.get_mut(*name)?.as_object_mut()?;
    }
    Some(cur)
}

/// The object at `parents`, creating missing objects on the way; an existing non-object on the way is
/// an error.
fn create_parents<'d>(
    doc: &'d mut Document,
    parents: &[&str],
    field: &str,
) -> Result<&'d mut Map<String, Value>> {
    // Check first so that a failing change leaves the document untouched.
    let mut probe: &Document = doc;
    for name in parents {
        match probe.get(*name) {
            None => break,
            Some(Value::Object(m)) => probe = m,
            Some(other) => {
                return Err(DocError::Invalid(format!(
                    "cannot create field {field:?}: {name:?} holds {}, not an object",
                    kind_name(other)
                )))
            }
        }
    }
    let mut cur = doc;
    for name in parents {
        cur = cur
            .entry((*name).to_owned())
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .expect("checked above");
    }
    Ok(cur)
}

/// The value at a dotted path, if every step is an object and the field exists.
pub fn get_path<'d>(doc: &'d Document, field: &str) -> Option<&'d Value> {
    let mut segments = field.split('.');
    let mut cur = doc.get(segments.next()?)?;
    for name in segments {
        cur = cur.as_object()?.get(name)?;
    }
    Some(cur)
}

/// An ordered sequence of changes to one document, applied in order and atomically (by the data
/// store's document update, and by the cache server to a cached copy).
///
/// In JSON it is a MongoDB-style update object, `{"$set": {"name": "Bob"}, "$inc": {"visits": 1}}`,
/// or an array of such objects applied one after another (the form [`Changes::to_json`] uses when the
/// same field is changed more than once).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Changes(pub Vec<Change>);

impl Changes {
    /// No changes.
    pub fn new() -> Changes {
        Changes(Vec::new())
    }

    /// Appends a change (builder style).
    pub fn with(mut self, op: Op, field: impl Into<String>, value: impl Into<Value>) -> Changes {
        self.0.push(Change::new(op, field, value));
        self
    }

    /// Appends `$set field value`.
    pub fn set(self, field: impl Into<String>, value: impl Into<Value>) -> Changes {
        self.with(Op::Set, field, value)
    }

    /// Appends `$unset field`.
    pub fn unset(self, field: impl Into<String>) -> Changes {
        self.with(Op::Unset, field, "")
    }

    /// Appends `$inc field by`.
    pub fn inc(self, field: impl Into<String>, by: impl Into<Value>) -> Changes {
        self.with(Op::Inc, field, by)
    }

    /// Appends `$addToSet field value`.
    pub fn add_to_set(self, field: impl Into<String>, value: impl Into<Value>) -> Changes {
        self.with(Op::AddToSet, field, value)
    }

    /// Appends `$push field value`.
    pub fn push(self, field: impl Into<String>, value: impl Into<Value>) -> Changes {
        self.with(Op::Push, field, value)
    }

    /// Appends `$pull field value`.
    pub fn pull(self, field: impl Into<String>, value: impl Into<Value>) -> Changes {
        self.with(Op::Pull, field, value)
    }

    /// The changes, in order.
    pub fn changes(&self) -> &[Change] {
        &self.0
    }

    /// The number of changes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no changes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends every change of `other` after these (write-back's Append of a buffered write).
    pub fn extend(&mut self, other: &Changes) {
        self.0.extend(other.0.iter().cloned());
    }

    /// Parses MongoDB-style changes: an object mapping operators to `{field: operand}` objects, or an
    /// array of such objects applied in array order.
    ///
    /// Within one object the operators are taken in the fixed order of [`Op::ALL`] (`$set`, `$unset`,
    /// `$inc`, `$addToSet`, `$push`, `$pull`), whatever the key order of the JSON, and, as in MongoDB,
    /// one object may not change a field twice or change both a field and a field inside it (`a` and
    /// `a.b`); so the order in which one object's changes are applied cannot matter, and the result is
    /// deterministic. Unknown operators, empty or bad paths, and a non-number `$inc` are
    /// [`DocError::Invalid`]; a path or an operand past the bounds of [`limits`](crate::limits)
    /// is [`DocError::Limit`]. A value has no duplicate keys; from text, [`Changes::parse`]
    /// refuses them.
    pub fn from_json(v: &Value) -> Result<Changes> {
        match v {
            Value::Array(items) => {
                let mut all = Changes::new();
                for item in items {
                    all.extend(&Changes::from_object(item)?);
                }
                Ok(all)
            }
            other => Changes::from_object(other),
        }
    }

    /// Parses changes from JSON text, as [`Changes::from_json`] does; an object that names a key
    /// twice (`{"$set": {"a": 1}, "$set": {"b": 2}}`) is [`DocError::Invalid`] rather than
    /// silently keeping the last.
    pub fn parse(text: impl AsRef<[u8]>) -> Result<Changes> {
        Changes::from_json(&crate::json::parse_json(text.as_ref())?)
    }

    /// Checks every change on its own ([`Change::check`]): what [`Changes::from_json`] checks,
    /// for changes built in code.
    pub fn check(&self) -> Result<()> {
        self.0.iter().try_for_each(Change::check)
    }

    fn from_object(v: &Value) -> Result<Changes> {
        let Value::Object(ops) = v else {
            return Err(DocError::Invalid(format!(
                "changes must be a JSON object or array, not {v}"
            )));
        };
        for key in ops.keys() {
            if Op::from_name(key).is_none() {
                return Err(DocError::Invalid(format!(
                    "unknown change operator {key:?}"
                )));
            }
        }
        let mut out = Vec::new();
        for op in Op::ALL {
            let Some(fields) = ops.get(op.name()) else {
                continue;
            };
            let Value::Object(fields) = fields else {
                return Err(DocError::Invalid(format!(
                    "{op} needs an object of fields, not {fields}"
                )));
            };
            for (field, value) in fields {
                let change = Change::new(op, field.clone(), value.clone());
                change.check()?;
                out.push(change);
            }
        }
        for (i, a) in out.iter().enumerate() {
            if let Some(b) = out[..i].iter().find(|b| paths_conflict(&a.field, &b.field)) {
                return Err(DocError::Invalid(format!(
                    "{} of {:?} conflicts with {} of {:?} in one change object",
                    a.op, a.field, b.op, b.field
                )));
            }
        }
        Ok(Changes(out))
    }

    /// These changes as MongoDB-style JSON that [`Changes::from_json`] reads back into changes with
    /// the same effect: one object when no field is changed twice (operators grouped, so the order of
    /// changes to different fields may differ, which cannot change the result), otherwise an array of
    /// such objects, split wherever a field is changed again.
    pub fn to_json(&self) -> Value {
        let mut groups: Vec<Map<String, Value>> = Vec::new();
        let mut fields_in_group: Vec<&str> = Vec::new();
        for change in &self.0 {
            let conflict = fields_in_group
                .iter()
                .any(|f| paths_conflict(f, &change.field));
            if groups.is_empty() || conflict {
                groups.push(Map::new());
                fields_in_group.clear();
            }
            let group = groups.last_mut().expect("pushed above");
            group
                .entry(change.op.name())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("operators map to objects")
                .insert(change.field.clone(), change.value.clone());
            fields_in_group.push(&change.field);
        }
        match groups.len() {
            0 => Value::Object(Map::new()),
            1 => Value::Object(groups.pop().expect("one group")),
            _ => Value::Array(groups.into_iter().map(Value::Object).collect()),
        }
    }

    /// Applies the changes to `doc` in order. On error (an operator meeting a field of the wrong type,
    /// a bad path) `doc` is left as it was.
    pub fn apply(&self, doc: &mut Document) -> Result<()> {
        match self.0.as_slice() {
            [] => Ok(()),
            [one] => one.apply(doc),
            many => {
                let mut work = doc.clone();
                for change in many {
                    change.apply(&mut work)?;
                }
                *doc = work;
                Ok(())
            }
        }
    }

    /// Whether applying these changes again after they were applied changes nothing: every change's
    /// operator is idempotent (000 Table 3.2) and no two changes touch the same field or one inside
    /// the other.
    ///
    /// The second condition matters because idempotent operators need not stay idempotent in
    /// sequence: `[$addToSet a 1, $set a {..}]` applied twice fails, as `$addToSet` then meets an
    /// object. Changes to distinct fields act independently, so each one's idempotency carries over to
    /// the whole. When this is false, write-back applies [`Changes::idempotent_equivalent`] instead.
    pub fn is_idempotent(&self) -> bool {
        if !self.0.iter().all(Change::is_idempotent) {
            return false;
        }
        let mut seen: HashSet<&str> = HashSet::with_capacity(self.0.len());
        for c in &self.0 {
            if !seen.insert(&c.field) {
                return false;
            }
        }
        // A field inside another changed field: some proper prefix (at a dot) is in the set.
        self.0.iter().all(|c| {
            c.field
                .match_indices('.')
                .all(|(i, _)| !seen.contains(&c.field[..i]))
        })
    }

    /// The idempotent equivalent of these changes applied to `before` (000 §3.2: write-back replaces
    /// a non-idempotent buffered write by its idempotent equivalent before applying it).
    ///
    /// The result is a `$set` of the final value of every field the changes touch, or an `$unset` of
    /// those they removed, in field order. Applying it to `before` gives the same document as
    /// applying `self`, and applying it again changes nothing more. Where the changes created parent
    /// objects (`$set` of `a.b` when `a` is missing) the equivalent sets the outermost created parent,
    /// so that it recreates exactly what the changes created.
    pub fn idempotent_equivalent(&self, before: &Document) -> Result<Changes> {
        let mut after = before.clone();
        self.apply(&mut after)?;
        let mut roots: BTreeSet<String> = BTreeSet::new();
        for change in &self.0 {
            let segments = split_path(&change.field)?;
            // The shortest prefix whose parents are objects before and after: below it, changes
            // only touched what is inside it; at it, setting or unsetting reproduces `after`.
            let mut end = 1;
            while end < segments.len() {
                let prefix = segments[..end].join(".");
                let object_before = get_path(before, &prefix).is_some_and(Value::is_object);
                let object_after = get_path(&after, &prefix).is_some_and(Value::is_object);
                if !(object_before && object_after) {
                    break;
                }
                end += 1;
            }
            roots.insert(segments[..end].join("."));
        }
        // Drop paths inside another chosen path: the outer one carries them.
        let chosen: Vec<&String> = roots
            .iter()
            .filter(|p| {
                !roots
                    .iter()
                    .any(|q| q != *p && p.starts_with(q.as_str()) && p.as_bytes()[q.len()] == b'.')
            })
            .collect();
        let mut out = Changes::new();
        for path in chosen {
            match get_path(&after, path) {
                Some(v) => out.0.push(Change::new(Op::Set, path.clone(), v.clone())),
                None => out.0.push(Change::new(Op::Unset, path.clone(), "")),
            }
        }
        Ok(out)
    }
}

impl From<Vec<Change>> for Changes {
    fn from(changes: Vec<Change>) -> Changes {
        Changes(changes)
    }
}

impl FromIterator<Change> for Changes {
    fn from_iter<I: IntoIterator<Item = Change>>(iter: I) -> Changes {
        Changes(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Changes {
    type Item = &'a Change;
    type IntoIter = std::slice::Iter<'a, Change>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Whether two dotted paths are the same field or one is inside the other.
fn paths_conflict(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long.starts_with(short) && (long.len() == short.len() || long.as_bytes()[short.len()] == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(v: Value) -> Document {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn conflicts() {
        assert!(paths_conflict("a", "a"));
        assert!(paths_conflict("a", "a.b"));
        assert!(paths_conflict("a.b", "a"));
        assert!(!paths_conflict("a", "ab"));
        assert!(!paths_conflict("a.b", "a.c"));
    }

    #[test]
    fn inc_missing_and_null() {
        let mut d = doc(json!({"n": null}));
        assert!(Changes::new().inc("n", 1).apply(&mut d).is_err());
        let mut d = doc(json!({}));
        Changes::new().inc("a.b", 2).apply(&mut d).unwrap();
        assert_eq!(Value::Object(d), json!({"a": {"b": 2}}));
    }

    #[test]
    fn inc_overflow_is_an_error_for_every_integer_width() {
        for (start, by) in [
            (json!(i64::MAX), json!(1)),
            (json!(i64::MIN), json!(-1)),
            (json!(-1), json!(u64::MAX)),
            (json!(u64::MAX), json!(1)),
            (json!(u64::MAX), json!(u64::MAX)),
        ] {
            let mut d = doc(json!({ "n": start.clone() }));
            let r = Changes::new().inc("n", by.clone()).apply(&mut d);
            assert!(
                matches!(r, Err(DocError::Invalid(ref m)) if m.contains("overflows")),
                "{start} + {by}: {r:?}"
            );
            assert_eq!(d["n"], start, "unchanged");
        }
        // Within the field's width, the sum is exact whatever the operand's sign.
        let mut d = doc(json!({ "n": u64::MAX }));
        Changes::new().inc("n", i64::MIN).apply(&mut d).unwrap();
        assert_eq!(d["n"], json!(i64::MAX as u64));
        let mut d = doc(json!({ "n": u64::MAX - 1 }));
        Changes::new().inc("n", 1).apply(&mut d).unwrap();
        assert_eq!(d["n"], json!(u64::MAX));
        let mut d = doc(json!({ "n": -5 }));
        Changes::new().inc("n", 7u64).apply(&mut d).unwrap();
        assert_eq!(d["n"], json!(2));
        // Floats stay floats.
        let mut d = doc(json!({ "n": 1.5 }));
        Changes::new().inc("n", 1).apply(&mut d).unwrap();
        assert_eq!(d["n"], json!(2.5));
    }

    #[test]
    fn duplicate_keys_are_refused_from_text() {
        assert!(matches!(
            Changes::parse(r#"{"$set": {"a": 1}, "$set": {"b": 2}}"#),
            Err(DocError::Invalid(m)) if m.contains("duplicate key")
        ));
        assert!(Changes::parse(r#"{"$set": {"a": 1, "a": 2}}"#).is_err());
        assert_eq!(
            Changes::parse(r#"{"$set": {"a": 1}, "$inc": {"b": 2}}"#).unwrap(),
            Changes::new().set("a", 1).inc("b", 2)
        );
    }

    #[test]
    fn limits_are_checked_when_changes_are_parsed_and_applied() {
        use crate::limits::{LimitExceeded, MAX_DEPTH, MAX_PATH_SEGMENTS};
        let path = |n: usize| vec!["a"; n].join(".");
        let nested = |levels: usize| {
            let mut v = json!(1);
            for _ in 0..levels {
                v = json!([v]);
            }
            v
        };
        let limit = |r: Result<Changes>| matches!(r, Err(DocError::Limit(_)));
        // Paths: the issue's 130 segments, and a huge one, are refused before anything splits them.
        assert!(Changes::from_json(&json!({"$set": {path(MAX_PATH_SEGMENTS): 1}})).is_ok());
        assert!(limit(Changes::from_json(
            &json!({"$set": {path(MAX_PATH_SEGMENTS + 1): 1}})
        )));
        assert!(limit(Changes::from_json(&json!({"$set": {path(130): 1}}))));
        assert!(matches!(
            Changes::from_json(&json!({"$unset": {path(50_000): ""}})),
            Err(DocError::Limit(LimitExceeded::PathSegments {
                segments: 50_000,
                ..
            }))
        ));
        // Depth: the path's segments plus the operand's nesting (plus the array an element joins).
        let deepest = MAX_DEPTH - 2;
        assert!(Changes::from_json(&json!({"$set": {"a.b": nested(deepest)}})).is_ok());
        assert!(limit(Changes::from_json(
            &json!({"$set": {"a.b": nested(deepest + 1)}})
        )));
        assert!(Changes::from_json(&json!({"$push": {"a.b": nested(deepest - 1)}})).is_ok());
        assert!(limit(Changes::from_json(
            &json!({"$push": {"a.b": nested(deepest)}})
        )));
        assert!(limit(Changes::from_json(
            &json!({"$addToSet": {"a": {"$each": [1, nested(MAX_DEPTH)]}}})
        )));
        assert!(limit(Changes::from_json(
            &json!({"$pull": {"a": nested(MAX_DEPTH)}})
        )));
        // Built in code, a change past a bound is refused when applied, and changes nothing.
        let mut d = doc(json!({"a": {"b": 1}}));
        let before = d.clone();
        let r = Changes::new()
            .set("x", 1)
            .set("a.b", nested(deepest + 1))
            .apply(&mut d);
        assert!(
            matches!(r, Err(DocError::Limit(LimitExceeded::Depth { .. }))),
            "{r:?}"
        );
        assert_eq!(d, before);
        // Applying within the bounds keeps the document within them.
        Changes::new()
            .set("a.b", nested(deepest))
            .apply(&mut d)
            .unwrap();
        assert!(crate::limits::check_document(&d).is_ok());
    }

    #[test]
    fn equivalent_recreates_parents() {
        let before = doc(json!({}));
        let c = Changes::new().set("a.b", 1).unset("a.b");
        let eq = c.idempotent_equivalent(&before).unwrap();
        assert_eq!(eq, Changes::new().set("a", json!({})));
    }
}
