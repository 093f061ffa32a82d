//! Ending TCP connections to removed endpoints: the time from the sync
//! that removes an endpoint to the failure of the clients' connections
//! to it, per backend ([`TcpEnding`]).

use std::io::Write;
use std::time::{Duration, Instant};

use crate::{Lab, LabBackend, Proxy};

/// A backend whose syncs end the TCP connections to endpoints that left
/// (`--end-tcp-connections`), as [`tcp_ending`] drives it.
pub trait TcpEnding: LabBackend {
    /// The error a client's connection fails with.
    const ERROR: &'static str;
    /// The backend for `lab`'s node, with the ending on.
    fn ending(lab: &Lab) -> Self;
    /// The TCP connections its last sync ended, as it counts them.
    fn ended(&self) -> u64;
}

/// A netfilter backend followed by the conntrack cleaner, as the command
/// runs them: with `--end-tcp-connections` the cleaner ends the flows
/// (and nudges their clients), the backend readies its rules.
#[derive(Debug)]
pub struct WithCleaner<B>(pub kpng_sink::FollowedBy<B, kpng_conntrack::ConntrackCleaner>);

impl<B: kpng_sink::Sink> kpng_sink::Sink for WithCleaner<B> {
    fn sync(&mut self, round: &kpng_sink::Round<'_>) -> Result<(), kpng_sink::SinkError> {
        self.0.sync(round)
    }
}

impl<B: LabBackend> LabBackend for WithCleaner<B> {
    const NAME: &'static str = B::NAME;
    const TOOLS: &'static [&'static str] = B::TOOLS;
    const DATA_PATH: kpng_explain::DataPath = B::DATA_PATH;

    fn in_lab(lab: &Lab, settings: &crate::Settings) -> Self {
        use kpng_sink::SinkExt;
        let cleaner = kpng_conntrack::ConntrackCleaner::in_netns(
            std::path::Path::new("/run/netns").join(lab.ns("node")),
        )
        .with_proxy(&settings.proxy());
        WithCleaner(B::in_lab(lab, settings).followed_by(cleaner))
    }
    fn last_full(&self) -> bool {
        self.0.first().last_full()
    }
    fn last_commands(&self) -> usize {
        self.0.first().last_commands()
    }
    fn dump(lab: &Lab) -> String {
        B::dump(lab)
    }
    fn clear(lab: &Lab) {
        B::clear(lab);
    }
    fn unavailable() -> Option<String> {
        B::unavailable()
    }
}

impl<B: LabBackend> TcpEnding for WithCleaner<B> {
    const ERROR: &'static str = "ECONNRESET";
    fn ending(lab: &Lab) -> Self {
        let settings = crate::Settings {
            end_tcp_connections: true,
            ..super::settings()
        };
        Self::in_lab(lab, &settings)
    }
    fn ended(&self) -> u64 {
        self.0.next().last_tcp_ended().len() as u64
    }
}

impl TcpEnding for crate::EbpfOnly {
    const ERROR: &'static str = "ECONNABORTED";
    fn ending(lab: &Lab) -> Self {
        let config = crate::ebpf_config(lab, &super::settings(), false).end_tcp_connections(true);
        crate::EbpfOnly(
            kpng_backend_ebpf::EbpfBackend::attach(config).expect("the eBPF programs attach"),
        )
    }
    fn ended(&self) -> u64 {
        self.0.last_sync().tcp_sockets_ended
    }
}

/// Holds TCP connections through Service `argv[1]` port `argv[2]`:
/// `argv[4]` to endpoint `argv[3]` (and those that reach another
/// endpoint meanwhile, kept open), prints `ready N M`; then one line per
/// connection to `argv[3]` as it fails (`gone <error>`, `eof` or `data`),
/// `done` after the last; then, after a line on stdin, again (until
/// stdin closes).
const TCP_HOLDER: &str = r#"
import errno, selectors, socket, sys
svc, port, a, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
others = []
while True:
    held = []
    while len(held) < n:
        s = socket.create_connection((svc, port), timeout=2)
        who = s.recv(200).decode().split()[0]
        (held if who == a else others).append(s)
    print("ready", len(held), len(others), flush=True)
    sel = selectors.DefaultSelector()
    for s in held:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    left = len(held)
    while left:
        events = sel.select(timeout=10)
        if not events:
            print("timeout", left, flush=True)
            sys.exit(1)
        for key, _ in events:
            try:
                out = "data" if key.fileobj.recv(200) else "eof"
            except OSError as e:
                out = errno.errorcode.get(e.errno, str(e.errno))
            sel.unregister(key.fileobj)
            key.fileobj.close()
            left -= 1
            print("gone", out, flush=True)
    print("done", flush=True)
    if not sys.stdin.readline():
        break
"#;

/// Service `h`: ClusterIP 10.96.0.60, TCP 70 to the lab servers' held
/// port, on `eps`.
fn manifest(eps: &[&str]) -> String {
    let entries: Vec<String> = eps
        .iter()
        .map(|ip| format!("{{addresses: [{ip}], nodeName: node-b}}"))
        .collect();
    let items = format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: h}}
  spec: {{clusterIP: 10.96.0.60, ports: [{{name: held, port: 70, targetPort: {port}}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: h-1, labels: {{kubernetes.io/service-name: h}}}}
  addressType: IPv4
  endpoints: [{}]
  ports: [{{name: held, port: {port}, protocol: TCP}}]
"#,
        entries.join(", "),
        port = crate::held::HELD_PORT,
    );
    crate::scenarios::manifest(&[items])
}

/// One removal's figures, in milliseconds from the start of the sync:
/// the sync's end, the first and the last connection's failure.
#[derive(Clone, Copy, Debug)]
struct Removal {
    sync: f64,
    first: f64,
    last: f64,
}

/// `tcp-end`: for backend `B`, the time from the start of the sync that
/// removes endpoint A of a Service (endpoints A and B) to the failure of
/// each of `connections` TCP connections a pod client holds to A
/// through the Service's ClusterIP (it also holds those that reached B).
/// `rounds` rounds, each with a backend attached anew: a first removal
/// (the first ending of the process: a backend that loads what ends
/// connections only when first needed pays for it here), A back, as many
/// new connections, a second removal.
/// Prints the median of each: the sync's own time, the first and the
/// last connection's failure, and that every connection ended.
pub fn tcp_ending<B: TcpEnding>(rounds: usize, connections: usize) {
    if let Some(why) = B::unavailable() {
        println!("SKIPPED: {why}");
        return;
    }
    const A: &str = "10.244.2.10";
    const B_EP: &str = "10.244.3.10";
    let mut lab = Lab::new();
    lab.host("podc", &["10.244.1.99"], &[]);
    lab.host("e2", &[A], &[]);
    lab.serve("e2", A);
    lab.host("e3", &[B_EP], &[]);
    lab.serve("e3", B_EP);
    let both = manifest(&[A, B_EP]);
    let without = manifest(&[B_EP]);
    let mut figures: [Vec<Removal>; 2] = [Vec::new(), Vec::new()];
    let mut ended = Vec::new();
    for _ in 0..rounds {
        B::clear(&lab);
        let mut proxy = Proxy::with(B::ending(&lab));
        proxy.load(&both).expect("a sync");
        crate::settle();
        let n = connections.to_string();
        let mut holder = lab
            .client(
                "podc",
                &["python3", "-u", "-c", TCP_HOLDER, "10.96.0.60", "70", A, &n],
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the connection holder");
        let (lines, reader) = crate::held::timed_lines(holder.stdout.take().expect("stdout"));
        let next = || {
            lines
                .recv_timeout(Duration::from_secs(30))
                .expect("a line from the holder")
        };
        for (phase, removals) in figures.iter_mut().enumerate() {
            if phase == 1 {
                proxy.load(&both).expect("A back");
                crate::settle();
                let stdin = holder.stdin.as_mut().expect("stdin");
                stdin.write_all(b"\n").expect("next phase");
                stdin.flush().expect("next phase");
            }
            let (_, line) = next();
            assert!(line.starts_with("ready"), "{line}");
            let start = Instant::now();
            proxy.load(&without).expect("A removed");
            let sync = start.elapsed().as_secs_f64() * 1e3;
            ended.push(proxy.backend.ended());
            let mut gone = Vec::new();
            loop {
                let (at, line) = next();
                if line == "done" {
                    break;
                }
                assert_eq!(
                    line,
                    format!("gone {}", B::ERROR),
                    "each connection to A ends"
                );
                gone.push(at.duration_since(start).as_secs_f64() * 1e3);
            }
            assert_eq!(gone.len(), connections);
            removals.push(Removal {
                sync,
                first: gone.first().copied().unwrap_or(f64::NAN),
                last: gone.last().copied().unwrap_or(f64::NAN),
            });
        }
        drop(holder.stdin.take());
        let _ = holder.wait();
        let _ = reader.join();
        drop(proxy);
    }
    B::clear(&lab);
    let median = |v: &[Removal], f: fn(&Removal) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    println!(
        "kpng {} backend, ending TCP connections to a removed endpoint (--end-tcp-connections): a pod holds {connections} connections to endpoint A through a ClusterIP (endpoints A and B), A leaves; from the start of the sync, median of {rounds} rounds:",
        B::NAME
    );
    for (phase, what) in [(0, "first ending of the process"), (1, "a later one")] {
        let v = &figures[phase];
        println!(
            "  {what}: sync done {:.1} ms, first connection failed {:.1} ms, last {:.1} ms",
            median(v, |r| r.sync),
            median(v, |r| r.first),
            median(v, |r| r.last),
        );
    }
    println!("  connections ended per removal, as the backend counted: {ended:?}");
}
