//! `kpng`: a Kubernetes Service proxy assembled from kpng-rs crates.
//!
//! The grammar is the original KPNG's: a source, then a sink.
//!
//! ```text
//! kpng file [--input cluster.yaml] [--node N] [--watch] to-nft [--dry-run] [--once] [backend flags]
//! kpng kube [--kubeconfig F] --node N to-nft [--aggregator-socket PATH] [backend flags]
//! kpng kube [--kubeconfig F] to-api --listen unix:///run/kpng.sock
//! kpng api --api unix:///run/kpng.sock --node N to-nft | to-iptables | to-file --output state.yaml
//! kpng api --api tcp://server:7443 --tls-cert C --tls-key K --tls-ca CA to-api --listen unix:///run/kpng.sock
//! kpng api --api unix:///run/kpng.sock --node N to-file --output - --format json --once   # what does node N think
//! kpng kube [--kubeconfig F] --node N to-iptables [--iptables-mode auto|nft|legacy] [--aggregator-socket PATH] [backend flags]
//! ```
//!
//! With no `--input`, `kpng file` reads the bundled sample cluster, so
//! `kpng file to-nft --dry-run` prints a real ruleset on any machine, with
//! no cluster and no root.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kpng_aggregator::iptables::{Iptables, Runner};
use kpng_aggregator::nft::Nft;
use kpng_aggregator::{Aggregator, Producer, Publisher, Subsystem};
use kpng_backend_iptables::{Config as IptablesConfig, IptablesBackend, Mode as IptablesMode};
use kpng_backend_nft::{Config as NftConfig, NftBackend};
use kpng_diff::{DriveConfig, NodeProjector, drive};
use kpng_kube::watch::{NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::IncrementalSink;
use kpng_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;

mod kube_proxy;

/// A Kubernetes Service proxy built from kpng-rs crates.
#[derive(Parser, Debug)]
#[command(name = "kpng", version, about)]
struct Cli {
    #[command(subcommand)]
    source: Source,
}

#[derive(Subcommand, Debug)]
enum Source {
    /// Read Kubernetes manifests (kubectl get ... -o yaml, multi-document
    /// YAML or JSON); with no --input, the bundled sample cluster.
    File(FileArgs),
    /// Watch the Kubernetes API.
    Kube(KubeArgs),
    /// Stream this node's view from a kpng server (`... to-api`).
    Api(ApiArgs),
}

/// Mutual TLS files, for `tcp://` addresses.
#[derive(Args, Debug, Default)]
struct TlsArgs {
    /// This side's certificate (PEM).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// This side's private key (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// The CA the peer's certificate must chain to (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    fn address(&self, uri: &str) -> Result<kpng_api::Address, Error> {
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
struct ApiArgs {
    /// The server: `unix:///run/kpng.sock` (or a socket path), or
    /// `tcp://host:port` with the `--tls-*` files.
    #[arg(long)]
    api: String,
    #[command(flatten)]
    tls: TlsArgs,
    /// This node's name (not needed by `to-api`, which serves them all).
    #[arg(long, default_value = "")]
    node: String,
    #[command(subcommand)]
    sink: Sink,
}

#[derive(Args, Debug)]
struct FileArgs {
    /// The manifest file.
    #[arg(long)]
    input: Option<PathBuf>,
    /// This node's name (default: node-a for the bundled sample, else the
    /// hostname).
    #[arg(long)]
    node: Option<String>,
    /// Re-read the file when it changes, and keep syncing.
    #[arg(long)]
    watch: bool,
    /// Serve only Services labelled with this service-proxy-name.
    #[arg(long)]
    proxy_name: Option<String>,
    #[command(subcommand)]
    sink: Sink,
}

#[derive(Args, Debug)]
struct KubeArgs {
    /// A kubeconfig file (default: in-cluster, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// This node's name (needed by every sink but `to-api`, which serves
    /// every node).
    #[arg(long)]
    node: Option<String>,
    /// Serve only Services labelled with this service-proxy-name.
    #[arg(long)]
    proxy_name: Option<String>,
    #[command(subcommand)]
    sink: Sink,
}

// The variant names are the command's sink words (`to-nft`, `to-api`…).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand, Debug)]
enum Sink {
    /// Program nftables (tables `ip kpng` and `ip6 kpng`).
    ToNft(NftArgs),
    /// Program iptables and ip6tables in kube-proxy's layout.
    ToIptables(IptablesArgs),
    /// Serve the ENLS to node agents (`kpng api ... to-nft`).
    ToApi(ListenArgs),
    /// Write this node's view as YAML at each sync (for debugging).
    ToFile(OutputArgs),
}

#[derive(Args, Debug)]
struct ListenArgs {
    /// Where: `unix:///run/kpng.sock` (or a socket path; mode 0600), or
    /// `tcp://host:port` with the `--tls-*` files (clients without a
    /// certificate from the CA are refused).
    #[arg(long)]
    listen: String,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Args, Debug)]
struct OutputArgs {
    /// The file, replaced whole at each sync; `-`: standard output.
    #[arg(long)]
    output: PathBuf,
    /// `yaml` or `json`.
    #[arg(long, default_value = "yaml", value_parser = ["yaml", "json"])]
    format: String,
    /// Exit after the first write.
    #[arg(long)]
    once: bool,
}

impl Sink {
    /// The backend flags, for the sinks that program the kernel.
    fn args(&self) -> Option<&BackendArgs> {
        match self {
            Sink::ToNft(args) => Some(&args.common),
            Sink::ToIptables(args) => Some(&args.common),
            Sink::ToApi(_) | Sink::ToFile(_) => None,
        }
    }

    fn once(&self) -> bool {
        match self {
            Sink::ToFile(out) => out.once,
            other => other.args().is_some_and(|a| a.once),
        }
    }
}

/// Writes the node view (with its revision) as YAML or JSON, replacing
/// the file atomically, or to standard output.
struct ViewFile {
    path: PathBuf,
    json: bool,
}

impl kpng_sink::FullStateSink for ViewFile {
    fn sync(&mut self, view: &kpng_model::view::NodeView) -> Result<(), kpng_sink::SinkError> {
        let failed = |e: String| kpng_sink::SinkError::backend("to-file", e);
        let text = if self.json {
            let mut text = serde_json::to_string_pretty(view).map_err(|e| failed(e.to_string()))?;
            text.push('\n');
            text
        } else {
            serde_saphyr::to_string(view).map_err(|e| failed(e.to_string()))?
        };
        if self.path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            return std::io::Write::write_all(&mut out, text.as_bytes())
                .map_err(|e| failed(format!("standard output: {e}")));
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| failed(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| failed(format!("{}: {e}", self.path.display())))
    }
}

#[derive(Args, Debug)]
struct NftArgs {
    /// Run through an aggregator served on this unix socket (mode 0600):
    /// the proxy is one producer, and other processes (a CNI, a firewall)
    /// publish their nftables tables there; everything is applied in one
    /// rate-limited transaction.
    #[arg(long)]
    aggregator_socket: Option<PathBuf>,
    #[command(flatten)]
    common: BackendArgs,
}

#[derive(Args, Debug)]
struct IptablesArgs {
    /// Run through an aggregator served on this unix socket (mode 0600):
    /// the proxy publishes its `KUBE-` chains, other processes theirs.
    #[arg(long)]
    aggregator_socket: Option<PathBuf>,
    /// Which iptables: `nft`, `legacy`, or `auto` (the one that already
    /// holds rules, as kube-proxy picks).
    #[arg(long, default_value = "auto", value_parser = ["auto", "nft", "legacy"])]
    iptables_mode: String,
    #[command(flatten)]
    common: BackendArgs,
}

/// The flags every backend takes, with kube-proxy's names.
#[derive(Args, Debug)]
struct BackendArgs {
    /// Print the rules instead of applying them.
    #[arg(long)]
    dry_run: bool,
    /// Exit after the first successful sync (non-zero if it failed).
    #[arg(long)]
    once: bool,
    /// The pod CIDRs, comma-separated (traffic from them is not
    /// masqueraded; it short-circuits externalTrafficPolicy Local).
    #[arg(long, default_value = "")]
    cluster_cidr: String,
    /// The Service CIDRs, comma-separated (unallocated addresses in them
    /// are dropped).
    #[arg(long, default_value = "")]
    service_cidr: String,
    /// Where NodePorts listen, comma-separated CIDRs (default: the node's
    /// addresses).
    #[arg(long)]
    nodeport_addresses: Option<String>,
    /// Masquerade all Service traffic.
    #[arg(long)]
    masquerade_all: bool,
    /// The mark bit that asks for masquerade.
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    masquerade_bit: u8,
    /// The least time between syncs after a burst (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    min_sync_period: Duration,
    /// Syncs allowed back to back before --min-sync-period applies.
    #[arg(long, default_value_t = 2)]
    sync_burst: u32,
    /// Where `/healthz` and `/livez` are served (kube-proxy's port);
    /// empty: not served. Health-check node ports of Services with
    /// `externalTrafficPolicy: Local` are served on `--nodeport-addresses`
    /// (all addresses by default) whenever this is set.
    #[arg(long, default_value = "0.0.0.0:10256")]
    healthz_bind_address: String,
    /// How long a change may wait before `/healthz` reports unhealthy.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    healthz_timeout: Duration,
    /// Do not delete stale UDP conntrack entries after syncs (done over
    /// ctnetlink, as kube-proxy does).
    #[arg(long)]
    no_conntrack_cleanup: bool,
    /// kube-proxy's: `nf_conntrack_max` is this times the cores (at least
    /// `--conntrack-min`); 0 leaves it. Read-only outside the host's
    /// network namespace: then left, with a warning.
    #[arg(long, default_value_t = 32_768)]
    conntrack_max_per_core: u64,
    /// kube-proxy's: the least `nf_conntrack_max`.
    #[arg(long, default_value_t = 131_072)]
    conntrack_min: u64,
    /// kube-proxy's: idle established TCP flows are forgotten after this
    /// (0 leaves the sysctl).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    conntrack_tcp_timeout_established: Duration,
    /// kube-proxy's: flows in CLOSE_WAIT are forgotten after this.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    conntrack_tcp_timeout_close_wait: Duration,
    /// kube-proxy's: out-of-window TCP packets are not marked INVALID.
    #[arg(long)]
    conntrack_tcp_be_liberal: bool,
    /// kube-proxy's: the UDP timeout (0 leaves the sysctl).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    conntrack_udp_timeout: Duration,
    /// kube-proxy's: the UDP stream timeout (0 leaves the sysctl).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    conntrack_udp_timeout_stream: Duration,
    /// Where Prometheus metrics are served (`/metrics`, kube-proxy's
    /// port); empty: not served.
    #[arg(long, default_value = "127.0.0.1:10249")]
    metrics_bind_address: String,
}

/// A duration in Go's format, as kube-proxy takes it: one or more
/// number-unit pairs (`1m30s`, `1.5h`, `500ms`), units `ns`, `us` (`µs`),
/// `ms`, `s`, `m` and `h`; a bare `0` is zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
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

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Ingest(#[from] kpng_kube::Error),
    #[error(transparent)]
    Nft(#[from] kpng_backend_nft::Error),
    #[error(transparent)]
    Iptables(#[from] kpng_backend_iptables::Error),
    #[error(transparent)]
    Sync(#[from] kpng_sink::SinkError),
    #[error("kubernetes client: {0}")]
    Kube(String),
    #[error(transparent)]
    Api(#[from] kpng_api::Error),
    #[error("{0}")]
    Usage(String),
}

/// The error and its causes, on one line.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The backend the command line asks for, wrapped to report each sync.
fn backend(
    sink: &Sink,
    metrics: &kpng_health::metrics::Metrics,
    store: Option<&kpng_store::Reader>,
) -> Result<Box<dyn IncrementalSink + Send>, Error> {
    // Network programming latency from the EndpointSlices' trigger times
    // when this process holds the store they went into.
    let measured = |inner: Box<dyn IncrementalSink + Send>| {
        let measured = kpng_health::metrics::Measured::new(inner, metrics.clone());
        match store {
            Some(store) => measured.with_store(store.clone()),
            None => measured,
        }
    };
    Ok(match sink {
        Sink::ToFile(out) => Box::new(kpng_sink::FullState::new(ViewFile {
            path: out.output.clone(),
            json: out.format == "json",
        })),
        Sink::ToApi(_) => {
            return Err(Error::Usage(
                "to-api serves a store: use it with the file or kube source".into(),
            ));
        }
        Sink::ToNft(nft) => {
            let args = &nft.common;
            let mut config = NftConfig::default();
            config.cluster_cidrs = NftConfig::parse_cidrs("--cluster-cidr", &args.cluster_cidr)?;
            config.service_cidrs = NftConfig::parse_cidrs("--service-cidr", &args.service_cidr)?;
            if let Some(list) = &args.nodeport_addresses {
                config.nodeport_addresses =
                    Some(NftConfig::parse_cidrs("--nodeport-addresses", list)?);
            }
            config.masquerade_all = args.masquerade_all;
            config.masquerade_bit = args.masquerade_bit;
            let backend = NftBackend::new(config);
            match (&nft.aggregator_socket, args.dry_run) {
                (Some(path), false) => {
                    let nft = Nft::new(None);
                    Box::new(Report(aggregated(backend, nft, path, args, metrics), false))
                }
                (_, true) => Box::new(measured(Box::new(Report(backend.dry_run(), true)))),
                (None, false) => with_health(measured(Box::new(Report(backend, false))), args)?,
            }
        }
        Sink::ToIptables(ipt) => {
            let args = &ipt.common;
            let mut config = IptablesConfig::default();
            config.cluster_cidrs =
                IptablesConfig::parse_cidrs("--cluster-cidr", &args.cluster_cidr)?;
            config.service_cidrs =
                IptablesConfig::parse_cidrs("--service-cidr", &args.service_cidr)?;
            if let Some(list) = &args.nodeport_addresses {
                config.nodeport_addresses =
                    Some(IptablesConfig::parse_cidrs("--nodeport-addresses", list)?);
            }
            config.masquerade_all = args.masquerade_all;
            config.masquerade_bit = args.masquerade_bit;
            config.mode = match ipt.iptables_mode.as_str() {
                "nft" => Some(IptablesMode::Nft),
                "legacy" => Some(IptablesMode::Legacy),
                _ => None,
            };
            let runner = Runner {
                prefix: Vec::new(),
                mode: config.mode,
            };
            let backend = IptablesBackend::new(config);
            match (&ipt.aggregator_socket, args.dry_run) {
                (Some(path), false) => {
                    let iptables = Iptables::new(runner);
                    Box::new(Report(
                        aggregated(backend, iptables, path, args, metrics),
                        false,
                    ))
                }
                (_, true) => Box::new(measured(Box::new(Report(backend.dry_run(), true)))),
                (None, false) => with_health(measured(Box::new(Report(backend, false))), args)?,
            }
        }
    })
}

/// The metrics of this process, served on `--metrics-bind-address` for the
/// sinks that program the kernel, dry runs included (how people try kpng).
/// A dry run beside a running kube-proxy finds its port taken: then it
/// warns and goes on without serving them.
fn serve_metrics(
    sink: &Sink,
    store: Option<kpng_store::Reader>,
) -> Result<kpng_health::metrics::Metrics, Error> {
    let metrics = kpng_health::metrics::Metrics::new();
    let Some(args) = sink.args().filter(|a| !a.metrics_bind_address.is_empty()) else {
        return Ok(metrics);
    };
    let listener = match bind_tcp("--metrics-bind-address", &args.metrics_bind_address) {
        Ok(listener) => listener,
        Err(error) if args.dry_run => {
            tracing::warn!(%error, "metrics not served");
            return Ok(metrics);
        }
        Err(error) => return Err(error),
    };
    tokio::spawn(kpng_health::metrics::serve_metrics(
        listener,
        metrics.clone(),
        store,
    ));
    Ok(metrics)
}

/// Binds a TCP listener for a `host:port` flag.
fn bind_tcp(flag: &str, value: &str) -> Result<tokio::net::TcpListener, Error> {
    let address: std::net::SocketAddr = value
        .parse()
        .map_err(|_| Error::Usage(format!("{flag} {value:?}: not host:port")))?;
    std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| Error::Usage(format!("{flag} {address}: {e}")))
}

/// Adds what kube-proxy runs beside a kernel backend: UDP conntrack
/// cleanup, `/healthz` and `/livez` on `--healthz-bind-address`, and the
/// health-check node ports of the node view.
fn with_health<S: IncrementalSink + Send + 'static>(
    backend: S,
    args: &BackendArgs,
) -> Result<Box<dyn IncrementalSink + Send>, Error> {
    // The full-state sinks (conntrack cleanup, health checks) follow the
    // backend's own node view: no copy of their own (~10 MB at 10k
    // Services × 10 endpoints).
    let mut full: Vec<Box<dyn kpng_sink::FullStateSink + Send>> = Vec::new();
    // kube-proxy's conntrack settings, once, as it applies them at start.
    let mut sysctls = kpng_conntrack::Sysctls::default();
    sysctls.max_per_core = args.conntrack_max_per_core;
    sysctls.min = args.conntrack_min;
    sysctls.tcp_established_timeout = args.conntrack_tcp_timeout_established;
    sysctls.tcp_close_wait_timeout = args.conntrack_tcp_timeout_close_wait;
    sysctls.tcp_be_liberal = args.conntrack_tcp_be_liberal;
    sysctls.udp_timeout = args.conntrack_udp_timeout;
    sysctls.udp_stream_timeout = args.conntrack_udp_timeout_stream;
    for (sysctl, error) in sysctls.apply() {
        tracing::warn!(sysctl, %error, "conntrack setting not applied");
    }
    if !args.no_conntrack_cleanup {
        // Over ctnetlink: the `conntrack` tool is never run.
        let cidrs = NftConfig::parse_cidrs("--service-cidr", &args.service_cidr)?;
        full.push(Box::new(
            kpng_conntrack::ConntrackCleaner::new().with_service_cidrs(cidrs),
        ));
    }
    let backend: Box<dyn IncrementalSink + Send> = if args.healthz_bind_address.is_empty() {
        Box::new(backend)
    } else {
        let listener = bind_tcp("--healthz-bind-address", &args.healthz_bind_address)?;
        let health = kpng_health::ProxyHealth::new(args.healthz_timeout);
        tokio::spawn(kpng_health::serve_healthz(listener, health.clone()));
        // kube-proxy's way: the node's addresses in the prefixes, or every
        // address when none is given.
        let server = match &args.nodeport_addresses {
            Some(list) => kpng_health::HealthCheckServer::on_prefixes(
                NftConfig::parse_cidrs("--nodeport-addresses", list)?,
                health.clone(),
            ),
            None => kpng_health::HealthCheckServer::new(
                vec![std::net::Ipv4Addr::UNSPECIFIED.into()],
                health.clone(),
            ),
        };
        full.push(Box::new(server));
        Box::new(kpng_health::Healthy::new(backend, health))
    };
    if full.is_empty() {
        return Ok(backend);
    }
    // The backend first: cleanup and health checks follow its new rules.
    Ok(Box::new(kpng_sink::Follow::new(backend, full)))
}

/// `backend` as producer `kpng` of an aggregator of `subsystem` served on
/// `path`; the aggregator flushes other producers' publications at most as
/// `--min-sync-period` allows.
fn aggregated<B>(
    backend: B,
    subsystem: B::Subsystem,
    path: &std::path::Path,
    args: &BackendArgs,
    metrics: &kpng_health::metrics::Metrics,
) -> Publisher<B>
where
    B: Producer,
    B::Subsystem: Send + 'static,
    <B::Subsystem as Subsystem>::Key: Serialize + DeserializeOwned + Send + Sync + 'static,
    <B::Subsystem as Subsystem>::Value: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let aggregator = std::sync::Arc::new(std::sync::Mutex::new(Aggregator::new(subsystem)));
    let (changed, rx) = tokio::sync::mpsc::channel(64);
    let limiter = kpng_diff::SyncLimiter::new(args.min_sync_period, args.sync_burst);
    tokio::spawn(kpng_aggregator::run(aggregator.clone(), rx, limiter));
    let (observed, metrics) = (aggregator.clone(), metrics.clone());
    tokio::spawn(async move {
        loop {
            if let Ok(aggregator) = observed.lock() {
                metrics.observe_aggregator(aggregator.transactions());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let served = aggregator.clone();
    let path = path.to_owned();
    tokio::spawn(async move {
        if let Err(e) = kpng_aggregator::socket::serve(&path, served, changed).await {
            tracing::error!(error = %e, "the aggregator socket failed");
        }
    });
    Publisher::new(backend, "kpng", aggregator)
}

fn drive_config(args: &BackendArgs, once: bool) -> DriveConfig {
    let mut config = DriveConfig::default();
    config.min_sync_period = args.min_sync_period;
    config.burst = args.sync_burst;
    config.once = once;
    config
}

/// What a backend tells after a sync: its script, whether it was full, and
/// how many commands it held.
trait Reported: IncrementalSink {
    /// Writes the last sync's script.
    fn script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()>;
    fn summary(&self) -> (bool, usize);
}

impl Reported for NftBackend {
    fn script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self.last_transaction() {
            Some(tx) => write!(out, "{tx}"),
            None => Ok(()),
        }
    }
    fn summary(&self) -> (bool, usize) {
        (self.last_sync().full, self.last_sync().commands)
    }
}

impl<B: Producer + Reported> Reported for Publisher<B> {
    fn script(&self, _: &mut dyn std::io::Write) -> std::io::Result<()> {
        // What reaches the kernel is the aggregator's business.
        Ok(())
    }
    fn summary(&self) -> (bool, usize) {
        self.backend().summary()
    }
}

impl Reported for IptablesBackend {
    fn script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(self.last_script().as_bytes())
    }
    fn summary(&self) -> (bool, usize) {
        (self.last_sync().full, self.last_sync().rules)
    }
}

/// Prints each applied (or dry-run) script, and a summary, after a sync.
struct Report<S>(S, bool);

impl<B: Reported> IncrementalSink for Report<B> {
    fn reset(&mut self) {
        self.0.reset();
    }
    fn apply(&mut self, op: &kpng_model::view::ViewOp) -> Result<(), kpng_sink::SinkError> {
        self.0.apply(op)
    }
    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.0.view()
    }
    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        self.0.share_view(view);
    }
    fn sync(&mut self, revision: u64) -> Result<(), kpng_sink::SinkError> {
        self.0.sync(revision)?;
        let (full, commands) = self.0.summary();
        if self.1 {
            // A closed pipe (`| head`) is not worth a panic.
            let _ = self.0.script(&mut std::io::stdout().lock());
        }
        tracing::info!(revision, full, commands, "synced");
        Ok(())
    }
}

/// Serves the store (`to-api`) or drives the sink from it.
async fn finish(
    reader: kpng_store::Reader,
    node: Option<&str>,
    sink: &Sink,
    once: bool,
) -> Result<(), Error> {
    if let Sink::ToApi(listen) = sink {
        let address = listen.tls.address(&listen.listen)?;
        tracing::info!(address = %listen.listen, "serving the ENLS");
        return Ok(kpng_api::serve_at(&address, kpng_api::Server::new(reader)).await?);
    }
    let node = node.ok_or_else(|| Error::Usage("--node is needed by this sink".into()))?;
    let metrics = serve_metrics(sink, Some(reader.clone()))?;
    let mut backend = backend(sink, &metrics, Some(&reader))?;
    let mut projector = NodeProjector::new(node);
    let config = match sink.args() {
        Some(args) => drive_config(args, once),
        None => {
            let mut config = DriveConfig::default();
            config.once = once;
            config
        }
    };
    Ok(drive(reader, &mut projector, &mut *backend, &config).await?)
}

async fn run(cli: Cli) -> Result<(), Error> {
    match cli.source {
        Source::File(args) => {
            let node = args.node.clone().unwrap_or_else(|| {
                if args.input.is_none() {
                    "node-a".into()
                } else {
                    hostname()
                }
            });
            let mut config = IngestConfig::for_node(node.as_str());
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let mut ingest = Ingest::new(Store::new(), config.clone());
            let since = match &args.input {
                Some(path) => file::modified(path).await,
                None => None,
            };
            // Each object is translated as it is parsed, and dropped.
            match &args.input {
                Some(path) => ingest.load_file(path).await?,
                None => ingest.load_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)?,
            };
            let reader = ingest.reader();
            let once = args.sink.once() || !args.watch;
            // Readers see no new revision once the writer is gone: keep it,
            // or hand it to the file watcher.
            let _writer = match (&args.input, args.watch) {
                (Some(path), true) => {
                    let path = path.clone();
                    let period = Duration::from_secs(1);
                    tokio::spawn(async move {
                        file::watch_changes(&path, &mut ingest, period, since).await;
                    });
                    None
                }
                _ => Some(ingest),
            };
            finish(reader, Some(&node), &args.sink, once).await
        }
        Source::Kube(args) => {
            let client = match &args.kubeconfig {
                Some(path) => {
                    let kubeconfig = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| Error::Kube(one_line(&e)))?;
                    let config =
                        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                            .await
                            .map_err(|e| Error::Kube(one_line(&e)))?;
                    kube::Client::try_from(config).map_err(|e| Error::Kube(one_line(&e)))?
                }
                None => kube::Client::try_default()
                    .await
                    .map_err(|e| Error::Kube(one_line(&e)))?,
            };
            let mut config = IngestConfig::for_node(args.node.as_deref().unwrap_or_default());
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let mut ingest = Ingest::new(Store::new(), config);
            let reader = ingest.reader();
            let mut watch = WatchConfig::default();
            // A server for every node watches every Node; a node-local
            // proxy only its own.
            watch.nodes = match (&args.sink, &args.node) {
                (Sink::ToApi(_), _) | (_, None) => NodeScope::All,
                (_, Some(node)) => NodeScope::Only(node.clone()),
            };
            tokio::spawn(async move { kpng_kube::watch::run(client, &mut ingest, watch).await });
            let once = args.sink.once();
            finish(reader, args.node.as_deref(), &args.sink, once).await
        }
        Source::Api(args) => {
            let address = args.tls.address(&args.api)?;
            if let Sink::ToApi(_) = &args.sink {
                // A chained server: mirror the upstream ENLS, serve it.
                let mut store = Store::new();
                let reader = store.reader();
                let config = kpng_api::AgentConfig::default();
                tokio::spawn(async move {
                    let _ = kpng_api::run_mirror(&address, &mut store, &config).await;
                });
                return finish(reader, None, &args.sink, false).await;
            }
            if args.node.is_empty() {
                return Err(Error::Usage("--node is needed by this sink".into()));
            }
            let metrics = serve_metrics(&args.sink, None)?;
            let mut sink = backend(&args.sink, &metrics, None)?;
            let mut config = kpng_api::AgentConfig::default();
            config.once = args.sink.once();
            Ok(kpng_api::run_agent(&address, &args.node, &mut *sink, &config).await?)
        }
    }
}

/// The command line a config file stands for. The file holds the source
/// (`source: kube`), its flags (`node: …`), the sink (`sink: to-nft`) and
/// the sink's flags (`flags: {cluster-cidr: …}`), with kube-proxy's flag
/// names. A string value may name environment variables (`${VAR}`),
/// expanded after the file is parsed, so a value cannot change the
/// document; an unset variable is an error that names it. A `true` flag is
/// given bare, a `false` one left out. Flags given on the command line
/// after `--config FILE` (`extra`) override the file's.
fn config_args(
    path: &str,
    doc: &serde_json::Value,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let map = doc
        .as_object()
        .ok_or_else(|| format!("{path}: expected a mapping"))?;
    let word = |key: &str| {
        let value = map
            .get(key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("{path}: `{key}` is missing"))?;
        expand_env(value).map_err(|e| format!("{path}: {key}: {e}"))
    };
    let given = given_flags(extra);
    let flags = |out: &mut Vec<String>,
                 entries: &mut dyn Iterator<Item = (&String, &serde_json::Value)>|
     -> Result<(), String> {
        for (key, value) in entries {
            if given.contains(key.as_str()) {
                continue; // the command line's wins
            }
            match value {
                serde_json::Value::Bool(true) => out.push(format!("--{key}")),
                serde_json::Value::Bool(false) | serde_json::Value::Null => {}
                serde_json::Value::String(s) => {
                    let s = expand_env(s).map_err(|e| format!("{path}: {key}: {e}"))?;
                    out.push(format!("--{key}={s}"));
                }
                other => out.push(format!("--{key}={other}")),
            }
        }
        Ok(())
    };
    let source = word("source")?;
    let sink = word("sink")?;
    let mut argv = vec!["kpng".to_owned(), source.clone()];
    let mut source_flags = map
        .iter()
        .filter(|(k, _)| !["source", "sink", "flags"].contains(&k.as_str()));
    flags(&mut argv, &mut source_flags)?;
    let (extra_source, extra_sink) = split_extra(&source, &sink, extra);
    argv.extend(extra_source);
    argv.push(sink);
    if let Some(sink_flags) = map.get("flags").and_then(|v| v.as_object()) {
        flags(&mut argv, &mut sink_flags.iter())?;
    }
    argv.extend(extra_sink);
    Ok(argv)
}

/// The command line a config file stands for: kube-proxy's own
/// (`KubeProxyConfiguration`, its warnings logged) or kpng's YAML.
fn from_config(path: &str, extra: &[String]) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let doc: serde_json::Value =
        serde_saphyr::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    if !kube_proxy::is_kube_proxy_config(&doc) {
        return config_args(path, &doc, extra);
    }
    let (argv, warnings) = kube_proxy::command_line(path, doc, extra)?;
    for warning in warnings {
        tracing::warn!("not done by kpng: {warning}");
    }
    Ok(argv)
}

/// The name of a long flag (`--name` or `--name=value`); `None` for
/// anything else.
fn flag_name(arg: &str) -> Option<&str> {
    let long = arg.strip_prefix("--")?;
    Some(long.split_once('=').map_or(long, |(name, _)| name))
}

/// The names of the flags given on the command line: they override a
/// config file's.
fn given_flags(extra: &[String]) -> std::collections::BTreeSet<&str> {
    extra.iter().filter_map(|a| flag_name(a)).collect()
}

/// Splits command-line flags into the source's and the rest (the sink's,
/// and any clap will refuse), by the source command's own flags; a flag's
/// value, when given apart (`--node a`), goes with it.
fn split_extra(source: &str, sink: &str, extra: &[String]) -> (Vec<String>, Vec<String>) {
    use clap::CommandFactory as _;
    let cli = Cli::command();
    let source_cmd = cli.find_subcommand(source);
    let sink_cmd = source_cmd.and_then(|c| c.find_subcommand(sink));
    let takes_value = |cmd: Option<&clap::Command>, name: &str| {
        cmd.and_then(|c| c.get_arguments().find(|a| a.get_long() == Some(name)))
            .map(|a| a.get_action().takes_values())
    };
    let (mut to_source, mut to_sink) = (Vec::new(), Vec::new());
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let Some(name) = flag_name(arg) else {
            to_sink.push(arg.clone());
            continue;
        };
        let (target, takes) = match (takes_value(source_cmd, name), takes_value(sink_cmd, name)) {
            (Some(takes), None) => (&mut to_source, takes),
            (_, Some(takes)) => (&mut to_sink, takes),
            (None, None) => (&mut to_sink, false),
        };
        target.push(arg.clone());
        if takes && !arg.contains('=') {
            target.extend(args.next().cloned());
        }
    }
    (to_source, to_sink)
}

/// Replaces each `${NAME}` in `text` by the environment variable's value.
///
/// # Errors
/// The first variable that is not set, by name.
fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find('}') {
            Some(end) => {
                let name = &rest[start + 2..start + 2 + end];
                let value = std::env::var(name).map_err(|_| format!("${{{name}}} is not set"))?;
                out.push_str(&value);
                rest = &rest[start + 3 + end..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether this process serves the ENLS (`to-api`): many streams at once,
/// where the allocator's defaults fit. Otherwise it is one node's proxy.
fn is_server(cli: &Cli) -> bool {
    match &cli.source {
        Source::File(args) => matches!(args.sink, Sink::ToApi(_)),
        Source::Kube(args) => matches!(args.sink, Sink::ToApi(_)),
        Source::Api(_) => false,
    }
}

/// Tunes glibc's malloc for what this process is. Variables set in the
/// environment (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`) still
/// decide. Figures at 10k Services × 10 endpoints, from `cargo bench -p
/// kpng --bench rss`.
///
/// - **Arenas.** glibc gives threads arenas of their own, up to 8 per
///   core, and memory freed into one is not reused by another. The API
///   server, whose streams run in parallel, gets one per core. A node's
///   proxy does its work one step at a time (ingest, then a sync), so it
///   gets one: a second arena held ~2 MiB of the dry run's peak (47 → 45
///   MiB), and before the limit 8 to 12 MiB were such slack.
/// - **The mmap threshold.** A node's proxy holds a few large buffers for
///   a moment (a full sync's batch, the lists' pages). glibc raises its
///   mmap threshold to the size of each such buffer freed, so the next
///   ones come from the heap and stay there: a fixed threshold of 256 KiB
///   returns them to the system when freed (the applied sync's peak 79–86
///   → 76 MiB). The API server, whose streams reuse such buffers, keeps
///   glibc's default.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_malloc(cli: &Cli) {
    let server = is_server(cli);
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let arenas = if server {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        } else {
            1
        };
        // SAFETY: mallopt sets one allocator parameter; it is called
        // before the runtime starts any thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(arenas).unwrap_or(i32::MAX));
        }
    }
    if !server && std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc(_: &Cli) {}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kpng=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let cli = match args.get(1).map(String::as_str) {
        Some(first) if first == "--config" || first.starts_with("--config=") => {
            // `--config FILE` or `--config=FILE` (kube-proxy's DaemonSet).
            let (path, extra) = match first.strip_prefix("--config=") {
                Some(path) => (Some(path.to_owned()), args.get(2..).unwrap_or_default()),
                None => (args.get(2).cloned(), args.get(3..).unwrap_or_default()),
            };
            let Some(path) = path else {
                eprintln!("error: --config needs a file");
                return ExitCode::FAILURE;
            };
            match from_config(&path, extra) {
                Ok(argv) => Cli::parse_from(argv),
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => Cli::parse(),
    };
    tune_malloc(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

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
