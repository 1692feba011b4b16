//! Byte-decoded sequences of commands, clock advances, log rewrites and restarts on one engine with
//! small memory limits; invariants after every step, the log's replay compared with the live state.
//! The checks live in `cads_engine::fuzzing` so that the corpus replays on stable too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cads_engine::fuzzing::check_engine_ops(data);
});
