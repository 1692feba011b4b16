//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/*`) through the same checks the
//! cargo-fuzz targets run (`cads_engine::fuzzing`), on stable Rust: a fast smoke for CI that needs
//! neither nightly nor cargo-fuzz.
//!
//! `fuzz/regressions/<target>/*` holds minimized inputs of bugs the fuzzers found that are still
//! open. They run (strictly, without the tolerances of `fuzzing::KNOWN_BUGS`) in the ignored test
//! `open_bug_reproducers`: `cargo test -p cads-engine --test fuzz_corpus -- --ignored`. Once a bug
//! is fixed, move its input into the corpus, and drop its entry from `KNOWN_BUGS`.
//!
//! To read an engine input: `FUZZ_INPUT=path cargo test -p cads-engine --test fuzz_corpus
//! decode_one -- --ignored --nocapture` prints its configuration and operations.

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
#[ignore = "reproduces open bugs: fails until they are fixed"]
fn open_bug_reproducers() {
    let root = fuzz_dir().join("regressions");
    let (count, failures) = run_all(&root, |target, data| match target {
        "engine_commands" => fuzzing::check_engine_ops_with(data, true),
        "log_replay" => fuzzing::check_log_replay_with(data, true),
        _ => {
            fuzzing::check_input(target, data);
        }
    });
    assert!(
        failures.is_empty(),
        "{} of {count} reproducers still fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
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
}
