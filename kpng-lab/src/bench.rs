//! The figures every backend prints, measured in network namespaces the
//! benchmark creates (run as root): full-sync time at 1k and 10k Services
//! × 10 endpoints, time and commands for one endpoint change at 10k, and
//! the new-connection rate through a ClusterIP with 10 vs 10k Services.

use std::net::IpAddr;
use std::time::Instant;

use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{ClientIpAffinity, IpSet, Protocol, Service, ServicePort};
use kpng_model::{EndpointInfo, ServiceName};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::NodeProjector;

use crate::{Lab, LabBackend, Settings, settle};

/// A lab with a pod client (`podc`, 10.244.1.99) and one endpoint pod
/// serving (`e1`, 10.244.1.10): what the rate measures connect through.
fn client_and_endpoint() -> Lab {
    let mut lab = Lab::new();
    lab.host("podc", &["10.244.1.99"], &[]);
    lab.host("e1", &["10.244.1.10"], &[]);
    lab.serve("e1", "10.244.1.10");
    lab
}

fn settings() -> Settings {
    Settings {
        cluster_cidr: "10.244.0.0/16".into(),
        service_cidr: "10.96.0.0/12".into(),
        ..Settings::default()
    }
}

/// Writes Service `bench/NAME` (ClusterIP `ip`, TCP port 80 to 8080,
/// ClientIP affinity when `affinity`) with `endpoints` on `node`; returns
/// its name.
fn bench_service(
    store: &mut Store,
    (name, ip, affinity): (&str, &str, bool),
    node: &str,
    endpoints: &[IpAddr],
) -> ServiceName {
    let svc = Service {
        namespace: "bench".into(),
        name: name.into(),
        cluster_ips: Some(IpSet::parse_addrs("c", [ip]).expect("bench setup")),
        client_ip_affinity: affinity.then_some(ClientIpAffinity {
            timeout_seconds: 10_800,
        }),
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: 1,
            port: 80,
            ..Default::default()
        }],
        ..Default::default()
    };
    let name = svc.service_name();
    let mut txn = store.begin();
    txn.set_service(kpng_model::ServiceInfo::new(svc).expect("bench setup"));
    for ip in endpoints {
        let ep = EndpointInfo::builder(*ip)
            .node(node, "")
            .ports(PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]))
            .build();
        txn.set_endpoint(name.clone(), ep);
    }
    txn.commit();
    name
}

/// A real Service whose endpoint is the lab's e1 (10.244.1.10:8080).
fn real_service(store: &mut Store) {
    let e1 = "10.244.1.10".parse().expect("bench setup");
    bench_service(store, ("real", "10.100.0.1", false), "node-0", &[e1]);
}

/// Warms the path up: 200 connections from the pod client through the
/// real Service, every one answered.
fn warm_up(lab: &Lab) {
    let lines = lab.connect("podc", "tcp", "10.100.0.1", 80, 200);
    let ok = lines
        .iter()
        .filter(|l| l.starts_with("10.244.1.10"))
        .count();
    assert_eq!(
        ok,
        200,
        "every connection answered: {:?}",
        &lines[..lines.len().min(3)]
    );
}

/// 5,000 connections through the Service and 5,000 straight to its pod,
/// alternating connection by connection in one client: the rate of each,
/// and their ratio (through the Service / straight). The straight ones go
/// to the pod's other port (8081): to the Service's own (8080), a
/// translated connection's conntrack entry, lingering after it closes,
/// holds the very tuple a straight one from the same client port would
/// take; with both on one port, repeated runs fell from thousands of
/// connections a second to hundreds.
fn rates(lab: &Lab) -> (f64, f64, f64) {
    let count = 5000;
    let ((via, via_ok), (direct, direct_ok)) =
        lab.paired_rates("podc", ("10.100.0.1", 80), ("10.244.1.10", 8081), count);
    // Ten thousand connections to one python server (it accepts one at a
    // time) within seconds: the odd one times out; rates count those
    // answered.
    assert!(
        via_ok * 100 >= count * 99 && direct_ok * 100 >= count * 99,
        "{via_ok} and {direct_ok} of {count} connections answered"
    );
    (via, direct, via / direct)
}

/// A cluster of `services` × 10 endpoints. `simple`: every Service a
/// ClusterIP with one TCP port (the shape of kube-proxy's published
/// figures); otherwise the testkit's mix (a third with a second, UDP port;
/// the first 900 NodePort or LoadBalancer).
/// A store holding `cluster` and the lab's real Service.
fn store_of(cluster: &Cluster) -> Store {
    let mut store = Store::new();
    cluster.load_into(&mut store);
    real_service(&mut store);
    store
}

/// A cold full sync of `store` into `backend` by a new projector of
/// node-0: the projector, and the sync's time in ms.
fn timed_sync<S: kpng_sink::Sink>(store: &Store, backend: &mut S) -> (NodeProjector, f64) {
    let mut projector = NodeProjector::new("node-0");
    let start = Instant::now();
    projector
        .sync_into(&store.snapshot(), backend)
        .expect("the cold full sync");
    (projector, start.elapsed().as_secs_f64() * 1e3)
}

fn cluster(services: usize, simple: bool) -> Cluster {
    let mut cluster = Cluster::synthetic(ClusterShape {
        services,
        endpoints: services * 10,
        nodes: 100,
        zones: 3,
    });
    if simple {
        for svc in &mut cluster.services {
            svc.r#type = kpng_model::v1::ServiceType::ClusterIp as i32;
            svc.ports.truncate(1);
            svc.ports[0].node_port = 0;
            svc.load_balancer_ips = None;
        }
    }
    cluster
}

fn full_sync<B: LabBackend>(
    lab: &Lab,
    services: usize,
    simple: bool,
) -> (f64, usize, Store, NodeProjector, B) {
    let store = store_of(&cluster(services, simple));
    let mut backend = B::in_lab(lab, &settings());
    let (projector, ms) = timed_sync(&store, &mut backend);
    let commands = backend.last_commands();
    eprintln!(
        "  {services} services (simple: {simple}): {ms:.0} ms {}",
        backend.last_note()
    );
    (ms, commands, store, projector, backend)
}

/// Measures backend `B` and prints its table; `refs` are the goals and
/// kube-proxy references printed in brackets: full sync at 10k, one
/// change at 10k, connection-rate ratio. `extended` adds a mixed cluster
/// and a restart at 10k (minutes each for iptables, so left out there).
pub fn run<B: LabBackend>(refs: [&str; 4], extended: bool) {
    if let Some(why) = crate::unavailable(B::TOOLS).or_else(B::unavailable) {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = client_and_endpoint();

    // The data plane with 10 Services programmed.
    let (small_ms, small_commands, ..) = full_sync::<B>(&lab, 10, true);
    settle();
    // Through the Service and straight to the pod, interleaved, so that
    // the machine's drift hits both alike. For a socket-level backend the
    // kernel also counts what its programs cost per run.
    let stats = B::SOCKETS
        .then(kpng_backend_ebpf::RunTimeStats::enable)
        .and_then(Result::ok);
    warm_up(&lab);
    let (rate_10, direct_10, ratio_direct_10) = rates(&lab);
    let program_costs: Vec<String> = stats
        .iter()
        .flat_map(|s| s.programs())
        .filter(|p| p.runs > 0)
        .map(|p| format!("{} {} ns x {}", p.name, p.nanos_per_run(), p.runs))
        .collect();
    drop(stats);

    let (ms_1k, commands_1k, ..) = full_sync::<B>(&lab, 1_000, true);
    let mut extra = Vec::new();
    if extended {
        let (ms, commands, ..) = full_sync::<B>(&lab, 10_000, false);
        extra.push(format!(
            "full sync, 10k x 10 mixed (NodePorts, LBs, 13.3k ports): {ms:>7.1} ms  ({commands} commands)"
        ));
    }
    // The headline: a node's first sync, into an empty kernel.
    B::clear(&lab);
    let (ms_10k, commands_10k, mut store, mut projector, mut backend) =
        full_sync::<B>(&lab, 10_000, true);
    if extended {
        // A restart onto the same state: the rules are there already.
        let (ms, commands, .., again) = full_sync::<B>(&lab, 10_000, true);
        extra.push(format!(
            "full sync, 10k x 10 again (a restart onto the same state): {ms:>7.1} ms  ({commands} commands{})",
            match again.last_note() {
                note if note.is_empty() => String::new(),
                note => format!("; {note}"),
            }
        ));
    }
    settle();
    warm_up(&lab);
    let (rate_10k, direct_10k, ratio_direct_10k) = rates(&lab);
    let memory = backend.last_note();

    // One change at 10k: an endpoint goes not-ready, then ready again.
    let cluster = cluster(10_000, true);
    let mut change_ms = Vec::new();
    let mut change_commands = Vec::new();
    let mut notes = std::collections::BTreeMap::<String, usize>::new();
    endpoint_flips(
        &cluster,
        4999,
        &mut store,
        &mut projector,
        &mut backend,
        |ms, backend| {
            change_ms.push(ms);
            change_commands.push(backend.last_commands());
            assert!(!backend.last_full(), "incremental");
            *notes.entry(backend.last_note()).or_default() += 1;
        },
    );
    change_ms.sort_by(f64::total_cmp);
    change_commands.sort_unstable();

    // A Service with chains of its own (ClientIP affinity: a chain and a
    // set per endpoint, a spreading map) comes, then goes, at 10k.
    let (mut own_add, mut own_del) = (Vec::new(), Vec::new());
    for i in 0..10u8 {
        let endpoints: Vec<IpAddr> = (0..3u8)
            .map(|j| IpAddr::from([10, 200, i, j + 1]))
            .collect();
        let (name, ip) = (format!("sticky-{i}"), format!("10.100.1.{}", i + 1));
        let name = bench_service(&mut store, (&name, &ip, true), "node-1", &endpoints);
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), &mut backend)
            .expect("bench setup");
        own_add.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(backend.last_commands() > 0, "the Service was added");
        // Deleted as the API deletes it: the Service and its endpoints.
        let mut txn = store.begin();
        for ip in endpoints {
            txn.delete(&kpng_model::Key::Endpoint(name.clone(), ip));
        }
        txn.delete(&kpng_model::Key::Service(name));
        txn.commit();
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), &mut backend)
            .expect("bench setup");
        own_del.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(backend.last_commands() > 0, "the Service was deleted");
        assert!(!backend.last_full(), "incremental");
    }
    own_add.sort_by(f64::total_cmp);
    own_del.sort_by(f64::total_cmp);
    let (own_add, own_del) = (own_add[own_add.len() / 2], own_del[own_del.len() / 2]);
    let change_median = change_ms[change_ms.len() / 2];
    let commands_median = change_commands[change_commands.len() / 2];

    let notes: Vec<String> = notes
        .iter()
        .filter(|(note, _)| !note.is_empty())
        .map(|(note, n)| format!("{n}/20 {note}"))
        .collect();
    let notes = notes.join(", ");
    let [full_ref, change_ref, ratio_ref, direct_ref] = refs;
    println!(
        "kpng {} backend (goals and kube-proxy references in brackets)",
        B::NAME
    );
    println!(
        "full sync,  10 services x 10 endpoints: {small_ms:>9.1} ms  ({small_commands} commands)"
    );
    println!("full sync,  1k services x 10 endpoints: {ms_1k:>9.1} ms  ({commands_1k} commands)");
    println!(
        "full sync, 10k services x 10 endpoints: {ms_10k:>9.1} ms  ({commands_10k} commands)  [{full_ref}]"
    );
    for line in &extra {
        println!("{line}");
    }
    println!(
        "one endpoint change at 10k, median of 20: {change_median:>7.3} ms  ({commands_median} commands; {notes})  [{change_ref}]"
    );
    println!(
        "a Service with chains of its own (ClientIP affinity, 3 endpoints) added at 10k, median of 10: {own_add:>7.2} ms; deleted: {own_del:.2} ms  [<= 2 ms]"
    );
    println!("new connections/s through a ClusterIP, 10 services:  {rate_10:>7.0}");
    println!("new connections/s through a ClusterIP, 10k services: {rate_10k:>7.0}");
    println!("ratio 10k / 10: {:.3}  [{ratio_ref}]", rate_10k / rate_10);
    println!(
        "through a ClusterIP / straight to the pod, 5,000 each, alternating: 10 services {ratio_direct_10:.3}, 10k services {ratio_direct_10k:.3}  ({direct_10:.0} and {direct_10k:.0}/s straight)  [{direct_ref}]"
    );
    if !program_costs.is_empty() {
        println!(
            "the programs' own cost at 10 services, mean per run (the kernel's count, through the Service and straight alike): {}",
            program_costs.join(", ")
        );
    }
    let (rss, peak) = (
        kpng_testkit::proc_status_kib(None, "VmRSS:"),
        kpng_testkit::proc_status_kib(None, "VmHWM:"),
    );
    println!(
        "memory: this process {:.1} MiB (peak {:.1} MiB; no child process); after the 10k sync: {memory}",
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    println!(
        "{{\"backend\":\"{}\",\"full_sync_ms_1k\":{ms_1k:.1},\"full_sync_ms_10k\":{ms_10k:.1},\"change_ms_10k\":{change_median:.2},\"change_commands_10k\":{commands_median},\"own_chains_add_ms_10k\":{own_add:.2},\"own_chains_delete_ms_10k\":{own_del:.2},\"conn_rate_10\":{rate_10:.0},\"conn_rate_10k\":{rate_10k:.0},\"conn_rate_ratio\":{:.3},\"via_service_vs_direct_10\":{:.3},\"via_service_vs_direct_10k\":{:.3}}}",
        B::NAME,
        rate_10k / rate_10,
        ratio_direct_10,
        ratio_direct_10k
    );
}

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

/// 20 endpoint changes, each synced on its own: an endpoint of `cluster`
/// (a different one each pair, `stride` apart in its list) goes not
/// ready, then ready again. `each` gets each sync's time in ms and the
/// backend after it.
fn endpoint_flips<B: kpng_sink::Sink>(
    cluster: &Cluster,
    stride: usize,
    store: &mut Store,
    projector: &mut NodeProjector,
    backend: &mut B,
    mut each: impl FnMut(f64, &B),
) {
    for i in 0..20 {
        let (name, ep) = cluster.endpoints[(i / 2) * stride % cluster.endpoints.len()].clone();
        let ready = i % 2 == 1;
        let mut txn = store.begin();
        txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
        txn.commit();
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), backend)
            .expect("an endpoint change");
        each(start.elapsed().as_secs_f64() * 1e3, backend);
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

/// `roots` and every process below them now (read from `/proc`): the
/// process tree whose memory or CPU a benchmark sums.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid …`: the command may hold spaces.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut tree: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    tree
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_child_is_below_its_parent() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let tree = super::descendants(&[std::process::id()]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree.first(), Some(&std::process::id()));
        assert!(tree.contains(&child.id()), "{tree:?}");
    }
}

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

/// The balancing choices (issue #28) with real packets, for nftables and
/// then for the eBPF backend: `endpoints` endpoints (pods on another
/// node), `flows` flows (a source port each) made before and after one
/// endpoint leaves, and `rate_connections` new connections per choice,
/// alternated with random's. nftables: a pod's flows to the ClusterIPs.
/// eBPF: an outside client's to the NodePorts (the tc programs, where
/// Maglev hashes flows), and a pod's sockets for round robin. Prints the
/// share of flows moved for Maglev and random, and each choice's
/// connection rate against random.
pub fn balancing(endpoints: usize, flows: usize, rate_connections: usize) {
    use kpng_backend_ebpf::EbpfBackend;
    use kpng_backend_nft::NftBackend;
    let run = Balancing {
        endpoints,
        flows,
        rate_connections,
    };
    match crate::unavailable(NftBackend::TOOLS).or_else(NftBackend::unavailable) {
        Some(why) => println!("SKIPPED nftables: {why}"),
        None => {
            let (lab, ips) = run.lab();
            let proxy = crate::Proxy::<NftBackend>::new(&lab, &settings());
            let client = crate::scenarios::POD_CLIENT;
            run.measure(
                &lab,
                proxy,
                &ips,
                "nftables, from a pod",
                ("podc", client, Balancing::CLUSTER_IPS.map(|ip| (ip, 80))),
                &[("podc", Balancing::CLUSTER_IPS.map(|ip| (ip, 80)))],
            );
        }
    }
    match kpng_testkit::bpf::unavailable() {
        Some(why) => println!("SKIPPED eBPF: {why}"),
        None => {
            let (lab, ips) = run.lab();
            let config = crate::ebpf_config(&lab, &settings(), true);
            let Ok(backend) = EbpfBackend::attach(config) else {
                println!("SKIPPED eBPF: the programs do not attach");
                return;
            };
            let proxy = crate::Proxy::with(backend).explained_in(
                &lab,
                &settings(),
                crate::ebpf_alone(true),
            );
            let node = crate::scenarios::NODE_IP;
            let node_ports = Balancing::NODE_PORTS.map(|p| (node, p));
            run.measure(
                &lab,
                proxy,
                &ips,
                "eBPF, from outside (tc) and from a pod (sockets)",
                ("ext", crate::scenarios::EXT_IN, node_ports),
                &[
                    ("ext", node_ports),
                    ("podc", Balancing::CLUSTER_IPS.map(|ip| (ip, 80))),
                ],
            );
        }
    }
}

/// One run of [`balancing`].
struct Balancing {
    endpoints: usize,
    flows: usize,
    rate_connections: usize,
}

impl Balancing {
    /// The Services' ClusterIPs and NodePorts: Maglev, random, round robin.
    const CLUSTER_IPS: [&'static str; 3] = ["10.96.0.60", "10.96.0.61", "10.96.0.62"];
    const NODE_PORTS: [u16; 3] = [30060, 30061, 30062];

    /// A lab with a pod client, an outside client and the endpoints.
    fn lab(&self) -> (Lab, Vec<String>) {
        let mut lab = Lab::new();
        lab.upstream();
        lab.host("podc", &[crate::scenarios::POD_CLIENT], &[]);
        lab.host(
            "ext",
            &[crate::scenarios::EXT_IN],
            &[crate::scenarios::NODE_IP],
        );
        let ips: Vec<String> = (0..self.endpoints)
            .map(|i| format!("10.244.{}.{}", 100 + i / 200, 10 + i % 200))
            .collect();
        for (i, ip) in ips.iter().enumerate() {
            let name = format!("p{i}");
            lab.host(&name, &[ip], &[]);
            lab.serve(&name, ip);
        }
        (lab, ips)
    }

    /// The three Services on the endpoints `ips`.
    fn world(ips: &[String]) -> String {
        let eps: Vec<String> = ips
            .iter()
            .map(|ip| format!("{{addresses: [{ip}], nodeName: node-b}}"))
            .collect();
        let eps = format!("[{}]", eps.join(", "));
        let services: Vec<String> = ["maglev", "random", "round-robin"]
            .iter()
            .zip(Self::CLUSTER_IPS.iter().zip(Self::NODE_PORTS))
            .map(|(how, (ip, node_port))| {
                let name = &how[..2];
                crate::scenarios::service(
                    name,
                    &format!("{{type: NodePort, clusterIP: {ip}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {node_port}}}]}}"),
                    &eps,
                )
                .replace(
                    &format!("metadata: {{namespace: t, name: {name}}}"),
                    &format!("metadata: {{namespace: t, name: {name}, annotations: {{kpng.io/balancing: {how}}}}}"),
                )
            })
            .collect();
        crate::scenarios::manifest(&services)
    }

    /// Loads the Services into `proxy`; the flows of `moves` (a client,
    /// its address, the Maglev, random and round robin destinations)
    /// before and after the first endpoint leaves, and the rates of each
    /// `rates` path (client and destinations).
    fn measure<B: kpng_sink::Sink>(
        &self,
        lab: &Lab,
        mut proxy: crate::Proxy<B>,
        ips: &[String],
        what: &str,
        moves: (&str, &str, [(&str, u16); 3]),
        rates: &[(&str, [(&str, u16); 3])],
    ) {
        proxy.load(&Self::world(ips)).expect("bench setup");
        settle();
        let (client, address, dests) = moves;
        // Below the ephemeral ports (32768 on): no other connection of the
        // run holds one of them.
        let ports: Vec<u16> = (0..self.flows).map(|i| 20_000 + i as u16).collect();
        let flows = |(host, port): (&str, u16)| {
            crate::reached(&lab.connect_from_ports(client, host, port, &ports))
        };
        let before: Vec<Vec<String>> = dests[..2].iter().map(|d| flows(*d)).collect();
        // The new-connection rate of each choice against random, alternated.
        let ratios: Vec<(String, f64)> = rates
            .iter()
            .flat_map(|(from, d)| {
                [(d[0], "maglev"), (d[2], "round robin")].map(|((host, port), how)| {
                    let ((a, _), (b, _)) =
                        lab.paired_rates(from, (host, port), d[1], self.rate_connections);
                    (
                        format!("{how} from {from}"),
                        if b > 0.0 { a / b } else { 0.0 },
                    )
                })
            })
            .collect();
        let rest: Vec<String> = ips.iter().skip(1).cloned().collect();
        proxy.load(&Self::world(&rest)).expect("bench setup");
        settle();
        let after: Vec<Vec<String>> = dests[..2].iter().map(|d| flows(*d)).collect();
        let moved = |b: &[String], a: &[String]| {
            let n = b.iter().zip(a).filter(|(b, a)| b != a).count();
            100.0 * n as f64 / b.len().max(1) as f64
        };
        let answered = |v: &[String]| v.iter().filter(|e| ips.contains(e)).count();
        let (endpoints, flows) = (self.endpoints, self.flows);
        println!(
            "balancing, {what}: {endpoints} endpoints, {flows} flows (a source port each) from {client} ({address}), one endpoint leaving:"
        );
        println!(
            "  share of flows moved: maglev {:.1} %  [goal <= 15 %; at best {:.1} %], random {:.1} %  (answered {}/{flows} and {}/{flows})",
            moved(&before[0], &after[0]),
            100.0 / endpoints as f64,
            moved(&before[1], &after[1]),
            answered(&before[0]),
            answered(&before[1]),
        );
        let text: Vec<String> = ratios
            .iter()
            .map(|(how, r)| format!("{how} {r:.3}"))
            .collect();
        println!(
            "  new connections/s against random, alternated ({} each): {}",
            self.rate_connections,
            text.join(", ")
        );
    }
}

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

/// Holds connected UDP sockets in its host until a line on stdin: one to
/// each address of `argv[1]` (comma-separated), port 53; prints `ready N`.
const UDP_HOLDER: &str = r#"
import socket, sys
held = []
for ip in sys.argv[1].split(","):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((ip, 53))
    held.append(s)
print("ready", len(held), flush=True)
sys.stdin.readline()
"#;

/// `udp-sockets`: what ending the connected UDP sockets sent to a removed
/// endpoint costs the eBPF backend at 10k Services × 10 endpoints (every
/// third Service with a UDP port), on and off alternating, `rounds` each:
/// a client in the lab's pod holds 1,100 UDP sockets connected through
/// Services (one to each of 1,000 UDP Services, ten more to each of the
/// ten whose endpoints are removed), and `namespaces - 1` more network
/// namespaces of the cgroup hold 10 each (to the ten); each round then
/// takes one endpoint of a UDP Service away (not ready) and gives it
/// back, ten times: the median time of the removing syncs, and the
/// sockets they ended.
pub fn udp_socket_ending(rounds: usize, namespaces: usize) {
    use std::io::{BufRead, Write};
    if let Some(why) = <crate::EbpfOnly as LabBackend>::unavailable() {
        println!("SKIPPED: {why}");
        return;
    }
    let mut lab = Lab::new();
    lab.host("podc", &["10.244.1.99"], &[]);
    // Bare namespaces (a route to anywhere by the loopback, enough to
    // connect a UDP socket).
    let extra: Vec<String> = (1..namespaces.max(1))
        .map(|i| {
            let ns = lab.scratch(&format!("p{i}"));
            let addr = format!("10.244.200.{i}/32");
            for args in [
                ["-n", &ns, "addr", "add", &addr, "dev", "lo"],
                ["-n", &ns, "route", "add", "default", "dev", "lo"],
            ] {
                let ok = std::process::Command::new("ip")
                    .args(args)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "ip {args:?}");
            }
            ns
        })
        .collect();
    let mut cluster = Cluster::synthetic(ClusterShape {
        services: 10_000,
        endpoints: 100_000,
        nodes: 100,
        zones: 3,
    });
    for svc in &mut cluster.services {
        svc.r#type = kpng_model::v1::ServiceType::ClusterIp as i32;
        for port in &mut svc.ports {
            port.node_port = 0;
        }
        svc.load_balancer_ips = None;
    }
    // Service i: ClusterIP 10.96.0.0 + i + 1, UDP 53 when i % 3 == 0;
    // endpoint n is Service n % 10,000's.
    let ip = |i: usize| {
        let n = u32::try_from(i + 1).unwrap_or(0);
        std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 96, 0, 0)) + n).to_string()
    };
    let measured: Vec<usize> = (0..10).map(|k| k * 3).collect();
    let mut targets: Vec<String> = (0..1000).map(|k| ip(k * 3)).collect();
    for &s in &measured {
        targets.extend(std::iter::repeat_n(ip(s), 10));
    }
    let targets = targets.join(",");
    let few: Vec<String> = measured.iter().map(|&s| ip(s)).collect();
    let few = few.join(",");
    let mut runs: [Vec<(f64, u64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        let on = round % 2 == 1;
        <crate::EbpfOnly as LabBackend>::clear(&lab);
        let mut store = store_of(&cluster);
        let config = crate::ebpf_config(&lab, &settings(), false).end_udp_sockets(on);
        let mut backend = crate::EbpfOnly(
            kpng_backend_ebpf::EbpfBackend::attach(config).expect("the eBPF programs attach"),
        );
        let (mut projector, _) = timed_sync(&store, &mut backend);
        let mut holder = lab
            .client("podc", &["python3", "-u", "-c", UDP_HOLDER, &targets])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the socket holder");
        let mut out = std::io::BufReader::new(holder.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("ready");
        assert!(line.starts_with("ready"), "{line}");
        let (cgroup, _) = lab.bpf_env();
        let mut others: Vec<std::process::Child> = extra
            .iter()
            .map(|ns| {
                let args = ["python3", "-u", "-c", UDP_HOLDER, &few];
                let mut child = kpng_testkit::bpf::in_cgroup_and_netns(&cgroup, ns, &args)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("a socket holder");
                let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
                let mut line = String::new();
                out.read_line(&mut line).expect("ready");
                assert!(line.starts_with("ready"), "{ns}: {line}");
                child
            })
            .collect();
        let mut removing = Vec::new();
        let mut ended = 0;
        for &s in &measured {
            for ready in [false, true] {
                let (name, ep) = cluster.endpoints[s].clone();
                let mut txn = store.begin();
                txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
                txn.commit();
                let start = Instant::now();
                projector
                    .sync_into(&store.snapshot(), &mut backend)
                    .expect("an endpoint change");
                let ms = start.elapsed().as_secs_f64() * 1e3;
                assert!(!backend.0.last_sync().replaced, "incremental");
                if !ready {
                    removing.push(ms);
                    ended += backend.0.last_sync().udp_sockets_ended;
                }
            }
        }
        for child in std::iter::once(&mut holder).chain(others.iter_mut()) {
            let _ = child.stdin.take().map(|mut i| i.write_all(b"\n"));
            let _ = child.wait();
        }
        removing.sort_by(f64::total_cmp);
        let median = removing[removing.len() / 2];
        eprintln!(
            "  ending {}: removing sync median {median:.3} ms, {ended} sockets ended",
            if on { "on " } else { "off" }
        );
        runs[usize::from(on)].push((median, ended));
        drop((backend, projector));
    }
    let median = |on: bool| {
        let mut v: Vec<f64> = runs[usize::from(on)].iter().map(|r| r.0).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ended: Vec<u64> = runs[1].iter().map(|r| r.1).collect();
    println!(
        "kpng ebpf backend, ending connected UDP sockets to removed endpoints, 10k services x 10 endpoints, 1,100 connected UDP sockets held in a pod and 10 in each of {} more network namespaces of the cgroup, median of {rounds} rounds each (10 removals a round), alternating:",
        extra.len()
    );
    println!(
        "  one endpoint of a UDP Service removed: {:.3} ms with the sockets ended, {:.3} ms without; sockets ended per round: {ended:?}",
        median(true),
        median(false)
    );
}
