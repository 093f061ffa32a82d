//! The server/agent split end to end: a store fed from manifests is served
//! on a unix socket; an agent streams its node view and programs nft in
//! the lab's node namespace; real connections check each step. Run as
//! root; otherwise it prints SKIPPED and passes.

use std::time::Duration;

use kpng_api::{Address, AgentConfig, Server, bind_unix, run_agent, serve};
use kpng_backend_nft::NftBackend;
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_lab::scenarios::{ALL3, E3, lab, manifest, service};
use kpng_lab::{LabBackend, NODE, Settings, endpoints, require_lab, settle};
use kpng_store::Store;

#[test]
fn an_agent_programs_nft_from_the_server_and_follows_changes() {
    require_lab!(NftBackend);
    let lab = lab();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let _guard = runtime.enter();

    // The server side: manifests into a store, served on a socket.
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| service("web", &format!("{{clusterIP: 10.96.0.100, {port}}}"), eps);
    let load = |ingest: &mut Ingest, yaml: &str| {
        ingest.load(&file::parse_str("test.yaml", yaml).expect("manifest"));
    };
    load(&mut ingest, &manifest(&[web(ALL3)]));
    let path = std::env::temp_dir().join(format!("{}-api.sock", lab.prefix));
    let listener = bind_unix(&path).expect("bind");
    runtime.spawn(serve(listener, Server::new(ingest.reader())));

    // The agent side: its own nft backend in the lab's node.
    let backend = NftBackend::in_lab(&lab, &Settings::lab());
    let mut config = AgentConfig::default();
    config.retry = Duration::from_millis(50);
    let agent_path = path.clone();
    runtime.spawn(async move {
        let mut backend = backend;
        let _ = run_agent(&Address::Unix(agent_path), NODE, &mut backend, &config).await;
    });

    let wait_for = |want: &[&str]| {
        let want: std::collections::BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        for _ in 0..100 {
            settle();
            let lines = lab.connect("podc", "tcp", "10.96.0.100", 80, 20);
            if endpoints(&lines) == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the node never reached {want:?}");
    };
    wait_for(&[kpng_lab::scenarios::E1, kpng_lab::scenarios::E2, E3]);

    // A change on the server reaches the node through the agent.
    load(
        &mut ingest,
        &manifest(&[web("[{addresses: [10.244.3.10], nodeName: node-c}]")]),
    );
    wait_for(&[E3]);
    let _ = std::fs::remove_file(&path);
}
