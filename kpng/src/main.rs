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
use kpng_drive::{DriveConfig, Guarded, HoldStatus, drive};
use kpng_health::Conditions;
use kpng_kube::watch::{NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file, one_line};
use kpng_sink::{IncrementalSink, Logged};
use kpng_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;

mod args;
mod config;
mod configz;
mod kube_proxy;
mod leftovers;
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

/// With `--once`, the failed attempts in a row after which the API
/// source or the agent gives up (kube's 800 ms backoff: about 6 to 12 s;
/// the agent's 200 ms one: about 1.5 to 3 s).
const ONCE_ATTEMPTS: u32 = 5;

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The backend the command line asks for, wrapped to report each sync,
/// behind the guard against mass deletions when it programs the kernel
/// (dry runs included): the guard's hold shows in the metrics and at
/// `/healthz`, and is returned for the driver to re-check.
fn backend(
    sink: &Sink,
    metrics: &kpng_health::metrics::Metrics,
    store: Option<&kpng_store::Reader>,
    conditions: &Conditions,
) -> Result<(Box<dyn IncrementalSink + Send>, Option<HoldStatus>), Error> {
    let mut health = None;
    let backend = unguarded(sink, metrics, store, conditions, &mut health)?;
    let Some(args) = sink.args() else {
        return Ok((backend, None));
    };
    let metrics = metrics.clone();
    let guarded = Guarded::new(backend, args.guard()).observed(move |hold| {
        metrics.held_back(hold.is_some());
        if let Some(health) = &health {
            health.set_held_back(hold.map(ToString::to_string));
        }
    });
    let status = guarded.status();
    Ok((Box::new(guarded), Some(status)))
}

/// The backend the command line asks for, wrapped to report each sync;
/// `health` is what its `/healthz` reports, when it serves one.
fn unguarded(
    sink: &Sink,
    metrics: &kpng_health::metrics::Metrics,
    store: Option<&kpng_store::Reader>,
    conditions: &Conditions,
    health: &mut Option<kpng_health::ProxyHealth>,
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
            let backend = NftBackend::new(NftConfig::new(proxy.clone()).comments(nft.nft_comments));
            let sink: Box<dyn IncrementalSink + Send> = match (&nft.aggregator_socket, args.dry_run)
            {
                (Some(path), false) => {
                    let nft = Nft::new(None);
                    Box::new(Logged::new(aggregated(backend, nft, path, args, metrics)))
                }
                (_, true) => Box::new(measured(Box::new(
                    Logged::new(backend.dry_run()).printing_scripts(),
                ))),
                (None, false) => with_health(
                    measured(Box::new(Logged::new(backend))),
                    args,
                    &proxy,
                    conditions,
                    health,
                )?,
            };
            after_first_sync(sink, args, None)
        }
        Sink::ToEbpf(ebpf) => after_first_sync(
            ebpf_backend(ebpf, &measured, conditions, health)?,
            &ebpf.common,
            None,
        ),
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
            // The iptables kpng programs holds chains of kube-proxy's
            // names that are kpng's: known before kube-proxy's are removed.
            let own = (!args.keep_kube_proxy_rules).then(|| {
                let mode = config.mode.unwrap_or_else(|| Runner::default().mode());
                if !args.dry_run {
                    config.mode = Some(mode);
                }
                mode
            });
            let runner = Runner {
                prefix: Vec::new(),
                mode: config.mode,
                timeout: config.restore_timeout,
                ..Runner::default()
            };
            let backend = IptablesBackend::new(config);
            let sink: Box<dyn IncrementalSink + Send> = match (&ipt.aggregator_socket, args.dry_run)
            {
                (Some(path), false) => {
                    let iptables = Iptables::new(runner);
                    Box::new(Logged::new(aggregated(
                        backend, iptables, path, args, metrics,
                    )))
                }
                (_, true) => Box::new(measured(Box::new(
                    Logged::new(backend.dry_run()).printing_scripts(),
                ))),
                (None, false) => with_health(
                    measured(Box::new(Logged::new(backend))),
                    args,
                    &proxy,
                    conditions,
                    health,
                )?,
            };
            after_first_sync(sink, args, own)
        }
    })
}

/// `sink`, removing kube-proxy's leftovers after its first successful sync
/// (a dry run lists them), unless `--keep-kube-proxy-rules`. `own_iptables`:
/// the iptables mode `to-iptables` programs, whose `KUBE-` chains are
/// kpng's.
fn after_first_sync(
    sink: Box<dyn IncrementalSink + Send>,
    args: &BackendArgs,
    own_iptables: Option<IptablesMode>,
) -> Box<dyn IncrementalSink + Send> {
    if args.keep_kube_proxy_rules {
        tracing::info!("kube-proxy's rules are kept (--keep-kube-proxy-rules)");
        return sink;
    }
    let leftovers = kpng_netfilter::leftovers::Leftovers {
        own_nft_table: Some(NftConfig::default().table),
        own_iptables: own_iptables.map(|mode| {
            let owns: kpng_netfilter::leftovers::OwnChains = Box::new(IptablesBackend::owns_chain);
            (mode, owns)
        }),
        ..Default::default()
    };
    Box::new(leftovers::AfterFirstSync::new(
        sink,
        leftovers::Cleanup {
            leftovers,
            dry_run: args.dry_run,
        },
    ))
}

/// The eBPF backend, with the nftables backend beside it for traffic from
/// outside the node (`--north-south nft`).
fn ebpf_backend(
    ebpf: &args::EbpfArgs,
    measured: &dyn Fn(
        Box<dyn IncrementalSink + Send>,
    ) -> kpng_health::metrics::Measured<Box<dyn IncrementalSink + Send>>,
    conditions: &Conditions,
    health: &mut Option<kpng_health::ProxyHealth>,
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
    with_health(measured(Box::new(sinks)), args, &proxy, conditions, health)
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

/// `to-ebpf --cleanup --dry-run`: prints what [`ebpf_cleanup`] would
/// remove (read from the kernel and the pin directory), and removes
/// nothing.
fn ebpf_cleanup_dry_run(ebpf: &args::EbpfArgs) -> Result<(), Error> {
    let mut plan = Vec::new();
    for pinned in kpng_backend_ebpf::cleanup_plan(&ebpf.bpf_pin_path)? {
        plan.push(format!(
            "would remove the pins {} (detaching their programs)",
            pinned.display()
        ));
    }
    if ebpf.north_south == "nft" {
        for table in NftBackend::cleanup_plan(&NftConfig::new(ebpf.common.proxy()?))? {
            plan.push(format!("would delete table {table}"));
        }
    }
    if plan.is_empty() {
        plan.push(format!(
            "nothing to remove: no pins under {}{}",
            ebpf.bpf_pin_path.display(),
            if ebpf.north_south == "nft" {
                ", no table ip kpng or ip6 kpng"
            } else {
                ""
            }
        ));
    }
    println!("# dry run of --cleanup: nothing is removed");
    for line in plan {
        println!("{line}");
    }
    Ok(())
}

/// What a real run would do besides programming rules, said instead of
/// done by a dry run (which binds no port, sets no sysctl and deletes no
/// conntrack entry).
fn dry_run_notes(sink: &Sink) {
    let Some(args) = sink.args().filter(|a| a.dry_run) else {
        return;
    };
    let not = |what: &str, flag: &str, value: &str| {
        if !value.is_empty() {
            tracing::info!("dry run: {what} not served (a real run: {flag} {value})");
        }
    };
    not(
        "/metrics",
        "--metrics-bind-address",
        &args.metrics_bind_address,
    );
    not(
        "/healthz, /livez and the health check node ports are",
        "--healthz-bind-address",
        &args.healthz_bind_address,
    );
    tracing::info!(
        "dry run: no conntrack sysctl is set{}",
        if args.no_conntrack_cleanup {
            ""
        } else {
            " and no conntrack entry deleted"
        }
    );
    let socket = match sink {
        Sink::ToNft(nft) => nft.aggregator_socket.as_ref(),
        Sink::ToIptables(ipt) => ipt.aggregator_socket.as_ref(),
        _ => None,
    };
    if let Some(path) = socket {
        tracing::info!(
            "dry run: no aggregator serves {} (the rules are printed instead)",
            path.display()
        );
    }
}

/// The metrics of this process, served on `--metrics-bind-address` for the
/// sinks that program the kernel. A dry run binds no port: it serves none.
fn serve_metrics(
    sink: &Sink,
    store: Option<kpng_store::Reader>,
    node: &str,
) -> Result<kpng_health::metrics::Metrics, Error> {
    use kpng_health::metrics::{Metrics, ProxyMode};
    // kube-proxy's failure counters of the mode, `/proxyMode` and
    // `/configz`.
    let metrics = match sink {
        Sink::ToNft(_) => Metrics::for_mode(ProxyMode::Nftables),
        Sink::ToIptables(_) => Metrics::for_mode(ProxyMode::Iptables),
        Sink::ToEbpf(_) | Sink::ToApi(_) | Sink::ToFile(_) => Metrics::new(),
    };
    if let Some(mode) = configz::proxy_mode(sink) {
        metrics.set_proxy_mode(mode);
    }
    if let Some(config) = configz::configz(sink, node) {
        metrics.set_configz(config);
    }
    let Some(args) = sink
        .args()
        .filter(|a| !a.metrics_bind_address.is_empty() && !a.dry_run)
    else {
        return Ok(metrics);
    };
    let listener = bind_tcp("--metrics-bind-address", &args.metrics_bind_address)?;
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
/// health-check node ports of the node view. `health` is set to what
/// `/healthz` reports.
///
/// Never in a dry run: those write sysctls, conntrack and ports.
fn with_health<S: IncrementalSink + Send + 'static>(
    backend: S,
    args: &BackendArgs,
    proxy: &kpng_sink::ProxyConfig,
    conditions: &Conditions,
    health: &mut Option<kpng_health::ProxyHealth>,
) -> Result<Box<dyn IncrementalSink + Send>, Error> {
    if args.dry_run {
        return Err(Error::Usage(
            "internal: a dry run asked for the kernel's companions".into(),
        ));
    }
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
    let mut companions = kpng_health::Companions::new().conditions(conditions.clone());
    if !args.no_conntrack_cleanup {
        let cleaner = kpng_conntrack::ConntrackCleaner::new();
        companions = companions.follower(cleaner.with_service_cidrs(proxy.service_cidrs.clone()));
    }
    if !args.healthz_bind_address.is_empty() {
        let listener = bind_tcp("--healthz-bind-address", &args.healthz_bind_address)?;
        companions = companions.healthz(listener, args.healthz_timeout);
        *health = companions.proxy_health();
    }
    if let Some(prefixes) = proxy.nodeport_addresses.clone() {
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

/// The readiness condition set while no Node object has this node's name.
const NODE_CONDITION: &str = "node";

/// Which Nodes the store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nodes {
    /// Every Node of the input (a file).
    All,
    /// Only this node's, if it exists (the API, watched by name).
    Only,
}

/// Why `node` names no Node object of `snapshot`, or `None` when one has
/// its name: kpng then knows none of the node's addresses, so its
/// NodePorts are served nowhere.
fn node_missing(snapshot: &kpng_store::Snapshot, node: &str, nodes: Nodes) -> Option<String> {
    if snapshot.node(node).is_some() {
        return None;
    }
    const SHOWN: usize = 5;
    let names: Vec<&str> = snapshot.nodes().map(|n| n.name.as_str()).collect();
    let known = match (nodes, names.len()) {
        (Nodes::Only, _) => "the API server has none by that name".to_owned(),
        (Nodes::All, 0) => "the input has no Node objects".to_owned(),
        (Nodes::All, n) if n <= SHOWN => format!("known nodes: {}", names.join(", ")),
        (Nodes::All, n) => format!("known nodes: {}, … ({n} in all)", names[..SHOWN].join(", ")),
    };
    Some(format!(
        "no Node named {node:?} ({known}): its NodePorts are served on no address \
         (--node/--hostname-override must be the Node object's name)"
    ))
}

/// Checks that a Node object has this node's name, now and at each new
/// revision: a warning naming the node and the known ones while none has
/// (at each revision for a file, at each change for the API), and the
/// readiness condition [`NODE_CONDITION`] set (`/healthz` answers 503)
/// until one has.
fn check_node(reader: &kpng_store::Reader, node: &str, nodes: Nodes, conditions: &Conditions) {
    let snapshot = reader.snapshot();
    let mut missing = None;
    if snapshot.is_listed(kpng_model::Kind::Node) {
        missing = node_missing(&snapshot, node, nodes);
        if let Some(why) = &missing {
            tracing::warn!("{why}");
            conditions.set(NODE_CONDITION, why.clone());
        }
    } else {
        conditions.set(
            NODE_CONDITION,
            format!("waiting for the list of Nodes (this node: {node:?})"),
        );
    }
    let (mut reader, node, conditions) = (reader.clone(), node.to_owned(), conditions.clone());
    tokio::spawn(async move {
        let mut seen = (
            snapshot.revision(),
            snapshot.is_listed(kpng_model::Kind::Node),
        );
        loop {
            let Ok(snapshot) = reader
                .wait(|s| (s.revision(), s.is_listed(kpng_model::Kind::Node)) != seen)
                .await
            else {
                return;
            };
            seen = (
                snapshot.revision(),
                snapshot.is_listed(kpng_model::Kind::Node),
            );
            if !seen.1 {
                continue;
            }
            let now = node_missing(&snapshot, &node, nodes);
            match &now {
                Some(why) if nodes == Nodes::All || missing.as_ref() != Some(why) => {
                    tracing::warn!("{why}");
                }
                None if missing.is_some() => {
                    tracing::info!(node = %node, "the Node object of this node is there");
                }
                _ => {}
            }
            match &now {
                Some(why) => conditions.set(NODE_CONDITION, why.clone()),
                None => conditions.clear(NODE_CONDITION),
            }
            missing = now;
        }
    });
}

/// An agent's check of its node (`kpng api`): the server sends this
/// node's Node object in the view when it has one. At each sync without
/// it, the readiness condition [`NODE_CONDITION`] is set (and a warning
/// logged when it goes missing); with it, cleared.
struct NodeSeen<S> {
    inner: S,
    node: String,
    seen: bool,
    warned: bool,
    conditions: Conditions,
}

impl<S> NodeSeen<S> {
    fn new(inner: S, node: &str, conditions: Conditions) -> Self {
        Self {
            inner,
            node: node.to_owned(),
            seen: false,
            warned: false,
            conditions,
        }
    }
}

impl<S: IncrementalSink> IncrementalSink for NodeSeen<S> {
    fn reset(&mut self) {
        // A full view follows, with the node when there is one.
        self.seen = false;
        self.inner.reset();
    }

    fn apply(&mut self, op: &kpng_model::view::ViewOp) -> Result<(), kpng_sink::SinkError> {
        match op {
            kpng_model::view::ViewOp::SetNode(_) => self.seen = true,
            kpng_model::view::ViewOp::DeleteNode => self.seen = false,
            _ => {}
        }
        self.inner.apply(op)
    }

    fn sync(&mut self, revision: u64) -> Result<(), kpng_sink::SinkError> {
        if self.seen {
            if self.warned {
                tracing::info!(node = %self.node, "the Node object of this node is there");
            }
            self.warned = false;
            self.conditions.clear(NODE_CONDITION);
        } else {
            let why = format!(
                "the server has no Node named {:?}: its NodePorts are served on no address \
                 (--node/--hostname-override must be the Node object's name)",
                self.node
            );
            if !self.warned {
                tracing::warn!("{why}");
            }
            self.warned = true;
            self.conditions.set(NODE_CONDITION, why);
        }
        self.inner.sync(revision)
    }

    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.inner.view()
    }

    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        self.inner.share_view(view);
    }
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
    nodes: Nodes,
    sink: &Sink,
    once: bool,
) -> Result<(), Error> {
    if let Sink::ToApi(listen) = sink {
        let address = listen.tls.address(&listen.listen)?;
        tracing::info!(address = %listen.listen, "serving the ENLS");
        return Ok(kpng_api::serve_at(&address, kpng_api::Server::new(reader)).await?);
    }
    let node = node.ok_or_else(|| Error::Usage("--node is needed by this sink".into()))?;
    let conditions = Conditions::default();
    check_node(&reader, node, nodes, &conditions);
    dry_run_notes(sink);
    let metrics = serve_metrics(sink, Some(reader.clone()), node)?;
    let (mut backend, hold) = backend(sink, &metrics, Some(&reader), &conditions)?;
    let mut projector = NodeProjector::new(node);
    let mut config = match sink.args() {
        Some(args) => drive_config(args, once),
        None => {
            let mut config = DriveConfig::default();
            config.once = once;
            config
        }
    };
    config.hold = hold;
    Ok(drive(reader, &mut projector, &mut *backend, &config).await?)
}

async fn run(cli: Cli) -> Result<(), Error> {
    if let Sink::ToEbpf(ebpf) = cli.source.sink()
        && ebpf.cleanup
    {
        return if ebpf.common.dry_run {
            ebpf_cleanup_dry_run(ebpf)
        } else {
            ebpf_cleanup(ebpf)
        };
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
            let mut config = IngestConfig::for_node(node.as_str())
                .allow_empty_input(args.sink.args().is_some_and(|a| a.allow_mass_delete));
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
            finish(reader, Some(&node), Nodes::All, &args.sink, once).await
        }
        Source::Kube(args) => {
            let config = match &args.kubeconfig {
                Some(path) => {
                    let kubeconfig = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| Error::Kube(one_line(&e)))?;
                    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                        .await
                        .map_err(|e| Error::Kube(one_line(&e)))?
                }
                None => kube::Config::infer()
                    .await
                    .map_err(|e| Error::Kube(one_line(&e)))?,
            };
            let server = config.cluster_url.to_string();
            let client = kube::Client::try_from(config).map_err(|e| Error::Kube(one_line(&e)))?;
            let mut config = IngestConfig::for_node(args.node.as_deref().unwrap_or_default());
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let mut ingest = Ingest::new(Store::new(), config);
            let reader = ingest.reader();
            let once = args.sink.once();
            let mut watch = WatchConfig::default();
            // A server for every node watches every Node; a node-local
            // proxy only its own.
            watch.nodes = match (&args.sink, &args.node) {
                (Sink::ToApi(_), _) | (_, None) => NodeScope::All,
                (_, Some(node)) => NodeScope::Only(node.clone()),
            };
            watch.server = server;
            // A one-shot run ends: after a few failed attempts, an error.
            watch.give_up_after = once.then_some(ONCE_ATTEMPTS);
            // The ingest comes back with the watch's end, so that the
            // store stays open (and the sink waiting) until the error is
            // read here.
            let watching = tokio::spawn(async move {
                let watched = kpng_kube::watch::run_on(client, &mut ingest, watch).await;
                (watched, ingest)
            });
            tokio::select! {
                done = finish(reader, args.node.as_deref(), Nodes::Only, &args.sink, once) => done,
                watched = watching => match watched {
                    Ok((Ok(()), _)) => Err(Error::Kube("the watch ended".into())),
                    Ok((Err(e), _)) => Err(e.into()),
                    Err(e) => Err(Error::Kube(format!("the watch failed: {e}"))),
                },
            }
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
                return finish(reader, None, Nodes::All, &args.sink, false).await;
            }
            if args.node.is_empty() {
                return Err(Error::Usage("--node is needed by this sink".into()));
            }
            dry_run_notes(&args.sink);
            let metrics = serve_metrics(&args.sink, None, &args.node)?;
            let conditions = Conditions::default();
            conditions.set(
                NODE_CONDITION,
                format!(
                    "waiting for this node's view from the server (this node: {:?})",
                    args.node
                ),
            );
            // The agent's rounds go through the guard too; a hold is
            // re-checked at the next change the server sends.
            let (sink, _hold) = backend(&args.sink, &metrics, None, &conditions)?;
            let mut sink = NodeSeen::new(sink, &args.node, conditions);
            let mut config = kpng_api::AgentConfig::default();
            config.once = args.sink.once();
            config.once_attempts = ONCE_ATTEMPTS;
            Ok(kpng_api::run_agent(&address, &args.node, &mut sink, &config).await?)
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
