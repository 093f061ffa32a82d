//! Following the node's addresses: where the health-check ports listen
//! ([`Bind`]), and the task that moves them when an address is added or
//! removed. The kernel side (the rtnetlink connection, the listing) is
//! `kpng_netfilter::addresses`.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use kpng_netfilter::addresses::{AddressEvents, interface_addresses};

use crate::ProxyHealth;
use crate::ports::Ports;

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
    fn select(&self, all: Vec<IpAddr>) -> Vec<IpAddr> {
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

/// Moves the listeners whenever the node's addresses change.
pub(crate) async fn follow(
    mut events: AddressEvents,
    bind: Arc<Bind>,
    ports: Arc<Mutex<Ports>>,
    health: ProxyHealth,
) {
    loop {
        let Some(changes) = events.changed().await else {
            tracing::warn!("no longer following address changes; at each sync only");
            return;
        };
        tracing::debug!(?changes, "address changes");
        let addresses = match events.addresses().await {
            Ok(all) => bind.select(all),
            Err(error) => {
                tracing::warn!(%error, "listing the addresses over rtnetlink");
                bind.resolve()
            }
        };
        let Ok(mut ports) = ports.lock() else {
            return;
        };
        if let Err(error) = ports.rebind(addresses, &health) {
            tracing::warn!(%error, "a health check port did not move; the next sync retries");
        }
    }
}
