//! Arbitrary bytes as an append-only log file: replay must report, never panic, and a restored
//! state must survive a rewrite unchanged.
//! The checks live in `cads_engine::fuzzing` so that the corpus replays on stable too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cads_engine::fuzzing::check_log_replay(data);
});
