//! The core pipeline on a bundled synthetic cluster: load it into the
//! store, project it onto one node, change one endpoint, and print what
//! the node sees change.
//!
//! ```text
//! cargo run -p kpng-examples --example node-view [-- --services N --endpoints M --node NAME]
//! ```

use std::error::Error;

use kpng_diff::{NodeProjector, diff};
use kpng_model::IpFamily;
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};

fn main() -> Result<(), Box<dyn Error>> {
    let mut shape = ClusterShape {
        services: 5,
        endpoints: 12,
        nodes: 3,
        zones: 2,
    };
    let mut node = "node-0".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--services" => shape.services = value.parse()?,
            "--endpoints" => shape.endpoints = value.parse()?,
            "--node" => node = value,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }

    // Ingest: one transaction, one revision.
    let cluster = Cluster::synthetic(shape);
    let mut store = Store::new();
    let mut txn = store.begin();
    for node in &cluster.nodes {
        txn.set_node(node.clone());
    }
    for service in &cluster.services {
        txn.set_service(service.clone());
    }
    for (name, ip, endpoint) in &cluster.endpoints {
        txn.set_endpoint(name.clone(), *ip, endpoint.clone());
    }
    let commit = txn.commit();
    println!(
        "# loaded {} entries at revision {:?}",
        store.snapshot().len(),
        commit.revision
    );

    // The node view, as YAML.
    let mut projector = NodeProjector::new(node.as_str());
    projector.update(&store.snapshot());
    println!("# node view of {node}:");
    for (name, view) in &projector.view().services {
        let cluster_eps = view.cluster_endpoints(IpFamily::V4).count();
        let local_eps = view.local_endpoints(IpFamily::V4).count();
        println!("{name}: {cluster_eps} cluster-policy endpoint(s), {local_eps} local");
    }
    if let Some((name, view)) = projector.view().services.iter().next() {
        println!("# {name} in full:\n{}", serde_saphyr::to_string(&**view)?);
    }

    // One endpoint goes not-ready: one store op, and this node's view ops.
    let before = store.snapshot();
    let (name, ip, mut endpoint) = cluster.endpoints.first().cloned().ok_or("no endpoints")?;
    endpoint.ready = false;
    let mut txn = store.begin();
    txn.set_endpoint(name, ip, endpoint);
    txn.commit();
    let after = store.snapshot();
    println!(
        "# store diff {} -> {}: {:?}",
        before.revision(),
        after.revision(),
        diff(&before, &after)
            .iter()
            .map(|op| op.key().to_string())
            .collect::<Vec<_>>()
    );
    let ops = projector.update(&after);
    println!("# {node} view ops: {}", ops.len());
    for op in &ops {
        println!("{}", serde_saphyr::to_string(op)?);
    }
    Ok(())
}
