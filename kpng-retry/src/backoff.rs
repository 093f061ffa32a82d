//! [`Backoff`]: exponential, capped, jittered delays between retries.

use std::time::Duration;

/// The first delay of [`Backoff::kube`]: kube-runtime's watcher default.
pub const KUBE_FIRST: Duration = Duration::from_millis(800);
/// The longest delay of [`Backoff::kube`]: kube-runtime's watcher default.
pub const KUBE_MAX: Duration = Duration::from_secs(30);

/// Delays between retries: exponential from `first` (doubling), capped at
/// `max`, each drawn at random between half of its step and all of it, so
/// processes cut off together (agents of one server, say) do not come
/// back together. [`reset`](Self::reset) after a success.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Delays from `first` up to `max` (at least `first`).
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max: max.max(first),
            next: first,
        }
    }

    /// kube-runtime's watcher default (client-go's reflector): from 800 ms,
    /// doubling, up to 30 s, jittered. The API source retries with it.
    pub fn kube() -> Self {
        Self::new(KUBE_FIRST, KUBE_MAX)
    }

    /// The delay the next [`next_delay`](Self::next_delay) is drawn
    /// below (it doubles after each draw, up to the cap).
    pub fn step(&self) -> Duration {
        self.next
    }

    /// Starts over from the first delay.
    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// The next delay: uniform in [d/2, d] for the current step d, which
    /// then doubles up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.max);
        let half = step / 2;
        let span = u64::try_from((step - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(random_u64() % span.saturating_add(1))
    }
}

/// A random number from the standard library's per-process hash keys
/// and the clock: enough for jitter, no dependency.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_with_jitter_and_reset() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(100), ms(1000));
        let mut seen = Vec::new();
        for step in [100, 200, 400, 800, 1000, 1000] {
            let delay = backoff.next_delay();
            assert!(
                delay >= ms(step / 2) && delay <= ms(step),
                "{delay:?} for {step}"
            );
            seen.push(delay);
        }
        backoff.reset();
        assert!(backoff.next_delay() <= ms(100));
        // Jitter: 200 draws from [500, 1000] ms are not all equal.
        let mut capped = Backoff::new(ms(1000), ms(1000));
        let draws: std::collections::BTreeSet<Duration> =
            (0..200).map(|_| capped.next_delay()).collect();
        assert!(draws.len() > 10, "{} distinct delays", draws.len());
    }

    #[test]
    fn kube_delays_grow_from_800ms_to_30s_jittered_and_reset() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::kube();
        // 800 ms doubling: 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, then 30 s.
        let steps = [
            800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000, 30_000,
        ];
        for step in steps {
            assert_eq!(backoff.step(), ms(step));
            let delay = backoff.next_delay();
            assert!(
                delay >= ms(step / 2) && delay <= ms(step),
                "{delay:?} for {step}"
            );
        }
        backoff.reset();
        assert_eq!(backoff.step(), ms(800));
        assert!(backoff.next_delay() <= ms(800));
        // Jittered: retries of many clients do not line up.
        let draws: std::collections::BTreeSet<Duration> =
            (0..100).map(|_| Backoff::kube().next_delay()).collect();
        assert!(draws.len() > 10, "{} distinct delays", draws.len());
        assert!(draws.iter().all(|d| *d >= ms(400) && *d <= ms(800)));
    }
}
