//! The append-only file of one CMI: loading it at start, appending the engine's records after every
//! batch of commands, syncing them by the configured policy, and rewriting the file in the
//! background when it has grown (the record format and the incremental snapshot are the engine's,
//! `cads_engine::persist`).
//!
//! Ordering matters for durability: the loop calls [`Aof::flush`] before it sends the replies of a
//! batch, so with `appendfsync always` no reply leaves before its records are on disk. With
//! `everysec` a helper thread syncs once a second (at most about a second of acknowledged writes
//! can be lost in a machine crash, as with Redis); with `no` the OS decides.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cads_engine::Engine;

use crate::config::Fsync;

/// Slots copied into a rewrite per loop iteration: small enough to keep request latency flat.
const REWRITE_SLOTS_PER_STEP: u32 = 2048;

pub struct AofSettings {
    pub fsync: Fsync,
    pub rewrite_percentage: u64,
    pub rewrite_min_size: u64,
}

/// State of a rewrite in progress.
struct Rewrite {
    tmp_path: PathBuf,
    file: File,
    walked: bool,
    /// Set by the thread that syncs the finished snapshot.
    synced: Option<Arc<AtomicBool>>,
}

pub struct Aof {
    path: PathBuf,
    file: File,
    settings: AofSettings,
    buf: Vec<u8>,
    size: u64,
    /// Size right after the last rewrite (or at start): growth is measured from here.
    base_size: u64,
    /// The file the everysec thread syncs.
    sync_target: Arc<Mutex<File>>,
    sync_stop: Arc<AtomicBool>,
    rewrite: Option<Rewrite>,
    pub rewrites: u64,
    pub last_rewrite_ok: bool,
    /// The error of the last failed write, until a write succeeds again.
    pub write_error: Option<String>,
}

/// The log file of CMI `index` in `dir`.
pub fn log_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("cmi-{index}.aof"))
}

impl Aof {
    /// Opens (creating if needed) the log of CMI `index`, replays it into `engine`, cuts off a torn
    /// last record, and starts logging.
    pub fn open(
        dir: &Path,
        index: usize,
        engine: &mut Engine,
        settings: AofSettings,
    ) -> Result<Aof> {
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the log directory {}", dir.display()))?;
        let path = log_path(dir, index);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let replayed = engine.replay(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} is damaged: {e}. Move it away to start with an empty CMI, or cut it at that byte \
                 to keep what precedes.",
                path.display()
            )
        })?;
        if replayed.truncated {
            tracing::warn!(
                path = %path.display(),
                kept = replayed.valid_bytes,
                dropped = bytes.len() - replayed.valid_bytes,
                "the log ends in a torn record (a crash during a write); cutting it off"
            );
            file.set_len(replayed.valid_bytes as u64)?;
        }
        if replayed.records > 0 {
            tracing::info!(
                path = %path.display(),
                records = replayed.records,
                keys = engine.key_count(),
                "restored from the append-only log"
            );
        }
        engine.hold_restored_values();
        if engine.holds_restored_values() {
            tracing::info!(
                path = %path.display(),
                "cached values restored outside a Gemini configuration are held until a cads \
                 client connects and drops them (FLUSHALL RESTORED): the data store may have \
                 changed while this CMI was down; plain Redis clients still read them"
            );
        }
        engine.enable_log();
        let size = replayed.valid_bytes as u64;
        let sync_target = Arc::new(Mutex::new(file.try_clone()?));
        let sync_stop = Arc::new(AtomicBool::new(false));
        if settings.fsync == Fsync::EverySec {
            spawn_syncer(index, sync_target.clone(), sync_stop.clone());
        }
        Ok(Aof {
            path,
            file,
            settings,
            buf: Vec::new(),
            size,
            base_size: size,
            sync_target,
            sync_stop,
            rewrite: None,
            rewrites: 0,
            last_rewrite_ok: true,
            write_error: None,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn base_size(&self) -> u64 {
        self.base_size
    }

    pub fn fsync_policy(&self) -> Fsync {
        self.settings.fsync
    }

    pub fn rewriting(&self) -> bool {
        self.rewrite.is_some()
    }

    /// Writes what the engine logged since the last call, syncing if the policy is `always`, and
    /// advances a rewrite in progress. Called before the batch's replies are sent.
    pub fn flush(&mut self, engine: &mut Engine) {
        engine.drain_log(&mut self.buf);
        if !self.buf.is_empty() {
            match self.write_buffered() {
                Ok(()) => self.write_error = None,
                Err(e) => {
                    if self.settings.fsync == Fsync::Always {
                        // Replies must not leave without their records on disk, and we cannot tell
                        // clients which of their writes were lost: stop, as Redis does.
                        tracing::error!(path = %self.path.display(), error = %e,
                            "cannot write the append-only log with appendfsync always; exiting");
                        std::process::exit(1);
                    }
                    if self.write_error.is_none() {
                        tracing::error!(path = %self.path.display(), error = %e,
                            "cannot write the append-only log; refusing writes until it works again");
                    }
                    self.write_error = Some(e.to_string());
                }
            }
        }
        if self.rewrite.is_some() {
            if let Err(e) = self.advance_rewrite(engine) {
                tracing::error!(error = %e, "log rewrite failed; keeping the old log");
                self.abandon_rewrite(engine);
            }
        }
    }

    fn write_buffered(&mut self) -> io::Result<()> {
        self.file.write_all(&self.buf)?;
        self.size += self.buf.len() as u64;
        self.buf.clear();
        if self.settings.fsync == Fsync::Always {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Whether the log has grown enough since its last rewrite to rewrite it now.
    pub fn wants_rewrite(&self) -> bool {
        let pct = self.settings.rewrite_percentage;
        pct > 0
            && self.rewrite.is_none()
            && self.size >= self.settings.rewrite_min_size
            && self.size >= self.base_size.saturating_mul(100 + pct) / 100
    }

    /// Starts a background rewrite (BGREWRITEAOF, or growth).
    pub fn start_rewrite(&mut self, engine: &mut Engine) -> Result<()> {
        if self.rewrite.is_some() {
            bail!("a rewrite is already in progress");
        }
        let tmp_path = self.path.with_extension("aof.rewrite");
        let file = File::create(&tmp_path)
            .with_context(|| format!("cannot create {}", tmp_path.display()))?;
        engine.begin_rewrite();
        self.rewrite = Some(Rewrite {
            tmp_path,
            file,
            walked: false,
            synced: None,
        });
        tracing::info!(path = %self.path.display(), "log rewrite started");
        Ok(())
    }

    fn advance_rewrite(&mut self, engine: &mut Engine) -> Result<()> {
        let rw = self.rewrite.as_mut().expect("called during a rewrite");
        if !rw.walked {
            rw.walked = engine.rewrite_step(REWRITE_SLOTS_PER_STEP);
        }
        let mut chunk = Vec::new();
        engine.drain_rewrite(&mut chunk);
        rw.file.write_all(&chunk)?;
        if rw.walked && rw.synced.is_none() {
            // Sync the snapshot off the loop thread; records keep arriving meanwhile.
            let done = Arc::new(AtomicBool::new(false));
            let file = rw.file.try_clone()?;
            let flag = done.clone();
            thread::Builder::new()
                .name("aof-rewrite-sync".into())
                .spawn(move || {
                    if let Err(e) = file.sync_all() {
                        tracing::error!(error = %e, "syncing the rewritten log failed");
                    }
                    flag.store(true, Ordering::Release);
                })?;
            rw.synced = Some(done);
        }
        let synced = rw
            .synced
            .as_ref()
            .is_some_and(|d| d.load(Ordering::Acquire));
        if synced {
            self.switch_to_rewritten(engine)?;
        }
        Ok(())
    }

    /// Replaces the log by the rewritten one. The old log got every record up to now (flush wrote
    /// them first) and so did the new one, so from here on records go to the new one only.
    fn switch_to_rewritten(&mut self, engine: &mut Engine) -> Result<()> {
        let rw = self.rewrite.take().expect("called during a rewrite");
        engine.end_rewrite();
        let mut file = rw.file;
        file.flush()?;
        if self.settings.fsync == Fsync::Always {
            file.sync_data()?;
        }
        fs::rename(&rw.tmp_path, &self.path)
            .with_context(|| format!("cannot replace {}", self.path.display()))?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        let size = file.metadata()?.len();
        // Appends go to the end: reopen in append mode (the rewrite handle was a plain writer).
        let appender = OpenOptions::new().append(true).open(&self.path)?;
        *self.sync_target.lock().expect("sync target lock") = appender.try_clone()?;
        self.file = appender;
        self.size = size;
        self.base_size = size;
        self.rewrites += 1;
        self.last_rewrite_ok = true;
        tracing::info!(path = %self.path.display(), bytes = size, "log rewrite finished");
        Ok(())
    }

    fn abandon_rewrite(&mut self, engine: &mut Engine) {
        if let Some(rw) = self.rewrite.take() {
            let _ = fs::remove_file(&rw.tmp_path);
        }
        engine.end_rewrite();
        self.last_rewrite_ok = false;
    }

    /// Final flush and sync at shutdown.
    pub fn close(&mut self, engine: &mut Engine) {
        self.flush(engine);
        if !self.buf.is_empty() {
            tracing::error!(
                bytes = self.buf.len(),
                "could not write the end of the log at shutdown"
            );
        }
        if let Err(e) = self.file.sync_all() {
            tracing::error!(error = %e, "could not sync the log at shutdown");
        }
        self.sync_stop.store(true, Ordering::Release);
    }
}

impl Drop for Aof {
    fn drop(&mut self) {
        self.sync_stop.store(true, Ordering::Release);
    }
}

fn spawn_syncer(index: usize, target: Arc<Mutex<File>>, stop: Arc<AtomicBool>) {
    let spawned = thread::Builder::new()
        .name(format!("aof-sync-{index}"))
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                thread::sleep(Duration::from_secs(1));
                let file = target.lock().expect("sync target lock");
                if let Err(e) = file.sync_data() {
                    tracing::error!(error = %e, "everysec sync of the log failed");
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the everysec sync thread; relying on the OS");
    }
}
