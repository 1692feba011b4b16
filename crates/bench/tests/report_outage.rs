//! `cads report`'s outage chart: drawn from records whose `outage` object has a timeline, with a
//! line per run named by policy and TARDIS technique and the outage shaded; records without one
//! get no outage chart.

use std::path::{Path, PathBuf};

use cads_bench::report::{draw_charts, load_records};
use serde_json::{json, Value};

/// A YCSB workload A record; with `outage`, the data store away from 2 s for 3 s of a 10 s
/// timeline in which the dirty documents rise while it is away and drain after.
fn record(policy: &str, run: u64, outage: Option<Option<&str>>) -> Value {
    let mut r = json!({
        "benchmark": "ycsb", "workload": "A", "policy": policy, "run": run,
        "throughput": 1000.0, "elapsed_s": 8.0,
        "latency_us": {"READ": {"p50": 100, "p95": 200, "p99": 400, "p999": 900}},
    });
    if let Some(tardis) = outage {
        let timeline: Vec<Value> = (0..=10)
            .map(|t| {
                let dirty = match t {
                    0..=2 => 0,
                    3..=5 => 40 * (t - 2),
                    _ => (120 - 40 * (t - 5)).max(0),
                };
                let ops = if (3..=5).contains(&t) { 300.0 } else { 1000.0 };
                json!({"t_s": t as f64, "ops_per_s": ops, "dirty": dirty, "mode": null})
            })
            .collect();
        r["outage"] = json!({
            "at_s": 2.0, "for_s": 3.0, "tardis": tardis, "dirty_peak": 120,
            "recovery_s": 3.0, "left_after_run": 0, "timeline": timeline,
        });
    }
    r
}

/// Writes `records` as one JSON array and draws the charts into the same directory.
fn report(records: &[Value]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("runs.json"), json!(records).to_string()).unwrap();
    let runs = load_records(dir.path()).unwrap();
    let written = draw_charts(&runs, dir.path()).unwrap();
    (dir, written)
}

fn names(written: &[PathBuf]) -> Vec<String> {
    written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The value of `name="..."` in an SVG tag.
fn attribute(tag: &str, name: &str) -> Option<f64> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    tag[start..].split('"').next()?.parse().ok()
}

/// The shaded rectangles of an SVG (the outage's shade: translucent black), as (x, width).
fn shades(svg: &str) -> Vec<(f64, f64)> {
    svg.split('<')
        .filter(|tag| {
            tag.starts_with("rect ")
                && tag.contains("fill=\"#000000\"")
                && attribute(tag, "opacity").is_some_and(|o| o > 0.0 && o < 0.5)
        })
        .map(|tag| {
            (
                attribute(tag, "x").unwrap(),
                attribute(tag, "width").unwrap(),
            )
        })
        .collect()
}

/// The texts of an SVG, as (the tag's attributes, the text).
fn texts(svg: &str) -> Vec<(&str, &str)> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|rest| {
            let (attributes, rest) = rest.split_once('>')?;
            Some((attributes, rest.split("</text>").next()?.trim()))
        })
        .collect()
}

fn has_text(svg: &str, text: &str) -> bool {
    texts(svg).iter().any(|&(_, t)| t == text)
}

/// Where the time axis labels `seconds` (the first panel's), in pixels.
fn tick(svg: &str, seconds: &str) -> f64 {
    let (attributes, _) = texts(svg)
        .into_iter()
        .find(|&(a, t)| t == seconds && a.contains("text-anchor=\"middle\""))
        .unwrap_or_else(|| panic!("no tick {seconds}"));
    attribute(&format!(" {attributes}"), "x").unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn an_outage_timeline_is_charted_with_a_line_per_run_and_the_window_shaded() {
    let (dir, written) = report(&[
        record("none", 0, None),
        record("write-through", 0, Some(Some("tardis"))),
        record("write-around", 0, Some(Some("tar"))),
        record("write-through", 0, Some(None)),
    ]);
    let names = names(&written);
    for file in ["ycsb-A-outage.svg", "ycsb-A-outage.png"] {
        assert!(names.iter().any(|n| n == file), "{file} in {names:?}");
        let path = dir.path().join(file);
        assert!(
            std::fs::metadata(&path).is_ok_and(|m| m.len() > 0),
            "{file}"
        );
    }
    let svg = read(&dir.path().join("ycsb-A-outage.svg"));
    for text in [
        "YCSB workload A: data store outage over time",
        "write-through + TARDIS",
        "write-around + TAR",
        "write-through",
        "documents with buffered writes (dirty)",
        "throughput (operations/s)",
        "data store down",
    ] {
        assert!(has_text(&svg, text), "{text:?} is not in the outage chart");
    }
    assert!(
        !has_text(&svg, "data store alone"),
        "a run without an outage has no line"
    );
    // One shade a panel, over the same seconds of the shared time axis: from 2 s to 5 s.
    let shaded = shades(&svg);
    assert_eq!(shaded.len(), 2, "{shaded:?}");
    assert_eq!(shaded[0], shaded[1], "the panels share the time axis");
    let (x, width) = shaded[0];
    assert!((x - tick(&svg, "2.0")).abs() <= 1.0, "{shaded:?}");
    assert!((x + width - tick(&svg, "5.0")).abs() <= 1.0, "{shaded:?}");
}

#[test]
fn runs_that_share_a_name_are_told_apart_by_number() {
    let (dir, _) = report(&[
        record("write-through", 0, Some(Some("tard"))),
        record("write-through", 1, Some(Some("tard"))),
    ]);
    let svg = read(&dir.path().join("ycsb-A-outage.svg"));
    assert!(has_text(&svg, "write-through + TARD run 0"), "{svg}");
    assert!(has_text(&svg, "write-through + TARD run 1"), "{svg}");
}

#[test]
fn records_without_an_outage_timeline_get_no_outage_chart() {
    let mut null = record("write-through", 1, None);
    null["outage"] = Value::Null;
    let mut empty = record("write-around", 0, Some(Some("tar")));
    empty["outage"]["timeline"] = json!([]);
    let (dir, written) = report(&[record("none", 0, None), null, empty]);
    let names = names(&written);
    assert!(
        names.iter().any(|n| n == "ycsb-A-throughput.svg"),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("outage")), "{names:?}");
    let on_disk: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("outage"))
        .collect();
    assert!(on_disk.is_empty(), "{on_disk:?}");
}
