//! What the TARDIS tests share: CMIs in the lease mode TARDIS needs, a change whose log shows
//! the order writes landed in, and a wait for an AppNode's mode.

use std::time::Duration;

use cads::{Cads, Mode, Policy};
use cads_store::Changes;
use serde_json::json;

use super::{changes, Deployment};

/// Two CMIs in write-through lease mode, as TARDIS needs under both policies.
pub fn deployment(policy: Policy) -> Deployment {
    Deployment::start_with(policy, 2, |o| o.mode = Some("write-through".into()))
}

/// `$inc` of `n` by `by`, and `by` pushed onto `log`.
pub fn inc(by: i64) -> Changes {
    changes(json!({"$inc": {"n": by}, "$push": {"log": by}}))
}

/// Waits (for a long bound, so that a slow machine does not fail it) until `cads` is in `mode`.
pub fn wait_for(cads: &Cads, mode: Mode) {
    let what = || {
        format!(
            "still {:?} instead of {mode:?}: {:?}",
            cads.mode(),
            cads.tardis_counts()
        )
    };
    super::wait_until(Duration::from_secs(120), what, || cads.mode() == Some(mode));
}
