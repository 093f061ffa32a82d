//! Health checks of a kpng-rs proxy, as kube-proxy serves them.
//!
//! - [`HealthCheckServer`] is a [`kpng_sink::Sink`] reading each round's
//!   view: for every
//!   `type: LoadBalancer` Service with `externalTrafficPolicy: Local` and a
//!   `healthCheckNodePort` in the node view, it serves HTTP on that port:
//!   `200` when this node has a local endpoint and the proxy is healthy,
//!   `503` otherwise, with the JSON body load balancers and operators read:
//!   `{"service":{"namespace","name"},"localEndpoints":N,"serviceProxyHealthy":bool}`.
//!   Listeners follow the view: opened, updated in place, and closed.
//! - [`ProxyHealth`] tracks the data plane's syncs and whether this node
//!   is going away; [`Healthy`], a [`kpng_sink::Hook`] around a backend,
//!   feeds it from the backend's rounds, and
//!   [`serve_healthz`] answers `/livez`, `503` once a change has waited
//!   longer than the timeout, and `/healthz`, `503` then too and while the
//!   node is being deleted or carries the `ToBeDeletedByClusterAutoscaler`
//!   taint (KEP-3836), so load balancers stop sending new connections,
//!   and while a named readiness [`Conditions`] entry is set (kpng sets
//!   `node` while no Node object has this node's name),
//!   and while the input is held back ([`ProxyHealth::set_held_back`]: a
//!   mass deletion refused by kpng-drive's guard), the reason in the body.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use kpng_health::ProxyHealth;
//!
//! let health = ProxyHealth::new(Duration::from_secs(60));
//! assert!(!health.healthy(), "not before the first sync");
//! health.queued();
//! health.synced();
//! assert!(health.healthy());
//! ```
//!
//! # Modules
//!
//! - `healthz`: [`ProxyHealth`], [`Conditions`], [`Healthy`] and
//!   [`serve_healthz`];
//! - `ports`: the health-check node ports ([`HealthCheckServer`]);
//! - `addresses`: the node's addresses the ports follow (their changes
//!   come from `kpng_netfilter::addresses`, over rtnetlink);
//! - `companions`: [`Companions`], all of it put around a backend;
//! - [`metrics`]: Prometheus metrics, measured by [`metrics::Measure`],
//!   a hook around a backend.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

mod addresses;
mod companions;
mod healthz;
mod http;
pub mod metrics;
mod ports;

pub use companions::Companions;
pub use healthz::{Conditions, Healthy, ProxyHealth, serve_healthz};
pub use ports::HealthCheckServer;

/// Errors of the health servers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A listener could not be opened.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A thread panicked while it held the listeners' lock.
    #[error("the health check listeners' lock is poisoned")]
    Poisoned,
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
