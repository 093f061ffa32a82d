//! YAML manifests: documents found by their markers, each parsed with
//! limits set for the file's size, `List` items decoded one at a time.
//!
//! # Limits
//!
//! serde-saphyr's default budget is meant for configuration files: 250,000
//! nodes and 1,024 documents a stream. kubectl's YAML of 2,500 Services
//! with their EndpointSlices is over it. The limits here are set instead
//! from the size of the file, which the operator chose:
//!
//! - **Nodes, events and scalar bytes scale with the file.** The whole
//!   file may produce one node per byte of it (at least serde-saphyr's
//!   250,000), two parser events a node and one scalar byte a byte (at
//!   least 64 MiB). Without aliases, YAML holds at most about one node a
//!   byte (`[a,a]` is two bytes a node; only contrived flow syntax such
//!   as `[?,?]` goes past one), and kubectl's output one per ~15 bytes, so
//!   these refuse no file kubectl or a person writes: what parsing costs
//!   is then proportional to the file. The node and scalar-byte
//!   allowances are shared by all of the file's documents (what one
//!   document used, the next cannot; a document's event limit is twice
//!   the nodes left), so many small documents amplify no more than one.
//! - **Aliases stay bounded by fixed limits** (serde-saphyr's defaults,
//!   per document): 50,000 aliases and anchors, 1,000,000 events replayed
//!   from aliases, a replay nesting of 64, and aliases at most ten times
//!   the anchors once there are 100. Replayed events also count against
//!   the file's node allowance, so an alias bomb (a "billion laughs") is
//!   refused after at most one node per byte of the file. kubectl writes
//!   no anchors; a hand-written manifest uses a few.
//! - **Documents: no count limit.** Each `---` costs its marker's four
//!   bytes and one parser set-up, so the file's size bounds them.
//! - **Nesting: 128 levels**, as serde_json allows in JSON input (and the
//!   JSON path of this crate), against deep recursion; kubectl's objects
//!   nest about a dozen.
//!
//! # Documents and lines
//!
//! A line that starts with `---` or `...` (then a space, a tab or the
//! line's end) is a document marker wherever it is: YAML forbids it
//! inside any scalar. The file is split at those lines, and each
//! document is parsed on its own, so an error names the document's index
//! in the file (0-based, empty documents counted) and the line and column
//! in the whole file.
//!
//! A document whose top level has the line `kind: List` has its `items`
//! decoded one at a time (kubectl writes `items` before `kind`): each is
//! checked, translated and dropped while the parser goes on, so no tree
//! of the whole `List` is ever held.

use std::cell::Cell;
use std::fmt;
use std::rc::Rc;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;
use serde_saphyr::{Budget, Spanned};

use super::{Checker, Position, object};
use crate::translate::TranslateConfig;
use crate::{Error, Result};

/// The node allowance's floor: serde-saphyr's default `max_nodes`.
const MIN_NODES: usize = 250_000;
/// The scalar bytes' floor: serde-saphyr's default.
const MIN_SCALAR_BYTES: usize = 64 * 1024 * 1024;
/// Nesting limit, as serde_json's recursion limit.
const MAX_DEPTH: usize = 128;

/// One document of a YAML stream, as found by its markers.
#[derive(Debug, PartialEq, Eq)]
struct Chunk<'a> {
    /// Its text: from its `---` line (or the start of the file, or the
    /// line after a `...`) to the next document's.
    text: &'a str,
    /// The 1-based line of the file where `text` starts.
    first_line: u64,
    /// The line where its content starts, for errors.
    content_line: u64,
    /// Whether a top-level line says `kind: List`.
    list: bool,
}

/// Whether `line` is the marker `marker` (`---` or `...`).
fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Whether `line` holds nothing of a document: blank, a comment, or a
/// directive (`%YAML`, `%TAG`).
fn is_void(line: &str) -> bool {
    let t = line.trim_start_matches([' ', '\t']);
    t.is_empty() || t == "\r" || t.starts_with('#') || line.starts_with('%')
}

/// Whether a top-level `line` is `kind: List` (quoted or not, maybe with
/// a comment).
fn is_list_kind(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("kind:") else {
        return false;
    };
    let value = rest.split(" #").next().unwrap_or("").trim();
    matches!(value, "List" | "\"List\"" | "'List'")
}

/// Splits a YAML stream into its documents. Text before the first marker
/// that holds only comments, blank lines or directives belongs to the
/// document after it; so does such text after a `...`.
fn documents(text: &str) -> Vec<Chunk<'_>> {
    struct Open {
        start: usize,
        first_line: u64,
        explicit: bool,
        content_line: Option<u64>,
        list: bool,
    }
    impl Open {
        fn at(start: usize, first_line: u64) -> Self {
            Open {
                start,
                first_line,
                explicit: false,
                content_line: None,
                list: false,
            }
        }
    }
    let mut chunks = Vec::new();
    let mut close = |open: &Open, end: usize| {
        if open.explicit || open.content_line.is_some() {
            chunks.push(Chunk {
                text: &text[open.start..end],
                first_line: open.first_line,
                content_line: open.content_line.unwrap_or(open.first_line),
                list: open.list,
            });
        }
    };
    // A byte-order mark is not part of the first line's text.
    let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut open = Open::at(bom, 1);
    let (mut offset, mut line_no) = (bom, 1u64);
    while offset < text.len() {
        let end = text[offset..]
            .find('\n')
            .map_or(text.len(), |i| offset + i + 1);
        let line = text[offset..end].trim_end_matches('\n');
        if is_marker(line, "---") {
            if open.explicit || open.content_line.is_some() {
                close(&open, offset);
                open = Open::at(offset, line_no);
            }
            // else: what came before was void; it stays with this document.
            open.explicit = true;
            if !is_void(&line[3..]) {
                open.content_line = Some(line_no);
            }
        } else if is_marker(line, "...") {
            close(&open, end);
            open = Open::at(end, line_no + 1);
        } else if !is_void(line) {
            open.content_line.get_or_insert(line_no);
            if is_list_kind(line) {
                open.list = true;
            }
        }
        offset = end;
        line_no += 1;
    }
    close(&open, text.len());
    chunks
}

/// What the file's documents may still use, shared by all of them.
struct Allowance {
    nodes: usize,
    scalar_bytes: usize,
}

impl Allowance {
    fn for_file(len: usize) -> Self {
        Allowance {
            nodes: len.max(MIN_NODES),
            scalar_bytes: len.max(MIN_SCALAR_BYTES),
        }
    }

    /// The budget of the next document: what is left.
    fn budget(&self) -> Budget {
        let mut budget = Budget::default();
        budget.max_nodes = self.nodes;
        // Every node has at most a start and an end event; a document
        // adds its stream and document events.
        budget.max_events = self.nodes.saturating_mul(2).saturating_add(16);
        budget.max_total_scalar_bytes = self.scalar_bytes;
        budget.max_documents = 1;
        budget.max_depth = MAX_DEPTH;
        budget
    }

    /// Takes what a document used.
    fn spend(&mut self, used: &Used) {
        self.nodes = self.nodes.saturating_sub(used.nodes.get());
        self.scalar_bytes = self.scalar_bytes.saturating_sub(used.scalar_bytes.get());
    }
}

/// What one document used, as the parser reports it.
#[derive(Default)]
struct Used {
    nodes: Cell<usize>,
    scalar_bytes: Cell<usize>,
}

/// Where in a document an error is: the document itself (its content's
/// first line is named). An object's mistakes skip the object, not the
/// file, and are named with their place by the [`Checker`].
enum Place {
    Document,
}

/// The state a document's decoding carries.
struct Ctx<'c, 'e> {
    config: &'c TranslateConfig,
    checker: &'e mut Checker<'c>,
    /// The document's index in the file.
    index: usize,
    /// Lines of the file before the document's text.
    line_offset: u64,
    /// Whether `items` are decoded as a `List`'s, one at a time.
    stream_items: bool,
    items_streamed: bool,
}

/// Parses a YAML stream's documents, checking each object and handing it
/// to `each`.
pub(super) fn parse(path: &str, text: &str, checker: &mut Checker<'_>) -> Result<()> {
    let config = checker.config;
    let mut allowance = Allowance::for_file(text.len());
    for (index, chunk) in documents(text).into_iter().enumerate() {
        let used = Rc::new(Used::default());
        let report = Rc::clone(&used);
        let options = serde_saphyr::options! {
            budget: Some(allowance.budget()),
            with_snippet: false,
            emit_comments: false,
        }
        .with_budget_report(move |r| {
            report.nodes.set(r.nodes);
            report.scalar_bytes.set(r.total_scalar_bytes);
        });
        let mut ctx = Ctx {
            config,
            checker: &mut *checker,
            index,
            line_offset: chunk.first_line - 1,
            stream_items: chunk.list,
            items_streamed: false,
        };
        let parsed =
            serde_saphyr::with_deserializer_from_str_with_options(chunk.text, options, |de| {
                Root { ctx: &mut ctx }.deserialize(de)
            });
        allowance.spend(&used);
        let fail = |place, message| Error::Manifest {
            path: path.to_owned(),
            document: match place {
                Place::Document => format!("{index} (line {})", chunk.content_line),
            },
            message,
        };
        let doc = match parsed {
            Ok(doc) => doc,
            Err(e) => {
                return Err(fail(
                    Place::Document,
                    yaml_message(&e, chunk.first_line - 1),
                ));
            }
        };
        let streamed = ctx.items_streamed;
        rest_of_document(doc, streamed, index, chunk.content_line, ctx.checker)
            .map_err(|(place, m)| fail(place, m))?;
    }
    Ok(())
}

/// What is left of a document once parsed: a whole object, or a `List`
/// whose items were streamed (only its kind is left to check) or not.
fn rest_of_document(
    doc: Json,
    streamed: bool,
    document: usize,
    line: u64,
    checker: &mut Checker<'_>,
) -> std::result::Result<(), (Place, String)> {
    let config = checker.config;
    let mut doc = match doc {
        Json::Null => return Ok(()), // an empty document
        doc @ Json::Object(_) => doc,
        _ => return Err((Place::Document, "not an object".to_owned())),
    };
    let kind = doc.get("kind").and_then(Json::as_str);
    if streamed {
        return match kind {
            Some("List") => Ok(()),
            other => Err((
                Place::Document,
                format!(
                    "items read as a List's, but the kind is {}",
                    other.unwrap_or("missing")
                ),
            )),
        };
    }
    if kind == Some("List") {
        // Taken, not copied: a List is most of its file.
        let items = match doc.as_object_mut().and_then(|o| o.remove("items")) {
            Some(Json::Array(items)) => items,
            Some(Json::Null) | None => Vec::new(),
            Some(_) => return Err((Place::Document, "List: items: not a list".to_owned())),
        };
        // Read whole: where each item starts is not known.
        for (item, doc) in items.into_iter().enumerate() {
            checker.take(object(doc, config), Position::new(document, Some(item)));
        }
    } else {
        let at = Position::new(document, None).at_line(line);
        checker.take(object(doc, config), at);
    }
    Ok(())
}

/// The parser's error, its lines those of the whole file, on one line,
/// with the limits named when one of them refused the file.
fn yaml_message(e: &serde_saphyr::Error, line_offset: u64) -> String {
    let options = serde_saphyr::render_options! {
        snippets: serde_saphyr::SnippetMode::Off,
        line_offset: line_offset,
    };
    let rendered = e.render_with_options(options);
    let mut cause = e;
    while let serde_saphyr::Error::AliasError { error, .. }
    | serde_saphyr::Error::WithSnippet { error, .. } = cause
    {
        cause = error;
    }
    let limit = matches!(
        cause,
        serde_saphyr::Error::Budget { .. }
            | serde_saphyr::Error::AliasReplayLimitExceeded { .. }
            | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }
            | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
            | serde_saphyr::Error::AliasReplayCounterOverflow { .. }
    );
    if limit {
        format!(
            "invalid YAML: {rendered} (a limit against YAML bombs: one node per byte of \
             the file, aliases replaying at most 1,000,000 events a document; \
             see docs/operator/flags-and-config.md)"
        )
    } else {
        format!("invalid YAML: {rendered}")
    }
}

/// A document's root: a mapping, whose `items` may be streamed.
struct Root<'r, 'c, 'e> {
    ctx: &'r mut Ctx<'c, 'e>,
}

impl<'de> DeserializeSeed<'de> for Root<'_, '_, '_> {
    type Value = Json;

    fn deserialize<D: de::Deserializer<'de>>(self, de: D) -> std::result::Result<Json, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Root<'_, '_, '_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object (a mapping)")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<Json, E> {
        Ok(Json::Null)
    }

    // Anything but a mapping or null is "not an object" (any non-object
    // value says so to `rest_of_document`).
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Json, E> {
        Ok(Json::Bool(false))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Json, E> {
        Ok(Json::Bool(false))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Json, E> {
        Ok(Json::Bool(false))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Json, E> {
        Ok(Json::Bool(false))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Json, E> {
        Ok(Json::Bool(false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Json, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Json::Bool(false))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Json, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" && self.ctx.stream_items {
                map.next_value_seed(Items {
                    ctx: &mut *self.ctx,
                })?;
                self.ctx.items_streamed = true;
            } else {
                let value: Json = map.next_value()?;
                fields.insert(key, value);
            }
        }
        Ok(Json::Object(fields))
    }
}

/// A `List`'s items, each checked and handed on as it is parsed.
struct Items<'r, 'c, 'e> {
    ctx: &'r mut Ctx<'c, 'e>,
}

impl<'de> DeserializeSeed<'de> for Items<'_, '_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, de: D) -> std::result::Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a List's items (a sequence)")
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let mut item = 0;
        while let Some(doc) = seq.next_element::<Spanned<Json>>()? {
            let line = doc.referenced.line() + self.ctx.line_offset;
            let at = Position::new(self.ctx.index, Some(item)).at_line(line);
            let found = object(doc.value, self.ctx.config);
            self.ctx.checker.take(found, at);
            item += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<(u64, u64, bool, &str)> {
        documents(text)
            .into_iter()
            .map(|c| (c.first_line, c.content_line, c.list, c.text))
            .collect()
    }

    #[test]
    fn documents_are_split_at_their_markers() {
        let text = "# head\n%YAML 1.2\n---\na: 1\n---\n---   # c\nb: |\n  ---x\n...\n# tail\n\nc: 2\n--- {d: 3}\n";
        assert_eq!(
            split(text),
            [
                (1, 4, false, "# head\n%YAML 1.2\n---\na: 1\n"),
                (5, 5, false, "---\n"),
                (6, 7, false, "---   # c\nb: |\n  ---x\n...\n"),
                (10, 12, false, "# tail\n\nc: 2\n"),
                (13, 13, false, "--- {d: 3}\n"),
            ]
        );
        assert_eq!(split("# only a comment\n\n"), []);
        assert_eq!(split(""), []);
        assert_eq!(
            split("apiVersion: v1\nitems: []\nkind: List\n"),
            [(1, 1, true, "apiVersion: v1\nitems: []\nkind: List\n")]
        );
        // Not markers: indented, or more than a marker.
        assert_eq!(split("a: |\n  ---\nb: ----\n").len(), 1);
        assert_eq!(split("a: 1\r\n---\r\nb: 2\r\n").len(), 2);
    }

    #[test]
    fn no_prefix_of_a_stream_panics() {
        let text = "\u{feff}# c\n%YAML 1.2\n---\napiVersion: v1\nitems:\n- kind: Node\n  metadata: {name: n\u{e9}}\nkind: List\n...\n--- |\n  x\n---\r\nkind: Service\nmetadata: {namespace: a, name: b}\nspec: {clusterIP: 10.96.0.1}\n";
        let config = TranslateConfig::default();
        for end in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut each = |_| {};
            let _ = parse(
                "x.yaml",
                &text[..end],
                &mut Checker::new(&config, &mut each),
            );
        }
    }
}
