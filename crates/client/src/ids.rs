//! Session ids: unique across every client, handed out in ranges by the coordinator (000 §5.1).
//! The client takes one range at a time and numbers its sessions from it.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use cads_protocol::SessionId;

/// Where ranges of session ids come from (the coordinator, `cads-coord`).
pub trait RangeSource: Send + Sync {
    /// A range of ids nobody else has or will get.
    fn next_range(&self) -> Range<SessionId>;
}

/// Any closure handing out disjoint ranges is a source (tests, single-process tools).
impl<F: Fn() -> Range<SessionId> + Send + Sync> RangeSource for F {
    fn next_range(&self) -> Range<SessionId> {
        self()
    }
}

/// Numbers sessions from ranges, asking the source for a new range when one runs out.
pub struct SessionIds {
    source: Arc<dyn RangeSource>,
    current: Mutex<Range<SessionId>>,
}

impl SessionIds {
    pub fn new(source: Arc<dyn RangeSource>) -> SessionIds {
        SessionIds {
            source,
            current: Mutex::new(0..0),
        }
    }

    pub fn next(&self) -> SessionId {
        let mut range = self.current.lock().expect("session id lock");
        if range.is_empty() {
            *range = self.source.next_range();
            assert!(
                !range.is_empty(),
                "the coordinator handed out an empty range"
            );
        }
        let id = range.start;
        range.start += 1;
        id
    }
}
