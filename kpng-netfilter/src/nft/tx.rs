//! Transactions: changes sent as one netlink batch, which the kernel
//! commits whole or not at all.

use netlink_packet_core::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST, NetlinkMessage};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, ExpressionAttribute, Hook as NlHook, HookNumber, InetHookNumber,
    NfTablesMessage, RuleAttribute, RuleMessage, SetAttribute, SetDescription, SetElementList,
    SetElementMessage, SetFlags, SetMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};

use super::elements::{self as attr, ElementList, Elements};
use super::object::{
    Chain, ChainHook, Element, MapTo, Rule, Set, Table, TableFamily, comment_userdata,
};

/// `NFNL_SUBSYS_NFTABLES`: the batch's resource id.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFT_DATA_VERDICT`: a verdict map's data type.
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;
/// The most bytes of elements per message: a message's element list is one
/// attribute, whose length field is 16 bits.
const ELEMENT_BYTES_PER_MESSAGE: usize = 32 * 1024;

/// The elements of each message: consecutive runs of at most
/// [`ELEMENT_BYTES_PER_MESSAGE`] encoded bytes (and at least one element).
fn element_chunks(elements: &Elements) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for i in 0..elements.len() {
        // Key, data and the attribute headers around them (a verdict's
        // nest: 16 more).
        let (key, data) = elements.size(i);
        let n = 64 + key + data;
        if i > start && bytes + n > ELEMENT_BYTES_PER_MESSAGE {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += n;
    }
    if start < elements.len() {
        out.push(start..elements.len());
    }
    out
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    AddTable(Table),
    DeleteTable(Table),
    AddChain(Table, Chain),
    DeleteChain(Table, String),
    FlushChain(Table, String),
    AddSet(Table, Set),
    DeleteSet(Table, String),
    FlushSet(Table, String),
    AddElements(Table, String, Elements),
    DeleteElements(Table, String, Elements),
    AddRule(Table, Rule),
    DeleteRule(Table, String, u64),
}

/// Changes to nf_tables, applied as one batch: the kernel applies all of
/// them or, on any error, none (the ruleset stays as it was).
///
/// Operations run in the order they were added: create a chain before a
/// rule that jumps to it, a set before its elements.
#[derive(Clone, Debug, Default)]
pub struct Transaction {
    /// Boxed: the list holds a pointer an op, and each op's memory goes
    /// as soon as it is encoded ([`into_encoded`](Self::into_encoded)).
    #[expect(
        clippy::vec_box,
        reason = "encoding frees each op's memory as it goes, not the list's"
    )]
    pub(crate) ops: Vec<Box<Op>>,
    /// Sets the transaction uses but does not declare, for printing.
    pub(crate) described: Vec<(Table, Set)>,
}

/// A batch in wire form, and what each of its messages does (for errors).
pub(crate) struct Encoded {
    pub(crate) bytes: Chunks,
    /// Per message, in order from the first sequence number: what it does.
    pub(crate) labels: Vec<String>,
    /// The sequence number of the batch's begin message; messages follow.
    pub(crate) first_seq: u32,
}

/// A batch's bytes in pieces of about [`Chunks::SIZE`], each holding
/// whole messages: growing one buffer by doubling held the old and the
/// new copy of a large batch at once (hundreds of MiB at 100k Services);
/// the pieces go to the kernel in one `sendmsg`, as one batch.
#[derive(Debug, Default)]
pub(crate) struct Chunks(Vec<Vec<u8>>);

impl Chunks {
    /// The size of a piece.
    const SIZE: usize = 1 << 20;

    /// Room for `len` more bytes at the end of the last piece; its
    /// buffer.
    fn room(&mut self, len: usize) -> &mut Vec<u8> {
        let fits = self
            .0
            .last()
            .is_some_and(|last| last.is_empty() || last.len() + len <= last.capacity());
        if !fits {
            self.0.push(Vec::with_capacity(Self::SIZE.max(len)));
        }
        let at = self.0.len() - 1;
        &mut self.0[at]
    }

    /// The pieces, in order.
    pub(crate) fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }

    /// The bytes in all, in one buffer (for checks and tests).
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.0.concat()
    }
}

impl Encoded {
    /// What the message of sequence number `seq` does.
    pub(crate) fn label(&self, seq: u32) -> Option<&str> {
        let i = seq.wrapping_sub(self.first_seq).checked_sub(1)?;
        self.labels.get(i as usize).map(String::as_str)
    }

    /// The sequence number of the batch's end, its last message.
    pub(crate) fn last_seq(&self) -> u32 {
        let count = u32::try_from(self.labels.len()).unwrap_or(u32::MAX);
        self.first_seq.wrapping_add(count)
    }

    /// The sequence number of the message that asks for an
    /// acknowledgement: the last one before the batch's end.
    pub(crate) fn ack_seq(&self) -> u32 {
        self.last_seq().wrapping_sub(1)
    }
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells the transaction the types of a set it changes but does not
    /// declare, so that its text (`Display`) prints that set's elements
    /// as nft does. Changes nothing in the kernel.
    pub fn describe(&mut self, table: &Table, set: &Set) -> &mut Self {
        self.described.push((table.clone(), set.clone()));
        self
    }

    /// How many changes it holds (a run of elements of one set is one).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Its changes, in order.
    pub(crate) fn ops(&self) -> impl Iterator<Item = &Op> {
        self.ops.iter().map(|op| &**op)
    }

    fn push(&mut self, op: Op) {
        self.ops.push(Box::new(op));
    }

    /// Creates `table` unless it exists.
    pub fn add_table(&mut self, table: &Table) -> &mut Self {
        self.push(Op::AddTable(table.clone()));
        self
    }

    /// Deletes `table` with everything in it. It must exist: to replace a
    /// table that may not exist, add it, delete it and add it again.
    pub fn delete_table(&mut self, table: &Table) -> &mut Self {
        self.push(Op::DeleteTable(table.clone()));
        self
    }

    /// Creates a chain unless it exists.
    pub fn add_chain(&mut self, table: &Table, chain: Chain) -> &mut Self {
        self.push(Op::AddChain(table.clone(), chain));
        self
    }

    /// Deletes an empty chain that nothing jumps to.
    pub fn delete_chain(&mut self, table: &Table, chain: &str) -> &mut Self {
        self.push(Op::DeleteChain(table.clone(), chain.to_owned()));
        self
    }

    /// Deletes every rule of a chain.
    pub fn flush_chain(&mut self, table: &Table, chain: &str) -> &mut Self {
        self.push(Op::FlushChain(table.clone(), chain.to_owned()));
        self
    }

    /// Creates a set or map unless it exists.
    pub fn add_set(&mut self, table: &Table, set: Set) -> &mut Self {
        self.push(Op::AddSet(table.clone(), set));
        self
    }

    /// Deletes a set or map that no rule uses.
    pub fn delete_set(&mut self, table: &Table, set: &str) -> &mut Self {
        self.push(Op::DeleteSet(table.clone(), set.to_owned()));
        self
    }

    /// Deletes every element of a set or map.
    pub fn flush_set(&mut self, table: &Table, set: &str) -> &mut Self {
        self.push(Op::FlushSet(table.clone(), set.to_owned()));
        self
    }

    /// Adds elements to a set or map. An element that is there already
    /// with the same value is no change; a map key that is there with
    /// another value is refused (`EEXIST`): delete it first, in the same
    /// transaction, to change its value.
    pub fn add_elements(&mut self, table: &Table, set: &str, elements: Vec<Element>) -> &mut Self {
        if !elements.is_empty() {
            self.push(Op::AddElements(
                table.clone(),
                set.to_owned(),
                Elements::new(elements),
            ));
        }
        self
    }

    /// Adds elements to a set or map, as [`add_elements`](Self::add_elements)
    /// does, from a flat [`ElementList`].
    pub fn add_element_list(
        &mut self,
        table: &Table,
        set: &str,
        elements: ElementList,
    ) -> &mut Self {
        if !elements.is_empty() {
            self.push(Op::AddElements(table.clone(), set.to_owned(), elements.0));
        }
        self
    }

    /// Deletes elements (by key) from a set or map; each must be there.
    pub fn delete_elements(
        &mut self,
        table: &Table,
        set: &str,
        elements: Vec<Element>,
    ) -> &mut Self {
        if !elements.is_empty() {
            self.push(Op::DeleteElements(
                table.clone(),
                set.to_owned(),
                Elements::new(elements),
            ));
        }
        self
    }

    /// Appends a rule to its chain.
    pub fn add_rule(&mut self, table: &Table, rule: Rule) -> &mut Self {
        self.push(Op::AddRule(table.clone(), rule));
        self
    }

    /// Deletes a rule by its handle (as read back).
    pub fn delete_rule(&mut self, table: &Table, chain: &str, handle: u64) -> &mut Self {
        self.push(Op::DeleteRule(table.clone(), chain.to_owned(), handle));
        self
    }

    /// The rules it adds, in order.
    pub fn rules(&self) -> Vec<Rule> {
        self.ops()
            .filter_map(|op| match op {
                Op::AddRule(_, rule) => Some(rule.clone()),
                _ => None,
            })
            .collect()
    }

    /// How many messages the batch holds between its begin and end.
    pub(crate) fn message_count(&self) -> usize {
        self.ops()
            .map(|op| match op {
                Op::AddElements(_, _, e) | Op::DeleteElements(_, _, e) => element_chunks(e).len(),
                _ => 1,
            })
            .sum()
    }

    /// The batch, its messages numbered from `first_seq`; only the last
    /// message asks for an acknowledgement (errors are always reported,
    /// each with the number of the message that caused it).
    pub(crate) fn encode(&self, first_seq: u32) -> Encoded {
        Self::encode_ops(self.message_count(), self.ops(), first_seq)
    }

    /// The batch, as [`encode`](Self::encode) makes it, freeing each
    /// change once it is written: at a million elements the transaction's
    /// elements and the batch's bytes are not held at once.
    pub(crate) fn into_encoded(self, first_seq: u32) -> Encoded {
        let count = self.message_count();
        Self::encode_ops(count, self.ops.into_iter(), first_seq)
    }

    fn encode_ops<O: std::borrow::Borrow<Op>>(
        count: usize,
        ops: impl Iterator<Item = O>,
        first_seq: u32,
    ) -> Encoded {
        // Each message is serialized as soon as it is built: only one
        // chunk of elements is ever held twice.
        let mut w = Writer {
            bytes: Chunks::default(),
            labels: Vec::with_capacity(count + 1),
            seq: first_seq,
            count,
        };
        push(
            &mut w.bytes,
            NetfilterProtoFamily::Unspec,
            NFNL_SUBSYS_NFTABLES,
            ControlMessage::BatchBegin.into(),
            0,
            first_seq,
        );
        let mut rule_count: std::collections::HashMap<(Table, String), usize> =
            std::collections::HashMap::new();
        for op in ops {
            match op.borrow() {
                Op::AddTable(t) => w.emit((
                    t.family,
                    NfTablesMessage::NewTable(table_message(t)),
                    NLM_F_CREATE,
                    format!("add {t}"),
                )),
                Op::DeleteTable(t) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteTable(table_message(t)),
                    0,
                    format!("delete {t}"),
                )),
                Op::AddChain(t, c) => w.emit((
                    t.family,
                    NfTablesMessage::NewChain(chain_message(t, c)),
                    NLM_F_CREATE,
                    format!("add chain {} to {t}", c.name),
                )),
                Op::DeleteChain(t, c) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteChain(ChainMessage {
                        attributes: vec![
                            ChainAttribute::Table(t.name.clone()),
                            ChainAttribute::Name(c.clone()),
                        ],
                    }),
                    0,
                    format!("delete chain {c} of {t}"),
                )),
                Op::FlushChain(t, c) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteRule(RuleMessage {
                        attributes: vec![
                            RuleAttribute::Table(t.name.clone()),
                            RuleAttribute::Chain(c.clone()),
                        ],
                    }),
                    0,
                    format!("flush chain {c} of {t}"),
                )),
                Op::AddSet(t, s) => w.emit((
                    t.family,
                    // The kernel requires an id per new set, unique within
                    // the batch.
                    NfTablesMessage::NewSet(set_message(
                        t,
                        s,
                        u32::try_from(w.labels.len() + 1).unwrap_or(u32::MAX),
                    )),
                    NLM_F_CREATE,
                    format!(
                        "add {} {} to {t}",
                        if s.map.is_some() { "map" } else { "set" },
                        s.name
                    ),
                )),
                Op::DeleteSet(t, s) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteSet(SetMessage {
                        attributes: vec![
                            SetAttribute::Table(t.name.clone()),
                            SetAttribute::Name(s.clone()),
                        ],
                    }),
                    0,
                    format!("delete set {s} of {t}"),
                )),
                Op::FlushSet(t, s) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteSetElement(SetElementMessage {
                        attributes: vec![
                            SetElementList::Table(t.name.clone()),
                            SetElementList::Set(s.clone()),
                        ],
                    }),
                    0,
                    format!("flush set {s} of {t}"),
                )),
                Op::AddElements(t, s, elements) | Op::DeleteElements(t, s, elements) => {
                    let add = matches!(op.borrow(), Op::AddElements(..));
                    for range in element_chunks(elements) {
                        let what = format!(
                            "{} elements {}..{} of set {s} of {t}",
                            if add { "add" } else { "delete" },
                            range.start,
                            range.end
                        );
                        w.emit_elements(t, s, elements, range, add, what);
                    }
                }
                Op::AddRule(t, r) => {
                    let n = rule_count.entry((t.clone(), r.chain.clone())).or_default();
                    *n += 1;
                    let exprs = r.exprs.iter().map(|e| e.to_list()).collect();
                    w.emit((
                        t.family,
                        NfTablesMessage::NewRule(RuleMessage {
                            attributes: vec![
                                RuleAttribute::Table(t.name.clone()),
                                RuleAttribute::Chain(r.chain.clone()),
                                RuleAttribute::Expressions(exprs),
                            ],
                        }),
                        NLM_F_CREATE | NLM_F_APPEND,
                        format!(
                            "add rule {} of this batch to chain {} of {t} ({})",
                            n,
                            r.chain,
                            r.exprs
                                .iter()
                                .map(|e| e.name())
                                .collect::<Vec<_>>()
                                .join(" ")
                        ),
                    ));
                }
                Op::DeleteRule(t, c, handle) => w.emit((
                    t.family,
                    NfTablesMessage::DeleteRule(RuleMessage {
                        attributes: vec![
                            RuleAttribute::Table(t.name.clone()),
                            RuleAttribute::Chain(c.clone()),
                            RuleAttribute::Handle(*handle),
                        ],
                    }),
                    0,
                    format!("delete rule handle {handle} of chain {c} of {t}"),
                )),
            }
        }

        let seq = w.seq.wrapping_add(1);
        push(
            &mut w.bytes,
            NetfilterProtoFamily::Unspec,
            NFNL_SUBSYS_NFTABLES,
            ControlMessage::BatchEnd.into(),
            0,
            seq,
        );
        w.labels.push("end the batch".to_owned());
        Encoded {
            bytes: w.bytes,
            labels: w.labels,
            first_seq,
        }
    }
}

/// A batch being serialized.
struct Writer {
    bytes: Chunks,
    /// What each message written so far does.
    labels: Vec<String>,
    /// The sequence number of the last message written.
    seq: u32,
    /// How many messages the batch holds between begin and end.
    count: usize,
}

impl Writer {
    /// Serializes one message. Errors are reported whatever the flags;
    /// the last message asks for an acknowledgement, the end of the
    /// answer.
    fn emit(
        &mut self,
        (family, message, flags, label): (TableFamily, NfTablesMessage, u16, String),
    ) {
        self.seq = self.seq.wrapping_add(1);
        let ack = if self.labels.len() + 1 == self.count {
            NLM_F_ACK
        } else {
            0
        };
        push(
            &mut self.bytes,
            proto_family(family),
            0,
            message.into(),
            flags | ack,
            self.seq,
        );
        self.labels.push(label);
    }
}

impl Writer {
    /// Serializes one message adding (or deleting) elements `range` of
    /// set `set`, written by hand from the flat elements: at a million
    /// elements, building the crate's attribute tree for each (and
    /// measuring it again at every level) was a tenth of a full sync.
    fn emit_elements(
        &mut self,
        table: &Table,
        set: &str,
        elements: &Elements,
        range: std::ops::Range<usize>,
        add: bool,
        label: String,
    ) {
        /// `NFT_MSG_NEWSETELEM`, `NFT_MSG_DELSETELEM`.
        const NEWSETELEM: u16 = 12;
        const DELSETELEM: u16 = 14;
        /// `NFTA_SET_ELEM_LIST_TABLE`, `_SET`, `_ELEMENTS`.
        const LIST_TABLE: u16 = 1;
        const LIST_SET: u16 = 2;
        const LIST_ELEMENTS: u16 = 3;
        let name = |text: &str| (4 + text.len() + 1).next_multiple_of(4);
        let list: usize = range.clone().map(|i| elements.encoded_len(i, add)).sum();
        let len = 16 + 4 + name(&table.name) + name(set) + 4 + list;
        self.seq = self.seq.wrapping_add(1);
        let ack = if self.labels.len() + 1 == self.count {
            NLM_F_ACK
        } else {
            0
        };
        let (kind, flags) = if add {
            (NEWSETELEM, NLM_F_CREATE)
        } else {
            (DELSETELEM, 0)
        };
        let out = self.bytes.room(len);
        let start = out.len();
        // struct nlmsghdr.
        out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
        out.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | kind).to_ne_bytes());
        out.extend_from_slice(&(NLM_F_REQUEST | flags | ack).to_ne_bytes());
        out.extend_from_slice(&self.seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        // struct nfgenmsg: family, NFNETLINK_V0, resource id 0.
        out.extend_from_slice(&[u8::from(proto_family(table.family)), 0, 0, 0]);
        for (kind, text) in [(LIST_TABLE, table.name.as_str()), (LIST_SET, set)] {
            let at = attr::open(out, kind);
            out.extend_from_slice(text.as_bytes());
            out.push(0);
            attr::close(out, at);
        }
        let at = attr::open(out, LIST_ELEMENTS | attr::nla::NESTED);
        elements.encode(range, add, out);
        attr::close(out, at);
        debug_assert_eq!(out.len() - start, len);
        self.labels.push(label);
    }
}

fn proto_family(family: TableFamily) -> NetfilterProtoFamily {
    match family {
        TableFamily::Ip => NetfilterProtoFamily::IPv4,
        TableFamily::Ip6 => NetfilterProtoFamily::IPv6,
        TableFamily::Inet => NetfilterProtoFamily::Inet,
    }
}

fn push(
    out: &mut Chunks,
    family: NetfilterProtoFamily,
    res_id: u16,
    inner: NetfilterMessageInner,
    flags: u16,
    seq: u32,
) {
    let mut message = NetlinkMessage::from(NetfilterMessage::new(
        NetfilterHeader::new(family, 0, res_id),
        inner,
    ));
    message.header.flags = NLM_F_REQUEST | flags;
    message.header.sequence_number = seq;
    message.finalize();
    let len = message.buffer_len();
    let out = out.room(len);
    let at = out.len();
    out.resize(at + len, 0);
    message.serialize(&mut out[at..]);
}

fn table_message(t: &Table) -> TableMessage {
    TableMessage {
        attributes: vec![TableAttribute::Name(t.name.clone())],
    }
}

fn chain_message(t: &Table, c: &Chain) -> ChainMessage {
    let mut attributes = vec![
        ChainAttribute::Table(t.name.clone()),
        ChainAttribute::Name(c.name.clone()),
    ];
    if let Some(base) = &c.base {
        let hook = match base.hook {
            ChainHook::Prerouting => InetHookNumber::PreRouting,
            ChainHook::Input => InetHookNumber::LocalIn,
            ChainHook::Forward => InetHookNumber::Forward,
            ChainHook::Output => InetHookNumber::LocalOut,
            ChainHook::Postrouting => InetHookNumber::PostRouting,
        };
        attributes.push(ChainAttribute::Hook(vec![
            NlHook::Number(HookNumber::Inet(hook)),
            // The kernel reads the priority as a signed 32-bit number.
            NlHook::Priority(u32::from_ne_bytes(base.priority.to_ne_bytes())),
        ]));
        attributes.push(ChainAttribute::Type(base.kind.name().to_owned()));
        // NF_ACCEPT.
        attributes.push(ChainAttribute::Policy(1));
    }
    if let Some(comment) = &c.comment {
        attributes.push(ChainAttribute::UserData(comment_userdata(comment)));
    }
    ChainMessage { attributes }
}

fn set_message(t: &Table, s: &Set, id: u32) -> SetMessage {
    let mut flags = SetFlags::empty();
    if s.map.is_some() {
        flags |= SetFlags::Map;
    }
    if s.interval {
        flags |= SetFlags::Interval;
    }
    if s.timeout {
        flags |= SetFlags::Timeout | SetFlags::Eval;
    }
    let mut attributes = vec![
        SetAttribute::Table(t.name.clone()),
        SetAttribute::Name(s.name.clone()),
        SetAttribute::Flags(flags),
        SetAttribute::KeyType(s.key.id),
        SetAttribute::KeyLen(s.key.len),
        SetAttribute::Id(id),
    ];
    match s.map {
        Some(MapTo::Verdict) => attributes.push(SetAttribute::DataType(NFT_DATA_VERDICT)),
        Some(MapTo::Value(data)) => {
            attributes.push(SetAttribute::DataType(data.id));
            attributes.push(SetAttribute::DataLen(data.len));
        }
        None => {}
    }
    if let Some(size) = s.size {
        attributes.push(SetAttribute::Description(vec![SetDescription::Size(size)]));
    }
    if let Some(userdata) = s.userdata() {
        attributes.push(SetAttribute::UserData(userdata));
    }
    if s.counter {
        // As nft sends one: `NFTA_SET_EXPR` holding the expression's name
        // (a counter starts at zero without data). `NFTA_SET_EXPRESSIONS`
        // would need the set flag `NFT_SET_EXPR` (EINVAL without it).
        attributes.push(SetAttribute::Expression(ExpressionAttribute::Name(
            "counter".into(),
        )));
    }
    SetMessage { attributes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{DataType, Expr};
    use netlink_packet_netfilter::nftables::{
        DataAttribute, ListAttribute, SetElementAttribute, SetElementFlags, Verdict as NlVerdict,
        VerdictAttribute,
    };

    use super::super::expr::{Data, NfVerdict};
    use super::super::object::comment_userdata;

    fn verdict_attributes(v: &NfVerdict) -> Vec<VerdictAttribute> {
        let code = match v {
            NfVerdict::Accept => NlVerdict::Other(1),
            NfVerdict::Drop => NlVerdict::Other(0),
            NfVerdict::Continue => NlVerdict::Continue,
            NfVerdict::Return => NlVerdict::Return,
            NfVerdict::Jump(_) => NlVerdict::Jump,
            NfVerdict::Goto(_) => NlVerdict::Goto,
        };
        let mut out = vec![VerdictAttribute::Code(code)];
        if let Some(chain) = v.chain() {
            out.push(VerdictAttribute::Chain(chain.to_owned()));
        }
        out
    }

    /// An element as the netlink crate builds it: the reference the
    /// hand-written lists are checked against.
    fn element(e: &Element, with_data: bool) -> ListAttribute<SetElementAttribute> {
        let mut attributes = vec![SetElementAttribute::Key(DataAttribute::Value(
            e.key.clone(),
        ))];
        if e.interval_end {
            attributes.push(SetElementAttribute::Flags(SetElementFlags::IntervalEnd));
        }
        if with_data {
            match &e.data {
                Some(Data::Value(bytes)) => {
                    attributes.push(SetElementAttribute::Data(DataAttribute::Value(
                        bytes.clone(),
                    )));
                }
                Some(Data::Verdict(v)) => {
                    attributes.push(SetElementAttribute::Data(DataAttribute::Verdict(
                        verdict_attributes(v),
                    )));
                }
                None => {}
            }
            if let Some(ms) = e.timeout_ms {
                attributes.push(SetElementAttribute::Timeout(ms));
            }
            if let Some(comment) = &e.comment {
                attributes.push(SetElementAttribute::UserData(comment_userdata(comment)));
            }
        }
        ListAttribute::Element(attributes)
    }

    #[test]
    fn a_batch_is_framed_and_its_messages_named() {
        let table = Table::new(TableFamily::Ip, "t");
        let mut tx = Transaction::new();
        tx.add_table(&table)
            .add_chain(&table, Chain::regular("c"))
            .add_set(&table, Set::verdict_map("m", DataType::INTEGER))
            .add_elements(
                &table,
                "m",
                // Chain names as long as the kernel allows: the elements
                // split by size, not by count.
                (0..300u32)
                    .map(|i| {
                        let chain = format!("{i:0>250}");
                        Element::map(
                            i.to_ne_bytes().to_vec(),
                            Data::Verdict(NfVerdict::Goto(chain)),
                        )
                    })
                    .collect(),
            )
            .add_rule(&table, Rule::new("c", vec![Expr::Counter]));
        let encoded = tx.encode(100);
        // begin, table, chain, set, three element messages, rule, end.
        assert_eq!(encoded.labels.len(), 8);
        assert_eq!(tx.message_count() + 1, encoded.labels.len());
        assert_eq!(encoded.last_seq(), 108);
        assert_eq!(encoded.label(101), Some("add table ip t"));
        assert_eq!(
            encoded.label(106),
            Some("add elements 206..300 of set m of table ip t")
        );
        assert_eq!(
            encoded.label(107),
            Some("add rule 1 of this batch to chain c of table ip t (counter)")
        );
        assert_eq!(encoded.label(100), None);
        // The first message is a batch begin for nf_tables.
        let bytes = encoded.bytes.to_vec();
        assert_eq!(&bytes[4..6], &0x10u16.to_ne_bytes());
        assert_eq!(&bytes[8..12], &100u32.to_ne_bytes());
    }
    #[test]
    fn element_lists_written_by_hand_are_the_crate_s_bytes() {
        let table = Table::new(TableFamily::Inet, "kpng");
        let all = vec![
            Element::key(vec![10, 0, 0, 1]),
            Element {
                interval_end: true,
                ..Element::key(vec![10, 0, 0, 2, 7])
            },
            Element::map(vec![1; 16], Data::Value(vec![2; 6])),
            Element::map(vec![3; 4], Data::Verdict(NfVerdict::Goto("svc-c3".into()))),
            Element::map(vec![3; 4], Data::Verdict(NfVerdict::Jump("a".into()))),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Drop)).with_comment("ns/a:http/tcp"),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Accept)),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Return)),
            Element::map(vec![4; 4], Data::Verdict(NfVerdict::Continue)),
            Element {
                timeout_ms: Some(5000),
                ..Element::key(vec![5; 13])
            }
            .with_comment("x"),
        ];
        let flat = Elements::new(all.clone());
        for add in [true, false] {
            let mut by_hand = Writer {
                bytes: Chunks::default(),
                labels: Vec::new(),
                seq: 7,
                count: 1,
            };
            by_hand.emit_elements(&table, "m", &flat, 0..all.len(), add, String::new());
            let mut by_crate = Writer {
                bytes: Chunks::default(),
                labels: Vec::new(),
                seq: 7,
                count: 1,
            };
            let message = SetElementMessage {
                attributes: vec![
                    SetElementList::Table(table.name.clone()),
                    SetElementList::Set("m".into()),
                    SetElementList::Elements(all.iter().map(|e| element(e, add)).collect()),
                ],
            };
            by_crate.emit(if add {
                (
                    table.family,
                    NfTablesMessage::NewSetElement(message),
                    NLM_F_CREATE,
                    String::new(),
                )
            } else {
                (
                    table.family,
                    NfTablesMessage::DeleteSetElement(message),
                    0,
                    String::new(),
                )
            });
            assert_eq!(
                by_hand.bytes.to_vec(),
                by_crate.bytes.to_vec(),
                "add: {add}"
            );
        }
    }
}
