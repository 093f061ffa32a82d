//! Driving a sink from a store: startup gating, rate limiting, retries.

use std::time::Duration;

use kpng_model::Kind;
use kpng_sink::{Sink, SinkError};
use kpng_store::Reader;
use tokio::time::Instant;

use kpng_retry::Backoff;
use kpng_view::NodeProjector;

use crate::HoldStatus;

/// A token bucket that spaces syncs: at most `burst` syncs back to back,
/// then one per `min_interval` (kube-proxy's `--min-sync-period`, default
/// 1 s with a burst of 2). Revisions that arrive meanwhile are not queued:
/// the next sync takes the latest state, so a burst of revisions collapses
/// into one transaction. The one limiter every kpng-rs backend uses.
#[derive(Debug)]
pub struct SyncLimiter {
    min_interval: Duration,
    burst: u32,
    tokens: f64,
    last: Instant,
}

impl SyncLimiter {
    /// A limiter allowing `burst` syncs at once, then one per
    /// `min_interval`.
    pub fn new(min_interval: Duration, burst: u32) -> Self {
        let burst = burst.max(1);
        Self {
            min_interval,
            burst,
            tokens: f64::from(burst),
            last: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        if self.min_interval.is_zero() {
            self.tokens = f64::from(self.burst);
        } else {
            let gained = (now - self.last).as_secs_f64() / self.min_interval.as_secs_f64();
            self.tokens = (self.tokens + gained).min(f64::from(self.burst));
        }
        self.last = now;
    }

    /// Waits until a sync may run, and takes its token.
    pub async fn acquire(&mut self) {
        self.refill();
        if self.tokens < 1.0 {
            let wait = self.min_interval.mul_f64(1.0 - self.tokens);
            tokio::time::sleep(wait).await;
            self.refill();
        }
        self.tokens = (self.tokens - 1.0).max(0.0);
    }
}

/// Settings of [`drive`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DriveConfig {
    /// `--min-sync-period`: the spacing of syncs after a burst.
    pub min_sync_period: Duration,
    /// How many syncs may run back to back.
    pub burst: u32,
    /// The first retry delay after a failed sync; it doubles up to
    /// `max_retry`, each delay jittered ([`Backoff`]).
    pub retry: Duration,
    /// The longest retry delay.
    pub max_retry: Duration,
    /// Stop after the first successful sync.
    pub once: bool,
    /// Kinds that must be listed (initial lists complete) before anything
    /// is programmed.
    pub wait_for: Vec<Kind>,
    /// The hold of a [`Guarded`](crate::Guarded) sink: while one is in
    /// force, the input is re-checked (a full round) when it may be
    /// confirmed, even if no new revision came.
    pub hold: Option<HoldStatus>,
}

impl DriveConfig {
    /// Spaces syncs by `period` after a burst (`--min-sync-period`).
    #[must_use]
    pub fn min_sync_period(mut self, period: Duration) -> Self {
        self.min_sync_period = period;
        self
    }

    /// Lets `burst` syncs run back to back.
    #[must_use]
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// Retries a failed sync after `first`, doubling up to `max`.
    #[must_use]
    pub fn retry(mut self, first: Duration, max: Duration) -> Self {
        (self.retry, self.max_retry) = (first, max);
        self
    }

    /// Stops after the first successful sync when `once` holds.
    #[must_use]
    pub fn once(mut self, once: bool) -> Self {
        self.once = once;
        self
    }

    /// Programs nothing before these kinds' initial lists are complete.
    #[must_use]
    pub fn wait_for(mut self, kinds: impl IntoIterator<Item = Kind>) -> Self {
        self.wait_for = kinds.into_iter().collect();
        self
    }

    /// Re-checks the input when `hold` (a [`Guarded`](crate::Guarded)
    /// sink's) may be confirmed.
    #[must_use]
    pub fn hold(mut self, hold: HoldStatus) -> Self {
        self.hold = Some(hold);
        self
    }
}

impl Default for DriveConfig {
    fn default() -> Self {
        Self {
            min_sync_period: Duration::from_secs(1),
            burst: 2,
            retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(30),
            once: false,
            wait_for: vec![Kind::Service, Kind::Endpoint],
            hold: None,
        }
    }
}

/// Keeps `sink` in line with the node view of `projector`'s node, as the
/// store behind `reader` changes: waits for the initial lists, then syncs
/// each new revision (rate-limited; bursts collapse), retrying failures
/// with a jittered exponential [`Backoff`] and a full round. Returns after the first
/// successful sync with `once`, or when the store writer goes away.
///
/// The sink is called on this task; a sink that blocks (running `nft`,
/// say) should be driven from a multi-threaded runtime.
///
/// # Errors
/// With `once`, the error of a failed first sync (no retry); otherwise
/// only [`kpng_store::Error::Closed`]-like ends, reported as `Ok`.
pub async fn drive<S: Sink + ?Sized>(
    mut reader: Reader,
    projector: &mut NodeProjector,
    sink: &mut S,
    config: &DriveConfig,
) -> Result<(), SinkError> {
    if reader.listed(&config.wait_for).await.is_err() {
        return Ok(());
    }
    if config.once {
        // One round: the reader goes first, and the snapshot once the view
        // is made, so that the store's memory can go back before the sink
        // builds its batch (if the caller holds no other reader).
        let snapshot = reader.snapshot();
        drop(reader);
        return projector.sync_last(snapshot, sink).map(drop);
    }
    let mut limiter = SyncLimiter::new(config.min_sync_period, config.burst);
    let mut backoff = Backoff::new(config.retry, config.max_retry);
    loop {
        limiter.acquire().await;
        let snapshot = reader.snapshot();
        match projector.sync_into(&snapshot, sink) {
            Ok(_) => {
                backoff.reset();
                let recheck = config.hold.as_ref().and_then(HoldStatus::recheck_in);
                let newer = reader.newer_than(snapshot.revision());
                match recheck {
                    None => {
                        if newer.await.is_err() {
                            return Ok(());
                        }
                    }
                    // A held input may be confirmed then: the same
                    // snapshot again, whole (a round with no change sends
                    // nothing).
                    Some(wait) => match tokio::time::timeout(wait, newer).await {
                        Ok(Err(_)) => return Ok(()),
                        Ok(Ok(_)) => {}
                        Err(_) => projector.force_full(),
                    },
                }
            }
            Err(e) => {
                let retry = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?retry, "sync failed; retrying with a full sync");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn limiter_allows_a_burst_then_spaces_syncs() {
        let mut limiter = SyncLimiter::new(Duration::from_secs(1), 2);
        let start = Instant::now();
        limiter.acquire().await;
        limiter.acquire().await;
        assert!(start.elapsed() < Duration::from_millis(10), "burst of 2");
        limiter.acquire().await;
        let third = start.elapsed();
        assert!(
            third >= Duration::from_millis(990) && third < Duration::from_millis(1100),
            "{third:?}"
        );
        limiter.acquire().await;
        assert!(start.elapsed() >= Duration::from_millis(1990));
    }
}
