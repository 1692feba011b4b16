//! Change operators on JSON documents (000 §3.2, Table 3.2): `$set`, `$unset`, `$inc`, `$addToSet`,
//! `$push`, `$pull`, each known to be idempotent or not, and the idempotent equivalent of a sequence
//! of changes that write-back applies in place of non-idempotent buffered writes.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde_json::{Map, Value};

use crate::error::{Result, StoreError};
use crate::Document;

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

    /// Applies this change to `doc`. On error (a field of the wrong type on the way or at the end,
    /// a bad path, an overflowing `$inc`) `doc` is left as it was: every check precedes the write.
    pub fn apply(&self, doc: &mut Document) -> Result<()> {
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
                    return Err(StoreError::Invalid(format!(
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
                                return Err(StoreError::Invalid(format!(
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

fn type_error(change: &Change, found: &Value) -> StoreError {
    let wanted = match change.op {
        Op::Inc => "a number",
        _ => "an array",
    };
    StoreError::Invalid(format!(
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

/// `a + b` as JSON numbers: integers stay integers (an overflow is an error), anything else becomes
/// a float.
fn add_numbers(a: &serde_json::Number, b: &serde_json::Number, field: &str) -> Result<Value> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x.checked_add(y).map(Value::from).ok_or_else(|| {
            StoreError::Invalid(format!("$inc of {field:?} overflows a 64-bit integer"))
        });
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        if let Some(sum) = x.checked_add(y) {
            return Ok(Value::from(sum));
        }
    }
    let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
    serde_json::Number::from_f64(sum)
        .map(Value::Number)
        .ok_or_else(|| {
            StoreError::Invalid(format!("$inc of {field:?} gives {sum}, not a JSON number"))
        })
}

/// Splits a dotted path into its segments, checking that none is empty.
pub(crate) fn split_path(field: &str) -> Result<Vec<&str>> {
    let segments: Vec<&str> = field.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(StoreError::Invalid(format!(
            "bad field path {field:?}: empty name"
        )));
    }
    if segments[0].starts_with('$') {
        return Err(StoreError::Invalid(format!(
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
                return Err(StoreError::Invalid(format!(
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
pub(crate) fn get_path<'d>(doc: &'d Document, field: &str) -> Option<&'d Value> {
    let mut segments = field.split('.');
    let mut cur = doc.get(segments.next()?)?;
    for name in segments {
        cur = cur.as_object()?.get(name)?;
    }
    Some(cur)
}

/// An ordered sequence of changes to one document, applied in order and atomically by
/// [`DocumentStore::update`](crate::DocumentStore::update).
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
    /// [`StoreError::Invalid`].
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

    fn from_object(v: &Value) -> Result<Changes> {
        let Value::Object(ops) = v else {
            return Err(StoreError::Invalid(format!(
                "changes must be a JSON object or array, not {v}"
            )));
        };
        for key in ops.keys() {
            if Op::from_name(key).is_none() {
                return Err(StoreError::Invalid(format!(
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
                return Err(StoreError::Invalid(format!(
                    "{op} needs an object of fields, not {fields}"
                )));
            };
            for (field, value) in fields {
                split_path(field)?;
                if op == Op::Inc && !value.is_number() {
                    return Err(StoreError::Invalid(format!(
                        "$inc of {field:?} by a non-number {value}"
                    )));
                }
                out.push(Change::new(op, field.clone(), value.clone()));
            }
        }
        for (i, a) in out.iter().enumerate() {
            if let Some(b) = out[..i].iter().find(|b| paths_conflict(&a.field, &b.field)) {
                return Err(StoreError::Invalid(format!(
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
    fn equivalent_recreates_parents() {
        let before = doc(json!({}));
        let c = Changes::new().set("a.b", 1).unset("a.b");
        let eq = c.idempotent_equivalent(&before).unwrap();
        assert_eq!(eq, Changes::new().set("a", json!({})));
    }
}
