//! The server under hostile clients: its memory, and the change latency
//! of honest agents, without and with them, in one run.
//!
//! Processes: a server (10k Services × 10 endpoints by default, on a unix
//! socket, the default [`Limits`](kpng_api::Limits)), an agent process
//! running `--agents` (100) real agents (`run_agent`, one connection each,
//! as kpng's agents: reports, endpoints in columns), and hostile clients
//! in python3 (raw sockets, no gRPC library):
//!
//! 1. `--idle` (10,000) idle connections, each past its HTTP/2 preface and
//!    SETTINGS, then silent;
//! 2. `--never-reading` (100) watches of distinct nodes that open with the
//!    largest windows HTTP/2 allows and never read a byte;
//! 3. a stream of broken clients, `--garbage-per-s` (100) a second: an
//!    HTTP/1 request, random bytes, the preface then a malformed frame, a
//!    gRPC request declaring 4 GiB, a connection closed at once, and one
//!    held silent (closed by the server after 10 s).
//!
//! Printed: the server's RSS (`VmRSS`, the server is one process) and
//! open file descriptors loaded, with the agents, with each kind of
//! hostile client added, and after they left; the server's own counts
//! (`ServerStats`: connections, client faults, bytes unsent); the change
//! latency (one endpoint changed in the store → the round applied by
//! every agent: p50, p99, max over `--flips` (30) changes) before, during
//! and after the hostile clients, and the ratios; the lines the server
//! logged about them.
//!
//! ```text
//! cargo bench -p kpng-api --bench hostile [-- --agents 100 --services 10000 --idle 10000 --never-reading 100 --garbage-per-s 100 --flips 30]
//! ```
//!
//! The server needs a file descriptor per connection: `ulimit -n` above
//! the agents, idle and never-reading connections together (the python
//! clients raise their own soft limit to the hard one).
#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kpng_api::{Address, AgentConfig, Server, bind_unix, run_agent, serve};
use kpng_model::Kind;
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::Cluster;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
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

fn rss_mib(pid: u32) -> f64 {
    kpng_testkit::proc_status_kib(Some(pid), "VmRSS:") as f64 / 1024.0
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

const HOSTILE_PY: &str = r#"
import os, random, resource, socket, struct, sys, time
path, idle, never, first, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload
def lit(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
def request(method, message, flag=0, declared=None):
    block = b"".join(lit(n, v) for n, v in [(b":method", b"POST"), (b":scheme", b"http"),
        (b":path", b"/kpng.model.v1.Enls/" + method), (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"), (b"te", b"trailers")])
    size = len(message) if declared is None else declared
    data = bytes([flag]) + struct.pack(">I", size) + message
    return frame(1, 4, 1, block) + frame(0, 1, 1, data)
def watch(node):
    node = node.encode()
    return b"\x0a" + bytes([len(node)]) + node
GREEDY = PREFACE + frame(4, 0, 0, struct.pack(">HI", 4, 0x7fffffff)) + frame(8, 0, 0, struct.pack(">I", 0x7fff0000))
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s
held = []
for i in range(idle):
    s = connect()
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    held.append(s)
for i in range(never):
    s = connect()
    s.sendall(GREEDY + request(b"Watch", watch("node-%d" % (first + i))))
    held.append(s)
print("ready %d" % len(held), flush=True)
if rate <= 0:
    sys.stdin.read()
    sys.exit(0)
silent = []
kinds = ["http1", "random", "badframe", "huge", "closed", "silent"]
sent = 0
start = time.monotonic()
while True:
    kind = kinds[sent % len(kinds)]
    try:
        s = connect()
        if kind == "http1":
            s.sendall(b"GET / HTTP/1.1\r\nhost: kpng\r\n\r\n")
        elif kind == "random":
            s.sendall(bytes(random.getrandbits(8) for _ in range(64)))
        elif kind == "badframe":
            s.sendall(PREFACE + frame(4, 0, 0, b"\x00\x01\x00"))
        elif kind == "huge":
            s.sendall(PREFACE + frame(4, 0, 0, b"") + request(b"Watch", b"", declared=0xffffffff))
        if kind == "silent":
            silent.append((time.monotonic(), s))
        else:
            s.close()
    except OSError:
        pass
    while silent and time.monotonic() - silent[0][0] > 12:
        silent.pop(0)[1].close()
    sent += 1
    time.sleep(max(0, start + sent / rate - time.monotonic()))
"#;

fn main() {
    if let Some(socket) = arg("--server") {
        return server(&PathBuf::from(socket));
    }
    if let Some(socket) = arg("--agents-of") {
        return agents(&PathBuf::from(socket));
    }
    let agents = num("--agents", 100);
    let services = num("--services", 10_000);
    let idle = num("--idle", 10_000);
    let never = num("--never-reading", 100);
    let rate = num("--garbage-per-s", 100);
    let flips = num("--flips", 30);
    let dir = std::env::temp_dir().join(format!("kpng-hostile-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("server.sock");
    let log = dir.join("server.log");
    println!(
        "kpng-api under hostile clients: {services} Services x 10 endpoints, {agents} agents, {idle} idle connections, {never} watches that never read, {rate} broken clients a second (python3 raw sockets), unix socket, default limits"
    );

    // The server.
    let mut server = Command::new(std::env::current_exe().unwrap())
        .args(["--server", socket.to_str().unwrap()])
        .args(["--services", &services.to_string()])
        .args(["--nodes", &(agents + never).to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let to_server = server.stdin.take().unwrap();
    let mut from_server = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(from_server.next().unwrap().unwrap(), "ready");
    let pid = server.id();
    let mut talk = Talk {
        to: to_server,
        from: from_server,
        pid,
    };
    let loaded = talk.stats("loaded, no client");

    // The agents.
    let mut agent_process = Command::new(std::env::current_exe().unwrap())
        .args(["--agents-of", socket.to_str().unwrap()])
        .args(["--agents", &agents.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut applied = BufReader::new(agent_process.stdout.take().unwrap()).lines();
    assert_eq!(applied.next().unwrap().unwrap(), "synced");
    std::thread::sleep(Duration::from_secs(2));
    let with_agents = talk.stats(&format!("{agents} agents synced"));
    // Warm-up: the first changes after the full views are slower.
    talk.measure(&mut applied, agents, 10);
    let before = talk.measure(&mut applied, agents, flips);

    // The hostile clients, one kind at a time.
    let python = |idle: usize, never: usize, rate: usize| -> Option<Child> {
        let mut child = Command::new("python3")
            .args(["-c", HOSTILE_PY, socket.to_str().unwrap()])
            .args([
                idle.to_string(),
                never.to_string(),
                agents.to_string(),
                rate.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take()?).lines();
        let ready = lines.next()?.ok()?;
        assert!(ready.starts_with("ready"), "{ready}");
        Some(child)
    };
    let Some(mut idlers) = python(idle, 0, 0) else {
        println!("SKIPPED: no python3");
        for child in [&mut agent_process, &mut server] {
            let _ = child.kill();
            let _ = child.wait();
        }
        return;
    };
    std::thread::sleep(Duration::from_secs(3));
    let with_idle = talk.stats(&format!("+ {idle} idle connections"));
    let mut never_readers = python(0, never, 0).unwrap();
    // Full views go 16 at a time, a stalled one giving its turn up after
    // 10 s: wait until every never-reading watch has filled its buffers
    // (the bytes unsent stop growing).
    let waited = std::time::Instant::now();
    let mut unsent = 0;
    loop {
        // Longer than a turn: a new turn has begun within it, if any.
        std::thread::sleep(Duration::from_secs(12));
        let now = talk.unsent_kib();
        if now == unsent || waited.elapsed() > Duration::from_secs(150) {
            break;
        }
        unsent = now;
    }
    let with_never = talk.stats(&format!(
        "+ {never} watches that never read ({:.0} s until their buffers were full)",
        waited.elapsed().as_secs_f64()
    ));
    let faults0 = talk.faults();
    let started = std::time::Instant::now();
    let mut garbage = python(0, 0, rate).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    talk.stats(&format!("+ {rate} broken clients a second"));
    let during = talk.measure(&mut applied, agents, flips);
    let with_all = talk.stats("after the changes under the hostile clients");
    let faults = talk.faults() - faults0;
    println!(
        "  broken clients: {faults} closed or refused in {:.1} s ({:.0} a second; a silent one counts 10 s after it came, one that closes at once not at all)",
        started.elapsed().as_secs_f64(),
        faults as f64 / started.elapsed().as_secs_f64()
    );
    for child in [&mut idlers, &mut never_readers, &mut garbage] {
        let _ = child.kill();
        let _ = child.wait();
    }
    std::thread::sleep(Duration::from_secs(3));
    let left = talk.stats("hostile clients gone");
    let after = talk.measure(&mut applied, agents, flips);

    println!(
        "  idle connections: {:.2} KiB each ({:.1} MiB for {idle})",
        (with_idle - with_agents) * 1024.0 / idle.max(1) as f64,
        with_idle - with_agents
    );
    println!(
        "  watches that never read: {:.2} MiB each ({:.1} MiB for {never})",
        (with_never - with_idle) / never.max(1) as f64,
        with_never - with_idle
    );
    println!(
        "  server RSS: loaded {loaded:.1}, agents {with_agents:.1}, all hostile clients {with_all:.1} (+{:.1}), after they left {left:.1} MiB",
        with_all - with_agents
    );
    let show = |label: &str, (p50, p99, max): (f64, f64, f64)| {
        println!(
            "  change applied by all {agents} agents, {label}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms"
        );
    };
    show("before", before);
    show("with the hostile clients", during);
    show("after they left", after);
    println!(
        "  ratio with / before: p50 {:.2}, p99 {:.2}; after / before: p50 {:.2}, p99 {:.2}",
        during.0 / before.0,
        during.1 / before.1,
        after.0 / before.0,
        after.1 / before.1
    );
    drop(talk);
    let _ = agent_process.kill();
    let _ = agent_process.wait();
    let _ = server.kill();
    let _ = server.wait();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = logged.lines().filter(|l| l.contains("WARN")).collect();
    println!(
        "  the server logged {} lines about them (one per peer and fault a minute):",
        lines.len()
    );
    for line in lines.iter().take(12) {
        println!("    {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

type Lines = std::io::Lines<BufReader<ChildStdout>>;

/// The server process, spoken to by its stdin and stdout.
struct Talk {
    to: ChildStdin,
    from: Lines,
    pid: u32,
}

impl Talk {
    /// Prints the server's RSS, descriptors and counts; its RSS in MiB.
    fn stats(&mut self, label: &str) -> f64 {
        writeln!(self.to, "stats").unwrap();
        let line = self.from.next().unwrap().unwrap();
        let rss = rss_mib(self.pid);
        println!(
            "  {label}: server RSS {rss:.1} MiB, {} fds; {line}",
            fds(self.pid)
        );
        rss
    }

    /// The server's bytes unsent, in KiB.
    fn unsent_kib(&mut self) -> u64 {
        writeln!(self.to, "stats").unwrap();
        let line = self.from.next().unwrap().unwrap();
        line.split(", ")
            .find_map(|part| part.strip_suffix(" KiB unsent"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// The server's client faults so far.
    fn faults(&mut self) -> u64 {
        writeln!(self.to, "stats").unwrap();
        let line = self.from.next().unwrap().unwrap();
        line.split(", ")
            .find_map(|part| part.strip_suffix(" client faults"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `flips` changes 200 ms apart, each timed until every agent applied
    /// it: p50, p99 and max in ms.
    fn measure(&mut self, applied: &mut Lines, agents: usize, flips: usize) -> (f64, f64, f64) {
        let mut latencies = Vec::new();
        for _ in 0..flips {
            writeln!(self.to, "flip").unwrap();
            let t0: u128 = self.from.next().unwrap().unwrap().parse().unwrap();
            for _ in 0..agents {
                let at: u128 = applied.next().unwrap().unwrap().parse().unwrap();
                latencies.push(at.saturating_sub(t0) as f64 / 1e6);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        latencies.sort_by(f64::total_cmp);
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        (
            pct(0.5),
            pct(0.99),
            latencies.last().copied().unwrap_or(0.0),
        )
    }
}

/// The server process: loads the cluster, serves, and on each `flip` line
/// changes one endpoint and prints the time; on `stats`, its counts.
fn server(socket: &Path) {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let services = num("--services", 10_000);
    let nodes = num("--nodes", 100);
    let cluster = Cluster::fanout(services, nodes);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    let (name, endpoint) = cluster.endpoints[12_345 % cluster.endpoints.len()].clone();
    drop(cluster);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(async { bind_unix(socket) }).unwrap();
    let served = Server::new(store.reader());
    runtime.spawn(serve(listener, served.clone()));
    println!("ready");
    let mut ready = true;
    for line in std::io::stdin().lines() {
        match line.unwrap().as_str() {
            "flip" => {
                ready = !ready;
                let t0 = now_ns();
                let mut txn = store.begin();
                txn.set_endpoint(name.clone(), endpoint.with_conditions(ready, ready, false));
                txn.commit();
                println!("{t0}");
            }
            "stats" => {
                let s = served.stats();
                println!(
                    "{} connections, {} streams, {} refused, {} client faults, {} KiB unsent",
                    s.open_connections,
                    s.open_streams,
                    s.refused_connections,
                    s.client_faults,
                    s.unsent_bytes / 1024
                );
            }
            _ => {}
        }
    }
}

/// Prints the time of each round after the first, when it is applied.
struct Stamp(tokio::sync::mpsc::UnboundedSender<u128>, usize);

impl Sink for Stamp {
    fn sync(&mut self, _: &Round<'_>) -> Result<(), SinkError> {
        self.1 += 1;
        let _ = self.0.send(if self.1 == 1 { 0 } else { now_ns() });
        Ok(())
    }
}

/// The agent process: `--agents` agents of node-0…; prints `synced` once
/// each has its view, then the time each applies each change.
fn agents(socket: &Path) {
    let agents = num("--agents", 100);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..agents {
            let (tx, address) = (tx.clone(), Address::Unix(socket.to_owned()));
            tokio::spawn(async move {
                let mut sink = Stamp(tx, 0);
                let _ = run_agent(
                    &address,
                    &format!("node-{i}"),
                    &mut sink,
                    &AgentConfig::default(),
                )
                .await;
            });
        }
        let mut out = std::io::stdout();
        let mut synced = 0;
        while let Some(at) = rx.recv().await {
            if at == 0 {
                synced += 1;
                if synced == agents {
                    writeln!(out, "synced").unwrap();
                    out.flush().unwrap();
                }
                continue;
            }
            writeln!(out, "{at}").unwrap();
            out.flush().unwrap();
        }
    });
}
