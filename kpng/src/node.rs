//! Whether a Node object has the proxy's node name: without one, a proxy
//! knows none of the node's addresses, so its NodePorts are served
//! nowhere. Said by name (with the nodes that are known), at each change,
//! and reported to a readiness condition when one is given.

use std::sync::Arc;

use kpng_store::{Reader, Snapshot};

/// The name of the readiness condition set while no Node object has the
/// proxy's node name (see [`Proxy::conditions`](crate::Proxy::conditions)).
pub const NODE_CONDITION: &str = "node";

/// Where the node's state is reported: `Some(why)` while it is missing
/// (or not listed yet), `None` once it is there.
#[derive(Clone, Default)]
pub(crate) struct NodeReport(Option<Arc<Report>>);

/// A callback told why the node is not served, or `None`.
type Report = dyn Fn(Option<&str>) + Send + Sync;

impl NodeReport {
    pub(crate) fn new(report: impl Fn(Option<&str>) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(report)))
    }

    fn set(&self, why: &str) {
        if let Some(report) = &self.0 {
            report(Some(why));
        }
    }

    fn clear(&self) {
        if let Some(report) = &self.0 {
            report(None);
        }
    }
}

impl std::fmt::Debug for NodeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "NodeReport(set)"
        } else {
            "NodeReport(none)"
        })
    }
}

/// Why `node` names no Node object of `snapshot`, or `None` when one has
/// its name. `all`: the store holds every Node (a file), so the known
/// ones are named; else only this node's is watched (the API).
fn node_missing(snapshot: &Snapshot, node: &str, all: bool) -> Option<String> {
    if snapshot.node(node).is_some() {
        return None;
    }
    const SHOWN: usize = 5;
    let names: Vec<&str> = snapshot.nodes().map(|n| n.name.as_str()).collect();
    let known = match (all, names.len()) {
        (false, _) => "the API server has none by that name".to_owned(),
        (true, 0) => "the input has no Node objects".to_owned(),
        (true, n) if n <= SHOWN => format!("known nodes: {}", names.join(", ")),
        (true, n) => format!("known nodes: {}, … ({n} in all)", names[..SHOWN].join(", ")),
    };
    Some(unserved(&format!("no Node named {node:?} ({known})")))
}

/// What follows from `why` (no Node object has this node's name).
fn unserved(why: &str) -> String {
    format!(
        "{why}: its NodePorts are served on no address \
         (--node/--hostname-override must be the Node object's name)"
    )
}

/// Checks that a Node object has `node`'s name, now and at each new
/// revision: a warning naming the node and the known ones while none has
/// (at each revision when `all`, else at each change), and `report` set
/// until one has. Runs on a task until the store closes.
pub(crate) fn check_node(reader: &Reader, node: &str, all: bool, report: NodeReport) {
    let kind = kpng_model::Kind::Node;
    let snapshot = reader.snapshot();
    let mut missing = None;
    if snapshot.is_listed(kind) {
        missing = node_missing(&snapshot, node, all);
        if let Some(why) = &missing {
            tracing::warn!("{why}");
            report.set(why);
        }
    } else {
        report.set(&format!(
            "waiting for the list of Nodes (this node: {node:?})"
        ));
    }
    let (mut reader, node) = (reader.clone(), node.to_owned());
    tokio::spawn(async move {
        let mut seen = (snapshot.revision(), snapshot.is_listed(kind));
        loop {
            let Ok(snapshot) = reader
                .wait(|s| (s.revision(), s.is_listed(kind)) != seen)
                .await
            else {
                return;
            };
            seen = (snapshot.revision(), snapshot.is_listed(kind));
            if !seen.1 {
                continue;
            }
            let now = node_missing(&snapshot, &node, all);
            match &now {
                Some(why) if all || missing.as_ref() != Some(why) => tracing::warn!("{why}"),
                None if missing.is_some() => {
                    tracing::info!(node = %node, "the Node object of this node is there");
                }
                _ => {}
            }
            match &now {
                Some(why) => report.set(why),
                None => report.clear(),
            }
            missing = now;
        }
    });
}

#[cfg(feature = "agent")]
/// An agent's check of its node: the server sends the node's Node object
/// in the view when it has one. Before each round without it, `report` is
/// set (and a warning logged when it goes missing); with it, cleared.
pub(crate) struct NodeSeen {
    node: String,
    warned: bool,
    report: NodeReport,
}

#[cfg(feature = "agent")]
impl NodeSeen {
    pub(crate) fn new(node: &str, report: NodeReport) -> Self {
        report.set(&format!(
            "waiting for this node's view from the server (this node: {node:?})"
        ));
        Self {
            node: node.to_owned(),
            warned: false,
            report,
        }
    }
}

#[cfg(feature = "agent")]
impl<S: ?Sized> kpng_sink::Hook<S> for NodeSeen {
    fn before(&mut self, round: &kpng_sink::Round<'_>) {
        if round.view().node.is_some() {
            if self.warned {
                tracing::info!(node = %self.node, "the Node object of this node is there");
            }
            self.warned = false;
            self.report.clear();
        } else {
            let why = unserved(&format!("the server has no Node named {:?}", self.node));
            if !self.warned {
                tracing::warn!("{why}");
            }
            self.warned = true;
            self.report.set(&why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::v1::Node;
    use kpng_store::Store;

    fn store_with(nodes: &[&str]) -> Store {
        let mut store = Store::new();
        let mut txn = store.begin();
        for name in nodes {
            txn.set_node(Node {
                name: (*name).to_owned(),
                ..Node::default()
            });
        }
        txn.commit();
        store.mark_listed(kpng_model::Kind::Node);
        store
    }

    #[test]
    fn a_missing_node_is_named_with_the_known_ones() {
        let store = store_with(&["node-a", "node-b"]);
        let snapshot = store.reader().snapshot();
        assert_eq!(node_missing(&snapshot, "node-a", true), None);
        let why = node_missing(&snapshot, "node-x", true).expect("missing");
        assert!(why.contains("\"node-x\""), "{why}");
        assert!(why.contains("known nodes: node-a, node-b"), "{why}");
        let why = node_missing(&snapshot, "node-x", false).expect("missing");
        assert!(
            why.contains("the API server has none by that name"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn the_report_is_set_while_the_node_is_missing() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Option<String>>::new()));
        let log = seen.clone();
        let report = NodeReport::new(move |why| {
            log.lock().expect("lock").push(why.map(str::to_owned));
        });
        let store = store_with(&["node-a"]);
        check_node(&store.reader(), "node-x", true, report);
        let first = seen.lock().expect("lock").clone();
        assert_eq!(first.len(), 1);
        assert!(first[0].as_deref().is_some_and(|w| w.contains("node-x")));
    }
}
