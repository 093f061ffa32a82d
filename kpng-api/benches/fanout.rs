//! Fan-out: one server, many watching agents, one endpoint change.
//!
//! The server holds 10k Services × 10 endpoints (100 nodes) and serves
//! them on a unix socket. The agents run in a child process (multiplexed,
//! 100 streams per connection) and watch 100 distinct node names. To keep
//! the setup in minutes, agents start by resuming from the server's current
//! revision (each node's projection is computed once and shared, as for
//! agents resuming after a reconnect); one agent's full initial transfer is
//! measured on its own. Then one endpoint changes, and each agent records
//! when it received that revision's `sync`.
//!
//! ```text
//! cargo bench -p kpng-api --bench fanout [-- --clients 1000,5000 --services 10000]
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kpng_api::{Address, Server, bind_unix, connect, serve};
use kpng_model::Kind;
use kpng_model::v1::{WatchRequest, watch_event::Event};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use prost::Message as _;

const NODES: usize = 100;
const STREAMS_PER_CONNECTION: usize = 100;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    if let Some(socket) = arg("--client") {
        return client(&PathBuf::from(socket));
    }
    let services: usize = arg("--services")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let counts: Vec<usize> = arg("--clients")
        .unwrap_or_else(|| "1000,5000".into())
        .split(',')
        .filter_map(|v| v.parse().ok())
        .collect();

    let cluster = Cluster::synthetic(ClusterShape {
        services,
        endpoints: services * 10,
        nodes: NODES,
        zones: 3,
    });
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_synced(Kind::Service);
    store.mark_synced(Kind::Endpoint);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let socket = std::env::temp_dir().join(format!("kpng-fanout-{}.sock", std::process::id()));
    let server = Server::new(store.reader());
    let listener = runtime.block_on(async { bind_unix(&socket) }).unwrap();
    runtime.spawn(serve(listener, server.clone()));

    // One agent's full initial transfer.
    let (full_ms, full_bytes) = runtime.block_on(async {
        let start = Instant::now();
        let mut client = connect(&Address::Unix(socket.clone())).await.unwrap();
        let mut stream = client
            .watch(WatchRequest {
                node: "node-1".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut bytes = 0;
        loop {
            let m = stream.message().await.unwrap().unwrap();
            bytes += m.encoded_len();
            if matches!(m.event, Some(Event::Sync(_))) {
                break;
            }
        }
        (start.elapsed().as_secs_f64() * 1e3, bytes)
    });
    println!("kpng-api fan-out, {services} services x 10 endpoints, {NODES} nodes, unix socket");
    println!(
        "one agent's full initial view: {:.1} MB in {full_ms:.0} ms",
        full_bytes as f64 / 1e6
    );

    for (flip, clients) in counts.into_iter().enumerate() {
        let revision = store.revision();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--client", socket.to_str().unwrap()])
            .args(["--clients", &clients.to_string()])
            .args(["--instance", &server.instance().to_string()])
            .args(["--revision", &revision.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().unwrap().unwrap();
        assert_eq!(ready, "ready", "{ready}");
        // One endpoint change.
        let (name, ip, mut ep) = cluster.endpoints[(flip * 7919) % cluster.endpoints.len()].clone();
        ep.ready = !ep.ready;
        ep.serving = ep.ready;
        let t0 = now_ns();
        let mut txn = store.begin();
        txn.set_endpoint(name, ip, ep);
        txn.commit();
        let mut latencies = Vec::new();
        let mut bytes = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line == "done" {
                break;
            }
            let mut words = line.split_whitespace();
            let at: u128 = words.next().unwrap().parse().unwrap();
            let b: usize = words.next().unwrap().parse().unwrap();
            latencies.push((at.saturating_sub(t0)) as f64 / 1e6);
            bytes.push(b);
        }
        let _ = child.wait();
        latencies.sort_by(f64::total_cmp);
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        let avg_bytes = bytes.iter().sum::<usize>() as f64 / bytes.len().max(1) as f64;
        let goal = if clients <= 1000 {
            "p99 <= 100 ms"
        } else {
            "p99 <= 1 s"
        };
        println!(
            "{clients:>5} agents: one endpoint change applied by all: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms  [{goal}]; {avg_bytes:.0} bytes per agent for the change; server RSS {:.0} MiB (peak {:.0} MiB)",
            pct(0.5),
            pct(0.99),
            latencies.last().copied().unwrap_or(0.0),
            rss_kib("VmRSS:") as f64 / 1024.0,
            rss_kib("VmHWM:") as f64 / 1024.0,
        );
        println!(
            "{{\"clients\":{clients},\"p50_ms\":{:.2},\"p99_ms\":{:.2},\"bytes_per_agent\":{avg_bytes:.0},\"server_rss_mib\":{:.0}}}",
            pct(0.5),
            pct(0.99),
            rss_kib("VmRSS:") as f64 / 1024.0
        );
    }
    let _ = std::fs::remove_file(&socket);
}

/// The agents: `--clients` streams resuming from `--revision`; prints
/// `ready` once all hold it, then per agent the time it got the next
/// revision's sync and the bytes it received for it, then `done`.
fn client(socket: &Path) {
    let clients: usize = arg("--clients").unwrap().parse().unwrap();
    let instance: u64 = arg("--instance").unwrap().parse().unwrap();
    let revision: u64 = arg("--revision").unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let address = Address::Unix(socket.to_owned());
        let mut channels = Vec::new();
        for _ in 0..clients.div_ceil(STREAMS_PER_CONNECTION) {
            channels.push(connect(&address).await.unwrap());
        }
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(u128, usize)>();
        for i in 0..clients {
            let mut client = channels[i / STREAMS_PER_CONNECTION].clone();
            let (ready_tx, done_tx) = (ready_tx.clone(), done_tx.clone());
            tokio::spawn(async move {
                let mut stream = client
                    .watch(WatchRequest {
                        node: format!("node-{}", i % NODES),
                        since_revision: revision,
                        since_instance: instance,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let mut bytes = 0;
                let mut held = false;
                while let Ok(Some(m)) = stream.message().await {
                    if held {
                        bytes += m.encoded_len();
                    }
                    match m.event {
                        Some(Event::Reset(_)) => panic!("agent {i} was reset"),
                        Some(Event::Sync(r)) if r == revision && !held => {
                            held = true;
                            let _ = ready_tx.send(());
                        }
                        Some(Event::Sync(r)) if r > revision => {
                            let _ = done_tx.send((now_ns(), bytes));
                            break;
                        }
                        _ => {}
                    }
                }
            });
        }
        for _ in 0..clients {
            ready_rx.recv().await.unwrap();
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready").unwrap();
        out.flush().unwrap();
        drop(out);
        let mut results = Vec::with_capacity(clients);
        for _ in 0..clients {
            match tokio::time::timeout(Duration::from_secs(60), done_rx.recv()).await {
                Ok(Some(r)) => results.push(r),
                _ => break,
            }
        }
        let mut out = std::io::stdout().lock();
        for (at, bytes) in results {
            writeln!(out, "{at} {bytes}").unwrap();
        }
        writeln!(out, "done").unwrap();
    });
}
