//! [`ViewDigest`]: the content digest of a node view, and
//! [`ViewSummary`]: the same terms, Service by Service.

use std::sync::Arc;

use super::{NodeView, ServiceView, ViewOp};
use crate::ServiceName;
use crate::v1::{IpSet, Node};

/// A digest of a [`NodeView`]'s content: equal views have equal digests
/// in every process, so a watcher can tell a restarted server (or another
/// replica) which view it holds, and the server can tell whether that view
/// is still current without sending it.
///
/// The digest is the wrapping sum of one 128-bit term per Service (its
/// name and its [`ServiceView`]) and one for the node object, each a
/// SipHash-1-3 of the content under a fixed key. A sum can be kept up to
/// date in O(changed Services): subtract a Service's old term, add its new
/// one. The revision is not part of it. Terms come from the types' `Hash`,
/// so two builds of kpng-rs that hash differently only disagree, and a
/// disagreement costs a full transfer, never a wrong view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ViewDigest(u128);

impl ViewDigest {
    /// The digest of a whole view, from scratch: O(view).
    pub fn of(view: &NodeView) -> Self {
        let mut digest =
            Self::node_term(view.node.as_deref()) + Self::service_cidrs_term(&view.service_cidrs);
        for (name, service) in &view.services {
            digest = digest + Self::service_term(name, service);
        }
        digest
    }

    /// The term a Service contributes.
    pub fn service_term(name: &ServiceName, service: &ServiceView) -> Self {
        Self(stable_hash(&(name.namespace(), name.name(), service)))
    }

    /// The term the node object (or its absence) contributes.
    pub fn node_term(node: Option<&Node>) -> Self {
        Self(stable_hash(&("node", node)))
    }

    /// The term the Service CIDRs contribute: none when there are none
    /// (a view without them digests as it did before they existed).
    pub fn service_cidrs_term(cidrs: &IpSet) -> Self {
        if cidrs.is_empty() {
            Self::default()
        } else {
            Self(stable_hash(&("service-cidrs", cidrs)))
        }
    }

    /// The 16 bytes sent on the wire (big-endian).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The digest in `bytes`, or `None` unless there are exactly 16.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(Self(u128::from_be_bytes(bytes.try_into().ok()?)))
    }
}

/// Adds a term.
impl std::ops::Add for ViewDigest {
    type Output = Self;
    fn add(self, term: Self) -> Self {
        Self(self.0.wrapping_add(term.0))
    }
}

/// Takes a term away.
impl std::ops::Sub for ViewDigest {
    type Output = Self;
    fn sub(self, term: Self) -> Self {
        Self(self.0.wrapping_sub(term.0))
    }
}

impl std::fmt::Display for ViewDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A node view summarized Service by Service, in 16 bytes each: the
/// fingerprint of the Service's name and the low 64 bits of its term of
/// the [`ViewDigest`] (so a summary and a digest never disagree on what a
/// view is), plus the node object's and the Service CIDRs' terms.
///
/// A watcher that moves to another server instance (a restarted server,
/// another replica) sends the summary of the view it holds; the server
/// answers with [`difference`](Self::difference): the Services to drop and
/// the ops that set the Services that differ, whole, so that the watcher
/// ends with exactly the server's view, having received only what
/// differs. This is how Envoy's delta xDS resumes
/// (`initial_resource_versions`: each resource the client holds, with its
/// version), with versions derived from the content, since two replicas
/// that coalesce revisions differently agree on no revision number.
///
/// A summary at 10k Services is 160 KB: it is sent only when the server
/// knows neither the watcher's revision nor its digest.
///
/// ```
/// use std::sync::Arc;
/// use kpng_model::view::{NodeView, ServiceView, ViewOp, ViewSummary};
/// use kpng_model::{ServiceInfo, v1::Service};
///
/// let service = |name: &str| {
///     Arc::new(ServiceInfo::new(Service::new("default", name)).expect("valid"))
/// };
/// let mut held = NodeView::default();
/// for name in ["a", "b"] {
///     held.apply(&ViewOp::SetService(service(name)))?;
/// }
/// let mut current = NodeView::default();
/// for name in ["b", "c"] {
///     current.apply(&ViewOp::SetService(service(name)))?;
/// }
/// let difference = ViewSummary::of(&held).difference(&current);
/// // "a" is dropped, "c" set; "b" is not sent.
/// assert_eq!((difference.dropped.len(), difference.ops.len()), (1, 1));
/// difference.apply_to(&mut held)?;
/// assert!(held.services == current.services);
/// # Ok::<(), kpng_model::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewSummary {
    /// (name fingerprint, term), sorted.
    services: Vec<(u64, u64)>,
    node: u64,
    service_cidrs: u64,
}

/// What a server sends a watcher holding a [`ViewSummary`] to bring its
/// view to the server's: see [`ViewSummary::difference`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewDifference {
    /// The fingerprints ([`ViewSummary::fingerprint`]) of the Services to
    /// drop: those the view lacks, and those that differ (set again, whole,
    /// by `ops`).
    pub dropped: Vec<u64>,
    /// The node and Service CIDRs, when they differ, then each Service the
    /// watcher lacks or holds otherwise, whole (`SetService` and its
    /// `SetEndpoint`s), in name order.
    pub ops: Vec<ViewOp>,
}

impl ViewDifference {
    /// Applies the difference to `view`, the view the summary was made of:
    /// the dropped Services are removed, then the ops applied.
    ///
    /// # Errors
    /// As [`NodeView::apply`].
    pub fn apply_to(&self, view: &mut NodeView) -> crate::Result<()> {
        for name in ViewSummary::names(view, &self.dropped) {
            view.apply(&ViewOp::DeleteService(name))?;
        }
        for op in &self.ops {
            view.apply(op)?;
        }
        Ok(())
    }

    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.dropped.is_empty() && self.ops.is_empty()
    }
}

impl ViewSummary {
    /// The summary of `view`: O(view).
    pub fn of(view: &NodeView) -> Self {
        let mut services: Vec<(u64, u64)> = view
            .services
            .iter()
            .map(|(name, service)| (Self::fingerprint(name), Self::version(name, service)))
            .collect();
        services.sort_unstable();
        Self {
            services,
            node: low(ViewDigest::node_term(view.node.as_deref())),
            service_cidrs: low(ViewDigest::service_cidrs_term(&view.service_cidrs)),
        }
    }

    /// The fingerprint of a Service's name: how a summary names it.
    pub fn fingerprint(name: &ServiceName) -> u64 {
        low(ViewDigest(stable_hash(&(
            "service-name",
            name.namespace(),
            name.name(),
        ))))
    }

    /// A Service's version in a summary: the low 64 bits of its
    /// [`ViewDigest::service_term`].
    pub fn version(name: &ServiceName, service: &ServiceView) -> u64 {
        low(ViewDigest::service_term(name, service))
    }

    /// The Services summarized.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// No Service is summarized.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The names of `view`'s Services whose fingerprints are in
    /// `fingerprints`, in name order: O(view).
    pub fn names(view: &NodeView, fingerprints: &[u64]) -> Vec<ServiceName> {
        if fingerprints.is_empty() {
            return Vec::new();
        }
        let wanted: std::collections::HashSet<u64> = fingerprints.iter().copied().collect();
        view.services
            .keys()
            .filter(|name| wanted.contains(&Self::fingerprint(name)))
            .cloned()
            .collect()
    }

    /// What a watcher holding the summarized view needs to hold `view`:
    /// the Services to drop and the ops that set what differs.
    /// O(view + summary).
    pub fn difference(&self, view: &NodeView) -> ViewDifference {
        let mut ops = Vec::new();
        if low(ViewDigest::node_term(view.node.as_deref())) != self.node {
            ops.push(match &view.node {
                Some(node) => ViewOp::SetNode(node.clone()),
                None => ViewOp::DeleteNode,
            });
        }
        if low(ViewDigest::service_cidrs_term(&view.service_cidrs)) != self.service_cidrs {
            ops.push(ViewOp::SetServiceCidrs(Arc::clone(&view.service_cidrs)));
        }
        let mut kept = vec![false; self.services.len()];
        let mut dropped = Vec::new();
        for (name, service) in &view.services {
            let fingerprint = Self::fingerprint(name);
            let at = self
                .services
                .binary_search_by_key(&fingerprint, |(f, _)| *f)
                .ok();
            if let Some(i) = at {
                kept[i] = true;
                if self.services[i].1 == Self::version(name, service) {
                    continue;
                }
                dropped.push(fingerprint);
            }
            ops.push(ViewOp::SetService(service.service.clone()));
            ops.extend(
                service
                    .endpoints
                    .iter()
                    .map(|e| ViewOp::SetEndpoint(name.clone(), e.clone())),
            );
        }
        dropped.extend(
            self.services
                .iter()
                .zip(&kept)
                .filter(|(_, kept)| !**kept)
                .map(|((f, _), _)| *f),
        );
        ViewDifference { dropped, ops }
    }

    /// The summary as sent.
    pub fn to_wire(&self) -> crate::v1::ViewSummary {
        let mut services = Vec::with_capacity(16 * self.services.len());
        for (fingerprint, version) in &self.services {
            services.extend_from_slice(&fingerprint.to_be_bytes());
            services.extend_from_slice(&version.to_be_bytes());
        }
        crate::v1::ViewSummary {
            services,
            node: self.node,
            service_cidrs: self.service_cidrs,
        }
    }

    /// The summary received, or `None` when its Services are not whole
    /// 16-byte records.
    pub fn from_wire(wire: &crate::v1::ViewSummary) -> Option<Self> {
        if !wire.services.len().is_multiple_of(16) {
            return None;
        }
        let mut services: Vec<(u64, u64)> = wire
            .services
            .chunks_exact(16)
            .map(|record| {
                let (f, v) = record.split_at(8);
                Some((
                    u64::from_be_bytes(f.try_into().ok()?),
                    u64::from_be_bytes(v.try_into().ok()?),
                ))
            })
            .collect::<Option<_>>()?;
        // Sorted as sent; a watcher that did not sort is still understood.
        if !services.is_sorted() {
            services.sort_unstable();
        }
        Some(Self {
            services,
            node: wire.node,
            service_cidrs: wire.service_cidrs,
        })
    }
}

/// The low 64 bits of a digest or term.
fn low(digest: ViewDigest) -> u64 {
    // Truncation is the point.
    #[allow(clippy::cast_possible_truncation)]
    let low = digest.0 as u64;
    low
}

/// SipHash-1-3, 128 bits, under a fixed key: the same in every process.
fn stable_hash<T: std::hash::Hash + ?Sized>(value: &T) -> u128 {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher as _;
    let mut hasher = SipHasher13::new_with_keys(0x6b70_6e67_2d72_7321, 0x7669_6577_2d64_6967);
    value.hash(&mut hasher);
    hasher.write_u8(0);
    hasher.finish128().as_u128()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::v1::Service;
    use crate::{EndpointInfo, ServiceInfo};

    fn service(name: &str, version: u8) -> ViewOp {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 96, 0, version));
        ViewOp::SetService(Arc::new(
            ServiceInfo::new(Service::new("ns", name).with_cluster_ips([ip])).expect("valid"),
        ))
    }

    fn endpoint(name: &str, e: u8) -> ViewOp {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, e));
        let view = super::super::EndpointView::at(EndpointInfo::new(ip), ip).expect("IPv4");
        ViewOp::SetEndpoint(ServiceName::new("ns", name), view)
    }

    fn view(ops: &[ViewOp]) -> NodeView {
        let mut view = NodeView::default();
        for op in ops {
            view.apply(op).expect("fits");
        }
        view
    }

    #[test]
    fn the_difference_is_what_differs_and_makes_the_view() {
        let held = view(&[
            service("a", 1),
            endpoint("a", 1),
            service("b", 1),
            endpoint("b", 2),
            service("gone", 1),
        ]);
        let current = view(&[
            service("a", 1),
            endpoint("a", 1),
            service("b", 1),
            endpoint("b", 3),
            service("new", 2),
            ViewOp::SetServiceCidrs(Arc::new(crate::v1::IpSet {
                v4: vec!["10.96.0.0/16".into()],
                v6: Vec::new(),
            })),
        ]);
        let summary = ViewSummary::of(&held);
        assert_eq!(summary.len(), 3);
        // Through the wire and back.
        let summary = ViewSummary::from_wire(&summary.to_wire()).expect("whole records");
        let difference = summary.difference(&current);
        let dropped = ViewSummary::names(&held, &difference.dropped);
        assert_eq!(
            dropped,
            [ServiceName::new("ns", "b"), ServiceName::new("ns", "gone")]
        );
        // The Service CIDRs, b whole, new: not a.
        assert_eq!(difference.ops.len(), 1 + 2 + 1, "{:?}", difference.ops);
        let mut resumed = held.clone();
        difference.apply_to(&mut resumed).expect("fits");
        assert_eq!(ViewDigest::of(&resumed), ViewDigest::of(&current));
        assert!(resumed.services == current.services);
        // Nothing differs: nothing is sent.
        assert!(ViewSummary::of(&current).difference(&current).is_empty());
        // A record cut short is refused.
        let mut wire = summary.to_wire();
        wire.services.pop();
        assert_eq!(ViewSummary::from_wire(&wire), None);
    }
}
