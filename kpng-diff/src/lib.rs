//! The diff engine of kpng-rs, and the node view.
//!
//! Two things live here:
//!
//! - **The global diff.** [`diff`] returns the minimal ordered [`Op`]s
//!   (sets and deletes) that turn one store snapshot into another. When the
//!   store's change log covers the span it costs O(changed keys); otherwise
//!   it walks the two persistent states, skipping what they share.
//!   [`apply`] replays ops into a store transaction (a replica, an API
//!   client).
//! - **The node view.** [`NodeProjector`] projects the ENLS onto one node
//!   with kube-proxy's endpoint selection rules, keeps that view up to date
//!   revision after revision in O(changed Services), and yields
//!   [`ViewOp`](kpng_model::view::ViewOp)s or drives a sink through
//!   [`NodeProjector::sync_into`]. No backend ever re-implements the rules.
//! - **Many nodes at once.** [`SharedViews`] keeps, per zone, the view a
//!   node with nothing of its own would have, and builds each node's view
//!   on it with only the node's own Services added: what a server
//!   streaming thousands of nodes' views holds per node is what is that
//!   node's own ([`SharedNodeView`]).
//!
//! All of it is pure: no runtime, no clock. What drives a sink over time
//! (rate limits, retries) is `kpng-drive`'s.
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
//! ```
//! use kpng_diff::{NodeProjector, diff};
//! use kpng_model::v1::Service;
//! use kpng_model::{EndpointInfo, IpFamily, ServiceName};
//! use kpng_store::Store;
//!
//! let mut store = Store::new();
//! let web = ServiceName::new("default", "web");
//! let endpoint = |node: &str| EndpointInfo::builder([10, 1, 0, 7].into()).node(node, "").build();
//! let mut txn = store.begin();
//! txn.set_service(Service { namespace: "default".into(), name: "web".into(), ..Default::default() });
//! txn.set_endpoint(web.clone(), endpoint("node-b"));
//! txn.commit();
//! let before = store.snapshot();
//!
//! let mut projector = NodeProjector::new("node-a");
//! let ops = projector.update(&before);
//! assert_eq!(ops.len(), 2); // SetService, SetEndpoint
//! let view = &projector.view().services[&web];
//! assert!(view.has_endpoints(IpFamily::V4));
//! assert_eq!(view.local_endpoints(IpFamily::V4).count(), 0);
//!
//! // The endpoint moves to this node: one store change, one view change.
//! let mut txn = store.begin();
//! txn.set_endpoint(web.clone(), endpoint("node-a"));
//! txn.commit();
//! let after = store.snapshot();
//! assert_eq!(diff(&before, &after).len(), 1);
//! assert_eq!(projector.update(&after).len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod node;
mod select;
mod shared;

use kpng_model::{Key, Value};
use kpng_store::{Snapshot, Txn};

pub use node::{NodeProjector, SyncReport, diff_views, node_view};
pub use shared::{SharedNodeView, SharedStats, SharedViews, view_changes};

/// One operation of a global diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The key now holds this value (created or changed).
    Set(Key, Value),
    /// The key went away.
    Delete(Key),
}

impl Op {
    /// The key this op is about.
    pub fn key(&self) -> &Key {
        match self {
            Op::Set(k, _) | Op::Delete(k) => k,
        }
    }
}

/// The minimal ops, in key order, that turn snapshot `a` into snapshot `b`.
///
/// Minimal: one op per key whose value differs, none for keys written with
/// an equal value. When `b`'s change log covers the span from `a` (same
/// store, `a` not older than the log) the cost is O(changed keys);
/// otherwise both states are walked, skipping what they share (see
/// [`Snapshot::keys_to_compare`]).
pub fn diff(a: &Snapshot, b: &Snapshot) -> Vec<Op> {
    b.keys_to_compare(a)
        .into_iter()
        .filter_map(|key| match (a.get(&key), b.get(&key)) {
            (old, Some(new)) if old.as_ref() != Some(&new) => Some(Op::Set(key, new)),
            (Some(_), None) => Some(Op::Delete(key)),
            _ => None,
        })
        .collect()
}

/// Applies ops, in order, to a store transaction: how a replica (an API
/// client following a global watch) mirrors another store.
///
/// # Errors
/// [`kpng_store::Error::KindMismatch`] when a set pairs a key with a value
/// of another kind; the ops before it stay applied in the transaction.
pub fn apply<'a>(
    txn: &mut Txn<'_>,
    ops: impl IntoIterator<Item = &'a Op>,
) -> Result<(), kpng_store::Error> {
    for op in ops {
        match op {
            Op::Set(k, v) => {
                txn.set(k.clone(), v.clone())?;
            }
            Op::Delete(k) => {
                txn.delete(k);
            }
        }
    }
    Ok(())
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
