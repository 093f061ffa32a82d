//! What a backend's last round did ([`RoundReport`]), and [`Logged`],
//! which tells it after each round.

use kpng_model::view::{NodeView, ViewOp};

use crate::{IncrementalSink, SinkError};

/// What a round wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoundSummary {
    /// The round replaced everything: the first one, or one after a
    /// failure.
    pub full: bool,
    /// How many commands (rules, elements, objects) it wrote.
    pub commands: usize,
}

impl RoundSummary {
    /// A summary.
    pub fn new(full: bool, commands: usize) -> Self {
        Self { full, commands }
    }
}

/// A backend that tells what its last round did, for logs and dry runs.
pub trait RoundReport {
    /// The last round's summary.
    fn last_round(&self) -> RoundSummary;

    /// Writes the last round's script, what a dry run prints. Default:
    /// nothing (a backend that keeps none).
    ///
    /// # Errors
    /// The writer's.
    fn write_script(&self, _out: &mut dyn std::io::Write) -> std::io::Result<()> {
        Ok(())
    }
}

/// Logs each round that `S` applied (at info level: revision, whether it
/// was full, how many commands), and with
/// [`printing_scripts`](Self::printing_scripts) prints its script to
/// standard output: how a dry run shows what it would program.
///
/// ```
/// use kpng_sink::{IncrementalSink, Logged, RoundReport, RoundSummary, SinkError};
///
/// #[derive(Default)]
/// struct Counter(usize);
/// impl IncrementalSink for Counter {
///     fn apply(&mut self, _: &kpng_model::view::ViewOp) -> Result<(), SinkError> {
///         Ok(())
///     }
///     fn sync(&mut self, _: u64) -> Result<(), SinkError> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
/// impl RoundReport for Counter {
///     fn last_round(&self) -> RoundSummary {
///         RoundSummary::new(self.0 == 1, self.0)
///     }
/// }
///
/// let mut sink = Logged::new(Counter::default());
/// sink.sync(1)?;
/// assert_eq!(sink.get_ref().last_round(), RoundSummary::new(true, 1));
/// # Ok::<(), SinkError>(())
/// ```
#[derive(Debug)]
pub struct Logged<S> {
    inner: S,
    print: bool,
}

impl<S> Logged<S> {
    /// Logs `inner`'s rounds.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            print: false,
        }
    }

    /// Prints each round's script to standard output too.
    #[must_use]
    pub fn printing_scripts(mut self) -> Self {
        self.print = true;
        self
    }

    /// The wrapped sink.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: IncrementalSink + RoundReport> IncrementalSink for Logged<S> {
    fn reset(&mut self) {
        self.inner.reset();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.inner.apply(op)
    }
    fn view(&self) -> Option<&NodeView> {
        self.inner.view()
    }
    fn share_view(&mut self, view: &NodeView) {
        self.inner.share_view(view);
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.inner.sync(revision)?;
        let RoundSummary { full, commands } = self.inner.last_round();
        if self.print {
            // A closed pipe (`| head`) is not worth failing the round.
            let _ = self.inner.write_script(&mut std::io::stdout().lock());
        }
        tracing::info!(revision, full, commands, "synced");
        Ok(())
    }
}
