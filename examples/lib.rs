//! Runnable examples of kpng-rs; see the `[[example]]` entries and
//! `README.md` here. This library only carries the code of the workspace
//! README, docs/vendor/writing-a-backend.md and compose-a-proxy.md as
//! doctests, so they cannot go stale.

/// The workspace README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct WorkspaceReadmeDoctests;

/// docs/vendor/writing-a-backend.md's program, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/vendor/writing-a-backend.md")]
struct WritingABackendDoctests;

/// docs/vendor/compose-a-proxy.md's code, compiled (and run where it can
/// run) as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/vendor/compose-a-proxy.md")]
struct ComposeAProxyDoctests;
