//! Objects the API server refuses, in a file: each is skipped with a
//! warning naming it, the field and the value, never silently changed;
//! of two Services of one name, the first is kept.

mod support;

use std::process::Command;
use support::Namespace;

const MANIFEST: &str = "\
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.168.5.1}]}
---
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}
---
kind: Service
metadata: {namespace: a, name: zero}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 80}, {name: none, port: 0}]}
---
kind: Service
metadata: {namespace: a, name: minus}
spec: {clusterIP: 10.96.0.3, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: -1}}}
---
kind: Service
metadata: {namespace: a, name: nought}
spec: {clusterIP: 10.96.0.4, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}}
---
kind: Service
metadata: {namespace: a, name: long}
spec: {clusterIP: 10.96.0.5, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86401}}}
---
kind: Service
metadata: {namespace: a, name: day}
spec: {clusterIP: 10.96.0.6, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86400}}}
---
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.9, ports: [{name: http, port: 80}]}
";

#[test]
fn refused_and_duplicate_services_are_warned_of_and_not_programmed() {
    let path = std::env::temp_dir().join(format!("kpng-suspicious-{}.yaml", std::process::id()));
    std::fs::write(&path, MANIFEST).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args([
            "--node",
            "node-a",
            "to-nft",
            "--dry-run",
            "--once",
            "--metrics-bind-address",
            "",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run kpng");
    let _ = std::fs::remove_file(&path);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let file = path.display();
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    let expected = [
        "document 2 (line 9): Service a/zero: spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive; skipped".to_owned(),
        "document 3 (line 13): Service a/minus: spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: -1: must be greater than 0 and less than 86400; skipped".to_owned(),
        "document 4 (line 17): Service a/nought: spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400; skipped".to_owned(),
        "document 5 (line 21): Service a/long: spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400; skipped".to_owned(),
        "document 7 (line 29): Service a/web: also document 1 (line 5): the first is kept; skipped".to_owned(),
        "5 objects skipped, 3 applied: Service a/zero, Service a/minus, Service a/nought, Service a/long, Service a/web".to_owned(),
    ];
    assert_eq!(warnings.len(), expected.len(), "{stderr}");
    for (line, want) in warnings.iter().zip(&expected) {
        assert!(
            line.ends_with(&format!("{file}: {want}")),
            "{line}\nwanted: {want}"
        );
    }
    // Programmed: the first a/web and a/day (a day is allowed); nothing
    // of the refused ones nor of the second a/web.
    for kept in ["10.96.0.1 ", "10.96.0.6 "] {
        assert!(stdout.contains(kept), "{kept} missing:\n{stdout}");
    }
    for skipped in [
        "10.96.0.2",
        "10.96.0.3",
        "10.96.0.4",
        "10.96.0.5",
        "10.96.0.9",
    ] {
        assert!(!stdout.contains(skipped), "{skipped} programmed:\n{stdout}");
    }
}

/// A mixed file as kubectl prints it: a Node, two good Services with
/// their slices, an EndpointSlice with the address `10.1.2.300`, a
/// Service of type `LoadBalancr`, a Service with two ports named `http`.
fn mixed(extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {{name: node-a}}
  status: {{addresses: [{{type: InternalIP, address: 192.168.5.1}}]}}
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: web}}
  spec: {{clusterIP: 10.96.0.21, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: web-1, labels: {{kubernetes.io/service-name: web}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.10], nodeName: node-a}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: api}}
  spec: {{clusterIP: 10.96.0.22, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: api-1, labels: {{kubernetes.io/service-name: api}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.11], nodeName: node-a}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: api-2, labels: {{kubernetes.io/service-name: api}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.12], nodeName: node-a}}, {{addresses: [10.1.2.300], nodeName: node-a}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: lb}}
  spec: {{type: LoadBalancr, clusterIP: 10.96.0.23, ports: [{{name: http, port: 80}}]}}
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: dup}}
  spec: {{clusterIP: 10.96.0.24, ports: [{{name: http, port: 80}}, {{name: http, port: 81}}]}}
{extra}"#
    )
}

/// The lines kpng prints for the mixed file: each mistake with where it
/// is, the field and the API server's reason, then the count.
fn skipped_lines(file: &str) -> [String; 4] {
    [
        format!(
            "{file}: document 0 (List item 5, line 28): EndpointSlice t/api-2: endpoints[1].addresses[0]: \
             Invalid value: \"10.1.2.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff); skipped"
        ),
        format!(
            "{file}: document 0 (List item 6, line 34): Service t/lb: spec.type: Unsupported value: \"LoadBalancr\": \
             supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"; skipped"
        ),
        format!(
            "{file}: document 0 (List item 7, line 38): Service t/dup: spec.ports[1].name: Duplicate value: \"http\"; skipped"
        ),
        format!(
            "{file}: 3 objects skipped, 5 applied: EndpointSlice t/api-2, Service t/lb, Service t/dup"
        ),
    ]
}

/// A fresh start on the mixed file: every mistake named in one pass,
/// with the count, exit 0, and the good Services programmed.
#[test]
fn a_mixed_file_names_every_mistake_in_one_pass_and_programs_the_rest() {
    let path = std::env::temp_dir().join(format!("kpng-mixed-{}.yaml", std::process::id()));
    std::fs::write(&path, mixed("")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args(["--node", "node-a", "to-nft", "--dry-run", "--once"])
        .env_remove("RUST_LOG")
        .output()
        .expect("run kpng");
    let _ = std::fs::remove_file(&path);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    let expected = skipped_lines(&path.display().to_string());
    assert_eq!(warnings.len(), expected.len(), "{stderr}");
    for (line, want) in warnings.iter().zip(&expected) {
        assert!(line.ends_with(want.as_str()), "{line}\nwanted: {want}");
    }
    for kept in ["10.96.0.21 ", "10.96.0.22 ", "10.244.1.11 "] {
        assert!(stdout.contains(kept), "{kept} missing:\n{stdout}");
    }
    // The bad slice goes whole, as the API server refuses it whole.
    for skipped in ["10.96.0.23", "10.96.0.24", "10.1.2.30", "10.244.1.12"] {
        assert!(!stdout.contains(skipped), "{skipped} programmed:\n{stdout}");
    }
}

/// A file whose every object is bad is refused (exit 1), naming them: it
/// would delete every Service, even with `--allow-mass-delete`.
#[test]
fn a_file_of_bad_objects_only_is_refused_even_allowed_to_delete() {
    let path = std::env::temp_dir().join(format!("kpng-allbad-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "kind: Service\nmetadata: {namespace: t, name: lb}\nspec: {type: LoadBalancr, clusterIP: 10.96.0.23, ports: [{port: 80}]}\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args([
            "--node",
            "node-a",
            "to-nft",
            "--dry-run",
            "--once",
            "--allow-mass-delete",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run kpng");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {}: nothing applied, every object is skipped (1 object skipped: Service t/lb, document 0 (line 1): spec.type: Unsupported value",
            path.display()
        )),
        "{stderr}"
    );
}

/// GET `url` from namespace `ns`: `STATUS BODY`, or `ERROR …`.
fn get_in(ns: &str, url: &str) -> String {
    let script = format!(
        "import urllib.request, urllib.error\ntry:\n  r = urllib.request.urlopen('{url}', timeout=2); print(r.status, r.read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\nexcept Exception as e: print('ERROR', e)"
    );
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", &script])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Waits (20 s at most) until `done` holds; whether it did.
fn until(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// On a running `--watch` node: an edit that adds a good Service and bad
/// objects programs the good one; `/healthz` stays 200 naming the
/// skipped objects, `kpng_input_objects_skipped` counts them; a file cut
/// short keeps the state; a file renamed into place is read because of
/// the rename (its log line says so), not after a settle.
#[test]
fn a_watched_node_programs_good_edits_keeps_state_when_cut_and_reads_renames_at_once() {
    let Some(mut namespace) = Namespace::new("kpbo") else {
        return;
    };
    let ns = namespace.name.clone();
    let dir = std::env::temp_dir().join(format!("kpng-badobj-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("cluster.yaml");
    let first: String = mixed("")
        .split("\n- apiVersion: v1\n  kind: Service\n  metadata: {namespace: t, name: api}")
        .next()
        .unwrap_or_default()
        .to_owned();
    std::fs::write(&path, format!("{first}\n")).expect("write");
    let log = dir.join("kpng.log");
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            env!("CARGO_BIN_EXE_kpng"),
            "file",
            "--input",
        ])
        .arg(&path)
        .args(["--node", "node-a", "--watch", "to-nft"])
        .args(["--healthz-bind-address", "127.0.0.1:10256"])
        .env("RUST_LOG", "kpng_kube=debug,warn")
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("kpng");
    namespace.children.push(child);
    let table = || {
        let out = namespace
            .command(&["nft", "list", "table", "ip", "kpng"])
            .output()
            .expect("nft");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(until(|| table().contains("10.96.0.21")), "first state");

    // Edited in place: api (good, one bad address), lb and dup (bad).
    std::fs::write(&path, mixed("")).expect("edit");
    assert!(
        until(|| table().contains("10.96.0.22")),
        "the good Service added: {}",
        table()
    );
    let now = table();
    assert!(
        now.contains("10.244.1.11")
            && !now.contains("10.244.1.12")
            && !now.contains("10.96.0.23")
            && !now.contains("10.96.0.24"),
        "{now}"
    );
    let healthz = get_in(&ns, "http://127.0.0.1:10256/healthz");
    assert!(healthz.starts_with("200 "), "{healthz}");
    assert!(
        healthz.contains(&format!(r#""degraded":{{"input":"{}: 3 objects skipped: EndpointSlice t/api-2, document 0 (List item 5, line 28): endpoints[1].addresses[0]: Invalid value"#, path.display())),
        "{healthz}"
    );
    let metrics = get_in(&ns, "http://127.0.0.1:10249/metrics");
    assert!(
        metrics.contains("\nkpng_input_objects_skipped 3\n"),
        "{metrics}"
    );

    // Cut short: not applied, the state kept.
    let text = mixed("");
    std::fs::write(&path, &text[..text.len() - 40]).expect("cut");
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        until(|| logged().contains("manifest not applied")),
        "{}",
        logged()
    );
    let kept = table();
    assert!(
        kept.contains("10.96.0.21") && kept.contains("10.96.0.22"),
        "{kept}"
    );

    // Renamed into place: read because of the rename.
    let staged = dir.join("cluster.yaml.new");
    std::fs::write(&staged, mixed("").replace("LoadBalancr", "LoadBalancer")).expect("staged");
    std::fs::rename(&staged, &path).expect("rename");
    assert!(
        until(|| table().contains("10.96.0.23")),
        "the renamed file applied: {}",
        table()
    );
    let logged = logged();
    let rename = logged
        .find("read after rename")
        .expect("a read after the rename");
    let reloaded = logged[rename..]
        .find("manifest reloaded")
        .map(|i| &logged[rename + i..]);
    let reloaded = reloaded.and_then(|l| l.lines().next()).unwrap_or_default();
    assert!(reloaded.contains("cause=Renamed"), "{logged}");
    let metrics = get_in(&ns, "http://127.0.0.1:10249/metrics");
    assert!(
        metrics.contains("\nkpng_input_objects_skipped 2\n"),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
