//! What the backend makes of each Service behaviour of docs/reference/semantics.md:
//! the dry run's map writes for one small cluster per behaviour
//! (`kpng_testkit::semantics`), less what the node alone gives, as insta
//! snapshots. A change of what the maps hold shows as a diff to review,
//! and no root is needed.
//! `INSTA_UPDATE=always cargo test -p kpng-backend-ebpf --test render`
//! writes new snapshots (then review them with `git diff`).

use std::collections::HashSet;

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_testkit::semantics;
use kpng_view::NodeProjector;

/// The dry run's writes for `manifest`, the first (full) sync.
fn render(manifest: &str) -> Vec<String> {
    let objects = file::parse_str("case.yaml", manifest).expect("valid manifest");
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest.load(&objects);
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")));
    // With a tc interface: the records of external traffic too.
    let config = EbpfConfig::new(proxy).tc_interfaces(["eth0"]);
    let mut backend = EbpfBackend::dry_run(config);
    let mut projector = NodeProjector::new(semantics::NODE);
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .expect("dry run");
    backend.last_writes().to_vec()
}

#[test]
fn each_service_behaviour_renders_as_its_snapshot() {
    let baseline: HashSet<String> = render(semantics::BASELINE).into_iter().collect();
    for (name, manifest) in semantics::cases() {
        let added: Vec<String> = render(&manifest)
            .into_iter()
            .filter(|l| !baseline.contains(l))
            .collect();
        insta::assert_snapshot!(name, added.join("\n"));
    }
}
