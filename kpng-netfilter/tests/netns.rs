//! nf_tables over netlink in network namespaces these tests create (as
//! root; skipped otherwise): rulesets applied, read back, refused whole,
//! and a real TCP connection through a DNAT chosen by verdict maps.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use kpng_netfilter::Error;
use kpng_netfilter::nft::{
    Chain, ChainHook, ChainType, Data, DataType, Element, Expr, MetaKey, NatKind, NfVerdict,
    PayloadBase, Reg, Rule, Set, Socket, Table, TableFamily, Transaction, key,
};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A network namespace of this test, deleted on drop (also on failure).
struct Netns {
    name: String,
    server: Option<Child>,
}

impl Netns {
    /// `None` (the test is skipped) when not root.
    fn new() -> Option<Self> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: network namespaces need root");
            return None;
        }
        let name = format!(
            "kpngnf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Netns { name, server: None };
        ns.ip(&["netns", "add", &ns.name]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        Some(ns)
    }

    fn ip(&self, args: &[&str]) {
        let status = Command::new("ip").args(args).status().expect("ip runs");
        assert!(status.success(), "ip {args:?}");
    }

    fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{args:?}: {:?}", out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// A TCP server on port 8080 that answers "hello".
    fn serve(&mut self) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "python3", "-c"])
            .arg(
                "import socket\n\
                 s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('0.0.0.0', 8080)); s.listen(16); print('ready', flush=True)\n\
                 while True:\n    c, a = s.accept(); c.sendall(b'hello\\n'); c.close()\n",
            )
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready");
        assert_eq!(line.trim(), "ready");
        self.server = Some(child);
    }

    /// What a TCP connection to `host:port` reads, or the error.
    fn connect(&self, host: &str, port: u16) -> String {
        self.exec(&[
            "python3",
            "-c",
            &format!(
                "import socket\ns = socket.socket(); s.settimeout(2)\n\
                 try:\n    s.connect(('{host}', {port})); print(s.recv(100).decode().strip())\n\
                 except Exception as e:\n    print('ERROR', type(e).__name__)\n"
            ),
        ])
        .trim()
        .to_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// `nft list table` of `table` in `ns`, one line per rule, words single
/// spaced, counters without their numbers.
fn listed(ns: &Netns, table: &Table) -> String {
    let text = ns.exec(&["nft", "list", "table", table.family.name(), &table.name]);
    let mut out = String::new();
    for line in text.lines() {
        let mut words = line.split_whitespace().peekable();
        let mut kept = Vec::new();
        while let Some(word) = words.next() {
            kept.push(word);
            if word == "counter" && words.peek() == Some(&"packets") {
                // "packets N bytes M"
                words.nth(3);
            }
        }
        out.push_str(&kept.join(" "));
        out.push('\n');
    }
    out
}

/// Every rule `tx` adds is listed by nft as its `Display` writes it.
fn rules_read_as_written(ns: &Netns, table: &Table, rules: &[Rule]) {
    let listed = listed(ns, table);
    for rule in rules {
        let text = rule.to_string();
        assert!(listed.contains(&text), "{text:?} not in:\n{listed}");
    }
}

/// The rules of `chain` as read back, each decoded into expressions.
fn decoded(state: &kpng_netfilter::nft::TableState, chain: &str) -> Vec<Vec<Option<Expr>>> {
    state
        .chain(chain)
        .expect("chain")
        .rules
        .iter()
        .map(|r| r.exprs.iter().map(|e| e.decode()).collect())
        .collect()
}

/// The rules `tx`'s ruleset puts in `chain`, as sent.
fn sent(rules: &[Rule], chain: &str) -> Vec<Vec<Option<Expr>>> {
    rules
        .iter()
        .filter(|r| r.chain == chain)
        .map(|r| r.exprs.iter().cloned().map(Some).collect())
        .collect()
}

const DADDR: Expr = Expr::Payload {
    base: PayloadBase::Network,
    offset: 16,
    len: 4,
    dreg: Reg::r32(0),
};

/// kpng's shape in small: a Service map (address . protocol . port to
/// verdict), a Service chain that picks an endpoint chain by numgen
/// through a second map, and an endpoint chain that DNATs.
fn service_ruleset(table: &Table) -> Transaction {
    let services = DataType::concat(&[
        DataType::IPV4_ADDR,
        DataType::INET_PROTO,
        DataType::INET_SERVICE,
    ]);
    let mut tx = Transaction::new();
    // Replace the table whole, whether or not it exists.
    tx.add_table(table).delete_table(table).add_table(table);
    tx.add_chain(
        table,
        Chain::base("nat-output", ChainType::Nat, ChainHook::Output, -100),
    )
    .add_chain(table, Chain::regular("svc"))
    .add_chain(table, Chain::regular("ep0"))
    .add_set(table, Set::verdict_map("services", services))
    .add_set(table, Set::verdict_map("pick", DataType::INTEGER))
    .add_elements(
        table,
        "services",
        vec![Element::map(
            key(&[&[10, 99, 0, 1], &[6], &80u16.to_be_bytes()]),
            Data::Verdict(NfVerdict::Goto("svc".into())),
        )],
    )
    .add_elements(
        table,
        "pick",
        vec![Element::map(
            0u32.to_ne_bytes().to_vec(),
            Data::Verdict(NfVerdict::Goto("ep0".into())),
        )],
    )
    .add_rule(
        table,
        Rule::new(
            "nat-output",
            vec![
                DADDR,
                Expr::Meta {
                    key: MetaKey::L4Proto,
                    dreg: Reg::r32(1),
                },
                Expr::Payload {
                    base: PayloadBase::Transport,
                    offset: 2,
                    len: 2,
                    dreg: Reg::r32(2),
                },
                Expr::Lookup {
                    sreg: Reg::r32(0),
                    set: "services".into(),
                    dreg: Some(Reg::VERDICT),
                    invert: false,
                },
            ],
        ),
    )
    .add_rule(
        table,
        Rule::new(
            "svc",
            vec![
                Expr::Numgen {
                    modulus: 1,
                    random: true,
                    offset: 0,
                    dreg: Reg::r32(0),
                },
                Expr::Lookup {
                    sreg: Reg::r32(0),
                    set: "pick".into(),
                    dreg: Some(Reg::VERDICT),
                    invert: false,
                },
            ],
        ),
    )
    .add_rule(
        table,
        Rule::new(
            "ep0",
            vec![
                Expr::Counter,
                Expr::Immediate {
                    dreg: Reg::r32(0),
                    data: Data::Value(vec![10, 99, 0, 2]),
                },
                Expr::Immediate {
                    dreg: Reg::r32(1),
                    data: Data::Value(8080u16.to_be_bytes().to_vec()),
                },
                Expr::Nat {
                    kind: NatKind::Dnat,
                    family: TableFamily::Ip,
                    addr: Some(Reg::r32(0)),
                    proto: Some(Reg::r32(1)),
                    flags: 0,
                },
            ],
        ),
    );
    tx
}

#[test]
fn a_ruleset_applies_reads_back_and_carries_a_real_connection() {
    let Some(mut ns) = Netns::new() else { return };
    // 10.99.0.2 is this namespace's; 10.99.0.1, the Service address, is
    // nobody's (routed to lo, then dropped) until the DNAT rewrites it.
    ns.exec(&["ip", "addr", "add", "10.99.0.2/24", "dev", "lo"]);
    ns.serve();
    assert_ne!(ns.connect("10.99.0.1", 80), "hello", "no rules yet");

    let table = Table::new(TableFamily::Ip, "kpngtest");
    let mut socket = Socket::open(Some(&ns.path())).expect("socket in the namespace");
    socket.commit(service_ruleset(&table)).expect("applied");
    assert_eq!(ns.connect("10.99.0.1", 80), "hello");
    rules_read_as_written(&ns, &table, &service_ruleset(&table).rules());

    let state = socket.read(&table).expect("read").expect("the table");
    let mut chains: Vec<&str> = state.chains.iter().map(|c| c.name.as_str()).collect();
    chains.sort_unstable();
    assert_eq!(chains, ["ep0", "nat-output", "svc"]);
    let output = state.chain("nat-output").expect("chain");
    assert_eq!(output.hook, Some((ChainHook::Output, -100)));
    let names: Vec<&str> = output.rules[0]
        .exprs
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["payload", "meta", "payload", "lookup"]);
    // Every rule reads back as the expressions that were sent.
    let ep0 = decoded(&state, "ep0");
    assert_eq!(ep0.len(), 1);
    assert!(ep0[0].iter().all(Option::is_some), "{ep0:?}");
    assert!(matches!(
        ep0[0][3],
        Some(Expr::Nat {
            kind: NatKind::Dnat,
            addr: Some(_),
            proto: Some(_),
            ..
        })
    ));
    let services = state.set("services").expect("map");
    assert_eq!(services.elements.len(), 1);
    assert_eq!(
        services.elements[0].data,
        Some(Data::Verdict(NfVerdict::Goto("svc".into())))
    );
    assert_eq!(
        services.elements[0].key,
        key(&[&[10, 99, 0, 1], &[6], &80u16.to_be_bytes()])
    );
    // nft reads the same ruleset back (a check by another implementation).
    let listed = ns.exec(&["nft", "list", "table", "ip", "kpngtest"]);
    assert!(
        listed.contains("10.99.0.1 . 6 . 80 : goto svc")
            || listed.contains("10.99.0.1 . tcp . 80 : goto svc"),
        "{listed}"
    );
    assert!(listed.contains("dnat to 10.99.0.2:8080"), "{listed}");

    // Applying the same replacement again leaves one copy of everything.
    socket
        .commit(service_ruleset(&table))
        .expect("applied again");
    let again = socket.read(&table).expect("read").expect("the table");
    assert_eq!(again.chains.len(), 3);
    assert_eq!(again.set("services").expect("map").elements.len(), 1);
    assert_eq!(ns.connect("10.99.0.1", 80), "hello");

    // A Service that goes: its element is deleted, connections fail again.
    let mut tx = Transaction::new();
    tx.delete_elements(
        &table,
        "services",
        vec![Element::key(key(&[
            &[10, 99, 0, 1],
            &[6],
            &80u16.to_be_bytes(),
        ]))],
    );
    socket.commit(tx).expect("deleted");
    assert_ne!(ns.connect("10.99.0.1", 80), "hello");
}

#[test]
fn a_refused_batch_changes_nothing_and_names_what_was_refused() {
    let Some(ns) = Netns::new() else { return };
    let table = Table::new(TableFamily::Ip, "kpngtest");
    let mut socket = Socket::open(Some(&ns.path())).expect("socket");
    socket.commit(service_ruleset(&table)).expect("applied");
    let before = socket.read(&table).expect("read");

    // A new element, then a rule that jumps to a chain that does not exist.
    let mut tx = Transaction::new();
    tx.add_elements(
        &table,
        "pick",
        vec![Element::map(
            1u32.to_ne_bytes().to_vec(),
            Data::Verdict(NfVerdict::Goto("ep0".into())),
        )],
    )
    .add_rule(&table, Rule::new("svc", vec![Expr::Counter]))
    .add_rule(
        &table,
        Rule::new(
            "svc",
            vec![Expr::verdict(NfVerdict::Jump("missing".into()))],
        ),
    );
    let error = socket.commit(tx).expect_err("refused");
    match &error {
        Error::Refused { what, source, .. } => {
            assert_eq!(
                what,
                "add rule 2 of this batch to chain svc of table ip kpngtest (immediate)"
            );
            assert_eq!(source.raw_os_error(), Some(libc_enoent()));
        }
        other => panic!("{other}"),
    }
    assert!(error.to_string().contains(&ns.name), "{error}");
    // Nothing of the batch was applied, not even the element before it.
    assert_eq!(socket.read(&table).expect("read"), before);

    // The socket goes on working after a refusal.
    let mut tx = Transaction::new();
    tx.add_rule(&table, Rule::new("svc", vec![Expr::Counter]));
    socket.commit(tx).expect("applied");
    let state = socket.read(&table).expect("read").expect("table");
    assert_eq!(state.chain("svc").expect("chain").rules.len(), 2);

    // A table that is not there reads as none.
    let other = Table::new(TableFamily::Ip6, "kpngtest");
    assert_eq!(socket.read(&other).expect("read"), None);
}

fn libc_enoent() -> i32 {
    2
}

/// Every expression kpng's rulesets use, in one table: the kernel accepts
/// each, and `nft` (another implementation) lists each as the nft rule it
/// stands for.
#[test]
fn every_expression_the_backends_use_is_accepted_and_reads_as_nft_writes_it() {
    use kpng_netfilter::nft::{CmpOp, CtKey, DynsetOp, FibResult, RejectKind};
    let Some(ns) = Netns::new() else { return };
    let table = Table::new(TableFamily::Ip, "kpngx");
    let r0 = Reg::r32(0);
    let mark = 0x4000u32.to_ne_bytes().to_vec();
    let saddr = Expr::Payload {
        base: PayloadBase::Network,
        offset: 12,
        len: 4,
        dreg: r0,
    };
    let mut tx = Transaction::new();
    tx.add_table(&table)
        .add_chain(
            &table,
            Chain::base("post", ChainType::Nat, ChainHook::Postrouting, 100),
        )
        .add_chain(
            &table,
            Chain::base("filter", ChainType::Filter, ChainHook::Forward, 0),
        )
        .add_set(&table, Set::new("ranges", DataType::IPV4_ADDR).intervals())
        .add_set(&table, Set::new("aff", DataType::IPV4_ADDR).with_timeouts())
        .add_elements(
            &table,
            "ranges",
            vec![
                Element::key(vec![10, 0, 0, 0]),
                Element {
                    interval_end: true,
                    ..Element::key(vec![11, 0, 0, 0])
                },
            ],
        )
        // meta mark & 0x4000 == 0 return
        .add_rule(
            &table,
            Rule::new(
                "post",
                vec![
                    Expr::Meta {
                        key: MetaKey::Mark,
                        dreg: r0,
                    },
                    Expr::Bitwise {
                        sreg: r0,
                        dreg: r0,
                        mask: mark.clone(),
                        xor: vec![0; 4],
                    },
                    Expr::Cmp {
                        sreg: r0,
                        op: CmpOp::Eq,
                        data: vec![0; 4],
                    },
                    Expr::verdict(NfVerdict::Return),
                ],
            ),
        )
        // meta mark set meta mark ^ 0x4000; masquerade fully-random
        .add_rule(
            &table,
            Rule::new(
                "post",
                vec![
                    Expr::Meta {
                        key: MetaKey::Mark,
                        dreg: r0,
                    },
                    Expr::Bitwise {
                        sreg: r0,
                        dreg: r0,
                        mask: vec![0xff; 4],
                        xor: mark,
                    },
                    Expr::MetaSet {
                        key: MetaKey::Mark,
                        sreg: r0,
                    },
                    Expr::Masquerade { flags: 16 },
                ],
            ),
        )
        // ct state new fib daddr type local counter
        .add_rule(
            &table,
            Rule::new(
                "filter",
                vec![
                    Expr::Ct {
                        key: CtKey::State,
                        dreg: r0,
                    },
                    Expr::Bitwise {
                        sreg: r0,
                        dreg: r0,
                        mask: 8u32.to_ne_bytes().to_vec(),
                        xor: vec![0; 4],
                    },
                    Expr::Cmp {
                        sreg: r0,
                        op: CmpOp::Neq,
                        data: vec![0; 4],
                    },
                    Expr::Fib {
                        flags: 2,
                        result: FibResult::AddrType,
                        dreg: r0,
                    },
                    // RTN_LOCAL
                    Expr::Cmp {
                        sreg: r0,
                        op: CmpOp::Eq,
                        data: 2u32.to_ne_bytes().to_vec(),
                    },
                    Expr::Counter,
                ],
            ),
        )
        // ip saddr @ranges accept
        .add_rule(
            &table,
            Rule::new(
                "filter",
                vec![
                    saddr.clone(),
                    Expr::Lookup {
                        sreg: r0,
                        set: "ranges".into(),
                        dreg: None,
                        invert: false,
                    },
                    Expr::verdict(NfVerdict::Accept),
                ],
            ),
        )
        // update @aff { ip saddr timeout 10s }
        .add_rule(
            &table,
            Rule::new(
                "filter",
                vec![
                    saddr,
                    Expr::Dynset {
                        op: DynsetOp::Update,
                        set: "aff".into(),
                        key: r0,
                        timeout_ms: Some(10_000),
                    },
                ],
            ),
        )
        // reject with icmp port-unreachable; drop
        .add_rule(
            &table,
            Rule::new("filter", vec![Expr::Reject(RejectKind::Icmp(3))]),
        )
        .add_rule(
            &table,
            Rule::new("filter", vec![Expr::verdict(NfVerdict::Drop)]),
        );
    let mut socket = Socket::open(Some(&ns.path())).expect("socket");
    socket
        .commit(tx.clone())
        .expect("every expression accepted");
    let rules = tx.rules();
    rules_read_as_written(&ns, &table, &rules);

    let listed = ns.exec(&["nft", "list", "table", "ip", "kpngx"]);
    for rule in [
        "meta mark & 0x00004000 == 0x00000000 return",
        "meta mark set meta mark ^ 0x00004000",
        "masquerade fully-random",
        "ct state new fib daddr type local counter packets 0 bytes 0",
        "ip saddr @ranges accept",
        "update @aff { ip saddr timeout 10s }",
        "reject",
        "drop",
        "elements = { 10.0.0.0/8 }",
        "type nat hook postrouting priority srcnat; policy accept;",
        "type filter hook forward priority filter; policy accept;",
    ] {
        assert!(listed.contains(rule), "{rule:?} not in:\n{listed}");
    }
    let state = socket.read(&table).expect("read").expect("table");
    // The kernel's dump decodes into exactly the expressions sent.
    for chain in ["post", "filter"] {
        assert_eq!(decoded(&state, chain), sent(&rules, chain), "{chain}");
    }
    let ranges = state.set("ranges").expect("set");
    assert!(ranges.interval);
    assert!(state.set("aff").expect("set").timeout);
}

/// A large batch the kernel refuses in every message (elements of a set
/// that does not exist): its answers must not overflow the socket, and
/// the error must name the first refused change.
#[test]
fn a_large_refused_batch_is_reported_as_refused() {
    let Some(ns) = Netns::new() else { return };
    let table = Table::new(TableFamily::Ip, "kpngbig");
    let mut socket = Socket::open(Some(&ns.path())).expect("socket");
    let mut tx = Transaction::new();
    tx.add_table(&table);
    socket.commit(tx).expect("table");
    let mut tx = Transaction::new();
    tx.add_elements(
        &table,
        "nope",
        (0..50_000u32)
            .map(|i| Element::key(i.to_be_bytes().to_vec()))
            .collect(),
    );
    match socket.commit(tx).expect_err("refused") {
        Error::Refused { what, source, .. } => {
            assert!(what.starts_with("add elements 0.."), "{what}");
            assert!(what.ends_with("of set nope of table ip kpngbig"), "{what}");
            assert_eq!(source.raw_os_error(), Some(libc_enoent()));
        }
        other => panic!("{other}"),
    }
}

/// The rule pieces of `nft::build`, applied: the kernel takes each, and
/// nft lists each as its `Display` writes it.
#[test]
fn build_pieces_apply_and_read_as_nft_lists_them() {
    use kpng_netfilter::nft::CtKey;
    use kpng_netfilter::nft::build::{self, Load};
    let Some(ns) = Netns::new() else { return };
    let table = Table::new(TableFamily::Ip, "kpngbuild");
    let vip = [Load::Daddr(TableFamily::Ip), Load::L4Proto, Load::Dport];
    let pick = [
        Load::Daddr(TableFamily::Ip),
        Load::L4Proto,
        Load::Dport,
        Load::Random(2),
    ];
    let key = |types: &[DataType]| DataType::concat(types);
    let vip_type = key(&[
        DataType::IPV4_ADDR,
        DataType::INET_PROTO,
        DataType::INET_SERVICE,
    ]);
    let pick_type = key(&[
        DataType::IPV4_ADDR,
        DataType::INET_PROTO,
        DataType::INET_SERVICE,
        DataType::MARK,
    ]);
    let target = key(&[DataType::IPV4_ADDR, DataType::INET_SERVICE]);
    let rules = vec![
        Rule::new(
            "nat",
            build::lookup(&vip, "service-ips", Some(Reg::VERDICT), false),
        ),
        Rule::new("nat", build::dnat_map(TableFamily::Ip, &pick, "pick")),
        Rule::new(
            "nat",
            build::dnat_to("10.99.0.2".parse().expect("ip"), 8080),
        ),
        Rule::new(
            "filter",
            [
                build::lookup(&[Load::Saddr(TableFamily::Ip)], "cidrs", None, true),
                build::mark_set_or(0x4000),
            ]
            .concat(),
        ),
        Rule::new(
            "filter",
            [
                build::mark_test(0x4000, false),
                build::verdict(NfVerdict::Return),
            ]
            .concat(),
        ),
        Rule::new("filter", build::mark_set_xor(0x4000)),
        Rule::new(
            "filter",
            [
                build::ct_test(CtKey::State, 8),
                build::fib_local(true),
                build::verdict(NfVerdict::Accept),
            ]
            .concat(),
        ),
        Rule::new(
            "filter",
            [
                build::ct_test(CtKey::Status, 32),
                build::verdict(NfVerdict::Drop),
            ]
            .concat(),
        ),
    ];
    let mut tx = Transaction::new();
    tx.add_table(&table)
        .add_chain(
            &table,
            Chain::base("nat", ChainType::Nat, ChainHook::Prerouting, -100),
        )
        .add_chain(
            &table,
            Chain::base("filter", ChainType::Filter, ChainHook::Forward, 0),
        )
        .add_set(&table, Set::verdict_map("service-ips", vip_type))
        .add_set(
            &table,
            Set {
                map: Some(kpng_netfilter::nft::MapTo::Value(target)),
                ..Set::new("pick", pick_type)
            },
        )
        .add_set(&table, Set::new("cidrs", DataType::IPV4_ADDR).intervals());
    for rule in &rules {
        tx.add_rule(&table, rule.clone());
    }
    let mut socket = Socket::open(Some(&ns.path())).expect("socket");
    socket.commit(tx).expect("every piece accepted");
    rules_read_as_written(&ns, &table, &rules);
    let state = socket.read(&table).expect("read").expect("table");
    for chain in ["nat", "filter"] {
        assert_eq!(decoded(&state, chain), sent(&rules, chain), "{chain}");
    }
}
