//! The server under hostile or broken clients: one that sends nothing,
//! one that is not HTTP/2, one that breaks HTTP/2 after the preface, gRPC
//! requests that do not decode, a watch that never reads, connections
//! over the limit, and over TCP a client that never starts TLS. For each:
//! the server stays up, an honest agent still gets its changes, and the
//! client is logged once, naming its peer (the unix socket's pid, or the
//! TCP address). Memory under these clients is measured by `cargo bench
//! -p kpng-api --bench hostile`, not here.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use httlib_hpack::{Decoder, Encoder};
use kpng_api::{Address, AgentConfig, Limits, Server, bind_unix, run_agent, serve};
use kpng_model::v1::{Service, WatchRequest};
use kpng_model::{Kind, ServiceInfo};
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

mod common;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the server logs, kept for the test (a subscriber of this
/// thread's: the test's runtime runs on it, the server's tasks too).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// The lines that hold `needle`.
    fn lines(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().expect("logs"))
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    fn all(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

/// This process, as the server names it on the unix socket.
fn me() -> String {
    format!("unix pid {} uid ", std::process::id())
}

fn store(shape: ClusterShape) -> Store {
    let cluster = Cluster::synthetic(shape);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    store
}

fn small() -> ClusterShape {
    ClusterShape {
        services: 30,
        endpoints: 120,
        nodes: 4,
        zones: 2,
    }
}

fn socket(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kpng-hostile-{test}-{}.sock", std::process::id()))
}

/// Serves `store` at a socket of the test's own, under `limits`.
fn serving(test: &str, store: &Store, limits: Limits) -> (PathBuf, Server) {
    let path = socket(test);
    let server = Server::new(store.reader()).with_limits(limits);
    let listener = bind_unix(&path).expect("bind");
    tokio::spawn(serve(listener, server.clone()));
    (path, server)
}

/// Counts the Services of each round's view.
struct Count(usize);

impl Sink for Count {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.0 = round.view().services.len();
        Ok(())
    }
}

/// An honest agent (`once`): how many Services node-1's view has.
async fn honest(address: Address) -> usize {
    let mut count = Count(0);
    let mut config = AgentConfig::default();
    config.once = true;
    tokio::time::timeout(
        Duration::from_secs(30),
        run_agent(&address, "node-1", &mut count, &config),
    )
    .await
    .expect("the agent synced within 30 s")
    .expect("the agent synced");
    count.0
}

/// An honest agent sees a Service committed now.
async fn honest_agent_gets_a_change(address: Address, store: &mut Store, name: &str) {
    let before = honest(address.clone()).await;
    let mut txn = store.begin();
    txn.set_service(ServiceInfo::new(Service::new("default", name)).expect("valid"));
    txn.commit();
    assert_eq!(honest(address).await, before + 1, "the new Service arrived");
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("short").to_be_bytes();
    let mut f = len[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// A request's header block for `path`, with extra fields.
fn request_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut encoder = Encoder::default();
    let mut block = Vec::new();
    let fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    for (name, value) in fields.iter().chain(extra) {
        encoder
            .encode(
                (name.as_bytes().to_vec(), value.as_bytes().to_vec(), 0x4),
                &mut block,
            )
            .expect("encode");
    }
    block
}

/// The preface, SETTINGS with the largest stream window, the largest
/// connection window: a client that lets the server send all it can.
fn greedy_start() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    out.extend(frame(0x8, 0, 0, &0x7fff_0000_u32.to_be_bytes()));
    out
}

/// A gRPC message: flag, length, body.
fn grpc(flag: u8, declared: u32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![flag];
    m.extend(declared.to_be_bytes());
    m.extend(body);
    m
}

fn watch_message(node: &str) -> Vec<u8> {
    let request = WatchRequest {
        node: node.into(),
        ..Default::default()
    }
    .encode_to_vec();
    grpc(0, u32::try_from(request.len()).expect("short"), &request)
}

/// Sends one request on a connection of its own; returns its grpc-status
/// (the server answers a refused request with trailers only).
async fn refused_status(path: &Path, method: &str, extra: &[(&str, &str)], body: &[u8]) -> String {
    let mut socket = UnixStream::connect(path).await.expect("connect");
    let mut out = greedy_start();
    out.extend(frame(0x1, 0x4, 1, &request_block(method, extra)));
    out.extend(frame(0x0, 0x1, 1, body));
    socket.write_all(&out).await.expect("write");
    let mut decoder = Decoder::default();
    loop {
        let mut header = [0; 9];
        socket.read_exact(&mut header).await.expect("a frame");
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0; len];
        socket.read_exact(&mut payload).await.expect("a payload");
        if header[3] == 0x1 {
            let mut fields = Vec::new();
            decoder.decode(&mut payload, &mut fields).expect("HPACK");
            if let Some((_, status, _)) = fields.iter().find(|(n, _, _)| n == b"grpc-status") {
                return String::from_utf8_lossy(status).into_owned();
            }
        }
        if header[3] == 0x0 && header[4] & 0x1 != 0 {
            panic!("the request was answered with a stream, not refused");
        }
    }
}

/// Waits until the server closes `socket` (reading and dropping what it
/// sends meanwhile); how long it took.
async fn closed(socket: &mut UnixStream, within: Duration) -> Duration {
    let start = tokio::time::Instant::now();
    let mut buf = vec![0; 64 * 1024];
    loop {
        match tokio::time::timeout_at(start + within, socket.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the server kept the connection past {within:?}"),
        }
    }
}

#[tokio::test]
async fn a_connection_that_sends_no_preface_is_closed_and_logged_once() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let mut limits = Limits::default();
    limits.preface_timeout = Duration::from_millis(500);
    let (path, server) = serving("silent", &store, limits);
    // Three connections: one sends nothing, one half the preface, one
    // the preface's first byte.
    let start = tokio::time::Instant::now();
    let mut sockets = Vec::new();
    for sent in [&b""[..], &PREFACE[..12], &PREFACE[..1]] {
        let mut socket = UnixStream::connect(&path).await.expect("connect");
        socket.write_all(sent).await.expect("write");
        sockets.push(socket);
    }
    for socket in &mut sockets {
        closed(socket, Duration::from_secs(10)).await;
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(400), "closed after {took:?}");
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "after-silence").await;
    let lines = logs.lines("sent no HTTP/2 preface within 0.5 s");
    assert_eq!(lines.len(), 1, "logged once: {}", logs.all());
    assert!(lines[0].contains(&me()), "names the peer: {}", lines[0]);
    assert_eq!(server.stats().client_faults, 3);
    let _ = std::fs::remove_file(&path);
}

/// Python's raw socket sending an HTTP/1 request to the unix socket, or
/// `None` without python3; prints `closed` once the server closed it.
fn python_garbage(path: &Path) -> Option<std::process::Output> {
    const SCRIPT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b"GET / HTTP/1.1\r\nhost: kpng\r\n\r\n")
s.settimeout(10)
while True:
    try:
        b = s.recv(65536)
    except ConnectionResetError:
        b = b""
    if not b:
        print("closed")
        break
"#;
    std::process::Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(path)
        .output()
        .ok()
}

#[tokio::test]
async fn bytes_where_the_preface_belongs_close_the_connection_at_once() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let (path, server) = serving("garbage", &store, Limits::default());
    for sent in [
        &b"GET / HTTP/1.1\r\nhost: kpng\r\n\r\n"[..],
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"\x00\xff\xfe\xfd garbage",
    ] {
        let mut socket = UnixStream::connect(&path).await.expect("connect");
        socket.write_all(sent).await.expect("write");
        closed(&mut socket, Duration::from_secs(2)).await;
    }
    // A client that is not kpng's, nor in Rust.
    let path2 = path.clone();
    let python = tokio::task::spawn_blocking(move || python_garbage(&path2))
        .await
        .expect("join");
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "after-garbage").await;
    let lines = logs.lines("where the HTTP/2 preface belongs");
    let mine: Vec<_> = lines.iter().filter(|l| l.contains(&me())).collect();
    assert_eq!(mine.len(), 1, "this process logged once: {}", logs.all());
    assert!(
        mine[0].contains(r#"an HTTP/1 request ("GET / HTTP/1.1\r\n")"#),
        "{}",
        mine[0]
    );
    let mut faults = 3;
    if let Some(python) = python {
        assert_eq!(String::from_utf8_lossy(&python.stdout).trim(), "closed");
        assert_eq!(
            lines.len(),
            2,
            "python's connection, its own line: {lines:?}"
        );
        faults += 1;
    } else {
        eprintln!("SKIPPED the python client: no python3");
    }
    assert_eq!(server.stats().client_faults, faults);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_protocol_error_after_the_preface_closes_that_connection_only() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let (path, server) = serving("h2", &store, Limits::default());
    // A SETTINGS frame of 5 bytes (FRAME_SIZE_ERROR); DATA on stream 0
    // (PROTOCOL_ERROR); a header block that does not decode
    // (COMPRESSION_ERROR); a frame over the largest size (FRAME_SIZE_ERROR).
    let broken = [
        frame(0x4, 0, 0, &[0, 1, 0, 0, 0]),
        frame(0x0, 0, 0, b"data"),
        frame(0x1, 0x4 | 0x1, 1, &[0xff, 0xff, 0xff, 0xff, 0x7f]),
        frame(0x0, 0, 1, &vec![0; 20_000]),
    ];
    for bad in &broken {
        let mut socket = UnixStream::connect(&path).await.expect("connect");
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        out.extend(bad);
        socket.write_all(&out).await.expect("write");
        closed(&mut socket, Duration::from_secs(5)).await;
    }
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "after-h2").await;
    let lines = logs.lines("broke HTTP/2");
    assert_eq!(lines.len(), 1, "logged once: {}", logs.all());
    assert!(lines[0].contains(&me()), "{}", lines[0]);
    assert_eq!(server.stats().client_faults, 4);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn malformed_grpc_requests_are_refused_and_logged_once() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let (path, server) = serving("grpc", &store, Limits::default());
    let watch = "/kpng.model.v1.Enls/Watch";
    let report = "/kpng.model.v1.Enls/Report";
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>);
    let cases: Vec<Case<'_>> = vec![
        // The length says 100, 3 bytes come.
        (watch, vec![], grpc(0, 100, b"\x0a\x01x")),
        // 4 GiB declared.
        (watch, vec![], grpc(0, u32::MAX, b"")),
        // Over the 64 KiB a request may be (refused on its length).
        (report, vec![], grpc(0, 70_000, &[0; 100])),
        // Not protobuf.
        (watch, vec![], grpc(0, 3, b"\xff\xff\xff")),
        (report, vec![], grpc(0, 2, b"\x0a\xff")),
        // Compressed, with no codec named.
        (watch, vec![], grpc(1, 2, b"\x0a\x00")),
        // Compressed with a codec the server does not offer.
        (
            watch,
            vec![("grpc-encoding", "snappy")],
            grpc(1, 2, b"\x0a\x00"),
        ),
        // Valid, naming no node.
        (watch, vec![], watch_message("")),
    ];
    let n = cases.len() as u64;
    for (method, extra, body) in cases {
        let status = refused_status(&path, method, &extra, &body).await;
        assert_ne!(status, "0", "{method} {body:?}");
    }
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "after-grpc").await;
    let lines = logs.lines("refused:");
    assert_eq!(lines.len(), 1, "logged once: {}", logs.all());
    assert!(lines[0].contains(&me()), "{}", lines[0]);
    assert!(
        lines[0].contains("request to /kpng.model.v1.Enls/Watch"),
        "{}",
        lines[0]
    );
    assert_eq!(server.stats().client_faults, n);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_watch_that_never_reads_holds_a_bounded_buffer_and_is_closed() {
    let (logs, _guard) = Logs::capture();
    // A view of ~2 MB: more than the socket's and HTTP/2's buffers.
    let mut store = store(ClusterShape {
        services: 2000,
        endpoints: 40_000,
        nodes: 4,
        zones: 2,
    });
    let mut limits = Limits::default();
    limits.keepalive_interval = Duration::from_secs(2);
    limits.keepalive_timeout = Duration::from_secs(1);
    let max_send_buffer = limits.max_send_buffer as u64;
    let (path, server) = serving("never-reads", &store, limits);
    let mut socket = UnixStream::connect(&path).await.expect("connect");
    let mut out = greedy_start();
    out.extend(frame(
        0x1,
        0x4,
        1,
        &request_block("/kpng.model.v1.Enls/Watch", &[]),
    ));
    out.extend(frame(0x0, 0x1, 1, &watch_message("node-2")));
    socket.write_all(&out).await.expect("write");
    // Reading nothing: the server's buffers fill, then it waits.
    let mut unsent = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        unsent = unsent.max(server.stats().unsent_bytes);
    }
    println!(
        "a watch that never reads: {unsent} bytes unsent in the server (send buffer {max_send_buffer})"
    );
    assert!(unsent > 0, "the watch had something to send");
    // The send buffer, and a message of the watch handed whole.
    assert!(
        unsent <= max_send_buffer + 256 * 1024,
        "{unsent} bytes held for a client that never reads"
    );
    assert_eq!(server.stats().open_streams, 1);
    // Meanwhile an honest agent is served.
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "beside").await;
    // It answers no keepalive ping: closed after 2 s + 1 s.
    closed(&mut socket, Duration::from_secs(15)).await;
    for _ in 0..100 {
        if server.stats().open_streams == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.stats().open_streams, 0, "the stream is freed");
    assert!(
        server.stats().unsent_bytes < 64 * 1024,
        "{:?}",
        server.stats()
    );
    let lines = logs.lines("answered no keepalive ping within 1 s");
    assert_eq!(lines.len(), 1, "{}", logs.all());
    assert!(lines[0].contains(&me()), "{}", lines[0]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_and_logged_once() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let mut limits = Limits::default();
    limits.max_connections = 40;
    let (path, server) = serving("limit", &store, limits);
    // 40 idle connections, each past its preface.
    let mut idle = Vec::new();
    for _ in 0..40 {
        let mut socket = UnixStream::connect(&path).await.expect("connect");
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        socket.write_all(&out).await.expect("write");
        idle.push(socket);
    }
    for _ in 0..100 {
        if server.stats().open_connections == 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.stats().open_connections, 40);
    // Five more are closed at once.
    for _ in 0..5 {
        let mut socket = UnixStream::connect(&path).await.expect("connect");
        closed(&mut socket, Duration::from_secs(2)).await;
    }
    assert_eq!(server.stats().refused_connections, 5);
    // Room for an honest agent: two idle ones go.
    idle.truncate(38);
    for _ in 0..100 {
        if server.stats().open_connections == 38 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    honest_agent_gets_a_change(Address::Unix(path.clone()), &mut store, "within-limit").await;
    let lines = logs.lines("serves 40 connections at most");
    assert_eq!(lines.len(), 1, "{}", logs.all());
    assert!(lines[0].contains(&me()), "{}", lines[0]);
    drop(idle);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn over_tcp_a_client_without_tls_is_closed_naming_its_address() {
    let (logs, _guard) = Logs::capture();
    let mut store = store(small());
    let pki = common::pki();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tls = kpng_api::Tls {
        cert: pki.server.0.clone(),
        key: pki.server.1.clone(),
        ca: pki.ca.clone(),
    };
    let mut limits = Limits::default();
    limits.preface_timeout = Duration::from_millis(500);
    let server = Server::new(store.reader()).with_limits(limits);
    let serving = server.clone();
    tokio::spawn(async move { kpng_api::serve_tcp(listener, serving, &tls).await });

    // Silent: closed at the deadline.
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let silent_port = silent.local_addr().expect("addr").port();
    let mut buf = [0; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf))
        .await
        .expect("closed within 10 s");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // Plain HTTP/2 where TLS belongs: the handshake fails.
    let mut plain = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let plain_port = plain.local_addr().expect("addr").port();
    plain.write_all(PREFACE).await.expect("write");
    let n = tokio::time::timeout(Duration::from_secs(10), plain.read(&mut buf)).await;
    assert!(n.is_ok(), "answered or closed at once");

    let address = Address::Tcp {
        addr: addr.to_string(),
        domain: "localhost".into(),
        tls: kpng_api::Tls {
            cert: pki.client.0.clone(),
            key: pki.client.1.clone(),
            ca: pki.ca.clone(),
        },
    };
    honest_agent_gets_a_change(address, &mut store, "over-tcp").await;

    let silent_lines = logs.lines("no TLS handshake within 0.5 s");
    assert_eq!(silent_lines.len(), 1, "{}", logs.all());
    assert!(
        silent_lines[0].contains(&format!("tcp 127.0.0.1:{silent_port}")),
        "{}",
        silent_lines[0]
    );
    let failed = logs.lines("TLS handshake failed");
    assert_eq!(failed.len(), 1, "{}", logs.all());
    assert!(
        failed[0].contains(&format!("tcp 127.0.0.1:{plain_port}")),
        "{}",
        failed[0]
    );
    assert_eq!(server.stats().client_faults, 2);
    let _ = std::io::stdout().flush();
}
