//! Desired and applied nft objects, and the scripts between them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::netlink::{self, Verb};
use kpng_aggregator::nft::{Family, Fragment};

use crate::render::{
    CLUSTER_CIDRS, CLUSTER_IPS, Elem, FIREWALL_IPS, Fam, HAIRPIN, NO_ENDPOINT_NODEPORTS,
    NO_ENDPOINT_SERVICES, NODEPORT_IPS, Pick, Render, SERVICE_CIDRS, SERVICE_IPS,
    SERVICE_NODEPORTS, Shared,
};

/// The objects of one family's table, with reference counts on chains and
/// elements: Service ports alike share a chain, and several Services may
/// contribute the same hairpin pair.
#[derive(Clone, Debug, Default)]
pub(crate) struct Objects {
    pub(crate) chains: BTreeMap<String, (Vec<String>, u32)>,
    pub(crate) elements: BTreeMap<&'static str, BTreeMap<Elem, u32>>,
    pub(crate) sets: BTreeMap<String, String>,
    pub(crate) picks: BTreeSet<(Pick, usize)>,
    pub(crate) shared: BTreeSet<Shared>,
}

/// What changed in [`Objects`] since the last sync: the names to compare
/// with what was applied.
#[derive(Clone, Debug, Default)]
pub(crate) struct Touched {
    chains: BTreeSet<String>,
    elements: BTreeMap<&'static str, BTreeSet<Elem>>,
    sets: BTreeSet<String>,
}

impl Objects {
    /// Removes a render's contributions, recording what it touched (not
    /// needed for a full sync, which replaces everything).
    pub(crate) fn remove(&mut self, render: &Render, mut touched: Option<&mut Touched>) {
        for name in render.chains.keys() {
            if let Some((_, n)) = self.chains.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    self.chains.remove(name);
                }
            }
            if let Some(t) = touched.as_deref_mut() {
                t.chains.insert(name.clone());
            }
        }
        for name in render.sets.keys() {
            self.sets.remove(name);
            if let Some(t) = touched.as_deref_mut() {
                t.sets.insert(name.clone());
            }
        }
        for (map, elements) in &render.elements {
            let counts = self.elements.entry(map).or_default();
            for e in elements {
                if let Some(n) = counts.get_mut(e) {
                    *n -= 1;
                    if *n == 0 {
                        counts.remove(e);
                    }
                }
                if let Some(t) = touched.as_deref_mut() {
                    t.elements.entry(map).or_default().insert(e.clone());
                }
            }
        }
    }

    /// Adds a render's contributions, recording what it touched.
    pub(crate) fn add(&mut self, render: &Render, mut touched: Option<&mut Touched>) {
        for (name, rules) in &render.chains {
            let entry = self
                .chains
                .entry(name.clone())
                .or_insert_with(|| (Vec::new(), 0));
            // A shared chain's rules are the same for every user.
            entry.0.clone_from(rules);
            entry.1 += 1;
            if let Some(t) = touched.as_deref_mut() {
                t.chains.insert(name.clone());
            }
        }
        for (name, decl) in &render.sets {
            self.sets.insert(name.clone(), decl.clone());
            if let Some(t) = touched.as_deref_mut() {
                t.sets.insert(name.clone());
            }
        }
        for (map, elements) in &render.elements {
            let counts = self.elements.entry(map).or_default();
            for e in elements {
                *counts.entry(e.clone()).or_default() += 1;
                if let Some(t) = touched.as_deref_mut() {
                    t.elements.entry(map).or_default().insert(e.clone());
                }
            }
        }
        // Pick chains are shared and cheap: once made they stay until the
        // next full sync.
        self.picks.extend(render.picks.iter().copied());
        self.shared.extend(render.shared.iter().copied());
    }
}

/// The key of an element: the part before ` : ` in a map, all of it in a
/// set.
fn key_of(element: &str) -> &str {
    element.split_once(" : ").map_or(element, |(key, _)| key)
}

/// The element that holds `key` among sorted elements: the first one with
/// that key. Two Services may claim one key (the same externalIP and port,
/// say); nft would refuse the whole transaction, so one wins, the same one
/// every time, and the node keeps working.
fn holder<'a, V>(elements: &'a BTreeMap<Elem, V>, key: &str) -> Option<&'a Elem> {
    elements
        .range::<str, _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded))
        .next()
        .map(|(e, _)| e)
        .filter(|e| key_of(e) == key)
}

fn applied_holder<'a>(elements: &'a BTreeSet<Elem>, key: &str) -> Option<&'a Elem> {
    elements
        .range::<str, _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded))
        .next()
        .filter(|e| key_of(e) == key)
}

/// One element per key, in order; claims beyond the first are logged.
fn holders<'a, V>(map: &str, elements: &'a BTreeMap<Elem, V>) -> Vec<&'a Elem> {
    let mut out: Vec<&Elem> = Vec::with_capacity(elements.len());
    for e in elements.keys() {
        match out.last() {
            Some(last) if key_of(last) == key_of(e) => {
                tracing::warn!(map, kept = %last, dropped = %e, "two Services claim one key; keeping the first");
            }
            _ => out.push(e),
        }
    }
    out
}

fn strs(rules: &[String]) -> impl Iterator<Item = &str> {
    rules.iter().map(String::as_str)
}

/// The distinct keys of touched elements.
fn touched_keys(elements: &BTreeSet<Elem>) -> BTreeSet<&str> {
    elements.iter().map(|e| key_of(e)).collect()
}

/// How many pick chains (per kind, for 1..=N endpoints) a full sync makes:
/// at least 16, and a power of two above the largest endpoint count in use.
/// A later need beyond it triggers a full sync that doubles it.
pub(crate) fn pick_capacity(picks: &BTreeSet<(Pick, usize)>) -> usize {
    let most = picks.iter().map(|(_, n)| *n).max().unwrap_or(0);
    most.max(16).next_power_of_two()
}

/// What the kernel holds, as far as we know: the last applied objects.
#[derive(Clone, Debug, Default)]
pub(crate) struct Applied {
    pub(crate) chains: BTreeMap<String, Vec<String>>,
    pub(crate) elements: BTreeMap<&'static str, BTreeSet<Elem>>,
    pub(crate) sets: BTreeMap<String, String>,
    /// Pick chains exist for 1..=this many endpoints, of every kind.
    pub(crate) pick_capacity: usize,
}

impl Applied {
    pub(crate) fn from_objects(objects: &Objects) -> Self {
        Self {
            chains: objects
                .chains
                .iter()
                .map(|(n, (r, _))| (n.clone(), r.clone()))
                .collect(),
            elements: objects
                .elements
                .iter()
                .map(|(m, e)| (*m, holders(m, e).into_iter().cloned().collect()))
                .collect(),
            sets: objects.sets.clone(),
            pick_capacity: pick_capacity(&objects.picks),
        }
    }

    /// Brings the touched names in line with `desired` (after a successful
    /// incremental transaction).
    pub(crate) fn update(&mut self, desired: &Objects, touched: &Touched) {
        for name in &touched.chains {
            match desired.chains.get(name) {
                Some((rules, _)) => self.chains.insert(name.clone(), rules.clone()),
                None => self.chains.remove(name),
            };
        }
        for name in &touched.sets {
            match desired.sets.get(name) {
                Some(decl) => self.sets.insert(name.clone(), decl.clone()),
                None => self.sets.remove(name),
            };
        }
        for (map, elements) in &touched.elements {
            let applied = self.elements.entry(map).or_default();
            let wanted = desired.elements.get(map);
            for key in touched_keys(elements) {
                if let Some(have) = applied_holder(applied, key).cloned() {
                    applied.remove(&have);
                }
                if let Some(want) = wanted.and_then(|w| holder(w, key)) {
                    applied.insert(want.clone());
                }
            }
        }
    }
}

/// An incremental change of one family's table.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    /// The whole change as an nft script.
    pub(crate) script: String,
    /// Its element changes, in order.
    pub(crate) elements: Vec<(&'static str, Verb, Vec<Elem>)>,
    /// Whether it changes more than elements the netlink path can write
    /// (chains, sets, interval sets): then only `nft` can apply it.
    pub(crate) structural: bool,
}

/// A base chain's hook: chain type, hook, priority (dstnat is -100,
/// srcnat 100).
pub(crate) type BaseHook = (&'static str, &'static str, i32);

/// The table-level settings a script needs.
pub(crate) struct Table<'a> {
    pub(crate) fam: Fam,
    pub(crate) name: &'a str,
    pub(crate) config: &'a crate::Config,
}

impl Table<'_> {
    fn prefix(&self) -> String {
        format!("{} {}", self.fam.table(), self.name)
    }

    /// The pick maps are declared by `typeof`, since one key part is a
    /// `numgen` value. nft 1.0.6 cannot re-read such a declaration from the
    /// kernel ("conflicting protocols specified"), so a later transaction
    /// cannot add a rule that uses the map: the pick chains are all made in
    /// the full transaction that makes the map (see [`pick_capacity`]).
    fn map_decl(&self, name: &str) -> String {
        let (fam, addr) = (self.fam.proto(), self.fam.addr_type());
        match name {
            SERVICE_IPS | NO_ENDPOINT_SERVICES | FIREWALL_IPS => {
                format!("map {name} {{ type {addr} . inet_proto . inet_service : verdict; }}")
            }
            SERVICE_NODEPORTS | NO_ENDPOINT_NODEPORTS => {
                format!("map {name} {{ type inet_proto . inet_service : verdict; }}")
            }
            CLUSTER_IPS => format!("set {name} {{ type {addr}; }}"),
            HAIRPIN => format!("set {name} {{ type {addr} . {addr}; }}"),
            NODEPORT_IPS | CLUSTER_CIDRS | SERVICE_CIDRS => {
                format!("set {name} {{ type {addr}; flags interval; auto-merge; }}")
            }
            "vip-cluster" | "vip-local" => format!(
                "map {name} {{ typeof {fam} daddr . meta l4proto . th dport . numgen random mod 2 : {fam} daddr . th dport; }}"
            ),
            _ => format!(
                "map {name} {{ typeof meta l4proto . th dport . numgen random mod 2 : {fam} daddr . th dport; }}"
            ),
        }
    }

    /// Every map and set of the table.
    fn maps() -> Vec<&'static str> {
        let mut maps = vec![
            SERVICE_IPS,
            SERVICE_NODEPORTS,
            NO_ENDPOINT_SERVICES,
            NO_ENDPOINT_NODEPORTS,
            FIREWALL_IPS,
            CLUSTER_IPS,
            HAIRPIN,
            NODEPORT_IPS,
            CLUSTER_CIDRS,
            SERVICE_CIDRS,
        ];
        maps.extend(Pick::ALL.iter().map(|p| p.map()));
        maps
    }

    /// The base chains, with their hooks and their fixed rules.
    fn base_chains(&self) -> Vec<(&'static str, Option<BaseHook>, Vec<String>)> {
        let p = self.fam.proto();
        let m = self.config.masquerade_mark();
        vec![
            (
                "nat-prerouting",
                Some(("nat", "prerouting", -100)),
                vec!["jump services".into()],
            ),
            (
                "nat-output",
                Some(("nat", "output", -100)),
                vec!["jump services".into()],
            ),
            (
                "nat-postrouting",
                Some(("nat", "postrouting", 100)),
                vec![
                    format!(
                        "ct status dnat {p} saddr . {p} daddr @{HAIRPIN} meta mark set meta mark or {m:#x}"
                    ),
                    format!("meta mark & {m:#x} == 0 return"),
                    format!("meta mark set meta mark xor {m:#x}"),
                    "masquerade fully-random".into(),
                ],
            ),
            (
                "filter-prerouting",
                Some(("filter", "prerouting", -110)),
                vec![format!(
                    "ct state new {p} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}"
                )],
            ),
            (
                "filter-input",
                Some(("filter", "input", -10)),
                vec!["ct state new jump service-filter".into()],
            ),
            (
                "filter-forward",
                Some(("filter", "forward", -10)),
                vec!["ct state new jump service-filter".into()],
            ),
            (
                "filter-output",
                Some(("filter", "output", -10)),
                vec!["ct state new jump service-filter".into()],
            ),
            (
                "services",
                None,
                vec![
                    format!("{p} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"),
                    format!(
                        "fib daddr type local {p} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"
                    ),
                ],
            ),
            (
                "service-filter",
                None,
                vec![
                    format!("{p} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
                    format!(
                        "fib daddr type local {p} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"
                    ),
                    format!("{p} daddr @{CLUSTER_IPS} reject"),
                    format!("{p} daddr @{SERVICE_CIDRS} drop"),
                ],
            ),
            ("reject-chain", None, vec!["reject".into()]),
        ]
    }

    fn pick_rule(&self, pick: Pick, n: usize) -> String {
        let (t, p) = (self.fam.table(), self.fam.proto());
        match pick {
            Pick::Vip { .. } => format!(
                "dnat {t} to {p} daddr . meta l4proto . th dport . numgen random mod {n} map @{}",
                pick.map()
            ),
            Pick::NodePort { .. } => format!(
                "dnat {t} to meta l4proto . th dport . numgen random mod {n} map @{}",
                pick.map()
            ),
        }
    }

    fn elements(&self, out: &mut String, verb: &str, map: &str, elements: &[&Elem]) {
        for chunk in elements.chunks(1024) {
            let list: Vec<&str> = chunk.iter().map(|e| &***e).collect();
            let _ = writeln!(
                out,
                "{verb} element {} {map} {{ {} }}",
                self.prefix(),
                list.join(", ")
            );
        }
    }

    fn rules(&self, out: &mut String, chain: &str, rules: &[String]) {
        for rule in rules {
            let _ = writeln!(out, "add rule {} {chain} {rule}", self.prefix());
        }
    }

    /// Appends to `out` the script that replaces the whole table with
    /// `objects`, atomically (written in place: at 10k Services the script
    /// is ~10 MB).
    pub(crate) fn full(&self, objects: &Objects, out: &mut String) {
        let prefix = self.prefix();
        let _ = writeln!(
            out,
            "add table {prefix}\ndelete table {prefix}\nadd table {prefix}"
        );
        for map in Self::maps() {
            let decl = self.map_decl(map);
            let (kind, rest) = decl.split_once(' ').unwrap_or(("set", &decl));
            let _ = writeln!(out, "add {kind} {prefix} {rest}");
        }
        let bases = self.base_chains();
        for (name, hook, _) in &bases {
            match hook {
                Some((kind, hook, priority)) => {
                    let _ = writeln!(
                        out,
                        "add chain {prefix} {name} {{ type {kind} hook {hook} priority {priority}; policy accept; }}"
                    );
                }
                None => {
                    let _ = writeln!(out, "add chain {prefix} {name}");
                }
            }
        }
        let capacity = pick_capacity(&objects.picks);
        for pick in Pick::ALL {
            for n in 1..=capacity {
                let _ = writeln!(out, "add chain {prefix} {}", pick.chain(n));
            }
        }
        // Every shared policy chain, used or not: see [`Shared`].
        let shared: Vec<(String, Vec<String>)> = Shared::all(capacity)
            .map(|s| (s.name(), s.rules(self.fam, self.config)))
            .collect();
        let names = shared.iter().map(|(n, _)| n).chain(objects.chains.keys());
        for name in names {
            let _ = writeln!(out, "add chain {prefix} {name}");
        }
        for (name, decl) in &objects.sets {
            let _ = writeln!(out, "add set {prefix} {name} {{ {decl} }}");
        }
        // Rules before elements: nft checks every rule that uses a map
        // against the elements already in it, so rules that come after
        // 100k elements cost minutes, rules before them nothing.
        for (name, _, rules) in &bases {
            self.rules(out, name, rules);
        }
        for pick in Pick::ALL {
            for n in 1..=capacity {
                self.rules(out, &pick.chain(n), &[self.pick_rule(pick, n)]);
            }
        }
        for (name, rules) in &shared {
            self.rules(out, name, rules);
        }
        for (name, (rules, _)) in &objects.chains {
            self.rules(out, name, rules);
        }
        for (map, elements) in &objects.elements {
            self.elements(out, "add", map, &holders(map, elements));
        }
    }

    /// Adds the whole table, as [`full`](Self::full) writes it, to an
    /// aggregator fragment; `epoch` is the table's generation (a new one
    /// makes the aggregator replace the table whole).
    pub(crate) fn fragment(&self, objects: &Objects, epoch: u64, out: &mut Fragment) {
        let family = match self.fam.0 {
            kpng_model::IpFamily::V4 => Family::Ip,
            kpng_model::IpFamily::V6 => Family::Ip6,
        };
        let mut table = out.table(family, self.name);
        table.epoch(epoch);
        for map in Self::maps() {
            let decl = self.map_decl(map);
            let inner = decl
                .split_once('{')
                .and_then(|(_, rest)| rest.rsplit_once('}'))
                .map_or("", |(inner, _)| inner.trim());
            table.set(map, inner);
        }
        for (name, hook, rules) in self.base_chains() {
            match hook {
                Some((kind, hook, priority)) => {
                    table.base_chain(name, kind, hook, priority, strs(&rules));
                }
                None => {
                    table.chain(name, None, strs(&rules));
                }
            }
        }
        let capacity = pick_capacity(&objects.picks);
        for pick in Pick::ALL {
            for n in 1..=capacity {
                table.chain(&pick.chain(n), None, [self.pick_rule(pick, n).as_str()]);
            }
        }
        for shared in Shared::all(capacity) {
            table.chain(
                &shared.name(),
                None,
                strs(&shared.rules(self.fam, self.config)),
            );
        }
        for (name, (rules, _)) in &objects.chains {
            table.chain(name, None, strs(rules));
        }
        for (name, decl) in &objects.sets {
            table.set(name, decl);
        }
        for (map, elements) in &objects.elements {
            for element in holders(map, elements) {
                table.element(map, element);
            }
        }
    }

    /// A script that turns `applied` into `desired` for the touched names
    /// only: new and changed chains are (re)filled, elements added and
    /// deleted, stale chains and sets deleted after nothing points at them.
    /// `None` when a pick chain beyond the applied capacity is needed: only
    /// a full sync can make it.
    pub(crate) fn incremental(
        &self,
        applied: &Applied,
        desired: &Objects,
        touched: &Touched,
    ) -> Option<Delta> {
        if desired
            .picks
            .iter()
            .any(|(_, n)| *n > applied.pick_capacity)
        {
            return None;
        }
        let prefix = self.prefix();
        let mut out = String::new();
        let mut changes: Vec<(&'static str, Verb, Vec<Elem>)> = Vec::new();
        for name in &touched.sets {
            if let (Some(decl), None) = (desired.sets.get(name), applied.sets.get(name)) {
                let _ = writeln!(out, "add set {prefix} {name} {{ {decl} }}");
            }
        }
        let mut stale_chains = Vec::new();
        for name in &touched.chains {
            match (
                applied.chains.get(name),
                desired.chains.get(name).map(|(r, _)| r),
            ) {
                (old, Some(new)) if old != Some(new) => {
                    if old.is_some() {
                        let _ = writeln!(out, "flush chain {prefix} {name}");
                    } else {
                        let _ = writeln!(out, "add chain {prefix} {name}");
                    }
                }
                (Some(_), None) => stale_chains.push(name),
                _ => {}
            }
        }
        // Fill after every chain exists: rules may point at each other.
        for name in &touched.chains {
            if let (old, Some((new, _))) = (applied.chains.get(name), desired.chains.get(name))
                && old != Some(new)
            {
                self.rules(&mut out, name, new);
            }
        }
        for (map, elements) in &touched.elements {
            let applied_map = applied.elements.get(map);
            let wanted = desired.elements.get(map);
            let (mut add, mut del) = (Vec::new(), Vec::new());
            for key in touched_keys(elements) {
                let have = applied_map.and_then(|a| applied_holder(a, key));
                let want = wanted.and_then(|w| holder(w, key));
                if have != want {
                    del.extend(have);
                    add.extend(want);
                }
            }
            // Elements are written last in the script, so the script
            // without them is what the netlink path leaves to nft.
            for (verb, list) in [(Verb::Delete, del), (Verb::Add, add)] {
                if !list.is_empty() {
                    changes.push((map, verb, list.into_iter().cloned().collect()));
                }
            }
        }
        let structural_len = out.len();
        for (map, verb, list) in &changes {
            let list: Vec<&Elem> = list.iter().collect();
            let word = match verb {
                Verb::Delete => "delete",
                Verb::Add => "add",
            };
            self.elements(&mut out, word, map, &list);
        }
        let mut structural = structural_len > 0;
        let after_elements = out.len();
        // Stale chains may point at each other (an affinity chain's vmap
        // names its endpoint chains): empty them all, then delete them.
        for verb in ["flush", "delete"] {
            for name in &stale_chains {
                let _ = writeln!(out, "{verb} chain {prefix} {name}");
            }
        }
        for name in &touched.sets {
            if !desired.sets.contains_key(name) && applied.sets.contains_key(name) {
                let _ = writeln!(out, "delete set {prefix} {name}");
            }
        }
        structural |= out.len() > after_elements;
        structural |= changes.iter().any(|(map, _, _)| !netlink::supports(map));
        Some(Delta {
            script: out,
            elements: changes,
            structural,
        })
    }
}
