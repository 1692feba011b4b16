//! `bg latency` and `bg ycsb`: one thread, each action many times, mean latency and mean round
//! trips per action, in the shape of 000 Tables 3.4 and 3.6.
//!
//! Round trips are counted, not estimated: cache round trips from
//! [`cads_client::Client::round_trips`] (one per request waited for; a batch sent to several CMIs
//! in parallel is one), data-store calls from the [`cads_store::FaultyStore`] in front of the
//! store ([`Deployment::store_calls`]: reads + writes + BEGIN and COMMIT/ROLLBACK of each
//! transaction).

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cads::documents::Collection;
use cads::Policy;
use cads_store::{Changes, Document};
use serde_json::Value;

use crate::deploy::{CacheSpec, Deployment};
use crate::graph::{Action, ActionKind, GraphParams, Model, Outcome, Rng};
use crate::layout::{layout, LayoutKind};
use crate::run::prepare;

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

/// Runs `f` once and returns its cell (latency, cache round trips, store calls).
fn timed<T>(dep: &Deployment, f: impl FnOnce() -> Result<T>) -> Result<(T, Cell)> {
    let (cache, store) = (dep.cache_round_trips(), dep.store_calls());
    let start = Instant::now();
    let value = f()?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    Ok((
        value,
        Cell {
            ms,
            cache: (dep.cache_round_trips() - cache) as f64,
            store: (dep.store_calls() - store) as f64,
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

/// BG: loads the graph, warms the cache with every member's read keys, then runs each action
/// `actions` times in the order of [`ActionKind::ALL`] (reads first, on a warm cache).
pub fn measure_bg(
    policy: Policy,
    kind: LayoutKind,
    url: &str,
    cache: &CacheSpec,
    graph: &GraphParams,
    actions: usize,
    seed: u64,
) -> Result<Vec<Row>> {
    let dep = Deployment::start(policy, url, cache)?;
    let layout = layout(kind, policy, false);
    prepare(&dep, layout.as_ref(), graph)?;
    if policy != Policy::DataStoreOnly {
        for member in 0..graph.members {
            for action in [
                Action::ViewProfile {
                    requester: member,
                    owner: member,
                },
                Action::ListFriends { member },
                Action::ViewFriendRequests { member },
            ] {
                layout
                    .perform(&dep.cads, &action)
                    .with_context(|| format!("warming the cache with {action:?}"))?;
            }
        }
    }
    let model = Model::new(graph);
    let mut rng = Rng::new(seed);
    let mut rows = Vec::new();
    for kind in ActionKind::ALL {
        let mut cells = Vec::with_capacity(actions);
        for _ in 0..actions {
            let Some(action) = model.pick(kind, &mut rng) else {
                bail!("found no valid pair for {}", kind.name());
            };
            let (_, cell) = timed(&dep, || {
                layout
                    .perform(&dep.cads, &action)
                    .with_context(|| format!("{action:?}"))
            })?;
            model.finish(&action, Outcome::Committed);
            cells.push(cell);
        }
        rows.push((kind.name(), mean(&cells)));
    }
    Ok(rows)
}

/// The YCSB `usertable` of 000 §3.3.1: records of `fields` fields of `field_len` bytes.
#[derive(Clone, Copy, Debug)]
pub struct YcsbParams {
    /// Records (`user0` .. `user<records-1>`).
    pub records: u32,
    /// Fields per record.
    pub fields: usize,
    /// Bytes per field.
    pub field_len: usize,
}

impl Default for YcsbParams {
    fn default() -> Self {
        YcsbParams {
            records: 10_000,
            fields: 10,
            field_len: 100,
        }
    }
}

/// The collection of the YCSB records.
pub const USERTABLE: &str = "usertable";

fn ycsb_value(rng: &mut Rng, len: usize) -> Value {
    let text: String = (0..len)
        .map(|_| char::from(b'a' + rng.below(26) as u8))
        .collect();
    Value::String(text)
}

fn ycsb_record(rng: &mut Rng, p: &YcsbParams) -> Document {
    (0..p.fields)
        .map(|f| (format!("field{f}"), ycsb_value(rng, p.field_len)))
        .collect()
}

/// YCSB Read and Update on the document layer: a read gets all fields of a record, an update
/// sets all of them (`$set`). Records read or updated are read once first, so the cache is warm.
pub fn measure_ycsb(
    policy: Policy,
    url: &str,
    cache: &CacheSpec,
    params: &YcsbParams,
    actions: usize,
    seed: u64,
) -> Result<Vec<Row>> {
    let dep = Deployment::start(policy, url, cache)?;
    let cads = &dep.cads;
    let mut rng = Rng::new(seed);
    cads.store().drop_collection(USERTABLE)?;
    let table = Collection::create(cads, USERTABLE)?;
    let ids: Vec<String> = (0..params.records).map(|i| format!("user{i}")).collect();
    for chunk in ids.chunks(500) {
        let docs: Vec<(String, Document)> = chunk
            .iter()
            .map(|id| (id.clone(), ycsb_record(&mut rng, params)))
            .collect();
        cads.store()
            .insert_many(USERTABLE, &docs)
            .context("loading usertable")?;
    }
    dep.flush_cache()?;
    let reads: Vec<&String> = (0..actions)
        .map(|_| &ids[rng.below(params.records) as usize])
        .collect();
    let updates: Vec<&String> = (0..actions)
        .map(|_| &ids[rng.below(params.records) as usize])
        .collect();
    if policy != Policy::DataStoreOnly {
        for id in reads.iter().chain(&updates) {
            cads.run(|s| table.get(s, id))?;
        }
    }
    let mut cells = Vec::new();
    for id in &reads {
        let (doc, cell) = timed(&dep, || Ok(cads.run(|s| table.get(s, id))?))?;
        if doc.is_none() {
            bail!("record {id} is missing");
        }
        cells.push(cell);
    }
    let read = mean(&cells);
    cells.clear();
    for id in &updates {
        let set: serde_json::Map<String, Value> = ycsb_record(&mut rng, params);
        let changes = Changes::from_json(&serde_json::json!({ "$set": set }))?;
        let (_, cell) = timed(&dep, || {
            Ok(cads.run(|s| table.update(s, id, changes.clone()))?)
        })?;
        cells.push(cell);
    }
    Ok(vec![("Read", read), ("Update", mean(&cells))])
}

/// The median of each cell over repeated measurements (latency and round trips separately).
pub fn median(runs: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
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
pub fn table(columns: &[(Policy, Vec<Row>)]) -> String {
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
