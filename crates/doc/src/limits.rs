//! Bounds on documents and changes. Without them a `$set` path of 130 segments writes a document
//! that no read can parse back (serde_json stops at 128 levels of nesting), a path of tens of
//! thousands of segments builds a value whose serialization overflows the stack, and one huge
//! document fills the cache it is cached in. Every bound is checked before anything is written,
//! and answers [`DocError::Limit`](crate::DocError::Limit), so the write changes nothing.
//!
//! Depth counts nested objects and arrays: a document of scalars has depth 1, `{"a": {"b": 1}}`
//! depth 2. A change's bound is the depth it gives the document along its path, so a change that
//! passes, applied to a document within the bound, leaves a document within the bound.

use serde_json::Value;

use crate::Document;

/// The most segments in a field path (`a.b.c` has three).
pub const MAX_PATH_SEGMENTS: usize = 32;
/// The deepest nesting of objects and arrays in a document (well below serde_json's 128, so that
/// a document still parses inside the framework's own wrappers around it).
pub const MAX_DEPTH: usize = 64;
/// The largest document, in bytes of its JSON text.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// A bound a document or a change went past.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    /// A field path with more than [`MAX_PATH_SEGMENTS`] segments.
    #[error("field path {path:?}... has {segments} segments, more than {MAX_PATH_SEGMENTS}")]
    PathSegments {
        /// The start of the path.
        path: String,
        /// How many it has.
        segments: usize,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting more than {MAX_DEPTH} levels deep{}", at_path(.path))]
    Depth {
        /// The field a change made too deep (empty for a whole document).
        path: String,
    },
    /// A document larger than [`MAX_DOCUMENT_BYTES`].
    #[error("a document of {bytes} bytes, more than {MAX_DOCUMENT_BYTES}")]
    DocumentSize {
        /// Its size as JSON text.
        bytes: usize,
    },
}

fn at_path(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at {path:?}")
    }
}

/// Checks the number of segments of a dotted path without splitting it first (a path may be
/// megabytes of dots).
pub(crate) fn check_path_segments(field: &str) -> Result<(), LimitExceeded> {
    let segments = field.bytes().filter(|&b| b == b'.').count() + 1;
    if segments > MAX_PATH_SEGMENTS {
        return Err(LimitExceeded::PathSegments {
            path: field.chars().take(60).collect(),
            segments,
        });
    }
    Ok(())
}

/// The nesting depth of `value` (0 for a scalar), or `None` once it passes `budget`. Iterative,
/// so that a value nested deeper than the stack allows is measured too.
pub(crate) fn depth_within(value: &Value, budget: usize) -> Option<usize> {
    let mut deepest = 0;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, above)) = pending.pop() {
        let depth = above + 1;
        match v {
            Value::Array(items) => pending.extend(items.iter().map(|child| (child, depth))),
            Value::Object(fields) => pending.extend(fields.values().map(|child| (child, depth))),
            _ => continue,
        }
        if depth > budget {
            return None;
        }
        deepest = deepest.max(depth);
    }
    Some(deepest)
}

/// Checks a value placed `above` levels down in a document (its path's segments, plus one for an
/// array it is appended to).
pub(crate) fn check_placed_depth(
    value: &Value,
    above: usize,
    path: &str,
) -> Result<(), LimitExceeded> {
    let budget = MAX_DEPTH.saturating_sub(above);
    match depth_within(value, budget) {
        Some(_) => Ok(()),
        None => Err(LimitExceeded::Depth {
            path: path.chars().take(60).collect(),
        }),
    }
}

/// Checks a whole document: its depth, and its size as JSON text. Returns the text, which a
/// caller about to store the document needs anyway.
pub fn check_document(doc: &Document) -> Result<String, LimitExceeded> {
    // The document is an object: one level, then its fields.
    for value in doc.values() {
        check_placed_depth(value, 1, "")?;
    }
    let text = serde_json::to_string(doc).expect("JSON maps always serialize");
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(LimitExceeded::DocumentSize { bytes: text.len() });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "x": v });
        }
        v
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth_within(&json!(1), 10), Some(0));
        assert_eq!(depth_within(&json!({}), 10), Some(1));
        assert_eq!(depth_within(&json!({"a": [1, {"b": 2}]}), 10), Some(3));
        assert_eq!(depth_within(&nested(5), 4), None);
        // Far deeper than recursion could measure.
        let mut deep = Value::Null;
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(depth_within(&deep, MAX_DEPTH), None);
        // Dropping it recursively would overflow the stack: take it apart by hand.
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn documents_are_bounded_in_depth_and_size() {
        let ok = nested(MAX_DEPTH - 1);
        let doc = ok.as_object().unwrap().clone();
        assert!(check_document(&doc).is_ok());
        let deep = nested(MAX_DEPTH + 1);
        assert!(matches!(
            check_document(deep.as_object().unwrap()),
            Err(LimitExceeded::Depth { .. })
        ));
        let big = json!({ "s": "x".repeat(MAX_DOCUMENT_BYTES) });
        assert!(matches!(
            check_document(big.as_object().unwrap()),
            Err(LimitExceeded::DocumentSize { bytes }) if bytes > MAX_DOCUMENT_BYTES
        ));
    }

    #[test]
    fn paths_are_bounded_without_splitting() {
        assert!(check_path_segments(&vec!["a"; MAX_PATH_SEGMENTS].join(".")).is_ok());
        let long = ".".repeat(10_000_000);
        assert!(matches!(
            check_path_segments(&long),
            Err(LimitExceeded::PathSegments { segments, .. }) if segments == 10_000_001
        ));
    }
}
