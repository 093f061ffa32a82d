//! UDP conntrack cleanup for kpng-rs backends. See the README.
//!
//! [`ConntrackCleaner`] reconciles the kernel's UDP flows with each node
//! view, as kube-proxy does since it stopped running the `conntrack`
//! tool: after every sync, the first after a restart included, it dumps
//! the UDP flows once per family over ctnetlink and deletes each flow to a
//! Service port whose replies come from an address that no longer serves
//! that port: an endpoint that left, a Service left with none, a flow that
//! was rejected or not yet translated, and a Service deleted while this
//! process ran. A new datagram of such a flow then goes through the rules
//! again. It is a [`kpng_sink::Sink`]: run it after the backend, on the
//! rounds the backend applied (`backend.followed_by(cleaner)`, see
//! [`kpng_sink::SinkExt::followed_by`]), as kube-proxy cleans up once the
//! new rules are in place. It never runs the `conntrack` tool.
//!
//! # Example
//!
//! Which flows a view leaves stale, without a kernel:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_conntrack::ConntrackCleaner;
//! use kpng_model::EndpointInfo;
//! use kpng_model::endpoint::{PortInfo, PortList};
//! use kpng_model::v1::{Protocol, Service, ServicePort};
//! use kpng_model::view::{EndpointView, NodeView, ServiceView};
//! use kpng_netfilter::conntrack::{Flow, Tuple};
//!
//! let svc = Arc::new(kpng_model::ServiceInfo::new(
//!     Service::new("kube-system", "dns")
//!         .with_cluster_ips(["10.96.0.10".parse()?])
//!         .with_port(ServicePort::new("dns", Protocol::Udp, 53)),
//! )?);
//! let ports = PortList::new([PortInfo::new("dns", Protocol::Udp, 5353)]);
//! let ip = "10.244.1.10".parse()?;
//! let endpoint = EndpointView::at(EndpointInfo::builder(ip).ports(ports).build(), ip)
//!     .unwrap()
//!     .with_cluster(true);
//! let mut view = NodeView::default();
//! view.services.insert(svc.service_name(), Arc::new(ServiceView { service: svc.clone(), endpoints: vec![endpoint] }));
//! // A client's flow to the DNS Service, answered by `from`.
//! let flow = |from: &str| Flow {
//!     protocol: kpng_netfilter::conntrack::UDP,
//!     original: Tuple { src: "10.244.3.3".parse().unwrap(), dst: "10.96.0.10".parse().unwrap(), src_port: 40000, dst_port: 53 },
//!     reply: Tuple { src: from.parse().unwrap(), dst: "10.244.3.3".parse().unwrap(), src_port: 5353, dst_port: 40000 },
//!     zone: 0,
//! };
//! let flows = [flow("10.244.1.10"), flow("10.244.2.10")];
//! let cleaner = ConntrackCleaner::new();
//! // The flow to the endpoint that left is stale; the other stays.
//! assert_eq!(cleaner.stale(&view, &flows), [flows[1]]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod sysctls;
mod tcp;
pub use sysctls::Sysctls;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;

use kpng_model::view::{NodeView, ServiceView};
use kpng_model::{IpFamily, IpNet};
use kpng_netfilter::conntrack::{Flow, FlowRecord, UdpTimeouts};
use kpng_netfilter::nft::{Socket, Table, TableFamily};
use kpng_sink::{Round, Sink, SinkError};

/// Reconciles UDP conntrack flows with each node view. See the crate docs.
#[derive(Debug, Default)]
pub struct ConntrackCleaner {
    netns: Option<PathBuf>,
    socket: Option<Socket>,
    /// The UDP Service addresses and ports seen since the process began:
    /// a flow to one whose Service went is stale too.
    known: BTreeSet<(IpAddr, u16)>,
    /// The Service CIDRs: a translated flow to an address in them that no
    /// Service has is stale, whenever its Service went.
    service_cidrs: Vec<IpNet>,
    last: Vec<Flow>,
    /// Rounds that needed no dump.
    skipped: u64,
    /// `--end-tcp-connections`: TCP flows to endpoints that left are
    /// ended too (see `tcp.rs`).
    end_tcp: bool,
    /// The TCP Service addresses and ports seen since the process began.
    tcp_known: BTreeSet<(IpAddr, u16)>,
    /// The TCP flows the last sync ended.
    last_tcp: Vec<Flow>,
    /// Where the backend records the UDP flows it translated.
    record: Option<FlowRecord>,
    /// The namespace's UDP conntrack timeouts, opened at first use.
    timeouts: Option<UdpTimeouts>,
    /// How the last sync found its flows.
    cleanup: Cleanup,
}

/// How a sync found the UDP flows it reconciled
/// ([`ConntrackCleaner::last_cleanup`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cleanup {
    /// None were looked for: no change in the round could leave a UDP
    /// flow stale.
    #[default]
    Skipped,
    /// The conntrack table was dumped whole (every bucket of the kernel's
    /// table walked), for this reason.
    Walk(WalkReason),
    /// The flows came from the backend's record of the UDP flows it
    /// translated: one dump of that set, then each candidate read and
    /// deleted by its tuple (hash lookups, no walk).
    Record,
}

/// Why a sync walked the conntrack table rather than read the backend's
/// record of UDP flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkReason {
    /// No record was given ([`ConntrackCleaner::with_flow_record`]).
    NoRecord,
    /// The round can have left flows stale that were never translated,
    /// which the record does not hold: a full round (the first after a
    /// start, or after a failure), a change of the node or of the Service
    /// CIDRs, or a UDP Service port given its first endpoint, a new
    /// address or node port, or made with endpoints.
    Untranslated,
    /// The record's table or sets are missing (the backend has not made
    /// them, or they were deleted).
    Missing,
    /// The record is younger than its timeout: flows from before it may
    /// be missing.
    Young,
    /// A flow could not be recorded within the record's timeout (the set
    /// was full, or the flow was in a conntrack zone other than 0).
    Missed,
    /// A UDP conntrack timeout of the namespace is longer than the
    /// record's: an idle flow may outlive its element.
    Timeout,
    /// Reading the record failed.
    Failed,
}

/// One UDP Service port in one family: its addresses, its NodePort, and
/// its endpoints' addresses.
#[derive(Debug, Default, PartialEq, Eq)]
struct UdpPort {
    addresses: Vec<IpAddr>,
    node_port: Option<u16>,
    endpoints: BTreeSet<IpAddr>,
}

fn udp_ports(view: &ServiceView) -> Vec<((IpFamily, u16), UdpPort)> {
    let mut out = Vec::new();
    // Most Services have no UDP port: no plan to make for them.
    if !view
        .service
        .ports
        .iter()
        .any(|p| p.protocol == kpng_model::v1::Protocol::Udp as i32)
    {
        return out;
    }
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

/// Whether a Service's change from `before` to `after` can leave a UDP
/// flow stale: a UDP port or address gone or changed, an endpoint no
/// longer serving one, or a UDP port that had no endpoint getting one
/// (its flows were rejected, not translated). Endpoints added to a port
/// that had some leave every flow as it was.
fn may_leave_stale(before: Option<&ServiceView>, after: Option<&ServiceView>) -> bool {
    let before = before.map(udp_ports).unwrap_or_default();
    let after = after.map(udp_ports).unwrap_or_default();
    fn find(ports: &[((IpFamily, u16), UdpPort)], key: (IpFamily, u16)) -> Option<&UdpPort> {
        ports.iter().find(|(k, _)| *k == key).map(|(_, p)| p)
    }
    let changed = before.iter().any(|(key, was)| match find(&after, *key) {
        None => true,
        Some(now) => {
            was.addresses != now.addresses
                || was.node_port != now.node_port
                || !was.endpoints.is_subset(&now.endpoints)
                || (was.endpoints.is_empty() && !now.endpoints.is_empty())
        }
    });
    changed
        || after
            .iter()
            .any(|(key, now)| find(&before, *key).is_none() && !now.endpoints.is_empty())
}

/// Whether a Service's change from `before` to `after` can leave stale a
/// UDP flow that was never translated (which the backend's record does not
/// hold): a UDP port (in a family) with endpoints after it that had none,
/// was not there, or changed its addresses or node port. A flow to a
/// Service port that has no endpoint is rejected before conntrack keeps
/// it, and one to a port that has some is translated: only such changes
/// turn an untranslated flow kept before into one to a served port.
fn may_leave_untranslated(before: Option<&ServiceView>, after: Option<&ServiceView>) -> bool {
    let before = before.map(udp_ports).unwrap_or_default();
    let after = after.map(udp_ports).unwrap_or_default();
    after.iter().any(|(key, now)| {
        !now.endpoints.is_empty()
            && before
                .iter()
                .find(|(k, _)| k == key)
                .is_none_or(|(_, was)| {
                    was.endpoints.is_empty()
                        || was.addresses != now.addresses
                        || was.node_port != now.node_port
                })
    })
}

/// Whether the flows `round` can leave stale must be found by walking the
/// conntrack table: some may never have been translated (see
/// [`may_leave_untranslated`]), or what is in the kernel is not known (a
/// full round), or what a flow is stale by changed for all of them (the
/// node, the Service CIDRs).
fn round_needs_walk(round: &Round<'_>) -> bool {
    round.is_full()
        || round.node_changed()
        || round.service_cidrs_changed()
        || round.services().any(|change| {
            may_leave_untranslated(
                change.before.map(|v| v.as_ref()),
                change.after.map(|v| v.as_ref()),
            )
        })
}

/// Whether `round` can leave a UDP flow stale (see [`may_leave_stale`]):
/// a full round always can (what is in the kernel is not known), as can
/// a change of the node or of the Service CIDRs.
fn round_may_leave_stale(round: &Round<'_>) -> bool {
    round.is_full()
        || round.node_changed()
        || round.service_cidrs_changed()
        || round.services().any(|change| {
            may_leave_stale(
                change.before.map(|v| v.as_ref()),
                change.after.map(|v| v.as_ref()),
            )
        })
}

/// What a view allows: per Service address and port, and per node port,
/// the addresses that may answer.
#[derive(Debug, Default)]
struct Allowed {
    addresses: BTreeMap<(IpAddr, u16), BTreeSet<IpAddr>>,
    node_ports: BTreeMap<u16, BTreeSet<IpAddr>>,
    /// The cluster's Service CIDRs (its ServiceCIDR objects).
    service_cidrs: Vec<IpNet>,
}

impl Allowed {
    fn of(view: &NodeView) -> Self {
        let mut allowed = Self {
            service_cidrs: view.service_cidrs_with(&[]),
            ..Self::default()
        };
        for service in view.services.values() {
            for ((_, number), port) in udp_ports(service) {
                for &address in &port.addresses {
                    allowed
                        .addresses
                        .entry((address, number))
                        .or_default()
                        .extend(&port.endpoints);
                }
                if let Some(np) = port.node_port {
                    allowed
                        .node_ports
                        .entry(np)
                        .or_default()
                        .extend(&port.endpoints);
                }
            }
        }
        allowed
    }
}

impl ConntrackCleaner {
    /// Cleans the process's own network namespace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cleans the network namespace at `path` (`/run/netns/NAME`).
    pub fn in_netns(path: impl Into<PathBuf>) -> Self {
        Self {
            netns: Some(path.into()),
            ..Self::default()
        }
    }

    /// Knows the cluster's Service CIDRs (`--service-cidr`): then the
    /// flows of a Service deleted while no cleaner ran (kpng was down) go
    /// too, as kube-proxy does. The ServiceCIDRs the view carries count
    /// as well; this is for clusters without them.
    #[must_use]
    pub fn with_service_cidrs(mut self, cidrs: Vec<IpNet>) -> Self {
        self.service_cidrs = cidrs;
        self
    }

    /// Takes kube-proxy's settings that concern it: the Service CIDRs
    /// (see [`with_service_cidrs`](Self::with_service_cidrs)) and
    /// `--end-tcp-connections`: then each round that takes an endpoint
    /// from a Service (and the first) also ends the TCP flows translated
    /// to an endpoint no longer in the view. Each such flow's conntrack
    /// entry is deleted and its client nudged
    /// ([`kpng_netfilter::nudge`]): its next packet meets a live endpoint
    /// (or the Service's reset), which resets the connection. An endpoint
    /// that drains (in the view, in neither set) keeps its flows. The
    /// netfilter backends ready their rules for it when the same setting
    /// is given to them.
    #[must_use]
    pub fn with_proxy(mut self, proxy: &kpng_sink::ProxyConfig) -> Self {
        self.service_cidrs = proxy.service_cidrs.clone();
        self.end_tcp = proxy.end_tcp_connections;
        self
    }

    /// Finds the UDP flows to a removed endpoint in the backend's `record`
    /// of the UDP flows it translated (the nftables backend's
    /// `NftBackend::flow_record`) rather than by walking the conntrack
    /// table, whenever the record can be trusted (see [`WalkReason`] for
    /// when it cannot, and the table is walked as without a record). The
    /// same flows are deleted either way.
    #[must_use]
    pub fn with_flow_record(mut self, record: Option<FlowRecord>) -> Self {
        self.record = record;
        self
    }

    /// How the last sync found the UDP flows it reconciled.
    pub fn last_cleanup(&self) -> Cleanup {
        self.cleanup
    }

    /// The UDP flows the last sync deleted.
    pub fn last_deletions(&self) -> &[Flow] {
        &self.last
    }

    /// The TCP flows the last sync ended (with `--end-tcp-connections`).
    pub fn last_tcp_ended(&self) -> &[Flow] {
        &self.last_tcp
    }

    /// The rounds that dumped no flow: no change in them could leave a
    /// UDP flow stale.
    pub fn skipped_rounds(&self) -> u64 {
        self.skipped
    }

    /// The flows of `flows` that `view` leaves stale: to a Service address
    /// and port (or a node port) of the view, answered from an address
    /// that does not serve it now; or DNATed to a Service address and port
    /// `view` does not have, which this cleaner saw in an earlier view or
    /// which is in a Service CIDR it knows.
    pub fn stale(&self, view: &NodeView, flows: &[Flow]) -> Vec<Flow> {
        self.stale_for(&Allowed::of(view), flows)
    }

    fn stale_for(&self, allowed: &Allowed, flows: &[Flow]) -> Vec<Flow> {
        flows
            .iter()
            .filter(|flow| {
                let to = (flow.original.dst, flow.original.dst_port);
                let from = flow.reply.src;
                if let Some(endpoints) = allowed.addresses.get(&to) {
                    return !endpoints.contains(&from);
                }
                if let Some(endpoints) = allowed.node_ports.get(&flow.original.dst_port) {
                    return flow.dnated() && !endpoints.contains(&from);
                }
                let gone = self.known.contains(&to)
                    || (self.service_cidrs.iter().chain(&allowed.service_cidrs))
                        .any(|c| kpng_model::addr::cidr_contains(*c, to.0));
                flow.dnated() && gone
            })
            .copied()
            .collect()
    }

    fn socket(&mut self) -> Result<&mut Socket, kpng_netfilter::Error> {
        match &mut self.socket {
            Some(socket) => Ok(socket),
            slot => Ok(slot.insert(Socket::open(self.netns.as_deref())?)),
        }
    }

    /// Why the record cannot be trusted, from the marks of distrust in
    /// each family's table; `None` when it can.
    fn distrust(
        &mut self,
        record: &FlowRecord,
    ) -> Result<Option<WalkReason>, kpng_netfilter::Error> {
        for family in [TableFamily::Ip, TableFamily::Ip6] {
            let table = Table::new(family, record.table.as_str());
            let Some(untrusted) = self.socket()?.set_elements(&table, &record.untrusted)? else {
                return Ok(Some(WalkReason::Missing));
            };
            let young = FlowRecord::YOUNG.to_ne_bytes();
            if untrusted.iter().any(|e| e.key == young) {
                return Ok(Some(WalkReason::Young));
            }
            if !untrusted.is_empty() {
                return Ok(Some(WalkReason::Missed));
            }
        }
        Ok(None)
    }

    /// The stale flows the record holds, each read back by its original
    /// tuple (the element may be of an earlier flow with that tuple, or
    /// outlive its flow) and deleted if it is still stale; or why the
    /// record cannot be trusted. The marks of distrust are read before
    /// the flows (a record known untrusted is not dumped) and after them
    /// (a flow missed before the flows were read has left its mark by
    /// then).
    fn read_record(
        &mut self,
        record: &FlowRecord,
        allowed: &Allowed,
    ) -> Result<Result<Vec<Flow>, WalkReason>, kpng_netfilter::Error> {
        let timeouts = match &mut self.timeouts {
            Some(t) => t,
            slot => slot.insert(UdpTimeouts::open(self.netns.as_deref())?),
        };
        if timeouts.longest()? > record.timeout {
            return Ok(Err(WalkReason::Timeout));
        }
        if let Some(reason) = self.distrust(record)? {
            return Ok(Err(reason));
        }
        let mut candidates = Vec::new();
        for family in [TableFamily::Ip, TableFamily::Ip6] {
            let table = Table::new(family, record.table.as_str());
            let Some(elements) = self.socket()?.set_elements(&table, &record.flows)? else {
                return Ok(Err(WalkReason::Missing));
            };
            candidates.extend(elements.iter().filter_map(|e| FlowRecord::flow_of(&e.key)));
        }
        if let Some(reason) = self.distrust(record)? {
            return Ok(Err(reason));
        }
        let mut stale = self.stale_for(allowed, &candidates);
        stale.sort_unstable_by_key(|f| f.original);
        stale.dedup_by_key(|f| f.original);
        let mut deleted = Vec::new();
        for candidate in stale {
            let socket = self.socket()?;
            let Some(flow) = socket.flow(candidate.protocol, &candidate.original, 0)? else {
                continue;
            };
            if self.stale_for(allowed, &[flow]).is_empty() {
                continue;
            }
            if self.socket()?.delete_flow(&flow)? {
                deleted.push(flow);
            }
        }
        Ok(Ok(deleted))
    }

    /// The stale flows deleted, from the record when the round allows it
    /// and the record can be trusted, else by a walk; and how.
    fn clean(
        &mut self,
        round: &Round<'_>,
        allowed: &Allowed,
    ) -> Result<(Vec<Flow>, Cleanup), kpng_netfilter::Error> {
        let reason = match self.record.clone() {
            None => WalkReason::NoRecord,
            Some(_) if round_needs_walk(round) => WalkReason::Untranslated,
            Some(record) => match self.read_record(&record, allowed) {
                Ok(Ok(deleted)) => return Ok((deleted, Cleanup::Record)),
                Ok(Err(reason)) => reason,
                Err(error) => {
                    tracing::warn!(%error, "reading the UDP flow record failed; walking the conntrack table");
                    self.socket = None;
                    WalkReason::Failed
                }
            },
        };
        if reason != WalkReason::NoRecord {
            tracing::debug!(?reason, "walking the conntrack table");
        }
        Ok((self.reconcile(allowed)?, Cleanup::Walk(reason)))
    }

    /// Dumps the flows and deletes the stale ones.
    fn reconcile(&mut self, allowed: &Allowed) -> Result<Vec<Flow>, kpng_netfilter::Error> {
        let mut flows = Vec::new();
        for ipv6 in [false, true] {
            flows.extend(self.socket()?.flows(ipv6, kpng_netfilter::conntrack::UDP)?);
        }
        let stale = self.stale_for(allowed, &flows);
        let mut deleted = Vec::new();
        for flow in stale {
            if self.socket()?.delete_flow(&flow)? {
                deleted.push(flow);
            }
        }
        Ok(deleted)
    }

    /// Dumps the TCP flows, deletes those to end and nudges their
    /// clients.
    fn end_tcp_flows(
        &mut self,
        present: &tcp::Present,
    ) -> Result<Vec<Flow>, kpng_netfilter::Error> {
        let mut flows = Vec::new();
        for ipv6 in [false, true] {
            flows.extend(self.socket()?.flows(ipv6, kpng_netfilter::conntrack::TCP)?);
        }
        let mut ended = Vec::new();
        for flow in tcp::to_end(present, &self.tcp_known, &flows) {
            if self.socket()?.delete_flow(&flow)? {
                ended.push(flow);
            }
        }
        kpng_netfilter::nudge::nudge(self.netns.as_deref(), &ended)?;
        Ok(ended)
    }
}

impl Sink for ConntrackCleaner {
    /// Deletes the flows the round's view leaves stale: on a full round,
    /// and on a round that can have left one stale (a UDP endpoint gone,
    /// a UDP Service gone or given its first endpoint; kube-proxy dumps on
    /// every sync). The flows are dumped whole, so they are reconciled
    /// with the whole view. Failures are logged, never fatal: a stale
    /// entry times out on its own.
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.last_tcp.clear();
        if self.end_tcp && tcp::round_may_end(round) {
            let present = tcp::Present::of(round.view());
            match self.end_tcp_flows(&present) {
                Ok(ended) => self.last_tcp = ended,
                Err(error) => {
                    tracing::warn!(%error, "ending TCP flows to departed endpoints failed");
                    self.socket = None;
                }
            }
            if !self.last_tcp.is_empty() {
                tracing::debug!(
                    flows = self.last_tcp.len(),
                    "TCP flows to departed endpoints ended"
                );
            }
            self.tcp_known.extend(present.addresses.into_keys());
        }
        if !round_may_leave_stale(round) {
            self.last.clear();
            self.skipped += 1;
            self.cleanup = Cleanup::Skipped;
            return Ok(());
        }
        let allowed = Allowed::of(round.view());
        self.last = match self.clean(round, &allowed) {
            Ok((deleted, how)) => {
                self.cleanup = how;
                deleted
            }
            Err(error) => {
                tracing::warn!(%error, "conntrack cleanup failed");
                // A fresh socket next time.
                self.socket = None;
                Vec::new()
            }
        };
        if !self.last.is_empty() {
            tracing::debug!(flows = self.last.len(), "stale UDP flows deleted");
        }
        self.known.extend(allowed.addresses.into_keys());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kpng_model::EndpointInfo;
    use kpng_model::endpoint::{PortInfo, PortList};
    use kpng_model::v1::{IpSet, Protocol, Service, ServicePort};
    use kpng_model::view::{EndpointView, NodeView, ServiceView};
    use kpng_netfilter::conntrack::{Flow, Tuple};

    use super::{Allowed, ConntrackCleaner};

    fn view(endpoints: &[&str], node_port: u32) -> NodeView {
        let svc = Arc::new(
            kpng_model::ServiceInfo::new(Service {
                namespace: "kube-system".into(),
                name: "dns".into(),
                cluster_ips: Some(IpSet::parse_addrs("clusterIPs", ["10.96.0.10"]).expect("ip")),
                ports: vec![ServicePort {
                    name: "dns".into(),
                    protocol: Protocol::Udp as i32,
                    port: 53,
                    node_port,
                    ..Default::default()
                }],
                r#type: if node_port == 0 {
                    0
                } else {
                    kpng_model::v1::ServiceType::NodePort as i32
                },
                ..Default::default()
            })
            .expect("valid"),
        );
        let ports = PortList::new([PortInfo::new("dns", Protocol::Udp, 5353)]);
        let eps = endpoints
            .iter()
            .map(|e| {
                let ip = e.parse().expect("ip");
                EndpointView::at(EndpointInfo::builder(ip).ports(ports.clone()).build(), ip)
                    .expect("its address")
                    .with_cluster(true)
            })
            .collect();
        let mut view = NodeView::default();
        view.services.insert(
            svc.service_name(),
            Arc::new(ServiceView {
                service: svc,
                endpoints: eps,
            }),
        );
        view
    }

    fn flow(to: &str, port: u16, from: &str) -> Flow {
        let ip = |t: &str| t.parse().expect("ip");
        Flow {
            protocol: kpng_netfilter::conntrack::UDP,
            original: Tuple {
                src: ip("10.244.9.9"),
                dst: ip(to),
                src_port: 40000,
                dst_port: port,
            },
            reply: Tuple {
                src: ip(from),
                dst: ip("10.244.9.9"),
                src_port: if from == to { port } else { 5353 },
                dst_port: 40000,
            },
            zone: 0,
        }
    }

    /// Only a round that can leave a UDP flow stale dumps the flows: an
    /// endpoint added to a port that has some cannot; one gone, a first
    /// endpoint, a Service gone and a full round can.
    #[test]
    fn only_rounds_that_can_leave_a_flow_stale_dump() {
        use kpng_sink::Round;
        let (none, one, two) = (
            view(&[], 0),
            view(&["10.244.1.1"], 0),
            view(&["10.244.1.1", "10.244.2.2"], 0),
        );
        let empty = NodeView::default();
        let needs = |before: &NodeView, after: &NodeView| {
            super::round_may_leave_stale(&Round::between(before, after))
        };
        assert!(!needs(&one, &two), "an endpoint added");
        assert!(!needs(&one, &one), "nothing changed");
        assert!(needs(&two, &one), "an endpoint gone");
        assert!(needs(&none, &one), "the first endpoint");
        assert!(!needs(&empty, &none), "a Service with none");
        assert!(needs(&empty, &one), "a Service with endpoints");
        assert!(needs(&one, &empty), "a Service gone");
        assert!(needs(&one, &view(&["10.244.1.1"], 30053)), "a node port");
        assert!(
            super::round_may_leave_stale(&Round::full(&two)),
            "a full round"
        );
    }

    /// Only rounds that can leave an untranslated flow stale need the
    /// walk: an endpoint gone (with or without another added) or a Service
    /// gone is found in the record; a first endpoint, a Service made with
    /// endpoints, a new node port or a full round is not.
    #[test]
    fn only_rounds_that_concern_untranslated_flows_walk() {
        use kpng_sink::Round;
        let (none, one, two) = (
            view(&[], 0),
            view(&["10.244.1.1"], 0),
            view(&["10.244.1.1", "10.244.2.2"], 0),
        );
        let other = view(&["10.244.3.3"], 0);
        let empty = NodeView::default();
        let walks = |before: &NodeView, after: &NodeView| {
            super::round_needs_walk(&Round::between(before, after))
        };
        assert!(!walks(&two, &one), "an endpoint gone");
        assert!(!walks(&one, &other), "an endpoint replaced");
        assert!(!walks(&one, &empty), "a Service gone");
        assert!(!walks(&one, &none), "the last endpoint gone");
        assert!(walks(&none, &one), "the first endpoint");
        assert!(walks(&empty, &one), "a Service with endpoints");
        assert!(!walks(&empty, &none), "a Service with none");
        assert!(walks(&one, &view(&["10.244.1.1"], 30053)), "a node port");
        assert!(super::round_needs_walk(&Round::full(&one)), "a full round");
    }

    #[test]
    fn stale_flows_follow_kube_proxys_reconciler() {
        let cleaner = ConntrackCleaner::new();
        // No endpoint: a flow that was not translated (or rejected) goes.
        let none = view(&[], 0);
        let untranslated = flow("10.96.0.10", 53, "10.96.0.10");
        assert_eq!(cleaner.stale(&none, &[untranslated]), [untranslated]);
        // A flow to something that is not a Service stays.
        let other = flow("10.1.2.3", 53, "10.1.2.3");
        assert!(cleaner.stale(&none, &[other]).is_empty());
        // A node port: translated flows to a gone endpoint go.
        let np = view(&["10.244.1.10"], 30053);
        let via_node = flow("192.168.0.5", 30053, "10.244.2.10");
        let kept = flow("192.168.0.5", 30053, "10.244.1.10");
        assert_eq!(cleaner.stale(&np, &[via_node, kept]), [via_node]);
    }

    /// A Service deleted while the cleaner ran: its translated flows go,
    /// once it has seen the Service in an earlier view.
    #[test]
    fn flows_of_a_deleted_service_go() {
        let mut cleaner = ConntrackCleaner::new();
        let translated = flow("10.96.0.10", 53, "10.244.1.10");
        assert!(
            cleaner
                .stale(&NodeView::default(), &[translated])
                .is_empty()
        );
        cleaner.known.extend(
            Allowed::of(&view(&["10.244.1.10"], 0))
                .addresses
                .into_keys(),
        );
        assert_eq!(
            cleaner.stale(&NodeView::default(), &[translated]),
            [translated]
        );
    }

    /// A Service deleted while kpng was down: a fresh cleaner knows it by
    /// the Service CIDRs, and leaves other translated flows alone.
    #[test]
    fn flows_to_service_cidrs_that_no_service_has_go() {
        let cidr = "10.96.0.0/12".parse().expect("cidr");
        let cleaner = ConntrackCleaner::new().with_service_cidrs(vec![cidr]);
        let orphan = flow("10.96.0.10", 53, "10.244.1.10");
        let elsewhere = flow("172.17.0.2", 53, "10.244.1.10");
        assert_eq!(
            cleaner.stale(&NodeView::default(), &[orphan, elsewhere]),
            [orphan]
        );
    }
}
