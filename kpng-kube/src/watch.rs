//! The API source: kube-runtime watchers for Services, EndpointSlices,
//! Nodes and ServiceCIDRs, feeding an [`Ingest`].

use std::time::Duration;

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
/// (800 ms doubling to 30 s, jittered), reset by progress only. (kube's
/// own `default_backoff` resets on every item, and the watcher yields an
/// `Init` before each list attempt, so against an unreachable server it
/// retried about once a second for ever.)
struct Retry {
    backoff: Backoff,
    failed: u32,
}

impl Retry {
    fn new() -> Self {
        Self {
            backoff: Backoff::kube(),
            failed: 0,
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

    /// A failure: the attempt's number in a row and the wait before the
    /// next.
    fn failure(&mut self) -> (u32, Duration) {
        self.failed = self.failed.saturating_add(1);
        (self.failed, self.backoff.next_delay())
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
    let events = watcher(api, config).boxed();
    futures::stream::unfold(
        (events, Retry::new(), None::<Duration>),
        move |(mut events, mut retry, wait)| async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            let (update, wait) = match events.next().await? {
                Ok(event) => {
                    retry.event(&event);
                    (wrap(event), None)
                }
                Err(error) => {
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
}
