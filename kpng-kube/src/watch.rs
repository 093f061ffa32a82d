//! The API source: kube-runtime watchers for Services, EndpointSlices,
//! Nodes and ServiceCIDRs, feeding an [`Ingest`].

use std::time::{Duration, Instant};

use futures::stream::{BoxStream, StreamExt};
use kpng_retry::{Backoff, one_line};
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher};

use crate::Ingest;
use crate::objects;

/// Which Nodes to watch.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum NodeScope {
    /// Only the named node (a node-local proxy: kube-proxy does the same,
    /// so other nodes' status heartbeats never reach it).
    Only(String),
    /// Every node (a server that serves many nodes).
    #[default]
    All,
}

/// Settings of the API source.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct WatchConfig {
    /// Which Nodes to watch.
    pub nodes: NodeScope,
    /// Use streaming lists (`sendInitialEvents`). Needs the server's
    /// WatchList feature, with no fallback: opt in only where it is on.
    pub streaming_lists: bool,
    /// The API server's URL, named in every retry line and error.
    pub server: String,
    /// Give up after this many failed attempts in a row of one kind
    /// (`--once`: a one-shot run must end); `None`: retry for ever.
    pub give_up_after: Option<u32>,
}

// Each update is moved once, from the stream to `handle`: boxing would add
// an allocation per event for no saving.
#[allow(clippy::large_enum_variant)]
enum Update {
    Service(Event<objects::Service>),
    Slice(Event<objects::EndpointSlice>),
    Node(Event<objects::Node>),
    ServiceCidr(Event<objects::ServiceCidr>),
    Error(Failed),
}

/// A failed attempt of one kind's watch.
struct Failed {
    kind: &'static str,
    error: watcher::Error,
    /// Failed attempts in a row of this kind, this one included.
    attempt: u32,
    /// The wait before the next attempt.
    delay: Duration,
}

/// The retry state of one kind's watch: kube-runtime's default backoff
/// (800 ms doubling to 30 s, jittered), reset by progress, or when the
/// last failure is [`QUIET_RESET`] old. (kube's own `default_backoff`
/// resets on every item, and the watcher yields an `Init` before each
/// list attempt, so against an unreachable server it retried about once a
/// second for ever.)
struct Retry {
    backoff: Backoff,
    failed: u32,
    /// When the last failure was.
    last_failure: Option<Instant>,
}

/// A watch that has not failed for this long starts its backoff over, as
/// kube-runtime's default backoff and client-go's reflector do (2
/// minutes): a kind whose watch resumed but brought no event since (the
/// Nodes of a quiet cluster) would otherwise keep the delay its last
/// outage grew for the next one.
const QUIET_RESET: Duration = Duration::from_secs(120);

impl Retry {
    fn new() -> Self {
        Self {
            backoff: Backoff::kube(),
            failed: 0,
            last_failure: None,
        }
    }

    /// An event: anything but the `Init` that opens a list attempt is
    /// progress (a listed object, the list's end, a watch event).
    fn event<K>(&mut self, event: &Event<K>) {
        if !matches!(event, Event::Init) {
            self.backoff.reset();
            self.failed = 0;
        }
    }

    /// The server answered (a `410 Gone`): the backoff starts over, so
    /// the list that follows waits the first step only.
    fn answered(&mut self) {
        self.backoff.reset();
        self.failed = 0;
    }

    /// A failure: the attempt's number in a row and the wait before the
    /// next.
    fn failure(&mut self) -> (u32, Duration) {
        self.failure_at(Instant::now())
    }

    /// [`failure`](Self::failure) at `now`.
    fn failure_at(&mut self, now: Instant) -> (u32, Duration) {
        if self
            .last_failure
            .is_some_and(|at| now.saturating_duration_since(at) >= QUIET_RESET)
        {
            self.backoff.reset();
            self.failed = 0;
        }
        self.last_failure = Some(now);
        self.failed = self.failed.saturating_add(1);
        (self.failed, self.backoff.next_delay())
    }
}

/// Whether `error` says that the resourceVersion a watch resumed from is
/// gone (`410 Gone`) in a form after which kube-runtime's watcher would
/// resume from it again: answered to the watch request itself (an HTTP
/// `410`), or as a bare Status line in its stream. kube-runtime 5.0 keeps
/// the version after any failure to start a watch, so it would retry that
/// version for ever and never list again: the store would keep what
/// changed while it was away (stale endpoints, deleted Services, none of
/// the new ones). A `410` sent as an ERROR event in the stream makes the
/// watcher list again by itself.
fn expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// Whether `error` is a `410 Gone` in any form: the server is there and
/// answers, the client must list again.
fn gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        other => expired(other),
    }
}

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    wrap: fn(Event<K>) -> Update,
) -> BoxStream<'static, Update>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    // A new watcher starts with a list, as client-go's reflector lists
    // again after a `410` on a watch's start.
    let start = move || watcher(api.clone(), config.clone()).boxed();
    let events = start();
    futures::stream::unfold(
        (events, Retry::new(), None::<Duration>),
        move |(mut events, mut retry, wait)| {
            let start = start.clone();
            async move {
                if let Some(wait) = wait {
                    tokio::time::sleep(wait).await;
                }
                let (update, wait) = match events.next().await? {
                    Ok(event) => {
                        retry.event(&event);
                        (wrap(event), None)
                    }
                    Err(error) => {
                        if expired(&error) {
                            tracing::info!(
                                kind,
                                "the API server no longer has the version this watch resumed from \
                             (410 Gone): listing again"
                            );
                            events = start();
                        }
                        if gone(&error) {
                            // The server answered: it is back. List again
                            // after the first step, not after the delay an
                            // outage before grew.
                            retry.answered();
                        }
                        let (attempt, delay) = retry.failure();
                        let failed = Failed {
                            kind,
                            error,
                            attempt,
                            delay,
                        };
                        (Update::Error(failed), Some(delay))
                    }
                };
                Some((update, (events, retry, wait)))
            }
        },
    )
    .boxed()
}

/// Watches the API through `client` and feeds `ingest`, which it owns,
/// until the task is dropped: `tokio::spawn(watch::run(client, ingest,
/// config))`, after taking the ingest's reader. Readers see the store
/// close when the task ends.
///
/// Each kind is watched with kube-runtime's `watcher`, retried with
/// kube-runtime's default backoff (800 ms doubling to 30 s, jittered),
/// reset only by progress. Every (re)list, after a reconnect or a
/// `410 Gone`, is applied as one transaction when it completes; each kind
/// is marked listed after its first complete list.
///
/// Each failed attempt is one log line naming the server, the kind, the
/// whole cause, the attempt and the wait: the first of a failure at
/// warning level, the same failure again (of any kind) at info level, and
/// one line at info level when the watch comes back.
///
/// # Errors
/// With [`WatchConfig::give_up_after`], [`Error::Unreachable`](crate::Error::Unreachable) when one
/// kind failed that many times in a row; otherwise it never returns.
pub async fn run(
    client: kube::Client,
    mut ingest: Ingest,
    config: WatchConfig,
) -> crate::Result<()> {
    run_on(client, &mut ingest, config).await
}

/// [`run`] on a borrowed ingest: its readers see the store open until the
/// caller drops it (after reading the error that ended the watch, say).
///
/// # Errors
/// As [`run`].
pub async fn run_on(
    client: kube::Client,
    ingest: &mut Ingest,
    config: WatchConfig,
) -> crate::Result<()> {
    let mut base = watcher::Config::default();
    if config.streaming_lists {
        base = base.streaming_lists();
    }
    let nodes_config = match &config.nodes {
        NodeScope::Only(name) => base.clone().fields(&format!("metadata.name={name}")),
        NodeScope::All => base.clone(),
    };
    let streams = vec![
        watch(
            Api::<objects::Service>::all(client.clone()),
            base.clone(),
            "Service",
            Update::Service,
        ),
        watch(
            Api::<objects::EndpointSlice>::all(client.clone()),
            base.clone(),
            "EndpointSlice",
            Update::Slice,
        ),
        watch(
            Api::<objects::Node>::all(client.clone()),
            nodes_config,
            "Node",
            Update::Node,
        ),
        watch(
            Api::<objects::ServiceCidr>::all(client),
            base,
            "ServiceCIDR",
            Update::ServiceCidr,
        ),
    ];
    let mut updates = futures::stream::select_all(streams);
    let mut unserved = Unserved::default();
    let mut failures = Failures::new(&config);
    while let Some(update) = updates.next().await {
        handle(ingest, update, &mut unserved, &mut failures)?;
    }
    Ok(())
}

/// What is said of failed attempts: which kinds are failing, and the
/// cause last said at warning level.
struct Failures {
    server: String,
    give_up_after: Option<u32>,
    failing: Vec<(&'static str, u32)>,
    warned: Option<String>,
}

impl Failures {
    fn new(config: &WatchConfig) -> Self {
        Self {
            server: config.server.clone(),
            give_up_after: config.give_up_after,
            failing: Vec::new(),
            warned: None,
        }
    }

    /// Logs a failed attempt; the error when it is the last allowed.
    fn failed(&mut self, failed: &Failed) -> crate::Result<()> {
        let cause = one_line(&failed.error);
        match self.failing.iter_mut().find(|(k, _)| *k == failed.kind) {
            Some((_, count)) => *count = failed.attempt,
            None => self.failing.push((failed.kind, failed.attempt)),
        }
        let (server, kind, attempt) = (&self.server, failed.kind, failed.attempt);
        if self.give_up_after.is_some_and(|n| attempt >= n) {
            return Err(crate::Error::Unreachable {
                server: server.clone(),
                kind,
                attempts: attempt,
                cause,
            });
        }
        let delay = format!("{:.1}s", failed.delay.as_secs_f64());
        if self.warned.as_deref() == Some(cause.as_str()) {
            tracing::info!(
                "cannot watch {kind}s at {server}: {cause} (attempt {attempt}; retrying in {delay})"
            );
        } else {
            tracing::warn!(
                "cannot watch {kind}s at {server}: {cause} (attempt {attempt}; retrying in \
                 {delay}; later attempts failing alike are logged at info level)"
            );
            self.warned = Some(cause);
        }
        Ok(())
    }

    /// Progress of `kind`: a watch that was failing is back.
    fn progress(&mut self, kind: &str) {
        let Some(at) = self.failing.iter().position(|(k, _)| *k == kind) else {
            return;
        };
        let (_, attempts) = self.failing.swap_remove(at);
        tracing::info!(
            "watching {kind}s at {} again after {attempts} failed attempts",
            self.server
        );
        if self.failing.is_empty() {
            self.warned = None;
        }
    }
}

/// Kinds the API server answered `404 Not Found` for, each logged once at
/// warning level: ServiceCIDRs before Kubernetes 1.33, or with
/// `networking.k8s.io/v1` turned off.
#[derive(Default)]
struct Unserved(Vec<&'static str>);

impl Unserved {
    /// Whether `error` says the resource is not served; the first time
    /// for a kind, logs what that means.
    fn note(&mut self, kind: &'static str, error: &watcher::Error) -> bool {
        let status = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code,
            watcher::Error::WatchError(s) => s.code,
            _ => return false,
        };
        if status != 404 {
            return false;
        }
        if !self.0.contains(&kind) {
            self.0.push(kind);
            tracing::warn!(
                kind,
                "the API server does not serve this kind (404); the drop of unallocated \
                 Service IPs follows --service-cidr only; retrying with backoff"
            );
        }
        true
    }
}

fn handle(
    ingest: &mut Ingest,
    update: Update,
    unserved: &mut Unserved,
    failures: &mut Failures,
) -> crate::Result<()> {
    match update {
        Update::Service(event) => apply(ingest, failures, "Service", &event),
        Update::Slice(event) => apply(ingest, failures, "EndpointSlice", &event),
        Update::Node(event) => apply(ingest, failures, "Node", &event),
        Update::ServiceCidr(event) => apply(ingest, failures, "ServiceCIDR", &event),
        Update::Error(failed) if unserved.note(failed.kind, &failed.error) => {
            tracing::debug!(kind = failed.kind, error = %failed.error, "not served; retrying with backoff");
        }
        Update::Error(failed) => failures.failed(&failed)?,
    }
    Ok(())
}

/// One event into the ingest; a completed list is logged.
fn apply<K: crate::Watched>(
    ingest: &mut Ingest,
    failures: &mut Failures,
    kind: &str,
    event: &Event<K>,
) {
    if !matches!(event, Event::Init) {
        failures.progress(kind);
    }
    let revision = ingest.apply_watcher_event(event);
    if let Event::InitDone = event {
        log_relist(kind, revision);
    }
}

fn log_relist(kind: &str, revision: Option<u64>) {
    tracing::info!(kind, ?revision, "list complete");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against an unreachable server the watcher yields `Init`, then the
    /// list's error, again and again: the `Init` is no progress, so the
    /// delays grow (kube's `default_backoff` reset on it: ~1 s for ever).
    #[test]
    fn retries_back_off_through_list_attempts_and_reset_on_progress() {
        let ms = Duration::from_millis;
        let mut retry = Retry::new();
        let mut delays = Vec::new();
        for _ in 0..8 {
            retry.event(&Event::<objects::Service>::Init);
            let (attempt, delay) = retry.failure();
            assert_eq!(attempt, u32::try_from(delays.len() + 1).expect("small"));
            delays.push(delay);
        }
        // 800 ms doubling to 30 s, each drawn in [step/2, step].
        for (delay, step) in delays
            .iter()
            .zip([800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000])
        {
            assert!(
                *delay >= ms(step / 2) && *delay <= ms(step),
                "{delay:?} for {step}"
            );
        }
        // A listed object is progress: the next failure starts over.
        retry.event(&Event::InitApply(objects::Service::default()));
        let (attempt, delay) = retry.failure();
        assert_eq!(attempt, 1);
        assert!(delay <= ms(800));
    }

    /// A watch that came back but brought no event (a quiet kind) starts
    /// over once its last failure is two minutes old, as kube-runtime's
    /// and client-go's backoffs do; not before.
    #[test]
    fn a_quiet_watch_starts_its_backoff_over_after_two_minutes_without_failure() {
        let t0 = Instant::now();
        let mut retry = Retry::new();
        for k in 0..5 {
            retry.failure_at(t0 + Duration::from_secs(k));
        }
        let (attempt, delay) = retry.failure_at(t0 + Duration::from_secs(60));
        assert_eq!(attempt, 6, "a minute later: still the same outage");
        assert!(delay >= Duration::from_secs(12), "{delay:?}");
        let (attempt, delay) = retry.failure_at(t0 + Duration::from_secs(60) + QUIET_RESET);
        assert_eq!(attempt, 1, "two quiet minutes later: a new outage");
        assert!(delay <= Duration::from_millis(800), "{delay:?}");
    }
}
