//! A backend in one file: it prints what a data plane would program.
use kpng::model::endpoint::{PortInfo, PortList};
use kpng::model::v1::{Protocol, Service, ServicePort};
use kpng::{EndpointInfo, IpFamily, NodeProjector, Round, ServiceInfo, Sink, SinkError, Store};

/// Our data plane: here, lines of text. It keeps no view: each round
/// says what changed.
struct Printer;

impl Sink for Printer {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let revision = round.revision();
        if round.is_full() {
            println!("r{revision}: start over");
        }
        // Every Service on a full round, else the changed ones.
        for change in round.services() {
            let Some(service) = change.after else {
                println!("r{revision}: remove {}", change.name);
                continue;
            };
            let plan = service.plan(IpFamily::V4);
            for port in &plan.ports {
                for vip in plan.cluster_ips {
                    println!(
                        "r{revision}: {vip}:{} {} -> {:?}",
                        port.number, port.protocol, port.cluster
                    );
                }
            }
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut store = Store::new();
    // Its addresses are typed here, once: text that is not an address is
    // an error now, not in a backend.
    let web = ServiceInfo::new(
        Service::new("default", "web")
            .with_cluster_ips(["10.96.0.10".parse()?])
            .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
    )?;
    let name = web.service_name();
    // Every endpoint of a slice shares one port list.
    let ports = PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]);
    let mut txn = store.begin();
    txn.set_service(web);
    for ip in ["10.244.1.10", "10.244.2.10"] {
        let endpoint = EndpointInfo::builder(ip.parse()?).ports(ports.clone());
        txn.set_endpoint(name.clone(), endpoint.build());
    }
    txn.commit();

    let mut projector = NodeProjector::new("node-a");
    let mut printer = Printer;
    projector.sync_into(&store.snapshot(), &mut printer)?;

    // One endpoint goes: only that Service is printed again.
    let mut txn = store.begin();
    txn.delete(&kpng::model::Key::Endpoint(name, "10.244.2.10".parse()?));
    txn.commit();
    projector.sync_into(&store.snapshot(), &mut printer)?;
    Ok(())
}
