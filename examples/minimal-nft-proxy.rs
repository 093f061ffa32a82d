//! A complete Kubernetes Service proxy on nftables, in one short file. It
//! reads a manifest (default: the bundled sample cluster) and syncs once,
//! or with `--kube` watches the API for ever; applying rules needs root.
//! `cargo run -p kpng-examples --example minimal-nft-proxy -- [--input FILE] [--node N] [--dry-run] [--kube]`

use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_drive::{DriveConfig, drive};
use kpng_kube::watch::{self, NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_view::NodeProjector;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut input, mut node, mut kube, mut dry_run) = (None, "node-a".to_string(), false, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--input" => input = args.next(),
            "--node" => node = args.next().ok_or("--node needs a name")?,
            "--kube" => kube = true,
            "--dry-run" => dry_run = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    // The source: the API (the watch task owns the ingest) or a manifest
    // (read once; the ingest is kept, or the store would close).
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    let reader = ingest.reader();
    let mut watching = WatchConfig::default();
    watching.nodes = NodeScope::Only(node.clone());
    if kube {
        let client = kube::Client::try_default().await?;
        tokio::spawn(watch::run(client, ingest, watching));
    } else if let Some(path) = &input {
        ingest.load_str(path, &std::fs::read_to_string(path)?)?;
    } else {
        ingest.load_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)?;
    }
    // The sink: nftables, with kube-proxy's usual settings.
    let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]);
    let proxy = proxy.service_cidrs(["10.96.0.0/12".parse()?]);
    let mut backend = NftBackend::new(NftConfig::new(proxy));
    if dry_run {
        backend = backend.dry_run();
    }
    // The driver: wait for the initial lists, then sync every revision.
    let (mut projector, config) = (NodeProjector::new(node.as_str()), DriveConfig::default());
    drive(reader, &mut projector, &mut backend, &config.once(!kube)).await?;
    if dry_run {
        print!("{}", backend.last_script());
    }
    eprintln!("synced: {:?}", backend.last_sync());
    Ok(())
}
