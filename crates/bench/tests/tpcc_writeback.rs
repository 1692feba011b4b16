//! TPC-C under write-back's Design 2 (per-warehouse queues of buffered sessions), on SQLite:
//! reads that miss while sessions are pending see them, by folding New-Order's query result
//! changes into Stock-Level's recent orders (Algorithm 3) or by applying the queue first
//! (Algorithm 1). Workers that die mid-apply are in `tpcc_dying_workers.rs`.

mod support;
mod tpcc_support;

use std::sync::Arc;
use std::time::Duration;

use cads::store::{DataStore, StoreOptions};
use cads::{Cads, Config, Policy, Workers};
use cads_bench::deploy::Deployment;
use cads_bench::tpcc::cache::{
    recent_lines_key, stock_key, Db, OpeningQuery, OpeningRows, Orders, OrdersQuery, RecentLines,
    Rows, RowsQuery,
};
use cads_bench::tpcc::keyspace::{batches, next_order_ids};
use cads_bench::tpcc::load::load_database;
use cads_bench::tpcc::rows::{RowId, Stock, Warehouse};
use cads_bench::tpcc::schema::Tables;
use cads_bench::tpcc::txn::{Attempts, Context, CustomerRef, Input, LineInput};
use cads_bench::tpcc::Scale;
use cads_bench::{CacheSpec, CmiSettings};
use cads_testkit::ScratchDir;
use support::InProcess;
use tpcc_support::sqlite_url;

/// One warehouse at a hundredth of the scale, every entry cached, and write-back over two
/// embedded CMIs with no workers: what sessions buffer stays pending until a test applies it.
struct Setup {
    _dir: ScratchDir,
    db: Db,
    dep: Deployment,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let (url, dir) = sqlite_url(tag);
        let store: Arc<dyn DataStore> =
            cads::store::open(&url, &StoreOptions::default().with_pool_size(8))
                .expect("open SQLite");
        let tables = Tables::new("tpcc_", store.dialect());
        load_database(
            store.as_ref(),
            &tables,
            1,
            Scale::HUNDREDTH,
            7,
            1,
            &|_, _| {},
        )
        .expect("load");
        let dep = Deployment::start(
            Policy::WriteBack,
            store,
            "",
            &CacheSpec::Embedded { cmis: 2 },
            &CmiSettings::default(),
            &InProcess,
            Config::default(),
            None,
        )
        .expect("start the CMIs");
        let db = Db::new(tables, Scale::HUNDREDTH);
        // Every entry cached, each batch read first in its own session: a later read of a
        // session that reads from a snapshot is not cached.
        let next = next_order_ids(dep.cads.store().as_ref(), &db, 1).expect("next order ids");
        for batch in batches(&db, 1, &next) {
            dep.cads.run(|s| batch.read(s, &db)).expect("warm");
        }
        Setup { _dir: dir, db, dep }
    }

    fn cads(&self) -> &Cads {
        &self.dep.cads
    }

    /// A New-Order in district `d` of warehouse 1 for one of each of `items`.
    fn new_order(&self, d: u32, items: &[u32]) {
        let input = Input::NewOrder {
            w: 1,
            d,
            c: 1,
            lines: items
                .iter()
                .map(|&item| LineInput {
                    item,
                    supply_w: 1,
                    quantity: 1,
                })
                .collect(),
        };
        self.execute(&input);
    }

    /// A Payment of 1.00 by customer 1 of district `d` of warehouse 1, to that district.
    fn payment(&self, d: u32) {
        self.execute(&Input::Payment {
            w: 1,
            d,
            customer_w: 1,
            customer_d: d,
            customer: CustomerRef::Id(1),
            amount: 100,
        });
    }

    fn execute(&self, input: &Input) {
        let context = Context {
            cads: self.cads(),
            db: &self.db,
            sabotage: false,
        };
        context
            .execute(input, &mut Attempts::default())
            .expect("the transaction commits");
    }

    fn stock(&self, items: &[u32]) -> Vec<Stock> {
        let q = RowsQuery {
            ids: items.iter().map(|&i| RowId::in_warehouse(1, i)).collect(),
            for_update: false,
        };
        self.cads()
            .run(|s| s.read(&Rows::<Stock>::new(&self.db), &q))
            .expect("read stock")
            .into_iter()
            .map(|s| s.expect("a stock row"))
            .collect()
    }

    /// Removes an entry from the cache, as an eviction would.
    fn evict(&self, key: &[u8]) {
        self.cads()
            .cache()
            .expect("a cache")
            .delete(key)
            .expect("delete a cached entry");
    }

    fn applied_sessions(&self) -> u64 {
        self.cads().write_back_stats().snapshot().applied_sessions
    }

    fn buffered_sessions(&self) -> u64 {
        self.cads().write_back_stats().snapshot().buffered_sessions
    }

    /// Applies everything buffered.
    fn drain(&self) {
        let workers = Workers::start(self.dep.cads.clone(), 1);
        workers.drain(Duration::from_secs(30)).expect("drain");
        workers.stop();
    }
}

/// Stock-Level's recent orders, missed while New-Orders of the district are pending: the data
/// store's window is completed with their query result changes (Algorithm 3), without applying
/// them, and agrees with the data store once they are applied.
#[test]
fn stock_level_folds_pending_new_orders_into_a_miss() {
    let t = Setup::new("fold");
    let recent = |t: &Setup| {
        t.cads()
            .run(|s| s.read(&RecentLines(&t.db), &(1, 1)))
            .expect("read the recent orders")
    };
    let before = recent(&t);
    t.new_order(1, &[3, 4, 5]);
    t.new_order(1, &[6, 7]);
    assert_eq!(t.buffered_sessions(), 2);
    assert_eq!(t.applied_sessions(), 0);

    t.evict(&recent_lines_key(1, 1));
    let folded = recent(&t);
    assert_eq!(t.applied_sessions(), 0, "folded, not applied");
    let last = before.orders.last().expect("loaded orders").o_id;
    let newest: Vec<(u32, Vec<u32>)> = folded.orders[folded.orders.len() - 2..]
        .iter()
        .map(|o| (o.o_id, o.items.clone()))
        .collect();
    assert_eq!(
        newest,
        vec![(last + 1, vec![3, 4, 5]), (last + 2, vec![6, 7])]
    );
    assert_eq!(folded.orders.len(), before.orders.len().min(20 - 2) + 2);

    t.drain();
    assert_eq!(t.applied_sessions(), 2);
    let plain = Cads::new(
        t.cads().store().clone(),
        None,
        Policy::DataStoreOnly,
        Config::default(),
    );
    let stored = plain
        .run(|s| s.read(&RecentLines(&t.db), &(1, 1)))
        .expect("read the data store");
    assert_eq!(stored, folded);
}

/// A stock row missed while a New-Order that changed it is pending: the read applies the
/// warehouse's queue through that session first (Algorithm 1) and sees its change.
#[test]
fn a_missed_stock_row_applies_its_queue_first() {
    let t = Setup::new("apply");
    let cached = t.stock(&[3])[0].clone();
    t.new_order(2, &[3]);
    let changed = t.stock(&[3])[0].clone();
    assert_eq!(changed.order_cnt, cached.order_cnt + 1);
    assert_eq!(t.applied_sessions(), 0);

    t.evict(&stock_key(1, 3));
    let read = t.stock(&[3])[0].clone();
    assert_eq!(t.applied_sessions(), 1, "the pending New-Order was applied");
    assert_eq!(read, changed);
}

/// A read of two stock rows where one hits and the other misses, while a New-Order that changed
/// the row that hits is pending. The data store's answer stands for both rows, so the pending
/// sessions of the row that hit must be applied (or folded) too, not only those of the row that
/// missed; otherwise that row comes back without the pending change.
#[test]
fn a_partly_missed_read_sees_pending_changes_of_the_keys_that_hit() {
    let t = Setup::new("partial");
    t.stock(&[8, 9]);
    t.new_order(3, &[8]);
    let changed = t.stock(&[8])[0].clone();
    assert_eq!(t.applied_sessions(), 0);

    t.evict(&stock_key(1, 9));
    let both = t.stock(&[8, 9]);
    assert_eq!(
        both[0].order_cnt, changed.order_cnt,
        "the row that hit was read from the data store, which lacks the pending New-Order"
    );
}

/// Delivery reads a district's next order when the district has nothing undelivered. A New-Order
/// caches the absence of the order after its own, so that read hits: it neither queries the data
/// store nor waits for the warehouse's queue to be applied. The next New-Order replaces the
/// absence with its order.
#[test]
fn the_order_after_a_new_one_is_cached_as_absent() {
    let t = Setup::new("next");
    let next = next_order_ids(t.cads().store().as_ref(), &t.db, 1).expect("next order ids")[0][3];
    t.new_order(4, &[3]);
    t.new_order(4, &[5]);
    let queries = t.db.store_queries();
    let q = OrdersQuery {
        ids: vec![(1, 4, next), (1, 4, next + 1), (1, 4, next + 2)],
    };
    let orders = t
        .cads()
        .run(|s| s.read(&Orders(&t.db), &q))
        .expect("read the orders");
    let ids: Vec<Option<u32>> = orders
        .iter()
        .map(|o| o.as_ref().map(|o| o.order.id))
        .collect();
    assert_eq!(ids, vec![Some(next), Some(next + 1), None]);
    assert_eq!(t.db.store_queries(), queries, "every read hit");
    assert_eq!(t.applied_sessions(), 0);
}

/// New-Order reads its warehouse's W_TAX from an entry of its own, which no transaction changes:
/// a Payment of the warehouse committing meanwhile changes W_YTD in the warehouse's row without
/// voiding the New-Order's lease, so the New-Order does not run again.
#[test]
fn a_payment_does_not_void_a_new_orders_read_of_the_warehouse_tax() {
    let t = Setup::new("tax");
    let q = OpeningQuery {
        w: 1,
        d: 1,
        tax_only: true,
        customer: Some((1, 1, 2)),
        recent: true,
        lock_district: false,
        lock_customer: false,
    };
    let mut runs = 0;
    let opening = t
        .cads()
        .run(|s| {
            runs += 1;
            let opening = s.read(&OpeningRows(&t.db), &q)?;
            if runs == 1 {
                t.payment(2);
            }
            Ok(opening)
        })
        .expect("the read commits");
    assert_eq!(runs, 1, "the Payment voided the read");
    assert!(opening.warehouse.is_none());
    let stored = Cads::new(
        t.cads().store().clone(),
        None,
        Policy::DataStoreOnly,
        Config::default(),
    )
    .run(|s| {
        let q = RowsQuery {
            ids: vec![RowId::top(1)],
            for_update: false,
        };
        s.read(&Rows::<Warehouse>::new(&t.db), &q)
    })
    .expect("read the warehouse")
    .pop()
    .flatten()
    .expect("warehouse 1");
    assert_eq!(opening.tax, Some(stored.tax));

    // The whole row, as Payment reads it, is voided by the other Payment's change of W_YTD.
    let mut runs = 0;
    t.cads()
        .run(|s| {
            runs += 1;
            s.read(
                &OpeningRows(&t.db),
                &OpeningQuery {
                    tax_only: false,
                    ..q.clone()
                },
            )?;
            if runs == 1 {
                t.payment(2);
            }
            Ok(())
        })
        .expect("the read commits");
    assert_eq!(runs, 2);
}
