//! Following the node's addresses: where the health-check ports listen
//! ([`Bind`]), and the task that moves them when an address is added or
//! removed.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::ProxyHealth;
use crate::ports::Ports;

/// Where the health-check ports listen.
#[derive(Clone, Debug)]
pub(crate) enum Bind {
    /// These addresses.
    Addresses(Vec<IpAddr>),
    /// This node's interface addresses in these prefixes
    /// (`--nodeport-addresses 192.168.0.0/24`), followed as they change.
    Prefixes(Vec<(IpAddr, u8)>),
}

impl Bind {
    pub(crate) fn resolve(&self) -> Vec<IpAddr> {
        match self {
            Bind::Addresses(addresses) => addresses.clone(),
            Bind::Prefixes(prefixes) => {
                let mut found: Vec<IpAddr> = interface_addresses()
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

/// The addresses of this network namespace's interfaces.
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(list) = nix::ifaddrs::getifaddrs() else {
        tracing::warn!("cannot list the interfaces' addresses");
        return Vec::new();
    };
    list.filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

/// Interface address changes in this network namespace: an rtnetlink
/// socket in the IPv4 and IPv6 address groups, read without parsing (any
/// message means "look again").
pub(crate) struct AddressEvents(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl AddressEvents {
    #[allow(unsafe_code)]
    pub(crate) fn open() -> std::io::Result<Self> {
        use nix::sys::socket::{
            self, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
        };
        use std::os::fd::AsRawFd;
        const RTMGRP_IPV4_IFADDR: u32 = 0x10;
        const RTMGRP_IPV6_IFADDR: u32 = 0x100;
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkRoute,
        )?;
        let groups = NetlinkAddr::new(0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR);
        socket::bind(fd.as_raw_fd(), &groups)?;
        let interest = tokio::io::Interest::READABLE;
        // SAFETY: an `OwnedFd` is an open descriptor that stays open, and
        // the same, until it is dropped, and the `AsyncFd` owns it.
        let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) };
        Ok(Self(fd.map_err(|e| e.into_parts().1)?))
    }

    /// Waits until an address was added or removed; reads every message
    /// pending, so a burst of changes wakes once.
    async fn changed(&self) -> std::io::Result<()> {
        use nix::errno::Errno;
        use nix::sys::socket::{MsgFlags, recv};
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 8192];
        loop {
            let mut ready = self.0.readable().await?;
            let mut any = false;
            loop {
                match recv(self.0.get_ref().as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(_) => any = true,
                    // Messages were lost: something changed.
                    Err(Errno::ENOBUFS) => any = true,
                    Err(Errno::EAGAIN) => {
                        ready.clear_ready();
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if any {
                return Ok(());
            }
        }
    }
}

/// Moves the listeners whenever the node's addresses change.
pub(crate) async fn follow(
    events: AddressEvents,
    bind: Arc<Bind>,
    ports: Arc<Mutex<Ports>>,
    health: ProxyHealth,
) {
    loop {
        if let Err(error) = events.changed().await {
            tracing::warn!(%error, "no longer following address changes; at each sync only");
            return;
        }
        let addresses = bind.resolve();
        let Ok(mut ports) = ports.lock() else {
            return;
        };
        if let Err(error) = ports.rebind(addresses, &health) {
            tracing::warn!(%error, "a health check port did not move; the next sync retries");
        }
    }
}
