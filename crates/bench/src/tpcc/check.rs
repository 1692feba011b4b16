//! After a run (and write-back's drain): the consistency conditions of clause 3.3.2 on the data
//! store, and every cached entry compared with what the data store says it should hold.

use std::collections::{HashMap, HashSet};

use anyhow::{Context, Result};
use cads::store::{Isolation, SqlStore, SqlTransaction};
use cads::Cads;
use serde::Serialize;

use super::cache::Db;
use super::keyspace::Batch;
use super::rows::RowExt;

/// How many violations or stale entries a result describes.
const EXAMPLES: usize = 5;

/// One consistency condition and what the check found.
#[derive(Clone, Debug, Serialize)]
pub struct Condition {
    /// Its number in clause 3.3.2 (`11*`: the form that holds after deliveries, see below).
    pub id: &'static str,
    /// What must hold.
    pub rule: &'static str,
    /// Warehouses, districts, orders or customers checked.
    pub checked: u64,
    /// How many broke it.
    pub violations: u64,
    /// The first few, described.
    pub examples: Vec<String>,
}

impl Condition {
    fn new(id: &'static str, rule: &'static str) -> Condition {
        Condition {
            id,
            rule,
            checked: 0,
            violations: 0,
            examples: Vec::new(),
        }
    }

    fn check(&mut self, holds: bool, describe: impl FnOnce() -> String) {
        self.checked += 1;
        if !holds {
            self.violations += 1;
            if self.examples.len() < EXAMPLES {
                self.examples.push(describe());
            }
        }
    }
}

type District = (u32, u32);
type OrderId = (u32, u32, u32);

fn query<T>(
    tx: &mut dyn SqlTransaction,
    sql: &str,
    mut each: impl FnMut(&cads::store::Row) -> cads::store::Result<T>,
) -> Result<Vec<T>> {
    tx.query(sql, &[])
        .with_context(|| format!("consistency check: {sql}"))?
        .iter()
        .map(|row| each(row).context("consistency check: unexpected column"))
        .collect()
}

/// Per order: O_OL_CNT and whether O_CARRIER_ID is null.
struct OrderFacts {
    customer: u32,
    ol_cnt: i64,
    undelivered: bool,
}

/// Per order: its lines, those with a null OL_DELIVERY_D, and the amount of the delivered ones.
#[derive(Default)]
struct LineFacts {
    lines: i64,
    undelivered: i64,
    delivered_amount: i64,
}

/// Checks the conditions that apply to BenchBase's mix: 1-10 and 12 as written, and 11 in the
/// form that holds after deliveries: count(ORDER) − count(NEW-ORDER) = the delivered orders
/// loaded + sum(C_DELIVERY_CNT) of the district (clause 3.3.2.11 as written, a difference of
/// 2,100, holds only before the first Delivery). Run it when no transaction is in flight.
pub fn consistency(store: &dyn SqlStore, db: &Db) -> Result<Vec<Condition>> {
    let t = &db.tables;
    let mut read = store.begin_read(Isolation::RepeatableRead)?;
    let tx = read.as_mut();

    let warehouses: Vec<(u32, i64)> = query(
        tx,
        &format!("SELECT w_id, w_ytd FROM {}", t.warehouse),
        |r| Ok((r.col(0)?, r.col(1)?)),
    )?;
    let districts: Vec<(District, i64, u32)> = query(
        tx,
        &format!(
            "SELECT d_w_id, d_id, d_ytd, d_next_o_id FROM {}",
            t.district
        ),
        |r| Ok(((r.col(0)?, r.col(1)?), r.col(2)?, r.col(3)?)),
    )?;
    let orders: HashMap<OrderId, OrderFacts> = query(
        tx,
        &format!(
            "SELECT o_w_id, o_d_id, o_id, o_c_id, o_ol_cnt, o_carrier_id FROM {}",
            t.order
        ),
        |r| {
            let carrier: Option<i64> = r.col(5)?;
            Ok((
                (r.col(0)?, r.col(1)?, r.col(2)?),
                OrderFacts {
                    customer: r.col(3)?,
                    ol_cnt: r.col(4)?,
                    undelivered: carrier.is_none(),
                },
            ))
        },
    )?
    .into_iter()
    .collect();
    let lines: HashMap<OrderId, LineFacts> = query(
        tx,
        &format!(
            "SELECT ol_w_id, ol_d_id, ol_o_id, COUNT(*), \
             SUM(CASE WHEN ol_delivery_d IS NULL THEN 1 ELSE 0 END), \
             SUM(CASE WHEN ol_delivery_d IS NULL THEN 0 ELSE ol_amount END) \
             FROM {} GROUP BY ol_w_id, ol_d_id, ol_o_id",
            t.order_line
        ),
        |r| {
            Ok((
                (r.col(0)?, r.col(1)?, r.col(2)?),
                LineFacts {
                    lines: r.col(3)?,
                    undelivered: r.col(4)?,
                    delivered_amount: r.col(5)?,
                },
            ))
        },
    )?
    .into_iter()
    .collect();
    let new_orders: HashSet<OrderId> = query(
        tx,
        &format!("SELECT no_w_id, no_d_id, no_o_id FROM {}", t.new_order),
        |r| Ok((r.col(0)?, r.col(1)?, r.col(2)?)),
    )?
    .into_iter()
    .collect();
    let paid_by_warehouse: HashMap<u32, i64> = query(
        tx,
        &format!(
            "SELECT h_w_id, SUM(h_amount) FROM {} GROUP BY h_w_id",
            t.history
        ),
        |r| Ok((r.col(0)?, r.col(1)?)),
    )?
    .into_iter()
    .collect();
    let paid_by_district: HashMap<District, i64> = query(
        tx,
        &format!(
            "SELECT h_w_id, h_d_id, SUM(h_amount) FROM {} GROUP BY h_w_id, h_d_id",
            t.history
        ),
        |r| Ok(((r.col(0)?, r.col(1)?), r.col(2)?)),
    )?
    .into_iter()
    .collect();
    let paid_by_customer: HashMap<OrderId, i64> = query(
        tx,
        &format!(
            "SELECT h_c_w_id, h_c_d_id, h_c_id, SUM(h_amount) FROM {} \
             GROUP BY h_c_w_id, h_c_d_id, h_c_id",
            t.history
        ),
        |r| Ok(((r.col(0)?, r.col(1)?, r.col(2)?), r.col(3)?)),
    )?
    .into_iter()
    .collect();
    let customers: Vec<(OrderId, i64, i64, i64)> = query(
        tx,
        &format!(
            "SELECT c_w_id, c_d_id, c_id, c_balance, c_ytd_payment, c_delivery_cnt FROM {}",
            t.customer
        ),
        |r| {
            Ok((
                (r.col(0)?, r.col(1)?, r.col(2)?),
                r.col(3)?,
                r.col(4)?,
                r.col(5)?,
            ))
        },
    )?;

    let mut c1 = Condition::new("1", "W_YTD = sum(D_YTD)");
    let mut c2 = Condition::new("2", "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)");
    let mut c3 = Condition::new("3", "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER)");
    let mut c4 = Condition::new("4", "sum(O_OL_CNT) = count(ORDER-LINE) per district");
    let mut c5 = Condition::new("5", "O_CARRIER_ID is null iff a NEW-ORDER row exists");
    let mut c6 = Condition::new("6", "O_OL_CNT = count(ORDER-LINE) per order");
    let mut c7 = Condition::new("7", "OL_DELIVERY_D is null iff O_CARRIER_ID is null");
    let mut c8 = Condition::new("8", "W_YTD = sum(H_AMOUNT) per warehouse");
    let mut c9 = Condition::new("9", "D_YTD = sum(H_AMOUNT) per district");
    let mut c10 = Condition::new(
        "10",
        "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT) per customer",
    );
    let mut c11 = Condition::new(
        "11*",
        "count(ORDER) - count(NEW-ORDER) = delivered orders loaded + sum(C_DELIVERY_CNT)",
    );
    let mut c12 = Condition::new(
        "12",
        "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT) per customer",
    );

    // Per district, from the orders, lines and new orders.
    #[derive(Default)]
    struct PerDistrict {
        max_o: u32,
        orders: i64,
        ol_cnt: i64,
        lines: i64,
        no_count: i64,
        no_min: Option<u32>,
        no_max: Option<u32>,
        ytd_sum: i64,
        delivery_cnt: i64,
    }
    let mut per: HashMap<District, PerDistrict> = HashMap::new();
    let mut delivered_by_customer: HashMap<OrderId, i64> = HashMap::new();
    for (&(w, d, o), facts) in &orders {
        let p = per.entry((w, d)).or_default();
        p.max_o = p.max_o.max(o);
        p.orders += 1;
        p.ol_cnt += facts.ol_cnt;
        let l = lines.get(&(w, d, o));
        let (count, undelivered, amount) =
            l.map_or((0, 0, 0), |l| (l.lines, l.undelivered, l.delivered_amount));
        p.lines += count;
        c5.check(facts.undelivered == new_orders.contains(&(w, d, o)), || {
            format!(
                "order {w}/{d}/{o}: carrier null {}, new order {}",
                facts.undelivered,
                new_orders.contains(&(w, d, o))
            )
        });
        c6.check(facts.ol_cnt == count, || {
            format!(
                "order {w}/{d}/{o}: O_OL_CNT {} but {count} lines",
                facts.ol_cnt
            )
        });
        let expected_undelivered = if facts.undelivered { count } else { 0 };
        c7.check(undelivered == expected_undelivered, || {
            format!(
                "order {w}/{d}/{o}: carrier null {}, {undelivered} of {count} lines undelivered",
                facts.undelivered
            )
        });
        *delivered_by_customer
            .entry((w, d, facts.customer))
            .or_default() += amount;
    }
    for &(w, d, o) in &new_orders {
        let p = per.entry((w, d)).or_default();
        p.no_count += 1;
        p.no_min = Some(p.no_min.map_or(o, |m| m.min(o)));
        p.no_max = Some(p.no_max.map_or(o, |m| m.max(o)));
        if !orders.contains_key(&(w, d, o)) {
            c5.check(false, || format!("new order {w}/{d}/{o} has no order"));
        }
    }
    for ((w, d, _), _, _, delivery_cnt) in &customers {
        per.entry((*w, *d)).or_default().delivery_cnt += delivery_cnt;
    }
    let delivered_loaded = i64::from(db.scale.delivered_per_district());
    for &((w, d), ytd, next) in &districts {
        let p = per.entry((w, d)).or_default();
        c2.check(
            next - 1 == p.max_o && p.no_max.is_none_or(|m| m == next - 1),
            || {
                format!(
                    "district {w}/{d}: D_NEXT_O_ID {next}, max(O_ID) {}, max(NO_O_ID) {:?}",
                    p.max_o, p.no_max
                )
            },
        );
        if let (Some(min), Some(max)) = (p.no_min, p.no_max) {
            c3.check(i64::from(max - min) + 1 == p.no_count, || {
                format!(
                    "district {w}/{d}: new orders {min}..={max} but {} rows",
                    p.no_count
                )
            });
        }
        c4.check(p.ol_cnt == p.lines, || {
            format!(
                "district {w}/{d}: sum(O_OL_CNT) {} but {} lines",
                p.ol_cnt, p.lines
            )
        });
        let paid = paid_by_district.get(&(w, d)).copied().unwrap_or(0);
        c9.check(ytd == paid, || {
            format!("district {w}/{d}: D_YTD {ytd}, sum(H_AMOUNT) {paid}")
        });
        c11.check(
            p.orders - p.no_count == delivered_loaded + p.delivery_cnt,
            || {
                format!(
                "district {w}/{d}: {} orders - {} new orders, {delivered_loaded} + {} deliveries",
                p.orders, p.no_count, p.delivery_cnt
            )
            },
        );
        per.get_mut(&(w, d)).expect("inserted above").ytd_sum = ytd;
    }
    for &(w, ytd) in &warehouses {
        let sum: i64 = districts
            .iter()
            .filter(|((dw, _), _, _)| *dw == w)
            .map(|(_, y, _)| *y)
            .sum();
        c1.check(ytd == sum, || {
            format!("warehouse {w}: W_YTD {ytd}, sum(D_YTD) {sum}")
        });
        let paid = paid_by_warehouse.get(&w).copied().unwrap_or(0);
        c8.check(ytd == paid, || {
            format!("warehouse {w}: W_YTD {ytd}, sum(H_AMOUNT) {paid}")
        });
    }
    for &((w, d, c), balance, ytd_payment, _) in &customers {
        let delivered = delivered_by_customer.get(&(w, d, c)).copied().unwrap_or(0);
        let paid = paid_by_customer.get(&(w, d, c)).copied().unwrap_or(0);
        c10.check(balance == delivered - paid, || {
            format!(
                "customer {w}/{d}/{c}: C_BALANCE {balance}, delivered {delivered} - paid {paid}"
            )
        });
        c12.check(balance + ytd_payment == delivered, || {
            format!("customer {w}/{d}/{c}: C_BALANCE {balance} + C_YTD_PAYMENT {ytd_payment}, delivered {delivered}")
        });
    }
    read.rollback()?;
    Ok(vec![c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12])
}

/// What the comparison of the cache with the data store found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CacheComparison {
    /// Entries looked up.
    pub keys: u64,
    /// Of those, entries the cache held.
    pub cached: u64,
    /// Cached entries whose value is not what the data store says (stale).
    pub stale: u64,
    /// The first few, described.
    pub examples: Vec<String>,
}

/// Compares every entry of `batches` that the cache of `cached` holds with the entry computed
/// from the data store (through `plain`, the data store alone). Run it when nothing is in
/// flight and write-back has drained.
pub fn compare_cache(
    cached: &Cads,
    plain: &Cads,
    db: &Db,
    batches: &[Batch],
) -> Result<CacheComparison> {
    let mut out = CacheComparison::default();
    for batch in batches {
        let expected = plain
            .run(|s| batch.read(s, db))
            .with_context(|| format!("reading {batch:?} from the data store"))?;
        let keys: Vec<&[u8]> = expected.iter().map(|(k, _)| k.as_slice()).collect();
        let values = cached
            .cache()
            .expect("a policy with a cache")
            .get_many(&keys)
            .with_context(|| format!("reading {batch:?} from the cache"))?;
        for ((key, want), got) in expected.iter().zip(values) {
            out.keys += 1;
            let Some(got) = got else { continue };
            out.cached += 1;
            if &got != want {
                out.stale += 1;
                if out.examples.len() < EXAMPLES {
                    out.examples.push(format!(
                        "{}: cached {} but the data store has {}",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(want)
                    ));
                }
            }
        }
    }
    Ok(out)
}
