//! The nftables backend of kpng-rs.
//!
//! [`NftBackend`] is a [`kpng_sink::Sink`]: each [`Round`] hands it a
//! node's view and the Services that changed, and it programs kube-proxy's
//! Service semantics into one table per IP family (`ip kpng`, `ip6 kpng`),
//! owned wholly by kpng-rs.
//!
//! - **Dispatch** is by `daddr . l4proto . dport` (ClusterIPs,
//!   externalIPs, LB IPs) and by `l4proto . dport` (NodePorts): a Service
//!   port with chains of its own (ClientIP affinity) by a verdict map
//!   (`service-ips`, `service-nodeports`), the others by the set of their
//!   class, the shared chain of their kind, policy and endpoint counts
//!   (`… @svc-c3 goto svc-c3`). An endpoint count change then moves data,
//!   not a verdict, and the kernel does not check the whole table again.
//! - **Load balancing** is uniform: the class's chain (masquerade
//!   decisions) goes to a pick chain per endpoint count, whose one rule
//!   looks the target up in a single large map by `numgen random mod N`.
//! - **Semantics**: ClientIP affinity with its timeout, NodePorts on the
//!   node's addresses (never loopback), LB IPs (ipMode Proxy ones are not
//!   programmed) with source ranges, externalTrafficPolicy and
//!   internalTrafficPolicy Local, REJECT when a Service has no endpoint,
//!   DROP when endpoints exist but none fits a Local policy, REJECT of
//!   unknown ports on live ClusterIPs, DROP of unallocated Service-CIDR
//!   addresses, masquerade by mark (bit 14 by default), `masquerade_all`,
//!   the pod-CIDR detector, hairpin, dual stack, TCP, UDP and SCTP.
//! - **Updates**: a full round (the driver makes the first one full, and
//!   any after a failure) replaces the tables in one transaction. Others change only what the round
//!   changed: the elements of an endpoint that came or went, the chains
//!   of a Service whose rules changed. What a Service contributed before
//!   is rendered again from its view before the round
//!   ([`ServiceChange::before`](kpng_sink::ServiceChange)) and taken out,
//!   so the backend keeps no copy of the view. Chains shared by Services
//!   (one per endpoint count and policy) exist while a Service uses them,
//!   so a small cluster has a small ruleset.
//! - **The kernel** is programmed over nf_tables netlink through
//!   [`kpng_netfilter`], with no `nft` process: each sync is one batch
//!   the kernel commits whole or not at all, and a refusal names the
//!   object it refused. A dry run prints the same transaction as an nft
//!   script (`nft -f` accepts it).
//!
//! # Example
//!
//! Render the script for one Service without touching the kernel, then
//! the round that removes it:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_backend_nft::{NftConfig, NftBackend};
//! use kpng_model::v1::{Protocol, Service, ServicePort};
//! use kpng_model::view::{NodeView, ServiceView};
//! use kpng_sink::{Round, Sink};
//!
//! let mut backend = NftBackend::new(NftConfig::default()).dry_run();
//! let svc = Arc::new(kpng_model::ServiceInfo::new(
//!     Service::new("default", "web")
//!         .with_cluster_ips(["10.96.0.10".parse()?])
//!         .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
//! ).expect("valid"));
//! let mut view = NodeView { revision: 1, ..Default::default() };
//! view.services.insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
//! backend.sync(&Round::full(&view))?;
//! // No endpoint: the ClusterIP rejects; the element names its Service.
//! assert!(backend.last_script().contains(
//!     "add element ip kpng no-endpoint-services { 10.96.0.10 . tcp . 80 comment \"default/web:http/tcp\" }"
//! ));
//!
//! let before = view.clone();
//! view.services.clear();
//! view.revision = 2;
//! backend.sync(&Round::between(&before, &view))?;
//! assert!(!backend.last_sync().replaced);
//! // Its elements go, rendered again from its view before the round.
//! assert!(backend.last_script().contains(
//!     "delete element ip kpng cluster-ips { 10.96.0.10 comment \"default/web\" }"
//! ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod claims;
mod counters;
mod objects;
mod render;

use std::path::PathBuf;
use std::time::Instant;

use kpng_model::view::NodeView;
use kpng_model::{IpFamily, IpNet};
use kpng_sink::{ProxyConfig, Round, Sink, SinkError};

pub use counters::CounterReader;
use kpng_netfilter::nft::{self, Transaction};
use objects::{Objects, Pending};
use render::{InNft, Render};

/// Errors of the nftables backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel refused the transaction, or it could not be sent;
    /// nothing of it was applied.
    #[error("nf_tables transaction failed: {0}")]
    Kernel(#[from] kpng_netfilter::Error),
    /// The aggregator refused the backend's publication, or the kernel
    /// refused it there; nothing of it was applied.
    #[error("aggregator: {message}")]
    Aggregator {
        /// Why.
        message: String,
    },
}

/// Settings of the nftables backend: kube-proxy's ([`ProxyConfig`]),
/// and where its tables go.
///
/// ```
/// use kpng_backend_nft::NftConfig;
/// use kpng_sink::ProxyConfig;
///
/// let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]);
/// let config = NftConfig::new(proxy).table("kpng").in_netns("node-a");
/// assert_eq!(config.netns.as_deref(), Some(std::path::Path::new("/run/netns/node-a")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NftConfig {
    /// kube-proxy's settings.
    pub proxy: ProxyConfig,
    /// The table name in each family (default `kpng`).
    pub table: String,
    /// The network namespace to program, as a path (`/run/netns/NAME`);
    /// `None`: the process's own.
    pub netns: Option<PathBuf>,
    /// Whether each Service port's chains and its elements of the verdict
    /// maps and the `cluster-ips` set carry a comment naming the Service
    /// (`namespace/name:port/protocol`), as kube-proxy's do: `nft list
    /// ruleset` and the dry run then say what serves what (default on;
    /// `--nft-comments=false` turns them off).
    pub comments: bool,
    /// Whether the pick maps' elements carry counters: each counts the
    /// new connections sent to its endpoint for its Service port and
    /// kind of destination, read with [`CounterReader`] (`--counters`;
    /// default off: at 10k Services they make a full sync ~30 % dearer
    /// and a scrape dumps every element; see docs/operator/troubleshooting.md).
    pub counters: bool,
    /// Whether the packet path records the UDP flows it translated, and
    /// for how long after a flow's last packet (at least the longest UDP
    /// conntrack timeout: `nf_conntrack_udp_timeout_stream`, 120 s by
    /// default): the conntrack cleanup then finds the flows to a removed
    /// endpoint in that record rather than by walking the conntrack table
    /// ([`NftBackend::flow_record`]). Default 120 s; `None`: no record.
    pub udp_flows: Option<std::time::Duration>,
    /// The most flows the record holds (default 32,768); a flow past it
    /// is not recorded, and the record is not trusted for
    /// [`udp_flows`](Self::udp_flows) after. The kernel dumps a set in
    /// runs, each walking the set from its start: reading 32,768 elements
    /// cost 44–51 ms of CPU here, below a walk of a conntrack table that
    /// holds as many flows (~86 ms), and 100,000 cost more than that walk
    /// (`cargo bench -p kpng-lab --bench conntrack`).
    pub udp_flows_size: u32,
}

/// How long a recorded UDP flow outlives its last packet, by default: the
/// kernel's `nf_conntrack_udp_timeout_stream`.
pub const UDP_FLOWS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

impl Default for NftConfig {
    fn default() -> Self {
        Self::new(ProxyConfig::default())
    }
}

impl NftConfig {
    /// Tables named `kpng`, in this network namespace, with `proxy`.
    pub fn new(proxy: ProxyConfig) -> Self {
        Self {
            proxy,
            table: "kpng".into(),
            netns: None,
            comments: true,
            counters: false,
            udp_flows: Some(UDP_FLOWS_TIMEOUT),
            udp_flows_size: 1 << 15,
        }
    }

    /// Whether, and for how long, the packet path records the UDP flows it
    /// translated (see [`NftConfig::udp_flows`]).
    #[must_use]
    pub fn udp_flows(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.udp_flows = timeout;
        self
    }

    /// The most flows the UDP flow record holds.
    #[must_use]
    pub fn udp_flows_size(mut self, size: u32) -> Self {
        self.udp_flows_size = size;
        self
    }

    /// Whether the pick maps' elements count connections (see
    /// [`NftConfig::counters`]).
    #[must_use]
    pub fn counters(mut self, on: bool) -> Self {
        self.counters = on;
        self
    }

    /// Whether chains and elements carry comments naming their Service.
    #[must_use]
    pub fn comments(mut self, on: bool) -> Self {
        self.comments = on;
        self
    }

    /// Names the table in each family.
    #[must_use]
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// Programs the network namespace `name` (`/run/netns/NAME`).
    #[must_use]
    pub fn in_netns(mut self, name: &str) -> Self {
        self.netns = Some(PathBuf::from("/run/netns").join(name));
        self
    }
}

/// How a sync reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Apply,
    DryRun,
}

/// Per-family state: what the table's fixed part and each Service
/// contribute, the sum of it, and what changed since the last applied
/// sync.
#[derive(Default)]
struct FamilyState {
    globals: Render,
    desired: Objects,
    pending: Pending,
    /// The sizes the pick maps were declared with by the last full sync
    /// (or found with, when adopted).
    sizes: std::collections::BTreeMap<&'static str, u32>,
}

/// One family's table as the backend wants it: see
/// [`NftBackend::tables`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableContent {
    /// The table.
    pub table: nft::Table,
    /// Its sets and maps.
    pub sets: Vec<nft::Set>,
    /// Its chains, each with its rules.
    pub chains: Vec<(nft::Chain, Vec<Vec<nft::Expr>>)>,
    /// The elements of each set that has any, by set name (ranges as
    /// start and end elements).
    pub elements: Vec<(String, Vec<nft::Element>)>,
}

/// What the last sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NftSyncStats {
    /// Whether it replaced the tables whole (a full round, or a change
    /// the kernel cannot make in place).
    pub replaced: bool,
    /// Changes in its transaction (each add, delete or flush of an
    /// object, a rule, or a run of elements of one set).
    pub commands: usize,
    /// Services re-rendered.
    pub services: usize,
    /// Time to render and apply the transaction.
    pub micros: u128,
    /// Of which applying it in the kernel (or reading the tables back).
    pub kernel_micros: u128,
    /// Whether the first sync found exactly its tables in the kernel, left
    /// by a previous run, and so sent nothing.
    pub adopted: bool,
}

/// The nftables backend. See the crate docs.
pub struct NftBackend {
    config: NftConfig,
    mode: Mode,
    keep_scripts: bool,
    /// See [`NftBackend::one_shot`].
    one_shot: bool,
    /// How many Services the desired objects hold.
    services: usize,
    families: [FamilyState; 2],
    /// The last transaction, kept in dry-run mode or when asked.
    last_tx: Option<Transaction>,
    last: NftSyncStats,
    /// The last round, as handed over.
    round: kpng_sink::SyncStats,
    /// The netlink socket, opened on first use and kept (closing one
    /// costs the kernel ~15 ms); dropped after a failure, so the next
    /// transaction starts on a fresh one.
    socket: Option<nft::Socket>,
    /// How many times the tables were replaced whole.
    generation: u64,
    /// Whether the first sync looked for tables a previous run left.
    looked: bool,
    /// The Service CIDRs dropped: the configured ones and the cluster's
    /// ServiceCIDRs, merged.
    service_cidrs: Vec<IpNet>,
}

impl std::fmt::Debug for NftBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NftBackend")
            .field("config", &self.config)
            .field("services", &self.services)
            .field("last", &self.last)
            .finish()
    }
}

/// The last round: its stats, and (when kept) its transaction as an nft
/// script.
impl kpng_sink::RoundReport for NftBackend {
    fn last_sync(&self) -> kpng_sink::SyncStats {
        self.round.wrote(self.last.replaced, self.last.commands)
    }
    fn write_script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        match &self.last_tx {
            Some(tx) => write!(out, "{tx}"),
            None => Ok(()),
        }
    }
}

impl NftBackend {
    /// A backend that programs the kernel.
    pub fn new(config: NftConfig) -> Self {
        Self {
            config,
            mode: Mode::Apply,
            keep_scripts: false,
            one_shot: false,
            services: 0,
            families: Default::default(),
            last_tx: None,
            socket: None,
            generation: 0,
            looked: false,
            last: NftSyncStats::default(),
            round: kpng_sink::SyncStats::default(),
            service_cidrs: Vec::new(),
        }
    }

    /// Computes each sync's transaction and keeps its text, but never
    /// touches the kernel (`--dry-run`).
    pub fn dry_run(mut self) -> Self {
        self.mode = Mode::DryRun;
        self
    }

    /// For a process that ends after its first sync (`--once`): once a
    /// sync's transaction is built, the backend lets go of the objects
    /// it was built from (at a million endpoints, tens of MiB the kernel's
    /// batch can take instead), and every later sync is a full one.
    /// [`tables`](Self::tables) is then empty.
    pub fn one_shot(mut self) -> Self {
        self.one_shot = true;
        self
    }

    /// Keeps applied transactions too, for their text (debugging and
    /// tests; a full sync at 10k Services holds ~5 MB).
    pub fn keep_scripts(mut self) -> Self {
        self.keep_scripts = true;
        self
    }

    /// The last sync's transaction: in dry-run mode, or with
    /// [`keep_scripts`](Self::keep_scripts). Its `Display` is the nft
    /// script; write it out rather than into a `String` at scale (a full
    /// sync at 10k Services is ~10 MB of text).
    pub fn last_transaction(&self) -> Option<&Transaction> {
        self.last_tx.as_ref()
    }

    /// The last sync's transaction as an nft script (see
    /// [`last_transaction`](Self::last_transaction)); empty when it was
    /// not kept.
    pub fn last_script(&self) -> String {
        self.last_tx
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    }

    /// What the last sync did.
    pub fn last_sync(&self) -> &NftSyncStats {
        &self.last
    }

    /// Deletes the backend's tables (both families) from the kernel, as
    /// `kube-proxy --cleanup` does; returns how many there were.
    pub fn cleanup(config: &NftConfig) -> Result<usize, Error> {
        let mut socket = nft::Socket::open(config.netns.as_deref())?;
        let mut deleted = 0;
        for family in IpFamily::BOTH {
            let table = nft::Table::new(family.table_family(), config.table.as_str());
            let mut tx = Transaction::new();
            tx.delete_table(&table);
            match socket.commit(tx) {
                Ok(()) => deleted += 1,
                Err(kpng_netfilter::Error::Refused { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// What [`cleanup`](Self::cleanup) would delete, read from the kernel
    /// and changing nothing (`--cleanup --dry-run`): the backend's tables
    /// that exist now, as `family name` (`ip kpng`, `ip6 kpng`).
    pub fn cleanup_plan(config: &NftConfig) -> Result<Vec<String>, Error> {
        let mut socket = nft::Socket::open(config.netns.as_deref())?;
        let mut found = Vec::new();
        for family in IpFamily::BOTH {
            let family = family.table_family();
            if socket
                .tables(family)?
                .iter()
                .any(|name| name == config.table.as_str())
            {
                found.push(format!("{family} {}", config.table));
            }
        }
        Ok(found)
    }

    /// The settings.
    pub fn config(&self) -> &NftConfig {
        &self.config
    }

    /// How many syncs replaced the tables whole (the first, those after a
    /// failure): a publisher asks an aggregator for a whole-table replace
    /// when it changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The tables as the backend wants them, one per family (IPv4, then
    /// IPv6): what a full sync writes, as of the last sync. For applying
    /// elsewhere (`kpng_aggregator::Publisher`) or inspecting; the
    /// backend keeps them in a compact form, so this makes a copy.
    pub fn tables(&self) -> Vec<TableContent> {
        IpFamily::BOTH
            .into_iter()
            .zip(&self.families)
            .map(|(family, state)| {
                let table = self.table(family);
                let objects = &state.desired;
                TableContent {
                    sets: objects.sets.values().map(|(s, _)| s.clone()).collect(),
                    chains: objects
                        .chains
                        .iter()
                        .map(|(name, (chain, _))| {
                            let c = nft::Chain {
                                name: name.clone(),
                                base: chain.base,
                                comment: chain.comment.as_deref().map(str::to_owned),
                            };
                            (c, chain.rules.clone())
                        })
                        .collect(),
                    elements: objects
                        .sets
                        .values()
                        .map(|(set, _)| (set.name.clone(), objects.kernel_elements(&table, set)))
                        .filter(|(_, e)| !e.is_empty())
                        .collect(),
                    table,
                }
            })
            .collect()
    }

    /// Where this backend's packet path records the UDP flows it
    /// translated, for [`kpng_conntrack`'s cleaner](https://docs.rs/kpng-conntrack)
    /// to find the flows to a removed endpoint without walking the
    /// conntrack table; `None` without a record ([`NftConfig::udp_flows`]).
    /// The record is marked young ([`FlowRecord::YOUNG`]) by every full
    /// sync that replaces the tables: only when this backend applies its
    /// own tables, not through an aggregator.
    ///
    /// [`FlowRecord::YOUNG`]: kpng_netfilter::conntrack::FlowRecord::YOUNG
    pub fn flow_record(&self) -> Option<kpng_netfilter::conntrack::FlowRecord> {
        let timeout = self.config.udp_flows?;
        Some(kpng_netfilter::conntrack::FlowRecord {
            table: self.config.table.clone(),
            flows: render::UDP_FLOWS.into(),
            untrusted: render::UDP_UNTRUSTED.into(),
            timeout,
        })
    }

    fn table(&self, family: IpFamily) -> nft::Table {
        nft::Table::new(family.table_family(), self.config.table.as_str())
    }

    /// The table's fixed part for one family, with the NodePort addresses
    /// (of `view`'s node, unless configured: then loopback left out, as
    /// kube-proxy's nftables mode serves no NodePort there) and CIDRs.
    fn globals(&self, family: IpFamily, view: &NodeView) -> Render {
        let node_ips: Vec<IpNet> = match self.config.proxy.nodeport_prefixes() {
            Some(cidrs) => cidrs,
            None => view.node_addresses(family).map(IpNet::from).collect(),
        };
        render::globals(family, &self.config, &node_ips, &self.service_cidrs)
    }

    /// Re-renders what `round` changed into the desired objects, or
    /// everything when `full` (they start over); returns how many
    /// Services were rendered.
    fn refresh(&mut self, round: &Round<'_>, full: bool) -> usize {
        let view = round.view();
        let service_cidrs = full || round.service_cidrs_changed();
        let renew = full || round.node_changed() || service_cidrs;
        if service_cidrs {
            self.service_cidrs = view.service_cidrs_with(&self.config.proxy.service_cidrs);
        }
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let globals = renew.then(|| self.globals(family, view));
            let state = &mut self.families[i];
            if full {
                *state = FamilyState::default();
            }
            let mut pending = if full { None } else { Some(&mut state.pending) };
            if let Some(globals) = globals {
                let old = std::mem::replace(&mut state.globals, globals);
                state.desired.remove(&old, pending.as_deref_mut());
                state.desired.add(&state.globals, pending.as_deref_mut());
            }
            if full {
                let desired = &mut state.desired;
                render_all(view, family, &self.config, |new| desired.add(&new, None));
                desired.order_classes();
                continue;
            }
            for change in round.services() {
                // What a Service contributed is rendered again from the
                // view it was rendered from, the round's view before
                // (rendering is a pure function of the view and the
                // settings), rather than kept: at 10k Services that saves
                // a copy of every chain and element, and of the view.
                if let Some(before) = change.before {
                    let old = render::service(before, family, &self.config);
                    state.desired.remove(&old, pending.as_deref_mut());
                }
                if let Some(after) = change.after {
                    let new = render::service(after, family, &self.config);
                    state.desired.add(&new, pending.as_deref_mut());
                }
            }
        }
        if full {
            self.families.iter_mut().for_each(|s| s.desired.shrink());
        }
        self.services = view.services.len();
        if full {
            view.services.len()
        } else {
            round.service_count()
        }
    }

    /// This sync's transaction, and whether it replaces the tables
    /// (always when `full`).
    fn transaction(&self, full: bool) -> (Transaction, bool) {
        let full = full
            || self
                .families
                .iter()
                .any(|s| !s.pending.in_place(&s.desired) || s.desired.outgrown(&s.sizes));
        let mut tx = Transaction::new();
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let state = &self.families[i];
            let table = self.table(family);
            if full {
                state.desired.full(&table, &mut tx);
                // The record starts empty: flows older than it are not in
                // it, so it is not trusted until its timeout has passed.
                if let Some(timeout) = self.config.udp_flows {
                    let young = kpng_netfilter::conntrack::FlowRecord::YOUNG;
                    tx.add_elements(
                        &table,
                        render::UDP_UNTRUSTED,
                        vec![nft::Element {
                            timeout_ms: Some(render::millis(timeout)),
                            ..nft::Element::key(young.to_ne_bytes().to_vec())
                        }],
                    );
                }
            } else {
                state.desired.incremental(&table, &state.pending, &mut tx);
            }
        }
        (tx, full)
    }

    /// The kept socket, or a new one; the caller puts it back when its
    /// transaction went well.
    fn take_socket(&mut self) -> Result<nft::Socket, Error> {
        match self.socket.take() {
            Some(socket) => Ok(socket),
            None => Ok(nft::Socket::open(self.config.netns.as_deref())?),
        }
    }

    /// Whether the kernel holds exactly the desired tables of both
    /// families (a previous run's, on a restart onto the same state).
    fn kernel_matches(&mut self) -> Result<bool, Error> {
        let mut socket = self.take_socket()?;
        let mut all = true;
        for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
            let table = self.table(family);
            all = self.families[i].desired.matches(&table, &mut socket)?;
            if !all {
                break;
            }
        }
        self.socket = Some(socket);
        Ok(all)
    }

    /// Applies one transaction on the kept socket; a failure drops the
    /// socket, so the next one starts clean.
    fn send(&mut self, tx: Transaction) -> Result<(), Error> {
        let mut socket = self.take_socket()?;
        socket.commit(tx)?;
        self.socket = Some(socket);
        Ok(())
    }
}

/// Renders every Service of `view` for `family`, handing each render to
/// `add` in the view's order. In a large view the rendering runs on a
/// second thread, a run of Services ahead of `add` (which fills the
/// claims, one at a time): at 100k Services the two took about as long as
/// each other. In a small one, one thread: a Service's render is dropped
/// before the next is made (at 1,000 Services the second thread held up to
/// four runs, every render at once: ~1 MiB more at the peak of a node's
/// proxy).
fn render_all(view: &NodeView, family: IpFamily, config: &NftConfig, mut add: impl FnMut(Render)) {
    /// Services rendered before the run goes to `add`.
    const RUN: usize = 256;
    /// The smallest view rendered on a second thread.
    const THREADED_FROM: usize = 2048;
    if view.services.len() < THREADED_FROM {
        for service in view.services.values() {
            add(render::service(service, family, config));
        }
        return;
    }
    std::thread::scope(|scope| {
        let (runs, rendered) = std::sync::mpsc::sync_channel::<Vec<Render>>(4);
        scope.spawn(move || {
            let mut run = Vec::with_capacity(RUN);
            for service in view.services.values() {
                run.push(render::service(service, family, config));
                if run.len() == RUN && runs.send(std::mem::take(&mut run)).is_err() {
                    return;
                }
            }
            // The receiver is there until every run is sent.
            let _ = runs.send(run);
        });
        for run in rendered {
            run.into_iter().for_each(&mut add);
        }
    });
}

impl Sink for NftBackend {
    /// Renders what the round changed (everything, in a full round) and
    /// applies it in one transaction. On failure the kernel keeps its
    /// previous ruleset and the error is returned: the driver makes the
    /// next round full (the desired objects then hold a round the kernel
    /// never got).
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let start = Instant::now();
        let revision = round.revision();
        self.round = kpng_sink::SyncStats::of(round);
        // A one-shot backend drops its objects after each sync: every
        // sync starts over.
        let full = round.is_full() || self.one_shot;
        let services = self.refresh(round, full);
        let (mut tx, full) = self.transaction(full);
        let kernel_start = Instant::now();
        // The first sync of a process may find what a previous run left:
        // exactly the tables wanted (a restart onto the same state) need
        // no transaction. Anything else is replaced whole.
        let mut adopted = false;
        if full && self.mode == Mode::Apply && !self.looked {
            self.looked = true;
            match self.kernel_matches() {
                Ok(true) => {
                    adopted = true;
                    tx = Transaction::new();
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the tables back; replacing them")
                }
            }
        }
        if self.one_shot {
            // The transaction holds all the kernel is to get: the objects
            // go before it is encoded (at a million endpoints, the peak
            // of the process was then, 381 -> 350 MiB).
            self.families = Default::default();
        }
        let commands = tx.len();
        // The transaction is kept for its text when asked (a dry run, kept
        // scripts); otherwise it is given to the socket, which frees each
        // change as it encodes it.
        let keep = self.mode == Mode::DryRun || self.keep_scripts;
        let (result, kept) = match self.mode {
            Mode::DryRun => (Ok(()), Some(tx)),
            Mode::Apply if tx.is_empty() => (Ok(()), keep.then_some(tx)),
            Mode::Apply if keep => (self.send(tx.clone()), Some(tx)),
            Mode::Apply => (self.send(tx), None),
        };
        let kernel_micros = kernel_start.elapsed().as_micros();
        self.last = NftSyncStats {
            replaced: full,
            commands,
            services,
            micros: start.elapsed().as_micros(),
            kernel_micros,
            adopted,
        };
        self.last_tx = kept;
        match result {
            Ok(()) => {
                for state in &mut self.families {
                    state.pending = Pending::default();
                }
                if full {
                    self.generation += 1;
                    for state in &mut self.families {
                        state.sizes = state.desired.declared_sizes();
                    }
                }
                tracing::debug!(
                    revision,
                    full,
                    commands = self.last.commands,
                    "nft sync applied"
                );
                Ok(())
            }
            Err(e) => {
                // The kernel kept its previous ruleset; the driver's next
                // round is full.
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kpng_model::EndpointInfo;
    use kpng_model::endpoint::{PortInfo, PortList};
    use kpng_model::v1::{ClientIpAffinity, IpSet, Protocol, Service, ServicePort};
    use kpng_model::view::{EndpointView, NodeView, ViewOp};
    use kpng_sink::{Round, Sink};

    use super::{NftBackend, NftConfig};

    fn service(name: &str, ip: &str, affinity: bool) -> Arc<kpng_model::ServiceInfo> {
        Arc::new(
            kpng_model::ServiceInfo::new(Service {
                namespace: "t".into(),
                name: name.into(),
                cluster_ips: Some(IpSet::parse_addrs("clusterIPs", [ip]).expect("ip")),
                client_ip_affinity: affinity.then_some(ClientIpAffinity {
                    timeout_seconds: 60,
                }),
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Protocol::Tcp as i32,
                    port: 80,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .expect("valid"),
        )
    }

    fn endpoint(ip: &str) -> EndpointView {
        let ip = ip.parse().expect("ip");
        let endpoint = EndpointInfo::builder(ip)
            .ports(PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]))
            .build();
        EndpointView::at(endpoint, ip)
            .expect("its address")
            .with_cluster(true)
    }

    fn load(view: &mut NodeView, name: &str, ip: &str, affinity: bool, eps: &[&str]) {
        let svc = service(name, ip, affinity);
        let key = svc.service_name();
        view.apply(&ViewOp::SetService(svc)).expect("service");
        for ep in eps {
            view.apply(&ViewOp::SetEndpoint(key.clone(), endpoint(ep)))
                .expect("endpoint");
        }
    }

    /// Syncs the round from `before` to `view`, at `revision`: a full
    /// round without `before`.
    fn sync(
        backend: &mut NftBackend,
        before: Option<&NodeView>,
        view: &mut NodeView,
        revision: u64,
    ) {
        view.revision = revision;
        let round = match before {
            Some(before) => Round::between(before, view),
            None => Round::full(view),
        };
        backend.sync(&round).expect("sync");
    }

    /// A full sync declares each pick map with room for twice its
    /// elements (at least 65,536); a change that would take a map past the
    /// size it was declared with is made a full sync, which declares it
    /// bigger, rather than a transaction the kernel would refuse.
    #[test]
    fn a_pick_map_past_its_declared_size_takes_a_full_sync() {
        let mut backend = NftBackend::new(NftConfig::default()).dry_run();
        let mut view = NodeView::default();
        load(&mut view, "web", "10.96.0.10", false, &["10.244.1.5"]);
        sync(&mut backend, None, &mut view, 1);
        let text = backend.last_script();
        assert!(
            text.contains("add map ip kpng vip-cluster { typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport; size 65536; }"),
            "{text}"
        );
        assert_eq!(backend.families[0].sizes.get("vip-cluster"), Some(&65_536));
        // The set of the keys with a class is, once large.
        assert!(
            text.contains(
                "add set ip kpng service-keys { type ipv4_addr . inet_proto . inet_service; }"
            ),
            "{text}"
        );

        // Within the size: incremental.
        let before = view.clone();
        load(
            &mut view,
            "web",
            "10.96.0.10",
            false,
            &["10.244.1.5", "10.244.2.5"],
        );
        sync(&mut backend, Some(&before), &mut view, 2);
        assert!(!backend.last_sync().replaced);

        // As if the last full sync had declared room for two: a third
        // element takes a full sync.
        backend.families[0].sizes.insert("vip-cluster", 2);
        let before = view.clone();
        load(
            &mut view,
            "web",
            "10.96.0.10",
            false,
            &["10.244.1.5", "10.244.2.5", "10.244.3.5"],
        );
        sync(&mut backend, Some(&before), &mut view, 3);
        assert!(backend.last_sync().replaced);
        assert_eq!(backend.families[0].sizes.get("vip-cluster"), Some(&65_536));
    }

    /// A one-shot backend keeps nothing after its sync's transaction is
    /// built: the transaction is whole, and any later round is a full one
    /// that writes the same tables as a fresh backend would.
    #[test]
    fn a_one_shot_backend_keeps_no_objects_and_starts_over() {
        let mut view = NodeView::default();
        load(&mut view, "web", "10.96.0.10", false, &["10.244.1.5"]);
        let mut once = NftBackend::new(NftConfig::default()).dry_run().one_shot();
        let mut kept = NftBackend::new(NftConfig::default()).dry_run();
        sync(&mut once, None, &mut view, 1);
        sync(&mut kept, None, &mut view, 1);
        assert_eq!(once.last_script(), kept.last_script());
        assert!(
            once.tables()
                .iter()
                .all(|t| t.chains.is_empty() && t.sets.is_empty())
        );
        assert!(!kept.tables()[0].chains.is_empty());

        let before = view.clone();
        load(&mut view, "web", "10.96.0.10", false, &["10.244.2.5"]);
        sync(&mut once, Some(&before), &mut view, 2);
        assert!(once.last_sync().replaced, "{:?}", once.last_sync());
        let mut fresh = NftBackend::new(NftConfig::default()).dry_run();
        sync(&mut fresh, None, &mut view, 2);
        assert_eq!(once.last_script(), fresh.last_script());
    }

    /// Without a kernel: the transactions encode and parse back whole, and
    /// their text holds the objects the view asks for; only the chains in
    /// use are made, and a change writes only what changed.
    #[test]
    fn syncs_make_the_objects_in_use_and_changes_write_only_the_change() {
        let mut backend = NftBackend::new(NftConfig::default()).dry_run();
        let mut view = NodeView::default();
        load(
            &mut view,
            "web",
            "10.96.0.10",
            false,
            &["10.244.1.5", "10.244.2.5"],
        );
        load(&mut view, "sticky", "10.96.0.11", true, &["10.244.1.6"]);
        sync(&mut backend, None, &mut view, 1);
        let tx = backend.last_transaction().expect("kept in dry-run mode");
        tx.verify_encoding().expect("round trip");
        let text = tx.to_string();
        for line in [
            "add chain ip kpng pick-vip-cluster-2",
            "add rule ip kpng pick-vip-cluster-2 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @vip-cluster",
            "10.96.0.10 . tcp . 80 . 1 : 10.244.2.5 . 8080",
            // ClientIP affinity: one set for every Service, keyed by the
            // client, the Service port's number and the endpoint.
            "add set ip kpng affinity { type ipv4_addr . mark . ipv4_addr . inet_service; flags dynamic,timeout; size 1048576; }",
            " . ip daddr & 0.0.0.0 | 10.244.1.6 . th dport & 0 | 8080 @affinity meta l4proto tcp dnat to 10.244.1.6:8080",
            " . ip daddr & 0.0.0.0 | 10.244.1.6 . th dport & 0 | 8080 timeout 60s }",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // No set of a Service's own: beyond the IPv6 table's (with no
        // Service), the IPv4 table declares only the set of the class
        // the Service with no affinity is in.
        let sets = |family: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| {
                    let rest = l
                        .strip_prefix(&format!("add set {family} kpng "))
                        .or_else(|| l.strip_prefix(&format!("add map {family} kpng ")))?;
                    Some(rest.split_whitespace().next()?.to_owned())
                })
                .collect()
        };
        let (v4, v6) = (sets("ip"), sets("ip6"));
        let extra: Vec<&String> = v4.iter().filter(|s| !v6.contains(s)).collect();
        assert_eq!(extra, ["svc-c2"], "{text}");
        assert!(
            text.contains("add element ip kpng svc-c2 { 10.96.0.10 . tcp . 80 comment \"t/web:http/tcp\" }")
                && text.contains("add element ip kpng service-keys { 10.96.0.10 . tcp . 80 }")
                && text.contains("add rule ip kpng service-classes ip daddr . meta l4proto . th dport @svc-c2 goto svc-c2"),
            "{text}"
        );
        assert!(!text.contains("afc-") && !text.contains("afm-"), "{text}");
        // Only the endpoint counts in use.
        assert!(!text.contains("pick-vip-cluster-3"), "{text}");
        assert!(backend.last_sync().replaced);

        // A third endpoint: a new pick chain, the Service's element moved
        // to it, one target added; nothing else.
        let before = view.clone();
        load(&mut view, "web", "10.96.0.10", false, &["10.244.3.5"]);
        sync(&mut backend, Some(&before), &mut view, 2);
        let tx = backend.last_transaction().expect("kept");
        tx.verify_encoding().expect("round trip");
        let text = tx.to_string();
        assert!(!backend.last_sync().replaced);
        assert!(
            text.contains("add chain ip kpng pick-vip-cluster-3"),
            "{text}"
        );
        assert!(
            text.contains(
                "add element ip kpng vip-cluster { 10.96.0.10 . tcp . 80 . 2 : 10.244.3.5 . 8080 }"
            ),
            "{text}"
        );
        assert!(
            !text.contains("sticky") && !text.contains("add table"),
            "{text}"
        );
        // A new class: its chain, its set, its rule in the classes
        // chain; the Service's key moved from the old class's set.
        for line in [
            "add set ip kpng svc-c3 { type ipv4_addr . inet_proto . inet_service; }",
            "add chain ip kpng svc-c3",
            "add rule ip kpng service-classes ip daddr . meta l4proto . th dport @svc-c3 goto svc-c3",
            "delete element ip kpng svc-c2 { 10.96.0.10 . tcp . 80 comment \"t/web:http/tcp\" }",
            "add element ip kpng svc-c3 { 10.96.0.10 . tcp . 80 comment \"t/web:http/tcp\" }",
        ] {
            assert!(
                text.contains(line),
                "{line} in
{text}"
            );
        }
        // The 2-endpoint class is unused now, but it and its pick chain
        // stay until the next full sync: a count that comes back must not
        // make the kernel check the table again (a new rule that goes to a
        // chain), nor bind the big map again (a pass over its elements).
        assert!(!text.contains("delete chain"), "{text}");
        assert!(!text.contains("pick-vip-cluster-2"), "{text}");
        assert!(!text.contains("delete set"), "{text}");

        // Back to two endpoints: a class in use. Only data moves: elements
        // of sets and maps, no chain, no rule, no verdict.
        let before = view.clone();
        view.apply(&ViewOp::DeleteEndpoint(
            service("web", "10.96.0.10", false).service_name(),
            "10.244.3.5".parse().expect("ip"),
        ))
        .expect("delete an endpoint");
        sync(&mut backend, Some(&before), &mut view, 3);
        let text = backend.last_script();
        assert!(!backend.last_sync().replaced);
        for line in text.lines() {
            assert!(
                line.starts_with("add element ") || line.starts_with("delete element "),
                "{line} in\n{text}"
            );
            assert!(!line.contains("goto") && !line.contains("jump"), "{line}");
        }
        assert!(
            text.contains(
                "add element ip kpng svc-c2 { 10.96.0.10 . tcp . 80 comment \"t/web:http/tcp\" }"
            ),
            "{text}"
        );

        // The affinity Service goes: its chains go with it; the shared
        // affinity set stays, and no set of its own was ever made.
        let before = view.clone();
        view.apply(&ViewOp::DeleteService(
            service("sticky", "10.96.0.11", true).service_name(),
        ))
        .expect("delete");
        sync(&mut backend, Some(&before), &mut view, 4);
        let text = backend.last_script();
        for gone in ["delete chain ip kpng afe-", "delete chain ip kpng aff-"] {
            assert!(text.contains(gone), "{gone} in\n{text}");
        }
        assert!(!text.contains("delete set"), "{text}");
    }

    /// A Maglev Service: its slots' elements in the pick map, one shared
    /// pick rule hashing the flow; an endpoint leaving rewrites only the
    /// slots that change (its own and a few), as data.
    #[test]
    fn a_maglev_endpoint_leaving_rewrites_only_the_slots_that_change() {
        let mut backend = NftBackend::new(NftConfig::default()).dry_run();
        let mut view = NodeView::default();
        let maglev = |svc: Arc<kpng_model::ServiceInfo>| {
            let mut svc = svc.service().clone();
            svc.balancing = kpng_model::v1::Balancing::Maglev as i32;
            Arc::new(kpng_model::ServiceInfo::new(svc).expect("valid"))
        };
        let svc = maglev(service("mg", "10.96.0.60", false));
        let key = svc.service_name();
        view.apply(&ViewOp::SetService(svc)).expect("service");
        let eps = [
            "10.244.1.5",
            "10.244.2.5",
            "10.244.3.5",
            "10.244.4.5",
            "10.244.5.5",
        ];
        for ep in eps {
            view.apply(&ViewOp::SetEndpoint(key.clone(), endpoint(ep)))
                .expect("endpoint");
        }
        sync(&mut backend, None, &mut view, 1);
        let text = backend.last_script();
        assert!(
            text.contains("add rule ip kpng pick-vip-cluster-maglev dnat ip to ip daddr . meta l4proto . th dport . jhash ip saddr . th sport mod 1021 seed 0x0 map @vip-cluster"),
            "{text}"
        );
        let slots = text.matches("10.96.0.60 . tcp . 80 . ").count();
        assert_eq!(
            slots,
            kpng_model::maglev::SLOTS as usize,
            "one element a slot"
        );

        let before = view.clone();
        view.apply(&ViewOp::DeleteEndpoint(
            key,
            "10.244.3.5".parse().expect("ip"),
        ))
        .expect("delete");
        sync(&mut backend, Some(&before), &mut view, 2);
        let text = backend.last_script();
        assert!(!backend.last_sync().replaced);
        // Each changed slot: its element deleted, and added anew.
        let changed: usize = text
            .lines()
            .filter(|l| l.starts_with("delete element"))
            .map(|l| l.matches("10.96.0.60 . tcp . 80 . ").count())
            .sum();
        // Its own fifth of the slots, and a few more.
        let fifth = kpng_model::maglev::SLOTS as usize / 5;
        assert!(
            changed >= fifth && changed <= fifth * 13 / 10,
            "{changed} slots:\n{text}"
        );
        for line in text.lines() {
            assert!(
                line.starts_with("add element ") || line.starts_with("delete element "),
                "{line}"
            );
        }
        // Nothing goes to the endpoint that left.
        let added = text.lines().filter(|l| l.starts_with("add element"));
        assert!(added.clone().count() > 0);
        assert!(
            added
                .into_iter()
                .all(|l| !l.contains(": 10.244.3.5 . 8080")),
            "{text}"
        );
    }

    /// The dry run names the Service each of its chains and its elements
    /// of the verdict maps and `cluster-ips` serve, as `nft list` shows
    /// them; the shared chains and the pick maps carry none. Comments off:
    /// none at all.
    #[test]
    fn chains_and_elements_name_their_service() {
        let script = |comments: bool| {
            let config = NftConfig::default().comments(comments);
            let mut backend = NftBackend::new(config).dry_run();
            let mut view = NodeView::default();
            load(&mut view, "web", "10.96.0.10", false, &["10.244.1.5"]);
            load(&mut view, "sticky", "10.96.0.11", true, &["10.244.1.6"]);
            sync(&mut backend, None, &mut view, 1);
            let tx = backend.last_transaction().expect("kept in dry-run mode");
            tx.verify_encoding().expect("round trip");
            tx.to_string()
        };
        let text = script(true);
        for line in [
            "add element ip kpng svc-c1 { 10.96.0.10 . tcp . 80 comment \"t/web:http/tcp\" }",
            "10.96.0.11 . tcp . 80 comment \"t/sticky:http/tcp\" : goto svc-",
            "add element ip kpng cluster-ips { 10.96.0.10 comment \"t/web\", 10.96.0.11 comment \"t/sticky\" }",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        let chains: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("add chain ip kpng"))
            .collect();
        for chain in &chains {
            let named = ["svc-", "aff-", "afe-"]
                .iter()
                .any(|p| chain.starts_with(&format!("add chain ip kpng {p}")))
                && !chain.contains("svc-c1");
            assert_eq!(
                chain.ends_with("{ comment \"t/sticky:http/tcp\"; }"),
                named,
                "{chain}"
            );
        }
        assert!(
            text.contains(
                "add element ip kpng vip-cluster { 10.96.0.10 . tcp . 80 . 0 : 10.244.1.5 . 8080"
            ),
            "{text}"
        );
        let off = script(false);
        assert!(!off.contains("comment"), "{off}");
    }
}
