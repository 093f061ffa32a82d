//! A JSON manifest's items, split out of the text as it is read: a
//! `List`'s `items`, or a top-level array's elements. A file of a million
//! endpoints (192 MiB for the scale world's `wide`) is then never held
//! whole: the reader holds a chunk, and the items of one round.
//!
//! The splitter only finds where each item begins and ends (strings,
//! escapes and brackets); each item is parsed, and so checked, by the
//! decoder. What is outside the items (the envelope, with `[]` in their
//! place) is kept and parsed at the end: it says whether the file was a
//! `List` at all.

use std::io::Read;

/// Bytes read at a time.
const CHUNK: usize = 4 << 20;

/// Which part of the text the splitter is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// Before the items.
    Envelope,
    /// Inside the items' array.
    Items,
    /// After it.
    Tail,
}

/// What the splitter knows of the top-level object's last key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    /// Nothing that leads to the items.
    Other,
    /// The key `items` was read.
    Items,
    /// `items` and its colon: an array now is the items.
    Colon,
}

/// What the items were found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// A top-level array: each element is a document.
    Array,
    /// An object's `items` array (a `List`, if its `kind` says so).
    Items,
    /// No items: one object (or nothing at all).
    Object,
}

/// Splits items out of `reader`, a chunk at a time.
pub(super) struct Splitter<R> {
    reader: R,
    /// Bytes read at a time.
    chunk: usize,
    buf: Vec<u8>,
    /// Scanned up to here in `buf`.
    at: usize,
    /// Bytes of the file before `buf[0]`.
    offset: usize,
    eof: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    /// The depth items are at: 1 in an array, 2 in an object's `items`.
    items_depth: usize,
    part: Part,
    shape: Shape,
    key: Key,
    /// The first bytes of the string being read at depth 1 (a key).
    string: Vec<u8>,
    /// Where the current item starts in `buf`, and whether it is an
    /// object or array (ended by its bracket) or a scalar.
    item: Option<(usize, bool)>,
    /// The text outside the items, `[]` in their place.
    envelope: Vec<u8>,
    /// The items found by the last [`advance`](Self::advance), in `buf`.
    spans: Vec<std::ops::Range<usize>>,
}

impl<R: Read> Splitter<R> {
    pub(super) fn new(reader: R) -> Self {
        Self {
            reader,
            chunk: CHUNK,
            buf: Vec::new(),
            at: 0,
            offset: 0,
            eof: false,
            depth: 0,
            in_string: false,
            escape: false,
            items_depth: 0,
            part: Part::Envelope,
            shape: Shape::Object,
            key: Key::Other,
            string: Vec::new(),
            item: None,
            envelope: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// What the items are in, as far as read.
    pub(super) fn shape(&self) -> Shape {
        self.shape
    }

    /// Reads on to the next items: those whole in the next chunk
    /// ([`items`](Self::items)); `false` when the text is read to its end.
    ///
    /// # Errors
    /// The reader's error, or a message naming what is wrong with the
    /// text's structure (a bracket without its pair), and where.
    pub(super) fn advance(&mut self) -> Result<bool, Failure> {
        self.spans.clear();
        loop {
            if self.at == self.buf.len() {
                // The items found go out before the buffer moves.
                if !self.spans.is_empty() {
                    return Ok(true);
                }
                if self.eof {
                    return Ok(false);
                }
                self.fill()?;
                continue;
            }
            let b = self.buf[self.at];
            if self.in_string && !self.escape && b != b'"' && b != b'\\' {
                // Most of the text: a run of plain string bytes, skipped
                // to the next quote or backslash.
                let end = memchr::memchr2(b'"', b'\\', &self.buf[self.at..])
                    .map_or(self.buf.len(), |k| self.at + k);
                let run = &self.buf[self.at..end];
                if self.part != Part::Items {
                    self.envelope.extend_from_slice(run);
                }
                let room = 6usize.saturating_sub(self.string.len());
                self.string.extend(run.iter().take(room));
                self.at = end;
                continue;
            }
            let i = self.at;
            self.at += 1;
            if let Some((start, end)) = self.step(b, i)? {
                self.spans.push(start..end);
            }
        }
    }

    /// The items [`advance`](Self::advance) found, in order.
    pub(super) fn items(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|span| &self.buf[span.clone()])
    }

    /// Reads the next chunk, first dropping what is consumed (all but the
    /// current item).
    fn fill(&mut self) -> Result<(), Failure> {
        let keep = self.item.map_or(self.at, |(start, _)| start);
        self.buf.drain(..keep);
        self.offset += keep;
        self.at -= keep;
        if let Some((start, _)) = &mut self.item {
            *start -= keep;
        }
        // Up to a chunk more, or to the end of the text.
        let n = (&mut self.reader)
            .take(self.chunk as u64)
            .read_to_end(&mut self.buf)
            .map_err(Failure::Read)?;
        self.eof = n == 0;
        Ok(())
    }

    /// Takes byte `b` at `i`; returns an item that ends with it (its span
    /// in `buf`).
    fn step(&mut self, b: u8, i: usize) -> Result<Option<(usize, usize)>, Failure> {
        let outside = self.part != Part::Items;
        if outside {
            self.envelope.push(b);
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.part == Part::Envelope && self.depth == 1 && self.shape == Shape::Object {
                    self.key = if self.string == b"items" {
                        Key::Items
                    } else {
                        Key::Other
                    };
                }
            } else if self.string.len() <= 5 {
                self.string.push(b);
            }
            return Ok(None);
        }
        let in_items = self.part == Part::Items && self.depth == self.items_depth;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'"' => {
                self.in_string = true;
                self.string.clear();
                if in_items && self.item.is_none() {
                    self.item = Some((i, false));
                }
            }
            b'[' if self.part == Part::Envelope && self.depth == 0 => {
                self.shape = Shape::Array;
                self.items_depth = 1;
                self.depth = 1;
                self.part = Part::Items;
            }
            b'[' if self.part == Part::Envelope && self.depth == 1 && self.key == Key::Colon => {
                self.shape = Shape::Items;
                self.items_depth = 2;
                self.depth = 2;
                self.part = Part::Items;
            }
            b'{' | b'[' => {
                if in_items && self.item.is_none() {
                    self.item = Some((i, true));
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                if self.depth == 0 {
                    return Err(self.structure(i, "a closing bracket without its opening one"));
                }
                self.depth -= 1;
                if self.part == Part::Items && self.depth + 1 == self.items_depth {
                    // The items' array closes: a scalar item ends here.
                    // Its `[` is in the envelope already.
                    self.part = Part::Tail;
                    self.envelope.push(b']');
                    let ended = self.item.take().map(|(start, _)| (start, i));
                    return Ok(ended.map(|(start, end)| (start, trim_end(&self.buf, start, end))));
                }
                if self.part == Part::Items
                    && self.depth == self.items_depth
                    && let Some((start, true)) = self.item
                {
                    self.item = None;
                    return Ok(Some((start, i + 1)));
                }
            }
            b',' => {
                if self.part == Part::Envelope && self.depth == 1 {
                    self.key = Key::Other;
                }
                if in_items && let Some((start, false)) = self.item {
                    self.item = None;
                    return Ok(Some((start, trim_end(&self.buf, start, i))));
                }
            }
            b':' => {
                if self.part == Part::Envelope && self.depth == 1 && self.key == Key::Items {
                    self.key = Key::Colon;
                }
            }
            _ => {
                if in_items && self.item.is_none() {
                    self.item = Some((i, false));
                }
                if self.part == Part::Envelope && self.depth == 1 {
                    self.key = Key::Other;
                }
            }
        }
        Ok(None)
    }

    fn structure(&self, i: usize, what: &str) -> Failure {
        Failure::Text(format!("{what} at byte {}", self.offset + i))
    }

    /// Ends the text: what the items were in, and the envelope (the text
    /// outside them, `[]` in their place).
    ///
    /// # Errors
    /// A text that ends inside a string, an item or a bracket.
    pub(super) fn finish(self) -> Result<(Shape, String), Failure> {
        if self.in_string || self.depth != 0 || self.item.is_some() {
            return Err(Failure::Text(format!(
                "the text ends at byte {} inside {}",
                self.offset + self.buf.len(),
                if self.part == Part::Items {
                    "the items (is the file whole?)"
                } else {
                    "a string or a bracket (is the file whole?)"
                }
            )));
        }
        let envelope = String::from_utf8(self.envelope)
            .map_err(|e| Failure::Text(format!("not UTF-8: {e}")))?;
        Ok((self.shape, envelope))
    }
}

/// The end of a scalar item: its last byte that is not white space.
fn trim_end(buf: &[u8], start: usize, end: usize) -> usize {
    let mut end = end;
    while end > start && buf[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    end
}

/// Why the items could not be split out.
#[derive(Debug)]
pub(super) enum Failure {
    /// The file could not be read.
    Read(std::io::Error),
    /// The text is not JSON as the splitter reads it.
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `text` read 1, 3, 7 and 4096 bytes at a time: the same
    /// every time.
    fn split(text: &str) -> (Vec<String>, Shape, String) {
        struct Slow<'a>(&'a [u8], usize);
        impl Read for Slow<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(out.len()).min(self.1);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut first: Option<(Vec<String>, Shape, String)> = None;
        for chunk in [1, 3, 7, 4096] {
            let mut splitter = Splitter::new(Slow(text.as_bytes(), chunk));
            splitter.chunk = chunk;
            let mut got = Vec::new();
            while splitter.advance().expect("splits") {
                got.extend(
                    splitter
                        .items()
                        .map(|b| String::from_utf8(b.to_vec()).expect("utf-8")),
                );
            }
            let (shape, envelope) = splitter.finish().expect("whole");
            match &first {
                None => first = Some((got, shape, envelope)),
                Some(f) => assert_eq!((&got, shape, &envelope), (&f.0, f.1, &f.2), "chunk {chunk}"),
            }
        }
        first.expect("split")
    }

    #[test]
    fn a_list_s_items_come_out_in_order_and_the_envelope_keeps_the_rest() {
        let text = r#" {"apiVersion": "v1", "items": [ {"kind": "Service", "metadata": {"name": "a]}\"{"}},
            {"kind":"Node","x":[1,{"y":"items"}]} , 7, "s,t" , {} ], "kind": "List", "metadata": {"items": [1]}}"#;
        let (items, shape, envelope) = split(text);
        assert_eq!(
            items,
            [
                r#"{"kind": "Service", "metadata": {"name": "a]}\"{"}}"#,
                r#"{"kind":"Node","x":[1,{"y":"items"}]}"#,
                "7",
                r#""s,t""#,
                "{}",
            ]
        );
        assert_eq!(shape, Shape::Items);
        let head: serde_json::Value = serde_json::from_str(&envelope).expect("the envelope parses");
        assert_eq!(head["kind"], "List");
        assert_eq!(head["items"], serde_json::json!([]));
        assert_eq!(head["metadata"]["items"], serde_json::json!([1]));
    }

    #[test]
    fn an_array_s_elements_are_its_items_and_an_object_has_none() {
        let (items, shape, envelope) = split(r#"[{"a": 1}, {"b": [2]}]"#);
        assert_eq!(items, [r#"{"a": 1}"#, r#"{"b": [2]}"#]);
        assert_eq!((shape, envelope.as_str()), (Shape::Array, "[]"));
        let (items, shape, envelope) = split(r#"{"kind": "Service", "spec": {"items": [1]}}"#);
        assert!(items.is_empty());
        assert_eq!(shape, Shape::Object);
        assert_eq!(envelope, r#"{"kind": "Service", "spec": {"items": [1]}}"#);
        // A value "items" is no key.
        let (items, shape, _) = split(r#"{"kind": "items", "x": [1]}"#);
        assert!(items.is_empty());
        assert_eq!(shape, Shape::Object);
    }

    #[test]
    fn a_text_cut_short_or_unbalanced_is_named() {
        let cut = r#"{"kind": "List", "items": [{"kind": "Service", "metadata": {"na"#;
        let mut splitter = Splitter::new(cut.as_bytes());
        while splitter.advance().expect("splits") {}
        match splitter.finish() {
            Err(Failure::Text(message)) => {
                assert!(message.contains("inside the items"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let mut splitter = Splitter::new(&b"{}}"[..]);
        match splitter.advance() {
            Err(Failure::Text(message)) => assert!(message.contains("byte 2"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
