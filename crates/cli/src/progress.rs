//! Progress of the benchmarks' phases on standard error: a bar redrawn in place on a terminal,
//! the benchmark's own progress lines otherwise (a log file or CI output keeps every report).

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

/// One progress report, in the terms every benchmark shares.
pub struct Report<'a> {
    /// Which run this is, e.g. `ycsb A write-back #0`: a new label or phase starts a new bar.
    pub label: String,
    /// The phase (`load`, `run`, ...).
    pub phase: &'a str,
    /// Units done (records, operations, actions, transactions).
    pub done: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// Time since the phase began.
    pub elapsed: Duration,
    /// How long the phase is meant to last, for a run of fixed duration.
    pub expected: Option<Duration>,
    /// The benchmark's note (`"done"` at a phase's end).
    pub note: &'a str,
}

/// Where progress goes.
pub struct Progress {
    terminal: bool,
    /// The label and phase of the bar being redrawn, if one is open.
    open: Mutex<Option<(String, String)>>,
}

const BAR_WIDTH: usize = 24;

impl Progress {
    /// Bars when standard error is a terminal (and `TERM` is not `dumb`), lines otherwise.
    pub fn new() -> Progress {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        Progress {
            terminal: std::io::stderr().is_terminal() && !dumb,
            open: Mutex::new(None),
        }
    }

    /// Shows one report: `line` is the benchmark's own line, printed as it is when standard
    /// error is not a terminal.
    pub fn show(&self, line: &dyn Display, report: Report<'_>) {
        let mut stderr = std::io::stderr().lock();
        if !self.terminal {
            let _ = writeln!(stderr, "{line}");
            return;
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let key = (report.label.clone(), report.phase.to_string());
        if open.as_ref().is_some_and(|k| *k != key) {
            // Another phase began: the finished bar stays on its own line.
            let _ = writeln!(stderr);
        }
        let text = render(&report, terminal_width());
        let _ = write!(stderr, "\r\x1b[2K{text}");
        if report.note == "done" {
            let _ = writeln!(stderr);
            *open = None;
        } else {
            *open = Some(key);
        }
        let _ = stderr.flush();
    }

    /// Ends an open bar's line, so that what is printed next starts on a line of its own.
    pub fn finish(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.take().is_some() {
            eprintln!();
        }
    }
}

/// The columns of the terminal: `COLUMNS` when the shell exports it, else 100.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c >= 40)
        .unwrap_or(100)
}

/// `label phase [#####.....]  42%  3.1s  1234/5000 note`, cut to `width` characters (a line
/// that wraps could not be redrawn in place).
fn render(r: &Report<'_>, width: usize) -> String {
    let fraction = match (r.total, r.expected) {
        (Some(total), _) if total > 0 => Some(r.done as f64 / total as f64),
        (_, Some(expected)) if !expected.is_zero() => {
            Some(r.elapsed.as_secs_f64() / expected.as_secs_f64())
        }
        _ => None,
    }
    .map(|f| f.clamp(0.0, 1.0));
    let mut text = format!("{} {:<6} ", r.label, r.phase);
    match fraction {
        Some(f) => {
            let filled = (f * BAR_WIDTH as f64).round() as usize;
            text.push_str(&format!(
                "[{}{}] {:>3.0}% ",
                "#".repeat(filled),
                ".".repeat(BAR_WIDTH - filled),
                f * 100.0
            ));
        }
        None => text.push_str(&format!("[{}] ", " ".repeat(BAR_WIDTH))),
    }
    text.push_str(&format!("{:>6.1}s {}", r.elapsed.as_secs_f64(), r.done));
    if let Some(total) = r.total {
        text.push_str(&format!("/{total}"));
    }
    if !r.note.is_empty() {
        text.push(' ');
        text.push_str(r.note);
    }
    text.chars().take(width.saturating_sub(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(
        done: u64,
        total: Option<u64>,
        elapsed: f64,
        expected: Option<f64>,
    ) -> Report<'static> {
        Report {
            label: "ycsb A none #0".into(),
            phase: "load",
            done,
            total,
            elapsed: Duration::from_secs_f64(elapsed),
            expected: expected.map(Duration::from_secs_f64),
            note: "1000/s",
        }
    }

    #[test]
    fn bars_follow_the_count_or_the_clock() {
        let half = render(&report(50, Some(100), 1.0, None), 200);
        assert!(
            half.contains(&format!("[{}{}]  50%", "#".repeat(12), ".".repeat(12))),
            "{half}"
        );
        assert!(half.ends_with("50/100 1000/s"), "{half}");
        let timed = render(&report(7, None, 2.0, Some(8.0)), 200);
        assert!(timed.contains(" 25%"), "{timed}");
        let unknown = render(&report(7, None, 2.0, None), 200);
        assert!(!unknown.contains('%'), "{unknown}");
        let late = render(&report(7, None, 9.0, Some(8.0)), 200);
        assert!(late.contains("100%"), "{late}");
        assert_eq!(render(&report(1, None, 1.0, None), 40).chars().count(), 39);
    }
}
