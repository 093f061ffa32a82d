//! The checks of one producer's whole publication, before anything
//! reaches the kernel: names, tables, the sets and chains rules and
//! elements refer to, and elements against their set.

use kpng_netfilter::nft::{Data, Expr, MapTo, Set};
use kpng_store::MapSnapshot;

use super::objects::sets_of;
use super::{ElementKey, Key, Object, TableName, Value};

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 255 || name.contains('\0') {
        return Err(format!("{what} name {name:?}: 1 to 255 bytes, with no NUL"));
    }
    Ok(())
}

/// The sets a rule reads and the chains it jumps to.
fn references(rule: &[Expr]) -> (Vec<&str>, Vec<&str>) {
    let (mut sets, mut chains) = (Vec::new(), Vec::new());
    for e in rule {
        match e {
            Expr::Lookup { set, .. } | Expr::Dynset { set, .. } => sets.push(set.as_str()),
            Expr::Immediate {
                data: Data::Verdict(v),
                ..
            } => chains.extend(v.chain()),
            _ => {}
        }
    }
    (sets, chains)
}

fn check_element(set: &Set, element: &ElementKey, value: &Value) -> Result<(), String> {
    let what = || format!("element {:02x?} of set {}", element.key, set.name);
    if element.key.len() != set.key.len as usize {
        return Err(format!(
            "{}: the key is {} bytes, the set's {}",
            what(),
            element.key.len(),
            set.key.len
        ));
    }
    if element.interval_end && !set.interval {
        return Err(format!("{}: a range's end in a set of no ranges", what()));
    }
    let Value::Element { data, .. } = value else {
        return Err(format!("{}: holds {value:?}", what()));
    };
    match (set.map, data, element.interval_end) {
        (None, None, _) | (Some(_), None, true) => Ok(()),
        (Some(MapTo::Verdict), Some(Data::Verdict(_)), _) => Ok(()),
        (Some(MapTo::Value(t)), Some(Data::Value(v)), _) if v.len() == t.len as usize => Ok(()),
        (map, data, _) => Err(format!(
            "{}: {data:?} does not fit the set's values ({map:?})",
            what()
        )),
    }
}

/// Checks one producer's whole desired state on its own (see the module
/// docs of [`crate::nft`]); the error names the object.
pub(super) fn check(state: &MapSnapshot<Key, Value>) -> Result<(), String> {
    let entries = state.entries();
    let sets = sets_of(state);
    let chain_in = |table: &TableName, name: &str| {
        entries.contains_key(&Key {
            table: table.clone(),
            object: Object::Chain(name.to_owned()),
        })
    };
    for (key, value) in entries {
        check_name("table", &key.table.name)?;
        let declared = entries.contains_key(&Key {
            table: key.table.clone(),
            object: Object::Table,
        });
        if key.object != Object::Table && !declared {
            return Err(format!("{} is used but not published", key.table));
        }
        match (&key.object, value) {
            (Object::Table, Value::Table { .. }) => {}
            (Object::Chain(name), Value::Chain { rules, .. }) => {
                check_name("chain", name)?;
                for (i, rule) in rules.iter().enumerate() {
                    let (used_sets, used_chains) = references(rule);
                    for set in used_sets {
                        if !sets.contains_key(&(&key.table, set)) {
                            return Err(format!(
                                "rule {} of chain {name} in {} uses set {set}, which is not published there",
                                i + 1,
                                key.table
                            ));
                        }
                    }
                    for chain in used_chains {
                        if !chain_in(&key.table, chain) {
                            return Err(format!(
                                "rule {} of chain {name} in {} jumps to chain {chain}, which is not published there",
                                i + 1,
                                key.table
                            ));
                        }
                    }
                }
            }
            (Object::Set(name), Value::Set(set)) => {
                check_name("set", name)?;
                if &set.name != name {
                    return Err(format!("set {name} is declared as {}", set.name));
                }
            }
            (Object::Element(set_name, element), value) => {
                let Some(set) = sets.get(&(&key.table, set_name.as_str())) else {
                    return Err(format!(
                        "element {:02x?} of set {set_name}, which is not published in {}",
                        element.key, key.table
                    ));
                };
                check_element(set, element, value)?;
                if let Value::Element {
                    data: Some(Data::Verdict(v)),
                    ..
                } = value
                    && let Some(chain) = v.chain()
                    && !chain_in(&key.table, chain)
                {
                    return Err(format!(
                        "element {:02x?} of set {set_name} in {} points at chain {chain}, which is not published there",
                        element.key, key.table
                    ));
                }
            }
            (object, value) => {
                return Err(format!("{object:?} cannot hold {value:?}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kpng_netfilter::nft::{DataType, Element, Set};

    use crate::Aggregator;
    use crate::nft::testing::{drop_from, input};
    use crate::nft::{Fragment, Nft, TableFamily};

    #[test]
    fn bad_publications_are_refused_with_the_object_named() {
        let mut agg = Aggregator::new(Nft::dry_run());
        // A rule that uses a set nobody published.
        let mut f = Fragment::new();
        f.table(TableFamily::Ip, "fw")
            .base_chain("in", input(0), [drop_from("missing")]);
        let err = agg.publish("p", f).unwrap_err().to_string();
        assert!(err.contains("uses set missing"), "{err}");
        // An element of the wrong length.
        let mut f = Fragment::new();
        f.table(TableFamily::Ip, "fw")
            .set(Set::new("s", DataType::IPV4_ADDR))
            .element("s", Element::key(vec![1, 2, 3]));
        let err = agg.publish("p", f).unwrap_err().to_string();
        assert!(err.contains("the key is 3 bytes, the set's 4"), "{err}");
        // A name the kernel cannot hold.
        let mut f = Fragment::new();
        f.table(TableFamily::Ip, "fw\0x");
        assert!(agg.publish("p", f).is_err());
        assert_eq!(agg.published("p").map(|s| s.len()).unwrap_or(0), 0);
    }
}
