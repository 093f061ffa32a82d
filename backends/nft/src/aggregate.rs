//! The backend's tables as an aggregator fragment, in nft's text.
//!
//! The aggregator's nft subsystem applies text with `nft -f`, and nft
//! 1.0.6 cannot add a rule that uses a map declared by `typeof` in a later
//! transaction than the map's ("conflicting protocols specified"). So a
//! published table holds every pick chain up to a capacity (at least 16,
//! a power of two above the largest endpoint count in use), and a need
//! beyond it publishes a new epoch, which replaces the tables whole.

use kpng_aggregator::nft::{Family, Fragment};
use kpng_model::IpFamily;
use kpng_netfilter::nft::{ChainType, Hook, Rule};

use crate::render::{Fam, Pick};
use crate::{FamilyState, NftBackend};

/// The pick capacity the desired objects need.
pub(crate) fn pick_capacity(families: &[FamilyState; 2]) -> usize {
    let most = families
        .iter()
        .flat_map(|f| f.desired.chains.keys())
        .filter_map(|name| name.strip_prefix("pick-"))
        .filter_map(|rest| rest.rsplit_once('-'))
        .filter_map(|(_, n)| n.parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    most.max(16).next_power_of_two()
}

fn hook_words(hook: Hook) -> &'static str {
    match hook {
        Hook::Prerouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::Postrouting => "postrouting",
    }
}

/// The desired tables of both families, with pick chains up to
/// `capacity`, at table generation `epoch`.
pub(crate) fn fragment(backend: &NftBackend, epoch: u64, capacity: usize) -> Fragment {
    let mut out = Fragment::new();
    for (i, family) in IpFamily::BOTH.into_iter().enumerate() {
        let fam = Fam(family);
        let objects = &backend.families[i].desired;
        let table = backend.table(family);
        let word = match family {
            IpFamily::V4 => Family::Ip,
            IpFamily::V6 => Family::Ip6,
        };
        let mut t = out.table(word, &backend.config.table);
        t.epoch(epoch);
        for (set, _) in objects.sets.values() {
            t.set(&set.name, &set.declaration());
            for element in set.elements_text(&objects.kernel_elements(&table, set)) {
                t.element(&set.name, &element);
            }
        }
        let text = |name: &str, rules: &[Vec<kpng_netfilter::nft::Expr>]| -> Vec<String> {
            rules
                .iter()
                .map(|r| Rule::new(name, r.clone()).to_string())
                .collect()
        };
        for (name, (chain, _)) in &objects.chains {
            let rules = text(name, &chain.rules);
            let rules = rules.iter().map(String::as_str);
            match chain.base {
                Some(base) => {
                    let kind = match base.kind {
                        ChainType::Filter => "filter",
                        ChainType::Nat => "nat",
                    };
                    t.base_chain(name, kind, hook_words(base.hook), base.priority, rules);
                }
                None => {
                    t.chain(name, None, rules);
                }
            }
        }
        for pick in Pick::ALL {
            for n in 1..=capacity {
                let name = pick.chain(n);
                if !objects.chains.contains_key(&name) {
                    let rules = text(&name, &[pick.rule(fam.family(), n)]);
                    t.chain(&name, None, rules.iter().map(String::as_str));
                }
            }
        }
    }
    out
}
