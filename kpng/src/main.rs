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

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kpng_drive::{DriveConfig, drive};
use kpng_health::Conditions;
use kpng_kube::watch::{NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_retry::one_line;
use kpng_sink::SinkExt;
use kpng_store::Store;
use kpng_view::NodeProjector;

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
mod node;
mod serve;
mod sinks;

use args::{Action, BackendArgs, Cli, NodeArg, Source};
use node::{NODE_CONDITION, NodeSeen, Nodes, check_node};

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

/// Serves the store (`to-api`) or drives the sink from it.
async fn finish(
    reader: kpng_store::Reader,
    node: &NodeArg,
    bundled_sample: bool,
    nodes: Nodes,
    sink: &Action,
    once: bool,
) -> Result<(), Error> {
    if let Action::ToApi(listen) = sink {
        node.unused_by("to-api");
        let address = listen.tls.address(&listen.listen)?;
        tracing::info!(address = %listen.listen, "serving the ENLS");
        let server = kpng_api::Server::new(reader.clone());
        serve::serve_server_metrics(listen, &server, reader)?;
        return Ok(kpng_api::serve_at(&address, server).await?);
    }
    let node = node.resolve(bundled_sample);
    let node = node.as_str();
    if let Action::Explain(args) = sink {
        return explain::run(reader, node, args).await;
    }
    let conditions = Conditions::default();
    check_node(&reader, node, nodes, &conditions);
    serve::dry_run_notes(sink);
    // A one-shot run's store goes before its sync (see `drive`): the
    // metrics and the hooks keep no reader of it, and report no store
    // figures.
    let metrics = serve::serve_metrics(sink, (!once).then(|| reader.clone()), node)?;
    let parts = sinks::Parts {
        metrics: &metrics,
        store: (!once).then_some(&reader),
        conditions: &conditions,
        once,
    };
    let (mut backend, hold) = sinks::build(sink, &parts)?;
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
    drive(reader, &mut projector, &mut *backend, &config).await?;
    if once {
        // The process ends now: the view and the backend's state (at a
        // million endpoints, 0.3 s of freeing) go with it.
        std::mem::forget(projector);
        std::mem::forget(backend);
    }
    Ok(())
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
                // One round: the reader holds the loaded state, and the
                // store goes with it before the sync (see `finish`).
                // (A server, `to-api`, serves on: its store stays.)
                _ if once && !args.watch && !matches!(args.sink, Action::ToApi(_)) => {
                    drop(ingest);
                    None
                }
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
            let bundled_sample = args.input.is_none();
            let result = finish(
                reader,
                &args.node,
                bundled_sample,
                Nodes::All,
                &args.sink,
                once,
            )
            .await;
            if once {
                // The store goes with the process, unfreed (as above).
                std::mem::forget(_writer);
            }
            result
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
            let mut config = IngestConfig::default();
            if let Some(name) = &args.proxy_name {
                config = config.with_proxy_name(name);
            }
            let mut ingest = Ingest::new(Store::new(), config);
            let reader = ingest.reader();
            let once = args.sink.once();
            let mut watch = WatchConfig::default();
            // A server for every node watches every Node; a node-local
            // proxy only its own.
            watch.nodes = match &args.sink {
                Action::ToApi(_) => NodeScope::All,
                _ => NodeScope::Only(args.node.resolve(false)),
            };
            watch.server = server;
            // A one-shot run ends: after a few failed attempts, an error.
            watch.give_up_after = once.then_some(ONCE_ATTEMPTS);
            // The ingest comes back with the watch's end, so that the
            // store stays open (and the sink waiting) until the error is
            // read here. A one-shot run's watch ends once what its round
            // waits for is listed (`None`): the store then goes with the
            // round's snapshot, before the sink's sync (see `drive`).
            let mut lists = ingest.reader();
            let wait_for = DriveConfig::default().wait_for;
            let watching = tokio::spawn(async move {
                let watched = if once {
                    tokio::select! {
                        watched = kpng_kube::watch::run_on(client, &mut ingest, watch) => Some(watched),
                        _ = lists.listed(&wait_for) => None,
                    }
                } else {
                    Some(kpng_kube::watch::run_on(client, &mut ingest, watch).await)
                };
                drop(lists);
                (watched, ingest)
            });
            let finishing = finish(reader, &args.node, false, Nodes::Only, &args.sink, once);
            tokio::pin!(finishing);
            tokio::select! {
                done = &mut finishing => done,
                watched = watching => match watched {
                    Ok((None, ingest)) => {
                        drop(ingest);
                        finishing.await
                    }
                    Ok((Some(Ok(())), _)) => Err(Error::Kube("the watch ended".into())),
                    Ok((Some(Err(e)), _)) => Err(e.into()),
                    Err(e) => Err(Error::Kube(format!("the watch failed: {e}"))),
                },
            }
        }
        Source::Api(args) => {
            let address = args.tls.address(&args.api)?;
            if let Action::ToApi(_) = &args.sink {
                // A chained server: mirror the upstream ENLS, serve it.
                let mut store = Store::new();
                let reader = store.reader();
                let config = kpng_api::AgentConfig::default();
                tokio::spawn(async move {
                    let _ = kpng_api::run_mirror(&address, &mut store, &config).await;
                });
                return finish(reader, &args.node, false, Nodes::All, &args.sink, false).await;
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
            conditions.set(
                NODE_CONDITION,
                format!("waiting for this node's view from the server (this node: {node:?})"),
            );
            // The agent's rounds go through the guard too; a hold is
            // re-checked at the next change the server sends.
            let parts = sinks::Parts {
                metrics: &metrics,
                store: None,
                conditions: &conditions,
                once: args.sink.once(),
            };
            let (sink, _hold) = sinks::build(&args.sink, &parts)?;
            let mut sink = sink.with(NodeSeen::new(&node, conditions));
            let mut config = kpng_api::AgentConfig::default();
            config.once = args.sink.once();
            config.once_attempts = ONCE_ATTEMPTS;
            Ok(kpng_api::run_agent(&address, &node, &mut sink, &config).await?)
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
