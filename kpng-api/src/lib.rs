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
//!   endpoints travel in compact form (see
//!   [`kpng_model::view::compact`]);
//! - an agent that reconnects names the revision it holds, and gets only
//!   what changed since; on a restarted server or another replica, the
//!   digest of its view, and gets nothing more when that view is still
//!   current; otherwise a reset and the whole view;
//! - what the server holds per node is what is that node's own: views are
//!   built on one shared base per zone ([`kpng_diff::SharedViews`]); full
//!   views are streamed in batches as the agent reads them, at most
//!   [`INITIAL_VIEWS`] at once;
//! - a slow agent costs the server a few messages at most: the server
//!   computes the next batch only when the previous one is sent, from the
//!   latest revision, so revisions that arrived meanwhile merge into one.
//!
//! The transport is a unix socket (mode 0600) by default, or TCP with
//! mutual TLS ([`serve_tcp`]: a client without a certificate from the
//! configured CA is refused); gzip and zstd are negotiated. [`run_agent`]
//! drives any [`kpng_sink::IncrementalSink`] from a server, reconnecting
//! with jittered backoff and resuming.
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

mod authority;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kpng_diff::{SharedNodeView, SharedViews, view_changes};
use kpng_model::ServiceName;
use kpng_model::entries;
use kpng_model::v1::enls_client::EnlsClient;
use kpng_model::v1::enls_server::{Enls, EnlsServer};
use kpng_model::v1::global_event::Event as GlobalKind;
use kpng_model::v1::{EnlsChanges, GlobalEvent, WatchEvent, WatchRequest, watch_event::Event};
use kpng_model::view::{NodeView, ViewDigest, ViewOp, compact};
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
/// Full views streamed at once, by default ([`Server::with_initial_views`]).
pub const INITIAL_VIEWS: usize = 16;
/// How long one full view may hold its turn: a watcher that reads it more
/// slowly goes on, but lets the next one start.
const INITIAL_TURN: Duration = Duration::from_secs(10);

/// The watch service over a store. Cloning shares it.
///
/// Memory: what every node's view shares is held once ([`SharedViews`]:
/// one base view per zone); each open node stream holds what is its
/// node's own, plus a queue of at most a few messages. A full view is
/// streamed in batches as the watcher reads it, never built whole, and at
/// most [`INITIAL_VIEWS`] full views are in flight at once: the others
/// wait their turn, so a reconnect storm or thousands of agents starting
/// together cost time, not memory.
#[derive(Clone, Debug)]
pub struct Server {
    reader: Reader,
    history: Arc<Mutex<VecDeque<Snapshot>>>,
    /// Drawn at start: revisions of another instance mean nothing here.
    instance: u64,
    /// Bumped to end every open stream (agents reconnect).
    closing: Arc<tokio::sync::watch::Sender<u64>>,
    /// What the nodes' views share.
    shared: SharedViews,
    /// Full views in flight.
    initial: Arc<tokio::sync::Semaphore>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    open: AtomicUsize,
    full: AtomicU64,
    resumed: AtomicU64,
    by_digest: AtomicU64,
}

/// What a [`Server`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Watch streams open now.
    pub open_streams: usize,
    /// Streams that started with a reset and a full view.
    pub full_views: u64,
    /// Streams that resumed from a revision this instance remembers.
    pub resumed: u64,
    /// Streams that resumed on the digest of the view the watcher holds
    /// (after a restart, or from another replica): no reset, no transfer.
    pub resumed_by_digest: u64,
}

/// Decrements the open-stream count when a stream ends.
struct Open(Arc<Counters>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a watcher holds when it (re)connects.
#[derive(Debug, Default)]
struct Since {
    instance: u64,
    revision: u64,
    digest: Vec<u8>,
}

impl From<&WatchRequest> for Since {
    fn from(request: &WatchRequest) -> Self {
        Self {
            instance: request.since_instance,
            revision: request.since_revision,
            digest: request.since_digest.clone(),
        }
    }
}

impl Server {
    /// Serves the store behind `reader`. Agents are answered once the
    /// initial lists are synced.
    pub fn new(reader: Reader) -> Self {
        let server = Self {
            reader,
            history: Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY))),
            instance: instance_id(),
            closing: Arc::new(tokio::sync::watch::Sender::new(0)),
            shared: SharedViews::new(),
            initial: Arc::new(tokio::sync::Semaphore::new(INITIAL_VIEWS)),
            counters: Arc::default(),
        };
        server.remember(server.reader.snapshot());
        server
    }

    /// At most `n` (at least 1) full views streamed at once; watchers
    /// that need one wait their turn. The default is [`INITIAL_VIEWS`].
    #[must_use]
    pub fn with_initial_views(mut self, n: usize) -> Self {
        self.initial = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// This server instance's id (agents resume only within it).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// What the server has done so far.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            open_streams: c.open.load(Ordering::Relaxed),
            full_views: c.full.load(Ordering::Relaxed),
            resumed: c.resumed.load(Ordering::Relaxed),
            resumed_by_digest: c.by_digest.load(Ordering::Relaxed),
        }
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
    /// closes: the instance; then the changes since what the watcher
    /// holds, or a reset and the whole view (waiting its turn); then per
    /// revision the changes and a sync.
    async fn pump<F: Feed>(
        self,
        mut feed: F,
        since: Since,
        tx: mpsc::Sender<Result<F::Message, Status>>,
    ) {
        self.counters.open.fetch_add(1, Ordering::Relaxed);
        let _open = Open(self.counters.clone());
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
        let old = self
            .at(since.revision)
            .filter(|_| since.revision > 0 && since.instance == self.instance);
        let mut permit = None;
        match feed.resume(&self, old.as_ref(), &since.digest, &snapshot) {
            Some(Resumed::FromRevision) => {
                self.counters.resumed.fetch_add(1, Ordering::Relaxed);
            }
            Some(Resumed::ByDigest) => {
                self.counters.by_digest.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                if tx.send(Ok(F::reset())).await.is_err() {
                    return;
                }
                // Waits its turn; the view is taken when it comes.
                let turn = tokio::select! {
                    turn = self.initial.clone().acquire_owned() => turn,
                    () = tx.closed() => return,
                };
                let Ok(turn) = turn else {
                    return;
                };
                // A watcher that stalls mid-view gives its turn up after
                // a while, so stalled watchers cannot starve the others.
                permit = Some(tokio::spawn(async move {
                    tokio::time::sleep(INITIAL_TURN).await;
                    drop(turn);
                }));
                snapshot = reader.snapshot();
                feed.full(&self, &snapshot);
                self.counters.full.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut closing = self.closing.subscribe();
        closing.mark_unchanged();
        let mut first = true;
        loop {
            self.remember(snapshot.clone());
            let mut sent = false;
            // One batch at a time, made when the queue has room.
            while let Some(message) = feed.next_message() {
                sent = true;
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
            if sent || first {
                if let Some(digest) = feed.digest()
                    && tx.send(Ok(digest)).await.is_err()
                {
                    return;
                }
                if tx.send(Ok(F::sync(feed.revision()))).await.is_err() {
                    return;
                }
            }
            first = false;
            if let Some(turn) = permit.take() {
                turn.abort();
            }
            // Waits here while the watcher is slow (the queue is full
            // above), then takes the latest revision: the ones between
            // merge.
            snapshot = tokio::select! {
                next = reader.newer_than(feed.revision()) => match next {
                    Ok(next) => next,
                    Err(_) => return,
                },
                _ = closing.changed() => return,
                // A watcher that went away frees its stream now, not at
                // the next revision.
                () = tx.closed() => return,
            };
            feed.advance(&self, &snapshot);
        }
    }
}

/// How a stream started without a full view.
enum Resumed {
    /// From a revision this instance remembers: the changes since.
    FromRevision,
    /// The watcher's view has the current view's digest: nothing to send.
    ByDigest,
}

/// What differs between the node watch and the global watch.
trait Feed: Send + 'static {
    /// A stream message.
    type Message: Send + 'static;
    fn instance(id: u64) -> Self::Message;
    fn reset() -> Self::Message;
    fn sync(revision: u64) -> Self::Message;
    /// Starts from what the watcher holds (`old`, a remembered snapshot,
    /// or the digest of its view), when that can be done without a full
    /// view.
    fn resume(
        &mut self,
        server: &Server,
        old: Option<&Snapshot>,
        digest: &[u8],
        snapshot: &Snapshot,
    ) -> Option<Resumed>;
    /// Starts from nothing: the whole state at `snapshot` is pending.
    fn full(&mut self, server: &Server, snapshot: &Snapshot);
    /// Moves to `snapshot`: its changes are pending.
    fn advance(&mut self, server: &Server, snapshot: &Snapshot);
    /// The next batch of pending changes, or `None` when all are out.
    fn next_message(&mut self) -> Option<Self::Message>;
    /// The message sent before each sync, if any (the round ends there).
    fn digest(&mut self) -> Option<Self::Message>;
    /// The revision reached.
    fn revision(&self) -> u64;
}

/// One node's view, as `ViewChange`s.
struct NodeFeed {
    /// The node's view as last sent (its node name included).
    view: SharedNodeView,
    pending: Pending,
    /// The round's tables (compact endpoints).
    encoder: compact::Encoder,
}

/// Changes still to send.
enum Pending {
    None,
    Ops(std::vec::IntoIter<ViewOp>),
    /// The whole view, from a cursor.
    Full(FullView),
}

/// A whole view sent in batches: the node, the Service CIDRs, then per
/// Service its set and its endpoints, resumed at (Service, position) between batches.
struct FullView {
    view: NodeView,
    node_sent: bool,
    /// Where the next batch starts (`None`: at the beginning).
    next: Option<Cursor>,
}

enum Cursor {
    /// At a Service and a position in it (0: the Service itself, i: its
    /// endpoint i - 1).
    At(ServiceName, usize),
    /// Everything was sent.
    Done,
}

impl FullView {
    fn next_batch(&mut self) -> Option<Vec<ViewOp>> {
        let mut out = Vec::new();
        if !std::mem::replace(&mut self.node_sent, true)
            && let Some(node) = &self.view.node
        {
            out.push(ViewOp::SetNode(node.clone()));
        }
        if self.next.is_none() && !self.view.service_cidrs.is_empty() {
            out.push(ViewOp::SetServiceCidrs(self.view.service_cidrs.clone()));
        }
        let start = match self.next.take() {
            Some(Cursor::Done) => return None,
            Some(Cursor::At(name, i)) => Some((name, i)),
            None => None,
        };
        let services = match &start {
            Some((name, _)) => self.view.services.range(name.clone()..),
            None => self.view.services.range::<_, ServiceName>(..),
        };
        for (name, service) in services {
            let from = match &start {
                Some((at, i)) if at == name => *i,
                _ => 0,
            };
            for i in from..=service.endpoints.len() {
                if out.len() == CHANGES_PER_MESSAGE {
                    self.next = Some(Cursor::At(name.clone(), i));
                    return Some(out);
                }
                let op = match i.checked_sub(1).and_then(|e| service.endpoints.get(e)) {
                    None => ViewOp::SetService(service.service.clone()),
                    Some(endpoint) => ViewOp::SetEndpoint(name.clone(), endpoint.clone()),
                };
                out.push(op);
            }
        }
        self.next = Some(Cursor::Done);
        (!out.is_empty()).then_some(out)
    }
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
    fn resume(
        &mut self,
        server: &Server,
        old: Option<&Snapshot>,
        digest: &[u8],
        snapshot: &Snapshot,
    ) -> Option<Resumed> {
        let view = server.shared.project(self.view.node_name(), snapshot);
        let resumed = if let Some(ops) = old.and_then(|old| view_changes(old, &view)) {
            self.pending = Pending::Ops(ops.into_iter());
            Resumed::FromRevision
        } else if ViewDigest::from_bytes(digest) == Some(view.digest()) {
            Resumed::ByDigest
        } else {
            return None;
        };
        self.view = view;
        Some(resumed)
    }
    fn full(&mut self, server: &Server, snapshot: &Snapshot) {
        self.view = server.shared.project(self.view.node_name(), snapshot);
        self.pending = Pending::Full(FullView {
            view: self.view.view().clone(),
            node_sent: false,
            next: None,
        });
    }
    fn advance(&mut self, server: &Server, snapshot: &Snapshot) {
        let ops = server.shared.update(&mut self.view, snapshot);
        if !ops.is_empty() {
            self.pending = Pending::Ops(ops.into_iter());
        }
    }
    fn next_message(&mut self) -> Option<WatchEvent> {
        let ops = match &mut self.pending {
            Pending::None => None,
            Pending::Ops(ops) => {
                let batch: Vec<_> = ops.take(CHANGES_PER_MESSAGE).collect();
                (!batch.is_empty()).then_some(batch)
            }
            Pending::Full(full) => full.next_batch(),
        };
        match ops {
            Some(ops) => Some(event(Event::Changes(self.encoder.batch(&ops)))),
            None => {
                self.pending = Pending::None;
                None
            }
        }
    }
    fn digest(&mut self) -> Option<WatchEvent> {
        // The round ends with the sync that follows.
        self.encoder.end_round();
        Some(event(Event::Digest(self.view.digest().to_bytes().to_vec())))
    }
    fn revision(&self) -> u64 {
        self.view.view().revision
    }
}

/// The whole ENLS, as `EnlsChange`s.
struct GlobalFeed {
    previous: Snapshot,
    pending: std::vec::IntoIter<kpng_diff::Op>,
}

impl GlobalFeed {
    fn diff_to(&mut self, snapshot: &Snapshot) {
        self.pending = kpng_diff::diff(&self.previous, snapshot).into_iter();
        self.previous = snapshot.clone();
    }
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
    fn resume(
        &mut self,
        _: &Server,
        old: Option<&Snapshot>,
        _: &[u8],
        snapshot: &Snapshot,
    ) -> Option<Resumed> {
        self.previous = old?.clone();
        self.diff_to(snapshot);
        Some(Resumed::FromRevision)
    }
    fn full(&mut self, _: &Server, snapshot: &Snapshot) {
        self.previous = kpng_store::Store::new().snapshot();
        self.diff_to(snapshot);
    }
    fn advance(&mut self, _: &Server, snapshot: &Snapshot) {
        self.diff_to(snapshot);
    }
    fn next_message(&mut self) -> Option<GlobalEvent> {
        let changes: Vec<_> = self
            .pending
            .by_ref()
            .take(CHANGES_PER_MESSAGE)
            .map(|op| match op {
                kpng_diff::Op::Set(k, v) => entries::to_wire(&k, Some(&v)),
                kpng_diff::Op::Delete(k) => entries::to_wire(&k, None),
            })
            .collect();
        (!changes.is_empty()).then(|| global(GlobalKind::Changes(EnlsChanges { changes })))
    }
    fn digest(&mut self) -> Option<GlobalEvent> {
        None
    }
    fn revision(&self) -> u64 {
        self.previous.revision()
    }
}

/// A random server instance id (from the OS's random source, via the
/// standard library's hasher keys).
fn instance_id() -> u64 {
    random_u64().max(1)
}

/// A random number: the standard library's hasher keys are drawn from the
/// OS's random source, and the clock makes each call differ.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

fn event(event: Event) -> WatchEvent {
    WatchEvent { event: Some(event) }
}

fn global(event: GlobalKind) -> GlobalEvent {
    GlobalEvent { event: Some(event) }
}

/// The gRPC service, with compression negotiated: a watcher that accepts
/// zstd or gzip gets it.
fn service(server: Server) -> EnlsServer<Server> {
    use tonic::codec::CompressionEncoding::{Gzip, Zstd};
    EnlsServer::new(server)
        .send_compressed(Zstd)
        .send_compressed(Gzip)
        .accept_compressed(Zstd)
        .accept_compressed(Gzip)
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
        let feed = GlobalFeed {
            previous: kpng_store::Store::new().snapshot(),
            pending: Vec::new().into_iter(),
        };
        tokio::spawn(self.clone().pump(feed, Since::from(&request), tx));
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
        let since = Since::from(&request);
        let feed = NodeFeed {
            view: SharedNodeView::empty(request.node),
            pending: Pending::None,
            encoder: compact::Encoder::new(),
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
        .add_service(service(server))
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
/// Clients of any gRPC implementation are served: grpc-core's (Python,
/// C++, Ruby…) name the socket path as the request's `:authority`, which
/// the HTTP/2 server cannot parse, and is shown `localhost` instead.
///
/// # Errors
/// When the transport fails.
pub async fn serve(listener: tokio::net::UnixListener, server: Server) -> Result<(), Error> {
    use futures::TryStreamExt;
    let incoming = UnixListenerStream::new(listener).map_ok(authority::FixAuthority::new);
    tonic::transport::Server::builder()
        .add_service(service(server))
        .serve_with_incoming(incoming)
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

/// Settings of [`run_agent`] and [`run_mirror`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The first reconnect delay; it doubles up to `max_retry`, and each
    /// delay is drawn at random between half of it and all of it, so that
    /// agents cut off together do not come back together.
    pub retry: Duration,
    /// The longest reconnect delay.
    pub max_retry: Duration,
    /// Return after the first successful sync.
    pub once: bool,
    /// Ask the server to compress the stream (zstd): worth it over a
    /// network, not over a local unix socket. Off by default.
    pub compress: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(10),
            once: false,
            compress: false,
        }
    }
}

/// What an agent holds: the server instance and revision of its view,
/// and the view's digest.
#[derive(Clone, Debug, Default)]
struct Held {
    instance: u64,
    revision: u64,
    digest: Vec<u8>,
}

impl Held {
    fn request(&self, node: &str) -> WatchRequest {
        WatchRequest {
            node: node.to_owned(),
            since_revision: self.revision,
            since_instance: self.instance,
            since_digest: self.digest.clone(),
        }
    }
}

/// Keeps `sink` in line with `node`'s view from the server at `address`:
/// connects (retrying with jittered backoff), streams, applies each batch
/// and syncs at each `sync`; after a disconnect it resumes from the
/// revision it holds, or, on a restarted server or another replica, from
/// the digest of the view it holds. A sink failure makes it start over
/// from a full view. Returns after the first sync with `once`; otherwise
/// runs until dropped.
///
/// # Errors
/// With `once`, the first failure; otherwise never.
pub async fn run_agent<S: IncrementalSink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut held = Held::default();
    let mut backoff = kpng_drive::Backoff::new(config.retry, config.max_retry);
    loop {
        match session(address, node, sink, &mut held, config).await {
            Ok(()) if config.once => return Ok(()),
            Ok(()) => backoff.reset(),
            Err(e) if config.once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, revision = held.revision, "ENLS watch lost; reconnecting");
                if matches!(e, Error::Sink(_)) {
                    // The sink's state is unknown: start over.
                    held = Held::default();
                }
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

async fn client(
    address: &Address,
    config: &AgentConfig,
) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    let client = connect(address).await?;
    Ok(if config.compress {
        client.accept_compressed(tonic::codec::CompressionEncoding::Zstd)
    } else {
        client
    })
}

/// One connection: streams until it ends (or, with `once`, until the
/// first sync).
async fn session<S: IncrementalSink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    held: &mut Held,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut stream = client(address, config)
        .await?
        .watch(held.request(node))
        .await?
        .into_inner();
    let (mut instance, mut digest) = (0, Vec::new());
    let mut decoder = compact::Decoder::new();
    while let Some(message) = stream.message().await? {
        match message.event {
            Some(Event::Instance(id)) => instance = id,
            Some(Event::Reset(_)) => {
                // What is held is gone, whatever happens next.
                *held = Held::default();
                sink.reset();
            }
            Some(Event::Changes(changes)) => {
                decoder.batch(changes, |op| sink.apply(&op).map_err(Error::from))?;
            }
            Some(Event::Digest(d)) => digest = d,
            Some(Event::Sync(revision)) => {
                decoder.end_round();
                sink.sync(revision)?;
                *held = Held {
                    instance,
                    revision,
                    digest: std::mem::take(&mut digest),
                };
                if config.once {
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
    let mut held = Held::default();
    let mut backoff = kpng_drive::Backoff::new(config.retry, config.max_retry);
    loop {
        match mirror_session(address, store, &mut held, config).await {
            Ok(()) if config.once => return Ok(()),
            Ok(()) => backoff.reset(),
            Err(e) if config.once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "ENLS global watch lost; reconnecting");
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

async fn mirror_session(
    address: &Address,
    store: &mut kpng_store::Store,
    held: &mut Held,
    config: &AgentConfig,
) -> Result<(), Error> {
    use kpng_model::Kind;
    let mut stream = client(address, config)
        .await?
        .watch_all(held.request(""))
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
                *held = Held {
                    instance,
                    revision,
                    digest: Vec::new(),
                };
                if config.once {
                    return Ok(());
                }
            }
            None => {}
        }
    }
    Ok(())
}
