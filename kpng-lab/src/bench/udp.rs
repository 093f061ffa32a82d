//! Ending connected UDP sockets to removed endpoints: the socket
//! iterator's cost.

use std::time::Instant;

use kpng_testkit::{Cluster, ClusterShape};

use super::*;
use crate::{Lab, LabBackend};

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
