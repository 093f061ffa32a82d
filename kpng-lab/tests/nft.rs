//! The nftables backend in the lab: the shared scenarios, then what only
//! nftables has (incremental netlink transactions, the kernel's refusals
//! named). The backend runs no `nft` process; the lab uses `nft` only to
//! read the ruleset back. Run as root; otherwise each test prints SKIPPED
//! and passes.

use kpng_backend_nft::NftBackend;
use kpng_lab::scenarios::{self, ALL3, E1, E2, E3, NODE_IP, lab, manifest, service};
use kpng_lab::{LabBackend, Proxy, Settings, endpoints, reached, require_lab, settle};

kpng_lab::scenario_tests!(NftBackend);

#[test]
fn dual_stack_tables_hold_their_family_only_and_moves_are_incremental() {
    scenarios::dual_stack_families_are_programmed_each_on_their_own::<NftBackend>(
        |stage, lab, backend| {
            let ruleset = NftBackend::dump(lab);
            let v6_table = ruleset.split("table ip6 kpng").nth(1).unwrap_or_default();
            match stage {
                "synced" => {
                    // The IPv6 table holds only IPv6 addresses.
                    assert!(!v6_table.contains("10.96.0.5"), "{v6_table}");
                    assert!(v6_table.contains("fd00:96::50"));
                }
                _ => {
                    // The IPv6 move changed elements in place.
                    assert!(!backend.last_sync().replaced, "{:?}", backend.last_sync());
                    assert!(
                        v6_table.contains("fd00:96::50 . tcp . 80 . 1 : fd00:244:3::10 . 8080"),
                        "{v6_table}"
                    );
                }
            }
        },
    );
}

/// A transaction the kernel refuses changes nothing, and the error names
/// what was refused; the next sync is full and converges. The refused
/// change adds a Service with ClientIP affinity: its own chains, sets and
/// map (element-only changes are tested below).
#[test]
fn a_failed_transaction_keeps_the_old_rules() {
    require_lab!(NftBackend);
    let lab = lab();
    let mut proxy = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| service("web", &format!("{{clusterIP: 10.96.0.40, {port}}}"), eps);
    proxy.load(&manifest(&[web(ALL3)])).expect("sync");
    settle();

    // Break the kernel's copy behind the backend's back, then make an
    // update that must delete that element: the kernel refuses the
    // transaction, and nothing of it is applied (the new Service is not
    // added).
    let node = lab.ns("node");
    let status = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &node,
            "nft",
            "delete",
            "element",
            "ip",
            "kpng",
            "service-keys",
            "{ 10.96.0.40 . tcp . 80 }",
        ])
        .status()
        .expect("nft");
    assert!(status.success());
    let newcomer = service(
        "new",
        &format!("{{clusterIP: 10.96.0.41, sessionAffinity: ClientIP, {port}}}"),
        ALL3,
    );
    let err = proxy
        .load(&manifest(std::slice::from_ref(&newcomer)))
        .expect_err("the kernel refuses");
    let err = err.to_string();
    assert!(err.contains("nf_tables transaction failed"), "{err}");
    assert!(
        err.contains("service-keys"),
        "the refused change named: {err}"
    );
    assert!(
        !NftBackend::dump(&lab).contains("10.96.0.41"),
        "nothing of the failed transaction applied"
    );
    // Still an unallocated Service address to the kernel: dropped.
    assert_eq!(lab.once("podc", "tcp", "10.96.0.41", 80), "TIMEOUT");

    // The next sync is a full one and converges (one endpoint: affinity).
    proxy.load(&manifest(&[newcomer])).expect("full resync");
    assert!(proxy.backend.last_full());
    settle();
    assert_eq!(
        endpoints(&lab.connect("podc", "tcp", "10.96.0.41", 80, 30)).len(),
        1
    );
    assert!(
        !NftBackend::dump(&lab).contains("10.96.0.40 . tcp . 80"),
        "stale Service removed"
    );
}

#[test]
fn endpoint_moves_change_elements_only_and_a_refused_batch_keeps_the_old_rules() {
    require_lab!(NftBackend);
    let lab = lab();
    let mut proxy = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    let spec = "{type: NodePort, clusterIP: 10.96.0.60, externalIPs: [192.0.2.61], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30060}]}";
    let web = |eps: &str| service("web", spec, eps);
    let e1_e2 = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    let e1_e3 = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.3.10], nodeName: node-c}]";
    proxy.load(&manifest(&[web(e1_e2)])).expect("sync");
    assert!(proxy.backend.last_sync().replaced);

    // e2 is replaced by e3: same endpoint count, so only map elements
    // change: deleted and added in one batch, nothing else.
    proxy.load(&manifest(&[web(e1_e3)])).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(!stats.replaced, "{stats:?}");
    assert!(stats.commands <= 8, "elements only: {stats:?}");
    // nft reads back what the batch wrote as the dry run prints it.
    let ruleset = NftBackend::dump(&lab);
    for element in [
        "10.96.0.60 . tcp . 80 . 1 : 10.244.3.10 . 8080",
        "192.0.2.61 . tcp . 80 . 1 : 10.244.3.10 . 8080",
        "tcp . 30060 . 1 : 10.244.3.10 . 8080",
    ] {
        assert!(ruleset.contains(element), "{element} in\n{ruleset}");
    }
    assert!(!ruleset.contains("10.244.2.10 . 8080"), "e2 gone");
    settle();
    for (client, addr, port) in [
        ("podc", "10.96.0.60", 80),
        ("ext", "192.0.2.61", 80),
        ("ext", NODE_IP, 30060),
    ] {
        let lines = lab.connect(client, "tcp", addr, port, 30);
        assert_eq!(
            endpoints(&lines),
            [E1, E3].map(String::from).into(),
            "{addr}:{port} {lines:?}"
        );
    }

    // Delete one of its elements behind the backend's back; the batch that
    // must delete it again is refused by the kernel as a whole: the other
    // maps keep e3 too.
    let status = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns("node"),
            "nft",
            "delete",
            "element",
            "ip",
            "kpng",
            "np-cluster",
            "{ tcp . 30060 . 1 }",
        ])
        .status()
        .expect("nft");
    assert!(status.success());
    let err = proxy
        .load(&manifest(&[web(e1_e2)]))
        .expect_err("kernel refuses");
    assert!(err.to_string().contains("np-cluster"), "{err}");
    let ruleset = NftBackend::dump(&lab);
    assert!(
        ruleset.contains("10.96.0.60 . tcp . 80 . 1 : 10.244.3.10 . 8080"),
        "nothing of the refused batch applied:\n{ruleset}"
    );
    assert!(!ruleset.contains("10.244.2.10 . 8080"));

    // The next sync is a full one, and converges.
    proxy.load(&manifest(&[web(e1_e2)])).expect("full resync");
    let stats = proxy.backend.last_sync().clone();
    assert!(stats.replaced, "{stats:?}");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.60", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2].map(String::from).into(),
        "{lines:?}"
    );
}

/// A backend that cannot reach the kernel (its network namespace is
/// gone): a clear error naming the namespace, the failure counted in the
/// metrics, nothing changed; once it is back the next sync is a full one
/// and converges.
#[test]
fn an_unreachable_kernel_is_a_clear_error_and_the_next_sync_converges() {
    use kpng_backend_nft::NftConfig;
    use kpng_health::metrics::{Measure, Metrics};
    use kpng_sink::SinkExt;
    require_lab!(NftBackend);
    let lab = lab();
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| service("web", &format!("{{clusterIP: 10.96.0.130, {port}}}"), eps);
    let mut proxy = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    proxy.load(&manifest(&[web(ALL3)])).expect("sync");
    let before = NftBackend::dump(&lab);

    let config = NftConfig::new(Settings::lab().proxy());
    let missing = format!("{}-no-such-ns", lab.prefix);
    let metrics = Metrics::new();
    let mut broken =
        Proxy::with(NftBackend::new(config.in_netns(&missing)).with(Measure::new(metrics.clone())));
    let e3_only = "[{addresses: [10.244.3.10], nodeName: node-c}]";
    let err = broken
        .load(&manifest(&[web(e3_only)]))
        .expect_err("no namespace");
    assert!(err.to_string().contains(&missing), "{err}");
    assert_eq!(NftBackend::dump(&lab), before, "nothing changed");
    let failures = metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix("kpng_sync_failures_total "))
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(failures, Some(1.0));

    // The first backend goes on, incrementally.
    proxy.load(&manifest(&[web(e3_only)])).expect("sync");
    assert!(!proxy.backend.last_full());
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.130", 80, 20);
    assert_eq!(endpoints(&lines), [E3.to_string()].into(), "{lines:?}");
}

/// Feeds `script` to `nft -f -` in `ns` (`-c`: only checks it); nft's
/// complaint on failure.
fn nft_file(ns: &str, script: &str, check: bool) -> Result<(), String> {
    use std::io::Write as _;
    let mut args = vec!["netns", "exec", ns, "nft"];
    if check {
        args.push("-c");
    }
    args.extend(["-f", "-"]);
    let mut child = std::process::Command::new("ip")
        .args(&args)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The dry run's text is the transaction the backend sends: nft accepts
/// it (`nft -c`), and applied by nft in another namespace it gives the same
/// ruleset as the netlink batch, for a full sync with every kind of object
/// and for an incremental one that adds and removes Services, affinity,
/// source ranges and endpoints.
#[test]
fn the_dry_run_text_is_what_netlink_applies() {
    require_lab!(NftBackend);
    let mut lab = lab();
    let reference = lab.scratch("ref");
    let mut proxy = Proxy::with(NftBackend::in_lab(&lab, &Settings::lab()).keep_scripts())
        .explained_in(&lab, &Settings::lab(), kpng_explain::DataPath::Nftables);
    let lb = |ranges: &str| {
        kpng_lab::scenarios::service_with_status(
            "lb",
            &format!(
                "{{type: LoadBalancer, clusterIP: 10.96.0.21, externalIPs: [192.0.2.50], externalTrafficPolicy: Local, loadBalancerSourceRanges: [{ranges}], ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30081}}]}}"
            ),
            "{loadBalancer: {ingress: [{ip: 198.51.100.10}]}}",
            ALL3,
        )
    };
    let sticky = |name: &str, ip: &str, eps: &str| {
        service(
            name,
            &format!(
                "{{clusterIP: {ip}, sessionAffinity: ClientIP, ports: [{{name: http, port: 80, targetPort: 8080}}]}}"
            ),
            eps,
        )
    };
    let two = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    let dual = service(
        "dual",
        "{clusterIPs: [10.96.0.5, 'fd00:96::50'], ipFamilies: [IPv4, IPv6], ipFamilyPolicy: RequireDualStack, ports: [{name: http, port: 80, targetPort: 8080, protocol: UDP}]}",
        "[{addresses: ['fd00:244:1::10'], nodeName: node-a}]",
    );
    let first = manifest(&[
        lb("203.0.113.0/24, 198.51.100.0/25"),
        sticky("sticky", "10.96.0.11", ALL3),
        service(
            "np",
            "{type: NodePort, clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}",
            two,
        ),
        service(
            "empty",
            "{clusterIP: 10.96.0.30, ports: [{name: http, port: 80, targetPort: 8080}]}",
            "[]",
        ),
        dual,
    ]);
    let compare = |stage: &str, text: &str| {
        nft_file(&reference, text, true)
            .unwrap_or_else(|e| panic!("{stage}: nft -c refuses the text: {e}\n{text}"));
        nft_file(&reference, text, false).unwrap_or_else(|e| panic!("{stage}: nft -f: {e}"));
        let (netlink, nft) = (
            kpng_lab::Lab::nft_state(&lab.ns("node")),
            kpng_lab::Lab::nft_state(&reference),
        );
        let only = |a: &[String], b: &[String]| -> Vec<String> {
            a.iter().filter(|x| !b.contains(x)).cloned().collect()
        };
        assert!(
            netlink == nft,
            "{stage}: netlink and the text differ:\nonly netlink: {:#?}\nonly nft: {:#?}\nthe text:\n{text}",
            only(&netlink, &nft),
            only(&nft, &netlink)
        );
    };
    proxy.load(&first).expect("sync");
    assert!(proxy.backend.last_full());
    compare("full", &proxy.backend.last_script());

    // Endpoint counts already in use (nft 1.0.6 cannot add a rule that
    // uses a `typeof` map an earlier transaction made, so the text of a
    // new pick chain would not apply through nft; netlink has no such
    // limit): another source range, one affinity Service gone and
    // another come, an endpoint moved, a Service's last endpoint gone.
    let second = manifest(&[
        lb("203.0.113.0/24, 192.0.2.128/26"),
        sticky("sticky2", "10.96.0.12", two),
        service(
            "np",
            "{type: NodePort, clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}",
            "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.3.10], nodeName: node-c}]",
        ),
        service(
            "empty",
            "{clusterIP: 10.96.0.30, ports: [{name: http, port: 80, targetPort: 8080}]}",
            two,
        ),
    ]);
    proxy.load(&second).expect("sync");
    assert!(!proxy.backend.last_full());
    compare("incremental", &proxy.backend.last_script());
}

/// A restart onto the same state finds its tables, read back over
/// netlink, and sends nothing (the affinity sets the data path filled keep
/// their clients); onto another state it replaces them whole.
#[test]
fn a_restart_onto_the_same_state_adopts_the_tables() {
    require_lab!(NftBackend);
    let lab = lab();
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let state = |eps: &str| {
        manifest(&[
            service("web", &format!("{{clusterIP: 10.96.0.150, {port}}}"), eps),
            service(
                "sticky",
                &format!("{{clusterIP: 10.96.0.151, sessionAffinity: ClientIP, {port}}}"),
                ALL3,
            ),
            kpng_lab::scenarios::service_with_status(
                "lb",
                "{type: LoadBalancer, clusterIP: 10.96.0.152, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30152}]}",
                "{loadBalancer: {ingress: [{ip: 198.51.100.152}]}}",
                ALL3,
            ),
        ])
    };
    let without_timers = |ruleset: String| -> Vec<String> {
        ruleset
            .lines()
            .filter(|l| !l.contains("expires"))
            .map(str::to_owned)
            .collect()
    };
    let mut first = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    first.load(&state(ALL3)).expect("sync");
    settle();
    // The data path adds a client to an affinity set.
    let sticky = lab.once("podc", "tcp", "10.96.0.151", 80);
    let before = NftBackend::dump(&lab);
    assert!(
        before.contains("elements = { 10.244.1.99 . ") && before.contains(" timeout 3h expires"),
        "a client in the set:\n{before}"
    );

    // A new process on the same state: nothing sent.
    let mut second = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    second.load(&state(ALL3)).expect("sync");
    let stats = second.backend.last_sync().clone();
    assert!(
        stats.replaced && stats.adopted && stats.commands == 0,
        "{stats:?}"
    );
    let after = NftBackend::dump(&lab);
    assert_eq!(without_timers(after.clone()), without_timers(before));
    assert!(
        after.contains("elements = { 10.244.1.99 . "),
        "the client stays:\n{after}"
    );
    settle();
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.151", 80),
        sticky,
        "affinity kept"
    );
    // It goes on incrementally.
    second
        .load(&state(&format!(
            "[{{addresses: [{E1}], nodeName: node-a}}]"
        )))
        .expect("sync");
    assert!(!second.backend.last_full());

    // A new process on another state: replaced whole.
    let mut third = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    third.load(&state(ALL3)).expect("sync");
    let stats = third.backend.last_sync().clone();
    assert!(
        stats.replaced && !stats.adopted && stats.commands > 0,
        "{stats:?}"
    );
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.150", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
}

/// The bundled sample cluster, programmed over netlink: `nft list ruleset`
/// in the node's namespace names the Service of a Service port's own chain
/// and of its verdict-map and `cluster-ips` elements (comments, as nft
/// writes them), and nft reads them back as it wrote them.
#[test]
fn nft_list_ruleset_names_the_service_of_chains_and_elements() {
    require_lab!(NftBackend);
    let lab = lab();
    let mut proxy = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    proxy.load(kpng_kube::file::SAMPLE_CLUSTER).expect("sync");
    let ruleset = NftBackend::dump(&lab);
    let lines: Vec<&str> = ruleset.lines().map(str::trim).collect();
    // A chain of web/api's own (it has ClientIP affinity or source
    // ranges), its comment first in its body.
    let named_chain = lines
        .windows(2)
        .any(|w| w[0].starts_with("chain ") && w[1].starts_with("comment \"web/api:"));
    assert!(named_chain, "no chain names web/api:\n{ruleset}");
    // kube-dns's UDP port in the set of its class (two endpoints), and
    // its ClusterIP.
    for element in [
        "10.96.0.10 . udp . 53 comment \"kube-system/kube-dns:dns/udp\"",
        "10.96.0.10 comment \"kube-system/kube-dns\"",
    ] {
        assert!(ruleset.contains(element), "{element} in\n{ruleset}");
    }
}

/// The endpoint each line names, in order (`e1 10.244.1.99` → `e1`).
/// Balancing choices with real packets (the `kpng.io/balancing`
/// annotation): Maglev gives a flow (a client's source port) the same
/// endpoint every time, spreads the flows over every endpoint, and when
/// one endpoint leaves keeps the others' flows where they were (random
/// moves most of them); round robin takes the endpoints in turn.
#[test]
fn maglev_keeps_flows_where_they_are_and_round_robin_takes_turns() {
    require_lab!(NftBackend);
    let mut lab = lab();
    let more = [("e4", "10.244.4.10"), ("e5", "10.244.5.10")];
    for (name, ip) in more {
        lab.host(name, &[ip], &[]);
        lab.serve(name, ip);
    }
    let all = [E1, E2, E3, "10.244.4.10", "10.244.5.10"];
    let eps = |ips: &[&str]| {
        let items: Vec<String> = ips
            .iter()
            .map(|ip| format!("{{addresses: [{ip}], nodeName: node-b}}"))
            .collect();
        format!("[{}]", items.join(", "))
    };
    let annotated = |name: &str, ip: &str, how: Option<&str>, ips: &[&str]| {
        let spec =
            format!("{{clusterIP: {ip}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}");
        let text = service(name, &spec, &eps(ips));
        match how {
            Some(how) => text.replace(
                &format!("metadata: {{namespace: t, name: {name}}}"),
                &format!("metadata: {{namespace: t, name: {name}, annotations: {{kpng.io/balancing: {how}}}}}"),
            ),
            None => text,
        }
    };
    let world = |ips: &[&str]| {
        manifest(&[
            annotated("mg", "10.96.0.60", Some("maglev"), ips),
            annotated("rnd", "10.96.0.61", None, ips),
            annotated("rr", "10.96.0.62", Some("round-robin"), ips),
        ])
    };
    let mut proxy = Proxy::<NftBackend>::new(&lab, &Settings::lab());
    proxy.load(&world(&all)).expect("sync");
    settle();

    let ports: Vec<u16> = (21_000..21_150).collect();
    let flows = |ip: &str| reached(&lab.connect_from_ports("podc", ip, 80, &ports));
    let first = flows("10.96.0.60");
    assert_eq!(first.len(), ports.len(), "{first:?}");
    // The same flows again: the same endpoints, flow by flow.
    assert_eq!(flows("10.96.0.60"), first);
    // Each flow's endpoint is the one its slot names: the kernel's hash is
    // `kpng_model::maglev::flow_slot`'s, so every node (and the eBPF
    // programs) picks it too.
    let targets: Vec<(std::net::IpAddr, u16)> = all
        .iter()
        .map(|ip| (ip.parse().expect("ip"), 8080))
        .collect();
    let client: std::net::IpAddr = scenarios::POD_CLIENT.parse().expect("ip");
    let predicted: Vec<String> = kpng_lab::maglev_picks(client, &ports, &targets)
        .into_iter()
        .map(|i| targets[i].0.to_string())
        .collect();
    assert_eq!(first, predicted);
    // Every endpoint has its share of the flows.
    for ep in all {
        let n = first.iter().filter(|e| *e == ep).count();
        assert!(n >= 10, "{ep}: {n} of {} flows", ports.len());
    }
    let random_before = flows("10.96.0.61");

    // Round robin: 25 connections, five to each endpoint.
    let turns = reached(&lab.connect("podc", "tcp", "10.96.0.62", 80, 25));
    for ep in all {
        assert_eq!(turns.iter().filter(|e| *e == ep).count(), 5, "{turns:?}");
    }

    // E3 leaves.
    let rest: Vec<&str> = all.iter().copied().filter(|ip| *ip != E3).collect();
    proxy.load(&world(&rest)).expect("sync");
    settle();
    let kept = |before: &[String], after: &[String]| {
        let stayed: Vec<(&String, &String)> =
            before.iter().zip(after).filter(|(b, _)| *b != E3).collect();
        let same = stayed.iter().filter(|(b, a)| b == a).count();
        (same, stayed.len())
    };
    let after = flows("10.96.0.60");
    assert!(after.iter().all(|e| e != E3), "{after:?}");
    let (same, stayed) = kept(&first, &after);
    assert!(
        same * 100 >= stayed * 90,
        "maglev kept {same} of {stayed} flows"
    );
    let (random_same, random_stayed) = kept(&random_before, &flows("10.96.0.61"));
    assert!(
        random_same * 100 < random_stayed * 60,
        "random kept {random_same} of {random_stayed} flows"
    );
    eprintln!(
        "flows kept when 1 of 5 endpoints left: maglev {same}/{stayed}, random {random_same}/{random_stayed}"
    );
}

/// The pick maps' element counters, read back over netlink, count each
/// connection to a ClusterIP and a NodePort for its endpoint.
#[test]
fn counters_count_each_connection_per_service_port_and_endpoint() {
    require_lab!(NftBackend);
    scenarios::counters_count_each_connection_per_service_port_and_endpoint(
        true,
        |lab| {
            let config = kpng_backend_nft::NftConfig::new(Settings::lab().proxy())
                .in_netns(&lab.ns("node"))
                .counters(true);
            NftBackend::new(config)
        },
        |lab, _: &NftBackend| {
            let config =
                kpng_backend_nft::NftConfig::new(Settings::lab().proxy()).in_netns(&lab.ns("node"));
            kpng_backend_nft::CounterReader::new(&config)
                .counts()
                .expect("counters read")
        },
    );
}

/// With counters off, the pick maps carry none and nothing is counted.
#[test]
fn counters_off_count_nothing() {
    require_lab!(NftBackend);
    let lab = lab();
    let config = kpng_backend_nft::NftConfig::new(Settings::lab().proxy())
        .in_netns(&lab.ns("node"))
        .counters(false);
    let mut proxy = Proxy::with(NftBackend::new(config.clone()));
    let spec = "{clusterIP: 10.96.0.71, ports: [{name: http, port: 80, targetPort: 8080}]}";
    proxy
        .load(&manifest(&[service("web", spec, ALL3)]))
        .expect("sync");
    settle();
    assert_eq!(lab.connect("podc", "tcp", "10.96.0.71", 80, 5).len(), 5);
    let rows = kpng_backend_nft::CounterReader::new(&config)
        .counts()
        .expect("read");
    assert!(rows.is_empty(), "{rows:?}");
    let listed = lab.in_node(&["nft", "list", "ruleset"]);
    assert!(!listed.contains("counter"), "{listed}");
}

/// The `kpng` command, killed when dropped (also when the test fails).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kpng file --input <path> --node node-a [--watch] to-nft` in the lab's
/// node namespace, its log in `log`.
fn kpng_file(
    lab: &kpng_lab::Lab,
    path: &std::path::Path,
    watch: bool,
    log: &std::path::Path,
) -> std::process::Command {
    let mut command = std::process::Command::new("ip");
    command
        .args(["netns", "exec", &lab.ns("node")])
        .arg(kpng_lab::cluster::kpng_binary())
        .args(["file", "--input"])
        .arg(path)
        .args(["--node", "node-a"]);
    if watch {
        command.arg("--watch");
    }
    command
        .args([
            "to-nft",
            "--metrics-bind-address",
            "",
            "--healthz-bind-address",
            "",
        ])
        .env("RUST_LOG", "warn")
        .stderr(std::fs::File::create(log).expect("log"));
    command
}

/// The bad objects of the mixed files: an EndpointSlice address
/// `10.1.2.300`, a Service of type `LoadBalancr`, a Service with two ports
/// named `http`.
fn bad_ones() -> Vec<String> {
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    vec![
        service(
            "odd",
            &format!("{{clusterIP: 10.96.0.62, {port}}}"),
            "[{addresses: [10.1.2.300], nodeName: node-a}]",
        ),
        service(
            "lb",
            &format!("{{type: LoadBalancr, clusterIP: 10.96.0.63, {port}}}"),
            "[{addresses: [10.244.1.10], nodeName: node-a}]",
        ),
        service(
            "dup",
            "{clusterIP: 10.96.0.64, ports: [{name: http, port: 80, targetPort: 8080}, {name: http, port: 81, targetPort: 8080}]}",
            "[{addresses: [10.244.1.10], nodeName: node-a}]",
        ),
    ]
}

/// Bad objects among good ones, with real packets: on a fresh start
/// (`kpng file … to-nft`, once) the good Services serve and the bad ones
/// are skipped (exit 0, all three named with the count); on a running
/// `--watch` node, an edit that adds a good Service and the bad objects
/// serves the good one.
#[test]
fn bad_objects_among_good_ones_are_skipped_and_the_good_ones_serve() {
    require_lab!(NftBackend);
    let lab = lab();
    let dir = std::env::temp_dir().join(format!("kpng-lab-badobj-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("cluster.yaml");
    let log = dir.join("kpng.log");
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = service(
        "web",
        &format!("{{clusterIP: 10.96.0.60, {port}}}"),
        "[{addresses: [10.244.1.10], nodeName: node-a}]",
    );
    let api = service(
        "api",
        &format!("{{clusterIP: 10.96.0.61, {port}}}"),
        "[{addresses: [10.244.2.10], nodeName: node-b}]",
    );
    let mut items = vec![web.clone(), api.clone()];
    items.extend(bad_ones());
    std::fs::write(&path, manifest(&items)).expect("write");

    // A fresh start, once.
    let out = kpng_file(&lab, &path, false, &log).output().expect("kpng");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(out.status.success(), "{logged}");
    assert!(
        logged.contains(
            "3 objects skipped, 8 applied: EndpointSlice t/odd-1, Service t/lb, Service t/dup"
        ),
        "{logged}"
    );
    assert_eq!(
        reached(&lab.connect("podc", "tcp", "10.96.0.60", 80, 2)),
        [E1, E1]
    );
    assert_eq!(
        reached(&lab.connect("podc", "tcp", "10.96.0.61", 80, 1)),
        [E2]
    );
    for (bad, why) in [("10.96.0.63", "type"), ("10.96.0.64", "ports")] {
        let answer = lab.connect("podc", "tcp", bad, 80, 1);
        assert!(
            !answer[0].starts_with("10.244."),
            "{bad} ({why}) served: {answer:?}"
        );
    }

    // A running node: the first state, then an edit adding a good Service
    // and the bad ones.
    std::fs::write(&path, manifest(std::slice::from_ref(&web))).expect("write");
    let _kpng = Running(kpng_file(&lab, &path, true, &log).spawn().expect("kpng"));
    let served = |ip: &str| {
        lab.connect("podc", "tcp", ip, 80, 1)
            .first()
            .is_some_and(|l| l.starts_with("10.244."))
    };
    let until = |ip: &str| {
        (0..100).any(|_| {
            served(ip) || {
                std::thread::sleep(std::time::Duration::from_millis(100));
                false
            }
        })
    };
    assert!(
        until("10.96.0.60"),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    std::fs::write(&path, manifest(&items)).expect("edit");
    assert!(
        until("10.96.0.61"),
        "the good Service of the edit: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        reached(&lab.connect("podc", "tcp", "10.96.0.61", 80, 1)),
        [E2]
    );
    assert!(!served("10.96.0.63") && !served("10.96.0.64"));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("3 objects skipped, 8 applied"), "{logged}");
    let _ = std::fs::remove_dir_all(&dir);
}
