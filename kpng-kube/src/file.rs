//! The file source: Kubernetes manifests as users already have them.
//!
//! Accepted: the output of `kubectl get services,endpointslices,nodes -A -o
//! yaml` (a `kind: List`), multi-document YAML, or JSON (one object or a
//! `List`). Objects of other kinds are skipped. Every object goes through
//! the same translation as the API source.
//!
//! A file is checked whole before anything is applied: an error names the
//! file, the document (and `List` item), the object and the field, and
//! leaves the store as it was. For YAML it also names the line where the
//! document (or item) starts, and for a syntax error the line and column
//! in the whole file.
//!
//! # Limits
//!
//! YAML is parsed with limits set for the file's size (kubectl's output of
//! 100,000 Services loads) while alias expansion stays bounded (YAML bombs
//! are refused):
//!
//! - nodes and scalar bytes: one node per byte of the file (at least
//!   250,000) and one scalar byte a byte (at least 64 MiB), shared by all
//!   its documents, aliases' replays included (YAML without aliases has
//!   at most about a node a byte); parser events: two a node left;
//! - aliases, per document: 50,000 aliases and anchors, 1,000,000 replayed
//!   events, replay nesting 64 (serde-saphyr's defaults);
//! - documents: no count limit but the file's size;
//! - nesting: 128 levels, as for JSON.
//!
//! JSON has no aliases; it is decoded object by object, as are a YAML
//! `List`'s items.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value as Json;

use crate::objects;
use crate::translate::{self, TranslateConfig};

mod yaml;
use crate::{Error, Ingest, Result};

/// A Kubernetes object the proxy reads.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Object {
    /// A Service.
    Service(Box<objects::Service>),
    /// An EndpointSlice.
    EndpointSlice(Box<objects::EndpointSlice>),
    /// A Node.
    Node(Box<objects::Node>),
    /// A ServiceCIDR.
    ServiceCidr(Box<objects::ServiceCidr>),
}

/// The sample cluster bundled with the crate: several namespaces, every
/// Service type, multi-port and named ports, dual stack, terminating
/// endpoints and topology hints. Node names are `node-a`, `node-b` and
/// `node-c`.
pub const SAMPLE_CLUSTER: &str = include_str!("../samples/cluster.yaml");

/// The name [`SAMPLE_CLUSTER`] is reported under.
pub const SAMPLE_CLUSTER_NAME: &str = "<bundled sample cluster>";

fn manifest_error(
    path: &str,
    document: usize,
    item: Option<usize>,
    message: impl Into<String>,
) -> Error {
    let document = match item {
        Some(item) => format!("{document} (List item {item})"),
        None => document.to_string(),
    };
    Error::Manifest {
        path: path.to_owned(),
        document,
        message: message.into(),
    }
}

/// One object of a manifest, before it is decoded: a parsed YAML value,
/// or the raw text of a JSON object (decoded straight into the lean types,
/// so a large JSON file never becomes a tree of values).
trait Doc: Sized {
    /// The object's `kind`, and a label naming it in errors.
    fn head(&self) -> (String, String);
    /// Decodes it, naming the field path on error.
    fn decode<T: serde::de::DeserializeOwned>(self) -> std::result::Result<T, String>;
}

fn label(kind: Option<&str>, namespace: Option<&str>, name: Option<&str>) -> String {
    let (kind, name) = (kind.unwrap_or("object"), name.unwrap_or(""));
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> String {
    let path = e.path().to_string();
    format!("{path}: {}", e.into_inner())
}

impl Doc for Json {
    fn head(&self) -> (String, String) {
        let kind = self.get("kind").and_then(Json::as_str);
        let meta = self.get("metadata");
        let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Json::as_str);
        (
            kind.unwrap_or("").to_owned(),
            label(kind, field("namespace"), field("name")),
        )
    }

    fn decode<T: serde::de::DeserializeOwned>(self) -> std::result::Result<T, String> {
        serde_path_to_error::deserialize(self).map_err(path_error)
    }
}

impl Doc for &serde_json::value::RawValue {
    fn head(&self) -> (String, String) {
        #[derive(serde::Deserialize)]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Head {
            kind: Option<String>,
            metadata: Option<Meta>,
        }
        let head: Option<Head> = serde_json::from_str(self.get()).ok();
        let kind = head.as_ref().and_then(|h| h.kind.as_deref());
        let meta = head.as_ref().and_then(|h| h.metadata.as_ref());
        (
            kind.unwrap_or("").to_owned(),
            label(
                kind,
                meta.and_then(|m| m.namespace.as_deref()),
                meta.and_then(|m| m.name.as_deref()),
            ),
        )
    }

    fn decode<T: serde::de::DeserializeOwned>(self) -> std::result::Result<T, String> {
        let mut deserializer = serde_json::Deserializer::from_str(self.get());
        serde_path_to_error::deserialize(&mut deserializer).map_err(path_error)
    }
}

/// Checks one object: decodes it and runs the translation, so that a file
/// with a bad object is rejected whole.
fn object(doc: impl Doc, config: &TranslateConfig) -> std::result::Result<Option<Object>, String> {
    let (kind, label) = doc.head();
    let fail = |e: String| format!("{label}: {e}");
    let object = match kind.as_str() {
        "Service" => {
            let svc: objects::Service = doc.decode().map_err(fail)?;
            translate::service(&svc, config).map_err(|e| e.to_string())?;
            Object::Service(Box::new(svc))
        }
        "EndpointSlice" => {
            let slice: objects::EndpointSlice = doc.decode().map_err(fail)?;
            let mut interner = kpng_model::endpoint::Interner::new();
            translate::endpoint_slice(&slice, &mut interner).map_err(|e| e.to_string())?;
            Object::EndpointSlice(Box::new(slice))
        }
        "Node" => {
            let node: objects::Node = doc.decode().map_err(fail)?;
            translate::node(&node).map_err(|e| e.to_string())?;
            Object::Node(Box::new(node))
        }
        "ServiceCIDR" => {
            let cidr: objects::ServiceCidr = doc.decode().map_err(fail)?;
            translate::service_cidr(&cidr).map_err(|e| e.to_string())?;
            Object::ServiceCidr(Box::new(cidr))
        }
        "" => return Err(format!("{label}: no kind")),
        other => {
            tracing::debug!(
                kind = other,
                "skipping object of a kind the proxy does not read"
            );
            return Ok(None);
        }
    };
    Ok(Some(object))
}

/// Decodes the documents of a JSON manifest (an object, a `List`, or an
/// array of objects) without building a tree of values.
fn parse_json(path: &str, text: &str, config: &TranslateConfig, each: Each<'_>) -> Result<()> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct ListHead<'a> {
        kind: Option<String>,
        #[serde(borrow, default)]
        items: Option<Vec<&'a RawValue>>,
    }
    let invalid =
        |e: serde_json::Error| manifest_error(path, 0, None, format!("invalid JSON: {e}"));
    let mut push = |found: std::result::Result<Option<Object>, String>, document, item| match found
    {
        Ok(Some(o)) => {
            each(o);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(m) => Err(manifest_error(path, document, item, m)),
    };
    if text.trim_start().starts_with('[') {
        let documents: Vec<&RawValue> = serde_json::from_str(text).map_err(invalid)?;
        for (index, doc) in documents.into_iter().enumerate() {
            push(object(doc, config), index, None)?;
        }
    } else {
        let head: ListHead<'_> = serde_json::from_str(text).map_err(invalid)?;
        if head.kind.as_deref() == Some("List") {
            for (item, doc) in head.items.unwrap_or_default().into_iter().enumerate() {
                push(object(doc, config), 0, Some(item))?;
            }
        } else {
            let doc: &RawValue = serde_json::from_str(text).map_err(invalid)?;
            push(object(doc, config), 0, None)?;
        }
    }
    Ok(())
}

/// Where each checked object of a manifest goes, in order.
type Each<'a> = &'a mut dyn FnMut(Object);

/// Parses manifests from text; `path` names them in errors.
///
/// # Errors
/// [`Error::Manifest`] for the first document that does not parse, decode
/// or translate.
pub fn parse_str(path: &str, text: &str) -> Result<Vec<Object>> {
    parse_str_with(path, text, &TranslateConfig::default())
}

/// Parses manifests from text with translation settings.
///
/// # Errors
/// [`Error::Manifest`] for the first document that does not parse, decode
/// or translate.
pub fn parse_str_with(path: &str, text: &str, config: &TranslateConfig) -> Result<Vec<Object>> {
    let mut objects = Vec::new();
    parse_each(path, text, config, &mut |o| objects.push(o))?;
    Ok(objects)
}

/// Checks each object of a manifest, in order, and hands it to `each`
/// (which may translate it and drop it, so no list of them is held).
fn parse_each(path: &str, text: &str, config: &TranslateConfig, each: Each<'_>) -> Result<()> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return parse_json(path, text, config, each);
    }
    yaml::parse(path, text, config, each)
}

/// Reads and parses a manifest file.
///
/// # Errors
/// [`Error::Read`] when the file cannot be read; [`Error::Manifest`] as in
/// [`parse_str`].
pub async fn read(path: &Path, config: &TranslateConfig) -> Result<Vec<Object>> {
    let (name, text) = read_text(path).await?;
    parse_str_with(&name, &text, config)
}

/// A file's name (for errors) and text.
async fn read_text(path: &Path) -> Result<(String, String)> {
    let name = path.display().to_string();
    match tokio::fs::read_to_string(path).await {
        Ok(text) => Ok((name, text)),
        Err(source) => Err(Error::Read { path: name, source }),
    }
}

impl Ingest {
    /// Replaces the whole state with `objects` (a file's contents), as a
    /// relist of every kind does, in one transaction, and marks every kind
    /// synced. Returns the new revision, if anything changed.
    pub fn load(&mut self, objects: &[Object]) -> Option<u64> {
        self.begin_every_relist();
        for object in objects {
            self.relisted(object);
        }
        self.finish_relists()
    }

    /// Starts a relist of every kind a manifest holds.
    fn begin_every_relist(&mut self) {
        self.begin_named_relist::<objects::Node>();
        self.begin_named_relist::<objects::ServiceCidr>();
        self.begin_service_relist();
        self.begin_slice_relist();
    }

    /// One object of a manifest, into the relist of its kind.
    fn relisted(&mut self, object: &Object) {
        match object {
            Object::Service(s) => self.relisted_service(s),
            Object::EndpointSlice(s) => self.relisted_slice(s),
            Object::Node(n) => self.relisted_named(n.as_ref()),
            Object::ServiceCidr(c) => self.relisted_named(c.as_ref()),
        }
    }

    /// Loads a manifest's text as [`load`](Self::load) loads its objects,
    /// without holding them: each is checked, translated into the relist
    /// and dropped as it is parsed (at 10k Services × 10 endpoints the
    /// decoded objects of a JSON List were ~50 MB). `path` names the
    /// manifest in errors. Returns the new revision, if anything changed.
    ///
    /// # Errors
    /// [`Error::Manifest`] as [`parse_str`] reports it; nothing of the
    /// manifest is applied then.
    pub fn load_str(&mut self, path: &str, text: &str) -> Result<Option<u64>> {
        let config = self.translate_config().clone();
        self.begin_every_relist();
        let parsed = parse_each(path, text, &config, &mut |object| self.relisted(&object));
        match parsed {
            Ok(()) => Ok(self.finish_relists()),
            Err(e) => {
                self.abort_relists();
                Err(e)
            }
        }
    }

    /// Reads a manifest file and loads it as [`load_str`](Self::load_str)
    /// does.
    ///
    /// # Errors
    /// [`Error::Read`] when the file cannot be read; [`Error::Manifest`]
    /// as in [`parse_str`]. Nothing is applied then.
    pub async fn load_file(&mut self, path: &Path) -> Result<Option<u64>> {
        let (name, text) = read_text(path).await?;
        self.load_str(&name, &text)
    }
}

/// Loads a manifest file into `ingest`, then (with `poll` set) re-reads it
/// whenever its modification time changes, applying only what changed. A
/// read or parse error is logged and the previous state kept; the first
/// load's error is returned.
///
/// # Errors
/// The first load's [`Error`].
pub async fn run(path: &Path, ingest: &mut Ingest, poll: Option<Duration>) -> Result<()> {
    let seen = modified(path).await;
    ingest.load_file(path).await?;
    if let Some(period) = poll {
        watch_changes(path, ingest, period, seen).await;
    }
    Ok(())
}

/// Polls `path` every `period` and reloads it into `ingest` when its
/// modification time differs from `seen` (the time of the last load).
/// Errors are logged and the previous state kept. Never returns.
pub async fn watch_changes(
    path: &Path,
    ingest: &mut Ingest,
    period: Duration,
    mut seen: Option<SystemTime>,
) {
    loop {
        tokio::time::sleep(period).await;
        let now = modified(path).await;
        if now == seen {
            continue;
        }
        seen = now;
        match ingest.load_file(path).await {
            Ok(revision) => {
                tracing::info!(path = %path.display(), ?revision, "manifest reloaded");
            }
            Err(error) => {
                tracing::warn!(%error, "manifest not reloaded; keeping the previous state")
            }
        }
    }
}

/// The modification time of `path`, if it can be read.
pub async fn modified(path: &Path) -> Option<SystemTime> {
    tokio::fs::metadata(path).await.ok()?.modified().ok()
}
