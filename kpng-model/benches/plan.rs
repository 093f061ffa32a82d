//! `ServiceView::plan` of one Service, alone: a Service with two
//! ClusterIPs (one per family), externalIPs, load-balancer IPs and
//! `loadBalancerSourceRanges`, two ports and 10 endpoints of each family
//! ("rich"), and a plain one (one ClusterIP, one port, 10 endpoints).
//! Each figure is the median, over 21 batches of 20,000 calls, of the
//! time of one `plan(family)` call, for IPv4 and IPv6: this thread's CPU
//! time (`/proc/thread-self/schedstat`), so that other processes of a
//! busy machine are not counted.
//!
//! ```text
//! cargo bench -p kpng-model --bench plan
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;

use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{IpSet, Protocol, Service, ServicePort, ServiceType};
use kpng_model::view::{EndpointView, ServiceView};
use kpng_model::{EndpointInfo, IpFamily};

/// The view of `service` with 10 ready endpoints per family.
fn view(service: Service) -> ServiceView {
    let ports = PortList::new([
        PortInfo::new("http", Protocol::Tcp, 8080),
        PortInfo::new("dns", Protocol::Udp, 5353),
    ]);
    let mut endpoints: Vec<EndpointView> = (1..=10u8)
        .flat_map(|n| {
            let v4: IpAddr = format!("10.244.0.{n}").parse().unwrap();
            let v6: IpAddr = format!("fd00:244::{n}").parse().unwrap();
            [v4, v6]
        })
        .map(|ip| {
            let endpoint = EndpointInfo::builder(ip).ports(ports.clone()).build();
            EndpointView::at(endpoint, ip)
                .unwrap()
                .with_cluster(true)
                .with_local(true)
                .with_is_local(true)
        })
        .collect();
    endpoints.sort_by_key(EndpointView::ip);
    let mut view = ServiceView::new(into_view_service(service));
    view.endpoints = endpoints;
    view
}

/// The Service as the view holds it: typed once, where it enters.
fn into_view_service(service: Service) -> Arc<kpng_model::ServiceInfo> {
    Arc::new(kpng_model::ServiceInfo::new(service).unwrap())
}

fn set(texts: &[&str]) -> IpSet {
    IpSet {
        v4: texts
            .iter()
            .filter(|t| !t.contains(':'))
            .map(|t| t.to_string())
            .collect(),
        v6: texts
            .iter()
            .filter(|t| t.contains(':'))
            .map(|t| t.to_string())
            .collect(),
    }
}

fn rich() -> Service {
    let mut http = ServicePort::new("http", Protocol::Tcp, 80);
    http.node_port = 30080;
    let mut dns = ServicePort::new("dns", Protocol::Udp, 53);
    dns.node_port = 30053;
    let mut service = Service::new("default", "rich")
        .with_type(ServiceType::LoadBalancer)
        .with_port(dns)
        .with_port(http);
    service.cluster_ips = Some(set(&["10.96.0.10", "fd00:96::a"]));
    service.external_ips = Some(Box::new(set(&["192.0.2.10", "2001:db8::10"])));
    service.load_balancer_ips = Some(Box::new(set(&["198.51.100.7", "2001:db8:1::7"])));
    service.load_balancer_source_ranges =
        Some(Box::new(set(&["10.0.0.0/8", "192.168.0.0/16", "fd00::/8"])));
    service
}

fn plain() -> Service {
    let mut service =
        Service::new("default", "plain").with_port(ServicePort::new("http", Protocol::Tcp, 80));
    service.cluster_ips = Some(set(&["10.96.0.11"]));
    service
}

/// This thread's CPU time so far, in nanoseconds.
fn cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// The median time of one `plan(family)` call, in nanoseconds.
fn time(view: &ServiceView, family: IpFamily) -> f64 {
    const CALLS: u32 = 20_000;
    let mut batches: Vec<f64> = (0..21)
        .map(|_| {
            let start = cpu_ns();
            for _ in 0..CALLS {
                black_box(black_box(view).plan(family));
            }
            (cpu_ns() - start) as f64 / f64::from(CALLS)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[batches.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("plan: bench");
        return;
    }
    let rich = view(rich());
    let plain = view(plain());
    for (name, view) in [("rich", &rich), ("plain", &plain)] {
        let v4 = time(view, IpFamily::V4);
        let v6 = time(view, IpFamily::V6);
        println!("plan, {name} Service: {v4:.0} ns (IPv4), {v6:.0} ns (IPv6)");
    }
}
