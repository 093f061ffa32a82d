//! The maps' sizes: those that hold the cluster (records, endpoint sets,
//! live ClusterIPs, ...) are sized from it when they are loaded, with
//! headroom, and grown by a planned swap when it outgrows them; those
//! that hold connections (affinity, flows, the reverse of translated
//! sockets: LRU maps) keep a size of their own, today's by default.
//! An operator can fix any of them ([`MapSizes::fix`]).
//!
//! Sizing rule: a map sized from the cluster gets the next power of two at
//! or above 1.5 × what the cluster needs, and at least
//! [`MapSizes::min_entries`] (1,024 by default). It is grown when a round
//! would fill it past 3/4 (so it lands at twice its size), never shrunk
//! while kpng runs. The 1/4 left is for a round's passing needs: a new
//! endpoint set is written before the old one goes, pages past a set's
//! new end are deleted a round later.

use std::collections::BTreeMap;
use std::fmt;

use crate::Error;

/// The maps sized from the cluster, by their names in the object.
pub const CLUSTER_MAPS: [&str; 8] = [
    "kpng_services",
    "kpng_slots",
    "kpng_members",
    "kpng_live",
    "kpng_cidrs",
    "kpng_external",
    "kpng_ranges",
    "kpng_maglev",
];

/// The maps that hold connections (LRU maps: the oldest entry goes when
/// one is full), with their default sizes: ClientIP affinity, the reverse
/// of translated sockets, unconnected UDP flows, and the tc programs'
/// flows, replies, masqueraded flows and affinity.
pub const CONNECTION_MAPS: [(&str, u32); 8] = [
    ("kpng_affinity", 1 << 14),
    ("kpng_reverse", 1 << 16),
    ("kpng_flows", 1 << 14),
    ("kpng_ext_flows", 1 << 16),
    ("kpng_ext_replies", 1 << 16),
    ("kpng_snat", 1 << 16),
    ("kpng_snat_out", 1 << 16),
    ("kpng_ext_affinity", 1 << 14),
];

/// The default floor of a map sized from the cluster.
pub const DEFAULT_MIN_ENTRIES: u32 = 1024;

/// Sizes of the backend's maps: how those holding the cluster are sized,
/// and the sizes an operator fixed.
///
/// ```
/// use kpng_backend_ebpf::MapSizes;
///
/// let sizes = MapSizes::default().fix("kpng_services", 1 << 20)?.fix("kpng_affinity", 1 << 16)?;
/// assert_eq!(sizes.fixed("kpng_services"), Some(1 << 20));
/// // Sized from the cluster: 1.5 × the need, a power of two, the floor.
/// assert_eq!(sizes.for_need(100_000), 1 << 18);
/// assert_eq!(sizes.for_need(10), 1024);
/// assert!(MapSizes::default().fix("kpng_nothing", 1).is_err());
/// # Ok::<(), kpng_backend_ebpf::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MapSizes {
    /// The least size of a map sized from the cluster.
    pub min_entries: u32,
    /// Sizes fixed by the operator, by map name. A map of
    /// [`CLUSTER_MAPS`] here is never resized: a round that needs more
    /// fails, naming it. A map of [`CONNECTION_MAPS`] gets this size
    /// instead of its default.
    pub fixed: BTreeMap<String, u32>,
}

impl Default for MapSizes {
    fn default() -> Self {
        Self {
            min_entries: DEFAULT_MIN_ENTRIES,
            fixed: BTreeMap::new(),
        }
    }
}

impl MapSizes {
    /// Fixes map `name` at `entries` (at least 1).
    pub fn fix(mut self, name: &str, entries: u32) -> Result<Self, Error> {
        let known = CLUSTER_MAPS.contains(&name) || CONNECTION_MAPS.iter().any(|(n, _)| *n == name);
        if !known || entries == 0 {
            return Err(Error::MapSize {
                name: name.to_owned(),
                entries,
            });
        }
        self.fixed.insert(name.to_owned(), entries);
        Ok(self)
    }

    /// Sets the floor of the maps sized from the cluster (at least 1).
    #[must_use]
    pub fn min_entries(mut self, entries: u32) -> Self {
        self.min_entries = entries.max(1);
        self
    }

    /// The size the operator fixed for `name`.
    pub fn fixed(&self, name: &str) -> Option<u32> {
        self.fixed.get(name).copied()
    }

    /// Parses `NAME=ENTRIES,...` (the `--bpf-map-sizes` flag) onto these
    /// sizes.
    ///
    /// ```
    /// use kpng_backend_ebpf::MapSizes;
    ///
    /// let sizes = MapSizes::default().parse_fixed("kpng_live=4096, kpng_reverse=262144")?;
    /// assert_eq!(sizes.fixed("kpng_reverse"), Some(262_144));
    /// assert!(MapSizes::default().parse_fixed("kpng_live=lots").is_err());
    /// # Ok::<(), kpng_backend_ebpf::Error>(())
    /// ```
    pub fn parse_fixed(mut self, list: &str) -> Result<Self, Error> {
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, entries) = item.split_once('=').unwrap_or((item, ""));
            let entries = entries.trim().parse::<u32>().unwrap_or(0);
            self = self.fix(name.trim(), entries)?;
        }
        Ok(self)
    }

    /// The size of a map sized from the cluster that needs `need`
    /// entries: the next power of two at or above 1.5 × `need`, at least
    /// [`min_entries`](Self::min_entries).
    pub fn for_need(&self, need: u64) -> u32 {
        let want = need.saturating_add(need.div_ceil(2)).max(1);
        let size = want.checked_next_power_of_two().unwrap_or(u64::MAX);
        u32::try_from(size).unwrap_or(1 << 31).max(self.min_entries)
    }

    /// The size to load `name` with when it needs `need` entries: the
    /// fixed size, or one from the need (cluster maps) or the default
    /// (connection maps).
    pub(crate) fn load_size(&self, name: &str, need: u64) -> u32 {
        if let Some(n) = self.fixed(name) {
            return n;
        }
        match CONNECTION_MAPS.iter().find(|(n, _)| *n == name) {
            Some((_, default)) => *default,
            None => self.for_need(need),
        }
    }
}

/// What the cluster needs of each map of [`CLUSTER_MAPS`], in entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage(pub(crate) [u64; 8]);

impl Usage {
    pub(crate) const SERVICES: usize = 0;
    pub(crate) const SLOTS: usize = 1;
    pub(crate) const MEMBERS: usize = 2;
    pub(crate) const LIVE: usize = 3;
    pub(crate) const CIDRS: usize = 4;
    pub(crate) const EXTERNAL: usize = 5;
    pub(crate) const RANGES: usize = 6;
    pub(crate) const MAGLEV: usize = 7;

    pub(crate) fn add(&mut self, other: &Usage) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    pub(crate) fn sub(&mut self, other: &Usage) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_sub(b);
        }
    }

    /// Each map's need, by name.
    pub(crate) fn by_name(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        CLUSTER_MAPS.into_iter().zip(self.0)
    }
}

/// The sizes of the maps sized from the cluster, as loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Capacity(pub(crate) BTreeMap<&'static str, u32>);

/// What a round asks of the maps, against what they hold.
#[derive(Debug)]
pub(crate) enum Plan {
    /// It fits.
    Fits,
    /// Maps to grow (a swap), with their new sizes.
    Grow(BTreeMap<&'static str, u32>),
}

impl Capacity {
    /// Whether `need` fits, and if not what to grow; fails when a map
    /// that cannot grow (a fixed size) is short.
    pub(crate) fn plan(&self, sizes: &MapSizes, need: &Usage) -> Result<Plan, Error> {
        let mut grow = BTreeMap::new();
        for (name, entries) in need.by_name() {
            let Some(&max) = self.0.get(name) else {
                continue;
            };
            let max64 = u64::from(max);
            if let Some(fixed) = sizes.fixed(name) {
                if entries > u64::from(fixed) {
                    return Err(Error::MapFull {
                        map: name,
                        max_entries: fixed,
                        need: entries,
                    });
                }
                // Pinned by a run with another size: to the one fixed.
                if fixed != max {
                    grow.insert(name, fixed);
                }
                continue;
            }
            // Past 3/4: grow.
            if entries > max64 - max64 / 4 {
                let new = sizes.for_need(entries).max(max.saturating_mul(2));
                if u64::from(new) < entries {
                    return Err(Error::MapFull {
                        map: name,
                        max_entries: max,
                        need: entries,
                    });
                }
                grow.insert(name, new);
            }
        }
        Ok(if grow.is_empty() {
            Plan::Fits
        } else {
            Plan::Grow(grow)
        })
    }
}

/// How full one map is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MapFill {
    /// The map's name.
    pub map: &'static str,
    /// The entries the backend's state asks of it.
    pub entries: u64,
    /// Its size.
    pub max_entries: u32,
}

impl fmt::Display for MapFill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.map, self.entries, self.max_entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_from_the_need_with_headroom_and_a_floor() {
        let sizes = MapSizes::default();
        assert_eq!(sizes.for_need(0), 1024);
        assert_eq!(sizes.for_need(682), 1024);
        assert_eq!(sizes.for_need(683), 2048);
        assert_eq!(sizes.for_need(100_000), 1 << 18);
        assert_eq!(sizes.for_need(1_000_000), 1 << 21);
        assert_eq!(MapSizes::default().min_entries(4).for_need(3), 8);
    }

    #[test]
    fn a_map_past_three_quarters_grows_and_a_fixed_one_fails() {
        let capacity = Capacity(CLUSTER_MAPS.iter().map(|&n| (n, 16)).collect());
        let sizes = MapSizes::default().min_entries(4);
        let mut need = Usage::default();
        need.0[Usage::SERVICES] = 12;
        assert!(matches!(capacity.plan(&sizes, &need), Ok(Plan::Fits)));
        need.0[Usage::SERVICES] = 13;
        match capacity.plan(&sizes, &need) {
            Ok(Plan::Grow(grow)) => {
                assert_eq!(
                    grow.into_iter().collect::<Vec<_>>(),
                    [("kpng_services", 32)]
                );
            }
            other => panic!("{other:?}"),
        }
        let fixed = sizes.fix("kpng_services", 16).expect("known");
        assert!(matches!(capacity.plan(&fixed, &need), Ok(Plan::Fits)));
        need.0[Usage::SERVICES] = 17;
        let error = capacity.plan(&fixed, &need).expect_err("full");
        assert_eq!(
            error.to_string(),
            "map kpng_services is full: it holds 16 entries and the round needs 17 (the previous state stays programmed; raise its size: --bpf-map-sizes kpng_services=N)"
        );
    }
}
