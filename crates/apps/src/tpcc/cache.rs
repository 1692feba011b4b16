//! TPC-C's data as cache entries: the [`CacheStore`]s the transactions read through, and the one
//! they write through.
//!
//! | key | value | read by | changed by |
//! | --- | --- | --- | --- |
//! | `W:<w>` | the WAREHOUSE row | Payment | Payment (W_YTD) |
//! | `WT:<w>` | its W_TAX | New-Order | nothing |
//! | `D:<w>:<d>` | the DISTRICT row | New-Order, Payment | New-Order (D_NEXT_O_ID), Payment (D_YTD) |
//! | `C:<w>:<d>:<c>` | the CUSTOMER row | New-Order, Payment, Order-Status | Payment, Delivery |
//! | `CL:<w>:<d>:<last>` | ids of the district's customers with that last name, by C_FIRST | Payment, Order-Status | nothing (names never change) |
//! | `I:<i>` | the ITEM row, or absent | New-Order | nothing |
//! | `S:<w>:<i>` | the STOCK row | New-Order, Stock-Level | New-Order |
//! | `O:<w>:<d>:<o>` | the ORDER with its ORDER-LINEs, or absent | Order-Status, Delivery | New-Order (created, and the next one absent), Delivery |
//! | `CO:<w>:<d>:<c>` | the customer's newest order id | Order-Status | New-Order |
//! | `NO:<w>:<d>` | the district's oldest undelivered order id (D_NEXT_O_ID when none is) | Delivery | Delivery |
//! | `RL:<w>:<d>` | the item ids of the district's last 20 orders | Stock-Level | New-Order |
//!
//! Rows are JSON ([`super::rows`]). The per-district entries replace the queries that are not
//! lookups by key: NEW-ORDER's minimum (Delivery), the newest order of a customer (Order-Status),
//! the lines of the last 20 orders (Stock-Level) and the customers by last name (Payment,
//! Order-Status). Since undelivered orders are always the ids from the oldest one up to
//! D_NEXT_O_ID − 1 (consistency condition 3), Delivery needs only the oldest id and the order
//! entry: an absent order means the district has nothing to deliver. New-Order caches the absence
//! of the order after its own, so that Delivery's read of a district with nothing undelivered hits
//! (a miss under write-back would apply the warehouse's queue first).
//!
//! Every write changes the data store with statements computed from what the session read and
//! from the write alone, never from the data store's current values: additions of deltas
//! (`s_quantity = s_quantity + ?`) where several sessions change a row, so that write-back can
//! apply the sessions of different warehouses in any order relative to one another. The cached
//! values change the same way (`CacheChange::Modify`, batched by the framework into one
//! read-modify-write round trip per CMI; `Set` for new entries).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use cads::store::{SqlTransaction, SqlValue, StoreError};
use cads::{CacheChange, CacheStore, SqlBuffer, Statement, StoreTx};
use serde::{Deserialize, Serialize};

use super::rows::{
    column_list, decode, encode, entity_key, placeholders, Customer, District, Entity, History,
    Order, OrderLine, OrderRow, RowExt, RowId, Stock, Warehouse, WarehouseTax,
};
use super::scale::Scale;
use super::schema::Tables;

/// Orders whose lines Stock-Level examines (clause 2.8.2.2).
pub const STOCK_LEVEL_ORDERS: u32 = 20;

/// What every CacheStore of one TPC-C database shares: its tables, its scale, and the count of
/// reads that had to query the data store.
#[derive(Debug)]
pub struct Db {
    /// The table names.
    pub tables: Tables,
    /// The scale it was loaded at.
    pub scale: Scale,
    store_queries: AtomicU64,
}

impl Db {
    /// The database of `tables` at `scale`.
    pub fn new(tables: Tables, scale: Scale) -> Db {
        Db {
            tables,
            scale,
            store_queries: AtomicU64::new(0),
        }
    }

    /// Reads through these CacheStores that queried the data store (a miss, or any read of the
    /// data store alone), all threads.
    pub fn store_queries(&self) -> u64 {
        self.store_queries.load(Ordering::Relaxed)
    }

    fn count_query(&self) {
        self.store_queries.fetch_add(1, Ordering::Relaxed);
    }

    /// The name of warehouse `w`'s write-back queue: `<table prefix>w<w>`, so that databases of
    /// different prefixes sharing CMIs keep their queues apart.
    pub fn queue(&self, w: u32) -> String {
        format!("{}w{w}", self.tables.prefix)
    }
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// `W:<w>`.
pub fn warehouse_key(w: u32) -> Vec<u8> {
    entity_key::<Warehouse>(RowId::top(w))
}
/// `WT:<w>`.
pub fn warehouse_tax_key(w: u32) -> Vec<u8> {
    entity_key::<WarehouseTax>(RowId::top(w))
}
/// `D:<w>:<d>`.
pub fn district_key(w: u32, d: u32) -> Vec<u8> {
    entity_key::<District>(RowId::in_warehouse(w, d))
}
/// `C:<w>:<d>:<c>`.
pub fn customer_key(w: u32, d: u32, c: u32) -> Vec<u8> {
    entity_key::<Customer>(RowId::in_district(w, d, c))
}
/// `S:<w>:<i>`.
pub fn stock_key(w: u32, i: u32) -> Vec<u8> {
    entity_key::<Stock>(RowId::in_warehouse(w, i))
}
/// `O:<w>:<d>:<o>`.
pub fn order_key(w: u32, d: u32, o: u32) -> Vec<u8> {
    format!("O:{w}:{d}:{o}").into_bytes()
}
/// `CO:<w>:<d>:<c>`.
pub fn last_order_key(w: u32, d: u32, c: u32) -> Vec<u8> {
    format!("CO:{w}:{d}:{c}").into_bytes()
}
/// `CL:<w>:<d>:<last>`.
pub fn name_key(w: u32, d: u32, last: &str) -> Vec<u8> {
    format!("CL:{w}:{d}:{last}").into_bytes()
}
/// `NO:<w>:<d>`.
pub fn oldest_new_order_key(w: u32, d: u32) -> Vec<u8> {
    format!("NO:{w}:{d}").into_bytes()
}
/// `RL:<w>:<d>`.
pub fn recent_lines_key(w: u32, d: u32) -> Vec<u8> {
    format!("RL:{w}:{d}").into_bytes()
}

fn decode_all<T: serde::de::DeserializeOwned>(values: &[Vec<u8>]) -> Option<Vec<Option<T>>> {
    values.iter().map(|v| decode(v)).collect()
}

/// The data-store transaction a read runs in: the session's write transaction when the read
/// locks rows it will change (the data store alone), else the one for reads.
fn reader<'t, 's>(
    tx: &'t mut StoreTx<'s>,
    for_update: bool,
) -> Result<&'t mut (dyn SqlTransaction + 's), StoreError> {
    if for_update {
        tx.sql()
    } else {
        tx.read_sql()
    }
}

/// `a = ? AND b = ? AND id IN (?, ?, ...)`, with its parameters.
fn scoped_in(
    scope: &[&str],
    id: &str,
    scope_values: &[u32],
    ids: &[u32],
) -> (String, Vec<SqlValue>) {
    let mut sql = String::new();
    let mut params = Vec::with_capacity(scope.len() + ids.len());
    for (column, value) in scope.iter().zip(scope_values) {
        sql.push_str(column);
        sql.push_str(" = ? AND ");
        params.push((*value).into());
    }
    sql.push_str(id);
    sql.push_str(" IN ");
    sql.push_str(&placeholders(ids.len()));
    params.extend(ids.iter().map(|&i| SqlValue::from(i)));
    (sql, params)
}

/// Ids grouped by their leading key columns, in first-seen order.
fn by_scope(ids: &[RowId]) -> Vec<([u32; 2], Vec<u32>)> {
    let mut groups: Vec<([u32; 2], Vec<u32>)> = Vec::new();
    for id in ids {
        match groups.iter_mut().find(|(s, _)| *s == id.scope) {
            Some((_, list)) => list.push(id.id),
            None => groups.push((id.scope, vec![id.id])),
        }
    }
    groups
}

// ---------------------------------------------------------------------------------------------
// Rows by key
// ---------------------------------------------------------------------------------------------

/// Rows of one table by key, one cache entry per row.
pub struct Rows<'a, E> {
    db: &'a Db,
    entity: PhantomData<fn() -> E>,
}

impl<'a, E> Rows<'a, E> {
    /// The rows of `E` in `db`.
    pub fn new(db: &'a Db) -> Self {
        Rows {
            db,
            entity: PhantomData,
        }
    }
}

/// Which rows to read (distinct keys), and whether to lock them for the session's writes (the
/// data store alone; with a cache the leases order the sessions).
#[derive(Clone, Debug)]
pub struct RowsQuery {
    /// The keys, distinct.
    pub ids: Vec<RowId>,
    /// Lock the rows (`FOR UPDATE`) in the session's write transaction.
    pub for_update: bool,
}

impl<E: Entity> CacheStore for Rows<'_, E> {
    type Query = RowsQuery;
    type Write = Infallible;
    type Output = Vec<Option<E>>;

    fn keys_read(&self, q: &RowsQuery) -> Vec<Vec<u8>> {
        q.ids.iter().map(|&id| entity_key::<E>(id)).collect()
    }

    fn result_from_cache(&self, _: &RowsQuery, values: &[Vec<u8>]) -> Option<Vec<Option<E>>> {
        decode_all(values)
    }

    fn query_store(
        &self,
        q: &RowsQuery,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Option<E>>, StoreError> {
        self.db.count_query();
        self.fetch(q, tx)
    }

    fn entries(&self, q: &RowsQuery, rows: &Vec<Option<E>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        q.ids
            .iter()
            .zip(rows)
            .map(|(&id, row)| (entity_key::<E>(id), encode(row.as_ref())))
            .collect()
    }

    cads::read_only!();
}

impl<E: Entity> Rows<'_, E> {
    /// The rows from the data store, not counted as a query (see [`Db::store_queries`]).
    fn fetch(&self, q: &RowsQuery, tx: &mut StoreTx<'_>) -> Result<Vec<Option<E>>, StoreError> {
        let t = &self.db.tables;
        let lock = if q.for_update { t.for_update() } else { "" };
        let mut found: HashMap<RowId, E> = HashMap::with_capacity(q.ids.len());
        let tx = reader(tx, q.for_update)?;
        for (scope, ids) in by_scope(&q.ids) {
            let (filter, params) = scoped_in(E::SCOPE, E::ID, &scope[..E::SCOPE.len()], &ids);
            let sql = format!(
                "SELECT {} FROM {} WHERE {filter}{lock}",
                column_list(E::COLUMNS),
                E::table(t)
            );
            for row in tx.query(&sql, &params)? {
                let e = E::from_row(&row)?;
                found.insert(e.row_id(), e);
            }
        }
        Ok(q.ids.iter().map(|id| found.remove(id)).collect())
    }
}

// ---------------------------------------------------------------------------------------------
// The rows a New-Order or a Payment starts from
// ---------------------------------------------------------------------------------------------

/// The WAREHOUSE (or only its tax) and DISTRICT rows a New-Order or a Payment starts from, with
/// the CUSTOMER row when its id is known and, for New-Order, the district's recent orders (which
/// it changes): read together, one cache round trip instead of one per row, and the recent orders
/// read under the session's lease need no read of their own when the session changes them.
pub struct OpeningRows<'a>(pub &'a Db);

/// What [`OpeningRows`] reads.
#[derive(Clone, Debug)]
pub struct OpeningQuery {
    /// The warehouse.
    pub w: u32,
    /// The district, in warehouse `w`.
    pub d: u32,
    /// Read only the warehouse's tax, from its own entry (New-Order: see [`WarehouseTax`]).
    pub tax_only: bool,
    /// The customer `(w, d, c)`, when known by id.
    pub customer: Option<(u32, u32, u32)>,
    /// Read the district's recent orders too.
    pub recent: bool,
    /// Lock the district row (the data store alone: see [`RowsQuery`]).
    pub lock_district: bool,
    /// Lock the customer row (likewise).
    pub lock_customer: bool,
}

/// The warehouse's row as an [`Opening`] has it, with its tax.
fn with_tax(row: Option<Warehouse>) -> (Option<Warehouse>, Option<i64>) {
    let tax = row.as_ref().map(|w| w.tax);
    (row, tax)
}

/// What [`OpeningRows`] found: `None` for a row the database lacks, and for what was not asked.
#[derive(Debug)]
pub struct Opening {
    /// The WAREHOUSE row, unless only its tax was asked for.
    pub warehouse: Option<Warehouse>,
    /// W_TAX, from the row or from its own entry.
    pub tax: Option<i64>,
    /// The DISTRICT row.
    pub district: Option<District>,
    /// The CUSTOMER row, if asked for.
    pub customer: Option<Customer>,
    /// The district's recent orders, if asked for.
    pub recent: Option<RecentOrders>,
}

impl CacheStore for OpeningRows<'_> {
    type Query = OpeningQuery;
    type Write = Infallible;
    type Output = Opening;

    fn keys_read(&self, q: &OpeningQuery) -> Vec<Vec<u8>> {
        let warehouse = match q.tax_only {
            true => warehouse_tax_key(q.w),
            false => warehouse_key(q.w),
        };
        let mut keys = vec![warehouse, district_key(q.w, q.d)];
        keys.extend(q.customer.map(|(w, d, c)| customer_key(w, d, c)));
        if q.recent {
            keys.push(recent_lines_key(q.w, q.d));
        }
        keys
    }

    fn result_from_cache(&self, q: &OpeningQuery, values: &[Vec<u8>]) -> Option<Opening> {
        let mut values = values.iter();
        let mut next = || values.next().map(Vec::as_slice);
        let (warehouse, tax) = match q.tax_only {
            true => (None, decode::<WarehouseTax>(next()?)?.map(|t| t.tax)),
            false => with_tax(decode(next()?)?),
        };
        Some(Opening {
            warehouse,
            tax,
            district: decode(next()?)?,
            customer: match q.customer {
                Some(_) => decode(next()?)?,
                None => None,
            },
            recent: match q.recent {
                true => Some(serde_json::from_slice(next()?).ok()?),
                false => None,
            },
        })
    }

    fn query_store(&self, q: &OpeningQuery, tx: &mut StoreTx<'_>) -> Result<Opening, StoreError> {
        fn one<E: Entity>(
            db: &Db,
            id: RowId,
            for_update: bool,
            tx: &mut StoreTx<'_>,
        ) -> Result<Option<E>, StoreError> {
            let query = RowsQuery {
                ids: vec![id],
                for_update,
            };
            Ok(Rows::<E>::new(db).fetch(&query, tx)?.pop().flatten())
        }
        let db = self.0;
        db.count_query();
        let (warehouse, tax) = match q.tax_only {
            true => (
                None,
                one::<WarehouseTax>(db, RowId::top(q.w), false, tx)?.map(|t| t.tax),
            ),
            false => with_tax(one(db, RowId::top(q.w), false, tx)?),
        };
        Ok(Opening {
            warehouse,
            tax,
            district: one(db, RowId::in_warehouse(q.w, q.d), q.lock_district, tx)?,
            customer: match q.customer {
                Some((w, d, c)) => one(db, RowId::in_district(w, d, c), q.lock_customer, tx)?,
                None => None,
            },
            recent: match q.recent {
                true => Some(RecentLines(db).fetch((q.w, q.d), tx)?),
                false => None,
            },
        })
    }

    fn entries(&self, q: &OpeningQuery, o: &Opening) -> Vec<(Vec<u8>, Vec<u8>)> {
        let warehouse = match q.tax_only {
            true => {
                let row = o.tax.map(|tax| WarehouseTax { id: q.w, tax });
                (warehouse_tax_key(q.w), encode(row.as_ref()))
            }
            false => (warehouse_key(q.w), encode(o.warehouse.as_ref())),
        };
        let mut entries = vec![
            warehouse,
            (district_key(q.w, q.d), encode(o.district.as_ref())),
        ];
        if let Some((w, d, c)) = q.customer {
            entries.push((customer_key(w, d, c), encode(o.customer.as_ref())));
        }
        if let Some(recent) = &o.recent {
            entries.extend(RecentLines(self.0).entries(&(q.w, q.d), recent));
        }
        entries
    }

    /// New-Order sessions not yet applied leave query result changes for the recent orders only
    /// (see `Writes::result_changes`).
    fn fold_result_changes(&self, q: &OpeningQuery, o: &mut Opening, changes: &[Vec<u8>]) -> bool {
        match &mut o.recent {
            Some(recent) => RecentLines(self.0).fold_result_changes(&(q.w, q.d), recent, changes),
            None => false,
        }
    }

    cads::read_only!();
}

// ---------------------------------------------------------------------------------------------
// Orders with their lines
// ---------------------------------------------------------------------------------------------

/// ORDERs with their ORDER-LINEs, one entry per order.
pub struct Orders<'a>(pub &'a Db);

/// Orders by `(w, d, o)`, distinct.
#[derive(Clone, Debug)]
pub struct OrdersQuery {
    /// `(w, d, o)`, distinct.
    pub ids: Vec<(u32, u32, u32)>,
}

impl CacheStore for Orders<'_> {
    type Query = OrdersQuery;
    type Write = Infallible;
    type Output = Vec<Option<Order>>;

    fn keys_read(&self, q: &OrdersQuery) -> Vec<Vec<u8>> {
        q.ids.iter().map(|&(w, d, o)| order_key(w, d, o)).collect()
    }

    fn result_from_cache(&self, _: &OrdersQuery, values: &[Vec<u8>]) -> Option<Vec<Option<Order>>> {
        decode_all(values)
    }

    fn query_store(
        &self,
        q: &OrdersQuery,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Option<Order>>, StoreError> {
        self.0.count_query();
        let t = &self.0.tables;
        let tx = tx.read_sql()?;
        let ids: Vec<RowId> = q
            .ids
            .iter()
            .map(|&(w, d, o)| RowId::in_district(w, d, o))
            .collect();
        let mut found: HashMap<RowId, Order> = HashMap::with_capacity(ids.len());
        for (scope, os) in by_scope(&ids) {
            let (filter, params) = scoped_in(&["o_w_id", "o_d_id"], "o_id", &scope, &os);
            let sql = format!(
                "SELECT {} FROM {} WHERE {filter}",
                column_list(OrderRow::COLUMNS),
                t.order
            );
            for row in tx.query(&sql, &params)? {
                let order = OrderRow::from_row(&row)?;
                let id = RowId::in_district(order.w_id, order.d_id, order.id);
                found.insert(
                    id,
                    Order {
                        order,
                        lines: Vec::new(),
                    },
                );
            }
            let (filter, params) = scoped_in(&["ol_w_id", "ol_d_id"], "ol_o_id", &scope, &os);
            let sql = format!(
                "SELECT {} FROM {} WHERE {filter} ORDER BY ol_o_id, ol_number",
                column_list(OrderLine::COLUMNS),
                t.order_line
            );
            for row in tx.query(&sql, &params)? {
                let line = OrderLine::from_row(&row)?;
                let id = RowId::in_district(line.w_id, line.d_id, line.o_id);
                if let Some(order) = found.get_mut(&id) {
                    order.lines.push(line);
                }
            }
        }
        Ok(ids.iter().map(|id| found.remove(id)).collect())
    }

    fn entries(&self, q: &OrdersQuery, orders: &Vec<Option<Order>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        q.ids
            .iter()
            .zip(orders)
            .map(|(&(w, d, o), order)| (order_key(w, d, o), encode(order.as_ref())))
            .collect()
    }

    cads::read_only!();
}

// ---------------------------------------------------------------------------------------------
// Customers by last name
// ---------------------------------------------------------------------------------------------

/// The customers of a district with a last name, ordered by first name (clause 2.5.2.2).
pub struct CustomersByName<'a>(pub &'a Db);

/// Distinct last names in one district.
#[derive(Clone, Debug)]
pub struct NamesQuery {
    /// The warehouse.
    pub w: u32,
    /// The district.
    pub d: u32,
    /// The last names.
    pub lasts: Vec<String>,
}

impl CacheStore for CustomersByName<'_> {
    type Query = NamesQuery;
    type Write = Infallible;
    /// Per name, the customer ids by C_FIRST.
    type Output = Vec<Vec<u32>>;

    fn keys_read(&self, q: &NamesQuery) -> Vec<Vec<u8>> {
        q.lasts.iter().map(|l| name_key(q.w, q.d, l)).collect()
    }

    fn result_from_cache(&self, _: &NamesQuery, values: &[Vec<u8>]) -> Option<Vec<Vec<u32>>> {
        values
            .iter()
            .map(|v| serde_json::from_slice(v).ok())
            .collect()
    }

    fn query_store(
        &self,
        q: &NamesQuery,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Vec<u32>>, StoreError> {
        self.0.count_query();
        let mut params: Vec<SqlValue> = vec![q.w.into(), q.d.into()];
        params.extend(q.lasts.iter().map(|l| SqlValue::from(l.as_str())));
        let sql = format!(
            "SELECT c_last, c_id FROM {} WHERE c_w_id = ? AND c_d_id = ? AND c_last IN {} \
             ORDER BY c_last, c_first, c_id",
            self.0.tables.customer,
            placeholders(q.lasts.len())
        );
        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        for row in tx.read_sql()?.query(&sql, &params)? {
            by_name.entry(row.col(0)?).or_default().push(row.col(1)?);
        }
        Ok(q.lasts
            .iter()
            .map(|l| by_name.remove(l).unwrap_or_default())
            .collect())
    }

    fn entries(&self, q: &NamesQuery, ids: &Vec<Vec<u32>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        q.lasts
            .iter()
            .zip(ids)
            .map(|(l, ids)| {
                let value = serde_json::to_vec(ids).expect("ids serialize");
                (name_key(q.w, q.d, l), value)
            })
            .collect()
    }

    cads::read_only!();
}

// ---------------------------------------------------------------------------------------------
// A customer's newest order
// ---------------------------------------------------------------------------------------------

/// The newest order of each customer (Order-Status, clause 2.6.2.2).
pub struct LastOrders<'a>(pub &'a Db);

/// Distinct customers of one district.
#[derive(Clone, Debug)]
pub struct LastOrdersQuery {
    /// The warehouse.
    pub w: u32,
    /// The district.
    pub d: u32,
    /// The customer ids.
    pub customers: Vec<u32>,
}

impl CacheStore for LastOrders<'_> {
    type Query = LastOrdersQuery;
    type Write = Infallible;
    type Output = Vec<Option<u32>>;

    fn keys_read(&self, q: &LastOrdersQuery) -> Vec<Vec<u8>> {
        q.customers
            .iter()
            .map(|&c| last_order_key(q.w, q.d, c))
            .collect()
    }

    fn result_from_cache(
        &self,
        _: &LastOrdersQuery,
        values: &[Vec<u8>],
    ) -> Option<Vec<Option<u32>>> {
        decode_all(values)
    }

    fn query_store(
        &self,
        q: &LastOrdersQuery,
        tx: &mut StoreTx<'_>,
    ) -> Result<Vec<Option<u32>>, StoreError> {
        self.0.count_query();
        let (filter, params) =
            scoped_in(&["o_w_id", "o_d_id"], "o_c_id", &[q.w, q.d], &q.customers);
        let sql = format!(
            "SELECT o_c_id, MAX(o_id) FROM {} WHERE {filter} GROUP BY o_c_id",
            self.0.tables.order
        );
        let mut newest: HashMap<u32, u32> = HashMap::new();
        for row in tx.read_sql()?.query(&sql, &params)? {
            newest.insert(row.col(0)?, row.col(1)?);
        }
        Ok(q.customers.iter().map(|c| newest.get(c).copied()).collect())
    }

    fn entries(&self, q: &LastOrdersQuery, ids: &Vec<Option<u32>>) -> Vec<(Vec<u8>, Vec<u8>)> {
        q.customers
            .iter()
            .zip(ids)
            .map(|(&c, o)| (last_order_key(q.w, q.d, c), encode(o.as_ref())))
            .collect()
    }

    cads::read_only!();
}

// ---------------------------------------------------------------------------------------------
// The oldest undelivered order of a district
// ---------------------------------------------------------------------------------------------

/// The oldest undelivered order of each district: min(NO_O_ID), or D_NEXT_O_ID when the district
/// has none (Delivery, clause 2.7.4.2).
pub struct OldestNewOrders<'a>(pub &'a Db);

/// Distinct districts of one warehouse.
#[derive(Clone, Debug)]
pub struct OldestQuery {
    /// The warehouse.
    pub w: u32,
    /// The districts.
    pub districts: Vec<u32>,
}

impl CacheStore for OldestNewOrders<'_> {
    type Query = OldestQuery;
    type Write = Infallible;
    type Output = Vec<u32>;

    fn keys_read(&self, q: &OldestQuery) -> Vec<Vec<u8>> {
        q.districts
            .iter()
            .map(|&d| oldest_new_order_key(q.w, d))
            .collect()
    }

    fn result_from_cache(&self, _: &OldestQuery, values: &[Vec<u8>]) -> Option<Vec<u32>> {
        values
            .iter()
            .map(|v| serde_json::from_slice(v).ok())
            .collect()
    }

    fn query_store(&self, q: &OldestQuery, tx: &mut StoreTx<'_>) -> Result<Vec<u32>, StoreError> {
        self.0.count_query();
        let t = &self.0.tables;
        let (filter, params) = scoped_in(&["d_w_id"], "d_id", &[q.w], &q.districts);
        let sql = format!(
            "SELECT d_id, d_next_o_id, (SELECT MIN(no_o_id) FROM {} \
             WHERE no_w_id = d_w_id AND no_d_id = d_id) FROM {} WHERE {filter}",
            t.new_order, t.district
        );
        let mut oldest: HashMap<u32, u32> = HashMap::new();
        for row in tx.read_sql()?.query(&sql, &params)? {
            let next: u32 = row.col(1)?;
            let min: Option<u32> = row.col(2)?;
            oldest.insert(row.col(0)?, min.unwrap_or(next));
        }
        q.districts
            .iter()
            .map(|d| {
                oldest
                    .get(d)
                    .copied()
                    .ok_or_else(|| StoreError::Invalid(format!("no district {}/{d}", q.w)))
            })
            .collect()
    }

    fn entries(&self, q: &OldestQuery, oldest: &Vec<u32>) -> Vec<(Vec<u8>, Vec<u8>)> {
        q.districts
            .iter()
            .zip(oldest)
            .map(|(&d, o)| (oldest_new_order_key(q.w, d), o.to_string().into_bytes()))
            .collect()
    }

    cads::read_only!();
}

// ---------------------------------------------------------------------------------------------
// The item ids of a district's last 20 orders
// ---------------------------------------------------------------------------------------------

/// One order's items, as Stock-Level needs them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentOrder {
    /// O_ID.
    pub o_id: u32,
    /// OL_I_ID of its lines, in line order.
    pub items: Vec<u32>,
}

/// The last [`STOCK_LEVEL_ORDERS`] orders of a district (consecutive ids ending at
/// D_NEXT_O_ID − 1), with their item ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentOrders {
    /// Oldest first.
    pub orders: Vec<RecentOrder>,
}

impl RecentOrders {
    /// Adds the district's next order, dropping the one that leaves the window. False (and
    /// unchanged) if the order does not follow the window's last one.
    pub fn push(&mut self, order: RecentOrder) -> bool {
        if let Some(last) = self.orders.last() {
            if order.o_id != last.o_id + 1 {
                return false;
            }
        }
        self.orders.push(order);
        let excess = self
            .orders
            .len()
            .saturating_sub(STOCK_LEVEL_ORDERS as usize);
        self.orders.drain(..excess);
        true
    }

    /// The distinct item ids, ascending.
    pub fn items(&self) -> Vec<u32> {
        let mut items: Vec<u32> = self
            .orders
            .iter()
            .flat_map(|o| o.items.iter().copied())
            .collect();
        items.sort_unstable();
        items.dedup();
        items
    }
}

/// The recent orders of one district (Stock-Level, clause 2.8.2.2).
pub struct RecentLines<'a>(pub &'a Db);

impl CacheStore for RecentLines<'_> {
    /// `(w, d)`.
    type Query = (u32, u32);
    type Write = Infallible;
    type Output = RecentOrders;

    fn keys_read(&self, &(w, d): &(u32, u32)) -> Vec<Vec<u8>> {
        vec![recent_lines_key(w, d)]
    }

    fn result_from_cache(&self, _: &(u32, u32), values: &[Vec<u8>]) -> Option<RecentOrders> {
        serde_json::from_slice(values.first()?).ok()
    }

    fn query_store(
        &self,
        q: &(u32, u32),
        tx: &mut StoreTx<'_>,
    ) -> Result<RecentOrders, StoreError> {
        self.0.count_query();
        self.fetch(*q, tx)
    }

    fn entries(&self, &(w, d): &(u32, u32), recent: &RecentOrders) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![(
            recent_lines_key(w, d),
            serde_json::to_vec(recent).expect("recent orders serialize"),
        )]
    }

    /// Write-back (Algorithm 3): the orders of New-Order sessions not yet applied, each a
    /// [`RecentOrder`] (see `Writes::result_changes`), added to the window the data store
    /// computed. False if a change does not decode or does not follow the window's last order:
    /// the read then fails rather than answer from a window with a gap.
    fn fold_result_changes(
        &self,
        _: &(u32, u32),
        recent: &mut RecentOrders,
        changes: &[Vec<u8>],
    ) -> bool {
        changes.iter().all(|change| {
            serde_json::from_slice::<RecentOrder>(change).is_ok_and(|order| recent.push(order))
        })
    }

    cads::read_only!();
}

impl RecentLines<'_> {
    /// The window from the data store, not counted as a query (see [`Db::store_queries`]).
    fn fetch(&self, (w, d): (u32, u32), tx: &mut StoreTx<'_>) -> Result<RecentOrders, StoreError> {
        let t = &self.0.tables;
        let tx = tx.read_sql()?;
        let rows = tx.query(
            &format!(
                "SELECT d_next_o_id FROM {} WHERE d_w_id = ? AND d_id = ?",
                t.district
            ),
            &[w.into(), d.into()],
        )?;
        let next: u32 = rows
            .first()
            .ok_or_else(|| StoreError::Invalid(format!("no district {w}/{d}")))?
            .col(0)?;
        let first = next.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
        let sql = format!(
            "SELECT ol_o_id, ol_i_id FROM {} WHERE ol_w_id = ? AND ol_d_id = ? \
             AND ol_o_id >= ? AND ol_o_id < ? ORDER BY ol_o_id, ol_number",
            t.order_line
        );
        let mut by_order: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for row in tx.query(&sql, &[w.into(), d.into(), first.into(), next.into()])? {
            by_order.entry(row.col(0)?).or_default().push(row.col(1)?);
        }
        Ok(RecentOrders {
            orders: by_order
                .into_iter()
                .map(|(o_id, items)| RecentOrder { o_id, items })
                .collect(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------------

/// A statement of a write, with what its row count must be.
#[derive(Clone, Debug)]
pub struct Stmt {
    /// With `?` placeholders.
    pub sql: String,
    /// The parameters.
    pub params: Vec<SqlValue>,
    /// The statement must change exactly one row; otherwise a concurrent session got there first
    /// (it read the same district counter or undelivered order) and this one must run again.
    pub exactly_one: bool,
}

/// One line's change to a STOCK row (clause 2.4.2.2).
#[derive(Clone, Copy, Debug)]
pub struct StockChange {
    /// S_W_ID: the supplying warehouse.
    pub w: u32,
    /// S_I_ID.
    pub i: u32,
    /// New S_QUANTITY − old: −qty, or −qty + 91 when fewer than 10 would be left.
    pub quantity_delta: i64,
    /// OL_QUANTITY, added to S_YTD.
    pub ordered: u32,
    /// Supplied to another warehouse (S_REMOTE_CNT + 1).
    pub remote: bool,
}

/// New-Order's writes: the district counter, the order with its lines, the stock.
#[derive(Clone, Debug)]
pub struct NewOrderWrite {
    /// The order placed: O_ID is the D_NEXT_O_ID the session read.
    pub order: Order,
    /// In key order, so that sessions lock stock rows in one order.
    pub stock: Vec<StockChange>,
}

/// Payment's writes (clause 2.5.2.2).
#[derive(Clone, Debug)]
pub struct PaymentWrite {
    /// The terminal's warehouse (W_YTD).
    pub w: u32,
    /// The district paid at (D_YTD).
    pub d: u32,
    /// The customer's warehouse, district and id.
    pub customer: (u32, u32, u32),
    /// H_AMOUNT in cents.
    pub amount: i64,
    /// The new C_DATA of a customer with bad credit.
    pub new_data: Option<String>,
    /// The HISTORY row inserted.
    pub history: History,
}

/// One district's delivered order.
#[derive(Clone, Debug)]
pub struct Delivered {
    /// The district.
    pub d: u32,
    /// Its oldest undelivered order.
    pub o_id: u32,
    /// The order's customer.
    pub c_id: u32,
    /// The sum of the order's OL_AMOUNT.
    pub amount: i64,
}

/// Delivery's writes (clause 2.7.4.2).
#[derive(Clone, Debug)]
pub struct DeliveryWrite {
    /// The warehouse.
    pub w: u32,
    /// O_CARRIER_ID.
    pub carrier: u32,
    /// OL_DELIVERY_D (ms since the epoch).
    pub date: i64,
    /// One per district with an undelivered order.
    pub orders: Vec<Delivered>,
}

/// The write of one read-write transaction.
#[derive(Clone, Debug)]
pub enum TpccWrite {
    /// New-Order's.
    NewOrder(NewOrderWrite),
    /// Payment's.
    Payment(PaymentWrite),
    /// Delivery's.
    Delivery(DeliveryWrite),
}

impl TpccWrite {
    /// The warehouse whose write-back queue the session joins: the warehouse of every row it
    /// changes other than by adding deltas (New-Order and Delivery: their own; Payment: the
    /// customer's, whose C_DATA it may rewrite).
    pub fn queue_warehouse(&self) -> u32 {
        match self {
            TpccWrite::NewOrder(n) => n.order.order.w_id,
            TpccWrite::Payment(p) => p.customer.0,
            TpccWrite::Delivery(d) => d.w,
        }
    }
}

/// How a write changes one cached entry, built into a [`CacheChange`] when the framework asks
/// for the write's changes (all of them at once: `cache_changes`).
enum EntryChange<'w> {
    NextOrder {
        expected: u32,
    },
    DistrictYtd(i64),
    WarehouseYtd(i64),
    Paid {
        amount: i64,
        new_data: Option<String>,
    },
    DeliveredTo {
        amount: i64,
    },
    Stock(Vec<StockChange>),
    /// A new order's entry: the order with its lines.
    Created(&'w Order),
    /// The entry of the order after a new one: absent until the district's next New-Order.
    NotOrderedYet,
    /// A customer's newest order id.
    LastOrder(u32),
    /// The district's recent orders gain this order.
    Recent(&'w Order),
    Carrier {
        carrier: u32,
        date: i64,
    },
    NextUndelivered {
        expected: u32,
    },
}

/// A read-modify-write of a cached JSON row; an entry that does not decode, or that the change
/// finds inconsistent, is deleted (the next read refills it from the data store).
fn modify_json<T, F>(f: F) -> CacheChange
where
    T: Serialize + serde::de::DeserializeOwned,
    F: FnOnce(&mut T) -> bool + Send + 'static,
{
    CacheChange::Modify(Box::new(move |bytes: &[u8]| {
        let mut value: T = serde_json::from_slice(bytes).ok()?;
        f(&mut value).then(|| serde_json::to_vec(&value).expect("rows serialize"))
    }))
}

impl EntryChange<'_> {
    fn into_change(self) -> CacheChange {
        match self {
            EntryChange::NextOrder { expected } => modify_json(move |d: &mut District| {
                d.next_o_id += 1;
                d.next_o_id == expected + 1
            }),
            EntryChange::DistrictYtd(amount) => modify_json(move |d: &mut District| {
                d.ytd += amount;
                true
            }),
            EntryChange::WarehouseYtd(amount) => modify_json(move |w: &mut Warehouse| {
                w.ytd += amount;
                true
            }),
            EntryChange::Paid { amount, new_data } => modify_json(move |c: &mut Customer| {
                c.balance -= amount;
                c.ytd_payment += amount;
                c.payment_cnt += 1;
                if let Some(data) = new_data {
                    c.data = data;
                }
                true
            }),
            EntryChange::DeliveredTo { amount } => modify_json(move |c: &mut Customer| {
                c.balance += amount;
                c.delivery_cnt += 1;
                true
            }),
            EntryChange::Stock(changes) => modify_json(move |s: &mut Stock| {
                for change in &changes {
                    apply_stock_change(s, change);
                }
                true
            }),
            EntryChange::Created(order) => CacheChange::Set(encode(Some(order))),
            EntryChange::NotOrderedYet => CacheChange::Set(encode::<Order>(None)),
            EntryChange::LastOrder(id) => CacheChange::Set(encode(Some(&id))),
            EntryChange::Recent(order) => {
                let order = recent_order(order);
                modify_json(move |recent: &mut RecentOrders| recent.push(order))
            }
            EntryChange::Carrier { carrier, date } => modify_json(move |o: &mut Order| {
                o.order.carrier_id = Some(carrier);
                for line in &mut o.lines {
                    line.delivery_d = Some(date);
                }
                true
            }),
            EntryChange::NextUndelivered { expected } => {
                CacheChange::Modify(Box::new(move |bytes: &[u8]| {
                    let oldest: u32 = serde_json::from_slice(bytes).ok()?;
                    (oldest == expected).then(|| (oldest + 1).to_string().into_bytes())
                }))
            }
        }
    }
}

/// Applies one order line's change to a STOCK row (the cached copy, or the session's view of it).
pub fn apply_stock_change(s: &mut Stock, change: &StockChange) {
    s.quantity += change.quantity_delta;
    s.ytd += i64::from(change.ordered);
    s.order_cnt += 1;
    s.remote_cnt += u32::from(change.remote);
}

/// The write side: every read-write transaction's changes, to the data store and the cache.
pub struct Writes<'a>(pub &'a Db);

impl Writes<'_> {
    /// The changes to cached entries, by key, in key order of first appearance.
    fn entry_changes<'w>(&self, write: &'w TpccWrite) -> Vec<(Vec<u8>, EntryChange<'w>)> {
        match write {
            TpccWrite::NewOrder(n) => {
                let o = &n.order.order;
                let mut changes = vec![
                    (
                        district_key(o.w_id, o.d_id),
                        EntryChange::NextOrder { expected: o.id },
                    ),
                    (
                        order_key(o.w_id, o.d_id, o.id),
                        EntryChange::Created(&n.order),
                    ),
                    // Delivery reads the district's next order when it has nothing undelivered;
                    // caching its absence now keeps that read from missing (a miss under
                    // write-back applies the warehouse's queue first). Under write-back the key
                    // is also mapped to this session, which correctness does not need (the
                    // order is absent whether or not the session is applied): a pinned append
                    // per New-Order, and a miss of the entry applies the queue through it.
                    (
                        order_key(o.w_id, o.d_id, o.id + 1),
                        EntryChange::NotOrderedYet,
                    ),
                    (
                        last_order_key(o.w_id, o.d_id, o.c_id),
                        EntryChange::LastOrder(o.id),
                    ),
                    (
                        recent_lines_key(o.w_id, o.d_id),
                        EntryChange::Recent(&n.order),
                    ),
                ];
                // Lines of the same item change its stock row in line order, in one entry change.
                let mut stock: Vec<(Vec<u8>, Vec<StockChange>)> = Vec::new();
                for s in &n.stock {
                    let key = stock_key(s.w, s.i);
                    match stock.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, list)) => list.push(*s),
                        None => stock.push((key, vec![*s])),
                    }
                }
                changes.extend(
                    stock
                        .into_iter()
                        .map(|(key, list)| (key, EntryChange::Stock(list))),
                );
                changes
            }
            TpccWrite::Payment(p) => {
                let (cw, cd, c) = p.customer;
                vec![
                    (warehouse_key(p.w), EntryChange::WarehouseYtd(p.amount)),
                    (district_key(p.w, p.d), EntryChange::DistrictYtd(p.amount)),
                    (
                        customer_key(cw, cd, c),
                        EntryChange::Paid {
                            amount: p.amount,
                            new_data: p.new_data.clone(),
                        },
                    ),
                ]
            }
            TpccWrite::Delivery(dw) => dw
                .orders
                .iter()
                .flat_map(|o| {
                    [
                        (
                            oldest_new_order_key(dw.w, o.d),
                            EntryChange::NextUndelivered { expected: o.o_id },
                        ),
                        (
                            order_key(dw.w, o.d, o.o_id),
                            EntryChange::Carrier {
                                carrier: dw.carrier,
                                date: dw.date,
                            },
                        ),
                        (
                            customer_key(dw.w, o.d, o.c_id),
                            EntryChange::DeliveredTo { amount: o.amount },
                        ),
                    ]
                })
                .collect(),
        }
    }

    /// The data-store statements of a write, in the order they run (or are applied by
    /// write-back).
    pub fn statements(&self, write: &TpccWrite) -> Vec<Stmt> {
        let t = &self.0.tables;
        let stmt = |sql: String, params: Vec<SqlValue>| Stmt {
            sql,
            params,
            exactly_one: false,
        };
        match write {
            TpccWrite::NewOrder(n) => {
                let o = &n.order.order;
                let mut out = vec![Stmt {
                    sql: format!(
                        "UPDATE {} SET d_next_o_id = d_next_o_id + 1 \
                         WHERE d_w_id = ? AND d_id = ? AND d_next_o_id = ?",
                        t.district
                    ),
                    params: vec![o.w_id.into(), o.d_id.into(), o.id.into()],
                    exactly_one: true,
                }];
                for s in &n.stock {
                    out.push(stmt(
                        format!(
                            "UPDATE {} SET s_quantity = s_quantity + ?, s_ytd = s_ytd + ?, \
                             s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + ? \
                             WHERE s_w_id = ? AND s_i_id = ?",
                            t.stock
                        ),
                        vec![
                            s.quantity_delta.into(),
                            s.ordered.into(),
                            u32::from(s.remote).into(),
                            s.w.into(),
                            s.i.into(),
                        ],
                    ));
                }
                out.push(stmt(
                    format!(
                        "INSERT INTO {} ({}) VALUES {}",
                        t.order,
                        column_list(OrderRow::COLUMNS),
                        placeholders(OrderRow::COLUMNS.len())
                    ),
                    o.values(),
                ));
                out.push(stmt(
                    format!(
                        "INSERT INTO {} (no_w_id, no_d_id, no_o_id) VALUES (?, ?, ?)",
                        t.new_order
                    ),
                    vec![o.w_id.into(), o.d_id.into(), o.id.into()],
                ));
                let row = placeholders(OrderLine::COLUMNS.len());
                let rows = vec![row.as_str(); n.order.lines.len()].join(", ");
                out.push(stmt(
                    format!(
                        "INSERT INTO {} ({}) VALUES {rows}",
                        t.order_line,
                        column_list(OrderLine::COLUMNS)
                    ),
                    n.order.lines.iter().flat_map(OrderLine::values).collect(),
                ));
                out
            }
            TpccWrite::Payment(p) => {
                let (cw, cd, c) = p.customer;
                let mut customer_params: Vec<SqlValue> = vec![p.amount.into(), p.amount.into()];
                let data = match &p.new_data {
                    Some(data) => {
                        customer_params.push(data.as_str().into());
                        ", c_data = ?"
                    }
                    None => "",
                };
                customer_params.extend([cw.into(), cd.into(), c.into()]);
                vec![
                    stmt(
                        format!(
                            "UPDATE {} SET w_ytd = w_ytd + ? WHERE w_id = ?",
                            t.warehouse
                        ),
                        vec![p.amount.into(), p.w.into()],
                    ),
                    stmt(
                        format!(
                            "UPDATE {} SET d_ytd = d_ytd + ? WHERE d_w_id = ? AND d_id = ?",
                            t.district
                        ),
                        vec![p.amount.into(), p.w.into(), p.d.into()],
                    ),
                    stmt(
                        format!(
                            "UPDATE {} SET c_balance = c_balance - ?, \
                             c_ytd_payment = c_ytd_payment + ?, \
                             c_payment_cnt = c_payment_cnt + 1{data} \
                             WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?",
                            t.customer
                        ),
                        customer_params,
                    ),
                    stmt(
                        format!(
                            "INSERT INTO {} ({}) VALUES {}",
                            t.history,
                            column_list(History::COLUMNS),
                            placeholders(History::COLUMNS.len())
                        ),
                        p.history.values(),
                    ),
                ]
            }
            TpccWrite::Delivery(dw) => {
                let mut out = Vec::with_capacity(4 * dw.orders.len());
                for o in &dw.orders {
                    let (w, d) = (dw.w, o.d);
                    out.push(Stmt {
                        sql: format!(
                            "DELETE FROM {} WHERE no_w_id = ? AND no_d_id = ? AND no_o_id = ?",
                            t.new_order
                        ),
                        params: vec![w.into(), d.into(), o.o_id.into()],
                        exactly_one: true,
                    });
                    out.push(stmt(
                        format!(
                            "UPDATE {} SET o_carrier_id = ? \
                             WHERE o_w_id = ? AND o_d_id = ? AND o_id = ?",
                            t.order
                        ),
                        vec![dw.carrier.into(), w.into(), d.into(), o.o_id.into()],
                    ));
                    out.push(stmt(
                        format!(
                            "UPDATE {} SET ol_delivery_d = ? \
                             WHERE ol_w_id = ? AND ol_d_id = ? AND ol_o_id = ?",
                            t.order_line
                        ),
                        vec![dw.date.into(), w.into(), d.into(), o.o_id.into()],
                    ));
                    out.push(stmt(
                        format!(
                            "UPDATE {} SET c_balance = c_balance + ?, \
                             c_delivery_cnt = c_delivery_cnt + 1 \
                             WHERE c_w_id = ? AND c_d_id = ? AND c_id = ?",
                            t.customer
                        ),
                        vec![o.amount.into(), w.into(), d.into(), o.c_id.into()],
                    ));
                }
                out
            }
        }
    }
}

/// What New-Order adds to its district's recent orders.
pub fn recent_order(order: &Order) -> RecentOrder {
    RecentOrder {
        o_id: order.order.id,
        items: order.lines.iter().map(|l| l.i_id).collect(),
    }
}

impl CacheStore for Writes<'_> {
    type Query = Infallible;
    type Write = TpccWrite;
    type Output = Infallible;

    fn keys_read(&self, q: &Infallible) -> Vec<Vec<u8>> {
        match *q {}
    }
    fn result_from_cache(&self, q: &Infallible, _: &[Vec<u8>]) -> Option<Infallible> {
        match *q {}
    }
    fn query_store(&self, q: &Infallible, _: &mut StoreTx<'_>) -> Result<Infallible, StoreError> {
        match *q {}
    }
    fn entries(&self, q: &Infallible, _: &Infallible) -> Vec<(Vec<u8>, Vec<u8>)> {
        match *q {}
    }

    fn keys_written(&self, write: &TpccWrite) -> Vec<Vec<u8>> {
        self.entry_changes(write)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    fn write_store(&self, write: &TpccWrite, tx: &mut StoreTx<'_>) -> Result<(), StoreError> {
        let tx = tx.sql()?;
        for stmt in self.statements(write) {
            let changed = tx.execute(&stmt.sql, &stmt.params)?;
            if stmt.exactly_one && changed != 1 {
                return Err(StoreError::Conflict(format!(
                    "a concurrent session changed the row first ({} rows for {:?})",
                    changed, stmt.sql
                )));
            }
        }
        Ok(())
    }

    fn cache_change(&self, write: &TpccWrite, key: &[u8]) -> CacheChange {
        self.entry_changes(write)
            .into_iter()
            .find(|(k, _)| k == key)
            .map_or(CacheChange::Delete, |(_, change)| change.into_change())
    }

    fn cache_changes(&self, write: &TpccWrite, keys: &[Vec<u8>]) -> Vec<CacheChange> {
        let changes = self.entry_changes(write);
        // `keys` are `keys_written`, listed from the same changes; other keys get theirs apart.
        if !changes.iter().map(|(k, _)| k).eq(keys) {
            return keys.iter().map(|k| self.cache_change(write, k)).collect();
        }
        changes
            .into_iter()
            .map(|(_, change)| change.into_change())
            .collect()
    }

    /// Write-back, Design 2: the session's statements, queued per warehouse (003 §3: one queue
    /// per warehouse). They are those write-through runs, computed from what the session read:
    /// deltas where sessions of other warehouses change the same rows (remote stock, W_YTD and
    /// D_YTD of a remote payment), plain inserts for new rows, and changes guarded by the value
    /// the session read (D_NEXT_O_ID, the undelivered order) that hold because a queue is
    /// applied in commit order.
    fn buffer_sql(&self, write: &TpccWrite) -> Option<SqlBuffer> {
        let statements = self
            .statements(write)
            .into_iter()
            .map(|stmt| {
                let buffered = Statement::new(stmt.sql, stmt.params);
                if stmt.exactly_one {
                    buffered.changing(1)
                } else {
                    buffered
                }
            })
            .collect();
        Some(SqlBuffer {
            queue: self.0.queue(write.queue_warehouse()),
            statements,
        })
    }

    /// Write-back, Design 2: New-Order leaves its order's items for the district's recent
    /// orders (Stock-Level's query, clause 2.8.2.2), so a Stock-Level that misses the entry folds
    /// pending orders into the data store's answer (Algorithm 3) instead of applying them first.
    fn result_changes(&self, write: &TpccWrite) -> Vec<(Vec<u8>, Vec<u8>)> {
        match write {
            TpccWrite::NewOrder(n) => {
                let o = &n.order.order;
                let change =
                    serde_json::to_vec(&recent_order(&n.order)).expect("recent orders serialize");
                vec![(recent_lines_key(o.w_id, o.d_id), change)]
            }
            TpccWrite::Payment(_) | TpccWrite::Delivery(_) => Vec::new(),
        }
    }
}
