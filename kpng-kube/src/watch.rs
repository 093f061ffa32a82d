//! The API source: kube-runtime watchers for Services, EndpointSlices,
//! Nodes and ServiceCIDRs, feeding an [`Ingest`].

use futures::stream::{BoxStream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
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
}

// Each update is moved once, from the stream to `handle`: boxing would add
// an allocation per event for no saving.
#[allow(clippy::large_enum_variant)]
enum Update {
    Service(Event<objects::Service>),
    Slice(Event<objects::EndpointSlice>),
    Node(Event<objects::Node>),
    ServiceCidr(Event<objects::ServiceCidr>),
    Error(&'static str, watcher::Error),
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
    watcher(api, config)
        .default_backoff()
        .map(move |item| match item {
            Ok(event) => wrap(event),
            Err(e) => Update::Error(kind, e),
        })
        .boxed()
}

/// Watches the API through `client` and feeds `ingest`, which it owns,
/// until the task is dropped: `tokio::spawn(watch::run(client, ingest,
/// config))`, after taking the ingest's reader. Readers see the store
/// close when the task ends.
///
/// Each kind is watched with kube-runtime's `watcher` and its default
/// backoff. Every (re)list, after a reconnect or a `410 Gone`, is applied
/// as one transaction when it completes; each kind is marked synced after
/// its first complete list. Errors are logged and retried: they never end
/// the watch.
pub async fn run(client: kube::Client, mut ingest: Ingest, config: WatchConfig) {
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
    while let Some(update) = updates.next().await {
        handle(&mut ingest, update, &mut unserved);
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

fn handle(ingest: &mut Ingest, update: Update, unserved: &mut Unserved) {
    match update {
        Update::Service(event) => apply(ingest, "Service", &event),
        Update::Slice(event) => apply(ingest, "EndpointSlice", &event),
        Update::Node(event) => apply(ingest, "Node", &event),
        Update::ServiceCidr(event) => apply(ingest, "ServiceCIDR", &event),
        Update::Error(kind, error) if unserved.note(kind, &error) => {
            tracing::debug!(kind, %error, "not served; retrying with backoff");
        }
        Update::Error(kind, error) => {
            tracing::warn!(kind, %error, "watch error; retrying with backoff");
        }
    }
}

/// One event into the ingest; a completed list is logged.
fn apply<K: crate::Watched>(ingest: &mut Ingest, kind: &str, event: &Event<K>) {
    let revision = ingest.apply_watcher_event(event);
    if let Event::InitDone = event {
        log_relist(kind, revision);
    }
}

fn log_relist(kind: &str, revision: Option<u64>) {
    tracing::info!(kind, ?revision, "list complete");
}
