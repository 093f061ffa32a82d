//! Incremental rounds program what a full round would: a backend driven
//! by `NodeProjector::sync_into` through a random history of cluster
//! states (Services set, changed and removed, endpoints coming and going,
//! the node's addresses and the Service CIDRs changing, a forced full
//! rewrite now and then), one round per state, serves at every step what
//! a fresh backend serves after one full round of that state
//! (`EbpfBackend::served`: what the programs read, whatever the set
//! numbers and slot order), with as many sets and records. Dry runs: no
//! root, no kernel.

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_model::endpoint::Interner;
use kpng_sink::{ProxyConfig, Round, Sink};
use kpng_store::Store;
use kpng_testkit::history::{NODE, apply, steps};
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::NodeProjector;
use proptest::prelude::*;

/// A dry run; with `external`, tc interfaces: records of traffic from
/// outside, and the node's addresses.
fn backend(external: bool) -> EbpfBackend {
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")))
        .service_cidrs(["10.96.0.0/12".parse().expect("cidr")]);
    let mut config = EbpfConfig::new(proxy);
    if external {
        config = config.tc_interfaces(["eth0"]);
    }
    EbpfBackend::dry_run(config)
}

/// The lines of one that the other lacks: (incremental only, fresh only).
fn differences(incremental: &[String], fresh: &[String]) -> (Vec<String>, Vec<String>) {
    let only = |a: &[String], b: &[String]| {
        let mut b = b.to_vec();
        a.iter()
            .filter(|line| match b.iter().position(|l| l == *line) {
                Some(at) => {
                    b.remove(at);
                    false
                }
                None => true,
            })
            .cloned()
            .collect()
    };
    (only(incremental, fresh), only(fresh, incremental))
}

proptest! {
    #[test]
    fn incremental_rounds_serve_what_a_full_round_serves(
        steps in steps(),
        external in any::<bool>(),
    ) {
        let mut store = Store::new();
        Cluster::synthetic(ClusterShape { services: 4, endpoints: 12, nodes: 3, zones: 2 })
            .load_into(&mut store);
        let mut interner = Interner::new();
        let mut projector = NodeProjector::new(NODE);
        let mut incremental = backend(external);
        let mut full_rounds = 0;
        for (step, (changes, force)) in std::iter::once((Vec::new(), false)).chain(steps).enumerate() {
            apply(&mut store, &changes, &mut interner);
            if force {
                projector.force_full();
            }
            let report = projector.sync_into(&store.snapshot(), &mut incremental).expect("sync");
            if report.is_some_and(|r| r.full) && !force {
                full_rounds += 1;
            }
            let mut fresh = backend(external);
            fresh.sync(&Round::full(projector.view())).expect("full round");
            let (got, want) = (incremental.served().expect("maps"), fresh.served().expect("maps"));
            prop_assert!(!want.is_empty());
            let (extra, missing) = differences(&got, &want);
            prop_assert!(
                extra.is_empty() && missing.is_empty(),
                "step {}: {:?}: served but not by a fresh backend: {:#?}; not served: {:#?}",
                step, changes, extra, missing
            );
            let (a, b) = (incremental.last_sync(), fresh.last_sync());
            prop_assert_eq!((a.sets, a.records), (b.sets, b.records), "step {}: sets and records held", step);
        }
        prop_assert_eq!(full_rounds, 1, "only the first round is full, but those forced");
    }
}
