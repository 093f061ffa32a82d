//! The interface addresses of a network namespace, and their changes, over
//! rtnetlink (the `rtnetlink` crate of the rust-netlink family, whose
//! `packet_route` re-export types the messages).
//!
//! [`AddressEvents`] joins the IPv4 and IPv6 address groups of one
//! namespace: [`changed`](AddressEvents::changed) waits until addresses
//! were added or removed and says which, and
//! [`addresses`](AddressEvents::addresses) dumps the ones there now over
//! the same connection. [`interface_addresses`] lists them without a
//! runtime, in the calling thread's namespace. kpng-health moves its
//! health-check ports with these when `--nodeport-addresses` names
//! prefixes.
//!
//! ```no_run
//! # async fn f() -> Result<(), kpng_netfilter::Error> {
//! use kpng_netfilter::addresses::AddressEvents;
//!
//! let mut events = AddressEvents::open(None)?;
//! while let Some(changes) = events.changed().await {
//!     println!("{changes:?}; now {:?}", events.addresses().await?);
//! }
//! # Ok(()) }
//! ```

use std::net::IpAddr;
use std::path::Path;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedReceiver;

use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::sys::SocketAddr;
use rtnetlink::{Handle, MulticastGroup};
use tokio::task::JoinHandle;

use crate::Error;

/// One change the kernel told of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressChange {
    /// An address was added to an interface.
    Added(IpAddr),
    /// An address was removed from an interface.
    Removed(IpAddr),
    /// Messages were lost (the socket's buffer overflowed): anything may
    /// have changed, look again.
    Lost,
}

type Messages = UnboundedReceiver<(NetlinkMessage<RouteNetlinkMessage>, SocketAddr)>;

/// Address changes in one network namespace, and its addresses now. Its
/// connection runs as a task on the tokio runtime it was opened in, and
/// stops when this is dropped.
#[derive(Debug)]
pub struct AddressEvents {
    handle: Handle,
    messages: Messages,
    connection: JoinHandle<()>,
    netns: Option<String>,
}

impl AddressEvents {
    /// Joins the address groups of the network namespace at `netns` (a
    /// path such as `/run/netns/NAME`), or of the process's own. Must be
    /// called within a tokio runtime.
    ///
    /// As with `nft::Socket::open`, the namespace switch happens on a
    /// short-lived thread; the socket stays in the namespace it was made
    /// in.
    ///
    /// # Errors
    /// [`Error::Rtnetlink`] naming the namespace, also when no tokio
    /// runtime is running.
    pub fn open(netns: Option<&Path>) -> Result<Self, Error> {
        let name = netns.map(|p| p.display().to_string());
        let failed = |source: std::io::Error| Error::Rtnetlink {
            what: "cannot join the address groups",
            netns: name.clone(),
            source,
        };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| failed(std::io::Error::other(e.to_string())))?;
        let groups = [MulticastGroup::Ipv4Ifaddr, MulticastGroup::Ipv6Ifaddr];
        let (connection, handle, messages) = match netns {
            None => rtnetlink::new_multicast_connection(&groups).map_err(failed)?,
            Some(path) => crate::on_thread_in_netns(path, || {
                // The socket registers with the runtime's reactor.
                let _runtime = runtime.enter();
                rtnetlink::new_multicast_connection(&groups)
            })
            .map_err(failed)?,
        };
        Ok(Self {
            handle,
            messages,
            connection: runtime.spawn(connection),
            netns: name,
        })
    }

    /// Waits until the kernel tells of address changes, and returns them
    /// with every other one already pending (a burst wakes once); `None`
    /// once the connection ended.
    pub async fn changed(&mut self) -> Option<Vec<AddressChange>> {
        loop {
            let mut changes = Vec::new();
            let (first, _) = self.messages.next().await?;
            changes.extend(change(first));
            while let Ok((message, _)) = self.messages.try_recv() {
                changes.extend(change(message));
            }
            if !changes.is_empty() {
                return Some(changes);
            }
        }
    }

    /// The interface addresses of the namespace now.
    ///
    /// # Errors
    /// [`Error::Rtnetlink`] when the dump fails.
    pub async fn addresses(&self) -> Result<Vec<IpAddr>, Error> {
        let mut dump = self.handle.address().get().execute();
        let mut found = Vec::new();
        while let Some(message) = dump.next().await {
            let message = message.map_err(|e| Error::Rtnetlink {
                what: "cannot list the addresses",
                netns: self.netns.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            found.extend(address(&message));
        }
        Ok(found)
    }
}

impl Drop for AddressEvents {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// What a message of the address groups says.
fn change(message: NetlinkMessage<RouteNetlinkMessage>) -> Option<AddressChange> {
    match message.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(m)) => {
            address(&m).map(AddressChange::Added)
        }
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(m)) => {
            address(&m).map(AddressChange::Removed)
        }
        NetlinkPayload::Overrun(_) => Some(AddressChange::Lost),
        _ => None,
    }
}

/// The interface's own address: `IFA_LOCAL` when present (it differs from
/// `IFA_ADDRESS`, the peer, on point-to-point links), else `IFA_ADDRESS`.
fn address(message: &AddressMessage) -> Option<IpAddr> {
    let local = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// The interface addresses of the calling thread's network namespace
/// (`getifaddrs`), with no runtime; empty, with a warning, when they
/// cannot be listed.
pub fn interface_addresses() -> Vec<IpAddr> {
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
