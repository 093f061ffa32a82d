//! The node view of kpng-rs: the ENLS projected onto one node with
//! kube-proxy's endpoint selection rules.
//!
//! - **One node.** [`node_view`] projects a store snapshot onto a node;
//!   [`NodeProjector`] keeps that view up to date revision after revision
//!   in O(changed Services), and yields
//!   [`ViewOp`](kpng_model::view::ViewOp)s ([`NodeProjector::update`]) or
//!   hands a sink one [`Round`](kpng_sink::Round) per change
//!   ([`NodeProjector::sync_into`]). What changed between two views is
//!   [`Changes::between`](kpng_sink::Changes::between), and their ops
//!   [`Changes::ops`](kpng_sink::Changes::ops). No backend ever
//!   re-implements the rules.
//! - **Many nodes at once.** [`SharedViews`] keeps, per zone, the view a
//!   node with nothing of its own would have, and builds each node's view
//!   on it with only the node's own Services added: what a server
//!   streaming thousands of nodes' views holds per node is what is that
//!   node's own ([`SharedNodeView`], [`view_changes`]).
//!
//! All of it is pure: no runtime, no clock. What drives a sink over time
//! (rate limits, retries) is `kpng-drive`'s; the diff between two store
//! snapshots (a replica's or an API client's global watch) is
//! `kpng_store::Snapshot::diff`.
//!
//! # The node view rules
//!
//! Per Service and per IP family (each family is selected on its own):
//!
//! - **Cluster-policy endpoints** are the ready ones, filtered by topology
//!   hints. Hints apply only when every ready endpoint has a hint and one
//!   matches this node: node hints (PreferSameNode) by node name first, then
//!   zone hints by this node's zone. When no endpoint is ready, the
//!   endpoints that are serving and terminating are used, ignoring hints.
//! - **Local-policy endpoints** are the ready endpoints on this node; when
//!   there are none, this node's serving and terminating endpoints.
//! - Endpoints that are not serving are never used.
//! - A Service with no usable endpoint anywhere has no cluster-policy
//!   endpoint ([`ServiceView::has_endpoints`](kpng_model::view::ServiceView::has_endpoints)
//!   is false: backends REJECT); one whose endpoints are all elsewhere has
//!   cluster-policy endpoints but no local-policy one (backends DROP Local
//!   traffic).
//!
//! # Example
//!
//! A store with a Service, projected onto `node-a` and synced into a small
//! sink; a change elsewhere that does not alter this node's view makes no
//! round.
//!
//! ```
//! use kpng_model::v1::Service;
//! use kpng_model::{EndpointInfo, IpFamily, ServiceName};
//! use kpng_sink::{Round, Sink, SinkError};
//! use kpng_store::Store;
//! use kpng_view::{NodeProjector, node_view};
//!
//! /// Remembers how many Services the last round's view had.
//! #[derive(Default)]
//! struct Counter { services: usize, rounds: usize }
//!
//! impl Sink for Counter {
//!     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
//!         self.services = round.view().services.len();
//!         self.rounds += 1;
//!         Ok(())
//!     }
//! }
//!
//! let mut store = Store::new();
//! let web = ServiceName::new("default", "web");
//! let endpoint = |node: &str| EndpointInfo::builder([10, 1, 0, 7].into()).node(node, "").build();
//! let mut txn = store.begin();
//! txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
//! txn.set_endpoint(web.clone(), endpoint("node-b"));
//! txn.commit();
//!
//! let mut projector = NodeProjector::new("node-a");
//! let mut sink = Counter::default();
//! let report = projector.sync_into(&store.snapshot(), &mut sink)?.expect("a round");
//! assert!(report.full); // the first round is full
//! assert_eq!((sink.services, sink.rounds), (1, 1));
//! let view = &projector.view().services[&web];
//! assert!(view.has_endpoints(IpFamily::V4));
//! assert_eq!(view.local_endpoints(IpFamily::V4).count(), 0);
//!
//! // The endpoint moves to this node: one incremental round.
//! let mut txn = store.begin();
//! txn.set_endpoint(web.clone(), endpoint("node-a"));
//! txn.commit();
//! let report = projector.sync_into(&store.snapshot(), &mut sink)?.expect("a round");
//! assert!(!report.full);
//! assert_eq!(report.services, 1);
//! assert_eq!(projector.view().services[&web].local_endpoints(IpFamily::V4).count(), 1);
//!
//! // The same view, projected from scratch.
//! assert_eq!(projector.view(), &node_view(&store.snapshot(), "node-a"));
//! // Nothing changed since: no round.
//! assert_eq!(projector.sync_into(&store.snapshot(), &mut sink)?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod node;
mod select;
mod shared;

pub use node::{NodeProjector, node_view};
pub use select::{CandidateUse, FamilySelection, Selection, TopologyFilter, selection};
pub use shared::{SharedNodeView, SharedStats, SharedViews, view_changes};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
