//! Elements as a transaction keeps them: flat, one allocation per run of
//! elements instead of two or three per element. A full sync at 10k
//! Services holds ~100k elements; kept as [`Element`]s they take ~14 MB,
//! flat ~3 MB (8 bytes an element beside its key and data).

use super::expr::{Data, NfVerdict};
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

/// What an element maps to, borrowed: see [`ElementList::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataRef<'a> {
    /// A value (a map's data: an address and port, say).
    Value(&'a [u8]),
    /// A verdict without a chain.
    Accept,
    /// `drop`.
    Drop,
    /// `goto` a chain.
    Goto(&'a str),
    /// `jump` to a chain.
    Jump(&'a str),
}

/// Elements for [`Transaction::add_element_list`](super::Transaction::add_element_list),
/// kept flat as they are pushed: nothing is allocated per element (a
/// million elements as [`Element`]s were two million allocations on the
/// way to the kernel).
#[derive(Clone, Debug, Default)]
pub struct ElementList(pub(crate) Elements);

impl ElementList {
    /// An empty list with room for `n` elements.
    pub fn with_capacity(n: usize) -> Self {
        Self(Elements {
            bytes: Vec::with_capacity(n * 16),
            items: Vec::with_capacity(n),
            ..Elements::default()
        })
    }

    /// Adds an element: its key, what it maps to (in a map), and its
    /// comment (fitted as [`Element::with_comment`] fits it).
    pub fn push(&mut self, key: &[u8], data: Option<DataRef<'_>>, comment: Option<&str>) {
        let (kind, bytes) = match data {
            None => (Kind::None, &[][..]),
            Some(DataRef::Value(v)) => (Kind::Value, v),
            Some(DataRef::Accept) => (Kind::Accept, &[][..]),
            Some(DataRef::Drop) => (Kind::Drop, &[][..]),
            Some(DataRef::Goto(chain)) => (Kind::Goto, chain.as_bytes()),
            Some(DataRef::Jump(chain)) => (Kind::Jump, chain.as_bytes()),
        };
        let fitted;
        let comment = match comment {
            Some(c) if super::object::comment_fits(c) => Some(c),
            Some(c) => {
                fitted = super::object::fit_comment(c.to_owned());
                Some(fitted.as_str())
            }
            None => None,
        };
        self.0.push(key, kind, bytes, comment, None, false);
    }

    /// How many elements it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }
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
                    NfVerdict::Accept => Kind::Accept,
                    NfVerdict::Drop => Kind::Drop,
                    NfVerdict::Continue => Kind::Continue,
                    NfVerdict::Return => Kind::Return,
                    NfVerdict::Jump(_) => Kind::Jump,
                    NfVerdict::Goto(_) => Kind::Goto,
                },
            };
            out.push(
                &e.key,
                kind,
                data,
                e.comment.as_deref(),
                e.timeout_ms,
                e.interval_end,
            );
        }
        out
    }

    /// Appends one element.
    fn push(
        &mut self,
        key: &[u8],
        kind: Kind,
        data: &[u8],
        comment: Option<&str>,
        timeout_ms: Option<u64>,
        interval_end: bool,
    ) {
        let index = u32::try_from(self.items.len()).unwrap_or(u32::MAX);
        if let Some(ms) = timeout_ms {
            self.timeouts.push((index, ms));
        }
        if let Some(comment) = comment {
            let start = u32::try_from(self.text.len()).unwrap_or(u32::MAX);
            let len = u8::try_from(comment.len()).unwrap_or(u8::MAX);
            self.text
                .extend_from_slice(&comment.as_bytes()[..usize::from(len)]);
            self.comments.push((index, start, len));
        }
        self.items.push(Item {
            start: u32::try_from(self.bytes.len()).unwrap_or(u32::MAX),
            key_len: u8::try_from(key.len()).unwrap_or(u8::MAX),
            data_len: u8::try_from(data.len()).unwrap_or(u8::MAX),
            kind,
            interval_end,
        });
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(data);
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
            Kind::Accept => Some(Data::Verdict(NfVerdict::Accept)),
            Kind::Drop => Some(Data::Verdict(NfVerdict::Drop)),
            Kind::Continue => Some(Data::Verdict(NfVerdict::Continue)),
            Kind::Return => Some(Data::Verdict(NfVerdict::Return)),
            Kind::Jump => Some(Data::Verdict(NfVerdict::Jump(chain()))),
            Kind::Goto => Some(Data::Verdict(NfVerdict::Goto(chain()))),
        };
        Some(Element {
            key,
            interval_end: it.interval_end,
            data,
            timeout_ms: self.timeout(i),
            comment: self.comment(i).map(str::to_owned),
        })
    }

    /// Elements `range`, rebuilt.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Vec<Element> {
        range.filter_map(|i| self.get(i)).collect()
    }
}

/// Attribute numbers of an element list (`linux/netfilter/nf_tables.h`).
pub(super) mod nla {
    /// `NLA_F_NESTED`.
    pub(in super::super) const NESTED: u16 = 0x8000;
    /// `NFTA_LIST_ELEM`.
    pub(super) const LIST_ELEM: u16 = 1;
    /// `NFTA_SET_ELEM_KEY`.
    pub(super) const KEY: u16 = 1;
    /// `NFTA_SET_ELEM_DATA`.
    pub(super) const DATA: u16 = 2;
    /// `NFTA_SET_ELEM_FLAGS`.
    pub(super) const FLAGS: u16 = 3;
    /// `NFTA_SET_ELEM_TIMEOUT`.
    pub(super) const TIMEOUT: u16 = 4;
    /// `NFTA_SET_ELEM_USERDATA`.
    pub(super) const USERDATA: u16 = 6;
    /// `NFTA_DATA_VALUE`.
    pub(super) const VALUE: u16 = 1;
    /// `NFTA_DATA_VERDICT`.
    pub(super) const VERDICT: u16 = 2;
    /// `NFTA_VERDICT_CODE`.
    pub(super) const CODE: u16 = 1;
    /// `NFTA_VERDICT_CHAIN`.
    pub(super) const CHAIN: u16 = 2;
}

/// An attribute of `payload` bytes, its header and padding counted.
const fn attr(payload: usize) -> usize {
    (4 + payload).next_multiple_of(4)
}

/// Writes an attribute header whose length is patched by [`close`].
pub(super) fn open(out: &mut Vec<u8>, kind: u16) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&kind.to_ne_bytes());
    at
}

/// Sets the length of the attribute opened at `at`, and pads it.
pub(super) fn close(out: &mut Vec<u8>, at: usize) {
    let len = u16::try_from(out.len() - at).unwrap_or(u16::MAX);
    out[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Writes a whole attribute.
fn put(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let at = open(out, kind);
    out.extend_from_slice(payload);
    close(out, at);
}

impl Elements {
    /// The bytes element `i` takes in an element list (with its data, its
    /// timeout and comment when `with_data`: an addition).
    pub(crate) fn encoded_len(&self, i: usize, with_data: bool) -> usize {
        let Some(it) = self.items.get(i) else {
            return 0;
        };
        let mut len = attr(0) + attr(attr(usize::from(it.key_len)));
        if it.interval_end {
            len += attr(4);
        }
        if with_data {
            let data = usize::from(it.data_len);
            len += match it.kind {
                Kind::None => 0,
                Kind::Value => attr(attr(data)),
                Kind::Jump | Kind::Goto => attr(attr(attr(4) + attr(data + 1))),
                _ => attr(attr(attr(4))),
            };
            if self.timeout(i).is_some() {
                len += attr(8);
            }
            if let Some(comment) = self.comment(i) {
                len += attr(comment.len() + 3);
            }
        }
        len
    }

    /// Appends elements `range` as the entries of an element list
    /// (`NFTA_SET_ELEM_LIST_ELEMENTS`' payload), straight from the flat
    /// bytes: no element is rebuilt on the way.
    pub(crate) fn encode(&self, range: std::ops::Range<usize>, with_data: bool, out: &mut Vec<u8>) {
        for i in range {
            let Some(it) = self.items.get(i) else {
                continue;
            };
            let start = usize::try_from(it.start).unwrap_or(usize::MAX);
            let key_end = start + usize::from(it.key_len);
            let data_end = key_end + usize::from(it.data_len);
            let (Some(key), Some(data)) = (
                self.bytes.get(start..key_end),
                self.bytes.get(key_end..data_end),
            ) else {
                continue;
            };
            let elem = open(out, nla::LIST_ELEM | nla::NESTED);
            let at = open(out, nla::KEY | nla::NESTED);
            put(out, nla::VALUE, key);
            close(out, at);
            if it.interval_end {
                // NFT_SET_ELEM_INTERVAL_END, big-endian.
                put(out, nla::FLAGS, &1u32.to_be_bytes());
            }
            if with_data {
                let code: Option<i32> = match it.kind {
                    Kind::None | Kind::Value => None,
                    // NF_ACCEPT, NF_DROP, NFT_CONTINUE, NFT_RETURN,
                    // NFT_JUMP, NFT_GOTO.
                    Kind::Accept => Some(1),
                    Kind::Drop => Some(0),
                    Kind::Continue => Some(-1),
                    Kind::Return => Some(-5),
                    Kind::Jump => Some(-3),
                    Kind::Goto => Some(-4),
                };
                match code {
                    None if it.kind == Kind::Value => {
                        let at = open(out, nla::DATA | nla::NESTED);
                        put(out, nla::VALUE, data);
                        close(out, at);
                    }
                    None => {}
                    Some(code) => {
                        let at = open(out, nla::DATA | nla::NESTED);
                        let verdict = open(out, nla::VERDICT | nla::NESTED);
                        put(out, nla::CODE, &code.to_be_bytes());
                        if matches!(it.kind, Kind::Jump | Kind::Goto) {
                            let chain = open(out, nla::CHAIN);
                            out.extend_from_slice(data);
                            out.push(0);
                            close(out, chain);
                        }
                        close(out, verdict);
                        close(out, at);
                    }
                }
                if let Some(ms) = self.timeout(i) {
                    put(out, nla::TIMEOUT, &ms.to_be_bytes());
                }
                if let Some(comment) = self.comment(i) {
                    let at = open(out, nla::USERDATA);
                    // nft's user data: a TLV of type 0 (a comment).
                    out.push(0);
                    out.push(u8::try_from(comment.len() + 1).unwrap_or(u8::MAX));
                    out.extend_from_slice(comment.as_bytes());
                    out.push(0);
                    close(out, at);
                }
            }
            close(out, elem);
        }
    }

    /// Element `i`'s own timeout, in ms.
    fn timeout(&self, i: usize) -> Option<u64> {
        if self.timeouts.is_empty() {
            return None;
        }
        let index = u32::try_from(i).ok()?;
        self.timeouts
            .binary_search_by_key(&index, |(at, _)| *at)
            .ok()
            .map(|at| self.timeouts[at].1)
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
            Element::map(vec![3; 4], Data::Verdict(NfVerdict::Goto("svc-c3".into()))),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Drop)).with_comment("ns/a:http/tcp"),
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

    #[test]
    fn a_list_pushed_flat_is_the_elements_it_names() {
        let long = "x".repeat(200);
        let want = vec![
            Element::key(vec![10, 0, 0, 1]),
            Element::map(vec![1; 12], Data::Value(vec![2; 8])),
            Element::map(vec![3; 4], Data::Verdict(NfVerdict::Goto("svc-c3".into()))),
            Element::map(vec![3; 4], Data::Verdict(NfVerdict::Jump("j".into()))),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Drop)).with_comment("ns/a:http/tcp"),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Accept)).with_comment(long.clone()),
            Element::key(vec![5; 4]).with_comment("a \"quoted\" one"),
        ];
        let mut list = ElementList::with_capacity(2);
        list.push(&[10, 0, 0, 1], None, None);
        list.push(&[1; 12], Some(DataRef::Value(&[2; 8])), None);
        list.push(&[3; 4], Some(DataRef::Goto("svc-c3")), None);
        list.push(&[3; 4], Some(DataRef::Jump("j")), None);
        list.push(&[4; 4], Some(DataRef::Drop), Some("ns/a:http/tcp"));
        list.push(&[4; 4], Some(DataRef::Accept), Some(&long));
        list.push(&[5; 4], None, Some("a \"quoted\" one"));
        assert_eq!(list.len(), want.len());
        assert_eq!(list.0.slice(0..want.len()), want);
    }
}
