//! kube-proxy's metrics beyond the sync timings, and its `/configz` and
//! `/proxyMode` answers.

use super::measure::NoLocal;
use super::*;

/// A label set of one pair.
type Label = [(&'static str, &'static str); 1];
/// A label set of two pairs.
type Labels2 = [(&'static str, &'static str); 2];

/// kube-proxy's metrics beyond the sync timings, and what `/configz` and
/// `/proxyMode` answer.
pub(super) struct KubeProxy {
    last_queued: Gauge<f64, AtomicU64>,
    service_pending: Gauge,
    endpoint_pending: Gauge,
    service_total: Counter,
    endpoint_total: Counter,
    /// The mode's failure counter (none without a mode).
    failures: Option<Family<Label, Counter>>,
    no_local: Family<Labels2, Gauge>,
    pub(super) configz: Mutex<Option<serde_json::Value>>,
    pub(super) proxy_mode: Mutex<Option<String>>,
}

impl KubeProxy {
    pub(super) fn register(registry: &mut Registry, mode: Option<ProxyMode>) -> Self {
        let this = Self {
            last_queued: Gauge::default(),
            service_pending: Gauge::default(),
            endpoint_pending: Gauge::default(),
            service_total: Counter::default(),
            endpoint_total: Counter::default(),
            failures: mode.map(|_| Family::default()),
            no_local: Family::default(),
            configz: Mutex::new(None),
            proxy_mode: Mutex::new(None),
        };
        registry.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            this.last_queued.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            this.service_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            this.endpoint_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            this.service_total.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            this.endpoint_total.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            this.no_local.clone(),
        );
        // Each family's counter from the start, at 0.
        let families = |family: &Family<Label, Counter>| {
            for f in ["IPv4", "IPv6"] {
                let _ = family.get_or_create(&[("ip_family", f)]);
            }
        };
        if let Some(failures) = &this.failures {
            families(failures);
        }
        match (mode, &this.failures) {
            (Some(ProxyMode::Nftables), Some(failures)) => {
                let cleanup = Family::<Label, Counter>::default();
                families(&cleanup);
                registry.register(
                    "kubeproxy_sync_proxy_rules_nftables_sync_failures",
                    "Cumulative proxy nftables sync failures",
                    failures.clone(),
                );
                // kpng removes stale objects in the sync's own transaction.
                registry.register(
                    "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
                    "Cumulative proxy nftables cleanup failures",
                    cleanup,
                );
            }
            (Some(ProxyMode::Iptables), Some(failures)) => registry.register(
                "kubeproxy_sync_proxy_rules_iptables_restore_failures",
                "Cumulative proxy iptables restore failures",
                failures.clone(),
            ),
            _ => {}
        }
        registry.register_collector(Box::new(Process));
        this
    }

    /// Changes reaching the backend: `services` Service changes and
    /// `endpoints` endpoint changes.
    pub(super) fn changed(&self, services: u64, endpoints: u64) {
        self.service_total.inc_by(services);
        self.service_pending
            .inc_by(i64::try_from(services).unwrap_or(i64::MAX));
        self.endpoint_total.inc_by(endpoints);
        self.endpoint_pending
            .inc_by(i64::try_from(endpoints).unwrap_or(i64::MAX));
    }

    pub(super) fn queued(&self) {
        self.last_queued.set(now_seconds());
    }

    pub(super) fn synced(&self) {
        self.service_pending.set(0);
        self.endpoint_pending.set(0);
    }

    pub(super) fn failed(&self) {
        if let Some(failures) = &self.failures {
            for family in ["IPv4", "IPv6"] {
                failures.get_or_create(&[("ip_family", family)]).inc();
            }
        }
    }

    /// Sets the counts of Service ports with a Local policy and no local
    /// endpoint, per policy and family.
    pub(super) fn set_no_local(&self, counts: &NoLocal) {
        for (p, policy) in ["internal", "external"].into_iter().enumerate() {
            for (f, family) in ["IPv4", "IPv6"].into_iter().enumerate() {
                self.no_local
                    .get_or_create(&[("traffic_policy", policy), ("ip_family", family)])
                    .set(counts[p][f]);
            }
        }
    }

    pub(super) fn configz_reply(&self) -> crate::http::Reply {
        match self.configz.lock().ok().and_then(|c| c.clone()) {
            Some(config) => crate::http::Reply::json(200, &config),
            None => crate::http::Reply::not_found(),
        }
    }

    pub(super) fn proxy_mode_reply(&self) -> crate::http::Reply {
        match self.proxy_mode.lock().ok().and_then(|m| m.clone()) {
            Some(mode) => crate::http::Reply {
                status: 200,
                content_type: "text/plain; charset=utf-8",
                body: mode,
            },
            None => crate::http::Reply::not_found(),
        }
    }
}
