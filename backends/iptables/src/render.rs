//! What one Service contributes to one family's rules, in kube-proxy's
//! layout.
//!
//! nat table: `KUBE-SERVICES` dispatches each (ClusterIP | externalIP |
//! LB IP, protocol, port) to the port's chain; `KUBE-NODEPORTS` each
//! (protocol, NodePort). `KUBE-SVC-*` balances over the cluster-policy
//! endpoints with `statistic` rules, `KUBE-SVL-*` over the local ones,
//! `KUBE-EXT-*` applies externalTrafficPolicy, `KUBE-FW-*` the LB source
//! ranges, and `KUBE-SEP-*` DNATs to one endpoint.
//!
//! filter table: what the nat table does not rewrite still carries its
//! Service address there. `KUBE-SERVICES` rejects ports with no endpoint
//! and unknown ports of live ClusterIPs and drops unallocated Service-CIDR
//! addresses; `KUBE-EXTERNAL-SERVICES` rejects or drops external traffic
//! with no (local) endpoint; `KUBE-PROXY-FIREWALL` drops LB traffic from
//! outside the source ranges. Chain names are hashes, so no user text
//! reaches a rule.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::net::IpAddr;

use kpng_model::view::{EndpointView, PortPlan, ServicePlan, ServiceView};
use kpng_model::{IpFamily, IpNet, ServiceName};
use siphasher::sip128::{Hasher128, SipHasher13};

use crate::IptablesConfig;
use kpng_model::addr::cidrs_in;

pub(crate) use kpng_netfilter::iptables::{ChainKey, Table};

pub(crate) const SERVICES: &str = "KUBE-SERVICES";
pub(crate) const NODEPORTS: &str = "KUBE-NODEPORTS";
pub(crate) const EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
pub(crate) const POSTROUTING: &str = "KUBE-POSTROUTING";
pub(crate) const MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub(crate) const FORWARD: &str = "KUBE-FORWARD";
pub(crate) const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// The live ClusterIPs (filter): reached only by traffic to the Service
/// CIDR that the nat table did not rewrite, so the per-address rules cost
/// nothing to other traffic.
pub(crate) const CLUSTER_IPS: &str = "KUBE-CLUSTER-IPS";
/// The raw table's chain that leaves the nudges untracked
/// (`--end-tcp-connections`; see `kpng_netfilter::nudge`).
pub(crate) const NUDGES: &str = "KPNG-NUDGES";
/// The jump to it.
pub(crate) const NUDGES_HOOK: (Table, &str, &str) = (Table::Raw, "OUTPUT", "-j KPNG-NUDGES");

/// The dispatch chains, shared by every Service: each Service adds rules.
pub(crate) const DISPATCH: [(Table, &str); 6] = [
    (Table::Nat, SERVICES),
    (Table::Nat, NODEPORTS),
    (Table::Filter, SERVICES),
    (Table::Filter, EXTERNAL_SERVICES),
    (Table::Filter, PROXY_FIREWALL),
    (Table::Filter, CLUSTER_IPS),
];

/// Prefixes of the per-Service chains this backend owns.
pub(crate) const OWNED_PREFIXES: [&str; 5] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// Whether the backend owns a chain of this name (and may delete it).
pub(crate) fn owned(name: &str) -> bool {
    OWNED_PREFIXES.iter().any(|p| name.starts_with(p))
        || [
            SERVICES,
            NODEPORTS,
            EXTERNAL_SERVICES,
            POSTROUTING,
            MARK_MASQ,
            FORWARD,
            PROXY_FIREWALL,
            CLUSTER_IPS,
            NUDGES,
        ]
        .contains(&name)
}

/// What one Service contributes to one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Render {
    /// Chains it owns wholly, with their rules.
    pub(crate) chains: BTreeMap<ChainKey, Vec<String>>,
    /// Its rules in each dispatch chain.
    pub(crate) dispatch: BTreeMap<(Table, &'static str), Vec<String>>,
    /// Its endpoints, summed over its ports (cluster policy): the
    /// `KUBE-SEP-*` chains kube-proxy's layout makes for it, what
    /// [`crate::Layout::Auto`] counts.
    pub(crate) endpoints: usize,
}

impl Render {
    fn push(&mut self, table: Table, chain: &'static str, rule: String) {
        self.dispatch.entry((table, chain)).or_default().push(rule);
    }
}

/// A stable 16-character chain-name suffix, as kube-proxy's: base32 of a
/// hash of the text (SipHash-1-3 with a fixed key: names must not change
/// across restarts).
fn hash_name(prefix: &str, text: &str) -> String {
    let mut hasher = SipHasher13::new_with_keys(0x6b70_6e67, 0x6970_7461);
    hasher.write(text.as_bytes());
    let hash = hasher.finish128().as_u128();
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let suffix: String = (0..16)
        .map(|i| ALPHABET[((hash >> (i * 5)) & 31) as usize] as char)
        .collect();
    format!("{prefix}{suffix}")
}

fn host(ip: impl std::fmt::Display, family: IpFamily) -> String {
    match family {
        IpFamily::V4 => format!("{ip}/32"),
        IpFamily::V6 => format!("{ip}/128"),
    }
}

fn target(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(ip) => format!("{ip}:{port}"),
        IpAddr::V6(ip) => format!("[{ip}]:{port}"),
    }
}

/// The mark rules of the masquerade bit.
pub(crate) fn mark(config: &IptablesConfig) -> String {
    let m = config.proxy.masquerade_mark();
    format!("{m:#x}/{m:#x}")
}

/// The rules of one port's load-balancing chain over `targets`, with
/// ClientIP affinity when `affinity` is set. Adds the endpoint chains to
/// `render`; `masq` rules come first. An endpoint for which `direct` holds
/// gets no chain: its balancing rule DNATs to it (the compact layout).
fn balance(
    render: &mut Render,
    port_name: &str,
    proto: &str,
    targets: &[(IpAddr, u16)],
    affinity: Option<u32>,
    masq: Vec<String>,
    direct: &dyn Fn(&IpAddr) -> bool,
) -> Vec<String> {
    let mut rules = masq;
    // Each endpoint's verdict: a jump to its KUBE-SEP chain, or the DNAT.
    let seps: Vec<Option<String>> = targets
        .iter()
        .map(|(ip, port)| {
            (!direct(ip))
                .then(|| hash_name("KUBE-SEP-", &format!("{port_name}/{}", target(*ip, *port))))
        })
        .collect();
    if let Some(timeout) = affinity {
        for sep in seps.iter().flatten() {
            rules.push(format!(
                "-m recent --name {sep} --rcheck --seconds {timeout} --reap -j {sep}"
            ));
        }
    }
    let n = seps.len();
    for (i, ((ip, port), sep)) in targets.iter().zip(&seps).enumerate() {
        let verdict = match sep {
            Some(sep) => format!("-j {sep}"),
            None => format!("-p {proto} -j DNAT --to-destination {}", target(*ip, *port)),
        };
        if i + 1 == n {
            rules.push(verdict);
        } else {
            let p = 1.0 / (n - i) as f64;
            rules.push(format!(
                "-m statistic --mode random --probability {p:.10} {verdict}"
            ));
        }
    }
    for ((ip, port), sep) in targets.iter().zip(&seps) {
        let Some(sep) = sep else { continue };
        let source = host(ip, IpFamily::of(ip));
        let recent = match affinity {
            Some(_) => format!("-m recent --name {sep} --set "),
            None => String::new(),
        };
        render.chains.insert(
            (Table::Nat, sep.clone()),
            vec![
                format!("-s {source} -j {MARK_MASQ}"),
                format!(
                    "-p {proto} -m {proto} {recent}-j DNAT --to-destination {}",
                    target(*ip, *port)
                ),
            ],
        );
    }
    rules
}

/// Renders one Service for one family: per port, the firewall drops, then
/// either rejects (no endpoint) or the balancing chains, the ClusterIPs'
/// jumps and the external paths; last, the rejects of unknown ports.
///
/// With `compact`, an endpoint on another node gets no `KUBE-SEP-*`
/// chain unless the Service has ClientIP affinity: the balancing rule
/// DNATs to it. Its hairpin rule (`-s` the endpoint `-j KUBE-MARK-MASQ`)
/// can only match traffic the endpoint itself sends through this node's
/// nat table, which starts on the endpoint's own node; endpoints on this
/// node, and those on no node (an EndpointSlice's addresses outside the
/// cluster), keep their chain and that rule.
pub(crate) fn service(
    view: &ServiceView,
    family: IpFamily,
    config: &IptablesConfig,
    service_cidrs: &[IpNet],
    compact: bool,
) -> Render {
    let mut render = Render::default();
    let name: ServiceName = view.service.service_name();
    let plan = view.plan(family);
    let pod_cidrs = config.proxy.cluster_cidrs_in(family);
    // The endpoints on this node, and those on no node (addresses
    // outside the cluster, whose own traffic may come through this node):
    // those keep a chain in the compact layout.
    let mut here: Vec<IpAddr> = if compact {
        view.endpoints
            .iter()
            .filter(|e| e.used() && e.family() == family)
            .filter(|e| e.is_local() || e.endpoint().node_name().is_empty())
            .map(EndpointView::ip)
            .collect()
    } else {
        Vec::new()
    };
    here.sort_unstable();
    let direct =
        |ip: &IpAddr| compact && plan.affinity.is_none() && here.binary_search(ip).is_err();
    for port in &plan.ports {
        render.endpoints += port.cluster.len();
        let port = PortRender::new(&name, &plan, port, family, config, &pod_cidrs, &direct);
        port.firewall_drops(&mut render);
        if port.port.cluster.is_empty() {
            port.reject_everywhere(&mut render);
            continue;
        }
        port.balancing_chains(&mut render);
        port.cluster_ip_jumps(&mut render);
        port.external_paths(&mut render);
    }
    unknown_ports(&mut render, plan.cluster_ips, family, service_cidrs);
    render
}

/// One port of one Service in one family, with its chain names and
/// matches: what each phase of [`service`] renders from.
struct PortRender<'a> {
    plan: &'a ServicePlan<'a>,
    port: &'a PortPlan<'a>,
    family: IpFamily,
    config: &'a IptablesConfig,
    pod_cidrs: &'a [String],
    /// `ns/name:port/proto`, what chain names hash.
    port_name: String,
    svc_chain: String,
    svl_chain: String,
    ext_chain: String,
    fw_chain: String,
    mark_masq: String,
    /// Whether an endpoint gets no chain of its own (see [`service`]).
    direct: &'a dyn Fn(&IpAddr) -> bool,
}

impl<'a> PortRender<'a> {
    fn new(
        name: &ServiceName,
        plan: &'a ServicePlan<'a>,
        port: &'a PortPlan<'a>,
        family: IpFamily,
        config: &'a IptablesConfig,
        pod_cidrs: &'a [String],
        direct: &'a dyn Fn(&IpAddr) -> bool,
    ) -> Self {
        let port_name = format!("{name}:{}/{}", port.port.name, port.protocol);
        Self {
            plan,
            port,
            family,
            config,
            pod_cidrs,
            svc_chain: hash_name("KUBE-SVC-", &port_name),
            svl_chain: hash_name("KUBE-SVL-", &port_name),
            ext_chain: hash_name("KUBE-EXT-", &port_name),
            fw_chain: hash_name("KUBE-FW-", &port_name),
            port_name,
            mark_masq: format!("-j {MARK_MASQ}"),
            direct,
        }
    }

    /// Matches traffic to `ip` on this port.
    fn dst(&self, ip: impl std::fmt::Display) -> String {
        let proto = self.port.protocol;
        format!(
            "-d {} -p {proto} -m {proto} --dport {}",
            host(ip, self.family),
            self.port.number
        )
    }

    /// Matches traffic to this node on NodePort `np`.
    fn node_port_dst(&self, np: u16) -> String {
        let proto = self.port.protocol;
        format!("-m addrtype --dst-type LOCAL -p {proto} -m {proto} --dport {np}")
    }

    /// LB source ranges: traffic to an LB IP that the nat table did not
    /// take through KUBE-FW is dropped here.
    fn firewall_drops(&self, render: &mut Render) {
        if self.plan.source_ranges.is_empty() {
            return;
        }
        for lb in self.plan.lb_ips {
            let rule = format!("{} -j DROP", self.dst(lb));
            render.push(Table::Filter, PROXY_FIREWALL, rule);
        }
    }

    /// No usable endpoint anywhere: every address of the port rejects.
    /// With `--end-tcp-connections`, a TCP packet that is not a SYN is
    /// reset first: an ICMP error leaves an established connection up,
    /// and the client of a flow ended with its endpoint is to learn at
    /// its next packet.
    fn reject_everywhere(&self, render: &mut Render) {
        let rejects = |to: String| {
            let mut rules = Vec::new();
            if self.config.proxy.end_tcp_connections && self.port.protocol == "tcp" {
                rules.push(format!("{to} ! --syn -j REJECT --reject-with tcp-reset"));
            }
            rules.push(format!("{to} -j REJECT"));
            rules
        };
        for ip in self.plan.cluster_ips {
            for rule in rejects(self.dst(ip)) {
                render.push(Table::Filter, SERVICES, rule);
            }
        }
        for ip in self.plan.externals() {
            for rule in rejects(self.dst(ip)) {
                render.push(Table::Filter, EXTERNAL_SERVICES, rule);
            }
        }
        if let Some(np) = self.port.node_port {
            for rule in rejects(self.node_port_dst(np)) {
                render.push(Table::Filter, EXTERNAL_SERVICES, rule);
            }
        }
    }

    /// The masquerade rules for traffic to `ips`: from outside the pod
    /// network, or all of it with `--masquerade-all`.
    fn masquerade(&self, ips: &[IpAddr]) -> Vec<String> {
        let mark = &self.mark_masq;
        ips.iter()
            .filter_map(|ip| {
                if self.config.proxy.masquerade_all {
                    Some(format!("{} {mark}", self.dst(ip)))
                } else if self.pod_cidrs.is_empty() {
                    None
                } else {
                    let not_pods: Vec<String> =
                        self.pod_cidrs.iter().map(|c| format!("! -s {c}")).collect();
                    Some(format!("{} {} {mark}", not_pods.join(" "), self.dst(ip)))
                }
            })
            .collect()
    }

    /// KUBE-SVC (cluster policy) and, when a Local policy has local
    /// endpoints, KUBE-SVL.
    fn balancing_chains(&self, render: &mut Render) {
        let (plan, port) = (self.plan, self.port);
        let (proto, affinity) = (port.protocol, plan.affinity);
        let masq = self.masquerade(plan.cluster_ips);
        let rules = balance(
            render,
            &self.port_name,
            proto,
            &port.cluster,
            affinity,
            masq,
            self.direct,
        );
        render
            .chains
            .insert((Table::Nat, self.svc_chain.clone()), rules);
        if (plan.itp_local || plan.etp_local) && !port.local.is_empty() {
            let masq = if plan.itp_local {
                self.masquerade(plan.cluster_ips)
            } else {
                Vec::new()
            };
            let rules = balance(
                render,
                &self.port_name,
                proto,
                &port.local,
                affinity,
                masq,
                self.direct,
            );
            render
                .chains
                .insert((Table::Nat, self.svl_chain.clone()), rules);
        }
    }

    /// Each ClusterIP jumps to its policy's chain, or drops (iTP Local
    /// with no local endpoint).
    fn cluster_ip_jumps(&self, render: &mut Render) {
        let itp_local = self.plan.itp_local;
        for ip in self.plan.cluster_ips {
            if itp_local && self.port.local.is_empty() {
                render.push(Table::Filter, SERVICES, format!("{} -j DROP", self.dst(ip)));
            } else {
                let chain = if itp_local {
                    &self.svl_chain
                } else {
                    &self.svc_chain
                };
                render.push(Table::Nat, SERVICES, format!("{} -j {chain}", self.dst(ip)));
            }
        }
    }

    /// External addresses and the NodePort go through KUBE-EXT (and LB
    /// IPs with source ranges through KUBE-FW first).
    fn external_paths(&self, render: &mut Render) {
        let (plan, port) = (self.plan, self.port);
        if plan.externals().next().is_none() && port.node_port.is_none() {
            return;
        }
        render
            .chains
            .insert((Table::Nat, self.ext_chain.clone()), self.ext_rules());
        let no_local = plan.etp_local && port.local.is_empty();
        let ext_chain = &self.ext_chain;
        let drop = |render: &mut Render, matched: String| {
            if no_local {
                render.push(
                    Table::Filter,
                    EXTERNAL_SERVICES,
                    format!("{matched} -j DROP"),
                );
            }
        };
        for ip in plan.external_ips {
            render.push(
                Table::Nat,
                SERVICES,
                format!("{} -j {ext_chain}", self.dst(ip)),
            );
            drop(render, self.dst(ip));
        }
        if !plan.lb_ips.is_empty() {
            let lb_target = if plan.source_ranges.is_empty() {
                ext_chain
            } else {
                let rules = plan
                    .source_ranges
                    .iter()
                    .map(|r| format!("-s {r} -j {ext_chain}"))
                    .collect();
                render
                    .chains
                    .insert((Table::Nat, self.fw_chain.clone()), rules);
                &self.fw_chain
            };
            for ip in plan.lb_ips {
                render.push(
                    Table::Nat,
                    SERVICES,
                    format!("{} -j {lb_target}", self.dst(ip)),
                );
                drop(render, self.dst(ip));
            }
        }
        if let Some(np) = port.node_port {
            let proto = port.protocol;
            let rule = format!("-p {proto} -m {proto} --dport {np} -j {ext_chain}");
            render.push(Table::Nat, NODEPORTS, rule);
            drop(render, self.node_port_dst(np));
        }
    }

    /// KUBE-EXT: with eTP Local, pods go to every endpoint unmasqueraded,
    /// the node itself masqueraded, others to the local ones; with eTP
    /// Cluster, everything masqueraded to every endpoint.
    fn ext_rules(&self) -> Vec<String> {
        let (svc_chain, mark_masq) = (&self.svc_chain, &self.mark_masq);
        if !self.plan.etp_local {
            return vec![mark_masq.clone(), format!("-j {svc_chain}")];
        }
        let mut rules: Vec<String> = self
            .pod_cidrs
            .iter()
            .map(|cidr| format!("-s {cidr} -j {svc_chain}"))
            .collect();
        rules.push(format!("-m addrtype --src-type LOCAL {mark_masq}"));
        rules.push(format!("-m addrtype --src-type LOCAL -j {svc_chain}"));
        if !self.port.local.is_empty() {
            rules.push(format!("-j {}", self.svl_chain));
        }
        rules
    }
}

/// Unknown ports on a live ClusterIP: whatever the nat table left with
/// that address is refused. Behind the Service-CIDR jump when there is one
/// (see [`globals`]).
fn unknown_ports(
    render: &mut Render,
    cluster_ips: &[IpAddr],
    family: IpFamily,
    service_cidrs: &[IpNet],
) {
    let chain = if cidrs_in(service_cidrs, family).is_empty() {
        SERVICES
    } else {
        CLUSTER_IPS
    };
    for ip in cluster_ips {
        let rule = format!("-d {} -j REJECT", host(ip, family));
        render.push(Table::Filter, chain, rule);
    }
}

/// The chains every family has, whatever the Services: masquerading, the
/// forward rules, and the tails of the dispatch chains (NodePort
/// addresses, the Service-CIDR drop).
pub(crate) fn globals(
    config: &IptablesConfig,
    family: IpFamily,
    node_ips: &[String],
    service_cidrs: &[IpNet],
) -> Render {
    let mut render = Render::default();
    let m = config.proxy.masquerade_mark();
    render.chains.insert(
        (Table::Nat, MARK_MASQ.into()),
        vec![format!("-j MARK --or-mark {m:#x}")],
    );
    render.chains.insert(
        (Table::Nat, POSTROUTING.into()),
        vec![
            format!("-m mark ! --mark {} -j RETURN", mark(config)),
            format!("-j MARK --xor-mark {m:#x}"),
            "-j MASQUERADE --random-fully".into(),
        ],
    );
    render.chains.insert(
        (Table::Filter, FORWARD.into()),
        vec![
            "-m conntrack --ctstate INVALID -j DROP".into(),
            format!("-m mark --mark {} -j ACCEPT", mark(config)),
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT".into(),
        ],
    );
    if config.proxy.end_tcp_connections {
        render.chains.insert(
            (Table::Raw, NUDGES.into()),
            vec![format!(
                "-m mark --mark {:#x} -j CT --notrack",
                kpng_netfilter::conntrack::NUDGE_MARK
            )],
        );
    }
    for ip in node_ips {
        render.push(Table::Nat, SERVICES, format!("-d {ip} -j {NODEPORTS}"));
    }
    for cidr in cidrs_in(service_cidrs, family) {
        render.push(
            Table::Filter,
            SERVICES,
            format!("-d {cidr} -j {CLUSTER_IPS}"),
        );
        render.push(Table::Filter, SERVICES, format!("-d {cidr} -j DROP"));
    }
    render
}

/// The jumps from the built-in chains into ours: (table, built-in chain,
/// rule). Inserted at the top when missing; never removed.
pub(crate) const HOOKS: [(Table, &str, &str); 11] = [
    (Table::Nat, "PREROUTING", "-j KUBE-SERVICES"),
    (Table::Nat, "OUTPUT", "-j KUBE-SERVICES"),
    (Table::Nat, "POSTROUTING", "-j KUBE-POSTROUTING"),
    (
        Table::Filter,
        "INPUT",
        "-m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL",
    ),
    (
        Table::Filter,
        "INPUT",
        "-m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES",
    ),
    (
        Table::Filter,
        "FORWARD",
        "-m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL",
    ),
    (Table::Filter, "FORWARD", "-j KUBE-FORWARD"),
    (
        Table::Filter,
        "FORWARD",
        "-m conntrack --ctstate NEW -j KUBE-SERVICES",
    ),
    (
        Table::Filter,
        "FORWARD",
        "-m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES",
    ),
    (
        Table::Filter,
        "OUTPUT",
        "-m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL",
    ),
    (
        Table::Filter,
        "OUTPUT",
        "-m conntrack --ctstate NEW -j KUBE-SERVICES",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_safe() {
        let a = hash_name("KUBE-SVC-", "default/web:http/tcp");
        assert_eq!(a, hash_name("KUBE-SVC-", "default/web:http/tcp"));
        assert_ne!(a, hash_name("KUBE-SVC-", "default/web:http/udp"));
        assert_eq!(a.len(), "KUBE-SVC-".len() + 16);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(owned(&a) && owned(SERVICES) && !owned("KUBE-KUBELET-CANARY"));
    }
}
