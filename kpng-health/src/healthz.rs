//! `/healthz` and `/livez`: [`ProxyHealth`] (the data plane's syncs, and
//! whether this node is going away), named readiness [`Conditions`], the
//! [`Healthy`] hook that feeds them from a backend's rounds, and
//! [`serve_healthz`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kpng_sink::{Hook, Round, SinkError};
use tokio::net::TcpListener;

use crate::http::{self, Reply};

#[derive(Debug)]
struct SyncState {
    timeout: Duration,
    last_sync: Option<(Instant, SystemTime)>,
    pending_since: Option<Instant>,
    /// This node is going away (KEP-3836).
    node_terminating: bool,
    /// Named reasons not to be ready.
    conditions: Conditions,
    /// Why the input is held back (a mass deletion), if it is.
    held_back: Option<String>,
}

/// Named reasons the proxy is not ready, each with why: while any is set,
/// `/healthz` (and `serviceProxyHealthy`) answers `503` and its body
/// lists them under `"conditions"`. `/livez` ignores them. Cloning shares
/// them; set and clear them from anywhere.
///
/// Beside them, named degradations ([`Conditions::set_degraded`]): the
/// proxy serves, from an input that is not whole (objects of a manifest
/// skipped), so `/healthz` stays `200` and its body lists them under
/// `"degraded"`. A load balancer that took this node out would drop
/// every Service for one bad object; kube-proxy's `/healthz` answers for
/// its rules being in sync, not for its input's objects.
///
/// ```
/// use std::time::Duration;
/// use kpng_health::{Conditions, ProxyHealth};
///
/// let conditions = Conditions::default();
/// let health = ProxyHealth::new(Duration::from_secs(60)).with_conditions(conditions.clone());
/// health.synced();
/// conditions.set("node", "no Node named node-c");
/// assert!(!health.healthy() && health.live());
/// conditions.clear("node");
/// assert!(health.healthy());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Conditions(
    Arc<Mutex<BTreeMap<String, String>>>,
    Arc<Mutex<BTreeMap<String, String>>>,
);

impl Conditions {
    /// Sets (or replaces) degradation `name`, with `detail`: shown at
    /// `/healthz`, which stays healthy.
    pub fn set_degraded(&self, name: &str, detail: impl Into<String>) {
        if let Ok(mut d) = self.1.lock() {
            d.insert(name.to_owned(), detail.into());
        }
    }

    /// Clears degradation `name`, if set.
    pub fn clear_degraded(&self, name: &str) {
        if let Ok(mut d) = self.1.lock() {
            d.remove(name);
        }
    }

    /// The degradations set now, by name, with their details.
    pub fn degraded(&self) -> BTreeMap<String, String> {
        self.1.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Sets (or replaces) condition `name`, failing with `reason`.
    pub fn set(&self, name: &str, reason: impl Into<String>) {
        if let Ok(mut c) = self.0.lock() {
            c.insert(name.to_owned(), reason.into());
        }
    }

    /// Clears condition `name`, if set.
    pub fn clear(&self, name: &str) {
        if let Ok(mut c) = self.0.lock() {
            c.remove(name);
        }
    }

    /// The conditions set now, by name, with their reasons.
    pub fn failing(&self) -> BTreeMap<String, String> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Whether none is set.
    pub fn is_clear(&self) -> bool {
        self.0.lock().is_ok_and(|c| c.is_empty())
    }
}

/// Whether the proxy keeps its data plane in sync: healthy after the first
/// sync, as long as no change has waited longer than the timeout (kube-proxy
/// uses twice its sync period). Cloning shares it.
#[derive(Clone, Debug)]
pub struct ProxyHealth(Arc<Mutex<SyncState>>);

impl ProxyHealth {
    /// Unhealthy until the first sync.
    pub fn new(timeout: Duration) -> Self {
        Self(Arc::new(Mutex::new(SyncState {
            timeout,
            last_sync: None,
            pending_since: None,
            node_terminating: false,
            conditions: Conditions::default(),
            held_back: None,
        })))
    }

    /// Not healthy while any of `conditions` is set (see [`Conditions`]).
    #[must_use]
    pub fn with_conditions(self, conditions: Conditions) -> Self {
        if let Ok(mut s) = self.0.lock() {
            s.conditions = conditions;
        }
        self
    }

    /// The readiness conditions.
    pub fn conditions(&self) -> Conditions {
        self.0
            .lock()
            .map(|s| s.conditions.clone())
            .unwrap_or_default()
    }

    /// Whether the input is held back, and why (a mass deletion the guard
    /// refused): `/healthz` answers `503` with the reason meanwhile, as
    /// the data plane no longer follows the cluster. `/livez` is not
    /// affected: restarting would not help.
    pub fn set_held_back(&self, reason: Option<String>) {
        if let Ok(mut s) = self.0.lock() {
            s.held_back = reason;
        }
    }

    /// Whether this node is going away: being deleted, or tainted
    /// `ToBeDeletedByClusterAutoscaler` (KEP-3836). [`Healthy`] sets it
    /// from the view's node object.
    pub fn set_node_terminating(&self, terminating: bool) {
        if let Ok(mut s) = self.0.lock() {
            s.node_terminating = terminating;
        }
    }

    /// A change is waiting to be applied (the first since the last sync
    /// starts the clock).
    pub fn queued(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.pending_since.get_or_insert_with(Instant::now);
        }
    }

    /// Everything queued was applied.
    pub fn synced(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.last_sync = Some((Instant::now(), SystemTime::now()));
            s.pending_since = None;
        }
    }

    /// Whether the proxy keeps its data plane in sync (`/livez`).
    pub fn live(&self) -> bool {
        self.0.lock().is_ok_and(|s| {
            s.last_sync.is_some() && s.pending_since.is_none_or(|t| t.elapsed() < s.timeout)
        })
    }

    /// Whether load balancers should send new connections here
    /// (`/healthz`, and `serviceProxyHealthy` of the health-check node
    /// ports): [`live`](Self::live), this node is not going away, and
    /// no readiness [`Conditions`] entry is set.
    pub fn healthy(&self) -> bool {
        self.live()
            && self.0.lock().is_ok_and(|s| {
                !s.node_terminating && s.conditions.is_clear() && s.held_back.is_none()
            })
    }

    /// The `/healthz` body: the last sync and now, in seconds since the
    /// epoch, and the verdict.
    fn body(&self) -> serde_json::Value {
        let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let last = self
            .0
            .lock()
            .ok()
            .and_then(|s| s.last_sync)
            .map(|(_, t)| seconds(t));
        let eligible = self.0.lock().is_ok_and(|s| !s.node_terminating);
        let held_back = self.0.lock().ok().and_then(|s| s.held_back.clone());
        let mut body = serde_json::json!({
            "lastUpdated": last,
            "currentTime": seconds(SystemTime::now()),
            "healthy": self.healthy(),
            "nodeEligible": eligible,
            "conditions": self.conditions().failing(),
        });
        if let (Some(reason), Some(map)) = (held_back, body.as_object_mut()) {
            map.insert("heldBack".into(), reason.into());
        }
        let degraded = self.conditions().degraded();
        if let (false, Some(map)) = (degraded.is_empty(), body.as_object_mut()) {
            map.insert("degraded".into(), serde_json::json!(degraded));
        }
        body
    }
}

/// A [`Hook`] that feeds [`ProxyHealth`] from its sink's rounds: a round
/// that brings a change marks it queued (and tells whether this node is
/// going away, when the node's object changed), and a round the sink
/// applied marks the proxy synced (a failing one leaves the change
/// waiting). Put it around a backend with
/// [`SinkExt::with`](kpng_sink::SinkExt::with).
///
/// ```
/// use std::time::Duration;
/// use kpng_health::{Healthy, ProxyHealth};
/// use kpng_model::view::NodeView;
/// use kpng_sink::{Round, Sink, SinkError, SinkExt};
///
/// struct Backend;
/// impl Sink for Backend {
///     fn sync(&mut self, _: &Round<'_>) -> Result<(), SinkError> {
///         Ok(())
///     }
/// }
///
/// let health = ProxyHealth::new(Duration::from_secs(60));
/// let mut sink = Backend.with(Healthy::new(health.clone()));
/// assert!(!health.healthy());
/// sink.sync(&Round::full(&NodeView::default()))?;
/// assert!(health.healthy());
/// # Ok::<(), SinkError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Healthy {
    health: ProxyHealth,
}

impl Healthy {
    /// Tracks its sink's rounds in `health`.
    pub fn new(health: ProxyHealth) -> Self {
        Self { health }
    }
}

impl<S: ?Sized> Hook<S> for Healthy {
    fn before(&mut self, round: &Round<'_>) {
        if round.is_full() || !round.is_empty() {
            self.health.queued();
        }
        if round.node_changed() {
            let terminating = round.view().node.as_ref().is_some_and(|n| n.terminating);
            self.health.set_node_terminating(terminating);
        }
    }

    fn after(&mut self, _: &S, _: &Round<'_>, result: &Result<(), SinkError>) {
        if result.is_ok() {
            self.health.synced();
        }
    }
}

/// Serves `/healthz` and `/livez` on `listener` until the task is dropped:
/// `200` while `health` is healthy, `503` otherwise; `404` elsewhere.
pub async fn serve_healthz(listener: TcpListener, health: ProxyHealth) {
    http::serve(listener, move |path| match path {
        "/healthz" => {
            let status = if health.healthy() { 200 } else { 503 };
            Reply::json(status, &health.body())
        }
        "/livez" => {
            let status = if health.live() { 200 } else { 503 };
            Reply::json(status, &health.body())
        }
        _ => Reply::not_found(),
    })
    .await;
}
