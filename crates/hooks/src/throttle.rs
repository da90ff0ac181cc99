//! Enforcing a hook's `settings` (executionMinInterval / executionBurst).

use std::time::Duration;

use tokio::time::Instant;

use crate::config::ThrottleSettings;

/// A token bucket: `execution_burst` tokens, one refilled per
/// `execution_min_interval`. The queue worker that runs a hook's tasks
/// keeps one per hook and asks [`Throttle::try_acquire`] before each run
/// (handing the task back to its queue until then).
///
/// Written by hand because it is a dozen lines and must use tokio's clock
/// (so tests run on paused time); rate-limiter crates bring their own.
#[derive(Debug)]
pub struct Throttle {
    settings: ThrottleSettings,
    available: u32,
    /// When the last token was credited (or the bucket was last full).
    refilled_at: Instant,
}

impl Throttle {
    /// A full bucket: the first `execution_burst` runs go straight through.
    pub fn new(settings: ThrottleSettings) -> Self {
        let burst = settings.execution_burst.max(1);
        Self {
            settings: ThrottleSettings {
                execution_burst: burst,
                ..settings
            },
            available: burst,
            refilled_at: Instant::now(),
        }
    }

    /// Takes a token when a run may start now; otherwise says how long until one may.
    pub fn try_acquire(&mut self) -> Result<(), Duration> {
        let interval = self.settings.execution_min_interval;
        if interval.is_zero() {
            return Ok(());
        }
        self.refill();
        if self.available > 0 {
            self.available -= 1;
            return Ok(());
        }
        Err((self.refilled_at + interval).saturating_duration_since(Instant::now()))
    }

    /// Waits until a run may start and takes a token. Cancel-safe: dropping
    /// the future before it completes takes nothing.
    pub async fn acquire(&mut self) {
        while let Err(wait) = self.try_acquire() {
            tokio::time::sleep(wait).await;
        }
    }

    fn refill(&mut self) {
        let interval = self.settings.execution_min_interval;
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.refilled_at);
        let earned = u32::try_from(elapsed.as_nanos() / interval.as_nanos()).unwrap_or(u32::MAX);
        if earned == 0 {
            return;
        }
        self.available = self
            .available
            .saturating_add(earned)
            .min(self.settings.execution_burst);
        self.refilled_at = if self.available == self.settings.execution_burst {
            now
        } else {
            self.refilled_at + interval * earned
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(interval_secs: u64, burst: u32) -> Throttle {
        Throttle::new(ThrottleSettings {
            execution_min_interval: Duration::from_secs(interval_secs),
            execution_burst: burst,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn burst_then_one_per_interval() {
        let mut t = throttle(10, 2);
        let start = Instant::now();
        t.acquire().await;
        t.acquire().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "burst of two is immediate");
        t.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        t.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_refills_up_to_burst_only() {
        let mut t = throttle(5, 2);
        t.acquire().await;
        t.acquire().await;
        tokio::time::advance(Duration::from_secs(60)).await;
        let start = Instant::now();
        t.acquire().await;
        t.acquire().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        t.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn try_acquire_says_how_long_until_the_next_token() {
        let mut t = throttle(10, 1);
        assert_eq!(t.try_acquire(), Ok(()));
        assert_eq!(t.try_acquire(), Err(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(t.try_acquire(), Err(Duration::from_secs(6)));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(t.try_acquire(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_interval_never_waits() {
        let mut t = throttle(0, 1);
        let start = Instant::now();
        for _ in 0..100 {
            t.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
