//! XDP against the tc programs alone ([`xdp_against_tc`]): from a client
//! outside to a NodePort of node-1 whose endpoint runs on node-2
//! (masqueraded), in two clusters of namespaces built side by side, one
//! whose agents run `--xdp generic`.

use std::process::Command;
use std::time::Duration;

use super::median;
use crate::cluster::{AgentBackend, Cluster, node_ip, pod_ip};

/// The client: `count` short TCP connections one after the other
/// (connect, the endpoint's first line), then `count` lines over one held
/// connection, each read back before the next. Prints the connections a
/// second and the round trips a second.
const CLIENT: &str = r#"
import socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.monotonic()
for i in range(count):
    s = socket.create_connection((host, port), timeout=3); s.recv(200); s.close()
conns = count / (time.monotonic() - t)
s = socket.create_connection((host, port), timeout=3)
f = s.makefile("rwb"); f.readline()
t = time.monotonic()
for i in range(count):
    f.write(b"ping\n"); f.flush(); f.readline()
trips = count / (time.monotonic() - t)
print(conns, trips)
"#;

/// A two-node cluster with a NodePort (30100, the held port 9100) whose
/// endpoint is pod 0 of node-2, agents started with `flags`.
fn cluster(flags: &[&str]) -> Cluster {
    let mut cluster = Cluster::new(2, 1, AgentBackend::Ebpf);
    cluster.agent_flags = flags.iter().map(|f| (*f).to_owned()).collect();
    let item = format!(
        r#"- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: held}}
  spec: {{type: NodePort, clusterIP: 10.96.0.20, ports: [{{name: held, port: 9100, targetPort: 9100, nodePort: 30100}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: held-1, labels: {{kubernetes.io/service-name: held}}}}
  addressType: IPv4
  endpoints: [{{addresses: [{}], nodeName: node-2}}]
  ports: [{{name: held, port: 9100, protocol: TCP}}]
"#,
        pod_ip(2, 0)
    );
    cluster.write_manifest(&cluster.manifest(&[item]));
    cluster.start_server();
    cluster.start_agents();
    cluster.wait_all_synced(Duration::from_secs(60));
    // Full checksums, as a client across a wire sends them.
    cluster.client_checksum_offload(false);
    cluster
}

fn client(cluster: &Cluster, count: usize) -> Option<(f64, f64)> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &cluster.client_ns(),
            "python3",
            "-c",
            CLIENT,
        ])
        .args([node_ip(1), "30100".to_owned(), count.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace().map(|w| w.parse::<f64>().ok());
    Some((words.next()??, words.next()??))
}

/// `cargo bench -p kpng-lab --bench backends -- xdp`: `rounds` rounds,
/// each running, against the cluster with XDP and the one without in turn
/// (the order alternating), `count` short TCP connections and `count`
/// round trips over one held connection from a client outside (its
/// checksum offload off, as across a wire) to a NodePort of node-1 whose
/// endpoint is on node-2. Prints the medians of each, and their ratio.
pub fn xdp_against_tc(rounds: usize, count: usize) {
    if let Some(why) = crate::cluster::unavailable(AgentBackend::Ebpf) {
        println!("xdp: SKIPPED: {why}");
        return;
    }
    let clusters = [cluster(&[]), cluster(&["--xdp", "generic"])];
    for c in &clusters {
        assert!(client(c, 3).is_some(), "the NodePort answers");
    }
    let mut conns: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut trips: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for i in 0..2 {
            let which = (round + i) % 2;
            if let Some((c, t)) = client(&clusters[which], count) {
                conns[which].push(c);
                trips[which].push(t);
            }
        }
    }
    let [c_tc, c_xdp] = conns.map(|mut v| median(&mut v));
    let [t_tc, t_xdp] = trips.map(|mut v| median(&mut v));
    println!(
        "xdp: a client outside to a NodePort of node-1, its endpoint on node-2 (masqueraded), two clusters of namespaces side by side, {rounds} rounds x {count}, medians:"
    );
    println!("  tc alone          {c_tc:7.0} conn/s, {t_tc:7.0} round trips/s");
    println!(
        "  tc + XDP generic  {c_xdp:7.0} conn/s ({:.2}x), {t_xdp:7.0} round trips/s ({:.2}x)",
        c_xdp / c_tc.max(1e-9),
        t_xdp / t_tc.max(1e-9)
    );
}
