//! A small apiserver for tests: it speaks the Kubernetes list/watch
//! protocol over HTTP/1.1 on a loopback port, from a script of replies, so
//! the real kube client and kube-runtime watchers can be tested at the wire.
//!
//! Lists answer in one page; watches stream newline-delimited events
//! (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR such as `410 Gone`), then
//! stay open, or drop the connection mid-line.
//!
//! Beside the script, the server keeps a live state, as a real apiserver
//! does: objects changed with [`ApiServer::apply`] and
//! [`ApiServer::delete`], each change a new resourceVersion kept in a
//! history. A list with no scripted reply answers the live objects; a
//! watch with none streams the live changes after its resourceVersion
//! (those made while no watch was open included), or answers `410 Gone`
//! when that version is older than the compacted history
//! ([`ApiServer::compact`]), in either form a real apiserver uses
//! ([`GoneForm`]). Faults are made from the test:
//! [`ApiServer::drop_watches`], [`ApiServer::hold_watches`],
//! [`ApiServer::go_down`] and [`ApiServer::come_back`] (an [`Outage`]),
//! and [`ApiServer::bookmark`] to the watches that asked for bookmarks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

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
    /// list answers what [`ApiServer::set_list`] set, else the live
    /// objects, and a watch streams the live changes (none until
    /// [`ApiServer::apply`] or [`ApiServer::delete`]).
    replies: HashMap<(&'static str, bool), VecDeque<Reply>>,
    /// Every request's path and query, in order.
    requests: Vec<String>,
    /// A list being paged through (`limit`/`continue`), per resource: its
    /// resourceVersion and the items not yet served.
    paging: HashMap<&'static str, (String, VecDeque<Value>)>,
    /// Resources answered `404 Not Found`.
    unserved: Vec<&'static str>,
    /// What a list of a resource answers once its queue is empty
    /// ([`ApiServer::set_list`]); the live objects when not set.
    current: HashMap<&'static str, (String, Vec<Value>)>,
    /// The live state: objects, their history, the faults in force.
    live: Live,
}

/// How a watch from a resourceVersion older than the compacted history
/// is answered: real apiservers use both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GoneForm {
    /// `200 OK`, then one ERROR event holding a `410` Status, then the
    /// stream ends (the watch cache's answer).
    #[default]
    Event,
    /// `410 Gone` on the watch request itself, with a Status body.
    Status,
}

/// How the server is down ([`ApiServer::go_down`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outage {
    /// Its port is closed: every connection is refused.
    Refuse,
    /// Connections are accepted and closed at once, unanswered, as by a
    /// load balancer in front of a dead apiserver.
    Close,
}

/// What the live watches are told.
#[derive(Clone, Debug)]
enum Signal {
    /// A change of a resource at a resourceVersion: its event.
    Event(u64, &'static str, Value),
    /// A bookmark at this resourceVersion, for watches that asked.
    Bookmark(u64),
    /// Every open watch ends now.
    Drop,
}

/// The live state of the server.
#[derive(Debug)]
struct Live {
    /// The last resourceVersion given out.
    version: u64,
    /// Per resource path: the objects by `namespace/name`.
    objects: HashMap<&'static str, BTreeMap<String, Value>>,
    /// Every change not compacted away: resourceVersion, resource path,
    /// the event.
    history: Vec<(u64, &'static str, Value)>,
    /// A watch from a resourceVersion below this one is answered `410`.
    compacted: u64,
    /// How that `410` is answered.
    gone: GoneForm,
    /// New watches wait (unanswered) while this holds.
    held: bool,
    /// Tells the open live watches of changes, bookmarks and drops.
    signals: broadcast::Sender<Signal>,
}

impl Default for Live {
    fn default() -> Self {
        Self {
            version: 1,
            objects: HashMap::new(),
            history: Vec::new(),
            compacted: 0,
            gone: GoneForm::default(),
            held: false,
            signals: broadcast::channel(4096).0,
        }
    }
}

/// An object's `namespace/name`.
fn object_name(object: &Value) -> String {
    let field = |name: &str| {
        object["metadata"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    format!("{}/{}", field("namespace"), field("name"))
}

/// Makes the listening socket at an address: the first call with port 0,
/// later ones (after an [`Outage::Refuse`]) with the port the first got.
pub type Bind = Arc<dyn Fn(SocketAddr) -> std::io::Result<std::net::TcpListener> + Send + Sync>;

/// A running test apiserver.
#[derive(Debug)]
pub struct ApiServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    script: Arc<Mutex<Script>>,
    outage: tokio::sync::watch::Sender<Option<Outage>>,
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
        Self::start_with(script, Arc::new(std::net::TcpListener::bind)).await
    }

    /// Starts serving `script` on a loopback port made by `bind` (in
    /// another network namespace, say), on the current tokio runtime.
    ///
    /// # Panics
    /// When `bind` fails for `127.0.0.1:0`.
    pub async fn start_with(script: Script, bind: Bind) -> Self {
        let listener = listen(&bind, SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        let url = format!("http://{addr}");
        let script = Arc::new(Mutex::new(script));
        let (outage, watched) = tokio::sync::watch::channel(None);
        tokio::spawn(accept(listener, addr, bind, watched, script.clone()));
        Self {
            url,
            script,
            outage,
        }
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

    /// Sets `object` (of `resource`, with at least a name) in the live
    /// state at the next resourceVersion, which it returns: ADDED when it
    /// is new, else MODIFIED, sent to the open watches of `resource` and
    /// kept in the history for the ones that resume later.
    pub fn apply(&self, resource: Resource, mut object: Value) -> u64 {
        let Ok(mut script) = self.script.lock() else {
            return 0;
        };
        let live = &mut script.live;
        live.version += 1;
        let version = live.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        let objects = live.objects.entry(resource.path()).or_default();
        let kind = match objects.insert(object_name(&object), object.clone()) {
            None => "ADDED",
            Some(_) => "MODIFIED",
        };
        live.record(
            version,
            resource.path(),
            json!({"type": kind, "object": object}),
        );
        version
    }

    /// Deletes `namespace/name` (an empty namespace for cluster objects)
    /// of `resource` from the live state at the next resourceVersion,
    /// which it returns (`None` when there is no such object).
    pub fn delete(&self, resource: Resource, namespace: &str, name: &str) -> Option<u64> {
        let mut script = self.script.lock().ok()?;
        let live = &mut script.live;
        let mut object = live
            .objects
            .get_mut(resource.path())?
            .remove(&format!("{namespace}/{name}"))?;
        live.version += 1;
        let version = live.version;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        live.record(
            version,
            resource.path(),
            json!({"type": "DELETED", "object": object}),
        );
        Some(version)
    }

    /// The live objects of `resource`, by namespace and name.
    pub fn objects(&self, resource: Resource) -> Vec<Value> {
        self.script
            .lock()
            .ok()
            .and_then(|s| s.live.objects.get(resource.path()).cloned())
            .map(|objects| objects.into_values().collect())
            .unwrap_or_default()
    }

    /// The last resourceVersion given out.
    pub fn resource_version(&self) -> u64 {
        self.script.lock().map_or(0, |s| s.live.version)
    }

    /// Ends every open watch now (their connections close, as when an
    /// apiserver restarts or a load balancer drops them); clients resume
    /// from the last resourceVersion they saw.
    pub fn drop_watches(&self) {
        if let Ok(script) = self.script.lock() {
            let _ = script.live.signals.send(Signal::Drop);
        }
    }

    /// While `held`, a new watch is accepted but not answered until the
    /// hold ends: with [`drop_watches`](Self::drop_watches) first, the
    /// clients are away while the test changes objects.
    pub fn hold_watches(&self, held: bool) {
        if let Ok(mut script) = self.script.lock() {
            script.live.held = held;
        }
    }

    /// Forgets the history up to now, as etcd's compaction does: a watch
    /// from an older resourceVersion is answered `410 Gone` (in the
    /// [`GoneForm`] set by [`answer_gone_as`](Self::answer_gone_as)), and
    /// only a new list brings the client back.
    pub fn compact(&self) {
        if let Ok(mut script) = self.script.lock() {
            let live = &mut script.live;
            live.compacted = live.version;
            let floor = live.compacted;
            live.history.retain(|(version, ..)| *version > floor);
        }
    }

    /// Sets how a watch from a compacted resourceVersion is answered.
    pub fn answer_gone_as(&self, form: GoneForm) {
        if let Ok(mut script) = self.script.lock() {
            script.live.gone = form;
        }
    }

    /// Sends a BOOKMARK at the current resourceVersion to every open
    /// watch that asked for bookmarks (`allowWatchBookmarks=true`), as an
    /// apiserver does about once a minute: a client resumes from it.
    pub fn bookmark(&self) {
        if let Ok(script) = self.script.lock() {
            let _ = script
                .live
                .signals
                .send(Signal::Bookmark(script.live.version));
        }
    }

    /// Takes the server down: every open connection ends, and new ones
    /// are refused or closed unanswered (`outage`) until
    /// [`come_back`](Self::come_back). Objects may be changed meanwhile:
    /// clients that come back resume and see the changes, or get `410`
    /// after a [`compact`](Self::compact).
    pub fn go_down(&self, outage: Outage) {
        self.outage.send_replace(Some(outage));
        self.drop_watches();
    }

    /// Brings the server back, on the same port.
    pub fn come_back(&self) {
        self.outage.send_replace(None);
    }

    /// A kubeconfig file's text that points a client at this server.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\ncontexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\ncurrent-context: fake\nusers: [{{name: fake, user: {{}}}}]\n",
            self.url
        )
    }
}

impl Live {
    /// Keeps a change in the history and tells the open watches.
    fn record(&mut self, version: u64, resource: &'static str, event: Value) {
        self.history.push((version, resource, event.clone()));
        let _ = self.signals.send(Signal::Event(version, resource, event));
    }
}

/// A listening socket from `bind`, for tokio.
fn listen(bind: &Bind, addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = bind(addr)?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Accepts connections until the server is dropped, following the
/// outages: the port closed while refusing, opened again on the same
/// address after.
async fn accept(
    listener: TcpListener,
    addr: SocketAddr,
    bind: Bind,
    mut outage: tokio::sync::watch::Receiver<Option<Outage>>,
    script: Arc<Mutex<Script>>,
) {
    let mut listener = Some(listener);
    loop {
        let now = *outage.borrow_and_update();
        match (now, listener.take()) {
            (Some(Outage::Refuse), open) => {
                drop(open);
                if outage.changed().await.is_err() {
                    return;
                }
            }
            (_, None) => match listen(&bind, addr) {
                Ok(open) => listener = Some(open),
                // The port may linger a moment: try again.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            (_, Some(open)) => {
                tokio::select! {
                    accepted = open.accept() => {
                        // Closed unanswered while down.
                        if let Ok((socket, _)) = accepted
                            && now != Some(Outage::Close)
                        {
                            tokio::spawn(serve(socket, script.clone()));
                        }
                    }
                    changed = outage.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
                listener = Some(open);
            }
        }
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
                        _ => match script.current.get(resource) {
                            Some(current) => current.clone(),
                            None => (
                                script.live.version.to_string(),
                                script
                                    .live
                                    .objects
                                    .get(resource)
                                    .map(|o| o.values().cloned().collect())
                                    .unwrap_or_default(),
                            ),
                        },
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
    let reply = match reply {
        Some(reply) => reply,
        None if watch => {
            let live = LiveWatch {
                resource,
                kind,
                api_version,
                from: param("resourceVersion").and_then(|v| v.parse().ok()),
                bookmarks: param("allowWatchBookmarks") == Some("true"),
            };
            return live.serve(socket, header, script, with_type).await;
        }
        None => Reply::List("1".into(), vec![]),
    };
    match reply {
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

/// A watch of the live state.
struct LiveWatch {
    resource: &'static str,
    kind: &'static str,
    api_version: &'static str,
    /// The resourceVersion asked for; none (or 0): from now.
    from: Option<u64>,
    /// Whether the client asked for bookmarks.
    bookmarks: bool,
}

impl LiveWatch {
    /// Answers `410` when `from` is compacted away; else streams the
    /// changes after it (the history first), until the watches are
    /// dropped or the client goes.
    async fn serve(
        self,
        mut socket: TcpStream,
        header: &str,
        script: Arc<Mutex<Script>>,
        with_type: impl Fn(Value) -> Value,
    ) {
        // Held: wait, unanswered, until the hold ends.
        loop {
            match script.lock() {
                Ok(s) if s.live.held => {}
                Ok(_) => break,
                Err(_) => return,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Under one lock: the history and the subscription, so no change
        // falls between them.
        let (from, replay, mut signals, gone) = {
            let Ok(s) = script.lock() else {
                return;
            };
            let live = &s.live;
            let from = self.from.filter(|v| *v > 0).unwrap_or(live.version);
            let gone = (from < live.compacted).then_some(live.gone);
            let replay: Vec<(u64, Value)> = live
                .history
                .iter()
                .filter(|(version, resource, _)| *version > from && *resource == self.resource)
                .map(|(version, _, event)| (*version, event.clone()))
                .collect();
            (from, replay, live.signals.subscribe(), gone)
        };
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": "Expired", "code": 410,
            "message": format!("too old resource version: {from}")});
        match gone {
            Some(GoneForm::Status) => {
                let body = status.to_string();
                let response = format!(
                    "HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                return;
            }
            Some(GoneForm::Event) => {
                if start_stream(&mut socket, header).await {
                    let error = json!({"type": "ERROR", "object": status});
                    let _ = write_event(&mut socket, error, &with_type).await;
                }
                return;
            }
            None => {}
        }
        if !start_stream(&mut socket, header).await {
            return;
        }
        let mut last = from;
        for (version, event) in replay {
            last = version;
            if !write_event(&mut socket, event, &with_type).await {
                return;
            }
        }
        loop {
            let signal = match signals.recv().await {
                Ok(signal) => signal,
                // Too far behind: end the watch, the client resumes.
                Err(_) => return,
            };
            let event = match signal {
                Signal::Drop => return,
                Signal::Event(version, resource, event) => {
                    if resource != self.resource || version <= last {
                        continue;
                    }
                    last = version;
                    event
                }
                Signal::Bookmark(version) => {
                    if !self.bookmarks || version <= last {
                        continue;
                    }
                    last = version;
                    json!({"type": "BOOKMARK", "object": {"kind": self.kind,
                        "apiVersion": self.api_version,
                        "metadata": {"resourceVersion": version.to_string()}}})
                }
            };
            if !write_event(&mut socket, event, &with_type).await {
                return;
            }
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
