//! CPU time from Linux's `/proc`, to tell what bounds a run on a small machine: this process (the
//! benchmark threads, embedded CMIs and write-back workers) with the processes it started
//! (AppNodes, the `redis-server` of the Redis baseline), the data store's server processes, and
//! the machine as a whole. Elsewhere every reading is `None`.

use std::fs;

use serde::Serialize;

/// `/proc` counts CPU time in USER_HZ ticks, 100 per second on every Linux.
const TICKS_PER_SECOND: f64 = 100.0;

/// A reading of the CPU counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuSample {
    /// Ticks this process and its children ran (user + system).
    process: u64,
    /// Ticks processes named like the data store's server ran (user + system).
    server: u64,
    /// Ticks the machine's CPUs were busy, and in all (busy + idle + iowait).
    busy: u64,
    total: u64,
}

/// CPU use over a phase.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CpuRecord {
    /// CPU seconds of this process (benchmark threads, embedded CMIs, write-back workers) and of
    /// the processes it started: its AppNodes (`--appnodes`), the Redis baseline's server.
    pub process_s: f64,
    /// CPU seconds of the data store's server processes (`postgres`, `mariadbd`, `mysqld`);
    /// includes whatever else used the same server meanwhile. 0 for SQLite (it runs in this
    /// process).
    pub data_store_s: f64,
    /// Share of the machine's CPU time that was busy (all processes, other people's included).
    pub machine_busy: f64,
    /// CPUs of the machine.
    pub cpus: usize,
    /// Wall-clock seconds of the phase.
    pub wall_s: f64,
}

impl CpuSample {
    /// Reads the counters now (`None` where `/proc` is missing).
    pub(crate) fn now() -> Option<CpuSample> {
        let stat = fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        let (children, server) = scanned_ticks();
        Some(CpuSample {
            process: process_ticks("self", true).unwrap_or(0) + children,
            server,
            busy: total - idle,
            total,
        })
    }

    /// The use between `self` and `later`, over `wall_s` seconds.
    pub(crate) fn until(&self, later: &CpuSample, wall_s: f64) -> CpuRecord {
        let total = later.total.saturating_sub(self.total).max(1);
        CpuRecord {
            process_s: later.process.saturating_sub(self.process) as f64 / TICKS_PER_SECOND,
            data_store_s: later.server.saturating_sub(self.server) as f64 / TICKS_PER_SECOND,
            machine_busy: later.busy.saturating_sub(self.busy) as f64 / total as f64,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            wall_s,
        }
    }
}

/// utime + stime of `/proc/<pid>/stat`, and with `children` cutime + cstime: the CPU time of
/// the children the process waited for.
fn process_ticks(pid: &str, children: bool) -> Option<u64> {
    let stat = ProcStat::read(pid)?;
    Some(if children {
        stat.own + stat.waited_children
    } else {
        stat.own
    })
}

/// What the harness reads of `/proc/<pid>/stat`.
struct ProcStat {
    ppid: u32,
    /// utime + stime.
    own: u64,
    /// cutime + cstime.
    waited_children: u64,
}

impl ProcStat {
    fn read(pid: &str) -> Option<ProcStat> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces: fields count from after its closing parenthesis.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
        let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
        Some(ProcStat {
            ppid: number(1)? as u32,
            own: number(11)? + number(12)?,
            waited_children: number(13)? + number(14)?,
        })
    }
}

/// CPU ticks of this process's live children (with the children they waited for), and of every
/// running data-store server process. A child's ticks move to this process's own count when it
/// is waited for, so the sum of the two stays true across the wait.
fn scanned_ticks() -> (u64, u64) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return (0, 0);
    };
    let me = std::process::id();
    let (mut children, mut servers) = (0, 0);
    for entry in entries.filter_map(Result::ok) {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Some(stat) = ProcStat::read(&name) else {
            continue;
        };
        if stat.ppid == me {
            children += stat.own + stat.waited_children;
        }
        let comm = fs::read_to_string(format!("/proc/{name}/comm")).unwrap_or_default();
        if matches!(comm.trim(), "postgres" | "mariadbd" | "mysqld") {
            servers += stat.own;
        }
    }
    (children, servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_grow_with_work() {
        let Some(a) = CpuSample::now() else {
            return; // not Linux
        };
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let b = CpuSample::now().unwrap();
        let r = a.until(&b, 0.05);
        assert!(r.process_s >= 0.0 && r.machine_busy >= 0.0 && r.machine_busy <= 1.0);
        assert!(b.process >= a.process && b.total > a.total);
    }
}
