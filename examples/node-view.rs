//! The core pipeline on a cluster state from a manifest file (by default
//! the bundled sample cluster): ingest it, project it onto one node, print
//! that node's view, and show that re-reading unchanged input makes no
//! revision.
//!
//! ```text
//! cargo run -p kpng-examples --example node-view [-- --input cluster.yaml] [--node node-a] [--yaml]
//! ```

use std::error::Error;

use kpng::ingest::{Ingest, IngestConfig, file};
use kpng::{IpFamily, NodeProjector, Store};

fn main() -> Result<(), Box<dyn Error>> {
    let (mut input, mut node, mut yaml) = (None, "node-a".to_string(), false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--input" => input = Some(args.next().ok_or("--input needs a file")?),
            "--node" => node = args.next().ok_or("--node needs a name")?,
            "--yaml" => yaml = true,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let objects = match &input {
        Some(path) => file::parse_str(
            path,
            &std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?,
        )?,
        None => file::parse_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)?,
    };

    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    let revision = ingest.load(&objects);
    let snapshot = ingest.reader().snapshot();
    println!(
        "# {} objects -> {} ENLS entries at revision {revision:?}",
        objects.len(),
        snapshot.len()
    );

    let mut projector = NodeProjector::new(node.as_str());
    projector.update(&snapshot);
    println!("# the view of {node}: endpoints per family (cluster policy / local policy)");
    for (name, view) in &projector.view().services {
        let count = |f, local: bool| {
            if local {
                view.local_endpoints(f).count()
            } else {
                view.cluster_endpoints(f).count()
            }
        };
        let v4 = (count(IpFamily::V4, false), count(IpFamily::V4, true));
        let v6 = (count(IpFamily::V6, false), count(IpFamily::V6, true));
        let verdict = if view.has_endpoints(IpFamily::V4) || view.has_endpoints(IpFamily::V6) {
            ""
        } else {
            "  (no endpoint: REJECT)"
        };
        println!(
            "{name:<28} v4 {}/{}  v6 {}/{}{verdict}",
            v4.0, v4.1, v6.0, v6.1
        );
    }
    if yaml {
        println!("{}", serde_saphyr::to_string(projector.view())?);
    }

    // The same input again: every write is a no-op, no revision is made.
    let again = ingest.load(&objects);
    let stats = ingest.store().stats();
    println!(
        "# reloaded: revision {again:?}; {} writes so far, {} of them no-ops",
        stats.writes, stats.noop_writes
    );
    Ok(())
}
