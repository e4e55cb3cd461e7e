//! Capped exponential backoff with jitter, for retryable failures and rescued leases.
//!
//! Jitter spreads retries of many tasks that failed together (a database blip, a full disk) so they do
//! not all come back in the same millisecond.

use std::time::Duration;

/// `base * 2^(attempt-1)`, capped, then scaled by a random factor in `1 ± jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Fraction of the delay that is random, between 0 and 1.
    pub jitter: f64,
}

/// First retry after about a second.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// No retry waits more than about ten minutes.
pub const DEFAULT_BACKOFF_CAP: Duration = Duration::from_secs(600);
/// Up to 20% either way.
pub const DEFAULT_BACKOFF_JITTER: f64 = 0.2;

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: DEFAULT_BACKOFF_BASE,
            cap: DEFAULT_BACKOFF_CAP,
            jitter: DEFAULT_BACKOFF_JITTER,
        }
    }
}

impl Backoff {
    /// The delay in milliseconds before the attempt after `attempt` (1-based) may start.
    pub fn delay_millis(&self, attempt: i64) -> i64 {
        self.delay_with(attempt, rand::random::<f64>())
    }

    /// The delay for a given random draw in [0, 1), so tests can pin it.
    pub fn delay_with(&self, attempt: i64, draw: f64) -> i64 {
        let exponent = attempt.saturating_sub(1).clamp(0, 30) as u32;
        let base = self.base.as_millis() as f64 * f64::from(2u32.saturating_pow(exponent).max(1));
        let capped = base.min(self.cap.as_millis() as f64);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter + 2.0 * jitter * draw.clamp(0.0, 1.0);
        (capped * factor).round() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_then_caps() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            jitter: 0.0,
        };
        let delays: Vec<i64> = (1..=8).map(|a| b.delay_with(a, 0.5)).collect();
        assert_eq!(delays, [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]);
        assert_eq!(b.delay_with(0, 0.5), 1000);
        assert_eq!(b.delay_with(10_000, 0.5), 60000);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let b = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(60),
            jitter: 0.2,
        };
        assert_eq!(b.delay_with(1, 0.0), 8000);
        assert_eq!(b.delay_with(1, 1.0), 12000);
        for _ in 0..100 {
            let d = b.delay_millis(1);
            assert!((8000..=12000).contains(&d), "{d}");
        }
    }
}
