//! What a backend's last round did ([`RoundReport`]), and [`Log`], which
//! tells it after each round.

use crate::{Hook, Round, SinkError};

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

/// A [`Hook`] that logs each round its sink applied (at info level:
/// revision, whether it was full, how many commands), and with
/// [`printing_scripts`](Self::printing_scripts) prints the round's script
/// to standard output: how a dry run shows what it would program. Put it
/// around a sink with [`SinkExt::logged`](crate::SinkExt::logged) or
/// [`SinkExt::with`](crate::SinkExt::with).
///
/// ```
/// use kpng_model::view::NodeView;
/// use kpng_sink::{Log, Round, RoundReport, RoundSummary, Sink, SinkError, SinkExt};
///
/// #[derive(Default)]
/// struct Counter(usize);
/// impl Sink for Counter {
///     fn sync(&mut self, _: &Round<'_>) -> Result<(), SinkError> {
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
/// let mut sink = Counter::default().with(Log::default().printing_scripts());
/// sink.sync(&Round::full(&NodeView::default()))?;
/// assert_eq!(sink.get_ref().last_round(), RoundSummary::new(true, 1));
/// # Ok::<(), SinkError>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Log {
    print: bool,
}

impl Log {
    /// Prints each round's script to standard output too.
    #[must_use]
    pub fn printing_scripts(mut self) -> Self {
        self.print = true;
        self
    }
}

impl<S: RoundReport + ?Sized> Hook<S> for Log {
    fn after(&mut self, sink: &S, round: &Round<'_>, result: &Result<(), SinkError>) {
        if result.is_err() {
            return;
        }
        let RoundSummary { full, commands } = sink.last_round();
        if self.print {
            // A closed pipe (`| head`) is not worth failing the round.
            let _ = sink.write_script(&mut std::io::stdout().lock());
        }
        tracing::info!(revision = round.revision(), full, commands, "synced");
    }
}
