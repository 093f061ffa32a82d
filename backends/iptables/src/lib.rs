//! The iptables backend of kpng-rs.
//!
//! [`IptablesBackend`] is a [`kpng_sink::IncrementalSink`]: it receives a
//! node's view as ops and programs kube-proxy's Service semantics in
//! kube-proxy's chain layout, for IPv4 (`iptables`) and IPv6
//! (`ip6tables`).
//!
//! - **Layout**: `KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-EXTERNAL-SERVICES`,
//!   `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`, `KUBE-FORWARD`,
//!   `KUBE-PROXY-FIREWALL`; per Service port `KUBE-SVC-*`, `KUBE-SVL-*`,
//!   `KUBE-EXT-*`, `KUBE-FW-*`; per endpoint `KUBE-SEP-*`, with stable
//!   hashed names. Load balancing is `statistic --mode random` with
//!   probability 1/(N-i); ClientIP affinity is `recent`.
//! - **Semantics**: the same as the nftables backend (ClusterIP, NodePort,
//!   externalIPs, LB IPs with source ranges, externalTrafficPolicy and
//!   internalTrafficPolicy Local, terminating fallback and hints from the
//!   node view, REJECT with no endpoint, DROP with no local endpoint or on
//!   an unallocated Service-CIDR address, masquerade by mark, hairpin).
//! - **Applying**: one `iptables-restore --noflush` batch per family. The
//!   first sync, and any after a failure, rewrites every chain and deletes
//!   stale ones it owns; others rewrite only the chains that changed.
//!   Chains it does not own are never touched; the jumps from the built-in
//!   chains are inserted once. A failed restore changes nothing in the
//!   tables it failed in, and the next sync is a full one.
//! - **Modes**: iptables-nft or iptables-legacy, as set in [`Config::mode`],
//!   or detected as kube-proxy does: the mode that already holds rules.
//!
//! # Example
//!
//! Render the rules for one Service without touching the kernel:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_backend_iptables::{Config, IptablesBackend};
//! use kpng_model::v1::{IpSet, Service, ServicePort, Protocol};
//! use kpng_model::view::ViewOp;
//! use kpng_sink::IncrementalSink;
//!
//! let mut backend = IptablesBackend::new(Config::default()).dry_run();
//! let svc = Service {
//!     namespace: "default".into(),
//!     name: "web".into(),
//!     cluster_ips: Some(IpSet::parse_addrs("clusterIPs", ["10.96.0.10"])?),
//!     ports: vec![ServicePort { name: "http".into(), protocol: Protocol::Tcp as i32, port: 80, ..Default::default() }],
//!     ..Default::default()
//! };
//! backend.reset();
//! backend.apply(&ViewOp::SetService(Arc::new(svc)))?;
//! backend.sync(1)?;
//! // No endpoint: the ClusterIP port rejects.
//! assert!(backend.last_script().contains("-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Instant;

use kpng_model::addr::parse_cidr_list;
use kpng_model::{IpFamily, ServiceName};
use kpng_sink::{IncrementalSink, SinkError, ViewTracker};

use render::{ChainKey, DISPATCH, HOOKS, Render, Table};

/// Errors of the iptables backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `iptables-restore` refused the batch.
    #[error("{command} failed ({status}): {stderr}")]
    Restore {
        /// The command.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// A setting is invalid.
    #[error("invalid {field}: {value:?}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Its value.
        value: String,
    },
}

/// Which iptables the backend drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// iptables-nft: the iptables rule language over nf_tables.
    Nft,
    /// iptables-legacy: the x_tables kernel interface.
    Legacy,
}

impl Mode {
    fn word(self) -> &'static str {
        match self {
            Mode::Nft => "nft",
            Mode::Legacy => "legacy",
        }
    }
}

/// Settings of the backend, named after kube-proxy's flags.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// `--cluster-cidr`: the pod CIDRs, to tell pod traffic apart.
    pub cluster_cidrs: Vec<(IpAddr, u8)>,
    /// `--service-cidr`: traffic to unallocated addresses in it is dropped.
    pub service_cidrs: Vec<(IpAddr, u8)>,
    /// `--nodeport-addresses`: where NodePorts listen. `None`: the node's
    /// own addresses (from its Node object). Loopback is never used.
    pub nodeport_addresses: Option<Vec<(IpAddr, u8)>>,
    /// `--masquerade-all`.
    pub masquerade_all: bool,
    /// `--masquerade-bit` (default 14).
    pub masquerade_bit: u8,
    /// iptables-nft or -legacy; `None` (default): detected on the first
    /// sync, as kube-proxy does.
    pub mode: Option<Mode>,
    /// A command prefix the iptables tools run under (default none; e.g.
    /// `ip netns exec NAME`).
    pub command_prefix: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            nodeport_addresses: None,
            masquerade_all: false,
            masquerade_bit: 14,
            mode: None,
            command_prefix: Vec::new(),
        }
    }
}

impl Config {
    /// Parses CIDR lists as kube-proxy's flags take them
    /// (`10.244.0.0/16,fd00::/64`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the flag and the bad value.
    pub fn parse_cidrs(field: &'static str, text: &str) -> Result<Vec<(IpAddr, u8)>, Error> {
        parse_cidr_list(field, text).map_err(|e| Error::Config {
            field,
            value: match e {
                kpng_model::Error::InvalidAddress { value, .. } => value,
                other => other.to_string(),
            },
        })
    }

    /// Runs the iptables tools in the network namespace `name`.
    pub fn in_netns(mut self, name: &str) -> Self {
        self.command_prefix = ["ip", "netns", "exec", name].map(String::from).to_vec();
        self
    }

    pub(crate) fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }

    pub(crate) fn cidrs_of(list: &[(IpAddr, u8)], family: IpFamily) -> Vec<String> {
        list.iter()
            .filter(|(ip, _)| IpFamily::of(ip) == family)
            .map(|(ip, len)| format!("{ip}/{len}"))
            .collect()
    }

    pub(crate) fn cluster_cidrs(&self, family: IpFamily) -> Vec<String> {
        Self::cidrs_of(&self.cluster_cidrs, family)
    }

    fn command(&self, family: IpFamily, mode: Mode, tool: &str) -> Command {
        let ip = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        let program = format!("{ip}-{}-{tool}", mode.word());
        let mut command = match self.command_prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        };
        command.stdin(Stdio::null());
        command
    }
}

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStats {
    /// Whether it rewrote everything.
    pub full: bool,
    /// Rules written.
    pub rules: usize,
    /// Chains (re)written or deleted.
    pub chains: usize,
    /// Services rendered.
    pub services: usize,
    /// Time to render and apply, in microseconds.
    pub micros: u128,
    /// Of which running `iptables-restore`.
    pub restore_micros: u128,
}

/// Per-family state.
#[derive(Default)]
struct FamilyState {
    renders: BTreeMap<ServiceName, Render>,
    globals: Render,
    /// Every chain as it should be.
    desired: BTreeMap<ChainKey, Vec<String>>,
    /// What the kernel holds, after the last successful sync.
    applied: Option<BTreeMap<ChainKey, Vec<String>>>,
    /// Chains whose content may differ from `applied`.
    touched: BTreeSet<ChainKey>,
    dispatch_dirty: bool,
}

impl FamilyState {
    /// Swaps one render for another, noting what changed.
    fn replace(&mut self, old: Option<&Render>, new: Option<&Render>) {
        let empty = Render::default();
        let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
        for key in old.chains.keys() {
            if !new.chains.contains_key(key) {
                self.desired.remove(key);
                self.touched.insert(key.clone());
            }
        }
        for (key, rules) in &new.chains {
            if old.chains.get(key) != Some(rules) {
                self.desired.insert(key.clone(), rules.clone());
                self.touched.insert(key.clone());
            }
        }
        if old.dispatch != new.dispatch {
            self.dispatch_dirty = true;
        }
    }

    /// Rebuilds the dispatch chains from every render, in Service order,
    /// the globals' rules last.
    fn rebuild_dispatch(&mut self) {
        for (table, chain) in DISPATCH {
            let mut rules = Vec::new();
            for render in self.renders.values().chain([&self.globals]) {
                if let Some(list) = render.dispatch.get(&(table, chain)) {
                    rules.extend(list.iter().cloned());
                }
            }
            let key = (table, chain.to_owned());
            if self.desired.get(&key) != Some(&rules) {
                self.desired.insert(key.clone(), rules);
                self.touched.insert(key);
            }
        }
        self.dispatch_dirty = false;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    Apply,
    DryRun,
}

/// The iptables backend. See the crate docs.
pub struct IptablesBackend {
    config: Config,
    run: Run,
    mode: Option<Mode>,
    tracker: ViewTracker,
    families: [FamilyState; 2],
    last_script: String,
    last: SyncStats,
}

impl std::fmt::Debug for IptablesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IptablesBackend")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .field("services", &self.tracker.view().services.len())
            .field("last", &self.last)
            .finish()
    }
}

impl IptablesBackend {
    /// A backend that applies its batches with `iptables-restore`.
    pub fn new(config: Config) -> Self {
        Self {
            mode: config.mode,
            config,
            run: Run::Apply,
            tracker: ViewTracker::default(),
            families: Default::default(),
            last_script: String::new(),
            last: SyncStats::default(),
        }
    }

    /// Prints instead of applying: syncs compute the batches (see
    /// [`last_script`](Self::last_script)) and change nothing. A dry run
    /// never reads the kernel, so every sync is written as a full one.
    pub fn dry_run(mut self) -> Self {
        self.run = Run::DryRun;
        self
    }

    /// The batches of the last sync, IPv4 then IPv6.
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &SyncStats {
        &self.last
    }

    /// The mode in use, once known.
    pub fn mode(&self) -> Option<Mode> {
        self.mode
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The addresses NodePorts listen on, in one family.
    fn node_ips(&self, family: IpFamily) -> Vec<String> {
        match &self.config.nodeport_addresses {
            Some(cidrs) => Config::cidrs_of(cidrs, family)
                .into_iter()
                .filter(|c| !c.starts_with("127.") && !c.starts_with("::1/"))
                .collect(),
            None => self
                .tracker
                .view()
                .node_addresses(family)
                .map(|ip| match ip {
                    IpAddr::V4(_) => format!("{ip}/32"),
                    IpAddr::V6(_) => format!("{ip}/128"),
                })
                .collect(),
        }
    }

    /// Re-renders what changed; returns how many Services were rendered.
    fn refresh(&mut self) -> usize {
        let changes = self.tracker.take_changes();
        let (full, names) = (changes.full, changes.services);
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let globals = changes
                .node
                .then(|| render::globals(&self.config, family, &self.node_ips(family)));
            let state = &mut self.families[i];
            if full {
                let applied = state.applied.take();
                *state = FamilyState {
                    applied,
                    ..FamilyState::default()
                };
            }
            if let Some(globals) = globals {
                let old = std::mem::replace(&mut state.globals, globals);
                let new = state.globals.clone();
                state.replace(Some(&old), Some(&new));
                state.dispatch_dirty = true;
            }
            for name in &names {
                let old = state.renders.remove(name);
                let new = self
                    .tracker
                    .view()
                    .services
                    .get(name)
                    .map(|view| render::service(view, family, &self.config));
                state.replace(old.as_ref(), new.as_ref());
                if let Some(new) = new {
                    state.renders.insert(name.clone(), new);
                }
            }
            if state.dispatch_dirty || full {
                state.rebuild_dispatch();
            }
        }
        names.len()
    }

    fn mode_or_detect(&mut self) -> Mode {
        if let Some(mode) = self.mode {
            return mode;
        }
        let mode = detect(&self.config);
        tracing::info!(mode = mode.word(), "iptables mode");
        self.mode = Some(mode);
        mode
    }

    /// Writes one family's batch, with what its chains held before.
    fn prepare(
        &mut self,
        i: usize,
        family: IpFamily,
        full: bool,
    ) -> Result<(Batch, BTreeMap<ChainKey, Vec<String>>), Error> {
        let existing = match (full, self.run) {
            (true, Run::Apply) => {
                let mode = self.mode_or_detect();
                Some(saved(&self.config, family, mode)?)
            }
            _ => None,
        };
        let state = &self.families[i];
        let batch = batch(state, full, existing.as_ref());
        let before = match (existing, state.applied.as_ref()) {
            (Some(saved), _) => saved.owned,
            (None, Some(applied)) => applied.clone(),
            (None, None) => BTreeMap::new(),
        };
        Ok((batch, before))
    }

    /// Applies both families' batches; on a failure, puts back what was
    /// applied of them.
    fn apply_all(&mut self, full: bool) -> Result<String, Error> {
        let mut batches = Vec::new();
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            batches.push((family, self.prepare(i, family, full)?));
        }
        let mut script = String::new();
        for (_, (batch, _)) in &batches {
            script.push_str(&batch.script);
            self.last.rules += batch.rules;
            self.last.chains += batch.written.len() + batch.deleted.len();
        }
        if self.run == Run::DryRun {
            return Ok(script);
        }
        let mode = self.mode_or_detect();
        let start = Instant::now();
        let mut failure = None;
        for (family, (batch, _)) in &batches {
            if batch.script.is_empty() {
                continue;
            }
            if let Err(e) = restore(&self.config, *family, mode, &batch.script) {
                failure = Some(e);
                break;
            }
        }
        self.last.restore_micros = start.elapsed().as_micros();
        match failure {
            None => Ok(script),
            Some(e) => {
                for (family, (batch, before)) in &batches {
                    let undo = batch.rollback(before);
                    if undo.is_empty() {
                        continue;
                    }
                    if let Err(undo_error) = restore(&self.config, *family, mode, &undo) {
                        tracing::error!(error = %undo_error, ?family, "iptables rollback failed");
                    }
                }
                self.last_script = script;
                Err(e)
            }
        }
    }
}

/// The chains and hooks one `iptables-save` shows: per table, the chains,
/// and the rule lines of the built-in chains.
#[derive(Debug, Default)]
struct Saved {
    chains: BTreeSet<ChainKey>,
    rules: BTreeSet<(Table, String)>,
    /// The rules of the chains this backend owns, as restore input.
    owned: BTreeMap<ChainKey, Vec<String>>,
}

fn saved(config: &Config, family: IpFamily, mode: Mode) -> Result<Saved, Error> {
    let mut command = config.command(family, mode, "save");
    let name = format!("{command:?}");
    let output = command.output().map_err(|source| Error::Spawn {
        command: name.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(Error::Restore {
            command: name,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let mut saved = Saved::default();
    let mut table = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = Table::ALL.into_iter().find(|t| t.name() == name);
        } else if let Some(t) = table {
            if let Some(chain) = line.strip_prefix(':') {
                let name = chain.split_whitespace().next().unwrap_or_default();
                saved.chains.insert((t, name.to_owned()));
            } else if let Some(rule) = line.strip_prefix("-A ") {
                saved.rules.insert((t, line.to_owned()));
                let (chain, rest) = rule.split_once(' ').unwrap_or((rule, ""));
                if render::owned(chain) {
                    saved
                        .owned
                        .entry((t, chain.to_owned()))
                        .or_default()
                        .push(rest.to_owned());
                }
            }
        }
    }
    Ok(saved)
}

/// Counts the rules each mode holds, as kube-proxy's iptables wrapper
/// does, and picks the one in use; nft when neither holds any.
fn detect(config: &Config) -> Mode {
    let count = |mode| {
        IpFamily::BOTH
            .into_iter()
            .filter_map(|family| saved(config, family, mode).ok())
            .map(|s| {
                s.rules.len()
                    + s.chains
                        .iter()
                        .filter(|(_, c)| c.starts_with("KUBE-"))
                        .count()
            })
            .sum::<usize>()
    };
    let legacy = count(Mode::Legacy);
    let nft = count(Mode::Nft);
    if legacy > nft {
        Mode::Legacy
    } else {
        Mode::Nft
    }
}

/// One family's `iptables-restore --noflush` input, and the chains it
/// writes and deletes.
#[derive(Debug, Default)]
struct Batch {
    script: String,
    written: Vec<ChainKey>,
    deleted: Vec<ChainKey>,
    rules: usize,
}

impl Batch {
    /// The input that puts every chain this batch touches back as
    /// `before` had it. iptables-restore commits table by table, so a
    /// batch refused in its second table has applied its first: this
    /// undoes it. Chains `before` did not have are left empty, never
    /// deleted (a hook may already jump to them); the next full sync
    /// removes them.
    fn rollback(&self, before: &BTreeMap<ChainKey, Vec<String>>) -> String {
        let mut out = String::new();
        for table in Table::ALL {
            let chains: Vec<&ChainKey> = self
                .written
                .iter()
                .chain(&self.deleted)
                .filter(|k| k.0 == table)
                .collect();
            if chains.is_empty() {
                continue;
            }
            let _ = writeln!(out, "*{}", table.name());
            for (_, name) in &chains {
                let _ = writeln!(out, ":{name} - [0:0]");
            }
            for key in &chains {
                for rule in before.get(*key).into_iter().flatten() {
                    let _ = writeln!(out, "-A {} {rule}", key.1);
                }
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

/// One family's `iptables-restore --noflush` input: per table, the chains
/// to (re)write are declared (which flushes them) and refilled, and stale
/// chains are flushed then deleted; on a full sync, missing hooks are
/// inserted.
fn batch(state: &FamilyState, full: bool, existing: Option<&Saved>) -> Batch {
    let applied = state.applied.as_ref().filter(|_| !full);
    let mut result = Batch::default();
    let out = &mut result.script;
    for table in Table::ALL {
        // Chains to write: all (full) or the touched ones that differ.
        let write: Vec<&ChainKey> = match applied {
            None => state.desired.keys().filter(|(t, _)| *t == table).collect(),
            Some(applied) => state
                .touched
                .iter()
                .filter(|k| k.0 == table)
                .filter(|k| {
                    state.desired.contains_key(*k) && state.desired.get(*k) != applied.get(*k)
                })
                .collect(),
        };
        // Chains to delete: ours, in the kernel, no longer wanted.
        let stale: Vec<&String> = match (applied, existing) {
            (Some(applied), _) => state
                .touched
                .iter()
                .filter(|k| {
                    k.0 == table && !state.desired.contains_key(*k) && applied.contains_key(*k)
                })
                .map(|(_, name)| name)
                .collect(),
            (None, Some(saved)) => saved
                .chains
                .iter()
                .filter(|(t, name)| {
                    *t == table
                        && render::owned(name)
                        && !state.desired.contains_key(&(table, name.clone()))
                })
                .map(|(_, name)| name)
                .collect(),
            (None, None) => Vec::new(),
        };
        let hooks: Vec<String> = match (full, existing) {
            (true, Some(saved)) => HOOKS
                .iter()
                .filter(|(t, builtin, rule)| {
                    *t == table
                        && !saved
                            .rules
                            .contains(&(table, format!("-A {builtin} {rule}")))
                })
                .rev()
                .map(|(_, builtin, rule)| format!("-I {builtin} 1 {rule}"))
                .collect(),
            (true, None) => HOOKS
                .iter()
                .filter(|(t, ..)| *t == table)
                .rev()
                .map(|(_, builtin, rule)| format!("-I {builtin} 1 {rule}"))
                .collect(),
            _ => Vec::new(),
        };
        if write.is_empty() && stale.is_empty() && hooks.is_empty() {
            continue;
        }
        let _ = writeln!(out, "*{}", table.name());
        for (_, name) in &write {
            let _ = writeln!(out, ":{name} - [0:0]");
        }
        for name in &stale {
            let _ = writeln!(out, ":{name} - [0:0]");
        }
        for key in &write {
            for rule in state.desired.get(*key).into_iter().flatten() {
                let _ = writeln!(out, "-A {} {rule}", key.1);
                result.rules += 1;
            }
        }
        for hook in &hooks {
            let _ = writeln!(out, "{hook}");
        }
        for name in &stale {
            let _ = writeln!(out, "-X {name}");
        }
        out.push_str("COMMIT\n");
        result.written.extend(write.into_iter().cloned());
        result
            .deleted
            .extend(stale.into_iter().map(|name| (table, name.clone())));
    }
    result
}

fn restore(config: &Config, family: IpFamily, mode: Mode, script: &str) -> Result<(), Error> {
    let mut command = config.command(family, mode, "restore");
    command
        .args(["-w", "5", "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let name = format!("{command:?}");
    let mut child = command.spawn().map_err(|source| Error::Spawn {
        command: name.clone(),
        source,
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error shows as the command's failure below.
        let _ = stdin.write_all(script.as_bytes());
    }
    let output = child.wait_with_output().map_err(|source| Error::Spawn {
        command: name.clone(),
        source,
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Error::Restore {
            command: name,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

impl IncrementalSink for IptablesBackend {
    kpng_sink::tracked_view!(tracker);

    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.tracker.check()?;
        let start = Instant::now();
        if self.run == Run::DryRun {
            // A dry run never reads the kernel: it writes everything.
            self.tracker.force_full();
        }
        let full = self.tracker.full();
        self.last = SyncStats {
            full,
            ..SyncStats::default()
        };
        self.last.services = self.refresh();
        let result = self.apply_all(full);
        if let Ok(script) = &result {
            self.last_script.clone_from(script);
            for state in &mut self.families {
                match state.applied.as_mut().filter(|_| !full) {
                    Some(applied) => {
                        for key in std::mem::take(&mut state.touched) {
                            match state.desired.get(&key) {
                                Some(rules) => applied.insert(key, rules.clone()),
                                None => applied.remove(&key),
                            };
                        }
                    }
                    None => {
                        state.applied = Some(state.desired.clone());
                        state.touched.clear();
                    }
                }
            }
        }
        self.last.micros = start.elapsed().as_micros();
        match result {
            Ok(_) => {
                self.tracker.synced(true);
                tracing::debug!(
                    revision,
                    full,
                    rules = self.last.rules,
                    "iptables sync applied"
                );
                Ok(())
            }
            Err(e) => {
                // What failed kept its previous rules; start over from a
                // full rewrite next time.
                self.tracker.synced(false);
                for state in &mut self.families {
                    state.applied = None;
                }
                tracing::warn!(revision, error = %e, "iptables sync failed");
                Err(SinkError::backend("iptables", e))
            }
        }
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
