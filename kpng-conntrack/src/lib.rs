//! UDP conntrack cleanup for kpng-rs backends. See the README.
//!
//! [`ConntrackCleaner`] compares each node view with the previous one and
//! deletes the conntrack entries that would keep UDP flows on endpoints
//! that are gone, or on a rejection that no longer applies. Run it after
//! the backend (fan the two out, backend first): kube-proxy also cleans up
//! once the new rules are in place.
//!
//! # Example
//!
//! What a change would delete, without running anything:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_conntrack::ConntrackCleaner;
//! use kpng_model::EndpointInfo;
//! use kpng_model::endpoint::{PortInfo, PortList};
//! use kpng_model::v1::{IpSet, Protocol, Service, ServicePort};
//! use kpng_model::view::{EndpointView, NodeView, ServiceView};
//! use kpng_sink::FullStateSink;
//!
//! let svc = Arc::new(Service {
//!     namespace: "kube-system".into(),
//!     name: "dns".into(),
//!     cluster_ips: Some(IpSet::parse_addrs("clusterIPs", ["10.96.0.10"])?),
//!     ports: vec![ServicePort { name: "dns".into(), protocol: Protocol::Udp as i32, port: 53, ..Default::default() }],
//!     ..Default::default()
//! });
//! let ports = PortList::new([PortInfo::new("dns", Protocol::Udp, 5353)]);
//! let endpoint = |ip: &str| {
//!     let ip = ip.parse().unwrap();
//!     let endpoint = EndpointInfo::builder(ip).ports(ports.clone()).build();
//!     EndpointView::at(endpoint, ip).unwrap().with_cluster(true)
//! };
//! let view = |eps: Vec<EndpointView>| {
//!     let mut view = NodeView::default();
//!     view.services.insert(svc.service_name(), Arc::new(ServiceView { service: svc.clone(), endpoints: eps }));
//!     view
//! };
//! let mut cleaner = ConntrackCleaner::dry_run();
//! cleaner.sync(&view(vec![endpoint("10.244.1.10"), endpoint("10.244.2.10")]))?;
//! cleaner.sync(&view(vec![endpoint("10.244.1.10")]))?;
//! assert_eq!(
//!     cleaner.last_deletions(),
//!     [vec!["-D", "-p", "udp", "--orig-dst", "10.96.0.10", "--orig-port-dst", "53", "--reply-src", "10.244.2.10"]]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::net::IpAddr;

use kpng_model::IpFamily;
use kpng_model::view::{NodeView, ServiceView};
use kpng_netfilter::process::Process;
use kpng_sink::{FullStateSink, SinkError};

/// How long one `conntrack` run may take before it is killed.
const CONNTRACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Deletes stale UDP conntrack entries after each sync. See the crate docs.
#[derive(Debug, Default)]
pub struct ConntrackCleaner {
    command: Vec<String>,
    dry_run: bool,
    previous: Option<NodeView>,
    last: Vec<Vec<String>>,
}

/// One UDP Service port in one family: its addresses, its NodePort, and
/// its endpoints' addresses.
#[derive(Debug, Default)]
struct UdpPort {
    addresses: Vec<String>,
    node_port: Option<u16>,
    endpoints: BTreeSet<IpAddr>,
}

fn udp_ports(view: &ServiceView) -> Vec<((IpFamily, u16), UdpPort)> {
    let mut out = Vec::new();
    for family in IpFamily::BOTH {
        let plan = view.plan(family);
        for port in plan.ports.iter().filter(|p| p.protocol == "udp") {
            let addresses = plan
                .cluster_ips
                .iter()
                .chain(plan.externals())
                .cloned()
                .collect();
            let endpoints = port
                .cluster
                .iter()
                .chain(&port.local)
                .map(|(ip, _)| *ip)
                .collect();
            out.push((
                (family, port.number),
                UdpPort {
                    addresses,
                    node_port: port.node_port,
                    endpoints,
                },
            ));
        }
    }
    out
}

impl ConntrackCleaner {
    /// Runs `conntrack` (e.g. `["conntrack"]`, or `["ip", "netns", "exec",
    /// NAME, "conntrack"]`).
    pub fn new(command: Vec<String>) -> Self {
        Self {
            command,
            ..Self::default()
        }
    }

    /// Computes deletions without running anything.
    pub fn dry_run() -> Self {
        Self {
            dry_run: true,
            ..Self::default()
        }
    }

    /// The `conntrack` arguments of the last sync's deletions.
    pub fn last_deletions(&self) -> &[Vec<String>] {
        &self.last
    }

    /// The deletions from `before` to `after`.
    fn deletions(before: &NodeView, after: &NodeView) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let udp = |args: &[&str]| -> Vec<String> {
            ["-D", "-p", "udp"]
                .iter()
                .chain(args)
                .map(|s| (*s).to_owned())
                .collect()
        };
        for (name, old) in &before.services {
            let new_ports = after
                .services
                .get(name)
                .map(|v| udp_ports(v))
                .unwrap_or_default();
            for ((family, number), old_port) in udp_ports(old) {
                let new_port = new_ports
                    .iter()
                    .find(|((f, n), _)| *f == family && *n == number);
                let kept = new_port.map(|(_, p)| &p.endpoints);
                for ep in old_port
                    .endpoints
                    .iter()
                    .filter(|ep| kept.is_none_or(|k| !k.contains(ep)))
                {
                    let ep = ep.to_string();
                    for address in &old_port.addresses {
                        out.push(udp(&[
                            "--orig-dst",
                            address,
                            "--orig-port-dst",
                            &number.to_string(),
                            "--reply-src",
                            &ep,
                        ]));
                    }
                    if let Some(np) = old_port.node_port {
                        out.push(udp(&[
                            "--orig-port-dst",
                            &np.to_string(),
                            "--reply-src",
                            &ep,
                        ]));
                    }
                }
            }
        }
        for (name, new) in &after.services {
            let old_ports = before
                .services
                .get(name)
                .map(|v| udp_ports(v))
                .unwrap_or_default();
            for ((family, number), port) in udp_ports(new) {
                let had = old_ports
                    .iter()
                    .find(|((f, n), _)| *f == family && *n == number)
                    .is_some_and(|(_, p)| !p.endpoints.is_empty());
                if had || port.endpoints.is_empty() {
                    continue;
                }
                // From no endpoint to some: flows that were rejected go.
                for address in &port.addresses {
                    out.push(udp(&[
                        "--orig-dst",
                        address,
                        "--orig-port-dst",
                        &number.to_string(),
                    ]));
                }
                if let Some(np) = port.node_port {
                    out.push(udp(&["--orig-port-dst", &np.to_string()]));
                }
            }
        }
        out
    }

    fn run(&self, args: &[String]) {
        let Some((program, prefix)) = self.command.split_first() else {
            return;
        };
        let run = Process::new(std::iter::once(program).chain(prefix).chain(args).cloned())
            .timeout(CONNTRACK_TIMEOUT)
            .run();
        match run {
            Ok(_) => {}
            // Exit 1: nothing matched, which is the common case.
            Err(kpng_netfilter::Error::Command { code: Some(1), .. }) => {}
            Err(error) => tracing::warn!(?args, %error, "conntrack cleanup failed"),
        }
    }
}

impl FullStateSink for ConntrackCleaner {
    /// Deletes what this view change leaves stale. Failures are logged,
    /// never fatal: a stale entry times out on its own.
    fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
        self.last = match &self.previous {
            Some(before) => Self::deletions(before, view),
            None => Vec::new(),
        };
        if !self.dry_run {
            for args in &self.last {
                self.run(args);
            }
        }
        // An O(1) copy: the views share their Services.
        self.previous = Some(view.clone());
        Ok(())
    }
}
