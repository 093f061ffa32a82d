//! Backends at scale: cold full syncs, endpoint flips at 10k+ Services,
//! and the eBPF backend's maps at scale.

use std::time::Instant;

use kpng_model::ServiceName;
use kpng_store::Store;
use kpng_view::NodeProjector;

use super::*;
use crate::{Lab, LabBackend, settle};

/// A node's first sync of `services` Services × 10 endpoints (the simple
/// shape) into a lab of its own, created empty for it: the cold start.
/// Returns the sync's time in ms and the backend's note (rules, chains).
pub fn cold_full_sync<B: LabBackend>(services: usize) -> (f64, String) {
    let lab = Lab::new();
    let cluster = cluster(services, true);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    drop(cluster);
    let mut projector = NodeProjector::new("node-0");
    let mut backend = B::in_lab(&lab, &settings());
    let start = Instant::now();
    projector
        .sync_into(&store.snapshot(), &mut backend)
        .expect("the cold full sync");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    (ms, backend.last_note())
}

/// What [`ebpf_at_scale`] measured.
#[derive(Clone, Debug, Default)]
pub struct EbpfAtScale {
    /// The cold full load, in ms.
    pub full_ms: f64,
    /// The CPU time spent in it (user and system), in ms: on a busy
    /// machine, wall time also counts waiting for a CPU.
    pub full_cpu_ms: f64,
    /// The backend's own part of it (rendering and map writes), in ms.
    pub backend_ms: f64,
    /// Map elements it wrote.
    pub full_writes: usize,
    /// One endpoint change after it, median of 20, in ms.
    pub change_ms: f64,
    /// The backend's own part of the change, median, in ms.
    pub change_backend_ms: f64,
    /// Map elements one change wrote (median).
    pub change_writes: usize,
    /// The kernel memory of the maps after the load, in bytes.
    pub kernel_bytes: u64,
    /// The backend's note (sets, records, maps).
    pub note: String,
}

/// The eBPF backend alone at scale: a node's first sync of `services`
/// Services × 10 endpoints (the simple shape) into a lab of its own,
/// created empty for it (the cold full load), then 20 endpoint changes
/// (an endpoint not ready, then ready again), each synced on its own.
pub fn ebpf_at_scale(services: usize) -> EbpfAtScale {
    let lab = Lab::new();
    let cluster = cluster(services, true);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    let mut projector = NodeProjector::new("node-0");
    let mut backend = crate::EbpfOnly::in_lab(&lab, &settings());
    let cpu = cpu_ms();
    let start = Instant::now();
    projector
        .sync_into(&store.snapshot(), &mut backend)
        .expect("the cold full load");
    let full_ms = start.elapsed().as_secs_f64() * 1e3;
    let full_cpu_ms = cpu_ms() - cpu;
    let stats = backend.0.last_sync().clone();
    let kernel_bytes = backend.0.kernel_memory();
    let note = backend.last_note();
    let mut change = Vec::new();
    endpoint_flips(
        &cluster,
        49_999,
        &mut store,
        &mut projector,
        &mut backend,
        |ms, backend| {
            let last = backend.0.last_sync();
            assert!(!last.replaced, "incremental");
            change.push((ms, last.micros as f64 / 1e3, last.writes));
        },
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut writes: Vec<usize> = change.iter().map(|c| c.2).collect();
    writes.sort_unstable();
    EbpfAtScale {
        full_ms,
        full_cpu_ms,
        backend_ms: stats.micros as f64 / 1e3,
        full_writes: stats.writes,
        change_ms: median(change.iter().map(|c| c.0).collect()),
        change_backend_ms: median(change.iter().map(|c| c.1).collect()),
        change_writes: writes[writes.len() / 2],
        kernel_bytes,
        note,
    }
}

/// The CPU time of this thread so far (user and system), in ms, from
/// `/proc/thread-self/schedstat` (ns on a CPU); the sync runs on it.
fn cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

/// What [`at_scale`] measured.
#[derive(Clone, Debug, Default)]
pub struct AtScale {
    /// The cold full sync, in ms.
    pub full_ms: f64,
    /// One endpoint change after it, median of 20, in ms.
    pub change_ms: f64,
    /// Commands (or writes) of one change, median.
    pub change_commands: usize,
    /// New connections through a ClusterIP / straight to the pod, 5,000
    /// each, alternating, with all the Services programmed.
    pub via_vs_direct: f64,
    /// The connection rates through the Service and straight, per second.
    pub rates: (f64, f64),
}

/// Backend `B` at scale: a node's first sync of `services` Services × 10
/// endpoints (the simple shape) and a real Service (a pod in the lab)
/// into a lab created empty for it, then 20 endpoint changes (an
/// endpoint not ready, then ready again), each synced on its own, then
/// new connections through the real Service's ClusterIP against straight
/// to its pod.
///
/// With `counts` above 0, the synthetic Services have that many distinct
/// endpoint counts (2 to `counts + 1`, in turn), so that the real
/// Service's count (1) is the least used of `counts + 1`: for the nft
/// backend, whose Service ports of one count share a chain (a class)
/// found by one set lookup per class in order of use, the dearest case
/// of the data path.
pub fn at_scale<B: LabBackend>(services: usize, counts: usize) -> AtScale {
    let lab = client_and_endpoint();
    let mut cluster = cluster(services, true);
    if counts > 0 {
        let index: std::collections::HashMap<ServiceName, usize> = cluster
            .services
            .iter()
            .enumerate()
            .map(|(i, svc)| (svc.service_name(), i))
            .collect();
        let mut kept: std::collections::HashMap<ServiceName, usize> = Default::default();
        cluster.endpoints.retain(|(name, _)| {
            let want = 2 + index.get(name).copied().unwrap_or(0) % counts;
            let n = kept.entry(name.clone()).or_default();
            *n += 1;
            *n <= want
        });
    }
    let mut store = store_of(&cluster);
    let mut backend = B::in_lab(&lab, &settings());
    let (mut projector, full_ms) = timed_sync(&store, &mut backend);
    let mut change = Vec::new();
    endpoint_flips(
        &cluster,
        49_999,
        &mut store,
        &mut projector,
        &mut backend,
        |ms, backend| {
            assert!(!backend.last_full(), "incremental");
            change.push((ms, backend.last_commands()));
        },
    );
    change.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (change_ms, change_commands) = change[change.len() / 2];
    settle();
    warm_up(&lab);
    let (via, direct, via_vs_direct) = rates(&lab);
    AtScale {
        full_ms,
        change_ms,
        change_commands,
        via_vs_direct,
        rates: (via, direct),
    }
}
