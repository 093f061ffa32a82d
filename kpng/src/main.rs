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
//! kpng kube [--kubeconfig F] --node N to-ebpf [--cgroup-path CG] [--tc-interfaces eth0,…] [--bpf-pin-path DIR] [--north-south nft|none] [--cleanup] [backend flags]
//! kpng kube [--kubeconfig F] --node N to-iptables [--iptables-mode auto|nft|legacy] [--aggregator-socket PATH] [backend flags]
//! ```
//!
//! With no `--input`, `kpng file` reads the bundled sample cluster, so
//! `kpng file to-nft --dry-run` prints a real ruleset on any machine, with
//! no cluster and no root.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kpng_aggregator::Subsystem;
use kpng_aggregator::iptables::{Iptables, Runner};
use kpng_aggregator::nft::Nft;
use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_backend_iptables::{IptablesBackend, IptablesConfig, Mode as IptablesMode};
use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_diff::NodeProjector;
use kpng_drive::{DriveConfig, drive};
use kpng_kube::watch::{NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::{IncrementalSink, Logged};
use kpng_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;

mod args;
mod config;
mod kube_proxy;
mod logging;
mod malloc;

use args::{BackendArgs, Cli, Sink, Source};

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Ingest(#[from] kpng_kube::Error),
    #[error(transparent)]
    Nft(#[from] kpng_backend_nft::Error),
    #[error(transparent)]
    Iptables(#[from] kpng_backend_iptables::Error),
    #[error(transparent)]
    Ebpf(#[from] kpng_backend_ebpf::Error),
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
        Sink::ToFile(out) => Box::new(kpng_sink::FullState::new(match out.format.as_str() {
            "json" => kpng_sink::ViewFile::json(&out.output),
            _ => kpng_sink::ViewFile::yaml(&out.output),
        })),
        Sink::ToApi(_) => {
            return Err(Error::Usage(
                "to-api serves a store: use it with the file or kube source".into(),
            ));
        }
        Sink::ToNft(nft) => {
            let args = &nft.common;
            let proxy = args.proxy()?;
            let backend = NftBackend::new(NftConfig::new(proxy.clone()));
            match (&nft.aggregator_socket, args.dry_run) {
                (Some(path), false) => {
                    let nft = Nft::new(None);
                    Box::new(Logged::new(aggregated(backend, nft, path, args, metrics)))
                }
                (_, true) => Box::new(measured(Box::new(
                    Logged::new(backend.dry_run()).printing_scripts(),
                ))),
                (None, false) => {
                    with_health(measured(Box::new(Logged::new(backend))), args, &proxy)?
                }
            }
        }
        Sink::ToEbpf(ebpf) => ebpf_backend(ebpf, &measured)?,
        Sink::ToIptables(ipt) => {
            let args = &ipt.common;
            let proxy = args.proxy()?;
            let mut config = IptablesConfig::new(proxy.clone());
            config.mode = match ipt.iptables_mode.as_str() {
                "nft" => Some(IptablesMode::Nft),
                "legacy" => Some(IptablesMode::Legacy),
                _ => None,
            };
            config.restore_timeout = ipt.iptables_restore_timeout;
            let runner = Runner {
                prefix: Vec::new(),
                mode: config.mode,
                timeout: config.restore_timeout,
                ..Runner::default()
            };
            let backend = IptablesBackend::new(config);
            match (&ipt.aggregator_socket, args.dry_run) {
                (Some(path), false) => {
                    let iptables = Iptables::new(runner);
                    Box::new(Logged::new(aggregated(
                        backend, iptables, path, args, metrics,
                    )))
                }
                (_, true) => Box::new(measured(Box::new(
                    Logged::new(backend.dry_run()).printing_scripts(),
                ))),
                (None, false) => {
                    with_health(measured(Box::new(Logged::new(backend))), args, &proxy)?
                }
            }
        }
    })
}

/// The eBPF backend, with the nftables backend beside it for traffic from
/// outside the node (`--north-south nft`).
fn ebpf_backend(
    ebpf: &args::EbpfArgs,
    measured: &dyn Fn(
        Box<dyn IncrementalSink + Send>,
    ) -> kpng_health::metrics::Measured<Box<dyn IncrementalSink + Send>>,
) -> Result<Box<dyn IncrementalSink + Send>, Error> {
    let args = &ebpf.common;
    let proxy = args.proxy()?;
    let mut config = EbpfConfig::new(proxy.clone()).pin_path(&ebpf.bpf_pin_path);
    if let Some(path) = &ebpf.cgroup_path {
        config = config.cgroup(path);
    }
    config = config.tc_interfaces(
        ebpf.tc_interfaces
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty()),
    );
    let nft = (ebpf.north_south == "nft").then(|| NftBackend::new(NftConfig::new(proxy.clone())));
    let mut sinks: Vec<Box<dyn IncrementalSink + Send>> = Vec::new();
    if args.dry_run {
        sinks.push(Box::new(
            Logged::new(EbpfBackend::dry_run(config)).printing_scripts(),
        ));
        if let Some(nft) = nft {
            sinks.push(Box::new(Logged::new(nft.dry_run()).printing_scripts()));
        }
        return Ok(Box::new(measured(Box::new(sinks))));
    }
    sinks.push(Box::new(Logged::new(EbpfBackend::attach(config)?)));
    if let Some(nft) = nft {
        sinks.push(Box::new(Logged::new(nft)));
    }
    with_health(measured(Box::new(sinks)), args, &proxy)
}

/// `to-ebpf --cleanup`: detaches the programs, removes the pins, and
/// deletes the nftables tables of `--north-south nft`.
fn ebpf_cleanup(ebpf: &args::EbpfArgs) -> Result<(), Error> {
    let pins = kpng_backend_ebpf::cleanup(&ebpf.bpf_pin_path)?;
    let tables = if ebpf.north_south == "nft" {
        NftBackend::cleanup(&NftConfig::new(ebpf.common.proxy()?))?
    } else {
        0
    };
    tracing::info!(
        pins = %ebpf.bpf_pin_path.display(),
        removed = pins,
        nft_tables = tables,
        "cleaned up"
    );
    Ok(())
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

/// Adds what kube-proxy runs beside a kernel backend: its conntrack
/// settings, UDP conntrack cleanup (over ctnetlink: the `conntrack` tool is
/// never run), `/healthz` and `/livez` on `--healthz-bind-address`, and the
/// health-check node ports of the node view.
fn with_health<S: IncrementalSink + Send + 'static>(
    backend: S,
    args: &BackendArgs,
    proxy: &kpng_sink::ProxyConfig,
) -> Result<Box<dyn IncrementalSink + Send>, Error> {
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
    let mut companions = kpng_health::Companions::new();
    if !args.no_conntrack_cleanup {
        let cleaner = kpng_conntrack::ConntrackCleaner::new();
        companions = companions.follower(cleaner.with_service_cidrs(proxy.service_prefixes()));
    }
    if !args.healthz_bind_address.is_empty() {
        let listener = bind_tcp("--healthz-bind-address", &args.healthz_bind_address)?;
        companions = companions.healthz(listener, args.healthz_timeout);
    }
    if let Some(prefixes) = proxy.nodeport_prefixes() {
        companions = companions.health_check_prefixes(prefixes);
    }
    Ok(companions.around(backend))
}

/// `backend` as producer `kpng` of an aggregator of `subsystem` served on
/// `path`; the aggregator flushes other producers' publications at most as
/// `--min-sync-period` allows, and its transactions are counted.
fn aggregated<B>(
    backend: B,
    subsystem: B::Subsystem,
    path: &std::path::Path,
    args: &BackendArgs,
    metrics: &kpng_health::metrics::Metrics,
) -> kpng_aggregator::Publisher<B>
where
    B: kpng_aggregator::Producer,
    B::Subsystem: Send + 'static,
    <B::Subsystem as Subsystem>::Key: Serialize + DeserializeOwned + Send + Sync + 'static,
    <B::Subsystem as Subsystem>::Value: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let limiter = kpng_drive::SyncLimiter::new(args.min_sync_period, args.sync_burst);
    let (publisher, aggregator) =
        kpng_aggregator::spawn_with_producer(backend, "kpng", subsystem, path, limiter);
    let metrics = metrics.clone();
    tokio::spawn(async move {
        loop {
            if let Ok(aggregator) = aggregator.lock() {
                metrics.observe_aggregator(aggregator.transactions());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    publisher
}

fn drive_config(args: &BackendArgs, once: bool) -> DriveConfig {
    let mut config = DriveConfig::default();
    config.min_sync_period = args.min_sync_period;
    config.burst = args.sync_burst;
    config.once = once;
    config
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
    if let Sink::ToEbpf(ebpf) = cli.source.sink()
        && ebpf.cleanup
    {
        return ebpf_cleanup(ebpf);
    }
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
            let ingest = Ingest::new(Store::new(), config);
            let reader = ingest.reader();
            let mut watch = WatchConfig::default();
            // A server for every node watches every Node; a node-local
            // proxy only its own.
            watch.nodes = match (&args.sink, &args.node) {
                (Sink::ToApi(_), _) | (_, None) => NodeScope::All,
                (_, Some(node)) => NodeScope::Only(node.clone()),
            };
            tokio::spawn(kpng_kube::watch::run(client, ingest, watch));
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

fn main() -> ExitCode {
    // kpng's grammar or kube-proxy's (`--config=… --hostname-override=…`,
    // or its flags alone, in any order), read and checked before anything
    // is bound or started.
    let args: Vec<String> = std::env::args().collect();
    let words = match kube_proxy::words(&args) {
        Ok(words) => words,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse_from(words.argv);
    if let Err(e) = cli.check() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    logging::init(cli.v);
    for warning in words.warnings {
        tracing::warn!("not done by kpng: {warning}");
    }
    malloc::tune(&cli);
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
