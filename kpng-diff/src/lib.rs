//! The diff engine of kpng-rs: the global diff between store snapshots.
//!
//! [`diff`] returns the minimal ordered [`Op`]s (sets and deletes) that
//! turn one store snapshot into another. When the store's change log covers
//! the span it costs O(changed keys); otherwise it walks the two persistent
//! states, skipping what they share. [`apply`] replays ops into a store
//! transaction (a replica, an API client following a global watch).
//!
//! It is pure: no runtime, no clock. The node view (one node's projection
//! of a snapshot with kube-proxy's endpoint selection rules) is
//! `kpng-view`'s.
//!
//! # Example
//!
//! ```
//! use kpng_diff::{Op, apply, diff};
//! use kpng_model::v1::Service;
//! use kpng_model::{EndpointInfo, ServiceName};
//! use kpng_store::Store;
//!
//! let mut store = Store::new();
//! let web = ServiceName::new("default", "web");
//! let endpoint = |node: &str| EndpointInfo::builder([10, 1, 0, 7].into()).node(node, "").build();
//! let mut txn = store.begin();
//! txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
//! txn.set_endpoint(web.clone(), endpoint("node-b"));
//! txn.commit();
//! let before = store.snapshot();
//!
//! // The endpoint moves to another node: one store change, one op.
//! let mut txn = store.begin();
//! txn.set_endpoint(web.clone(), endpoint("node-a"));
//! txn.commit();
//! let after = store.snapshot();
//! let ops = diff(&before, &after);
//! assert_eq!(ops.len(), 1);
//! assert!(matches!(&ops[0], Op::Set(..)));
//! assert!(diff(&after, &after).is_empty());
//!
//! // A replica holding `before` applies the ops and holds `after`.
//! let mut replica = Store::new();
//! let mut txn = replica.begin();
//! for (key, value) in before.iter() {
//!     txn.set(key, value)?;
//! }
//! apply(&mut txn, &ops)?;
//! txn.commit();
//! assert_eq!(replica.snapshot().iter().collect::<Vec<_>>(), after.iter().collect::<Vec<_>>());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

use kpng_model::{Key, Value};
use kpng_store::{Snapshot, Txn};

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
