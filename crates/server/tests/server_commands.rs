//! What clients and tools ask a CMI about itself and their connection: INFO's fields, CLIENT's
//! subcommands, COMMAND's views of the command table, SELECT, HELP; and the string commands'
//! writes surviving a restart of a persistent CMI.

mod support;

use std::time::Duration;

use cads_protocol::spec;
use cads_protocol::Reply;
use support::{start_cads, start_cads_with, RespConn};

fn text(reply: Reply<'_>) -> String {
    match reply {
        Reply::Bulk(b) => String::from_utf8(b.into_owned()).unwrap(),
        Reply::Status(s) => s.into_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

fn error(reply: Reply<'_>) -> String {
    match reply {
        Reply::Error(e) => e.to_string(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn items(reply: Reply<'_>) -> Vec<Reply<'_>> {
    match reply {
        Reply::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
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

#[test]
fn info_has_the_fields_clients_and_tools_read() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    c.call(&["SET", "k", "v"]);
    c.call(&["SET", "t", "v", "EX", "100"]);
    let info = info_fields(&mut c, "everything");
    let get = |name: &str| field(&info, name).unwrap_or_else(|| panic!("INFO has no {name}"));
    // redis-py's test session reads these three before anything runs.
    assert_eq!(get("redis_version"), "7.0.0");
    assert_eq!(get("arch_bits"), usize::BITS.to_string());
    assert_eq!(get("cluster_enabled"), "0");
    assert!(get("os").starts_with("Linux "), "{}", get("os"));
    assert_eq!(get("process_id"), cads.pid().to_string());
    assert_eq!(get("tcp_port"), cads.port.to_string());
    assert_eq!(get("redis_mode"), "standalone");
    assert_eq!(get("role"), "master");
    get("uptime_in_seconds").parse::<u64>().unwrap();
    // What redis-cli --stat reads.
    for name in [
        "used_memory",
        "connected_clients",
        "blocked_clients",
        "total_commands_processed",
        "total_connections_received",
        "rdb_bgsave_in_progress",
        "aof_rewrite_in_progress",
        "loading",
    ] {
        get(name)
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(get("db0"), "keys=2,expires=1,avg_ttl=0");
    // Every field INFO had before stays (cads-client's stats and the benchmarks read them).
    for name in [
        "cads_version",
        "cmi_index",
        "cmis",
        "mode",
        "uptime_in_days",
        "maxclients",
        "used_memory_human",
        "used_memory_pinned",
        "used_memory_evictable",
        "maxmemory",
        "maxmemory_human",
        "max_pinned_memory",
        "used_memory_sessions",
        "max_session_memory",
        "maxmemory_policy",
        "aof_enabled",
        "instantaneous_ops_per_sec",
        "total_net_input_bytes",
        "total_net_output_bytes",
        "rejected_connections",
        "client_output_buffer_limit_disconnections",
        "expired_keys",
        "evicted_keys",
        "discarded_keys",
        "notstored",
        "keyspace_hits",
        "keyspace_misses",
        "leases_held",
        "leases_granted",
        "leases_voided",
        "leases_expired",
        "lease_retries",
        "lease_ms",
        "markers",
        "configuration_id",
        "fragments",
        "sessions_active",
        "sessions_tombstones",
        "sessions_committed",
        "sessions_aborted",
        "sessions_wounded",
        "sessions_expired",
        "sessions_outlived",
        "sessions_refused",
        "max_session_ms",
        "lease_conflicts",
        "lease_waits",
        "sessions_conflicted",
    ] {
        get(name);
    }
    // Sections are chosen by name, case aside.
    let cluster = info_fields(&mut c, "CLUSTER");
    assert_eq!(cluster, vec![("cluster_enabled".into(), "0".into())]);
}

#[test]
fn info_lists_the_most_contended_keys_until_config_resetstat() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    assert_eq!(c.call(&["LSET", "1", "hot key", "v"]), Reply::OK);
    for sid in 2..5 {
        let e = error(c.call(&["LSET", &sid.to_string(), "hot key", "w"]));
        assert!(e.contains("lease conflict on key hot\\x20key"), "{e}");
    }
    assert_eq!(c.call(&["LPRIORITY", "9", "1"]), Reply::OK);
    assert!(error(c.call(&["LSET", "9", "hot key", "w"])).starts_with("RETRY"));
    let contention = info_fields(&mut c, "contention");
    assert_eq!(field(&contention, "lease_conflicts").as_deref(), Some("4"));
    assert_eq!(field(&contention, "lease_waits").as_deref(), Some("1"));
    assert_eq!(
        field(&contention, "sessions_conflicted").as_deref(),
        Some("3")
    );
    assert_eq!(
        field(&contention, "contended_key_1").as_deref(),
        Some("key=hot\\x20key,conflicts=4")
    );
    assert_eq!(field(&contention, "contended_key_2"), None);
    assert_eq!(c.call(&["CONFIG", "RESETSTAT"]), Reply::OK);
    let contention = info_fields(&mut c, "contention");
    assert_eq!(field(&contention, "contended_key_1"), None);
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

fn client_list(c: &mut RespConn, filter: &[&str]) -> Vec<String> {
    let mut args = vec!["CLIENT", "LIST"];
    args.extend(filter);
    text(c.call(&args)).lines().map(str::to_string).collect()
}

fn line_field(line: &str, name: &str) -> String {
    line.split(' ')
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        .to_string()
}

#[test]
fn client_list_filters_and_describes_connections() {
    let cads = start_cads(1);
    let mut a = cads.connect();
    let mut b = cads.connect();
    let id_a = match a.call(&["CLIENT", "ID"]) {
        Reply::Int(id) => id.to_string(),
        other => panic!("{other:?}"),
    };
    let id_b = match b.call(&["CLIENT", "ID"]) {
        Reply::Int(id) => id.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(b.call(&["CLIENT", "SETNAME", "second"]), Reply::OK);
    assert_eq!(
        b.call(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
        Reply::OK
    );
    assert_eq!(
        b.call(&["CLIENT", "SETINFO", "lib-ver", "8.1.0"]),
        Reply::OK
    );
    b.call(&["HELLO", "3"]);

    let all = client_list(&mut a, &[]);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(client_list(&mut a, &["TYPE", "normal"]), all);
    for other in ["master", "replica", "slave", "pubsub"] {
        assert!(client_list(&mut a, &["TYPE", other]).is_empty(), "{other}");
    }
    let only_b = client_list(&mut a, &["ID", &id_b]);
    assert_eq!(only_b.len(), 1);
    assert_eq!(line_field(&only_b[0], "id"), id_b);
    assert_eq!(line_field(&only_b[0], "name"), "second");
    assert_eq!(line_field(&only_b[0], "lib-name"), "redis-py");
    assert_eq!(line_field(&only_b[0], "lib-ver"), "8.1.0");
    assert_eq!(line_field(&only_b[0], "resp"), "3");
    assert_eq!(line_field(&only_b[0], "db"), "0");
    // In the order asked, repeats included, unknown ids left out.
    let ids: Vec<String> = client_list(&mut a, &["ID", &id_b, "999999", &id_a, &id_b])
        .iter()
        .map(|l| line_field(l, "id"))
        .collect();
    assert_eq!(ids, [id_b.clone(), id_a.clone(), id_b.clone()]);
    // CLIENT INFO is the connection's own line.
    assert_eq!(line_field(&text(a.call(&["CLIENT", "INFO"])), "id"), id_a);

    for (args, expected) in [
        (
            vec!["CLIENT", "LIST", "TYPE", "foo"],
            "ERR Unknown client type 'foo'",
        ),
        (vec!["CLIENT", "LIST", "ID", "x"], "ERR Invalid client ID"),
        (vec!["CLIENT", "LIST", "foo"], "ERR syntax error"),
        (
            vec!["CLIENT", "SETINFO", "LIB-NAME", "has space"],
            "ERR lib-name cannot contain spaces, newlines or special characters.",
        ),
        (
            vec!["CLIENT", "SETINFO", "LIB-COLOR", "red"],
            "ERR Unrecognized option 'LIB-COLOR'",
        ),
    ] {
        assert_eq!(error(a.call(&args)), expected, "{args:?}");
    }
}

#[test]
fn client_no_evict_is_accepted_and_no_touch_reads_leave_the_lru_order() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    let mut reader = cads.connect();
    assert_eq!(c.call(&["CLIENT", "NO-EVICT", "on"]), Reply::OK);
    assert_eq!(c.call(&["CLIENT", "NO-EVICT", "OFF"]), Reply::OK);
    assert_eq!(reader.call(&["CLIENT", "NO-TOUCH", "ON"]), Reply::OK);
    let line = text(reader.call(&["CLIENT", "INFO"]));
    assert_eq!(line_field(&line, "flags"), "T");

    c.call(&["SET", "a", "1"]);
    c.call(&["SET", "b", "1"]);
    // A read that does not touch: a stays the least recently used.
    assert_eq!(text(reader.call(&["GET", "a"])), "1");
    let used: usize = field(&info_fields(&mut c, "memory"), "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    c.call(&["CONFIG", "SET", "maxmemory", &used.to_string()]);
    c.call(&["SET", "c", "1"]);
    assert_eq!(c.call(&["EXISTS", "a"]), Reply::Int(0), "a was evicted");
    assert_eq!(c.call(&["EXISTS", "b"]), Reply::Int(1));

    // With touching back on, the same read saves a.
    assert_eq!(reader.call(&["CLIENT", "NO-TOUCH", "OFF"]), Reply::OK);
    c.call(&["SET", "a", "1"]);
    assert_eq!(c.call(&["EXISTS", "b"]), Reply::Int(0), "b went for a");
    assert_eq!(text(reader.call(&["GET", "c"])), "1");
    c.call(&["SET", "d", "1"]);
    assert_eq!(c.call(&["EXISTS", "c"]), Reply::Int(1), "c was just read");
    assert_eq!(c.call(&["EXISTS", "a"]), Reply::Int(0));
}

#[test]
fn every_container_command_has_the_help_its_errors_suggest() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    for container in ["CLIENT", "CONFIG", "COMMAND"] {
        let e = error(c.call(&[container, "NOSUCH"]));
        assert_eq!(
            e,
            format!("ERR unknown subcommand 'NOSUCH'. Try {container} HELP.")
        );
        let help: Vec<String> = items(c.call(&[container, "HELP"]))
            .into_iter()
            .map(text)
            .collect();
        assert!(help[0].starts_with(&format!("{container} <subcommand>")));
        let spec = spec::lookup(container.as_bytes()).unwrap();
        for sub in spec.subcommands {
            assert!(
                help.iter()
                    .any(|l| l.to_ascii_lowercase().starts_with(sub.name)),
                "{container} HELP names {}",
                sub.name
            );
            // Every subcommand HELP names is one the CMI answers (an arity error at worst).
            let e = match c.call(&[container, sub.name]) {
                Reply::Error(e) => e.to_string(),
                _ => continue,
            };
            assert!(
                !e.contains("unknown subcommand"),
                "{container} {}: {e}",
                sub.name
            );
        }
    }
}

#[test]
fn command_count_info_docs_and_list_agree_with_the_table() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    let count = match c.call(&["COMMAND", "COUNT"]) {
        Reply::Int(n) => n as usize,
        other => panic!("{other:?}"),
    };
    assert_eq!(count, spec::COMMANDS.len());
    let all = items(c.call(&["COMMAND"]));
    assert_eq!(all.len(), count);
    assert_eq!(items(c.call(&["COMMAND", "INFO"])).len(), count);
    let names: Vec<String> = items(c.call(&["COMMAND", "LIST"]))
        .into_iter()
        .map(text)
        .collect();
    assert_eq!(names.len(), count);
    let docs = items(c.call(&["COMMAND", "DOCS"]));
    assert_eq!(docs.len(), 2 * count, "a name and its docs per command");
    for (entry, name) in all.into_iter().zip(&names) {
        let entry = items(entry);
        assert_eq!(entry.len(), 10, "Redis 7's layout");
        assert_eq!(&text(entry[0].clone()), name);
        let spec = spec::lookup(name.as_bytes()).unwrap();
        assert_eq!(entry[1], Reply::Int(spec.arity as i64), "{name}");
        assert_eq!(
            items(entry[9].clone()).len(),
            spec.subcommands.len(),
            "{name}"
        );
        let info = items(c.call(&["COMMAND", "INFO", name]));
        assert_eq!(info.len(), 1);
        let doc = items(c.call(&["COMMAND", "DOCS", name]));
        assert_eq!(doc.len(), 2, "{name}");
        assert_eq!(
            doc[1].field("summary").cloned().map(text).as_deref(),
            Some(spec.summary)
        );
    }
    // Unknown names: nil in COMMAND INFO, left out of COMMAND DOCS, as Redis does.
    assert_eq!(
        items(c.call(&["COMMAND", "INFO", "get", "nosuch"]))[1],
        Reply::Nil
    );
    assert_eq!(items(c.call(&["COMMAND", "DOCS", "nosuch"])).len(), 0);
    let l: Vec<String> = items(c.call(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "L*SET"]))
        .into_iter()
        .map(text)
        .collect();
    assert_eq!(l, ["lset", "lmset"]);
}

#[test]
fn select_names_the_one_database() {
    let cads = start_cads(1);
    let mut c = cads.connect();
    assert_eq!(c.call(&["SELECT", "0"]), Reply::OK);
    for n in ["1", "5", "15"] {
        assert_eq!(
            error(c.call(&["SELECT", n])),
            "ERR DB index is out of range: a CMI has one database, number 0"
        );
    }
    // What Redis itself refuses gets Redis's words (compared in redis_compat.rs).
    assert_eq!(
        error(c.call(&["SELECT", "16"])),
        "ERR DB index is out of range"
    );
}

#[test]
fn a_restarted_persistent_cmi_keeps_the_string_commands_writes() {
    let dir = std::env::temp_dir().join(format!("cads-strings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flags = [
        "--log-level",
        "warn",
        "--appendonly",
        "--appendfsync",
        "always",
        "--dir",
        dir.to_str().unwrap(),
    ];
    let cads = start_cads_with(1, &flags);
    let mut c = cads.connect();
    for args in [
        vec!["SETEX", "setex", "1000", "a"],
        vec!["PSETEX", "psetex", "1000000", "b"],
        vec!["SETNX", "setnx", "c"],
        vec!["SET", "getset", "old", "EX", "1000"],
        vec!["GETSET", "getset", "new"],
        vec!["SET", "getdel", "v"],
        vec!["GETDEL", "getdel"],
        vec!["SET", "getex", "v"],
        vec!["GETEX", "getex", "EX", "2000"],
        vec!["SET", "setrange", "hello"],
        vec!["SETRANGE", "setrange", "7", "world"],
        vec!["MSETNX", "m1", "1", "m2", "2"],
        vec!["INCRBYFLOAT", "float", "10.5"],
        vec!["INCRBYFLOAT", "float", "0.1"],
    ] {
        assert!(!c.call(&args).is_error(), "{args:?}");
    }
    // A crash: SIGKILL, nothing flushed on the way out (appendfsync always did it already).
    drop(cads);
    let cads = start_cads_with(1, &flags);
    let mut c = cads.connect();
    let get = |c: &mut RespConn, key: &str| c.call(&["GET", key]);
    assert_eq!(text(get(&mut c, "setex")), "a");
    assert_eq!(text(get(&mut c, "psetex")), "b");
    assert_eq!(text(get(&mut c, "setnx")), "c");
    assert_eq!(text(get(&mut c, "getset")), "new");
    assert_eq!(c.call(&["TTL", "getset"]), Reply::Int(-1));
    assert_eq!(get(&mut c, "getdel"), Reply::Nil);
    assert!(matches!(c.call(&["TTL", "getex"]), Reply::Int(t) if t > 1000));
    assert!(matches!(c.call(&["TTL", "setex"]), Reply::Int(t) if t > 0));
    assert_eq!(
        get(&mut c, "setrange"),
        Reply::owned_bulk(b"hello\0\0world".to_vec())
    );
    assert_eq!(text(get(&mut c, "m2")), "2");
    assert_eq!(text(get(&mut c, "float")), "10.6");
    drop(cads);
    std::fs::remove_dir_all(&dir).ok();
}
