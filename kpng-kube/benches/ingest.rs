//! Replays a synthetic cluster trace through the real ingest path: JSON
//! bytes as the apiserver sends them, serde decode into k8s-openapi types,
//! translation, and the store.
//!
//! ```text
//! cargo bench -p kpng-kube --bench ingest -- [--services 1000] [--pods 1500] [--nodes 100] [--minutes 30] [--seed 1]
//!     [--slice-noops-per-minute N] [--seed-style]
//! ```
//!
//! `--seed-style` replays as many events as the measurements of the KPNG
//! proposal ("seed"): 1k Services, 1.5k pods, 30 minutes, 130,941 events
//! (Go KPNG: 5.2 s of CPU). The same true changes as the default trace;
//! the extra events are EndpointSlice updates that change nothing a proxy
//! reads (the costliest no-op to decode), ~3,500 a minute.
//!
//! The generator knows which events are true ENLS changes; the replay
//! checks that exactly those made a revision (0 spurious, 0 missed). It
//! prints `stats:` lines per simulated minute in the format of the original
//! KPNG measurements, then a one-line JSON summary.
//!
//! `--kpng PATH[,PATH…] [--runs N]` measures the command instead: a test
//! apiserver (this bench in a process of its own) serves the trace's
//! initial objects as lists and its events on the watches, all at once,
//! and `PATH kube --node node-0 to-nft --dry-run` follows them; once it
//! has been idle for 3 s it is stopped, and its peak RSS (`wait4`) and CPU
//! are printed. With several binaries the runs alternate (A, B, A, B, …).
//!
//! ```text
//! cargo bench -p kpng-kube --bench ingest -- --seed-style --kpng target/release/kpng --runs 3
//! ```
#![allow(unsafe_code, missing_docs, clippy::unwrap_used)]

use std::time::Instant;

use kube::runtime::watcher::Event as WatchEvent;

use kpng_kube::objects::{EndpointSlice, Node, Service};
use kpng_kube::{Ingest, IngestConfig};
use kpng_store::Store;
use kpng_testkit::CountingAllocator;
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// CPU time of this process (the replay is single-threaded), in ns.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// xorshift64*: a small deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Obj {
    Service,
    Slice,
    Node,
}

struct Event {
    obj: Obj,
    delete: bool,
    json: Vec<u8>,
    /// Whether this event changes the ENLS.
    true_change: bool,
    second: u64,
}

struct Pod {
    ip: u32,
    node: usize,
    ready: bool,
}

struct Svc {
    name: String,
    ns: String,
    ip: u32,
    pods: Vec<Pod>,
    alive: bool,
    annotation: u64,
}

struct Gen {
    rng: Rng,
    rv: u64,
    nodes: usize,
    next_pod_ip: u32,
    services: Vec<Svc>,
}

fn ip(n: u32) -> String {
    std::net::Ipv4Addr::from(n).to_string()
}

impl Gen {
    fn rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn node_json(&mut self, i: usize, second: u64) -> Vec<u8> {
        let rv = self.rv();
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{i}"), "resourceVersion": rv,
                "labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % 3), "kubernetes.io/hostname": format!("node-{i}")}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip(0xc0a8_0000 + i as u32 + 1)}, {"type": "Hostname", "address": format!("node-{i}")}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": format!("2026-11-22T00:{:02}:{:02}Z", second / 60 % 60, second % 60),
                    "lastTransitionTime": "2026-11-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    fn service_json(&mut self, s: usize) -> Vec<u8> {
        let rv = self.rv();
        let svc = &self.services[s];
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": svc.ns, "name": svc.name, "resourceVersion": rv,
                "labels": {"app": svc.name},
                "annotations": {"example.com/revision": svc.annotation.to_string()},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1"}]},
            "spec": {"type": "ClusterIP", "clusterIP": ip(svc.ip), "clusterIPs": [ip(svc.ip)],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
                          {"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": 9090}]}
        }))
        .unwrap()
    }

    fn slice_json(&mut self, s: usize) -> Vec<u8> {
        let rv = self.rv();
        let svc = &self.services[s];
        let endpoints: Vec<Value> = svc
            .pods
            .iter()
            .map(|p| {
                json!({"addresses": [ip(p.ip)],
                    "conditions": {"ready": p.ready, "serving": p.ready, "terminating": false},
                    "nodeName": format!("node-{}", p.node), "zone": format!("zone-{}", p.node % 3),
                    "targetRef": {"kind": "Pod", "namespace": svc.ns, "name": format!("{}-{}", svc.name, p.ip), "uid": format!("uid-{}-{rv}", p.ip)}})
            })
            .collect();
        serde_json::to_vec(&json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": svc.ns, "name": format!("{}-abcde", svc.name), "resourceVersion": rv,
                "labels": {"kubernetes.io/service-name": svc.name, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090, "protocol": "TCP"}]
        }))
        .unwrap()
    }

    fn new_pod(&mut self) -> Pod {
        self.next_pod_ip += 1;
        Pod {
            ip: self.next_pod_ip,
            node: self.rng.below(self.nodes),
            ready: true,
        }
    }
}

struct Args {
    /// EndpointSlice updates a minute that change nothing a proxy reads.
    slice_noops_per_minute: Option<f64>,
    repeat: usize,
    services: usize,
    pods: usize,
    nodes: usize,
    minutes: u64,
    seed: u64,
}

fn parse_args() -> Args {
    let mut args = Args {
        slice_noops_per_minute: None,
        repeat: 5,
        services: 1000,
        pods: 1500,
        nodes: 100,
        minutes: 30,
        seed: 1,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        if ["--serve", "--kpng", "--runs"].contains(&flag.as_str()) {
            it.next();
            continue;
        }
        if flag == "--seed-style" {
            (args.services, args.pods, args.nodes, args.minutes) = (1000, 1500, 100, 30);
            args.slice_noops_per_minute = Some(3_580.0);
            continue;
        }
        let value = it.next().unwrap_or_default();
        let n: u64 = value
            .parse()
            .unwrap_or_else(|_| panic!("{flag} needs a number, got {value:?}"));
        match flag.as_str() {
            "--services" => args.services = n as usize,
            "--pods" => args.pods = n as usize,
            "--nodes" => args.nodes = n as usize,
            "--minutes" => args.minutes = n,
            "--seed" => args.seed = n,
            "--repeat" => args.repeat = (n as usize).max(1),
            "--slice-noops-per-minute" => args.slice_noops_per_minute = Some(n as f64),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// The initial objects (as list items) and the churn events.
fn generate(args: &Args) -> (Vec<Event>, Vec<Event>) {
    let mut g = Gen {
        rng: Rng(args.seed.max(1) * 0x9e37_79b9_7f4a_7c15),
        rv: 0,
        nodes: args.nodes.max(1),
        next_pod_ip: 0x0af4_0000,
        services: Vec::new(),
    };
    for s in 0..args.services {
        g.services.push(Svc {
            name: format!("svc-{s}"),
            ns: format!("ns-{}", s % 20),
            ip: 0x0a60_0000 + s as u32 + 1,
            pods: Vec::new(),
            alive: true,
            annotation: 0,
        });
    }
    for p in 0..args.pods {
        let pod = g.new_pod();
        let s = p % args.services.max(1);
        g.services[s].pods.push(pod);
    }
    let mut initial = Vec::new();
    for i in 0..g.nodes {
        let json = g.node_json(i, 0);
        initial.push(Event {
            obj: Obj::Node,
            delete: false,
            json,
            true_change: true,
            second: 0,
        });
    }
    for s in 0..g.services.len() {
        let json = g.service_json(s);
        initial.push(Event {
            obj: Obj::Service,
            delete: false,
            json,
            true_change: true,
            second: 0,
        });
        let json = g.slice_json(s);
        initial.push(Event {
            obj: Obj::Slice,
            delete: false,
            json,
            true_change: true,
            second: 0,
        });
    }

    let mut events = Vec::new();
    let seconds = args.minutes * 60;
    let per_second = |per_minute: f64| per_minute / 60.0;
    let svc_count = args.services.max(1) as f64;
    let pod_count = args.pods.max(1) as f64;
    let mut rolling: Option<(usize, usize)> = None; // (service, pods left to replace)
    for second in 1..=seconds {
        let push = |events: &mut Vec<Event>, obj, delete, json, true_change| {
            events.push(Event {
                obj,
                delete,
                json,
                true_change,
                second,
            })
        };
        // Node status heartbeats: every 10 s per node. No-op.
        for i in (0..g.nodes).filter(|i| (*i as u64) % 10 == second % 10) {
            let json = g.node_json(i, second);
            push(&mut events, Obj::Node, false, json, false);
        }
        // Leader-election-style annotation updates on 3 objects every 2 s.
        if second % 2 == 0 {
            for s in 0..3.min(g.services.len()) {
                if g.services[s].alive {
                    g.services[s].annotation += 1;
                    let json = g.service_json(s);
                    push(&mut events, Obj::Service, false, json, false);
                }
            }
        }
        // Service metadata-only updates: 2 % of Services a minute.
        if g.rng.chance(per_second(svc_count * 0.02)) {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive {
                g.services[s].annotation += 1;
                let json = g.service_json(s);
                push(&mut events, Obj::Service, false, json, false);
            }
        }
        // Slice metadata-only updates (targetRef uid, resourceVersion):
        // 5 % of slices a minute unless told otherwise.
        let slice_noops = per_second(args.slice_noops_per_minute.unwrap_or(svc_count * 0.05));
        let whole = slice_noops.floor();
        let extra = usize::from(g.rng.chance(slice_noops - whole));
        for _ in 0..whole as usize + extra {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive {
                let json = g.slice_json(s);
                push(&mut events, Obj::Slice, false, json, false);
            }
        }
        // Pods turning not-ready or ready again: 0.3 % of pods a minute.
        if g.rng.chance(per_second(pod_count * 0.003)) {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive && !g.services[s].pods.is_empty() {
                let p = g.rng.below(g.services[s].pods.len());
                g.services[s].pods[p].ready = !g.services[s].pods[p].ready;
                let json = g.slice_json(s);
                push(&mut events, Obj::Slice, false, json, true);
            }
        }
        // Scale up or down: one a minute.
        if second % 60 == 30 {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive {
                if g.rng.chance(0.5) || g.services[s].pods.is_empty() {
                    let pod = g.new_pod();
                    g.services[s].pods.push(pod);
                } else {
                    g.services[s].pods.pop();
                }
                let json = g.slice_json(s);
                push(&mut events, Obj::Slice, false, json, true);
            }
        }
        // A rolling update every 5 minutes: one pod replaced every 10 s.
        if second % 300 == 0 && rolling.is_none() {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive && !g.services[s].pods.is_empty() {
                rolling = Some((s, g.services[s].pods.len()));
            }
        }
        if second % 10 == 5
            && let Some((s, left)) = rolling
        {
            let pod = g.new_pod();
            g.services[s].pods.remove(0);
            g.services[s].pods.push(pod);
            let json = g.slice_json(s);
            push(&mut events, Obj::Slice, false, json, true);
            rolling = (left > 1).then_some((s, left - 1));
        }
        // Service creation and deletion: one each every 5 minutes.
        if second % 300 == 150 {
            let s = g.services.len();
            let ns = format!("ns-{}", s % 20);
            g.services.push(Svc {
                name: format!("svc-{s}"),
                ns,
                ip: 0x0a60_0000 + s as u32 + 1,
                pods: Vec::new(),
                alive: true,
                annotation: 0,
            });
            for _ in 0..2 {
                let pod = g.new_pod();
                g.services[s].pods.push(pod);
            }
            let json = g.service_json(s);
            push(&mut events, Obj::Service, false, json, true);
            let json = g.slice_json(s);
            push(&mut events, Obj::Slice, false, json, true);
        }
        if second % 300 == 200 {
            let s = g.rng.below(g.services.len());
            if g.services[s].alive && s >= 3 {
                g.services[s].alive = false;
                let json = g.slice_json(s);
                push(
                    &mut events,
                    Obj::Slice,
                    true,
                    json,
                    !g.services[s].pods.is_empty(),
                );
                let json = g.service_json(s);
                push(&mut events, Obj::Service, true, json, true);
            }
        }
    }
    (initial, events)
}

/// Decodes and applies one event; returns (decode ns, ingest ns, changed).
fn replay(ingest: &mut Ingest, e: &Event, relist: bool) -> (u64, u64, bool) {
    let t0 = Instant::now();
    macro_rules! step {
        ($ty:ty) => {{
            let obj: $ty = serde_json::from_slice(&e.json).unwrap();
            let event = if relist {
                WatchEvent::InitApply(obj)
            } else if e.delete {
                WatchEvent::Delete(obj)
            } else {
                WatchEvent::Apply(obj)
            };
            let t1 = Instant::now();
            let changed = ingest.apply_watcher_event(&event).is_some() && !relist;
            let t2 = Instant::now();
            drop(event);
            (
                (t1 - t0).as_nanos() as u64,
                (t2 - t1).as_nanos() as u64,
                changed,
            )
        }};
    }
    match e.obj {
        Obj::Service => step!(Service),
        Obj::Slice => step!(EndpointSlice),
        Obj::Node => step!(Node),
    }
}

fn main() {
    let raw: Vec<String> = std::env::args().collect();
    let value = |name: &str| raw.iter().skip_while(|a| *a != name).nth(1).cloned();
    if let Some(kubeconfig) = value("--serve") {
        return serve(&parse_args(), &kubeconfig);
    }
    if let Some(binaries) = value("--kpng") {
        let runs = value("--runs").and_then(|n| n.parse().ok()).unwrap_or(1);
        return measure_kpng(&binaries, runs);
    }
    let args = parse_args();
    let (initial, events) = generate(&args);
    let expected_initial = [Obj::Node, Obj::Service, Obj::Slice]
        .iter()
        .filter(|k| initial.iter().any(|e| e.obj == **k))
        .count() as u64;
    let expected_churn = events.iter().filter(|e| e.true_change).count() as u64;

    // The initial sync, `repeat` times from scratch; the median run's
    // figures are reported and the last run's state goes on to the churn.
    let mut runs = Vec::new();
    let mut kept = None;
    let mut index_heap = 0isize;
    for _ in 0..args.repeat {
        drop(kept.take());
        let heap_before = CountingAllocator::live_bytes();
        let mut ingest = Ingest::new(Store::new(), IngestConfig::default());

        // Initial sync: a list of each kind, as the watchers' first InitDone.
        let cpu0 = cpu_ns();
        let wall0 = Instant::now();
        let mut init_decode = 0;
        let mut init_translate = 0;
        let mut init_finish = 0;
        for (kind, begin, finish) in [
            (
                Obj::Node,
                (|i: &mut Ingest| {
                    i.apply_watcher_event(&WatchEvent::<Node>::Init);
                }) as fn(&mut Ingest),
                (|i: &mut Ingest| i.apply_watcher_event(&WatchEvent::<Node>::InitDone))
                    as fn(&mut Ingest) -> Option<u64>,
            ),
            (
                Obj::Service,
                |i: &mut Ingest| {
                    i.apply_watcher_event(&WatchEvent::<Service>::Init);
                },
                |i: &mut Ingest| i.apply_watcher_event(&WatchEvent::<Service>::InitDone),
            ),
            (
                Obj::Slice,
                |i: &mut Ingest| {
                    i.apply_watcher_event(&WatchEvent::<EndpointSlice>::Init);
                },
                |i: &mut Ingest| i.apply_watcher_event(&WatchEvent::<EndpointSlice>::InitDone),
            ),
        ] {
            begin(&mut ingest);
            for e in initial.iter().filter(|e| e.obj == kind) {
                let (d, t, _) = replay(&mut ingest, e, true);
                init_decode += d;
                init_translate += t;
            }
            let t = Instant::now();
            finish(&mut ingest);
            init_finish += t.elapsed().as_nanos() as u64;
        }
        let initial_cpu = cpu_ns() - cpu0;
        let initial_wall = wall0.elapsed();
        let heap_bytes = CountingAllocator::live_bytes() - heap_before;
        runs.push((
            initial_cpu,
            initial_wall,
            init_decode,
            init_translate,
            init_finish,
            heap_bytes,
        ));
        if runs.len() == 1 && args.repeat > 1 {
            // Split the heap: dropping the ingest while holding a snapshot
            // frees exactly what the ingest keeps beside the store (its
            // slice index); the rest is the store's.
            let snapshot = ingest.reader().snapshot();
            let live = CountingAllocator::live_bytes();
            drop(ingest);
            index_heap = live - CountingAllocator::live_bytes();
            drop(snapshot);
            continue;
        }
        kept = Some((ingest, heap_before));
    }
    let (mut ingest, heap_before) = kept.unwrap();
    // The first run also pays for fresh pages from the kernel.
    let first_run_cpu = runs[0].0;
    runs.sort_by_key(|r| r.0);
    let (initial_cpu, initial_wall, init_decode, init_translate, init_finish, heap_bytes) =
        runs[runs.len() / 2];
    let initial_revs = ingest.store().revision();
    let initial_events = initial.len() as u64;
    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    println!(
        "# {} services, {} pods, {} nodes, {} min of churn, seed {}",
        args.services, args.pods, args.nodes, args.minutes, args.seed
    );
    println!("# stats: time events rev cpu mem revs/events");
    println!(
        "stats: {:>5}s {:>8} {:>6} {:>8.1}ms {:>6.2}MiB {:.4}",
        0,
        initial_events,
        initial_revs,
        initial_cpu as f64 / 1e6,
        mib(heap_bytes),
        initial_revs as f64 / initial_events as f64
    );

    let (mut decode_ns, mut ingest_ns) = (0u64, 0u64);
    let mut noop_ingest_ns = 0u64;
    let (mut spurious, mut missed) = (0u64, 0u64);
    let churn_cpu0 = cpu_ns();
    // The stats lines count CPU from the start of the (kept) initial sync.
    let cpu0 = churn_cpu0 - initial_cpu;
    let mut minute = 1;
    for (i, e) in events.iter().enumerate() {
        let (d, n, changed) = replay(&mut ingest, e, false);
        decode_ns += d;
        ingest_ns += n;
        if !e.true_change {
            noop_ingest_ns += n;
        }
        match (e.true_change, changed) {
            (true, false) => missed += 1,
            (false, true) => spurious += 1,
            _ => {}
        }
        let last = i + 1 == events.len();
        if last || events[i + 1].second > minute * 60 {
            let done = initial_events + i as u64 + 1;
            let revs = ingest.store().revision();
            println!(
                "stats: {:>5}s {:>8} {:>6} {:>8.1}ms {:>6.2}MiB {:.4}",
                minute * 60,
                done,
                revs,
                (cpu_ns() - cpu0) as f64 / 1e6,
                mib(CountingAllocator::live_bytes() - heap_before),
                revs as f64 / done as f64
            );
            minute += 1;
        }
    }
    let churn_cpu = cpu_ns() - churn_cpu0;
    let total_events = initial_events + events.len() as u64;
    let revs = ingest.store().revision();
    let expected_revs = expected_initial + expected_churn;
    let noop_events = events.iter().filter(|e| !e.true_change).count().max(1) as f64;
    let n = events.len().max(1) as f64;
    println!(
        "{{\"services\":{},\"pods\":{},\"nodes\":{},\"minutes\":{},\"events\":{total_events},\"revs\":{revs},\"expected_revs\":{expected_revs},\"spurious\":{spurious},\"missed\":{missed},\"cpu_ms\":{:.1},\"initial_sync_cpu_ms\":{:.1},\"initial_sync_cpu_ms_first_run\":{:.1},\"initial_sync_wall_ms\":{:.1},\"initial_sync_decode_ms\":{:.1},\"initial_sync_translate_ms\":{:.1},\"initial_sync_apply_ms\":{:.1},\"heap_bytes\":{heap_bytes},\"store_heap_bytes\":{},\"index_heap_bytes\":{index_heap},\"ns_per_event\":{:.0},\"ns_per_event_excluding_decode\":{:.0},\"noop_events\":{},\"ns_per_noop_event_excluding_decode\":{:.0}}}",
        args.services,
        args.pods,
        args.nodes,
        args.minutes,
        (initial_cpu + churn_cpu) as f64 / 1e6,
        initial_cpu as f64 / 1e6,
        first_run_cpu as f64 / 1e6,
        initial_wall.as_secs_f64() * 1e3,
        init_decode as f64 / 1e6,
        init_translate as f64 / 1e6,
        init_finish as f64 / 1e6,
        heap_bytes - index_heap,
        (decode_ns + ingest_ns) as f64 / n,
        ingest_ns as f64 / n,
        noop_events as u64,
        noop_ingest_ns as f64 / noop_events,
    );
    if spurious != 0 || missed != 0 || revs != expected_revs {
        eprintln!(
            "MISMATCH: {spurious} spurious, {missed} missed, {revs} revisions for {expected_revs} expected"
        );
        std::process::exit(1);
    }
}

/// The test apiserver for `--kpng`, in a process of its own (a child's
/// peak RSS as `wait4` reports it includes the address space it was
/// spawned from, so the measuring parent must stay small): the trace's
/// initial objects as lists, its events on the first watch of each kind.
fn serve(args: &Args, kubeconfig: &str) {
    use kpng_testkit::apiserver::{ApiServer, Reply, Resource, Script};
    let (initial, events) = generate(args);
    let value = |e: &Event| serde_json::from_slice::<Value>(&e.json).unwrap();
    let mut script = Script::default();
    for (obj, resource) in [
        (Obj::Service, Resource::Services),
        (Obj::Slice, Resource::EndpointSlices),
        (Obj::Node, Resource::Nodes),
    ] {
        let items = initial.iter().filter(|e| e.obj == obj).map(value).collect();
        script.push(resource, false, Reply::List("1".into(), items));
        let watch = events
            .iter()
            .filter(|e| e.obj == obj)
            .map(|e| {
                let kind = if e.delete { "DELETED" } else { "MODIFIED" };
                json!({"type": kind, "object": value(e)})
            })
            .collect();
        script.push(resource, true, Reply::Watch(watch));
    }
    let count = initial.len() + events.len();
    drop((initial, events));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ApiServer::start(script));
    std::fs::write(kubeconfig, server.kubeconfig()).unwrap();
    println!("ready {count}");
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
fn ticks_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime: fields 14 and 15, 12 and 13 after the name.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Runs each binary in `binaries` (comma-separated) `runs` times,
/// alternating, against a fresh test apiserver serving the trace.
fn measure_kpng(binaries: &str, runs: usize) {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let passed: Vec<String> = {
        let mut out = Vec::new();
        let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(a) = it.next() {
            if a == "--kpng" || a == "--runs" {
                it.next();
            } else {
                out.push(a);
            }
        }
        out
    };
    let dir = std::env::temp_dir().join(format!("kpng-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    for run in 0..runs {
        for binary in binaries.split(',') {
            let mut server = Command::new(std::env::current_exe().unwrap())
                .args(&passed)
                .arg("--serve")
                .arg(&kubeconfig)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
            let ready = lines.next().unwrap().unwrap();
            let events = ready.strip_prefix("ready ").unwrap_or("?").to_owned();
            let start = Instant::now();
            let child = Command::new(binary)
                .args(["kube", "--kubeconfig"])
                .arg(&kubeconfig)
                .args(["--node", "node-0", "to-nft", "--dry-run"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let pid = child.id();
            let (mut last, mut idle) = (0, 0);
            let mut busy_until = start.elapsed();
            while idle < 12 {
                std::thread::sleep(std::time::Duration::from_millis(250));
                let now = ticks_of(pid);
                if now == last {
                    idle += 1;
                } else {
                    (last, idle) = (now, 0);
                    busy_until = start.elapsed();
                }
            }
            // SAFETY: `pid` is our child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: an all-zero rusage is valid; wait4 fills it.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointers; `pid` is our child.
            let waited = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
            assert_eq!(waited, pid as libc::pid_t, "wait4");
            std::mem::forget(child);
            drop(server.stdin.take());
            server.wait().unwrap();
            let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            let peak_mib = usage.ru_maxrss as f64 / 1024.0;
            println!(
                "run {run}: {binary}: {events} events, peak RSS {peak_mib:.1} MiB, CPU {:.2} s (user {:.2}), busy {:.2} s",
                cpu(usage.ru_utime) + cpu(usage.ru_stime),
                cpu(usage.ru_utime),
                busy_until.as_secs_f64()
            );
            println!(
                "{{\"binary\":\"{binary}\",\"run\":{run},\"peak_rss_mib\":{peak_mib:.1},\"cpu_s\":{:.2}}}",
                cpu(usage.ru_utime) + cpu(usage.ru_stime)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
