//! IP families, canonical address text, and [`IpSet`] helpers.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::v1::IpSet;
use crate::{Error, Result};

/// An IP family. Each family is programmed on its own: a Service with no
/// address in a family has no rules in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first.
    pub const BOTH: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of an address.
    pub fn of(addr: &IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }
}

/// Parses one address and returns it in canonical text form, naming `field`
/// in the error.
pub fn canonical_ip(field: &str, text: &str) -> Result<IpAddr> {
    text.trim()
        .parse::<IpAddr>()
        .map_err(|_| Error::InvalidAddress {
            field: field.to_owned(),
            value: text.to_owned(),
        })
}

/// Parses a comma-separated CIDR list as kube-proxy's flags take it
/// (`10.244.0.0/16,fd00::/64`); blanks are skipped.
///
/// # Errors
/// [`Error::InvalidAddress`] naming `field` and the bad entry.
pub fn parse_cidr_list(field: &str, text: &str) -> Result<Vec<IpNet>> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| canonical_cidr(field, t))
        .collect()
}

/// [`parse_cidr_list`] for a command-line flag: the error is the bad
/// entry itself, for the caller to report with the flag's name.
///
/// # Errors
/// The first entry that is not a CIDR or an address.
pub fn parse_cidr_flag(field: &str, text: &str) -> std::result::Result<Vec<IpNet>, String> {
    parse_cidr_list(field, text).map_err(|e| match e {
        Error::InvalidAddress { value, .. } => value,
        other => other.to_string(),
    })
}

/// The CIDRs of `list` in `family`, as text (`10.244.0.0/16`).
pub fn cidrs_in(list: &[IpNet], family: IpFamily) -> Vec<String> {
    list.iter()
        .filter(|net| IpFamily::of(&net.network()) == family)
        .map(ToString::to_string)
        .collect()
}

/// Parses a CIDR prefix (`10.0.0.0/8`, `fd00::/64`), or a bare address taken
/// as a host prefix, and returns it as an [`IpNet`]. Host bits are
/// cleared, as Go's `net.ParseCIDR` does.
pub fn canonical_cidr(field: &str, text: &str) -> Result<IpNet> {
    let bad = || Error::InvalidAddress {
        field: field.to_owned(),
        value: text.to_owned(),
    };
    let text = text.trim();
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => (addr, Some(len)),
        None => (text, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let max = match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    let len = match len {
        Some(len) => len.parse::<u8>().map_err(|_| bad())?,
        None => max,
    };
    if len > max {
        return Err(bad());
    }
    let network = match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(u32::from(32 - len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(u32::from(128 - len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    };
    IpNet::new(network, len).map_err(|_| bad())
}

impl IpSet {
    /// Builds a set from addresses: split by family, sorted, de-duplicated,
    /// in canonical text form.
    pub fn from_addrs(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut all: Vec<IpAddr> = addrs.into_iter().collect();
        all.sort();
        all.dedup();
        // Kept for as long as the Service: exact sizes, no growth slack
        // (at 10k Services that is ~0.7 MB).
        let text = |addr: &IpAddr| addr.to_string().into_boxed_str().into_string();
        let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = all.into_iter().partition(IpAddr::is_ipv4);
        IpSet {
            v4: v4.iter().map(text).collect(),
            v6: v6.iter().map(text).collect(),
        }
    }

    /// A set of one address.
    pub fn single(addr: IpAddr) -> Self {
        let text = vec![addr.to_string()];
        match addr {
            IpAddr::V4(_) => IpSet {
                v4: text,
                v6: Vec::new(),
            },
            IpAddr::V6(_) => IpSet {
                v4: Vec::new(),
                v6: text,
            },
        }
    }

    /// Parses addresses given as text, naming `field` in the error.
    pub fn parse_addrs<'a>(field: &str, texts: impl IntoIterator<Item = &'a str>) -> Result<Self> {
        let addrs = texts
            .into_iter()
            .map(|t| canonical_ip(field, t))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_addrs(addrs))
    }

    /// Parses CIDR prefixes given as text, naming `field` in the error.
    pub fn parse_cidrs<'a>(field: &str, texts: impl IntoIterator<Item = &'a str>) -> Result<Self> {
        let all = texts
            .into_iter()
            .map(|t| canonical_cidr(field, t))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_cidrs(all))
    }

    /// Builds a set from prefixes (as [`canonical_cidr`] returns them):
    /// host bits cleared, split by family, sorted, de-duplicated, as
    /// `address/length` text.
    pub fn from_cidrs(prefixes: Vec<IpNet>) -> Self {
        let mut prefixes: Vec<IpNet> = prefixes.into_iter().map(|p| p.trunc()).collect();
        prefixes.sort();
        prefixes.dedup();
        let mut set = IpSet::default();
        for prefix in prefixes {
            let text = prefix.to_string();
            match prefix {
                IpNet::V4(_) => set.v4.push(text),
                IpNet::V6(_) => set.v6.push(text),
            }
        }
        set
    }

    /// The entries of one family.
    pub fn family(&self, family: IpFamily) -> &[String] {
        match family {
            IpFamily::V4 => &self.v4,
            IpFamily::V6 => &self.v6,
        }
    }

    /// The addresses of one family, parsed. Entries that are not plain
    /// addresses (prefixes) are skipped.
    pub fn addrs(&self, family: IpFamily) -> impl Iterator<Item = IpAddr> + '_ {
        self.family(family).iter().filter_map(|t| t.parse().ok())
    }

    /// Whether both families are empty.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// Whether `ip` is in `prefix` (of its family).
pub fn cidr_contains(prefix: IpNet, ip: IpAddr) -> bool {
    // `ipnet`'s: false across families.
    prefix.contains(&ip)
}

/// The prefixes of `prefixes` that no other one contains, sorted: what
/// an nftables interval set (which refuses overlaps) or a list of DROP
/// rules needs from ranges that may nest, such as a `--service-cidr` flag
/// beside the cluster's ServiceCIDR objects.
///
/// ```
/// use kpng_model::addr::outermost;
/// let p = |s: &str| kpng_model::addr::canonical_cidr("cidr", s).expect("cidr");
/// let merged = outermost([p("10.96.0.0/16"), p("10.96.0.0/12"), p("10.200.0.0/24"), p("fd00::/64")]);
/// assert_eq!(merged, [p("10.96.0.0/12"), p("10.200.0.0/24"), p("fd00::/64")]);
/// ```
pub fn outermost(prefixes: impl IntoIterator<Item = IpNet>) -> Vec<IpNet> {
    let mut all: Vec<IpNet> = prefixes.into_iter().map(|p| p.trunc()).collect();
    // Shortest first: whatever contains a prefix comes before it.
    all.sort_by_key(|p| (p.prefix_len(), p.network()));
    all.dedup();
    let mut kept: Vec<IpNet> = Vec::new();
    for prefix in all {
        if !kept.iter().any(|&k| cidr_contains(k, prefix.network())) {
            kept.push(prefix);
        }
    }
    kept.sort_unstable();
    kept
}

/// Parses prefixes that came as text (a Service's
/// `loadBalancerSourceRanges`, the cluster's ServiceCIDRs): the valid ones
/// typed, host bits cleared, and one [`Error::InvalidAddress`] naming
/// `field` per entry that is not a CIDR or an address. The translation
/// from Kubernetes already refuses such entries, so they come only from
/// hand-written views or the gRPC wire.
///
/// ```
/// let (valid, invalid) =
///     kpng_model::addr::parse_prefixes("ranges", ["10.1.2.3/8", "nonsense"]);
/// assert_eq!(valid, ["10.0.0.0/8".parse::<kpng_model::IpNet>().unwrap()]);
/// assert_eq!(invalid.len(), 1);
/// ```
pub fn parse_prefixes<'a>(
    field: &str,
    texts: impl IntoIterator<Item = &'a str>,
) -> (Vec<IpNet>, Vec<Error>) {
    let mut valid = Vec::new();
    let mut invalid = Vec::new();
    for text in texts {
        match canonical_cidr(field, text) {
            Ok(prefix) => valid.push(prefix),
            Err(e) => invalid.push(e),
        }
    }
    (valid, invalid)
}

/// The entries of one family in an optional set (prost models message
/// fields as `Option`, some of them boxed): `family_of(svc.cluster_ips.as_ref(), ..)`,
/// `family_of(svc.external_ips.as_deref(), ..)`.
pub fn family_of(set: Option<&IpSet>, family: IpFamily) -> &[String] {
    set.map_or(&[], |s| s.family(family))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_contain_their_addresses_only() {
        let ip = |t: &str| t.parse::<IpAddr>().expect("ip");
        let net = |t: &str| t.parse::<IpNet>().expect("cidr");
        let lan = net("192.168.0.0/24");
        assert!(cidr_contains(lan, ip("192.168.0.2")));
        assert!(!cidr_contains(lan, ip("192.168.1.2")));
        assert!(
            !cidr_contains(lan, ip("::ffff:192.168.0.2")),
            "another family"
        );
        assert!(cidr_contains(net("0.0.0.0/0"), ip("10.1.2.3")));
        assert!(cidr_contains(net("10.1.2.3/32"), ip("10.1.2.3")));
        assert!(cidr_contains(net("fd00::/64"), ip("fd00::5")));
        assert!(!cidr_contains(net("fd00::/64"), ip("fd00:0:0:1::5")));
    }

    #[test]
    fn ip_sets_are_canonical() {
        let set = IpSet::parse_addrs(
            "clusterIPs",
            ["fd00:0::1", "10.0.0.2", "10.0.0.1", "10.0.0.2"],
        )
        .expect("valid");
        assert_eq!(set.v4, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(set.v6, ["fd00::1"]);
    }

    #[test]
    fn cidrs_clear_host_bits() {
        let set = IpSet::parse_cidrs("ranges", ["10.1.2.3/8", "fd00::1/64", "192.168.0.1"])
            .expect("valid");
        assert_eq!(set.v4, ["10.0.0.0/8", "192.168.0.1/32"]);
        assert_eq!(set.v6, ["fd00::/64"]);
        assert_eq!(
            canonical_cidr("r", "0.0.0.0/0")
                .expect("valid")
                .prefix_len(),
            0
        );
    }

    #[test]
    fn bad_input_names_field_and_value() {
        let err = IpSet::parse_addrs("spec.clusterIPs", ["10.0.0.300"]).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "invalid address \"10.0.0.300\" in spec.clusterIPs"
        );
        assert!(canonical_cidr("r", "10.0.0.0/33").is_err());
        assert!(canonical_cidr("r", "10.0.0.0/x").is_err());
    }
}
