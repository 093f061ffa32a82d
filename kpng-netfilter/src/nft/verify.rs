//! The encoder checked without a kernel: a transaction encoded as it is
//! sent, then parsed back as the kernel's answers are, must give back its
//! rules and elements. Unit tests and the `nft_netlink` fuzz target use it.

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::nftables::{NfTablesMessage, RuleAttribute};
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner};

use super::expr::Expr;
use super::object::Element;
use super::raw::{element_message, messages};
use super::socket::raw_expr;
use super::tx::{Op, Transaction};

/// What a batch carries that can be compared: rules, and element runs.
#[derive(Debug, PartialEq, Eq)]
enum Item {
    Rule(String, Vec<Expr>),
    Elements(String, bool, Vec<Element>),
}

impl Transaction {
    /// Encodes the batch as [`Socket::commit`](super::Socket::commit) sends
    /// it, parses every message back (as the kernel's answers are parsed)
    /// and compares the rules and elements with this transaction's.
    ///
    /// # Errors
    /// The first message that does not parse, or the first rule or
    /// element that comes back different, described.
    pub fn verify_encoding(&self) -> Result<(), String> {
        let encoded = self.encode(1);
        let mut got = Vec::new();
        let bytes = encoded.bytes.to_vec();
        for message in messages(&bytes) {
            let message = message?;
            // Element messages (NFT_MSG_NEWSETELEM 12, DELSETELEM 14 of
            // subsystem 10) are read by hand, as dumps are (see `raw`).
            let kind = message.kind;
            if kind == (10 << 8) | 12 || kind == (10 << 8) | 14 {
                // After the 4-byte nfgenmsg header: the attributes.
                let (set, list) = element_message(message.body.get(4..).unwrap_or_default());
                // A flush (a delete with no list) carries no elements.
                if let Some(list) = list {
                    got.push(Item::Elements(set, kind == (10 << 8) | 12, list));
                }
                continue;
            }
            let parsed = NetlinkMessage::<NetfilterMessage>::deserialize(message.whole)
                .map_err(|e| format!("a message of type {kind} does not parse: {e}"))?;
            let NetlinkPayload::InnerMessage(NetfilterMessage {
                inner: NetfilterMessageInner::NfTables(NfTablesMessage::NewRule(r)),
                ..
            }) = parsed.payload
            else {
                continue;
            };
            let (mut chain, mut exprs) = (String::new(), Vec::new());
            for a in r.attributes {
                match a {
                    RuleAttribute::Chain(c) => chain = c,
                    RuleAttribute::Expressions(list) => {
                        for raw in list.into_iter().filter_map(raw_expr) {
                            let name = raw.name.clone();
                            exprs.push(raw.decode().ok_or_else(|| {
                                format!("a {name} expression of chain {chain} does not decode")
                            })?);
                        }
                    }
                    _ => {}
                }
            }
            got.push(Item::Rule(chain, exprs));
        }
        let mut want = Vec::new();
        for op in self.ops() {
            match op {
                Op::AddRule(_, rule) => {
                    want.push(Item::Rule(rule.chain.clone(), rule.exprs.clone()))
                }
                Op::AddElements(_, set, elements) => {
                    want.push(Item::Elements(
                        set.clone(),
                        true,
                        elements.slice(0..elements.len()),
                    ));
                }
                Op::DeleteElements(_, set, elements) => {
                    // A delete names the key only.
                    let keys = elements
                        .slice(0..elements.len())
                        .into_iter()
                        .map(|e| Element {
                            data: None,
                            timeout_ms: None,
                            comment: None,
                            ..e
                        })
                        .collect();
                    want.push(Item::Elements(set.clone(), false, keys));
                }
                _ => {}
            }
        }
        // Element runs split into messages by size: join consecutive runs.
        let (got, want) = (join_runs(got), join_runs(want));
        if got.len() != want.len() {
            return Err(format!(
                "{} rules and element runs sent, {} came back",
                want.len(),
                got.len()
            ));
        }
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            if w != g {
                return Err(format!("item {i} differs: sent {w:?}, parsed {g:?}"));
            }
        }
        Ok(())
    }
}

/// Consecutive element messages of one set, as one run.
fn join_runs(items: Vec<Item>) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    for item in items {
        if let (Some(Item::Elements(last_set, last_add, last)), Item::Elements(set, add, more)) =
            (out.last_mut(), &item)
            && last_set == set
            && last_add == add
        {
            last.extend(more.iter().cloned());
            continue;
        }
        out.push(item);
    }
    out
}
