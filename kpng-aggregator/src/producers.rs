//! The kpng backends as producers (features `nft-backend`,
//! `iptables-backend`): each renders as usual without touching the
//! kernel, and publishes what it wants after each round.

#[cfg(feature = "iptables-backend")]
use kpng_backend_iptables::IptablesBackend;
#[cfg(feature = "nft-backend")]
use kpng_backend_nft::NftBackend;

use crate::Producer;

/// The nft backend publishes its tables' objects; a full round (the
/// first, after a failure) publishes a new table epoch, which the aggregator
/// applies as a whole-table replace.
#[cfg(feature = "nft-backend")]
impl Producer for NftBackend {
    type Subsystem = crate::nft::Nft;

    fn publishing(self) -> Self {
        self.dry_run()
    }

    fn fragment(&mut self) -> imbl::OrdMap<crate::nft::Key, crate::nft::Value> {
        let mut fragment = crate::nft::Fragment::new();
        for content in self.tables() {
            let mut t = fragment.table(content.table.family, &content.table.name);
            t.epoch(self.generation());
            for set in content.sets {
                t.set(set);
            }
            for (chain, rules) in content.chains {
                match chain.base {
                    Some(base) => t.base_chain(&chain.name, base, rules),
                    None => t.chain(&chain.name, rules),
                };
            }
            for (set, elements) in content.elements {
                for element in elements {
                    t.element(&set, element);
                }
            }
        }
        fragment.into()
    }
}

/// The iptables backend publishes its chains (all `KUBE-`) and its jumps
/// from the built-in chains.
#[cfg(feature = "iptables-backend")]
impl Producer for IptablesBackend {
    type Subsystem = crate::iptables::Iptables;

    fn publishing(self) -> Self {
        IptablesBackend::publishing(self)
    }

    fn fragment(&mut self) -> imbl::OrdMap<crate::iptables::Key, crate::iptables::Value> {
        use crate::iptables::Fragment;
        use kpng_model::IpFamily;
        let mut fragment = Fragment::new();
        for (family, (table, name), rules) in self.chains() {
            fragment.chain(family, *table, name, rules.iter().map(String::as_str));
        }
        for family in [IpFamily::V4, IpFamily::V6] {
            for (order, (table, builtin, rule)) in (0u16..).zip(IptablesBackend::jumps()) {
                fragment.jump(family, *table, builtin, rule, order);
            }
        }
        fragment.into()
    }
}
