//! The ENLS of kpng-rs over gRPC: one server watches the Kubernetes API,
//! node agents stream their node view from it.
//!
//! At thousands of nodes, every node's proxy watching every EndpointSlice
//! loads the apiserver. With kpng-api, one [`Server`] holds the store (fed
//! by `kpng-kube`) and each node's agent subscribes to its own node view
//! with the `kpng.model.v1.Enls/Watch` call:
//!
//! - the first answer is the whole view (a `reset`, the view as changes,
//!   a `digest` and a `sync`), then each new revision's changes, each
//!   batch closed by a `digest` and a `sync` carrying its revision;
//!   endpoints travel in compact form (see [`codec::compact`]; the
//!   codecs of the ops, [`codec`], are public);
//! - an agent that reconnects names the revision it holds, and gets only
//!   what changed since; on a restarted server or another replica, the
//!   digest of its view, and gets nothing more when that view is still
//!   current; otherwise, asked for it, the summary of its view
//!   ([`ViewSummary`](kpng_model::view::ViewSummary): per Service, its
//!   name's fingerprint and its term of the view's digest, 16 bytes), and
//!   gets only the Services that differ and those to drop, as Envoy's
//!   delta xDS resumes from the versions a client holds (an older agent,
//!   or one of an older server, gets a reset and the whole view);
//! - replicas of the server: an agent given several addresses
//!   ([`AgentConfig::replicas`]) stays on the one that serves it and
//!   moves to the next when it fails, resuming as above; a replica whose
//!   store has not completed its initial lists answers `UNAVAILABLE` to an
//!   agent that holds a view or knows others, so that none goes back to
//!   an older or partial view;
//! - what the server holds per node is what is that node's own: views are
//!   built on one shared base per zone ([`kpng_view::SharedViews`]); full
//!   views are streamed in batches as the agent reads them, at most
//!   [`INITIAL_VIEWS`] at once;
//! - what a full view costs the server is mostly a copy: a Service view
//!   that nodes share is encoded once, and its bytes are sent to each of
//!   them (the message is the same `WatchEvent`; the compact tables are
//!   shared, and each stream sends the part its agent lacks first);
//! - a slow agent costs the server a few messages at most: the server
//!   computes the next batch only when the previous one is sent, from the
//!   latest revision, so revisions that arrived meanwhile merge into one;
//! - the server knows which revision each node has applied: agents report
//!   each round's revision and error (`Enls/Report`), and the [`Fleet`]
//!   view gives per-node lag in revisions and seconds, the nodes behind,
//!   and the programming latency (`Enls/Fleet`, [`fleet_view`],
//!   [`Fleet::openmetrics`]).
//!
//! The transport is a unix socket (mode 0600) by default, or TCP with
//! mutual TLS ([`serve_tcp`]: a client without a certificate from the
//! configured CA is refused); gzip and zstd are negotiated. [`run_agent`]
//! drives any [`kpng_sink::Sink`] from a server: it keeps the node view
//! the changes build, and at each `sync` hands the sink a
//! [`Round`](kpng_sink::Round) of what changed since the last round that
//! succeeded (a full one at first, after a reset or a failure),
//! reconnecting with jittered backoff and resuming.
//!
//! # Example
//!
//! A server over a store, and an agent that mirrors its node's view:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use kpng_api::{Address, AgentConfig, Server, bind_unix, run_agent, serve};
//! use kpng_model::v1::Service;
//! use kpng_sink::{Round, Sink, SinkError};
//! use kpng_store::Store;
//!
//! let mut store = Store::new();
//! let mut txn = store.begin();
//! txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
//! txn.commit();
//! store.mark_listed(kpng_model::Kind::Service);
//! store.mark_listed(kpng_model::Kind::Endpoint);
//!
//! let path = std::env::temp_dir().join(format!("kpng-api-doc-{}.sock", std::process::id()));
//! let server = Server::new(store.reader());
//! let serving = tokio::spawn(serve(bind_unix(&path)?, server));
//!
//! // A sink that counts the Services of the view each round leads to.
//! struct Count(usize);
//! impl Sink for Count {
//!     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
//!         self.0 = round.view().services.len();
//!         Ok(())
//!     }
//! }
//! let mut mirror = Count(0);
//! let mut config = AgentConfig::default();
//! config.once = true;
//! run_agent(&Address::Unix(path.clone()), "node-a", &mut mirror, &config).await?;
//! assert_eq!(mirror.0, 1);
//! serving.abort();
//! # let _ = std::fs::remove_file(&path);
//! # Ok(())
//! # }
//! ```

mod authority;

mod agent;
pub mod codec;
mod conn;
pub mod fleet;
mod full;
mod rounds;
mod server;
mod transport;

pub use agent::{
    AgentConfig, CONNECT_TIMEOUT, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, run_agent, run_mirror,
};
pub use conn::{Limits, serve_connection};
pub use fleet::{Fleet, fleet_view};
pub use server::{INITIAL_VIEWS, Server, ServerStats};
pub use transport::{
    Address, Tls, bind_unix, connect, connect_unix, connect_unix_channel, connect_with, serve,
    serve_at, serve_tcp, serve_unix,
};

use tonic::Status;

/// Errors of the API server and agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket could not be made or reached.
    #[error("{path}: {source}")]
    Socket {
        /// Its path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC transport failed.
    #[error("grpc transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The server answered with an error.
    #[error("server: {0}")]
    Status(#[from] Status),
    /// An address or its TLS settings are wrong.
    #[error("{0}")]
    Address(String),
    /// The TLS material (certificate, key, CA) is unusable.
    #[error("TLS: {0}")]
    Tls(String),
    /// The server sent something that is not a valid change.
    #[error("bad change from the server: {0}")]
    Protocol(#[from] kpng_model::Error),
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] kpng_sink::SinkError),
    /// No connection was made within the connect timeout
    /// ([`AgentConfig::connect_timeout`]): a cut link, or a peer that
    /// accepts and never answers.
    #[error("no connection within {0:?}")]
    ConnectTimeout(std::time::Duration),
    /// The server does not offer what was asked (an older server).
    #[error("{0}")]
    Unsupported(String),
    /// The server could not be watched, `attempts` times in a row (an
    /// agent or a mirror with `once`).
    #[error("cannot connect to {address} ({attempts} attempts): {cause}")]
    Unreachable {
        /// The server's address (`unix:///path`, `tcp://host:port`).
        address: String,
        /// The failed attempts in a row.
        attempts: u32,
        /// The last failure, its causes on one line.
        cause: String,
    },
}
