//! Ingest for kpng-rs: Kubernetes Services, EndpointSlices and Nodes into
//! the ENLS store.
//!
//! - [`translate`]: kube-proxy's rules, as pure functions from
//!   `k8s-openapi` objects to ENLS values.
//! - [`Ingest`]: the state machine that writes translated objects to a
//!   [`kpng_store::Store`], merging EndpointSlices per Service, and swapping
//!   a kind's contents atomically on a relist. It keeps no Kubernetes
//!   object, only what each slice contributed.
//! - [`watch::run`]: the API source, on kube-runtime's `watcher`.
//! - [`file`](mod@file): the file source, for manifests as users already have them.
//!
//! # Example
//!
//! ```
//! use kpng_kube::{Ingest, IngestConfig};
//! use kpng_store::Store;
//!
//! let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
//! let objects = kpng_kube::file::parse_str("inline.yaml", r#"
//! apiVersion: v1
//! kind: Service
//! metadata: {namespace: default, name: web}
//! spec:
//!   clusterIP: 10.96.0.10
//!   ports: [{name: http, port: 80, targetPort: 8080}]
//! "#)?;
//! ingest.load(&objects);
//! let snapshot = ingest.reader().snapshot();
//! assert_eq!(snapshot.services().count(), 1);
//! # Ok::<(), kpng_kube::Error>(())
//! ```

pub mod file;
mod ingest;
pub mod objects;
pub mod translate;
pub mod watch;

pub use ingest::{Ingest, IngestConfig, IngestStats, InputReporter, Watched};
/// A watch event, as kube-runtime's `watcher` yields them and
/// [`Ingest::apply_watcher_event`] takes them.
pub use kube::runtime::watcher::Event as WatchEvent;

/// Errors of the ingest crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A manifest file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A manifest document did not parse or translate.
    #[error("{path}: document {document}: {message}")]
    Manifest {
        /// The file.
        path: String,
        /// The document's index in the file (0-based, empty documents
        /// counted), with the item's index when the document is a `List`,
        /// and for YAML the line of the file where the document (or the
        /// item) starts.
        document: String,
        /// What is wrong, naming the object and field where known.
        message: String,
    },
    /// A manifest holds nothing the proxy reads (empty, only comments,
    /// only other kinds): loading it would delete every Service, so it is
    /// refused unless [`IngestConfig::allow_empty_input`] says otherwise.
    #[error("no Services, EndpointSlices or Nodes in {path}")]
    Empty {
        /// The file.
        path: String,
    },
    /// Every object of a manifest was skipped (each one the API server
    /// would refuse, or that does not decode): applying the rest, nothing,
    /// would delete every Service, so nothing is applied, even where an
    /// empty input is allowed.
    #[error("{path}: nothing applied, every object is skipped ({summary})")]
    AllSkipped {
        /// The file.
        path: String,
        /// How many objects, each named with where it is and why
        /// ([`file::InputReport::summary`]).
        summary: String,
    },
    /// The API server could not be watched, `attempts` times in a row
    /// (only when [`watch::WatchConfig::give_up_after`] is set).
    #[error("cannot watch {kind}s at {server} ({attempts} attempts): {cause}")]
    Unreachable {
        /// The API server's URL.
        server: String,
        /// The kind whose watch gave up.
        kind: &'static str,
        /// The failed attempts in a row.
        attempts: u32,
        /// The last failure, its causes on one line.
        cause: String,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
