//! The rows of the nine tables as Rust values: read from a result row, written as statement
//! parameters, and cached as JSON. One struct per table, and [`WarehouseTax`], a part of the
//! WAREHOUSE row cached on its own; an ORDER is cached together with its ORDER-LINEs ([`Order`]),
//! since every transaction that reads one reads the other.

use cads::store::{Row, SqlValue, StoreError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::schema::Tables;

/// The primary key of a row: the leading key columns (`scope`, as many as the table has: none for
/// WAREHOUSE and ITEM, the warehouse for DISTRICT and STOCK, warehouse and district for CUSTOMER)
/// and the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId {
    /// Leading key columns; unused ones are 0.
    pub scope: [u32; 2],
    /// The last key column.
    pub id: u32,
}

impl RowId {
    /// A key without leading columns.
    pub fn top(id: u32) -> RowId {
        RowId { scope: [0, 0], id }
    }
    /// A key under a warehouse.
    pub fn in_warehouse(w: u32, id: u32) -> RowId {
        RowId { scope: [w, 0], id }
    }
    /// A key under a district.
    pub fn in_district(w: u32, d: u32, id: u32) -> RowId {
        RowId { scope: [w, d], id }
    }
}

/// A column value of a result row as the type the row structs use (ids are `u32`, which the
/// SQL face reads as integers).
pub trait Column: Sized {
    /// Column `i` of `row`.
    fn at(row: &Row, i: usize) -> Result<Self, StoreError>;
}

impl Column for i64 {
    fn at(row: &Row, i: usize) -> Result<Self, StoreError> {
        row.get(i)
    }
}
impl Column for String {
    fn at(row: &Row, i: usize) -> Result<Self, StoreError> {
        row.get(i)
    }
}
impl Column for Option<i64> {
    fn at(row: &Row, i: usize) -> Result<Self, StoreError> {
        row.get(i)
    }
}
impl Column for u32 {
    fn at(row: &Row, i: usize) -> Result<Self, StoreError> {
        let v: i64 = row.get(i)?;
        u32::try_from(v).map_err(|_| StoreError::Invalid(format!("column {i}: {v} is not an id")))
    }
}
impl Column for Option<u32> {
    fn at(row: &Row, i: usize) -> Result<Self, StoreError> {
        match row.get::<Option<i64>>(i)? {
            None => Ok(None),
            Some(_) => u32::at(row, i).map(Some),
        }
    }
}

/// `row.col(i)`: a column as a [`Column`] type.
pub trait RowExt {
    /// Column `i` as `T`.
    fn col<T: Column>(&self, i: usize) -> Result<T, StoreError>;
}

impl RowExt for Row {
    fn col<T: Column>(&self, i: usize) -> Result<T, StoreError> {
        T::at(self, i)
    }
}

/// A table whose rows are cached one entry per row, keyed `<TAG>:<scope>:<id>`; or some of its
/// columns, cached apart ([`WarehouseTax`], whose `values` insert no row).
pub trait Entity:
    Serialize + DeserializeOwned + Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// The first part of the cache key.
    const TAG: &'static str;
    /// The columns, in the order of [`Entity::from_row`] and [`Entity::values`].
    const COLUMNS: &'static [&'static str];
    /// The leading key columns.
    const SCOPE: &'static [&'static str];
    /// The last key column.
    const ID: &'static str;
    /// The table's name.
    fn table(tables: &Tables) -> &str;
    /// This row's key.
    fn row_id(&self) -> RowId;
    /// From a result row of [`Entity::COLUMNS`].
    fn from_row(row: &Row) -> Result<Self, StoreError>;
    /// As parameters, in the order of [`Entity::COLUMNS`].
    fn values(&self) -> Vec<SqlValue>;
}

/// The cache key of a row of `E`.
pub fn entity_key<E: Entity>(id: RowId) -> Vec<u8> {
    match E::SCOPE.len() {
        0 => format!("{}:{}", E::TAG, id.id),
        1 => format!("{}:{}:{}", E::TAG, id.scope[0], id.id),
        _ => format!("{}:{}:{}:{}", E::TAG, id.scope[0], id.scope[1], id.id),
    }
    .into_bytes()
}

/// The cached form of "no such row" (an unused item id, an order not placed yet).
pub const ABSENT: &[u8] = b"-";

/// A row (or its absence) as cached.
pub fn encode<T: Serialize>(value: Option<&T>) -> Vec<u8> {
    match value {
        Some(v) => serde_json::to_vec(v).expect("rows serialize"),
        None => ABSENT.to_vec(),
    }
}

/// A cached row (`Some(None)`: cached as absent); `None` if the bytes are not one.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<Option<T>> {
    if bytes == ABSENT {
        return Some(None);
    }
    serde_json::from_slice(bytes).ok().map(Some)
}

/// A row of WAREHOUSE.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Warehouse {
    pub id: u32,
    pub name: String,
    pub street_1: String,
    pub street_2: String,
    pub city: String,
    pub state: String,
    pub zip: String,
    /// W_TAX in ten-thousandths.
    pub tax: i64,
    /// W_YTD in cents.
    pub ytd: i64,
}

impl Entity for Warehouse {
    const TAG: &'static str = "W";
    const COLUMNS: &'static [&'static str] = &[
        "w_id",
        "w_name",
        "w_street_1",
        "w_street_2",
        "w_city",
        "w_state",
        "w_zip",
        "w_tax",
        "w_ytd",
    ];
    const SCOPE: &'static [&'static str] = &[];
    const ID: &'static str = "w_id";
    fn table(tables: &Tables) -> &str {
        &tables.warehouse
    }
    fn row_id(&self) -> RowId {
        RowId::top(self.id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(Warehouse {
            id: row.col(0)?,
            name: row.col(1)?,
            street_1: row.col(2)?,
            street_2: row.col(3)?,
            city: row.col(4)?,
            state: row.col(5)?,
            zip: row.col(6)?,
            tax: row.col(7)?,
            ytd: row.col(8)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        vec![
            self.id.into(),
            self.name.as_str().into(),
            self.street_1.as_str().into(),
            self.street_2.as_str().into(),
            self.city.as_str().into(),
            self.state.as_str().into(),
            self.zip.as_str().into(),
            self.tax.into(),
            self.ytd.into(),
        ]
    }
}

/// W_TAX of a WAREHOUSE row, cached apart from the row (`WT:<w>`): New-Order reads the tax, which
/// nothing changes, and every Payment of the warehouse changes the row's W_YTD. Read from the
/// row's entry, New-Order's shared lease would be voided by each such Payment, and the New-Order
/// run again.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WarehouseTax {
    pub id: u32,
    /// W_TAX in ten-thousandths.
    pub tax: i64,
}

impl Entity for WarehouseTax {
    const TAG: &'static str = "WT";
    const COLUMNS: &'static [&'static str] = &["w_id", "w_tax"];
    const SCOPE: &'static [&'static str] = &[];
    const ID: &'static str = "w_id";
    fn table(tables: &Tables) -> &str {
        &tables.warehouse
    }
    fn row_id(&self) -> RowId {
        RowId::top(self.id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(WarehouseTax {
            id: row.col(0)?,
            tax: row.col(1)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        vec![self.id.into(), self.tax.into()]
    }
}

/// A row of DISTRICT.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct District {
    pub w_id: u32,
    pub id: u32,
    pub name: String,
    pub street_1: String,
    pub street_2: String,
    pub city: String,
    pub state: String,
    pub zip: String,
    /// D_TAX in ten-thousandths.
    pub tax: i64,
    /// D_YTD in cents.
    pub ytd: i64,
    pub next_o_id: u32,
}

impl Entity for District {
    const TAG: &'static str = "D";
    const COLUMNS: &'static [&'static str] = &[
        "d_w_id",
        "d_id",
        "d_name",
        "d_street_1",
        "d_street_2",
        "d_city",
        "d_state",
        "d_zip",
        "d_tax",
        "d_ytd",
        "d_next_o_id",
    ];
    const SCOPE: &'static [&'static str] = &["d_w_id"];
    const ID: &'static str = "d_id";
    fn table(tables: &Tables) -> &str {
        &tables.district
    }
    fn row_id(&self) -> RowId {
        RowId::in_warehouse(self.w_id, self.id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(District {
            w_id: row.col(0)?,
            id: row.col(1)?,
            name: row.col(2)?,
            street_1: row.col(3)?,
            street_2: row.col(4)?,
            city: row.col(5)?,
            state: row.col(6)?,
            zip: row.col(7)?,
            tax: row.col(8)?,
            ytd: row.col(9)?,
            next_o_id: row.col(10)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        vec![
            self.w_id.into(),
            self.id.into(),
            self.name.as_str().into(),
            self.street_1.as_str().into(),
            self.street_2.as_str().into(),
            self.city.as_str().into(),
            self.state.as_str().into(),
            self.zip.as_str().into(),
            self.tax.into(),
            self.ytd.into(),
            self.next_o_id.into(),
        ]
    }
}

/// A row of CUSTOMER.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Customer {
    pub w_id: u32,
    pub d_id: u32,
    pub id: u32,
    pub first: String,
    pub middle: String,
    pub last: String,
    pub street_1: String,
    pub street_2: String,
    pub city: String,
    pub state: String,
    pub zip: String,
    pub phone: String,
    pub since: i64,
    /// "GC" or "BC".
    pub credit: String,
    /// C_CREDIT_LIM in cents.
    pub credit_lim: i64,
    /// C_DISCOUNT in ten-thousandths.
    pub discount: i64,
    /// C_BALANCE in cents.
    pub balance: i64,
    /// C_YTD_PAYMENT in cents.
    pub ytd_payment: i64,
    pub payment_cnt: u32,
    pub delivery_cnt: u32,
    pub data: String,
}

impl Entity for Customer {
    const TAG: &'static str = "C";
    const COLUMNS: &'static [&'static str] = &[
        "c_w_id",
        "c_d_id",
        "c_id",
        "c_first",
        "c_middle",
        "c_last",
        "c_street_1",
        "c_street_2",
        "c_city",
        "c_state",
        "c_zip",
        "c_phone",
        "c_since",
        "c_credit",
        "c_credit_lim",
        "c_discount",
        "c_balance",
        "c_ytd_payment",
        "c_payment_cnt",
        "c_delivery_cnt",
        "c_data",
    ];
    const SCOPE: &'static [&'static str] = &["c_w_id", "c_d_id"];
    const ID: &'static str = "c_id";
    fn table(tables: &Tables) -> &str {
        &tables.customer
    }
    fn row_id(&self) -> RowId {
        RowId::in_district(self.w_id, self.d_id, self.id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(Customer {
            w_id: row.col(0)?,
            d_id: row.col(1)?,
            id: row.col(2)?,
            first: row.col(3)?,
            middle: row.col(4)?,
            last: row.col(5)?,
            street_1: row.col(6)?,
            street_2: row.col(7)?,
            city: row.col(8)?,
            state: row.col(9)?,
            zip: row.col(10)?,
            phone: row.col(11)?,
            since: row.col(12)?,
            credit: row.col(13)?,
            credit_lim: row.col(14)?,
            discount: row.col(15)?,
            balance: row.col(16)?,
            ytd_payment: row.col(17)?,
            payment_cnt: row.col(18)?,
            delivery_cnt: row.col(19)?,
            data: row.col(20)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        vec![
            self.w_id.into(),
            self.d_id.into(),
            self.id.into(),
            self.first.as_str().into(),
            self.middle.as_str().into(),
            self.last.as_str().into(),
            self.street_1.as_str().into(),
            self.street_2.as_str().into(),
            self.city.as_str().into(),
            self.state.as_str().into(),
            self.zip.as_str().into(),
            self.phone.as_str().into(),
            self.since.into(),
            self.credit.as_str().into(),
            self.credit_lim.into(),
            self.discount.into(),
            self.balance.into(),
            self.ytd_payment.into(),
            self.payment_cnt.into(),
            self.delivery_cnt.into(),
            self.data.as_str().into(),
        ]
    }
}

/// A row of ITEM.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub id: u32,
    pub im_id: u32,
    pub name: String,
    /// I_PRICE in cents.
    pub price: i64,
    pub data: String,
}

impl Entity for Item {
    const TAG: &'static str = "I";
    const COLUMNS: &'static [&'static str] = &["i_id", "i_im_id", "i_name", "i_price", "i_data"];
    const SCOPE: &'static [&'static str] = &[];
    const ID: &'static str = "i_id";
    fn table(tables: &Tables) -> &str {
        &tables.item
    }
    fn row_id(&self) -> RowId {
        RowId::top(self.id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(Item {
            id: row.col(0)?,
            im_id: row.col(1)?,
            name: row.col(2)?,
            price: row.col(3)?,
            data: row.col(4)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        vec![
            self.id.into(),
            self.im_id.into(),
            self.name.as_str().into(),
            self.price.into(),
            self.data.as_str().into(),
        ]
    }
}

/// A row of STOCK.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stock {
    pub w_id: u32,
    pub i_id: u32,
    pub quantity: i64,
    /// S_DIST_01 .. S_DIST_10.
    pub dist: [String; 10],
    pub ytd: i64,
    pub order_cnt: u32,
    pub remote_cnt: u32,
    pub data: String,
}

impl Entity for Stock {
    const TAG: &'static str = "S";
    const COLUMNS: &'static [&'static str] = &[
        "s_w_id",
        "s_i_id",
        "s_quantity",
        "s_dist_01",
        "s_dist_02",
        "s_dist_03",
        "s_dist_04",
        "s_dist_05",
        "s_dist_06",
        "s_dist_07",
        "s_dist_08",
        "s_dist_09",
        "s_dist_10",
        "s_ytd",
        "s_order_cnt",
        "s_remote_cnt",
        "s_data",
    ];
    const SCOPE: &'static [&'static str] = &["s_w_id"];
    const ID: &'static str = "s_i_id";
    fn table(tables: &Tables) -> &str {
        &tables.stock
    }
    fn row_id(&self) -> RowId {
        RowId::in_warehouse(self.w_id, self.i_id)
    }
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        let mut dist: [String; 10] = Default::default();
        for (i, d) in dist.iter_mut().enumerate() {
            *d = row.col(3 + i)?;
        }
        Ok(Stock {
            w_id: row.col(0)?,
            i_id: row.col(1)?,
            quantity: row.col(2)?,
            dist,
            ytd: row.col(13)?,
            order_cnt: row.col(14)?,
            remote_cnt: row.col(15)?,
            data: row.col(16)?,
        })
    }
    fn values(&self) -> Vec<SqlValue> {
        let mut v: Vec<SqlValue> = vec![self.w_id.into(), self.i_id.into(), self.quantity.into()];
        v.extend(self.dist.iter().map(|d| d.as_str().into()));
        v.extend([
            self.ytd.into(),
            self.order_cnt.into(),
            self.remote_cnt.into(),
            self.data.as_str().into(),
        ]);
        v
    }
}

/// A row of HISTORY (written, never read by the transactions).
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq)]
pub struct History {
    pub c_id: u32,
    pub c_d_id: u32,
    pub c_w_id: u32,
    pub d_id: u32,
    pub w_id: u32,
    pub date: i64,
    /// H_AMOUNT in cents.
    pub amount: i64,
    pub data: String,
}

impl History {
    /// The table's columns, in the order of [`Self::values`].
    pub const COLUMNS: &'static [&'static str] = &[
        "h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount", "h_data",
    ];
    /// The row as statement parameters, in the order of [`Self::COLUMNS`].
    pub fn values(&self) -> Vec<SqlValue> {
        vec![
            self.c_id.into(),
            self.c_d_id.into(),
            self.c_w_id.into(),
            self.d_id.into(),
            self.w_id.into(),
            self.date.into(),
            self.amount.into(),
            self.data.as_str().into(),
        ]
    }
}

/// A row of ORDER (`oorder`).
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrderRow {
    pub w_id: u32,
    pub d_id: u32,
    pub id: u32,
    pub c_id: u32,
    pub entry_d: i64,
    pub carrier_id: Option<u32>,
    pub ol_cnt: u32,
    pub all_local: u32,
}

impl OrderRow {
    /// The table's columns, in the order of [`Self::values`].
    pub const COLUMNS: &'static [&'static str] = &[
        "o_w_id",
        "o_d_id",
        "o_id",
        "o_c_id",
        "o_entry_d",
        "o_carrier_id",
        "o_ol_cnt",
        "o_all_local",
    ];
    /// The row a query of [`Self::COLUMNS`] returned.
    pub fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(OrderRow {
            w_id: row.col(0)?,
            d_id: row.col(1)?,
            id: row.col(2)?,
            c_id: row.col(3)?,
            entry_d: row.col(4)?,
            carrier_id: row.col(5)?,
            ol_cnt: row.col(6)?,
            all_local: row.col(7)?,
        })
    }
    /// The row as statement parameters, in the order of [`Self::COLUMNS`].
    pub fn values(&self) -> Vec<SqlValue> {
        vec![
            self.w_id.into(),
            self.d_id.into(),
            self.id.into(),
            self.c_id.into(),
            self.entry_d.into(),
            self.carrier_id.into(),
            self.ol_cnt.into(),
            self.all_local.into(),
        ]
    }
}

/// A row of ORDER-LINE.
/// Fields are the table's columns without their prefix (`w_name` is `name`).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrderLine {
    pub w_id: u32,
    pub d_id: u32,
    pub o_id: u32,
    pub number: u32,
    pub i_id: u32,
    pub supply_w_id: u32,
    pub delivery_d: Option<i64>,
    pub quantity: u32,
    /// OL_AMOUNT in cents.
    pub amount: i64,
    pub dist_info: String,
}

impl OrderLine {
    /// The table's columns, in the order of [`Self::values`].
    pub const COLUMNS: &'static [&'static str] = &[
        "ol_w_id",
        "ol_d_id",
        "ol_o_id",
        "ol_number",
        "ol_i_id",
        "ol_supply_w_id",
        "ol_delivery_d",
        "ol_quantity",
        "ol_amount",
        "ol_dist_info",
    ];
    /// The row a query of [`Self::COLUMNS`] returned.
    pub fn from_row(row: &Row) -> Result<Self, StoreError> {
        Ok(OrderLine {
            w_id: row.col(0)?,
            d_id: row.col(1)?,
            o_id: row.col(2)?,
            number: row.col(3)?,
            i_id: row.col(4)?,
            supply_w_id: row.col(5)?,
            delivery_d: row.col(6)?,
            quantity: row.col(7)?,
            amount: row.col(8)?,
            dist_info: row.col(9)?,
        })
    }
    /// The row as statement parameters, in the order of [`Self::COLUMNS`].
    pub fn values(&self) -> Vec<SqlValue> {
        vec![
            self.w_id.into(),
            self.d_id.into(),
            self.o_id.into(),
            self.number.into(),
            self.i_id.into(),
            self.supply_w_id.into(),
            self.delivery_d.into(),
            self.quantity.into(),
            self.amount.into(),
            self.dist_info.as_str().into(),
        ]
    }
}

/// An ORDER with its ORDER-LINEs (in OL_NUMBER order), cached as one entry `O:<w>:<d>:<o>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The ORDER row.
    pub order: OrderRow,
    /// Its lines.
    pub lines: Vec<OrderLine>,
}

/// The comma-separated column list of a table.
pub fn column_list(columns: &[&str]) -> String {
    columns.join(", ")
}

/// `(?, ?, ...)` with `n` placeholders.
pub fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(2 + 3 * n);
    s.push('(');
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_row() {
        assert_eq!(entity_key::<Warehouse>(RowId::top(3)), b"W:3");
        assert_eq!(entity_key::<WarehouseTax>(RowId::top(3)), b"WT:3");
        assert_eq!(entity_key::<Stock>(RowId::in_warehouse(1, 77)), b"S:1:77");
        assert_eq!(
            entity_key::<Customer>(RowId::in_district(1, 2, 3)),
            b"C:1:2:3"
        );
    }

    #[test]
    fn absence_round_trips() {
        assert_eq!(decode::<Item>(&encode::<Item>(None)), Some(None));
        let item = Item {
            id: 1,
            im_id: 2,
            name: "n".into(),
            price: 100,
            data: "d".into(),
        };
        assert_eq!(decode::<Item>(&encode(Some(&item))), Some(Some(item)));
        assert_eq!(decode::<Item>(b"garbage"), None);
        assert_eq!(placeholders(3), "(?, ?, ?)");
    }
}
