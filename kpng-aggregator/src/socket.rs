//! Publishing from another process: an aggregator (of any subsystem whose
//! keys and values serialize) on a unix socket.
//!
//! A CNI or a vendor's firewall in another process connects to the socket
//! (created with mode 0600: root, or the owner, only) and sends one JSON
//! request per line; each gets one JSON answer line:
//!
//! ```text
//! {"producer":"fw","publish":[{"key":{...},"value":{...}}, ...]}   whole state
//! {"producer":"fw","delta":[{"set":[key,value]},{"delete":key}]}   a delta
//! {"producer":"fw","remove":true}                                  goodbye
//! -> {"ok":true,"revision":3}  or  {"ok":false,"error":"..."}
//! ```
//!
//! A publication is checked and kept (or refused) at once; it is applied
//! with everyone else's at the next flush ([`crate::run`]). A refusal by
//! the kernel at that flush is reported on the producer's next request.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kpng_store::MapOp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::{Aggregator, Subsystem};

/// One entry of a published state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry<K, V> {
    /// The object.
    pub key: K,
    /// Its content.
    pub value: V,
}

/// One change of a delta.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change<K, V> {
    /// Create or change an object.
    Set(K, V),
    /// Remove an object.
    Delete(K),
}

/// A request line, for subsystem keys `K` and values `V`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, V: Serialize",
    deserialize = "K: Deserialize<'de>, V: Deserialize<'de>"
))]
pub struct Request<K, V> {
    /// Who publishes.
    pub producer: String,
    /// The whole state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<Vec<Entry<K, V>>>,
    /// A delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<Vec<Change<K, V>>>,
    /// Remove the producer and all it published.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
}

/// An answer line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// Whether the request was taken.
    pub ok: bool,
    /// The producer's new revision (none when nothing changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The kernel refused this producer's last flushed change (its state
    /// was rolled back to what is applied): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Errors of the socket server and client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// The socket could not be made, reached or used.
    #[error("{path}: {source}")]
    Io {
        /// The socket's path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The peer sent something that is not a request or an answer.
    #[error("bad message: {0}")]
    Protocol(String),
    /// The aggregator refused the request.
    #[error("{0}")]
    Refused(String),
}

fn handle<S: Subsystem>(
    aggregator: &Mutex<Aggregator<S>>,
    request: Request<S::Key, S::Value>,
) -> Answer {
    let refused = |error: String| Answer {
        ok: false,
        revision: None,
        error: Some(error),
        refused: None,
    };
    let Ok(mut aggregator) = aggregator.lock() else {
        return refused("the aggregator's lock is poisoned".into());
    };
    let kernel_refusal = aggregator.refusal(&request.producer).map(str::to_owned);
    let result = if request.remove {
        aggregator.remove(&request.producer);
        Ok(None)
    } else if let Some(entries) = request.publish {
        let state: imbl::OrdMap<S::Key, S::Value> =
            entries.into_iter().map(|e| (e.key, e.value)).collect();
        aggregator.publish(&request.producer, state)
    } else if let Some(changes) = request.delta {
        let ops = changes.into_iter().map(|c| match c {
            Change::Set(k, v) => MapOp::Set(k, v),
            Change::Delete(k) => MapOp::Delete(k),
        });
        aggregator.publish_delta(&request.producer, ops)
    } else {
        return refused("a request needs publish, delta or remove".into());
    };
    match result {
        Ok(revision) => Answer {
            ok: true,
            revision,
            error: None,
            refused: kernel_refusal,
        },
        Err(e) => refused(e.to_string()),
    }
}

/// Serves `aggregator` on a unix socket at `path` (replacing a stale one),
/// mode 0600, until the task is dropped. Each taken publication pokes
/// `changed`, so [`crate::run`] flushes it with the others.
///
/// # Errors
/// When the socket cannot be made.
pub async fn serve<S>(
    path: &Path,
    aggregator: Arc<Mutex<Aggregator<S>>>,
    changed: mpsc::Sender<()>,
) -> Result<(), SocketError>
where
    S: Subsystem + Send + 'static,
    S::Key: Serialize + DeserializeOwned + Send + Sync,
    S::Value: Serialize + DeserializeOwned + Send + Sync,
{
    use std::os::unix::fs::PermissionsExt;
    let io = |source| SocketError::Io {
        path: path.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    loop {
        let (stream, _) = listener.accept().await.map_err(io)?;
        let aggregator = aggregator.clone();
        let changed = changed.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &aggregator, &changed).await {
                tracing::debug!(error = %e, "aggregator client went away");
            }
        });
    }
}

async fn connection<S>(
    stream: UnixStream,
    aggregator: &Mutex<Aggregator<S>>,
    changed: &mpsc::Sender<()>,
) -> std::io::Result<()>
where
    S: Subsystem,
    S::Key: DeserializeOwned,
    S::Value: DeserializeOwned,
{
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        let answer = match serde_json::from_str::<Request<S::Key, S::Value>>(&line) {
            Ok(request) => handle(aggregator, request),
            Err(e) => Answer {
                ok: false,
                revision: None,
                error: Some(format!("not a request: {e}")),
                refused: None,
            },
        };
        if answer.ok {
            // A full queue means a flush is already due.
            let _ = changed.try_send(());
        }
        let mut text = serde_json::to_string(&answer).unwrap_or_else(|_| "{\"ok\":false}".into());
        text.push('\n');
        write.write_all(text.as_bytes()).await?;
    }
    Ok(())
}

/// A producer in another process, talking to [`serve`].
#[derive(Debug)]
pub struct Client {
    path: String,
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Client {
    /// Connects to the aggregator's socket.
    ///
    /// # Errors
    /// When it cannot be reached.
    pub async fn connect(path: &Path) -> Result<Self, SocketError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| SocketError::Io {
                path: path.display().to_string(),
                source,
            })?;
        let (read, write) = stream.into_split();
        Ok(Self {
            path: path.display().to_string(),
            lines: BufReader::new(read).lines(),
            write,
        })
    }

    /// Sends one request and waits for its answer.
    ///
    /// # Errors
    /// [`SocketError::Refused`] with the aggregator's reason, or a
    /// transport error.
    pub async fn request<K: Serialize, V: Serialize>(
        &mut self,
        request: &Request<K, V>,
    ) -> Result<Option<u64>, SocketError> {
        let io = |source| SocketError::Io {
            path: self.path.clone(),
            source,
        };
        let mut text =
            serde_json::to_string(request).map_err(|e| SocketError::Protocol(e.to_string()))?;
        text.push('\n');
        self.write.write_all(text.as_bytes()).await.map_err(io)?;
        let line = self
            .lines
            .next_line()
            .await
            .map_err(|source| SocketError::Io {
                path: self.path.clone(),
                source,
            })?
            .ok_or_else(|| SocketError::Protocol("the aggregator closed the socket".into()))?;
        let answer: Answer =
            serde_json::from_str(&line).map_err(|e| SocketError::Protocol(e.to_string()))?;
        if answer.ok {
            Ok(answer.revision)
        } else {
            Err(SocketError::Refused(answer.error.unwrap_or_default()))
        }
    }

    /// Publishes `producer`'s whole state (an nft or iptables
    /// `Fragment`).
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn publish<K, V>(
        &mut self,
        producer: &str,
        fragment: impl Into<imbl::OrdMap<K, V>>,
    ) -> Result<Option<u64>, SocketError>
    where
        K: Ord + Clone + Serialize,
        V: Clone + Serialize,
    {
        let entries = fragment
            .into()
            .into_iter()
            .map(|(key, value)| Entry { key, value })
            .collect();
        self.request(&Request {
            producer: producer.to_owned(),
            publish: Some(entries),
            delta: None,
            remove: false,
        })
        .await
    }
}
