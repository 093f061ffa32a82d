//! The eBPF backend in the lab: the scenarios every backend passes, run
//! as `kpng … to-ebpf` runs it (socket-level load balancing for the
//! node's sockets, the nftables backend for traffic from outside), then
//! the eBPF backend alone, with no netfilter rule in the node. Run as
//! root with cgroup v2; otherwise each test prints SKIPPED and passes.

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_lab::scenarios::{ALL3, E1, E2, E3, POD_CLIENT, dropped_locally, lab, manifest, service};
use kpng_lab::{EbpfWithNft, LabBackend, Proxy, Settings, endpoints, require_lab, settle};

kpng_lab::scenario_tests!(EbpfWithNft);

/// With no nftables backend at all, a pod's connections to a ClusterIP
/// still reach every endpoint, across the lab's links, unmasqueraded, and
/// a UDP reply comes from the Service address; the node holds no
/// netfilter rule, so the eBPF programs did it all.
#[test]
fn the_ebpf_backend_alone_serves_the_node_s_sockets() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    let (cgroup, pins) = lab.bpf_env();
    let config = EbpfConfig::new(Settings::lab().proxy())
        .cgroup(cgroup)
        .pin_path(pins);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach"));
    let spec = "{clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]}";
    proxy
        .load(&manifest(&[service("web", spec, ALL3)]))
        .expect("sync");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.10", 80, 40);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.ends_with(POD_CLIENT)), "{lines:?}");
    let lines = lab.connect("podc", "udp", "10.96.0.10", 53, 10);
    assert!(lines.iter().all(|l| l.starts_with("10.244.")), "{lines:?}");
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.99", 80),
        dropped_locally::<EbpfWithNft>()
    );
    // Not the node's sockets: an external client is not served.
    assert_eq!(lab.once("ext", "tcp", "10.96.0.10", 80), "TIMEOUT");
    let rules = lab.in_node(&["nft", "list", "ruleset"]);
    assert!(rules.trim().is_empty(), "no netfilter rule: {rules}");
    let counters = proxy.backend.counters().expect("counters");
    assert!(counters.translated >= 50, "{counters:?}");
    assert_eq!(counters.missing, 0);
    EbpfWithNft::clear(&lab);
}
