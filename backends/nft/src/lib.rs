//! The nftables backend of kpng-rs.
//!
//! [`NftBackend`] is a [`kpng_sink::IncrementalSink`]: it receives a node's
//! view as ops and programs kube-proxy's Service semantics into one table
//! per IP family (`ip kpng`, `ip6 kpng`), owned wholly by kpng-rs.
//!
//! - **Dispatch** is one verdict-map lookup: `service-ips` keyed by
//!   `daddr . l4proto . dport` (ClusterIPs, externalIPs, LB IPs) and
//!   `service-nodeports` keyed by `l4proto . dport`.
//! - **Load balancing** is uniform: each Service port has a tiny chain that
//!   jumps to a shared chain per endpoint count, whose one rule looks the
//!   target up in a single large map by `numgen random mod N`.
//! - **Semantics**: ClientIP affinity with its timeout, NodePorts on the
//!   node's addresses (never loopback), LB IPs (ipMode Proxy ones are not
//!   programmed) with source ranges, externalTrafficPolicy and
//!   internalTrafficPolicy Local, REJECT when a Service has no endpoint,
//!   DROP when endpoints exist but none fits a Local policy, REJECT of
//!   unknown ports on live ClusterIPs, DROP of unallocated Service-CIDR
//!   addresses, masquerade by mark (bit 14 by default), `masquerade_all`,
//!   the pod-CIDR detector, hairpin, dual stack, TCP, UDP and SCTP.
//! - **Updates**: the first sync, and any after a failure, replaces the
//!   tables in one transaction. Others rewrite only the changed Services'
//!   chains and map elements. A change of map elements only (most endpoint
//!   changes) goes as one nf_tables netlink batch, with no `nft` process
//!   (under a millisecond at 10k Services × 10 endpoints; see
//!   [`Config::netlink`]); anything else is one `nft -f -` transaction.
//!   Either is atomic: a failed transaction changes nothing in the kernel,
//!   and the error carries nft's message or the kernel's errno.
//!
//! # Example
//!
//! Render the script for one Service without touching the kernel:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_backend_nft::{Config, NftBackend};
//! use kpng_model::v1::{IpSet, Service, ServicePort, Protocol};
//! use kpng_model::view::ViewOp;
//! use kpng_sink::IncrementalSink;
//!
//! let mut backend = NftBackend::new(Config::default()).dry_run();
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
//! // No endpoint: the ClusterIP rejects.
//! assert!(backend.last_script().contains("10.96.0.10 . tcp . 80 : goto reject-chain"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod netlink;
mod render;
mod script;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use kpng_model::IpFamily;
use kpng_model::addr::{cidrs_in, parse_cidr_flag};
use kpng_model::view::NodeView;
use kpng_sink::{IncrementalSink, SinkError, ViewTracker};

use netlink::Batch;
use render::{CLUSTER_CIDRS, Fam, NODEPORT_IPS, Render, SERVICE_CIDRS};
use script::{Applied, Objects, Table, Touched};

/// Errors of the nftables backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `nft` could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `nft` rejected the transaction; nothing of it was applied.
    #[error("nft transaction failed ({status}): {stderr}")]
    Nft {
        /// Its exit status.
        status: String,
        /// What it printed.
        stderr: String,
    },
    /// The kernel refused a netlink transaction, or it could not be sent;
    /// nothing of it was applied.
    #[error("nf_tables netlink transaction failed: {message}")]
    Netlink {
        /// What failed, and the kernel's error.
        message: String,
    },
    /// The aggregator refused the backend's publication, or the kernel
    /// refused it there; nothing of it was applied.
    #[error("aggregator: {message}")]
    Aggregator {
        /// Why.
        message: String,
    },
    /// `nft` did not finish in time; it was killed. The kernel applies a
    /// transaction whole or not at all, and the next sync is a full one.
    #[error("nft did not finish within {seconds} s")]
    Timeout {
        /// The limit.
        seconds: u64,
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

/// Settings of the backend, named after kube-proxy's flags.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// The table name in each family (default `kpng`).
    pub table: String,
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
    /// The command that runs nft, with its arguments (default `["nft"]`);
    /// `-f -` is added.
    pub nft_command: Vec<String>,
    /// Send element-only updates (most endpoint changes) as one nf_tables
    /// netlink batch instead of running `nft` (default `true`). nft 1.0.6
    /// reads the whole ruleset back before such a change, which costs
    /// ~17 ms at 100k endpoints; the batch costs well under a millisecond.
    /// Full syncs and changes of chains or sets always go through `nft`.
    pub netlink: bool,
    /// How long one `nft` run may take before it is killed (default 60 s).
    pub nft_timeout: std::time::Duration,
    /// The network namespace the netlink path programs, as a path
    /// (`/run/netns/NAME`); `None`: the process's own. When `nft_command`
    /// is not the default `nft`, the netlink path is used only if this is
    /// set, since the backend cannot know where that command runs.
    pub netns: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            table: "kpng".into(),
            cluster_cidrs: Vec::new(),
            service_cidrs: Vec::new(),
            nodeport_addresses: None,
            masquerade_all: false,
            masquerade_bit: 14,
            nft_command: vec!["nft".into()],
            netlink: true,
            nft_timeout: std::time::Duration::from_secs(60),
            netns: None,
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
        parse_cidr_flag(field, text).map_err(|value| Error::Config { field, value })
    }

    /// Runs nft in the network namespace `name` (`ip netns exec NAME nft`)
    /// and points the netlink path at it too.
    pub fn in_netns(mut self, name: &str) -> Self {
        self.nft_command = ["ip", "netns", "exec", name, "nft"]
            .map(String::from)
            .to_vec();
        self.netns = Some(PathBuf::from("/run/netns").join(name));
        self
    }

    /// Whether element-only updates may go through netlink: it is on, and
    /// the namespace nft programs is known.
    fn netlink_usable(&self) -> bool {
        self.netlink && (self.netns.is_some() || self.nft_command == ["nft"])
    }

    pub(crate) fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }

    pub(crate) fn cluster_cidrs(&self, family: IpFamily) -> Vec<String> {
        cidrs_in(&self.cluster_cidrs, family)
    }
}

/// How a sync reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Apply,
    DryRun,
}

/// Per-family state: what each Service contributes, the sum of it, and
/// what the kernel holds.
#[derive(Default)]
struct FamilyState {
    globals: Render,
    desired: Objects,
    applied: Option<Applied>,
    touched: Touched,
}

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStats {
    /// Whether it replaced a table (both, or one family's).
    pub full: bool,
    /// Lines (nft commands) in its script.
    pub commands: usize,
    /// Services re-rendered.
    pub services: usize,
    /// Time to render and run the transaction.
    pub micros: u128,
    /// Of which running `nft` (or the netlink transaction).
    pub nft_micros: u128,
    /// Whether it went as a netlink batch (elements only), not through
    /// `nft`.
    pub netlink: bool,
}

/// The nftables backend. See the crate docs.
pub struct NftBackend {
    config: Config,
    mode: Mode,
    tracker: ViewTracker,
    /// The view as of the last render: what the desired objects hold.
    rendered: NodeView,
    families: [FamilyState; 2],
    last_script: String,
    last: SyncStats,
    /// The netlink socket of element-only updates, opened on first use.
    socket: Option<netlink::Socket>,
    /// The tables' generation, as published to an aggregator.
    epoch: u64,
}

impl std::fmt::Debug for NftBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NftBackend")
            .field("config", &self.config)
            .field("services", &self.tracker.view().services.len())
            .field("last", &self.last)
            .finish()
    }
}

impl NftBackend {
    /// A backend that applies its scripts with `config.nft_command`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            mode: Mode::Apply,
            tracker: ViewTracker::default(),
            rendered: NodeView::default(),
            families: Default::default(),
            last_script: String::new(),
            socket: None,
            epoch: 0,
            last: SyncStats::default(),
        }
    }

    /// Renders scripts but never runs nft (`--dry-run`).
    pub fn dry_run(mut self) -> Self {
        self.mode = Mode::DryRun;
        self
    }

    /// The script of the last sync (applied, or printed in dry-run mode).
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &SyncStats {
        &self.last
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Makes the next sync a full one.
    pub fn force_full(&mut self) {
        self.tracker.force_full();
    }

    /// The desired tables of both families as a [`kpng_aggregator`]
    /// fragment: the objects a full sync writes. `epoch` is the tables'
    /// generation: a new one makes the aggregator replace them whole.
    pub fn fragment_at(&self, epoch: u64) -> kpng_aggregator::nft::Fragment {
        let mut fragment = kpng_aggregator::nft::Fragment::new();
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let table = Table {
                fam: Fam(family),
                name: &self.config.table,
                config: &self.config,
            };
            table.fragment(&self.families[i].desired, epoch, &mut fragment);
        }
        fragment
    }

    /// The global objects of one family: NodePort addresses and CIDRs.
    fn globals(&self, family: IpFamily) -> Render {
        let mut render = Render::default();
        let node_ips: Vec<String> = match &self.config.nodeport_addresses {
            Some(cidrs) => cidrs_in(cidrs, family),
            None => self
                .tracker
                .view()
                .node_addresses(family)
                .map(|ip| ip.to_string())
                .collect(),
        };
        for (set, list) in [
            (NODEPORT_IPS, node_ips),
            (CLUSTER_CIDRS, self.config.cluster_cidrs(family)),
            (SERVICE_CIDRS, cidrs_in(&self.config.service_cidrs, family)),
        ] {
            for e in list {
                render.elements.entry(set).or_default().insert(e.into());
            }
        }
        render
    }

    /// Re-renders what changed since the last sync into the desired
    /// objects; returns how many Services were rendered.
    fn refresh(&mut self) -> usize {
        let changes = self.tracker.take_changes();
        let (full, names) = (changes.full, changes.services);
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let globals = changes.node.then(|| self.globals(family));
            let state = &mut self.families[i];
            if full {
                *state = FamilyState {
                    applied: None,
                    ..FamilyState::default()
                };
            }
            let mut touched = if full { None } else { Some(&mut state.touched) };
            if let Some(globals) = globals {
                let old = std::mem::replace(&mut state.globals, globals);
                state.desired.remove(&old, touched.as_deref_mut());
                state.desired.add(&state.globals, touched.as_deref_mut());
            }
            for name in &names {
                // What a Service contributed is rendered again from the
                // view it was rendered from (rendering is a pure function of
                // the view and the settings), rather than kept: at 10k
                // Services that saves a copy of every chain and element.
                if let Some(old) = self.rendered.services.get(name).filter(|_| !full) {
                    let old = render::service(old, family, &self.config);
                    state.desired.remove(&old, touched.as_deref_mut());
                }
                if let Some(view) = self.tracker.view().services.get(name) {
                    let new = render::service(view, family, &self.config);
                    state.desired.add(&new, touched.as_deref_mut());
                }
            }
        }
        // An O(1) copy: the views share their Services.
        self.rendered = self.tracker.view().clone();
        names.len()
    }

    /// The script of this sync, per family whether it replaces the whole
    /// table, and the same change as a netlink batch when it changes
    /// elements only.
    fn script(&self) -> (String, [bool; 2], Option<Batch>) {
        let mut out = String::new();
        let mut full = [true; 2];
        let mut batch = (self.mode == Mode::Apply && self.config.netlink_usable()).then(Batch::new);
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let state = &self.families[i];
            let table = Table {
                fam: Fam(family),
                name: &self.config.table,
                config: &self.config,
            };
            let incremental = match &state.applied {
                Some(applied) if !self.tracker.full() => {
                    table.incremental(applied, &state.desired, &state.touched)
                }
                _ => None,
            };
            match incremental {
                Some(delta) => {
                    full[i] = false;
                    out.push_str(&delta.script);
                    if delta.structural {
                        batch = None;
                    }
                    for (map, verb, list) in &delta.elements {
                        let Some(b) = batch.as_mut() else { break };
                        let list: Vec<&render::Elem> = list.iter().collect();
                        if let Err(e) = b.elements(family, &self.config.table, map, *verb, &list) {
                            tracing::warn!(error = %e, "element not encodable for netlink; using nft");
                            batch = None;
                        }
                    }
                }
                None => {
                    batch = None;
                    table.full(&state.desired, &mut out);
                }
            }
        }
        let batch = batch.filter(|b| !b.is_empty() && b.len() <= netlink::MAX_BATCH);
        (out, full, batch)
    }

    /// Runs one netlink transaction on the kept socket; a failure drops
    /// the socket, so the next one starts clean.
    fn send(&mut self, batch: Batch) -> Result<(), Error> {
        let failed = |e: kpng_netfilter::Error| Error::Netlink {
            message: e.to_string(),
        };
        let mut socket = match self.socket.take() {
            Some(socket) => socket,
            None => netlink::Socket::open(self.config.netns.as_deref()).map_err(failed)?,
        };
        socket.send(batch).map_err(failed)?;
        self.socket = Some(socket);
        Ok(())
    }

    /// Runs one transaction.
    fn run(&self, script: &str) -> Result<(), Error> {
        use kpng_netfilter::Error as Run;
        if self.config.nft_command.is_empty() {
            return Err(Error::Config {
                field: "nft command",
                value: String::new(),
            });
        }
        kpng_aggregator::nft::run_script(&self.config.nft_command, script, self.config.nft_timeout)
            .map_err(|e| match e {
                Run::Spawn { command, source } => Error::Spawn { command, source },
                Run::Timeout { seconds, .. } => Error::Timeout { seconds },
                Run::Command { status, stderr, .. } => Error::Nft { status, stderr },
                other => Error::Nft {
                    status: String::new(),
                    stderr: other.to_string(),
                },
            })
    }
}

/// Through a [`kpng_aggregator::Publisher`], the backend is one producer
/// among several: it renders as usual and publishes its tables; a full
/// sync (the first, after a failure, or for more pick chains) publishes a
/// new table epoch, which the aggregator applies as a whole-table replace.
impl kpng_aggregator::Producer for NftBackend {
    type Subsystem = kpng_aggregator::nft::Nft;

    fn publishing(self) -> Self {
        self.dry_run()
    }
    fn fragment(&mut self) -> imbl::OrdMap<kpng_aggregator::nft::Key, kpng_aggregator::nft::Value> {
        if self.last.full {
            self.epoch += 1;
        }
        self.fragment_at(self.epoch).into()
    }
    fn force_full(&mut self) {
        self.tracker.force_full();
    }
}

impl IncrementalSink for NftBackend {
    kpng_sink::tracked_view!(tracker);

    /// Renders what changed and applies it in one nft transaction. On
    /// failure the kernel keeps its previous ruleset and the next sync is
    /// a full one.
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.tracker.check()?;
        let start = Instant::now();
        let services = self.refresh();
        let (script, full_families, batch) = self.script();
        let full = full_families.contains(&true);
        let nft_start = Instant::now();
        let netlink = batch.is_some();
        let result = match (self.mode, batch) {
            (Mode::DryRun, _) => Ok(()),
            (Mode::Apply, Some(batch)) => self.send(batch),
            (Mode::Apply, None) if script.is_empty() => Ok(()),
            (Mode::Apply, None) => self.run(&script),
        };
        let nft_micros = nft_start.elapsed().as_micros();
        self.last = SyncStats {
            full,
            commands: script.lines().count(),
            services,
            micros: start.elapsed().as_micros(),
            nft_micros,
            netlink,
        };
        self.last_script = script;
        match result {
            Ok(()) => {
                for (state, full) in self.families.iter_mut().zip(full_families) {
                    match state.applied.as_mut() {
                        Some(applied) if !full => applied.update(&state.desired, &state.touched),
                        _ => state.applied = Some(Applied::from_objects(&state.desired)),
                    }
                    state.touched = Touched::default();
                }
                self.tracker.synced(true);
                tracing::debug!(
                    revision,
                    full,
                    commands = self.last.commands,
                    "nft sync applied"
                );
                Ok(())
            }
            Err(e) => {
                // The kernel kept its previous ruleset; start over from a
                // full replace next time.
                self.tracker.synced(false);
                tracing::warn!(revision, error = %e, "nft sync failed");
                Err(SinkError::backend("nft", e))
            }
        }
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
