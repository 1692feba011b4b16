//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/*`) through the same checks the
//! cargo-fuzz targets run (`cads_engine::fuzzing`), on stable Rust: a fast smoke for CI that needs
//! neither nightly nor cargo-fuzz.
//!
//! The corpora include the minimized inputs of the bugs the fuzzers found (`regression-*`).
//!
//! To read an engine input: `FUZZ_INPUT=path cargo test -p cads-engine --test fuzz_corpus
//! decode_one -- --ignored --nocapture` prints its configuration and operations, then runs it
//! (with `CADS_FUZZ_TRACE=1`, printing the memory and leases after every operation).

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use cads_engine::fuzzing;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every file of `<root>/<target>/` through `check`; returns the failures.
fn run_all(root: &Path, check: impl Fn(&str, &[u8])) -> (usize, Vec<String>) {
    let mut count = 0;
    let mut failures = Vec::new();
    for target in fuzzing::TARGETS {
        for file in files(&root.join(target)) {
            let data = fs::read(&file).expect("readable corpus file");
            count += 1;
            if catch_unwind(AssertUnwindSafe(|| check(target, &data))).is_err() {
                failures.push(file.display().to_string());
            }
        }
    }
    (count, failures)
}

#[test]
fn every_corpus_input_passes_the_fuzz_checks() {
    let root = fuzz_dir().join("corpus");
    for target in fuzzing::TARGETS {
        assert!(
            !files(&root.join(target)).is_empty(),
            "fuzz/corpus/{target}/ has inputs"
        );
    }
    let (count, failures) = run_all(&root, |target, data| {
        assert!(fuzzing::check_input(target, data), "known target {target}");
    });
    assert!(
        failures.is_empty(),
        "{} of {count} corpus inputs fail (the panics are printed above):\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{count} corpus inputs pass");
}

#[test]
#[ignore = "a debugging aid: set FUZZ_INPUT to an engine_commands input"]
fn decode_one() {
    let Some(path) = std::env::var_os("FUZZ_INPUT") else {
        return;
    };
    let data = fs::read(path).expect("FUZZ_INPUT is readable");
    let (config, ops) = fuzzing::decode_engine_ops(&data);
    println!("{config:?}");
    for op in ops {
        match op {
            fuzzing::Op::Command(words) => {
                let words: Vec<String> = words
                    .iter()
                    .map(|w| format!("{:?}", String::from_utf8_lossy(w)))
                    .collect();
                println!("{}", words.join(" "));
            }
            other => println!("{other:?}"),
        }
    }
    // Then run it (CADS_FUZZ_TRACE=1 prints the memory after every operation).
    fuzzing::check_engine_ops(&data);
}
