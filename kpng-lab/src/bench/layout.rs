//! The iptables backend switching layout (full to compact) at scale.

use std::time::Instant;

use kpng_store::Store;
use kpng_view::NodeProjector;

use super::*;
use crate::{Lab, LabBackend};

/// What [`iptables_layout_switch`] measured, in ms.
#[derive(Clone, Debug, Default)]
pub struct LayoutSwitch {
    /// The cold full sync in kube-proxy's layout.
    pub cold_ms: f64,
    /// The next sync (one endpoint change) after switching to the compact
    /// layout: a full rewrite that deletes the old `KUBE-SEP-*` chains.
    pub to_compact_ms: f64,
    /// The `KUBE-SEP-*` chains in the nat table before and after it.
    pub endpoint_chains: (usize, usize),
    /// The sync after switching back.
    pub back_ms: f64,
    /// The `KUBE-SEP-*` chains after switching back.
    pub endpoint_chains_back: usize,
}

/// The iptables backend (in the lab's mode, `KPNG_LAB_IPTABLES_MODE`)
/// switching layouts at scale: a cold full sync of `services` Services ×
/// 10 endpoints in kube-proxy's layout into a lab of its own, then an
/// endpoint change synced after `set_layout(Compact)`, then another after
/// switching back; with the `KUBE-SEP-*` chains the kernel holds after
/// each.
pub fn iptables_layout_switch(services: usize) -> LayoutSwitch {
    use kpng_backend_iptables::{IptablesBackend, Layout};
    let lab = Lab::new();
    let cluster = cluster(services, true);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    let mut projector = NodeProjector::new("node-0");
    let mut backend = IptablesBackend::in_lab(&lab, &settings());
    backend.set_layout(Layout::KubeProxy);
    let endpoint_chains = || {
        IptablesBackend::dump(&lab)
            .lines()
            .filter(|l| l.starts_with(":KUBE-SEP-"))
            .count()
    };
    let timed = |store: &Store, projector: &mut NodeProjector, backend: &mut IptablesBackend| {
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), backend)
            .expect("the sync");
        start.elapsed().as_secs_f64() * 1e3
    };
    let cold_ms = timed(&store, &mut projector, &mut backend);
    let before = endpoint_chains();
    let flip = |store: &mut Store, ready: bool| {
        let (name, ep) = cluster.endpoints[services * 5].clone();
        let mut txn = store.begin();
        txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
        txn.commit();
    };
    backend.set_layout(Layout::Compact);
    flip(&mut store, false);
    let to_compact_ms = timed(&store, &mut projector, &mut backend);
    assert!(backend.last_sync().replaced && backend.last_sync().compact);
    let after = endpoint_chains();
    backend.set_layout(Layout::KubeProxy);
    flip(&mut store, true);
    let back_ms = timed(&store, &mut projector, &mut backend);
    assert!(backend.last_sync().replaced && !backend.last_sync().compact);
    LayoutSwitch {
        cold_ms,
        to_compact_ms,
        endpoint_chains: (before, after),
        back_ms,
        endpoint_chains_back: endpoint_chains(),
    }
}
