//! The kpng-rs aggregator: several producers, one subsystem, one atomic
//! apply.
//!
//! Every network component (a Service proxy, a CNI's policy engine, a
//! vendor's firewall) used to program the kernel on its own: lock
//! contention, many transactions, rules stepping on each other. Here each
//! producer *publishes* what it wants in a [`Subsystem`] (its whole
//! fragment, or a delta), and the [`Aggregator`] merges the publications
//! and applies the difference from what it last applied as **one**
//! transaction per flush, at most as often as its rate limit allows.
//!
//! - **One desired state per producer**, a [`kpng_store::RevMap`]: a
//!   publication that changes nothing makes no revision and no work.
//! - **Isolation.** Each producer owns its scopes (for nftables, whole
//!   tables). A publication touching another producer's scope, or invalid
//!   on its own, is refused to that producer only; nothing of it is kept.
//! - **Conflicts found late** (the kernel refuses the merged transaction):
//!   each producer's change is then tried on its own; the ones the kernel
//!   refuses are rolled back in that producer's state and reported to it,
//!   the others land.
//! - **Rate limit**: [`kpng_drive::SyncLimiter`], the one the backends use.
//!
//! The subsystems are [`nft::Nft`] and [`iptables::Iptables`]; see their
//! docs for the ordering between producers. Any backend implementing
//! [`Producer`] runs through an aggregator with a [`Publisher`] (the kpng
//! backends do, with the features `nft-backend` and `iptables-backend`),
//! and producers in other processes publish over [`socket`].
//!
//! # Example
//!
//! Two producers, one dry-run flush:
//!
//! ```
//! use kpng_aggregator::Aggregator;
//! use kpng_aggregator::nft::{TableFamily, Fragment, Nft};
//! use kpng_netfilter::nft::build::{Load, equals, verdict};
//! use kpng_netfilter::nft::{BaseChain, ChainType, ChainHook, NfVerdict};
//!
//! let mut agg = Aggregator::new(Nft::dry_run());
//! let mut proxy = Fragment::new();
//! let accept = [equals(Load::Daddr(TableFamily::Ip), &[10, 96, 0, 1]), verdict(NfVerdict::Accept)].concat();
//! proxy.table(TableFamily::Ip, "kpng").chain("services", [accept]);
//! let mut firewall = Fragment::new();
//! let input = BaseChain { kind: ChainType::Filter, hook: ChainHook::Input, priority: 0 };
//! let drop = [equals(Load::Saddr(TableFamily::Ip), &[192, 0, 2, 66]), verdict(NfVerdict::Drop)].concat();
//! firewall.table(TableFamily::Inet, "vendor-fw").base_chain("input", input, [drop]);
//! agg.publish("proxy", proxy)?;
//! agg.publish("firewall", firewall.clone())?;
//! // Another producer cannot touch the firewall's table.
//! assert!(agg.publish("intruder", firewall).is_err());
//! let report = agg.flush();
//! assert_eq!(report.transactions, 1);
//! assert!(agg.subsystem().last_script().contains("ip saddr 192.0.2.66 drop"));
//! # Ok::<(), kpng_aggregator::Error>(())
//! ```

pub mod iptables;
pub mod nft;
#[cfg(any(feature = "nft-backend", feature = "iptables-backend"))]
mod producers;
mod publisher;
pub mod socket;

pub use publisher::{Producer, Publisher};

use std::collections::BTreeMap;
use std::fmt::Debug;

use kpng_store::{MapOp, MapSnapshot, RevMap};

/// Errors of the aggregator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A publication is invalid on its own; nothing of it was kept.
    #[error("producer {producer}: invalid publication: {why}")]
    Invalid {
        /// Who published it.
        producer: String,
        /// What is wrong, naming the object.
        why: String,
    },
    /// A publication touches what another producer owns.
    #[error("producer {producer}: {what} belongs to producer {owner}")]
    Conflict {
        /// Who published it.
        producer: String,
        /// The object or scope.
        what: String,
        /// Its owner.
        owner: String,
    },
    /// The kernel refused a producer's change; it was rolled back.
    #[error("producer {producer}: the kernel refused the change: {why}")]
    Refused {
        /// Whose change.
        producer: String,
        /// The subsystem's error.
        why: String,
    },
    /// Applying failed for a reason not tied to one producer.
    #[error("apply failed: {0}")]
    Apply(String),
    /// A command (`nft`, `iptables-restore`) could not run, timed out or
    /// failed.
    #[error(transparent)]
    Kernel(#[from] kpng_netfilter::Error),
}

/// A kernel subsystem the aggregator applies to.
pub trait Subsystem {
    /// What a producer publishes: the identity of one object.
    type Key: Ord + Clone + Debug;
    /// Its content.
    type Value: Clone + PartialEq + Debug;
    /// The unit of ownership a key belongs to (for nftables, its table).
    type Scope: Ord + Clone + Debug + std::fmt::Display;

    /// The scope of `key`.
    fn scope(key: &Self::Key) -> Self::Scope;

    /// Checks one producer's whole desired state on its own.
    ///
    /// # Errors
    /// What is wrong, naming the object.
    fn check(state: &MapSnapshot<Self::Key, Self::Value>) -> Result<(), String>;

    /// Checks one producer's state against another's (e.g. two base chains
    /// that would run in an undefined order).
    ///
    /// # Errors
    /// The clash, naming both objects.
    fn clash(
        mine: &MapSnapshot<Self::Key, Self::Value>,
        theirs: &MapSnapshot<Self::Key, Self::Value>,
    ) -> Result<(), String>;

    /// Commits `ops` (which turn `before` into `after`) to the kernel as one atomic
    /// transaction. `full`: the kernel's copy is unknown (first apply, or
    /// after an error): rewrite every scope of `after` (and remove those
    /// of `before` it lacks) instead.
    ///
    /// # Errors
    /// The kernel's refusal; the kernel is then as it was.
    fn commit(
        &mut self,
        before: &MapSnapshot<Self::Key, Self::Value>,
        after: &MapSnapshot<Self::Key, Self::Value>,
        ops: &[MapOp<Self::Key, Self::Value>],
        full: bool,
    ) -> Result<(), String>;
}

/// One producer's state.
#[derive(Debug)]
struct Slot<S: Subsystem> {
    desired: RevMap<S::Key, S::Value>,
    applied: MapSnapshot<S::Key, S::Value>,
    /// The last refusal of its changes, until it publishes again.
    refused: Option<String>,
}

impl<S: Subsystem> Default for Slot<S> {
    fn default() -> Self {
        Self {
            desired: RevMap::new(),
            applied: MapSnapshot::default(),
            refused: None,
        }
    }
}

/// What a flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushReport {
    /// Kernel transactions issued (0 when nothing changed; 1 normally;
    /// more when the merged one was refused and changes were tried one by
    /// one).
    pub transactions: usize,
    /// Producers whose changes landed.
    pub applied: Vec<String>,
    /// Producers whose changes the kernel refused, with why; their state
    /// was rolled back to what is applied.
    pub refused: Vec<(String, String)>,
    /// Time spent in the subsystem's apply, in microseconds.
    pub apply_micros: u128,
}

/// Merges producers' publications and applies them. See the crate docs.
#[derive(Debug)]
pub struct Aggregator<S: Subsystem> {
    subsystem: S,
    producers: BTreeMap<String, Slot<S>>,
    /// The merged state the kernel holds.
    applied: MapSnapshot<S::Key, S::Value>,
    /// Whether the kernel's copy is unknown (first flush, or after an
    /// error not tied to one producer).
    full: bool,
    transactions: u64,
}

impl<S: Subsystem> Aggregator<S> {
    /// An aggregator applying to `subsystem`, with no producer yet.
    pub fn new(subsystem: S) -> Self {
        Self {
            subsystem,
            producers: BTreeMap::new(),
            applied: MapSnapshot::default(),
            full: true,
            transactions: 0,
        }
    }

    /// The subsystem.
    pub fn subsystem(&self) -> &S {
        &self.subsystem
    }

    /// Kernel transactions issued so far.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// The producers known, by name.
    pub fn producers(&self) -> impl Iterator<Item = &str> {
        self.producers.keys().map(String::as_str)
    }

    /// The last refusal of `producer`'s changes by the kernel, if its
    /// latest publication was refused.
    pub fn refusal(&self, producer: &str) -> Option<&str> {
        self.producers.get(producer)?.refused.as_deref()
    }

    /// `producer`'s published state.
    pub fn published(&self, producer: &str) -> Option<MapSnapshot<S::Key, S::Value>> {
        Some(self.producers.get(producer)?.desired.snapshot())
    }

    /// Publishes `producer`'s whole desired state, replacing what it
    /// published before (a restarted producer publishes its state again:
    /// unchanged objects cost nothing). Registers the producer on first
    /// use. Returns its new revision, or `None` if nothing changed.
    ///
    /// # Errors
    /// [`Error::Invalid`] or [`Error::Conflict`]; the producer's state is
    /// then as it was.
    pub fn publish(
        &mut self,
        producer: &str,
        state: impl Into<imbl::OrdMap<S::Key, S::Value>>,
    ) -> Result<Option<u64>, Error> {
        let state = state.into();
        self.change(producer, |txn| txn.replace(state))
    }

    /// Applies a delta to `producer`'s desired state.
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub fn publish_delta(
        &mut self,
        producer: &str,
        ops: impl IntoIterator<Item = MapOp<S::Key, S::Value>>,
    ) -> Result<Option<u64>, Error> {
        let ops: Vec<_> = ops.into_iter().collect();
        // Deleting what someone else owns is refused like setting it.
        for op in &ops {
            let key = match op {
                MapOp::Set(k, _) | MapOp::Delete(k) => k,
            };
            self.check_owner(producer, &S::scope(key))?;
        }
        self.change(producer, |txn| {
            for op in ops {
                match op {
                    MapOp::Set(k, v) => {
                        txn.set(k, v);
                    }
                    MapOp::Delete(k) => {
                        txn.delete(&k);
                    }
                }
            }
        })
    }

    /// Removes a producer and, at the next flush, everything it published.
    pub fn remove(&mut self, producer: &str) -> bool {
        match self.producers.get_mut(producer) {
            Some(p) => {
                p.desired.restore(&MapSnapshot::default());
                true
            }
            None => false,
        }
    }

    fn check_owner(&self, producer: &str, scope: &S::Scope) -> Result<(), Error> {
        for (name, other) in &self.producers {
            if name == producer {
                continue;
            }
            let owns = |state: &MapSnapshot<S::Key, S::Value>| {
                state.entries().keys().any(|k| S::scope(k) == *scope)
            };
            if owns(&other.desired.snapshot()) || owns(&other.applied) {
                return Err(Error::Conflict {
                    producer: producer.to_owned(),
                    what: scope.to_string(),
                    owner: name.clone(),
                });
            }
        }
        Ok(())
    }

    fn change(
        &mut self,
        producer: &str,
        edit: impl FnOnce(&mut kpng_store::MapTxn<'_, S::Key, S::Value>),
    ) -> Result<Option<u64>, Error> {
        let mut candidate = self
            .producers
            .get(producer)
            .map(|p| p.desired.clone())
            .unwrap_or_default();
        let mut txn = candidate.begin();
        edit(&mut txn);
        let Some(revision) = txn.commit() else {
            self.producers.entry(producer.to_owned()).or_default();
            return Ok(None);
        };
        let snapshot = candidate.snapshot();
        S::check(&snapshot).map_err(|why| Error::Invalid {
            producer: producer.to_owned(),
            why,
        })?;
        let scopes: std::collections::BTreeSet<S::Scope> =
            snapshot.entries().keys().map(S::scope).collect();
        for scope in &scopes {
            self.check_owner(producer, scope)?;
        }
        for (name, other) in &self.producers {
            if name != producer {
                S::clash(&snapshot, &other.desired.snapshot()).map_err(|why| Error::Invalid {
                    producer: producer.to_owned(),
                    why: format!("{why} (of producer {name})"),
                })?;
            }
        }
        let entry = self.producers.entry(producer.to_owned()).or_default();
        entry.desired = candidate;
        entry.refused = None;
        Ok(Some(revision))
    }

    /// The merged state of the producers' `pick`ed states.
    fn merged(
        &self,
        mut pick: impl FnMut(&str, &Slot<S>) -> MapSnapshot<S::Key, S::Value>,
    ) -> MapSnapshot<S::Key, S::Value> {
        let mut merged = RevMap::new();
        let mut txn = merged.begin();
        let mut all = imbl::OrdMap::new();
        for (name, p) in &self.producers {
            all = all.union(pick(name, p).entries().clone());
        }
        txn.replace(all);
        txn.commit();
        merged.snapshot()
    }

    /// Applies what changed since the last flush, as one transaction
    /// when the kernel takes it. Call it at most as often as the rate
    /// limit allows ([`run`] does).
    pub fn flush(&mut self) -> FlushReport {
        let mut report = FlushReport::default();
        let pending: Vec<String> = self
            .producers
            .iter()
            .filter(|(_, p)| p.desired.snapshot().entries() != p.applied.entries())
            .map(|(n, _)| n.clone())
            .collect();
        if pending.is_empty() && !self.full {
            return report;
        }
        let target = self.merged(|_, p| p.desired.snapshot());
        let start = std::time::Instant::now();
        let ops = self.applied.diff(&target);
        report.transactions += 1;
        let result = self
            .subsystem
            .commit(&self.applied, &target, &ops, self.full);
        match result {
            Ok(()) => {
                for name in &pending {
                    if let Some(p) = self.producers.get_mut(name) {
                        p.applied = p.desired.snapshot();
                    }
                }
                report.applied = pending;
                self.applied = target;
                self.full = false;
            }
            Err(merged_error) => {
                tracing::warn!(error = %merged_error, "merged transaction refused; trying each producer's change alone");
                // One producer at a time, on top of what landed so far.
                for name in pending {
                    let base = self.applied.clone();
                    let target = self.merged(|n, p| {
                        if n == name {
                            p.desired.snapshot()
                        } else {
                            p.applied.clone()
                        }
                    });
                    let ops = base.diff(&target);
                    report.transactions += 1;
                    match self.subsystem.commit(&base, &target, &ops, self.full) {
                        Ok(()) => {
                            if let Some(p) = self.producers.get_mut(&name) {
                                p.applied = p.desired.snapshot();
                            }
                            self.applied = target;
                            self.full = false;
                            report.applied.push(name);
                        }
                        Err(why) => {
                            tracing::warn!(producer = %name, error = %why, "change refused; rolled back");
                            if let Some(p) = self.producers.get_mut(&name) {
                                let applied = p.applied.clone();
                                p.desired.restore(&applied);
                                p.refused = Some(why.clone());
                            }
                            report.refused.push((name, why));
                        }
                    }
                }
            }
        }
        report.apply_micros = start.elapsed().as_micros();
        self.transactions += report.transactions as u64;
        report
    }
}

/// Flushes `aggregator` whenever `changed` fires, at most as `limiter`
/// allows: a burst of publications collapses into one transaction. Returns
/// when `changed` closes. The aggregator sits behind a mutex that
/// producers' publish calls share (held only for a publish or a flush,
/// never across an await).
pub async fn run<S: Subsystem + Send>(
    aggregator: std::sync::Arc<std::sync::Mutex<Aggregator<S>>>,
    mut changed: tokio::sync::mpsc::Receiver<()>,
    mut limiter: kpng_drive::SyncLimiter,
) where
    S::Key: Send,
    S::Value: Send,
{
    while changed.recv().await.is_some() {
        limiter.acquire().await;
        // Everything published meanwhile goes in this flush.
        while changed.try_recv().is_ok() {}
        let report = match aggregator.lock() {
            Ok(mut aggregator) => aggregator.flush(),
            Err(_) => {
                tracing::error!("the aggregator's lock is poisoned; stopping");
                return;
            }
        };
        for (producer, why) in &report.refused {
            tracing::warn!(%producer, %why, "publication refused by the kernel");
        }
    }
}

/// An aggregator shared by its producers, its flush loop and its socket
/// (held only for a publish or a flush, never across an await).
pub type SharedAggregator<S> = std::sync::Arc<std::sync::Mutex<Aggregator<S>>>;

/// An aggregator of `subsystem` run in this process with `backend` as its
/// producer `name`: its flush loop ([`run`]), rate-limited by `limiter`,
/// and its socket ([`socket::serve`]) at `path`, where producers in other
/// processes publish. Returns the sink to drive (the backend, publishing)
/// and the aggregator, to observe. Spawns both on the current tokio
/// runtime; a socket that fails is logged.
pub fn spawn_with_producer<B>(
    backend: B,
    name: &str,
    subsystem: B::Subsystem,
    path: &std::path::Path,
    limiter: kpng_drive::SyncLimiter,
) -> (Publisher<B>, SharedAggregator<B::Subsystem>)
where
    B: Producer,
    B::Subsystem: Send + 'static,
    <B::Subsystem as Subsystem>::Key:
        serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
    <B::Subsystem as Subsystem>::Value:
        serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let aggregator = std::sync::Arc::new(std::sync::Mutex::new(Aggregator::new(subsystem)));
    let (changed, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(run(aggregator.clone(), rx, limiter));
    let (served, path) = (aggregator.clone(), path.to_owned());
    tokio::spawn(async move {
        if let Err(e) = socket::serve(&path, served, changed).await {
            tracing::error!(error = %e, "the aggregator socket failed");
        }
    });
    (
        Publisher::new(backend, name, aggregator.clone()),
        aggregator,
    )
}
