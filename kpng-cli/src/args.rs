//! The command line: a source, then a sink, with kube-proxy's flag names.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::Error;

/// A Kubernetes Service proxy built from kpng-rs crates.
///
/// `kpng SOURCE [flags] SINK [flags]`, or kube-proxy's own command line:
/// `kpng --config=FILE --hostname-override=NODE`, or kube-proxy's flags
/// alone (`kpng --kubeconfig=F --proxy-mode=nftables --cluster-cidr=…`),
/// in any order.
#[derive(Parser, Debug)]
#[command(name = "kpng", version, about, long_about, after_long_help = crate::kube_proxy::flags::help())]
pub(crate) struct Cli {
    /// kube-proxy's log verbosity (klog's `-v`): 0–1 info, 2–3 kpng's
    /// debug, 4–5 kpng's trace, 6 and up every crate's debug as well.
    /// `RUST_LOG`, when set, wins.
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL")]
    pub(crate) v: Option<u8>,
    /// kube-proxy's: a `KubeProxyConfiguration` (v1alpha1 or v1alpha2), or
    /// kpng's own YAML; kube-proxy's flags and kpng's go before or after it.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "kube-proxy's command line (no SOURCE)"
    )]
    pub(crate) config: Option<PathBuf>,
    /// kube-proxy's: this node's name (kpng's `--node`).
    #[arg(
        long,
        value_name = "NODE",
        help_heading = "kube-proxy's command line (no SOURCE)"
    )]
    pub(crate) hostname_override: Option<String>,
    /// kube-proxy's: `nftables` (`to-nft`), `iptables` (the default:
    /// `to-iptables`) or `ipvs` (served by `to-nft`, with a warning per
    /// IPVS setting).
    #[arg(
        long,
        value_name = "MODE",
        help_heading = "kube-proxy's command line (no SOURCE)"
    )]
    pub(crate) proxy_mode: Option<String>,
    #[command(subcommand)]
    pub(crate) source: Source,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Source {
    /// Read Kubernetes manifests (kubectl get ... -o yaml, multi-document
    /// YAML or JSON); with no --input, the bundled sample cluster.
    File(FileArgs),
    /// Watch the Kubernetes API.
    Kube(KubeArgs),
    /// Stream this node's view from a kpng server (`... to-api`).
    Api(ApiArgs),
}

impl Source {
    /// The sink the command ends with.
    pub(crate) fn sink(&self) -> &Action {
        match self {
            Source::File(args) => &args.sink,
            Source::Kube(args) => &args.sink,
            Source::Api(args) => &args.sink,
        }
    }
}

/// Mutual TLS files, for `tcp://` addresses.
#[derive(Args, Debug, Default)]
pub(crate) struct TlsArgs {
    /// This side's certificate (PEM).
    #[arg(long)]
    pub(crate) tls_cert: Option<PathBuf>,
    /// This side's private key (PEM).
    #[arg(long)]
    pub(crate) tls_key: Option<PathBuf>,
    /// The CA the peer's certificate must chain to (PEM).
    #[arg(long)]
    pub(crate) tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    pub(crate) fn address(&self, uri: &str) -> Result<kpng_api::Address, Error> {
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(kpng_api::Tls::from_files(cert, key, ca)?),
            (None, None, None) => None,
            _ => {
                return Err(Error::Usage(
                    "--tls-cert, --tls-key and --tls-ca go together".into(),
                ));
            }
        };
        Ok(kpng_api::Address::parse(uri, tls)?)
    }
}

#[derive(Args, Debug)]
pub(crate) struct ApiArgs {
    /// The server: `unix:///run/kpng.sock` (or a socket path), or
    /// `tcp://host:port` with the `--tls-*` files. Replicas of the server
    /// (a Deployment of servers): several addresses, comma-separated or
    /// the flag repeated; an agent uses the first that serves it and moves
    /// to the next when it fails, resuming from the view it holds.
    /// `fleet`, `explain` and a chained `to-api` ask the first.
    #[arg(long, value_delimiter = ',', required = true, num_args = 1)]
    pub(crate) api: Vec<String>,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    #[command(flatten)]
    pub(crate) link: LinkArgs,
    #[command(flatten)]
    pub(crate) node: NodeArg,
    #[command(subcommand)]
    pub(crate) sink: Action,
}

/// How the agent watches over its connection to the server.
#[derive(Args, Debug)]
pub(crate) struct LinkArgs {
    /// With nothing from the server for this long, send an HTTP/2 PING;
    /// a connection that stays silent (a peer gone without a reset) is
    /// given up after this and --keepalive-timeout, and the agent
    /// reconnects. 0: no PING.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) keepalive_interval: Duration,
    /// How long a PING waits for its answer.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) keepalive_timeout: Duration,
    /// How long one attempt may take to connect (TCP, TLS, HTTP/2); the
    /// backoff before the next counts from the attempt's start. 0: no
    /// limit.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) connect_timeout: Duration,
}

impl LinkArgs {
    /// `config` with these settings.
    pub(crate) fn apply(&self, config: &mut kpng_api::AgentConfig) {
        config.keepalive_interval = self.keepalive_interval;
        config.keepalive_timeout = self.keepalive_timeout;
        config.connect_timeout = self.connect_timeout;
    }
}

/// `--node`, the same for every source.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct NodeArg {
    /// This node's name: its Node object's, and its pods' `nodeName`
    /// (kube-proxy's `--hostname-override`). Default: the hostname; for
    /// the bundled sample cluster (`kpng file` with no `--input`), node-a.
    /// `to-api` and `fleet` serve and list every node and take none.
    #[arg(
        long = "node",
        visible_alias = "hostname-override",
        value_name = "NODE"
    )]
    pub(crate) name: Option<String>,
}

impl NodeArg {
    /// The node's name: as given, else the default (see the flag's help).
    pub(crate) fn resolve(&self, bundled_sample: bool) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None if bundled_sample => "node-a".into(),
            None => hostname(),
        }
    }

    /// The name as given, for a sink that takes none: warned about, so
    /// that an operator who meant one node learns it is ignored.
    pub(crate) fn unused_by(&self, sink: &str) {
        if let Some(name) = &self.name {
            tracing::warn!(node = %name, "--node is not used by {sink}, which serves every node");
        }
    }
}

/// The machine's hostname (kube-proxy's default node name).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

#[derive(Args, Debug)]
pub(crate) struct FileArgs {
    /// The manifest file.
    #[arg(long)]
    pub(crate) input: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) node: NodeArg,
    /// Re-read the file when it changes, and keep syncing.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Serve only Services labelled with this service-proxy-name.
    #[arg(long)]
    pub(crate) proxy_name: Option<String>,
    #[command(subcommand)]
    pub(crate) sink: Action,
}

#[derive(Args, Debug)]
pub(crate) struct KubeArgs {
    /// A kubeconfig file (default: in-cluster, then ~/.kube/config).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) node: NodeArg,
    /// Serve only Services labelled with this service-proxy-name.
    #[arg(long)]
    pub(crate) proxy_name: Option<String>,
    #[command(subcommand)]
    pub(crate) sink: Action,
}

/// What the command does with what its source gives: a sink it syncs
/// (`to-nft`, `to-iptables`, `to-ebpf`, `to-file`), a server (`to-api`),
/// or a one-shot look (`explain`, `fleet`). The variant names are the
/// command's words.
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand, Debug)]
pub(crate) enum Action {
    /// Program nftables (tables `ip kpng` and `ip6 kpng`).
    ToNft(NftArgs),
    /// Program iptables and ip6tables in kube-proxy's layout.
    ToIptables(IptablesArgs),
    /// Load-balance sockets in eBPF (cgroup programs); traffic from
    /// outside the node goes to the nftables backend in this process.
    ToEbpf(EbpfArgs),
    /// Serve the ENLS to node agents (`kpng api ... to-nft`).
    ToApi(ListenArgs),
    /// Write this node's view as YAML at each sync (for debugging).
    ToFile(OutputArgs),
    /// Explain what this node does with one packet, step by step (the
    /// Service and port, the policy, every candidate endpoint and why,
    /// affinity, masquerade, or the reject or drop and why), then exit.
    /// Writes nothing.
    Explain(ExplainArgs),
    /// List the nodes behind, from a server's fleet view (`kpng api --api
    /// ADDR fleet`): each one's applied revision, lag in revisions and
    /// seconds, last error; then the fleet's summary. Then exit.
    Fleet(FleetArgs),
}

#[derive(Args, Debug)]
pub(crate) struct FleetArgs {
    /// List only the nodes at least this far behind (e.g. 5s, 500ms,
    /// 1m); nodes whose last round failed and nodes whose agent is away
    /// are listed anyway. Default: every node behind.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub(crate) behind: Duration,
    /// List every node, behind or not.
    #[arg(long)]
    pub(crate) all: bool,
    /// Exit with status 1 (after the listing) when a node is behind by at
    /// least `--behind`, its last round failed or its agent is away: for a
    /// probe or an alert's script.
    #[arg(long)]
    pub(crate) check: bool,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub(crate) output: String,
}

#[derive(Args, Debug)]
pub(crate) struct ExplainArgs {
    /// Where the packet comes from: `pod` (a pod on this node), `host`
    /// (the node itself) or `outside` (another machine).
    #[arg(long, default_value = "pod")]
    pub(crate) from: String,
    /// The packet's source address.
    #[arg(long)]
    pub(crate) source: std::net::IpAddr,
    /// The packet's destination address.
    #[arg(long)]
    pub(crate) destination: std::net::IpAddr,
    /// The packet's destination port.
    #[arg(long)]
    pub(crate) port: u16,
    /// The packet's source port, when known: a Maglev Service's endpoint
    /// for the flow is then named exactly.
    #[arg(long)]
    pub(crate) source_port: Option<u16>,
    /// `tcp`, `udp` or `sctp`.
    #[arg(long, default_value = "tcp")]
    pub(crate) protocol: String,
    /// Whose rules: `nft` or `iptables` (netfilter rules, the same
    /// semantics) or `ebpf` (socket programs for the node's own and its
    /// pods' sockets).
    #[arg(long, default_value = "nft", value_parser = ["nft", "iptables", "ebpf"])]
    pub(crate) backend: String,
    /// With `--backend ebpf`: its tc programs are on the interfaces this
    /// packet comes in by (`to-ebpf --tc-interfaces`).
    #[arg(long)]
    pub(crate) tc: bool,
    /// With `--backend ebpf`, run on the node: the interfaces with the tc
    /// programs, as given to `to-ebpf --tc-interfaces` (comma-separated;
    /// implies `--tc`). The node's routes are then asked, as the backend
    /// does each round, whether each endpoint on another node is reached
    /// through them: one reached around them is named with its interface
    /// (its traffic is not masqueraded and fails). Without it, the
    /// explanation says it cannot know.
    #[arg(long, value_delimiter = ',')]
    pub(crate) tc_interfaces: Vec<String>,
    /// With `--backend ebpf`: `nft` (the default) or `none`, as
    /// `to-ebpf --north-south`.
    #[arg(long, default_value = "nft", value_parser = ["nft", "none"])]
    pub(crate) north_south: String,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub(crate) output: String,
    #[command(flatten)]
    pub(crate) proxy: ProxyFlags,
}

#[derive(Args, Debug)]
pub(crate) struct ListenArgs {
    /// Where: `unix:///run/kpng.sock` (or a socket path; mode 0600), or
    /// `tcp://host:port` with the `--tls-*` files (clients without a
    /// certificate from the CA are refused).
    #[arg(long)]
    pub(crate) listen: String,
    #[command(flatten)]
    pub(crate) tls: TlsArgs,
    /// Where Prometheus metrics are served (`/metrics`): the fleet view's
    /// (`kpng_fleet_*`: nodes, nodes behind, programming latency) and the
    /// process's. Empty (the default): not served. A bare IP takes port
    /// 10249.
    #[arg(long, default_value = "", value_parser = metrics_with_port)]
    pub(crate) metrics_bind_address: String,
}

#[derive(Args, Debug)]
pub(crate) struct OutputArgs {
    /// The file, replaced whole at each sync; `-`: standard output.
    #[arg(long)]
    pub(crate) output: PathBuf,
    /// `yaml` or `json`.
    #[arg(long, default_value = "yaml", value_parser = ["yaml", "json"])]
    pub(crate) format: String,
    /// Exit after the first write.
    #[arg(long)]
    pub(crate) once: bool,
}

impl Action {
    /// The backend flags, for the sinks that program the kernel.
    pub(crate) fn args(&self) -> Option<&BackendArgs> {
        match self {
            Action::ToNft(args) => Some(&args.common),
            Action::ToIptables(args) => Some(&args.common),
            Action::ToEbpf(args) => Some(&args.common),
            Action::ToApi(_) | Action::ToFile(_) | Action::Explain(_) | Action::Fleet(_) => None,
        }
    }

    pub(crate) fn once(&self) -> bool {
        match self {
            Action::ToFile(out) => out.once,
            Action::Explain(_) | Action::Fleet(_) => true,
            other => other.args().is_some_and(|a| a.once),
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct NftArgs {
    /// Run through an aggregator served on this unix socket (mode 0600):
    /// the proxy is one producer, and other processes (a CNI, a firewall)
    /// publish their nftables tables there; everything is applied in one
    /// rate-limited transaction.
    #[arg(long)]
    pub(crate) aggregator_socket: Option<PathBuf>,
    /// Comments naming the Service (`namespace/name:port/protocol`) on each
    /// Service port's chains and its verdict-map and `cluster-ips`
    /// elements, as kube-proxy writes them (`nft list ruleset` shows them).
    /// At 10k Services they cost ~1 MiB of heap and ~1.5 MiB of peak RSS:
    /// `--nft-comments=false` leaves them out.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub(crate) nft_comments: bool,
    /// Count each new connection per Service port and endpoint (counters
    /// on the pick maps' elements), served on /metrics as
    /// `kpng_service_connections_total` and
    /// `kpng_endpoint_connections_total`. Off by default: at 10k
    /// Services they make a full sync ~30 % dearer and each scrape dumps
    /// the pick maps (see docs/operator/troubleshooting.md for the cost).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) counters: bool,
    #[command(flatten)]
    pub(crate) common: BackendArgs,
}

#[derive(Args, Debug)]
pub(crate) struct IptablesArgs {
    /// Run through an aggregator served on this unix socket (mode 0600):
    /// the proxy publishes its `KUBE-` chains, other processes theirs.
    #[arg(long)]
    pub(crate) aggregator_socket: Option<PathBuf>,
    /// Which iptables: `nft`, `legacy`, or `auto` (the one that already
    /// holds rules, as kube-proxy picks).
    #[arg(long, default_value = "auto", value_parser = ["auto", "nft", "legacy"])]
    pub(crate) iptables_mode: String,
    /// How long one iptables-restore (or -save) may run before it is
    /// killed and the sync retried as a full one (e.g. 10m); default: 60s
    /// plus 2ms per line of its input.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) iptables_restore_timeout: Option<Duration>,
    /// How endpoints are laid out: `kube-proxy` (a KUBE-SEP chain per
    /// endpoint, as kube-proxy writes), `compact` (endpoints on other
    /// nodes are DNATed from the Service's chain, no chain of their own:
    /// the same semantics in a third of the table, so that 100k Services
    /// x 10 endpoints fit an iptables-legacy table), or `auto`: compact
    /// above 50,000 endpoints (summed over Service ports), kube-proxy's
    /// again below 40,000. A change rewrites every chain.
    #[arg(long, default_value = "auto", value_parser = ["auto", "kube-proxy", "compact"])]
    pub(crate) iptables_layout: String,
    #[command(flatten)]
    pub(crate) common: BackendArgs,
}

#[derive(Args, Debug)]
pub(crate) struct EbpfArgs {
    /// The cgroup (v2) whose sockets are load-balanced, with every cgroup
    /// below it (default: the cgroup v2 root: every process of the node,
    /// its pods included).
    #[arg(long)]
    pub(crate) cgroup_path: Option<PathBuf>,
    /// Where the programs' links and maps are pinned: a directory on a
    /// bpf file system. They stay attached while kpng restarts, and a
    /// restart adopts them.
    #[arg(long, default_value = kpng_backend_ebpf::DEFAULT_PIN_PATH)]
    pub(crate) bpf_pin_path: PathBuf,
    /// The node's interfaces, comma-separated (those facing clients and
    /// those towards other nodes): tc programs there serve packets from
    /// outside to NodePorts, external IPs, LB IPs and ClusterIPs (TCP, UDP
    /// and SCTP: DNAT, masquerade as kube-proxy's, source ranges), refuse
    /// what has no endpoint with an ICMP port unreachable they build, and
    /// drop unallocated Service addresses. Default: none (the nftables
    /// backend serves them).
    #[arg(long, default_value = "")]
    pub(crate) tc_interfaces: String,
    /// What serves traffic that no socket of the cgroup sent and the tc
    /// programs leave (without `--tc-interfaces`: everything from outside
    /// the node; with them: IPv4 options, IPv6 extension headers,
    /// fragments): `nft`, the nftables
    /// backend in this process, or `none` (no netfilter rule at all).
    #[arg(long, default_value = "nft", value_parser = ["nft", "none"])]
    pub(crate) north_south: String,
    /// Count each new connection per Service port and endpoint (the
    /// programs' `kpng_traffic` map; with `--north-south nft`, the
    /// nftables backend's counters too), served on /metrics as
    /// `kpng_service_connections_total` and
    /// `kpng_endpoint_connections_total`. Off by default, as
    /// `to-nft`'s.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) counters: bool,
    /// End the connected UDP sockets of the cgroup's pods and node that a
    /// round's removed endpoints were serving through a Service (their
    /// owners' next receive fails with ECONNABORTED, their next connect
    /// reaches a live endpoint), as kube-proxy clears such flows'
    /// conntrack entries. On by default; `--end-udp-sockets=false` leaves
    /// them sending to the endpoint gone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) end_udp_sockets: bool,
    /// XDP on the --tc-interfaces: the packets of flows the tc programs
    /// opened are translated there and sent back out before the stack
    /// (a flow's first packet, and whatever XDP does not take, go on to
    /// the tc programs, which decide as without it). `auto` (the value
    /// of a bare `--xdp`): in the driver where it has XDP, else generic;
    /// `native` or `generic` only. An interface where it attaches in no
    /// mode asked is an error naming it. On a veth, native XDP sends
    /// nothing on unless the peer has an XDP program of its own.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "auto", value_parser = ["auto", "native", "generic"])]
    pub(crate) xdp: Option<String>,
    /// Fixed sizes of BPF maps, `NAME=ENTRIES,...`. The maps that hold
    /// the cluster (kpng_services, kpng_slots, kpng_members, kpng_live,
    /// kpng_cidrs, kpng_external, kpng_ranges, kpng_maglev) are otherwise sized from it
    /// (1.5 x the need, a power of two) and grown by a planned swap; one
    /// fixed here never grows: a sync that needs more fails, naming it.
    /// The connections' maps (kpng_affinity 16384, kpng_reverse 65536,
    /// kpng_flows 16384, kpng_ext_flows, kpng_ext_replies, kpng_snat,
    /// kpng_snat_out 65536, kpng_ext_affinity 16384) get this size instead
    /// of their default.
    #[arg(long, default_value = "")]
    pub(crate) bpf_map_sizes: String,
    /// The least size of a map sized from the cluster.
    #[arg(long, default_value_t = kpng_backend_ebpf::DEFAULT_MIN_ENTRIES)]
    pub(crate) bpf_map_min_entries: u32,
    /// Detach the programs and remove the pinned maps (and the nftables
    /// tables of `--north-south nft`), then exit. With `--dry-run`: print
    /// what would be removed, and remove nothing.
    #[arg(long)]
    pub(crate) cleanup: bool,
    #[command(flatten)]
    pub(crate) common: BackendArgs,
}

/// kube-proxy's flags that say what the rules do (the backends' and
/// `explain`'s).
#[derive(Args, Debug)]
pub(crate) struct ProxyFlags {
    /// The pod CIDRs, comma-separated (traffic from them is not
    /// masqueraded; it short-circuits externalTrafficPolicy Local).
    #[arg(long, default_value = "")]
    pub(crate) cluster_cidr: String,
    /// The Service CIDRs, comma-separated (unallocated addresses in them
    /// are dropped).
    #[arg(long, default_value = "")]
    pub(crate) service_cidr: String,
    /// Where NodePorts listen, comma-separated CIDRs; `primary`, as
    /// kube-proxy writes it, is the default: the node's addresses.
    #[arg(long)]
    pub(crate) nodeport_addresses: Option<String>,
    /// Masquerade all Service traffic.
    #[arg(long)]
    pub(crate) masquerade_all: bool,
    /// Localhost NodePorts: the node's own processes reach NodePorts on
    /// 127.0.0.1 and [::1] (each when --nodeport-addresses is unset or
    /// holds it; never with `primary`). `to-ebpf` serves them in its
    /// socket programs, on by default as kube-proxy's iptables mode
    /// (`--iptables-localhost-nodeports`); pods keep their own loopback.
    /// `to-nft` and `to-iptables` serve none, as kube-proxy's nftables
    /// mode: `=true` there is a warning.
    #[arg(long, visible_alias = "iptables-localhost-nodeports", value_name = "BOOL", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub(crate) localhost_nodeports: Option<bool>,
    /// The mark bit that asks for masquerade.
    #[arg(long, visible_alias = "iptables-masquerade-bit", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub(crate) masquerade_bit: u8,
    /// How a new connection picks its endpoint, for Services without a
    /// `kpng.io/balancing` annotation: `random` (kube-proxy's), `maglev`
    /// (consistent hashing of the flow: an endpoint leaving moves about
    /// its own share of the flows) or `round-robin` (in turn). The
    /// nftables backend, and the eBPF programs (Maglev in the tc
    /// programs; a socket picks a Maglev Service's endpoint at random);
    /// the iptables backend picks at random.
    #[arg(long, default_value = "random", value_parser = ["random", "maglev", "round-robin"])]
    pub(crate) balancing: String,
    /// How NodePorts, LB IPs and external IPs reached from outside under
    /// `externalTrafficPolicy: Cluster` forward a flow to an endpoint on
    /// another node, for Services without a `kpng.io/load-balancer-mode`
    /// annotation: `snat` (kube-proxy's: masqueraded, the reply returns
    /// through the node the client reached), `dsr` (direct server return:
    /// the endpoint sees the client, and its node replies to the client
    /// straight, from the Service's address) or `hybrid` (DSR for TCP and
    /// SCTP, SNAT for UDP). DSR is done by `to-ebpf`'s tc programs
    /// (`--tc-interfaces`, on every node: the endpoint's node restores
    /// the Service's address); `to-nft` and `to-iptables` masquerade, and
    /// refuse `dsr` and `hybrid`.
    #[arg(long, default_value = "snat", value_parser = ["snat", "dsr", "hybrid"])]
    pub(crate) load_balancer_mode: String,
}

/// The flags every backend takes, with kube-proxy's names.
#[derive(Args, Debug)]
pub(crate) struct BackendArgs {
    /// Print the rules instead of applying them. A dry run writes
    /// nothing: no rule, pin, sysctl or conntrack entry, and binds no
    /// port (metrics, healthz) and no aggregator socket.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Exit after the first successful sync (non-zero if it failed).
    #[arg(long)]
    pub(crate) once: bool,
    #[command(flatten)]
    pub(crate) proxy: ProxyFlags,
    /// The least time between syncs after a burst (e.g. 1s, 500ms).
    #[arg(long, visible_alias = "iptables-min-sync-period", default_value = "1s", value_parser = parse_duration)]
    pub(crate) min_sync_period: Duration,
    /// Syncs allowed back to back before --min-sync-period applies.
    #[arg(long, default_value_t = 2)]
    pub(crate) sync_burst: u32,
    /// Where `/healthz` and `/livez` are served (kube-proxy's port);
    /// empty: not served. Health-check node ports of Services with
    /// `externalTrafficPolicy: Local` are served on `--nodeport-addresses`
    /// (all addresses by default) whenever this is set. A bare IP takes
    /// port 10256, as kube-proxy's does.
    #[arg(long, default_value = "0.0.0.0:10256", value_parser = healthz_with_port)]
    pub(crate) healthz_bind_address: String,
    /// How long a change may wait before `/healthz` reports unhealthy.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) healthz_timeout: Duration,
    /// Do not delete stale UDP conntrack entries after syncs (done over
    /// ctnetlink, as kube-proxy does).
    #[arg(long)]
    pub(crate) no_conntrack_cleanup: bool,
    /// End the established TCP connections whose endpoint left its
    /// Service (gone from its slices, or no longer serving), within the
    /// sync that removes it: the client's connection fails at once
    /// instead of waiting on a dead peer. An endpoint that drains
    /// (terminating but serving) keeps its connections. Off by default,
    /// as kube-proxy leaves such connections to time out.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub(crate) end_tcp_connections: bool,
    /// kube-proxy's: `nf_conntrack_max` is this times the cores (at least
    /// `--conntrack-min`); 0 leaves it. Read-only outside the host's
    /// network namespace: then left, with a warning.
    #[arg(long, default_value_t = 32_768)]
    pub(crate) conntrack_max_per_core: u64,
    /// kube-proxy's: the least `nf_conntrack_max`.
    #[arg(long, default_value_t = 131_072)]
    pub(crate) conntrack_min: u64,
    /// kube-proxy's: idle established TCP flows are forgotten after this
    /// (0 leaves the sysctl).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub(crate) conntrack_tcp_timeout_established: Duration,
    /// kube-proxy's: flows in CLOSE_WAIT are forgotten after this.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub(crate) conntrack_tcp_timeout_close_wait: Duration,
    /// kube-proxy's: out-of-window TCP packets are not marked INVALID.
    #[arg(long)]
    pub(crate) conntrack_tcp_be_liberal: bool,
    /// kube-proxy's: the UDP timeout (0 leaves the sysctl).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub(crate) conntrack_udp_timeout: Duration,
    /// kube-proxy's: the UDP stream timeout (0 leaves the sysctl).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub(crate) conntrack_udp_timeout_stream: Duration,
    /// Keep kube-proxy's own rules. By default, once kpng has synced for
    /// the first time, it removes what kube-proxy programmed in any of its
    /// modes, as kube-proxy removes the other modes' rules: the nftables
    /// tables `ip kube-proxy` and `ip6 kube-proxy`, kube-proxy's `KUBE-*`
    /// chains in iptables and ip6tables (nft and legacy) with the jumps to
    /// them, and where kube-proxy's ipvs mode left `kube-ipvs0`, the IPVS
    /// virtual servers, that interface and its ipsets. kubelet's chains
    /// and anything else are never touched. A dry run only lists them.
    #[arg(long)]
    pub(crate) keep_kube_proxy_rules: bool,
    /// Where Prometheus metrics are served (`/metrics`, kube-proxy's
    /// port); empty: not served. A bare IP takes port 10249, as
    /// kube-proxy's does.
    #[arg(long, default_value = "127.0.0.1:10249", value_parser = metrics_with_port)]
    pub(crate) metrics_bind_address: String,
    /// Apply at once an input that deletes every Service or more than
    /// `--mass-delete-max-share` of them (held back otherwise), and accept
    /// an input file with no Service, EndpointSlice or Node (an empty
    /// cluster).
    #[arg(long)]
    pub(crate) allow_mass_delete: bool,
    /// An input that deletes more than this share (0–1) of the programmed
    /// Services is held back, the previous state kept, until it lasts
    /// `--mass-delete-confirm-after`. One that deletes all of them always is.
    #[arg(long, default_value_t = 0.5, value_parser = share)]
    pub(crate) mass_delete_max_share: f64,
    /// The share rule applies from this many programmed Services on.
    #[arg(long, default_value_t = 10)]
    pub(crate) mass_delete_min_services: usize,
    /// A held-back mass deletion is applied once the input has been one
    /// for this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub(crate) mass_delete_confirm_after: Duration,
}

impl Cli {
    /// Checks the values clap takes as text (CIDR lists, bind addresses),
    /// so that a bad one is one clear line naming its flag, before
    /// anything is bound or started.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the flag and the value.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match (&self.source, self.source.sink()) {
            (_, Action::Explain(args)) => args.proxy.proxy().map(|_| ()),
            (Source::Api(_), Action::Fleet(_)) => Ok(()),
            (_, Action::Fleet(_)) => Err(Error::Usage(
                "fleet asks a server for its fleet view: kpng api --api ADDRESS fleet".into(),
            )),
            (_, Action::ToApi(listen)) => bind_address(&listen.metrics_bind_address, 10249)
                .map(|_| ())
                .map_err(|e| Error::Usage(format!("invalid --metrics-bind-address: {e}"))),
            (_, sink) => sink.args().map_or(Ok(()), BackendArgs::check),
        }
    }
}

impl BackendArgs {
    /// Checks the flags' values: see [`Cli::check`].
    fn check(&self) -> Result<(), Error> {
        self.proxy()?;
        if self.end_tcp_connections && self.no_conntrack_cleanup {
            return Err(Error::Usage(
                "--end-tcp-connections ends TCP flows through the conntrack cleanup, which --no-conntrack-cleanup turns off: give one of them".into(),
            ));
        }
        for (flag, value, port) in [
            ("--healthz-bind-address", &self.healthz_bind_address, 10256),
            ("--metrics-bind-address", &self.metrics_bind_address, 10249),
        ] {
            bind_address(value, port).map_err(|e| Error::Usage(format!("invalid {flag}: {e}")))?;
        }
        Ok(())
    }

    /// The guard against mass deletions these flags set.
    pub(crate) fn guard(&self) -> kpng_drive::GuardConfig {
        kpng_drive::GuardConfig::default()
            .max_delete_share(self.mass_delete_max_share)
            .min_services(self.mass_delete_min_services)
            .confirm_after(self.mass_delete_confirm_after)
            .allow_mass_delete(self.allow_mass_delete)
    }

    /// kube-proxy's settings these flags give.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the flag whose value is not a CIDR list.
    pub(crate) fn proxy(&self) -> Result<kpng_sink::ProxyConfig, Error> {
        Ok(self
            .proxy
            .proxy()?
            .end_tcp_connections(self.end_tcp_connections))
    }
}

impl ProxyFlags {
    /// kube-proxy's settings these flags give.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the flag whose value is not a CIDR list.
    pub(crate) fn proxy(&self) -> Result<kpng_sink::ProxyConfig, Error> {
        let nets = |flag: &str, text: &str| -> Result<Vec<kpng_sink::IpNet>, Error> {
            kpng_model::addr::parse_cidr_flag(flag, text)
                .map_err(|value| Error::Usage(format!("invalid {flag}: {value:?}")))
        };
        let mut proxy = kpng_sink::ProxyConfig::default()
            .cluster_cidrs(nets("--cluster-cidr", &self.cluster_cidr)?)
            .service_cidrs(nets("--service-cidr", &self.service_cidr)?)
            .masquerade_all(self.masquerade_all)
            .masquerade_bit(self.masquerade_bit)
            .balancing(match self.balancing.as_str() {
                "maglev" => kpng_sink::Balancing::Maglev,
                "round-robin" => kpng_sink::Balancing::RoundRobin,
                _ => kpng_sink::Balancing::Random,
            })
            .load_balancer_mode(match self.load_balancer_mode.as_str() {
                "dsr" => kpng_sink::LoadBalancerMode::Dsr,
                "hybrid" => kpng_sink::LoadBalancerMode::Hybrid,
                _ => kpng_sink::LoadBalancerMode::Snat,
            });
        // `primary` (kube-proxy's word) is kpng's default.
        if let Some(list) = self.nodeport_addresses.as_ref().filter(|l| *l != "primary") {
            proxy = proxy.nodeport_addresses(nets("--nodeport-addresses", list)?);
        }
        Ok(proxy)
    }
}

impl ProxyFlags {
    /// Whether localhost NodePorts are asked for, as `to-ebpf` (and
    /// `explain --backend ebpf`) serve them: `--localhost-nodeports`
    /// unless false (kube-proxy's default is on), and never with
    /// `--nodeport-addresses primary` (the node's own addresses alone, as
    /// kube-proxy turns them off then).
    pub(crate) fn localhost_nodeports(&self) -> bool {
        self.localhost_nodeports.unwrap_or(true)
            && self.nodeport_addresses.as_deref().map(str::trim) != Some("primary")
    }

    /// Refuses `--load-balancer-mode dsr` or `hybrid` for a sink that
    /// can only masquerade (`backend`: the sink's name, or what it lacks).
    ///
    /// # Errors
    /// [`Error::Usage`] naming the flag, its value and what does it.
    pub(crate) fn masquerade_only(&self, backend: &str) -> Result<(), Error> {
        if self.load_balancer_mode == "snat" {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "--load-balancer-mode {}: {backend} masquerades flows from outside to other nodes' endpoints, as kube-proxy does; direct server return is done by `to-ebpf --tc-interfaces IFACES` on every node (the endpoint's node restores the Service's address)",
            self.load_balancer_mode
        )))
    }

    /// What a netfilter sink (`backend`: `nftables` or `iptables`) says
    /// of the settings that ask it for NodePorts on loopback, which it
    /// does not serve: one line each, naming the setting and what serves
    /// them instead.
    ///
    /// # Errors
    /// [`Error::Usage`] naming `--nodeport-addresses` when it is not a
    /// CIDR list.
    pub(crate) fn loopback_warnings(&self, backend: &str) -> Result<Vec<String>, Error> {
        let (kube_proxy, why) = match backend {
            "iptables" => (
                "kube-proxy's iptables mode does, by setting route_localnet=1 (which lets the node route packets from loopback and needs a rule against them from outside, CVE-2020-8558); kpng sets no such sysctl",
                "",
            ),
            _ => ("", ", as kube-proxy's nftables mode serves none"),
        };
        let instead = "the eBPF backend's socket programs serve 127.0.0.1 and [::1] to the node's own processes, with no sysctl (`kpng … to-ebpf`, --localhost-nodeports on by default)";
        let mut out = Vec::new();
        if self.localhost_nodeports == Some(true) {
            let also = if kube_proxy.is_empty() {
                String::new()
            } else {
                format!(" ({kube_proxy})")
            };
            out.push(format!(
                "--localhost-nodeports (kube-proxy's --iptables-localhost-nodeports, iptables.localhostNodePorts): the {backend} backend serves no NodePort on loopback{why}{also}; {instead}"
            ));
        }
        let loopback = self.proxy()?.nodeport_loopback();
        if !loopback.is_empty() {
            let list: Vec<String> = loopback.iter().map(ToString::to_string).collect();
            out.push(format!(
                "--nodeport-addresses (nodePortAddresses) {}: the {backend} backend serves no NodePort on loopback{why}: loopback is left out; {instead}",
                list.join(",")
            ));
        }
        Ok(out)
    }
}

/// A comma-separated list of CIDRs (a bare address is a host prefix), as
/// a kpng config file's value is checked.
pub(crate) fn cidr_list(text: &str) -> Result<String, String> {
    kpng_model::addr::parse_cidr_flag("", text)
        .map(|_| text.to_owned())
        .map_err(|value| format!("{value:?} is not a CIDR"))
}

/// `--nodeport-addresses`: CIDRs, or kube-proxy's `primary` alone.
pub(crate) fn nodeport_addresses(text: &str) -> Result<String, String> {
    if text.trim() == "primary" {
        return Ok("primary".to_owned());
    }
    if text.split(',').any(|a| a.trim() == "primary") {
        return Err("`primary` goes alone, not beside CIDRs (as kube-proxy says)".to_owned());
    }
    cidr_list(text)
}

/// A bind address: `IP:PORT`, a bare IP (which takes `port`, as
/// kube-proxy's flags do), or empty (not served).
pub(crate) fn bind_address(text: &str, port: u16) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(String::new());
    }
    if let Ok(address) = text.parse::<std::net::SocketAddr>() {
        return Ok(address.to_string());
    }
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => Ok(std::net::SocketAddr::new(ip, port).to_string()),
        Err(_) => Err(format!("{text:?} is not IP:PORT or an IP")),
    }
}

/// `--healthz-bind-address`, kube-proxy's port 10256 by default.
pub(crate) fn healthz_address(text: &str) -> Result<String, String> {
    bind_address(text, 10256)
}

/// `--metrics-bind-address`, kube-proxy's port 10249 by default.
pub(crate) fn metrics_address(text: &str) -> Result<String, String> {
    bind_address(text, 10249)
}

/// A bind address as the command line gives it: a bare IP with `port`
/// added; anything else as it is, for [`BackendArgs::check`] to refuse on
/// one line.
fn with_default_port(text: &str, port: u16) -> Result<String, std::convert::Infallible> {
    Ok(bind_address(text, port).unwrap_or_else(|_| text.to_owned()))
}

fn healthz_with_port(text: &str) -> Result<String, std::convert::Infallible> {
    with_default_port(text, 10256)
}

fn metrics_with_port(text: &str) -> Result<String, std::convert::Infallible> {
    with_default_port(text, 10249)
}

/// A share: a number from 0 to 1.
pub(crate) fn share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{text:?} is not a share from 0 to 1 (0.5 is half)")),
    }
}

/// A duration in Go's format, as kube-proxy takes it: one or more
/// number-unit pairs (`1m30s`, `1.5h`, `500ms`), units `ns`, `us` (`µs`),
/// `ms`, `s`, `m` and `h`; a bare `0` is zero.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (Go's format: 1s, 500ms, 1m30s, 1.5h)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut seconds = 0.0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        seconds += number * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::{Cli, parse_duration};

    /// The backend flags of `kpng file to-nft ARGS…`.
    fn backend(args: &[&str]) -> super::BackendArgs {
        let mut argv = vec!["kpng", "file", "to-nft"];
        argv.extend(args);
        match Cli::try_parse_from(argv).expect("parses").source {
            super::Source::File(file) => match file.sink {
                super::Action::ToNft(nft) => nft.common,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// The sink and its flags of `kpng file SINK ARGS…`.
    fn sink(args: &[&str]) -> super::Action {
        let mut argv = vec!["kpng", "file"];
        argv.extend(args);
        match Cli::try_parse_from(argv).expect("parses").source {
            super::Source::File(file) => file.sink,
            other => panic!("{other:?}"),
        }
    }

    /// `--localhost-nodeports[=BOOL]` (kube-proxy's
    /// `--iptables-localhost-nodeports` too): on by default for `to-ebpf`
    /// and `explain`, off with `=false` or `--nodeport-addresses primary`.
    #[test]
    fn localhost_nodeports_are_on_unless_turned_off() {
        let ebpf = |args: &[&str]| {
            let mut argv = vec!["to-ebpf"];
            argv.extend(args);
            sink(&argv)
                .args()
                .expect("a backend")
                .proxy
                .localhost_nodeports()
        };
        assert!(ebpf(&[]), "kube-proxy's default");
        assert!(ebpf(&["--localhost-nodeports"]));
        assert!(ebpf(&["--localhost-nodeports=true"]));
        assert!(!ebpf(&["--localhost-nodeports=false"]));
        assert!(!ebpf(&["--iptables-localhost-nodeports=false"]));
        assert!(ebpf(&["--iptables-localhost-nodeports"]));
        assert!(!ebpf(&["--nodeport-addresses", "primary"]));
        assert!(ebpf(&["--nodeport-addresses", "127.0.0.0/8"]));
        let super::Action::Explain(explain) = sink(&[
            "explain",
            "--source=1.2.3.4",
            "--destination=127.0.0.1",
            "--port=30080",
            "--localhost-nodeports=false",
        ]) else {
            panic!("explain")
        };
        assert!(!explain.proxy.localhost_nodeports());
        assert!(
            Cli::try_parse_from(["kpng", "file", "to-ebpf", "--localhost-nodeports=maybe"])
                .is_err()
        );
    }

    /// `to-nft` and `to-iptables` serve no NodePort on loopback: asking
    /// for them (the flag, or `--nodeport-addresses` holding loopback) is
    /// one warning a setting, naming it and what serves them instead;
    /// nothing asked, nothing said.
    #[test]
    fn netfilter_sinks_say_they_serve_no_localhost_nodeports() {
        let warnings = |backend: &str, args: &[&str]| {
            super::tests::backend(args)
                .proxy
                .loopback_warnings(backend)
                .expect("valid")
        };
        assert!(warnings("nftables", &[]).is_empty());
        assert!(warnings("nftables", &["--localhost-nodeports=false"]).is_empty());
        assert!(warnings("iptables", &["--nodeport-addresses=10.0.0.0/8"]).is_empty());
        let asked = warnings("nftables", &["--nodeport-addresses=127.0.0.0/8,10.0.0.0/8"]);
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(
            asked[0].starts_with("--nodeport-addresses (nodePortAddresses) 127.0.0.0/8: the nftables backend serves no NodePort on loopback, as kube-proxy's nftables mode serves none")
                && asked[0].contains("to-ebpf"),
            "{asked:?}"
        );
        let both = warnings(
            "iptables",
            &[
                "--iptables-localhost-nodeports",
                "--nodeport-addresses=0.0.0.0/0",
            ],
        );
        assert_eq!(both.len(), 2, "{both:?}");
        assert!(both[0].starts_with("--localhost-nodeports (kube-proxy's --iptables-localhost-nodeports, iptables.localhostNodePorts): the iptables backend serves no NodePort on loopback"), "{both:?}");
        assert!(
            both[0].contains("route_localnet") && both[0].contains("to-ebpf"),
            "{both:?}"
        );
        assert!(
            both[1].starts_with("--nodeport-addresses (nodePortAddresses) 0.0.0.0/0: "),
            "{both:?}"
        );
    }

    /// `--end-tcp-connections` reaches every backend's settings; with
    /// `--no-conntrack-cleanup`, which it needs, it is refused, naming
    /// both.
    #[test]
    fn end_tcp_connections_needs_the_conntrack_cleanup() {
        assert!(!backend(&[]).proxy().expect("proxy").end_tcp_connections);
        let args = backend(&["--end-tcp-connections"]);
        assert!(args.proxy().expect("proxy").end_tcp_connections);
        args.check().expect("alone, fine");
        let error = backend(&["--end-tcp-connections", "--no-conntrack-cleanup"])
            .check()
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("--end-tcp-connections") && error.contains("--no-conntrack-cleanup"),
            "{error}"
        );
    }

    /// `--metrics-bind-address 0.0.0.0` was not host:port: fatal in real
    /// runs. kube-proxy's flag names were refused.
    #[test]
    fn kube_proxys_flag_names_and_forms_are_taken() {
        let args = backend(&[
            "--metrics-bind-address",
            "0.0.0.0",
            "--healthz-bind-address=::",
            "--iptables-masquerade-bit=12",
            "--iptables-min-sync-period",
            "2s",
            "--nodeport-addresses",
            "primary",
        ]);
        assert_eq!(args.metrics_bind_address, "0.0.0.0:10249");
        assert_eq!(args.healthz_bind_address, "[::]:10256");
        assert_eq!(args.proxy.masquerade_bit, 12);
        assert_eq!(args.min_sync_period, Duration::from_secs(2));
        let proxy = args.proxy().expect("primary is the default");
        assert!(proxy.nodeport_addresses.is_none());
        args.check().expect("valid");
        let error = backend(&["--metrics-bind-address", "localhost"])
            .check()
            .expect_err("not an IP");
        assert_eq!(
            error.to_string(),
            "invalid --metrics-bind-address: \"localhost\" is not IP:PORT or an IP"
        );
        let cli = Cli::try_parse_from([
            "kpng",
            "file",
            "--hostname-override",
            "n",
            "to-nft",
            "--v",
            "2",
        ])
        .expect("parses");
        assert_eq!(cli.v, Some(2));
        match cli.source {
            super::Source::File(file) => assert_eq!(file.node.name.as_deref(), Some("n")),
            other => panic!("{other:?}"),
        }
    }

    /// Replicas of the server: comma-separated, or the flag repeated, in
    /// the order given.
    #[test]
    fn api_takes_replicas_comma_separated_or_repeated() {
        let api = |argv: &[&str]| match Cli::try_parse_from(argv).expect("parses").source {
            super::Source::Api(a) => a.api,
            _ => panic!("not api"),
        };
        let want = ["unix:///a", "unix:///b", "unix:///c"];
        assert_eq!(
            api(&[
                "kpng",
                "api",
                "--api",
                "unix:///a,unix:///b,unix:///c",
                "to-nft"
            ]),
            want
        );
        assert_eq!(
            api(&[
                "kpng",
                "api",
                "--api",
                "unix:///a",
                "--api",
                "unix:///b,unix:///c",
                "to-nft"
            ]),
            want
        );
        assert_eq!(
            api(&["kpng", "api", "--api", "unix:///a", "to-nft"]),
            ["unix:///a"]
        );
    }

    /// One `--node` for every source: one type, one default, and
    /// `--hostname-override` its alias.
    #[test]
    fn every_source_takes_one_node_flag_with_one_default() {
        let node = |argv: &[&str]| match Cli::try_parse_from(argv).expect("parses").source {
            super::Source::File(a) => a.node,
            super::Source::Kube(a) => a.node,
            super::Source::Api(a) => a.node,
        };
        for source in [
            &["kpng", "file"][..],
            &["kpng", "kube"],
            &["kpng", "api", "--api", "unix:///s"],
        ] {
            for flag in ["--node", "--hostname-override"] {
                let argv: Vec<&str> = [source, &[flag, "n-1", "to-nft"]].concat();
                assert_eq!(node(&argv).resolve(false), "n-1", "{argv:?}");
            }
            // Unset: the hostname, whatever the source.
            let argv: Vec<&str> = [source, &["to-nft"]].concat();
            assert_eq!(node(&argv).resolve(false), super::hostname(), "{argv:?}");
        }
        // The bundled sample's node.
        assert_eq!(node(&["kpng", "file", "to-nft"]).resolve(true), "node-a");
        assert_eq!(
            node(&["kpng", "file", "--node", "x", "to-nft"]).resolve(true),
            "x"
        );
    }

    /// The iptables child's timeout is a flag; unset, it scales.
    #[test]
    fn the_iptables_restore_timeout_is_a_flag() {
        let ipt = |args: &[&str]| {
            let mut argv = vec!["kpng", "file", "to-iptables"];
            argv.extend(args);
            match Cli::try_parse_from(argv).expect("parses").source {
                super::Source::File(file) => match file.sink {
                    super::Action::ToIptables(ipt) => ipt.iptables_restore_timeout,
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            ipt(&["--iptables-restore-timeout", "10m"]),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            ipt(&["--iptables-restore-timeout=1ms"]),
            Some(Duration::from_millis(1))
        );
        assert_eq!(ipt(&[]), None);
    }

    #[test]
    fn durations_take_gos_format() {
        for (text, want) in [
            ("1s", Duration::from_secs(1)),
            ("500ms", Duration::from_millis(500)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5h", Duration::from_secs(5400)),
            ("2h45m", Duration::from_secs(9900)),
            ("250us", Duration::from_micros(250)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "1", "s", "1x", "-1s", "1s2"] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("Go's format"), "{error}");
        }
    }
}
