//! What the UDP conntrack cleanup costs a node per change that removes a
//! UDP endpoint, by the size of the conntrack table, for the walk of the
//! table and for the nft backend's record of UDP flows, side by side in
//! one run (as root):
//!
//! ```text
//! cargo bench -p kpng-lab --bench conntrack [-- SIZES]
//! ```
//!
//! `SIZES` (default `0,10000,100000`): the entries made in the node's
//! namespace (UDP flows between addresses no Service has, each made by
//! `IPCTNL_MSG_CT_NEW`, living 10 minutes), and as many elements in the
//! record (the worst case: every flow in the table translated by the
//! backend and recorded). `KPNG_BENCH_ROUNDS` (default 20): changes per
//! way and size, alternating. Each change is one sync of a cleaner on the
//! round that takes e2 from a UDP Service (no flow goes to it: the cost of
//! finding none); the CPU is the process's (`getrusage(RUSAGE_SELF)`, user
//! and system: the kernel's walk runs in the process's `recvmsg`), the
//! median per change.
//!
//! The kernel has one conntrack hash table for every namespace
//! (`nf_conntrack_buckets`, read-only outside the first namespace), and a
//! dump walks all of its buckets and every entry in them, skipping other
//! namespaces' entries: the walk's cost is the machine's table, whatever
//! namespace asks. The bench prints the buckets and the machine's entries.
#![allow(missing_docs)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_conntrack::{Cleanup, ConntrackCleaner};
use kpng_model::EndpointInfo;
use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{IpSet, Protocol, Service, ServicePort};
use kpng_model::view::{EndpointView, NodeView, ServiceView};
use kpng_netfilter::conntrack::{Flow, FlowRecord, Tuple, UDP};
use kpng_netfilter::nft::{Element, Socket, Table, TableFamily, Transaction};
use kpng_sink::{Round, Sink};

/// The DNS Service on 10.96.0.120:53/UDP with `endpoints` on 5353.
fn view(endpoints: &[&str]) -> NodeView {
    let svc = Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "kube-system".into(),
            name: "dns".into(),
            cluster_ips: Some(IpSet::parse_addrs("clusterIPs", ["10.96.0.120"]).expect("ip")),
            ports: vec![ServicePort {
                name: "dns".into(),
                protocol: Protocol::Udp as i32,
                port: 53,
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("valid"),
    );
    let ports = PortList::new([PortInfo::new("dns", Protocol::Udp, 5353)]);
    let endpoints = endpoints
        .iter()
        .map(|e| {
            let ip = e.parse().expect("ip");
            EndpointView::at(EndpointInfo::builder(ip).ports(ports.clone()).build(), ip)
                .expect("its address")
                .with_cluster(true)
        })
        .collect();
    let mut view = NodeView {
        revision: 1,
        ..Default::default()
    };
    view.services.insert(
        svc.service_name(),
        Arc::new(ServiceView {
            service: svc,
            endpoints,
        }),
    );
    view
}

/// Flow `i` of the filler: 10.1.x.y:(1024 + i % 50000) → 10.2.x.y:9000,
/// answered by 10.3.x.y (no Service's).
fn filler(i: u32) -> Flow {
    let at = |net: u8| IpAddr::V4(Ipv4Addr::new(10, net, (i >> 8) as u8, i as u8));
    let port = 1024 + (i % 50_000) as u16;
    Flow {
        protocol: UDP,
        original: Tuple {
            src: at(1),
            dst: at(2),
            src_port: port,
            dst_port: 9000,
        },
        reply: Tuple {
            src: at(3),
            dst: at(1),
            src_port: 9000,
            dst_port: port,
        },
        zone: 0,
    }
}

/// The process's CPU time so far (user and system), in ms.
fn process_cpu_ms() -> f64 {
    // SAFETY: getrusage fills the struct it is given, nothing else.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn sysctl_in(ns: Option<&str>, name: &str) -> String {
    let path = format!("/proc/sys/net/netfilter/{name}");
    match ns {
        None => std::fs::read_to_string(path).unwrap_or_default(),
        Some(ns) => {
            let out = std::process::Command::new("ip")
                .args(["netns", "exec", ns, "cat", &path])
                .output()
                .expect("ip");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    }
    .trim()
    .to_owned()
}

fn main() {
    // SAFETY: geteuid reads the process's effective user id, nothing else.
    #[allow(unsafe_code)]
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("SKIPPED: the conntrack bench needs root");
        return;
    }
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "0,10000,100000".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let rounds: usize = std::env::var("KPNG_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let lab = kpng_lab::scenarios::lab();
    let node = lab.ns("node");
    let path = std::path::Path::new("/run/netns").join(&node);
    // Short UDP timeouts, so that a record with a short timeout is
    // trusted soon after it is made.
    let record_timeout = Duration::from_secs(3);
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &node, "sysctl", "-qw"])
        .args([
            "net.netfilter.nf_conntrack_udp_timeout=3",
            "net.netfilter.nf_conntrack_udp_timeout_stream=3",
        ])
        .status()
        .expect("sysctl");
    assert!(status.success());

    let mut backend = NftBackend::new(
        NftConfig::new(kpng_sink::ProxyConfig::default())
            .in_netns(&node)
            .udp_flows(Some(record_timeout))
            // Room for the largest size asked (the default holds 32,768).
            .udp_flows_size(1 << 18),
    );
    let (both, one) = (
        view(&["10.244.2.10", "10.244.3.10"]),
        view(&["10.244.3.10"]),
    );
    backend.sync(&Round::full(&both)).expect("nft sync");
    let mut walk = ConntrackCleaner::in_netns(&path);
    let mut record = ConntrackCleaner::in_netns(&path).with_flow_record(backend.flow_record());
    let removal = Round::between(&both, &one);
    let mut socket = Socket::open(Some(&path)).expect("socket");
    let table = Table::new(TableFamily::Ip, "kpng");
    let started = Instant::now();

    println!(
        "nf_conntrack_buckets: {} (the node's namespace: {}); the machine's entries before: {}",
        sysctl_in(None, "nf_conntrack_buckets"),
        sysctl_in(Some(&node), "nf_conntrack_buckets"),
        sysctl_in(None, "nf_conntrack_count"),
    );
    println!(
        "| entries in the node's table (and in the record) | walk: CPU per change | record: CPU per change | walk / record | wall: walk, record |"
    );
    println!("|---|---|---|---|---|");
    let mut made = 0u32;
    for size in sizes {
        let mut elements = Vec::new();
        while made < size {
            let flow = filler(made);
            socket
                .add_flow(&flow, Duration::from_secs(600))
                .expect("a conntrack entry");
            elements.push(Element {
                timeout_ms: Some(600_000),
                ..Element::key(FlowRecord::element_key(&flow))
            });
            made += 1;
        }
        for chunk in elements.chunks(4096) {
            let mut tx = Transaction::new();
            tx.add_elements(&table, "udp-flows", chunk.to_vec());
            socket.commit(tx).expect("record elements");
        }
        // The record is young for its timeout after the full sync.
        if let Some(left) = record_timeout.checked_sub(started.elapsed()) {
            std::thread::sleep(left + Duration::from_millis(300));
        }
        let (mut cpu, mut wall) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..rounds {
            for (i, cleaner) in [&mut walk, &mut record].into_iter().enumerate() {
                let (c, w) = (process_cpu_ms(), Instant::now());
                cleaner.sync(&removal).expect("cleanup");
                wall[i].push(w.elapsed().as_secs_f64() * 1e3);
                cpu[i].push(process_cpu_ms() - c);
            }
        }
        assert!(matches!(walk.last_cleanup(), Cleanup::Walk(_)));
        assert_eq!(
            record.last_cleanup(),
            Cleanup::Record,
            "the record was trusted"
        );
        let [w, r] = cpu.map(median);
        let [ww, rw] = wall.map(median);
        println!(
            "| {size} | {w:.2} ms | {r:.2} ms | {:.0}× | {ww:.2} ms, {rw:.2} ms |",
            w / r
        );
    }
    println!(
        "the machine's entries after: {}; {rounds} changes per way and size",
        sysctl_in(None, "nf_conntrack_count")
    );
    let mut tx = Transaction::new();
    tx.delete_table(&table);
    let _ = socket.commit(tx);
}
