//! The health servers over real sockets on loopback.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kpng_health::{HealthCheckServer, ProxyHealth, serve_healthz};
use kpng_model::EndpointInfo;
use kpng_model::v1::{Service, ServiceType, TrafficPolicy};
use kpng_model::view::{EndpointView, NodeView, ServiceView};
use kpng_sink::{Round, Sink, SinkExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path`; the status and the JSON body, or `None` when refused.
async fn get(port: u16, path: &str) -> Option<(u16, serde_json::Value)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
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

fn lb(port: u16) -> Arc<kpng_model::ServiceInfo> {
    Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "shop".into(),
            name: "front".into(),
            r#type: ServiceType::LoadBalancer as i32,
            external_traffic_policy: TrafficPolicy::Local as i32,
            health_check_node_port: u32::from(port),
            ..Default::default()
        })
        .expect("valid"),
    )
}

fn endpoint(ip: &str, local: bool) -> EndpointView {
    let ip = ip.parse().expect("ip");
    EndpointView::at(EndpointInfo::new(ip), ip)
        .expect("its address")
        .with_is_local(local)
        .with_cluster(true)
        .with_local(local)
}

/// `view` with `svc` and its `endpoints` set, at `revision`.
fn with_service(
    view: &NodeView,
    revision: u64,
    svc: &Arc<kpng_model::ServiceInfo>,
    endpoints: Vec<EndpointView>,
) -> NodeView {
    let mut next = NodeView {
        revision,
        ..view.clone()
    };
    next.services.insert(
        svc.service_name(),
        Arc::new(ServiceView {
            service: svc.clone(),
            endpoints,
        }),
    );
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_ports_follow_the_view_and_the_proxy() {
    let port = free_port();
    let health = ProxyHealth::new(Duration::from_millis(200));
    let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
    let mut sink = HealthCheckServer::new(vec![loopback], health.clone());
    let svc = lb(port);
    let name = svc.service_name();

    // A local ready endpoint and a synced proxy: 200.
    let empty = NodeView::default();
    let v1 = with_service(
        &empty,
        1,
        &svc,
        vec![
            endpoint("10.244.1.10", true),
            endpoint("10.244.2.10", false),
        ],
    );
    health.synced();
    sink.sync(&Round::full(&v1)).expect("sync");
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["service"]["namespace"], "shop");
    assert_eq!(body["service"]["name"], "front");
    assert_eq!(body["localEndpoints"], 1);
    assert_eq!(body["serviceProxyHealthy"], true);

    // The local endpoint goes: 503, same listener, no restart.
    let v2 = with_service(&v1, 2, &svc, vec![endpoint("10.244.2.10", false)]);
    sink.sync(&Round::between(&v1, &v2)).expect("sync");
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(
        (status, body["localEndpoints"].clone()),
        (503, 0.into()),
        "{body}"
    );

    // A local endpoint again, but the proxy is stuck: 503 and unhealthy.
    let v3 = with_service(
        &v2,
        3,
        &svc,
        vec![
            endpoint("10.244.1.11", true),
            endpoint("10.244.2.10", false),
        ],
    );
    sink.sync(&Round::between(&v2, &v3)).expect("sync");
    assert_eq!(get(port, "/").await.expect("served").0, 200);
    health.queued();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = get(port, "/").await.expect("served");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["serviceProxyHealthy"], false);

    // The Service goes: the port closes.
    let mut v4 = NodeView {
        revision: 4,
        ..v3.clone()
    };
    v4.services.remove(&name);
    sink.sync(&Round::between(&v3, &v4)).expect("sync");
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

/// Reads one response on a kept-alive connection: status, headers (lower
/// case) and body, by its Content-Length (none for HEAD).
async fn read_response(
    stream: &mut tokio::net::TcpStream,
    head_only: bool,
) -> (u16, Vec<(String, String)>, String) {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read");
        assert_eq!(n, 1, "closed mid-head: {}", String::from_utf8_lossy(&bytes));
        bytes.push(byte[0]);
    }
    let head = String::from_utf8(bytes).expect("utf-8");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .expect("content-length");
    let mut body = vec![0u8; if head_only { 0 } else { length }];
    stream.read_exact(&mut body).await.expect("body");
    (status, headers, String::from_utf8(body).expect("utf-8"))
}

/// What issue #16 found by hand: a request split across two writes, HEAD,
/// several requests on one connection, and methods other than GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_takes_split_requests_head_and_keep_alive() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let health = ProxyHealth::new(Duration::from_secs(60));
    health.queued();
    health.synced();
    tokio::spawn(serve_healthz(listener, health.clone()));
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");

    // The head in two writes, apart in time.
    stream.write_all(b"GET /heal").await.expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream
        .write_all(b"thz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write");
    let (status, headers, body) = read_response(&mut stream, false).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.contains(&("content-type".into(), "application/json".into())));
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(json["lastUpdated"].is_u64(), "{json}");

    // HEAD on the same connection: the GET's headers, no body.
    stream
        .write_all(b"HEAD /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write");
    let (status, headers, body) = read_response(&mut stream, true).await;
    assert_eq!(status, 200);
    assert!(body.is_empty());
    let length = headers.iter().find(|(k, _)| k == "content-length");
    assert!(length.is_some_and(|(_, v)| v != "0"), "{headers:?}");

    // Still the same connection: a third request, and a POST refused.
    stream
        .write_all(b"GET /livez HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_response(&mut stream, false).await.0, 200);
    stream
        .write_all(b"POST /healthz HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n")
        .await
        .expect("write");
    let (status, headers, _) = read_response(&mut stream, false).await;
    assert_eq!(status, 405);
    assert!(headers.contains(&("allow".into(), "GET, HEAD".into())));
}

/// KEP-3836: while this node is going away (its object carries the
/// autoscaler's taint or a deletion time: `Node::terminating`), `/healthz`
/// answers 503 and `/livez` still 200; it comes back when the node does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_turns_unhealthy_while_the_node_goes_away() {
    use kpng_health::Healthy;
    use kpng_model::v1::Node;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let health = ProxyHealth::new(Duration::from_secs(60));
    tokio::spawn(serve_healthz(listener, health.clone()));
    let mut sink = Noop.with(Healthy::new(health.clone()));
    let node = |revision, terminating| NodeView {
        revision,
        node: Some(Arc::new(Node {
            name: "node-a".into(),
            terminating,
            ..Default::default()
        })),
        ..Default::default()
    };
    let (v1, v2, v3) = (node(1, false), node(2, true), node(3, false));
    sink.sync(&Round::full(&v1)).expect("sync");
    assert_eq!(get(port, "/healthz").await.expect("served").0, 200);

    sink.sync(&Round::between(&v1, &v2)).expect("sync");
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["nodeEligible"], false, "{body}");
    assert_eq!(get(port, "/livez").await.expect("served").0, 200);

    sink.sync(&Round::between(&v2, &v3)).expect("sync");
    assert_eq!(get(port, "/healthz").await.expect("served").0, 200);
}

/// A sink that does nothing.
struct Noop;

impl Sink for Noop {
    fn sync(&mut self, _round: &Round<'_>) -> Result<(), kpng_sink::SinkError> {
        Ok(())
    }
}

/// A named readiness condition, set from outside the data plane (kpng's
/// `node`: no Node object has this node's name), turns `/healthz` to 503
/// with its reason in the body, `/livez` staying 200; cleared, `/healthz`
/// is 200 again. Conditions given to `Companions` reach the server it
/// starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_condition_holds_healthz_at_503_until_cleared() {
    use kpng_health::{Companions, Conditions};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let conditions = Conditions::default();
    conditions.set("node", "no Node named node-c (known: node-a, node-b)");
    let mut sink = Companions::new()
        .healthz(listener, Duration::from_secs(60))
        .conditions(conditions.clone())
        .around(Noop);
    let view = NodeView {
        revision: 1,
        ..Default::default()
    };
    sink.sync(&Round::full(&view)).expect("sync");

    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["healthy"], false);
    assert_eq!(
        body["conditions"]["node"],
        "no Node named node-c (known: node-a, node-b)"
    );
    assert_eq!(get(port, "/livez").await.expect("served").0, 200);

    conditions.clear("node");
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["conditions"], serde_json::json!({}));
}

/// While the input is held back (a mass deletion the guard refused),
/// `/healthz` answers 503 with the reason in the body, `/livez` still 200
/// (a restart would not help); it comes back when the hold ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_turns_unhealthy_while_the_input_is_held_back() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let health = ProxyHealth::new(Duration::from_secs(60));
    tokio::spawn(serve_healthz(listener, health.clone()));
    health.synced();
    assert_eq!(get(port, "/healthz").await.expect("served").0, 200);

    health.set_held_back(Some(
        "the input would delete every Service (12 -> 0)".into(),
    ));
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["heldBack"], "the input would delete every Service (12 -> 0)",
        "{body}"
    );
    assert_eq!(get(port, "/livez").await.expect("served").0, 200);

    health.set_held_back(None);
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert!(body.get("heldBack").is_none(), "{body}");
}

/// Companions around a backend: a follower receives each round the
/// backend applied, after it, and none it failed; `/healthz` turns
/// healthy with the first round the backend applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn companions_follow_the_rounds_the_backend_applied() {
    use std::sync::Mutex;
    /// Records the revisions it syncs, failing the first `fail` of them.
    struct Shared(Arc<Mutex<Vec<(&'static str, u64)>>>, &'static str, usize);
    impl Sink for Shared {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), kpng_sink::SinkError> {
            self.0
                .lock()
                .expect("lock")
                .push((self.1, round.revision()));
            if self.2 > 0 {
                self.2 -= 1;
                return Err(kpng_sink::SinkError::backend(self.1, "told to fail"));
            }
            Ok(())
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::default();
    let companions = kpng_health::Companions::new()
        .healthz(listener, Duration::from_secs(60))
        .follower(Shared(Arc::clone(&seen), "follower", 0));
    let health = companions.proxy_health().expect("healthz set");
    let mut sink = companions.around(Shared(Arc::clone(&seen), "backend", 1));
    let view = |revision| NodeView {
        revision,
        ..Default::default()
    };
    assert!(sink.sync(&Round::full(&view(1))).is_err());
    assert!(!health.healthy());
    assert_eq!(get(port, "/healthz").await.expect("served").0, 503);
    sink.sync(&Round::full(&view(2))).expect("sync");
    assert_eq!(
        *seen.lock().expect("lock"),
        [("backend", 1), ("backend", 2), ("follower", 2)]
    );
    assert_eq!(get(port, "/healthz").await.expect("served").0, 200);
}

/// A degraded input (objects of the manifest skipped) is shown at
/// `/healthz` under `"degraded"`, which stays 200: the proxy serves every
/// Service it was given; cleared, the detail goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_input_is_shown_at_healthz_which_stays_healthy() {
    use kpng_health::{Companions, Conditions};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let conditions = Conditions::default();
    let mut sink = Companions::new()
        .healthz(listener, Duration::from_secs(60))
        .conditions(conditions.clone())
        .around(Noop);
    let view = NodeView {
        revision: 1,
        ..Default::default()
    };
    sink.sync(&Round::full(&view)).expect("sync");
    conditions.set_degraded(
        "input",
        "1 object skipped: Service t/lb, document 0: spec.type: …",
    );
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["healthy"], true);
    assert_eq!(
        body["degraded"]["input"],
        "1 object skipped: Service t/lb, document 0: spec.type: …"
    );
    conditions.clear_degraded("input");
    let (status, body) = get(port, "/healthz").await.expect("served");
    assert_eq!(status, 200, "{body}");
    assert!(body.get("degraded").is_none(), "{body}");
}
