//! TPC-C on MariaDB or MySQL (`CADS_MYSQL_URL`, default `mysql://cads:cads@127.0.0.1:3306/cads`)
//! at a hundredth of the specification's scale, in a scratch database of its own: every policy
//! keeps the consistency conditions and leaves no stale entry in the cache. Skipped loudly when
//! the server is unreachable; fails then with `CADS_REQUIRE_SERVICES=1`.

mod support;
mod tpcc_support;

use cads_testkit::scratch::StoreServer;

#[test]
fn every_policy_keeps_the_database_consistent() {
    tpcc_support::every_policy_on(StoreServer::MariaDb);
}
