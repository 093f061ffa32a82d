//! What a run serves besides its rules (`/metrics`, `/configz`,
//! `/proxyMode`), and what a dry run says instead of serving.

use crate::args::Action;
use crate::{Error, configz};

/// What a real run would do besides programming rules, said instead of
/// done by a dry run (which binds no port, sets no sysctl and deletes no
/// conntrack entry).
pub(crate) fn dry_run_notes(sink: &Action) {
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
        Action::ToNft(nft) => nft.aggregator_socket.as_ref(),
        Action::ToIptables(ipt) => ipt.aggregator_socket.as_ref(),
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
pub(crate) fn serve_metrics(
    sink: &Action,
    store: Option<kpng_store::Reader>,
    node: &str,
) -> Result<kpng_health::metrics::Metrics, Error> {
    use kpng_health::metrics::{Metrics, ProxyMode};
    // kube-proxy's failure counters of the mode, `/proxyMode` and
    // `/configz`.
    let metrics = match sink {
        Action::ToNft(_) => Metrics::for_mode(ProxyMode::Nftables),
        Action::ToIptables(_) => Metrics::for_mode(ProxyMode::Iptables),
        Action::ToEbpf(_)
        | Action::ToApi(_)
        | Action::ToFile(_)
        | Action::Explain(_)
        | Action::Fleet(_) => Metrics::new(),
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
pub(crate) fn bind_tcp(flag: &str, value: &str) -> Result<tokio::net::TcpListener, Error> {
    let address: std::net::SocketAddr = value
        .parse()
        .map_err(|_| Error::Usage(format!("{flag} {value:?}: not host:port")))?;
    std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| Error::Usage(format!("{flag} {address}: {e}")))
}

/// The server's metrics (`to-api --metrics-bind-address`): the fleet
/// view's and the process's.
pub(crate) fn serve_server_metrics(
    listen: &crate::args::ListenArgs,
    server: &kpng_api::Server,
    store: kpng_store::Reader,
) -> Result<(), Error> {
    if listen.metrics_bind_address.is_empty() {
        return Ok(());
    }
    let listener = bind_tcp("--metrics-bind-address", &listen.metrics_bind_address)?;
    let metrics = kpng_health::metrics::Metrics::new();
    let fleet = server.fleet().clone();
    metrics.add_text(move || fleet.openmetrics());
    tracing::info!(address = %listen.metrics_bind_address, "serving /metrics");
    tokio::spawn(kpng_health::metrics::serve_metrics(
        listener,
        metrics,
        Some(store),
    ));
    Ok(())
}
