//! The netlink socket: transactions sent, tables read back.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload, Nla};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, ExpressionAttribute, Expressions, Hook as NlHook, HookNumber,
    ListAttribute, NfTablesMessage, RuleAttribute, RuleMessage, SetAttribute, SetElementList,
    SetElementMessage, SetFlags, SetMessage, TableAttribute, TableMessage,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, sockopt,
};
use nix::sys::time::TimeVal;

use super::expr::RawExpr;
use super::object::{
    ChainHook, DataType, Element, ElementCounter, MapTo, Table, TableFamily, userdata_comment,
};
use super::raw;
use super::tx::Transaction;
use crate::Error;

/// A netlink socket to nf_tables, in one network namespace.
///
/// Keep it open across transactions: closing an nf_tables socket costs
/// the kernel a grace period (~15 ms), ten times a small transaction.
/// Batches are numbered from a sequence that runs on across them, and
/// replies to older batches are skipped. After an error, open a new one:
/// a socket whose answers overflowed stays marked by the kernel.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    next_seq: u32,
    /// Where the socket was opened, for errors.
    netns: Option<String>,
}

fn open_here() -> nix::Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )?;
    socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(30, 0))?;
    // Room for many error answers (a refused batch answers each failed
    // message); best effort, without CAP_NET_ADMIN the default stays.
    let _ = socket::setsockopt(&fd, sockopt::RcvBufForce, &(4 << 20));
    cap_ack(&fd);
    Ok(fd)
}

/// `NETLINK_CAP_ACK`: error answers carry the failed message's header
/// only, not all of it (a refused element message would otherwise come
/// back whole, up to 64 KiB per error). Best effort.
#[allow(unsafe_code)]
fn cap_ack(fd: &OwnedFd) {
    const SOL_NETLINK: libc::c_int = 270;
    const NETLINK_CAP_ACK: libc::c_int = 10;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int through a valid pointer of the
    // length given; the fd is open for the call's duration.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_NETLINK,
            NETLINK_CAP_ACK,
            std::ptr::from_ref(&on).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
        );
    }
}

/// One dumped object.
type Dumped = NfTablesMessage;

impl Socket {
    /// Opens a socket in the network namespace at `netns` (a path such as
    /// `/run/netns/NAME`), or in the process's own namespace.
    ///
    /// The namespace switch happens on a short-lived thread, so no other
    /// thread of the process ever runs in the other namespace; a socket
    /// stays in the namespace it was made in.
    ///
    /// # Errors
    /// [`Error::Open`] naming the namespace.
    pub fn open(netns: Option<&Path>) -> Result<Self, Error> {
        let name = netns.map(|p| p.display().to_string());
        let failed = |source: std::io::Error| Error::Open {
            netns: name.clone(),
            source,
        };
        let fd = match netns {
            None => open_here().map_err(|e| failed(e.into()))?,
            Some(path) => crate::on_thread_in_netns(path, || open_here().map_err(Into::into))
                .map_err(failed)?,
        };
        Ok(Self {
            fd,
            next_seq: 1,
            netns: name,
        })
    }

    pub(crate) fn io(what: &'static str) -> impl Fn(Errno) -> Error {
        move |errno| Error::Io {
            what,
            source: errno.into(),
        }
    }

    pub(crate) fn take_seqs(&mut self, count: u32) -> u32 {
        let first = self.next_seq;
        self.next_seq = first.wrapping_add(count).max(1);
        first
    }

    pub(crate) fn send_all(&self, bytes: &[u8]) -> Result<(), Error> {
        self.send_pieces(&[std::io::IoSlice::new(bytes)])
    }

    /// Sends a batch in pieces, as one message (one `sendmsg`).
    pub(crate) fn send_chunks(&self, bytes: &super::tx::Chunks) -> Result<(), Error> {
        let pieces: Vec<std::io::IoSlice<'_>> = bytes.pieces().map(std::io::IoSlice::new).collect();
        self.send_pieces(&pieces)
    }

    fn send_pieces(&self, pieces: &[std::io::IoSlice<'_>]) -> Result<(), Error> {
        // A batch goes in one message: the kernel needs the socket's send
        // buffer to hold it whole.
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let want = total.saturating_add(64 * 1024);
        let size = usize::max(want, 256 * 1024);
        if socket::setsockopt(&self.fd, sockopt::SndBufForce, &size).is_err() {
            socket::setsockopt(&self.fd, sockopt::SndBuf, &size)
                .map_err(Self::io("send buffer"))?;
        }
        let sent = socket::sendmsg::<()>(
            self.fd.as_raw_fd(),
            pieces,
            &[],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| {
            Self::io(if e == Errno::EMSGSIZE {
                "send (the batch is larger than the send buffer, which only CAP_NET_ADMIN can force)"
            } else {
                "send"
            })(e)
        })?;
        if sent == total {
            Ok(())
        } else {
            Err(Error::Io {
                what: "short send",
                source: Errno::EMSGSIZE.into(),
            })
        }
    }

    /// Calls `each` with every netlink message received until `done`
    /// says stop.
    fn receive(
        &self,
        mut each: impl FnMut(NetlinkMessage<NetfilterMessage>) -> Result<bool, Error>,
    ) -> Result<(), Error> {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = socket::recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty())
                .map_err(Self::io("receive"))?;
            let mut at = 0;
            while at < n {
                let message = NetlinkMessage::<NetfilterMessage>::deserialize(&buf[at..n])
                    .map_err(|e| Error::Decode {
                        what: format!("a reply from the kernel: {e}"),
                    })?;
                let len = (message.header.length as usize).next_multiple_of(4);
                if len == 0 {
                    return Err(Error::Decode {
                        what: "a reply of length 0".into(),
                    });
                }
                at += len;
                if each(message)? {
                    return Ok(());
                }
            }
        }
    }

    /// Commits `tx` to the kernel as one batch: all of it, or, when the kernel refuses
    /// any part, none of it.
    ///
    /// # Errors
    /// [`Error::Refused`] naming the first change the kernel refused and
    /// why; [`Error::Io`] when the socket failed. After either, drop the
    /// socket and open a new one.
    ///
    /// The transaction is taken: each change is freed once it is in the
    /// batch's bytes, so a large one is not held twice.
    pub fn commit(&mut self, tx: Transaction) -> Result<(), Error> {
        if tx.is_empty() {
            return Ok(());
        }
        let encoded = tx.into_encoded(self.next_seq);
        // Begin, the messages, end: the next batch numbers on after them.
        let used = u32::try_from(encoded.labels.len() + 1).unwrap_or(u32::MAX);
        self.take_seqs(used);
        self.send_chunks(&encoded.bytes)?;
        // The kernel runs the whole batch inside the send: every answer is
        // queued by now. Read them all without waiting. (Waiting for the
        // acknowledged message alone could wait forever: on ENOMEM the
        // kernel drops its queued answers and sends one error instead.)
        let (first, last, ack) = (encoded.first_seq, encoded.last_seq(), encoded.ack_seq());
        let offset = |seq: u32| seq.wrapping_sub(first);
        let ours = |seq: u32| offset(seq) <= offset(last);
        let mut refused: Option<(u32, i32)> = None;
        let mut acknowledged = false;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match socket::recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(Errno::EAGAIN) => break,
                // More error answers than the receive buffer holds: the
                // batch was refused (any error aborts it), its details lost.
                Err(Errno::ENOBUFS) => {
                    return Err(Error::Refused {
                        what: "apply the batch (the kernel's error answers overflowed the socket; drop it)".into(),
                        source: Errno::ENOBUFS.into(),
                        netns: self.netns.clone(),
                    });
                }
                Err(errno) => return Err(Self::io("receive")(errno)),
            };
            let mut at = 0;
            while at < n {
                let message = NetlinkMessage::<NetfilterMessage>::deserialize(&buf[at..n])
                    .map_err(|e| Error::Decode {
                        what: format!("a reply from the kernel: {e}"),
                    })?;
                let len = (message.header.length as usize).next_multiple_of(4);
                if len == 0 {
                    break;
                }
                at += len;
                let seq = message.header.sequence_number;
                if !ours(seq) {
                    continue;
                }
                if let NetlinkPayload::Error(e) = &message.payload {
                    match e.code.map_or(0, |c| c.get()) {
                        0 => acknowledged |= seq == ack,
                        code if refused.is_none_or(|(s, _)| offset(seq) < offset(s)) => {
                            refused = Some((seq, code));
                        }
                        _ => {}
                    }
                }
            }
        }
        match refused {
            None if acknowledged => Ok(()),
            None => Err(Error::Io {
                what: "the kernel's acknowledgement of the batch",
                source: Errno::ENOMSG.into(),
            }),
            Some((seq, code)) => Err(Error::Refused {
                what: encoded.label(seq).unwrap_or("begin the batch").to_owned(),
                source: Errno::from_raw(-code).into(),
                netns: self.netns.clone(),
            }),
        }
    }

    /// Sends a dump request numbered `seq`.
    fn send_dump(
        &mut self,
        family: TableFamily,
        request: NfTablesMessage,
        seq: u32,
    ) -> Result<(), Error> {
        let mut message = NetlinkMessage::from(NetfilterMessage::new(
            NetfilterHeader::new(proto_family(family), 0, 0),
            NetfilterMessageInner::NfTables(request),
        ));
        message.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        message.header.sequence_number = seq;
        message.finalize();
        let mut bytes = vec![0u8; message.buffer_len()];
        message.serialize(&mut bytes);
        self.send_all(&bytes)
    }

    /// Every object a dump request returns.
    fn dump(
        &mut self,
        family: TableFamily,
        request: NfTablesMessage,
    ) -> Result<Vec<Dumped>, Error> {
        let seq = self.take_seqs(1);
        self.send_dump(family, request, seq)?;
        let mut out = Vec::new();
        let mut failed = None;
        self.receive(|message| {
            if message.header.sequence_number != seq {
                return Ok(false);
            }
            match message.payload {
                NetlinkPayload::Done(_) => Ok(true),
                NetlinkPayload::Error(e) => {
                    failed = e.code.map(|c| c.get());
                    Ok(true)
                }
                NetlinkPayload::InnerMessage(m) => {
                    if let NetfilterMessageInner::NfTables(m) = m.inner {
                        out.push(m);
                    }
                    Ok(false)
                }
                _ => Ok(false),
            }
        })?;
        match failed {
            // No such table or set: nothing to list.
            Some(code) if -code == Errno::ENOENT as i32 => Ok(Vec::new()),
            Some(code) => Err(Error::Io {
                what: "dump",
                source: Errno::from_raw(-code).into(),
            }),
            None => Ok(out),
        }
    }

    /// The elements of `set`, dumped and parsed by hand (see
    /// [`super::raw`]: the crate's parser is quadratic in a list's size).
    fn dump_elements(&mut self, table: &Table, set: &str) -> Result<Vec<Element>, Error> {
        let mut out = Vec::new();
        self.dump_each_element(table, set, |element, _| out.push(element))?;
        Ok(out)
    }

    /// Hands each element of `set` to `each`, with its counter when it
    /// carries one; none when there is no such set. Returns whether the
    /// set is there.
    fn dump_each_element(
        &mut self,
        table: &Table,
        set: &str,
        mut each: impl FnMut(Element, Option<ElementCounter>),
    ) -> Result<bool, Error> {
        let mut found = true;
        let seq = self.take_seqs(1);
        let request = NfTablesMessage::GetSetElement(SetElementMessage {
            attributes: vec![
                SetElementList::Table(table.name.clone()),
                SetElementList::Set(set.to_owned()),
            ],
        });
        self.send_dump(table.family, request, seq)?;
        self.answers(seq, "receive", "an element dump", 256 * 1024, |message| {
            match message.kind {
                raw::NLMSG_DONE => Ok(true),
                raw::NLMSG_ERROR => match raw::error_code(message.body) {
                    0 => Ok(false),
                    // No such table or set: nothing to list (an error
                    // comes before any element).
                    code if -code == Errno::ENOENT as i32 => {
                        found = false;
                        Ok(true)
                    }
                    code => Err(Error::Io {
                        what: "dump",
                        source: Errno::from_raw(-code).into(),
                    }),
                },
                _ => {
                    // After the 4-byte nfgenmsg header: the attributes.
                    let attributes = message.body.get(4..).unwrap_or_default();
                    raw::each_element(attributes, &mut each);
                    Ok(false)
                }
            }
        })?;
        Ok(found)
    }

    /// Reads the answers to request `seq` (others are skipped), handing
    /// each to `each` until it says it was the last (`true`) or fails.
    /// `receive` and `what` name the reads and the answers in errors.
    pub(crate) fn answers(
        &self,
        seq: u32,
        receive: &'static str,
        what: &str,
        buf_size: usize,
        mut each: impl FnMut(raw::Message<'_>) -> Result<bool, Error>,
    ) -> Result<(), Error> {
        let mut buf = vec![0u8; buf_size];
        loop {
            let n = socket::recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty())
                .map_err(Self::io(receive))?;
            for message in raw::messages(&buf[..n]) {
                let message = message.map_err(|why| Error::Decode {
                    what: format!("{what}: {why}"),
                })?;
                if message.seq == seq && each(message)? {
                    return Ok(());
                }
            }
        }
    }

    /// What `pick` makes of each object a dump request returns.
    fn dump_each<T>(
        &mut self,
        family: TableFamily,
        request: NfTablesMessage,
        pick: impl FnMut(Dumped) -> Option<T>,
    ) -> Result<Vec<T>, Error> {
        Ok(self
            .dump(family, request)?
            .into_iter()
            .filter_map(pick)
            .collect())
    }

    /// The names of the tables of `family`.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn tables(&mut self, family: TableFamily) -> Result<Vec<String>, Error> {
        let dumped = self.dump(
            family,
            NfTablesMessage::GetTable(TableMessage { attributes: vec![] }),
        )?;
        Ok(dumped
            .into_iter()
            .filter_map(|m| match m {
                NfTablesMessage::NewTable(t) => t.attributes.into_iter().find_map(|a| match a {
                    TableAttribute::Name(n) => Some(n),
                    _ => None,
                }),
                _ => None,
            })
            .collect())
    }

    /// Everything in `table`, read back from the kernel: `None` when there
    /// is no such table.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn read(&mut self, table: &Table) -> Result<Option<TableState>, Error> {
        let Some(mut state) = self.read_layout(table)? else {
            return Ok(None);
        };
        for set in &mut state.sets {
            set.elements = self.dump_elements(table, &set.name)?;
        }
        Ok(Some(state))
    }

    /// The elements of `set` in `table` (none when there is no such set).
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn read_elements(&mut self, table: &Table, set: &str) -> Result<Vec<Element>, Error> {
        self.dump_elements(table, set)
    }

    /// The elements of `set` in `table`, or `None` when there is no such
    /// table or set (where [`read_elements`](Self::read_elements) answers
    /// an empty list): one dump of that set alone, whatever else the
    /// kernel holds.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn set_elements(
        &mut self,
        table: &Table,
        set: &str,
    ) -> Result<Option<Vec<Element>>, Error> {
        let mut out = Vec::new();
        let found = self.dump_each_element(table, set, |element, _| out.push(element))?;
        Ok(found.then_some(out))
    }

    /// The elements of `set` in `table` with what their counters counted
    /// (a set declared [`with_counter`](super::Set::with_counter); an
    /// element without a counter reads as zero); none when there is no
    /// such set. One dump: at 100k elements, a few tens of milliseconds.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn read_counters(
        &mut self,
        table: &Table,
        set: &str,
    ) -> Result<Vec<(Element, ElementCounter)>, Error> {
        let mut out = Vec::new();
        self.dump_each_element(table, set, |element, counter| {
            out.push((element, counter.unwrap_or_default()));
        })?;
        Ok(out)
    }

    /// `table` without its sets' elements (each `SetState::elements` is
    /// empty): its chains with their rules, its sets' declarations. A
    /// caller comparing a large table reads the elements set by set with
    /// [`read_elements`](Self::read_elements), and can stop at the first
    /// difference.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn read_layout(&mut self, table: &Table) -> Result<Option<TableState>, Error> {
        if !self.tables(table.family)?.contains(&table.name) {
            return Ok(None);
        }
        let mut state = TableState {
            table: table.clone(),
            chains: Vec::new(),
            sets: Vec::new(),
        };
        let name = || table.name.clone();
        state.chains = self.dump_each(
            table.family,
            NfTablesMessage::GetChain(ChainMessage {
                attributes: vec![ChainAttribute::Table(name())],
            }),
            |m| match m {
                NfTablesMessage::NewChain(c) => chain_state(c, &table.name),
                _ => None,
            },
        )?;
        state.sets = self.dump_each(
            table.family,
            NfTablesMessage::GetSet(SetMessage {
                attributes: vec![SetAttribute::Table(name())],
            }),
            |m| match m {
                NfTablesMessage::NewSet(s) => set_state(s, &table.name),
                _ => None,
            },
        )?;
        let rules = self.dump(
            table.family,
            NfTablesMessage::GetRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(table.name.clone())],
            }),
        )?;
        for m in rules {
            let NfTablesMessage::NewRule(r) = m else {
                continue;
            };
            let mut chain = None;
            let mut in_table = false;
            let mut rule = RuleState {
                handle: 0,
                exprs: Vec::new(),
            };
            for attribute in r.attributes {
                match attribute {
                    RuleAttribute::Table(t) => in_table = t == table.name,
                    RuleAttribute::Chain(c) => chain = Some(c),
                    RuleAttribute::Handle(h) => rule.handle = h,
                    RuleAttribute::Expressions(list) => {
                        rule.exprs = list.into_iter().filter_map(raw_expr).collect();
                    }
                    _ => {}
                }
            }
            if let (true, Some(chain)) = (in_table, chain)
                && let Some(c) = state.chains.iter_mut().find(|c| c.name == chain)
            {
                c.rules.push(rule);
            }
        }
        Ok(Some(state))
    }
}

fn proto_family(family: TableFamily) -> NetfilterProtoFamily {
    match family {
        TableFamily::Ip => NetfilterProtoFamily::IPv4,
        TableFamily::Ip6 => NetfilterProtoFamily::IPv6,
        TableFamily::Inet => NetfilterProtoFamily::Inet,
    }
}

/// A table as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableState {
    /// The table.
    pub table: Table,
    /// Its chains, with their rules.
    pub chains: Vec<ChainState>,
    /// Its sets and maps, with their elements.
    pub sets: Vec<SetState>,
}

impl TableState {
    /// A chain by name.
    pub fn chain(&self, name: &str) -> Option<&ChainState> {
        self.chains.iter().find(|c| c.name == name)
    }

    /// A set or map by name.
    pub fn set(&self, name: &str) -> Option<&SetState> {
        self.sets.iter().find(|s| s.name == name)
    }
}

/// A chain as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainState {
    /// The name.
    pub name: String,
    /// For a base chain: its hook and priority.
    pub hook: Option<(ChainHook, i32)>,
    /// Its rules, in order.
    pub rules: Vec<RuleState>,
    /// Its comment (nft's, in `NFTA_CHAIN_USERDATA`).
    pub comment: Option<String>,
}

/// A rule as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleState {
    /// Its handle (for [`Transaction::delete_rule`]).
    pub handle: u64,
    /// Its expressions: name and attributes (`(type, value)`, values as
    /// the kernel sent them).
    pub exprs: Vec<RawExpr>,
}

/// A set or map as the kernel holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetState {
    /// The name.
    pub name: String,
    /// The key's type.
    pub key: DataType,
    /// For a map, what it maps to.
    pub map: Option<MapTo>,
    /// Whether elements are ranges.
    pub interval: bool,
    /// Whether elements expire.
    pub timeout: bool,
    /// The elements (for a set with timeouts, `timeout_ms` is the
    /// element's own timeout).
    pub elements: Vec<Element>,
    /// Whether its elements carry counters ([`Set::counter`](super::Set::counter)).
    pub counter: bool,
}

fn chain_state(c: ChainMessage, table: &str) -> Option<ChainState> {
    let mut state = ChainState {
        name: String::new(),
        hook: None,
        rules: Vec::new(),
        comment: None,
    };
    let mut in_table = false;
    let (mut hook, mut priority) = (None, 0);
    for attribute in c.attributes {
        match attribute {
            ChainAttribute::Table(t) => in_table = t == table,
            ChainAttribute::Name(n) => state.name = n,
            ChainAttribute::UserData(udata) => state.comment = userdata_comment(&udata),
            ChainAttribute::Hook(parts) => {
                for part in parts {
                    match part {
                        NlHook::Number(HookNumber::Inet(n)) => {
                            hook = ChainHook::from_number(u32::from(n));
                        }
                        NlHook::Priority(p) => priority = i32::from_ne_bytes(p.to_ne_bytes()),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    state.hook = hook.map(|h| (h, priority));
    in_table.then_some(state)
}

fn set_state(s: SetMessage, table: &str) -> Option<SetState> {
    let mut state = SetState {
        name: String::new(),
        key: DataType { id: 0, len: 0 },
        map: None,
        interval: false,
        timeout: false,
        elements: Vec::new(),
        counter: false,
    };
    let mut in_table = false;
    let (mut flags, mut data) = (SetFlags::empty(), DataType { id: 0, len: 0 });
    for attribute in s.attributes {
        match attribute {
            SetAttribute::Table(t) => in_table = t == table,
            SetAttribute::Name(n) => state.name = n,
            SetAttribute::Flags(f) => flags = f,
            SetAttribute::KeyType(t) => state.key.id = t,
            SetAttribute::KeyLen(l) => state.key.len = l,
            SetAttribute::DataType(t) => data.id = t,
            SetAttribute::DataLen(l) => data.len = l,
            SetAttribute::Expression(_) | SetAttribute::ListExpressions(_) => state.counter = true,
            SetAttribute::Other(nla) if matches!(nla.kind() & 0x3fff, 17 | 18) => {
                state.counter = true;
            }
            _ => {}
        }
    }
    state.interval = flags.contains(SetFlags::Interval);
    state.timeout = flags.contains(SetFlags::Timeout);
    if flags.contains(SetFlags::Map) {
        state.map = Some(if data.id == 0xffff_ff00 {
            MapTo::Verdict
        } else {
            MapTo::Value(data)
        });
    }
    // Anonymous sets belong to their rule, not to the caller.
    (in_table && !flags.contains(SetFlags::Anonymous)).then_some(state)
}

/// Each attribute of `list` as (type, value).
fn raw<T: Nla>(list: &[T]) -> Vec<(u16, Vec<u8>)> {
    list.iter()
        .map(|nla| {
            let mut value = vec![0u8; nla.value_len()];
            nla.emit_value(&mut value);
            (nla.kind(), value)
        })
        .collect()
}

pub(crate) fn raw_expr(list: ListAttribute<ExpressionAttribute>) -> Option<RawExpr> {
    let ListAttribute::Element(attributes) = list else {
        return None;
    };
    let mut out = RawExpr {
        name: String::new(),
        attributes: Vec::new(),
    };
    for a in attributes {
        match a {
            ExpressionAttribute::Name(n) => out.name = n,
            ExpressionAttribute::Data(data) => {
                out.attributes = match &data {
                    Expressions::Bitwise(l) => raw(l),
                    Expressions::Cmp(l) => raw(l),
                    Expressions::Immediate(l) => raw(l),
                    Expressions::Lookup(l) => raw(l),
                    Expressions::Meta(l) => raw(l),
                    Expressions::Payload(l) => raw(l),
                    Expressions::Unknown(l) => raw(l),
                    Expressions::Other { attributes, .. } => raw(attributes),
                    _ => Vec::new(),
                };
            }
            _ => {}
        }
    }
    Some(out)
}
