//! The options every benchmark shares, spelled as `cads bench` spells its flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use cads::Policy;

use crate::deploy::{CacheSpec, CmiSettings};

/// Where a benchmark runs, how much of it, and what it writes. Each benchmark's options hold one
/// (`common`), with the benchmark's own defaults.
#[derive(Clone, Debug)]
pub struct CommonOptions {
    /// `--policy`: the policies to run, each in turn (`none`, `write-around`, `write-through`,
    /// `write-back`).
    pub policies: Vec<Policy>,
    /// `--store`: a data-store URL (`sqlite:PATH`, `postgres://...`, `mysql://...`); `None`: a
    /// SQLite file in a temporary directory, removed afterwards.
    pub store: Option<String>,
    /// `--cache`: `embedded:N` (default `embedded:2`) or CMI addresses.
    pub cache: CacheSpec,
    /// Settings of embedded CMIs (`--maxmemory`, `--max-pinned-memory`).
    pub cmi: CmiSettings,
    /// `--threads`: threads issuing work in the run phase (over all AppNodes).
    pub threads: usize,
    /// `--workers`: write-back's background workers during a run (in each AppNode).
    pub workers: usize,
    /// `--cold` clears it: read the data through the cache before the first run (000 §3.3:
    /// "each experiment starts with a warm cache").
    pub warm: bool,
    /// `--repeat`: runs of each policy; the policies are interleaved (none, write-around, ...,
    /// none, ...), and the summaries show medians.
    pub repeat: usize,
    /// `--seed`: the generators'.
    pub seed: u64,
    /// `--drain-timeout`: how long write-back's drain may take after a run.
    pub drain_timeout: Duration,
    /// `--json FILE`: every run record in one JSON array, rewritten after each run.
    pub json: Option<PathBuf>,
    /// `--appnodes N`: the run phase split over N application processes (1: this process).
    pub appnodes: usize,
}

impl Default for CommonOptions {
    /// Every policy in turn on SQLite with two embedded CMIs, 8 threads, 4 write-back workers, a
    /// warm cache, one run each, one process.
    fn default() -> Self {
        CommonOptions {
            policies: vec![
                Policy::DataStoreOnly,
                Policy::WriteAround,
                Policy::WriteThrough,
                Policy::WriteBack,
            ],
            store: None,
            cache: CacheSpec::default(),
            cmi: CmiSettings::default(),
            threads: 8,
            workers: 4,
            warm: true,
            repeat: 1,
            seed: 0,
            drain_timeout: Duration::from_secs(600),
            json: None,
            appnodes: 1,
        }
    }
}

impl CommonOptions {
    /// Checks the options, with `max_threads` the benchmark's limit.
    pub fn check(&self, max_threads: usize) -> Result<()> {
        if self.policies.is_empty() {
            bail!("--policy: give at least one policy");
        }
        if self.threads == 0 || self.threads > max_threads {
            bail!("--threads must lie in 1..={max_threads}");
        }
        if self.repeat == 0 {
            bail!("--repeat must be positive");
        }
        if self.appnodes == 0 || self.appnodes > self.threads {
            bail!(
                "--appnodes must lie in 1..=--threads ({}): each AppNode runs at least one thread",
                self.threads
            );
        }
        Ok(())
    }
}

/// Parses a duration: a number with `ms`, `s`, `m` or `h` (`8s`, `2m`, `500ms`); a bare number is
/// seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .with_context(|| format!("bad duration {text:?} (use 8s, 2m, 500ms)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => bail!("bad duration unit {other:?} in {text:?} (use ms, s, m or h)"),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        bail!("a duration must be positive, not {text:?}");
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a comma-separated list of policies (`none,write-around,write-through,write-back`;
/// `all` for the four).
pub fn parse_policies(text: &str) -> Result<Vec<Policy>> {
    if text.trim() == "all" {
        return Ok(CommonOptions::default().policies);
    }
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            Policy::parse(name).ok_or_else(|| {
                anyhow!(
                    "unknown policy {name:?} (use none, write-around, write-through, write-back)"
                )
            })
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|list| {
            if list.is_empty() {
                bail!("--policy: give at least one policy")
            } else {
                Ok(list)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("8s").unwrap(), Duration::from_secs(8));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn policy_lists_parse() {
        assert_eq!(
            parse_policies("none, write-back").unwrap(),
            vec![Policy::DataStoreOnly, Policy::WriteBack]
        );
        assert_eq!(parse_policies("all").unwrap().len(), 4);
        assert!(parse_policies("write-sideways").is_err());
        assert!(parse_policies("").is_err());
    }

    #[test]
    fn appnodes_need_a_thread_each() {
        let o = CommonOptions {
            threads: 2,
            appnodes: 3,
            ..CommonOptions::default()
        };
        assert!(o.check(100).is_err());
        assert!(CommonOptions {
            appnodes: 2,
            ..o.clone()
        }
        .check(100)
        .is_ok());
        assert!(CommonOptions { appnodes: 0, ..o }.check(100).is_err());
    }
}
