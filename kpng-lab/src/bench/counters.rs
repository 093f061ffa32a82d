//! What the connection counters cost: a sync with them, and a scrape.

use std::time::Instant;

use super::*;
use crate::{Lab, LabBackend, settle};

/// One setting's figures in [`counters_cost`].
#[derive(Clone, Copy, Debug, Default)]
struct CounterRun {
    full_ms: f64,
    change_ms: f64,
    via: f64,
    direct: f64,
    ratio: f64,
    program_ns: f64,
}

/// What the per-Service counters (issue #28) cost backend `B`, made by
/// `make(lab, counters)`: with 10k Services × 10 endpoints programmed,
/// counters on and off alternating for `rounds` rounds each, in one
/// lab: the full sync into an empty kernel (when `syncs`: the eBPF
/// backend's counters are in its programs, not its syncs), one endpoint
/// change (median of 20), and new connections through a ClusterIP
/// against straight to the pod (5,000 each, alternating connection by
/// connection). The headline is the connection rate with counters on
/// over off, each normalised by the straight connections of its own
/// round (the machine's drift cancels), with the raw rates beside.
pub fn counters_cost<B: LabBackend>(rounds: usize, syncs: bool, make: impl Fn(&Lab, bool) -> B) {
    if let Some(why) = crate::unavailable(B::TOOLS).or_else(B::unavailable) {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = client_and_endpoint();
    let cluster = cluster(10_000, true);
    let mut runs: [Vec<CounterRun>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        // Off first, then on, alternating.
        let on = round % 2 == 1;
        let mut store = store_of(&cluster);
        if syncs || round == 0 {
            B::clear(&lab);
        }
        let mut backend = make(&lab, on);
        let (mut projector, full_ms) = timed_sync(&store, &mut backend);
        let mut changes = Vec::new();
        endpoint_flips(
            &cluster,
            4999,
            &mut store,
            &mut projector,
            &mut backend,
            |ms, _| changes.push(ms),
        );
        changes.sort_by(f64::total_cmp);
        settle();
        warm_up(&lab);
        let stats = B::SOCKETS
            .then(kpng_backend_ebpf::RunTimeStats::enable)
            .and_then(Result::ok);
        // The kernel's totals are the program's since it was loaded (the
        // rounds share it): this round's runs are the difference.
        let connect4 = |stats: &Option<kpng_backend_ebpf::RunTimeStats>| {
            stats
                .iter()
                .flat_map(|s| s.programs())
                .filter(|p| p.name.contains("connect4"))
                .fold((0u64, 0u128), |(runs, ns), p| {
                    (runs + p.runs, ns + p.time.as_nanos())
                })
        };
        let before = connect4(&stats);
        let (via, direct, ratio) = rates(&lab);
        let after = connect4(&stats);
        let program_ns = match after.0.saturating_sub(before.0) {
            0 => 0.0,
            n => after.1.saturating_sub(before.1) as f64 / n as f64,
        };
        drop(stats);
        eprintln!(
            "  counters {}: full sync {full_ms:.0} ms, change {:.3} ms, {via:.0}/s via the Service, {direct:.0}/s straight, ratio {ratio:.3}{}",
            if on { "on " } else { "off" },
            changes[changes.len() / 2],
            if program_ns > 0.0 {
                format!(", connect4 {program_ns:.0} ns a run")
            } else {
                String::new()
            }
        );
        runs[usize::from(on)].push(CounterRun {
            full_ms,
            change_ms: changes[changes.len() / 2],
            via,
            direct,
            ratio,
            program_ns,
        });
        drop((backend, projector));
    }
    let median = |on: bool, f: fn(&CounterRun) -> f64| {
        let mut v: Vec<f64> = runs[usize::from(on)].iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "kpng {} backend, per-Service counters on vs off, 10k services x 10 endpoints, median of {rounds} each, alternating:",
        B::NAME
    );
    for (on, label) in [(false, "off"), (true, "on ")] {
        println!(
            "  counters {label}: full sync {:>7.1} ms; one endpoint change {:.3} ms; {:.0}/s through a ClusterIP, {:.0}/s straight to the pod (ratio {:.3}){}",
            median(on, |r| r.full_ms),
            median(on, |r| r.change_ms),
            median(on, |r| r.via),
            median(on, |r| r.direct),
            median(on, |r| r.ratio),
            match median(on, |r| r.program_ns) {
                ns if ns > 0.0 => format!("; connect4 {ns:.0} ns a run"),
                _ => String::new(),
            }
        );
    }
    let (on, off) = (median(true, |r| r.ratio), median(false, |r| r.ratio));
    println!(
        "  connection rate, counters on / off, each over its round's straight rate: {:.3} (raw rates: {:.3})  [>= 0.97]",
        on / off,
        median(true, |r| r.via) / median(false, |r| r.via)
    );
}

/// What a scrape of the per-Service counters costs with the nft backend
/// at 10k Services × 10 endpoints (100k counted elements), 200
/// connections counted: reading the counters (one dump of the four pick
/// maps per family) and a whole `/metrics` text (the read, naming by the
/// view, encoding), median of 5 each.
pub fn counters_scrape_cost() {
    use kpng_backend_nft::{CounterReader, NftBackend, NftConfig};
    use kpng_health::metrics::{Measure, Metrics};
    use kpng_sink::SinkExt;
    if let Some(why) = crate::unavailable(NftBackend::TOOLS).or_else(NftBackend::unavailable) {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = client_and_endpoint();
    let store = store_of(&cluster(10_000, true));
    let config = NftConfig::new(settings().proxy())
        .in_netns(&lab.ns("node"))
        .counters(true);
    let metrics = Metrics::new();
    metrics.count_connections(CounterReader::new(&config));
    let mut backend = NftBackend::new(config.clone()).with(Measure::new(metrics.clone()));
    let _ = timed_sync(&store, &mut backend);
    settle();
    warm_up(&lab);
    let reader = CounterReader::new(&config);
    let time = |f: &mut dyn FnMut() -> usize| {
        let mut runs: Vec<(f64, usize)> = (0..5)
            .map(|_| {
                let start = Instant::now();
                let n = f();
                (start.elapsed().as_secs_f64() * 1e3, n)
            })
            .collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[2]
    };
    let (read_ms, rows) = time(&mut || reader.counts().expect("counters").len());
    let (scrape_ms, bytes) = time(&mut || metrics.encode().len());
    let text = metrics.encode();
    assert!(
        text.contains("kpng_service_connections_total{namespace=\"bench\",service=\"real\",port=\"http\",protocol=\"TCP\"} 200"),
        "the scrape counts the 200 connections"
    );
    println!(
        "nft counters at 10k x 10 (100k counted elements), 200 connections counted, median of 5: read {read_ms:.1} ms ({rows} rows); a whole /metrics scrape {scrape_ms:.1} ms ({bytes} bytes)"
    );
}
