//! The API source against a small in-test apiserver, over a real socket:
//! the real kube client and kube-runtime watchers speak the Kubernetes
//! list/watch protocol to it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kpng_kube::watch::{self, WatchConfig};
use kpng_kube::{Ingest, IngestConfig};
use kpng_model::{Kind, ServiceName};
use kpng_store::{Reader, Snapshot, Store};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted response.
#[derive(Clone)]
enum Reply {
    /// A list: resourceVersion and items.
    List(&'static str, Vec<Value>),
    /// A watch stream: these events, then hold the connection open.
    Watch(Vec<Value>),
    /// A watch stream: these events, then half a line, then close.
    WatchThenDrop(Vec<Value>),
}

#[derive(Default)]
struct Script {
    /// Per (resource, is_watch): replies in order. When a queue is empty, a
    /// list answers empty and a watch holds open with no event.
    replies: HashMap<(&'static str, bool), VecDeque<Reply>>,
    /// Every request's path and query, in order.
    requests: Vec<String>,
}

struct ApiServer {
    url: String,
    script: Arc<Mutex<Script>>,
}

const RESOURCES: [(&str, &str, &str); 3] = [
    ("/api/v1/services", "v1", "Service"),
    (
        "/apis/discovery.k8s.io/v1/endpointslices",
        "discovery.k8s.io/v1",
        "EndpointSlice",
    ),
    ("/api/v1/nodes", "v1", "Node"),
];

impl ApiServer {
    async fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let script = Arc::new(Mutex::new(script));
        let shared = script.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, shared.clone()));
            }
        });
        Self { url, script }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    fn requests(&self) -> Vec<String> {
        self.script.lock().expect("lock").requests.clone()
    }
}

async fn serve(mut socket: TcpStream, script: Arc<Mutex<Script>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let watch = query.split('&').any(|kv| kv == "watch=true");
    let Some((resource, api_version, kind)) = RESOURCES.iter().find(|(p, ..)| *p == path).copied()
    else {
        let _ = socket
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    };
    let reply = {
        let mut script = script.lock().expect("lock");
        script.requests.push(target.clone());
        script
            .replies
            .get_mut(&(resource, watch))
            .and_then(VecDeque::pop_front)
    };
    let header = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
    let with_type = |mut o: Value| {
        o["apiVersion"] = json!(api_version);
        o["kind"] = json!(kind);
        o
    };
    match reply.unwrap_or(if watch {
        Reply::Watch(vec![])
    } else {
        Reply::List("1", vec![])
    }) {
        Reply::List(rv, items) => {
            let body = json!({
                "apiVersion": api_version,
                "kind": format!("{kind}List"),
                "metadata": {"resourceVersion": rv},
                "items": items.into_iter().map(with_type).collect::<Vec<_>>(),
            })
            .to_string();
            let response = format!("{header}Content-Length: {}\r\n\r\n{body}", body.len());
            let _ = socket.write_all(response.as_bytes()).await;
        }
        Reply::Watch(events) => watch_stream(socket, header, events, false, with_type).await,
        Reply::WatchThenDrop(events) => watch_stream(socket, header, events, true, with_type).await,
    }
}

async fn watch_stream(
    mut socket: TcpStream,
    header: &str,
    events: Vec<Value>,
    drop_after: bool,
    with_type: impl Fn(Value) -> Value,
) {
    {
        {
            if socket
                .write_all(format!("{header}\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            for mut event in events {
                if event["type"] != "ERROR" && event["type"] != "BOOKMARK" {
                    event["object"] = with_type(event["object"].take());
                }
                let line = format!("{event}\n");
                if socket.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
            if drop_after {
                let _ = socket
                    .write_all(b"{\"type\":\"ADDED\",\"object\":{\"metad")
                    .await;
                return;
            }
            // Hold the watch open, as a quiet apiserver does.
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
    }
}

fn service(name: &str, rv: &str, ip: &str, port: u16) -> Value {
    json!({
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": port}]}
    })
}

fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

fn bookmark(rv: &str) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}})
}

fn gone() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "too old resource version: 10 (15)", "reason": "Expired", "code": 410}})
}

fn script(services: Vec<Reply>) -> Script {
    let mut script = Script::default();
    let (lists, watches): (Vec<_>, Vec<_>) = services
        .into_iter()
        .partition(|r| matches!(r, Reply::List(..)));
    script
        .replies
        .insert(("/api/v1/services", false), lists.into());
    script
        .replies
        .insert(("/api/v1/services", true), watches.into());
    script
}

/// Runs the API source against `server` and waits until `done` holds.
async fn run_until(server: &ApiServer, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let mut ingest = Ingest::new(Store::new(), IngestConfig::for_node("node-a"));
    let mut reader: Reader = ingest.reader();
    let client = server.client();
    let task =
        tokio::spawn(async move { watch::run(client, &mut ingest, WatchConfig::default()).await });
    let snapshot = tokio::time::timeout(
        Duration::from_secs(30),
        reader.wait(|s| s.synced().contains_all(&Kind::ALL) && done(s)),
    )
    .await
    .expect("converged within 30 s")
    .expect("store open");
    // Let anything still in flight land, then check nothing more came.
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    assert_eq!(
        reader.snapshot().revision(),
        snapshot.revision(),
        "no revision after convergence"
    );
    snapshot
}

fn names(s: &Snapshot) -> Vec<String> {
    let mut n: Vec<String> = s.services().map(|(n, _)| n.name().to_string()).collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_with_bookmarks_and_suppressed_updates() {
    let mut metadata_only = service("a", "13", "10.96.0.1", 80);
    metadata_only["metadata"]["annotations"] = json!({"touched": "yes"});
    let server = ApiServer::start(script(vec![
        Reply::List("10", vec![service("a", "10", "10.96.0.1", 80)]),
        Reply::Watch(vec![
            event("ADDED", service("b", "11", "10.96.0.2", 80)),
            bookmark("12"),
            event("MODIFIED", metadata_only),
            event("MODIFIED", service("a", "14", "10.96.0.1", 8080)),
            event("DELETED", service("b", "15", "10.96.0.2", 80)),
        ]),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "a"))
            .is_some_and(|a| a.ports[0].port == 8080)
            && s.service(&ServiceName::new("ns", "b")).is_none()
    })
    .await;
    assert_eq!(names(&snap), ["a"]);
    // list(a) = 1, ADDED b = 2, metadata-only = none, port change = 3,
    // DELETED b = 4. Empty EndpointSlice and Node lists make none.
    assert_eq!(snap.revision(), 4);
    let requests = server.requests();
    assert!(
        requests.iter().any(|r| r.starts_with("/api/v1/services?")
            && r.contains("watch=true")
            && r.contains("resourceVersion=10")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_forces_a_relist_that_swaps_contents_in_one_revision() {
    let server = ApiServer::start(script(vec![
        Reply::List(
            "10",
            vec![
                service("a", "10", "10.96.0.1", 80),
                service("b", "10", "10.96.0.2", 80),
            ],
        ),
        Reply::Watch(vec![gone()]),
        // The relist: a unchanged, b gone during the outage, c new.
        Reply::List(
            "20",
            vec![
                service("a", "10", "10.96.0.1", 80),
                service("c", "19", "10.96.0.3", 80),
            ],
        ),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "c")).is_some()
    })
    .await;
    assert_eq!(names(&snap), ["a", "c"]);
    // First list = 1; the relist deletes b and adds c in one revision = 2;
    // the unchanged a makes none.
    assert_eq!(snap.revision(), 2);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("/api/v1/services") && !r.contains("watch=true"))
        .count();
    assert_eq!(lists, 2, "410 Gone made the watcher list again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connection_resumes_the_watch_from_the_last_version() {
    let server = ApiServer::start(script(vec![
        Reply::List("10", vec![service("a", "10", "10.96.0.1", 80)]),
        Reply::WatchThenDrop(vec![event("ADDED", service("b", "11", "10.96.0.2", 80))]),
        Reply::Watch(vec![event("ADDED", service("c", "12", "10.96.0.3", 80))]),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "c")).is_some()
    })
    .await;
    assert_eq!(names(&snap), ["a", "b", "c"]);
    assert_eq!(snap.revision(), 3);
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("watch=true") && r.contains("resourceVersion=11")),
        "re-watched from the last version seen: {requests:?}"
    );
}
