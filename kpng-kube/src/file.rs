//! The file source: Kubernetes manifests as users already have them.
//!
//! Accepted: the output of `kubectl get services,endpointslices,nodes -A -o
//! yaml` (a `kind: List`), multi-document YAML, or JSON (one object or a
//! `List`). Objects of other kinds are skipped. Every object goes through
//! the same translation as the API source.
//!
//! A file is parsed whole before anything is applied: a file that does
//! not parse (cut short, not YAML or JSON) is an error naming the file,
//! the document and, for YAML, the line and column, and leaves the store
//! as it was. An object that does not decode, or that the API server
//! would refuse (the checks of [`translate`]), is
//! skipped and named ([`Skipped`]: where it is, every wrong field and
//! why), in one pass with the others and a count, and the rest of the
//! file is applied; [`IngestConfig::on_input_report`] is told what each
//! applied read skipped ([`InputReport`]). A file with no Service,
//! EndpointSlice or Node in it (empty, only comments, only other kinds)
//! is refused ([`Error::Empty`]), unless
//! [`IngestConfig::allow_empty_input`]: loading it would delete every
//! Service; one whose every object is skipped always is
//! ([`Error::AllSkipped`]).
//!
//! [`IngestConfig::allow_empty_input`]: crate::IngestConfig::allow_empty_input
//! [`IngestConfig::on_input_report`]: crate::IngestConfig::on_input_report
//!
//! [`watch_changes`] reads a changed file only once it is whole: renamed
//! into place (inotify's `IN_MOVED_TO`), at once; rewritten in place, once
//! its size, modification time and inode are stable over [`SETTLE`], so a
//! file rewritten with `>` is not read between its truncation and its new
//! contents.
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

/// What is wrong with one object: it is skipped, the rest of the file
/// applied.
struct Problem {
    /// The object, as `Kind namespace/name`.
    object: String,
    /// Its wrong fields and why, `field: message`.
    reason: String,
}

fn translated<T>(
    result: std::result::Result<T, translate::TranslateError>,
) -> std::result::Result<T, Problem> {
    result.map_err(|e| Problem {
        reason: e.fields(),
        object: e.object,
    })
}

/// Checks one object: decodes it and runs the translation (with the API
/// server's validation), so that an object the API server would refuse,
/// or that does not decode, is named and skipped.
fn object(doc: impl Doc, config: &TranslateConfig) -> std::result::Result<Option<Object>, Problem> {
    let (kind, label) = doc.head();
    let fail = |reason: String| Problem {
        object: label.clone(),
        reason,
    };
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
        "" => return Err(fail("kind: Required value".to_owned())),
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

/// Where an object is in its manifest: the document, the item in a
/// `List`, and (YAML) the line where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    document: usize,
    item: Option<usize>,
    line: Option<u64>,
}

impl Position {
    fn new(document: usize, item: Option<usize>) -> Self {
        Self {
            document,
            item,
            line: None,
        }
    }

    fn at_line(self, line: u64) -> Self {
        Self {
            line: Some(line),
            ..self
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.item, self.line) {
            (Some(item), Some(line)) => write!(
                f,
                "document {} (List item {item}, line {line})",
                self.document
            ),
            (Some(item), None) => write!(f, "document {} (List item {item})", self.document),
            (None, Some(line)) => write!(f, "document {} (line {line})", self.document),
            (None, None) => write!(f, "document {}", self.document),
        }
    }
}

/// An object of a manifest that was skipped, the rest applied: one the
/// API server would refuse, one that does not decode, or a second object
/// of a kind and namespace/name (the API holds one).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The object, as `Kind namespace/name` (`Service t/web`).
    pub object: String,
    /// Where it is: `document 0 (List item 3, line 14)`.
    pub at: String,
    /// Its wrong fields and why, in the API server's words where it
    /// refuses them (`spec.type: Unsupported value: "LoadBalancr": …`).
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.at, self.object, self.reason)
    }
}

/// Why a manifest was read: what [`watch_changes`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadCause {
    /// Asked for (the first read, [`Ingest::load_file`]).
    Asked,
    /// The file was renamed into place (inotify's `IN_MOVED_TO` in its
    /// directory): whole at once, read at once.
    Renamed,
    /// A writer closed it (inotify's `IN_CLOSE_WRITE`), and its size,
    /// modification time and inode then stayed the same over [`SETTLE`].
    Written,
    /// Polling saw it change (no inotify, or a change inotify does not
    /// name, such as a symlink swapped), and it then settled.
    Polled,
}

/// What one read of a manifest applied and skipped, handed to
/// [`IngestConfig::on_input_report`](crate::IngestConfig::on_input_report)
/// after each read that was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputReport {
    /// The file.
    pub path: String,
    /// Why it was read.
    pub cause: ReadCause,
    /// Objects applied: Services, EndpointSlices and Nodes.
    pub applied: usize,
    /// Objects skipped, in the file's order.
    pub skipped: Vec<Skipped>,
}

impl InputReport {
    /// `3 objects skipped: Service t/lb, document 0 (List item 3, line
    /// 14): spec.type: …; …`, or `None` when nothing was skipped.
    pub fn summary(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("{}, {}: {}", s.object, s.at, s.reason))
            .collect();
        Some(format!(
            "{}: {}",
            count_skipped(self.skipped.len()),
            each.join("; ")
        ))
    }
}

/// `1 object skipped`, `3 objects skipped`.
fn count_skipped(n: usize) -> String {
    match n {
        1 => "1 object skipped".to_owned(),
        n => format!("{n} objects skipped"),
    }
}

/// Warns of each skipped object, then of their count and names, once a
/// manifest was read whole (a file refused whole warns of none: nothing
/// of it is applied).
fn warn_skipped(path: &str, skipped: &[Skipped], applied: usize) {
    if skipped.is_empty() {
        return;
    }
    for s in skipped {
        tracing::warn!("{path}: {s}; skipped");
    }
    let names: Vec<&str> = skipped.iter().map(|s| s.object.as_str()).collect();
    tracing::warn!(
        "{path}: {}, {applied} applied: {}",
        count_skipped(skipped.len()),
        names.join(", ")
    );
}

/// Checks a manifest's objects in order: one that does not decode, one
/// the API server would refuse, or a second object of the same kind and
/// namespace/name (the API holds one), is skipped and recorded
/// ([`Skipped`]), naming it and where it is; the others go to `each`.
struct Checker<'a> {
    config: &'a TranslateConfig,
    /// The first position of each object (kind, namespace, name).
    seen: std::collections::HashMap<(&'static str, Box<str>), Position>,
    each: Each<'a>,
    skipped: Vec<Skipped>,
}

impl<'a> Checker<'a> {
    fn new(config: &'a TranslateConfig, each: Each<'a>) -> Self {
        Self {
            config,
            seen: std::collections::HashMap::new(),
            each,
            skipped: Vec::new(),
        }
    }

    fn check(&mut self, doc: impl Doc, at: Position) {
        self.take(object(doc, self.config), at);
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
    ) {
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
                self.take(found, Position::new(document, item));
            }
        }
    }

    /// Takes what decoding the object at `at` gave: a bad object or a
    /// second one is recorded as skipped; the rest goes to `each`.
    fn take(&mut self, found: std::result::Result<Option<Object>, Problem>, at: Position) {
        let object = match found {
            Ok(Some(object)) => object,
            Ok(None) => return,
            Err(problem) => {
                self.skipped.push(Skipped {
                    object: problem.object,
                    at: at.to_string(),
                    reason: problem.reason,
                });
                return;
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
                self.skipped.push(Skipped {
                    object: format!("{kind} {}", first.key().1),
                    at: at.to_string(),
                    reason: format!("also {}: the first is kept", first.get()),
                });
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(at);
                (self.each)(object);
            }
        }
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
fn parse_json(path: &str, text: &str, checker: &mut Checker<'_>) -> Result<()> {
    use serde_json::value::RawValue;
    let invalid = |e: serde_json::Error| invalid_json(path, e);
    if text.trim_start().starts_with('[') {
        let documents: Vec<&RawValue> = serde_json::from_str(text).map_err(invalid)?;
        let documents: Vec<JsonBytes<'_>> = documents
            .iter()
            .map(|d| JsonBytes(d.get().as_bytes()))
            .collect();
        checker.check_all(&documents, |index| (index, None));
    } else {
        let head: ListHead<'_> = serde_json::from_str(text).map_err(invalid)?;
        if head.kind.as_deref() == Some("List") {
            let items = head.items.unwrap_or_default();
            let items: Vec<JsonBytes<'_>> = items
                .iter()
                .map(|d| JsonBytes(d.get().as_bytes()))
                .collect();
            checker.check_all(&items, |item| (0, Some(item)));
        } else {
            let doc: &RawValue = serde_json::from_str(text).map_err(invalid)?;
            checker.check(JsonBytes(doc.get().as_bytes()), Position::new(0, None));
        }
    }
    Ok(())
}

mod stream;

/// Where each checked object of a manifest goes, in order.
type Each<'a> = &'a mut dyn FnMut(Object);

/// Parses manifests from text; `path` names them in errors. An object
/// that does not decode, or that the API server would refuse, is skipped
/// with a warning naming it (see [`Skipped`]).
///
/// # Errors
/// [`Error::Manifest`] for text that does not parse (not YAML or JSON, or
/// cut short), naming the document and, for YAML, the line and column.
pub fn parse_str(path: &str, text: &str) -> Result<Vec<Object>> {
    parse_str_with(path, text, &TranslateConfig::default())
}

/// Parses manifests from text with translation settings, as
/// [`parse_str`].
///
/// # Errors
/// As [`parse_str`].
pub fn parse_str_with(path: &str, text: &str, config: &TranslateConfig) -> Result<Vec<Object>> {
    Ok(parse_reporting(path, text, config)?.0)
}

/// [`parse_str_with`], with the objects skipped.
///
/// # Errors
/// As [`parse_str`].
pub fn parse_reporting(
    path: &str,
    text: &str,
    config: &TranslateConfig,
) -> Result<(Vec<Object>, Vec<Skipped>)> {
    let mut objects = Vec::new();
    let skipped = parse_each(path, text, config, &mut |o| objects.push(o))?;
    warn_skipped(path, &skipped, objects.len());
    Ok((objects, skipped))
}

/// Checks each object of a manifest, in order, and hands it to `each`
/// (which may translate it and drop it, so no list of them is held).
/// Returns what was skipped.
fn parse_each(
    path: &str,
    text: &str,
    config: &TranslateConfig,
    each: Each<'_>,
) -> Result<Vec<Skipped>> {
    let mut checker = Checker::new(config, each);
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        parse_json(path, text, &mut checker)?;
    } else {
        yaml::parse(path, text, &mut checker)?;
    }
    Ok(checker.skipped)
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
    /// decoded objects of a JSON List were ~50 MB). An object that does
    /// not decode, or that the API server would refuse, is skipped and
    /// named ([`Skipped`]); the others are applied. `path` names the
    /// manifest in errors. Returns the new revision, if anything changed.
    ///
    /// # Errors
    /// [`Error::Manifest`] as [`parse_str`] reports it; [`Error::Empty`]
    /// for a manifest with no Service, EndpointSlice or Node (unless
    /// allowed); [`Error::AllSkipped`] when every object was skipped.
    /// Nothing of the manifest is applied then.
    pub fn load_str(&mut self, path: &str, text: &str) -> Result<Option<u64>> {
        let loaded = self.relist_all(path, ReadCause::Asked, |config, each| {
            parse_each(path, text, config, each).map(Some)
        })?;
        // `parse_each` always reads the whole text.
        Ok(loaded.flatten())
    }

    /// Relists every kind from what `parse` hands `each`, applied in one
    /// transaction if `parse` reads the manifest whole (`Some`, with what
    /// it skipped), with something a proxy reads in it (unless empty
    /// input is allowed; never when every object was skipped); nothing is
    /// applied on an error, or when `parse` gives up (`None`). Returns
    /// the new revision, if anything changed, or `None` when `parse` gave
    /// up. What was skipped is warned of, and reported, once applied.
    fn relist_all(
        &mut self,
        path: &str,
        cause: ReadCause,
        parse: impl FnOnce(&TranslateConfig, Each<'_>) -> Result<Option<Vec<Skipped>>>,
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
            // Every object skipped: applying nothing would delete every
            // Service, allowed or not.
            Ok(Some(skipped)) if read == 0 && !skipped.is_empty() => {
                let report = InputReport {
                    path: path.to_owned(),
                    cause,
                    applied: 0,
                    skipped,
                };
                Err(Error::AllSkipped {
                    path: path.to_owned(),
                    summary: report.summary().unwrap_or_default(),
                })
            }
            Ok(Some(_)) if read == 0 && !allow_empty => Err(Error::Empty {
                path: path.to_owned(),
            }),
            other => other,
        };
        match parsed {
            Ok(Some(skipped)) => {
                let revision = self.finish_relists();
                warn_skipped(path, &skipped, read);
                self.report_input(&InputReport {
                    path: path.to_owned(),
                    cause,
                    applied: read,
                    skipped,
                });
                Ok(Some(revision))
            }
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
    /// as in [`parse_str`]; [`Error::Empty`] and [`Error::AllSkipped`] as
    /// in [`load_str`](Self::load_str). Nothing is applied then.
    ///
    /// JSON (a `List`, or an array of objects) is read a chunk at a time,
    /// each object checked and translated as it comes, so that the file
    /// is never held whole (at a million endpoints, 192 MiB). YAML, and
    /// JSON that turns out to be no `List`, are read whole.
    pub async fn load_file(&mut self, path: &Path) -> Result<Option<u64>> {
        self.load_file_for(path, ReadCause::Asked).await
    }

    /// [`load_file`](Self::load_file), reported as read for `cause`.
    async fn load_file_for(&mut self, path: &Path, cause: ReadCause) -> Result<Option<u64>> {
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
                cause,
                std::io::Read::chain(std::io::Cursor::new(head), file),
            )?
        {
            return Ok(loaded);
        }
        let (name, text) = read_text(path).await?;
        let loaded = self.relist_all(&name, cause, |config, each| {
            parse_each(&name, &text, config, each).map(Some)
        })?;
        Ok(loaded.flatten())
    }

    /// Loads a JSON manifest from `reader` as [`load_file`](Self::load_file)
    /// does; `None` (nothing applied) when it is an object with `items`
    /// that is no `List`: the caller reads it whole.
    fn load_json_stream(
        &mut self,
        path: &str,
        cause: ReadCause,
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
        self.relist_all(path, cause, |config, each| {
            let mut checker = Checker::new(config, &mut *each);
            let mut index = 0;
            while splitter.advance().map_err(failure)? {
                let docs: Vec<JsonBytes<'_>> = splitter.items().map(JsonBytes).collect();
                let (array, base) = (splitter.shape() == stream::Shape::Array, index);
                checker.check_all(&docs, |i| match array {
                    true => (base + i, None),
                    false => (0, Some(base + i)),
                });
                index += docs.len();
            }
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
                stream::Shape::Object => parse_json(path, &envelope, &mut checker)?,
            }
            Ok(Some(checker.skipped))
        })
    }
}

/// Loads a manifest file into `ingest`, then (with `poll` set) follows it
/// as [`watch_changes`] does, applying only what changed. A read or parse
/// error is logged and the previous state kept; the first load's error is
/// returned.
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
/// the same before [`watch_changes`] reads it, unless it was renamed into
/// place: a writer that truncates the file and writes it again (`>` in a
/// shell) is done by then.
pub const SETTLE: Duration = Duration::from_millis(500);

/// Follows `path` and reloads it into `ingest` when it changes, once it is
/// whole:
///
/// - renamed into place (`mv new file`: inotify's `IN_MOVED_TO` for its
///   name in its directory), it is whole at once, and read at once;
/// - written in place (`>`: `IN_CLOSE_WRITE`), or seen changed by polling
///   every `period` (its modification time differs from `seen`, the time
///   of the last load, or its size or inode from the last read), it is
///   read once its size, modification time and inode stay the same over
///   [`SETTLE`] (inotify's `IN_MODIFY` comes mid-write, and is not
///   followed).
///
/// Polling goes on beside inotify (a symlink swapped, as a ConfigMap
/// volume does, renames another name), and alone where inotify is
/// unavailable (a warning says so). A file that does not parse, or holds
/// nothing the proxy reads, is not applied: a warning names the file and
/// the error, the previous state is kept, and the file is read again when
/// it changes again. Objects the API server would refuse are skipped and
/// named, the rest applied. Never returns.
pub async fn watch_changes(
    path: &Path,
    ingest: &mut Ingest,
    period: Duration,
    seen: Option<SystemTime>,
) {
    let mut events = match Renames::new(path) {
        Ok(events) => Some(events),
        Err(error) => {
            tracing::warn!(
                path = %path.display(),
                %error,
                "no inotify: the manifest is polled every {period:?}, a rename read once it settles"
            );
            None
        }
    };
    // What the last read saw: the file as it is now, if it has not changed
    // since the load `seen` dates.
    let mut last = stamp(path).await.filter(|s| Some(s.modified) == seen);
    loop {
        let woken = match events.as_mut() {
            Some(renames) => tokio::select! {
                woke = renames.next() => woke,
                () = tokio::time::sleep(period) => Ok(Wake::Tick),
            },
            None => {
                tokio::time::sleep(period).await;
                Ok(Wake::Tick)
            }
        };
        let wake = woken.unwrap_or_else(|error| {
            tracing::warn!(
                path = %path.display(),
                %error,
                "inotify failed: the manifest is polled every {period:?} from now on"
            );
            events = None;
            Wake::Tick
        });
        let mut now = stamp(path).await;
        if now == last {
            continue;
        }
        let cause = match wake {
            Wake::Renamed => {
                tracing::debug!(path = %path.display(), "read after rename");
                ReadCause::Renamed
            }
            Wake::Written | Wake::Tick => {
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
                match wake {
                    Wake::Written => ReadCause::Written,
                    _ => ReadCause::Polled,
                }
            }
        };
        last = now;
        match ingest.load_file_for(path, cause).await {
            Ok(revision) => {
                tracing::info!(path = %path.display(), ?revision, ?cause, "manifest reloaded");
            }
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                "manifest not applied; keeping the previous state until it changes again"
            ),
        }
    }
}

/// What woke [`watch_changes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// The file was renamed into place.
    Renamed,
    /// A writer of the file closed it (or inotify's queue overflowed).
    Written,
    /// The polling period passed.
    Tick,
}

/// An inotify instance as tokio polls it.
struct InotifyFd(nix::sys::inotify::Inotify);

impl std::os::fd::AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd as _;
        self.0.as_fd().as_raw_fd()
    }
}

/// inotify on a manifest's directory: renames into place and writers
/// closing, for the manifest's name.
struct Renames {
    fd: tokio::io::unix::AsyncFd<InotifyFd>,
    name: std::ffi::OsString,
}

impl Renames {
    fn new(path: &Path) -> std::io::Result<Self> {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::other("the path names no file"))?
            .to_owned();
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE,
        )?;
        Ok(Self {
            fd: register(InotifyFd(inotify))?,
            name,
        })
    }

    /// The next event for the manifest's name: a rename into place before
    /// a writer's close when both are queued. Cancel-safe: events are read
    /// only once readable, and all at once.
    async fn next(&mut self) -> std::io::Result<Wake> {
        use nix::sys::inotify::AddWatchFlags;
        loop {
            let mut ready = self.fd.readable().await?;
            let read =
                ready.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from));
            let Ok(events) = read else {
                continue; // would block: wait again
            };
            let mut wake = None;
            for event in events? {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    wake = wake.or(Some(Wake::Written));
                }
                if event.name.as_deref() != Some(self.name.as_os_str()) {
                    continue;
                }
                if event.mask.contains(AddWatchFlags::IN_MOVED_TO) {
                    wake = Some(Wake::Renamed);
                } else if event.mask.contains(AddWatchFlags::IN_CLOSE_WRITE) {
                    wake = wake.or(Some(Wake::Written));
                }
            }
            if let Some(wake) = wake {
                return Ok(wake);
            }
        }
    }
}

/// `inotify` registered with tokio's reactor, for [`Renames::next`] to
/// wait until it is readable.
#[allow(unsafe_code)]
fn register(inotify: InotifyFd) -> std::io::Result<tokio::io::unix::AsyncFd<InotifyFd>> {
    // SAFETY: `InotifyFd` owns its file descriptor (nix's `Inotify` holds
    // an `OwnedFd`), which stays open and is neither replaced nor closed
    // while the `AsyncFd` holds it: it is closed only when the `AsyncFd`,
    // deregistered first, drops it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(inotify, tokio::io::Interest::READABLE)
    }
    .map_err(|e| e.into_parts().1)
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
        items[1900] = serde_json::json!({"kind": "Service", "metadata": {"namespace": "a", "name": "lb"},
             "spec": {"type": "LoadBalancr", "clusterIP": "10.96.99.1", "ports": [{"port": 80}]}});
        let json = serde_json::json!({"kind": "List", "items": items});
        let (objects, skipped) =
            parse_reporting("long.json", &json.to_string(), &TranslateConfig::default())
                .expect("read: the bad items are skipped");
        assert_eq!(services(&objects).len(), 1998);
        let named: Vec<String> = skipped.iter().map(ToString::to_string).collect();
        assert_eq!(named.len(), 3, "{named:?}");
        assert!(
            named[0]
                .starts_with("document 0 (List item 1700): Service a/bad: spec.ports[0].port: "),
            "{named:?}"
        );
        assert_eq!(
            named[1],
            "document 0 (List item 1900): Service a/lb: spec.type: Unsupported value: \"LoadBalancr\": \
             supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
        );
        assert_eq!(
            named[2],
            "document 0 (List item 2000): Service a/s5: also document 0 (List item 5): the first is kept"
        );
    }

    #[test]
    fn positions_name_the_document_the_list_item_and_the_line() {
        assert_eq!(Position::new(3, None).to_string(), "document 3");
        assert_eq!(
            Position::new(0, Some(7)).to_string(),
            "document 0 (List item 7)"
        );
        let at = Position::new(0, Some(7)).at_line(40);
        assert_eq!(at.to_string(), "document 0 (List item 7, line 40)");
        assert_eq!(
            Position::new(2, None).at_line(9).to_string(),
            "document 2 (line 9)"
        );
    }

    /// The mistakes of one file, all named in one pass: a bad address, an
    /// unknown type, two ports of one name; the good objects are kept, and
    /// the report counts them.
    #[test]
    fn every_bad_object_is_named_in_one_pass_and_the_rest_kept() {
        let text = "\
apiVersion: v1
kind: List
items:
- kind: Service
  metadata: {namespace: t, name: good}
  spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}
- kind: EndpointSlice
  metadata: {namespace: t, name: good-1, labels: {kubernetes.io/service-name: good}}
  addressType: IPv4
  endpoints: [{addresses: [10.1.2.3]}, {addresses: [10.1.2.300]}]
- kind: Service
  metadata: {namespace: t, name: lb}
  spec: {type: LoadBalancr, clusterIP: 10.96.0.2, ports: [{port: 80}]}
- kind: Service
  metadata: {namespace: t, name: dup}
  spec: {clusterIP: 10.96.0.3, ports: [{name: http, port: 80}, {name: http, port: 81}]}
";
        let (objects, skipped) =
            parse_reporting("m.yaml", text, &TranslateConfig::default()).expect("read");
        assert_eq!(
            services(&objects),
            [("good".to_owned(), "10.96.0.1".to_owned())]
        );
        let named: Vec<String> = skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            named,
            [
                "document 0 (List item 1, line 7): EndpointSlice t/good-1: endpoints[1].addresses[0]: \
                 Invalid value: \"10.1.2.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                "document 0 (List item 2, line 11): Service t/lb: spec.type: Unsupported value: \
                 \"LoadBalancr\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
                "document 0 (List item 3, line 14): Service t/dup: spec.ports[1].name: Duplicate value: \"http\"",
            ]
        );
        let report = InputReport {
            path: "m.yaml".into(),
            cause: ReadCause::Asked,
            applied: 1,
            skipped,
        };
        let summary = report.summary().expect("skipped");
        assert!(summary.starts_with("3 objects skipped: EndpointSlice t/good-1, document 0 (List item 1, line 7): endpoints[1]"), "{summary}");
    }

    /// A file that does not parse is refused whole, naming the line and
    /// column; an object that does not decode is skipped.
    #[test]
    fn a_file_cut_short_is_refused_whole_with_its_line_and_column() {
        let cut = "kind: Service\nmetadata: {namespace: t, name: a}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}\n";
        let err = parse_str("cut.yaml", cut).expect_err("cut short");
        let text = err.to_string();
        assert!(
            text.starts_with("cut.yaml: document 0 (line 1): invalid YAML: "),
            "{text}"
        );
        assert!(text.contains("line 4") || text.contains("line 3"), "{text}");
        let err = parse_str(
            "cut.json",
            "{\"kind\": \"List\", \"items\": [{\"kind\": \"Service\"",
        )
        .expect_err("cut");
        assert!(
            err.to_string()
                .starts_with("cut.json: document 0: invalid JSON: "),
            "{err}"
        );
        let err = parse_str("prose.txt", "this is not a manifest\n").expect_err("not YAML");
        assert!(err.to_string().contains("not an object"), "{err}");
    }
}
