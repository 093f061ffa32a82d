//! Loading kubectl's output of a big cluster: time and peak RSS.
//!
//! Generates `kubectl get services,endpointslices,nodes -A -o yaml
//! --show-managed-fields` of N Services × E endpoints (one EndpointSlice a
//! Service, 100 Nodes; see `tests/support/kubectl.rs`) as one `List`, as
//! one document an object, and as kubectl's JSON `List`, writes each to a
//! file, and loads each in a child process of its own (this binary with
//! `--load FILE`: read the file, then `Ingest::load_str`, as
//! `kpng file --input FILE` does before its backend starts). It prints the
//! file's size, the load time and the child's peak RSS (`wait4`), and, for
//! scale, the peak of a child that only reads the file.
//!
//! With `--raw`, the YAML is instead parsed by serde-saphyr alone into
//! one tree of values for the whole file, budget off: how the file source
//! read YAML before its items were decoded one at a time (for comparison;
//! the JSON row is then unchanged).
//!
//! ```text
//! cargo bench -p kpng-kube --bench yaml -- [--services 100000] [--endpoints 10] [--dir DIR] [--raw]
//! ```
#![allow(unsafe_code, missing_docs, clippy::unwrap_used)]

#[path = "../tests/support/kubectl.rs"]
mod kubectl;

use std::process::{Command, Stdio};
use std::time::Instant;

use kpng_kube::{Ingest, IngestConfig};
use kpng_store::Store;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().skip_while(|a| *a != name).nth(1).cloned();
    if let Some(path) = arg("--load") {
        let flag = |f: &str| args.iter().any(|a| a == f);
        return child(&path, flag("--read-only"), flag("--raw"));
    }
    let services: usize = arg("--services")
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let endpoints: usize = arg("--endpoints")
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let dir = std::path::PathBuf::from(arg("--dir").unwrap_or_else(|| {
        std::env::temp_dir()
            .join(format!("kpng-yaml-bench-{}", std::process::id()))
            .display()
            .to_string()
    }));
    std::fs::create_dir_all(&dir).unwrap();
    let raw = args.iter().any(|a| a == "--raw");
    let cluster = kubectl::Cluster::new(services, endpoints);
    println!(
        "kubectl's output of {services} Services × {endpoints} endpoints, {} Nodes",
        cluster.nodes
    );
    println!(
        "{:<34} {:>10} {:>10} {:>14}",
        "form", "file MiB", "load s", "peak RSS MiB"
    );
    type Make = fn(&kubectl::Cluster) -> String;
    let forms: [(&str, &str, Make); 3] = [
        ("YAML, one List", "list.yaml", kubectl::Cluster::yaml_list),
        (
            "YAML, one document an object",
            "docs.yaml",
            kubectl::Cluster::yaml_documents,
        ),
        ("JSON, one List", "list.json", kubectl::Cluster::json_list),
    ];
    for (form, file, make) in forms {
        let path = dir.join(file);
        let text = make(&cluster);
        let mib = text.len() as f64 / 1048576.0;
        std::fs::write(&path, &text).unwrap();
        drop(text);
        let path = path.display().to_string();
        let (_, rss_read) = run(&path, &["--read-only"]);
        let (secs, rss) = run(&path, if raw { &["--raw"] } else { &[] });
        println!(
            "{form:<34} {mib:>10.1} {secs:>10.2} {rss:>14.1}   (reading the file alone: {rss_read:.1} MiB)"
        );
        std::fs::remove_file(&path).unwrap();
    }
    let _ = std::fs::remove_dir(&dir);
}

/// Loads `path` as `kpng file --input` does, or only reads it.
fn child(path: &str, read_only: bool, raw: bool) {
    let text = std::fs::read_to_string(path).unwrap();
    if read_only {
        std::hint::black_box(&text);
        return;
    }
    if raw && !path.ends_with(".json") {
        let started = Instant::now();
        let options = serde_saphyr::options! { budget: None, with_snippet: false };
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple_with_options(&text, options).unwrap();
        println!("{} {}", started.elapsed().as_secs_f64(), docs.len());
        return;
    }
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    let started = Instant::now();
    ingest.load_str(path, &text).unwrap();
    let secs = started.elapsed().as_secs_f64();
    println!("{secs} {}", ingest.reader().snapshot().len());
}

/// Runs this binary with `--load path`: the load's time (as the child
/// measured it, reading excluded) and its peak RSS in MiB.
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which clippy cannot see
fn run(path: &str, flags: &[&str]) -> (f64, f64) {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    command.args(["--load", path]).args(flags);
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid for writes; `pid` is our child.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    assert_eq!(status, 0, "loading {path} failed");
    let secs = out
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    (secs, usage.ru_maxrss as f64 / 1024.0)
}
