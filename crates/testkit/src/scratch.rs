//! Scratch data stores: a temporary directory (with a SQLite database in it), and PostgreSQL or
//! MariaDB databases of unique names, each removed when dropped. The servers are the local ones
//! `scripts/provision` starts (`CADS_POSTGRES_URL`, `CADS_MYSQL_URL` to point elsewhere); a test
//! that finds one unreachable skips loudly, or fails under `CADS_REQUIRE_SERVICES=1`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cads_store::{open, DataStore, Isolation, StoreOptions};

use crate::services::say_skipped;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A name no other scratch object of any test process has: `<tag>` with this process's id and a
/// counter.
pub fn unique_name(tag: &str) -> String {
    format!(
        "{tag}{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An empty directory of its own under the system's temporary directory, removed with what it
/// holds when dropped.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// A new directory named after `tag`.
    pub fn new(tag: &str) -> ScratchDir {
        let path = std::env::temp_dir().join(unique_name(&format!("cads-{tag}-")));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a scratch directory");
        ScratchDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The URL of a SQLite database file in it (`data.db`).
    pub fn sqlite_url(&self) -> String {
        format!("sqlite:{}", self.path.join("data.db").display())
    }

    /// That SQLite database, opened with `options`.
    pub fn sqlite(&self, options: &StoreOptions) -> Arc<dyn DataStore> {
        open(&self.sqlite_url(), options).expect("open a scratch SQLite database")
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The server data stores tests use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreServer {
    Postgres,
    MariaDb,
}

impl StoreServer {
    /// The URL of the server's `cads` database, from `CADS_POSTGRES_URL` / `CADS_MYSQL_URL` or
    /// the provisioned default.
    pub fn url(self) -> String {
        let (var, default) = match self {
            StoreServer::Postgres => (
                "CADS_POSTGRES_URL",
                "postgres://cads:cads@127.0.0.1:5432/cads",
            ),
            StoreServer::MariaDb => ("CADS_MYSQL_URL", "mysql://cads:cads@127.0.0.1:3306/cads"),
        };
        std::env::var(var).unwrap_or_else(|_| default.into())
    }

    fn name(self) -> &'static str {
        match self {
            StoreServer::Postgres => "PostgreSQL",
            StoreServer::MariaDb => "MariaDB/MySQL",
        }
    }

    /// Whether the server answers; if not, says so loudly once per process and returns false,
    /// or panics under `CADS_REQUIRE_SERVICES=1`.
    pub fn reachable(self) -> bool {
        static STATE: OnceLock<Mutex<HashMap<StoreServer, Result<(), String>>>> = OnceLock::new();
        let mut known = STATE.get_or_init(Mutex::default).lock().unwrap();
        if let Some(state) = known.get(&self) {
            return state.is_ok();
        }
        let url = self.url();
        let state = open(&url, &admin_options())
            .map(drop)
            .map_err(|e| e.to_string());
        if let Err(e) = &state {
            say_skipped(&format!(
                "{} not reachable at {url} ({e}); run scripts/provision",
                self.name()
            ));
        }
        known.insert(self, state.clone());
        state.is_ok()
    }
}

/// Options for the administrative connections: generous, since a loaded machine can take seconds
/// to start a server's backend, while a server that is down refuses at once anyway.
fn admin_options() -> StoreOptions {
    StoreOptions::default()
        .with_timeout(Duration::from_secs(20))
        .with_pool_size(1)
}

/// A database of its own on a server data store, dropped when this is dropped. Scratch databases
/// are named `cads_t<pid>_<n>`; ones left by test processes that no longer run are dropped when
/// the first of a process is made.
pub struct ScratchDatabase {
    server: StoreServer,
    name: String,
    url: String,
}

impl ScratchDatabase {
    /// A new database on `server`, or None (after a loud skip) when it is unreachable.
    pub fn create(server: StoreServer) -> Option<ScratchDatabase> {
        if !server.reachable() {
            return None;
        }
        let admin = open(&server.url(), &admin_options()).expect("connect to the data store");
        static SWEPT: OnceLock<Mutex<Vec<StoreServer>>> = OnceLock::new();
        {
            let mut swept = SWEPT.get_or_init(Mutex::default).lock().unwrap();
            if !swept.contains(&server) {
                drop_abandoned(server, admin.as_ref());
                swept.push(server);
            }
        }
        let name = unique_name("cads_t");
        admin
            .execute_batch(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("create scratch database {name}: {e}"));
        let url = with_database(&server.url(), &name);
        Some(ScratchDatabase { server, name, url })
    }

    /// A scratch PostgreSQL database.
    pub fn postgres() -> Option<ScratchDatabase> {
        ScratchDatabase::create(StoreServer::Postgres)
    }

    /// A scratch MariaDB database.
    pub fn mariadb() -> Option<ScratchDatabase> {
        ScratchDatabase::create(StoreServer::MariaDb)
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Opens it with `options`.
    pub fn open(&self, options: &StoreOptions) -> Arc<dyn DataStore> {
        open(&self.url, options).expect("open the scratch database")
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        if let Ok(admin) = open(&self.server.url(), &admin_options()) {
            let _ = admin.execute_batch(&drop_statement(self.server, &self.name));
        }
    }
}

fn drop_statement(server: StoreServer, name: &str) -> String {
    match server {
        // Connections a test left open (a pool kept by a leaked Arc) would make a plain DROP fail.
        StoreServer::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        StoreServer::MariaDb => format!("DROP DATABASE IF EXISTS {name}"),
    }
}

/// Drops scratch databases whose test process is gone (killed before it could drop them).
fn drop_abandoned(server: StoreServer, admin: &dyn DataStore) {
    let sql = match server {
        StoreServer::Postgres => "SELECT datname FROM pg_database WHERE datname LIKE 'cads\\_t%'",
        StoreServer::MariaDb => "SHOW DATABASES LIKE 'cads\\_t%'",
    };
    let Ok(mut tx) = admin.begin(Isolation::ReadCommitted) else {
        return;
    };
    let names: Vec<String> = tx
        .query(sql, &[])
        .map(|rows| rows.iter().filter_map(|r| r.get(0).ok()).collect())
        .unwrap_or_default();
    drop(tx);
    for name in names {
        let pid = name
            .strip_prefix("cads_t")
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = admin.execute_batch(&drop_statement(server, &name));
        }
    }
}

/// `url` with its database replaced by `database` (query parameters kept).
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_url_gets_another_database_and_keeps_its_parameters() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/cads", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(
            with_database("mysql://u:p@h:3306/cads?prefer_socket=false", "x"),
            "mysql://u:p@h:3306/x?prefer_socket=false"
        );
        assert_eq!(with_database("postgres://u:p@h", "x"), "postgres://u:p@h/x");
    }
}
