//! The iptables subsystem, on `kpng_netfilter::iptables`, the engine that
//! applies chains with `iptables-restore --noflush` (the iptables backend
//! uses it too; its types are re-exported here).
//!
//! **Objects**: a chain with its rules, in a table of a family; and a
//! *jump*: one rule a producer puts in a built-in chain (`-j` to one of
//! its chains), written in `iptables-save`'s canonical form.
//!
//! **Ownership**: chains are owned by name prefix, up to and including the
//! first `-` (`KUBE-` for the kpng proxy, `CNI-` for a CNI): a producer
//! owns the prefixes of the chains it publishes, and a jump belongs to the
//! prefix of its target. Nobody else may publish or delete there.
//!
//! **Ordering**: jumps are inserted at the top of their built-in chain. A
//! jump carries an order number; within one apply, jumps are inserted so
//! that lower numbers run first. Jumps inserted by a later apply land above
//! earlier ones: a producer that must run before another uses a chain the
//! other does not shadow (a packet a jump's chain accepts or drops is not
//! seen by the jumps below it), which is why the kpng proxy's own filter
//! chains only drop, reject or accept what is its own.
//!
//! **Atomicity**: `iptables-restore` commits table by table; on a refusal
//! the engine puts back what every table held before (see
//! `kpng_netfilter::iptables`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kpng_model::IpFamily;
use kpng_store::MapOp;
use kpng_store::MapSnapshot;
use serde::{Deserialize, Serialize};

use crate::Subsystem;

pub use kpng_netfilter::iptables::{
    Batch, ChainKey, Chains, Jump, Mode, Plan, Runner, Saved, Table, apply_batches,
};

/// What a producer publishes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Object {
    /// A chain.
    Chain(String),
    /// A rule in a built-in chain: the chain, the rule (ending in
    /// `-j TARGET`, in `iptables-save`'s canonical form).
    Jump(String, String),
}

/// The identity of a published object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key {
    /// Its family (`"v4"`, `"v6"` on the wire: iptables, ip6tables).
    #[serde(with = "family_word")]
    pub family: IpFamily,
    /// Its table.
    pub table: Table,
    /// The object.
    pub object: Object,
}

/// An IP family on the producers' socket as `"v4"` or `"v6"`.
mod family_word {
    use kpng_model::IpFamily;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(family: &IpFamily, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match family {
            IpFamily::V4 => "v4",
            IpFamily::V6 => "v6",
        })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpFamily, D::Error> {
        match <&str>::deserialize(d)? {
            "v4" => Ok(IpFamily::V4),
            "v6" => Ok(IpFamily::V6),
            other => Err(serde::de::Error::unknown_variant(other, &["v4", "v6"])),
        }
    }
}

/// The content of a published object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Value {
    /// A chain's rules.
    Chain(Vec<String>),
    /// A jump, with its order number (lower runs first).
    Jump(u16),
}

/// A chain-name prefix: the unit of ownership.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix(pub String);

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chains {}*", self.0)
    }
}

fn prefix_of(chain: &str) -> String {
    match chain.find('-') {
        Some(i) => chain[..=i].to_owned(),
        None => chain.to_owned(),
    }
}

fn jump_target(rule: &str) -> Option<&str> {
    let mut words = rule.split_whitespace().rev();
    let target = words.next()?;
    (words.next()? == "-j").then_some(target)
}

/// A producer's whole publication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fragment {
    entries: imbl::OrdMap<Key, Value>,
}

impl Fragment {
    /// An empty fragment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a chain with its rules.
    pub fn chain<'r>(
        &mut self,
        family: IpFamily,
        table: Table,
        name: &str,
        rules: impl IntoIterator<Item = &'r str>,
    ) -> &mut Self {
        let rules = rules.into_iter().map(str::to_owned).collect();
        self.entries.insert(
            Key {
                family,
                table,
                object: Object::Chain(name.to_owned()),
            },
            Value::Chain(rules),
        );
        self
    }

    /// Adds a jump from a built-in chain; `order`: lower runs first.
    pub fn jump(
        &mut self,
        family: IpFamily,
        table: Table,
        builtin: &str,
        rule: &str,
        order: u16,
    ) -> &mut Self {
        self.entries.insert(
            Key {
                family,
                table,
                object: Object::Jump(builtin.to_owned(), rule.to_owned()),
            },
            Value::Jump(order),
        );
        self
    }
}

impl From<Fragment> for imbl::OrdMap<Key, Value> {
    fn from(fragment: Fragment) -> Self {
        fragment.entries
    }
}

/// The iptables subsystem of an [`Aggregator`](crate::Aggregator).
#[derive(Debug, Default)]
pub struct Iptables {
    runner: Runner,
    dry_run: bool,
    last_script: String,
}

impl Iptables {
    /// Applies with `runner`.
    pub fn new(runner: Runner) -> Self {
        Self {
            runner,
            dry_run: false,
            last_script: String::new(),
        }
    }

    /// Computes batches without running anything.
    pub fn dry_run() -> Self {
        Self {
            dry_run: true,
            ..Self::default()
        }
    }

    /// The input of the last apply.
    pub fn last_script(&self) -> &str {
        &self.last_script
    }
}

/// One family's chains and jumps of a state.
fn family_state(state: &MapSnapshot<Key, Value>, family: IpFamily) -> (Chains, Vec<Jump>) {
    let mut chains = BTreeMap::new();
    let mut jumps = Vec::new();
    for (k, v) in state.entries().iter().filter(|(k, _)| k.family == family) {
        match (&k.object, v) {
            (Object::Chain(name), Value::Chain(rules)) => {
                chains.insert((k.table, name.clone()), rules.clone());
            }
            (Object::Jump(builtin, rule), Value::Jump(order)) => {
                jumps.push((*order, (k.table, builtin.clone(), rule.clone())));
            }
            _ => {}
        }
    }
    jumps.sort();
    (chains, jumps.into_iter().map(|(_, j)| j).collect())
}

impl Subsystem for Iptables {
    type Key = Key;
    type Value = Value;
    type Scope = Prefix;

    fn scope(key: &Key) -> Prefix {
        match &key.object {
            Object::Chain(name) => Prefix(prefix_of(name)),
            Object::Jump(_, rule) => Prefix(prefix_of(jump_target(rule).unwrap_or(rule))),
        }
    }

    fn check(state: &MapSnapshot<Key, Value>) -> Result<(), String> {
        for (key, value) in state.entries() {
            match (&key.object, value) {
                (Object::Chain(name), Value::Chain(rules)) => {
                    let ok = name.len() <= 28
                        && name.contains('-')
                        && name.chars().all(|c| {
                            c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-' || c == '_'
                        });
                    if !ok {
                        return Err(format!(
                            "chain name {name:?}: use PREFIX-NAME in [A-Z0-9_-], at most 28"
                        ));
                    }
                    if let Some(rule) = rules
                        .iter()
                        .find(|r| r.contains(['\n', '\r']) || r.trim().is_empty())
                    {
                        return Err(format!(
                            "rule {rule:?} of chain {name}: one line, not empty"
                        ));
                    }
                }
                (Object::Jump(builtin, rule), Value::Jump(_)) => {
                    if !key.table.builtins().contains(&builtin.as_str()) {
                        return Err(format!(
                            "{builtin} is not a built-in chain of the {} table",
                            key.table.name()
                        ));
                    }
                    let target = jump_target(rule)
                        .ok_or_else(|| format!("jump {rule:?} does not end in -j CHAIN"))?;
                    let published = state.entries().contains_key(&Key {
                        family: key.family,
                        table: key.table,
                        object: Object::Chain(target.to_owned()),
                    });
                    if !published || rule.contains(['\n', '\r']) {
                        return Err(format!(
                            "jump {rule:?} from {builtin}: its target is not a published chain"
                        ));
                    }
                }
                (object, value) => return Err(format!("{object:?} cannot hold {value:?}")),
            }
        }
        Ok(())
    }

    fn clash(_: &MapSnapshot<Key, Value>, _: &MapSnapshot<Key, Value>) -> Result<(), String> {
        // Prefixes keep producers apart; jump order is documented.
        Ok(())
    }

    fn commit(
        &mut self,
        before: &MapSnapshot<Key, Value>,
        after: &MapSnapshot<Key, Value>,
        ops: &[MapOp<Key, Value>],
        full: bool,
    ) -> Result<(), String> {
        let prefixes: BTreeSet<String> = before
            .entries()
            .keys()
            .chain(after.entries().keys())
            .map(|k| Self::scope(k).0)
            .collect();
        let owned = |chain: &str| prefixes.iter().any(|p| chain.starts_with(p.as_str()));
        let mut batches = Vec::new();
        let mut script = String::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            let (desired, add_all) = family_state(after, family);
            let (applied, _) = family_state(before, family);
            let mut touched = BTreeSet::new();
            let (mut add, mut remove) = (Vec::new(), Vec::new());
            for op in ops {
                let (MapOp::Set(k, _) | MapOp::Delete(k)) = op;
                if k.family != family {
                    continue;
                }
                match (&k.object, op) {
                    (Object::Chain(name), _) => {
                        touched.insert((k.table, name.clone()));
                    }
                    (Object::Jump(b, r), MapOp::Set(_, v)) => {
                        let order = match v {
                            Value::Jump(order) => *order,
                            Value::Chain(_) => 0,
                        };
                        add.push((order, (k.table, b.clone(), r.clone())));
                    }
                    (Object::Jump(b, r), MapOp::Delete(_)) => {
                        remove.push((k.table, b.clone(), r.clone()))
                    }
                }
            }
            let existing = if full && !self.dry_run {
                Some(
                    self.runner
                        .save(family, &owned)
                        .map_err(|e| e.to_string())?,
                )
            } else {
                None
            };
            add.sort();
            let mut add: Vec<Jump> = add.into_iter().map(|(_, j)| j).collect();
            if full {
                add = add_all;
            }
            let batch = Batch::new(Plan {
                desired: &desired,
                applied: (!full).then_some(&applied),
                touched: &touched,
                existing: existing.as_ref(),
                owned: &owned,
                add_jumps: &add,
                remove_jumps: &remove,
            });
            script.push_str(&batch.script);
            let before_chains = match existing {
                Some(saved) => saved.owned,
                None => applied,
            };
            batches.push((family, batch, before_chains));
        }
        self.last_script = script;
        if self.dry_run {
            return Ok(());
        }
        apply_batches(&mut self.runner, &batches).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Aggregator;

    #[test]
    fn prefixes_own_chains_and_jumps_need_their_target() {
        let mut agg = Aggregator::new(Iptables::dry_run());
        let mut kube = Fragment::new();
        kube.chain(
            IpFamily::V4,
            Table::Nat,
            "KUBE-SERVICES",
            ["-d 10.96.0.1/32 -j KUBE-SVC-A"],
        )
        .chain(
            IpFamily::V4,
            Table::Nat,
            "KUBE-SVC-A",
            ["-j DNAT --to-destination 10.244.0.1:80"],
        )
        .jump(
            IpFamily::V4,
            Table::Nat,
            "PREROUTING",
            "-j KUBE-SERVICES",
            0,
        );
        agg.publish("kpng", kube).unwrap();
        let mut cni = Fragment::new();
        cni.chain(
            IpFamily::V4,
            Table::Filter,
            "CNI-FW",
            ["-s 192.0.2.66/32 -j DROP"],
        )
        .jump(IpFamily::V4, Table::Filter, "FORWARD", "-j CNI-FW", 0);
        agg.publish("cni", cni.clone()).unwrap();
        // The CNI may not touch KUBE- chains.
        cni.chain(IpFamily::V4, Table::Nat, "KUBE-SERVICES", ["-j ACCEPT"]);
        assert!(
            agg.publish("cni", cni)
                .unwrap_err()
                .to_string()
                .contains("belongs to producer kpng")
        );
        // A jump to nothing published is refused.
        let mut bad = Fragment::new();
        bad.jump(IpFamily::V4, Table::Filter, "INPUT", "-j OTHER-X", 0);
        assert!(agg.publish("other", bad).is_err());

        assert_eq!(agg.flush().transactions, 1);
        let script = agg.subsystem().last_script().to_owned();
        assert!(script.contains("*filter\n:CNI-FW - [0:0]\n-A CNI-FW -s 192.0.2.66/32 -j DROP\n-I FORWARD 1 -j CNI-FW\nCOMMIT\n"), "{script}");
        assert!(
            script.contains("-I PREROUTING 1 -j KUBE-SERVICES"),
            "{script}"
        );

        // A delta: one chain changes, only it is written.
        let key = Key {
            family: IpFamily::V4,
            table: Table::Nat,
            object: Object::Chain("KUBE-SVC-A".into()),
        };
        agg.publish_delta(
            "kpng",
            [MapOp::Set(
                key,
                Value::Chain(vec!["-j DNAT --to-destination 10.244.0.2:80".into()]),
            )],
        )
        .unwrap();
        agg.flush();
        assert_eq!(
            agg.subsystem().last_script(),
            "*nat\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j DNAT --to-destination 10.244.0.2:80\nCOMMIT\n"
        );
    }
}
