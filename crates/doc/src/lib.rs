//! The document model of cads: a document is a JSON object, changed by operators (`$set`, `$inc`,
//! `$push`, ...; 000 Table 3.2) within the bounds of [`limits`]. The data store applies changes
//! to the stored document and the cache server to the cached copy (`LUPDATE`), so both must read
//! and apply them alike: this crate is that one definition.

mod changes;
mod json;
pub mod limits;
mod text;

pub use changes::{get_path, split_path, Change, Changes, Op};
pub use json::parse_json;
pub use limits::LimitExceeded;
pub use text::DocumentText;

/// A document: a JSON object. Its id is kept apart from it (it is not a field of the document).
pub type Document = serde_json::Map<String, serde_json::Value>;

/// What is wrong with a document or a change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DocError {
    /// Bad input: JSON that does not parse, an operator applied to a field of the wrong type, a
    /// malformed path or operand.
    #[error("invalid: {0}")]
    Invalid(String),
    /// A document or a change went past one of the bounds of [`limits`]. Nothing was changed.
    #[error("limit exceeded: {0}")]
    Limit(#[from] LimitExceeded),
}

/// `Result` with a [`DocError`].
pub type Result<T, E = DocError> = std::result::Result<T, E>;

/// Parses the JSON text of a document (an object; duplicate keys refused).
pub fn decode(text: &[u8]) -> Result<Document> {
    match parse_json(text)? {
        serde_json::Value::Object(document) => Ok(document),
        other => Err(DocError::Invalid(format!(
            "a document is a JSON object, not {}",
            kind(&other)
        ))),
    }
}

/// The JSON text of a document.
pub fn encode(document: &Document) -> Vec<u8> {
    serde_json::to_vec(document).expect("a JSON map serializes")
}

/// A document's JSON text with `changes` applied, or `None` if the text is not a document or the
/// changes cannot apply to it (an operator on a field of the wrong type, a bound of [`limits`]
/// passed, the document's size included): a cached copy that cannot take a change is dropped,
/// and the data store reports the error.
pub fn apply_to_text(text: &[u8], changes: &Changes) -> Option<Vec<u8>> {
    let mut document = decode(text).ok()?;
    changes.apply(&mut document).ok()?;
    limits::check_document(&document)
        .ok()
        .map(String::into_bytes)
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A CMI applies changes from their JSON text, the data store from the values: the text must
    /// give back the very numbers, or the cached copy and the stored document would differ.
    #[test]
    fn changes_read_back_from_their_text_are_the_same_changes() {
        let mut floats = vec![
            0.1 + 0.2,
            1e308,
            5e-324,
            2.2250738585072014e-308,
            -0.0,
            1.0 / 3.0,
        ];
        // A spread of bit patterns (a fixed sequence; NaN and infinities are not JSON numbers).
        let mut bits: u64 = 0x9E37_79B9_7F4A_7C15;
        while floats.len() < 2000 {
            bits = bits
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = f64::from_bits(bits);
            if f.is_finite() {
                floats.push(f);
            }
        }
        for f in floats {
            let changes = Changes::new().set("a", f).inc("b", f);
            let text = serde_json::to_vec(&changes.to_json()).unwrap();
            let back = Changes::from_json(&parse_json(&text).unwrap()).unwrap();
            assert_eq!(back, changes, "{f:e}");
        }
    }

    #[test]
    fn a_copy_that_cannot_take_the_changes_or_grows_too_large_is_dropped() {
        let text = br#"{"n":1,"s":"a"}"#;
        let inc = Changes::new().inc("n", 1);
        assert_eq!(
            apply_to_text(text, &inc),
            Some(br#"{"n":2,"s":"a"}"#.to_vec())
        );
        assert_eq!(apply_to_text(b"[1]", &inc), None, "not a document");
        assert_eq!(apply_to_text(b"{", &inc), None, "not JSON");
        assert_eq!(
            apply_to_text(text, &Changes::new().inc("s", 1)),
            None,
            "wrong type"
        );
        let big = "x".repeat(limits::MAX_DOCUMENT_BYTES);
        assert_eq!(
            apply_to_text(text, &Changes::new().set("big", big)),
            None,
            "past the size bound"
        );
        assert!(decode(&encode(&json!({"a": 1}).as_object().unwrap().clone())).is_ok());
    }
}
