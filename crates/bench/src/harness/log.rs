//! What the threads of a run log for validation: each thread keeps a log, and the logs of all
//! threads and AppNodes are merged into one history (AppNodes send theirs as JSON).

use std::collections::HashSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A run's log.
pub trait RunLog: Default + Send + Serialize + DeserializeOwned {
    /// Appends another thread's (or AppNode's) log.
    fn merge(&mut self, other: Self);
    /// Design 1 (write-back per document): the distinct documents the log's writes wrote.
    fn written_documents(&self) -> u64 {
        0
    }
}

/// A logged write.
pub trait LoggedWrite {
    /// The document it wrote (a record, a member), as a number.
    fn document(&self) -> u64;
}

/// The reads and the writes a run made, each with its start and end, for benchmarks that
/// validate every read against the writes (YCSB, BG).
#[derive(Debug, Serialize, Deserialize)]
pub struct ReadWriteLog<R, W> {
    /// What was read.
    pub reads: Vec<R>,
    /// What was written (or may have been).
    pub writes: Vec<W>,
}

impl<R, W> Default for ReadWriteLog<R, W> {
    fn default() -> Self {
        ReadWriteLog {
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }
}

impl<R, W> RunLog for ReadWriteLog<R, W>
where
    R: Send + Serialize + DeserializeOwned,
    W: LoggedWrite + Send + Serialize + DeserializeOwned,
{
    fn merge(&mut self, other: Self) {
        self.reads.extend(other.reads);
        self.writes.extend(other.writes);
    }

    fn written_documents(&self) -> u64 {
        let documents: HashSet<u64> = self.writes.iter().map(LoggedWrite::document).collect();
        documents.len() as u64
    }
}
