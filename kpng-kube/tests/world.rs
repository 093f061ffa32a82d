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
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
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

/// A file of the world, read a chunk at a time (`load_file`), loads what
/// its text loads whole (`load_str`); the same file cut short is refused,
/// naming what is wrong, and applies nothing; a bad object in it is named
/// by its `List` item.
#[tokio::test]
async fn a_json_file_read_in_chunks_loads_what_its_whole_text_loads() {
    let world = World {
        services: 3_000,
        endpoints_per_service: 30,
        nodes: 20,
        ..World::wide()
    };
    let mut text = Vec::new();
    world.write_list(&mut text).expect("written");
    assert!(text.len() > 8 << 20, "more than two chunks: {}", text.len());
    let dir = std::env::temp_dir().join(format!("kpng-world-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("world.json");
    std::fs::write(&path, &text).expect("written");

    let state = |ingest: &Ingest| {
        let snapshot = ingest.reader().snapshot();
        let services: Vec<_> = snapshot.services().map(|(_, s)| s.clone()).collect();
        let endpoints: Vec<_> = snapshot
            .service_names()
            .map(|name| snapshot.endpoints(name).len())
            .collect();
        (services, endpoints)
    };
    let mut whole = Ingest::new(Store::new(), IngestConfig::default());
    whole
        .load_str("world.json", std::str::from_utf8(&text).expect("utf-8"))
        .expect("loads");
    let mut chunked = Ingest::new(Store::new(), IngestConfig::default());
    let revision = chunked.load_file(&path).await.expect("loads");
    assert!(revision.is_some());
    assert_eq!(state(&chunked), state(&whole));
    assert_eq!(chunked.reader().snapshot().services().count(), 3_000);

    // Cut short: refused, and the state is the one before.
    std::fs::write(&path, &text[..text.len() * 2 / 3]).expect("written");
    let before = chunked.reader().snapshot().revision();
    let err = chunked.load_file(&path).await.expect_err("refused");
    let message = err.to_string();
    assert!(
        message.contains("world.json") && message.contains("is the file whole?"),
        "{message}"
    );
    assert_eq!(chunked.reader().snapshot().revision(), before);
    assert_eq!(state(&chunked), state(&whole));

    // A bad object: skipped, named by its List item; the rest applied.
    let bad = String::from_utf8(text.clone()).expect("utf-8").replacen(
        "\"port\":",
        "\"port\":\"x\",\"was\":",
        1,
    );
    std::fs::write(&path, bad).expect("written");
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = reports.clone();
    let config = IngestConfig::default().on_input_report(move |r| {
        if let Ok(mut all) = seen.lock() {
            all.push(r.clone());
        }
    });
    let mut skipping = Ingest::new(Store::new(), config);
    skipping.load_file(&path).await.expect("applied");
    let report = reports.lock().expect("reports")[0].clone();
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert!(
        report.skipped[0].at.contains("List item"),
        "{:?}",
        report.skipped
    );
    assert!(skipping.reader().snapshot().services().count() >= 2_999);

    // An object with items that is no List: read whole, as its text.
    let other = r#"{"kind": "ServiceList", "items": [{"kind": "Service"}]}"#;
    std::fs::write(&path, other).expect("written");
    let streamed = chunked.load_file(&path).await.map_err(|e| e.to_string());
    let mut fresh = Ingest::new(Store::new(), IngestConfig::default());
    let direct = fresh
        .load_str(&path.display().to_string(), other)
        .map_err(|e| e.to_string());
    assert_eq!(streamed.is_ok(), direct.is_ok(), "{streamed:?} {direct:?}");
    if let (Err(a), Err(b)) = (&streamed, &direct) {
        assert_eq!(a, b);
    }
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}
