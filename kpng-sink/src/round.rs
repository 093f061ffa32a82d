//! [`Round`]: what one sync hands a backend.

use std::sync::Arc;

use kpng_model::ServiceName;
use kpng_model::view::{NodeView, ServiceView};

use crate::Changes;

/// One Service of a round: its view before the round (`None`: it is new,
/// or the round is full) and after it (`None`: it is gone).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ServiceChange<'a> {
    /// The Service.
    pub name: &'a ServiceName,
    /// Its view as of the previous round; always `None` in a full round.
    pub before: Option<&'a Arc<ServiceView>>,
    /// Its view now; `None` when it was removed.
    pub after: Option<&'a Arc<ServiceView>>,
}

impl<'a> ServiceChange<'a> {
    /// The endpoints of `before` that left the Service: absent from
    /// `after` (all of them when the Service was removed), by address in
    /// their family. An endpoint still in the view, used or not, has not
    /// left: one that serves while terminating, or that hints send to other
    /// nodes, stays (in neither set) and its connections may drain. None
    /// in a full round (nothing to compare with).
    pub fn departed(&self) -> impl Iterator<Item = &'a kpng_model::view::EndpointView> + 'a {
        let after = self.after;
        self.before
            .into_iter()
            .flat_map(|b| b.endpoints.iter())
            .filter(move |e| {
                after.is_none_or(|a| {
                    a.endpoints
                        .binary_search_by(|x| x.ip().cmp(&e.ip()))
                        .is_err()
                })
            })
    }
}

/// One sync: the node view the data plane must match, and what changed
/// since the previous round that succeeded.
///
/// A round is *full* when the backend must program the whole view and
/// remove anything else it programmed before: the first round of a
/// backend's life, and the first after any failed round. Otherwise it is
/// *incremental*: [`services`](Self::services) lists only the Services
/// that changed, with their views before and after, and everything else
/// is as the previous round left it.
///
/// The views are borrowed from the driver, which keeps the only copy: a
/// backend keeps what it needs of them, not the views.
///
/// ```
/// use kpng_model::view::NodeView;
/// use kpng_sink::Round;
///
/// let view = NodeView::default();
/// let round = Round::full(&view);
/// assert!(round.is_full() && round.node_changed());
/// assert_eq!(round.services().count(), 0);
/// ```
#[derive(Debug)]
pub struct Round<'a> {
    view: &'a NodeView,
    previous: Option<&'a NodeView>,
    changes: Changes,
}

impl<'a> Round<'a> {
    /// A full round of `view`: every Service is listed, with no view
    /// before.
    pub fn full(view: &'a NodeView) -> Self {
        Self {
            view,
            previous: None,
            changes: Changes {
                node: true,
                service_cidrs: true,
                services: Vec::new(),
            },
        }
    }

    /// An incremental round from `previous`, the view of the last round
    /// that succeeded, to `view`, with `changes` between them (in name
    /// order, each Service once).
    pub fn incremental(previous: &'a NodeView, view: &'a NodeView, changes: Changes) -> Self {
        Self {
            view,
            previous: Some(previous),
            changes,
        }
    }

    /// An incremental round from `previous` to `view`, its changes found
    /// by comparing them ([`Changes::between`]).
    pub fn between(previous: &'a NodeView, view: &'a NodeView) -> Self {
        Self::incremental(previous, view, Changes::between(previous, view))
    }

    /// The revision of the view.
    pub fn revision(&self) -> u64 {
        self.view.revision
    }

    /// Whether the backend must program the whole view, removing anything
    /// else it had programmed.
    pub fn is_full(&self) -> bool {
        self.previous.is_none()
    }

    /// The node view to match.
    pub fn view(&self) -> &'a NodeView {
        self.view
    }

    /// The view of the previous round, in an incremental round.
    pub fn previous(&self) -> Option<&'a NodeView> {
        self.previous
    }

    /// Whether this node's object changed (always, in a full round).
    pub fn node_changed(&self) -> bool {
        self.changes.node
    }

    /// Whether the Service CIDRs changed (always, in a full round).
    pub fn service_cidrs_changed(&self) -> bool {
        self.changes.service_cidrs
    }

    /// How many Services the round sets or removes (every Service of the
    /// view, in a full round).
    pub fn service_count(&self) -> usize {
        match self.previous {
            None => self.view.services.len(),
            Some(_) => self.changes.services.len(),
        }
    }

    /// Whether the round changes nothing.
    pub fn is_empty(&self) -> bool {
        match self.previous {
            None => false,
            Some(_) => self.changes.is_empty(),
        }
    }

    /// The Services to program again, in name order, with their views
    /// before and after: every Service of the view in a full round, the
    /// changed ones (removed ones included) in an incremental one.
    pub fn services(&self) -> impl Iterator<Item = ServiceChange<'_>> + '_ {
        let view = self.view;
        let (all, changed) = match self.previous {
            None => (Some(view.services.iter()), None),
            Some(previous) => (None, Some((previous, self.changes.services.iter()))),
        };
        let all = all
            .into_iter()
            .flatten()
            .map(|(name, after)| ServiceChange {
                name,
                before: None,
                after: Some(after),
            });
        let changed = changed.into_iter().flat_map(move |(previous, names)| {
            names.map(move |name| ServiceChange {
                name,
                before: previous.services.get(name),
                after: view.services.get(name),
            })
        });
        all.chain(changed)
    }

    /// The Services the round removes (none in a full round: a full
    /// round removes whatever the view does not hold).
    pub fn removed(&self) -> impl Iterator<Item = &ServiceName> + '_ {
        self.services()
            .filter(|c| c.after.is_none())
            .map(|c| c.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::v1::Service;

    /// A view of Services `ns/NAME`, each with the ClusterIP given.
    fn view(services: &[(&str, &str)]) -> NodeView {
        let mut view = NodeView::default();
        for (name, ip) in services {
            let ip = ip.parse().expect("address");
            let service = Arc::new(
                kpng_model::ServiceInfo::new(Service::new("ns", *name).with_cluster_ips([ip]))
                    .expect("valid"),
            );
            view.services
                .insert(service.service_name(), Arc::new(ServiceView::new(service)));
        }
        view
    }

    #[test]
    fn between_lists_set_changed_and_removed_services_once() {
        let a = view(&[
            ("keep", "10.0.0.1"),
            ("change", "10.0.0.2"),
            ("gone", "10.0.0.3"),
        ]);
        let mut b = a.clone();
        let next = view(&[("change", "10.0.0.4"), ("new", "10.0.0.5")]);
        for name in ["change", "new"] {
            let key = ServiceName::new("ns", name);
            b.services.insert(key.clone(), next.services[&key].clone());
        }
        b.services.remove(&ServiceName::new("ns", "gone"));
        let round = Round::between(&a, &b);
        let listed: Vec<_> = round
            .services()
            .map(|c| {
                (
                    c.name.name().to_owned(),
                    c.before.is_some(),
                    c.after.is_some(),
                )
            })
            .collect();
        let mut expected = vec![
            ("change".to_owned(), true, true),
            ("gone".to_owned(), true, false),
            ("new".to_owned(), false, true),
        ];
        expected.sort_by_key(|(n, ..)| ServiceName::new("ns", n));
        assert_eq!(listed, expected);
        assert_eq!(round.removed().count(), 1);
        assert!(!round.is_full() && !round.node_changed() && !round.is_empty());
        // The wire's ops give back what `between` finds.
        let changes = Changes::between(&a, &b);
        assert_eq!(Changes::from_ops(&changes.ops(&a, &b)), changes);
        // An equal copy is not a change, even when not shared.
        let copy = view(&[
            ("keep", "10.0.0.1"),
            ("change", "10.0.0.2"),
            ("gone", "10.0.0.3"),
        ]);
        assert!(Round::between(&a, &copy).is_empty());
    }

    /// `departed`: the endpoints gone from the view; one still there in
    /// neither set (it serves, unused) has not left; a removed Service's
    /// endpoints all left.
    #[test]
    fn departed_endpoints_are_those_gone_from_the_view() {
        use kpng_model::EndpointInfo;
        use kpng_model::view::EndpointView;
        let a = view(&[("web", "10.0.0.1")]);
        let name = ServiceName::new("ns", "web");
        let endpoint = |ip: &str, used: bool| {
            EndpointView::new(
                EndpointInfo::new(ip.parse().expect("ip")),
                kpng_model::IpFamily::V4,
            )
            .expect("v4")
            .with_cluster(used)
        };
        let with = |eps: Vec<EndpointView>| {
            let mut v = a.clone();
            let mut service = (*v.services[&name]).clone();
            service.endpoints = eps;
            v.services.insert(name.clone(), Arc::new(service));
            v
        };
        let before = with(vec![
            endpoint("10.244.1.1", true),
            endpoint("10.244.1.2", true),
            endpoint("10.244.1.3", true),
        ]);
        // .2 drains (serves, unused); .3 left.
        let after = with(vec![
            endpoint("10.244.1.1", true),
            endpoint("10.244.1.2", false),
        ]);
        let round = Round::between(&before, &after);
        let change = round.services().next().expect("a change");
        let gone: Vec<String> = change.departed().map(|e| e.ip().to_string()).collect();
        assert_eq!(gone, ["10.244.1.3"]);
        let mut removed = before.clone();
        removed.services.remove(&name);
        let round = Round::between(&before, &removed);
        let change = round.services().next().expect("a change");
        assert_eq!(change.departed().count(), 3);
        assert_eq!(
            Round::full(&before)
                .services()
                .next()
                .expect("listed")
                .departed()
                .count(),
            0
        );
    }

    #[test]
    fn a_full_round_lists_every_service_with_no_view_before() {
        let v = view(&[("a", "10.0.0.1"), ("b", "10.0.0.2")]);
        let round = Round::full(&v);
        assert_eq!(round.service_count(), 2);
        assert!(
            round
                .services()
                .all(|c| c.before.is_none() && c.after.is_some())
        );
        assert_eq!(round.removed().count(), 0);
        assert!(round.service_cidrs_changed() && !round.is_empty());
    }
}
