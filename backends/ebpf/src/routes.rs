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
use std::path::{Path, PathBuf};

use kpng_model::view::ServiceView;
use kpng_model::{IpFamily, ServiceName};
use kpng_sink::Round;

use crate::EbpfConfig;

/// What the last checks found, kept up to date round by round: a round
/// touches only the endpoints of the Services it changed.
#[derive(Debug, Default)]
pub(crate) struct RouteCheck {
    /// Per Service, the endpoints on other nodes its external traffic
    /// (Cluster policy) is sent to.
    remote: HashMap<ServiceName, Vec<IpAddr>>,
    /// Each such endpoint: how many Services send to it.
    endpoints: HashMap<IpAddr, usize>,
    /// The tc interfaces, looked up at the last full round.
    tc: Option<TcRoutes>,
    /// The endpoints reached by an interface without the programs, with
    /// that interface's name (`no route`).
    bypass: BTreeMap<IpAddr, String>,
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
    /// Checks the round's Services (all of them in a full round, which
    /// starts over): asks the routes of the endpoints they newly send
    /// external traffic to, and warns once for each one found reached by
    /// an interface without the programs ([`list`](Self::list) gives
    /// them all).
    pub(crate) fn check(
        &mut self,
        config: &EbpfConfig,
        round: &Round<'_>,
    ) -> Result<(), crate::Error> {
        let netns = config.tc_netns.as_deref();
        // What was reported: a full round does not warn of it again.
        let mut reported = BTreeMap::new();
        if round.is_full() || self.tc.is_none() {
            self.remote.clear();
            self.endpoints.clear();
            reported = std::mem::take(&mut self.bypass);
            self.tc = Some(TcRoutes::new(netns, &config.tc_interfaces)?);
        }
        let Some(tc) = &self.tc else {
            return Ok(());
        };
        let mut added = Vec::new();
        for change in round.services() {
            let new = change
                .after
                .map(|a| remote_endpoints(a))
                .unwrap_or_default();
            let old = match change.after {
                Some(_) => self.remote.insert(change.name.clone(), new.clone()),
                None => self.remote.remove(change.name),
            };
            for ip in old.unwrap_or_default() {
                if let Some(users) = self.endpoints.get_mut(&ip) {
                    *users -= 1;
                    if *users == 0 {
                        self.endpoints.remove(&ip);
                        self.bypass.remove(&ip);
                    }
                }
            }
            for ip in new {
                let users = self.endpoints.entry(ip).or_insert(0);
                *users += 1;
                if *users == 1 {
                    added.push(ip);
                }
            }
        }
        if added.is_empty() {
            return Ok(());
        }
        let found = tc.around(&added)?;
        for (ip, around) in added.into_iter().zip(found) {
            let Some(name) = around else {
                continue;
            };
            if reported.get(&ip) != Some(&name) {
                tracing::warn!(
                    endpoint = %ip,
                    interface = %name,
                    tc_interfaces = %config.tc_interfaces.join(","),
                    "externalTrafficPolicy Cluster traffic to this endpoint leaves by an interface without the tc programs: it is not masqueraded and its replies will not come back through this node; add the interface to --tc-interfaces"
                );
            }
            self.bypass.insert(ip, name);
        }
        Ok(())
    }

    /// The endpoints in use reached by an interface without the programs,
    /// with that interface's name (`no route`), by address.
    pub(crate) fn list(&self) -> Vec<(IpAddr, String)> {
        self.bypass
            .iter()
            .map(|(ip, name)| (*ip, name.clone()))
            .collect()
    }
}

/// Whether the routes of a node's network namespace send endpoints
/// through the interfaces with the tc programs (`--tc-interfaces`): the
/// check the backend makes each round, for anyone else to make too
/// (`kpng … explain --tc-interfaces` gives it to
/// `kpng_explain::Setup::with_tc_routes`).
///
/// The tc programs masquerade `externalTrafficPolicy: Cluster` traffic to
/// endpoints on other nodes at the interface it leaves by: an endpoint
/// whose route leaves by another interface gets the client's address,
/// answers it directly, and the connection fails.
#[derive(Clone, Debug)]
pub struct TcRoutes {
    netns: Option<PathBuf>,
    /// The tc interfaces' indexes (those that exist).
    tc: Vec<u32>,
}

impl TcRoutes {
    /// The routes of the namespace at `netns` (the process's own when
    /// `None`), the tc programs on `tc_interfaces` (one that does not
    /// exist there has none).
    ///
    /// # Errors
    /// [`Error::Routes`](crate::Error::Routes) when the namespace cannot
    /// be entered.
    pub fn new(netns: Option<&Path>, tc_interfaces: &[String]) -> Result<Self, crate::Error> {
        let tc = kpng_netfilter::routes::interface_indexes(netns, tc_interfaces)
            .map_err(crate::Error::Routes)?
            .into_iter()
            .flatten()
            .collect();
        Ok(Self {
            netns: netns.map(Path::to_path_buf),
            tc,
        })
    }

    /// For each of `endpoints`, the name of the interface without the tc
    /// programs its route leaves by (`no route` when there is none);
    /// `None` when it leaves by one with them. One route request each.
    ///
    /// # Errors
    /// [`Error::Routes`](crate::Error::Routes) when the routes cannot be
    /// asked.
    pub fn around(&self, endpoints: &[IpAddr]) -> Result<Vec<Option<String>>, crate::Error> {
        let netns = self.netns.as_deref();
        let found = kpng_netfilter::routes::output_interfaces(netns, endpoints)
            .map_err(crate::Error::Routes)?;
        // Names are looked up only when one is needed, once a call.
        let mut names = None;
        Ok(found
            .into_iter()
            .map(|oif| {
                if oif.is_some_and(|i| self.tc.contains(&i)) {
                    return None;
                }
                let names =
                    names.get_or_insert_with(|| kpng_netfilter::routes::interface_names(netns));
                Some(match oif {
                    Some(i) => names
                        .get(&i)
                        .cloned()
                        .unwrap_or_else(|| format!("interface {i}")),
                    None => "no route".to_owned(),
                })
            })
            .collect())
    }
}
