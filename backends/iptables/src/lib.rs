//! The iptables backend of kpng-rs.
//!
//! [`IptablesBackend`] is a [`kpng_sink::Sink`]: each [`Round`] hands
//! it a node's view and the Services that changed, and it programs
//! kube-proxy's Service semantics in kube-proxy's chain layout, for IPv4
//! (`iptables`) and IPv6 (`ip6tables`).
//!
//! - **Layout**: `KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-EXTERNAL-SERVICES`,
//!   `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`, `KUBE-FORWARD`,
//!   `KUBE-PROXY-FIREWALL`; per Service port `KUBE-SVC-*`, `KUBE-SVL-*`,
//!   `KUBE-EXT-*`, `KUBE-FW-*`; per endpoint `KUBE-SEP-*`, with stable
//!   hashed names. Load balancing is `statistic --mode random` with
//!   probability 1/(N-i); ClientIP affinity is `recent`.
//! - **Compact layout** ([`Layout`], [`IptablesConfig::layout`], `kpng …
//!   to-iptables --iptables-layout auto|kube-proxy|compact`): endpoints
//!   on other nodes get no `KUBE-SEP-*` chain, their balancing rule DNATs
//!   to them; the same semantics in a third of the table and a tenth of
//!   the chains, so that 100k Services × 10 endpoints fit a legacy table
//!   (512 MiB at most). `auto`, the default, uses it above
//!   [`AUTO_COMPACT_ENDPOINTS`] endpoints.
//! - **Semantics**: the same as the nftables backend (ClusterIP, NodePort,
//!   externalIPs, LB IPs with source ranges, externalTrafficPolicy and
//!   internalTrafficPolicy Local, terminating fallback and hints from the
//!   node view, REJECT with no endpoint, DROP with no local endpoint or on
//!   an unallocated Service-CIDR address, masquerade by mark, hairpin).
//! - **Applying**: one `iptables-restore --noflush` batch per family. A
//!   full round, and the first sync after a failure of its own (even in an
//!   incremental round), rewrites every chain and deletes stale ones it
//!   owns; others re-render only the Services of [`Round::services`] (and
//!   the node's chains when [`Round::node_changed`] or
//!   [`Round::service_cidrs_changed`]) and rewrite only the chains that
//!   changed. The backend keeps what it rendered of each Service, never a
//!   copy of the view. Chains it does not own are never touched; the jumps
//!   from the built-in chains are inserted once. A failed restore changes
//!   nothing in the tables it failed in, and the next sync is a full one.
//!   With iptables-legacy, a batch declaring more than
//!   [`kpng_netfilter::iptables::LEGACY_CHUNK_CHAINS`] chains in a table (a
//!   first sync past ~9,000 Services × 10 endpoints) is applied in several
//!   `iptables-restore` runs, the chains jumped to before those jumping to
//!   them, the dispatch chains last; on a failure what the earlier runs
//!   wrote is put back.
//! - **Modes**: iptables-nft or iptables-legacy, as set in [`IptablesConfig::mode`],
//!   or detected as kube-proxy does: the mode that already holds rules.
//!
//! # Example
//!
//! Render the rules for one Service without touching the kernel:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_backend_iptables::{IptablesConfig, IptablesBackend};
//! use kpng_model::v1::{Protocol, Service, ServicePort};
//! use kpng_model::view::{NodeView, ServiceView};
//! use kpng_sink::{Round, Sink};
//!
//! let mut backend = IptablesBackend::new(IptablesConfig::default()).dry_run();
//! let svc = Arc::new(kpng_model::ServiceInfo::new(
//!     Service::new("default", "web")
//!         .with_cluster_ips(["10.96.0.10".parse()?])
//!         .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
//! ).expect("valid"));
//! let mut view = NodeView { revision: 1, ..NodeView::default() };
//! view.services.insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
//! backend.sync(&Round::full(&view))?;
//! // No endpoint: the ClusterIP port rejects.
//! assert!(backend.last_script().contains("-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j REJECT"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Instant;

use kpng_model::view::NodeView;
use kpng_model::{IpFamily, IpNet, ServiceName};
use kpng_sink::{ProxyConfig, Round, Sink, SinkError};

use kpng_netfilter::iptables::{Batch, Jump, Plan, Runner, apply_batches};
use render::{DISPATCH, HOOKS, Render};

/// Errors of the iptables backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Running iptables failed, or it refused the batch (which was rolled
    /// back).
    #[error(transparent)]
    Apply(#[from] kpng_netfilter::Error),
    /// A [`Layout`] name that is none of `auto`, `kube-proxy`, `compact`.
    #[error("unknown iptables layout {0:?}: expected auto, kube-proxy or compact")]
    UnknownLayout(String),
}

/// [`Layout::Auto`] picks the compact layout when the Services' endpoints
/// (summed over their ports, in the family that has most) exceed this:
/// the `KUBE-SEP-*` chains kube-proxy's layout would make.
///
/// Below it both layouts sync in seconds and kube-proxy's per-endpoint
/// chains (the names, the counters operators and tools know) cost
/// little. Above it those chains are most of the table and of the time:
/// `iptables-restore`'s and libiptc's costs grow with the number of
/// chains, and with iptables-legacy each commit rewrites the whole table,
/// ~0.97 KB per endpoint in kube-proxy's layout against ~0.3 KB in the
/// compact one, up to the kernel's limit on a legacy table (512 MiB,
/// ~550,000 endpoints in kube-proxy's layout). See docs/performance.md,
/// "iptables".
pub const AUTO_COMPACT_ENDPOINTS: usize = 50_000;

/// [`Layout::Auto`] goes back to kube-proxy's layout only below this
/// (80 % of [`AUTO_COMPACT_ENDPOINTS`]), so that a cluster near the
/// threshold does not switch, and rewrite everything, back and forth.
pub const AUTO_KUBE_PROXY_ENDPOINTS: usize = 40_000;

/// How endpoints are laid out in the nat table. Both have kube-proxy's
/// semantics, and every other chain is the same.
///
/// - **kube-proxy**: kube-proxy's own: a `KUBE-SEP-*` chain per endpoint
///   (its hairpin rule, `-s` the endpoint `-j KUBE-MARK-MASQ`, then the
///   DNAT), jumped to from the Service port's `KUBE-SVC-*`/`KUBE-SVL-*`
///   rules.
/// - **compact**: an endpoint on another node has no chain: the Service
///   port's balancing rule DNATs to it (`-m statistic … -p tcp -j DNAT
///   --to-destination IP:PORT`). Its hairpin rule is not needed: only
///   the endpoint itself sends from its address, and that traffic is
///   translated on its own node. Endpoints on this node, endpoints on no
///   node (addresses outside the cluster, whose traffic may come through
///   this one) and every endpoint of a Service with ClientIP affinity
///   (`-m recent` needs a name per endpoint) keep kube-proxy's chains.
///   About a third of the table and a tenth of the chains at 100 nodes.
///
/// The layout changes only with a full rewrite, which removes the other
/// layout's stale `KUBE-SEP-*` chains in the same restore.
///
/// ```
/// use kpng_backend_iptables::Layout;
///
/// assert_eq!("compact".parse::<Layout>()?, Layout::Compact);
/// assert_eq!(Layout::KubeProxy.to_string(), "kube-proxy");
/// assert!("sparse".parse::<Layout>().is_err());
/// # Ok::<(), kpng_backend_iptables::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Compact above [`AUTO_COMPACT_ENDPOINTS`] endpoints, kube-proxy's
    /// below [`AUTO_KUBE_PROXY_ENDPOINTS`], decided again on every sync
    /// (the default).
    #[default]
    Auto,
    /// kube-proxy's layout, whatever the size.
    KubeProxy,
    /// The compact layout, whatever the size.
    Compact,
}

impl std::str::FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "auto" => Ok(Self::Auto),
            "kube-proxy" => Ok(Self::KubeProxy),
            "compact" => Ok(Self::Compact),
            other => Err(Error::UnknownLayout(other.to_owned())),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::KubeProxy => "kube-proxy",
            Self::Compact => "compact",
        })
    }
}

pub use kpng_netfilter::iptables::{ChainKey, Mode, Table};

/// Settings of the iptables backend: kube-proxy's ([`ProxyConfig`]), and
/// how the iptables tools run.
///
/// ```
/// use kpng_backend_iptables::IptablesConfig;
/// use kpng_sink::ProxyConfig;
///
/// let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]);
/// let config = IptablesConfig::new(proxy).in_netns("node-a");
/// assert_eq!(config.command_prefix, ["ip", "netns", "exec", "node-a"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct IptablesConfig {
    /// kube-proxy's settings.
    pub proxy: ProxyConfig,
    /// iptables-nft or -legacy; `None` (default): detected on the first
    /// sync, as kube-proxy does.
    pub mode: Option<Mode>,
    /// A command prefix the iptables tools run under (default none; e.g.
    /// `ip netns exec NAME`).
    pub command_prefix: Vec<String>,
    /// How long one `iptables-restore` or `iptables-save` may run before it
    /// is killed (`kpng … to-iptables --iptables-restore-timeout`); `None`
    /// (default): 60 s plus 2 ms per line of its input
    /// ([`kpng_netfilter::iptables::scaled_timeout`]); with iptables-legacy,
    /// each run of a batch applied in several (see the crate docs) has its
    /// own, scaled to its part. A sync that times out
    /// fails, changes nothing, and the next one is a full one.
    pub restore_timeout: Option<std::time::Duration>,
    /// How endpoints are laid out (`kpng … to-iptables --iptables-layout`):
    /// see [`Layout`]; default [`Layout::Auto`].
    pub layout: Layout,
}

impl Default for IptablesConfig {
    fn default() -> Self {
        Self::new(ProxyConfig::default())
    }
}

impl IptablesConfig {
    /// The tools detected on the first sync, run here, with `proxy`.
    pub fn new(proxy: ProxyConfig) -> Self {
        Self {
            proxy,
            mode: None,
            command_prefix: Vec::new(),
            restore_timeout: None,
            layout: Layout::Auto,
        }
    }

    /// Lays endpoints out as `layout` says (see [`Layout`]).
    #[must_use]
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Kills an `iptables-restore` (or `-save`) after `timeout`, whatever
    /// its size.
    #[must_use]
    pub fn restore_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.restore_timeout = Some(timeout);
        self
    }

    /// Uses iptables-nft or -legacy, not the one detected.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Runs the iptables tools in the network namespace `name`.
    #[must_use]
    pub fn in_netns(mut self, name: &str) -> Self {
        self.command_prefix = ["ip", "netns", "exec", name].map(String::from).to_vec();
        self
    }
}

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IptablesSyncStats {
    /// Whether it rewrote everything (a full round, a dry run, or a
    /// change of layout).
    pub replaced: bool,
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
    /// Whether the rules are in the compact layout (see [`Layout`]).
    pub compact: bool,
}

/// Per-family state.
#[derive(Default)]
struct FamilyState {
    renders: BTreeMap<ServiceName, Render>,
    globals: Render,
    /// The renders' endpoints, summed (what [`Layout::Auto`] counts).
    endpoints: usize,
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
        self.endpoints = (self.endpoints + new.endpoints).saturating_sub(old.endpoints);
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
    Print,
    /// Renders incrementally for an aggregator; never runs iptables.
    Publish,
}

/// The iptables backend. See the crate docs.
pub struct IptablesBackend {
    config: IptablesConfig,
    run: Run,
    runner: Runner,
    families: [FamilyState; 2],
    last_script: String,
    last: IptablesSyncStats,
    /// The last round, as handed over.
    round: kpng_sink::SyncStats,
    /// The Service CIDRs dropped: `config.proxy.service_cidrs` and the
    /// cluster's ServiceCIDRs, merged.
    service_cidrs: Vec<IpNet>,
    /// Whether the renders are in the compact layout.
    compact: bool,
}

impl std::fmt::Debug for IptablesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IptablesBackend")
            .field("config", &self.config)
            .field("mode", &self.runner.mode)
            .field("services", &self.families[0].renders.len())
            .field("last", &self.last)
            .finish()
    }
}

/// The last round: its stats, and its iptables-restore batches.
impl kpng_sink::RoundReport for IptablesBackend {
    fn last_sync(&self) -> kpng_sink::SyncStats {
        self.round.wrote(self.last.replaced, self.last.rules)
    }
    fn write_script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(self.last_script.as_bytes())
    }
}

impl IptablesBackend {
    /// A backend that applies its batches with `iptables-restore`.
    pub fn new(config: IptablesConfig) -> Self {
        Self {
            runner: Runner {
                prefix: config.command_prefix.clone(),
                mode: config.mode,
                timeout: config.restore_timeout,
                expected_lines: 0,
            },
            service_cidrs: config.proxy.service_cidrs.clone(),
            compact: config_compact(&config),
            config,
            run: Run::Apply,
            round: kpng_sink::SyncStats::default(),
            families: Default::default(),
            last_script: String::new(),
            last: IptablesSyncStats::default(),
        }
    }

    /// The layout the renders are in: compact or kube-proxy's.
    pub fn layout_in_use(&self) -> Layout {
        if self.compact {
            Layout::Compact
        } else {
            Layout::KubeProxy
        }
    }

    /// Sets the layout; a change takes effect on the next sync, which
    /// rewrites everything (see [`Layout`]).
    pub fn set_layout(&mut self, layout: Layout) {
        self.config.layout = layout;
    }

    /// The layout [`IptablesConfig::layout`] wants for `endpoints` (see
    /// [`Layout::Auto`]), from the one in use.
    fn wanted_compact(&self, endpoints: usize) -> bool {
        match self.config.layout {
            Layout::KubeProxy => false,
            Layout::Compact => true,
            Layout::Auto if self.compact => endpoints >= AUTO_KUBE_PROXY_ENDPOINTS,
            Layout::Auto => endpoints > AUTO_COMPACT_ENDPOINTS,
        }
    }

    /// Prints instead of applying: syncs compute the batches (see
    /// [`last_script`](Self::last_script)) and change nothing. A dry run
    /// never reads the kernel, so every sync is written as a full one.
    pub fn dry_run(mut self) -> Self {
        self.run = Run::Print;
        self
    }

    /// Renders for someone else to apply (an aggregator: see
    /// `kpng_aggregator::Publisher`): syncs keep the desired chains
    /// ([`chains`](Self::chains)) incrementally and never run iptables.
    pub fn publishing(mut self) -> Self {
        self.run = Run::Publish;
        self
    }

    /// The chains the backend wants, per family (IPv4, then IPv6): every
    /// `KUBE-` chain with its rules, as of the last sync.
    pub fn chains(&self) -> impl Iterator<Item = (IpFamily, &ChainKey, &[String])> + '_ {
        self.families
            .iter()
            .zip([IpFamily::V4, IpFamily::V6])
            .flat_map(|(state, family)| {
                state
                    .desired
                    .iter()
                    .map(move |(key, rules)| (family, key, rules.as_slice()))
            })
    }

    /// The jumps into its chains the backend puts in the built-in chains,
    /// in order (each family has the same): table, built-in chain, rule.
    pub fn jumps() -> &'static [(Table, &'static str, &'static str)] {
        &HOOKS
    }

    /// Whether a chain of this name is the backend's (it writes it, and
    /// deletes it when stale): its fixed chains and its per-Service
    /// `KUBE-SVC-*`, `KUBE-SVL-*`, `KUBE-EXT-*`, `KUBE-FW-*`, `KUBE-SEP-*`.
    pub fn owns_chain(name: &str) -> bool {
        render::owned(name)
    }

    /// Sets how long one `iptables-restore` or `-save` may run (`None`:
    /// scaled to its input): see [`IptablesConfig::restore_timeout`].
    pub fn set_restore_timeout(&mut self, timeout: Option<std::time::Duration>) {
        self.config.restore_timeout = timeout;
        self.runner.timeout = timeout;
    }

    /// The batches of the last sync, IPv4 then IPv6.
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &IptablesSyncStats {
        &self.last
    }

    /// The mode in use, once known.
    pub fn mode(&self) -> Option<Mode> {
        self.runner.mode
    }

    /// The settings.
    pub fn config(&self) -> &IptablesConfig {
        &self.config
    }

    /// The addresses NodePorts listen on, in one family, on `view`'s node
    /// (loopback left out: kpng sets no `route_localnet`, without which a
    /// packet translated from loopback is lost).
    fn node_ips(&self, view: &NodeView, family: IpFamily) -> Vec<String> {
        match self.config.proxy.nodeport_prefixes() {
            Some(cidrs) => cidrs
                .iter()
                .filter(|c| IpFamily::of(&c.network()) == family)
                .map(ToString::to_string)
                .collect(),
            None => view
                .node_addresses(family)
                .map(|ip| match ip {
                    IpAddr::V4(_) => format!("{ip}/32"),
                    IpAddr::V6(_) => format!("{ip}/128"),
                })
                .collect(),
        }
    }

    /// Re-renders what `round` changed, or everything when `full`;
    /// returns how many Services were rendered.
    fn refresh(&mut self, round: &Round<'_>, full: bool) -> usize {
        let view = round.view();
        // What each Service rendered before is kept per family (`renders`):
        // a full rewrite starts from nothing and renders every Service.
        let mut names: Vec<ServiceName> = if full {
            view.services.keys().cloned().collect()
        } else {
            round.services().map(|change| change.name.clone()).collect()
        };
        let mut renew = full || round.node_changed();
        if full || round.service_cidrs_changed() {
            let merged = view.service_cidrs_with(&self.config.proxy.service_cidrs);
            if merged != self.service_cidrs {
                // Where a Service's REJECT rules go depends on them:
                // every Service is rendered again.
                self.service_cidrs = merged;
                renew = true;
                let all: BTreeSet<ServiceName> = names
                    .into_iter()
                    .chain(view.services.keys().cloned())
                    .collect();
                names = all.into_iter().collect();
            }
        }
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let cidrs = &self.service_cidrs;
            let globals = renew.then(|| {
                render::globals(&self.config, family, &self.node_ips(view, family), cidrs)
            });
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
                let new = view.services.get(name).map(|service| {
                    render::service(service, family, &self.config, cidrs, self.compact)
                });
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

    /// Writes one family's batch, with what its chains held before.
    fn prepare(
        &mut self,
        i: usize,
        family: IpFamily,
        full: bool,
    ) -> Result<(Batch, BTreeMap<ChainKey, Vec<String>>), Error> {
        let owned = |name: &str| render::owned(name);
        let existing = match (full, self.run) {
            (true, Run::Apply) => {
                // What iptables-save prints scales with what is wanted,
                // or with what the kernel holds when that is more: the
                // last sync's chains, or (the kernel may hold kube-proxy's
                // layout after a switch or a restart) those of the compact
                // layout's endpoints, 3 lines each there.
                let state = &self.families[i];
                let lines = |chains: &BTreeMap<ChainKey, Vec<String>>| -> usize {
                    chains.values().map(|rules| rules.len() + 1).sum()
                };
                let mut expected = lines(&state.desired);
                if self.compact {
                    expected += 3 * state.endpoints;
                }
                self.runner.expected_lines = expected.max(state.applied.as_ref().map_or(0, lines));
                Some(self.runner.save(family, &owned)?)
            }
            _ => None,
        };
        let state = &self.families[i];
        let hooks: Vec<Jump> = if full {
            let nudges = self
                .config
                .proxy
                .end_tcp_connections
                .then_some(&render::NUDGES_HOOK);
            HOOKS
                .iter()
                .chain(nudges)
                .map(|(t, builtin, rule)| (*t, (*builtin).to_owned(), (*rule).to_owned()))
                .collect()
        } else {
            Vec::new()
        };
        let batch = Batch::new(Plan {
            desired: &state.desired,
            applied: state.applied.as_ref().filter(|_| !full),
            touched: &state.touched,
            existing: existing.as_ref(),
            owned: &owned,
            add_jumps: &hooks,
            remove_jumps: &[],
        });
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
            let (batch, before) = self.prepare(i, family, full)?;
            batches.push((family, batch, before));
        }
        let mut script = String::new();
        for (_, batch, _) in &batches {
            script.push_str(&batch.script);
            self.last.rules += batch.rules;
            self.last.chains += batch.written.len() + batch.deleted.len();
        }
        if self.run != Run::Apply {
            return Ok(script);
        }
        let start = Instant::now();
        let result = apply_batches(&mut self.runner, &batches);
        self.last.restore_micros = start.elapsed().as_micros();
        match result {
            Ok(()) => Ok(script),
            Err(e) => {
                self.last_script = script;
                Err(e.into())
            }
        }
    }
}

/// The layout a forced [`Layout`] setting wants; [`Layout::Auto`]: none
/// yet (kube-proxy's until the first sync counts).
fn config_compact(config: &IptablesConfig) -> bool {
    config.layout == Layout::Compact
}

/// The endpoints of `view`'s Services summed over their ports, in the
/// family that has most: what the renders will count, as near as the
/// view tells before any is made (an endpoint lacking a port counts).
fn estimated_endpoints(view: &NodeView) -> usize {
    IpFamily::BOTH
        .into_iter()
        .map(|family| {
            view.services
                .values()
                .map(|s| s.cluster_endpoints(family).count() * s.service.ports.len())
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

/// Applies a round: a full one (or any in a dry run) rewrites every chain; an incremental one re-renders the Services it
/// lists and rewrites the chains that changed.
impl Sink for IptablesBackend {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let start = Instant::now();
        let revision = round.revision();
        self.round = kpng_sink::SyncStats::of(round);
        // A dry run never reads the kernel: it writes everything.
        let mut full = round.is_full() || self.run == Run::Print;
        if full {
            // Decided before rendering, so that a large cluster's first
            // sync is rendered once: from the view's endpoints.
            self.compact = self.wanted_compact(estimated_endpoints(round.view()));
        } else if self.config.layout != Layout::Auto && self.wanted_compact(0) != self.compact {
            // The layout was set (set_layout): everything is rewritten.
            self.compact = !self.compact;
            full = true;
        }
        self.last = IptablesSyncStats {
            replaced: full,
            ..IptablesSyncStats::default()
        };
        self.last.services = self.refresh(round, full);
        let counted = self.families.iter().map(|f| f.endpoints).max().unwrap_or(0);
        if self.wanted_compact(counted) != self.compact {
            // The Services' endpoints crossed Layout::Auto's threshold:
            // everything is rendered again and rewritten, and the other
            // layout's KUBE-SEP chains go in the same restore.
            self.compact = !self.compact;
            tracing::info!(
                endpoints = counted,
                layout = %self.layout_in_use(),
                "iptables layout changes: every chain is rewritten"
            );
            full = true;
            self.last.replaced = true;
            self.last.services = self.refresh(round, true);
        }
        self.last.compact = self.compact;
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
                tracing::debug!(
                    revision,
                    full,
                    rules = self.last.rules,
                    "iptables sync applied"
                );
                Ok(())
            }
            Err(e) => {
                // What failed kept its previous rules; the driver's next
                // round is full.
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
