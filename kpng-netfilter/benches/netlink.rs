//! A kpng-shaped ruleset at 10k Services × 10 endpoints, applied into an
//! empty network namespace and then over itself (a restart), through
//! netlink and through `nft -f` in the same run. Each variant runs in a
//! process of its own; its time and the peak RSS of its whole process tree
//! (itself, and for `nft -f` the `nft` child) are printed, with ratios.
//!
//! ```text
//! cargo bench -p kpng-netfilter --bench netlink [-- --services 10000 --endpoints 10]
//! ```
//!
//! Run as root (it creates and deletes a network namespace); otherwise it
//! prints SKIPPED. Both variants program the same objects: a verdict map
//! of Service addresses (`ip daddr . meta l4proto . th dport`), one value
//! map of endpoint targets keyed by Service and a random index (the pick
//! map), a set of ClusterIPs, and ten shared chains that DNAT through the
//! pick map.
#![allow(missing_docs, clippy::unwrap_used, unsafe_code)]

use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

use kpng_netfilter::nft::build::{self, Load};
use kpng_netfilter::nft::{
    Chain, ChainHook, ChainType, Data, DataType, Element, MapTo, NfVerdict, Reg, Rule, Set, Socket,
    Table, TableFamily, Transaction, key,
};
use kpng_netfilter::process::Process;

fn num(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .skip_while(|a| *a != name)
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vip(s: usize) -> [u8; 4] {
    let n = s + 1;
    [10, 96, (n / 256) as u8, (n % 256) as u8]
}

fn endpoint(s: usize, e: usize, per: usize) -> [u8; 4] {
    let n = s * per + e + 1;
    [
        10,
        128 + (n / 65536) as u8,
        ((n / 256) % 256) as u8,
        (n % 256) as u8,
    ]
}

fn dotted(ip: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

/// The pick chain for `n` endpoints: DNAT to the target the pick map holds
/// for (address, protocol, port, random index below n).
fn pick_rule(n: usize) -> Rule {
    let key = [
        Load::Daddr(TableFamily::Ip),
        Load::L4Proto,
        Load::Dport,
        Load::Random(n as u32),
    ];
    Rule::new(
        format!("pick-{n}"),
        build::dnat_map(TableFamily::Ip, &key, "pick"),
    )
}

fn transaction(services: usize, per: usize) -> Transaction {
    let table = Table::new(TableFamily::Ip, "kpngb");
    let vips = DataType::concat(&[
        DataType::IPV4_ADDR,
        DataType::INET_PROTO,
        DataType::INET_SERVICE,
    ]);
    // The random index as a `mark`: a 32-bit type of fixed length, so that
    // `nft list` can split the concatenation (with `integer`, nft 1.0.6
    // aborts listing the map).
    let pick_key = DataType::concat(&[
        DataType::IPV4_ADDR,
        DataType::INET_PROTO,
        DataType::INET_SERVICE,
        DataType::MARK,
    ]);
    let target = DataType::concat(&[DataType::IPV4_ADDR, DataType::INET_SERVICE]);
    let mut tx = Transaction::new();
    tx.add_table(&table).delete_table(&table).add_table(&table);
    tx.add_chain(
        &table,
        Chain::base(
            "nat-prerouting",
            ChainType::Nat,
            ChainHook::Prerouting,
            -100,
        ),
    );
    tx.add_set(&table, Set::verdict_map("service-ips", vips))
        .add_set(&table, Set::new("cluster-ips", DataType::IPV4_ADDR))
        .add_set(
            &table,
            Set {
                map: Some(MapTo::Value(target)),
                ..Set::new("pick", pick_key)
            },
        );
    for n in 1..=10 {
        tx.add_chain(&table, Chain::regular(format!("pick-{n}")));
        tx.add_rule(&table, pick_rule(n));
    }
    let port = 80u16.to_be_bytes();
    let mut services_map = Vec::with_capacity(services);
    let mut ips = Vec::with_capacity(services);
    let mut picks = Vec::with_capacity(services * per);
    for s in 0..services {
        let ip = vip(s);
        services_map.push(Element::map(
            key(&[&ip, &[6], &port]),
            Data::Verdict(NfVerdict::Goto(format!("pick-{}", per.clamp(1, 10)))),
        ));
        ips.push(Element::key(ip.to_vec()));
        for e in 0..per {
            picks.push(Element::map(
                key(&[&ip, &[6], &port, &(e as u32).to_ne_bytes()]),
                Data::Value(key(&[&endpoint(s, e, per), &8080u16.to_be_bytes()])),
            ));
        }
    }
    tx.add_elements(&table, "service-ips", services_map)
        .add_elements(&table, "cluster-ips", ips)
        .add_elements(&table, "pick", picks);
    let vip = [Load::Daddr(TableFamily::Ip), Load::L4Proto, Load::Dport];
    tx.add_rule(
        &table,
        Rule::new(
            "nat-prerouting",
            build::lookup(&vip, "service-ips", Some(Reg::VERDICT), false),
        ),
    );
    tx
}

/// The same ruleset as an `nft -f` script, as the nft backend writes it.
fn script(services: usize, per: usize) -> String {
    let t = "ip kpngb";
    let mut out = format!("add table {t}\ndelete table {t}\nadd table {t}\n");
    let _ = writeln!(
        out,
        "add chain {t} nat-prerouting {{ type nat hook prerouting priority dstnat; policy accept; }}"
    );
    let _ = writeln!(
        out,
        "add map {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; }}"
    );
    let _ = writeln!(out, "add set {t} cluster-ips {{ type ipv4_addr; }}");
    let _ = writeln!(
        out,
        "add map {t} pick {{ typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport; }}"
    );
    for n in 1..=10 {
        let _ = writeln!(out, "add chain {t} pick-{n}");
        let _ = writeln!(
            out,
            "add rule {t} pick-{n} dnat ip to ip daddr . meta l4proto . th dport . numgen random mod {n} map @pick"
        );
    }
    let chunk = |out: &mut String, set: &str, items: Vec<String>| {
        for c in items.chunks(1024) {
            let _ = writeln!(out, "add element {t} {set} {{ {} }}", c.join(", "));
        }
    };
    let mut services_map = Vec::new();
    let mut ips = Vec::new();
    let mut picks = Vec::new();
    for s in 0..services {
        let ip = dotted(vip(s));
        services_map.push(format!("{ip} . tcp . 80 : goto pick-{}", per.clamp(1, 10)));
        ips.push(ip.clone());
        for e in 0..per {
            picks.push(format!(
                "{ip} . tcp . 80 . {e} : {} . 8080",
                dotted(endpoint(s, e, per))
            ));
        }
    }
    chunk(&mut out, "service-ips", services_map);
    chunk(&mut out, "cluster-ips", ips);
    chunk(&mut out, "pick", picks);
    let _ = writeln!(
        out,
        "add rule {t} nat-prerouting ip daddr . meta l4proto . th dport vmap @service-ips"
    );
    out
}

/// `a . 0x00000003 : b` as `a . 3 : b`.
fn decimal_index(item: &str) -> String {
    let mut out = String::new();
    for (i, part) in item.split(" . ").enumerate() {
        if i > 0 {
            out.push_str(" . ");
        }
        let (head, tail) = part.split_once(' ').unwrap_or((part, ""));
        match head
            .strip_prefix("0x")
            .and_then(|h| u32::from_str_radix(h, 16).ok())
        {
            Some(n) if tail.is_empty() || tail.starts_with(':') => {
                out.push_str(&n.to_string());
                if !tail.is_empty() {
                    out.push(' ');
                    out.push_str(tail);
                }
            }
            _ => out.push_str(part),
        }
    }
    out
}

fn peak_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn children_peak_kib() -> u64 {
    // SAFETY: getrusage writes one struct through a valid pointer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    if rc == 0 {
        u64::try_from(usage.ru_maxrss).unwrap_or(0)
    } else {
        0
    }
}

/// One variant, in this process: prints `seconds self_kib children_kib`.
fn variant(kind: &str, ns: &str, services: usize, per: usize) {
    let path = std::path::PathBuf::from(format!("/run/netns/{ns}"));
    let start = Instant::now();
    match kind {
        "netlink" => {
            let tx = transaction(services, per);
            let mut socket = Socket::open(Some(&path)).unwrap();
            socket.commit(tx).unwrap();
        }
        _ => {
            let text = script(services, per);
            Process::new(["ip", "netns", "exec", ns, "nft", "-f", "-"])
                .input(text.as_bytes())
                .run()
                .unwrap();
        }
    }
    println!(
        "{:.3} {} {}",
        start.elapsed().as_secs_f64(),
        peak_kib("VmHWM:"),
        children_peak_kib()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let services = num(&args, "--services", 10_000);
    let per = num(&args, "--endpoints", 10);
    if let Some(kind) = args.iter().skip_while(|a| *a != "--variant").nth(1) {
        let ns = args.iter().skip_while(|a| *a != "--ns").nth(1).unwrap();
        variant(kind, ns, services, per);
        return;
    }
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        println!("SKIPPED: network namespaces need root");
        return;
    }
    let ns = format!("kpngnf-bench-{}", std::process::id());
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    assert!(
        Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap()
            .success()
    );
    let _del = Del(ns.clone());
    let run = |kind: &str| -> (f64, f64, f64) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--variant", kind, "--ns", &ns])
            .args(["--services", &services.to_string()])
            .args(["--endpoints", &per.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{kind}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        (v[0], v[1] / 1024.0, v[2] / 1024.0)
    };
    let flush = || {
        let _ = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "flush", "ruleset"])
            .status();
    };
    println!(
        "kpng-netfilter: {services} Services x {per} endpoints ({} elements), one transaction, into a namespace",
        services * (per + 2)
    );
    // What each variant left, as nft lists it (element lists split and
    // sorted): both must have programmed the same ruleset. They declare the
    // pick map differently (nft: `typeof`; netlink: the index as a `mark`,
    // which nft prints in hex), so type lines are left out and hex indices
    // read as numbers.
    let listed = || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns, "nft", "list", "table", "ip", "kpngb"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut items: Vec<String> = text
            .split([',', '\n', '{', '}'])
            .map(|s| decimal_index(s.trim()))
            .filter(|s| !s.is_empty() && !s.starts_with("type"))
            .collect();
        items.sort_unstable();
        items
    };
    let mut lists = Vec::new();
    let mut rows = Vec::new();
    for (label, kind, empty) in [
        ("nft -f, empty kernel", "nft", true),
        ("netlink, empty kernel", "netlink", true),
        ("nft -f, replacing the same ruleset", "nft", false),
        ("netlink, replacing the same ruleset", "netlink", false),
    ] {
        if empty {
            flush();
        }
        let (secs, own, child) = run(kind);
        println!(
            "{label:<38} {secs:>6.2} s   peak RSS: process {own:>6.1} MiB, nft child {child:>6.1} MiB, tree {:>6.1} MiB",
            own + child
        );
        rows.push((secs, own + child));
        lists.push(listed());
    }
    assert!(
        lists[0] == lists[1] && lists[2] == lists[3],
        "the variants programmed different rulesets"
    );
    println!(
        "netlink / nft -f: time {:.2} (empty), {:.2} (replace); tree peak RSS {:.2} (empty), {:.2} (replace)",
        rows[1].0 / rows[0].0,
        rows[3].0 / rows[2].0,
        rows[1].1 / rows[0].1,
        rows[3].1 / rows[2].1
    );
    println!(
        "{{\"services\":{services},\"endpoints\":{per},\"nft_s\":{:.3},\"netlink_s\":{:.3},\"nft_replace_s\":{:.3},\"netlink_replace_s\":{:.3},\"nft_tree_mib\":{:.1},\"netlink_tree_mib\":{:.1}}}",
        rows[0].0, rows[1].0, rows[2].0, rows[3].0, rows[0].1, rows[1].1
    );
}
