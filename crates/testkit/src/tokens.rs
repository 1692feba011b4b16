//! Checks shared by the tests in which writers append tokens to documents while processes or
//! CMIs die: no read misses a token acknowledged before it began, and the data store holds every
//! acknowledged token exactly once.

use std::fmt::Debug;

/// A write acknowledged: the document's index, the token, when the test learnt of it.
pub type Ack<T> = (usize, String, T);
/// A read: the document's index, when it began, the tokens it saw.
pub type Read<T> = (usize, T, Vec<String>);

/// Asserts that every read saw every token acknowledged (on the test's clock, any ordered `T`)
/// before it began.
pub fn assert_fresh<T: PartialOrd + Debug>(what: &str, acks: &[Ack<T>], reads: &[Read<T>]) {
    for (doc, start, seen) in reads {
        for (_, token, _) in acks.iter().filter(|(d, _, at)| d == doc && at < start) {
            assert!(
                seen.contains(token),
                "{what}: a read of document {doc} begun at {start:?} misses {token}"
            );
        }
    }
}

/// Asserts that `stored`, document `doc`'s tokens as the data store has them, holds none twice
/// and every token acknowledged for it.
pub fn assert_stored_once<T>(what: &str, doc: usize, stored: &[String], acks: &[Ack<T>]) {
    let mut unique = stored.to_vec();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        stored.len(),
        "{what}: document {doc}: a write applied twice"
    );
    for (_, token, _) in acks.iter().filter(|(d, ..)| *d == doc) {
        assert!(
            stored.contains(token),
            "{what}: document {doc}: {token} lost"
        );
    }
}
