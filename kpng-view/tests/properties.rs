//! Property tests of the node projector and the shared views.

use std::sync::Arc;

use std::collections::BTreeMap;

use kpng_model::EndpointInfo;
use kpng_model::ServiceName;
use kpng_model::v1::{Endpoint, IpSet, Node, Service};
use kpng_model::view::{NodeView, ServiceView, ViewDigest};
use kpng_sink::{Changes, Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::RecordingSink;
use kpng_testkit::history::writes::{NODE, history, txns};
use kpng_view::{NodeProjector, SharedNodeView, SharedViews, node_view, view_changes};
use proptest::prelude::*;

proptest! {
    /// `selection` (what explains a node's choice) takes the node view's
    /// decisions: its view is the node view's, and the candidates it
    /// marks used are the view's endpoints, policy by policy.
    #[test]
    fn selection_marks_what_the_node_view_holds(txns in txns()) {
        for snap in &history(txns, 3) {
            let view = node_view(snap, NODE);
            for (name, service) in &view.services {
                let selection = kpng_view::selection(snap, name, NODE).expect("the Service");
                prop_assert_eq!(&selection.view, &**service);
                for family in &selection.families {
                    let mut cluster: Vec<_> = family.candidates.iter().filter(|c| c.cluster).map(|c| c.ip).collect();
                    let mut local: Vec<_> = family.candidates.iter().filter(|c| c.local).map(|c| c.ip).collect();
                    for list in [&mut cluster, &mut local] {
                        list.sort();
                        list.dedup();
                    }
                    let of = |local_set: bool| -> Vec<_> {
                        let mut ips: Vec<_> = if local_set {
                            service.local_endpoints(family.family).map(|e| e.ip()).collect()
                        } else {
                            service.cluster_endpoints(family.family).map(|e| e.ip()).collect()
                        };
                        ips.sort();
                        ips
                    };
                    prop_assert_eq!(cluster, of(false));
                    prop_assert_eq!(local, of(true));
                }
            }
        }
    }

    #[test]
    fn projector_matches_a_fresh_projection(txns in txns(), log in 1..6usize) {
        let snaps = history(txns, log);
        let mut projector = NodeProjector::new(NODE);
        let mut previous = NodeView::default();
        for snap in &snaps {
            let ops = projector.update(snap);
            let fresh = node_view(snap, NODE);
            prop_assert_eq!(projector.view(), &fresh);
            // The ops turn the previous view into the new one ...
            let mut applied = previous.clone();
            for op in &ops {
                applied.apply(op).expect("ops fit the view");
            }
            applied.revision = fresh.revision;
            prop_assert_eq!(&applied, &fresh);
            // ... and are exactly what diffing the two views gives, and
            // give back what changed.
            let changes = Changes::between(&previous, &fresh);
            prop_assert_eq!(&ops, &changes.ops(&previous, &fresh));
            prop_assert_eq!(&Changes::from_ops(&ops), &changes);
            if previous.services == fresh.services
                && previous.node == fresh.node
                && previous.service_cidrs == fresh.service_cidrs
            {
                prop_assert!(ops.is_empty(), "no op when the view did not change");
            }
            previous = fresh;
        }
    }

    #[test]
    fn shared_views_match_fresh_projections(
        txns in txns(),
        log in 1..6usize,
        lag in prop::collection::vec(0..3usize, 4),
    ) {
        // Several nodes (one with no object, one named only by hints)
        // follow one history through shared bases, each at its own pace;
        // every view equals a projection built from scratch for that node
        // at that revision, with the digest of that projection.
        let snaps = history(txns, log);
        // An empty transaction makes no revision: find snapshots by it.
        let at = |revision: u64| {
            snaps.iter().find(|s| s.revision() == revision).cloned().expect("a snapshot")
        };
        let shared = SharedViews::new();
        let nodes = [NODE, "node-b", "node-c", ""];
        let mut views: Vec<SharedNodeView> =
            nodes.iter().map(|n| SharedNodeView::empty(*n)).collect();
        for (i, snap) in snaps.iter().enumerate() {
            for (k, view) in views.iter_mut().enumerate() {
                // A lagging node skips revisions (it meets the bases
                // ahead of it).
                if i % (lag[k] + 1) != 0 && i + 1 != snaps.len() {
                    continue;
                }
                let before = view.view().clone();
                let before_snap = at(before.revision);
                let ops = shared.update(view, snap);
                let now = at(view.view().revision);
                let fresh = node_view(&now, nodes[k]);
                prop_assert_eq!(view.view(), &fresh);
                prop_assert_eq!(view.digest(), ViewDigest::of(&fresh));
                let mut applied = before.clone();
                for op in &ops {
                    applied.apply(op).expect("ops fit the view");
                }
                applied.revision = fresh.revision;
                prop_assert_eq!(&applied, &fresh);
                // The changes since an older snapshot, without its view.
                if let Some(ops) = view_changes(&before_snap, view) {
                    let mut applied = node_view(&before_snap, nodes[k]);
                    for op in &ops {
                        applied.apply(op).expect("ops fit the view");
                    }
                    applied.revision = fresh.revision;
                    prop_assert_eq!(&applied, &fresh);
                }
                // A fresh view of the node agrees.
                let again = shared.project(nodes[k], &now);
                prop_assert_eq!(again.view(), &fresh);
            }
        }
    }

    #[test]
    fn sync_into_hands_the_sink_the_exact_view(
        txns in txns(),
        fail_at in 0..16usize,
        given in prop::collection::vec(prop::bool::weighted(0.25), 16),
    ) {
        #[derive(Default)]
        struct Last { view: NodeView, fail: bool }
        impl Sink for Last {
            fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
                if std::mem::take(&mut self.fail) {
                    return Err(SinkError::backend("last", "injected"));
                }
                self.view = round.view().clone();
                Ok(())
            }
        }
        let snaps = history(txns, 1024);
        let mut projector = NodeProjector::new(NODE);
        let mut sink = Last::default();
        for (i, snap) in snaps.iter().enumerate() {
            // The failure fires at the first round from `fail_at` on (a
            // revision that changes nothing for this node makes no round).
            if i == fail_at {
                sink.fail = true;
            }
            // Some rounds are given their snapshot (`sync_last`: the
            // projector then keeps none, and the next round projects every
            // Service again): the sink gets the same view either way.
            let result = if given.get(i).copied().unwrap_or(false) {
                projector.sync_last(snap.clone(), &mut sink)
            } else {
                projector.sync_into(snap, &mut sink)
            };
            if result.is_err() {
                prop_assert!(i >= fail_at);
                continue;
            }
            let mut expected = node_view(snap, NODE);
            expected.revision = sink.view.revision;
            prop_assert_eq!(&sink.view, &expected);
        }
    }

    /// Rounds applied one by one, as a backend applies them (a full
    /// round starts over; an incremental one sets or removes what it
    /// lists), equal a full round of the final view; each change's view
    /// before is what the previous rounds left; the node and the Service
    /// CIDRs are flagged whenever they changed; and the view is the
    /// projector's own, not a copy.
    #[test]
    fn rounds_one_by_one_equal_a_full_round(txns in txns(), fail_at in 0..16usize) {
        #[derive(Default)]
        struct Applied {
            services: BTreeMap<ServiceName, Arc<ServiceView>>,
            node: Option<Arc<Node>>,
            cidrs: Arc<IpSet>,
            fail: bool,
            problems: Vec<String>,
        }
        impl Sink for Applied {
            fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
                if std::mem::take(&mut self.fail) {
                    return Err(SinkError::backend("applied", "injected"));
                }
                let view = round.view();
                if round.is_full() {
                    self.services.clear();
                }
                for change in round.services() {
                    if change.before != self.services.get(change.name) {
                        self.problems.push(format!("{}: before is not what was applied", change.name));
                    }
                    match change.after {
                        Some(after) => self.services.insert(change.name.clone(), after.clone()),
                        None => self.services.remove(change.name),
                    };
                }
                if round.node_changed() {
                    self.node = view.node.clone();
                } else if self.node != view.node {
                    self.problems.push("the node changed unflagged".into());
                }
                if round.service_cidrs_changed() {
                    self.cidrs = view.service_cidrs.clone();
                } else if self.cidrs != view.service_cidrs {
                    self.problems.push("the Service CIDRs changed unflagged".into());
                }
                Ok(())
            }
        }
        let snaps = history(txns, 1024);
        let mut projector = NodeProjector::new(NODE);
        let mut sink = Applied::default();
        for (i, snap) in snaps.iter().enumerate() {
            if i == fail_at {
                sink.fail = true;
            }
            let _ = projector.sync_into(snap, &mut sink);
        }
        // One more round, with no failure to come, brings it level.
        if let Some(last) = snaps.last() {
            projector.sync_into(last, &mut sink).expect("no failure left");
        }
        prop_assert!(sink.problems.is_empty(), "{:?}", sink.problems);
        let full = match snaps.last() {
            Some(last) => node_view(last, NODE),
            None => NodeView::default(),
        };
        let expected: BTreeMap<_, _> =
            full.services.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        prop_assert_eq!(&sink.services, &expected);
        prop_assert_eq!(&sink.node, &full.node);
        prop_assert_eq!(&sink.cidrs, &full.service_cidrs);
        for (name, service) in &sink.services {
            prop_assert!(Arc::ptr_eq(service, &projector.view().services[name]));
        }
    }
}

#[test]
fn first_round_and_round_after_failure_are_full() {
    let mut store = Store::new();
    let name = ServiceName::new("ns", "web");
    let mut txn = store.begin();
    txn.set_service(
        kpng_model::ServiceInfo::new(Service {
            namespace: "ns".into(),
            name: "web".into(),
            ..Default::default()
        })
        .expect("valid"),
    );
    txn.commit();
    let mut projector = NodeProjector::new(NODE);
    let mut sink = RecordingSink::default();

    let report = projector
        .sync_into(&store.snapshot(), &mut sink)
        .expect("ok")
        .expect("round");
    assert!(report.full);
    assert!(sink.rounds[0].full);

    // Nothing changed: no round at all.
    assert_eq!(
        projector
            .sync_into(&store.snapshot(), &mut sink)
            .expect("ok"),
        None
    );

    // A change, and the sink fails: the next round is full again.
    let mut txn = store.begin();
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&Endpoint {
            addresses: Some(IpSet::parse_addrs("ip", ["10.0.0.1"]).expect("ip")),
            ready: true,
            serving: true,
            ..Default::default()
        })
        .expect("valid"),
    );
    txn.commit();
    sink.fail_syncs = 1;
    sink.take();
    assert!(projector.sync_into(&store.snapshot(), &mut sink).is_err());
    let failed = sink.take();
    assert_eq!(failed.len(), 1);
    assert!(!failed[0].full);
    assert_eq!(failed[0].services, [(name.clone(), true)]);
    let report = projector
        .sync_into(&store.snapshot(), &mut sink)
        .expect("ok")
        .expect("round");
    assert!(report.full);
    assert_eq!(report.services, 1);
    assert!(sink.rounds[0].full);
}

#[test]
fn another_nodes_change_that_does_not_alter_this_view_yields_nothing() {
    let mut store = Store::new();
    let name = ServiceName::new("ns", "web");
    let endpoint = |ip: &str, node: &str, zone: &str, ready: bool| Endpoint {
        addresses: Some(IpSet::parse_addrs("ip", [ip]).expect("ip")),
        node_name: node.into(),
        ready,
        serving: ready,
        hint_zones: vec![zone.into()],
        ..Default::default()
    };
    let mut txn = store.begin();
    txn.set_node(Node {
        name: NODE.into(),
        zone: "zone-1".into(),
        ..Default::default()
    });
    txn.set_service(
        kpng_model::ServiceInfo::new(Service {
            namespace: "ns".into(),
            name: "web".into(),
            ..Default::default()
        })
        .expect("valid"),
    );
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&endpoint("10.0.0.1", NODE, "zone-1", true)).expect("valid"),
    );
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&endpoint("10.0.0.2", "node-b", "zone-2", true)).expect("valid"),
    );
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&endpoint("10.0.0.3", "node-b", "zone-2", false)).expect("valid"),
    );
    txn.commit();
    let mut projector = NodeProjector::new(NODE);
    projector.update(&store.snapshot());
    let before = projector.view().clone();
    let used = |view: &kpng_model::view::NodeView| {
        view.services[&name]
            .endpoints
            .iter()
            .filter(|e| e.used())
            .count()
    };
    assert_eq!(used(&before), 1, "zone hints keep only zone-1");
    // The zone-2 endpoint serves: in the view, in neither set. The one not
    // serving is not.
    assert_eq!(before.services[&name].endpoints.len(), 2);

    // The endpoint that does not serve moves to another node: the store
    // changes (a new revision), this node's view does not.
    let mut txn = store.begin();
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&endpoint("10.0.0.3", "node-c", "zone-2", false)).expect("valid"),
    );
    assert!(txn.commit().revision.is_some());
    assert!(projector.update(&store.snapshot()).is_empty());
    assert_eq!(projector.view().services, before.services);

    // This node's zone changes: every Service is recomputed, and the view
    // changes (hints no longer match, so no filtering).
    let mut txn = store.begin();
    txn.set_node(Node {
        name: NODE.into(),
        zone: "zone-3".into(),
        ..Default::default()
    });
    txn.set_endpoint(
        name.clone(),
        EndpointInfo::from_proto(&endpoint("10.0.0.2", "node-b", "zone-2", true)).expect("valid"),
    );
    txn.commit();
    let ops = projector.update(&store.snapshot());
    assert!(matches!(ops[0], kpng_model::view::ViewOp::SetNode(_)));
    assert_eq!(used(projector.view()), 2);
}
