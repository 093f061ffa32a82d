//! Which interface the routing of a network namespace sends an address
//! out of (what `ip route get ADDRESS` says), over a `NETLINK_ROUTE`
//! socket, one request per address, with no runtime.
//!
//! The eBPF backend asks it whether the endpoints its tc programs send
//! packets to are reached through the interfaces the programs are on
//! (where they masquerade), and names those that are not.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use netlink_packet_core::{NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use nix::sys::socket::{self, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::Error;

/// For each of `destinations`, the index of the interface the routing of
/// the namespace at `netns` (or the process's own) sends it out of;
/// `None` when there is no route (or the kernel says why not).
///
/// # Errors
/// [`Error::Rtnetlink`] when the socket cannot be opened or a request
/// cannot be sent.
pub fn output_interfaces(
    netns: Option<&Path>,
    destinations: &[IpAddr],
) -> Result<Vec<Option<u32>>, Error> {
    let name = netns.map(|p| p.display().to_string());
    let failed = |source: std::io::Error| Error::Rtnetlink {
        what: "cannot ask the routes",
        netns: name.clone(),
        source,
    };
    let ask = || -> std::io::Result<Vec<Option<u32>>> {
        let fd = open()?;
        destinations.iter().map(|ip| route_get(&fd, *ip)).collect()
    };
    match netns {
        None => ask().map_err(failed),
        Some(path) => crate::on_thread_in_netns(path, ask).map_err(failed),
    }
}

/// The index of each interface of `names` in the namespace at `netns`
/// (or the process's own); `None` for one that does not exist there.
///
/// # Errors
/// [`Error::Rtnetlink`] when the namespace cannot be entered.
pub fn interface_indexes(
    netns: Option<&Path>,
    names: &[String],
) -> Result<Vec<Option<u32>>, Error> {
    let look = || -> std::io::Result<Vec<Option<u32>>> {
        Ok(names
            .iter()
            .map(|n| nix::net::if_::if_nametoindex(n.as_str()).ok())
            .collect())
    };
    match netns {
        None => look(),
        Some(path) => crate::on_thread_in_netns(path, look),
    }
    .map_err(|source| Error::Rtnetlink {
        what: "cannot look the interfaces up",
        netns: netns.map(|p| p.display().to_string()),
        source,
    })
}

/// The interfaces of the namespace at `netns` (or the process's own), by
/// index; empty when they cannot be listed.
pub fn interface_names(netns: Option<&Path>) -> std::collections::HashMap<u32, String> {
    let list = || -> std::io::Result<std::collections::HashMap<u32, String>> {
        Ok(nix::net::if_::if_nameindex()
            .map(|all| {
                all.iter()
                    .map(|i| (i.index(), i.name().to_string_lossy().into_owned()))
                    .collect()
            })
            .unwrap_or_default())
    };
    match netns {
        None => list(),
        Some(path) => crate::on_thread_in_netns(path, list),
    }
    .unwrap_or_default()
}

fn open() -> std::io::Result<OwnedFd> {
    let fd = socket::socket(
        socket::AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    Ok(fd)
}

/// `ip route get IP`: the output interface of its route.
fn route_get(fd: &OwnedFd, ip: IpAddr) -> std::io::Result<Option<u32>> {
    let mut message = RouteMessage::default();
    message.header.address_family = match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    message.header.destination_prefix_length = if ip.is_ipv4() { 32 } else { 128 };
    message
        .attributes
        .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    let mut request = NetlinkMessage::from(RouteNetlinkMessage::GetRoute(message));
    request.header.flags = NLM_F_REQUEST;
    request.finalize();
    let mut bytes = vec![0u8; request.buffer_len()];
    request.serialize(&mut bytes);
    socket::send(fd.as_raw_fd(), &bytes, MsgFlags::empty())?;
    let mut buffer = vec![0u8; 16 * 1024];
    let n = socket::recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty())?;
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buffer[..n])
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(match reply.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
            route.attributes.iter().find_map(|a| match a {
                RouteAttribute::Oif(index) => Some(*index),
                _ => None,
            })
        }
        // No route (ENETUNREACH and the like).
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback goes out of `lo`, in the process's own namespace (read
    /// only: nothing is programmed).
    #[test]
    fn loopback_goes_out_of_lo() {
        let found = output_interfaces(None, &["127.0.0.1".parse().expect("ip")]).expect("ask");
        let lo = interface_indexes(None, &["lo".to_owned()]).expect("look up");
        assert_eq!(found, lo, "{found:?} {lo:?}");
    }
}
