//! The backend's tables as an aggregator fragment: the same kernel
//! objects a full sync writes.

use kpng_aggregator::nft::Fragment;
use kpng_model::IpFamily;

use crate::NftBackend;

/// The desired tables of both families, at table generation `epoch`.
pub(crate) fn fragment(backend: &NftBackend, epoch: u64) -> Fragment {
    let mut out = Fragment::new();
    for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
        let objects = &backend.families[i].desired;
        let table = backend.table(family);
        let mut t = out.table(table.family, &table.name);
        t.epoch(epoch);
        for (set, _) in objects.sets.values() {
            t.set(set.clone());
            for element in objects.kernel_elements(&table, set) {
                t.element(&set.name, element);
            }
        }
        for (name, (chain, _)) in &objects.chains {
            match chain.base {
                Some(base) => t.base_chain(name, base, chain.rules.iter().cloned()),
                None => t.chain(name, chain.rules.iter().cloned()),
            };
        }
    }
    out
}
