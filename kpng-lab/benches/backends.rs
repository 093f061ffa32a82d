//! Each backend's figures, side by side in one run (as root):
//!
//! ```text
//! cargo bench -p kpng-lab --bench backends [-- nft|iptables|ebpf|iptables-50k|ebpf-100k]
//! cargo bench -p kpng-lab --bench backends -- nft-comments
//! cargo bench -p kpng-lab --bench backends -- balancing
//! cargo bench -p kpng-lab --bench backends -- udp-sockets
//! cargo bench -p kpng-lab --bench backends -- tcp-end
//! cargo bench -p kpng-lab --bench backends -- dsr
//! cargo bench -p kpng-lab --bench backends -- xdp
//! ```
//!
//! `balancing`: nftables' balancing choices with real packets, 10
//! endpoints and 1,000 flows (a source port each) made before and after
//! one endpoint leaves: the share of flows moved by Maglev and by random,
//! and each choice's new-connection rate against random.
//!
//! `ebpf` ends with the eBPF backend at scale (`ebpf-100k` runs only
//! that): a cold full load of 100,000 Services × 10 endpoints
//! (`KPNG_BENCH_EBPF_SERVICES` changes the count) into a lab created empty
//! for it, in a process of its own, then one endpoint change (median of
//! 20); with the kernel memory of the maps and the process's peak RSS.
//!
//! `nft-100k` and `ebpf-100k-data` (not part of the default run): the
//! backend with 100,000 Services × 10 endpoints programmed
//! (`KPNG_BENCH_SCALE_SERVICES` changes the count), in a process of its
//! own: the cold full sync, one endpoint change (median of 20), and new
//! connections through a ClusterIP against straight to the pod.
//! `KPNG_BENCH_COUNTS=N` gives the Services N distinct endpoint counts,
//! the measured Service's the least used (nft's dearest dispatch).
//!
//! `iptables-switch` (not part of the default run): the iptables backend
//! (in `KPNG_LAB_IPTABLES_MODE`'s mode) synced cold in kube-proxy's
//! layout with `KPNG_BENCH_SCALE_SERVICES` (default 50,000) Services × 10
//! endpoints, then switched to the compact layout and back, one sync
//! each; with the `KUBE-SEP-*` chains left after each.
//!
//! `nft-comments` (not part of the default run): what the comments naming
//! the Services cost the nft backend's full sync at 10k, in time and heap.
//!
//! `udp-sockets` (not part of the default run; `KPNG_BENCH_ROUNDS`,
//! default 3; `KPNG_BENCH_NETNS`, default 1): what ending the connected
//! UDP sockets sent to a removed endpoint costs the eBPF backend's sync
//! at 10k × 10, with 1,100 such sockets held in a pod (and 10 in each of
//! `KPNG_BENCH_NETNS - 1` more network namespaces), on and off
//! alternating.
//!
//! `tcp-end` (not part of the default run; `KPNG_BENCH_ROUNDS`, default
//! 3; `KPNG_BENCH_CONNECTIONS`, default 100): the time from the start of
//! the sync that removes an endpoint to the failure of each of the TCP
//! connections a pod holds to it through a ClusterIP, per backend that
//! ends them (`--end-tcp-connections`: nftables and iptables, each with
//! the conntrack cleaner, and eBPF), for the first
//! ending of a process and a later one.
//!
//! `dsr` (not part of the default run; `KPNG_BENCH_ROUNDS`, default 5;
//! `KPNG_BENCH_CONNECTIONS`, default 200; needs the release `kpng`
//! binary, `cargo build --release -p kpng-cli`): direct server return
//! against SNAT in a two-node cluster of namespaces whose agents run the
//! eBPF tc programs: a client outside to a NodePort of node-1 whose
//! endpoint is on node-2, for SNAT, DSR and hybrid (each a Service
//! annotated with it), the modes in turn each round: the TCP connection
//! rate, the median connect and first-byte times, the median UDP round
//! trip, and the packets per request that came back through node-1.
//!
//! `xdp` (not part of the default run; `KPNG_BENCH_ROUNDS`, default 5;
//! `KPNG_BENCH_CONNECTIONS`, default 500; the release `kpng` binary): two
//! two-node clusters of namespaces side by side, one whose agents run
//! `--xdp generic`: short TCP connections and round trips over a held
//! connection from a client outside (checksum offload off) to a NodePort
//! of node-1 whose endpoint is on node-2, alternating: medians and ratios.
//!
//! `counters` (not part of the default run; `KPNG_BENCH_ROUNDS`, default
//! 3): what the per-Service counters cost each of the nft and eBPF
//! backends at 10k × 10, on and off alternating in one lab: the full
//! sync, one endpoint change, and the connection rate through a
//! ClusterIP (the eBPF one also as the `connect4` program's own time).
//!
//! `iptables` ends with the cold start at scale (`iptables-50k` runs only
//! that): 50,000 Services × 10 endpoints (`KPNG_BENCH_SCALE_SERVICES`
//! changes the count), synced once into a namespace created empty for it,
//! by iptables-nft, iptables-legacy and nftables, each in a process of its
//! own, whose process tree's peak RSS (it and its `iptables-restore` and
//! `-save` children, summed, sampled from /proc every 100 ms) is printed.
//! `KPNG_BENCH_COLD_BACKENDS` (comma-separated, e.g.
//! `iptables-legacy,iptables-legacy-compact`) picks which of them run:
//! `iptables-legacy`, `nft`, `iptables-nft` (the default three), and the
//! iptables backend forced to its compact layout, `iptables-legacy-compact`
//! and `iptables-nft-compact`. `KPNG_LAB_IPTABLES_LAYOUT` sets the layout
//! of the other iptables runs (default `auto`).
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kpng_backend_iptables::IptablesBackend;
use kpng_backend_nft::NftBackend;
use kpng_lab::{CompactIptables, EbpfOnly, LegacyIptables};

/// The environment variable that makes this process one cold sync.
const COLD: &str = "KPNG_BENCH_COLD";

/// The Services of the cold start at scale.
fn scale_services() -> usize {
    std::env::var("KPNG_BENCH_SCALE_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000)
}

/// `KPNG_BENCH_COUNTS`: how many distinct endpoint counts the Services of
/// `nft-100k` and `ebpf-100k-data` have (0, the default: all ten; see
/// `kpng_lab::bench::at_scale`).
fn endpoint_counts() -> usize {
    std::env::var("KPNG_BENCH_COUNTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// In a child process: one cold full sync by `backend`, then one line
/// with its time, this process's peak RSS and its children's.
fn cold_child(backend: &str) {
    if let Some(which) = backend.strip_prefix("at-scale-") {
        let services = std::env::var("KPNG_BENCH_SCALE_SERVICES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        let r = match which {
            "nft" => kpng_lab::bench::at_scale::<NftBackend>(services, endpoint_counts()),
            _ => kpng_lab::bench::at_scale::<EbpfOnly>(services, endpoint_counts()),
        };
        println!(
            "SCALE {services} {:.1} {:.4} {} {:.3} {:.0} {:.0}",
            r.full_ms, r.change_ms, r.change_commands, r.via_vs_direct, r.rates.0, r.rates.1
        );
        return;
    }
    if backend == "iptables-switch" {
        let r = kpng_lab::bench::iptables_layout_switch(scale_services());
        println!(
            "SWITCH {:.0} {:.0} {:.0} {} {} {}",
            r.cold_ms,
            r.to_compact_ms,
            r.back_ms,
            r.endpoint_chains.0,
            r.endpoint_chains.1,
            r.endpoint_chains_back
        );
        return;
    }
    if backend == "ebpf-100k" {
        let services = std::env::var("KPNG_BENCH_EBPF_SERVICES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        let r = kpng_lab::bench::ebpf_at_scale(services);
        let hwm = kpng_testkit::proc_status_kib(None, "VmHWM:");
        println!(
            "EBPF {services} {:.1} {:.1} {:.1} {} {:.4} {:.4} {} {} {hwm} {}",
            r.full_ms,
            r.full_cpu_ms,
            r.backend_ms,
            r.full_writes,
            r.change_ms,
            r.change_backend_ms,
            r.change_writes,
            r.kernel_bytes,
            r.note
        );
        return;
    }
    let services = scale_services();
    let (ms, note) = match backend {
        "nft" => kpng_lab::bench::cold_full_sync::<NftBackend>(services),
        "iptables-legacy" => kpng_lab::bench::cold_full_sync::<LegacyIptables>(services),
        // The mode comes from KPNG_LAB_IPTABLES_MODE, set by the parent.
        "iptables-legacy-compact" | "iptables-nft-compact" => {
            kpng_lab::bench::cold_full_sync::<CompactIptables>(services)
        }
        _ => kpng_lab::bench::cold_full_sync::<IptablesBackend>(services),
    };
    let hwm = kpng_testkit::proc_status_kib(None, "VmHWM:");
    // SAFETY: getrusage fills the struct it is given, nothing else.
    #[allow(unsafe_code)]
    let cpu = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    };
    println!("COLD {ms:.0} {hwm} {cpu:.1} {note}");
}

/// The RSS in KiB of `root` and every process below it, summed, from
/// /proc. (getrusage's children maxrss would count the bench's own pages
/// in each forked child before its exec.)
fn tree_rss_kib(root: u32) -> u64 {
    kpng_lab::bench::descendants(&[root])
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .sum()
}

/// The cold start at scale, each backend in a process of its own.
fn cold_at_scale() {
    if let Some(why) = kpng_lab::unavailable(&["iptables-nft-restore", "iptables-legacy-restore"]) {
        println!("SKIPPED: {why}");
        return;
    }
    let services = scale_services();
    println!(
        "cold start at scale: {services} services x 10 endpoints, one full sync into an empty namespace, each in a process of its own"
    );
    let chosen = std::env::var("KPNG_BENCH_COLD_BACKENDS")
        .unwrap_or_else(|_| "iptables-legacy,nft,iptables-nft".into());
    for backend in chosen.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let exe = std::env::current_exe().expect("the bench binary");
        let mut child = std::process::Command::new(exe);
        child.env(COLD, backend);
        match backend {
            "iptables-nft" | "iptables-nft-compact" => {
                child.env("KPNG_LAB_IPTABLES_MODE", "nft");
            }
            "iptables-legacy-compact" => {
                child.env("KPNG_LAB_IPTABLES_MODE", "legacy");
            }
            _ => {}
        }
        let running = child
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the bench binary runs");
        // The whole tree's RSS, sampled every 100 ms while it runs.
        let (pid, peak) = (running.id(), std::sync::Arc::new(AtomicU64::new(0)));
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let sampler = {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(tree_rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            })
        };
        let out = running.wait_with_output().expect("the bench binary runs");
        done.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let tree = peak.load(Ordering::Relaxed) as f64 / 1024.0;
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().find_map(|l| l.strip_prefix("COLD ")) else {
            println!(
                "{backend:>16}: FAILED: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            continue;
        };
        let mut words = line.splitn(4, ' ');
        let mut number = || {
            words
                .next()
                .and_then(|w| w.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let (ms, hwm, cpu) = (number(), number() / 1024.0, number());
        let note = words.next().unwrap_or_default();
        println!(
            "{backend:>16}: full sync {:>8.1} s (children's CPU time {cpu:.1} s); peak RSS of the process tree {tree:.1} MiB (sampled every 100 ms; the process alone, with its store, view and backend: {hwm:.1} MiB)  ({note})",
            ms / 1e3,
        );
        println!(
            "{{\"backend\":\"{backend}\",\"services\":{services},\"cold_full_sync_ms\":{ms:.0},\"peak_rss_tree_mib\":{tree:.1},\"peak_rss_process_mib\":{hwm:.1}}}"
        );
    }
}

/// `backend` (`nft` or `ebpf`) with 100k Services programmed, in a
/// process of its own: full sync, one change, ClusterIP vs straight.
fn data_plane_at_scale(backend: &str, change_goal: &str) {
    let exe = std::env::current_exe().expect("the bench binary");
    let out = std::process::Command::new(exe)
        .env(COLD, format!("at-scale-{backend}"))
        .output()
        .expect("the bench binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("SCALE ")) else {
        println!(
            "{backend} at scale: FAILED: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    };
    let v: Vec<f64> = line
        .split(' ')
        .map(|w| w.parse().unwrap_or(f64::NAN))
        .collect();
    let shape = match endpoint_counts() {
        0 => "x 10 endpoints".to_owned(),
        n => format!(
            "of {n} endpoint counts (2 to {}; the measured Service's, 1, the least used)",
            n + 1
        ),
    };
    println!(
        "{backend} with {:.0} services {shape} programmed: cold full sync {:.1} ms; one endpoint change, median of 20: {:.3} ms ({:.0} commands)  [{change_goal}]; new connections through a ClusterIP / straight to the pod, 5,000 each, alternating: {:.3} ({:.0} and {:.0}/s)  [>= 0.95]",
        v[0], v[1], v[2], v[3], v[4], v[5], v[6]
    );
    println!(
        "{{\"backend\":\"{backend}\",\"services\":{:.0},\"full_sync_ms\":{:.1},\"change_ms\":{:.4},\"via_service_vs_direct\":{:.3}}}",
        v[0], v[1], v[2], v[4]
    );
}

/// The iptables backend switching layouts at scale, in a process of its
/// own (`KPNG_BENCH_SCALE_SERVICES`, default 50k; `KPNG_LAB_IPTABLES_MODE`).
fn layout_switch() {
    let exe = std::env::current_exe().expect("the bench binary");
    let out = std::process::Command::new(exe)
        .env(COLD, "iptables-switch")
        .output()
        .expect("the bench binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("SWITCH ")) else {
        println!(
            "iptables layout switch: FAILED: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    };
    let v: Vec<&str> = line.split(' ').collect();
    println!(
        "iptables layout switch, {} services x 10 endpoints: cold full sync in kube-proxy's layout {} ms ({} KUBE-SEP chains); the next sync (one endpoint change) after switching to compact {} ms ({} KUBE-SEP chains left); back to kube-proxy's {} ms ({} KUBE-SEP chains)",
        scale_services(),
        v[0],
        v[3],
        v[1],
        v[4],
        v[2],
        v[5]
    );
}

/// The eBPF backend at scale, in a process of its own.
fn ebpf_at_scale() {
    if let Some(why) = kpng_testkit::bpf::unavailable() {
        println!("SKIPPED: {why}");
        return;
    }
    let exe = std::env::current_exe().expect("the bench binary");
    let out = std::process::Command::new(exe)
        .env(COLD, "ebpf-100k")
        .output()
        .expect("the bench binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("EBPF ")) else {
        println!(
            "ebpf at scale: FAILED: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    };
    let words: Vec<&str> = line.splitn(11, ' ').collect();
    let number = |i: usize| {
        words
            .get(i)
            .and_then(|w| w.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let services = number(0);
    let (full, cpu, backend, writes) = (number(1), number(2), number(3), number(4));
    let (change, change_backend, change_writes) = (number(5), number(6), number(7));
    let (kernel, hwm) = (number(8) / (1024.0 * 1024.0), number(9) / 1024.0);
    let note = words.get(10).copied().unwrap_or_default();
    println!(
        "kpng ebpf backend at scale: {services} services x 10 endpoints, a cold full load into a lab created empty for it, in a process of its own"
    );
    println!(
        "  cold full load: {:>8.2} s, CPU time {:.2} s (the backend's own part {:.2} s; {writes} map writes)  [<= 2 s]",
        full / 1e3,
        cpu / 1e3,
        backend / 1e3
    );
    println!(
        "  one endpoint change after it, median of 20: {change:.3} ms (the backend's own part {change_backend:.3} ms; {change_writes} map writes)  [<= 0.1 ms]"
    );
    println!(
        "  kernel memory of the maps: {kernel:.1} MiB; peak RSS of the process: {hwm:.1} MiB  ({note})"
    );
    println!(
        "{{\"backend\":\"ebpf\",\"services\":{services},\"cold_full_load_ms\":{full:.1},\"cold_full_load_cpu_ms\":{cpu:.1},\"backend_ms\":{backend:.1},\"change_ms\":{change:.4},\"change_backend_ms\":{change_backend:.4},\"kernel_maps_mib\":{kernel:.1},\"peak_rss_mib\":{hwm:.1}}}"
    );
}

// Counts heap bytes (a relaxed atomic add per allocation), for the
// comments' cost.
#[global_allocator]
static ALLOC: kpng_testkit::CountingAllocator = kpng_testkit::CountingAllocator;

fn main() {
    if let Ok(backend) = std::env::var(COLD) {
        cold_child(&backend);
        return;
    }
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    if only.iter().any(|o| o == "nft-comments") {
        kpng_lab::bench::comments_cost(3);
        return;
    }
    if only.iter().any(|o| o == "counters") {
        counters_cost();
        return;
    }
    if only.iter().any(|o| o == "udp-sockets") {
        let rounds = std::env::var("KPNG_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        let namespaces = std::env::var("KPNG_BENCH_NETNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        kpng_lab::bench::udp_socket_ending(rounds, namespaces);
        return;
    }
    if only.iter().any(|o| o == "dsr") {
        kpng_lab::bench::direct_return(
            env("KPNG_BENCH_ROUNDS", 5),
            env("KPNG_BENCH_CONNECTIONS", 200),
        );
        return;
    }
    if only.iter().any(|o| o == "xdp") {
        kpng_lab::bench::xdp_against_tc(
            env("KPNG_BENCH_ROUNDS", 5),
            env("KPNG_BENCH_CONNECTIONS", 500),
        );
        return;
    }
    if only.iter().any(|o| o == "tcp-end") {
        let (rounds, connections) = (
            env("KPNG_BENCH_ROUNDS", 3),
            env("KPNG_BENCH_CONNECTIONS", 100),
        );
        kpng_lab::bench::tcp_ending::<kpng_lab::bench::WithCleaner<NftBackend>>(
            rounds,
            connections,
        );
        kpng_lab::bench::tcp_ending::<kpng_lab::bench::WithCleaner<IptablesBackend>>(
            rounds,
            connections,
        );
        kpng_lab::bench::tcp_ending::<EbpfOnly>(rounds, connections);
        return;
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if wanted("nft") {
        kpng_lab::bench::run::<NftBackend>(
            [
                "<= 2000 ms; kube-proxy nft: ~9 min at 10k x 2",
                "<= 10 ms, O(1); kube-proxy: 141 ms",
                ">= 0.9",
                "kernel netfilter per packet",
            ],
            true,
        );
    }
    if wanted("ebpf") {
        kpng_lab::bench::run::<EbpfOnly>(
            [
                "<= 200 ms",
                "<= 0.100 ms",
                "sockets connect straight to the pod: ~1",
                ">= 0.98",
            ],
            true,
        );
    }
    if wanted("ebpf") || wanted("ebpf-100k") {
        ebpf_at_scale();
    }
    if only.iter().any(|o| o == "nft-100k") {
        data_plane_at_scale("nft", "<= 2 ms");
    }
    if only.iter().any(|o| o == "ebpf-100k-data") {
        data_plane_at_scale("ebpf", "<= 0.1 ms");
    }
    if wanted("iptables") {
        kpng_lab::bench::run::<IptablesBackend>(
            [
                "kube-proxy iptables: minutes at 10k, with partial syncs after",
                "kube-proxy: rewrites the dispatch chains, O(services)",
                "O(n) per new connection: expected well under 1",
                "kernel netfilter per packet",
            ],
            false,
        );
    }
    if wanted("iptables") || wanted("iptables-50k") {
        cold_at_scale();
    }
    if only.iter().any(|o| o == "iptables-switch") {
        layout_switch();
    }
    if wanted("balancing") {
        kpng_lab::bench::balancing(10, 1000, 2000);
    }
}

/// `counters`: the per-Service counters' cost, nft then eBPF.
fn counters_cost() {
    use kpng_lab::{LabBackend, Settings, ebpf_config};
    let rounds = std::env::var("KPNG_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let settings = Settings {
        cluster_cidr: "10.244.0.0/16".into(),
        service_cidr: "10.96.0.0/12".into(),
        ..Settings::default()
    };
    kpng_lab::bench::counters_cost::<NftBackend>(rounds, true, |lab, on| {
        let config = kpng_backend_nft::NftConfig::new(settings.proxy())
            .in_netns(&lab.ns("node"))
            .counters(on);
        NftBackend::new(config)
    });
    kpng_lab::bench::counters_scrape_cost();
    let _ = <EbpfOnly as LabBackend>::NAME;
    kpng_lab::bench::counters_cost::<EbpfOnly>(rounds, false, |lab, on| {
        let config = ebpf_config(lab, &settings, false).counters(on);
        EbpfOnly(kpng_backend_ebpf::EbpfBackend::attach(config).expect("the eBPF programs attach"))
    });
}
