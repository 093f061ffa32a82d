//! Rendering: the node view as nftables objects, per IP family.
//!
//! The ruleset is shaped to nft's cost model (see docs/architecture.md):
//! a few large maps and many tiny chains, no per-endpoint chain and no
//! anonymous map except for ClientIP affinity. Dispatch is one verdict-map
//! lookup (`service-ips`, `service-nodeports`); endpoint choice is one
//! shared rule per endpoint count that looks up the target in a single big
//! map keyed by (address, protocol, port, random index).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kpng_model::v1::ServicePort;
use kpng_model::view::ServiceView;
use kpng_model::{IpFamily, ServiceName};

use crate::Config;

/// Verdict map: (address, protocol, port) to the Service chain.
pub(crate) const SERVICE_IPS: &str = "service-ips";
/// Verdict map: (protocol, node port) to the NodePort chain.
pub(crate) const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Verdict map: Services with no endpoint at all, to the reject chain.
pub(crate) const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// Verdict map: node ports with no endpoint at all, to the reject chain.
pub(crate) const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// Verdict map: load-balancer IPs with source ranges, to their firewall.
pub(crate) const FIREWALL_IPS: &str = "firewall-ips";
/// Set: live ClusterIPs (other ports on them are rejected).
pub(crate) const CLUSTER_IPS: &str = "cluster-ips";
/// Set: (endpoint, endpoint) pairs of this node's endpoints, for hairpin.
pub(crate) const HAIRPIN: &str = "hairpin";
/// Set: addresses NodePorts listen on.
pub(crate) const NODEPORT_IPS: &str = "nodeport-ips";
/// Set: the pod CIDRs (`--cluster-cidr`).
pub(crate) const CLUSTER_CIDRS: &str = "cluster-cidrs";
/// Set: the Service CIDRs (`--service-cidr`).
pub(crate) const SERVICE_CIDRS: &str = "service-cidrs";

/// Which endpoint set, for which kind of destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Pick {
    /// Keyed by destination address: ClusterIPs, externalIPs, LB IPs.
    Vip { local: bool },
    /// Keyed by node port.
    NodePort { local: bool },
}

impl Pick {
    /// The big map holding the targets.
    pub(crate) fn map(self) -> &'static str {
        match self {
            Pick::Vip { local: false } => "vip-cluster",
            Pick::Vip { local: true } => "vip-local",
            Pick::NodePort { local: false } => "np-cluster",
            Pick::NodePort { local: true } => "np-local",
        }
    }

    pub(crate) const ALL: [Pick; 4] = [
        Pick::Vip { local: false },
        Pick::Vip { local: true },
        Pick::NodePort { local: false },
        Pick::NodePort { local: true },
    ];

    /// The shared chain that picks one of `n` targets.
    pub(crate) fn chain(self, n: usize) -> String {
        format!("pick-{}-{n}", self.map())
    }
}

/// Words that differ between the `ip` and `ip6` families.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fam(pub(crate) IpFamily);

impl Fam {
    pub(crate) fn table(self) -> &'static str {
        match self.0 {
            IpFamily::V4 => "ip",
            IpFamily::V6 => "ip6",
        }
    }
    pub(crate) fn addr_type(self) -> &'static str {
        match self.0 {
            IpFamily::V4 => "ipv4_addr",
            IpFamily::V6 => "ipv6_addr",
        }
    }
    /// `ip` or `ip6`, the payload protocol keyword.
    pub(crate) fn proto(self) -> &'static str {
        self.table()
    }
    /// An address and port as a NAT target.
    pub(crate) fn target(self, ip: IpAddr, port: u16) -> String {
        match ip {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            IpAddr::V4(v4) => format!("{v4}:{port}"),
        }
    }
}

/// One map or set element, as nft text.
pub(crate) type Elem = std::sync::Arc<str>;

/// The nft objects one Service contributes to one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Render {
    /// Chains, by name, with their rules.
    pub(crate) chains: BTreeMap<String, Vec<String>>,
    /// Elements, per map or set. Shared strings: the desired and applied
    /// records hold the same allocations.
    pub(crate) elements: BTreeMap<&'static str, BTreeSet<Elem>>,
    /// Dynamic sets (affinity), by name, with their declaration.
    pub(crate) sets: BTreeMap<String, String>,
    /// The shared pick chains this Service jumps to.
    pub(crate) picks: BTreeSet<(Pick, usize)>,
    /// The shared policy chains its ports go to.
    pub(crate) shared: BTreeSet<Shared>,
}

impl Render {
    fn element(&mut self, map: &'static str, element: String) {
        self.elements.entry(map).or_default().insert(element.into());
    }
}

/// A stable, short, nft-safe id for one Service port: FNV-1a over the
/// Service name, port name and protocol, in base 32. Chain names never carry
/// user text.
pub(crate) fn port_id(name: &ServiceName, port: &ServicePort) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let text = format!("{name}/{}/{}", port.name, port.protocol);
    for byte in text.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    (0..13)
        .map(|i| ALPHABET[((hash >> (i * 5)) & 31) as usize] as char)
        .collect()
}

fn sanitize_ip(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

struct PortCtx<'a> {
    fam: Fam,
    config: &'a Config,
    id: String,
    proto: &'static str,
    port: u16,
    affinity: Option<u32>,
    cluster: Vec<(IpAddr, u16)>,
    local: Vec<(IpAddr, u16)>,
}

/// Which traffic a chain serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// ClusterIPs.
    Svc,
    /// externalIPs and LB IPs.
    Ext,
    /// Node ports.
    Np,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Svc => "svc",
            Kind::Ext => "ext",
            Kind::Np => "np",
        }
    }

    fn pick(self, local: bool) -> Pick {
        match self {
            Kind::Svc | Kind::Ext => Pick::Vip { local },
            Kind::Np => Pick::NodePort { local },
        }
    }
}

/// A chain shared by every Service port with the same kind, policy and
/// endpoint counts: its rules depend on nothing else, so the table holds a
/// few hundred such chains, not one per Service. All of them, up to the
/// pick capacity, are made by a full sync and kept: an endpoint that comes
/// or goes then changes map elements only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Shared {
    kind: Kind,
    /// Whether the policy is Local.
    local: bool,
    /// Cluster-wide endpoints (0 when the chain does not use them).
    cluster: usize,
    /// Local endpoints (0 when the chain does not use them).
    local_n: usize,
}

impl Shared {
    fn new(kind: Kind, local: bool, cluster: usize, local_n: usize) -> Self {
        let (cluster, local_n) = match (kind, local) {
            (Kind::Svc, true) => (0, local_n),
            (_, false) => (cluster, 0),
            (_, true) => (cluster, local_n),
        };
        Self {
            kind,
            local,
            cluster,
            local_n,
        }
    }

    /// Every shared chain with at most `capacity` endpoints.
    pub(crate) fn all(capacity: usize) -> impl Iterator<Item = Shared> {
        [Kind::Svc, Kind::Ext, Kind::Np]
            .into_iter()
            .flat_map(move |kind| {
                let cluster = (1..=capacity).map(move |c| Shared::new(kind, false, c, 0));
                let local = (1..=capacity)
                    .flat_map(move |c| (0..=capacity).map(move |l| Shared::new(kind, true, c, l)));
                cluster.chain(local)
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
    }

    pub(crate) fn name(self) -> String {
        let kind = self.kind.word();
        match (self.kind, self.local) {
            (Kind::Svc, true) => format!("svc-l{}", self.local_n),
            (_, false) => format!("{kind}-c{}", self.cluster),
            (_, true) => format!("{kind}-l{}-{}", self.cluster, self.local_n),
        }
    }

    pub(crate) fn rules(self, fam: Fam, config: &Config) -> Vec<String> {
        policy_rules(fam, config, self.kind, self.local, |local| {
            let n = if local { self.local_n } else { self.cluster };
            if n == 0 {
                "drop".into()
            } else {
                format!("goto {}", self.kind.pick(local).chain(n))
            }
        })
    }
}

fn mark(config: &Config) -> String {
    format!("meta mark set meta mark or {:#x}", config.masquerade_mark())
}

/// The rules of a chain for traffic of `kind` under a `local` (or Cluster)
/// policy; `select(local)` is the verdict that picks an endpoint of the
/// local (or cluster-wide) set.
fn policy_rules(
    fam: Fam,
    config: &Config,
    kind: Kind,
    local: bool,
    mut select: impl FnMut(bool) -> String,
) -> Vec<String> {
    let saddr = format!("{} saddr", fam.proto());
    let mut rules = Vec::new();
    if kind == Kind::Svc {
        if config.masquerade_all {
            rules.push(mark(config));
        } else if !config.cluster_cidrs(fam.0).is_empty() {
            // Traffic from outside the pod network is masqueraded.
            rules.push(format!("{saddr} != @{CLUSTER_CIDRS} {}", mark(config)));
        }
        rules.push(select(local));
        return rules;
    }
    if !local {
        // External traffic under the Cluster policy: always masqueraded.
        return vec![mark(config), select(false)];
    }
    let cluster = select(false);
    if !config.cluster_cidrs(fam.0).is_empty() {
        // Pods short-circuit to every endpoint, unmasqueraded.
        rules.push(format!("{saddr} @{CLUSTER_CIDRS} {cluster}"));
    }
    // The node itself: masqueraded, to every endpoint.
    rules.push(format!("fib saddr type local {} {cluster}", mark(config)));
    // Everyone else: local endpoints only, client address kept.
    rules.push(select(true));
    rules
}

impl PortCtx<'_> {
    /// The chain that traffic of `kind` to this port goes to: a shared one
    /// (`svc-c3`, `ext-l5-1`…), or with ClientIP affinity, whose rules name
    /// endpoints, the port's own.
    fn chain(&self, render: &mut Render, kind: Kind, local: bool) -> String {
        if let Some(timeout) = self.affinity {
            let name = format!("{}-{}", kind.word(), self.id);
            let rules = policy_rules(self.fam, self.config, kind, local, |set_local| {
                let set = if set_local {
                    &self.local
                } else {
                    &self.cluster
                };
                if set.is_empty() {
                    "drop".into()
                } else {
                    format!("goto {}", self.affinity_chain(render, set_local, timeout))
                }
            });
            render.chains.insert(name.clone(), rules);
            return name;
        }
        let shared = Shared::new(kind, local, self.cluster.len(), self.local.len());
        for (set_local, n) in [(false, shared.cluster), (true, shared.local_n)] {
            if n > 0 {
                render.picks.insert((kind.pick(set_local), n));
            }
        }
        render.shared.insert(shared);
        shared.name()
    }

    /// ClientIP affinity: one timeout set and one chain per endpoint, one
    /// chain per endpoint set that sends known clients back to their
    /// endpoint and spreads the others.
    fn affinity_chain(&self, render: &mut Render, local: bool, timeout: u32) -> String {
        let set = if local { &self.local } else { &self.cluster };
        let (fam, proto) = (self.fam, self.fam.proto());
        let name = format!(
            "aff-{}-{}",
            self.id,
            if local { "local" } else { "cluster" }
        );
        let mut rules = Vec::new();
        let mut spread = Vec::new();
        for (i, (ip, port)) in set.iter().enumerate() {
            let tag = sanitize_ip(*ip);
            let clients = format!("afc-{}-{tag}", self.id);
            let chain = format!("afe-{}-{tag}", self.id);
            let dnat = format!(
                "meta l4proto {} dnat {} to {}",
                self.proto,
                fam.table(),
                fam.target(*ip, *port)
            );
            rules.push(format!("{proto} saddr @{clients} {dnat}"));
            spread.push(format!("{i} : goto {chain}"));
            render.sets.insert(
                clients.clone(),
                format!(
                    "type {}; flags dynamic,timeout; timeout {timeout}s;",
                    fam.addr_type()
                ),
            );
            render.chains.insert(
                chain,
                vec![format!("update @{clients} {{ {proto} saddr }}"), dnat],
            );
        }
        rules.push(format!(
            "numgen random mod {} vmap {{ {} }}",
            set.len(),
            spread.join(", ")
        ));
        render.chains.insert(name.clone(), rules);
        name
    }

    fn vip_elements(&self, render: &mut Render, vip: &str, local: bool) {
        let set = if local { &self.local } else { &self.cluster };
        let map = Pick::Vip { local }.map();
        for (i, (ip, port)) in set.iter().enumerate() {
            render.element(
                map,
                format!(
                    "{vip} . {} . {} . {i} : {ip} . {port}",
                    self.proto, self.port
                ),
            );
        }
    }

    fn np_elements(&self, render: &mut Render, node_port: u16, local: bool) {
        let set = if local { &self.local } else { &self.cluster };
        let map = Pick::NodePort { local }.map();
        for (i, (ip, port)) in set.iter().enumerate() {
            render.element(
                map,
                format!("{} . {node_port} . {i} : {ip} . {port}", self.proto),
            );
        }
    }
}

/// Renders one Service for one family.
pub(crate) fn service(view: &ServiceView, family: IpFamily, config: &Config) -> Render {
    let mut render = Render::default();
    let fam = Fam(family);
    let name = view.service.service_name();
    let plan = view.plan(family);
    let (cluster_ips, lb_ips, ranges) = (plan.cluster_ips, plan.lb_ips, plan.source_ranges);
    let external: Vec<&String> = plan.externals().collect();
    let (itp_local, etp_local) = (plan.itp_local, plan.etp_local);

    for ip in cluster_ips {
        render.element(CLUSTER_IPS, ip.clone());
    }
    // This node's endpoints may reach themselves through the Service
    // (hairpin): such flows are masqueraded.
    for ip in view
        .endpoints
        .iter()
        .filter(|e| e.is_local && e.family() == family)
        .map(|e| e.ip)
    {
        render.element(HAIRPIN, format!("{ip} . {ip}"));
    }
    for port in plan.ports {
        let (proto, number, node_port) = (port.protocol, port.number, port.node_port);
        let ctx = PortCtx {
            fam,
            config,
            id: port_id(&name, port.port),
            proto,
            port: number,
            affinity: plan.affinity,
            cluster: port.cluster,
            local: port.local,
        };
        let key = |vip: &str| format!("{vip} . {proto} . {number}");

        // Source ranges apply to LB IPs only, whatever the endpoints.
        if !ranges.is_empty() && !lb_ips.is_empty() {
            let fw = format!("fw-{}", ctx.id);
            render.chains.insert(
                fw.clone(),
                vec![
                    format!("{} saddr {{ {} }} return", fam.proto(), ranges.join(", ")),
                    "drop".into(),
                ],
            );
            for lb in lb_ips {
                render.element(FIREWALL_IPS, format!("{} : jump {fw}", key(lb)));
            }
        }

        if ctx.cluster.is_empty() {
            // No usable endpoint anywhere: every address rejects.
            for vip in cluster_ips.iter().chain(external.iter().copied()) {
                render.element(
                    NO_ENDPOINT_SERVICES,
                    format!("{} : goto reject-chain", key(vip)),
                );
            }
            if let Some(np) = node_port {
                render.element(
                    NO_ENDPOINT_NODEPORTS,
                    format!("{proto} . {np} : goto reject-chain"),
                );
            }
            continue;
        }

        if !cluster_ips.is_empty() {
            let chain = ctx.chain(&mut render, Kind::Svc, itp_local);
            for ip in cluster_ips {
                render.element(SERVICE_IPS, format!("{} : goto {chain}", key(ip)));
                ctx.vip_elements(&mut render, ip, itp_local);
            }
        }
        if !external.is_empty() {
            let chain = ctx.chain(&mut render, Kind::Ext, etp_local);
            for ip in &external {
                render.element(SERVICE_IPS, format!("{} : goto {chain}", key(ip)));
                ctx.vip_elements(&mut render, ip, false);
                if etp_local {
                    ctx.vip_elements(&mut render, ip, true);
                }
            }
        }
        if let Some(np) = node_port {
            let chain = ctx.chain(&mut render, Kind::Np, etp_local);
            render.element(SERVICE_NODEPORTS, format!("{proto} . {np} : goto {chain}"));
            ctx.np_elements(&mut render, np, false);
            if etp_local {
                ctx.np_elements(&mut render, np, true);
            }
        }
    }
    render
}
