//! Latency and round trips of single actions, one thread, in the shape of 000 Table 3.6 (BG's
//! actions) and Table 3.4 (YCSB's Read and Update on the document layer).
//!
//! Round trips are counted, not estimated: cache round trips from
//! [`cads::Client::round_trips`] (one per request waited for; a batch sent to several CMIs
//! in parallel is one), data-store calls from the `FaultyStore` in front of the store: reads +
//! writes + 2 per transaction (its BEGIN, which `Faults` counts, and the COMMIT or ROLLBACK that
//! ends it, which it does not).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cads::documents::Collection;
use cads::store::{DataStore, Document};
use cads::{Config, Policy};
use cads_apps::bg::{layout, ActionKind, GraphParams, LayoutKind};
use cads_apps::ycsb::{load_token, record, update, FieldLength, TABLE};

use crate::bg::warm_cache;
use crate::bg::workload::{MemberChooser, Model, Outcome, Popularity};
use crate::deploy::{CacheSpec, CmiSettings, Deployment, Launcher};
use crate::generator::{key_name, Rng};
use crate::ycsb::validate::writer_token;

/// One cell of a latency table: means per action.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    /// Mean latency in milliseconds.
    pub ms: f64,
    /// Mean cache round trips.
    pub cache: f64,
    /// Mean data-store calls.
    pub store: f64,
}

/// A measured row: an action's name and its cell.
pub type Row = (&'static str, Cell);

/// A policy's column of a table: its rows.
pub type Column = (Policy, Vec<Row>);

/// Data-store calls so far, as described in the module's documentation.
fn store_calls(dep: &Deployment) -> u64 {
    let c = dep.faults.counts();
    c.reads + c.writes + 2 * c.transactions
}

/// Runs `f` once and returns its result and cell.
fn timed<T>(dep: &Deployment, f: impl FnOnce() -> Result<T>) -> Result<(T, Cell)> {
    let (cache, store) = (dep.cache_round_trips(), store_calls(dep));
    let start = Instant::now();
    let value = f()?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    Ok((
        value,
        Cell {
            ms,
            cache: (dep.cache_round_trips() - cache) as f64,
            store: (store_calls(dep) - store) as f64,
        },
    ))
}

/// Mean of cells.
fn mean(cells: &[Cell]) -> Cell {
    let n = cells.len().max(1) as f64;
    Cell {
        ms: cells.iter().map(|c| c.ms).sum::<f64>() / n,
        cache: cells.iter().map(|c| c.cache).sum::<f64>() / n,
        store: cells.iter().map(|c| c.store).sum::<f64>() / n,
    }
}

/// Where the measurements run: the data store, and the CMIs (embedded ones started by the
/// launcher, fresh for each measurement).
pub struct Site<'a> {
    /// The data store.
    pub store: Arc<dyn DataStore>,
    /// The cache.
    pub cache: &'a CacheSpec,
    /// Starts embedded CMIs.
    pub launcher: &'a dyn Launcher,
}

impl Site<'_> {
    fn deploy(&self, policy: Policy, collection: &str) -> Result<Deployment> {
        Deployment::start(
            policy,
            self.store.clone(),
            collection,
            self.cache,
            &CmiSettings::default(),
            self.launcher,
            Config::default(),
            None,
        )
    }
}

/// BG (000 Table 3.6): loads the graph, warms the cache with every member's read keys, then runs
/// each action `actions` times in the order of [`ActionKind::ALL`] (reads first, on a warm
/// cache), on members drawn uniformly.
pub fn measure_actions(
    policy: Policy,
    kind: LayoutKind,
    site: &Site<'_>,
    graph: &GraphParams,
    actions: usize,
    seed: u64,
) -> Result<Vec<Row>> {
    let dep = site.deploy(policy, cads_apps::bg::layout::documents::COLLECTION)?;
    let bg = layout(kind, &dep.cads);
    bg.load(&dep.cads, graph)
        .context("loading the social graph")?;
    if policy != Policy::DataStoreOnly {
        warm_cache(&*bg, &dep.cads, graph.members, 1)?;
    }
    let model = Model::new(graph);
    let chooser = MemberChooser::new(Popularity::Uniform, graph.members);
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for kind in ActionKind::ALL {
        let mut cells = Vec::with_capacity(actions);
        for _ in 0..actions {
            let Some(action) = model.pick(kind, &chooser, &mut rng) else {
                bail!("found no valid pair for {}", kind.name());
            };
            let (_, cell) = timed(&dep, || {
                bg.perform(&dep.cads, &action)
                    .with_context(|| format!("{action:?}"))
            })?;
            model.finish(&action, Outcome::Committed);
            cells.push(cell);
        }
        rows.push((kind.name(), mean(&cells)));
    }
    dep.stop()?;
    Ok(rows)
}

/// Fields per YCSB record (each of 100 bytes).
const FIELDS: usize = 10;
const FIELD_LENGTH: FieldLength = FieldLength::Fixed(100);

/// YCSB Read and Update on the document layer (000 Table 3.4): `records` records of 10 fields of
/// 100 bytes; a read gets all fields of a record, an update sets all of them (`$set`). Records read
/// or updated are read once first, so the cache is warm.
pub fn measure_ycsb(
    policy: Policy,
    site: &Site<'_>,
    records: u64,
    actions: usize,
    seed: u64,
) -> Result<Vec<Row>> {
    let dep = site.deploy(policy, TABLE)?;
    let cads = &dep.cads;
    cads.store().drop_collection(TABLE)?;
    let table = Collection::create(cads, TABLE)?;
    let ids: Vec<String> = (0..records as i64).map(|k| key_name(k, true, 1)).collect();
    for (chunk, first) in ids.chunks(500).zip((0..).step_by(500)) {
        let docs: Vec<(String, Document)> = chunk
            .iter()
            .zip(first..)
            .map(|(id, k)| (id.clone(), record(load_token(k), FIELDS, FIELD_LENGTH)))
            .collect();
        cads.store()
            .insert_many(TABLE, &docs)
            .context("loading usertable")?;
    }
    let mut rng = Rng::new(seed);
    let mut pick = || &ids[rng.below(records) as usize];
    let reads: Vec<&String> = (0..actions).map(|_| pick()).collect();
    let updates: Vec<&String> = (0..actions).map(|_| pick()).collect();
    if policy != Policy::DataStoreOnly {
        for id in reads.iter().chain(&updates) {
            cads.run(|s| table.get(s, id))?;
        }
    }
    let mut cells = Vec::new();
    for id in &reads {
        let (doc, cell) = timed(&dep, || Ok(table.read(cads, id)?))?;
        if doc.is_none() {
            bail!("record {id} is missing");
        }
        cells.push(cell);
    }
    let read = mean(&cells);
    cells.clear();
    for (seq, id) in updates.iter().enumerate() {
        let changes = update(writer_token(0, seq as u64 + 1), None, FIELDS, FIELD_LENGTH);
        let (_, cell) = timed(&dep, || {
            Ok(cads.run(|s| table.update(s, id, changes.clone()))?)
        })?;
        cells.push(cell);
    }
    dep.stop()?;
    Ok(vec![("Read", read), ("Update", mean(&cells))])
}

/// Measures every policy `repeat` times, interleaved (none, around, through, none, ...), so that
/// a noisy moment hits all of them; returns each policy's medians. `measure` gets the policy and
/// the repetition's index.
pub fn interleaved(
    policies: &[Policy],
    repeat: usize,
    mut measure: impl FnMut(Policy, usize) -> Result<Vec<Row>>,
) -> Result<Vec<Column>> {
    let mut runs: Vec<Vec<Vec<Row>>> = vec![Vec::new(); policies.len()];
    for r in 0..repeat {
        for (i, policy) in policies.iter().enumerate() {
            let rows =
                measure(*policy, r).with_context(|| format!("measuring {}", policy.name()))?;
            runs[i].push(rows);
        }
    }
    Ok(policies
        .iter()
        .zip(runs)
        .map(|(p, r)| (*p, median(&r)))
        .collect())
}

/// The median of each cell over repeated measurements (latency and round trips separately).
pub fn median(runs: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[(v.len() - 1) / 2] + v[v.len() / 2]) / 2.0
    };
    first
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let cells: Vec<Cell> = runs.iter().map(|r| r[i].1).collect();
            (
                *name,
                Cell {
                    ms: med(cells.iter().map(|c| c.ms).collect()),
                    cache: med(cells.iter().map(|c| c.cache).collect()),
                    store: med(cells.iter().map(|c| c.store).collect()),
                },
            )
        })
        .collect()
}

fn count(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{}", x.round() as i64)
    } else {
        format!("{x:.1}")
    }
}

/// A Markdown table: one row per action, one column per policy, each cell
/// `mean ms (round trips = cache + data store)`.
pub fn table(columns: &[Column]) -> String {
    let mut out = String::new();
    let _ = write!(out, "| action |");
    for (policy, _) in columns {
        let _ = write!(out, " {} |", policy.name());
    }
    let _ = write!(out, "\n| --- |");
    for _ in columns {
        let _ = write!(out, " ---: |");
    }
    out.push('\n');
    let Some((_, first)) = columns.first() else {
        return out;
    };
    for (i, (name, _)) in first.iter().enumerate() {
        let _ = write!(out, "| {name} |");
        for (_, rows) in columns {
            let c = rows[i].1;
            let _ = write!(
                out,
                " {:.3} ({} = {} + {}) |",
                c.ms,
                count(c.cache + c.store),
                count(c.cache),
                count(c.store)
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_tables() {
        let cell = |ms| Cell {
            ms,
            cache: 3.0,
            store: 1.0,
        };
        let runs = vec![
            vec![("Read", cell(0.3))],
            vec![("Read", cell(0.1))],
            vec![("Read", cell(0.2))],
        ];
        let m = median(&runs);
        assert_eq!(m[0].1.ms, 0.2);
        let t = table(&[(Policy::WriteAround, m)]);
        assert!(t.contains("| Read | 0.200 (4 = 3 + 1) |"), "{t}");
    }
}
