//! Where the health-check ports listen ([`Bind`]): given addresses, or
//! the node's addresses within prefixes (`ports` follows their changes).
//! The kernel side (the rtnetlink connection, the listing) is
//! `kpng_netfilter::addresses`.

use std::net::IpAddr;

use kpng_netfilter::addresses::interface_addresses;

/// Where the health-check ports listen.
#[derive(Clone, Debug)]
pub(crate) enum Bind {
    /// These addresses.
    Addresses(Vec<IpAddr>),
    /// This node's interface addresses in these prefixes
    /// (`--nodeport-addresses 192.168.0.0/24`), followed as they change.
    Prefixes(Vec<kpng_model::IpNet>),
}

impl Bind {
    /// The addresses to listen on now (the interfaces' looked up here).
    pub(crate) fn resolve(&self) -> Vec<IpAddr> {
        match self {
            Bind::Addresses(addresses) => addresses.clone(),
            Bind::Prefixes(_) => self.select(interface_addresses()),
        }
    }

    /// The addresses to listen on, of the interfaces' `all`: those within
    /// the prefixes (never loopback), sorted, once each.
    pub(crate) fn select(&self, all: Vec<IpAddr>) -> Vec<IpAddr> {
        match self {
            Bind::Addresses(addresses) => addresses.clone(),
            Bind::Prefixes(prefixes) => {
                let mut found: Vec<IpAddr> = all
                    .into_iter()
                    .filter(|ip| !ip.is_loopback())
                    .filter(|ip| {
                        prefixes
                            .iter()
                            .any(|p| kpng_model::addr::cidr_contains(*p, *ip))
                    })
                    .collect();
                found.sort();
                found.dedup();
                found
            }
        }
    }
}
