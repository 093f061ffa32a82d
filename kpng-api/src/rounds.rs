//! Rounds from a watch: the ops, resets and syncs an agent receives,
//! turned back into the [`Round`]s a sink takes.

use kpng_model::view::{NodeView, ViewOp};
use kpng_sink::{Round, Sink, SinkError};

use crate::codec::compact::Decoded;

/// The node view a watch streams, and what changed in it since the last
/// round a sink took: at each sync, [`sync`](Self::sync) hands the sink a
/// full round (the first, after a reset, after a failed round or an op
/// that did not fit the view) or the round from the view of the last
/// round that succeeded.
///
/// It holds one view, and the view of the last round that succeeded, an
/// O(1) clone that shares every Service not changed since with the other:
/// what a round changes is the diff of the two ([`Changes::between`](kpng_sink::Changes::between),
/// O(changed Services)), as the ops are derived from it on the server
/// ([`Changes::ops`](kpng_sink::Changes::ops)).
///
/// It owns "the next round is full" for its sink: a sink that fails
/// keeps no flag of its own, it is given a full round next.
#[derive(Debug)]
pub(crate) struct Rounds {
    /// The view the ops received so far lead to.
    view: NodeView,
    /// The view of the last round that succeeded: `None` before one, and
    /// after a reset.
    synced: Option<NodeView>,
    /// The next round is full.
    full: bool,
    /// Ops were applied since the last round that succeeded, or the
    /// last reset.
    pending: bool,
}

impl Default for Rounds {
    fn default() -> Self {
        Self {
            view: NodeView::default(),
            synced: None,
            full: true,
            pending: false,
        }
    }
}

impl Rounds {
    /// Nothing held yet: the first round is full.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Drops everything held: the whole view follows (the server's
    /// reset), or the agent starts over. The next round is full.
    pub(crate) fn reset(&mut self) {
        *self = Self::new();
    }

    /// A new stream resumes from the revision of the last round that
    /// succeeded: the ops received since (a batch the last stream did not
    /// close with a sync, or one the sink failed) are dropped, as the
    /// server sends what changed since that revision.
    pub(crate) fn resume(&mut self) {
        if std::mem::take(&mut self.pending) {
            self.view = self.synced.clone().unwrap_or_default();
        }
    }

    /// Applies what the decoder handed on: an op, or endpoints of one
    /// Service together.
    ///
    /// # Errors
    /// As [`apply`](Self::apply).
    pub(crate) fn apply_decoded(&mut self, decoded: Decoded) -> Result<(), kpng_model::Error> {
        match decoded {
            Decoded::Op(op) => self.apply(&op),
            Decoded::Endpoints(name, endpoints) => {
                self.pending = true;
                self.view
                    .set_endpoints(&name, endpoints)
                    .inspect_err(|_| self.full = true)
            }
        }
    }

    /// Applies one op of the stream.
    ///
    /// # Errors
    /// An op that does not fit the view (an endpoint of a Service it does
    /// not hold): the view is then not the server's, and the next round
    /// is full.
    pub(crate) fn apply(&mut self, op: &ViewOp) -> Result<(), kpng_model::Error> {
        self.pending = true;
        self.view.apply(op).inspect_err(|_| self.full = true)
    }

    /// The stream's sync at `revision`: hands `sink` the round from the
    /// view of the last round that succeeded to the view the ops led to,
    /// or a full round.
    ///
    /// # Errors
    /// The sink's; the next round is then full.
    pub(crate) fn sync<S: Sink + ?Sized>(
        &mut self,
        revision: u64,
        sink: &mut S,
    ) -> Result<(), SinkError> {
        self.view.revision = revision;
        let result = match self.synced.as_ref().filter(|_| !self.full) {
            None => sink.sync(&Round::full(&self.view)),
            Some(previous) => {
                // A Service set and deleted again, or set as it was, is
                // no change; nor is the node or the Service CIDRs set as
                // they were.
                sink.sync(&Round::between(previous, &self.view))
            }
        };
        match result {
            Ok(()) => {
                self.synced = Some(self.view.clone());
                self.full = false;
                self.pending = false;
            }
            Err(_) => self.full = true,
        }
        result
    }

    /// Drops the Services of the view whose name fingerprints
    /// ([`ViewSummary::fingerprint`](kpng_model::view::ViewSummary::fingerprint))
    /// are `fingerprints`: a resume by summary, whose changes follow.
    pub(crate) fn drop_services(&mut self, fingerprints: &[u64]) {
        for name in kpng_model::view::ViewSummary::names(&self.view, fingerprints) {
            self.pending = true;
            self.view.services.remove(&name);
        }
    }

    /// The view the ops received so far lead to.
    pub(crate) fn view(&self) -> &NodeView {
        &self.view
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    use kpng_model::v1::{IpSet, Node, Service};
    use kpng_model::view::{EndpointView, ServiceView};
    use kpng_model::{EndpointInfo, ServiceName};
    use kpng_testkit::RecordingSink;
    use proptest::prelude::*;

    use super::*;

    fn name(i: u8) -> ServiceName {
        ServiceName::new("ns", format!("s{i}"))
    }

    fn ip(i: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
    }

    /// Service `s{i}` with the ClusterIP 10.96.0.`version`.
    fn set(i: u8, version: u8) -> ViewOp {
        let cluster_ip = IpAddr::V4(Ipv4Addr::new(10, 96, 0, version));
        ViewOp::SetService(Arc::new(
            kpng_model::ServiceInfo::new(
                Service::new("ns", format!("s{i}")).with_cluster_ips([cluster_ip]),
            )
            .expect("valid"),
        ))
    }

    /// Endpoint 10.0.0.`e` of Service `s{i}`, used for cluster traffic
    /// or not.
    fn endpoint(i: u8, e: u8, cluster: bool) -> ViewOp {
        let view = EndpointView::at(EndpointInfo::new(ip(e)), ip(e))
            .expect("an IPv4 endpoint")
            .with_cluster(cluster);
        ViewOp::SetEndpoint(name(i), view)
    }

    fn node(zone: &str) -> ViewOp {
        ViewOp::SetNode(Arc::new(Node {
            name: "node-a".into(),
            zone: zone.into(),
            ..Default::default()
        }))
    }

    fn apply(rounds: &mut Rounds, ops: &[ViewOp]) {
        for op in ops {
            rounds.apply(op).expect("fits");
        }
    }

    /// What a recorded round listed: names, and whether each is set.
    fn listed(sink: &mut RecordingSink) -> Vec<(bool, Vec<(String, bool)>)> {
        sink.take()
            .into_iter()
            .map(|r| {
                let services = r
                    .services
                    .into_iter()
                    .map(|(n, set)| (n.name().to_owned(), set))
                    .collect();
                (r.full, services)
            })
            .collect()
    }

    fn s(name: &str, set: bool) -> (String, bool) {
        (name.to_owned(), set)
    }

    #[test]
    fn rounds_list_what_changed_since_the_last_round_that_succeeded() {
        let mut rounds = Rounds::new();
        let mut sink = RecordingSink::default();
        // The first round is full.
        apply(&mut rounds, &[set(1, 1), set(2, 1), endpoint(1, 1, true)]);
        rounds.sync(1, &mut sink).expect("syncs");
        assert_eq!(
            listed(&mut sink),
            [(true, vec![s("s1", true), s("s2", true)])]
        );
        // One Service's endpoint: that Service.
        apply(&mut rounds, &[endpoint(2, 2, true)]);
        rounds.sync(2, &mut sink).expect("syncs");
        assert_eq!(listed(&mut sink), [(false, vec![s("s2", true)])]);
        // Set and deleted again, or set as it was: no change; a sync with
        // nothing still makes a round, of the new revision.
        apply(
            &mut rounds,
            &[set(3, 1), ViewOp::DeleteService(name(3)), set(1, 1)],
        );
        rounds.sync(3, &mut sink).expect("syncs");
        let round = sink.rounds.last().expect("a round");
        assert_eq!((round.revision, round.full), (3, false));
        assert!(round.services.is_empty());
        sink.take();
        // The node: no Service listed, the node changed.
        let mut seen = Vec::new();
        let mut spy = Spy(&mut seen);
        apply(&mut rounds, &[node("z1")]);
        rounds.sync(4, &mut spy).expect("syncs");
        apply(
            &mut rounds,
            &[ViewOp::SetServiceCidrs(Arc::new(IpSet::default()))],
        );
        rounds.sync(5, &mut spy).expect("syncs");
        apply(&mut rounds, &[ViewOp::DeleteService(name(1))]);
        rounds.sync(6, &mut spy).expect("syncs");
        assert_eq!(
            seen,
            [
                (false, true, false, 0),
                // Set to what they were: not a change.
                (false, false, false, 0),
                (false, false, false, 1),
            ]
        );
        // A failed round: the next is full.
        sink.fail_syncs = 1;
        apply(&mut rounds, &[endpoint(2, 3, false)]);
        assert!(rounds.sync(7, &mut sink).is_err());
        rounds.sync(8, &mut sink).expect("syncs");
        assert_eq!(
            listed(&mut sink),
            [(false, vec![s("s2", true)]), (true, vec![s("s2", true)])]
        );
        // An op that does not fit: the next round is full.
        assert!(rounds.apply(&endpoint(9, 1, true)).is_err());
        rounds.sync(9, &mut sink).expect("syncs");
        assert_eq!(listed(&mut sink), [(true, vec![s("s2", true)])]);
        // The server's reset: the whole view follows, in a full round.
        rounds.reset();
        apply(&mut rounds, &[set(4, 1)]);
        rounds.sync(10, &mut sink).expect("syncs");
        assert_eq!(listed(&mut sink), [(true, vec![s("s4", true)])]);
        assert_eq!(rounds.view().revision, 10);
    }

    /// Records (full, node changed, Service CIDRs changed, Services
    /// listed) of each round.
    struct Spy<'a>(&'a mut Vec<(bool, bool, bool, usize)>);

    impl Sink for Spy<'_> {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.0.push((
                round.is_full(),
                round.node_changed(),
                round.service_cidrs_changed(),
                round.service_count(),
            ));
            Ok(())
        }
    }

    #[test]
    fn a_new_stream_drops_the_ops_no_sync_closed() {
        let mut rounds = Rounds::new();
        let mut sink = RecordingSink::default();
        apply(&mut rounds, &[set(1, 1), endpoint(1, 1, true)]);
        rounds.sync(1, &mut sink).expect("syncs");
        let synced = rounds.view().clone();
        // A batch, then the stream is lost before its sync.
        apply(&mut rounds, &[ViewOp::DeleteService(name(1)), set(2, 1)]);
        rounds.resume();
        assert_eq!(*rounds.view(), synced);
        // The server sends what changed since revision 1 again.
        apply(&mut rounds, &[set(2, 1)]);
        rounds.sync(2, &mut sink).expect("syncs");
        let round = sink.rounds.last().expect("a round");
        assert!(!round.full);
        assert_eq!(round.services, [(name(2), true)]);
        assert_eq!(round.view.services.len(), 2);
        // Nothing pending: resuming keeps the view.
        rounds.resume();
        assert_eq!(rounds.view().services.len(), 2);
    }

    /// A data plane: it programs what each round lists, after checking
    /// that the round starts where it is; told to, it fails a round half
    /// way, its state then garbage.
    #[derive(Default)]
    struct Mirror {
        node: Option<Arc<Node>>,
        service_cidrs: Arc<IpSet>,
        services: BTreeMap<ServiceName, Arc<ServiceView>>,
        fail: bool,
        rounds: usize,
    }

    impl Sink for Mirror {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.rounds += 1;
            let view = round.view();
            if round.is_full() {
                *self = Self {
                    fail: self.fail,
                    rounds: self.rounds,
                    ..Self::default()
                };
            } else {
                let previous = round.previous().expect("incremental");
                assert!(self.services.iter().eq(previous.services.iter()));
                assert_eq!(self.node, previous.node);
                assert_eq!(self.service_cidrs, previous.service_cidrs);
            }
            if round.node_changed() {
                self.node = view.node.clone();
            }
            if round.service_cidrs_changed() {
                self.service_cidrs = view.service_cidrs.clone();
            }
            let half = round.service_count() / 2;
            for (i, change) in round.services().enumerate() {
                if self.fail && i == half {
                    return Err(SinkError::backend("mirror", "told to fail"));
                }
                assert_eq!(change.before, self.services.get(change.name));
                match change.after {
                    Some(after) => self.services.insert(change.name.clone(), after.clone()),
                    None => self.services.remove(change.name),
                };
            }
            if self.fail {
                return Err(SinkError::backend("mirror", "told to fail"));
            }
            Ok(())
        }
    }

    /// One event of a scripted stream.
    #[derive(Clone, Debug)]
    enum Step {
        Op(ViewOp),
        /// A sync; the sink fails it when `true`.
        Sync(bool),
        Reset,
        Resume,
    }

    fn op() -> impl Strategy<Value = ViewOp> {
        prop_oneof![
            4 => (0..4u8, 0..3u8).prop_map(|(i, v)| set(i, v)),
            2 => (0..4u8).prop_map(|i| ViewOp::DeleteService(name(i))),
            6 => (0..4u8, 1..4u8, any::<bool>()).prop_map(|(i, e, c)| endpoint(i, e, c)),
            2 => (0..4u8, 1..4u8).prop_map(|(i, e)| ViewOp::DeleteEndpoint(name(i), ip(e))),
            1 => prop_oneof![Just("z1"), Just("z2")].prop_map(node),
            1 => Just(ViewOp::DeleteNode),
            1 => (0..3u8).prop_map(|n| ViewOp::SetServiceCidrs(Arc::new(IpSet {
                v4: (0..n).map(|i| format!("10.96.{i}.0/24")).collect(),
                v6: Vec::new(),
            }))),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            12 => op().prop_map(Step::Op),
            3 => Just(Step::Sync(false)),
            1 => Just(Step::Sync(true)),
            1 => Just(Step::Reset),
            1 => Just(Step::Resume),
        ]
    }

    proptest! {
        /// Rounds built from any stream, programmed one by one by a sink
        /// that sets and removes what each lists, leave it holding the
        /// view: after every round that succeeded, and at the end. The
        /// view is what the ops make of the view of the last reset, even
        /// when streams are lost (a new stream sends again what changed
        /// since the last round that succeeded).
        #[test]
        fn rounds_applied_one_by_one_equal_the_view(steps in prop::collection::vec(step(), 1..80)) {
            let mut rounds = Rounds::new();
            let mut sink = Mirror::default();
            let mut revision = 0;
            // The server's view, and its ops since the agent's last round
            // that succeeded.
            let mut truth = NodeView::default();
            let mut since = Vec::new();
            let check = |sink: &Mirror, view: &NodeView| {
                prop_assert!(sink.services.iter().eq(view.services.iter()));
                prop_assert_eq!(&sink.node, &view.node);
                prop_assert_eq!(&sink.service_cidrs, &view.service_cidrs);
                Ok(())
            };
            for step in steps.into_iter().chain([Step::Sync(false)]) {
                match step {
                    // An op that does not fit makes the next round full.
                    Step::Op(op) => {
                        prop_assert_eq!(rounds.apply(&op).is_ok(), truth.apply(&op).is_ok());
                        since.push(op);
                    }
                    Step::Sync(fail) => {
                        revision += 1;
                        truth.revision = revision;
                        sink.fail = fail;
                        let result = rounds.sync(revision, &mut sink);
                        prop_assert_eq!(result.is_err(), fail);
                        prop_assert_eq!(rounds.view(), &truth);
                        if !fail {
                            check(&sink, rounds.view())?;
                            since.clear();
                        }
                    }
                    Step::Reset => {
                        rounds.reset();
                        truth = NodeView::default();
                        since.clear();
                    }
                    Step::Resume => {
                        rounds.resume();
                        for op in &since {
                            let _ = rounds.apply(op);
                        }
                    }
                }
                prop_assert!(rounds.view().services == truth.services);
            }
            prop_assert_eq!(rounds.view().revision, revision);
            check(&sink, rounds.view())?;
        }
    }
}
