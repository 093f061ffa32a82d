//! The scale world of kpng-testkit (the mix of Service kinds, policies,
//! conditions and families that the benches run at 100k Services) loads
//! whole: every object translates, nothing is skipped, and what reaches
//! the store is the mix the world says it holds.

use kpng_kube::{Ingest, IngestConfig};
use kpng_model::v1::{ServiceType, TrafficPolicy};
use kpng_store::Store;
use kpng_testkit::world::World;

#[test]
fn the_scale_world_loads_whole_with_its_mix() {
    let world = World {
        services: 1_300,
        endpoints_per_service: 120,
        nodes: 40,
        ..World::wide()
    };
    let mut text = Vec::new();
    world.write_list(&mut text).expect("written");
    let text = String::from_utf8(text).expect("utf-8");
    let mut ingest = Ingest::new(Store::new(), IngestConfig::for_node("node-0"));
    ingest
        .load_str("world.json", &text)
        .expect("the world loads");
    assert_eq!(ingest.stats().errors, 0, "no object failed to translate");

    let snapshot = ingest.reader().snapshot();
    let services: Vec<_> = snapshot.services().map(|(_, s)| s.clone()).collect();
    assert_eq!(services.len(), 1_300);
    let count =
        |f: &dyn Fn(&kpng_model::v1::Service) -> bool| services.iter().filter(|s| f(s)).count();
    // Services 0..1,200 are a third each ClusterIP, NodePort, LoadBalancer.
    assert_eq!(count(&|s| s.r#type == ServiceType::NodePort as i32), 400);
    assert_eq!(
        count(&|s| s.r#type == ServiceType::LoadBalancer as i32),
        400
    );
    assert_eq!(
        count(&|s| s.external_traffic_policy == TrafficPolicy::Local as i32),
        200
    );
    assert_eq!(
        count(&|s| s.internal_traffic_policy == TrafficPolicy::Local as i32),
        65
    );
    assert_eq!(count(&|s| s.client_ip_affinity.is_some()), 13);
    assert_eq!(count(&|s| s.load_balancer_source_ranges.is_some()), 100);
    assert_eq!(count(&|s| s.traffic_distribution == "PreferClose"), 130);
    assert_eq!(
        count(&|s| s.cluster_ips.as_ref().is_some_and(|ips| ips.v6.len() == 1)),
        13
    );
    assert_eq!(count(&|s| s.ports.len() == 2), 434);

    // Every endpoint arrived, the 120 of a Service from two slices.
    let endpoints: usize = snapshot
        .service_names()
        .map(|name| snapshot.endpoints(name).len())
        .sum();
    assert_eq!(endpoints, world.endpoints());
    assert_eq!(snapshot.nodes().count(), 40);
}
