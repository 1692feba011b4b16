//! Replays the committed corpus of the `request_parser` fuzz target (`fuzz/corpus/request_parser/`)
//! through the checks the cargo-fuzz target runs (`cads_protocol::fuzzing`, compiled for this test
//! by the `fuzzing` feature), on stable Rust, so that CI keeps every input the fuzzer found
//! (`regression-*`) fixed without nightly or cargo-fuzz.

use cads_protocol::fuzzing::{check_request_bytes, corpus_dir, replay_corpus, REQUEST_PARSER};

#[test]
fn every_request_parser_input_passes_the_fuzz_checks() {
    let (count, failures) = replay_corpus(&corpus_dir(REQUEST_PARSER), check_request_bytes);
    assert!(count > 0, "fuzz/corpus/{REQUEST_PARSER}/ has inputs");
    assert!(
        failures.is_empty(),
        "{} of {count} corpus inputs fail (the panics are printed above):\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{count} corpus inputs pass");
}
