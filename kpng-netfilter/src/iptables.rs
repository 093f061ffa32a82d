//! The iptables engine: chains applied with `iptables-restore --noflush`
//! batches, read back with `iptables-save`, put back on a refusal.
//!
//! **Atomicity**: `iptables-restore` commits table by table. A batch
//! refused in its second table has applied its first, so on a refusal
//! [`apply_batches`] puts back what every table held before (from the
//! applied copy, or the `iptables-save` it read on a full apply).
//!
//! The tools run through [`crate::process`]: a timeout on every run, and
//! they die with kpng.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::process::Process;

/// An address family: `iptables` or `ip6tables`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// iptables.
    V4,
    /// ip6tables.
    V6,
}

impl Family {
    /// Both, IPv4 first.
    pub const BOTH: [Family; 2] = [Family::V4, Family::V6];
}

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

    /// Its built-in chains.
    pub fn builtins(self) -> &'static [&'static str] {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    fn command(&self, family: Family, mode: Mode, tool: &str) -> Process<'static> {
        let ip = match family {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
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
            Family::BOTH
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
    /// [`Error::Spawn`], [`Error::Timeout`] or [`Error::Command`].
    pub fn save(&mut self, family: Family, owned: &dyn Fn(&str) -> bool) -> Result<Saved, Error> {
        let mode = self.mode();
        self.save_in(family, mode, owned)
    }

    fn save_in(
        &self,
        family: Family,
        mode: Mode,
        owned: &dyn Fn(&str) -> bool,
    ) -> Result<Saved, Error> {
        let output = self.command(family, mode, "save").run()?;
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
    /// [`Error::Spawn`], [`Error::Timeout`], or [`Error::Command`] with what
    /// it printed.
    pub fn restore(&mut self, family: Family, script: &str) -> Result<(), Error> {
        let mode = self.mode();
        self.command(family, mode, "restore")
            .args(["-w", "5", "--noflush"])
            .input(script.as_bytes())
            .run()
            .map(drop)
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
            let mut remove: Vec<Jump> = plan
                .remove_jumps
                .iter()
                .filter(|j| j.0 == table)
                .cloned()
                .collect();
            // A full batch deletes stale chains of its names that another
            // program left (kube-proxy's, on a swap): the built-in chains'
            // jumps to them go with them, or the deletion is refused.
            if let (None, Some(saved)) = (plan.applied, plan.existing) {
                for (t, line) in &saved.rules {
                    let Some((builtin, rule)) = line
                        .strip_prefix("-A ")
                        .and_then(|rule| rule.split_once(' '))
                    else {
                        continue;
                    };
                    let to_stale =
                        jump_target(rule).is_some_and(|to| stale.iter().any(|s| *s == to));
                    if *t == table && table.builtins().contains(&builtin) && to_stale {
                        let jump = (table, builtin.to_owned(), rule.to_owned());
                        if !remove.contains(&jump) {
                            remove.push(jump);
                        }
                    }
                }
            }
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
            result.jumps.1.extend(remove);
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

/// The chain a rule jumps or goes to (`-j NAME`, `-g NAME`).
fn jump_target(rule: &str) -> Option<&str> {
    let mut words = rule.split_whitespace();
    while let Some(word) = words.next() {
        if matches!(word, "-j" | "--jump" | "-g" | "--goto") {
            return words.next();
        }
    }
    None
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
    batches: &[(Family, Batch, Chains)],
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

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-proxy's `filter` `KUBE-NODEPORTS`, which the backend's names
    /// own but it does not write, and kube-proxy's `INPUT` jump to it: a
    /// full batch deleted the chain and not the jump, and was refused.
    #[test]
    fn a_full_batch_deletes_the_built_in_jumps_to_the_stale_chains_it_deletes() {
        let owned = |name: &str| name.starts_with("KUBE-");
        let mut saved = Saved::default();
        for (table, chain) in [
            (Table::Filter, "KUBE-NODEPORTS"),
            (Table::Filter, "KUBE-SERVICES"),
            (Table::Filter, "OTHER"),
        ] {
            saved.chains.insert((table, chain.to_owned()));
        }
        let jump = "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS";
        for rule in [jump, "-A INPUT -j KUBE-SERVICES", "-A INPUT -j OTHER"] {
            saved.rules.insert((Table::Filter, rule.to_owned()));
        }
        let desired: Chains = [((Table::Filter, "KUBE-SERVICES".to_owned()), vec![])].into();
        let batch = Batch::new(Plan {
            desired: &desired,
            applied: None,
            touched: &BTreeSet::new(),
            existing: Some(&saved),
            owned: &owned,
            add_jumps: &[],
            remove_jumps: &[],
        });
        let delete_jump = format!("-D {}", jump.trim_start_matches("-A "));
        let deleted_at = batch.script.find(&delete_jump).expect("jump deleted");
        let chain_at = batch
            .script
            .find("-X KUBE-NODEPORTS")
            .expect("chain deleted");
        assert!(deleted_at < chain_at, "{}", batch.script);
        assert!(!batch.script.contains("-D INPUT -j KUBE-SERVICES"));
        assert!(!batch.script.contains("OTHER"), "{}", batch.script);
        assert_eq!(batch.jumps.1.len(), 1, "put back on a rollback");
        assert!(
            batch
                .rollback(&Chains::new())
                .contains("-I INPUT 1 -m comment")
        );
    }
}
