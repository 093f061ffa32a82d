//! Soak: churn at 1k Services through the whole pipeline (JSON objects as
//! the apiserver sends them, ingest, store, node view, nft backend in a
//! namespace), fast-forwarded, as long as asked.
//!
//! ```text
//! cargo bench -p kpng-lab --bench soak [-- --minutes 60 --services 1000 --events-per-minute 800]
//! ```
//!
//! Each simulated minute has `--events-per-minute` EndpointSlice events:
//! readiness flips, pods replaced, and slices sent again unchanged but for
//! their resourceVersion. The generator knows which events change the
//! ENLS; the store must make exactly one revision for each, and none for
//! the others (no missed, no spurious revision). The backend syncs once a
//! simulated second, as `--min-sync-period` would have it. The bench
//! prints RSS after a 5-minute warm-up and at the end, then checks that the
//! node's ruleset equals a clean full sync of the final state.
#![allow(missing_docs, clippy::unwrap_used)]

use kpng_kube::WatchEvent as Event;
use std::time::Instant;

use kpng_backend_nft::NftBackend;
use kpng_kube::objects::{EndpointSlice, Node, Service};
use kpng_kube::{Ingest, IngestConfig};
use kpng_lab::{Lab, LabBackend, Settings, unavailable};
use kpng_store::Store;
use kpng_view::NodeProjector;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    kpng_testkit::proc_status_kib(None, "VmRSS:")
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }
}

/// One Service's objects as the apiserver sends them (JSON bytes).
fn service_json(i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "metadata": {"namespace": format!("ns-{}", i % 20), "name": format!("s{i}"), "resourceVersion": "1"},
        "spec": {"clusterIP": format!("10.96.{}.{}", i / 250, i % 250 + 1),
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .unwrap()
}

/// A Service's EndpointSlice: `endpoints` are (address number, ready).
fn slice_json(i: usize, version: u64, endpoints: &[(u32, bool)]) -> Vec<u8> {
    let eps: Vec<_> = endpoints
        .iter()
        .map(|(n, ready)| {
            serde_json::json!({
                "addresses": [format!("10.{}.{}.{}", 128 + n / 65536, (n / 256) % 256, n % 256)],
                "conditions": {"ready": ready},
                "nodeName": format!("node-{}", n % 100),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "metadata": {"namespace": format!("ns-{}", i % 20), "name": format!("s{i}-x"),
                     "resourceVersion": version.to_string(),
                     "labels": {"kubernetes.io/service-name": format!("s{i}")}},
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap()
}

fn main() {
    if let Some(why) = unavailable(&["nft"]) {
        println!("SKIPPED: {why}");
        return;
    }
    let minutes = arg("--minutes", 60);
    let services = arg("--services", 1000);
    let per_minute = arg("--events-per-minute", 800);
    let lab = Lab::new();
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-0"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.1"}]}
    }))
    .unwrap();
    ingest.apply_watcher_event(&Event::Apply(node.clone()));
    // Each Service starts with one or two ready endpoints.
    let mut slices: Vec<Vec<(u32, bool)>> = Vec::new();
    let mut next = 1u32;
    for i in 0..services {
        let svc: Service = serde_json::from_slice(&service_json(i)).unwrap();
        ingest.apply_watcher_event(&Event::Apply(svc.clone()));
        let eps: Vec<(u32, bool)> = (0..1 + i % 2)
            .map(|_| {
                next += 1;
                (next, true)
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_slice(&slice_json(i, 1, &eps)).unwrap();
        ingest.apply_watcher_event(&Event::Apply(slice.clone()));
        slices.push(eps);
    }
    let store_revisions = |ingest: &Ingest| ingest.reader().stats().revisions;
    let settings = Settings {
        cluster_cidr: "10.244.0.0/16".into(),
        service_cidr: "10.96.0.0/12".into(),
        ..Settings::default()
    };
    let mut backend = NftBackend::in_lab(&lab, &settings);
    let mut projector = NodeProjector::new("node-0");
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .unwrap();

    let mut rng = Rng(0x5eed);
    let (mut expected, mut noops, mut syncs, mut version) = (0u64, 0u64, 0u64, 1u64);
    let (revisions_before, events_before) = (store_revisions(&ingest), ingest.stats().events);
    let mut warm_rss = 0;
    let start = Instant::now();
    for minute in 0..minutes {
        for event in 0..per_minute {
            let i = rng.below(services);
            let eps = &mut slices[i];
            let j = rng.below(eps.len());
            version += 1;
            match rng.below(10) {
                // A readiness flip: a real change.
                0..=5 => {
                    eps[j].1 = !eps[j].1;
                    expected += 1;
                }
                // The same slice sent again (a new resourceVersion only).
                6 | 7 => noops += 1,
                // A pod replaced: its endpoint goes, a new one comes.
                _ => {
                    next += 1;
                    eps[j] = (next, true);
                    expected += 1;
                }
            }
            // Bytes as the apiserver sends them, decoded and translated.
            let slice: EndpointSlice =
                serde_json::from_slice(&slice_json(i, version, eps)).unwrap();
            ingest.apply_watcher_event(&Event::Apply(slice.clone()));
            // One sync per simulated second.
            if event % (per_minute / 60).max(1) == 0 {
                projector
                    .sync_into(&ingest.reader().snapshot(), &mut backend)
                    .unwrap();
                syncs += 1;
            }
        }
        if minute == 4.min(minutes.saturating_sub(1)) {
            warm_rss = rss_kib();
        }
    }
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .unwrap();
    let elapsed = start.elapsed();
    let end_rss = rss_kib();
    let revisions = store_revisions(&ingest) - revisions_before;
    let events = ingest.stats().events - events_before;

    // The node's rules equal a clean full sync of the final state.
    let fresh = Lab::new();
    let mut clean = NftBackend::in_lab(&fresh, &settings);
    NodeProjector::new("node-0")
        .sync_into(&ingest.reader().snapshot(), &mut clean)
        .unwrap();
    let converged = Lab::nft_state(&lab.ns("node")) == Lab::nft_state(&fresh.ns("node"));

    println!(
        "soak: {minutes} simulated minutes at {services} Services, {events} EndpointSlice events as JSON through ingest ({noops} that change nothing), {syncs} syncs to nft, in {:.1} s",
        elapsed.as_secs_f64()
    );
    println!(
        "revisions: {revisions}, true changes: {expected}  [equal: no revision missed or spurious]"
    );
    println!(
        "RSS after warm-up: {:.1} MiB, at the end: {:.1} MiB  [no growth after warm-up]",
        warm_rss as f64 / 1024.0,
        end_rss as f64 / 1024.0
    );
    println!("final ruleset equals a clean full sync: {converged}");
    println!(
        "{{\"minutes\":{minutes},\"revisions\":{revisions},\"expected\":{expected},\"rss_warm_mib\":{:.1},\"rss_end_mib\":{:.1},\"converged\":{converged}}}",
        warm_rss as f64 / 1024.0,
        end_rss as f64 / 1024.0
    );
    assert_eq!(revisions, expected, "one revision per true change");
    assert!(converged, "the soaked ruleset differs from a clean sync");
}
