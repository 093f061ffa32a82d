//! Whether a Node object has this node's name: without one, kpng knows
//! none of the node's addresses, so its NodePorts are served nowhere. Said
//! by name, and held in the readiness condition [`NODE_CONDITION`].

use kpng_health::Conditions;
use kpng_sink::{Hook, Round};

/// The readiness condition set while no Node object has this node's name.
pub(crate) const NODE_CONDITION: &str = "node";

/// Which Nodes the store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nodes {
    /// Every Node of the input (a file).
    All,
    /// Only this node's, if it exists (the API, watched by name).
    Only,
}

/// Why `node` names no Node object of `snapshot`, or `None` when one has
/// its name: kpng then knows none of the node's addresses, so its
/// NodePorts are served nowhere.
fn node_missing(snapshot: &kpng_store::Snapshot, node: &str, nodes: Nodes) -> Option<String> {
    if snapshot.node(node).is_some() {
        return None;
    }
    const SHOWN: usize = 5;
    let names: Vec<&str> = snapshot.nodes().map(|n| n.name.as_str()).collect();
    let known = match (nodes, names.len()) {
        (Nodes::Only, _) => "the API server has none by that name".to_owned(),
        (Nodes::All, 0) => "the input has no Node objects".to_owned(),
        (Nodes::All, n) if n <= SHOWN => format!("known nodes: {}", names.join(", ")),
        (Nodes::All, n) => format!("known nodes: {}, … ({n} in all)", names[..SHOWN].join(", ")),
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

/// Checks that a Node object has this node's name, now and at each new
/// revision: a warning naming the node and the known ones while none has
/// (at each revision for a file, at each change for the API), and the
/// readiness condition [`NODE_CONDITION`] set (`/healthz` answers 503)
/// until one has.
pub(crate) fn check_node(
    reader: &kpng_store::Reader,
    node: &str,
    nodes: Nodes,
    conditions: &Conditions,
) {
    let snapshot = reader.snapshot();
    let mut missing = None;
    if snapshot.is_listed(kpng_model::Kind::Node) {
        missing = node_missing(&snapshot, node, nodes);
        if let Some(why) = &missing {
            tracing::warn!("{why}");
            conditions.set(NODE_CONDITION, why.clone());
        }
    } else {
        conditions.set(
            NODE_CONDITION,
            format!("waiting for the list of Nodes (this node: {node:?})"),
        );
    }
    let (mut reader, node, conditions) = (reader.clone(), node.to_owned(), conditions.clone());
    tokio::spawn(async move {
        let mut seen = (
            snapshot.revision(),
            snapshot.is_listed(kpng_model::Kind::Node),
        );
        loop {
            let Ok(snapshot) = reader
                .wait(|s| (s.revision(), s.is_listed(kpng_model::Kind::Node)) != seen)
                .await
            else {
                return;
            };
            seen = (
                snapshot.revision(),
                snapshot.is_listed(kpng_model::Kind::Node),
            );
            if !seen.1 {
                continue;
            }
            let now = node_missing(&snapshot, &node, nodes);
            match &now {
                Some(why) if nodes == Nodes::All || missing.as_ref() != Some(why) => {
                    tracing::warn!("{why}");
                }
                None if missing.is_some() => {
                    tracing::info!(node = %node, "the Node object of this node is there");
                }
                _ => {}
            }
            match &now {
                Some(why) => conditions.set(NODE_CONDITION, why.clone()),
                None => conditions.clear(NODE_CONDITION),
            }
            missing = now;
        }
    });
}

/// An agent's check of its node (`kpng api`): the server sends this
/// node's Node object in the view when it has one. Before each round
/// without it, the readiness condition [`NODE_CONDITION`] is set (and a
/// warning logged when it goes missing); with it, cleared.
pub(crate) struct NodeSeen {
    node: String,
    warned: bool,
    conditions: Conditions,
}

impl NodeSeen {
    pub(crate) fn new(node: &str, conditions: Conditions) -> Self {
        Self {
            node: node.to_owned(),
            warned: false,
            conditions,
        }
    }
}

impl<S: ?Sized> Hook<S> for NodeSeen {
    fn before(&mut self, round: &Round<'_>) {
        if round.view().node.is_some() {
            if self.warned {
                tracing::info!(node = %self.node, "the Node object of this node is there");
            }
            self.warned = false;
            self.conditions.clear(NODE_CONDITION);
        } else {
            let why = unserved(&format!("the server has no Node named {:?}", self.node));
            if !self.warned {
                tracing::warn!("{why}");
            }
            self.warned = true;
            self.conditions.set(NODE_CONDITION, why);
        }
    }
}
