//! What clients and tools ask a CMI about itself and their connection.

mod support;

use std::time::Duration;

use cads_protocol::Reply;
use support::{start_cads, RespConn};

fn text(reply: Reply<'_>) -> String {
    match reply {
        Reply::Bulk(b) => String::from_utf8(b.into_owned()).unwrap(),
        Reply::Status(s) => s.into_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

fn info_fields(conn: &mut RespConn, section: &str) -> Vec<(String, String)> {
    text(conn.call(&["INFO", section]))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// CONFIG RESETSTAT zeroes the command counter under the rate's samples; INFO once took the
/// difference and the CMI's thread died of the overflow.
#[test]
fn info_after_config_resetstat_starts_the_rate_over() {
    let mut cads = start_cads(1);
    let mut c = cads.connect();
    for _ in 0..50 {
        c.call(&["SET", "k", "v"]);
    }
    // The loop samples the counter every tick (100 ms).
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(c.call(&["CONFIG", "RESETSTAT"]), Reply::OK);
    std::thread::sleep(Duration::from_millis(350));
    let stats = info_fields(&mut c, "stats");
    assert_eq!(
        field(&stats, "total_commands_processed").as_deref(),
        Some("0")
    );
    field(&stats, "instantaneous_ops_per_sec").unwrap();
    assert!(cads.is_running());
}
