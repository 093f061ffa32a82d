//! nf_tables over netlink.
//!
//! Build a [`Transaction`] of changes to tables, chains, sets, elements
//! and rules (rules are lists of [`Expr`]s), and apply it through a
//! [`Socket`]: the kernel commits all of it or none of it, and an error
//! names the change it refused. [`Socket::read`] reads a table back.

pub mod build;
mod elements;
pub(crate) mod expr;
mod load;
mod object;
pub(crate) mod raw;
mod script;
mod socket;
mod text;
mod tx;
mod types;
mod verify;

pub use elements::{DataRef, ElementList};
pub use expr::{
    CmpOp, CtDirection, CtKey, Data, DynsetOp, Expr, FibResult, MetaKey, NatKind, NfVerdict,
    PayloadBase, RawExpr, Reg, RejectKind,
};
pub use object::{
    BaseChain, COMMENT_MAX, Chain, ChainHook, ChainType, DataType, Element, ElementCounter, MapTo,
    Rule, Set, Table, TableFamily, fit_comment, key,
};
pub use socket::{ChainState, RuleState, SetState, Socket, TableState};
pub use tx::Transaction;
