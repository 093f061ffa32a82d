//! The testkit's scale world (the mix the scale bench runs at 100k
//! Services) reaches one node the same from the API as from a file: the
//! test apiserver pages its lists as a real one does, and `kpng kube` and
//! `kpng file` give node-0 the same view.

use std::process::Command;

use kpng_testkit::apiserver::ApiServer;
use kpng_testkit::world::World;

/// `kpng ARGS … to-file --output OUT --once`'s view of node-0, as JSON,
/// its revision number left out (it counts the source's changes).
fn view(dir: &std::path::Path, name: &str, args: &[&str]) -> serde_json::Value {
    let out = dir.join(name);
    let run = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(args)
        .args([
            "--node", "node-0", "to-file", "--once", "--format", "json", "--output",
        ])
        .arg(&out)
        .output()
        .expect("kpng runs");
    assert!(
        run.status.success(),
        "kpng {args:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(out).expect("the view was written");
    let mut view: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    if let Some(v) = view.as_object_mut() {
        v.remove("revision");
    }
    view
}

#[test]
fn the_scale_world_from_the_api_and_from_a_file_gives_node_0_one_view() {
    let world = World {
        services: 1_250,
        endpoints_per_service: 12,
        nodes: 30,
        ..World::wide()
    };
    let dir = std::env::temp_dir().join(format!("kpng-world-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");

    let file = dir.join("world.json");
    world
        .write_list(std::fs::File::create(&file).expect("file"))
        .expect("written");
    let from_file = view(
        &dir,
        "file.json",
        &["file", "--input", file.to_str().expect("path")],
    );

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = runtime.block_on(ApiServer::start(world.script()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let from_api = view(
        &dir,
        "api.json",
        &["kube", "--kubeconfig", kubeconfig.to_str().expect("path")],
    );

    // The lists were paged: 1,250 Services and 1,263 slices at the
    // client's 500 a page.
    let pages = server
        .requests()
        .iter()
        .filter(|r| !r.contains("watch=true") && r.contains("continue="))
        .count();
    assert!(pages >= 4, "{:?}", server.requests());

    let services = |v: &serde_json::Value| v["services"].as_object().map_or(0, |s| s.len());
    assert_eq!(services(&from_file), 1_250);
    assert!(from_api == from_file, "the views differ");
    // The view holds node-0's endpoints and the mix.
    let text = from_file.to_string();
    for what in [
        "\"fd00:96::",
        "\"PreferClose\"",
        "\"203.0.113.0/24\"",
        "\"timeoutSeconds\":10800",
        "\"hintZones\"",
        "\"isLocal\":true",
    ] {
        assert!(text.contains(what), "{what} in the view");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
