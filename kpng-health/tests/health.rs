//! The health servers over real sockets on loopback.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kpng_health::{HealthCheckServer, ProxyHealth, serve_healthz};
use kpng_model::EndpointInfo;
use kpng_model::v1::{Service, ServiceType, TrafficPolicy};
use kpng_model::view::{EndpointView, ViewOp};
use kpng_sink::{FullState, IncrementalSink};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path`; the status and the JSON body, or `None` when refused.
async fn get(port: u16, path: &str) -> Option<(u16, serde_json::Value)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1)?;
    Some((status, serde_json::from_str(body).ok()?))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn lb(port: u16) -> Arc<Service> {
    Arc::new(Service {
        namespace: "shop".into(),
        name: "front".into(),
        r#type: ServiceType::LoadBalancer as i32,
        external_traffic_policy: TrafficPolicy::Local as i32,
        health_check_node_port: u32::from(port),
        ..Default::default()
    })
}

fn endpoint(ip: &str, local: bool) -> EndpointView {
    let ip = ip.parse().expect("ip");
    EndpointView::at(EndpointInfo::new(ip), ip)
        .expect("its address")
        .with_is_local(local)
        .with_cluster(true)
        .with_local(local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_ports_follow_the_view_and_the_proxy() {
    let port = free_port();
    let health = ProxyHealth::new(Duration::from_millis(200));
    let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
    let mut sink = FullState::new(HealthCheckServer::new(vec![loopback], health.clone()));
    let svc = lb(port);
    let name = svc.service_name();

    // A local ready endpoint and a synced proxy: 200.
    sink.reset();
    sink.apply(&ViewOp::SetService(svc.clone())).expect("op");
    sink.apply(&ViewOp::SetEndpoint(
        name.clone(),
        endpoint("10.244.1.10", true),
    ))
    .expect("op");
    sink.apply(&ViewOp::SetEndpoint(
        name.clone(),
        endpoint("10.244.2.10", false),
    ))
    .expect("op");
    health.synced();
    sink.sync(1).expect("sync");
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["service"]["namespace"], "shop");
    assert_eq!(body["service"]["name"], "front");
    assert_eq!(body["localEndpoints"], 1);
    assert_eq!(body["serviceProxyHealthy"], true);

    // The local endpoint goes: 503, same listener, no restart.
    sink.apply(&ViewOp::DeleteEndpoint(
        name.clone(),
        "10.244.1.10".parse().expect("ip"),
    ))
    .expect("op");
    sink.sync(2).expect("sync");
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(
        (status, body["localEndpoints"].clone()),
        (503, 0.into()),
        "{body}"
    );

    // A local endpoint again, but the proxy is stuck: 503 and unhealthy.
    sink.apply(&ViewOp::SetEndpoint(
        name.clone(),
        endpoint("10.244.1.11", true),
    ))
    .expect("op");
    sink.sync(3).expect("sync");
    assert_eq!(get(port, "/").await.expect("served").0, 200);
    health.queued();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["serviceProxyHealthy"], false);

    // The Service goes: the port closes.
    sink.apply(&ViewOp::DeleteService(name)).expect("op");
    sink.sync(4).expect("sync");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(get(port, "/").await.is_none(), "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_stale_syncs() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let health = ProxyHealth::new(Duration::from_millis(100));
    tokio::spawn(serve_healthz(listener, health.clone()));

    assert_eq!(
        get(port, "/healthz").await.expect("served").0,
        503,
        "before the first sync"
    );
    health.queued();
    health.synced();
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert!(body["lastUpdated"].is_u64());
    assert_eq!(get(port, "/livez").await.expect("served").0, 200);
    // A change waits past the timeout: unhealthy until the next sync.
    health.queued();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(port, "/healthz").await.expect("served").0, 503);
    health.synced();
    assert_eq!(get(port, "/healthz").await.expect("served").0, 200);
    assert_eq!(get(port, "/metrics-not-here").await.expect("served").0, 404);
}
