//! Table tests of the node view's endpoint selection. Each case cites the
//! Kubernetes rule it checks; "semantics N" refers to the numbered rules of
//! kube-proxy's behaviour (pkg/proxy/topology.go `CategorizeEndpoints` and
//! `canUseTopology`, KEP-1669 terminating endpoints, KEP-2433 topology
//! hints, KEP-3015 PreferSameNode, KEP-2086 internalTrafficPolicy).

use std::net::IpAddr;

use kpng_model::v1::{Node, Service, TrafficPolicy};
use kpng_model::view::ServiceView;
use kpng_model::{EndpointInfo, IpFamily, ServiceName};
use kpng_store::Store;
use kpng_view::node_view;

const NODE: &str = "node-a";

#[derive(Clone, Copy, Default)]
struct Ep {
    ip: &'static str,
    node: &'static str,
    /// (ready, serving, terminating)
    cond: (bool, bool, bool),
    zones: &'static [&'static str],
    nodes: &'static [&'static str],
}

const READY: (bool, bool, bool) = (true, true, false);
const TERMINATING: (bool, bool, bool) = (false, true, true);
const NOT_SERVING: (bool, bool, bool) = (false, false, true);
const NOT_READY: (bool, bool, bool) = (false, false, false);

fn ep(ip: &'static str, node: &'static str, cond: (bool, bool, bool)) -> Ep {
    Ep {
        ip,
        node,
        cond,
        ..Default::default()
    }
}

struct Case {
    name: &'static str,
    rule: &'static str,
    zone: Option<&'static str>,
    endpoints: Vec<Ep>,
    family: IpFamily,
    cluster: &'static [&'static str],
    local: &'static [&'static str],
    has_endpoints: bool,
}

fn project(zone: Option<&str>, endpoints: &[Ep], service: Service) -> ServiceView {
    let mut store = Store::new();
    let name = ServiceName::new("ns", "svc");
    let mut txn = store.begin();
    txn.set_service(kpng_model::ServiceInfo::new(service).expect("valid"));
    if let Some(zone) = zone {
        txn.set_node(Node {
            name: NODE.into(),
            zone: zone.into(),
            ..Default::default()
        });
    }
    for e in endpoints {
        let (ready, serving, terminating) = e.cond;
        let endpoint = EndpointInfo::builder(e.ip.parse().expect("ip"))
            .node(e.node, "")
            .conditions(ready, serving, terminating)
            .hint_zones(e.zones.iter().copied())
            .hint_nodes(e.nodes.iter().copied())
            .build();
        txn.set_endpoint(name.clone(), endpoint);
    }
    txn.commit();
    let view = node_view(&store.snapshot(), NODE);
    (*view.services[&name]).clone()
}

fn svc() -> Service {
    Service {
        namespace: "ns".into(),
        name: "svc".into(),
        ..Default::default()
    }
}

fn ips<'a>(it: impl Iterator<Item = &'a kpng_model::view::EndpointView>) -> Vec<IpAddr> {
    it.map(|e| e.ip()).collect()
}

fn parse(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().expect("ip")).collect()
}

#[test]
fn endpoint_selection_table() {
    let z1: &[&str] = &["zone-1"];
    let z2: &[&str] = &["zone-2"];
    let cases = vec![
        Case {
            name: "ready endpoints, no hints: all ready for cluster, ready local ones for local",
            rule: "semantics 6, 8: cluster = ready endpoints; local = ready endpoints on this node",
            zone: Some("zone-1"),
            endpoints: vec![ep("10.0.0.1", NODE, READY), ep("10.0.0.2", "node-b", READY)],
            family: IpFamily::V4,
            cluster: &["10.0.0.1", "10.0.0.2"],
            local: &["10.0.0.1"],
            has_endpoints: true,
        },
        Case {
            name: "not-ready endpoints are excluded while some are ready",
            rule: "semantics 6: cluster-policy endpoints are the ready ones",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", "node-b", READY),
                ep("10.0.0.2", "node-b", NOT_READY),
                ep("10.0.0.3", "node-b", TERMINATING),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "no ready endpoint: fall back to serving and terminating ones",
            rule: "semantics 6 / KEP-1669: with 0 ready endpoints, use serving+terminating",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", "node-b", TERMINATING),
                ep("10.0.0.2", "node-b", NOT_SERVING),
                ep("10.0.0.3", "node-b", NOT_READY),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "endpoints that are not serving are never used",
            rule: "semantics 9: not serving means never used; no usable endpoint means REJECT (semantics 14)",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", NODE, NOT_SERVING),
                ep("10.0.0.2", "node-b", NOT_READY),
            ],
            family: IpFamily::V4,
            cluster: &[],
            local: &[],
            has_endpoints: false,
        },
        Case {
            name: "ready but not serving (inconsistent slice) is still not used",
            rule: "semantics 9: endpoints that are not serving are never used",
            zone: None,
            endpoints: vec![ep("10.0.0.1", NODE, (true, false, false))],
            family: IpFamily::V4,
            cluster: &[],
            local: &[],
            has_endpoints: false,
        },
        Case {
            name: "no local ready endpoint: local falls back to local serving+terminating",
            rule: "semantics 8: local = local ready, else local serving+terminating",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", NODE, TERMINATING),
                ep("10.0.0.2", "node-b", READY),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.2"],
            local: &["10.0.0.1"],
            has_endpoints: true,
        },
        Case {
            name: "a local ready endpoint hides local terminating ones",
            rule: "semantics 8: the fallback applies only when no local endpoint is ready",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", NODE, TERMINATING),
                ep("10.0.0.2", NODE, READY),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.2"],
            local: &["10.0.0.2"],
            has_endpoints: true,
        },
        Case {
            name: "endpoints exist but none local: local empty, has_endpoints true (DROP)",
            rule: "semantics 15: endpoints exist but none fit a Local policy -> DROP, not REJECT",
            zone: None,
            endpoints: vec![ep("10.0.0.1", "node-b", READY)],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "no endpoint at all: has_endpoints false (REJECT)",
            rule: "semantics 14: no endpoint at all -> REJECT",
            zone: None,
            endpoints: vec![],
            family: IpFamily::V4,
            cluster: &[],
            local: &[],
            has_endpoints: false,
        },
        Case {
            name: "an endpoint with no node name is never local",
            rule: "semantics 4: local when nodeName equals this node's name",
            zone: None,
            endpoints: vec![ep("10.0.0.1", "", READY)],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "zone hints on every ready endpoint, one for this zone: filter to it",
            rule: "semantics 7 / KEP-2433: all ready endpoints hinted and one matches this zone",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", READY)
                },
                Ep {
                    zones: z2,
                    ..ep("10.0.0.2", "node-c", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "one ready endpoint without a hint disables zone filtering",
            rule: "semantics 7: hints apply only when every ready endpoint has one",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", READY)
                },
                ep("10.0.0.2", "node-c", READY),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1", "10.0.0.2"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "no hint matches this zone: no filtering",
            rule: "semantics 7: hints apply only when one matches this node's zone",
            zone: Some("zone-3"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", READY)
                },
                Ep {
                    zones: z2,
                    ..ep("10.0.0.2", "node-c", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1", "10.0.0.2"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "node zone unknown: zone hints ignored",
            rule: "semantics 7: the zone is this node's topology.kubernetes.io/zone; none, no match",
            zone: None,
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", READY)
                },
                Ep {
                    zones: z2,
                    ..ep("10.0.0.2", "node-c", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1", "10.0.0.2"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "only ready endpoints count for hints: an unhinted not-ready one does not disable them",
            rule: "semantics 7: the topology filter considers only ready endpoints",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", READY)
                },
                Ep {
                    zones: z2,
                    ..ep("10.0.0.2", "node-c", READY)
                },
                ep("10.0.0.3", "node-c", NOT_READY),
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "node hints on every ready endpoint, one for this node: they win over zone hints",
            rule: "semantics 7 / KEP-3015 PreferSameNode: node hints first",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    nodes: &[NODE],
                    ..ep("10.0.0.1", NODE, READY)
                },
                Ep {
                    zones: z1,
                    nodes: &["node-b"],
                    ..ep("10.0.0.2", "node-b", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &["10.0.0.1"],
            has_endpoints: true,
        },
        Case {
            name: "node hints match no endpoint here: zone hints apply",
            rule: "semantics 7: otherwise, zone hints when all carry them and one matches",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    nodes: &["node-b"],
                    ..ep("10.0.0.1", "node-b", READY)
                },
                Ep {
                    zones: z2,
                    nodes: &["node-c"],
                    ..ep("10.0.0.2", "node-c", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "hints do not filter the terminating fallback",
            rule: "semantics 6: the fallback takes all serving+terminating endpoints, ignoring topology",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z1,
                    ..ep("10.0.0.1", "node-b", TERMINATING)
                },
                Ep {
                    zones: z2,
                    ..ep("10.0.0.2", "node-c", TERMINATING)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.1", "10.0.0.2"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "local policy ignores topology hints",
            rule: "semantics 8: local-policy endpoints are all local ready endpoints",
            zone: Some("zone-1"),
            endpoints: vec![
                Ep {
                    zones: z2,
                    ..ep("10.0.0.1", NODE, READY)
                },
                Ep {
                    zones: z1,
                    ..ep("10.0.0.2", "node-b", READY)
                },
            ],
            family: IpFamily::V4,
            cluster: &["10.0.0.2"],
            local: &["10.0.0.1"],
            has_endpoints: true,
        },
        Case {
            name: "dual stack, IPv6: selected on its own (all terminating there)",
            rule: "semantics 5: each IP family is handled on its own",
            zone: None,
            endpoints: vec![
                ep("10.0.0.1", "node-b", READY),
                ep("fd00::1", "node-b", TERMINATING),
                ep("fd00::2", "node-b", NOT_READY),
            ],
            family: IpFamily::V6,
            cluster: &["fd00::1"],
            local: &[],
            has_endpoints: true,
        },
        Case {
            name: "dual stack, a family with no endpoint rejects on its own",
            rule: "semantics 5 and 14: a family with no usable endpoint has none, whatever the other",
            zone: None,
            endpoints: vec![ep("10.0.0.1", "node-b", READY)],
            family: IpFamily::V6,
            cluster: &[],
            local: &[],
            has_endpoints: false,
        },
    ];

    for case in cases {
        let view = project(case.zone, &case.endpoints, svc());
        let ctx = format!("case {:?} ({})", case.name, case.rule);
        assert_eq!(
            ips(view.cluster_endpoints(case.family)),
            parse(case.cluster),
            "cluster set, {ctx}"
        );
        assert_eq!(
            ips(view.local_endpoints(case.family)),
            parse(case.local),
            "local set, {ctx}"
        );
        assert_eq!(
            view.has_endpoints(case.family),
            case.has_endpoints,
            "has_endpoints, {ctx}"
        );
        // Endpoints in neither set are in the view when they serve (a
        // sink tells an endpoint that drains from one that left), and
        // only then.
        let serving: std::collections::BTreeSet<std::net::IpAddr> = case
            .endpoints
            .iter()
            .filter(|e| e.cond.1)
            .filter_map(|e| e.ip.parse().ok())
            .collect();
        for e in &view.endpoints {
            assert!(e.used() || serving.contains(&e.ip()), "{e:?}: {ctx}");
        }
        for ip in serving {
            let family = IpFamily::of(&ip);
            assert!(
                view.endpoints.iter().any(|e| e.ip() == ip) || family != case.family,
                "{ip} serves and is missing: {ctx}"
            );
        }
    }
}

#[test]
fn internal_traffic_policy_local_uses_local_endpoints_for_cluster_ip() {
    // semantics 10: ClusterIP traffic uses local-policy endpoints when
    // internalTrafficPolicy is Local; external traffic is not affected.
    let endpoints = [ep("10.0.0.1", NODE, READY), ep("10.0.0.2", "node-b", READY)];
    let mut service = svc();
    service.internal_traffic_policy = TrafficPolicy::Local as i32;
    let view = project(None, &endpoints, service);
    assert_eq!(
        ips(view.internal_endpoints(IpFamily::V4)),
        parse(&["10.0.0.1"])
    );
    assert_eq!(
        ips(view.external_endpoints(IpFamily::V4)),
        parse(&["10.0.0.1", "10.0.0.2"])
    );
}

#[test]
fn external_traffic_policy_local_uses_local_endpoints_for_external_traffic() {
    // semantics 11: external traffic from outside goes only to local-policy
    // endpoints under externalTrafficPolicy Local; ClusterIP traffic is not
    // affected.
    let endpoints = [ep("10.0.0.1", NODE, READY), ep("10.0.0.2", "node-b", READY)];
    let mut service = svc();
    service.external_traffic_policy = TrafficPolicy::Local as i32;
    let view = project(None, &endpoints, service);
    assert_eq!(
        ips(view.external_endpoints(IpFamily::V4)),
        parse(&["10.0.0.1"])
    );
    assert_eq!(
        ips(view.internal_endpoints(IpFamily::V4)),
        parse(&["10.0.0.1", "10.0.0.2"])
    );
}
