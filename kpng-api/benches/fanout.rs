//! Fan-out: one server, thousands of watchers of distinct nodes.
//!
//! Per node count N (default 100, 1,000 and 10,000), in one run:
//!
//! 1. **Cold start.** A server process loads 10k Services × 10 endpoints
//!    spread over N nodes (each endpoint on a node drawn by a hash, so a
//!    node owns endpoints of many Services) and serves them on a unix
//!    socket. A watcher process opens N streams, one per node (100 per
//!    connection), each with nothing held: every watcher gets its node's
//!    full view, decodes it and drops it. Printed: the time until all are
//!    synced, the bytes of one view and of all, the server's RSS, and the
//!    CPU time (user + system) the server spent from then until all were
//!    synced, and the watcher process's (both per node too).
//! 2. **One change.** One endpoint changes; printed: p50 / p99 of the time
//!    until every watcher has its sync, and the bytes per watcher.
//! 3. **Restart.** The server is killed and a new one starts on the same
//!    content at other revision numbers; the watchers reconnect naming
//!    what they hold. Printed: resets, bytes per watcher, time until all
//!    are synced again, the new server's RSS.
//!
//! Then, at the largest N, 10 watchers re-read whole views of distinct
//! nodes in a loop for 30 s; printed: the server's RSS before and after.
//!
//! The server and the watchers are child processes, so each RSS is the
//! server's own. The watchers decode every message as the agent does
//! (`run_agent`): the generated (prost) types, then the agent's decoder
//! (`codec::compact::Decoder::batch_grouped`, one per stream, renewed
//! once the full view is in) into view ops, which they drop. With `--build-views` they also build the node
//! view from them as the agent does (`NodeView::apply`,
//! `NodeView::set_endpoints`), dropped once whole with the decoder's
//! shared copies (10,000 views would not fit side by side; later changes
//! are then decoded only). With `--decode none` they only receive:
//! each message whole, its event kind read and its changes skipped by
//! their length. That times the server's delivery to every node, which
//! on a real fleet is what bounds the cold start (each agent decodes its
//! own view on its own node, in parallel), and not this one process
//! decoding 10,000 views on the same cores. They ask for
//! endpoints in columns (`WatchRequest.endpoint_columns`), as the agent
//! does; `--endpoints messages` asks for one `CompactEndpoint` each
//! instead (what other clients get). The watcher process allocates with
//! mimalloc (its default options), as kpng's agents do (the `kpng`
//! binary's default `mimalloc` feature); `--watcher-malloc glibc` gives
//! it the system's allocator. The server and this process keep the
//! system's (glibc), as in the figures before.
//!
//!
//! With `--report`, each watcher also reports each sync as the agent does
//! (on a report stream, `Enls/Reports`, opened beside its watch on its
//! connection; with `--report-calls` one `Enls/Report` call each, as
//! agents did before; spawned, not awaited by the stream, after a wait
//! up to 1 s spread over the nodes, saying how long it waited), and after
//! the change the bench waits until the server's
//! fleet view shows every node up to date, then times one `Enls/Fleet`
//! call (the fleet view the command reads) and prints its size and the
//! server's p50/p99 of the change.
//!
//! ```text
//! cargo bench -p kpng-api --bench fanout [-- --nodes 100,1000,10000 --services 10000 --reread-seconds 30 --endpoints columns|messages --decode agent|none --build-views --watcher-malloc mimalloc|glibc --report [--report-calls]]
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// Set (by this bench) in the watcher process's environment: it then
/// allocates with mimalloc.
const WATCHER_MIMALLOC: &std::ffi::CStr = c"KPNG_FANOUT_WATCHER_MIMALLOC";

/// The allocator of each process of the bench, chosen at its first
/// allocation: mimalloc in the watcher process when its environment says
/// so, the system's otherwise.
struct Allocator;

/// 0: not chosen yet, 1: the system's, 2: mimalloc.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

fn mimalloc() -> bool {
    match CHOSEN.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: reads the environment, which nothing changes in
            // these processes; allocates nothing.
            #[allow(unsafe_code)]
            let on = unsafe { !libc::getenv(WATCHER_MIMALLOC.as_ptr()).is_null() };
            CHOSEN.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

// SAFETY: every call goes to the one allocator chosen for the process,
// before its first allocation, for its lifetime.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if mimalloc() {
                mimalloc::MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe {
            if mimalloc() {
                mimalloc::MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe {
            if mimalloc() {
                mimalloc::MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe {
            if mimalloc() {
                mimalloc::MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// The watcher process's allocator: `mimalloc` (the agent's) or `glibc`.
fn watcher_malloc() -> String {
    arg("--watcher-malloc").unwrap_or_else(|| "mimalloc".into())
}

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kpng_api::codec::compact::{Decoded, Decoder};
use kpng_api::{Server, bind_unix, connect_unix, connect_unix_channel, serve};
use kpng_model::Kind;
use kpng_model::v1::enls_client::EnlsClient;
use kpng_model::v1::{NodeReport, ViewChanges, WatchRequest, watch_event::Event};
use kpng_model::view::NodeView;
use kpng_store::Store;
use kpng_testkit::Cluster;
use prost::Message as _;
use tonic::transport::Channel;

const STREAMS_PER_CONNECTION: usize = 100;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Whether the watchers decode the changes as the agent does (`--decode
/// agent`, the default) or only receive them (`--decode none`: each
/// message's event kind is read, the changes skipped by their length).
fn decode() -> bool {
    arg("--decode").is_none_or(|d| d != "none")
}

/// Whether the watchers report each sync as agents do (`--report`).
fn reports() -> bool {
    std::env::args().any(|a| a == "--report")
}

/// Whether the reports go one call each (`--report-calls`) instead of on
/// a stream.
fn report_calls() -> bool {
    std::env::args().any(|a| a == "--report-calls")
}

/// Whether the watchers build each node view from the ops they decode.
fn build_views() -> bool {
    std::env::args().any(|a| a == "--build-views")
}

/// How the watchers ask for endpoints: `columns` (the agent's way) or
/// `messages`.
fn endpoints_form() -> String {
    arg("--endpoints").unwrap_or_else(|| "columns".into())
}

fn num(name: &str, default: usize) -> usize {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// CPU time (user + system, all threads) of process `pid` so far, in
/// seconds, from /proc/PID/stat (clock ticks of 1/100 s: `CLK_TCK` is 100
/// on Linux).
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (in parentheses, which may hold spaces):
    // state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    (fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0)) as f64 / 100.0
}

/// `field` of /proc/PID/status, in MiB.
fn rss_mib(pid: u32, field: &str) -> f64 {
    kpng_testkit::proc_status_kib(Some(pid), field) as f64 / 1024.0
}

fn main() {
    if let Some(socket) = arg("--server") {
        return server(&PathBuf::from(socket));
    }
    if let Some(socket) = arg("--client") {
        return watchers(&PathBuf::from(socket));
    }
    if let Some(socket) = arg("--reread") {
        return reread(&PathBuf::from(socket));
    }
    let services = num("--services", 10_000);
    let counts: Vec<usize> = arg("--nodes")
        .unwrap_or_else(|| "100,1000,10000".into())
        .split(',')
        .filter_map(|v| v.parse().ok())
        .collect();
    let reread_seconds = num("--reread-seconds", 30);
    let socket = std::env::temp_dir().join(format!("kpng-fanout-{}.sock", std::process::id()));
    println!(
        "kpng-api fan-out: {services} services x 10 endpoints, N distinct nodes, N watchers (one per node, {}, endpoints as {}, {}{}), unix socket",
        match (decode(), build_views()) {
            (false, _) => "receiving each view, its changes not decoded",
            (true, true) => "decoding as the agent and building the view",
            (true, false) => "decoding as the agent",
        },
        endpoints_form(),
        watcher_malloc(),
        match (reports(), report_calls()) {
            (false, _) => "",
            (true, false) => ", reporting each sync on a stream",
            (true, true) => ", reporting each sync, one call each",
        }
    );
    let mut per_node_rss = Vec::new();
    for &nodes in &counts {
        let (mut server, mut to_server, mut from_server) =
            spawn_server(&socket, services, nodes, 0, 0);
        let server_cpu0 = cpu_s(server.id());
        let mut watchers = Command::new(std::env::current_exe().unwrap())
            .args(["--client", socket.to_str().unwrap()])
            .args(["--nodes", &nodes.to_string()])
            .args(["--endpoints", &endpoints_form()])
            .args(["--decode", if decode() { "agent" } else { "none" }])
            .args(build_views().then_some("--build-views"))
            .args(reports().then_some("--report"))
            .args(report_calls().then_some("--report-calls"))
            .envs(
                (watcher_malloc() == "mimalloc")
                    .then_some((WATCHER_MIMALLOC.to_str().unwrap(), "1")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watchers.stdout.take().unwrap()).lines();
        let mut next = || lines.next().unwrap().unwrap();

        // 1. Cold start.
        let synced = next();
        let w: Vec<f64> = synced
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect();
        let (ms, bytes, resets) = (w[0], w[1], w[2]);
        let (cold_s, view_mb) = (ms / 1e3, bytes / nodes as f64 / 1e6);
        let server_cpu = cpu_s(server.id()) - server_cpu0;
        let watcher_cpu = cpu_s(watchers.id());
        let rss = rss_mib(server.id(), "VmRSS:");
        let hwm = rss_mib(server.id(), "VmHWM:");
        per_node_rss.push((nodes, rss));
        println!("N = {nodes}");
        println!(
            "  cold start: all {nodes} synced in {:.1} s; {:.2} MB per view, {:.0} MB in all; {resets:.0} resets; server RSS {rss:.0} MiB (peak {hwm:.0} MiB)  [goal at 10,000: <= 1,536 MiB, <= 120 s]",
            ms / 1e3,
            bytes / nodes as f64 / 1e6,
            bytes / 1e6,
        );
        println!(
            "  cold start CPU: server {server_cpu:.1} s ({:.2} ms per node); watcher process {watcher_cpu:.1} s ({:.2} ms per node)",
            server_cpu * 1e3 / nodes as f64,
            watcher_cpu * 1e3 / nodes as f64,
        );

        // 2. One endpoint change.
        let cpu_before_change = cpu_s(server.id());
        writeln!(to_server, "flip").unwrap();
        let t0: u128 = from_server.next().unwrap().unwrap().parse().unwrap();
        let mut latencies = Vec::new();
        let change_bytes: f64 = loop {
            let line = next();
            if let Some(b) = line.strip_prefix("changed ") {
                break b.parse().unwrap();
            }
            let at: u128 = line.parse().unwrap();
            latencies.push(at.saturating_sub(t0) as f64 / 1e6);
        };
        latencies.sort_by(f64::total_cmp);
        let change_cpu = cpu_s(server.id()) - cpu_before_change;
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        println!(
            "  one endpoint change reaching every watcher: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.0} bytes per watcher; server CPU {:.0} ms ({:.1} us per node)",
            pct(0.5),
            pct(0.99),
            latencies.last().copied().unwrap_or(0.0),
            change_bytes / nodes as f64,
            change_cpu * 1e3,
            change_cpu * 1e6 / nodes as f64,
        );

        if reports() {
            fleet_figures(&socket, nodes, &pct);
            let with_reports = cpu_s(server.id()) - cpu_before_change;
            println!(
                "  server CPU from the change until every node's report was taken: {:.0} ms ({:.1} us per node; the fleet view polled every 100 ms meanwhile)",
                with_reports * 1e3,
                with_reports * 1e6 / nodes as f64,
            );
        }

        // 3. Restart onto the same content at other revision numbers.
        server.kill().unwrap();
        let _ = server.wait();
        let (mut server, to_server, _from) = spawn_server(&socket, services, nodes, 3, 1);
        let resumed = next();
        let w: Vec<f64> = resumed
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect();
        let (ms, bytes, restart_resets) = (w[0], w[1], w[2]);
        println!(
            "  server restart: {restart_resets:.0} resets, {:.0} bytes per watcher, all synced {:.1} s after the first reconnect; new server RSS {:.0} MiB  [goal: 0 resets, < 1 KB]",
            bytes / nodes as f64,
            ms / 1e3,
            rss_mib(server.id(), "VmRSS:"),
        );
        println!(
            "{{\"nodes\":{nodes},\"cold_start_s\":{cold_s:.2},\"view_mb\":{view_mb:.3},\"server_rss_mib\":{rss:.0},\"server_cpu_ms_per_node\":{:.2},\"watcher_cpu_ms_per_node\":{:.2},\"change_p50_ms\":{:.2},\"change_p99_ms\":{:.2},\"restart_resets\":{restart_resets:.0},\"restart_bytes_per_watcher\":{:.0}}}",
            server_cpu * 1e3 / nodes as f64,
            watcher_cpu * 1e3 / nodes as f64,
            pct(0.5),
            pct(0.99),
            bytes / nodes as f64,
        );
        drop(to_server);
        let _ = watchers.kill();
        let _ = watchers.wait();
        server.kill().unwrap();
        let _ = server.wait();
    }
    for pair in per_node_rss.windows(2) {
        let ((n1, r1), (n2, r2)) = (pair[0], pair[1]);
        println!(
            "server RSS per further distinct node, N {n1} -> {n2}: {:.3} MiB  [goal: <= 0.25 MiB]",
            (r2 - r1) / (n2 - n1) as f64
        );
    }

    // 10 watchers re-reading whole views in a loop.
    let nodes = counts.iter().copied().max().unwrap_or(100);
    let (mut server, to_server, _from) = spawn_server(&socket, services, nodes, 0, 0);
    let before = rss_mib(server.id(), "VmRSS:");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--reread", socket.to_str().unwrap()])
        .args(["--nodes", &nodes.to_string()])
        .args(["--seconds", &reread_seconds.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let after = rss_mib(server.id(), "VmRSS:");
    println!(
        "10 watchers re-reading whole views for {reread_seconds} s ({}): server RSS {before:.0} -> {after:.0} MiB (+{:.0} MiB)  [goal: <= +64 MiB]",
        String::from_utf8_lossy(&out.stdout).trim(),
        after - before
    );
    drop(to_server);
    server.kill().unwrap();
    let _ = server.wait();
    let _ = std::fs::remove_file(&socket);
}

/// With `--report`: waits until the fleet view shows every node up to
/// date with the change, then times one `Enls/Fleet` call (every node
/// listed, as `fleet --all` asks).
fn fleet_figures(socket: &Path, nodes: usize, watchers: &dyn Fn(f64) -> f64) {
    use kpng_model::v1::FleetRequest;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = EnlsClient::new(connect_unix_channel(socket).await.unwrap());
        let waited = Instant::now();
        let all = FleetRequest {
            all: true,
            ..FleetRequest::default()
        };
        let reply = loop {
            let reply = client
                .fleet(FleetRequest::default())
                .await
                .unwrap()
                .into_inner();
            if reply.up_to_date as usize == nodes && reply.last_change_applied as usize == nodes {
                break reply;
            }
            if waited.elapsed() > Duration::from_secs(120) {
                println!(
                    "  fleet view: after 120 s, {} of {nodes} nodes up to date, the change applied by {}  [goal: all]",
                    reply.up_to_date, reply.last_change_applied
                );
                break reply;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let t = Instant::now();
        let listed = client.fleet(all).await.unwrap().into_inner();
        let all_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let behind = client
            .fleet(FleetRequest::default())
            .await
            .unwrap()
            .into_inner();
        let behind_ms = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "  fleet view: {} nodes, {} up to date; the change's programming latency by the server: p50 {:.1} ms, p99 {:.1} ms (the watchers' receipt: p50 {:.1} ms, p99 {:.1} ms); Fleet call listing every node {all_ms:.1} ms, {} bytes; listing the nodes behind ({}) {behind_ms:.1} ms",
            reply.nodes,
            reply.up_to_date,
            reply.last_change_p50_seconds * 1e3,
            reply.last_change_p99_seconds * 1e3,
            watchers(0.5),
            watchers(0.99),
            prost::Message::encoded_len(&listed),
            behind.listed.len(),
        );
    });
}

type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;

/// Starts a server process and waits until it serves.
fn spawn_server(
    socket: &Path,
    services: usize,
    nodes: usize,
    skew: usize,
    flips: usize,
) -> (Child, ChildStdin, Lines) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--server", socket.to_str().unwrap()])
        .args(["--services", &services.to_string()])
        .args(["--nodes", &nodes.to_string()])
        .args(["--skew", &skew.to_string()])
        .args(["--flips", &flips.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    (child, stdin, lines)
}

/// The server process: loads the cluster, makes `--skew` changes that
/// are undone (other revision numbers, same content), serves, and on each
/// `flip` line from stdin changes one endpoint and prints the time.
fn server(socket: &Path) {
    let services = num("--services", 10_000);
    let nodes = num("--nodes", 100);
    let cluster = Cluster::fanout(services, nodes);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    let (name, endpoint) = cluster.endpoints[12_345 % cluster.endpoints.len()].clone();
    drop(cluster);
    let flipped = |ready: bool| endpoint.with_conditions(ready, ready, false);
    // Other revision numbers, the same content: changes made and undone.
    for _ in 0..num("--skew", 0) {
        for ready in [false, true] {
            let mut txn = store.begin();
            txn.set_endpoint(name.clone(), flipped(ready));
            txn.commit();
        }
    }
    // The state after `--flips` flips of the endpoint.
    let mut ready = true;
    for _ in 0..num("--flips", 0) {
        ready = !ready;
        let mut txn = store.begin();
        txn.set_endpoint(name.clone(), flipped(ready));
        txn.commit();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(async { bind_unix(socket) }).unwrap();
    runtime.spawn(serve(listener, Server::new(store.reader())));
    println!("ready");
    for line in std::io::stdin().lines() {
        if line.unwrap() == "flip" {
            ready = !ready;
            let t0 = now_ns();
            let mut txn = store.begin();
            txn.set_endpoint(name.clone(), flipped(ready));
            txn.commit();
            println!("{t0}");
        }
    }
}

/// Connections shared by the watchers, 100 streams each, replaced when
/// the server goes away.
struct Pool {
    socket: PathBuf,
    slots: Vec<tokio::sync::Mutex<(u64, Option<Channel>)>>,
}

impl Pool {
    /// The connection of group `g`; a new one when the one of generation
    /// `failed` broke.
    async fn get(&self, g: usize, failed: Option<u64>) -> (u64, Channel) {
        let mut slot = self.slots[g].lock().await;
        if slot.1.is_none() || failed == Some(slot.0) {
            loop {
                match connect_unix_channel(&self.socket).await {
                    Ok(client) => {
                        *slot = (slot.0 + 1, Some(client));
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        (slot.0, slot.1.clone().unwrap())
    }
}

/// What a watcher reports.
enum Report {
    Synced { bytes: usize, reset: bool },
    Changed { at: u128, bytes: usize },
    Resumed { bytes: usize, reset: bool },
}

/// The watcher process: one stream per node; reports the cold start, the
/// change and the resume after a restart, each when every watcher got it.
fn watchers(socket: &Path) {
    let nodes = num("--nodes", 100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let pool = Arc::new(Pool {
            socket: socket.to_owned(),
            slots: (0..nodes.div_ceil(STREAMS_PER_CONNECTION))
                .map(|_| tokio::sync::Mutex::new((0, None)))
                .collect(),
        });
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Report>();
        let start = Instant::now();
        for i in 0..nodes {
            let (pool, tx) = (pool.clone(), tx.clone());
            tokio::spawn(async move { watch(i, &pool, &tx).await });
        }
        let mut out = std::io::stdout();
        let (mut bytes, mut resets, mut first_reconnect) = (0usize, 0usize, None);
        let mut phase = [0usize; 3];
        while let Some(report) = rx.recv().await {
            match report {
                Report::Synced { bytes: b, reset } => {
                    bytes += b;
                    resets += usize::from(reset);
                    phase[0] += 1;
                    if phase[0] == nodes {
                        writeln!(
                            out,
                            "synced {} {bytes} {resets}",
                            start.elapsed().as_millis()
                        )
                        .unwrap();
                        (bytes, resets) = (0, 0);
                    }
                }
                Report::Changed { at, bytes: b } => {
                    writeln!(out, "{at}").unwrap();
                    bytes += b;
                    phase[1] += 1;
                    if phase[1] == nodes {
                        writeln!(out, "changed {bytes}").unwrap();
                        bytes = 0;
                    }
                }
                Report::Resumed { bytes: b, reset } => {
                    let since: &mut Instant = first_reconnect.get_or_insert_with(Instant::now);
                    bytes += b;
                    resets += usize::from(reset);
                    phase[2] += 1;
                    if phase[2] == nodes {
                        writeln!(
                            out,
                            "resumed {} {bytes} {resets}",
                            since.elapsed().as_millis()
                        )
                        .unwrap();
                        return;
                    }
                }
            }
            out.flush().unwrap();
        }
    });
}

/// A watcher's reports: on one stream opened on its connection, as the
/// agent sends them, or one call each (`--report-calls`).
#[derive(Clone)]
enum Reporter {
    Stream(tokio::sync::mpsc::Sender<NodeReport>),
    Calls(EnlsClient<tonic::transport::Channel>),
}

impl Reporter {
    fn new(mut client: EnlsClient<tonic::transport::Channel>) -> Self {
        if report_calls() {
            return Reporter::Calls(client);
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let _ = client
                .reports(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await;
        });
        Reporter::Stream(tx)
    }

    async fn send(&self, report: NodeReport) {
        match self {
            Reporter::Stream(tx) => {
                let _ = tx.send(report).await;
            }
            Reporter::Calls(client) => {
                let _ = client.clone().report(report).await;
            }
        }
    }
}

/// One watcher: its node's full view, the next revision, then (after the
/// server goes away) a resume naming what it holds.
async fn watch(i: usize, pool: &Pool, tx: &tokio::sync::mpsc::UnboundedSender<Report>) {
    let group = i / STREAMS_PER_CONNECTION;
    let mut held = WatchRequest {
        node: format!("node-{i}"),
        endpoint_columns: endpoints_form() == "columns",
        ..Default::default()
    };
    let mut failed = None;
    let mut syncs = 0;
    let build = build_views();
    loop {
        let (generation, channel) = pool.get(group, failed).await;
        let reporter = reports().then(|| Reporter::new(EnlsClient::new(channel.clone())));
        let Ok(mut stream) = Events::open(channel, held.clone()).await else {
            failed = Some(generation);
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let (mut bytes, mut reset, mut instance, mut digest) = (0, false, 0, Vec::new());
        // What the agent holds: its decoder and the view the changes build.
        let (mut decoder, mut view) = (Decoder::new(), NodeView::default());
        while let Some((size, event)) = stream.next().await {
            bytes += size;
            match event {
                Some(Event::Reset(_)) => {
                    reset = true;
                    (decoder, view) = (Decoder::new(), NodeView::default());
                }
                // Received, not decoded (`--decode none`).
                Some(Event::Changes(_)) if !decode() => {}
                Some(Event::Changes(changes)) => decoder
                    .batch_grouped::<kpng_model::Error>(changes, |decoded| {
                        if !build || syncs > 0 {
                            // Decoded only (the view dropped).
                            return Ok(());
                        }
                        match decoded {
                            Decoded::Op(op) => view.apply(&op),
                            Decoded::Endpoints(name, endpoints) => {
                                view.set_endpoints(&name, endpoints)
                            }
                        }
                    })
                    .unwrap(),
                Some(Event::Instance(id)) => instance = id,
                Some(Event::Digest(d)) => digest = d,
                Some(Event::Sync(revision)) => {
                    decoder.end_round();
                    // Built: what a sink would take. Dropped here (10,000
                    // views would not fit beside each other); later
                    // changes are decoded, not applied.
                    std::hint::black_box(&view);
                    view = NodeView::default();
                    // And the decoder's shared copies of what the view
                    // held (a node's worth: 10,000 held here would take
                    // gigabytes).
                    if syncs == 0 {
                        decoder = Decoder::new();
                    }
                    if let Some(reporter) = &reporter {
                        // As the agent: the report is not awaited by the
                        // stream, and waits up to 1 s (spread over the
                        // nodes), saying how long.
                        let reporter = reporter.clone();
                        let mut report = NodeReport {
                            node: held.node.clone(),
                            instance,
                            revision,
                            ..NodeReport::default()
                        };
                        let ended = Instant::now();
                        let wait = ((i as u64).wrapping_mul(2_654_435_761) ^ revision) % 1000;
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(wait)).await;
                            report.held_ms = ended.elapsed().as_millis() as u32;
                            reporter.send(report).await;
                        });
                    }
                    held.since_instance = instance;
                    held.since_revision = revision;
                    held.since_digest = std::mem::take(&mut digest);
                    syncs += 1;
                    let report = match syncs {
                        1 => Report::Synced { bytes, reset },
                        2 => Report::Changed {
                            at: now_ns(),
                            bytes,
                        },
                        _ => {
                            let _ = tx.send(Report::Resumed { bytes, reset });
                            return;
                        }
                    };
                    let _ = tx.send(report);
                    (bytes, reset) = (0, false);
                }
                _ => {}
            }
        }
        failed = Some(generation);
    }
}

/// A watch stream as the watchers read it: each message's size on the
/// wire and its event, the changes decoded (the agent's way) or, with
/// `--decode none`, skipped (an empty [`ViewChanges`] stands for them).
enum Events {
    Decoded(tonic::Streaming<kpng_model::v1::WatchEvent>),
    Received(tonic::Streaming<(usize, Skim)>),
}

impl Events {
    async fn open(channel: Channel, request: WatchRequest) -> Result<Self, tonic::Status> {
        if decode() {
            let response = EnlsClient::new(channel).watch(request).await?;
            return Ok(Self::Decoded(response.into_inner()));
        }
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let path =
            tonic::codegen::http::uri::PathAndQuery::from_static("/kpng.model.v1.Enls/Watch");
        let response = grpc
            .server_streaming(tonic::Request::new(request), path, SkimCodec)
            .await?;
        Ok(Self::Received(response.into_inner()))
    }

    async fn next(&mut self) -> Option<(usize, Option<Event>)> {
        match self {
            Self::Decoded(stream) => {
                let message = stream.message().await.ok()??;
                Some((message.encoded_len(), message.event))
            }
            Self::Received(stream) => {
                let (size, skim) = stream.message().await.ok()??;
                let event = match skim {
                    Skim { reset: Some(r), .. } => Event::Reset(r),
                    Skim { sync: Some(s), .. } => Event::Sync(s),
                    Skim {
                        instance: Some(i), ..
                    } => Event::Instance(i),
                    Skim {
                        digest: Some(d), ..
                    } => Event::Digest(d),
                    _ => Event::Changes(ViewChanges::default()),
                };
                Some((size, Some(event)))
            }
        }
    }
}

/// A `WatchEvent` with its changes (field 2) left out: prost skips them
/// by their length.
#[derive(Clone, PartialEq, prost::Message)]
struct Skim {
    #[prost(bool, optional, tag = "1")]
    reset: Option<bool>,
    #[prost(uint64, optional, tag = "3")]
    sync: Option<u64>,
    #[prost(uint64, optional, tag = "4")]
    instance: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "5")]
    digest: Option<Vec<u8>>,
}

/// The codec of a stream of [`Skim`]s, each with its size on the wire.
struct SkimCodec;

impl tonic::codec::Codec for SkimCodec {
    type Encode = WatchRequest;
    type Decode = (usize, Skim);
    type Encoder = tonic_prost::ProstEncoder<WatchRequest>;
    type Decoder = SkimDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(tonic::codec::BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        SkimDecoder
    }
}

struct SkimDecoder;

impl tonic::codec::Decoder for SkimDecoder {
    type Item = (usize, Skim);
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        use bytes::Buf as _;
        let size = buf.remaining();
        let skim = Skim::decode(buf).map_err(|e| tonic::Status::internal(e.to_string()))?;
        Ok(Some((size, skim)))
    }
}

/// `--watchers` (10) watchers reading whole views of distinct nodes in a
/// loop for `--seconds`; prints how many views and bytes.
fn reread(socket: &Path) {
    let nodes = num("--nodes", 100);
    let watchers = num("--watchers", 10);
    let seconds = num("--seconds", 30) as u64;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (views, bytes) = runtime.block_on(async move {
        let client = connect_unix(socket).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let tasks: Vec<_> = (0..watchers)
            .map(|w| {
                let mut client = client.clone();
                tokio::spawn(async move {
                    let (mut views, mut bytes) = (0usize, 0usize);
                    while Instant::now() < deadline {
                        let node = format!("node-{}", (views * watchers + w) % nodes);
                        let mut stream = client
                            .watch(WatchRequest {
                                node,
                                ..Default::default()
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        while let Ok(Some(m)) = stream.message().await {
                            bytes += m.encoded_len();
                            if matches!(m.event, Some(Event::Sync(_))) {
                                break;
                            }
                        }
                        views += 1;
                    }
                    (views, bytes)
                })
            })
            .collect();
        let (mut views, mut bytes) = (0, 0);
        for task in tasks {
            let (v, b) = task.await.unwrap();
            views += v;
            bytes += b;
        }
        (views, bytes)
    });
    println!("{views} views, {:.0} MB", bytes as f64 / 1e6);
}
