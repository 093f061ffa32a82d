//! The one transaction a flush sends: tables that cannot change in place
//! replaced whole, then the in-place changes of the others, then the
//! tables that are gone.

use std::collections::{BTreeMap, BTreeSet};

use kpng_netfilter::nft::{Chain, Element, Rule, Transaction};
use kpng_store::MapOp;
use kpng_store::MapSnapshot;

use super::in_place::InPlace;
use super::objects::{element_of, sets_of};
use super::{Key, Object, TableName, Value};

/// Writes every object of `table` in `state` into `tx` (after the table's
/// own add): sets, chains, rules, elements.
fn write_table(state: &MapSnapshot<Key, Value>, table: &TableName, tx: &mut Transaction) {
    let t = table.table();
    let objects: Vec<(&Key, &Value)> = state
        .entries()
        .iter()
        .filter(|(k, _)| &k.table == table)
        .collect();
    for (k, v) in &objects {
        if let (Object::Set(_), Value::Set(set)) = (&k.object, v) {
            tx.add_set(&t, set.clone());
        }
    }
    for (k, v) in &objects {
        if let (Object::Chain(name), Value::Chain { base, .. }) = (&k.object, v) {
            tx.add_chain(
                &t,
                Chain {
                    name: name.clone(),
                    base: *base,
                    comment: None,
                },
            );
        }
    }
    for (k, v) in &objects {
        if let (Object::Chain(name), Value::Chain { rules, .. }) = (&k.object, v) {
            for rule in rules {
                tx.add_rule(&t, Rule::new(name.as_str(), rule.clone()));
            }
        }
    }
    let mut elements: BTreeMap<&str, Vec<Element>> = BTreeMap::new();
    for (k, v) in &objects {
        if let Object::Element(set, key) = &k.object {
            elements
                .entry(set.as_str())
                .or_default()
                .push(element_of(key, v));
        }
    }
    for (set, list) in elements {
        tx.add_elements(&t, set, list);
    }
}

/// The transaction that turns `before` into `after`, given their diff:
/// tables that cannot change in place replaced whole, then the in-place
/// changes of the others ([`InPlace`]), then the tables that are gone.
pub(super) fn transaction(
    before: &MapSnapshot<Key, Value>,
    after: &MapSnapshot<Key, Value>,
    ops: &[MapOp<Key, Value>],
    full: bool,
) -> Transaction {
    let mut tx = Transaction::new();
    let tables_after: BTreeSet<&TableName> = after.entries().keys().map(|k| &k.table).collect();
    let tables_before: BTreeSet<&TableName> = before.entries().keys().map(|k| &k.table).collect();
    let (sets_before, sets_after) = (sets_of(before), sets_of(after));
    for ((table, _), set) in sets_after.iter().chain(sets_before.iter()) {
        tx.describe(&table.table(), set);
    }
    let replaced = replaced_tables(before, ops, full.then_some(&tables_after));
    for table in &replaced {
        let t = table.table();
        tx.add_table(&t).delete_table(&t).add_table(&t);
        write_table(after, table, &mut tx);
    }
    let gone_tables: BTreeSet<&TableName> =
        tables_before.difference(&tables_after).copied().collect();
    let mut in_place = InPlace::default();
    for op in ops {
        let table = match op {
            MapOp::Set(k, _) | MapOp::Delete(k) => &k.table,
        };
        if !replaced.contains(table) && !gone_tables.contains(table) {
            in_place.note(op, before, &sets_before, &sets_after, &mut tx);
        }
    }
    in_place.write(after, &sets_before, &mut tx);
    for table in gone_tables {
        tx.delete_table(&table.table());
    }
    tx
}

/// The tables replaced whole: all of `all` (a full apply), and any table
/// whose epoch, base chain hooks or set declarations changed (the kernel
/// cannot change those in place).
fn replaced_tables<'a>(
    before: &MapSnapshot<Key, Value>,
    ops: &'a [MapOp<Key, Value>],
    all: Option<&BTreeSet<&'a TableName>>,
) -> BTreeSet<&'a TableName> {
    let mut replaced: BTreeSet<&TableName> = all.cloned().unwrap_or_default();
    for op in ops {
        let MapOp::Set(key, new) = op else { continue };
        let changed_kind = match (before.get(key), new) {
            (Some(Value::Chain { base: old, .. }), Value::Chain { base, .. }) => old != base,
            (Some(Value::Set(old)), Value::Set(set)) => old != set,
            (Some(Value::Table { epoch: old }), Value::Table { epoch }) => old != epoch,
            _ => false,
        };
        if changed_kind {
            replaced.insert(&key.table);
        }
    }
    replaced
}

#[cfg(test)]
mod tests {
    use kpng_netfilter::nft::{DataType, Element, Set};
    use kpng_store::MapOp;

    use crate::Aggregator;
    use crate::nft::testing::{drop_from, input};
    use crate::nft::{Fragment, Nft, TableFamily, Value, element_key};

    #[test]
    fn a_delta_writes_only_the_change() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut f = Fragment::new();
        f.table(TableFamily::Ip, "fw")
            .set(Set::new("bad", DataType::IPV4_ADDR))
            .element("bad", Element::key(vec![192, 0, 2, 1]))
            .base_chain("in", input(0), [drop_from("bad")]);
        agg.publish("fw", f).unwrap();
        agg.flush();
        assert!(
            agg.subsystem()
                .last_script()
                .contains("add rule ip fw in ip saddr @bad drop"),
            "{}",
            agg.subsystem().last_script()
        );
        let add = MapOp::Set(
            element_key(TableFamily::Ip, "fw", "bad", vec![192, 0, 2, 2]),
            Value::Element {
                data: None,
                timeout_ms: None,
            },
        );
        let del = MapOp::Delete(element_key(
            TableFamily::Ip,
            "fw",
            "bad",
            vec![192, 0, 2, 1],
        ));
        agg.publish_delta("fw", [add, del]).unwrap();
        let report = agg.flush();
        assert_eq!(report.transactions, 1);
        assert_eq!(
            agg.subsystem().last_script(),
            "delete element ip fw bad { 192.0.2.1 }\nadd element ip fw bad { 192.0.2.2 }\n"
        );
        // Nothing changed: no transaction.
        assert_eq!(agg.flush().transactions, 0);
    }
}
