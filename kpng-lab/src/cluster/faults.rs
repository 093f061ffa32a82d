//! The server's path to its agents across the fabric, and faults on it.
//!
//! [`Cluster::serve_over_fabric`] puts the server in a namespace of its
//! own on the fabric ([`SERVER_IP`]), listening on TCP with mutual TLS
//! ([`API_PORT`]; certificates made for the cluster by rcgen, as the
//! kpng-api tests make theirs), and the agents connect to it by that
//! address: every packet between them crosses the fabric's bridge, where
//! the faults are ruled:
//!
//! * **loss** ([`Cluster::faults`]): `numgen random mod 100 < P drop` on
//!   the API's traffic, both ways, in a `bridge` table of the fabric's
//!   namespace;
//! * **a cut** of chosen nodes (the same call): every packet between them
//!   and the server dropped, no reset sent;
//! * **delay** ([`Cluster::start_relay`]): this kernel has no netem qdisc,
//!   so a relay in the server's namespace ([`RELAY_PORT`], a small Python
//!   asyncio program) holds each chunk it reads for the delay, each way,
//!   before passing it on; agents started after it connect through it;
//! * **a silent peer** ([`Cluster::relay_silent`]): the relay stops
//!   forwarding (what it reads is dropped, its connections stay open, new
//!   ones are accepted and never forwarded), as a peer that vanished
//!   without a reset looks.
//!
//! Nothing is ruled in the machine's own namespace.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::fabric::batch;
use super::{Cluster, GATEWAY_IP, node_ip};

/// The server's address on the fabric, with [`Cluster::serve_over_fabric`].
pub const SERVER_IP: &str = "192.168.0.2";
/// The port the server listens on (TCP, mutual TLS).
pub const API_PORT: u16 = 7443;
/// The port of the relay ([`Cluster::start_relay`]), beside the server.
pub const RELAY_PORT: u16 = 7444;

/// The nftables table of the faults, in the fabric's namespace.
const TABLE: &str = "bridge kpng_lab_faults";

/// The relay: `PORT HOST UPSTREAM_PORT DELAY_SECONDS`; SIGUSR1 makes it
/// silent (every connection, open or new, forwards nothing from then on;
/// none is closed), SIGUSR2 forwards new connections again.
const RELAY: &str = r#"
import asyncio, signal, sys
port, host, upstream, delay = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
state = {"silent": False, "conns": set()}

class Conn:
    pass

def silence():
    state["silent"] = True
    for conn in state["conns"]:
        conn.frozen = True

def speak():
    state["silent"] = False

async def forever():
    await asyncio.Event().wait()

async def pipe(reader, writer, conn):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if conn.frozen:
                continue
            if data is None:
                try:
                    writer.write_eof()
                except Exception:
                    pass
                return
            writer.write(data)
            await writer.drain()
    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await reader.read(65536)
            if conn.frozen:
                if not data:
                    await forever()
                continue
            queue.put_nowait((loop.time() + delay, data if data else None))
            if not data:
                break
        await sender
    except Exception:
        sender.cancel()
        if conn.frozen:
            await forever()
        pass

async def handle(creader, cwriter):
    conn = Conn()
    conn.frozen = state["silent"]
    state["conns"].add(conn)
    try:
        if conn.frozen:
            while await creader.read(65536):
                pass
            await forever()
        try:
            ureader, uwriter = await asyncio.open_connection(host, upstream)
        except Exception:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, uwriter, conn), pipe(ureader, cwriter, conn))
        for w in (cwriter, uwriter):
            w.close()
    except Exception:
        pass
    finally:
        state["conns"].discard(conn)

async def main():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, silence)
    loop.add_signal_handler(signal.SIGUSR2, speak)
    server = await asyncio.start_server(handle, "0.0.0.0", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"#;

/// The server's path across the fabric: its namespace, and the TLS
/// files of the server and the agents.
#[derive(Debug)]
pub(super) struct FabricApi {
    /// The server's namespace.
    pub(super) ns: String,
    /// The CA, the server's and the agents' certificate and key (PEM
    /// files in the cluster's directory).
    ca: std::path::PathBuf,
    server: (std::path::PathBuf, std::path::PathBuf),
    client: (std::path::PathBuf, std::path::PathBuf),
    /// Agents started from now on connect through the relay.
    pub(super) via_relay: bool,
    /// The relay, while it runs.
    pub(super) relay: Option<Child>,
}

impl Drop for FabricApi {
    fn drop(&mut self) {
        if let Some(mut relay) = self.relay.take() {
            let _ = relay.kill();
            let _ = relay.wait();
        }
    }
}

/// A CA, a certificate for [`SERVER_IP`] and one for the agents, as PEM:
/// (CA, (server cert, key), (client cert, key)).
type Pki = (String, (String, String), (String, String));

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kpng lab CA");
    let ca =
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("the CA");
    let leaf = |names: &[&str]| {
        let key = KeyPair::generate().expect("a key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    // An IP address as name: rcgen makes it an IP SAN, which the agents
    // check against the address they dial.
    let server = leaf(&[SERVER_IP]);
    let client = leaf(&["kpng-agent"]);
    (ca.pem(), server, client)
}

impl Cluster {
    /// Puts the server (started next) in a namespace of its own on the
    /// fabric at [`SERVER_IP`], listening on `tcp://0.0.0.0:7443` with
    /// mutual TLS; agents started from now on connect to
    /// `tcp://192.168.0.2:7443` across the fabric, and the fleet view is
    /// asked there (from the server's namespace). A server from the API
    /// ([`Cluster::start_kube_server`]) is not served this way.
    ///
    /// # Panics
    /// When a server or an agent runs already, or the namespace cannot be
    /// made.
    pub fn serve_over_fabric(&mut self) {
        assert!(
            self.server.is_none() && self.agents.iter().all(Option::is_none),
            "serve over the fabric before starting the server and agents"
        );
        let ns = format!("{}-srv", self.prefix);
        // Recorded first: deleted with the others whatever happens next.
        self.namespaces.push(ns.clone());
        let fab = self.fabric_ns();
        batch(
            None,
            &[
                format!("netns add {ns}"),
                format!("link add fs netns {fab} type veth peer name eth0 netns {ns}"),
            ],
        );
        batch(
            Some(&fab),
            &["link set fs master br0".into(), "link set fs up".into()],
        );
        batch(
            Some(&ns),
            &[
                "link set lo up".into(),
                format!("addr add {SERVER_IP}/16 dev eth0"),
                "link set eth0 up".into(),
                format!("route add default via {GATEWAY_IP}"),
            ],
        );
        let (ca, server, client) = pki();
        let write = |name: &str, text: &str| {
            let path = self.dir.join(name);
            std::fs::write(&path, text).expect("write a TLS file");
            path
        };
        self.fabric_api = Some(FabricApi {
            ns,
            ca: write("ca.pem", &ca),
            server: (
                write("server.pem", &server.0),
                write("server-key.pem", &server.1),
            ),
            client: (
                write("agent.pem", &client.0),
                write("agent-key.pem", &client.1),
            ),
            via_relay: false,
            relay: None,
        });
    }

    /// The server's namespace, with [`Cluster::serve_over_fabric`].
    pub fn server_ns(&self) -> Option<&str> {
        self.fabric_api.as_ref().map(|f| f.ns.as_str())
    }

    /// What the server is started with after `to-api`: `--listen
    /// unix://S`, or over the fabric `--listen tcp://0.0.0.0:7443` and
    /// its TLS files.
    pub(super) fn listen_args(&self) -> Vec<String> {
        match &self.fabric_api {
            None => vec![
                "--listen".into(),
                format!("unix://{}", self.socket_path().display()),
            ],
            Some(api) => {
                let mut args = vec!["--listen".into(), format!("tcp://0.0.0.0:{API_PORT}")];
                args.extend(tls_args(&api.server, &api.ca));
                args
            }
        }
    }

    /// What an agent (or the fleet command) is given after `api`: `--api
    /// unix://S`, or over the fabric `--api tcp://192.168.0.2:PORT` (the
    /// relay's port for an agent when [`Cluster::start_relay`] ran) and
    /// its TLS files.
    pub(super) fn api_args(&self, agent: bool) -> Vec<String> {
        match &self.fabric_api {
            None => vec!["--api".into(), self.api_addresses()],
            Some(api) => {
                let port = if agent && api.via_relay {
                    RELAY_PORT
                } else {
                    API_PORT
                };
                let mut args = vec!["--api".into(), format!("tcp://{SERVER_IP}:{port}")];
                args.extend(tls_args(&api.client, &api.ca));
                args
            }
        }
    }

    /// The command that runs `program` in the server's namespace (or here
    /// when it is not on the fabric).
    pub(super) fn in_server_ns(&self, program: &std::path::Path) -> Command {
        match &self.fabric_api {
            None => Command::new(program),
            Some(api) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &api.ns]).arg(program);
                command
            }
        }
    }

    /// Rules the faults on the server's path across the fabric, replacing
    /// the previous ones: `loss_percent` of the API's packets dropped at
    /// random, each way (`numgen random mod 100 < P drop`), and every
    /// packet between the server and the nodes of `cut` dropped (no reset
    /// is sent). `faults(0, &[])` heals everything.
    ///
    /// # Panics
    /// Without [`Cluster::serve_over_fabric`], or when nft refuses.
    pub fn faults(&self, loss_percent: u8, cut: &[usize]) {
        assert!(
            self.fabric_api.is_some(),
            "faults need the server on the fabric (serve_over_fabric)"
        );
        let mut rules = Vec::new();
        if !cut.is_empty() {
            let ips: Vec<String> = cut.iter().map(|&k| node_ip(k)).collect();
            let set = ips.join(", ");
            rules.push(format!("ip saddr {{ {set} }} ip daddr {SERVER_IP} drop"));
            rules.push(format!("ip saddr {SERVER_IP} ip daddr {{ {set} }} drop"));
        }
        if loss_percent > 0 {
            let ports = format!("{{ {API_PORT}, {RELAY_PORT} }}");
            rules.push(format!(
                "ip daddr {SERVER_IP} tcp dport {ports} numgen random mod 100 < {loss_percent} drop"
            ));
            rules.push(format!(
                "ip saddr {SERVER_IP} tcp sport {ports} numgen random mod 100 < {loss_percent} drop"
            ));
        }
        let script = format!(
            "table {TABLE} {{}}\ndelete table {TABLE}\ntable {TABLE} {{\n  chain forward {{\n    type filter hook forward priority 0; policy accept;\n{}\n  }}\n}}\n",
            rules
                .iter()
                .map(|r| format!("    {r}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.fabric_ns(), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run nft");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(script.as_bytes()).expect("nft input");
        }
        let out = child.wait_with_output().expect("nft");
        assert!(
            out.status.success(),
            "nft -f refused the faults:\n{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the relay beside the server ([`RELAY_PORT`]), holding each
    /// chunk for `delay` each way (a round trip gains twice `delay`);
    /// agents started from now on connect through it.
    ///
    /// # Panics
    /// Without [`Cluster::serve_over_fabric`], when one runs already, or
    /// when it does not start.
    pub fn start_relay(&mut self, delay: Duration) {
        let api = self
            .fabric_api
            .as_mut()
            .expect("the relay needs the server on the fabric (serve_over_fabric)");
        assert!(api.relay.is_none(), "the relay runs already");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &api.ns, "python3", "-u", "-c", RELAY])
            .args([
                RELAY_PORT.to_string(),
                SERVER_IP.to_owned(),
                API_PORT.to_string(),
                delay.as_secs_f64().to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the relay");
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        api.relay = Some(child);
        assert_eq!(line.trim(), "ready", "the relay did not start");
        api.via_relay = true;
    }

    /// Makes the relay silent: from now on it forwards nothing, on the
    /// connections open and on new ones, which it accepts; none is closed
    /// or reset.
    ///
    /// # Panics
    /// When no relay runs.
    pub fn relay_silent(&self) {
        self.signal_relay("-USR1");
    }

    /// Lets the relay forward new connections again (those it silenced
    /// stay silent, as connections to a peer that vanished).
    ///
    /// # Panics
    /// When no relay runs.
    pub fn relay_forward(&self) {
        self.signal_relay("-USR2");
    }

    fn signal_relay(&self, signal: &str) {
        let pid = self
            .fabric_api
            .as_ref()
            .and_then(|a| a.relay.as_ref())
            .expect("the relay runs")
            .id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }
}

fn tls_args(
    (cert, key): &(std::path::PathBuf, std::path::PathBuf),
    ca: &std::path::Path,
) -> Vec<String> {
    [
        ("--tls-cert", cert),
        ("--tls-key", key),
        ("--tls-ca", &ca.to_path_buf()),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
    .collect()
}
