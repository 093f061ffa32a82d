//! The ordering between producers: two base chains of different
//! producers on the same family and hook with equal priorities would run
//! in an undefined order, so such a publication is refused.

use kpng_netfilter::nft::BaseChain;
use kpng_store::MapSnapshot;

use super::{Key, Object, TableFamily, Value};

/// Checks `mine` against `theirs` (another producer's state): no two base
/// chains on one family and hook with the same priority.
pub(super) fn clash(
    mine: &MapSnapshot<Key, Value>,
    theirs: &MapSnapshot<Key, Value>,
) -> Result<(), String> {
    let hooks = |state: &MapSnapshot<Key, Value>| -> Vec<(TableFamily, BaseChain, String)> {
        state
            .entries()
            .iter()
            .filter_map(|(k, v)| match (&k.object, v) {
                (
                    Object::Chain(name),
                    Value::Chain {
                        base: Some(base), ..
                    },
                ) => Some((
                    k.table.family,
                    *base,
                    format!("chain {name} of {}", k.table),
                )),
                _ => None,
            })
            .collect()
    };
    let theirs = hooks(theirs);
    for (family, base, what) in hooks(mine) {
        if let Some((.., other)) = theirs
            .iter()
            .find(|(f, b, _)| *f == family && b.hook == base.hook && b.priority == base.priority)
        {
            return Err(format!(
                "{what} has hook {:?} priority {}, as {other}: the order would be undefined",
                base.hook, base.priority
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Aggregator;
    use crate::nft::testing::input;
    use crate::nft::{Fragment, Nft, TableFamily};

    #[test]
    fn equal_priorities_on_one_hook_are_refused() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut a = Fragment::new();
        a.table(TableFamily::Inet, "a")
            .base_chain("in", input(0), []);
        let mut b = Fragment::new();
        b.table(TableFamily::Inet, "b")
            .base_chain("in", input(0), []);
        agg.publish("a", a).unwrap();
        let err = agg.publish("b", b.clone()).unwrap_err().to_string();
        assert!(err.contains("undefined"), "{err}");
        let mut b = Fragment::new();
        b.table(TableFamily::Inet, "b")
            .base_chain("in", input(10), []);
        agg.publish("b", b).unwrap();
    }
}
