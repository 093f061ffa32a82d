//! The `kpng` command at ten times the largest clusters (issue #27): the
//! testkit's scale worlds (`wide`: 100k Services × 10 endpoints, `deep`:
//! 10k × 100; both a million endpoints on 1,000 nodes, with NodePorts,
//! LoadBalancers, affinity, traffic policies, dual-stack Services and
//! terminating endpoints), each run as an operator runs it: one whole
//! process, file parse or API lists included, into a network namespace
//! (or a test cgroup and bpffs) the bench makes and deletes.
//!
//! ```text
//! cargo bench -p kpng-cli --bench scale [-- --worlds wide,deep] [--only nft,ebpf,kube,iptables]
//! ```
//!
//! Rows (each printed with its goal, then a JSON line):
//! - `nft`: `kpng file --input F --node node-0 to-nft --once`, per world:
//!   time and peak RSS (`wait4`), and the elements read back;
//! - `ebpf`: `kpng file … to-ebpf --once`, wide: time, peak RSS, the
//!   maps' kernel memory;
//! - `kube`: the ingest of the wide world's million endpoints from the
//!   test apiserver (paged lists), in a process of its own that counts its
//!   heap: the time until every kind is listed, the store's heap and the
//!   peak heap during the ingest; then `kpng kube … to-nft --once` applied,
//!   the apiserver in the namespace: time to the first sync and peak RSS;
//! - `iptables` (only when asked: minutes): `kpng file … to-iptables
//!   --once`, wide, with iptables-legacy and iptables-nft.
//!
//! `--services N` replaces each world's Service count (`--services 10000`
//! for a quick look). `--write WORLD PATH` only writes a world's file.
//! `KPNG_BENCH_BINARIES=A,B` runs the `nft` and `kube` rows with each
//! binary in turn (`--repeat N` times), to compare builds in one run.
#![allow(unsafe_code, missing_docs, clippy::unwrap_used)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use kpng_testkit::CountingAllocator;
use kpng_testkit::world::World;
use support::{ApiServerProcess, map_elements, peak_of};

// Counts heap bytes in the ingest child (a relaxed atomic add per
// allocation); the other modes only pay that add.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().skip_while(|a| *a != name).nth(1).cloned();
    let services: Option<usize> = arg("--services").and_then(|n| n.parse().ok());
    let world = |name: &str| {
        let mut world = World::named(name).unwrap_or_else(|| panic!("no world named {name}"));
        if let Some(n) = services {
            world.services = n;
        }
        world
    };
    if let Some(name) = arg("--serve") {
        let kubeconfig = args.last().unwrap();
        return support::serve(world(&name).script(), kubeconfig);
    }
    if let Some(name) = arg("--write") {
        // `--write WORLD PATH`: the world as a file, for a look or a profile.
        let file = std::fs::File::create(args.last().unwrap()).unwrap();
        return world(&name).write_list(file).unwrap();
    }
    if let Some(name) = arg("--ingest") {
        let kubeconfig = args.last().unwrap();
        return ingest(&world(&name), kubeconfig);
    }
    let worlds = arg("--worlds").unwrap_or_else(|| "wide,deep".into());
    let only = arg("--only").unwrap_or_else(|| "nft,ebpf,kube".into());
    let wanted = |row: &str| only.split(',').any(|o| o == row);
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED: the scale bench programs network namespaces: run it as root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("kpng-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in worlds.split(',') {
        let w = world(name);
        let file = dir.join(format!("{name}.json"));
        w.write_list(std::fs::File::create(&file).unwrap()).unwrap();
        let input = file.to_str().unwrap();
        let size = std::fs::metadata(&file).unwrap().len() as f64 / (1 << 20) as f64;
        println!(
            "world {name}: {} services x {} endpoints ({} endpoints with the IPv6 ones) on {} nodes, mixed: {}; as one JSON List: {size:.1} MiB",
            w.services,
            w.endpoints_per_service,
            w.endpoints(),
            w.nodes,
            w.mixed
        );
        let repeat: usize = arg("--repeat").and_then(|n| n.parse().ok()).unwrap_or(1);
        for _ in 0..repeat {
            for exe in support::binaries() {
                if wanted("nft") {
                    nft_from_file(name, input, &exe);
                }
                if wanted("kube") && name == "wide" {
                    kube(name, &dir, &exe);
                }
            }
        }
        if wanted("ebpf") && name == "wide" {
            ebpf_from_file(name, input);
        }
        if wanted("iptables") && name == "wide" {
            for mode in ["legacy", "nft"] {
                iptables_from_file(name, input, mode);
            }
        }
        let _ = std::fs::remove_file(&file);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The flags that keep a one-shot run from binding ports.
const NO_PORTS: [&str; 4] = ["--healthz-bind-address", "", "--metrics-bind-address", ""];

/// `kpng file --input F … to-nft --once` into a namespace of its own.
fn nft_from_file(name: &str, input: &str, exe: &str) {
    let lab = kpng_lab::Lab::new();
    let ns = lab.ns("node");
    let mut argv = vec![
        "netns", "exec", &ns, exe, "file", "--input", input, "--node", "node-0", "to-nft", "--once",
    ];
    argv.extend(NO_PORTS);
    let (mib, secs) = peak_of("ip", &argv);
    let elements = map_elements(&ns, "service-keys");
    let goal = match name {
        "wide" => "[<= 6 s, <= 384 MiB]",
        "deep" => "[<= 3 s]",
        _ => "",
    };
    println!(
        "  nft ({exe}): kpng file --input {name}.json ... to-nft --once, applied over netlink into a fresh namespace: {secs:.2} s, peak RSS {mib:.1} MiB; {elements} service-keys elements read back  {goal}"
    );
    println!(
        "{{\"world\":\"{name}\",\"row\":\"nft-file\",\"seconds\":{secs:.2},\"peak_rss_mib\":{mib:.1},\"elements\":{elements}}}"
    );
}

/// `kpng file --input F … to-ebpf --once` into a test cgroup and bpffs.
fn ebpf_from_file(name: &str, input: &str) {
    let Some((mib, secs, kernel_mib)) = support::ebpf_from_file(input) else {
        return;
    };
    println!(
        "  ebpf: kpng file --input {name}.json ... to-ebpf --once into a test cgroup and bpffs: {secs:.2} s, peak RSS {mib:.1} MiB; the maps hold {kernel_mib:.1} MiB of kernel memory  [the load itself <= 2 s: cargo bench -p kpng-lab --bench backends]"
    );
    println!(
        "{{\"world\":\"{name}\",\"row\":\"ebpf-file\",\"seconds\":{secs:.2},\"peak_rss_mib\":{mib:.1},\"kernel_maps_mib\":{kernel_mib:.1}}}"
    );
}

/// `kpng file --input F … to-iptables --once --iptables-mode MODE` into a
/// namespace of its own.
fn iptables_from_file(name: &str, input: &str, mode: &str) {
    let tool = format!("iptables-{mode}-restore");
    if let Some(why) = kpng_lab::unavailable(&[&tool]) {
        println!("  iptables-{mode}: SKIPPED ({why})");
        return;
    }
    let lab = kpng_lab::Lab::new();
    let ns = lab.ns("node");
    let exe = env!("CARGO_BIN_EXE_kpng");
    let mut argv = vec![
        "netns",
        "exec",
        &ns,
        exe,
        "file",
        "--input",
        input,
        "--node",
        "node-0",
        "to-iptables",
        "--once",
        "--iptables-mode",
        mode,
    ];
    argv.extend(NO_PORTS);
    let (mib, secs) = peak_of("ip", &argv);
    let goal = match mode {
        "legacy" => "[completes; <= 60 s]",
        _ => "[completes; the time stated]",
    };
    println!(
        "  iptables-{mode}: kpng file --input {name}.json ... to-iptables --once: {secs:.1} s, peak RSS {mib:.1} MiB (the largest process of the tree)  {goal}"
    );
    println!(
        "{{\"world\":\"{name}\",\"row\":\"iptables-{mode}-file\",\"seconds\":{secs:.1},\"peak_rss_mib\":{mib:.1}}}"
    );
}

/// The ingest from the API, in a child that counts its heap; then the
/// whole `kpng kube … to-nft --once`, applied.
fn kube(name: &str, dir: &std::path::Path, exe: &str) {
    // `--services N`, when given, goes to the children too.
    let services: Vec<String> = std::env::args()
        .skip_while(|a| a != "--services")
        .take(2)
        .collect();
    let served = |netns: Option<&str>, file: &str| {
        let mut args: Vec<&str> = services.iter().map(String::as_str).collect();
        args.extend(["--serve", name]);
        ApiServerProcess::start_in(netns, &args, &dir.join(file))
    };

    // The ingest alone, in a process that counts its heap.
    let apiserver = served(None, "kubeconfig-ingest");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(&services)
        .args(["--ingest", name, &apiserver.kubeconfig])
        .output()
        .unwrap();
    let pages = apiserver.stop();
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().find_map(|l| l.strip_prefix("INGEST ")) {
        Some(line) => {
            let v: Vec<f64> = line
                .split(' ')
                .map(|w| w.parse().unwrap_or(f64::NAN))
                .collect();
            let (secs, store, peak, hwm) = (v[0], v[1], v[2], v[3]);
            println!(
                "  kube ingest: {name}'s lists from the test apiserver ({pages} list requests) into the store: {secs:.2} s; the store holds {store:.1} MiB of heap, the peak heap during the ingest {peak:.1} MiB = {:.2} x the store  [<= 2 x]; the process's peak RSS {hwm:.1} MiB",
                peak / store
            );
            println!(
                "{{\"world\":\"{name}\",\"row\":\"kube-ingest\",\"seconds\":{secs:.2},\"store_heap_mib\":{store:.1},\"peak_heap_mib\":{peak:.1},\"ratio\":{:.2},\"peak_rss_mib\":{hwm:.1}}}",
                peak / store
            );
        }
        None => println!(
            "  kube ingest: FAILED: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    }

    // The whole command, applied, the apiserver in the namespace.
    let (mib, secs, elements) =
        support::applied_from_api(exe, |ns| served(Some(ns), "kubeconfig-ns"), "service-keys");
    println!(
        "  kube ({exe}): kpng kube ... to-nft --once from the test apiserver, applied: {secs:.2} s to the first sync, peak RSS {mib:.1} MiB; {elements} service-keys elements read back"
    );
    println!(
        "{{\"world\":\"{name}\",\"row\":\"kube-nft\",\"seconds\":{secs:.2},\"peak_rss_mib\":{mib:.1}}}"
    );
}

/// The child's side of the ingest row: watches the apiserver of
/// `kubeconfig` into a store until every kind is listed; prints `INGEST`
/// with the time, the store's heap (what is live once listed, above what
/// was live before the client), the peak heap during the ingest (above
/// the same base), all in MiB, and the process's peak RSS.
fn ingest(world: &World, kubeconfig: &str) {
    use kpng_kube::watch::{NodeScope, WatchConfig};
    use kpng_kube::{Ingest, IngestConfig};
    use kpng_model::Kind;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let base = CountingAllocator::live_bytes();
    CountingAllocator::reset_peak();
    let start = Instant::now();
    let (store, peak) = runtime.block_on(async {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let ingest = Ingest::new(kpng_store::Store::new(), IngestConfig::default());
        let reader = ingest.reader();
        let mut watch = WatchConfig::default();
        watch.nodes = NodeScope::Only("node-0".into());
        let task = tokio::spawn(kpng_kube::watch::run(client, ingest, watch));
        let kinds = [Kind::Service, Kind::Endpoint, Kind::Node];
        while !reader.snapshot().listed().contains_all(&kinds) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        let snapshot = reader.snapshot();
        let endpoints: usize = snapshot
            .service_names()
            .map(|n| snapshot.endpoints(n).len())
            .sum();
        assert_eq!(endpoints, world.endpoints(), "every endpoint arrived");
        let peak = CountingAllocator::peak_bytes() - base;
        // The watch idles now; what stays live is the store, the client
        // and the runtime (a few hundred KiB).
        let store = CountingAllocator::live_bytes() - base;
        task.abort();
        ((secs, store), peak)
    });
    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    let hwm = kpng_testkit::proc_status_kib(None, "VmHWM:") as f64 / 1024.0;
    println!(
        "INGEST {:.2} {:.1} {:.1} {hwm:.1}",
        store.0,
        mib(store.1),
        mib(peak)
    );
}
