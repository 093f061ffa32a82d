//! [`ProxyConfig`]: kube-proxy's settings, which every backend takes.

use ipnet::IpNet;
use kpng_model::IpFamily;
use kpng_model::v1::{Balancing, LoadBalancerMode, Protocol};

/// The settings every kpng-rs backend takes, named after kube-proxy's
/// flags: the cluster's networks and masquerading. A backend's own config
/// holds one beside its own settings (a table name, a mode).
///
/// ```
/// use kpng_sink::{IpNet, ProxyConfig};
///
/// let net = |s: &str| s.parse::<IpNet>().expect("a CIDR");
/// let proxy = ProxyConfig::default()
///     .cluster_cidrs([net("10.244.0.0/16")])
///     .service_cidrs([net("10.96.0.10/12")])
///     .masquerade_all(true);
/// assert_eq!(proxy.service_cidrs, [net("10.96.0.0/12")], "host bits cleared");
/// assert_eq!(proxy.masquerade_mark(), 0x4000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// `--cluster-cidr`: the pod CIDRs, to tell pod traffic apart.
    pub cluster_cidrs: Vec<IpNet>,
    /// `--service-cidr`: unallocated addresses in it are dropped, as in
    /// the cluster's ServiceCIDRs (which the node view carries); for
    /// clusters without ServiceCIDR objects.
    pub service_cidrs: Vec<IpNet>,
    /// `--nodeport-addresses`: where NodePorts (and health-check ports)
    /// listen. `None`: the node's own addresses. The netfilter backends
    /// leave loopback out ([`ProxyConfig::nodeport_prefixes`]); the eBPF
    /// backend serves the node's own sockets on `127.0.0.1` and `::1`
    /// when they are inside (its `localhost_nodeports`).
    pub nodeport_addresses: Option<Vec<IpNet>>,
    /// `--masquerade-all`: masquerade all Service traffic.
    pub masquerade_all: bool,
    /// `--masquerade-bit` (default 14): the packet mark bit that asks for
    /// masquerading.
    pub masquerade_bit: u8,
    /// `--balancing`: how a Service without a `kpng.io/balancing`
    /// annotation picks an endpoint (default: random, as kube-proxy).
    pub balancing: Balancing,
    /// `--end-tcp-connections`: end the established TCP connections
    /// whose endpoint left its Service (gone from the node view; one that
    /// serves while terminating drains), in the sync that removes it.
    /// Off by default, as kube-proxy leaves them to time out. The
    /// netfilter backends ready their rules for it (untracked nudges, a
    /// reset for a Service left with no endpoint), and
    /// `kpng_conntrack::ConntrackCleaner` ends the flows.
    pub end_tcp_connections: bool,
    /// `--load-balancer-mode`: how a Service without a
    /// `kpng.io/load-balancer-mode` annotation forwards flows from outside
    /// to an endpoint on another node (default: SNAT, as kube-proxy). Only
    /// a backend that can return directly (the eBPF tc programs) reads it:
    /// see [`ProxyConfig::direct_return`].
    pub load_balancer_mode: LoadBalancerMode,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            nodeport_addresses: None,
            masquerade_all: false,
            masquerade_bit: 14,
            balancing: Balancing::Random,
            end_tcp_connections: false,
            load_balancer_mode: LoadBalancerMode::Snat,
        }
    }
}

impl ProxyConfig {
    /// Sets `--balancing` (unspecified is random).
    #[must_use]
    pub fn balancing(mut self, balancing: Balancing) -> Self {
        self.balancing = match balancing {
            Balancing::Unspecified => Balancing::Random,
            other => other,
        };
        self
    }

    /// How `service` picks its endpoints: its own choice, or this
    /// default (never [`Balancing::Unspecified`]).
    pub fn balancing_of(&self, service: &kpng_model::v1::Service) -> Balancing {
        match service.balancing() {
            Balancing::Unspecified => match self.balancing {
                Balancing::Unspecified => Balancing::Random,
                other => other,
            },
            own => own,
        }
    }

    /// Sets `--load-balancer-mode` (unspecified is SNAT).
    #[must_use]
    pub fn load_balancer_mode(mut self, mode: LoadBalancerMode) -> Self {
        self.load_balancer_mode = match mode {
            LoadBalancerMode::Unspecified => LoadBalancerMode::Snat,
            other => other,
        };
        self
    }

    /// How `service` forwards flows from outside to other nodes'
    /// endpoints: its own choice, or this default (never
    /// [`LoadBalancerMode::Unspecified`]).
    pub fn load_balancer_mode_of(&self, service: &kpng_model::v1::Service) -> LoadBalancerMode {
        match service.load_balancer_mode() {
            LoadBalancerMode::Unspecified => match self.load_balancer_mode {
                LoadBalancerMode::Unspecified => LoadBalancerMode::Snat,
                other => other,
            },
            own => own,
        }
    }

    /// Whether a flow of `protocol` from outside to `service` (a NodePort,
    /// LB IP or external IP, under `externalTrafficPolicy: Cluster`) is
    /// returned directly when its endpoint is on another node: the client's
    /// address kept, the endpoint's node replying to the client straight.
    /// DSR: every protocol; hybrid: TCP and SCTP, whose flows carry the
    /// Service's address on their first packet only (a UDP flow carries it
    /// on each datagram, which costs its MTU); SNAT: none. A ClusterIP
    /// reached from outside is masqueraded whatever the mode, as
    /// kube-proxy's rules do.
    ///
    /// ```
    /// use kpng_model::v1::{LoadBalancerMode, Protocol, Service};
    /// use kpng_sink::ProxyConfig;
    ///
    /// let proxy = ProxyConfig::default().load_balancer_mode(LoadBalancerMode::Hybrid);
    /// let svc = Service::new("default", "web");
    /// assert!(proxy.direct_return(&svc, Protocol::Tcp));
    /// assert!(!proxy.direct_return(&svc, Protocol::Udp));
    /// ```
    pub fn direct_return(&self, service: &kpng_model::v1::Service, protocol: Protocol) -> bool {
        match self.load_balancer_mode_of(service) {
            LoadBalancerMode::Dsr => true,
            LoadBalancerMode::Hybrid => protocol != Protocol::Udp,
            LoadBalancerMode::Snat | LoadBalancerMode::Unspecified => false,
        }
    }

    /// Sets `--cluster-cidr` (host bits cleared).
    #[must_use]
    pub fn cluster_cidrs(mut self, cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        self.cluster_cidrs = networks(cidrs);
        self
    }

    /// Sets `--service-cidr` (host bits cleared).
    #[must_use]
    pub fn service_cidrs(mut self, cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        self.service_cidrs = networks(cidrs);
        self
    }

    /// Sets `--nodeport-addresses` (host bits cleared).
    #[must_use]
    pub fn nodeport_addresses(mut self, cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        self.nodeport_addresses = Some(networks(cidrs));
        self
    }

    /// Sets `--end-tcp-connections`.
    #[must_use]
    pub fn end_tcp_connections(mut self, on: bool) -> Self {
        self.end_tcp_connections = on;
        self
    }

    /// Sets `--masquerade-all`.
    #[must_use]
    pub fn masquerade_all(mut self, on: bool) -> Self {
        self.masquerade_all = on;
        self
    }

    /// Sets `--masquerade-bit` (0 to 31).
    #[must_use]
    pub fn masquerade_bit(mut self, bit: u8) -> Self {
        self.masquerade_bit = bit;
        self
    }

    /// `--nodeport-addresses` as the netfilter backends listen on it:
    /// loopback (`127.0.0.0/8`, `::1`) left out, as kube-proxy's nftables
    /// mode leaves it out (its iptables mode too, without
    /// `route_localnet`): a prefix inside loopback goes, and one around it
    /// is split into the prefixes that cover the rest. A packet the node
    /// sends to loopback and the rules translated would keep its loopback
    /// source, which the kernel does not route: it would be lost.
    /// `None`: the node's own addresses.
    ///
    /// ```
    /// use kpng_sink::{IpNet, ProxyConfig};
    ///
    /// let net = |s: &str| s.parse::<IpNet>().expect("a CIDR");
    /// let proxy = ProxyConfig::default()
    ///     .nodeport_addresses([net("127.0.0.0/8"), net("10.0.0.0/8"), net("0.0.0.0/1")]);
    /// assert_eq!(
    ///     proxy.nodeport_prefixes(),
    ///     Some(
    ///         ["10.0.0.0/8", "0.0.0.0/2", "64.0.0.0/3", "96.0.0.0/4", "112.0.0.0/5", "120.0.0.0/6", "124.0.0.0/7", "126.0.0.0/8"]
    ///             .map(net)
    ///             .to_vec()
    ///     )
    /// );
    /// ```
    pub fn nodeport_prefixes(&self) -> Option<Vec<IpNet>> {
        self.nodeport_addresses
            .as_ref()
            .map(|prefixes| without_loopback(prefixes))
    }

    /// The prefixes of `--nodeport-addresses` that hold a loopback
    /// address (inside `127.0.0.0/8`, or around it or `::1`): NodePorts
    /// asked for on loopback, which only the eBPF backend serves.
    pub fn nodeport_loopback(&self) -> Vec<IpNet> {
        self.nodeport_addresses
            .iter()
            .flatten()
            .filter(|p| loopback().iter().any(|l| p.contains(l) || l.contains(*p)))
            .copied()
            .collect()
    }

    /// The packet mark that asks for masquerading.
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }

    /// The cluster CIDRs of one family, as text.
    pub fn cluster_cidrs_in(&self, family: IpFamily) -> Vec<String> {
        in_family(&self.cluster_cidrs, family)
    }
}

/// The loopback prefixes: `127.0.0.0/8` and `::1/128`.
fn loopback() -> [IpNet; 2] {
    [
        IpNet::from(ipnet::Ipv4Net::new_assert(
            std::net::Ipv4Addr::new(127, 0, 0, 0),
            8,
        )),
        IpNet::from(ipnet::Ipv6Net::new_assert(
            std::net::Ipv6Addr::LOCALHOST,
            128,
        )),
    ]
}

/// `prefixes` less the loopback prefixes: one inside them goes, one
/// around them is split into the prefixes that cover the rest (at each
/// length below the loopback prefix's, the sibling of its ancestor).
fn without_loopback(prefixes: &[IpNet]) -> Vec<IpNet> {
    let mut out = Vec::new();
    for prefix in prefixes {
        let prefix = prefix.trunc();
        let Some(lo) = loopback().into_iter().find(|l| {
            (l.network().is_ipv4() == prefix.network().is_ipv4())
                && (prefix.contains(l) || l.contains(&prefix))
        }) else {
            out.push(prefix);
            continue;
        };
        if lo.contains(&prefix) {
            continue;
        }
        // `prefix` holds `lo`, and is shorter.
        for len in prefix.prefix_len() + 1..=lo.prefix_len() {
            let ancestor = IpNet::new_assert(lo.network(), len).trunc();
            out.push(sibling(ancestor));
        }
    }
    out
}

/// The prefix of the same length as `net` that differs from it in its
/// last bit (its length is at least 1).
fn sibling(net: IpNet) -> IpNet {
    let len = net.prefix_len();
    match net {
        IpNet::V4(v4) => {
            let bits = u32::from(v4.network()) ^ (1u32 << (32 - u32::from(len)));
            IpNet::V4(ipnet::Ipv4Net::new_assert(bits.into(), len))
        }
        IpNet::V6(v6) => {
            let bits = u128::from(v6.network()) ^ (1u128 << (128 - u32::from(len)));
            IpNet::V6(ipnet::Ipv6Net::new_assert(bits.into(), len))
        }
    }
}

/// The networks of `cidrs`: host bits cleared.
fn networks(cidrs: impl IntoIterator<Item = IpNet>) -> Vec<IpNet> {
    cidrs.into_iter().map(|c| c.trunc()).collect()
}

/// The CIDRs of one family, as text.
fn in_family(cidrs: &[IpNet], family: IpFamily) -> Vec<String> {
    cidrs
        .iter()
        .filter(|c| IpFamily::of(&c.network()) == family)
        .map(ToString::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(bits: u32, len: u8) -> IpNet {
        IpNet::V4(ipnet::Ipv4Net::new_assert(bits.into(), len)).trunc()
    }

    fn v6(bits: u128, len: u8) -> IpNet {
        IpNet::V6(ipnet::Ipv6Net::new_assert(bits.into(), len)).trunc()
    }

    /// Near loopback, so that prefixes around, inside and beside it come
    /// up often.
    fn near_loopback() -> impl Strategy<Value = (IpNet, Vec<std::net::IpAddr>)> {
        let four = (any::<u32>(), 0u8..=32, prop::bool::ANY).prop_map(|(bits, len, near)| {
            let bits = if near {
                0x7f00_0000 | (bits & 0x00ff_ffff)
            } else {
                bits
            };
            v4(bits, len)
        });
        let six = (any::<u128>(), 0u8..=128, prop::bool::ANY).prop_map(|(bits, len, near)| {
            let bits = if near { bits & 0xff } else { bits };
            v6(bits, len)
        });
        let prefix = prop_oneof![four, six];
        (prefix, prop::collection::vec(any::<u128>(), 16)).prop_map(|(prefix, picks)| {
            // Addresses inside the prefix, loopback ones among them.
            let mut inside: Vec<std::net::IpAddr> = picks
                .into_iter()
                .map(|pick| match prefix {
                    IpNet::V4(n) => {
                        let host = (pick as u32) & !u32::from(n.netmask());
                        std::net::IpAddr::from(std::net::Ipv4Addr::from(
                            u32::from(n.network()) | host,
                        ))
                    }
                    IpNet::V6(n) => {
                        let host = pick & !u128::from(n.netmask());
                        std::net::IpAddr::from(std::net::Ipv6Addr::from(
                            u128::from(n.network()) | host,
                        ))
                    }
                })
                .collect();
            inside.extend(
                [
                    "127.0.0.1",
                    "127.255.255.255",
                    "126.255.255.255",
                    "128.0.0.0",
                    "::1",
                    "::",
                    "::2",
                ]
                .map(|a| a.parse::<std::net::IpAddr>().expect("ip"))
                .into_iter()
                .filter(|a| prefix.contains(a)),
            );
            (prefix, inside)
        })
    }

    proptest! {
        /// Of a prefix's addresses, the netfilter backends' NodePort
        /// prefixes hold exactly those that are not loopback, and no two
        /// of the prefixes overlap.
        #[test]
        fn nodeport_prefixes_hold_every_address_but_loopback((prefix, inside) in near_loopback()) {
            let proxy = ProxyConfig::default().nodeport_addresses([prefix]);
            let kept = proxy.nodeport_prefixes().expect("set");
            for ip in &inside {
                let held = kept.iter().any(|k| k.contains(ip));
                prop_assert_eq!(held, !ip.is_loopback(), "{} in {:?} of {}", ip, kept, prefix);
            }
            for (i, a) in kept.iter().enumerate() {
                for b in &kept[i + 1..] {
                    prop_assert!(!a.contains(b) && !b.contains(a), "{} and {} overlap", a, b);
                }
            }
            prop_assert_eq!(kept == vec![prefix], proxy.nodeport_loopback().is_empty());
        }
    }

    #[test]
    fn loopback_is_named_where_asked_for() {
        let net = |s: &str| s.parse::<IpNet>().expect("cidr");
        let proxy = ProxyConfig::default().nodeport_addresses(
            [
                "10.0.0.0/8",
                "127.0.0.0/8",
                "127.0.0.5/32",
                "::/0",
                "fd00::/8",
            ]
            .map(net),
        );
        assert_eq!(
            proxy.nodeport_loopback(),
            ["127.0.0.0/8", "127.0.0.5/32", "::/0"].map(net)
        );
        assert!(ProxyConfig::default().nodeport_loopback().is_empty());
        assert_eq!(ProxyConfig::default().nodeport_prefixes(), None);
        // ::/0 less ::1: 128 prefixes.
        let all6 = ProxyConfig::default().nodeport_addresses([net("::/0")]);
        assert_eq!(all6.nodeport_prefixes().expect("set").len(), 128);
    }
}
