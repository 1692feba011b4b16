//! Replays the committed corpus of the `request_parser` fuzz target (`fuzz/corpus/request_parser/`)
//! through the checks the cargo-fuzz target runs (`cads_protocol::fuzzing`, compiled for this test
//! by the `fuzzing` feature), on stable Rust, so that CI keeps every input the fuzzer found
//! (`regression-*`) fixed without nightly or cargo-fuzz.

use cads_protocol::fuzzing::{assert_corpora_pass, check_request_bytes, REQUEST_PARSER};

#[test]
fn every_request_parser_input_passes_the_fuzz_checks() {
    assert_corpora_pass(&[REQUEST_PARSER], |_, data| check_request_bytes(data));
}
