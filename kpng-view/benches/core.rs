//! Core benchmark: store writes, real changes with their node-view diff,
//! and the heap the store holds.
//!
//! Run with `cargo bench -p kpng-view --bench core`. It prints a table and a
//! final one-line JSON summary. Timings are medians over many repetitions,
//! compared across sizes in one run; nothing here asserts on time.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape, CountingAllocator};
use kpng_view::NodeProjector;

/// Counts live heap bytes.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn live() -> isize {
    CountingAllocator::live_bytes()
}

fn shape(services: usize, endpoints: usize) -> ClusterShape {
    ClusterShape {
        services,
        endpoints,
        nodes: 100,
        zones: 3,
    }
}

/// Loads a cluster into a new store, consuming it, in one transaction, as
/// ingest does: each Service's endpoints as one list.
fn load(cluster: Cluster) -> Store {
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store
}

/// Heap bytes a store of this shape holds: live bytes after loading it,
/// minus live bytes before generating its input.
fn store_heap(shape: ClusterShape) -> (isize, Store) {
    let before = live();
    let store = load(Cluster::synthetic(shape));
    (live() - before, store)
}

fn median_ns(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// ns per no-op write: a one-write transaction setting a random endpoint to
/// a freshly built value equal to the stored one. The worst case: every
/// write lands on a cold part of the store.
fn noop_write_ns(store: &mut Store, cluster: &Cluster, batch: usize) -> f64 {
    let mut samples = Vec::new();
    let n = cluster.endpoints.len();
    for round in 0..31 {
        let writes: Vec<_> = (0..batch)
            .map(|i| cluster.endpoints[(round * 7919 + i * 104_729) % n].clone())
            .collect();
        let start = Instant::now();
        for (name, endpoint) in writes {
            let mut txn = store.begin();
            txn.set_endpoint(name, endpoint);
            assert!(txn.commit().revision.is_none());
        }
        samples.push(start.elapsed().as_nanos() as f64 / batch as f64);
    }
    median_ns(samples)
}

/// ns per no-op endpoint write when a whole Service's endpoints are written
/// again in one transaction, as an EndpointSlice update that changed
/// nothing does (ingest replaces the Service's list with a new one).
fn noop_slice_write_ns(store: &mut Store, cluster: &Cluster, services: usize) -> f64 {
    let mut samples = Vec::new();
    let n = cluster.endpoints.len();
    for round in 0..31 {
        // Endpoints are spread round-robin: those of Service s are at
        // s, s + services, s + 2 * services, ...
        let batches: Vec<(_, std::sync::Arc<Vec<_>>)> = (0..200)
            .map(|i| {
                let s = (round * 7919 + i * 104_729) % services;
                let mut list: Vec<_> = (s..n)
                    .step_by(services)
                    .map(|e| cluster.endpoints[e].1.clone())
                    .collect();
                list.sort_by_key(|e| e.address());
                (cluster.endpoints[s].0.clone(), list.into())
            })
            .collect();
        let writes: usize = batches.iter().map(|(_, b)| b.len()).sum();
        let start = Instant::now();
        for (name, list) in batches {
            let mut txn = store.begin();
            assert_eq!(txn.replace_endpoints(&name, &list).unwrap(), 0);
            assert!(txn.commit().revision.is_none());
        }
        samples.push(start.elapsed().as_nanos() as f64 / writes as f64);
    }
    median_ns(samples)
}

/// ns per real change: flip one endpoint's readiness, commit, diff the
/// store revision and update one node's view. Returns (total, of which
/// projector update) medians and the average ops per change.
fn real_change_ns(store: &mut Store, cluster: &Cluster) -> (f64, f64, f64, f64) {
    let mut projector = NodeProjector::new("node-0");
    projector.update(&store.snapshot());
    let n = cluster.endpoints.len();
    let mut totals = Vec::new();
    let mut projections = Vec::new();
    let mut diffs = Vec::new();
    let mut ops = 0usize;
    let rounds = 2000;
    for round in 0..rounds {
        let (name, endpoint) = &cluster.endpoints[(round * 104_729) % n];
        let ready = round % 2 == 0;
        let changed = endpoint.with_conditions(ready, ready, false);
        let start = Instant::now();
        let before = store.snapshot();
        let mut txn = store.begin();
        txn.set_endpoint(name.clone(), changed);
        txn.commit();
        let after = store.snapshot();
        let d = Instant::now();
        black_box(before.diff(&after));
        let p = Instant::now();
        ops += projector.update(&after).len();
        let end = Instant::now();
        totals.push((end - start).as_nanos() as f64);
        diffs.push((p - d).as_nanos() as f64);
        projections.push((end - p).as_nanos() as f64);
    }
    (
        median_ns(totals),
        median_ns(diffs),
        median_ns(projections),
        ops as f64 / rounds as f64,
    )
}

fn main() {
    // Heap first, with nothing else alive.
    let (heap_small, small_store) = store_heap(shape(1_000, 1_500));
    drop(small_store);
    let (heap_1k, mut store_1k) = store_heap(shape(1_000, 10_000));
    let (heap_10k, mut store_10k) = store_heap(shape(10_000, 100_000));
    // The same Services and nodes without endpoints: the difference is
    // what the endpoints cost. Both without a change log (a load this big
    // leaves none; the smaller one would).
    let bare = |endpoints| {
        let before = live();
        let mut config = kpng_store::StoreConfig::default();
        config.log_revisions = 0;
        let mut store = Store::with_config(config);
        Cluster::synthetic(shape(10_000, endpoints)).load_into(&mut store);
        let heap = live() - before;
        drop(store);
        heap
    };
    let per_endpoint = (bare(100_000) - bare(0)) as f64 / 100_000.0;

    let cluster_1k = Cluster::synthetic(shape(1_000, 10_000));
    let cluster_10k = Cluster::synthetic(shape(10_000, 100_000));

    let noop_10k = noop_write_ns(&mut store_10k, &cluster_10k, 2_000);
    let noop_1k = noop_write_ns(&mut store_1k, &cluster_1k, 2_000);
    let noop_slice_10k = noop_slice_write_ns(&mut store_10k, &cluster_10k, 10_000);
    let (change_1k, diff_1k, proj_1k, ops_1k) = real_change_ns(&mut store_1k, &cluster_1k);
    let (change_10k, diff_10k, proj_10k, ops_10k) = real_change_ns(&mut store_10k, &cluster_10k);

    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    println!("kpng core benchmark (median over repetitions; goals in brackets)");
    println!("{:<58} {:>12}", "measure", "value");
    println!(
        "{:<58} {:>9.0} ns   [<= 1000 ns]",
        "no-op write, 10k svc x 10 ep", noop_10k
    );
    println!("{:<58} {:>9.0} ns", "no-op write, 1k svc x 10 ep", noop_1k);
    println!(
        "{:<58} {:>9.0} ns",
        "no-op write per endpoint, whole Service rewritten, 10k x 10", noop_slice_10k
    );
    println!(
        "{:<58} {:>9.0} ns   [<= 50000 ns]",
        "real change + store diff + node-view diff, 1k x 10", change_1k
    );
    println!(
        "{:<58} {:>9.0} ns   [<= 50000 ns, flat]",
        "real change + store diff + node-view diff, 10k x 10", change_10k
    );
    println!(
        "{:<58} {:>9.0} ns",
        "  of which store diff, 1k / 10k", diff_1k
    );
    println!("{:<58} {:>9.0} ns", "", diff_10k);
    println!(
        "{:<58} {:>9.0} ns",
        "  of which node-view update, 1k / 10k", proj_1k
    );
    println!("{:<58} {:>9.0} ns", "", proj_10k);
    println!(
        "{:<58} {:>9.2}      ",
        "  view ops per change (node-0 of 100 nodes), 1k / 10k", ops_1k
    );
    println!("{:<58} {:>9.2}      ", "", ops_10k);
    println!(
        "{:<58} {:>9.2} MiB  [<= 2 MiB]",
        "store heap, 1k svc / 1.5k ep",
        mib(heap_small)
    );
    println!(
        "{:<58} {:>9.2} MiB",
        "store heap, 1k svc x 10 ep",
        mib(heap_1k)
    );
    println!(
        "{:<58} {:>9.2} MiB  [<= 64 MiB]",
        "store heap, 10k svc x 10 ep",
        mib(heap_10k)
    );
    println!(
        "{:<58} {:>9.1} B    [<= 64 B]",
        "store bytes per endpoint, 10k svc x 10 ep", per_endpoint
    );
    println!(
        "{{\"store_bytes_per_endpoint\":{per_endpoint:.1},\"noop_write_ns_10k\":{noop_10k:.0},\"noop_slice_write_ns_10k\":{noop_slice_10k:.0},\"noop_write_ns_1k\":{noop_1k:.0},\"change_ns_1k\":{change_1k:.0},\"change_ns_10k\":{change_10k:.0},\"change_ratio_10k_over_1k\":{:.2},\"heap_bytes_1k_1500\":{heap_small},\"heap_bytes_1k_10k\":{heap_1k},\"heap_bytes_10k_100k\":{heap_10k}}}",
        change_10k / change_1k
    );
}
