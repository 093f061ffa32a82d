//! XDP with real packets, in a cluster of namespaces (as root; skipped
//! otherwise): agents run the eBPF tc programs with `--xdp generic` on
//! their fabric interface; a client outside holds TCP connections through
//! a NodePort of node-1 to an endpoint on node-2 (masqueraded, and
//! returned directly) and to one on node-1 itself, and sends lines the
//! endpoint echoes. Every line comes
//! back whole; node-1's XDP program counts the packets it sent on; and
//! with the client's checksum offload on (partial checksums, as a local
//! stack sends them over a veth) and off (full checksums, checked by the
//! endpoint's stack) alike. LB IPs with source ranges and
//! `externalTrafficPolicy: Local` are served as by tc.
#![allow(missing_docs)]

use std::process::Command;
use std::time::Duration;

use kpng_lab::cluster::{AgentBackend, CLIENT_IP, Cluster, node_ip, pod_ip};

/// Opens a TCP connection to `host:port`, reads the endpoint's first line,
/// then sends `count` lines one at a time, each read back before the
/// next. Prints the first line, then `echoed N`.
const ECHO: &str = r#"
import socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port), timeout=3)
f = s.makefile("rwb")
print(f.readline().decode().strip(), flush=True)
n = 0
for i in range(count):
    line = ("line %d %s\n" % (i, "x" * (i % 700))).encode()
    f.write(line); f.flush()
    if f.readline() == line:
        n += 1
print("echoed", n, flush=True)
"#;

fn service(name: &str, n: u8, np: u16, node: usize) -> String {
    let mode = if name == "direct" {
        ", annotations: {kpng.io/load-balancer-mode: dsr}"
    } else {
        ""
    };
    format!(
        r#"- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: {name}{mode}}}
  spec: {{type: NodePort, clusterIP: 10.96.0.{n}, ports: [{{name: held, port: 9100, targetPort: 9100, nodePort: {np}}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: IPv4
  endpoints: [{{addresses: [{}], nodeName: node-{node}}}]
  ports: [{{name: held, port: 9100, protocol: TCP}}]
"#,
        pod_ip(node, 0)
    )
}

/// The packets node `k`'s XDP program sent on so far (`kpng_counters`
/// slot 4, every CPU).
fn xdp_count(cluster: &Cluster, k: usize) -> u64 {
    counter(cluster, k, 4)
}

/// Slot `slot` of node `k`'s `kpng_counters`, every CPU summed (2: the
/// packets dropped).
fn counter(cluster: &Cluster, k: usize, slot: u8) -> u64 {
    let pattern = format!(
        "/tmp/{}-n{k}-bpf-*/kpng/v-*/maps/kpng_counters",
        cluster.prefix
    );
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("bpftool -j map lookup pinned $(ls {pattern} | head -1) key {slot} 0 0 0"),
        ])
        .output()
        .expect("bpftool");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    json["formatted"]["values"]
        .as_array()
        .map(|cpus| cpus.iter().filter_map(|c| c["value"].as_u64()).sum())
        .unwrap_or(0)
}

fn echo(cluster: &Cluster, port: u16, count: usize) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", &cluster.client_ns(), "python3", "-c", ECHO])
        .args([node_ip(1), port.to_string(), count.to_string()])
        .output()
        .expect("client");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .chain(
            // (an exception's last line: what failed)
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.contains("Error"))
                .map(str::to_owned),
        )
        .collect()
}

#[test]
fn xdp_sends_on_the_packets_of_flows_the_tc_programs_opened() {
    kpng_lab::require_cluster!(AgentBackend::Ebpf);
    if Command::new("bpftool").arg("version").output().is_err() {
        eprintln!("SKIPPED: bpftool not found");
        return;
    }
    let mut cluster = Cluster::new(2, 1, AgentBackend::Ebpf);
    cluster.agent_flags = vec!["--xdp".into(), "generic".into()];
    let ranged = |name: &str, n: u8, ranges: &str| {
        kpng_lab::scenarios::service_with_status(
            name,
            &format!(
                "{{type: LoadBalancer, clusterIP: 10.96.0.{n}, externalTrafficPolicy: Local, loadBalancerSourceRanges: [{ranges}], ports: [{{name: http, port: 80, targetPort: 8080}}]}}"
            ),
            &format!("{{loadBalancer: {{ingress: [{{ip: 203.0.113.{n}}}]}}}}"),
            &format!("[{{addresses: [{}], nodeName: node-1}}]", pod_ip(1, 0)),
        )
    };
    let items = [
        service("remote", 20, 30100, 2),
        service("local", 21, 30101, 1),
        service("direct", 22, 30102, 2),
        ranged("open", 30, "192.168.0.0/16"),
        ranged("closed", 31, "198.51.100.0/24"),
    ];
    cluster.write_manifest(&cluster.manifest(&items));
    cluster.start_server();
    cluster.start_agents();
    cluster.wait_all_synced(Duration::from_secs(30));
    let client = cluster.client_ns();
    cluster.route_client_to("203.0.113.0/24", 1);
    // Source ranges and externalTrafficPolicy: Local, as tc has them: the
    // LB IP whose ranges hold the client serves it from the local
    // endpoint, its later packets through XDP; the one whose ranges do
    // not is dropped (by XDP itself, which checks every packet's source
    // as tc does).
    let (before, dropped) = (xdp_count(&cluster, 1), counter(&cluster, 1, 2));
    let lines = cluster.connect(&client, "tcp", "203.0.113.30", 80, 5);
    assert_eq!(lines, vec![format!("{} {CLIENT_IP}", pod_ip(1, 0)); 5]);
    assert!(
        xdp_count(&cluster, 1) > before,
        "the open LB IP through XDP"
    );
    let lines = cluster.connect(&client, "tcp", "203.0.113.31", 80, 1);
    assert_eq!(lines, ["TIMEOUT"]);
    assert!(counter(&cluster, 1, 2) > dropped, "dropped, and counted");
    for offload in [true, false] {
        cluster.client_checksum_offload(offload);
        for (port, k, seen) in [
            (30100, 2, node_ip(1)),
            (30101, 1, CLIENT_IP.to_owned()),
            (30102, 2, CLIENT_IP.to_owned()),
        ] {
            let before = xdp_count(&cluster, 1);
            let lines = echo(&cluster, port, 200);
            let first = format!("{} {seen}", pod_ip(k, 0));
            assert_eq!(
                lines,
                [first, "echoed 200".to_owned()],
                "offload {offload}, port {port}"
            );
            let sent = xdp_count(&cluster, 1) - before;
            assert!(
                sent >= 200,
                "offload {offload}, port {port}: XDP sent on only {sent} packets"
            );
        }
    }
}
