//! The testkit's scale world (the mix the scale bench runs at 100k
//! Services) reaches one node the same from the API as from a file: the
//! test apiserver pages its lists as a real one does, and `kpng kube` and
//! `kpng file` give node-0 the same view.

use std::process::Command;

use kpng_testkit::apiserver::ApiServer;
use kpng_testkit::world::World;

/// `kpng ARGS … to-file --output OUT --once`'s view of node-0, as YAML.
fn view(dir: &std::path::Path, name: &str, args: &[&str]) -> String {
    let out = dir.join(name);
    let run = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(args)
        .args(["--node", "node-0", "to-file", "--once", "--output"])
        .arg(&out)
        .output()
        .expect("kpng runs");
    assert!(
        run.status.success(),
        "kpng {args:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(out).expect("the view was written")
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
        "file.yaml",
        &["file", "--input", file.to_str().expect("path")],
    );

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let server = runtime.block_on(ApiServer::start(world.script()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).expect("kubeconfig");
    let from_api = view(
        &dir,
        "api.yaml",
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

    assert_eq!(from_api, from_file);
    // The view holds every Service, with node-0's endpoints and the mix.
    for what in [
        "name: svc-0\n",
        "name: svc-1249\n",
        "fd00:96::",
        "PreferClose",
        "203.0.113.0/24",
        "timeoutSeconds: 10800",
    ] {
        assert!(from_file.contains(what), "{what} in the view");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
