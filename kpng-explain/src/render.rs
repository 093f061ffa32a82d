//! The words: an explanation as text, and the reasons of an endpoint
//! selection.

use std::fmt;
use std::net::IpAddr;

use kpng_model::IpNet;
use kpng_model::view::PortPlan;
use kpng_view::{CandidateUse, FamilySelection, TopologyFilter};

use crate::{EndpointReason, Explanation, Masquerade, Mechanism, Outcome, Target};

/// One line on how the Service's endpoints were selected on this node.
pub(crate) fn selection_summary(family: &FamilySelection, zone: &str) -> String {
    let cluster = family.candidates.iter().filter(|c| c.cluster).count();
    let local = family.candidates.iter().filter(|c| c.local).count();
    let how = if family.cluster_fallback && cluster > 0 {
        "no endpoint is ready: the serving and terminating ones are used (topology ignored)"
            .to_owned()
    } else {
        match &family.topology {
            TopologyFilter::None => "ready endpoints, no topology filter".to_owned(),
            TopologyFilter::Zone(_) => format!(
                "ready endpoints hinted for this node's zone {zone} (every ready endpoint has a zone hint)"
            ),
            TopologyFilter::Node(node) => format!(
                "ready endpoints hinted for this node {node} (PreferSameNode: every ready endpoint has a node hint)"
            ),
        }
    };
    let local_how = if family.local_fallback && local > 0 {
        " (none ready here: this node's serving and terminating ones)"
    } else {
        ""
    };
    format!(
        "endpoints: {} candidates; {cluster} for Cluster policies ({how}); {local} on this node for Local policies{local_how}",
        family.candidates.len()
    )
}

/// Why one candidate is used, or not.
pub(crate) fn endpoint_reason(
    c: &CandidateUse,
    family: &FamilySelection,
    zone: &str,
) -> EndpointReason {
    let e = &c.endpoint;
    let (ready, serving, terminating) = (e.ready() && e.serving(), e.serving(), e.terminating());
    let why = if !serving {
        "not serving: never used".to_owned()
    } else if c.cluster && family.cluster_fallback {
        "serving and terminating, used as the fallback: no endpoint is ready".to_owned()
    } else if c.cluster {
        match &family.topology {
            TopologyFilter::None => "ready".to_owned(),
            TopologyFilter::Zone(_) => format!("ready, hinted for zone {zone}"),
            TopologyFilter::Node(node) => format!("ready, hinted for node {node}"),
        }
    } else if ready {
        match &family.topology {
            TopologyFilter::Zone(_) => format!(
                "ready, but hinted for zone {} and not this node's zone {zone}",
                e.hint_zones().join(", ")
            ),
            TopologyFilter::Node(node) => format!(
                "ready, but hinted for node {} and not {node}",
                e.hint_nodes().join(", ")
            ),
            TopologyFilter::None => "ready".to_owned(),
        }
    } else if terminating {
        "serving and terminating: not used while endpoints are ready".to_owned()
    } else {
        "not ready".to_owned()
    };
    let why = match (c.is_local, c.local) {
        (true, true) if !c.cluster => format!("{why}; on this node: used by Local policies"),
        (true, true) => format!("{why}; on this node"),
        (true, false) => format!("{why}; on this node, not used by Local policies"),
        (false, _) => why,
    };
    EndpointReason {
        ip: c.ip,
        node: e.node_name().to_owned(),
        ready: e.ready(),
        serving,
        terminating,
        cluster: c.cluster,
        local: c.local,
        why,
    }
}

/// The text of an explanation: the packet, the numbered steps, the
/// candidates and the verdict.
pub(crate) fn text(ex: &Explanation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "packet: {} (node {})", ex.packet, ex.node)?;
    for (i, step) in ex.steps.iter().enumerate() {
        writeln!(f, "{:>2}. {step}", i + 1)?;
    }
    if !ex.endpoints.is_empty() {
        writeln!(f, "candidates:")?;
        for e in &ex.endpoints {
            let node = if e.node.is_empty() {
                "?"
            } else {
                e.node.as_str()
            };
            writeln!(f, "    {:<39} {node:<16} {}", e.ip, e.why)?;
        }
    }
    match &ex.outcome {
        Outcome::Translated {
            service,
            endpoints,
            masquerade,
            affinity_seconds,
            mechanism,
            ..
        } => {
            let masq = match masquerade {
                Masquerade::Yes => "masqueraded",
                Masquerade::No => "not masqueraded",
                Masquerade::Hairpin => "masqueraded only if it goes back to the client (hairpin)",
                Masquerade::RemoteEndpoints => "masqueraded towards endpoints on other nodes",
                Masquerade::DirectReturn => {
                    "not masqueraded; endpoints on other nodes reply to the client directly (DSR)"
                }
            };
            let by = match mechanism {
                Mechanism::Netfilter => "netfilter",
                Mechanism::Sockets => "eBPF socket programs",
                Mechanism::Tc => "eBPF tc programs",
            };
            let affinity =
                affinity_seconds.map_or(String::new(), |s| format!(", ClientIP affinity {s} s"));
            write!(
                f,
                "verdict: {service}: to {} ({masq}{affinity}; {by})",
                targets_text(endpoints)
            )
        }
        Outcome::Rejected { reason } => write!(f, "verdict: rejected: {reason}"),
        Outcome::Dropped { reason } => write!(f, "verdict: dropped: {reason}"),
        Outcome::Untouched { reason } => write!(f, "verdict: untouched: {reason}"),
    }
}

pub(crate) fn port_label(pp: &PortPlan<'_>) -> String {
    if pp.port.name.is_empty() {
        pp.number.to_string()
    } else {
        pp.port.name.clone()
    }
}

pub(crate) fn target_text(t: &Target) -> String {
    let at = match t.ip {
        IpAddr::V4(_) => format!("{}:{}", t.ip, t.port),
        IpAddr::V6(_) => format!("[{}]:{}", t.ip, t.port),
    };
    match (t.node.is_empty(), t.local) {
        (_, true) => format!("{at} (this node)"),
        (true, false) => at,
        (false, false) => format!("{at} ({})", t.node),
    }
}

/// `a`, or `one of 3: a, b, c`.
pub(crate) fn targets_text(targets: &[Target]) -> String {
    let all: Vec<String> = targets.iter().map(target_text).collect();
    match all.as_slice() {
        [one] => one.clone(),
        _ => format!("one of {}: {}", all.len(), all.join(", ")),
    }
}

pub(crate) fn list(nets: &[IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
