//! A document kept as its JSON text, for a reader that decodes only what it uses.
//!
//! Reading a document into a [`Document`] builds a tree: a `String` for every key and every
//! string value, a map node per few fields. A cache hit that then looks at three fields spends
//! most of its own time building and dropping that tree. [`DocumentText`] is the text as cached
//! (and as stored), checked to be one JSON object; [`DocumentText::parse`] decodes it into the
//! reader's own type, which may borrow its strings from the text.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::{decode, encode, DocError, Document, Result};

/// The JSON text of one document (a JSON object). Kept as a `String`, so that decoders read it
/// as text known to be UTF-8 and do not check each string they borrow again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentText(String);

impl DocumentText {
    /// The text, if it is UTF-8 and one JSON object. It is read once without building
    /// anything, which leaves three things to whoever decodes it, as [`parse`](Self::parse)
    /// and [`to_document`](Self::to_document) do: an object naming a key twice, a `\u` escape
    /// of half a surrogate pair, and a number too large for a float.
    pub fn new(text: Vec<u8>) -> Result<DocumentText> {
        let text = String::from_utf8(text)
            .map_err(|e| DocError::Invalid(format!("a document is UTF-8 text: {e}")))?;
        let mut de = serde_json::Deserializer::from_str(&text);
        de.deserialize_map(AnObject)
            .and_then(|()| de.end())
            .map_err(|e| DocError::Invalid(format!("a document is one JSON object: {e}")))?;
        Ok(DocumentText(text))
    }

    /// The text of `document`.
    pub fn of(document: &Document) -> DocumentText {
        DocumentText(String::from_utf8(encode(document)).expect("JSON text is UTF-8"))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_bytes()
    }

    /// Decodes the document into `T`, which may borrow strings from the text (`&str` for those
    /// without escapes, `Cow<str>` for any).
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
        serde_json::from_str(&self.0).map_err(|e| DocError::Invalid(format!("bad document: {e}")))
    }

    /// The document as a tree (an object naming a key twice is refused, as [`decode`] does).
    pub fn to_document(&self) -> Result<Document> {
        decode(self.0.as_bytes())
    }
}

/// Accepts a JSON object and nothing else, reading past its values.
struct AnObject;

impl<'de> Visitor<'de> for AnObject {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[test]
    fn only_one_json_object_is_a_document() {
        for text in [
            &br#"{"a": [1, {"b": null}], "c": "d"}"#[..],
            b" {} ",
            b"{\"a\":\"\\u00e9\"}",
        ] {
            DocumentText::new(text.to_vec()).unwrap();
        }
        for text in [
            &b"[1]"[..],
            b"\"a\"",
            b"1",
            b"",
            b"{",
            b"{} {}",
            b"{\"a\":}",
            b"null",
            b"{\"a\": \"\xff\"}",
        ] {
            let refused = DocumentText::new(text.to_vec());
            assert!(refused.is_err(), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn a_document_reads_back_as_its_tree_and_as_a_view() {
        #[derive(Deserialize)]
        struct View<'a> {
            #[serde(borrow)]
            name: Cow<'a, str>,
            #[serde(borrow)]
            quoted: Cow<'a, str>,
            n: i64,
        }
        let document = json!({"name": "ada", "quoted": "a \"b\"", "n": 3, "more": [1, 2]});
        let document = document.as_object().unwrap().clone();
        let text = DocumentText::of(&document);
        assert_eq!(text.to_document().unwrap(), document);
        let view: View<'_> = text.parse().unwrap();
        assert!(matches!(view.name, Cow::Borrowed("ada")), "no copy");
        assert_eq!((view.quoted.as_ref(), view.n), ("a \"b\"", 3));
        assert!(text.parse::<Vec<i64>>().is_err());
        assert_eq!(DocumentText::new(text.clone().into_bytes()).unwrap(), text);
    }

    #[test]
    fn what_the_check_leaves_the_decoders_refuse() {
        for text in [
            &br#"{"a": 1, "a": 2}"#[..],
            br#"{"a": "\ud800"}"#,
            br#"{"a": 1e400}"#,
        ] {
            let text = DocumentText::new(text.to_vec()).unwrap();
            assert!(text.to_document().is_err(), "{text:?}");
        }
        let text = DocumentText::new(br#"{"a": "\ud800"}"#.to_vec()).unwrap();
        assert!(text.parse::<serde_json::Value>().is_err());
    }
}
