//! kube-proxy's leftovers, removed once kpng has synced for the first
//! time: a node swapped from kube-proxy to kpng keeps no stale kube-proxy
//! rule that still translates traffic (`--keep-kube-proxy-rules` keeps
//! them). The mechanics, and what counts as kube-proxy's, are
//! [`kpng_netfilter::leftovers`]'s.

use kpng_netfilter::leftovers::Leftovers;
use kpng_sink::{Hook, Round, SinkError};

/// What runs after the first successful sync: the removal, or in a dry run
/// the list of what would be removed (on stderr; nothing changes).
pub(crate) struct Cleanup {
    pub(crate) leftovers: Leftovers,
    pub(crate) dry_run: bool,
}

impl Cleanup {
    fn run(self) {
        let found = self.leftovers.find();
        for note in &found.skipped {
            tracing::debug!("kube-proxy's leftovers: {note}");
        }
        for (what, error) in &found.problems {
            if self.dry_run {
                tracing::debug!(%error, "kube-proxy's leftovers in {what} not read");
            } else {
                tracing::warn!(%error, "kube-proxy's leftovers in {what} not read");
            }
        }
        for (chain, rule) in &found.kept {
            tracing::warn!(kept = %chain, used_by = %rule, "kube-proxy's chain kept: another chain jumps to it");
        }
        if found.leftovers.is_empty() {
            tracing::debug!("no kube-proxy leftovers");
            return;
        }
        if self.dry_run {
            for leftover in &found.leftovers {
                tracing::info!(would_remove = %leftover, "dry run: kube-proxy's leftover not removed");
            }
            return;
        }
        let removed = self.leftovers.remove(&found.leftovers);
        for leftover in &removed.removed {
            tracing::info!(removed = %leftover, "removed kube-proxy's leftover");
        }
        for (leftover, error) in &removed.failed {
            tracing::warn!(leftover = %leftover, %error, "kube-proxy's leftover not removed");
        }
        tracing::info!(
            removed = removed.removed.len(),
            failed = removed.failed.len(),
            "kube-proxy's leftovers removed"
        );
    }
}

/// A hook that runs the [`Cleanup`] once, after the first round its sink
/// applied.
pub(crate) struct AfterFirstSync(Option<Cleanup>);

impl AfterFirstSync {
    pub(crate) fn new(cleanup: Cleanup) -> Self {
        Self(Some(cleanup))
    }
}

impl<S: ?Sized> Hook<S> for AfterFirstSync {
    fn after(&mut self, _: &S, _: &Round<'_>, result: &Result<(), SinkError>) {
        if result.is_ok()
            && let Some(cleanup) = self.0.take()
        {
            cleanup.run();
        }
    }
}
