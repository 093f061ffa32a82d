//! A backend in one file: it prints what a data plane would program.
use std::net::IpAddr;

use kpng_diff::NodeProjector;
use kpng_model::IpFamily;
use kpng_model::v1::{Endpoint, EndpointPort, IpSet, Protocol, Service, ServicePort};
use kpng_sink::{IncrementalSink, SinkError, ViewTracker, tracked_view};
use kpng_store::Store;

/// Our data plane: here, lines of text.
#[derive(Default)]
struct Printer {
    tracker: ViewTracker,
}

impl IncrementalSink for Printer {
    // reset, apply and the callbacks: the tracker keeps the node view.
    tracked_view!(tracker);

    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.tracker.check()?;
        let changes = self.tracker.take_changes();
        for name in &changes.services {
            match self.tracker.view().services.get(name) {
                None => println!("r{revision}: remove {name}"),
                Some(view) => {
                    let plan = view.plan(IpFamily::V4);
                    for port in &plan.ports {
                        for vip in plan.cluster_ips {
                            println!(
                                "r{revision}: {vip}:{} {} -> {:?}",
                                port.number, port.protocol, port.cluster
                            );
                        }
                    }
                }
            }
        }
        self.tracker.synced(true);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut store = Store::new();
    let web = Service {
        namespace: "default".into(),
        name: "web".into(),
        cluster_ips: Some(IpSet::parse_addrs("clusterIPs", ["10.96.0.10"])?),
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp as i32,
            port: 80,
            ..Default::default()
        }],
        ..Default::default()
    };
    let name = web.service_name();
    let endpoint = |ip: &str| -> Result<(IpAddr, Endpoint), Box<dyn std::error::Error>> {
        Ok((
            ip.parse()?,
            Endpoint {
                addresses: Some(IpSet::parse_addrs("addresses", [ip])?),
                ready: true,
                serving: true,
                ports: vec![EndpointPort {
                    name: "http".into(),
                    protocol: Protocol::Tcp as i32,
                    port: 8080,
                }],
                ..Default::default()
            },
        ))
    };
    let mut txn = store.begin();
    txn.set_service(web);
    for ip in ["10.244.1.10", "10.244.2.10"] {
        let (addr, ep) = endpoint(ip)?;
        txn.set_endpoint(name.clone(), addr, ep);
    }
    txn.commit();

    let mut projector = NodeProjector::new("node-a");
    let mut printer = Printer::default();
    projector.sync_into(&store.snapshot(), &mut printer)?;

    // One endpoint goes: only that Service is printed again.
    let mut txn = store.begin();
    txn.delete(&kpng_model::Key::Endpoint(name, "10.244.2.10".parse()?));
    txn.commit();
    projector.sync_into(&store.snapshot(), &mut printer)?;
    Ok(())
}
