//! An SAS AppNode *process* killed (SIGKILL) while it holds a Q lease, after its data-store
//! commit and before its commit reached the core, and while it holds copies: the surviving
//! AppNode never keeps the value from before the dead one's write once the core has reaped its
//! Q lease, and its own writes finish once the dead AppNode's lease has run out.
//!
//! The dead AppNode is this test program run again (`harness = false`): with
//! `CADS_SAS_CHILD` set, `main` plays it instead of running the test.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cads::{Cads, Config, Policy, SasConfig};
use cads_coord::sas::leases::Settings;
use cads_coord::sas::Core;
use cads_store::StoreOptions;
use common::{Counters, Deployment, LONG_LEASE_MS};

/// The AppNode lease, as long as the leases of the other SAS tests.
const NODE_LEASE_MS: u64 = 30_000;

fn appnode(store: std::sync::Arc<dyn cads_store::DataStore>, core: &str) -> Cads {
    let config = Config {
        sas: Some(SasConfig::new(core.parse().unwrap())),
        ..Config::default()
    };
    let cads = Cads::connect(store, &[], Policy::WriteAround, config);
    assert!(
        cads.sas_ready(Duration::from_secs(30)),
        "the AppNode registers"
    );
    cads
}

/// The AppNode to be killed: it reads the counter (a copy), then increments it and stops for
/// good between its data-store commit and its commit to the core, saying so on its output.
fn child() {
    let core = std::env::var("CADS_SAS_CORE").unwrap();
    let url = std::env::var("CADS_SAS_STORE").unwrap();
    let name = std::env::var("CADS_SAS_COUNTER").unwrap();
    let store = cads_store::open(&url, &StoreOptions::default()).unwrap();
    let cads = appnode(store, &core);
    assert_eq!(cads.read(&Counters, &name).unwrap(), 0);
    let _holding = common::stop_for_good_before_the_cache_commit();
    cads.run(|s| s.write(&Counters, &name)).unwrap();
    unreachable!("the commit never reaches the core");
}

fn main() {
    if std::env::var_os("CADS_SAS_CHILD").is_some() {
        child();
        return;
    }
    let d = Deployment::start_with(Policy::WriteAround, 1, |_| {});
    let core = Core::start(
        "127.0.0.1:0".parse().unwrap(),
        Settings {
            lease_ms: LONG_LEASE_MS,
            node_lease_ms: NODE_LEASE_MS,
            exclusive_q: false,
            max_replicas: 0,
            password: None,
        },
    )
    .unwrap();
    let name = d.counters(1).remove(0);
    let survivor = appnode(d.store.clone(), &core.addr().to_string());
    assert_eq!(survivor.read(&Counters, &name).unwrap(), 0);
    let mut dying = Command::new(std::env::current_exe().unwrap())
        .env("CADS_SAS_CHILD", "1")
        .env("CADS_SAS_CORE", core.addr().to_string())
        .env("CADS_SAS_STORE", d.dir.sqlite_url())
        .env("CADS_SAS_COUNTER", &name)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(dying.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert_eq!(
        said.trim(),
        "holding",
        "the AppNode stopped before its commit to the core"
    );
    dying.kill().unwrap();
    dying.wait().unwrap();
    assert_eq!(d.stored(&name), 1, "its data-store commit happened");
    // Its Q lease runs out: the core deletes the survivor's copy, and forgets the dead AppNode
    // once its lease has run out too.
    core.advance_clock(Duration::from_millis(
        LONG_LEASE_MS.max(NODE_LEASE_MS) + 1_000,
    ));
    // The core's reaper delivers the deletes on its next round.
    while survivor.read(&Counters, &name).unwrap() != 1 {
        std::thread::sleep(Duration::from_millis(5));
    }
    survivor.run(|s| s.write(&Counters, &name)).unwrap();
    assert_eq!(survivor.read(&Counters, &name).unwrap(), 2);
    assert_eq!(d.stored(&name), 2);
    println!("an SAS AppNode process killed holding leases and copies: ok");
}
