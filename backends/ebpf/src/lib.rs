//! The eBPF backend of kpng-rs: socket-level load balancing, and tc
//! programs for traffic from outside the node.
//!
//! [`EbpfBackend`] is a [`kpng_sink::Sink`], like the netfilter
//! backends, fed the same rounds of a node's view. Instead of rules that
//! translate packets, it writes BPF maps read by two kinds of program:
//!
//! - **cgroup `sock_addr` programs** (`connect4/6`, `sendmsg4/6`,
//!   `recvmsg4/6`, `getpeername4/6`) serve the node's own sockets and its
//!   pods': when a socket of the cgroup connects (or sends a datagram) to
//!   a Service address, the program picks an endpoint and the socket goes
//!   straight to it. No packet of the connection is translated, so there
//!   is no conntrack entry, no masquerade and no per-packet cost.
//! - **tc programs** on the interfaces of
//!   [`EbpfConfig::tc_interfaces`] serve packets from outside to
//!   NodePorts, external IPs and LB IPs: the destination is rewritten to
//!   an endpoint at ingress and the reply's source restored at egress;
//!   `externalTrafficPolicy: Cluster` flows to other nodes' endpoints are
//!   masqueraded to the node's address, or returned directly
//!   (`ProxyConfig::direct_return`: the client's address kept, the
//!   Service's carried in an IP option to the endpoint's node, whose tc
//!   programs reply to the client straight); source ranges are checked.
//!
//!   With [`EbpfConfig::xdp`], an XDP program on the same interfaces
//!   sends on the packets of flows they opened before the stack.
//!
//!   They also serve ClusterIPs reached from outside (masqueraded as
//!   kube-proxy's rules), REJECT with an ICMP (ICMPv6) port unreachable
//!   they build and send back out the interface, and drop unallocated
//!   Service addresses; TCP, UDP and SCTP (its CRC32c updated when a
//!   port changes): with them, no netfilter rule is needed
//!   (`kpng … to-ebpf --north-south none`).
//!
//! What neither serves (without tc programs, everything from outside;
//! with them, IPv4 options, IPv6 extension headers, fragments) goes on
//! to the node's stack: the `kpng`
//! command runs the nftables backend beside this one for it
//! (docs/reference/semantics.md says row by row which mechanism serves what).
//!
//! - **Selection** comes from the node view's plan, as in the netfilter
//!   backends: ready, serving and terminating fallbacks, the Local
//!   policies, topology. ClientIP affinity is kept per client network
//!   namespace (a pod; the node's own sockets share one) in an LRU map,
//!   with the Service's timeout.
//! - **Balancing** as the Service asks (`kpng.io/balancing`, or
//!   `ProxyConfig::balancing`): at random; round robin, the Service
//!   port's own turn; Maglev, for packets from outside (the tc programs
//!   hash the flow's source address and port into the set's Maglev table,
//!   as the nftables backend does), at random for sockets (a socket keeps
//!   its endpoint for its life).
//! - **Failures** as kube-proxy's: no endpoint at all, or an unknown port
//!   on a live ClusterIP, fails the connect with `ECONNREFUSED`; a Local
//!   policy without a local endpoint, or an unallocated address in the
//!   Service CIDRs, fails it with `EPERM`, at once, where a dropped packet
//!   would make it time out.
//! - **Replies**: `getpeername` and UDP `recvmsg` show the Service
//!   address, not the endpoint's.
//! - **Removed endpoints**: a round that takes endpoints from a UDP
//!   Service port ends the connected UDP sockets a Service sent to them
//!   (a socket iterator calling the kfunc `bpf_sock_destroy`, Linux 6.5,
//!   run in each network namespace of the cgroup's processes; object
//!   `bpf/kpng_end.c`): the owner's next receive fails with
//!   `ECONNABORTED`, and its next connect is balanced anew, as kube-proxy
//!   clears such flows' conntrack entries. Sockets connected to the
//!   endpoint's own address are left alone.
//!   With [`EbpfConfig::end_tcp_connections`] (`--end-tcp-connections`,
//!   off by default as in kube-proxy), a round in which endpoints leave a
//!   Service (gone from the view: one that drains, terminating but
//!   serving, stays in it and keeps its connections) also ends the TCP
//!   connections a Service sent to them (the `iter/tcp` program of the
//!   same object): the endpoint gets a reset, the client's blocked or
//!   next call fails with `ECONNABORTED`.
//!   The first sync after a restart ends those whose endpoint left
//!   while no kpng ran (the pinned connection map remembers where each
//!   socket was sent). [`EbpfSyncStats::udp_sockets_ended`] and
//!   [`EbpfSyncStats::tcp_sockets_ended`] count them;
//!   [`EbpfConfig::end_udp_sockets`] turns UDP's off. Where the kernel
//!   cannot, one warning says so and rounds go on.
//! - **Updates** change only what changed: an incremental [`Round`]
//!   rewrites the Services it lists (every Service when the node's
//!   addresses changed), in an order where every Service stays whole
//!   (a new endpoint set before the records that lead to it, sets changed
//!   in place with their count last); see docs/reference/architecture.md. A full
//!   round, and the first sync after a failure of its own (even in an
//!   incremental round), rewrites everything, adopting what the maps
//!   hold. The backend keeps what it wrote of each Service, never a copy
//!   of the view.
//! - **Map sizes**: the maps that hold the cluster are sized from it
//!   (1.5 × the need, a power of two, at least
//!   [`MapSizes::min_entries`]); a round that would fill one past 3/4
//!   grows it by a planned swap (new maps loaded and filled, every program
//!   switched to them with `BPF_LINK_UPDATE`). A size the operator fixed
//!   ([`MapSizes::fix`]) never grows: a round that needs more fails with
//!   [`Error::MapFull`] before writing anything. [`EbpfBackend::map_fill`]
//!   tells how full each map is.
//! - **Restarts**: maps and links are pinned under a bpffs directory;
//!   the programs stay attached while kpng is down, connections keep
//!   working, and a restart adopts them. [`cleanup`] removes everything.
//!
//! # Example
//!
//! A dry run writes to an in-memory copy of the maps and prints each
//! write; it needs no kernel:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
//! use kpng_model::v1::{Protocol, Service, ServicePort};
//! use kpng_model::view::{NodeView, ServiceView};
//! use kpng_sink::{Round, Sink};
//!
//! let mut backend = EbpfBackend::dry_run(EbpfConfig::default());
//! let svc = Arc::new(kpng_model::ServiceInfo::new(
//!     Service::new("default", "web")
//!         .with_cluster_ips(["10.96.0.10".parse()?])
//!         .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
//! ).expect("valid"));
//! let mut view = NodeView { revision: 1, ..NodeView::default() };
//! view.services.insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
//! backend.sync(&Round::full(&view))?;
//! // No endpoint: a connect to the ClusterIP is refused.
//! assert!(backend.last_writes().contains(&"set services 10.96.0.10 tcp 80 : set 1 empty: reject".to_string()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod datapath;
mod layout;
pub mod object;
mod routes;
mod sizes;
mod sockets;
mod state;
mod sys;
mod tables;
mod traffic;

use std::path::PathBuf;
use std::time::Instant;

use kpng_model::ServiceName;
use kpng_sink::{ProxyConfig, Round, Sink, SinkError};

use datapath::Datapath;
pub use datapath::{
    Counters, DEFAULT_PIN_PATH, ProgramRuns, RunTimeStats, cgroup2_root, cleanup, cleanup_plan,
    map_memory,
};
pub use routes::TcRoutes;
pub use sizes::{CLUSTER_MAPS, CONNECTION_MAPS, DEFAULT_MIN_ENTRIES, MapFill, MapSizes};
use sizes::{Plan, Usage};
use state::{Contribution, State, contribution, nodeport_ips};
use tables::{Batched, Recorder, Tables};
pub use traffic::TrafficReader;

/// Errors of the eBPF backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The routes of the tc interfaces' namespace could not be read.
    #[error("checking the routes to endpoints: {0}")]
    Routes(#[source] kpng_netfilter::Error),
    /// The node's network namespace could not be opened or asked its
    /// cookie (`SO_NETNS_COOKIE`, Linux 5.14).
    #[error("the node's network namespace {}: {source}", netns.as_ref().map_or_else(|| "(this process's)".to_owned(), |p| p.display().to_string()))]
    NodeNetns {
        /// Its path (`None`: this process's own).
        netns: Option<PathBuf>,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The object could not be loaded (a map created or opened).
    #[error("loading the BPF object: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    /// The object lacks a program or map the backend needs.
    #[error("the BPF object has no `{name}`")]
    Missing {
        /// The program or map.
        name: &'static str,
    },
    /// The kernel refused a program (its verifier, or the attach).
    #[error("program {name}: {source}")]
    Program {
        /// The program.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// A program's link could not be kept.
    #[error("program {name}: {source}")]
    Link {
        /// The program.
        name: &'static str,
        /// Why.
        #[source]
        source: aya::programs::links::LinkError,
    },
    /// A link could not be pinned.
    #[error("pinning {}: {source}", path.display())]
    PinLink {
        /// The pin.
        path: PathBuf,
        /// Why.
        #[source]
        source: aya::pin::PinError,
    },
    /// The pin directory is not on a bpf file system.
    #[error("{} is not on a bpf file system: mount one (`mount -t bpf bpf /sys/fs/bpf`) or choose another pin path", path.display())]
    NotBpffs {
        /// The pin directory.
        path: PathBuf,
    },
    /// A pin (a file or directory on bpffs) could not be made, read or
    /// removed.
    #[error("{}: {source}", path.display())]
    Pin {
        /// The pin.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The cgroup to attach to could not be opened.
    #[error("cgroup {}: {source}", path.display())]
    Cgroup {
        /// The cgroup directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A map write, delete or read failed.
    #[error("map {map}: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// Why.
        #[source]
        source: aya::maps::MapError,
    },
    /// The network namespace of the tc interfaces could not be entered.
    #[error("network namespace {}: {source}", path.display())]
    Netns {
        /// Its path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A tc program could not be attached to an interface (no such
    /// interface, or the kernel refused).
    #[error("interface {interface}: {source}")]
    Interface {
        /// The interface.
        interface: String,
        /// Why.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// The kernel's run-time statistics could not be turned on.
    #[error("BPF_ENABLE_STATS: {0}")]
    Stats(#[source] std::io::Error),
    /// tc programs need TCX links (Linux 6.6 or later): they pin, and the
    /// programs stay attached while kpng restarts.
    #[error(
        "tc programs need Linux 6.6 or later (TCX links); leave --tc-interfaces empty to serve traffic from outside with the nftables backend"
    )]
    TcNeedsTcx,
    /// The XDP program attached to no interface of the ones given.
    #[error(
        "interface {interface}: the XDP program attaches neither in the driver ({native}) nor generic ({generic}); leave --xdp off to serve it with the tc programs alone"
    )]
    Xdp {
        /// The interface.
        interface: String,
        /// Why native failed (or "not tried").
        native: String,
        /// Why generic failed (or "not tried").
        generic: String,
    },
    /// A tc interface does not exist (in its network namespace).
    #[error("interface {interface}: {source}")]
    NoInterface {
        /// The interface.
        interface: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread that attaches tc programs in their namespace panicked.
    #[error("the thread attaching tc programs panicked")]
    Thread,
    /// A map size that names no map of the backend, or is 0.
    #[error("map size {name}={entries}: {}", if *entries == 0 { "a size is at least 1" } else { "no such map (the cluster's: kpng_services, kpng_slots, kpng_members, kpng_live, kpng_cidrs, kpng_external, kpng_ranges, kpng_maglev; the connections': kpng_affinity, kpng_reverse, kpng_flows, kpng_ext_flows, kpng_ext_replies, kpng_snat, kpng_snat_out, kpng_ext_affinity)" })]
    MapSize {
        /// The name given.
        name: String,
        /// The size given.
        entries: u32,
    },
    /// A round needs more entries than a map holds, and the map cannot
    /// grow (its size is fixed): nothing of the round was written.
    #[error(
        "map {map} is full: it holds {max_entries} entries and the round needs {need} (the previous state stays programmed; raise its size: --bpf-map-sizes {map}=N)"
    )]
    MapFull {
        /// The map.
        map: &'static str,
        /// Its size.
        max_entries: u32,
        /// What the round needs.
        need: u64,
    },
    /// A program could not be switched to maps loaded anew (a link
    /// update).
    #[error("switching {} to the new maps: {source}", path.display())]
    LinkUpdate {
        /// The link's pin.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing many elements of a map at once failed.
    #[error("map {map}: {source}")]
    Write {
        /// The map.
        map: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A key or value of the wrong size (a bug).
    #[error("map {map}: {len} bytes do not fit its layout")]
    Layout {
        /// The map.
        map: &'static str,
        /// The size given.
        len: usize,
    },
}

/// Settings of the eBPF backend: kube-proxy's ([`ProxyConfig`]), the
/// cgroup to attach to, and where to pin.
///
/// ```
/// use kpng_backend_ebpf::EbpfConfig;
/// use kpng_sink::ProxyConfig;
///
/// let config = EbpfConfig::new(ProxyConfig::default())
///     .cgroup("/sys/fs/cgroup/kubepods")
///     .pin_path("/sys/fs/bpf/kpng");
/// assert_eq!(config.cgroup.to_str(), Some("/sys/fs/cgroup/kubepods"));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EbpfConfig {
    /// kube-proxy's settings.
    pub proxy: ProxyConfig,
    /// The cgroup (v2) whose sockets are served, with its descendants
    /// (default: the cgroup v2 root, so every process of the node).
    pub cgroup: PathBuf,
    /// The bpffs directory for pins (default `/sys/fs/bpf/kpng`).
    pub pin_path: PathBuf,
    /// The node's interfaces that face outside: tc programs there serve
    /// packets from outside to Services with `externalTrafficPolicy:
    /// Local` (default: none; the nftables backend serves them).
    pub tc_interfaces: Vec<String>,
    /// The node's network namespace (`/run/netns/NAME`), where
    /// `tc_interfaces` are and whose sockets are the node's own (see
    /// [`netfilter_beside`](Self::netfilter_beside)); `None`: the
    /// process's own (kpng runs in the node's).
    pub tc_netns: Option<PathBuf>,
    /// The maps' sizes: how those holding the cluster are sized (from
    /// it, with headroom; grown by a planned swap), and the sizes the
    /// operator fixed.
    pub map_sizes: MapSizes,
    /// Whether the programs count each new connection per Service
    /// frontend and endpoint (`kpng_traffic`, read with
    /// [`TrafficReader`]; `--counters`, default off, as nftables').
    pub counters: bool,
    /// Whether a round that takes endpoints from UDP Service ports ends
    /// the connected UDP sockets a Service sent to them (in every network
    /// namespace of the cgroup's processes), as kube-proxy clears their
    /// conntrack entries (default on; Linux 6.5 or later, otherwise a
    /// warning and nothing ended). The first round after a restart ends
    /// those sent to an endpoint that left while no kpng ran.
    pub end_udp_sockets: bool,
    /// Whether netfilter rules run beside the programs (`--north-south
    /// nft`, the default) and check the sources of a LoadBalancer IP with
    /// `loadBalancerSourceRanges`: the socket programs then leave such an
    /// LB IP to them. Without (`--north-south none`), the socket programs
    /// decide, as kube-proxy's rules do by the source: the node's own
    /// sockets (those of its network namespace, [`tc_netns`](Self::tc_netns))
    /// reach an endpoint when a node address is in the ranges and fail
    /// with `EPERM` otherwise; a pod's, when every pod network
    /// (`--cluster-cidr`) is in them, fail when none is, and are left
    /// alone otherwise (a pod's source is not known at connect).
    pub netfilter_beside: bool,
    /// Localhost NodePorts (default on, as kube-proxy's iptables mode,
    /// `--iptables-localhost-nodeports`): a socket of the node's own
    /// network namespace ([`tc_netns`](Self::tc_netns)) connecting (or
    /// sending) to `127.0.0.1:NODEPORT` or `[::1]:NODEPORT` goes to the
    /// NodePort's endpoints, as one to a node address does (the
    /// cluster-policy set, whatever the external policy), and its
    /// `getpeername` shows the loopback address. Each loopback address is
    /// served when `--nodeport-addresses` is unset or holds it, as
    /// kube-proxy's. No packet is translated, so no `route_localnet` is
    /// needed. Other network namespaces (pods) keep their own loopback.
    pub localhost_nodeports: bool,
    /// XDP on the [`tc_interfaces`](Self::tc_interfaces) (`--xdp`;
    /// default none): the packets of flows the tc programs opened are
    /// translated and sent back out before the stack. See [`XdpMode`].
    pub xdp: Option<XdpMode>,
}

/// How the XDP program is attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (native), else generic: an interface where neither
    /// loads is an error naming it.
    Auto,
    /// In the driver only.
    Native,
    /// Generic (after the kernel has made the packet's skb): every
    /// driver.
    Generic,
}

impl Default for EbpfConfig {
    fn default() -> Self {
        Self::new(ProxyConfig::default())
    }
}

impl EbpfConfig {
    /// The cgroup v2 root and the default pin path, with `proxy`.
    pub fn new(proxy: ProxyConfig) -> Self {
        Self {
            proxy,
            cgroup: cgroup2_root().unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup")),
            pin_path: PathBuf::from(DEFAULT_PIN_PATH),
            tc_interfaces: Vec::new(),
            tc_netns: None,
            map_sizes: MapSizes::default(),
            counters: false,
            end_udp_sockets: true,
            netfilter_beside: true,
            localhost_nodeports: true,
            xdp: None,
        }
    }

    /// Attaches the XDP program to the tc interfaces (see
    /// [`EbpfConfig::xdp`]).
    #[must_use]
    pub fn xdp(mut self, mode: Option<XdpMode>) -> Self {
        self.xdp = mode;
        self
    }

    /// Whether the node's own sockets reach NodePorts on loopback (see
    /// [`EbpfConfig::localhost_nodeports`]).
    #[must_use]
    pub fn localhost_nodeports(mut self, on: bool) -> Self {
        self.localhost_nodeports = on;
        self
    }

    /// Whether netfilter rules run beside the programs (see
    /// [`EbpfConfig::netfilter_beside`]).
    #[must_use]
    pub fn netfilter_beside(mut self, on: bool) -> Self {
        self.netfilter_beside = on;
        self
    }

    /// Whether rounds end the connected UDP sockets sent to endpoints
    /// they remove (see [`EbpfConfig::end_udp_sockets`]).
    #[must_use]
    pub fn end_udp_sockets(mut self, on: bool) -> Self {
        self.end_udp_sockets = on;
        self
    }

    /// Whether a round in which endpoints leave a Service (gone from the
    /// node's view: not one that drains, terminating but serving) ends
    /// the TCP connections a Service sent to them, in every network
    /// namespace of the cgroup's processes: the peer gets a reset and the
    /// owner's blocked or next call fails with `ECONNABORTED`. Sets
    /// [`ProxyConfig::end_tcp_connections`] in [`EbpfConfig::proxy`],
    /// which the backend reads (`--end-tcp-connections`; default off,
    /// which keeps kube-proxy's behaviour: such connections live on until
    /// one side ends them). Linux 6.5 or later, otherwise a warning and
    /// nothing ended. The first round after a restart ends those
    /// connected to an endpoint that left while no kpng ran. The
    /// iterators that end them are loaded at the first sync.
    #[must_use]
    pub fn end_tcp_connections(mut self, on: bool) -> Self {
        self.proxy.end_tcp_connections = on;
        self
    }

    /// Whether the programs count connections (see
    /// [`EbpfConfig::counters`]).
    #[must_use]
    pub fn counters(mut self, on: bool) -> Self {
        self.counters = on;
        self
    }

    /// Sizes the maps with `sizes`.
    #[must_use]
    pub fn map_sizes(mut self, sizes: MapSizes) -> Self {
        self.map_sizes = sizes;
        self
    }

    /// Serves the sockets of `path` (a cgroup v2 directory).
    #[must_use]
    pub fn cgroup(mut self, path: impl Into<PathBuf>) -> Self {
        self.cgroup = path.into();
        self
    }

    /// Pins under `path` (on a bpf file system).
    #[must_use]
    pub fn pin_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.pin_path = path.into();
        self
    }

    /// Attaches the tc programs to `interfaces` (the node's interfaces
    /// that face outside).
    #[must_use]
    pub fn tc_interfaces<S: Into<String>>(
        mut self,
        interfaces: impl IntoIterator<Item = S>,
    ) -> Self {
        self.tc_interfaces = interfaces.into_iter().map(Into::into).collect();
        self
    }

    /// The node is network namespace `name` (`/run/netns/NAME`): the tc
    /// interfaces are there, and its sockets are the node's own (see
    /// [`EbpfConfig::tc_netns`]). Without it, the process's own.
    #[must_use]
    pub fn tc_in_netns(mut self, name: &str) -> Self {
        self.tc_netns = Some(PathBuf::from("/run/netns").join(name));
        self
    }
}

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EbpfSyncStats {
    /// Whether it rewrote every Service (a full round: the first, one
    /// after a failure).
    pub replaced: bool,
    /// Map elements written or deleted.
    pub writes: usize,
    /// Services looked at.
    pub services: usize,
    /// Endpoint sets and Service records held after it.
    pub sets: usize,
    /// See `sets`.
    pub records: usize,
    /// Time taken, in microseconds.
    pub micros: u128,
    /// Whether the programs were found attached by a previous run.
    pub adopted: bool,
    /// Whether it grew the maps (a planned swap).
    pub grown: bool,
    /// Connected UDP sockets it ended: sent by a Service to an endpoint
    /// the round took from it (see the crate docs).
    pub udp_sockets_ended: u64,
    /// TCP sockets it ended (with [`EbpfConfig::end_tcp_connections`]):
    /// connected through a Service to an endpoint that left it.
    pub tcp_sockets_ended: u64,
}

/// The socket iterators that end sockets to removed endpoints: loaded at
/// the first round that needs them.
enum Ender {
    NotYet,
    Ready(Box<sockets::SocketEnder>),
    /// The kernel or the object cannot: warned once.
    Unavailable,
}

enum Target {
    Kernel(Box<Datapath>),
    /// Nothing pinned yet: the object is loaded at the first sync, its
    /// maps sized from the cluster. Meanwhile a thread makes the loader
    /// (aya parses the kernel's BTF in `EbpfLoader::new`, ~20 ms): the
    /// first sync renders the view as it does.
    Fresh(Option<std::thread::JoinHandle<aya::EbpfLoader<'static>>>),
    DryRun(Recorder),
}

/// The eBPF backend. See the crate docs.
pub struct EbpfBackend {
    config: EbpfConfig,
    state: State,
    target: Target,
    last: EbpfSyncStats,
    /// The last round, as handed over.
    round: kpng_sink::SyncStats,
    last_writes: Vec<String>,
    /// The endpoints external traffic reaches by an interface without
    /// the tc programs.
    routes: routes::RouteCheck,
    ender: Ender,
    /// The (Service address, endpoint) pairs of UDP Service ports the
    /// round being written takes away.
    udp_gone: std::collections::BTreeSet<sockets::GonePair>,
    /// The pairs of TCP Service ports whose endpoint left the view in the
    /// round being written (with `end_tcp_connections`).
    tcp_gone: std::collections::BTreeSet<sockets::GonePair>,
    /// After the round that loaded or adopted the programs: the endpoints
    /// of each UDP Service address that sockets connect to. The sockets
    /// the programs sent elsewhere before this process (the pinned
    /// connection map remembers them) are to endpoints that left while no
    /// kpng ran: they are ended too.
    udp_live: Option<sockets::Live>,
    /// As `udp_live`, for TCP: the endpoints in the view, used or not
    /// (with `end_tcp_connections`).
    tcp_live: Option<sockets::Live>,
    /// No round of this process has been written yet.
    first_round: bool,
}

impl std::fmt::Debug for EbpfBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfBackend")
            .field("config", &self.config)
            .field("last", &self.last)
            .finish()
    }
}

impl EbpfBackend {
    /// Loads the programs (or adopts those a previous run pinned),
    /// attaches them to the configured cgroup and opens the maps. Where
    /// nothing is pinned yet and no tc interface is given, it only checks
    /// the bpf file system and the cgroup: the first sync loads and
    /// attaches, with maps sized from what it needs.
    pub fn attach(config: EbpfConfig) -> Result<Self, Error> {
        let tc = datapath::Tc {
            interfaces: config.tc_interfaces.clone(),
            netns: config.tc_netns.clone(),
            xdp: config.xdp,
        };
        // Without tc programs, a node where nothing is pinned yet waits
        // for its first sync to load, with maps sized from the cluster.
        // (tc programs are attached at once: their interfaces are checked
        // here.)
        if tc.interfaces.is_empty()
            && datapath::fresh(
                &config.pin_path,
                &config.cgroup,
                &tc,
                &config.map_sizes,
                config.counters,
            )?
        {
            let loader = std::thread::Builder::new()
                .name("kpng-bpf-loader".into())
                .spawn(aya::EbpfLoader::new)
                .ok();
            return Ok(Self::with_target(config, Target::Fresh(loader)));
        }
        let datapath = Datapath::open(
            &config.pin_path,
            &config.cgroup,
            &tc,
            &config.map_sizes,
            &std::collections::BTreeMap::new(),
            config.counters,
            None,
        )?;
        Ok(Self::with_target(
            config,
            Target::Kernel(Box::new(datapath)),
        ))
    }

    /// A backend that writes an in-memory copy of the maps and keeps each
    /// sync's writes as text (`--dry-run`); it touches no kernel.
    pub fn dry_run(config: EbpfConfig) -> Self {
        Self::with_target(config, Target::DryRun(Recorder::default()))
    }

    fn with_target(config: EbpfConfig, target: Target) -> Self {
        Self {
            config,
            state: State::default(),
            target,
            last: EbpfSyncStats::default(),
            round: kpng_sink::SyncStats::default(),
            last_writes: Vec::new(),
            routes: routes::RouteCheck::default(),
            ender: Ender::NotYet,
            udp_gone: std::collections::BTreeSet::new(),
            tcp_gone: std::collections::BTreeSet::new(),
            udp_live: None,
            tcp_live: None,
            first_round: true,
        }
    }

    /// Ends the connected UDP sockets a Service sent to an endpoint the
    /// last round took from it, and (with `end_tcp_connections`) the TCP
    /// sockets it sent to an endpoint that left; the numbers ended (UDP,
    /// TCP).
    fn end_sockets(&mut self) -> (u64, u64) {
        let mut udp = std::mem::take(&mut self.udp_gone);
        let mut tcp = std::mem::take(&mut self.tcp_gone);
        let udp_live = self.udp_live.take();
        let tcp_live = self.tcp_live.take();
        let Target::Kernel(datapath) = &self.target else {
            return (0, 0);
        };
        if !self.config.end_udp_sockets {
            udp.clear();
        }
        let udp_live = udp_live.filter(|_| self.config.end_udp_sockets);
        if !self.config.proxy.end_tcp_connections {
            tcp.clear();
        }
        let tcp_live = tcp_live.filter(|_| self.config.proxy.end_tcp_connections);
        // Maps a previous process left that remember connected sockets:
        // else there is nothing from before to look at (and no iterator to
        // load for it).
        let from_before = (udp_live.is_some() || tcp_live.is_some())
            && datapath.adopted
            && sockets::remembers_any(&datapath.maps_dir().join("kpng_reverse"));
        let (udp_live, tcp_live) = if from_before {
            (udp_live, tcp_live)
        } else {
            (None, None)
        };
        // With TCP endings asked for, the iterators are loaded at the first
        // sync (~0.1 s), not at the first removal: the first connection
        // ended waits for no load, and a kernel that cannot is named at
        // start.
        let preload = self.config.proxy.end_tcp_connections && matches!(self.ender, Ender::NotYet);
        if udp.is_empty() && tcp.is_empty() && udp_live.is_none() && tcp_live.is_none() && !preload
        {
            return (0, 0);
        }
        if matches!(self.ender, Ender::NotYet) {
            self.ender = match sockets::SocketEnder::load(&datapath.maps_dir().join("kpng_reverse"))
            {
                Ok(ender) => Ender::Ready(Box::new(ender)),
                Err(reason) => {
                    tracing::warn!(
                        %reason,
                        "sockets connected to removed endpoints cannot be ended here (needs the kfunc bpf_sock_destroy, Linux 6.5): they keep their endpoint"
                    );
                    Ender::Unavailable
                }
            };
        }
        let Ender::Ready(ender) = &mut self.ender else {
            return (0, 0);
        };
        for (live, gone) in [(&udp_live, &mut udp), (&tcp_live, &mut tcp)] {
            if let Some(live) = live {
                let before = ender.stale(live);
                if !before.is_empty() {
                    tracing::debug!(
                        pairs = before.len(),
                        "sockets connected before this process to endpoints no longer there"
                    );
                }
                gone.extend(before);
            }
        }
        if udp.is_empty() && tcp.is_empty() {
            return (0, 0);
        }
        let ended = ender.end([&udp, &tcp], &self.config.cgroup);
        tracing::debug!(
            udp_pairs = udp.len(),
            tcp_pairs = tcp.len(),
            udp_ended = ended.udp,
            tcp_ended = ended.tcp,
            namespaces = ended.namespaces,
            "sockets connected to removed endpoints ended"
        );
        (ended.udp, ended.tcp)
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &EbpfSyncStats {
        &self.last
    }

    /// The endpoints on other nodes that external traffic under
    /// `externalTrafficPolicy: Cluster` is sent to, but whose route
    /// leaves by an interface without the tc programs (or by none), with
    /// that interface's name (`no route`): that traffic is not
    /// masqueraded, and its replies do not come back through this node.
    /// Each is also a warning when first found. Checked after each
    /// successful sync with tc interfaces (the Services the round
    /// changed; all of them in a full round); empty otherwise.
    pub fn unmasqueraded(&self) -> Vec<(std::net::IpAddr, String)> {
        self.routes.list()
    }

    /// The last sync's writes as text, one per element (dry runs only).
    pub fn last_writes(&self) -> &[String] {
        &self.last_writes
    }

    /// What the maps serve now, as the programs read them, one line per
    /// element, sorted: each record (`services` for sockets, `external`
    /// for tc) with its affinity, its flags, the endpoints its set holds
    /// and that set's ClientIP members; the live ClusterIPs, the Service
    /// CIDRs, the source ranges and the node's addresses. Set numbers,
    /// slot order and pages past a set's count (deleted a round later) do
    /// not show: backends whose maps serve the same give the same lines,
    /// however they got there. Reads the kernel's maps, or a dry run's
    /// copy.
    ///
    /// ```
    /// use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
    ///
    /// let backend = EbpfBackend::dry_run(EbpfConfig::default());
    /// assert!(backend.served()?.is_empty());
    /// # Ok::<(), kpng_backend_ebpf::Error>(())
    /// ```
    pub fn served(&self) -> Result<Vec<String>, Error> {
        match &self.target {
            Target::Kernel(datapath) => tables::served(&datapath.kernel),
            Target::Fresh(_) => Ok(Vec::new()),
            Target::DryRun(recorder) => tables::served(recorder),
        }
    }

    /// The settings.
    pub fn config(&self) -> &EbpfConfig {
        &self.config
    }

    /// The kernel memory of the backend's maps, in bytes (0 in a dry
    /// run): see [`map_memory`].
    pub fn kernel_memory(&self) -> u64 {
        match &self.target {
            Target::Kernel(_) | Target::Fresh(_) => map_memory(&self.config.pin_path),
            Target::DryRun(_) => 0,
        }
    }

    /// What the programs counted (zero in a dry run).
    pub fn counters(&self) -> Result<Counters, Error> {
        match &self.target {
            Target::Kernel(datapath) => datapath.counters(),
            Target::Fresh(_) | Target::DryRun(_) => Ok(Counters::default()),
        }
    }

    /// How full each map sized from the cluster is: the entries the
    /// backend's state asks of it (at most) against its size. Empty in a
    /// dry run (its maps have no size).
    ///
    /// ```
    /// use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
    ///
    /// let backend = EbpfBackend::dry_run(EbpfConfig::default());
    /// assert!(backend.map_fill().is_empty());
    /// ```
    pub fn map_fill(&self) -> Vec<MapFill> {
        let Target::Kernel(datapath) = &self.target else {
            return Vec::new();
        };
        let usage = self.state.usage();
        usage
            .by_name()
            .filter_map(|(map, entries)| {
                let max_entries = *datapath.kernel.capacity.0.get(map)?;
                Some(MapFill {
                    map,
                    entries,
                    max_entries,
                })
            })
            .collect()
    }

    /// Writes one round: everything when it is full; returns whether it
    /// rewrote everything, how many Services it looked at and whether it
    /// grew the maps.
    fn write_round(&mut self, round: &Round<'_>) -> Result<(bool, usize, bool), SinkError> {
        // A failed round leaves the maps partly written (or, when a map
        // was full, unwritten): the driver's next round is full.
        let done = self
            .write_round_inner(round, round.is_full())
            .map_err(|e| SinkError::backend("ebpf", e))?;
        self.first_round = false;
        Ok(done)
    }

    fn write_round_inner(
        &mut self,
        round: &Round<'_>,
        full: bool,
    ) -> Result<(bool, usize, bool), Error> {
        let Self {
            state,
            target,
            config,
            udp_gone,
            tcp_gone,
            udp_live,
            tcp_live,
            first_round,
            ..
        } = self;
        udp_gone.clear();
        tcp_gone.clear();
        let rendered = render(config, round, full);
        if *first_round {
            // The first round of this process (full): what sockets may be
            // connected to now, to end those connected elsewhere before.
            *udp_live = Some(state::udp_live(&rendered.changes));
            if config.proxy.end_tcp_connections {
                *tcp_live = Some(state::tcp_live(&rendered.changes, round.view()));
            }
        }
        if let Target::Fresh(loader) = target {
            let loader = loader.take().and_then(|t| t.join().ok());
            // The first load, sized from what this (full) round needs.
            let mut need = Usage::default();
            for (_, c) in &rendered.changes {
                need.add(&c.usage());
            }
            need.0[Usage::CIDRS] = rendered.cidrs.len() as u64;
            let cluster = need
                .by_name()
                .map(|(name, n)| (name, config.map_sizes.load_size(name, n)))
                .collect();
            // (No tc interface, or the datapath would have been opened
            // at attach: the node's namespace only.)
            let tc = datapath::Tc {
                interfaces: Vec::new(),
                netns: config.tc_netns.clone(),
                xdp: None,
            };
            let datapath = Datapath::open(
                &config.pin_path,
                &config.cgroup,
                &tc,
                &config.map_sizes,
                &cluster,
                config.counters,
                loader,
            )?;
            *target = Target::Kernel(Box::new(datapath));
        }
        if let Target::Kernel(datapath) = target {
            // (A full round after the first compares with what the last
            // wrote; the first has nothing to compare with.)
            *udp_gone = state.udp_gone(&rendered.changes, full);
            if config.proxy.end_tcp_connections {
                *tcp_gone = state.tcp_departed(round);
            }
            let need = if full {
                let mut need = Usage::default();
                for (_, c) in &rendered.changes {
                    need.add(&c.usage());
                }
                need.0[Usage::CIDRS] = rendered.cidrs.len() as u64;
                need
            } else {
                // (Pages the last round cut off go at the start of this
                // one: not counted.)
                state.need_with(&rendered.changes, rendered.cidrs.len())
            };
            if let Plan::Grow(grow) = datapath.kernel.capacity.plan(&config.map_sizes, &need)? {
                // The whole view, into new maps.
                let all = if full {
                    rendered
                } else {
                    render(config, round, true)
                };
                let looked = all.looked;
                let fresh = datapath.swap(&grow, &config.map_sizes, |kernel| {
                    let mut fresh = State::default();
                    let mut batched = Batched::new(kernel);
                    apply(&mut fresh, &mut batched, all, true)?;
                    batched.flush()?;
                    Ok(fresh)
                })?;
                let writes = state.take_writes();
                *state = fresh;
                state.add_writes(writes);
                return Ok((true, looked, true));
            }
            let looked = rendered.looked;
            if full {
                let mut batched = Batched::new(&mut datapath.kernel);
                apply(state, &mut batched, rendered, true)?;
                batched.flush()?;
            } else {
                apply(state, &mut datapath.kernel, rendered, false)?;
            }
            return Ok((full, looked, false));
        }
        let Target::DryRun(recorder) = target else {
            return Ok((full, 0, false));
        };
        let looked = rendered.looked;
        apply(state, recorder, rendered, full)?;
        Ok((full, looked, false))
    }
}

/// A round's Services, rendered: what each changed one (every one in a
/// full round) now contributes, and what else the round sets.
struct Rendered {
    changes: Vec<(ServiceName, Contribution)>,
    cidrs: Vec<kpng_model::IpNet>,
    /// The node's addresses for the tc programs, when they are to be
    /// written.
    node: Option<Vec<std::net::IpAddr>>,
    cidrs_changed: bool,
    /// Services looked at.
    looked: usize,
}

/// From how many Services a full round renders on two threads.
const PARALLEL_RENDER: usize = 2000;

/// Renders one round; `full`: every Service of the view.
fn render(config: &EbpfConfig, round: &Round<'_>, full: bool) -> Rendered {
    let view = round.view();
    let node_ips = nodeport_ips(
        view,
        config.proxy.nodeport_addresses.as_deref(),
        config.localhost_nodeports,
    );
    let external = (!config.tc_interfaces.is_empty()).then_some(&config.proxy);
    let node = (external.is_some() && (full || round.node_changed())).then(|| {
        kpng_model::IpFamily::BOTH
            .into_iter()
            .flat_map(|f| view.node_addresses(f))
            .collect()
    });
    let cidrs = view.service_cidrs_with(&config.proxy.service_cidrs);
    // Without netfilter rules beside, the socket programs decide LB IPs
    // with source ranges by the node's addresses and the pod networks.
    let sources = (!config.netfilter_beside).then(|| state::Sources {
        node: kpng_model::IpFamily::BOTH
            .into_iter()
            .flat_map(|f| view.node_addresses(f))
            .collect(),
        pods: config.proxy.cluster_cidrs.clone(),
    });
    let contribute = |name: &ServiceName, service: &kpng_model::view::ServiceView| {
        let balancing = config.proxy.balancing_of(&service.service);
        contribution(
            name,
            service,
            &node_ips,
            external,
            sources.as_ref(),
            balancing,
        )
    };
    if full {
        let services: Vec<_> = view.services.iter().collect();
        let each = |part: &[(&ServiceName, &std::sync::Arc<kpng_model::view::ServiceView>)]| {
            part.iter()
                .map(|(name, service)| ((*name).clone(), contribute(name, service)))
                .collect::<Vec<(ServiceName, Contribution)>>()
        };
        // A large view's contributions are made on two threads (a cold
        // start's render halves); their order is the view's.
        let changes: Vec<(ServiceName, Contribution)> = if services.len() >= PARALLEL_RENDER {
            let (first, second) = services.split_at(services.len() / 2);
            std::thread::scope(|scope| {
                let later = scope.spawn(|| each(second));
                let mut changes = each(first);
                match later.join() {
                    Ok(rest) => changes.extend(rest),
                    Err(_) => changes.extend(each(second)),
                }
                changes
            })
        } else {
            each(&services)
        };
        let looked = changes.len();
        return Rendered {
            changes,
            cidrs,
            node,
            cidrs_changed: true,
            looked,
        };
    }
    // The node's addresses are where NodePorts are reached: a change of
    // them touches every Service (rare), and those the round removes.
    let names: Vec<ServiceName> = if round.node_changed() {
        let mut all: Vec<ServiceName> = view.services.keys().cloned().collect();
        all.extend(round.removed().cloned());
        all.sort();
        all.dedup();
        all
    } else {
        round.services().map(|change| change.name.clone()).collect()
    };
    let changes: Vec<(ServiceName, Contribution)> = names
        .into_iter()
        .map(|name| {
            let new = view
                .services
                .get(&name)
                .map(|service| contribute(&name, service))
                .unwrap_or_default();
            (name, new)
        })
        .collect();
    let looked = changes.len();
    Rendered {
        changes,
        cidrs,
        node,
        cidrs_changed: round.service_cidrs_changed(),
        looked,
    }
}

/// One round's writes; `full`: rewrite everything, adopting what the maps
/// hold.
fn apply(
    state: &mut State,
    tables: &mut dyn Tables,
    rendered: Rendered,
    full: bool,
) -> Result<(), Error> {
    state.begin_round(tables)?;
    if let Some(ips) = &rendered.node {
        state.set_node(tables, ips)?;
    }
    if full {
        let mut services = rendered.changes.into_iter();
        state.replace_all(tables, &mut services, &rendered.cidrs)?;
        return Ok(());
    }
    if rendered.cidrs_changed {
        state.set_cidrs(tables, &rendered.cidrs)?;
    }
    for (name, new) in rendered.changes {
        state.update_service(tables, &name, new)?;
    }
    Ok(())
}

impl kpng_sink::RoundReport for EbpfBackend {
    fn last_sync(&self) -> kpng_sink::SyncStats {
        self.round.wrote(self.last.replaced, self.last.writes)
    }
    fn write_script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for line in &self.last_writes {
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

/// Writes what changed. Map writes are not transactional: each one is
/// atomic, and their order keeps every Service whole, but a failed round
/// leaves the Services it reached updated and the others as they were;
/// the driver's next round is then full, and rewrites everything.
impl Sink for EbpfBackend {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let start = Instant::now();
        let revision = round.revision();
        self.round = kpng_sink::SyncStats::of(round);
        let result = self.write_round(round);
        if let (Ok(_), Target::Kernel(datapath)) = (&result, &mut self.target) {
            // The maps serve now: whatever an older object, or another
            // cgroup or interface, left attached can go.
            datapath.retire_stale();
        }
        let (udp_sockets_ended, tcp_sockets_ended) = if result.is_ok() {
            self.end_sockets()
        } else {
            self.udp_gone.clear();
            self.tcp_gone.clear();
            (0, 0)
        };
        // With tc programs: are the endpoints of external traffic reached
        // through them? (A failure to ask is logged; the round stands.)
        if result.is_ok()
            && !self.config.tc_interfaces.is_empty()
            && matches!(self.target, Target::Kernel(_))
            && let Err(e) = self.routes.check(&self.config, round)
        {
            tracing::warn!(error = %e, "cannot check the routes to endpoints");
        }
        let writes = self.state.take_writes();
        if let Target::DryRun(recorder) = &mut self.target {
            self.last_writes = recorder.take_lines();
        }
        let (sets, records) = self.state.sizes();
        let adopted = matches!(&self.target, Target::Kernel(d) if d.adopted);
        let (full, services, grown) = match &result {
            Ok(done) => *done,
            Err(_) => (false, 0, false),
        };
        self.last = EbpfSyncStats {
            replaced: full,
            writes,
            services,
            sets,
            records,
            micros: start.elapsed().as_micros(),
            adopted,
            grown,
            udp_sockets_ended,
            tcp_sockets_ended,
        };
        match &result {
            Ok(_) => tracing::debug!(revision, full, writes, "ebpf sync applied"),
            Err(e) => tracing::warn!(revision, error = %e, "ebpf sync failed"),
        }
        result.map(|_| ())
    }
}

#[cfg(test)]
mod tests {

    use kpng_model::view::NodeView;
    use kpng_sink::{Round, Sink};

    use super::*;

    /// The view of `node-0` with Services `svc-N` for each N of
    /// `services`, each with two endpoints.
    fn view(services: &[usize]) -> NodeView {
        let store = kpng_testkit::history::store_of(services);
        kpng_view::node_view(&store.snapshot(), kpng_testkit::history::NODE)
    }

    /// A large view's full render (on two threads) gives each Service's
    /// contribution, in the view's order, as rendering them one by one.
    #[test]
    fn a_large_full_render_is_each_service_s_contribution_in_order() {
        let cluster = kpng_testkit::Cluster::synthetic(kpng_testkit::ClusterShape {
            services: PARALLEL_RENDER + 7,
            endpoints: (PARALLEL_RENDER + 7) * 2,
            nodes: 3,
            zones: 1,
        });
        let mut store = kpng_store::Store::new();
        cluster.load_into(&mut store);
        let v = kpng_view::node_view(&store.snapshot(), "node-0");
        let config = EbpfConfig::default();
        let rendered = render(&config, &Round::full(&v), true);
        let node_ips = nodeport_ips(&v, None, config.localhost_nodeports);
        let one_by_one: Vec<(ServiceName, Contribution)> = v
            .services
            .iter()
            .map(|(name, service)| {
                let balancing = config.proxy.balancing_of(&service.service);
                let c = contribution(name, service, &node_ips, None, None, balancing);
                (name.clone(), c)
            })
            .collect();
        assert_eq!(rendered.changes.len(), PARALLEL_RENDER + 7);
        assert!(rendered.changes == one_by_one);
    }

    /// The TCP pairs of an incremental round: the endpoints that left
    /// the view, at each socket frontend of the Service's TCP port, each
    /// in its family; not one that drains (terminating but serving while
    /// another is ready: in the view, in neither set). A removed Service:
    /// every endpoint it had. What a first round after a restart leaves
    /// connected: every endpoint in the view, the draining one too.
    #[test]
    fn tcp_pairs_are_the_endpoints_that_left_the_view_not_those_that_drain() {
        use kpng_model::v1::Protocol;
        use kpng_testkit::history::{Change, NODE, apply};
        let mut store = kpng_store::Store::new();
        let mut interner = kpng_model::endpoint::Interner::new();
        let ready = |id: u8| (id, 0, true, true, false);
        // Dual stack: endpoints 1-3 IPv4, 4 IPv6.
        let all = vec![ready(1), ready(2), ready(3), ready(4)];
        apply(
            &mut store,
            &[
                Change::Node(1),
                Change::Service(1, 8),
                Change::Endpoints(1, all),
            ],
            &mut interner,
        );
        let v1 = kpng_view::node_view(&store.snapshot(), NODE);
        let mut backend = EbpfBackend::dry_run(EbpfConfig::default().end_tcp_connections(true));
        backend.sync(&Round::full(&v1)).expect("sync");

        apply(
            &mut store,
            &[Change::Endpoints(
                1,
                vec![(2, 0, false, true, true), ready(3)],
            )],
            &mut interner,
        );
        let v2 = kpng_view::node_view(&store.snapshot(), NODE);
        let service = v1.services.values().next().expect("a Service");
        let tcp: Vec<_> = service
            .service
            .ports
            .iter()
            .filter(|p| p.protocol_name() == Some("tcp"))
            .collect();
        assert!(!tcp.is_empty());
        // Each endpoint's bytes at each TCP port's target, by id.
        let at = |id: &str| -> std::collections::BTreeSet<[u8; 20]> {
            service
                .endpoints
                .iter()
                .filter(|e| e.ip().to_string().ends_with(id))
                .flat_map(|e| {
                    tcp.iter().filter_map(|p| {
                        let port = e.port(&p.name, Protocol::Tcp)?;
                        Some(sockets::endpoint_bytes(e.ip(), port))
                    })
                })
                .collect()
        };
        let endpoints = |pairs: &std::collections::BTreeSet<sockets::GonePair>| {
            for p in pairs {
                assert_eq!(p[18], p[38], "one family: {p:?}");
            }
            pairs
                .iter()
                .map(|p| <[u8; 20]>::try_from(&p[20..]).expect("20 bytes"))
                .collect::<std::collections::BTreeSet<_>>()
        };
        let pairs = backend.state.tcp_departed(&Round::between(&v1, &v2));
        let mut left = at(".1.1");
        left.extend(at(":1:4"));
        assert_eq!(left.len(), 2 * tcp.len());
        assert_eq!(endpoints(&pairs), left, "1 and 4 left; 2 drains");
        // Every ClusterIP is a frontend of them.
        let services: std::collections::BTreeSet<std::net::IpAddr> = pairs
            .iter()
            .map(|p| crate::layout::Endpoint::from_bytes(&p[..20]).ip)
            .collect();
        for ip in service.service.cluster_ips(kpng_model::IpFamily::V4) {
            assert!(services.contains(ip), "{ip}");
        }
        for ip in service.service.cluster_ips(kpng_model::IpFamily::V6) {
            assert!(services.contains(ip), "{ip}");
        }
        backend.sync(&Round::between(&v1, &v2)).expect("sync");

        // After a restart: the draining endpoint is still one to be
        // connected to; the gone one is not.
        let rendered = render(&backend.config, &Round::full(&v2), true);
        let live = state::tcp_live(&rendered.changes, &v2);
        let connected: std::collections::BTreeSet<[u8; 20]> =
            live.values().flatten().copied().collect();
        let mut kept = at(".1.2");
        kept.extend(at(".1.3"));
        assert_eq!(connected, kept);

        apply(&mut store, &[Change::RemoveService(1)], &mut interner);
        let v3 = kpng_view::node_view(&store.snapshot(), NODE);
        let pairs = backend.state.tcp_departed(&Round::between(&v2, &v3));
        assert_eq!(endpoints(&pairs), kept, "the Service's every endpoint");
        // None in a full round.
        assert!(backend.state.tcp_departed(&Round::full(&v3)).is_empty());
    }

    fn fail(backend: &mut EbpfBackend, on: bool) {
        if let Target::DryRun(recorder) = &mut backend.target {
            recorder.fail = on;
        }
    }

    /// After a failed round, the driver's next round is full and rewrites
    /// everything: the maps then serve what a fresh backend's do after a
    /// full round.
    #[test]
    fn after_a_failure_the_drivers_full_round_rewrites_everything() {
        let config = || EbpfConfig::default().tc_interfaces(["eth0"]);
        let mut backend = EbpfBackend::dry_run(config());
        let v1 = view(&[0, 1]);
        backend.sync(&Round::full(&v1)).expect("first sync");
        assert!(backend.last_sync().replaced);

        // svc-0 goes, svc-2 comes: the first write fails.
        let v2 = view(&[1, 2]);
        fail(&mut backend, true);
        backend
            .sync(&Round::between(&v1, &v2))
            .expect_err("writes fail");
        fail(&mut backend, false);

        // The driver's next round is full, as after any failure.
        let v3 = view(&[1, 2, 3]);
        backend.sync(&Round::full(&v3)).expect("retry");
        assert!(
            backend.last_sync().replaced,
            "the retry rewrites everything"
        );
        let mut fresh = EbpfBackend::dry_run(config());
        fresh.sync(&Round::full(&v3)).expect("fresh");
        assert_eq!(
            backend.served().expect("maps"),
            fresh.served().expect("maps")
        );

        // Then incremental again.
        let v4 = view(&[2, 3]);
        backend.sync(&Round::between(&v3, &v4)).expect("sync");
        assert!(!backend.last_sync().replaced);
        let mut fresh = EbpfBackend::dry_run(config());
        fresh.sync(&Round::full(&v4)).expect("fresh");
        assert_eq!(
            backend.served().expect("maps"),
            fresh.served().expect("maps")
        );
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
