//! What `kpng` does when its server is not there: the API source and the
//! agent retry with backoff, say each attempt once naming the address and
//! the cause (the first at warning level), and `--once` gives up.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `kpng args` with the default log level (no `RUST_LOG`), killed
/// after `limit`: its exit code (`None` when killed), how long it ran,
/// and its stderr.
fn run_for(args: &[&str], limit: Duration) -> (Option<i32>, Duration, String) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kpng");
    let stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    (code, elapsed, reader.join().unwrap_or_default())
}

/// The log lines at warning level or above (the last `error:` line is
/// the command's answer, not a log line).
fn loud(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// `kpng kube --once` against a closed port ends, non-zero, in a bound,
/// with one warning for the repeated failure and an error naming the
/// server. (Before: about one retry a second, for ever, and a duplicate
/// `ERROR … client error (Connect)` with no address for each.)
#[test]
fn kube_once_against_a_closed_port_gives_up_naming_the_server() {
    let dir = std::env::temp_dir().join(format!("kpng-retries-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let server = format!("http://127.0.0.1:{}", closed_port());
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\"}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n\
             users:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .expect("kubeconfig");
    let kubeconfig = kubeconfig.to_str().expect("utf-8");
    let (code, took, stderr) = run_for(
        &[
            "kube",
            "--kubeconfig",
            kubeconfig,
            "--node",
            "node-a",
            "to-file",
            "--output",
            "-",
            "--once",
        ],
        Duration::from_secs(45),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(code.is_some(), "still running after {took:?}:\n{stderr}");
    assert_ne!(code, Some(0), "{stderr}");
    // Five attempts of kube's 800 ms backoff: at most 12 s of waits.
    assert!(took < Duration::from_secs(30), "{took:?}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: cannot watch ") && last.contains(&server),
        "{last}"
    );
    assert!(last.contains("Connection refused"), "{last}");
    let loud = loud(&stderr);
    assert_eq!(loud.len(), 1, "{stderr}");
    assert!(loud[0].contains(" WARN "), "{stderr}");
    // Every attempt is one line naming the server and the cause.
    let attempts: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot watch "))
        .collect();
    assert!(attempts.len() >= 5, "{stderr}");
    for line in &attempts {
        assert!(
            line.contains(&server) && line.contains("Connection refused"),
            "{line}"
        );
    }
    // Backoff: at most 5 attempts for each of the 4 kinds, and the
    // second attempt of a kind waits longer than its first.
    assert!(attempts.len() <= 20, "{} lines:\n{stderr}", attempts.len());
    assert!(stderr.contains("(attempt 4; retrying in"), "{stderr}");
}

/// `kpng api --once` with no server at the socket ends non-zero in a
/// bound, saying it cannot connect to the socket (never that a watch was
/// lost), one warning for the repeated failure.
#[test]
fn agent_once_without_a_server_gives_up_naming_the_socket() {
    let socket =
        std::env::temp_dir().join(format!("kpng-retries-none-{}.sock", std::process::id()));
    let address = format!("unix://{}", socket.display());
    let (code, took, stderr) = run_for(
        &[
            "api", "--api", &address, "--node", "node-a", "to-file", "--output", "-", "--once",
        ],
        Duration::from_secs(30),
    );
    assert!(code.is_some(), "still running after {took:?}:\n{stderr}");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "error: cannot connect to {address} (5 attempts): "
        )),
        "{last}"
    );
    assert!(last.contains("No such file or directory"), "{last}");
    assert!(!stderr.contains("lost"), "{stderr}");
    let loud = loud(&stderr);
    assert_eq!(loud.len(), 1, "{stderr}");
    assert!(
        loud[0].contains(&format!("cannot connect to {address}: ")),
        "{stderr}"
    );
    let attempts = stderr
        .lines()
        .filter(|l| l.contains(&format!("cannot connect to {address}: ")))
        .count();
    assert_eq!(attempts, 4, "{stderr}");
}

/// An agent whose server goes away says it lost the watch from that
/// address, then that it cannot connect to it.
#[test]
fn an_agent_that_loses_its_server_says_so_then_cannot_connect() {
    let pid = std::process::id();
    let socket = std::env::temp_dir().join(format!("kpng-retries-{pid}.sock"));
    let address = format!("unix://{}", socket.display());
    let output = std::env::temp_dir().join(format!("kpng-retries-{pid}.json"));
    let _ = std::fs::remove_file(&output);
    let mut server = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "to-api", "--listen", &address])
        .env("RUST_LOG", "kpng=info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("server");
    let mut server_lines = std::io::BufReader::new(server.stderr.take().expect("stderr")).lines();
    assert!(
        server_lines.any(|l| l.is_ok_and(|l| l.contains("serving the ENLS"))),
        "the server started"
    );
    let mut agent = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args([
            "api", "--api", &address, "--node", "node-a", "to-file", "--output",
        ])
        .arg(&output)
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .expect("agent");
    let (send, lines) = mpsc::channel();
    let stderr = agent.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !output.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let synced = output.exists();
    let _ = server.kill();
    let _ = server.wait();
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let done = line.contains("cannot connect to");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = agent.kill();
    let _ = agent.wait();
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&output);
    let seen = seen.join("\n");
    assert!(synced, "the agent wrote its view:\n{seen}");
    let lost = seen
        .find(&format!("lost ENLS watch from {address} at revision 1: "))
        .unwrap_or_else(|| panic!("no loss said:\n{seen}"));
    let cannot = seen
        .find(&format!("cannot connect to {address}: "))
        .unwrap_or_else(|| panic!("no reconnection said:\n{seen}"));
    assert!(lost < cannot, "{seen}");
}
