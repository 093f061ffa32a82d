//! The ENLS of kpng-rs over gRPC: one server watches the Kubernetes API,
//! node agents stream their node view from it.
//!
//! At thousands of nodes, every node's proxy watching every EndpointSlice
//! loads the apiserver. With kpng-api, one [`Server`] holds the store (fed
//! by `kpng-kube`) and each node's agent subscribes to its own node view
//! with the `kpng.model.v1.Enls/Watch` call:
//!
//! - the first answer is the whole view (a `reset`, the view as changes,
//!   a `sync`), then each new revision's changes, each batch closed by a
//!   `sync` carrying its revision;
//! - an agent that reconnects names the revision it holds, and gets only
//!   what changed since (or a reset when the server no longer knows it);
//! - a slow agent costs the server a few messages at most: the server
//!   computes the next batch only when the previous one is sent, from the
//!   latest revision, so revisions that arrived meanwhile merge into one.
//!
//! The transport is a unix socket (mode 0600) by default, or TCP with
//! mutual TLS ([`serve_tcp`]: a client without a certificate from the
//! configured CA is refused). [`run_agent`]
//! drives any [`kpng_sink::IncrementalSink`] from a server, reconnecting
//! with backoff and resuming.
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
//! use kpng_sink::FullState;
//! use kpng_store::Store;
//!
//! let mut store = Store::new();
//! let mut txn = store.begin();
//! txn.set_service(Service { namespace: "default".into(), name: "web".into(), ..Default::default() });
//! txn.commit();
//! store.mark_synced(kpng_model::Kind::Service);
//! store.mark_synced(kpng_model::Kind::Endpoint);
//!
//! let path = std::env::temp_dir().join(format!("kpng-api-doc-{}.sock", std::process::id()));
//! let server = Server::new(store.reader());
//! let serving = tokio::spawn(serve(bind_unix(&path)?, server));
//!
//! // A sink that counts the Services of the view it is handed.
//! struct Count(usize);
//! impl kpng_sink::FullStateSink for Count {
//!     fn sync(&mut self, view: &kpng_model::view::NodeView) -> Result<(), kpng_sink::SinkError> {
//!         self.0 = view.services.len();
//!         Ok(())
//!     }
//! }
//! let mut mirror = FullState::new(Count(0));
//! let mut config = AgentConfig::default();
//! config.once = true;
//! run_agent(&Address::Unix(path), "node-a", &mut mirror, &config).await?;
//! assert_eq!(mirror.inner().0, 1);
//! serving.abort();
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kpng_diff::NodeProjector;
use kpng_model::entries;
use kpng_model::v1::enls_client::EnlsClient;
use kpng_model::v1::enls_server::{Enls, EnlsServer};
use kpng_model::v1::global_event::Event as GlobalKind;
use kpng_model::v1::{
    EnlsChanges, GlobalEvent, ViewChanges, WatchEvent, WatchRequest, watch_event::Event,
};
use kpng_model::view::wire;
use kpng_sink::IncrementalSink;
use kpng_store::{Reader, Snapshot};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

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
    /// The server sent something that is not a valid change.
    #[error("bad change from the server: {0}")]
    Protocol(#[from] kpng_model::Error),
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] kpng_sink::SinkError),
}

/// Changes per message: a full view of 10k Services × 10 endpoints goes as
/// ~110 messages, none near gRPC's 4 MiB limit.
const CHANGES_PER_MESSAGE: usize = 1000;
/// Revisions the server remembers for resuming agents.
const HISTORY: usize = 256;
/// Messages queued per agent before the server waits for it.
const QUEUE: usize = 4;

/// The watch service over a store. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Server {
    reader: Reader,
    history: Arc<Mutex<VecDeque<Snapshot>>>,
    /// Drawn at start: revisions of another instance mean nothing here.
    instance: u64,
    /// Bumped to end every open stream (agents reconnect).
    closing: Arc<tokio::sync::watch::Sender<u64>>,
    /// Node views at remembered revisions, shared by the agents that
    /// resume from them (a projection costs O(store); a clone, O(1)).
    projections: Arc<Mutex<std::collections::HashMap<(String, u64), NodeProjector>>>,
}

/// Projections kept for resuming agents.
const PROJECTIONS: usize = 4096;

impl Server {
    /// Serves the store behind `reader`. Agents are answered once the
    /// initial lists are synced.
    pub fn new(reader: Reader) -> Self {
        let server = Self {
            reader,
            history: Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY))),
            instance: instance_id(),
            closing: Arc::new(tokio::sync::watch::Sender::new(0)),
            projections: Arc::new(Mutex::new(std::collections::HashMap::new())),
        };
        server.remember(server.reader.snapshot());
        server
    }

    /// This server instance's id (agents resume only within it).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// `node`'s projector at `snapshot`, from the cache when another agent
    /// resumed from there.
    fn projected(&self, node: &str, snapshot: &Snapshot) -> NodeProjector {
        let key = (node.to_owned(), snapshot.revision());
        if let Some(hit) = self
            .projections
            .lock()
            .ok()
            .and_then(|c| c.get(&key).cloned())
        {
            return hit;
        }
        let mut projector = NodeProjector::new(node);
        projector.update(snapshot);
        if let Ok(mut cache) = self.projections.lock() {
            if cache.len() >= PROJECTIONS {
                cache.clear();
            }
            cache.insert(key, projector.clone());
        }
        projector
    }

    /// Ends every open watch stream; agents reconnect (and resume). Use it
    /// before shutting the server down: a stream never ends on its own.
    pub fn close_streams(&self) {
        self.closing.send_modify(|generation| *generation += 1);
    }

    fn remember(&self, snapshot: Snapshot) {
        if let Ok(mut history) = self.history.lock() {
            if history
                .back()
                .is_some_and(|s| s.revision() >= snapshot.revision())
            {
                return;
            }
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(snapshot);
        }
    }

    fn at(&self, revision: u64) -> Option<Snapshot> {
        let history = self.history.lock().ok()?;
        history.iter().find(|s| s.revision() == revision).cloned()
    }

    /// Streams `feed` into `tx` until the watcher goes away or the store
    /// closes: the instance, a reset unless resuming from `since`, then per
    /// revision the changes and a sync.
    async fn pump<F: Feed>(
        self,
        mut feed: F,
        since: (u64, u64),
        tx: mpsc::Sender<Result<F::Message, Status>>,
    ) {
        let (since_instance, since) = since;
        let mut reader = self.reader.clone();
        let Ok(mut snapshot) = reader
            .synced(&[kpng_model::Kind::Service, kpng_model::Kind::Endpoint])
            .await
        else {
            return;
        };
        if tx.send(Ok(F::instance(self.instance))).await.is_err() {
            return;
        }
        let known = since > 0 && since_instance == self.instance;
        let old = self.at(since).filter(|_| known);
        if old.is_none() && tx.send(Ok(F::reset())).await.is_err() {
            return;
        }
        feed.start(&self, old.as_ref());
        let mut closing = self.closing.subscribe();
        closing.mark_unchanged();
        let mut first = true;
        loop {
            self.remember(snapshot.clone());
            let messages = feed.changes(&snapshot);
            if !messages.is_empty() || first {
                for message in messages {
                    if tx.send(Ok(message)).await.is_err() {
                        return;
                    }
                }
                if tx.send(Ok(F::sync(snapshot.revision()))).await.is_err() {
                    return;
                }
            }
            first = false;
            // Waits here while the watcher is slow (the queue is full
            // above), then takes the latest revision: the ones between
            // merge.
            snapshot = tokio::select! {
                next = reader.newer_than(snapshot.revision()) => match next {
                    Ok(next) => next,
                    Err(_) => return,
                },
                _ = closing.changed() => return,
            };
        }
    }
}

/// What differs between the node watch and the global watch.
trait Feed: Send + 'static {
    /// A stream message.
    type Message: Send + 'static;
    fn instance(id: u64) -> Self::Message;
    fn reset() -> Self::Message;
    fn sync(revision: u64) -> Self::Message;
    /// Starts from `old`, the snapshot the watcher holds, or from nothing.
    fn start(&mut self, server: &Server, old: Option<&Snapshot>);
    /// The messages carrying the changes up to `snapshot`.
    fn changes(&mut self, snapshot: &Snapshot) -> Vec<Self::Message>;
}

/// One node's view, as `ViewChange`s.
struct NodeFeed {
    node: String,
    projector: Option<NodeProjector>,
}

impl Feed for NodeFeed {
    type Message = WatchEvent;
    fn instance(id: u64) -> WatchEvent {
        event(Event::Instance(id))
    }
    fn reset() -> WatchEvent {
        event(Event::Reset(true))
    }
    fn sync(revision: u64) -> WatchEvent {
        event(Event::Sync(revision))
    }
    fn start(&mut self, server: &Server, old: Option<&Snapshot>) {
        self.projector = Some(match old {
            Some(old) => server.projected(&self.node, old),
            None => NodeProjector::new(self.node.as_str()),
        });
    }
    fn changes(&mut self, snapshot: &Snapshot) -> Vec<WatchEvent> {
        let ops = self
            .projector
            .get_or_insert_with(|| NodeProjector::new(self.node.as_str()))
            .update(snapshot);
        ops.chunks(CHANGES_PER_MESSAGE)
            .map(|chunk| {
                let changes = chunk.iter().map(wire::to_wire).collect();
                event(Event::Changes(ViewChanges { changes }))
            })
            .collect()
    }
}

/// The whole ENLS, as `EnlsChange`s.
struct GlobalFeed {
    previous: Snapshot,
}

impl Feed for GlobalFeed {
    type Message = GlobalEvent;
    fn instance(id: u64) -> GlobalEvent {
        global(GlobalKind::Instance(id))
    }
    fn reset() -> GlobalEvent {
        global(GlobalKind::Reset(true))
    }
    fn sync(revision: u64) -> GlobalEvent {
        global(GlobalKind::Sync(revision))
    }
    fn start(&mut self, _: &Server, old: Option<&Snapshot>) {
        if let Some(old) = old {
            self.previous = old.clone();
        }
    }
    fn changes(&mut self, snapshot: &Snapshot) -> Vec<GlobalEvent> {
        let ops = kpng_diff::diff(&self.previous, snapshot);
        self.previous = snapshot.clone();
        ops.chunks(CHANGES_PER_MESSAGE)
            .map(|chunk| {
                let changes = chunk
                    .iter()
                    .map(|op| match op {
                        kpng_diff::Op::Set(k, v) => entries::to_wire(k, Some(v)),
                        kpng_diff::Op::Delete(k) => entries::to_wire(k, None),
                    })
                    .collect();
                global(GlobalKind::Changes(EnlsChanges { changes }))
            })
            .collect()
    }
}

/// A random server instance id (from the OS's random source, via the
/// standard library's hasher keys).
fn instance_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish().max(1)
}

fn event(event: Event) -> WatchEvent {
    WatchEvent { event: Some(event) }
}

fn global(event: GlobalKind) -> GlobalEvent {
    GlobalEvent { event: Some(event) }
}

#[tonic::async_trait]
impl Enls for Server {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;
    type WatchAllStream = Pin<Box<dyn Stream<Item = Result<GlobalEvent, Status>> + Send>>;

    async fn watch_all(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchAllStream>, Status> {
        let request = request.into_inner();
        let (tx, rx) = mpsc::channel(QUEUE);
        let since = (request.since_instance, request.since_revision);
        let feed = GlobalFeed {
            previous: kpng_store::Store::new().snapshot(),
        };
        tokio::spawn(self.clone().pump(feed, since, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let request = request.into_inner();
        if request.node.is_empty() {
            return Err(Status::invalid_argument("name a node"));
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let since = (request.since_instance, request.since_revision);
        let feed = NodeFeed {
            node: request.node,
            projector: None,
        };
        tokio::spawn(self.clone().pump(feed, since, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Binds a unix socket at `path` (replacing a stale one), mode 0600.
/// Call it from within a tokio runtime.
///
/// # Errors
/// When the socket cannot be made.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt;
    let socket_error = |source| Error::Socket {
        path: path.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path).map_err(socket_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(socket_error)?;
    Ok(listener)
}

/// Serves `server` on a unix socket at `path` ([`bind_unix`], then
/// [`serve`]) until the task is dropped.
///
/// # Errors
/// When the socket cannot be made, or the transport fails.
pub async fn serve_unix(path: PathBuf, server: Server) -> Result<(), Error> {
    serve(bind_unix(&path)?, server).await
}

/// PEM material for mutual TLS over TCP: this side's certificate and key,
/// and the CA that signs the other side's.
#[derive(Clone)]
pub struct Tls {
    /// This side's certificate chain (PEM).
    pub cert: String,
    /// This side's private key (PEM).
    pub key: String,
    /// The CA certificate the peer's certificate must chain to (PEM).
    pub ca: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the three PEM files.
    ///
    /// # Errors
    /// [`Error::Socket`] naming the file that cannot be read.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, Error> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| Error::Socket {
                path: path.display().to_string(),
                source,
            })
        };
        Ok(Self {
            cert: read(cert)?,
            key: read(key)?,
            ca: read(ca)?,
        })
    }
}

/// Where a server listens, or an agent connects.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Address {
    /// A unix socket (the default; mode 0600 when served).
    Unix(PathBuf),
    /// TCP, always with mutual TLS.
    Tcp {
        /// `host:port`.
        addr: String,
        /// The name the server's certificate must carry (agents).
        domain: String,
        /// The TLS material.
        tls: Tls,
    },
}

impl Address {
    /// Parses `unix:///path` (or a bare path) or `tcp://host:port`; TCP
    /// needs `tls`.
    ///
    /// # Errors
    /// [`Error::Address`] naming what is wrong.
    pub fn parse(uri: &str, tls: Option<Tls>) -> Result<Self, Error> {
        if let Some(addr) = uri.strip_prefix("tcp://") {
            let tls = tls.ok_or_else(|| {
                Error::Address(format!(
                    "{uri}: TCP needs mutual TLS (certificate, key and CA)"
                ))
            })?;
            let domain = addr
                .rsplit_once(':')
                .map_or(addr, |(host, _)| host)
                .trim_matches(['[', ']'])
                .to_owned();
            return Ok(Address::Tcp {
                addr: addr.to_owned(),
                domain,
                tls,
            });
        }
        match uri.strip_prefix("unix://") {
            Some(path) => Ok(Address::Unix(PathBuf::from(path))),
            None if uri.contains("://") => Err(Error::Address(format!(
                "{uri}: use unix:///path or tcp://host:port"
            ))),
            None => Ok(Address::Unix(PathBuf::from(uri))),
        }
    }
}

/// Serves `server` on TCP with mutual TLS: a client without a certificate
/// signed by `tls.ca` is refused during the handshake.
///
/// # Errors
/// When the TLS material is unusable, or the transport fails.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    server: Server,
    tls: &Tls,
) -> Result<(), Error> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let config = ServerTlsConfig::new()
        .identity(Identity::from_pem(&tls.cert, &tls.key))
        .client_ca_root(Certificate::from_pem(&tls.ca));
    tonic::transport::Server::builder()
        .tls_config(config)?
        .add_service(EnlsServer::new(server))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await?;
    Ok(())
}

/// Serves `server` at `address` until the task is dropped.
///
/// # Errors
/// When the address cannot be bound, or the transport fails.
pub async fn serve_at(address: &Address, server: Server) -> Result<(), Error> {
    match address {
        Address::Unix(path) => serve(bind_unix(path)?, server).await,
        Address::Tcp { addr, tls, .. } => {
            let listener =
                tokio::net::TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|source| Error::Socket {
                        path: addr.clone(),
                        source,
                    })?;
            serve_tcp(listener, server, tls).await
        }
    }
}

/// Connects to a server.
///
/// # Errors
/// When it cannot be reached, or (TCP) the TLS handshake fails.
pub async fn connect(address: &Address) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    match address {
        Address::Unix(path) => connect_unix(path).await,
        Address::Tcp { addr, domain, tls } => {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca))
                .identity(Identity::from_pem(&tls.cert, &tls.key))
                .domain_name(domain.clone());
            let channel = Endpoint::from_shared(format!("https://{addr}"))
                .map_err(|e| Error::Address(format!("{addr}: {e}")))?
                .tls_config(config)?
                .connect()
                .await?;
            Ok(EnlsClient::new(channel))
        }
    }
}

/// Serves `server` on a bound unix socket until the task is dropped.
///
/// # Errors
/// When the transport fails.
pub async fn serve(listener: tokio::net::UnixListener, server: Server) -> Result<(), Error> {
    tonic::transport::Server::builder()
        .add_service(EnlsServer::new(server))
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await?;
    Ok(())
}

/// Connects to a server's unix socket.
///
/// # Errors
/// When it cannot be reached.
pub async fn connect_unix(path: &Path) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    let path = path.to_owned();
    // The URI is required by the API but unused: the connector dials.
    let channel = tonic::transport::Endpoint::from_static("http://kpng.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(EnlsClient::new(channel))
}

/// Settings of [`run_agent`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The first reconnect delay; it doubles up to `max_retry`.
    pub retry: Duration,
    /// The longest reconnect delay.
    pub max_retry: Duration,
    /// Return after the first successful sync.
    pub once: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(10),
            once: false,
        }
    }
}

/// Keeps `sink` in line with `node`'s view from the server at `address`:
/// connects (retrying with backoff), streams, applies each batch and syncs
/// at each `sync`; after a disconnect it resumes from the revision it
/// holds. A sink failure makes it start over from a full view. Returns
/// after the first sync with `once`; otherwise runs until dropped.
///
/// # Errors
/// With `once`, the first failure; otherwise never.
pub async fn run_agent<S: IncrementalSink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut held = (0u64, 0u64);
    let mut retry = config.retry;
    loop {
        match session(address, node, sink, &mut held, config.once).await {
            Ok(()) if config.once => return Ok(()),
            Ok(()) => retry = config.retry,
            Err(e) if config.once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?retry, revision = held.1, "ENLS watch lost; reconnecting");
                if matches!(e, Error::Sink(_)) {
                    // The sink's state is unknown: start over.
                    held = (0, 0);
                }
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(config.max_retry);
    }
}

/// One connection: streams until it ends (or, with `once`, until the
/// first sync).
async fn session<S: IncrementalSink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    held: &mut (u64, u64),
    once: bool,
) -> Result<(), Error> {
    let mut client = connect(address).await?;
    let mut stream = client
        .watch(WatchRequest {
            node: node.to_owned(),
            since_revision: held.1,
            since_instance: held.0,
        })
        .await?
        .into_inner();
    let mut instance = 0;
    while let Some(message) = stream.message().await? {
        match message.event {
            Some(Event::Instance(id)) => instance = id,
            Some(Event::Reset(_)) => sink.reset(),
            Some(Event::Changes(changes)) => {
                for change in changes.changes {
                    sink.apply(&wire::from_wire(change)?)?;
                }
            }
            Some(Event::Sync(revision)) => {
                sink.sync(revision)?;
                *held = (instance, revision);
                if once {
                    return Ok(());
                }
            }
            None => {}
        }
    }
    Ok(())
}

/// Keeps `store` a copy of the whole ENLS of the server at `address` (the
/// global watch), for a server that serves another's ENLS: connects
/// (retrying with backoff), applies each revision's changes as one
/// transaction, resumes after a disconnect, and marks every kind synced
/// after the first revision. Returns after the first revision with
/// `once`; otherwise runs until dropped.
///
/// # Errors
/// With `once`, the first failure; otherwise never.
pub async fn run_mirror(
    address: &Address,
    store: &mut kpng_store::Store,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut held = (0u64, 0u64);
    let mut retry = config.retry;
    loop {
        match mirror_session(address, store, &mut held, config.once).await {
            Ok(()) if config.once => return Ok(()),
            Ok(()) => retry = config.retry,
            Err(e) if config.once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?retry, "ENLS global watch lost; reconnecting");
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(config.max_retry);
    }
}

async fn mirror_session(
    address: &Address,
    store: &mut kpng_store::Store,
    held: &mut (u64, u64),
    once: bool,
) -> Result<(), Error> {
    use kpng_model::Kind;
    let mut client = connect(address).await?;
    let mut stream = client
        .watch_all(WatchRequest {
            node: String::new(),
            since_revision: held.1,
            since_instance: held.0,
        })
        .await?
        .into_inner();
    let (mut instance, mut reset, mut pending) = (0, false, Vec::new());
    while let Some(message) = stream.message().await? {
        match message.event {
            Some(GlobalKind::Instance(id)) => instance = id,
            Some(GlobalKind::Reset(_)) => reset = true,
            Some(GlobalKind::Changes(changes)) => {
                for change in changes.changes {
                    pending.push(entries::from_wire(change)?);
                }
            }
            Some(GlobalKind::Sync(revision)) => {
                let mut txn = store.begin();
                if std::mem::take(&mut reset) {
                    for kind in [Kind::Node, Kind::Service, Kind::Endpoint] {
                        txn.retain(kind, |_| false);
                    }
                }
                for (key, value) in pending.drain(..) {
                    match value {
                        Some(value) => {
                            txn.set(key, value).map_err(|e| {
                                Error::Address(format!("the server sent a mismatched entry: {e}"))
                            })?;
                        }
                        None => {
                            txn.delete(&key);
                        }
                    }
                }
                txn.commit();
                for kind in [Kind::Node, Kind::Service, Kind::Endpoint] {
                    store.mark_synced(kind);
                }
                *held = (instance, revision);
                if once {
                    return Ok(());
                }
            }
            None => {}
        }
    }
    Ok(())
}
