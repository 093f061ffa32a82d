//! [`Proxy`]: a node's proxy, wired once: the node, a source, a sink.

use kpng_drive::DriveConfig;
use kpng_sink::{Hook, Sink, SinkExt, With};
use kpng_view::NodeProjector;

use crate::node::{NodeReport, check_node};
use crate::{Error, Source};

/// A Kubernetes Service proxy for one node: where the cluster's state
/// comes from (a [`Source`], or a kpng server), what programs the node (a
/// [`Sink`], composed with [`Hook`]s), and how rounds are driven. The
/// node is named once, here; it reaches the API watch (only this node's
/// Node is watched), the node view and the agent's requests.
///
/// [`Proxy::run`] follows the source for ever; [`Proxy::once`] syncs once
/// and hands the sink back. Before a proxy runs, nothing is read or
/// programmed; a node name that matches no Node object is warned about by
/// name (and reported to [`Proxy::conditions`]).
///
/// ```
/// # #[cfg(feature = "file")] {
/// use kpng::{Proxy, Round, Sink, SinkError, Source};
///
/// /// Prints how many Services each round leaves.
/// struct Count;
/// impl Sink for Count {
///     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
///         println!("{} Services", round.view().services.len());
///         Ok(())
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// Proxy::new("node-a").source(Source::sample()).sink(Count).once().await?;
/// # Ok::<(), kpng::Error>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a proxy does nothing until .run() or .once() is awaited"]
pub struct Proxy<S = NoSink> {
    node: String,
    from: Option<From>,
    sink: S,
    drive: DriveConfig,
    #[cfg(feature = "agent")]
    agent: kpng_api::AgentConfig,
    report: NodeReport,
    free_on_return: bool,
}

/// The sink of a [`Proxy`] not given one yet: a proxy runs once
/// [`Proxy::sink`] has given it one.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSink;

#[derive(Debug)]
enum From {
    Source(Source),
    #[cfg(feature = "agent")]
    Server(kpng_api::Address),
}

impl Proxy<NoSink> {
    /// A proxy for the node named `node`: the name of its Node object
    /// (kube-proxy's `--hostname-override`, usually the host name).
    pub fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            from: None,
            sink: NoSink,
            drive: DriveConfig::default(),
            #[cfg(feature = "agent")]
            agent: kpng_api::AgentConfig::default(),
            report: NodeReport::default(),
            free_on_return: true,
        }
    }
}

impl<S> Proxy<S> {
    /// The node this proxy serves.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Takes the cluster's state from `source` (the API, a file, the
    /// sample, a store): the node's view is projected here.
    pub fn source(mut self, source: Source) -> Self {
        self.from = Some(From::Source(source));
        self
    }

    /// Takes the node's view from a kpng server (`kpng kube … to-api`) at
    /// `address`: the server projects it, and streams changes.
    #[cfg(feature = "agent")]
    #[cfg_attr(docsrs, doc(cfg(feature = "agent")))]
    pub fn server(mut self, address: kpng_api::Address) -> Self {
        self.from = Some(From::Server(address));
        self
    }

    /// Programs the node with `sink` (a backend, or your own).
    pub fn sink<T: Sink>(self, sink: T) -> Proxy<T> {
        self.map_sink(|_| sink)
    }

    /// Adds `hook` around the sink: called before and after each round
    /// (a log, metrics, a companion that follows the view).
    pub fn hook<H: Hook<S>>(self, hook: H) -> Proxy<With<S, H>>
    where
        S: Sink,
    {
        self.map_sink(|sink| sink.with(hook))
    }

    /// The same proxy with its sink made by `f` from the current one.
    fn map_sink<T>(self, f: impl FnOnce(S) -> T) -> Proxy<T> {
        Proxy {
            node: self.node,
            from: self.from,
            sink: f(self.sink),
            drive: self.drive,
            #[cfg(feature = "agent")]
            agent: self.agent,
            report: self.report,
            free_on_return: self.free_on_return,
        }
    }

    /// Puts the guard against losing everything in front of the sink: a
    /// round that would delete every Service the sink programmed, or more
    /// than [`GuardConfig::max_delete_share`](kpng_drive::GuardConfig) of
    /// them, is held back (logged, and reported by
    /// [`HoldStatus`](kpng_drive::HoldStatus)) until it lasts the
    /// confirmation time or an override lets it through. The driver
    /// re-checks a hold on its own; an agent at the server's next change.
    /// A truncated manifest or an API server that lists nothing then
    /// drops no traffic.
    pub fn guarded(self, config: kpng_drive::GuardConfig) -> Proxy<kpng_drive::Guarded<S>>
    where
        S: Sink,
    {
        let mut proxy = self.map_sink(|sink| kpng_drive::Guarded::new(sink, config));
        proxy.drive.hold = Some(proxy.sink.status());
        proxy
    }

    /// How rounds are driven from a source: the minimum period between
    /// syncs and its burst, the retry backoff, the kinds waited for, a
    /// guard's hold to re-check. Its `once` is set by [`Proxy::once`], and
    /// a hold already set by [`Proxy::guarded`] is kept when `config` has
    /// none.
    pub fn drive_config(mut self, mut config: DriveConfig) -> Self {
        if config.hold.is_none() {
            config.hold = self.drive.hold.take();
        }
        self.drive = config;
        self
    }

    /// How the view is followed from a kpng server (retries, compression,
    /// reports). Its `once` is set by [`Proxy::once`].
    #[cfg(feature = "agent")]
    #[cfg_attr(docsrs, doc(cfg(feature = "agent")))]
    pub fn agent_config(mut self, config: kpng_api::AgentConfig) -> Self {
        self.agent = config;
        self
    }

    /// Calls `report` with why this node is not served (no Node object
    /// has its name, or none is known yet), and with `None` once it is.
    /// The warning is logged either way; this is for a readiness check.
    pub fn on_node_missing(
        mut self,
        report: impl Fn(Option<&str>) + Send + Sync + 'static,
    ) -> Self {
        self.report = NodeReport::new(report);
        self
    }

    /// Holds the readiness condition [`NODE_CONDITION`](crate::NODE_CONDITION)
    /// in `conditions` (so `/healthz` answers 503) while no Node object
    /// has this node's name, or while it is not known yet.
    #[cfg(feature = "health")]
    #[cfg_attr(docsrs, doc(cfg(feature = "health")))]
    pub fn conditions(self, conditions: kpng_health::Conditions) -> Self {
        self.on_node_missing(move |why| match why {
            Some(why) => conditions.set(crate::NODE_CONDITION, why),
            None => conditions.clear(crate::NODE_CONDITION),
        })
    }

    /// Whether [`Proxy::once`] frees what it held (the store, the view)
    /// before it returns. `false` for a process that ends then: at a
    /// million endpoints, freeing takes tenths of a second.
    pub fn free_on_return(mut self, free: bool) -> Self {
        self.free_on_return = free;
        self
    }
}

impl<S: Sink> Proxy<S> {
    /// Keeps the node in line with the cluster for ever: waits for the
    /// initial lists, then syncs each change (rate-limited, retried with
    /// a full round after a failure).
    ///
    /// # Errors
    /// When the source ends: the API watch gave up (with
    /// [`WatchConfig::give_up_after`](kpng_kube::watch::WatchConfig::give_up_after)),
    /// a file could not be read at the start, or the server's address is
    /// refused.
    pub async fn run(self) -> Result<(), Error> {
        self.go(false).await.map(drop)
    }

    /// Syncs the node once, from the source's first complete state, and
    /// returns the sink (to read what it did).
    ///
    /// # Errors
    /// As [`Proxy::run`], and the sink's error: a one-shot sync is not
    /// retried.
    pub async fn once(self) -> Result<S, Error> {
        self.go(true).await
    }

    async fn go(self, once: bool) -> Result<S, Error> {
        let Proxy {
            node,
            from,
            mut sink,
            mut drive,
            #[cfg(feature = "agent")]
            mut agent,
            report,
            free_on_return,
        } = self;
        match from.ok_or(Error::NoSource)? {
            From::Source(source) => {
                let all = source.holds_all_nodes();
                // Only the round holds a reader: a one-shot round frees
                // the store's memory before the sink builds its batch.
                let reader = source.reader();
                let mut feed = source.start(Some(&node), once).await?;
                check_node(&reader, &node, all, report);
                let mut projector = NodeProjector::new(node.as_str());
                drive.once = once;
                let driving = kpng_drive::drive(reader, &mut projector, &mut sink, &drive);
                let result = feed
                    .alongside(async { Ok::<_, Error>(driving.await?) })
                    .await;
                if once && !free_on_return {
                    std::mem::forget(projector);
                    feed.forget();
                }
                result.map(|()| sink)
            }
            #[cfg(feature = "agent")]
            From::Server(address) => {
                let mut seen = (&mut sink).with(crate::node::NodeSeen::new(&node, report));
                agent.once = once;
                kpng_api::run_agent(&address, &node, &mut seen, &agent).await?;
                Ok(sink)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::Kind;
    use kpng_model::v1::Service;
    use kpng_sink::{Round, SinkError};
    use kpng_store::Store;

    #[derive(Debug, Default)]
    struct Count(Vec<usize>);
    impl Sink for Count {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.0.push(round.view().services.len());
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_proxy_without_a_source_says_so() {
        let error = Proxy::new("node-a").sink(Count::default()).once().await;
        assert!(matches!(error, Err(Error::NoSource)), "{error:?}");
    }

    #[tokio::test]
    async fn a_store_source_syncs_once() {
        let mut store = Store::new();
        let mut txn = store.begin();
        txn.set_service(
            kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"),
        );
        txn.commit();
        store.mark_listed(Kind::Service);
        store.mark_listed(Kind::Endpoint);
        let sink = Proxy::new("node-a")
            .source(Source::store(store.reader()))
            .sink(Count::default())
            .once()
            .await
            .expect("synced");
        assert_eq!(sink.0, vec![1]);
    }

    #[cfg(feature = "file")]
    #[tokio::test]
    async fn the_sample_syncs_once_with_a_hook() {
        struct Rounds(std::sync::Arc<std::sync::atomic::AtomicUsize>);
        impl<S: ?Sized> Hook<S> for Rounds {
            fn before(&mut self, _round: &Round<'_>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sink = Proxy::new("node-a")
            .source(Source::sample())
            .sink(Count::default())
            .hook(Rounds(rounds.clone()))
            .once()
            .await
            .expect("synced");
        assert_eq!(rounds.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(sink.get_ref().0.len(), 1);
        assert!(sink.get_ref().0[0] > 0);
    }

    #[tokio::test]
    async fn a_guarded_proxy_holds_back_a_round_that_deletes_everything() {
        let mut store = Store::new();
        let mut txn = store.begin();
        txn.set_service(
            kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"),
        );
        txn.commit();
        store.mark_listed(Kind::Service);
        store.mark_listed(Kind::Endpoint);
        let guard = kpng_drive::GuardConfig::default();
        let first = Proxy::new("node-a")
            .source(Source::store(store.reader()))
            .sink(Count::default())
            .guarded(guard.clone())
            .once()
            .await
            .expect("synced");
        assert_eq!(first.inner().0, vec![1]);
        // The next state deletes every Service: held back, the sink keeps
        // its Service.
        let mut txn = store.begin();
        txn.delete(&kpng_model::Key::Service(kpng_model::ServiceName::new(
            "default", "web",
        )));
        txn.commit();
        let mut guarded = first;
        let mut projector = NodeProjector::new("node-a");
        projector
            .sync_into(&store.snapshot(), &mut guarded)
            .expect("held back, not failed");
        assert_eq!(guarded.inner().0, vec![1], "the inner sink was not called");
        assert!(guarded.status().held().is_some(), "the hold is reported");
    }

    #[cfg(feature = "file")]
    #[tokio::test]
    async fn a_missing_file_is_named() {
        let error = Proxy::new("node-a")
            .source(Source::file("/nonexistent/cluster.yaml"))
            .sink(Count::default())
            .once()
            .await
            .expect_err("an error");
        assert!(
            error.to_string().contains("/nonexistent/cluster.yaml"),
            "{error}"
        );
    }
}
