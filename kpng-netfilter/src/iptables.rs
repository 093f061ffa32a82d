//! The iptables engine: chains applied with `iptables-restore --noflush`
//! batches, read back with `iptables-save`, put back on a refusal.
//!
//! **Atomicity**: `iptables-restore` commits table by table. A batch
//! refused in its second table has applied its first, so on a refusal
//! [`apply_batches`] puts back what every table held before (from the
//! applied copy, or the `iptables-save` it read on a full apply).
//!
//! **Scale with iptables-legacy**: `iptables-legacy-restore` keeps every
//! chain name it meets (each `:CHAIN` line, each `-j` to a chain) in
//! libxtables' `notargets` hash table, 512 buckets walked on every `:CHAIN`
//! line and every `-j`: a transaction of N chains and M rules costs
//! O(N × M / 512) string compares (`perf`: half of a 10k × 10 restore, most
//! of a 50k × 10 one). So a section declaring more than
//! [`LEGACY_CHUNK_CHAINS`] chains is applied in several transactions, one
//! process each ([`in_chunks`]); not many, since each legacy commit
//! rewrites the whole table. A failed chunk leaves the chunks before it
//! applied (chains the old rules still reach, refilled whole) and
//! [`apply_batches`] puts back what they wrote; the xtables lock is free
//! between them.
//!
//! The tools run through [`crate::process`]: a timeout on every run, and
//! they die with kpng. The timeout scales with the input
//! ([`scaled_timeout`]) unless [`Runner::timeout`] sets one.
//!
//! **Scale with iptables-nft**: `iptables-nft-restore --noflush` keeps the
//! names of the chains a transaction mentions in a sorted linked list, to
//! fetch only those from the kernel: one list walk per command, so a
//! transaction of N chains and M rules costs O(N × M) string compares
//! (10k Services × 10 endpoints: 110k chains, 330k rules, ~10 minutes).
//! A command naming no chain makes it fetch the whole table and keep no
//! list, so a section declaring many chains starts with `-S` (listing the
//! table; the output is thrown away). See docs/performance.md, "iptables".

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use kpng_model::IpFamily;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::process::Process;

/// The least time one `iptables-save` or `iptables-restore` may run before
/// it is killed (`-w 5` waits up to 5 s for the xtables lock first).
pub const TIMEOUT_BASE: Duration = Duration::from_secs(60);

/// What each line of input adds to [`TIMEOUT_BASE`].
pub const TIMEOUT_PER_LINE: Duration = Duration::from_millis(2);

/// A table section of an iptables-nft transaction declaring at least this
/// many chains starts with `-S` (see the module docs).
pub const LIST_FIRST_CHAINS: usize = 1_000;

/// With iptables-legacy, a table section declaring more chains than this
/// is applied in several transactions of at most this many chains each
/// (see [`in_chunks`]): `iptables-legacy-restore` keeps every chain name it
/// meets in a 512-bucket hash table (libxtables' `notargets`) walked by
/// every `:CHAIN` line and every `-j`, so one transaction of N chains costs
/// O(N²); each commit also rewrites the whole table, so chunks are few.
pub const LEGACY_CHUNK_CHAINS: usize = 100_000;

/// [`in_chunks`]: a chain more than this many chains jump to is shared
/// (it goes first), one that jumps to more is a dispatch chain (last).
const HUB_CHAINS: usize = 64;

/// How long a run with `lines` lines of input (or output) may take:
/// [`TIMEOUT_BASE`] plus [`TIMEOUT_PER_LINE`] per line.
///
/// ```
/// use std::time::Duration;
/// use kpng_netfilter::iptables::scaled_timeout;
///
/// assert_eq!(scaled_timeout(10), Duration::from_millis(60_020));
/// // 50,000 Services x 10 endpoints: ~2.2 million lines.
/// assert!(scaled_timeout(2_200_000) > Duration::from_secs(4_000));
/// ```
pub fn scaled_timeout(lines: usize) -> Duration {
    let lines = u32::try_from(lines).unwrap_or(u32::MAX);
    TIMEOUT_BASE.saturating_add(TIMEOUT_PER_LINE.saturating_mul(lines))
}

/// An iptables table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    /// `filter`.
    Filter,
    /// `nat`.
    Nat,
    /// `raw` (before conntrack).
    Raw,
}

impl Table {
    /// Every table, in the order batches write them (a batch writes only
    /// those it changes).
    pub const ALL: [Table; 3] = [Table::Filter, Table::Nat, Table::Raw];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
            Table::Raw => "raw",
        }
    }

    /// Its built-in chains.
    pub fn builtins(self) -> &'static [&'static str] {
        match self {
            Table::Filter => &["INPUT", "FORWARD", "OUTPUT"],
            Table::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
            Table::Raw => &["PREROUTING", "OUTPUT"],
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
    /// The timeout of every run; `None` (default): scaled to its input
    /// ([`scaled_timeout`]; an `iptables-save` to [`Runner::expected_lines`]).
    pub timeout: Option<Duration>,
    /// About how many lines an `iptables-save` prints (e.g. the rules the
    /// caller wants): what its timeout scales with.
    pub expected_lines: usize,
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
    fn command(&self, family: IpFamily, mode: Mode, tool: &str, lines: usize) -> Process<'static> {
        let ip = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        let program = format!("{ip}-{}-{tool}", mode.word());
        Process::new(self.prefix.iter().cloned().chain([program]))
            .timeout(self.timeout.unwrap_or_else(|| scaled_timeout(lines)))
    }

    /// How long a restore of `script` may run.
    pub fn restore_timeout(&self, script: &str) -> Duration {
        self.timeout
            .unwrap_or_else(|| scaled_timeout(bytecount_lines(script)))
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
    /// [`Error::Spawn`], [`Error::Timeout`] or [`Error::Command`].
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
            .command(family, mode, "save", self.expected_lines)
            .run()?;
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

    /// Runs `iptables-restore -w 5 --noflush` with `script`, killed after
    /// [`Runner::restore_timeout`]. With iptables-nft, a table section
    /// declaring many chains gets `-S` first (see the module docs).
    ///
    /// # Errors
    /// [`Error::Spawn`], [`Error::Timeout`], or [`Error::Command`] with what
    /// it printed.
    ///
    /// With iptables-legacy, a section declaring more than
    /// [`LEGACY_CHUNK_CHAINS`] chains is applied in several transactions,
    /// one `iptables-restore` each, each with its own timeout ([`in_chunks`]
    /// says in which order, so that no jump ever points at a chain not yet
    /// made or already emptied); on a failure the chunks before it stay
    /// applied, and the caller puts back what it wrote
    /// ([`apply_batches`] does).
    pub fn restore(&mut self, family: IpFamily, script: &str) -> Result<(), Error> {
        let mode = self.mode();
        let declared = || script.split('\n').filter(|l| l.starts_with(':')).count();
        if mode == Mode::Legacy && declared() > LEGACY_CHUNK_CHAINS {
            let chunks = in_chunks(script, LEGACY_CHUNK_CHAINS);
            if chunks.len() > 1 {
                let count = chunks.len();
                for (i, chunk) in chunks.iter().enumerate() {
                    tracing::debug!(chunk = i + 1, count, "iptables-legacy-restore chunk");
                    self.restore_one(family, mode, vec![chunk.as_str()], chunk)?;
                }
                return Ok(());
            }
        }
        let parts = match mode {
            Mode::Nft => listing_first(script),
            Mode::Legacy => vec![script],
        };
        self.restore_one(family, mode, parts, script)
    }

    fn restore_one(
        &self,
        family: IpFamily,
        mode: Mode,
        parts: Vec<&str>,
        script: &str,
    ) -> Result<(), Error> {
        self.command(family, mode, "restore", 0)
            .timeout(self.restore_timeout(script))
            .args(["-w", "5", "--noflush"])
            .input_parts(parts.into_iter().map(str::as_bytes).collect())
            .discard_stdout()
            .run()
            .map(drop)
    }
}

/// `script` as one or more `iptables-restore --noflush` inputs, applied
/// one after the other: a table section declaring more than `max_chains`
/// chains is cut into sections of at most `max_chains` declared chains
/// each (a single input when none is).
///
/// The order keeps every state in between sound, and each run cheap:
/// chains that many chains jump to (KUBE-MARK-MASQ) come first; then the
/// chains that jump to each other, by connected group (a Service port's
/// KUBE-SVC and its KUBE-SEP chains), a group never split, so that a jump
/// mostly names a chain its own run made; last, the chains that jump to
/// many (the dispatch chains), the
/// chains declared only to be deleted (`-X`), and every line that is not
/// a chain's declaration or `-A` rule (`-I`, `-D`, `-X`, …). A jump never
/// points at a chain not made yet; a chain is refilled whole in one run.
/// Chains keep their order within a run (sorted names: libiptc's chain
/// list is sorted). A section where that order cannot hold is left whole.
///
/// ```
/// use kpng_netfilter::iptables::in_chunks;
///
/// let script = "*nat\n:A - [0:0]\n:B - [0:0]\n:C - [0:0]\n:D - [0:0]\n\
///               -A A -j B\n-A B -j DNAT --to-destination 10.0.0.1\n\
///               -A C -j D\n-A D -j DNAT --to-destination 10.0.0.2\n\
///               -I PREROUTING 1 -j A\n-I PREROUTING 1 -j C\nCOMMIT\n";
/// let chunks = in_chunks(script, 2);
/// assert_eq!(chunks.len(), 3);
/// // A with B, C with D, then the hooks.
/// assert!(chunks[0].contains(":A ") && chunks[0].contains(":B "));
/// assert!(chunks[1].contains(":C ") && chunks[1].contains(":D "));
/// assert!(chunks[2].contains("-I PREROUTING") && !chunks[2].contains(":A "));
/// assert_eq!(in_chunks(script, 4), [script]);
/// ```
pub fn in_chunks(script: &str, max_chains: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    let mut section: Vec<&str> = Vec::new();
    let mut header = "";
    for line in script.split_inclusive('\n') {
        if header.is_empty() {
            if line.starts_with('*') {
                header = line;
                section.clear();
            } else {
                pending.push_str(line);
            }
            continue;
        }
        if line.starts_with("COMMIT") {
            match split_section(header, &section, max_chains) {
                Some(parts) => {
                    let mut parts = parts.into_iter();
                    if let Some(first) = parts.next() {
                        pending.push_str(&first);
                    }
                    for part in parts {
                        out.push(std::mem::take(&mut pending));
                        pending = part;
                    }
                }
                None => {
                    pending.push_str(header);
                    section.iter().for_each(|l| pending.push_str(l));
                    pending.push_str(line);
                }
            }
            header = "";
        } else {
            section.push(line);
        }
    }
    if !header.is_empty() {
        // An unterminated section: left as it came.
        pending.push_str(header);
        section.iter().for_each(|l| pending.push_str(l));
    }
    if !pending.is_empty() || out.is_empty() {
        out.push(pending);
    }
    out
}

/// One table section (`header`, its lines without `COMMIT`) cut into
/// whole sections of at most `max` declared chains, in the order
/// [`in_chunks`] describes; `None` when it is small or that order does
/// not hold.
fn split_section(header: &str, lines: &[&str], max: usize) -> Option<Vec<String>> {
    let declarations: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with(':'))
        .collect();
    let declared: Vec<&str> = declarations
        .iter()
        .filter_map(|l| l[1..].split_whitespace().next())
        .collect();
    if declared.len() <= max || declared.len() != declarations.len() {
        return None;
    }
    let index: std::collections::HashMap<&str, usize> =
        declared.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let mut rules: Vec<Vec<&str>> = vec![Vec::new(); declared.len()];
    let mut rest: Vec<&str> = Vec::new();
    let mut deleted: BTreeSet<usize> = BTreeSet::new();
    for line in lines {
        if line.starts_with(':') {
            continue;
        }
        let chain = line
            .strip_prefix("-A ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|c| index.get(c));
        match chain {
            Some(&i) => rules[i].push(line),
            None => {
                if let Some(name) = line.strip_prefix("-X ").map(str::trim) {
                    deleted.extend(index.get(name).copied());
                }
                rest.push(line);
            }
        }
    }
    let n = declared.len();
    let targets: Vec<Vec<usize>> = rules
        .iter()
        .map(|list| {
            let mut to: Vec<usize> = list
                .iter()
                .filter_map(|rule| jump_target(rule))
                .filter_map(|t| index.get(t).copied())
                .collect();
            to.sort_unstable();
            to.dedup();
            to
        })
        .collect();
    let mut referrers = vec![0_usize; n];
    for to in &targets {
        for j in to {
            referrers[*j] += 1;
        }
    }
    // Shared chains (many chains jump to them: KUBE-MARK-MASQ) come
    // first; the dispatch chains (jumping to many) and the chains
    // deleted, last; the others go by connected groups (a Service port's
    // chains), never split: a rollback's empty chains make a group each.
    let shared: Vec<bool> = referrers.iter().map(|r| *r > HUB_CHAINS).collect();
    let mut last: Vec<bool> = (0..n)
        .map(|i| !shared[i] && targets[i].len() > HUB_CHAINS)
        .collect();
    for i in &deleted {
        last[*i] = true;
    }
    let mut group: Vec<usize> = (0..n).collect();
    fn root(group: &mut [usize], mut i: usize) -> usize {
        while group[i] != i {
            group[i] = group[group[i]];
            i = group[i];
        }
        i
    }
    for (i, to) in targets.iter().enumerate() {
        for j in to {
            if !shared[i] && !last[i] && !shared[*j] && !last[*j] {
                let (a, b) = (root(&mut group, i), root(&mut group, *j));
                group[a.max(b)] = a.min(b);
            }
        }
    }
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..n {
        if !shared[i] && !last[i] {
            let r = root(&mut group, i);
            members.entry(r).or_default().push(i);
        }
    }
    let mut chunks: Vec<Vec<usize>> = vec![(0..n).filter(|i| shared[*i]).collect()];
    for list in members.into_values() {
        let fits = chunks
            .last()
            .is_some_and(|c| c.len() + list.len() <= max.max(1));
        match chunks.last_mut() {
            Some(current) if fits || current.is_empty() => current.extend(list),
            _ => chunks.push(list),
        }
    }
    chunks.push((0..n).filter(|i| last[*i]).collect());
    // Every jump goes to a chain of its chunk or of one before it, or the
    // section stays whole.
    let mut chunk_of = vec![0_usize; n];
    for (c, list) in chunks.iter().enumerate() {
        for i in list {
            chunk_of[*i] = c;
        }
    }
    let sound = (0..n).all(|i| targets[i].iter().all(|j| chunk_of[*j] <= chunk_of[i]));
    if !sound {
        return None;
    }
    let write = |chains: &mut Vec<usize>, rest: &[&str]| {
        chains.sort_unstable();
        let mut text = String::from(header);
        for i in chains.iter() {
            text.push_str(declarations[*i]);
        }
        for i in chains.iter() {
            rules[*i].iter().for_each(|r| text.push_str(r));
        }
        rest.iter().for_each(|l| text.push_str(l));
        text.push_str("COMMIT\n");
        text
    };
    let count = chunks.len();
    let parts: Vec<String> = chunks
        .iter_mut()
        .enumerate()
        .filter(|(c, list)| !list.is_empty() || (c + 1 == count && !rest.is_empty()))
        .map(|(c, list)| write(list, if c + 1 == count { &rest } else { &[] }))
        .collect();
    if parts.len() < 2 {
        return None;
    }
    Some(parts)
}

/// The lines of `text`.
fn bytecount_lines(text: &str) -> usize {
    text.bytes().filter(|b| *b == b'\n').count()
}

/// `script` in parts, with a `-S` line after the `*table` line of each
/// section that declares at least [`LIST_FIRST_CHAINS`] chains: a command
/// naming no chain, so iptables-nft-restore fetches the whole table instead
/// of keeping a sorted list of every chain named (see the module docs).
/// Such a section's `-I` lines (the jumps from the built-in chains) move to
/// a second section of the same table, committed right after it: after
/// `-S`, iptables-nft takes a built-in chain the kernel does not have yet
/// (a fresh node) as there, and an insert into it fails.
pub fn listing_first(script: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut section_start, mut pos) = (0, 0);
    let (mut header, mut header_end) = ("", 0);
    let mut declared = 0;
    let mut inserts: Option<(usize, usize)> = None;
    for line in script.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        if line.starts_with('*') {
            (header, header_end) = (line, pos);
            (declared, inserts) = (0, None);
        } else if line.starts_with(':') {
            declared += 1;
        } else if line.starts_with("-I ") {
            inserts = Some((inserts.map_or(start, |(first, _)| first), pos));
        } else if line.starts_with("COMMIT") {
            if declared >= LIST_FIRST_CHAINS && !header.is_empty() {
                parts.extend([&script[section_start..header_end], "-S\n"]);
                match inserts {
                    Some((first, end)) => parts.extend([
                        &script[header_end..first],
                        &script[end..pos],
                        header,
                        &script[first..end],
                        "COMMIT\n",
                    ]),
                    None => parts.push(&script[header_end..pos]),
                }
            } else {
                parts.push(&script[section_start..pos]);
            }
            section_start = pos;
            header = "";
        }
    }
    if section_start < script.len() {
        parts.push(&script[section_start..]);
    }
    parts
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
                    // The cheap test first: most saved rules are in other
                    // chains (a kube-proxy node has ~100k of its own).
                    if *t != table || !table.builtins().contains(&builtin) {
                        continue;
                    }
                    if jump_target(rule).is_some_and(|to| stale.iter().any(|s| *s == to)) {
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

    /// A full sync's script: `services` Services of `endpoints` chains.
    fn script(services: usize, endpoints: usize) -> String {
        let mut out = String::from("*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n");
        for s in 0..services {
            for e in 0..endpoints {
                let _ = writeln!(out, ":KUBE-SEP-{s}-{e} - [0:0]");
            }
            let _ = writeln!(out, ":KUBE-SVC-{s} - [0:0]");
        }
        for s in 0..services {
            for e in 0..endpoints {
                let _ = writeln!(out, "-A KUBE-SVC-{s} -j KUBE-SEP-{s}-{e}");
            }
        }
        out.push_str("COMMIT\n");
        out
    }

    /// The timeout was 60 s whatever the input: 50k x 10 was killed.
    #[test]
    fn the_restore_timeout_scales_with_the_transaction() {
        let runner = Runner::default();
        let small = runner.restore_timeout(&script(10, 10));
        let large = runner.restore_timeout(&script(5_000, 10));
        assert!(small >= TIMEOUT_BASE && small < TIMEOUT_BASE + Duration::from_secs(1));
        // 105k lines: 60 s + 210 s.
        assert_eq!(
            large,
            TIMEOUT_BASE + TIMEOUT_PER_LINE * u32::try_from(5_000 * 21 + 5).expect("small")
        );
        assert!(scaled_timeout(2_200_000) > Duration::from_secs(4_000));
        // A flag sets it, whatever the input.
        let fixed = Runner {
            timeout: Some(Duration::from_millis(5)),
            ..Runner::default()
        };
        assert_eq!(
            fixed.restore_timeout(&script(5_000, 10)),
            Duration::from_millis(5)
        );
    }

    /// A full batch's shape: per Service an SVC chain jumping to its SEP
    /// chains, a dispatch chain jumping to the SVCs, a stale chain, the
    /// hooks.
    fn batch_script(services: usize) -> String {
        let mut out = String::from("*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n");
        let mut decl = vec!["KUBE-MARK-MASQ".to_owned(), "KUBE-SERVICES".to_owned()];
        for s in 0..services {
            decl.push(format!("KUBE-SVC-{s:04}"));
            decl.extend((0..3).map(|e| format!("KUBE-SEP-{s:04}-{e}")));
        }
        decl.push("KUBE-SVC-OLD".to_owned());
        decl.sort();
        for name in &decl {
            let _ = writeln!(out, ":{name} - [0:0]");
        }
        out.push_str("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n");
        for s in 0..services {
            let _ = writeln!(out, "-A KUBE-SERVICES -d 10.96.0.{s}/32 -j KUBE-SVC-{s:04}");
        }
        for s in 0..services {
            for e in 0..3 {
                let _ = writeln!(out, "-A KUBE-SVC-{s:04} -g KUBE-SEP-{s:04}-{e}");
                let _ = writeln!(
                    out,
                    "-A KUBE-SEP-{s:04}-{e} -s 10.244.0.{e}/32 -j KUBE-MARK-MASQ"
                );
                let _ = writeln!(
                    out,
                    "-A KUBE-SEP-{s:04}-{e} -j DNAT --to-destination 10.244.0.{e}:80"
                );
            }
        }
        out.push_str("-I PREROUTING 1 -j KUBE-SERVICES\n-X KUBE-SVC-OLD\nCOMMIT\n");
        out
    }

    /// A large section became several transactions: each declares at most
    /// the limit, every line is kept once, a jump never goes to a chain
    /// of a later transaction, and the hooks and deletions come last.
    #[test]
    fn a_large_legacy_section_is_cut_so_that_every_jump_has_its_chain() {
        let script = batch_script(100);
        assert_eq!(in_chunks(&script, 1_000), std::slice::from_ref(&script));
        let chunks = in_chunks(&script, 50);
        assert!(chunks.len() >= 4, "{} chunks", chunks.len());
        let lines = |text: &str| -> Vec<String> {
            let mut all: Vec<String> = text
                .lines()
                .filter(|l| !l.starts_with('*') && *l != "COMMIT")
                .map(str::to_owned)
                .collect();
            all.sort();
            all
        };
        assert_eq!(lines(&chunks.concat()), lines(&script));
        let mut made: BTreeSet<String> = BTreeSet::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let declared: Vec<&str> = chunk
                .lines()
                .filter_map(|l| l.strip_prefix(':'))
                .filter_map(|l| l.split(' ').next())
                .collect();
            for section in chunk.split('*').skip(1) {
                let count = section.lines().filter(|l| l.starts_with(':')).count();
                assert!(count <= 50, "chunk {i}: {count}");
            }
            made.extend(declared.iter().map(|d| (*d).to_owned()));
            for rule in chunk.lines().filter(|l| l.starts_with("-A ")) {
                if let Some(to) = jump_target(rule).filter(|t| t.starts_with("KUBE-")) {
                    assert!(made.contains(to), "chunk {i}: {rule} before {to} is made");
                }
            }
            let last = i + 1 == chunks.len();
            for tail in [
                "-I PREROUTING",
                "-X KUBE-SVC-OLD",
                ":KUBE-SVC-OLD",
                ":KUBE-SERVICES",
            ] {
                assert_eq!(
                    chunk.contains(tail),
                    last || (i == 0 && tail == ":KUBE-SERVICES"),
                    "chunk {i}: {tail}"
                );
            }
            assert_eq!(
                chunk.matches("COMMIT\n").count(),
                chunk.matches('*').count()
            );
        }
        // The first holds the small filter section whole.
        assert!(chunks[0].starts_with("*filter\n:KUBE-SERVICES - [0:0]\nCOMMIT\n*nat\n"));
        // A Service port's chains share a run, whatever their names.
        for chunk in &chunks {
            for s in 0..100 {
                let svc = chunk.contains(&format!(":KUBE-SVC-{s:04} "));
                let seps = (0..3).filter(|e| chunk.contains(&format!(":KUBE-SEP-{s:04}-{e} ")));
                assert_eq!(seps.count(), if svc { 3 } else { 0 }, "{s}");
            }
        }
        // A rollback's shape, empty chains only: runs of at most the limit.
        let empty: String = (0..200)
            .map(|i| format!(":KUBE-SEP-{i:04} - [0:0]\n"))
            .collect();
        let rollback = format!("*nat\n{empty}-D PREROUTING -j KUBE-SERVICES\nCOMMIT\n");
        let runs = in_chunks(&rollback, 50);
        assert_eq!(runs.len(), 5, "{runs:?}");
        assert!(runs[4].starts_with("*nat\n-D PREROUTING"));
        // Chains that all jump to each other (a loop, which the kernel
        // refuses anyway) make one group: the section stays whole.
        let back =
            "*nat\n:A - [0:0]\n:B - [0:0]\n:C - [0:0]\n-A A -j B\n-A B -j C\n-A C -j A\nCOMMIT\n";
        assert_eq!(in_chunks(back, 1), [back]);
    }

    /// Only sections that declare many chains list the table first, right
    /// after their header; the input is otherwise the same.
    #[test]
    fn large_sections_list_the_table_first() {
        let small = script(10, 10);
        assert_eq!(listing_first(&small).concat(), small);
        let large = script(200, 10);
        let parts = listing_first(&large);
        assert_eq!(parts.concat(), large.replacen("*nat\n", "*nat\n-S\n", 1));
        assert_eq!(parts[1], "*nat\n", "{}", parts[0]);
        // The jumps from the built-in chains go in a section of their own.
        let hooks = "-I PREROUTING 1 -j KUBE-SERVICES\n-I OUTPUT 1 -j KUBE-SERVICES\n";
        let with_hooks = large.replace("COMMIT\n", &format!("{hooks}-X KUBE-OLD\nCOMMIT\n"));
        let moved = large
            .replacen("*nat\n", "*nat\n-S\n", 1)
            .replace("COMMIT\n", "-X KUBE-OLD\nCOMMIT\n")
            .replacen(
                "-X KUBE-OLD\nCOMMIT\n",
                &format!("{hooks}-X KUBE-OLD\nCOMMIT\n"),
                1,
            );
        assert_eq!(
            listing_first(&with_hooks).concat(),
            format!("{moved}*nat\n{hooks}COMMIT\n")
        );
    }
}
