//! YCSB's usertable as a cads application: records are documents of a
//! [`Collection`](cads::documents::Collection) named [`TABLE`], keyed as YCSB keys them
//! ([`key_name`]), with `fieldcount` string fields of `fieldlength` bytes.
//!
//! Every write puts a *version token* into the record: the field `v`, and the first 16
//! characters (hex) of every field it writes, the rest of whose value is derived from the token.
//! A reader can so tell exactly which write it saw and whether the record is intact
//! ([`inspect`]); the benchmark (`cads_bench::ycsb`) hands out the tokens and validates.

use cads::store::{Changes, Document};
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
    let mut value = format!("{token:016x}");
    let mut rng = Rng::new(token ^ (field as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    'fill: while value.len() < len {
        for byte in rng.next_u64().to_le_bytes() {
            if value.len() == len {
                break 'fill;
            }
            value.push(ALPHANUMERIC[byte as usize % ALPHANUMERIC.len()] as char);
        }
    }
    value.truncate(len);
    value
}

/// The name of field `i` (`field0`, `field1`, ...).
pub fn field_name(i: usize) -> String {
    format!("field{i}")
}

/// A whole record at version `token`.
pub fn record(token: u64, fields: usize, len: usize) -> Document {
    let mut doc: Document = (0..fields)
        .map(|i| (field_name(i), Value::String(field_value(token, i, len))))
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

/// Checks a record read from the cache or the data store.
pub fn inspect(doc: Option<&Document>, fields: usize, len: usize, all_fields: bool) -> Seen {
    let Some(doc) = doc else {
        return Seen {
            token: None,
            intact: false,
        };
    };
    let Some(token) = doc.get("v").and_then(Value::as_u64) else {
        return Seen {
            token: None,
            intact: false,
        };
    };
    let mut own = 0;
    for i in 0..fields {
        let Some(value) = doc.get(&field_name(i)).and_then(Value::as_str) else {
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
        if value != field_value(field_token, i, len) {
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
pub fn update(token: u64, field: Option<usize>, fields: usize, len: usize) -> Changes {
    let mut set = serde_json::Map::new();
    let written = match field {
        Some(i) => i..i + 1,
        None => 0..fields,
    };
    for i in written {
        set.insert(field_name(i), field_value(token, i, len).into());
    }
    set.insert("v".into(), token.into());
    Changes::from_json(&serde_json::json!({ "$set": set })).expect("$set of strings is valid")
}
