//! `cads bench` against CMIs started with `--requirepass`: with the password (`--cache-password`
//! or `CADS_CACHE_PASSWORD`) it runs, write-back included; without it, or with a wrong one, it
//! fails with an error that says the password is missing or wrong. The same for CMIs started with
//! `--tls-cert` and the CA that signed their certificate (`--cache-tls-ca` or
//! `CADS_CACHE_TLS_CA`). And `--write-back-key` decides where write-back's MAC key comes from.

use std::process::{Command, Output};

use cads::store::{open, SqlValue, StoreOptions};
use cads_testkit::cmis::Program;
use cads_testkit::{Cmis, ScratchDir, ServerProcess, TestCa};

/// The environment variables `cads bench` reads for the cache's settings.
const CACHE_ENV: [&str; 4] = [
    "CADS_CACHE_PASSWORD",
    "CADS_CACHE_TLS_CA",
    "CADS_CACHE_TLS_NAME",
    "CADS_CACHE_TLS_CERT",
];

/// A short `cads bench ycsb` against the CMIs at `addrs`, with `env` the only cache settings in
/// its environment.
fn bench_with_env(addrs: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cads"));
    command
        .args(["bench", "ycsb", "--cache", addrs])
        .args(["--policy", "write-through,write-back"])
        .args(["--records", "50", "--threads", "2", "--operations", "200"])
        .args(extra);
    for name in CACHE_ENV {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run cads")
}

fn bench(addrs: &str, extra: &[&str], env: Option<&str>) -> Output {
    let env: Vec<(&str, &str)> = env
        .map(|p| ("CADS_CACHE_PASSWORD", p))
        .into_iter()
        .collect();
    bench_with_env(addrs, extra, &env)
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

#[test]
fn tls_runs_with_the_ca_and_fails_clearly_without() {
    let ca = TestCa::new();
    let mut flags = ca.server_flags();
    flags.extend(["--mode".into(), "write-through".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = ServerProcess::start_cmis(&Program::cads(env!("CARGO_BIN_EXE_cads")), 2, &flags);
    let addrs = format!("{},{}", server.addr(0), server.addr(1));
    let ca_file = ca.ca_file().display().to_string();
    let other = TestCa::new();
    let other_ca = other.ca_file().display().to_string();

    for (extra, env) in [
        (vec!["--cache-tls-ca", ca_file.as_str()], vec![]),
        (
            vec!["--cache-tls-name", "localhost"],
            vec![("CADS_CACHE_TLS_CA", ca_file.as_str())],
        ),
    ] {
        let out = bench_with_env(&addrs, &extra, &env);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?} {env:?}:\n{log}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("write-back"), "{table}");
    }

    let cases: [(&[&str], &str); 5] = [
        (&[], "this client speaks plaintext"),
        (&["--cache-tls-ca", &other_ca], "certificate is not trusted"),
        (
            &[
                "--cache-tls-ca",
                &ca_file,
                "--cache-tls-name",
                "cmi.elsewhere.example",
            ],
            "not valid for \"cmi.elsewhere.example\"",
        ),
        (
            &["--cache-tls-ca", "/nonexistent/ca.pem"],
            "cannot read the CA file",
        ),
        (&["--cache-tls-name", "localhost"], "--cache-tls-ca"),
    ];
    for (extra, expected) in cases {
        let out = bench_with_env(&addrs, extra, &[]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} ran");
        assert!(
            log.contains(expected),
            "{extra:?}: {expected:?} not in:\n{log}"
        );
    }

    // CMIs that require client certificates (--tls-ca): the benchmark presents its own.
    let mut flags = ca.server_flags();
    flags.extend(["--mode", "write-through", "--tls-ca", &ca_file].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let requiring =
        ServerProcess::start_cmis(&Program::cads(env!("CARGO_BIN_EXE_cads")), 1, &flags);
    let addr = requiring.addr(0).to_string();
    let client = ca.client_file().display().to_string();
    let out = bench_with_env(
        &addr,
        &["--cache-tls-ca", &ca_file, "--cache-tls-cert", &client],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bench_with_env(&addr, &["--cache-tls-ca", &ca_file], &[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && log.contains("requires a client certificate"),
        "{log}"
    );

    // Embedded CMIs serve plaintext: TLS settings for them are a mistake, said so.
    let out = bench_with_env("embedded:2", &["--cache-tls-ca", &ca_file], &[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && log.contains("TLS is for CMIs running apart"),
        "{log}"
    );
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
