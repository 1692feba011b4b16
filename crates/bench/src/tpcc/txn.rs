//! The five transactions (clause 2.4–2.8) with BenchBase's simplifications: inputs drawn per
//! terminal, each transaction one session (`Cads::run`, re-run when a lease or serialization
//! conflict aborts it), reads through the CacheStores of [`super::cache`], writes through
//! [`Writes`]. The same code runs under every policy: with the data store alone a session's
//! reads go to the data store, and the read-write transactions begin their SQL transaction
//! first and lock the rows they will change (`FOR UPDATE`, as BenchBase's statements do), since
//! no leases order them.

use std::cell::Cell;
use std::fmt;

use cads::{CacheStore, Cads, Policy, Session};

use super::cache::{
    apply_stock_change, CustomersByName, Db, Delivered, DeliveryWrite, LastOrders, LastOrdersQuery,
    NamesQuery, NewOrderWrite, OldestNewOrders, OldestQuery, Opening, OpeningQuery, OpeningRows,
    Orders, OrdersQuery, PaymentWrite, RecentLines, Rows, RowsQuery, StockChange, TpccWrite,
    Writes,
};
use super::load::now_ms;
use super::random::{last_name, nurand, uniform, C_ID, C_LAST_RUN, OL_I_ID};
use super::rows::{
    Customer, History, Item, Order, OrderLine, OrderRow, RowId, Stock, Warehouse, WarehouseTax,
};
use super::{Scale, DISTRICTS};
use crate::generator::Rng;

/// The five transaction types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// New-Order (clause 2.4).
    NewOrder,
    /// Payment (clause 2.5).
    Payment,
    /// Order-Status (clause 2.6).
    OrderStatus,
    /// Delivery (clause 2.7).
    Delivery,
    /// Stock-Level (clause 2.8).
    StockLevel,
}

impl Kind {
    /// In the order of the mix's weights.
    pub const ALL: [Kind; 5] = [
        Kind::NewOrder,
        Kind::Payment,
        Kind::OrderStatus,
        Kind::Delivery,
        Kind::StockLevel,
    ];

    /// The names in run records (BenchBase's procedure names, upper-cased), in the order of
    /// [`Kind::ALL`].
    pub const NAMES: [&'static str; 5] = [
        "NEW_ORDER",
        "PAYMENT",
        "ORDER_STATUS",
        "DELIVERY",
        "STOCK_LEVEL",
    ];

    /// The name in run records.
    pub fn name(self) -> &'static str {
        Kind::NAMES[self.index()]
    }

    /// Its position in [`Kind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The message of New-Order's intentional rollback (an unused item, clause 2.4.2.3).
pub const ROLLBACK: &str = "New-Order rolled back: unused item number";

/// Whether an error is New-Order's intentional rollback.
pub fn is_rollback(e: &cads::Error) -> bool {
    matches!(e, cads::Error::App(m) if m == ROLLBACK)
}

/// How a customer is chosen: by id, or by last name (60% in Payment and Order-Status).
#[derive(Clone, Debug)]
pub enum CustomerRef {
    /// C_ID.
    Id(u32),
    /// C_LAST.
    Last(String),
}

/// One order line asked for.
#[derive(Clone, Copy, Debug)]
pub struct LineInput {
    /// OL_I_ID.
    pub item: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u32,
    /// OL_QUANTITY.
    pub quantity: u32,
}

/// A transaction's inputs, drawn before it runs so that re-runs do the same work. Fields are
/// the inputs of the specification's clauses: warehouse, district, customer, ...
#[allow(missing_docs)]
#[derive(Clone, Debug)]
pub enum Input {
    NewOrder {
        w: u32,
        d: u32,
        c: u32,
        lines: Vec<LineInput>,
    },
    Payment {
        w: u32,
        d: u32,
        customer_w: u32,
        customer_d: u32,
        customer: CustomerRef,
        /// Cents.
        amount: i64,
    },
    OrderStatus {
        w: u32,
        d: u32,
        customer: CustomerRef,
    },
    Delivery {
        w: u32,
        carrier: u32,
        /// Districts 1..=this (BenchBase: the terminal's upper district).
        last_district: u32,
    },
    StockLevel {
        w: u32,
        d: u32,
        threshold: i64,
    },
}

impl Input {
    /// Which transaction these inputs are for.
    pub fn kind(&self) -> Kind {
        match self {
            Input::NewOrder { .. } => Kind::NewOrder,
            Input::Payment { .. } => Kind::Payment,
            Input::OrderStatus { .. } => Kind::OrderStatus,
            Input::Delivery { .. } => Kind::Delivery,
            Input::StockLevel { .. } => Kind::StockLevel,
        }
    }
}

/// A terminal: a home warehouse and the districts it owns (BenchBase spreads terminals evenly
/// over warehouses, each owning a range of districts).
#[derive(Clone, Debug)]
pub struct Terminal {
    /// The home warehouse.
    pub w: u32,
    /// The first district it owns.
    pub first_district: u32,
    /// The last district it owns.
    pub last_district: u32,
}

impl Terminal {
    /// The terminals for `threads` threads over `warehouses` warehouses: terminal `t` serves
    /// warehouse `t % warehouses + 1`; the k terminals of a warehouse split its districts into k
    /// ranges (k ≤ 10), or each take one district round-robin (k > 10).
    pub fn assign(threads: usize, warehouses: u32) -> Vec<Terminal> {
        let warehouses = warehouses as usize;
        (0..threads)
            .map(|t| {
                let w = (t % warehouses) as u32 + 1;
                let k = threads / warehouses + usize::from(t % warehouses < threads % warehouses);
                let index = t / warehouses;
                let districts = DISTRICTS as usize;
                let (first, last) = if k <= districts {
                    (index * districts / k + 1, (index + 1) * districts / k)
                } else {
                    let d = index % districts + 1;
                    (d, d)
                };
                Terminal {
                    w,
                    first_district: first as u32,
                    last_district: last as u32,
                }
            })
            .collect()
    }

    fn district(&self, rng: &mut Rng) -> u32 {
        uniform(
            rng,
            i64::from(self.first_district),
            i64::from(self.last_district),
        ) as u32
    }

    /// Draws the next transaction's inputs (clause 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1).
    pub fn draw(&self, kind: Kind, rng: &mut Rng, scale: Scale, warehouses: u32) -> Input {
        let w = self.w;
        let customer_id = |rng: &mut Rng| nurand(rng, 1023, C_ID, 1, scale.customers_per_district);
        let customer_ref = |rng: &mut Rng| {
            if uniform(rng, 1, 100) <= 60 {
                CustomerRef::Last(last_name(nurand(
                    rng,
                    255,
                    C_LAST_RUN,
                    0,
                    scale.last_name_max(),
                )))
            } else {
                CustomerRef::Id(customer_id(rng))
            }
        };
        let other_warehouse = |rng: &mut Rng| {
            let other = uniform(rng, 1, i64::from(warehouses) - 1) as u32;
            if other >= w {
                other + 1
            } else {
                other
            }
        };
        match kind {
            Kind::NewOrder => {
                let d = self.district(rng);
                let c = customer_id(rng);
                let count = uniform(rng, 5, 15) as usize;
                let rollback = uniform(rng, 1, 100) == 1;
                let mut lines: Vec<LineInput> = (0..count)
                    .map(|_| LineInput {
                        item: nurand(rng, 8191, OL_I_ID, 1, scale.items),
                        supply_w: if warehouses > 1 && uniform(rng, 1, 100) == 1 {
                            other_warehouse(rng)
                        } else {
                            w
                        },
                        quantity: uniform(rng, 1, 10) as u32,
                    })
                    .collect();
                if rollback {
                    lines.last_mut().expect("5 or more lines").item = scale.unused_item();
                }
                Input::NewOrder { w, d, c, lines }
            }
            Kind::Payment => {
                let d = self.district(rng);
                let (customer_w, customer_d) = if warehouses == 1 || uniform(rng, 1, 100) <= 85 {
                    (w, d)
                } else {
                    (
                        other_warehouse(rng),
                        uniform(rng, 1, i64::from(DISTRICTS)) as u32,
                    )
                };
                Input::Payment {
                    w,
                    d,
                    customer_w,
                    customer_d,
                    customer: customer_ref(rng),
                    amount: uniform(rng, 100, 500_000),
                }
            }
            Kind::OrderStatus => Input::OrderStatus {
                w,
                d: self.district(rng),
                customer: customer_ref(rng),
            },
            Kind::Delivery => Input::Delivery {
                w,
                carrier: uniform(rng, 1, 10) as u32,
                last_district: self.last_district,
            },
            Kind::StockLevel => Input::StockLevel {
                w,
                d: self.district(rng),
                threshold: uniform(rng, 10, 20),
            },
        }
    }
}

/// What a transaction needs: the framework and the database's CacheStores.
pub struct Context<'a> {
    /// The framework.
    pub cads: &'a Cads,
    /// The database's CacheStores.
    pub db: &'a Db,
    /// Test hook (`TpccOptions::sabotage`).
    pub sabotage: bool,
}

/// What one run of a transaction did, for the driver's counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Attempts {
    /// Times the session ran (1 + re-runs after conflicts).
    pub sessions: u64,
    /// Reads through CacheStores, over all sessions.
    pub reads: u64,
}

impl Context<'_> {
    /// Runs one transaction. `Ok` carries nothing of interest: the transactions' outputs are
    /// what a terminal would display, and are dropped.
    pub fn execute(&self, input: &Input, attempts: &mut Attempts) -> cads::Result<()> {
        let reads = Cell::new(0u64);
        let sessions = Cell::new(0u64);
        let lock = self.cads.policy() == Policy::DataStoreOnly;
        let together = matches!(self.cads.policy(), Policy::WriteThrough | Policy::WriteBack);
        let result = self.cads.run(|s| {
            sessions.set(sessions.get() + 1);
            let mut r = Reader {
                s,
                reads: &reads,
                db: self.db,
                lock,
                together,
            };
            match input {
                Input::NewOrder { w, d, c, lines } => r.new_order(*w, *d, *c, lines),
                Input::Payment {
                    w,
                    d,
                    customer_w,
                    customer_d,
                    customer,
                    amount,
                } => r.payment(*w, *d, (*customer_w, *customer_d), customer, *amount),
                Input::OrderStatus { w, d, customer } => r.order_status(*w, *d, customer),
                Input::Delivery {
                    w,
                    carrier,
                    last_district,
                } => r.delivery(*w, *carrier, *last_district),
                Input::StockLevel { w, d, threshold } => {
                    r.stock_level(*w, *d, *threshold).map(drop)
                }
            }
        });
        attempts.sessions += sessions.get();
        attempts.reads += reads.get();
        if self.sabotage && result.is_ok() {
            if let Input::Payment { w, .. } = input {
                self.sabotage_warehouse(*w);
            }
        }
        result
    }

    /// Adds a cent to W_YTD in the data store alone: the cached warehouse is now stale.
    fn sabotage_warehouse(&self, w: u32) {
        let sql = format!(
            "UPDATE {} SET w_ytd = w_ytd + 1 WHERE w_id = ?",
            self.db.tables.warehouse
        );
        let outcome = self
            .cads
            .store()
            .begin(cads::store::Isolation::ReadCommitted)
            .and_then(|mut tx| {
                tx.execute(&sql, &[w.into()])?;
                tx.commit()
            });
        if let Err(e) = outcome {
            eprintln!("warning: the sabotage write failed: {e}");
        }
    }
}

/// One session's reads and writes.
struct Reader<'r, 's, 'a> {
    s: &'r mut Session<'a>,
    reads: &'s Cell<u64>,
    db: &'r Db,
    /// Lock what is read for update (the data store alone).
    lock: bool,
    /// Read a transaction's opening rows together (see `opening`).
    together: bool,
}

impl Reader<'_, '_, '_> {
    fn read<C: CacheStore>(&mut self, cs: &C, q: &C::Query) -> cads::Result<C::Output> {
        self.reads.set(self.reads.get() + 1);
        self.s.read(cs, q)
    }

    /// Rows of `E` by distinct keys, in order; a missing row is an error of the database.
    fn rows<E: super::rows::Entity>(
        &mut self,
        ids: Vec<RowId>,
        for_update: bool,
    ) -> cads::Result<Vec<Option<E>>> {
        let q = RowsQuery {
            ids,
            for_update: for_update && self.lock,
        };
        self.read(&Rows::<E>::new(self.db), &q)
    }

    fn row<E: super::rows::Entity>(&mut self, id: RowId, for_update: bool) -> cads::Result<E> {
        let row = self.rows::<E>(vec![id], for_update)?.pop().flatten();
        present(row, E::TAG, id)
    }

    /// The rows a New-Order or a Payment starts from. Where writes change cached values in place
    /// (write-through, write-back) in one read, with the recent orders if `q.recent` (see
    /// [`OpeningRows`]); elsewhere row by row, without them: a write-around New-Order deletes its
    /// district's entry, and a read of all the rows that misses queries them all again.
    fn opening(&mut self, mut q: OpeningQuery) -> cads::Result<Opening> {
        if self.together {
            q.lock_district &= self.lock;
            q.lock_customer &= self.lock;
            return self.read(&OpeningRows(self.db), &q);
        }
        let (warehouse, tax) = match q.tax_only {
            true => (None, self.row::<WarehouseTax>(RowId::top(q.w), false)?.tax),
            false => {
                let row: Warehouse = self.row(RowId::top(q.w), false)?;
                let tax = row.tax;
                (Some(row), tax)
            }
        };
        let district = self.row(RowId::in_warehouse(q.w, q.d), q.lock_district)?;
        let customer = match q.customer {
            Some((w, d, c)) => Some(self.row(RowId::in_district(w, d, c), q.lock_customer)?),
            None => None,
        };
        Ok(Opening {
            warehouse,
            tax: Some(tax),
            district: Some(district),
            customer,
            recent: None,
        })
    }

    /// With the data store alone, a read-write transaction begins its SQL transaction before it
    /// reads, so its reads and locks belong to it.
    fn begin_writing(&mut self) -> cads::Result<()> {
        if self.lock {
            self.s.tx().sql()?;
        }
        Ok(())
    }

    fn customer_id(&mut self, w: u32, d: u32, customer: &CustomerRef) -> cads::Result<u32> {
        match customer {
            CustomerRef::Id(c) => Ok(*c),
            CustomerRef::Last(last) => {
                let q = NamesQuery {
                    w,
                    d,
                    lasts: vec![last.clone()],
                };
                let ids = self
                    .read(&CustomersByName(self.db), &q)?
                    .pop()
                    .unwrap_or_default();
                if ids.is_empty() {
                    return Err(cads::Error::App(format!(
                        "no customer named {last} in district {w}/{d}"
                    )));
                }
                // Position ⌈n/2⌉ of the customers ordered by first name (clause 2.5.2.2).
                Ok(ids[ids.len().div_ceil(2) - 1])
            }
        }
    }

    /// New-Order (clause 2.4.2).
    fn new_order(&mut self, w: u32, d: u32, c: u32, lines: &[LineInput]) -> cads::Result<()> {
        self.begin_writing()?;
        // The district's recent orders too, which this session changes.
        let opening = self.opening(OpeningQuery {
            w,
            d,
            tax_only: true,
            customer: Some((w, d, c)),
            recent: true,
            lock_district: true,
            lock_customer: false,
        })?;
        present(opening.tax, "warehouse", w)?;
        let district = present(opening.district, "district", (w, d))?;
        present(opening.customer, "customer", (w, d, c))?;
        let mut item_ids: Vec<u32> = lines.iter().map(|l| l.item).collect();
        item_ids.sort_unstable();
        item_ids.dedup();
        let items = self.rows::<Item>(item_ids.iter().map(|&i| RowId::top(i)).collect(), false)?;
        if items.iter().any(Option::is_none) {
            // Nothing was written yet: returning the error rolls the session back.
            return Err(cads::Error::App(ROLLBACK.into()));
        }
        let price = |i: u32| {
            let at = item_ids.binary_search(&i).expect("read above");
            items[at].as_ref().expect("checked above").price
        };
        let mut stock_ids: Vec<RowId> = lines
            .iter()
            .map(|l| RowId::in_warehouse(l.supply_w, l.item))
            .collect();
        stock_ids.sort_unstable();
        stock_ids.dedup();
        let mut stock: Vec<Stock> = self
            .rows::<Stock>(stock_ids.clone(), true)?
            .into_iter()
            .zip(&stock_ids)
            .map(|(s, id)| s.ok_or_else(|| cads::Error::App(format!("missing stock {id:?}"))))
            .collect::<cads::Result<_>>()?;
        let o_id = district.next_o_id;
        let entry_d = now_ms();
        let all_local = lines.iter().all(|l| l.supply_w == w);
        let mut changes = Vec::with_capacity(lines.len());
        let mut order_lines = Vec::with_capacity(lines.len());
        for (number, line) in lines.iter().enumerate() {
            let id = RowId::in_warehouse(line.supply_w, line.item);
            let s = &mut stock[stock_ids.binary_search(&id).expect("read above")];
            let quantity = i64::from(line.quantity);
            let after = if s.quantity - quantity >= 10 {
                s.quantity - quantity
            } else {
                s.quantity - quantity + 91
            };
            let change = StockChange {
                w: line.supply_w,
                i: line.item,
                quantity_delta: after - s.quantity,
                ordered: line.quantity,
                remote: line.supply_w != w,
            };
            // A later line of the same item sees this one's change.
            apply_stock_change(s, &change);
            changes.push(change);
            order_lines.push(OrderLine {
                w_id: w,
                d_id: d,
                o_id,
                number: number as u32 + 1,
                i_id: line.item,
                supply_w_id: line.supply_w,
                delivery_d: None,
                quantity: line.quantity,
                amount: quantity * price(line.item),
                dist_info: s.dist[(d - 1) as usize].clone(),
            });
        }
        // Stock rows in key order (a stable sort keeps the lines of one item in order), so that
        // sessions lock them in one order and do not deadlock.
        changes.sort_by_key(|c| (c.w, c.i));
        let write = TpccWrite::NewOrder(NewOrderWrite {
            order: Order {
                order: OrderRow {
                    w_id: w,
                    d_id: d,
                    id: o_id,
                    c_id: c,
                    entry_d,
                    carrier_id: None,
                    ol_cnt: lines.len() as u32,
                    all_local: u32::from(all_local),
                },
                lines: order_lines,
            },
            stock: changes,
        });
        self.s.write(&Writes(self.db), &write)
    }

    /// Payment (clause 2.5.2).
    fn payment(
        &mut self,
        w: u32,
        d: u32,
        (cw, cd): (u32, u32),
        customer: &CustomerRef,
        amount: i64,
    ) -> cads::Result<()> {
        self.begin_writing()?;
        let by_id = match customer {
            CustomerRef::Id(c) => Some((cw, cd, *c)),
            CustomerRef::Last(_) => None,
        };
        let opening = self.opening(OpeningQuery {
            w,
            d,
            tax_only: false,
            customer: by_id,
            recent: false,
            lock_district: false,
            lock_customer: true,
        })?;
        let warehouse = present(opening.warehouse, "warehouse", w)?;
        let district = present(opening.district, "district", (w, d))?;
        let (c, customer) = match (by_id, opening.customer) {
            (Some((_, _, c)), customer) => (c, present(customer, "customer", (cw, cd, c))?),
            (None, _) => {
                let c = self.customer_id(cw, cd, customer)?;
                (c, self.row(RowId::in_district(cw, cd, c), true)?)
            }
        };
        let new_data = (customer.credit == "BC").then(|| {
            let mut data = format!(
                "{c} {cd} {cw} {d} {w} {}.{:02} | {}",
                amount / 100,
                amount % 100,
                customer.data
            );
            data.truncate(500);
            data
        });
        let write = TpccWrite::Payment(PaymentWrite {
            w,
            d,
            customer: (cw, cd, c),
            amount,
            new_data,
            history: History {
                c_id: c,
                c_d_id: cd,
                c_w_id: cw,
                d_id: d,
                w_id: w,
                date: now_ms(),
                amount,
                data: format!("{}    {}", warehouse.name, district.name),
            },
        });
        self.s.write(&Writes(self.db), &write)
    }

    /// Order-Status (clause 2.6.2).
    fn order_status(&mut self, w: u32, d: u32, customer: &CustomerRef) -> cads::Result<()> {
        let c = self.customer_id(w, d, customer)?;
        let _customer: Customer = self.row(RowId::in_district(w, d, c), false)?;
        let q = LastOrdersQuery {
            w,
            d,
            customers: vec![c],
        };
        let Some(o) = self.read(&LastOrders(self.db), &q)?.pop().flatten() else {
            return Ok(()); // a customer without orders (none in a loaded database)
        };
        let q = OrdersQuery {
            ids: vec![(w, d, o)],
        };
        self.read(&Orders(self.db), &q)?
            .pop()
            .flatten()
            .ok_or_else(|| cads::Error::App(format!("order {w}/{d}/{o} is missing")))
            .map(drop)
    }

    /// Delivery (clause 2.7.4), all districts in one transaction as BenchBase runs it.
    fn delivery(&mut self, w: u32, carrier: u32, last_district: u32) -> cads::Result<()> {
        self.begin_writing()?;
        let districts: Vec<u32> = (1..=last_district).collect();
        let oldest = self.read(
            &OldestNewOrders(self.db),
            &OldestQuery {
                w,
                districts: districts.clone(),
            },
        )?;
        let q = OrdersQuery {
            ids: districts
                .iter()
                .zip(&oldest)
                .map(|(&d, &o)| (w, d, o))
                .collect(),
        };
        let orders = self.read(&Orders(self.db), &q)?;
        let delivered: Vec<Delivered> = districts
            .iter()
            .zip(orders)
            .filter_map(|(&d, order)| {
                // No order with the oldest id: the district has nothing to deliver.
                let order = order?;
                Some(Delivered {
                    d,
                    o_id: order.order.id,
                    c_id: order.order.c_id,
                    amount: order.lines.iter().map(|l| l.amount).sum(),
                })
            })
            .collect();
        if delivered.is_empty() {
            return Ok(());
        }
        let write = TpccWrite::Delivery(DeliveryWrite {
            w,
            carrier,
            date: now_ms(),
            orders: delivered,
        });
        self.s.write(&Writes(self.db), &write)
    }

    /// Stock-Level (clause 2.8.2): the number of distinct items of the district's last 20 orders
    /// whose stock is below the threshold.
    fn stock_level(&mut self, w: u32, d: u32, threshold: i64) -> cads::Result<usize> {
        let recent = self.read(&RecentLines(self.db), &(w, d))?;
        let ids = recent
            .items()
            .into_iter()
            .map(|i| RowId::in_warehouse(w, i))
            .collect();
        let stock = self.rows::<Stock>(ids, false)?;
        Ok(stock
            .iter()
            .flatten()
            .filter(|s| s.quantity < threshold)
            .count())
    }
}

/// A row the database must have; its absence is an error of the database.
fn present<T>(row: Option<T>, what: &str, id: impl fmt::Debug) -> cads::Result<T> {
    row.ok_or_else(|| cads::Error::App(format!("missing {what} row {id:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminals_split_the_districts() {
        let t = Terminal::assign(3, 1);
        let ranges: Vec<(u32, u32)> = t
            .iter()
            .map(|t| (t.first_district, t.last_district))
            .collect();
        assert_eq!(ranges, vec![(1, 3), (4, 6), (7, 10)]);
        let t = Terminal::assign(4, 2);
        assert_eq!(t.iter().map(|t| t.w).collect::<Vec<_>>(), vec![1, 2, 1, 2]);
        assert_eq!((t[0].first_district, t[0].last_district), (1, 5));
        assert_eq!((t[2].first_district, t[2].last_district), (6, 10));
        let t = Terminal::assign(12, 1);
        assert!(t.iter().all(|t| t.first_district == t.last_district));
        assert_eq!(t[11].first_district, 2);
    }

    #[test]
    fn inputs_follow_the_specification() {
        let terminal = &Terminal::assign(1, 2)[0];
        let mut rng = Rng::new(3);
        let (mut rollbacks, mut remote_lines, mut lines_total) = (0, 0, 0);
        for _ in 0..5_000 {
            let Input::NewOrder { w, d, c, lines } =
                terminal.draw(Kind::NewOrder, &mut rng, Scale::SPEC, 2)
            else {
                unreachable!()
            };
            assert_eq!(w, 1);
            assert!((1..=10).contains(&d) && (1..=3000).contains(&c));
            assert!((5..=15).contains(&lines.len()));
            rollbacks += usize::from(lines.last().unwrap().item == Scale::SPEC.unused_item());
            remote_lines += lines.iter().filter(|l| l.supply_w != 1).count();
            lines_total += lines.len();
        }
        // 1% rollbacks and 1% remote lines, give or take.
        assert!((20..=90).contains(&rollbacks), "{rollbacks}");
        let remote = remote_lines as f64 / lines_total as f64;
        assert!((0.005..0.02).contains(&remote), "{remote}");
        let mut by_name = 0;
        for _ in 0..1000 {
            if let Input::Payment {
                customer: CustomerRef::Last(name),
                amount,
                ..
            } = terminal.draw(Kind::Payment, &mut rng, Scale::SPEC, 2)
            {
                by_name += 1;
                assert!(name.len() >= 9);
                assert!((100..=500_000).contains(&amount));
            }
        }
        assert!((520..=680).contains(&by_name), "{by_name}");
    }
}
