//! The health-check ports follow the node's addresses (rtnetlink, through
//! `kpng_netfilter::addresses`), in a network namespace of the test's own:
//! an address added within `--nodeport-addresses` opens the port on it
//! with no sync, and one removed closes it.

use std::fs::File;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpng_health::{HealthCheckServer, ProxyHealth};
use kpng_model::v1::{Service, ServiceType, TrafficPolicy};
use kpng_model::view::{NodeView, ServiceView};
use kpng_sink::{Round, Sink};
use kpng_testkit::bpf::TestNetns;

fn lb(port: u16) -> Arc<kpng_model::ServiceInfo> {
    Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "shop".into(),
            name: "front".into(),
            r#type: ServiceType::LoadBalancer as i32,
            external_traffic_policy: TrafficPolicy::Local as i32,
            health_check_node_port: u32::from(port),
            ..Default::default()
        })
        .expect("valid"),
    )
}

/// Waits (5 s at most) until `server` listens on `wanted`.
async fn until_on(server: &HealthCheckServer, wanted: &[IpAddr]) {
    let start = Instant::now();
    while server.addresses() != wanted {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still on {:?}, not {wanted:?}",
            server.addresses()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn health_check_ports_follow_addresses_added_and_removed() {
    let ns = TestNetns::new("kpnghealth").expect("a network namespace (as root)");
    ns.sh("ip link add kpng0 type veth peer name kpng1 && ip link set kpng0 up && ip link set kpng1 up")
        .expect("a veth");
    let file = File::open(format!("/run/netns/{}", ns.name)).expect("namespace file");
    // Everything below runs in the namespace: a thread of its own.
    let outcome = std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let health = ProxyHealth::new(Duration::from_secs(60));
            health.synced();
            let prefix: kpng_model::IpNet = "10.26.7.0/24".parse().expect("prefix");
            let mut sink = HealthCheckServer::on_prefixes(vec![prefix], health);
            let port = 30_026;
            let svc = lb(port);
            let mut view = NodeView {
                revision: 1,
                ..Default::default()
            };
            view.services
                .insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
            sink.sync(&Round::full(&view)).expect("sync");
            assert!(sink.addresses().is_empty(), "no address in the prefix yet");

            // Added: the port opens on it, with no sync.
            let address: IpAddr = "10.26.7.1".parse().expect("ip");
            let other: IpAddr = "10.99.0.1".parse().expect("ip");
            let add = |a: &str| {
                std::process::Command::new("ip")
                    .args(["addr", a, "10.26.7.1/24", "dev", "kpng0"])
                    .status()
                    .expect("ip runs")
                    .success()
            };
            assert!(add("add"));
            assert!(
                std::process::Command::new("ip")
                    .args(["addr", "add", "10.99.0.1/24", "dev", "kpng0"])
                    .status()
                    .expect("ip runs")
                    .success()
            );
            until_on(&sink, &[address]).await;
            assert!(!sink.addresses().contains(&other), "outside the prefix");
            tokio::net::TcpStream::connect((address, port))
                .await
                .expect("the port is open on the new address");

            // Removed: the port leaves it.
            assert!(add("del"));
            until_on(&sink, &[]).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                tokio::net::TcpStream::connect((address, port))
                    .await
                    .is_err(),
                "closed"
            );
        });
    })
    .join();
    drop(ns);
    outcome.expect("the test in the namespace");
}
