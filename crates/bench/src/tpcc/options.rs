//! The options of a TPC-C benchmark, spelled as `cads bench tpcc` spells its flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use cads::Policy;
use serde::Serialize;

use crate::deploy::{CacheSpec, CmiSettings};

/// The size of a warehouse. ITEM is shared by all warehouses; every other table scales with
/// them (benchmarks.md Part B §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Scale {
    /// Rows of ITEM, and of STOCK per warehouse (100,000 in the specification).
    pub items: u32,
    /// Customers per district, and the orders loaded per district (3,000).
    pub customers_per_district: u32,
}

/// Districts per warehouse (fixed by the specification).
pub const DISTRICTS: u32 = 10;

impl Scale {
    /// The specification's cardinalities (clause 1.2, 4.3).
    pub const SPEC: Scale = Scale {
        items: 100_000,
        customers_per_district: 3_000,
    };

    /// A hundredth of the items and customers, for tests: 1,000 items, 30 customers per district
    /// (the loaded orders, new orders and history scale along).
    pub const HUNDREDTH: Scale = Scale {
        items: 1_000,
        customers_per_district: 30,
    };

    /// `spec` or `hundredth`.
    pub fn parse(name: &str) -> Result<Scale> {
        match name {
            "spec" | "paper" => Ok(Scale::SPEC),
            "hundredth" | "small" => Ok(Scale::HUNDREDTH),
            other => bail!("unknown scale {other:?} (use spec or hundredth)"),
        }
    }

    /// Its name on the command line.
    pub fn name(&self) -> String {
        match *self {
            Scale::SPEC => "spec".into(),
            Scale::HUNDREDTH => "hundredth".into(),
            s => format!("{}-items-{}-customers", s.items, s.customers_per_district),
        }
    }

    /// Orders loaded per district: one per customer.
    pub fn orders_per_district(&self) -> u32 {
        self.customers_per_district
    }

    /// The first undelivered order loaded in each district: the last 30% are new orders
    /// (2101 of 3000 in the specification).
    pub fn first_new_order(&self) -> u32 {
        self.orders_per_district() - self.orders_per_district() * 3 / 10 + 1
    }

    /// Delivered orders loaded per district (2100).
    pub fn delivered_per_district(&self) -> u32 {
        self.first_new_order() - 1
    }

    /// The largest last-name number drawn at run time: 999, or fewer when a district has fewer
    /// than 1,000 customers, whose names are then exactly `0..customers` (clause 4.3.3.1 names
    /// the first 1,000 customers of a district after their id).
    pub fn last_name_max(&self) -> u32 {
        self.customers_per_district.min(1000) - 1
    }

    /// An item id that no row has, for New-Order's 1% rollback (clause 2.4.1.4).
    pub fn unused_item(&self) -> u32 {
        self.items + 1
    }
}

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
    /// `--policy`: the policies to run, each in turn.
    pub policies: Vec<Policy>,
    /// `--store`: a data-store URL; `None`: a SQLite file in a temporary directory.
    pub store: Option<String>,
    /// `--cache`: `embedded:N` (default `embedded:2`) or CMI addresses.
    pub cache: CacheSpec,
    /// Settings of embedded CMIs.
    pub cmi: CmiSettings,
    /// `--warehouses` (1).
    pub warehouses: u32,
    /// `--scale spec|hundredth`.
    pub scale: Scale,
    /// `--threads`: terminals, spread evenly over the warehouses, each owning a range of
    /// districts (BenchBase).
    pub threads: usize,
    /// `--duration`: the measured interval.
    pub duration: Duration,
    /// `--mix`: transaction weights.
    pub mix: Mix,
    /// `--warm`: read every row and per-district entry through the cache before the run, so it
    /// starts at a 100% hit rate (003 §4.3). Default on.
    pub warm: bool,
    /// `--workers`: write-back's background workers.
    pub workers: usize,
    /// `--repeat`: runs of each policy, the policies interleaved.
    pub repeat: usize,
    /// `--seed`: the loader's and the terminals' generators.
    pub seed: u64,
    /// `--prefix`: table name prefix (tests use their own, so they can share a database).
    pub prefix: String,
    /// `--keep-data`: load the database once, before the first run; later runs go on with the
    /// data the previous one left (each still starts with a fresh, warmed cache). Faster, but
    /// the policies no longer start from the same data. Default off: every run reloads.
    pub keep_data: bool,
    /// `--load-threads`: threads inserting the initial database.
    pub load_threads: usize,
    /// `--drain-timeout`: how long write-back's drain may take after the run.
    pub drain_timeout: Duration,
    /// `--json FILE`: every run record in one JSON array, rewritten after each run.
    pub json: Option<PathBuf>,
    /// Test hook: Payments also change W_YTD in the data store behind the framework's back, so
    /// the cached warehouse goes stale and condition 1 breaks (shows the checks at work).
    #[doc(hidden)]
    pub sabotage: bool,
}

impl Default for TpccOptions {
    fn default() -> Self {
        TpccOptions {
            policies: vec![
                Policy::DataStoreOnly,
                Policy::WriteAround,
                Policy::WriteThrough,
                Policy::WriteBack,
            ],
            store: None,
            cache: CacheSpec::default(),
            cmi: CmiSettings::default(),
            warehouses: 1,
            scale: Scale::SPEC,
            threads: 8,
            duration: Duration::from_secs(30),
            mix: Mix::default(),
            warm: true,
            workers: 2,
            repeat: 1,
            seed: 0x007A_C00C,
            prefix: "tpcc_".into(),
            keep_data: false,
            load_threads: 4,
            drain_timeout: Duration::from_secs(600),
            json: None,
            sabotage: false,
        }
    }
}

impl TpccOptions {
    /// Checks the options.
    pub fn check(&self) -> Result<()> {
        if self.policies.is_empty() {
            bail!("--policy: give at least one policy");
        }
        if self.warehouses == 0 {
            bail!("--warehouses must be at least 1");
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        if self.repeat == 0 {
            bail!("--repeat must be at least 1");
        }
        if self.scale.items < 15 || self.scale.customers_per_district < 10 {
            bail!("the scale needs at least 15 items and 10 customers per district");
        }
        if self.duration.is_zero() {
            bail!("--duration must be positive");
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

/// The options as recorded in a run record's `config` (fields as in [`TpccOptions`]).
#[derive(Clone, Debug, Serialize)]
#[allow(missing_docs)]
pub struct ConfigRecord {
    pub warehouses: u32,
    pub scale: Scale,
    pub scale_name: String,
    pub threads: usize,
    pub duration_s: f64,
    pub mix: Mix,
    pub warm: bool,
    pub workers: usize,
    pub cache: String,
    pub cmi_maxmemory: Option<String>,
    pub cmi_max_pinned_memory: Option<String>,
    pub prefix: String,
    pub keep_data: bool,
    pub seed: u64,
    /// The data store's isolation for every policy's transactions.
    pub isolation: &'static str,
    /// NURand constants C: customer id, item id, last name at load and at run time.
    pub nurand_c: [u32; 4],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specification_scale_has_its_cardinalities() {
        let s = Scale::SPEC;
        assert_eq!(s.first_new_order(), 2101);
        assert_eq!(s.delivered_per_district(), 2100);
        assert_eq!(s.last_name_max(), 999);
        let h = Scale::HUNDREDTH;
        assert_eq!(h.first_new_order(), 22);
        assert_eq!(h.last_name_max(), 29);
    }

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
