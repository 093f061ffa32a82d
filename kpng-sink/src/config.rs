//! [`ProxyConfig`]: kube-proxy's settings, which every backend takes.

use ipnet::IpNet;
use kpng_model::IpFamily;
use kpng_model::v1::Balancing;

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
    /// listen. `None`: the node's own addresses. Loopback is never used.
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

    /// The packet mark that asks for masquerading.
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }

    /// The cluster CIDRs of one family, as text.
    pub fn cluster_cidrs_in(&self, family: IpFamily) -> Vec<String> {
        in_family(&self.cluster_cidrs, family)
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
