//! Configuration ids (Gemini, 004 §3.2.4): the CMI's latest id, stamped on every entry it writes,
//! and an id per fragment. An entry whose id is below its fragment's id is obsolete and reads as a
//! miss, which is how a recovering instance discards fragments it cannot prove fresh.

use cads_protocol::fragment::fragment_of;
use cads_protocol::ErrorReply;

/// Most fragments a CMI accepts; each costs eight bytes.
pub const MAX_FRAGMENTS: u32 = 1 << 20;

#[derive(Clone, Debug, Default)]
pub struct ConfigIds {
    /// The latest configuration id the coordinator published to this CMI.
    pub latest: u64,
    fragment_ids: Vec<u64>,
}

impl ConfigIds {
    pub fn fragments(&self) -> u32 {
        self.fragment_ids.len() as u32
    }

    /// Splits the key space into `count` fragments (0: no fragments, nothing is ever discarded),
    /// at most [`MAX_FRAGMENTS`]. Fragments that are new start with id 0.
    pub fn set_fragments(&mut self, count: u32) -> Result<(), ErrorReply> {
        if count > MAX_FRAGMENTS {
            return Err(ErrorReply::err(format!(
                "at most {MAX_FRAGMENTS} fragments"
            )));
        }
        self.fragment_ids.resize(count as usize, 0);
        Ok(())
    }

    pub fn fragment_id(&self, fragment: u32) -> Option<u64> {
        self.fragment_ids.get(fragment as usize).copied()
    }

    pub fn all_fragment_ids(&self) -> &[u64] {
        &self.fragment_ids
    }

    /// Sets a fragment's id. It may go down: a recovering primary's fragment is restored to the id
    /// it had when its instance failed (004 Example 3.1).
    pub fn set_fragment_id(&mut self, fragment: u32, id: u64) -> Result<(), ErrorReply> {
        let slot = self
            .fragment_ids
            .get_mut(fragment as usize)
            .ok_or_else(|| ErrorReply::err("fragment out of range"))?;
        *slot = id;
        Ok(())
    }

    /// Publishes a new latest id; ids never go down.
    pub fn set_latest(&mut self, id: u64) -> Result<(), ErrorReply> {
        if id < self.latest {
            return Err(ErrorReply::err("configuration id must not decrease"));
        }
        self.latest = id;
        Ok(())
    }

    /// Whether an entry of `key` written under configuration `entry_id` is still valid.
    pub fn is_current(&self, key: &[u8], entry_id: u64) -> bool {
        if self.fragment_ids.is_empty() {
            return true;
        }
        let fragment = fragment_of(key, self.fragment_ids.len() as u32);
        entry_id >= self.fragment_ids[fragment as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_only_rises_and_fragments_may_be_restored() {
        let mut ids = ConfigIds::default();
        ids.set_latest(10).unwrap();
        assert!(ids.set_latest(9).is_err());
        ids.set_fragments(2).unwrap();
        assert!(ids.set_fragments(MAX_FRAGMENTS + 1).is_err());
        ids.set_fragment_id(1, 1000).unwrap();
        ids.set_fragment_id(1, 100).unwrap();
        assert_eq!(ids.fragment_id(1), Some(100));
        assert!(ids.set_fragment_id(2, 1).is_err());
    }

    #[test]
    fn without_fragments_everything_is_current() {
        let ids = ConfigIds::default();
        assert!(ids.is_current(b"k", 0));
    }
}
