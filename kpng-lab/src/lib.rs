//! The real-packet lab of kpng-rs: every backend, one set of scenarios.
//!
//! A [`Lab`] is a set of network namespaces a test creates (a node that
//! routes and runs the backend's rules, endpoint pods with echo servers,
//! clients, an upstream router) and deletes on drop. A [`Proxy`] drives a
//! backend from manifests through the real ingest and node view into the
//! lab's node namespace. The [`scenarios`] are written once against
//! [`LabBackend`] and run by `tests/nft.rs` and `tests/iptables.rs` alike;
//! `benches/backends.rs` prints the same figures for each backend. The
//! [`cluster`] lab runs the distributed design instead: one `kpng` server
//! and one agent per node, over N node namespaces on a fabric
//! (`tests/cluster.rs`, `benches/cluster.rs`).
//!
//! Not published: it is the workspace's test bench, not a library.

pub mod bench;
pub mod cluster;
pub mod held;
mod lab;
pub mod scenarios;
mod witness;

pub use lab::{LOCAL_HOSTS, Lab, endpoints, maglev_picks, reached, run, settle, unavailable};

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_backend_iptables::IptablesBackend;
use kpng_backend_nft::NftBackend;
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_view::NodeProjector;

/// The node the proxy runs for, in manifests.
pub const NODE: &str = "node-a";

/// Settings every backend takes, as kube-proxy's flags spell them.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `--cluster-cidr`, comma-separated.
    pub cluster_cidr: String,
    /// `--service-cidr`, comma-separated.
    pub service_cidr: String,
    /// `--nodeport-addresses`, comma-separated; `None`: the node's IPs.
    pub nodeport_addresses: Option<String>,
    /// `--masquerade-all`.
    pub masquerade_all: bool,
    /// `--end-tcp-connections`.
    pub end_tcp_connections: bool,
    /// `--load-balancer-mode` (unspecified: SNAT).
    pub load_balancer_mode: kpng_sink::LoadBalancerMode,
}

impl Settings {
    /// kube-proxy's settings these flags give.
    ///
    /// # Panics
    /// On a list that is not comma-separated CIDRs.
    pub fn proxy(&self) -> kpng_sink::ProxyConfig {
        let nets = |list: &str| -> Vec<kpng_sink::IpNet> {
            list.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| c.parse().expect("a CIDR"))
                .collect()
        };
        let mut proxy = kpng_sink::ProxyConfig::default()
            .cluster_cidrs(nets(&self.cluster_cidr))
            .service_cidrs(nets(&self.service_cidr))
            .masquerade_all(self.masquerade_all)
            .end_tcp_connections(self.end_tcp_connections)
            .load_balancer_mode(self.load_balancer_mode);
        if let Some(list) = &self.nodeport_addresses {
            proxy = proxy.nodeport_addresses(nets(list));
        }
        proxy
    }

    /// The lab's usual networks: pods in 10.244.0.0/16, Services in
    /// 10.96.0.0/16.
    pub fn lab() -> Self {
        Self {
            cluster_cidr: "10.244.0.0/16".into(),
            service_cidr: "10.96.0.0/16".into(),
            ..Self::default()
        }
    }
}

/// A backend the lab can run.
pub trait LabBackend: Sink + Sized {
    /// Its name in reports.
    const NAME: &'static str;
    /// The commands it needs (checked before a lab starts).
    const TOOLS: &'static [&'static str];
    /// A backend that programs the lab's node namespace.
    fn in_lab(lab: &Lab, settings: &Settings) -> Self;
    /// Whether the last sync replaced everything (a full sync).
    fn last_full(&self) -> bool;
    /// How many commands (rules, elements) the last sync wrote.
    fn last_commands(&self) -> usize;
    /// Anything else worth reporting about the last sync.
    fn last_note(&self) -> String {
        String::new()
    }
    /// The rules as the kernel holds them in the lab's node namespace.
    fn dump(lab: &Lab) -> String;
    /// Removes everything the backend programmed in the lab's node.
    fn clear(lab: &Lab);
    /// Whether the backend serves this node's sockets before any packet
    /// is sent (socket-level load balancing): then nothing is translated,
    /// so nothing is masqueraded (hairpin included), and what a packet
    /// path drops fails the connect at once instead of timing out. The
    /// scenarios state each difference where it shows.
    const SOCKETS: bool = false;
    /// Whether the backend translates packets from outside at the node's
    /// interfaces (tc programs) rather than in netfilter: then it
    /// masquerades `externalTrafficPolicy: Cluster` traffic only towards
    /// endpoints on other nodes, and a local endpoint sees the client.
    const TC: bool = false;
    /// Why the backend cannot run here beyond its tools, if it cannot.
    fn unavailable() -> Option<String> {
        None
    }
    /// The mechanisms it programs, for `kpng explain` (the lab checks
    /// every probe against it).
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Nftables;
}

impl LabBackend for NftBackend {
    const NAME: &'static str = "nftables";
    const TOOLS: &'static [&'static str] = &["nft"];

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        let config = kpng_backend_nft::NftConfig::new(settings.proxy());
        NftBackend::new(config.in_netns(&lab.ns("node")))
    }
    fn last_full(&self) -> bool {
        self.last_sync().replaced
    }
    fn last_commands(&self) -> usize {
        self.last_sync().commands
    }
    fn last_note(&self) -> String {
        if self.last_sync().adopted {
            "adopted: the tables read back over netlink were the ones wanted".into()
        } else {
            String::new()
        }
    }
    /// `nft list ruleset`, without the pick maps' element counters
    /// (` counter packets N bytes M`: they change with traffic) and the
    /// time elements with a timeout have left (`expires 1m59s`: it runs
    /// down; the word stays).
    fn dump(lab: &Lab) -> String {
        without_expiry(&without_counts(&lab.in_node(&["nft", "list", "ruleset"])))
    }
    fn clear(lab: &Lab) {
        for family in ["ip", "ip6"] {
            lab.in_node(&["nft", "delete", "table", family, "kpng"]);
        }
    }
}

/// `text` without the time left of nft's elements with a timeout
/// (`expires 1m59s780ms` becomes `expires`).
pub fn without_expiry(text: &str) -> String {
    const EXPIRES: &str = " expires ";
    let mut parts = text.split(EXPIRES);
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        out.push_str(" expires");
        out.push_str(part.trim_start_matches(|c: char| c.is_ascii_alphanumeric()));
    }
    out
}

/// `text` without nft's element and rule counters (` counter packets N
/// bytes M`).
pub fn without_counts(text: &str) -> String {
    const COUNTER: &str = " counter packets ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(COUNTER) {
        out.push_str(&rest[..at]);
        let after = &rest[at + COUNTER.len()..];
        // "N bytes M": skip the two numbers and the word between.
        let skip = after
            .split_inclusive(' ')
            .take(2)
            .map(str::len)
            .sum::<usize>();
        let after = &after[skip..];
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

impl LabBackend for IptablesBackend {
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Iptables;
    const NAME: &'static str = "iptables";
    const TOOLS: &'static [&'static str] = &["iptables-restore", "ip6tables-restore"];

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        iptables_in_lab(lab, settings, iptables_mode())
    }
    fn last_full(&self) -> bool {
        self.last_sync().replaced
    }
    fn last_commands(&self) -> usize {
        self.last_sync().rules
    }
    fn last_note(&self) -> String {
        let layout = if self.last_sync().compact {
            "compact layout"
        } else {
            "kube-proxy layout"
        };
        format!("{} chains rewritten, {layout}", self.last_sync().chains)
    }
    fn dump(lab: &Lab) -> String {
        iptables_dump(lab, iptables_word())
    }
    fn clear(lab: &Lab) {
        iptables_clear(lab, iptables_word());
    }
}

/// The eBPF backend as `kpng … to-ebpf --tc-interfaces …` runs it: the
/// sockets of the node's cgroup (here the lab's, holding the
/// [`LOCAL_HOSTS`]' clients) are balanced by its socket programs, packets
/// from outside by its tc programs on every node link, and what those
/// leave by the nftables backend in the same process.
#[derive(Debug)]
pub struct EbpfWithNft {
    /// The socket-level backend.
    pub ebpf: EbpfBackend,
    /// The nftables backend, for traffic no local socket sent.
    pub nft: NftBackend,
}

/// Both sync each round, even after one fails; the first error is
/// returned.
impl Sink for EbpfWithNft {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let ebpf = self.ebpf.sync(round);
        let nft = self.nft.sync(round);
        ebpf.and(nft)
    }
}

impl LabBackend for EbpfWithNft {
    const NAME: &'static str = "ebpf+nftables";
    const TOOLS: &'static [&'static str] = &["nft"];
    const SOCKETS: bool = true;
    const TC: bool = true;
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Ebpf {
        tc: true,
        netfilter: true,
    };

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        let config = ebpf_config(lab, settings, true);
        EbpfWithNft {
            ebpf: EbpfBackend::attach(config).expect("the eBPF programs attach"),
            nft: NftBackend::in_lab(lab, settings),
        }
    }
    fn last_full(&self) -> bool {
        self.ebpf.last_sync().replaced && self.nft.last_sync().replaced
    }
    fn last_commands(&self) -> usize {
        self.ebpf.last_sync().writes + self.nft.last_sync().commands
    }
    fn last_note(&self) -> String {
        format!(
            "{} map writes, {} nft commands",
            self.ebpf.last_sync().writes,
            self.nft.last_sync().commands
        )
    }
    fn dump(lab: &Lab) -> String {
        NftBackend::dump(lab)
    }
    fn clear(lab: &Lab) {
        NftBackend::clear(lab);
        let (_, pins) = lab.bpf_env();
        let _ = kpng_backend_ebpf::cleanup(&pins);
    }
    fn unavailable() -> Option<String> {
        kpng_testkit::bpf::unavailable()
    }
}

/// The eBPF backend's settings in `lab`: the lab's cgroup (its
/// [`LOCAL_HOSTS`]' clients) and bpffs, the lab's node namespace as the
/// node's own (whose sockets get localhost NodePorts, and the source
/// ranges' verdict of the node), and with `tc` the tc programs on every
/// node link.
pub fn ebpf_config(lab: &Lab, settings: &Settings, tc: bool) -> EbpfConfig {
    let (cgroup, pins) = lab.bpf_env();
    // The node's namespace: its sockets are the node's own.
    let config = EbpfConfig::new(settings.proxy())
        .cgroup(cgroup)
        .pin_path(pins)
        .tc_in_netns(&lab.ns("node"));
    if tc {
        config.tc_interfaces(lab.node_links())
    } else {
        config
    }
}

/// The eBPF backend alone (no netfilter backend beside it), attached with
/// `config` (the lab's: [`ebpf_config`], changed as a test needs), every
/// probe of `lab` checked against `kpng explain` for it, with tc when
/// `config` has interfaces.
///
/// # Panics
/// When the programs do not attach.
pub fn ebpf_alone_proxy(lab: &Lab, settings: &Settings, config: EbpfConfig) -> Proxy<EbpfBackend> {
    let tc = !config.tc_interfaces.is_empty();
    let config = config.netfilter_beside(false);
    let localhost = config.localhost_nodeports;
    Proxy::with(EbpfBackend::attach(config).expect("the eBPF programs attach"))
        .explained_in(lab, settings, ebpf_alone(tc))
        .localhost_nodeports(localhost)
}

/// What `kpng explain` follows for the eBPF backend alone (no netfilter
/// backend beside it), with or without its tc programs.
pub fn ebpf_alone(tc: bool) -> kpng_explain::DataPath {
    kpng_explain::DataPath::Ebpf {
        tc,
        netfilter: false,
    }
}

/// The eBPF backend alone, with no netfilter backend beside it: what its
/// benchmark measures (the lab's clients of [`LOCAL_HOSTS`] are in its
/// cgroup).
#[derive(Debug)]
pub struct EbpfOnly(pub EbpfBackend);

impl Sink for EbpfOnly {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.0.sync(round)
    }
}

impl LabBackend for EbpfOnly {
    const NAME: &'static str = "ebpf";
    const TOOLS: &'static [&'static str] = &[];
    const SOCKETS: bool = true;
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Ebpf {
        tc: false,
        netfilter: false,
    };

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        let config = ebpf_config(lab, settings, false);
        EbpfOnly(EbpfBackend::attach(config).expect("the eBPF programs attach"))
    }
    fn last_full(&self) -> bool {
        self.0.last_sync().replaced
    }
    fn last_commands(&self) -> usize {
        self.0.last_sync().writes
    }
    fn last_note(&self) -> String {
        let stats = self.0.last_sync();
        format!(
            "{} sets, {} records, the backend's sync {:.1} ms; kernel maps {:.1} MiB{}",
            stats.sets,
            stats.records,
            stats.micros as f64 / 1e3,
            self.0.kernel_memory() as f64 / (1024.0 * 1024.0),
            if stats.adopted {
                "; adopted the pinned programs"
            } else {
                ""
            }
        )
    }
    fn dump(lab: &Lab) -> String {
        NftBackend::dump(lab)
    }
    fn clear(lab: &Lab) {
        let (_, pins) = lab.bpf_env();
        let _ = kpng_backend_ebpf::cleanup(&pins);
    }
    fn unavailable() -> Option<String> {
        kpng_testkit::bpf::unavailable()
    }
}

/// The eBPF backend as `kpng … to-ebpf --north-south none
/// --tc-interfaces …` runs it: the socket programs for the node's cgroup,
/// the tc programs on every node link for everything from outside, and no
/// netfilter backend at all. Each sync checks that the node holds no
/// nftables table, so every scenario run with it shows the programs did
/// it all.
#[derive(Debug)]
pub struct EbpfTc {
    /// The backend.
    pub ebpf: EbpfBackend,
    /// The lab's node namespace.
    node: String,
}

impl EbpfTc {
    /// The node namespace's nftables tables (`nft list tables`).
    ///
    /// # Panics
    /// When `nft` cannot run there.
    pub fn nft_tables(node_ns: &str) -> String {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", node_ns, "nft", "list", "tables"])
            .output()
            .expect("nft list tables in the node namespace");
        assert!(out.status.success(), "nft list tables: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Syncs the backend, then checks that the node holds no nftables table.
///
/// # Panics
/// When it holds one.
impl Sink for EbpfTc {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let result = self.ebpf.sync(round);
        let tables = Self::nft_tables(&self.node);
        assert!(
            tables.trim().is_empty(),
            "--north-south none: no nftables table in the node, found: {tables}"
        );
        result
    }
}

impl LabBackend for EbpfTc {
    const NAME: &'static str = "ebpf-tc";
    const TOOLS: &'static [&'static str] = &["nft"];
    const SOCKETS: bool = true;
    const TC: bool = true;
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Ebpf {
        tc: true,
        netfilter: false,
    };

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        let config = ebpf_config(lab, settings, true).netfilter_beside(false);
        EbpfTc {
            ebpf: EbpfBackend::attach(config).expect("the eBPF programs attach"),
            node: lab.ns("node"),
        }
    }
    fn last_full(&self) -> bool {
        self.ebpf.last_sync().replaced
    }
    fn last_commands(&self) -> usize {
        self.ebpf.last_sync().writes
    }
    fn last_note(&self) -> String {
        format!("{} map writes", self.ebpf.last_sync().writes)
    }
    fn dump(lab: &Lab) -> String {
        NftBackend::dump(lab)
    }
    fn clear(lab: &Lab) {
        let (_, pins) = lab.bpf_env();
        let _ = kpng_backend_ebpf::cleanup(&pins);
    }
    fn unavailable() -> Option<String> {
        kpng_testkit::bpf::unavailable()
    }
}

/// The iptables backend forced to iptables-legacy, so the scenarios run
/// against both modes in one test run.
#[derive(Debug)]
pub struct LegacyIptables(pub IptablesBackend);

impl Sink for LegacyIptables {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.0.sync(round)
    }
}

impl LabBackend for LegacyIptables {
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Iptables;
    const NAME: &'static str = "iptables-legacy";
    const TOOLS: &'static [&'static str] = &["iptables-legacy-restore", "ip6tables-legacy-restore"];

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        Self(iptables_in_lab(
            lab,
            settings,
            Some(kpng_backend_iptables::Mode::Legacy),
        ))
    }
    fn last_full(&self) -> bool {
        self.0.last_full()
    }
    fn last_commands(&self) -> usize {
        self.0.last_commands()
    }
    fn last_note(&self) -> String {
        self.0.last_note()
    }
    fn dump(lab: &Lab) -> String {
        iptables_dump(lab, "legacy")
    }
    fn clear(lab: &Lab) {
        iptables_clear(lab, "legacy");
    }
}

/// The iptables backend in the compact layout
/// ([`kpng_backend_iptables::Layout::Compact`]), whatever the size, in
/// the lab's mode (`KPNG_LAB_IPTABLES_MODE`): the scenarios run against
/// both layouts in one test run.
#[derive(Debug)]
pub struct CompactIptables(pub IptablesBackend);

impl Sink for CompactIptables {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.0.sync(round)
    }
}

impl LabBackend for CompactIptables {
    const DATA_PATH: kpng_explain::DataPath = kpng_explain::DataPath::Iptables;
    const NAME: &'static str = "iptables-compact";
    const TOOLS: &'static [&'static str] = IptablesBackend::TOOLS;

    fn in_lab(lab: &Lab, settings: &Settings) -> Self {
        let mut backend = iptables_in_lab(lab, settings, iptables_mode());
        backend.set_layout(kpng_backend_iptables::Layout::Compact);
        Self(backend)
    }
    fn last_full(&self) -> bool {
        self.0.last_full()
    }
    fn last_commands(&self) -> usize {
        self.0.last_commands()
    }
    fn last_note(&self) -> String {
        self.0.last_note()
    }
    fn dump(lab: &Lab) -> String {
        IptablesBackend::dump(lab)
    }
    fn clear(lab: &Lab) {
        IptablesBackend::clear(lab);
    }
}

fn iptables_in_lab(
    lab: &Lab,
    settings: &Settings,
    mode: Option<kpng_backend_iptables::Mode>,
) -> IptablesBackend {
    let mut config = kpng_backend_iptables::IptablesConfig::new(settings.proxy());
    config.mode = mode;
    config.layout = iptables_layout();
    IptablesBackend::new(config.in_netns(&lab.ns("node")))
}

/// The iptables layout the lab uses: `KPNG_LAB_IPTABLES_LAYOUT=compact`,
/// `kube-proxy` or `auto` (the default).
///
/// # Panics
/// On another value.
pub fn iptables_layout() -> kpng_backend_iptables::Layout {
    match std::env::var("KPNG_LAB_IPTABLES_LAYOUT") {
        Ok(word) => word.parse().expect("KPNG_LAB_IPTABLES_LAYOUT"),
        Err(_) => kpng_backend_iptables::Layout::Auto,
    }
}

fn iptables_dump(lab: &Lab, mode: &str) -> String {
    let mut out = lab.in_node(&[&format!("iptables-{mode}-save")]);
    out.push_str(&lab.in_node(&[&format!("ip6tables-{mode}-save")]));
    out
}

fn iptables_clear(lab: &Lab, mode: &str) {
    for tool in [format!("iptables-{mode}"), format!("ip6tables-{mode}")] {
        for table in ["nat", "filter"] {
            lab.in_node(&[&tool, "-t", table, "-F"]);
            lab.in_node(&[&tool, "-t", table, "-X"]);
        }
    }
}

/// The iptables mode the lab uses: `KPNG_LAB_IPTABLES_MODE=legacy` picks
/// iptables-legacy; otherwise the backend detects it (nft on a fresh
/// node).
pub fn iptables_mode() -> Option<kpng_backend_iptables::Mode> {
    match std::env::var("KPNG_LAB_IPTABLES_MODE").as_deref() {
        Ok("legacy") => Some(kpng_backend_iptables::Mode::Legacy),
        Ok("nft") => Some(kpng_backend_iptables::Mode::Nft),
        _ => None,
    }
}

/// The iptables command of the lab's mode: `iptables_tool("iptables")` is
/// `iptables-nft` or `iptables-legacy`.
pub fn iptables_tool(base: &str) -> String {
    format!("{base}-{}", iptables_word())
}

fn iptables_word() -> &'static str {
    match iptables_mode() {
        Some(kpng_backend_iptables::Mode::Legacy) => "legacy",
        _ => "nft",
    }
}

/// Skips the calling test, with a clear message, when the lab cannot run
/// backend `$b` here (not root, or a tool missing).
#[macro_export]
macro_rules! require_lab {
    ($b:ty) => {
        if let Some(why) = $crate::unavailable(<$b as $crate::LabBackend>::TOOLS)
            .or_else(<$b as $crate::LabBackend>::unavailable)
        {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

/// Defines one `#[test]` per shared scenario for backend `$b` (a type
/// implementing [`LabBackend`]), in the calling module.
#[macro_export]
macro_rules! scenario_tests {
    ($b:ty) => {
        #[test]
        fn cluster_ip_balancing_affinity_masquerade_hairpin_and_udp() {
            $crate::scenarios::cluster_ip_balancing_affinity_masquerade_hairpin_and_udp::<$b>();
        }
        #[test]
        fn external_traffic_nodeports_external_ips_and_load_balancers() {
            $crate::scenarios::external_traffic_nodeports_external_ips_and_load_balancers::<$b>();
        }
        #[test]
        fn traffic_policies_fallback_hints_reject_and_drop() {
            $crate::scenarios::traffic_policies_fallback_hints_reject_and_drop::<$b>();
        }
        #[test]
        fn service_cidrs_added_and_removed_change_what_is_dropped() {
            $crate::scenarios::service_cidrs_added_and_removed_change_what_is_dropped::<$b>();
        }
        #[test]
        fn nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback() {
            $crate::scenarios::nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback::<
                $b,
            >();
        }
        #[test]
        fn localhost_nodeports_where_a_backend_serves_them() {
            $crate::scenarios::localhost_nodeports_where_a_backend_serves_them::<$b>();
        }
        #[test]
        fn updates_move_services_and_claims_take_over() {
            $crate::scenarios::updates_move_services_and_claims_take_over::<$b>();
        }
        #[test]
        fn dual_stack_families_are_programmed_each_on_their_own() {
            $crate::scenarios::dual_stack_families_are_programmed_each_on_their_own::<$b>(
                |_, _, _| {},
            );
        }
    };
}

/// The proxy under test: manifests in, rules out, in the lab's node.
pub struct Proxy<B> {
    /// The ingest, holding the store.
    pub ingest: Ingest,
    /// The node view.
    pub projector: NodeProjector,
    /// The backend.
    pub backend: B,
    /// The lab's witness and the settings, when made by [`Proxy::new`]:
    /// each successful load tells it what the rules now follow.
    explained: Option<(witness::Shared, kpng_explain::Setup)>,
}

impl<B: LabBackend> Proxy<B> {
    /// A proxy whose backend programs `lab`'s node with `settings`.
    pub fn new(lab: &Lab, settings: &Settings) -> Self {
        let mut proxy = Self::with(B::in_lab(lab, settings));
        let setup = kpng_explain::Setup::new(settings.proxy(), B::DATA_PATH);
        proxy.explained = Some((lab.witness.clone(), setup));
        proxy
    }
}

impl<B: Sink> Proxy<B> {
    /// A proxy around a sink made by the caller.
    pub fn with(backend: B) -> Self {
        Proxy {
            ingest: Ingest::new(Store::new(), IngestConfig::default()),
            projector: NodeProjector::new(NODE),
            backend,
            explained: None,
        }
    }

    /// Checks every probe of `lab` against `kpng explain` for `data_path`
    /// and `settings` (what [`Proxy::new`] does for its backend), for a
    /// proxy made with [`Proxy::with`].
    #[must_use]
    pub fn explained_in(
        mut self,
        lab: &Lab,
        settings: &Settings,
        data_path: kpng_explain::DataPath,
    ) -> Self {
        let setup = kpng_explain::Setup::new(settings.proxy(), data_path);
        self.explained = Some((lab.witness.clone(), setup));
        self
    }

    /// Whether the probes are explained with localhost NodePorts served
    /// (`kpng_explain::Setup::localhost_nodeports`, on unless said here),
    /// as the eBPF backend's config says.
    #[must_use]
    pub fn localhost_nodeports(mut self, on: bool) -> Self {
        if let Some((_, setup)) = &mut self.explained {
            setup.localhost_nodeports = on;
        }
        self
    }

    /// Loads a manifest (the whole state) and syncs the backend.
    ///
    /// # Errors
    /// The backend's.
    pub fn load(&mut self, yaml: &str) -> Result<(), SinkError> {
        let objects = file::parse_str("test.yaml", yaml).expect("valid manifest");
        self.ingest.load(&objects);
        let snapshot = self.ingest.reader().snapshot();
        self.projector.sync_into(&snapshot, &mut self.backend)?;
        if let Some((witness, setup)) = &self.explained
            && let Ok(mut witness) = witness.lock()
        {
            witness.synced(snapshot, setup.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod counts_tests {
    #[test]
    fn counts_are_left_out() {
        assert_eq!(
            super::without_counts(
                "10.96.0.1 . tcp . 80 . 0 counter packets 12 bytes 720 : 10.244.1.5 . 8080,"
            ),
            "10.96.0.1 . tcp . 80 . 0 : 10.244.1.5 . 8080,"
        );
    }
}
