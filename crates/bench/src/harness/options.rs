//! The options every benchmark shares, spelled as `cads bench` spells its flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use cads::{Policy, TardisConfig};

use crate::deploy::{CacheSpec, CmiSettings};
use crate::gemini::GeminiOptions;

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
    /// `--tardis` and its settings: TARDIS for write-around and write-through (000 ch. 4).
    pub tardis: Option<TardisConfig>,
    /// `--outage AT+FOR`: the data store unreachable during part of the run phase.
    pub outage: Option<Outage>,
    /// `--recovery` and `--fail-cmis`: Gemini's coordinator over the CMIs, and some of them
    /// failing during the run phase (004).
    pub gemini: Option<GeminiOptions>,
}

/// `--outage AT+FOR`: from `at` into the run phase, for `length`, the data store cannot be
/// reached (a TCP relay in front of PostgreSQL or MariaDB cuts every connection and refuses new
/// ones; SQLite's calls fail through the fault-injecting wrapper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// When the data store goes away, from the start of the run phase.
    pub at: Duration,
    /// How long it stays away.
    pub length: Duration,
}

impl Outage {
    /// Parses `AT+FOR`, two durations (`5s+20s`).
    pub fn parse(text: &str) -> Result<Outage> {
        let (at, length) = text
            .split_once('+')
            .ok_or_else(|| anyhow!("--outage: give AT+FOR, as in 5s+20s, not {text:?}"))?;
        Ok(Outage {
            at: parse_duration(at).context("--outage: the start")?,
            length: parse_duration(length).context("--outage: the length")?,
        })
    }
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
            tardis: None,
            outage: None,
            gemini: None,
        }
    }
}

impl CommonOptions {
    /// Whether the run fails CMIs (`--fail-cmis` with Gemini).
    pub fn fails_cmis(&self) -> bool {
        self.gemini.as_ref().is_some_and(|g| g.fail.is_some())
    }

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
        if let Some(t) = &self.tardis {
            if t.alpha == 0 || t.telew == 0 || t.recover_after == 0 {
                bail!("--alpha, --telew and --recover-after must be positive");
            }
            if let Some(p) = self
                .policies
                .iter()
                .find(|p| !matches!(p, Policy::WriteAround | Policy::WriteThrough))
            {
                bail!(
                    "--tardis is for write-around and write-through (write-back takes writes \
                     while the data store is down by design; none has no cache): drop {} from \
                     --policy",
                    p.name()
                );
            }
        }
        if let Some(g) = &self.gemini {
            self.check_gemini(g)?;
        }
        if self.outage.is_some() && self.appnodes > 1 && !self.networked_store() {
            bail!(
                "--outage with --appnodes needs a networked data store (postgres:// or \
                 mysql://): a SQLite outage is injected in one process"
            );
        }
        Ok(())
    }

    /// Whether the data store is a server reached over TCP (PostgreSQL, MariaDB).
    pub fn networked_store(&self) -> bool {
        self.store
            .as_deref()
            .is_some_and(|url| !url.starts_with("sqlite:"))
    }

    /// The framework's settings for a run: `config` with TARDIS's.
    pub fn with_tardis(&self, mut config: cads::Config) -> cads::Config {
        config.tardis = self.tardis_config();
        config
    }

    fn check_gemini(&self, g: &GeminiOptions) -> Result<()> {
        if let Some(p) = self.policies.iter().find(|p| **p != Policy::WriteAround) {
            bail!(
                "--recovery is for write-around, as Gemini (004) assumes: drop {} from --policy",
                p.name()
            );
        }
        if self.tardis.is_some() {
            bail!("--recovery and --tardis do not go together");
        }
        let CacheSpec::Embedded { cmis } = self.cache else {
            bail!(
                "--recovery needs embedded CMIs (--cache embedded:N), which each run starts fresh"
            );
        };
        if g.fragments == 0 {
            bail!("--fragments must be positive");
        }
        if let Some(fail) = g.fail {
            if fail.cmis == 0 || fail.cmis >= cmis {
                bail!(
                    "--fail-cmis must lie in 1..{cmis}: some CMI must stay up to take the failed \
                     ones' fragments"
                );
            }
        }
        Ok(())
    }

    /// TARDIS's settings as the run uses them: several AppNodes, which may see the data store in
    /// different modes, need Recon or Contextual (Recon unless chosen).
    pub fn tardis_config(&self) -> Option<TardisConfig> {
        self.tardis.clone().map(|mut t| {
            if self.appnodes > 1 && t.appnodes == cads::tardis::AppNodes::One {
                t.appnodes = cads::tardis::AppNodes::Recon;
            }
            t
        })
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

/// The name of cache-aside under YCSB's CPR workload, which runs it as 002 §4.5's Redis
/// baseline (ranges through a sorted set on a real `redis-server`); `--policy` takes it as
/// another name for cache-aside.
pub const REDIS_ZINDEX: &str = "redis-zindex";

/// Parses a comma-separated list of policies (`none,write-around,write-through,write-back`;
/// `all` for the four; `redis-zindex` is cache-aside).
pub fn parse_policies(text: &str) -> Result<Vec<Policy>> {
    if text.trim() == "all" {
        return Ok(CommonOptions::default().policies);
    }
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| {
            let name = if name == REDIS_ZINDEX {
                Policy::CacheAside.name()
            } else {
                name
            };
            Policy::parse(name).ok_or_else(|| {
                anyhow!(
                    "unknown policy {name:?} (use none, write-around, write-through, write-back, \
                     cache-aside, redis-zindex)"
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
        assert_eq!(
            parse_policies("redis-zindex").unwrap(),
            vec![Policy::CacheAside]
        );
        assert!(parse_policies("").is_err());
    }

    #[test]
    fn outages_parse() {
        let o = Outage::parse("5s+20s").unwrap();
        assert_eq!(o.at, Duration::from_secs(5));
        assert_eq!(o.length, Duration::from_secs(20));
        assert!(Outage::parse("5s").is_err());
        assert!(Outage::parse("5s+never").is_err());
    }

    #[test]
    fn tardis_is_for_write_around_and_write_through() {
        let o = CommonOptions {
            tardis: Some(TardisConfig::default()),
            ..CommonOptions::default()
        };
        assert!(o.check(100).is_err(), "none and write-back are refused");
        let o = CommonOptions {
            policies: vec![Policy::WriteAround, Policy::WriteThrough],
            ..o
        };
        assert!(o.check(100).is_ok());
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
