//! What a sync did ([`SyncStats`]; a backend's last one:
//! [`RoundReport`]), and [`Log`], which tells it after each round.

use crate::{Hook, Round, SinkError};

/// What one sync did: the round's revision, whether it was full (the one
/// meaning of "full": [`Round::is_full`]), how many Services it set or
/// removed, and what the backend wrote.
///
/// A driver returns it for each round it hands over
/// (`kpng_view::NodeProjector::sync_into`); a backend tells it for its
/// last sync ([`RoundReport::last_sync`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncStats {
    /// The revision of the round's view.
    pub revision: u64,
    /// Whether the round was full ([`Round::is_full`]).
    pub full: bool,
    /// Services the round set or removed (every Service of the view in
    /// a full round).
    pub services: usize,
    /// Whether the backend replaced everything it had programmed: in a
    /// full round, or for a change it could not make in place. False
    /// when told by a driver, which does not see what the backend wrote.
    pub replaced: bool,
    /// How many commands (rules, elements, objects) the backend wrote; 0
    /// when told by a driver.
    pub commands: usize,
}

impl SyncStats {
    /// The stats of `round` as handed over: its revision, whether it is
    /// full and how many Services it lists; nothing written yet.
    pub fn of(round: &Round<'_>) -> Self {
        Self {
            revision: round.revision(),
            full: round.is_full(),
            services: round.service_count(),
            replaced: false,
            commands: 0,
        }
    }

    /// With what the backend wrote: whether it replaced everything, and
    /// how many commands.
    #[must_use]
    pub fn wrote(mut self, replaced: bool, commands: usize) -> Self {
        self.replaced = replaced;
        self.commands = commands;
        self
    }
}

/// A backend that tells what its last sync did, for logs and dry runs.
pub trait RoundReport {
    /// What the last sync did.
    fn last_sync(&self) -> SyncStats;

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
/// revision, whether it was full, whether the backend replaced everything,
/// how many commands), and with
/// [`printing_scripts`](Self::printing_scripts) prints the round's script
/// to standard output: how a dry run shows what it would program. Put it
/// around a sink with [`SinkExt::logged`](crate::SinkExt::logged) or
/// [`SinkExt::with`](crate::SinkExt::with).
///
/// ```
/// use kpng_model::view::NodeView;
/// use kpng_sink::{Log, Round, RoundReport, Sink, SinkError, SinkExt, SyncStats};
///
/// #[derive(Default)]
/// struct Counter(usize, SyncStats);
/// impl Sink for Counter {
///     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
///         self.0 += 1;
///         self.1 = SyncStats::of(round).wrote(round.is_full(), self.0);
///         Ok(())
///     }
/// }
/// impl RoundReport for Counter {
///     fn last_sync(&self) -> SyncStats {
///         self.1
///     }
/// }
///
/// let view = NodeView::default();
/// let mut sink = Counter::default().with(Log::default().printing_scripts());
/// sink.sync(&Round::full(&view))?;
/// let round = Round::full(&view);
/// assert_eq!(sink.get_ref().last_sync(), SyncStats::of(&round).wrote(true, 1));
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
        let SyncStats {
            replaced, commands, ..
        } = sink.last_sync();
        if self.print {
            // A closed pipe (`| head`) is not worth failing the round.
            let _ = sink.write_script(&mut std::io::stdout().lock());
        }
        tracing::info!(
            revision = round.revision(),
            full = round.is_full(),
            replaced,
            commands,
            "synced"
        );
    }
}
