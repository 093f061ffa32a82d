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
//! kpng api --api unix:///run/kpng.sock fleet [--behind 5s] [--all] [--check] [--output text|json]   # which nodes are behind (--check: exit 1 if any)
//! kpng kube [--kubeconfig F] --node N to-ebpf [--cgroup-path CG] [--tc-interfaces eth0,…] [--bpf-pin-path DIR] [--north-south nft|none] [--cleanup] [backend flags]
//! kpng kube [--kubeconfig F] --node N to-iptables [--iptables-mode auto|nft|legacy] [--aggregator-socket PATH] [backend flags]
//! ```
//!
//! With no `--input`, `kpng file` reads the bundled sample cluster, so
//! `kpng file to-nft --dry-run` prints a real ruleset on any machine, with
//! no cluster and no root.

use clap::Parser;
use kpng_drive::DriveConfig;
use kpng_health::Conditions;
use kpng_kube::IngestConfig;
use kpng_kube::watch::WatchConfig;
use kpng_retry::one_line;
use kpng_store::Store;
use std::process::ExitCode;

mod args;
mod cleanup;
mod config;
mod configz;
mod explain;
mod fleet;
mod kube_proxy;
mod leftovers;
mod logging;
mod malloc;
mod serve;
mod sinks;

use args::{Action, BackendArgs, Cli, NodeArg, Source};

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
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
    #[error(transparent)]
    Explain(#[from] kpng_explain::Error),
    #[error(transparent)]
    Proxy(#[from] kpng::Error),
    /// `fleet --check`: nodes behind, failing or away.
    #[error("{0}")]
    Check(String),
}

/// With `--once`, the failed attempts in a row after which the API
/// source or the agent gives up (kube's 800 ms backoff: about 6 to 12 s;
/// the agent's 200 ms one: about 1.5 to 3 s).
const ONCE_ATTEMPTS: u32 = 5;

fn drive_config(args: &BackendArgs, once: bool) -> DriveConfig {
    let mut config = DriveConfig::default();
    config.min_sync_period = args.min_sync_period;
    config.burst = args.sync_burst;
    config.once = once;
    config
}

/// Serves the store (`to-api`), explains a packet, or runs the node's
/// proxy with the sink the command line asks for.
async fn finish(
    source: kpng::Source,
    node: &NodeArg,
    bundled_sample: bool,
    sink: &Action,
    once: bool,
) -> Result<(), Error> {
    if let Action::ToApi(listen) = sink {
        node.unused_by("to-api");
        let address = listen.tls.address(&listen.listen)?;
        let reader = source.reader();
        let mut feed = source.start(None, false).await?;
        tracing::info!(address = %listen.listen, "serving the ENLS");
        let server = kpng_api::Server::new(reader.clone());
        serve::serve_server_metrics(listen, &server, reader)?;
        let serving = async { Ok(kpng_api::serve_at(&address, server).await?) };
        return feed.alongside(serving).await;
    }
    let node = node.resolve(bundled_sample);
    if let Action::Explain(args) = sink {
        let reader = source.reader();
        let mut feed = source.start(Some(&node), once).await?;
        return feed.alongside(explain::run(reader, &node, args)).await;
    }
    let conditions = Conditions::default();
    serve::dry_run_notes(sink);
    // A one-shot run's store goes before its sync (see `drive`): the
    // metrics and the hooks keep no reader of it, and report no store
    // figures.
    let reader = (!once).then(|| source.reader());
    let metrics = serve::serve_metrics(sink, reader.clone(), &node)?;
    let source = report_input(source, &conditions, &metrics);
    let parts = sinks::Parts {
        metrics: &metrics,
        store: reader.as_ref(),
        conditions: &conditions,
        once,
    };
    let (backend, hold) = sinks::build(sink, &parts)?;
    let mut config = match sink.args() {
        Some(args) => drive_config(args, once),
        None => DriveConfig::default(),
    };
    config.hold = hold;
    let proxy = kpng::Proxy::new(node)
        .source(source)
        .sink(backend)
        .drive_config(config)
        .conditions(conditions)
        // A one-shot process ends after its sync: the store, the view
        // and the backend's state (at a million endpoints, 0.3 s of
        // freeing) go with it.
        .free_on_return(!once);
    if once {
        std::mem::forget(proxy.once().await?);
        Ok(())
    } else {
        Ok(proxy.run().await?)
    }
}

/// The name of the `/healthz` degradation that names the objects of the
/// input file skipped.
const INPUT_DEGRADATION: &str = "input";

/// Shows what each read of the input file skipped: the count in
/// `kpng_input_objects_skipped`, the objects at `/healthz` under
/// `"degraded"` (which stays 200: every other Service is served).
fn report_input(
    source: kpng::Source,
    conditions: &Conditions,
    metrics: &kpng_health::metrics::Metrics,
) -> kpng::Source {
    let (conditions, metrics) = (conditions.clone(), metrics.clone());
    source.on_input_report(move |report| {
        metrics.input_objects_skipped(report.skipped.len());
        match report.summary() {
            Some(summary) => {
                conditions.set_degraded(INPUT_DEGRADATION, format!("{}: {summary}", report.path))
            }
            None => conditions.clear_degraded(INPUT_DEGRADATION),
        }
    })
}

async fn run(cli: Cli) -> Result<(), Error> {
    if let Action::ToEbpf(ebpf) = cli.source.sink()
        && ebpf.cleanup
    {
        return if ebpf.common.dry_run {
            cleanup::ebpf_cleanup_dry_run(ebpf)
        } else {
            cleanup::ebpf_cleanup(ebpf)
        };
    }
    match cli.source {
        Source::File(args) => {
            let mut config = IngestConfig::default()
                .allow_empty_input(args.sink.args().is_some_and(|a| a.allow_mass_delete));
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let source = match (&args.input, args.watch) {
                (None, _) => kpng::Source::sample(),
                (Some(path), true) => kpng::Source::watched_file(path),
                (Some(path), false) => kpng::Source::file(path),
            };
            let once = args.sink.once() || !args.watch;
            let bundled_sample = args.input.is_none();
            let source = source.ingest_config(config);
            finish(source, &args.node, bundled_sample, &args.sink, once).await
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
            let mut ingest = IngestConfig::default();
            if let Some(name) = &args.proxy_name {
                ingest = ingest.with_proxy_name(name);
            }
            let once = args.sink.once();
            let mut watch = WatchConfig::default();
            // A one-shot run ends: after a few failed attempts, an error.
            watch.give_up_after = once.then_some(ONCE_ATTEMPTS);
            let source = kpng::Source::kube_config(config)?
                .ingest_config(ingest)
                .watch_config(watch);
            finish(source, &args.node, false, &args.sink, once).await
        }
        Source::Api(args) => {
            let mut addresses = Vec::with_capacity(args.api.len());
            for uri in &args.api {
                addresses.push(args.tls.address(uri)?);
            }
            let mut addresses = addresses.into_iter();
            let Some(address) = addresses.next() else {
                return Err(Error::Usage("--api names the server".into()));
            };
            let replicas: Vec<kpng_api::Address> = addresses.collect();
            if let Action::ToApi(_) = &args.sink {
                // A chained server: mirror the upstream ENLS, serve it.
                let mut store = Store::new();
                let reader = store.reader();
                let mut config = kpng_api::AgentConfig::default();
                args.link.apply(&mut config);
                tokio::spawn(async move {
                    let _ = kpng_api::run_mirror(&address, &mut store, &config).await;
                });
                let source = kpng::Source::store(reader);
                return finish(source, &args.node, false, &args.sink, false).await;
            }
            if let Action::Fleet(fleet) = &args.sink {
                args.node.unused_by("fleet");
                return fleet::run(&address, fleet).await;
            }
            let node = args.node.resolve(false);
            if let Action::Explain(explain) = &args.sink {
                return explain::from_server(&address, &node, explain).await;
            }
            serve::dry_run_notes(&args.sink);
            let metrics = serve::serve_metrics(&args.sink, None, &node)?;
            let conditions = Conditions::default();
            // The agent's rounds go through the guard too; a hold is
            // re-checked at the next change the server sends.
            let parts = sinks::Parts {
                metrics: &metrics,
                store: None,
                conditions: &conditions,
                once: args.sink.once(),
            };
            let (sink, _hold) = sinks::build(&args.sink, &parts)?;
            let mut config = kpng_api::AgentConfig::default();
            config.once_attempts = ONCE_ATTEMPTS;
            args.link.apply(&mut config);
            config.replicas = replicas;
            let proxy = kpng::Proxy::new(node)
                .server(address)
                .sink(sink)
                .agent_config(config)
                .conditions(conditions);
            if args.sink.once() {
                proxy.once().await?;
                Ok(())
            } else {
                Ok(proxy.run().await?)
            }
        }
    }
}

/// mimalloc: at a million endpoints glibc's allocator was a tenth of a
/// sync's CPU, and its arena locks made decoding a file on every core
/// slower than on one. `--no-default-features` keeps the system's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
