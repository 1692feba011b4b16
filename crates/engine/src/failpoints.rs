//! Failpoints of the engine: named places where a test makes a CMI misbehave, to show that the
//! checks built to catch such a CMI do. Compiled in only with the `failpoints` cargo feature,
//! which the test kit turns on and release builds never do; without it each point is a constant
//! that costs nothing. Configured process-wide through the `fail` crate, like `cads::failpoints`.
//!
//! | point | where | what `return` does |
//! | --- | --- | --- |
//! | [`FILL_AFTER_VOID`] | a fill whose lease a writer voided: an `IQSET` after a Q lease took the I lease, or a write-around `LSET` of a reader a writer wounded (or whose lease expired) | stores the fill anyway: a broken IQ server (000 §4.4.2.2), which keeps a value read before a write that committed after the read |

/// A fill whose I or S lease a writer voided is stored anyway.
pub const FILL_AFTER_VOID: &str = "engine::fill-after-void";

/// Whether a fill whose lease was voided is to be stored anyway ([`FILL_AFTER_VOID`]).
#[inline(always)]
pub(crate) fn fill_after_void() -> bool {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(FILL_AFTER_VOID, |_| true);
    false
}
