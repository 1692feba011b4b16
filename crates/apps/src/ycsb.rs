//! YCSB's usertable as a cads application: records are documents of a
//! [`Collection`](cads::documents::Collection) named [`TABLE`], keyed as YCSB keys them
//! ([`key_name`]), with `fieldcount` string fields of `fieldlength` bytes, or of lengths drawn
//! from Facebook's ETC value sizes ([`FieldLength`]).
//!
//! Every write puts a *version token* into the record: the field `v`, and the first 16
//! characters (hex) of every field it writes, the rest of whose value is derived from the token.
//! A reader can so tell exactly which write it saw and whether the record is intact
//! ([`inspect`]); the benchmark (`cads_bench::ycsb`) hands out the tokens and validates.

use std::borrow::Cow;

use cads::store::{Changes, Document, DocumentText};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Rng;

/// YCSB's table.
pub const TABLE: &str = "usertable";

const FNV_OFFSET_BASIS_64: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
const FNV_PRIME_64: i64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 low-to-high bytes of `value`, returned as Java's
/// `Math.abs` of the signed result (so `i64::MIN` stays negative, as in Java).
pub fn fnvhash64(value: i64) -> i64 {
    let mut value = value;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = value & 0xff;
        // Java's `>>` on a long: arithmetic.
        value >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash.wrapping_abs()
}

/// The record key of key number `keynum` (`CoreWorkload.buildKeyName`): `"user"` and the decimal
/// key number, which with `insertorder=hashed` is first replaced by [`fnvhash64`], left-padded
/// with zeros to `zeropadding` digits (YCSB's default 1: no padding).
pub fn key_name(keynum: i64, hashed: bool, zeropadding: usize) -> String {
    let number = if hashed { fnvhash64(keynum) } else { keynum };
    format!("user{number:0>zeropadding$}")
}

/// The bit that marks the version a record was loaded with (`LOAD_BIT | keynum`); the versions
/// the benchmark's writes give are below it.
pub const LOAD_BIT: u64 = 1 << 52;

/// The version a record is loaded with.
pub fn load_token(keynum: i64) -> u64 {
    LOAD_BIT | keynum as u64
}

const ALPHANUMERIC: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The value of field `field` written by the write with version `token`: the token in 16 hex
/// digits, then letters and digits drawn from a generator seeded by (token, field). Like
/// YCSB's random field values, it is `len` bytes that do not compress much.
pub fn field_value(token: u64, field: usize, len: usize) -> String {
    let mut value = vec![0; len];
    write_field(token, field, &mut value);
    String::from_utf8(value).expect("hex digits, letters and digits")
}

/// Whether `value` is [`field_value`]`(token, field, len)`, without allocating for the usual
/// lengths: a reader checks every field of every record it reads.
pub fn is_field_value(value: &str, token: u64, field: usize, len: usize) -> bool {
    const ON_STACK: usize = 1024;
    if value.len() != len {
        return false;
    }
    let mut stack = [0; ON_STACK];
    let mut heap = Vec::new();
    let expected = if len <= ON_STACK {
        &mut stack[..len]
    } else {
        heap.resize(len, 0);
        &mut heap[..]
    };
    write_field(token, field, expected);
    value.as_bytes() == expected
}

/// The first `out.len()` bytes of field `field` at version `token` (see [`field_value`]).
fn write_field(token: u64, field: usize, out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = out.len().min(16);
    for (i, byte) in out[..digits].iter_mut().enumerate() {
        *byte = HEX[(token >> (60 - 4 * i)) as usize & 0xf];
    }
    let mut rng = Rng::new(token ^ (field as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for chunk in out[digits..].chunks_mut(8) {
        for (byte, drawn) in chunk.iter_mut().zip(rng.next_u64().to_le_bytes()) {
            *byte = ALPHANUMERIC_OF[drawn as usize];
        }
    }
}

/// The alphanumeric character each random byte stands for.
const ALPHANUMERIC_OF: [u8; 256] = {
    let mut table = [0; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = ALPHANUMERIC[i % ALPHANUMERIC.len()];
        i += 1;
    }
    table
};

/// How long the fields of a record are; in records, a number of bytes or `"etc"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldLength {
    /// Every field this many bytes (YCSB's `fieldlength`, 100).
    Fixed(usize),
    /// Each field as long as a value of Facebook's ETC pool (benchmarks.md Part B §4: Atikoglu
    /// et al., SIGMETRICS'12, §6, a generalized Pareto with σ = 214.476 and k = 0.348238, over
    /// the whole range as fbworkload draws it), drawn from the write's version and the field so
    /// that a reader can check it; at least [`MIN_FIELD_LENGTH`] bytes and at most 1 MB.
    Etc,
}

/// The shortest field: its version, in 16 hex digits.
pub const MIN_FIELD_LENGTH: usize = 16;

/// The longest ETC value (the reproductions' clip).
const ETC_MAX_LENGTH: f64 = 1_000_000.0;
const ETC_SIGMA: f64 = 214.476;
const ETC_K: f64 = 0.348238;

impl FieldLength {
    /// The length of field `field` as the write with version `token` writes it.
    pub fn of(self, token: u64, field: usize) -> usize {
        match self {
            FieldLength::Fixed(len) => len,
            FieldLength::Etc => {
                let mut rng =
                    Rng::new(token ^ (field as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
                // U in (0, 1], so that U^-k is finite; the generalized Pareto's inverse CDF
                // (θ = 0).
                let u = 1.0 - rng.next_f64();
                let x = ETC_SIGMA * (u.powf(-ETC_K) - 1.0) / ETC_K;
                x.clamp(MIN_FIELD_LENGTH as f64, ETC_MAX_LENGTH) as usize
            }
        }
    }

    /// A length as `--field-length` spells it: bytes, or `etc`.
    pub fn parse(text: &str) -> Option<FieldLength> {
        match text {
            "etc" => Some(FieldLength::Etc),
            _ => text.parse().ok().map(FieldLength::Fixed),
        }
    }
}

impl Serialize for FieldLength {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FieldLength::Fixed(len) => serializer.serialize_u64(*len as u64),
            FieldLength::Etc => serializer.serialize_str("etc"),
        }
    }
}

impl std::fmt::Display for FieldLength {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldLength::Fixed(len) => write!(f, "{len}"),
            FieldLength::Etc => f.write_str("etc"),
        }
    }
}

/// The name of field `i` (`field0`, `field1`, ...).
pub fn field_name(i: usize) -> String {
    format!("field{i}")
}

/// The names of the first fields, for a reader that looks every field up without making its
/// name (YCSB's records have 10).
const FIELD_NAMES: [&str; 16] = [
    "field0", "field1", "field2", "field3", "field4", "field5", "field6", "field7", "field8",
    "field9", "field10", "field11", "field12", "field13", "field14", "field15",
];

/// A whole record at version `token`.
pub fn record(token: u64, fields: usize, len: FieldLength) -> Document {
    let mut doc: Document = (0..fields)
        .map(|i| {
            (
                field_name(i),
                Value::String(field_value(token, i, len.of(token, i))),
            )
        })
        .collect();
    doc.insert("v".into(), token.into());
    doc
}

/// What a read saw of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Its version (`None`: the record was missing or had no version).
    pub token: Option<u64>,
    /// Whether every field is the value its own token derives, and the version's own write is
    /// among them (every field, when updates write all fields).
    pub intact: bool,
}

/// What [`inspect`] reads of a record: its version and its fields' values.
pub trait Record {
    /// The field `v`, if it is a version.
    fn version(&self) -> Option<u64>;
    /// The value of field `name`, if it is a string.
    fn field(&self, name: &str) -> Option<&str>;
}

impl Record for Document {
    fn version(&self) -> Option<u64> {
        self.get("v").and_then(Value::as_u64)
    }

    fn field(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }
}

/// A record decoded from its text ([`DocumentText`]) without building it as a document: the
/// version and the fields, string values borrowed from the text where they have no escapes.
#[derive(Debug, Default)]
pub struct RecordText<'a> {
    version: Option<u64>,
    /// Each field's name and value (`None`: not a string).
    fields: Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>,
}

impl<'a> RecordText<'a> {
    /// The record in `text`. A text that does not read as one (a `\u` escape of half a
    /// surrogate pair, which [`DocumentText::new`] lets through) reads as a record without
    /// version or fields, which [`inspect`] finds not intact.
    pub fn of(text: &'a DocumentText) -> RecordText<'a> {
        text.parse().unwrap_or_default()
    }
}

impl Record for RecordText<'_> {
    fn version(&self) -> Option<u64> {
        self.version
    }

    fn field(&self, name: &str) -> Option<&str> {
        // The last of two equal keys, as a document keeps it.
        self.fields
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// A JSON value as [`RecordText`] keeps a field's name or value: the string, borrowed from the
/// text when it has no escapes, or `None` for any other value.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct AnyValue;
        impl<'de> Visitor<'de> for AnyValue {
            type Value = MaybeStr<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_unit<E>(self) -> Result<MaybeStr<'de>, E> {
                Ok(MaybeStr(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeStr<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeStr<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
        }
        de.deserialize_any(AnyValue)
    }
}

impl<'de> Deserialize<'de> for RecordText<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = RecordText<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a YCSB record")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RecordText<'de>, A::Error> {
                let mut record = RecordText {
                    version: None,
                    fields: Vec::with_capacity(map.size_hint().unwrap_or(11)),
                };
                // Object keys are strings.
                while let Some(MaybeStr(Some(name))) = map.next_key()? {
                    if name == "v" {
                        record.version = map.next_value::<Value>()?.as_u64();
                    } else {
                        let MaybeStr(value) = map.next_value()?;
                        record.fields.push((name, value));
                    }
                }
                Ok(record)
            }
        }
        de.deserialize_map(Fields)
    }
}

/// Checks a record read from the cache or the data store.
pub fn inspect<R: Record + ?Sized>(
    doc: Option<&R>,
    fields: usize,
    len: FieldLength,
    all_fields: bool,
) -> Seen {
    let Some(doc) = doc else {
        return Seen {
            token: None,
            intact: false,
        };
    };
    let Some(token) = doc.version() else {
        return Seen {
            token: None,
            intact: false,
        };
    };
    let mut own = 0;
    for i in 0..fields {
        let name = match FIELD_NAMES.get(i) {
            Some(name) => Cow::Borrowed(*name),
            None => Cow::Owned(field_name(i)),
        };
        let Some(value) = doc.field(name.as_ref()) else {
            return Seen {
                token: Some(token),
                intact: false,
            };
        };
        let Some(field_token) = value
            .get(..16)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        else {
            return Seen {
                token: Some(token),
                intact: false,
            };
        };
        if !is_field_value(value, field_token, i, len.of(field_token, i)) {
            return Seen {
                token: Some(token),
                intact: false,
            };
        }
        if field_token == token {
            own += 1;
        }
    }
    let loaded = token & LOAD_BIT != 0;
    let intact = if all_fields || loaded {
        own == fields
    } else {
        own >= 1
    };
    Seen {
        token: Some(token),
        intact,
    }
}

/// The changes of an update to version `token`: `$set` of `v` and of every field (`field` None)
/// or of field `field` alone.
pub fn update(token: u64, field: Option<usize>, fields: usize, len: FieldLength) -> Changes {
    let mut set = serde_json::Map::new();
    let written = match field {
        Some(i) => i..i + 1,
        None => 0..fields,
    };
    for i in written {
        set.insert(
            field_name(i),
            field_value(token, i, len.of(token, i)).into(),
        );
    }
    set.insert("v".into(), token.into());
    Changes::from_json(&serde_json::json!({ "$set": set })).expect("$set of strings is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_lengths_follow_the_published_value_sizes() {
        let mut lengths: Vec<usize> = (0..100_000u64)
            .map(|token| FieldLength::Etc.of(token, 0))
            .collect();
        assert_eq!(FieldLength::Etc.of(7, 0), FieldLength::Etc.of(7, 0));
        assert_ne!(
            (0..10)
                .map(|f| FieldLength::Etc.of(7, f))
                .collect::<Vec<_>>(),
            vec![FieldLength::Etc.of(7, 0); 10],
            "each field draws its own length"
        );
        lengths.sort_unstable();
        assert!(lengths[0] >= MIN_FIELD_LENGTH && lengths[lengths.len() - 1] <= 1_000_000);
        // The generalized Pareto's median is σ(2^k - 1)/k ≈ 168 bytes (benchmarks.md Part B §4).
        let median = lengths[lengths.len() / 2];
        assert!((160..=176).contains(&median), "median {median}");
        let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
        assert!((290.0..370.0).contains(&mean), "mean {mean}");
        assert_eq!(FieldLength::Fixed(100).of(7, 3), 100);
    }

    #[test]
    fn records_of_etc_lengths_read_back_intact() {
        let token = 0x0000_0100_0000_0007;
        let doc = record(token, 3, FieldLength::Etc);
        let seen = inspect(Some(&doc), 3, FieldLength::Etc, true);
        assert_eq!((seen.token, seen.intact), (Some(token), true));
        for i in 0..3 {
            let value = doc[&field_name(i)].as_str().unwrap();
            assert_eq!(value.len(), FieldLength::Etc.of(token, i));
        }
        let mut cut = doc.clone();
        let value = cut[&field_name(1)].as_str().unwrap().to_string();
        cut.insert(field_name(1), value[..value.len() - 1].into());
        assert!(!inspect(Some(&cut), 3, FieldLength::Etc, true).intact);
    }

    /// A record read from its text is checked as the record read as a document: intact, cut,
    /// missing a field, with a field that is not a string, without its version.
    #[test]
    fn a_record_read_from_its_text_is_checked_as_the_document() {
        let token = 0x0000_0100_0000_0009;
        let whole = record(token, 4, FieldLength::Fixed(40));
        let mut cut = whole.clone();
        cut.insert(field_name(2), "0000010000000009".into());
        let mut missing = whole.clone();
        missing.remove(&field_name(3));
        let mut number = whole.clone();
        number.insert(field_name(0), 7.into());
        let mut unversioned = whole.clone();
        unversioned.remove("v");
        let seen = |doc: &Document| {
            let text = DocumentText::of(doc);
            let from_text = RecordText::of(&text);
            let from_text = inspect(Some(&from_text), 4, FieldLength::Fixed(40), true);
            (
                from_text,
                inspect(Some(doc), 4, FieldLength::Fixed(40), true),
            )
        };
        let (text, doc) = seen(&whole);
        assert_eq!((text, text.intact), (doc, true));
        for broken in [&cut, &missing, &number, &unversioned] {
            let (text, doc) = seen(broken);
            assert_eq!((text, text.intact), (doc, false));
        }
    }

    /// A field value starts with its version in hex and is fixed by (version, field); the check
    /// accepts it and nothing else: another field's, a changed byte, a shorter value.
    #[test]
    fn field_values_are_checked_byte_for_byte() {
        let token = 0x0123_4567_89ab_cdef;
        let value = field_value(token, 2, 40);
        assert_eq!(value.len(), 40);
        assert!(value.starts_with("0123456789abcdef"), "{value}");
        assert!(value[16..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(value, field_value(token, 2, 40));
        assert_eq!(field_value(token, 2, 8), "01234567");
        assert!(is_field_value(&value, token, 2, 40));
        assert!(!is_field_value(&value, token, 3, 40), "another field's");
        assert!(!is_field_value(&value[..39], token, 2, 39 + 1), "shorter");
        assert!(!is_field_value(&value, token, 2, 41), "longer expected");
        let mut changed = value.clone().into_bytes();
        changed[30] = if changed[30] == b'a' { b'b' } else { b'a' };
        let changed = String::from_utf8(changed).unwrap();
        assert!(!is_field_value(&changed, token, 2, 40));
    }

    #[test]
    fn the_names_kept_are_the_names_made() {
        for (i, name) in FIELD_NAMES.iter().enumerate() {
            assert_eq!(*name, field_name(i));
        }
    }

    #[test]
    fn field_lengths_parse_as_spelled() {
        assert_eq!(FieldLength::parse("etc"), Some(FieldLength::Etc));
        assert_eq!(FieldLength::parse("100"), Some(FieldLength::Fixed(100)));
        assert_eq!(FieldLength::parse("x"), None);
        assert_eq!(FieldLength::Etc.to_string(), "etc");
        assert_eq!(serde_json::to_string(&FieldLength::Fixed(9)).unwrap(), "9");
        assert_eq!(serde_json::to_string(&FieldLength::Etc).unwrap(), "\"etc\"");
    }
}
