//! The persistent state shared by the writer and its snapshots.
//!
//! Services are indexed by a hash map (HAMT) keyed by their name's
//! fingerprint: a point lookup among 10k Services reads a few nodes. Each
//! Service's endpoints live in one shared, sorted vector: compact, listed in
//! address order, found by binary search. Changing an endpoint copies its
//! Service's vector once per transaction, which is O(endpoints of that
//! Service), the same order as projecting that Service for a node, which
//! every change costs anyway. Nodes are few and kept in an ordered map.
//!
//! Every stored value carries a 128-bit keyed digest of its content, held
//! inline beside it. A write compares digests, so a no-op write never reads
//! the stored value itself (which would cost a cache miss per string it
//! holds).

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use imbl::shared_ptr::DefaultSharedPtr;
use imbl::{GenericHashMap, OrdMap};
use kpng_model::v1::{Endpoint, Node, Service};
use kpng_model::{Key, Kind, ServiceName, Value};
use siphasher::sip128::{Hasher128, SipHasher13};

/// A hasher that passes a [`ServiceName`]'s fingerprint through: the
/// fingerprint is already a well-mixed 64-bit hash of the name, and a fixed
/// hasher keeps iteration order the same on every run.
#[derive(Default, Clone, Copy)]
pub(crate) struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not reached through `ServiceName`, which hashes one u64; kept
        // correct for any other use (FNV-1a).
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 ^= value;
    }
}

/// A 128-bit digest of a value's content: SipHash-1-3 with a key drawn at
/// random once per process. Two different values share a digest with
/// probability 2^-128, and since the key is secret, input crafted to
/// collide cannot be computed in advance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Digest([u64; 2]);

fn digest_key() -> &'static [u8; 16] {
    static KEY: OnceLock<[u8; 16]> = OnceLock::new();
    KEY.get_or_init(|| {
        // std's RandomState is seeded from the OS's randomness.
        let random = std::collections::hash_map::RandomState::new();
        let a = random.hash_one(0x6b70_6e67_u64);
        let b = random.hash_one(a);
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&a.to_le_bytes());
        key[8..].copy_from_slice(&b.to_le_bytes());
        key
    })
}

impl Digest {
    pub(crate) fn of<T: Hash + ?Sized>(value: &T) -> Self {
        let mut hasher = SipHasher13::new_with_key(digest_key());
        value.hash(&mut hasher);
        // Two u64 halves, not a u128: 8-byte alignment keeps entries small.
        let h = hasher.finish128();
        Digest([h.h1, h.h2])
    }

    fn of_value(value: &Value) -> Self {
        match value {
            Value::Node(v) => Self::of(&**v),
            Value::Service(v) => Self::of(&**v),
            Value::Endpoint(v) => Self::of(&**v),
        }
    }
}

/// A stored value with its digest. Equality compares digests only.
#[derive(Debug)]
pub(crate) struct Stored<T> {
    pub(crate) digest: Digest,
    pub(crate) value: Arc<T>,
}

impl<T> Clone for Stored<T> {
    fn clone(&self) -> Self {
        Self {
            digest: self.digest,
            value: self.value.clone(),
        }
    }
}

impl<T> PartialEq for Stored<T> {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

/// One Service's endpoints, sorted by address, shared between snapshots.
pub(crate) type EndpointList = Arc<Vec<(IpAddr, Stored<Endpoint>)>>;

/// One Service's entry: the Service itself, when known, and its endpoints.
/// An endpoint may arrive before its Service (EndpointSlices and Services
/// are watched separately), so either part may be empty, not both.
#[derive(Clone, Debug, Default)]
pub(crate) struct Entry {
    pub(crate) service: Option<Stored<Service>>,
    pub(crate) endpoints: EndpointList,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.service.is_none() && self.endpoints.is_empty()
    }

    fn find(&self, ip: &IpAddr) -> Result<usize, usize> {
        self.endpoints.binary_search_by(|(a, _)| a.cmp(ip))
    }

    pub(crate) fn endpoint(&self, ip: &IpAddr) -> Option<&Stored<Endpoint>> {
        self.find(ip).ok().map(|i| &self.endpoints[i].1)
    }
}

pub(crate) type Services =
    GenericHashMap<ServiceName, Entry, BuildHasherDefault<FingerprintHasher>, DefaultSharedPtr>;

/// The whole ENLS map. Cloning is O(1).
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    pub(crate) services: Services,
    pub(crate) nodes: OrdMap<Arc<str>, Stored<Node>>,
    pub(crate) len: usize,
}

impl State {
    pub(crate) fn get(&self, key: &Key) -> Option<Value> {
        match key {
            Key::Node(name) => Some(Value::Node(self.nodes.get(name)?.value.clone())),
            Key::Service(name) => Some(Value::Service(
                self.services.get(name)?.service.as_ref()?.value.clone(),
            )),
            Key::Endpoint(name, ip) => Some(Value::Endpoint(
                self.services.get(name)?.endpoint(ip)?.value.clone(),
            )),
        }
    }

    /// The digest of the value under `key`.
    pub(crate) fn digest(&self, key: &Key) -> Option<Digest> {
        match key {
            Key::Node(name) => Some(self.nodes.get(name)?.digest),
            Key::Service(name) => Some(self.services.get(name)?.service.as_ref()?.digest),
            Key::Endpoint(name, ip) => Some(self.services.get(name)?.endpoint(ip)?.digest),
        }
    }

    /// Whether `key` holds a value equal to `value`.
    pub(crate) fn holds(&self, key: &Key, value: &Value) -> bool {
        key.kind() == value.kind() && self.digest(key) == Some(Digest::of_value(value))
    }

    /// Stores `value` under `key` unless it already holds an equal value;
    /// returns whether anything changed. The caller checked that kinds
    /// match.
    pub(crate) fn write(&mut self, key: Key, value: Value) -> bool {
        let digest = Digest::of_value(&value);
        if self.digest(&key) == Some(digest) {
            return false;
        }
        let added = match (key, value) {
            (Key::Node(name), Value::Node(value)) => {
                self.nodes.insert(name, Stored { digest, value }).is_none()
            }
            (Key::Service(name), Value::Service(value)) => self
                .services
                .entry(name)
                .or_default()
                .service
                .replace(Stored { digest, value })
                .is_none(),
            (Key::Endpoint(name, ip), Value::Endpoint(value)) => {
                let entry = self.services.entry(name).or_default();
                let stored = Stored { digest, value };
                match entry.find(&ip) {
                    Ok(i) => {
                        Arc::make_mut(&mut entry.endpoints)[i].1 = stored;
                        false
                    }
                    Err(i) => {
                        Arc::make_mut(&mut entry.endpoints).insert(i, (ip, stored));
                        true
                    }
                }
            }
            _ => return false,
        };
        if added {
            self.len += 1;
        }
        true
    }

    /// Writes endpoints of one Service (sorted by address) with one lookup
    /// of its entry; returns the addresses whose value changed.
    pub(crate) fn write_endpoints(
        &mut self,
        name: &ServiceName,
        endpoints: &[(IpAddr, Arc<Endpoint>)],
    ) -> Vec<IpAddr> {
        let mut changed = Vec::new();
        if endpoints.is_empty() {
            return changed;
        }
        let entry = self.services.entry(name.clone()).or_default();
        if entry.endpoints.is_empty() {
            Arc::make_mut(&mut entry.endpoints).reserve_exact(endpoints.len());
        }
        let mut added = 0;
        for (ip, endpoint) in endpoints {
            let digest = Digest::of(&**endpoint);
            let stored = Stored {
                digest,
                value: endpoint.clone(),
            };
            match entry.find(ip) {
                Ok(i) if entry.endpoints[i].1.digest == digest => continue,
                Ok(i) => Arc::make_mut(&mut entry.endpoints)[i].1 = stored,
                Err(i) => {
                    Arc::make_mut(&mut entry.endpoints).insert(i, (*ip, stored));
                    added += 1;
                }
            }
            changed.push(*ip);
        }
        self.len += added;
        changed
    }

    /// Removes `key`; returns whether it was present.
    pub(crate) fn remove(&mut self, key: &Key) -> bool {
        let removed = match key {
            Key::Node(name) => self.nodes.remove(name).is_some(),
            Key::Service(name) | Key::Endpoint(name, _) => {
                let Some(entry) = self.services.get_mut(name) else {
                    return false;
                };
                let removed = match key {
                    Key::Endpoint(_, ip) => match entry.find(ip) {
                        Ok(i) => {
                            Arc::make_mut(&mut entry.endpoints).remove(i);
                            true
                        }
                        Err(_) => false,
                    },
                    _ => entry.service.take().is_some(),
                };
                if entry.is_empty() {
                    self.services.remove(name);
                }
                removed
            }
        };
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// The keys of one kind, without touching values.
    pub(crate) fn keys(&self, kind: Kind) -> Box<dyn Iterator<Item = Key> + '_> {
        match kind {
            Kind::Node => Box::new(self.nodes.keys().map(|n| Key::Node(n.clone()))),
            Kind::Service => Box::new(
                self.services
                    .iter()
                    .filter(|(_, e)| e.service.is_some())
                    .map(|(name, _)| Key::Service(name.clone())),
            ),
            Kind::Endpoint => Box::new(self.services.iter().flat_map(|(name, e)| {
                e.endpoints
                    .iter()
                    .map(move |(ip, _)| Key::Endpoint(name.clone(), *ip))
            })),
        }
    }

    /// Every entry, as keys and values: nodes in name order, then per
    /// Service (in the map's fixed order) the Service and its endpoints in
    /// address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, Value)> + '_ {
        let nodes = self
            .nodes
            .iter()
            .map(|(n, v)| (Key::Node(n.clone()), Value::Node(v.value.clone())));
        let services = self.services.iter().flat_map(|(name, entry)| {
            let service = entry
                .service
                .iter()
                .map(move |s| (Key::Service(name.clone()), Value::Service(s.value.clone())));
            let endpoints = entry.endpoints.iter().map(move |(ip, e)| {
                (
                    Key::Endpoint(name.clone(), *ip),
                    Value::Endpoint(e.value.clone()),
                )
            });
            service.chain(endpoints)
        });
        nodes.chain(services)
    }
}

/// Adds to `keys` the keys that differ between two entries of one Service,
/// comparing digests; shared data is skipped without comparison.
pub(crate) fn entry_keys(
    name: &ServiceName,
    old: &Entry,
    new: &Entry,
    keys: &mut std::collections::BTreeSet<Key>,
) {
    if old.service != new.service {
        keys.insert(Key::Service(name.clone()));
    }
    if Arc::ptr_eq(&old.endpoints, &new.endpoints) {
        return;
    }
    // Both lists are sorted by address: merge them.
    let (a, b) = (&old.endpoints, &new.endpoints);
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let ip = match (a.get(i), b.get(j)) {
            (Some((x, ex)), Some((y, ey))) if x == y => {
                i += 1;
                j += 1;
                if ex == ey {
                    continue;
                }
                x
            }
            (Some((x, _)), next) if next.is_none_or(|(y, _)| x < y) => {
                i += 1;
                x
            }
            (_, Some((y, _))) => {
                j += 1;
                y
            }
            (Some(_), None) | (None, None) => break,
        };
        keys.insert(Key::Endpoint(name.clone(), *ip));
    }
}
