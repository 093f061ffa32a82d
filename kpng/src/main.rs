//! `kpng`: a Kubernetes Service proxy assembled from kpng-rs crates.
//!
//! The grammar is the original KPNG's: a source, then a sink.
//!
//! ```text
//! kpng file [--input cluster.yaml] [--node N] [--watch] to-nft [--dry-run] [--once] [backend flags]
//! kpng kube [--kubeconfig F] --node N to-nft [--aggregator-socket PATH] [backend flags]
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
    /// This node's name.
    #[arg(long)]
    node: String,
    /// Serve only Services labelled with this service-proxy-name.
    #[arg(long)]
    proxy_name: Option<String>,
    #[command(subcommand)]
    sink: Sink,
}

#[derive(Subcommand, Debug)]
enum Sink {
    /// Program nftables (tables `ip kpng` and `ip6 kpng`).
    ToNft(NftArgs),
    /// Program iptables and ip6tables in kube-proxy's layout.
    ToIptables(IptablesArgs),
}

impl Sink {
    fn args(&self) -> &BackendArgs {
        match self {
            Sink::ToNft(args) => &args.common,
            Sink::ToIptables(args) => &args.common,
        }
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
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 1s, 500ms, 2m)");
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        _ => return Err(bad()),
    };
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
fn backend(sink: &Sink) -> Result<Box<dyn IncrementalSink + Send>, Error> {
    let args = sink.args();
    Ok(match sink {
        Sink::ToNft(nft) => {
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
                    let nft = Nft::new(vec!["nft".into()]);
                    Box::new(Report(aggregated(backend, nft, path, args), false))
                }
                (_, true) => Box::new(Report(backend.dry_run(), true)),
                (None, false) => Box::new(Report(backend, false)),
            }
        }
        Sink::ToIptables(ipt) => {
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
                    Box::new(Report(aggregated(backend, iptables, path, args), false))
                }
                (_, true) => Box::new(Report(backend.dry_run(), true)),
                (None, false) => Box::new(Report(backend, false)),
            }
        }
    })
}

/// `backend` as producer `kpng` of an aggregator of `subsystem` served on
/// `path`; the aggregator flushes other producers' publications at most as
/// `--min-sync-period` allows.
fn aggregated<B>(
    backend: B,
    subsystem: B::Subsystem,
    path: &std::path::Path,
    args: &BackendArgs,
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
    fn script(&self) -> &str;
    fn summary(&self) -> (bool, usize);
}

impl Reported for NftBackend {
    fn script(&self) -> &str {
        self.last_script()
    }
    fn summary(&self) -> (bool, usize) {
        (self.last_sync().full, self.last_sync().commands)
    }
}

impl<B: Producer + Reported> Reported for Publisher<B> {
    fn script(&self) -> &str {
        // What reaches the kernel is the aggregator's business.
        ""
    }
    fn summary(&self) -> (bool, usize) {
        self.backend().summary()
    }
}

impl Reported for IptablesBackend {
    fn script(&self) -> &str {
        self.last_script()
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
    fn sync(&mut self, revision: u64) -> Result<(), kpng_sink::SinkError> {
        self.0.sync(revision)?;
        let (full, commands) = self.0.summary();
        if self.1 {
            // A closed pipe (`| head`) is not worth a panic.
            let _ = std::io::Write::write_all(
                &mut std::io::stdout().lock(),
                self.0.script().as_bytes(),
            );
        }
        tracing::info!(revision, full, commands, "synced");
        Ok(())
    }
}

async fn run(cli: Cli) -> Result<(), Error> {
    match cli.source {
        Source::File(args) => {
            let nft = args.sink.args();
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
            let objects = match &args.input {
                Some(path) => file::read(path, &config.translate).await?,
                None => file::parse_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)?,
            };
            ingest.load(&objects);
            // The objects are translated: free them before syncing.
            drop(objects);
            let reader = ingest.reader();
            let once = nft.once || !args.watch;
            // Readers see no new revision once the writer is gone: keep it,
            // or hand it to the file watcher.
            let _writer = match (&args.input, args.watch) {
                (Some(path), true) => {
                    let path = path.clone();
                    let translate = config.translate.clone();
                    let period = Duration::from_secs(1);
                    tokio::spawn(async move {
                        file::watch_changes(&path, &mut ingest, &translate, period, since).await;
                    });
                    None
                }
                _ => Some(ingest),
            };
            let mut sink = backend(&args.sink)?;
            let mut projector = NodeProjector::new(node.as_str());
            Ok(drive(reader, &mut projector, &mut *sink, &drive_config(nft, once)).await?)
        }
        Source::Kube(args) => {
            let nft = args.sink.args();
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
            let mut config = IngestConfig::for_node(args.node.as_str());
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let mut ingest = Ingest::new(Store::new(), config);
            let reader = ingest.reader();
            let mut watch = WatchConfig::default();
            watch.nodes = NodeScope::Only(args.node.clone());
            tokio::spawn(async move { kpng_kube::watch::run(client, &mut ingest, watch).await });
            let mut sink = backend(&args.sink)?;
            let mut projector = NodeProjector::new(args.node.as_str());
            Ok(drive(
                reader,
                &mut projector,
                &mut *sink,
                &drive_config(nft, nft.once),
            )
            .await?)
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kpng=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
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
