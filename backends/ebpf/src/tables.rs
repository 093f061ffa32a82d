//! Where the backend's writes go: the kernel's BPF maps (through aya), or
//! an in-memory copy that records each write as a line of text (dry runs
//! and tests). Both take keys and values as the bytes of
//! [`layout`](crate::layout).

use std::collections::BTreeMap;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData};

use crate::Error;
use crate::layout::{self, Endpoint, Frontend, Record};
use crate::sizes::Capacity;

/// The maps the backend writes, by their names in the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Table {
    Services,
    Slots,
    Members,
    Live,
    Cidrs,
    /// Records of external traffic (tc).
    External,
    /// loadBalancerSourceRanges of external records.
    Ranges,
    /// The node's addresses to masquerade to ([0] IPv4, [1] IPv6).
    Node,
    /// Maglev tables of sets served from outside (tc).
    Maglev,
}

impl Table {
    /// The map's name in the object (and its pin's file name).
    pub(crate) fn map_name(self) -> &'static str {
        match self {
            Table::Services => "kpng_services",
            Table::Slots => "kpng_slots",
            Table::Members => "kpng_members",
            Table::Live => "kpng_live",
            Table::Cidrs => "kpng_cidrs",
            Table::External => "kpng_external",
            Table::Ranges => "kpng_ranges",
            Table::Node => "kpng_node",
            Table::Maglev => "kpng_maglev",
        }
    }

    fn short(self) -> &'static str {
        &self.map_name()[5..]
    }

    /// One element, as a dry run prints it.
    pub(crate) fn describe(self, key: &[u8], value: Option<&[u8]>) -> String {
        let fixed = |bytes: &[u8]| -> [u8; 20] {
            let mut out = [0u8; 20];
            let n = bytes.len().min(20);
            out[..n].copy_from_slice(&bytes[..n]);
            out
        };
        let word = |bytes: &[u8], at: usize| -> u32 {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[at..at + 4]);
            u32::from_ne_bytes(w)
        };
        let key_text = match self {
            Table::Services | Table::External => Frontend::from_key(&fixed(key)).to_string(),
            Table::Ranges => {
                let len = word(key, 0);
                let fe = Frontend::from_key(&fixed(&key[4..24]));
                let (ip, prefix) = layout::range_of(len, &key[4..]);
                format!("{fe} from {ip}/{prefix}")
            }
            Table::Slots => format!("{}/{}", word(key, 0), word(key, 4)),
            Table::Maglev => word(key, 0).to_string(),
            Table::Members => format!("{} {}", word(key, 0), Endpoint::from_bytes(&key[4..])),
            Table::Live => layout::live_ip(&fixed(key)).to_string(),
            Table::Node => word(key, 0).to_string(),
            Table::Cidrs => {
                let (ip, len) = layout::cidr_of(word(key, 0), &fixed(&key[4..]));
                format!("{ip}/{len}")
            }
        };
        let value_text = match (self, value) {
            (_, None) => None,
            (Table::Services | Table::External, Some(v)) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(&v[..16]);
                Some(Record::from_bytes(&b).to_string())
            }
            (Table::Node, Some(v)) => Some(Endpoint::from_bytes(v).ip.to_string()),
            (Table::Maglev, Some(v)) => Some(layout::maglev_text(v)),
            (Table::Slots, Some(v)) => {
                let (count, slots) = layout::page_of(v);
                let page = word(key, 4);
                let used = if page == 0 {
                    count.min(8) as usize
                } else {
                    slots.iter().take_while(|e| e.port != 0).count()
                };
                let list: Vec<String> = slots[..used].iter().map(ToString::to_string).collect();
                Some(if page == 0 {
                    format!("{count} endpoints: {}", list.join(", "))
                } else {
                    list.join(", ")
                })
            }
            (Table::Members | Table::Live | Table::Cidrs | Table::Ranges, Some(_)) => None,
        };
        match value_text {
            Some(v) => format!("{} {key_text} : {v}", self.short()),
            None => format!("{} {key_text}", self.short()),
        }
    }
}

/// What the backend writes to.
pub(crate) trait Tables {
    /// Sets one element (adds it or replaces its value in one step).
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error>;
    /// Deletes one element; a missing one is not an error.
    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), Error>;
    /// Every key of a table.
    fn keys(&self, table: Table) -> Result<Vec<Vec<u8>>, Error>;
    /// One element's value.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    /// Sets `count` elements of `table` at once (keys and values back to
    /// back), in their order. Default: one by one.
    fn put_many(
        &mut self,
        table: Table,
        keys: &[u8],
        values: &[u8],
        count: usize,
    ) -> Result<(), Error> {
        one_by_one(self, table, keys, values, count)
    }
}

/// Writes to a [`Tables`] gathered per table and written in batches
/// (`BPF_MAP_UPDATE_BATCH`: one call per map instead of one per element):
/// for a full round. The order a round relies on is kept: each table's
/// writes in their order, tables in the order of [`Batched::ORDER`]
/// (endpoint sets and members before the records that lead to them, the
/// records before the live ClusterIPs), and everything gathered is
/// written before any delete or read.
pub(crate) struct Batched<'a> {
    inner: &'a mut dyn Tables,
    pending: BTreeMap<usize, (Vec<u8>, Vec<u8>, usize)>,
    /// Bytes gathered: past [`Batched::LIMIT`], everything is written
    /// (tables in their order: what is gathered of each Service is whole).
    bytes: usize,
}

impl<'a> Batched<'a> {
    /// The tables gathered, in the order they are written.
    const ORDER: [Table; 6] = [
        Table::Slots,
        Table::Members,
        Table::Maglev,
        Table::Services,
        Table::External,
        Table::Live,
    ];

    /// What is gathered before it is written: a few calls per map at
    /// 100k Services, and a bounded buffer.
    const LIMIT: usize = 8 << 20;

    pub(crate) fn new(inner: &'a mut dyn Tables) -> Self {
        Self {
            inner,
            pending: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// Writes what is gathered.
    pub(crate) fn flush(&mut self) -> Result<(), Error> {
        self.bytes = 0;
        for (at, (keys, values, count)) in std::mem::take(&mut self.pending) {
            self.inner
                .put_many(Self::ORDER[at], &keys, &values, count)?;
        }
        Ok(())
    }
}

impl Tables for Batched<'_> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        match Self::ORDER.iter().position(|t| *t == table) {
            Some(at) => {
                let (keys, values, count) = self.pending.entry(at).or_default();
                keys.extend_from_slice(key);
                values.extend_from_slice(value);
                *count += 1;
                self.bytes += key.len() + value.len();
                if self.bytes > Self::LIMIT {
                    self.flush()?;
                }
                Ok(())
            }
            None => {
                self.flush()?;
                self.inner.put(table, key, value)
            }
        }
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), Error> {
        self.flush()?;
        self.inner.delete(table, key)
    }

    fn keys(&self, table: Table) -> Result<Vec<Vec<u8>>, Error> {
        // Reads come before any write of a round (adoption reads first).
        self.inner.keys(table)
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(table, key)
    }
}

/// An in-memory copy of the maps: what a dry run writes, line by line.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) tables: BTreeMap<Table, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The writes since the last `take_lines`, as text.
    pub(crate) lines: Vec<String>,
    /// Tests: every write fails while set.
    #[cfg(test)]
    pub(crate) fail: bool,
}

impl Recorder {
    pub(crate) fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }

    #[cfg(test)]
    pub(crate) fn value(&self, table: Table, key: &[u8]) -> Option<&[u8]> {
        self.tables.get(&table)?.get(key).map(Vec::as_slice)
    }
}

impl Tables for Recorder {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        #[cfg(test)]
        if self.fail {
            return Err(Error::Layout {
                map: table.map_name(),
                len: value.len(),
            });
        }
        self.lines
            .push(format!("set {}", table.describe(key, Some(value))));
        self.tables
            .entry(table)
            .or_default()
            .insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), Error> {
        self.lines
            .push(format!("delete {}", table.describe(key, None)));
        if let Some(t) = self.tables.get_mut(&table) {
            t.remove(key);
        }
        Ok(())
    }

    fn keys(&self, table: Table) -> Result<Vec<Vec<u8>>, Error> {
        Ok(self
            .tables
            .get(&table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default())
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.tables.get(&table).and_then(|t| t.get(key)).cloned())
    }
}

/// The kernel's maps, opened from their pins.
pub(crate) struct Kernel {
    pub(crate) services: HashMap<MapData, [u8; 20], [u8; 16]>,
    pub(crate) slots: HashMap<MapData, [u8; 8], [u8; 168]>,
    pub(crate) members: HashMap<MapData, [u8; 24], u8>,
    pub(crate) live: HashMap<MapData, [u8; 20], u32>,
    pub(crate) cidrs: LpmTrie<MapData, [u8; 20], u8>,
    pub(crate) external: HashMap<MapData, [u8; 20], [u8; 16]>,
    pub(crate) ranges: LpmTrie<MapData, [u8; 36], u8>,
    pub(crate) node: Array<MapData, [u8; 20]>,
    pub(crate) maglev: HashMap<MapData, u32, [u8; layout::MAGLEV_BYTES]>,
    /// The sizes of the maps sized from the cluster.
    pub(crate) capacity: Capacity,
}

impl Kernel {
    /// A failed write's error: a full map (`E2BIG`) says so, with its
    /// size.
    fn write_error(&self, table: Table, io: &std::io::Error) -> Option<Error> {
        (io.raw_os_error() == Some(libc::E2BIG)).then(|| {
            let max = self.capacity.0.get(table.map_name()).copied().unwrap_or(0);
            Error::MapFull {
                map: table.map_name(),
                max_entries: max,
                need: u64::from(max) + 1,
            }
        })
    }

    fn wrap(&self, table: Table, source: aya::maps::MapError) -> Error {
        if let aya::maps::MapError::SyscallError(e) = &source
            && let Some(full) = self.write_error(table, &e.io_error)
        {
            return full;
        }
        Error::Map {
            map: table.map_name(),
            source,
        }
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kernel")
    }
}

fn array<const N: usize>(table: Table, bytes: &[u8]) -> Result<[u8; N], Error> {
    bytes.try_into().map_err(|_| Error::Layout {
        map: table.map_name(),
        len: bytes.len(),
    })
}

fn cidr(bytes: &[u8]) -> Result<Key<[u8; 20]>, Error> {
    let all: [u8; 24] = array(Table::Cidrs, bytes)?;
    let len = u32::from_ne_bytes([all[0], all[1], all[2], all[3]]);
    let mut data = [0u8; 20];
    data.copy_from_slice(&all[4..]);
    Ok(Key::new(len, data))
}

fn range(bytes: &[u8]) -> Result<Key<[u8; 36]>, Error> {
    let all: [u8; 40] = array(Table::Ranges, bytes)?;
    let len = u32::from_ne_bytes([all[0], all[1], all[2], all[3]]);
    let mut data = [0u8; 36];
    data.copy_from_slice(&all[4..]);
    Ok(Key::new(len, data))
}

/// The bytes of a CIDR key as [`Tables`] takes them: the prefix length,
/// then the data.
pub(crate) fn cidr_bytes(len: u32, data: &[u8; 20]) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..4].copy_from_slice(&len.to_ne_bytes());
    out[4..].copy_from_slice(data);
    out
}

fn missing_ok(result: Result<(), aya::maps::MapError>, map: &'static str) -> Result<(), Error> {
    match result {
        Ok(()) => Ok(()),
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(())
        }
        Err(source) => Err(Error::Map { map, source }),
    }
}

fn found<T: AsRef<[u8]>>(
    result: Result<T, aya::maps::MapError>,
    map: &'static str,
) -> Result<Option<Vec<u8>>, Error> {
    match result {
        Ok(v) => Ok(Some(v.as_ref().to_vec())),
        Err(aya::maps::MapError::KeyNotFound) => Ok(None),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(source) => Err(Error::Map { map, source }),
    }
}

impl Tables for Kernel {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let map = table.map_name();
        match table {
            Table::Services => found(self.services.get(&array(table, key)?, 0), map),
            Table::Slots => found(self.slots.get(&array(table, key)?, 0), map),
            Table::Members => found(self.members.get(&array(table, key)?, 0).map(|v| [v]), map),
            Table::Live => found(
                self.live.get(&array(table, key)?, 0).map(u32::to_ne_bytes),
                map,
            ),
            Table::Cidrs => found(self.cidrs.get(&cidr(key)?, 0).map(|v| [v]), map),
            Table::External => found(self.external.get(&array(table, key)?, 0), map),
            Table::Ranges => found(self.ranges.get(&range(key)?, 0).map(|v| [v]), map),
            Table::Node => found(
                self.node.get(&u32::from_ne_bytes(array(table, key)?), 0),
                map,
            ),
            Table::Maglev => found(
                self.maglev.get(&u32::from_ne_bytes(array(table, key)?), 0),
                map,
            ),
        }
    }

    fn put_many(
        &mut self,
        table: Table,
        keys: &[u8],
        values: &[u8],
        count: usize,
    ) -> Result<(), Error> {
        use aya::maps::IterableMap;
        use std::os::fd::AsFd;
        let fd = match table {
            Table::Services => self.services.map().fd().as_fd(),
            Table::Slots => self.slots.map().fd().as_fd(),
            Table::Members => self.members.map().fd().as_fd(),
            Table::Live => self.live.map().fd().as_fd(),
            Table::External => self.external.map().fd().as_fd(),
            Table::Maglev => self.maglev.map().fd().as_fd(),
            _ => return one_by_one(self, table, keys, values, count),
        };
        match crate::sys::map_update_batch(fd, keys, values, count) {
            Ok(()) => Ok(()),
            // A kernel without batches (before 5.6): one by one.
            Err((0, e))
                if e.raw_os_error() == Some(libc::EINVAL)
                    || e.raw_os_error() == Some(libc::ENOTSUP)
                    || e.raw_os_error() == Some(524) =>
            {
                one_by_one(self, table, keys, values, count)
            }
            Err((_, e)) => Err(self.write_error(table, &e).unwrap_or_else(|| Error::Write {
                map: table.map_name(),
                source: e,
            })),
        }
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let result = self.put_one(table, key, value);
        result.map_err(|e| match e {
            Error::Map { source, .. } => self.wrap(table, source),
            other => other,
        })
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), Error> {
        let map = table.map_name();
        let result = match table {
            Table::Services => self.services.remove(&array(table, key)?),
            Table::Slots => self.slots.remove(&array(table, key)?),
            Table::Members => self.members.remove(&array(table, key)?),
            Table::Live => self.live.remove(&array(table, key)?),
            Table::Cidrs => self.cidrs.remove(&cidr(key)?),
            Table::External => self.external.remove(&array(table, key)?),
            Table::Ranges => self.ranges.remove(&range(key)?),
            Table::Maglev => self.maglev.remove(&u32::from_ne_bytes(array(table, key)?)),
            // An array's element is never gone: zeros mean none.
            Table::Node => self
                .node
                .set(u32::from_ne_bytes(array(table, key)?), [0u8; 20], 0),
        };
        missing_ok(result, map)
    }

    fn keys(&self, table: Table) -> Result<Vec<Vec<u8>>, Error> {
        let map = table.map_name();
        let wrap = |source| Error::Map { map, source };
        match table {
            Table::Services => self
                .services
                .keys()
                .map(|k| k.map(|k| k.to_vec()).map_err(wrap))
                .collect(),
            Table::Slots => self
                .slots
                .keys()
                .map(|k| k.map(|k| k.to_vec()).map_err(wrap))
                .collect(),
            Table::Members => self
                .members
                .keys()
                .map(|k| k.map(|k| k.to_vec()).map_err(wrap))
                .collect(),
            Table::Live => self
                .live
                .keys()
                .map(|k| k.map(|k| k.to_vec()).map_err(wrap))
                .collect(),
            Table::Cidrs => self
                .cidrs
                .keys()
                .map(|k| {
                    k.map(|k| cidr_bytes(k.prefix_len(), &k.data()).to_vec())
                        .map_err(wrap)
                })
                .collect(),
            Table::External => self
                .external
                .keys()
                .map(|k| k.map(|k| k.to_vec()).map_err(wrap))
                .collect(),
            Table::Node => Ok((0u32..2).map(|i| i.to_ne_bytes().to_vec()).collect()),
            Table::Maglev => self
                .maglev
                .keys()
                .map(|k| k.map(|k| k.to_ne_bytes().to_vec()).map_err(wrap))
                .collect(),
            Table::Ranges => self
                .ranges
                .keys()
                .map(|k| {
                    k.map(|k| {
                        let mut out = k.prefix_len().to_ne_bytes().to_vec();
                        out.extend_from_slice(&k.data());
                        out
                    })
                    .map_err(wrap)
                })
                .collect(),
        }
    }
}

/// What the maps serve, as the programs read them: one line per record
/// (socket and external), with its affinity and flags, the endpoints its
/// set holds below its count (sorted) and the members of that set
/// (sorted); then the members of sets no record leads to, the live
/// ClusterIPs, the Service CIDRs, the source ranges and the node's
/// addresses. Set numbers and slot order do not show, nor pages past a
/// count (deleted a round later), so two maps that serve the same give the
/// same lines. Sorted.
pub(crate) fn served(t: &dyn Tables) -> Result<Vec<String>, Error> {
    use std::collections::BTreeSet;
    let mut members: BTreeMap<u32, Vec<Endpoint>> = BTreeMap::new();
    for key in t.keys(Table::Members)? {
        if key.len() == 24 {
            members
                .entry(layout::set_of(&key))
                .or_default()
                .push(Endpoint::from_bytes(&key[4..]));
        }
    }
    let list = |eps: &mut Vec<Endpoint>| -> String {
        eps.sort();
        let text: Vec<String> = eps.iter().map(ToString::to_string).collect();
        text.join(", ")
    };
    let mut lines = Vec::new();
    let mut referenced = BTreeSet::new();
    for table in [Table::Services, Table::External] {
        for key in t.keys(table)? {
            let (Ok(k), Some(value)) = (<[u8; 20]>::try_from(key.as_slice()), t.get(table, &key)?)
            else {
                continue;
            };
            let Ok(v) = <[u8; 16]>::try_from(value.as_slice()) else {
                continue;
            };
            let record = Record::from_bytes(&v);
            referenced.insert(record.set);
            let text = record.to_string();
            let how = text
                .strip_prefix(&format!("set {}", record.set))
                .unwrap_or(&text);
            let mut endpoints = Vec::new();
            if let Some(first) = t.get(Table::Slots, &layout::slot_key(record.set, 0))? {
                let count = layout::page_of(&first).0 as usize;
                for page in 0..count.div_ceil(layout::PAGE) {
                    let index = u32::try_from(page).unwrap_or(u32::MAX);
                    let Some(bytes) = t.get(Table::Slots, &layout::slot_key(record.set, index))?
                    else {
                        lines.push(format!(
                            "{} {}: page {page} missing",
                            table.short(),
                            Frontend::from_key(&k)
                        ));
                        continue;
                    };
                    let slots = layout::page_of(&bytes).1;
                    let used = (count - page * layout::PAGE).min(layout::PAGE);
                    endpoints.extend(slots.into_iter().take(used));
                }
            }
            // A Maglev table, checked against its slots: the same lines
            // for maps that serve the same, whatever their slot order.
            let maglev = if table == Table::External && record.flags & layout::BAL_MAGLEV != 0 {
                let held = t.get(Table::Maglev, &record.set.to_ne_bytes())?;
                match held {
                    None => " table missing",
                    Some(bytes) if bytes == layout::maglev_bytes(&endpoints) => " table",
                    Some(_) => " table differs from the slots",
                }
            } else {
                ""
            };
            let mut held = members.get(&record.set).cloned().unwrap_or_default();
            lines.push(format!(
                "{} {}:{how}{maglev} -> [{}] members [{}]",
                table.short(),
                Frontend::from_key(&k),
                list(&mut endpoints),
                list(&mut held)
            ));
        }
    }
    for (set, mut eps) in members {
        if !referenced.contains(&set) {
            lines.push(format!("members of no record: [{}]", list(&mut eps)));
        }
    }
    for table in [Table::Live, Table::Cidrs, Table::Ranges, Table::Node] {
        for key in t.keys(table)? {
            let value = t.get(table, &key)?;
            lines.push(table.describe(&key, value.as_deref()));
        }
    }
    lines.sort();
    Ok(lines)
}

impl Kernel {
    fn put_one(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let map = table.map_name();
        let wrap = |source| Error::Map { map, source };
        match table {
            Table::Services => self
                .services
                .insert(array(table, key)?, array::<16>(table, value)?, 0)
                .map_err(wrap),
            Table::Slots => self
                .slots
                .insert(array(table, key)?, array::<168>(table, value)?, 0)
                .map_err(wrap),
            Table::Members => self
                .members
                .insert(array(table, key)?, 1u8, 0)
                .map_err(wrap),
            Table::Live => self.live.insert(array(table, key)?, 1u32, 0).map_err(wrap),
            Table::Cidrs => self.cidrs.insert(&cidr(key)?, 1u8, 0).map_err(wrap),
            Table::External => self
                .external
                .insert(array(table, key)?, array::<16>(table, value)?, 0)
                .map_err(wrap),
            Table::Ranges => self.ranges.insert(&range(key)?, 1u8, 0).map_err(wrap),
            Table::Maglev => self
                .maglev
                .insert(
                    u32::from_ne_bytes(array(table, key)?),
                    array::<{ layout::MAGLEV_BYTES }>(table, value)?,
                    0,
                )
                .map_err(wrap),
            Table::Node => self
                .node
                .set(
                    u32::from_ne_bytes(array(table, key)?),
                    array::<20>(table, value)?,
                    0,
                )
                .map_err(wrap),
        }
    }
}

/// Writes `count` elements (keys and values back to back) one by one.
fn one_by_one<T: Tables + ?Sized>(
    kernel: &mut T,
    table: Table,
    keys: &[u8],
    values: &[u8],
    count: usize,
) -> Result<(), Error> {
    let (k, v) = (keys.len() / count.max(1), values.len() / count.max(1));
    for i in 0..count {
        kernel.put(
            table,
            &keys[i * k..(i + 1) * k],
            &values[i * v..(i + 1) * v],
        )?;
    }
    Ok(())
}
