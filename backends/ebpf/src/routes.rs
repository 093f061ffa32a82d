//! Whether the tc programs masquerade what they should: a packet from
//! outside to a Service with `externalTrafficPolicy: Cluster` goes to an
//! endpoint on another node with the node's address as its source, and
//! the tc programs rewrite it so at the interface it leaves by. When the
//! route to that endpoint goes out of an interface without the programs,
//! the packet leaves with the client's address and the reply does not
//! come back through this node: the connection fails, silently. This
//! module finds those endpoints (each round, for the Services it
//! changed; all of them in a full round) and names them, with the
//! interface their route takes.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use kpng_model::view::ServiceView;
use kpng_model::{IpFamily, ServiceName};
use kpng_sink::Round;

use crate::EbpfConfig;

/// What the last checks found.
#[derive(Debug, Default)]
pub(crate) struct RouteCheck {
    /// Per Service, the endpoints on other nodes its external traffic
    /// (Cluster policy) is sent to.
    remote: HashMap<ServiceName, Vec<IpAddr>>,
    /// The interface of each endpoint's route, as last asked (`None`:
    /// no route).
    routes: HashMap<IpAddr, Option<u32>>,
    /// The tc interfaces' indexes.
    tc: Vec<u32>,
    /// Endpoints reached by an interface without the programs, with that
    /// interface's index (`None`: no route), as last reported.
    bypass: BTreeMap<IpAddr, Option<u32>>,
}

/// The endpoints on other nodes of `service`'s external traffic under
/// `externalTrafficPolicy: Cluster` (none for a Service with no
/// NodePort, externalIP or LB IP, or a Local policy).
fn remote_endpoints(service: &ServiceView) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for family in IpFamily::BOTH {
        let plan = service.plan(family);
        let external = !plan.external_ips.is_empty()
            || !plan.lb_ips.is_empty()
            || plan.ports.iter().any(|p| p.node_port.is_some());
        if !external || plan.etp_local {
            continue;
        }
        out.extend(
            service
                .cluster_endpoints(family)
                .filter(|e| !e.is_local())
                .map(|e| e.ip()),
        );
    }
    out.sort();
    out.dedup();
    out
}

impl RouteCheck {
    /// Checks the round's Services: asks the routes of endpoints not seen
    /// before (all of them in a full round), and warns once for each
    /// endpoint newly found reached by an interface without the programs.
    /// Returns those endpoints (all of them, not only new ones).
    pub(crate) fn check(
        &mut self,
        config: &EbpfConfig,
        round: &Round<'_>,
    ) -> Result<Vec<(IpAddr, String)>, crate::Error> {
        let netns = config.tc_netns.as_deref();
        if round.is_full() || self.tc.is_empty() {
            self.remote.clear();
            self.routes.clear();
            self.tc = kpng_netfilter::routes::interface_indexes(netns, &config.tc_interfaces)
                .map_err(crate::Error::Routes)?
                .into_iter()
                .flatten()
                .collect();
        }
        for change in round.services() {
            match change.after {
                Some(after) => {
                    self.remote
                        .insert(change.name.clone(), remote_endpoints(after));
                }
                None => {
                    self.remote.remove(change.name);
                }
            }
        }
        let mut wanted: Vec<IpAddr> = self.remote.values().flatten().copied().collect();
        wanted.sort();
        wanted.dedup();
        let unknown: Vec<IpAddr> = wanted
            .iter()
            .copied()
            .filter(|ip| !self.routes.contains_key(ip))
            .collect();
        if !unknown.is_empty() {
            let found = kpng_netfilter::routes::output_interfaces(netns, &unknown)
                .map_err(crate::Error::Routes)?;
            self.routes.extend(unknown.into_iter().zip(found));
        }
        let bypass: BTreeMap<IpAddr, Option<u32>> = wanted
            .iter()
            .filter_map(|ip| {
                let oif = self.routes.get(ip).copied().flatten();
                match oif {
                    Some(i) if self.tc.contains(&i) => None,
                    other => Some((*ip, other)),
                }
            })
            .collect();
        let names = kpng_netfilter::routes::interface_names(netns);
        let name = |oif: Option<u32>| match oif {
            Some(i) => names
                .get(&i)
                .cloned()
                .unwrap_or_else(|| format!("interface {i}")),
            None => "no route".to_owned(),
        };
        for (ip, oif) in &bypass {
            if self.bypass.get(ip) != Some(oif) {
                tracing::warn!(
                    endpoint = %ip,
                    interface = %name(*oif),
                    tc_interfaces = %config.tc_interfaces.join(","),
                    "externalTrafficPolicy Cluster traffic to this endpoint leaves by an interface without the tc programs: it is not masqueraded and its replies will not come back through this node; add the interface to --tc-interfaces"
                );
            }
        }
        self.bypass = bypass;
        Ok(self
            .bypass
            .iter()
            .map(|(ip, oif)| (*ip, name(*oif)))
            .collect())
    }
}
