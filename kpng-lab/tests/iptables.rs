//! The iptables backend in the lab: the scenarios every backend passes,
//! then what only iptables has (its modes, a refused restore). Run as
//! root; otherwise each test prints SKIPPED and passes.

use kpng_backend_iptables::IptablesBackend;

kpng_lab::scenario_tests!(IptablesBackend);

/// The same scenarios with iptables-legacy.
mod legacy {
    kpng_lab::scenario_tests!(kpng_lab::LegacyIptables);
}

/// The same scenarios in the compact layout (in the lab's mode:
/// `KPNG_LAB_IPTABLES_MODE=legacy` for iptables-legacy).
mod compact {
    kpng_lab::scenario_tests!(kpng_lab::CompactIptables);
}

use kpng_backend_iptables::{IptablesConfig, Layout, Mode};
use kpng_lab::scenarios::{ALL3, E1, E3, lab, manifest, service};
use kpng_lab::{LabBackend, Proxy, Settings, endpoints, iptables_tool, require_lab, settle};

fn iptables_config(lab: &kpng_lab::Lab, mode: Option<Mode>) -> IptablesConfig {
    let mut config = IptablesConfig::new(Settings::lab().proxy());
    config.mode = mode;
    config.in_netns(&lab.ns("node"))
}

const PORT: &str = "ports: [{name: http, port: 80, targetPort: 8080}]";

fn web(ip: &str, eps: &str) -> String {
    service("web", &format!("{{clusterIP: {ip}, {PORT}}}"), eps)
}

/// With legacy rules already on the node, the mode is detected as legacy
/// (kube-proxy's rule), the rules land there and not in nf_tables, and
/// packets flow.
#[test]
fn the_mode_in_use_is_detected_and_legacy_works() {
    require_lab!(IptablesBackend);
    let lab = lab();
    lab.in_node(&[
        "iptables-legacy",
        "-A",
        "INPUT",
        "-s",
        "192.0.2.99",
        "-j",
        "ACCEPT",
    ]);
    let mut proxy = Proxy::with(IptablesBackend::new(iptables_config(&lab, None))).explained_in(
        &lab,
        &Settings::lab(),
        kpng_explain::DataPath::Iptables,
    );
    proxy
        .load(&manifest(&[web("10.96.0.70", ALL3)]))
        .expect("sync");
    assert_eq!(proxy.backend.mode(), Some(Mode::Legacy));
    assert!(
        lab.in_node(&["iptables-legacy-save"])
            .contains(":KUBE-SERVICES")
    );
    assert!(
        !lab.in_node(&["iptables-nft-save"])
            .contains("KUBE-SERVICES")
    );
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.70", 80, 30);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
}

/// A partial sync rewrites the changed Service's chains only; chains and
/// rules of others are never touched, and stale chains of ours (left by an
/// earlier run) are removed by the first sync.
#[test]
fn partial_syncs_rewrite_only_changed_chains_and_others_rules_survive() {
    require_lab!(IptablesBackend);
    let lab = lab();
    // Someone else's chain and rules, and a stale chain of an earlier run.
    let iptables = iptables_tool("iptables");
    for args in [
        &[&*iptables, "-t", "nat", "-N", "KUBE-KUBELET-CANARY"][..],
        &[&iptables, "-N", "VENDOR-FW"],
        &[
            &iptables,
            "-A",
            "VENDOR-FW",
            "-s",
            "192.0.2.66",
            "-j",
            "DROP",
        ],
        &[&iptables, "-A", "FORWARD", "-j", "VENDOR-FW"],
        &[&iptables, "-t", "nat", "-N", "KUBE-SVC-STALESTALESTALE0"],
    ] {
        lab.in_node(args);
    }
    let mut proxy = Proxy::<IptablesBackend>::new(&lab, &Settings::lab());
    let other = service(
        "other",
        &format!("{{clusterIP: 10.96.0.71, {PORT}}}"),
        "[{addresses: [10.244.2.10], nodeName: node-b}]",
    );
    proxy
        .load(&manifest(&[web("10.96.0.70", ALL3), other.clone()]))
        .expect("sync");
    assert!(proxy.backend.last_sync().replaced);
    let saved = IptablesBackend::dump(&lab);
    assert!(
        !saved.contains("KUBE-SVC-STALESTALESTALE0"),
        "stale chain removed"
    );

    // One endpoint goes: only that Service's balancing chain and the gone
    // endpoint's chain change; the dispatch chains stay as they were.
    proxy
        .load(&manifest(&[
            web(
                "10.96.0.70",
                "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.3.10], nodeName: node-c}]",
            ),
            other,
        ]))
        .expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(
        !stats.replaced && stats.chains == 2,
        "{stats:?}\n{}",
        proxy.backend.last_script()
    );
    assert!(!proxy.backend.last_script().contains("KUBE-SERVICES"));
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.70", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E3].map(String::from).into(),
        "{lines:?}"
    );

    // Everything goes: our chains are emptied, theirs stay.
    proxy.load(&manifest(&[])).expect("sync");
    let saved = IptablesBackend::dump(&lab);
    for theirs in [
        ":KUBE-KUBELET-CANARY",
        ":VENDOR-FW",
        "-A VENDOR-FW -s 192.0.2.66/32 -j DROP",
        "-A FORWARD -j VENDOR-FW",
    ] {
        assert!(saved.contains(theirs), "{theirs} kept:\n{saved}");
    }
    assert!(!saved.contains("KUBE-SVC-"), "{saved}");
}

/// A restore the kernel refuses leaves the previous rules in place, in
/// both tables (iptables-restore commits table by table: the backend puts
/// back what the first table applied), and the retry converges once the
/// cause is gone.
#[test]
fn a_refused_restore_keeps_the_old_rules_and_the_retry_converges() {
    require_lab!(IptablesBackend);
    let lab = lab();
    let mut proxy = Proxy::<IptablesBackend>::new(&lab, &Settings::lab());
    proxy
        .load(&manifest(&[web("10.96.0.72", ALL3)]))
        .expect("sync");
    // Someone jumps to our Service chain: deleting it will be refused.
    let saved = IptablesBackend::dump(&lab);
    let svc_chain = saved
        .lines()
        .find_map(|l| l.strip_prefix(":KUBE-SVC-"))
        .and_then(|l| l.split_whitespace().next())
        .map(|s| format!("KUBE-SVC-{s}"))
        .expect("a KUBE-SVC chain");
    let iptables = iptables_tool("iptables");
    lab.in_node(&[
        &iptables,
        "-t",
        "nat",
        "-A",
        "OUTPUT",
        "-d",
        "192.0.2.77",
        "-j",
        &svc_chain,
    ]);

    // The Service is replaced by another (filter and nat both change).
    let newcomer = service(
        "new",
        &format!("{{clusterIP: 10.96.0.73, {PORT}}}"),
        "[{addresses: [10.244.3.10], nodeName: node-c}]",
    );
    let err = proxy
        .load(&manifest(std::slice::from_ref(&newcomer)))
        .expect_err("restore refused");
    assert!(err.to_string().contains("iptables"), "{err}");
    settle();
    // The old Service still works; the new one is not there: its address
    // is still an unallocated one, dropped (not rejected, as the filter
    // table's half of the change would have it).
    let lines = lab.connect("podc", "tcp", "10.96.0.72", 80, 20);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
    assert_eq!(lab.once("podc", "tcp", "10.96.0.73", 80), "TIMEOUT");
    assert_eq!(lab.once("podc", "tcp", "10.96.0.73", 81), "TIMEOUT");

    // The cause goes; the retry is a full sync and converges.
    lab.in_node(&[
        &iptables,
        "-t",
        "nat",
        "-D",
        "OUTPUT",
        "-d",
        "192.0.2.77",
        "-j",
        &svc_chain,
    ]);
    proxy.load(&manifest(&[newcomer])).expect("retry");
    assert!(proxy.backend.last_sync().replaced);
    settle();
    assert!(lab.once("podc", "tcp", "10.96.0.73", 80).starts_with(E3));
    assert_eq!(lab.once("podc", "tcp", "10.96.0.72", 80), "TIMEOUT");
    assert!(!IptablesBackend::dump(&lab).contains(&svc_chain));
}

/// A restore killed for its timeout is reported as a failed sync that
/// changed nothing: the previous rules stay and serve, and the next sync,
/// a full one, applies the change once the timeout allows it. (The
/// timeout was a fixed 60 s, not settable: 50k x 10 could never sync.)
#[test]
fn a_timed_out_restore_keeps_the_old_rules_and_the_retry_converges() {
    require_lab!(IptablesBackend);
    let lab = lab();
    let mut proxy = Proxy::with(IptablesBackend::new(iptables_config(&lab, None))).explained_in(
        &lab,
        &Settings::lab(),
        kpng_explain::DataPath::Iptables,
    );
    proxy
        .load(&manifest(&[web("10.96.0.74", ALL3)]))
        .expect("sync");
    // iptables-save's comments carry the time.
    let dump = || {
        IptablesBackend::dump(&lab)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let before = dump();

    // --iptables-restore-timeout 1ms: the next restore is killed.
    proxy
        .backend
        .set_restore_timeout(Some(std::time::Duration::from_millis(1)));
    let newcomer = service(
        "new",
        &format!("{{clusterIP: 10.96.0.75, {PORT}}}"),
        "[{addresses: [10.244.3.10], nodeName: node-c}]",
    );
    // With 300 more Services of 10 endpoints (3,300 chains), the restore
    // takes far longer than 1 ms whatever the machine's load, so it is
    // always still running at its deadline (a one-Service restore could
    // finish before the runner looked).
    let mut large: Vec<String> = (0..300)
        .map(|i| {
            let eps: Vec<String> = (1..=10)
                .map(|j| format!("{{addresses: [10.250.{}.{j}], nodeName: node-c}}", i % 250))
                .collect();
            service(
                &format!("bulk-{i}"),
                &format!("{{clusterIP: 10.96.{}.{}, {PORT}}}", 2 + i / 250, i % 250),
                &format!("[{}]", eps.join(", ")),
            )
        })
        .collect();
    large.push(newcomer.clone());
    let err = proxy.load(&manifest(&large)).expect_err("restore killed");
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        text = format!("{text}: {e}");
        source = e.source();
    }
    assert!(text.contains("did not finish within"), "{text}");
    assert_eq!(dump(), before, "nothing changed");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.74", 80, 20);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
    assert_eq!(lab.once("podc", "tcp", "10.96.0.75", 80), "TIMEOUT");

    // The timeout scales again: the retry is a full sync and converges.
    proxy.backend.set_restore_timeout(None);
    proxy.load(&manifest(&[newcomer])).expect("retry");
    assert!(proxy.backend.last_sync().replaced);
    settle();
    assert!(lab.once("podc", "tcp", "10.96.0.75", 80).starts_with(E3));
    assert_eq!(lab.once("podc", "tcp", "10.96.0.74", 80), "TIMEOUT");
}

/// A first sync declaring more than a thousand nat chains goes to
/// iptables-nft with `-S` first (see kpng-netfilter's iptables module):
/// it applies whole, and the Services serve.
#[test]
fn a_large_first_sync_on_iptables_nft_applies_whole() {
    require_lab!(IptablesBackend);
    let lab = lab();
    // 100 Services x 10 endpoints: 1,100 nat chains; the last one real.
    let mut items: Vec<String> = (0..100)
        .map(|i| {
            let eps: Vec<String> = (1..=10)
                .map(|j| format!("{{addresses: [10.250.{i}.{j}], nodeName: node-c}}"))
                .collect();
            service(
                &format!("bulk-{i}"),
                &format!("{{clusterIP: 10.96.1.{i}, {PORT}}}"),
                &format!("[{}]", eps.join(", ")),
            )
        })
        .collect();
    items.push(web("10.96.0.76", ALL3));
    let mut proxy = Proxy::with(IptablesBackend::new(iptables_config(&lab, Some(Mode::Nft))))
        .explained_in(&lab, &Settings::lab(), kpng_explain::DataPath::Iptables);
    proxy.load(&manifest(&items)).expect("sync");
    let saved = lab.in_node(&["iptables-nft-save", "-t", "nat"]);
    let chains = saved
        .lines()
        .filter(|l| l.starts_with(":KUBE-SEP-") || l.starts_with(":KUBE-SVC-"))
        .count();
    assert_eq!(chains, 100 * 11 + 3 + 1, "every chain applied");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.76", 80, 30);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
}

/// The layout changes between syncs, both ways, with iptables-nft and
/// -legacy: the sync after the change rewrites every chain, the other
/// layout's KUBE-SEP chains go in that same restore, and the Service
/// serves every endpoint before and after. In the compact layout only
/// the endpoint on this node (E1, for hairpin) keeps its chain.
#[test]
fn the_layout_switches_between_syncs_and_the_old_endpoint_chains_go() {
    require_lab!(kpng_lab::LegacyIptables);
    require_lab!(IptablesBackend);
    for mode in [Mode::Nft, Mode::Legacy] {
        let lab = lab();
        let config = iptables_config(&lab, Some(mode)).layout(Layout::KubeProxy);
        let mut proxy = Proxy::with(IptablesBackend::new(config));
        let save = format!(
            "iptables-{}-save",
            if mode == Mode::Nft { "nft" } else { "legacy" }
        );
        let nat = || lab.in_node(&[&save, "-t", "nat"]);
        let sep_chains = |text: &str| text.lines().filter(|l| l.starts_with(":KUBE-SEP-")).count();
        let direct = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with("-A KUBE-SVC-") && l.contains("-j DNAT"))
                .count()
        };
        let serves_all = || {
            settle();
            let lines = lab.connect("podc", "tcp", "10.96.0.78", 80, 30);
            assert_eq!(endpoints(&lines).len(), 3, "{mode:?}: {lines:?}");
        };
        let other = service(
            "other",
            &format!("{{clusterIP: 10.96.0.79, {PORT}}}"),
            "[{addresses: [10.244.3.10], nodeName: node-c}]",
        );
        proxy
            .load(&manifest(&[web("10.96.0.78", ALL3)]))
            .expect("sync");
        assert!(!proxy.backend.last_sync().compact);
        let text = nat();
        assert_eq!((sep_chains(&text), direct(&text)), (3, 0), "{text}");
        serves_all();

        // To compact: an incremental round (a Service more) is written in full.
        proxy.backend.set_layout(Layout::Compact);
        proxy
            .load(&manifest(&[web("10.96.0.78", ALL3), other.clone()]))
            .expect("sync");
        let stats = proxy.backend.last_sync().clone();
        assert!(stats.replaced && stats.compact, "{stats:?}");
        let text = nat();
        // web: E2 and E3 DNATed from KUBE-SVC, E1 (this node) keeps its
        // chain; other: E3 DNATed.
        assert_eq!((sep_chains(&text), direct(&text)), (1, 3), "{text}");
        assert!(
            text.contains(&format!("-j DNAT --to-destination {E3}:8080")),
            "{text}"
        );
        serves_all();
        assert!(lab.once("podc", "tcp", "10.96.0.79", 80).starts_with(E3));

        // An incremental round stays incremental in the compact layout.
        proxy
            .load(&manifest(&[web("10.96.0.78", ALL3)]))
            .expect("sync");
        assert!(!proxy.backend.last_sync().replaced);
        // Its address is an unallocated one again: dropped.
        assert_eq!(lab.once("podc", "tcp", "10.96.0.79", 80), "TIMEOUT");

        // And back.
        proxy.backend.set_layout(Layout::KubeProxy);
        proxy
            .load(&manifest(&[web("10.96.0.78", ALL3), other]))
            .expect("sync");
        let stats = proxy.backend.last_sync().clone();
        assert!(stats.replaced && !stats.compact, "{stats:?}");
        let text = nat();
        assert_eq!((sep_chains(&text), direct(&text)), (4, 0), "{text}");
        serves_all();
    }
}
