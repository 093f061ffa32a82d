//! Full node views encoded once for every node that shares them.
//!
//! Most of a node's view is its zone's base ([`kpng_view::SharedViews`]):
//! the same `Arc<ServiceView>` in every node's view. Each such Service is
//! encoded once (its `SetService` and its compact endpoints, as
//! `ViewChange` bytes) and the bytes are reused by every stream that sends
//! it; a node's own Services (its local endpoints, its hints) are encoded
//! for it alone. Compact endpoints name strings and port lists by their
//! index in the round's tables; here the tables are shared too: one
//! append-only table per [`Generation`], of which each stream sends the
//! part its watcher does not hold yet, ahead of the first message that
//! uses it. On the wire nothing changes: a `WatchEvent` whose
//! `ViewChanges` carry table entries and changes, which any decoder of
//! the compact form reads as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use kpng_model::ServiceName;
use kpng_model::v1::{self, WatchEvent};
use kpng_model::view::{NodeView, ServiceView, ViewOp};
use kpng_view::SharedNodeView;
use prost::Message as _;

use crate::codec::{compact, wire};

/// Endpoints per `SetEndpoints` piece of a Service (~6 KB): a Service
/// with many endpoints goes as several pieces, so messages stay small.
const PIECE_ENDPOINTS: usize = 256;
/// A message is closed once it holds this many bytes. Small on purpose:
/// with 256 KiB messages the fan-out bench's server held 431 MiB at
/// 1,000 nodes instead of 145 MiB (a stream's encoder seems to keep a
/// buffer the size of its largest message while the stream is open).
const MESSAGE_BYTES: usize = 24 * 1024;
/// Table bytes sent in one message at most (the rest follows in the
/// next), for the same reason.
const TABLE_BYTES: usize = 24 * 1024;
/// Field 2 of `WatchEvent`: `changes`, length-delimited.
const WATCH_EVENT_CHANGES: u32 = 2;

/// A stream message: a `WatchEvent`, or one already encoded (a batch of a
/// full view, made of shared pieces). Both encode as a `WatchEvent`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outgoing {
    /// A message to encode.
    Event(WatchEvent),
    /// The bytes of a `WatchEvent`, in parts.
    Raw(Raw),
}

impl Default for Outgoing {
    fn default() -> Self {
        Self::Event(WatchEvent::default())
    }
}

/// An encoded `WatchEvent` in parts (shared, reference-counted bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Raw {
    parts: Vec<Bytes>,
    len: usize,
}

impl Raw {
    /// A `WatchEvent` with `changes` = the `ViewChanges` whose fields are
    /// `body` (encoded `ViewChanges` concatenated are one `ViewChanges`
    /// with their repeated fields in order).
    fn changes(body: Vec<Bytes>) -> Self {
        let body_len: usize = body.iter().map(Bytes::len).sum();
        let mut head = Vec::with_capacity(11);
        prost::encoding::encode_key(
            WATCH_EVENT_CHANGES,
            prost::encoding::WireType::LengthDelimited,
            &mut head,
        );
        prost::encoding::encode_varint(body_len as u64, &mut head);
        let len = head.len() + body_len;
        let mut parts = Vec::with_capacity(body.len() + 1);
        parts.push(Bytes::from(head));
        parts.extend(body);
        Self { parts, len }
    }
}

impl Outgoing {
    /// The message as a `WatchEvent` (a raw one decoded: for callers of
    /// the `Enls` trait, not the served path).
    pub(crate) fn into_event(self) -> Result<WatchEvent, tonic::Status> {
        match self {
            Outgoing::Event(event) => Ok(event),
            Outgoing::Raw(raw) => {
                let mut bytes = Vec::with_capacity(raw.len);
                for part in &raw.parts {
                    bytes.extend_from_slice(part);
                }
                WatchEvent::decode(bytes.as_slice())
                    .map_err(|e| tonic::Status::internal(format!("encoded view: {e}")))
            }
        }
    }
}

impl prost::Message for Outgoing {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut)
    where
        Self: Sized,
    {
        match self {
            Outgoing::Event(event) => event.encode_raw(buf),
            Outgoing::Raw(raw) => {
                for part in &raw.parts {
                    buf.put_slice(part);
                }
            }
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError>
    where
        Self: Sized,
    {
        // Only ever sent: decoding reads it as a `WatchEvent`.
        match self {
            Outgoing::Event(event) => event.merge_field(tag, wire_type, buf, ctx),
            Outgoing::Raw(_) => prost::encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Outgoing::Event(event) => event.encoded_len(),
            Outgoing::Raw(raw) => raw.len,
        }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The generation of shared encodings full views start from now; a new
/// one replaces it when its table has grown well beyond what it held
/// (strings of nodes long gone).
#[derive(Debug, Default)]
pub(crate) struct Encodings {
    current: Mutex<Option<Arc<Generation>>>,
    /// Service views encoded so far, by every generation.
    encoded: Arc<AtomicU64>,
}

impl Encodings {
    /// The generation a full view starts on (and keeps to its end).
    pub(crate) fn generation(&self) -> Arc<Generation> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match &*current {
            Some(generation) if !generation.lock().renew => generation.clone(),
            _ => {
                let generation = Arc::new(Generation {
                    inner: Mutex::default(),
                    encoded: self.encoded.clone(),
                });
                *current = Some(generation.clone());
                generation
            }
        }
    }

    /// Service views encoded so far (shared ones once, a node's own ones
    /// once per full view of the node).
    pub(crate) fn encoded(&self) -> u64 {
        self.encoded.load(Ordering::Relaxed)
    }
}

/// Shared encodings with one table: Services encoded with it, and its
/// entries in order, encoded.
#[derive(Debug)]
pub(crate) struct Generation {
    inner: Mutex<Inner>,
    encoded: Arc<AtomicU64>,
}

/// A Service view's pieces, endpoints as messages (`[0]`) and in columns
/// (`[1]`), each once asked for.
type Forms = [Option<Arc<[Bytes]>>; 2];

#[derive(Debug, Default)]
struct Inner {
    /// Its round never ends: its tables are the generation's.
    encoder: compact::Encoder,
    /// The table entries, encoded (`ViewChanges.strings` and
    /// `.port_lists` fields), in the order the indices were given.
    table: Vec<u8>,
    /// Offsets in `table` where entries end (after each encoding that
    /// added some): where a table may be cut between messages.
    marks: Vec<usize>,
    /// Per shared Service view (by address; the view is held, so the
    /// address is not reused), its pieces: endpoints as messages, and in
    /// columns (each made when first asked for).
    services: HashMap<usize, (Arc<ServiceView>, Forms)>,
    /// `services`' size after the last pruning.
    pruned: usize,
    /// `table`'s size at the first pruning (what the views needed then).
    table_then: Option<usize>,
    /// The table grew too much: full views start on a new generation.
    renew: bool,
    /// Service views encoded since the generation's count was last read.
    encoded: u64,
}

impl Generation {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// `view`'s pieces: `SetService`, then its endpoints in pieces of at
    /// most [`PIECE_ENDPOINTS`] (in columns or not).
    fn encode(&mut self, name: &ServiceName, view: &ServiceView, columns: bool) -> Arc<[Bytes]> {
        self.encoded += 1;
        self.encoder.set_columns(columns);
        let mut tables = v1::ViewChanges::default();
        let mut pieces = Vec::with_capacity(1 + view.endpoints.len() / PIECE_ENDPOINTS);
        let set = ViewOp::SetService(view.service.clone());
        let mut chunks = view.endpoints.chunks(PIECE_ENDPOINTS);
        let first = chunks.next().unwrap_or_default();
        let mut ops: Vec<ViewOp> = Vec::with_capacity(first.len() + 1);
        ops.push(set);
        ops.extend(
            first
                .iter()
                .map(|e| ViewOp::SetEndpoint(name.clone(), e.clone())),
        );
        let batch = self.encoder.batch_with_tables(&ops, &mut tables);
        pieces.push(Bytes::from(batch.encode_to_vec()));
        for chunk in chunks {
            ops.clear();
            ops.extend(
                chunk
                    .iter()
                    .map(|e| ViewOp::SetEndpoint(name.clone(), e.clone())),
            );
            let batch = self.encoder.batch_with_tables(&ops, &mut tables);
            pieces.push(Bytes::from(batch.encode_to_vec()));
        }
        if !tables.strings.is_empty() || !tables.port_lists.is_empty() {
            tables.encode_raw(&mut self.table);
            self.marks.push(self.table.len());
        }
        pieces.into()
    }

    /// The pieces of a view shared among nodes: encoded once.
    fn shared(
        &mut self,
        name: &ServiceName,
        view: &Arc<ServiceView>,
        columns: bool,
    ) -> Arc<[Bytes]> {
        let key = Arc::as_ptr(view) as usize;
        let form = usize::from(columns);
        if let Some((_, forms)) = self.services.get(&key)
            && let Some(pieces) = &forms[form]
        {
            return pieces.clone();
        }
        let pieces = self.encode(name, view, columns);
        let (_, forms) = self
            .services
            .entry(key)
            .or_insert_with(|| (view.clone(), [None, None]));
        forms[form] = Some(pieces.clone());
        if self.services.len() > 2 * self.pruned + 1024 {
            self.prune();
        }
        pieces
    }

    /// Drops the pieces of views no node's view holds any more; past a
    /// point, asks for a new generation (the table only grows).
    fn prune(&mut self) {
        self.services
            .retain(|_, (view, _)| Arc::strong_count(view) > 1);
        self.pruned = self.services.len();
        let then = *self.table_then.get_or_insert(self.table.len());
        if self.table.len() > 2 * then.max(1 << 20) {
            self.renew = true;
        }
    }

    /// Where to cut the table after `sent` so that one message carries at
    /// most about [`TABLE_BYTES`] of it (at an entry boundary).
    fn table_cut(&self, sent: usize) -> usize {
        if self.table.len() - sent <= TABLE_BYTES {
            return self.table.len();
        }
        let limit = sent + TABLE_BYTES;
        let at = self.marks.partition_point(|m| *m <= limit);
        match at.checked_sub(1).map(|i| self.marks[i]) {
            Some(mark) if mark > sent => mark,
            // One encoding added more than the limit: its entries whole.
            _ => self.marks.get(at).copied().unwrap_or(self.table.len()),
        }
    }
}

/// One node's full view, sent in messages built from shared pieces: the
/// node and the Service CIDRs, then each Service in name order.
pub(crate) struct FullView {
    view: SharedNodeView,
    generation: Arc<Generation>,
    head_sent: bool,
    /// The next Service to send (`None`: from the first).
    next: Option<ServiceName>,
    done: bool,
    /// Bytes of the generation's table the watcher holds.
    table_sent: usize,
    /// Endpoints go in columns.
    columns: bool,
}

impl FullView {
    pub(crate) fn new(view: SharedNodeView, generation: Arc<Generation>, columns: bool) -> Self {
        Self {
            columns,
            view,
            generation,
            head_sent: false,
            next: None,
            done: false,
            table_sent: 0,
        }
    }

    /// The next message, or `None` when the whole view is out.
    pub(crate) fn next_message(&mut self) -> Option<Outgoing> {
        if self.done {
            return None;
        }
        let mut body = Vec::new();
        let mut size = 0;
        if !std::mem::replace(&mut self.head_sent, true) {
            let view: &NodeView = self.view.view();
            let mut changes = Vec::new();
            if let Some(node) = &view.node {
                changes.push(wire::to_wire(&ViewOp::SetNode(node.clone())));
            }
            if !view.service_cidrs.is_empty() {
                changes.push(wire::to_wire(&ViewOp::SetServiceCidrs(
                    view.service_cidrs.clone(),
                )));
            }
            if !changes.is_empty() {
                let head = Bytes::from(
                    v1::ViewChanges {
                        changes,
                        ..Default::default()
                    }
                    .encode_to_vec(),
                );
                size += head.len();
                body.push(head);
            }
        }
        let generation = self.generation.clone();
        let mut shared = generation.lock();
        // A table too large for one message goes first, alone.
        let cut = shared.table_cut(self.table_sent);
        if cut < shared.table.len() {
            let part = Bytes::copy_from_slice(&shared.table[self.table_sent..cut]);
            self.table_sent = cut;
            body.insert(0, part);
            return Some(Outgoing::Raw(Raw::changes(body)));
        }
        let services = self.view.view().services.clone();
        let range = match &self.next {
            Some(name) => services.range(name.clone()..),
            None => services.range::<_, ServiceName>(..),
        };
        let mut next = None;
        for (name, view) in range {
            if size >= MESSAGE_BYTES {
                next = Some(name.clone());
                break;
            }
            let pieces = if self.view.is_own(name) {
                shared.encode(name, view, self.columns)
            } else {
                shared.shared(name, view, self.columns)
            };
            for piece in pieces.iter() {
                size += piece.len();
                body.push(piece.clone());
            }
        }
        // The table entries these pieces use (and any before) go first.
        if self.table_sent < shared.table.len() {
            let part = Bytes::copy_from_slice(&shared.table[self.table_sent..]);
            self.table_sent = shared.table.len();
            body.insert(0, part);
        }
        let encoded = std::mem::take(&mut shared.encoded);
        drop(shared);
        generation.encoded.fetch_add(encoded, Ordering::Relaxed);
        self.done = next.is_none();
        self.next = next;
        (!body.is_empty()).then(|| Outgoing::Raw(Raw::changes(body)))
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use kpng_model::v1::{Service, watch_event::Event};
    use kpng_model::{EndpointInfo, Kind};
    use kpng_store::Store;
    use kpng_view::{SharedViews, node_view};

    use super::*;
    use crate::codec::compact::Decoder;

    /// `services` Services of `per` endpoints, endpoint `e` on node
    /// `{prefix}{e % nodes}`.
    fn store(services: usize, per: usize, nodes: usize, prefix: &str) -> Store {
        let mut store = Store::new();
        let mut txn = store.begin();
        for s in 0..services {
            let name = ServiceName::new("ns", format!("svc-{s}"));
            txn.set_service(
                kpng_model::ServiceInfo::new(Service::new("ns", format!("svc-{s}")))
                    .expect("valid"),
            );
            for e in 0..per {
                let n = s * per + e;
                let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n as u32));
                let node = format!("{prefix}{}", n % nodes);
                let endpoint = EndpointInfo::builder(ip).node(&node, "zone-a").build();
                txn.set_endpoint(name.clone(), endpoint);
            }
        }
        txn.commit();
        store.mark_listed(Kind::Service);
        store.mark_listed(Kind::Endpoint);
        store
    }

    /// Every message of `node`'s full view, checked against gRPC's
    /// 4 MiB, and the view they decode to.
    fn full_view(
        shared: &SharedViews,
        encodings: &Encodings,
        store: &Store,
        node: &str,
    ) -> (NodeView, usize, usize) {
        full_view_in(shared, encodings, store, node, false)
    }

    /// [`full_view`], endpoints in columns or not.
    fn full_view_in(
        shared: &SharedViews,
        encodings: &Encodings,
        store: &Store,
        node: &str,
        columns: bool,
    ) -> (NodeView, usize, usize) {
        let view = shared.project(node, &store.snapshot());
        let mut full = FullView::new(view, encodings.generation(), columns);
        let (mut decoder, mut decoded, mut messages) = (Decoder::new(), NodeView::default(), 0);
        let mut largest = 0;
        while let Some(message) = full.next_message() {
            messages += 1;
            largest = largest.max(prost::Message::encoded_len(&message));
            assert!(largest < 4 << 20);
            let event = message.into_event().expect("a WatchEvent");
            let Some(Event::Changes(changes)) = event.event else {
                panic!("{event:?}");
            };
            decoder
                .batch::<kpng_model::Error>(changes, |op| decoded.apply(&op))
                .expect("decodes and fits");
        }
        (decoded, messages, largest)
    }

    #[test]
    fn shared_services_are_encoded_once_and_decode_to_each_nodes_view() {
        let store = store(50, 10, 20, "node-");
        let (shared, encodings) = (SharedViews::new(), Encodings::default());
        let nodes = ["node-1", "node-2", "node-7", "elsewhere"];
        for node in nodes {
            let (decoded, ..) = full_view(&shared, &encodings, &store, node);
            let want = node_view(&store.snapshot(), node);
            assert!(decoded.services == want.services, "{node}");
            assert_eq!(decoded.node, want.node);
        }
        // Each node's own Services (those with an endpoint on it: 25 of
        // 50 for a named node) once per node, the others once in all.
        let own: usize = nodes
            .iter()
            .map(|n| shared.project(n, &store.snapshot()).own_services())
            .sum();
        assert_eq!(own, 75);
        let encoded = encodings.encoded() as usize;
        assert!(encoded <= 50 + own, "{encoded} encoded");
        // Again: only the own ones.
        full_view(&shared, &encodings, &store, "node-1");
        assert_eq!(encodings.encoded() as usize, encoded + 25);
    }

    #[test]
    fn both_forms_decode_to_each_nodes_view_each_encoded_once() {
        let store = store(50, 10, 20, "node-");
        let (shared, encodings) = (SharedViews::new(), Encodings::default());
        let mut first = Vec::new();
        for columns in [true, false, true, false] {
            for node in ["node-1", "node-2", "elsewhere"] {
                let (decoded, ..) = full_view_in(&shared, &encodings, &store, node, columns);
                let want = node_view(&store.snapshot(), node);
                assert!(
                    decoded.services == want.services,
                    "{node}, columns {columns}"
                );
            }
            first.push(encodings.encoded());
        }
        // The second form encodes the shared Services again (once); the
        // same forms again only each node's own.
        let own: u64 = ["node-1", "node-2", "elsewhere"]
            .iter()
            .map(|n| shared.project(n, &store.snapshot()).own_services() as u64)
            .sum();
        assert_eq!(first[2] - first[1], own);
        assert_eq!(first[3] - first[2], own);
        assert!(first[1] - first[0] > own, "{first:?}");
    }

    #[test]
    fn a_table_larger_than_a_message_goes_in_parts() {
        // 12,000 nodes of 100-byte names: a 1.2 MB table, in parts of
        // 24 KiB.
        let prefix = "n".repeat(95);
        let store = store(100, 120, 12_000, &prefix);
        let (shared, encodings) = (SharedViews::new(), Encodings::default());
        // The first view makes the table as it goes; the next ones find
        // it whole, and send it in parts before the Services.
        for (node, parts) in [("node-1", 1), ("node-2", 40)] {
            let (decoded, messages, largest) = full_view(&shared, &encodings, &store, node);
            let want = node_view(&store.snapshot(), node);
            assert!(decoded.services == want.services);
            assert!(messages >= parts, "{messages} messages");
            if node == "node-2" {
                assert!(largest < 3 * TABLE_BYTES, "a message of {largest} bytes");
            }
        }
        let generation = encodings.generation();
        let table = generation.lock().table.len();
        assert!(table > TABLE_BYTES, "{table} bytes of table");
    }
}
