//! The swap from kube-proxy: once kpng has synced, kube-proxy's own rules
//! (its nftables tables and its iptables chains, in both families and
//! both iptables flavours) are gone, kubelet's and anything else's stay;
//! `--keep-kube-proxy-rules` keeps them; a dry run changes nothing.
//!
//! Each test makes a network namespace of its own and loads there what
//! kube-proxy and kubelet leave on a node (generated here, in their
//! layouts), then runs the kpng binary in it once.

mod support;

use std::process::Command;
use support::Namespace;

impl Namespace {
    /// What `tool-save` shows, without its comment lines (dates).
    fn save(&self, tool: &str) -> String {
        self.run(&[&format!("{tool}-save")], None)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// The nftables tables: `family name` lines.
    fn nft_tables(&self) -> Vec<String> {
        self.run(&["nft", "list", "tables"], None)
            .lines()
            .filter_map(|l| l.strip_prefix("table "))
            .map(str::to_owned)
            .collect()
    }

    /// The whole node state: each iptables' save and the nftables tables
    /// other than kpng's.
    fn state(&self) -> String {
        let mut out = String::new();
        for tool in TOOLS {
            out.push_str(&format!("== {tool}\n{}", self.save(tool)));
        }
        for table in self.nft_tables() {
            if table.ends_with(" kpng") {
                continue;
            }
            out.push_str(&format!("== nft {table}\n"));
            out.push_str(&self.run(&["sh", "-c", &format!("nft list table {table}")], None));
        }
        if have_ipset() {
            out.push_str("== ipset\n");
            out.push_str(&self.run(&["ipset", "save"], None));
        }
        out
    }

    /// Runs the kpng binary in the namespace: exit code, stderr.
    fn kpng(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, env!("CARGO_BIN_EXE_kpng")])
            .args(args)
            // kpng's own log level: each removal shows there.
            .env_remove("RUST_LOG")
            .output()
            .expect("kpng");
        let (code, _, stderr) = support::text(&out);
        (code, stderr)
    }
}

const TOOLS: [&str; 4] = [
    "iptables-nft",
    "ip6tables-nft",
    "iptables-legacy",
    "ip6tables-legacy",
];

/// kube-proxy's iptables mode on a node (its `iptables-save`, trimmed to
/// one Service with one endpoint and the fixed chains), with kubelet's
/// chains beside it and a chain of the operator's own. `ip`: the address
/// family's words.
fn node_iptables(v6: bool, kubelet_mark_drop: bool) -> String {
    let (cluster_ip, pod, pod_net, host) = if v6 {
        (
            "fd00:10:96::a",
            "fd00:10:244:1::5",
            "fd00:10:244::/56",
            "::1",
        )
    } else {
        ("10.96.0.10", "10.244.1.5", "10.244.0.0/16", "127.0.0.0/8")
    };
    let loopback = if v6 {
        String::new()
    } else {
        format!(
            "-A KUBE-FIREWALL ! -s {host} -d {host} -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n"
        )
    };
    // An older node: kubelet's KUBE-MARK-DROP, and a CNI chain that
    // relies on kube-proxy's KUBE-MARK-MASQ.
    let (mark_drop_chain, mark_drop_rule) = if kubelet_mark_drop {
        (
            ":KUBE-MARK-DROP - [0:0]\n:CNI-HOSTPORT-MASQ - [0:0]\n",
            "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000\n-A CNI-HOSTPORT-MASQ -s 10.244.0.0/16 -j KUBE-MARK-MASQ\n",
        )
    } else {
        ("", "")
    };
    format!(
        r#"*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
:MY-CHAIN - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 2222 -j MY-CHAIN
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
{loopback}-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A MY-CHAIN -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
{mark_drop_chain}:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SEP-5OJB2KTYBCMG4LQF - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ULMVA6XW5HTNQV4V - [0:0]
:MY-NAT - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -p tcp -m tcp --dport 2222 -j MY-NAT
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
{mark_drop_rule}-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SEP-5OJB2KTYBCMG4LQF -s {pod} -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-5OJB2KTYBCMG4LQF -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination {pod_dnat}
-A KUBE-SERVICES -d {cluster_ip} -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ULMVA6XW5HTNQV4V
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-ULMVA6XW5HTNQV4V ! -s {pod_net} -d {cluster_ip} -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-ULMVA6XW5HTNQV4V -m comment --comment "default/web:http -> {pod_port}" -j KUBE-SEP-5OJB2KTYBCMG4LQF
-A MY-NAT -j RETURN
COMMIT
"#,
        pod_dnat = if v6 {
            format!("[{pod}]:8080")
        } else {
            format!("{pod}:8080")
        },
        pod_port = if v6 {
            format!("[{pod}]:8080")
        } else {
            format!("{pod}:8080")
        },
    )
}

/// kube-proxy's ipvs mode in ip6tables (its `KUBE-6-` ipsets), trimmed.
const IPVS_MODE_IP6TABLES: &str = r#"*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-6-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-6-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-SERVICES ! -s fd00:10:244::/56 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j ACCEPT
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-PROXY-FIREWALL -m set --match-set KUBE-6-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
COMMIT
"#;

/// kube-proxy's ipvs-mode ipsets (IPv6), and one of the operator's own.
const IPSETS: &str = "create KUBE-6-CLUSTER-IP hash:ip,port family inet6
add KUBE-6-CLUSTER-IP fd00:10:96::a,tcp:80
create KUBE-6-LOOP-BACK hash:ip,port,ip family inet6
create KUBE-6-LOAD-BALANCER hash:ip,port family inet6
create KUBE-6-LOAD-BALANCER-FW hash:ip,port family inet6
create KUBE-6-IPVS-IPS hash:ip family inet6
create KUBE-6-NODE-PORT-TCP bitmap:port range 0-65535
create KUBE-6-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535
create my-set hash:ip
";

/// Whether the `ipset` tool is here.
fn have_ipset() -> bool {
    Command::new("ipset").arg("version").output().is_ok()
}

/// kube-proxy's nftables mode (`table ip kube-proxy`, trimmed to one
/// Service) in `family`, and a table of the operator's own.
fn node_nft(family: &str) -> String {
    let (cluster_ip, pod, addr) = if family == "ip6" {
        ("fd00:10:96::a", "[fd00:10:244:1::5]", "ipv6_addr")
    } else {
        ("10.96.0.10", "10.244.1.5", "ipv4_addr")
    };
    let daddr = if family == "ip6" { "ip6" } else { "ip" };
    format!(
        r#"add table {family} kube-proxy {{ comment "rules for kube-proxy" ; }}
add chain {family} kube-proxy mark-for-masquerade
add chain {family} kube-proxy masquerading
add chain {family} kube-proxy services
add chain {family} kube-proxy service-ULMVA6XW-default/web/tcp/http
add chain {family} kube-proxy endpoint-5OJB2KTY-default/web/tcp/http__pod/8080
add chain {family} kube-proxy nat-prerouting {{ type nat hook prerouting priority dstnat ; }}
add chain {family} kube-proxy nat-output {{ type nat hook output priority -100 ; }}
add chain {family} kube-proxy nat-postrouting {{ type nat hook postrouting priority srcnat ; }}
add set {family} kube-proxy cluster-ips {{ type {addr} ; comment "Active ClusterIPs" ; }}
add map {family} kube-proxy service-ips {{ type {addr} . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }}
add element {family} kube-proxy cluster-ips {{ {cluster_ip} }}
add element {family} kube-proxy service-ips {{ {cluster_ip} . tcp . 80 : goto service-ULMVA6XW-default/web/tcp/http }}
add rule {family} kube-proxy mark-for-masquerade mark set mark or 0x4000
add rule {family} kube-proxy masquerading mark and 0x4000 == 0 return
add rule {family} kube-proxy masquerading mark set mark xor 0x4000
add rule {family} kube-proxy masquerading masquerade fully-random
add rule {family} kube-proxy services {daddr} daddr . meta l4proto . th dport vmap @service-ips
add rule {family} kube-proxy nat-prerouting jump services
add rule {family} kube-proxy nat-output jump services
add rule {family} kube-proxy nat-postrouting jump masquerading
add rule {family} kube-proxy service-ULMVA6XW-default/web/tcp/http numgen random mod 1 vmap {{ 0 : goto endpoint-5OJB2KTY-default/web/tcp/http__pod/8080 }}
add rule {family} kube-proxy endpoint-5OJB2KTY-default/web/tcp/http__pod/8080 meta l4proto tcp dnat to {pod}:8080
add table inet mine
add chain inet mine input {{ type filter hook input priority 10 ; }}
add rule inet mine input tcp dport 2222 accept
"#
    )
}

/// One Service (the ClusterIP kube-proxy's stale rules hold) whose
/// endpoint has moved.
fn manifest(tag: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{tag}.yaml"));
    std::fs::write(
        &path,
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: default, name: web}
  spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: default, name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.7], nodeName: node-a}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#,
    )
    .expect("manifest");
    path
}

/// A namespace holding what kube-proxy (iptables mode in iptables-nft,
/// both families; an older one in iptables-legacy, IPv4; nftables mode in
/// `ip` and `ip6`) and kubelet leave on a node, beside the operator's own.
fn node(tag: &str) -> Option<Namespace> {
    let ns = Namespace::new(tag)?;
    ns.run(
        &["iptables-nft-restore", "-w", "5"],
        Some(&node_iptables(false, false)),
    );
    ns.run(
        &["ip6tables-nft-restore", "-w", "5"],
        Some(&node_iptables(true, false)),
    );
    ns.run(
        &["iptables-legacy-restore", "-w", "5"],
        Some(&node_iptables(false, true)),
    );
    if have_ipset() {
        ns.run(&["ipset", "restore"], Some(IPSETS));
        ns.run(
            &["ip6tables-legacy-restore", "-w", "5"],
            Some(IPVS_MODE_IP6TABLES),
        );
    } else {
        eprintln!("no ipset: kube-proxy's ipvs mode not loaded");
    }
    // An interface of kube-ipvs0's name that is not kube-proxy's dummy
    // (this kernel has no dummy interfaces): not kube-proxy's, so it stays.
    ns.run(
        &[
            "ip",
            "link",
            "add",
            "kube-ipvs0",
            "type",
            "veth",
            "peer",
            "name",
            "kpv-peer",
        ],
        None,
    );
    ns.run(&["nft", "-f", "-"], Some(&node_nft("ip")));
    ns.run(&["nft", "-f", "-"], Some(&node_nft("ip6")));
    Some(ns)
}

/// The chain names of one `iptables-save`.
fn chains(save: &str) -> Vec<&str> {
    save.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

const KUBE_PROXYS: [&str; 9] = [
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-FORWARD",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-PROXY-FIREWALL",
    "KUBE-PROXY-CANARY",
    "KUBE-SVC-ULMVA6XW5HTNQV4V",
];

fn run_args(input: &std::path::Path, sink: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "file",
        "--input",
        &input.display().to_string(),
        "--node",
        "node-a",
        sink,
        "--once",
        "--healthz-bind-address=",
        "--metrics-bind-address=",
        "--no-conntrack-cleanup",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// kpng (to-nft) removes kube-proxy's nftables tables and its iptables
/// chains and jumps of both families and flavours, logging each; kubelet's
/// chains and the operator's chains and table stay; kpng's table is there.
#[test]
fn after_its_first_sync_kpng_removes_kube_proxys_rules_and_nothing_else() {
    let Some(ns) = node("kpsw") else {
        return;
    };
    let input = manifest(&ns.name);
    let args = run_args(&input, "to-nft", &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stderr) = ns.kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    let tables = ns.nft_tables();
    assert!(tables.contains(&"ip kpng".to_owned()), "{tables:?}");
    assert!(tables.contains(&"inet mine".to_owned()), "{tables:?}");
    assert!(
        !tables.iter().any(|t| t.ends_with(" kube-proxy")),
        "{tables:?}"
    );
    let kpng = ns.run(&["nft", "list", "table", "ip", "kpng"], None);
    assert!(kpng.contains("10.244.2.7"), "kpng's own rules: {kpng}");
    for tool in TOOLS {
        let save = ns.save(tool);
        let names = chains(&save);
        if tool == "ip6tables-legacy" {
            assert!(!names.iter().any(|c| c.starts_with("KUBE-")), "{save}");
            continue;
        }
        for kube_proxys in KUBE_PROXYS {
            if tool == "iptables-legacy" && kube_proxys == "KUBE-MARK-MASQ" {
                // The CNI's chain jumps to it: kept, and said so.
                assert!(names.contains(&kube_proxys), "{save}");
                assert!(save.contains("-A KUBE-MARK-MASQ -j MARK"), "{save}");
                assert!(
                    stderr.contains("kept=iptables-legacy nat chain KUBE-MARK-MASQ"),
                    "{stderr}"
                );
                continue;
            }
            assert!(
                !names.contains(&kube_proxys),
                "{tool}: {kube_proxys}\n{save}"
            );
        }
        assert!(!names.iter().any(|c| c.starts_with("KUBE-SEP-")), "{save}");
        assert!(!save.contains("kubernetes"), "kube-proxy's jumps: {save}");
        for kept in ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "MY-CHAIN", "MY-NAT"] {
            assert!(names.contains(&kept), "{tool}: {kept}\n{save}");
        }
        assert!(save.contains("-A INPUT -j KUBE-FIREWALL"), "{save}");
        assert!(save.contains("-A OUTPUT -j KUBE-FIREWALL"), "{save}");
        assert!(save.contains("--dport 2222 -j MY-CHAIN"), "{save}");
        assert!(save.contains("--dport 2222 -j MY-NAT"), "{save}");
        // An older kubelet's KUBE-MARK-DROP is not kube-proxy's.
        if tool == "iptables-legacy" {
            assert!(names.contains(&"KUBE-MARK-DROP"), "{save}");
        }
        assert!(
            stderr.contains(&format!("removed={tool} nat chain KUBE-SERVICES")),
            "{stderr}"
        );
    }
    ns.run(&["ip", "link", "show", "dev", "kube-ipvs0"], None);
    if have_ipset() {
        let sets = ns.run(&["ipset", "list", "-n"], None);
        assert_eq!(sets.trim(), "my-set", "{stderr}");
        for logged in [
            "removed=ipset KUBE-6-CLUSTER-IP",
            "removed=ip6tables-legacy filter chain KUBE-IPVS-FILTER",
            "removed=ip6tables-legacy nat chain KUBE-NODE-PORT",
        ] {
            assert!(stderr.contains(logged), "{logged} in {stderr}");
        }
    }
    for logged in [
        "removed=nftables table ip kube-proxy",
        "removed=nftables table ip6 kube-proxy",
        "removed=iptables-nft nat rule `-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES`",
        "removed=iptables-legacy mangle chain KUBE-PROXY-CANARY",
    ] {
        assert!(stderr.contains(logged), "{logged} in {stderr}");
    }
    let _ = std::fs::remove_file(&input);
}

/// In to-iptables, kpng's own `KUBE-` chains (kube-proxy's names) stay and
/// are kpng's: only kube-proxy's commented jumps, its canary, and its chains
/// in the other iptables go.
#[test]
fn to_iptables_keeps_its_own_kube_chains() {
    let Some(ns) = node("kpswi") else {
        return;
    };
    let input = manifest(&ns.name);
    let args = run_args(&input, "to-iptables", &["--iptables-mode", "nft"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stderr) = ns.kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    let save = ns.save("iptables-nft");
    let names = chains(&save);
    for own in ["KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"] {
        assert!(names.contains(&own), "{own}: {save}");
    }
    assert!(save.contains("-A PREROUTING -j KUBE-SERVICES"), "{save}");
    assert!(save.contains("10.244.2.7"), "kpng's endpoint: {save}");
    assert!(!save.contains("KUBE-SVC-ULMVA6XW5HTNQV4V"), "{save}");
    assert!(!save.contains("kubernetes service portals"), "{save}");
    assert!(!names.contains(&"KUBE-PROXY-CANARY"), "{save}");
    for kept in ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "MY-CHAIN"] {
        assert!(names.contains(&kept), "{kept}: {save}");
    }
    let legacy = ns.save("iptables-legacy");
    assert!(!chains(&legacy).contains(&"KUBE-SERVICES"), "{legacy}");
    assert!(chains(&legacy).contains(&"KUBE-FIREWALL"), "{legacy}");
    assert!(!ns.nft_tables().iter().any(|t| t.ends_with(" kube-proxy")));
    let _ = std::fs::remove_file(&input);
}

/// `--keep-kube-proxy-rules`: everything of kube-proxy's stays.
#[test]
fn the_keep_flag_keeps_kube_proxys_rules() {
    let Some(ns) = node("kpswk") else {
        return;
    };
    let input = manifest(&ns.name);
    let before = ns.state();
    let args = run_args(&input, "to-nft", &["--keep-kube-proxy-rules"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stderr) = ns.kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(ns.nft_tables().contains(&"ip kpng".to_owned()));
    assert_eq!(ns.state(), before, "{stderr}");
    let _ = std::fs::remove_file(&input);
}

/// A dry run changes nothing, and says what it would remove.
#[test]
fn a_dry_run_lists_kube_proxys_rules_and_removes_nothing() {
    let Some(ns) = node("kpswd") else {
        return;
    };
    let input = manifest(&ns.name);
    let before = ns.state();
    for sink in ["to-nft", "to-iptables"] {
        let args = run_args(&input, sink, &["--dry-run"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = ns.kpng(&args);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(ns.state(), before, "{sink}: {stderr}");
        for listed in [
            "would_remove=nftables table ip kube-proxy",
            "would_remove=iptables-legacy nat chain KUBE-SVC-ULMVA6XW5HTNQV4V",
            "would_remove=ip6tables-nft filter chain KUBE-PROXY-CANARY",
        ] {
            assert!(stderr.contains(listed), "{sink}: {listed} in {stderr}");
        }
        assert!(!stderr.contains("removed="), "{stderr}");
    }
    assert!(!ns.nft_tables().iter().any(|t| t.ends_with(" kpng")));
    let _ = std::fs::remove_file(&input);
}
