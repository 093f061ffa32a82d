//! What the backend makes of each Service behaviour of docs/reference/semantics.md:
//! the dry run of one small cluster per behaviour (`kpng_testkit::semantics`),
//! less what the node alone gives, as insta snapshots, in kube-proxy's
//! layout and in the compact one. A ruleset change shows as a diff to
//! review, and no root is needed.
//! `INSTA_UPDATE=always cargo test -p kpng-backend-iptables --test render`
//! writes new snapshots (then review them with `git diff`).

use std::collections::HashSet;

use kpng_backend_iptables::{IptablesBackend, IptablesConfig, Layout};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_testkit::semantics;
use kpng_view::NodeProjector;

/// The dry run's text for `manifest`, the first (full) sync, in `layout`.
fn render(manifest: &str, layout: Layout) -> String {
    let objects = file::parse_str("case.yaml", manifest).expect("valid manifest");
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest.load(&objects);
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")));
    let config = IptablesConfig::new(proxy).layout(layout);
    let mut backend = IptablesBackend::new(config).dry_run();
    let mut projector = NodeProjector::new(semantics::NODE);
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .expect("dry run");
    backend.last_script().to_owned()
}

/// Each case's lines that the node alone does not have.
fn added(layout: Layout) -> Vec<(&'static str, String)> {
    let baseline: HashSet<String> = render(semantics::BASELINE, layout)
        .lines()
        .map(String::from)
        .collect();
    semantics::cases()
        .into_iter()
        .map(|(name, manifest)| {
            let text = render(&manifest, layout);
            let added: Vec<&str> = text.lines().filter(|l| !baseline.contains(*l)).collect();
            (name, added.join("\n"))
        })
        .collect()
}

/// Small clusters: `auto` is kube-proxy's layout.
#[test]
fn each_service_behaviour_renders_as_its_snapshot() {
    let auto = added(Layout::Auto);
    assert_eq!(auto, added(Layout::KubeProxy), "auto is kube-proxy's here");
    for (name, text) in auto {
        insta::assert_snapshot!(name, text);
    }
}

#[test]
fn each_service_behaviour_renders_in_the_compact_layout_as_its_snapshot() {
    for (name, text) in added(Layout::Compact) {
        insta::assert_snapshot!(format!("compact_{name}"), text);
    }
}
