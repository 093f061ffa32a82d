//! The backend against real iptables, in a network namespace of the
//! test's own (removed on drop). Needs root and iptables; otherwise the
//! test prints SKIPPED and passes.

use std::collections::BTreeSet;
use std::process::Command;

use kpng_backend_iptables::{IptablesBackend, IptablesConfig};
use kpng_model::IpFamily;
use kpng_model::view::NodeView;
use kpng_sink::{ProxyConfig, Round, Sink};
use kpng_view::node_view;

const NODE: &str = "node-0";

/// A network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Option<Self> {
        let name = format!("kpng-ipt-{}", std::process::id());
        let added = Command::new("ip").args(["netns", "add", &name]).output();
        match added {
            Ok(out) if out.status.success() => Some(Netns(name)),
            Ok(out) => {
                eprintln!(
                    "SKIPPED: ip netns add: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: ip: {e}");
                None
            }
        }
    }

    /// Runs `args` in the namespace; its stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .expect("ip netns exec");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The backend's IPv4 chains the kernel holds: (table, name).
    fn chains(&self) -> BTreeSet<(String, String)> {
        let mut table = String::new();
        let mut chains = BTreeSet::new();
        for line in self.run(&["iptables-save"]).lines() {
            if let Some(name) = line.strip_prefix('*') {
                table = name.to_owned();
            } else if let Some(chain) = line.strip_prefix(':') {
                let name = chain.split_whitespace().next().unwrap_or_default();
                if IptablesBackend::owns_chain(name) {
                    chains.insert((table.clone(), name.to_owned()));
                }
            }
        }
        chains
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The IPv4 chains the backend wants: (table, name).
fn wanted(backend: &IptablesBackend) -> BTreeSet<(String, String)> {
    backend
        .chains()
        .filter(|(family, ..)| *family == IpFamily::V4)
        .map(|(_, (table, name), _)| (table.name().to_owned(), name.clone()))
        .collect()
}

/// The node's view with Services `svc-N` for each N of `services`, each
/// with two endpoints.
fn view(services: &[usize]) -> NodeView {
    node_view(&kpng_testkit::history::store_of(services).snapshot(), NODE)
}

/// After a failed sync, the driver's next round is full and the backend
/// rewrites everything: the chains a refused restore left are deleted,
/// and the kernel holds what the backend wants.
#[test]
fn after_a_failure_the_drivers_full_round_rewrites_everything() {
    let Some(ns) = Netns::new() else { return };
    let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")]);
    let mut backend = IptablesBackend::new(IptablesConfig::new(proxy).in_netns(&ns.0));
    let v1 = view(&[0, 1]);
    backend.sync(&Round::full(&v1)).expect("first sync");
    assert!(backend.last_sync().replaced);
    assert_eq!(ns.chains(), wanted(&backend));

    // Someone jumps to a chain of svc-0: deleting it will be refused.
    let svc_chain = wanted(&backend)
        .into_iter()
        .map(|(_, name)| name)
        .find(|name| name.starts_with("KUBE-SVC-"))
        .expect("a KUBE-SVC chain");
    let foreign = ["-t", "nat", "-A", "OUTPUT", "-d", "192.0.2.77", "-j"];
    let jump: Vec<&str> = foreign
        .iter()
        .copied()
        .chain([svc_chain.as_str()])
        .collect();
    ns.run(&[&["iptables"][..], &jump].concat());

    // svc-0 goes, svc-2 comes: the restore is refused.
    let v2 = view(&[1, 2]);
    backend
        .sync(&Round::between(&v1, &v2))
        .expect_err("restore refused");

    // The cause goes. The driver's next round is full, as after any
    // failure: the backend rewrites everything.
    let delete: Vec<&str> = jump
        .iter()
        .map(|arg| if *arg == "-A" { "-D" } else { arg })
        .collect();
    ns.run(&[&["iptables"][..], &delete].concat());
    let v3 = view(&[1, 2, 3]);
    backend.sync(&Round::full(&v3)).expect("retry");
    assert!(
        backend.last_sync().replaced,
        "the retry rewrites everything"
    );
    let kernel = ns.chains();
    assert!(
        !kernel.iter().any(|(_, name)| *name == svc_chain),
        "{kernel:?}"
    );
    assert_eq!(kernel, wanted(&backend));

    // Then incremental again.
    let v4 = view(&[2, 3]);
    backend.sync(&Round::between(&v3, &v4)).expect("sync");
    assert!(!backend.last_sync().replaced);
    assert_eq!(ns.chains(), wanted(&backend));
}
