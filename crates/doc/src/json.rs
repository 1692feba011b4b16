//! JSON text read strictly: an object that names a key twice is an error. serde_json keeps the
//! last of two equal keys, so `{"$set": {"a": 1}, "$set": {"b": 2}}` would silently lose a change.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::{DocError, Result};

/// Parses JSON text into a value, refusing duplicate keys in any object
/// ([`DocError::Invalid`]). Nesting is bounded by serde_json's recursion limit (128).
pub fn parse_json(text: &[u8]) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = Strict
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| DocError::Invalid(format!("bad JSON: {e}")))?;
    Ok(value)
}

/// A value in which no object has a key twice.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Strict)?;
            if fields.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate key {key:?}")));
            }
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"a": [1, -2, 3.5, "s", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        assert_eq!(
            parse_json(text.as_bytes()).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert_eq!(parse_json(b" [] ").unwrap(), json!([]));
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth_and_trailing_text() {
        for bad in [
            &br#"{"$set": {"a": 1}, "$set": {"b": 2}}"#[..],
            br#"{"$set": {"a": 1, "a": 2}}"#,
            br#"[{"x": {"y": 1, "y": 1}}]"#,
            br#"{"a": 1} {"b": 2}"#,
            b"{",
        ] {
            assert!(
                matches!(parse_json(bad), Err(DocError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
