//! How kpng-rs retries, for every crate that does: the ingest's API
//! source (`kpng-kube`), the driver (`kpng-drive`), the API agent and
//! mirror (`kpng-api`).
//!
//! - [`Backoff`]: exponential, capped and jittered delays between
//!   retries; [`Backoff::kube`] is kube-runtime's watcher default.
//! - [`one_line`]: an error and its causes on one line, what a retry's
//!   log line names as the cause.
//!
//! It needs the standard library only, so it sits below every crate that
//! retries (`cargo tree -p kpng-retry -e normal` prints it alone).
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use kpng_retry::Backoff;
//!
//! let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
//! let first = backoff.next_delay();
//! assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
//! for _ in 0..10 {
//!     assert!(backoff.next_delay() <= Duration::from_secs(1));
//! }
//! backoff.reset();
//! assert!(backoff.next_delay() <= Duration::from_millis(100));
//! ```

#![deny(missing_docs)]

mod backoff;

pub use backoff::{Backoff, KUBE_FIRST, KUBE_MAX};

/// An error and its causes on one line, `: `-separated, each cause once
/// (error types that print their source as well are not repeated): what a
/// retry's log line names as the cause.
///
/// ```
/// let io = std::io::Error::other("connection refused");
/// assert_eq!(kpng_retry::one_line(&io), "connection refused");
/// ```
pub fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug)]
    struct Outer(std::io::Error, bool);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            if self.1 {
                write!(f, "watch failed: {}", self.0)
            } else {
                f.write_str("watch failed")
            }
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn causes_are_joined_once() {
        let io = || std::io::Error::other("connection refused");
        assert_eq!(
            one_line(&Outer(io(), false)),
            "watch failed: connection refused"
        );
        // A type that prints its source already: not repeated.
        assert_eq!(
            one_line(&Outer(io(), true)),
            "watch failed: connection refused"
        );
    }
}

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
