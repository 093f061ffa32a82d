//! A generic revisioned map: the store's contract (one writer, O(1)
//! snapshots, a revision only when something really changed) for any
//! ordered key and comparable value.
//!
//! The ENLS [`Store`](crate::Store) is specialised for Services and their
//! endpoints; [`RevMap`] is the same idea for other desired states, such as
//! the fragments producers publish to `kpng-aggregator`. Its snapshots
//! share structure, so [`MapSnapshot::diff`] skips what two revisions
//! share.

use imbl::OrdMap;

/// A revisioned persistent map. See the module docs.
#[derive(Clone, Debug)]
pub struct RevMap<K: Ord + Clone, V: Clone> {
    current: MapSnapshot<K, V>,
    noop_writes: u64,
}

/// One revision of a [`RevMap`]: an O(1) copy that shares structure with
/// the map it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSnapshot<K: Ord + Clone, V: Clone> {
    revision: u64,
    entries: OrdMap<K, V>,
}

impl<K: Ord + Clone, V: Clone> Default for MapSnapshot<K, V> {
    fn default() -> Self {
        Self {
            revision: 0,
            entries: OrdMap::new(),
        }
    }
}

impl<K: Ord + Clone, V: Clone> MapSnapshot<K, V> {
    /// The revision (0 for an empty map never written).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The entries.
    pub fn entries(&self) -> &OrdMap<K, V> {
        &self.entries
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> Default for RevMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> RevMap<K, V> {
    /// An empty map at revision 0.
    pub fn new() -> Self {
        Self {
            current: MapSnapshot::default(),
            noop_writes: 0,
        }
    }

    /// The current revision, as an O(1) snapshot.
    pub fn snapshot(&self) -> MapSnapshot<K, V> {
        self.current.clone()
    }

    /// The current revision number.
    pub fn revision(&self) -> u64 {
        self.current.revision
    }

    /// Writes that changed nothing, so far.
    pub fn noop_writes(&self) -> u64 {
        self.noop_writes
    }

    /// Starts a transaction. Nothing is visible until it commits.
    pub fn begin(&mut self) -> MapTxn<'_, K, V> {
        MapTxn {
            entries: self.current.entries.clone(),
            changed: false,
            map: self,
        }
    }

    /// Puts back an earlier revision's content as a new revision (a
    /// rejected change is undone this way); no revision if equal.
    pub fn restore(&mut self, to: &MapSnapshot<K, V>) -> Option<u64> {
        let mut txn = self.begin();
        txn.replace(to.entries.clone());
        txn.commit()
    }
}

/// A transaction on a [`RevMap`].
#[derive(Debug)]
pub struct MapTxn<'a, K: Ord + Clone, V: Clone> {
    map: &'a mut RevMap<K, V>,
    entries: OrdMap<K, V>,
    changed: bool,
}

impl<K: Ord + Clone, V: Clone + PartialEq> MapTxn<'_, K, V> {
    /// Sets `key`; returns whether it changed anything.
    pub fn set(&mut self, key: K, value: V) -> bool {
        if self.entries.get(&key) == Some(&value) {
            self.map.noop_writes += 1;
            return false;
        }
        self.entries.insert(key, value);
        self.changed = true;
        true
    }

    /// Deletes `key`; returns whether it was there.
    pub fn delete(&mut self, key: &K) -> bool {
        let removed = self.entries.remove(key).is_some();
        self.changed |= removed;
        removed
    }

    /// Replaces the whole content (a producer publishing its whole state);
    /// unchanged entries keep their structure.
    pub fn replace(&mut self, entries: OrdMap<K, V>) {
        if self.entries == entries {
            self.map.noop_writes += 1;
            return;
        }
        self.entries = entries;
        self.changed = true;
    }

    /// The value `key` has in this transaction.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key)
    }

    /// Commits: a new revision if anything changed, else `None`.
    pub fn commit(self) -> Option<u64> {
        if !self.changed || self.entries == self.map.current.entries {
            return None;
        }
        self.map.current = MapSnapshot {
            revision: self.map.current.revision + 1,
            entries: self.entries,
        };
        Some(self.map.current.revision)
    }
}

/// One difference between two revisions of a [`RevMap`], or two
/// snapshots of the ENLS [`Store`](crate::Store) (`MapOp<Key, Value>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapOp<K, V> {
    /// The key now holds this value (created or changed).
    Set(K, V),
    /// The key went away.
    Delete(K),
}

impl<K, V> MapOp<K, V> {
    /// The key this op is about.
    pub fn key(&self) -> &K {
        match self {
            MapOp::Set(k, _) | MapOp::Delete(k) => k,
        }
    }
}

impl<K, V> MapSnapshot<K, V>
where
    K: Ord + Clone,
    V: Clone + PartialEq,
{
    /// The ops that turn this revision into `to`, in key order. Parts the
    /// two revisions share are skipped without being compared, so two
    /// revisions of one map diff in O(changes × log size). The ENLS
    /// store's snapshots diff the same way ([`Snapshot::diff`](crate::Snapshot::diff)).
    pub fn diff(&self, to: &Self) -> Vec<MapOp<K, V>> {
        use imbl::ordmap::DiffItem;
        self.entries()
            .diff(to.entries())
            .map(|item| match item {
                DiffItem::Add(k, v) => MapOp::Set(k.clone(), v.clone()),
                DiffItem::Update { new: (k, v), .. } => MapOp::Set(k.clone(), v.clone()),
                DiffItem::Remove(k, _) => MapOp::Delete(k.clone()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_only_for_real_changes() {
        let mut map = RevMap::<String, u32>::new();
        let mut txn = map.begin();
        txn.set("a".into(), 1);
        assert_eq!(txn.commit(), Some(1));
        let before = map.snapshot();
        let mut txn = map.begin();
        assert!(!txn.set("a".into(), 1));
        assert_eq!(txn.commit(), None);
        // Set then put back within one transaction: no revision.
        let mut txn = map.begin();
        txn.set("a".into(), 2);
        txn.set("a".into(), 1);
        assert_eq!(txn.commit(), None);
        let mut txn = map.begin();
        txn.set("b".into(), 2);
        assert_eq!(txn.commit(), Some(2));
        assert_eq!(before.len(), 1, "snapshots do not move");
        assert_eq!(map.restore(&before), Some(3));
        assert_eq!(map.snapshot().entries(), before.entries());
        assert_eq!(map.restore(&before), None);
    }
}
