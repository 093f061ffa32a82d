//! The API source: the cluster's objects served by a test apiserver in
//! this process, for a `kpng kube … to-api` server.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use kpng_testkit::apiserver::{ApiServer, Reply, Resource, Script};

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
/// a `kpng kube … to-api` server ([`Cluster::start_kube_server`]): the
/// first manifest as the lists, every later one as watch events (ADDED,
/// MODIFIED, DELETED for what changed), sent when [`ApiSource::update`]
/// is called; a later list (a restarted server's) answers the last
/// manifest's objects. The apiserver runs on a thread of its own until
/// dropped.
pub struct ApiSource {
    pub(super) kubeconfig: PathBuf,
    server: ApiServer,
    events: Vec<(Resource, tokio::sync::broadcast::Sender<serde_json::Value>)>,
    served: Mutex<std::collections::BTreeMap<(String, String), serde_json::Value>>,
    /// The last resourceVersion given out.
    version: Mutex<u64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ApiSource {
    /// Serves `manifest` (as [`Cluster::manifest`] makes it): lists of its
    /// Services, EndpointSlices and Nodes, no ServiceCIDR; its kubeconfig
    /// is written in the cluster's directory.
    ///
    /// # Panics
    /// When the manifest does not parse, or no loopback port is free.
    pub fn start(cluster: &Cluster, manifest: &str) -> Self {
        let items = manifest_items(manifest);
        let mut script = Script::default();
        let mut events = Vec::new();
        let mut lists = Vec::new();
        for (kind, resource) in SERVED {
            let of_kind: Vec<serde_json::Value> = items
                .iter()
                .filter(|o| o.get("kind").and_then(serde_json::Value::as_str) == Some(kind))
                .cloned()
                .collect();
            lists.push((resource, of_kind));
            let (sender, _) = tokio::sync::broadcast::channel(4096);
            script.push(resource, true, Reply::Follow(sender.clone()));
            events.push((resource, sender));
        }
        script.push(
            Resource::ServiceCidrs,
            false,
            Reply::List("1".into(), vec![]),
        );
        let (server_tx, server_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the apiserver");
            runtime.block_on(async move {
                let _ = server_tx.send(ApiServer::start(script).await);
                let _ = stopped.await;
            });
        });
        let server = server_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the apiserver started");
        for (resource, items) in lists {
            server.set_list(resource, "1", items);
        }
        let kubeconfig = cluster.dir.join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig()).expect("write the kubeconfig");
        let served = items.into_iter().map(|o| (object_key(&o), o)).collect();
        Self {
            kubeconfig,
            server,
            events,
            served: Mutex::new(served),
            version: Mutex::new(1),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The kubeconfig that points at the apiserver.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Makes the served objects those of `manifest`: an event for each
    /// object added, changed or removed since the last one, sent at once
    /// to every watch. Returns the time just before the first was sent,
    /// and how many were.
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
                None => out.push(("ADDED", object.clone())),
                Some(old) if old != object => out.push(("MODIFIED", object.clone())),
                Some(_) => {}
            }
        }
        for (key, object) in served.iter() {
            if !next.contains_key(key) {
                out.push(("DELETED", object.clone()));
            }
        }
        // Each event's object carries the next resourceVersion, as the
        // apiserver's do (a watch needs it to resume from).
        let mut version = self.version.lock().expect("version lock");
        for (_, object) in &mut out {
            *version += 1;
            object["metadata"]["resourceVersion"] = serde_json::json!(version.to_string());
        }
        *served = next;
        // A server that lists again (a restart) gets the new state.
        for (kind, resource) in SERVED {
            let items = served
                .values()
                .filter(|o| o.get("kind").and_then(serde_json::Value::as_str) == Some(kind))
                .cloned()
                .collect();
            self.server.set_list(resource, &version.to_string(), items);
        }
        let at = SystemTime::now();
        for (kind, object) in &out {
            let resource = SERVED
                .iter()
                .find(|(k, _)| object.get("kind").and_then(serde_json::Value::as_str) == Some(*k))
                .map(|(_, r)| *r);
            let sender = self
                .events
                .iter()
                .find(|(r, _)| Some(*r) == resource)
                .map(|(_, s)| s);
            if let Some(sender) = sender {
                let _ = sender.send(serde_json::json!({"type": kind, "object": object}));
            }
        }
        (at, out.len())
    }
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
