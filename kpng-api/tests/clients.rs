//! gRPC clients that are not kpng's own, on the unix socket: grpc-core
//! names the socket path, percent-encoded, as the request's `:authority`,
//! which the HTTP/2 server under tonic cannot parse. A raw HTTP/2 client
//! sends exactly that; Python's grpcio (grpc-core itself) runs where it is
//! installed (`.ci/run` installs it and sets `KPNG_TEST_PYTHON`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use httlib_hpack::{Decoder, Encoder};
use kpng_api::{Server, bind_unix, serve};
use kpng_model::Kind;
use kpng_model::v1::{WatchEvent, WatchRequest, watch_event::Event};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

mod common;

/// A store of 30 Services, its lists complete.
fn store() -> Store {
    let cluster = Cluster::synthetic(ClusterShape {
        services: 30,
        endpoints: 120,
        nodes: 4,
        zones: 2,
    });
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    store
}

/// A server of [`store`] on a unix socket of its own.
fn serving(test: &str) -> (PathBuf, Store, tokio::task::JoinHandle<()>) {
    let store = store();
    let path =
        std::env::temp_dir().join(format!("kpng-clients-{test}-{}.sock", std::process::id()));
    let listener = bind_unix(&path).expect("bind");
    let server = Server::new(store.reader());
    let task = tokio::spawn(async move {
        let _ = serve(listener, server).await;
    });
    (path, store, task)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("short").to_be_bytes();
    let mut f = len[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// The authority grpc-core sends for `unix:///<path>`.
fn grpc_core_authority(path: &Path) -> String {
    path.to_string_lossy()
        .trim_start_matches('/')
        .replace('/', "%2F")
}

/// Watches `node` as grpc-core would, over raw HTTP/2, until the first
/// sync; returns how many events came before it.
async fn raw_watch(path: &Path, node: &str) -> usize {
    let mut socket = UnixStream::connect(path).await.expect("connect");
    let mut encoder = Encoder::default();
    let mut block = Vec::new();
    let authority = grpc_core_authority(path);
    for (name, value, flags) in [
        (":method", "POST", 0x10_u8),
        (":scheme", "http", 0x10),
        (":path", "/kpng.model.v1.Enls/Watch", 0x2 | 0x4),
        (":authority", authority.as_str(), 0x2 | 0x4),
        ("content-type", "application/grpc", 0x2 | 0x4),
        ("te", "trailers", 0x4),
    ] {
        encoder
            .encode(
                (name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags),
                &mut block,
            )
            .expect("encode");
    }
    let request = WatchRequest {
        node: node.into(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut message = vec![0];
    message.extend(u32::try_from(request.len()).expect("short").to_be_bytes());
    message.extend(request);

    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x4, 1, &block));
    out.extend(frame(0x0, 0x1, 1, &message));
    socket.write_all(&out).await.expect("write");

    let mut decoder = Decoder::default();
    let mut grpc = Vec::new();
    let mut events = 0;
    loop {
        let mut header = [0; 9];
        socket.read_exact(&mut header).await.expect("a frame");
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let mut payload = vec![0; len];
        socket.read_exact(&mut payload).await.expect("a payload");
        match kind {
            // DATA: gRPC messages; give the window back.
            0x0 => {
                grpc.extend_from_slice(&payload);
                let credit = u32::try_from(len).expect("short").to_be_bytes();
                let mut back = frame(0x8, 0, 0, &credit);
                back.extend(frame(0x8, 0, 1, &credit));
                if len > 0 {
                    socket.write_all(&back).await.expect("window");
                }
                while grpc.len() >= 5 {
                    let size = u32::from_be_bytes(grpc[1..5].try_into().expect("4")) as usize;
                    if grpc.len() < 5 + size {
                        break;
                    }
                    let event = WatchEvent::decode(&grpc[5..5 + size]).expect("an event");
                    grpc.drain(..5 + size);
                    events += 1;
                    if let Some(Event::Sync(_)) = event.event {
                        return events;
                    }
                }
            }
            // HEADERS: the response's; trailers before a sync are a failure.
            0x1 => {
                let mut fields = Vec::new();
                decoder.decode(&mut payload, &mut fields).expect("HPACK");
                let fields: Vec<_> = fields
                    .into_iter()
                    .map(|(n, v, _)| {
                        format!(
                            "{}: {}",
                            String::from_utf8_lossy(&n),
                            String::from_utf8_lossy(&v)
                        )
                    })
                    .collect();
                assert!(
                    flags & 0x1 == 0,
                    "the stream ended before a sync: {fields:?}"
                );
            }
            0x3 => panic!("RST_STREAM, error code {:?}", &payload),
            0x4 if flags & 0x1 == 0 => socket
                .write_all(&frame(0x4, 0x1, 0, &[]))
                .await
                .expect("ack"),
            0x7 => panic!("GOAWAY: {:?}", String::from_utf8_lossy(&payload)),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_naming_the_socket_path_as_authority_is_served() {
    let (path, _store, task) = serving("raw");
    let events = tokio::time::timeout(Duration::from_secs(20), raw_watch(&path, "node-1"))
        .await
        .expect("a sync within 20 s");
    assert!(events > 1, "the view's events, then the sync: {events}");
    task.abort();
    let _ = std::fs::remove_file(&path);
}

const PYTHON_WATCH: &str = r#"
import sys, grpc
stubs, target, node = sys.argv[1:4]
sys.path.insert(0, stubs)
from kpng.model.v1 import watch_pb2, watch_pb2_grpc
if len(sys.argv) > 4:
    ca, cert, key = (open(f, 'rb').read() for f in sys.argv[4:7])
    creds = grpc.ssl_channel_credentials(ca, key, cert)
    channel = grpc.secure_channel(target, creds, options=[('grpc.ssl_target_name_override', 'localhost')])
else:
    channel = grpc.insecure_channel(target)
events = 0
for event in watch_pb2_grpc.EnlsStub(channel).Watch(watch_pb2.WatchRequest(node=node), timeout=20):
    events += 1
    if event.WhichOneof('event') == 'sync':
        print('synced after', events, 'events')
        break
"#;

/// Python with grpcio and grpcio-tools, or `None` (the test then skips).
fn python() -> Option<String> {
    let python = std::env::var("KPNG_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_grpc = std::process::Command::new(&python)
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_grpc {
        eprintln!("SKIPPED: {python} has no grpcio and grpcio-tools (.ci/run installs them)");
    }
    has_grpc.then_some(python)
}

/// Runs grpcio's watch of node-2 at `target` (with `tls` files: CA,
/// certificate, key) and checks it synced.
async fn python_watch(python: String, test: &str, target: String, tls: Vec<PathBuf>) {
    let stubs = std::env::temp_dir().join(format!("kpng-clients-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&stubs).expect("stub dir");
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kpng-model/proto");
    let generated = std::process::Command::new(&python)
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", proto.display()))
        .arg(format!("--python_out={}", stubs.display()))
        .arg(format!("--grpc_python_out={}", stubs.display()))
        .args(["kpng/model/v1/model.proto", "kpng/model/v1/watch.proto"])
        .output()
        .expect("protoc");
    let stub_dir = stubs.clone();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .arg("60")
            .arg(&python)
            .args(["-c", PYTHON_WATCH])
            .arg(stub_dir)
            .arg(target)
            .arg("node-2")
            .args(tls)
            .output()
            .expect("python")
    })
    .await
    .expect("join");
    let _ = std::fs::remove_dir_all(&stubs);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("synced after"),
        "grpcio's watch: {stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_watches_over_the_unix_socket() {
    let Some(python) = python() else { return };
    let (path, _store, task) = serving("python");
    let target = format!("unix://{}", path.display());
    python_watch(python, "unix", target, Vec::new()).await;
    task.abort();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_watches_over_tcp_with_mutual_tls() {
    let Some(python) = python() else { return };
    let store = store();
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
    let server = Server::new(store.reader());
    let serving = tokio::spawn(async move { kpng_api::serve_tcp(listener, server, &tls).await });
    let dir = std::env::temp_dir().join(format!("kpng-clients-pki-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("pki dir");
    let files: Vec<PathBuf> = [
        ("ca", &pki.ca),
        ("cert", &pki.client.0),
        ("key", &pki.client.1),
    ]
    .into_iter()
    .map(|(name, pem)| {
        let file = dir.join(name);
        std::fs::write(&file, pem).expect("pem");
        file
    })
    .collect();
    python_watch(python, "tls", addr.to_string(), files).await;
    serving.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
