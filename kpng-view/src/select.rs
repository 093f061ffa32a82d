//! kube-proxy's endpoint selection, applied to one Service for one node.
//!
//! The rules follow kube-proxy (`pkg/proxy/topology.go`,
//! `CategorizeEndpoints`); each is cited where it is implemented.

use std::borrow::Cow;
use std::net::IpAddr;

use kpng_model::view::{EndpointView, ServiceView};
use kpng_model::{EndpointInfo, IpFamily, ServiceName};
use kpng_store::Snapshot;

/// What the selection needs to know about the node it runs for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeContext<'a> {
    /// This node's name: endpoints with this `nodeName` are local, and node
    /// hints name it.
    pub(crate) name: &'a str,
    /// This node's `topology.kubernetes.io/zone`, or empty when unknown.
    pub(crate) zone: &'a str,
}

struct Candidate<'a> {
    ip: IpAddr,
    /// The endpoint as this node uses it: its copy on this node, when
    /// slices list its address more than once.
    endpoint: Cow<'a, EndpointInfo>,
    is_local: bool,
}

impl Candidate<'_> {
    /// Ready, and serving: "endpoints that are not serving are never used"
    /// holds even for an inconsistent slice claiming ready but not serving.
    fn ready(&self) -> bool {
        self.endpoint.ready() && self.endpoint.serving()
    }

    /// The fallback class: serving and terminating (KEP-1669).
    fn serving_terminating(&self) -> bool {
        self.endpoint.serving() && self.endpoint.terminating()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Topology {
    None,
    Zone,
    Node,
}

/// Decides whether topology hints apply (kube-proxy `canUseTopology`):
/// only ready endpoints are considered; node hints (PreferSameNode) win
/// when every ready endpoint has node hints and one names this node; else
/// zone hints apply when every ready endpoint has zone hints and one names
/// this node's zone; else there is no filtering.
fn topology(candidates: &[Candidate<'_>], node: NodeContext<'_>) -> Topology {
    let mut all_node_hints = true;
    let mut node_match = false;
    let mut all_zone_hints = true;
    let mut zone_match = false;
    let mut any_ready = false;
    for c in candidates.iter().filter(|c| c.ready()) {
        any_ready = true;
        let ep = &c.endpoint;
        if ep.hint_nodes().is_empty() {
            all_node_hints = false;
        } else if !node.name.is_empty() && ep.hint_nodes().iter().any(|n| &**n == node.name) {
            node_match = true;
        }
        if ep.hint_zones().is_empty() {
            all_zone_hints = false;
        } else if !node.zone.is_empty() && ep.hint_zones().iter().any(|z| &**z == node.zone) {
            zone_match = true;
        }
    }
    if any_ready && all_node_hints && node_match {
        Topology::Node
    } else if any_ready && all_zone_hints && zone_match {
        Topology::Zone
    } else {
        Topology::None
    }
}

fn hinted_here(c: &Candidate<'_>, mode: Topology, node: NodeContext<'_>) -> bool {
    match mode {
        Topology::None => true,
        Topology::Zone => c.endpoint.hint_zones().iter().any(|z| &**z == node.zone),
        Topology::Node => c.endpoint.hint_nodes().iter().any(|n| &**n == node.name),
    }
}

/// The decisions of one family's selection: which candidates each policy
/// uses, and why as a whole (the topology filter, the fallbacks).
struct Choice {
    mode: Topology,
    cluster: Vec<bool>,
    /// No ready endpoint passed: the serving-and-terminating ones are used.
    cluster_fallback: bool,
    local: Vec<bool>,
    /// No local ready endpoint: the local serving-and-terminating ones.
    local_fallback: bool,
}

fn choose(candidates: &[Candidate<'_>], node: NodeContext<'_>) -> Choice {
    // Cluster policy: ready endpoints, topology-filtered; when none is ready
    // anywhere, every serving-and-terminating endpoint, ignoring topology.
    let mode = topology(candidates, node);
    let mut cluster: Vec<bool> = candidates
        .iter()
        .map(|c| c.ready() && hinted_here(c, mode, node))
        .collect();
    let cluster_fallback = !cluster.contains(&true);
    if cluster_fallback {
        cluster = candidates
            .iter()
            .map(Candidate::serving_terminating)
            .collect();
    }

    // Local policy: ready endpoints on this node; when none is, the
    // serving-and-terminating endpoints on this node.
    let local_ready = candidates.iter().any(|c| c.is_local && c.ready());
    let local = candidates
        .iter()
        .map(|c| {
            c.is_local
                && if local_ready {
                    c.ready()
                } else {
                    c.serving_terminating()
                }
        })
        .collect();
    Choice {
        mode,
        cluster,
        cluster_fallback,
        local,
        local_fallback: !local_ready,
    }
}

/// Selects the endpoints of one family and appends to `out` the used
/// ones, and those serving but unused here (a terminating endpoint while
/// ready ones remain, one topology hints send elsewhere) in neither set:
/// a sink can then tell an endpoint that still serves, whose connections
/// drain, from one that left.
fn select_family(candidates: &[Candidate<'_>], node: NodeContext<'_>, out: &mut Vec<EndpointView>) {
    let choice = choose(candidates, node);
    for ((c, cluster), local) in candidates.iter().zip(choice.cluster).zip(choice.local) {
        if cluster || local || c.endpoint.serving() {
            // A candidate's address is one of its endpoint's.
            if let Some(view) = EndpointView::at(c.endpoint.as_ref().clone(), c.ip) {
                out.push(
                    view.with_is_local(c.is_local)
                        .with_cluster(cluster)
                        .with_local(local),
                );
            }
        }
    }
}

/// How kube-proxy's topology rules applied to one family of a Service on
/// a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyFilter {
    /// No filter: some ready endpoint has no hint, or none names this
    /// node or its zone (or no endpoint is ready).
    None,
    /// Zone hints: every ready endpoint has one, and one names this
    /// node's zone.
    Zone(String),
    /// Node hints (PreferSameNode): every ready endpoint has one, and one
    /// names this node.
    Node(String),
}

/// One candidate endpoint of a [`FamilySelection`], and what each policy
/// made of it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CandidateUse {
    /// The endpoint, as the store holds it.
    pub endpoint: EndpointInfo,
    /// Its address in this family (its first).
    pub ip: IpAddr,
    /// On this node.
    pub is_local: bool,
    /// Used by the cluster policy (`Cluster` traffic policies).
    pub cluster: bool,
    /// Used by the local policy (`Local` traffic policies).
    pub local: bool,
}

/// The selection of one IP family of a Service on a node, with what led
/// to it: the same decisions [`NodeProjector`](crate::NodeProjector)
/// takes, kept for explaining them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FamilySelection {
    /// The family.
    pub family: IpFamily,
    /// The topology filter of the cluster policy.
    pub topology: TopologyFilter,
    /// No ready endpoint passed the cluster policy: it uses the serving
    /// and terminating endpoints, hints ignored.
    pub cluster_fallback: bool,
    /// No local endpoint is ready: the local policy uses the local serving
    /// and terminating ones.
    pub local_fallback: bool,
    /// Every endpoint with an address in this family, in the store's
    /// order.
    pub candidates: Vec<CandidateUse>,
}

/// A Service's endpoint selection on one node, with the reasons: see
/// [`selection`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Selection {
    /// The Service's view on the node, as the node view holds it.
    pub view: ServiceView,
    /// The node's zone (empty when unknown).
    pub zone: String,
    /// Per family, IPv4 first.
    pub families: Vec<FamilySelection>,
}

/// The endpoint selection of Service `name` on node `node_name` at
/// `snapshot`, with what led to each choice (the topology filter, the
/// fallbacks, every candidate and the policies that use it): for
/// explaining what the node does. `None` when the snapshot has no such
/// Service. Its [`view`](Selection::view) is the node view's.
pub fn selection(snapshot: &Snapshot, name: &ServiceName, node_name: &str) -> Option<Selection> {
    let zone = snapshot
        .node(node_name)
        .map_or(String::new(), |n| n.zone.clone());
    let node = NodeContext {
        name: node_name,
        zone: &zone,
    };
    let view = project_service(snapshot, name, node)?;
    let mut families = Vec::new();
    for family in IpFamily::BOTH {
        let mut candidates = Vec::new();
        self::candidates(snapshot, name, family, node, &mut candidates);
        let choice = choose(&candidates, node);
        families.push(FamilySelection {
            family,
            topology: match choice.mode {
                Topology::None => TopologyFilter::None,
                Topology::Zone => TopologyFilter::Zone(zone.clone()),
                Topology::Node => TopologyFilter::Node(node_name.to_owned()),
            },
            cluster_fallback: choice.cluster_fallback,
            local_fallback: choice.local_fallback,
            candidates: candidates
                .iter()
                .zip(choice.cluster)
                .zip(choice.local)
                .map(|((c, cluster), local)| CandidateUse {
                    endpoint: c.endpoint.as_ref().clone(),
                    ip: c.ip,
                    is_local: c.is_local,
                    cluster,
                    local,
                })
                .collect(),
        });
    }
    Some(Selection {
        view,
        zone,
        families,
    })
}

/// The candidates of one family: each endpoint's first address in it.
///
/// Of an address that EndpointSlices list more than once, the copy on
/// this node is used when there is one (kube-proxy's EndpointSliceCache
/// favours the local copy), else the first copy: the rule is applied here,
/// where the node is known, so that a node-local proxy and a server
/// projecting for every node agree (see [`EndpointInfo::for_node`]).
fn candidates<'a>(
    snapshot: &'a Snapshot,
    name: &ServiceName,
    family: IpFamily,
    node: NodeContext<'_>,
    out: &mut Vec<Candidate<'a>>,
) {
    out.extend(snapshot.endpoints(name).iter().filter_map(|stored| {
        let endpoint = stored.for_node(node.name);
        // Only the first address of an endpoint is used, per family.
        let ip = endpoint.address_in(family)?;
        let is_local = !node.name.is_empty() && endpoint.node_name() == node.name;
        Some(Candidate {
            ip,
            endpoint,
            is_local,
        })
    }));
}

/// Projects one Service of `snapshot` onto the node: `None` when the
/// snapshot has no such Service.
pub(crate) fn project_service(
    snapshot: &Snapshot,
    name: &ServiceName,
    node: NodeContext<'_>,
) -> Option<ServiceView> {
    let service = snapshot.service(name)?;
    let mut view = ServiceView::new(service.clone());
    let mut candidates = Vec::new();
    for family in IpFamily::BOTH {
        candidates.clear();
        self::candidates(snapshot, name, family, node, &mut candidates);
        select_family(&candidates, node, &mut view.endpoints);
    }
    view.endpoints.sort_by_key(EndpointView::ip);
    // Endpoints are de-duplicated by address; keep the first copy.
    view.endpoints.dedup_by(|a, b| a.ip() == b.ip());
    // Views are kept: no growth slack.
    view.endpoints.shrink_to_fit();
    Some(view)
}
