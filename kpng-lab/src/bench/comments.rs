//! What the rules' comments cost a sync.

use std::time::Instant;

use kpng_store::Store;
use kpng_view::NodeProjector;

use super::*;
use crate::{Lab, LabBackend};

/// What comments naming the Services cost the nft backend: the full sync
/// of 10k Services × 10 endpoints (the mixed cluster: NodePorts, LBs,
/// 13.3k ports) into an empty table, with comments on and off, `rounds`
/// times each, alternating. Prints the median time, the commands, the heap
/// the backend keeps after the sync and the peak heap during it (needs
/// [`kpng_testkit::CountingAllocator`] as the binary's allocator, as the
/// backends benchmark installs it).
pub fn comments_cost(rounds: usize) {
    use kpng_backend_nft::{NftBackend, NftConfig};
    use kpng_testkit::CountingAllocator;
    if let Some(why) = crate::unavailable(NftBackend::TOOLS).or_else(NftBackend::unavailable) {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = Lab::new();
    let cluster = cluster(10_000, false);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    let snapshot = store.snapshot();
    // (time ms, commands, kept bytes, peak bytes) per round, per setting.
    let mut runs: [Vec<(f64, usize, isize, isize)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        let on = round % 2 == 0;
        NftBackend::clear(&lab);
        let mut projector = NodeProjector::new("node-0");
        let config = NftConfig::new(settings().proxy())
            .in_netns(&lab.ns("node"))
            .comments(on);
        let before = CountingAllocator::live_bytes();
        CountingAllocator::reset_peak();
        let mut backend = NftBackend::new(config);
        let start = Instant::now();
        projector
            .sync_into(&snapshot, &mut backend)
            .expect("bench setup");
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let kept = CountingAllocator::live_bytes() - before;
        let peak = CountingAllocator::peak_bytes() - before;
        runs[usize::from(on)].push((ms, backend.last_commands(), kept, peak));
        drop((backend, projector));
    }
    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    println!(
        "nft comments naming the Services, full sync of 10k x 10 mixed (13.3k ports), median of {rounds}:"
    );
    for (on, label) in [(false, "without comments"), (true, "with comments   ")] {
        let mut r = runs[usize::from(on)].clone();
        r.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ms, commands, kept, peak) = r[r.len() / 2];
        println!(
            "  {label}: {ms:>7.1} ms  ({commands} commands); heap kept by the projector and backend {:.1} MiB, peak during the sync {:.1} MiB",
            mib(kept),
            mib(peak)
        );
    }
}
