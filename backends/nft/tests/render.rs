//! What the backend makes of each Service behaviour of docs/reference/semantics.md:
//! the dry run of one small cluster per behaviour (`kpng_testkit::semantics`),
//! less what the node alone gives, as insta snapshots. A ruleset change
//! shows as a diff to review, and no root is needed.
//! `INSTA_UPDATE=always cargo test -p kpng-backend-nft --test render`
//! writes new snapshots (then review them with `git diff`).

use std::collections::HashSet;

use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_testkit::semantics;
use kpng_view::NodeProjector;

/// The dry run's text for `manifest`, the first (full) sync.
fn render(manifest: &str) -> String {
    let objects = file::parse_str("case.yaml", manifest).expect("valid manifest");
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest.load(&objects);
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")));
    let config = NftConfig::new(proxy);
    let mut backend = NftBackend::new(config).dry_run();
    let mut projector = NodeProjector::new(semantics::NODE);
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .expect("dry run");
    backend.last_script()
}

#[test]
fn each_service_behaviour_renders_as_its_snapshot() {
    let baseline: HashSet<String> = render(semantics::BASELINE)
        .lines()
        .map(String::from)
        .collect();
    for (name, manifest) in semantics::cases() {
        let text = render(&manifest);
        let added: Vec<&str> = text.lines().filter(|l| !baseline.contains(*l)).collect();
        insta::assert_snapshot!(name, added.join("\n"));
    }
}
