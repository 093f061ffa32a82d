//! An agent under memory pressure: `kpng api … to-nft` runs in a memory
//! cgroup of its own and a network namespace of its own, streaming node-0's
//! view of 10k Services × 10 endpoints (the mixed world of
//! `kpng_testkit::world`) from a `kpng file --watch … to-api` server. Once
//! its first sync has settled, its working set (the cgroup's usage: its
//! pages, and the kernel's memory for its ruleset and sockets) is read,
//! and the cgroup's limit is set to `--factor` (2) times that. The server
//! is then killed and restarted onto another state, in which every
//! endpoint has another address: the agent's resume finds its view stale
//! and gets the whole new view (a full resync), builds the new ruleset
//! and swaps it in while it still holds the old one. It prints the peak,
//! the limit, whether the kernel killed anything, and whether the kernel
//! holds the new state.
//!
//! ```text
//! cargo bench -p kpng-cli --bench pressure [-- --world 10000x10 --factor 2 --backend nft|iptables]
//! ```
//!
//! With `--backend iptables` the agent's `iptables-restore` children run
//! in the cgroup too, and count in its usage.
//!
//! Needs root (a namespace and a cgroup); skipped otherwise.
#![allow(unsafe_code, missing_docs, clippy::unwrap_used)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kpng_testkit::bpf::TestNetns;
use kpng_testkit::memory::MemoryCgroup;
use kpng_testkit::world::World;
use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// Endpoint addresses of state B: the second octet moved up by two
/// (10.128.0.0/9 holds both).
fn moved(address: &str) -> String {
    let mut octets: Vec<String> = address.split('.').map(str::to_owned).collect();
    if octets.len() == 4
        && let Ok(second) = octets[1].parse::<u8>()
    {
        octets[1] = second.saturating_add(2).to_string();
    }
    octets.join(".")
}

/// Writes `world` as a JSON `List`, every IPv4 endpoint address moved
/// when `move_endpoints`.
fn write(world: &World, move_endpoints: bool, path: &std::path::Path) {
    if !move_endpoints {
        let file = std::fs::File::create(path).unwrap();
        world.write_list(file).unwrap();
        return;
    }
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(br#"{"apiVersion":"v1","kind":"List","items":["#)
        .unwrap();
    let slices = world.endpoint_slices().map(|mut slice: Value| {
        if slice["addressType"] == "IPv4"
            && let Some(endpoints) = slice["endpoints"].as_array_mut()
        {
            for endpoint in endpoints {
                if let Some(addresses) = endpoint["addresses"].as_array_mut() {
                    for a in addresses {
                        *a = Value::String(moved(a.as_str().unwrap()));
                    }
                }
            }
        }
        slice
    });
    let objects = world.services().chain(slices).chain(world.node_objects());
    for (k, object) in objects.enumerate() {
        if k > 0 {
            out.write_all(b",\n").unwrap();
        }
        serde_json::to_writer(&mut out, &object).unwrap();
    }
    out.write_all(b"]}\n").unwrap();
    out.flush().unwrap();
}

/// Replaces `path` whole: written aside, then renamed into place.
fn replace(from: &std::path::Path, path: &std::path::Path) {
    let aside = path.with_extension("new");
    std::fs::copy(from, &aside).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

fn server(input: &std::path::Path, listen: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(input)
        .args(["--watch", "to-api", "--listen", listen])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The agent's `synced` log lines, counted, with the time of each.
#[derive(Default)]
struct Syncs {
    at: Vec<Instant>,
    log: Vec<String>,
}

fn wait_syncs(syncs: &Mutex<Syncs>, count: usize, agent: &mut Child, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if syncs.lock().unwrap().at.len() >= count {
            return true;
        }
        if agent.try_wait().ok().flatten().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn main() {
    if unsafe { libc::geteuid() } != 0 {
        println!("pressure: SKIPPED (not root: it needs a network namespace and a memory cgroup)");
        return;
    }
    let name = arg("--world").unwrap_or_else(|| "10000x10".into());
    let world = World::named(&name).expect("--world: wide, deep, SxE or plain-SxE");
    let backend = arg("--backend").unwrap_or_else(|| "nft".into());
    assert!(
        backend == "nft" || backend == "iptables",
        "--backend: nft or iptables"
    );
    let factor: f64 = arg("--factor").and_then(|f| f.parse().ok()).unwrap_or(2.0);

    let dir = std::env::temp_dir().join(format!("kpng-pressure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b, input) = (
        dir.join("a.json"),
        dir.join("b.json"),
        dir.join("cluster.json"),
    );
    write(&world, false, &a);
    write(&world, true, &b);
    replace(&a, &input);
    let socket = dir.join("api.sock");
    let listen = format!("unix://{}", socket.display());

    let netns = TestNetns::new("kpng-pressure").unwrap();
    let cgroup = match MemoryCgroup::new("kpng-pressure") {
        Ok(c) => c,
        Err(e) => {
            println!("pressure: SKIPPED ({e})");
            return;
        }
    };

    let mut srv = server(&input, &listen);
    for _ in 0..600 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let kpng = env!("CARGO_BIN_EXE_kpng");
    let mut agent = cgroup
        .command(&[
            "ip",
            "netns",
            "exec",
            &netns.name,
            kpng,
            "api",
            "--api",
            &listen,
            "--node",
            "node-0",
            &format!("to-{backend}"),
            "--metrics-bind-address",
            "",
        ])
        .env("RUST_LOG", "kpng=info,warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let syncs = Arc::new(Mutex::new(Syncs::default()));
    let reader = {
        let syncs = Arc::clone(&syncs);
        let stderr = agent.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut s = syncs.lock().unwrap();
                if line.contains(" synced ") {
                    s.at.push(Instant::now());
                }
                s.log.push(line);
            }
        })
    };

    let started = Instant::now();
    assert!(
        wait_syncs(&syncs, 1, &mut agent, Duration::from_secs(600)),
        "the agent never synced:\n{}",
        syncs.lock().unwrap().log.join("\n")
    );
    let first_sync = started.elapsed();
    let first_peak = cgroup.peak();
    // Steady: what it holds once the first sync is over, sampled every
    // 100 ms for 10 s with nothing changing: the least (its working set;
    // the limit is set from it) and the most (children it runs meanwhile,
    // such as iptables-save, count too).
    std::thread::sleep(Duration::from_secs(2));
    let (mut steady, mut steady_max) = (u64::MAX, 0);
    let (mut anon, mut kernel) = (0, 0);
    for _ in 0..100 {
        let usage = cgroup.usage();
        if usage < steady {
            steady = usage;
            (anon, kernel) = cgroup.anon_and_kernel();
        }
        steady_max = steady_max.max(usage);
        std::thread::sleep(Duration::from_millis(100));
    }
    let steady_rss = rss_mib(agent.id());
    let members: Vec<String> = std::fs::read_to_string(cgroup.path.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{} {:.1} MiB", comm.trim(), rss_mib(pid))
        })
        .collect();
    let limit = (steady as f64 * factor) as u64;
    cgroup.set_limit(Some(limit)).unwrap();
    cgroup.reset_peak().unwrap();

    // The full resync: the server restarts onto state B. A sampler reads
    // the cgroup's anonymous and kernel memory every 5 ms meanwhile, to
    // say which part of the peak is whose.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        let path = cgroup.path.clone();
        let hierarchy = cgroup.hierarchy;
        std::thread::spawn(move || {
            let view = MemoryCgroup::view(path, hierarchy);
            let (mut anon, mut kernel) = (0, 0);
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let (a, k) = view.anon_and_kernel();
                anon = anon.max(a);
                kernel = kernel.max(k);
                std::thread::sleep(Duration::from_millis(5));
            }
            (anon, kernel)
        })
    };
    let _ = srv.kill();
    let _ = srv.wait();
    let _ = std::fs::remove_file(&socket);
    replace(&b, &input);
    let restarted = Instant::now();
    let mut srv = server(&input, &listen);
    let resynced = wait_syncs(&syncs, 2, &mut agent, Duration::from_secs(600));
    let resync = restarted.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let peak = cgroup.peak();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (peak_anon, peak_kernel) = sampler.join().unwrap();
    let oom_kills = cgroup.oom_kills();
    let alive = agent.try_wait().ok().flatten().is_none();
    let ruleset = netns
        .sh(if backend == "nft" {
            "nft list ruleset"
        } else {
            "iptables-save"
        })
        .unwrap_or_default();
    // The first endpoints of state A and B (10.128.0.1 is also a prefix of
    // 10.128.0.10 and up: match it whole).
    let (new_one, old_one) = (moved("10.128.0.1"), "10.128.0.1");
    let whole = |text: &str, address: &str| {
        text.match_indices(address)
            .any(|(i, _)| !text[i + address.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    let holds_b = whole(&ruleset, &new_one) && !whole(&ruleset, old_one);

    println!(
        "pressure: an agent (kpng api ... --node node-0 to-{backend}) at {} Services x {} endpoints, cgroup {:?}",
        world.services, world.endpoints_per_service, cgroup.hierarchy
    );
    println!(
        "first sync: {:.1} s, cgroup peak {:.1} MiB (no limit)",
        first_sync.as_secs_f64(),
        first_peak as f64 / MIB
    );
    println!(
        "steady working set: {:.1} MiB (anon {:.1} MiB, kernel {:.1} MiB), up to {:.1} MiB over 10 s; the agent's RSS {steady_rss:.1} MiB; in the cgroup: {}",
        steady as f64 / MIB,
        anon as f64 / MIB,
        kernel as f64 / MIB,
        steady_max as f64 / MIB,
        members.join(", ")
    );
    println!(
        "limit: {:.1} MiB ({factor} x steady); full resync onto another state: peak {:.1} MiB ({:.0} % of the limit), OOM kills {oom_kills}, agent alive {alive}, resynced {resynced} in {:.1} s, kernel holds the new state {holds_b}",
        limit as f64 / MIB,
        peak as f64 / MIB,
        peak as f64 * 100.0 / limit as f64,
        resync.as_secs_f64()
    );
    println!(
        "during the resync, sampled every 5 ms: anon up to {:.1} MiB, kernel up to {:.1} MiB",
        peak_anon as f64 / MIB,
        peak_kernel as f64 / MIB
    );
    println!(
        "{{\"steady_mib\":{:.1},\"limit_mib\":{:.1},\"resync_peak_mib\":{:.1},\"first_peak_mib\":{:.1},\"oom_kills\":{oom_kills},\"survived\":{}}}",
        steady as f64 / MIB,
        limit as f64 / MIB,
        peak as f64 / MIB,
        first_peak as f64 / MIB,
        alive && resynced && holds_b && oom_kills == 0
    );
    if !(alive && resynced) {
        let log = syncs.lock().unwrap().log.clone();
        let tail = log.len().saturating_sub(20);
        println!("agent log (last lines):\n{}", log[tail..].join("\n"));
    }
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = reader.join();
    let _ = srv.kill();
    let _ = srv.wait();
    drop(cgroup);
    drop(netns);
    let _ = std::fs::remove_dir_all(&dir);
}
