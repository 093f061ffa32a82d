//! Runnable examples of kpng-rs; see the `[[example]]` entries and
//! `README.md` here. This library only carries the workspace README's code
//! as a doctest, so it cannot go stale.

/// The workspace README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct WorkspaceReadmeDoctests;
