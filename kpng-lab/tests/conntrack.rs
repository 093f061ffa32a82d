//! UDP conntrack cleanup with real UDP flows: a client that keeps its
//! source port follows its Service to the new endpoint once the old one is
//! removed, instead of staying on the conntrack entry that pointed there,
//! also when the proxy restarted in between. Over ctnetlink: no
//! `conntrack` tool. Run as root; otherwise it prints SKIPPED and passes.

use kpng_backend_nft::NftBackend;
use kpng_conntrack::ConntrackCleaner;
use kpng_lab::scenarios::{E1, E2, E3, lab, manifest, service};
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

/// The node's proxy with the nft backend recording its UDP flows for
/// `timeout` (at most `size` of them), and the cleaner reading that record.
fn recording(
    lab: &kpng_lab::Lab,
    timeout: std::time::Duration,
    size: u32,
) -> Proxy<FollowedBy<NftBackend, ConntrackCleaner>> {
    let config = kpng_backend_nft::NftConfig::new(Settings::lab().proxy())
        .in_netns(&lab.ns("node"))
        .udp_flows(Some(timeout))
        .udp_flows_size(size);
    let backend = NftBackend::new(config);
    let cleaner =
        ConntrackCleaner::in_netns(node_path(lab)).with_flow_record(backend.flow_record());
    Proxy::with(backend.followed_by(cleaner)).explained_in(
        lab,
        &Settings::lab(),
        kpng_explain::DataPath::Nftables,
    )
}

fn node_path(lab: &kpng_lab::Lab) -> std::path::PathBuf {
    std::path::Path::new("/run/netns").join(lab.ns("node"))
}

/// Sets the node namespace's UDP conntrack timeouts (seconds): short, so
/// that a record with a short timeout can be trusted.
fn udp_timeouts(lab: &kpng_lab::Lab, unreplied: u32, stream: u32) {
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("node"), "sysctl", "-qw"])
        .arg(format!(
            "net.netfilter.nf_conntrack_udp_timeout={unreplied}"
        ))
        .arg(format!(
            "net.netfilter.nf_conntrack_udp_timeout_stream={stream}"
        ))
        .status()
        .expect("sysctl");
    assert!(status.success());
}

/// One datagram to the DNS Service from each of podc's source `ports`:
/// the endpoint that answered each (`TIMEOUT` for none).
fn ask_from(lab: &kpng_lab::Lab, ports: std::ops::Range<u16>) -> Vec<(u16, String)> {
    let script = format!(
        "import socket\nfor p in range({}, {}):\n  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n  s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n  s.bind(('0.0.0.0', p))\n  s.settimeout(2)\n  s.sendto(b'hi', ('10.96.0.120', 53))\n  try: r = s.recv(200).decode().strip()\n  except Exception: r = 'TIMEOUT'\n  print(p, r)\n  s.close()",
        ports.start, ports.end
    );
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.ns("podc"), "python3", "-c", &script])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (port, answer) = line.split_once(' ')?;
            let endpoint = [E1, E2, E3]
                .into_iter()
                .find(|e| answer.starts_with(e))
                .unwrap_or("TIMEOUT");
            Some((port.parse().ok()?, endpoint.to_owned()))
        })
        .collect()
}

/// The ports of `answers` answered by `endpoint`.
fn on(answers: &[(u16, String)], endpoint: &str) -> Vec<u16> {
    answers
        .iter()
        .filter(|(_, e)| e == endpoint)
        .map(|(p, _)| *p)
        .collect()
}

/// Flows from 16 source ports to the DNS Service on e2 and e3, some on
/// each (asked again while all went to one).
fn flows_on_e2_and_e3(lab: &kpng_lab::Lab) -> Vec<(u16, String)> {
    for _ in 0..4 {
        let answers = ask_from(lab, 40100..40116);
        assert_eq!(answers.len(), 16, "{answers:?}");
        if !on(&answers, E2).is_empty() && !on(&answers, E3).is_empty() {
            return answers;
        }
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    panic!("16 flows never spread over e2 and e3");
}

/// After e2 left: exactly the flows that were on e2 were deleted (by
/// their original tuple, answered by e2), those on e3 are still tracked,
/// and the same clients now reach e1 or e3 (e2 still runs and would
/// answer a flow left on it) while those on e3 stay there.
fn exactly_e2s_flows_ended(
    lab: &kpng_lab::Lab,
    cleaner: &ConntrackCleaner,
    before: &[(u16, String)],
) {
    let mut deleted: Vec<u16> = cleaner
        .last_deletions()
        .iter()
        .map(|f| f.original.src_port)
        .collect();
    deleted.sort_unstable();
    assert_eq!(deleted, on(before, E2), "{:?}", cleaner.last_deletions());
    assert!(
        cleaner
            .last_deletions()
            .iter()
            .all(|f| f.reply.src.to_string() == E2 && f.original.dst_port == 53),
        "{:?}",
        cleaner.last_deletions()
    );
    let mut socket = kpng_netfilter::nft::Socket::open(Some(&node_path(lab))).expect("socket");
    for port in on(before, E3) {
        let original = kpng_netfilter::conntrack::Tuple {
            src: kpng_lab::scenarios::POD_CLIENT.parse().expect("ip"),
            dst: "10.96.0.120".parse().expect("ip"),
            src_port: port,
            dst_port: 53,
        };
        let kept = socket
            .flow(kpng_netfilter::conntrack::UDP, &original, 0)
            .expect("get");
        assert_eq!(
            kept.map(|f| f.reply.src.to_string()).as_deref(),
            Some(E3),
            "the flow from port {port} on e3 is untouched"
        );
    }
    let after = ask_from(lab, 40100..40116);
    for (port, was) in before {
        let now = after
            .iter()
            .find(|(p, _)| p == port)
            .map(|(_, e)| e.as_str());
        if was == E2 {
            assert!(matches!(now, Some(E1 | E3)), "port {port}: {now:?}");
        } else {
            assert_eq!(now, Some(E3), "port {port} stays on e3");
        }
    }
}

/// The cleanup that reads the nft backend's record of UDP flows ends the
/// same flows as the walk of the conntrack table, without the walk: with
/// real datagrams from 16 source ports spread over e2 and e3, e2 leaves
/// (e1 comes): exactly e2's flows are deleted, found in the record and
/// each read and deleted by its tuple; e3's are untouched. Once a UDP
/// conntrack timeout of the namespace exceeds the record's, the cleanup
/// walks again.
#[test]
fn the_flow_record_ends_exactly_the_flows_to_a_removed_endpoint() {
    use kpng_conntrack::{Cleanup, WalkReason};
    require_lab!(NftBackend);
    let lab = lab();
    let timeout = std::time::Duration::from_secs(3);
    udp_timeouts(&lab, 2, 3);
    let mut proxy = recording(&lab, timeout, 1 << 18);
    let both = "[{addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]";
    proxy.load(&manifest(&[dns(both)])).expect("sync");
    assert_eq!(
        proxy.backend.next().last_cleanup(),
        Cleanup::Walk(WalkReason::Untranslated),
        "a full round walks"
    );
    // The record is young for its timeout.
    std::thread::sleep(timeout + std::time::Duration::from_millis(300));
    let before = flows_on_e2_and_e3(&lab);
    let e3_e1 = "[{addresses: [10.244.3.10], nodeName: node-c}, {addresses: [10.244.1.10], nodeName: node-a}]";
    proxy.load(&manifest(&[dns(e3_e1)])).expect("sync");
    assert_eq!(proxy.backend.next().last_cleanup(), Cleanup::Record);
    exactly_e2s_flows_ended(&lab, proxy.backend.next(), &before);

    // A UDP timeout longer than the record's: its elements could expire
    // before their flows.
    udp_timeouts(&lab, 2, 10);
    proxy
        .load(&manifest(&[dns(
            "[{addresses: [10.244.1.10], nodeName: node-a}]",
        )]))
        .expect("sync");
    assert_eq!(
        proxy.backend.next().last_cleanup(),
        Cleanup::Walk(WalkReason::Timeout)
    );
}

/// Where the record cannot be trusted, the cleanup walks the conntrack
/// table, and the same flows end: right after a full sync (the record is
/// young: flows older than it are not in it), and after a flow could not
/// be recorded (the set was full).
#[test]
fn the_cleanup_walks_where_the_flow_record_cannot_be_trusted() {
    use kpng_conntrack::{Cleanup, WalkReason};
    require_lab!(NftBackend);
    let lab = lab();
    let timeout = std::time::Duration::from_secs(3);
    udp_timeouts(&lab, 2, 3);
    let both = "[{addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]";
    let e3_e1 = "[{addresses: [10.244.3.10], nodeName: node-c}, {addresses: [10.244.1.10], nodeName: node-a}]";

    // Young: the change comes within the timeout of the full sync.
    let mut proxy = recording(&lab, timeout, 1 << 18);
    proxy.load(&manifest(&[dns(both)])).expect("sync");
    let before = flows_on_e2_and_e3(&lab);
    proxy.load(&manifest(&[dns(e3_e1)])).expect("sync");
    assert_eq!(
        proxy.backend.next().last_cleanup(),
        Cleanup::Walk(WalkReason::Young)
    );
    exactly_e2s_flows_ended(&lab, proxy.backend.next(), &before);
    drop(proxy);
    // The flows of the first part expire.
    std::thread::sleep(timeout);

    // Missed: a record of one flow, sixteen flows.
    let mut proxy = recording(&lab, timeout, 1);
    proxy.load(&manifest(&[dns(both)])).expect("sync");
    std::thread::sleep(timeout + std::time::Duration::from_millis(300));
    let before = flows_on_e2_and_e3(&lab);
    proxy.load(&manifest(&[dns(e3_e1)])).expect("sync");
    assert_eq!(
        proxy.backend.next().last_cleanup(),
        Cleanup::Walk(WalkReason::Missed)
    );
    exactly_e2s_flows_ended(&lab, proxy.backend.next(), &before);
}
