//! A count of the packets a node receives from given networks: whether
//! replies come back through a node ([`Cluster::count_from`]).

use std::io::Write;
use std::process::{Command, Stdio};

use super::Cluster;

/// Counts, in one node's prerouting hook (before anything of kpng's
/// netfilter rules, after its tc programs), the packets whose source is
/// in given networks: an nftables table of its own, `kpng_lab_count`, in
/// the node's namespace (deleted with it).
pub struct PacketCount {
    ns: String,
}

impl Cluster {
    /// Starts counting the packets node `k` receives from `sources`
    /// (CIDRs of either family), e.g. another node's pod CIDR: the
    /// replies of flows `k` forwarded there that come back through it.
    ///
    /// # Panics
    /// When `nft` fails.
    pub fn count_from(&self, k: usize, sources: &[&str]) -> PacketCount {
        let rules: String = sources
            .iter()
            .map(|s| {
                let family = if s.contains(':') { "ip6" } else { "ip" };
                format!("  {family} saddr {s} counter\n")
            })
            .collect();
        let ns = self.node_ns(k);
        let table = format!(
            "table inet kpng_lab_count {{\n chain pre {{\n  type filter hook prerouting priority -400;\n{rules} }}\n}}\n"
        );
        nft(&ns, &["-f", "-"], &table);
        PacketCount { ns }
    }
}

impl PacketCount {
    /// The packets counted so far, every source summed.
    ///
    /// # Panics
    /// When `nft` fails.
    pub fn packets(&self) -> u64 {
        nft(&self.ns, &["list", "table", "inet", "kpng_lab_count"], "")
            .lines()
            .filter_map(|l| {
                let rest = l.split("counter packets ").nth(1)?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
    }
}

/// `nft ARGS` in namespace `ns`, `input` on its standard input: its
/// output.
fn nft(ns: &str, args: &[&str], input: &str) -> String {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("nft input");
    }
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft {args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
