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

use kpng_model::view::ServiceView;
use kpng_model::{IpFamily, ServiceName};
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

fn host(ip: &str, family: IpFamily) -> String {
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
    let m = config.masquerade_mark();
    format!("{m:#x}/{m:#x}")
}

/// The rules of one port's load-balancing chain over `targets`, with
/// ClientIP affinity when `affinity` is set. Adds the endpoint chains to
/// `render`; `masq` rules come first.
fn balance(
    render: &mut Render,
    port_name: &str,
    proto: &str,
    targets: &[(IpAddr, u16)],
    affinity: Option<u32>,
    masq: Vec<String>,
) -> Vec<String> {
    let mut rules = masq;
    let seps: Vec<String> = targets
        .iter()
        .map(|(ip, port)| hash_name("KUBE-SEP-", &format!("{port_name}/{}", target(*ip, *port))))
        .collect();
    if let Some(timeout) = affinity {
        for sep in &seps {
            rules.push(format!(
                "-m recent --name {sep} --rcheck --seconds {timeout} --reap -j {sep}"
            ));
        }
    }
    let n = seps.len();
    for (i, sep) in seps.iter().enumerate() {
        if i + 1 == n {
            rules.push(format!("-j {sep}"));
        } else {
            let p = 1.0 / (n - i) as f64;
            rules.push(format!(
                "-m statistic --mode random --probability {p:.10} -j {sep}"
            ));
        }
    }
    for ((ip, port), sep) in targets.iter().zip(&seps) {
        let source = host(&ip.to_string(), IpFamily::of(ip));
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

/// Renders one Service for one family.
pub(crate) fn service(view: &ServiceView, family: IpFamily, config: &IptablesConfig) -> Render {
    let mut render = Render::default();
    let name: ServiceName = view.service.service_name();
    let plan = view.plan(family);
    let (cluster_ips, external_ips, lb_ips) = (plan.cluster_ips, plan.external_ips, plan.lb_ips);
    let ranges = plan.source_ranges;
    let (itp_local, etp_local, affinity) = (plan.itp_local, plan.etp_local, plan.affinity);
    let pod_cidrs = config.cluster_cidrs(family);
    let mark_masq = format!("-j {MARK_MASQ}");

    for port in &plan.ports {
        let (proto, number, node_port) = (port.protocol, port.number, port.node_port);
        let port_name = format!("{name}:{}/{proto}", port.port.name);
        let svc_chain = hash_name("KUBE-SVC-", &port_name);
        let svl_chain = hash_name("KUBE-SVL-", &port_name);
        let ext_chain = hash_name("KUBE-EXT-", &port_name);
        let fw_chain = hash_name("KUBE-FW-", &port_name);
        let (cluster, local) = (&port.cluster, &port.local);
        let dst = |ip: &str| {
            format!(
                "-d {} -p {proto} -m {proto} --dport {number}",
                host(ip, family)
            )
        };
        let np_dst =
            |np: u16| format!("-m addrtype --dst-type LOCAL -p {proto} -m {proto} --dport {np}");
        let externals = || external_ips.iter().chain(lb_ips.iter());

        // LB source ranges: traffic the nat table did not take through
        // KUBE-FW is dropped here.
        if !ranges.is_empty() {
            for lb in lb_ips {
                render.push(
                    Table::Filter,
                    PROXY_FIREWALL,
                    format!("{} -j DROP", dst(lb)),
                );
            }
        }

        if cluster.is_empty() {
            // No usable endpoint anywhere: every address rejects.
            for ip in cluster_ips {
                render.push(Table::Filter, SERVICES, format!("{} -j REJECT", dst(ip)));
            }
            for ip in externals() {
                render.push(
                    Table::Filter,
                    EXTERNAL_SERVICES,
                    format!("{} -j REJECT", dst(ip)),
                );
            }
            if let Some(np) = node_port {
                render.push(
                    Table::Filter,
                    EXTERNAL_SERVICES,
                    format!("{} -j REJECT", np_dst(np)),
                );
            }
            continue;
        }

        // ClusterIP traffic from outside the pod network is masqueraded.
        let masq = |ips: &[String]| -> Vec<String> {
            ips.iter()
                .filter_map(|ip| {
                    if config.proxy.masquerade_all {
                        Some(format!("{} {mark_masq}", dst(ip)))
                    } else if pod_cidrs.is_empty() {
                        None
                    } else {
                        let not_pods: Vec<String> =
                            pod_cidrs.iter().map(|c| format!("! -s {c}")).collect();
                        Some(format!("{} {} {mark_masq}", not_pods.join(" "), dst(ip)))
                    }
                })
                .collect()
        };
        let svc_rules = balance(
            &mut render,
            &port_name,
            proto,
            cluster,
            affinity,
            masq(cluster_ips),
        );
        render
            .chains
            .insert((Table::Nat, svc_chain.clone()), svc_rules);
        if (itp_local || etp_local) && !local.is_empty() {
            let svl_masq = if itp_local {
                masq(cluster_ips)
            } else {
                Vec::new()
            };
            let svl_rules = balance(&mut render, &port_name, proto, local, affinity, svl_masq);
            render
                .chains
                .insert((Table::Nat, svl_chain.clone()), svl_rules);
        }

        // ClusterIPs.
        for ip in cluster_ips {
            if itp_local && local.is_empty() {
                render.push(Table::Filter, SERVICES, format!("{} -j DROP", dst(ip)));
            } else {
                let chain = if itp_local { &svl_chain } else { &svc_chain };
                render.push(Table::Nat, SERVICES, format!("{} -j {chain}", dst(ip)));
            }
        }

        // External addresses and NodePorts go through KUBE-EXT.
        let has_external = externals().next().is_some() || node_port.is_some();
        if !has_external {
            continue;
        }
        let mut ext_rules = Vec::new();
        if etp_local {
            for cidr in &pod_cidrs {
                // Pods short-circuit to every endpoint, unmasqueraded.
                ext_rules.push(format!("-s {cidr} -j {svc_chain}"));
            }
            // The node itself: masqueraded, to every endpoint.
            ext_rules.push(format!("-m addrtype --src-type LOCAL {mark_masq}"));
            ext_rules.push(format!("-m addrtype --src-type LOCAL -j {svc_chain}"));
            if !local.is_empty() {
                ext_rules.push(format!("-j {svl_chain}"));
            }
        } else {
            ext_rules.push(mark_masq.clone());
            ext_rules.push(format!("-j {svc_chain}"));
        }
        render
            .chains
            .insert((Table::Nat, ext_chain.clone()), ext_rules);
        let no_local = etp_local && local.is_empty();
        for ip in external_ips {
            render.push(Table::Nat, SERVICES, format!("{} -j {ext_chain}", dst(ip)));
            if no_local {
                render.push(
                    Table::Filter,
                    EXTERNAL_SERVICES,
                    format!("{} -j DROP", dst(ip)),
                );
            }
        }
        if !lb_ips.is_empty() {
            let lb_target = if ranges.is_empty() {
                &ext_chain
            } else {
                let rules = ranges
                    .iter()
                    .map(|r| format!("-s {r} -j {ext_chain}"))
                    .collect();
                render.chains.insert((Table::Nat, fw_chain.clone()), rules);
                &fw_chain
            };
            for ip in lb_ips {
                render.push(Table::Nat, SERVICES, format!("{} -j {lb_target}", dst(ip)));
                if no_local {
                    render.push(
                        Table::Filter,
                        EXTERNAL_SERVICES,
                        format!("{} -j DROP", dst(ip)),
                    );
                }
            }
        }
        if let Some(np) = node_port {
            render.push(
                Table::Nat,
                NODEPORTS,
                format!("-p {proto} -m {proto} --dport {np} -j {ext_chain}"),
            );
            if no_local {
                render.push(
                    Table::Filter,
                    EXTERNAL_SERVICES,
                    format!("{} -j DROP", np_dst(np)),
                );
            }
        }
    }
    // Unknown ports on a live ClusterIP: whatever the nat table left with
    // that address is refused. Behind the Service-CIDR jump when there is
    // one (see `globals`).
    let chain = if cidrs_in(&config.service_cidrs, family).is_empty() {
        SERVICES
    } else {
        CLUSTER_IPS
    };
    for ip in cluster_ips {
        render.push(
            Table::Filter,
            chain,
            format!("-d {} -j REJECT", host(ip, family)),
        );
    }
    render
}

/// The chains every family has, whatever the Services: masquerading, the
/// forward rules, and the tails of the dispatch chains (NodePort
/// addresses, the Service-CIDR drop).
pub(crate) fn globals(config: &IptablesConfig, family: IpFamily, node_ips: &[String]) -> Render {
    let mut render = Render::default();
    let m = config.masquerade_mark();
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
    for ip in node_ips {
        render.push(Table::Nat, SERVICES, format!("-d {ip} -j {NODEPORTS}"));
    }
    for cidr in cidrs_in(&config.service_cidrs, family) {
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
