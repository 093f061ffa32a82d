//! Peak RSS and time of the `kpng` command syncing 10k Services × 10
//! endpoints from the API: a test apiserver on loopback serves the lists,
//! and `kpng kube … to-nft --once --dry-run` runs as a child process; so
//! does `kpng file --input F … --dry-run` on the same cluster written as
//! one JSON `List`, and an agent streaming from `kpng kube … to-api`. As
//! root, `kpng kube … to-nft --once` also programs a network namespace the
//! benchmark makes (and deletes), with the apiserver in it: the real
//! sync, the kernel transaction included. The peak is `wait4`'s, over
//! kpng and any child it ran.
//!
//! ```text
//! cargo bench -p kpng-cli --bench rss [-- --services N]
//! ```
//!
//! `KPNG_RSS_FLAGS` (whitespace-separated) is added to every `to-nft`
//! command line it measures: `KPNG_RSS_FLAGS=--nft-comments=false` measures without
//! the comments naming the Services.
#![allow(unsafe_code, missing_docs, clippy::unwrap_used)]

mod support;

use std::process::{Command, Stdio};

use kpng_testkit::apiserver::{Reply, Resource, Script};
use serde_json::json;
use support::{ApiServerProcess, peak};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().skip_while(|a| *a != name).nth(1).cloned();
    let services: usize = arg("--services")
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    if let Some(path) = arg("--write") {
        return write_list(services, &path);
    }
    match arg("--serve") {
        Some(kubeconfig) => serve(services, &kubeconfig),
        None => measure(services),
    }
}

/// The cluster: its Services, their EndpointSlices (10 endpoints each,
/// on 100 nodes), and node-0.
fn cluster(
    services: usize,
) -> (
    Vec<serde_json::Value>,
    Vec<serde_json::Value>,
    serde_json::Value,
) {
    let mut svcs = Vec::new();
    let mut slices = Vec::new();
    for i in 0..services {
        let (ns, name) = (format!("ns-{}", i % 50), format!("svc-{i}"));
        // In 10.96.0.0/12: valid past 65,535 Services too (the third
        // octet wrapped into 256 there, an address a file refuses).
        let k = i + 1;
        let ip = format!("10.{}.{}.{}", 96 + k / 65536, (k / 256) % 256, k % 256);
        svcs.push(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": "1"},
            "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}));
        let eps: Vec<_> = (0..10)
            .map(|j| {
                let n = i * 10 + j + 1;
                json!({"addresses": [format!("10.{}.{}.{}", 128 + n / 65536, (n / 256) % 256, n % 256)],
                       "conditions": {"ready": true}, "nodeName": format!("node-{}", n % 100)})
            })
            .collect();
        slices.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"namespace": ns, "name": format!("{name}-x"), "resourceVersion": "1",
                "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "endpoints": eps, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}));
    }
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.1"}]}});
    (svcs, slices, node)
}

/// Writes the cluster as one JSON `List`, as `kubectl get ... -o json`
/// does, in a process of its own (see [`serve`] for why).
fn write_list(services: usize, path: &str) {
    let (svcs, slices, node) = cluster(services);
    let items: Vec<_> = svcs.into_iter().chain(slices).chain([node]).collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(path, serde_json::to_vec(&list).unwrap()).unwrap();
}

/// The test apiserver, in a process of its own: a child's peak RSS as
/// `wait4` reports it includes the RSS of the process it was spawned from
/// (the kernel folds the old address space's high-water mark in at exec),
/// so the parent must stay small, not hold 10k × 10 objects.
fn serve(services: usize, kubeconfig: &str) {
    let mut script = Script::default();
    let (svcs, slices, node) = cluster(services);
    script.push(Resource::Services, false, Reply::List("1".into(), svcs));
    script.push(
        Resource::EndpointSlices,
        false,
        Reply::List("1".into(), slices),
    );
    script.push(Resource::Nodes, false, Reply::List("1".into(), vec![node]));
    support::serve(script, kubeconfig);
}

/// A test apiserver process serving the cluster of `services`.
fn start_apiserver(
    netns: Option<&str>,
    services: usize,
    kubeconfig: &std::path::Path,
) -> ApiServerProcess {
    ApiServerProcess::start_in(
        netns,
        &["--services", &services.to_string(), "--serve"],
        kubeconfig,
    )
}

fn measure(services: usize) {
    let dir = std::env::temp_dir().join(format!("kpng-rss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let apiserver = start_apiserver(None, services, &dir.join("kubeconfig"));
    let (rss_mib, secs) = peak(&[
        "kube",
        "--kubeconfig",
        &apiserver.kubeconfig,
        "--node",
        "node-0",
        "to-nft",
        "--once",
        "--dry-run",
    ]);
    let pages = apiserver.stop();
    println!(
        "kpng kube ... to-nft --once --dry-run, {services} services x 10 endpoints from a test apiserver"
    );
    println!("peak RSS: {rss_mib:.1} MiB  [<= 48 MiB; kube-proxy: 260 MiB at 10k x 2]");
    println!(
        "time to the first sync: {secs:.2} s ({pages} list requests, paged by the client's limit; decode, ingest, projection, rendering)"
    );
    println!("{{\"services\":{services},\"peak_rss_mib\":{rss_mib:.1},\"seconds\":{secs:.2}}}");

    // The same cluster from a file: `kubectl get ... -o json` output.
    let list = dir.join("cluster.json");
    let wrote = Command::new(std::env::current_exe().unwrap())
        .args(["--services", &services.to_string(), "--write"])
        .arg(&list)
        .status()
        .unwrap();
    assert!(wrote.success());
    let input = list.to_str().unwrap();
    let size = std::fs::metadata(&list).unwrap().len() as f64 / (1 << 20) as f64;
    let (file_mib, file_secs) = peak(&[
        "file",
        "--input",
        input,
        "--node",
        "node-0",
        "to-nft",
        "--once",
        "--dry-run",
    ]);
    println!(
        "kpng file --input cluster.json ({size:.1} MiB) ... to-nft --once --dry-run: peak RSS {file_mib:.1} MiB  [<= 64 MiB], {file_secs:.2} s"
    );
    println!("{{\"file_peak_rss_mib\":{file_mib:.1}}}");

    // An agent: `kpng kube … to-api` serves the same cluster (from a
    // fresh apiserver) on a unix socket; `kpng api … to-nft --once
    // --dry-run` streams node-0's view from it and renders it.
    let apiserver = start_apiserver(None, services, &dir.join("kubeconfig-api"));
    let socket = dir.join("api.sock");
    let listen = format!("unix://{}", socket.display());
    let mut api = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args([
            "kube",
            "--kubeconfig",
            &apiserver.kubeconfig,
            "to-api",
            "--listen",
            &listen,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (agent_mib, agent_secs) = peak(&[
        "api",
        "--api",
        &listen,
        "--node",
        "node-0",
        "to-nft",
        "--once",
        "--dry-run",
    ]);
    let _ = api.kill();
    let _ = api.wait();
    apiserver.stop();
    println!(
        "agent: kpng api ... to-nft --once --dry-run from a kpng kube ... to-api server: peak RSS {agent_mib:.1} MiB  [<= 48 MiB], {agent_secs:.2} s to its first sync (the server's initial lists included)"
    );
    println!("{{\"agent_peak_rss_mib\":{agent_mib:.1}}}");

    if unsafe { libc::geteuid() } == 0 {
        applied(services, &dir);
        ebpf(input);
    } else {
        println!("applied: SKIPPED (not root: the real sync needs a network namespace)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real sync: `kpng kube … to-nft --once` programs a namespace of its
/// own over netlink, from an apiserver in that namespace.
fn applied(services: usize, dir: &std::path::Path) {
    let (mib, secs, elements) = support::applied_from_api(
        env!("CARGO_BIN_EXE_kpng"),
        |ns| start_apiserver(Some(ns), services, &dir.join("kubeconfig-ns")),
        "vip-cluster",
    );
    println!(
        "applied: kpng kube ... to-nft --once into a fresh namespace, over netlink: peak RSS {mib:.1} MiB (the whole process tree)  [<= 64 MiB; was 461 MiB with nft -f], {secs:.2} s to its first sync; {elements} pick elements read back"
    );
    println!("{{\"applied_peak_rss_mib\":{mib:.1},\"applied_seconds\":{secs:.2}}}");
}

/// The eBPF backend's real sync from the file (see
/// [`support::ebpf_from_file`]).
fn ebpf(input: &str) {
    let Some((mib, secs, kernel_mib)) = support::ebpf_from_file(input) else {
        return;
    };
    println!(
        "ebpf: kpng file --input cluster.json ... to-ebpf --once into a test cgroup and bpffs: peak RSS {mib:.1} MiB, {secs:.2} s; the pinned maps hold {kernel_mib:.1} MiB of kernel memory"
    );
    println!(
        "{{\"ebpf_peak_rss_mib\":{mib:.1},\"ebpf_seconds\":{secs:.2},\"ebpf_kernel_maps_mib\":{kernel_mib:.1}}}"
    );
}
