//! kube-proxy's leftovers: what kube-proxy programmed in each of its modes,
//! found and removed, as kube-proxy itself removes the other modes' rules
//! when it starts (its `CleanupLeftovers` of the iptables, nftables and
//! ipvs modes).
//!
//! What is kube-proxy's, by name and place, and nothing else:
//!
//! - the nftables tables `ip kube-proxy` and `ip6 kube-proxy`;
//! - in `iptables` and `ip6tables`, legacy and nft, the chains of kube-proxy's
//!   iptables and ipvs modes: `KUBE-SERVICES`, `KUBE-NODEPORTS`,
//!   `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`, `KUBE-FORWARD`,
//!   `KUBE-EXTERNAL-SERVICES`, `KUBE-PROXY-FIREWALL`, `KUBE-SVC-*`,
//!   `KUBE-SVL-*`, `KUBE-EXT-*`, `KUBE-FW-*`, `KUBE-SEP-*` and (ipvs)
//!   `KUBE-NODE-PORT`, `KUBE-LOAD-BALANCER`, `KUBE-IPVS-FILTER`,
//!   `KUBE-IPVS-OUT-FILTER`, `KUBE-SOURCE-RANGES-FIREWALL` in `nat` and
//!   `filter`; `KUBE-PROXY-CANARY` in `mangle`, `nat` and `filter`; and the
//!   jumps to them from the built-in chains. kubelet's chains
//!   (`KUBE-FIREWALL`, `KUBE-KUBELET-CANARY`, and `KUBE-MARK-DROP`, which
//!   kubelets before 1.28 made and kube-proxy no longer uses) are never
//!   touched. A chain that a chain not in this list jumps to is kept (and
//!   said so): something else relies on it.
//! - where kube-proxy's ipvs mode left its dummy interface `kube-ipvs0`:
//!   the IPVS virtual servers (as kube-proxy's own cleanup flushes them,
//!   with `ipvsadm`) and the interface;
//! - its ipsets (`KUBE-CLUSTER-IP`, `KUBE-NODE-PORT-TCP`, … and their
//!   IPv6 `KUBE-6-` forms), with `ipset`, after the iptables rules that
//!   used them.
//!
//! [`Leftovers::find`] only reads (a dry run prints what it finds);
//! [`Leftovers::remove`] removes what `find` found and logs each removal.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::Error;
use kpng_model::IpFamily;

use crate::iptables::Mode;
use crate::nft;
use crate::process::Process;

/// kube-proxy's nftables table, in `ip` and `ip6`.
pub const NFT_TABLE: &str = "kube-proxy";

/// kube-proxy ipvs mode's dummy interface.
pub const IPVS_INTERFACE: &str = "kube-ipvs0";

/// kube-proxy's chains of fixed names, in `nat` and `filter` (iptables and
/// ipvs modes).
const CHAINS: [&str; 12] = [
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-FORWARD",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-PROXY-FIREWALL",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
    "KUBE-SOURCE-RANGES-FIREWALL",
];

/// kube-proxy's per-Service and per-endpoint chains.
const CHAIN_PREFIXES: [&str; 5] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// kube-proxy's canary, in `mangle`, `nat` and `filter`.
const CANARY: &str = "KUBE-PROXY-CANARY";

/// The ipsets of kube-proxy's ipvs mode (IPv6 ones are `KUBE-6-…`).
const IPSETS: [&str; 17] = [
    "KUBE-LOOP-BACK",
    "KUBE-CLUSTER-IP",
    "KUBE-EXTERNAL-IP",
    "KUBE-EXTERNAL-IP-LOCAL",
    "KUBE-LOAD-BALANCER",
    "KUBE-LOAD-BALANCER-LOCAL",
    "KUBE-LOAD-BALANCER-FW",
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    "KUBE-NODE-PORT-TCP",
    "KUBE-NODE-PORT-LOCAL-TCP",
    "KUBE-NODE-PORT-UDP",
    "KUBE-NODE-PORT-LOCAL-UDP",
    "KUBE-NODE-PORT-SCTP-HASH",
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
    "KUBE-HEALTH-CHECK-NODE-PORT",
    "KUBE-IPVS-IPS",
];

/// The built-in chains of the tables kube-proxy writes.
const BUILTINS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// How long one tool may run.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether `name` in `table` is one of kube-proxy's chains.
pub fn is_kube_proxy_chain(table: &str, name: &str) -> bool {
    match table {
        "mangle" => name == CANARY,
        "nat" | "filter" => {
            name == CANARY
                || CHAINS.contains(&name)
                || CHAIN_PREFIXES.iter().any(|p| name.starts_with(p))
        }
        _ => false,
    }
}

/// Whether `name` is one of kube-proxy's ipsets.
pub fn is_kube_proxy_ipset(name: &str) -> bool {
    IPSETS.contains(&name)
        || name
            .strip_prefix("KUBE-6-")
            .is_some_and(|rest| IPSETS.contains(&format!("KUBE-{rest}").as_str()))
}

/// One thing of kube-proxy's, found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Leftover {
    /// An nftables table.
    NftTable {
        /// `ip` or `ip6`.
        family: &'static str,
        /// Its name.
        name: String,
    },
    /// A jump from a built-in chain to one of kube-proxy's.
    Jump {
        /// Which iptables.
        tool: Tool,
        /// The table.
        table: String,
        /// The built-in chain.
        chain: String,
        /// The rule, as `iptables-save` prints it after `-A CHAIN `.
        rule: String,
    },
    /// A chain.
    Chain {
        /// Which iptables.
        tool: Tool,
        /// The table.
        table: String,
        /// Its name.
        name: String,
    },
    /// An IPVS virtual server, as `ipvsadm -S` names it (`-t 10.96.0.1:443`).
    IpvsService(String),
    /// A network interface.
    Interface(String),
    /// An ipset.
    Ipset(String),
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leftover::NftTable { family, name } => write!(f, "nftables table {family} {name}"),
            Leftover::Jump {
                tool,
                table,
                chain,
                rule,
            } => write!(f, "{tool} {table} rule `-A {chain} {rule}`"),
            Leftover::Chain { tool, table, name } => write!(f, "{tool} {table} chain {name}"),
            Leftover::IpvsService(spec) => write!(f, "IPVS virtual server {spec}"),
            Leftover::Interface(name) => write!(f, "interface {name}"),
            Leftover::Ipset(name) => write!(f, "ipset {name}"),
        }
    }
}

/// One iptables: a family in a mode (`ip6tables-legacy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tool {
    /// `iptables` or `ip6tables`.
    pub family: IpFamily,
    /// nft or legacy.
    pub mode: Mode,
}

impl Tool {
    /// The four.
    pub fn all() -> [Tool; 4] {
        [
            Tool {
                family: IpFamily::V4,
                mode: Mode::Nft,
            },
            Tool {
                family: IpFamily::V6,
                mode: Mode::Nft,
            },
            Tool {
                family: IpFamily::V4,
                mode: Mode::Legacy,
            },
            Tool {
                family: IpFamily::V6,
                mode: Mode::Legacy,
            },
        ]
    }

    fn program(self, what: &str) -> String {
        format!("{self}-{what}")
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = match self.family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        write!(f, "{ip}-{}", self.mode.word())
    }
}

/// What [`Leftovers::find`] saw.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Found {
    /// kube-proxy's, to remove, in the order they go.
    pub leftovers: Vec<Leftover>,
    /// kube-proxy's chains kept because another chain jumps to them: the
    /// chain, and the rule of the other chain.
    pub kept: Vec<(Leftover, String)>,
    /// What could not be read (a missing tool is not listed).
    pub problems: Vec<(String, Error)>,
    /// Notes: what was skipped and why.
    pub skipped: Vec<String>,
}

/// What [`Leftovers::remove`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Removed {
    /// Removed.
    pub removed: Vec<Leftover>,
    /// Not removed: what, and why.
    pub failed: Vec<(Leftover, String)>,
}

/// Which chains of kube-proxy's names are kpng's own (`to-iptables`).
pub type OwnChains = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// Finds and removes kube-proxy's leftovers: see the [module docs](self).
#[derive(Default)]
pub struct Leftovers {
    /// A command prefix for the tools (`ip netns exec NAME`); nftables is
    /// read in this process's own namespace.
    pub prefix: Vec<String>,
    /// The iptables kpng itself programs (`to-iptables`) with the chains it
    /// owns: there, those chains are kpng's and stay (only kube-proxy's
    /// jumps to them, which carry its comments, go).
    pub own_iptables: Option<(Mode, OwnChains)>,
    /// kpng's own nftables table name, never removed even if it were
    /// `kube-proxy`.
    pub own_nft_table: Option<String>,
}

impl fmt::Debug for Leftovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leftovers")
            .field("prefix", &self.prefix)
            .field("own_iptables", &self.own_iptables.as_ref().map(|(m, _)| m))
            .field("own_nft_table", &self.own_nft_table)
            .finish()
    }
}

/// Whether `error` says the program is not there.
fn missing(error: &Error) -> bool {
    matches!(error, Error::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        // `ip netns exec` reports a missing program as its own failure.
        || matches!(error, Error::Command { stderr, .. } if stderr.contains("No such file or directory"))
}

/// One table of an `iptables-save`: its chains and rules (chain, rule).
#[derive(Debug, Default)]
struct SavedTable {
    chains: BTreeSet<String>,
    rules: Vec<(String, String)>,
}

/// Parses `iptables-save` output into its tables.
fn parse_save(text: &str) -> BTreeMap<String, SavedTable> {
    let mut tables: BTreeMap<String, SavedTable> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            current = Some(name.trim().to_owned());
            tables.entry(name.trim().to_owned()).or_default();
        } else if let Some(table) = current.as_ref().and_then(|t| tables.get_mut(t)) {
            if let Some(chain) = line.strip_prefix(':') {
                if let Some(name) = chain.split_whitespace().next() {
                    table.chains.insert(name.to_owned());
                }
            } else if let Some(rule) = line.strip_prefix("-A ") {
                let (chain, rest) = rule.split_once(' ').unwrap_or((rule, ""));
                table.rules.push((chain.to_owned(), rest.to_owned()));
            }
        }
    }
    tables
}

/// The words of a rule, double quotes honoured.
fn words(rule: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    let mut chars = rule.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if any || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The chain a rule jumps or goes to (`-j X`, `-g X`).
fn target(rule: &str) -> Option<String> {
    let words = words(rule);
    words
        .windows(2)
        .find(|w| w[0] == "-j" || w[0] == "--jump" || w[0] == "-g" || w[0] == "--goto")
        .map(|w| w[1].clone())
}

/// Whether a rule carries a comment.
fn has_comment(rule: &str) -> bool {
    words(rule).iter().any(|w| w == "--comment")
}

/// What of one iptables' tables is kube-proxy's: the jumps to remove, the
/// chains to remove, and the chains kept with the rule that keeps them.
type TablePlan = (Vec<(String, String)>, Vec<String>, Vec<(String, String)>);

/// Plans one table: `own` says which chains are kpng's (to-iptables), so
/// neither removed nor their jumps unless kube-proxy's comment marks them.
fn plan_table(table: &str, saved: &SavedTable, own: Option<&dyn Fn(&str) -> bool>) -> TablePlan {
    let is_own = |name: &str| own.is_some_and(|own| own(name));
    let mut candidates: BTreeSet<&str> = saved
        .chains
        .iter()
        .map(String::as_str)
        .filter(|name| is_kube_proxy_chain(table, name) && !is_own(name))
        .collect();
    let mut kept = Vec::new();
    // A chain another chain (not a candidate, not built-in) jumps to is
    // kept; keeping it keeps what it jumps to in turn.
    loop {
        let mut changed = false;
        for (chain, rule) in &saved.rules {
            if BUILTINS.contains(&chain.as_str()) || candidates.contains(chain.as_str()) {
                continue;
            }
            if let Some(to) = target(rule)
                && candidates.remove(to.as_str())
            {
                kept.push((to, format!("-A {chain} {rule}")));
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let jumps = saved
        .rules
        .iter()
        .filter(|(chain, _)| BUILTINS.contains(&chain.as_str()))
        .filter(|(_, rule)| {
            target(rule).is_some_and(|to| {
                is_kube_proxy_chain(table, &to) && (!is_own(&to) || has_comment(rule))
            })
        })
        .cloned()
        .collect();
    (
        jumps,
        candidates.into_iter().map(str::to_owned).collect(),
        kept,
    )
}

impl Leftovers {
    fn command<S: Into<String>>(&self, argv: impl IntoIterator<Item = S>) -> Process<'static> {
        Process::new(
            self.prefix
                .iter()
                .cloned()
                .chain(argv.into_iter().map(Into::into)),
        )
        .timeout(TIMEOUT)
    }

    /// Finds kube-proxy's leftovers; changes nothing.
    pub fn find(&self) -> Found {
        let mut found = Found::default();
        self.find_nft(&mut found);
        for tool in Tool::all() {
            self.find_iptables(tool, &mut found);
        }
        self.find_ipvs(&mut found);
        self.find_ipsets(&mut found);
        found
    }

    fn find_nft(&self, found: &mut Found) {
        let mut socket = match nft::Socket::open(None) {
            Ok(socket) => socket,
            Err(e) => {
                found.problems.push(("nftables".into(), e));
                return;
            }
        };
        for family in [nft::TableFamily::Ip, nft::TableFamily::Ip6] {
            match socket.tables(family) {
                Ok(tables) => {
                    if tables.iter().any(|t| t == NFT_TABLE)
                        && self.own_nft_table.as_deref() != Some(NFT_TABLE)
                    {
                        found.leftovers.push(Leftover::NftTable {
                            family: family.name(),
                            name: NFT_TABLE.into(),
                        });
                    }
                }
                Err(e) => found
                    .problems
                    .push((format!("nftables {} tables", family.name()), e)),
            }
        }
    }

    fn find_iptables(&self, tool: Tool, found: &mut Found) {
        let output = match self.command([tool.program("save")]).run() {
            Ok(output) => output,
            Err(e) if missing(&e) => {
                found.skipped.push(format!("{tool}: not installed"));
                return;
            }
            Err(e) => {
                found.problems.push((tool.to_string(), e));
                return;
            }
        };
        let own = self
            .own_iptables
            .as_ref()
            .filter(|(mode, _)| *mode == tool.mode)
            .map(|(_, own)| own.as_ref() as &dyn Fn(&str) -> bool);
        let saved = parse_save(&String::from_utf8_lossy(&output.stdout));
        for table in ["mangle", "nat", "filter"] {
            let Some(saved) = saved.get(table) else {
                continue;
            };
            let (jumps, chains, kept) = plan_table(table, saved, own);
            found
                .leftovers
                .extend(jumps.into_iter().map(|(chain, rule)| Leftover::Jump {
                    tool,
                    table: table.into(),
                    chain,
                    rule,
                }));
            found
                .leftovers
                .extend(chains.into_iter().map(|name| Leftover::Chain {
                    tool,
                    table: table.into(),
                    name,
                }));
            found.kept.extend(kept.into_iter().map(|(name, rule)| {
                (
                    Leftover::Chain {
                        tool,
                        table: table.into(),
                        name,
                    },
                    rule,
                )
            }));
        }
    }

    fn find_ipvs(&self, found: &mut Found) {
        if !self.ipvs_interface() {
            return;
        }
        if !self.ipvs_in_kernel() {
            found
                .skipped
                .push("IPVS virtual servers: no IPVS in this kernel".into());
        } else {
            match self.command(["ipvsadm", "-S", "-n"]).run() {
                Ok(output) => found.leftovers.extend(
                    virtual_servers(&String::from_utf8_lossy(&output.stdout))
                        .into_iter()
                        .map(Leftover::IpvsService),
                ),
                // kube-proxy's ipvs mode ran here and the kernel has IPVS:
                // servers it cannot list are worth a warning.
                Err(e) => found
                    .problems
                    .push(("IPVS virtual servers (ipvsadm)".into(), e)),
            }
        }
        found
            .leftovers
            .push(Leftover::Interface(IPVS_INTERFACE.into()));
    }

    /// Whether the interface of kube-proxy's ipvs mode is here: a dummy
    /// named `kube-ipvs0`.
    fn ipvs_interface(&self) -> bool {
        self.command(["ip", "-d", "-o", "link", "show", "dev", IPVS_INTERFACE])
            .run()
            .is_ok_and(|output| is_dummy(&String::from_utf8_lossy(&output.stdout)))
    }

    fn ipvs_in_kernel(&self) -> bool {
        self.command(["cat", "/proc/net/ip_vs"]).run().is_ok()
    }

    fn find_ipsets(&self, found: &mut Found) {
        match self.command(["ipset", "list", "-n"]).run() {
            Ok(output) => found.leftovers.extend(
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .map(str::trim)
                    .filter(|n| is_kube_proxy_ipset(n))
                    .map(|n| Leftover::Ipset(n.to_owned())),
            ),
            Err(e) if missing(&e) => found.skipped.push("ipsets: ipset is not installed".into()),
            Err(e) => found.problems.push(("ipset".into(), e)),
        }
    }

    /// Removes `leftovers` (from [`find`](Self::find)), in order: nftables
    /// tables, then per iptables and table one `iptables-restore --noflush`
    /// (kube-proxy's chains flushed, its jumps deleted, its chains
    /// deleted: all or nothing), IPVS virtual servers, the interface, then
    /// ipsets. What was removed, and what was not and why, is returned
    /// for the caller to log.
    pub fn remove(&self, leftovers: &[Leftover]) -> Removed {
        let mut removed = Removed::default();
        let mut batches: BTreeMap<(Tool, String), Vec<&Leftover>> = BTreeMap::new();
        let mut rest = Vec::new();
        for leftover in leftovers {
            match leftover {
                Leftover::Jump { tool, table, .. } | Leftover::Chain { tool, table, .. } => {
                    batches
                        .entry((*tool, table.clone()))
                        .or_default()
                        .push(leftover);
                }
                other => rest.push(other),
            }
        }
        let mut done = |leftover: &Leftover, result: Result<(), String>| match result {
            Ok(()) => removed.removed.push(leftover.clone()),
            Err(error) => removed.failed.push((leftover.clone(), error)),
        };
        for leftover in rest
            .iter()
            .filter(|l| matches!(l, Leftover::NftTable { .. }))
        {
            done(
                leftover,
                self.remove_nft_table(leftover).map_err(|e| e.to_string()),
            );
        }
        for ((tool, table), items) in &batches {
            let script = restore_script(table, items);
            let result = self
                .command([tool.program("restore")])
                .args(["-w", "5", "--noflush"])
                .input(script.as_bytes())
                .run()
                .map(drop);
            match result {
                Ok(()) => {
                    for item in items {
                        done(item, Ok(()));
                    }
                }
                Err(error) => {
                    // One table's batch: all of it or nothing.
                    let message = error.to_string();
                    for item in items {
                        done(item, Err(message.clone()));
                    }
                }
            }
        }
        for leftover in rest {
            let result = match leftover {
                Leftover::NftTable { .. } => continue,
                Leftover::IpvsService(spec) => self
                    .command(["ipvsadm", "-D"])
                    .args(spec.split_whitespace())
                    .run()
                    .map(drop),
                Leftover::Interface(name) => self
                    .command(["ip", "link", "delete", "dev", name])
                    .run()
                    .map(drop),
                Leftover::Ipset(name) => self.command(["ipset", "destroy", name]).run().map(drop),
                Leftover::Jump { .. } | Leftover::Chain { .. } => continue,
            };
            done(leftover, result.map_err(|e| e.to_string()));
        }
        removed
    }

    fn remove_nft_table(&self, leftover: &Leftover) -> Result<(), Error> {
        let Leftover::NftTable { family, name } = leftover else {
            return Ok(());
        };
        let family = if *family == "ip6" {
            nft::TableFamily::Ip6
        } else {
            nft::TableFamily::Ip
        };
        let mut socket = nft::Socket::open(None)?;
        let mut tx = nft::Transaction::new();
        tx.delete_table(&nft::Table::new(family, name));
        socket.commit(tx)
    }
}

/// The virtual servers of `ipvsadm -S -n` output, as `ipvsadm -D` takes
/// them (`-t 10.96.0.1:443`, `-u [fd00::a]:53`, `-f 1`).
fn virtual_servers(save: &str) -> Vec<String> {
    save.lines()
        .filter_map(|line| line.strip_prefix("-A "))
        .filter_map(|spec| {
            let mut words = spec.split_whitespace();
            match (words.next(), words.next()) {
                (Some(kind @ ("-t" | "-u" | "-f" | "--sctp-service")), Some(address)) => {
                    Some(format!("{kind} {address}"))
                }
                _ => None,
            }
        })
        .collect()
}

/// Whether `ip -d -o link show` shows a dummy interface.
fn is_dummy(link: &str) -> bool {
    link.split_whitespace().any(|w| w == "dummy")
}

/// One table's `iptables-restore --noflush` input: kube-proxy's chains
/// declared (which flushes them), its jumps deleted, its chains deleted.
fn restore_script(table: &str, items: &[&Leftover]) -> String {
    let mut declare = String::new();
    let mut jumps = String::new();
    let mut delete = String::new();
    for item in items {
        match item {
            Leftover::Chain { name, .. } => {
                declare.push_str(&format!(":{name} - [0:0]\n"));
                delete.push_str(&format!("-X {name}\n"));
            }
            Leftover::Jump { chain, rule, .. } => {
                jumps.push_str(&format!("-D {chain} {rule}\n"));
            }
            _ => {}
        }
    }
    format!("*{table}\n{declare}{jumps}{delete}COMMIT\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = r#"# Generated by iptables-save
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-SEP-BBBB - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-MARK-DROP - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:CNI-HOSTPORT - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A PREROUTING -j KUBE-SERVICES
-A PREROUTING -j CNI-HOSTPORT
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -j KUBE-SVC-AAAA
-A KUBE-SVC-AAAA -j KUBE-SEP-BBBB
-A KUBE-SEP-BBBB -s 10.0.0.1/32 -j KUBE-MARK-MASQ
-A CNI-HOSTPORT -j KUBE-MARK-MASQ
COMMIT
"#;

    #[test]
    fn a_chain_another_chain_uses_is_kept_and_kubelets_are_never_touched() {
        let saved = parse_save(SAVE);
        let (jumps, chains, kept) = plan_table("nat", &saved["nat"], None);
        assert_eq!(
            jumps.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>(),
            [
                r#"-m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#,
                "-j KUBE-SERVICES"
            ]
        );
        assert_eq!(chains, ["KUBE-SEP-BBBB", "KUBE-SERVICES", "KUBE-SVC-AAAA"]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0, "KUBE-MARK-MASQ");
        assert_eq!(kept[0].1, "-A CNI-HOSTPORT -j KUBE-MARK-MASQ");
        // kpng's own chains (to-iptables): only kube-proxy's commented jump goes.
        let own = |name: &str| name.starts_with("KUBE-S") || name == "KUBE-MARK-MASQ";
        let (jumps, chains, _) = plan_table("nat", &saved["nat"], Some(&own));
        assert_eq!(jumps.len(), 1, "{jumps:?}");
        assert!(chains.is_empty(), "{chains:?}");
    }

    #[test]
    fn ipvsadm_and_ip_output_are_read() {
        let save = "-A -t 10.96.0.1:443 -s rr\n-a -t 10.96.0.1:443 -r 192.168.1.2:6443 -m -w 1\n-A -u [fd00:10:96::a]:53 -s rr\n-A -f 7 -s rr\n-A --sctp-service 10.96.0.3:9 -s rr\n";
        assert_eq!(
            virtual_servers(save),
            [
                "-t 10.96.0.1:443",
                "-u [fd00:10:96::a]:53",
                "-f 7",
                "--sctp-service 10.96.0.3:9"
            ]
        );
        assert!(is_dummy(
            "9: kube-ipvs0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 5e:4f:1a:2b:3c:4d brd ff:ff:ff:ff:ff:ff promiscuity 0 allmulti 0 minmtu 0 maxmtu 0 \\    dummy addrgenmode eui64"
        ));
        assert!(!is_dummy(
            "9: kube-ipvs0@if8: <BROADCAST,MULTICAST> mtu 1500 \\    veth addrgenmode eui64"
        ));
    }

    #[test]
    fn names_are_kube_proxys_only() {
        for (table, name) in [
            ("nat", "KUBE-SERVICES"),
            ("filter", "KUBE-FW-ABC"),
            ("mangle", "KUBE-PROXY-CANARY"),
        ] {
            assert!(is_kube_proxy_chain(table, name), "{table} {name}");
        }
        for (table, name) in [
            ("filter", "KUBE-FIREWALL"),
            ("nat", "KUBE-MARK-DROP"),
            ("mangle", "KUBE-KUBELET-CANARY"),
            ("mangle", "KUBE-SERVICES"),
            ("raw", "KUBE-SERVICES"),
            ("nat", "KUBE-SERVICESX"),
        ] {
            assert!(!is_kube_proxy_chain(table, name), "{table} {name}");
        }
        assert!(is_kube_proxy_ipset("KUBE-CLUSTER-IP"));
        assert!(is_kube_proxy_ipset("KUBE-6-CLUSTER-IP"));
        assert!(!is_kube_proxy_ipset("KUBE-CLUSTER-IPX"));
        assert!(!is_kube_proxy_ipset("cilium"));
        assert_eq!(
            words(r#"-m comment --comment "a \"b\" c" -j X"#),
            ["-m", "comment", "--comment", r#"a "b" c"#, "-j", "X"]
        );
    }
}
