//! Soak: churn at 1k Services through the whole pipeline (store, node
//! view, nft backend in a namespace), fast-forwarded, as long as asked.
//!
//! ```text
//! cargo bench -p kpng-lab --bench soak [-- --minutes 60 --services 1000 --events-per-minute 800]
//! ```
//!
//! Each simulated minute has `--events-per-minute` events: readiness
//! flips, endpoints added and removed, and no-op rewrites (an unchanged
//! EndpointSlice sent again). The generator knows which events change the
//! ENLS; the store must make exactly one revision for each, and none for
//! the others (no missed, no spurious revision). The backend syncs once a
//! simulated second, as `--min-sync-period` would have it. The bench
//! prints RSS after a 5-minute warm-up and at the end, then checks that the
//! node's ruleset equals a clean full sync of the final state.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Instant;

use kpng_backend_nft::NftBackend;
use kpng_diff::NodeProjector;
use kpng_lab::{Lab, LabBackend, Settings, unavailable};
use kpng_model::v1::Endpoint;
use kpng_model::{Key, ServiceName};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
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

fn main() {
    if let Some(why) = unavailable(&["nft"]) {
        println!("SKIPPED: {why}");
        return;
    }
    let minutes = arg("--minutes", 60);
    let services = arg("--services", 1000);
    let per_minute = arg("--events-per-minute", 800);
    let cluster = Cluster::synthetic(ClusterShape {
        services,
        endpoints: services * 3 / 2,
        nodes: 100,
        zones: 3,
    });
    let lab = Lab::new();
    let mut store = Store::new();
    let mut txn = store.begin();
    for n in &cluster.nodes {
        txn.set_node(n.clone());
    }
    for s in &cluster.services {
        txn.set_service(s.clone());
    }
    // The endpoints that exist now, by Service.
    let mut live: Vec<(ServiceName, std::net::IpAddr, Endpoint)> = Vec::new();
    for (name, ip, e) in &cluster.endpoints {
        txn.set_endpoint(name.clone(), *ip, e.clone());
        live.push((name.clone(), *ip, e.clone()));
    }
    txn.commit();
    let settings = Settings {
        cluster_cidr: "10.244.0.0/16".into(),
        service_cidr: "10.96.0.0/12".into(),
        ..Settings::default()
    };
    let mut backend = NftBackend::in_lab(&lab, &settings);
    let mut projector = NodeProjector::new("node-0");
    projector
        .sync_into(&store.snapshot(), &mut backend)
        .unwrap();

    let mut rng = Rng(0x5eed);
    let (mut expected, mut noops, mut syncs, mut next_ip) = (0u64, 0u64, 0u64, 1u32);
    let revisions_before = store.stats().revisions;
    let mut warm_rss = 0;
    let start = Instant::now();
    for minute in 0..minutes {
        for event in 0..per_minute {
            let i = rng.below(live.len());
            let mut txn = store.begin();
            match rng.below(10) {
                // A readiness flip: a real change.
                0..=5 => {
                    let (name, ip, e) = &mut live[i];
                    e.ready = !e.ready;
                    e.serving = e.ready;
                    txn.set_endpoint(name.clone(), *ip, e.clone());
                    expected += 1;
                }
                // The same EndpointSlice sent again: no change.
                6 | 7 => {
                    let (name, ip, e) = &live[i];
                    txn.set_endpoint(name.clone(), *ip, e.clone());
                    noops += 1;
                }
                // A pod replaced: one endpoint goes, a new one comes.
                _ => {
                    let (name, ip, e) = live.swap_remove(i);
                    txn.delete(&Key::Endpoint(name.clone(), ip));
                    let new_ip =
                        std::net::IpAddr::from([10, 250, (next_ip >> 8) as u8, next_ip as u8]);
                    next_ip = next_ip % 60_000 + 1;
                    let mut e = e;
                    e.addresses = Some(kpng_model::v1::IpSet::from_addrs([new_ip]));
                    txn.set_endpoint(name.clone(), new_ip, e.clone());
                    live.push((name, new_ip, e));
                    expected += 1;
                }
            }
            txn.commit();
            // One sync per simulated second.
            if event % (per_minute / 60).max(1) == 0 {
                projector
                    .sync_into(&store.snapshot(), &mut backend)
                    .unwrap();
                syncs += 1;
            }
        }
        if minute == 4.min(minutes.saturating_sub(1)) {
            warm_rss = rss_kib();
        }
    }
    projector
        .sync_into(&store.snapshot(), &mut backend)
        .unwrap();
    let elapsed = start.elapsed();
    let end_rss = rss_kib();
    let revisions = store.stats().revisions - revisions_before;

    // The node's rules equal a clean full sync of the final state.
    let fresh = Lab::new();
    let mut clean = NftBackend::in_lab(&fresh, &settings);
    NodeProjector::new("node-0")
        .sync_into(&store.snapshot(), &mut clean)
        .unwrap();
    let converged = Lab::nft_state(&lab.ns("node")) == Lab::nft_state(&fresh.ns("node"));

    println!(
        "soak: {minutes} simulated minutes at {services} Services, {} events ({noops} no-op rewrites), {syncs} syncs to nft, in {:.1} s",
        minutes * per_minute,
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
