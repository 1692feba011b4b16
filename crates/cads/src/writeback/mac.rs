//! Authenticated write-back objects. Workers and readers act on what write-back keeps in the
//! cache: a session object is SQL that a worker runs, a buffered write is a document write. Anyone
//! able to write to a CMI could otherwise have the data store run what they like
//! (`SET BS:f1 '{"q":"w1","s":[["DELETE FROM customer",[]]],...}'` plus `APPEND SQ:w1 "f1\n"`).
//! So every such object, and every line of the lists that lead to them, carries a tag: HMAC-SHA256
//! (truncated to 128 bits) under a key the AppNodes of a deployment share, over the cache key it
//! lives under and its bytes. An object or a line whose tag does not verify is refused: logged,
//! counted ([`WriteBackStats`](super::WriteBackStats)), and moved past without stopping its queue.
//!
//! The tag binds the object to its key, so a genuine object copied under another key (another
//! session id, another queue, another document) is refused too. It does not bind it to a time: an
//! old genuine object put back under its own key is not told from a current one. What the MACs
//! do and do not protect against is in docs/ARCHITECTURE.md, "Trust".
//!
//! A sealed value is the payload, a space and the tag in hex; the payload holds no line break, so
//! sealed lines make lists as before.

use std::fmt;
use std::path::Path;

use cads_store::{DataStore, Dialect, Isolation, SqlValue, StoreError};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::hex::{hex, push_hex, unhex};

/// Bytes of a tag: HMAC-SHA256 truncated to its first 128 bits (RFC 2104 §5 allows half the
/// output).
pub const TAG_BYTES: usize = 16;

/// The shortest key accepted.
pub const MIN_KEY_BYTES: usize = 16;

/// The table keeping the key of [`MacKey::Stored`].
pub const KEY_TABLE: &str = "cads_write_back_key";

/// Where write-back's MAC key comes from ([`WriteBackConfig::mac_key`](super::WriteBackConfig)).
/// Every AppNode of a deployment must use the same key: objects one writes under a key another
/// does not have are refused by the other. Change the setting only with nothing buffered (after a
/// drain).
#[derive(Clone, Default, PartialEq, Eq)]
pub enum MacKey {
    /// A key generated on first use (32 random bytes) and kept in the data store, in the table
    /// `cads_write_back_key`: every AppNode of a deployment shares the data store, so they agree
    /// without configuration, and what can write to the CMIs but not read the data store cannot
    /// forge a tag. A process reads it the first time it buffers or applies a write (so it must
    /// reach the data store once before it can buffer).
    #[default]
    Stored,
    /// This key, given to every AppNode (at least [`MIN_KEY_BYTES`] bytes).
    Given(Vec<u8>),
    /// No MACs: objects are written and read without tags. For deployments whose CMIs no one but
    /// the AppNodes can write to, and to measure what the MACs cost.
    Off,
}

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MacKey::Stored => f.write_str("Stored"),
            MacKey::Given(key) => write!(f, "Given({} bytes)", key.len()),
            MacKey::Off => f.write_str("Off"),
        }
    }
}

impl MacKey {
    /// Reads a setting as the command line spells it: `stored`, `off`, or `file:PATH` (a file
    /// holding the key in hex, at least 32 digits; surrounding white space is ignored).
    pub fn parse(spec: &str) -> Result<MacKey, String> {
        match spec {
            "stored" => Ok(MacKey::Stored),
            "off" => Ok(MacKey::Off),
            _ => match spec.strip_prefix("file:") {
                Some(path) => MacKey::from_file(Path::new(path)),
                None => Err(format!(
                    "bad write-back key {spec:?}: use stored, off or file:PATH"
                )),
            },
        }
    }

    /// The seal this setting gives; for [`MacKey::Stored`], the key read from the data store,
    /// created there first if there is none.
    pub fn seal(&self, store: &dyn DataStore) -> Result<Seal, StoreError> {
        match self {
            MacKey::Off => Ok(Seal::off()),
            MacKey::Given(key) if key.len() < MIN_KEY_BYTES => Err(StoreError::Invalid(format!(
                "a write-back key needs at least {MIN_KEY_BYTES} bytes, not {}",
                key.len()
            ))),
            MacKey::Given(key) => Ok(Seal::new(key)),
            MacKey::Stored => stored_key(store).map(|key| Seal::new(&key)),
        }
    }

    fn from_file(path: &Path) -> Result<MacKey, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the write-back key {}: {e}", path.display()))?;
        let key = unhex(text.trim())
            .filter(|key| key.len() >= MIN_KEY_BYTES)
            .ok_or_else(|| {
                format!(
                    "{} does not hold a write-back key: {} or more hex digits",
                    path.display(),
                    2 * MIN_KEY_BYTES
                )
            })?;
        Ok(MacKey::Given(key))
    }
}

/// Seals and opens write-back objects under one key (or, with [`MacKey::Off`], passes them
/// through).
#[derive(Clone)]
pub struct Seal {
    mac: Option<Hmac<Sha256>>,
}

impl fmt::Debug for Seal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.mac.is_some() {
            "Seal(HMAC-SHA256)"
        } else {
            "Seal(off)"
        })
    }
}

impl Seal {
    /// Sealing under `key`.
    pub fn new(key: &[u8]) -> Seal {
        Seal {
            mac: Some(Hmac::new_from_slice(key).expect("HMAC takes keys of any length")),
        }
    }

    /// No tags.
    pub fn off() -> Seal {
        Seal { mac: None }
    }

    fn mac(&self, context: &[u8], payload: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = self.mac.clone()?;
        // The context's length first, so that no (context, payload) pair reads as another.
        mac.update(&(context.len() as u64).to_be_bytes());
        mac.update(context);
        mac.update(payload);
        Some(mac)
    }

    /// `payload` sealed for the cache key `context`: the payload, a space and its tag in hex.
    /// The payload must not hold a line break.
    pub fn seal(&self, context: &[u8], payload: &[u8]) -> Vec<u8> {
        debug_assert!(!payload.contains(&b'\n'), "sealed payloads are one line");
        let Some(mac) = self.mac(context, payload) else {
            return payload.to_vec();
        };
        let tag = mac.finalize().into_bytes();
        let mut sealed = Vec::with_capacity(payload.len() + 1 + 2 * TAG_BYTES);
        sealed.extend_from_slice(payload);
        sealed.push(b' ');
        push_hex(&mut sealed, &tag[..TAG_BYTES]);
        sealed
    }

    /// The payload of a value sealed for `context`, or `None` if its tag does not verify (or it
    /// has none).
    pub fn open<'v>(&self, context: &[u8], sealed: &'v [u8]) -> Option<&'v [u8]> {
        if self.mac.is_none() {
            return Some(sealed);
        }
        let split = sealed.len().checked_sub(2 * TAG_BYTES + 1)?;
        let (payload, tail) = sealed.split_at(split);
        let tag = unhex(std::str::from_utf8(tail.strip_prefix(b" ")?).ok()?)?;
        self.mac(context, payload)?
            .verify_truncated_left(&tag)
            .ok()
            .map(|()| payload)
    }
}

/// The deployment's key from [`KEY_TABLE`], created there first if there is none. Processes
/// racing to create it all insert-if-absent and then read the one row, so they end with the same.
fn stored_key(store: &dyn DataStore) -> Result<Vec<u8>, StoreError> {
    store.create_if_absent(&format!(
        "CREATE TABLE IF NOT EXISTS {KEY_TABLE} (id INTEGER PRIMARY KEY, secret VARCHAR(64) NOT NULL)"
    ))?;
    if let Some(key) = read_key(store)? {
        return Ok(key);
    }
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh)
        .map_err(|e| StoreError::Backend(format!("no randomness for a write-back key: {e}")))?;
    let insert = match store.dialect() {
        Dialect::Sqlite => format!("INSERT OR IGNORE INTO {KEY_TABLE} (id, secret) VALUES (1, ?)"),
        Dialect::Postgres => format!(
            "INSERT INTO {KEY_TABLE} (id, secret) VALUES (1, ?) ON CONFLICT (id) DO NOTHING"
        ),
        Dialect::MySql => format!("INSERT IGNORE INTO {KEY_TABLE} (id, secret) VALUES (1, ?)"),
    };
    let mut tx = store.begin(Isolation::ReadCommitted)?;
    tx.execute(&insert, &[SqlValue::Text(hex(&fresh))])?;
    tx.commit()?;
    read_key(store)?.ok_or_else(|| StoreError::Backend(format!("{KEY_TABLE} holds no key")))
}

fn read_key(store: &dyn DataStore) -> Result<Option<Vec<u8>>, StoreError> {
    let mut tx = store.begin_read(Isolation::ReadCommitted)?;
    let rows = tx.query(&format!("SELECT secret FROM {KEY_TABLE} WHERE id = 1"), &[])?;
    tx.commit()?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let text: String = row.get(0)?;
    unhex(text.trim())
        .filter(|key| key.len() >= MIN_KEY_BYTES)
        .map(Some)
        .ok_or_else(|| StoreError::Backend(format!("{KEY_TABLE} holds no valid key")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_under_their_key_and_context() {
        let seal = Seal::new(b"0123456789abcdef0123456789abcdef");
        let sealed = seal.seal(b"BS:a", br#"{"q":"w1"}"#);
        assert_eq!(sealed.len(), 10 + 1 + 2 * TAG_BYTES);
        assert_eq!(seal.open(b"BS:a", &sealed), Some(&br#"{"q":"w1"}"#[..]));
        // Another key, another context, a changed payload or tag, no tag at all.
        let other = Seal::new(b"fedcba9876543210fedcba9876543210");
        assert_eq!(other.open(b"BS:a", &sealed), None);
        assert_eq!(seal.open(b"BS:b", &sealed), None);
        let mut changed = sealed.clone();
        changed[3] ^= 1;
        assert_eq!(seal.open(b"BS:a", &changed), None);
        let mut retagged = sealed.clone();
        let last = retagged.len() - 1;
        retagged[last] = if retagged[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(seal.open(b"BS:a", &retagged), None);
        assert_eq!(seal.open(b"BS:a", br#"{"q":"w1"}"#), None);
        assert_eq!(seal.open(b"BS:a", b""), None);
        // The context's length is part of the input: ("ab", "c") is not ("a", "bc").
        let ab = seal.seal(b"ab", b"c");
        let tag = &ab[2..];
        let mut shifted = b"bc".to_vec();
        shifted.extend_from_slice(tag);
        assert_eq!(seal.open(b"a", &shifted), None);
    }

    #[test]
    fn seals_say_whether_they_tag() {
        assert_eq!(format!("{:?}", Seal::new(&[7; 32])), "Seal(HMAC-SHA256)");
        assert_eq!(format!("{:?}", Seal::off()), "Seal(off)");
    }

    fn memory_store() -> std::sync::Arc<dyn DataStore> {
        cads_store::open("sqlite::memory:", &cads_store::StoreOptions::default()).unwrap()
    }

    #[test]
    fn a_given_key_needs_the_shortest_length() {
        let store = memory_store();
        let sealed = |key: Vec<u8>| {
            MacKey::Given(key)
                .seal(store.as_ref())
                .map(|seal| seal.seal(b"k", b"v"))
        };
        assert_eq!(
            sealed(vec![5; MIN_KEY_BYTES]).unwrap(),
            Seal::new(&[5; MIN_KEY_BYTES]).seal(b"k", b"v")
        );
        assert!(matches!(
            sealed(vec![5; MIN_KEY_BYTES - 1]),
            Err(StoreError::Invalid(_))
        ));
    }

    /// A stored key is the one in the table, random and full length: what a constant key would
    /// give, anyone could forge.
    #[test]
    fn a_stored_key_is_random_kept_and_shared() {
        let store = memory_store();
        let first = MacKey::Stored.seal(store.as_ref()).unwrap();
        let again = MacKey::Stored.seal(store.as_ref()).unwrap();
        assert_eq!(first.seal(b"k", b"v"), again.seal(b"k", b"v"));
        let key = read_key(store.as_ref()).unwrap().unwrap();
        assert_eq!(key.len(), 32);
        assert_eq!(first.seal(b"k", b"v"), Seal::new(&key).seal(b"k", b"v"));
        for guess in [vec![], vec![0], vec![1], vec![0; 32]] {
            assert_eq!(Seal::new(&guess).open(b"k", &first.seal(b"k", b"v")), None);
        }

        let other = MacKey::Stored.seal(memory_store().as_ref()).unwrap();
        assert_ne!(other.seal(b"k", b"v"), first.seal(b"k", b"v"));
    }

    #[test]
    fn off_passes_values_through() {
        let off = Seal::off();
        assert_eq!(off.seal(b"k", b"x y"), b"x y");
        assert_eq!(off.open(b"k", b"anything"), Some(&b"anything"[..]));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(MacKey::parse("stored"), Ok(MacKey::Stored));
        assert_eq!(MacKey::parse("off"), Ok(MacKey::Off));
        assert!(MacKey::parse("on").is_err());
        let scratch = cads_testkit::ScratchDir::new("mac");
        let dir = scratch.path();
        let good = dir.join("good");
        std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(
            MacKey::parse(&format!("file:{}", good.display())),
            Ok(MacKey::Given(vec![0xab; 32]))
        );
        let short = dir.join("short");
        std::fs::write(&short, "abcd").unwrap();
        assert!(MacKey::parse(&format!("file:{}", short.display())).is_err());
        assert!(MacKey::parse(&format!("file:{}", dir.join("missing").display())).is_err());
        assert_eq!(
            format!("{:?}", MacKey::Given(vec![1; 32])),
            "Given(32 bytes)"
        );
    }
}
