//! The iptables subsystem, and the engine that applies chains with
//! `iptables-restore --noflush` (the iptables backend uses it too).
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
//! **Atomicity**: `iptables-restore` commits table by table. A batch
//! refused in its second table has applied its first, so on a refusal the
//! engine puts back what every table held before (from the applied copy,
//! or the `iptables-save` it read on a full apply).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use kpng_netfilter::process::Process;

use kpng_diff::MapOp;
use kpng_model::IpFamily;
use kpng_store::MapSnapshot;
use serde::{Deserialize, Serialize};

use crate::{Error, Subsystem};

/// How long one `iptables-save` or `iptables-restore` may run before it is
/// killed (`-w 5` waits up to 5 s for the xtables lock first).
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// An iptables table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// `filter`.
    Filter,
    /// `nat`.
    Nat,
}

impl Table {
    /// Both, in the order batches write them.
    pub const ALL: [Table; 2] = [Table::Filter, Table::Nat];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }

    fn builtins(self) -> &'static [&'static str] {
        match self {
            Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
            Table::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        }
    }
}

/// A chain: its table and name.
pub type ChainKey = (Table, String);

/// A jump: the table, the built-in chain, the rule.
pub type Jump = (Table, String, String);

/// Which iptables to drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Mode {
    /// iptables-nft: the iptables rule language over nf_tables.
    Nft,
    /// iptables-legacy: the x_tables kernel interface.
    Legacy,
}

impl Mode {
    /// `nft` or `legacy`.
    pub fn word(self) -> &'static str {
        match self {
            Mode::Nft => "nft",
            Mode::Legacy => "legacy",
        }
    }
}

/// Runs the iptables tools of one mode, under an optional command prefix
/// (e.g. `ip netns exec NAME`).
#[derive(Clone, Debug, Default)]
pub struct Runner {
    /// The command prefix.
    pub prefix: Vec<String>,
    /// The mode; `None`: detected on first use, as kube-proxy does.
    pub mode: Option<Mode>,
}

/// What one `iptables-save` shows: per table, the chains, every rule line,
/// and the rules of the chains the caller owns.
#[derive(Clone, Debug, Default)]
pub struct Saved {
    /// The chains.
    pub chains: BTreeSet<ChainKey>,
    /// Every `-A` line.
    pub rules: BTreeSet<(Table, String)>,
    /// The rules of owned chains, as restore input (without `-A NAME`).
    pub owned: BTreeMap<ChainKey, Vec<String>>,
}

impl Runner {
    fn command(&self, family: IpFamily, mode: Mode, tool: &str) -> Process<'static> {
        let ip = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        let program = format!("{ip}-{}-{tool}", mode.word());
        Process::new(self.prefix.iter().cloned().chain([program])).timeout(COMMAND_TIMEOUT)
    }

    /// The mode, detected once when not set: the one whose `iptables-save`
    /// shows more rules and `KUBE-` chains (kube-proxy's iptables wrapper
    /// rule); nft when neither has any.
    pub fn mode(&mut self) -> Mode {
        if let Some(mode) = self.mode {
            return mode;
        }
        let count = |mode| {
            IpFamily::BOTH
                .into_iter()
                .filter_map(|family| self.save_in(family, mode, &|_| false).ok())
                .map(|s| {
                    s.rules.len()
                        + s.chains
                            .iter()
                            .filter(|(_, c)| c.starts_with("KUBE-"))
                            .count()
                })
                .sum::<usize>()
        };
        let mode = if count(Mode::Legacy) > count(Mode::Nft) {
            Mode::Legacy
        } else {
            Mode::Nft
        };
        tracing::info!(mode = mode.word(), "iptables mode");
        self.mode = Some(mode);
        mode
    }

    /// Reads `iptables-save` of `family`; `owned` tells which chains' rules
    /// to keep.
    ///
    /// # Errors
    /// [`Error::Kernel`]: it could not run, timed out or failed.
    pub fn save(&mut self, family: IpFamily, owned: &dyn Fn(&str) -> bool) -> Result<Saved, Error> {
        let mode = self.mode();
        self.save_in(family, mode, owned)
    }

    fn save_in(
        &self,
        family: IpFamily,
        mode: Mode,
        owned: &dyn Fn(&str) -> bool,
    ) -> Result<Saved, Error> {
        let output = self
            .command(family, mode, "save")
            .run()
            .map_err(Error::from)?;
        let mut saved = Saved::default();
        let mut table = None;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(name) = line.strip_prefix('*') {
                table = Table::ALL.into_iter().find(|t| t.name() == name);
            } else if let Some(t) = table {
                if let Some(chain) = line.strip_prefix(':') {
                    let name = chain.split_whitespace().next().unwrap_or_default();
                    saved.chains.insert((t, name.to_owned()));
                } else if let Some(rule) = line.strip_prefix("-A ") {
                    saved.rules.insert((t, line.to_owned()));
                    let (chain, rest) = rule.split_once(' ').unwrap_or((rule, ""));
                    if owned(chain) {
                        saved
                            .owned
                            .entry((t, chain.to_owned()))
                            .or_default()
                            .push(rest.to_owned());
                    }
                }
            }
        }
        Ok(saved)
    }

    /// Runs `iptables-restore -w 5 --noflush` with `script`.
    ///
    /// # Errors
    /// [`Error::Kernel`], with what it printed when it failed.
    pub fn restore(&mut self, family: IpFamily, script: &str) -> Result<(), Error> {
        let mode = self.mode();
        self.command(family, mode, "restore")
            .args(["-w", "5", "--noflush"])
            .input(script.as_bytes())
            .run()
            .map(drop)
            .map_err(Error::from)
    }
}

/// What one family's batch is to do.
#[derive(Clone, Copy)]
pub struct Plan<'a> {
    /// Every chain as it should be.
    pub desired: &'a BTreeMap<ChainKey, Vec<String>>,
    /// What the kernel holds, when known (an incremental batch writes only
    /// the `touched` chains that differ from it); `None`: write all.
    pub applied: Option<&'a BTreeMap<ChainKey, Vec<String>>>,
    /// The chains that may have changed.
    pub touched: &'a BTreeSet<ChainKey>,
    /// On a full batch, what `iptables-save` showed: owned chains it has
    /// that `desired` lacks are deleted, and jumps it has are not added
    /// again.
    pub existing: Option<&'a Saved>,
    /// Which chains are the caller's.
    pub owned: &'a dyn Fn(&str) -> bool,
    /// Jumps to insert (when missing).
    pub add_jumps: &'a [Jump],
    /// Jumps to remove.
    pub remove_jumps: &'a [Jump],
}

/// One family's `iptables-restore --noflush` input, and what it changes.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// The input.
    pub script: String,
    /// The chains it (re)writes.
    pub written: Vec<ChainKey>,
    /// The chains it deletes.
    pub deleted: Vec<ChainKey>,
    /// The jumps it inserts and removes.
    pub jumps: (Vec<Jump>, Vec<Jump>),
    /// Rules written.
    pub rules: usize,
}

impl Batch {
    /// Builds the batch of `plan`: per table, the chains to (re)write are
    /// declared (which flushes them) and refilled, jumps inserted and
    /// removed, and stale chains flushed then deleted.
    pub fn new(plan: Plan<'_>) -> Self {
        let mut result = Batch::default();
        let desired = plan.desired;
        for table in Table::ALL {
            let write: Vec<&ChainKey> = match plan.applied {
                None => desired.keys().filter(|(t, _)| *t == table).collect(),
                Some(applied) => plan
                    .touched
                    .iter()
                    .filter(|k| k.0 == table)
                    .filter(|k| desired.contains_key(*k) && desired.get(*k) != applied.get(*k))
                    .collect(),
            };
            let stale: Vec<&String> = match (plan.applied, plan.existing) {
                (Some(applied), _) => plan
                    .touched
                    .iter()
                    .filter(|k| {
                        k.0 == table && !desired.contains_key(*k) && applied.contains_key(*k)
                    })
                    .map(|(_, name)| name)
                    .collect(),
                (None, Some(saved)) => saved
                    .chains
                    .iter()
                    .filter(|(t, name)| {
                        *t == table
                            && (plan.owned)(name)
                            && !desired.contains_key(&(table, name.clone()))
                    })
                    .map(|(_, name)| name)
                    .collect(),
                (None, None) => Vec::new(),
            };
            let present = |(t, builtin, rule): &Jump| {
                plan.existing
                    .is_some_and(|s| s.rules.contains(&(*t, format!("-A {builtin} {rule}"))))
            };
            let add: Vec<&Jump> = plan
                .add_jumps
                .iter()
                .filter(|j| j.0 == table && !present(j))
                .collect();
            let remove: Vec<&Jump> = plan.remove_jumps.iter().filter(|j| j.0 == table).collect();
            if write.is_empty() && stale.is_empty() && add.is_empty() && remove.is_empty() {
                continue;
            }
            let out = &mut result.script;
            let _ = writeln!(out, "*{}", table.name());
            for (_, name) in &write {
                let _ = writeln!(out, ":{name} - [0:0]");
            }
            for name in &stale {
                let _ = writeln!(out, ":{name} - [0:0]");
            }
            for key in &write {
                for rule in desired.get(*key).into_iter().flatten() {
                    let _ = writeln!(out, "-A {} {rule}", key.1);
                    result.rules += 1;
                }
            }
            for (_, builtin, rule) in &remove {
                let _ = writeln!(out, "-D {builtin} {rule}");
            }
            // Inserted at the top in reverse, so they end up in order.
            for (_, builtin, rule) in add.iter().rev() {
                let _ = writeln!(out, "-I {builtin} 1 {rule}");
            }
            for name in &stale {
                let _ = writeln!(out, "-X {name}");
            }
            out.push_str("COMMIT\n");
            result.written.extend(write.into_iter().cloned());
            result
                .deleted
                .extend(stale.into_iter().map(|name| (table, name.clone())));
            result.jumps.0.extend(add.into_iter().cloned());
            result.jumps.1.extend(remove.into_iter().cloned());
        }
        result
    }

    /// The input that puts every chain and jump this batch touches back
    /// as `before` had it (see the module docs). Chains `before` did not
    /// have are left empty, never deleted (a jump may already point at
    /// them); the next full apply removes them.
    pub fn rollback(&self, before: &BTreeMap<ChainKey, Vec<String>>) -> String {
        let mut out = String::new();
        for table in Table::ALL {
            let chains: Vec<&ChainKey> = self
                .written
                .iter()
                .chain(&self.deleted)
                .filter(|k| k.0 == table)
                .collect();
            let added: Vec<&Jump> = self.jumps.0.iter().filter(|j| j.0 == table).collect();
            let removed: Vec<&Jump> = self.jumps.1.iter().filter(|j| j.0 == table).collect();
            if chains.is_empty() && added.is_empty() && removed.is_empty() {
                continue;
            }
            let _ = writeln!(out, "*{}", table.name());
            for (_, name) in &chains {
                let _ = writeln!(out, ":{name} - [0:0]");
            }
            for key in &chains {
                for rule in before.get(*key).into_iter().flatten() {
                    let _ = writeln!(out, "-A {} {rule}", key.1);
                }
            }
            for (_, builtin, rule) in added {
                let _ = writeln!(out, "-D {builtin} {rule}");
            }
            for (_, builtin, rule) in removed {
                let _ = writeln!(out, "-I {builtin} 1 {rule}");
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

/// The chains of one family: their rules by (table, name).
pub type Chains = BTreeMap<ChainKey, Vec<String>>;

/// Applies one batch per family; on a refusal, rolls every family back to
/// its `before` chains and returns the error.
///
/// # Errors
/// The first refusal.
pub fn apply_batches(
    runner: &mut Runner,
    batches: &[(IpFamily, Batch, Chains)],
) -> Result<(), Error> {
    let mut failure = None;
    for (family, batch, _) in batches {
        if batch.script.is_empty() {
            continue;
        }
        if let Err(e) = runner.restore(*family, &batch.script) {
            failure = Some(e);
            break;
        }
    }
    let Some(error) = failure else {
        return Ok(());
    };
    for (family, batch, before) in batches {
        let undo = batch.rollback(before);
        if undo.is_empty() {
            continue;
        }
        if let Err(undo_error) = runner.restore(*family, &undo) {
            tracing::error!(error = %undo_error, ?family, "iptables rollback failed");
        }
    }
    Err(error)
}

/// The family of a published object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// iptables.
    V4,
    /// ip6tables.
    V6,
}

impl From<Family> for IpFamily {
    fn from(family: Family) -> Self {
        match family {
            Family::V4 => IpFamily::V4,
            Family::V6 => IpFamily::V6,
        }
    }
}

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
    /// Its family.
    pub family: Family,
    /// Its table.
    pub table: Table,
    /// The object.
    pub object: Object,
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
        family: Family,
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
        family: Family,
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
fn family_state(state: &MapSnapshot<Key, Value>, family: Family) -> (Chains, Vec<Jump>) {
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

    fn apply(
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
        for family in [Family::V4, Family::V6] {
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
                        .save(family.into(), &owned)
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
            batches.push((IpFamily::from(family), batch, before_chains));
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
            Family::V4,
            Table::Nat,
            "KUBE-SERVICES",
            ["-d 10.96.0.1/32 -j KUBE-SVC-A"],
        )
        .chain(
            Family::V4,
            Table::Nat,
            "KUBE-SVC-A",
            ["-j DNAT --to-destination 10.244.0.1:80"],
        )
        .jump(Family::V4, Table::Nat, "PREROUTING", "-j KUBE-SERVICES", 0);
        agg.publish("kpng", kube).unwrap();
        let mut cni = Fragment::new();
        cni.chain(
            Family::V4,
            Table::Filter,
            "CNI-FW",
            ["-s 192.0.2.66/32 -j DROP"],
        )
        .jump(Family::V4, Table::Filter, "FORWARD", "-j CNI-FW", 0);
        agg.publish("cni", cni.clone()).unwrap();
        // The CNI may not touch KUBE- chains.
        cni.chain(Family::V4, Table::Nat, "KUBE-SERVICES", ["-j ACCEPT"]);
        assert!(
            agg.publish("cni", cni)
                .unwrap_err()
                .to_string()
                .contains("belongs to producer kpng")
        );
        // A jump to nothing published is refused.
        let mut bad = Fragment::new();
        bad.jump(Family::V4, Table::Filter, "INPUT", "-j OTHER-X", 0);
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
            family: Family::V4,
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
