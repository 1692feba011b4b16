//! The document model of cads: a document is a JSON object, changed by operators (`$set`, `$inc`,
//! `$push`, ...; 000 Table 3.2) within the bounds of [`limits`]. The data store applies changes
//! to the stored document and the cache server to the cached copy (`LUPDATE`), so both must read
//! and apply them alike: this crate is that one definition.

mod changes;
mod json;
pub mod limits;

pub use changes::{get_path, split_path, Change, Changes, Op};
pub use json::parse_json;
pub use limits::LimitExceeded;

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
/// changes cannot apply to it (an operator on a field of the wrong type, a bound passed): a
/// cached copy that cannot take a change is dropped, and the data store reports the error.
pub fn apply_to_text(text: &[u8], changes: &Changes) -> Option<Vec<u8>> {
    let mut document = decode(text).ok()?;
    changes.apply(&mut document).ok()?;
    Some(encode(&document))
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
