//! A complete Kubernetes Service proxy on nftables, in one short file.
//!
//! ```text
//! # from a manifest (default: the bundled sample cluster), one sync:
//! cargo run -p kpng-examples --example minimal-nft-proxy -- [--input FILE] [--node N] [--dry-run]
//! # from the API, forever:
//! cargo run -p kpng-examples --example minimal-nft-proxy -- --kube --node "$NODE_NAME"
//! ```
//!
//! Ingest (`kpng-kube`) fills the store, the driver (`kpng-diff`) projects
//! it onto this node and rate-limits syncs, and the nftables backend
//! (`kpng-backend-nft`) programs the kernel. Applying rules needs root.

use std::error::Error;

use kpng_backend_nft::{Config, NftBackend};
use kpng_diff::NodeProjector;
use kpng_drive::{DriveConfig, drive};
use kpng_kube::watch::{self, NodeScope, WatchConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_store::Store;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
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

    // The source: the API (watched for ever) or a manifest (read once).
    let mut ingest = Ingest::new(Store::new(), IngestConfig::for_node(node.as_str()));
    let reader = ingest.reader();
    // Readers see no new revision once the writer is gone: keep it.
    let _writer = if kube {
        let client = kube::Client::try_default().await?;
        let mut config = WatchConfig::default();
        config.nodes = NodeScope::Only(node.clone());
        tokio::spawn(async move { watch::run(client, &mut ingest, config).await });
        None
    } else {
        let objects = match &input {
            Some(path) => file::parse_str(path, &std::fs::read_to_string(path)?)?,
            None => file::parse_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)?,
        };
        ingest.load(&objects);
        Some(ingest)
    };

    // The sink: nftables, with kube-proxy's usual settings.
    let mut config = Config::default();
    config.cluster_cidrs = Config::parse_cidrs("--cluster-cidr", "10.244.0.0/16")?;
    config.service_cidrs = Config::parse_cidrs("--service-cidr", "10.96.0.0/12")?;
    let mut backend = NftBackend::new(config);
    if dry_run {
        backend = backend.dry_run();
    }

    // The driver: wait for the initial lists, then sync every revision.
    let mut drive_config = DriveConfig::default();
    drive_config.once = !kube;
    drive(
        reader,
        &mut NodeProjector::new(node.as_str()),
        &mut backend,
        &drive_config,
    )
    .await?;
    if dry_run {
        print!("{}", backend.last_script());
    }
    eprintln!("synced: {:?}", backend.last_sync());
    Ok(())
}
