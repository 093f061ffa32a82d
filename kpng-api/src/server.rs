//! The server: node views and the global ENLS, streamed to watchers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use kpng_model::entries;
use kpng_model::v1::enls_server::{Enls, EnlsServer};
use kpng_model::v1::global_event::Event as GlobalKind;
use kpng_model::v1::{
    EnlsChanges, FleetReply, FleetRequest, GlobalEvent, NodeReport, ReportReply, WatchEvent,
    WatchRequest, watch_event::Event,
};
use kpng_model::view::{ViewDigest, ViewOp, ViewSummary};
use kpng_store::{Reader, Snapshot};
use kpng_view::{SharedNodeView, SharedViews, view_changes};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::codec::compact;
use crate::conn::{Limits, PeerLog};
use crate::fleet::Fleet;
use crate::full::{Encodings, FullView, Outgoing};

/// Changes per message: a full view of 10k Services × 10 endpoints goes as
/// ~110 messages, none near gRPC's 4 MiB limit.
pub(crate) const CHANGES_PER_MESSAGE: usize = 1000;
/// Revisions the server remembers for resuming agents.
pub(crate) const HISTORY: usize = 256;
/// Messages queued per agent before the server waits for it.
pub(crate) const QUEUE: usize = 4;
/// Full views streamed at once, by default ([`Server::with_initial_views`]).
pub const INITIAL_VIEWS: usize = 16;
/// How long one full view may hold its turn: a watcher that reads it more
/// slowly goes on, but lets the next one start.
pub(crate) const INITIAL_TURN: Duration = Duration::from_secs(10);

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
    /// Service views encoded once for every node that shares them.
    encodings: Arc<Encodings>,
    counters: Arc<Counters>,
    /// What each node has applied, and how late.
    fleet: Fleet,
    /// The task noting each revision's commit time runs.
    clock: Arc<AtomicBool>,
    /// What each connection and stream may cost.
    limits: Arc<Limits>,
    /// Misbehaving clients, each logged once a while.
    peer_log: Arc<PeerLog>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    open: AtomicUsize,
    full: AtomicU64,
    resumed: AtomicU64,
    by_digest: AtomicU64,
    by_summary: AtomicU64,
    summaries_wanted: AtomicU64,
    unsynced: AtomicU64,
    report_calls: AtomicU64,
    report_streams: AtomicU64,
    streamed_reports: AtomicU64,
    /// Connections open now.
    pub(crate) connections: AtomicUsize,
    /// Connections closed at once: over the limit.
    pub(crate) refused: AtomicU64,
    /// Connections closed, and requests refused, for what the client did.
    pub(crate) faults: AtomicU64,
    /// Bytes of responses handed to HTTP/2 less the bytes written to
    /// the connections still open.
    pub(crate) unsent: std::sync::atomic::AtomicI64,
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
    /// Streams that resumed on the summary of the view the watcher holds
    /// (from another instance, its view differing from this one's): only
    /// the Services that differ were sent, and those to drop.
    pub resumed_by_summary: u64,
    /// Streams that asked the watcher for the summary of its view and
    /// ended (it asks again with it).
    pub summaries_wanted: u64,
    /// Watches refused as unavailable because the store had not completed
    /// its initial lists (the watcher asked not to wait).
    pub refused_unsynced: u64,
    /// Service views encoded for full views: each view that nodes share
    /// once (per revision it changes at), and each node's own Services
    /// once per full view of that node.
    pub services_encoded: u64,
    /// Agents' reports taken one call each (`Enls/Report`: `once` agents,
    /// and agents of servers without the report stream).
    pub report_calls: u64,
    /// Report streams opened (`Enls/Reports`: one per agent connection).
    pub report_streams: u64,
    /// Reports taken on those streams.
    pub streamed_reports: u64,
    /// Connections open now (served by [`serve`](crate::serve),
    /// [`serve_tcp`](crate::serve_tcp) or
    /// [`serve_connection`](crate::serve_connection)).
    pub open_connections: usize,
    /// Connections closed as soon as accepted: over
    /// [`Limits::max_connections`].
    pub refused_connections: u64,
    /// Connections closed, and requests refused, for what their client
    /// did: nothing sent in time, not HTTP/2, a protocol error, a failed
    /// TLS handshake, a keepalive ping unanswered, a request that does
    /// not decode or is too large. Each is logged, naming the peer.
    pub client_faults: u64,
    /// Bytes of responses the server has handed to HTTP/2 and not yet
    /// written to a connection (nearly: the bytes written count HTTP/2's
    /// frame headers too, ~0.1 % more): what clients that do not read
    /// hold in the server's HTTP/2 buffers, at most
    /// [`Limits::max_send_buffer`] and one message per stream.
    pub unsent_bytes: u64,
}

/// Decrements the open-stream count when a stream ends.
pub(crate) struct Open(Arc<Counters>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Tells the fleet a node's stream ended.
pub(crate) struct NodeOpen(Fleet, String);

impl Drop for NodeOpen {
    fn drop(&mut self) {
        self.0.closed(&self.1, Instant::now());
    }
}

/// What a watcher holds when it (re)connects.
#[derive(Debug, Default)]
pub(crate) struct Since {
    instance: u64,
    revision: u64,
    digest: Vec<u8>,
    /// It can summarize its view when asked.
    summarizes: bool,
    /// The summary of its view.
    summary: Option<ViewSummary>,
}

impl Since {
    /// The watcher holds a view (or says so).
    fn holds(&self) -> bool {
        self.revision > 0 || !self.digest.is_empty() || self.summary.is_some()
    }
}

impl From<&WatchRequest> for Since {
    fn from(request: &WatchRequest) -> Self {
        Self {
            instance: request.since_instance,
            revision: request.since_revision,
            digest: request.since_digest.clone(),
            summarizes: request.summarizes,
            summary: request
                .since_summary
                .as_ref()
                .and_then(ViewSummary::from_wire),
        }
    }
}

impl Server {
    /// Serves the store behind `reader`. Agents are answered once the
    /// initial lists are synced.
    pub fn new(reader: Reader) -> Self {
        let instance = instance_id();
        let fleet = Fleet::new(instance, reader.snapshot().revision());
        let server = Self {
            reader,
            history: Arc::new(Mutex::new(VecDeque::with_capacity(HISTORY))),
            instance,
            closing: Arc::new(tokio::sync::watch::Sender::new(0)),
            shared: SharedViews::new(),
            initial: Arc::new(tokio::sync::Semaphore::new(INITIAL_VIEWS)),
            encodings: Arc::default(),
            counters: Arc::default(),
            fleet,
            clock: Arc::default(),
            limits: Arc::default(),
            peer_log: Arc::default(),
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

    /// Serves under `limits` (connections, streams, windows, message
    /// sizes, deadlines); the default is [`Limits::default`].
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Arc::new(limits);
        self
    }

    /// What each connection and stream may cost.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    pub(crate) fn peer_log(&self) -> &PeerLog {
        &self.peer_log
    }

    /// This server instance's id (agents resume only within it).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The fleet view: what each node's agent reported applied, how far
    /// behind each is, the programming latency (see [`Fleet`]).
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Notes the commit time of each revision, from the first stream on
    /// (a task, ended with the store).
    fn start_clock(&self) {
        if self.clock.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut reader = self.reader.clone();
        let fleet = self.fleet.clone();
        tokio::spawn(async move {
            let mut revision = reader.snapshot().revision();
            fleet.committed(revision, Instant::now());
            while let Ok(next) = reader.newer_than(revision).await {
                revision = next.revision();
                fleet.committed(revision, Instant::now());
            }
        });
    }

    /// What the server has done so far.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            open_streams: c.open.load(Ordering::Relaxed),
            full_views: c.full.load(Ordering::Relaxed),
            resumed: c.resumed.load(Ordering::Relaxed),
            resumed_by_digest: c.by_digest.load(Ordering::Relaxed),
            resumed_by_summary: c.by_summary.load(Ordering::Relaxed),
            summaries_wanted: c.summaries_wanted.load(Ordering::Relaxed),
            refused_unsynced: c.unsynced.load(Ordering::Relaxed),
            services_encoded: self.encodings.encoded(),
            report_calls: c.report_calls.load(Ordering::Relaxed),
            report_streams: c.report_streams.load(Ordering::Relaxed),
            streamed_reports: c.streamed_reports.load(Ordering::Relaxed),
            open_connections: c.connections.load(Ordering::Relaxed),
            refused_connections: c.refused.load(Ordering::Relaxed),
            client_faults: c.faults.load(Ordering::Relaxed),
            unsent_bytes: u64::try_from(c.unsent.load(Ordering::Relaxed)).unwrap_or(0),
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
        self.start_clock();
        let node = feed.node().map(str::to_owned);
        let _node_open = node.as_ref().map(|name| {
            self.fleet.opened(name, Instant::now());
            NodeOpen(self.fleet.clone(), name.clone())
        });
        let fleet = node.as_deref().map(|name| (&self.fleet, name));
        let mut reader = self.reader.clone();
        let Ok(mut snapshot) = reader
            .listed(&[kpng_model::Kind::Service, kpng_model::Kind::Endpoint])
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
        // The oldest revision of the next round's changes; a whole view.
        let (mut from, mut whole) = (since.revision.saturating_add(1), false);
        match feed.resume(&self, old.as_ref(), &since, &snapshot) {
            Some(Resumed::FromRevision) => {
                self.counters.resumed.fetch_add(1, Ordering::Relaxed);
            }
            Some(Resumed::ByDigest) => {
                self.counters.by_digest.fetch_add(1, Ordering::Relaxed);
            }
            Some(Resumed::BySummary) => {
                self.counters.by_summary.fetch_add(1, Ordering::Relaxed);
                // Revisions of another instance mean nothing here: the
                // round's changes are counted from this revision.
                from = snapshot.revision();
            }
            // A summary that was sent, and differs in most Services, gets
            // the whole view (below).
            None if since.summarizes && since.holds() && since.summary.is_none() => {
                // Cheaper than the whole view: the watcher's summary.
                self.counters
                    .summaries_wanted
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(wanted) = F::summary_wanted() {
                    let _ = tx.send(Ok(wanted)).await;
                }
                return;
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
                (from, whole) = (snapshot.revision(), true);
                feed.full(&self, &snapshot);
                self.counters.full.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut closing = self.closing.subscribe();
        closing.mark_unchanged();
        let mut first = true;
        loop {
            self.remember(snapshot.clone());
            if let Some((fleet, name)) = fleet {
                fleet.examined(name, feed.revision(), Instant::now());
            }
            let mut sent = false;
            // One batch at a time, made when the queue has room.
            while let Some(message) = feed.next_message() {
                if !sent && let Some((fleet, name)) = fleet {
                    fleet.sending(name, from, whole, Instant::now());
                }
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
                if let Some((fleet, name)) = fleet {
                    fleet.sent(name, feed.revision(), sent, whole, Instant::now());
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
                // Closing first: once streams are told to close, a
                // revision committed since is not sent (the agent gets it
                // from whichever server it reconnects to).
                biased;
                _ = closing.changed() => return,
                // A watcher that went away frees its stream now, not at
                // the next revision.
                () = tx.closed() => return,
                next = reader.newer_than(feed.revision()) => match next {
                    Ok(next) => {
                        (from, whole) = (feed.revision().saturating_add(1), false);
                        next
                    }
                    Err(_) => return,
                },
            };
            feed.advance(&self, &snapshot);
        }
    }
}

/// The Services `ops` set.
fn count_services(ops: &[kpng_model::view::ViewOp]) -> usize {
    ops.iter()
        .filter(|op| matches!(op, kpng_model::view::ViewOp::SetService(..)))
        .count()
}

/// How a stream started without a full view.
pub(crate) enum Resumed {
    /// From a revision this instance remembers: the changes since.
    FromRevision,
    /// The watcher's view has the current view's digest: nothing to send.
    ByDigest,
    /// From the summary of the watcher's view: what differs.
    BySummary,
}

/// What differs between the node watch and the global watch.
pub(crate) trait Feed: Send + 'static {
    /// A stream message.
    type Message: Send + 'static;
    fn instance(id: u64) -> Self::Message;
    fn reset() -> Self::Message;
    fn sync(revision: u64) -> Self::Message;
    /// The message asking the watcher for its summary, if this feed takes
    /// one.
    fn summary_wanted() -> Option<Self::Message> {
        None
    }
    /// Starts from what the watcher holds (`old`, a remembered snapshot,
    /// or the digest or summary of its view, in `since`), when that can be
    /// done without a full view.
    fn resume(
        &mut self,
        server: &Server,
        old: Option<&Snapshot>,
        since: &Since,
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
    /// The node whose view this is (`None`: the global watch).
    fn node(&self) -> Option<&str> {
        None
    }
}

/// One node's view, as `ViewChange`s.
pub(crate) struct NodeFeed {
    /// The node's view as last sent (its node name included).
    view: SharedNodeView,
    pending: Pending,
    /// The round's tables (compact endpoints).
    encoder: compact::Encoder,
    /// The watcher reads endpoints in columns.
    columns: bool,
}

/// Changes still to send.
pub(crate) enum Pending {
    None,
    Ops(std::vec::IntoIter<ViewOp>),
    /// Services to drop (by fingerprint), then ops: a resume by summary.
    Dropped(Vec<u64>, Vec<ViewOp>),
    /// The whole view, in messages of shared pieces.
    Full(Box<FullView>),
}

impl Feed for NodeFeed {
    type Message = Outgoing;
    fn instance(id: u64) -> Outgoing {
        Outgoing::Event(event(Event::Instance(id)))
    }
    fn reset() -> Outgoing {
        Outgoing::Event(event(Event::Reset(true)))
    }
    fn sync(revision: u64) -> Outgoing {
        Outgoing::Event(event(Event::Sync(revision)))
    }
    fn summary_wanted() -> Option<Outgoing> {
        Some(Outgoing::Event(event(Event::SummaryWanted(true))))
    }
    fn resume(
        &mut self,
        server: &Server,
        old: Option<&Snapshot>,
        since: &Since,
        snapshot: &Snapshot,
    ) -> Option<Resumed> {
        let view = server.shared.project(self.view.node_name(), snapshot);
        let resumed = if let Some(ops) = old.and_then(|old| view_changes(old, &view)) {
            self.pending = Pending::Ops(ops.into_iter());
            Resumed::FromRevision
        } else if ViewDigest::from_bytes(&since.digest) == Some(view.digest()) {
            Resumed::ByDigest
        } else if let Some(summary) = &since.summary {
            let difference = summary.difference(view.view());
            // Most Services differ: a reset and the whole view cost the
            // watcher less, since it drops the view it holds before the
            // new one comes (a difference is applied beside it).
            let held = summary.len().max(view.view().services.len());
            if difference
                .dropped
                .len()
                .max(count_services(&difference.ops))
                * 2
                > held
            {
                return None;
            }
            self.pending = if difference.dropped.is_empty() {
                Pending::Ops(difference.ops.into_iter())
            } else {
                Pending::Dropped(difference.dropped, difference.ops)
            };
            Resumed::BySummary
        } else {
            return None;
        };
        self.view = view;
        Some(resumed)
    }
    fn full(&mut self, server: &Server, snapshot: &Snapshot) {
        self.view = server.shared.project(self.view.node_name(), snapshot);
        self.pending = Pending::Full(Box::new(FullView::new(
            self.view.clone(),
            server.encodings.generation(),
            self.columns,
        )));
    }
    fn advance(&mut self, server: &Server, snapshot: &Snapshot) {
        let ops = server.shared.update(&mut self.view, snapshot);
        if !ops.is_empty() {
            self.pending = Pending::Ops(ops.into_iter());
        }
    }
    fn next_message(&mut self) -> Option<Outgoing> {
        let message = match &mut self.pending {
            Pending::None => None,
            Pending::Ops(ops) => {
                let batch: Vec<_> = ops.take(CHANGES_PER_MESSAGE).collect();
                (!batch.is_empty())
                    .then(|| Outgoing::Event(event(Event::Changes(self.encoder.batch(&batch)))))
            }
            Pending::Dropped(dropped, ops) => {
                let ops = std::mem::take(ops);
                let dropped = std::mem::take(dropped);
                self.pending = Pending::Ops(ops.into_iter());
                return Some(Outgoing::Event(event(Event::Dropped(
                    kpng_model::v1::DroppedServices { services: dropped },
                ))));
            }
            Pending::Full(full) => full.next_message(),
        };
        if message.is_none() {
            self.pending = Pending::None;
        }
        message
    }
    fn digest(&mut self) -> Option<Outgoing> {
        // The round ends with the sync that follows.
        self.encoder.end_round();
        Some(Outgoing::Event(event(Event::Digest(
            self.view.digest().to_bytes().to_vec(),
        ))))
    }
    fn revision(&self) -> u64 {
        self.view.view().revision
    }
    fn node(&self) -> Option<&str> {
        Some(self.view.node_name())
    }
}

/// The whole ENLS, as `EnlsChange`s.
pub(crate) struct GlobalFeed {
    previous: Snapshot,
    pending: std::vec::IntoIter<kpng_store::MapOp<kpng_model::Key, kpng_model::Value>>,
}

impl GlobalFeed {
    fn diff_to(&mut self, snapshot: &Snapshot) {
        self.pending = self.previous.diff(snapshot).into_iter();
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
        _: &Since,
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
                kpng_store::MapOp::Set(k, v) => entries::to_wire(&k, Some(&v)),
                kpng_store::MapOp::Delete(k) => entries::to_wire(&k, None),
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
pub(crate) fn instance_id() -> u64 {
    random_u64().max(1)
}

/// A random number: the standard library's hasher keys are drawn from the
/// OS's random source, and the clock makes each call differ.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

pub(crate) fn event(event: Event) -> WatchEvent {
    WatchEvent { event: Some(event) }
}

pub(crate) fn global(event: GlobalKind) -> GlobalEvent {
    GlobalEvent { event: Some(event) }
}

/// The gRPC service, with compression negotiated: a watcher that accepts
/// zstd or gzip gets it.
pub(crate) fn service(server: Server) -> Routes {
    use tonic::codec::CompressionEncoding::{Gzip, Zstd};
    let generated = EnlsServer::new(server.clone())
        .send_compressed(Zstd)
        .send_compressed(Gzip)
        .accept_compressed(Zstd)
        .accept_compressed(Gzip)
        .max_decoding_message_size(server.limits.max_request_size);
    Routes { server, generated }
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
        // The served path sends full views as shared encoded pieces
        // ([`Routes`]); through the trait, each message is a `WatchEvent`.
        use futures::StreamExt;
        let stream = self.watch_encoded(request.into_inner())?;
        Ok(Response::new(Box::pin(
            stream.map(|message| message.and_then(Outgoing::into_event)),
        )))
    }

    async fn report(&self, request: Request<NodeReport>) -> Result<Response<ReportReply>, Status> {
        self.counters.report_calls.fetch_add(1, Ordering::Relaxed);
        self.take_report(&request.into_inner())?;
        Ok(Response::new(ReportReply {}))
    }

    async fn reports(
        &self,
        request: Request<tonic::Streaming<NodeReport>>,
    ) -> Result<Response<ReportReply>, Status> {
        self.counters.report_streams.fetch_add(1, Ordering::Relaxed);
        let mut stream = request.into_inner();
        while let Some(report) = stream.message().await? {
            self.counters
                .streamed_reports
                .fetch_add(1, Ordering::Relaxed);
            self.take_report(&report)?;
        }
        Ok(Response::new(ReportReply {}))
    }

    async fn fleet(&self, request: Request<FleetRequest>) -> Result<Response<FleetReply>, Status> {
        let request = request.into_inner();
        if !request.min_seconds_behind.is_finite() || request.min_seconds_behind < 0.0 {
            return Err(Status::invalid_argument(format!(
                "min_seconds_behind {}: not a duration",
                request.min_seconds_behind
            )));
        }
        Ok(Response::new(self.fleet.view(&request)))
    }
}

/// The full path of the node watch.
const WATCH_PATH: &str = "/kpng.model.v1.Enls/Watch";

type OutgoingStream = Pin<Box<dyn Stream<Item = Result<Outgoing, Status>> + Send>>;

impl Server {
    /// The store has completed its initial lists of Services and
    /// endpoints (before, a watch waits, or is refused when it asks).
    fn synced(&self) -> bool {
        let snapshot = self.reader.snapshot();
        [kpng_model::Kind::Service, kpng_model::Kind::Endpoint]
            .iter()
            .all(|kind| snapshot.is_listed(*kind))
    }

    /// One agent's report, into the fleet view.
    fn take_report(&self, report: &NodeReport) -> Result<(), Status> {
        if report.node.is_empty() {
            return Err(Status::invalid_argument("name a node"));
        }
        if !self.fleet.report(report) {
            tracing::debug!(
                node = %report.node,
                instance = report.instance,
                revision = report.revision,
                "report of another server instance or an unknown revision ignored"
            );
        }
        Ok(())
    }

    /// The node watch: its messages, full views as shared pieces.
    fn watch_encoded(&self, request: WatchRequest) -> Result<OutgoingStream, Status> {
        if request.node.is_empty() {
            return Err(Status::invalid_argument("name a node"));
        }
        if request.unavailable_unless_synced && !self.synced() {
            self.counters.unsynced.fetch_add(1, Ordering::Relaxed);
            return Err(Status::unavailable(
                "not synced yet: this server's store has not completed its initial lists",
            ));
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let since = Since::from(&request);
        let feed = NodeFeed {
            view: SharedNodeView::empty(request.node),
            pending: Pending::None,
            encoder: compact::Encoder::new().with_columns(request.endpoint_columns),
            columns: request.endpoint_columns,
        };
        tokio::spawn(self.clone().pump(feed, since, tx));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// The watch, served with a codec that writes shared pieces as they are.
struct WatchEncoded(Server);

impl tonic::server::ServerStreamingService<WatchRequest> for WatchEncoded {
    type Response = Outgoing;
    type ResponseStream = OutgoingStream;
    type Future = futures::future::Ready<Result<Response<OutgoingStream>, Status>>;

    fn call(&mut self, request: Request<WatchRequest>) -> Self::Future {
        futures::future::ready(
            self.0
                .watch_encoded(request.into_inner())
                .map(Response::new),
        )
    }
}

/// The ENLS service: `Watch` with a codec that sends the shared pieces of
/// full views without decoding them, the rest as generated.
#[derive(Clone)]
pub(crate) struct Routes {
    server: Server,
    generated: EnlsServer<Server>,
}

impl tonic::server::NamedService for Routes {
    const NAME: &'static str = <EnlsServer<Server> as tonic::server::NamedService>::NAME;
}

type BoxResponse = Pin<
    Box<
        dyn std::future::Future<
                Output = Result<http::Response<tonic::body::Body>, std::convert::Infallible>,
            > + Send,
    >,
>;

impl tower::Service<http::Request<tonic::body::Body>> for Routes {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxResponse;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        use tonic::codec::CompressionEncoding::{Gzip, Zstd};
        if request.uri().path() != WATCH_PATH {
            return Box::pin(self.generated.call(request));
        }
        let method = WatchEncoded(self.server.clone());
        let max_request = self.server.limits.max_watch_request_size;
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<Outgoing, WatchRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec)
                .send_compressed(Zstd)
                .send_compressed(Gzip)
                .accept_compressed(Zstd)
                .accept_compressed(Gzip)
                .max_decoding_message_size(max_request);
            Ok(grpc.server_streaming(method, request).await)
        })
    }
}
