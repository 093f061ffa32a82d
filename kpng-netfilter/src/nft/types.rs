//! The kernel's families and nft's data types: what tables, sets and
//! loads are typed by.

/// A table's family: nf_tables' `NFPROTO_*` (`ip`, `ip6`, or `inet`,
/// both). Not an IP family: `inet` holds IPv4 and IPv6 (an IP family is
/// `kpng_model::IpFamily`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TableFamily {
    /// `ip`: IPv4.
    Ip,
    /// `ip6`: IPv6.
    Ip6,
    /// `inet`: both.
    Inet,
}

impl TableFamily {
    /// The kernel's number (`NFPROTO_*`).
    pub fn number(self) -> u8 {
        match self {
            TableFamily::Inet => 1,
            TableFamily::Ip => 2,
            TableFamily::Ip6 => 10,
        }
    }

    /// nft's name for it.
    pub fn name(self) -> &'static str {
        match self {
            TableFamily::Ip => "ip",
            TableFamily::Ip6 => "ip6",
            TableFamily::Inet => "inet",
        }
    }
}

impl std::fmt::Display for TableFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of a set's key or a map's value, as nft names types (its
/// numbering, which `nft list` reads back), and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DataType {
    /// nft's type number (a concatenation packs its parts' numbers, six
    /// bits each).
    pub id: u32,
    /// The length in bytes, each part of a concatenation rounded up to a
    /// whole register (4 bytes).
    pub len: u32,
}

impl DataType {
    /// A 32-bit integer (nft's `integer`): a mark, a numgen value.
    pub const INTEGER: DataType = DataType { id: 4, len: 4 };
    /// `ipv4_addr`.
    pub const IPV4_ADDR: DataType = DataType { id: 7, len: 4 };
    /// `ipv6_addr`.
    pub const IPV6_ADDR: DataType = DataType { id: 8, len: 16 };
    /// `inet_proto` (one byte).
    pub const INET_PROTO: DataType = DataType { id: 12, len: 1 };
    /// `inet_service` (a port, two bytes).
    pub const INET_SERVICE: DataType = DataType { id: 13, len: 2 };
    /// `mark`.
    pub const MARK: DataType = DataType { id: 19, len: 4 };

    /// The address type of a family (`Inet` is taken as IPv4).
    pub fn addr(family: TableFamily) -> DataType {
        match family {
            TableFamily::Ip6 => Self::IPV6_ADDR,
            TableFamily::Ip | TableFamily::Inet => Self::IPV4_ADDR,
        }
    }

    /// A concatenation of `parts` (nft's `a . b . c`).
    pub fn concat(parts: &[DataType]) -> DataType {
        const TYPE_BITS: u32 = 6;
        let id = parts.iter().fold(0, |id, p| (id << TYPE_BITS) | p.id);
        let len = parts.iter().map(|p| p.len.next_multiple_of(4)).sum();
        DataType { id, len }
    }
}
