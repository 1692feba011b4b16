//! The options of a TPC-C benchmark, spelled as `cads bench tpcc` spells its flags.

use std::time::Duration;

use anyhow::{bail, Result};
use cads_apps::tpcc::Scale;
use serde::Serialize;

use crate::harness::CommonOptions;

/// The mix of transactions, in percent (BenchBase's `<weights>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[allow(missing_docs)]
pub struct Mix {
    pub new_order: u32,
    pub payment: u32,
    pub order_status: u32,
    pub delivery: u32,
    pub stock_level: u32,
}

impl Default for Mix {
    /// 45/43/4/4/4.
    fn default() -> Self {
        Mix {
            new_order: 45,
            payment: 43,
            order_status: 4,
            delivery: 4,
            stock_level: 4,
        }
    }
}

impl Mix {
    /// `45,43,4,4,4` (New-Order, Payment, Order-Status, Delivery, Stock-Level).
    pub fn parse(text: &str) -> Result<Mix> {
        let parts: Vec<u32> = text
            .split(',')
            .map(|s| s.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--mix {text:?}: {e}"))?;
        let [new_order, payment, order_status, delivery, stock_level] = parts[..] else {
            bail!(
                "--mix takes five weights: New-Order, Payment, Order-Status, Delivery, Stock-Level"
            );
        };
        let mix = Mix {
            new_order,
            payment,
            order_status,
            delivery,
            stock_level,
        };
        if mix.total() == 0 {
            bail!("--mix: the weights add up to nothing");
        }
        Ok(mix)
    }

    /// The weights in transaction order.
    pub fn weights(&self) -> [u32; 5] {
        [
            self.new_order,
            self.payment,
            self.order_status,
            self.delivery,
            self.stock_level,
        ]
    }

    fn total(&self) -> u32 {
        self.weights().iter().sum()
    }
}

/// What `cads bench tpcc` runs. [`TpccOptions::default`] is one warehouse of the specification's
/// size on SQLite with two embedded CMIs, every policy in turn, 8 terminals for 30 s.
#[derive(Clone, Debug)]
pub struct TpccOptions {
    /// What every benchmark has: policies, store, cache, threads (terminals, spread evenly over
    /// the warehouses, each owning a range of districts, as BenchBase does), workers, warm-up
    /// (every row and per-district entry read through the cache, 003 §4.3), repeats, seed (the
    /// loader's and the terminals' generators), ...
    pub common: CommonOptions,
    /// `--warehouses` (1).
    pub warehouses: u32,
    /// `--scale spec|hundredth`.
    pub scale: Scale,
    /// `--duration`: the measured interval.
    pub duration: Duration,
    /// `--mix`: transaction weights.
    pub mix: Mix,
    /// `--prefix`: table name prefix (tests use their own, so they can share a database).
    pub prefix: String,
    /// `--keep-data`: load the database once, before the first run; later runs go on with the
    /// data the previous one left (each still starts with a fresh, warmed cache). Faster, but
    /// the policies no longer start from the same data. Default off: every run reloads.
    pub keep_data: bool,
    /// `--load-threads`: threads inserting the initial database.
    pub load_threads: usize,
    /// `--write-back-batch`: write-back's sessions applied per data-store transaction
    /// (`WriteBackConfig::batch`, alpha of 003 Algorithm 4).
    pub write_back_batch: usize,
    /// Test hook: Payments also change W_YTD in the data store behind the framework's back, so
    /// the cached warehouse goes stale and condition 1 breaks (shows the checks at work).
    #[doc(hidden)]
    pub sabotage: bool,
}

impl Default for TpccOptions {
    fn default() -> Self {
        TpccOptions {
            common: CommonOptions {
                workers: 2,
                seed: 0x007A_C00C,
                ..CommonOptions::default()
            },
            warehouses: 1,
            scale: Scale::SPEC,
            duration: Duration::from_secs(30),
            mix: Mix::default(),
            prefix: "tpcc_".into(),
            keep_data: false,
            load_threads: 4,
            write_back_batch: cads::WriteBackConfig::default().batch,
            sabotage: false,
        }
    }
}

impl TpccOptions {
    /// Checks the options.
    pub fn check(&self) -> Result<()> {
        self.common.check(usize::MAX)?;
        if self.warehouses == 0 {
            bail!("--warehouses must be at least 1");
        }
        if self.scale.items < 15 || self.scale.customers_per_district < 10 {
            bail!("the scale needs at least 15 items and 10 customers per district");
        }
        if self.duration.is_zero() {
            bail!("--duration must be positive");
        }
        if self.write_back_batch == 0 {
            bail!("--write-back-batch must be at least 1");
        }
        let prefix_ok = !self.prefix.is_empty()
            && self.prefix.len() <= 24
            && self
                .prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && self.prefix.as_bytes()[0].is_ascii_lowercase();
        if !prefix_ok {
            bail!(
                "--prefix {:?}: use up to 24 lowercase letters, digits and _, starting with a letter",
                self.prefix
            );
        }
        Ok(())
    }
}

/// TPC-C's part of a run record's `config` (fields as in [`TpccOptions`]).
#[derive(Clone, Debug, Serialize)]
#[allow(missing_docs)]
pub struct ConfigRecord {
    pub warehouses: u32,
    pub scale: Scale,
    pub scale_name: String,
    pub duration_s: f64,
    pub mix: Mix,
    pub prefix: String,
    pub keep_data: bool,
    /// The data store's isolation for every policy's transactions.
    pub isolation: &'static str,
    /// NURand constants C: customer id, item id, last name at load and at run time.
    pub nurand_c: [u32; 4],
    /// Write-back's sessions per applying transaction.
    pub write_back_batch: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse() {
        assert_eq!(Mix::parse("45,43,4,4,4").unwrap(), Mix::default());
        assert!(Mix::parse("1,2,3").is_err());
        assert!(Mix::parse("0,0,0,0,0").is_err());
        assert!(Mix::parse("a,b,c,d,e").is_err());
    }

    #[test]
    fn prefixes_are_checked() {
        let mut o = TpccOptions::default();
        assert!(o.check().is_ok());
        o.prefix = "Robert'); DROP".into();
        assert!(o.check().is_err());
    }
}
