//! The coordinator's state on disk, so that it survives its own restart: the configuration and
//! the first session id it has not reserved. The file is written whole to a temporary file, synced,
//! and renamed over the old one: a crash leaves the old state or the new, never a torn one.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::configuration::Configuration;
use crate::etcd::Leadership;

/// What the coordinator keeps across restarts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    pub configuration: Configuration,
    /// The first session id not reserved yet: every id below may have been handed out.
    pub next_session_id: u64,
}

/// Where a running coordinator's state is saved.
#[derive(Debug)]
pub enum StateStore {
    /// Nowhere: it lives as long as the coordinator.
    Memory,
    /// A state file.
    File(PathBuf),
    /// etcd, while this coordinator leads ([`crate::etcd`]).
    Etcd(Leadership),
}

/// The state of a running coordinator, kept for its two writers: the service saves each new
/// configuration, the session-id service each new block of reserved ids ([`crate::ids`]). Each
/// save writes the whole state, the other part as last saved, one save at a time.
#[derive(Debug)]
pub struct SharedState {
    store: StateStore,
    state: Mutex<SavedState>,
}

impl SharedState {
    /// `state`, saved to a file at `path` (None: in memory only).
    pub fn new(path: Option<PathBuf>, state: SavedState) -> SharedState {
        let store = path.map_or(StateStore::Memory, StateStore::File);
        SharedState::in_store(store, state)
    }

    /// `state`, saved to `store`.
    pub fn in_store(store: StateStore, state: SavedState) -> SharedState {
        SharedState {
            store,
            state: Mutex::new(state),
        }
    }

    /// The first session id not reserved yet.
    pub fn next_session_id(&self) -> u64 {
        self.state.lock().expect("state").next_session_id
    }

    /// Saves a new configuration; on error the saved state stays as it was.
    pub fn save_configuration(&self, configuration: &Configuration) -> io::Result<()> {
        self.update(|state| state.configuration = configuration.clone())
    }

    /// Saves that every session id below `next` may have been handed out.
    pub fn save_next_session_id(&self, next: u64) -> io::Result<()> {
        self.update(|state| state.next_session_id = next)
    }

    fn update(&self, change: impl FnOnce(&mut SavedState)) -> io::Result<()> {
        let mut state = self.state.lock().expect("state");
        let mut next = state.clone();
        change(&mut next);
        match &self.store {
            StateStore::Memory => {}
            StateStore::File(path) => save(path, &next)?,
            StateStore::Etcd(leadership) => leadership.save(&next)?,
        }
        *state = next;
        Ok(())
    }
}

/// Writes `state` to `path`, replacing what was there only once the new state is on disk.
pub fn save(path: &Path, state: &SavedState) -> io::Result<()> {
    let text = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = Path::new(&temporary);
    let mut file = File::create(temporary)?;
    file.write_all(&text)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(temporary, path)?;
    // The rename itself is durable once the directory is synced.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
}

/// Reads the state saved at `path`: None if there is no file yet; an error naming the file for
/// one that cannot be read, parsed or trusted (a configuration this coordinator cannot reach).
pub fn load(path: &Path) -> Result<Option<SavedState>, String> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let state: SavedState = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a coordinator state: {e}", path.display()))?;
    state
        .configuration
        .check()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cads-coord-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("state.json")
    }

    #[test]
    fn a_saved_state_reads_back_the_same() {
        let path = scratch("round-trip");
        assert_eq!(load(&path), Ok(None), "no file yet");
        let mut configuration = Configuration::new(3, 9);
        configuration.instance_failed(1).unwrap();
        let state = SavedState {
            configuration,
            next_session_id: 1 << 20,
        };
        save(&path, &state).unwrap();
        assert_eq!(load(&path), Ok(Some(state.clone())));
        configuration = state.configuration.clone();
        configuration.instance_recovered(1, |_| true, None).unwrap();
        let newer = SavedState {
            configuration,
            ..state
        };
        save(&path, &newer).unwrap();
        assert_eq!(load(&path), Ok(Some(newer)));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_damaged_or_impossible_state_is_refused_with_the_file_named() {
        let path = scratch("damaged");
        std::fs::write(&path, b"{\"configuration\": ").unwrap();
        let err = load(&path).unwrap_err();
        assert!(err.contains("is not a coordinator state"), "{err}");
        assert!(err.contains("state.json"), "{err}");

        let state = SavedState {
            configuration: Configuration::new(2, 2),
            next_session_id: 1,
        };
        let text = serde_json::to_string(&state)
            .unwrap()
            .replace("\"instance\":1", "\"instance\":7");
        std::fs::write(&path, text).unwrap();
        let err = load(&path).unwrap_err();
        assert!(err.contains("no instance 7"), "{err}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
