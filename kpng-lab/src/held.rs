//! Held TCP connections: a client that keeps one connection open to each
//! of some endpoints of a Service (the lab's servers keep connections to
//! port 9100 open and echo what they get), then reports, after a sync,
//! which ended and when. It shows `--end-tcp-connections` with real
//! packets: a connection to an endpoint that left fails within the sync,
//! the others go on.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Stdio};

use crate::Lab;

/// The client: `HOST PORT NAME…`. It connects to HOST:PORT until it holds
/// one connection to each endpoint NAME (the first line a server sends
/// names it), prints `held`, and waits for a line on its stdin. Then, on
/// each connection at once, it waits up to 3 s for the connection to fail
/// (`NAME ERROR SECONDS`: the error's name, and `time.monotonic()` when
/// it failed), and otherwise checks it still echoes (`NAME alive`, or
/// `NAME dead`).
const HELD_TCP: &str = r#"
import errno, socket, sys, threading, time
host, port, want = sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
held = {}
for _ in range(300):
    if set(held) == want: break
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect((host, port))
        name = s.makefile().readline().split()[0]
    except OSError:
        s.close(); continue
    if name in want and name not in held: held[name] = s
    else: s.close()
print("held" if set(held) == want else "missing %s" % sorted(want - set(held)), flush=True)
sys.stdin.readline()
out = {}
def watch(name, s):
    s.settimeout(3)
    try:
        d = s.recv(200)
        out[name] = "%s EOF %.6f" % (name, time.monotonic()) if not d else "%s data" % name
        return
    except socket.timeout:
        pass
    except OSError as e:
        out[name] = "%s %s %.6f" % (name, errno.errorcode.get(e.errno, str(e.errno)), time.monotonic())
        return
    try:
        s.sendall(b"ping\n"); ok = s.recv(200).startswith(b"ping")
        out[name] = "%s %s" % (name, "alive" if ok else "dead")
    except OSError as e:
        out[name] = "%s dead-%s" % (name, errno.errorcode.get(e.errno, str(e.errno)))
threads = [threading.Thread(target=watch, args=kv) for kv in held.items()]
for t in threads: t.start()
for t in threads: t.join()
for name in sorted(out): print(out[name], flush=True)
print("done", flush=True)
"#;

/// The port the lab's servers hold connections on.
pub const HELD_PORT: u16 = 9100;

/// A client holding one TCP connection to each of some endpoints.
#[derive(Debug)]
pub struct HeldTcp {
    child: Child,
    out: BufReader<ChildStdout>,
}

/// What became of one held connection.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// It failed with this error (`ECONNRESET`, `ECONNABORTED`, `EOF`),
    /// at this `CLOCK_MONOTONIC` time, in seconds.
    Ended(String, f64),
    /// Still open 3 s later, and it echoes.
    Alive,
    /// Anything else, as the client said it.
    Other(String),
}

impl HeldTcp {
    /// Connects from host `from` to `host:port` until it holds a
    /// connection to each endpoint of `names` (as the servers name
    /// themselves).
    ///
    /// # Panics
    /// When the client cannot start, or cannot reach every endpoint.
    pub fn start(lab: &Lab, from: &str, host: &str, port: u16, names: &[&str]) -> Self {
        let port = port.to_string();
        let mut args = vec!["python3", "-u", "-c", HELD_TCP, host, &port];
        args.extend(names);
        let mut child = lab
            .client(from, &args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the held-connections client");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("a line");
        assert_eq!(line.trim(), "held", "{from} -> {host}:{port}");
        Self { child, out }
    }

    /// Lets the client watch its connections; what became of each, by
    /// endpoint.
    ///
    /// # Panics
    /// When the client does not answer.
    pub fn fates(mut self) -> BTreeMap<String, Fate> {
        if let Some(mut stdin) = self.child.stdin.take() {
            stdin.write_all(b"go\n").expect("go");
        }
        let mut fates = BTreeMap::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line).expect("a line") == 0 {
                break;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let fate = match words.as_slice() {
                ["done"] => break,
                [_, "alive"] => Fate::Alive,
                [_, error, at] => match at.parse() {
                    Ok(at) => Fate::Ended((*error).to_owned(), at),
                    Err(_) => Fate::Other(line.trim().to_owned()),
                },
                _ => Fate::Other(line.trim().to_owned()),
            };
            if let Some(name) = words.first() {
                fates.insert((*name).to_owned(), fate);
            }
        }
        let _ = self.child.wait();
        fates
    }
}

impl Drop for HeldTcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `CLOCK_MONOTONIC` now, in seconds: the clock of the client's
/// `time.monotonic()` (one for every namespace).
pub fn monotonic() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// Each line of `out` (a client's standard output) as it comes, with the
/// time it came, read on a thread of its own (joined once `out` ends):
/// what a test or bench that times a client's events reads.
pub fn timed_lines(
    out: impl std::io::Read + Send + 'static,
) -> (
    std::sync::mpsc::Receiver<(std::time::Instant, String)>,
    std::thread::JoinHandle<()>,
) {
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((std::time::Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    (lines, reader)
}
