//! The nftables subsystem: producers publish tables, chains with their
//! rules, sets and maps, and elements, as kernel objects
//! ([`kpng_netfilter::nft`]'s types), and the aggregator applies them over
//! nf_tables netlink, with no `nft` process.
//!
//! **Ownership**: a producer owns the tables it publishes (a table is
//! `family name`); nobody else may publish or delete anything in them.
//!
//! **Ordering between producers**: nftables runs every base chain of a
//! hook, in increasing priority; a packet dropped by one is not seen by
//! the next, and an `accept` only ends that chain. Two base chains of
//! different producers on the same family and hook must therefore have
//! different priorities: equal ones would run in an undefined order, so
//! such a publication is refused. Use nft's standard priorities as
//! anchors (`dstnat` = -100, `filter` = 0, `srcnat` = 100): the kpng
//! backend's NAT chains sit at `dstnat`, a firewall that must see
//! original destinations goes below -100, one that must see translated
//! ones above it.
//!
//! **Checks**, before anything reaches the kernel: names are 1 to 255
//! bytes with no NUL; every object's table is published; an element's set
//! is, and its key and value have the set's lengths and kinds; every set a
//! rule looks up and every chain a rule or element jumps to is published
//! in the same table. Each error names the object.
//!
//! Rules are lists of [`Expr`](kpng_netfilter::nft::Expr)s, which
//! [`kpng_netfilter::nft::build`] makes from nft's terms; over the unix
//! socket they are JSON (see [`crate::socket`]).

// The jobs, one module each: `objects` (what a producer publishes: the
// keys and values, and the fragment that builds them), `check` (the
// checks of one producer's publication), `order` (the ordering between
// producers' base chains), `flush` (the one transaction a flush sends)
// and `in_place` (the changes of a table that stays, in the order the
// kernel needs).

mod check;
mod flush;
mod in_place;
mod objects;
mod order;

use std::path::PathBuf;

use kpng_netfilter::nft::{Socket, Transaction};
use kpng_store::MapOp;
use kpng_store::MapSnapshot;

use crate::Subsystem;

pub use kpng_netfilter::nft::TableFamily;
pub use objects::{
    ElementKey, Fragment, Key, Object, TableBuilder, TableName, Value, chain_key, element_key,
};

/// The nftables subsystem: applies over nf_tables netlink.
#[derive(Debug)]
pub struct Nft {
    netns: Option<PathBuf>,
    dry_run: bool,
    socket: Option<Socket>,
    last_script: String,
}

impl Nft {
    /// Programs the network namespace at `netns` (`/run/netns/NAME`), or
    /// the process's own.
    pub fn new(netns: Option<PathBuf>) -> Self {
        Self {
            netns,
            dry_run: false,
            socket: None,
            last_script: String::new(),
        }
    }

    /// Computes transactions without applying them.
    pub fn dry_run() -> Self {
        Self {
            dry_run: true,
            ..Self::new(None)
        }
    }

    /// The last transaction as an nft script (`nft -f` takes it).
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    fn send(&mut self, tx: Transaction) -> Result<(), kpng_netfilter::Error> {
        let mut socket = match self.socket.take() {
            Some(socket) => socket,
            None => Socket::open(self.netns.as_deref())?,
        };
        socket.commit(tx)?;
        self.socket = Some(socket);
        Ok(())
    }
}

impl Subsystem for Nft {
    type Key = Key;
    type Value = Value;
    type Scope = TableName;

    fn scope(key: &Key) -> TableName {
        key.table.clone()
    }

    fn check(state: &MapSnapshot<Key, Value>) -> Result<(), String> {
        check::check(state)
    }

    fn clash(
        mine: &MapSnapshot<Key, Value>,
        theirs: &MapSnapshot<Key, Value>,
    ) -> Result<(), String> {
        order::clash(mine, theirs)
    }

    fn commit(
        &mut self,
        before: &MapSnapshot<Key, Value>,
        after: &MapSnapshot<Key, Value>,
        ops: &[MapOp<Key, Value>],
        full: bool,
    ) -> Result<(), String> {
        let tx = flush::transaction(before, after, ops, full);
        self.last_script = tx.to_string();
        if self.dry_run || tx.is_empty() {
            return Ok(());
        }
        self.send(tx).map_err(|e| e.to_string())
    }
}

/// What the tests of the modules share: a base chain at input, a rule
/// dropping the sources in a set.
#[cfg(test)]
mod testing {
    use kpng_netfilter::nft::build::{Load, lookup, verdict};
    use kpng_netfilter::nft::{BaseChain, ChainHook, ChainType, Expr, NfVerdict};

    use super::TableFamily;

    pub(super) fn input(priority: i32) -> BaseChain {
        BaseChain {
            kind: ChainType::Filter,
            hook: ChainHook::Input,
            priority,
        }
    }

    pub(super) fn drop_from(set: &str) -> Vec<Expr> {
        [
            lookup(&[Load::Saddr(TableFamily::Ip)], set, None, false),
            verdict(NfVerdict::Drop),
        ]
        .concat()
    }
}
