//! The kernel side of kpng-rs: nf_tables programmed over netlink, with no
//! `nft` process.
//!
//! [`nft`] builds tables, chains, sets and maps, their elements and rules
//! (with the expressions a service proxy needs: payload, meta, ct, cmp,
//! bitwise, lookup and verdict maps, immediate verdicts, nat, masquerade,
//! numgen, fib, reject, counter, notrack and dynset), and applies them as one
//! atomic batch per [`nft::Transaction`]. A refused batch changes nothing,
//! and its error names the change the kernel refused. Tables are read
//! back from the kernel, to adopt what a previous run left and to verify.
//!
//! [`iptables`] is the engine that applies chains with
//! `iptables-restore --noflush` batches and puts them back on a refusal.
//!
//! [`leftovers`] finds and removes what kube-proxy programmed in each of
//! its modes (its nftables tables, its iptables chains, IPVS), as
//! kube-proxy removes the other modes' rules when it starts.
//!
//! [`addresses`] follows a network namespace's interface addresses over
//! rtnetlink (the `rtnetlink` crate): what is there now, and each address
//! added or removed.
//!
//! [`conntrack`] dumps and deletes flows over ctnetlink; [`nudge`] makes
//! the client of a deleted TCP flow find out its connection is over.
//!
//! [`process`] is the one way kpng runs a child process
//! (`iptables-restore`, `iptables-save`, and for kube-proxy's leftovers
//! `ip`, `ipset`, `ipvsadm`): with a timeout, its pipes served on
//! threads, and killed by the kernel if kpng dies first.
//!
//! Message framing and parsing come from the rust-netlink crates
//! (`netlink-packet-netfilter`, and `rtnetlink` for addresses); the expressions it does not type are
//! encoded here from `linux/netfilter/nf_tables.h`.
//!
//! # Example
//!
//! A verdict map and a rule that looks packets up in it, built without
//! touching the kernel (applying needs `CAP_NET_ADMIN`, in a network
//! namespace of your own: see `Socket::open`):
//!
//! ```
//! use kpng_netfilter::nft::{
//!     Chain, ChainType, Data, DataType, Element, Expr, TableFamily, ChainHook, MetaKey, Reg, Rule, Set,
//!     Table, Transaction, NfVerdict, key,
//! };
//!
//! let table = Table::new(TableFamily::Ip, "example");
//! let mut tx = Transaction::new();
//! tx.add_table(&table)
//!     .add_chain(&table, Chain::base("input", ChainType::Filter, ChainHook::Input, 0))
//!     .add_chain(&table, Chain::regular("tcp"))
//!     .add_set(&table, Set::verdict_map("by-proto", DataType::INET_PROTO))
//!     .add_elements(
//!         &table,
//!         "by-proto",
//!         vec![Element::map(key(&[&[6]]), Data::Verdict(NfVerdict::Jump("tcp".into())))],
//!     )
//!     .add_rule(
//!         &table,
//!         Rule::new(
//!             "input",
//!             vec![
//!                 Expr::Meta { key: MetaKey::L4Proto, dreg: Reg::r32(0) },
//!                 Expr::Lookup { sreg: Reg::r32(0), set: "by-proto".into(), dreg: Some(Reg::VERDICT), invert: false },
//!             ],
//!         ),
//!     );
//! assert!(!tx.is_empty());
//! // let mut socket = kpng_netfilter::nft::Socket::open(Some("/run/netns/mine".as_ref()))?;
//! // socket.commit(tx)?;
//! ```

pub mod addresses;
pub mod conntrack;
pub mod iptables;
pub mod leftovers;
pub mod nft;
pub mod nudge;
pub mod process;
pub mod routes;

/// Runs `open` on a thread of its own that has joined the network
/// namespace at `path`: a socket it opens stays in that namespace, and the
/// calling thread's namespace is left as it is.
pub(crate) fn on_thread_in_netns<T: Send>(
    path: &std::path::Path,
    open: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    let file = std::fs::File::open(path)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)?;
                open()
            })
            .join()
    })
    .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}

/// Errors of the kernel side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The socket could not be opened, or not in the namespace asked for.
    #[error("cannot open an nf_tables netlink socket{}: {source}", in_netns(.netns))]
    Open {
        /// The network namespace, when not the process's own.
        netns: Option<String>,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Sending or receiving failed: the batch may or may not have been
    /// applied. Open a new socket and read the table back.
    #[error("netlink {what}: {source}")]
    Io {
        /// What failed.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused a change of the batch: nothing of the batch was
    /// applied.
    #[error("the kernel refused to {what}{}: {source}", in_netns(.netns))]
    Refused {
        /// The change it refused (the first, when several were).
        what: String,
        /// The network namespace, when not the process's own.
        netns: Option<String>,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
    /// A child process could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A child process ran longer than its timeout and was killed.
    #[error("{command} did not finish within {seconds} s and was killed")]
    Timeout {
        /// The command line.
        command: String,
        /// The timeout.
        seconds: u64,
    },
    /// A child process failed.
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// Its exit code, when it exited (not killed by a signal).
        code: Option<i32>,
        /// What it printed to stderr.
        stderr: String,
    },
    /// The rtnetlink connection that follows interface addresses
    /// ([`addresses`]) could not be opened, or a request on it failed.
    #[error("rtnetlink: {what}{}: {source}", in_netns(.netns))]
    Rtnetlink {
        /// What failed.
        what: &'static str,
        /// The network namespace, when not the process's own.
        netns: Option<String>,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A reply could not be read.
    #[error("cannot decode {what}")]
    Decode {
        /// What.
        what: String,
    },
}

fn in_netns(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}
