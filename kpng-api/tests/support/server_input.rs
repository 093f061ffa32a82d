//! Bytes from an untrusted client through the server's own handling of a
//! connection: an in-memory pipe served by `kpng_api::serve_connection`
//! (hyper's HTTP/2 under the server's limits, the gRPC framing and
//! decoding of every method), fed after a valid HTTP/2 preface with
//! either the input as it is (frames of any kind), or a request to a
//! method the input picks, with a codec it picks, whose body is the
//! input (raw, or cut into gRPC messages of consistent lengths). Time is
//! tokio's paused clock, so the server's deadlines pass at once.
//!
//! Checked: nothing panics; the connection ends once the client has sent
//! its bytes and closed its side; the server then holds no connection
//! and no byte unsent. Shared by the fuzz target `server_input` and
//! `tests/server_input.rs`.

use std::time::Duration;

use kpng_api::{Server, serve_connection};
use kpng_model::v1::Service;
use kpng_model::{Kind, ServiceInfo};
use kpng_store::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const METHODS: [&str; 6] = [
    "/kpng.model.v1.Enls/Watch",
    "/kpng.model.v1.Enls/WatchAll",
    "/kpng.model.v1.Enls/Report",
    "/kpng.model.v1.Enls/Reports",
    "/kpng.model.v1.Enls/Fleet",
    "/kpng.model.v1.Enls/Nothing",
];
const CODECS: [Option<&str>; 4] = [None, Some("gzip"), Some("zstd"), Some("snappy")];

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap_or(0).to_be_bytes();
    let mut f = len[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// A header field, literal without indexing, its name new (RFC 7541
/// §6.2.2; every length here is under 127).
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0);
    block.push(u8::try_from(name.len()).unwrap_or(0));
    block.extend(name.as_bytes());
    block.push(u8::try_from(value.len()).unwrap_or(0));
    block.extend(value.as_bytes());
}

/// The client's bytes for `data`.
pub(crate) fn client_bytes(data: &[u8]) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    let Some((&mode, rest)) = data.split_first() else {
        return out;
    };
    if mode % 3 == 0 {
        out.extend(rest);
        return out;
    }
    let pick = |i: usize| rest.get(i).copied().unwrap_or(0);
    let (method, codec, end) = (pick(0), pick(1), pick(2));
    let body = rest.get(3..).unwrap_or_default();
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", METHODS[usize::from(method) % METHODS.len()]),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        literal(&mut block, name, value);
    }
    if let Some(codec) = CODECS[usize::from(codec) % CODECS.len()] {
        literal(&mut block, "grpc-encoding", codec);
    }
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x4, 1, &block));
    let payload = if mode % 3 == 1 {
        body.to_vec()
    } else {
        // Messages: a flag byte, a length byte, that many bytes.
        let mut messages = Vec::new();
        let mut at = body;
        while let [flag, len, after @ ..] = at {
            let n = usize::from(*len).min(after.len());
            messages.push(flag & 1);
            messages.extend(u32::try_from(n).unwrap_or(0).to_be_bytes());
            messages.extend(&after[..n]);
            at = &after[n..];
        }
        messages
    };
    let chunks: Vec<&[u8]> = payload.chunks(16_384).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        out.extend(frame(0x0, u8::from(last && end % 2 == 1), 1, chunk));
    }
    out
}

/// A server of a small store.
fn server() -> Server {
    let mut store = Store::new();
    let mut txn = store.begin();
    for name in ["web", "db"] {
        if let Ok(service) = ServiceInfo::new(Service::new("default", name)) {
            txn.set_service(service);
        }
    }
    txn.commit();
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    Server::new(store.reader())
}

/// Feeds `data` to a fresh server's connection; panics on what must not
/// happen. The bytes the server answered with, and the watch streams
/// it opened.
pub(crate) fn run(data: &[u8]) -> (usize, u64) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    else {
        return (0, 0);
    };
    let bytes = client_bytes(data);
    runtime.block_on(async move {
        let server = server();
        let (mut client, served) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(serve_connection(served, "fuzz", server.clone()));
        let talk = async {
            let _ = client.write_all(&bytes).await;
            let mut sink = vec![0; 64 * 1024];
            let mut answered = 0;
            // A second of the server's answers (the clock is paused: it
            // moves on once all is idle), then the client's side closes.
            let start = tokio::time::Instant::now();
            let mut open = true;
            while open {
                if start.elapsed() >= Duration::from_secs(1) {
                    let _ = client.shutdown().await;
                }
                let read = if start.elapsed() < Duration::from_secs(1) {
                    tokio::time::timeout_at(start + Duration::from_secs(1), client.read(&mut sink))
                        .await
                        .unwrap_or(Ok(usize::MAX))
                } else {
                    client.read(&mut sink).await
                };
                match read {
                    Ok(0) | Err(_) => open = false,
                    Ok(usize::MAX) => {}
                    Ok(n) => answered += n,
                }
            }
            answered
        };
        // The deadlines are the server's: its keepalive ends a connection
        // whose client stopped answering within 80 s.
        let ended = tokio::time::timeout(Duration::from_secs(600), talk).await;
        let Ok(answered) = ended else {
            panic!("the server kept the connection open");
        };
        drop(client);
        let served = tokio::time::timeout(Duration::from_secs(600), serving).await;
        assert!(
            matches!(served, Ok(Ok(()))),
            "the connection's task ended without a panic"
        );
        let stats = server.stats();
        assert_eq!(stats.open_connections, 0, "{stats:?}");
        assert_eq!(stats.unsent_bytes, 0, "{stats:?}");
        (answered, stats.full_views)
    })
}
