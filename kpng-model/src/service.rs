//! [`ServiceInfo`]: a Service as the store and the node view hold it, its
//! addresses typed once, where it enters.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Deref;

use ipnet::IpNet;

use crate::addr::IpFamily;
use crate::v1::{IpSet, Service};
use crate::{Error, Result};

/// The address lists of a Service, in the order [`ServiceInfo`] keeps
/// them, with the names its errors give them.
const FIELDS: [&str; ROLES] = [
    "clusterIPs",
    "externalIPs",
    "loadBalancerIPs",
    "loadBalancerProxyIPs",
];
const CLUSTER: usize = 0;
const EXTERNAL: usize = 1;
const LOAD_BALANCER: usize = 2;
const PROXY: usize = 3;
const ROLES: usize = 4;

/// A Service with its addresses typed: what the store, the node view and
/// the backends hold.
///
/// The wire form, JSON and YAML stay the protobuf [`Service`] (text
/// addresses, per family); a `ServiceInfo` is made where a Service enters
/// (the translation from Kubernetes, the decoding of the wire, a file),
/// and that is where an address or prefix that does not parse is an error,
/// naming the Service and the field. Afterwards nothing parses text: the
/// ClusterIPs, externalIPs, load-balancer IPs and
/// `loadBalancerSourceRanges` are read typed, per family, as slices.
///
/// It reads as the protobuf Service too (it dereferences to it: its name,
/// type, ports and policies), compares and hashes as it (the typed lists
/// are made from it), and serializes as it.
///
/// ```
/// use kpng_model::v1::{IpSet, Protocol, Service, ServicePort};
/// use kpng_model::{IpFamily, ServiceInfo};
///
/// let mut web = Service::new("default", "web")
///     .with_cluster_ips(["10.96.0.10".parse()?, "fd00::a".parse()?])
///     .with_port(ServicePort::new("http", Protocol::Tcp, 80));
/// web.load_balancer_source_ranges =
///     Some(Box::new(IpSet::parse_cidrs("ranges", ["192.168.0.0/16"])?));
/// let web = ServiceInfo::new(web)?;
///
/// let v4: std::net::IpAddr = "10.96.0.10".parse()?;
/// assert_eq!(web.cluster_ips(IpFamily::V4), [v4]);
/// assert_eq!(web.source_ranges(IpFamily::V4), ["192.168.0.0/16".parse::<kpng_model::IpNet>()?]);
/// assert!(web.external_ips(IpFamily::V6).is_empty());
/// // The protobuf fields, through `Deref`.
/// assert_eq!(web.ports[0].port, 80);
/// assert_eq!(web.service_name().to_string(), "default/web");
///
/// // Text that is not an address is refused where the Service enters.
/// let mut bad = Service::new("default", "bad");
/// bad.cluster_ips = Some(IpSet { v4: vec!["10.96.0.300".into()], v6: vec![] });
/// let error = ServiceInfo::new(bad).expect_err("not an address");
/// assert_eq!(
///     error.to_string(),
///     "service default/bad: invalid clusterIPs (IPv4) entry \"10.96.0.300\""
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ServiceInfo {
    service: Service,
    /// Every address list: per role (see `FIELDS`), its IPv4 addresses
    /// then its IPv6 ones. One allocation, none when there is no address.
    addrs: Box<[IpAddr]>,
    /// Where each list ends in `addrs` (role × 2 + family).
    ends: [u32; 2 * ROLES],
    /// `loadBalancerSourceRanges`: the IPv4 prefixes, then the IPv6 ones.
    ranges: Box<[IpNet]>,
    /// How many of `ranges` are IPv4.
    ranges_v4: u32,
}

/// Typed addresses for [`ServiceInfo::with_addresses`], in any order and
/// with repeats: the Service keeps them per family, sorted, without
/// repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    /// The ClusterIPs.
    pub cluster_ips: Vec<IpAddr>,
    /// The externalIPs.
    pub external_ips: Vec<IpAddr>,
    /// The load-balancer ingress IPs to program (`ipMode` VIP or unset).
    pub load_balancer_ips: Vec<IpAddr>,
    /// The load-balancer ingress IPs with `ipMode: Proxy` (not
    /// programmed).
    pub load_balancer_proxy_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges` (host bits are cleared).
    pub source_ranges: Vec<IpNet>,
}

fn family_index(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => 0,
        IpFamily::V6 => 1,
    }
}

fn family_name(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "IPv4",
        IpFamily::V6 => "IPv6",
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn text(set: &IpSet, family: IpFamily) -> &[String] {
    set.family(family)
}

impl ServiceInfo {
    /// Types the addresses of `service`: its ClusterIPs, externalIPs,
    /// load-balancer IPs (both kinds) and `loadBalancerSourceRanges`
    /// (host bits cleared), in the order listed.
    ///
    /// # Errors
    /// [`Error::InvalidServiceAddress`], naming the Service, the field and
    /// the entry, for an entry that is not an address (a prefix for
    /// source ranges) or is listed under the other family.
    pub fn new(service: Service) -> Result<Self> {
        let sets = [
            service.cluster_ips.as_ref(),
            service.external_ips.as_deref(),
            service.load_balancer_ips.as_deref(),
            service.load_balancer_proxy_ips.as_deref(),
        ];
        let total = sets.iter().flatten().map(|s| s.v4.len() + s.v6.len()).sum();
        let mut addrs = Vec::with_capacity(total);
        let mut ends = [0; 2 * ROLES];
        for (role, set) in sets.into_iter().enumerate() {
            for family in IpFamily::BOTH {
                for entry in set.map_or(&[][..], |s| text(s, family)) {
                    let ip = match family {
                        IpFamily::V4 => entry.parse::<Ipv4Addr>().map(IpAddr::V4),
                        IpFamily::V6 => entry.parse::<Ipv6Addr>().map(IpAddr::V6),
                    };
                    addrs.push(ip.map_err(|_| invalid(&service, FIELDS[role], family, entry))?);
                }
                ends[role * 2 + family_index(family)] = count(addrs.len());
            }
        }
        let mut ranges = Vec::new();
        let mut ranges_v4 = 0;
        if let Some(set) = service.load_balancer_source_ranges.as_deref() {
            ranges.reserve_exact(set.v4.len() + set.v6.len());
            for family in IpFamily::BOTH {
                for entry in text(set, family) {
                    let bad = || invalid(&service, "loadBalancerSourceRanges", family, entry);
                    let prefix = crate::addr::canonical_cidr("", entry).map_err(|_| bad())?;
                    if IpFamily::of(&prefix.network()) != family {
                        return Err(bad());
                    }
                    ranges.push(prefix);
                }
                if family == IpFamily::V4 {
                    ranges_v4 = count(ranges.len());
                }
            }
        }
        Ok(Self {
            service,
            addrs: addrs.into_boxed_slice(),
            ends,
            ranges: ranges.into_boxed_slice(),
            ranges_v4,
        })
    }

    /// `service` with `addresses`: typed as given (sorted, without
    /// repeats), and its text fields set from them, in canonical form (as
    /// [`IpSet::from_addrs`] and [`IpSet::from_cidrs`] make them); the
    /// address fields `service` had are replaced. For a source that has
    /// the addresses typed already (the translation from Kubernetes), so
    /// that nothing is parsed twice.
    pub fn with_addresses(mut service: Service, addresses: Addresses) -> Self {
        let Addresses {
            cluster_ips,
            external_ips,
            load_balancer_ips,
            load_balancer_proxy_ips,
            source_ranges,
        } = addresses;
        let mut lists = [
            cluster_ips,
            external_ips,
            load_balancer_ips,
            load_balancer_proxy_ips,
        ];
        let total = lists.iter().map(Vec::len).sum();
        let mut addrs = Vec::with_capacity(total);
        let mut ends = [0; 2 * ROLES];
        let mut sets: [IpSet; ROLES] = Default::default();
        for (role, list) in lists.iter_mut().enumerate() {
            // IPv4 addresses sort before IPv6 ones.
            list.sort_unstable();
            list.dedup();
            let v4 = list.iter().take_while(|ip| ip.is_ipv4()).count();
            let canonical = |ip: &IpAddr| ip.to_string().into_boxed_str().into_string();
            let set = &mut sets[role];
            set.v4 = list.iter().take(v4).map(canonical).collect();
            set.v6 = list.iter().skip(v4).map(canonical).collect();
            addrs.extend_from_slice(list);
            ends[role * 2] = count(addrs.len() - (list.len() - v4));
            ends[role * 2 + 1] = count(addrs.len());
        }
        let [cluster, external, lb, proxy] = sets;
        let some = |set: IpSet| (!set.is_empty()).then_some(set);
        service.cluster_ips = some(cluster);
        service.external_ips = some(external).map(Box::new);
        service.load_balancer_ips = some(lb).map(Box::new);
        service.load_balancer_proxy_ips = some(proxy).map(Box::new);
        let mut ranges: Vec<IpNet> = source_ranges.into_iter().map(|p| p.trunc()).collect();
        // IPv4 prefixes sort before IPv6 ones.
        ranges.sort_unstable();
        ranges.dedup();
        ranges.shrink_to_fit();
        let ranges_v4 = ranges
            .iter()
            .take_while(|p| matches!(p, IpNet::V4(_)))
            .count();
        service.load_balancer_source_ranges = some(IpSet {
            v4: ranges[..ranges_v4]
                .iter()
                .map(ToString::to_string)
                .collect(),
            v6: ranges[ranges_v4..]
                .iter()
                .map(ToString::to_string)
                .collect(),
        })
        .map(Box::new);
        Self {
            service,
            addrs: addrs.into_boxed_slice(),
            ends,
            ranges: ranges.into_boxed_slice(),
            ranges_v4: count(ranges_v4),
        }
    }

    /// The protobuf Service (its addresses as text), as the wire carries
    /// it.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// The protobuf Service, the typed addresses dropped.
    pub fn into_service(self) -> Service {
        self.service
    }

    fn list(&self, role: usize, family: IpFamily) -> &[IpAddr] {
        let i = role * 2 + family_index(family);
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j] as usize);
        self.addrs
            .get(start..self.ends[i] as usize)
            .unwrap_or_default()
    }

    /// The ClusterIPs of `family`.
    pub fn cluster_ips(&self, family: IpFamily) -> &[IpAddr] {
        self.list(CLUSTER, family)
    }

    /// The externalIPs of `family`.
    pub fn external_ips(&self, family: IpFamily) -> &[IpAddr] {
        self.list(EXTERNAL, family)
    }

    /// The load-balancer ingress IPs of `family` to program (`ipMode` VIP
    /// or unset).
    pub fn load_balancer_ips(&self, family: IpFamily) -> &[IpAddr] {
        self.list(LOAD_BALANCER, family)
    }

    /// The load-balancer ingress IPs of `family` with `ipMode: Proxy`:
    /// not programmed (the load balancer proxies to the node itself).
    pub fn load_balancer_proxy_ips(&self, family: IpFamily) -> &[IpAddr] {
        self.list(PROXY, family)
    }

    /// The `loadBalancerSourceRanges` of `family`, host bits cleared
    /// (empty: no filtering).
    pub fn source_ranges(&self, family: IpFamily) -> &[IpNet] {
        let split = self.ranges_v4 as usize;
        let range = match family {
            IpFamily::V4 => self.ranges.get(..split),
            IpFamily::V6 => self.ranges.get(split..),
        };
        range.unwrap_or_default()
    }

    /// Every address of the Service that traffic is proxied for, of both
    /// families: its ClusterIPs, externalIPs and load-balancer IPs.
    pub fn proxied_ips(&self) -> &[IpAddr] {
        self.addrs
            .get(..self.ends[LOAD_BALANCER * 2 + 1] as usize)
            .unwrap_or_default()
    }
}

fn invalid(service: &Service, field: &str, family: IpFamily, entry: &str) -> Error {
    Error::InvalidServiceAddress {
        service: service.service_name().to_string(),
        field: format!("{field} ({})", family_name(family)),
        value: entry.to_owned(),
    }
}

impl Deref for ServiceInfo {
    type Target = Service;

    fn deref(&self) -> &Service {
        &self.service
    }
}

impl AsRef<Service> for ServiceInfo {
    fn as_ref(&self) -> &Service {
        &self.service
    }
}

impl TryFrom<Service> for ServiceInfo {
    type Error = Error;

    fn try_from(service: Service) -> Result<Self> {
        Self::new(service)
    }
}

impl From<ServiceInfo> for Service {
    fn from(info: ServiceInfo) -> Self {
        info.service
    }
}

/// Equal when the protobuf Services are: the typed lists are made from
/// them.
impl PartialEq for ServiceInfo {
    fn eq(&self, other: &Self) -> bool {
        self.service == other.service
    }
}

impl Eq for ServiceInfo {}

impl std::hash::Hash for ServiceInfo {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.service.hash(state);
    }
}

impl fmt::Debug for ServiceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.service.fmt(f)
    }
}

/// Serialized as the protobuf Service.
impl serde::Serialize for ServiceInfo {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.service.serialize(serializer)
    }
}

/// Read as the protobuf Service, then typed: an invalid address is an
/// error of the deserializer.
impl<'de> serde::Deserialize<'de> for ServiceInfo {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let service = Service::deserialize(deserializer)?;
        Self::new(service).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    fn net(text: &str) -> IpNet {
        text.parse().expect("cidr")
    }

    fn full() -> Addresses {
        Addresses {
            cluster_ips: vec![
                ip("fd00::1"),
                ip("10.96.0.2"),
                ip("10.96.0.1"),
                ip("10.96.0.2"),
            ],
            external_ips: vec![ip("192.0.2.7")],
            load_balancer_ips: vec![ip("2001:db8::5"), ip("198.51.100.1")],
            load_balancer_proxy_ips: vec![ip("203.0.113.9")],
            source_ranges: vec![net("fd00::/64"), net("192.168.1.7/24"), net("10.0.0.0/8")],
        }
    }

    #[test]
    fn typed_lists_are_per_role_and_family() {
        let info = ServiceInfo::with_addresses(Service::new("default", "lb"), full());
        let v4 = IpFamily::V4;
        let v6 = IpFamily::V6;
        assert_eq!(info.cluster_ips(v4), [ip("10.96.0.1"), ip("10.96.0.2")]);
        assert_eq!(info.cluster_ips(v6), [ip("fd00::1")]);
        assert_eq!(info.external_ips(v4), [ip("192.0.2.7")]);
        assert!(info.external_ips(v6).is_empty());
        assert_eq!(info.load_balancer_ips(v4), [ip("198.51.100.1")]);
        assert_eq!(info.load_balancer_ips(v6), [ip("2001:db8::5")]);
        assert_eq!(info.load_balancer_proxy_ips(v4), [ip("203.0.113.9")]);
        assert!(info.load_balancer_proxy_ips(v6).is_empty());
        assert_eq!(
            info.source_ranges(v4),
            [net("10.0.0.0/8"), net("192.168.1.0/24")]
        );
        assert_eq!(info.source_ranges(v6), [net("fd00::/64")]);
        assert_eq!(info.proxied_ips().len(), 6);
    }

    /// Typed from text (the wire) or from addresses (the translation),
    /// a Service is the same: the text is the canonical one either way.
    #[test]
    fn typed_from_text_is_typed_from_addresses() {
        let made = ServiceInfo::with_addresses(Service::new("default", "lb"), full());
        let a = full();
        let mut service = Service::new("default", "lb").with_cluster_ips(a.cluster_ips);
        service.external_ips = Some(Box::new(IpSet::from_addrs(a.external_ips)));
        service.load_balancer_ips = Some(Box::new(IpSet::from_addrs(a.load_balancer_ips)));
        service.load_balancer_proxy_ips =
            Some(Box::new(IpSet::from_addrs(a.load_balancer_proxy_ips)));
        service.load_balancer_source_ranges = Some(Box::new(IpSet::from_cidrs(a.source_ranges)));
        assert_eq!(made.service(), &service);
        let parsed = ServiceInfo::new(service).expect("valid");
        for family in IpFamily::BOTH {
            assert_eq!(parsed.cluster_ips(family), made.cluster_ips(family));
            assert_eq!(parsed.external_ips(family), made.external_ips(family));
            assert_eq!(
                parsed.load_balancer_ips(family),
                made.load_balancer_ips(family)
            );
            assert_eq!(
                parsed.load_balancer_proxy_ips(family),
                made.load_balancer_proxy_ips(family)
            );
            assert_eq!(parsed.source_ranges(family), made.source_ranges(family));
        }
        // No address: no field, no allocation.
        let none = ServiceInfo::with_addresses(Service::new("a", "b"), Addresses::default());
        assert_eq!(none.service(), &Service::new("a", "b"));
        assert!(none.proxied_ips().is_empty());
    }

    #[test]
    fn invalid_entries_name_the_service_and_field() {
        let refused =
            |service: Service| ServiceInfo::new(service).expect_err("invalid").to_string();
        let mut bad = Service::new("default", "web");
        bad.external_ips = Some(Box::new(IpSet {
            v4: vec!["fd00::1".into()],
            v6: vec![],
        }));
        assert_eq!(
            refused(bad),
            "service default/web: invalid externalIPs (IPv4) entry \"fd00::1\""
        );
        let mut bad = Service::new("default", "web");
        bad.load_balancer_source_ranges = Some(Box::new(IpSet {
            v4: vec!["10.0.0.0/33".into()],
            v6: vec![],
        }));
        assert_eq!(
            refused(bad),
            "service default/web: invalid loadBalancerSourceRanges (IPv4) entry \"10.0.0.0/33\""
        );
        let mut bad = Service::new("default", "web");
        bad.load_balancer_source_ranges = Some(Box::new(IpSet {
            v4: vec![],
            v6: vec!["10.0.0.0/8".into()],
        }));
        assert!(refused(bad).contains("(IPv6)"));
    }

    #[test]
    fn reads_compares_and_serializes_as_the_protobuf_service() {
        let info = ServiceInfo::with_addresses(Service::new("default", "lb"), full());
        let json = serde_json::to_string(&info).expect("serialize");
        assert_eq!(
            json,
            serde_json::to_string(info.service()).expect("serialize")
        );
        let back: ServiceInfo = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, info);
        assert_eq!(
            back.source_ranges(IpFamily::V6),
            info.source_ranges(IpFamily::V6)
        );
        let bad = json.replace("10.96.0.1", "10.96.0.300");
        assert!(serde_json::from_str::<ServiceInfo>(&bad).is_err());
        assert_eq!(info.name, "lb", "the protobuf fields read through");
    }
}
