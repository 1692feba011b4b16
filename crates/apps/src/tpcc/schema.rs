//! The nine tables (clause 1.3) under a name prefix, in each dialect.
//!
//! Money is kept in integer cents and rates (tax, discount) in ten-thousandths, so sums are exact
//! in every dialect and in the cache, and the consistency conditions compare integers; dates are
//! milliseconds since the Unix epoch. ORDER is `oorder`, as in BenchBase (`ORDER` is reserved).

use cads::store::{Dialect, SqlStore, StoreError};

/// The table names of one TPC-C database: `<prefix>warehouse`, `<prefix>district`, ...
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub struct Tables {
    /// The prefix every name starts with (tests use one of their own).
    pub prefix: String,
    /// The dialect of the store the tables live in.
    pub dialect: Dialect,
    /// The names of the nine tables, prefixed.
    pub warehouse: String,
    pub district: String,
    pub customer: String,
    pub history: String,
    pub order: String,
    pub new_order: String,
    pub order_line: String,
    pub stock: String,
    pub item: String,
}

impl Tables {
    /// The tables named with `prefix` in a store of `dialect`.
    pub fn new(prefix: &str, dialect: Dialect) -> Tables {
        let name = |table: &str| format!("{prefix}{table}");
        Tables {
            prefix: prefix.to_string(),
            dialect,
            warehouse: name("warehouse"),
            district: name("district"),
            customer: name("customer"),
            history: name("history"),
            order: name("oorder"),
            new_order: name("new_order"),
            order_line: name("order_line"),
            stock: name("stock"),
            item: name("item"),
        }
    }

    /// Every table, in the order they are dropped (and the reverse of creation).
    fn all(&self) -> [&str; 9] {
        [
            &self.history,
            &self.new_order,
            &self.order_line,
            &self.order,
            &self.customer,
            &self.district,
            &self.warehouse,
            &self.stock,
            &self.item,
        ]
    }

    /// ` FOR UPDATE` where the dialect has row locks; SQLite's write transactions hold the whole
    /// database already.
    pub fn for_update(&self) -> &'static str {
        match self.dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::MySql => " FOR UPDATE",
        }
    }

    /// Drops the tables if they exist.
    pub fn drop_all(&self, store: &dyn SqlStore) -> Result<(), StoreError> {
        for table in self.all() {
            store.execute_batch(&format!("DROP TABLE IF EXISTS {table}"))?;
        }
        Ok(())
    }

    /// Drops and creates the tables (empty) and their indexes.
    pub fn create(&self, store: &dyn SqlStore) -> Result<(), StoreError> {
        self.drop_all(store)?;
        let p = &self.prefix;
        let ddl = format!(
            "CREATE TABLE {warehouse} (
                w_id INTEGER NOT NULL, w_name VARCHAR(10) NOT NULL,
                w_street_1 VARCHAR(20) NOT NULL, w_street_2 VARCHAR(20) NOT NULL,
                w_city VARCHAR(20) NOT NULL, w_state CHAR(2) NOT NULL, w_zip CHAR(9) NOT NULL,
                w_tax INTEGER NOT NULL, w_ytd BIGINT NOT NULL,
                PRIMARY KEY (w_id));
            CREATE TABLE {district} (
                d_w_id INTEGER NOT NULL, d_id INTEGER NOT NULL, d_name VARCHAR(10) NOT NULL,
                d_street_1 VARCHAR(20) NOT NULL, d_street_2 VARCHAR(20) NOT NULL,
                d_city VARCHAR(20) NOT NULL, d_state CHAR(2) NOT NULL, d_zip CHAR(9) NOT NULL,
                d_tax INTEGER NOT NULL, d_ytd BIGINT NOT NULL, d_next_o_id INTEGER NOT NULL,
                PRIMARY KEY (d_w_id, d_id));
            CREATE TABLE {customer} (
                c_w_id INTEGER NOT NULL, c_d_id INTEGER NOT NULL, c_id INTEGER NOT NULL,
                c_first VARCHAR(16) NOT NULL, c_middle CHAR(2) NOT NULL, c_last VARCHAR(16) NOT NULL,
                c_street_1 VARCHAR(20) NOT NULL, c_street_2 VARCHAR(20) NOT NULL,
                c_city VARCHAR(20) NOT NULL, c_state CHAR(2) NOT NULL, c_zip CHAR(9) NOT NULL,
                c_phone CHAR(16) NOT NULL, c_since BIGINT NOT NULL, c_credit CHAR(2) NOT NULL,
                c_credit_lim BIGINT NOT NULL, c_discount INTEGER NOT NULL,
                c_balance BIGINT NOT NULL, c_ytd_payment BIGINT NOT NULL,
                c_payment_cnt INTEGER NOT NULL, c_delivery_cnt INTEGER NOT NULL,
                c_data VARCHAR(500) NOT NULL,
                PRIMARY KEY (c_w_id, c_d_id, c_id));
            CREATE INDEX {p}customer_name ON {customer} (c_w_id, c_d_id, c_last, c_first);
            CREATE TABLE {history} (
                h_c_id INTEGER NOT NULL, h_c_d_id INTEGER NOT NULL, h_c_w_id INTEGER NOT NULL,
                h_d_id INTEGER NOT NULL, h_w_id INTEGER NOT NULL, h_date BIGINT NOT NULL,
                h_amount BIGINT NOT NULL, h_data VARCHAR(24) NOT NULL);
            CREATE TABLE {order} (
                o_w_id INTEGER NOT NULL, o_d_id INTEGER NOT NULL, o_id INTEGER NOT NULL,
                o_c_id INTEGER NOT NULL, o_entry_d BIGINT NOT NULL, o_carrier_id INTEGER,
                o_ol_cnt INTEGER NOT NULL, o_all_local INTEGER NOT NULL,
                PRIMARY KEY (o_w_id, o_d_id, o_id));
            CREATE INDEX {p}oorder_customer ON {order} (o_w_id, o_d_id, o_c_id, o_id);
            CREATE TABLE {new_order} (
                no_w_id INTEGER NOT NULL, no_d_id INTEGER NOT NULL, no_o_id INTEGER NOT NULL,
                PRIMARY KEY (no_w_id, no_d_id, no_o_id));
            CREATE TABLE {order_line} (
                ol_w_id INTEGER NOT NULL, ol_d_id INTEGER NOT NULL, ol_o_id INTEGER NOT NULL,
                ol_number INTEGER NOT NULL, ol_i_id INTEGER NOT NULL,
                ol_supply_w_id INTEGER NOT NULL, ol_delivery_d BIGINT,
                ol_quantity INTEGER NOT NULL, ol_amount BIGINT NOT NULL,
                ol_dist_info CHAR(24) NOT NULL,
                PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number));
            CREATE TABLE {stock} (
                s_w_id INTEGER NOT NULL, s_i_id INTEGER NOT NULL, s_quantity INTEGER NOT NULL,
                s_dist_01 CHAR(24) NOT NULL, s_dist_02 CHAR(24) NOT NULL,
                s_dist_03 CHAR(24) NOT NULL, s_dist_04 CHAR(24) NOT NULL,
                s_dist_05 CHAR(24) NOT NULL, s_dist_06 CHAR(24) NOT NULL,
                s_dist_07 CHAR(24) NOT NULL, s_dist_08 CHAR(24) NOT NULL,
                s_dist_09 CHAR(24) NOT NULL, s_dist_10 CHAR(24) NOT NULL,
                s_ytd BIGINT NOT NULL, s_order_cnt INTEGER NOT NULL,
                s_remote_cnt INTEGER NOT NULL, s_data VARCHAR(50) NOT NULL,
                PRIMARY KEY (s_w_id, s_i_id));
            CREATE TABLE {item} (
                i_id INTEGER NOT NULL, i_im_id INTEGER NOT NULL, i_name VARCHAR(24) NOT NULL,
                i_price BIGINT NOT NULL, i_data VARCHAR(50) NOT NULL,
                PRIMARY KEY (i_id))",
            warehouse = self.warehouse,
            district = self.district,
            customer = self.customer,
            history = self.history,
            order = self.order,
            new_order = self.new_order,
            order_line = self.order_line,
            stock = self.stock,
            item = self.item,
        );
        store.execute_batch(&ddl)
    }
}
