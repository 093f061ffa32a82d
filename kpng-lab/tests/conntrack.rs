//! UDP conntrack cleanup with real UDP flows: a client that keeps its
//! source port follows its Service to the new endpoint once the old one is
//! removed, instead of staying on the conntrack entry that pointed there,
//! also when the proxy restarted in between. Over ctnetlink: no
//! `conntrack` tool. Run as root; otherwise it prints SKIPPED and passes.

use kpng_backend_nft::NftBackend;
use kpng_conntrack::ConntrackCleaner;
use kpng_lab::scenarios::{E2, E3, lab, manifest, service};
use kpng_lab::{LabBackend, Proxy, Settings, require_lab, settle};
use kpng_sink::{FollowedBy, SinkExt};

/// One datagram from `podc`'s fixed source port 40000; the reply line.
fn ask(lab: &kpng_lab::Lab) -> String {
    let script = "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 40000))\ns.settimeout(2)\ns.sendto(b'hi', ('10.96.0.120', 53))\ntry: print(s.recv(200).decode().strip())\nexcept Exception as e: print('TIMEOUT')";
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("podc"), "python3", "-c", script])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The node's proxy: the nft backend, then the conntrack cleaner over
/// ctnetlink in the node's namespace (fresh, as after a restart).
fn proxy(lab: &kpng_lab::Lab) -> Proxy<FollowedBy<NftBackend, ConntrackCleaner>> {
    let cleaner =
        ConntrackCleaner::in_netns(std::path::Path::new("/run/netns").join(lab.ns("node")));
    Proxy::with(NftBackend::in_lab(lab, &Settings::lab()).followed_by(cleaner)).explained_in(
        lab,
        &Settings::lab(),
        kpng_explain::DataPath::Nftables,
    )
}

fn dns(eps: &str) -> String {
    service(
        "dns",
        "{clusterIP: 10.96.0.120, ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}]}",
        eps,
    )
}

/// kpng never runs the `conntrack` tool: it need not be installed.
#[test]
fn a_udp_flow_moves_to_the_new_endpoint_after_removal() {
    require_lab!(NftBackend);
    let lab = lab();
    let mut proxy = proxy(&lab);
    proxy
        .load(&manifest(&[dns(
            "[{addresses: [10.244.2.10], nodeName: node-b}]",
        )]))
        .expect("sync");
    settle();
    assert!(ask(&lab).starts_with(E2), "first on e2");
    assert!(ask(&lab).starts_with(E2), "the same flow stays on e2");

    // e2 leaves, e3 comes: the flow's conntrack entry is deleted, so the
    // next datagram of the same flow goes to e3 (e2 still answers: without
    // the cleanup the flow would stay there).
    proxy
        .load(&manifest(&[dns(
            "[{addresses: [10.244.3.10], nodeName: node-c}]",
        )]))
        .expect("sync");
    settle();
    assert!(ask(&lab).starts_with(E3), "moved to e3");
}

/// The same across a restart: the proxy that made the flow is gone, and a
/// new one starts on a state without that flow's endpoint. Its first sync
/// reconciles the kernel's flows with its view (it never saw the old one).
#[test]
fn a_udp_flow_moves_to_the_new_endpoint_across_a_restart() {
    require_lab!(NftBackend);
    let lab = lab();
    let mut first = proxy(&lab);
    first
        .load(&manifest(&[dns(
            "[{addresses: [10.244.2.10], nodeName: node-b}]",
        )]))
        .expect("sync");
    settle();
    assert!(ask(&lab).starts_with(E2), "first on e2");
    drop(first);

    let mut restarted = proxy(&lab);
    restarted
        .load(&manifest(&[dns(
            "[{addresses: [10.244.3.10], nodeName: node-c}]",
        )]))
        .expect("sync");
    settle();
    assert!(ask(&lab).starts_with(E3), "moved to e3 after the restart");
}
