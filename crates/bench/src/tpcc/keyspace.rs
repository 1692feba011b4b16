//! Every cache entry of a TPC-C database, in batches: what the warm-up reads through the cache
//! and what the final check compares with the data store.

use cads::store::SqlStore;
use cads::{CacheStore, Session};

use super::cache::{
    CustomersByName, Db, LastOrders, LastOrdersQuery, NamesQuery, OldestNewOrders, OldestQuery,
    Orders, OrdersQuery, RecentLines, Rows, RowsQuery,
};
use super::random::last_name;
use super::rows::{Customer, District, Item, RowExt, RowId, Stock, Warehouse, WarehouseTax};
use super::DISTRICTS;

/// Rows per batch (orders carry their lines: fewer of them).
const BATCH: u32 = 500;
const ORDER_BATCH: u32 = 100;

/// One read of many entries, through the CacheStore its variant names.
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub enum Batch {
    Warehouses(RowsQuery),
    WarehouseTaxes(RowsQuery),
    Districts(RowsQuery),
    Customers(RowsQuery),
    Items(RowsQuery),
    Stock(RowsQuery),
    Orders(OrdersQuery),
    Names(NamesQuery),
    LastOrders(LastOrdersQuery),
    Oldest(OldestQuery),
    Recent((u32, u32)),
}

fn entries<C: CacheStore>(
    s: &mut Session<'_>,
    cs: &C,
    q: &C::Query,
) -> cads::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let out = s.read(cs, q)?;
    Ok(cs.entries(q, &out))
}

impl Batch {
    /// Reads the batch in a session (through the cache, or from the data store alone) and
    /// returns its entries as the cache holds them.
    pub fn read(&self, s: &mut Session<'_>, db: &Db) -> cads::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        match self {
            Batch::Warehouses(q) => entries(s, &Rows::<Warehouse>::new(db), q),
            Batch::WarehouseTaxes(q) => entries(s, &Rows::<WarehouseTax>::new(db), q),
            Batch::Districts(q) => entries(s, &Rows::<District>::new(db), q),
            Batch::Customers(q) => entries(s, &Rows::<Customer>::new(db), q),
            Batch::Items(q) => entries(s, &Rows::<Item>::new(db), q),
            Batch::Stock(q) => entries(s, &Rows::<Stock>::new(db), q),
            Batch::Orders(q) => entries(s, &Orders(db), q),
            Batch::Names(q) => entries(s, &CustomersByName(db), q),
            Batch::LastOrders(q) => entries(s, &LastOrders(db), q),
            Batch::Oldest(q) => entries(s, &OldestNewOrders(db), q),
            Batch::Recent(q) => entries(s, &RecentLines(db), q),
        }
    }

    /// How many entries the batch covers.
    pub fn len(&self) -> usize {
        match self {
            Batch::Warehouses(q)
            | Batch::WarehouseTaxes(q)
            | Batch::Districts(q)
            | Batch::Customers(q)
            | Batch::Items(q)
            | Batch::Stock(q) => q.ids.len(),
            Batch::Orders(q) => q.ids.len(),
            Batch::Names(q) => q.lasts.len(),
            Batch::LastOrders(q) => q.customers.len(),
            Batch::Oldest(q) => q.districts.len(),
            Batch::Recent(_) => 1,
        }
    }

    /// Whether it covers nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn chunks(first: u32, last: u32, size: u32) -> impl Iterator<Item = (u32, u32)> {
    (first..=last)
        .step_by(size as usize)
        .map(move |from| (from, (from + size - 1).min(last)))
}

fn rows(ids: impl Iterator<Item = RowId>) -> RowsQuery {
    RowsQuery {
        ids: ids.collect(),
        for_update: false,
    }
}

/// D_NEXT_O_ID of every district, as the data store has it now: `[w - 1][d - 1]`.
pub fn next_order_ids(
    store: &dyn SqlStore,
    db: &Db,
    warehouses: u32,
) -> cads::store::Result<Vec<Vec<u32>>> {
    let mut next = vec![vec![0; DISTRICTS as usize]; warehouses as usize];
    let mut tx = store.begin_read(cads::store::Isolation::ReadCommitted)?;
    let sql = format!(
        "SELECT d_w_id, d_id, d_next_o_id FROM {}",
        db.tables.district
    );
    for row in tx.query(&sql, &[])? {
        let (w, d): (u32, u32) = (row.col(0)?, row.col(1)?);
        if let Some(slot) = next
            .get_mut(w as usize - 1)
            .and_then(|v| v.get_mut(d as usize - 1))
        {
            *slot = row.col(2)?;
        }
    }
    tx.rollback()?;
    Ok(next)
}

/// Batches covering every entry of the database: each row, the unused item, every order up to
/// the next one of each district (absent), and the per-district entries. `next_order[w-1][d-1]`
/// is each district's D_NEXT_O_ID.
pub fn batches(db: &Db, warehouses: u32, next_order: &[Vec<u32>]) -> Vec<Batch> {
    let scale = db.scale;
    let mut out = Vec::new();
    out.push(Batch::Warehouses(rows((1..=warehouses).map(RowId::top))));
    out.push(Batch::WarehouseTaxes(rows(
        (1..=warehouses).map(RowId::top),
    )));
    for (from, to) in chunks(1, scale.unused_item(), BATCH) {
        out.push(Batch::Items(rows((from..=to).map(RowId::top))));
    }
    for w in 1..=warehouses {
        out.push(Batch::Districts(rows(
            (1..=DISTRICTS).map(|d| RowId::in_warehouse(w, d)),
        )));
        out.push(Batch::Oldest(OldestQuery {
            w,
            districts: (1..=DISTRICTS).collect(),
        }));
        for (from, to) in chunks(1, scale.items, BATCH) {
            out.push(Batch::Stock(rows(
                (from..=to).map(|i| RowId::in_warehouse(w, i)),
            )));
        }
        for d in 1..=DISTRICTS {
            let customers = scale.customers_per_district;
            for (from, to) in chunks(1, customers, BATCH) {
                out.push(Batch::Customers(rows(
                    (from..=to).map(|c| RowId::in_district(w, d, c)),
                )));
                out.push(Batch::LastOrders(LastOrdersQuery {
                    w,
                    d,
                    customers: (from..=to).collect(),
                }));
            }
            for (from, to) in chunks(0, scale.last_name_max(), BATCH) {
                out.push(Batch::Names(NamesQuery {
                    w,
                    d,
                    lasts: (from..=to).map(last_name).collect(),
                }));
            }
            let next = next_order[w as usize - 1][d as usize - 1];
            for (from, to) in chunks(1, next, ORDER_BATCH) {
                out.push(Batch::Orders(OrdersQuery {
                    ids: (from..=to).map(|o| (w, d, o)).collect(),
                }));
            }
            out.push(Batch::Recent((w, d)));
        }
    }
    out
}
