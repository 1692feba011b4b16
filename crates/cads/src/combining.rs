//! Group commit for writes that are sessions of their own ([`Cads::write`]): under write-back
//! and write-through, concurrent writes of the same keys from one process run together, in
//! arrival order, as one session.
//!
//! Why: a write that changes a cached value holds the key's exclusive lease from its first cache
//! round trip to its commit (under write-back and write-through), so a hot key takes one writer
//! per session time however the CMI orders the waiters. By Little's law the writers queued on it
//! then wait, on average, about `writers / (sessions per second)`: on a zipfian workload with many
//! threads the hottest record's updates become the whole tail (issue 21: p99 over 200 ms at 64
//! threads where the median update took 4 ms, with every lease grant fair). Fairness cannot fix
//! that; serving more writes per session can. Databases do the same for their log (group commit).
//!
//! How: writes with the same key set meet in a *group*. A write joins its group's queue; if no
//! session of the group is running, it becomes the leader: it takes everything queued (up to
//! [`MAX_COMBINED`]), runs one session (through [`Cads::run`], so conflicts and retries are as
//! for any session) applying the writes in the order they arrived, and hands every writer the
//! outcome. Writes that arrive meanwhile wait for the next session, whose leader is one of them.
//! A write therefore waits for at most the session running when it arrived and its own: writers
//! are served in order and none starves.
//!
//! The combined session's effect is that of the writes run one after another, each within its
//! own call's interval: the same as running them as separate sessions in that order. Each is
//! acknowledged only when the combined session has committed. If it fails, the writers are not
//! told its error (one write may have caused it, an insert of a document that exists, say): each
//! runs again alone and gets its own outcome.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};
use crate::{CacheStore, Cads, Policy};

/// At most this many writes run in one combined session, which bounds its leases' hold time and
/// the memory its buffered writes pin.
pub const MAX_COMBINED: usize = 64;

/// The groups of writes in flight, by the type of write and the keys it changes.
#[derive(Default)]
pub(crate) struct Combiner {
    groups: Mutex<HashMap<GroupKey, Arc<dyn Any + Send + Sync>>>,
    combined_sessions: AtomicU64,
    combined_writes: AtomicU64,
}

type GroupKey = (TypeId, Vec<Vec<u8>>);

/// The writes of one key set: those queued, whether a session of them is running, and the
/// outcomes not yet collected.
struct Group<W> {
    state: Mutex<GroupState<W>>,
    /// Signalled when a session of the group ends.
    ended: Condvar,
}

struct GroupState<W> {
    queue: Vec<(u64, W)>,
    running: bool,
    outcomes: HashMap<u64, Outcome<W>>,
    next_ticket: u64,
}

/// What a queued write learns from its group's session.
enum Outcome<W> {
    Committed,
    /// The combined session failed: the write runs again alone.
    Alone(W),
    /// The leader's thread panicked while running the session (in the application's
    /// `CacheStore`, say): the write is gone with it, committed or not.
    Panicked,
}

/// The leader's hold on its group while the session runs: if the thread unwinds, the writers
/// of the batch are told and the group is freed for the next leader, so none waits forever.
struct Leading<'g, W> {
    group: &'g Group<W>,
    tickets: Vec<u64>,
}

impl<W> Drop for Leading<'_, W> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        if let Ok(mut state) = self.group.state.lock() {
            state.running = false;
            for &ticket in &self.tickets {
                state.outcomes.insert(ticket, Outcome::Panicked);
            }
        }
        self.group.ended.notify_all();
    }
}

impl<W> Group<W> {
    fn new() -> Group<W> {
        Group {
            state: Mutex::new(GroupState {
                queue: Vec::new(),
                running: false,
                outcomes: HashMap::new(),
                next_ticket: 0,
            }),
            ended: Condvar::new(),
        }
    }
}

impl Combiner {
    /// The group of writes of type `W` to `keys`, made if there is none.
    fn group<W: Send + 'static>(&self, keys: Vec<Vec<u8>>) -> Arc<Group<W>> {
        let mut groups = self.groups.lock().expect("combiner lock");
        let entry = groups
            .entry((TypeId::of::<W>(), keys))
            .or_insert_with(|| Arc::new(Group::<W>::new()));
        Arc::clone(entry)
            .downcast::<Group<W>>()
            .expect("groups are keyed by their write type")
    }

    /// Lets go of `group`, forgetting it if no one else holds it: no writer is then queued,
    /// running or waiting in it, and none can take it meanwhile (taking a group, like this, holds
    /// the map's lock). Of writers letting go at once, the last one forgets it.
    fn leave<W: Send + 'static>(&self, keys: Vec<Vec<u8>>, group: Arc<Group<W>>) {
        let mut groups = self.groups.lock().expect("combiner lock");
        // Ours and the map's.
        if Arc::strong_count(&group) == 2 {
            groups.remove(&(TypeId::of::<W>(), keys));
        }
        drop(group);
    }

    fn count(&self, writes: usize) {
        if writes > 1 {
            self.combined_sessions.fetch_add(1, Ordering::Relaxed);
            self.combined_writes
                .fetch_add(writes as u64, Ordering::Relaxed);
        }
    }

    /// Sessions that carried more than one write, and the writes they carried.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.combined_sessions.load(Ordering::Relaxed),
            self.combined_writes.load(Ordering::Relaxed),
        )
    }

    /// How many groups are in flight (tests: idle ones are forgotten).
    #[cfg(test)]
    pub(crate) fn groups(&self) -> usize {
        self.groups.lock().expect("combiner lock").len()
    }
}

impl Cads {
    /// Whether writes of the same keys queue on the cache's exclusive leases, so that
    /// combining them shortens the queue: under write-back and write-through a writer holds the
    /// key's exclusive lease until it commits. Under write-around writers share the key's Q lease
    /// and queue, if at all, on the data store's row lock, which combining would only hold
    /// longer (measured: RESULTS, "Hot keys"); a write with no cached key contends for nothing
    /// in the cache.
    fn combines_writes(&self) -> bool {
        matches!(self.policy, Policy::WriteBack | Policy::WriteThrough)
    }

    /// A session of one write: what [`Session::write`](crate::Session::write) in [`Cads::run`]
    /// does. Under write-back and write-through, concurrent writes of the same keys from this
    /// process are combined into one session (group commit, in arrival order; see the module
    /// `combining`). Returns when the write is committed (or failed); its effect is as if each
    /// write had run alone in the order they arrived.
    pub fn write<C>(&self, cs: &C, write: C::Write) -> Result<()>
    where
        C: CacheStore,
        C::Write: Send + 'static,
    {
        let mut keys = cs.keys_written(&write);
        if !self.combines_writes() || keys.is_empty() {
            return self.run(|s| s.write(cs, &write));
        }
        keys.sort();
        keys.dedup();
        let group = self.combiner.group::<C::Write>(keys.clone());
        let mut state = group.state.lock().expect("group lock");
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push((ticket, write));
        loop {
            if let Some(outcome) = state.outcomes.remove(&ticket) {
                drop(state);
                self.combiner.leave(keys, group);
                return match outcome {
                    Outcome::Committed => Ok(()),
                    Outcome::Alone(write) => self.run(|s| s.write(cs, &write)),
                    Outcome::Panicked => Err(Error::App(
                        "the session that carried this write with others panicked in another \
                         thread; whether it committed is not known"
                            .into(),
                    )),
                };
            }
            if state.running {
                state = group.ended.wait(state).expect("group lock");
                continue;
            }
            // This write leads the group's next session (which holds it unless more than
            // MAX_COMBINED arrived before it: it then leads again after).
            state.running = true;
            let take = state.queue.len().min(MAX_COMBINED);
            let batch: Vec<(u64, C::Write)> = state.queue.drain(..take).collect();
            drop(state);
            let leading = Leading {
                group: &group,
                tickets: batch.iter().map(|(t, _)| *t).collect(),
            };
            let outcome = self.run(|s| {
                for (_, write) in &batch {
                    s.write(cs, write)?;
                }
                Ok(())
            });
            drop(leading);
            self.combiner.count(batch.len());
            state = group.state.lock().expect("group lock");
            state.running = false;
            match outcome {
                Ok(()) => {
                    for (other, _) in &batch {
                        state.outcomes.insert(*other, Outcome::Committed);
                    }
                }
                Err(e) if batch.len() == 1 && batch[0].0 == ticket => {
                    drop(state);
                    group.ended.notify_all();
                    self.combiner.leave(keys, group);
                    return Err(e);
                }
                Err(_) => {
                    for (other, write) in batch {
                        state.outcomes.insert(other, Outcome::Alone(write));
                    }
                }
            }
            group.ended.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Condvar;
    use std::time::Duration;

    use cads_store::{StoreError, StoreOptions};
    use cads_testkit::{Cmis, ScratchDir};

    use super::*;
    use crate::cache_store::CacheChange;
    use crate::tx::StoreTx;
    use crate::{Config, Policy};

    /// Writes numbers to one key: each `write_store` logs its number; the write `HOLD` waits
    /// there until the gate opens, and `REFUSED` fails as a constraint would.
    #[derive(Default)]
    struct Gated {
        log: Mutex<Vec<u32>>,
        open: Mutex<bool>,
        opened: Condvar,
    }

    const HOLD: u32 = 0;
    const REFUSED: u32 = 99;
    const PANICS: u32 = 77;

    impl Gated {
        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }

        fn log(&self) -> Vec<u32> {
            self.log.lock().unwrap().clone()
        }
    }

    impl CacheStore for Gated {
        type Query = ();
        type Write = u32;
        type Output = ();

        fn keys_read(&self, _: &()) -> Vec<Vec<u8>> {
            vec![b"k".to_vec()]
        }

        fn result_from_cache(&self, _: &(), _: &[Vec<u8>]) -> Option<()> {
            Some(())
        }

        fn query_store(&self, _: &(), _: &mut StoreTx<'_>) -> Result<(), StoreError> {
            Ok(())
        }

        fn entries(&self, _: &(), _: &()) -> Vec<(Vec<u8>, Vec<u8>)> {
            Vec::new()
        }

        fn keys_written(&self, _: &u32) -> Vec<Vec<u8>> {
            vec![b"k".to_vec()]
        }

        fn write_store(&self, write: &u32, _: &mut StoreTx<'_>) -> Result<(), StoreError> {
            self.log.lock().unwrap().push(*write);
            if *write == HOLD {
                let mut open = self.open.lock().unwrap();
                while !*open {
                    open = self.opened.wait(open).unwrap();
                }
            }
            if *write == PANICS {
                panic!("the application's write panicked");
            }
            if *write == REFUSED {
                return Err(StoreError::Constraint("refused".into()));
            }
            Ok(())
        }

        fn cache_change(&self, _: &u32, _: &[u8]) -> CacheChange {
            CacheChange::Delete
        }
    }

    fn queued(cads: &Cads) -> usize {
        let group = cads.combiner.group::<u32>(vec![b"k".to_vec()]);
        let queued = group.state.lock().unwrap().queue.len();
        queued
    }

    /// Waits (without a time bound: the state is reached whatever the load) until `done`.
    fn until(done: impl Fn() -> bool) {
        while !done() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A CMI in write-through mode and a SQLite database, with the framework over them.
    struct Fixture {
        cads: Cads,
        _cmis: Cmis,
        _dir: ScratchDir,
    }

    fn fixture() -> Fixture {
        let dir = ScratchDir::new("combining");
        let store = dir.sqlite(&StoreOptions::default());
        let cmis = Cmis::start(1, Policy::WriteThrough.cmi_mode());
        let cads = Cads::connect(store, cmis.addrs(), Policy::WriteThrough, Config::default());
        Fixture {
            cads,
            _cmis: cmis,
            _dir: dir,
        }
    }

    /// Runs `HOLD` and, while it holds its session, the writes `others` one after the other;
    /// then opens the gate and returns each write's outcome.
    fn combine(f: &Fixture, gated: &Gated, others: &[u32]) -> Vec<(u32, Result<()>)> {
        combine_joined(f, gated, others)
            .into_iter()
            .map(|(write, joined)| (write, joined.expect("no writer panicked")))
            .collect()
    }

    /// [`combine`], with the writers' threads as they ended.
    fn combine_joined(
        f: &Fixture,
        gated: &Gated,
        others: &[u32],
    ) -> Vec<(u32, std::thread::Result<Result<()>>)> {
        let cads = &f.cads;
        std::thread::scope(|scope| {
            let mut writers = vec![(HOLD, scope.spawn(move || cads.write(gated, HOLD)))];
            until(|| gated.log().contains(&HOLD));
            for (n, &write) in others.iter().enumerate() {
                writers.push((write, scope.spawn(move || cads.write(gated, write))));
                until(|| queued(cads) == n + 1);
            }
            gated.open();
            writers
                .into_iter()
                .map(|(write, h)| (write, h.join()))
                .collect()
        })
    }

    #[test]
    fn writes_queued_behind_a_session_commit_together_in_arrival_order() {
        let (f, gated) = (fixture(), Gated::default());
        let outcomes = combine(&f, &gated, &[1, 2, 3, 4, 5]);
        let cads = &f.cads;
        for (write, outcome) in &outcomes {
            assert!(outcome.is_ok(), "write {write}: {outcome:?}");
        }
        assert_eq!(gated.log(), vec![HOLD, 1, 2, 3, 4, 5]);
        assert_eq!(
            cads.combined_writes(),
            (1, 5),
            "one session carried the five"
        );
        assert_eq!(cads.combiner.groups(), 0, "an idle group is forgotten");
    }

    #[test]
    fn a_failed_combined_session_runs_each_write_alone() {
        let (f, gated) = (fixture(), Gated::default());
        let outcomes = combine(&f, &gated, &[1, REFUSED, 2]);
        let cads = &f.cads;
        for (write, outcome) in &outcomes {
            match write {
                &REFUSED => assert!(
                    matches!(outcome, Err(crate::Error::Store(StoreError::Constraint(_)))),
                    "{outcome:?}"
                ),
                _ => assert!(outcome.is_ok(), "write {write}: {outcome:?}"),
            }
        }
        // The combined attempt, up to the refused write; then each alone (in whatever order
        // their threads ran, and again when one lost the key's lease to another).
        let log = gated.log();
        assert_eq!(&log[..3], &[HOLD, 1, REFUSED]);
        let mut alone = log[3..].to_vec();
        alone.sort_unstable();
        alone.dedup();
        assert_eq!(alone, vec![1, 2, REFUSED]);
        assert_eq!(cads.combiner.groups(), 0);
    }

    #[test]
    fn no_session_carries_more_than_the_bound() {
        let writes: Vec<u32> = (1..=MAX_COMBINED as u32 + 3).collect();
        let (f, gated) = (fixture(), Gated::default());
        let outcomes = combine(&f, &gated, &writes);
        let cads = &f.cads;
        assert!(outcomes.iter().all(|(_, o)| o.is_ok()));
        assert_eq!(gated.log().len(), writes.len() + 1, "each write ran once");
        let (sessions, carried) = cads.combined_writes();
        assert_eq!(carried, writes.len() as u64);
        assert_eq!(sessions, 2, "{MAX_COMBINED} then 3");
    }

    #[test]
    fn a_leader_that_panics_tells_the_writers_it_carried() {
        let (f, gated) = (fixture(), Gated::default());
        let joined = combine_joined(&f, &gated, &[PANICS, 1]);
        let carried: Vec<_> = joined.into_iter().filter(|(w, _)| *w != HOLD).collect();
        let panicked = carried.iter().filter(|(_, j)| j.is_err()).count();
        assert_eq!(panicked, 1, "the leader's thread, whichever it was");
        for (write, joined) in &carried {
            if let Ok(outcome) = joined {
                assert!(
                    matches!(outcome, Err(crate::Error::App(m)) if m.contains("panicked")),
                    "write {write}: {outcome:?}"
                );
            }
        }
        // The group is free again: a later write of the same key runs.
        f.cads.write(&gated, 5).unwrap();
        assert_eq!(gated.log().last(), Some(&5));
    }
}
