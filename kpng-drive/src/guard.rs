//! The guard against losing everything: an input that would delete every
//! programmed Service, or more than a share of them at once, is held back
//! until it is confirmed.
//!
//! [`Guard`] is the decision alone (counts in, a [`Verdict`] out, the
//! clock passed in), so it can be tested and moved on its own.
//! [`Guarded`] puts it in front of a [`Sink`]: it keeps the view the
//! inner sink last programmed, and forwards a round only when the guard
//! lets it through. [`HoldStatus`] shares the current hold with whoever
//! reports it (`/healthz`, metrics) and with [`drive`](crate::drive),
//! which re-checks a hold when it may be confirmed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kpng_model::view::NodeView;
use kpng_sink::{Changes, Round, Sink, SinkError};

/// Settings of a [`Guard`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GuardConfig {
    /// A round may delete at most this share of the programmed Services
    /// (0.0–1.0; `--mass-delete-max-share`, default 0.5) ...
    pub max_delete_share: f64,
    /// ... when at least this many are programmed
    /// (`--mass-delete-min-services`, default 10). Deleting every one of
    /// them is held whatever their number.
    pub min_services: usize,
    /// A held input is applied once it has been one for this long
    /// (`--mass-delete-confirm-after`, default 60 s).
    pub confirm_after: Duration,
    /// Apply mass deletions at once (`--allow-mass-delete`).
    pub allow_mass_delete: bool,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            max_delete_share: 0.5,
            min_services: 10,
            confirm_after: Duration::from_secs(60),
            allow_mass_delete: false,
        }
    }
}

impl GuardConfig {
    /// Holds rounds deleting more than `share` of the Services.
    #[must_use]
    pub fn max_delete_share(mut self, share: f64) -> Self {
        self.max_delete_share = share;
        self
    }

    /// Applies the share rule from `count` programmed Services on.
    #[must_use]
    pub fn min_services(mut self, count: usize) -> Self {
        self.min_services = count;
        self
    }

    /// Applies a held input once it has lasted `after`.
    #[must_use]
    pub fn confirm_after(mut self, after: Duration) -> Self {
        self.confirm_after = after;
        self
    }

    /// Lets every mass deletion through at once when `allow` holds.
    #[must_use]
    pub fn allow_mass_delete(mut self, allow: bool) -> Self {
        self.allow_mass_delete = allow;
        self
    }
}

/// The Services of a round: programmed before it, in it, and programmed
/// ones it would delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Services programmed now.
    pub before: usize,
    /// Services the round would leave programmed.
    pub after: usize,
    /// Programmed Services the round would delete.
    pub deleted: usize,
}

/// Why a round is a mass deletion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// It deletes every programmed Service.
    All,
    /// It deletes more than this share of them.
    Share(f64),
}

/// A mass deletion held back: its counts, why, and since when.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// The counts of the latest held round.
    pub counts: Counts,
    /// Why it is held.
    pub reason: Reason,
    /// When the input first became a mass deletion.
    pub since: Instant,
    /// When it is confirmed if it lasts.
    pub confirm_at: Instant,
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Counts {
            before,
            after,
            deleted,
        } = self.counts;
        match self.reason {
            Reason::All => write!(
                f,
                "the input would delete every Service ({before} -> {after})"
            )?,
            Reason::Share(share) => write!(
                f,
                "the input would delete {deleted} of {before} Services ({before} -> {after}), \
                 more than {:.0} %",
                share * 100.0
            )?,
        }
        let wait = self.confirm_at.saturating_duration_since(self.since);
        write!(
            f,
            "; held back (the previous state kept) until the input has lasted {}s, \
             or --allow-mass-delete",
            wait.as_secs()
        )
    }
}

/// What to do with a round.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Apply it: not a mass deletion.
    Apply,
    /// Hold it back: the previous state stays.
    Hold(Hold),
    /// Apply it: a mass deletion that lasted the confirmation time.
    Confirmed(Hold),
    /// Apply it: a mass deletion let through by `allow_mass_delete`.
    Overridden(Hold),
}

/// The decision on mass deletions, alone: see the module docs.
#[derive(Clone, Debug)]
pub struct Guard {
    config: GuardConfig,
    since: Option<Instant>,
}

impl Guard {
    /// A guard with these settings.
    pub fn new(config: GuardConfig) -> Self {
        Self {
            config,
            since: None,
        }
    }

    /// Why a round with `counts` is a mass deletion, if it is one.
    pub fn mass(&self, counts: Counts) -> Option<Reason> {
        let Counts {
            before,
            after,
            deleted,
        } = counts;
        if before > 0 && after == 0 {
            return Some(Reason::All);
        }
        let share = self.config.max_delete_share;
        // Integer-exact for the default (0.5): 6 of 10 is more, 5 is not.
        let over = (deleted as f64) > share * (before as f64);
        (before >= self.config.min_services && deleted > 0 && over).then_some(Reason::Share(share))
    }

    /// Judges a round at `now`. A mass deletion is held until the input
    /// has been one (any mass deletion: unchanged, or still that small)
    /// for the confirmation time; a round that is not one ends the hold.
    pub fn judge(&mut self, counts: Counts, now: Instant) -> Verdict {
        let Some(reason) = self.mass(counts) else {
            self.since = None;
            return Verdict::Apply;
        };
        let since = *self.since.get_or_insert(now);
        let hold = Hold {
            counts,
            reason,
            since,
            confirm_at: since + self.config.confirm_after,
        };
        if self.config.allow_mass_delete {
            self.since = None;
            Verdict::Overridden(hold)
        } else if now >= hold.confirm_at {
            self.since = None;
            Verdict::Confirmed(hold)
        } else {
            Verdict::Hold(hold)
        }
    }
}

/// The current hold of a [`Guarded`] sink, shared: `None` while rounds go
/// through. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct HoldStatus(Arc<Mutex<Option<Hold>>>);

impl HoldStatus {
    /// The hold in force, if any.
    pub fn held(&self) -> Option<Hold> {
        self.0.lock().ok().and_then(|h| h.clone())
    }

    /// How long until a hold in force may be confirmed: the driver
    /// re-checks the input then, with no new revision needed.
    pub fn recheck_in(&self) -> Option<Duration> {
        self.held()
            .map(|h| h.confirm_at.saturating_duration_since(Instant::now()))
    }

    fn set(&self, hold: Option<Hold>) {
        if let Ok(mut current) = self.0.lock() {
            *current = hold;
        }
    }
}

/// What is told of each change of hold (`Some` while one is in force).
type Observer = Box<dyn FnMut(Option<&Hold>) + Send>;

/// A [`Guard`] in front of a sink: rounds that would delete every
/// programmed Service, or too many of them, are not forwarded, so the
/// inner sink keeps its state; the hold is logged at WARN with the
/// counts and the reason, shared in a [`HoldStatus`] and told to an
/// observer.
///
/// A held round is a success for the driver, whose next round then
/// starts from a view the inner sink never programmed. So the guard keeps
/// the view the inner sink last synced (an O(1) clone that shares its
/// Services with the driver's), and when it lets a round through it
/// forwards the round itself when it is full or starts where the inner
/// sink is (nothing was held since), or else the round from what the
/// inner sink programmed to the round's view ([`Round::between`]), or a
/// full round when the inner sink failed its last one.
///
/// The first round of its life is from nothing: not a deletion.
pub struct Guarded<S> {
    inner: S,
    guard: Guard,
    /// The view the inner sink last synced; `None` before its first sync.
    programmed: Option<NodeView>,
    /// The inner sink failed its last round: its next one is full.
    inner_full: bool,
    status: HoldStatus,
    observer: Option<Observer>,
}

impl<S> std::fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("guard", &self.guard)
            .field("held", &self.status.held())
            .finish_non_exhaustive()
    }
}

/// What a round let through becomes for the inner sink.
enum Forward {
    /// The round itself: a full round, or one that starts where the
    /// inner sink is.
    Same,
    /// A full round of the round's view.
    Full,
    /// The round from what the inner sink programmed, with these changes.
    From(Changes),
}

/// Whether `a` and `b` are the same view, not merely equal ones: one is a
/// clone of the other (O(1)).
fn same_view(a: &NodeView, b: &NodeView) -> bool {
    a.revision == b.revision
        && a.services.ptr_eq(&b.services)
        && Arc::ptr_eq(&a.service_cidrs, &b.service_cidrs)
        && a.node == b.node
}

impl<S: Sink> Guarded<S> {
    /// Guards `inner` with `config`.
    pub fn new(inner: S, config: GuardConfig) -> Self {
        Self {
            inner,
            guard: Guard::new(config),
            programmed: None,
            inner_full: true,
            status: HoldStatus::default(),
            observer: None,
        }
    }

    /// Calls `observer` whenever a hold starts, changes or ends.
    #[must_use]
    pub fn observed(mut self, observer: impl FnMut(Option<&Hold>) + Send + 'static) -> Self {
        self.observer = Some(Box::new(observer));
        self
    }

    /// The shared hold status (for [`DriveConfig::hold`](crate::DriveConfig)).
    pub fn status(&self) -> HoldStatus {
        self.status.clone()
    }

    /// The guarded sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn publish(&mut self, hold: Option<Hold>) {
        let changed = self.status.held() != hold;
        self.status.set(hold.clone());
        if changed && let Some(observer) = &mut self.observer {
            observer(hold.as_ref());
        }
    }

    /// The counts of `round` against what is programmed, and what the
    /// inner sink is to receive if it goes through.
    fn counts(&self, programmed: &NodeView, round: &Round<'_>) -> (Counts, Forward) {
        let view = round.view();
        let follows = round
            .previous()
            .is_some_and(|previous| same_view(previous, programmed));
        let (deleted, forward) = if follows && !self.inner_full {
            // The driver's previous view is the inner sink's: the round
            // lists what it deletes.
            (round.removed().count(), Forward::Same)
        } else {
            // O(changed Services) when the views share the others.
            let changes = Changes::between(programmed, view);
            let gone = changes
                .services
                .iter()
                .filter(|name| !view.services.contains_key(*name))
                .count();
            let forward = if round.is_full() {
                Forward::Same
            } else if self.inner_full {
                Forward::Full
            } else {
                Forward::From(changes)
            };
            (gone, forward)
        };
        let counts = Counts {
            before: programmed.services.len(),
            after: view.services.len(),
            deleted,
        };
        (counts, forward)
    }

    /// Hands the inner sink its round.
    fn forward(&mut self, round: &Round<'_>, forward: Forward) -> Result<(), SinkError> {
        let view = round.view();
        let result = match (forward, self.programmed.as_ref()) {
            (Forward::From(changes), Some(programmed)) => self
                .inner
                .sync(&Round::incremental(programmed, view, changes)),
            (Forward::Same, _) => self.inner.sync(round),
            (Forward::Full | Forward::From(_), _) => self.inner.sync(&Round::full(view)),
        };
        match &result {
            Ok(()) => {
                self.programmed = Some(view.clone());
                self.inner_full = false;
            }
            Err(_) => self.inner_full = true,
        }
        result
    }
}

impl<S: Sink> Sink for Guarded<S> {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let Some(programmed) = self.programmed.as_ref() else {
            // From nothing: nothing to lose.
            let forward = if round.is_full() {
                Forward::Same
            } else {
                Forward::Full
            };
            return self.forward(round, forward);
        };
        let (counts, forward) = self.counts(programmed, round);
        match self.guard.judge(counts, Instant::now()) {
            Verdict::Apply => {
                if let Some(hold) = self.status.held() {
                    tracing::warn!(
                        before = counts.before,
                        after = counts.after,
                        deleted = counts.deleted,
                        held_for = ?hold.since.elapsed(),
                        "the input no longer deletes too many Services; applying it"
                    );
                }
            }
            Verdict::Hold(hold) => {
                tracing::warn!(
                    before = counts.before,
                    after = counts.after,
                    deleted = counts.deleted,
                    reason = %hold,
                    "mass deletion held back"
                );
                self.publish(Some(hold));
                return Ok(());
            }
            Verdict::Confirmed(hold) => tracing::warn!(
                before = counts.before,
                after = counts.after,
                deleted = counts.deleted,
                held_for = ?hold.since.elapsed(),
                "mass deletion confirmed: the input lasted --mass-delete-confirm-after; applying it"
            ),
            Verdict::Overridden(_) => tracing::warn!(
                before = counts.before,
                after = counts.after,
                deleted = counts.deleted,
                "mass deletion applied at once (--allow-mass-delete)"
            ),
        }
        self.publish(None);
        self.forward(round, forward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::v1::Service;
    use kpng_model::view::{ServiceView, ViewOp};

    fn counts(before: usize, after: usize, deleted: usize) -> Counts {
        Counts {
            before,
            after,
            deleted,
        }
    }

    #[test]
    fn deleting_all_is_held_whatever_the_size_and_the_share_above_the_minimum() {
        let guard = Guard::new(GuardConfig::default());
        assert_eq!(guard.mass(counts(2, 0, 2)), Some(Reason::All));
        assert_eq!(guard.mass(counts(1, 0, 1)), Some(Reason::All));
        // Below the minimum (10), a share is not held.
        assert_eq!(guard.mass(counts(9, 1, 8)), None);
        // From 10 on: more than half is held, half is not.
        assert_eq!(guard.mass(counts(10, 4, 6)), Some(Reason::Share(0.5)));
        assert_eq!(guard.mass(counts(10, 5, 5)), None);
        // Deletions count, not the difference: 6 of 10 renamed.
        assert_eq!(guard.mass(counts(10, 10, 6)), Some(Reason::Share(0.5)));
        // Growth and nothing at all are not deletions.
        assert_eq!(guard.mass(counts(0, 0, 0)), None);
        assert_eq!(guard.mass(counts(10, 100, 0)), None);
        let strict = Guard::new(GuardConfig::default().max_delete_share(0.1).min_services(3));
        assert_eq!(strict.mass(counts(3, 2, 1)), Some(Reason::Share(0.1)));
    }

    #[test]
    fn a_hold_is_confirmed_after_the_time_or_ended_by_a_better_input() {
        let config = GuardConfig::default().confirm_after(Duration::from_secs(60));
        let mut guard = Guard::new(config.clone());
        let t0 = Instant::now();
        let Verdict::Hold(hold) = guard.judge(counts(20, 0, 20), t0) else {
            panic!("held")
        };
        assert_eq!(hold.confirm_at, t0 + Duration::from_secs(60));
        assert_eq!(
            hold.to_string(),
            "the input would delete every Service (20 -> 0); held back (the previous state \
             kept) until the input has lasted 60s, or --allow-mass-delete"
        );
        // Still that small (another mass deletion): the clock runs on.
        let later = t0 + Duration::from_secs(30);
        assert!(matches!(
            guard.judge(counts(20, 3, 17), later),
            Verdict::Hold(h) if h.since == t0
        ));
        let done = t0 + Duration::from_secs(60);
        assert!(matches!(
            guard.judge(counts(20, 0, 20), done),
            Verdict::Confirmed(_)
        ));
        // A new hold starts its own clock; a good input ends it.
        assert!(matches!(
            guard.judge(counts(20, 0, 20), done),
            Verdict::Hold(h) if h.since == done
        ));
        assert_eq!(guard.judge(counts(20, 19, 1), done), Verdict::Apply);
        assert!(matches!(
            guard.judge(counts(20, 0, 20), done + Duration::from_secs(59)),
            Verdict::Hold(_)
        ));
        // The override lets it through at once.
        let mut open = Guard::new(config.allow_mass_delete(true));
        assert!(matches!(
            open.judge(counts(20, 0, 20), t0),
            Verdict::Overridden(_)
        ));
    }

    /// Programs what each round lists, and records the Service count
    /// of each round it syncs, the full rounds and how many Services
    /// each round listed.
    #[derive(Default)]
    struct Programmed {
        services: std::collections::BTreeMap<kpng_model::ServiceName, Arc<ServiceView>>,
        synced: Vec<usize>,
        resets: usize,
        listed: Vec<usize>,
        fail: bool,
    }

    impl Sink for Programmed {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            if self.fail {
                return Err(SinkError::backend("programmed", "told to fail"));
            }
            if round.is_full() {
                self.resets += 1;
                self.services.clear();
            }
            for change in round.services() {
                assert_eq!(
                    change.before,
                    self.services.get(change.name),
                    "the round starts from what is programmed"
                );
                match change.after {
                    Some(after) => self.services.insert(change.name.clone(), after.clone()),
                    None => self.services.remove(change.name),
                };
            }
            let view = round.view();
            assert!(self.services.iter().eq(view.services.iter()));
            self.synced.push(self.services.len());
            self.listed.push(round.service_count());
            Ok(())
        }
    }

    fn set(name: &str) -> ViewOp {
        ViewOp::SetService(Arc::new(
            kpng_model::ServiceInfo::new(Service {
                namespace: "ns".into(),
                name: name.into(),
                ..Default::default()
            })
            .expect("valid"),
        ))
    }

    fn delete(name: &str) -> ViewOp {
        ViewOp::DeleteService(kpng_model::ServiceName::new("ns", name))
    }

    /// `view` with `ops` applied, at `revision`.
    fn next(view: &NodeView, ops: &[ViewOp], revision: u64) -> NodeView {
        let mut next = view.clone();
        for op in ops {
            next.apply(op).expect("fits");
        }
        next.revision = revision;
        next
    }

    #[test]
    fn a_guarded_sink_keeps_its_state_while_held_and_catches_up_after() {
        let config = GuardConfig::default().confirm_after(Duration::from_millis(300));
        let mut seen = Vec::new();
        let (send, receive) = std::sync::mpsc::channel();
        let mut sink = Guarded::new(Programmed::default(), config).observed(move |hold| {
            let _ = send.send(hold.map(|h| h.counts));
        });
        let status = sink.status();
        // From nothing: applied.
        let v1 = next(&NodeView::default(), &[set("a"), set("b")], 1);
        sink.sync(&Round::full(&v1)).expect("syncs");
        assert_eq!(sink.inner().synced, [2]);
        // All deleted: held, the inner sink untouched.
        let v2 = next(&v1, &[delete("a"), delete("b")], 2);
        sink.sync(&Round::between(&v1, &v2)).expect("syncs");
        assert_eq!(sink.inner().synced, [2]);
        let hold = status.held().expect("held");
        assert_eq!(hold.counts, counts(2, 0, 2));
        assert!(status.recheck_in().is_some());
        seen.extend(receive.try_iter());
        assert_eq!(seen, [Some(counts(2, 0, 2))]);
        // The input comes back with one more: applied as a delta from
        // what is programmed (only `c` is new to the inner sink).
        let v3 = next(&v2, &[set("a"), set("b"), set("c")], 3);
        sink.sync(&Round::between(&v2, &v3)).expect("syncs");
        assert_eq!(sink.inner().synced, [2, 3]);
        assert_eq!(sink.inner().resets, 1, "no full round needed");
        assert_eq!(sink.inner().listed, [2, 1]);
        assert!(status.held().is_none());
        seen.extend(receive.try_iter());
        assert_eq!(seen, [Some(counts(2, 0, 2)), None]);
        // Nothing held since: the next round goes through as it is (its
        // previous view is, not merely equals, what is programmed).
        assert!(same_view(&v3, &v3.clone()));
        let rebuilt = next(&NodeView::default(), &[set("a"), set("b")], 1);
        assert!(rebuilt == v1 && !same_view(&rebuilt, &v1));
        let v4 = next(&v3, &[set("d")], 4);
        sink.sync(&Round::between(&v3, &v4)).expect("syncs");
        assert_eq!(sink.inner().synced, [2, 3, 4]);
        assert_eq!(sink.inner().listed, [2, 1, 1]);
        // Deleted again, and it lasts: confirmed on the re-check (a full
        // round of the same input, as the driver makes it).
        let v5 = next(
            &v4,
            &[delete("a"), delete("b"), delete("c"), delete("d")],
            5,
        );
        sink.sync(&Round::between(&v4, &v5)).expect("syncs");
        assert_eq!(sink.inner().synced, [2, 3, 4]);
        std::thread::sleep(Duration::from_millis(350));
        sink.sync(&Round::full(&v5)).expect("syncs");
        assert_eq!(sink.inner().synced, [2, 3, 4, 0]);
        assert!(status.held().is_none());
    }

    #[test]
    fn after_a_failure_of_the_inner_sink_its_next_round_is_full() {
        let mut sink = Guarded::new(Programmed::default(), GuardConfig::default());
        let v1 = next(&NodeView::default(), &[set("a"), set("b")], 1);
        sink.sync(&Round::full(&v1)).expect("syncs");
        sink.inner.fail = true;
        let v2 = next(&v1, &[set("c")], 2);
        assert!(sink.sync(&Round::between(&v1, &v2)).is_err());
        sink.inner.fail = false;
        // A driver that went on incrementally: the inner sink still gets
        // a full round.
        let v3 = next(&v2, &[set("d")], 3);
        sink.sync(&Round::between(&v2, &v3)).expect("syncs");
        assert_eq!(sink.inner().resets, 2);
        assert_eq!(sink.inner().synced, [2, 4]);
        // The override lets a mass deletion through at once, as a delta.
        let mut open = Guarded::new(
            Programmed::default(),
            GuardConfig::default().allow_mass_delete(true),
        );
        open.sync(&Round::full(&v3)).expect("syncs");
        let empty = next(
            &v3,
            &[delete("a"), delete("b"), delete("c"), delete("d")],
            4,
        );
        open.sync(&Round::between(&v3, &empty)).expect("syncs");
        assert_eq!(open.inner().synced, [4, 0]);
        assert_eq!(open.inner().resets, 1);
        assert!(open.status().held().is_none());
    }

    /// The driver re-checks a held input when it may be confirmed, with
    /// no new revision: the deletion lands after the confirmation time.
    #[tokio::test]
    async fn the_driver_confirms_a_hold_that_lasts() {
        use kpng_model::Kind;
        use kpng_store::Store;
        let mut store = Store::new();
        let mut txn = store.begin();
        for name in ["a", "b"] {
            txn.set_service(
                kpng_model::ServiceInfo::new(Service {
                    namespace: "ns".into(),
                    name: name.into(),
                    ..Default::default()
                })
                .expect("valid"),
            );
        }
        txn.commit();
        store.mark_listed(Kind::Service);
        store.mark_listed(Kind::Endpoint);
        let config = GuardConfig::default().confirm_after(Duration::from_millis(500));
        let sink = Arc::new(Mutex::new(Guarded::new(Programmed::default(), config)));
        let status = sink.lock().expect("lock").status();
        let reader = store.reader();
        let drive_config = crate::DriveConfig::default()
            .min_sync_period(Duration::ZERO)
            .hold(status.clone());
        let driven = sink.clone();
        let task = tokio::spawn(async move {
            let mut projector = kpng_view::NodeProjector::new("node-a");
            let mut sink = Shared(driven);
            crate::drive(reader, &mut projector, &mut sink, &drive_config).await
        });
        let synced = || sink.lock().expect("lock").inner().synced.clone();
        wait_for(|| synced() == [2]).await;
        let mut txn = store.begin();
        for name in ["a", "b"] {
            txn.delete(&kpng_model::Key::Service(kpng_model::ServiceName::new(
                "ns", name,
            )));
        }
        txn.commit();
        wait_for(|| status.held().is_some()).await;
        assert_eq!(synced(), [2], "held: nothing deleted");
        // No new revision: the re-check confirms it.
        wait_for(|| synced() == [2, 0]).await;
        assert!(status.held().is_none());
        task.abort();
    }

    /// A sink shared with the test.
    struct Shared(Arc<Mutex<Guarded<Programmed>>>);

    impl Sink for Shared {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.0.lock().expect("lock").sync(round)
        }
    }

    async fn wait_for(mut done: impl FnMut() -> bool) {
        for _ in 0..300 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("not reached in 3 s");
    }
}
