//! Rendering: the node view as nftables objects, per IP family.
//!
//! The ruleset is shaped to nft's cost model (see docs/reference/architecture.md):
//! a few large maps and many tiny chains, no per-endpoint chain (except
//! for ClientIP affinity). Dispatch is one verdict-map lookup
//! (`service-ips`, `service-nodeports`); endpoint choice is one shared
//! rule per endpoint count that looks the target up in a single big map
//! keyed by (address, protocol, port, random index).
//!
//! Objects are rendered in the kernel's terms ([`Expr`]s, element bytes),
//! not as text: the text of a dry run is printed from them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use kpng_model::maglev;
use kpng_model::v1::{Balancing, ServicePort};
use kpng_model::view::ServiceView;
use kpng_model::{IpFamily, IpNet, ServiceName};
use kpng_netfilter::nft::build::{self, Load};
use kpng_netfilter::nft::{
    BaseChain, ChainHook, ChainType, CtKey, DataType, DynsetOp, Expr, NfVerdict, Reg, RejectKind,
    Set, TableFamily,
};

use crate::NftConfig;

/// Verdict map: (address, protocol, port) to the chain of a Service port
/// with chains of its own (ClientIP affinity).
pub(crate) const SERVICE_IPS: &str = "service-ips";
/// Verdict map: (protocol, node port) to the chain of a NodePort with
/// chains of its own.
pub(crate) const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Set: (address, protocol, port) of the Service ports served by a
/// shared chain, which [`SERVICE_CLASSES`] finds.
pub(crate) const SERVICE_KEYS: &str = "service-keys";
/// Set: (protocol, node port) of the NodePorts served by a shared chain,
/// which [`NODEPORT_CLASSES`] finds.
pub(crate) const NODEPORT_KEYS: &str = "nodeport-keys";
/// Chain: for each shared chain (a class), a rule that sends the keys of
/// its set (of the same name) there.
///
/// Why not the verdict maps: an element that goes to a chain makes the
/// kernel check the whole table when one is added (every element of
/// every verdict map: ~10 ms at 100k Services), and an endpoint count
/// change moves a Service port to another shared chain. As a set's
/// element, that move is data: it costs the kernel ~50 µs. The classes
/// are few (one per endpoint count and policy in use), kept once made
/// until the next full sync, and ordered by how many keys each holds
/// at it, most first.
pub(crate) const SERVICE_CLASSES: &str = "service-classes";
/// Chain: traffic to a node port on a NodePort address, dispatched.
pub(crate) const NODEPORTS: &str = "nodeports";
/// Chain: [`SERVICE_CLASSES`] for node ports.
pub(crate) const NODEPORT_CLASSES: &str = "nodeport-classes";
/// Set: Services with no endpoint at all (rejected).
pub(crate) const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// Set: node ports with no endpoint at all (rejected).
pub(crate) const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// Verdict map: load-balancer IPs with source ranges, to their firewall.
pub(crate) const FIREWALL_IPS: &str = "firewall-ips";
/// Set: live ClusterIPs (other ports on them are rejected).
pub(crate) const CLUSTER_IPS: &str = "cluster-ips";
/// Set: (endpoint, endpoint) pairs of this node's endpoints, for hairpin.
pub(crate) const HAIRPIN: &str = "hairpin";
/// Set: addresses NodePorts listen on.
pub(crate) const NODEPORT_IPS: &str = "nodeport-ips";
/// Set: the pod CIDRs (`--cluster-cidr`).
pub(crate) const CLUSTER_CIDRS: &str = "cluster-cidrs";
/// Set: the Service CIDRs (`--service-cidr`).
pub(crate) const SERVICE_CIDRS: &str = "service-cidrs";
/// Set: ClientIP affinity, (client, Service port, endpoint, endpoint
/// port) with the Service's timeout: one for every Service, so that the
/// kernel, which finds a set by name in a list, never holds thousands.
pub(crate) const AFFINITY: &str = "affinity";
/// Set, with `--counters`: the connections a Service port with ClientIP
/// affinity sent to each endpoint (its own chains DNAT, not the pick
/// maps), keyed by the port's first ClusterIP, protocol and port, and the
/// endpoint and its port: each affinity rule that DNATs looks its
/// constant key up, and the element counts the match.
pub(crate) const AFFINITY_COUNTS: &str = "aff-counts";
/// The most clients (per Service port and endpoint) [`AFFINITY`] holds.
pub(crate) const AFFINITY_SIZE: u32 = 1 << 20;

/// Set: the UDP flows the packet path translated, by their original
/// tuple and the address that answers them, each kept for the record's
/// timeout after its last packet (see
/// [`FlowRecord`](kpng_netfilter::conntrack::FlowRecord)).
pub(crate) const UDP_FLOWS: &str = "udp-flows";
/// Set: why [`UDP_FLOWS`] cannot be trusted, for its timeout: it is young,
/// or a flow was not recorded.
pub(crate) const UDP_UNTRUSTED: &str = "udp-flows-untrusted";

/// A duration in whole milliseconds, as set timeouts take it.
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A set's or map's name: most are the table's fixed ones.
pub(crate) type SetName = Cow<'static, str>;

/// Which endpoint set, for which kind of destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Pick {
    /// Keyed by destination address: ClusterIPs, externalIPs, LB IPs.
    Vip { local: bool },
    /// Keyed by node port.
    NodePort { local: bool },
}

impl Pick {
    /// The big map holding the targets.
    pub(crate) fn map(self) -> &'static str {
        match self {
            Pick::Vip { local: false } => "vip-cluster",
            Pick::Vip { local: true } => "vip-local",
            Pick::NodePort { local: false } => "np-cluster",
            Pick::NodePort { local: true } => "np-local",
        }
    }

    pub(crate) const ALL: [Pick; 4] = [
        Pick::Vip { local: false },
        Pick::Vip { local: true },
        Pick::NodePort { local: false },
        Pick::NodePort { local: true },
    ];

    /// What the map is keyed by, with `n` the endpoint count.
    pub(crate) fn key(self, family: TableFamily, n: u32) -> Vec<Load> {
        match self {
            Pick::Vip { .. } => vec![
                Load::Daddr(family),
                Load::L4Proto,
                Load::Dport,
                Load::Random(n),
            ],
            Pick::NodePort { .. } => vec![Load::L4Proto, Load::Dport, Load::Random(n)],
        }
    }

    /// The map's declaration: by `typeof`, since one key part is a
    /// `numgen` value, mapping to NAT targets.
    pub(crate) fn set(self, family: TableFamily) -> Set {
        Set::keyed_by(self.map(), &self.key(family, 2))
            .to_values(&[Load::Daddr(family), Load::Dport])
    }

    /// The shared chain that picks one of `n` targets `how`: at random
    /// (`pick-vip-cluster-3`), in turn (`pick-vip-cluster-rr-3`), or by the
    /// flow's slot in a Maglev table, whatever `n` (`pick-vip-cluster-maglev`).
    pub(crate) fn chain(self, n: usize, how: Balancing) -> String {
        match how {
            Balancing::Maglev => format!("pick-{}-maglev", self.map()),
            Balancing::RoundRobin => format!("pick-{}-rr-{n}", self.map()),
            _ => format!("pick-{}-{n}", self.map()),
        }
    }

    /// The pick chain's rule: DNAT to the target at a random index, the
    /// next index in turn (`numgen inc`), or the flow's Maglev slot
    /// (`jhash` of its source address and port, modulo
    /// [`maglev::SLOTS`]), each the last part of the map's key.
    pub(crate) fn rule(self, family: TableFamily, n: usize, how: Balancing) -> Vec<Expr> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let mut key = self.key(family, n);
        if let Some(last) = key.last_mut() {
            *last = match how {
                Balancing::Maglev => Load::Jhash(family, maglev::SLOTS),
                Balancing::RoundRobin => Load::Inc(n),
                _ => Load::Random(n),
            };
        }
        build::dnat_map(family, &key, self.map())
    }
}

/// An IP family as nf_tables takes it: its table's family, its address
/// type, an address's bytes.
pub(crate) trait InNft: Copy {
    /// `ip` or `ip6`.
    fn table_family(self) -> TableFamily;
    /// `ipv4_addr` or `ipv6_addr`.
    fn addr_type(self) -> DataType;
    /// The address's bytes, if it is of this family.
    fn bytes(self, ip: IpAddr) -> Option<Vec<u8>>;
}

impl InNft for IpFamily {
    fn table_family(self) -> TableFamily {
        match self {
            IpFamily::V4 => TableFamily::Ip,
            IpFamily::V6 => TableFamily::Ip6,
        }
    }

    fn addr_type(self) -> DataType {
        DataType::addr(self.table_family())
    }

    fn bytes(self, ip: IpAddr) -> Option<Vec<u8>> {
        match (ip, self) {
            (IpAddr::V4(v4), IpFamily::V4) => Some(v4.octets().to_vec()),
            (IpAddr::V6(v6), IpFamily::V6) => Some(v6.octets().to_vec()),
            _ => None,
        }
    }
}

/// The bytes of an element's key or value, inline: a concatenation, each
/// part padded to whole 32-bit registers (at most two IPv6 addresses).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Bytes<const N: usize> {
    len: u8,
    buf: [u8; N],
}

impl<const N: usize> Bytes<N> {
    /// The parts, each padded to whole registers; `None` if too long.
    pub(crate) fn of(parts: &[&[u8]]) -> Option<Self> {
        let mut buf = [0; N];
        let mut len = 0;
        for part in parts {
            buf.get_mut(len..len + part.len())?.copy_from_slice(part);
            len = (len + part.len()).next_multiple_of(4);
        }
        Some(Self {
            len: u8::try_from(len.min(N)).ok()?,
            buf,
        })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl<const N: usize> std::fmt::Debug for Bytes<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x?}", self.as_slice())
    }
}

/// An element's key.
pub(crate) type Key = Bytes<32>;

/// What an element maps to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Value {
    /// Nothing: a set's element.
    None,
    /// `goto` a chain.
    Goto(Arc<str>),
    /// `jump` to a chain.
    Jump(Arc<str>),
    /// A NAT target: address and port.
    Target(Bytes<20>),
}

/// One element of a set or map, in the kernel's form. In an interval set
/// the key is a prefix: the address and, in its last byte, the length.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Elem {
    pub(crate) key: Key,
    pub(crate) value: Value,
    /// The Service it serves, for `nft list` (shared by its elements).
    pub(crate) comment: Option<Arc<str>>,
}

/// A chain: its hook for a base chain, and its rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChainDef {
    pub(crate) base: Option<BaseChain>,
    pub(crate) rules: Vec<Vec<Expr>>,
    /// For a shared chain that serves Service ports (a class): the
    /// classes chain ([`SERVICE_CLASSES`] or [`NODEPORT_CLASSES`]) and the
    /// rule there that sends the keys of its set to it.
    pub(crate) class: Option<(&'static str, Vec<Expr>)>,
    /// Kept once made, until the next full sync, though no Service uses
    /// it: a pick chain's rule binds the big map, and the kernel checks
    /// every element of a map a new rule binds (~20 ms at 100k elements),
    /// so an endpoint count that comes back must not pay it again.
    pub(crate) retain: bool,
    /// The Service port it serves, for `nft list` (a shared chain has
    /// none).
    pub(crate) comment: Option<Arc<str>>,
}

/// The nft objects one Service (or the table's fixed part) contributes to
/// one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Render {
    /// Chains, by name.
    pub(crate) chains: BTreeMap<String, ChainDef>,
    /// Sets and maps, by name.
    pub(crate) sets: BTreeMap<String, Set>,
    /// Elements, per set or map.
    pub(crate) elements: BTreeMap<SetName, BTreeSet<Elem>>,
}

impl Render {
    fn element(&mut self, set: impl Into<SetName>, key: Option<Key>, value: Value) {
        self.noted(set, key, value, None);
    }

    /// An element with a comment.
    fn noted(
        &mut self,
        set: impl Into<SetName>,
        key: Option<Key>,
        value: Value,
        comment: Option<&Arc<str>>,
    ) {
        if let Some(key) = key {
            self.elements.entry(set.into()).or_default().insert(Elem {
                key,
                value,
                comment: comment.cloned(),
            });
        }
    }

    /// A chain, with its comment (a Service port's own chains have one).
    fn chain(
        &mut self,
        name: impl Into<String>,
        rules: Vec<Vec<Expr>>,
        comment: Option<&Arc<str>>,
    ) {
        let chain = ChainDef {
            base: None,
            rules,
            class: None,
            retain: false,
            comment: comment.cloned(),
        };
        self.chains.insert(name.into(), chain);
    }
}

/// The comment naming a Service port, as `nft list` shows it beside its
/// chains and elements: `namespace/name:port/protocol`, the port by its
/// name when it has one (kube-proxy's `namespace/name:port` and the
/// protocol). None unless the names are Kubernetes names (as the API
/// server allows them): text from a file never reaches the ruleset.
pub(crate) fn port_comment(
    name: &ServiceName,
    port: &ServicePort,
    number: u16,
    protocol: &str,
) -> Option<Arc<str>> {
    let service = service_comment(name)?;
    let text = if port.name.is_empty() {
        format!("{service}:{number}/{protocol}")
    } else if is_dns_name(&port.name, 15) {
        format!("{service}:{}/{protocol}", port.name)
    } else {
        return None;
    };
    Some(kpng_netfilter::nft::fit_comment(text).into())
}

/// The comment naming a Service (`namespace/name`), for its `cluster-ips`
/// elements: none unless both are Kubernetes names.
pub(crate) fn service_comment(name: &ServiceName) -> Option<Arc<str>> {
    let text = name.to_string();
    let (namespace, service) = text.split_once('/')?;
    (is_dns_name(namespace, 63) && is_dns_name(service, 253))
        .then(|| kpng_netfilter::nft::fit_comment(text).into())
}

/// Whether `text` is a DNS name of at most `max` bytes (lower-case letters,
/// digits, `-` and `.`, starting and ending with a letter or digit), as
/// Kubernetes names are.
fn is_dns_name(text: &str, max: usize) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    text.len() <= max
        && edge(text.chars().next())
        && edge(text.chars().last())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// A prefix as an interval set's element key.
pub(crate) fn prefix_key(fam: IpFamily, prefix: IpNet) -> Option<Key> {
    Key::of(&[&fam.bytes(prefix.network())?, &[prefix.prefix_len()]])
}

/// The prefix an interval set's element key holds.
pub(crate) fn prefix_of(key: &Key) -> Option<IpNet> {
    let bytes = key.as_slice();
    let ip: IpAddr = match bytes.len() {
        8 => IpAddr::from(<[u8; 4]>::try_from(&bytes[..4]).ok()?),
        20 => IpAddr::from(<[u8; 16]>::try_from(&bytes[..16]).ok()?),
        _ => return None,
    };
    let len = match ip {
        IpAddr::V4(_) => bytes[4],
        IpAddr::V6(_) => bytes[16],
    };
    IpNet::new(ip, len).ok()
}

/// FNV-1a of `text`.
fn fnv(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A stable, short, nft-safe id for one Service port: FNV-1a over the
/// Service name, port name and protocol, in base 32. Chain names never carry
/// user text.
pub(crate) fn port_id(name: &ServiceName, port: &ServicePort) -> String {
    let hash = fnv(&format!("{name}/{}/{}", port.name, port.protocol));
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    (0..13)
        .map(|i| ALPHABET[((hash >> (i * 5)) & 31) as usize] as char)
        .collect()
}

/// The key of [`AFFINITY_COUNTS`]: a destination's address, protocol and
/// port, an endpoint's address and port (loaded as constants).
fn affinity_count_key(family: TableFamily) -> [Load; 5] {
    [
        Load::Daddr(family),
        Load::L4Proto,
        Load::Dport,
        Load::Daddr(family),
        Load::Dport,
    ]
}

/// The number that stands for a Service port (its [`port_id`]) in the
/// [`AFFINITY`] set's keys. Two ports of one number would share a client's
/// record only for an endpoint both have, and send the client to it: an
/// endpoint of the Service either way.
pub(crate) fn port_mark(id: &str) -> u32 {
    // The low half of the hash of the id.
    (fnv(id) & 0xffff_ffff) as u32
}

fn sanitize_ip(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

fn proto_number(proto: &str) -> u8 {
    match proto {
        "tcp" => 6,
        "udp" => 17,
        _ => 132,
    }
}

/// Which traffic a chain serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// ClusterIPs.
    Svc,
    /// externalIPs and LB IPs.
    Ext,
    /// Node ports.
    Np,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Svc => "svc",
            Kind::Ext => "ext",
            Kind::Np => "np",
        }
    }

    /// What traffic of this kind is keyed by (in the classes' sets).
    fn key(self, family: TableFamily) -> Vec<Load> {
        match self {
            Kind::Svc | Kind::Ext => vec![Load::Daddr(family), Load::L4Proto, Load::Dport],
            Kind::Np => vec![Load::L4Proto, Load::Dport],
        }
    }

    fn pick(self, local: bool) -> Pick {
        match self {
            Kind::Svc | Kind::Ext => Pick::Vip { local },
            Kind::Np => Pick::NodePort { local },
        }
    }
}

/// A chain shared by every Service port with the same kind, policy and
/// endpoint counts: its rules depend on nothing else, so the table holds
/// a few such chains, not one per Service. A Service that uses it renders
/// it, and the table holds it while any Service does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Shared {
    kind: Kind,
    /// Whether the policy is Local.
    local: bool,
    /// Cluster-wide endpoints (0 when the chain does not use them).
    cluster: usize,
    /// Local endpoints (0 when the chain does not use them).
    local_n: usize,
    /// How an endpoint is picked.
    how: Balancing,
}

impl Shared {
    fn new(kind: Kind, local: bool, cluster: usize, local_n: usize, how: Balancing) -> Self {
        let (cluster, local_n) = match (kind, local) {
            (Kind::Svc, true) => (0, local_n),
            (_, false) => (cluster, 0),
            (_, true) => (cluster, local_n),
        };
        // A Maglev pick is the same whatever the count: only none or some
        // tells two chains apart.
        let (cluster, local_n) = match how {
            Balancing::Maglev => (cluster.min(1), local_n.min(1)),
            _ => (cluster, local_n),
        };
        let how = match how {
            Balancing::Maglev | Balancing::RoundRobin => how,
            _ => Balancing::Random,
        };
        Self {
            kind,
            local,
            cluster,
            local_n,
            how,
        }
    }

    pub(crate) fn name(self) -> String {
        let kind = self.kind.word();
        let base = match (self.kind, self.local) {
            (Kind::Svc, true) => format!("svc-l{}", self.local_n),
            (_, false) => format!("{kind}-c{}", self.cluster),
            (_, true) => format!("{kind}-l{}-{}", self.cluster, self.local_n),
        };
        match self.how {
            Balancing::Maglev => format!("{base}-maglev"),
            Balancing::RoundRobin => format!("{base}-rr"),
            _ => base,
        }
    }
}

/// The masquerade mark, set.
fn mark(config: &NftConfig) -> Vec<Expr> {
    build::mark_set_or(config.proxy.masquerade_mark())
}

/// The rules of a chain for traffic of `kind` under a `local` (or Cluster)
/// policy; `select(local)` is the verdict that picks an endpoint of the
/// local (or cluster-wide) set.
fn policy_rules(
    fam: IpFamily,
    config: &NftConfig,
    kind: Kind,
    local: bool,
    mut select: impl FnMut(bool) -> NfVerdict,
) -> Vec<Vec<Expr>> {
    let saddr = [Load::Saddr(fam.table_family())];
    let has_cidrs = !config.proxy.cluster_cidrs_in(fam).is_empty();
    let mut rules = Vec::new();
    if kind == Kind::Svc {
        if config.proxy.masquerade_all {
            rules.push(mark(config));
        } else if has_cidrs {
            // Traffic from outside the pod network is masqueraded.
            rules.push(
                [
                    build::lookup(&saddr, CLUSTER_CIDRS, None, true),
                    mark(config),
                ]
                .concat(),
            );
        }
        rules.push(build::verdict(select(local)));
        return rules;
    }
    if !local {
        // External traffic under the Cluster policy: always masqueraded.
        return vec![mark(config), build::verdict(select(false))];
    }
    let cluster = select(false);
    if has_cidrs {
        // Pods short-circuit to every endpoint, unmasqueraded.
        rules.push(
            [
                build::lookup(&saddr, CLUSTER_CIDRS, None, false),
                build::verdict(cluster.clone()),
            ]
            .concat(),
        );
    }
    // The node itself: masqueraded, to every endpoint.
    rules.push(
        [
            build::fib_local(true),
            mark(config),
            build::verdict(cluster),
        ]
        .concat(),
    );
    // Everyone else: local endpoints only, client address kept.
    rules.push(build::verdict(select(true)));
    rules
}

/// `KEYS @set goto chain`: the rule that sends the keys of `set` to
/// `chain` (a class's, and the gates to the classes chains).
fn to_class(keys: &[Load], set: &str, chain: &str) -> Vec<Expr> {
    [
        build::lookup(keys, set, None, false),
        build::verdict(NfVerdict::Goto(chain.into())),
    ]
    .concat()
}

/// Where a Service port's traffic of one kind goes.
enum Target {
    /// Its own chain, by the verdict map.
    Own(String),
    /// A shared chain (a class), by the set of that name.
    Shared(String),
}

struct PortCtx<'a> {
    fam: IpFamily,
    config: &'a NftConfig,
    id: String,
    proto: u8,
    port: u16,
    /// With `--counters`, the ClusterIP (bytes) its affinity rules count
    /// under in [`AFFINITY_COUNTS`].
    counted_as: Option<Vec<u8>>,
    affinity: Option<u32>,
    /// How an endpoint is picked (never unspecified).
    how: Balancing,
    cluster: Vec<(IpAddr, u16)>,
    local: Vec<(IpAddr, u16)>,
    /// The Service port's comment (`None`: comments are off).
    comment: Option<Arc<str>>,
}

impl PortCtx<'_> {
    fn targets(&self, local: bool) -> &[(IpAddr, u16)] {
        if local { &self.local } else { &self.cluster }
    }

    /// The chain that traffic of `kind` to this port goes to: a shared one
    /// (`svc-c3`, `ext-l5-1`…, a class: with its set of keys and the pick
    /// chains it uses), or with ClientIP affinity, whose rules name
    /// endpoints, the port's own.
    fn chain(&self, render: &mut Render, kind: Kind, local: bool) -> Target {
        if let Some(timeout) = self.affinity {
            let name = format!("{}-{}", kind.word(), self.id);
            let rules = policy_rules(self.fam, self.config, kind, local, |set_local| {
                if self.targets(set_local).is_empty() {
                    NfVerdict::Drop
                } else {
                    NfVerdict::Goto(self.affinity_chain(render, set_local, timeout))
                }
            });
            render.chain(name.clone(), rules, self.comment.as_ref());
            return Target::Own(name);
        }
        let shared = Shared::new(kind, local, self.cluster.len(), self.local.len(), self.how);
        let family = self.fam.table_family();
        let rules = policy_rules(self.fam, self.config, kind, local, |set_local| {
            let n = if set_local {
                shared.local_n
            } else {
                shared.cluster
            };
            if n == 0 {
                return NfVerdict::Drop;
            }
            let pick = kind.pick(set_local);
            let chain = ChainDef {
                base: None,
                rules: vec![pick.rule(family, n, shared.how)],
                class: None,
                retain: true,
                comment: None,
            };
            render.chains.insert(pick.chain(n, shared.how), chain);
            NfVerdict::Goto(pick.chain(n, shared.how))
        });
        let name = shared.name();
        let key = kind.key(family);
        let classes = match kind {
            Kind::Svc | Kind::Ext => SERVICE_CLASSES,
            Kind::Np => NODEPORT_CLASSES,
        };
        let class = to_class(&key, &name, &name);
        render.chains.insert(
            name.clone(),
            ChainDef {
                base: None,
                rules,
                class: Some((classes, class)),
                retain: true,
                comment: None,
            },
        );
        render
            .sets
            .insert(name.clone(), Set::new(name.clone(), build::datatype(&key)));
        Target::Shared(name)
    }

    /// ClientIP affinity: one chain per endpoint that records the client
    /// in the shared [`AFFINITY`] set (keyed by the client, this Service
    /// port's number, the endpoint and its port) and sends it there, and
    /// one chain per endpoint set that sends known clients back to their
    /// endpoint and spreads the others evenly (endpoint `i` of `n` with
    /// chance 1/(n-i) among those left, as kube-proxy's iptables mode
    /// does), with no set or map of its own.
    fn affinity_chain(&self, render: &mut Render, local: bool, timeout: u32) -> String {
        let set = self.targets(local);
        let family = self.fam.table_family();
        let which = if local { "local" } else { "cluster" };
        let name = format!("aff-{}-{which}", self.id);
        let id = port_mark(&self.id).to_ne_bytes();
        let mut rules = Vec::new();
        let mut spread = Vec::new();
        let n = set.len();
        for (i, (ip, port)) in set.iter().enumerate() {
            let Some(addr) = self.fam.bytes(*ip) else {
                continue;
            };
            let port_bytes = port.to_be_bytes();
            let key = [
                (Load::Saddr(family), None),
                (Load::Mark, Some(&id[..])),
                (Load::Daddr(family), Some(&addr[..])),
                (Load::Dport, Some(&port_bytes[..])),
            ];
            let chain = format!("afe-{}-{}", self.id, sanitize_ip(*ip));
            let dnat = [
                build::equals(Load::L4Proto, &[self.proto]),
                self.count_affinity(render, &addr, &port_bytes),
                build::dnat_to(*ip, *port),
            ]
            .concat();
            rules.push([build::lookup_fixed(&key, AFFINITY), dnat.clone()].concat());
            let left = u32::try_from(n - i).unwrap_or(u32::MAX);
            spread.push(match left {
                1 => build::verdict(NfVerdict::Goto(chain.clone())),
                _ => [
                    build::equals(Load::Random(left), &0u32.to_ne_bytes()),
                    build::verdict(NfVerdict::Goto(chain.clone())),
                ]
                .concat(),
            });
            let mut update = build::load_fixed(&key);
            update.push(Expr::Dynset {
                op: DynsetOp::Update,
                set: AFFINITY.into(),
                key: Reg::r32(0),
                timeout_ms: Some(u64::from(timeout) * 1000),
            });
            render.chain(chain, vec![update, dnat], self.comment.as_ref());
        }
        rules.extend(spread);
        render.chain(name.clone(), rules, self.comment.as_ref());
        name
    }

    /// With `--counters`, the lookup that counts a connection this port's
    /// affinity rules send to `endpoint`:`port` (and its element); none
    /// otherwise.
    fn count_affinity(&self, render: &mut Render, endpoint: &[u8], port: &[u8; 2]) -> Vec<Expr> {
        let Some(vip) = self.counted_as.as_deref() else {
            return Vec::new();
        };
        let number = self.port.to_be_bytes();
        let values: [&[u8]; 5] = [vip, &[self.proto], &number, endpoint, port];
        render.element(AFFINITY_COUNTS, Key::of(&values), Value::None);
        let loads = affinity_count_key(self.fam.table_family());
        let key: Vec<(Load, Option<&[u8]>)> = loads.into_iter().zip(values.map(Some)).collect();
        build::lookup_fixed(&key, AFFINITY_COUNTS)
    }

    fn target(&self, ip: IpAddr, port: u16) -> Value {
        match self
            .fam
            .bytes(ip)
            .and_then(|a| Bytes::of(&[&a, &port.to_be_bytes()]))
        {
            Some(t) => Value::Target(t),
            None => Value::None,
        }
    }

    /// The pick map's elements of one set of targets: index `i` to the
    /// `i`th target, or with Maglev, each slot to its target.
    fn picks(&self, local: bool) -> Vec<(u32, (IpAddr, u16))> {
        let targets = self.targets(local);
        if self.how == Balancing::Maglev && self.affinity.is_none() {
            return maglev::table(targets, maglev::SLOTS)
                .into_iter()
                .zip(0u32..)
                .map(|(i, slot)| (slot, targets[i as usize]))
                .collect();
        }
        targets
            .iter()
            .zip(0u32..)
            .map(|(target, i)| (i, *target))
            .collect()
    }

    fn vip_elements(&self, render: &mut Render, vip: &[u8], local: bool) {
        let map = Pick::Vip { local }.map();
        for (i, (ip, port)) in self.picks(local) {
            let key = Key::of(&[
                vip,
                &[self.proto],
                &self.port.to_be_bytes(),
                &i.to_ne_bytes(),
            ]);
            render.element(map, key, self.target(ip, port));
        }
    }

    fn np_elements(&self, render: &mut Render, node_port: u16, local: bool) {
        let map = Pick::NodePort { local }.map();
        for (i, (ip, port)) in self.picks(local) {
            let key = Key::of(&[&[self.proto], &node_port.to_be_bytes(), &i.to_ne_bytes()]);
            render.element(map, key, self.target(ip, port));
        }
    }
}

/// Addresses of this family among `texts`, as bytes.
fn addrs(fam: IpFamily, ips: &[IpAddr]) -> Vec<Vec<u8>> {
    ips.iter().filter_map(|ip| fam.bytes(*ip)).collect()
}

/// Renders one Service for one family.
pub(crate) fn service(view: &ServiceView, family: IpFamily, config: &NftConfig) -> Render {
    let mut render = Render::default();
    let fam = family;
    let name = view.service.service_name();
    let plan = view.plan(family);
    let cluster_ips = addrs(fam, plan.cluster_ips);
    let lb_ips = addrs(fam, plan.lb_ips);
    let external: Vec<Vec<u8>> = addrs(fam, plan.external_ips)
        .into_iter()
        .chain(lb_ips.iter().cloned())
        .collect();
    let (itp_local, etp_local) = (plan.itp_local, plan.etp_local);
    // Typed when the Service entered.
    let ranges = plan.source_ranges;

    let service_comment = config.comments.then(|| service_comment(&name)).flatten();
    for ip in &cluster_ips {
        render.noted(
            CLUSTER_IPS,
            Key::of(&[ip]),
            Value::None,
            service_comment.as_ref(),
        );
    }
    // This node's endpoints may reach themselves through the Service
    // (hairpin): such flows are masqueraded.
    for ip in view
        .endpoints
        .iter()
        .filter(|e| e.used() && e.is_local() && e.family() == family)
        .filter_map(|e| fam.bytes(e.ip()))
    {
        render.element(HAIRPIN, Key::of(&[&ip, &ip]), Value::None);
    }
    for port in plan.ports {
        let (proto, number, node_port) = (proto_number(port.protocol), port.number, port.node_port);
        let ctx = PortCtx {
            fam,
            config,
            id: port_id(&name, port.port),
            proto,
            port: number,
            counted_as: cluster_ips.first().filter(|_| config.counters).cloned(),
            affinity: plan.affinity,
            how: config.proxy.balancing_of(&view.service),
            cluster: port.cluster,
            local: port.local,
            comment: config
                .comments
                .then(|| port_comment(&name, port.port, number, port.protocol))
                .flatten(),
        };
        let note = ctx.comment.clone();
        let note = note.as_ref();
        let key = |vip: &[u8]| Key::of(&[vip, &[proto], &number.to_be_bytes()]);
        let np_key = |np: u16| Key::of(&[&[proto], &np.to_be_bytes()]);
        // A key in the verdict map of own chains, or in its class's set
        // and in the set of all keys with a class.
        let dispatch =
            |render: &mut Render, target: &Target, key: Option<Key>, own, keys| match target {
                Target::Own(chain) => {
                    render.noted(own, key, Value::Goto(chain.as_str().into()), note)
                }
                Target::Shared(class) => {
                    render.element(keys, key, Value::None);
                    render.noted(class.clone(), key, Value::None, note);
                }
            };

        // Source ranges apply to LB IPs only, whatever the endpoints.
        if !ranges.is_empty() && !lb_ips.is_empty() {
            let fw = format!("fw-{}", ctx.id);
            let sources = format!("src-{}", ctx.id);
            render.sets.insert(
                sources.clone(),
                Set::new(sources.clone(), fam.addr_type()).intervals(),
            );
            for range in ranges {
                render.element(sources.clone(), prefix_key(fam, *range), Value::None);
            }
            let saddr = [Load::Saddr(fam.table_family())];
            render.chain(
                fw.clone(),
                vec![
                    [
                        build::lookup(&saddr, &sources, None, false),
                        build::verdict(NfVerdict::Return),
                    ]
                    .concat(),
                    build::verdict(NfVerdict::Drop),
                ],
                note,
            );
            for lb in &lb_ips {
                render.noted(FIREWALL_IPS, key(lb), Value::Jump(fw.as_str().into()), note);
            }
        }

        if ctx.cluster.is_empty() {
            // No usable endpoint anywhere: every address rejects.
            for vip in cluster_ips.iter().chain(&external) {
                render.noted(NO_ENDPOINT_SERVICES, key(vip), Value::None, note);
            }
            if let Some(np) = node_port {
                render.noted(NO_ENDPOINT_NODEPORTS, np_key(np), Value::None, note);
            }
            continue;
        }

        if !cluster_ips.is_empty() {
            let chain = ctx.chain(&mut render, Kind::Svc, itp_local);
            for ip in &cluster_ips {
                dispatch(&mut render, &chain, key(ip), SERVICE_IPS, SERVICE_KEYS);
                ctx.vip_elements(&mut render, ip, itp_local);
            }
        }
        if !external.is_empty() {
            let chain = ctx.chain(&mut render, Kind::Ext, etp_local);
            for ip in &external {
                dispatch(&mut render, &chain, key(ip), SERVICE_IPS, SERVICE_KEYS);
                ctx.vip_elements(&mut render, ip, false);
                if etp_local {
                    ctx.vip_elements(&mut render, ip, true);
                }
            }
        }
        if let Some(np) = node_port {
            let chain = ctx.chain(&mut render, Kind::Np, etp_local);
            dispatch(
                &mut render,
                &chain,
                np_key(np),
                SERVICE_NODEPORTS,
                NODEPORT_KEYS,
            );
            ctx.np_elements(&mut render, np, false);
            if etp_local {
                ctx.np_elements(&mut render, np, true);
            }
        }
    }
    render
}

/// The table's fixed part for one family: its maps and sets, its base
/// chains and their rules, and the global elements (NodePort addresses,
/// CIDRs).
pub(crate) fn globals(
    fam: IpFamily,
    config: &NftConfig,
    node_ips: &[IpNet],
    service_cidrs: &[IpNet],
) -> Render {
    let mut render = Render::default();
    let f = fam.table_family();
    let addr = fam.addr_type();
    let (proto, port) = (DataType::INET_PROTO, DataType::INET_SERVICE);
    let vip = DataType::concat(&[addr, proto, port]);
    let np = DataType::concat(&[proto, port]);
    let sets = [
        Set::verdict_map(SERVICE_IPS, vip),
        Set::verdict_map(SERVICE_NODEPORTS, np),
        Set::new(SERVICE_KEYS, vip),
        Set::new(NODEPORT_KEYS, np),
        Set::new(NO_ENDPOINT_SERVICES, vip),
        Set::new(NO_ENDPOINT_NODEPORTS, np),
        Set::verdict_map(FIREWALL_IPS, vip),
        Set::new(CLUSTER_IPS, addr),
        Set::new(HAIRPIN, DataType::concat(&[addr, addr])),
        Set::new(NODEPORT_IPS, addr).intervals(),
        Set::new(CLUSTER_CIDRS, addr).intervals(),
        Set::new(SERVICE_CIDRS, addr).intervals(),
        Set::new(
            AFFINITY,
            DataType::concat(&[addr, DataType::MARK, addr, port]),
        )
        .with_timeouts()
        .with_size(AFFINITY_SIZE),
    ];
    // The pick maps' elements count the connections sent to each target
    // when asked (`NftConfig::counters`): the map is looked up once per
    // new connection, in the nat hooks. Affinity's rules count in a set
    // of their own.
    let picks = Pick::ALL.map(|p| match config.counters {
        true => p.set(f).with_counter(),
        false => p.set(f),
    });
    let counted = config
        .counters
        .then(|| Set::keyed_by(AFFINITY_COUNTS, &affinity_count_key(f)).with_counter());
    for set in sets.into_iter().chain(picks).chain(counted) {
        render.sets.insert(set.name.clone(), set);
    }
    for (set, list) in [
        (NODEPORT_IPS, node_ips),
        (CLUSTER_CIDRS, &config.proxy.cluster_cidrs[..]),
        (SERVICE_CIDRS, service_cidrs),
    ] {
        for prefix in list {
            render.element(set, prefix_key(fam, *prefix), Value::None);
        }
    }

    let m = config.proxy.masquerade_mark();
    let daddr = [Load::Daddr(f)];
    let vip_key = [Load::Daddr(f), Load::L4Proto, Load::Dport];
    let np_key = [Load::L4Proto, Load::Dport];
    let reject = RejectKind::Icmp(match fam {
        // Port unreachable, as nft's plain `reject` sends.
        IpFamily::V4 => 3,
        IpFamily::V6 => 4,
    });
    let vmap = |keys: &[Load], map: &str| build::lookup(keys, map, Some(Reg::VERDICT), false);
    let node_port = |then: Vec<Expr>| {
        [
            build::fib_local(false),
            build::lookup(&daddr, NODEPORT_IPS, None, false),
            then,
        ]
        .concat()
    };
    let reject_if = |keys: &[Load], set: &str| {
        [
            build::lookup(keys, set, None, false),
            vec![Expr::Reject(reject)],
        ]
        .concat()
    };
    // With --end-tcp-connections: a TCP packet that is not a SYN, to a
    // Service (or node port) left with no endpoint, is answered with a
    // reset rather than an ICMP error, which an established connection
    // shrugs off: the client of a flow whose conntrack entry was deleted
    // with its endpoint learns at its next packet (see kpng-conntrack).
    let tcp_reset_if = |keys: &[Load], set: &str| {
        if !config.proxy.end_tcp_connections {
            return Vec::new();
        }
        [
            vec![
                Expr::Meta {
                    key: kpng_netfilter::nft::MetaKey::L4Proto,
                    dreg: Reg::r32(0),
                },
                Expr::Cmp {
                    sreg: Reg::r32(0),
                    op: kpng_netfilter::nft::CmpOp::Eq,
                    data: vec![6],
                },
                Expr::Payload {
                    base: kpng_netfilter::nft::PayloadBase::Transport,
                    offset: 13,
                    len: 1,
                    dreg: Reg::r32(0),
                },
                Expr::Bitwise {
                    sreg: Reg::r32(0),
                    dreg: Reg::r32(0),
                    mask: vec![0x02],
                    xor: vec![0],
                },
                Expr::Cmp {
                    sreg: Reg::r32(0),
                    op: kpng_netfilter::nft::CmpOp::Eq,
                    data: vec![0],
                },
            ],
            build::lookup(keys, set, None, false),
            vec![Expr::Reject(RejectKind::TcpReset)],
        ]
        .concat()
    };
    let jump = |chain: &str| build::verdict(NfVerdict::Jump(chain.into()));
    let new_conn = || build::ct_test(CtKey::State, 8);
    let base = |kind, hook, priority| {
        Some(BaseChain {
            kind,
            hook,
            priority,
        })
    };
    let filter = |hook| {
        (
            base(ChainType::Filter, hook, -10),
            vec![[new_conn(), jump("service-filter")].concat()],
        )
    };
    let chains = [
        (
            "nat-prerouting",
            (
                base(ChainType::Nat, ChainHook::Prerouting, -100),
                vec![jump("services")],
            ),
        ),
        (
            "nat-output",
            (
                base(ChainType::Nat, ChainHook::Output, -100),
                vec![jump("services")],
            ),
        ),
        (
            "nat-postrouting",
            (
                base(ChainType::Nat, ChainHook::Postrouting, 100),
                vec![
                    [
                        build::ct_test(CtKey::Status, 32),
                        build::lookup(&[Load::Saddr(f), Load::Daddr(f)], HAIRPIN, None, false),
                        build::mark_set_or(m),
                    ]
                    .concat(),
                    [
                        build::mark_test(m, false),
                        build::verdict(NfVerdict::Return),
                    ]
                    .concat(),
                    build::mark_set_xor(m),
                    // Fully random source ports (NF_NAT_RANGE_PROTO_RANDOM_FULLY).
                    vec![Expr::Masquerade { flags: 16 }],
                ],
            ),
        ),
        (
            "filter-prerouting",
            (
                base(ChainType::Filter, ChainHook::Prerouting, -110),
                vec![[new_conn(), vmap(&vip_key, FIREWALL_IPS)].concat()],
            ),
        ),
        ("filter-input", filter(ChainHook::Input)),
        ("filter-forward", filter(ChainHook::Forward)),
        ("filter-output", filter(ChainHook::Output)),
        (
            "services",
            (
                None,
                // Most Service ports have a class: their set first.
                vec![
                    to_class(&vip_key, SERVICE_KEYS, SERVICE_CLASSES),
                    vmap(&vip_key, SERVICE_IPS),
                    node_port(build::verdict(NfVerdict::Goto(NODEPORTS.into()))),
                ],
            ),
        ),
        (
            NODEPORTS,
            (
                None,
                vec![
                    to_class(&np_key, NODEPORT_KEYS, NODEPORT_CLASSES),
                    vmap(&np_key, SERVICE_NODEPORTS),
                ],
            ),
        ),
        (
            "service-filter",
            (
                None,
                [
                    tcp_reset_if(&vip_key, NO_ENDPOINT_SERVICES),
                    if config.proxy.end_tcp_connections {
                        node_port(tcp_reset_if(&np_key, NO_ENDPOINT_NODEPORTS))
                    } else {
                        Vec::new()
                    },
                    reject_if(&vip_key, NO_ENDPOINT_SERVICES),
                    node_port(reject_if(&np_key, NO_ENDPOINT_NODEPORTS)),
                    reject_if(&daddr, CLUSTER_IPS),
                    [
                        build::lookup(&daddr, SERVICE_CIDRS, None, false),
                        build::verdict(NfVerdict::Drop),
                    ]
                    .concat(),
                ]
                .into_iter()
                .filter(|rule| !rule.is_empty())
                .collect(),
            ),
        ),
        // Filled by the classes in use (see `Objects`).
        (SERVICE_CLASSES, (None, Vec::new())),
        (NODEPORT_CLASSES, (None, Vec::new())),
    ];
    for (name, (base, rules)) in chains {
        let classes = name == SERVICE_CLASSES || name == NODEPORT_CLASSES;
        let chain = ChainDef {
            base,
            rules,
            class: None,
            // The classes chains keep their rules when the globals are
            // made again (the node's addresses changed).
            retain: classes,
            comment: None,
        };
        render.chains.insert(name.to_owned(), chain);
    }
    if let Some(timeout) = config.udp_flows {
        udp_flows(&mut render, f, addr, config.udp_flows_size, millis(timeout));
    }
    if config.proxy.end_tcp_connections {
        // The nudges that make a client whose flow to a departed endpoint
        // was deleted answer (see kpng-conntrack) go untracked: tracked,
        // they would make a flow whose replies the client's answer would
        // match, and it would not be translated to a live endpoint.
        let chain = ChainDef {
            base: base(ChainType::Filter, ChainHook::Output, -300),
            rules: vec![
                [
                    build::mark_is(kpng_netfilter::conntrack::NUDGE_MARK),
                    vec![Expr::Notrack],
                ]
                .concat(),
            ],
            class: None,
            retain: false,
            comment: None,
        };
        render.chains.insert("raw-output".to_owned(), chain);
    }
    render
}

/// The UDP flow record (see [`UDP_FLOWS`]): each DNATed UDP packet, either
/// way, adds or refreshes its flow's element. A flow's packets reach the
/// rules right after conntrack (priority -199), where its DNAT is known
/// once it is past its first packet; the first packet is recorded after the
/// nat chains (-99). A flow that cannot be recorded (the set is full, or
/// the flow is in another conntrack zone than 0, whose entries a delete by
/// tuple in zone 0 would not find) marks the record untrusted instead.
fn udp_flows(render: &mut Render, f: TableFamily, addr: DataType, size: u32, timeout_ms: u64) {
    let port = DataType::INET_SERVICE;
    for set in [
        Set::new(UDP_FLOWS, DataType::concat(&[addr, port, addr, port, addr]))
            .with_timeouts()
            .with_size(size),
        // Declared by `typeof meta mark`, so that nft reads its host-order
        // elements back as they were written (`1`, not `16777216`).
        Set::keyed_by(UDP_UNTRUSTED, &[Load::Mark]).with_timeouts(),
    ] {
        render.sets.insert(set.name.clone(), set);
    }
    let translated = |new: bool| {
        [
            build::equals(Load::L4Proto, &[17]),
            build::ct_test(CtKey::Status, 32),
            if new {
                build::ct_test(CtKey::State, 8)
            } else {
                Vec::new()
            },
        ]
        .concat()
    };
    let rules = |new: bool| {
        let record = [
            translated(new),
            vec![
                Expr::Ct {
                    key: CtKey::ZONE,
                    dreg: Reg::r32(0),
                },
                Expr::Cmp {
                    sreg: Reg::r32(0),
                    op: kpng_netfilter::nft::CmpOp::Eq,
                    data: vec![0, 0],
                },
            ],
            kpng_netfilter::conntrack::FlowRecord::key(f),
            vec![Expr::Dynset {
                op: DynsetOp::Update,
                set: UDP_FLOWS.into(),
                key: Reg::r32(0),
                timeout_ms: Some(timeout_ms),
            }],
            build::verdict(NfVerdict::Accept),
        ]
        .concat();
        let missed = kpng_netfilter::conntrack::FlowRecord::MISSED.to_ne_bytes();
        let untrusted = [
            translated(new),
            build::load_fixed(&[(Load::Mark, Some(&missed[..]))]),
            vec![Expr::Dynset {
                op: DynsetOp::Update,
                set: UDP_UNTRUSTED.into(),
                key: Reg::r32(0),
                timeout_ms: Some(timeout_ms),
            }],
        ]
        .concat();
        vec![record, untrusted]
    };
    for (name, hook, priority, new) in [
        ("udp-flows-prerouting", ChainHook::Prerouting, -199, false),
        ("udp-flows-output", ChainHook::Output, -199, false),
        ("udp-flows-new-prerouting", ChainHook::Prerouting, -99, true),
        ("udp-flows-new-output", ChainHook::Output, -99, true),
    ] {
        let chain = ChainDef {
            base: Some(BaseChain {
                kind: ChainType::Filter,
                hook,
                priority,
            }),
            rules: rules(new),
            class: None,
            retain: false,
            comment: None,
        };
        render.chains.insert(name.to_owned(), chain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_name_only_kubernetes_names() {
        let port = |name: &str| ServicePort {
            name: name.into(),
            ..Default::default()
        };
        let web = ServiceName::new("default", "web");
        assert_eq!(
            port_comment(&web, &port("http"), 80, "tcp").as_deref(),
            Some("default/web:http/tcp")
        );
        assert_eq!(
            port_comment(&web, &port(""), 53, "udp").as_deref(),
            Some("default/web:53/udp")
        );
        assert_eq!(service_comment(&web).as_deref(), Some("default/web"));
        let evil = ServiceName::new("t", "evil\"; flush ruleset; #");
        assert_eq!(service_comment(&evil), None);
        assert_eq!(port_comment(&evil, &port("http"), 80, "tcp"), None);
        assert_eq!(
            port_comment(&web, &port("http\n add table ip pwn"), 80, "tcp"),
            None
        );
        assert_eq!(port_comment(&web, &port("-x"), 80, "tcp"), None);
    }
}
