//! The agent: a node's view streamed into a sink, and the mirror of the
//! whole ENLS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kpng_model::entries;
use kpng_model::v1::enls_client::EnlsClient;
use kpng_model::v1::global_event::Event as GlobalKind;
use kpng_model::v1::{NodeReport, WatchRequest, watch_event::Event};
use kpng_model::view::{ViewDigest, ViewSummary};
use kpng_sink::Sink;

use crate::Error;
use crate::codec::compact;
use crate::rounds::Rounds;
use crate::transport::{Address, connect_with};

/// [`AgentConfig::keepalive_interval`]'s default: 10 s.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// [`AgentConfig::keepalive_timeout`]'s default: 5 s.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// [`AgentConfig::connect_timeout`]'s default: 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// With `once`: the failed attempts in a row (no connection, or a
    /// stream lost before the first sync) after which it gives up with
    /// [`Error::Unreachable`].
    pub once_attempts: u32,
    /// Ask the server to compress the stream (zstd): worth it over a
    /// network, not over a local unix socket. Off by default.
    pub compress: bool,
    /// Each round's report to the server's fleet view waits a random
    /// time up to this (1 s by default), so that the reports of
    /// thousands of nodes after one change do not compete with its
    /// delivery; the report says how long it waited, and the server dates
    /// the round by it.
    pub report_spread: Duration,
    /// With no frame from the server for this long, the agent sends an
    /// HTTP/2 PING (10 s by default; zero: never). A connection that
    /// stays silent (a peer gone without a reset, a middlebox that
    /// holds the connection and forwards nothing) is then found within
    /// `keepalive_interval + keepalive_timeout` of its last frame, and
    /// the agent reconnects.
    pub keepalive_interval: Duration,
    /// How long a PING waits for its answer before the connection is
    /// given up (5 s by default).
    pub keepalive_timeout: Duration,
    /// How long one attempt may take to connect (TCP, TLS and HTTP/2
    /// handshakes; 5 s by default; zero: no limit). The wait before the
    /// next attempt counts from the start of this one, so an attempt
    /// whose packets are dropped (a cut link) does not add its timeout to
    /// the backoff: after the link heals, the agent is back within
    /// `max_retry` (and the handshakes).
    pub connect_timeout: Duration,
    /// Other replicas of the server (a Deployment of servers), tried in
    /// turn after the address given to [`run_agent`]: the agent stays on
    /// the one that serves it; when that one fails (no connection, a lost
    /// stream, a store not synced yet) it tries the next at once, and
    /// waits its backoff only once every address has failed in a row. On
    /// another replica it resumes from what it holds: the changes since
    /// its revision, nothing when the views' digests agree, otherwise only
    /// the Services that differ (see
    /// [`ViewSummary`](kpng_model::view::ViewSummary)). Empty by default.
    pub replicas: Vec<Address>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            retry: Duration::from_millis(200),
            max_retry: Duration::from_secs(10),
            once: false,
            once_attempts: 5,
            compress: false,
            report_spread: Duration::from_secs(1),
            keepalive_interval: KEEPALIVE_INTERVAL,
            keepalive_timeout: KEEPALIVE_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            replicas: Vec::new(),
        }
    }
}

/// What an agent holds: the server instance and revision of its view,
/// and the view's digest.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    instance: u64,
    revision: u64,
    digest: Vec<u8>,
    /// The server asked for the summary of the view: the next request
    /// sends it.
    summary_wanted: bool,
    /// The server refused the summary (larger than it takes): the agent
    /// resumes without one (a full view) until a round succeeds.
    summary_refused: bool,
}

impl Held {
    /// The request of a watcher holding this; `view` is the view held
    /// (summarized when the server asked), `elsewhere` that other
    /// replicas could serve it.
    fn request(
        &self,
        node: &str,
        view: Option<&kpng_model::view::NodeView>,
        elsewhere: bool,
    ) -> WatchRequest {
        let holds = self.revision > 0;
        WatchRequest {
            node: node.to_owned(),
            since_revision: self.revision,
            since_instance: self.instance,
            since_digest: self.digest.clone(),
            // The decoder reads endpoints in columns, the cheapest form.
            endpoint_columns: true,
            summarizes: view.is_some() && !self.summary_refused,
            since_summary: view
                .filter(|_| holds && self.summary_wanted)
                .map(|view| ViewSummary::of(view).to_wire()),
            // Better another replica, or a retry, than a view older than
            // the one held.
            unavailable_unless_synced: holds || elsewhere,
        }
    }
}

/// How a session that did not fail ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The server ended the stream.
    Closed,
    /// The first sync of a `once` agent.
    Once,
    /// The server asked for the summary of the view held: ask again at
    /// once, with it.
    SummaryWanted,
}

/// Keeps `sink` in line with `node`'s view from the server at `address`
/// (or its replicas, [`AgentConfig::replicas`]): connects (retrying with
/// jittered backoff), streams, applies each batch of changes to the view
/// it holds, and at each `sync` hands the sink the round from the view of
/// the last round that succeeded (a full round at first, after the
/// server's reset, and after a failed round); after a disconnect it
/// resumes from the revision it holds, or, on a restarted server or
/// another replica, from the digest of the view it holds, or when asked
/// from its summary (only the Services that differ are sent). A sink
/// failure, or a change that does not fit the view, makes it start over
/// from a full view. Returns after the first sync with `once`; otherwise
/// runs until dropped.
///
/// The agent holds the node view and the view of the last round that
/// succeeded, which shares every unchanged Service with it; the sink
/// borrows them for each round and need keep no copy.
///
/// Each failed attempt is one log line naming the address and the whole
/// cause: `cannot connect to ADDRESS` when no stream was opened, `lost
/// ENLS watch from ADDRESS` when an open one ended; the first failure at
/// warning level, the same failure again at info level.
///
/// # Errors
/// With `once`, a sink failure, or [`Error::Unreachable`] after
/// [`AgentConfig::once_attempts`] failed attempts in a row; otherwise
/// never.
pub async fn run_agent<S: Sink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut held = Held::default();
    let mut rounds = Rounds::new();
    let addresses: Vec<Address> = std::iter::once(address.clone())
        .chain(config.replicas.iter().cloned())
        .collect();
    let mut retries = Retries::new(&addresses, config);
    let reporter = Reporter::new(config.report_spread);
    loop {
        let started = std::time::Instant::now();
        let asked = held.summary_wanted;
        let result = session(
            &addresses[retries.at],
            node,
            sink,
            &mut held,
            &mut rounds,
            config,
            &mut retries,
            &reporter,
        )
        .await;
        let delay = match result {
            Ok(Ended::Once) => return Ok(()),
            Ok(Ended::SummaryWanted) if !asked => {
                held.summary_wanted = true;
                Duration::ZERO
            }
            Ok(Ended::SummaryWanted) => {
                // Asked again though it was sent: start over.
                held = Held::default();
                rounds.reset();
                retries.ended()
            }
            Ok(Ended::Closed) => retries.ended(),
            Err(e @ Error::Sink(_)) if config.once => return Err(e),
            Err(e @ Error::Sink(_)) => {
                // The sink's state is unknown: start over.
                held = Held::default();
                rounds.reset();
                retries.sink_failed(&e)
            }
            Err(e) => retries.failed(&e, held.revision)?,
        };
        tokio::time::sleep(retries.wait(delay, started)).await;
    }
}

/// Tells the server, after each round, the revision the sink applied and
/// its last error: only the latest report is sent, one at a time, after a
/// random wait up to [`AgentConfig::report_spread`] (with the time it
/// waited), so a burst of rounds costs fewer. Reports go on one stream
/// kept open on the watch's connection (`Enls/Reports`): each costs the
/// server a message, not a call. A server without that stream takes them
/// one call each (`Enls/Report`); one that takes no reports (an older
/// one) is told nothing more than one refused call per round.
pub(crate) struct Reporter {
    latest: tokio::sync::watch::Sender<Option<Latest>>,
    /// Bumped at each session (a new connection): the stream is opened
    /// again on it.
    session: AtomicU64,
    task: tokio::task::JoinHandle<()>,
}

/// The report waiting: the connection, its session, the report, when its
/// round ended.
type Latest = (Client, u64, NodeReport, std::time::Instant);

type Client = EnlsClient<tonic::transport::Channel>;

/// The report stream open on one session's connection.
struct Open {
    session: u64,
    tx: tokio::sync::mpsc::Sender<NodeReport>,
    call: tokio::task::JoinHandle<()>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.call.abort();
    }
}

/// How a server takes reports, as learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Takes {
    /// On a stream (`Enls/Reports`), or not known yet.
    Stream,
    /// One call each (`Enls/Report`).
    Calls,
    /// Not at all (an older server).
    Nothing,
}

impl Reporter {
    pub(crate) fn new(spread: Duration) -> Self {
        let (latest, mut rx) = tokio::sync::watch::channel::<Option<Latest>>(None);
        let task = tokio::spawn(async move {
            let takes = Arc::new(Mutex::new(Takes::Stream));
            let mut open: Option<Open> = None;
            while rx.changed().await.is_ok() {
                // The wait starts with the first report waiting; one that
                // replaces it goes at the same time.
                let spread = u64::try_from(spread.as_micros()).unwrap_or(u64::MAX);
                if spread > 0 {
                    let wait = crate::server::random_u64() % spread;
                    tokio::time::sleep(Duration::from_micros(wait)).await;
                }
                let Some((mut client, session, mut report, ended)) = rx.borrow_and_update().clone()
                else {
                    continue;
                };
                report.held_ms = u32::try_from(ended.elapsed().as_millis()).unwrap_or(u32::MAX);
                let how = *takes.lock().unwrap_or_else(|e| e.into_inner());
                if how == Takes::Stream {
                    let stale = open
                        .as_ref()
                        .is_none_or(|o| o.session != session || o.tx.is_closed());
                    if stale {
                        open = Some(Self::open(&client, session, &takes));
                    }
                    // A full stream (the server slow to read) drops this
                    // report: the next one says it again.
                    if let Some(o) = &open
                        && o.tx.try_send(report.clone()).is_ok()
                    {
                        continue;
                    }
                    if *takes.lock().unwrap_or_else(|e| e.into_inner()) == Takes::Stream {
                        continue;
                    }
                }
                if how == Takes::Nothing {
                    continue;
                }
                match client.report(report).await {
                    Ok(_) => {}
                    Err(status) if status.code() == tonic::Code::Unimplemented => {
                        tracing::info!(
                            "the server takes no reports (an older one): its fleet view \
                             will not show what this node applied"
                        );
                        *takes.lock().unwrap_or_else(|e| e.into_inner()) = Takes::Nothing;
                    }
                    // The next round's report says it again.
                    Err(status) => tracing::debug!("report not taken: {}", status.message()),
                }
            }
        });
        Self {
            latest,
            session: AtomicU64::new(0),
            task,
        }
    }

    /// Opens the report stream on `client`'s connection. A server without
    /// it answers `Unimplemented`: reports go one call each from then on.
    fn open(client: &Client, session: u64, takes: &Arc<Mutex<Takes>>) -> Open {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut client = client.clone();
        let takes = Arc::clone(takes);
        let call = tokio::spawn(async move {
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            match client.reports(stream).await {
                Ok(_) => {}
                Err(status) if status.code() == tonic::Code::Unimplemented => {
                    tracing::debug!("the server takes reports one call each");
                    *takes.lock().unwrap_or_else(|e| e.into_inner()) = Takes::Calls;
                }
                // The connection went: the next session opens another.
                Err(status) => tracing::debug!("report stream ended: {}", status.message()),
            }
        });
        Open { session, tx, call }
    }

    /// A new session (connection): the next report opens the stream on it.
    fn new_session(&self) {
        self.session.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `report` (replacing one not sent yet).
    fn report(&self, client: &Client, report: NodeReport) {
        let session = self.session.load(Ordering::Relaxed);
        self.latest.send_replace(Some((
            client.clone(),
            session,
            report,
            std::time::Instant::now(),
        )));
    }

    /// Sends `report` now, waiting for at most a second (a `once` agent
    /// returns at once after).
    async fn report_now(client: &Client, report: NodeReport) {
        let mut client = client.clone();
        let _ = tokio::time::timeout(Duration::from_secs(1), client.report(report)).await;
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How far a session got: it tells a failure to connect from a watch
/// lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reached {
    /// No stream was opened.
    Nothing,
    /// The server answered the watch.
    Opened,
    /// A revision was synced: progress, the backoff starts over.
    Synced,
}

/// The retries of an agent or a mirror: the backoff, which address to
/// try, and what is said of each attempt.
pub(crate) struct Retries {
    /// The addresses, the current one at `at`.
    addresses: Vec<String>,
    at: usize,
    /// Addresses failed in a row in this round of the list: the backoff
    /// is waited once every one has.
    round: usize,
    address: String,
    backoff: kpng_retry::Backoff,
    /// How far the current session got.
    reached: Reached,
    /// Failed attempts since the last sync.
    failed: u32,
    /// The failure to connect last said at warning level.
    warned: Option<String>,
    /// With `once`, the failed attempts allowed.
    give_up_after: Option<u32>,
}

impl Retries {
    pub(crate) fn new(addresses: &[Address], config: &AgentConfig) -> Self {
        let addresses: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        Self {
            address: addresses.first().cloned().unwrap_or_default(),
            addresses,
            at: 0,
            round: 0,
            backoff: kpng_retry::Backoff::new(config.retry, config.max_retry),
            reached: Reached::Nothing,
            failed: 0,
            warned: None,
            give_up_after: config.once.then_some(config.once_attempts.max(1)),
        }
    }

    /// A session starts.
    fn start(&mut self) {
        self.reached = Reached::Nothing;
    }

    /// The server answered the watch.
    fn opened(&mut self) {
        self.reached = Reached::Opened;
        if self.failed > 0 {
            tracing::info!(
                "connected to {} after {} failed attempts",
                self.address,
                self.failed
            );
        }
    }

    /// A revision was synced: the backoff and the count start over.
    fn synced(&mut self) {
        if self.reached != Reached::Synced {
            self.reached = Reached::Synced;
            self.backoff.reset();
            self.failed = 0;
            self.round = 0;
            self.warned = None;
        }
    }

    /// What is left to wait of `delay` after an attempt that began at
    /// `started`: an attempt that opened no stream (refused, timed out)
    /// counts its own time in the wait, as gRPC's connection backoff
    /// does, so that a connect timeout does not lengthen the backoff; a
    /// stream lost waits the whole delay from its loss.
    fn wait(&self, delay: Duration, started: std::time::Instant) -> Duration {
        if self.reached == Reached::Nothing {
            delay.saturating_sub(started.elapsed())
        } else {
            delay
        }
    }

    /// The server ended a stream: the wait before reconnecting.
    /// The current address failed: the next is tried, at once unless
    /// every address has failed in a row (then after the backoff).
    fn next_address(&mut self) -> Duration {
        let n = self.addresses.len().max(1);
        self.round += 1;
        self.at = (self.at + 1) % n;
        if let Some(next) = self.addresses.get(self.at) {
            self.address.clone_from(next);
        }
        if self.round >= n {
            self.round = 0;
            self.backoff.next_delay()
        } else {
            Duration::ZERO
        }
    }

    /// The server ended a stream: the wait before reconnecting (to the
    /// next address, when there are others).
    fn ended(&mut self) -> Duration {
        let from = self.address.clone();
        let delay = self.next_address();
        tracing::info!(
            "the ENLS watch from {from} ended; reconnecting to {} in {:.1}s",
            self.address,
            delay.as_secs_f64()
        );
        delay
    }

    /// The sink failed: the wait before starting over from a full view.
    fn sink_failed(&mut self, error: &Error) -> Duration {
        let delay = self.backoff.next_delay();
        tracing::warn!(
            "{}; asking {} for a full view in {:.1}s",
            kpng_retry::one_line(error),
            self.address,
            delay.as_secs_f64()
        );
        delay
    }

    /// A failed attempt: logs it and returns the wait before the next,
    /// or the error when it was the last allowed; `revision` is what the
    /// agent holds.
    fn failed(&mut self, error: &Error, revision: u64) -> Result<Duration, Error> {
        let cause = kpng_retry::one_line(error);
        self.failed += 1;
        if self.give_up_after.is_some_and(|n| self.failed >= n) {
            return Err(Error::Unreachable {
                address: self.address.clone(),
                attempts: self.failed,
                cause,
            });
        }
        let address = self.address.clone();
        let delay = self.next_address();
        let wait = if self.addresses.len() > 1 {
            format!("{:.1}s at {}", delay.as_secs_f64(), self.address)
        } else {
            format!("{:.1}s", delay.as_secs_f64())
        };
        if self.reached != Reached::Nothing {
            tracing::warn!(
                "lost ENLS watch from {address} at revision {revision}: {cause}; reconnecting in {wait}"
            );
            // Connected in between: failing to connect again is news.
            self.warned = None;
        } else if self.warned.as_deref() == Some(cause.as_str()) {
            tracing::info!(
                "cannot connect to {address}: {cause} (attempt {}; retrying in {wait})",
                self.failed
            );
        } else {
            tracing::warn!(
                "cannot connect to {address}: {cause} (attempt {}; retrying in {wait}; later \
                 attempts failing alike are logged at info level)",
                self.failed
            );
            self.warned = Some(cause);
        }
        Ok(delay)
    }
}

pub(crate) async fn client(
    address: &Address,
    config: &AgentConfig,
) -> Result<EnlsClient<tonic::transport::Channel>, Error> {
    let client = connect_with(address, config).await?;
    Ok(if config.compress {
        client.accept_compressed(tonic::codec::CompressionEncoding::Zstd)
    } else {
        client
    })
}

/// One connection: streams until it ends (or, with `once`, until the
/// first sync), telling `retries` how far it gets. `held` names the view
/// the agent holds (the server's instance, revision, digest), `rounds`
/// holds it, with what changed since the last round; `reporter` tells
/// the server each round's outcome.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn session<S: Sink + ?Sized>(
    address: &Address,
    node: &str,
    sink: &mut S,
    held: &mut Held,
    rounds: &mut Rounds,
    config: &AgentConfig,
    retries: &mut Retries,
    reporter: &Reporter,
) -> Result<Ended, Error> {
    retries.start();
    // The server sends again what a lost stream did not close with a
    // sync.
    rounds.resume();
    let mut client = client(address, config).await?;
    reporter.new_session();
    let request = held.request(node, Some(rounds.view()), !config.replicas.is_empty());
    let summarized = request.since_summary.is_some();
    // The summary goes once: asked again, the agent starts over.
    held.summary_wanted = false;
    let mut stream = match client.watch(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            // A server that takes no summary this large: resume without
            // one next time, from a full view.
            if summarized
                && matches!(
                    status.code(),
                    tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
                )
            {
                tracing::warn!(
                    "{address} refused the summary of the view held ({}); asking for a full view",
                    status.message()
                );
                held.summary_refused = true;
            }
            return Err(status.into());
        }
    };
    retries.opened();
    let (mut instance, mut digest) = (0, Vec::new());
    let mut decoder = compact::Decoder::new();
    // The view was brought over by its summary: checked against the
    // server's digest at the sync, once.
    let mut check = false;
    while let Some(message) = stream.message().await? {
        match message.event {
            Some(Event::Instance(id)) => instance = id,
            Some(Event::SummaryWanted(_)) => return Ok(Ended::SummaryWanted),
            Some(Event::Dropped(dropped)) => {
                check = true;
                rounds.drop_services(&dropped.services);
            }
            Some(Event::Reset(_)) => {
                // What is held is gone, whatever happens next.
                *held = Held::default();
                rounds.reset();
            }
            Some(Event::Changes(changes)) => {
                let mut misfit = false;
                let applied = decoder.batch_grouped(changes, |decoded| {
                    rounds.apply_decoded(decoded).map_err(|e| {
                        misfit = true;
                        Error::from(e)
                    })
                });
                if misfit {
                    // The view is not the server's: ask for the whole
                    // view.
                    *held = Held::default();
                    rounds.reset();
                }
                applied?;
            }
            Some(Event::Digest(d)) => digest = d,
            Some(Event::Sync(revision)) => {
                decoder.end_round();
                // The first round of another instance that did not reset:
                // its digest must be the view's (a summary's fingerprints
                // are 64 bits; a mismatch costs a full view, never a
                // wrong one).
                let other = held.instance != 0 && instance != held.instance;
                if (check || other && !digest.is_empty())
                    && ViewDigest::from_bytes(&digest) != Some(ViewDigest::of(rounds.view()))
                {
                    *held = Held::default();
                    rounds.reset();
                    return Err(Error::Status(tonic::Status::data_loss(
                        "the view resumed on another server instance is not the server's \
                         (its digest differs): asking for the whole view",
                    )));
                }
                check = false;
                let result = rounds.sync(revision, sink);
                let report = NodeReport {
                    node: node.to_owned(),
                    instance,
                    // What the sink holds: this round's, or on a failure
                    // the last one that succeeded (of this server).
                    revision: match &result {
                        Ok(()) => revision,
                        Err(_) if held.instance == instance => held.revision,
                        Err(_) => 0,
                    },
                    error: result
                        .as_ref()
                        .err()
                        .map(|e| crate::fleet::kept_error(kpng_retry::one_line(e)))
                        .unwrap_or_default(),
                    held_ms: 0,
                };
                if config.once {
                    Reporter::report_now(&client, report).await;
                } else {
                    reporter.report(&client, report);
                }
                result?;
                *held = Held {
                    instance,
                    revision,
                    digest: std::mem::take(&mut digest),
                    summary_wanted: false,
                    summary_refused: false,
                };
                retries.synced();
                if config.once {
                    return Ok(Ended::Once);
                }
            }
            None => {}
        }
    }
    Ok(Ended::Closed)
}

/// Keeps `store` a copy of the whole ENLS of the server at `address` (the
/// global watch), for a server that serves another's ENLS: connects
/// (retrying with backoff), applies each revision's changes as one
/// transaction, resumes after a disconnect, and marks every kind synced
/// after the first revision. Returns after the first revision with
/// `once`; otherwise runs until dropped.
///
/// # Errors
/// With `once`, [`Error::Unreachable`] after
/// [`AgentConfig::once_attempts`] failed attempts in a row; otherwise
/// never.
pub async fn run_mirror(
    address: &Address,
    store: &mut kpng_store::Store,
    config: &AgentConfig,
) -> Result<(), Error> {
    let mut held = Held::default();
    let mut retries = Retries::new(std::slice::from_ref(address), config);
    loop {
        let started = std::time::Instant::now();
        let result = mirror_session(address, store, &mut held, config, &mut retries).await;
        let delay = match result {
            Ok(()) if config.once => return Ok(()),
            Ok(()) => retries.ended(),
            Err(e) => retries.failed(&e, held.revision)?,
        };
        tokio::time::sleep(retries.wait(delay, started)).await;
    }
}

pub(crate) async fn mirror_session(
    address: &Address,
    store: &mut kpng_store::Store,
    held: &mut Held,
    config: &AgentConfig,
    retries: &mut Retries,
) -> Result<(), Error> {
    use kpng_model::Kind;
    retries.start();
    let mut stream = client(address, config)
        .await?
        .watch_all(held.request("", None, false))
        .await?
        .into_inner();
    retries.opened();
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
                    store.mark_listed(kind);
                }
                *held = Held {
                    instance,
                    revision,
                    digest: Vec::new(),
                    summary_wanted: false,
                    summary_refused: false,
                };
                retries.synced();
                if config.once {
                    return Ok(());
                }
            }
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt that opened no stream (a connect timeout on a cut
    /// link, say) counts its own time in the wait, so the next attempt
    /// starts at most `max_retry` after the previous one started; a
    /// stream lost waits the whole delay. Over a fleet cut together, the
    /// waits at the cap spread over half of it.
    #[test]
    fn a_failed_attempt_counts_its_own_time_and_waits_spread() {
        let config = AgentConfig::default();
        let address = Address::Unix("/nowhere/kpng.sock".into());
        let mut retries = Retries::new(std::slice::from_ref(&address), &config);
        let refused = Error::Address("refused".into());
        let started = std::time::Instant::now() - Duration::from_secs(5);
        retries.start();
        let delay = retries.failed(&refused, 0).unwrap_or_default();
        assert!(delay <= config.retry);
        let wait = retries.wait(Duration::from_secs(8), started);
        assert!(
            wait <= Duration::from_secs(3) && wait > Duration::from_secs(2),
            "{wait:?}"
        );
        assert_eq!(
            retries.wait(Duration::from_secs(2), started),
            Duration::ZERO
        );
        retries.start();
        retries.opened();
        assert_eq!(
            retries.wait(Duration::from_secs(2), started),
            Duration::from_secs(2)
        );

        // 100 agents that failed alike 10 times: their next waits lie in
        // [5, 10] s (the cap's half to the cap), spread over it.
        let waits: Vec<Duration> = (0..100)
            .map(|_| {
                let mut backoff = kpng_retry::Backoff::new(config.retry, config.max_retry);
                for _ in 0..10 {
                    backoff.next_delay();
                }
                backoff.next_delay()
            })
            .collect();
        let (min, max) = (
            waits.iter().min().copied().unwrap_or_default(),
            waits.iter().max().copied().unwrap_or_default(),
        );
        assert!(
            min >= config.max_retry / 2 && max <= config.max_retry,
            "{min:?}..{max:?}"
        );
        assert!(max - min >= Duration::from_secs(3), "{min:?}..{max:?}");
    }

    /// Failures in a row count until a revision is synced (a stream
    /// opened and lost at once is no progress): the backoff grows through
    /// them, and `once` gives up after its attempts, naming the address.
    #[test]
    fn retries_grow_until_a_sync_and_once_gives_up_naming_the_address() {
        let config = AgentConfig {
            once: true,
            once_attempts: 3,
            ..AgentConfig::default()
        };
        let address = Address::Unix("/nowhere/kpng.sock".into());
        let mut retries = Retries::new(std::slice::from_ref(&address), &config);
        let refused = Error::Address("refused".into());
        retries.start();
        assert!(retries.failed(&refused, 0).is_ok());
        // Opened, then lost before any sync: not progress.
        retries.start();
        retries.opened();
        assert!(retries.failed(&refused, 0).is_ok());
        assert_eq!(retries.backoff.step(), config.retry * 4);
        // A sync starts everything over.
        retries.start();
        retries.opened();
        retries.synced();
        assert_eq!(retries.backoff.step(), config.retry);
        for _ in 0..2 {
            retries.start();
            assert!(retries.failed(&refused, 1).is_ok());
        }
        retries.start();
        let error = retries.failed(&refused, 1).err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("cannot connect to unix:///nowhere/kpng.sock (3 attempts): refused")
        );
    }
}
