//! The persistent state shared by the writer and its snapshots.
//!
//! Services are indexed by a hash map (HAMT) keyed by their name's
//! fingerprint: a point lookup among 10k Services reads a few nodes. Each
//! Service's endpoints live in one shared, sorted vector of
//! [`EndpointInfo`]s (48 bytes each, inline): compact, listed in address
//! order, found by binary search. Changing an endpoint copies its
//! Service's vector once per transaction, which is O(endpoints of that
//! Service), the same order as projecting that Service for a node, which
//! every change costs anyway; replacing a Service's endpoints adopts the
//! writer's vector, shared, when anything changed. Nodes are few and kept
//! in an ordered map.
//!
//! Every stored Service and Node carries a 128-bit keyed digest of its
//! content, held inline beside it. A write compares digests, so a no-op
//! write never reads the stored value itself (which would cost a cache miss
//! per string it holds). Endpoints need none: their addresses and
//! conditions are inline, and their shared parts compare by pointer first.

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use imbl::shared_ptr::DefaultSharedPtr;
use imbl::{GenericHashMap, OrdMap};
use kpng_model::ServiceInfo;
use kpng_model::v1::{Node, ServiceCidr};
use kpng_model::{EndpointInfo, Key, Kind, ServiceName, Value};
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
pub(crate) type EndpointList = Arc<Vec<EndpointInfo>>;

/// One Service's entry: the Service itself, when known, and its endpoints.
/// An endpoint may arrive before its Service (EndpointSlices and Services
/// are watched separately), so either part may be empty, not both.
#[derive(Clone, Debug, Default)]
pub(crate) struct Entry {
    pub(crate) service: Option<Stored<ServiceInfo>>,
    pub(crate) endpoints: EndpointList,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.service.is_none() && self.endpoints.is_empty()
    }

    fn find(&self, ip: &IpAddr) -> Result<usize, usize> {
        self.endpoints.binary_search_by(|e| e.address().cmp(ip))
    }

    pub(crate) fn endpoint(&self, ip: &IpAddr) -> Option<&EndpointInfo> {
        self.find(ip).ok().map(|i| &self.endpoints[i])
    }

    /// Whether both hold equal values.
    fn same(&self, other: &Entry) -> bool {
        self.service == other.service
            && (Arc::ptr_eq(&self.endpoints, &other.endpoints) || self.endpoints == other.endpoints)
    }
}

pub(crate) type Services =
    GenericHashMap<ServiceName, Entry, BuildHasherDefault<FingerprintHasher>, DefaultSharedPtr>;

/// The whole ENLS map. Cloning is O(1).
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    pub(crate) services: Services,
    pub(crate) nodes: OrdMap<Arc<str>, Stored<Node>>,
    pub(crate) service_cidrs: OrdMap<Arc<str>, Stored<ServiceCidr>>,
    pub(crate) len: usize,
}

impl State {
    /// Whether both hold equal values under the same keys. O(entries).
    pub(crate) fn same(&self, other: &State) -> bool {
        self.len == other.len
            && self.nodes == other.nodes
            && self.service_cidrs == other.service_cidrs
            && self.services.len() == other.services.len()
            && self
                .services
                .iter()
                .all(|(name, entry)| other.services.get(name).is_some_and(|o| entry.same(o)))
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Value> {
        match key {
            Key::Node(name) => Some(Value::Node(self.nodes.get(name)?.value.clone())),
            Key::ServiceCidr(name) => Some(Value::ServiceCidr(
                self.service_cidrs.get(name)?.value.clone(),
            )),
            Key::Service(name) => Some(Value::Service(
                self.services.get(name)?.service.as_ref()?.value.clone(),
            )),
            Key::Endpoint(name, ip) => Some(Value::Endpoint(
                self.services.get(name)?.endpoint(ip)?.clone(),
            )),
        }
    }

    /// Whether `key` holds equal values (or none) here and in `other`.
    pub(crate) fn same_at(&self, other: &State, key: &Key) -> bool {
        match key {
            Key::Node(name) => {
                self.nodes.get(name).map(|s| s.digest) == other.nodes.get(name).map(|s| s.digest)
            }
            Key::ServiceCidr(name) => {
                self.service_cidrs.get(name).map(|s| s.digest)
                    == other.service_cidrs.get(name).map(|s| s.digest)
            }
            Key::Service(name) => {
                let digest = |state: &State| {
                    let entry = state.services.get(name)?;
                    Some(entry.service.as_ref()?.digest)
                };
                digest(self) == digest(other)
            }
            Key::Endpoint(name, ip) => {
                self.services.get(name).and_then(|e| e.endpoint(ip))
                    == other.services.get(name).and_then(|e| e.endpoint(ip))
            }
        }
    }

    /// Whether `key` holds a value equal to `value`.
    pub(crate) fn holds(&self, key: &Key, value: &Value) -> bool {
        match (key, value) {
            (Key::Node(name), Value::Node(v)) => {
                self.nodes.get(name).map(|s| s.digest) == Some(Digest::of(&**v))
            }
            (Key::ServiceCidr(name), Value::ServiceCidr(v)) => {
                self.service_cidrs.get(name).map(|s| s.digest) == Some(Digest::of(&**v))
            }
            (Key::Service(name), Value::Service(v)) => {
                self.services
                    .get(name)
                    .and_then(|e| e.service.as_ref())
                    .map(|s| s.digest)
                    == Some(Digest::of(&**v))
            }
            (Key::Endpoint(name, ip), Value::Endpoint(v)) => self
                .services
                .get(name)
                .and_then(|e| e.endpoint(ip))
                .is_some_and(|e| e == v),
            _ => false,
        }
    }

    /// Stores `value` under `key` unless it already holds an equal value;
    /// returns whether anything changed. The caller checked that kinds
    /// match, and that an endpoint's address is its key's.
    pub(crate) fn write(&mut self, key: Key, value: Value) -> bool {
        // Compare before any mutable lookup: a mutable lookup copies the
        // path to the entry when a snapshot shares it, which a no-op write
        // must not pay for.
        if self.holds(&key, &value) {
            return false;
        }
        let added = match (key, value) {
            (Key::Node(name), Value::Node(value)) => {
                let digest = Digest::of(&*value);
                self.nodes.insert(name, Stored { digest, value }).is_none()
            }
            (Key::ServiceCidr(name), Value::ServiceCidr(value)) => {
                let digest = Digest::of(&*value);
                let stored = Stored { digest, value };
                self.service_cidrs.insert(name, stored).is_none()
            }
            (Key::Service(name), Value::Service(value)) => {
                let digest = Digest::of(&*value);
                let stored = Stored { digest, value };
                let entry = self.services.entry(name).or_default();
                entry.service.replace(stored).is_none()
            }
            (Key::Endpoint(name, ip), Value::Endpoint(value)) => {
                let entry = self.services.entry(name).or_default();
                match entry.find(&ip) {
                    Ok(i) => {
                        Arc::make_mut(&mut entry.endpoints)[i] = value;
                        false
                    }
                    Err(i) => {
                        Arc::make_mut(&mut entry.endpoints).insert(i, value);
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

    /// Replaces the endpoints of one Service with `endpoints` (sorted by
    /// address, one per address) with one lookup of its entry; returns the
    /// addresses that were added, changed or removed. When any was, the
    /// entry adopts `endpoints` itself (shared, not copied).
    pub(crate) fn replace_endpoints(
        &mut self,
        name: &ServiceName,
        endpoints: &EndpointList,
    ) -> Vec<IpAddr> {
        let mut changed = Vec::new();
        let old = match self.services.get(name) {
            Some(entry) => entry.endpoints.clone(),
            None if endpoints.is_empty() => return changed,
            None => EndpointList::default(),
        };
        if Arc::ptr_eq(&old, endpoints) {
            return changed;
        }
        differing(&old, endpoints, |ip| changed.push(ip));
        if changed.is_empty() {
            return changed;
        }
        let entry = self.services.entry(name.clone()).or_default();
        entry.endpoints = endpoints.clone();
        self.len = self.len + endpoints.len() - old.len();
        if entry.is_empty() {
            self.services.remove(name);
        }
        changed
    }

    /// Removes `key`; returns whether it was present.
    pub(crate) fn remove(&mut self, key: &Key) -> bool {
        let removed = match key {
            Key::Node(name) => self.nodes.remove(name).is_some(),
            Key::ServiceCidr(name) => self.service_cidrs.remove(name).is_some(),
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
            Kind::ServiceCidr => Box::new(
                self.service_cidrs
                    .keys()
                    .map(|n| Key::ServiceCidr(n.clone())),
            ),
            Kind::Service => Box::new(
                self.services
                    .iter()
                    .filter(|(_, e)| e.service.is_some())
                    .map(|(name, _)| Key::Service(name.clone())),
            ),
            Kind::Endpoint => Box::new(self.services.iter().flat_map(|(name, e)| {
                e.endpoints
                    .iter()
                    .map(move |e| Key::Endpoint(name.clone(), e.address()))
            })),
        }
    }

    /// Every entry, as keys and values: nodes in name order, ServiceCIDRs
    /// in name order, then per
    /// Service (in the map's fixed order) the Service and its endpoints in
    /// address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, Value)> + '_ {
        let nodes = self
            .nodes
            .iter()
            .map(|(n, v)| (Key::Node(n.clone()), Value::Node(v.value.clone())));
        let cidrs = self.service_cidrs.iter().map(|(n, v)| {
            (
                Key::ServiceCidr(n.clone()),
                Value::ServiceCidr(v.value.clone()),
            )
        });
        let services = self.services.iter().flat_map(|(name, entry)| {
            let service = entry
                .service
                .iter()
                .map(move |s| (Key::Service(name.clone()), Value::Service(s.value.clone())));
            let endpoints = entry.endpoints.iter().map(move |e| {
                (
                    Key::Endpoint(name.clone(), e.address()),
                    Value::Endpoint(e.clone()),
                )
            });
            service.chain(endpoints)
        });
        nodes.chain(cidrs).chain(services)
    }
}

/// Adds to `keys` the keys that differ between two entries of one Service,
/// comparing Service digests and endpoints; shared data is skipped without
/// comparison.
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
    differing(&old.endpoints, &new.endpoints, |ip| {
        keys.insert(Key::Endpoint(name.clone(), ip));
    });
}

/// Calls `f` with each address whose endpoint differs between two lists
/// sorted by address: added, removed or changed. O(len a + len b).
fn differing(a: &[EndpointInfo], b: &[EndpointInfo], mut f: impl FnMut(IpAddr)) {
    let (mut i, mut j) = (0, 0);
    loop {
        let ip = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.address() == y.address() => {
                i += 1;
                j += 1;
                if x == y {
                    continue;
                }
                x.address()
            }
            (Some(x), next) if next.is_none_or(|y| x.address() < y.address()) => {
                i += 1;
                x.address()
            }
            (_, Some(y)) => {
                j += 1;
                y.address()
            }
            (Some(_), None) | (None, None) => break,
        };
        f(ip);
    }
}
