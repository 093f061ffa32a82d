//! The backends' benchmarks (`benches/backends.rs`), measured in network
//! namespaces they create (run as root), one file each, with the labs,
//! clusters and timings they share here:
//!
//! - `figures.rs` ([`run`]): the figures every backend prints: full-sync
//!   time at 1k and 10k Services × 10 endpoints, time and commands for one
//!   endpoint change at 10k, and the new-connection rate through a
//!   ClusterIP with 10 vs 10k Services;
//! - `scale.rs`: [`cold_full_sync`], [`at_scale`], [`ebpf_at_scale`];
//! - `layout.rs`: [`iptables_layout_switch`];
//! - `comments.rs`: [`comments_cost`];
//! - `balancing.rs`: [`balancing`];
//! - `counters.rs`: [`counters_cost`], [`counters_scrape_cost`];
//! - `udp.rs`: [`udp_socket_ending`];
//! - `tcp.rs`: [`tcp_ending`], per backend ([`TcpEnding`]);
//! - `dsr.rs`: [`direct_return`], in a cluster of namespaces;
//! - `xdp.rs`: [`xdp_against_tc`], in two clusters of namespaces.

mod balancing;
mod comments;
mod counters;
mod dsr;
mod figures;
mod layout;
mod scale;
mod tcp;
mod udp;
mod xdp;

use std::net::IpAddr;
use std::time::Instant;

use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{ClientIpAffinity, IpSet, Protocol, Service, ServicePort};
use kpng_model::{EndpointInfo, ServiceName};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::NodeProjector;

use crate::{Lab, LabBackend, Settings};

pub use balancing::balancing;
pub use comments::comments_cost;
pub use counters::{counters_cost, counters_scrape_cost};
pub use dsr::direct_return;
pub use figures::run;
pub use layout::{LayoutSwitch, iptables_layout_switch};
pub use scale::{AtScale, EbpfAtScale, at_scale, cold_full_sync, ebpf_at_scale};
pub use tcp::{TcpEnding, WithCleaner, tcp_ending};
pub use udp::udp_socket_ending;
pub use xdp::xdp_against_tc;

/// The median of `xs` (sorted in place; the upper one of an even count;
/// 0 when empty).
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

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
