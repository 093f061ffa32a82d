//! The API source: the cluster's objects served by a test apiserver in
//! this process, for a `kpng kube … to-api` server or a node-local
//! `kpng kube … to-nft`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kpng_testkit::apiserver::{ApiServer, Bind, Resource, Script};

use super::Cluster;

/// The kinds a manifest holds that the apiserver serves, by `kind`.
const SERVED: [(&str, Resource); 3] = [
    ("Service", Resource::Services),
    ("EndpointSlice", Resource::EndpointSlices),
    ("Node", Resource::Nodes),
];

/// An object's kind and namespace/name: what an event names.
fn object_key(object: &serde_json::Value) -> (String, String) {
    let field = |path: &[&str]| {
        path.iter()
            .try_fold(object, |v, k| v.get(k))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        field(&["kind"]),
        format!(
            "{}/{}",
            field(&["metadata", "namespace"]),
            field(&["metadata", "name"])
        ),
    )
}

/// The items of a manifest ([`Cluster::manifest`]'s YAML `List`) as JSON.
fn manifest_items(manifest: &str) -> Vec<serde_json::Value> {
    let list: serde_json::Value = serde_saphyr::from_str(manifest).expect("the manifest parses");
    match list.get("items") {
        Some(serde_json::Value::Array(items)) => items.clone(),
        _ => vec![list],
    }
}

/// The cluster's objects served by a test apiserver in this process, for
/// a `kpng kube … to-api` server ([`Cluster::start_kube_server`]) or a
/// node-local `kpng kube … to-nft` ([`ApiSource::in_namespace`]): the
/// first manifest's objects are the apiserver's live state, every later
/// manifest ([`ApiSource::update`]) changes it (ADDED, MODIFIED, DELETED
/// for what changed, each at its own resourceVersion, kept in the
/// apiserver's history), so a client that lists again gets the current
/// state and one that resumes gets what it missed. Its faults (watches
/// dropped or held, the apiserver down, its history compacted, `410` in
/// either form, bookmarks) are the apiserver's own: [`ApiSource::server`].
/// The apiserver runs on a thread of its own until dropped.
pub struct ApiSource {
    pub(super) kubeconfig: PathBuf,
    server: ApiServer,
    served: Mutex<std::collections::BTreeMap<(String, String), serde_json::Value>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A listening socket bound to `addr` inside network namespace `ns` (a
/// thread of its own enters it): the socket stays in that namespace.
fn bind_in(ns: &str, addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let namespace = std::fs::File::open(&path)?;
        nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        std::net::TcpListener::bind(addr)
    })
    .join()
    .map_err(|_| std::io::Error::other("the binding thread panicked"))?
}

impl ApiSource {
    /// Serves `manifest` (as [`Cluster::manifest`] makes it): its
    /// Services, EndpointSlices and Nodes, no ServiceCIDR; its kubeconfig
    /// is written in the cluster's directory.
    ///
    /// # Panics
    /// When the manifest does not parse, or no loopback port is free.
    pub fn start(cluster: &Cluster, manifest: &str) -> Self {
        Self::serve(&cluster.dir, manifest, None)
    }

    /// Serves `manifest` on the loopback of network namespace `ns`, for a
    /// `kpng kube` run in that namespace; its kubeconfig is written in
    /// `dir` (`kubeconfig`).
    ///
    /// # Panics
    /// As [`ApiSource::start`], or when the namespace cannot be entered.
    pub fn in_namespace(ns: &str, dir: &Path, manifest: &str) -> Self {
        Self::serve(dir, manifest, Some(ns.to_owned()))
    }

    fn serve(dir: &Path, manifest: &str, ns: Option<String>) -> Self {
        let items = manifest_items(manifest);
        let bind: Bind = match ns {
            Some(ns) => Arc::new(move |addr| bind_in(&ns, addr)),
            None => Arc::new(std::net::TcpListener::bind),
        };
        let (server_tx, server_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the apiserver");
            runtime.block_on(async move {
                let _ = server_tx.send(ApiServer::start_with(Script::default(), bind).await);
                let _ = stopped.await;
            });
        });
        let server = server_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the apiserver started");
        for object in &items {
            if let Some(resource) = resource_of(object) {
                server.apply(resource, object.clone());
            }
        }
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig()).expect("write the kubeconfig");
        let served = items.into_iter().map(|o| (object_key(&o), o)).collect();
        Self {
            kubeconfig,
            server,
            served: Mutex::new(served),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The kubeconfig that points at the apiserver.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The apiserver, for its faults: [`ApiServer::drop_watches`],
    /// [`ApiServer::hold_watches`], [`ApiServer::go_down`] and
    /// [`ApiServer::come_back`], [`ApiServer::compact`],
    /// [`ApiServer::answer_gone_as`], [`ApiServer::bookmark`].
    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// Makes the served objects those of `manifest`: each object added,
    /// changed or removed since the last one is one change of the
    /// apiserver's state (an event to every open watch, and in its
    /// history for the watches that resume later), also while the
    /// apiserver is down or the watches held. Returns the time just
    /// before the first was made, and how many were.
    ///
    /// # Panics
    /// When the manifest does not parse.
    pub fn update(&self, manifest: &str) -> (SystemTime, usize) {
        let next: std::collections::BTreeMap<_, _> = manifest_items(manifest)
            .into_iter()
            .map(|o| (object_key(&o), o))
            .collect();
        let mut served = self.served.lock().expect("served lock");
        let mut out = Vec::new();
        for (key, object) in &next {
            match served.get(key) {
                Some(old) if old == object => {}
                _ => out.push((object.clone(), false)),
            }
        }
        for (key, object) in served.iter() {
            if !next.contains_key(key) {
                out.push((object.clone(), true));
            }
        }
        *served = next;
        let at = SystemTime::now();
        for (object, deleted) in &out {
            let Some(resource) = resource_of(object) else {
                continue;
            };
            if *deleted {
                let field = |name: &str| object["metadata"][name].as_str().unwrap_or_default();
                self.server
                    .delete(resource, field("namespace"), field("name"));
            } else {
                self.server.apply(resource, object.clone());
            }
        }
        (at, out.len())
    }
}

/// The resource an object of the manifest is served as, by its kind.
fn resource_of(object: &serde_json::Value) -> Option<Resource> {
    let kind = object.get("kind").and_then(serde_json::Value::as_str)?;
    SERVED.iter().find(|(k, _)| *k == kind).map(|(_, r)| *r)
}

impl Drop for ApiSource {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
