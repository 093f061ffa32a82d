//! Test support for kpng-rs crates and for backends built on them.
//!
//! - [`Cluster`] builds deterministic synthetic cluster states of any size
//!   (Services, endpoints spread over nodes and zones), for tests and
//!   benchmarks.
//! - [`RecordingSink`] is a [`kpng_sink::Sink`] that records every round
//!   and can be told to fail, for testing drivers.
//! - [`CountingAllocator`] counts live heap bytes, for memory benchmarks.
//! - [`bpf`]: a bpf file system, a cgroup and a network namespace of a
//!   test's own, removed on drop, for eBPF data-path tests.
//! - [`memory`]: a memory cgroup of a test's own (cgroup v2 or v1): a
//!   limit, the usage, the peak and the OOM kills of what runs in it.
//! - `apiserver` (feature `apiserver`): a test apiserver that speaks the
//!   Kubernetes list/watch protocol on a loopback port, from a script.
//! - `history` (feature `history`): random histories of a small cluster,
//!   proptest strategies for property tests of backends.
//! - `world` (feature `world`): a cluster at scale (100k Services × 10
//!   endpoints, 10k × 100, a realistic mix) as Kubernetes JSON objects,
//!   for the test apiserver and for manifest files.
//!
//! # Example
//!
//! ```
//! use kpng_testkit::{Cluster, ClusterShape};
//!
//! let cluster = Cluster::synthetic(ClusterShape { services: 10, endpoints: 30, ..Default::default() });
//! assert_eq!(cluster.services.len(), 10);
//! assert_eq!(cluster.endpoints.len(), 30);
//! ```

#[cfg(feature = "apiserver")]
pub mod apiserver;
pub mod bpf;
mod counting;
#[cfg(feature = "history")]
pub mod history;
pub mod memory;
pub mod semantics;
#[cfg(feature = "world")]
pub mod world;

pub use counting::{CountingAllocator, proc_status_kib};

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use kpng_model::endpoint::{Interner, PortInfo, PortList};
use kpng_model::v1::{IpSet, Node, Protocol, Service, ServicePort, ServiceType};
use kpng_model::view::NodeView;
use kpng_model::{EndpointInfo, ServiceName};
use kpng_sink::{Round, Sink, SinkError};

/// The size of a synthetic cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterShape {
    /// Number of Services.
    pub services: usize,
    /// Endpoints in all, spread over the Services round-robin (so with
    /// 1,000 Services and 1,500 endpoints, half the Services have two).
    pub endpoints: usize,
    /// Number of nodes; endpoints are spread over them round-robin.
    pub nodes: usize,
    /// Number of zones; nodes are spread over them round-robin.
    pub zones: usize,
}

impl Default for ClusterShape {
    fn default() -> Self {
        Self {
            services: 100,
            endpoints: 1000,
            nodes: 10,
            zones: 3,
        }
    }
}

/// A synthetic cluster state, as ENLS values.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// The Services.
    pub services: Vec<Service>,
    /// The endpoints and their Services; endpoints share their node,
    /// zone and port lists, as ingest makes them.
    pub endpoints: Vec<(ServiceName, EndpointInfo)>,
    /// The nodes, named `node-0`, `node-1`, …
    pub nodes: Vec<Node>,
}

/// The IPv4 address number `n` above `base`.
fn v4(base: Ipv4Addr, n: usize) -> IpAddr {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    IpAddr::V4(Ipv4Addr::from(u32::from(base).wrapping_add(n)))
}

impl Cluster {
    /// The fan-out benches' cluster: `services` Services × 10 endpoints
    /// over `nodes` nodes in 3 zones, each endpoint on a node drawn by a
    /// hash of its number (`synthetic` deals them round-robin), so that a
    /// node holds endpoints of many Services.
    pub fn fanout(services: usize, nodes: usize) -> Self {
        let mut cluster = Self::synthetic(ClusterShape {
            services,
            endpoints: services * 10,
            nodes,
            zones: 3,
        });
        let mut interner = kpng_model::endpoint::Interner::new();
        for (n, (_, endpoint)) in cluster.endpoints.iter_mut().enumerate() {
            let node = &cluster.nodes[n.wrapping_mul(2_654_435_761) % cluster.nodes.len()];
            *endpoint = endpoint
                .to_builder()
                .node(&node.name, &node.zone)
                .intern(&mut interner);
        }
        cluster
    }

    /// Writes every node, Service and endpoint into `store` as one
    /// transaction, each Service's endpoints as one list (as ingest does).
    pub fn load_into(&self, store: &mut kpng_store::Store) {
        let mut txn = store.begin();
        for n in &self.nodes {
            txn.set_node(n.clone());
        }
        for s in &self.services {
            txn.set_service(kpng_model::ServiceInfo::new(s.clone()).expect("a valid Service"));
        }
        // Each Service's endpoints as one list, sized to fit, as ingest
        // writes an EndpointSlice.
        let mut lists: std::collections::BTreeMap<&ServiceName, Vec<EndpointInfo>> =
            std::collections::BTreeMap::new();
        for (name, e) in &self.endpoints {
            lists.entry(name).or_default().push(e.clone());
        }
        for (name, mut list) in lists {
            list.sort_by_key(EndpointInfo::address);
            list.dedup_by_key(|e| e.address());
            list.shrink_to_fit();
            // Sorted and de-duplicated above: the list is accepted.
            let written = txn.replace_endpoints(name, &Arc::new(list));
            debug_assert!(written.is_ok(), "{written:?}");
        }
        txn.commit();
    }

    /// Builds a cluster of the given shape. Deterministic: the same shape
    /// gives equal values. Services are made by [`Cluster::service`].
    pub fn synthetic(shape: ClusterShape) -> Self {
        let nodes = (0..shape.nodes.max(1))
            .map(|i| Node {
                name: format!("node-{i}"),
                zone: format!("zone-{}", i % shape.zones.max(1)),
                region: "region-0".into(),
                addresses: Some(IpSet::from_addrs([v4(
                    Ipv4Addr::new(192, 168, 0, 0),
                    i + 1,
                )])),
                terminating: false,
            })
            .collect::<Vec<_>>();
        let mut cluster = Cluster {
            nodes,
            ..Default::default()
        };
        cluster.services = (0..shape.services).map(Self::service).collect();
        let names: Vec<ServiceName> = cluster.services.iter().map(Service::service_name).collect();
        if !names.is_empty() {
            let mut interner = Interner::new();
            for n in 0..shape.endpoints {
                let s = n % names.len();
                let node = &cluster.nodes[n % cluster.nodes.len()];
                let ip = v4(Ipv4Addr::new(10, 128, 0, 0), n + 1);
                let endpoint = Self::endpoint(ip, node, &cluster.services[s], &mut interner);
                cluster.endpoints.push((names[s].clone(), endpoint));
            }
        }
        cluster
    }

    /// Synthetic Service number `i`. Services alternate between ClusterIP,
    /// NodePort and LoadBalancer up to number 900, with unique node ports;
    /// later ones are ClusterIP. Every Service has an `http` TCP port, every
    /// third a `dns` UDP port too.
    pub fn service(i: usize) -> Service {
        let mut ports = vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp as i32,
            port: 80,
            target_port: Some(kpng_model::v1::service_port::TargetPort::TargetPortName(
                "web".into(),
            )),
            ..Default::default()
        }];
        if i.is_multiple_of(3) {
            ports.push(ServicePort {
                name: "dns".into(),
                protocol: Protocol::Udp as i32,
                port: 53,
                target_port: Some(kpng_model::v1::service_port::TargetPort::TargetPortNumber(
                    5353,
                )),
                ..Default::default()
            });
        }
        // Node ports are unique cluster-wide and the default range holds
        // 2,768: only the first 900 Services (at most 1,200 ports) may be
        // NodePort or LoadBalancer; the rest are ClusterIP.
        let r#type = match i % 3 {
            _ if i >= 900 => ServiceType::ClusterIp,
            0 => ServiceType::ClusterIp,
            1 => ServiceType::NodePort,
            _ => ServiceType::LoadBalancer,
        };
        if r#type != ServiceType::ClusterIp {
            for (k, p) in ports.iter_mut().enumerate() {
                p.node_port = 30000 + u32::try_from(i * 2 + k).unwrap_or(0);
            }
        }
        Service {
            namespace: format!("ns-{}", i % 50),
            name: format!("svc-{i}"),
            r#type: r#type as i32,
            cluster_ips: Some(IpSet::from_addrs([v4(Ipv4Addr::new(10, 96, 0, 0), i + 1)])),
            load_balancer_ips: (r#type == ServiceType::LoadBalancer)
                .then(|| Box::new(IpSet::from_addrs([v4(Ipv4Addr::new(172, 30, 0, 0), i + 1)]))),
            ports,
            ..Default::default()
        }
    }

    /// A ready endpoint at `ip` on `node`, serving every port of `service`
    /// (at the port number + 8000), its parts shared through `interner`.
    pub fn endpoint(
        ip: IpAddr,
        node: &Node,
        service: &Service,
        interner: &mut Interner,
    ) -> EndpointInfo {
        let ports = service.ports.iter().map(|p| {
            let protocol = Protocol::try_from(p.protocol).unwrap_or(Protocol::Tcp);
            let port = u16::try_from(p.port + 8000).unwrap_or(u16::MAX);
            PortInfo::new(&p.name, protocol, port)
        });
        EndpointInfo::builder(ip)
            .node(&node.name, &node.zone)
            .ports(PortList::new(ports))
            .intern(interner)
    }
}

/// One round a [`RecordingSink`] received.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// The round's revision.
    pub revision: u64,
    /// Whether it was full.
    pub full: bool,
    /// The Services it listed, in order: `true` when set, `false` when
    /// removed.
    pub services: Vec<(ServiceName, bool)>,
    /// The view it led to (an O(1) copy of the driver's).
    pub view: NodeView,
}

/// A [`Sink`] that records the rounds it receives and can be told to
/// fail.
#[derive(Clone, Debug, Default)]
pub struct RecordingSink {
    /// Every round so far, in order (failed ones too).
    pub rounds: Vec<Recorded>,
    /// How many of the next rounds fail.
    pub fail_syncs: usize,
}

impl RecordingSink {
    /// Takes every round recorded so far, leaving the record empty.
    pub fn take(&mut self) -> Vec<Recorded> {
        std::mem::take(&mut self.rounds)
    }
}

impl Sink for RecordingSink {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.rounds.push(Recorded {
            revision: round.revision(),
            full: round.is_full(),
            services: round
                .services()
                .map(|c| (c.name.clone(), c.after.is_some()))
                .collect(),
            view: round.view().clone(),
        });
        if self.fail_syncs > 0 {
            self.fail_syncs -= 1;
            return Err(SinkError::backend("recording", "told to fail"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_deterministic_and_shaped() {
        let shape = ClusterShape {
            services: 7,
            endpoints: 14,
            nodes: 3,
            zones: 2,
        };
        let a = Cluster::synthetic(shape);
        let b = Cluster::synthetic(shape);
        assert_eq!(a.services, b.services);
        assert_eq!(a.endpoints.len(), 14);
        assert_eq!(a.nodes.len(), 3);
        assert_eq!(a.nodes[2].zone, "zone-0");
        let ids: std::collections::BTreeSet<_> =
            a.endpoints.iter().map(|e| e.1.address()).collect();
        assert_eq!(ids.len(), 14, "endpoint addresses are unique");
    }

    #[test]
    fn recording_sink_fails_when_told() {
        let mut sink = RecordingSink {
            fail_syncs: 1,
            ..Default::default()
        };
        let view = |revision| NodeView {
            revision,
            ..Default::default()
        };
        assert!(sink.sync(&Round::full(&view(1))).is_err());
        assert!(sink.sync(&Round::full(&view(2))).is_ok());
        let revisions: Vec<_> = sink.take().iter().map(|r| (r.revision, r.full)).collect();
        assert_eq!(revisions, [(1, true), (2, true)]);
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
