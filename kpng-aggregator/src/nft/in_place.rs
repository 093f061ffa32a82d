//! The in-place changes of the tables a flush keeps, gathered from the
//! ops and written in the order the kernel needs.

use std::collections::{BTreeMap, BTreeSet};

use kpng_netfilter::nft::{BaseChain, Chain, Element, Expr, Rule, Set, Transaction};
use kpng_store::MapOp;
use kpng_store::MapSnapshot;

use super::objects::element_of;
use super::{ElementKey, Key, Object, TableName, Value};

/// Elements per (table, set), in one batch each.
type Runs<'a> = BTreeMap<(&'a TableName, &'a String), Vec<Element>>;

/// The in-place changes of the tables that stay, gathered from the ops
/// and written in the order the kernel needs.
#[derive(Default)]
pub(super) struct InPlace<'a> {
    new_chains: Vec<(&'a Key, &'a String, Option<BaseChain>)>,
    refill: Vec<(&'a Key, &'a String, &'a Vec<Vec<Expr>>, bool)>,
    gone_chains: Vec<(&'a Key, &'a String)>,
    gone_sets: Vec<(&'a Key, &'a String)>,
    adds: Runs<'a>,
    deletes: Runs<'a>,
    /// Interval sets, whose ranges are rewritten whole.
    rewritten: BTreeSet<(&'a TableName, &'a str)>,
}

impl<'a> InPlace<'a> {
    /// Notes one op (tables and sets new in place are added at once).
    pub(super) fn note(
        &mut self,
        op: &'a MapOp<Key, Value>,
        before: &MapSnapshot<Key, Value>,
        sets_before: &BTreeMap<(&TableName, &str), &Set>,
        sets_after: &BTreeMap<(&TableName, &str), &Set>,
        tx: &mut Transaction,
    ) {
        let interval = |k: &Key, set: &str| {
            sets_after
                .get(&(&k.table, set))
                .or_else(|| sets_before.get(&(&k.table, set)))
                .is_some_and(|s| s.interval)
        };
        let mut delete_old = |k: &'a Key, set: &'a String, key: &ElementKey| {
            if let Some(old) = before.get(k) {
                self.deletes
                    .entry((&k.table, set))
                    .or_default()
                    .push(element_of(key, old));
            }
        };
        match op {
            MapOp::Set(k, v) => match (&k.object, v) {
                (Object::Table, _) if before.get(k).is_none() => {
                    tx.add_table(&k.table.table());
                }
                (Object::Set(_), Value::Set(set)) if before.get(k).is_none() => {
                    tx.add_set(&k.table.table(), set.clone());
                }
                (Object::Chain(name), Value::Chain { base, rules }) => {
                    if before.get(k).is_none() {
                        self.new_chains.push((k, name, *base));
                    }
                    self.refill.push((k, name, rules, before.get(k).is_some()));
                }
                (Object::Element(set, _), _) if interval(k, set) => {
                    self.rewritten.insert((&k.table, set.as_str()));
                }
                (Object::Element(set, key), v) => {
                    delete_old(k, set, key);
                    self.adds
                        .entry((&k.table, set))
                        .or_default()
                        .push(element_of(key, v));
                }
                _ => {}
            },
            MapOp::Delete(k) => match &k.object {
                Object::Chain(name) => self.gone_chains.push((k, name)),
                Object::Set(name) => self.gone_sets.push((k, name)),
                Object::Element(set, _) if interval(k, set) => {
                    if sets_after.contains_key(&(&k.table, set.as_str())) {
                        self.rewritten.insert((&k.table, set.as_str()));
                    }
                }
                Object::Element(set, key) => delete_old(k, set, key),
                Object::Table => {}
            },
        }
    }

    /// Writes what was noted: new chains, then their rules (once every
    /// chain exists: rules may point at each other), element deletes
    /// before adds (a changed value is both), interval sets whole, and
    /// last what is gone: chains emptied (they may point at each other and
    /// at sets), then sets deleted, then chains.
    pub(super) fn write(
        self,
        after: &MapSnapshot<Key, Value>,
        sets_before: &BTreeMap<(&TableName, &str), &Set>,
        tx: &mut Transaction,
    ) {
        for (k, name, base) in self.new_chains {
            let chain = Chain {
                name: name.clone(),
                base,
                comment: None,
            };
            tx.add_chain(&k.table.table(), chain);
        }
        for (k, name, rules, existed) in self.refill {
            let t = k.table.table();
            if existed {
                tx.flush_chain(&t, name);
            }
            for rule in rules {
                tx.add_rule(&t, Rule::new(name.as_str(), rule.clone()));
            }
        }
        for ((table, set), elements) in self.deletes {
            tx.delete_elements(&table.table(), set, elements);
        }
        for ((table, set), elements) in self.adds {
            tx.add_elements(&table.table(), set, elements);
        }
        for (table, set) in self.rewritten {
            let t = table.table();
            if sets_before.contains_key(&(table, set)) {
                tx.flush_set(&t, set);
            }
            let elements: Vec<Element> = after
                .entries()
                .iter()
                .filter(|(k, _)| &k.table == table)
                .filter_map(|(k, v)| match &k.object {
                    Object::Element(s, key) if s == set => Some(element_of(key, v)),
                    _ => None,
                })
                .collect();
            tx.add_elements(&t, set, elements);
        }
        for (k, name) in &self.gone_chains {
            tx.flush_chain(&k.table.table(), name);
        }
        for (k, name) in self.gone_sets {
            tx.delete_set(&k.table.table(), name);
        }
        for (k, name) in self.gone_chains {
            tx.delete_chain(&k.table.table(), name);
        }
    }
}
