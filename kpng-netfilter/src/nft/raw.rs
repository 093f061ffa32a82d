//! Element lists parsed by hand. netlink-packet-netfilter 0.4 formats a
//! whole element list into an error context for every element it parses
//! (`VecListAttribute::parse`), so a message of ~400 elements costs ~13 MB
//! of formatting: reading back 100k elements took a minute. Elements are
//! the bulk of every large table, so their lists are read here; every
//! other nf_tables message still goes through the crate. The message and
//! attribute walkers serve ctnetlink too ([`crate::conntrack`]).

use super::expr::{Data, NfVerdict};
use super::object::{Element, ElementCounter, userdata_comment};

/// `NLA_TYPE_MASK`: the type bits of an attribute header.
const TYPE_MASK: u16 = 0x3fff;

/// The attributes in `buf`: (type, payload).
pub(crate) fn attributes(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let header = buf.get(..4)?;
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        let kind = u16::from_ne_bytes([header[2], header[3]]) & TYPE_MASK;
        if len < 4 {
            return None;
        }
        let payload = buf.get(4..len)?;
        buf = buf.get(len.next_multiple_of(4)..).unwrap_or_default();
        Some((kind, payload))
    })
}

/// `NLMSG_ERROR`: an error, or (errno 0) an acknowledgement.
pub(crate) const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
pub(crate) const NLMSG_DONE: u16 = 3;

/// The (negative) errno of an `NLMSG_ERROR` answer's body; 0 for an
/// acknowledgement.
pub(crate) fn error_code(body: &[u8]) -> i32 {
    body.get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_ne_bytes)
}

/// One netlink message: its type, its sequence number, its bytes after
/// the 16-byte header, and all of it.
pub(crate) struct Message<'a> {
    pub(crate) kind: u16,
    pub(crate) seq: u32,
    pub(crate) body: &'a [u8],
    pub(crate) whole: &'a [u8],
}

/// The messages in `buf`, in order; an error names the first whose length
/// does not fit.
pub(crate) fn messages(buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, String>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = buf.get(at..)?.get(..16);
        let Some(header) = header else {
            let rest = buf.len() - at;
            at = buf.len();
            return (rest > 0).then(|| Err(format!("a truncated header of {rest} bytes")));
        };
        let word = |from: usize| {
            u32::from_ne_bytes([
                header[from],
                header[from + 1],
                header[from + 2],
                header[from + 3],
            ])
        };
        let len = word(0) as usize;
        if len < 16 || at + len > buf.len() {
            let err = format!("a message at byte {at} of length {len}");
            at = buf.len();
            return Some(Err(err));
        }
        let message = Message {
            kind: u16::from_ne_bytes([header[4], header[5]]),
            seq: word(8),
            body: &buf[at + 16..at + len],
            whole: &buf[at..at + len],
        };
        at += len.next_multiple_of(4);
        Some(Ok(message))
    })
}

fn u32_be(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

fn verdict(buf: &[u8]) -> Option<NfVerdict> {
    let (mut code, mut chain) = (None, None);
    for (kind, value) in attributes(buf) {
        match kind {
            // NFTA_VERDICT_CODE, network order.
            1 => code = u32_be(value).map(|c| c as i32),
            // NFTA_VERDICT_CHAIN.
            2 => {
                chain = Some(
                    String::from_utf8_lossy(value)
                        .trim_end_matches('\0')
                        .to_owned(),
                );
            }
            _ => {}
        }
    }
    Some(match code? {
        1 => NfVerdict::Accept,
        0 => NfVerdict::Drop,
        -1 => NfVerdict::Continue,
        -5 => NfVerdict::Return,
        -3 => NfVerdict::Jump(chain?),
        -4 => NfVerdict::Goto(chain?),
        _ => return None,
    })
}

/// `NFTA_DATA_VALUE` or `NFTA_DATA_VERDICT` inside a data nest.
fn data(buf: &[u8]) -> Option<Data> {
    attributes(buf).find_map(|(kind, value)| match kind {
        1 => Some(Data::Value(value.to_vec())),
        2 => verdict(value).map(Data::Verdict),
        _ => None,
    })
}

/// A `counter` expression's nest (`NFTA_EXPR_NAME`, `NFTA_EXPR_DATA`
/// holding `NFTA_COUNTER_BYTES` and `_PACKETS`); `None` for another
/// expression.
fn counter(buf: &[u8]) -> Option<ElementCounter> {
    let mut out = None;
    let mut is_counter = false;
    for (kind, value) in attributes(buf) {
        match kind {
            1 => is_counter = value.strip_suffix(b"\0").unwrap_or(value) == b"counter",
            2 => {
                let mut c = ElementCounter::default();
                for (kind, value) in attributes(value) {
                    let n = value
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u64::from_be_bytes);
                    match kind {
                        1 => c.bytes = n,
                        2 => c.packets = n,
                        _ => {}
                    }
                }
                out = Some(c);
            }
            _ => {}
        }
    }
    if is_counter { out } else { None }
}

/// One `NFTA_LIST_ELEM` nest.
fn element(buf: &[u8]) -> Option<Element> {
    element_counted(buf).map(|(e, _)| e)
}

/// One `NFTA_LIST_ELEM` nest, with its counter when it carries one.
fn element_counted(buf: &[u8]) -> Option<(Element, Option<ElementCounter>)> {
    let mut out = Element::key(Vec::new());
    let mut count = None;
    for (kind, value) in attributes(buf) {
        match kind {
            // NFTA_SET_ELEM_KEY: a data nest holding the value.
            1 => match data(value)? {
                Data::Value(key) => out.key = key,
                Data::Verdict(_) => return None,
            },
            // NFTA_SET_ELEM_DATA.
            2 => out.data = data(value),
            // NFTA_SET_ELEM_FLAGS: NFT_SET_ELEM_INTERVAL_END.
            3 => out.interval_end = u32_be(value).is_some_and(|f| f & 1 != 0),
            // NFTA_SET_ELEM_TIMEOUT, milliseconds, network order.
            4 => {
                out.timeout_ms = value
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes);
            }
            // NFTA_SET_ELEM_USERDATA: nft's TLVs, the comment among them.
            6 => out.comment = userdata_comment(value),
            // NFTA_SET_ELEM_EXPR: one expression.
            7 => count = count.or_else(|| counter(value)),
            // NFTA_SET_ELEM_EXPRESSIONS: NFTA_LIST_ELEM nests.
            11 => {
                count = count.or_else(|| {
                    attributes(value)
                        .filter(|(kind, _)| *kind == 1)
                        .find_map(|(_, e)| counter(e))
                });
            }
            _ => {}
        }
    }
    Some((out, count))
}

/// Hands each element of an element message's attributes (after the
/// 4-byte nfgenmsg header) to `each`, with its counter.
pub(crate) fn each_element(buf: &[u8], each: &mut impl FnMut(Element, Option<ElementCounter>)) {
    for (kind, value) in attributes(buf) {
        // NFTA_SET_ELEM_LIST_ELEMENTS: NFTA_LIST_ELEM nests.
        if kind == 3 {
            for (kind, e) in attributes(value) {
                if kind == 1
                    && let Some((element, count)) = element_counted(e)
                {
                    each(element, count);
                }
            }
        }
    }
}

/// The set name and elements of an element message's attributes (after
/// the 4-byte nfgenmsg header).
pub(crate) fn element_message(buf: &[u8]) -> (String, Option<Vec<Element>>) {
    let (mut set, mut list) = (String::new(), None);
    for (kind, value) in attributes(buf) {
        match kind {
            // NFTA_SET_ELEM_LIST_SET.
            2 => {
                set = String::from_utf8_lossy(value)
                    .trim_end_matches('\0')
                    .to_owned();
            }
            // NFTA_SET_ELEM_LIST_ELEMENTS: NFTA_LIST_ELEM nests.
            3 => {
                list = Some(
                    attributes(value)
                        .filter(|(kind, _)| *kind == 1)
                        .filter_map(|(_, e)| element(e))
                        .collect(),
                );
            }
            _ => {}
        }
    }
    (set, list)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attribute: header (length, type) and payload, padded to 4.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(4 + payload.len()).unwrap();
        let mut out = [len.to_ne_bytes(), kind.to_ne_bytes()].concat();
        out.extend_from_slice(payload);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// An element message as the kernel dumps a map with counters: the
    /// counter in `NFTA_SET_ELEM_EXPR` (a `counter` expression with its
    /// bytes and packets), or in `NFTA_SET_ELEM_EXPRESSIONS`.
    #[test]
    fn element_counters_are_read_from_either_attribute() {
        let counter = [
            nla(1, b"counter\0"),
            nla(
                2,
                &[nla(1, &300u64.to_be_bytes()), nla(2, &5u64.to_be_bytes())].concat(),
            ),
        ]
        .concat();
        let key = nla(1, &nla(1, &[10, 96, 0, 10]));
        let one = [key.clone(), nla(7, &counter)].concat();
        let two = [key.clone(), nla(11, &nla(1, &counter))].concat();
        let bare = key;
        let list = [nla(1, &one), nla(1, &two), nla(1, &bare)].concat();
        let message = [nla(2, b"pick\0"), nla(3, &list)].concat();
        let mut seen = Vec::new();
        each_element(&message, &mut |e, c| seen.push((e.key, c)));
        let want = Some(ElementCounter {
            packets: 5,
            bytes: 300,
        });
        assert_eq!(
            seen,
            vec![
                (vec![10, 96, 0, 10], want),
                (vec![10, 96, 0, 10], want),
                (vec![10, 96, 0, 10], None),
            ]
        );
        // The elements as adoption reads them: the same, no counter.
        let (set, elements) = element_message(&message);
        assert_eq!(set, "pick");
        assert_eq!(elements.map(|e| e.len()), Some(3));
    }
}
