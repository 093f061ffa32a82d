//! Elements as a transaction keeps them: flat, one allocation per run of
//! elements instead of two or three per element. A full sync at 10k
//! Services holds ~100k elements; kept as [`Element`]s they take ~14 MB,
//! flat ~3 MB (8 bytes an element beside its key and data).

use super::expr::{Data, Verdict};
use super::object::Element;

/// What an element maps to, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    None,
    Value,
    Accept,
    Drop,
    Continue,
    Return,
    Jump,
    Goto,
}

/// One element: where its key and data sit in the bytes (keys are at
/// most 64 bytes, data a value of as much or a chain name of at most 255).
#[derive(Clone, Copy, Debug)]
struct Item {
    start: u32,
    key_len: u8,
    data_len: u8,
    kind: Kind,
    interval_end: bool,
}

/// A run of elements, flat.
#[derive(Clone, Debug, Default)]
pub(crate) struct Elements {
    bytes: Vec<u8>,
    items: Vec<Item>,
    /// The elements with a timeout of their own (rare): index, ms.
    timeouts: Vec<(u32, u64)>,
    /// The elements with a comment: index, and where its text is in
    /// `text` (start, length): no allocation per comment.
    comments: Vec<(u32, u32, u8)>,
    /// The comments' text, one after the other.
    text: Vec<u8>,
}

impl Elements {
    pub(crate) fn new(elements: Vec<Element>) -> Self {
        let size = elements
            .iter()
            .map(|e| e.key.len() + data_bytes(e.data.as_ref()).len())
            .sum();
        let mut out = Self {
            bytes: Vec::with_capacity(size),
            items: Vec::with_capacity(elements.len()),
            timeouts: Vec::new(),
            comments: Vec::new(),
            text: Vec::new(),
        };
        for e in elements {
            let data = data_bytes(e.data.as_ref());
            let kind = match &e.data {
                None => Kind::None,
                Some(Data::Value(_)) => Kind::Value,
                Some(Data::Verdict(v)) => match v {
                    Verdict::Accept => Kind::Accept,
                    Verdict::Drop => Kind::Drop,
                    Verdict::Continue => Kind::Continue,
                    Verdict::Return => Kind::Return,
                    Verdict::Jump(_) => Kind::Jump,
                    Verdict::Goto(_) => Kind::Goto,
                },
            };
            let index = u32::try_from(out.items.len()).unwrap_or(u32::MAX);
            if let Some(ms) = e.timeout_ms {
                out.timeouts.push((index, ms));
            }
            if let Some(comment) = e.comment {
                let start = u32::try_from(out.text.len()).unwrap_or(u32::MAX);
                let len = u8::try_from(comment.len()).unwrap_or(u8::MAX);
                out.text
                    .extend_from_slice(&comment.as_bytes()[..usize::from(len)]);
                out.comments.push((index, start, len));
            }
            out.items.push(Item {
                start: u32::try_from(out.bytes.len()).unwrap_or(u32::MAX),
                key_len: u8::try_from(e.key.len()).unwrap_or(u8::MAX),
                data_len: u8::try_from(data.len()).unwrap_or(u8::MAX),
                kind,
                interval_end: e.interval_end,
            });
            out.bytes.extend_from_slice(&e.key);
            out.bytes.extend_from_slice(data);
        }
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The bytes of element `i`'s key and data (its comment counted with
    /// the data), for sizing messages.
    pub(crate) fn size(&self, i: usize) -> (usize, usize) {
        let comment = self.comment(i).map_or(0, |c| c.len() + 8);
        self.items.get(i).map_or((0, 0), |it| {
            (usize::from(it.key_len), usize::from(it.data_len) + comment)
        })
    }

    /// Element `i`'s comment.
    fn comment(&self, i: usize) -> Option<&str> {
        let index = u32::try_from(i).ok()?;
        let at = self
            .comments
            .binary_search_by_key(&index, |(at, ..)| *at)
            .ok()?;
        let (_, start, len) = self.comments[at];
        let start = usize::try_from(start).ok()?;
        let bytes = self.text.get(start..start + usize::from(len))?;
        std::str::from_utf8(bytes).ok()
    }

    /// Element `i`, rebuilt.
    pub(crate) fn get(&self, i: usize) -> Option<Element> {
        let it = self.items.get(i)?;
        let start = usize::try_from(it.start).ok()?;
        let key_end = start + usize::from(it.key_len);
        let data_end = key_end + usize::from(it.data_len);
        let key = self.bytes.get(start..key_end)?.to_vec();
        let data = self.bytes.get(key_end..data_end)?;
        let chain = || String::from_utf8_lossy(data).into_owned();
        let data = match it.kind {
            Kind::None => None,
            Kind::Value => Some(Data::Value(data.to_vec())),
            Kind::Accept => Some(Data::Verdict(Verdict::Accept)),
            Kind::Drop => Some(Data::Verdict(Verdict::Drop)),
            Kind::Continue => Some(Data::Verdict(Verdict::Continue)),
            Kind::Return => Some(Data::Verdict(Verdict::Return)),
            Kind::Jump => Some(Data::Verdict(Verdict::Jump(chain()))),
            Kind::Goto => Some(Data::Verdict(Verdict::Goto(chain()))),
        };
        let index = u32::try_from(i).ok()?;
        let timeout_ms = self
            .timeouts
            .binary_search_by_key(&index, |(at, _)| *at)
            .ok()
            .map(|at| self.timeouts[at].1);
        Some(Element {
            key,
            interval_end: it.interval_end,
            data,
            timeout_ms,
            comment: self.comment(i).map(str::to_owned),
        })
    }

    /// Elements `range`, rebuilt.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Vec<Element> {
        range.filter_map(|i| self.get(i)).collect()
    }
}

/// The bytes an element's data is kept as: a value's, a chain's name.
fn data_bytes(data: Option<&Data>) -> &[u8] {
    match data {
        Some(Data::Value(v)) => v,
        Some(Data::Verdict(v)) => v.chain().map_or(&[], str::as_bytes),
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_come_back_as_they_went_in() {
        let all = vec![
            Element::key(vec![10, 0, 0, 1]),
            Element {
                interval_end: true,
                ..Element::key(vec![10, 0, 0, 2])
            },
            Element::map(vec![1; 12], Data::Value(vec![2; 8])),
            Element::map(vec![3; 4], Data::Verdict(Verdict::Goto("svc-c3".into()))),
            Element::map(vec![4; 4], Data::Verdict(Verdict::Drop)).with_comment("ns/a:http/tcp"),
            Element {
                timeout_ms: Some(5000),
                ..Element::key(vec![5; 16])
            },
        ];
        let flat = Elements::new(all.clone());
        assert_eq!(flat.len(), all.len());
        assert_eq!(flat.slice(0..all.len()), all);
        assert_eq!(flat.size(2), (12, 8));
        assert_eq!(flat.get(6), None);
    }
}
