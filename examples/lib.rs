//! Runnable examples of kpng-rs; see the `[[example]]` entries and
//! `README.md` here. This library only carries the code of the workspace
//! README and of docs/vendor/writing-a-backend.md as doctests, so it cannot go
//! stale.

/// The workspace README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct WorkspaceReadmeDoctests;

/// docs/vendor/writing-a-backend.md's program, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/vendor/writing-a-backend.md")]
struct WritingABackendDoctests;
