//! Nudges: how the client of a TCP flow whose endpoint left learns that
//! its connection is over.
//!
//! Deleting the flow's conntrack entry is not enough: an idle client
//! sends nothing, and waits on a dead connection until its own timeout.
//! A nudge is a bare ACK sent to the client as from the address it
//! connected to (the flow's original destination), with a sequence
//! number outside its window. The client's TCP answers any such segment
//! with an ACK of its own (RFC 793, "If an incoming segment is not
//! acceptable, an acknowledgment should be sent in reply"): a packet of
//! its flow, which, its entry gone, conntrack takes as a new flow and the
//! Service rules translate to a live endpoint, whose TCP resets it, or to
//! a Service with no endpoint, whose rules reset it. The reset carries
//! the client's own acknowledgment as its sequence number, exactly what
//! the client expects: the connection fails at once (`ECONNRESET`).
//!
//! Two nudges per flow, 2^31 apart, so that one is outside any window.
//! They carry the mark [`NUDGE_MARK`], which the netfilter backends leave
//! untracked: tracked, a nudge would make a flow whose reply direction
//! the client's answer matches, and that answer would not be translated.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::Error;
use crate::conntrack::{Flow, NUDGE_MARK, TCP};

/// The first nudge's sequence number; the second's is 2^31 further.
const SEQ: u32 = 0x6b70_6e67;

/// Sends the nudges of `flows` (their TCP ones) from the network
/// namespace at `netns` (the process's own when `None`); returns how many
/// packets were sent.
///
/// # Errors
/// [`Error::Io`] when a raw socket cannot be opened (root, or
/// `CAP_NET_RAW`, is needed) or the namespace entered. A packet that
/// cannot be sent is skipped (its flow's client waits, as without).
pub fn nudge(netns: Option<&Path>, flows: &[Flow]) -> Result<usize, Error> {
    let flows: Vec<&Flow> = flows.iter().filter(|f| f.protocol == TCP).collect();
    if flows.is_empty() {
        return Ok(0);
    }
    let send = || -> std::io::Result<usize> {
        let mut sockets: [Option<OwnedFd>; 2] = [None, None];
        let mut sent = 0;
        for flow in flows {
            let v6 = flow.original.src.is_ipv6();
            let socket = match &mut sockets[usize::from(v6)] {
                Some(socket) => socket,
                slot => slot.insert(raw_socket(v6)?),
            };
            for seq in [SEQ, SEQ.wrapping_add(1 << 31)] {
                let packet = packet(flow, seq);
                match send_to(socket, &packet, flow.original.src) {
                    Ok(()) => sent += 1,
                    Err(error) => tracing::debug!(%error, ?flow, "a nudge not sent"),
                }
            }
        }
        Ok(sent)
    };
    let failed = |source: std::io::Error| Error::Io {
        what: "send the nudges of ended TCP flows",
        source,
    };
    match netns {
        None => send().map_err(failed),
        Some(path) => crate::on_thread_in_netns(path, send).map_err(failed),
    }
}

/// A raw socket of the family that writes its own IP header, its packets
/// marked [`NUDGE_MARK`].
fn raw_socket(v6: bool) -> std::io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: socket(2) takes plain integers and returns a new descriptor
    // or -1.
    #[allow(unsafe_code)]
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    #[allow(unsafe_code)]
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let mark: u32 = NUDGE_MARK;
    // SAFETY: setsockopt(2) reads `size_of::<u32>()` bytes of `mark`,
    // which outlives the call.
    #[allow(unsafe_code)]
    let ret = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            std::ptr::from_ref(&mark).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(socket)
}

fn send_to(socket: &OwnedFd, packet: &[u8], to: IpAddr) -> std::io::Result<()> {
    // SAFETY: an all-zero `sockaddr_storage` is a valid value of it.
    #[allow(unsafe_code)]
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        IpAddr::V4(ip) => {
            let v4 = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sockaddr_storage` is larger than and aligned for
            // any socket address, `sockaddr_in` among them.
            #[allow(unsafe_code)]
            unsafe {
                std::ptr::from_mut(&mut addr)
                    .cast::<libc::sockaddr_in>()
                    .write(v4);
            }
            std::mem::size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(ip) => {
            let v6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: as above, for `sockaddr_in6`.
            #[allow(unsafe_code)]
            unsafe {
                std::ptr::from_mut(&mut addr)
                    .cast::<libc::sockaddr_in6>()
                    .write(v6);
            }
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: sendto(2) reads `packet` and the first `len` bytes of
    // `addr` (the address written above); both outlive the call.
    #[allow(unsafe_code)]
    let ret = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            std::ptr::from_ref(&addr).cast(),
            len as libc::socklen_t,
        )
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The nudge of `flow` with sequence number `seq`: an IP header (the
/// kernel fills in an IPv4 header's checksum) and a bare TCP ACK from the
/// flow's original destination to its source.
pub(crate) fn packet(flow: &Flow, seq: u32) -> Vec<u8> {
    let (from, to) = (flow.original.dst, flow.original.src);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&flow.original.dst_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&flow.original.src_port.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    // (Acknowledgment number 0; the client answers whatever it is.)
    tcp[12] = 5 << 4; // 20-byte header
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&1024u16.to_be_bytes()); // window
    let mut out = Vec::with_capacity(60);
    let mut pseudo = Vec::with_capacity(40);
    match (from, to) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, TCP, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
            let header = checksum(&[&out]);
            out[10..12].copy_from_slice(&header.to_be_bytes());
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, TCP, 0, 20]);
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            out.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, TCP, 64]);
            out.extend_from_slice(&v6(from));
            out.extend_from_slice(&v6(to));
            pseudo.extend_from_slice(&v6(from));
            pseudo.extend_from_slice(&v6(to));
            pseudo.extend_from_slice(&[0, 0, 0, 20, 0, 0, 0, TCP]);
        }
    }
    let sum = checksum(&[&pseudo, &tcp]);
    tcp[16..18].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&tcp);
    out
}

/// The Internet checksum of the concatenated `parts` (each of even
/// length).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        for pair in part.chunks(2) {
            let word = u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
            sum += u32::from(word);
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::Tuple;

    fn flow(client: &str, service: &str) -> Flow {
        let ip = |t: &str| t.parse().expect("ip");
        Flow {
            protocol: TCP,
            original: Tuple {
                src: ip(client),
                dst: ip(service),
                src_port: 40000,
                dst_port: 80,
            },
            reply: Tuple {
                src: ip(client),
                dst: ip(client),
                src_port: 8080,
                dst_port: 40000,
            },
            zone: 0,
        }
    }

    /// A nudge goes from the Service address and port to the client's,
    /// ACK alone, and its checksums verify (summing a header with its
    /// checksum gives 0).
    #[test]
    fn a_nudge_is_an_ack_from_the_service_to_the_client() {
        let p = packet(&flow("10.244.1.99", "10.96.0.10"), 7);
        assert_eq!(p.len(), 40);
        assert_eq!(&p[12..16], &[10, 96, 0, 10]);
        assert_eq!(&p[16..20], &[10, 244, 1, 99]);
        assert_eq!(checksum(&[&p[..20]]), 0);
        let tcp = &p[20..];
        assert_eq!(u16::from_be_bytes([tcp[0], tcp[1]]), 80);
        assert_eq!(u16::from_be_bytes([tcp[2], tcp[3]]), 40000);
        assert_eq!(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]), 7);
        assert_eq!(tcp[13], 0x10);
        let pseudo = [&p[12..20], &[0, TCP, 0, 20][..]].concat();
        assert_eq!(checksum(&[&pseudo, tcp]), 0);

        let p = packet(&flow("fd00:244:1::99", "fd00:96::10"), 7);
        assert_eq!(p.len(), 60);
        assert_eq!(p[0] >> 4, 6);
        let pseudo = [&p[8..40], &[0, 0, 0, 20, 0, 0, 0, TCP][..]].concat();
        assert_eq!(checksum(&[&pseudo, &p[40..]]), 0);
    }
}
