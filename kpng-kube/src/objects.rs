//! Lean Kubernetes objects: only the fields a Service proxy reads.
//!
//! The API source and the file source decode into these types instead of
//! the full `k8s-openapi` ones. Fields the proxy never reads (managedFields,
//! annotations, endpoint `targetRef`s, node images and conditions…) are
//! skipped while parsing, never allocated, and never kept. Each type
//! implements [`kube::Resource`], so kube-runtime's `watcher` lists and
//! watches them like any other resource; `From` conversions take the full
//! `k8s-openapi` objects for code that already has them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Deserializer};

/// Decodes `metadata` keeping only name, namespace, resourceVersion,
/// labels, whether the object is being deleted, and an EndpointSlice's
/// trigger time.
fn lean_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Lean {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
        deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
        annotations: Option<BTreeMap<String, String>>,
    }
    let lean = Option::<Lean>::deserialize(deserializer)?;
    Ok(lean.map_or_else(ObjectMeta::default, |l| ObjectMeta {
        name: l.name,
        namespace: l.namespace,
        resource_version: l.resource_version,
        labels: l.labels,
        deletion_timestamp: l.deletion_timestamp,
        annotations: kept_annotations(l.annotations.as_ref()),
        ..ObjectMeta::default()
    }))
}

/// The annotation an EndpointSlice's controller sets to when the change it
/// carries was triggered: the start of network programming latency.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The annotation that chooses a Service's balancing (`random`, `maglev`,
/// `round-robin`).
pub const BALANCING: &str = "kpng.io/balancing";

/// The annotation that chooses how a Service's flows from outside reach
/// an endpoint on another node (`snat`, `dsr`, `hybrid`).
pub const LOAD_BALANCER_MODE: &str = "kpng.io/load-balancer-mode";

/// The annotations kept: the trigger time, the balancing and the load
/// balancer mode.
fn kept_annotations(all: Option<&BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    let all = all?;
    let kept: BTreeMap<String, String> = [LAST_CHANGE_TRIGGER_TIME, BALANCING, LOAD_BALANCER_MODE]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), all.get(key)?.clone())))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

fn lean(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        resource_version: meta.resource_version.clone(),
        labels: meta.labels.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        annotations: kept_annotations(meta.annotations.as_ref()),
        ..ObjectMeta::default()
    }
}

macro_rules! resource {
    ($ty:ty, $scope:ty, $kind:literal, $group:literal, $version:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Service: lean metadata, the full spec, and the status (load-balancer
/// ingress).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Service {
    /// Name, namespace, resourceVersion and labels only.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: Option<core::ServiceSpec>,
    /// The status.
    #[serde(default)]
    pub status: Option<core::ServiceStatus>,
}

resource!(
    Service,
    NamespaceResourceScope,
    "Service",
    "",
    "v1",
    "services"
);

impl From<&core::Service> for Service {
    fn from(s: &core::Service) -> Self {
        Self {
            metadata: lean(&s.metadata),
            spec: s.spec.clone(),
            status: s.status.clone(),
        }
    }
}

/// One endpoint of an EndpointSlice, without its `targetRef`, hostname or
/// deprecated topology.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The addresses; only the first is used.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Ready, serving, terminating.
    #[serde(default)]
    pub conditions: Option<discovery::EndpointConditions>,
    /// Topology hints.
    #[serde(default)]
    pub hints: Option<discovery::EndpointHints>,
    /// The node it runs on.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Its zone.
    #[serde(default)]
    pub zone: Option<String>,
}

/// An EndpointSlice.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    /// Name, namespace, resourceVersion and labels only.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    /// `IPv4`, `IPv6` or `FQDN`.
    #[serde(default)]
    pub address_type: String,
    /// The endpoints.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// The ports.
    #[serde(default)]
    pub ports: Option<Vec<discovery::EndpointPort>>,
}

resource!(
    EndpointSlice,
    NamespaceResourceScope,
    "EndpointSlice",
    "discovery.k8s.io",
    "v1",
    "endpointslices"
);

impl From<&discovery::EndpointSlice> for EndpointSlice {
    fn from(s: &discovery::EndpointSlice) -> Self {
        Self {
            metadata: lean(&s.metadata),
            address_type: s.address_type.clone(),
            endpoints: s
                .endpoints
                .iter()
                .map(|e| Endpoint {
                    addresses: e.addresses.clone(),
                    conditions: e.conditions.clone(),
                    hints: e.hints.clone(),
                    node_name: e.node_name.clone(),
                    zone: e.zone.clone(),
                })
                .collect(),
            ports: s.ports.clone(),
        }
    }
}

/// The part of a Node's status the proxy reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeStatus {
    /// The node's addresses.
    #[serde(default)]
    pub addresses: Option<Vec<core::NodeAddress>>,
}

/// The part of a Node's spec the proxy reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeSpec {
    /// The taints' keys (the cluster autoscaler marks a node it removes).
    #[serde(default)]
    pub taints: Option<Vec<TaintKey>>,
}

/// A taint's key.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TaintKey {
    /// The key.
    #[serde(default)]
    pub key: String,
}

/// A Node: lean metadata (its labels carry the topology), its taints'
/// keys and its addresses. Its conditions, images and capacity, which
/// change with every status heartbeat, are skipped.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    /// Name, resourceVersion, labels and deletion time only.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    /// The taints.
    #[serde(default)]
    pub spec: Option<NodeSpec>,
    /// The addresses.
    #[serde(default)]
    pub status: Option<NodeStatus>,
}

resource!(Node, ClusterResourceScope, "Node", "", "v1", "nodes");

impl From<&core::Node> for Node {
    fn from(n: &core::Node) -> Self {
        Self {
            metadata: lean(&n.metadata),
            spec: n.spec.as_ref().map(|s| NodeSpec {
                taints: s
                    .taints
                    .as_ref()
                    .map(|t| t.iter().map(|t| TaintKey { key: t.key.clone() }).collect()),
            }),
            status: n.status.as_ref().map(|s| NodeStatus {
                addresses: s.addresses.clone(),
            }),
        }
    }
}

/// The part of a ServiceCIDR's spec the proxy reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceCidrSpec {
    /// The ranges (`spec.cidrs`): at most one per IP family.
    #[serde(default)]
    pub cidrs: Option<Vec<String>>,
}

/// A ServiceCIDR (`networking.k8s.io/v1`, GA in Kubernetes 1.33): a range
/// the cluster allocates Service IPs from. Its status is skipped.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceCidr {
    /// Name and resourceVersion only.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    /// The ranges.
    #[serde(default)]
    pub spec: Option<ServiceCidrSpec>,
}

resource!(
    ServiceCidr,
    ClusterResourceScope,
    "ServiceCIDR",
    "networking.k8s.io",
    "v1",
    "servicecidrs"
);

impl From<&k8s_openapi::api::networking::v1::ServiceCIDR> for ServiceCidr {
    fn from(c: &k8s_openapi::api::networking::v1::ServiceCIDR) -> Self {
        Self {
            metadata: lean(&c.metadata),
            spec: c.spec.as_ref().map(|s| ServiceCidrSpec {
                cidrs: s.cidrs.clone(),
            }),
        }
    }
}
