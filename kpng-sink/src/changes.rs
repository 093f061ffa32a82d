//! [`Changes`]: what changed between two node views, the one change
//! vocabulary. The wire's [`ViewOp`]s are derived from it
//! ([`Changes::ops`]) and turned back into it ([`Changes::from_ops`]).

use std::sync::Arc;

use kpng_model::ServiceName;
use kpng_model::view::{NodeView, ServiceView, ViewOp};

/// What changed between two node views: the node's object, the Service
/// CIDRs, and the Services set or removed.
///
/// It is the one description of a change. The driver that keeps the view
/// fills it as it computes the new view ([`Round::incremental`](crate::Round::incremental));
/// [`Changes::between`] finds it by comparing two views, in O(changed
/// Services) when they share their unchanged Services. With the two views,
/// [`Changes::ops`] gives the [`ViewOp`]s that a watch streams, and
/// [`Changes::from_ops`] turns such ops back into the changes they came
/// from.
///
/// ```
/// use std::sync::Arc;
/// use kpng_model::v1::Service;
/// use kpng_model::view::{NodeView, ServiceView};
/// use kpng_sink::Changes;
///
/// let before = NodeView::default();
/// let mut after = before.clone();
/// let web = Arc::new(kpng_model::ServiceInfo::new(Service::new("default", "web"))?);
/// after.services.insert(web.service_name(), Arc::new(ServiceView::new(web.clone())));
///
/// let changes = Changes::between(&before, &after);
/// assert_eq!(changes.services, [web.service_name()]);
/// let ops = changes.ops(&before, &after);
/// assert_eq!(Changes::from_ops(&ops), changes);
/// let mut applied = before.clone();
/// for op in &ops {
///     applied.apply(op)?;
/// }
/// assert_eq!(applied, after);
/// # Ok::<(), kpng_model::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Changes {
    /// This node's object changed (its addresses, its zone).
    pub node: bool,
    /// The cluster's Service CIDRs changed.
    pub service_cidrs: bool,
    /// The Services set, changed or removed, in name order, each once.
    pub services: Vec<ServiceName>,
}

impl Changes {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.node && !self.service_cidrs && self.services.is_empty()
    }

    /// What changed from `previous` to `view`: the one diff of two node
    /// views. Services that the two views share (the same `Arc`) are
    /// skipped without being compared, so two views of one driver (an
    /// O(1) clone and the view it became) diff in O(changed Services).
    pub fn between(previous: &NodeView, view: &NodeView) -> Self {
        use imbl::ordmap::DiffItem;
        let services = previous
            .services
            .diff(&view.services)
            .filter_map(|item| match item {
                DiffItem::Add(name, _) | DiffItem::Remove(name, _) => Some(name.clone()),
                DiffItem::Update { old, new } => {
                    service_changed(old.1, new.1).then(|| old.0.clone())
                }
            })
            .collect();
        Self {
            node: previous.node != view.node,
            service_cidrs: !Arc::ptr_eq(&previous.service_cidrs, &view.service_cidrs)
                && previous.service_cidrs != view.service_cidrs,
            services,
        }
    }

    /// The [`ViewOp`]s that turn `previous` into `view`, these changes
    /// being what changed between them: the node's op, the Service CIDRs',
    /// then per Service in name order its `SetService` (when its
    /// definition changed or it is new), the endpoints it lost, and the
    /// endpoints it gained or that changed. What a watch streams.
    pub fn ops(&self, previous: &NodeView, view: &NodeView) -> Vec<ViewOp> {
        let mut ops = Vec::new();
        if self.node {
            ops.push(match &view.node {
                Some(node) => ViewOp::SetNode(node.clone()),
                None => ViewOp::DeleteNode,
            });
        }
        if self.service_cidrs {
            ops.push(ViewOp::SetServiceCidrs(view.service_cidrs.clone()));
        }
        for name in &self.services {
            service_ops(
                name,
                previous.services.get(name),
                view.services.get(name),
                &mut ops,
            );
        }
        ops
    }

    /// The changes that `ops` make: the inverse of [`ops`](Self::ops).
    /// The node changed if an op sets or deletes it, the Service CIDRs if
    /// one sets them, and each Service an op names, listed once in name
    /// order.
    pub fn from_ops<'a>(ops: impl IntoIterator<Item = &'a ViewOp>) -> Self {
        let mut changes = Self::default();
        for op in ops {
            match op {
                ViewOp::SetNode(_) | ViewOp::DeleteNode => changes.node = true,
                ViewOp::SetServiceCidrs(_) => changes.service_cidrs = true,
                ViewOp::SetService(service) => {
                    let name = service.service_name();
                    if changes.services.last() != Some(&name) {
                        changes.services.push(name);
                    }
                }
                ViewOp::DeleteService(name)
                | ViewOp::SetEndpoint(name, _)
                | ViewOp::DeleteEndpoint(name, _) => {
                    if changes.services.last() != Some(name) {
                        changes.services.push(name.clone());
                    }
                }
            }
        }
        changes.services.sort();
        changes.services.dedup();
        changes
    }
}

/// Whether a Service's view changed: it is another and unequal one (a
/// shared `Arc` is not compared).
pub(crate) fn service_changed(before: &Arc<ServiceView>, after: &Arc<ServiceView>) -> bool {
    !Arc::ptr_eq(before, after) && before != after
}

/// Appends the ops that turn the view `old` of Service `name` into `new`.
fn service_ops(
    name: &ServiceName,
    old: Option<&Arc<ServiceView>>,
    new: Option<&Arc<ServiceView>>,
    ops: &mut Vec<ViewOp>,
) {
    let (old, new) = match (old, new) {
        (None, None) => return,
        (Some(_), None) => {
            ops.push(ViewOp::DeleteService(name.clone()));
            return;
        }
        (old, Some(new)) => (old, new),
    };
    if old.is_some_and(|o| Arc::ptr_eq(o, new)) {
        return;
    }
    let old_endpoints = old.map_or(&[][..], |o| &o.endpoints[..]);
    if old.is_none_or(|o| o.service != new.service) {
        ops.push(ViewOp::SetService(new.service.clone()));
    }
    // Both lists are sorted by address: merge them, deletions first.
    let mut sets = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old_endpoints.len() || j < new.endpoints.len() {
        match (old_endpoints.get(i), new.endpoints.get(j)) {
            (Some(o), Some(n)) if o.ip() == n.ip() => {
                if o != n {
                    sets.push(ViewOp::SetEndpoint(name.clone(), n.clone()));
                }
                i += 1;
                j += 1;
            }
            (Some(o), n) if n.is_none_or(|n| o.ip() < n.ip()) => {
                ops.push(ViewOp::DeleteEndpoint(name.clone(), o.ip()));
                i += 1;
            }
            (_, Some(n)) => {
                sets.push(ViewOp::SetEndpoint(name.clone(), n.clone()));
                j += 1;
            }
            (Some(_), None) | (None, None) => break,
        }
    }
    ops.extend(sets);
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use kpng_model::v1::{IpSet, Node, Service};
    use kpng_model::view::EndpointView;
    use kpng_model::{EndpointInfo, ServiceInfo};
    use proptest::prelude::*;

    use super::*;

    /// One Service of a generated view: its ClusterIP's last byte, and
    /// its endpoints (last byte, in the cluster set).
    type ServiceSpec = (u8, Vec<(u8, bool)>);

    /// A generated view: the node's zone, the Service CIDRs, and the
    /// Services by number.
    type ViewSpec = (Option<u8>, u8, Vec<(u8, ServiceSpec)>);

    fn view_spec() -> impl Strategy<Value = ViewSpec> {
        (
            prop::option::of(0..2u8),
            0..2u8,
            prop::collection::vec(
                (
                    0..6u8,
                    (0..3u8, prop::collection::vec((1..5u8, any::<bool>()), 0..4)),
                ),
                0..6,
            ),
        )
    }

    fn view(spec: &ViewSpec) -> NodeView {
        let (zone, cidrs, services) = spec;
        let mut view = NodeView {
            node: zone.map(|z| {
                Arc::new(Node {
                    name: "node-a".into(),
                    zone: format!("z{z}"),
                    ..Default::default()
                })
            }),
            service_cidrs: Arc::new(IpSet {
                v4: (0..*cidrs).map(|i| format!("10.96.{i}.0/24")).collect(),
                v6: Vec::new(),
            }),
            ..Default::default()
        };
        for (i, (version, endpoints)) in services {
            let cluster_ip = IpAddr::V4(Ipv4Addr::new(10, 96, 0, *version));
            let service = Service::new("ns", format!("s{i}")).with_cluster_ips([cluster_ip]);
            let service = Arc::new(ServiceInfo::new(service).expect("valid"));
            let mut service_view = ServiceView::new(service.clone());
            // Sorted by address, each once, as in a view.
            let endpoints: std::collections::BTreeMap<u8, bool> =
                endpoints.iter().copied().collect();
            for (e, cluster) in endpoints {
                let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, e));
                let endpoint = EndpointView::at(EndpointInfo::new(ip), ip)
                    .expect("an IPv4 endpoint")
                    .with_cluster(cluster);
                service_view.endpoints.push(endpoint);
            }
            view.services
                .insert(service.service_name(), Arc::new(service_view));
        }
        view
    }

    /// `b`, its Services equal to `a`'s shared with `a` (the same `Arc`),
    /// as two views of one driver are.
    fn sharing(a: &NodeView, b: &NodeView) -> NodeView {
        let mut shared = a.clone();
        shared.node = b.node.clone();
        shared.service_cidrs = if a.service_cidrs == b.service_cidrs {
            a.service_cidrs.clone()
        } else {
            b.service_cidrs.clone()
        };
        for (name, service) in b.services.iter() {
            if a.services.get(name) != Some(service) {
                shared.services.insert(name.clone(), service.clone());
            }
        }
        for name in a.services.keys() {
            if !b.services.contains_key(name) {
                shared.services.remove(name);
            }
        }
        shared
    }

    proptest! {
        /// For any two views, the changes between them give ops that turn
        /// the first into the second, and the ops give the changes back;
        /// views that share their unchanged Services give the same.
        #[test]
        fn changes_ops_and_back(a in view_spec(), b in view_spec()) {
            let a = view(&a);
            let b = view(&b);
            for b in [b.clone(), sharing(&a, &b)] {
                let changes = Changes::between(&a, &b);
                let ops = changes.ops(&a, &b);
                prop_assert_eq!(&Changes::from_ops(&ops), &changes);
                let mut applied = a.clone();
                for op in &ops {
                    applied.apply(op).expect("the ops fit the view");
                }
                prop_assert_eq!(&applied, &b);
                prop_assert_eq!(changes.is_empty(), a == b);
                prop_assert!(Changes::between(&b, &b).ops(&b, &b).is_empty());
            }
        }
    }
}
