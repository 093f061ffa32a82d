//! The elements of one set as the Services claim them, held compactly.
//!
//! At 10k Services × 10 endpoints the backend wants ~120k elements, 100k
//! of them in one pick map. Kept as a `BTreeMap<Elem, u32>`, an element
//! cost ~120 bytes (a 64-byte `Elem`, its count, the tree's slack): 13.6 MB,
//! the largest part of a node proxy's heap. Here the common ones cost
//! ~32 bytes.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::render::{Elem, Key, Value};

/// The elements of one set, each with how many Services claim it.
///
/// Elements of the set's common shape (one key width, and no value or a
/// NAT target of one width: every element of the pick maps and of most
/// sets) are packed into fixed-width records, one per key: the key's
/// bytes, the target's, and the count (28 bytes for an IPv4 pick
/// element), found by a hash table of record numbers; a set whose elements
/// carry comments (`cluster-ips`) keeps them in a list beside the
/// records. Anything else goes to a plain map beside them, which stays
/// small: verdicts (one per Service port), and a second claim on a key
/// with another value (two Services claiming one externalIP and port).
///
/// Of the claims on one key, the kernel gets the least ([`Claims::holder`]),
/// whatever order they came in.
#[derive(Clone, Debug, Default)]
pub(crate) struct Claims {
    packed: Packed,
    other: BTreeMap<Elem, u32>,
}

impl Claims {
    /// One more claim on `e`.
    pub(crate) fn add(&mut self, e: &Elem) {
        match self.packed.find(&e.key) {
            Some(i) if self.packed.holds(i, e) => {
                self.packed.add_count(i, 1);
                return;
            }
            Some(_) => {}
            None if self.packed.fits(e) && !self.other.contains_key(e) => {
                self.packed.insert(e, 1);
                return;
            }
            None => {}
        }
        *self.other.entry(e.clone()).or_default() += 1;
    }

    /// One claim fewer on `e` (none: nothing happens).
    pub(crate) fn remove(&mut self, e: &Elem) {
        if let Some(i) = self.packed.find(&e.key)
            && self.packed.holds(i, e)
        {
            if self.packed.add_count(i, -1) == 0 {
                self.packed.remove(i);
                self.promote(&e.key);
            }
            return;
        }
        if let Some(n) = self.other.get_mut(e) {
            *n -= 1;
            if *n == 0 {
                self.other.remove(e);
            }
        }
    }

    /// Moves a claim on `key` that fits the packed records there, now that
    /// none holds the key.
    fn promote(&mut self, key: &Key) {
        let next = claims_on(&self.other, key)
            .find(|(e, _)| self.packed.fits(e))
            .map(|(e, n)| (e.clone(), *n));
        if let Some((e, n)) = next {
            self.other.remove(&e);
            self.packed.insert(&e, n);
        }
    }

    /// The element that holds `key`: the least of its claims.
    pub(crate) fn holder(&self, key: &Key) -> Option<Elem> {
        let packed = self.packed.find(key).and_then(|i| self.packed.elem(i));
        let other = claims_on(&self.other, key).next().map(|(e, _)| e.clone());
        match (packed, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Every claim, in order (by key, then value).
    fn all(&self) -> impl Iterator<Item = Elem> + '_ {
        Merge {
            a: self.packed.sorted().peekable(),
            b: self.other.keys().cloned().peekable(),
        }
    }

    /// One element per key, in order: the holders. Claims beyond the
    /// first on a key are logged.
    pub(crate) fn holders<'a>(&'a self, set: &'a str) -> impl Iterator<Item = Elem> + 'a {
        let mut last: Option<Key> = None;
        self.all().filter(move |e| {
            if last == Some(e.key) {
                tracing::warn!(set, dropped = ?e, "two Services claim one key; keeping the first");
                return false;
            }
            last = Some(e.key);
            true
        })
    }

    /// How many distinct elements are claimed (at least the holders).
    pub(crate) fn len(&self) -> usize {
        self.packed.len() + self.other.len()
    }

    /// Whether no element is claimed.
    pub(crate) fn is_empty(&self) -> bool {
        self.packed.len() == 0 && self.other.is_empty()
    }

    /// Gives back what growth left unused (after a full sync).
    pub(crate) fn shrink(&mut self) {
        self.packed.shrink();
    }
}

/// The claims on `key` in `other`, least first.
fn claims_on<'a>(
    other: &'a BTreeMap<Elem, u32>,
    key: &'a Key,
) -> impl Iterator<Item = (&'a Elem, &'a u32)> + 'a {
    let from = Elem {
        key: *key,
        value: Value::None,
        comment: None,
    };
    other.range(from..).take_while(move |(e, _)| e.key == *key)
}

/// Two sorted streams as one.
struct Merge<A: Iterator<Item = Elem>, B: Iterator<Item = Elem>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = Elem>, B: Iterator<Item = Elem>> Iterator for Merge<A, B> {
    type Item = Elem;

    fn next(&mut self) -> Option<Elem> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b < a => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

/// The shape of a set's packed records: the key's width, and the
/// target's (`None`: elements without a value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    key: usize,
    target: Option<usize>,
}

impl Shape {
    fn of(e: &Elem) -> Option<Self> {
        let target = match &e.value {
            Value::None => None,
            Value::Target(t) => Some(t.as_slice().len()),
            Value::Goto(_) | Value::Jump(_) => return None,
        };
        Some(Self {
            key: e.key.as_slice().len(),
            target,
        })
    }

    fn width(self) -> usize {
        self.key + self.target.unwrap_or(0) + COUNT
    }
}

/// The bytes of a record's count.
const COUNT: usize = 4;

/// Fixed-width records (key, target, count) in one buffer, and a hash
/// table of their numbers by key. A removed record's place is taken by
/// the last one.
#[derive(Clone, Default)]
struct Packed {
    shape: Option<Shape>,
    records: Vec<u8>,
    /// Each record's comment, by record number: empty while no record
    /// has one (the pick maps), else one per record.
    comments: Vec<Option<Arc<str>>>,
    index: HashTable<u32>,
    /// foldhash, seeded per table: SipHash was a twentieth of a full
    /// sync at a million elements.
    hasher: RandomState,
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("shape", &self.shape)
            .field("len", &self.len())
            .finish()
    }
}

impl Packed {
    fn len(&self) -> usize {
        self.shape.map_or(0, |s| {
            self.records.len().checked_div(s.width()).unwrap_or(0)
        })
    }

    fn record(&self, i: u32) -> &[u8] {
        let width = self.shape.map_or(0, Shape::width);
        let start = i as usize * width;
        self.records.get(start..start + width).unwrap_or_default()
    }

    fn key_of(&self, i: u32) -> &[u8] {
        let n = self.shape.map_or(0, |s| s.key);
        self.record(i).get(..n).unwrap_or_default()
    }

    /// Whether `e` could have a record here.
    fn fits(&self, e: &Elem) -> bool {
        match (self.shape, Shape::of(e)) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(have), Some(want)) => have == want,
        }
    }

    fn find(&self, key: &Key) -> Option<u32> {
        let bytes = key.as_slice();
        if self.shape.is_none_or(|s| s.key != bytes.len()) {
            return None;
        }
        let hash = self.hasher.hash_one(bytes);
        self.index.find(hash, |&i| self.key_of(i) == bytes).copied()
    }

    /// Whether record `i` is `e` (its value and comment).
    fn holds(&self, i: u32, e: &Elem) -> bool {
        let comment = self.comments.get(i as usize).and_then(Option::as_deref);
        self.value_is(i, &e.value) && comment == e.comment.as_deref()
    }

    /// Whether record `i` holds `value`.
    fn value_is(&self, i: u32, value: &Value) -> bool {
        let Some(shape) = self.shape else {
            return false;
        };
        let stored = self
            .record(i)
            .get(shape.key..shape.width() - COUNT)
            .unwrap_or_default();
        match value {
            Value::None => shape.target.is_none(),
            Value::Target(t) => shape.target.is_some() && t.as_slice() == stored,
            Value::Goto(_) | Value::Jump(_) => false,
        }
    }

    /// Adds `delta` to record `i`'s count; returns the new count.
    fn add_count(&mut self, i: u32, delta: i64) -> u32 {
        let Some(width) = self.shape.map(Shape::width) else {
            return 0;
        };
        let at = i as usize * width + width - COUNT;
        let Some(bytes) = self.records.get_mut(at..at + COUNT) else {
            return 0;
        };
        let mut count = [0; COUNT];
        count.copy_from_slice(bytes);
        let now = u32::try_from(i64::from(u32::from_le_bytes(count)) + delta).unwrap_or(0);
        bytes.copy_from_slice(&now.to_le_bytes());
        now
    }

    /// A record for `e` (which [`fits`](Self::fits) and has none).
    fn insert(&mut self, e: &Elem, count: u32) {
        let Some(shape) = Shape::of(e) else { return };
        self.shape.get_or_insert(shape);
        let Ok(i) = u32::try_from(self.len()) else {
            return;
        };
        self.records.extend_from_slice(e.key.as_slice());
        if let Value::Target(t) = &e.value {
            self.records.extend_from_slice(t.as_slice());
        }
        self.records.extend_from_slice(&count.to_le_bytes());
        if e.comment.is_some() || !self.comments.is_empty() {
            self.comments.resize(i as usize, None);
            self.comments.push(e.comment.clone());
        }
        let Self {
            records,
            index,
            hasher,
            ..
        } = self;
        let key_of = |j: &u32| {
            let start = *j as usize * shape.width();
            hasher.hash_one(records.get(start..start + shape.key).unwrap_or_default())
        };
        index.insert_unique(hasher.hash_one(e.key.as_slice()), i, key_of);
    }

    /// Removes record `i`; the last record takes its number.
    fn remove(&mut self, i: u32) {
        let Some(width) = self.shape.map(Shape::width) else {
            return;
        };
        let hash = self.hasher.hash_one(self.key_of(i));
        if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        let last = u32::try_from(self.len().saturating_sub(1)).unwrap_or(0);
        if i != last {
            let hash = self.hasher.hash_one(self.key_of(last));
            if let Some(j) = self.index.find_mut(hash, |&j| j == last) {
                *j = i;
            }
            let (from, to) = (last as usize * width, i as usize * width);
            self.records.copy_within(from..from + width, to);
        }
        self.records.truncate(last as usize * width);
        if (i as usize) < self.comments.len() {
            // The last record's comment moves with it.
            self.comments.swap_remove(i as usize);
        }
        if self.records.is_empty() {
            self.shape = None;
            self.comments = Vec::new();
        }
    }

    /// Record `i` as an element.
    fn elem(&self, i: u32) -> Option<Elem> {
        let shape = self.shape?;
        let record = self.record(i);
        let key = Key::of(&[record.get(..shape.key)?])?;
        let value = match shape.target {
            None => Value::None,
            Some(n) => Value::Target(crate::render::Bytes::of(&[
                record.get(shape.key..shape.key + n)?
            ])?),
        };
        Some(Elem {
            key,
            value,
            comment: self.comments.get(i as usize).cloned().flatten(),
        })
    }

    /// Every record as an element, by key (one per key, so in order).
    fn sorted(&self) -> impl Iterator<Item = Elem> + '_ {
        let n = u32::try_from(self.len()).unwrap_or(u32::MAX);
        let mut order: Vec<u32> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| self.key_of(a).cmp(self.key_of(b)));
        order.into_iter().filter_map(|i| self.elem(i))
    }

    fn shrink(&mut self) {
        self.records.shrink_to_fit();
        self.comments.shrink_to_fit();
        let Some(shape) = self.shape else { return };
        let Self {
            records,
            index,
            hasher,
            ..
        } = self;
        index.shrink_to_fit(|j| {
            let start = *j as usize * shape.width();
            hasher.hash_one(records.get(start..start + shape.key).unwrap_or_default())
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::Claims;
    use crate::render::{Bytes, Elem, Key, Value};

    /// Elements over a few keys of two widths and values of every kind,
    /// so that claims collide.
    fn elem() -> impl Strategy<Value = Elem> {
        let key = (0u8..6, prop::bool::weighted(0.9)).prop_map(|(k, wide)| {
            let bytes = [k, 0, 0, 1, 7, 7, 7, 7];
            Key::of(&[if wide { &bytes[..] } else { &bytes[..4] }]).expect("fits")
        });
        let value = prop_oneof![
            4 => (0u8..3).prop_map(|t| Value::Target(Bytes::of(&[&[10, 0, 0, t], &[0, 80]]).expect("fits"))),
            1 => Just(Value::None),
            1 => (0u8..2).prop_map(|c| Value::Goto(Arc::from(format!("chain-{c}")))),
            1 => Just(Value::Target(Bytes::of(&[&[1; 16], &[0, 80]]).expect("fits"))),
        ];
        // Comments too: records hold them beside their bytes.
        let comment = prop_oneof![
            2 => Just(None),
            1 => (0u8..2).prop_map(|c| Some(Arc::from(format!("ns/svc-{c}")))),
        ];
        (key, value, comment).prop_map(|(key, value, comment)| Elem {
            key,
            value,
            comment,
        })
    }

    proptest! {
        /// After any adds and removes, the holders are a plain counted
        /// map's: the least claim on each key, in order.
        #[test]
        fn claims_hold_what_a_counted_map_holds(
            ops in prop::collection::vec((elem(), prop::bool::weighted(0.6)), 1..200),
        ) {
            let mut claims = Claims::default();
            let mut model: BTreeMap<Elem, u32> = BTreeMap::new();
            for (e, add) in ops {
                if add {
                    claims.add(&e);
                    *model.entry(e).or_default() += 1;
                } else {
                    claims.remove(&e);
                    if let Some(n) = model.get_mut(&e) {
                        *n -= 1;
                        if *n == 0 {
                            model.remove(&e);
                        }
                    }
                }
                let mut want: Vec<Elem> = Vec::new();
                for e in model.keys() {
                    if want.last().is_none_or(|l| l.key != e.key) {
                        want.push(e.clone());
                    }
                }
                let have: Vec<Elem> = claims.holders("t").collect();
                prop_assert_eq!(&have, &want);
                for e in model.keys() {
                    let first = want.iter().find(|w| w.key == e.key).cloned();
                    prop_assert_eq!(claims.holder(&e.key), first);
                }
                prop_assert_eq!(claims.is_empty(), model.is_empty());
            }
            claims.shrink();
            let have: Vec<Elem> = claims.holders("t").collect();
            prop_assert_eq!(have.len(), model.keys().map(|e| e.key).collect::<std::collections::BTreeSet<_>>().len());
        }
    }
}
