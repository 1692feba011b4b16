//! Threads that run beside the application until told to stop: write-back's workers, TARDIS's
//! monitor and AR workers. Stopping sets a flag the threads poll and waits for them; so does
//! dropping the handle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A set of background threads sharing one stop flag.
pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Background {
    pub(crate) fn new() -> Background {
        Background {
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        }
    }

    /// Starts a thread named `name` running `body`, which is given the stop flag.
    pub(crate) fn spawn(&mut self, name: String, body: impl FnOnce(&AtomicBool) + Send + 'static) {
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(&stop))
            .expect("start a background thread");
        self.threads.push(thread);
    }

    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Sets the stop flag and waits for every thread.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}
