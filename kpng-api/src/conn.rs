//! The server's connections: accepted one by one and served by hyper's
//! HTTP/2 under the server's [`Limits`]. A client that sends nothing, is
//! not HTTP/2, breaks the protocol, sends a request that does not decode,
//! or comes over the connection limit is closed (or its request refused)
//! and logged once, naming its peer: the TCP address, or on the unix
//! socket the pid and uid the kernel gives (`SO_PEERCRED`). Repeats from
//! the same peer (its address, or its pid) of the same fault within a
//! minute are counted, and said with the next line logged after it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;

use crate::server::{Routes, Server, service};

/// The client's connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How long one peer's repeats of one fault are counted, not logged.
const LOG_WINDOW: Duration = Duration::from_secs(60);
/// Peers remembered for that; older ones are forgotten first.
const LOG_PEERS: usize = 4096;
/// The pause after an accept that failed (out of file descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the server allows each connection and each stream, and how many
/// connections. [`Server::with_limits`] sets them; [`Limits::default`] is
/// what `kpng … to-api` serves with (see docs/operator/security.md for
/// why each).
///
/// What one connection can make the server hold is bounded by them:
/// what a client sends and the server has not read is at most
/// `connection_window` (HTTP/2 flow control), plus at most
/// `max_request_size` per open stream being decoded
/// (`max_watch_request_size` for a watch's one request); what the server has
/// to send and the client does not read is at most `max_send_buffer` per
/// stream in HTTP/2's buffers (plus a few queued messages per watch, see
/// [`Server`]); header blocks at most `max_header_list_size` per stream.
/// Streams are at most `max_concurrent_streams` per connection, and
/// connections at most `max_connections`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Connections served at once; one more is closed as soon as it is
    /// accepted (and logged). Each takes one file descriptor.
    pub max_connections: usize,
    /// A connection must have sent the HTTP/2 preface (over TCP: finished
    /// its TLS handshake and sent the preface) this long after it was
    /// accepted, or it is closed.
    pub preface_timeout: Duration,
    /// HTTP/2 streams (calls) open at once on one connection.
    pub max_concurrent_streams: u32,
    /// The HTTP/2 flow-control window of each stream the client sends on.
    pub stream_window: u32,
    /// The HTTP/2 flow-control window of a connection, all its streams.
    pub connection_window: u32,
    /// What HTTP/2 buffers per stream for a client that does not read.
    pub max_send_buffer: usize,
    /// The largest HTTP/2 frame the server takes.
    pub max_frame_size: u32,
    /// The largest header block (decoded) of a request.
    pub max_header_list_size: u32,
    /// The largest gRPC request message (after decompression), but for a
    /// watch's.
    pub max_request_size: usize,
    /// The largest `Enls/Watch` request: an agent that moves to another
    /// replica sends the summary of the view it holds, 16 bytes a
    /// Service (1.6 MB at 100,000 Services). One a stream, read once.
    pub max_watch_request_size: usize,
    /// After this long without a frame from the client, the server pings
    /// it…
    pub keepalive_interval: Duration,
    /// …and closes the connection when the answer has not come this long
    /// after. By default 15 s and 5 s: the streams of an agent cut off
    /// without a reset end within 20 s of its last frame, and the fleet
    /// view lists it away.
    pub keepalive_timeout: Duration,
    /// Streams a client opened and reset before the server took them in,
    /// at once (HTTP/2 rapid reset, CVE-2023-44487); more closes the
    /// connection.
    pub max_pending_reset_streams: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 16_384,
            preface_timeout: Duration::from_secs(10),
            max_concurrent_streams: 200,
            stream_window: 64 * 1024,
            connection_window: 1024 * 1024,
            max_send_buffer: 400 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 16 * 1024,
            max_request_size: 64 * 1024,
            max_watch_request_size: 4 * 1024 * 1024,
            keepalive_interval: Duration::from_secs(15),
            keepalive_timeout: Duration::from_secs(5),
            max_pending_reset_streams: 20,
        }
    }
}

/// Who is at the other end of a connection.
#[derive(Clone, Debug)]
pub(crate) enum Peer {
    /// A TCP client.
    Tcp(SocketAddr),
    /// A unix socket client, as the kernel gives it.
    Unix { pid: Option<i32>, uid: Option<u32> },
    /// A connection handed over by the caller ([`serve_connection`]).
    Named(String),
}

impl Peer {
    fn of_unix(stream: &tokio::net::UnixStream) -> Self {
        match stream.peer_cred() {
            Ok(cred) => Peer::Unix {
                pid: cred.pid(),
                uid: Some(cred.uid()),
            },
            Err(_) => Peer::Unix {
                pid: None,
                uid: None,
            },
        }
    }

    /// What its repeats are counted under: a TCP client's address without
    /// its port (a retry comes from another port), a unix client's pid.
    fn key(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Unix { pid, .. } => format!("pid {pid:?}"),
            Peer::Named(name) => name.clone(),
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "tcp {addr}"),
            Peer::Unix {
                pid: Some(pid),
                uid: Some(uid),
            } => write!(f, "unix pid {pid} uid {uid}"),
            Peer::Unix { uid: Some(uid), .. } => write!(f, "unix uid {uid}"),
            Peer::Unix { .. } => f.write_str("unix (peer credentials unknown)"),
            Peer::Named(name) => f.write_str(name),
        }
    }
}

/// What a client did that the server closed its connection or refused its
/// request for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    /// Came over the connection limit.
    OverLimit,
    /// (The listener's own.) An accept failed.
    Accept,
    /// Sent no preface (or no TLS handshake) in time.
    Silent,
    /// Sent something other than the HTTP/2 preface.
    NotHttp2,
    /// Failed the TLS handshake.
    Tls,
    /// Broke HTTP/2 after the preface.
    Http2,
    /// Did not answer a keepalive ping in time.
    Unanswered,
    /// Sent a gRPC request the server refused (malformed, too large, a
    /// codec not offered).
    Request,
}

impl Fault {
    fn as_str(self) -> &'static str {
        match self {
            Fault::OverLimit => "over the connection limit",
            Fault::Accept => "accept failed",
            Fault::Silent => "silent",
            Fault::NotHttp2 => "not HTTP/2",
            Fault::Tls => "TLS handshake",
            Fault::Http2 => "HTTP/2 protocol error",
            Fault::Unanswered => "keepalive unanswered",
            Fault::Request => "refused request",
        }
    }
}

/// The server's log of misbehaving peers: each peer's fault once a
/// window, its repeats counted.
#[derive(Debug, Default)]
pub(crate) struct PeerLog {
    seen: Mutex<HashMap<(String, Fault), Seen>>,
}

#[derive(Debug)]
struct Seen {
    at: Instant,
    more: u64,
}

impl PeerLog {
    /// Logs that `peer` did `what` (a `fault`), unless it did the same
    /// within the window (then it is counted, and said with the next line).
    pub(crate) fn note(&self, peer: &Peer, fault: Fault, what: &str) {
        let now = Instant::now();
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let key = (peer.key(), fault);
        let more = match seen.get_mut(&key) {
            Some(s) if now.duration_since(s.at) < LOG_WINDOW => {
                s.more += 1;
                return;
            }
            Some(s) => std::mem::replace(s, Seen { at: now, more: 0 }).more,
            None => {
                if seen.len() >= LOG_PEERS {
                    seen.retain(|_, s| now.duration_since(s.at) < LOG_WINDOW);
                    if seen.len() >= LOG_PEERS {
                        seen.clear();
                    }
                }
                seen.insert(key, Seen { at: now, more: 0 });
                0
            }
        };
        drop(seen);
        if more > 0 {
            tracing::warn!(
                %peer,
                fault = fault.as_str(),
                "{what} (and {more} more times from this peer in the {} s before)",
                LOG_WINDOW.as_secs()
            );
        } else {
            tracing::warn!(%peer, fault = fault.as_str(), "{what}");
        }
    }
}

/// What is shared by a listener's connections.
#[derive(Clone)]
struct Accepting {
    server: Server,
    builder: Arc<hyper::server::conn::http2::Builder<TokioExecutor>>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Accepting {
    fn new(server: Server) -> Self {
        let limits = server.limits().clone();
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.max_concurrent_streams)
            .initial_stream_window_size(limits.stream_window)
            .initial_connection_window_size(limits.connection_window)
            .max_send_buf_size(limits.max_send_buffer)
            .max_frame_size(limits.max_frame_size)
            .max_header_list_size(limits.max_header_list_size)
            .keep_alive_interval(limits.keepalive_interval)
            .keep_alive_timeout(limits.keepalive_timeout)
            .max_pending_accept_reset_streams(limits.max_pending_reset_streams);
        Self {
            slots: Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1))),
            builder: Arc::new(builder),
            server,
        }
    }

    /// A slot for `peer`'s connection, or `None` (logged) at the limit.
    fn admit(&self, peer: &Peer) -> Option<OwnedSemaphorePermit> {
        let slot = self.slots.clone().try_acquire_owned().ok();
        if slot.is_none() {
            let counters = self.server.counters();
            counters.refused.fetch_add(1, Ordering::Relaxed);
            self.server.peer_log().note(
                peer,
                Fault::OverLimit,
                &format!(
                    "connection closed: the server serves {} connections at most",
                    self.server.limits().max_connections
                ),
            );
        }
        slot
    }

    /// An accept that failed: logged (once a window), then a pause, so
    /// that a listener out of file descriptors does not spin.
    async fn accept_failed(&self, error: &io::Error) {
        self.server.peer_log().note(
            &Peer::Named("listener".into()),
            Fault::Accept,
            &format!("accepting a connection failed: {error}"),
        );
        tokio::time::sleep(ACCEPT_PAUSE).await;
    }

    /// Serves one connection to its end; logs what its client broke.
    async fn serve<I>(self, io: I, watch: Watch, peer: Peer, _slot: Option<OwnedSemaphorePermit>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let counters = self.server.counters().clone();
        counters.connections.fetch_add(1, Ordering::Relaxed);
        let _open = Connected(counters.clone());
        let peer = Arc::new(peer);
        let routes = PerConnection {
            routes: service(self.server.clone()),
            peer: peer.clone(),
            server: self.server.clone(),
            pending: watch.pending.clone(),
        };
        let service = hyper_util::service::TowerToHyperService::new(routes);
        let served = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .await;
        // What was handed for this connection and never written is gone.
        counters
            .unsent
            .fetch_sub(watch.pending.load(Ordering::Relaxed), Ordering::Relaxed);
        let limits = self.server.limits();
        let taken = watch.fault.lock().ok().and_then(|mut f| f.take());
        let broken = match (taken, served) {
            (Some(fault), _) => Some(fault),
            (None, Ok(())) => None,
            (None, Err(error)) => classify(&error, limits),
        };
        match broken {
            Some((fault, what)) => {
                counters.faults.fetch_add(1, Ordering::Relaxed);
                self.server
                    .peer_log()
                    .note(&peer, fault, &format!("connection closed: {what}"));
            }
            None => tracing::debug!(%peer, "connection ended"),
        }
    }
}

/// Counts a connection open while it lives.
struct Connected(Arc<crate::server::Counters>);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a connection's error says its client did, or `None` when the
/// client only went away.
fn classify(error: &hyper::Error, limits: &Limits) -> Option<(Fault, String)> {
    use std::error::Error as _;
    if error.is_timeout() {
        return Some((
            Fault::Unanswered,
            format!(
                "answered no keepalive ping within {} s",
                limits.keepalive_timeout.as_secs_f64()
            ),
        ));
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            if let Some(io) = h2.get_io() {
                return refused_read(io);
            }
            if h2.is_remote() {
                // The client went away, or closed with an error of its own.
                return None;
            }
            let reason = h2.reason().map_or(String::new(), |r| format!(" ({r:?})"));
            return Some((Fault::Http2, format!("broke HTTP/2{reason}: {h2}")));
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return refused_read(io);
        }
        source = cause.source();
    }
    Some((Fault::Http2, error.to_string()))
}

/// A read error: what the reader refused (a header block that does not
/// decode, on the unix socket), or else the client went away.
fn refused_read(io: &io::Error) -> Option<(Fault, String)> {
    (io.kind() == io::ErrorKind::InvalidData).then(|| (Fault::Http2, format!("broke HTTP/2: {io}")))
}

/// Each request of a connection: the peer noted in its extensions, and a
/// request the server refuses for what it is (it does not decode, is too
/// large, is compressed with a codec not offered, names nothing) logged.
#[derive(Clone)]
struct PerConnection {
    routes: Routes,
    peer: Arc<Peer>,
    server: Server,
    /// The connection's bytes handed to HTTP/2 and not written.
    pending: Arc<AtomicI64>,
}

type Answer = Pin<
    Box<
        dyn std::future::Future<Output = Result<http::Response<tonic::body::Body>, Infallible>>
            + Send,
    >,
>;

impl tower::Service<http::Request<hyper::body::Incoming>> for PerConnection {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        let mut request = request.map(tonic::body::Body::new);
        request.extensions_mut().insert(self.peer.clone());
        let path = request.uri().path().to_owned();
        let answer = tower::Service::call(&mut self.routes, request);
        let (peer, server) = (self.peer.clone(), self.server.clone());
        let pending = self.pending.clone();
        Box::pin(async move {
            let counters = server.counters().clone();
            let response = answer.await?.map(|body| {
                tonic::body::Body::new(Counted {
                    body,
                    counters,
                    pending,
                })
            });
            // An error answered at once (trailers only): the request itself.
            if let Some(status) = tonic::Status::from_header_map(response.headers())
                && status.code() != tonic::Code::Ok
                // An unknown method (a newer client): answered, not logged.
                && !(status.code() == tonic::Code::Unimplemented && status.message().is_empty())
            {
                server.counters().faults.fetch_add(1, Ordering::Relaxed);
                server.peer_log().note(
                    &peer,
                    Fault::Request,
                    &format!(
                        "request to {path} refused: {:?}: {}",
                        status.code(),
                        status.message()
                    ),
                );
            }
            Ok(response)
        })
    }
}

/// A response body whose bytes are counted as HTTP/2 takes them.
struct Counted {
    body: tonic::body::Body,
    counters: Arc<crate::server::Counters>,
    pending: Arc<AtomicI64>,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &frame
            && let Some(data) = frame.data_ref()
        {
            let n = i64::try_from(data.len()).unwrap_or(i64::MAX);
            this.counters.unsent.fetch_add(n, Ordering::Relaxed);
            this.pending.fetch_add(n, Ordering::Relaxed);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A client's byte stream, watched until it has sent the HTTP/2 preface:
/// something else ends the connection at once, and nothing by the
/// deadline ends it then. What it did is left in `fault`.
pub(crate) struct Watched<S> {
    io: S,
    /// Bytes of the preface seen so far.
    seen: usize,
    /// The first bytes, to name what a client sent instead.
    start: Vec<u8>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
    fault: FaultCell,
    /// Counts the bytes written.
    counters: Arc<crate::server::Counters>,
    /// The connection's bytes handed to HTTP/2 and not written.
    pending: Arc<AtomicI64>,
}

/// What the server keeps of a [`Watched`] connection's reader and writer.
struct Watch {
    fault: FaultCell,
    pending: Arc<AtomicI64>,
}

/// What a client did, as its connection's reader saw it.
type FaultCell = Arc<Mutex<Option<(Fault, String)>>>;

impl<S> Watched<S> {
    fn new(
        io: S,
        deadline: tokio::time::Instant,
        timeout: Duration,
        counters: Arc<crate::server::Counters>,
    ) -> Self {
        Self {
            counters,
            pending: Arc::default(),
            io,
            seen: 0,
            start: Vec::new(),
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            timeout,
            fault: Arc::default(),
        }
    }

    fn wrote(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            let n = i64::try_from(*n).unwrap_or(i64::MAX);
            self.counters.unsent.fetch_sub(n, Ordering::Relaxed);
            self.pending.fetch_sub(n, Ordering::Relaxed);
        }
    }

    fn watch(&self) -> Watch {
        Watch {
            fault: self.fault.clone(),
            pending: self.pending.clone(),
        }
    }

    fn set(&self, fault: Fault, what: String) {
        if let Ok(mut slot) = self.fault.lock() {
            slot.get_or_insert((fault, what));
        }
    }
}

/// What a client sent instead of the preface, in words.
fn instead(start: &[u8]) -> String {
    let shown: String = start
        .iter()
        .take(16)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    let what = if start.first() == Some(&0x16) {
        "a TLS handshake"
    } else if [
        &b"GET "[..],
        b"POST",
        b"HEAD",
        b"PUT ",
        b"OPTI",
        b"DELE",
        b"CONN",
    ]
    .iter()
    .any(|m| start.starts_with(&m[..start.len().min(m.len())]))
    {
        "an HTTP/1 request"
    } else {
        "bytes"
    };
    format!("sent {what} (\"{shown}\") where the HTTP/2 preface belongs")
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            Poll::Pending => {
                if let Some(deadline) = &mut this.deadline
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    this.deadline = None;
                    this.set(
                        Fault::Silent,
                        format!(
                            "sent no HTTP/2 preface within {} s ({} bytes)",
                            this.timeout.as_secs_f64(),
                            this.seen
                        ),
                    );
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 preface in time",
                    )));
                }
                return Poll::Pending;
            }
            other => return other,
        }
        if this.seen < PREFACE.len() {
            let new = &buf.filled()[before..];
            let n = new.len().min(PREFACE.len() - this.seen);
            this.start.extend_from_slice(&new[..n]);
            if new[..n] != PREFACE[this.seen..this.seen + n] {
                this.deadline = None;
                let what = instead(&this.start);
                this.set(Fault::NotHttp2, what);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "not the HTTP/2 preface",
                )));
            }
            this.seen += n;
            if this.seen == PREFACE.len() {
                this.deadline = None;
                this.start = Vec::new();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Serves `server` on a bound unix socket: each connection's requests'
/// unparseable `:authority` mended ([`crate::authority`]).
pub(crate) async fn serve_unix(listener: tokio::net::UnixListener, server: Server) {
    let accepting = Accepting::new(server);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                accepting.accept_failed(&error).await;
                continue;
            }
        };
        let peer = Peer::of_unix(&stream);
        let Some(slot) = accepting.admit(&peer) else {
            continue;
        };
        let limits = accepting.server.limits();
        let deadline = tokio::time::Instant::now() + limits.preface_timeout;
        let watched = Watched::new(
            stream,
            deadline,
            limits.preface_timeout,
            accepting.server.counters().clone(),
        );
        let watch = watched.watch();
        let fixed = crate::authority::FixAuthority::new(watched);
        tokio::spawn(accepting.clone().serve(fixed, watch, peer, Some(slot)));
    }
}

/// Serves `server` on TCP, each connection's TLS handshake done here
/// under the preface deadline.
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    server: Server,
    acceptor: tokio_rustls::TlsAcceptor,
) {
    let accepting = Accepting::new(server);
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                accepting.accept_failed(&error).await;
                continue;
            }
        };
        let peer = Peer::Tcp(addr);
        let Some(slot) = accepting.admit(&peer) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (accepting, acceptor) = (accepting.clone(), acceptor.clone());
        tokio::spawn(async move {
            let timeout = accepting.server.limits().preface_timeout;
            let deadline = tokio::time::Instant::now() + timeout;
            let tls = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => {
                    tracing::debug!(%peer, "closed before its TLS handshake ended");
                    return;
                }
                Ok(Err(error)) => {
                    accepting
                        .server
                        .counters()
                        .faults
                        .fetch_add(1, Ordering::Relaxed);
                    accepting.server.peer_log().note(
                        &peer,
                        Fault::Tls,
                        &format!("connection closed: TLS handshake failed: {error}"),
                    );
                    return;
                }
                Err(_) => {
                    accepting
                        .server
                        .counters()
                        .faults
                        .fetch_add(1, Ordering::Relaxed);
                    accepting.server.peer_log().note(
                        &peer,
                        Fault::Silent,
                        &format!(
                            "connection closed: no TLS handshake within {} s",
                            timeout.as_secs_f64()
                        ),
                    );
                    return;
                }
            };
            let watched = Watched::new(tls, deadline, timeout, accepting.server.counters().clone());
            let watch = watched.watch();
            accepting.serve(watched, watch, peer, Some(slot)).await;
        });
    }
}

/// Serves `server` on one connection already accepted (any byte stream:
/// a socket of the caller's, an in-memory pipe), until it ends; `peer`
/// names the client in what is logged. The connection is held to the
/// server's [`Limits`] but for `max_connections`, which counts only what
/// a listener accepts.
pub async fn serve_connection<I>(io: I, peer: &str, server: Server)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let accepting = Accepting::new(server);
    let timeout = accepting.server.limits().preface_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let watched = Watched::new(io, deadline, timeout, accepting.server.counters().clone());
    let watch = watched.watch();
    accepting
        .serve(watched, watch, Peer::Named(peer.to_owned()), None)
        .await;
}

/// The rustls configuration of a TCP server: its identity, and client
/// certificates required, chaining to `ca`; HTTP/2 by ALPN.
pub(crate) fn tls_acceptor(tls: &crate::Tls) -> Result<tokio_rustls::TlsAcceptor, crate::Error> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: &dyn fmt::Display| crate::Error::Tls(format!("{what}: {e}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(tls.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("the certificate", &e))?;
    let key = PrivateKeyDer::from_pem_slice(tls.key.as_bytes()).map_err(|e| bad("the key", &e))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(tls.ca.as_bytes()) {
        let ca = ca.map_err(|e| bad("the CA", &e))?;
        roots.add(ca).map_err(|e| bad("the CA", &e))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| bad("the CA", &e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| bad("the certificate and key", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_sent_instead_is_named() {
        assert!(instead(b"GET / HTTP/1.1\r\n").contains("an HTTP/1 request"));
        assert!(instead(&[0x16, 3, 1, 0]).contains("a TLS handshake"));
        let garbage = instead(b"\x00\xffzz");
        assert!(garbage.contains("bytes (\"\\x00\\xffzz\")"), "{garbage}");
    }

    #[test]
    fn a_peer_is_logged_once_a_window() {
        let log = PeerLog::default();
        let peer = Peer::Tcp("10.0.0.1:4000".parse().unwrap());
        let again = Peer::Tcp("10.0.0.1:4001".parse().unwrap());
        log.note(&peer, Fault::NotHttp2, "x");
        log.note(&again, Fault::NotHttp2, "x");
        log.note(&again, Fault::Silent, "y");
        let seen = log.seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "one entry per peer address and fault");
        assert_eq!(seen[&("10.0.0.1".to_owned(), Fault::NotHttp2)].more, 1);
    }
}
