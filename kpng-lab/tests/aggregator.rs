//! The aggregator with real nftables in a lab: a proxy and a firewall
//! publish side by side. Run as root; otherwise each test prints SKIPPED
//! and passes.

use kpng_aggregator::nft::{Fragment, Nft, TableFamily, Value, chain_key};
use kpng_aggregator::{Aggregator, Error};
use kpng_lab::scenarios::{E1, EXT_IN, EXT_OUT, NODE_IP, POD_CLIENT};
use kpng_lab::{Lab, settle, unavailable};
use kpng_netfilter::nft::build::{Load, dnat_to, equals, lookup, verdict};
use kpng_netfilter::nft::{
    BaseChain, ChainHook, ChainType, DataType, Element, Expr, NfVerdict, Set,
};
use kpng_store::MapOp;

fn lab() -> Option<Lab> {
    if let Some(why) = unavailable(&["nft"]) {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let mut lab = Lab::new();
    lab.upstream();
    lab.host("ext", &[EXT_IN], &[NODE_IP]);
    lab.host("ext2", &[EXT_OUT], &[]);
    lab.host("podc", &[POD_CLIENT], &[]);
    lab.host("e1", &[E1], &[]);
    lab.serve("e1", E1);
    Some(lab)
}

fn aggregator(lab: &Lab) -> Aggregator<Nft> {
    let netns = std::path::Path::new("/run/netns").join(lab.ns("node"));
    Aggregator::new(Nft::new(Some(netns)))
}

fn octets(ip: &str) -> Vec<u8> {
    match ip.parse::<std::net::IpAddr>().expect("address") {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn base(kind: ChainType, hook: ChainHook, priority: i32) -> BaseChain {
    BaseChain {
        kind,
        hook,
        priority,
    }
}

/// A minimal proxy's fragment: each VIP DNATed to e1 (`ip daddr VIP
/// meta l4proto tcp th dport 80 dnat to E1:8080`).
fn proxy(vips: &[&str]) -> Fragment {
    let rules: Vec<Vec<Expr>> = vips
        .iter()
        .map(|vip| {
            [
                equals(Load::Daddr(TableFamily::Ip), &octets(vip)),
                equals(Load::L4Proto, &[6]),
                equals(Load::Dport, &80u16.to_be_bytes()),
                dnat_to(E1.parse().expect("e1"), 8080),
            ]
            .concat()
        })
        .collect();
    let mut f = Fragment::new();
    f.table(TableFamily::Ip, "kpng-proxy")
        .base_chain(
            "pre",
            base(ChainType::Nat, ChainHook::Prerouting, -100),
            rules.clone(),
        )
        .base_chain("out", base(ChainType::Nat, ChainHook::Output, -100), rules);
    f
}

/// `ip saddr @blocked drop`.
fn drop_blocked() -> Vec<Expr> {
    [
        lookup(&[Load::Saddr(TableFamily::Ip)], "blocked", None, false),
        verdict(NfVerdict::Drop),
    ]
    .concat()
}

/// A vendor firewall's fragment: drop forwarded traffic from `sources`.
fn firewall(sources: &[&str]) -> Fragment {
    let mut f = Fragment::new();
    let mut t = f.table(TableFamily::Inet, "vendor-fw");
    t.set(Set::new("blocked", DataType::IPV4_ADDR)).base_chain(
        "forward",
        base(ChainType::Filter, ChainHook::Forward, 0),
        [drop_blocked()],
    );
    for s in sources {
        t.element("blocked", Element::key(octets(s)));
    }
    f
}

#[test]
fn a_proxy_and_a_firewall_coexist_and_stay_isolated() {
    let Some(lab) = lab() else { return };
    let mut agg = aggregator(&lab);
    agg.publish("proxy", proxy(&["10.96.0.10"])).expect("proxy");
    agg.publish("firewall", firewall(&[EXT_OUT]))
        .expect("firewall");
    let report = agg.flush();
    assert_eq!(report.transactions, 1, "{report:?}");
    assert!(report.refused.is_empty(), "{report:?}");
    settle();
    // The proxy serves; the firewall drops its one source.
    assert_eq!(
        lab.once("ext", "tcp", "10.96.0.10", 80),
        format!("{E1} {EXT_IN}")
    );
    assert_eq!(lab.once("ext2", "tcp", "10.96.0.10", 80), "TIMEOUT");

    // The proxy cannot delete the firewall's chain, nor publish into its
    // table; the firewall's rules stay.
    let err = agg
        .publish_delta(
            "proxy",
            [MapOp::Delete(chain_key(
                TableFamily::Inet,
                "vendor-fw",
                "forward",
            ))],
        )
        .expect_err("not the proxy's");
    assert!(
        matches!(&err, Error::Conflict { owner, .. } if owner == "firewall"),
        "{err}"
    );
    let mut grab = proxy(&["10.96.0.10"]);
    grab.table(TableFamily::Inet, "vendor-fw")
        .chain("forward", [verdict(NfVerdict::Accept)]);
    assert!(matches!(
        agg.publish("proxy", grab),
        Err(Error::Conflict { .. })
    ));
    assert_eq!(agg.flush().transactions, 0, "nothing changed");
    assert_eq!(lab.once("ext2", "tcp", "10.96.0.10", 80), "TIMEOUT");

    // A restarted firewall publishes its state again: no transaction, and
    // the proxy is not disturbed. Removing the firewall touches only its
    // table.
    assert_eq!(
        agg.publish("firewall", firewall(&[EXT_OUT])).expect("same"),
        None
    );
    assert_eq!(agg.flush().transactions, 0);
    agg.remove("firewall");
    let report = agg.flush();
    assert_eq!(report.transactions, 1);
    let script = agg.subsystem().last_script().to_owned();
    assert!(!script.contains("kpng-proxy"), "{script}");
    settle();
    assert_eq!(
        lab.once("ext2", "tcp", "10.96.0.10", 80),
        format!("{E1} {EXT_OUT}")
    );
    // Back again: one transaction, the drop returns, the proxy serves on.
    agg.publish("firewall", firewall(&[EXT_OUT]))
        .expect("firewall");
    assert_eq!(agg.flush().transactions, 1);
    settle();
    assert_eq!(lab.once("ext2", "tcp", "10.96.0.10", 80), "TIMEOUT");
    assert_eq!(
        lab.once("ext", "tcp", "10.96.0.10", 80),
        format!("{E1} {EXT_IN}")
    );
}

#[test]
fn a_publication_the_kernel_refuses_is_rolled_back_while_others_land() {
    let Some(lab) = lab() else { return };
    let mut agg = aggregator(&lab);
    agg.publish("proxy", proxy(&["10.96.0.10"])).expect("proxy");
    agg.publish("firewall", firewall(&[EXT_OUT]))
        .expect("firewall");
    agg.flush();

    // Both publish; the firewall's new rule passes the aggregator's checks
    // but not the kernel's (masquerade outside a NAT chain).
    agg.publish("proxy", proxy(&["10.96.0.10", "10.96.0.11"]))
        .expect("proxy update");
    let mut bad = firewall(&[EXT_OUT]);
    bad.table(TableFamily::Inet, "vendor-fw").base_chain(
        "forward",
        base(ChainType::Filter, ChainHook::Forward, 0),
        [vec![Expr::Masquerade { flags: 0 }]],
    );
    agg.publish("firewall", bad)
        .expect("passes the aggregator's checks");
    let report = agg.flush();
    assert_eq!(report.applied, vec!["proxy".to_string()], "{report:?}");
    assert_eq!(report.refused.len(), 1, "{report:?}");
    assert_eq!(report.refused[0].0, "firewall");
    assert!(agg.refusal("firewall").is_some());
    // The firewall's state is rolled back to what is applied.
    let published = agg.published("firewall").expect("firewall");
    let forward = published
        .get(&chain_key(TableFamily::Inet, "vendor-fw", "forward"))
        .expect("chain");
    assert!(
        matches!(forward, Value::Chain { rules, .. } if rules == &[drop_blocked()]),
        "{forward:?}"
    );
    settle();
    // The proxy's update landed; the firewall's old rule still drops.
    assert_eq!(
        lab.once("ext", "tcp", "10.96.0.11", 80),
        format!("{E1} {EXT_IN}")
    );
    assert_eq!(lab.once("ext2", "tcp", "10.96.0.11", 80), "TIMEOUT");
    assert_eq!(agg.flush().transactions, 0, "nothing left to do");
}

/// The real nftables backend as one producer: the proxy's Services and a
/// firewall's drop rule coexist, and an endpoint move reaches the kernel
/// as element changes only.
#[test]
fn the_nft_backend_runs_through_the_aggregator_beside_a_firewall() {
    use kpng_aggregator::Publisher;
    use kpng_backend_nft::{NftBackend, NftConfig};

    use kpng_lab::Proxy;
    use std::sync::{Arc, Mutex};

    if lab().is_none() {
        return;
    }
    let lab = kpng_lab::scenarios::lab();
    let agg = Arc::new(Mutex::new(aggregator(&lab)));
    let config = NftConfig::new(kpng_lab::Settings::lab().proxy());
    let mut proxy = Proxy::with(Publisher::new(
        NftBackend::new(config),
        "proxy",
        agg.clone(),
    ));
    agg.lock()
        .expect("lock")
        .publish("firewall", firewall(&[EXT_OUT]))
        .expect("firewall");
    beside(
        &lab,
        &mut proxy,
        &agg,
        ("10.96.0.80", "192.0.2.80"),
        |agg| {
            let script = agg.subsystem().last_script().to_owned();
            assert!(!script.contains("delete table"), "{script}");
            assert!(script.contains("element ip kpng vip-cluster"), "{script}");
            assert!(
                !script.contains("vendor-fw"),
                "the firewall untouched:\n{script}"
            );
        },
    );
}

/// A CNI in another process (python, over the unix socket) publishes its
/// firewall beside the in-process proxy; its bad publication is refused to
/// it with the reason, and the socket is private (0600).
#[test]
fn a_producer_in_another_process_publishes_over_the_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let Some(lab) = lab() else { return };
    let agg = Arc::new(Mutex::new(aggregator(&lab)));
    agg.lock()
        .expect("lock")
        .publish("proxy", proxy(&["10.96.0.10"]))
        .expect("proxy");
    let path = std::env::temp_dir().join(format!("kpng-agg-{}.sock", lab.prefix));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.try_send(()).expect("first flush");
    runtime.spawn(kpng_aggregator::run(
        agg.clone(),
        rx,
        kpng_drive::SyncLimiter::new(Duration::from_millis(50), 2),
    ));
    runtime.spawn({
        let (agg, path) = (agg.clone(), path.clone());
        async move { kpng_aggregator::socket::serve(&path, agg, tx).await }
    });
    for _ in 0..100 {
        if path.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::fs::metadata(&path)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    // The rule `ip saddr @blocked drop` as the kernel's expressions: the
    // source address loaded into register 8 (the first 32-bit one), looked
    // up in the set, then the verdict.
    let cni = r#"
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rw")
def key(obj): return {"table": {"family": sys.argv[4], "name": sys.argv[2]}, "object": obj}
rule = [
  {"payload": {"base": "network", "offset": 12, "len": 4, "dreg": 8}},
  {"lookup": {"sreg": 8, "set": "blocked", "dreg": None, "invert": False}},
  {"immediate": {"dreg": 0, "data": {"verdict": "drop"}}},
]
address = list(socket.inet_aton(sys.argv[3]))
state = [
  {"key": key("table"), "value": {"table": {"epoch": 0}}},
  {"key": key({"set": "blocked"}), "value": {"set": {"name": "blocked", "key": {"id": 7, "len": 4}}}},
  {"key": key({"element": ["blocked", {"key": address}]}), "value": {"element": {}}},
  {"key": key({"chain": "forward"}), "value": {"chain": {"base": {"kind": "filter", "hook": "forward", "priority": 5}, "rules": [rule]}}},
]
f.write(json.dumps({"producer": "cni", "publish": state}) + "\n"); f.flush()
print(f.readline().strip())
"#;
    let publish = |family: &str, table: &str| {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                cni,
                path.to_str().expect("path"),
                table,
                EXT_OUT,
                family,
            ])
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let answer = publish("inet", "cni-fw");
    assert!(answer.starts_with(r#"{"ok":true"#), "{answer}");
    std::thread::sleep(Duration::from_millis(300));
    settle();
    assert_eq!(
        lab.once("ext2", "tcp", "10.96.0.10", 80),
        "TIMEOUT",
        "the CNI drops"
    );
    assert_eq!(
        lab.once("ext", "tcp", "10.96.0.10", 80),
        format!("{E1} {EXT_IN}")
    );

    // Publishing into the proxy's table is refused, with the reason.
    let answer = publish("ip", "kpng-proxy");
    assert!(
        answer.contains(r#""ok":false"#) && answer.contains("belongs to producer proxy"),
        "{answer}"
    );
    drop(runtime);
    let _ = std::fs::remove_file(&path);
}

/// The iptables backend as one producer of an iptables aggregator, beside
/// a CNI's chain that drops one source: both coexist, the CNI cannot touch
/// `KUBE-` chains, and an endpoint move rewrites only the proxy's changed
/// chains.
#[test]
fn the_iptables_backend_runs_through_the_aggregator_beside_a_cni() {
    use kpng_aggregator::Publisher;
    use kpng_aggregator::iptables::{Fragment, Iptables, Runner, Table};
    use kpng_backend_iptables::{IptablesBackend, IptablesConfig};
    use kpng_model::IpFamily;

    use kpng_lab::Proxy;
    use std::sync::{Arc, Mutex};

    if unavailable(&["iptables-restore"]).is_some() || lab().is_none() {
        return;
    }
    let lab = kpng_lab::scenarios::lab();
    let runner = Runner {
        prefix: ["ip", "netns", "exec", &lab.ns("node")]
            .map(String::from)
            .to_vec(),
        mode: None,
        ..Runner::default()
    };
    let agg = Arc::new(Mutex::new(Aggregator::new(Iptables::new(runner))));
    let config = IptablesConfig::new(kpng_lab::Settings::lab().proxy());
    let mut proxy = Proxy::with(Publisher::new(
        IptablesBackend::new(config),
        "proxy",
        agg.clone(),
    ));
    let mut cni = Fragment::new();
    cni.chain(
        IpFamily::V4,
        Table::Filter,
        "CNI-FW",
        [format!("-s {EXT_OUT}/32 -j DROP").as_str()],
    )
    .jump(IpFamily::V4, Table::Filter, "FORWARD", "-j CNI-FW", 0);
    agg.lock().expect("lock").publish("cni", cni).expect("cni");

    beside(
        &lab,
        &mut proxy,
        &agg,
        ("10.96.0.90", "192.0.2.90"),
        |agg| {
            let script = agg.subsystem().last_script().to_owned();
            assert!(
                !script.contains("CNI-FW") && !script.contains(":KUBE-SERVICES"),
                "{script}"
            );
            assert!(script.contains(":KUBE-SVC-"), "{script}");
        },
    );
    // The CNI cannot publish into the proxy's prefix.
    let mut grab = Fragment::new();
    grab.chain(IpFamily::V4, Table::Nat, "KUBE-SERVICES", ["-j RETURN"]);
    let err = agg
        .lock()
        .expect("lock")
        .publish("cni", grab)
        .expect_err("not the CNI's");
    assert!(
        err.to_string().contains("belongs to producer proxy"),
        "{err}"
    );
}

/// What both backends show through an aggregator beside a producer that
/// drops `EXT_OUT`: one transaction for both at first; the proxy's Service
/// (`vip`, externalIP `ext`) reaches all three endpoints while the other
/// producer's drop holds; an endpoint move then writes only the proxy's
/// changes (`moved` checks the aggregator's last script) and lands.
fn beside<B: kpng_aggregator::Producer>(
    lab: &Lab,
    proxy: &mut kpng_lab::Proxy<kpng_aggregator::Publisher<B>>,
    agg: &std::sync::Arc<std::sync::Mutex<Aggregator<B::Subsystem>>>,
    (vip, ext): (&str, &str),
    moved: impl FnOnce(&Aggregator<B::Subsystem>),
) {
    use kpng_lab::endpoints;
    use kpng_lab::scenarios::{ALL3, E2, E3, manifest, service};

    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| {
        service(
            "web",
            &format!("{{clusterIP: {vip}, externalIPs: [{ext}], {port}}}"),
            eps,
        )
    };
    proxy.load(&manifest(&[web(ALL3)])).expect("sync");
    assert_eq!(
        agg.lock().expect("lock").transactions(),
        1,
        "both producers in one"
    );
    settle();
    let lines = lab.connect("podc", "tcp", vip, 80, 30);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
    let line = lab.once("ext", "tcp", ext, 80);
    assert!(
        !line.starts_with("TIMEOUT") && !line.starts_with("REFUSED"),
        "{line}"
    );
    assert_eq!(
        lab.once("ext2", "tcp", ext, 80),
        "TIMEOUT",
        "the other producer drops"
    );

    proxy
        .load(&manifest(&[web(
            "[{addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]",
        )]))
        .expect("sync");
    moved(&agg.lock().expect("lock"));
    settle();
    let lines = lab.connect("podc", "tcp", vip, 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert_eq!(lab.once("ext2", "tcp", ext, 80), "TIMEOUT");
}
