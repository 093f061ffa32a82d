//! Explains what a kpng-rs proxy does with one packet on one node.
//!
//! Given the cluster state (a store [`Snapshot`]), a node, the proxy's
//! settings ([`Setup`]) and a [`Packet`] (source, destination, port,
//! protocol; from a pod on the node, from the node itself or from
//! outside), [`explain`] says, step by step and with the reason for
//! each, what the node's rules do with it:
//!
//! - the Service and port it hits, and as what (ClusterIP, externalIP, LB
//!   IP, NodePort);
//! - the traffic policy that applies, and the endpoint set it picks;
//! - every candidate endpoint, used or not, and why (ready, topology
//!   hints, the terminating fallback, local or not);
//! - ClientIP affinity;
//! - masquerade or not, and why;
//! - or a reject or a drop, and why (no endpoint, source ranges, an
//!   unallocated Service CIDR address, an unknown port, ipMode Proxy).
//!
//! The endpoint choice is `kpng-view`'s own ([`kpng_view::selection`]),
//! so what is explained is what the node view holds; the data-plane
//! steps follow the backends' rules (docs/reference/semantics.md), for netfilter
//! (nftables, iptables) or the eBPF programs ([`DataPath`]). The lab
//! (`kpng-lab`) checks every answer against real packets.
//!
//! # Example
//!
//! ```
//! use kpng_explain::{DataPath, Origin, Outcome, Packet, Protocol, Setup, explain};
//! use kpng_kube::{Ingest, IngestConfig, file};
//! use kpng_store::Store;
//!
//! let manifest = r#"
//! apiVersion: v1
//! kind: List
//! items:
//! - {apiVersion: v1, kind: Node, metadata: {name: node-a}}
//! - apiVersion: v1
//!   kind: Service
//!   metadata: {namespace: t, name: web}
//!   spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
//! - apiVersion: discovery.k8s.io/v1
//!   kind: EndpointSlice
//!   metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}
//!   addressType: IPv4
//!   endpoints: [{addresses: [10.244.2.10], nodeName: node-b}]
//!   ports: [{name: http, port: 8080, protocol: TCP}]
//! "#;
//! let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
//! ingest.load(&file::parse_str("cluster.yaml", manifest)?);
//! let snapshot = ingest.reader().snapshot();
//!
//! let setup = Setup::new(
//!     kpng_sink::ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]),
//!     DataPath::Nftables,
//! );
//! let packet = Packet::new(
//!     Origin::Pod,
//!     Protocol::Tcp,
//!     "10.244.1.99".parse()?,
//!     "10.96.0.10".parse()?,
//!     80,
//! );
//! let explained = explain(&snapshot, "node-a", &setup, &packet)?;
//! let Outcome::Translated { endpoints, masquerade, .. } = &explained.outcome else {
//!     panic!("{explained}");
//! };
//! assert_eq!(endpoints[0].ip.to_string(), "10.244.2.10");
//! assert_eq!(masquerade, &kpng_explain::Masquerade::No);
//! println!("{explained}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod explanation;
mod packet;
mod render;
mod run;

pub use explanation::{
    Balancing, EndpointReason, Explanation, Masquerade, Mechanism, Outcome, Role, Target,
};
pub use packet::{DataPath, Origin, Packet, Protocol, Setup, TcRoutes};

use std::net::IpAddr;

use kpng_model::IpFamily;
use kpng_store::Snapshot;

use run::Run;

/// What can go wrong before anything is explained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source and destination are not of one IP family.
    #[error("the source {from} and the destination {destination} are not of one IP family")]
    MixedFamilies {
        /// The source.
        from: IpAddr,
        /// The destination.
        destination: IpAddr,
    },
    /// The node has no Node object in the state: a mistyped name, most
    /// likely.
    #[error("node {node:?} is not in the cluster state (its nodes: {known})")]
    UnknownNode {
        /// The name given.
        node: String,
        /// The nodes the state has, the first few.
        known: String,
    },
    /// A word that names no protocol.
    #[error("unknown protocol {0:?}: tcp, udp or sctp")]
    Protocol(String),
    /// A word that names no origin.
    #[error("unknown origin {0:?}: pod, host or outside")]
    Origin(String),
}

/// Explains what node `node`, programmed from `snapshot` with `setup`,
/// does with `packet`.
///
/// # Errors
/// [`Error::MixedFamilies`] when the packet's addresses are of two
/// families; [`Error::UnknownNode`] when the state has no Node object of
/// that name.
pub fn explain(
    snapshot: &Snapshot,
    node: &str,
    setup: &Setup,
    packet: &Packet,
) -> Result<Explanation, Error> {
    let family = IpFamily::of(&packet.destination);
    if IpFamily::of(&packet.source) != family {
        return Err(Error::MixedFamilies {
            from: packet.source,
            destination: packet.destination,
        });
    }
    if snapshot.node(node).is_none() {
        let known: Vec<String> = snapshot.nodes().take(5).map(|n| n.name.clone()).collect();
        return Err(Error::UnknownNode {
            node: node.to_owned(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    }
    let view = kpng_view::node_view(snapshot, node);
    Ok(Run::new(snapshot, node, setup, packet, family, &view).explain())
}
