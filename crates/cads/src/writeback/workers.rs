//! Background workers (BGTs, 000 §3.2): threads that find buffered writes through the
//! PendingWrites partitions (Design 1) and the session queues (Design 2) and apply them with
//! Algorithms 2 and 4. Each worker owns the partitions `p` with `p % workers == its index` and the
//! queues whose name hashes to its index, so two workers never scan the same list (and the
//! exclusive leases of the algorithms keep them apart should they meet anyway).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::design1::{self, apply_docs, pending_in, purge, Patience};
use super::design2;
use crate::background::Background;
use crate::cache_store::DocRef;
use crate::error::{Error, Result};
use crate::Cads;

/// Running background workers. Dropping the handle stops them (without draining).
pub struct Workers {
    cads: Arc<Cads>,
    threads: Background,
}

/// Longest nap of an idle worker between scans.
const MAX_IDLE: Duration = Duration::from_millis(50);

impl Workers {
    /// Starts `count` workers. Buffered writes left by a process that stopped are found and
    /// applied like any other: they are listed in PendingWrites and the queues.
    pub fn start(cads: Arc<Cads>, count: usize) -> Workers {
        let count = count.max(1);
        let mut threads = Background::new();
        for index in 0..count {
            let cads = cads.clone();
            threads.spawn(format!("cads-bgt-{index}"), move |stop| {
                work(&cads, index, count, stop)
            });
        }
        Workers { cads, threads }
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
        self.threads.stop();
    }
}

/// Applies buffered writes until none is left or `timeout` passes.
pub fn drain(cads: &Cads, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    let partitions: Vec<usize> = (0..cads.buffer_partitions()).collect();
    loop {
        let listed = pending_in(cads, &partitions)?;
        if !listed.refused.is_empty() {
            purge(cads, &listed.refused)?;
        }
        let documents: Vec<DocRef> = listed.docs.into_iter().flatten().collect();
        // Reading the queues as a worker does also removes refused lines from their list.
        let queues = design2::queues(cads)?;
        let sessions = design2::pending_sessions(cads)?;
        if documents.is_empty() && sessions == 0 {
            design1::apply_delayed(cads)?;
            design2::apply_delayed(cads)?;
            return Ok(());
        }
        if Instant::now() >= deadline {
            let cause = last_error.map_or(String::new(), |e: Error| format!("; last error: {e}"));
            return Err(Error::App(format!(
                "{} documents and {sessions} sessions still have buffered writes after \
                 {timeout:?}{cause}",
                documents.len()
            )));
        }
        for batch in documents.chunks(per_transaction(cads)) {
            if let Err(e) = apply_docs(cads, batch, Patience::Wait, None) {
                tracing::debug!(error = %e, "drain: applying buffered writes failed; retrying");
                last_error = Some(e);
            }
        }
        for queue in queues {
            if let Err(e) = design2::apply_queue(cads, &queue, None) {
                tracing::debug!(error = %e, queue, "drain: applying a queue failed; retrying");
                last_error = Some(e);
            }
        }
    }
}

/// Buffered writes of one document applied per data-store transaction.
fn per_transaction(cads: &Cads) -> usize {
    cads.config().write_back.documents_per_transaction.max(1)
}

fn work(cads: &Cads, index: usize, count: usize, stop: &AtomicBool) {
    let partitions: Vec<usize> = (index..cads.buffer_partitions()).step_by(count).collect();
    let mut idle = Duration::from_millis(1);
    while !stop.load(Ordering::Acquire) {
        let mut pass = Pass::default();
        match pending_in(cads, &partitions) {
            Ok(listed) => {
                if !listed.refused.is_empty() {
                    if let Err(e) = purge(cads, &listed.refused) {
                        tracing::debug!(error = %e, "worker: removing refused lines failed");
                    }
                }
                // Documents of all this worker's partitions share batches: with many partitions
                // each holds only a few documents at a time.
                let docs: Vec<DocRef> = listed.docs.into_iter().flatten().collect();
                for batch in docs.chunks(per_transaction(cads)) {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    match apply_docs(cads, batch, Patience::Wait, None) {
                        Ok(n) => pass.note(n, per_transaction(cads)),
                        // A worker that dies here is "restarted" by carrying on: what it left
                        // behind is found again through PendingWrites once its leases expire.
                        Err(e) => tracing::debug!(error = %e, "worker: apply failed"),
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "worker: cannot read PendingWrites"),
        }
        work_on_queues(cads, index, count, &mut pass);
        if pass.full {
            idle = Duration::from_millis(1);
        } else if pass.applied {
            idle = Duration::from_millis(1);
            nap(cads.config().write_back.worker_pause, stop);
        } else {
            nap(idle, stop);
            idle = (idle * 2).min(MAX_IDLE);
        }
    }
}

/// Sleeps for `length`, in slices of at most `MAX_IDLE`, so that stopping the workers does not
/// wait out a whole pause.
fn nap(length: Duration, stop: &AtomicBool) {
    let end = Instant::now() + length;
    while !stop.load(Ordering::Acquire) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(MAX_IDLE));
    }
}

/// What one pass of a worker did.
#[derive(Default)]
struct Pass {
    /// It applied something.
    applied: bool,
    /// It applied a full batch somewhere: more may be waiting, so the next pass starts at once.
    full: bool,
}

impl Pass {
    fn note(&mut self, applied: usize, batch: usize) {
        self.applied |= applied > 0;
        self.full |= applied >= batch;
    }
}

/// One pass over this worker's Design 2 queues, noted in `pass`.
fn work_on_queues(cads: &Cads, index: usize, count: usize, pass: &mut Pass) {
    let queues = match design2::queues(cads) {
        Ok(queues) => queues,
        Err(e) => {
            tracing::debug!(error = %e, "worker: cannot read the list of queues");
            return;
        }
    };
    for queue in queues {
        let owner = cads_client::stable_hash(queue.as_bytes()) % count as u64;
        if owner != index as u64 {
            continue;
        }
        match design2::apply_queue(cads, &queue, None) {
            Ok(n) => pass.note(n, cads.config().write_back.batch.max(1)),
            Err(e) => tracing::debug!(error = %e, queue, "worker: applying a queue failed"),
        }
    }
}
