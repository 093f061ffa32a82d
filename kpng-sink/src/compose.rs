//! Composing sinks: [`Hook`]s around a sink, sinks one after another.

use crate::{Log, Round, RoundReport, Sink, SinkError, SyncStats};

/// What runs around each round of a sink `S`, seeing the round and the
/// outcome but not changing them: logs, metrics, health. Both methods do
/// nothing by default, so a hook writes only the one it needs. Put one
/// around a sink with [`SinkExt::with`].
///
/// ```
/// use kpng_sink::{Hook, Round, SinkError};
///
/// /// Counts the rounds that failed.
/// #[derive(Default)]
/// struct Failures(u64);
///
/// impl<S: ?Sized> Hook<S> for Failures {
///     fn after(&mut self, _: &S, _: &Round<'_>, result: &Result<(), SinkError>) {
///         self.0 += u64::from(result.is_err());
///     }
/// }
/// ```
pub trait Hook<S: ?Sized> {
    /// Called before the sink receives `round`.
    fn before(&mut self, _round: &Round<'_>) {}

    /// Called after the sink applied `round`, with its outcome; `sink`
    /// is the sink as the round left it.
    fn after(&mut self, _sink: &S, _round: &Round<'_>, _result: &Result<(), SinkError>) {}
}

/// A sink with a [`Hook`] around it: see [`SinkExt::with`].
#[derive(Debug)]
pub struct With<S, H> {
    sink: S,
    hook: H,
}

impl<S, H> With<S, H> {
    /// The sink.
    pub fn get_ref(&self) -> &S {
        &self.sink
    }

    /// The sink, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

impl<S: Sink, H: Hook<S>> Sink for With<S, H> {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.hook.before(round);
        let result = self.sink.sync(round);
        self.hook.after(&self.sink, round, &result);
        result
    }
}

/// What a hooked sink did is what its sink did.
impl<S: RoundReport, H> RoundReport for With<S, H> {
    fn last_sync(&self) -> SyncStats {
        self.sink.last_sync()
    }
    fn write_script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.sink.write_script(out)
    }
}

/// Two sinks on one round: see [`SinkExt::followed_by`].
#[derive(Debug)]
pub struct FollowedBy<A, B> {
    first: A,
    next: B,
}

impl<A, B> FollowedBy<A, B> {
    /// The first sink.
    pub fn first(&self) -> &A {
        &self.first
    }

    /// The sink that follows it.
    pub fn next(&self) -> &B {
        &self.next
    }
}

impl<A: Sink, B: Sink> Sink for FollowedBy<A, B> {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.first.sync(round)?;
        self.next.sync(round)
    }
}

/// What the pair did is what the first sink did.
impl<A: RoundReport, B> RoundReport for FollowedBy<A, B> {
    fn last_sync(&self) -> SyncStats {
        self.first.last_sync()
    }
    fn write_script(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.first.write_script(out)
    }
}

/// Builds composed sinks, one method per wrapper.
///
/// ```
/// use kpng_model::view::NodeView;
/// use kpng_sink::{Round, RoundReport, Sink, SinkError, SinkExt, SyncStats};
///
/// #[derive(Default)]
/// struct Backend(usize, SyncStats);
/// impl Sink for Backend {
///     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
///         self.0 += 1;
///         self.1 = SyncStats::of(round).wrote(round.is_full(), self.0);
///         Ok(())
///     }
/// }
/// impl RoundReport for Backend {
///     fn last_sync(&self) -> SyncStats {
///         self.1
///     }
/// }
///
/// /// Reads the whole view, as a health-check server would.
/// struct Health;
/// impl Sink for Health {
///     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
///         let _services = round.view().services.len();
///         Ok(())
///     }
/// }
///
/// let view = NodeView::default();
/// let mut proxy = Backend::default().logged().followed_by(Health);
/// proxy.sync(&Round::full(&view))?;
/// assert_eq!(proxy.last_sync(), SyncStats::of(&Round::full(&view)).wrote(true, 1));
/// # Ok::<(), SinkError>(())
/// ```
pub trait SinkExt: Sink + Sized {
    /// Runs `hook` around each round of this sink.
    fn with<H: Hook<Self>>(self, hook: H) -> With<Self, H> {
        With { sink: self, hook }
    }

    /// Runs `next` on each round after this sink applied it: `next` is
    /// skipped when this sink fails (its error is returned), and its own
    /// error fails the round (the next is then full for both).
    fn followed_by<B: Sink>(self, next: B) -> FollowedBy<Self, B> {
        FollowedBy { first: self, next }
    }

    /// Logs each round this sink applied: see [`Log`].
    fn logged(self) -> With<Self, Log>
    where
        Self: RoundReport,
    {
        self.with(Log::default())
    }

    /// Boxes the sink, for a choice made at run time.
    fn boxed<'a>(self) -> Box<dyn Sink + Send + 'a>
    where
        Self: Send + 'a,
    {
        Box::new(self)
    }
}

impl<S: Sink> SinkExt for S {}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::view::NodeView;

    #[derive(Default)]
    struct Calls(Vec<String>, bool);

    impl Sink for Calls {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.0.push(format!("sync {}", round.revision()));
            if self.1 {
                return Err(SinkError::backend("calls", "boom"));
            }
            Ok(())
        }
    }

    /// Records what it sees, in a list shared with the test.
    struct Seen(std::rc::Rc<std::cell::RefCell<Vec<String>>>, &'static str);

    impl Hook<Calls> for Seen {
        fn before(&mut self, round: &Round<'_>) {
            self.0
                .borrow_mut()
                .push(format!("{} before {}", self.1, round.revision()));
        }
        fn after(&mut self, sink: &Calls, _: &Round<'_>, result: &Result<(), SinkError>) {
            self.0.borrow_mut().push(format!(
                "{} after {} calls, ok={}",
                self.1,
                sink.0.len(),
                result.is_ok()
            ));
        }
    }

    impl Hook<With<Calls, Seen>> for Seen {
        fn before(&mut self, round: &Round<'_>) {
            self.0
                .borrow_mut()
                .push(format!("{} before {}", self.1, round.revision()));
        }
        fn after(&mut self, _: &With<Calls, Seen>, _: &Round<'_>, result: &Result<(), SinkError>) {
            self.0
                .borrow_mut()
                .push(format!("{} after, ok={}", self.1, result.is_ok()));
        }
    }

    #[test]
    fn hooks_run_around_the_sink_the_outer_one_outside() {
        let seen = std::rc::Rc::default();
        let mut sink = Calls::default()
            .with(Seen(std::rc::Rc::clone(&seen), "inner"))
            .with(Seen(std::rc::Rc::clone(&seen), "outer"));
        let view = NodeView {
            revision: 7,
            ..Default::default()
        };
        sink.sync(&Round::full(&view)).expect("ok");
        assert_eq!(
            *seen.borrow(),
            [
                "outer before 7",
                "inner before 7",
                "inner after 1 calls, ok=true",
                "outer after, ok=true"
            ]
        );
        sink.get_mut().get_mut().1 = true;
        assert!(sink.sync(&Round::full(&view)).is_err());
        assert_eq!(
            seen.borrow().last().map(String::as_str),
            Some("outer after, ok=false")
        );
    }

    #[test]
    fn a_follower_runs_only_after_the_first_sink_succeeded() {
        let mut pair = Calls(Vec::new(), true).followed_by(Calls::default());
        let view = NodeView::default();
        assert_eq!(
            pair.sync(&Round::full(&view)).map_err(|e| e.to_string()),
            Err("calls: boom".to_owned())
        );
        assert!(pair.next().0.is_empty());
        pair.first.1 = false;
        pair.sync(&Round::full(&view)).expect("ok");
        assert_eq!(pair.next().0, ["sync 0"]);
        let mut failing_next = Calls::default().followed_by(Calls(Vec::new(), true));
        assert!(failing_next.sync(&Round::full(&view)).is_err());
        assert_eq!(failing_next.first().0, ["sync 0"]);
    }
}
