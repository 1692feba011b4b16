//! Background workers (BGTs, 000 §3.2): threads that find buffered writes through the
//! PendingWrites partitions and apply them with Algorithm 2. Each worker owns the partitions
//! `p` with `p % workers == its index`, so two workers never scan the same partition (and the
//! exclusive leases of Algorithm 2 keep them apart should they meet on a document anyway).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::design1::{apply_buffered, pending, pending_in};
use crate::error::{Error, Result};
use crate::Cads;

/// Running background workers. Dropping the handle stops them (without draining).
pub struct Workers {
    cads: Arc<Cads>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Longest nap of an idle worker between scans.
const MAX_IDLE: Duration = Duration::from_millis(50);

impl Workers {
    /// Starts `count` workers. Buffered writes left by a process that stopped are found and
    /// applied like any other: they are listed in PendingWrites.
    pub fn start(cads: Arc<Cads>, count: usize) -> Workers {
        let stop = Arc::new(AtomicBool::new(false));
        let count = count.max(1);
        let threads = (0..count)
            .map(|index| {
                let (cads, stop) = (cads.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("cads-bgt-{index}"))
                    .spawn(move || work(&cads, index, count, &stop))
                    .expect("start a write-back worker")
            })
            .collect();
        Workers {
            cads,
            stop,
            threads,
        }
    }

    pub fn count(&self) -> usize {
        self.threads.len()
    }

    /// Applies every buffered write from this thread too, until none is left or `timeout` passes
    /// (then an error says how many remain). For a clean shutdown: stop writing, drain, stop.
    pub fn drain(&self, timeout: Duration) -> Result<()> {
        drain(&self.cads, timeout)
    }

    /// Stops the workers and waits for them (a worker finishes the buffered write it is applying).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Applies buffered writes until none is left or `timeout` passes.
pub fn drain(cads: &Cads, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = pending(cads)?;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::App(format!(
                "{} documents still have buffered writes after {timeout:?}",
                left.len()
            )));
        }
        for doc in &left {
            if let Err(e) = apply_buffered(cads, doc) {
                tracing::debug!(error = %e, ?doc, "drain: applying a buffered write failed; retrying");
            }
        }
    }
}

fn work(cads: &Cads, index: usize, count: usize, stop: &AtomicBool) {
    let partitions = cads.config().write_back.partitions.max(1);
    let mut idle = Duration::from_millis(1);
    while !stop.load(Ordering::Acquire) {
        let mut applied = false;
        for partition in (index..partitions).step_by(count) {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let docs = match pending_in(cads, partition) {
                Ok(docs) => docs,
                Err(e) => {
                    tracing::debug!(error = %e, partition, "worker: cannot read PendingWrites");
                    continue;
                }
            };
            for doc in docs {
                match apply_buffered(cads, &doc) {
                    Ok(true) => applied = true,
                    Ok(false) => {}
                    // A worker that dies here is "restarted" by carrying on: what it left behind is
                    // found again through PendingWrites once its leases expire.
                    Err(e) => tracing::debug!(error = %e, ?doc, "worker: apply failed"),
                }
            }
        }
        if applied {
            idle = Duration::from_millis(1);
        } else {
            std::thread::sleep(idle);
            idle = (idle * 2).min(MAX_IDLE);
        }
    }
}
