//! Short concurrent runs of every layout under every policy on SQLite with embedded CMIs: no read
//! may be stale and the cache must equal the data store at the end. And a deliberately broken
//! write-around (writes that skip the invalidation) that the validator must catch.

use std::time::{Duration, Instant};

use cads::Policy;
use cads_example_bg::graph::{Count, CountRead};
use cads_example_bg::validate::{validate, Log};
use cads_example_bg::{
    layout, prepare, run, Action, CacheSpec, Deployment, GraphParams, LayoutKind, Mix, RunOptions,
    RunReport,
};

fn graph() -> GraphParams {
    GraphParams {
        members: 200,
        friends: 10,
        pending: 5,
    }
}

fn short_run(kind: LayoutKind, policy: Policy, broken: bool) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("bg.db").display());
    let dep = Deployment::start(policy, &url, &CacheSpec::Embedded { cmis: 2 }).unwrap();
    let layout = layout(kind, policy, broken);
    let graph = graph();
    prepare(&dep, layout.as_ref(), &graph).unwrap();
    let options = RunOptions {
        threads: 4,
        duration: Duration::from_millis(1500),
        mix: Mix::parse("90").unwrap(),
        seed: 42,
    };
    run(&dep, layout.as_ref(), &graph, &options).unwrap()
}

fn assert_consistent(kind: LayoutKind, policy: Policy) {
    let report = short_run(kind, policy, false);
    let summary = report.render();
    assert!(
        report.done() > 0,
        "{kind} {policy:?}: nothing ran\n{summary}"
    );
    assert!(
        report.validation.checked > 0,
        "{kind} {policy:?}: no read checked\n{summary}"
    );
    assert_eq!(report.failed(), 0, "{kind} {policy:?}\n{summary}");
    assert_eq!(report.validation.stale, 0, "{kind} {policy:?}\n{summary}");
    match (&report.cache_check, policy) {
        (None, Policy::DataStoreOnly) => {}
        (Some(check), Policy::WriteAround | Policy::WriteThrough) => {
            assert!(
                check.cached > 0,
                "{kind} {policy:?}: nothing cached\n{summary}"
            );
            assert!(check.mismatches.is_empty(), "{kind} {policy:?}\n{summary}");
        }
        (check, _) => panic!("{kind} {policy:?}: unexpected cache check {check:?}"),
    }
}

#[test]
fn documents_on_the_data_store_alone() {
    assert_consistent(LayoutKind::Documents, Policy::DataStoreOnly);
}

#[test]
fn documents_with_write_around() {
    assert_consistent(LayoutKind::Documents, Policy::WriteAround);
}

#[test]
fn documents_with_write_through() {
    assert_consistent(LayoutKind::Documents, Policy::WriteThrough);
}

#[test]
fn sql_on_the_data_store_alone() {
    assert_consistent(LayoutKind::Sql, Policy::DataStoreOnly);
}

#[test]
fn sql_with_write_around() {
    assert_consistent(LayoutKind::Sql, Policy::WriteAround);
}

#[test]
fn sql_with_write_through() {
    assert_consistent(LayoutKind::Sql, Policy::WriteThrough);
}

/// One thread, no race needed: a profile is cached, an invitation skips the invalidation, and the
/// next view of the profile shows the old pending count.
#[test]
fn broken_write_around_serves_a_stale_count_and_the_validator_says_so() {
    for kind in [LayoutKind::Sql, LayoutKind::Documents] {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("bg.db").display());
        let policy = Policy::WriteAround;
        let dep = Deployment::start(policy, &url, &CacheSpec::Embedded { cmis: 1 }).unwrap();
        let graph = graph();
        let layout = layout(kind, policy, true);
        prepare(&dep, layout.as_ref(), &graph).unwrap();
        let mut log = Log::default();
        let mut act = |action: Action| {
            let start = Instant::now();
            let reads = layout.perform(&dep.cads, &action).unwrap();
            let end = Instant::now();
            if action.kind().is_write() {
                log.write(&action, start, Some(end));
            } else {
                log.reads(&reads, start, end);
            }
            reads
        };
        let view = Action::ViewProfile {
            requester: 2,
            owner: 2,
        };
        let pending = |reads: &[CountRead]| {
            reads
                .iter()
                .find(|r| r.member == 2 && r.count == Count::Pending)
                .map(|r| r.value)
        };
        assert_eq!(pending(&act(view)), Some(5), "{kind}: the loaded count");
        // Member 100 is neither a friend of member 2 nor an inviter or invitee.
        act(Action::InviteFriend {
            inviter: 100,
            invitee: 2,
        });
        assert_eq!(
            pending(&act(view)),
            Some(5),
            "{kind}: the cached profile was not invalidated"
        );
        let v = validate(&graph, &log);
        assert_eq!(v.stale, 1, "{kind}: {:?}", v.examples);
        assert!(
            v.examples[0].contains("read 5, allowed 6..=6"),
            "{:?}",
            v.examples
        );
        let check = layout.check_cache(&dep.cads, &graph).unwrap();
        assert!(!check.mismatches.is_empty(), "{kind}: {check:?}");
    }
}

/// The same broken writes under concurrency: the run reports stale reads and cache entries that
/// differ from the data store.
#[test]
fn broken_write_around_fails_a_concurrent_run() {
    let report = short_run(LayoutKind::Sql, Policy::WriteAround, true);
    let summary = report.render();
    assert!(report.validation.stale > 0, "{summary}");
    assert!(report.anomalies() > report.validation.stale, "{summary}");
}
