//! The revisioned ENLS store of kpng-rs.
//!
//! A [`Store`] maps typed [`Key`]s (nodes, Services, endpoints) to model
//! [`Value`]s on persistent maps ([`imbl`]), so a snapshot is an O(1) clone
//! that shares structure with the live state. Services are indexed by a
//! hash map keyed by their name's fingerprint (a point lookup reads a few
//! nodes); each Service's endpoints sit in a vector of their own, sorted
//! by address and shared with the snapshots that hold it.
//!
//! - **One writer.** The [`Store`] is the exclusive writer. It applies a
//!   batch of sets and deletes as one [`Txn`]. A write whose value equals the
//!   stored one is a no-op and is counted; the revision number increments
//!   only when a transaction changed at least one value.
//! - **Many readers.** A [`Reader`] is cloneable. It takes [`Snapshot`]s
//!   tagged with their revision, and async code can wait for a revision newer
//!   than the one it has, or for the initial lists to be complete.
//! - **A bounded change log.** Each snapshot knows which keys the recent
//!   revisions touched, so [`Snapshot::diff`] computes a diff in O(changed
//!   keys), falling back to a structural diff when the older snapshot is out
//!   of the log; [`Txn::apply`] replays it into another store (a replica).
//! - **Startup gating.** Per-kind "listed" flags tell consumers when every
//!   source finished its initial list; nothing downstream should act before
//!   (kube-proxy waits the same way).
//!
//! # Example
//!
//! ```
//! use kpng_model::{Kind, ServiceInfo, ServiceName};
//! use kpng_model::v1::Service;
//! use kpng_store::Store;
//!
//! let mut store = Store::new();
//! let reader = store.reader();
//!
//! let web = ServiceInfo::new(Service::new("default", "web"))?;
//! let mut txn = store.begin();
//! txn.set_service(web.clone());
//! assert_eq!(txn.commit().revision, Some(1));
//!
//! // Writing an equal value is a no-op: no new revision.
//! let mut txn = store.begin();
//! txn.set_service(web);
//! assert_eq!(txn.commit().revision, None);
//! assert_eq!(store.stats().noop_writes, 1);
//!
//! let snapshot = reader.snapshot();
//! assert_eq!(snapshot.revision(), 1);
//! assert!(snapshot.service(&ServiceName::new("default", "web")).is_some());
//! assert!(!snapshot.is_listed(Kind::Service));
//! store.mark_listed(Kind::Service);
//! assert!(reader.snapshot().is_listed(Kind::Service));
//! # Ok::<(), kpng_model::Error>(())
//! ```

pub mod map;
mod snapshot;
mod state;
mod stats;
mod store;

pub use kpng_model::{Key, Kind, ServiceName, Value};
pub use map::{MapOp, MapSnapshot, MapTxn, RevMap};
pub use snapshot::{ListedKinds, Reader, Snapshot};
pub use stats::Stats;
pub use store::{Commit, Store, StoreConfig, Txn};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value was written under a key of another kind.
    #[error("cannot store a {value:?} value under key {key}")]
    KindMismatch {
        /// The key.
        key: Key,
        /// The kind of the value.
        value: Kind,
    },
    /// An endpoint was written under a key naming another address.
    #[error("cannot store the endpoint at {address} under key {key}")]
    AddressMismatch {
        /// The key.
        key: Key,
        /// The endpoint's primary address.
        address: std::net::IpAddr,
    },
    /// A list of endpoints was not sorted by address, or held one twice.
    #[error("endpoints of {service} are not sorted by address at {address}")]
    Unsorted {
        /// The Service.
        service: kpng_model::ServiceName,
        /// The first address out of order.
        address: std::net::IpAddr,
    },
    /// The writer was dropped: no newer revision will come.
    #[error("the store writer was dropped")]
    Closed,
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
