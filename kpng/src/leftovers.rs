//! kube-proxy's leftovers, removed once kpng has synced for the first
//! time: a node swapped from kube-proxy to kpng keeps no stale kube-proxy
//! rule that still translates traffic (`--keep-kube-proxy-rules` keeps
//! them). The mechanics, and what counts as kube-proxy's, are
//! [`kpng_netfilter::leftovers`]'s.

use kpng_model::view::ViewOp;
use kpng_netfilter::leftovers::Leftovers;
use kpng_sink::{IncrementalSink, SinkError};

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

/// `inner`, with `cleanup` run once after its first successful sync.
pub(crate) struct AfterFirstSync<S> {
    inner: S,
    cleanup: Option<Cleanup>,
}

impl<S> AfterFirstSync<S> {
    pub(crate) fn new(inner: S, cleanup: Cleanup) -> Self {
        Self {
            inner,
            cleanup: Some(cleanup),
        }
    }
}

impl<S: IncrementalSink> IncrementalSink for AfterFirstSync<S> {
    fn reset(&mut self) {
        self.inner.reset();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.inner.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.inner.sync(revision)?;
        if let Some(cleanup) = self.cleanup.take() {
            cleanup.run();
        }
        Ok(())
    }
    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.inner.view()
    }
    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        self.inner.share_view(view);
    }
}
