//! A client's byte stream through the request parser (consume, go on), each request through
//! `Command::parse` and back through `to_args`; the same bytes through the reply parser.
//! The checks live in `cads_protocol::fuzzing` so that the corpus replays on stable too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cads_protocol::fuzzing::check_request_bytes(data);
});
