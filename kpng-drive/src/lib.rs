//! The runtime of kpng-rs: what keeps a sink in line with the cluster over
//! time, around the pure parts (the store, the node view of `kpng-view`,
//! the sink contract).
//!
//! - [`drive`] keeps a sink in line with one node's view as the store
//!   changes: it waits for the initial lists, spaces syncs with a
//!   [`SyncLimiter`] (bursts of revisions collapse into one transaction),
//!   and retries a failed sync with a full round after a
//!   [`kpng_retry::Backoff`].
//! - [`SyncLimiter`]: kube-proxy's `--min-sync-period` as a token bucket.
//! - [`guard`]: the guard against losing everything. [`Guarded`] holds
//!   back a round that would delete every programmed Service, or more
//!   than a share of them, until it lasts a confirmation time or an
//!   override lets it through; [`drive`] re-checks a hold when it may be
//!   confirmed ([`DriveConfig::hold`]).
//!
//! # Example
//!
//! ```
//! use kpng_view::NodeProjector;
//! use kpng_drive::{DriveConfig, drive};
//! use kpng_model::Kind;
//! use kpng_model::v1::Service;
//! use kpng_sink::{Round, Sink, SinkError};
//! use kpng_store::Store;
//!
//! /// Counts the Services of the view each round leads to.
//! struct Count(usize);
//! impl Sink for Count {
//!     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
//!         self.0 = round.view().services.len();
//!         Ok(())
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
//! let mut store = Store::new();
//! let mut txn = store.begin();
//! txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
//! txn.commit();
//! store.mark_listed(Kind::Service);
//! store.mark_listed(Kind::Endpoint);
//!
//! let mut sink = Count(0);
//! let mut config = DriveConfig::default();
//! config.once = true;
//! drive(store.reader(), &mut NodeProjector::new("node-a"), &mut sink, &config).await?;
//! assert_eq!(sink.0, 1);
//! # Ok::<(), SinkError>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod drive;
pub mod guard;

pub use drive::{DriveConfig, SyncLimiter, drive};
pub use guard::{Guard, GuardConfig, Guarded, HoldStatus};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
