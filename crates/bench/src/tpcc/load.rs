//! The initial database (clause 4.3.3.1, BenchBase's `TPCCLoader`): generated from the seed, one
//! unit of work per table slice, inserted in multi-row INSERTs, each unit in one transaction, by
//! several threads, with progress reported in rows.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use cads::store::{DataStore, Isolation, SqlTransaction, SqlValue};

use super::random::{
    alphanumeric, data_with_original, last_name, numeric, nurand, permutation, uniform, zip,
    C_LAST_LOAD,
};
use super::rows::{
    column_list, placeholders, Customer, District, Entity, History, Item, OrderLine, OrderRow,
    Stock, Warehouse,
};
use super::schema::Tables;
use super::{Scale, DISTRICTS};
use crate::generator::Rng;

/// Parameters per INSERT statement at most (PostgreSQL allows 65,535, SQLite 32,766).
const PARAMS_PER_INSERT: usize = 4_000;
/// Items or stock rows per unit of work.
const ROWS_PER_UNIT: u32 = 10_000;

/// H_AMOUNT of the loaded history rows, and C_YTD_PAYMENT: 10.00.
const LOADED_PAYMENT: i64 = 1_000;

/// D_YTD at load: the district's loaded payments (30,000.00 in the specification), so that
/// consistency condition 9 holds at any scale.
fn district_ytd(scale: Scale) -> i64 {
    i64::from(scale.customers_per_district) * LOADED_PAYMENT
}

/// One slice of the initial database.
#[derive(Clone, Copy, Debug)]
enum Unit {
    /// ITEM rows `first..first + count`.
    Items { first: u32, count: u32 },
    /// The WAREHOUSE row and its DISTRICTs.
    Warehouse { w: u32 },
    /// STOCK rows of a warehouse.
    Stock { w: u32, first: u32, count: u32 },
    /// The CUSTOMERs of a district and their HISTORY rows.
    Customers { w: u32, d: u32 },
    /// The ORDERs of a district, their ORDER-LINEs and the NEW-ORDERs.
    Orders { w: u32, d: u32 },
}

/// A generator for one unit, fixed by the seed and the unit, so the database does not depend on
/// how units are spread over threads.
fn unit_rng(seed: u64, tag: u64, a: u32, b: u32) -> Rng {
    Rng::new(
        seed ^ tag.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (u64::from(a) << 32)
            ^ u64::from(b).wrapping_mul(0xD6E8_FEB8_6659_FD93),
    )
}

/// O_OL_CNT of each loaded order of a district (5..=15), from a stream of its own so the loader
/// knows the number of rows before generating them.
fn line_counts(seed: u64, scale: Scale, w: u32, d: u32) -> Vec<u32> {
    let mut rng = unit_rng(seed, 7, w, d);
    (0..scale.orders_per_district())
        .map(|_| uniform(&mut rng, 5, 15) as u32)
        .collect()
}

fn units(warehouses: u32, scale: Scale) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut first = 1;
    while first <= scale.items {
        let count = ROWS_PER_UNIT.min(scale.items - first + 1);
        units.push(Unit::Items { first, count });
        first += count;
    }
    for w in 1..=warehouses {
        units.push(Unit::Warehouse { w });
        let mut first = 1;
        while first <= scale.items {
            let count = ROWS_PER_UNIT.min(scale.items - first + 1);
            units.push(Unit::Stock { w, first, count });
            first += count;
        }
        for d in 1..=DISTRICTS {
            units.push(Unit::Customers { w, d });
            units.push(Unit::Orders { w, d });
        }
    }
    units
}

/// Rows the whole database has after loading.
fn total_rows(seed: u64, warehouses: u32, scale: Scale) -> u64 {
    let per_district = {
        let c = u64::from(scale.customers_per_district);
        let new_orders = u64::from(scale.orders_per_district() - scale.first_new_order() + 1);
        2 * c + u64::from(scale.orders_per_district()) + new_orders
    };
    let mut total = u64::from(scale.items);
    for w in 1..=warehouses {
        total += 1 + u64::from(DISTRICTS) + u64::from(scale.items);
        for d in 1..=DISTRICTS {
            let lines: u64 = line_counts(seed, scale, w, d)
                .iter()
                .map(|&n| u64::from(n))
                .sum();
            total += per_district + lines;
        }
    }
    total
}

/// Milliseconds since the Unix epoch: the dates of the loaded rows and of the transactions.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Inserts rows into a table in multi-row INSERTs.
fn insert(
    tx: &mut dyn SqlTransaction,
    table: &str,
    columns: &[&str],
    rows: impl IntoIterator<Item = Vec<SqlValue>>,
) -> Result<u64> {
    let per_statement = (PARAMS_PER_INSERT / columns.len()).max(1);
    let row_marks = placeholders(columns.len());
    let head = format!("INSERT INTO {table} ({}) VALUES ", column_list(columns));
    let mut batch: Vec<SqlValue> = Vec::with_capacity(per_statement * columns.len());
    let mut in_batch = 0;
    let mut inserted = 0;
    let mut flush = |batch: &mut Vec<SqlValue>, n: usize| -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mut sql = String::with_capacity(head.len() + n * (row_marks.len() + 2));
        sql.push_str(&head);
        for i in 0..n {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&row_marks);
        }
        tx.execute(&sql, batch)
            .with_context(|| format!("inserting into {table}"))?;
        batch.clear();
        Ok(())
    };
    for row in rows {
        batch.extend(row);
        in_batch += 1;
        inserted += 1;
        if in_batch == per_statement {
            flush(&mut batch, in_batch)?;
            in_batch = 0;
        }
    }
    flush(&mut batch, in_batch)?;
    Ok(inserted)
}

/// What the loader needs to know.
struct Loader<'a> {
    tables: &'a Tables,
    scale: Scale,
    seed: u64,
    now: i64,
}

impl Loader<'_> {
    /// Generates and inserts one unit, in one transaction; returns the rows inserted.
    fn load(&self, store: &dyn DataStore, unit: Unit) -> Result<u64> {
        let mut tx = store.begin(Isolation::ReadCommitted)?;
        let t = self.tables;
        let rows = match unit {
            Unit::Items { first, count } => {
                let mut rng = unit_rng(self.seed, 1, first, 0);
                let items = (first..first + count).map(|id| {
                    Item {
                        id,
                        im_id: uniform(&mut rng, 1, 10_000) as u32,
                        name: alphanumeric(&mut rng, 14, 24),
                        price: uniform(&mut rng, 100, 10_000),
                        data: data_with_original(&mut rng),
                    }
                    .values()
                });
                insert(tx.as_mut(), &t.item, Item::COLUMNS, items)?
            }
            Unit::Warehouse { w } => {
                let mut rng = unit_rng(self.seed, 2, w, 0);
                let warehouse = Warehouse {
                    id: w,
                    name: alphanumeric(&mut rng, 6, 10),
                    street_1: alphanumeric(&mut rng, 10, 20),
                    street_2: alphanumeric(&mut rng, 10, 20),
                    city: alphanumeric(&mut rng, 10, 20),
                    state: alphanumeric(&mut rng, 2, 2),
                    zip: zip(&mut rng),
                    tax: uniform(&mut rng, 0, 2_000),
                    ytd: district_ytd(self.scale) * i64::from(DISTRICTS),
                };
                let mut n = insert(
                    tx.as_mut(),
                    &t.warehouse,
                    Warehouse::COLUMNS,
                    [warehouse.values()],
                )?;
                let districts = (1..=DISTRICTS).map(|d| {
                    District {
                        w_id: w,
                        id: d,
                        name: alphanumeric(&mut rng, 6, 10),
                        street_1: alphanumeric(&mut rng, 10, 20),
                        street_2: alphanumeric(&mut rng, 10, 20),
                        city: alphanumeric(&mut rng, 10, 20),
                        state: alphanumeric(&mut rng, 2, 2),
                        zip: zip(&mut rng),
                        tax: uniform(&mut rng, 0, 2_000),
                        ytd: district_ytd(self.scale),
                        next_o_id: self.scale.orders_per_district() + 1,
                    }
                    .values()
                });
                n += insert(tx.as_mut(), &t.district, District::COLUMNS, districts)?;
                n
            }
            Unit::Stock { w, first, count } => {
                let mut rng = unit_rng(self.seed, 3, w, first);
                let stock = (first..first + count).map(|i| {
                    Stock {
                        w_id: w,
                        i_id: i,
                        quantity: uniform(&mut rng, 10, 100),
                        dist: std::array::from_fn(|_| alphanumeric(&mut rng, 24, 24)),
                        ytd: 0,
                        order_cnt: 0,
                        remote_cnt: 0,
                        data: data_with_original(&mut rng),
                    }
                    .values()
                });
                insert(tx.as_mut(), &t.stock, Stock::COLUMNS, stock)?
            }
            Unit::Customers { w, d } => {
                let mut rng = unit_rng(self.seed, 4, w, d);
                let customers: Vec<Vec<SqlValue>> = (1..=self.scale.customers_per_district)
                    .map(|c| self.customer(&mut rng, w, d, c).values())
                    .collect();
                let mut n = insert(tx.as_mut(), &t.customer, Customer::COLUMNS, customers)?;
                let history = (1..=self.scale.customers_per_district).map(|c| {
                    History {
                        c_id: c,
                        c_d_id: d,
                        c_w_id: w,
                        d_id: d,
                        w_id: w,
                        date: self.now,
                        amount: LOADED_PAYMENT,
                        data: alphanumeric(&mut rng, 12, 24),
                    }
                    .values()
                });
                n += insert(tx.as_mut(), &t.history, History::COLUMNS, history)?;
                n
            }
            Unit::Orders { w, d } => self.orders(tx.as_mut(), w, d)?,
        };
        tx.commit().context("committing a slice of the load")?;
        Ok(rows)
    }

    fn customer(&self, rng: &mut Rng, w: u32, d: u32, c: u32) -> Customer {
        let name_number = if c <= 1000 {
            c - 1
        } else {
            nurand(rng, 255, C_LAST_LOAD, 0, 999)
        };
        Customer {
            w_id: w,
            d_id: d,
            id: c,
            first: alphanumeric(rng, 8, 16),
            middle: "OE".into(),
            last: last_name(name_number),
            street_1: alphanumeric(rng, 10, 20),
            street_2: alphanumeric(rng, 10, 20),
            city: alphanumeric(rng, 10, 20),
            state: alphanumeric(rng, 2, 2),
            zip: zip(rng),
            phone: numeric(rng, 16),
            since: self.now,
            credit: if rng.below(10) == 0 { "BC" } else { "GC" }.into(),
            credit_lim: 5_000_000,
            discount: uniform(rng, 0, 5_000),
            balance: -LOADED_PAYMENT,
            ytd_payment: LOADED_PAYMENT,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: alphanumeric(rng, 300, 500),
        }
    }

    fn orders(&self, tx: &mut dyn SqlTransaction, w: u32, d: u32) -> Result<u64> {
        let t = self.tables;
        let mut rng = unit_rng(self.seed, 5, w, d);
        let customers = permutation(&mut rng, self.scale.customers_per_district);
        let counts = line_counts(self.seed, self.scale, w, d);
        let first_new = self.scale.first_new_order();
        let orders: Vec<OrderRow> = (1..=self.scale.orders_per_district())
            .map(|o| OrderRow {
                w_id: w,
                d_id: d,
                id: o,
                c_id: customers[(o - 1) as usize],
                entry_d: self.now,
                carrier_id: (o < first_new).then(|| uniform(&mut rng, 1, 10) as u32),
                ol_cnt: counts[(o - 1) as usize],
                all_local: 1,
            })
            .collect();
        let mut n = insert(
            tx,
            &t.order,
            OrderRow::COLUMNS,
            orders.iter().map(OrderRow::values),
        )?;
        let mut lines = Vec::new();
        for order in &orders {
            let delivered = order.id < first_new;
            for number in 1..=order.ol_cnt {
                lines.push(
                    OrderLine {
                        w_id: w,
                        d_id: d,
                        o_id: order.id,
                        number,
                        i_id: uniform(&mut rng, 1, i64::from(self.scale.items)) as u32,
                        supply_w_id: w,
                        delivery_d: delivered.then_some(order.entry_d),
                        quantity: 5,
                        amount: if delivered {
                            0
                        } else {
                            uniform(&mut rng, 1, 999_999)
                        },
                        dist_info: alphanumeric(&mut rng, 24, 24),
                    }
                    .values(),
                );
            }
        }
        n += insert(tx, &t.order_line, OrderLine::COLUMNS, lines)?;
        let new_orders = (first_new..=self.scale.orders_per_district())
            .map(|o| vec![SqlValue::from(w), d.into(), o.into()]);
        n += insert(
            tx,
            &t.new_order,
            &["no_w_id", "no_d_id", "no_o_id"],
            new_orders,
        )?;
        Ok(n)
    }
}

/// Creates the tables (dropping old ones) and loads `warehouses` warehouses of `scale`, generated
/// from `seed`, with `threads` threads. `progress(rows done, rows in all)` is called after each
/// unit of work. Returns the rows inserted.
pub fn load_database(
    store: &dyn DataStore,
    tables: &Tables,
    warehouses: u32,
    scale: Scale,
    seed: u64,
    threads: usize,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<u64> {
    tables.create(store).context("creating the TPC-C tables")?;
    let units = units(warehouses, scale);
    let total = total_rows(seed, warehouses, scale);
    let loader = Loader {
        tables,
        scale,
        seed,
        now: now_ms(),
    };
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&unit) = units.get(index) else {
                            return Ok(());
                        };
                        let rows = loader
                            .load(store, unit)
                            .with_context(|| format!("loading {unit:?}"))?;
                        let so_far = done.fetch_add(rows, Ordering::Relaxed) + rows;
                        progress(so_far, total);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a loader thread panicked"))
            .collect()
    });
    results.into_iter().collect::<Result<()>>()?;
    Ok(done.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_cover_every_table_slice() {
        let u = units(2, Scale::HUNDREDTH);
        // items (one unit), then per warehouse: itself, stock, and two per district.
        assert_eq!(u.len(), 1 + 2 * (1 + 1 + 2 * DISTRICTS as usize));
        assert_eq!(line_counts(1, Scale::HUNDREDTH, 1, 1).len(), 30);
        assert_eq!(
            line_counts(1, Scale::HUNDREDTH, 1, 1),
            line_counts(1, Scale::HUNDREDTH, 1, 1)
        );
    }
}
