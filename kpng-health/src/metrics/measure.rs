//! [`Measure`]: the hook that measures each round of a sink.

use std::collections::BTreeMap;

use kpng_model::ServiceName;

use super::*;

/// A [`Hook`] that measures its sink's rounds into [`Metrics`]: it times
/// them (full or partial), counts failures, the changes each round
/// brings (kube-proxy's Service and endpoint change counters), the
/// network programming latency, and keeps the Service and endpoint
/// gauges of the view synced and kube-proxy's count of Local Service
/// ports without a local endpoint. Put it around any sink with
/// [`SinkExt::with`], or
/// [`MeasuredExt::measured`].
///
/// What it counts comes from the rounds: a Service whose definition
/// changed (set or removed) is one Service change, and each endpoint set
/// or removed between a Service's view before and after is one endpoint
/// change (a removed Service's endpoints go with it, uncounted). The
/// full round that retries a failed one counts nothing again: its
/// changes are still pending. The gauges and the Local counts follow
/// what changed; a full round counts them over again.
///
/// ```
/// use kpng_health::metrics::{Measure, Metrics};
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
/// let metrics = Metrics::new();
/// let mut sink = Backend.with(Measure::new(metrics.clone()));
/// sink.sync(&Round::full(&NodeView::default()))?;
/// assert!(metrics.encode().contains("kubeproxy_sync_full_proxy_rules_duration_seconds_count 1"));
/// # Ok::<(), SinkError>(())
/// ```
#[derive(Debug)]
pub struct Measure {
    metrics: Metrics,
    /// When the current round began (set in `before`).
    sync_started: Option<Instant>,
    /// When the first change not yet applied reached the sink.
    round_started: Option<Instant>,
    /// The last round failed: the next full one retries its changes.
    retrying: bool,
    /// The endpoints of the view last synced.
    endpoints: usize,
    /// Per Service of the view last synced with a Local policy, its ports
    /// without a local endpoint ([`no_local_endpoints`]), only those with
    /// any: each Service is planned once, when a round brings it.
    no_local: BTreeMap<ServiceName, NoLocal>,
    /// Their sum.
    no_local_total: NoLocal,
    /// The store the synced revisions come from: their trigger times.
    store: Option<kpng_store::Reader>,
}

/// Service ports without a local endpoint, per policy (internal,
/// external) and family (IPv4, IPv6).
pub(super) type NoLocal = [[i64; 2]; 2];

impl Measure {
    /// Measures into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            sync_started: None,
            round_started: None,
            retrying: false,
            endpoints: 0,
            no_local: BTreeMap::new(),
            no_local_total: NoLocal::default(),
            store: None,
        }
    }

    /// Measures network programming latency as kube-proxy does, from the
    /// trigger time each EndpointSlice change carries (kept by the store
    /// for the revision it made, [`kpng_store::Reader::take_triggers`]) to
    /// the round that applied it. Without a store (an agent, a file), from
    /// the first round bringing a change not yet applied.
    #[must_use]
    pub fn with_store(mut self, store: kpng_store::Reader) -> Self {
        self.store = Some(store);
        self
    }

    /// Counts the changes of `round` into kube-proxy's change counters.
    fn count_changes(&self, round: &Round<'_>) {
        let kube = &self.metrics.0.kube;
        let (mut services, mut endpoints) = (0u64, 0u64);
        for change in round.services() {
            let (before, after) = (change.before, change.after);
            if before.map(|v| &v.service) != after.map(|v| &v.service) {
                services += 1;
            }
            if let Some(after) = after {
                let before = before.map_or(&[][..], |v| &v.endpoints[..]);
                endpoints += endpoint_changes(before, &after.endpoints);
            }
        }
        kube.changed(services, endpoints);
    }

    /// Follows the gauges and the Local counts after `round` succeeded.
    fn count_view(&mut self, round: &Round<'_>) {
        let view = round.view();
        if round.is_full() {
            self.endpoints = 0;
            self.no_local.clear();
            self.no_local_total = NoLocal::default();
        }
        for change in round.services() {
            if let Some(before) = change.before {
                self.endpoints = self.endpoints.saturating_sub(used(before));
            }
            if let Some(counts) = self.no_local.remove(change.name) {
                add(&mut self.no_local_total, &counts, -1);
            }
            if let Some(after) = change.after {
                self.endpoints += used(after);
                let counts = no_local_endpoints(after);
                if counts != NoLocal::default() {
                    add(&mut self.no_local_total, &counts, 1);
                    self.no_local.insert(change.name.clone(), counts);
                }
            }
        }
        let m = &self.metrics.0;
        m.services
            .set(i64::try_from(view.services.len()).unwrap_or(i64::MAX));
        m.endpoints
            .set(i64::try_from(self.endpoints).unwrap_or(i64::MAX));
        m.kube.set_no_local(&self.no_local_total);
        if m.traffic.wanted() {
            m.traffic.set_view(view);
        }
    }
}

/// Adds `counts` times `sign` to `total`.
fn add(total: &mut NoLocal, counts: &NoLocal, sign: i64) {
    for (t, c) in total.iter_mut().zip(counts) {
        for (t, c) in t.iter_mut().zip(c) {
            *t += sign * c;
        }
    }
}

/// The endpoints set (new or changed) or removed from `before` to
/// `after`, both sorted by address.
fn endpoint_changes(before: &[EndpointView], after: &[EndpointView]) -> u64 {
    let (mut i, mut j, mut changes) = (0, 0, 0);
    loop {
        match (before.get(i), after.get(j)) {
            (None, None) => return changes,
            (Some(o), Some(n)) if o.ip() == n.ip() => {
                changes += u64::from(o != n);
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.ip() < n.ip() => {
                changes += 1;
                i += 1;
            }
            (Some(_), None) => {
                changes += 1;
                i += 1;
            }
            (_, Some(_)) => {
                changes += 1;
                j += 1;
            }
        }
    }
}

impl<S: ?Sized> Hook<S> for Measure {
    fn before(&mut self, round: &Round<'_>) {
        if round.is_full() || !round.is_empty() {
            // The first change since the last sync queues one.
            if self.round_started.is_none() {
                self.metrics.0.kube.queued();
                self.round_started = Some(Instant::now());
            }
            if !(round.is_full() && self.retrying) {
                self.count_changes(round);
            }
        }
        self.sync_started = Some(Instant::now());
    }

    fn after(&mut self, _: &S, round: &Round<'_>, result: &Result<(), SinkError>) {
        let elapsed = self
            .sync_started
            .take()
            .map_or(0.0, |start| start.elapsed().as_secs_f64());
        let m = &self.metrics.0;
        m.sync.observe(elapsed);
        if round.is_full() { &m.full } else { &m.partial }.observe(elapsed);
        if result.is_err() {
            self.retrying = true;
            m.failures.inc();
            m.kube.failed();
            return;
        }
        self.retrying = false;
        m.last_sync.set(now_seconds());
        let started = self.round_started.take();
        match &self.store {
            Some(store) => {
                let applied = SystemTime::now();
                for at in store.take_triggers(round.revision()) {
                    let latency = applied.duration_since(at).unwrap_or_default();
                    m.programming.observe(latency.as_secs_f64());
                }
            }
            None => {
                if let Some(started) = started {
                    m.programming.observe(started.elapsed().as_secs_f64());
                }
            }
        }
        m.kube.synced();
        self.count_view(round);
    }
}

/// Puts a [`Measure`] around any sink: `sink.measured(metrics)` is
/// `sink.with(Measure::new(metrics))`.
pub trait MeasuredExt: Sink + Sized {
    /// Measures this sink's rounds into `metrics`.
    fn measured(self, metrics: Metrics) -> With<Self, Measure> {
        self.with(Measure::new(metrics))
    }
}

impl<S: Sink> MeasuredExt for S {}

/// One Service's ports with a Local policy and no local endpoint, per
/// policy and family, as kube-proxy counts them at each sync. Only a
/// Service with a Local policy is planned.
fn no_local_endpoints(svc: &ServiceView) -> NoLocal {
    use kpng_model::IpFamily;
    use kpng_model::v1::TrafficPolicy;
    let mut counts = NoLocal::default();
    let s = &svc.service;
    if s.internal_traffic_policy() != TrafficPolicy::Local
        && s.external_traffic_policy() != TrafficPolicy::Local
    {
        return counts;
    }
    for (f, family) in [IpFamily::V4, IpFamily::V6].into_iter().enumerate() {
        let plan = svc.plan(family);
        let external =
            plan.externals().next().is_some() || plan.ports.iter().any(|p| p.node_port.is_some());
        let without = plan.ports.iter().filter(|p| p.local.is_empty()).count();
        let without = i64::try_from(without).unwrap_or(i64::MAX);
        if plan.itp_local && !plan.cluster_ips.is_empty() {
            counts[0][f] += without;
        }
        if plan.etp_local && external {
            counts[1][f] += without;
        }
    }
    counts
}

/// The endpoints of `view` traffic may be sent to (those serving but
/// unused here are not programmed).
fn used(view: &kpng_model::view::ServiceView) -> usize {
    view.endpoints.iter().filter(|e| e.used()).count()
}
