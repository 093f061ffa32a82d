//! Build a Kubernetes Service proxy of your own: a kube-proxy for your
//! data plane, with kube-proxy's Service semantics already decided.
//!
//! ```text
//! [API | file | kpng server] -> Source -> store (ENLS) -> node view -> Round -> your Sink -> kernel
//! ```
//!
//! A proxy is a [`Proxy`]: the node it serves (named once), a [`Source`]
//! of the cluster's state, and a [`Sink`] that programs the node. A sink
//! implements one method, [`Sink::sync`], which receives a [`Round`]: the
//! node's whole view (every Service with the endpoints this node may use,
//! already selected by kube-proxy's rules: traffic policies, topology,
//! terminating endpoints) and what changed since the last round. The
//! [plan](ServicePlan) of a Service says what to program for it, port by
//! port.
//!
//! # A proxy in a few lines
//!
//! ```
//! use kpng::{IpFamily, Proxy, Round, Sink, SinkError, Source};
//!
//! /// Your data plane: here, a line per Service port.
//! struct Print;
//! impl Sink for Print {
//!     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
//!         for (name, service) in &round.view().services {
//!             let plan = service.plan(IpFamily::V4);
//!             for port in &plan.ports {
//!                 println!("{name} {:?} {}/{} -> {:?}", plan.cluster_ips, port.number, port.protocol, port.cluster);
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[cfg(feature = "file")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! // The bundled sample cluster (feature `file`); `Source::kube(client)`
//! // for a real one (feature `kube`).
//! Proxy::new("node-a").source(Source::sample()).sink(Print).once().await?;
//! # Ok::<(), kpng::Error>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Features
//!
//! The concepts a backend needs are at the root and always there, with
//! no feature (no Kubernetes client, no kernel crate): `cargo add kpng`
//! is all a backend crate needs. Each source, backend and companion is a
//! feature, none of them on by default (docs.rs marks the items that
//! need one):
//!
//! | feature | what it adds |
//! |---|---|
//! | `file` | [`Source::file`], [`Source::watched_file`], [`Source::sample`] |
//! | `kube` | [`Source::kube`]; the [`kube`] client, re-exported; `file` with it |
//! | `agent` | [`Proxy::server`]: a node's view from a kpng server |
//! | `server` | [`server`]: serve the ENLS to node agents over gRPC |
//! | `nft`, `iptables`, `ebpf` | the reference backends: [`nft`], [`iptables`], [`ebpf`] |
//! | `health` | [`health`]: `/healthz`, health-check node ports, metrics; [`Proxy::conditions`] |
//! | `aggregator` | [`aggregator`]: several producers, one atomic apply; [`netfilter`] to build their tables (also with `nft`, `iptables`) |
//! | `conntrack` | [`conntrack`]: UDP conntrack cleanup |
//! | `explain` | [`explain`]: what a node does with one packet, and why |
//! | `full` | all of the above |
//!
//! Each part is also a crate of its own (`kpng-store`, `kpng-view`,
//! `kpng-sink`, …), for those who want one piece; this crate re-exports
//! them whole under the module names below.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod node;
mod proxy;
mod source;

pub use node::NODE_CONDITION;
pub use proxy::{NoSink, Proxy};
pub use source::{Feed, Source};

// The concepts, at the root.
pub use kpng_drive::{DriveConfig, GuardConfig, Guarded, HoldStatus, drive};
pub use kpng_model::view::{NodeView, PortPlan, ServicePlan, ServiceView};
pub use kpng_model::{EndpointInfo, IpFamily, Kind, ServiceInfo, ServiceName};
pub use kpng_sink::{
    Changes, Hook, Log, ProxyConfig, Round, RoundReport, ServiceChange, Sink, SinkError, SinkExt,
    SyncStats,
};
pub use kpng_store::{Reader, Snapshot, Store};
pub use kpng_view::NodeProjector;

/// The ENLS: the protobuf model of what nodes must do (`kpng-model`).
pub mod model {
    pub use kpng_model::*;
}

/// Persistent maps with numbered revisions and cheap snapshots
/// (`kpng-store`).
pub mod store {
    pub use kpng_store::*;
}

/// kube-proxy's endpoint selection for one node, kept up to date
/// (`kpng-view`).
pub mod view {
    pub use kpng_view::*;
}

/// The sink contract: rounds, hooks and composition (`kpng-sink`).
pub mod sink {
    pub use kpng_sink::*;
}

/// Driving rounds over time, and the guard against losing everything
/// (`kpng-drive`).
pub mod driver {
    pub use kpng_drive::*;
}

/// Kubernetes objects into the ENLS: the ingest, manifest files and the
/// API's watch (`kpng-kube`).
#[cfg(any(feature = "file", feature = "kube"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "file", feature = "kube"))))]
pub mod ingest {
    pub use kpng_kube::*;
}

/// The Kubernetes client crate, as the [`Source::kube`] source uses it.
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
pub use kube;

/// The ENLS over gRPC: the server, the agent, the fleet view
/// (`kpng-api`).
#[cfg(any(feature = "agent", feature = "server"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "agent", feature = "server"))))]
pub mod server {
    pub use kpng_api::*;
}

/// The nftables backend (`kpng-backend-nft`).
#[cfg(feature = "nft")]
#[cfg_attr(docsrs, doc(cfg(feature = "nft")))]
pub mod nft {
    pub use kpng_backend_nft::*;
}

/// The iptables backend (`kpng-backend-iptables`).
#[cfg(feature = "iptables")]
#[cfg_attr(docsrs, doc(cfg(feature = "iptables")))]
pub mod iptables {
    pub use kpng_backend_iptables::*;
}

/// The eBPF backend (`kpng-backend-ebpf`).
#[cfg(feature = "ebpf")]
#[cfg_attr(docsrs, doc(cfg(feature = "ebpf")))]
pub mod ebpf {
    pub use kpng_backend_ebpf::*;
}

/// What runs beside a backend: `/healthz`, health-check node ports,
/// Prometheus metrics (`kpng-health`).
#[cfg(feature = "health")]
#[cfg_attr(docsrs, doc(cfg(feature = "health")))]
pub mod health {
    pub use kpng_health::*;
}

/// Several producers, one rate-limited atomic apply
/// (`kpng-aggregator`).
#[cfg(feature = "aggregator")]
#[cfg_attr(docsrs, doc(cfg(feature = "aggregator")))]
pub mod aggregator {
    pub use kpng_aggregator::*;
}

/// The kernel side: nf_tables over netlink, the iptables restore engine,
/// the node's addresses (`kpng-netfilter`).
#[cfg(any(feature = "nft", feature = "iptables", feature = "aggregator"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "nft", feature = "iptables", feature = "aggregator")))
)]
pub mod netfilter {
    pub use kpng_netfilter::*;
}

/// UDP conntrack cleanup after endpoint changes (`kpng-conntrack`).
#[cfg(feature = "conntrack")]
#[cfg_attr(docsrs, doc(cfg(feature = "conntrack")))]
pub mod conntrack {
    pub use kpng_conntrack::*;
}

/// What one node does with one packet, step by step (`kpng-explain`).
#[cfg(feature = "explain")]
#[cfg_attr(docsrs, doc(cfg(feature = "explain")))]
pub mod explain {
    pub use kpng_explain::*;
}

/// Why a proxy could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The proxy was given no source.
    #[error("the proxy has no source: give it one with .source(…) or .server(…)")]
    NoSource,
    /// A sync failed (only a one-shot sync returns it; a running proxy
    /// retries).
    #[error(transparent)]
    Sync(#[from] SinkError),
    /// A manifest could not be read or translated, or the API watch gave
    /// up.
    #[cfg(any(feature = "file", feature = "kube"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "file", feature = "kube"))))]
    #[error(transparent)]
    Ingest(#[from] kpng_kube::Error),
    /// No Kubernetes client could be made.
    #[cfg(feature = "kube")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
    #[error("kubernetes client: {0}")]
    Kube(String),
    /// The API watch ended without an error (it follows for ever).
    #[error("the Kubernetes watch ended")]
    WatchEnded,
    /// The task that filled the store failed.
    #[error("the source's task failed: {0}")]
    Task(String),
    /// The kpng server could not be followed.
    #[cfg(any(feature = "agent", feature = "server"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "agent", feature = "server"))))]
    #[error(transparent)]
    Api(#[from] kpng_api::Error),
}
