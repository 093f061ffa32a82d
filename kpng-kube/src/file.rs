//! The file source: Kubernetes manifests as users already have them.
//!
//! Accepted: the output of `kubectl get services,endpointslices,nodes -A -o
//! yaml` (a `kind: List`), multi-document YAML, or JSON (one object or a
//! `List`). Objects of other kinds are skipped. Every object goes through
//! the same translation as the API source.
//!
//! A file is checked whole before anything is applied: an error names the
//! file, the document (and `List` item), the object and the field, and
//! leaves the store as it was. A file with no Service, EndpointSlice or
//! Node in it (empty, only comments, only other kinds) is refused too
//! ([`Error::Empty`]), unless [`IngestConfig::allow_empty_input`]: loading
//! it would delete every Service.
//!
//! [`IngestConfig::allow_empty_input`]: crate::IngestConfig::allow_empty_input
//!
//! [`watch_changes`] reads a changed file only once it is whole: its size,
//! modification time and inode stable over [`SETTLE`] (a file renamed into
//! place is whole at once), so a file rewritten with `>` is not read
//! between its truncation and its new contents.
//!
//! For YAML, errors also name the line where the document (or item)
//! starts, and for a syntax error the line and column in the whole file.
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
        // The field path is tracked only to name it in an error.
        match T::deserialize(&self) {
            Ok(value) => Ok(value),
            Err(_) => serde_path_to_error::deserialize(self).map_err(path_error),
        }
    }
}

/// The text of one JSON object (UTF-8, checked as it is decoded).
#[derive(Clone, Copy)]
struct JsonBytes<'a>(&'a [u8]);

impl Doc for JsonBytes<'_> {
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
        let head: Option<Head> = serde_json::from_slice(self.0).ok();
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
        // Tracking the field path took a quarter of the decoding: it is
        // done again only to name the path in an error.
        match serde_json::from_slice(self.0) {
            Ok(value) => Ok(value),
            Err(_) => {
                let mut deserializer = serde_json::Deserializer::from_slice(self.0);
                serde_path_to_error::deserialize(&mut deserializer).map_err(path_error)
            }
        }
    }
}

/// What is wrong with one object.
enum Problem {
    /// It does not decode or translate: the file is refused.
    Bad(String),
    /// The API server would refuse it: it is skipped, with a warning.
    Refused(String),
}

fn translated<T>(
    result: std::result::Result<T, translate::TranslateError>,
) -> std::result::Result<T, Problem> {
    result.map_err(|e| {
        if e.refused {
            Problem::Refused(e.to_string())
        } else {
            Problem::Bad(e.to_string())
        }
    })
}

/// Checks one object: decodes it and runs the translation, so that a file
/// with a bad object is rejected whole.
fn object(doc: impl Doc, config: &TranslateConfig) -> std::result::Result<Option<Object>, Problem> {
    let (kind, label) = doc.head();
    let fail = |e: String| Problem::Bad(format!("{label}: {e}"));
    let object = match kind.as_str() {
        "Service" => {
            let svc: objects::Service = doc.decode().map_err(fail)?;
            translated(translate::service(&svc, config))?;
            Object::Service(Box::new(svc))
        }
        "EndpointSlice" => {
            let slice: objects::EndpointSlice = doc.decode().map_err(fail)?;
            let mut interner = kpng_model::endpoint::Interner::new();
            translated(translate::endpoint_slice(&slice, &mut interner))?;
            Object::EndpointSlice(Box::new(slice))
        }
        "Node" => {
            let node: objects::Node = doc.decode().map_err(fail)?;
            translated(translate::node(&node))?;
            Object::Node(Box::new(node))
        }
        "ServiceCIDR" => {
            let cidr: objects::ServiceCidr = doc.decode().map_err(fail)?;
            translated(translate::service_cidr(&cidr))?;
            Object::ServiceCidr(Box::new(cidr))
        }
        "" => return Err(Problem::Bad(format!("{label}: no kind"))),
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

/// Where an object is in its manifest: the document, and the item in a
/// `List`.
#[derive(Clone, Copy)]
struct Position {
    document: usize,
    item: Option<usize>,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.item {
            Some(item) => write!(f, "document {} (List item {item})", self.document),
            None => write!(f, "document {}", self.document),
        }
    }
}

/// Checks a manifest's objects in order: a bad one refuses the file; one
/// the API server would refuse, or a second object of the same kind and
/// namespace/name (the API holds one), is skipped with a warning naming
/// it and where it is.
struct Checker<'a> {
    path: &'a str,
    config: &'a TranslateConfig,
    /// The first position of each object (kind, namespace, name).
    seen: std::collections::HashMap<(&'static str, Box<str>), Position>,
    each: Each<'a>,
}

impl<'a> Checker<'a> {
    fn new(path: &'a str, config: &'a TranslateConfig, each: Each<'a>) -> Self {
        Self {
            path,
            config,
            seen: std::collections::HashMap::new(),
            each,
        }
    }

    fn check(&mut self, doc: impl Doc, document: usize, item: Option<usize>) -> Result<()> {
        let at = Position { document, item };
        self.take(object(doc, self.config), at)
            .map_err(|message| manifest_error(self.path, document, item, message))
    }

    /// Checks JSON objects in order, as [`check`](Self::check) does,
    /// decoding them on every core: a run of [`PER_THREAD`] objects a
    /// thread at a time (decoding was half of reading a file of a million
    /// endpoints), then taken in their order. `at` gives an object's
    /// document and `List` item from its index.
    fn check_all<D: Doc + Copy + Sync>(
        &mut self,
        docs: &[D],
        at: impl Fn(usize) -> (usize, Option<usize>),
    ) -> Result<()> {
        /// Objects a thread decodes before they are taken: few enough that
        /// a run of large EndpointSlices is not held long.
        const PER_THREAD: usize = 256;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let config = self.config;
        let decode = |run: &[D]| -> Vec<_> { run.iter().map(|doc| object(*doc, config)).collect() };
        let mut index = 0;
        for round in docs.chunks(PER_THREAD * threads) {
            let decoded: Vec<_> = if threads == 1 || round.len() <= PER_THREAD {
                vec![decode(round)]
            } else {
                std::thread::scope(|scope| {
                    let mut runs = round.chunks(PER_THREAD);
                    let first = runs.next().unwrap_or_default();
                    let others: Vec<_> = runs.map(|run| scope.spawn(move || decode(run))).collect();
                    let mut all = vec![decode(first)];
                    for handle in others {
                        // A panic in a decoding thread goes on here.
                        all.push(
                            handle
                                .join()
                                .unwrap_or_else(|e| std::panic::resume_unwind(e)),
                        );
                    }
                    all
                })
            };
            for found in decoded.into_iter().flatten() {
                let (document, item) = at(index);
                index += 1;
                self.take(found, Position { document, item })
                    .map_err(|message| manifest_error(self.path, document, item, message))?;
            }
        }
        Ok(())
    }

    /// Takes what decoding the object at `at` gave: a bad object is the
    /// message refusing the file; a refused or second one is skipped with a
    /// warning; the rest goes to `each`.
    fn take(
        &mut self,
        found: std::result::Result<Option<Object>, Problem>,
        at: Position,
    ) -> std::result::Result<(), String> {
        let object = match found {
            Ok(Some(object)) => object,
            Ok(None) => return Ok(()),
            Err(Problem::Bad(message)) => return Err(message),
            Err(Problem::Refused(message)) => {
                tracing::warn!("{}: {at}: {message}; the object is skipped", self.path);
                return Ok(());
            }
        };
        let (kind, meta) = match &object {
            Object::Service(o) => ("Service", &o.metadata),
            Object::EndpointSlice(o) => ("EndpointSlice", &o.metadata),
            Object::Node(o) => ("Node", &o.metadata),
            Object::ServiceCidr(o) => ("ServiceCIDR", &o.metadata),
        };
        let name = match &meta.namespace {
            Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
            None => meta.name.clone().unwrap_or_default(),
        };
        match self.seen.entry((kind, name.into_boxed_str())) {
            std::collections::hash_map::Entry::Occupied(first) => {
                tracing::warn!(
                    "{}: {at}: {kind} {} is also {}: the first is kept, this one is skipped",
                    self.path,
                    first.key().1,
                    first.get()
                );
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(at);
                (self.each)(object);
            }
        }
        Ok(())
    }
}

/// A JSON manifest's top-level object: its `kind`, and its `items` (a
/// `List`'s) unparsed.
#[derive(serde::Deserialize)]
struct ListHead<'a> {
    kind: Option<String>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a serde_json::value::RawValue>>,
}

/// A manifest whose text is not JSON, naming what is wrong.
fn invalid_json(path: &str, what: impl std::fmt::Display) -> Error {
    manifest_error(path, 0, None, format!("invalid JSON: {what}"))
}

/// Decodes the documents of a JSON manifest (an object, a `List`, or an
/// array of objects) without building a tree of values.
fn parse_json(path: &str, text: &str, config: &TranslateConfig, each: Each<'_>) -> Result<()> {
    use serde_json::value::RawValue;
    let invalid = |e: serde_json::Error| invalid_json(path, e);
    let mut checker = Checker::new(path, config, each);
    if text.trim_start().starts_with('[') {
        let documents: Vec<&RawValue> = serde_json::from_str(text).map_err(invalid)?;
        let documents: Vec<JsonBytes<'_>> = documents
            .iter()
            .map(|d| JsonBytes(d.get().as_bytes()))
            .collect();
        checker.check_all(&documents, |index| (index, None))?;
    } else {
        let head: ListHead<'_> = serde_json::from_str(text).map_err(invalid)?;
        if head.kind.as_deref() == Some("List") {
            let items = head.items.unwrap_or_default();
            let items: Vec<JsonBytes<'_>> = items
                .iter()
                .map(|d| JsonBytes(d.get().as_bytes()))
                .collect();
            checker.check_all(&items, |item| (0, Some(item)))?;
        } else {
            let doc: &RawValue = serde_json::from_str(text).map_err(invalid)?;
            checker.check(JsonBytes(doc.get().as_bytes()), 0, None)?;
        }
    }
    Ok(())
}

mod stream;

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
    yaml::parse(path, text, &mut Checker::new(path, config, each))
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
    /// listed. Returns the new revision, if anything changed.
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
    /// [`Error::Manifest`] as [`parse_str`] reports it; [`Error::Empty`]
    /// for a manifest with no Service, EndpointSlice or Node (unless
    /// allowed). Nothing of the manifest is applied then.
    pub fn load_str(&mut self, path: &str, text: &str) -> Result<Option<u64>> {
        let loaded = self.relist_all(path, |config, each| {
            parse_each(path, text, config, each).map(Some)
        })?;
        // `parse_each` always reads the whole text.
        Ok(loaded.flatten())
    }

    /// Relists every kind from what `parse` hands `each`, applied in one
    /// transaction if `parse` reads the manifest whole (`Some`), with
    /// something a proxy reads in it (unless empty input is allowed);
    /// nothing is applied on an error, or when `parse` gives up (`None`).
    /// Returns the new revision, if anything changed, or `None` when
    /// `parse` gave up.
    fn relist_all(
        &mut self,
        path: &str,
        parse: impl FnOnce(&TranslateConfig, Each<'_>) -> Result<Option<()>>,
    ) -> Result<Option<Option<u64>>> {
        let config = self.translate_config().clone();
        let allow_empty = self.allows_empty_input();
        self.begin_every_relist();
        let mut read = 0usize;
        let parsed = parse(&config, &mut |object| {
            if !matches!(object, Object::ServiceCidr(_)) {
                read += 1;
            }
            self.relisted(&object);
        });
        let parsed = match parsed {
            Ok(Some(())) if read == 0 && !allow_empty => Err(Error::Empty {
                path: path.to_owned(),
            }),
            other => other,
        };
        match parsed {
            Ok(Some(())) => Ok(Some(self.finish_relists())),
            Ok(None) => {
                self.abort_relists();
                Ok(None)
            }
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
    ///
    /// JSON (a `List`, or an array of objects) is read a chunk at a time,
    /// each object checked and translated as it comes, so that the file
    /// is never held whole (at a million endpoints, 192 MiB). YAML, and
    /// JSON that turns out to be no `List`, are read whole.
    pub async fn load_file(&mut self, path: &Path) -> Result<Option<u64>> {
        let name = path.display().to_string();
        let read_error = |source| Error::Read {
            path: name.clone(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(read_error)?;
        let mut head = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, 4096), &mut head)
            .map_err(read_error)?;
        let json = head
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{' || *b == b'[');
        if json
            && let Some(loaded) = self.load_json_stream(
                &name,
                std::io::Read::chain(std::io::Cursor::new(head), file),
            )?
        {
            return Ok(loaded);
        }
        let (name, text) = read_text(path).await?;
        self.load_str(&name, &text)
    }

    /// Loads a JSON manifest from `reader` as [`load_file`](Self::load_file)
    /// does; `None` (nothing applied) when it is an object with `items`
    /// that is no `List`: the caller reads it whole.
    fn load_json_stream(
        &mut self,
        path: &str,
        reader: impl std::io::Read,
    ) -> Result<Option<Option<u64>>> {
        let mut splitter = stream::Splitter::new(reader);
        let failure = |f: stream::Failure| match f {
            stream::Failure::Read(source) => Error::Read {
                path: path.to_owned(),
                source,
            },
            stream::Failure::Text(message) => invalid_json(path, message),
        };
        self.relist_all(path, |config, each| {
            let mut checker = Checker::new(path, config, &mut *each);
            let mut index = 0;
            while splitter.advance().map_err(failure)? {
                let docs: Vec<JsonBytes<'_>> = splitter.items().map(JsonBytes).collect();
                let (array, base) = (splitter.shape() == stream::Shape::Array, index);
                checker.check_all(&docs, |i| match array {
                    true => (base + i, None),
                    false => (0, Some(base + i)),
                })?;
                index += docs.len();
            }
            drop(checker);
            let (shape, envelope) = splitter.finish().map_err(failure)?;
            match shape {
                stream::Shape::Array => {}
                stream::Shape::Items => {
                    let head: ListHead<'_> =
                        serde_json::from_str(&envelope).map_err(|e| invalid_json(path, e))?;
                    if head.kind.as_deref() != Some("List") {
                        return Ok(None);
                    }
                }
                // One object, whole in the envelope.
                stream::Shape::Object => parse_json(path, &envelope, config, each)?,
            }
            Ok(Some(()))
        })
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

/// How long a changed file's size, modification time and inode must stay
/// the same before [`watch_changes`] reads it: a writer that truncates
/// the file and writes it again (`>` in a shell) is done by then.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Polls `path` every `period` and reloads it into `ingest` when its
/// modification time differs from `seen` (the time of the last load),
/// once it is whole: unchanged over [`SETTLE`]. A file that does not
/// parse, or holds nothing the proxy reads, is not applied: a warning
/// names the file and the error, the previous state is kept, and the file
/// is read again when it changes again. Never returns.
pub async fn watch_changes(
    path: &Path,
    ingest: &mut Ingest,
    period: Duration,
    mut seen: Option<SystemTime>,
) {
    loop {
        tokio::time::sleep(period).await;
        let mut now = stamp(path).await;
        if now.map(|s| s.modified) == seen {
            continue;
        }
        // Whole once it stops changing.
        loop {
            tokio::time::sleep(SETTLE).await;
            let again = stamp(path).await;
            if again == now {
                break;
            }
            tracing::debug!(path = %path.display(), "manifest still being written");
            now = again;
        }
        seen = now.map(|s| s.modified);
        match ingest.load_file(path).await {
            Ok(revision) => {
                tracing::info!(path = %path.display(), ?revision, "manifest reloaded");
            }
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                "manifest not applied; keeping the previous state until it changes again"
            ),
        }
    }
}

/// What tells a file's contents changed: its modification time, size and
/// inode (a rename into place changes the inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: SystemTime,
    len: u64,
    inode: u64,
}

async fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = tokio::fs::metadata(path).await.ok()?;
    Some(Stamp {
        modified: meta.modified().ok()?,
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// The modification time of `path`, if it can be read.
pub async fn modified(path: &Path) -> Option<SystemTime> {
    tokio::fs::metadata(path).await.ok()?.modified().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(objects: &[Object]) -> Vec<(String, String)> {
        objects
            .iter()
            .filter_map(|o| match o {
                Object::Service(s) => Some((
                    s.metadata.name.clone().unwrap_or_default(),
                    s.spec
                        .as_ref()
                        .and_then(|s| s.cluster_ip.clone())
                        .unwrap_or_default(),
                )),
                _ => None,
            })
            .collect()
    }

    const SUSPICIOUS: &str = "\
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}
---
kind: Service
metadata: {namespace: a, name: zero}
spec: {clusterIP: 10.96.0.2, ports: [{port: 80}, {port: 0}]}
---
kind: Service
metadata: {namespace: a, name: sticky}
spec:
  clusterIP: 10.96.0.3
  ports: [{port: 80}]
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}
---
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.9, ports: [{port: 80}]}
";

    /// What the API server refuses is skipped, the rest of the file
    /// kept; of two objects of one name, the first.
    #[test]
    fn refused_objects_and_second_names_are_skipped_not_the_file() {
        let objects = parse_str("suspicious.yaml", SUSPICIOUS).expect("the file is read");
        assert_eq!(
            services(&objects),
            [("web".to_owned(), "10.96.0.1".to_owned())]
        );
        // The same in a List, in JSON.
        let json = serde_json::json!({"kind": "List", "items": [
            {"kind": "Service", "metadata": {"namespace": "a", "name": "web"},
             "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}},
            {"kind": "Service", "metadata": {"namespace": "a", "name": "web"},
             "spec": {"clusterIP": "10.96.0.9", "ports": [{"port": 80}]}},
            {"kind": "Service", "metadata": {"namespace": "b", "name": "web"},
             "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 0}]}},
        ]});
        let objects = parse_str("list.json", &json.to_string()).expect("read");
        assert_eq!(
            services(&objects),
            [("web".to_owned(), "10.96.0.1".to_owned())]
        );
    }

    /// A long List is decoded on several threads: its objects still come
    /// in the file's order, the first of two names wins across runs, and
    /// an error names its own item.
    #[test]
    fn a_long_list_decoded_on_every_core_keeps_its_order_and_positions() {
        let service = |name: usize, ip: usize, port: i64| {
            serde_json::json!({"kind": "Service", "metadata": {"namespace": "a", "name": format!("s{name}")},
             "spec": {"clusterIP": format!("10.96.{}.{}", ip / 250, ip % 250), "ports": [{"port": port}]}})
        };
        let mut items: Vec<_> = (0..2000).map(|i| service(i, i, 80)).collect();
        // A second `s5`, far from the first (another thread's run).
        items.push(service(5, 1999, 80));
        let json = serde_json::json!({"kind": "List", "items": items});
        let objects = parse_str("long.json", &json.to_string()).expect("read");
        let want: Vec<_> = (0..2000)
            .map(|i| (format!("s{i}"), format!("10.96.{}.{}", i / 250, i % 250)))
            .collect();
        assert_eq!(services(&objects), want);

        items[1700] = serde_json::json!({"kind": "Service", "metadata": {"namespace": "a", "name": "bad"},
             "spec": {"ports": [{"port": "eighty"}]}});
        items[1900] = serde_json::json!({"kind": "Service"});
        let json = serde_json::json!({"kind": "List", "items": items});
        let err = parse_str("long.json", &json.to_string()).expect_err("a bad item");
        assert!(
            err.to_string().starts_with(
                "long.json: document 0 (List item 1700): Service a/bad: spec.ports[0].port: "
            ),
            "{err}"
        );
    }

    #[test]
    fn positions_name_the_document_and_the_list_item() {
        let at = Position {
            document: 3,
            item: None,
        };
        assert_eq!(at.to_string(), "document 3");
        let at = Position {
            document: 0,
            item: Some(7),
        };
        assert_eq!(at.to_string(), "document 0 (List item 7)");
    }
}
