//! The size of a TPC-C database: warehouses are counted by the caller; this is a warehouse's
//! size and the cardinalities that follow from it.

use anyhow::{bail, Result};
use serde::Serialize;

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
}
