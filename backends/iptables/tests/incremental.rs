//! Incremental rounds program what a full round would: a backend driven
//! by `NodeProjector::sync_into` through a random history of cluster
//! states (Services set, changed and removed, endpoints coming and going,
//! the node's addresses and the Service CIDRs changing, a forced full
//! rewrite now and then), one round per state, wants at every step the
//! very chains a fresh backend wants after one full round of that state.
//! Rendering only (`publishing`): no root, no iptables.

use std::collections::BTreeMap;

use kpng_backend_iptables::{ChainKey, IptablesBackend, IptablesConfig, Layout};
use kpng_model::IpFamily;
use kpng_model::endpoint::Interner;
use kpng_sink::{ProxyConfig, Round, Sink};
use kpng_store::Store;
use kpng_testkit::history::{NODE, apply, steps};
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::NodeProjector;
use proptest::prelude::*;

fn backend(layout: Layout) -> IptablesBackend {
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")));
    IptablesBackend::new(IptablesConfig::new(proxy).layout(layout)).publishing()
}

/// Every chain the backend wants, with its rules.
fn chains(backend: &IptablesBackend) -> BTreeMap<(IpFamily, ChainKey), Vec<String>> {
    backend
        .chains()
        .map(|(family, key, rules)| ((family, key.clone()), rules.to_vec()))
        .collect()
}

/// The chains that differ: (chain, incremental rules, fresh rules).
type Diff = Vec<(
    (IpFamily, ChainKey),
    Option<Vec<String>>,
    Option<Vec<String>>,
)>;

fn differences(
    incremental: &BTreeMap<(IpFamily, ChainKey), Vec<String>>,
    fresh: &BTreeMap<(IpFamily, ChainKey), Vec<String>>,
) -> Diff {
    let keys: std::collections::BTreeSet<_> = incremental.keys().chain(fresh.keys()).collect();
    keys.into_iter()
        .filter(|key| incremental.get(*key) != fresh.get(*key))
        .map(|key| {
            (
                key.clone(),
                incremental.get(key).cloned(),
                fresh.get(key).cloned(),
            )
        })
        .collect()
}

/// Drives one backend in `layout` through `steps`, comparing it with a
/// fresh one at every step.
fn check(
    layout: Layout,
    steps: Vec<(Vec<kpng_testkit::history::Change>, bool)>,
) -> Result<(), TestCaseError> {
    let mut store = Store::new();
    Cluster::synthetic(ClusterShape {
        services: 4,
        endpoints: 12,
        nodes: 3,
        zones: 2,
    })
    .load_into(&mut store);
    let mut interner = Interner::new();
    let mut projector = NodeProjector::new(NODE);
    let mut incremental = backend(layout);
    let mut full_rounds = 0;
    for (step, (changes, force)) in std::iter::once((Vec::new(), false))
        .chain(steps)
        .enumerate()
    {
        apply(&mut store, &changes, &mut interner);
        if force {
            projector.force_full();
        }
        let report = projector
            .sync_into(&store.snapshot(), &mut incremental)
            .expect("sync");
        if report.is_some_and(|r| r.full) && !force {
            full_rounds += 1;
        }
        let mut fresh = backend(layout);
        fresh
            .sync(&Round::full(projector.view()))
            .expect("full round");
        let (got, want) = (chains(&incremental), chains(&fresh));
        prop_assert!(!want.is_empty());
        let diff = differences(&got, &want);
        prop_assert!(
            diff.is_empty(),
            "step {}: {:?}: (chain, incremental, fresh): {:#?}",
            step,
            changes,
            diff
        );
    }
    prop_assert_eq!(
        full_rounds,
        1,
        "only the first round is full, but those forced"
    );
    Ok(())
}

proptest! {
    #[test]
    fn incremental_rounds_want_what_a_full_round_wants(steps in steps()) {
        check(Layout::Auto, steps)?;
    }

    /// The same in the compact layout.
    #[test]
    fn incremental_rounds_want_what_a_full_round_wants_in_the_compact_layout(steps in steps()) {
        check(Layout::Compact, steps)?;
    }
}
