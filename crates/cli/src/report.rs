//! `cads report DIR`: charts of the run records a benchmark or the demo wrote.

use std::path::PathBuf;

use anyhow::{bail, Result};
use cads_bench::report::{draw_charts, load_records};
use clap::Args;

/// `cads report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Directory of run records: JSON files from `cads bench --out` or `--json`, or `cads demo`.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Directory for the charts. [default: DIR]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Draws the charts and lists the files written on standard output.
pub fn run(args: &ReportArgs) -> Result<()> {
    let runs = load_records(&args.dir)?;
    if runs.is_empty() {
        bail!(
            "no run records in {}: expected JSON files with benchmark, policy and throughput \
             (from cads bench --out or --json, or cads demo)",
            args.dir.display()
        );
    }
    let out = args.out.as_ref().unwrap_or(&args.dir);
    for file in draw_charts(&runs, out)? {
        println!("{}", file.display());
    }
    Ok(())
}
