//! Charts of run records (`cads report`, and `cads bench --out` and `cads demo` after their
//! runs): throughput by policy, latency percentiles by policy for every action, write-back's
//! pinned memory (and applied share, when the records carry it) over time, and dirty documents
//! and throughput over time around a data-store outage; each as PNG and SVG.
//!
//! The records are read as JSON, not as the benchmarks' record types, so that one reader takes
//! the records of every benchmark (YCSB, BG, TPC-C) and of older runs: what a chart needs is
//! `benchmark`, `workload`, `policy`, `run`, `throughput`, `latency_us.<action>.{p50,p95,p99,
//! p999}` and `write_back.pinned_bytes.samples` (`[[seconds, bytes], ...]`, closed by
//! `write_back.pinned_bytes.end` at `elapsed_s`); optional `write_back.applied_share_samples`
//! (`[[seconds, share], ...]`, share in 0..=1, closed by `write_back.applied_share`) adds a
//! panel. The outage chart takes `outage.{at_s, for_s, tardis}` and `outage.timeline`
//! (`[{t_s, ops_per_s, dirty}, ...]`) of the runs that saw the data store go away; the recovery
//! chart (004 Fig. 6) takes `gemini.{recovery, fail_at_s, back_s}` and `gemini.timeline`
//! (`[{t_s, hit_ratio}, ...]`) of the runs whose CMIs failed.

mod chart;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

pub use chart::{render_png, render_svg};

/// The latency percentiles charted, as (JSON key, label).
pub const PERCENTILES: [(&str, &str); 4] = [
    ("p50", "p50"),
    ("p95", "p95"),
    ("p99", "p99"),
    ("p999", "p99.9"),
];

/// What the charts use of one run record, whatever benchmark wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPoint {
    /// `ycsb`, `bg`, `tpcc`, ...
    pub benchmark: String,
    /// The workload or mix.
    pub workload: String,
    /// The policy (`none`, `write-around`, `write-through`, `write-back`).
    pub policy: String,
    /// Which run of the policy (`--repeat`).
    pub run: u64,
    /// Completed operations (actions, transactions) per second.
    pub throughput: f64,
    /// Per action: p50, p95, p99 and p99.9 in µs.
    pub latency_us: BTreeMap<String, [f64; 4]>,
    /// Write-back: `(seconds into the run, pinned bytes)`.
    pub pinned_bytes: Vec<(f64, f64)>,
    /// Write-back: `(seconds into the run, share of buffered writes applied)`.
    pub applied_share: Vec<(f64, f64)>,
    /// The data store went away during the run (`--outage`, or TARDIS saw it fail).
    pub outage: Option<OutagePoint>,
    /// CMIs failed and came back during the run (`--fail-cmis`).
    pub recovery: Option<RecoveryPoint>,
}

/// What the recovery chart uses of a record's `gemini` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecoveryPoint {
    /// The variant (`gemini-i`, `gemini-o`, `volatile`, `stale`).
    pub recovery: String,
    /// When the CMIs were cut off and let back, seconds into the run phase.
    pub fail_at_s: Option<f64>,
    /// When they were let back.
    pub back_s: Option<f64>,
    /// `(seconds into the run phase, the failed CMIs' hit ratio)`, where they served reads.
    pub hit_ratio: Vec<(f64, f64)>,
}

impl RecoveryPoint {
    fn from_json(gemini: &Value) -> Option<RecoveryPoint> {
        let number = |key: &str| gemini.get(key).and_then(Value::as_f64);
        let hit_ratio = gemini
            .get("timeline")?
            .as_array()?
            .iter()
            .filter_map(|s| Some((s.get("t_s")?.as_f64()?, s.get("hit_ratio")?.as_f64()?)))
            .collect();
        Some(RecoveryPoint {
            recovery: gemini.get("recovery")?.as_str()?.to_string(),
            fail_at_s: number("fail_at_s"),
            back_s: number("back_s"),
            hit_ratio,
        })
    }
}

/// What the outage chart uses of a record's `outage` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutagePoint {
    /// When the data store was cut off, seconds into the run phase (None: TARDIS saw it fail
    /// without `--outage`).
    pub at_s: Option<f64>,
    /// How long it stayed away (None: it did not come back).
    pub for_s: Option<f64>,
    /// The TARDIS technique (`tar`, `dis`, `tard`, `tardis`; None: TARDIS off).
    pub tardis: Option<String>,
    /// TARDIS's AR workers per AppNode (None in older records).
    pub ar_workers: Option<u64>,
    /// `(seconds into the run phase, documents listed with buffered writes)`, a sample a second
    /// through the run and the recovery after it.
    pub dirty: Vec<(f64, f64)>,
    /// `(seconds into the run phase, operations per second since the previous sample)`.
    pub ops_per_s: Vec<(f64, f64)>,
}

impl OutagePoint {
    /// Reads a record's `outage` object; `None` for anything else (`null` in older records).
    fn from_json(outage: &Value) -> Option<OutagePoint> {
        outage.as_object()?;
        let number = |key: &str| outage.get(key).and_then(Value::as_f64);
        let samples: Vec<(f64, f64, f64)> = outage
            .get("timeline")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|s| {
                        let value = |key: &str| s.get(key).and_then(Value::as_f64);
                        Some((value("t_s")?, value("dirty")?, value("ops_per_s")?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(OutagePoint {
            at_s: number("at_s"),
            for_s: number("for_s"),
            tardis: outage
                .get("tardis")
                .and_then(Value::as_str)
                .map(str::to_string),
            ar_workers: outage.get("ar_workers").and_then(Value::as_u64),
            dirty: samples.iter().map(|&(t, d, _)| (t, d)).collect(),
            ops_per_s: samples.iter().map(|&(t, _, r)| (t, r)).collect(),
        })
    }

    /// Whether there is a timeline to chart.
    pub fn has_timeline(&self) -> bool {
        !self.dirty.is_empty()
    }
}

impl RunPoint {
    /// Reads a run record; `None` for JSON that is not one (a summary, a configuration).
    pub fn from_json(record: &Value) -> Option<RunPoint> {
        let text = |key: &str| record.get(key)?.as_str().map(str::to_string);
        let latency_us = record
            .get("latency_us")
            .and_then(Value::as_object)
            .map(|actions| {
                actions
                    .iter()
                    .filter_map(|(action, l)| {
                        let mut values = [0.0; 4];
                        for (value, (key, _)) in values.iter_mut().zip(PERCENTILES) {
                            *value = l.get(key)?.as_f64()?;
                        }
                        Some((action.clone(), values))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let write_back = |path: &[&str]| {
            path.iter()
                .try_fold(record.get("write_back")?, |node, key| node.get(key))
        };
        let samples = |path: &[&str]| -> Vec<(f64, f64)> {
            write_back(path)
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|pair| Some((pair.get(0)?.as_f64()?, pair.get(1)?.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default()
        };
        // The samples are taken about once a second; the record also has the values at the end
        // of the run, which are the last points of the lines (the applied share's only where it
        // was sampled: a panel of one point says nothing).
        let elapsed = record.get("elapsed_s").and_then(Value::as_f64);
        let close = |line: &mut Vec<(f64, f64)>, path: &[&str]| {
            let end = elapsed.zip(write_back(path).and_then(Value::as_f64));
            if let Some((seconds, value)) = end {
                if line.last().is_none_or(|last| seconds > last.0 + 0.05) {
                    line.push((seconds, value));
                }
            }
        };
        let mut pinned_bytes = samples(&["pinned_bytes", "samples"]);
        close(&mut pinned_bytes, &["pinned_bytes", "end"]);
        let mut applied_share = samples(&["applied_share_samples"]);
        if !applied_share.is_empty() {
            close(&mut applied_share, &["applied_share"]);
        }
        Some(RunPoint {
            benchmark: text("benchmark")?,
            workload: text("workload").unwrap_or_default(),
            policy: text("policy")?,
            run: record.get("run").and_then(Value::as_u64).unwrap_or(0),
            throughput: record.get("throughput")?.as_f64()?,
            latency_us,
            pinned_bytes,
            applied_share,
            outage: record.get("outage").and_then(OutagePoint::from_json),
            recovery: record.get("gemini").and_then(RecoveryPoint::from_json),
        })
    }
}

impl RunPoint {
    /// The stem of this run's record file: `<benchmark>-<workload>-<policy>-<run>`, the workload
    /// as [`short_workload`] gives it, made safe by [`file_name_part`].
    pub fn file_stem(&self) -> String {
        file_name_part(&format!(
            "{}-{}-{}-{}",
            self.benchmark,
            short_workload(&self.benchmark, &self.workload),
            self.policy,
            self.run
        ))
    }
}

/// A workload without the benchmark's name in front, for titles and file names: TPC-C's
/// workload `tpcc-hundredth-1w` would otherwise read `tpcc-tpcc-hundredth-1w`.
pub fn short_workload<'w>(benchmark: &str, workload: &'w str) -> &'w str {
    workload
        .strip_prefix(benchmark)
        .and_then(|rest| rest.strip_prefix('-'))
        .filter(|rest| !rest.is_empty())
        .unwrap_or(workload)
}

/// Reads every `*.json` file of `dir` (each a record or an array of records) and returns the run
/// records in file-name order, each once: `--json FILE` and `--out DIR` may both hold a run.
/// Errors: `dir` cannot be read, or a `.json` file is not JSON.
pub fn load_records(dir: &Path) -> Result<Vec<RunPoint>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the directory {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "json") && path.is_file())
        .collect();
    files.sort();
    let mut seen: Vec<Value> = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let items = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        for item in items {
            if RunPoint::from_json(&item).is_some() && !seen.contains(&item) {
                seen.push(item);
            }
        }
    }
    Ok(seen.iter().filter_map(RunPoint::from_json).collect())
}

/// The runs of one benchmark and workload, charted together.
#[derive(Clone, Debug)]
pub struct Group<'r> {
    /// The benchmark.
    pub benchmark: &'r str,
    /// The workload.
    pub workload: &'r str,
    /// Its runs, in the order given.
    pub runs: Vec<&'r RunPoint>,
}

impl Group<'_> {
    /// The stem of this group's chart files: `<benchmark>-<workload>` ([`short_workload`]), with
    /// characters other than letters, digits, `.` and `-` replaced (workloads such as `10:1` or
    /// `CPR-scan50%`).
    pub fn file_stem(&self) -> String {
        file_name_part(&format!(
            "{}-{}",
            self.benchmark,
            short_workload(self.benchmark, self.workload)
        ))
    }
}

/// `text` with every character other than ASCII letters, digits, `.` and `-` replaced by `_`,
/// for a file name made of workload and policy names.
pub fn file_name_part(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The runs grouped by benchmark and workload, in the order the groups first appear.
pub fn group(runs: &[RunPoint]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for run in runs {
        match groups
            .iter_mut()
            .find(|g| g.benchmark == run.benchmark && g.workload == run.workload)
        {
            Some(g) => g.runs.push(run),
            None => groups.push(Group {
                benchmark: &run.benchmark,
                workload: &run.workload,
                runs: vec![run],
            }),
        }
    }
    groups
}

/// Draws every chart of `runs` into `out` (created if needed), as PNG and SVG, and returns the
/// files written. Per benchmark and workload: `<stem>-throughput`, `<stem>-latency` (when the
/// records have latencies), `<stem>-write-back` (when a write-back run sampled pinned memory)
/// `<stem>-outage` (when a run has an outage timeline) and `<stem>-recovery` (when CMIs failed
/// in a run).
pub fn draw_charts(runs: &[RunPoint], out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    for g in group(runs) {
        let stem = g.file_stem();
        let mut charts = vec![(format!("{stem}-throughput"), chart::Chart::Throughput(&g))];
        if g.runs.iter().any(|r| !r.latency_us.is_empty()) {
            charts.push((format!("{stem}-latency"), chart::Chart::Latency(&g)));
        }
        if g.runs.iter().any(|r| !r.pinned_bytes.is_empty()) {
            charts.push((format!("{stem}-write-back"), chart::Chart::WriteBack(&g)));
        }
        if g.runs
            .iter()
            .any(|r| r.outage.as_ref().is_some_and(OutagePoint::has_timeline))
        {
            charts.push((format!("{stem}-outage"), chart::Chart::Outage(&g)));
        }
        if g.runs
            .iter()
            .any(|r| r.recovery.as_ref().is_some_and(|p| !p.hit_ratio.is_empty()))
        {
            charts.push((format!("{stem}-recovery"), chart::Chart::Recovery(&g)));
        }
        for (name, c) in charts {
            let png = out.join(format!("{name}.png"));
            std::fs::write(&png, render_png(&c)?)
                .with_context(|| format!("writing {}", png.display()))?;
            let svg = out.join(format!("{name}.svg"));
            std::fs::write(&svg, render_svg(&c)?)
                .with_context(|| format!("writing {}", svg.display()))?;
            written.extend([png, svg]);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(policy: &str, run: u64, throughput: f64) -> Value {
        json!({
            "benchmark": "ycsb", "workload": "A", "policy": policy, "run": run,
            "throughput": throughput,
            "latency_us": {"READ": {"count": 10, "p50": 100, "p95": 200, "p99": 400, "p999": 900}},
            "write_back": {"pinned_bytes": {"samples": [[0.0, 0], [1.0, 4096]]}},
        })
    }

    #[test]
    fn run_records_are_read_and_others_are_not() {
        let r = RunPoint::from_json(&record("write-back", 1, 1234.5)).unwrap();
        assert_eq!(
            (r.policy.as_str(), r.run, r.throughput),
            ("write-back", 1, 1234.5)
        );
        assert_eq!(r.latency_us["READ"], [100.0, 200.0, 400.0, 900.0]);
        assert_eq!(r.pinned_bytes, vec![(0.0, 0.0), (1.0, 4096.0)]);
        assert!(r.applied_share.is_empty());
        assert_eq!(r.outage, None);
        // The pinned memory at the end of the run closes the line.
        let mut ended = record("write-back", 0, 1.0);
        ended["elapsed_s"] = json!(1.6);
        ended["write_back"]["pinned_bytes"]["end"] = json!(512);
        ended["write_back"]["applied_share"] = json!(0.9);
        let r = RunPoint::from_json(&ended).unwrap();
        assert_eq!(
            r.pinned_bytes,
            vec![(0.0, 0.0), (1.0, 4096.0), (1.6, 512.0)]
        );
        assert!(r.applied_share.is_empty(), "not sampled: no line");
        ended["write_back"]["applied_share_samples"] = json!([[1.0, 0.5]]);
        let r = RunPoint::from_json(&ended).unwrap();
        assert_eq!(r.applied_share, vec![(1.0, 0.5), (1.6, 0.9)]);
        // An outage: its window, technique and timeline; `null` (older records) is none.
        ended["outage"] = json!({
            "at_s": 1.0, "for_s": 0.5, "tardis": "tard", "dirty_peak": 3,
            "timeline": [
                {"t_s": 1.0, "ops_per_s": 900.0, "dirty": 0, "mode": "normal"},
                {"t_s": 2.0, "ops_per_s": 300.5, "dirty": 3, "mode": "failed"},
            ],
        });
        let outage = RunPoint::from_json(&ended).unwrap().outage.unwrap();
        assert_eq!(
            (outage.at_s, outage.for_s, outage.tardis.as_deref()),
            (Some(1.0), Some(0.5), Some("tard"))
        );
        assert_eq!(outage.dirty, vec![(1.0, 0.0), (2.0, 3.0)]);
        assert_eq!(outage.ops_per_s, vec![(1.0, 900.0), (2.0, 300.5)]);
        ended["outage"] = Value::Null;
        assert_eq!(RunPoint::from_json(&ended).unwrap().outage, None);
        // CMIs that failed: the variant, the window and the samples with reads.
        ended["gemini"] = json!({
            "recovery": "gemini-o", "fail_at_s": 10.0, "back_s": 20.0,
            "timeline": [{"t_s": 9.75, "hit_ratio": 0.9}, {"t_s": 10.25, "hit_ratio": null}],
        });
        let recovery = RunPoint::from_json(&ended).unwrap().recovery.unwrap();
        assert_eq!(recovery.recovery, "gemini-o");
        assert_eq!(
            (recovery.fail_at_s, recovery.back_s),
            (Some(10.0), Some(20.0))
        );
        assert_eq!(recovery.hit_ratio, vec![(9.75, 0.9)]);
        // A summary row has no benchmark.
        assert!(RunPoint::from_json(&json!({"workload": "A", "policy": "none"})).is_none());
    }

    #[test]
    fn a_directory_is_read_once_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let a = record("none", 0, 10.0);
        let b = record("write-through", 0, 30.0);
        std::fs::write(dir.path().join("all.json"), json!([a, b]).to_string()).unwrap();
        std::fs::write(dir.path().join("one.json"), b.to_string()).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not JSON").unwrap();
        let runs = load_records(dir.path()).unwrap();
        assert_eq!(runs.len(), 2);
        std::fs::write(dir.path().join("broken.json"), "{").unwrap();
        let err = load_records(dir.path()).unwrap_err();
        assert!(format!("{err:#}").contains("broken.json"), "{err:#}");
    }

    #[test]
    fn file_names_do_not_repeat_the_benchmark() {
        let mut r = RunPoint::from_json(&record("write-back", 2, 1.0)).unwrap();
        assert_eq!(r.file_stem(), "ycsb-A-write-back-2");
        r.benchmark = "tpcc".into();
        r.workload = "tpcc-hundredth-1w".into();
        assert_eq!(r.file_stem(), "tpcc-hundredth-1w-write-back-2");
        assert_eq!(short_workload("tpcc", "tpcc-"), "tpcc-");
        assert_eq!(short_workload("bg", "10:1"), "10:1");
    }

    #[test]
    fn groups_and_file_names() {
        let mut bg = RunPoint::from_json(&record("none", 0, 1.0)).unwrap();
        bg.benchmark = "bg".into();
        bg.workload = "10:1".into();
        let runs = vec![
            RunPoint::from_json(&record("none", 0, 1.0)).unwrap(),
            bg,
            RunPoint::from_json(&record("write-back", 0, 2.0)).unwrap(),
        ];
        let groups = group(&runs);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].runs.len(), 2);
        assert_eq!(groups[0].file_stem(), "ycsb-A");
        assert_eq!(groups[1].file_stem(), "bg-10_1");
    }
}
