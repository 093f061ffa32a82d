//! Where the ENLS comes from: a [`Source`] fills a store, and [`Feed`]
//! keeps it filled while it runs.

use kpng_store::Reader;
#[cfg(any(feature = "file", feature = "kube"))]
use kpng_store::Store;

use crate::Error;

/// Where a proxy's ENLS comes from: a store the caller fills, a manifest
/// file (read once or watched), the bundled sample cluster, or the
/// Kubernetes API. Each makes its store when it is made, so that
/// [`Source::reader`] can be handed to what reads the store (metrics,
/// say) before anything is read.
///
/// A kpng server is a source of another kind (it sends a node's view, not
/// the ENLS): [`Proxy::server`](crate::Proxy::server).
///
/// ```
/// # #[cfg(feature = "file")] {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let source = kpng::Source::sample();
/// let reader = source.reader();
/// assert_eq!(reader.snapshot().revision(), 0, "nothing read yet");
/// let _feed = source.start(Some("node-a"), false).await?;
/// assert!(reader.snapshot().services().count() > 0);
/// # Ok::<(), kpng::Error>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Source {
    origin: Origin,
    #[cfg(any(feature = "file", feature = "kube"))]
    ingest: kpng_kube::IngestConfig,
}

#[derive(Debug)]
enum Origin {
    /// A store the caller writes: only its reader is kept.
    Store(Reader),
    /// A store this source writes.
    #[cfg(any(feature = "file", feature = "kube"))]
    Filled { store: Box<Store>, from: Filler },
}

#[cfg(any(feature = "file", feature = "kube"))]
enum Filler {
    #[cfg(feature = "file")]
    Sample,
    #[cfg(feature = "file")]
    File {
        path: std::path::PathBuf,
        watch: bool,
    },
    #[cfg(feature = "kube")]
    Kube {
        client: kube::Client,
        watch: kpng_kube::watch::WatchConfig,
    },
}

#[cfg(any(feature = "file", feature = "kube"))]
impl std::fmt::Debug for Filler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(feature = "file")]
            Filler::Sample => f.write_str("Sample"),
            #[cfg(feature = "file")]
            Filler::File { path, watch } => f
                .debug_struct("File")
                .field("path", path)
                .field("watch", watch)
                .finish(),
            #[cfg(feature = "kube")]
            Filler::Kube { watch, .. } => f.debug_struct("Kube").field("watch", watch).finish(),
        }
    }
}

impl Source {
    fn new(origin: Origin) -> Self {
        Self {
            origin,
            #[cfg(any(feature = "file", feature = "kube"))]
            ingest: kpng_kube::IngestConfig::default(),
        }
    }

    #[cfg(any(feature = "file", feature = "kube"))]
    fn filled(from: Filler) -> Self {
        Self::new(Origin::Filled {
            store: Box::new(Store::new()),
            from,
        })
    }

    /// A store the caller fills (its own ingest, a test's writes): the
    /// proxy reads it and writes nothing.
    pub fn store(reader: Reader) -> Self {
        Self::new(Origin::Store(reader))
    }

    /// The bundled sample cluster (three nodes, a Service of each kind):
    /// a proxy that runs anywhere with no cluster.
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    pub fn sample() -> Self {
        Self::filled(Filler::Sample)
    }

    /// A manifest file of Services, EndpointSlices and Nodes (YAML or
    /// JSON, a `List` or several documents), read once. A file that does
    /// not parse, or holds none of them (or only objects skipped), is an
    /// error naming the file; an object the API server would refuse is
    /// skipped with a warning naming it, the rest applied (see
    /// [`Source::on_input_report`]).
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    pub fn file(path: impl Into<std::path::PathBuf>) -> Self {
        Self::filled(Filler::File {
            path: path.into(),
            watch: false,
        })
    }

    /// [`Source::file`], followed: read again whenever it changes (once
    /// it is whole: a file renamed into place at once). A change that does not parse is logged and not
    /// applied; the previous state stays.
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    pub fn watched_file(path: impl Into<std::path::PathBuf>) -> Self {
        Self::filled(Filler::File {
            path: path.into(),
            watch: true,
        })
    }

    /// The Kubernetes API, through `client`: Services, EndpointSlices,
    /// ServiceCIDRs and the Nodes (a proxy's own Node only, as
    /// kube-proxy), watched with kube-runtime and retried for ever.
    #[cfg(feature = "kube")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
    pub fn kube(client: kube::Client) -> Self {
        Self::filled(Filler::Kube {
            client,
            watch: kpng_kube::watch::WatchConfig::default(),
        })
    }

    /// The Kubernetes API as `config` reaches it (`kube::Config::infer()`
    /// in a pod); its URL names the server in every retry line.
    ///
    /// # Errors
    /// [`Error::Kube`] when no client can be made of `config`.
    #[cfg(feature = "kube")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
    pub fn kube_config(config: kube::Config) -> Result<Self, Error> {
        let server = config.cluster_url.to_string();
        let client =
            kube::Client::try_from(config).map_err(|e| Error::Kube(kpng_retry::one_line(&e)))?;
        let mut watch = kpng_kube::watch::WatchConfig::default();
        watch.server = server;
        Ok(Self::filled(Filler::Kube { client, watch }))
    }

    /// The API source's settings (the server's name in logs, streaming
    /// lists, giving up after failed attempts); which Nodes are watched
    /// is set when the source starts, and an empty `server` keeps the
    /// one [`Source::kube_config`] took from its config. No effect on
    /// other sources.
    #[cfg(feature = "kube")]
    #[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
    pub fn watch_config(mut self, config: kpng_kube::watch::WatchConfig) -> Self {
        if let Origin::Filled {
            from: Filler::Kube { watch, .. },
            ..
        } = &mut self.origin
        {
            let server = std::mem::take(&mut watch.server);
            *watch = config;
            if watch.server.is_empty() {
                watch.server = server;
            }
        }
        self
    }

    /// How Kubernetes objects become the ENLS (the proxy's name for
    /// `service.kubernetes.io/service-proxy-name`, whether an empty input
    /// may be applied). No effect on [`Source::store`].
    #[cfg(any(feature = "file", feature = "kube"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "file", feature = "kube"))))]
    pub fn ingest_config(mut self, config: kpng_kube::IngestConfig) -> Self {
        self.ingest = config;
        self
    }

    /// Calls `report` after each read of a manifest file (or the sample)
    /// that was applied, with what it applied and what it skipped (objects
    /// the API server would refuse, or that do not decode: named with
    /// where they are and why): for a metric or a `/healthz` detail of a
    /// watched file. No effect on other sources.
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    pub fn on_input_report(
        mut self,
        report: impl Fn(&kpng_kube::file::InputReport) + Send + Sync + 'static,
    ) -> Self {
        self.ingest = std::mem::take(&mut self.ingest).on_input_report(report);
        self
    }

    /// A reader of the store this source fills: empty until the source
    /// starts.
    pub fn reader(&self) -> Reader {
        match &self.origin {
            Origin::Store(reader) => reader.clone(),
            #[cfg(any(feature = "file", feature = "kube"))]
            Origin::Filled { store, .. } => store.reader(),
        }
    }

    /// Whether the store holds every Node of the cluster (a file, a
    /// caller's store), rather than only the served node's (the API,
    /// watched for one node by a proxy).
    pub(crate) fn holds_all_nodes(&self) -> bool {
        #[cfg(feature = "kube")]
        if let Origin::Filled {
            from: Filler::Kube { .. },
            ..
        } = &self.origin
        {
            return false;
        }
        true
    }

    /// Starts filling the store: a file is read (and, watched, followed
    /// on a task), the API watched on a task. `node` is the node a proxy
    /// serves (the API source then watches only its Node), `None` for a
    /// server of every node. With `once`, what follows the first state is
    /// not needed: a file is not kept open for writing, and the API's
    /// watch ends once [`kpng_drive::DriveConfig::wait_for`]'s kinds are
    /// listed.
    ///
    /// # Errors
    /// A file that cannot be read or does not parse ([`Error::Ingest`]).
    pub async fn start(self, node: Option<&str>, once: bool) -> Result<Feed, Error> {
        let writer = match self.origin {
            Origin::Store(_) => Writer::None,
            #[cfg(any(feature = "file", feature = "kube"))]
            Origin::Filled { store, from } => {
                let ingest = kpng_kube::Ingest::new(*store, self.ingest);
                start_filler(ingest, from, node, once).await?
            }
        };
        let _ = (node, once);
        Ok(Feed { writer })
    }
}

#[cfg(any(feature = "file", feature = "kube"))]
async fn start_filler(
    mut ingest: kpng_kube::Ingest,
    from: Filler,
    node: Option<&str>,
    once: bool,
) -> Result<Writer, Error> {
    let _ = node;
    match from {
        #[cfg(feature = "file")]
        Filler::Sample => {
            use kpng_kube::file::{SAMPLE_CLUSTER, SAMPLE_CLUSTER_NAME};
            ingest.load_str(SAMPLE_CLUSTER_NAME, SAMPLE_CLUSTER)?;
            Ok(if once {
                Writer::None
            } else {
                Writer::Held {
                    _ingest: Box::new(ingest),
                }
            })
        }
        #[cfg(feature = "file")]
        Filler::File { path, watch } => {
            let since = match watch {
                true => kpng_kube::file::modified(&path).await,
                false => None,
            };
            // Each object is translated as it is parsed, and dropped.
            ingest.load_file(&path).await?;
            Ok(match (watch, once) {
                (true, _) => {
                    let period = std::time::Duration::from_secs(1);
                    Writer::Task(tokio::spawn(async move {
                        kpng_kube::file::watch_changes(&path, &mut ingest, period, since).await;
                        (Ok(()), ingest)
                    }))
                }
                // One state: the readers hold it, and the store can go
                // with the last of them.
                (false, true) => Writer::None,
                (false, false) => Writer::Held {
                    _ingest: Box::new(ingest),
                },
            })
        }
        #[cfg(feature = "kube")]
        Filler::Kube { client, mut watch } => {
            use kpng_kube::watch::NodeScope;
            // A proxy watches its own Node; a server every Node.
            watch.nodes = match node {
                Some(node) => NodeScope::Only(node.to_owned()),
                None => NodeScope::All,
            };
            // The ingest comes back with the watch's end, so that the
            // store stays open (and its readers waiting) until the error
            // is read: closed first, a waiting round would end without
            // it. A one-shot watch ends once what a round waits for is
            // listed: the store then goes with the round's snapshot.
            let mut lists = ingest.reader();
            let wait_for = kpng_drive::DriveConfig::default().wait_for;
            Ok(Writer::Task(tokio::spawn(async move {
                let watched = if once {
                    tokio::select! {
                        watched = kpng_kube::watch::run_on(client, &mut ingest, watch) => Some(watched),
                        _ = lists.listed(&wait_for) => None,
                    }
                } else {
                    Some(kpng_kube::watch::run_on(client, &mut ingest, watch).await)
                };
                drop(lists);
                let result = match watched {
                    None => Ok(()),
                    Some(Ok(())) => Err(Error::WatchEnded),
                    Some(Err(e)) => Err(e.into()),
                };
                (result, ingest)
            })))
        }
    }
}

/// A started [`Source`]: what keeps its store filled (a file watch or the
/// API's, on a task; or the writer, held). Read the store through the
/// reader taken from [`Source::reader`] before the start. Dropping it
/// stops the task and closes the store: its readers keep the last
/// snapshot.
#[derive(Debug)]
#[must_use = "dropping a Feed stops filling the store"]
pub struct Feed {
    writer: Writer,
}

#[derive(Debug)]
enum Writer {
    /// Nothing writes the store any more (a one-shot read), or the
    /// caller does.
    None,
    /// The writer, held so that the store stays open.
    #[cfg(feature = "file")]
    Held { _ingest: Box<kpng_kube::Ingest> },
    /// A task that writes the store, and ends only with an error (or,
    /// one-shot, once the store is listed). It hands the writer back, to
    /// be dropped once its end is read.
    #[cfg(any(feature = "file", feature = "kube"))]
    Task(tokio::task::JoinHandle<(Result<(), Error>, kpng_kube::Ingest)>),
}

impl Feed {
    /// Waits until the source stops filling the store: for the API, the
    /// watch's error (with [`kpng_kube::watch::WatchConfig::give_up_after`]),
    /// or `Ok` once a one-shot source is listed; pending for ever for a
    /// source that has nothing more to do.
    ///
    /// # Errors
    /// Why the source ended.
    pub async fn ended(&mut self) -> Result<(), Error> {
        match &mut self.writer {
            #[cfg(any(feature = "file", feature = "kube"))]
            Writer::Task(task) => {
                let result = match task.await {
                    // The store closes here, after its end is known.
                    Ok((result, _ingest)) => result,
                    Err(e) => Err(Error::Task(e.to_string())),
                };
                self.writer = Writer::None;
                result
            }
            _ => std::future::pending().await,
        }
    }

    /// Waits for `work` while the source fills the store: the source's
    /// error if it ends with one first; when a one-shot source ends listed
    /// (its writer gone, its state in the readers), `work` goes on.
    ///
    /// # Errors
    /// `work`'s error, or why the source ended.
    pub async fn alongside<T, E: From<Error>>(
        &mut self,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        tokio::pin!(work);
        let ended = tokio::select! {
            done = &mut work => return done,
            ended = self.ended() => ended,
        };
        ended?;
        work.await
    }

    /// Lets the store's memory go with the process instead of freeing it
    /// (at a million endpoints, tenths of a second): for a process that
    /// ends now.
    pub(crate) fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        #[cfg(any(feature = "file", feature = "kube"))]
        if let Writer::Task(task) = &self.writer {
            task.abort();
        }
    }
}
