//! Retry delays for failed tasks.
//!
//! Exponential with *equal jitter*: the un-jittered delay is `base · 2^(attempts-1)` capped at
//! `max`; the answer is half of it plus a uniformly random share of the other half. Equal jitter
//! (rather than full jitter) keeps a floor of half the delay, so a task that keeps failing cannot
//! be retried in a tight loop by an unlucky draw, while retries of many tasks that failed together
//! still spread out.

use std::time::Duration;

use rand::Rng;

/// The retry policy of the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The un-jittered delay after the `attempts`-th failure (1 for the first failure).
    pub fn ceiling(&self, attempts: i64) -> Duration {
        // 2^30 · base overflows nothing useful; the cap has long applied by then.
        let exponent = attempts.saturating_sub(1).clamp(0, 30) as u32;
        let grown = self.base.saturating_mul(1u32 << exponent);
        grown.min(self.max)
    }

    /// The delay to wait after the `attempts`-th failure, jittered.
    pub fn delay(&self, attempts: i64) -> Duration {
        let ceiling = self.ceiling(attempts);
        let half = ceiling / 2;
        let spread = ceiling.saturating_sub(half).as_millis() as u64;
        half + Duration::from_millis(rand::rng().random_range(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Backoff {
        Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        }
    }

    #[test]
    fn ceiling_doubles_then_caps() {
        let p = policy();
        let got: Vec<u128> = (1..=6).map(|a| p.ceiling(a).as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.ceiling(i64::MAX), Duration::from_secs(1));
        assert_eq!(p.ceiling(0), Duration::from_millis(100));
    }

    #[test]
    fn delay_stays_between_half_and_ceiling() {
        let p = policy();
        for attempts in 1..=8 {
            let ceiling = p.ceiling(attempts);
            for _ in 0..50 {
                let d = p.delay(attempts);
                assert!(
                    d >= ceiling / 2 && d <= ceiling,
                    "attempt {attempts}: {d:?} vs {ceiling:?}"
                );
            }
        }
    }
}
