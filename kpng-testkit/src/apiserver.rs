//! A small apiserver for tests: it speaks the Kubernetes list/watch
//! protocol over HTTP/1.1 on a loopback port, from a script of replies, so
//! the real kube client and kube-runtime watchers can be tested at the wire.
//!
//! Lists answer in one page; watches stream newline-delimited events
//! (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR such as `410 Gone`), then
//! stay open, or drop the connection mid-line.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A resource the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `/api/v1/services`
    Services,
    /// `/apis/discovery.k8s.io/v1/endpointslices`
    EndpointSlices,
    /// `/api/v1/nodes`
    Nodes,
    /// `/apis/networking.k8s.io/v1/servicecidrs`
    ServiceCidrs,
}

impl Resource {
    fn path(self) -> &'static str {
        RESOURCES[self as usize].0
    }
}

impl Script {
    /// Queues the next reply for lists (`watch: false`) or watches of a
    /// resource.
    pub fn push(&mut self, resource: Resource, watch: bool, reply: Reply) {
        self.replies
            .entry((resource.path(), watch))
            .or_default()
            .push_back(reply);
    }

    /// Answers `404 Not Found` for `resource`, as an apiserver that does
    /// not serve it (ServiceCIDRs before Kubernetes 1.33).
    pub fn unserve(&mut self, resource: Resource) {
        self.unserved.push(resource.path());
    }
}

/// One scripted response.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A list: its resourceVersion and items (kind and apiVersion are
    /// added).
    List(String, Vec<Value>),
    /// One page of a list being paged through: resourceVersion, items,
    /// whether more follow. Made by the server from a `List` reply.
    #[doc(hidden)]
    Page(String, Vec<Value>, bool),
    /// A watch stream: these events (objects get kind and apiVersion),
    /// then the connection stays open.
    Watch(Vec<Value>),
    /// A watch stream: these events, then half a line, then the
    /// connection drops.
    WatchThenDrop(Vec<Value>),
    /// A `200 OK` whose body is not JSON (a broken proxy in front of the
    /// apiserver, say), for a list or a watch.
    Garbage,
    /// The reply after a delay (an overloaded apiserver).
    Slow(std::time::Duration, Box<Reply>),
    /// A watch stream that sends each event given to the sender from the
    /// time it connects, as a live apiserver does; it ends when every
    /// sender is dropped. It answers every later watch of the resource
    /// too (it stays queued).
    Follow(tokio::sync::broadcast::Sender<Value>),
}

/// Replies per resource, served in order.
#[derive(Debug, Default)]
pub struct Script {
    /// Per (resource, is_watch): replies in order. When a queue is empty, a
    /// list answers what [`ApiServer::set_list`] set (empty unless set)
    /// and a watch holds open with no event.
    replies: HashMap<(&'static str, bool), VecDeque<Reply>>,
    /// Every request's path and query, in order.
    requests: Vec<String>,
    /// A list being paged through (`limit`/`continue`), per resource: its
    /// resourceVersion and the items not yet served.
    paging: HashMap<&'static str, (String, VecDeque<Value>)>,
    /// Resources answered `404 Not Found`.
    unserved: Vec<&'static str>,
    /// What a list of a resource answers once its queue is empty
    /// ([`ApiServer::set_list`]); empty when not set.
    current: HashMap<&'static str, (String, Vec<Value>)>,
}

/// A running test apiserver.
#[derive(Debug)]
pub struct ApiServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    script: Arc<Mutex<Script>>,
}

const RESOURCES: [(&str, &str, &str); 4] = [
    ("/api/v1/services", "v1", "Service"),
    (
        "/apis/discovery.k8s.io/v1/endpointslices",
        "discovery.k8s.io/v1",
        "EndpointSlice",
    ),
    ("/api/v1/nodes", "v1", "Node"),
    (
        "/apis/networking.k8s.io/v1/servicecidrs",
        "networking.k8s.io/v1",
        "ServiceCIDR",
    ),
];

impl ApiServer {
    /// Starts serving `script` on a loopback port, on the current tokio
    /// runtime.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(script: Script) -> Self {
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

    /// Every request so far: path and query.
    pub fn requests(&self) -> Vec<String> {
        self.script
            .lock()
            .map(|s| s.requests.clone())
            .unwrap_or_default()
    }

    /// Makes every later list of `resource` whose queue is empty answer
    /// `items` at `resource_version` (a live apiserver's current state):
    /// a client that lists again (a restart) gets them.
    pub fn set_list(&self, resource: Resource, resource_version: &str, items: Vec<Value>) {
        if let Ok(mut script) = self.script.lock() {
            script
                .current
                .insert(resource.path(), (resource_version.to_owned(), items));
        }
    }

    /// A kubeconfig file's text that points a client at this server.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\ncontexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\ncurrent-context: fake\nusers: [{{name: fake, user: {{}}}}]\n",
            self.url
        )
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
    let unserved = script
        .lock()
        .map(|mut s| {
            s.requests.push(target.clone());
            s.unserved.contains(&path)
        })
        .unwrap_or(true);
    let found = RESOURCES.iter().find(|(p, ..)| *p == path).copied();
    let Some((resource, api_version, kind)) = found.filter(|_| !unserved) else {
        let _ = socket
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    };
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
    };
    let limit = param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let resume = param("continue").is_some_and(|c| !c.is_empty());
    let mut delayed = None;
    let reply = {
        let Ok(mut script) = script.lock() else {
            return;
        };
        if watch {
            let queue = script.replies.get_mut(&(resource, true));
            match queue {
                Some(queue) if matches!(queue.front(), Some(Reply::Follow(_))) => {
                    queue.front().cloned()
                }
                Some(queue) => queue.pop_front(),
                None => None,
            }
        } else {
            // Lists are paged as the apiserver does: `limit` items a page,
            // with a `continue` token while more remain.
            let next = if resume {
                None
            } else {
                script
                    .replies
                    .get_mut(&(resource, false))
                    .and_then(VecDeque::pop_front)
            };
            let next = match next {
                Some(Reply::Slow(delay, inner)) => {
                    delayed = Some(delay);
                    Some(*inner)
                }
                other => other,
            };
            if let Some(Reply::Garbage) = next {
                Some(Reply::Garbage)
            } else {
                if !resume {
                    let (rv, items) = match next {
                        Some(Reply::List(rv, items)) => (rv, items),
                        _ => script
                            .current
                            .get(resource)
                            .cloned()
                            .unwrap_or_else(|| ("1".into(), Vec::new())),
                    };
                    script.paging.insert(resource, (rv, items.into()));
                }
                let page = script.paging.get_mut(resource).map(|(rv, rest)| {
                    let n = limit.unwrap_or(rest.len()).min(rest.len());
                    (
                        rv.clone(),
                        rest.drain(..n).collect::<Vec<_>>(),
                        !rest.is_empty(),
                    )
                });
                page.map(|(rv, items, more)| Reply::Page(rv, items, more))
            }
        }
    };
    let reply = match reply {
        Some(Reply::Slow(delay, inner)) => {
            delayed = Some(delay);
            Some(*inner)
        }
        other => other,
    };
    if let Some(delay) = delayed {
        tokio::time::sleep(delay).await;
    }
    let header = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
    let with_type = |mut o: Value| {
        o["apiVersion"] = json!(api_version);
        o["kind"] = json!(kind);
        o
    };
    match reply.unwrap_or(if watch {
        Reply::Watch(vec![])
    } else {
        Reply::List("1".into(), vec![])
    }) {
        Reply::List(rv, items) | Reply::Page(rv, items, false) => {
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
        Reply::Page(rv, items, true) => {
            let body = json!({
                "apiVersion": api_version,
                "kind": format!("{kind}List"),
                "metadata": {"resourceVersion": rv, "continue": "more"},
                "items": items.into_iter().map(with_type).collect::<Vec<_>>(),
            })
            .to_string();
            let response = format!("{header}Content-Length: {}\r\n\r\n{body}", body.len());
            let _ = socket.write_all(response.as_bytes()).await;
        }
        Reply::Watch(events) => watch_stream(socket, header, events, false, with_type).await,
        Reply::WatchThenDrop(events) => watch_stream(socket, header, events, true, with_type).await,
        Reply::Follow(sender) => follow(socket, header, sender.subscribe(), with_type).await,
        Reply::Slow(_, _) => {}
        Reply::Garbage => {
            let body = "<html>502 upstream glitch</html>\n{not json";
            let response = format!("{header}Content-Length: {}\r\n\r\n{body}", body.len());
            let _ = socket.write_all(response.as_bytes()).await;
        }
    }
}

/// Starts a watch's response; false when the client is gone.
async fn start_stream(socket: &mut TcpStream, header: &str) -> bool {
    socket
        .write_all(format!("{header}\r\n").as_bytes())
        .await
        .is_ok()
}

/// Writes one event as its line (its object typed); false when the
/// client is gone.
async fn write_event(
    socket: &mut TcpStream,
    mut event: Value,
    with_type: &impl Fn(Value) -> Value,
) -> bool {
    if event["type"] != "ERROR" && event["type"] != "BOOKMARK" {
        event["object"] = with_type(event["object"].take());
    }
    let line = format!("{event}\n");
    socket.write_all(line.as_bytes()).await.is_ok()
}

/// A watch that streams each event sent after it connected, until every
/// sender is gone.
async fn follow(
    mut socket: TcpStream,
    header: &str,
    mut events: tokio::sync::broadcast::Receiver<Value>,
    with_type: impl Fn(Value) -> Value,
) {
    if !start_stream(&mut socket, header).await {
        return;
    }
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if !write_event(&mut socket, event, &with_type).await {
            return;
        }
    }
}

async fn watch_stream(
    mut socket: TcpStream,
    header: &str,
    events: Vec<Value>,
    drop_after: bool,
    with_type: impl Fn(Value) -> Value,
) {
    if !start_stream(&mut socket, header).await {
        return;
    }
    for event in events {
        if !write_event(&mut socket, event, &with_type).await {
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
