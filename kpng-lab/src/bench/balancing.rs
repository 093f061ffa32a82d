//! How evenly each balancing spreads connections.

use super::*;
use crate::{Lab, LabBackend, settle};

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
