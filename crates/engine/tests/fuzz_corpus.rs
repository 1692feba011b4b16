//! Replays the committed fuzz corpora of the engine's targets (`fuzz/corpus/<target>/*`) through
//! the same checks the cargo-fuzz targets run (`cads_engine::fuzzing`, compiled for this test by
//! the `fuzzing` feature), on stable Rust: a fast smoke for CI that needs neither nightly nor
//! cargo-fuzz. The request parser's corpus replays in `cads-protocol`'s own test.
//!
//! The corpora include the minimized inputs of the bugs the fuzzers found (`regression-*`).
//!
//! To read an engine input: `FUZZ_INPUT=path cargo test -p cads-engine --test fuzz_corpus
//! decode_one -- --ignored --nocapture` prints its configuration and operations, then runs it
//! (with `CADS_FUZZ_TRACE=1`, printing the memory and leases after every operation).

use std::fs;

use cads_engine::fuzzing;
use cads_protocol::fuzzing::assert_corpora_pass;

#[test]
fn every_corpus_input_passes_the_fuzz_checks() {
    assert_corpora_pass(fuzzing::TARGETS, |target, data| {
        assert!(fuzzing::check_input(target, data), "known target {target}");
    });
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
