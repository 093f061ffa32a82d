//! `kpng explain` against real packets: every probe a scenario makes
//! ([`Lab::connect`](crate::Lab::connect)) is explained from the state the
//! proxy last synced, and what explain says is compared with what the
//! packets did. The lab lists every disagreement when it is dropped (the
//! test fails then).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use kpng_explain::{Masquerade, Origin, Outcome, Packet, Protocol, Setup};
use kpng_store::Snapshot;

/// What the lab's probes are checked against.
#[derive(Default)]
pub(crate) struct Witness {
    /// The state the node's rules were last synced from, and the proxy's
    /// settings: `None` until a [`Proxy`](crate::Proxy) made by
    /// [`Proxy::new`](crate::Proxy::new) syncs.
    state: Option<(Snapshot, Setup)>,
    /// Probes checked.
    pub(crate) checked: usize,
    /// Each disagreement, in words.
    pub(crate) disagreements: Vec<String>,
}

/// The witness a lab and its proxy share.
pub(crate) type Shared = Arc<Mutex<Witness>>;

/// At a lab's or cluster's end: prints how many probes were checked, and
/// the disagreements, if any, as a panic (unless one is under way).
pub(crate) fn report(witness: &Shared) -> Option<String> {
    let (checked, disagreements) = match witness.lock() {
        Ok(mut w) => (w.checked, std::mem::take(&mut w.disagreements)),
        Err(_) => return None,
    };
    if checked > 0 {
        eprintln!(
            "kpng explain: {checked} probes checked against the packets, {} disagreements",
            disagreements.len()
        );
    }
    (!disagreements.is_empty()).then(|| {
        format!(
            "kpng explain disagrees with the packets on {} of {checked} probes:\n{}",
            disagreements.len(),
            disagreements.join("\n")
        )
    })
}

impl Witness {
    /// The rules now follow `snapshot`, with `setup`.
    pub(crate) fn synced(&mut self, snapshot: Snapshot, setup: Setup) {
        self.state = Some((snapshot, setup));
    }

    /// Checks one probe: `lines` are what [`Lab::connect`](crate::Lab::connect)
    /// printed for `packet`; `resolve` gives the address of a server that
    /// answers with its host's name.
    pub(crate) fn probe(
        &mut self,
        from: &str,
        packet: &Packet,
        lines: &[String],
        resolve: &dyn Fn(&str) -> Option<IpAddr>,
    ) {
        let Some((snapshot, setup)) = self.state.clone() else {
            return;
        };
        self.check(&snapshot, &setup, crate::NODE, from, packet, lines, resolve);
    }

    /// Checks one probe against `snapshot` and `setup` on node `node`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check(
        &mut self,
        snapshot: &Snapshot,
        setup: &Setup,
        node: &str,
        from: &str,
        packet: &Packet,
        lines: &[String],
        resolve: &dyn Fn(&str) -> Option<IpAddr>,
    ) {
        self.checked += 1;
        let explained = match kpng_explain::explain(snapshot, node, setup, packet) {
            Ok(explained) => explained,
            Err(e) => {
                self.disagreements
                    .push(format!("{from}: {packet}: explain failed: {e}"));
                return;
            }
        };
        if let Err(why) = agrees(&explained.outcome, packet, lines, resolve) {
            let test = std::thread::current()
                .name()
                .unwrap_or("?")
                .rsplit("::")
                .next()
                .unwrap_or("?")
                .to_owned();
            self.disagreements.push(format!(
                "{test}: from {from} (node {node}): {packet}: {why}\n  the packets: {lines:?}\n  explain:\n{}",
                indent(&explained.to_string())
            ));
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The protocol word of [`Lab::connect`](crate::Lab::connect).
pub(crate) fn protocol(word: &str) -> Option<Protocol> {
    match word {
        "udpc" => Some(Protocol::Udp),
        _ => word.parse().ok(),
    }
}

/// The origin of a lab host: the node itself, a pod on it, or another
/// machine.
pub(crate) fn origin(host: &str) -> Origin {
    match host {
        "node" => Origin::Host,
        h if crate::LOCAL_HOSTS.contains(&h) => Origin::Pod,
        _ => Origin::Outside,
    }
}

/// Whether what the packets did (`lines`: `<endpoint> <peer seen>`,
/// `REFUSED <s>`, `TIMEOUT`, `ERROR …`) is what explain says.
fn agrees(
    outcome: &Outcome,
    packet: &Packet,
    lines: &[String],
    resolve: &dyn Fn(&str) -> Option<IpAddr>,
) -> Result<(), String> {
    let src = packet.source;
    let reached = |line: &str| -> Option<(IpAddr, Option<IpAddr>)> {
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let endpoint = first.parse().ok().or_else(|| resolve(first))?;
        Some((endpoint, words.next().and_then(|w| w.parse().ok())))
    };
    if lines.is_empty() {
        return Err("the client printed nothing".into());
    }
    match outcome {
        Outcome::Translated {
            endpoints,
            masquerade,
            affinity_seconds,
            ..
        } => {
            let mut seen = std::collections::BTreeSet::new();
            for line in lines {
                let Some((endpoint, peer)) = reached(line) else {
                    return Err(format!(
                        "explain says translated, a connection got {line:?}"
                    ));
                };
                let Some(target) = endpoints.iter().find(|t| t.ip == endpoint) else {
                    return Err(format!("reached {endpoint}, which explain does not list"));
                };
                seen.insert(endpoint);
                // The node's own connections leave from one of its
                // addresses, masqueraded or not: nothing to tell apart.
                if packet.origin == Origin::Host {
                    continue;
                }
                let kept = peer == Some(src);
                let want_kept = match masquerade {
                    Masquerade::Yes => false,
                    Masquerade::No => true,
                    Masquerade::Hairpin => endpoint != src,
                    Masquerade::RemoteEndpoints => target.local,
                    Masquerade::DirectReturn => true,
                };
                if kept != want_kept {
                    return Err(format!(
                        "{endpoint} saw {}, explain says masquerade {masquerade:?}",
                        peer.map_or("nothing".into(), |p| p.to_string())
                    ));
                }
            }
            if affinity_seconds.is_some() && seen.len() > 1 {
                return Err(format!(
                    "ClientIP affinity, yet {} endpoints answered",
                    seen.len()
                ));
            }
            Ok(())
        }
        // An unconnected UDP socket (the lab's client) does not hear of
        // the ICMP port unreachable: a refused datagram times out.
        Outcome::Rejected { .. } => match lines.iter().find(|l| {
            let refused = l.starts_with("REFUSED")
                || (packet.protocol == Protocol::Udp && l.as_str() == "TIMEOUT");
            !refused
        }) {
            None => Ok(()),
            Some(line) => Err(format!("explain says rejected, a connection got {line:?}")),
        },
        Outcome::Dropped { .. } => {
            let dropped = |l: &String| l == "TIMEOUT" || l.starts_with("ERROR [Errno 1]");
            match lines.iter().find(|l| !dropped(l)) {
                None => Ok(()),
                Some(line) => Err(format!("explain says dropped, a connection got {line:?}")),
            }
        }
        Outcome::Untouched { .. } => {
            // The packet goes on as routed: it may reach the address itself,
            // be refused or time out upstream, but no proxy sends it on.
            match lines
                .iter()
                .find(|l| reached(l).is_some_and(|(e, _)| e != packet.destination))
            {
                None => Ok(()),
                Some(line) => Err(format!("explain says untouched, a connection got {line:?}")),
            }
        }
        _ => Err(format!("an outcome the lab cannot check: {outcome:?}")),
    }
}
