//! Instance liveness (004 §2.1): each instance holds a lease that it renews; one that lets its
//! lease run out has failed, and one that renews again has come back. Without a clock: the
//! coordinator's service passes the time in milliseconds of a monotonic clock, and turns what this
//! reports into [`Configuration`](crate::configuration::Configuration) events.

use crate::configuration::InstanceId;

/// What a renewal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The instance was alive: its lease runs on.
    Renewed,
    /// The instance had been reported failed: it is back.
    Returned,
}

/// The instances' leases.
#[derive(Clone, Debug)]
pub struct Liveness {
    lease_ms: u64,
    /// Per instance: when its lease runs out, and whether it was reported failed.
    until_ms: Vec<u64>,
    failed: Vec<bool>,
}

impl Liveness {
    /// `instances` instances, all alive with a fresh lease of `lease_ms` at `now_ms`.
    pub fn new(instances: usize, lease_ms: u64, now_ms: u64) -> Liveness {
        assert!(lease_ms > 0, "a lease lasts");
        Liveness {
            lease_ms,
            until_ms: vec![now_ms.saturating_add(lease_ms); instances],
            failed: vec![false; instances],
        }
    }

    /// The instance renews its lease at `now_ms`. None for an unknown instance.
    pub fn renew(&mut self, instance: InstanceId, now_ms: u64) -> Option<Renewal> {
        let until = self.until_ms.get_mut(instance)?;
        *until = now_ms.saturating_add(self.lease_ms);
        Some(match std::mem::take(&mut self.failed[instance]) {
            true => Renewal::Returned,
            false => Renewal::Renewed,
        })
    }

    /// Takes `instance` as failed without waiting for its lease (a restarted coordinator's
    /// saved configuration says it is down): it returns when it renews.
    pub fn mark_failed(&mut self, instance: InstanceId) {
        if let Some(failed) = self.failed.get_mut(instance) {
            *failed = true;
        }
    }

    /// The instances whose lease ran out by `now_ms` and that were not reported yet: each is
    /// reported once, until it renews again.
    pub fn expired(&mut self, now_ms: u64) -> Vec<InstanceId> {
        let mut expired = Vec::new();
        for (i, &until) in self.until_ms.iter().enumerate() {
            if !self.failed[i] && now_ms >= until {
                self.failed[i] = true;
                expired.push(i);
            }
        }
        expired
    }

    /// Whether the instance is taken for alive (not reported failed).
    pub fn is_alive(&self, instance: InstanceId) -> bool {
        self.failed.get(instance).is_some_and(|f| !f)
    }

    /// When the next lease runs out, for the service to wake then (None: every instance failed).
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.until_ms
            .iter()
            .zip(&self.failed)
            .filter(|(_, &failed)| !failed)
            .map(|(&until, _)| until)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_instance_fails_once_and_returns_when_it_renews() {
        let mut l = Liveness::new(3, 1_000, 0);
        assert_eq!(l.expired(999), Vec::<usize>::new());
        assert_eq!(l.renew(0, 500), Some(Renewal::Renewed));
        assert_eq!(l.renew(2, 900), Some(Renewal::Renewed));
        assert_eq!(l.next_expiry_ms(), Some(1_000), "instance 1's");
        assert_eq!(l.expired(1_000), vec![1]);
        assert_eq!(l.expired(1_200), Vec::<usize>::new(), "reported once");
        assert!(!l.is_alive(1));
        assert_eq!(l.expired(1_900), vec![0, 2]);
        assert_eq!(l.next_expiry_ms(), None);
        assert_eq!(l.renew(1, 2_000), Some(Renewal::Returned));
        assert!(l.is_alive(1));
        assert_eq!(l.renew(1, 2_100), Some(Renewal::Renewed));
        assert_eq!(l.expired(3_099), Vec::<usize>::new());
        assert_eq!(l.expired(3_100), vec![1]);
        assert_eq!(l.renew(7, 0), None);
        assert!(!l.is_alive(7));
    }
}
