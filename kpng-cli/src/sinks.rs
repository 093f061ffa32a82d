//! The sink the command line asks for, composed from kpng-rs crates: a
//! backend, its log, its metrics, kube-proxy's companions (conntrack,
//! `/healthz`, health-check node ports), the removal of kube-proxy's
//! leftovers, and the guard against mass deletions.

use std::time::Duration;

use kpng_aggregator::Subsystem;
use kpng_aggregator::iptables::{Iptables, Runner};
use kpng_aggregator::nft::Nft;
use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_backend_iptables::{IptablesBackend, IptablesConfig, Mode as IptablesMode};
use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_drive::{Guarded, HoldStatus};
use kpng_health::Conditions;
use kpng_health::metrics::{Measure, Metrics};
use kpng_sink::{Log, SinkExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::{Action, BackendArgs, EbpfArgs};
use crate::{Error, leftovers};

/// A sink chosen at run time.
pub(crate) type Boxed = Box<dyn kpng_sink::Sink + Send>;

/// What every sink is built from.
pub(crate) struct Parts<'a> {
    pub(crate) metrics: &'a Metrics,
    /// The store the rounds come from, when this process holds it: its
    /// trigger times give the network programming latency.
    pub(crate) store: Option<&'a kpng_store::Reader>,
    pub(crate) conditions: &'a Conditions,
    /// Whether the process ends after its first sync: a backend then
    /// keeps no state for rounds after it.
    pub(crate) once: bool,
}

impl Parts<'_> {
    fn measure(&self) -> Measure {
        let measure = Measure::new(self.metrics.clone());
        match self.store {
            Some(store) => measure.with_store(store.clone()),
            None => measure,
        }
    }
}

/// The backend the command line asks for, composed, behind the guard
/// against mass deletions when it programs the kernel (dry runs
/// included): the guard's hold shows in the metrics and at `/healthz`,
/// and is returned for the driver to re-check.
pub(crate) fn build(
    sink: &Action,
    parts: &Parts<'_>,
) -> Result<(Boxed, Option<HoldStatus>), Error> {
    let mut health = None;
    let backend = unguarded(sink, parts, &mut health)?;
    let Some(args) = sink.args() else {
        return Ok((backend, None));
    };
    let metrics = parts.metrics.clone();
    let guarded = Guarded::new(backend, args.guard()).observed(move |hold| {
        metrics.held_back(hold.is_some());
        if let Some(health) = &health {
            health.set_held_back(hold.map(ToString::to_string));
        }
    });
    let status = guarded.status();
    Ok((guarded.boxed(), Some(status)))
}

/// The backend the command line asks for, composed; `health` is what its
/// `/healthz` reports, when it serves one.
fn unguarded(
    sink: &Action,
    parts: &Parts<'_>,
    health: &mut Option<kpng_health::ProxyHealth>,
) -> Result<Boxed, Error> {
    Ok(match sink {
        Action::ToFile(out) => match out.format.as_str() {
            "json" => kpng_sink::ViewFile::json(&out.output).boxed(),
            _ => kpng_sink::ViewFile::yaml(&out.output).boxed(),
        },
        Action::ToApi(_) => {
            return Err(Error::Usage(
                "to-api serves a store: use it with the file or kube source".into(),
            ));
        }
        Action::Explain(_) => {
            return Err(Error::Usage("explain programs nothing".into()));
        }
        Action::Fleet(_) => {
            return Err(Error::Usage("fleet programs nothing".into()));
        }
        Action::ToNft(nft) => {
            let args = &nft.common;
            let proxy = args.proxy()?;
            args.proxy.masquerade_only("to-nft")?;
            for warning in args.proxy.loopback_warnings("nftables")? {
                tracing::warn!("{warning}");
            }
            // The UDP flow record serves the conntrack cleanup of this
            // process: none without it, or through an aggregator (which
            // replaces the tables without marking the record young).
            let record = !args.no_conntrack_cleanup && nft.aggregator_socket.is_none();
            let config = NftConfig::new(proxy.clone())
                .comments(nft.nft_comments)
                .counters(nft.counters)
                .udp_flows(record.then(|| udp_flow_timeout(args)));
            // Read at each scrape; not through an aggregator (which
            // applies the tables) nor in a dry run (nothing counts).
            if nft.counters && !args.dry_run && nft.aggregator_socket.is_none() {
                parts
                    .metrics
                    .count_connections(kpng_backend_nft::CounterReader::new(&config));
            }
            let backend = NftBackend::new(config);
            let backend = if parts.once {
                backend.one_shot()
            } else {
                backend
            };
            let flow_record = backend.flow_record();
            let sink = kernel(
                backend,
                NftBackend::dry_run,
                || Nft::new(None),
                nft.aggregator_socket.as_deref(),
                flow_record,
                args,
                &proxy,
                parts,
                health,
            )?;
            after_first_sync(sink, args, None)
        }
        Action::ToEbpf(ebpf) => {
            after_first_sync(ebpf_backend(ebpf, parts, health)?, &ebpf.common, None)
        }
        Action::ToIptables(ipt) => {
            let args = &ipt.common;
            let proxy = args.proxy()?;
            args.proxy.masquerade_only("to-iptables")?;
            for warning in args.proxy.loopback_warnings("iptables")? {
                tracing::warn!("{warning}");
            }
            let mut config = IptablesConfig::new(proxy.clone());
            config.mode = match ipt.iptables_mode.as_str() {
                "nft" => Some(IptablesMode::Nft),
                "legacy" => Some(IptablesMode::Legacy),
                _ => None,
            };
            config.restore_timeout = ipt.iptables_restore_timeout;
            config.layout = ipt
                .iptables_layout
                .parse()
                .map_err(|e: kpng_backend_iptables::Error| Error::Usage(e.to_string()))?;
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
            let sink = kernel(
                backend,
                IptablesBackend::dry_run,
                || Iptables::new(runner),
                ipt.aggregator_socket.as_deref(),
                None,
                args,
                &proxy,
                parts,
                health,
            )?;
            after_first_sync(sink, args, own)
        }
    })
}

/// A netfilter backend as the flags ask: in a dry run, printing each
/// round's script; with `socket`, a producer of an aggregator served
/// there; else with kube-proxy's companions. Logged and measured.
#[allow(clippy::too_many_arguments)]
fn kernel<B>(
    backend: B,
    dry_run: fn(B) -> B,
    subsystem: impl FnOnce() -> B::Subsystem,
    socket: Option<&std::path::Path>,
    flow_record: Option<kpng_netfilter::conntrack::FlowRecord>,
    args: &BackendArgs,
    proxy: &kpng_sink::ProxyConfig,
    parts: &Parts<'_>,
    health: &mut Option<kpng_health::ProxyHealth>,
) -> Result<Boxed, Error>
where
    B: kpng_aggregator::Producer + kpng_sink::RoundReport + Send + 'static,
    B::Subsystem: Send + 'static,
    <B::Subsystem as Subsystem>::Key: Serialize + DeserializeOwned + Send + Sync + 'static,
    <B::Subsystem as Subsystem>::Value: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    Ok(match (socket, args.dry_run) {
        (_, true) => dry_run(backend)
            .with(Log::default().printing_scripts())
            .with(parts.measure())
            .boxed(),
        (Some(path), false) => aggregated(backend, subsystem(), path, args, parts.metrics)
            .logged()
            .boxed(),
        (None, false) => companions(
            backend.logged().with(parts.measure()),
            flow_record,
            args,
            proxy,
            parts,
            health,
        )?,
    })
}

/// `sink`, removing kube-proxy's leftovers after its first successful sync
/// (a dry run lists them), unless `--keep-kube-proxy-rules`. `own_iptables`:
/// the iptables mode `to-iptables` programs, whose `KUBE-` chains are
/// kpng's.
fn after_first_sync(sink: Boxed, args: &BackendArgs, own_iptables: Option<IptablesMode>) -> Boxed {
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
    let cleanup = leftovers::Cleanup {
        leftovers,
        dry_run: args.dry_run,
    };
    sink.with(leftovers::AfterFirstSync::new(cleanup)).boxed()
}

/// The eBPF backend, with the nftables backend beside it for traffic from
/// outside the node (`--north-south nft`).
fn ebpf_backend(
    ebpf: &EbpfArgs,
    parts: &Parts<'_>,
    health: &mut Option<kpng_health::ProxyHealth>,
) -> Result<Boxed, Error> {
    let args = &ebpf.common;
    let proxy = args.proxy()?;
    let sizes = kpng_backend_ebpf::MapSizes::default()
        .min_entries(ebpf.bpf_map_min_entries)
        .parse_fixed(&ebpf.bpf_map_sizes)?;
    let mut config = EbpfConfig::new(proxy.clone())
        .pin_path(&ebpf.bpf_pin_path)
        .map_sizes(sizes);
    if let Some(path) = &ebpf.cgroup_path {
        config = config.cgroup(path);
    }
    config = config.tc_interfaces(
        ebpf.tc_interfaces
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty()),
    );
    if config.tc_interfaces.is_empty() {
        args.proxy
            .masquerade_only("to-ebpf without --tc-interfaces (`--north-south nft`)")?;
    }
    if let Some(mode) = &ebpf.xdp {
        if config.tc_interfaces.is_empty() {
            return Err(Error::Usage(format!(
                "--xdp {mode}: the XDP program goes on the --tc-interfaces, and sends on the flows their tc programs open; give them"
            )));
        }
        config = config.xdp(Some(match mode.as_str() {
            "native" => kpng_backend_ebpf::XdpMode::Native,
            "generic" => kpng_backend_ebpf::XdpMode::Generic,
            _ => kpng_backend_ebpf::XdpMode::Auto,
        }));
    }
    config = config
        .counters(ebpf.counters)
        .end_udp_sockets(ebpf.end_udp_sockets)
        .netfilter_beside(ebpf.north_south == "nft")
        .localhost_nodeports(args.proxy.localhost_nodeports());
    if config.localhost_nodeports {
        tracing::info!(
            "localhost NodePorts: the node's own processes reach NodePorts on 127.0.0.1 and [::1] inside --nodeport-addresses (--localhost-nodeports=false turns it off)"
        );
    }
    // No UDP flow record: the cleanup here walks (the eBPF backend's own
    // flows are not in conntrack's NAT).
    let nft_config = NftConfig::new(proxy.clone())
        .counters(ebpf.counters)
        .udp_flows(None);
    if ebpf.counters && !args.dry_run {
        parts
            .metrics
            .count_connections(kpng_backend_ebpf::TrafficReader::new(&config));
        if ebpf.north_south == "nft" {
            parts
                .metrics
                .count_connections(kpng_backend_nft::CounterReader::new(&nft_config));
        }
    }
    let nft = (ebpf.north_south == "nft").then(|| NftBackend::new(nft_config));
    // Both backends receive every round, even after one fails.
    let mut sinks: Vec<Boxed> = Vec::new();
    if args.dry_run {
        let printed = || Log::default().printing_scripts();
        sinks.push(EbpfBackend::dry_run(config).with(printed()).boxed());
        if let Some(nft) = nft {
            sinks.push(nft.dry_run().with(printed()).boxed());
        }
        return Ok(sinks.with(parts.measure()).boxed());
    }
    sinks.push(
        EbpfBackend::attach(config)?
            .with(MapFill(parts.metrics.clone()))
            .logged()
            .boxed(),
    );
    if let Some(nft) = nft {
        sinks.push(nft.logged().boxed());
    }
    companions(
        sinks.with(parts.measure()),
        None,
        args,
        &proxy,
        parts,
        health,
    )
}

/// How long the nft backend's UDP flow record keeps a flow after its last
/// packet: the longest UDP conntrack timeout, as set now or as the flags
/// set it (the cleanup walks whenever a timeout exceeds it).
fn udp_flow_timeout(args: &BackendArgs) -> Duration {
    let now = kpng_netfilter::conntrack::UdpTimeouts::open(None)
        .and_then(|mut t| t.longest())
        .unwrap_or(kpng_backend_nft::UDP_FLOWS_TIMEOUT);
    now.max(args.conntrack_udp_timeout)
        .max(args.conntrack_udp_timeout_stream)
}

/// After each sync of the eBPF backend: how full its maps are, as
/// metrics (`kpng_bpf_map_entries`, `kpng_bpf_map_max_entries`).
struct MapFill(kpng_health::metrics::Metrics);

impl kpng_sink::Hook<EbpfBackend> for MapFill {
    fn after(
        &mut self,
        backend: &EbpfBackend,
        _round: &kpng_sink::Round<'_>,
        _result: &Result<(), kpng_sink::SinkError>,
    ) {
        for fill in backend.map_fill() {
            self.0
                .observe_map_fill(fill.map, fill.entries, u64::from(fill.max_entries));
        }
    }
}

/// `backend` with what kube-proxy runs beside a kernel backend: its
/// conntrack settings, UDP conntrack cleanup (over ctnetlink: the
/// `conntrack` tool is never run), `/healthz` and `/livez` on
/// `--healthz-bind-address`, and the health-check node ports of the node
/// view. `health` is set to what `/healthz` reports.
///
/// Never in a dry run: those write sysctls, conntrack and ports.
fn companions<S: kpng_sink::Sink + Send + 'static>(
    backend: S,
    flow_record: Option<kpng_netfilter::conntrack::FlowRecord>,
    args: &BackendArgs,
    proxy: &kpng_sink::ProxyConfig,
    parts: &Parts<'_>,
    health: &mut Option<kpng_health::ProxyHealth>,
) -> Result<Boxed, Error> {
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
    let mut companions = kpng_health::Companions::new().conditions(parts.conditions.clone());
    if !args.no_conntrack_cleanup {
        let cleaner = kpng_conntrack::ConntrackCleaner::new().with_flow_record(flow_record);
        companions = companions.follower(cleaner.with_proxy(proxy));
    }
    if !args.healthz_bind_address.is_empty() {
        let listener =
            crate::serve::bind_tcp("--healthz-bind-address", &args.healthz_bind_address)?;
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
    metrics: &Metrics,
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
