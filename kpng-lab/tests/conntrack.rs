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

/// A Service `held` on 10.96.0.130:80, its endpoints `eps` on 9100
/// (where the lab's servers hold connections).
fn held(eps: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: held}}
  spec: {{clusterIP: 10.96.0.130, ports: [{{name: hold, port: 80, targetPort: 9100}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: held-1, labels: {{kubernetes.io/service-name: held}}}}
  addressType: IPv4
  endpoints: {eps}
  ports: [{{name: hold, port: {port}, protocol: TCP}}]
"#,
        port = kpng_lab::held::HELD_PORT
    )
}

/// `--end-tcp-connections` on a netfilter backend, with real packets: a
/// pod holds a connection to e2 and one to e3 through a ClusterIP; a sync
/// takes e2 from the Service (its pod still runs: without the option its
/// connection would stay up) while e3 turns terminating but serving
/// beside a new ready e1. The connection to e2 is reset within the sync
/// (its conntrack entry deleted, the client nudged, its answer reset by
/// e1); the one to e3, which drains, still echoes; then, every endpoint
/// gone, a connection to e1 is reset by the Service's own rule. Without
/// the option, the connections stay.
fn removed_endpoints_end_tcp_connections<S: kpng_sink::Sink>(
    make: impl Fn(&kpng_lab::Lab, &kpng_sink::ProxyConfig) -> S,
    backend: kpng_explain::DataPath,
) {
    use kpng_lab::held::{Fate, HeldTcp, monotonic};
    use kpng_lab::scenarios::E1;
    let lab = lab();
    let ready = |ip: &str, node: &str| format!("{{addresses: [{ip}], nodeName: {node}}}");
    let before = format!("[{}, {}]", ready(E2, "node-b"), ready(E3, "node-c"));
    let after = format!(
        "[{}, {{addresses: [{E3}], nodeName: node-c, conditions: {{ready: false, serving: true, terminating: true}}}}]",
        ready(E1, "node-a")
    );
    for end in [true, false] {
        let proxy_config = Settings::lab().proxy().end_tcp_connections(end);
        let cleaner =
            ConntrackCleaner::in_netns(std::path::Path::new("/run/netns").join(lab.ns("node")))
                .with_proxy(&proxy_config);
        let mut proxy = Proxy::with(make(&lab, &proxy_config).followed_by(cleaner)).explained_in(
            &lab,
            &Settings::lab(),
            backend,
        );
        proxy.load(&manifest(&[held(&before)])).expect("sync");
        settle();
        let client = HeldTcp::start(&lab, "podc", "10.96.0.130", 80, &[E2, E3]);
        let start = monotonic();
        proxy.load(&manifest(&[held(&after)])).expect("sync");
        let synced = monotonic();
        let ended = proxy.backend.next().last_tcp_ended().len();
        let fates = client.fates();
        if end {
            let Some(Fate::Ended(error, at)) = fates.get(E2) else {
                panic!("the connection to e2 did not end: {fates:?}");
            };
            assert_eq!(error, "ECONNRESET", "{fates:?}");
            // (The client was nudged in the sync: it failed before the sync
            // returned, or just after.)
            assert!(
                *at - start < 1.0,
                "ended {:.3} s after the sync began",
                at - start
            );
            println!(
                "{backend:?}: the connection to the removed endpoint failed {:.1} ms after the sync began ({:+.1} ms from its end)",
                (at - start) * 1e3,
                (at - synced) * 1e3
            );
            // (At least the held one: connections the client opened to e2
            // and closed may still have entries, in TIME_WAIT.)
            assert!(ended >= 1, "{ended}");
        } else {
            assert_eq!(fates.get(E2), Some(&Fate::Alive), "{fates:?}");
            assert_eq!(ended, 0);
        }
        assert_eq!(fates.get(E3), Some(&Fate::Alive), "e3 drains: {fates:?}");
        if end {
            // Every endpoint gone: the client's answer to its nudge meets
            // the Service's reset for a TCP packet that is not a SYN.
            let client = HeldTcp::start(&lab, "podc", "10.96.0.130", 80, &[E1]);
            proxy.load(&manifest(&[held("[]")])).expect("sync");
            let fates = client.fates();
            assert!(
                matches!(fates.get(E1), Some(Fate::Ended(error, _)) if error == "ECONNRESET"),
                "{fates:?}"
            );
        }
    }
}

#[test]
fn nft_ends_tcp_connections_to_removed_endpoints() {
    require_lab!(NftBackend);
    removed_endpoints_end_tcp_connections(
        |lab, proxy| {
            NftBackend::new(
                kpng_backend_nft::NftConfig::new(proxy.clone()).in_netns(&lab.ns("node")),
            )
        },
        kpng_explain::DataPath::Nftables,
    );
}

#[test]
fn iptables_ends_tcp_connections_to_removed_endpoints() {
    use kpng_backend_iptables::{IptablesBackend, IptablesConfig};
    require_lab!(IptablesBackend);
    removed_endpoints_end_tcp_connections(
        |lab, proxy| {
            let mut config = IptablesConfig::new(proxy.clone());
            config.mode = kpng_lab::iptables_mode();
            config.layout = kpng_lab::iptables_layout();
            IptablesBackend::new(config.in_netns(&lab.ns("node")))
        },
        kpng_explain::DataPath::Iptables,
    );
}
