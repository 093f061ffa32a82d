//! Element-only transactions over nf_tables netlink, with no `nft` process.
//!
//! nft 1.0.6 reads every set element of the ruleset back from the kernel
//! before any command but a plain `add element`: at 100k endpoints that is
//! about 17 ms per transaction, whatever the change. Most updates (an
//! endpoint added, removed or moved) change map elements only, so such
//! updates are sent here as one netlink batch through `kpng-netfilter`:
//! atomic like an `nft -f` transaction (the kernel commits all of it or
//! none), and O(size of the change).
//!
//! Anything else (chains, rules, sets, interval sets) still goes through
//! `nft` (issue #15 moves it to `kpng-netfilter` too).

use std::net::IpAddr;
use std::path::Path;

use kpng_model::IpFamily;
use kpng_netfilter::nft::{self, Element, Family, Table, Transaction};

use crate::render::{
    CLUSTER_IPS, Elem, FIREWALL_IPS, HAIRPIN, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, Pick,
    SERVICE_IPS, SERVICE_NODEPORTS,
};

/// The largest batch sent here; bigger deltas go through `nft`, which
/// sizes its socket buffers for them.
pub(crate) const MAX_BATCH: usize = 128 * 1024;

/// One part of an element key or value, as the kernel lays it out: each
/// part of a concatenation fills whole 32-bit registers.
#[derive(Clone, Copy, Debug)]
enum Part {
    /// `ipv4_addr` or `ipv6_addr`, network order.
    Addr,
    /// `inet_proto`: one byte, padded to four.
    Proto,
    /// `inet_service`: two bytes in network order, padded to four.
    Port,
    /// A `numgen` value: 32 bits in host order.
    Index,
}

/// What a map maps to.
#[derive(Clone, Copy, Debug)]
enum Data {
    /// A set: nothing.
    None,
    /// `goto`/`jump` a chain.
    Verdict,
    /// A NAT target: address and port.
    Target,
}

/// The layout of a map's elements, or `None` for maps this path does not
/// write (interval sets, affinity sets).
fn schema(map: &str) -> Option<(&'static [Part], Data)> {
    use Part::{Addr, Index, Port, Proto};
    const VIP: &[Part] = &[Addr, Proto, Port];
    const NODE_PORT: &[Part] = &[Proto, Port];
    Some(match map {
        SERVICE_IPS | NO_ENDPOINT_SERVICES | FIREWALL_IPS => (VIP, Data::Verdict),
        SERVICE_NODEPORTS | NO_ENDPOINT_NODEPORTS => (NODE_PORT, Data::Verdict),
        CLUSTER_IPS => (&[Addr], Data::None),
        HAIRPIN => (&[Addr, Addr], Data::None),
        m if m == Pick::Vip { local: false }.map() || m == Pick::Vip { local: true }.map() => {
            (&[Addr, Proto, Port, Index], Data::Target)
        }
        m if m == Pick::NodePort { local: false }.map()
            || m == Pick::NodePort { local: true }.map() =>
        {
            (&[Proto, Port, Index], Data::Target)
        }
        _ => return None,
    })
}

/// Whether this path can write elements of `map`.
pub(crate) fn supports(map: &str) -> bool {
    schema(map).is_some()
}

/// An element this path cannot encode: a bug in the renderer, reported
/// instead of sending something else than the script says.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode element {element:?} of map {map}: {why}")]
pub(crate) struct EncodeError {
    map: String,
    element: String,
    why: &'static str,
}

fn parts(
    family: IpFamily,
    layout: &[Part],
    text: &str,
    out: &mut Vec<u8>,
) -> Result<(), &'static str> {
    let mut words = text.split(" . ");
    for part in layout {
        let word = words.next().ok_or("too few parts")?.trim();
        match part {
            Part::Addr => match word.parse::<IpAddr>().map_err(|_| "bad address")? {
                IpAddr::V4(ip) if family == IpFamily::V4 => out.extend_from_slice(&ip.octets()),
                IpAddr::V6(ip) if family == IpFamily::V6 => out.extend_from_slice(&ip.octets()),
                _ => return Err("address of the other family"),
            },
            Part::Proto => {
                let number = match word {
                    "tcp" => 6,
                    "udp" => 17,
                    "sctp" => 132,
                    other => other.parse::<u8>().map_err(|_| "bad protocol")?,
                };
                out.extend_from_slice(&[number, 0, 0, 0]);
            }
            Part::Port => {
                let port = word.parse::<u16>().map_err(|_| "bad port")?;
                out.extend_from_slice(&port.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
            }
            Part::Index => {
                let index = word.parse::<u32>().map_err(|_| "bad index")?;
                out.extend_from_slice(&index.to_ne_bytes());
            }
        }
    }
    if words.next().is_some() {
        return Err("too many parts");
    }
    Ok(())
}

/// Whether elements are added or deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    /// `add element`.
    Add,
    /// `delete element`.
    Delete,
}

/// One nf_tables batch of element changes, possibly across both families.
pub(crate) struct Batch {
    tx: Transaction,
    /// About how many bytes the batch takes on the wire.
    bytes: usize,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Self {
            tx: Transaction::new(),
            bytes: 0,
        }
    }

    /// Adds or deletes `elements` of `map` in `table` of `family`.
    pub(crate) fn elements(
        &mut self,
        family: IpFamily,
        table: &str,
        map: &str,
        verb: Verb,
        elements: &[&Elem],
    ) -> Result<(), EncodeError> {
        let (layout, data) = schema(map).ok_or_else(|| EncodeError {
            map: map.to_owned(),
            element: String::new(),
            why: "no netlink layout for this map",
        })?;
        let mut encoded = Vec::with_capacity(elements.len());
        for element in elements {
            let bad = |why| EncodeError {
                map: map.to_owned(),
                element: element.to_string(),
                why,
            };
            let (key_text, data_text) = match element.split_once(" : ") {
                Some((k, d)) => (k, Some(d)),
                None => (&***element, None),
            };
            let mut key = Vec::with_capacity(40);
            parts(family, layout, key_text, &mut key).map_err(bad)?;
            let value = match (data, data_text) {
                (Data::None, None) => None,
                (Data::Verdict, Some(text)) => {
                    Some(nft::Data::Verdict(match text.split_once(' ') {
                        Some(("goto", chain)) => nft::Verdict::Goto(chain.to_owned()),
                        Some(("jump", chain)) => nft::Verdict::Jump(chain.to_owned()),
                        _ => return Err(bad("bad verdict")),
                    }))
                }
                (Data::Target, Some(text)) => {
                    let mut value = Vec::with_capacity(20);
                    parts(family, &[Part::Addr, Part::Port], text, &mut value).map_err(bad)?;
                    Some(nft::Data::Value(value))
                }
                _ => return Err(bad("value does not fit the map")),
            };
            // Key, data and their attribute headers.
            self.bytes += 48 + key.len() + data_text.map_or(0, str::len);
            encoded.push(match value {
                Some(value) => Element::map(key, value),
                None => Element::key(key),
            });
        }
        let table = Table::new(
            match family {
                IpFamily::V4 => Family::Ip,
                IpFamily::V6 => Family::Ip6,
            },
            table,
        );
        match verb {
            Verb::Add => self.tx.add_elements(&table, map, encoded),
            // A delete names the key only.
            Verb::Delete => self.tx.delete_elements(&table, map, encoded),
        };
        Ok(())
    }

    /// About how many bytes the batch takes on the wire.
    pub(crate) fn len(&self) -> usize {
        self.bytes
    }

    /// Whether the batch changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }
}

/// A netlink socket kept open across transactions (closing one costs the
/// kernel ~15 ms, ten times a small transaction). After any failure the
/// backend drops it and the next transaction opens a fresh one.
pub(crate) struct Socket(nft::Socket);

impl Socket {
    /// Opens a socket in `netns`, or in the process's own namespace.
    pub(crate) fn open(netns: Option<&Path>) -> Result<Self, kpng_netfilter::Error> {
        nft::Socket::open(netns).map(Self)
    }

    /// Applies `batch`: all of it, or nothing.
    pub(crate) fn send(&mut self, batch: Batch) -> Result<(), kpng_netfilter::Error> {
        self.0.apply(&batch.tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elem(text: &str) -> Elem {
        text.into()
    }

    #[test]
    fn keys_fill_whole_registers() {
        let mut key = Vec::new();
        parts(
            IpFamily::V4,
            &[Part::Addr, Part::Proto, Part::Port, Part::Index],
            "10.96.0.1 . tcp . 443 . 2",
            &mut key,
        )
        .unwrap();
        let mut want = vec![10, 96, 0, 1, 6, 0, 0, 0, 0x01, 0xbb, 0, 0];
        want.extend_from_slice(&2u32.to_ne_bytes());
        assert_eq!(key, want);

        let mut key = Vec::new();
        parts(
            IpFamily::V6,
            &[Part::Addr, Part::Port],
            "fd00::1 . 8080",
            &mut key,
        )
        .unwrap();
        assert_eq!(key.len(), 20);
        assert_eq!(&key[16..], &[0x1f, 0x90, 0, 0]);
    }

    #[test]
    fn bad_elements_are_named() {
        let mut batch = Batch::new();
        let e = elem("10.96.0.1 . tcp . 99999 : goto svc-c1");
        let err = batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap_err();
        assert!(err.to_string().contains("bad port"), "{err}");
        let e = elem("fd00::1 . tcp . 80 : goto svc-c1");
        let err = batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap_err();
        assert!(err.to_string().contains("other family"), "{err}");
        assert!(!supports("cluster-cidrs"));
    }

    #[test]
    fn a_batch_holds_the_elements() {
        let mut batch = Batch::new();
        assert!(batch.is_empty());
        let e = elem("10.96.0.1 . tcp . 80 : goto svc-c1");
        batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap();
        assert!(!batch.is_empty());
        assert!(batch.len() > 12 && batch.len() < 200, "{}", batch.len());
    }
}
