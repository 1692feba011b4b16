//! `cads bench` against CMIs started with `--requirepass`: with the password (`--cache-password`
//! or `CADS_CACHE_PASSWORD`) it runs, write-back included; without it, or with a wrong one, it
//! fails with an error that says the password is missing or wrong. And `--write-back-key` decides
//! where write-back's MAC key comes from.

use std::process::{Command, Output};

use cads::store::{open, SqlValue, StoreOptions};
use cads_testkit::Cmis;
use cads_testkit::ScratchDir;

fn bench(addrs: &str, extra: &[&str], env: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cads"));
    command
        .args(["bench", "ycsb", "--cache", addrs])
        .args(["--policy", "write-through,write-back"])
        .args(["--records", "50", "--threads", "2", "--operations", "200"])
        .args(extra)
        .env_remove("CADS_CACHE_PASSWORD");
    if let Some(password) = env {
        command.env("CADS_CACHE_PASSWORD", password);
    }
    command.output().expect("run cads")
}

#[test]
fn requirepass_runs_with_the_password_and_fails_clearly_without() {
    let cmis = Cmis::start_with(2, |o| {
        o.mode = Some("write-through".into());
        o.requirepass = Some("s3cret".into());
    });
    let addrs: Vec<String> = cmis.addrs().iter().map(|a| a.to_string()).collect();
    let addrs = addrs.join(",");

    for (extra, env) in [
        (&["--cache-password", "s3cret"][..], None),
        (&[][..], Some("s3cret")),
    ] {
        let out = bench(&addrs, extra, env);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?} {env:?}:\n{log}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("write-back"), "{table}");
    }

    for (extra, env) in [
        (&[][..], None),
        (&["--cache-password", "wrong"][..], None),
        (&[][..], Some("wrong")),
    ] {
        let out = bench(&addrs, extra, env);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} {env:?} ran");
        assert!(
            log.contains("cads: error:") && log.contains("password is missing or wrong"),
            "{extra:?} {env:?}:\n{log}"
        );
    }
}

/// Whether the SQLite database at `path` holds the stored MAC key.
fn has_stored_key(path: &std::path::Path) -> bool {
    let store = open(
        &format!("sqlite:{}", path.display()),
        &StoreOptions::default(),
    )
    .unwrap();
    let mut tx = store
        .begin_read(cads::store::Isolation::ReadCommitted)
        .unwrap();
    let rows = tx
        .query(
            "SELECT name FROM sqlite_master WHERE name = ?",
            &[SqlValue::Text("cads_write_back_key".into())],
        )
        .unwrap();
    !rows.is_empty()
}

/// A tiny write-back run of `cads bench ycsb --write-back-key spec`.
fn write_back_with_key(spec: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cads"))
        .args([
            "bench",
            "ycsb",
            "--policy",
            "write-back",
            "--write-back-key",
            spec,
        ])
        .args(["--records", "20", "--threads", "2", "--operations", "100"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn write_back_key_says_where_the_key_comes_from() {
    let dir = ScratchDir::new("cli");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "0f".repeat(32)).unwrap();
    let given = format!("file:{}", key_file.display());
    for (i, (spec, stored)) in [("stored", true), ("off", false), (given.as_str(), false)]
        .into_iter()
        .enumerate()
    {
        let db = dir.path().join(format!("run{i}.db"));
        let store = format!("sqlite:{}", db.display());
        let out = write_back_with_key(spec, &["--store", &store]);
        assert!(
            out.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(has_stored_key(&db), stored, "{spec}");
    }
    for (spec, expected) in [
        (
            "file:/nonexistent/cads-key",
            "cannot read the write-back key",
        ),
        ("on", "use stored, off or file:PATH"),
    ] {
        let out = write_back_with_key(spec, &[]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && log.contains(expected),
            "{spec}: {log}"
        );
    }
}
