//! What the `cads` command starts for the benchmarks ([`Launcher`]): the CMIs of `--cache
//! embedded:N`, in this process on loopback and free ports, fresh for each policy run, or as
//! `cads server` processes of their own when a run kills them (`--fail-kind kill`); and the
//! AppNodes of `--appnodes N`, copies of this command.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cads::{Client, ClientConfig, Coordinator};
use cads_bench::{private_dir, CmiSettings, Launcher, RunningCmis};
use cads_server::{Options, Server};

/// How long a CMI process may take to answer after it starts (restoring its append-only file
/// included).
const PROCESS_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts `count` CMIs in this process in lease `mode`, on loopback and free ports, serving
/// Unix sockets too in a private directory of their own when `settings` asks.
fn start_embedded(count: usize, mode: &str, settings: &CmiSettings) -> Result<Embedded> {
    let sockets = match settings.unix_sockets {
        true => Some(private_dir("cads-sockets-").context("a directory for the CMIs' sockets")?),
        false => None,
    };
    let config = cads_server::Config::resolve(Options {
        port: Some(0),
        cmis: Some(count),
        mode: Some(mode.into()),
        maxmemory: settings.maxmemory.clone(),
        max_pinned_memory: settings.max_pinned_memory.clone(),
        requirepass: settings.password.as_ref().map(|p| p.0.clone()),
        unixsocket_dir: sockets.as_ref().map(|d| d.path().to_path_buf()),
        ..Options::default()
    })
    .context("configuring the embedded CMIs")?;
    let server = Server::start(config).context("starting the embedded CMIs")?;
    Ok(Embedded { server, sockets })
}

/// What `cads bench` and `cads demo` hand the benchmarks.
pub struct ThisProgram;

impl Launcher for ThisProgram {
    fn start_cmis(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        Ok(Box::new(start_embedded(count, mode, settings)?))
    }

    fn start_cmi_processes(
        &self,
        count: usize,
        mode: &str,
        settings: &CmiSettings,
    ) -> Result<Box<dyn RunningCmis>> {
        Ok(Box::new(Processes::start(count, mode, settings)?))
    }

    /// This program with the arguments it was started with: the same benchmark, same options.
    fn appnode_command(&self) -> Result<Command> {
        let program = std::env::current_exe().context("finding this program to start AppNodes")?;
        let mut command = Command::new(program);
        command.args(std::env::args_os().skip(1));
        Ok(command)
    }
}

/// CMIs in this process, and the directory of their Unix sockets (removed with them).
struct Embedded {
    server: Server,
    sockets: Option<tempfile::TempDir>,
}

impl RunningCmis for Embedded {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.server.addrs().to_vec()
    }

    fn unix_dir(&self) -> Option<PathBuf> {
        self.sockets.as_ref().map(|d| d.path().to_path_buf())
    }

    fn stop(self: Box<Self>) -> Result<()> {
        self.server.stop();
        self.server.join()
    }
}

/// CMIs as `cads server` processes, one CMI each, on loopback, each keeping its append-only file
/// in a private directory that goes with them: what a run that kills CMIs needs.
struct Processes {
    program: PathBuf,
    dir: tempfile::TempDir,
    password: Option<String>,
    cmis: Vec<Mutex<CmiProcess>>,
}

struct CmiProcess {
    addr: SocketAddr,
    config: PathBuf,
    /// None once killed.
    child: Option<Child>,
}

impl Processes {
    fn start(count: usize, mode: &str, settings: &CmiSettings) -> Result<Processes> {
        let program = std::env::current_exe().context("finding this program to start CMIs")?;
        // The configuration files hold the CMIs' password.
        let dir = private_dir("cads-cmis-").context("a directory for the CMIs' files")?;
        let mut processes = Processes {
            program,
            password: settings.password.as_ref().map(|p| p.0.clone()),
            dir,
            cmis: Vec::with_capacity(count),
        };
        for index in 0..count {
            let cmi_dir = processes.dir.path().join(format!("cmi-{index}"));
            std::fs::create_dir(&cmi_dir)
                .with_context(|| format!("creating {}", cmi_dir.display()))?;
            let config = cmi_dir.join("cads.toml");
            std::fs::write(&config, server_config(mode, settings, &cmi_dir))
                .with_context(|| format!("writing {}", config.display()))?;
            let mut cmi = CmiProcess {
                addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                config,
                child: None,
            };
            processes.spawn(&mut cmi, None)?;
            processes.cmis.push(Mutex::new(cmi));
        }
        Ok(processes)
    }

    /// Starts `cmi`'s process, on `port` or (None) on a free port, and waits until it answers.
    fn spawn(&self, cmi: &mut CmiProcess, port: Option<u16>) -> Result<()> {
        for _ in 0..5 {
            let port = match port {
                Some(port) => port,
                None => free_port()?,
            };
            let mut child = Command::new(&self.program)
                .arg("server")
                .arg("--config")
                .arg(&cmi.config)
                .arg("--port")
                .arg(port.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting a CMI process")?;
            cmi.addr = SocketAddr::from(([127, 0, 0, 1], port));
            if self.wait_until_serving(cmi.addr, &mut child)? {
                cmi.child = Some(child);
                return Ok(());
            }
        }
        bail!("a CMI process exited at start five times (see its error above)")
    }

    /// Whether the CMI process `child` at `addr` answers INFO before it exits.
    fn wait_until_serving(&self, addr: SocketAddr, child: &mut Child) -> Result<bool> {
        let mut config = ClientConfig::new(vec![addr]);
        config.password = self.password.clone();
        config.connect_timeout = Duration::from_millis(500);
        let client = Client::new(config, Coordinator::process());
        let started = Instant::now();
        loop {
            if child.try_wait()?.is_some() {
                return Ok(false);
            }
            if client.info(0).is_ok() {
                return Ok(true);
            }
            if started.elapsed() > PROCESS_START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "the CMI process at {addr} did not answer within {} s",
                    PROCESS_START_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl RunningCmis for Processes {
    fn addrs(&self) -> Vec<SocketAddr> {
        self.cmis
            .iter()
            .map(|c| c.lock().expect("not poisoned").addr)
            .collect()
    }

    fn stop(self: Box<Self>) -> Result<()> {
        for cmi in &self.cmis {
            if let Some(mut child) = cmi.lock().expect("not poisoned").child.take() {
                // Nothing of theirs outlives the run: their files go with the directory.
                let _ = child.kill();
                child.wait().context("waiting for a CMI process")?;
            }
        }
        Ok(())
    }

    fn kill(&self, index: usize) -> Result<()> {
        let mut cmi = self.cmis[index].lock().expect("not poisoned");
        let Some(mut child) = cmi.child.take() else {
            bail!("CMI {index} is not running");
        };
        child
            .kill()
            .with_context(|| format!("killing CMI {index}"))?;
        child.wait().context("waiting for a killed CMI")?;
        Ok(())
    }

    fn restart(&self, index: usize) -> Result<()> {
        let mut cmi = self.cmis[index].lock().expect("not poisoned");
        if cmi.child.is_some() {
            bail!("CMI {index} is running");
        }
        let port = cmi.addr.port();
        self.spawn(&mut cmi, Some(port))
            .with_context(|| format!("restarting CMI {index} on port {port}"))
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for cmi in &self.cmis {
            if let Ok(mut cmi) = cmi.lock() {
                if let Some(mut child) = cmi.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

/// The configuration file of one CMI process: one CMI in lease `mode`, persistent in `dir`.
fn server_config(mode: &str, settings: &CmiSettings, dir: &Path) -> String {
    let quoted = |text: &str| serde_json::to_string(text).expect("a string serializes");
    let mut lines = vec![
        "cmis = 1".to_string(),
        format!("mode = {}", quoted(mode)),
        "appendonly = true".to_string(),
        format!("dir = {}", quoted(&dir.to_string_lossy())),
        "log-level = \"warn\"".to_string(),
    ];
    if let Some(size) = &settings.maxmemory {
        lines.push(format!("maxmemory = {}", quoted(size)));
    }
    if let Some(size) = &settings.max_pinned_memory {
        lines.push(format!("max-pinned-memory = {}", quoted(size)));
    }
    if let Some(password) = &settings.password {
        lines.push(format!("requirepass = {}", quoted(&password.0)));
    }
    lines.join("\n") + "\n"
}

/// A loopback port free when asked (a process started on it may still find it taken).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}
